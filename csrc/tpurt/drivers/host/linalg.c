/* linalg.c — CHOLESKY, LU, LU_SOLVE, TRI_SOLVE (see linalg.h). Each matrix of the batch is
 * copied into a row-major double workspace, so any strides and f32/f64 share one code path
 * and f32 inputs get double accumulation. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/linalg.h"

/* element (i, j) of the matrix at batch offset `off` of rank-r view v (matrix = last two dims) */
static inline int64_t at2(const tpu_host_view_t* v, int64_t off, int64_t i, int64_t j) {
  return off + i * v->strides[v->rank - 2] + j * v->strides[v->rank - 1];
}
/* offset of batch element b over the leading nb dims of v */
int64_t tpu_host_linalg_batch_off(const tpu_host_view_t* v, int nb, int64_t b) {
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; --d) {
    int64_t i = b % v->sizes[d];
    b /= v->sizes[d];
    off += i * v->strides[d];
  }
  return off;
}
static inline double ldv(const tpu_host_view_t* v, int64_t off) {
  return tpu_host_load_f64(v->data + off * tpu_dtype_size(v->dtype), v->dtype);
}
static inline void stv(const tpu_host_view_t* v, int64_t off, double x) {
  tpu_host_store_f64(v->data + off * tpu_dtype_size(v->dtype), v->dtype, x);
}
void tpu_host_linalg_load_mat(double* w, const tpu_host_view_t* v, int64_t off, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) w[i * n + j] = ldv(v, at2(v, off, i, j));
}
static void store_mat(const tpu_host_view_t* v, int64_t off, const double* w, int64_t m, int64_t n, int64_t ld) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) stv(v, at2(v, off, i, j), w[i * ld + j]);
}

/* ---- factorizations and solves on a row-major workspace */

/* lower Cholesky in place (LAPACK potf2, left-looking); returns info. On failure a[j][j]
 * holds the non-positive pivot and later columns keep the input. */
static int64_t chol(double* a, int64_t n) { /* a (n, n) */
  for (int64_t j = 0; j < n; ++j) {
    double ajj = a[j * n + j];
    for (int64_t p = 0; p < j; ++p) ajj -= a[j * n + p] * a[j * n + p];
    if (!(ajj > 0)) { a[j * n + j] = ajj; return j + 1; }
    ajj = sqrt(ajj);
    a[j * n + j] = ajj;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int64_t p = 0; p < j; ++p) s -= a[i * n + p] * a[j * n + p];
      a[i * n + j] = s / ajj;
    }
  }
  return 0;
}
/* LU with partial pivoting in place (LAPACK getf2); piv 1-based; returns info (first zero pivot). */
static int64_t lu(double* a, int64_t m, int64_t n, int64_t* piv) { /* a (m, n), piv (min(m, n)) */
  int64_t k = m < n ? m : n, info = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t p = j;
    double best = fabs(a[j * n + j]);
    for (int64_t i = j + 1; i < m; ++i)
      if (fabs(a[i * n + j]) > best) { best = fabs(a[i * n + j]); p = i; }
    piv[j] = p + 1;
    if (a[p * n + j] != 0) {
      if (p != j)
        for (int64_t c = 0; c < n; ++c) { double t = a[j * n + c]; a[j * n + c] = a[p * n + c]; a[p * n + c] = t; }
      double d = a[j * n + j];
      for (int64_t i = j + 1; i < m; ++i) a[i * n + j] /= d;
    } else if (!info) {
      info = j + 1;
    }
    for (int64_t i = j + 1; i < m; ++i) {
      double l = a[i * n + j];
      if (l == 0) continue;
      for (int64_t c = j + 1; c < n; ++c) a[i * n + c] -= l * a[j * n + c];
    }
  }
  return info;
}
/* op(A) X = R in place of r (n, k); A (n, n) read through one triangle */
static void trsolve(const double* a, double* r, int64_t n, int64_t k, int upper, int unit, int trans) {
  /* element (i, j) of op(A); op(A) is lower iff upper == trans */
#define OPA(i, j) (trans ? a[(j) * n + (i)] : a[(i) * n + (j)])
  int lower = upper == trans;
  for (int64_t s = 0; s < n; ++s) {
    int64_t i = lower ? s : n - 1 - s;
    for (int64_t c = 0; c < k; ++c) {
      double v = r[i * k + c];
      if (lower) for (int64_t j = 0; j < i; ++j) v -= OPA(i, j) * r[j * k + c];
      else for (int64_t j = i + 1; j < n; ++j) v -= OPA(i, j) * r[j * k + c];
      r[i * k + c] = unit ? v : v / OPA(i, i);
    }
  }
#undef OPA
}
static void swap_rows(double* r, int64_t k, int64_t i, int64_t p) {
  if (i == p) return;
  for (int64_t c = 0; c < k; ++c) { double t = r[i * k + c]; r[i * k + c] = r[p * k + c]; r[p * k + c] = t; }
}

