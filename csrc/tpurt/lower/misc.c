/* misc.c — lowerings of the remaining ops models hit: sort / argsort / topk /
 * kthvalue / median, embedding_bag (forward, backward, per-sample-weights
 * backward), multinomial, reflection / replication padding (+ backward),
 * searchsorted.
 *
 * Everything composes existing IR ops: sort is the host's stable sort (NaN
 * largest, as PyTorch), selections are gathers of the argsort; embedding_bag
 * sum / mean / max (and their backward) are the EMBEDDING_BAG(_BWD) custom
 * targets (drivers/host/embed.c); pads are index_selects with an index computed from an
 * iota (reflect: (W-1) - |(W-1) - |j - l||, replicate: clamp(j - l, 0, W-1)) and
 * their backward the matching scatter-adds.
 */
#include <math.h>
#include <stdio.h>

#include "lower/lower.h"

#define G (&cx->g)
#define I64 TPU_DTYPE_I64
#define BIN(op, a, b) tpu_ir_binary(G, TPU_IR_##op, (a), (b))

static tpu_ir_type_t ty(tpu_lower_ctx_t* cx, int v) { /* a copy: builders may move g->ops */
  tpu_ir_type_t t;
  if (v < 0 || v >= G->n_ops) { memset(&t, 0, sizeof(t)); return t; }
  return *tpu_ir_type(G, v);
}
static int cst(tpu_lower_ctx_t* cx, double v, int like) { return lw_const_like(cx, v, like); }
/* v reshaped to output k's shape (same element count) and bound */
static tpu_status_t out_as(tpu_lower_ctx_t* cx, int k, int v) {
  const tpu_ir_type_t t = ty(cx, v);
  const tpu_tensor_t* o = lw_out_meta(cx, k);
  if (v >= 0 && o && o->ndim >= 0 && tpu_numel(o->ndim, o->sizes) == tpu_ir_numel(&t))
    v = tpu_ir_reshape(G, v, o->ndim, o->sizes);
  return lw_output(cx, k, v);
}
/* x as rank >= 1 (a 0-dim tensor becomes [1]) */
static int at_least_1d(tpu_lower_ctx_t* cx, int x) {
  tpu_ir_type_t t = ty(cx, x);
  if (x < 0 || t.rank) return x;
  int64_t one = 1;
  return tpu_ir_reshape(G, x, 1, &one);
}
static int iota1(tpu_lower_ctx_t* cx, int64_t n) { return tpu_ir_iota(G, I64, 1, &n, 0); }
/* rank-1 i64 v broadcast along dim d of shape t */
static int bcast_along(tpu_lower_ctx_t* cx, int v, const tpu_ir_type_t* t, int d) {
  int64_t b = d;
  return tpu_ir_broadcast(G, v, t->rank, t->dims, &b);
}

/* ---------------------------------------------------------------- sort family */

/* argsort of x along d: (values, indices) */
static void sorted(tpu_lower_ctx_t* cx, int x, int d, int desc, int* vals, int* idx) {
  *idx = tpu_ir_sort(G, x, d, desc, 1);
  *vals = tpu_ir_gather(G, x, *idx, d);
}
static tpu_status_t lw_sort(tpu_lower_ctx_t* cx, int dim_i, int desc_i) {
  int x = at_least_1d(cx, lw_input(cx, 0, -1));
  int d = lw_norm_dim(cx, lw_int(cx, dim_i, -1), lw_rank_of(cx, 0));
  if (d < 0) return TPU_OK;
  int v, i;
  sorted(cx, x, d, (int)lw_int(cx, desc_i, 0), &v, &i);
  tpu_status_t st = out_as(cx, 0, v);
  return st ? st : out_as(cx, 1, i);
}
static tpu_status_t lower_sort(tpu_lower_ctx_t* cx) { return lw_sort(cx, 1, 2); }        /* sort(.values) */
static tpu_status_t lower_sort_stable(tpu_lower_ctx_t* cx) { return lw_sort(cx, 2, 3); } /* sort.stable(.values_stable) */

/* topk(self, k, dim=-1, largest=True, sorted=True): results are always sorted */
static tpu_status_t lower_topk(tpu_lower_ctx_t* cx) {
  int r = lw_rank_of(cx, 0);
  int d = lw_norm_dim(cx, lw_int(cx, 2, -1), r);
  if (d < 0) return TPU_OK;
  int64_t k = lw_int(cx, 1, 1), n = r ? lw_sizes_of(cx, 0)[d] : 1;
  if (k < 0 || k > n) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "selected index k out of range");
  int x = at_least_1d(cx, lw_input(cx, 0, -1));
  int i = lw_slice_dim(cx, tpu_ir_sort(G, x, d, (int)lw_int(cx, 3, 1), 1), d, 0, k);
  tpu_status_t st = out_as(cx, 0, tpu_ir_gather(G, x, i, d));
  return st ? st : out_as(cx, 1, i);
}

/* the k-th smallest (0-based) along d; with nan_first, a NaN anywhere along d wins (median) */
static tpu_status_t kth(tpu_lower_ctx_t* cx, int x, int d, int64_t k, int nan_first, int with_idx) {
  int i = lw_slice_dim(cx, tpu_ir_sort(G, x, d, 0, 1), d, k, k + 1);
  int v = tpu_ir_gather(G, x, i, d);
  tpu_ir_type_t tx = ty(cx, x);
  if (nan_first && tpu_dtype_is_floating(tx.dtype)) {
    int isn = tpu_ir_unary(G, TPU_IR_IS_NAN, x);
    int64_t fl[TPU_MAX_DIMS] = {0};
    fl[d] = 1;
    tpu_ir_type_t tv = ty(cx, v);
    int any = tpu_ir_reshape(G, tpu_ir_reduce(G, TPU_IR_MONOID_OR, isn, fl), tv.rank, tv.dims);
    int ni = tpu_ir_reshape(G, tpu_ir_argreduce(G, 0, tpu_ir_convert(G, isn, TPU_DTYPE_I32), d), tv.rank, tv.dims);
    v = tpu_ir_select(G, any, cst(cx, NAN, v), v);
    i = tpu_ir_select(G, any, ni, i);
  }
  tpu_status_t st = out_as(cx, 0, v);
  return st || !with_idx ? st : out_as(cx, 1, i);
}
/* kthvalue(self, k, dim=-1, keepdim=False) */
static tpu_status_t lower_kthvalue(tpu_lower_ctx_t* cx) {
  int r = lw_rank_of(cx, 0);
  int d = lw_norm_dim(cx, lw_int(cx, 2, -1), r);
  if (d < 0) return TPU_OK;
  int64_t k = lw_int(cx, 1, 1), n = r ? lw_sizes_of(cx, 0)[d] : 1;
  if (k < 1 || k > n)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "kthvalue(): selected number k out of range for dimension %d", d);
  return kth(cx, at_least_1d(cx, lw_input(cx, 0, -1)), d, k - 1, 0, 1);
}
/* median.dim(self, dim, keepdim=False): the lower median; NaN if any NaN */
static tpu_status_t lower_median_dim(tpu_lower_ctx_t* cx) {
  int r = lw_rank_of(cx, 0);
  int d = lw_norm_dim(cx, lw_int(cx, 1, 0), r);
  if (d < 0) return TPU_OK;
  int64_t n = r ? lw_sizes_of(cx, 0)[d] : 1;
  if (n == 0)
    return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "median(): Expected reduction dim %d to have non-zero size.", d);
  return kth(cx, at_least_1d(cx, lw_input(cx, 0, -1)), d, lw_size_decide(cx, TPU_SIZE_DECIDE_FLOOR_DIV, n - 1, 2), 1, 1);
}
/* median(self) over all elements (empty: NaN) */
static tpu_status_t lower_median(tpu_lower_ctx_t* cx) {
  int64_t n = tpu_numel(lw_rank_of(cx, 0), lw_sizes_of(cx, 0));
  int x = lw_input(cx, 0, -1);
  if (n == 0) return lw_output(cx, 0, lw_const(cx, NAN, ty(cx, x).dtype, 0, NULL));
  return kth(cx, tpu_ir_reshape(G, x, 1, &n), 0, lw_size_decide(cx, TPU_SIZE_DECIDE_FLOOR_DIV, n - 1, 2), 1, 0);
}

