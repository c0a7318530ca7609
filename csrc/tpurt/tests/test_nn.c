/* test_nn.c — the nn and optimizer lowerings (lower/nn.c, lower/optim.c) end to end
 * through tpu_op_run, against naive loops computed here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

/* ---- device tensors (freed at exit) */
static void* g_allocs[512];
static int g_nalloc;
static tpu_tensor_t dev(tpu_dtype_t dt, int ndim, const int64_t* sizes, const void* host) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  void* p = NULL;
  OK(tpu_rt_malloc(0, (size_t)n * tpu_dtype_size(dt), &p));
  if (g_nalloc < 512) g_allocs[g_nalloc++] = p;
  if (host && n) OK(tpu_rt_memcpy_h2d(0, p, host, (size_t)n * tpu_dtype_size(dt)));
  return tpu_tensor_contiguous(p, 0, dt, ndim, sizes);
}
static void rd(const tpu_tensor_t* t, void* host) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->sizes[d];
  if (n) OK(tpu_rt_memcpy_d2h(0, host, t->data, (size_t)n * tpu_dtype_size((tpu_dtype_t)t->dtype)));
}
static float maxdiff(const float* a, const float* b, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) { float d = fabsf(a[i] - b[i]); if (!(d <= m)) m = d; }
  return m;
}
static tpu_arg_t t_(const tpu_tensor_t* t) { return tpu_arg_tensor(t); }

/* ---- softmax family */
static void test_softmax(void) {
  enum { R = 3, C = 5 };
  float x[R * C], y[R * C], ref[R * C], g[R * C], gi[R * C];
  for (int i = 0; i < R * C; ++i) { x[i] = 3 * frand(); g[i] = frand(); }
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 2, (int64_t[]){R, C}, x), ty = dev(TPU_DTYPE_F32, 2, (int64_t[]){R, C}, NULL);
  for (int lg = 0; lg < 2; ++lg) {
    tpu_arg_t a[] = {t_(&tx), tpu_arg_int(-1), tpu_arg_bool(false), t_(&ty)};
    OK(tpu_op_run(0, lg ? "aten::_log_softmax.out" : "aten::_softmax.out", a, 4, &ty, 1));
    rd(&ty, y);
    for (int r = 0; r < R; ++r) {
      double m = -INFINITY, s = 0;
      for (int c = 0; c < C; ++c) m = fmax(m, x[r * C + c]);
      for (int c = 0; c < C; ++c) s += exp(x[r * C + c] - m);
      for (int c = 0; c < C; ++c) ref[r * C + c] = lg ? (float)(x[r * C + c] - m - log(s)) : (float)(exp(x[r * C + c] - m) / s);
    }
    CHECK(maxdiff(y, ref, R * C) < 1e-5f, "%s forward: %g", lg ? "log_softmax" : "softmax", maxdiff(y, ref, R * C));
    /* backward */
    tpu_tensor_t tg = dev(TPU_DTYPE_F32, 2, (int64_t[]){R, C}, g), tgi = dev(TPU_DTYPE_F32, 2, (int64_t[]){R, C}, NULL);
    tpu_arg_t b[] = {t_(&tg), t_(&ty), tpu_arg_int(1), tpu_arg_int(TPU_DTYPE_F32), t_(&tgi)};
    OK(tpu_op_run(0, lg ? "aten::_log_softmax_backward_data.out" : "aten::_softmax_backward_data.out", b, 5, &tgi, 1));
    rd(&tgi, gi);
    for (int r = 0; r < R; ++r) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += lg ? g[r * C + c] : g[r * C + c] * y[r * C + c];
      for (int c = 0; c < C; ++c)
        ref[r * C + c] = lg ? (float)(g[r * C + c] - exp(y[r * C + c]) * s) : (float)(y[r * C + c] * (g[r * C + c] - s));
    }
    CHECK(maxdiff(gi, ref, R * C) < 1e-5f, "%s backward: %g", lg ? "log_softmax" : "softmax", maxdiff(gi, ref, R * C));
  }
  /* dim 0 and a bad dim */
  tpu_arg_t a0[] = {t_(&tx), tpu_arg_int(0), tpu_arg_bool(false), t_(&ty)};
  OK(tpu_op_run(0, "aten::_softmax.out", a0, 4, &ty, 1));
  rd(&ty, y);
  double s = 0;
  for (int r = 0; r < R; ++r) s += y[r * C + 2];
  CHECK(fabs(s - 1) < 1e-5, "softmax dim 0 sums to 1: %g", s);
  tpu_arg_t a2[] = {t_(&tx), tpu_arg_int(2), tpu_arg_bool(false), t_(&ty)};
  tpu_status_t st = tpu_op_run(0, "aten::_softmax.out", a2, 4, &ty, 1);
  CHECK(tpu_status_code(st) == TPU_STATUS_INDEX_ERROR && strstr(tpu_status_message(st), "Dimension out of range"),
        "bad dim: %s", tpu_status_message(st));
  tpu_status_free(st);
}

