/* gemm_avx2.c — AVX2+FMA GEMM microkernels (built with -mavx2 -mfma; called only after
 * tpu_cpu_has_avx2_fma()). f32: 6x16 tile = 12 ymm accumulators + 2 B vectors + 1 broadcast,
 * the classic Haswell-to-Zen shape: 8 loads per 12 FMAs. f64: 6x8 the same way. */
#include "drivers/host/gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "common/common.h"

#define S_MR 6
#define S_NR 16
#define D_MR 6
#define D_NR 8

/* Edge tiles and strided C: spill the accumulators, write back element by element. */
static void store_tile_f32(const float* t, int ld, float* c, int64_t c_rs, int64_t c_cs, int mr, int nr,
                           float alpha, float beta) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      float* cij = c + i * c_rs + j * c_cs;
      *cij = beta == 0.0f ? alpha * t[i * ld + j] : alpha * t[i * ld + j] + beta * *cij;
    }
}
static void store_tile_f64(const double* t, int ld, double* c, int64_t c_rs, int64_t c_cs, int mr,
                           int nr, double alpha, double beta) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      double* cij = c + i * c_rs + j * c_cs;
      *cij = beta == 0.0 ? alpha * t[i * ld + j] : alpha * t[i * ld + j] + beta * *cij;
    }
}

/* The 6x16 tile's write-back: alpha * acc (+ beta * C), full tiles with vector stores. */
static inline __attribute__((always_inline)) void store_6x16(__m256 acc[S_MR][2], float* c, int64_t c_rs,
                                                             int64_t c_cs, int mr, int nr, const void* alpha_,
                                                             const void* beta_) {
  const float alpha = *(const float*)alpha_, beta = *(const float*)beta_;
  if (mr == S_MR && nr == S_NR && c_cs == 1) {
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
    for (int i = 0; i < S_MR; ++i) {
      float* ci = c + i * c_rs;
      __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
      if (beta != 0.0f) {
        r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), r0);
        r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), r1);
      }
      _mm256_storeu_ps(ci, r0);
      _mm256_storeu_ps(ci + 8, r1);
    }
    return;
  }
  _Alignas(32) float t[S_MR * S_NR];
#pragma GCC unroll 6
  for (int i = 0; i < S_MR; ++i) { /* constant indices keep acc in registers */
    _mm256_store_ps(t + i * S_NR, acc[i][0]);
    _mm256_store_ps(t + i * S_NR + 8, acc[i][1]);
  }
  store_tile_f32(t, S_NR, c, c_rs, c_cs, mr, nr, alpha, beta);
}

/* ap (kc, 6), bp (kc, 16) -> C (mr, nr) */
static void sgemm_ukr_6x16(int64_t kc, const void* ap_, const void* bp_, void* c_, int64_t c_rs,
                           int64_t c_cs, int mr, int nr, const void* alpha_, const void* beta_) {
  const float* ap = (const float*)ap_;
  const float* bp = (const float*)bp_;
  float* c = (float*)c_;
  __m256 acc[S_MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < S_MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int i = 0; i < mr; ++i) _mm_prefetch((const char*)(c + i * c_rs), _MM_HINT_T0);
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
    for (int i = 0; i < S_MR; ++i) {
      __m256 a = _mm256_broadcast_ss(ap + i);
      acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
    }
    ap += S_MR;
    bp += S_NR;
  }
  store_6x16(acc, c, c_rs, c_cs, mr, nr, alpha_, beta_);
}

/* The same tile with A read in place (no packed strip): A(i, p) = a[i * a_rs + p * a_cs] for i < mr; the
 * rows past mr re-read row mr - 1 (never stored). Same products in the same order as the packed kernel,
 * so the same bits. Rows with unit column stride (row-major A) index six row pointers by p. */
