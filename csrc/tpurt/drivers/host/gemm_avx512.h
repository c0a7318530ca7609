/* gemm_avx512.h — register helpers shared by the AVX-512 GEMM files (gemm_avx512.c,
 * gemm_avx512bf16.c). Include only from files the Makefile builds with -mavx512f/bw/vl. */
#ifndef TPURT_DRIVERS_HOST_GEMM_AVX512_H_
#define TPURT_DRIVERS_HOST_GEMM_AVX512_H_

#include <immintrin.h>
#include <stdint.h>

static inline __mmask16 tpu_avx512_mask16(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* In-register 16x16 transpose of 32-bit elements: r[i][j] -> r[j][i]. */
static inline void tpu_avx512_transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) { /* per 128-bit lane: 4x4 blocks of rows 4g.. transposed */
    r[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) { /* then a 4x4 transpose of the 128-bit lanes */
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
  }
}

/* bf16 bits of 16 f32 values with tpu_f32_to_bf16's rounding (nearest even, NaN quieted, denormals kept),
 * in integer arithmetic (AVX-512F/BW). */
static inline __m256i tpu_avx512_bf16_round16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                   _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

#if defined(__AVX512BF16__)
/* bf16 bits of v0 (the low 16 words) and v1 (the high 16) as tpu_f32_to_bf16 gives them: vcvtne2ps2bf16 rounds
 * to nearest even and quiets NaN the same way but flushes f32 denormals (exponent 0, mantissa not 0), so 32
 * lanes holding one take the integer rounding above instead: the same bits everywhere (gemm_avx512bf16.c's
 * direct store, tile_impl.h's bf16 stores; gcc's vectorization of tpu_f32_to_bf16 took ~10 instructions a vector). */
static inline __attribute__((always_inline)) __m512i tpu_avx512bf16_round32(__m512 v0, __m512 v1) {
  const __m512i expo = _mm512_set1_epi32(0x7f800000), mant = _mm512_set1_epi32(0x007fffff);
  const __m512i u0 = _mm512_castps_si512(v0), u1 = _mm512_castps_si512(v1);
  const __mmask16 d0 = _mm512_mask_testn_epi32_mask(_mm512_test_epi32_mask(u0, mant), u0, expo);
  const __mmask16 d1 = _mm512_mask_testn_epi32_mask(_mm512_test_epi32_mask(u1, mant), u1, expo);
  if (__builtin_expect((d0 | d1) != 0, 0))
    return _mm512_inserti64x4(_mm512_castsi256_si512(tpu_avx512_bf16_round16(v0)), tpu_avx512_bf16_round16(v1), 1);
  return (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
}
#endif

/* Write-back of an (MR, 32) f32 accumulator tile: C[i, j] = alpha * acc + beta * C (beta == 0:
 * C not read) for i < mr, j < nr. Contiguous C rows use masked vector stores, other layouts a
 * spilled tile. Always inlined with a constant MR so acc stays in registers. */
static inline __attribute__((always_inline)) void tpu_avx512_store_tile32(int MR, __m512 (*acc)[2], float* c,
                                                                         int64_t c_rs, int64_t c_cs, int mr, int nr,
                                                                         float alpha, float beta) {
  if (c_cs == 1) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const __mmask16 m0 = tpu_avx512_mask16(nr), m1 = tpu_avx512_mask16(nr - 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      if (i < mr) {
        float* ci = c + i * c_rs;
        __m512 r0 = _mm512_mul_ps(va, acc[i][0]), r1 = _mm512_mul_ps(va, acc[i][1]);
        if (beta != 0.0f) {
          r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), r0);
          r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), r1);
        }
        _mm512_mask_storeu_ps(ci, m0, r0);
        _mm512_mask_storeu_ps(ci + 16, m1, r1);
      }
    }
    return;
  }
  _Alignas(64) float t[16 * 32];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) { /* constant indices: acc stays in registers */
    _mm512_store_ps(t + i * 32, acc[i][0]);
    _mm512_store_ps(t + i * 32 + 16, acc[i][1]);
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      float* cij = c + i * c_rs + j * c_cs;
      *cij = beta == 0.0f ? alpha * t[i * 32 + j] : alpha * t[i * 32 + j] + beta * *cij;
    }
}

#endif /* TPURT_DRIVERS_HOST_GEMM_AVX512_H_ */