/* nanmedian: the lower median of the non-NaN values along d (NaN sorts last, so it is
 * element (count - 1) / 2 of the sorted row, a per-row gather); all NaN -> NaN */
static tpu_status_t nanmedian(tpu_lower_ctx_t* cx, int x, int d, int with_idx) {
  tpu_ir_type_t tx = ty(cx, x);
  if (!tpu_dtype_is_floating(tx.dtype))
    return kth(cx, x, d, lw_size_decide(cx, TPU_SIZE_DECIDE_FLOOR_DIV, tx.dims[d] - 1, 2), 0, with_idx);
  int i = tpu_ir_sort(G, x, d, 0, 1);
  int64_t fl[TPU_MAX_DIMS] = {0};
  fl[d] = 1;
  int cnt = tpu_ir_reduce(G, TPU_IR_MONOID_SUM, tpu_ir_convert(G, tpu_ir_unary(G, TPU_IR_NOT, tpu_ir_unary(G, TPU_IR_IS_NAN, x)), I64), fl);
  int k = tpu_ir_binary(G, TPU_IR_FLOOR_DIV, BIN(MAX, BIN(SUB, cnt, cst(cx, 1, cnt)), cst(cx, 0, cnt)), cst(cx, 2, cnt));
  tpu_ir_type_t tk = tx;
  tk.dims[d] = 1;
  k = tpu_ir_reshape(G, k, tk.rank, tk.dims);
  int si = tpu_ir_gather(G, i, k, d);
  tpu_status_t st = out_as(cx, 0, tpu_ir_gather(G, x, si, d));
  return st || !with_idx ? st : out_as(cx, 1, si);
}
static tpu_status_t lower_nanmedian_dim(tpu_lower_ctx_t* cx) {
  int r = lw_rank_of(cx, 0);
  int d = lw_norm_dim(cx, lw_int(cx, 1, 0), r);
  if (d < 0) return TPU_OK;
  if ((r ? lw_sizes_of(cx, 0)[d] : 1) == 0)
    return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "nanmedian(): Expected reduction dim %d to have non-zero size.", d);
  return nanmedian(cx, at_least_1d(cx, lw_input(cx, 0, -1)), d, 1);
}
static tpu_status_t lower_nanmedian(tpu_lower_ctx_t* cx) {
  int64_t n = tpu_numel(lw_rank_of(cx, 0), lw_sizes_of(cx, 0));
  int x = lw_input(cx, 0, -1);
  if (n == 0) return lw_output(cx, 0, lw_const(cx, NAN, ty(cx, x).dtype, 0, NULL));
  return nanmedian(cx, tpu_ir_reshape(G, x, 1, &n), 0, 0);
}

/* ---------------------------------------------------------------- embedding_bag */

enum { BAG_SUM = 0, BAG_MEAN = 1, BAG_MAX = 2 };

/* an index argument as a 1-D [n] i64 / i32 value (other dtypes converted to i64) */
static int ids_1d(tpu_lower_ctx_t* cx, int arg, int64_t n) {
  int v = lw_input(cx, arg, -1);
  const int dt = lw_dtype_of(cx, arg);
  if (dt != TPU_DTYPE_I64 && dt != TPU_DTYPE_I32) v = tpu_ir_convert(G, v, I64);
  return tpu_ir_reshape(G, v, 1, &n);
}
/* the host's EMBEDDING_BAG kernels (ir.h, drivers/host/embed.c): offset2bag is found once from the offsets (the
 * one bag rule, with PyTorch's offset checks) and the other results read it; max: max_indices first, the rows
 * gathered by them. A new id count is a 4-6-op graph to make and run, where the gather / scatter graph was ~27 ops
 * (DLRM's step makes one per table and batch). */
static tpu_status_t bag_fwd_custom(tpu_lower_ctx_t* cx, int mode, int has_psw, int64_t pad, int64_t n) {
  const tpu_tensor_t *o = lw_out_meta(cx, 0), *m1 = lw_out_meta(cx, 1), *m2 = lw_out_meta(cx, 2), *m3 = lw_out_meta(cx, 3);
  const int64_t B = o->sizes[0], D = lw_sizes_of(cx, 0)[1];
  int64_t noff = lw_rank_of(cx, 2) ? lw_sizes_of(cx, 2)[0] : 1;
  const int64_t last = lw_int(cx, 7, 0) != 0, i1 = mode | (has_psw ? 4 : 0) | (last ? 8 : 0);
  if (noff - last != B) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: %lld offsets for %lld bags", cx->op_name, (long long)noff, (long long)B);
  const int it = m1->dtype == TPU_DTYPE_I32 ? TPU_DTYPE_I32 : I64;
  int idx = ids_1d(cx, 1, n), w = lw_input(cx, 0, o->dtype), off = ids_1d(cx, 2, noff);
  tpu_ir_type_t t1 = {.dtype = it, .rank = 1, .dims = {n}};
  int o2b = lw_custom_a(cx, TPU_IR_CUSTOM_EMBEDDING_BAG, i1 | 16, pad, 0, &t1, 2, (int[]){idx, off});
  /* bag_size: one entry per offset (include_last_offset's last one 0) */
  const int64_t nb = m2->ndim == 1 ? m2->sizes[0] : B;
  tpu_ir_type_t t2 = {.dtype = m2->dtype == TPU_DTYPE_I32 ? TPU_DTYPE_I32 : I64, .rank = 1, .dims = {nb > B ? nb : B}};
  int size = lw_custom_a(cx, TPU_IR_CUSTOM_EMBEDDING_BAG, i1 | 32, pad, 0, &t2, 3, (int[]){idx, o2b, off});
  tpu_ir_type_t t = {.dtype = o->dtype, .rank = 2, .dims = {B, D}};
  int rows, maxi = -1;
  if (mode == BAG_MAX) {
    tpu_ir_type_t t3 = {.dtype = m3->dtype == TPU_DTYPE_I32 ? TPU_DTYPE_I32 : I64, .rank = 2, .dims = {B, D}};
    maxi = lw_custom_a(cx, TPU_IR_CUSTOM_EMBEDDING_BAG, i1 | 48, pad, 0, &t3, 3, (int[]){w, idx, o2b});
    rows = lw_custom_a(cx, TPU_IR_CUSTOM_EMBEDDING_BAG, i1, pad, 0, &t, 3, (int[]){w, maxi, size});
  } else {
    int in[4] = {w, idx, o2b, has_psw ? tpu_ir_reshape(G, lw_input(cx, 6, -1), 1, &n) : -1};
    rows = lw_custom_a(cx, TPU_IR_CUSTOM_EMBEDDING_BAG, i1, pad, 0, &t, 3 + has_psw, in);
  }
  tpu_status_t st = lw_output(cx, 0, rows);
  if (!st) st = lw_output(cx, 1, o2b);
  if (!st) st = out_as(cx, 2, size);
  if (!st) {
    if (maxi < 0 || tpu_numel(m3->ndim, m3->sizes) != B * D) maxi = lw_const(cx, 0, I64, m3->ndim, m3->sizes);
    st = out_as(cx, 3, maxi);
  }
  return st;
}

