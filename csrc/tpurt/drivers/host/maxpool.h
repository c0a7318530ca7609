/* maxpool.h — fast paths of the max-pooling kernels of the host driver (internal; maxpool.c).
 * Each returns 1 when it computed the result, 0 when the case is not one it takes (the caller's
 * general kernel then runs, nothing having been written). Results equal the general kernels'. */
#ifndef TPURT_DRIVERS_HOST_MAXPOOL_H_
#define TPURT_DRIVERS_HOST_MAXPOOL_H_

#include "drivers/host/host.h"

/* POOL_ARGMAX with 2 spatial dims, fixed windows (stride >= 1), f32/bf16/f16 x with contiguous planes and
 * one flat run of leading dims; PyTorch's CPU index rules (first max, last NaN) as pool.c */
int tpu_host_maxpool2d_argmax(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
/* SCATTER with add along dim 1 of rank-2 views: out[b, idx[b, j]] += src[b, j] (idx i64, negative indices wrap;
 * out rows contiguous and disjoint; f32/f64/bf16/f16 with src of out's dtype); rows run in parallel, each row's
 * adds in index order as the general kernel. Any index out of range: 0 before anything is written. */
int tpu_host_scatter_add_rows(const tpu_host_view_t* idx, const tpu_host_view_t* src, const tpu_host_view_t* out);
/* GATHER along dim 1 of rank-2 views: out[b, j] = x[b, idx[b, j]] (idx i64; negative indices wrap unless
 * no_wrap; x and out of one dtype); rows in parallel. Any index out of range: 0 before anything is written. */
int tpu_host_gather_rows(const tpu_host_view_t* x, const tpu_host_view_t* idx, const tpu_host_view_t* out, int no_wrap);

#endif /* TPURT_DRIVERS_HOST_MAXPOOL_H_ */
