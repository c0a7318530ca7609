/* linalg2.c — QR, EIGH, SVD (see linalg2.h). Each matrix of the batch is copied into a
 * row-major double workspace; results are written flat into the last dim of the output. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/linalg.h"
#include "drivers/host/linalg2.h"

/* flat output of one batch element: values w[0..len) at positions pos.. of the last dim */
static void store_flat(const tpu_host_view_t* o, int64_t off, int64_t pos, const double* w, int64_t len) {
  size_t es = tpu_dtype_size(o->dtype);
  int64_t s = o->strides[o->rank - 1];
  for (int64_t i = 0; i < len; ++i) tpu_host_store_f64(o->data + (off + (pos + i) * s) * es, o->dtype, w[i]);
}
static int all_finite(const double* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!isfinite(a[i])) return 0;
  return 1;
}

/* ---- QR: Householder as LAPACK geqr2 + org2r (H_j = I - tau v v^T, v[0] = 1,
 * beta = -sign(alpha) ||x||, tau = 0 when the column below the diagonal is already zero).
 * Column-major workspaces (LAPACK's layout) so the column sweeps are contiguous:
 * a (m, n) -> v below the diagonal, R on and above; q (m, mq). */
static void qr1(double* a, int64_t m, int64_t n, double* tau, double* q, int64_t mq) {
  int64_t k = m < n ? m : n;
#define A_(i, j) a[(j) * m + (i)]
  for (int64_t j = 0; j < k; ++j) {
    double* v = &A_(0, j);
    double alpha = v[j], xn = 0;
    for (int64_t i = j + 1; i < m; ++i) xn = hypot(xn, v[i]);
    if (xn == 0) { tau[j] = 0; continue; }
    double beta = -copysign(hypot(alpha, xn), alpha);
    tau[j] = (beta - alpha) / beta;
    double sc = 1 / (alpha - beta);
    for (int64_t i = j + 1; i < m; ++i) v[i] *= sc;
    v[j] = beta;
    for (int64_t c = j + 1; c < n; ++c) { /* A[j:, c] -= tau v (v^T A[j:, c]) */
      double* y = &A_(0, c);
      double s = y[j];
      for (int64_t i = j + 1; i < m; ++i) s += v[i] * y[i];
      s *= tau[j];
      y[j] -= s;
      for (int64_t i = j + 1; i < m; ++i) y[i] -= s * v[i];
    }
  }
  if (!mq) return;
  for (int64_t c = 0; c < mq; ++c)
    for (int64_t i = 0; i < m; ++i) q[c * m + i] = i == c;
  for (int64_t j = k - 1; j >= 0; --j) { /* Q = H_0 ... H_{k-1} I */
    if (tau[j] == 0) continue;
    const double* v = &A_(0, j);
    for (int64_t c = 0; c < mq; ++c) {
      double* y = q + c * m;
      double s = y[j];
      for (int64_t i = j + 1; i < m; ++i) s += v[i] * y[i];
      s *= tau[j];
      y[j] -= s;
      for (int64_t i = j + 1; i < m; ++i) y[i] -= s * v[i];
    }
  }
#undef A_
}
/* stores the column-major (rows, cols) matrix w row-major at flat position pos; upper: only the upper
 * triangle of the first `keep` rows (zeros elsewhere: R) */
static void store_cm(const tpu_host_view_t* o, int64_t off, int64_t pos, const double* w, int64_t ld, int64_t rows,
                     int64_t cols, int upper, int64_t keep) {
  size_t es = tpu_dtype_size(o->dtype);
  int64_t s = o->strides[o->rank - 1];
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      double x = upper && (i >= keep || c < i) ? 0.0 : w[c * ld + i];
      tpu_host_store_f64(o->data + (off + (pos + i * cols + c) * s) * es, o->dtype, x);
    }
}

