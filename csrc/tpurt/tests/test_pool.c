/* test_pool.c — pooling / normalization / upsampling lowerings (lower/norm_pool.c)
 * end to end through tpu_op_run, and the host reduce_window kernel
 * (drivers/host/pool.c), against naive loops computed here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/host.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

static void* g_allocs[128];
static int g_nalloc;
static tpu_tensor_t dev(tpu_dtype_t dt, int ndim, const int64_t* sizes, const void* host) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  void* p = NULL;
  OK(tpu_rt_malloc(0, (size_t)(n ? n : 1) * tpu_dtype_size(dt), &p));
  if (g_nalloc < 128) g_allocs[g_nalloc++] = p;
  if (host && n) OK(tpu_rt_memcpy_h2d(0, p, host, (size_t)n * tpu_dtype_size(dt)));
  return tpu_tensor_contiguous(p, 0, dt, ndim, sizes);
}
static void rd(const tpu_tensor_t* t, void* host) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->sizes[d];
  OK(tpu_rt_synchronize(0));
  if (n) OK(tpu_rt_memcpy_d2h(0, host, t->data, (size_t)n * tpu_dtype_size(t->dtype)));
}
static tpu_arg_t ilist(const int64_t* v, int n) { tpu_arg_t a = {0}; a.kind = TPU_ARG_INT_LIST; a.ints = v; a.len = n; return a; }

enum { N = 2, C = 3, H = 7, W = 6 };

/* max_pool2d_with_indices.out: k 3x2, stride 2x1, pad 1x0, dilation 1x2 */
static void test_max_pool2d(void) {
  static float x[N * C * H * W];
  for (int i = 0; i < N * C * H * W; ++i) x[i] = frand();
  int64_t k[2] = {3, 2}, s[2] = {2, 1}, p[2] = {1, 0}, dl[2] = {1, 2};
  int64_t OH = (H + 2 * p[0] - dl[0] * (k[0] - 1) - 1) / s[0] + 1, OW = (W + 2 * p[1] - dl[1] * (k[1] - 1) - 1) / s[1] + 1;
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, H, W}, x);
  tpu_tensor_t to = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, OH, OW}, NULL);
  tpu_tensor_t ti = dev(TPU_DTYPE_I64, 4, (int64_t[]){N, C, OH, OW}, NULL);
  tpu_arg_t args[] = {tpu_arg_tensor(&tx), ilist(k, 2), ilist(s, 2), ilist(p, 2), ilist(dl, 2), tpu_arg_bool(false),
                      tpu_arg_tensor(&to), tpu_arg_tensor(&ti)};
  tpu_tensor_t outs[2] = {to, ti};
  OK(tpu_op_run(0, "aten::max_pool2d_with_indices.out", args, 8, outs, 2));
  float* o = malloc(sizeof(float) * (size_t)(N * C * OH * OW));
  int64_t* oi = malloc(sizeof(int64_t) * (size_t)(N * C * OH * OW));
  rd(&to, o); rd(&ti, oi);
  int ok = 1;
  for (int b = 0; b < N * C; ++b)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        float m = -INFINITY; int64_t mi = -1;
        for (int64_t a = 0; a < k[0]; ++a)
          for (int64_t c = 0; c < k[1]; ++c) {
            int64_t h = oh * s[0] - p[0] + a * dl[0], w = ow * s[1] - p[1] + c * dl[1];
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            float v = x[b * H * W + h * W + w];
            if (v > m || mi < 0) { m = v; mi = h * W + w; }
          }
        int64_t q = b * OH * OW + oh * OW + ow;
        ok &= o[q] == m && oi[q] == mi;
      }
  CHECK(ok, "max_pool2d values and indices");
  /* backward: scatter-add of grad at the indices */
  float* g = malloc(sizeof(float) * (size_t)(N * C * OH * OW));
  for (int64_t i = 0; i < N * C * OH * OW; ++i) g[i] = frand();
  tpu_tensor_t tg = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, OH, OW}, g);
  tpu_tensor_t tgi = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, H, W}, NULL);
  tpu_arg_t bargs[] = {tpu_arg_tensor(&tg), tpu_arg_tensor(&tx), ilist(k, 2), ilist(s, 2), ilist(p, 2), ilist(dl, 2),
                       tpu_arg_bool(false), tpu_arg_tensor(&ti), tpu_arg_tensor(&tgi)};
  OK(tpu_op_run(0, "aten::max_pool2d_with_indices_backward.grad_input", bargs, 9, &tgi, 1));
  static float gi[N * C * H * W], ref[N * C * H * W];
  rd(&tgi, gi);
  memset(ref, 0, sizeof ref);
  for (int b = 0; b < N * C; ++b)
    for (int64_t q = 0; q < OH * OW; ++q) ref[b * H * W + oi[b * OH * OW + q]] += g[b * OH * OW + q];
  ok = 1;
  for (int i = 0; i < N * C * H * W; ++i) ok &= fabsf(gi[i] - ref[i]) < 1e-5f;
  CHECK(ok, "max_pool2d backward");
  free(o); free(oi); free(g);
}

