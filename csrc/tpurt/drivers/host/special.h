/* special.h — elementwise special functions of the host driver (internal): custom target
 * SPECIAL (ir.h), computed in double whatever the operand dtype (f32/f64), any strides.
 *   I0, I1: power series for |x| < 30, the large-argument asymptotic series beyond;
 *   I0E, I1E: the same scaled by exp(-|x|) (no overflow);
 *   I0(+-inf) and I1(+-inf) are NaN, I0E/I1E(+-inf) are (+-)0, as PyTorch's CPU kernels give;
 *   POLYGAMMA (n >= 1): (-1)^(n+1) n! zeta(n+1, x), Hurwitz zeta by Euler-Maclaurin summation
 *   (poles at x = 0, -1, -2, ... give +-inf; PyTorch's CPU trigamma gives large finite values at
 *   negative integers, from sin(pi x) rounding).
 * Thread-safe. */
#ifndef TPURT_DRIVERS_HOST_SPECIAL_H_
#define TPURT_DRIVERS_HOST_SPECIAL_H_

#include "drivers/host/host.h"

tpu_status_t tpu_host_k_special(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
/* one value (for tests): function f (tpu_ir_special_t) of order n at x */
double tpu_host_special_eval(int f, int64_t n, double x);

#endif /* TPURT_DRIVERS_HOST_SPECIAL_H_ */
