/* test_index.c — the C op path for indexing, joining, factories and RNG (index.c,
 * shape.c, factory.c, infer.c) against naive loops computed here; run under
 * ASan/UBSan by `make test-sanitize` (index kernels must never touch memory out of
 * bounds, bad indices are statuses reported at sync). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

typedef struct { void* p; tpu_tensor_t t; } dev_t_;

static dev_t_ upload(tpu_dtype_t dt, int ndim, const int64_t* sizes, const void* host) {
  dev_t_ d = {0};
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= sizes[i];
  size_t bytes = (size_t)n * tpu_dtype_size(dt);
  if (bytes) OK(tpu_rt_malloc(0, bytes, &d.p));
  if (host && bytes) OK(tpu_rt_memcpy_h2d(0, d.p, host, bytes));
  d.t = tpu_tensor_contiguous(d.p, 0, dt, ndim, sizes);
  return d;
}
static void download(const dev_t_* d, void* host) {
  size_t bytes = 1;
  int64_t n = 1;
  for (int i = 0; i < d->t.ndim; ++i) n *= d->t.sizes[i];
  bytes = (size_t)n * tpu_dtype_size(d->t.dtype);
  if (bytes) OK(tpu_rt_memcpy_d2h(0, host, d->p, bytes));
}
static void drop(dev_t_* d) { tpu_rt_free(0, d->p); d->p = NULL; }
static tpu_arg_t T(const dev_t_* d) { return tpu_arg_tensor(&d->t); }

static void test_index_select_gather(void) {
  float x[12]; for (int i = 0; i < 12; ++i) x[i] = (float)i;             /* (3, 4) */
  int64_t ix[3] = {3, 0, -1};
  dev_t_ dx = upload(TPU_DTYPE_F32, 2, (int64_t[]){3, 4}, x), di = upload(TPU_DTYPE_I64, 1, (int64_t[]){3}, ix);
  dev_t_ out = upload(TPU_DTYPE_F32, 2, (int64_t[]){3, 3}, NULL);
  tpu_arg_t a[] = {T(&dx), tpu_arg_int(1), T(&di), T(&out)};
  /* index_select rejects negative indices (as PyTorch): error at sync */
  OK(tpu_op_run(0, "aten::index_select.out", a, 4, &out.t, 1));
  tpu_status_t s = tpu_rt_synchronize(0);
  CHECK(tpu_status_code(s) == TPU_STATUS_INDEX_ERROR && strstr(tpu_status_message(s), "out of bounds"), "negative index_select: %s", tpu_status_message(s));
  tpu_status_free(s);
  ix[2] = 2;
  OK(tpu_rt_memcpy_h2d(0, di.p, ix, sizeof ix));
  OK(tpu_op_run(0, "aten::index_select.out", a, 4, &out.t, 1));
  float o[9];
  download(&out, o);
  int ok = 1;
  for (int r = 0; r < 3; ++r) for (int c = 0; c < 3; ++c) ok &= o[r * 3 + c] == x[r * 4 + ix[c]];
  CHECK(ok, "index_select dim 1");
  /* gather dim 1 with a (3, 2) index */
  int64_t gi[6] = {0, 3, 1, 1, 2, 0};
  dev_t_ dg = upload(TPU_DTYPE_I64, 2, (int64_t[]){3, 2}, gi), go = upload(TPU_DTYPE_F32, 2, (int64_t[]){3, 2}, NULL);
  tpu_arg_t b[] = {T(&dx), tpu_arg_int(1), T(&dg), tpu_arg_bool(false), T(&go)};
  OK(tpu_op_run(0, "aten::gather.out", b, 5, &go.t, 1));
  float g[6];
  download(&go, g);
  ok = 1;
  for (int r = 0; r < 3; ++r) for (int c = 0; c < 2; ++c) ok &= g[r * 2 + c] == x[r * 4 + gi[r * 2 + c]];
  CHECK(ok, "gather");
  /* out-of-range gather index: INDEX_ERROR at sync, no out-of-bounds access */
  gi[5] = 4;
  OK(tpu_rt_memcpy_h2d(0, dg.p, gi, sizeof gi));
  OK(tpu_op_run(0, "aten::gather.out", b, 5, &go.t, 1));
  s = tpu_rt_synchronize(0);
  CHECK(tpu_status_code(s) == TPU_STATUS_INDEX_ERROR && strstr(tpu_status_message(s), "index 4 is out of bounds for dimension 1 with size 4"),
        "gather bounds: %s", tpu_status_message(s));
  tpu_status_free(s);
  drop(&dx); drop(&di); drop(&out); drop(&dg); drop(&go);
}

