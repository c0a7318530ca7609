/* test_rows.c — the row softmax kernels (drivers/host/rows.c): ROWS_SOFTMAX / ROWS_SOFTMAX_BWD
 * against plain double-precision loops on random shapes (row lengths 1 .. 4097), layouts
 * (contiguous, strided, the softmax dim in the middle) and dtypes; fully -inf rows give NaN;
 * every ISA build of the contiguous f32 kernels gives the same bits; bad operands fail cleanly.
 * ROWS_LAYER_NORM(_BWD) likewise against double loops (contiguous / strided rows, with and
 * without weight and bias). GELU / GELU_BWD: ISA builds bit-identical, A&S bound vs double, driver paths. SILU /
 * SILU_BWD: ISA builds bit-identical, a few ulp of double, driver paths. LERP: equal to an fmaf loop in every
 * ISA build, driver paths. ADDC: equal to the CPU-order scalar loops, driver paths. COL_SUMS: equal to
 * double loops, ISA builds bit-identical. stat2_f32 (channel statistics' one-pass run sums): double loops, ISA
 * builds bit-identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/rows.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static double drand_(void) { return (double)rand() / (double)RAND_MAX * 2.0 - 1.0; }
static int irand(int lo, int hi) { return lo + rand() % (hi - lo + 1); }

/* [A, N, I] view; layout 0 contiguous, 1 N innermost (as after a transpose), 2 every dim strided by 2 */
typedef struct { tpu_host_view_t v; char* buf; } hview_t;
static hview_t hview(int dt, const int64_t* sizes, int layout, double scale) {
  hview_t h;
  memset(&h, 0, sizeof(h));
  h.v.dtype = dt; h.v.rank = 3;
  int order[3] = {0, 1, 2};
  if (layout == 1) { order[1] = 2; order[2] = 1; }
  int64_t st = layout == 2 ? 2 : 1;
  for (int i = 2; i >= 0; --i) {
    int d = order[i];
    h.v.sizes[d] = sizes[d]; h.v.strides[d] = st;
    st *= sizes[d] * (layout == 2 ? 2 : 1);
  }
  h.buf = calloc((size_t)st + 1, tpu_dtype_size(dt));
  h.v.data = h.buf;
  for (int64_t i = 0; i <= st; ++i) tpu_host_store_f64(h.buf + i * (int64_t)tpu_dtype_size(dt), dt, drand_() * scale);
  return h;
}
static char* ptr(const tpu_host_view_t* v, int64_t a, int64_t n, int64_t i) {
  return v->data + (a * v->strides[0] + n * v->strides[1] + i * v->strides[2]) * (int64_t)tpu_dtype_size(v->dtype);
}
static double at(const tpu_host_view_t* v, int64_t a, int64_t n, int64_t i) { return tpu_host_load_f64(ptr(v, a, n, i), v->dtype); }

/* max |got - want| / (atol + rtol |want|) over the result, against double loops */
static double check_one(int dt, int bwd, int lg, const int64_t* s, int layout, double scale) {
  hview_t x = hview(dt, s, layout, scale), y = hview(dt, s, irand(0, 2), 1), o = hview(dt, s, irand(0, 2), 1);
  if (bwd && lg) /* y = a log_softmax output: <= 0 */
    for (int64_t a = 0; a < s[0]; ++a) for (int64_t n = 0; n < s[1]; ++n) for (int64_t i = 0; i < s[2]; ++i)
      tpu_host_store_f64(ptr(&y.v, a, n, i), dt, -fabs(at(&y.v, a, n, i)) * 3);
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM;
  op.i0 = bwd ? TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD : TPU_IR_CUSTOM_ROWS_SOFTMAX;
  op.i1 = lg;
  tpu_host_view_t xs[2] = {x.v, y.v};
  tpu_status_t st = tpu_host_k_rows(&op, bwd ? 2 : 1, xs, &o.v);
  CHECK(st == TPU_OK, "rows kernel: %s", tpu_status_message(st));
  tpu_status_free(st);
  const double atol = dt == TPU_DTYPE_F32 ? 1e-6 : 1e-14, rtol = dt == TPU_DTYPE_F32 ? 1e-5 : 1e-12;
  double worst = 0;
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t i = 0; i < s[2]; ++i) {
      double m = -INFINITY, sum = 0;
      if (!bwd) {
        for (int64_t n = 0; n < s[1]; ++n) m = fmax(m, at(&x.v, a, n, i));
        for (int64_t n = 0; n < s[1]; ++n) sum += exp(at(&x.v, a, n, i) - m);
      } else {
        for (int64_t n = 0; n < s[1]; ++n) sum += lg ? at(&x.v, a, n, i) : at(&x.v, a, n, i) * at(&y.v, a, n, i);
      }
      for (int64_t n = 0; n < s[1]; ++n) {
        double xv = at(&x.v, a, n, i), want;
        if (!bwd) want = lg ? xv - m - log(sum) : exp(xv - m) / sum;
        else want = lg ? xv - exp(at(&y.v, a, n, i)) * sum : at(&y.v, a, n, i) * (xv - sum);
        /* the row sum's rounding scales with the row's magnitude */
        double tol = atol * (bwd ? 1 + fabs(sum) + (double)s[1] : 1 + (lg ? fabs(xv - m) : 0)) + rtol * fabs(want);
        double e = fabs(at(&o.v, a, n, i) - want) / tol;
        if (!(e <= worst)) worst = e; /* NaN propagates */
      }
    }
  free(x.buf); free(y.buf); free(o.buf);
  return worst;
}

