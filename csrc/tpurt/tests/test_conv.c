/* test_conv.c — the convolution kernels (drivers/host/conv.c) against their _ref twins on
 * random geometries and layouts, and the conv lowerings (lower/conv.c) end to end through
 * tpu_op_run (forward with bias, transposed, backward with an output mask). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/conv.h"
#include "drivers/host/gemm.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

static double drand_(void) { return (double)rand() / (double)RAND_MAX * 2.0 - 1.0; }
static int irand(int lo, int hi) { return lo + rand() % (hi - lo + 1); }

/* ---- host views: layout 0 contiguous, 1 channels-last (dim 1 innermost), 2 every dim
 * strided by 2 inside a larger buffer (non-contiguous slice) */
typedef struct { tpu_host_view_t v; char* buf; int64_t span; } hview_t;
static hview_t hview(int dt, int rank, const int64_t* sizes, int layout) {
  hview_t h;
  memset(&h, 0, sizeof(h));
  h.v.dtype = dt; h.v.rank = rank;
  int order[TPU_MAX_DIMS];
  for (int d = 0; d < rank; ++d) order[d] = d;
  if (layout == 1) { /* N, *S, C */
    int k = 0; order[k++] = 0;
    for (int d = 2; d < rank; ++d) order[k++] = d;
    order[k++] = 1;
  }
  int64_t st = layout == 2 ? 2 : 1;
  for (int i = rank - 1; i >= 0; --i) {
    int d = order[i];
    h.v.sizes[d] = sizes[d];
    h.v.strides[d] = st;
    st *= sizes[d] * (layout == 2 ? 2 : 1);
  }
  h.span = st + 1;
  h.buf = calloc((size_t)h.span, tpu_dtype_size(dt));
  h.v.data = h.buf;
  return h;
}
static void fill(hview_t* h) {
  size_t es = tpu_dtype_size(h->v.dtype);
  for (int64_t i = 0; i < h->span; ++i) tpu_host_store_f64(h->buf + i * (int64_t)es, h->v.dtype, drand_());
}
/* max |a - b| over the view's elements; also the max |b| */
static double vdiff(const tpu_host_view_t* a, const tpu_host_view_t* b, double* out_mag) {
  int64_t n = 1, idx[TPU_MAX_DIMS] = {0};
  for (int d = 0; d < a->rank; ++d) n *= a->sizes[d];
  double m = 0, mag = 0;
  size_t es = tpu_dtype_size(a->dtype);
  for (int64_t i = 0; i < n; ++i) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < a->rank; ++d) { oa += idx[d] * a->strides[d]; ob += idx[d] * b->strides[d]; }
    double x = tpu_host_load_f64(a->data + oa * (int64_t)es, a->dtype);
    double y = tpu_host_load_f64(b->data + ob * (int64_t)es, b->dtype);
    double e = fabs(x - y);
    if (!(e <= m)) m = e;
    if (fabs(y) > mag) mag = fabs(y);
    for (int d = a->rank - 1; d >= 0; --d) { if (++idx[d] < a->sizes[d]) break; idx[d] = 0; }
  }
  *out_mag = mag;
  return m;
}

/* conv `kind` of a, b into a fresh output (layout lo) twice with the GEMM at `isa`: *e = the first run's difference
 * from r (magnitude *mag), *e2 = the two runs' difference (0: deterministic) */
static void run_twice(int kind, int nsp, const int64_t* st, const int64_t* pd, const int64_t* dl, int64_t G,
                      const hview_t* a, const hview_t* b, const hview_t* r, int rank, const int64_t* os, int lo,
                      tpu_host_gemm_isa_t isa, double* e, double* mag, double* e2) {
  hview_t o = hview(TPU_DTYPE_F32, rank, os, lo), o2 = hview(TPU_DTYPE_F32, rank, os, lo);
  fill(&o);
  tpu_host_gemm_isa_t old = tpu_host_gemm_set_isa(isa);
  OK(tpu_host_conv_run(kind, nsp, st, pd, dl, G, &a->v, &b->v, &o.v));
  OK(tpu_host_conv_run(kind, nsp, st, pd, dl, G, &a->v, &b->v, &o2.v));
  tpu_host_gemm_set_isa(old);
  double mag2;
  *e = vdiff(&o.v, &r->v, mag);
  *e2 = vdiff(&o.v, &o2.v, &mag2);
  free(o.buf); free(o2.buf);
}

