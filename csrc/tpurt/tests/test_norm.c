/* test_norm.c — the channel statistics / affine kernels of batch norm and the four group-norm targets
 * (drivers/host/norm.c) against their _ref twins on random shapes, layouts and dtypes (A = 1 with many channels:
 * the statistics' blocks of one-run channels; group norm: contiguous, channels-innermost and strided views, HxW = 1,
 * groups of one channel and of more than 64, bf16 / f16 / f64, an inf). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/norm.h"
#include "ir/serialize.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

static double drand_(void) { return (double)rand() / (double)RAND_MAX * 2.0 - 1.0; }
static int irand(int lo, int hi) { return lo + rand() % (hi - lo + 1); }

/* a rank-1..3 view; layout 0 contiguous, 1 dim 1 innermost (channels-last-like), 2 every dim strided by 2 */
typedef struct { tpu_host_view_t v; char* buf; int64_t span; } hview_t;
static hview_t hview(int dt, int rank, const int64_t* sizes, int layout) {
  hview_t h;
  memset(&h, 0, sizeof(h));
  h.v.dtype = dt; h.v.rank = rank;
  int order[3] = {0, 1, 2};
  if (layout == 1 && rank == 3) { order[1] = 2; order[2] = 1; }
  int64_t st = layout == 2 ? 2 : 1;
  for (int i = rank - 1; i >= 0; --i) {
    int d = order[i];
    h.v.sizes[d] = sizes[d]; h.v.strides[d] = st;
    st *= sizes[d] * (layout == 2 ? 2 : 1);
  }
  h.span = st + 1;
  h.buf = calloc((size_t)h.span, tpu_dtype_size(dt));
  h.v.data = h.buf;
  for (int64_t i = 0; i < h.span; ++i) tpu_host_store_f64(h.buf + i * (int64_t)tpu_dtype_size(dt), dt, drand_() + 0.5);
  return h;
}
static double at(const tpu_host_view_t* v, const int64_t* idx) {
  int64_t o = 0;
  for (int d = 0; d < v->rank; ++d) o += idx[d] * v->strides[d];
  return tpu_host_load_f64(v->data + o * (int64_t)tpu_dtype_size(v->dtype), v->dtype);
}

static void test_random(void) {
  for (int it = 0; it < 160; ++it) {
    int dt = it % 3 == 2 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
    int affine = it % 2, two = (it / 2) % 2;
    int64_t A = irand(1, 4), B = irand(1, 9), I = irand(1, 40);
    if (it >= 120) { A = 1; B = irand(60, 200); I = irand(14, 40); } /* layer norm's [1, M, n]: blocks of runs */
    int64_t full[3] = {A, B, I}, vec[1] = {B}, st2[2] = {2, B};
    int n = affine ? (two ? 5 : 3) : (two ? 3 : 1), nfull = two ? 2 : 1;
    hview_t in[5];
    tpu_host_view_t xs[5];
    for (int k = 0; k < n; ++k) {
      in[k] = k < nfull ? hview(dt, 3, full, irand(0, 2)) : hview(dt, 1, vec, irand(0, 2) == 2 ? 2 : 0);
      xs[k] = in[k].v;
    }
    hview_t o = affine ? hview(dt, 3, full, irand(0, 2)) : hview(dt, 2, st2, irand(0, 2) == 2 ? 2 : 0);
    hview_t r = affine ? hview(dt, 3, full, 0) : hview(dt, 2, st2, 0);
    tpu_ir_op_t op = {0};
    op.opcode = TPU_IR_CUSTOM;
    op.i0 = affine ? TPU_IR_CUSTOM_CHANNEL_AFFINE : TPU_IR_CUSTOM_CHANNEL_STATS;
    OK(tpu_host_k_channel(&op, n, xs, &o.v));
    OK(tpu_host_k_channel_ref(&op, n, xs, &r.v));
    double err = 0, mag = 0;
    int64_t idx[3] = {0, 0, 0}, tot = affine ? A * B * I : 2 * B;
    for (int64_t e = 0; e < tot; ++e) {
      if (affine) { idx[0] = e / (B * I); idx[1] = (e / I) % B; idx[2] = e % I; }
      else { idx[0] = e / B; idx[1] = e % B; }
      double a = at(&o.v, idx), b = at(&r.v, idx);
      if (!(fabs(a - b) <= err)) err = fabs(a - b);
      if (fabs(b) > mag) mag = fabs(b);
    }
    double tol = (dt == TPU_DTYPE_F64 ? 1e-12 : 2e-6) * (1 + mag);
    CHECK(err <= tol, "%s n=%d A=%lld B=%lld I=%lld dtype %d: err %g", affine ? "affine" : "stats", n, (long long)A,
          (long long)B, (long long)I, dt, err);
    for (int k = 0; k < n; ++k) free(in[k].buf);
    free(o.buf); free(r.buf);
  }
}

