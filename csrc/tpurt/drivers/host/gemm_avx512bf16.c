/* gemm_avx512bf16.c — bf16 x bf16 -> f32 GEMM microkernel on AVX512-BF16 `vdpbf16ps` (built with
 * -mavx512bf16 on top of the AVX-512 flags; called only after tpu_cpu_has_avx512bf16()).
 *
 * vdpbf16ps multiplies pairs of bf16 along k and adds both products to an f32 lane, so operands
 * are packed as k-pairs: a strip of h rows is (kp, h, 2) bf16 with kp = ceil(kc / 2), i.e. one
 * 32-bit word per (pair P, row q) at word P*h + q holding (x[q, 2P], x[q, 2P+1]); an odd kc's
 * last pair is zero-padded. The tile is 14 x 32 like the f32 kernel: 28 zmm accumulators, 2 B
 * vectors (16 columns x 2 k each), A's pair broadcast from memory, at twice the k per instruction;
 * an 8 x 32 twin serves m that 14-row strips would pad (attention's 64-row bmms). Row-major A needs no
 * packing: its pairs are already adjacent words, broadcast from A's rows (ukr_a). With the epilogue's
 * direct bf16 store the kernels round the tile to bf16 from registers (ukr_bf16 / ukr_a_bf16) instead of
 * writing an f32 block for the driver to convert.
 *
 * Numerics (the instruction's, not MXCSR's): each product of two bf16 is exact in f32; the pair is
 * added to the accumulator as (acc + x1*y1) + x0*y0 with round-to-nearest-even; denormal inputs
 * and results are flushed to zero. So results differ from the f32-widening kernels by summation
 * order, and by flushing values below 2^-126 (FLT_MIN). Legend: see gemm.h. */
#include "drivers/host/gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "common/common.h"
#include "drivers/host/gemm_avx512.h"

#define B_MR 14
#define B_NR 32
#ifndef B_KC
#define B_KC 768
#endif
#define B_MC (6 * B_MR)
#define B_NC 3072
#define STR_(x) #x
#define STR(x) STR_(x)

static inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1u);
}

/* A's pair words read in place from bf16 rows: any alignment, and they alias the uint16_t data. */
typedef int32_t sb_word_t __attribute__((may_alias, aligned(2)));
typedef uint16_t sb_half_t __attribute__((may_alias));

/* The products of one (MR, 32) tile: acc[i] = sum over k-pairs P of A's pair word (P, i) times B's pair vector P
 * (bp: (kp, 32) words). A's word (P, i) is read at a + i * a_ri + P * a_pi (bytes): a packed strip (a_ri 4,
 * a_pi 4 MR; an odd kc's last pair zero-padded) or, `inplace`, row-major A itself (a_ri 2 a_rs, a_pi 4), whose
 * odd kc's last pair is its last element alone, zero-extended (the next one may lie outside A), and whose rows
 * past mr (outside A) are not read: those accumulators repeat row mr - 1 (never stored). The same instructions
 * in the same order either way, so the same bits. Inlined with constant MR/inplace. */
static inline __attribute__((always_inline)) void sb_tile(int MR, int inplace, int64_t kc, const char* a,
                                                         int64_t a_ri, int64_t a_pi, int mr, const __m512i* bp,
                                                         __m512 (*acc)[2]) {
  int64_t roff[MR]; /* byte offset of row i's words */
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    roff[i] = (inplace && i >= mr ? mr - 1 : i) * a_ri;
  }
  const int64_t kp = inplace ? kc / 2 : (kc + 1) / 2;
#pragma GCC unroll 2
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(bp), b1 = (__m512bh)_mm512_load_si512(bp + 1);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512bh w = (__m512bh)_mm512_set1_epi32(*(const sb_word_t*)(a + roff[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w, b1);
    }
    a += a_pi;
    bp += 2;
  }
  if (inplace && (kc & 1)) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(bp), b1 = (__m512bh)_mm512_load_si512(bp + 1);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512bh w = (__m512bh)_mm512_set1_epi32((int32_t)*(const sb_half_t*)(a + roff[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w, b1);
    }
  }
}

/* The tile straight to bf16 (gemm.h's direct store, tpu_host_gemm_epi_t.out_bf16):
 * out[i * o_rs + j] = bf16(bias[j] + alpha * acc[i][j]) (bias may be NULL: bf16(alpha * acc)) for i < mr,
 * j < nr: the values the f32 write-back would leave in C, rounded as tpu_f32_to_bf16 does. */
