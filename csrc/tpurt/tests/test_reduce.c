/* test_reduce.c — reduction and matmul lowerings through tpu_op_run, against naive
 * loops computed here: values, the structural norm order in the cache key, beta == 0
 * ignoring NaN, and error messages in PyTorch's wording (the Python tests see most
 * shape errors from PyTorch's meta functions first, so they are checked here). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

/* A device f32 tensor filled from host data (NULL: uninitialized). */
typedef struct { void* dev; tpu_tensor_t t; size_t bytes; } buf_t;
static buf_t fbuf(int ndim, const int64_t* sizes, const float* data) {
  buf_t b;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  b.bytes = (size_t)n * sizeof(float);
  b.dev = NULL;
  OK(tpu_rt_malloc(0, b.bytes, &b.dev));
  if (data && b.bytes) OK(tpu_rt_memcpy_h2d(0, b.dev, data, b.bytes));
  b.t = tpu_tensor_contiguous(b.dev, 0, TPU_DTYPE_F32, ndim, sizes);
  return b;
}
static void fread_(buf_t* b, float* out) { OK(tpu_rt_memcpy_d2h(0, out, b->dev, b->bytes)); }
static void ffree(buf_t* b) { tpu_rt_free(0, b->dev); }
static int close_(float a, float b) { return fabsf(a - b) <= 1e-5f + 1e-5f * fabsf(b); }

/* Expects tpu_op_run to fail with `code` and a message containing `msg`. */
static void expect_error(const char* op, const tpu_arg_t* args, int nargs, const tpu_tensor_t* outs, int nouts,
                         tpu_status_code_t code, const char* msg) {
  tpu_status_t s = tpu_op_run(0, op, args, nargs, outs, nouts);
  CHECK(s && tpu_status_code(s) == code && strstr(tpu_status_message(s), msg), "%s: want [%s] %s, got [%s] %s", op,
        tpu_status_code_name(code), msg, tpu_status_code_name(tpu_status_code(s)), tpu_status_message(s));
  tpu_status_free(s);
}

static float x34[12];