static void test_errors(void) {
  int64_t full[3] = {2, 3, 4}, bad[1] = {4};
  hview_t x = hview(TPU_DTYPE_F32, 3, full, 0), v = hview(TPU_DTYPE_F32, 1, bad, 0), o = hview(TPU_DTYPE_F32, 3, full, 0);
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_CHANNEL_AFFINE;
  tpu_host_view_t xs[3] = {x.v, v.v, v.v};
  tpu_status_t s = tpu_host_k_channel(&op, 3, xs, &o.v);
  CHECK(s != TPU_OK, "a [4] vector for 3 channels must fail");
  tpu_status_free(s);
  s = tpu_host_k_channel(&op, 2, xs, &o.v);
  CHECK(s != TPU_OK, "two operands must fail");
  tpu_status_free(s);
  free(x.buf); free(v.buf); free(o.buf);
}

/* |a - b| <= tol (1 + |b|) elementwise over two views of one shape (rank <= 3), NaN only where NaN */
static int views_close(const tpu_host_view_t* a, const tpu_host_view_t* b, double tol, double* out_err) {
  int64_t n[3] = {1, 1, 1}, idx[3];
  for (int d = 0; d < a->rank; ++d) n[d] = a->sizes[d];
  double err = 0;
  int ok = 1;
  for (idx[0] = 0; idx[0] < n[0]; ++idx[0])
    for (idx[1] = 0; idx[1] < n[1]; ++idx[1])
      for (idx[2] = 0; idx[2] < n[2]; ++idx[2]) {
        double x = at(a, idx), y = at(b, idx);
        if (isnan(x) || isnan(y)) { ok = ok && isnan(x) && isnan(y); continue; }
        if (isinf(x) || isinf(y)) { ok = ok && x == y; continue; }
        double e = fabs(x - y) / (1 + fabs(y));
        if (e > err) err = e;
      }
  *out_err = err;
  return ok && err <= tol;
}
static tpu_ir_op_t gn_op(int target, int64_t i1) {
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = target; op.i1 = i1;
  return op;
}

