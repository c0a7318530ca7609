/* scan.c — log-cumsum-exp along one dim (see scan.h). Lines run in parallel. */
#include <math.h>

#include "drivers/host/scan.h"

/* PyTorch's _log_add_exp_helper: equal infinities stay themselves, NaN propagates */
static double log_add_exp(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  double lo = x < y ? x : y, hi = x < y ? y : x;
  if (lo != hi || isfinite(lo)) return hi + log1p(exp(lo - hi));
  return x;
}
static double ld(const tpu_host_view_t* v, int64_t off) {
  return v->dtype == TPU_DTYPE_F64 ? ((const double*)v->data)[off] : (double)((const float*)v->data)[off];
}
static void st(const tpu_host_view_t* v, int64_t off, double x) {
  if (v->dtype == TPU_DTYPE_F64) ((double*)v->data)[off] = x;
  else ((float*)v->data)[off] = (float)x;
}

typedef struct { const tpu_host_view_t *x, *out; int dim; } lcse_job_t;
static void lcse_worker(void* ctx, int64_t b, int64_t e) {
  const lcse_job_t* J = ctx;
  const tpu_host_view_t *x = J->x, *out = J->out;
  int dim = J->dim;
  int64_t n = x->sizes[dim];
  for (int64_t line = b; line < e; ++line) {
    int64_t rem = line, xo = 0, oo = 0;
    for (int d = x->rank - 1; d >= 0; --d) {
      if (d == dim) continue;
      int64_t i = rem % x->sizes[d];
      rem /= x->sizes[d];
      xo += i * x->strides[d]; oo += i * out->strides[d];
    }
    double acc = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      acc = log_add_exp(acc, ld(x, xo + i * x->strides[dim]));
      st(out, oo + i * out->strides[dim], acc);
    }
  }
}
static tpu_status_t check(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out, int64_t* lines) {
  int dim = (int)op->i1;
  if ((x->dtype != TPU_DTYPE_F32 && x->dtype != TPU_DTYPE_F64) || out->dtype != x->dtype || out->rank != x->rank ||
      dim < 0 || dim >= x->rank)
    return TPU_ERR(INTERNAL, "logcumsumexp: operand types");
  int64_t n = 1;
  for (int d = 0; d < x->rank; ++d) {
    if (out->sizes[d] != x->sizes[d]) return TPU_ERR(INTERNAL, "logcumsumexp: shapes");
    n *= x->sizes[d];
  }
  *lines = n ? n / x->sizes[dim] : 0;
  return TPU_OK;
}
tpu_status_t tpu_host_k_logcumsumexp(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  int64_t lines = 0;
  TPU_RETURN_IF_ERROR(check(op, x, out, &lines));
  lcse_job_t J = {x, out, (int)op->i1};
  if (lines) tpu_pool_parallel_for(lines, TPU_MAX(1, 16384 / TPU_MAX(1, x->sizes[J.dim])), lcse_worker, &J);
  return TPU_OK;
}
tpu_status_t tpu_host_k_logcumsumexp_ref(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  int64_t lines = 0;
  TPU_RETURN_IF_ERROR(check(op, x, out, &lines));
  lcse_job_t J = {x, out, (int)op->i1};
  if (lines) lcse_worker(&J, 0, lines);
  return TPU_OK;
}