/* _embedding_bag / _embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq,
 * mode, sparse, per_sample_weights, include_last_offset, padding_idx)
 *   -> (output [B, D], offset2bag [N], bag_size [B], max_indices [B, D] or [0]) */
static tpu_status_t lower_embedding_bag(tpu_lower_ctx_t* cx) {
  int mode = (int)lw_int(cx, 4, 0);
  int64_t pad = lw_int(cx, 8, -1);
  if (lw_rank_of(cx, 0) != 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "embedding_bag: weight has to be a 2D Tensor");
  if (mode < 0 || mode > 2) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: mode %d", cx->op_name, mode);
  int idt = lw_dtype_of(cx, 1);
  if (idt != TPU_DTYPE_I64 && idt != TPU_DTYPE_I32)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got %s instead", tpu_dtype_name(idt));
  int has_psw = !lw_is_none(cx, 6);
  if (has_psw && mode != BAG_SUM)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' (got mode='%s'). Please open a feature request on GitHub.", mode == BAG_MEAN ? "mean" : "max");
  return bag_fwd_custom(cx, mode, has_psw, pad, tpu_numel(lw_rank_of(cx, 1), lw_sizes_of(cx, 1)));
}

/* Backward core. a[]: argument positions of grad, indices, offset2bag, bag_size,
 * max_indices, num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx.
 * sum / mean: the host's EMBEDDING_BAG_BWD kernel (ir.h, drivers/host/embed.c): grad[offset2bag[i]] (/ bag
 * size, * per-sample weight, / the id's count) added to row ids[i] in id order. An offset2bag entry outside
 * [0, B) is the index error PyTorch's ids get (no wrap); without bags (B = 0) every id adds a zero row.
 * max: grad[b, d] added to row max_indices[b, d] of column d, in bag order, for bags with bag_size > 0 (PyTorch's
 * CPU kernel: index_add over the non-empty bags); an index outside [0, num_weights) is an index error. */
static tpu_status_t embedding_bag_bwd(tpu_lower_ctx_t* cx, const int* a) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int mode = (int)lw_int(cx, a[7], 0);
  int64_t pad = lw_int(cx, a[9], -1), nw = lw_int(cx, a[5], 0);
  int scale = (int)lw_int(cx, a[6], 0);
  if (lw_rank_of(cx, a[0]) != 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: grad must be 2-D", cx->op_name);
  if (mode < BAG_SUM || mode > BAG_MAX) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: mode %d", cx->op_name, mode);
  int64_t B = lw_sizes_of(cx, a[0])[0], D = lw_sizes_of(cx, a[0])[1];
  if (mode != BAG_MAX) {
    int64_t n = tpu_numel(lw_rank_of(cx, a[1]), lw_sizes_of(cx, a[1]));
    int idx = ids_1d(cx, a[1], n);
    const int has_psw = !lw_is_none(cx, a[8]);
    int64_t nbs = tpu_numel(lw_rank_of(cx, a[3]), lw_sizes_of(cx, a[3]));
    if (mode == BAG_MEAN && nbs < B)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: bag_size has %lld entries for %lld bags", cx->op_name, (long long)nbs, (long long)B);
    int in[5] = {lw_input(cx, a[0], o->dtype), idx, ids_1d(cx, a[2], n), ids_1d(cx, a[3], nbs),
                 has_psw ? tpu_ir_reshape(G, lw_input(cx, a[8], -1), 1, &n) : -1};
    tpu_ir_type_t t = {.dtype = o->dtype, .rank = 2, .dims = {nw, D}};
    const int64_t i1 = mode | (has_psw ? 4 : 0) | (scale ? 8 : 0);
    return lw_output(cx, 0, lw_custom_a(cx, TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, i1, pad, 0, &t, 4 + has_psw, in));
  }
  if (scale) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: scale_grad_by_freq with mode='max'", cx->op_name);
  int mi = lw_input(cx, a[4], -1), mdt = lw_dtype_of(cx, a[4]);
  if (mdt != TPU_DTYPE_I64 && mdt != TPU_DTYPE_I32) mi = tpu_ir_convert(G, mi, I64);
  int64_t nbs = tpu_numel(lw_rank_of(cx, a[3]), lw_sizes_of(cx, a[3]));
  if (ty(cx, mi).rank != 2 || ty(cx, mi).dims[0] != B || ty(cx, mi).dims[1] != D || nbs < B)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: max_indices must be [B, D] and bag_size [>= B]", cx->op_name);
  tpu_ir_type_t t = {.dtype = o->dtype, .rank = 2, .dims = {nw, D}};
  int in[3] = {lw_input(cx, a[0], o->dtype), mi, ids_1d(cx, a[3], nbs)};
  return lw_output(cx, 0, lw_custom_a(cx, TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, BAG_MAX, pad, 0, &t, 3, in));
}
/* _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
 * num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx) */
static tpu_status_t lower_embedding_bag_bwd(tpu_lower_ctx_t* cx) {
  if (lw_int(cx, 9, 0)) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: sparse=True", cx->op_name);
  return embedding_bag_bwd(cx, (const int[]){0, 1, 3, 4, 5, 6, 7, 8, 10, 11});
}
/* _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
 * num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx) */
