/* rows_avx2.c — AVX2 build of the row kernels (rows_impl.h); used after a runtime CPU check. */
#define ROWS_SUFFIX avx2
#include "drivers/host/rows_impl.h"