static void sgemm_ukr_6x16_a(int64_t kc, const void* a_, int64_t a_rs, int64_t a_cs, const void* bp_, void* c_,
                             int64_t c_rs, int64_t c_cs, int mr, int nr, const void* alpha_, const void* beta_) {
  const float* a = (const float*)a_;
  const float* bp = (const float*)bp_;
  float* c = (float*)c_;
  const float* r[S_MR];
#pragma GCC unroll 6
  for (int i = 0; i < S_MR; ++i) r[i] = a + (i < mr ? i : mr - 1) * a_rs;
  __m256 acc[S_MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < S_MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int i = 0; i < mr; ++i) _mm_prefetch((const char*)(c + i * c_rs), _MM_HINT_T0);
  if (a_cs == 1) {
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; ++p) {
      __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
      for (int i = 0; i < S_MR; ++i) {
        __m256 av = _mm256_broadcast_ss(r[i] + p);
        acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
      }
      bp += S_NR;
    }
  } else {
#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; ++p) {
      __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
      const int64_t o = p * a_cs;
#pragma GCC unroll 6
      for (int i = 0; i < S_MR; ++i) {
        __m256 av = _mm256_broadcast_ss(r[i] + o);
        acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
      }
      bp += S_NR;
    }
  }
  store_6x16(acc, c, c_rs, c_cs, mr, nr, alpha_, beta_);
}

/* ap (kc, 6), bp (kc, 8) -> C (mr, nr) */
static void dgemm_ukr_6x8(int64_t kc, const void* ap_, const void* bp_, void* c_, int64_t c_rs,
                          int64_t c_cs, int mr, int nr, const void* alpha_, const void* beta_) {
  const double* ap = (const double*)ap_;
  const double* bp = (const double*)bp_;
  double* c = (double*)c_;
  __m256d acc[D_MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < D_MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_pd();
  for (int i = 0; i < mr; ++i) _mm_prefetch((const char*)(c + i * c_rs), _MM_HINT_T0);
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    __m256d b0 = _mm256_load_pd(bp), b1 = _mm256_load_pd(bp + 4);
#pragma GCC unroll 6
    for (int i = 0; i < D_MR; ++i) {
      __m256d a = _mm256_broadcast_sd(ap + i);
      acc[i][0] = _mm256_fmadd_pd(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_pd(a, b1, acc[i][1]);
    }
    ap += D_MR;
    bp += D_NR;
  }
  const double alpha = *(const double*)alpha_, beta = *(const double*)beta_;
  if (mr == D_MR && nr == D_NR && c_cs == 1) {
    const __m256d va = _mm256_set1_pd(alpha), vb = _mm256_set1_pd(beta);
#pragma GCC unroll 6
    for (int i = 0; i < D_MR; ++i) {
      double* ci = c + i * c_rs;
      __m256d r0 = _mm256_mul_pd(va, acc[i][0]), r1 = _mm256_mul_pd(va, acc[i][1]);
      if (beta != 0.0) {
        r0 = _mm256_fmadd_pd(vb, _mm256_loadu_pd(ci), r0);
        r1 = _mm256_fmadd_pd(vb, _mm256_loadu_pd(ci + 4), r1);
      }
      _mm256_storeu_pd(ci, r0);
      _mm256_storeu_pd(ci + 4, r1);
    }
    return;
  }
  _Alignas(32) double t[D_MR * D_NR];
#pragma GCC unroll 6
  for (int i = 0; i < D_MR; ++i) {
    _mm256_store_pd(t + i * D_NR, acc[i][0]);
    _mm256_store_pd(t + i * D_NR + 4, acc[i][1]);
  }
  store_tile_f64(t, D_NR, c, c_rs, c_cs, mr, nr, alpha, beta);
}

/* ---- packing: MR-high strips of A / NR-high strips of B^T, layout as gemm.h describes. */

/* In-register 8x8 transpose: r[i][j] -> r[j][i]. */
static inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 2; ++g) { /* per 128-bit lane: 4x4 blocks of rows 4g.. transposed */
    u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}