static inline __attribute__((always_inline)) void sb_store_bf16(int MR, __m512 (*acc)[2], uint16_t* out,
                                                               int64_t o_rs, const float* bias, int mr, int nr,
                                                               float alpha) {
  const __m512 va = _mm512_set1_ps(alpha);
  const __mmask16 m0 = tpu_avx512_mask16(nr), m1 = tpu_avx512_mask16(nr - 16);
  const __mmask32 mk = mask32(nr);
  __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
  if (bias) c0 = _mm512_maskz_loadu_ps(m0, bias), c1 = _mm512_maskz_loadu_ps(m1, bias + 16);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (i < mr) {
      __m512 v0 = _mm512_mul_ps(va, acc[i][0]), v1 = _mm512_mul_ps(va, acc[i][1]);
      if (bias) v0 = _mm512_add_ps(c0, v0), v1 = _mm512_add_ps(c1, v1);
      _mm512_mask_storeu_epi16(out + i * o_rs, mk, tpu_avx512bf16_round32(v0, v1));
    }
  }
}

static inline __attribute__((always_inline)) void sb_prefetch_c(float* c, int64_t c_rs, int64_t c_cs, int mr, int nr) {
  for (int i = 0; i < mr; ++i) {
    _mm_prefetch((const char*)(c + i * c_rs), _MM_HINT_T0);
    _mm_prefetch((const char*)(c + i * c_rs + (nr - 1) * c_cs), _MM_HINT_T0);
  }
}

/* The four kernels of an MR x 32 tile (gemm.h): packed A or row-major A in place (unit column stride: the
 * driver checks ukr_a_rm), f32 C with alpha/beta or the direct bf16 store. kc counts bf16 elements along k. */
#define SB_DEFINE(MR)                                                                                              \
  static void sbgemm_ukr_##MR(int64_t kc, const void* ap, const void* bp, void* c, int64_t c_rs, int64_t c_cs,     \
                              int mr, int nr, const void* alpha, const void* beta) {                               \
    __m512 acc[MR][2];                                                                                             \
    sb_prefetch_c((float*)c, c_rs, c_cs, mr, nr);                                                                  \
    sb_tile(MR, 0, kc, (const char*)ap, 4, 4 * MR, mr, (const __m512i*)bp, acc);                                       \
    tpu_avx512_store_tile32(MR, acc, (float*)c, c_rs, c_cs, mr, nr, *(const float*)alpha, *(const float*)beta);   \
  }                                                                                                                \
  static void sbgemm_ukr_a_##MR(int64_t kc, const void* a, int64_t a_rs, int64_t a_cs, const void* bp, void* c,    \
                                int64_t c_rs, int64_t c_cs, int mr, int nr, const void* alpha, const void* beta) { \
    __m512 acc[MR][2];                                                                                             \
    sb_prefetch_c((float*)c, c_rs, c_cs, mr, nr);                                                                  \
    sb_tile(MR, 1, kc, (const char*)a, 2 * a_rs, 4, mr, (const __m512i*)bp, acc);                                      \
    tpu_avx512_store_tile32(MR, acc, (float*)c, c_rs, c_cs, mr, nr, *(const float*)alpha, *(const float*)beta);   \
  }                                                                                                                \
  static void sbgemm_ukr_bf16_##MR(int64_t kc, const void* ap, int64_t a_rs, const void* bp, uint16_t* out,        \
                                   int64_t o_rs, const float* bias, int mr, int nr, float alpha) {                 \
    __m512 acc[MR][2];                                                                                             \
    sb_tile(MR, 0, kc, (const char*)ap, 4, 4 * MR, mr, (const __m512i*)bp, acc);                                       \
    sb_store_bf16(MR, acc, out, o_rs, bias, mr, nr, alpha);                                                        \
  }                                                                                                                \
  static void sbgemm_ukr_a_bf16_##MR(int64_t kc, const void* a, int64_t a_rs, const void* bp, uint16_t* out,       \
                                     int64_t o_rs, const float* bias, int mr, int nr, float alpha) {               \
    __m512 acc[MR][2];                                                                                             \
    sb_tile(MR, 1, kc, (const char*)a, 2 * a_rs, 4, mr, (const __m512i*)bp, acc);                                      \
    sb_store_bf16(MR, acc, out, o_rs, bias, mr, nr, alpha);                                                        \
  }
SB_DEFINE(14)
SB_DEFINE(8)

/* dst (kp, h) words per strip from bf16 src (rows, kc) with element strides (rs, cs).
 * rs == 1: rows 2P and 2P+1 of the strip are contiguous; they are zero-extended to 32 bits and
 *          interleaved (second one shifted up) 16 rows at a time;
 * cs == 1: each row's pairs are already adjacent 32-bit words: a 16x16 word transpose;
 * otherwise element by element. */
