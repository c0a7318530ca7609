/* rows.c — custom targets ROWS_SOFTMAX / ROWS_SOFTMAX_BWD (see rows.h): softmax, log_softmax and
 * their gradients one row at a time, a few passes over each row instead of the generic
 * reduce + elementwise executor's max / exp / sum / divide intermediates. Also the base-ISA
 * build of the contiguous f32 row kernels (rows_impl.h). */
#include <math.h>
#include <stdlib.h>

#define ROWS_SUFFIX base
#include "drivers/host/rows_impl.h"

static const tpu_host_rows_ops_t* rows_ops(void) {
  static const tpu_host_rows_ops_t* ops;
  const tpu_host_rows_ops_t* o = __atomic_load_n(&ops, __ATOMIC_ACQUIRE);
  if (!o) {
    o = tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma() ? &tpu_host_rows_ops_avx512
        : tpu_cpu_has_avx2_fma() ? &tpu_host_rows_ops_avx2 : &tpu_host_rows_ops_base;
    __atomic_store_n(&ops, o, __ATOMIC_RELEASE);
  }
  return o;
}

/* ---- f64 rows (strided), libm in double, same formulas */
static void softmax_f64(const double* x, int64_t xs, double* y, int64_t ys, int64_t n, int lg) {
  double m = -INFINITY, s = 0;
  for (int64_t i = 0; i < n; ++i) m = x[i * xs] > m ? x[i * xs] : m;
  for (int64_t i = 0; i < n; ++i) s += exp(x[i * xs] - m);
  if (lg) {
    double ls = log(s);
    for (int64_t i = 0; i < n; ++i) y[i * ys] = (x[i * xs] - m) - ls;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i * ys] = exp(x[i * xs] - m) / s;
  }
}
static void softmax_bwd_f64(const double* g, int64_t gs, const double* y, int64_t ys, double* o, int64_t os,
                            int64_t n, int log) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += log ? g[i * gs] : g[i * gs] * y[i * ys];
  for (int64_t i = 0; i < n; ++i)
    o[i * os] = log ? g[i * gs] - exp(y[i * ys]) * s : y[i * ys] * (g[i * gs] - s);
}

typedef struct {
  const tpu_host_rows_ops_t* ops;
  const tpu_host_view_t *x, *y, *out; /* forward: x; backward: x = g, y = y */
  int bwd, log, f64;
  int64_t N, I;
  int oom; /* set (atomically) by a worker whose scratch allocation failed */
} rows_job_t;

static int64_t row_off(const tpu_host_view_t* v, int64_t r, int64_t I) {
  return (r / I) * v->strides[0] + (r % I) * v->strides[2];
}

static void rows_worker(void* ctx, int64_t r0, int64_t r1) {
  rows_job_t* J = ctx;
  const int64_t N = J->N;
  const tpu_host_view_t *x = J->x, *y = J->y, *o = J->out;
  if (J->f64) {
    for (int64_t r = r0; r < r1; ++r) {
      const double* xp = (const double*)x->data + row_off(x, r, J->I);
      double* op = (double*)o->data + row_off(o, r, J->I);
      if (J->bwd) softmax_bwd_f64(xp, x->strides[1], (const double*)y->data + row_off(y, r, J->I), y->strides[1], op,
                                  o->strides[1], N, J->log);
      else softmax_f64(xp, x->strides[1], op, o->strides[1], N, J->log);
    }
    return;
  }
  int contig = x->strides[1] == 1 && o->strides[1] == 1 && (!J->bwd || y->strides[1] == 1);
  float* tmp = NULL;
  if (!contig && !(tmp = malloc((size_t)N * (J->bwd ? 3 : 2) * sizeof(float)))) {
    __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const float* xp = (const float*)x->data + row_off(x, r, J->I);
    const float* yp = J->bwd ? (const float*)y->data + row_off(y, r, J->I) : NULL;
    float* op = (float*)o->data + row_off(o, r, J->I);
    if (contig) {
      if (J->bwd) J->ops->softmax_bwd(xp, yp, op, N, J->log);
      else J->ops->softmax(xp, op, N, J->log);
      continue;
    }
    float *tx = tmp, *ty = tmp + N, *to = tmp + (J->bwd ? 2 * N : N);
    for (int64_t i = 0; i < N; ++i) tx[i] = xp[i * x->strides[1]];
    if (J->bwd) for (int64_t i = 0; i < N; ++i) ty[i] = yp[i * y->strides[1]];
    if (J->bwd) J->ops->softmax_bwd(tx, ty, to, N, J->log);
    else J->ops->softmax(tx, to, N, J->log);
    for (int64_t i = 0; i < N; ++i) op[i * o->strides[1]] = to[i];
  }
  free(tmp);
}

static int same3(const tpu_host_view_t* v, const tpu_host_view_t* o) {
  return v->rank == 3 && v->dtype == o->dtype && v->sizes[0] == o->sizes[0] && v->sizes[1] == o->sizes[1] &&
         v->sizes[2] == o->sizes[2];
}

tpu_status_t tpu_host_k_rows(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const int bwd = op->i0 == TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD;
  if (n != (bwd ? 2 : 1) || out->rank != 3)
    return TPU_ERR(INTERNAL, "host: row softmax with %d operands of result rank %d", n, out->rank);
  if (out->dtype != TPU_DTYPE_F32 && out->dtype != TPU_DTYPE_F64)
    return TPU_ERR(UNSUPPORTED, "host: row softmax of %s", tpu_dtype_name(out->dtype));
  for (int k = 0; k < n; ++k)
    if (!same3(&xs[k], out)) return TPU_ERR(INTERNAL, "host: row softmax operand %d does not match its result", k);
  rows_job_t J = {.ops = rows_ops(), .x = &xs[0], .y = bwd ? &xs[1] : NULL, .out = out, .bwd = bwd,
                  .log = op->i1 != 0, .f64 = out->dtype == TPU_DTYPE_F64, .N = out->sizes[1], .I = out->sizes[2]};
  const int64_t rows = out->sizes[0] * out->sizes[2];
  if (rows == 0 || J.N == 0) return TPU_OK;
  tpu_pool_parallel_for(rows, TPU_MAX((int64_t)1, 16384 / J.N), rows_worker, &J);
  if (J.oom) return TPU_ERR(OUT_OF_MEMORY, "host: row softmax: out of memory for a %lld-element scratch row",
                            (long long)J.N);
  return TPU_OK;
}