static void test_sum_mean_keepdim(void) {
  buf_t x = fbuf(2, (int64_t[]){3, 4}, x34), o = fbuf(2, (int64_t[]){3, 1}, NULL);
  int64_t dim[1] = {-1};
  tpu_arg_t args[] = {tpu_arg_tensor(&x.t), tpu_arg_int_list(dim, 1), tpu_arg_bool(true), tpu_arg_none(), tpu_arg_tensor(&o.t)};
  OK(tpu_op_run(0, "aten::sum.IntList_out", args, 5, &o.t, 1));
  float r[3];
  fread_(&o, r);
  int ok = 1;
  for (int i = 0; i < 3; ++i) { float s = 0; for (int j = 0; j < 4; ++j) s += x34[i * 4 + j]; ok &= close_(r[i], s); }
  CHECK(ok, "sum keepdim");
  OK(tpu_op_run(0, "aten::mean.out", args, 5, &o.t, 1));
  fread_(&o, r);
  ok = 1;
  for (int i = 0; i < 3; ++i) { float s = 0; for (int j = 0; j < 4; ++j) s += x34[i * 4 + j]; ok &= close_(r[i], s / 4); }
  CHECK(ok, "mean keepdim");
  int64_t dup[2] = {1, -1};
  args[1] = tpu_arg_int_list(dup, 2);
  expect_error("aten::sum.IntList_out", args, 5, &o.t, 1, TPU_STATUS_INVALID_ARGUMENT, "dim 1 appears multiple times in the list of dims");
  int64_t bad[1] = {2};
  args[1] = tpu_arg_int_list(bad, 1);
  expect_error("aten::sum.IntList_out", args, 5, &o.t, 1, TPU_STATUS_INDEX_ERROR,
               "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  ffree(&x); ffree(&o);
}

/* The norm order selects the algorithm: it must be part of the cache key. */
static void test_norm_order_keyed(void) {
  buf_t x = fbuf(2, (int64_t[]){3, 4}, x34), o = fbuf(1, (int64_t[]){3}, NULL);
  int64_t dim[1] = {1};
  double ords[] = {2.0, INFINITY, 1.0, 0.0, 3.0, -INFINITY, 2.0};
  for (int k = 0; k < (int)(sizeof ords / sizeof ords[0]); ++k) {
    tpu_arg_t args[] = {tpu_arg_tensor(&x.t), tpu_arg_f64(ords[k]), tpu_arg_int_list(dim, 1), tpu_arg_bool(false),
                        tpu_arg_none(), tpu_arg_tensor(&o.t)};
    OK(tpu_op_run(0, "aten::linalg_vector_norm.out", args, 6, &o.t, 1));
    float r[3];
    fread_(&o, r);
    int ok = 1;
    for (int i = 0; i < 3; ++i) {
      double acc = ords[k] == INFINITY ? 0 : ords[k] == -INFINITY ? INFINITY : 0;
      for (int j = 0; j < 4; ++j) {
        double a = fabs(x34[i * 4 + j]);
        if (ords[k] == INFINITY) acc = fmax(acc, a);
        else if (ords[k] == -INFINITY) acc = fmin(acc, a);
        else if (ords[k] == 0) acc += a != 0;
        else acc += pow(a, ords[k]);
      }
      if (!isinf(ords[k]) && ords[k] != 0) acc = pow(acc, 1.0 / ords[k]);
      ok &= close_(r[i], (float)acc);
    }
    CHECK(ok, "vector_norm ord %g", ords[k]);
  }
  buf_t e = fbuf(2, (int64_t[]){0, 3}, NULL), eo = fbuf(0, NULL, NULL);
  tpu_arg_t args[] = {tpu_arg_tensor(&e.t), tpu_arg_f64(INFINITY), tpu_arg_none(), tpu_arg_bool(false), tpu_arg_none(),
                      tpu_arg_tensor(&eo.t)};
  expect_error("aten::linalg_vector_norm.out", args, 6, &eo.t, 1, TPU_STATUS_INVALID_ARGUMENT,
               "linalg.vector_norm cannot compute the inf norm on an empty tensor because the operation does not have an identity");
  args[1] = tpu_arg_i64(-1);
  expect_error("aten::linalg_vector_norm.out", args, 6, &eo.t, 1, TPU_STATUS_INVALID_ARGUMENT,
               "cannot compute the -1 norm on an empty tensor");
  ffree(&x); ffree(&o); ffree(&e); ffree(&eo);
}

static void test_max_argmax_var(void) {
  buf_t x = fbuf(2, (int64_t[]){3, 4}, x34), v = fbuf(1, (int64_t[]){4}, NULL);
  void* idev = NULL;
  OK(tpu_rt_malloc(0, 4 * sizeof(int64_t), &idev));
  tpu_tensor_t it = tpu_tensor_contiguous(idev, 0, TPU_DTYPE_I64, 1, (int64_t[]){4});
  tpu_tensor_t outs[2] = {v.t, it};
  tpu_arg_t args[] = {tpu_arg_tensor(&x.t), tpu_arg_int(0), tpu_arg_bool(false), tpu_arg_tensor(&v.t), tpu_arg_tensor(&it)};
  OK(tpu_op_run(0, "aten::max.dim_max", args, 5, outs, 2));
  float r[4]; int64_t ix[4];
  fread_(&v, r);
  OK(tpu_rt_memcpy_d2h(0, ix, idev, sizeof ix));
  int ok = 1;
  for (int j = 0; j < 4; ++j) {
    int best = 0;
    for (int i = 1; i < 3; ++i) if (x34[i * 4 + j] > x34[best * 4 + j]) best = i;
    ok &= r[j] == x34[best * 4 + j] && ix[j] == best;
  }
  CHECK(ok, "max.dim_max values and indices");
  /* argmax over the flattened input */
  tpu_tensor_t i0 = tpu_tensor_contiguous(idev, 0, TPU_DTYPE_I64, 0, NULL);
  tpu_arg_t aargs[] = {tpu_arg_tensor(&x.t), tpu_arg_none(), tpu_arg_bool(false), tpu_arg_tensor(&i0)};
  OK(tpu_op_run(0, "aten::argmax.out", aargs, 4, &i0, 1));
  OK(tpu_rt_memcpy_d2h(0, ix, idev, sizeof(int64_t)));
  int best = 0;
  for (int i = 1; i < 12; ++i) if (x34[i] > x34[best]) best = i;
  CHECK(ix[0] == best, "argmax flattened: %lld vs %d", (long long)ix[0], best);
  /* var over dim 0 with correction 0.5 (a runtime scalar) */
  int64_t d0[1] = {0};
  tpu_arg_t vargs[] = {tpu_arg_tensor(&x.t), tpu_arg_int_list(d0, 1), tpu_arg_f64(0.5), tpu_arg_bool(false), tpu_arg_tensor(&v.t)};
  OK(tpu_op_run(0, "aten::var.correction_out", vargs, 5, &v.t, 1));
  fread_(&v, r);
  ok = 1;
  for (int j = 0; j < 4; ++j) {
    double m = 0, ss = 0;
    for (int i = 0; i < 3; ++i) m += x34[i * 4 + j];
    m /= 3;
    for (int i = 0; i < 3; ++i) ss += (x34[i * 4 + j] - m) * (x34[i * 4 + j] - m);
    ok &= close_(r[j], (float)(ss / 2.5));
  }
  CHECK(ok, "var correction 0.5");
  /* empty reductions without identity */
  buf_t e = fbuf(2, (int64_t[]){0, 4}, NULL);
  tpu_arg_t eargs[] = {tpu_arg_tensor(&e.t), tpu_arg_int(0), tpu_arg_bool(false), tpu_arg_tensor(&v.t), tpu_arg_tensor(&it)};
  expect_error("aten::max.dim_max", eargs, 5, outs, 2, TPU_STATUS_INDEX_ERROR, "max(): Expected reduction dim 0 to have non-zero size.");
  tpu_arg_t margs[] = {tpu_arg_tensor(&e.t), tpu_arg_int_list(d0, 1), tpu_arg_bool(false), tpu_arg_tensor(&v.t)};
  expect_error("aten::amax.out", margs, 4, &v.t, 1, TPU_STATUS_INDEX_ERROR, "amax(): Expected reduction dim 0 to have non-zero size.");
  tpu_tensor_t s0 = tpu_tensor_contiguous(v.dev, 0, TPU_DTYPE_F32, 0, NULL);
  tpu_arg_t fargs[] = {tpu_arg_tensor(&e.t)};
  expect_error("aten::max", fargs, 1, &s0, 1, TPU_STATUS_INVALID_ARGUMENT,
               "max(): Expected reduction dim to be specified for input.numel() == 0.");
  ffree(&x); ffree(&v); ffree(&e); tpu_rt_free(0, idev);
}

static void test_addmm_beta0_and_errors(void) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, -1, 2, 0.5f, 1}, s[4];
  for (int i = 0; i < 4; ++i) s[i] = NAN;
  buf_t A = fbuf(2, (int64_t[]){2, 3}, a), B = fbuf(2, (int64_t[]){3, 2}, b), S = fbuf(2, (int64_t[]){2, 2}, s);
  buf_t O = fbuf(2, (int64_t[]){2, 2}, NULL);
  tpu_arg_t args[] = {tpu_arg_tensor(&S.t), tpu_arg_tensor(&A.t), tpu_arg_tensor(&B.t), tpu_arg_f64(0.0), tpu_arg_f64(2.0),
                      tpu_arg_tensor(&O.t)};
  OK(tpu_op_run(0, "aten::addmm.out", args, 6, &O.t, 1));
  float r[4];
  fread_(&O, r);
  int ok = 1;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      float acc = 0;
      for (int k = 0; k < 3; ++k) acc += a[i * 3 + k] * b[k * 2 + j];
      ok &= close_(r[i * 2 + j], 2 * acc);
    }
  CHECK(ok, "addmm beta=0 ignores NaN self");
  args[3] = tpu_arg_f64(1.0);  /* same executable, beta now 1: NaN propagates */
  OK(tpu_op_run(0, "aten::addmm.out", args, 6, &O.t, 1));
  fread_(&O, r);
  CHECK(isnan(r[0]) && isnan(r[3]), "addmm beta=1 propagates NaN");
  tpu_arg_t margs[] = {tpu_arg_tensor(&A.t), tpu_arg_tensor(&A.t), tpu_arg_tensor(&O.t)};
  expect_error("aten::mm.out", margs, 3, &O.t, 1, TPU_STATUS_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)");
  tpu_arg_t bargs[] = {tpu_arg_tensor(&A.t), tpu_arg_tensor(&B.t), tpu_arg_tensor(&O.t)};
  expect_error("aten::bmm.out", bargs, 3, &O.t, 1, TPU_STATUS_INVALID_ARGUMENT, "batch1 must be a 3D tensor");
  buf_t b1 = fbuf(3, (int64_t[]){2, 3, 4}, NULL), b2 = fbuf(3, (int64_t[]){2, 5, 6}, NULL);
  tpu_arg_t b3args[] = {tpu_arg_tensor(&b1.t), tpu_arg_tensor(&b2.t), tpu_arg_tensor(&O.t)};
  expect_error("aten::bmm.out", b3args, 3, &O.t, 1, TPU_STATUS_INVALID_ARGUMENT,
               "Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [2, 5].");
  buf_t v3 = fbuf(1, (int64_t[]){3}, NULL), v4 = fbuf(1, (int64_t[]){4}, NULL);
  tpu_tensor_t s0 = tpu_tensor_contiguous(O.dev, 0, TPU_DTYPE_F32, 0, NULL);
  tpu_arg_t dargs[] = {tpu_arg_tensor(&v3.t), tpu_arg_tensor(&v4.t)};
  expect_error("aten::dot", dargs, 2, &s0, 1, TPU_STATUS_INVALID_ARGUMENT,
               "inconsistent tensor size, expected tensor [3] and src [4] to have the same number of elements");
  tpu_arg_t aargs[] = {tpu_arg_tensor(&v3.t), tpu_arg_tensor(&A.t), tpu_arg_tensor(&B.t), tpu_arg_f64(1), tpu_arg_f64(1),
                       tpu_arg_tensor(&O.t)};
  expect_error("aten::addmm.out", aargs, 6, &O.t, 1, TPU_STATUS_INVALID_ARGUMENT,
               "The expanded size of the tensor (2) must match the existing size (3) at non-singleton dimension 1.  "
               "Target sizes: [2, 2].  Tensor sizes: [3]");
  ffree(&A); ffree(&B); ffree(&S); ffree(&O); ffree(&b1); ffree(&b2); ffree(&v3); ffree(&v4);
}