/* ---- nll_loss */
static void test_nll(void) {
  enum { N = 6, C = 4 };
  float x[N * C], w[C], out, tw, outn[N], gi[N * C], ref[N * C];
  int64_t t[N] = {0, 3, -100, 2, 1, 3};
  for (int i = 0; i < N * C; ++i) x[i] = frand();
  for (int c = 0; c < C; ++c) w[c] = 0.5f + (float)c;
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 2, (int64_t[]){N, C}, x), tt = dev(TPU_DTYPE_I64, 1, (int64_t[]){N}, t);
  tpu_tensor_t tw_ = dev(TPU_DTYPE_F32, 1, (int64_t[]){C}, w);
  tpu_tensor_t to = dev(TPU_DTYPE_F32, 0, NULL, NULL), ttw = dev(TPU_DTYPE_F32, 0, NULL, NULL);
  tpu_tensor_t ton = dev(TPU_DTYPE_F32, 1, (int64_t[]){N}, NULL);
  double s = 0, sw = 0;
  for (int i = 0; i < N; ++i) if (t[i] != -100) { s -= x[i * C + t[i]] * w[t[i]]; sw += w[t[i]]; }
  for (int red = 0; red < 3; ++red) {
    tpu_tensor_t outs[2] = {red ? to : ton, ttw};
    tpu_arg_t a[] = {t_(&tx), t_(&tt), t_(&tw_), tpu_arg_int(red), tpu_arg_int(-100), t_(&outs[0]), t_(&ttw)};
    OK(tpu_op_run(0, "aten::nll_loss_forward.output", a, 7, outs, 2));
    rd(&ttw, &tw);
    if (red == 0) {
      rd(&ton, outn);
      int ok = tw == 0;
      for (int i = 0; i < N; ++i) ok &= fabsf(outn[i] - (t[i] == -100 ? 0.0f : -x[i * C + t[i]] * w[t[i]])) < 1e-6f;
      CHECK(ok, "nll none");
    } else {
      rd(&to, &out);
      double e = red == 1 ? s / sw : s;
      CHECK(fabs(out - e) < 1e-5 && fabs(tw - sw) < 1e-5, "nll red %d: %g vs %g, tw %g vs %g", red, out, e, tw, sw);
    }
  }
  /* backward, mean */
  float gout = 2.0f;
  tpu_tensor_t tg = dev(TPU_DTYPE_F32, 0, NULL, &gout), ttw2 = dev(TPU_DTYPE_F32, 0, NULL, (float[]){(float)sw});
  tpu_tensor_t tgi = dev(TPU_DTYPE_F32, 2, (int64_t[]){N, C}, NULL);
  tpu_arg_t b[] = {t_(&tg), t_(&tx), t_(&tt), t_(&tw_), tpu_arg_int(1), tpu_arg_int(-100), t_(&ttw2), t_(&tgi)};
  OK(tpu_op_run(0, "aten::nll_loss_backward.grad_input", b, 8, &tgi, 1));
  rd(&tgi, gi);
  memset(ref, 0, sizeof ref);
  for (int i = 0; i < N; ++i) if (t[i] != -100) ref[i * C + t[i]] = -w[t[i]] * gout / (float)sw;
  CHECK(maxdiff(gi, ref, N * C) < 1e-6f, "nll backward mean: %g", maxdiff(gi, ref, N * C));
  /* out-of-range and negative targets: IndexError at the next sync, never a result */
  int64_t bad[2][N] = {{0, 1, 2, 4, 0, 0}, {0, 1, -1, 2, 0, 0}};
  for (int k = 0; k < 2; ++k) {
    tpu_tensor_t tb = dev(TPU_DTYPE_I64, 1, (int64_t[]){N}, bad[k]);
    tpu_tensor_t outs[2] = {to, ttw};
    tpu_arg_t a[] = {t_(&tx), t_(&tb), tpu_arg_none(), tpu_arg_int(1), tpu_arg_int(-100), t_(&to), t_(&ttw)};
    OK(tpu_op_run(0, "aten::nll_loss_forward.output", a, 7, outs, 2));
    tpu_status_t st = tpu_rt_synchronize(0);
    CHECK(tpu_status_code(st) == TPU_STATUS_INDEX_ERROR, "nll bad target %d: %s", k, tpu_status_message(st));
    tpu_status_free(st);
    tpu_arg_t b2[] = {t_(&tg), t_(&tx), t_(&tb), tpu_arg_none(), tpu_arg_int(2), tpu_arg_int(-100), t_(&ttw2), t_(&tgi)};
    OK(tpu_op_run(0, "aten::nll_loss_backward.grad_input", b2, 8, &tgi, 1));
    st = tpu_rt_synchronize(0);
    CHECK(tpu_status_code(st) == TPU_STATUS_INDEX_ERROR, "nll backward bad target %d: %s", k, tpu_status_message(st));
    tpu_status_free(st);
  }
}