static void test_group_norm(void) {
  static const int dts[4] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16, TPU_DTYPE_F16};
  for (int it = 0; it < 240; ++it) {
    const int xdt = dts[it % 4 == 3 ? irand(1, 3) : 0], sdt = xdt == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
    int64_t N = irand(1, 3), G = irand(1, 4), Cg = irand(1, 5), I = irand(1, 40);
    if (it % 17 == 5) I = 1;
    if (it % 23 == 7) Cg = irand(60, 70);
    if (it % 11 == 3) I = irand(60, 300);
    if (it % 13 == 6) { N = irand(20, 40); G = irand(5, 8); } /* N G > 64: the kernels' blocks of 64 groups */
    const int64_t C = G * Cg;
    int64_t full[3] = {N, C, I}, ng[2] = {N, G}, vc[1] = {C}, st[3] = {2, N, G}, sm[3] = {2, N + 1, C};
    hview_t x = hview(xdt, 3, full, irand(0, 2)), g = hview(xdt, 3, full, irand(0, 2));
    const int inf = it % 19 == 9;
    if (inf) { int64_t e[3] = {N - 1, C - 1, I - 1}, o = 0; for (int d = 0; d < 3; ++d) o += e[d] * x.v.strides[d];
               tpu_host_store_f64(x.v.data + o * (int64_t)tpu_dtype_size(xdt), xdt, INFINITY); }
    double epsv = 1e-5;
    tpu_host_view_t eps = {0};
    eps.data = (char*)&epsv; eps.dtype = TPU_DTYPE_F64; eps.rank = 0;
    /* statistics */
    hview_t so = hview(sdt, 3, st, irand(0, 2) == 2 ? 2 : 0), sr = hview(sdt, 3, st, 0);
    tpu_host_view_t in[6] = {x.v, eps};
    tpu_ir_op_t op = gn_op(TPU_IR_CUSTOM_GROUP_NORM_STATS, 0);
    OK(tpu_host_k_group_norm(&op, 2, in, &so.v));
    OK(tpu_host_k_group_norm_ref(&op, 2, in, &sr.v));
    const double tol = sdt == TPU_DTYPE_F64 ? 1e-12 : 2e-5, ftol = xdt == TPU_DTYPE_BF16 ? 1.6e-2 : xdt == TPU_DTYPE_F16 ? 2e-3 : tol;
    double err;
    CHECK(views_close(&so.v, &sr.v, tol, &err), "gn stats N=%lld G=%lld Cg=%lld I=%lld dt %d: err %g", (long long)N,
          (long long)G, (long long)Cg, (long long)I, xdt, err);
    /* mean / rstd as [N, G] views of the kernel's statistics */
    tpu_host_view_t mean = so.v, rstd = so.v;
    mean.rank = rstd.rank = 2;
    mean.sizes[0] = rstd.sizes[0] = N; mean.sizes[1] = rstd.sizes[1] = G;
    mean.strides[0] = rstd.strides[0] = so.v.strides[1]; mean.strides[1] = rstd.strides[1] = so.v.strides[2];
    rstd.data = so.v.data + so.v.strides[0] * (int64_t)tpu_dtype_size(sdt);
    hview_t w = hview(sdt, 1, vc, irand(0, 1) * 2), b = hview(sdt, 1, vc, 0);
    (void)ng;
    /* forward apply */
    const int bits = irand(0, 3);
    int n = 3;
    in[0] = x.v; in[1] = mean; in[2] = rstd;
    if (bits & 1) in[n++] = w.v;
    if (bits & 2) in[n++] = b.v;
    hview_t yo = hview(xdt, 3, full, irand(0, 2)), yr = hview(xdt, 3, full, 0);
    op = gn_op(TPU_IR_CUSTOM_GROUP_NORM, bits);
    OK(tpu_host_k_group_norm(&op, n, in, &yo.v));
    OK(tpu_host_k_group_norm_ref(&op, n, in, &yr.v));
    CHECK(views_close(&yo.v, &yr.v, ftol, &err), "gn apply bits %d N=%lld G=%lld Cg=%lld I=%lld dt %d: err %g", bits,
          (long long)N, (long long)G, (long long)Cg, (long long)I, xdt, err);
    /* backward sums */
    in[0] = g.v; in[1] = x.v; in[2] = mean; in[3] = rstd;
    hview_t uo = hview(sdt, 3, sm, irand(0, 2) == 2 ? 2 : 0), ur = hview(sdt, 3, sm, 0);
    op = gn_op(TPU_IR_CUSTOM_GROUP_NORM_SUMS, 0);
    OK(tpu_host_k_group_norm(&op, 4, in, &uo.v));
    OK(tpu_host_k_group_norm_ref(&op, 4, in, &ur.v));
    CHECK(views_close(&uo.v, &ur.v, tol * (xdt == TPU_DTYPE_F32 ? 1 : 4), &err), "gn sums N=%lld G=%lld Cg=%lld I=%lld dt %d: err %g",
          (long long)N, (long long)G, (long long)Cg, (long long)I, xdt, err);
    /* backward d x, with and without the sums */
    for (int hs = 0; hs < 2; ++hs) {
      const int hw = irand(0, 1);
      n = 4;
      if (hw) in[n++] = w.v;
      if (hs) in[n++] = uo.v;
      hview_t dxo = hview(xdt, 3, full, irand(0, 2)), dxr = hview(xdt, 3, full, 0);
      op = gn_op(TPU_IR_CUSTOM_GROUP_NORM_BWD, hw | hs << 1);
      OK(tpu_host_k_group_norm(&op, n, in, &dxo.v));
      OK(tpu_host_k_group_norm_ref(&op, n, in, &dxr.v));
      CHECK(views_close(&dxo.v, &dxr.v, ftol * (sdt == TPU_DTYPE_F32 ? 10 : 1), &err),
            "gn bwd w %d sums %d N=%lld G=%lld Cg=%lld I=%lld dt %d: err %g", hw, hs, (long long)N, (long long)G,
            (long long)Cg, (long long)I, xdt, err);
      free(dxo.buf); free(dxr.buf);
    }
    free(x.buf); free(g.buf); free(so.buf); free(sr.buf); free(w.buf); free(b.buf); free(yo.buf); free(yr.buf);
    free(uo.buf); free(ur.buf);
  }
  /* bad operands fail with a status */
  int64_t full[3] = {2, 6, 4}, st[3] = {2, 2, 4};
  hview_t x = hview(TPU_DTYPE_F32, 3, full, 0), o = hview(TPU_DTYPE_F32, 3, st, 0);
  double epsv = 1e-5;
  tpu_host_view_t eps = {0};
  eps.data = (char*)&epsv; eps.dtype = TPU_DTYPE_F64;
  tpu_host_view_t in[2] = {x.v, eps};
  tpu_ir_op_t op = gn_op(TPU_IR_CUSTOM_GROUP_NORM_STATS, 0);
  tpu_status_t s = tpu_host_k_group_norm(&op, 2, in, &o.v);
  CHECK(s != TPU_OK, "4 groups of 6 channels must fail");
  tpu_status_free(s);
  s = tpu_host_k_group_norm(&op, 1, in, &o.v);
  CHECK(s != TPU_OK, "one operand must fail");
  tpu_status_free(s);
  /* the rule the loader checks (tpu_ir_custom_operands_ok): STATS with i1 != 0 or an integer eps, accepted by the
   * kernel's own copy of the rule before */
  int64_t st3[3] = {2, 2, 3};
  hview_t o3 = hview(TPU_DTYPE_F32, 3, st3, 0);
  int64_t epsi = 0;
  tpu_host_view_t ieps = eps;
  ieps.data = (char*)&epsi; ieps.dtype = TPU_DTYPE_I64;
  OK(tpu_host_k_group_norm(&op, 2, in, &o3.v));
  op.i1 = 1;
  s = tpu_host_k_group_norm(&op, 2, in, &o3.v);
  CHECK(s != TPU_OK, "GROUP_NORM_STATS with i1 = 1 must fail");
  tpu_status_free(s);
  op.i1 = 0; in[1] = ieps;
  s = tpu_host_k_group_norm(&op, 2, in, &o3.v);
  CHECK(s != TPU_OK, "GROUP_NORM_STATS with an i64 eps must fail");
  tpu_status_free(s);
  free(x.buf); free(o.buf); free(o3.buf);
}

