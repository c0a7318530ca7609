/* gemm_avx512.c — AVX-512F GEMM microkernels (built with -mavx512f -mavx512bw -mavx512vl; called
 * only after tpu_cpu_has_avx512f()). 32 zmm registers allow a 2-vector-wide tile of S_MR rows:
 * S_MR x 2 accumulators, 2 B vectors, A broadcast straight from memory into the FMA. */
#include "drivers/host/gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "common/common.h"
#include "drivers/host/gemm_avx512.h"

/* Tile and blocking; -D overrides are for tuning runs of benchmarks/gemm_bench.c only. kc 512 (the
 * B strip then lives in L2, not L1) measured faster on Zen 4 than 256: half the passes over C. */
#ifndef S_MR
#define S_MR 14
#endif
#define S_NR 32
#ifndef S_KC
#define S_KC 512
#endif
#ifndef S_MC
#define S_MC (6 * S_MR)
#endif
#ifndef S_NC
#define S_NC 3072
#endif
#ifndef D_MR
#define D_MR 14
#endif
#define D_NR 16
#define STR_(x) #x
#define STR(x) STR_(x)

static void store_tile_f64(const double* t, int ld, double* c, int64_t c_rs, int64_t c_cs, int mr,
                           int nr, double alpha, double beta) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      double* cij = c + i * c_rs + j * c_cs;
      *cij = beta == 0.0 ? alpha * t[i * ld + j] : alpha * t[i * ld + j] + beta * *cij;
    }
}

/* ap (kc, S_MR), bp (kc, 32) -> C (mr, nr). Rows past mr are computed on the zero padding and
 * dropped; a C row with contiguous columns is written with (masked) vector stores. */
static void sgemm_ukr(int64_t kc, const void* ap_, const void* bp_, void* c_, int64_t c_rs,
                      int64_t c_cs, int mr, int nr, const void* alpha_, const void* beta_) {
  const float* ap = (const float*)ap_;
  const float* bp = (const float*)bp_;
  float* c = (float*)c_;
  __m512 acc[S_MR][2];
  _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < S_MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int i = 0; i < mr; ++i) {
    _mm_prefetch((const char*)(c + i * c_rs), _MM_HINT_T0);
    _mm_prefetch((const char*)(c + i * c_rs + (nr - 1) * c_cs), _MM_HINT_T0);
  }
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
    _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < S_MR; ++i) {
      __m512 a = _mm512_set1_ps(ap[i]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
    }
    ap += S_MR;
    bp += S_NR;
  }
  tpu_avx512_store_tile32(S_MR, acc, c, c_rs, c_cs, mr, nr, *(const float*)alpha_, *(const float*)beta_);
}

