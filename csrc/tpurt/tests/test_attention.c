/* test_attention.c — the flash-style attention kernels (drivers/host/attention.c) against
 * their naive _ref twins (forward output + logsumexp, backward dq/dk/dv) on odd sizes,
 * causal masks, broadcast additive biases with fully masked rows, grouped-query heads and
 * transposed (B, T, H, E) layouts; plus sort/topk/embedding_bag lowerings (lower/misc.c)
 * through tpu_op_run against naive loops; the logcumsumexp scan (drivers/host/scan.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/attention.h"
#include "drivers/host/scan.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }
static float* rnd(int64_t n) {
  float* p = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) p[i] = frand();
  return p;
}
/* 4-D view of data; transposed: stored as (d0, d2, d1, d3) */
static tpu_host_view_t v4(float* data, int64_t a, int64_t b, int64_t c, int64_t d, int transposed) {
  tpu_host_view_t v = {0};
  v.data = (char*)data; v.dtype = TPU_DTYPE_F32; v.rank = 4;
  v.sizes[0] = a; v.sizes[1] = b; v.sizes[2] = c; v.sizes[3] = d;
  if (transposed) { v.strides[0] = b * c * d; v.strides[1] = d; v.strides[2] = b * d; v.strides[3] = 1; }
  else { v.strides[0] = b * c * d; v.strides[1] = c * d; v.strides[2] = d; v.strides[3] = 1; }
  return v;
}
static tpu_host_view_t vflat(float* data, int rank, const int64_t* dims) {
  tpu_host_view_t v = {0};
  v.data = (char*)data; v.dtype = TPU_DTYPE_F32; v.rank = rank;
  int64_t st = 1;
  for (int d = rank - 1; d >= 0; --d) { v.sizes[d] = dims[d]; v.strides[d] = st; st *= dims[d]; }
  return v;
}
static double maxdiff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (isinf(a[i]) || isinf(b[i])) { if (a[i] != b[i]) return INFINITY; continue; }
    double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
    if (!(d <= m)) m = d;
  }
  return m;
}

