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

/* The row reductions are written with gcc's vector extensions in 8-lane f32 vectors (one AVX2 / AVX-512VL
 * register, two SSE ones; wider generic vectors are lowered through the stack below AVX-512), two of them per
 * 16 elements: gcc 12 did not turn the former 16-lane arrays into vector code (max and sum passes ran as
 * scalar vmaxss / vaddss chains: softmax of 64-element rows took 90 ns a row on AVX-512). The last n % 16
 * elements are two padded vectors (-inf for the max, 0 for sums), and the 16 lanes are added as a fixed
 * tree (rows_hsum), so every ISA build does the same IEEE operations in the same order (same bits).
 * rows_vexp is RFN(expf_fma) lane by lane. */
#pragma GCC diagnostic ignored "-Wpsabi" /* 32-byte vectors in the base (SSE) build, static functions only (gcc reports it at the end of the file, so not popped) */
typedef float rows_vf __attribute__((vector_size(32)));
typedef int32_t rows_vi __attribute__((vector_size(32)));
#define ROWS_SPLAT(v) ((rows_vf){v, v, v, v, v, v, v, v})
static inline __attribute__((always_inline)) rows_vf rows_ld(const float* p) { rows_vf v; memcpy(&v, p, 32); return v; }
/* the k (0..16) floats at p as two vectors, padded with fill */
static inline __attribute__((always_inline)) void rows_ld2_tail(const float* p, int64_t k, float fill, rows_vf* a, rows_vf* b) {
  float t[16];
  for (int l = 0; l < 16; ++l) t[l] = l < k ? p[l] : fill;
  memcpy(a, t, 32); memcpy(b, t + 8, 32);
}
static inline __attribute__((always_inline)) void rows_st(float* p, rows_vf v) { memcpy(p, &v, 32); }
static inline __attribute__((always_inline)) void rows_st2_tail(float* p, rows_vf a, rows_vf b, int64_t k) {
  float t[16];
  memcpy(t, &a, 32); memcpy(t + 8, &b, 32);
  for (int64_t l = 0; l < k; ++l) p[l] = t[l];
}
static inline __attribute__((always_inline)) rows_vf rows_sel(rows_vi m, rows_vf a, rows_vf b) { /* m ? a : b */
#ifdef __AVX__ /* one blend instead of and / andnot / or (m is all ones or all zeros per lane) */
  return __builtin_ia32_blendvps256(b, a, (rows_vf)m);
#else
  return (rows_vf)((m & (rows_vi)a) | (~m & (rows_vi)b));
#endif
}
static inline __attribute__((always_inline)) rows_vf rows_vmax(rows_vf a, rows_vf b) { return rows_sel(a > b, a, b); }
static inline __attribute__((always_inline)) float rows_hmax(rows_vf a, rows_vf b) {
  rows_vf v = rows_vmax(a, b);
  v = rows_vmax(v, __builtin_shuffle(v, (rows_vi){4, 5, 6, 7, 0, 1, 2, 3}));
  v = rows_vmax(v, __builtin_shuffle(v, (rows_vi){2, 3, 0, 1, 6, 7, 4, 5}));
  v = rows_vmax(v, __builtin_shuffle(v, (rows_vi){1, 0, 3, 2, 5, 4, 7, 6}));
  return v[0];
}
/* lanes 0-7 of a and 8-15 of b added as a tree: (a + b), then halves, quarters, pairs */
static inline __attribute__((always_inline)) float rows_hsum(rows_vf a, rows_vf b) {
  rows_vf v = a + b;
  v += __builtin_shuffle(v, (rows_vi){4, 5, 6, 7, 0, 1, 2, 3});
  v += __builtin_shuffle(v, (rows_vi){2, 3, 0, 1, 6, 7, 4, 5});
  v += __builtin_shuffle(v, (rows_vi){1, 0, 3, 2, 5, 4, 7, 6});
  return v[0];
}
static inline __attribute__((always_inline)) rows_vf rows_fma(rows_vf a, rows_vf b, rows_vf c) { /* one rounding */
#ifdef __FMA__
  return __builtin_ia32_vfmaddps256(a, b, c);
#else
  rows_vf r;
  for (int l = 0; l < 8; ++l) r[l] = fmaf(a[l], b[l], c[l]); /* libm's: exact, slow (a CPU without FMA) */
  return r;
#endif
}
/* RFN(expf_fma) below, lane by lane (same operations, same bits): ~25 vector operations for 8 exps where
 * tile_expf's mul-then-add form took ~40. Lanes below lo (softmax's masked -inf) compute exp(0) and are
 * selected to 0 at the end: clamping them to lo made denormal products, and a vector multiply with a
 * denormal result is slow (3x on a half-masked softmax row). */