static void test_kernels(void) {
  static const char* kn[3] = {"fwd", "bwd_input", "bwd_weight"};
  for (int it = 0; it < 150; ++it) {
    int nsp = 1 + it % 3;
    int dt = (it / 3) % 4 == 3 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
    int64_t G = irand(1, 3), N = irand(1, 3), Cg = irand(1, 3), Og = irand(1, 3);
    if (it % 7 == 0) { Cg = 1; Og = irand(1, 2); G = irand(2, 4); } /* depthwise */
    int64_t st[3], pd[3], dl[3], S[3], K[3], Q[3];
    int ok = 1;
    for (int d = 0; d < nsp; ++d) {
      K[d] = irand(1, nsp == 3 ? 2 : 3); st[d] = irand(1, 3); dl[d] = irand(1, 2);
      pd[d] = irand(0, 2); S[d] = irand(nsp == 3 ? 2 : 3, nsp == 1 ? 13 : 7);
      if (it % 11 == 5) st[d] = K[d] + 1; /* stride > kernel */
      if (it % 5 == 2) { K[d] = 1; st[d] = 1; pd[d] = 0; } /* 1x1: x is its own im2col */
      int64_t q = S[d] + 2 * pd[d] - dl[d] * (K[d] - 1) - 1;
      if (q < 0) { ok = 0; break; }
      Q[d] = q / st[d] + 1;
    }
    if (!ok) continue;
    int64_t xs[5] = {N, G * Cg}, ws[5] = {G * Og, Cg}, ys[5] = {N, G * Og};
    for (int d = 0; d < nsp; ++d) { xs[2 + d] = S[d]; ws[2 + d] = K[d]; ys[2 + d] = Q[d]; }
    int rank = nsp + 2;
    for (int kind = 0; kind < 3; ++kind) {
      int la = irand(0, 2), lb = irand(0, 2), lo = irand(0, 2);
      const int64_t *as = kind == 1 ? ys : xs, *bs = kind == 2 ? ys : ws, *os = kind == 0 ? ys : kind == 1 ? xs : ws;
      /* f32 results also take bf16/f16 operands (widened exactly by the kernels) */
      int idt = dt == TPU_DTYPE_F32 && it % 8 == 1 ? TPU_DTYPE_BF16 : dt == TPU_DTYPE_F32 && it % 8 == 5 ? TPU_DTYPE_F16 : dt;
      hview_t a = hview(idt, rank, as, la), b = hview(idt, rank, bs, lb);
      hview_t o = hview(dt, rank, os, lo), r = hview(dt, rank, os, 0);
      fill(&a); fill(&b); fill(&o);
      int64_t tile = it % 2 ? irand(1, 9) : 0; /* tiles that start and end mid-row */
      int64_t group = it % 3 == 0 ? irand(2, 3) : 0; /* sample groups (small outputs) */
      int flip = it % 4 != 3; /* stride-1 backward-input as a flipped forward conv, or col2im */
      tpu_host_conv_set_tile(tile);
      tpu_host_conv_set_group(group);
      tpu_host_conv_set_flip(flip);
      tpu_host_conv_set_direct(it % 3 != 1); /* the padded-grid kernel where it applies, or im2col */
      tpu_host_conv_set_gk(it % 5 == 4 ? 1 : 2); /* gathered-operand kernels wherever they apply */
      OK(tpu_host_conv_run(kind, nsp, st, pd, dl, G, &a.v, &b.v, &o.v));
      tpu_host_conv_set_gk(1);
      tpu_host_conv_set_tile(0);
      tpu_host_conv_set_group(0);
      tpu_host_conv_set_flip(1);
      tpu_host_conv_set_direct(1);
      OK(tpu_host_conv_run_ref(kind, nsp, st, pd, dl, G, &a.v, &b.v, &r.v));
      double mag, e = vdiff(&o.v, &r.v, &mag);
      double tol = dt == TPU_DTYPE_F64 ? 1e-12 * (1 + mag) : 1e-5 * (1 + mag);
      CHECK(e <= tol, "%s nsp=%d N=%lld G=%lld Cg=%lld Og=%lld layouts %d%d%d tile %lld group %lld flip %d dtype %d: err %g",
            kn[kind], nsp, (long long)N, (long long)G, (long long)Cg, (long long)Og, la, lb, lo, (long long)tile,
            (long long)group, flip, idt, e);
      free(a.buf); free(b.buf); free(o.buf); free(r.buf);
    }
  }
}

/* the im2col band (conv_impl.h: 2-d, innermost stride 1, output rows of 8+): maps 8-21 wide, stride 1-3 along
 * rows, dilation, padding, groups, every layout, f32 / bf16 / f16 x, tiles that start and end mid-row and
 * sample groups, with the padded-grid and gathered-operand kernels off (so im2col + GEMM runs on every CPU) */
static void test_kernels_im2col_band(void) {
  static const char* kn[3] = {"fwd", "bwd_input", "bwd_weight"};
  for (int it = 0; it < 90; ++it) {
    int64_t G = irand(1, 2), N = irand(1, 3), Cg = irand(1, 5), Og = irand(1, 4);
    int64_t st[2] = {irand(1, 3), 1}, pd[2] = {irand(0, 2), irand(0, 2)}, dl[2] = {irand(1, 2), irand(1, 2)};
    int64_t K[2] = {irand(1, 3), irand(1, 4)}, S[2] = {irand(3, 12), irand(8, 21)}, Q[2];
    int ok = 1;
    for (int d = 0; d < 2; ++d) {
      int64_t q = S[d] + 2 * pd[d] - dl[d] * (K[d] - 1) - 1;
      if (q < 0) ok = 0;
      Q[d] = q / st[d] + 1;
    }
    if (!ok || Q[1] < 8) continue;
    int64_t xs[4] = {N, G * Cg, S[0], S[1]}, ws[4] = {G * Og, Cg, K[0], K[1]}, ys[4] = {N, G * Og, Q[0], Q[1]};
    for (int kind = 0; kind < 3; kind += 2) { /* the kinds that run im2col (backward-input scatters col2im) */
      int la = irand(0, 2), lb = irand(0, 2), lo = irand(0, 2);
      int dt = it % 4 == 1 ? TPU_DTYPE_BF16 : it % 4 == 3 ? TPU_DTYPE_F16 : TPU_DTYPE_F32;
      const int64_t *as = xs, *bs = kind == 2 ? ys : ws, *os = kind == 0 ? ys : ws;
      hview_t a = hview(dt, 4, as, la), b = hview(dt, 4, bs, lb);
      hview_t o = hview(TPU_DTYPE_F32, 4, os, lo), r = hview(TPU_DTYPE_F32, 4, os, 0);
      fill(&a); fill(&b); fill(&o);
      int64_t tile = it % 3 == 0 ? irand(1, 3 * Q[1]) : 0;
      int64_t group = it % 3 == 1 ? irand(2, 3) : 0;
      tpu_host_conv_set_tile(tile);
      tpu_host_conv_set_group(group);
      tpu_host_conv_set_direct(0);
      tpu_host_conv_set_gk(0);
      OK(tpu_host_conv_run(kind, 2, st, pd, dl, G, &a.v, &b.v, &o.v));
      tpu_host_conv_set_gk(1);
      tpu_host_conv_set_direct(1);
      tpu_host_conv_set_tile(0);
      tpu_host_conv_set_group(0);
      OK(tpu_host_conv_run_ref(kind, 2, st, pd, dl, G, &a.v, &b.v, &r.v));
      double mag, e = vdiff(&o.v, &r.v, &mag);
      CHECK(e <= 1e-5 * (1 + mag), "im2col band %s N=%lld G=%lld Cg=%lld Og=%lld S %lldx%lld K %lldx%lld st %lld pd %lld,%lld "
            "dl %lld,%lld layouts %d%d%d tile %lld group %lld dtype %d: err %g", kn[kind], (long long)N, (long long)G,
            (long long)Cg, (long long)Og, (long long)S[0], (long long)S[1], (long long)K[0], (long long)K[1],
            (long long)st[0], (long long)pd[0], (long long)pd[1], (long long)dl[0], (long long)dl[1], la, lb, lo,
            (long long)tile, (long long)group, dt, e);
      free(a.buf); free(b.buf); free(o.buf); free(r.buf);
    }
  }
}