/* ap (kc, D_MR), bp (kc, 16) -> C (mr, nr) */
static void dgemm_ukr(int64_t kc, const void* ap_, const void* bp_, void* c_, int64_t c_rs,
                      int64_t c_cs, int mr, int nr, const void* alpha_, const void* beta_) {
  const double* ap = (const double*)ap_;
  const double* bp = (const double*)bp_;
  double* c = (double*)c_;
  __m512d acc[D_MR][2];
  _Pragma(STR(GCC unroll D_MR)) for (int i = 0; i < D_MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_pd();
  for (int i = 0; i < mr; ++i) {
    _mm_prefetch((const char*)(c + i * c_rs), _MM_HINT_T0);
    _mm_prefetch((const char*)(c + i * c_rs + (nr - 1) * c_cs), _MM_HINT_T0);
  }
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    __m512d b0 = _mm512_load_pd(bp), b1 = _mm512_load_pd(bp + 8);
    _Pragma(STR(GCC unroll D_MR)) for (int i = 0; i < D_MR; ++i) {
      __m512d a = _mm512_set1_pd(ap[i]);
      acc[i][0] = _mm512_fmadd_pd(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_pd(a, b1, acc[i][1]);
    }
    ap += D_MR;
    bp += D_NR;
  }
  const double alpha = *(const double*)alpha_, beta = *(const double*)beta_;
  if (c_cs == 1) {
    const __m512d va = _mm512_set1_pd(alpha), vb = _mm512_set1_pd(beta);
    const __mmask8 m0 = nr >= 8 ? (__mmask8)0xff : (__mmask8)((1u << nr) - 1u);
    const __mmask8 m1 = nr >= 16 ? (__mmask8)0xff : nr <= 8 ? 0 : (__mmask8)((1u << (nr - 8)) - 1u);
    _Pragma(STR(GCC unroll D_MR)) for (int i = 0; i < D_MR; ++i) {
      if (i < mr) {
        double* ci = c + i * c_rs;
        __m512d r0 = _mm512_mul_pd(va, acc[i][0]), r1 = _mm512_mul_pd(va, acc[i][1]);
        if (beta != 0.0) {
          r0 = _mm512_fmadd_pd(vb, _mm512_maskz_loadu_pd(m0, ci), r0);
          r1 = _mm512_fmadd_pd(vb, _mm512_maskz_loadu_pd(m1, ci + 8), r1);
        }
        _mm512_mask_storeu_pd(ci, m0, r0);
        _mm512_mask_storeu_pd(ci + 8, m1, r1);
      }
    }
    return;
  }
  _Alignas(64) double t[D_MR * D_NR];
  _Pragma(STR(GCC unroll D_MR)) for (int i = 0; i < D_MR; ++i) {
    _mm512_store_pd(t + i * D_NR, acc[i][0]);
    _mm512_store_pd(t + i * D_NR + 8, acc[i][1]);
  }
  store_tile_f64(t, D_NR, c, c_rs, c_cs, mr, nr, alpha, beta);
}

/* ---- small problems (gemm.h: small): no packed A, B read in place or packed once, row strips cut to the rows
 * there are. A tile of R rows (R <= S_MR, a constant) and NV vectors (NV 0: one 8-lane ymm, for at most 8
 * columns: Zen 4 retires two of those FMAs per cycle, one zmm FMA; 1 or 2: zmm): the packed kernel's products
 * in its order and its write-back, so its bits. am: A column-major (a_rs == 1: one pointer, rows at constant
 * offsets) or any strides (a pointer per row, k offset p * a_cs). */
static inline __attribute__((always_inline)) void small_tile8(int R, int am, int64_t k, const float* a, int64_t a_rs,
                                                              int64_t a_cs, const float* b, int64_t b_rs, float* c,
                                                              int64_t c_rs, int nr, float alpha, float beta) {
  __m256 acc[S_MR];
  _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  const __mmask8 m0 = (__mmask8)tpu_avx512_mask16(nr);
  const float* r[S_MR];
  _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < R; ++i) r[i] = a + (am ? i : i * a_rs);
#pragma GCC unroll 2
  for (int64_t p = 0, o = 0; p < k; ++p, o += a_cs, b += b_rs) {
    const __m256 b0 = _mm256_maskz_loadu_ps(m0, b);
    _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < R; ++i)
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(am ? a[o + i] : r[i][o]), b0, acc[i]);
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < R; ++i) { /* tpu_avx512_store_tile32's arithmetic */
    float* ci = c + i * c_rs;
    __m256 v = _mm256_mul_ps(va, acc[i]);
    if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_maskz_loadu_ps(m0, ci), v);
    _mm256_mask_storeu_ps(ci, m0, v);
  }
}
static inline __attribute__((always_inline)) void small_tile(int R, int NV, int am, int64_t k, const float* a,
                                                             int64_t a_rs, int64_t a_cs, const float* b,
                                                             int64_t b_rs, float* c, int64_t c_rs, int nr,
                                                             float alpha, float beta) {
  if (NV == 0) {
    small_tile8(R, am, k, a, a_rs, a_cs, b, b_rs, c, c_rs, nr, alpha, beta);
    return;
  }
  __m512 acc[S_MR][2];
  _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const __mmask16 m0 = tpu_avx512_mask16(nr), m1 = tpu_avx512_mask16(nr - 16);
  const float* r[S_MR];
  _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < R; ++i) r[i] = a + (am ? i : i * a_rs);
#pragma GCC unroll 2
  for (int64_t p = 0, o = 0; p < k; ++p, o += a_cs, b += b_rs) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = NV == 2 ? _mm512_maskz_loadu_ps(m1, b + 16) : b0;
    _Pragma(STR(GCC unroll S_MR)) for (int i = 0; i < R; ++i) {
      const __m512 av = _mm512_set1_ps(am ? a[o + i] : r[i][o]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      if (NV == 2) acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  tpu_avx512_store_tile32(R, acc, c, c_rs, 1, R, nr, alpha, beta);
}

typedef void (*small_tile_fn)(int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t b_rs,
                              float* c, int64_t c_rs, int nr, float alpha, float beta);
#define SMALL_TILE(R, NV, AM)                                                                                    \
  static void small_##R##_##NV##_##AM(int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,  \
                                      int64_t b_rs, float* c, int64_t c_rs, int nr, float alpha, float beta) { \
    small_tile(R, NV, AM, k, a, a_rs, a_cs, b, b_rs, c, c_rs, nr, alpha, beta);                                 \
  }
