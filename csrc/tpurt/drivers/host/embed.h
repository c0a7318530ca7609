/* embed.h — embedding_bag sum / mean / max on the host (internal): custom targets EMBEDDING_BAG (offset2bag, the
 * one place bags are found; bag_size; max_indices; the bags' rows) and EMBEDDING_BAG_BWD (the weight gradient, or
 * the per-sample-weight gradient), with PyTorch CPU's semantics: ids before the first offset and padding_idx ids are
 * dropped, empty bags are 0 (max_indices 0), mean divides by max(non-padding ids, 1) (a bf16 / f16 result: the sum
 * and the count rounded to it first, as PyTorch), max keeps a column's first value unless a later one is greater (NaN never
 * replaces), include_last_offset ignores the last offset but checks it is <= N. Each output element sums its terms
 * in id order (the max backward: bag order) whatever the thread count; f32 math for f32 / bf16 / f16, f64 for f64;
 * any strides. Thread-safe; uses the pool.
 * Legend: N ids, B bags, no offsets, nw table rows, D embedding size.
 *
 *     // offset2bag [N], then out [B, D] = sum over bag b of weight[ids[i]] * psw[i]   (i1 = 4: sum, psw given)
 *     op->i1 = 4 | 16; tpu_host_k_embed_bag(op, 2, (tpu_host_view_t[]){ids, offsets}, &o2b);
 *     op->i1 = 4;      tpu_host_k_embed_bag(op, 4, (tpu_host_view_t[]){weight, ids, o2b, psw}, &out);
 *
 * Errors: INTERNAL for malformed operands (an offset2bag or max_indices that EMBEDDING_BAG did not make);
 * INVALID_ARGUMENT for offsets[0] != 0, an offset outside [0, N], offsets[B] > N with include_last_offset and an id
 * outside [0, nw) (the forward: PyTorch's messages), an offset2bag entry outside [0, B) (the backward); INDEX_ERROR
 * for a backward id outside [-nw, nw) (negative ids wrap there, as index_put) or a max index outside [0, nw). */
#ifndef TPURT_DRIVERS_HOST_EMBED_H_
#define TPURT_DRIVERS_HOST_EMBED_H_

#include "drivers/host/host.h"

tpu_status_t tpu_host_k_embed_bag(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_EMBED_H_ */