static tpu_status_t lower_embedding_bag_dense_bwd(tpu_lower_ctx_t* cx) {
  return embedding_bag_bwd(cx, (const int[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}
/* _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag,
 * mode, padding_idx) -> [N]: <grad[bag(i)], weight[indices[i]]> (EMBEDDING_BAG_BWD, i1 bit 4), 0 for padding
 * ids and offset2bag entries outside [0, B) */
static tpu_status_t lower_embedding_bag_psw_bwd(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  if (lw_int(cx, 5, 0) != BAG_SUM)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  if (lw_rank_of(cx, 0) != 2 || lw_rank_of(cx, 1) != 2 || lw_sizes_of(cx, 1)[1] != lw_sizes_of(cx, 0)[1])
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: grad and weight must be 2-D with the same row size", cx->op_name);
  int64_t pad = lw_int(cx, 6, -1), n = tpu_numel(lw_rank_of(cx, 2), lw_sizes_of(cx, 2));
  if (tpu_numel(lw_rank_of(cx, 4), lw_sizes_of(cx, 4)) != n)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: offset2bag must have one entry per index", cx->op_name);
  int in[4] = {lw_input(cx, 0, -1), lw_input(cx, 1, -1), ids_1d(cx, 2, n), ids_1d(cx, 4, n)};
  tpu_ir_type_t t = {.dtype = o->dtype, .rank = 1, .dims = {n}};
  return out_as(cx, 0, lw_custom_a(cx, TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, 16, pad, 0, &t, 4, in));
}

/* ---- embedding_bag shape rules (tpu_lowering_t.shapes, pure): PyTorch's meta functions for the
 * embedding_bag family are Python and a new id count is a new meta-cache key, so DLRM paid ~35 us a
 * call for them (torch/_meta_registrations.py: meta_embedding_bag, meta_embedding_bag_dense_backward,
 * meta_embedding_bag_per_sample_weights_backward, non-CPU branches). These give the same sizes and
 * dtypes for the usual arguments (2-D weight / grad, 1-D indices and offsets) and decline otherwise, so
 * the meta function still checks, and raises for, everything unusual. */
static bool sh_int(const tpu_arg_t* a, int n, int i, int64_t* v) {
  if (i >= n || (a[i].kind != TPU_ARG_INT && a[i].kind != TPU_ARG_BOOL)) return false;
  *v = a[i].i;
  return true;
}
static bool sh_index_dtype(int dt) { return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32; }
static tpu_tensor_t sh_out(int device, int dt, int ndim, int64_t d0, int64_t d1) {
  return tpu_tensor_contiguous(NULL, device, (tpu_dtype_t)dt, ndim, (int64_t[]){d0, d1});
}
/* (weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset,
 * padding_idx) -> output [B, D] (weight's dtype), offset2bag [N], bag_size [offsets.size(0)],
 * max_indices [B, D] (max) or [0] (indices' dtype); B = offsets.size(0) - include_last_offset */
static tpu_status_t shapes_embedding_bag(int dev, const tpu_arg_t* a, int n, tpu_tensor_t* o, int max, int* out_n) {
  const tpu_tensor_t *w = lw_args_tensor(a, n, 0), *idx = lw_args_tensor(a, n, 1), *off = lw_args_tensor(a, n, 2);
  int64_t mode, last, sparse, pad, scale;
  if (n != 9 || max < 4 || !w || !idx || !off || !sh_int(a, n, 4, &mode) || !sh_int(a, n, 7, &last) ||
      !sh_int(a, n, 5, &sparse) || !sh_int(a, n, 8, &pad) || !sh_int(a, n, 3, &scale))
    return lw_shapes_decline("embedding_bag");
  if (w->ndim != 2 || idx->ndim != 1 || off->ndim != 1 || !tpu_dtype_is_floating(w->dtype) ||
      !sh_index_dtype(idx->dtype) || !sh_index_dtype(off->dtype) || mode < BAG_SUM || mode > BAG_MAX)
    return lw_shapes_decline("embedding_bag");
  if (a[6].kind != TPU_ARG_NONE) {
    const tpu_tensor_t* psw = lw_args_tensor(a, n, 6);
    if (!psw || mode != BAG_SUM || psw->ndim != 1 || psw->sizes[0] != idx->sizes[0])
      return lw_shapes_decline("embedding_bag");
  }
  int64_t B = off->sizes[0] - (last != 0), D = w->sizes[1];
  if (B < 0) return lw_shapes_decline("embedding_bag");
  o[0] = sh_out(dev, w->dtype, 2, B, D);
  o[1] = sh_out(dev, idx->dtype, 1, idx->sizes[0], 0);
  o[2] = sh_out(dev, idx->dtype, 1, off->sizes[0], 0);
  o[3] = mode == BAG_MAX ? sh_out(dev, idx->dtype, 2, B, D) : sh_out(dev, idx->dtype, 1, 0, 0);
  *out_n = 4;
  return TPU_OK;
}
/* backward core: grad [B, D] (float), num_weights at a[nw_i], mode at a[mode_i], max_indices at a[mi_i]
 * -> [num_weights, D] in grad's dtype */
static tpu_status_t shapes_bag_bwd(int dev, const tpu_arg_t* a, int n, int nw_i, int mode_i, int mi_i, tpu_tensor_t* o,
                                   int* out_n) {
  const tpu_tensor_t* g = lw_args_tensor(a, n, 0);
  int64_t nw, mode;
  if (!g || g->ndim != 2 || !tpu_dtype_is_floating(g->dtype) || !sh_int(a, n, nw_i, &nw) || nw < 0 ||
      !sh_int(a, n, mode_i, &mode) || mode < BAG_SUM || mode > BAG_MAX || (mode == BAG_MAX && !lw_args_tensor(a, n, mi_i)))
    return lw_shapes_decline("embedding_bag backward");
  o[0] = sh_out(dev, g->dtype, 2, nw, g->sizes[1]);
  *out_n = 1;
  return TPU_OK;
}
/* _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
 * scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx): dense only */
static tpu_status_t shapes_embedding_bag_bwd(int dev, const tpu_arg_t* a, int n, tpu_tensor_t* o, int max, int* out_n) {
  (void)max;
  int64_t sparse;
  if (n != 12 || !sh_int(a, n, 9, &sparse) || sparse) return lw_shapes_decline("embedding_bag backward");
  return shapes_bag_bwd(dev, a, n, 6, 8, 5, o, out_n);
}
/* _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
 * scale_grad_by_freq, mode, per_sample_weights, padding_idx) */
static tpu_status_t shapes_embedding_bag_dense_bwd(int dev, const tpu_arg_t* a, int n, tpu_tensor_t* o, int max,
                                                   int* out_n) {
  (void)max;
  if (n != 10) return lw_shapes_decline("embedding_bag backward");
  return shapes_bag_bwd(dev, a, n, 5, 7, 4, o, out_n);
}
/* _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
 * padding_idx) -> [N] in grad's dtype */
static tpu_status_t shapes_embedding_bag_psw_bwd(int dev, const tpu_arg_t* a, int n, tpu_tensor_t* o, int max,
                                                 int* out_n) {
  (void)max;
  const tpu_tensor_t *g = lw_args_tensor(a, n, 0), *w = lw_args_tensor(a, n, 1), *idx = lw_args_tensor(a, n, 2);
  int64_t mode;
  if (n != 7 || !g || !w || !idx || !sh_int(a, n, 5, &mode) || mode != BAG_SUM || g->ndim != 2 || idx->ndim != 1 ||
      w->ndim != 2 || w->sizes[1] != g->sizes[1])
    return lw_shapes_decline("embedding_bag per_sample_weights backward");
  o[0] = sh_out(dev, g->dtype, 1, idx->sizes[0], 0);
  *out_n = 1;
  return TPU_OK;
}

/* ---------------------------------------------------------------- multinomial */

/* multinomial(self [K] or [R, K], num_samples, replacement=False, *, generator) -> i64.
 * With replacement: inverse CDF (count of cdf <= u * total); without: the num_samples
 * largest keys log(u) / p (exponential races, as the Gumbel-top-k trick). */
static tpu_status_t lower_multinomial(tpu_lower_ctx_t* cx) {
  int r = lw_rank_of(cx, 0);
  if (r < 1 || r > 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "prob_dist must be 1 or 2 dim");
  int idt = lw_dtype_of(cx, 0);
  if (!tpu_dtype_is_floating(idt))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "multinomial only supports floating-point dtypes for input, got: %s", tpu_dtype_name(idt));
  int64_t ns = lw_int(cx, 1, 1), repl = lw_int(cx, 2, 0);
  const int64_t* s = lw_sizes_of(cx, 0);
  int64_t R = r == 2 ? s[0] : 1, K = s[r - 1];
  if (ns <= 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "cannot sample n_sample <= 0 samples");
  if (!repl && ns > K)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  if (K == 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "multinomial: number of categories cannot be zero");
  int dt = idt == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
  int64_t pd[2] = {R, K};
  int p = tpu_ir_reshape(G, lw_input(cx, 0, dt), 2, pd);
  int seed, off, res;
  if (repl) {
    int64_t ud[3] = {R, ns, 1}, cd[3] = {R, 1, K}, bd[3] = {R, ns, K};
    lw_rng_state(cx, 3, (uint64_t)(R * ns), &seed, &off);
    int u = tpu_ir_rng(G, dt, 3, ud, seed, off, 0);
    int cdf = tpu_ir_cumulative(G, TPU_IR_MONOID_SUM, p, 1);
    int tot = tpu_ir_reshape(G, lw_slice_dim(cx, cdf, 1, K - 1, K), 3, (int64_t[]){R, 1, 1});
    int t = BIN(MUL, u, tpu_ir_broadcast(G, tot, 3, ud, NULL));
    int le = tpu_ir_compare(G, TPU_IR_CMP_LE, tpu_ir_broadcast(G, tpu_ir_reshape(G, cdf, 3, cd), 3, bd, NULL),
                            tpu_ir_broadcast(G, t, 3, bd, NULL));
    res = tpu_ir_reduce(G, TPU_IR_MONOID_SUM, tpu_ir_convert(G, le, I64), (int64_t[]){0, 0, 1});
    res = BIN(MIN, res, cst(cx, (double)(K - 1), res));
  } else {
    lw_rng_state(cx, 3, (uint64_t)(R * K), &seed, &off);
    int u = tpu_ir_rng(G, dt, 2, pd, seed, off, 0);
    int key = BIN(DIV, tpu_ir_unary(G, TPU_IR_LOG, u), p);
    res = lw_slice_dim(cx, tpu_ir_sort(G, key, 1, 1, 1), 1, 0, ns);
  }
  return out_as(cx, 0, res);
}

/* ---------------------------------------------------------------- reflection / replication pad */

/* source index along a padded dim of size w: [w + l + h] */
static int pad_index(tpu_lower_ctx_t* cx, int64_t w, int64_t l, int64_t h, int reflect) {
  int j = BIN(SUB, iota1(cx, w + l + h), lw_const(cx, (double)l, I64, 1, (int64_t[]){w + l + h}));
  if (reflect) {
    int wm = cst(cx, (double)(w - 1), j);
    return BIN(SUB, wm, tpu_ir_unary(G, TPU_IR_ABS, BIN(SUB, wm, tpu_ir_unary(G, TPU_IR_ABS, j))));
  }
  return tpu_ir_clamp(G, cst(cx, 0, j), j, cst(cx, (double)(w - 1), j));
}
/* checks padding for an input of rank r; returns number of padded dims or -1 */
static int pad_check(tpu_lower_ctx_t* cx, int xi, int pi, int reflect, const int64_t** pads) {
  int np = lw_int_list(cx, pi, pads);
  int r = lw_rank_of(cx, xi), nd = np / 2;
  const int64_t* s = lw_sizes_of(cx, xi);
  if (np < 2 || np % 2 || r < nd + 1 || r > nd + 2) {
    lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: expected %dD or %dD input with padding of size %d", cx->op_name, nd + 1, nd + 2, np);
    return -1;
  }
  for (int j = 0; j < nd; ++j) {
    int d = r - 1 - j;
    int64_t w = s[d], l = (*pads)[2 * j], h = (*pads)[2 * j + 1];
    if (reflect && (l >= w || h >= w)) {
      lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding (%lld, %lld) at dimension %d of input %dD",
              (long long)l, (long long)h, d, r);
      return -1;
    }
    if (w + l + h <= 0 || w == 0) {
      lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: input size %lld and padding (%lld, %lld) give an empty output at dimension %d", cx->op_name, (long long)w, (long long)l, (long long)h, d);
      return -1;
    }
  }
  return nd;
}
static tpu_status_t lw_pad_fwd(tpu_lower_ctx_t* cx, int reflect) {
  const int64_t* pads;
  int nd = pad_check(cx, 0, 1, reflect, &pads);
  if (nd < 0) return TPU_OK;
  int r = lw_rank_of(cx, 0);
  const int64_t* s = lw_sizes_of(cx, 0);
  int x = lw_input(cx, 0, -1);
  for (int j = 0; j < nd; ++j) {
    int d = r - 1 - j;
    x = tpu_ir_index_select(G, x, pad_index(cx, s[d], pads[2 * j], pads[2 * j + 1], reflect), d);
  }
  return lw_output(cx, 0, x);
}
/* *_backward(grad_output, self, padding) */
static tpu_status_t lw_pad_bwd(tpu_lower_ctx_t* cx, int reflect) {
  const int64_t* pads;
  int nd = pad_check(cx, 1, 2, reflect, &pads);
  if (nd < 0) return TPU_OK;
  int r = lw_rank_of(cx, 1);
  const int64_t* s = lw_sizes_of(cx, 1);
  int g = lw_input(cx, 0, tpu_opmath_dtype(lw_out_meta(cx, 0)->dtype));
  for (int j = nd - 1; j >= 0; --j) {
    int d = r - 1 - j;
    tpu_ir_type_t tg = ty(cx, g);
    if (tg.rank != r || tg.dims[d] != s[d] + pads[2 * j] + pads[2 * j + 1])
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: grad_output has the wrong size at dimension %d", cx->op_name, d);
    int ib = bcast_along(cx, pad_index(cx, s[d], pads[2 * j], pads[2 * j + 1], reflect), &tg, d);
    tpu_ir_type_t tz = tg;
    tz.dims[d] = s[d];
    g = tpu_ir_scatter(G, lw_const(cx, 0, tg.dtype, tz.rank, tz.dims), ib, g, d, 1);
  }
  return lw_output(cx, 0, g);
}
static tpu_status_t lower_reflection_pad(tpu_lower_ctx_t* cx) { return lw_pad_fwd(cx, 1); }
static tpu_status_t lower_replication_pad(tpu_lower_ctx_t* cx) { return lw_pad_fwd(cx, 0); }
static tpu_status_t lower_reflection_pad_bwd(tpu_lower_ctx_t* cx) { return lw_pad_bwd(cx, 1); }
static tpu_status_t lower_replication_pad_bwd(tpu_lower_ctx_t* cx) { return lw_pad_bwd(cx, 0); }

/* ---------------------------------------------------------------- searchsorted */

/* Bisection of PyTorch's CPU searchsorted (cus_lower_bound / cus_upper_bound), probe for probe, for each
 * x[i] of x [n] over its row of s (flat [rows * m]; row i starts at base[i], or base = -1: one row):
 * start = 0, end = m; while start < end: mid = start + (end - start) / 2; go = s[mid] <cmp> x (negated when
 * neg); go ? start = mid + 1 : end = mid. Returns start [n] (i64). One gather of [n] per round, as many
 * rounds as m has bits (the longest interval halves each round). A lane already done (start == end) keeps
 * end and moves start between end and end + 1: the min at the end undoes that without a mask per round.
 * The CPU's own probes give its results also where the contract is broken (NaN boundaries, unsorted rows). */
static int bisect(tpu_lower_ctx_t* cx, int s, int base, int x, int64_t n, int64_t m, int cmp, int neg) {
  int lo = lw_const(cx, 0, I64, 1, &n), hi = lw_const(cx, (double)m, I64, 1, &n);
  int one = lw_const(cx, 1, I64, 1, &n), last = lw_const(cx, (double)(m - 1), I64, 1, &n);
  for (int64_t len = m; len > 0; len /= 2) {
    int mid = BIN(ADD, lo, BIN(SHR, BIN(SUB, hi, lo), one)); /* hi - lo >= -1: the shift floors */
    int at = BIN(MIN, mid, last);
    int c = tpu_ir_compare(G, cmp, tpu_ir_gather(G, s, base >= 0 ? BIN(ADD, at, base) : at, 0), x);
    int up = BIN(ADD, mid, one);
    int lo2 = neg ? tpu_ir_select(G, c, lo, up) : tpu_ir_select(G, c, up, lo);
    hi = neg ? tpu_ir_select(G, c, mid, hi) : tpu_ir_select(G, c, hi, mid);
    lo = lo2;
  }
  return BIN(MIN, lo, hi);
}

/* searchsorted.Tensor(sorted_sequence, self, *, out_int32, right, side, sorter): the CPU's bisection of
 * each value over the last dim of the boundaries (its row of them when they are N-D), in the promoted
 * dtype: left finds the first boundary that is not < v, right the first that is not <= v (bisect). */
static tpu_status_t search(tpu_lower_ctx_t* cx, int seq_i, int val_i, int right, int sorter_i) {
  int sr = lw_rank_of(cx, seq_i), vr = lw_is_tensor(cx, val_i) ? lw_rank_of(cx, val_i) : 0;
  const int64_t *ss = lw_sizes_of(cx, seq_i), *vs = vr ? lw_sizes_of(cx, val_i) : NULL;
  if (sr < 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 dimension");
  if (sr > 1 && (vr != sr || memcmp(ss, vs, (size_t)(sr - 1) * sizeof(int64_t))))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input value tensor must match");
  int ct = tpu_promote_types(lw_dtype_of(cx, seq_i), lw_dtype_of(cx, val_i));
  int64_t M = ss[sr - 1], V = tpu_numel(vr, vs);
  int64_t lead = sr > 1 ? tpu_numel(sr - 1, ss) : 1, K = sr > 1 ? (vr ? vs[vr - 1] : 1) : V, LM = lead * M;
  int seq = lw_input(cx, seq_i, ct);
  if (sorter_i >= 0) { /* the boundaries in sorted order: seq.gather(-1, sorter) */
    if (lw_rank_of(cx, sorter_i) != sr || memcmp(lw_sizes_of(cx, sorter_i), ss, (size_t)sr * sizeof(int64_t)))
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "torch.searchsorted(): boundary and sorter must have the same size");
    int so = tpu_ir_convert(G, lw_input(cx, sorter_i, -1), I64);
    /* a negative entry becomes M so the gather reports it (index errors at sync, as for >= M) */
    so = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, so, cst(cx, 0, so)), cst(cx, (double)M, so), so);
    seq = tpu_ir_gather(G, seq, so, sr - 1);
  }
  if (V == 0 || M == 0) return out_as(cx, 0, lw_const(cx, 0, I64, 1, &V));
  int base = -1; /* [lead * K]: the flat offset of each value's row of boundaries */
  if (lead > 1)
    base = tpu_ir_reshape(G, BIN(MUL, tpu_ir_iota(G, I64, 2, (int64_t[]){lead, K}, 0), lw_const(cx, (double)M, I64, 2, (int64_t[]){lead, K})), 1, &V);
  int x = tpu_ir_reshape(G, lw_input(cx, val_i, ct), 1, &V);
  return out_as(cx, 0, bisect(cx, tpu_ir_reshape(G, seq, 1, &LM), base, x, V, M, right ? TPU_IR_CMP_GT : TPU_IR_CMP_GE, 1));
}
static tpu_status_t lower_searchsorted(tpu_lower_ctx_t* cx) {
  const char* side = lw_str(cx, 4, NULL);
  return search(cx, 0, 1, side ? !strcmp(side, "right") : (int)lw_int(cx, 3, 0), lw_is_none(cx, 5) ? -1 : 5);
}
/* bucketize.Tensor / .Scalar(self, boundaries, *, out_int32, right) */
static tpu_status_t lower_bucketize(tpu_lower_ctx_t* cx) {
  if (lw_rank_of(cx, 1) != 1)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "boundaries tensor must be 1 dimension, but got dim(%d)", lw_rank_of(cx, 1));
  return search(cx, 1, 0, (int)lw_int(cx, 3, 0), -1);
}