static void test_random(void) {
  static const int64_t lens[] = {1, 7, 33, 1000, 4097};
  for (int it = 0; it < 160; ++it) {
    int dt = it % 4 == 3 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
    int bwd = (it / 4) % 2, log = (it / 8) % 2, layout = irand(0, 2);
    int64_t N = it % 3 ? lens[irand(0, 4)] : irand(1, 70);
    int64_t s[3] = {irand(1, N > 1000 ? 3 : 9), N, layout == 1 || it % 5 == 0 ? irand(1, 5) : 1};
    double scale = it % 7 == 0 ? 60 : 4;
    double w = check_one(dt, bwd, log, s, layout, scale);
    CHECK(w <= 1, "%s %s%s [%lld, %lld, %lld] layout %d: error %g x tolerance", tpu_dtype_name(dt),
          log ? "log_softmax" : "softmax", bwd ? " backward" : "", (long long)s[0], (long long)s[1], (long long)s[2],
          layout, w);
  }
}

/* a fully -inf row is NaN (PyTorch's CPU kernel), a row with one finite value is one-hot */
static void test_masked(void) {
  int64_t s[3] = {3, 37, 1};
  for (int log = 0; log < 2; ++log) {
    hview_t x = hview(TPU_DTYPE_F32, s, 0, 1), o = hview(TPU_DTYPE_F32, s, 0, 1);
    float* xp = (float*)x.buf;
    for (int n = 0; n < 37; ++n) { xp[n] = -INFINITY; xp[37 + n] = n == 5 ? 2.f : -INFINITY; }
    tpu_ir_op_t op = {0};
    op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_ROWS_SOFTMAX; op.i1 = log;
    tpu_status_t st = tpu_host_k_rows(&op, 1, &x.v, &o.v);
    CHECK(st == TPU_OK, "masked rows: %s", tpu_status_message(st));
    tpu_status_free(st);
    const float* op_ = (const float*)o.buf;
    int nan_row = 1, onehot = 1;
    for (int n = 0; n < 37; ++n) {
      nan_row &= isnan(op_[n]);
      float want = log ? (n == 5 ? 0.f : -INFINITY) : (n == 5 ? 1.f : 0.f);
      onehot &= op_[37 + n] == want;
    }
    CHECK(nan_row, "all -inf row is NaN (log %d)", log);
    CHECK(onehot, "one finite value in a -inf row (log %d)", log);
    free(x.buf); free(o.buf);
  }
}

/* the AVX2 / AVX-512 builds give the base build's bits */
static void test_isa(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  for (int64_t n = 1; n < 300; n += 13) {
    float *x = malloc(n * 4), *y = malloc(n * 4), *r[3][2];
    for (int64_t i = 0; i < n; ++i) { x[i] = (float)(drand_() * 20); y[i] = (float)(-fabs(drand_()) * 3); }
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < 2; ++j) r[k][j] = calloc((size_t)n * 4, 4);
    for (int k = 0; k < 3; ++k) {
      if (!isa[k]) continue;
      for (int log = 0; log < 2; ++log) {
        isa[k]->softmax(x, r[k][log], n, log);
        isa[k]->softmax_bwd(x, y, r[k][log] + n, n, log);
      }
      isa[k]->layer_norm(x, 0.25f, 1.5f, y, y, r[k][0] + 2 * n, n);
      isa[k]->layer_norm_bwd(y, x, 0.25f, 1.5f, x, r[k][1] + 2 * n, n);
      isa[k]->layer_norm_bwd(x, y, -0.5f, 0.75f, NULL, r[k][1] + 3 * n, n);
    }
    for (int k = 1; k < 3; ++k)
      if (isa[k])
        for (int j = 0; j < 2; ++j) CHECK(!memcmp(r[0][j], r[k][j], (size_t)n * 12 + (j ? n * 4 : 0)), "ISA %d differs at n = %lld", k, (long long)n);
    for (int k = 0; k < 3; ++k) for (int j = 0; j < 2; ++j) free(r[k][j]);
    free(x); free(y);
  }
}

/* The exp inside the row kernels, bit for bit across the ISA builds over the whole float range: log_softmax's
 * backward with g = (1, 0, 0, ...) gives o[i] = -exp(y[i]) for i > 0 (y: random bit patterns, so NaNs, infinities,
 * denormals and huge values, and a dense sweep of [-110, 92] where results overflow, go denormal or underflow);
 * the forward's exp(x - max) on rows spanning 0 .. -200. Lengths cover the 16-lane loop and the 8-lane / scalar
 * tails. */
static uint32_t xrand32(uint64_t* s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return (uint32_t)(*s >> 11); }
static void test_exp_isa(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  const int64_t n = 1 << 17;
  float *y = malloc(n * 4), *g = calloc(n, 4), *r[3], *f[3];
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = xrand32(&seed);
    float v;
    memcpy(&v, &u, 4);
    y[i] = i % 2 ? v : -110.0f + 202.0f * (float)i / (float)n;
  }
  g[0] = 1.0f;
  for (int k = 0; k < 3; ++k) { r[k] = calloc(n, 4); f[k] = calloc(n, 4); }
  static const int64_t lens[] = {1, 7, 8, 15, 16, 17, 23, 31, 33, 96, 257};
  for (int k = 0; k < 3; ++k) {
    if (!isa[k]) continue;
    isa[k]->softmax_bwd(g, y, r[k], n, 1);
    int64_t off = 0;
    for (int j = 0; off < n; j = (j + 1) % 11) { /* rows of varied length: x - max from 0 to -200 */
      const int64_t len = lens[j] < n - off ? lens[j] : n - off;
      float xs[257];
      for (int64_t i = 0; i < len; ++i) xs[i] = -200.0f * (float)((off + i) % 997) / 996.0f;
      isa[k]->softmax(xs, f[k] + off, len, 0);
      off += len;
    }
  }
  int ok = 1;
  for (int64_t i = 1; i < n && ok; ++i) {
    const double want = exp((double)y[i]);
    const float got = -r[0][i];
    ok = isnan(y[i]) ? isnan(got) : isinf((float)want) ? got == (float)want : fabs(got - want) <= 2.5e-7 * want + 3e-45;
    if (!ok) printf("  base exp(%a) = %a, want %a\n", y[i], got, want);
  }
  CHECK(ok, "base build exp within 2 ulp of exp over the float range");
  for (int k = 1; k < 3; ++k)
    if (isa[k]) {
      CHECK(!memcmp(r[0], r[k], (size_t)n * 4), "ISA %d exp bits differ from the base build", k);
      CHECK(!memcmp(f[0], f[k], (size_t)n * 4), "ISA %d softmax bits differ from the base build", k);
    }
  for (int k = 0; k < 3; ++k) { free(r[k]); free(f[k]); }
  free(y); free(g);
}

