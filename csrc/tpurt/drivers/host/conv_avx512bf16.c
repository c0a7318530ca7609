/* conv_avx512bf16.c — the AVX512-BF16 variant of conv.c's gathered-operand ("gk") microkernel.
 * Built with -mavx512bf16; call only after tpu_cpu_has_avx512bf16().
 *
 * tile (8, 16*ng) (+)= sum over pairs p of A[aoff[p] + ash[i] + e] * B[boff[p] + bsh[j] + 2 l + e], e = 0, 1,
 * for row i < 8 and lane l < 16 of column group j < ng: both operands are bf16, stored in pairs along
 * the reduction. Row i's pair is one 32-bit word (two adjacent bf16, e.g. two channels of a
 * channels-last plane) broadcast to every lane; a column group is 32 bf16 (16 lanes x the pair). One
 * `vdpbf16ps` multiplies both pairs and adds the two exact products to the f32 lane, as
 * (acc + a1 b1) + a0 b0; denormal inputs and results are flushed to zero (the instruction ignores
 * MXCSR). Fixed summation order (p ascending), so results do not depend on the thread count. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "drivers/host/conv.h"

static inline __m512bh gk_pair(const uint16_t* p) {
  int32_t v;
  memcpy(&v, p, sizeof(v));
  return (__m512bh)_mm512_set1_epi32(v);
}

#define GKB_BODY(NG)                                                                          \
  __m512 c[8][NG];                                                                            \
  for (int i = 0; i < 8; ++i)                                                                 \
    for (int j = 0; j < NG; ++j) c[i][j] = acc ? _mm512_loadu_ps(tile + i * 48 + j * 16) : _mm512_setzero_ps(); \
  const uint16_t* r0 = A + ash[0]; const uint16_t* r1 = A + ash[1]; const uint16_t* r2 = A + ash[2]; \
  const uint16_t* r3 = A + ash[3]; const uint16_t* r4 = A + ash[4]; const uint16_t* r5 = A + ash[5]; \
  const uint16_t* r6 = A + ash[6]; const uint16_t* r7 = A + ash[7];                           \
  for (int64_t p = 0; p < np; ++p) {                                                          \
    const uint16_t* b = B + boff[p];                                                          \
    const int64_t ao = aoff[p];                                                               \
    __m512bh bv[NG];                                                                          \
    for (int j = 0; j < NG; ++j) bv[j] = (__m512bh)_mm512_loadu_si512((const void*)(b + bsh[j])); \
    __m512bh a;                                                                               \
    a = gk_pair(r0 + ao); for (int j = 0; j < NG; ++j) c[0][j] = _mm512_dpbf16_ps(c[0][j], a, bv[j]); \
    a = gk_pair(r1 + ao); for (int j = 0; j < NG; ++j) c[1][j] = _mm512_dpbf16_ps(c[1][j], a, bv[j]); \
    a = gk_pair(r2 + ao); for (int j = 0; j < NG; ++j) c[2][j] = _mm512_dpbf16_ps(c[2][j], a, bv[j]); \
    a = gk_pair(r3 + ao); for (int j = 0; j < NG; ++j) c[3][j] = _mm512_dpbf16_ps(c[3][j], a, bv[j]); \
    a = gk_pair(r4 + ao); for (int j = 0; j < NG; ++j) c[4][j] = _mm512_dpbf16_ps(c[4][j], a, bv[j]); \
    a = gk_pair(r5 + ao); for (int j = 0; j < NG; ++j) c[5][j] = _mm512_dpbf16_ps(c[5][j], a, bv[j]); \
    a = gk_pair(r6 + ao); for (int j = 0; j < NG; ++j) c[6][j] = _mm512_dpbf16_ps(c[6][j], a, bv[j]); \
    a = gk_pair(r7 + ao); for (int j = 0; j < NG; ++j) c[7][j] = _mm512_dpbf16_ps(c[7][j], a, bv[j]); \
  }                                                                                           \
  for (int i = 0; i < 8; ++i)                                                                 \
    for (int j = 0; j < NG; ++j) _mm512_storeu_ps(tile + i * 48 + j * 16, c[i][j]);

static void gkb_1(int64_t np, const uint16_t* A, const int64_t* aoff, const int64_t* ash, const uint16_t* B,
                  const int64_t* boff, const int64_t* bsh, float* tile, int acc) { GKB_BODY(1) }
static void gkb_2(int64_t np, const uint16_t* A, const int64_t* aoff, const int64_t* ash, const uint16_t* B,
                  const int64_t* boff, const int64_t* bsh, float* tile, int acc) { GKB_BODY(2) }
static void gkb_3(int64_t np, const uint16_t* A, const int64_t* aoff, const int64_t* ash, const uint16_t* B,
                  const int64_t* boff, const int64_t* bsh, float* tile, int acc) { GKB_BODY(3) }
#undef GKB_BODY

void tpu_host_conv_gk_bf16_avx512bf16(int ng, int64_t np, const uint16_t* A, const int64_t* aoff, const int64_t* ash,
                                      const uint16_t* B, const int64_t* boff, const int64_t* bsh, float* tile,
                                      int acc) {
  if (ng == 1) gkb_1(np, A, aoff, ash, B, boff, bsh, tile, acc);
  else if (ng == 2) gkb_2(np, A, aoff, ash, B, boff, bsh, tile, acc);
  else gkb_3(np, A, aoff, ash, B, boff, bsh, tile, acc);
}

/* 12 rows x 1-2 lane groups (tile rows 32 floats apart, no accumulate): at ng 2 the 8-row tile keeps 16
 * accumulators and loads its two lane groups per 8 rows; this one keeps 24 and loads them per 12 rows, the
 * same register budget as the 8 x 3 tile. Same summation order per element as the 8-row tile. */