/* ---- layer norm */
static void test_layer_norm(void) {
  enum { M = 4, D = 7 };
  float x[M * D], w[D], b[D], y[M * D], mean[M], rstd[M], g[M * D], gx[M * D], gw[D], ref[M * D], refw[D];
  for (int i = 0; i < M * D; ++i) { x[i] = 2 * frand() + 0.5f; g[i] = frand(); }
  for (int i = 0; i < D; ++i) { w[i] = 1 + frand() / 2; b[i] = frand(); }
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 2, (int64_t[]){M, D}, x), tw = dev(TPU_DTYPE_F32, 1, (int64_t[]){D}, w);
  tpu_tensor_t tb = dev(TPU_DTYPE_F32, 1, (int64_t[]){D}, b);
  tpu_tensor_t outs[3] = {dev(TPU_DTYPE_F32, 2, (int64_t[]){M, D}, NULL), dev(TPU_DTYPE_F32, 2, (int64_t[]){M, 1}, NULL),
                          dev(TPU_DTYPE_F32, 2, (int64_t[]){M, 1}, NULL)};
  int64_t ns[1] = {D};
  tpu_arg_t a[] = {t_(&tx), tpu_arg_int_list(ns, 1), t_(&tw), t_(&tb), tpu_arg_double(1e-5)};
  OK(tpu_op_run(0, "aten::native_layer_norm", a, 5, outs, 3));
  rd(&outs[0], y); rd(&outs[1], mean); rd(&outs[2], rstd);
  double mr[M], rr[M];
  for (int m = 0; m < M; ++m) {
    double s = 0, v = 0;
    for (int d = 0; d < D; ++d) s += x[m * D + d];
    s /= D;
    for (int d = 0; d < D; ++d) v += (x[m * D + d] - s) * (x[m * D + d] - s);
    mr[m] = s; rr[m] = 1 / sqrt(v / D + 1e-5);
    for (int d = 0; d < D; ++d) ref[m * D + d] = (float)((x[m * D + d] - s) * rr[m] * w[d] + b[d]);
  }
  int ok = maxdiff(y, ref, M * D) < 1e-5f;
  for (int m = 0; m < M; ++m) ok &= fabs(mean[m] - mr[m]) < 1e-5 && fabs(rstd[m] - rr[m]) < 1e-4 * rr[m];
  CHECK(ok, "layer_norm forward: %g", maxdiff(y, ref, M * D));
  /* backward with output_mask [1, 1, 0]: d_bias is absent */
  tpu_tensor_t tg = dev(TPU_DTYPE_F32, 2, (int64_t[]){M, D}, g);
  tpu_tensor_t bouts[3] = {dev(TPU_DTYPE_F32, 2, (int64_t[]){M, D}, NULL), dev(TPU_DTYPE_F32, 1, (int64_t[]){D}, NULL), {0}};
  bouts[2].ndim = -1;
  int64_t mask[3] = {1, 1, 0};
  tpu_arg_t bm = {0};
  bm.kind = TPU_ARG_BOOL_LIST; bm.ints = mask; bm.len = 3;
  tpu_arg_t ba[] = {t_(&tg), t_(&tx), tpu_arg_int_list(ns, 1), t_(&outs[1]), t_(&outs[2]), t_(&tw), t_(&tb), bm};
  OK(tpu_op_run(0, "aten::native_layer_norm_backward", ba, 8, bouts, 3));
  rd(&bouts[0], gx); rd(&bouts[1], gw);
  memset(refw, 0, sizeof refw);
  for (int m = 0; m < M; ++m) {
    double s1 = 0, s2 = 0;
    for (int d = 0; d < D; ++d) {
      double xh = (x[m * D + d] - mr[m]) * rr[m], dxh = g[m * D + d] * w[d];
      s1 += dxh; s2 += dxh * xh;
      refw[d] += (float)(g[m * D + d] * xh);
    }
    for (int d = 0; d < D; ++d) {
      double xh = (x[m * D + d] - mr[m]) * rr[m], dxh = g[m * D + d] * w[d];
      ref[m * D + d] = (float)(rr[m] * (dxh - s1 / D - xh * s2 / D));
    }
  }
  CHECK(maxdiff(gx, ref, M * D) < 1e-4f && maxdiff(gw, refw, D) < 1e-4f, "layer_norm backward: %g %g",
        maxdiff(gx, ref, M * D), maxdiff(gw, refw, D));
  /* normalized_shape mismatch */
  int64_t bad[1] = {D + 1};
  tpu_arg_t a2[] = {t_(&tx), tpu_arg_int_list(bad, 1), tpu_arg_none(), tpu_arg_none(), tpu_arg_double(1e-5)};
  tpu_status_t st = tpu_op_run(0, "aten::native_layer_norm", a2, 5, outs, 3);
  CHECK(st && strstr(tpu_status_message(st), "Given normalized_shape"), "layer_norm shape check: %s", tpu_status_message(st));
  tpu_status_free(st);
}