/* avg_pool2d.out: k 3, stride 2, pad 1, ceil_mode, count_include_pad false */
static void test_avg_pool2d(void) {
  static float x[N * C * H * W];
  for (int i = 0; i < N * C * H * W; ++i) x[i] = frand();
  int64_t k[2] = {3, 3}, s[2] = {2, 2}, p[2] = {1, 1};
  int64_t OH = 4, OW = 4; /* ceil((7 + 2 - 3) / 2) + 1 = 4, ceil((6 + 2 - 3) / 2) + 1 = 4 (last starts inside) */
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, H, W}, x);
  tpu_tensor_t to = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, OH, OW}, NULL);
  for (int inc = 0; inc < 2; ++inc) {
    tpu_arg_t args[] = {tpu_arg_tensor(&tx), ilist(k, 2), ilist(s, 2), ilist(p, 2), tpu_arg_bool(true), tpu_arg_bool(inc),
                        tpu_arg_none(), tpu_arg_tensor(&to)};
    OK(tpu_op_run(0, "aten::avg_pool2d.out", args, 8, &to, 1));
    float o[N * C * 4 * 4];
    rd(&to, o);
    int ok = 1;
    for (int b = 0; b < N * C; ++b)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t hs = oh * s[0] - p[0], ws = ow * s[1] - p[1];
          int64_t he = hs + k[0] < H + p[0] ? hs + k[0] : H + p[0], we = ws + k[1] < W + p[1] ? ws + k[1] : W + p[1];
          int64_t pool = (he - hs) * (we - ws);
          hs = hs < 0 ? 0 : hs; ws = ws < 0 ? 0 : ws; he = he > H ? H : he; we = we > W ? W : we;
          double sum = 0;
          for (int64_t h = hs; h < he; ++h) for (int64_t w = ws; w < we; ++w) sum += x[b * H * W + h * W + w];
          double div = inc ? (double)pool : (double)((he - hs) * (we - ws));
          ok &= fabs(o[b * OH * OW + oh * OW + ow] - sum / div) < 1e-5;
        }
    CHECK(ok, "avg_pool2d count_include_pad=%d", inc);
  }
}

/* upsample_bilinear2d.out, align_corners false, 7x6 -> 10x13 */
static void test_upsample_bilinear(void) {
  static float x[N * C * H * W];
  for (int i = 0; i < N * C * H * W; ++i) x[i] = frand();
  enum { OH = 10, OW = 13 };
  int64_t os[2] = {OH, OW};
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, H, W}, x);
  tpu_tensor_t to = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, OH, OW}, NULL);
  tpu_arg_t args[] = {tpu_arg_tensor(&tx), ilist(os, 2), tpu_arg_bool(false), tpu_arg_none(), tpu_arg_none(), tpu_arg_tensor(&to)};
  OK(tpu_op_run(0, "aten::upsample_bilinear2d.out", args, 6, &to, 1));
  static float o[N * C * OH * OW];
  rd(&to, o);
  int ok = 1;
  for (int b = 0; b < N * C; ++b)
    for (int oh = 0; oh < OH; ++oh)
      for (int ow = 0; ow < OW; ++ow) {
        float sh = (float)H / OH, sw = (float)W / OW;
        float rh = sh * (oh + 0.5f) - 0.5f, rw = sw * (ow + 0.5f) - 0.5f;
        rh = rh < 0 ? 0 : rh; rw = rw < 0 ? 0 : rw;
        int h0 = (int)rh, w0 = (int)rw, h1 = h0 + (h0 < H - 1), w1 = w0 + (w0 < W - 1);
        float lh = rh - h0, lw = rw - w0;
        const float* xb = x + b * H * W;
        float v = (1 - lh) * ((1 - lw) * xb[h0 * W + w0] + lw * xb[h0 * W + w1]) + lh * ((1 - lw) * xb[h1 * W + w0] + lw * xb[h1 * W + w1]);
        ok &= fabsf(o[b * OH * OW + oh * OW + ow] - v) < 1e-5f;
      }
  CHECK(ok, "upsample_bilinear2d");
}

