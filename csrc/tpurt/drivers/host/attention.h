/* attention.h — fused scaled-dot-product attention kernels of the host driver (internal).
 *
 * Custom-call targets TPU_IR_CUSTOM_ATTENTION / _ATTENTION_BWD. All views are f32 with
 * any strides (0 strides broadcast). op->i1 flags: bit 0 causal (top-left aligned, key j
 * visible to query i iff j <= i), bit 1 an additive bias operand is present.
 *
 * Legend: B batch, Hq query heads, Hk key/value heads (Hq % Hk == 0: grouped-query
 * attention, query head h reads kv head h / (Hq / Hk)), T queries, S keys, E head dim
 * of q/k, Ev head dim of v.
 *
 * Forward operands: q (B, Hq, T, E), k (B, Hk, S, E), v (B, Hk, S, Ev), [bias (B, Hq, T, S)],
 *   scale (rank 0). Result (B, Hq, T, Ev + 1) contiguous: [..., :Ev] the output,
 *   [..., Ev] the row's logsumexp of the scaled, biased, masked scores (-inf and a zero
 *   output for a row with every key masked, as PyTorch's math path).
 * Backward operands: dout (B, Hq, T, Ev), q, k, v, out (B, Hq, T, Ev), lse (B, Hq, T),
 *   [bias], scale. Result flat contiguous: dq (B, Hq, T, E) | dk (B, Hk, S, E) | dv (B, Hk, S, Ev).
 *
 * The optimized kernels are flash-style: query blocks against key blocks with an online
 * softmax (forward) or recomputed probabilities from lse (backward), O(T) extra memory,
 * GEMMs through tpu_host_sgemm, work split over the pool by (batch, head[, query block]).
 * The _ref twins materialize each (T, S) score matrix in double. */
#ifndef TPURT_DRIVERS_HOST_ATTENTION_H_
#define TPURT_DRIVERS_HOST_ATTENTION_H_

#include "drivers/host/host.h"

enum { TPU_ATTN_CAUSAL = 1, TPU_ATTN_BIAS = 2 };

tpu_status_t tpu_host_k_attention(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                  const tpu_host_view_t* out);
/* Same contract, naive loops (for tests). */
tpu_status_t tpu_host_k_attention_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                      const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_ATTENTION_H_ */
