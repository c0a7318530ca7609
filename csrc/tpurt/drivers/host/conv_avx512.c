/* conv_avx512.c — the AVX-512F microkernel of the direct (padded-grid) convolution in conv.c.
 * Built with -mavx512f; call only after tpu_cpu_has_avx512f().
 *
 * tile (8, 48) row-major = sum_p ap[p*8 + i] * xb[boff[p] + j] for i < 8, j < 48:
 * 8 output channels times 48 consecutive grid positions, 24 zmm accumulators. Row p of the
 * implicit im2col matrix is read in place at xb + boff[p] (unaligned), so nothing is packed. */
#include <immintrin.h>
#include <stdint.h>

#include "drivers/host/conv.h"

void tpu_host_conv_dk8x48_avx512(int64_t kc, const float* ap, const float* xb, const int64_t* boff, float* tile) {
  __m512 c0[8], c1[8], c2[8];
  for (int i = 0; i < 8; ++i) c0[i] = c1[i] = c2[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const float* b = xb + boff[p];
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
    const float* a = ap + p * 8;
#define DK_ROW(i)                                    \
  do {                                               \
    const __m512 ai = _mm512_set1_ps(a[i]);          \
    c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);          \
    c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);          \
    c2[i] = _mm512_fmadd_ps(ai, b2, c2[i]);          \
  } while (0)
    DK_ROW(0); DK_ROW(1); DK_ROW(2); DK_ROW(3); DK_ROW(4); DK_ROW(5); DK_ROW(6); DK_ROW(7);
#undef DK_ROW
  }
  for (int i = 0; i < 8; ++i) {
    _mm512_storeu_ps(tile + i * 48, c0[i]);
    _mm512_storeu_ps(tile + i * 48 + 16, c1[i]);
    _mm512_storeu_ps(tile + i * 48 + 32, c2[i]);
  }
}