/* a larger case that takes several tiles and threads */
static void test_kernels_big(void) {
  int64_t st[2] = {1, 1}, pd[2] = {1, 1}, dl[2] = {1, 1};
  int64_t xs[4] = {2, 64, 34, 33}, ws[4] = {16, 64, 3, 3}, ys[4] = {2, 16, 34, 33};
  const int64_t* shp[3][3] = {{xs, ws, ys}, {ys, ws, xs}, {xs, ys, ws}};
  for (int kind = 0; kind < 3; ++kind) {
    hview_t a = hview(TPU_DTYPE_F32, 4, shp[kind][0], 1), b = hview(TPU_DTYPE_F32, 4, shp[kind][1], 0);
    hview_t o = hview(TPU_DTYPE_F32, 4, shp[kind][2], 0), r = hview(TPU_DTYPE_F32, 4, shp[kind][2], 0);
    fill(&a); fill(&b);
    OK(tpu_host_conv_run(kind, 2, st, pd, dl, 1, &a.v, &b.v, &o.v));
    OK(tpu_host_conv_run_ref(kind, 2, st, pd, dl, 1, &a.v, &b.v, &r.v));
    double mag, e = vdiff(&o.v, &r.v, &mag);
    CHECK(e <= 1e-5 * (1 + mag), "big kind %d: err %g (mag %g)", kind, e, mag);
    free(a.buf); free(b.buf); free(o.buf); free(r.buf);
  }
}

/* small spatial, larger batch: sample groups by default (channels-last input too) */
static void test_kernels_groups(void) {
  int64_t st[2] = {1, 1}, pd[2] = {1, 1}, dl[2] = {1, 1};
  int64_t xs[4] = {9, 24, 4, 5}, ws[4] = {20, 24, 3, 3}, ys[4] = {9, 20, 4, 5};
  const int64_t* shp[3][3] = {{xs, ws, ys}, {ys, ws, xs}, {xs, ys, ws}};
  for (int lay = 0; lay < 2; ++lay)
    for (int kind = 0; kind < 3; ++kind) {
      hview_t a = hview(TPU_DTYPE_F32, 4, shp[kind][0], lay), b = hview(TPU_DTYPE_F32, 4, shp[kind][1], 0);
      hview_t o = hview(TPU_DTYPE_F32, 4, shp[kind][2], lay), r = hview(TPU_DTYPE_F32, 4, shp[kind][2], 0);
      fill(&a); fill(&b);
      OK(tpu_host_conv_run(kind, 2, st, pd, dl, 1, &a.v, &b.v, &o.v));
      OK(tpu_host_conv_run_ref(kind, 2, st, pd, dl, 1, &a.v, &b.v, &r.v));
      double mag, e = vdiff(&o.v, &r.v, &mag);
      CHECK(e <= 1e-5 * (1 + mag), "groups kind %d layout %d: err %g (mag %g)", kind, lay, e, mag);
      free(a.buf); free(b.buf); free(o.buf); free(r.buf);
    }
}

/* the gathered-operand (gk) paths at channel counts that fill and overrun their 16-lane groups and
 * 8-row blocks: each kind with gk forced, off, and automatic, every layout, f32 and bf16 operands,
 * strides 1-3, dilation, groups; results against the double-accumulator reference, and the same
 * call twice must give identical bits (fixed summation order) */
static void test_kernels_gk(void) {
  for (int it = 0; it < 36; ++it) {
    int64_t G = it % 6 == 5 ? 2 : 1, N = irand(1, 4);
    int64_t Cg = irand(1, 40), Og = irand(5, 52);
    if (it % 4 == 0) { Cg = irand(14, 18); Og = irand(14, 18); }
    int nsp = it % 9 == 8 ? 1 : 2;
    int64_t st[2], pd[2], dl[2], S[2], K[2], Q[2];
    int ok = 1;
    for (int d = 0; d < nsp; ++d) {
      K[d] = irand(1, 3); st[d] = irand(1, 3); dl[d] = it % 7 == 3 ? 2 : 1; pd[d] = irand(0, 2);
      S[d] = irand(2, 11);
      int64_t q = S[d] + 2 * pd[d] - dl[d] * (K[d] - 1) - 1;
      if (q < 0) { ok = 0; break; }
      Q[d] = q / st[d] + 1;
    }
    if (!ok) continue;
    int64_t xs[4] = {N, G * Cg}, ws[4] = {G * Og, Cg}, ys[4] = {N, G * Og};
    for (int d = 0; d < nsp; ++d) { xs[2 + d] = S[d]; ws[2 + d] = K[d]; ys[2 + d] = Q[d]; }
    int rank = nsp + 2, idt = it % 3 == 2 ? TPU_DTYPE_BF16 : TPU_DTYPE_F32;
    for (int kind = 0; kind < 3; ++kind) {
      const int64_t *as = kind == 1 ? ys : xs, *bs = kind == 2 ? ys : ws, *os = kind == 0 ? ys : kind == 1 ? xs : ws;
      int la = irand(0, 2), lb = irand(0, 2), lo = irand(0, 2);
      hview_t a = hview(idt, rank, as, la), b = hview(idt, rank, bs, lb);
      hview_t o = hview(TPU_DTYPE_F32, rank, os, lo), o2 = hview(TPU_DTYPE_F32, rank, os, lo);
      hview_t r = hview(TPU_DTYPE_F32, rank, os, 0);
      fill(&a); fill(&b); fill(&o);
      int mode = it % 3 == 1 ? 1 : 2;
      tpu_host_conv_set_gk(mode);
      OK(tpu_host_conv_run(kind, nsp, st, pd, dl, G, &a.v, &b.v, &o.v));
      OK(tpu_host_conv_run(kind, nsp, st, pd, dl, G, &a.v, &b.v, &o2.v));
      tpu_host_conv_set_gk(1);
      OK(tpu_host_conv_run_ref(kind, nsp, st, pd, dl, G, &a.v, &b.v, &r.v));
      double mag, e = vdiff(&o.v, &r.v, &mag), mag2, e2 = vdiff(&o.v, &o2.v, &mag2);
      CHECK(e <= 1e-5 * (1 + mag), "gk kind %d nsp %d N=%lld G=%lld Cg=%lld Og=%lld st %lld pd %lld dl %lld layouts %d%d%d dt %d mode %d: err %g",
            kind, nsp, (long long)N, (long long)G, (long long)Cg, (long long)Og, (long long)st[0], (long long)pd[0],
            (long long)dl[0], la, lb, lo, idt, mode, e);
      CHECK(e2 == 0, "gk kind %d: two runs differ by %g", kind, e2);
      free(a.buf); free(b.buf); free(o.buf); free(o2.buf); free(r.buf);
    }
  }
}

