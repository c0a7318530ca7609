/* rows_impl.h — contiguous f32 row kernels (see rows.h), compiled once per ISA: rows.c (base),
 * rows_avx2.c, rows_avx512.c define ROWS_SUFFIX and include this file. Plain C written for the
 * auto-vectorizer: 16 independent lanes per reduction keep the (IEEE, -ffp-contract=off) order
 * fixed, so every ISA build gives the same bits. */
#include <math.h>
#include <string.h>

#include "drivers/host/rows.h"
#include "drivers/host/vmath.h"

#define ROWS_CAT2(a, b) a##b
#define ROWS_CAT(a, b) ROWS_CAT2(a, b)
#define RFN(name) ROWS_CAT(name, ROWS_SUFFIX)
enum { RL = 16 };

static float RFN(row_max)(const float* x, int64_t n) {
  float mx[RL];
  for (int l = 0; l < RL; ++l) mx[l] = -INFINITY;
  int64_t i = 0;
  for (; i + RL <= n; i += RL)
    for (int l = 0; l < RL; ++l) mx[l] = x[i + l] > mx[l] ? x[i + l] : mx[l];
  float m = -INFINITY;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int l = 0; l < RL; ++l) m = mx[l] > m ? mx[l] : m;
  return m; /* NaNs are skipped here; they reach the sum through exp and make the row NaN */
}

/* y = exp(x - m) / sum, or (x - m) - log(sum) */
static void RFN(softmax)(const float* x, float* y, int64_t n, int log) {
  const float m = RFN(row_max)(x, n);
  float acc[RL] = {0}, s = 0;
  int64_t i = 0;
  if (log) {
    for (; i + RL <= n; i += RL)
      for (int l = 0; l < RL; ++l) acc[l] += tile_expf(x[i + l] - m);
    for (; i < n; ++i) s += tile_expf(x[i] - m);
  } else {
    for (; i + RL <= n; i += RL)
      for (int l = 0; l < RL; ++l) { float e = tile_expf(x[i + l] - m); y[i + l] = e; acc[l] += e; }
    for (; i < n; ++i) { float e = tile_expf(x[i] - m); y[i] = e; s += e; }
  }
  for (int l = 0; l < RL; ++l) s += acc[l];
  if (log) {
    const float ls = logf(s);
    for (i = 0; i < n; ++i) y[i] = (x[i] - m) - ls;
  } else {
    for (i = 0; i < n; ++i) y[i] = y[i] / s;
  }
}

/* softmax: o = y (g - sum(g y)); log_softmax: o = g - exp(y) sum(g) */
static void RFN(softmax_bwd)(const float* g, const float* y, float* o, int64_t n, int log) {
  float acc[RL] = {0}, s = 0;
  int64_t i = 0;
  if (log) {
    for (; i + RL <= n; i += RL)
      for (int l = 0; l < RL; ++l) acc[l] += g[i + l];
    for (; i < n; ++i) s += g[i];
  } else {
    for (; i + RL <= n; i += RL)
      for (int l = 0; l < RL; ++l) acc[l] += g[i + l] * y[i + l];
    for (; i < n; ++i) s += g[i] * y[i];
  }
  for (int l = 0; l < RL; ++l) s += acc[l];
  if (log) for (i = 0; i < n; ++i) o[i] = g[i] - tile_expf(y[i]) * s;
  else for (i = 0; i < n; ++i) o[i] = y[i] * (g[i] - s);
}

/* layer norm: y = (x - mean) rstd [* w] [+ b] (w, b may be NULL), the IR's operation order */
static void RFN(layer_norm)(const float* x, float mean, float rstd, const float* w, const float* b, float* y, int64_t n) {
  if (w && b) for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  else if (w) for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i];
  else if (b) for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd + b[i];
  else for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd;
}

/* layer norm input gradient: dxh = g [* w], xh = (x - mean) rstd,
 * dx = rstd ((dxh - sum(dxh) / n) - xh (rstd sum(dxh (x - mean)) / n)) */
static void RFN(layer_norm_bwd)(const float* g, const float* x, float mean, float rstd, const float* w, float* dx,
                                int64_t n) {
  float a1[RL] = {0}, a2[RL] = {0}, s1 = 0, s2 = 0;
  int64_t i = 0;
  for (; i + RL <= n; i += RL)
    for (int l = 0; l < RL; ++l) {
      float d = w ? g[i + l] * w[i + l] : g[i + l];
      a1[l] += d; a2[l] += d * (x[i + l] - mean);
    }
  for (; i < n; ++i) { float d = w ? g[i] * w[i] : g[i]; s1 += d; s2 += d * (x[i] - mean); }
  for (int l = 0; l < RL; ++l) { s1 += a1[l]; s2 += a2[l]; }
  const float inv_n = (float)(1.0 / (double)n), m1 = s1 * inv_n, m2 = s2 * rstd * inv_n;
  if (w) for (i = 0; i < n; ++i) dx[i] = rstd * ((g[i] * w[i] - m1) - (x[i] - mean) * rstd * m2);
  else for (i = 0; i < n; ++i) dx[i] = rstd * ((g[i] - m1) - (x[i] - mean) * rstd * m2);
}

