/* rows_impl.h — contiguous f32 row kernels (see rows.h), compiled once per ISA: rows.c (base),
 * rows_avx2.c, rows_avx512.c define ROWS_SUFFIX and include this file. Plain C written for the
 * auto-vectorizer: 16 independent lanes per reduction keep the (IEEE, -ffp-contract=off) order
 * fixed, so every ISA build gives the same bits. */
#include <math.h>

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

const tpu_host_rows_ops_t RFN(tpu_host_rows_ops_) = {RFN(softmax), RFN(softmax_bwd), RFN(layer_norm), RFN(layer_norm_bwd)};
