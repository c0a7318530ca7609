/* test_linalg2.c — the host driver's decompositions (drivers/host/linalg2.c: custom targets QR,
 * EIGH, SVD) on random batched f32/f64 matrices with odd, tall and wide sizes and non-contiguous
 * (column-major, padded) layouts. The reference is math done here: Q R = A with Q^T Q = I and R
 * upper triangular; A V = V diag(w) with ascending w and V^T V = I; U S V^T = A with orthonormal
 * U / V (full_matrices included) and descending S >= 0; rank-deficient inputs; the parallel kernel
 * equals its serial twin bit for bit; NaN input to SVD / EIGH fails with a status (never a crash:
 * run under ASan/UBSan by `make test-sanitize`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/linalg2.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static double drand(void) { return (double)rand() / (double)RAND_MAX * 2.0 - 1.0; }

/* B matrices (m, n): row-major with padded rows, or column-major */
typedef struct { tpu_host_view_t v; int64_t B, m, n; } mat_t;
static mat_t mat_new(int dt, int64_t B, int64_t m, int64_t n, int colmajor) {
  mat_t M = {.B = B, .m = m, .n = n};
  int64_t ld = (colmajor ? m : n) + 1, per = (colmajor ? n : m) * ld + 1;
  M.v.data = calloc((size_t)(B * per + 1), tpu_dtype_size(dt));
  M.v.dtype = dt; M.v.rank = 3;
  M.v.sizes[0] = B; M.v.sizes[1] = m; M.v.sizes[2] = n;
  M.v.strides[0] = per; M.v.strides[1] = colmajor ? 1 : ld; M.v.strides[2] = colmajor ? ld : 1;
  return M;
}
static double* pd(const tpu_host_view_t* v, int64_t off) { return (double*)v->data + off; }
static float* pf(const tpu_host_view_t* v, int64_t off) { return (float*)v->data + off; }
static double get(const mat_t* M, int64_t b, int64_t i, int64_t j) {
  int64_t o = b * M->v.strides[0] + i * M->v.strides[1] + j * M->v.strides[2];
  return M->v.dtype == TPU_DTYPE_F64 ? *pd(&M->v, o) : (double)*pf(&M->v, o);
}
static void set(mat_t* M, int64_t b, int64_t i, int64_t j, double x) {
  int64_t o = b * M->v.strides[0] + i * M->v.strides[1] + j * M->v.strides[2];
  if (M->v.dtype == TPU_DTYPE_F64) *pd(&M->v, o) = x;
  else *pf(&M->v, o) = (float)x;
}
/* flat result [B, len] with a padded row stride */
typedef struct { tpu_host_view_t v; int64_t B, len; } flat_t;
static flat_t flat_new(int dt, int64_t B, int64_t len) {
  flat_t F = {.B = B, .len = len};
  F.v.data = calloc((size_t)(B * (len + 3) + 1), tpu_dtype_size(dt));
  F.v.dtype = dt; F.v.rank = 2; F.v.sizes[0] = B; F.v.sizes[1] = len; F.v.strides[0] = len + 3; F.v.strides[1] = 1;
  return F;
}
static double fget(const flat_t* F, int64_t b, int64_t i) {
  int64_t o = b * F->v.strides[0] + i;
  return F->v.dtype == TPU_DTYPE_F64 ? *pd(&F->v, o) : (double)*pf(&F->v, o);
}
static tpu_ir_op_t custom(int target, int64_t attr) {
  tpu_ir_op_t op;
  memset(&op, 0, sizeof op);
  op.opcode = TPU_IR_CUSTOM; op.i0 = target; op.i1 = attr;
  return op;
}
static double tol(int dt) { return dt == TPU_DTYPE_F64 ? 1e-12 : 1e-5; }

/* parallel into F, serial into a copy: bit-identical */
static tpu_status_t run_both(const tpu_ir_op_t* op, const mat_t* A, flat_t* F) {
  flat_t R = flat_new(F->v.dtype, F->B, F->len);
  tpu_status_t s = tpu_host_k_linalg2(op, 1, &A->v, &F->v);
  tpu_status_t s2 = tpu_host_k_linalg2_ref(op, 1, &A->v, &R.v);
  CHECK((s == TPU_OK) == (s2 == TPU_OK), "parallel / serial status differ");
  tpu_status_free(s2);
  if (s == TPU_OK) {
    int same = 1;
    for (int64_t b = 0; b < F->B; ++b)
      for (int64_t i = 0; i < F->len; ++i) same &= fget(F, b, i) == fget(&R, b, i);
    CHECK(same, "target %lld: parallel result differs from the serial twin", (long long)op->i0);
  }
  free(R.v.data);
  return s;
}
/* max |X^T X - I| over the columns [0, c) of X (r, c) stored at flat position pos, row-major */
static double orth_err(const flat_t* F, int64_t b, int64_t pos, int64_t r, int64_t c, int rows) {
  double worst = 0;
  for (int64_t p = 0; p < c; ++p)
    for (int64_t q = 0; q < c; ++q) {
      double s = 0;
      for (int64_t i = 0; i < r; ++i)
        s += rows ? fget(F, b, pos + p * r + i) * fget(F, b, pos + q * r + i)
                  : fget(F, b, pos + i * c + p) * fget(F, b, pos + i * c + q);
      worst = fmax(worst, fabs(s - (p == q)));
    }
  return worst;
}

