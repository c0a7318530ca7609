/* colsum_avx512.c — AVX-512 build of the low-precision column sums (colsum_impl.h); used after a runtime CPU check. */
#include <immintrin.h>
#define CS_SUFFIX avx512
#include "drivers/host/colsum_impl.h"