static void test_scatter_reduce(void) {
  float x[4] = {1, 2, 3, 4}, src[5] = {5, -1, 2, 0.5f, 7};
  int64_t ix[5] = {0, 0, 2, 3, 0};
  dev_t_ dx = upload(TPU_DTYPE_F32, 1, (int64_t[]){4}, x), ds = upload(TPU_DTYPE_F32, 1, (int64_t[]){5}, src);
  dev_t_ di = upload(TPU_DTYPE_I64, 1, (int64_t[]){5}, ix), out = upload(TPU_DTYPE_F32, 1, (int64_t[]){4}, NULL);
  const char* reds[] = {"sum", "prod", "amax", "amin", "mean"};
  float want[5][4] = {{1 + 5 - 1 + 7, 2, 3 + 2, 4 + 0.5f}, {1 * 5 * -1 * 7, 2, 6, 2}, {7, 2, 3, 4}, {-1, 2, 2, 0.5f},
                      {(1 + 5 - 1 + 7) / 4.0f, 2, 2.5f, 2.25f}};
  for (int r = 0; r < 5; ++r) {
    tpu_arg_t a[] = {T(&dx), tpu_arg_int(0), T(&di), T(&ds), tpu_arg_string(reds[r]), tpu_arg_bool(true), T(&out)};
    OK(tpu_op_run(0, "aten::scatter_reduce.two_out", a, 7, &out.t, 1));
    float o[4];
    download(&out, o);
    int ok = 1;
    for (int i = 0; i < 4; ++i) ok &= o[i] == want[r][i];
    CHECK(ok, "scatter_reduce %s: %g %g %g %g", reds[r], o[0], o[1], o[2], o[3]);
  }
  drop(&dx); drop(&ds); drop(&di); drop(&out);
}

static void test_advanced_index(void) {
  /* x (2, 3, 4); x[:, [2, 0], [1, 3]] -> (2, 2); x[[1], :, [0, 2]] -> (2, 3) (separated: front) */
  float x[24]; for (int i = 0; i < 24; ++i) x[i] = (float)i;
  int64_t i1[2] = {2, 0}, i2[2] = {1, 3}, j0[1] = {1}, j2[2] = {0, 2};
  dev_t_ dx = upload(TPU_DTYPE_F32, 3, (int64_t[]){2, 3, 4}, x);
  dev_t_ d1 = upload(TPU_DTYPE_I64, 1, (int64_t[]){2}, i1), d2 = upload(TPU_DTYPE_I64, 1, (int64_t[]){2}, i2);
  dev_t_ e0 = upload(TPU_DTYPE_I64, 1, (int64_t[]){1}, j0), e2 = upload(TPU_DTYPE_I64, 1, (int64_t[]){2}, j2);
  tpu_tensor_t list[3] = {{0}, d1.t, d2.t};
  list[0].ndim = -1;
  dev_t_ out = upload(TPU_DTYPE_F32, 2, (int64_t[]){2, 2}, NULL);
  tpu_arg_t la = {0};
  la.kind = TPU_ARG_TENSOR_LIST; la.tensors = list; la.len = 3;
  tpu_arg_t a[] = {T(&dx), la, T(&out)};
  OK(tpu_op_run(0, "aten::index.Tensor_out", a, 3, &out.t, 1));
  float o[6];
  download(&out, o);
  int ok = 1;
  for (int b = 0; b < 2; ++b) for (int k = 0; k < 2; ++k) ok &= o[b * 2 + k] == x[b * 12 + i1[k] * 4 + i2[k]];
  CHECK(ok, "index adjacent");
  tpu_tensor_t list2[3] = {e0.t, {0}, e2.t};
  list2[1].ndim = -1;
  la.tensors = list2;
  dev_t_ out2 = upload(TPU_DTYPE_F32, 2, (int64_t[]){2, 3}, NULL);
  tpu_arg_t b[] = {T(&dx), la, T(&out2)};
  OK(tpu_op_run(0, "aten::index.Tensor_out", b, 3, &out2.t, 1));
  download(&out2, o);
  ok = 1;
  for (int k = 0; k < 2; ++k) for (int m = 0; m < 3; ++m) ok &= o[k * 3 + m] == x[1 * 12 + m * 4 + j2[k]];
  CHECK(ok, "index separated");
  /* index_put_ accumulate with duplicates: x[:, [2, 2], [1, 1]] += 1 */
  i1[1] = 2; i2[1] = 1;
  OK(tpu_rt_memcpy_h2d(0, d1.p, i1, sizeof i1));
  OK(tpu_rt_memcpy_h2d(0, d2.p, i2, sizeof i2));
  float one = 1;
  dev_t_ dv = upload(TPU_DTYPE_F32, 0, NULL, &one);
  la.tensors = list;
  tpu_arg_t c[] = {T(&dx), la, T(&dv), tpu_arg_bool(true), tpu_arg_bool(false)};
  OK(tpu_op_run(0, "aten::_index_put_impl_", c, 5, &dx.t, 1));
  float y[24];
  download(&dx, y);
  CHECK(y[9] == 11 && y[21] == 23 && y[0] == 0, "index_put accumulate: %g %g", y[9], y[21]);
  drop(&dx); drop(&d1); drop(&d2); drop(&e0); drop(&e2); drop(&out); drop(&out2); drop(&dv);
}

