/* test_embed.c — embedding_bag sum / mean host kernels (custom EMBEDDING_BAG / EMBEDDING_BAG_BWD, ir.h,
 * drivers/host/embed.c) against naive double references written from PyTorch's definition: random odd sizes,
 * unsorted and repeated offsets, empty bags, padding_idx, per-sample weights, include_last_offset, i32 ids, a
 * transposed table, bf16 / f64 tables; the run-time errors (offsets[0], offsets out of range, ids out of range,
 * offset2bag out of range). Run under ASan/UBSan by `make test-sanitize`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "drivers/host/host.h"
#include "ir/ir.h"
#include "runtime/runtime.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }
static double frand(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1; }

static tpu_host_view_t view(void* p, int dt, int rank, int64_t d0, int64_t d1, int64_t s0, int64_t s1) {
  tpu_host_view_t v = {0};
  v.data = p; v.dtype = dt; v.rank = rank; v.sizes[0] = d0; v.sizes[1] = d1; v.strides[0] = s0; v.strides[1] = s1;
  return v;
}
static tpu_ir_op_t custom(int target, int64_t i1, int64_t pad) {
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = target; op.i1 = i1; op.a[0][0] = pad;
  return op;
}
/* runs one op that must succeed */
static void run_ok(int target, int64_t i1, int64_t pad, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out,
                   int it, const char* what) {
  tpu_ir_op_t op = custom(target, i1, pad);
  tpu_status_t st = tpu_host_k_custom(&op, n, xs, out);
  CHECK(st == TPU_OK, "case %d %s: %s", it, what, st ? tpu_status_message(st) : "");
  tpu_status_free(st);
}
static int64_t ld_idx(const void* p, int i32, int64_t i) { return i32 ? ((const int32_t*)p)[i] : ((const int64_t*)p)[i]; }