/* ---- dropout */
static void test_dropout(void) {
  enum { N = 4000 };
  static float x[N], y[N], y2[N];
  static uint8_t mask[N], mask2[N];
  for (int i = 0; i < N; ++i) x[i] = 1 + frand() / 4;
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 1, (int64_t[]){N}, x);
  tpu_tensor_t outs[2] = {dev(TPU_DTYPE_F32, 1, (int64_t[]){N}, NULL), dev(TPU_DTYPE_BOOL, 1, (int64_t[]){N}, NULL)};
  tpu_arg_t a[] = {t_(&tx), tpu_arg_double(0.25), tpu_arg_bool(true)};
  OK(tpu_op_run(0, "aten::native_dropout", a, 3, outs, 2));
  rd(&outs[0], y); rd(&outs[1], mask);
  int kept = 0, ok = 1;
  for (int i = 0; i < N; ++i) {
    kept += mask[i];
    ok &= mask[i] ? fabsf(y[i] - x[i] / 0.75f) < 1e-6f : y[i] == 0;
  }
  CHECK(ok && kept > N * 0.72 && kept < N * 0.78, "dropout: kept %d of %d, values %d", kept, N, ok);
  OK(tpu_op_run(0, "aten::native_dropout", a, 3, outs, 2));
  rd(&outs[0], y2); rd(&outs[1], mask2);
  CHECK(memcmp(mask, mask2, N), "dropout: a second call draws a new mask");
  /* backward: g * mask * scale */
  tpu_tensor_t tgi = dev(TPU_DTYPE_F32, 1, (int64_t[]){N}, NULL);
  tpu_arg_t b[] = {t_(&tx), t_(&outs[1]), tpu_arg_double(1 / 0.75)};
  OK(tpu_op_run(0, "aten::native_dropout_backward", b, 3, &tgi, 1));
  rd(&tgi, y);
  ok = 1;
  for (int i = 0; i < N; ++i) ok &= mask2[i] ? fabsf(y[i] - x[i] * (float)(1 / 0.75)) < 1e-6f : y[i] == 0;
  CHECK(ok, "dropout backward");
  /* eval mode: identity, all-true mask */
  tpu_arg_t e[] = {t_(&tx), tpu_arg_double(0.25), tpu_arg_bool(false)};
  OK(tpu_op_run(0, "aten::native_dropout", e, 3, outs, 2));
  rd(&outs[0], y); rd(&outs[1], mask);
  ok = 1;
  for (int i = 0; i < N; ++i) ok &= y[i] == x[i] && mask[i] == 1;
  CHECK(ok, "dropout eval");
}

