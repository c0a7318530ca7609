/* test_norm.c — the channel statistics / affine kernels of batch and group norm
 * (drivers/host/norm.c) against their _ref twin on random shapes, layouts and dtypes (A = 1 with many channels:
 * the statistics' blocks of one-run channels). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/norm.h"

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
    if (it >= 120) { A = 1; B = irand(60, 200); I = irand(14, 40); } /* group norm's [1, N*G, n]: blocks of runs */
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

int main(void) {
  srand(7);
  test_random();
  test_errors();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail != 0;
}