/* one random case: table [nw, D] (f32 / bf16 / f64, optionally transposed), N ids, B bags */
static void run_case(int it) {
  const int64_t nw = 1 + (int64_t)(rnd() % 40), D = 1 + (int64_t)(rnd() % 19), B = (int64_t)(rnd() % 9);
  const int mean = (int)(rnd() % 2), psw = !mean && rnd() % 2, last = (int)(rnd() % 2), i32 = (int)(rnd() % 2);
  const int wdt = it % 3 == 0 ? TPU_DTYPE_F32 : it % 3 == 1 ? TPU_DTYPE_BF16 : TPU_DTYPE_F64, trans = (int)(rnd() % 2);
  const int64_t pad = rnd() % 3 ? (int64_t)(rnd() % nw) : -1, no = B + last;
  int64_t N = 0, *offs = calloc((size_t)no + 1, 8);
  for (int64_t k = 0; k < no; ++k) { offs[k] = k ? offs[k - 1] + (int64_t)(rnd() % 4) : 0; N = offs[k]; }
  N += (int64_t)(rnd() % 4);
  if (no > 2 && rnd() % 3 == 0) offs[1] = offs[no - 1]; /* unsorted: a later offset early */
  const size_t wes = tpu_dtype_size(wdt);
  char* w = malloc((size_t)(nw * D) * wes);
  double* wv = malloc((size_t)(nw * D) * 8);
  for (int64_t r = 0; r < nw; ++r)
    for (int64_t d = 0; d < D; ++d) { /* element (r, d) at r * D + d, or d * nw + r when transposed */
      const int64_t at = trans ? d * nw + r : r * D + d;
      tpu_host_store_f64(w + at * (int64_t)wes, wdt, frand());
      wv[r * D + d] = tpu_host_load_f64(w + at * (int64_t)wes, wdt);
    }
  void* ids = malloc((size_t)(N ? N : 1) * 8);
  void* offv = malloc((size_t)(no ? no : 1) * 8);
  for (int64_t i = 0; i < N; ++i) {
    int64_t k = (i % 5 == 4 && pad >= 0) ? pad : (int64_t)(rnd() % nw);
    if (i32) ((int32_t*)ids)[i] = (int32_t)k; else ((int64_t*)ids)[i] = k;
  }
  for (int64_t k = 0; k < no; ++k) { if (i32) ((int32_t*)offv)[k] = (int32_t)offs[k]; else ((int64_t*)offv)[k] = offs[k]; }
  double* pw = malloc((size_t)(N ? N : 1) * 8);
  float* pwf = malloc((size_t)(N ? N : 1) * 4);
  for (int64_t i = 0; i < N; ++i) { pwf[i] = (float)(frand() + 1.5); pw[i] = wdt == TPU_DTYPE_F64 ? pwf[i] : pwf[i]; }
  /* reference bags: count of the first B offsets at or before i, minus 1 */
  int64_t *bag = malloc((size_t)(N ? N : 1) * 8), *size = calloc((size_t)(B ? B : 1), 8);
  for (int64_t i = 0; i < N; ++i) {
    int64_t c = 0;
    for (int64_t k = 0; k < B; ++k) c += offs[k] <= i;
    bag[i] = c - 1;
    if (c > 0 && ld_idx(ids, i32, i) != pad) size[c - 1]++;
  }
  const int idt = i32 ? TPU_DTYPE_I32 : TPU_DTYPE_I64, mdt = wdt == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
  tpu_host_view_t xs[5];
  xs[0] = trans ? view(w, wdt, 2, nw, D, 1, nw) : view(w, wdt, 2, nw, D, D, 1);
  xs[1] = view(ids, idt, 1, N, 0, 1, 0);
  xs[2] = view(offv, idt, 1, no, 0, 1, 0);
  /* psw in the table's math dtype */
  double* pwd = malloc((size_t)(N ? N : 1) * 8);
  for (int64_t i = 0; i < N; ++i) pwd[i] = pwf[i];
  xs[3] = mdt == TPU_DTYPE_F64 ? view(pwd, TPU_DTYPE_F64, 1, N, 0, 1, 0) : view(pwf, TPU_DTYPE_F32, 1, N, 0, 1, 0);
  const int64_t i1 = mean | (psw ? 4 : 0) | (last ? 8 : 0);
  /* offset2bag (the bags, found once) and bag_size from it */
  int64_t o2b[64], bs[16];
  tpu_host_view_t o2v = view(o2b, TPU_DTYPE_I64, 1, N, 0, 1, 0), bsv = view(bs, TPU_DTYPE_I64, 1, no, 0, 1, 0);
  run_ok(TPU_IR_CUSTOM_EMBEDDING_BAG, i1 | 16, pad, 2, xs + 1, &o2v, it, "offset2bag");
  tpu_host_view_t sx[3] = {xs[1], o2v, xs[2]};
  run_ok(TPU_IR_CUSTOM_EMBEDDING_BAG, i1 | 32, pad, 3, sx, &bsv, it, "bag_size");
  for (int64_t i = 0; i < N; ++i) CHECK(o2b[i] == (bag[i] > 0 ? bag[i] : 0), "case %d offset2bag[%lld]", it, (long long)i);
  for (int64_t b = 0; b < no; ++b) CHECK(bs[b] == (b < B ? size[b] : 0), "case %d bag_size[%lld]", it, (long long)b);
  /* forward rows, in the table's dtype, from (weight, ids, offset2bag, psw) */
  char* out = malloc((size_t)(B * D > 0 ? B * D : 1) * wes);
  tpu_host_view_t ov = view(out, wdt, 2, B, D, D, 1), rx[4] = {xs[0], xs[1], o2v, xs[3]};
  run_ok(TPU_IR_CUSTOM_EMBEDDING_BAG, i1, pad, 3 + psw, rx, &ov, it, "forward");
  const double tol = wdt == TPU_DTYPE_BF16 ? 1e-2 : wdt == TPU_DTYPE_F32 ? 1e-5 : 1e-12;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < D; ++d) {
      double s = 0;
      for (int64_t i = 0; i < N; ++i)
        if (bag[i] == b && ld_idx(ids, i32, i) != pad) s += wv[ld_idx(ids, i32, i) * D + d] * (psw ? pw[i] : 1);
      if (mean && wdt == TPU_DTYPE_BF16) s = tpu_bf16_to_f32(tpu_f32_to_bf16((float)s)); /* PyTorch's: sum rounded first */
      if (mean) s /= (double)(size[b] > 1 ? size[b] : 1);
      const double got = tpu_host_load_f64(out + (b * D + d) * (int64_t)wes, wdt);
      CHECK(fabs(got - s) <= tol * (1 + fabs(s)), "case %d rows (%lld, %lld): %g vs %g", it, (long long)b, (long long)d, got, s);
    }
  /* max: max_indices from (weight, ids, offset2bag), then the rows they name (0 where bag_size is 0) */
  int64_t* mi = malloc((size_t)(B * D > 0 ? B * D : 1) * 8);
  char* mout = malloc((size_t)(B * D > 0 ? B * D : 1) * wes);
  tpu_host_view_t miv = view(mi, TPU_DTYPE_I64, 2, B, D, D, 1), mov = view(mout, wdt, 2, B, D, D, 1);
  tpu_host_view_t mx[3] = {xs[0], xs[1], o2v};
  run_ok(TPU_IR_CUSTOM_EMBEDDING_BAG, 2 | (last ? 8 : 0) | 48, pad, 3, mx, &miv, it, "max_indices");
  tpu_host_view_t mr[3] = {xs[0], miv, bsv};
  run_ok(TPU_IR_CUSTOM_EMBEDDING_BAG, 2 | (last ? 8 : 0), pad, 3, mr, &mov, it, "max rows");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < D; ++d) {
      int64_t k = 0;
      double m = 0;
      int first = 1;
      for (int64_t i = 0; i < N; ++i) {
        const int64_t id = ld_idx(ids, i32, i);
        if (bag[i] != b || id == pad) continue;
        if (first || wv[id * D + d] > m) { m = wv[id * D + d]; k = id; }
        first = 0;
      }
      CHECK(mi[b * D + d] == k, "case %d max_indices (%lld, %lld): %lld vs %lld", it, (long long)b, (long long)d,
            (long long)mi[b * D + d], (long long)k);
      CHECK(tpu_host_load_f64(mout + (b * D + d) * (int64_t)wes, wdt) == m, "case %d max (%lld, %lld)", it, (long long)b, (long long)d);
    }
  /* backward: weight grad and per-sample-weight grad from a random grad [B, D] in the math dtype */
  const int scale = !psw && rnd() % 2;
  double* g = malloc((size_t)(B * D > 0 ? B * D : 1) * 8);
  float* gf = malloc((size_t)(B * D > 0 ? B * D : 1) * 4);
  for (int64_t j = 0; j < B * D; ++j) { gf[j] = (float)frand(); g[j] = gf[j]; }
  const int f64 = mdt == TPU_DTYPE_F64;
  tpu_host_view_t bx[5] = {f64 ? view(g, mdt, 2, B, D, D, 1) : view(gf, mdt, 2, B, D, D, 1), xs[1], o2v, bsv, xs[3]};
  double* dw = malloc((size_t)(nw * D) * 8);
  tpu_host_view_t dwv = view(dw, mdt, 2, nw, D, D, 1);
  run_ok(TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, mean | (psw ? 4 : 0) | (scale ? 8 : 0), pad, 4 + psw, bx, &dwv, it, "backward");
  for (int64_t r = 0; r < nw; ++r)
    for (int64_t d = 0; d < D; ++d) {
      double s = 0, cnt = 0;
      for (int64_t i = 0; i < N; ++i) cnt += ld_idx(ids, i32, i) == r;
      for (int64_t i = 0; i < N; ++i)
        if (ld_idx(ids, i32, i) == r && r != pad && B > 0) {
          double v = g[o2b[i] * D + d];
          if (mean) v /= (double)(bs[o2b[i]] > 1 ? bs[o2b[i]] : 1);
          if (psw) v *= pw[i];
          if (scale) v /= cnt;
          s += v;
        }
      const double got = f64 ? dw[r * D + d] : ((float*)dw)[r * D + d];
      CHECK(fabs(got - s) <= 1e-5 * (1 + fabs(s)), "case %d d weight (%lld, %lld): %g vs %g", it, (long long)r, (long long)d, got, s);
    }
  { /* max backward: grad[b, d] to row max_indices[b, d] for bags with bag_size > 0, in bag order */
    tpu_host_view_t xb[3] = {bx[0], miv, bsv};
    run_ok(TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, 2, pad, 3, xb, &dwv, it, "max backward");
    for (int64_t r = 0; r < nw; ++r)
      for (int64_t d = 0; d < D; ++d) {
        double s = 0;
        for (int64_t b = 0; b < B; ++b)
          if (bs[b] > 0 && mi[b * D + d] == r) s += g[b * D + d];
        const double got = f64 ? dw[r * D + d] : ((float*)dw)[r * D + d];
        CHECK(fabs(got - s) <= 1e-5 * (1 + fabs(s)), "case %d max d weight (%lld, %lld): %g vs %g", it, (long long)r, (long long)d, got, s);
      }
  }
  if (B > 0) {
    double dp[64];
    tpu_host_view_t px[4] = {bx[0], xs[0], xs[1], o2v}, dpv = view(dp, TPU_DTYPE_F64, 1, N, 0, 1, 0);
    run_ok(TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, 16, pad, 4, px, &dpv, it, "psw backward");
    for (int64_t i = 0; i < N; ++i) {
      double s = 0;
      const int64_t k = ld_idx(ids, i32, i);
      if (k != pad) for (int64_t d = 0; d < D; ++d) s += g[o2b[i] * D + d] * wv[k * D + d];
      CHECK(fabs(dp[i] - s) <= 1e-5 * (1 + fabs(s)), "case %d d psw[%lld]: %g vs %g", it, (long long)i, dp[i], s);
    }
  }
  free(offs); free(w); free(wv); free(ids); free(offv); free(pw); free(pwf); free(pwd); free(bag); free(size);
  free(out); free(g); free(gf); free(dw); free(mi); free(mout);
}