/* bf16 GEMM rounds once from f32 accumulation; integer GEMM is exact. */
static void test_mm_dtypes(void) {
  int32_t ia[6] = {1, -2, 3, 4, 5, -6}, ib[6] = {7, 8, -9, 10, 11, 12}, ir[4];
  void *da = NULL, *db = NULL, *dr = NULL;
  OK(tpu_rt_malloc(0, sizeof ia, &da)); OK(tpu_rt_malloc(0, sizeof ib, &db)); OK(tpu_rt_malloc(0, sizeof ir, &dr));
  OK(tpu_rt_memcpy_h2d(0, da, ia, sizeof ia)); OK(tpu_rt_memcpy_h2d(0, db, ib, sizeof ib));
  tpu_tensor_t ta = tpu_tensor_contiguous(da, 0, TPU_DTYPE_I32, 2, (int64_t[]){2, 3});
  tpu_tensor_t tb = tpu_tensor_contiguous(db, 0, TPU_DTYPE_I32, 2, (int64_t[]){3, 2});
  tpu_tensor_t tr = tpu_tensor_contiguous(dr, 0, TPU_DTYPE_I32, 2, (int64_t[]){2, 2});
  tpu_arg_t args[] = {tpu_arg_tensor(&ta), tpu_arg_tensor(&tb), tpu_arg_tensor(&tr)};
  OK(tpu_op_run(0, "aten::mm.out", args, 3, &tr, 1));
  OK(tpu_rt_memcpy_d2h(0, ir, dr, sizeof ir));
  int ok = 1;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      int32_t acc = 0;
      for (int k = 0; k < 3; ++k) acc += ia[i * 3 + k] * ib[k * 2 + j];
      ok &= ir[i * 2 + j] == acc;
    }
  CHECK(ok, "int32 mm exact");
  tpu_tensor_t ba = ta, bb = tb;
  ba.dtype = bb.dtype = TPU_DTYPE_BOOL;
  tpu_arg_t bargs[] = {tpu_arg_tensor(&ba), tpu_arg_tensor(&bb), tpu_arg_tensor(&tr)};
  expect_error("aten::mm.out", bargs, 3, &tr, 1, TPU_STATUS_UNSUPPORTED, "\"addmm_impl_cpu_\" not implemented for 'Bool'");
  tpu_arg_t margs[] = {tpu_arg_tensor(&ta), tpu_arg_tensor(&bb), tpu_arg_tensor(&tr)};
  expect_error("aten::mm.out", margs, 3, &tr, 1, TPU_STATUS_INVALID_ARGUMENT,
               "expected m1 and m2 to have the same dtype, but got: int != bool");
  tpu_rt_free(0, da); tpu_rt_free(0, db); tpu_rt_free(0, dr);
}