/* native_batch_norm training: outputs and running-stat updates (momentum 0.25) */
static void test_batch_norm(void) {
  static float x[N * C * H * W];
  float w[C], bb[C], rm[C], rv[C];
  for (int i = 0; i < N * C * H * W; ++i) x[i] = frand() * 3 + 1;
  for (int c = 0; c < C; ++c) { w[c] = frand(); bb[c] = frand(); rm[c] = frand(); rv[c] = 1 + frand() * 0.5f; }
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, H, W}, x);
  tpu_tensor_t tw = dev(TPU_DTYPE_F32, 1, (int64_t[]){C}, w), tb = dev(TPU_DTYPE_F32, 1, (int64_t[]){C}, bb);
  tpu_tensor_t trm = dev(TPU_DTYPE_F32, 1, (int64_t[]){C}, rm), trv = dev(TPU_DTYPE_F32, 1, (int64_t[]){C}, rv);
  tpu_tensor_t outs[3] = {dev(TPU_DTYPE_F32, 4, (int64_t[]){N, C, H, W}, NULL), dev(TPU_DTYPE_F32, 1, (int64_t[]){C}, NULL),
                          dev(TPU_DTYPE_F32, 1, (int64_t[]){C}, NULL)};
  tpu_arg_t args[] = {tpu_arg_tensor(&tx), tpu_arg_tensor(&tw), tpu_arg_tensor(&tb), tpu_arg_tensor(&trm), tpu_arg_tensor(&trv),
                      tpu_arg_bool(true), tpu_arg_double(0.25), tpu_arg_double(1e-5)};
  OK(tpu_op_run(0, "aten::native_batch_norm", args, 8, outs, 3));
  static float y[N * C * H * W];
  float sm[C], si[C], nrm[C], nrv[C];
  rd(&outs[0], y); rd(&outs[1], sm); rd(&outs[2], si); rd(&trm, nrm); rd(&trv, nrv);
  int ok = 1;
  const int n = N * H * W;
  for (int c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    for (int b = 0; b < N; ++b) for (int i = 0; i < H * W; ++i) mean += x[(b * C + c) * H * W + i];
    mean /= n;
    for (int b = 0; b < N; ++b) for (int i = 0; i < H * W; ++i) { double d = x[(b * C + c) * H * W + i] - mean; var += d * d; }
    var /= n;
    double invstd = 1.0 / sqrt(var + 1e-5);
    ok &= fabs(sm[c] - mean) < 1e-5 && fabs(si[c] - invstd) < 1e-4 * invstd;
    for (int b = 0; b < N; ++b)
      for (int i = 0; i < H * W; ++i) {
        int q = (b * C + c) * H * W + i;
        ok &= fabs(y[q] - ((x[q] - mean) * invstd * w[c] + bb[c])) < 1e-4;
      }
    ok &= fabs(nrm[c] - (0.75 * rm[c] + 0.25 * mean)) < 1e-5;
    ok &= fabs(nrv[c] - (0.75 * rv[c] + 0.25 * var * n / (n - 1))) < 1e-4;
  }
  CHECK(ok, "native_batch_norm training + running stats");
}

