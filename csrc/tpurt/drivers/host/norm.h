/* norm.h — per-channel statistics and affine maps of the host driver (internal): the two custom-call
 * targets batch norm lowers to (lower/norm_pool.c; layer norm's statistics too), and group norm's four:
 *
 *   CHANNEL_STATS  (x [A, B, I])              -> [2, B]: mean and biased variance over (A, I)
 *                  (g, x [A, B, I], m [B])    -> [2, B]: sum g and sum g * (x - m[b]) over (A, I)
 *   CHANNEL_AFFINE (x [A, B, I], a [B], c [B])            -> x * a[b] + c[b]
 *                  (u, v [A, B, I], a [B], b [B], c [B])  -> u * a[b] + v * b[b] + c[b]
 *
 * Legend: A outer (batch), B channels (or batch x groups), I inner (spatial). Every view may
 * have any strides (channels_last included); all operands and the result share one dtype, f32 or
 * f64, or the full [A, B, I] operands (and CHANNEL_AFFINE's result) are bf16 / f16 with f32 vectors and
 * statistics (read widened, the affine map in f32 rounded once: no converted copies). Sums accumulate
 * in double (two passes for the variance). `_ref` twins are plain loops.
 *
 * Group norm (lower/norm_pool.c), x [N, C, I] (I = HxW) with G groups of Cg = C / G channels; [N, G] statistics and
 * [C] parameters in dt (f32, or f64 with f64 x; bf16 / f16 x read as they are, f32 math rounded once):
 *   GROUP_NORM_STATS (x, eps rank 0)                          -> [2, N, G] mean, rstd = 1 / sqrt(var + eps)
 *   GROUP_NORM       (x, mean, rstd, w?, b?)                  -> y = (x - mean) rstd w + b = x a + c per (n, c)
 *   GROUP_NORM_SUMS  (g, x, mean, rstd)                       -> [2, N + 1, C]: per (n, c) sum g, sum g (x - mean);
 *                                                                row N: d bias, d weight (sums over n in double)
 *   GROUP_NORM_BWD   (g, x, mean, rstd, w?, sums?)            -> d x = g a + x b + c per (n, c) from the sums
 * Group statistics in double as CHANNEL_STATS (one shifted pass over f32 unit-stride runs, else two passes); one
 * task per group / channel, so the bits do not depend on the thread count. */
#ifndef TPURT_DRIVERS_HOST_NORM_H_
#define TPURT_DRIVERS_HOST_NORM_H_

#include "drivers/host/host.h"

tpu_status_t tpu_host_k_channel(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_channel_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out);

tpu_status_t tpu_host_k_group_norm(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_group_norm_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                       const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_NORM_H_ */