/* a cache file's graph: the group-norm forward (STATS -> slices -> GROUP_NORM) round-trips through the serializer;
 * a damaged one is refused at load. damage: 0 none, 1 groups that do not divide the channels (4 of 6), 2 bias
 * missing, 3 weight [7] for 6 channels, 4 GROUP_NORM result f64 from f32 x, 5 STATS result f64 from f32 x,
 * 6 rstd [4, 5] with mean [4, 3], 7 bias f64 */
enum { GN_DAMAGES = 8 };
static const char* const gn_damage_name[GN_DAMAGES] = {"none", "4 groups of 6", "bias missing", "weight [7]",
                                                       "result f64", "statistics f64", "rstd [4, 5]", "bias f64"};
static int gn_graph(tpu_ir_graph_t* g, int damage) {
  tpu_ir_graph_init(g);
  const int64_t groups = damage == 1 ? 4 : 3;
  int64_t d3[3] = {4, 6, 10}, c[1] = {6}, c7[1] = {7}, ds[3] = {2, 4, groups}, d2[2] = {4, groups}, d45[2] = {4, 5};
  int x = tpu_ir_param(g, TPU_DTYPE_F32, 3, d3), eps = tpu_ir_scalar(g, TPU_DTYPE_F64);
  int w = tpu_ir_param(g, TPU_DTYPE_F32, 1, damage == 3 ? c7 : c);
  int b = tpu_ir_param(g, damage == 7 ? TPU_DTYPE_F64 : TPU_DTYPE_F32, 1, c);
  tpu_ir_op_t p = {0};
  p.opcode = TPU_IR_CUSTOM; p.i0 = TPU_IR_CUSTOM_GROUP_NORM_STATS; p.type.rank = 3;
  p.type.dtype = damage == 5 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
  memcpy(p.type.dims, ds, sizeof(ds));
  int st = tpu_ir_add_op(g, &p, 2, (int[]){x, eps});
  int64_t lo0[3] = {0, 0, 0}, hi0[3] = {1, 4, groups}, lo1[3] = {1, 0, 0}, hi1[3] = {2, 4, groups}, one[3] = {1, 1, 1};
  int mean = tpu_ir_reshape(g, tpu_ir_slice(g, st, lo0, hi0, one), 2, d2);
  int rstd = damage == 6 ? tpu_ir_param(g, TPU_DTYPE_F32, 2, d45) : tpu_ir_reshape(g, tpu_ir_slice(g, st, lo1, hi1, one), 2, d2);
  tpu_ir_op_t q = {0};
  q.opcode = TPU_IR_CUSTOM; q.i0 = TPU_IR_CUSTOM_GROUP_NORM; q.i1 = 3; q.type.rank = 3;
  q.type.dtype = damage == 4 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
  memcpy(q.type.dims, d3, sizeof(d3));
  int y = tpu_ir_add_op(g, &q, damage == 2 ? 4 : 5, (int[]){x, mean, rstd, w, b});
  tpu_ir_output(g, y);
  tpu_ir_output(g, mean);
  return g->status == TPU_OK;
}
static void test_group_norm_serialize(void) {
  for (int k = 0; k < GN_DAMAGES; ++k) {
    tpu_ir_graph_t g, back;
    CHECK(gn_graph(&g, k), "group-norm graph %d builds", k);
    uint8_t* buf = NULL;
    size_t len = 0;
    OK(tpu_ir_graph_serialize(&g, &buf, &len));
    tpu_status_t s = tpu_ir_graph_deserialize(buf, len, &back);
    if (k == 0) {
      CHECK(s == TPU_OK && tpu_ir_equal(&g, &back), "group-norm graph round-trips");
    } else {
      CHECK(s != TPU_OK, "damaged group-norm graph %d (%s) must be refused", k, gn_damage_name[k]);
    }
    tpu_ir_graph_free(&back);
    tpu_status_free(s);
    free(buf);
    tpu_ir_graph_free(&g);
  }
}

int main(void) {
  srand(7);
  test_random();
  test_errors();
  test_group_norm();
  test_group_norm_serialize();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail != 0;
}