/* ROWS_LAYER_NORM(_BWD) against double loops: [M, N] x (and g) contiguous or strided, w / b present or not */
static tpu_host_view_t v2(float* buf, int64_t M, int64_t N, int strided) {
  tpu_host_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = TPU_DTYPE_F32; v.rank = 2; v.data = (char*)buf;
  v.sizes[0] = M; v.sizes[1] = N;
  v.strides[1] = strided ? 3 : 1; v.strides[0] = N * v.strides[1] + (strided ? 5 : 0);
  return v;
}
static tpu_host_view_t v1(float* buf, int64_t n, int64_t st) {
  tpu_host_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = TPU_DTYPE_F32; v.rank = 1; v.data = (char*)buf; v.sizes[0] = n; v.strides[0] = st;
  return v;
}
static float* frand(int64_t n, double scale, double shift) {
  float* p = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) p[i] = (float)(drand_() * scale + shift);
  return p;
}
/* affine_rows (norm.c's CHANNEL_AFFINE rows): every ISA build equals the scalar f32 formula bit for bit */
static void test_affine_rows(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  static const int64_t ns[] = {1, 7, 8, 16, 17, 33};
  for (int t = 0; t < 6; ++t)
    for (int two = 0; two < 2; ++two) {
      const int64_t n = ns[t], rows = 5, st = n + 3;
      float *u = frand(rows * st, 3, 0), *v = frand(rows * st, 3, 0), *a = frand(rows, 2, 0), *b = frand(rows, 2, 0);
      float *c = frand(rows, 2, 0), *o = malloc(rows * st * 4), *want = malloc(rows * st * 4);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < n; ++i)
          want[r * st + i] = two ? u[r * st + i] * a[r] + v[r * st + i] * b[r] + c[r] : u[r * st + i] * a[r] + c[r];
      for (int k = 0; k < 3; ++k) {
        if (!isa[k]) continue;
        memset(o, 0, rows * st * 4);
        isa[k]->affine_rows(u, st, two ? v : NULL, st, o, st, n, rows, a, b, c);
        int same = 1;
        for (int64_t r = 0; r < rows; ++r) same &= !memcmp(o + r * st, want + r * st, n * 4);
        CHECK(same, "affine_rows ISA %d n %lld two %d", k, (long long)n, two);
      }
      free(u); free(v); free(a); free(b); free(c); free(o); free(want);
    }
}

static void test_layer_norm(void) {
  static const int64_t lens[] = {1, 7, 33, 1000, 4097};
  for (int it = 0; it < 80; ++it) {
    int bwd = it % 2, hw = (it / 2) % 2, hb = !bwd && (it / 4) % 2, sx = irand(0, 1), so = irand(0, 1);
    int64_t N = lens[irand(0, 4)], M = irand(1, N > 1000 ? 3 : 12), span = M * (N * 3 + 5);
    float *x = frand(span, 4, 2), *g = frand(span, 1, 0), *o = frand(span, 1, 0), *mean = malloc(M * 4), *rstd = malloc(M * 4);
    float *w = frand(N * 2, 1, 0), *b = frand(N, 1, 0);
    tpu_host_view_t vx = v2(x, M, N, sx), vg = v2(g, M, N, !sx), vo = v2(o, M, N, so);
    for (int64_t r = 0; r < M; ++r) { /* statistics as CHANNEL_STATS would give them */
      double s = 0, q = 0;
      for (int64_t i = 0; i < N; ++i) s += x[r * vx.strides[0] + i * vx.strides[1]];
      s /= (double)N;
      for (int64_t i = 0; i < N; ++i) { double d = x[r * vx.strides[0] + i * vx.strides[1]] - s; q += d * d; }
      mean[r] = (float)s; rstd[r] = (float)(1.0 / sqrt(q / (double)N + 1e-5));
    }
    tpu_host_view_t xs[5];
    int n = 0;
    if (bwd) xs[n++] = vg;
    xs[n++] = vx; xs[n++] = v1(mean, M, 1); xs[n++] = v1(rstd, M, 1);
    if (hw) xs[n++] = v1(w, N, it % 3 == 0 ? 2 : 1);
    if (hb) xs[n++] = v1(b, N, 1);
    tpu_ir_op_t op = {0};
    op.opcode = TPU_IR_CUSTOM;
    op.i0 = bwd ? TPU_IR_CUSTOM_ROWS_LAYER_NORM_BWD : TPU_IR_CUSTOM_ROWS_LAYER_NORM;
    op.i1 = hw | (hb << 1);
    tpu_status_t st = tpu_host_k_rows(&op, n, xs, &vo);
    CHECK(st == TPU_OK, "layer norm rows: %s", tpu_status_message(st));
    tpu_status_free(st);
    double worst = 0;
    for (int64_t r = 0; r < M; ++r) {
      double s1 = 0, s2 = 0;
      const float* xr = x + r * vx.strides[0];
      const float* gr = g + r * vg.strides[0];
      double wv, m = mean[r], rs = rstd[r];
      for (int64_t i = 0; i < N; ++i) {
        wv = hw ? w[i * xs[n - 1 - hb].strides[0]] : 1;
        double d = gr[i * vg.strides[1]] * wv;
        s1 += d; s2 += d * (xr[i * vx.strides[1]] - m);
      }
      for (int64_t i = 0; i < N; ++i) {
        wv = hw ? w[i * xs[n - 1 - hb].strides[0]] : 1;
        double xh = (xr[i * vx.strides[1]] - m) * rs, want;
        if (!bwd) want = xh * wv + (hb ? b[i] : 0);
        else want = rs * (gr[i * vg.strides[1]] * wv - s1 / (double)N - xh * rs * s2 / (double)N);
        double tol = 1e-5 * (1 + fabs(want)) * (bwd ? 1 + rs * (1 + sqrt((double)N) / 8) : 1 + fabs(xh));
        double e = fabs(o[r * vo.strides[0] + i * vo.strides[1]] - want) / tol;
        if (!(e <= worst)) worst = e;
      }
    }
    CHECK(worst <= 1, "layer norm%s [%lld, %lld] w %d b %d: error %g x tolerance", bwd ? " backward" : "", (long long)M,
          (long long)N, hw, hb, worst);
    free(x); free(g); free(o); free(mean); free(rstd); free(w); free(b);
  }
}

