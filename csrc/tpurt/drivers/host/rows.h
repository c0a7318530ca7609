/* rows.h — row kernels of the host driver (internal): softmax / log_softmax and their
 * gradients along one dim, the custom-call targets the softmax lowerings emit (lower/nn.c):
 *
 *   ROWS_SOFTMAX     (x [A, N, I])         -> [A, N, I]: softmax over N of each (a, i) row;
 *                                             i1 = 1: log_softmax
 *   ROWS_SOFTMAX_BWD (g [A, N, I], y)      -> [A, N, I]: softmax: y (g - sum(g y));
 *                                             i1 = 1 (y = log_softmax): g - exp(y) sum(g)
 *
 * Same math as the composite IR (max, exp of x - max, sum, divide / subtract the log) in the
 * same dtype (f32 or f64, operands and result alike): a fully -inf row gives NaN as PyTorch's
 * CPU kernel. f32 rows take three passes forward (max; exp, store and sum; multiply by 1 / sum)
 * and two backward (dot; write), with sums in 16 f32 lanes added as a tree (the IR's reduce sums
 * in f64, so results agree up to float rounding); exp is expf_fma's (rows_impl.h, tile_expf's
 * polynomial with FMA, <= 2 ulp). Contiguous rows run in place; rows along a strided dim whose
 * neighbours are adjacent in memory (softmax over dim != -1 of a contiguous tensor: I innermost) run
 * 8 at a time, one vector lane each, sums in order along the dim; other strided rows go through a
 * per-chunk scratch row.
 * f64 rows use libm exp/log in double. Rows (and layer-norm rows, norm.c's channels) run on the thread pool in up
 * to 4 chunks per thread (tpu_pool_parallel_for_dynamic: a late or descheduled worker on shared cores leaves its
 * share to the others); each row or channel is one chunk's, so the bits do not depend on the thread count.
 *
 *   ROWS_LAYER_NORM     (x [M, N], mean [M], rstd [M], w [N]?, b [N]?) -> [M, N]:
 *                       (x - mean) rstd [* w] [+ b]; i1 bit 0: w given, bit 1: b given
 *   ROWS_LAYER_NORM_BWD (g [M, N], x, mean [M], rstd [M], w [N]?) -> d x [M, N]: with dxh = g [* w],
 *                       rstd ((dxh - sum(dxh) / N) - (x - mean) rstd (rstd sum(dxh (x - mean)) / N));
 *                       i1 bit 0: w given
 *
 * The layer-norm pair takes the row statistics from outside (CHANNEL_STATS, norm.h) and makes one
 * pass forward and two backward (sums; write) per row; sums in 16 f32 lanes. f32 only; f64
 * layer norm keeps the composite IR.
 *
 *   GELU     (x [any shape] f32)    -> same: x Phi(x), Phi = (1 + erf(x / sqrt 2)) / 2 (approximate="none")
 *   GELU_BWD (g, x [same shape] f32) -> g (Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi))
 *
 * One pass per element (rows_impl.h): Phi from Abramowitz-Stegun 7.1.26's erfc, as PyTorch's vectorized
 * CPU erf (absolute error <= 1.5e-7 in erf), sharing its exp with the pdf; the composite IR took 5
 * (forward) and ~14 (backward) tile passes and an erf with two branches. Contiguous operands run as one
 * flat array split over the pool; others row by row along the last dim (gathered when strided).
 *
 *   COL_SUMS (x [M, N] f32)                       -> [N]: sum over M (a bias gradient); i1 = 0
 *            (g [M, N], x, mean [M], rstd [M])    -> [2, N]: sum_M g (x - mean) rstd, sum_M g (layer-norm weight
 *                                                    and bias gradients); i1 = 1
 *
 * Each column adds its f32 terms in row order into a double (the IR's reduce also sums in f64), rounded once;
 * vectorized across columns, parallel over column blocks.
 *
 *   SILU     (x [any shape] f32)     -> same: x / (1 + exp(-x))
 *   SILU_BWD (g, x [same shape] f32) -> g s (1 + x (1 - s)), s = 1 / (1 + exp(-x))
 *
 * PyTorch's CPU formulas in its order of operations, one pass (the composite IR took 2 forward and 7
 * backward tile passes); exp is vmath's with explicit fmaf. Run as GELU (flat or row by row).
 *
 *   LERP (start, end [same shape] f32, weight [rank 0 or same shape] f32) -> fma(c, end - start, base):
 *        c, base = w, start if |w| < 0.5 else w - 1, end (PyTorch's CPU lerp, one rounding; AdamW's
 *        exp_avg.lerp_ took 6 tile passes).
 *   ADDC (self, t1, t2 [same shape] f32, value [rank 0] f32) -> i1 = 0: fma(value t1, t2, self) (addcmul),
 *        i1 = 1: self + (value t1) / t2 (addcdiv): PyTorch's CPU order and roundings (AdamW's second
 *        moment and update). */