#define SMALL_ROWS(NV, AM)                                                                                     \
  SMALL_TILE(1, NV, AM) SMALL_TILE(2, NV, AM) SMALL_TILE(3, NV, AM) SMALL_TILE(4, NV, AM) SMALL_TILE(5, NV, AM) \
  SMALL_TILE(6, NV, AM) SMALL_TILE(7, NV, AM) SMALL_TILE(8, NV, AM) SMALL_TILE(9, NV, AM)                      \
  SMALL_TILE(10, NV, AM) SMALL_TILE(11, NV, AM) SMALL_TILE(12, NV, AM) SMALL_TILE(13, NV, AM)                  \
  SMALL_TILE(14, NV, AM)
SMALL_ROWS(0, 0) SMALL_ROWS(1, 0) SMALL_ROWS(2, 0) SMALL_ROWS(0, 1) SMALL_ROWS(1, 1) SMALL_ROWS(2, 1)
#define SMALL_TABLE(NV, AM)                                                                                     \
  { NULL, small_1_##NV##_##AM, small_2_##NV##_##AM, small_3_##NV##_##AM, small_4_##NV##_##AM,                  \
    small_5_##NV##_##AM, small_6_##NV##_##AM, small_7_##NV##_##AM, small_8_##NV##_##AM, small_9_##NV##_##AM,   \
    small_10_##NV##_##AM, small_11_##NV##_##AM, small_12_##NV##_##AM, small_13_##NV##_##AM, small_14_##NV##_##AM }
_Static_assert(S_MR == 14, "the small tiles' table lists rows 1..14");
static const small_tile_fn kSmallTiles[2][3][S_MR + 1] = {
    {SMALL_TABLE(0, 0), SMALL_TABLE(1, 0), SMALL_TABLE(2, 0)}, {SMALL_TABLE(0, 1), SMALL_TABLE(1, 1), SMALL_TABLE(2, 1)}};

static void pack_b_f32(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst);
static void pack_b16_f32(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst);

/* B^T rows j < rows (<= 16, each contiguous along p: B^T(j, p) = src[j * rs + p]) into columns 0..15 of a
 * (k, h) panel, zeros past rows: pack_f32's 16x16 transposes with the loop unrolled so the 16 vectors stay in
 * registers (its generic loop spills them: 0.35 of a 64 x (16 x 16 x 8) q @ k^T). */
static inline __attribute__((always_inline)) void small_pack16(int64_t rows, int64_t k, const float* src, int64_t rs,
                                                               float* dst, int h) {
  for (int64_t p = 0; p < k; p += 16) {
    const __mmask16 pm = tpu_avx512_mask16(k - p);
    __m512 v[16];
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) v[q] = q < rows ? _mm512_maskz_loadu_ps(pm, src + q * rs + p) : _mm512_setzero_ps();
    tpu_avx512_transpose16(v);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      if (p + j < k) _mm512_storeu_ps(dst + (p + j) * h, v[j]);
  }
}
static void small_pack_bt(int64_t n, int64_t k, const float* src, int64_t rs, float* dst) {
  if (n <= 16) {
    small_pack16(n, k, src, rs, dst, 16);
    return;
  }
  for (int64_t j = 0; j < n; j += S_NR, dst += S_NR * k) {
    small_pack16(TPU_MIN((int64_t)16, n - j), k, src + j * rs, rs, dst, S_NR);
    small_pack16(TPU_MIN((int64_t)16, n - j - 16), k, src + (j + 16) * rs, rs, dst + 16, S_NR);
  }
}

/* gemm.h small: B not row-major is packed into 16-wide (n <= 16) or 32-wide strips (b NULL: already); then 32-column chunks (the
 * last one 8 or 16 wide when it can be), each over row strips of at most S_MR rows split evenly (m = 16: 8 + 8). */