static void test_qr(int dt, int64_t B, int64_t m, int64_t n, int mode, int colmajor) {
  mat_t A = mat_new(dt, B, m, n, colmajor);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) set(&A, b, i, j, drand());
  int64_t k = m < n ? m : n, mq = mode == 0 ? k : mode == 1 ? m : 0, kr = mode == 1 ? m : k;
  flat_t F = flat_new(dt, B, m * mq + kr * n);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_QR, mode);
  tpu_status_t s = run_both(&op, &A, &F);
  CHECK(s == TPU_OK, "qr: %s", tpu_status_message(s));
  tpu_status_free(s);
  double res = 0, orth = 0;
  int upper = 1;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < kr; ++i)
      for (int64_t j = 0; j < i && j < n; ++j) upper &= fget(&F, b, m * mq + i * n + j) == 0;
    if (!mq) continue;
    orth = fmax(orth, orth_err(&F, b, 0, m, mq, 0));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double x = 0;
        for (int64_t p = 0; p < kr && p < mq; ++p) x += fget(&F, b, i * mq + p) * fget(&F, b, m * mq + p * n + j);
        res = fmax(res, fabs(x - get(&A, b, i, j)));
      }
  }
  CHECK(upper && res <= tol(dt) * 8 * (m + n) && orth <= tol(dt) * 8 * m,
        "qr dt %d (%lld, %lld) mode %d: residual %g, orthogonality %g, upper %d", dt, (long long)m, (long long)n, mode,
        res, orth, upper);
  free(A.v.data); free(F.v.data);
}

static void test_eigh(int dt, int64_t B, int64_t n, int upper) {
  mat_t A = mat_new(dt, B, n, n, upper);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double x = drand();
        set(&A, b, upper ? j : i, upper ? i : j, x);
        if (i != j) set(&A, b, upper ? i : j, upper ? j : i, NAN); /* the other triangle is never read */
      }
  flat_t F = flat_new(dt, B, n + n * n);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_EIGH, upper | 2);
  tpu_status_t s = run_both(&op, &A, &F);
  CHECK(s == TPU_OK, "eigh: %s", tpu_status_message(s));
  tpu_status_free(s);
  double res = 0, orth = 0;
  int sorted = 1;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 1; i < n; ++i) sorted &= fget(&F, b, i - 1) <= fget(&F, b, i);
    orth = fmax(orth, orth_err(&F, b, n, n, n, 0));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < n; ++c) { /* (A v_c)_i - w_c v_ic */
        double x = 0;
        for (int64_t p = 0; p < n; ++p) {
          double a = (upper ? p >= i : p <= i) ? get(&A, b, i, p) : get(&A, b, p, i);
          x += a * fget(&F, b, n + p * n + c);
        }
        res = fmax(res, fabs(x - fget(&F, b, c) * fget(&F, b, n + i * n + c)));
      }
  }
  CHECK(sorted && res <= tol(dt) * 8 * n && orth <= tol(dt) * 8 * n, "eigh dt %d n %lld: residual %g, orth %g, sorted %d",
        dt, (long long)n, res, orth, sorted);
  free(A.v.data); free(F.v.data);
}