static void pack_pairs(int h, int64_t rows, int64_t kc, const uint16_t* src, int64_t rs, int64_t cs,
                       uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  if (rs == 1) {
    for (int64_t P = 0; P < kp; ++P) {
      const uint16_t* s0 = src + 2 * P * cs;
      const uint16_t* s1 = s0 + cs;
      const int has1 = 2 * P + 1 < kc;
      uint32_t* d = dst + P * h;
      for (int64_t i = 0; i < rows; i += h, d += (int64_t)h * kp)
        for (int g = 0; g < h; g += 16) {
          const __mmask16 lm = tpu_avx512_mask16(rows - i - g);
          __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lm, s0 + i + g));
          if (has1)
            v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lm, s1 + i + g)), 16));
          _mm512_mask_storeu_epi32(d + g, tpu_avx512_mask16(h - g), v);
        }
    }
    return;
  }
  for (int64_t i = 0; i < rows; i += h, dst += (int64_t)h * kp) {
    const int r = (int)TPU_MIN((int64_t)h, rows - i);
    const uint16_t* s = src + i * rs;
    if (cs == 1) {
      for (int g = 0; g < h; g += 16) {
        const int gr = r - g; /* rows of this 16-group present in src */
        const __mmask16 sm = tpu_avx512_mask16(h - g);
        for (int64_t P = 0; P < kp; P += 16) {
          __m512 v[16];
          if (gr >= 16 && h - g >= 16 && 2 * P + 32 <= kc) { /* a whole 16 x 16 block: no masks, no selects */
            for (int q = 0; q < 16; ++q) v[q] = _mm512_loadu_ps((const float*)(s + (g + q) * rs + 2 * P));
            tpu_avx512_transpose16(v);
            for (int j = 0; j < 16; ++j) _mm512_storeu_ps((float*)(dst + (P + j) * h + g), v[j]);
            continue;
          }
          const __mmask32 km = mask32(kc - 2 * P);
          for (int q = 0; q < 16; ++q) {
            if (q < gr) {
              const uint16_t* sq = s + (g + q) * rs + 2 * P;
              if (2 * P + 160 <= kc) _mm_prefetch((const char*)(sq + 128), _MM_HINT_T0);
              v[q] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(km, sq));
            } else {
              v[q] = _mm512_setzero_ps();
            }
          }
          tpu_avx512_transpose16(v);
          const int np = (int)TPU_MIN((int64_t)16, kp - P);
          for (int j = 0; j < np; ++j) _mm512_mask_storeu_ps((float*)(dst + (P + j) * h + g), sm, v[j]);
        }
      }
    } else {
      for (int64_t P = 0; P < kp; ++P) {
        uint32_t* d = dst + P * h;
        for (int q = 0; q < r; ++q) {
          const uint16_t* sq = s + q * rs + 2 * P * cs;
          d[q] = (uint32_t)sq[0] | (2 * P + 1 < kc ? (uint32_t)sq[cs] << 16 : 0u);
        }
        for (int q = r; q < h; ++q) d[q] = 0;
      }
    }
  }
}

/* The same layout from an f32 source, each value rounded to bf16 (round to nearest even; NaN stays
 * NaN) by vcvtneps2bf16, which also flushes f32 denormals to zero: what vdpbf16ps would do with
 * them anyway. Serves the HI format (f32 operands at DEFAULT precision, the convolution's exact
 * bf16 copies) without a converted copy. */
static inline uint32_t bf16_bits_rne(float x) {
  return (uint32_t)(uint16_t)_mm_cvtsi128_si32((__m128i)_mm_cvtneps_pbh(_mm_set_ss(x)));
}
static void pack_pairs_f32(int h, int64_t rows, int64_t kc, const float* src, int64_t rs, int64_t cs,
                           uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2;
  if (rs == 1) {
    for (int64_t P = 0; P < kp; ++P) {
      const float* s0 = src + 2 * P * cs;
      const float* s1 = s0 + cs;
      const int has1 = 2 * P + 1 < kc;
      uint32_t* d = dst + P * h;
      for (int64_t i = 0; i < rows; i += h, d += (int64_t)h * kp)
        for (int g = 0; g < h; g += 16) {
          const __mmask16 lm = tpu_avx512_mask16(rows - i - g);
          __m512i v = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lm, s0 + i + g)));
          if (has1)
            v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
                                                          _mm512_maskz_loadu_ps(lm, s1 + i + g))), 16));
          _mm512_mask_storeu_epi32(d + g, tpu_avx512_mask16(h - g), v);
        }
    }
    return;
  }
  for (int64_t i = 0; i < rows; i += h, dst += (int64_t)h * kp) {
    const int r = (int)TPU_MIN((int64_t)h, rows - i);
    const float* s = src + i * rs;
    if (cs == 1) {
      for (int g = 0; g < h; g += 16) {
        const int gr = r - g;
        const __mmask16 sm = tpu_avx512_mask16(h - g);
        for (int64_t P = 0; P < kp; P += 16) {
          const __mmask16 m0 = tpu_avx512_mask16(kc - 2 * P), m1 = tpu_avx512_mask16(kc - 2 * P - 16);
          __m512 v[16];
          for (int q = 0; q < 16; ++q) {
            if (q < gr) { /* 32 values along k -> 16 pair words, in order */
              const float* sq = s + (g + q) * rs + 2 * P;
              v[q] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, sq + 16),
                                                                      _mm512_maskz_loadu_ps(m0, sq)));
            } else {
              v[q] = _mm512_setzero_ps();
            }
          }
          tpu_avx512_transpose16(v);
          const int np = (int)TPU_MIN((int64_t)16, kp - P);
          for (int j = 0; j < np; ++j) _mm512_mask_storeu_ps((float*)(dst + (P + j) * h + g), sm, v[j]);
        }
      }
    } else {
      for (int64_t P = 0; P < kp; ++P) {
        uint32_t* d = dst + P * h;
        for (int q = 0; q < r; ++q) {
          const float* sq = s + q * rs + 2 * P * cs;
          d[q] = bf16_bits_rne(sq[0]) | (2 * P + 1 < kc ? bf16_bits_rne(sq[cs]) << 16 : 0u);
        }
        for (int q = r; q < h; ++q) d[q] = 0;
      }
    }
  }
}