static void test_errors(void) {
  int64_t s[3] = {2, 3, 1};
  hview_t x = hview(TPU_DTYPE_F32, s, 0, 1), o = hview(TPU_DTYPE_F32, s, 0, 1), b = hview(TPU_DTYPE_BF16, s, 0, 1);
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD;
  tpu_status_t st = tpu_host_k_rows(&op, 1, &x.v, &o.v); /* backward needs two operands */
  CHECK(st != TPU_OK, "one operand for the backward is refused");
  tpu_status_free(st);
  op.i0 = TPU_IR_CUSTOM_ROWS_SOFTMAX;
  st = tpu_host_k_rows(&op, 1, &b.v, &b.v);
  CHECK(st != TPU_OK && tpu_status_code(st) == TPU_STATUS_UNSUPPORTED, "bf16 rows are refused");
  tpu_status_free(st);
  o.v.sizes[1] = 4;
  st = tpu_host_k_rows(&op, 1, &x.v, &o.v);
  CHECK(st != TPU_OK, "mismatched shapes are refused");
  tpu_status_free(st);
  free(x.buf); free(o.buf); free(b.buf);
}

/* GELU / GELU_BWD (custom targets through tpu_host_k_rows): every ISA build gives the same bits (specials
 * included), the results stay within A&S 7.1.26's bound of erfc in double, and the driver's flat, strided-row
 * and rank-0 paths agree with the contiguous kernel; mismatched or non-f32 operands fail cleanly. */
static double gelu_ref(double x, double* d) {
  double cdf = 0.5 * erfc(-x / sqrt(2.0)), pdf = exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
  *d = cdf + x * pdf;
  return x * cdf;
}
/* The driver of a one-pass f32 pointwise pair (custom id_fwd(x) / id_bwd(g, x)): [5, 7, 9] contiguous (flat),
 * transposed-strided (rows gathered) and rank-0 views equal the ISA-0 kernel bit for bit; a wrong operand
 * count, mismatched shapes and bf16 are refused. */
static void check_pointwise_driver(const char* name, void (*fwd)(const float*, float*, int64_t),
                                   void (*bwd)(const float*, const float*, float*, int64_t), int id_fwd, int id_bwd,
                                   double xscale) {
  enum { A = 5, B = 7, C = 9, T = A * B * C };
  float *x = frand(2 * T, xscale, 0), *g = frand(2 * T, 1, 0), *o1 = calloc(T, 4), *o2 = calloc(2 * T, 4), *ref = calloc(2 * T, 4);
  fwd(x, ref, T);
  bwd(g, x, ref + T, T);
  for (int bwd = 0; bwd < 2; ++bwd) {
    tpu_ir_op_t op = {0};
    op.opcode = TPU_IR_CUSTOM; op.i0 = bwd ? id_bwd : id_fwd;
    tpu_host_view_t in[2], out;
    memset(in, 0, sizeof(in)); memset(&out, 0, sizeof(out));
    for (int k = 0; k < 2; ++k) {
      in[k].dtype = TPU_DTYPE_F32; in[k].rank = 3; in[k].data = (char*)(k == bwd ? x : g);
      in[k].sizes[0] = A; in[k].sizes[1] = B; in[k].sizes[2] = C;
      in[k].strides[0] = B * C; in[k].strides[1] = C; in[k].strides[2] = 1;
    }
    out = in[0]; out.data = (char*)o1;
    tpu_status_t st = tpu_host_k_rows(&op, bwd + 1, in, &out);
    CHECK(st == TPU_OK && !memcmp(o1, ref + bwd * T, T * 4), "%s driver (flat) bwd %d", name, bwd);
    tpu_status_free(st);
    /* the same elements through views with last-dim stride 2 (x, g) and a strided result */
    float *x2 = calloc(2 * T, 4), *g2 = calloc(2 * T, 4);
    for (int64_t i = 0; i < T; ++i) { x2[2 * i] = x[i]; g2[2 * i] = g[i]; }
    for (int k = 0; k < 2; ++k) {
      in[k].data = (char*)(k == bwd ? x2 : g2);
      in[k].strides[0] = 2 * B * C; in[k].strides[1] = 2 * C; in[k].strides[2] = 2;
    }
    out = in[0]; out.data = (char*)o2;
    memset(o2, 0, 2 * T * 4);
    st = tpu_host_k_rows(&op, bwd + 1, in, &out);
    int same = st == TPU_OK;
    for (int64_t i = 0; same && i < T; ++i) same = !memcmp(&o2[2 * i], &ref[bwd * T + i], 4) && o2[2 * i + 1] == 0;
    CHECK(same, "%s driver (strided rows) bwd %d", name, bwd);
    tpu_status_free(st);
    /* rank 0 */
    for (int k = 0; k < 2; ++k) { in[k].rank = 0; in[k].data = (char*)(k == bwd ? x : g); }
    out = in[0]; out.data = (char*)o1;
    st = tpu_host_k_rows(&op, bwd + 1, in, &out);
    CHECK(st == TPU_OK && !memcmp(o1, ref + bwd * T, 4), "%s driver (rank 0) bwd %d", name, bwd);
    tpu_status_free(st);
    /* errors: wrong operand count, shape mismatch, bf16 */
    st = tpu_host_k_rows(&op, bwd ? 1 : 2, in, &out);
    CHECK(st != TPU_OK, "%s with a wrong operand count is refused", name);
    tpu_status_free(st);
    for (int k = 0; k < 2; ++k) { in[k].rank = 1; in[k].sizes[0] = 4; in[k].strides[0] = 1; }
    out = in[0]; out.sizes[0] = 5;
    st = tpu_host_k_rows(&op, bwd + 1, in, &out);
    CHECK(st != TPU_OK, "%s with mismatched shapes is refused", name);
    tpu_status_free(st);
    out.sizes[0] = 4; out.dtype = TPU_DTYPE_BF16;
    st = tpu_host_k_rows(&op, bwd + 1, in, &out);
    CHECK(st != TPU_OK, "bf16 %s is refused", name);
    tpu_status_free(st);
    free(x2); free(g2);
  }
  free(x); free(g); free(o1); free(o2); free(ref);
}

