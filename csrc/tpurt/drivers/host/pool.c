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
#include <string.h>

#include "drivers/host/host.h"
#include "drivers/host/maxpool.h"

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

/* ---- TPU_IR_CUSTOM_POOL_ARGMAX: max-pool window argmax as PyTorch's CPU kernels (a stride
 * of 0 marks an adaptive dim):
 * the window's positions inside the input in row-major order, maxindex starting at
 * the first of them, replaced when val > max or val is NaN (so the last NaN wins).
 * A window without positions yields its (clipped) start offset, which PyTorch's
 * output-size rule never produces. One task per (batch row, first output dim). */
typedef struct {
  const tpu_host_view_t *x, *out;
  int n, lead;
  int64_t K[3], St[3], Pd[3], Dl[3], S[3], O[3], xs[3], os[3];
} argmax_job_t;

/* window of output o along slot j: [start, end) before skipping negative positions; stride 0
 * marks an adaptive dim ([floor(o S / O), ceil((o + 1) S / O)), as adaptive_max_pool) */
static inline void argmax_range(const argmax_job_t* J, int j, int64_t o, int64_t* s, int64_t* e) {
  if (J->St[j] == 0) {
    *s = (o * J->S[j]) / J->O[j];
    *e = ((o + 1) * J->S[j] + J->O[j] - 1) / J->O[j];
    return;
  }
  *s = o * J->St[j] - J->Pd[j];
  *e = TPU_MIN(*s + (J->K[j] - 1) * J->Dl[j] + 1, J->S[j]);
}

#define ARGMAX_BODY(T, LOAD)                                                                      \
  for (int64_t o1 = 0; o1 < J->O[1]; ++o1)                                                        \
    for (int64_t o2 = 0; o2 < J->O[2]; ++o2) {                                                    \
      int64_t s0, s1, s2, e0, e1, e2;                                                             \
      argmax_range(J, 0, o0, &s0, &e0);                                                           \
      argmax_range(J, 1, o1, &s1, &e1);                                                           \
      argmax_range(J, 2, o2, &s2, &e2);                                                           \
      while (s0 < 0) s0 += J->Dl[0];                                                              \
      while (s1 < 0) s1 += J->Dl[1];                                                              \
      while (s2 < 0) s2 += J->Dl[2];                                                              \
      int64_t best = (s0 * J->S[1] + s1) * J->S[2] + s2;                                          \
      T m = -INFINITY;                                                                            \
      for (int64_t p0 = s0; p0 < e0; p0 += J->Dl[0])                                              \
        for (int64_t p1 = s1; p1 < e1; p1 += J->Dl[1])                                            \
          for (int64_t p2 = s2; p2 < e2; p2 += J->Dl[2]) {                                        \
            T v = LOAD(xo + p0 * J->xs[0] + p1 * J->xs[1] + p2 * J->xs[2]);                       \
            if (v > m || v != v) { m = v; best = (p0 * J->S[1] + p1) * J->S[2] + p2; }            \
          }                                                                                       \
      *(int64_t*)(J->out->data + (oo + o0 * J->os[0] + o1 * J->os[1] + o2 * J->os[2]) * 8) = best; \
    }