static void pack_a_f32hi(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_pairs_f32(B_MR, rows, kc, (const float*)src, rs, cs, (uint32_t*)dst);
}
static void pack_a8_f32hi(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_pairs_f32(8, rows, kc, (const float*)src, rs, cs, (uint32_t*)dst);
}
static void pack_b_f32hi(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_pairs_f32(B_NR, rows, kc, (const float*)src, rs, cs, (uint32_t*)dst);
}

static void pack_a_bf16(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_pairs(B_MR, rows, kc, (const uint16_t*)src, rs, cs, (uint32_t*)dst);
}
static void pack_a8_bf16(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_pairs(8, rows, kc, (const uint16_t*)src, rs, cs, (uint32_t*)dst);
}
static void pack_b_bf16(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_pairs(B_NR, rows, kc, (const uint16_t*)src, rs, cs, (uint32_t*)dst);
}

/* gemm.h's direct bf16 store: the values rounded as tpu_f32_to_bf16 does (tpu_avx512bf16_round32, 16 lanes at a time). */
void tpu_host_gemm_store_bf16_avx512bf16(int64_t m, int64_t n, const float* x, int64_t x_rs, const float* bias,
                                         uint16_t* out, int64_t o_rs) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * x_rs;
    uint16_t* oi = out + i * o_rs;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 mk = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
      __m512 v = _mm512_maskz_loadu_ps(mk, xi + j);
      if (bias) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, bias + j), v);
      _mm256_mask_storeu_epi16(oi + j, mk, _mm512_castsi512_si256(tpu_avx512bf16_round32(v, v))); /* v twice: one test */
    }
  }
}

const tpu_host_gemm_kernel_t tpu_host_sbgemm_kernel_avx512bf16 = {
    .name = "avx512 14x32 + avx512bf16 " STR(B_MR) "x32", /* with the f32 kernel */ .elem_size = 4, .pack_size = 2,
    .kunit = 2, .mr = B_MR, .nr = B_NR, .kc = B_KC, .mc = B_MC, .nc = B_NC, .ukr = sbgemm_ukr_14,
    .ukr_a = sbgemm_ukr_a_14, .ukr_a_rm = 1, .ukr_bf16 = sbgemm_ukr_bf16_14, .ukr_a_bf16 = sbgemm_ukr_a_bf16_14,
    .pack_a = pack_a_bf16, .pack_b = pack_b_bf16, .pack_a_hi = pack_a_f32hi, .pack_b_hi = pack_b_f32hi};
/* 8 rows: for m where 14-row strips would waste rows (attention's 64 x 64 bmms: 70 rows computed for 64) */
const tpu_host_gemm_kernel_t tpu_host_sbgemm_kernel_avx512bf16_8 = {
    .name = "avx512 14x32 + avx512bf16 8x32", .elem_size = 4, .pack_size = 2, .kunit = 2, .mr = 8, .nr = B_NR,
    .kc = B_KC, .mc = 10 * 8, .nc = B_NC, .ukr = sbgemm_ukr_8, .ukr_a = sbgemm_ukr_a_8, .ukr_a_rm = 1,
    .ukr_bf16 = sbgemm_ukr_bf16_8, .ukr_a_bf16 = sbgemm_ukr_a_bf16_8, .pack_a = pack_a8_bf16, .pack_b = pack_b_bf16,
    .pack_a_hi = pack_a8_f32hi, .pack_b_hi = pack_b_f32hi};

#endif /* x86 */
