/* test_grid_ctc.c — the host kernels for grid_sample (drivers/host/grid_sample.c) and CTC
 * (drivers/host/ctc.c) against math done here, f64, odd sizes, padded (non-contiguous) views:
 *   grid_sample: sampling exactly at pixel positions (align_corners) returns the pixels for every
 *     mode (bicubic weights are (0, 1, 0, 0) there); d x satisfies the adjoint identity
 *     <g, S(x)> = <S^T(g), x> (S is linear in x); d grid matches central finite differences of
 *     the forward at generic points, 2-D and 3-D; NaN/inf/huge coordinates never crash.
 *   CTC: the negative log likelihood equals a brute-force sum over all T-step paths that collapse
 *     to the target; the gradient minus exp(log_probs) equals d nll / d log_probs by central finite
 *     differences (PyTorch's formula folds in log_softmax's exp term); labels out of range fail
 *     with a status.
 * Run under ASan/UBSan by `make test-sanitize`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/ctc.h"
#include "drivers/host/grid_sample.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static double drand(void) { return (double)rand() / (double)RAND_MAX * 2.0 - 1.0; }

/* a contiguous f64 view of `rank` sizes, with the last dim padded by `pad` (non-contiguous) */
static tpu_host_view_t view_new(int rank, const int64_t* sizes, int pad) {
  tpu_host_view_t v;
  memset(&v, 0, sizeof v);
  v.dtype = TPU_DTYPE_F64; v.rank = rank;
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    v.sizes[d] = sizes[d];
    v.strides[d] = s;
    s *= sizes[d] + (d == rank - 1 ? pad : 0);
  }
  v.data = calloc((size_t)(s + 1), sizeof(double));
  return v;
}
static int64_t numel(const tpu_host_view_t* v) {
  int64_t n = 1;
  for (int d = 0; d < v->rank; ++d) n *= v->sizes[d];
  return n;
}
/* element i (row-major over sizes) */
static double* el(const tpu_host_view_t* v, int64_t i) {
  int64_t off = 0;
  for (int d = v->rank - 1; d >= 0; --d) { off += (i % v->sizes[d]) * v->strides[d]; i /= v->sizes[d]; }
  return (double*)v->data + off;
}
static tpu_ir_op_t custom(int target, int64_t attr) {
  tpu_ir_op_t op;
  memset(&op, 0, sizeof op);
  op.opcode = TPU_IR_CUSTOM; op.i0 = target; op.i1 = attr;
  return op;
}
static double dotv(const tpu_host_view_t* a, const tpu_host_view_t* b) {
  double s = 0;
  for (int64_t i = 0; i < numel(a); ++i) s += *el(a, i) * *el(b, i);
  return s;
}