static inline __attribute__((always_inline)) rows_vf rows_vexp_impl(rows_vf x, int nonpos) {
  const rows_vf lo = ROWS_SPLAT(-103.972084f), hi = ROWS_SPLAT(88.7228394f), big = ROWS_SPLAT(12582912.0f);
  const rows_vi under = x < lo, over = x > hi;
  const rows_vf xc = rows_sel(under, ROWS_SPLAT(0.0f), nonpos ? x : rows_sel(over, hi, x));
  const rows_vf n = rows_fma(xc, ROWS_SPLAT(1.44269504088896341f), big) - big; /* round(x log2 e) */
  rows_vf r = rows_fma(n, ROWS_SPLAT(-0.693359375f), xc);
  r = rows_fma(n, ROWS_SPLAT(2.12194440e-4f), r);
  rows_vf p = ROWS_SPLAT(1.9875691500E-4f);
  p = rows_fma(p, r, ROWS_SPLAT(1.3981999507E-3f)); p = rows_fma(p, r, ROWS_SPLAT(8.3334519073E-3f));
  p = rows_fma(p, r, ROWS_SPLAT(4.1665795894E-2f)); p = rows_fma(p, r, ROWS_SPLAT(1.6666665459E-1f));
  p = rows_fma(p, r, ROWS_SPLAT(5.0000001201E-1f));
  /* 2^n as 2^n1 2^n2 with n1 = floor(n / 2) (expf_fma truncates): n in [-150, 128] keeps both factors normal,
   * the first product is exact and the second rounds y 2^n once, so the bits are expf_fma's */
  const rows_vi ni = __builtin_convertvector(n, rows_vi), n1 = ni >> 1, n2 = ni - n1;
  rows_vf y = (rows_fma(p, r * r, r) + 1.0f) * (rows_vf)((n1 + 127) << 23) * (rows_vf)((n2 + 127) << 23);
  if (!nonpos) y = rows_sel(over, ROWS_SPLAT(INFINITY), y);
  y = rows_sel(under, ROWS_SPLAT(0.0f), y);
  return rows_sel(x != x, x, y);
}
static inline __attribute__((always_inline)) rows_vf rows_vexp(rows_vf x) { return rows_vexp_impl(x, 0); }
/* x <= 0 or NaN only (softmax's x - max): no upper clamp */
static inline __attribute__((always_inline)) rows_vf rows_vexp_nonpos(rows_vf x) { return rows_vexp_impl(x, 1); }
static inline float RFN(expf_fma)(float x);

#ifdef __AVX512F__
/* The AVX-512 build's exp loops take 16 lanes per instruction with the same per-lane operations, and 2^n as one
 * vscalefps: round(y 2^n) with one rounding, which is what the two-factor product above gives (its first product
 * is exact), denormal results included. Zen 4 runs a 512-bit operation as two 256-bit halves, so the gain is
 * the ~3x fewer instructions (no int conversion, shifts or blends): one thread, 2048 rows of 96, log_softmax
 * forward 136 -> 95 us, backward 116 -> 74 us. Same bits as the 8-lane form (test_rows.c test_exp_isa). */