/* ---- symmetric eigenproblem: cyclic Jacobi. a (n, n) full symmetric; v (n, n) or NULL;
 * eigenvalues ascending into w, eigenvectors in the columns of v (sorted alike). */
static void jacobi_eigh(double* a, int64_t n, double* w, double* v, double* tmp) {
  if (v)
    for (int64_t i = 0; i < n * n; ++i) v[i] = (i / n) == (i % n);
  double nrm = 0;
  for (int64_t i = 0; i < n * n; ++i) nrm += a[i] * a[i];
  nrm = sqrt(nrm);
  for (int sweep = 0; sweep < 100; ++sweep) {
    int rotated = 0;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double apq = a[p * n + q];
        /* negligible next to its diagonal pair or to the whole matrix: LAPACK-level accuracy */
        if (fabs(apq) <= 1e-2 * DBL_EPSILON * sqrt(fabs(a[p * n + p] * a[q * n + q])) ||
            fabs(apq) <= 1e-3 * DBL_EPSILON * nrm)
          continue;
        rotated = 1;
        double app = a[p * n + p], aqq = a[q * n + q];
        double th = (aqq - app) / (2 * apq);
        double t = (th >= 0 ? 1.0 : -1.0) / (fabs(th) + sqrt(th * th + 1));
        if (!isfinite(th)) t = 1 / (2 * th); /* huge theta: t ~ 1/(2 theta) */
        double c = 1 / sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < n; ++k) { /* columns p, q */
          double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) { /* rows p, q */
          double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        a[p * n + q] = a[q * n + p] = 0;
        if (v)
          for (int64_t k = 0; k < n; ++k) {
            double vkp = v[k * n + p], vkq = v[k * n + q];
            v[k * n + p] = c * vkp - s * vkq;
            v[k * n + q] = s * vkp + c * vkq;
          }
      }
    if (!rotated) break;
  }
  /* selection sort by eigenvalue (stable enough; n is small next to the O(n^3) sweeps) */
  for (int64_t i = 0; i < n; ++i) w[i] = a[i * n + i];
  for (int64_t i = 0; i < n; ++i) {
    int64_t b = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (w[j] < w[b]) b = j;
    if (b == i) continue;
    double t = w[i]; w[i] = w[b]; w[b] = t;
    if (v)
      for (int64_t k = 0; k < n; ++k) { t = v[k * n + i]; v[k * n + i] = v[k * n + b]; v[k * n + b] = t; }
  }
  (void)tmp;
}

/* column j of u (m, ku) := a unit vector orthogonal to columns c < j with ok[c] (modified
 * Gram-Schmidt twice over the unit vectors e_0, e_1, ...) */
static void complete_col(double* u, int64_t m, int64_t ku, int64_t j, const unsigned char* ok, double* x) {
  for (int64_t e = 0; e < m; ++e) {
    for (int64_t i = 0; i < m; ++i) x[i] = i == e;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t c = 0; c < ku; ++c) {
        if (!ok[c]) continue;
        double s = 0;
        for (int64_t i = 0; i < m; ++i) s += u[i * ku + c] * x[i];
        for (int64_t i = 0; i < m; ++i) x[i] -= s * u[i * ku + c];
      }
    double nr = 0;
    for (int64_t i = 0; i < m; ++i) nr += x[i] * x[i];
    nr = sqrt(nr);
    if (nr > 0.5) {
      for (int64_t i = 0; i < m; ++i) u[i * ku + j] = x[i] / nr;
      return;
    }
  }
}

/* ---- SVD of a tall w (m, n), m >= n: one-sided Jacobi (Hestenes). On return s[0..n) descending,
 * u (m, ku) with ku >= n (columns n.. completed to an orthonormal set), v (n, n) with the right
 * singular vectors in columns. want_uv = 0: only s. x: m + n scratch, ok: ku flags. */