#ifndef TPURT_DRIVERS_HOST_ROWS_H_
#define TPURT_DRIVERS_HOST_ROWS_H_

#include "drivers/host/host.h"

tpu_status_t tpu_host_k_rows(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);

/* One contiguous f32 row of n elements (n >= 1), per ISA (rows_impl.h). */
typedef struct {
  void (*softmax)(const float* x, float* y, int64_t n, int log);
  void (*softmax_bwd)(const float* g, const float* y, float* o, int64_t n, int log);
  void (*layer_norm)(const float* x, float mean, float rstd, const float* w, const float* b, float* y, int64_t n);
  void (*layer_norm_bwd)(const float* g, const float* x, float mean, float rstd, const float* w, float* dx, int64_t n);
  void (*gelu)(const float* x, float* y, int64_t n);
  void (*gelu_bwd)(const float* g, const float* x, float* o, int64_t n);
  void (*col_sums)(const float* x, int64_t ld, int64_t m, double* acc, int64_t n);
  void (*ln_col_sums)(const float* g, int64_t ldg, const float* x, int64_t ldx, const float* mean, int64_t ms,
                      const float* rstd, int64_t rs, int64_t m, double* a1, double* a2, int64_t n);
  void (*silu)(const float* x, float* y, int64_t n);
  void (*silu_bwd)(const float* g, const float* x, float* o, int64_t n);
  void (*lerp)(const float* a, const float* b, const float* w, int64_t ws, float* o, int64_t n);
  void (*addc)(const float* s, const float* a, const float* b, float v, float* o, int64_t n, int div);
  /* a contiguous f32 run's sums in double, one pass (norm.c): g NULL: *s1 = sum (x - m), *s2 = sum (x - m)^2;
   * else *s1 = sum g, *s2 = sum g (x - m) */
  void (*stat2_f32)(const float* g, const float* x, int64_t n, double m, double* s1, double* s2);
  /* stat2_f32 of count runs of n elements at x + r st (g + r st), shifted by m[r] (m NULL: the run's first x) */
  void (*stat2_runs)(const float* g, const float* x, int64_t st, int64_t n, int64_t count, const double* m, double* s1,
                     double* s2);
  /* channel affine rows (norm.c): row r of n elements, o = u a[r] + c[r], or u a[r] + v b[r] + c[r] (v non-NULL),
   * f32 in that order (no FMA); rows r at u + r us, v + r vs, o + r os */
  void (*affine_rows)(const float* u, int64_t us, const float* v, int64_t vs, float* o, int64_t os, int64_t n,
                      int64_t count, const float* a, const float* b, const float* c);
  /* softmax / its gradient over n elements of w (1..8) adjacent rows at once: element k of row l at p[k * stride + l] */
  void (*softmax_cols)(const float* x, int64_t xs, float* y, int64_t ys, int64_t n, int64_t w, int log);
  void (*softmax_cols_bwd)(const float* g, int64_t gs, const float* y, int64_t ys, float* o, int64_t os, int64_t n,
                           int64_t w, int log);
} tpu_host_rows_ops_t;
extern const tpu_host_rows_ops_t tpu_host_rows_ops_base, tpu_host_rows_ops_avx2, tpu_host_rows_ops_avx512;
/* The row kernels for this CPU (AVX-512, AVX2+FMA or base), chosen once. Thread-safe. */
const tpu_host_rows_ops_t* tpu_host_rows_ops(void);

#endif /* TPURT_DRIVERS_HOST_ROWS_H_ */