/* the host reduce_window kernel on a strided (transposed) input vs naive loops */
static void test_reduce_window_kernel(void) {
  enum { B = 3, S0 = 6, S1 = 5 };
  static double xs[B * S1 * S0];
  for (int i = 0; i < B * S1 * S0; ++i) xs[i] = frand();
  xs[7] = NAN;
  /* logical [B, S0, S1] over storage [B, S1, S0] */
  tpu_host_view_t x = {.data = (char*)xs, .dtype = TPU_DTYPE_F64, .rank = 3, .sizes = {B, S0, S1}, .strides = {S1 * S0, 1, S0}};
  const int64_t k[2] = {3, 2}, st[2] = {2, 1}, pd[2] = {1, 1}, dl[2] = {1, 2};
  int64_t O0 = (S0 + 2 * pd[0] - dl[0] * (k[0] - 1) - 1) / st[0] + 1, O1 = (S1 + 2 * pd[1] - dl[1] * (k[1] - 1) - 1) / st[1] + 1;
  int monoids[3] = {TPU_IR_MONOID_SUM, TPU_IR_MONOID_MAX, TPU_IR_MONOID_NANMAX};
  for (int m = 0; m < 3; ++m) {
    tpu_ir_op_t op;
    memset(&op, 0, sizeof op);
    op.opcode = TPU_IR_REDUCE_WINDOW; op.i0 = monoids[m]; op.i1 = 2;
    for (int j = 0; j < 2; ++j) { op.a[0][j] = k[j]; op.a[1][j] = st[j]; op.a[2][j] = pd[j]; op.a[2][2 + j] = dl[j]; }
    double* ob = calloc((size_t)(B * O0 * O1), sizeof(double));
    tpu_host_view_t out = {.data = (char*)ob, .dtype = TPU_DTYPE_F64, .rank = 3, .sizes = {B, O0, O1}, .strides = {O0 * O1, O1, 1}};
    OK(tpu_host_k_reduce_window(&op, &x, &out));
    int ok = 1;
    for (int b = 0; b < B; ++b)
      for (int64_t o0 = 0; o0 < O0; ++o0)
        for (int64_t o1 = 0; o1 < O1; ++o1) {
          double acc = m == 0 ? 0 : -INFINITY;
          int nan = 0;
          for (int64_t a = 0; a < k[0]; ++a)
            for (int64_t c = 0; c < k[1]; ++c) {
              int64_t p0 = o0 * st[0] - pd[0] + a * dl[0], p1 = o1 * st[1] - pd[1] + c * dl[1];
              if (p0 < 0 || p0 >= S0 || p1 < 0 || p1 >= S1) continue;
              double v = xs[b * S1 * S0 + p1 * S0 + p0];
              if (isnan(v)) nan = 1;
              acc = m == 0 ? acc + v : (v > acc ? v : acc);
            }
          double got = ob[(b * O0 + o0) * O1 + o1];
          if (m == 2 && nan) ok &= isnan(got) != 0;
          else if (m == 0 && nan) ok &= isnan(got) != 0;
          else ok &= fabs(got - acc) < 1e-12;
        }
    CHECK(ok, "reduce_window monoid %d", monoids[m]);
    free(ob);
  }
  tpu_ir_op_t bad;
  memset(&bad, 0, sizeof bad);
  bad.opcode = TPU_IR_REDUCE_WINDOW; bad.i0 = TPU_IR_MONOID_SUM; bad.i1 = 4;
  tpu_status_t s = tpu_host_k_reduce_window(&bad, &x, &x);
  CHECK(s != TPU_OK, "reduce_window rejects bad spatial rank");
  tpu_status_free(s);
}

/* the host window-argmax kernel (PyTorch CPU rules: last NaN wins, ties keep the first)
 * on 1, 2 and 3 spatial dims with padding and dilation vs naive loops */