static void jacobi_svd(double* w, int64_t m, int64_t n, double* s, double* u, int64_t ku, double* v, int want_uv,
                       double* x, unsigned char* ok) {
  if (want_uv)
    for (int64_t i = 0; i < n * n; ++i) v[i] = (i / n) == (i % n);
  for (int sweep = 0; sweep < 80; ++sweep) {
    int rotated = 0;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double al = 0, be = 0, ga = 0;
        for (int64_t i = 0; i < m; ++i) {
          double wp = w[i * n + p], wq = w[i * n + q];
          al += wp * wp; be += wq * wq; ga += wp * wq;
        }
        if (ga == 0 || fabs(ga) <= 4 * DBL_EPSILON * sqrt(al * be)) continue;
        rotated = 1;
        double ze = (be - al) / (2 * ga);
        double t = (ze >= 0 ? 1.0 : -1.0) / (fabs(ze) + sqrt(1 + ze * ze));
        if (!isfinite(ze)) t = 1 / (2 * ze);
        double c = 1 / sqrt(1 + t * t), sn = c * t;
        for (int64_t i = 0; i < m; ++i) {
          double wp = w[i * n + p], wq = w[i * n + q];
          w[i * n + p] = c * wp - sn * wq;
          w[i * n + q] = sn * wp + c * wq;
        }
        if (want_uv)
          for (int64_t i = 0; i < n; ++i) {
            double vp = v[i * n + p], vq = v[i * n + q];
            v[i * n + p] = c * vp - sn * vq;
            v[i * n + q] = sn * vp + c * vq;
          }
      }
    if (!rotated) break;
  }
  int64_t* ord = (int64_t*)(ok + ku + (8 - (ku % 8))); /* n entries, aligned past ok */
  for (int64_t j = 0; j < n; ++j) {
    double nr = 0;
    for (int64_t i = 0; i < m; ++i) nr += w[i * n + j] * w[i * n + j];
    x[j] = sqrt(nr);
    ord[j] = j;
  }
  for (int64_t i = 1; i < n; ++i) { /* insertion sort, descending, stable */
    int64_t o = ord[i], j = i;
    while (j > 0 && x[ord[j - 1]] < x[o]) { ord[j] = ord[j - 1]; --j; }
    ord[j] = o;
  }
  for (int64_t j = 0; j < n; ++j) s[j] = x[ord[j]];
  if (!want_uv) return;
  double tiny = (n > 0 && s[0] > 0 ? s[0] : 0) * (double)(m > n ? m : n) * DBL_EPSILON;
  memset(ok, 0, (size_t)ku);
  for (int64_t j = 0; j < n; ++j) { /* u's columns in sorted order; v's columns permuted alike */
    int64_t o = ord[j];
    ok[j] = s[j] > tiny;
    for (int64_t i = 0; i < m; ++i) u[i * ku + j] = ok[j] ? w[i * n + o] / s[j] : 0;
  }
  double* vt = w; /* w is no longer needed: v permuted into it */
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) vt[i * n + j] = v[i * n + ord[j]];
  memcpy(v, vt, (size_t)(n * n) * sizeof(double));
  for (int64_t j = 0; j < ku; ++j)
    if (!ok[j]) { complete_col(u, m, ku, j, ok, x); ok[j] = 1; }
}

/* ---- batch driver */
typedef struct {
  const tpu_ir_op_t* op;
  const tpu_host_view_t *a, *out;
  int nb;
  int64_t m, n;
  pthread_mutex_t mu;
  int err; /* 1 out of memory, 2 non-finite input (SVD), 3 non-finite (EIGH) */
  int64_t err_batch;
} l2_job_t;

static void set_err(l2_job_t* J, int code, int64_t b) {
  pthread_mutex_lock(&J->mu);
  if (!J->err || b < J->err_batch) { J->err = code; J->err_batch = b; }
  pthread_mutex_unlock(&J->mu);
}