static void test_gelu(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f, 1e-45f, -13.19f, -13.2f,
                            -13.3f, -87.0f, 87.5f, -1e30f, 1e30f, 0.75f, -0.75f, 3.4e38f, -3.4e38f,
                            2.9999998f, -2.9999998f, 3.0f, -3.0f, 3.0000002f, -3.0000002f}; /* the polynomial / A&S edge */
  const int ns = (int)(sizeof(specials) / sizeof(specials[0]));
  for (int64_t n = 1; n < 700; n += 37) {
    float *x = malloc((size_t)(n + ns) * 4), *g = malloc((size_t)(n + ns) * 4), *r[3];
    for (int64_t i = 0; i < n; ++i) { x[i] = (float)(drand_() * (i % 3 ? 4 : 15)); g[i] = (float)drand_(); }
    for (int i = 0; i < ns; ++i) { x[n + i] = specials[i]; g[n + i] = 1.0f; }
    const int64_t m = n + ns;
    for (int k = 0; k < 3; ++k) {
      r[k] = calloc((size_t)m * 2, 4);
      if (!isa[k]) continue;
      isa[k]->gelu(x, r[k], m);
      isa[k]->gelu_bwd(g, x, r[k] + m, m);
    }
    for (int k = 1; k < 3; ++k)
      if (isa[k]) CHECK(!memcmp(r[0], r[k], (size_t)m * 8), "gelu: ISA %d differs at n = %lld", k, (long long)n);
    int bad = 0;
    for (int64_t i = 0; i < m; ++i) {
      double d, y = gelu_ref(x[i], &d), dx = g[i] * d, ax = fabs(x[i]) > 1 ? fabs(x[i]) : 1;
      double ey = fabs(r[0][i] - y), ed = fabs(r[0][m + i] - dx);
      int ok_y = isnan(x[i]) ? isnan(r[0][i]) : (isinf(x[i]) ? (x[i] > 0 ? r[0][i] == INFINITY : isnan(r[0][i]))
                                                  : ey <= 1e-7 * ax + 2 * fabs(y) * 0x1p-24);
      int ok_d = isnan(x[i]) || isinf(x[i]) ? isnan(r[0][m + i]) || (x[i] < 0 && r[0][m + i] == 0)
                                           : ed <= 2e-7 * ax * fabs(g[i]) + 2 * fabs(dx) * 0x1p-24 + 1e-30;
      if (!(ok_y && ok_d) && bad++ < 3) printf("  gelu x = %.9g: y %.9g want %.9g, dx %.9g want %.9g\n", x[i], r[0][i], y, r[0][m + i], dx);
    }
    CHECK(!bad, "gelu within A&S's bound of double at n = %lld (%d bad)", (long long)n, bad);
    for (int k = 0; k < 3; ++k) free(r[k]);
    free(x); free(g);
  }
  check_pointwise_driver("gelu", isa[0]->gelu, isa[0]->gelu_bwd, TPU_IR_CUSTOM_GELU, TPU_IR_CUSTOM_GELU_BWD, 4);
}

/* SILU / SILU_BWD: every ISA build gives the same bits (specials included), results stay within a few ulp of
 * double (the backward's 1 - s, as in PyTorch's formula, adds up to |x| ulp(1)), and the driver's flat and
 * strided-row paths agree with the contiguous kernel. */
static void test_silu(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f, 1e-45f, -87.0f, -88.8f,
                            -103.9f, -104.0f, -150.0f, 87.5f, 88.8f, 104.0f, -1e30f, 1e30f, 3.4e38f, -3.4e38f};
  const int ns = (int)(sizeof(specials) / sizeof(specials[0]));
  for (int64_t n = 1; n < 700; n += 37) {
    float *x = malloc((size_t)(n + ns) * 4), *g = malloc((size_t)(n + ns) * 4), *r[3];
    for (int64_t i = 0; i < n; ++i) { x[i] = (float)(drand_() * (i % 3 ? 6 : 40)); g[i] = (float)drand_(); }
    for (int i = 0; i < ns; ++i) { x[n + i] = specials[i]; g[n + i] = 1.0f; }
    const int64_t m = n + ns;
    for (int k = 0; k < 3; ++k) {
      r[k] = calloc((size_t)m * 2, 4);
      if (!isa[k]) continue;
      isa[k]->silu(x, r[k], m);
      isa[k]->silu_bwd(g, x, r[k] + m, m);
    }
    for (int k = 1; k < 3; ++k)
      if (isa[k]) CHECK(!memcmp(r[0], r[k], (size_t)m * 8), "silu: ISA %d differs at n = %lld", k, (long long)n);
    int bad = 0;
    for (int64_t i = 0; i < m; ++i) {
      /* exp(-x) past f32's range is inf on the CPU too (x < -88.72: y = -0) */
      const double xd = x[i], e = exp(-xd) > 3.4028234663852886e38 ? INFINITY : exp(-xd);
      const double sd = 1.0 / (1.0 + e), y = xd / (1.0 + e), d = sd * (1.0 + xd * (1.0 - sd)), dx = g[i] * d;
      const double ey = fabs(r[0][i] - y), ed = fabs(r[0][m + i] - dx);
      int ok_y, ok_d;
      if (isnan(x[i])) ok_y = ok_d = isnan(r[0][i]) && isnan(r[0][m + i]);
      else if (isinf(x[i])) {
        ok_y = x[i] > 0 ? r[0][i] == INFINITY : isnan(r[0][i]); /* -inf / (1 + inf): NaN, as on the CPU */
        ok_d = x[i] > 0 ? isnan(r[0][m + i]) || r[0][m + i] == g[i] : r[0][m + i] == 0 || isnan(r[0][m + i]);
      } else {
        ok_y = ey <= 6 * 0x1p-24 * fabs(y) + 0x1p-146;
        ok_d = ed <= fabs(g[i]) * 0x1p-24 * (8 * fabs(d) + 2 * fabs(xd)) + 0x1p-146;
      }
      if (!(ok_y && ok_d) && bad++ < 3) printf("  silu x = %.9g: y %.9g want %.9g, dx %.9g want %.9g\n", x[i], r[0][i], y, r[0][m + i], dx);
    }
    CHECK(!bad, "silu within a few ulp of double at n = %lld (%d bad)", (long long)n, bad);
    for (int k = 0; k < 3; ++k) free(r[k]);
    free(x); free(g);
  }
  check_pointwise_driver("silu", isa[0]->silu, isa[0]->silu_bwd, TPU_IR_CUSTOM_SILU, TPU_IR_CUSTOM_SILU_BWD, 8);
}