/* bf16 operands on every ISA the CPU has (AVX512-BF16 `vdpbf16ps` gk forward, the widening f32 gk kernels,
 * AVX2 / portable im2col + GEMM): odd channel counts (the odd channel of a pair is zero-padded), channel
 * counts past the 32-channel register transposes of NCHW inputs and 16-channel ones of NCHW outputs,
 * maps of 16+ positions that are not multiples of 16, 1-3 spatial dims, stride, dilation, padding,
 * groups, NCHW / channels-last / strided views; each kind (stride-1 backward-input runs as the forward
 * of the flipped weight) against the double reference, and the same call twice bit-identical. */
static void test_kernels_bf16_isa(void) {
  static const tpu_host_gemm_isa_t isas[4] = {TPU_HOST_GEMM_ISA_BEST, TPU_HOST_GEMM_ISA_AVX512, TPU_HOST_GEMM_ISA_AVX2,
                                              TPU_HOST_GEMM_ISA_PORTABLE};
  static const int64_t cgs[8] = {1, 3, 17, 32, 33, 64, 69, 40};
  for (int it = 0; it < 28; ++it) {
    int nsp = it >= 24 ? 2 : it % 8 == 7 ? 3 : it % 8 == 6 ? 1 : 2;
    int64_t G = it % 5 == 4 ? 2 : 1, N = irand(1, 3), Cg = cgs[it % 8], Og = irand(6, 40);
    if (it % 3 == 0) Og = irand(30, 50);
    int64_t st[3], pd[3], dl[3], S[3], K[3], Q[3];
    int ok = 1;
    for (int d = 0; d < nsp; ++d) {
      K[d] = nsp == 3 ? irand(1, 2) : irand(2, 3);
      st[d] = it % 4 == 1 ? 2 : 1; dl[d] = it % 6 == 2 ? 2 : 1; pd[d] = irand(0, 2);
      S[d] = nsp == 1 ? irand(17, 40) : nsp == 3 ? irand(3, 5) : irand(4, 9);
      if (it >= 24) { /* NCHW maps of 12 x 14 / 13 x 16: several 16-position blocks plus a remainder */
        K[d] = 3; st[d] = 1; dl[d] = 1; pd[d] = 1; S[d] = d ? 14 + 2 * (it % 2) : 12 + it % 2;
      }
      int64_t q = S[d] + 2 * pd[d] - dl[d] * (K[d] - 1) - 1;
      if (q < 0) { ok = 0; break; }
      Q[d] = q / st[d] + 1;
    }
    if (!ok) continue;
    if (it >= 24) { N = 2; Cg = it < 26 ? 37 : 64; Og = it % 2 ? 35 : 48; G = 1; }
    int64_t xs[5] = {N, G * Cg}, ws[5] = {G * Og, Cg}, ys[5] = {N, G * Og};
    for (int d = 0; d < nsp; ++d) { xs[2 + d] = S[d]; ws[2 + d] = K[d]; ys[2 + d] = Q[d]; }
    int rank = nsp + 2;
    for (int kind = 0; kind < 3; ++kind) {
      const int64_t *as = kind == 1 ? ys : xs, *bs = kind == 2 ? ys : ws, *os = kind == 0 ? ys : kind == 1 ? xs : ws;
      int la = it >= 24 ? 0 : (it + kind) % 3, lb = irand(0, 2), lo = it >= 24 ? 0 : (it / 3 + kind) % 3;
      hview_t a = hview(TPU_DTYPE_BF16, rank, as, la), b = hview(TPU_DTYPE_BF16, rank, bs, lb);
      hview_t r = hview(TPU_DTYPE_F32, rank, os, 0);
      fill(&a); fill(&b);
      OK(tpu_host_conv_run_ref(kind, nsp, st, pd, dl, G, &a.v, &b.v, &r.v));
      for (int ii = 0; ii < 4; ++ii) {
        double e, mag, e2;
        run_twice(kind, nsp, st, pd, dl, G, &a, &b, &r, rank, os, lo, isas[ii], &e, &mag, &e2);
        CHECK(e <= 1e-5 * (1 + mag), "bf16 isa %d kind %d nsp %d N=%lld G=%lld Cg=%lld Og=%lld st %lld pd %lld dl %lld layouts %d%d%d: err %g (mag %g)",
              (int)isas[ii], kind, nsp, (long long)N, (long long)G, (long long)Cg, (long long)Og, (long long)st[0],
              (long long)pd[0], (long long)dl[0], la, lb, lo, e, mag);
        CHECK(e2 == 0, "bf16 isa %d kind %d: two runs differ by %g", (int)isas[ii], kind, e2);
      }
      free(a.buf); free(b.buf); free(r.buf);
    }
  }
}

/* the padded-grid forward (conv.c conv_direct_run: stride 1, f32, AVX-512F) with both tiles: 8 x 48 and, for <= 4
 * output channels per group, 4 x 96 (then taken down to maps where half the grid is output, e.g. 8x8 with pad 1),
 * over grid strips or output rows (runs of <= 16 outputs per lane vector: 16-wide rows fill them, 14-wide leave 2);
 * output channels 1-12 (partial row blocks), groups, dilation, padding 0-2, 1-3 spatial dims, every layout, maps
 * whose grids end mid-strip, f32 / bf16 / f16 operands; stride-1 backward-input runs as the flipped forward. Against
 * the reference, and the same call twice must give identical bits. */