static void l2_worker(void* ctx, int64_t b0, int64_t b1) {
  l2_job_t* J = ctx;
  int64_t m = J->m, n = J->n, k = m < n ? m : n, mx = m > n ? m : n, t = J->op->i0, f = J->op->i1;
  /* workspace: a (m n) + q/u (mx mx) + r/v (mx mx) + s (mx) + scratch (2 mx) + flags/order */
  size_t words = (size_t)(m * n + 2 * mx * mx + 4 * mx + 8);
  double* w = malloc(words * sizeof(double));
  unsigned char* flags = malloc((size_t)(mx + 16 + 8 * mx));
  if (!w || !flags) { free(w); free(flags); set_err(J, 1, 0); return; }
  double *a = w, *q = a + m * n, *r = q + mx * mx, *s = r + mx * mx, *x = s + mx;
  for (int64_t b = b0; b < b1; ++b) {
    int64_t oo = tpu_host_linalg_batch_off(J->out, J->nb, b);
    if (t == TPU_IR_CUSTOM_QR) {
      int64_t mq = f == 0 ? k : f == 1 ? m : 0, kr = f == 1 ? m : k;
      tpu_host_linalg_load_mat(r, J->a, tpu_host_linalg_batch_off(J->a, J->nb, b), m, n); /* row-major (m, n) = column-major A^T ... */
      for (int64_t i = 0; i < m; ++i)                  /* ... transposed into column-major A */
        for (int64_t j = 0; j < n; ++j) a[j * m + i] = r[i * n + j];
      qr1(a, m, n, s, q, mq);
      store_cm(J->out, oo, 0, q, m, m, mq, 0, 0);
      store_cm(J->out, oo, m * mq, a, m, kr, n, 1, k);
      continue;
    }
    tpu_host_linalg_load_mat(a, J->a, tpu_host_linalg_batch_off(J->a, J->nb, b), m, n);
    if (t == TPU_IR_CUSTOM_EIGH) {
      int upper = (int)(f & 1), vec = (int)((f >> 1) & 1);
      for (int64_t i = 0; i < n; ++i) /* symmetrize from the chosen triangle */
        for (int64_t j = 0; j < n; ++j)
          if ((upper && j < i) || (!upper && j > i)) a[i * n + j] = a[j * n + i];
      if (!all_finite(a, n * n)) { set_err(J, 3, b); continue; }
      jacobi_eigh(a, n, s, vec ? q : NULL, x);
      store_flat(J->out, oo, 0, s, n);
      if (vec) store_flat(J->out, oo, n, q, n * n);
    } else { /* SVD */
      int full = (int)(f & 1), uv = (int)((f >> 1) & 1);
      if (!all_finite(a, m * n)) { set_err(J, 2, b); continue; }
      int64_t ku = full ? m : k, kv = full ? n : k;
      if (m >= n) { /* A = U S V^T directly */
        jacobi_svd(a, m, n, s, q, ku, r, uv, x, flags);
        store_flat(J->out, oo, uv ? m * ku : 0, s, k);
        if (!uv) continue;
        store_flat(J->out, oo, 0, q, m * ku);
        for (int64_t i = 0; i < kv; ++i) /* Vh = V^T: row i = column i of r (n, n) */
          for (int64_t j = 0; j < n; ++j) a[i * n + j] = r[j * n + i];
        store_flat(J->out, oo, m * ku + k, a, kv * n);
      } else { /* A^T = U' S V'^T: U = V' (m, m), Vh = U'^T (kv, n) */
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < m; ++j) q[i * m + j] = a[j * n + i];
        memcpy(a, q, (size_t)(m * n) * sizeof(double)); /* a := A^T (n, m) */
        jacobi_svd(a, n, m, s, q, kv, r, uv, x, flags);  /* q (n, kv), r (m, m) */
        store_flat(J->out, oo, uv ? m * ku : 0, s, k);
        if (!uv) continue;
        store_flat(J->out, oo, 0, r, m * m); /* ku = m here in both modes */
        for (int64_t i = 0; i < kv; ++i)    /* r (mx * mx words) is free now; a is too small for (kv, n) */
          for (int64_t j = 0; j < n; ++j) r[i * n + j] = q[j * kv + i];
        store_flat(J->out, oo, m * ku + k, r, kv * n);
      }
    }
  }
  free(w); free(flags);
}