/* isin.Tensor_Tensor / .Tensor_Scalar / .Scalar_Tensor(elements, test_elements, *, assume_unique,
 * invert): whether each element equals any test element, compared in the promoted dtype (NaN matches
 * nothing, -0.0 matches 0.0). Small inputs (n m <= ISIN_PAIRS) compare every pair ([n, m], fused) and
 * OR-reduce; larger ones sort the test elements (NaN last) and bisect for each element (searchsorted's
 * bisect: ceil(log2(m + 1)) gathers of [n]) the count of test elements < x, then compare the one found. */
#define ISIN_PAIRS 65536
static tpu_status_t lower_isin(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  if (o->dtype != TPU_DTYPE_BOOL) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "isin: out must be a bool tensor");
  int ct = lw_result_type(cx, 2, (int[]){0, 1}), invert = (int)lw_int(cx, 3, 0);
  int64_t n = tpu_numel(o->ndim, o->sizes);
  int64_t m = lw_is_tensor(cx, 1) ? tpu_numel(lw_rank_of(cx, 1), lw_sizes_of(cx, 1)) : 1;
  if (n == 0 || m == 0) return lw_output(cx, 0, lw_const(cx, invert, TPU_DTYPE_BOOL, o->ndim, o->sizes));
  if (m > 1 && n * m > ISIN_PAIRS) { /* (bool inputs are rejected before lowering, as on CPU) */
    int x = tpu_ir_reshape(G, lw_input(cx, 0, ct), 1, &n);
    int s = tpu_ir_sort(G, tpu_ir_reshape(G, lw_input(cx, 1, ct), 1, &m), 0, 0, 0);
    int pos = bisect(cx, s, -1, x, n, m, TPU_IR_CMP_LT, 0); /* the count of test elements < x */
    int f = tpu_ir_gather(G, s, BIN(MIN, pos, lw_const(cx, (double)(m - 1), I64, 1, &n)), 0);
    int hit = tpu_ir_compare(G, invert ? TPU_IR_CMP_NE : TPU_IR_CMP_EQ, f, x); /* NaN x: NE is true */
    return lw_output(cx, 0, tpu_ir_reshape(G, hit, o->ndim, o->sizes));
  }
  int64_t nm[2] = {n, m};
  int x = tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, 0, ct), 1, &n), 2, nm, (int64_t[]){0});
  int t = tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, 1, ct), 1, &m), 2, nm, (int64_t[]){1});
  int any = tpu_ir_reduce(G, TPU_IR_MONOID_OR, tpu_ir_compare(G, TPU_IR_CMP_EQ, x, t), (int64_t[]){0, 1});
  if (invert) any = tpu_ir_unary(G, TPU_IR_NOT, any);
  return lw_output(cx, 0, tpu_ir_reshape(G, any, o->ndim, o->sizes));
}

