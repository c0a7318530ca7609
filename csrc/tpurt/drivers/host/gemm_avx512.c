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

const tpu_host_gemm_kernel_t tpu_host_sgemm_kernel_avx512 = {
    .name = "avx512 " STR(S_MR) "x32", .elem_size = 4, .mr = S_MR, .nr = S_NR, .kc = S_KC,
    .mc = S_MC, .nc = S_NC, .ukr = sgemm_ukr,
    .pack_a = pack_a_f32, .pack_b = pack_b_f32, .gemv_rows = sgemv_rows_avx512,
    .sdot = sdot_avx512};
const tpu_host_gemm_kernel_t tpu_host_dgemm_kernel_avx512 = {
    .name = "avx512 " STR(D_MR) "x16", .elem_size = 8, .mr = D_MR, .nr = D_NR, .kc = 256,
    .mc = 5 * D_MR, .nc = 2048, .ukr = dgemm_ukr};

#endif /* x86 */