/* The reduce kernel's loop orders (inner runs, outer column blocks, chunked partials)
 * against a naive loop: random shapes, reduced-dim sets and permuted (transposed) strides. */
static void naive_reduce(int op, const float* x, int rank, const int64_t* sizes, const int64_t* strides,
                         const int* red, double* out) {
  int64_t idx[4] = {0}, n = 1, nout = 1;
  for (int d = 0; d < rank; ++d) { n *= sizes[d]; if (!red[d]) nout *= sizes[d]; }
  for (int64_t o = 0; o < nout; ++o) out[o] = op == 0 ? 0 : op == 1 ? -INFINITY : 1;
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0, o = 0;
    for (int d = 0; d < rank; ++d) { off += idx[d] * strides[d]; if (!red[d]) o = o * sizes[d] + idx[d]; }
    double v = x[off];
    if (op == 0) out[o] += v; else if (op == 1) out[o] = v > out[o] ? v : out[o]; else out[o] *= v;
    for (int d = rank - 1; d >= 0; --d) { if (++idx[d] < sizes[d]) break; idx[d] = 0; }
  }
}
static void test_reduce_kernel_random(void) {
  static const int64_t shapes[][4] = {{7, 1, 0, 0}, {300000, 0, 0, 0}, {2048, 300, 0, 0}, {3, 5, 7, 9},
                                      {64, 3, 600, 0}, {1, 1, 513, 2}, {9, 1000, 0, 0}, {4, 0, 3, 0}};
  static const int ranks[] = {2, 1, 2, 4, 3, 4, 2, 3};
  const char* ops[] = {"aten::sum.IntList_out", "aten::amax.out", "aten::prod.int_out"};
  for (int si = 0; si < 8; ++si) {
    int rank = ranks[si];
    int64_t sizes[4], n = 1;
    for (int d = 0; d < rank; ++d) { sizes[d] = shapes[si][d]; n *= sizes[d]; }
    float* h = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; ++i) h[i] = 0.5f + (float)rand() / (float)RAND_MAX;
    buf_t x = fbuf(rank, sizes, h);
    for (int trial = 0; trial < 6; ++trial) {
      /* a random permutation of the storage order: logical dim d has stride st[d] */
      int perm[4] = {0, 1, 2, 3};
      for (int d = rank - 1; d > 0; --d) { int j = rand() % (d + 1), t = perm[d]; perm[d] = perm[j]; perm[j] = t; }
      int64_t st[4], acc = 1;
      for (int k = rank - 1; k >= 0; --k) { st[perm[k]] = acc; acc *= sizes[perm[k]]; }
      tpu_tensor_t xv = x.t;
      for (int d = 0; d < rank; ++d) xv.strides[d] = st[d];
      int red[4] = {0}, nred = 0;
      int64_t dims[4], osz[4], nout = 1;
      int on = 0;
      for (int d = 0; d < rank; ++d) {
        red[d] = rand() % 2;
        if (red[d]) dims[nred++] = d; else { osz[on++] = sizes[d]; nout *= sizes[d]; }
      }
      if (!nred) { red[rank - 1] = 1; dims[nred++] = rank - 1; on = 0; nout = 1;
                   for (int d = 0; d < rank - 1; ++d) { osz[on++] = sizes[d]; nout *= sizes[d]; } }
      int op = trial % 3;
      if (op == 2 && nred > 1) op = 0;  /* prod.int_out takes one dim */
      if (op == 1 && n == 0) op = 0;    /* amax has no identity */
      if (op == 2 && n > 100000) op = 0;
      buf_t o = fbuf(on, osz, NULL);
      tpu_arg_t args[] = {tpu_arg_tensor(&xv), op == 2 ? tpu_arg_int(dims[0]) : tpu_arg_int_list(dims, nred),
                          tpu_arg_bool(false), tpu_arg_none(), tpu_arg_tensor(&o.t)};
      int nargs = op == 1 ? 3 : 4;
      args[nargs] = tpu_arg_tensor(&o.t);
      OK(tpu_op_run(0, ops[op], args, nargs + 1, &o.t, 1));
      float* got = malloc((size_t)(nout ? nout : 1) * sizeof(float));
      double* want = malloc((size_t)(nout ? nout : 1) * sizeof(double));
      if (nout) fread_(&o, got);
      naive_reduce(op, h, rank, sizes, st, red, want);
      int ok = 1;
      for (int64_t i = 0; i < nout; ++i) ok &= fabs(got[i] - want[i]) <= 1e-5 * (fabs(want[i]) + 1);
      CHECK(ok, "%s shape #%d trial %d", ops[op], si, trial);
      free(got); free(want); ffree(&o);
    }
    ffree(&x); free(h);
  }
}