/* ---- embedding backward */
static void test_embedding_bwd(void) {
  enum { NW = 5, D = 3, L = 6 };
  int64_t idx[L] = {1, 4, 1, 0, 2, 1};
  float g[L * D], out[NW * D], ref[NW * D];
  for (int i = 0; i < L * D; ++i) g[i] = frand();
  tpu_tensor_t tg = dev(TPU_DTYPE_F32, 3, (int64_t[]){2, 3, D}, g), ti = dev(TPU_DTYPE_I64, 2, (int64_t[]){2, 3}, idx);
  tpu_tensor_t to = dev(TPU_DTYPE_F32, 2, (int64_t[]){NW, D}, NULL);
  for (int freq = 0; freq < 2; ++freq) {
    tpu_arg_t a[] = {t_(&tg), t_(&ti), tpu_arg_int(NW), tpu_arg_int(4), tpu_arg_bool(freq)};
    OK(tpu_op_run(0, "aten::embedding_dense_backward", a, 5, &to, 1));
    rd(&to, out);
    int cnt[NW] = {0};
    for (int l = 0; l < L; ++l) cnt[idx[l]]++;
    memset(ref, 0, sizeof ref);
    for (int l = 0; l < L; ++l)
      if (idx[l] != 4)
        for (int d = 0; d < D; ++d) ref[idx[l] * D + d] += g[l * D + d] / (freq ? (float)cnt[idx[l]] : 1.0f);
    CHECK(maxdiff(out, ref, NW * D) < 1e-6f, "embedding_dense_backward freq=%d: %g", freq, maxdiff(out, ref, NW * D));
  }
}