/* index_select and index_put(accumulate) over random shapes, contiguous and transposed
 * operands, f32 / i64 / bf16 (the kernels' typed row loops and their strided fallback)
 * against naive loops. x is [R, C] stored row-major or (t) as the transpose of a [C, R]. */
static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }
static dev_t_ upload_2d(tpu_dtype_t dt, int64_t r, int64_t c, int t, const void* rowmajor) {
  /* element (i, j) of the returned view is rowmajor[i * c + j] */
  size_t es = tpu_dtype_size(dt);
  char* buf = malloc((size_t)(r * c) * es + 1);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      memcpy(buf + (size_t)(t ? j * r + i : i * c + j) * es, (const char*)rowmajor + (size_t)(i * c + j) * es, es);
  dev_t_ d = upload(dt, 2, (int64_t[]){r, c}, buf);
  if (t) { d.t.strides[0] = 1; d.t.strides[1] = r; }
  free(buf);
  return d;
}
static double ld(tpu_dtype_t dt, const void* p, int64_t k) {
  if (dt == TPU_DTYPE_F32) return ((const float*)p)[k];
  if (dt == TPU_DTYPE_I64) return (double)((const int64_t*)p)[k];
  uint32_t u = (uint32_t)((const uint16_t*)p)[k] << 16; float f; memcpy(&f, &u, 4); return f;
}
static void st(tpu_dtype_t dt, void* p, int64_t k, double v) {
  if (dt == TPU_DTYPE_F32) ((float*)p)[k] = (float)v;
  else if (dt == TPU_DTYPE_I64) ((int64_t*)p)[k] = (int64_t)v;
  else { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); ((uint16_t*)p)[k] = (uint16_t)(u >> 16); } /* exact: small ints */
}
static void test_index_runs_random(void) {
  const tpu_dtype_t dts[3] = {TPU_DTYPE_F32, TPU_DTYPE_I64, TPU_DTYPE_BF16};
  int bad_sel = 0, bad_put = 0, cases = 0;
  for (int it = 0; it < 24; ++it) {
    tpu_dtype_t dt = dts[it % 3];
    int xt = (it / 3) % 2, vt = (it / 6) % 2;
    int64_t R = 1 + (int64_t)(rnd() % 13), C = 1 + (int64_t)(rnd() % 11), n = 1 + (int64_t)(rnd() % 17);
    size_t es = tpu_dtype_size(dt);
    char* x = malloc((size_t)(R * C) * es); char* v = malloc((size_t)(n * C) * es);
    char* want = malloc((size_t)(R * C) * es); char* got = malloc((size_t)(R * C) * es + (size_t)(n * C) * es);
    int64_t* ix = malloc((size_t)n * 8);
    for (int64_t k = 0; k < R * C; ++k) st(dt, x, k, (double)(int64_t)(rnd() % 64) - 32);
    for (int64_t k = 0; k < n * C; ++k) st(dt, v, k, (double)(int64_t)(rnd() % 16) - 8);
    for (int64_t k = 0; k < n; ++k) ix[k] = (int64_t)(rnd() % (uint64_t)R) - (k % 3 == 0 ? R : 0); /* negatives wrap */
    /* index_select(x, 0, ix) -> [n, C] (index_select rejects negatives: use the wrapped ids) */
    int64_t* pos = malloc((size_t)n * 8);
    for (int64_t k = 0; k < n; ++k) pos[k] = ix[k] < 0 ? ix[k] + R : ix[k];
    dev_t_ dx = upload_2d(dt, R, C, xt, x), dp = upload(TPU_DTYPE_I64, 1, (int64_t[]){n}, pos);
    dev_t_ ds = upload(dt, 2, (int64_t[]){n, C}, NULL);
    tpu_arg_t a[] = {T(&dx), tpu_arg_int(0), T(&dp), T(&ds)};
    OK(tpu_op_run(0, "aten::index_select.out", a, 4, &ds.t, 1));
    download(&ds, got);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < C; ++j) bad_sel += ld(dt, got, k * C + j) != ld(dt, x, pos[k] * C + j);
    /* x.index_put_((ix,), v, accumulate=True); duplicates add up */
    memcpy(want, x, (size_t)(R * C) * es);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < C; ++j) st(dt, want, pos[k] * C + j, ld(dt, want, pos[k] * C + j) + ld(dt, v, k * C + j));
    dev_t_ di = upload(TPU_DTYPE_I64, 1, (int64_t[]){n}, ix), dv = upload_2d(dt, n, C, vt, v);
    tpu_arg_t la = {0};
    la.kind = TPU_ARG_TENSOR_LIST; la.tensors = &di.t; la.len = 1;
    tpu_arg_t b[] = {T(&dx), la, T(&dv), tpu_arg_bool(true), tpu_arg_bool(false)};
    OK(tpu_op_run(0, "aten::_index_put_impl_", b, 5, &dx.t, 1));
    OK(tpu_rt_synchronize(0));
    /* read back through a row-major copy of the (maybe transposed) result */
    dev_t_ dc = upload(dt, 2, (int64_t[]){R, C}, NULL);
    tpu_arg_t c[] = {T(&dc), T(&dx), tpu_arg_bool(false)};
    OK(tpu_op_run(0, "aten::copy_", c, 3, &dc.t, 1));
    download(&dc, got);
    for (int64_t k = 0; k < R * C; ++k) bad_put += ld(dt, got, k) != ld(dt, want, k);
    cases++;
    drop(&dx); drop(&dp); drop(&ds); drop(&di); drop(&dv); drop(&dc);
    free(x); free(v); free(want); free(got); free(ix); free(pos);
  }
  CHECK(bad_sel == 0, "index_select random: %d wrong elements", bad_sel);
  CHECK(bad_put == 0, "index_put accumulate random: %d wrong elements", bad_put);
  CHECK(cases == 24, "cases %d", cases);
}