/* the run-time errors: PyTorch's messages, no out-of-bounds access */
static void expect_error(int target, int64_t i1, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out,
                         tpu_status_code_t code, const char* msg) {
  tpu_ir_op_t op = custom(target, i1, -1);
  tpu_status_t st = tpu_host_k_custom(&op, n, xs, out);
  CHECK(st != TPU_OK && tpu_status_code(st) == code && strstr(tpu_status_message(st), msg),
        "expected '%s', got '%s'", msg, st ? tpu_status_message(st) : "ok");
  tpu_status_free(st);
}
static void test_errors(void) {
  float w[12] = {0}, out[6], dw[12];
  int64_t ids[3] = {1, 2, 3}, off[2] = {0, 2}, bad_off0[2] = {2, 2}, bad_off[2] = {0, 4}, bad_ids[3] = {1, 4, 0};
  int64_t o2b[3] = {0, 0, 1}, bad_o2b[3] = {0, 2, 1}, bs[2] = {2, 1}, o2b_out[3];
  tpu_host_view_t xs[3] = {view(w, TPU_DTYPE_F32, 2, 4, 3, 3, 1), view(ids, TPU_DTYPE_I64, 1, 3, 0, 1, 0),
                           view(off, TPU_DTYPE_I64, 1, 2, 0, 1, 0)};
  tpu_host_view_t ov = view(out, TPU_DTYPE_F32, 2, 2, 3, 3, 1), o2v = view(o2b_out, TPU_DTYPE_I64, 1, 3, 0, 1, 0);
  xs[2].data = (char*)bad_off0;
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG, 16, 2, xs + 1, &o2v, TPU_STATUS_INVALID_ARGUMENT,
               "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. However, got 2");
  xs[2].data = (char*)bad_off;
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG, 16, 2, xs + 1, &o2v, TPU_STATUS_INVALID_ARGUMENT, "offsets[1] = 4 is outside [0, 3]");
  xs[2].data = (char*)bad_off; /* include_last_offset: offsets[-1] = 4 > N = 3 (every mode: max too) */
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG, 2 | 8 | 16, 2, xs + 1, &o2v, TPU_STATUS_INVALID_ARGUMENT,
               "offsets[-1] can not be greater than input's length 3 but got offsets[-1] of 4");
  xs[2].data = (char*)o2b; xs[2].sizes[0] = 3; xs[1].data = (char*)bad_ids; /* rows: (weight, ids, offset2bag) */
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG, 1, 3, xs, &ov, TPU_STATUS_INVALID_ARGUMENT,
               "Index 1 of input takes value 4 which is not in the valid range [0, 4)");
  int64_t mi[6];
  tpu_host_view_t miv = view(mi, TPU_DTYPE_I64, 2, 2, 3, 3, 1);
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG, 2 | 48, 3, xs, &miv, TPU_STATUS_INVALID_ARGUMENT,
               "embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be 4");
  xs[1].data = (char*)ids; xs[2].data = (char*)bad_o2b; /* an offset2bag EMBEDDING_BAG did not make */
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG, 0, 3, xs, &ov, TPU_STATUS_INTERNAL, "offset2bag not from EMBEDDING_BAG");
  tpu_host_view_t bx[4] = {view(out, TPU_DTYPE_F32, 2, 2, 3, 3, 1), view(ids, TPU_DTYPE_I64, 1, 3, 0, 1, 0),
                           view(bad_o2b, TPU_DTYPE_I64, 1, 3, 0, 1, 0), view(bs, TPU_DTYPE_I64, 1, 2, 0, 1, 0)};
  tpu_host_view_t dv = view(dw, TPU_DTYPE_F32, 2, 4, 3, 3, 1);
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, 1, 4, bx, &dv, TPU_STATUS_INVALID_ARGUMENT,
               "Index 1 of input takes value 2 which is not in the valid range [0, 2)");
  bx[2].data = (char*)o2b; bx[1].data = (char*)bad_ids;
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, 0, 4, bx, &dv, TPU_STATUS_INDEX_ERROR,
               "index 4 is out of bounds for dimension 0 with size 4");
  bx[1].data = (char*)ids; bx[0].sizes[1] = 2; /* malformed: grad's row size differs from the result's */
  expect_error(TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, 0, 4, bx, &dv, TPU_STATUS_INTERNAL, "EMBEDDING_BAG_BWD operands");
}