static void test_kernels_direct(void) {
  static const int64_t ogs[8] = {1, 2, 3, 4, 4, 5, 8, 12};
  for (int it = 0; it < 32; ++it) {
    const int nsp = it % 8 == 7 ? 3 : it % 8 == 6 ? 1 : 2;
    int64_t G = it % 5 == 3 ? 2 : 1, N = irand(1, 5), Cg = irand(1, 9), Og = ogs[it % 8];
    int64_t st[3], pd[3], dl[3], S[3], K[3], Q[3];
    for (int d = 0; d < nsp; ++d) {
      K[d] = nsp == 3 ? 2 : 3; st[d] = 1; dl[d] = it % 6 == 4 ? 2 : 1; pd[d] = it % 4 == 1 ? 0 : irand(1, 2);
      S[d] = nsp == 1 ? irand(20, 70) : nsp == 3 ? irand(6, 9) : irand(7, 18);
      if (nsp == 2 && it % 4 == 0) S[d] = d ? 12 + 2 * (it % 8 == 0) + pd[d] : irand(3, 9); /* rows of 14 / 16 */
      Q[d] = S[d] + 2 * pd[d] - dl[d] * (K[d] - 1);
    }
    int64_t xs[5] = {N, G * Cg}, ws[5] = {G * Og, Cg}, ys[5] = {N, G * Og};
    for (int d = 0; d < nsp; ++d) { xs[2 + d] = S[d]; ws[2 + d] = K[d]; ys[2 + d] = Q[d]; }
    const int rank = nsp + 2;
    for (int kind = 0; kind < 2; ++kind) { /* forward, and backward-input as the flipped forward (groups 1) */
      if (kind == 1 && (G > 1 || dl[0] > 1)) continue;
      const int64_t *as = kind == 1 ? ys : xs, *os = kind == 0 ? ys : xs;
      int64_t pd2[3];
      for (int d = 0; d < nsp; ++d) pd2[d] = kind == 1 ? (K[d] - 1) * dl[d] - pd[d] : pd[d];
      if (kind == 1 && pd2[0] < 0) continue;
      const int lx = (it + kind) % 3, lo = (it / 3 + kind) % 3;
      /* bf16 / f16 operands: widened exactly into the planes and the weight pack (bf16 from 16 channels: gk) */
      const int idt = it % 3 == 2 ? TPU_DTYPE_BF16 : it % 7 == 5 ? TPU_DTYPE_F16 : TPU_DTYPE_F32;
      hview_t a = hview(idt, rank, as, lx), b = hview(idt, rank, ws, irand(0, 2));
      hview_t o = hview(TPU_DTYPE_F32, rank, os, lo), o2 = hview(TPU_DTYPE_F32, rank, os, lo);
      hview_t r = hview(TPU_DTYPE_F32, rank, os, 0);
      fill(&a); fill(&b); fill(&o);
      OK(tpu_host_conv_run(kind, nsp, st, pd, dl, G, &a.v, &b.v, &o.v));
      OK(tpu_host_conv_run(kind, nsp, st, pd, dl, G, &a.v, &b.v, &o2.v));
      OK(tpu_host_conv_run_ref(kind, nsp, st, pd, dl, G, &a.v, &b.v, &r.v));
      double mag, e = vdiff(&o.v, &r.v, &mag), mag2, e2 = vdiff(&o.v, &o2.v, &mag2);
      CHECK(e <= 1e-5 * (1 + mag), "direct kind %d nsp %d N=%lld G=%lld Cg=%lld Og=%lld pd %lld dl %lld layouts %d%d dt %d: err %g (mag %g)",
            kind, nsp, (long long)N, (long long)G, (long long)Cg, (long long)Og, (long long)pd[0], (long long)dl[0], lx,
            lo, idt, e, mag);
      CHECK(e2 == 0, "direct kind %d: two runs differ by %g", kind, e2);
      free(a.buf); free(b.buf); free(o.buf); free(o2.buf); free(r.buf);
    }
  }
}

/* the padded-grid forward on shifted planes (conv.c conv_dk_job_t.shifted: small maps whose outputs of a sample run
 * consecutively, 8x8 / 4x4 / 7x5, 3-d, 1-d): output channels 1-16 (both tiles), groups, padding 0-2 (and 3 > the
 * kernel's reach along rows), dilation, f32 / bf16 operands, NCHW / channels-last / strided (y not flat: the grid
 * or gk kernels) layouts, forward and the flipped backward-input; against the reference on the best ISA and with
 * the GEMM capped at AVX2 (im2col), and the same call twice gives identical bits */
static void test_kernels_shifted(void) {
  static const int64_t cs[][6] = {
      /* nsp S0 S1 S2 K pad */
      {2, 1, 8, 8, 3, 1}, {2, 1, 4, 4, 3, 1}, {2, 1, 7, 5, 3, 1}, {2, 1, 8, 4, 3, 0}, {2, 1, 6, 6, 5, 2},
      {3, 4, 4, 4, 3, 1}, {1, 1, 1, 9, 3, 1}, {2, 1, 5, 3, 3, 2}, {2, 1, 8, 8, 3, 2},
  };
  static const int64_t ogs[8] = {1, 3, 4, 8, 12, 16, 4, 3}; /* 6, 7: groups / dilation within the shifted mode */
  static const tpu_host_gemm_isa_t isas[2] = {TPU_HOST_GEMM_ISA_BEST, TPU_HOST_GEMM_ISA_AVX2};
  for (size_t ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ++ci)
    for (int v = 0; v < 8; ++v) {
      const int64_t* c = cs[ci];
      const int nsp = (int)c[0], rank = nsp + 2, dil = (v == 4 || v == 7) && c[4] == 3;
      const int64_t G = v == 5 || v == 6 ? 2 : 1, N = 1 + (v + ci) % 5, Cg = 1 + (v * 3 + ci) % 9, Og = ogs[v];
      int64_t st[3] = {1, 1, 1}, pd[3], dl[3], xs[5] = {N, G * Cg}, ws[5] = {G * Og, Cg}, ys[5] = {N, G * Og};
      for (int d = 0; d < nsp; ++d) {
        dl[d] = dil ? 2 : 1;
        pd[d] = c[5] + dil;
        xs[2 + d] = c[4 - nsp + d];
        ws[2 + d] = c[4];
        ys[2 + d] = xs[2 + d] + 2 * pd[d] - dl[d] * (c[4] - 1);
        if (ys[2 + d] < 1) { pd[d] = c[4]; ys[2 + d] = xs[2 + d] + 2 * pd[d] - dl[d] * (c[4] - 1); }
      }
      for (int kind = 0; kind < 2; ++kind) {
        if (kind == 1 && (G > 1 || dl[0] > 1)) continue;
        int64_t pd2[3];
        int ok = 1;
        for (int d = 0; d < nsp; ++d) {
          pd2[d] = kind == 1 ? (c[4] - 1) * dl[d] - pd[d] : pd[d];
          ok &= pd2[d] >= 0;
        }
        if (!ok) continue;
        const int64_t *as = kind == 1 ? ys : xs, *os = kind == 0 ? ys : xs;
        const int idt = v % 3 == 2 ? TPU_DTYPE_BF16 : TPU_DTYPE_F32, lx = (v + kind) % 3, lo = (ci + v) % 3;
        hview_t a = hview(idt, rank, as, lx), b = hview(idt, rank, ws, v % 2);
        hview_t r = hview(TPU_DTYPE_F32, rank, os, 0);
        fill(&a); fill(&b);
        OK(tpu_host_conv_run_ref(kind, nsp, st, pd, dl, G, &a.v, &b.v, &r.v));
        for (int ii = 0; ii < 2; ++ii) {
          double e, mag, e2;
          run_twice(kind, nsp, st, pd, dl, G, &a, &b, &r, rank, os, lo, isas[ii], &e, &mag, &e2);
          CHECK(e <= 1e-5 * (1 + mag), "shifted case %zu v %d kind %d isa %d layouts %d%d: err %g (mag %g)", ci, v, kind,
                (int)isas[ii], lx, lo, e, mag);
          CHECK(e2 == 0, "shifted case %zu v %d kind %d: two runs differ by %g", ci, v, kind, e2);
        }
        free(a.buf); free(b.buf); free(r.buf);
      }
    }
}

