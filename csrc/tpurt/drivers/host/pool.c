/* pool.c — host kernel for TPU_IR_REDUCE_WINDOW (pooling windows over trailing dims).
 *
 * x [B..., S_0..S_{n-1}] -> out [B..., O_0..O_{n-1}], n = op->i1 spatial dims (1..3);
 * a[0][j] window, a[1][j] stride, a[2][j] low padding and a[2][n + j] dilation (0 = 1)
 * of spatial dim j; op->i0 the monoid (SUM, MAX, MIN, NANMAX). Window positions
 * outside the input are skipped (they contribute the identity; a window with no
 * position yields the identity). Accumulates in f64 (exact for max/min); reads and
 * writes stay within the views. The pooling lowerings (lower/norm_pool.c) compose
 * gathers instead; this kernel serves graphs that use the opcode directly. */
#include <math.h>

#include "drivers/host/host.h"

static double rw_identity(int monoid) {
  switch (monoid) {
    case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX: return -INFINITY;
    case TPU_IR_MONOID_MIN: return INFINITY;
    default: return 0.0;
  }
}
static double rw_combine(int monoid, double acc, double v) {
  switch (monoid) {
    case TPU_IR_MONOID_MAX: return v > acc ? v : acc;
    case TPU_IR_MONOID_NANMAX: return isnan(acc) ? acc : (isnan(v) || v > acc) ? v : acc;
    case TPU_IR_MONOID_MIN: return v < acc ? v : acc;
    default: return acc + v;
  }
}

tpu_status_t tpu_host_k_reduce_window(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  int n = (int)op->i1, monoid = (int)op->i0;
  if (n < 1 || n > 3 || x->rank != out->rank || x->rank < n)
    return TPU_ERR(INVALID_ARGUMENT, "host: reduce_window: bad ranks (%d spatial dims, %d -> %d)", n, x->rank, out->rank);
  if (monoid != TPU_IR_MONOID_SUM && monoid != TPU_IR_MONOID_MAX && monoid != TPU_IR_MONOID_MIN &&
      monoid != TPU_IR_MONOID_NANMAX)
    return TPU_ERR(UNSUPPORTED, "host: reduce_window: monoid %d not supported", monoid);
  int lead = x->rank - n;
  int64_t nb = 1, no = 1;
  for (int d = 0; d < lead; ++d) {
    if (x->sizes[d] != out->sizes[d]) return TPU_ERR(INVALID_ARGUMENT, "host: reduce_window: batch dims differ");
    nb *= x->sizes[d];
  }
  int64_t K[3] = {1, 1, 1}, St[3] = {1, 1, 1}, Pd[3] = {0, 0, 0}, Dl[3] = {1, 1, 1}, S[3] = {1, 1, 1}, O[3] = {1, 1, 1};
  int64_t xs[3] = {0, 0, 0}, os[3] = {0, 0, 0};
  for (int j = 0; j < n; ++j) {
    K[j] = op->a[0][j]; St[j] = op->a[1][j]; Pd[j] = op->a[2][j]; Dl[j] = op->a[2][n + j] ? op->a[2][n + j] : 1;
    S[j] = x->sizes[lead + j]; O[j] = out->sizes[lead + j];
    xs[j] = x->strides[lead + j]; os[j] = out->strides[lead + j];
    if (K[j] < 0 || St[j] < 1 || Dl[j] < 1) return TPU_ERR(INVALID_ARGUMENT, "host: reduce_window: bad window");
    no *= O[j];
  }
  size_t xe = tpu_dtype_size(x->dtype), oe = tpu_dtype_size(out->dtype);
  double id = rw_identity(monoid);
  for (int64_t b = 0; b < nb; ++b) {
    int64_t xo = 0, oo = 0, r = b;
    for (int d = lead - 1; d >= 0; --d) {
      int64_t i = r % x->sizes[d];
      r /= x->sizes[d];
      xo += i * x->strides[d]; oo += i * out->strides[d];
    }
    for (int64_t q = 0; q < no; ++q) {
      int64_t o[3] = {0, 0, 0}, rq = q;
      for (int j = n - 1; j >= 0; --j) { o[j] = rq % O[j]; rq /= O[j]; }
      double acc = id;
      for (int64_t k0 = 0; k0 < K[0]; ++k0) {
        int64_t p0 = o[0] * St[0] - Pd[0] + k0 * Dl[0];
        if (p0 < 0 || p0 >= S[0]) continue;
        for (int64_t k1 = 0; k1 < (n > 1 ? K[1] : 1); ++k1) {
          int64_t p1 = n > 1 ? o[1] * St[1] - Pd[1] + k1 * Dl[1] : 0;
          if (p1 < 0 || p1 >= S[1]) continue;
          for (int64_t k2 = 0; k2 < (n > 2 ? K[2] : 1); ++k2) {
            int64_t p2 = n > 2 ? o[2] * St[2] - Pd[2] + k2 * Dl[2] : 0;
            if (p2 < 0 || p2 >= S[2]) continue;
            int64_t off = xo + p0 * xs[0] + p1 * xs[1] + p2 * xs[2];
            acc = rw_combine(monoid, acc, tpu_host_load_f64(x->data + off * (int64_t)xe, x->dtype));
          }
        }
      }
      int64_t off = oo + o[0] * os[0] + o[1] * os[1] + o[2] * os[2];
      tpu_host_store_f64(out->data + off * (int64_t)oe, out->dtype, acc);
    }
  }
  return TPU_OK;
}