static void test_nonzero_masked_select(void) {
  uint8_t m[6] = {0, 1, 1, 0, 0, 1};
  float x[6] = {10, 11, 12, 13, 14, 15};
  dev_t_ dm = upload(TPU_DTYPE_BOOL, 2, (int64_t[]){2, 3}, m), dx = upload(TPU_DTYPE_F32, 2, (int64_t[]){2, 3}, x);
  tpu_arg_t a[] = {T(&dm)};
  tpu_tensor_t meta[2];
  int n = 0;
  OK(tpu_op_infer(0, "aten::nonzero", a, 1, meta, 2, &n));
  CHECK(n == 1 && meta[0].ndim == 2 && meta[0].sizes[0] == 3 && meta[0].sizes[1] == 2 && meta[0].dtype == TPU_DTYPE_I64, "nonzero infer");
  dev_t_ out = upload(TPU_DTYPE_I64, 2, (int64_t[]){3, 2}, NULL);
  OK(tpu_op_run(0, "aten::nonzero", a, 1, &out.t, 1));
  int64_t o[6];
  download(&out, o);
  CHECK(o[0] == 0 && o[1] == 1 && o[2] == 0 && o[3] == 2 && o[4] == 1 && o[5] == 2, "nonzero values");
  tpu_arg_t b[] = {T(&dx), T(&dm)};
  OK(tpu_op_infer(0, "aten::masked_select", b, 2, meta, 2, &n));
  CHECK(n == 1 && meta[0].ndim == 1 && meta[0].sizes[0] == 3, "masked_select infer");
  dev_t_ ms = upload(TPU_DTYPE_F32, 1, (int64_t[]){3}, NULL);
  OK(tpu_op_run(0, "aten::masked_select", b, 2, &ms.t, 1));
  float f[3];
  download(&ms, f);
  CHECK(f[0] == 11 && f[1] == 12 && f[2] == 15, "masked_select values");
  drop(&dm); drop(&dx); drop(&out); drop(&ms);
}