/* ---------------------------------------------------------------- unique */

/* _unique2(self, sorted, return_inverse, return_counts) / unique_consecutive(self,
 * return_inverse, return_counts, dim=None): the output records carry n (tpu_op_infer).
 * Elements (sorted for _unique2) start a new group where they differ from their
 * predecessor (NaN != NaN, as infer.c counts); group id = cumsum(new) - 1. */
static tpu_status_t lw_unique(tpu_lower_ctx_t* cx, int consec) {
  if (consec && !lw_is_none(cx, 3)) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: dim", cx->op_name);
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int64_t m = tpu_numel(lw_rank_of(cx, 0), lw_sizes_of(cx, 0)), n = o->ndim == 1 ? o->sizes[0] : -1;
  if (n < 0 || n > m) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: bad output size", cx->op_name);
  int x = tpu_ir_reshape(G, lw_input(cx, 0, -1), 1, &m);
  int idx = consec ? iota1(cx, m) : tpu_ir_sort(G, x, 0, 0, 1);
  int s = consec ? x : tpu_ir_gather(G, x, idx, 0);
  int64_t zero = 0;
  int pos;
  if (m > 0) {
    int ne = tpu_ir_compare(G, TPU_IR_CMP_NE, lw_slice_dim(cx, s, 0, 1, m), lw_slice_dim(cx, s, 0, 0, m - 1));
    int nw = tpu_ir_concat(G, 2, (int[]){lw_const(cx, 1, I64, 1, (int64_t[]){1}), tpu_ir_convert(G, ne, I64)}, 0);
    pos = BIN(SUB, tpu_ir_cumulative(G, TPU_IR_MONOID_SUM, nw, 0), lw_const(cx, 1, I64, 1, &m));
    pos = BIN(MIN, pos, cst(cx, (double)(n ? n - 1 : 0), pos)); /* never out of bounds */
  } else {
    pos = lw_const(cx, 0, I64, 1, &m);
  }
  int vals = n ? tpu_ir_index_put(G, lw_const(cx, 0, ty(cx, s).dtype, 1, &n), s, 1, &pos, &zero, 0)
               : lw_const(cx, 0, ty(cx, s).dtype, 1, &n);
  tpu_status_t st = lw_output(cx, 0, vals);
  const tpu_tensor_t* mi = lw_out_meta(cx, 1);
  if (!st) {
    int inv = m && tpu_numel(mi->ndim, mi->sizes) == m ? tpu_ir_index_put(G, lw_const(cx, 0, I64, 1, &m), pos, 1, &idx, &zero, 0) : -1;
    st = inv >= 0 ? out_as(cx, 1, inv) : lw_output(cx, 1, lw_const(cx, 0, I64, mi->ndim, mi->sizes));
  }
  const tpu_tensor_t* mc = lw_out_meta(cx, 2);
  if (!st) {
    int c = n && mc->ndim == 1 && mc->sizes[0] == n
                ? tpu_ir_index_put(G, lw_const(cx, 0, I64, 1, &n), lw_const(cx, 1, I64, 1, &m), 1, &pos, &zero, 1) : -1;
    st = c >= 0 ? lw_output(cx, 2, c) : lw_output(cx, 2, lw_const(cx, 0, I64, mc->ndim, mc->sizes));
  }
  return st;
}
static tpu_status_t lower_unique2(tpu_lower_ctx_t* cx) { return lw_unique(cx, 0); }
static tpu_status_t lower_unique_consecutive(tpu_lower_ctx_t* cx) { return lw_unique(cx, 1); }

