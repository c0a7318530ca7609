/* test_linalg.c — the host driver's dense linear algebra kernels (drivers/host/linalg.c:
 * custom targets CHOLESKY, LU, LU_SOLVE, TRI_SOLVE) on random batched f32/f64 matrices with
 * odd sizes and non-contiguous layouts. The reference is naive math done here: L L^T = A,
 * P L U = A, op(A) X = R, each checked to a relative residual; the parallel kernel must
 * equal its serial twin bit for bit; non-positive-definite inputs and bad pivots give info
 * codes / statuses (never a crash: run under ASan/UBSan by `make test-sanitize`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/linalg.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static double drand(void) { return (double)rand() / (double)RAND_MAX * 2.0 - 1.0; }

/* a batch of B matrices (m, n) stored with row stride ld >= n (non-contiguous when ld > n),
 * or column-major when colmajor */
typedef struct { tpu_host_view_t v; int64_t B, m, n; } mat_t;
static mat_t mat_new(int dt, int64_t B, int64_t m, int64_t n, int64_t pad, int colmajor) {
  mat_t M = {.B = B, .m = m, .n = n};
  int64_t ld = (colmajor ? m : n) + pad, per = (colmajor ? n : m) * ld + 1;
  M.v.data = calloc((size_t)(B * per + 1), tpu_dtype_size(dt));
  M.v.dtype = dt; M.v.rank = 3;
  M.v.sizes[0] = B; M.v.sizes[1] = m; M.v.sizes[2] = n;
  M.v.strides[0] = per;
  M.v.strides[1] = colmajor ? 1 : ld;
  M.v.strides[2] = colmajor ? ld : 1;
  return M;
}
static double* el_ptr_d(const mat_t* M, int64_t b, int64_t i, int64_t j) {
  return (double*)M->v.data + b * M->v.strides[0] + i * M->v.strides[1] + j * M->v.strides[2];
}
static float* el_ptr_f(const mat_t* M, int64_t b, int64_t i, int64_t j) {
  return (float*)M->v.data + b * M->v.strides[0] + i * M->v.strides[1] + j * M->v.strides[2];
}
static double get(const mat_t* M, int64_t b, int64_t i, int64_t j) {
  return M->v.dtype == TPU_DTYPE_F64 ? *el_ptr_d(M, b, i, j) : (double)*el_ptr_f(M, b, i, j);
}
static void set(mat_t* M, int64_t b, int64_t i, int64_t j, double x) {
  if (M->v.dtype == TPU_DTYPE_F64) *el_ptr_d(M, b, i, j) = x;
  else *el_ptr_f(M, b, i, j) = (float)x;
}
static int same(const mat_t* a, const mat_t* b) {
  for (int64_t q = 0; q < a->B; ++q)
    for (int64_t i = 0; i < a->m; ++i)
      for (int64_t j = 0; j < a->n; ++j) {
        double x = get(a, q, i, j), y = get(b, q, i, j);
        if (!(x == y || (isnan(x) && isnan(y)))) return 0;
      }
  return 1;
}
static tpu_ir_op_t custom(int target, int64_t attr) {
  tpu_ir_op_t op;
  memset(&op, 0, sizeof op);
  op.opcode = TPU_IR_CUSTOM; op.i0 = target; op.i1 = attr;
  return op;
}
static double tol(int dt) { return dt == TPU_DTYPE_F64 ? 1e-11 : 1e-4; }

/* runs the parallel kernel into out and the serial twin into a copy; they must agree */
static tpu_status_t run_both(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, mat_t* out, mat_t* out_ref) {
  tpu_status_t s = tpu_host_k_linalg(op, n, xs, &out->v);
  tpu_status_t s2 = tpu_host_k_linalg_ref(op, n, xs, &out_ref->v);
  CHECK((s == TPU_OK) == (s2 == TPU_OK), "parallel / serial status differ");
  tpu_status_free(s2);
  if (s == TPU_OK) CHECK(same(out, out_ref), "target %lld: parallel result differs from the serial twin", (long long)op->i0);
  return s;
}

