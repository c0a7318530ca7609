/* conv.h — convolution kernels of the host driver (internal).
 *
 * Three kernels share one geometry (canonical channels-first, 1 to 3 spatial dims):
 *   forward     (x [N, C, *S], w [O, C/G, *K])   -> y  [N, O, *Q]      TPU_IR_CONV
 *   bwd_input   (gy [N, O, *Q], w [O, C/G, *K])  -> gx [N, C, *S]      TPU_IR_CUSTOM_CONV_BWD_INPUT
 *   bwd_weight  (x [N, C, *S], gy [N, O, *Q])    -> gw [O, C/G, *K]    TPU_IR_CUSTOM_CONV_BWD_WEIGHT
 * with input coordinate i = q * stride - padding + k * dilation per spatial dim (out-of-range
 * i reads zero / is dropped). Attributes: a[0] stride, a[1] padding, a[2] dilation (one per
 * spatial dim); groups in i0 (CONV) or i1 (CUSTOM). The result type fixes the third shape, so
 * bwd_input also serves transposed convolutions (output_padding is just a larger gx).
 *
 * Every view may have any strides (channels_last included); f32 and f64 only (the lowerings
 * convert f16/bf16 to f32). The optimized kernels are im2col + packed GEMM over tiles of output
 * positions (memory bounded by the tile); the `_ref` twins are direct loops with a double
 * accumulator. Legend: N batch, C input channels, O output channels, G groups, S input
 * spatial, K kernel spatial, Q output spatial, KK = prod(K), P = prod(Q). */
#ifndef TPURT_DRIVERS_HOST_CONV_H_
#define TPURT_DRIVERS_HOST_CONV_H_

#include "drivers/host/host.h"

typedef enum tpu_host_conv_kind_e {
  TPU_HOST_CONV_FWD = 0,
  TPU_HOST_CONV_BWD_INPUT,
  TPU_HOST_CONV_BWD_WEIGHT,
  TPU_HOST_CONV_KIND_COUNT
} tpu_host_conv_kind_t;

/* a: the two operands in the order above; stride/padding/dilation: nsp values each. */
tpu_status_t tpu_host_conv_run(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                               const int64_t* dilation, int64_t groups, const tpu_host_view_t* a,
                               const tpu_host_view_t* b, const tpu_host_view_t* out);
tpu_status_t tpu_host_conv_run_ref(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                                   const int64_t* dilation, int64_t groups, const tpu_host_view_t* a,
                                   const tpu_host_view_t* b, const tpu_host_view_t* out);
/* Testing hook: forces tiles of `pt` output positions (0 = automatic); returns the previous value.
 * Not thread-safe against running kernels. */
int64_t tpu_host_conv_set_tile(int64_t pt);
/* TPU_IR_CUSTOM entry for the two backward targets (called by tpu_host_k_custom). */
tpu_status_t tpu_host_k_conv_custom(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_CONV_H_ */