/* argmax and cumsum along a random dim of permuted-stride inputs vs naive loops. */
static void test_arg_cum_random(void) {
  static const int64_t shapes[][3] = {{5, 700, 3}, {1, 1, 1}, {64, 9, 33}, {2, 1100, 1}};
  for (int si = 0; si < 4; ++si) {
    int64_t sizes[3] = {shapes[si][0], shapes[si][1], shapes[si][2]}, n = sizes[0] * sizes[1] * sizes[2];
    float* h = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; ++i) h[i] = (float)(rand() % 50) / 7.0f - 3.0f;  /* ties on purpose */
    if (si == 2) h[77] = NAN;
    buf_t x = fbuf(3, sizes, h);
    for (int trial = 0; trial < 4; ++trial) {
      int perm[3] = {0, 1, 2};
      for (int d = 2; d > 0; --d) { int j = rand() % (d + 1), t = perm[d]; perm[d] = perm[j]; perm[j] = t; }
      int64_t st[3], acc = 1;
      for (int k = 2; k >= 0; --k) { st[perm[k]] = acc; acc *= sizes[perm[k]]; }
      tpu_tensor_t xv = x.t;
      for (int d = 0; d < 3; ++d) xv.strides[d] = st[d];
      int dim = rand() % 3;
      int64_t osz[2], on = 0;
      for (int d = 0; d < 3; ++d) if (d != dim) osz[on++] = sizes[d];
      int64_t nout = osz[0] * osz[1];
      void* di = NULL;
      OK(tpu_rt_malloc(0, (size_t)nout * 8, &di));
      tpu_tensor_t it = tpu_tensor_contiguous(di, 0, TPU_DTYPE_I64, 2, osz);
      tpu_arg_t args[] = {tpu_arg_tensor(&xv), tpu_arg_int(dim), tpu_arg_bool(false), tpu_arg_tensor(&it)};
      OK(tpu_op_run(0, trial % 2 ? "aten::argmin.out" : "aten::argmax.out", args, 4, &it, 1));
      int64_t* got = malloc((size_t)nout * 8);
      OK(tpu_rt_memcpy_d2h(0, got, di, (size_t)nout * 8));
      int ok = 1;
      for (int64_t o = 0; o < nout; ++o) {
        int64_t i0 = o / osz[1], i1 = o % osz[1], idx[3], best = 0;
        float bv = 0;
        for (int64_t k = 0; k < sizes[dim]; ++k) {
          int q = 0;
          for (int d = 0; d < 3; ++d) idx[d] = d == dim ? k : (q++ == 0 ? i0 : i1);
          float v = h[idx[0] * st[0] + idx[1] * st[1] + idx[2] * st[2]];
          if (k == 0 || v != v || (trial % 2 ? v < bv : v > bv)) { bv = v; best = k; if (v != v) break; }
        }
        ok &= got[o] == best;
      }
      CHECK(ok, "argreduce shape #%d trial %d dim %d", si, trial, dim);
      /* cumsum along dim into a contiguous output */
      buf_t o = fbuf(3, sizes, NULL);
      tpu_arg_t cargs[] = {tpu_arg_tensor(&xv), tpu_arg_int(dim), tpu_arg_none(), tpu_arg_tensor(&o.t)};
      OK(tpu_op_run(0, "aten::cumsum.out", cargs, 4, &o.t, 1));
      float* cg = malloc((size_t)n * sizeof(float));
      fread_(&o, cg);
      ok = 1;
      for (int64_t a = 0; a < sizes[0]; ++a)
        for (int64_t b = 0; b < sizes[1]; ++b)
          for (int64_t c = 0; c < sizes[2]; ++c) {
            int64_t idx[3] = {a, b, c};
            double sum = 0;
            for (int64_t k = 0; k <= idx[dim]; ++k) {
              int64_t j[3] = {a, b, c};
              j[dim] = k;
              sum += h[j[0] * st[0] + j[1] * st[1] + j[2] * st[2]];
            }
            float g = cg[(a * sizes[1] + b) * sizes[2] + c];
            ok &= (sum != sum && g != g) || fabs(g - sum) <= 1e-4 * (fabs(sum) + 1);
          }
      CHECK(ok, "cumsum shape #%d trial %d dim %d", si, trial, dim);
      free(cg); ffree(&o); free(got); tpu_rt_free(0, di);
    }
    ffree(&x); free(h);
  }
}

int main(void) {
  srand(99);
  OK(tpu_rt_init());
  for (int i = 0; i < 12; ++i) x34[i] = (float)rand() / (float)RAND_MAX * 4.0f - 2.0f;
  x34[5] = 0.0f;
  test_sum_mean_keepdim();
  test_norm_order_keyed();
  test_max_argmax_var();
  test_addmm_beta0_and_errors();
  test_mm_dtypes();
  test_reduce_kernel_random();
  test_arg_cum_random();
  OK(tpu_rt_synchronize(0));
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail != 0;
}