/* ---------------------------------------------------------------- logcumsumexp */

/* _logcumsumexp(self, dim): the custom scan (stable log-add-exp in double, drivers/host/scan.c) */
static tpu_status_t lower_logcumsumexp(tpu_lower_ctx_t* cx) {
  int idt = lw_dtype_of(cx, 0), r = lw_rank_of(cx, 0);
  if (!tpu_dtype_is_floating(idt))
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "\"logcumsumexp_out_cpu\" not implemented for '%s'", tpu_dtype_name(idt));
  int d = lw_norm_dim(cx, lw_int(cx, 1, 0), r);
  if (d < 0) return TPU_OK;
  int x = at_least_1d(cx, lw_input(cx, 0, idt == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32));
  if (x < 0) return TPU_OK;
  tpu_ir_op_t p = {0};
  p.opcode = TPU_IR_CUSTOM;
  p.type = ty(cx, x);
  p.i0 = TPU_IR_CUSTOM_LOGCUMSUMEXP;
  p.i1 = d;
  return out_as(cx, 0, tpu_ir_add_op(G, &p, 1, &x));
}
/* shape rule (pure): PyTorch has no meta function for it; the result is shaped like self */
static tpu_status_t shapes_logcumsumexp(int dev, const tpu_arg_t* a, int n, tpu_tensor_t* o, int max, int* out_n) {
  return lw_shapes_like_arg(dev, a, n, 0, o, max, out_n);
}

/* ---------------------------------------------------------------- cdist */

/* diff (B, P, R, M) = x1[:, :, None] - x2[:, None] of arguments a1, a2 ([*, P, M], [*, R, M]) */
static int cdist_diff(tpu_lower_ctx_t* cx, int a1, int a2, int dt, int64_t* bpr) {
  int r1 = lw_rank_of(cx, a1), r2 = lw_rank_of(cx, a2);
  if (r1 < 2 || r2 < 2 || r1 != r2) {
    tpu_ir_fail(G, TPU_ERR(UNSUPPORTED, "%s: inputs must have the same rank >= 2", cx->op_name));
    return -1;
  }
  const int64_t *s1 = lw_sizes_of(cx, a1), *s2 = lw_sizes_of(cx, a2);
  int64_t B = 1;
  for (int d = 0; d < r1 - 2; ++d) {
    if (s1[d] != s2[d]) { tpu_ir_fail(G, TPU_ERR(UNSUPPORTED, "%s: batch dims must match", cx->op_name)); return -1; }
    B *= s1[d];
  }
  int64_t P = s1[r1 - 2], R = s2[r2 - 2], M = s1[r1 - 1];
  if (s2[r2 - 1] != M) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "X1 and X2 must have the same number of columns. X1: %lld X2: %lld", (long long)M, (long long)s2[r2 - 1]));
    return -1;
  }
  bpr[0] = B; bpr[1] = P; bpr[2] = R; bpr[3] = M;
  int64_t d4[4] = {B, P, R, M};
  int x1 = tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, a1, dt), 3, (int64_t[]){B, P, M}), 4, d4, (int64_t[]){0, 1, 3});
  int x2 = tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, a2, dt), 3, (int64_t[]){B, R, M}), 4, d4, (int64_t[]){0, 2, 3});
  return BIN(SUB, x1, x2);
}
/* _cdist_forward(x1, x2, p, compute_mode): p picks the algorithm (key_scalars bit 2) */
static tpu_status_t lower_cdist(tpu_lower_ctx_t* cx) {
  double p = lw_key_scalar(cx, 2, 2.0);
  if (p < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "cdist only supports non-negative p values");
  int dt = tpu_opmath_dtype(lw_out_meta(cx, 0)->dtype);
  if (!tpu_dtype_is_floating(dt)) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "cdist only supports floating-point dtypes, X1 got: %s", tpu_dtype_name(lw_dtype_of(cx, 0)));
  int64_t bpr[4];
  int diff = cdist_diff(cx, 0, 1, dt, bpr);
  if (diff < 0) return TPU_OK;
  int64_t fl[4] = {0, 0, 0, 1};
  if (!isinf(p)) return out_as(cx, 0, lw_pnorm(cx, diff, p, fl));
  /* the CPU kernel's max(agg, |d|) skips NaN; no identity for an empty M: 0 */
  int r = bpr[3] ? tpu_ir_reduce(G, TPU_IR_MONOID_NANMAX, tpu_ir_unary(G, TPU_IR_ABS, diff), fl) : lw_const(cx, 0, dt, 3, bpr);
  return out_as(cx, 0, r);
}
/* _cdist_backward(grad [*, P, R], x1, x2, p, cdist [*, P, R]) -> grad of x1 */
static tpu_status_t lower_cdist_bwd(tpu_lower_ctx_t* cx) {
  double p = lw_key_scalar(cx, 3, 2.0);
  int dt = tpu_opmath_dtype(lw_out_meta(cx, 0)->dtype);
  int64_t bpr[4];
  int diff = cdist_diff(cx, 1, 2, dt, bpr);
  if (diff < 0) return TPU_OK;
  int64_t d4[4] = {bpr[0], bpr[1], bpr[2], bpr[3]}, d3[3] = {bpr[0], bpr[1], bpr[2]};
  int g = tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, 0, dt), 3, d3), 4, d4, (int64_t[]){0, 1, 2});
  int dist = tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, 4, dt), 3, d3), 4, d4, (int64_t[]){0, 1, 2});
  int zero = cst(cx, 0, diff), sg = tpu_ir_unary(G, TPU_IR_SIGN, diff), a = tpu_ir_unary(G, TPU_IR_ABS, diff), t;
  int dz = tpu_ir_compare(G, TPU_IR_CMP_EQ, dist, zero);
  if (p == 0) t = zero;
  else if (p == 1) t = sg;
  else if (p == 2) t = tpu_ir_select(G, dz, zero, BIN(DIV, diff, dist));
  else if (isinf(p)) t = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, a, dist), sg, zero);
  else if (p < 2) /* |d|^(p-1) sign(d) / dist^(p-1) */
    t = tpu_ir_select(G, BIN(OR, dz, tpu_ir_compare(G, TPU_IR_CMP_EQ, a, zero)), zero,
                      BIN(DIV, BIN(MUL, sg, BIN(POW, a, cst(cx, p - 1, a))), BIN(POW, dist, cst(cx, p - 1, a))));
  else
    t = tpu_ir_select(G, dz, zero, BIN(DIV, BIN(MUL, diff, BIN(POW, a, cst(cx, p - 2, a))), BIN(POW, dist, cst(cx, p - 1, a))));
  int r = tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, g, t), (int64_t[]){0, 0, 1, 0});
  return out_as(cx, 0, r);
}

