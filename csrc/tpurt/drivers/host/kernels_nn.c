/* kernels_nn.c — host kernels for convolution, pooling and custom calls (being written). */
#include "drivers/host/host.h"

tpu_status_t tpu_host_k_conv(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* w,
                             const tpu_host_view_t* out) {
  return TPU_ERR(UNSUPPORTED, "host: convolution kernel not implemented");
}
tpu_status_t tpu_host_k_reduce_window(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  return TPU_ERR(UNSUPPORTED, "host: reduce_window kernel not implemented");
}
tpu_status_t tpu_host_k_custom(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  return TPU_ERR(UNSUPPORTED, "host: custom_call target %lld not implemented", (long long)op->i0);
}