/* ---- end to end through tpu_op_run */
static void* g_allocs[64];
static int g_nalloc;
static tpu_tensor_t dev(int ndim, const int64_t* sizes, const float* host) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  void* p = NULL;
  OK(tpu_rt_malloc(0, (size_t)n * 4, &p));
  if (g_nalloc < 64) g_allocs[g_nalloc++] = p;
  if (host && n) OK(tpu_rt_memcpy_h2d(0, p, host, (size_t)n * 4));
  return tpu_tensor_contiguous(p, 0, TPU_DTYPE_F32, ndim, sizes);
}
static tpu_host_view_t hv(float* p, int ndim, const int64_t* sizes) {
  tpu_host_view_t v;
  memset(&v, 0, sizeof(v));
  v.data = (char*)p; v.dtype = TPU_DTYPE_F32; v.rank = ndim;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) { v.sizes[d] = sizes[d]; v.strides[d] = s; s *= sizes[d]; }
  return v;
}
static float maxdiff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) { float d = fabsf(a[i] - b[i]); if (!(d <= m)) m = d; }
  return m;
}
static tpu_arg_t ilist(const int64_t* v, int n) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_INT_LIST; a.ints = v; a.len = n;
  return a;
}

static void test_ops(void) {
  enum { N = 2, C = 4, H = 7, W = 6, O = 6, G = 2, KH = 3, KW = 2 };
  int64_t st[2] = {2, 1}, pd[2] = {1, 0}, dl[2] = {1, 2}, op0[2] = {0, 0};
  int64_t Q0 = (H + 2 * 1 - 1 * (KH - 1) - 1) / 2 + 1, Q1 = (W - 2 * (KW - 1) - 1) / 1 + 1;
  int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C / G, KH, KW}, ys[4] = {N, O, Q0, Q1}, bs[1] = {O};
  int64_t nx = N * C * H * W, nw = O * (C / G) * KH * KW, ny = N * O * Q0 * Q1;
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(O * 4), *gy = malloc(ny * 4);
  float *y = malloc(ny * 4), *ry = malloc(ny * 4), *gx = malloc(nx * 4), *rgx = malloc(nx * 4);
  float *gw = malloc(nw * 4), *rgw = malloc(nw * 4), gb[O], rgb[O];
  for (int64_t i = 0; i < nx; ++i) x[i] = (float)drand_();
  for (int64_t i = 0; i < nw; ++i) w[i] = (float)drand_();
  for (int64_t i = 0; i < ny; ++i) gy[i] = (float)drand_();
  for (int i = 0; i < O; ++i) b[i] = (float)drand_();
  tpu_tensor_t tx = dev(4, xs, x), tw = dev(4, ws, w), tb = dev(1, bs, b), tgy = dev(4, ys, gy);
  tpu_tensor_t ty = dev(4, ys, NULL), tgx = dev(4, xs, NULL), tgw = dev(4, ws, NULL), tgb = dev(1, bs, NULL);
  tpu_host_view_t vx = hv(x, 4, xs), vw = hv(w, 4, ws), vgy = hv(gy, 4, ys);

  /* forward with bias */
  tpu_arg_t fa[] = {tpu_arg_tensor(&tx), tpu_arg_tensor(&tw), tpu_arg_tensor(&tb), ilist(st, 2), ilist(pd, 2),
                    ilist(dl, 2), tpu_arg_bool(false), ilist(op0, 2), tpu_arg_int(G)};
  OK(tpu_op_run(0, "aten::convolution_overrideable", fa, 9, &ty, 1));
  OK(tpu_rt_memcpy_d2h(0, y, ty.data, ny * 4));
  tpu_host_view_t vry = hv(ry, 4, ys);
  OK(tpu_host_conv_run_ref(TPU_HOST_CONV_FWD, 2, st, pd, dl, G, &vx, &vw, &vry));
  for (int64_t i = 0; i < ny; ++i) ry[i] += b[(i / (Q0 * Q1)) % O];
  CHECK(maxdiff(y, ry, ny) < 1e-5f, "convolution_overrideable: %g", maxdiff(y, ry, ny));
  OK(tpu_op_run(0, "aten::convolution", fa, 9, &ty, 1));
  OK(tpu_rt_memcpy_d2h(0, y, ty.data, ny * 4));
  CHECK(maxdiff(y, ry, ny) < 1e-5f, "convolution: %g", maxdiff(y, ry, ny));

  /* backward, all three outputs */
  tpu_arg_t ba[] = {tpu_arg_tensor(&tgy), tpu_arg_tensor(&tx), tpu_arg_tensor(&tw), ilist(st, 2), ilist(pd, 2),
                    ilist(dl, 2), tpu_arg_bool(false), ilist(op0, 2), tpu_arg_int(G), {0}};
  int64_t mask[3] = {1, 1, 1};
  ba[9] = ilist(mask, 3); ba[9].kind = TPU_ARG_BOOL_LIST;
  tpu_tensor_t bouts[3] = {tgx, tgw, tgb};
  OK(tpu_op_run(0, "aten::convolution_backward_overrideable", ba, 10, bouts, 3));
  OK(tpu_rt_memcpy_d2h(0, gx, tgx.data, nx * 4));
  OK(tpu_rt_memcpy_d2h(0, gw, tgw.data, nw * 4));
  OK(tpu_rt_memcpy_d2h(0, gb, tgb.data, O * 4));
  tpu_host_view_t vrgx = hv(rgx, 4, xs), vrgw = hv(rgw, 4, ws);
  OK(tpu_host_conv_run_ref(TPU_HOST_CONV_BWD_INPUT, 2, st, pd, dl, G, &vgy, &vw, &vrgx));
  OK(tpu_host_conv_run_ref(TPU_HOST_CONV_BWD_WEIGHT, 2, st, pd, dl, G, &vx, &vgy, &vrgw));
  for (int o = 0; o < O; ++o) {
    double s = 0;
    for (int64_t i = 0; i < ny; ++i) if ((i / (Q0 * Q1)) % O == o) s += gy[i];
    rgb[o] = (float)s;
  }
  CHECK(maxdiff(gx, rgx, nx) < 1e-5f, "grad_input: %g", maxdiff(gx, rgx, nx));
  CHECK(maxdiff(gw, rgw, nw) < 1e-4f, "grad_weight: %g", maxdiff(gw, rgw, nw));
  CHECK(maxdiff(gb, rgb, O) < 1e-4f, "grad_bias: %g", maxdiff(gb, rgb, O));

  /* aten::convolution_backward: the same with bias_sizes before stride */
  int64_t bsz[1] = {O};
  tpu_arg_t ca[] = {ba[0], ba[1], ba[2], ilist(bsz, 1), ba[3], ba[4], ba[5], ba[6], ba[7], ba[8], ba[9]};
  OK(tpu_op_run(0, "aten::convolution_backward", ca, 11, bouts, 3));
  OK(tpu_rt_memcpy_d2h(0, gw, tgw.data, nw * 4));
  OK(tpu_rt_memcpy_d2h(0, gb, tgb.data, O * 4));
  CHECK(maxdiff(gw, rgw, nw) < 1e-4f, "convolution_backward grad_weight: %g", maxdiff(gw, rgw, nw));
  CHECK(maxdiff(gb, rgb, O) < 1e-4f, "convolution_backward grad_bias: %g", maxdiff(gb, rgb, O));

  /* only grad_input (the others absent) */
  int64_t mask1[3] = {1, 0, 0};
  ba[9] = ilist(mask1, 3); ba[9].kind = TPU_ARG_BOOL_LIST;
  tpu_tensor_t absent;
  memset(&absent, 0, sizeof(absent));
  absent.ndim = -1;
  tpu_tensor_t bouts1[3] = {tgx, absent, absent};
  memset(gx, 0, nx * 4);
  OK(tpu_rt_memcpy_h2d(0, tgx.data, gx, nx * 4));
  OK(tpu_op_run(0, "aten::convolution_backward_overrideable", ba, 10, bouts1, 3));
  OK(tpu_rt_memcpy_d2h(0, gx, tgx.data, nx * 4));
  CHECK(maxdiff(gx, rgx, nx) < 1e-5f, "grad_input only: %g", maxdiff(gx, rgx, nx));

  /* transposed: input gy-shaped [N, O, Q], weight [O, C/G, K] -> [N, C, H, W] (no bias) */
  tpu_arg_t ta[] = {tpu_arg_tensor(&tgy), tpu_arg_tensor(&tw), tpu_arg_none(), ilist(st, 2), ilist(pd, 2),
                    ilist(dl, 2), tpu_arg_bool(true), ilist((int64_t[]){(H + 2 - 2 - 1) % 2, 0}, 2), tpu_arg_int(G)};
  OK(tpu_op_run(0, "aten::convolution_overrideable", ta, 9, &tgx, 1));
  OK(tpu_rt_memcpy_d2h(0, gx, tgx.data, nx * 4));
  CHECK(maxdiff(gx, rgx, nx) < 1e-5f, "transposed convolution: %g", maxdiff(gx, rgx, nx));

  /* a channel mismatch is an error with PyTorch's wording */
  tpu_tensor_t tw_bad = tw;
  tw_bad.sizes[1] = 1;
  fa[1] = tpu_arg_tensor(&tw_bad);
  tpu_status_t s = tpu_op_run(0, "aten::convolution_overrideable", fa, 9, &ty, 1);
  CHECK(tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT && strstr(tpu_status_message(s), "expected input"),
        "channel mismatch: %s", tpu_status_message(s));
  tpu_status_free(s);
  OK(tpu_rt_synchronize(0));
  free(x); free(w); free(b); free(gy); free(y); free(ry); free(gx); free(rgx); free(gw); free(rgw);
}