static void sgemm_small(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                        int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, float alpha, float beta, float* scratch) {
  int64_t b_chunk = S_NR;
  if (b_cs != 1) {
    const int h = n <= 16 ? 16 : S_NR;
    if (b && b_rs == 1) small_pack_bt(n, k, b, b_cs, scratch);
    else if (b) (h == 16 ? pack_b16_f32 : pack_b_f32)(n, k, b, b_cs, b_rs, scratch);
    b = scratch, b_rs = h, b_chunk = h * k;
  }
  const int am = a_rs == 1;
  const int64_t strips = (m + S_MR - 1) / S_MR, base = m / strips, extra = m % strips;
  for (int64_t j = 0; j < n; j += S_NR, b += b_chunk) {
    const int nr = (int)TPU_MIN((int64_t)S_NR, n - j);
    const small_tile_fn* tab = kSmallTiles[am][nr > 16 ? 2 : nr > 8];
    int64_t i = 0;
    for (int64_t s = 0; s < strips; ++s) {
      const int rows = (int)(base + (s < extra));
      tab[rows](k, a + i * a_rs, a_rs, a_cs, b, b_rs, c + i * c_rs + j, c_rs, nr, alpha, beta);
      i += rows;
    }
  }
}

/* ---- packing: MR-high strips of A / NR-high strips of B^T, layout as gemm.h describes. */

/* dst (kc, h) per strip from src (rows, kc): strips of h <= 32 rows.
 * rs == 1: the strip is contiguous for each p (masked vector copies);
 * cs == 1: each row is contiguous along p (16x16 register transposes);
 * otherwise element by element. */
static inline void pack_f32(int h, int64_t rows, int64_t kc, const float* src, int64_t rs, int64_t cs,
                            float* dst) {
  if (rs == 1) { /* row p of the source is read once, front to back, into every strip */
    for (int64_t p = 0; p < kc; ++p) {
      const float* sp = src + p * cs;
      float* d = dst + p * h;
      for (int64_t i = 0; i < rows; i += h, d += (int64_t)h * kc)
        for (int g = 0; g < h; g += 16) {
          __m512 v = _mm512_maskz_loadu_ps(tpu_avx512_mask16(rows - i - g), sp + i + g);
          _mm512_mask_storeu_ps(d + g, tpu_avx512_mask16(h - g), v);
        }
    }
    return;
  }
  for (int64_t i = 0; i < rows; i += h, dst += (int64_t)h * kc) {
    const int r = (int)TPU_MIN((int64_t)h, rows - i);
    const float* s = src + i * rs;
    if (cs == 1) {
      for (int g = 0; g < h; g += 16) {
        const int gr = r - g; /* rows of this 16-group present in src */
        const __mmask16 sm = tpu_avx512_mask16(h - g);
        for (int64_t p = 0; p < kc; p += 16) {
          const __mmask16 pm = tpu_avx512_mask16(kc - p);
          __m512 v[16];
          for (int q = 0; q < 16; ++q) {
            if (q < gr) {
              const float* sq = s + (g + q) * rs + p;
              if (p + 80 <= kc) _mm_prefetch((const char*)(sq + 64), _MM_HINT_T0);
              v[q] = _mm512_maskz_loadu_ps(pm, sq);
            } else {
              v[q] = _mm512_setzero_ps();
            }
          }
          tpu_avx512_transpose16(v);
          const int np = (int)TPU_MIN((int64_t)16, kc - p);
          for (int j = 0; j < np; ++j) _mm512_mask_storeu_ps(dst + (p + j) * h + g, sm, v[j]);
        }
      }
    } else {
      for (int64_t p = 0; p < kc; ++p) {
        float* d = dst + p * h;
        for (int q = 0; q < r; ++q) d[q] = s[q * rs + p * cs];
        for (int q = r; q < h; ++q) d[q] = 0.0f;
      }
    }
  }
}

static void pack_a_f32(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_f32(S_MR, rows, kc, (const float*)src, rs, cs, (float*)dst);
}
static void pack_b_f32(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_f32(S_NR, rows, kc, (const float*)src, rs, cs, (float*)dst);
}
static void pack_b16_f32(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst) {
  pack_f32(16, rows, kc, (const float*)src, rs, cs, (float*)dst);
}