/* a case large enough to split over the pool: the same bits with one thread and with four (forward rows and
 * max_indices split bags, the weight gradient splits table rows; each element sums in id order either way) */
static void run_big(int64_t i1, int bwd, void* out, size_t bytes) {
  enum { NW = 301, D = 37, B = 500, N = 2600 };
  static float w[NW * D], g[B * D];
  static int64_t ids[N], off[B], o2b[N], bs[B], mi[B * D];
  uint64_t keep = g_rng;
  g_rng = 12345;
  for (int j = 0; j < NW * D; ++j) w[j] = (float)frand();
  for (int j = 0; j < B * D; ++j) g[j] = (float)frand();
  for (int i = 0; i < N; ++i) ids[i] = (int64_t)(rnd() % NW);
  for (int b = 0; b < B; ++b) off[b] = b ? off[b - 1] + (int64_t)(rnd() % 10) : 0;
  g_rng = keep;
  tpu_host_view_t W = view(w, TPU_DTYPE_F32, 2, NW, D, D, 1), I = view(ids, TPU_DTYPE_I64, 1, N, 0, 1, 0);
  tpu_host_view_t O = view(off, TPU_DTYPE_I64, 1, B, 0, 1, 0), O2 = view(o2b, TPU_DTYPE_I64, 1, N, 0, 1, 0);
  tpu_host_view_t BS = view(bs, TPU_DTYPE_I64, 1, B, 0, 1, 0), MI = view(mi, TPU_DTYPE_I64, 2, B, D, D, 1);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_EMBEDDING_BAG, (i1 & 3) | 16, 7);
  tpu_status_t st = tpu_host_k_custom(&op, 2, (tpu_host_view_t[]){I, O}, &O2);
  op.i1 = (i1 & 3) | 32;
  if (!st) st = tpu_host_k_custom(&op, 3, (tpu_host_view_t[]){I, O2, O}, &BS);
  op.i1 = 2 | 48;
  if (!st) st = tpu_host_k_custom(&op, 3, (tpu_host_view_t[]){W, I, O2}, &MI);
  tpu_host_view_t res = bwd ? view(out, TPU_DTYPE_F32, 2, NW, D, D, 1) : view(out, TPU_DTYPE_F32, 2, B, D, D, 1);
  op = custom(bwd ? TPU_IR_CUSTOM_EMBEDDING_BAG_BWD : TPU_IR_CUSTOM_EMBEDDING_BAG, i1, 7);
  tpu_host_view_t G = view(g, TPU_DTYPE_F32, 2, B, D, D, 1);
  if (!st && bwd) st = (i1 & 3) == 2 ? tpu_host_k_custom(&op, 3, (tpu_host_view_t[]){G, MI, BS}, &res)
                                     : tpu_host_k_custom(&op, 4, (tpu_host_view_t[]){G, I, O2, BS}, &res);
  if (!st && !bwd) st = (i1 & 3) == 2 ? tpu_host_k_custom(&op, 3, (tpu_host_view_t[]){W, MI, BS}, &res)
                                      : tpu_host_k_custom(&op, 3, (tpu_host_view_t[]){W, I, O2}, &res);
  CHECK(st == TPU_OK, "big case i1 %lld: %s", (long long)i1, st ? tpu_status_message(st) : "");
  tpu_status_free(st);
  (void)bytes;
}
static void test_threads(void) {
  static const int64_t modes[][2] = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}, {8, 1}};
  const size_t bytes = (size_t)301 * 37 * 4 > (size_t)500 * 37 * 4 ? (size_t)301 * 37 * 4 : (size_t)500 * 37 * 4;
  void *one = malloc(bytes), *four = malloc(bytes);
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; ++m) {
    memset(one, 0xab, bytes); memset(four, 0xcd, bytes);
    tpu_pool_init(1);
    run_big(modes[m][0], (int)modes[m][1], one, bytes);
    tpu_pool_init(4);
    run_big(modes[m][0], (int)modes[m][1], four, bytes);
    const size_t used = (size_t)(modes[m][1] ? 301 : 500) * 37 * 4;
    CHECK(memcmp(one, four, used) == 0, "i1 %lld bwd %lld: 1 and 4 threads differ", (long long)modes[m][0], (long long)modes[m][1]);
  }
  free(one); free(four);
}

int main(void) {
  (void)tpu_pool_num_threads(); /* the runtime's lazy sizing first, so tpu_pool_init below holds */
  tpu_pool_init(1);
  for (int it = 0; it < 300; ++it) run_case(it);
  tpu_pool_init(3); /* the random cases again, split where they are large enough */
  for (int it = 0; it < 300; ++it) run_case(it);
  test_threads();
  test_errors();
  printf("test_embed: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