/* ---- batch driver */
typedef struct {
  const tpu_ir_op_t* op;
  const tpu_host_view_t *xs, *out;
  int nb;            /* batch dims */
  int64_t m, n, k;   /* A (m, n); R (n, k) */
  int a_contig;      /* A is row-major contiguous (as Tensor.is_contiguous()) */
  pthread_mutex_t mu;
  int err;           /* 1: out of memory, 2: bad pivot, 3: not positive-definite */
  int64_t err_info, err_batch; /* of the lowest failing batch element, as PyTorch reports */
} la_job_t;

static void set_err(la_job_t* J, int code, int64_t info, int64_t b) {
  pthread_mutex_lock(&J->mu);
  if (!J->err || b < J->err_batch) { J->err = code; J->err_info = info; J->err_batch = b; }
  pthread_mutex_unlock(&J->mu);
}

static void la_worker(void* ctx, int64_t b0, int64_t b1) {
  la_job_t* J = ctx;
  const tpu_host_view_t *A = &J->xs[0], *out = J->out;
  int64_t m = J->m, n = J->n, k = J->k, target = J->op->i0;
  size_t words = (size_t)(m * n + n * k + n + 1);
  double* w = malloc(words * sizeof(double));
  int64_t* piv = malloc((size_t)(n + m + 1) * sizeof(int64_t));
  if (!w || !piv) { free(w); free(piv); set_err(J, 1, 0, 0); return; }
  /* LU i1 = 1: factor A^T if A is contiguous (square A only: lowerings use it for det) */
  int at = target == TPU_IR_CUSTOM_LU && J->op->i1 == 1 && m == n && J->a_contig;
  for (int64_t b = b0; b < b1; ++b) {
    int64_t ao = tpu_host_linalg_batch_off(A, J->nb, b), oo = tpu_host_linalg_batch_off(out, J->nb, b);
    if (at) {
      tpu_host_view_t T = *A;
      T.strides[T.rank - 2] = A->strides[T.rank - 1]; T.strides[T.rank - 1] = A->strides[T.rank - 2];
      tpu_host_linalg_load_mat(w, &T, ao, m, n);
    } else {
      tpu_host_linalg_load_mat(w, A, ao, m, n);
    }
    if (target == TPU_IR_CUSTOM_CHOLESKY) {
      int64_t info = chol(w, n);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j) w[i * n + j] = 0;
      store_mat(out, oo, w, n, n, n);
      for (int64_t i = 0; i < n; ++i) stv(out, at2(out, oo, i, n), i == 0 ? (double)info : 0.0);
      if (info && J->op->i1) set_err(J, 3, info, b);
    } else if (target == TPU_IR_CUSTOM_LU) {
      int64_t info = lu(w, m, n, piv), kk = m < n ? m : n;
      store_mat(out, oo, w, m, n, n);
      for (int64_t i = 0; i < m; ++i) {
        stv(out, at2(out, oo, i, n), i < kk ? (double)piv[i] : 0.0);
        stv(out, at2(out, oo, i, n + 1), i == 0 ? (double)info : 0.0);
      }
    } else { /* LU_SOLVE (A = LU, xs[1] pivots, xs[2] R) / TRI_SOLVE (xs[1] R) */
      int lus = target == TPU_IR_CUSTOM_LU_SOLVE;
      const tpu_host_view_t* R = &J->xs[lus ? 2 : 1];
      double* r = w + n * n;
      tpu_host_linalg_load_mat(r, R, tpu_host_linalg_batch_off(R, J->nb, b), n, k);
      if (lus) {
        const tpu_host_view_t* P = &J->xs[1];
        int64_t po = tpu_host_linalg_batch_off(P, J->nb, b), ps = P->strides[P->rank - 1];
        int bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          const char* p = P->data + (po + i * ps) * tpu_dtype_size(P->dtype);
          int64_t v = tpu_dtype_is_floating(P->dtype) ? (int64_t)tpu_host_load_f64(p, P->dtype) : tpu_host_load_i64(p, P->dtype);
          if (v < 1 || v > n) bad = 1;
          piv[i] = v - 1;
        }
        if (bad) { set_err(J, 2, 0, b); continue; }
        if (!J->op->i1) {
          for (int64_t i = 0; i < n; ++i) swap_rows(r, k, i, piv[i]);
          trsolve(w, r, n, k, 0, 1, 0);
          trsolve(w, r, n, k, 1, 0, 0);
        } else {
          trsolve(w, r, n, k, 1, 0, 1);
          trsolve(w, r, n, k, 0, 1, 1);
          for (int64_t i = n - 1; i >= 0; --i) swap_rows(r, k, i, piv[i]);
        }
      } else {
        int64_t f = J->op->i1;
        trsolve(w, r, n, k, (int)(f & 1), (int)((f >> 1) & 1), (int)((f >> 2) & 1));
      }
      store_mat(out, oo, r, n, k, k);
    }
  }
  free(w); free(piv);
}