/* GELU (erf form, rows.h): with h = x^2 / 2 and z = |x| / sqrt(2), q = Phi(-|x|) = erfc(z) / 2 from
 * Abramowitz-Stegun 7.1.26 (t = 1 / (1 + p z), erfc(z) ~ t P(t) exp(-z^2), absolute error <= 1.5e-7;
 * the approximation PyTorch's vectorized CPU erf uses) computed directly, so the x < 0 side has no
 * 1 + erf cancellation; cdf = x < 0 ? q : 1 - q, pdf = exp(-h) / sqrt(2 pi) shares the exponential.
 * Explicit fmaf keeps every ISA build bit-identical (-ffp-contract=off; the base build calls libm's
 * correctly rounded fmaf, so it is slow but gives the same bits). */
static inline float RFN(gelu_expneg)(float h) { /* exp(-h), h >= 0 (NaN: any value; the caller's t is NaN) */
  const float hc = h < 87.0f ? h : 87.0f; /* n >= -126 below: one normal power of two scales */
  const float n = fmaf(hc, -1.44269504088896341f, 12582912.0f) - 12582912.0f; /* round(-hc log2 e) */
  float r = fmaf(n, -0.693359375f, -hc);
  r = fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500E-4f;
  p = fmaf(p, r, 1.3981999507E-3f); p = fmaf(p, r, 8.3334519073E-3f); p = fmaf(p, r, 4.1665795894E-2f);
  p = fmaf(p, r, 1.6666665459E-1f); p = fmaf(p, r, 5.0000001201E-1f);
  const float y = (fmaf(p, r * r, r) + 1.0f) * tile_bits2f((uint32_t)((int32_t)n + 127) << 23);
  return h > 87.0f ? 0.0f : y;
}
static inline float RFN(gelu_cdf)(float x, float* pdf) {
  const float ax = x < 0 ? -x : x, z = ax * 0.707106781186547524f, h = 0.5f * (x * x);
  const float t = 1.0f / fmaf(0.3275911f, z, 1.0f);
  float p = 0.5f * 1.061405429f; /* A&S coefficients halved (exact): p = P(t) / 2 */
  p = fmaf(p, t, 0.5f * -1.453152027f); p = fmaf(p, t, 0.5f * 1.421413741f);
  p = fmaf(p, t, 0.5f * -0.284496736f); p = fmaf(p, t, 0.5f * 0.254829592f);
  const float e = RFN(gelu_expneg)(h), q = (t * p) * e;
  *pdf = 0.398942280401432678f * e;
  return x < 0 ? q : 1.0f - q;
}
static void RFN(gelu)(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { float pd, c = RFN(gelu_cdf)(x[i], &pd); y[i] = x[i] * c; }
}
/* d gelu: g (cdf + x pdf) */
static void RFN(gelu_bwd)(const float* g, const float* x, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { float pd, c = RFN(gelu_cdf)(x[i], &pd); o[i] = g[i] * fmaf(x[i], pd, c); }
}

/* Column sums of m rows of n contiguous floats (row stride ld) into double acc[n] (added to it), in row
 * order per column, written with gcc's vector extensions (its auto-vectorizer unrolls such loops into
 * scalars); the per-element operations are those of the scalar tails, so every ISA build adds the same
 * values in the same order. */
typedef float rows_vf8 __attribute__((vector_size(32)));
typedef double rows_vd8 __attribute__((vector_size(64)));
/* acc += the 8 floats at p, widened (a macro: a function returning the 64-byte vector draws -Wpsabi below AVX-512) */
#define ROWS_ADD8(acc, p) do { rows_vf8 v_; memcpy(&v_, (p), sizeof(v_)); (acc) += __builtin_convertvector(v_, rows_vd8); } while (0)
enum { COL_ROWS = 64 }; /* rows per pass over the columns: the block of rows stays in L1/L2 */
/* Below AVX-512 a 64-byte double vector is two registers and gcc spilled the four of them to the stack
 * on every row (2048x384 sum(0) on AVX2: 0.54 ms vs the CPU's 0.10): there the layer-norm sums' columns
 * run as 4-double accumulators, one register each. Same per-column adds in the same order: same bits. */
