/* colsum_avx2.c — AVX2 + F16C build of the low-precision column sums (colsum_impl.h); used after a runtime CPU check. */
#include <immintrin.h>
#define CS_SUFFIX avx2
#include "drivers/host/colsum_impl.h"