static void test_cholesky(int dt, int64_t B, int64_t n, int pad) {
  mat_t A = mat_new(dt, B, n, n, pad, pad == 0), M = mat_new(TPU_DTYPE_F64, B, n, n, 0, 0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) set(&M, b, i, j, drand());
    for (int64_t i = 0; i < n; ++i) /* A = M M^T + n I, upper triangle NaN: never read */
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? (double)n : 0;
        for (int64_t p = 0; p < n; ++p) s += get(&M, b, i, p) * get(&M, b, j, p);
        set(&A, b, i, j, j > i ? NAN : s);
      }
  }
  mat_t O = mat_new(dt, B, n, n + 1, 1, 0), R = mat_new(dt, B, n, n + 1, 0, 1);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_CHOLESKY, 1);
  tpu_status_t s = run_both(&op, 1, &A.v, &O, &R);
  CHECK(s == TPU_OK, "cholesky: %s", tpu_status_message(s));
  tpu_status_free(s);
  double worst = 0;
  int tri = 1, info0 = 1;
  for (int64_t b = 0; b < B; ++b) {
    if (n) info0 &= get(&O, b, 0, n) == 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        if (j > i) { tri &= get(&O, b, i, j) == 0; continue; }
        double s = 0;
        for (int64_t p = 0; p <= j; ++p) s += get(&O, b, i, p) * get(&O, b, j, p);
        worst = fmax(worst, fabs(s - get(&A, b, i, j)) / (double)n);
      }
  }
  CHECK(tri && info0 && worst <= tol(dt) * n, "cholesky dt %d B %lld n %lld: L L^T residual %g", dt, (long long)B, (long long)n, worst);
  free(A.v.data); free(M.v.data); free(O.v.data); free(R.v.data);
}

static void test_cholesky_not_pd(void) {
  /* batch of 3: PD, [[1, 2], [2, 1]] (fails at order 2), [[-1, 0], [0, 1]] (order 1) */
  const double vals[3][4] = {{4, 1, 1, 3}, {1, 2, 2, 1}, {-1, 0, 0, 1}};
  mat_t A = mat_new(TPU_DTYPE_F64, 3, 2, 2, 0, 0);
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < 4; ++i) set(&A, b, i / 2, i % 2, vals[b][i]);
  mat_t O = mat_new(TPU_DTYPE_F64, 3, 2, 3, 0, 0), R = mat_new(TPU_DTYPE_F64, 3, 2, 3, 0, 0);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_CHOLESKY, 0);
  tpu_status_t s = run_both(&op, 1, &A.v, &O, &R);
  CHECK(s == TPU_OK, "cholesky (no check)");
  tpu_status_free(s);
  CHECK(get(&O, 0, 0, 2) == 0 && get(&O, 1, 0, 2) == 2 && get(&O, 2, 0, 2) == 1, "cholesky infos %g %g %g",
        get(&O, 0, 0, 2), get(&O, 1, 0, 2), get(&O, 2, 0, 2));
  /* as LAPACK: the failing pivot is left in place (1 - 2*2 = -3) */
  CHECK(get(&O, 1, 1, 1) == -3 && get(&O, 1, 1, 0) == 2, "cholesky partial factor %g %g", get(&O, 1, 1, 1), get(&O, 1, 1, 0));
  op.i1 = 2;
  s = tpu_host_k_linalg(&op, 1, &A.v, &O.v);
  CHECK(tpu_status_code(s) == TPU_STATUS_LINALG_ERROR && strstr(tpu_status_message(s),
        "cholesky: (Batch element 1): The factorization could not be completed because the input is not positive-definite "
        "(the leading minor of order 2 is not positive-definite)."), "cholesky error: %s", tpu_status_message(s));
  tpu_status_free(s);
  free(A.v.data); free(O.v.data); free(R.v.data);
}