static inline __m256i mask8(int64_t n) { /* lanes < n */
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)TPU_MAX((int64_t)0, TPU_MIN(n, (int64_t)8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* dst (kc, h) per strip from src (rows, kc), h a multiple of 2 up to 16.
 * rs == 1: the strip is contiguous for each p (vector copies, row p read front to back);
 * cs == 1: each row is contiguous along p (8x8 register transposes);
 * otherwise element by element. */
static inline void pack_f32(int h, int64_t rows, int64_t kc, const float* src, int64_t rs, int64_t cs,
                            float* dst) {
  if (rs == 1) {
    for (int64_t p = 0; p < kc; ++p) {
      const float* sp = src + p * cs;
      float* d = dst + p * h;
      for (int64_t i = 0; i < rows; i += h, d += (int64_t)h * kc)
        for (int g = 0; g < h; g += 8) {
          const int64_t have = rows - i - g;
          __m256 v = have >= 8 ? _mm256_loadu_ps(sp + i + g) : _mm256_maskload_ps(sp + i + g, mask8(have));
          if (h - g >= 8 || (h < 8 && p + 1 < kc)) _mm256_storeu_ps(d + g, v); /* spill: see below */
          else _mm256_maskstore_ps(d + g, mask8(h - g), v);
        }
    }
    return;
  }
  for (int64_t i = 0; i < rows; i += h, dst += (int64_t)h * kc) {
    const int r = (int)TPU_MIN((int64_t)h, rows - i);
    const float* s = src + i * rs;
    if (cs == 1) {
      for (int g = 0; g < h; g += 8) {
        const int gr = r - g; /* rows of this 8-group present in src */
        const __m256i sm = mask8(h - g);
        for (int64_t p = 0; p < kc; p += 8) {
          const int64_t np = TPU_MIN((int64_t)8, kc - p);
          const __m256i pm = mask8(np);
          __m256 v[8];
          for (int q = 0; q < 8; ++q) {
            const float* sq = s + (g + q) * rs + p;
            v[q] = q >= gr ? _mm256_setzero_ps() : np == 8 ? _mm256_loadu_ps(sq) : _mm256_maskload_ps(sq, pm);
          }
          transpose8(v);
          /* A strip narrower than 8 (h = 6: A's MR): a full store spills 8 - (h - g) lanes into the
           * next p's slots, which the next store overwrites; only the strip's last p needs the mask (h < 8
           * only: with h = 12 the spill would land in the next p's first group, already written)
           * (vmaskmovps stores are microcoded on AMD: packing A cost a third of the kernel's time). */
          for (int j = 0; j < np; ++j) {
            if (h - g >= 8 || (h < 8 && p + j + 1 < kc)) _mm256_storeu_ps(dst + (p + j) * h + g, v[j]);
            else _mm256_maskstore_ps(dst + (p + j) * h + g, sm, v[j]);
          }
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

/* ---- small problems (gemm.h: small), beta 0 only (.small_beta0: the packed kernel's edge tiles apply beta
 * without a fused multiply-add, its full tiles with one, so only alpha * acc has the same bits whatever the
 * tiling). A tile of R <= 6 rows (a constant) and NV ymm (16 * NV >= 8 * its columns): A in place (one pointer
 * for column-major A, else a pointer per row), B rows at b + p * b_rs (full loads; only the last 8-column
 * group of a chunk narrower than 16 is read with a mask), the packed kernel's products in its order. */
static inline __attribute__((always_inline)) void small_tile(int R, int NV, int am, int64_t k, const float* a,
                                                             int64_t a_rs, int64_t a_cs, const float* b, int64_t b_rs,
                                                             float* c, int64_t c_rs, int nr, float alpha) {
  __m256 acc[S_MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const float* r[S_MR];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) r[i] = a + (am ? i : i * a_rs);
  const int last = NV - 1, partial = nr < 8 * NV; /* the last vector is masked */
  const __m256i mk = mask8(nr - 8 * last);
#pragma GCC unroll 2
  for (int64_t p = 0, o = 0; p < k; ++p, o += a_cs, b += b_rs) {
    __m256 bv[2];
    bv[0] = last == 0 && partial ? _mm256_maskload_ps(b, mk) : _mm256_loadu_ps(b);
    if (NV == 2) bv[1] = partial ? _mm256_maskload_ps(b + 8, mk) : _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const __m256 av = _mm256_broadcast_ss(am ? a + o + i : r[i] + o);
      acc[i][0] = _mm256_fmadd_ps(av, bv[0], acc[i][0]);
      if (NV == 2) acc[i][1] = _mm256_fmadd_ps(av, bv[1], acc[i][1]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * c_rs;
    for (int v = 0; v < NV; ++v) {
      const __m256 x = _mm256_mul_ps(va, acc[i][v]);
      if (v < last || !partial) {
        _mm256_storeu_ps(ci + 8 * v, x);
      } else { /* no vmaskmovps store: microcoded on AMD */
        _Alignas(32) float t[8];
        _mm256_store_ps(t, x);
        for (int j = 0; j < nr - 8 * v; ++j) ci[8 * v + j] = t[j];
      }
    }
  }
}

typedef void (*small_tile_fn)(int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b, int64_t b_rs,
                              float* c, int64_t c_rs, int nr, float alpha);
#define SMALL_TILE(R, NV, AM)                                                                                    \
  static void small_##R##_##NV##_##AM(int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,  \
                                      int64_t b_rs, float* c, int64_t c_rs, int nr, float alpha) {             \
    small_tile(R, NV, AM, k, a, a_rs, a_cs, b, b_rs, c, c_rs, nr, alpha);                                       \
  }
#define SMALL_ROWS(NV, AM) \
  SMALL_TILE(1, NV, AM) SMALL_TILE(2, NV, AM) SMALL_TILE(3, NV, AM) SMALL_TILE(4, NV, AM) SMALL_TILE(5, NV, AM) SMALL_TILE(6, NV, AM)
SMALL_ROWS(1, 0) SMALL_ROWS(2, 0) SMALL_ROWS(1, 1) SMALL_ROWS(2, 1)
#define SMALL_TABLE(NV, AM)                                                                                     \
  { NULL, small_1_##NV##_##AM, small_2_##NV##_##AM, small_3_##NV##_##AM, small_4_##NV##_##AM,                  \
    small_5_##NV##_##AM, small_6_##NV##_##AM }
_Static_assert(S_MR == 6, "the small tiles' table lists rows 1..6");
static const small_tile_fn kSmallTiles[2][2][S_MR + 1] = {{SMALL_TABLE(1, 0), SMALL_TABLE(2, 0)},
                                                          {SMALL_TABLE(1, 1), SMALL_TABLE(2, 1)}};

static void pack_b_f32(int64_t rows, int64_t kc, const void* src, int64_t rs, int64_t cs, void* dst);

/* gemm.h small (beta must be 0): B not row-major is packed into pack_b's 16-wide strips (b NULL: already); then
 * 16-column chunks, each over row strips of at most 6 rows split evenly (m = 16: 6 + 5 + 5). */
static void sgemm_small(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                        int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, float alpha, float beta, float* scratch) {
  (void)beta;
  int64_t b_chunk = S_NR;
  if (b_cs != 1) {
    if (b) pack_b_f32(n, k, b, b_cs, b_rs, scratch);
    b = scratch, b_rs = S_NR, b_chunk = S_NR * k;
  }
  const int am = a_rs == 1;
  const int64_t strips = (m + S_MR - 1) / S_MR, base = m / strips, extra = m % strips;
  for (int64_t j = 0; j < n; j += S_NR, b += b_chunk) {
    const int nr = (int)TPU_MIN((int64_t)S_NR, n - j);
    const small_tile_fn* tab = kSmallTiles[am][nr > 8];
    int64_t i = 0;
    for (int64_t s = 0; s < strips; ++s) {
      const int rows = (int)(base + (s < extra));
      tab[rows](k, a + i * a_rs, a_rs, a_cs, b, b_rs, c + i * c_rs + j, c_rs, nr, alpha);
      i += rows;
    }
  }
}

/* acc[j] += sum_p x[p*xs] * b[p*b_rs + j]: four rows of B per pass over acc. */
static void sgemv_rows_avx2(int64_t n, int64_t k, const float* x, int64_t xs, const float* b,
                            int64_t b_rs, float* acc) {
  int64_t p = 0;
  for (; p + 4 <= k; p += 4) {
    const float* b0 = b + p * b_rs;
    const float* b1 = b0 + b_rs;
    const float* b2 = b1 + b_rs;
    const float* b3 = b2 + b_rs;
    const __m256 x0 = _mm256_set1_ps(x[p * xs]), x1 = _mm256_set1_ps(x[(p + 1) * xs]);
    const __m256 x2 = _mm256_set1_ps(x[(p + 2) * xs]), x3 = _mm256_set1_ps(x[(p + 3) * xs]);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      __m256 s = _mm256_loadu_ps(acc + j);
      s = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b0 + j), s);
      s = _mm256_fmadd_ps(x1, _mm256_loadu_ps(b1 + j), s);
      s = _mm256_fmadd_ps(x2, _mm256_loadu_ps(b2 + j), s);
      s = _mm256_fmadd_ps(x3, _mm256_loadu_ps(b3 + j), s);
      _mm256_storeu_ps(acc + j, s);
    }
    for (; j < n; ++j)
      acc[j] = acc[j] + x[p * xs] * b0[j] + x[(p + 1) * xs] * b1[j] + x[(p + 2) * xs] * b2[j] +
               x[(p + 3) * xs] * b3[j];
  }
  for (; p < k; ++p) {
    const float* b0 = b + p * b_rs;
    const __m256 x0 = _mm256_set1_ps(x[p * xs]);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(x0, _mm256_loadu_ps(b0 + j), _mm256_loadu_ps(acc + j)));
    for (; j < n; ++j) acc[j] += x[p * xs] * b0[j];
  }
}

static float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static float sdot_avx2(int64_t k, const float* x, const float* y) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p), _mm256_loadu_ps(y + p), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p + 8), _mm256_loadu_ps(y + p + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p + 16), _mm256_loadu_ps(y + p + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p + 24), _mm256_loadu_ps(y + p + 24), s3);
  }
  for (; p + 8 <= k; p += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + p), _mm256_loadu_ps(y + p), s0);
  float s = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; p < k; ++p) s += x[p] * y[p];
  return s;
}