/* LERP: every ISA build equals a scalar loop of libm's fmaf (PyTorch's CPU formula, one rounding) for scalar
 * and per-element weights (specials included); the driver's flat and strided-row paths with rank-0 and
 * full-shape weights agree; bad operands fail cleanly. */
static float lerp_ref(float a, float b, float w) {
  return fabsf(w) < 0.5f ? fmaf(w, b - a, a) : fmaf(w - 1.0f, b - a, b);
}
static void test_lerp(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  const float ws[] = {0.1f, 0.5f, -0.5f, 0.4999f, 0.7f, -0.3f, 1.0f, 0.0f, 2.5f, INFINITY, NAN};
  for (int64_t n = 1; n < 300; n += 23) {
    float *a = frand(n, 3, 0), *b = frand(n, 3, 0), *w = frand(n, 1, 0.25), *o = malloc((size_t)n * 4), *r = malloc((size_t)n * 4);
    if (n > 3) { a[0] = NAN; b[1] = INFINITY; w[2] = NAN; w[3] = -INFINITY; }
    for (int k = 0; k < 3; ++k) {
      if (!isa[k]) continue;
      int same = 1;
      for (int q = 0; q < (int)(sizeof(ws) / sizeof(ws[0])); ++q) {
        isa[k]->lerp(a, b, &ws[q], 0, o, n);
        for (int64_t i = 0; i < n; ++i) { r[i] = lerp_ref(a[i], b[i], ws[q]); same &= !memcmp(&o[i], &r[i], 4) || (isnan(o[i]) && isnan(r[i])); }
      }
      isa[k]->lerp(a, b, w, 1, o, n);
      for (int64_t i = 0; i < n; ++i) { r[i] = lerp_ref(a[i], b[i], w[i]); same &= !memcmp(&o[i], &r[i], 4) || (isnan(o[i]) && isnan(r[i])); }
      CHECK(same, "lerp: ISA %d equals the fmaf loop at n = %lld", k, (long long)n);
    }
    free(a); free(b); free(w); free(o); free(r);
  }
  enum { A = 5, B = 7, C = 9, T = A * B * C };
  float *a = frand(2 * T, 3, 0), *b = frand(2 * T, 3, 0), *w = frand(2 * T, 1, 0.25), *o = calloc(2 * T, 4);
  const float w0 = 0.3f;
  for (int per = 0; per < 2; ++per) {      /* weight rank 0 / full shape */
    for (int strided = 0; strided < 2; ++strided) {
      const int64_t s = strided ? 2 : 1;
      tpu_ir_op_t op = {0};
      op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_LERP;
      tpu_host_view_t in[3], out;
      memset(in, 0, sizeof(in));
      for (int k = 0; k < 3; ++k) {
        in[k].dtype = TPU_DTYPE_F32; in[k].rank = 3; in[k].data = (char*)(k == 0 ? a : k == 1 ? b : w);
        in[k].sizes[0] = A; in[k].sizes[1] = B; in[k].sizes[2] = C;
        in[k].strides[0] = s * B * C; in[k].strides[1] = s * C; in[k].strides[2] = s;
      }
      if (!per) { in[2].rank = 0; in[2].data = (char*)&w0; }
      out = in[0]; out.data = (char*)o;
      memset(o, 0, 2 * T * 4);
      tpu_status_t st = tpu_host_k_rows(&op, 3, in, &out);
      int same = st == TPU_OK;
      for (int64_t i = 0; same && i < T; ++i) {
        const float want = lerp_ref(a[i * s], b[i * s], per ? w[i * s] : w0);
        same = !memcmp(&o[i * s], &want, 4) && (!strided || o[i * s + 1] == 0);
      }
      CHECK(same, "lerp driver (weight %s, %s)", per ? "per element" : "rank 0", strided ? "strided rows" : "flat");
      tpu_status_free(st);
      st = tpu_host_k_rows(&op, 2, in, &out);
      CHECK(st != TPU_OK, "lerp with 2 operands is refused");
      tpu_status_free(st);
      in[2].rank = 1; in[2].sizes[0] = C;
      st = tpu_host_k_rows(&op, 3, in, &out);
      CHECK(st != TPU_OK, "lerp with a broadcast weight is refused");
      tpu_status_free(st);
    }
  }
  free(a); free(b); free(w); free(o);
}

/* ADDC: every ISA build equals a scalar loop of fmaf(v a, b, s) (addcmul) / s + (v a) / b (addcdiv); the
 * driver's flat and strided paths agree; a non-scalar value is refused. */