static tpu_status_t la_run(const tpu_ir_op_t* op, int nin, const tpu_host_view_t* xs, const tpu_host_view_t* out,
                           int parallel) {
  int64_t t = op->i0;
  int want = t == TPU_IR_CUSTOM_LU_SOLVE ? 3 : t == TPU_IR_CUSTOM_TRI_SOLVE ? 2 : 1;
  if (nin != want || xs[0].rank < 2 || out->rank != xs[0].rank) return TPU_ERR(INTERNAL, "linalg: operands");
  for (int q = 0; q < nin; ++q)
    if (q != 1 || t != TPU_IR_CUSTOM_LU_SOLVE)
      if (xs[q].dtype != TPU_DTYPE_F32 && xs[q].dtype != TPU_DTYPE_F64) return TPU_ERR(INTERNAL, "linalg: dtype");
  if (out->dtype != TPU_DTYPE_F32 && out->dtype != TPU_DTYPE_F64) return TPU_ERR(INTERNAL, "linalg: dtype");
  int r = xs[0].rank, nb = r - 2;
  la_job_t J = {.op = op, .xs = xs, .out = out, .nb = nb, .mu = PTHREAD_MUTEX_INITIALIZER};
  J.m = xs[0].sizes[r - 2]; J.n = xs[0].sizes[r - 1]; J.k = 0;
  if (t != TPU_IR_CUSTOM_LU && J.m != J.n) return TPU_ERR(INTERNAL, "linalg: square matrices expected");
  if (t == TPU_IR_CUSTOM_LU_SOLVE || t == TPU_IR_CUSTOM_TRI_SOLVE) {
    const tpu_host_view_t* R = &xs[want - 1];
    if (R->rank != r || R->sizes[r - 2] != J.n) return TPU_ERR(INTERNAL, "linalg: right-hand side shape");
    J.k = R->sizes[r - 1];
    if (out->sizes[r - 2] != J.n || out->sizes[r - 1] != J.k) return TPU_ERR(INTERNAL, "linalg: result shape");
    if (t == TPU_IR_CUSTOM_LU_SOLVE && (xs[1].rank != r - 1 || xs[1].sizes[r - 2] != J.n))
      return TPU_ERR(INTERNAL, "linalg: pivots shape");
  } else {
    int64_t extra = t == TPU_IR_CUSTOM_LU ? 2 : 1;
    if (out->sizes[r - 2] != J.m || out->sizes[r - 1] != J.n + extra) return TPU_ERR(INTERNAL, "linalg: result shape");
  }
  int64_t expect = 1;
  J.a_contig = 1;
  for (int d = r - 1; d >= 0; --d) {
    if (xs[0].sizes[d] != 1 && xs[0].strides[d] != expect) J.a_contig = 0;
    expect *= xs[0].sizes[d];
  }
  int64_t batch = 1;
  for (int d = 0; d < nb; ++d) {
    for (int q = 0; q < nin; ++q)
      if (xs[q].sizes[d] != out->sizes[d]) return TPU_ERR(INTERNAL, "linalg: batch shapes");
    batch *= out->sizes[d];
  }
  if (batch == 0 || (J.m == 0 && t != TPU_IR_CUSTOM_LU_SOLVE && t != TPU_IR_CUSTOM_TRI_SOLVE)) return TPU_OK;
  if (parallel) {
    int64_t work = J.m * J.n * (J.n + J.k) + 1;
    tpu_pool_parallel_for(batch, TPU_MAX(1, 32768 / work), la_worker, &J);
  } else {
    la_worker(&J, 0, batch);
  }
  pthread_mutex_destroy(&J.mu);
  int e = J.err;
  if (e == 1) return TPU_ERR(OUT_OF_MEMORY, "linalg: out of host memory for a workspace");
  if (e == 2) return TPU_ERR(INVALID_ARGUMENT, "linalg.lu_solve: pivots must be in the range [1, %lld]", (long long)J.n);
  if (e == 3) {
    char where[48] = "";
    if (nb > 0) snprintf(where, sizeof where, ": (Batch element %lld)", (long long)J.err_batch);
    return TPU_ERR(LINALG_ERROR,
                   "%s%s: The factorization could not be completed because the input is not positive-definite "
                   "(the leading minor of order %lld is not positive-definite).",
                   op->i1 == 2 ? "cholesky" : "linalg.cholesky_ex", where, (long long)J.err_info);
  }
  return TPU_OK;
}

tpu_status_t tpu_host_k_linalg(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  return la_run(op, n, xs, out, 1);
}
tpu_status_t tpu_host_k_linalg_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  return la_run(op, n, xs, out, 0);
}