/* nd = 2 or 3; attr = mode | pad << 2 | align << 4 */
static void test_grid(int nd, int64_t attr) {
  int r = nd + 2;
  int64_t xs[5] = {2, 3, 4, 5, 3}, gs[5] = {2, 3, 2, 4, 3};
  if (nd == 2) { xs[2] = 5; xs[3] = 6; gs[1] = 3; gs[2] = 4; gs[3] = 2; }
  int64_t ys[5] = {xs[0], xs[1], gs[1], gs[2], gs[3]};
  tpu_host_view_t x = view_new(r, xs, 1), g = view_new(r, gs, 2), y = view_new(r, ys, 1), go = view_new(r, ys, 0);
  tpu_host_view_t dx = view_new(r, xs, 0), dg = view_new(r, gs, 1), y2 = view_new(r, ys, 0);
  for (int64_t i = 0; i < numel(&x); ++i) *el(&x, i) = drand();
  for (int64_t i = 0; i < numel(&go); ++i) *el(&go, i) = drand();
  int mode = (int)(attr & 3), align = (int)((attr >> 4) & 1);
  /* 1) grid points on pixel positions (align_corners): output = the pixels */
  if (align) {
    for (int64_t i = 0; i < numel(&g); ++i) {
      int a = (int)(i % nd);
      int64_t size = a == 0 ? xs[r - 1] : a == 1 ? xs[r - 2] : xs[2];
      int64_t p = rand() % size;
      *el(&g, i) = size > 1 ? 2.0 * (double)p / (double)(size - 1) - 1 : 0;
    }
    tpu_host_view_t in[2] = {x, g};
    tpu_ir_op_t op = custom(TPU_IR_CUSTOM_GRID_SAMPLE, attr);
    tpu_status_t s = tpu_host_k_grid_sample(&op, 2, in, &y);
    CHECK(s == TPU_OK, "grid fwd: %s", tpu_status_message(s));
    tpu_status_free(s);
    double worst = 0;
    int64_t P = numel(&y) / (ys[0] * ys[1]);
    for (int64_t i = 0; i < numel(&y); ++i) {
      int64_t p = i % P, nc = i / P, n = nc / ys[1], c = nc % ys[1];
      double crd[3];
      for (int a = 0; a < nd; ++a) crd[a] = *el(&g, (n * P + p) * nd + a);
      int64_t px = (int64_t)llround((crd[0] + 1) / 2 * (double)(xs[r - 1] - 1));
      int64_t py = (int64_t)llround((crd[1] + 1) / 2 * (double)(xs[r - 2] - 1));
      int64_t pz = nd == 3 ? (int64_t)llround((crd[2] + 1) / 2 * (double)(xs[2] - 1)) : 0;
      int64_t xi = nd == 3 ? (((n * xs[1] + c) * xs[2] + pz) * xs[3] + py) * xs[4] + px
                           : ((n * xs[1] + c) * xs[2] + py) * xs[3] + px;
      worst = fmax(worst, fabs(*el(&y, i) - *el(&x, xi)));
    }
    CHECK(worst < 1e-12, "grid nd %d attr %lld: sampling at pixels is off by %g", nd, (long long)attr, worst);
  }
  /* 2) generic points: adjoint identity and finite differences for d grid */
  for (int64_t i = 0; i < numel(&g); ++i) *el(&g, i) = drand() * 1.2;
  tpu_host_view_t in[2] = {x, g}, bin[3] = {go, x, g};
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_GRID_SAMPLE, attr), bx = custom(TPU_IR_CUSTOM_GRID_SAMPLE_BWD, attr),
              bg = custom(TPU_IR_CUSTOM_GRID_SAMPLE_BWD, attr | 32);
  tpu_status_t s1 = tpu_host_k_grid_sample(&op, 2, in, &y), s2 = tpu_host_k_grid_sample(&bx, 3, bin, &dx),
               s3 = tpu_host_k_grid_sample(&bg, 3, bin, &dg);
  CHECK(!s1 && !s2 && !s3, "grid run failed");
  tpu_status_free(s1); tpu_status_free(s2); tpu_status_free(s3);
  double lhs = dotv(&go, &y), rhs = dotv(&dx, &x);
  CHECK(fabs(lhs - rhs) <= 1e-10 * (1 + fabs(lhs)), "grid nd %d attr %lld: adjoint %g vs %g", nd, (long long)attr, lhs, rhs);
  if (mode != 1) {
    double worst = 0, h = 1e-6;
    for (int64_t i = 0; i < numel(&g); i += 3) {
      double keep = *el(&g, i);
      *el(&g, i) = keep + h;
      tpu_status_free(tpu_host_k_grid_sample(&op, 2, in, &y2));
      double fp = dotv(&go, &y2);
      *el(&g, i) = keep - h;
      tpu_status_free(tpu_host_k_grid_sample(&op, 2, in, &y2));
      double fm = dotv(&go, &y2);
      *el(&g, i) = keep;
      worst = fmax(worst, fabs((fp - fm) / (2 * h) - *el(&dg, i)));
    }
    CHECK(worst < 1e-5, "grid nd %d attr %lld: d grid vs finite differences: %g", nd, (long long)attr, worst);
  }
  /* 3) non-finite and huge coordinates: no crash, statuses OK */
  const double odd[4] = {NAN, INFINITY, -INFINITY, 1e300};
  for (int64_t i = 0; i < numel(&g); ++i) *el(&g, i) = (i % 5 == 0) ? odd[(i / 5) % 4] : drand();
  s1 = tpu_host_k_grid_sample(&op, 2, in, &y);
  s2 = tpu_host_k_grid_sample(&bx, 3, bin, &dx);
  s3 = tpu_host_k_grid_sample(&bg, 3, bin, &dg);
  CHECK(!s1 && !s2 && !s3, "grid with non-finite coordinates failed");
  tpu_status_free(s1); tpu_status_free(s2); tpu_status_free(s3);
  free(x.data); free(g.data); free(y.data); free(go.data); free(dx.data); free(dg.data); free(y2.data);
}