/* rank r (< min(m, n)) when r > 0 */
static void test_svd(int dt, int64_t B, int64_t m, int64_t n, int full, int64_t r, int colmajor) {
  mat_t A = mat_new(dt, B, m, n, colmajor);
  for (int64_t b = 0; b < B; ++b) {
    double L[8][16], R[8][16];
    for (int64_t p = 0; p < r; ++p) {
      for (int64_t i = 0; i < m; ++i) L[p][i] = drand();
      for (int64_t j = 0; j < n; ++j) R[p][j] = drand();
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double x = r ? 0 : drand();
        for (int64_t p = 0; p < r; ++p) x += L[p][i] * R[p][j];
        set(&A, b, i, j, x);
      }
  }
  int64_t k = m < n ? m : n, ku = full ? m : k, kv = full ? n : k;
  flat_t F = flat_new(dt, B, m * ku + k + kv * n);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_SVD, (full ? 1 : 0) | 2);
  tpu_status_t s = run_both(&op, &A, &F);
  CHECK(s == TPU_OK, "svd: %s", tpu_status_message(s));
  tpu_status_free(s);
  double res = 0, ou = 0, ov = 0;
  int sorted = 1;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < k; ++i) sorted &= fget(&F, b, m * ku + i) >= 0 && (i == 0 || fget(&F, b, m * ku + i - 1) >= fget(&F, b, m * ku + i));
    ou = fmax(ou, orth_err(&F, b, 0, m, ku, 0));
    ov = fmax(ov, orth_err(&F, b, m * ku + k, n, kv, 1)); /* rows of Vh */
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double x = 0;
        for (int64_t p = 0; p < k; ++p)
          x += fget(&F, b, i * ku + p) * fget(&F, b, m * ku + p) * fget(&F, b, m * ku + k + p * n + j);
        res = fmax(res, fabs(x - get(&A, b, i, j)));
      }
  }
  double scale = r ? (double)r * 4 : 1;
  CHECK(sorted && res <= tol(dt) * 16 * (m + n) * scale && ou <= tol(dt) * 16 * m && ov <= tol(dt) * 16 * n,
        "svd dt %d (%lld, %lld) full %d rank %lld: residual %g, U %g, V %g, sorted %d", dt, (long long)m, (long long)n,
        full, (long long)r, res, ou, ov, sorted);
  /* singular values only: the same S */
  flat_t S = flat_new(dt, B, k);
  tpu_ir_op_t op2 = custom(TPU_IR_CUSTOM_SVD, full ? 1 : 0);
  s = run_both(&op2, &A, &S);
  CHECK(s == TPU_OK, "svdvals");
  tpu_status_free(s);
  double ds = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < k; ++i) ds = fmax(ds, fabs(fget(&S, b, i) - fget(&F, b, m * ku + i)));
  CHECK(ds == 0, "svdvals differ from svd's S by %g", ds);
  free(A.v.data); free(F.v.data); free(S.v.data);
}

static void test_nonfinite(void) {
  mat_t A = mat_new(TPU_DTYPE_F32, 2, 3, 3, 0);
  for (int64_t i = 0; i < 9; ++i) { set(&A, 0, i / 3, i % 3, drand()); set(&A, 1, i / 3, i % 3, drand()); }
  set(&A, 1, 2, 0, NAN);
  flat_t F = flat_new(TPU_DTYPE_F32, 2, 9 + 3 + 9);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_SVD, 2);
  tpu_status_t s = tpu_host_k_linalg2(&op, 1, &A.v, &F.v);
  CHECK(tpu_status_code(s) == TPU_STATUS_LINALG_ERROR && strstr(tpu_status_message(s), "Batch element 1"),
        "svd of NaN: %s", tpu_status_message(s));
  tpu_status_free(s);
  flat_t E = flat_new(TPU_DTYPE_F32, 2, 3 + 9);
  op = custom(TPU_IR_CUSTOM_EIGH, 2); /* lower triangle: holds the NaN */
  s = tpu_host_k_linalg2(&op, 1, &A.v, &E.v);
  CHECK(tpu_status_code(s) == TPU_STATUS_LINALG_ERROR, "eigh of NaN: %s", tpu_status_message(s));
  tpu_status_free(s);
  op = custom(TPU_IR_CUSTOM_EIGH, 3); /* upper triangle: NaN not read */
  s = tpu_host_k_linalg2(&op, 1, &A.v, &E.v);
  CHECK(s == TPU_OK, "eigh (upper) must not read the NaN: %s", tpu_status_message(s));
  tpu_status_free(s);
  free(A.v.data); free(F.v.data); free(E.v.data);
}

int main(void) {
  srand(7);
  if (tpu_rt_init()) { printf("runtime init failed\n"); return 1; }
  const int dts[2] = {TPU_DTYPE_F32, TPU_DTYPE_F64};
  const int64_t shapes[][2] = {{1, 1}, {5, 3}, {3, 5}, {7, 7}, {9, 2}, {2, 9}, {0, 3}, {3, 0}};
  for (int d = 0; d < 2; ++d) {
    for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; ++q)
      for (int mode = 0; mode < 3; ++mode) test_qr(dts[d], 3, shapes[q][0], shapes[q][1], mode, (int)(q & 1));
    for (int64_t n = 1; n <= 12; n += 3) { test_eigh(dts[d], 3, n, 0); test_eigh(dts[d], 2, n, 1); }
    for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; ++q)
      for (int full = 0; full < 2; ++full) test_svd(dts[d], 3, shapes[q][0], shapes[q][1], full, 0, full);
    test_svd(dts[d], 2, 8, 6, 1, 2, 0);
    test_svd(dts[d], 2, 6, 8, 0, 3, 1);
    test_svd(dts[d], 2, 6, 8, 1, 1, 0);
  }
  test_nonfinite();
  printf("test_linalg2: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