/* gemm.h widen_bf16: 8 bf16 -> f32 lanes a step, the row's last < 8 one by one */
static void widen_bf16_avx2(int64_t rows, int64_t cols, const uint16_t* src, int64_t rs, float* dst) {
  for (int64_t i = 0; i < rows; ++i, src += rs, dst += cols) {
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(src + j)));
      _mm256_storeu_ps(dst + j, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; j < cols; ++j) {
      const uint32_t u = (uint32_t)src[j] << 16;
      memcpy(&dst[j], &u, 4);
    }
  }
}

const tpu_host_gemm_kernel_t tpu_host_sgemm_kernel_avx2 = {
    /* row-major A over a long k: 512-deep k blocks (half the passes over C) with a shorter A block;
     * 2048x512 @ 512x128 one thread 4370-4430 -> 3660-3890 us, im2col-like 1024x1152 @ 1152x128 and
     * 4096x576 @ 576x64 10-20% faster; A^T weight gradients (k = 2048) were not faster and keep 256 */
    .name = "avx2 6x16", .elem_size = 4, .mr = S_MR, .nr = S_NR, .kc = 256, .mc = 144, .nc = 3072, .kc_rm = 512, .mc_rm = 96,
    .ukr = sgemm_ukr_6x16, .ukr_a = sgemm_ukr_6x16_a, .pack_a = pack_a_f32, .pack_b = pack_b_f32, .gemv_rows = sgemv_rows_avx2, .sdot = sdot_avx2,
    .small = sgemm_small, .small_beta0 = 1, .widen_bf16 = widen_bf16_avx2};
const tpu_host_gemm_kernel_t tpu_host_dgemm_kernel_avx2 = {
    .name = "avx2 6x8", .elem_size = 8, .mr = D_MR, .nr = D_NR, .kc = 256, .mc = 72, .nc = 2048,
    .ukr = dgemm_ukr_6x8};

#endif /* x86 */