static void run_case(int64_t B, int64_t Hq, int64_t Hk, int64_t T, int64_t S, int64_t E, int64_t Ev, int causal,
                     int bias_kind, int transposed) {
  float *q = rnd(B * Hq * T * E), *k = rnd(B * Hk * S * E), *v = rnd(B * Hk * S * Ev);
  float *bias = rnd(T * S), scale = 0.37f;
  if (bias_kind == 2) for (int64_t j = 0; j < S; ++j) bias[0 * S + j] = -INFINITY; /* row 0 fully masked */
  tpu_host_view_t xs[8];
  int n = 0;
  xs[n++] = v4(q, B, Hq, T, E, transposed);
  xs[n++] = v4(k, B, Hk, S, E, transposed);
  xs[n++] = v4(v, B, Hk, S, Ev, 0);
  tpu_host_view_t bv = v4(bias, B, Hq, T, S, 0);
  bv.strides[0] = 0; bv.strides[1] = 0; /* (T, S) broadcast over batch and heads */
  if (bias_kind) xs[n++] = bv;
  tpu_host_view_t sv = {0};
  sv.data = (char*)&scale; sv.dtype = TPU_DTYPE_F32;
  xs[n++] = sv;
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_ATTENTION;
  op.i1 = (causal ? TPU_ATTN_CAUSAL : 0) | (bias_kind ? TPU_ATTN_BIAS : 0);
  int64_t od[4] = {B, Hq, T, Ev + 1}, on = B * Hq * T * (Ev + 1);
  float *o1 = calloc((size_t)on + 1, sizeof(float)), *o2 = calloc((size_t)on + 1, sizeof(float));
  tpu_host_view_t ov1 = vflat(o1, 4, od), ov2 = vflat(o2, 4, od);
  OK(tpu_host_k_attention(&op, n, xs, &ov1));
  OK(tpu_host_k_attention_ref(&op, n, xs, &ov2));
  double d = maxdiff(o1, o2, on);
  CHECK(d < 1e-4, "fwd B%lld Hq%lld Hk%lld T%lld S%lld E%lld Ev%lld causal%d bias%d tr%d: diff %g", (long long)B, (long long)Hq,
        (long long)Hk, (long long)T, (long long)S, (long long)E, (long long)Ev, causal, bias_kind, transposed, d);

  /* backward: dout, q, k, v, out, lse, [bias], scale */
  float* dout = rnd(B * Hq * T * Ev);
  float* out = malloc(sizeof(float) * (size_t)(B * Hq * T * Ev + 1));
  float* lse = malloc(sizeof(float) * (size_t)(B * Hq * T + 1));
  for (int64_t r = 0; r < B * Hq * T; ++r) {
    memcpy(out + r * Ev, o2 + r * (Ev + 1), sizeof(float) * (size_t)Ev);
    lse[r] = o2[r * (Ev + 1) + Ev];
  }
  tpu_host_view_t bx[9];
  int m = 0;
  bx[m++] = v4(dout, B, Hq, T, Ev, 0);
  for (int i = 0; i < 3; ++i) bx[m++] = xs[i];
  bx[m++] = v4(out, B, Hq, T, Ev, 0);
  int64_t ld[3] = {B, Hq, T};
  bx[m++] = vflat(lse, 3, ld);
  if (bias_kind) bx[m++] = bv;
  bx[m++] = sv;
  op.i0 = TPU_IR_CUSTOM_ATTENTION_BWD;
  int64_t tot = B * Hq * T * E + B * Hk * S * (E + Ev);
  float *g1 = calloc((size_t)tot + 1, sizeof(float)), *g2 = calloc((size_t)tot + 1, sizeof(float));
  tpu_host_view_t gv1 = vflat(g1, 1, &tot), gv2 = vflat(g2, 1, &tot);
  OK(tpu_host_k_attention(&op, m, bx, &gv1));
  OK(tpu_host_k_attention_ref(&op, m, bx, &gv2));
  d = maxdiff(g1, g2, tot);
  CHECK(d < 1e-4, "bwd B%lld Hq%lld Hk%lld T%lld S%lld causal%d bias%d tr%d: diff %g", (long long)B, (long long)Hq,
        (long long)Hk, (long long)T, (long long)S, causal, bias_kind, transposed, d);
  free(q); free(k); free(v); free(bias); free(o1); free(o2); free(dout); free(out); free(lse); free(g1); free(g2);
}

static void test_kernels(void) {
  run_case(2, 2, 2, 5, 5, 4, 4, 0, 0, 0);
  run_case(1, 3, 3, 70, 140, 8, 5, 1, 0, 1);   /* several query/key blocks, causal, transposed */
  run_case(2, 4, 2, 33, 17, 6, 7, 0, 1, 0);   /* GQA + bias */
  run_case(1, 4, 1, 130, 130, 16, 16, 1, 2, 1); /* MQA, causal, fully masked row 0 */
  run_case(1, 1, 1, 3, 200, 3, 2, 1, 0, 0);    /* causal with S > T */
  run_case(1, 2, 2, 1, 1, 1, 1, 0, 0, 0);
  run_case(2, 6, 1, 70, 70, 8, 8, 1, 1, 1);    /* 6 heads per kv head: stacked chunks of 4 + 2, causal, bias */
  run_case(1, 8, 2, 33, 150, 5, 3, 0, 2, 0);   /* 4 + 4 stacked, several key blocks, fully masked row */
  run_case(2, 8, 2, 32, 32, 16, 16, 1, 0, 1);  /* Llama's grouping, causal, transposed */
  /* bad operand count is an error, never a crash */
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_ATTENTION;
  float x = 0;
  tpu_host_view_t one = vflat(&x, 0, NULL);
  tpu_status_t st = tpu_host_k_attention(&op, 1, &one, &one);
  CHECK(st != TPU_OK, "bad operands accepted");
  tpu_status_free(st);
}

/* ---- misc lowerings through tpu_op_run */