static void test_cat_arange_random(void) {
  float a[4] = {1, 2, 3, 4};
  int32_t b[2] = {7, 8};
  dev_t_ da = upload(TPU_DTYPE_F32, 2, (int64_t[]){2, 2}, a), db = upload(TPU_DTYPE_I32, 2, (int64_t[]){2, 1}, b);
  dev_t_ out = upload(TPU_DTYPE_F32, 2, (int64_t[]){2, 3}, NULL);
  tpu_tensor_t list[2] = {da.t, db.t};
  tpu_arg_t la = {0};
  la.kind = TPU_ARG_TENSOR_LIST; la.tensors = list; la.len = 2;
  tpu_arg_t c[] = {la, tpu_arg_int(-1), T(&out)};
  OK(tpu_op_run(0, "aten::cat.out", c, 3, &out.t, 1));
  float o[6];
  download(&out, o);
  CHECK(o[0] == 1 && o[1] == 2 && o[2] == 7 && o[3] == 3 && o[4] == 4 && o[5] == 8, "cat with promotion");
  dev_t_ ar = upload(TPU_DTYPE_I64, 1, (int64_t[]){5}, NULL);
  tpu_arg_t r[] = {tpu_arg_i64(10), tpu_arg_i64(-5), tpu_arg_i64(-3), T(&ar)};
  OK(tpu_op_run(0, "aten::arange.start_out", r, 4, &ar.t, 1));
  int64_t v[5];
  download(&ar, v);
  CHECK(v[0] == 10 && v[4] == -2, "arange negative step: %lld %lld", (long long)v[0], (long long)v[4]);
  /* random_.from(self, from, to): integers in [from, to), reproducible per generator state */
  enum { NR = 1000 };
  dev_t_ rd = upload(TPU_DTYPE_I64, 1, (int64_t[]){NR}, NULL);
  tpu_rt_generator_t* gen = NULL;
  OK(tpu_rt_generator_create(0, 42, &gen));
  tpu_arg_t ga = {0};
  ga.kind = TPU_ARG_GENERATOR; ga.generator = gen;
  tpu_arg_t q[] = {T(&rd), tpu_arg_int(-3), tpu_arg_int(4), ga};
  OK(tpu_op_run(0, "aten::random_.from", q, 4, &rd.t, 1));
  static int64_t s1[NR], s2[NR];
  download(&rd, s1);
  int ok = 1, seen[7] = {0};
  for (int i = 0; i < NR; ++i) { ok &= s1[i] >= -3 && s1[i] < 4; if (ok) seen[s1[i] + 3] = 1; }
  for (int i = 0; i < 7; ++i) ok &= seen[i];
  CHECK(ok, "random_ range");
  tpu_rt_generator_set_seed(gen, 42);
  OK(tpu_op_run(0, "aten::random_.from", q, 4, &rd.t, 1));
  download(&rd, s2);
  CHECK(!memcmp(s1, s2, sizeof s1), "random_ reproducible");
  OK(tpu_op_run(0, "aten::random_.from", q, 4, &rd.t, 1));
  download(&rd, s2);
  CHECK(memcmp(s1, s2, sizeof s1), "random_ advances");
  /* randperm: a permutation */
  tpu_arg_t p[] = {tpu_arg_int(NR), ga, T(&rd)};
  OK(tpu_op_run(0, "aten::randperm.generator_out", p, 3, &rd.t, 1));
  download(&rd, s1);
  static char hit[NR];
  memset(hit, 0, sizeof hit);
  ok = 1;
  for (int i = 0; i < NR; ++i) { ok &= s1[i] >= 0 && s1[i] < NR && !hit[s1[i]]; if (ok) hit[s1[i]] = 1; }
  CHECK(ok, "randperm");
  tpu_rt_generator_destroy(gen);
  drop(&da); drop(&db); drop(&out); drop(&ar); drop(&rd);
}

/* Negative and too-large indices where PyTorch rejects them (gather, scatter, scatter_add,
 * index_add, index_copy): INDEX_ERROR naming the index as given, at sync, nothing written out of
 * bounds (ASan), the queue usable after; index_fill and take wrap negatives as PyTorch. */