typedef float rows_vf4 __attribute__((vector_size(16)));
typedef double rows_vd4 __attribute__((vector_size(32)));
#define ROWS_ADD4(acc, p) do { rows_vf4 v_; memcpy(&v_, (p), sizeof(v_)); (acc) += __builtin_convertvector(v_, rows_vd4); } while (0)
/* Plain column sums stream whole rows, four per pass (acc[j] += x0[j], += x1[j], ... in row order, acc in
 * L1): sequential reads the prefetchers follow. Passes of 32-column register blocks down 64 rows read each
 * row in 128-byte pieces, and with a 2 KB row stride those pieces share one or two L1 sets (2048x512
 * sum(0): 252 us vs 183 us streamed; 2048x128 59 -> 53 us; AVX2, one thread). */
static void RFN(col_sums)(const float* x, int64_t ld, int64_t m, double* acc, int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    const float *x0 = x + r * ld, *x1 = x0 + ld, *x2 = x1 + ld, *x3 = x2 + ld;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      rows_vd4 a, b;
      memcpy(&a, acc + j, 32); memcpy(&b, acc + j + 4, 32);
      ROWS_ADD4(a, x0 + j); ROWS_ADD4(b, x0 + j + 4);
      ROWS_ADD4(a, x1 + j); ROWS_ADD4(b, x1 + j + 4);
      ROWS_ADD4(a, x2 + j); ROWS_ADD4(b, x2 + j + 4);
      ROWS_ADD4(a, x3 + j); ROWS_ADD4(b, x3 + j + 4);
      memcpy(acc + j, &a, 32); memcpy(acc + j + 4, &b, 32);
    }
    for (; j < n; ++j) acc[j] = (((acc[j] + (double)x0[j]) + (double)x1[j]) + (double)x2[j]) + (double)x3[j];
  }
  for (; r < m; ++r) {
    const float* xr = x + r * ld;
    for (int64_t j = 0; j < n; ++j) acc[j] += (double)xr[j];
  }
}
/* Layer-norm parameter gradients over m rows: a1 += g (x - mean) rstd (the IR's f32 product order), a2 += g */
static void RFN(ln_col_sums)(const float* g, int64_t ldg, const float* x, int64_t ldx, const float* mean,
                             int64_t ms, const float* rstd, int64_t rs, int64_t m, double* a1, double* a2, int64_t n) {
  for (int64_t r0 = 0; r0 < m; r0 += COL_ROWS) {
    const int64_t r1 = r0 + COL_ROWS < m ? r0 + COL_ROWS : m;
    int64_t j0 = 0;
#ifndef __AVX512F__
    for (; j0 + 16 <= n; j0 += 16) { /* one register per accumulator (see col_sums); same float ops */
      rows_vd4 b1[4], b2[4];
      memcpy(b1, a1 + j0, sizeof(b1)); memcpy(b2, a2 + j0, sizeof(b2));
      for (int64_t r = r0; r < r1; ++r) {
        const float* gr = g + r * ldg + j0;
        const float* xr = x + r * ldx + j0;
        const float mu = mean[r * ms], rs_ = rstd[r * rs];
        for (int q = 0; q < 4; ++q) {
          rows_vf4 gq, xq;
          memcpy(&gq, gr + 4 * q, 16); memcpy(&xq, xr + 4 * q, 16);
          b1[q] += __builtin_convertvector(gq * ((xq - mu) * rs_), rows_vd4);
          b2[q] += __builtin_convertvector(gq, rows_vd4);
        }
      }
      memcpy(a1 + j0, b1, sizeof(b1)); memcpy(a2 + j0, b2, sizeof(b2));
    }
#endif
    for (; j0 + 16 <= n; j0 += 16) {
      rows_vd8 b10, b11, b20, b21;
      memcpy(&b10, a1 + j0, 64); memcpy(&b11, a1 + j0 + 8, 64); memcpy(&b20, a2 + j0, 64); memcpy(&b21, a2 + j0 + 8, 64);
      for (int64_t r = r0; r < r1; ++r) {
        const float* gr = g + r * ldg + j0;
        const float* xr = x + r * ldx + j0;
        const float mu = mean[r * ms], rs_ = rstd[r * rs];
        rows_vf8 g0, g1, x0, x1;
        memcpy(&g0, gr, 32); memcpy(&g1, gr + 8, 32); memcpy(&x0, xr, 32); memcpy(&x1, xr + 8, 32);
        b10 += __builtin_convertvector(g0 * ((x0 - mu) * rs_), rows_vd8);
        b11 += __builtin_convertvector(g1 * ((x1 - mu) * rs_), rows_vd8);
        b20 += __builtin_convertvector(g0, rows_vd8);
        b21 += __builtin_convertvector(g1, rows_vd8);
      }
      memcpy(a1 + j0, &b10, 64); memcpy(a1 + j0 + 8, &b11, 64); memcpy(a2 + j0, &b20, 64); memcpy(a2 + j0 + 8, &b21, 64);
    }
    for (int64_t r = r0; r < r1 && j0 < n; ++r) {
      const float* gr = g + r * ldg;
      const float* xr = x + r * ldx;
      const float mu = mean[r * ms], rs_ = rstd[r * rs];
      for (int64_t j = j0; j < n; ++j) { a1[j] += (double)(gr[j] * ((xr[j] - mu) * rs_)); a2[j] += (double)gr[j]; }
    }
  }
}