static void* g_allocs[64];
static int g_nalloc;
static tpu_tensor_t dev(tpu_dtype_t dt, int ndim, const int64_t* sizes, const void* host) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  void* p = NULL;
  OK(tpu_rt_malloc(0, (size_t)(n ? n : 1) * tpu_dtype_size(dt), &p));
  if (g_nalloc < 64) g_allocs[g_nalloc++] = p;
  if (host && n) OK(tpu_rt_memcpy_h2d(0, p, host, (size_t)n * tpu_dtype_size(dt)));
  return tpu_tensor_contiguous(p, 0, dt, ndim, sizes);
}
static void rd(const tpu_tensor_t* t, void* host, size_t bytes) {
  OK(tpu_rt_synchronize(0));
  OK(tpu_rt_memcpy_d2h(0, host, t->data, bytes));
}
static tpu_tensor_t g_tens[32];
static int g_ntens;
static tpu_arg_t targ(tpu_tensor_t t) { /* the record must outlive the call */
  tpu_arg_t a = {0};
  a.kind = TPU_ARG_TENSOR;
  g_tens[g_ntens % 32] = t;
  a.tensor = &g_tens[g_ntens++ % 32];
  return a;
}
static tpu_arg_t iarg(int64_t v) { tpu_arg_t a = {0}; a.kind = TPU_ARG_INT; a.i = v; return a; }
static tpu_arg_t barg(int v) { tpu_arg_t a = {0}; a.kind = TPU_ARG_BOOL; a.i = v; return a; }
static tpu_arg_t none(void) { tpu_arg_t a = {0}; a.kind = TPU_ARG_NONE; return a; }

static void test_topk(void) {
  enum { R = 3, K = 9, TOPK = 4 };
  float x[R * K];
  for (int i = 0; i < R * K; ++i) x[i] = (float)((i * 37) % 23) - 0.5f * (float)(i % 3);
  int64_t xd[2] = {R, K}, od[2] = {R, TOPK};
  tpu_tensor_t outs[2] = {dev(TPU_DTYPE_F32, 2, od, NULL), dev(TPU_DTYPE_I64, 2, od, NULL)};
  tpu_arg_t args[5] = {targ(dev(TPU_DTYPE_F32, 2, xd, x)), iarg(TOPK), iarg(-1), barg(1), barg(1)};
  OK(tpu_op_run(0, "aten::topk", args, 5, outs, 2));
  float v[R * TOPK];
  int64_t ix[R * TOPK];
  rd(&outs[0], v, sizeof(v));
  rd(&outs[1], ix, sizeof(ix));
  for (int r = 0; r < R; ++r) {
    float prev = INFINITY;
    for (int j = 0; j < TOPK; ++j) {
      float e = v[r * TOPK + j];
      int cnt_greater = 0;
      for (int c = 0; c < K; ++c) cnt_greater += x[r * K + c] > e;
      CHECK(e <= prev && cnt_greater <= j && x[r * K + ix[r * TOPK + j]] == e, "topk row %d col %d", r, j);
      prev = e;
    }
  }
}

