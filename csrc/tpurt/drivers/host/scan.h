/* scan.h — scan kernels of the host driver that the cumulative kernel's monoids do not
 * cover (internal). */
#ifndef TPURT_DRIVERS_HOST_SCAN_H_
#define TPURT_DRIVERS_HOST_SCAN_H_

#include "drivers/host/host.h"

/* custom target LOGCUMSUMEXP: out = log(cumsum(exp(x))) along op->i1, accumulated in double
 * with PyTorch's log-add-exp (infinities and NaN as its CPU kernel). x and out: same shape,
 * f32 or f64, any strides. */
tpu_status_t tpu_host_k_logcumsumexp(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
/* naive twin (for tests) */
tpu_status_t tpu_host_k_logcumsumexp_ref(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_SCAN_H_ */