/* exp(x) for any x: tile_expf's range reduction and polynomial with explicit fmaf (bit-identical builds) */
static inline float RFN(expf_fma)(float x) {
  const float xc = x < -103.972084f ? -103.972084f : (x > 88.7228394f ? 88.7228394f : x);
  const float n = fmaf(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f; /* round(x log2 e) */
  float r = fmaf(n, -0.693359375f, xc);
  r = fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500E-4f;
  p = fmaf(p, r, 1.3981999507E-3f); p = fmaf(p, r, 8.3334519073E-3f); p = fmaf(p, r, 4.1665795894E-2f);
  p = fmaf(p, r, 1.6666665459E-1f); p = fmaf(p, r, 5.0000001201E-1f);
  const int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1; /* two normal powers of two: n in [-150, 128] */
  float y = (fmaf(p, r * r, r) + 1.0f) * tile_bits2f((uint32_t)(n1 + 127) << 23) * tile_bits2f((uint32_t)(n2 + 127) << 23);
  y = x > 88.7228394f ? INFINITY : y;
  y = x < -103.972084f ? 0.0f : y;
  return x != x ? x : y;
}
/* SiLU in PyTorch's CPU order: x / (1 + exp(-x)); backward dy s (1 + x (1 - s)), s = 1 / (1 + exp(-x)).
 * A NaN x is returned as it is (which NaN operand an instruction propagates differs between the scalar
 * and vector builds). */
static void RFN(silu)(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] / (1.0f + RFN(expf_fma)(-x[i]));
    y[i] = x[i] != x[i] ? x[i] : v;
  }
}
static void RFN(silu_bwd)(const float* g, const float* x, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + RFN(expf_fma)(-x[i])), v = g[i] * s * (1.0f + x[i] * (1.0f - s));
    o[i] = x[i] != x[i] ? x[i] : v;
  }
}

/* lerp as PyTorch's CPU kernel: fma(c, end - start, base), c = w and base = start when |w| < 0.5, else
 * c = w - 1 and base = end (one rounding: its vectorized lerp uses fmadd). ws = 0: one weight for all. */
static void RFN(lerp)(const float* a, const float* b, const float* w, int64_t ws, float* o, int64_t n) {
  if (ws == 0) {
    const float w0 = w[0], c = fabsf(w0) < 0.5f ? w0 : w0 - 1.0f;
    if (fabsf(w0) < 0.5f) for (int64_t i = 0; i < n; ++i) o[i] = fmaf(c, b[i] - a[i], a[i]);
    else for (int64_t i = 0; i < n; ++i) o[i] = fmaf(c, b[i] - a[i], b[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int small = fabsf(w[i]) < 0.5f;
    o[i] = fmaf(small ? w[i] : w[i] - 1.0f, b[i] - a[i], small ? a[i] : b[i]);
  }
}

/* addcmul / addcdiv in PyTorch's CPU order: fma(v t1, t2, self) (its vectorized addcmul fuses the add) and
 * self + (v t1) / t2 */
static void RFN(addc)(const float* s, const float* a, const float* b, float v, float* o, int64_t n, int div) {
  if (div) for (int64_t i = 0; i < n; ++i) o[i] = s[i] + (v * a[i]) / b[i];
  else for (int64_t i = 0; i < n; ++i) o[i] = fmaf(v * a[i], b[i], s[i]);
}

const tpu_host_rows_ops_t RFN(tpu_host_rows_ops_) = {RFN(softmax), RFN(softmax_bwd), RFN(layer_norm), RFN(layer_norm_bwd),
                                                     RFN(gelu), RFN(gelu_bwd), RFN(col_sums), RFN(ln_col_sums),
                                                     RFN(silu), RFN(silu_bwd), RFN(lerp), RFN(addc)};