/* ---- fused Adam / AdamW / SGD vs the CPU kernels' math, 7 tensors (split into chunks) */
enum { NT = 7, TN = 9 };
static void adam_ref(float* p, float* g, float* m, float* v, float* vm, float step, double lr, double b1, double b2,
                     double wd, double eps, int amsgrad, int adamw) {
  double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
  float step_size = (float)(lr / bc1), bc2s = (float)sqrt(bc2);
  for (int i = 0; i < TN; ++i) {
    float gv = g[i], pv = p[i];
    if (wd != 0) { if (adamw) pv = pv * (float)(1 - lr * wd); else gv += pv * (float)wd; }
    float w = (float)(1 - b1);
    m[i] = fabsf(w) < 0.5f ? m[i] + w * (gv - m[i]) : gv - (gv - m[i]) * (1 - w);
    v[i] = v[i] * (float)b2 + (float)(1 - b2) * gv * gv;
    float den;
    if (amsgrad) { vm[i] = fmaxf(vm[i], v[i]); den = sqrtf(vm[i]) / bc2s + (float)eps; }
    else den = sqrtf(v[i]) / bc2s + (float)eps;
    p[i] = pv - step_size * m[i] / den;
  }
}
static void test_fused_adam(void) {
  for (int variant = 0; variant < 3; ++variant) {
    int adamw = variant == 1, amsgrad = variant == 2;
    static float P[NT][TN], Gr[NT][TN], Mo[NT][TN], V[NT][TN], VM[NT][TN], got[TN];
    tpu_tensor_t tp[NT], tg[NT], tm[NT], tv[NT], tvm[NT], ts[NT];
    for (int k = 0; k < NT; ++k) {
      for (int i = 0; i < TN; ++i) { P[k][i] = frand(); Gr[k][i] = frand(); Mo[k][i] = frand() / 10; V[k][i] = fabsf(frand()) / 10; VM[k][i] = V[k][i]; }
      float step = (float)(k + 1);
      tp[k] = dev(TPU_DTYPE_F32, 1, (int64_t[]){TN}, P[k]); tg[k] = dev(TPU_DTYPE_F32, 1, (int64_t[]){TN}, Gr[k]);
      tm[k] = dev(TPU_DTYPE_F32, 1, (int64_t[]){TN}, Mo[k]); tv[k] = dev(TPU_DTYPE_F32, 1, (int64_t[]){TN}, V[k]);
      tvm[k] = dev(TPU_DTYPE_F32, 1, (int64_t[]){TN}, VM[k]); ts[k] = dev(TPU_DTYPE_F32, 0, NULL, &step);
    }
    tpu_arg_t lists[6];
    const tpu_tensor_t* arrs[6] = {tp, tg, tm, tv, tvm, ts};
    for (int l = 0; l < 6; ++l) {
      memset(&lists[l], 0, sizeof lists[l]);
      lists[l].kind = TPU_ARG_TENSOR_LIST; lists[l].tensors = arrs[l]; lists[l].len = (l == 4 && !amsgrad) ? 0 : NT;
    }
    tpu_arg_t a[15] = {lists[0], lists[1], lists[2], lists[3], lists[4], lists[5], tpu_arg_double(1e-2),
                       tpu_arg_double(0.9), tpu_arg_double(0.999), tpu_arg_double(0.1), tpu_arg_double(1e-8),
                       tpu_arg_bool(amsgrad), tpu_arg_bool(false), tpu_arg_none(), tpu_arg_none()};
    tpu_tensor_t outs[5 * NT];
    int nb = amsgrad ? 5 : 4;
    for (int b = 0; b < nb; ++b) for (int k = 0; k < NT; ++k) outs[b * NT + k] = arrs[b][k];
    OK(tpu_op_run(0, adamw ? "aten::_fused_adamw_" : "aten::_fused_adam_", a, 15, outs, nb * NT));
    float err = 0;
    for (int k = 0; k < NT; ++k) {
      adam_ref(P[k], Gr[k], Mo[k], V[k], VM[k], (float)(k + 1), 1e-2, 0.9, 0.999, 0.1, 1e-8, amsgrad, adamw);
      rd(&tp[k], got); err = fmaxf(err, maxdiff(got, P[k], TN));
      rd(&tm[k], got); err = fmaxf(err, maxdiff(got, Mo[k], TN));
      rd(&tv[k], got); err = fmaxf(err, maxdiff(got, V[k], TN));
      if (amsgrad) { rd(&tvm[k], got); err = fmaxf(err, maxdiff(got, VM[k], TN)); }
      rd(&tg[k], got); err = fmaxf(err, maxdiff(got, Gr[k], TN));
    }
    CHECK(err < 1e-6f, "fused adam variant %d: %g", variant, err);
  }
}
static void test_fused_sgd(void) {
  for (int variant = 0; variant < 3; ++variant) { /* momentum+nesterov first step, momentum later step, plain */
    int has_buf = variant < 2, first = variant == 0, nesterov = variant == 0;
    static float P[NT][TN], Gr[NT][TN], B[NT][TN], got[TN];
    tpu_tensor_t tp[NT], tg[NT], tb[NT];
    for (int k = 0; k < NT; ++k) {
      for (int i = 0; i < TN; ++i) { P[k][i] = frand(); Gr[k][i] = frand(); B[k][i] = frand(); }
      tp[k] = dev(TPU_DTYPE_F32, 1, (int64_t[]){TN}, P[k]); tg[k] = dev(TPU_DTYPE_F32, 1, (int64_t[]){TN}, Gr[k]);
      tb[k] = dev(TPU_DTYPE_F32, 1, (int64_t[]){TN}, B[k]);
    }
    const tpu_tensor_t* arrs[3] = {tp, tg, tb};
    tpu_arg_t lists[3];
    for (int l = 0; l < 3; ++l) {
      memset(&lists[l], 0, sizeof lists[l]);
      lists[l].kind = TPU_ARG_TENSOR_LIST; lists[l].tensors = arrs[l]; lists[l].len = (l == 2 && !has_buf) ? 0 : NT;
    }
    double wd = 0.01, mom = has_buf ? 0.9 : 0, lr = 0.1, damp = 0.1;
    tpu_arg_t a[12] = {lists[0], lists[1], lists[2], tpu_arg_double(wd), tpu_arg_double(mom), tpu_arg_double(lr),
                       tpu_arg_double(damp), tpu_arg_bool(nesterov), tpu_arg_bool(false), tpu_arg_bool(first),
                       tpu_arg_none(), tpu_arg_none()};
    tpu_tensor_t outs[3 * NT];
    int nb = has_buf ? 3 : 2;
    for (int b = 0; b < nb; ++b) for (int k = 0; k < NT; ++k) outs[b * NT + k] = arrs[b][k];
    OK(tpu_op_run(0, "aten::_fused_sgd_", a, 12, outs, nb * NT));
    float err = 0;
    for (int k = 0; k < NT; ++k) {
      for (int i = 0; i < TN; ++i) {
        float gv = Gr[k][i] + P[k][i] * (float)wd;
        if (has_buf) {
          B[k][i] = first ? gv : B[k][i] * (float)mom + gv * (float)(1 - damp);
          gv = nesterov ? gv + B[k][i] * (float)mom : B[k][i];
        }
        P[k][i] = P[k][i] - gv * (float)lr;
      }
      rd(&tp[k], got); err = fmaxf(err, maxdiff(got, P[k], TN));
      if (has_buf) { rd(&tb[k], got); err = fmaxf(err, maxdiff(got, B[k], TN)); }
    }
    CHECK(err < 1e-6f, "fused sgd variant %d: %g", variant, err);
  }
}