/* -log sum over all paths pi in C^T collapsing (merge repeats, drop blanks) to tgt[0..L) */
static double ctc_brute(const double* lp, int64_t T, int64_t C, const int64_t* tgt, int64_t L, int64_t blank) {
  int64_t total = 1;
  for (int64_t t = 0; t < T; ++t) total *= C;
  double sum = 0;
  for (int64_t code = 0; code < total; ++code) {
    int64_t pi[8], c = code, out[8], n = 0, prev = -1;
    for (int64_t t = 0; t < T; ++t) { pi[t] = c % C; c /= C; }
    double lpp = 0;
    for (int64_t t = 0; t < T; ++t) {
      lpp += lp[t * C + pi[t]];
      if (pi[t] != blank && pi[t] != prev) out[n++] = pi[t];
      prev = pi[t];
    }
    if (n != L || memcmp(out, tgt, (size_t)L * sizeof(int64_t))) continue;
    sum += exp(lpp);
  }
  return -log(sum);
}
static void test_ctc(int64_t blank) {
  enum { T = 5, N = 3, C = 3, S = 3 };
  const int64_t tl[N] = {2, 0, 3}, il[N] = {5, 4, 3};
  int64_t tgv[N][S] = {{1, 1, 0}, {0, 0, 0}, {1, 2, 1}};
  for (int b = 0; b < N; ++b)
    for (int i = 0; i < S; ++i) /* blank 2: labels 1, 2 become 0, 1 */
      if (blank) tgv[b][i] = tgv[b][i] > 0 ? tgv[b][i] - 1 : 0;
  int64_t Lp = 2 * S + 1;
  tpu_host_view_t lp = view_new(3, (int64_t[]){T, N, C}, 1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < N; ++b) { /* log_softmax of random logits */
      double z[C], m = -1e300, s = 0;
      for (int c = 0; c < C; ++c) { z[c] = drand() * 2; m = fmax(m, z[c]); }
      for (int c = 0; c < C; ++c) s += exp(z[c] - m);
      for (int c = 0; c < C; ++c) *el(&lp, (t * N + b) * C + c) = z[c] - m - log(s);
    }
  tpu_host_view_t tg = view_new(2, (int64_t[]){N, S}, 0), ilv = view_new(1, (int64_t[]){N}, 0),
                  tlv = view_new(1, (int64_t[]){N}, 0);
  tg.dtype = ilv.dtype = tlv.dtype = TPU_DTYPE_I64;
  for (int b = 0; b < N; ++b) {
    ((int64_t*)ilv.data)[b] = il[b]; ((int64_t*)tlv.data)[b] = tl[b];
    for (int i = 0; i < S; ++i) ((int64_t*)tg.data)[b * S + i] = tgv[b][i];
  }
  tpu_host_view_t out = view_new(2, (int64_t[]){N, 1 + T * Lp}, 0);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_CTC, blank);
  tpu_host_view_t in[4] = {lp, tg, ilv, tlv};
  tpu_status_t s = tpu_host_k_ctc(&op, 4, in, &out);
  CHECK(s == TPU_OK, "ctc: %s", tpu_status_message(s));
  tpu_status_free(s);
  double worst = 0;
  for (int b = 0; b < N; ++b) {
    double seq[T * C];
    for (int64_t t = 0; t < il[b]; ++t)
      for (int c = 0; c < C; ++c) seq[t * C + c] = *el(&lp, (t * N + b) * C + c);
    double ref = ctc_brute(seq, il[b], C, tgv[b], tl[b], blank), got = *el(&out, b * (1 + T * Lp));
    worst = isinf(ref) && isinf(got) ? worst : fmax(worst, fabs(ref - got));
  }
  CHECK(worst < 1e-12, "ctc blank %lld: nll vs brute force %g", (long long)blank, worst);
  /* backward: grad - exp(lp) = d nll / d lp (finite differences of the forward), grad_out = 1 */
  tpu_host_view_t nll = view_new(1, (int64_t[]){N}, 0), la = view_new(3, (int64_t[]){N, T, Lp}, 0),
                  go = view_new(1, (int64_t[]){N}, 0), grad = view_new(3, (int64_t[]){T, N, C}, 2);
  for (int b = 0; b < N; ++b) {
    *el(&nll, b) = *el(&out, b * (1 + T * Lp));
    *el(&go, b) = 1;
    for (int64_t i = 0; i < T * Lp; ++i) *el(&la, b * T * Lp + i) = *el(&out, b * (1 + T * Lp) + 1 + i);
  }
  tpu_ir_op_t bop = custom(TPU_IR_CUSTOM_CTC_BWD, blank);
  tpu_host_view_t bin[7] = {go, lp, tg, ilv, tlv, nll, la};
  s = tpu_host_k_ctc(&bop, 7, bin, &grad);
  CHECK(s == TPU_OK, "ctc bwd: %s", tpu_status_message(s));
  tpu_status_free(s);
  double wg = 0, h = 1e-6;
  for (int64_t i = 0; i < T * N * C; ++i) {
    int64_t t = i / (N * C), b = (i / C) % N;
    double keep = *el(&lp, i), fd;
    *el(&lp, i) = keep + h;
    tpu_status_free(tpu_host_k_ctc(&op, 4, in, &out));
    fd = *el(&out, b * (1 + T * Lp));
    *el(&lp, i) = keep - h;
    tpu_status_free(tpu_host_k_ctc(&op, 4, in, &out));
    fd = (fd - *el(&out, b * (1 + T * Lp))) / (2 * h);
    *el(&lp, i) = keep;
    double expect = t < il[b] ? fd + exp(keep) : 0;
    if (isfinite(fd)) wg = fmax(wg, fabs(*el(&grad, i) - expect));
  }
  CHECK(wg < 1e-6, "ctc blank %lld: gradient vs finite differences %g", (long long)blank, wg);
  /* a label out of range: a status, no out-of-bounds read */
  ((int64_t*)tg.data)[2 * S + 1] = C + 4;
  s = tpu_host_k_ctc(&op, 4, in, &out);
  CHECK(tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT, "ctc bad label: %s", tpu_status_message(s));
  tpu_status_free(s);
  free(lp.data); free(tg.data); free(ilv.data); free(tlv.data); free(out.data);
  free(nll.data); free(la.data); free(go.data); free(grad.data);
}

int main(void) {
  srand(11);
  if (tpu_rt_init()) { printf("runtime init failed\n"); return 1; }
  for (int align = 0; align < 2; ++align)
    for (int pad = 0; pad < 3; ++pad) {
      for (int mode = 0; mode < 3; ++mode) test_grid(2, mode | pad << 2 | align << 4);
      for (int mode = 0; mode < 2; ++mode) test_grid(3, mode | pad << 2 | align << 4);
    }
  test_ctc(0);
  test_ctc(2);
  printf("test_grid_ctc: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