#include <immintrin.h>
static inline __attribute__((always_inline)) __m512 rows_vexp16(__m512 x, int nonpos) {
  const __m512 lo = _mm512_set1_ps(-103.972084f), hi = _mm512_set1_ps(88.7228394f), big = _mm512_set1_ps(12582912.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ); /* not below lo (NaN kept) */
  const __mmask16 over = nonpos ? 0 : _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
  const __m512 xc = _mm512_maskz_mov_ps(keep, nonpos ? x : _mm512_mask_mov_ps(x, over, hi));
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), big), big);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f)); p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f)); p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  __m512 y = _mm512_scalef_ps(_mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f)), n);
  if (!nonpos) y = _mm512_mask_mov_ps(y, over, _mm512_set1_ps(INFINITY));
  y = _mm512_maskz_mov_ps(keep, y);
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
/* lanes 0-7 and 8-15 of v as the two 8-lane vectors the generic loops keep */
static inline __attribute__((always_inline)) void rows_split16(__m512 v, rows_vf* a, rows_vf* b) {
  *a = (rows_vf)_mm512_castps512_ps256(v);
  *b = (rows_vf)_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}
#endif

static float RFN(row_max)(const float* x, int64_t n) {
  rows_vf m0 = ROWS_SPLAT(-INFINITY), m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) { m0 = rows_vmax(rows_ld(x + i), m0); m1 = rows_vmax(rows_ld(x + i + 8), m1); }
  if (i < n) {
    rows_vf a, b;
    rows_ld2_tail(x + i, n - i, -INFINITY, &a, &b);
    m0 = rows_vmax(a, m0); m1 = rows_vmax(b, m1);
  }
  return rows_hmax(m0, m1); /* NaNs are skipped here; they reach the sum through exp and make the row NaN */
}

/* y = exp(x - m) / sum (times 1 / sum, as PyTorch's CPU kernel), or (x - m) - log(sum) */
static void RFN(softmax)(const float* x, float* y, int64_t n, int log) {
  const float m = RFN(row_max)(x, n);
  const rows_vf mv = ROWS_SPLAT(m);
  rows_vf a0 = ROWS_SPLAT(0.0f), a1 = a0;
  int64_t i = 0;
#ifdef __AVX512F__
  {
    const __m512 m16 = _mm512_set1_ps(m);
    __m512 a = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
      const __m512 e = rows_vexp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), m16), 1);
      if (!log) _mm512_storeu_ps(y + i, e);
      a = _mm512_add_ps(a, e);
    }
    rows_split16(a, &a0, &a1);
  }
#else
  for (; i + 16 <= n; i += 16) {
    const rows_vf e0 = rows_vexp_nonpos(rows_ld(x + i) - mv), e1 = rows_vexp_nonpos(rows_ld(x + i + 8) - mv);
    if (!log) { rows_st(y + i, e0); rows_st(y + i + 8, e1); }
    a0 += e0; a1 += e1;
  }
#endif
  const int64_t k = n - i;
  if (k) { /* -inf padding: exp gives 0 (a row whose max is -inf is NaN anyway) */
    rows_vf t0, t1;
    rows_ld2_tail(x + i, k, -INFINITY, &t0, &t1);
    const rows_vf e0 = rows_vexp_nonpos(t0 - mv), e1 = rows_vexp_nonpos(t1 - mv);
    if (!log) rows_st2_tail(y + i, e0, e1, k);
    a0 += e0; a1 += e1;
  }
  const float s = rows_hsum(a0, a1);
  if (log) {
    const float ls = logf(s);
    for (i = 0; i < n; ++i) y[i] = (x[i] - m) - ls;
  } else {
    const float inv = 1.0f / s;
    for (i = 0; i < n; ++i) y[i] = y[i] * inv;
  }
}