static void test_lu(int dt, int64_t B, int64_t m, int64_t n, int colmajor, int zero) {
  mat_t A = mat_new(dt, B, m, n, 2, colmajor);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) set(&A, b, i, j, zero ? 0.0 : drand());
  mat_t O = mat_new(dt, B, m, n + 2, 0, 1), R = mat_new(dt, B, m, n + 2, 3, 0);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_LU, 0);
  tpu_status_t s = run_both(&op, 1, &A.v, &O, &R);
  CHECK(s == TPU_OK, "lu: %s", tpu_status_message(s));
  tpu_status_free(s);
  int64_t k = m < n ? m : n;
  double worst = 0;
  int lbound = 1, pivok = 1, infook = 1;
  double* pa = malloc((size_t)(m * n) * sizeof(double));
  for (int64_t b = 0; b < B; ++b) {
    /* P^T A: A's rows with the pivots' swaps applied in order */
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) pa[i * n + j] = get(&A, b, i, j);
    for (int64_t i = 0; i < k; ++i) {
      int64_t p = (int64_t)get(&O, b, i, n) - 1;
      if (p < i || p >= m) { pivok = 0; continue; }
      for (int64_t j = 0; j < n; ++j) { double t = pa[i * n + j]; pa[i * n + j] = pa[p * n + j]; pa[p * n + j] = t; }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p <= (i < j ? i : j) && p < k; ++p) {
          double l = p == i ? 1.0 : get(&O, b, i, p);
          if (p < i) lbound &= fabs(l) <= 1.0;
          s += l * get(&O, b, p, j);
        }
        worst = fmax(worst, fabs(s - pa[i * n + j]));
      }
    infook &= get(&O, b, 0, n + 1) == (zero ? 1 : 0);
    if (zero) for (int64_t i = 0; i < k; ++i) pivok &= get(&O, b, i, n) == (double)(i + 1);
  }
  CHECK(pivok && lbound && infook && worst < tol(dt) * (m + n), "lu dt %d B %lld %lldx%lld: P L U residual %g (pivots %d, |L|<=1 %d, info %d)",
        dt, (long long)B, (long long)m, (long long)n, worst, pivok, lbound, infook);
  free(pa); free(A.v.data); free(O.v.data); free(R.v.data);
}

/* A well-conditioned: random + n on the diagonal */
static void fill_dominant(mat_t* A) {
  for (int64_t b = 0; b < A->B; ++b)
    for (int64_t i = 0; i < A->m; ++i)
      for (int64_t j = 0; j < A->n; ++j) set(A, b, i, j, drand() + (i == j ? (double)A->n : 0));
}

static void test_lu_solve(int dt, int64_t B, int64_t n, int64_t k, int trans) {
  mat_t A = mat_new(dt, B, n, n, 1, 0), Rhs = mat_new(dt, B, n, k, 0, 1);
  fill_dominant(&A);
  for (int64_t b = 0; b < B; ++b) /* swap two rows so pivoting matters */
    for (int64_t j = 0; j < n && n > 1; ++j) { double t = get(&A, b, 0, j); set(&A, b, 0, j, get(&A, b, n - 1, j)); set(&A, b, n - 1, j, t); }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) set(&Rhs, b, i, j, drand());
  mat_t P = mat_new(dt, B, n, n + 2, 0, 0), P2 = mat_new(dt, B, n, n + 2, 0, 0);
  tpu_ir_op_t lu = custom(TPU_IR_CUSTOM_LU, 0);
  tpu_status_free(run_both(&lu, 1, &A.v, &P, &P2));
  /* operands: LU = P[..., :n], pivots = P[..., n] (a rank-2 view), R */
  tpu_host_view_t xs[3] = {P.v, P.v, Rhs.v};
  xs[0].sizes[2] = n;
  xs[1].rank = 2; xs[1].data = P.v.data + n * tpu_dtype_size(dt); xs[1].strides[1] = P.v.strides[1];
  mat_t X = mat_new(dt, B, n, k, 2, 0), X2 = mat_new(dt, B, n, k, 0, 0);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_LU_SOLVE, trans);
  tpu_status_t s = run_both(&op, 3, xs, &X, &X2);
  CHECK(s == TPU_OK, "lu_solve: %s", tpu_status_message(s));
  tpu_status_free(s);
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double v = 0;
        for (int64_t p = 0; p < n; ++p) v += (trans ? get(&A, b, p, i) : get(&A, b, i, p)) * get(&X, b, p, j);
        worst = fmax(worst, fabs(v - get(&Rhs, b, i, j)));
      }
  CHECK(worst < tol(dt) * n, "lu_solve dt %d B %lld n %lld k %lld trans %d: residual %g", dt, (long long)B, (long long)n, (long long)k, trans, worst);
  /* a pivot out of range is a status, not a wild read */
  if (n > 0) {
    set(&P, B - 1, 0, n, (double)(n + 5));
    s = tpu_host_k_linalg(&op, 3, xs, &X.v);
    CHECK(tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT, "bad pivot: %s", tpu_status_message(s));
    tpu_status_free(s);
  }
  free(A.v.data); free(Rhs.v.data); free(P.v.data); free(P2.v.data); free(X.v.data); free(X2.v.data);
}