static void test_addc(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  for (int64_t n = 1; n < 300; n += 29) {
    float *sv = frand(n, 3, 0), *a = frand(n, 3, 0), *b = frand(n, 3, 0), *o = malloc((size_t)n * 4);
    if (n > 3) { sv[0] = NAN; a[1] = INFINITY; b[2] = 0.0f; }
    for (int div = 0; div < 2; ++div)
      for (int k = 0; k < 3; ++k) {
        if (!isa[k]) continue;
        int same = 1;
        const float v = div ? -0.0110701f : 1e-3f;
        isa[k]->addc(sv, a, b, v, o, n, div);
        for (int64_t i = 0; i < n; ++i) {
          const float want = div ? sv[i] + (v * a[i]) / b[i] : fmaf(v * a[i], b[i], sv[i]);
          same &= !memcmp(&o[i], &want, 4) || (isnan(o[i]) && isnan(want));
        }
        CHECK(same, "addc div %d: ISA %d equals the scalar loop at n = %lld", div, k, (long long)n);
      }
    free(sv); free(a); free(b); free(o);
  }
  enum { A = 4, B = 6, C = 11, T = A * B * C };
  float *sv = frand(2 * T, 3, 0), *a = frand(2 * T, 3, 0), *b = frand(2 * T, 3, 0), *o = calloc(2 * T, 4);
  const float v = 0.37f;
  for (int div = 0; div < 2; ++div)
    for (int strided = 0; strided < 2; ++strided) {
      const int64_t st = strided ? 2 : 1;
      tpu_ir_op_t op = {0};
      op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_ADDC; op.i1 = div;
      tpu_host_view_t in[4], out;
      memset(in, 0, sizeof(in));
      for (int k = 0; k < 3; ++k) {
        in[k].dtype = TPU_DTYPE_F32; in[k].rank = 3; in[k].data = (char*)(k == 0 ? sv : k == 1 ? a : b);
        in[k].sizes[0] = A; in[k].sizes[1] = B; in[k].sizes[2] = C;
        in[k].strides[0] = st * B * C; in[k].strides[1] = st * C; in[k].strides[2] = st;
      }
      in[3].dtype = TPU_DTYPE_F32; in[3].rank = 0; in[3].data = (char*)&v;
      out = in[0]; out.data = (char*)o;
      memset(o, 0, 2 * T * 4);
      tpu_status_t stt = tpu_host_k_rows(&op, 4, in, &out);
      int same = stt == TPU_OK;
      for (int64_t i = 0; same && i < T; ++i) {
        const int64_t j = i * st;
        const float want = div ? sv[j] + (v * a[j]) / b[j] : fmaf(v * a[j], b[j], sv[j]);
        same = !memcmp(&o[j], &want, 4) && (!strided || o[j + 1] == 0);
      }
      CHECK(same, "addc driver div %d %s", div, strided ? "strided rows" : "flat");
      tpu_status_free(stt);
      in[3].rank = 1; in[3].sizes[0] = 1; in[3].strides[0] = 1;
      stt = tpu_host_k_rows(&op, 4, in, &out);
      CHECK(stt != TPU_OK, "addc with a non-scalar value is refused");
      tpu_status_free(stt);
    }
  free(sv); free(a); free(b); free(o);
}

/* COL_SUMS: the kernel adds each column's f32 terms in row order in double, so a plain double loop in the
 * same order gives the same bits; every ISA build likewise; strided and contiguous operands agree. */
static void test_col_sums(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  const int64_t Ms[] = {1, 3, 64, 65, 300}, Ns[] = {1, 7, 8, 31, 33, 257, 300};
  for (int a = 0; a < 5; ++a)
    for (int b = 0; b < 7; ++b) {
      const int64_t M = Ms[a], N = Ns[b];
      for (int ln = 0; ln < 2; ++ln)
        for (int strided = 0; strided < 2; ++strided) {
          float *x = frand(M * (N * 3 + 5) + 8, 3, 0.5), *g = frand(M * (N * 3 + 5) + 8, 1, 0), *mean = frand(M * 2, 1, 0),
                *rstd = frand(M * 2, 1, 1.5), *o = calloc((size_t)N * 6 + 8, 4);
          tpu_host_view_t in[4], out;
          memset(in, 0, sizeof(in)); memset(&out, 0, sizeof(out));
          in[0] = v2(ln ? g : x, M, N, strided); in[1] = v2(x, M, N, strided);
          in[2] = v1(mean, M, strided ? 2 : 1); in[3] = v1(rstd, M, 1);
          if (ln) { out = v2(o, 2, N, strided); }
          else { out = v1(o, N, strided ? 3 : 1); }
          tpu_ir_op_t op = {0};
          op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_COL_SUMS; op.i1 = ln;
          tpu_status_t st = tpu_host_k_rows(&op, ln ? 4 : 1, ln ? in : &in[1], &out);
          int ok = st == TPU_OK;
          tpu_status_free(st);
          for (int64_t j = 0; ok && j < N; ++j) {
            double s1 = 0, s2 = 0;
            for (int64_t r = 0; r < M; ++r) {
              const float xv = *((const float*)in[1].data + r * in[1].strides[0] + j * in[1].strides[1]);
              if (!ln) { s1 += (double)xv; continue; }
              const float gv = *((const float*)in[0].data + r * in[0].strides[0] + j * in[0].strides[1]);
              const float mu = mean[r * in[2].strides[0]], rs = rstd[r];
              s1 += (double)(gv * ((xv - mu) * rs)); s2 += (double)gv;
            }
            if (ln) ok = o[j * out.strides[1]] == (float)s1 && o[out.strides[0] + j * out.strides[1]] == (float)s2;
            else ok = o[j * out.strides[0]] == (float)s1;
          }
          CHECK(ok, "col sums M %lld N %lld ln %d strided %d equal the double loop", (long long)M, (long long)N, ln, strided);
          if (!strided && isa[0]) { /* ISA builds, directly */
            double *r1[3], *r2[3];
            for (int k = 0; k < 3; ++k) {
              r1[k] = calloc((size_t)N, 8); r2[k] = calloc((size_t)N, 8);
              if (!isa[k]) continue;
              if (ln) isa[k]->ln_col_sums(g, N, x, N, mean, 1, rstd, 1, M, r1[k], r2[k], N);
              else isa[k]->col_sums(x, N, M, r1[k], N);
            }
            for (int k = 1; k < 3; ++k)
              if (isa[k]) CHECK(!memcmp(r1[0], r1[k], (size_t)N * 8) && !memcmp(r2[0], r2[k], (size_t)N * 8),
                                "col sums ISA %d bits (M %lld N %lld ln %d)", k, (long long)M, (long long)N, ln);
            for (int k = 0; k < 3; ++k) { free(r1[k]); free(r2[k]); }
          }
          free(x); free(g); free(mean); free(rstd); free(o);
        }
    }
  /* errors: operand count, shape, dtype */
  float buf[64] = {0};
  tpu_host_view_t x = v2(buf, 4, 4, 0), o = v1(buf + 32, 4, 1), bad = v1(buf + 32, 5, 1);
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_COL_SUMS;
  tpu_status_t st = tpu_host_k_rows(&op, 1, &x, &bad);
  CHECK(st != TPU_OK, "col sums with a mismatched result is refused");
  tpu_status_free(st);
  op.i1 = 1;
  st = tpu_host_k_rows(&op, 1, &x, &o);
  CHECK(st != TPU_OK, "layer-norm col sums with one operand is refused");
  tpu_status_free(st);
  op.i1 = 0; x.dtype = TPU_DTYPE_BF16;
  st = tpu_host_k_rows(&op, 1, &x, &o);
  CHECK(st != TPU_OK, "bf16 col sums are refused");
  tpu_status_free(st);
}