/* softmax: o = y (g - sum(g y)); log_softmax: o = g - exp(y) sum(g) */
static void RFN(softmax_bwd)(const float* g, const float* y, float* o, int64_t n, int log) {
  rows_vf a0 = ROWS_SPLAT(0.0f), a1 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (log) { a0 += rows_ld(g + i); a1 += rows_ld(g + i + 8); }
    else { a0 += rows_ld(g + i) * rows_ld(y + i); a1 += rows_ld(g + i + 8) * rows_ld(y + i + 8); }
  }
  if (i < n) {
    rows_vf g0, g1, y0, y1;
    rows_ld2_tail(g + i, n - i, 0.0f, &g0, &g1);
    rows_ld2_tail(y + i, n - i, 0.0f, &y0, &y1);
    if (log) { a0 += g0; a1 += g1; }
    else { a0 += g0 * y0; a1 += g1 * y1; }
  }
  const float s = rows_hsum(a0, a1);
  const rows_vf sv = ROWS_SPLAT(s);
  i = 0;
  if (log) {
#ifdef __AVX512F__
    const __m512 s16 = _mm512_set1_ps(s);
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(o + i, _mm512_sub_ps(_mm512_loadu_ps(g + i), _mm512_mul_ps(rows_vexp16(_mm512_loadu_ps(y + i), 0), s16)));
#endif
    for (; i + 8 <= n; i += 8) rows_st(o + i, rows_ld(g + i) - rows_vexp(rows_ld(y + i)) * sv);
    for (; i < n; ++i) o[i] = g[i] - RFN(expf_fma)(y[i]) * s;
  } else {
    for (; i < n; ++i) o[i] = y[i] * (g[i] - s);
  }
}

/* Softmax over a strided dim, 8 rows at once: w (1..8) adjacent rows whose elements are contiguous across rows
 * (x [.., N, I] over N with I innermost: row i is column i), element k of row l at x[k * xs + l]. Lane l runs
 * row l's passes (max; exp, store, sum in order of k; scale), so no row is gathered. */