/* the small-channel backward-weight kernel (conv.c conv_dw_run: stride 1, one group, Cg and Og < 16, rows of
 * >= 8 output positions, half a 16-lane vector): 1-3 spatial dims, taps past a multiple of 9 (5x5, 3x3x3), odd O, dilation, x in
 * every layout, gy contiguous or strided (the gk path then), against the reference */
static void test_kernels_dw(void) {
  static const int64_t cs[][12] = {
      /* nsp N C O S0 S1 S2 K pad dil lx ly */
      {2, 3, 4, 4, 1, 16, 16, 3, 1, 1, 0, 0}, {2, 2, 3, 5, 1, 13, 17, 3, 1, 1, 1, 0}, {2, 2, 1, 1, 1, 12, 12, 3, 0, 1, 2, 0},
      {2, 1, 5, 3, 1, 14, 20, 5, 2, 1, 0, 0}, {2, 2, 8, 8, 1, 16, 16, 3, 2, 2, 0, 0}, {2, 2, 4, 4, 1, 16, 16, 3, 1, 1, 0, 2},
      {3, 1, 2, 3, 5, 6, 14, 3, 1, 1, 0, 0}, {1, 3, 3, 2, 1, 1, 33, 5, 2, 1, 1, 0}, {2, 2, 15, 15, 1, 16, 16, 3, 1, 1, 0, 0},
      /* rows of 8-11 positions (ResNet's 4-channel 8x8 maps), channels-last x, strided gy */
      {2, 16, 4, 4, 1, 8, 8, 3, 1, 1, 0, 0}, {2, 3, 5, 7, 1, 9, 10, 3, 1, 1, 1, 0}, {2, 2, 3, 3, 1, 11, 9, 3, 1, 1, 2, 2},
      {1, 2, 6, 5, 1, 1, 9, 3, 1, 1, 0, 0},
  };
  /* operand dtypes (x, gy): f32, bf16 (widened exactly: the planes and an f32 copy of gy), f16 x with f32 gy */
  static const int dts[3][2] = {{TPU_DTYPE_F32, TPU_DTYPE_F32}, {TPU_DTYPE_BF16, TPU_DTYPE_BF16},
                                {TPU_DTYPE_F16, TPU_DTYPE_F32}};
  for (size_t cv = 0; cv < 3 * sizeof(cs) / sizeof(cs[0]); ++cv) {
    const size_t ci = cv / 3;
    const int64_t* c = cs[ci];
    const int nsp = (int)c[0], xdt = dts[cv % 3][0], ydt = dts[cv % 3][1];
    int64_t st[3] = {1, 1, 1}, pd[3], dl[3], xs[5] = {c[1], c[2]}, ws[5] = {c[3], c[2]}, ys[5] = {c[1], c[3]};
    for (int d = 0; d < nsp; ++d) {
      const int64_t S = c[4 + 3 - nsp + d];
      pd[d] = c[8]; dl[d] = c[9];
      xs[2 + d] = S; ws[2 + d] = c[7]; ys[2 + d] = S + 2 * c[8] - c[9] * (c[7] - 1);
    }
    hview_t x = hview(xdt, nsp + 2, xs, (int)c[10]), gy = hview(ydt, nsp + 2, ys, (int)c[11]);
    hview_t o = hview(TPU_DTYPE_F32, nsp + 2, ws, 0), r = hview(TPU_DTYPE_F32, nsp + 2, ws, 0);
    fill(&x); fill(&gy); fill(&o);
    OK(tpu_host_conv_run(TPU_HOST_CONV_BWD_WEIGHT, nsp, st, pd, dl, 1, &x.v, &gy.v, &o.v));
    OK(tpu_host_conv_run_ref(TPU_HOST_CONV_BWD_WEIGHT, nsp, st, pd, dl, 1, &x.v, &gy.v, &r.v));
    double mag, e = vdiff(&o.v, &r.v, &mag);
    CHECK(e <= 1e-5 * (1 + mag), "dw case %zu dtypes %d %d: err %g (mag %g)", ci, xdt, ydt, e, mag);
    free(x.buf); free(gy.buf); free(o.buf); free(r.buf);
  }
}