/* ---- mse */
static void test_mse(void) {
  enum { N = 10 };
  float x[N], t[N], out, gi[N], ref[N];
  for (int i = 0; i < N; ++i) { x[i] = frand(); t[i] = frand(); }
  tpu_tensor_t tx = dev(TPU_DTYPE_F32, 1, (int64_t[]){N}, x), tt = dev(TPU_DTYPE_F32, 1, (int64_t[]){N}, t);
  tpu_tensor_t to = dev(TPU_DTYPE_F32, 0, NULL, NULL);
  tpu_arg_t a[] = {t_(&tx), t_(&tt), tpu_arg_int(1), t_(&to)};
  OK(tpu_op_run(0, "aten::mse_loss.out", a, 4, &to, 1));
  rd(&to, &out);
  double s = 0;
  for (int i = 0; i < N; ++i) s += (x[i] - t[i]) * (x[i] - t[i]);
  CHECK(fabs(out - s / N) < 1e-6, "mse mean %g vs %g", out, s / N);
  float g = 3;
  tpu_tensor_t tg = dev(TPU_DTYPE_F32, 0, NULL, &g), tgi = dev(TPU_DTYPE_F32, 1, (int64_t[]){N}, NULL);
  tpu_arg_t b[] = {t_(&tg), t_(&tx), t_(&tt), tpu_arg_int(1)};
  OK(tpu_op_run(0, "aten::mse_loss_backward", b, 4, &tgi, 1));
  rd(&tgi, gi);
  for (int i = 0; i < N; ++i) ref[i] = 2.0f / N * (x[i] - t[i]) * g;
  CHECK(maxdiff(gi, ref, N) < 1e-6f, "mse backward %g", maxdiff(gi, ref, N));
}

int main(void) {
  srand(4321);
  OK(tpu_rt_init());
  test_softmax();
  test_nll();
  test_layer_norm();
  test_dropout();
  test_embedding_bwd();
  test_fused_adam();
  test_fused_sgd();
  test_mse();
  OK(tpu_rt_synchronize(0));
  for (int i = 0; i < g_nalloc; ++i) tpu_rt_free(0, g_allocs[i]);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail != 0;
}
