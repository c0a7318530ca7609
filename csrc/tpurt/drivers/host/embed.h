/* embed.h — embedding_bag sum / mean on the host (internal): custom targets EMBEDDING_BAG (the bags' rows, or
 * offset2bag, or bag_size) and EMBEDDING_BAG_BWD (the weight gradient, or the per-sample-weight gradient), with
 * the semantics of the gather / scatter graphs lower/misc.c built before (PyTorch's: ids before the first offset
 * and padding_idx ids are dropped, empty bags are 0, mean divides by max(non-padding ids, 1), include_last_offset
 * ignores the last offset). One pass over the ids in order, so each bag row accumulates in id order as the
 * scatter-add did (same bits); f32 math for f32 / bf16 / f16, f64 for f64; any strides. Thread-safe.
 * Legend: N ids, B bags, no offsets, nw table rows, D embedding size.
 *
 *     // out [B, D] = sum over bag b of weight[ids[i]] * psw[i]   (op->i1 = 4: sum with per-sample weights)
 *     tpu_status_t st = tpu_host_k_embed_bag(op, 4, (tpu_host_view_t[]){weight, ids, offsets, psw}, &out);
 *
 * Errors: INTERNAL for malformed operands; INVALID_ARGUMENT for offsets[0] != 0, an offset outside [0, N] and an
 * id outside [0, nw) (the forward: PyTorch's messages), an offset2bag entry outside [0, B) (the backward);
 * INDEX_ERROR for a backward id outside [-nw, nw) (negative ids wrap there, as index_put). */
#ifndef TPURT_DRIVERS_HOST_EMBED_H_
#define TPURT_DRIVERS_HOST_EMBED_H_

#include "drivers/host/host.h"

tpu_status_t tpu_host_k_embed_bag(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_EMBED_H_ */