static void test_index_bounds(void) {
  float x[12]; for (int i = 0; i < 12; ++i) x[i] = (float)i;             /* (3, 4) */
  float ones[12]; for (int i = 0; i < 12; ++i) ones[i] = 1.0f;
  dev_t_ dx = upload(TPU_DTYPE_F32, 2, (int64_t[]){3, 4}, x), dsrc = upload(TPU_DTYPE_F32, 2, (int64_t[]){3, 4}, ones);
  dev_t_ out = upload(TPU_DTYPE_F32, 2, (int64_t[]){3, 4}, NULL);
  const int64_t bad[4] = {-1, -4, 4, 1000000};
  for (int b = 0; b < 4; ++b) {
    int64_t gi[6] = {0, 1, 2, 3, 1, 0};
    gi[b + 1] = bad[b];
    dev_t_ dg = upload(TPU_DTYPE_I64, 2, (int64_t[]){3, 2}, gi), go = upload(TPU_DTYPE_F32, 2, (int64_t[]){3, 2}, NULL);
    char want[96];
    snprintf(want, sizeof want, "index %lld is out of bounds for dimension 1 with size 4", (long long)bad[b]);
    const char* ops[3] = {"aten::gather.out", "aten::scatter.src_out", "aten::scatter_add.out"};
    for (int k = 0; k < 3; ++k) {
      tpu_arg_t ga[] = {T(&dx), tpu_arg_int(1), T(&dg), tpu_arg_bool(false), T(&go)};
      tpu_arg_t sa[] = {T(&dx), tpu_arg_int(1), T(&dg), T(&dsrc), T(&out)};
      tpu_status_t s = k == 0 ? tpu_op_run(0, ops[k], ga, 5, &go.t, 1) : tpu_op_run(0, ops[k], sa, 5, &out.t, 1);
      if (s == TPU_OK) s = tpu_rt_synchronize(0);
      CHECK(tpu_status_code(s) == TPU_STATUS_INDEX_ERROR && strstr(tpu_status_message(s), want), "%s index %lld: %s",
            ops[k], (long long)bad[b], tpu_status_message(s));
      tpu_status_free(s);
    }
    drop(&dg); drop(&go);
  }
  /* index_add / index_copy along dim 0 with index -1: error; index_fill with -1: wraps to row 2 */
  int64_t ii[1] = {-1};
  dev_t_ di = upload(TPU_DTYPE_I64, 1, (int64_t[]){1}, ii), drow = upload(TPU_DTYPE_F32, 2, (int64_t[]){1, 4}, ones);
  tpu_arg_t aa[] = {T(&dx), tpu_arg_int(0), T(&di), T(&drow), tpu_arg_f64(1.0), T(&out)};
  tpu_status_t s = tpu_op_run(0, "aten::index_add.out", aa, 6, &out.t, 1);
  if (s == TPU_OK) s = tpu_rt_synchronize(0);
  CHECK(tpu_status_code(s) == TPU_STATUS_INDEX_ERROR && strstr(tpu_status_message(s), "index -1 is out of bounds for dimension 0 with size 3"),
        "index_add -1: %s", tpu_status_message(s));
  tpu_status_free(s);
  tpu_arg_t ca[] = {T(&dx), tpu_arg_int(0), T(&di), T(&drow), T(&out)};
  s = tpu_op_run(0, "aten::index_copy.out", ca, 5, &out.t, 1);
  if (s == TPU_OK) s = tpu_rt_synchronize(0);
  CHECK(tpu_status_code(s) == TPU_STATUS_INDEX_ERROR, "index_copy -1: %s", tpu_status_message(s));
  tpu_status_free(s);
  OK(tpu_rt_memcpy_h2d(0, out.p, x, sizeof x));
  tpu_arg_t fa[] = {T(&out), tpu_arg_int(0), T(&di), tpu_arg_f64(-7.0)};
  OK(tpu_op_run(0, "aten::index_fill_.int_Scalar", fa, 4, &out.t, 1));
  float o[12];
  download(&out, o);
  int ok = 1;
  for (int i = 0; i < 12; ++i) ok &= o[i] == (i >= 8 ? -7.0f : x[i]);
  CHECK(ok, "index_fill -1 wraps to the last row");
  drop(&dx); drop(&dsrc); drop(&out); drop(&di); drop(&drow);
}

int main(void) {
  OK(tpu_rt_init());
  test_index_bounds();
  test_index_select_gather();
  test_scatter_reduce();
  test_advanced_index();
  test_index_runs_random();
  test_nonzero_masked_select();
  test_cat_arange_random();
  OK(tpu_rt_synchronize(0));
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