/* embedding_bag mean with padding_idx: naive loop */
static void test_embedding_bag(void) {
  enum { NW = 6, D = 3, N = 7, NB = 3 };
  float w[NW * D];
  for (int i = 0; i < NW * D; ++i) w[i] = frand();
  int64_t idx[N] = {1, 2, 0, 5, 2, 3, 4}, off[NB] = {0, 3, 3}, pad = 2;
  int64_t wd[2] = {NW, D}, nd = N, bd = NB, od[2] = {NB, D}, zero = 0;
  tpu_tensor_t outs[4] = {dev(TPU_DTYPE_F32, 2, od, NULL), dev(TPU_DTYPE_I64, 1, &nd, NULL),
                          dev(TPU_DTYPE_I64, 1, &bd, NULL), dev(TPU_DTYPE_I64, 1, &zero, NULL)};
  tpu_arg_t args[9] = {targ(dev(TPU_DTYPE_F32, 2, wd, w)), targ(dev(TPU_DTYPE_I64, 1, &nd, idx)),
                       targ(dev(TPU_DTYPE_I64, 1, &bd, off)), barg(0), iarg(1), barg(0), none(), barg(0), iarg(pad)};
  OK(tpu_op_run(0, "aten::_embedding_bag", args, 9, outs, 4));
  float got[NB * D];
  rd(&outs[0], got, sizeof(got));
  for (int b = 0; b < NB; ++b) {
    int64_t lo = off[b], hi = b + 1 < NB ? off[b + 1] : N;
    for (int d = 0; d < D; ++d) {
      double s = 0;
      int c = 0;
      for (int64_t i = lo; i < hi; ++i) if (idx[i] != pad) { s += w[idx[i] * D + d]; c++; }
      double want = c ? s / c : 0;
      CHECK(fabs(got[b * D + d] - want) < 1e-5, "embedding_bag mean bag %d dim %d: %g vs %g", b, d, got[b * D + d], want);
    }
  }
  /* out-of-range index: an error at sync, never an out-of-bounds read */
  int64_t bad[N] = {1, 2, 0, 6, 2, 3, 4};
  args[1] = targ(dev(TPU_DTYPE_I64, 1, &nd, bad));
  tpu_status_t st = tpu_op_run(0, "aten::_embedding_bag", args, 9, outs, 4);
  if (st == TPU_OK) st = tpu_rt_synchronize(0);
  CHECK(st != TPU_OK, "embedding_bag out-of-range index accepted");
  tpu_status_free(st);
}

/* logcumsumexp scan vs a naive log(sum(exp)) on a transposed view, plus infinities/NaN */
static void test_logcumsumexp(void) {
  enum { R = 5, C = 37 };
  float x[R * C], o1[R * C], o2[R * C];
  for (int i = 0; i < R * C; ++i) x[i] = frand() * 20.0f;
  x[3] = -INFINITY; x[C + 2] = INFINITY; x[2 * C + 5] = NAN;
  tpu_host_view_t xv = vflat(x, 2, (int64_t[]){R, C}), ov1 = vflat(o1, 2, (int64_t[]){R, C}), ov2 = vflat(o2, 2, (int64_t[]){R, C});
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_LOGCUMSUMEXP; op.i1 = 1;
  OK(tpu_host_k_logcumsumexp(&op, &xv, &ov1));
  OK(tpu_host_k_logcumsumexp_ref(&op, &xv, &ov2));
  int bad = 0;
  for (int r = 0; r < R; ++r) {
    long double sum = 0;
    int nan = 0, inf = 0;
    for (int c = 0; c < C; ++c) {
      float e = x[r * C + c];
      nan |= e != e; inf |= e == INFINITY;
      if (e == e && e != INFINITY) sum += expl((long double)e);
      double want = nan ? NAN : inf ? INFINITY : (double)logl(sum), got = o1[r * C + c];
      if (!(nan ? got != got : inf ? got == INFINITY : fabs(got - want) <= 1e-5 * (1 + fabs(want)))) bad++;
      if (memcmp(&o1[r * C + c], &o2[r * C + c], sizeof(float))) bad++;
    }
  }
  CHECK(bad == 0, "logcumsumexp: %d mismatches", bad);
  /* transposed view along dim 0 */
  tpu_host_view_t xt = xv, ot = ov1;
  xt.sizes[0] = C; xt.sizes[1] = R; xt.strides[0] = 1; xt.strides[1] = C;
  ot.sizes[0] = C; ot.sizes[1] = R; ot.strides[0] = 1; ot.strides[1] = C;
  op.i1 = 0;
  OK(tpu_host_k_logcumsumexp(&op, &xt, &ot));
  int same = 1;
  for (int i = 0; i < R * C; ++i) same &= (o1[i] == o2[i]) || (o1[i] != o1[i] && o2[i] != o2[i]);
  CHECK(same, "logcumsumexp transposed view differs");
}

int main(void) {
  srand(7);
  OK(tpu_rt_init());
  test_kernels();
  test_topk();
  test_embedding_bag();
  test_logcumsumexp();
  for (int i = 0; i < g_nalloc; ++i) tpu_rt_free(0, g_allocs[i]);
  tpu_status_free(tpu_rt_synchronize(0));
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