static void test_pool_argmax_kernel(void) {
  enum { B = 2, L = 24 };
  static double xs[B * L];
  for (int i = 0; i < B * L; ++i) xs[i] = (double)(rand() % 5); /* many ties */
  xs[5] = NAN; xs[6] = NAN; xs[30] = -INFINITY;
  const int64_t shapes[3][3] = {{24, 1, 1}, {4, 6, 1}, {2, 3, 4}};
  for (int n = 1; n <= 3; ++n) {
    int64_t S[3] = {1, 1, 1}, K[3] = {1, 1, 1}, St[3] = {1, 1, 1}, P[3] = {0, 0, 0}, D[3] = {1, 1, 1}, O[3] = {1, 1, 1};
    tpu_ir_op_t op;
    memset(&op, 0, sizeof op);
    op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_POOL_ARGMAX; op.i1 = n;
    tpu_host_view_t x = {.data = (char*)xs, .dtype = TPU_DTYPE_F64, .rank = 1 + n};
    x.sizes[0] = B;
    for (int j = 0; j < n; ++j) {
      int s = 3 - n + j;
      S[s] = shapes[n - 1][j]; K[s] = 2 + (j == 0); St[s] = 1 + (j % 2); P[s] = 1; D[s] = 1 + (n == 1);
      if (2 * P[s] > K[s]) P[s] = 0;
      O[s] = (S[s] + 2 * P[s] - D[s] * (K[s] - 1) - 1) / St[s] + 1;
      op.a[0][j] = K[s]; op.a[1][j] = St[s]; op.a[2][j] = P[s]; op.a[2][n + j] = D[s];
      x.sizes[1 + j] = S[s];
    }
    int64_t str = 1;
    for (int d = n; d >= 0; --d) { x.strides[d] = str; str *= x.sizes[d]; }
    int64_t no = O[0] * O[1] * O[2];
    int64_t* ob = calloc((size_t)(B * no), sizeof(int64_t));
    tpu_host_view_t out = {.data = (char*)ob, .dtype = TPU_DTYPE_I64, .rank = 1 + n};
    out.sizes[0] = B;
    for (int j = 0; j < n; ++j) out.sizes[1 + j] = O[3 - n + j];
    str = 1;
    for (int d = n; d >= 0; --d) { out.strides[d] = str; str *= out.sizes[d]; }
    OK(tpu_host_k_pool_argmax(&op, &x, &out));
    int ok = 1;
    for (int b = 0; b < B; ++b)
      for (int64_t q = 0; q < no; ++q) {
        int64_t o[3] = {q / (O[1] * O[2]), (q / O[2]) % O[1], q % O[2]}, best = -1;
        double m = -INFINITY;
        for (int64_t a = 0; a < K[0]; ++a)
          for (int64_t c = 0; c < K[1]; ++c)
            for (int64_t e = 0; e < K[2]; ++e) {
              int64_t p0 = o[0] * St[0] - P[0] + a * D[0], p1 = o[1] * St[1] - P[1] + c * D[1], p2 = o[2] * St[2] - P[2] + e * D[2];
              if (p0 < 0 || p0 >= S[0] || p1 < 0 || p1 >= S[1] || p2 < 0 || p2 >= S[2]) continue;
              int64_t f = (p0 * S[1] + p1) * S[2] + p2;
              double v = xs[b * L + f];
              if (best < 0) best = f;
              if (v > m || isnan(v)) { m = v; best = f; }
            }
        ok &= ob[b * no + q] == best;
      }
    CHECK(ok, "pool_argmax with %d spatial dims", n);
    free(ob);
  }
}

/* adaptive windows (stride 0): [floor(o S / O), ceil((o + 1) S / O)) per dim */
static void test_pool_argmax_adaptive(void) {
  enum { B = 3, S0 = 7, S1 = 5, O0 = 3, O1 = 4 };
  static float xs[B * S0 * S1];
  for (int i = 0; i < B * S0 * S1; ++i) xs[i] = (float)(rand() % 7);
  xs[9] = NAN;
  tpu_ir_op_t op;
  memset(&op, 0, sizeof op);
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_POOL_ARGMAX; op.i1 = 2;
  for (int j = 0; j < 2; ++j) { op.a[0][j] = 1; op.a[1][j] = 0; op.a[2][2 + j] = 1; }
  tpu_host_view_t x = {.data = (char*)xs, .dtype = TPU_DTYPE_F32, .rank = 3, .sizes = {B, S0, S1}, .strides = {S0 * S1, S1, 1}};
  int64_t ob[B * O0 * O1];
  tpu_host_view_t out = {.data = (char*)ob, .dtype = TPU_DTYPE_I64, .rank = 3, .sizes = {B, O0, O1}, .strides = {O0 * O1, O1, 1}};
  OK(tpu_host_k_pool_argmax(&op, &x, &out));
  int ok = 1;
  for (int b = 0; b < B; ++b)
    for (int o0 = 0; o0 < O0; ++o0)
      for (int o1 = 0; o1 < O1; ++o1) {
        int h0 = o0 * S0 / O0, h1 = ((o0 + 1) * S0 + O0 - 1) / O0, w0 = o1 * S1 / O1, w1 = ((o1 + 1) * S1 + O1 - 1) / O1;
        int64_t best = h0 * S1 + w0;
        float m = -INFINITY;
        for (int h = h0; h < h1; ++h)
          for (int w = w0; w < w1; ++w) {
            float v = xs[b * S0 * S1 + h * S1 + w];
            if (v > m || isnan(v)) { m = v; best = h * S1 + w; }
          }
        ok &= ob[(b * O0 + o0) * O1 + o1] == best;
      }
  CHECK(ok, "pool_argmax adaptive windows");
}

int main(void) {
  srand(7);
  OK(tpu_rt_init());
  test_max_pool2d();
  test_avg_pool2d();
  test_upsample_bilinear();
  test_batch_norm();
  test_reduce_window_kernel();
  test_pool_argmax_kernel();
  test_pool_argmax_adaptive();
  OK(tpu_rt_synchronize(0));
  for (int i = 0; i < g_nalloc; ++i) tpu_rt_free(0, g_allocs[i]);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