/* kernels whose taps partly (or all) read padding at every output (conv.c conv_crop_taps): 1x1 / 1xW / 2x2 maps
 * with 3x3 / 5x5 kernels, padding 1-2, dilation, stride 2, groups, every layout, f32 / f64 / bf16, then 1x1 maps
 * with 1x1 kernels (the pointwise GEMM); the dropped taps' weights are inf in the forward / backward-input (they
 * multiply nothing, as in the reference); also geometries where no tap reads input (the result is zeros). Each
 * case on the best ISA and with the GEMM capped at AVX2 (the padded-grid / gk kernels then off). */
static void test_kernels_crop(void) {
  static const int64_t cs[][8] = {
      /* S0 S1 K pad dil stride G Cg */
      {1, 1, 3, 1, 1, 1, 1, 32}, {1, 1, 3, 1, 1, 1, 2, 5}, {1, 1, 5, 2, 1, 1, 1, 7}, {1, 3, 3, 1, 1, 1, 1, 6},
      {2, 2, 3, 2, 1, 1, 1, 9}, {1, 1, 3, 1, 1, 2, 1, 4}, {2, 1, 3, 2, 2, 1, 1, 3}, {1, 1, 1, 0, 1, 1, 3, 4},
      {3, 1, 5, 2, 1, 2, 1, 8}, {1, 1, 2, 2, 3, 1, 1, 3}, {1, 2, 2, 2, 3, 1, 2, 2},
  };
  static const tpu_host_gemm_isa_t isas[2] = {TPU_HOST_GEMM_ISA_BEST, TPU_HOST_GEMM_ISA_AVX2};
  for (size_t ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ++ci)
    for (int v = 0; v < 6; ++v) {
      const int64_t* c = cs[ci];
      const int dt = v % 3 == 1 ? TPU_DTYPE_F64 : TPU_DTYPE_F32, idt = v % 3 == 2 ? TPU_DTYPE_BF16 : dt;
      int64_t st[2] = {c[5], c[5]}, pd[2] = {c[3], c[3]}, dl[2] = {c[4], c[4]}, S[2] = {c[0], c[1]}, Q[2];
      const int64_t G = c[6], N = 2 + v, Og = 3 + ci % 3;
      for (int d = 0; d < 2; ++d) Q[d] = (S[d] + 2 * pd[d] - dl[d] * (c[2] - 1) - 1) / st[d] + 1;
      int64_t xs[4] = {N, G * c[7], S[0], S[1]}, ws[4] = {G * Og, c[7], c[2], c[2]}, ys[4] = {N, G * Og, Q[0], Q[1]};
      for (int kind = 0; kind < 3; ++kind) {
        const int64_t *as = kind == 1 ? ys : xs, *bs = kind == 2 ? ys : ws, *os = kind == 0 ? ys : kind == 1 ? xs : ws;
        hview_t a = hview(idt, 4, as, (v + kind) % 3), b = hview(idt, 4, bs, v % 2);
        hview_t o = hview(dt, 4, os, (v / 2 + kind) % 3), r = hview(dt, 4, os, 0);
        fill(&a); fill(&b); fill(&o);
        if (kind < 2 && idt != TPU_DTYPE_BF16) /* taps that read no input at any output: inf weights */
          for (int64_t k0 = 0; k0 < c[2]; ++k0)
            for (int64_t k1 = 0; k1 < c[2]; ++k1) {
              int used[2] = {0, 0};
              const int64_t k[2] = {k0, k1};
              for (int d = 0; d < 2; ++d)
                for (int64_t q = 0; q < Q[d]; ++q) {
                  const int64_t i = q * st[d] - pd[d] + k[d] * dl[d];
                  used[d] |= i >= 0 && i < S[d];
                }
              if (used[0] && used[1]) continue;
              for (int64_t oc = 0; oc < ws[0] * ws[1]; ++oc) {
                const int64_t off = (oc / ws[1]) * b.v.strides[0] + (oc % ws[1]) * b.v.strides[1] + k0 * b.v.strides[2] +
                                    k1 * b.v.strides[3];
                tpu_host_store_f64(b.v.data + off * (int64_t)tpu_dtype_size(idt), idt, INFINITY);
              }
            }
        OK(tpu_host_conv_run_ref(kind, 2, st, pd, dl, G, &a.v, &b.v, &r.v));
        for (int ii = 0; ii < 2; ++ii) {
          tpu_host_gemm_isa_t old = tpu_host_gemm_set_isa(isas[ii]);
          OK(tpu_host_conv_run(kind, 2, st, pd, dl, G, &a.v, &b.v, &o.v));
          tpu_host_gemm_set_isa(old);
          double mag, e = vdiff(&o.v, &r.v, &mag);
          const double tol = dt == TPU_DTYPE_F64 ? 1e-12 * (1 + mag) : 1e-5 * (1 + mag);
          CHECK(e <= tol, "crop case %zu kind %d dt %d isa %d: err %g (mag %g)", ci, kind, idt, (int)isas[ii], e, mag);
        }
        free(a.buf); free(b.buf); free(o.buf); free(r.buf);
      }
    }
}

int main(void) {
  srand(1234);
  OK(tpu_rt_init());
  test_kernels();
  test_kernels_big();
  test_kernels_im2col_band();
  test_kernels_groups();
  test_kernels_gk();
  test_kernels_dw();
  test_kernels_crop();
  test_kernels_direct();
  test_kernels_shifted();
  test_kernels_bf16_isa();
  test_ops();
  for (int i = 0; i < g_nalloc; ++i) tpu_rt_free(0, g_allocs[i]);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