/* acc[j] += sum_p x[p*xs] * b[p*b_rs + j]: four rows of B per pass over acc. */
static void sgemv_rows_avx512(int64_t n, int64_t k, const float* x, int64_t xs, const float* b,
                              int64_t b_rs, float* acc) {
  int64_t p = 0;
  for (; p + 4 <= k; p += 4) {
    const float* b0 = b + p * b_rs;
    const float* b1 = b0 + b_rs;
    const float* b2 = b1 + b_rs;
    const float* b3 = b2 + b_rs;
    const __m512 x0 = _mm512_set1_ps(x[p * xs]), x1 = _mm512_set1_ps(x[(p + 1) * xs]);
    const __m512 x2 = _mm512_set1_ps(x[(p + 2) * xs]), x3 = _mm512_set1_ps(x[(p + 3) * xs]);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 mk = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
      __m512 s = _mm512_maskz_loadu_ps(mk, acc + j);
      s = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(mk, b0 + j), s);
      s = _mm512_fmadd_ps(x1, _mm512_maskz_loadu_ps(mk, b1 + j), s);
      s = _mm512_fmadd_ps(x2, _mm512_maskz_loadu_ps(mk, b2 + j), s);
      s = _mm512_fmadd_ps(x3, _mm512_maskz_loadu_ps(mk, b3 + j), s);
      _mm512_mask_storeu_ps(acc + j, mk, s);
    }
  }
  for (; p < k; ++p) {
    const float* b0 = b + p * b_rs;
    const __m512 x0 = _mm512_set1_ps(x[p * xs]);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 mk = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
      __m512 s = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(mk, b0 + j), _mm512_maskz_loadu_ps(mk, acc + j));
      _mm512_mask_storeu_ps(acc + j, mk, s);
    }
  }
}

static float sdot_avx512(int64_t k, const float* x, const float* y) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t p = 0;
  for (; p + 64 <= k; p += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p), _mm512_loadu_ps(y + p), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 16), _mm512_loadu_ps(y + p + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 32), _mm512_loadu_ps(y + p + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 48), _mm512_loadu_ps(y + p + 48), s3);
  }
  for (; p < k; p += 16) {
    const __mmask16 mk = k - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - p)) - 1u);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x + p), _mm512_maskz_loadu_ps(mk, y + p), s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

/* gemm.h: out row = bf16(bias + x row), tpu_f32_to_bf16's rounding (nearest even, NaN -> quiet NaN) 16 lanes at a time */
void tpu_host_gemm_store_bf16_avx512(int64_t m, int64_t n, const float* x, int64_t x_rs, const float* bias,
                                     uint16_t* out, int64_t o_rs) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * x_rs;
    uint16_t* oi = out + i * o_rs;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      __m512 v = _mm512_loadu_ps(xi + j);
      if (bias) v = _mm512_add_ps(_mm512_loadu_ps(bias + j), v);
      _mm256_storeu_si256((__m256i*)(oi + j), tpu_avx512_bf16_round16(v));
    }
    if (j < n) {
      const __mmask16 mk = (__mmask16)((1u << (n - j)) - 1u);
      __m512 v = _mm512_maskz_loadu_ps(mk, xi + j);
      if (bias) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, bias + j), v);
      _mm256_mask_storeu_epi16(oi + j, mk, tpu_avx512_bf16_round16(v));
    }
  }
}

/* gemm.h widen_bf16: 16 bf16 -> f32 lanes a step (zero-extend, shift into the high half), masked at the row end */
static void widen_bf16_avx512(int64_t rows, int64_t cols, const uint16_t* src, int64_t rs, float* dst) {
  for (int64_t i = 0; i < rows; ++i, src += rs, dst += cols)
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 mk = tpu_avx512_mask16(cols - j);
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, src + j));
      _mm512_mask_storeu_ps(dst + j, mk, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
}

const tpu_host_gemm_kernel_t tpu_host_sgemm_kernel_avx512 = {
    .name = "avx512 " STR(S_MR) "x32", .elem_size = 4, .mr = S_MR, .nr = S_NR, .kc = S_KC,
    .mc = S_MC, .nc = S_NC, .ukr = sgemm_ukr,
    .pack_a = pack_a_f32, .pack_b = pack_b_f32, .gemv_rows = sgemv_rows_avx512,
    .sdot = sdot_avx512, .small = sgemm_small, .widen_bf16 = widen_bf16_avx512};
const tpu_host_gemm_kernel_t tpu_host_dgemm_kernel_avx512 = {
    .name = "avx512 " STR(D_MR) "x16", .elem_size = 8, .mr = D_MR, .nr = D_NR, .kc = 256,
    .mc = 5 * D_MR, .nc = 2048, .ukr = dgemm_ukr};

#endif /* x86 */