static void argmax_worker(void* ctx, int64_t begin, int64_t end) {
  const argmax_job_t* J = ctx;
  const tpu_host_view_t *x = J->x, *out = J->out;
  for (int64_t t = begin; t < end; ++t) {
    int64_t b = t / J->O[0], o0 = t % J->O[0], xo = 0, oo = 0, r = b;
    for (int d = J->lead - 1; d >= 0; --d) {
      int64_t i = r % x->sizes[d];
      r /= x->sizes[d];
      xo += i * x->strides[d]; oo += i * out->strides[d];
    }
    /* f32, bf16 and f16 compare as float (exact: the same order and NaNs as in double) */
    if (x->dtype == TPU_DTYPE_F32) {
      const float* xp = (const float*)x->data;
#define LOAD_F32(off) (xp[(off)])
      ARGMAX_BODY(float, LOAD_F32)
#undef LOAD_F32
    } else if (x->dtype == TPU_DTYPE_BF16) {
      const uint16_t* xp = (const uint16_t*)(const void*)x->data;
#define LOAD_BF16(off) tpu_bf16_to_f32(xp[(off)])
      ARGMAX_BODY(float, LOAD_BF16)
#undef LOAD_BF16
    } else if (x->dtype == TPU_DTYPE_F16) {
      const uint16_t* xp = (const uint16_t*)(const void*)x->data;
#define LOAD_F16(off) tpu_f16_to_f32(xp[(off)])
      ARGMAX_BODY(float, LOAD_F16)
#undef LOAD_F16
    } else if (x->dtype == TPU_DTYPE_F64) {
      const double* xp = (const double*)x->data;
#define LOAD_F64(off) (xp[(off)])
      ARGMAX_BODY(double, LOAD_F64)
#undef LOAD_F64
    } else {
      size_t es = tpu_dtype_size(x->dtype);
#define LOAD_ANY(off) tpu_host_load_f64(x->data + (off) * (int64_t)es, x->dtype)
      ARGMAX_BODY(double, LOAD_ANY)
#undef LOAD_ANY
    }
  }
}

tpu_status_t tpu_host_k_pool_argmax(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  if (tpu_host_maxpool2d_argmax(op, x, out)) return TPU_OK; /* maxpool.c: 2-d fixed windows, contiguous planes */
  int n = (int)op->i1;
  if (n < 1 || n > 3 || x->rank != out->rank || x->rank < n || out->dtype != TPU_DTYPE_I64)
    return TPU_ERR(INVALID_ARGUMENT, "host: pool_argmax: bad operands (%d spatial dims, rank %d -> %d)", n, x->rank, out->rank);
  argmax_job_t J;
  memset(&J, 0, sizeof J);
  J.x = x; J.out = out; J.n = n; J.lead = x->rank - n;
  int64_t nb = 1;
  for (int d = 0; d < J.lead; ++d) {
    if (x->sizes[d] != out->sizes[d]) return TPU_ERR(INVALID_ARGUMENT, "host: pool_argmax: batch dims differ");
    nb *= x->sizes[d];
  }
  /* spatial dims right-aligned into 3 slots (missing leading slots have size 1) */
  for (int j = 0; j < 3; ++j) { J.K[j] = 1; J.St[j] = 1; J.Dl[j] = 1; J.S[j] = 1; J.O[j] = 1; }
  for (int j = 0; j < n; ++j) {
    int s = 3 - n + j;
    J.K[s] = op->a[0][j]; J.St[s] = op->a[1][j]; J.Pd[s] = op->a[2][j]; J.Dl[s] = op->a[2][n + j] ? op->a[2][n + j] : 1;
    J.S[s] = x->sizes[J.lead + j]; J.O[s] = out->sizes[J.lead + j];
    J.xs[s] = x->strides[J.lead + j]; J.os[s] = out->strides[J.lead + j];
    if (J.St[s] == 0) { J.K[s] = 1; J.Dl[s] = 1; J.Pd[s] = 0; } /* adaptive */
    if (J.K[s] < 1 || J.St[s] < 0 || J.Dl[s] < 1 || J.Pd[s] < 0)
      return TPU_ERR(INVALID_ARGUMENT, "host: pool_argmax: bad window");
  }
  int64_t tasks = nb * J.O[0];
  if (tasks == 0 || J.O[1] * J.O[2] == 0) return TPU_OK;
  if (x->sizes[J.lead] == 0) return TPU_ERR(INVALID_ARGUMENT, "host: pool_argmax: empty input");
  int64_t per = J.O[1] * J.O[2] * J.K[0] * J.K[1] * J.K[2] * 4;
  tpu_pool_parallel_for(tasks, TPU_MAX((int64_t)1, 32768 / TPU_MAX(per, (int64_t)1)), argmax_worker, &J);
  return TPU_OK;
}