/* the w (1..8) floats at p as one vector padded with fill / the first w lanes of v stored (also GELU's tails) */
static inline __attribute__((always_inline)) rows_vf rows_ld_w(const float* p, int64_t w, float fill) {
  if (w == 8) return rows_ld(p);
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = l < w ? p[l] : fill;
  return rows_ld(t);
}
static inline __attribute__((always_inline)) void rows_st_w(float* p, rows_vf v, int64_t w) {
  if (w == 8) { rows_st(p, v); return; }
  float t[8];
  rows_st(t, v);
  for (int64_t l = 0; l < w; ++l) p[l] = t[l];
}
static void RFN(softmax_cols)(const float* x, int64_t xs, float* y, int64_t ys, int64_t n, int64_t w, int log) {
  rows_vf m = ROWS_SPLAT(-INFINITY), s = ROWS_SPLAT(0.0f);
  for (int64_t k = 0; k < n; ++k) m = rows_vmax(rows_ld_w(x + k * xs, w, -INFINITY), m);
  for (int64_t k = 0; k < n; ++k) {
    const rows_vf e = rows_vexp_nonpos(rows_ld_w(x + k * xs, w, -INFINITY) - m);
    if (!log) rows_st_w(y + k * ys, e, w);
    s += e;
  }
  if (log) {
    float st[8], ls[8];
    rows_st(st, s);
    for (int l = 0; l < 8; ++l) ls[l] = logf(st[l]);
    const rows_vf lv = rows_ld(ls);
    for (int64_t k = 0; k < n; ++k) rows_st_w(y + k * ys, (rows_ld_w(x + k * xs, w, 0.0f) - m) - lv, w);
  } else {
    const rows_vf inv = ROWS_SPLAT(1.0f) / s;
    for (int64_t k = 0; k < n; ++k) rows_st_w(y + k * ys, rows_ld_w(y + k * ys, w, 0.0f) * inv, w);
  }
}
static void RFN(softmax_cols_bwd)(const float* g, int64_t gs, const float* y, int64_t ys, float* o, int64_t os, int64_t n,
                                  int64_t w, int log) {
  rows_vf s = ROWS_SPLAT(0.0f);
  for (int64_t k = 0; k < n; ++k)
    s += log ? rows_ld_w(g + k * gs, w, 0.0f) : rows_ld_w(g + k * gs, w, 0.0f) * rows_ld_w(y + k * ys, w, 0.0f);
  for (int64_t k = 0; k < n; ++k) {
    const rows_vf gv = rows_ld_w(g + k * gs, w, 0.0f), yv = rows_ld_w(y + k * ys, w, 0.0f);
    rows_st_w(o + k * os, log ? gv - rows_vexp(yv) * s : yv * (gv - s), w);
  }
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
  rows_vf a10 = ROWS_SPLAT(0.0f), a11 = a10, a20 = a10, a21 = a10;
  const rows_vf mv = ROWS_SPLAT(mean);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const rows_vf d0 = w ? rows_ld(g + i) * rows_ld(w + i) : rows_ld(g + i);
    const rows_vf d1 = w ? rows_ld(g + i + 8) * rows_ld(w + i + 8) : rows_ld(g + i + 8);
    a10 += d0; a11 += d1;
    a20 += d0 * (rows_ld(x + i) - mv); a21 += d1 * (rows_ld(x + i + 8) - mv);
  }
  if (i < n) { /* zero padding: d = 0 adds 0 to both sums */
    rows_vf g0, g1, w0 = ROWS_SPLAT(1.0f), w1 = w0, x0, x1;
    rows_ld2_tail(g + i, n - i, 0.0f, &g0, &g1);
    if (w) rows_ld2_tail(w + i, n - i, 0.0f, &w0, &w1);
    rows_ld2_tail(x + i, n - i, mean, &x0, &x1);
    const rows_vf d0 = w ? g0 * w0 : g0, d1 = w ? g1 * w1 : g1;
    a10 += d0; a11 += d1;
    a20 += d0 * (x0 - mv); a21 += d1 * (x1 - mv);
  }
  const float s1 = rows_hsum(a10, a11), s2 = rows_hsum(a20, a21);
  const float inv_n = (float)(1.0 / (double)n), m1 = s1 * inv_n, m2 = s2 * rstd * inv_n;
  if (w) for (i = 0; i < n; ++i) dx[i] = rstd * ((g[i] * w[i] - m1) - (x[i] - mean) * rstd * m2);
  else for (i = 0; i < n; ++i) dx[i] = rstd * ((g[i] - m1) - (x[i] - mean) * rstd * m2);
}

/* Run statistics in double for the channel kernels (norm.c) on contiguous f32 runs, one pass: g NULL:
 * s1 = sum (x - m), s2 = sum (x - m)^2 (m: a shift, the caller's first element); else s1 = sum g,
 * s2 = sum g (x - m). 16 lanes as four 4-double vectors per sum, the tail zero-padded (masked), lanes
 * added as a fixed tree: same bits in every ISA build. */
