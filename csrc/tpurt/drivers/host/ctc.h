/* ctc.h — connectionist temporal classification loss on the host (internal): custom targets CTC
 * (forward: negative log likelihood and log_alpha) and CTC_BWD (gradient w.r.t. log_probs), with
 * PyTorch's CPU semantics (Graves et al. 2006, log space; targets padded [N, S] or concatenated
 * 1-D; entries of log_alpha outside a sample's lengths are -inf). Math in double, f32/f64 in and
 * out, any strides; batch elements run in parallel. Thread-safe.
 * Legend: T input length, N batch, C classes, S max target length, L = 2 S + 1.
 *
 *     // out [N, 1 + T*L] = CTC(log_probs [T, N, C], targets, in_len [N], tgt_len [N]), i1 = blank
 *     tpu_status_t st = tpu_host_k_ctc(op, 4, xs, &out);
 *
 * Errors: INTERNAL for malformed operands; INVALID_ARGUMENT for lengths or target labels out of
 * range (PyTorch's messages). */
#ifndef TPURT_DRIVERS_HOST_CTC_H_
#define TPURT_DRIVERS_HOST_CTC_H_

#include "drivers/host/host.h"

tpu_status_t tpu_host_k_ctc(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_CTC_H_ */