/* stat2_f32 (norm.c's one-pass run sums): every ISA build gives the same bits, and the sums match double loops
 * (to double rounding: the lanes add as a tree) for run lengths around the 16-element steps */
static void test_stat2(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  const int64_t ns[] = {1, 7, 15, 16, 17, 31, 32, 33, 100, 1000};
  for (int c = 0; c < 10; ++c)
    for (int grad = 0; grad < 2; ++grad) {
      const int64_t n = ns[c];
      float *x = frand(n, 3, 100), *g = frand(n, 1, 0);
      const double m = grad ? 99.5 : (double)x[0];
      double w1 = 0, w2 = 0, s1[3], s2[3];
      for (int64_t i = 0; i < n; ++i) {
        const double d = (double)x[i] - m;
        if (grad) { w1 += (double)g[i]; w2 += (double)g[i] * d; } else { w1 += d; w2 += d * d; }
      }
      for (int k = 0; k < 3; ++k) {
        if (!isa[k]) continue;
        isa[k]->stat2_f32(grad ? g : NULL, x, n, m, &s1[k], &s2[k]);
        CHECK(fabs(s1[k] - w1) <= 1e-12 * (1 + fabs(w1) + n) && fabs(s2[k] - w2) <= 1e-12 * (1 + fabs(w2) + n),
              "stat2 isa %d n %lld grad %d: %.17g %.17g vs %.17g %.17g", k, (long long)n, grad, s1[k], s2[k], w1, w2);
        if (k) CHECK(s1[k] == s1[0] && s2[k] == s2[0], "stat2 isa %d n %lld: bits differ from the base build", k, (long long)n);
      }
      free(x); free(g);
    }
}

/* softmax_cols (rows along a strided dim, 8 at a time): every ISA build gives the base build's bits, forward and
 * backward, softmax and log_softmax, w = 1..8 lanes, and each lane matches the contiguous row kernel to rounding */
static void test_cols_isa(void) {
  const tpu_host_rows_ops_t* isa[3] = {&tpu_host_rows_ops_base, NULL, NULL};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_rows_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_rows_ops_avx512;
  const int64_t ns[] = {1, 5, 40};
  for (int c = 0; c < 3; ++c)
    for (int64_t w = 1; w <= 8; ++w)
      for (int lg = 0; lg < 2; ++lg) {
        const int64_t n = ns[c], st = 11; /* row stride 11 >= w */
        float *x = frand(n * st, 4, 0), *g = frand(n * st, 1, 0), *o[3], *b[3], row[64], ref[64];
        if (w == 3) x[0] = -INFINITY;
        for (int k = 0; k < 3; ++k) {
          o[k] = calloc((size_t)(n * st), 4); b[k] = calloc((size_t)(n * st), 4);
          if (!isa[k]) continue;
          isa[k]->softmax_cols(x, st, o[k], st, n, w, lg);
          isa[k]->softmax_cols_bwd(g, st, o[k], st, b[k], st, n, w, lg);
          if (k) CHECK(!memcmp(o[k], o[0], (size_t)(n * st) * 4) && !memcmp(b[k], b[0], (size_t)(n * st) * 4),
                       "softmax_cols isa %d n %lld w %lld log %d: bits differ from the base build", k, (long long)n, (long long)w, lg);
        }
        double worst = 0;
        for (int64_t l = 0; l < w; ++l) {
          for (int64_t k = 0; k < n; ++k) row[k] = x[k * st + l];
          isa[0]->softmax(row, ref, n, lg);
          for (int64_t k = 0; k < n; ++k) worst = fmax(worst, fabs(ref[k] - o[0][k * st + l]) / (1e-6 + 1e-5 * fabs(ref[k])));
        }
        CHECK(worst <= 1, "softmax_cols n %lld w %lld log %d: %g tolerances from the row kernel", (long long)n, (long long)w, lg, worst);
        for (int k = 0; k < 3; ++k) { free(o[k]); free(b[k]); }
        free(x); free(g);
      }
}

int main(void) {
  srand(7);
  test_random();
  test_masked();
  test_isa();
  test_exp_isa();
  test_layer_norm();
  test_affine_rows();
  test_errors();
  test_gelu();
  test_silu();
  test_lerp();
  test_addc();
  test_col_sums();
  test_stat2();
  test_cols_isa();
  printf("test_rows: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