typedef double rows_vd __attribute__((vector_size(32)));
typedef float rows_vh __attribute__((vector_size(16)));
typedef int64_t rows_vl __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) rows_vd rows_ldd(const float* p) {
  rows_vh v; memcpy(&v, p, 16); return __builtin_convertvector(v, rows_vd);
}
static inline __attribute__((always_inline)) double rows_hsumd(const rows_vd* a) {
  rows_vd v = (a[0] + a[2]) + (a[1] + a[3]);
  v += __builtin_shuffle(v, (rows_vl){2, 3, 0, 1});
  v += __builtin_shuffle(v, (rows_vl){1, 0, 3, 2});
  return v[0];
}
static inline __attribute__((always_inline)) void RFN(stat2_f32)(const float* g, const float* x, int64_t n, double m,
                                                                  double* s1, double* s2) {
  rows_vd a[4] = {{0}, {0}, {0}, {0}}, b[4] = {{0}, {0}, {0}, {0}};
  const rows_vd mv = {m, m, m, m};
  int64_t i = 0;
#ifdef __AVX512F__
  /* a[0..1] and a[2..3] as two 8-double registers (elements i..i+7, i+8..i+15): the same lanes and adds, half
   * the instructions (one thread, 2048 runs of 128: x 103 -> 49 us, with g 142 -> 64 us) */
  if (n >= 16) {
    const __m512d m8 = _mm512_set1_pd(m);
    __m512d A0 = _mm512_setzero_pd(), A1 = A0, B0 = A0, B1 = A0;
    if (!g)
      for (; i + 16 <= n; i += 16) {
        const __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), m8);
        const __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)), m8);
        A0 = _mm512_add_pd(A0, d0); A1 = _mm512_add_pd(A1, d1);
        B0 = _mm512_add_pd(B0, _mm512_mul_pd(d0, d0)); B1 = _mm512_add_pd(B1, _mm512_mul_pd(d1, d1));
      }
    else
      for (; i + 16 <= n; i += 16) {
        const __m512d g0 = _mm512_cvtps_pd(_mm256_loadu_ps(g + i)), g1 = _mm512_cvtps_pd(_mm256_loadu_ps(g + i + 8));
        A0 = _mm512_add_pd(A0, g0); A1 = _mm512_add_pd(A1, g1);
        B0 = _mm512_add_pd(B0, _mm512_mul_pd(g0, _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), m8)));
        B1 = _mm512_add_pd(B1, _mm512_mul_pd(g1, _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)), m8)));
      }
    a[0] = (rows_vd)_mm512_castpd512_pd256(A0); a[1] = (rows_vd)_mm512_extractf64x4_pd(A0, 1);
    a[2] = (rows_vd)_mm512_castpd512_pd256(A1); a[3] = (rows_vd)_mm512_extractf64x4_pd(A1, 1);
    b[0] = (rows_vd)_mm512_castpd512_pd256(B0); b[1] = (rows_vd)_mm512_extractf64x4_pd(B0, 1);
    b[2] = (rows_vd)_mm512_castpd512_pd256(B1); b[3] = (rows_vd)_mm512_extractf64x4_pd(B1, 1);
  }
#endif
  if (!g)
    for (; i + 16 <= n; i += 16)
      for (int q = 0; q < 4; ++q) { const rows_vd d = rows_ldd(x + i + 4 * q) - mv; a[q] += d; b[q] += d * d; }
  else
    for (; i + 16 <= n; i += 16)
      for (int q = 0; q < 4; ++q) {
        const rows_vd gv = rows_ldd(g + i + 4 * q);
        a[q] += gv; b[q] += gv * (rows_ldd(x + i + 4 * q) - mv);
      }
  if (i < n) {
    float xt[16], gt[16];
    for (int l = 0; l < 16; ++l) { xt[l] = i + l < n ? x[i + l] : 0.0f; gt[l] = g && i + l < n ? g[i + l] : 0.0f; }
    for (int q = 0; q < 4; ++q) {
      const rows_vd xv = rows_ldd(xt + 4 * q);
      rows_vd d = xv - mv, gv = rows_ldd(gt + 4 * q);
      if (!g) {
        for (int l = 0; l < 4; ++l) d[l] = i + 4 * q + l < n ? d[l] : 0.0;
        a[q] += d; b[q] += d * d;
      } else { a[q] += gv; b[q] += gv * d; } /* g = 0 in the padding */
    }
  }
  *s1 = rows_hsumd(a); *s2 = rows_hsumd(b);
}

static void RFN(stat2_runs)(const float* g, const float* x, int64_t st, int64_t n, int64_t count, const double* m,
                            double* s1, double* s2) {
  for (int64_t r = 0; r < count; ++r)
    RFN(stat2_f32)(g ? g + r * st : NULL, x + r * st, n, m ? m[r] : (double)x[r * st], s1 + r, s2 + r);
}