static void test_tri_solve(int dt, int64_t B, int64_t n, int64_t k, int flags) {
  int upper = flags & 1, unit = (flags >> 1) & 1, trans = (flags >> 2) & 1;
  mat_t A = mat_new(dt, B, n, n, 0, flags & 1), Rhs = mat_new(dt, B, n, k, 1, 0);
  fill_dominant(&A);
  for (int64_t b = 0; b < B; ++b) /* the unused triangle (and, if unit, the diagonal) must never be read */
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if ((upper ? j < i : j > i) || (unit && i == j)) set(&A, b, i, j, NAN);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) set(&Rhs, b, i, j, drand());
  tpu_host_view_t xs[2] = {A.v, Rhs.v};
  mat_t X = mat_new(dt, B, n, k, 0, 1), X2 = mat_new(dt, B, n, k, 0, 0);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_TRI_SOLVE, flags);
  tpu_status_t s = run_both(&op, 2, xs, &X, &X2);
  CHECK(s == TPU_OK, "tri_solve: %s", tpu_status_message(s));
  tpu_status_free(s);
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double v = 0;
        for (int64_t p = 0; p < n; ++p) {
          int64_t r = trans ? p : i, c = trans ? i : p; /* op(A)[i][p] = A[r][c] */
          double a = r == c ? (unit ? 1.0 : get(&A, b, r, c)) : ((upper ? c > r : c < r) ? get(&A, b, r, c) : 0.0);
          v += a * get(&X, b, p, j);
        }
        worst = fmax(worst, fabs(v - get(&Rhs, b, i, j)));
      }
  CHECK(worst < tol(dt) * n, "tri_solve dt %d n %lld flags %d: residual %g", dt, (long long)n, flags, worst);
  free(A.v.data); free(Rhs.v.data); free(X.v.data); free(X2.v.data);
}

static void test_bad_operands(void) {
  mat_t A = mat_new(TPU_DTYPE_F32, 1, 3, 4, 0, 0), O = mat_new(TPU_DTYPE_F32, 1, 3, 5, 0, 0);
  tpu_ir_op_t op = custom(TPU_IR_CUSTOM_CHOLESKY, 0);
  tpu_status_t s = tpu_host_k_linalg(&op, 1, &A.v, &O.v); /* not square */
  CHECK(tpu_status_code(s) == TPU_STATUS_INTERNAL, "non-square cholesky: %s", tpu_status_message(s));
  tpu_status_free(s);
  free(A.v.data); free(O.v.data);
}

int main(void) {
  srand(7);
  const int dts[2] = {TPU_DTYPE_F32, TPU_DTYPE_F64};
  for (int d = 0; d < 2; ++d) {
    int dt = dts[d];
    test_cholesky(dt, 3, 1, 0);
    test_cholesky(dt, 2, 5, 3);
    test_cholesky(dt, 40, 17, 1);
    test_cholesky(dt, 1, 0, 0);
    test_lu(dt, 3, 4, 4, 0, 0);
    test_lu(dt, 2, 6, 3, 1, 0);
    test_lu(dt, 2, 3, 6, 0, 0);
    test_lu(dt, 33, 9, 9, 1, 0);
    test_lu(dt, 2, 3, 3, 0, 1);
    for (int t = 0; t < 2; ++t) {
      test_lu_solve(dt, 3, 5, 2, t);
      test_lu_solve(dt, 20, 13, 7, t);
      test_lu_solve(dt, 1, 1, 1, t);
    }
    for (int f = 0; f < 8; ++f) {
      test_tri_solve(dt, 2, 6, 3, f);
      test_tri_solve(dt, 25, 11, 1, f);
    }
  }
  test_cholesky_not_pd();
  test_bad_operands();
  printf("test_linalg: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