TPU_LOWERING_TABLE(tpu_lowerings_misc) = {
  {"aten::_logcumsumexp", lower_logcumsumexp, .shapes = shapes_logcumsumexp},
  {"aten::_logcumsumexp.out", lower_logcumsumexp, .shapes = shapes_logcumsumexp},
  {"aten::_cdist_forward", lower_cdist, 1u << 2}, {"aten::_cdist_forward.out", lower_cdist, 1u << 2},
  {"aten::_cdist_backward", lower_cdist_bwd, 1u << 3}, {"aten::_cdist_backward.out", lower_cdist_bwd, 1u << 3},
  {"aten::_unique2", lower_unique2, .shapes = tpu_shapes_unique2, .shapes_reads_data = true},
  {"aten::unique_consecutive", lower_unique_consecutive, .shapes = tpu_shapes_unique_consecutive, .shapes_reads_data = true},
  {"aten::sort", lower_sort}, {"aten::sort.values", lower_sort},
  {"aten::sort.stable", lower_sort_stable}, {"aten::sort.values_stable", lower_sort_stable},
  {"aten::topk", lower_topk}, {"aten::topk.values", lower_topk},
  {"aten::kthvalue", lower_kthvalue}, {"aten::kthvalue.values", lower_kthvalue},
  {"aten::median.dim", lower_median_dim}, {"aten::median.dim_values", lower_median_dim},
  {"aten::median", lower_median}, {"aten::median.out", lower_median},
  {"aten::nanmedian.dim", lower_nanmedian_dim}, {"aten::nanmedian.dim_values", lower_nanmedian_dim},
  {"aten::nanmedian", lower_nanmedian}, {"aten::nanmedian.out", lower_nanmedian},
  {"aten::_embedding_bag", lower_embedding_bag, .shapes = shapes_embedding_bag},
  {"aten::_embedding_bag.out", lower_embedding_bag},
  {"aten::_embedding_bag_forward_only", lower_embedding_bag, .shapes = shapes_embedding_bag},
  {"aten::_embedding_bag_forward_only.out", lower_embedding_bag},
  {"aten::_embedding_bag_backward", lower_embedding_bag_bwd, .shapes = shapes_embedding_bag_bwd},
  {"aten::_embedding_bag_dense_backward", lower_embedding_bag_dense_bwd, .shapes = shapes_embedding_bag_dense_bwd},
  {"aten::_embedding_bag_dense_backward.out", lower_embedding_bag_dense_bwd},
  {"aten::_embedding_bag_per_sample_weights_backward", lower_embedding_bag_psw_bwd,
   .shapes = shapes_embedding_bag_psw_bwd},
  {"aten::_embedding_bag_per_sample_weights_backward.out", lower_embedding_bag_psw_bwd},
  {"aten::multinomial", lower_multinomial}, {"aten::multinomial.out", lower_multinomial},
  {"aten::reflection_pad1d", lower_reflection_pad}, {"aten::reflection_pad1d.out", lower_reflection_pad},
  {"aten::reflection_pad2d", lower_reflection_pad}, {"aten::reflection_pad2d.out", lower_reflection_pad},
  {"aten::reflection_pad3d", lower_reflection_pad}, {"aten::reflection_pad3d.out", lower_reflection_pad},
  {"aten::replication_pad1d", lower_replication_pad}, {"aten::replication_pad1d.out", lower_replication_pad},
  {"aten::replication_pad2d", lower_replication_pad}, {"aten::replication_pad2d.out", lower_replication_pad},
  {"aten::replication_pad3d", lower_replication_pad}, {"aten::replication_pad3d.out", lower_replication_pad},
  {"aten::reflection_pad1d_backward", lower_reflection_pad_bwd},
  {"aten::reflection_pad1d_backward.grad_input", lower_reflection_pad_bwd},
  {"aten::reflection_pad2d_backward", lower_reflection_pad_bwd},
  {"aten::reflection_pad2d_backward.grad_input", lower_reflection_pad_bwd},
  {"aten::reflection_pad3d_backward", lower_reflection_pad_bwd},
  {"aten::reflection_pad3d_backward.grad_input", lower_reflection_pad_bwd},
  {"aten::replication_pad1d_backward", lower_replication_pad_bwd},
  {"aten::replication_pad1d_backward.grad_input", lower_replication_pad_bwd},
  {"aten::replication_pad2d_backward", lower_replication_pad_bwd},
  {"aten::replication_pad2d_backward.grad_input", lower_replication_pad_bwd},
  {"aten::replication_pad3d_backward", lower_replication_pad_bwd},
  {"aten::replication_pad3d_backward.grad_input", lower_replication_pad_bwd},
  {"aten::searchsorted.Tensor", lower_searchsorted}, {"aten::searchsorted.Tensor_out", lower_searchsorted},
  {"aten::isin.Tensor_Tensor", lower_isin}, {"aten::isin.Tensor_Tensor_out", lower_isin},
  {"aten::isin.Tensor_Scalar", lower_isin}, {"aten::isin.Tensor_Scalar_out", lower_isin},
  {"aten::isin.Scalar_Tensor", lower_isin}, {"aten::isin.Scalar_Tensor_out", lower_isin},
  {"aten::searchsorted.Scalar", lower_searchsorted}, {"aten::searchsorted.Scalar_out", lower_searchsorted},
  {"aten::bucketize.Tensor", lower_bucketize}, {"aten::bucketize.Tensor_out", lower_bucketize},
  {"aten::bucketize.Scalar", lower_bucketize}, {"aten::bucketize.Scalar_out", lower_bucketize},
  TPU_LOWERING_END
};