/* norm.c's CHANNEL_AFFINE rows in the ISA's vector width (group norm's short HxW rows took ~4.5 ns each through
 * the base build's per-row loop): the same f32 multiply and adds per element, so the same bits */
static void RFN(affine_rows)(const float* u, int64_t us, const float* v, int64_t vs, float* o, int64_t os, int64_t n,
                             int64_t count, const float* a, const float* b, const float* c) {
  for (int64_t r = 0; r < count; ++r) {
    const float *ur = u + r * us, *vr = v ? v + r * vs : NULL;
    float* or_ = o + r * os;
    const float ca = a[r], cb = v ? b[r] : 0.0f, cc = c[r];
    const rows_vf av = ROWS_SPLAT(ca), bv = ROWS_SPLAT(cb), cv = ROWS_SPLAT(cc);
    int64_t i = 0;
    if (vr) {
      for (; i + 8 <= n; i += 8) rows_st(or_ + i, rows_ld(ur + i) * av + rows_ld(vr + i) * bv + cv);
      for (; i < n; ++i) or_[i] = ur[i] * ca + vr[i] * cb + cc;
    } else {
      for (; i + 8 <= n; i += 8) rows_st(or_ + i, rows_ld(ur + i) * av + cv);
      for (; i < n; ++i) or_[i] = ur[i] * ca + cc;
    }
  }
}

/* GELU (erf form, rows.h), 8 lanes at a time. |x| < 3 (x^2 < 9; 99.7% of unit-normal inputs): one polynomial
 * each, no divide and no exp: cdf = 1/2 + x P(x^2), d gelu/dx = cdf + x pdf = 1/2 + x D(x^2), P and D Chebyshev
 * interpolants of degree 9 and 10 in u = 2 x^2 / 9 - 1 (f32 coefficients; |error| <= 4e-8 in P, 1e-7 in D,
 * about A&S 7.1.26's below; fit: benchmarks/RESULTS.md [gelu]). Elsewhere (and NaN / inf): q = Phi(-|x|) =
 * erfc(z) / 2 with z = |x| / sqrt(2) from Abramowitz-Stegun 7.1.26 (t = 1 / (1 + p z), erfc(z) ~ t P(t)
 * exp(-z^2), absolute error <= 1.5e-7; the approximation PyTorch's vectorized CPU erf uses) computed directly,
 * so the x < 0 side has no 1 + erf cancellation; cdf = x < 0 ? q : 1 - q, pdf = exp(-x^2 / 2) / sqrt(2 pi).
 * Each lane takes its own side's result (a select), so the bits of element i depend on x[i] alone (any tiling,
 * any ISA); the A&S side is only computed for vectors with a lane at |x| >= 3. */
static inline __attribute__((always_inline)) int rows_any(rows_vi m) {
#ifdef __AVX__
  typedef long long rows_v4di __attribute__((vector_size(32)));
  return !__builtin_ia32_ptestz256((rows_v4di)m, (rows_v4di)m);
#else
  uint64_t w[4];
  memcpy(w, &m, 32);
  return (w[0] | w[1] | w[2] | w[3]) != 0;
#endif
}
/* exp(-h), h >= 0 (rows_vexp's bits); 0 above 87 and for NaN h (a NaN x reaches cdf through t and q, and pdf
 * stays a number, so the results carry x's NaN) */
