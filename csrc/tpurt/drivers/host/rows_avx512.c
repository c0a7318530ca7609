/* rows_avx512.c — AVX-512 build of the row kernels (rows_impl.h); used after a runtime CPU check. */
#define ROWS_SUFFIX avx512
#include "drivers/host/rows_impl.h"