#define GKB12_BODY(NG)                                                                        \
  __m512 c[12][NG];                                                                           \
  for (int i = 0; i < 12; ++i)                                                                \
    for (int j = 0; j < NG; ++j) c[i][j] = _mm512_setzero_ps();                               \
  const uint16_t* r[12];                                                                      \
  for (int i = 0; i < 12; ++i) r[i] = A + ash[i];                                             \
  for (int64_t p = 0; p < np; ++p) {                                                          \
    const uint16_t* b = B + boff[p];                                                          \
    const int64_t ao = aoff[p];                                                               \
    __m512bh bv[NG];                                                                          \
    for (int j = 0; j < NG; ++j) bv[j] = (__m512bh)_mm512_loadu_si512((const void*)(b + bsh[j])); \
    for (int i = 0; i < 12; ++i) {                                                            \
      const __m512bh a = gk_pair(r[i] + ao);                                                  \
      for (int j = 0; j < NG; ++j) c[i][j] = _mm512_dpbf16_ps(c[i][j], a, bv[j]);             \
    }                                                                                         \
  }                                                                                           \
  for (int i = 0; i < 12; ++i)                                                                \
    for (int j = 0; j < NG; ++j) _mm512_storeu_ps(tile + i * 32 + j * 16, c[i][j]);

static void gkb12_1(int64_t np, const uint16_t* A, const int64_t* aoff, const int64_t* ash, const uint16_t* B,
                    const int64_t* boff, const int64_t* bsh, float* tile) { GKB12_BODY(1) }
static void gkb12_2(int64_t np, const uint16_t* A, const int64_t* aoff, const int64_t* ash, const uint16_t* B,
                    const int64_t* boff, const int64_t* bsh, float* tile) { GKB12_BODY(2) }
#undef GKB12_BODY

void tpu_host_conv_gk12_bf16_avx512bf16(int ng, int64_t np, const uint16_t* A, const int64_t* aoff,
                                        const int64_t* ash, const uint16_t* B, const int64_t* boff,
                                        const int64_t* bsh, float* tile) {
  if (ng == 1) gkb12_1(np, A, aoff, ash, B, boff, bsh, tile);
  else gkb12_2(np, A, aoff, ash, B, boff, bsh, tile);
}