static inline __attribute__((always_inline)) rows_vf rows_gelu_expneg(rows_vf h) {
  return rows_sel(h <= ROWS_SPLAT(87.0f), rows_vexp_nonpos(-h), ROWS_SPLAT(0.0f));
}
static inline __attribute__((always_inline)) rows_vf rows_gelu_as(rows_vf x, rows_vf* pdf) { /* A&S: cdf, pdf */
  const rows_vi neg = x < ROWS_SPLAT(0.0f);
  const rows_vf z = rows_sel(neg, -x, x) * ROWS_SPLAT(0.707106781186547524f), h = ROWS_SPLAT(0.5f) * (x * x);
  const rows_vf t = ROWS_SPLAT(1.0f) / rows_fma(ROWS_SPLAT(0.3275911f), z, ROWS_SPLAT(1.0f));
  rows_vf p = ROWS_SPLAT(0.5f * 1.061405429f); /* A&S coefficients halved (exact): p = P(t) / 2 */
  p = rows_fma(p, t, ROWS_SPLAT(0.5f * -1.453152027f)); p = rows_fma(p, t, ROWS_SPLAT(0.5f * 1.421413741f));
  p = rows_fma(p, t, ROWS_SPLAT(0.5f * -0.284496736f)); p = rows_fma(p, t, ROWS_SPLAT(0.5f * 0.254829592f));
  const rows_vf e = rows_gelu_expneg(h), q = (t * p) * e;
  *pdf = ROWS_SPLAT(0.398942280401432678f) * e;
  return rows_sel(neg, q, ROWS_SPLAT(1.0f) - q);
}
/* bwd 0: gelu(x); 1: d gelu / dx */
static inline __attribute__((always_inline)) rows_vf rows_gelu8(rows_vf x, int bwd) {
  static const float P[10] = {2.277131677e-01f, -9.283248335e-02f, 4.597200453e-02f, -2.057107165e-02f,
                              8.023399860e-03f, -2.729480853e-03f, 8.125671884e-04f, -2.172634704e-04f,
                              5.834284093e-05f, -1.249171146e-05f};
  static const float D[11] = {2.697613835e-01f, -1.874410361e-01f, 1.524067819e-01f, -1.003950611e-01f,
                              5.292319506e-02f, -2.294590697e-02f, 8.397102356e-03f, -2.629181603e-03f,
                              7.328232750e-04f, -2.068011236e-04f, 4.527251804e-05f};
  const rows_vf s = x * x, u = rows_fma(s, ROWS_SPLAT(2.0f / 9.0f), ROWS_SPLAT(-1.0f));
  const float* c = bwd ? D : P;
  const int deg = bwd ? 10 : 9;
  rows_vf p = ROWS_SPLAT(c[deg]);
  for (int k = deg - 1; k >= 0; --k) p = rows_fma(p, u, ROWS_SPLAT(c[k]));
  const rows_vf c0 = rows_fma(x, p, ROWS_SPLAT(0.5f)), near = bwd ? c0 : x * c0;
  const rows_vi far = ~(s < ROWS_SPLAT(9.0f)); /* NaN too */
  if (__builtin_expect(!rows_any(far), 1)) return near;
  rows_vf pdf;
  const rows_vf cdf = rows_gelu_as(x, &pdf);
  return rows_sel(far, bwd ? rows_fma(x, pdf, cdf) : x * cdf, near);
}
static void RFN(gelu)(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) rows_st(y + i, rows_gelu8(rows_ld(x + i), 0));
  /* the last n % 8 as one padded vector: the same operations per element */
  if (i < n) rows_st_w(y + i, rows_gelu8(rows_ld_w(x + i, n - i, 0.0f), 0), n - i);
}
/* d gelu: g (cdf + x pdf) */
static void RFN(gelu_bwd)(const float* g, const float* x, float* o, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) rows_st(o + i, rows_ld(g + i) * rows_gelu8(rows_ld(x + i), 1));
  if (i < n) {
    /* d8 first: the base build then multiplies in the former order (a NaN g times a NaN d keeps g's NaN) */
    const rows_vf d8 = rows_gelu8(rows_ld_w(x + i, n - i, 0.0f), 1);
    rows_st_w(o + i, rows_ld_w(g + i, n - i, 0.0f) * d8, n - i);
  }
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
                                                     RFN(silu), RFN(silu_bwd), RFN(lerp), RFN(addc), RFN(stat2_f32),
                                                     RFN(stat2_runs), RFN(affine_rows), RFN(softmax_cols), RFN(softmax_cols_bwd)};