static tpu_status_t l2_run(const tpu_ir_op_t* op, int nin, const tpu_host_view_t* xs, const tpu_host_view_t* out,
                           int parallel) {
  if (nin != 1 || xs[0].rank < 2 || out->rank != xs[0].rank - 1) return TPU_ERR(INTERNAL, "linalg2: operands");
  if ((xs[0].dtype != TPU_DTYPE_F32 && xs[0].dtype != TPU_DTYPE_F64) ||
      (out->dtype != TPU_DTYPE_F32 && out->dtype != TPU_DTYPE_F64))
    return TPU_ERR(INTERNAL, "linalg2: dtype");
  int r = xs[0].rank, nb = r - 2;
  l2_job_t J = {.op = op, .a = &xs[0], .out = out, .nb = nb, .mu = PTHREAD_MUTEX_INITIALIZER};
  J.m = xs[0].sizes[r - 2]; J.n = xs[0].sizes[r - 1];
  int64_t m = J.m, n = J.n, k = m < n ? m : n, f = op->i1, len;
  switch (op->i0) {
    case TPU_IR_CUSTOM_QR: {
      int64_t mq = f == 0 ? k : f == 1 ? m : 0, kr = f == 1 ? m : k;
      len = m * mq + kr * n;
      break;
    }
    case TPU_IR_CUSTOM_EIGH:
      if (m != n) return TPU_ERR(INTERNAL, "linalg2: square matrices expected");
      len = (f & 2) ? n + n * n : n;
      break;
    case TPU_IR_CUSTOM_SVD:
      len = (f & 2) ? m * ((f & 1) ? m : k) + k + ((f & 1) ? n : k) * n : k;
      break;
    default: return TPU_ERR(INTERNAL, "linalg2: target %lld", (long long)op->i0);
  }
  if (out->sizes[r - 2] != len) return TPU_ERR(INTERNAL, "linalg2: result shape");
  int64_t batch = 1;
  for (int d = 0; d < nb; ++d) {
    if (xs[0].sizes[d] != out->sizes[d]) return TPU_ERR(INTERNAL, "linalg2: batch shapes");
    batch *= out->sizes[d];
  }
  if (batch == 0 || len == 0) return TPU_OK;
  if (parallel) {
    int64_t mx = m > n ? m : n, work = 8 * mx * mx * mx + 1;
    tpu_pool_parallel_for(batch, TPU_MAX(1, 32768 / work), l2_worker, &J);
  } else {
    l2_worker(&J, 0, batch);
  }
  pthread_mutex_destroy(&J.mu);
  char where[48] = "";
  if (nb > 0) snprintf(where, sizeof where, ": (Batch element %lld)", (long long)J.err_batch);
  if (J.err == 1) return TPU_ERR(OUT_OF_MEMORY, "linalg: out of host memory for a workspace");
  if (J.err == 2)
    return TPU_ERR(LINALG_ERROR, "linalg.svd%s: The algorithm failed to converge because the input matrix "
                   "contained non-finite values.", where);
  if (J.err == 3)
    return TPU_ERR(LINALG_ERROR, "linalg.eigh%s: The algorithm failed to converge because the input matrix is "
                   "ill-conditioned or has too many repeated eigenvalues (it contains non-finite values).", where);
  return TPU_OK;
}

tpu_status_t tpu_host_k_linalg2(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  return l2_run(op, n, xs, out, 1);
}
tpu_status_t tpu_host_k_linalg2_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out) {
  return l2_run(op, n, xs, out, 0);
}
