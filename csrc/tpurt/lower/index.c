/* index.c — lowerings of indexing ops: index_select, gather, scatter (+ reduce),
 * advanced indexing (index.Tensor, index_put), masked_select/masked_scatter,
 * nonzero, take/put, index_add/copy/fill, repeat_interleave, tril/triu_indices.
 *
 * Data-dependent output sizes (nonzero, masked_select, repeat_interleave) are
 * computed by tpu_op_infer (infer.c); here they are static: the output record's
 * shape carries the count n. "Compaction" of the selected elements is done with
 * a cumulative sum of the mask (p = position among the selected) and a scatter
 * into n + 1 rows, where row n collects the unselected ones and is sliced off.
 *
 * Index bounds errors name the dimension as PyTorch does: for advanced indexing,
 * the position of the index among the defined indices. They are found at run time
 * by a gather from an iota (norm_index), which also wraps negative indices.
 */
#include <stdio.h>

#include "lower/lower.h"

#define G (&cx->g)
#define I64 TPU_DTYPE_I64

/* ---- small helpers */

static tpu_ir_type_t ty(tpu_lower_ctx_t* cx, int v) { /* a copy: builders may move g->ops */
  tpu_ir_type_t t;
  if (v < 0 || v >= G->n_ops) { memset(&t, 0, sizeof(t)); return t; }
  return *tpu_ir_type(G, v);
}
static int64_t tnumel(const tpu_ir_type_t* t) { return tpu_ir_numel(t); }

static void shape_str(char* buf, size_t cap, int rank, const int64_t* dims) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, cap - n, "[");
  for (int d = 0; d < rank && n < cap; ++d)
    n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)dims[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Exact int64 constant (tpu_ir_constant goes through a double). */
static int c_i64(tpu_lower_ctx_t* cx, int64_t v) {
  if (v >= -(INT64_C(1) << 53) && v <= (INT64_C(1) << 53)) return tpu_ir_constant(G, I64, (double)v);
  int64_t hi = v / (INT64_C(1) << 32), lo = v - hi * (INT64_C(1) << 32); /* |lo| < 2^32 */
  int h = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_constant(G, I64, (double)hi), tpu_ir_constant(G, I64, 4294967296.0));
  return tpu_ir_binary(G, TPU_IR_ADD, h, tpu_ir_constant(G, I64, (double)lo));
}
static int splat(tpu_lower_ctx_t* cx, int scalar, const tpu_ir_type_t* like) {
  return tpu_ir_broadcast(G, scalar, like->rank, like->dims, NULL);
}
static int reshape1(tpu_lower_ctx_t* cx, int v, int64_t n) { return tpu_ir_reshape(G, v, 1, &n); }

/* idx (i64, any shape) checked against [-size, size) and wrapped to [0, size); an
 * out-of-range index fails at run time with "index i is out of bounds for
 * dimension j with size s". */
static int norm_index_ex(tpu_lower_ctx_t* cx, int idx, int64_t size, int j, int strict) {
  if (idx < 0) return -1;
  tpu_ir_type_t ti = ty(cx, idx);
  int64_t dims[TPU_MAX_DIMS];
  if (j < 0 || j >= TPU_MAX_DIMS) j = TPU_MAX_DIMS - 1;
  for (int d = 0; d < j; ++d) dims[d] = 1;
  dims[j] = tnumel(&ti);
  int r = tpu_ir_reshape(G, idx, j + 1, dims);
  dims[j] = size;
  int io = tpu_ir_iota(G, I64, j + 1, dims, j);
  int gt = tpu_ir_gather(G, io, r, j);
  if (strict && gt >= 0) G->ops[gt].i1 = 1; /* negative indices are an error, as PyTorch's gather/scatter */
  return tpu_ir_reshape(G, gt, ti.rank, ti.dims);
}
static int norm_index(tpu_lower_ctx_t* cx, int idx, int64_t size, int j) { return norm_index_ex(cx, idx, size, j, 0); }

/* Positions of the true elements of a flat bool mask [m]: p = cumsum - 1 where
 * true, `dump` where false (i64 [m]). *out_count (optional) = number of trues ([1]). */
static int select_positions(tpu_lower_ctx_t* cx, int flat_mask, int64_t dump, int* out_count) {
  tpu_ir_type_t t = ty(cx, flat_mask);
  int c = tpu_ir_cumulative(G, TPU_IR_MONOID_SUM, tpu_ir_convert(G, flat_mask, I64), 0);
  if (out_count) {
    int64_t m = t.dims[0], s0 = m ? m - 1 : 0, s1 = m, st = 1;
    *out_count = m ? tpu_ir_slice(G, c, &s0, &s1, &st) : lw_const(cx, 0, I64, 1, (int64_t[]){1});
  }
  int p = tpu_ir_binary(G, TPU_IR_SUB, c, splat(cx, tpu_ir_constant(G, I64, 1), &t));
  return tpu_ir_select(G, flat_mask, p, splat(cx, c_i64(cx, dump), &t));
}

/* Compacts the selected elements of flat src [m] into [n] (pos from select_positions
 * with dump = n). */
static int compact_flat(tpu_lower_ctx_t* cx, int src, int pos, int64_t n) {
  tpu_ir_type_t ts = ty(cx, src);
  int64_t zd = n + 1, s0 = 0, s1 = n, st = 1;
  int sc = tpu_ir_scatter(G, lw_const(cx, 0, ts.dtype, 1, &zd), pos, src, 0, 0);
  return tpu_ir_slice(G, sc, &s0, &s1, &st);
}
/* Compacts the selected rows of src [m, w] into [n, w] (one row copy each). */
static int compact_rows(tpu_lower_ctx_t* cx, int src, int pos, int64_t n) {
  tpu_ir_type_t ts = ty(cx, src);
  if (ts.dims[1] == 1)
    return tpu_ir_reshape(G, compact_flat(cx, reshape1(cx, src, ts.dims[0]), pos, n), 2, (int64_t[]){n, 1});
  int64_t zd[2] = {n + 1, ts.dims[1]}, zero = 0;
  int r = tpu_ir_index_put(G, lw_const(cx, 0, ts.dtype, 2, zd), src, 1, &pos, &zero, 0);
  int64_t s0[2] = {0, 0}, s1[2] = {n, ts.dims[1]}, st[2] = {1, 1};
  return tpu_ir_slice(G, r, s0, s1, st);
}

/* Coordinates of the trues of mask (bool, rank mr >= 1) as mr i64 columns [n]:
 * the linear positions are compacted, then split by the mask's strides. */
static void nonzero_cols(tpu_lower_ctx_t* cx, int mask, int64_t n, int* cols) {
  tpu_ir_type_t tm = ty(cx, mask);
  int64_t m = tnumel(&tm);
  int pos = select_positions(cx, reshape1(cx, mask, m), n, NULL);
  int lin = compact_flat(cx, tpu_ir_iota(G, I64, 1, &m, 0), pos, n);
  int64_t stride = 1;
  for (int d = tm.rank - 1; d >= 0; --d) {
    int c = lin;
    if (stride != 1) c = tpu_ir_binary(G, TPU_IR_FLOOR_DIV, c, tpu_ir_broadcast(G, c_i64(cx, stride), 1, &n, NULL));
    if (d > 0) c = tpu_ir_binary(G, TPU_IR_REM, c, tpu_ir_broadcast(G, c_i64(cx, tm.dims[d]), 1, &n, NULL));
    cols[d] = c;
    stride *= tm.dims[d];
  }
}

static int is_index_dtype(int dt) { return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32; }
static int is_mask_dtype(int dt) { return dt == TPU_DTYPE_BOOL || dt == TPU_DTYPE_U8; }

/* ---- advanced indexing plan (index.Tensor, index_put) */

typedef struct {
  int n;                        /* entries of the indices list with a tensor */
  int list_j[TPU_MAX_DIMS];     /* list position of entry e */
  int dim[TPU_MAX_DIMS];        /* first self dim it indexes */
  int mrank[TPU_MAX_DIMS];      /* mask rank (0 = integer index) */
  int is_mask[TPU_MAX_DIMS];
  int n_masks;
  int nk;                       /* indexed self dims after expanding masks */
  int kdims[TPU_MAX_DIMS];      /* those dims, ascending */
  int adjacent;                 /* they form one run -> result dims go in place */
} plan_t;

static tpu_status_t plan_indices(tpu_lower_ctx_t* cx, int li, int xr, const int64_t* xd, plan_t* p) {
  memset(p, 0, sizeof(*p));
  int len = lw_list_len(cx, li);
  if (len < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: expected a list of indices", cx->op_name);
  int d = 0;
  for (int j = 0; j < len; ++j) {
    const tpu_tensor_t* t = lw_list_meta(cx, li, j);
    if (!t) { d++; continue; }
    int mask = is_mask_dtype(t->dtype);
    if (!mask && !is_index_dtype(t->dtype))
      return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "tensors used as indices must be long, int, byte or bool tensors");
    int take = mask ? t->ndim : 1;
    if (d + take > xr) {
      int got = d + take;
      for (int q = j + 1; q < len; ++q) { const tpu_tensor_t* u = lw_list_meta(cx, li, q); got += (u && is_mask_dtype(u->dtype)) ? u->ndim : 1; }
      return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "too many indices for tensor of dimension %d (got %d)", xr, got);
    }
    if (mask) {
      if (t->ndim == 0)
        return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: a 0-dim boolean index is not supported on tpu", cx->op_name);
      for (int q = 0; q < t->ndim; ++q)
        if (t->sizes[q] != xd[d + q]) {
          char a[160], b[160];
          shape_str(a, sizeof a, t->ndim, t->sizes); shape_str(b, sizeof b, xr, xd);
          return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "The shape of the mask %s at index %d does not match the shape of the indexed tensor %s at index %d",
                         a, q, b, d + q);
        }
    }
    if (p->n >= TPU_MAX_DIMS) return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "too many indices for tensor of dimension %d", xr);
    p->list_j[p->n] = j; p->dim[p->n] = d; p->is_mask[p->n] = mask; p->mrank[p->n] = mask ? t->ndim : 0;
    p->n_masks += mask;
    p->n++;
    for (int q = 0; q < take; ++q) p->kdims[p->nk++] = d + q;
    d += take;
  }
  if (len > xr && d > xr) return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "too many indices for tensor of dimension %d (got %d)", xr, d);
  p->adjacent = 1;
  for (int k = 1; k < p->nk; ++k) if (p->kdims[k] != p->kdims[k - 1] + 1) p->adjacent = 0;
  return TPU_OK;
}

/* Broadcast shape of the integer indices (masks excluded); fails like PyTorch. */
static tpu_status_t index_bcast_shape(tpu_lower_ctx_t* cx, int li, const plan_t* p, int* rb, int64_t* B) {
  *rb = 0;
  for (int e = 0; e < p->n; ++e) {
    if (p->is_mask[e]) { if (*rb < 1) { *rb = 1; B[0] = 1; } continue; }
    const tpu_tensor_t* t = lw_list_meta(cx, li, p->list_j[e]);
    int r = t->ndim > *rb ? t->ndim : *rb;
    int64_t nb[TPU_MAX_DIMS];
    for (int q = 0; q < r; ++q) {
      int qa = q - (r - *rb), qb = q - (r - t->ndim);
      int64_t a = qa >= 0 ? B[qa] : 1, b = qb >= 0 ? t->sizes[qb] : 1;
      if (a != b && a != 1 && b != 1) {
        char s[TPU_MAX_DIMS * 8 * 24] = {0};
        size_t n = 0;
        for (int f = 0; f < p->n && n < sizeof(s) - 64; ++f) {
          if (p->is_mask[f]) continue;
          const tpu_tensor_t* u = lw_list_meta(cx, li, p->list_j[f]);
          if (n) n += (size_t)snprintf(s + n, sizeof(s) - n, ", ");
          shape_str(s + n, sizeof(s) - n, u->ndim, u->sizes);
          n = strlen(s);
        }
        return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "shape mismatch: indexing tensors could not be broadcast together with shapes %s", s);
      }
      nb[q] = a == 1 ? b : a;
    }
    *rb = r;
    memcpy(B, nb, (size_t)r * sizeof(int64_t));
  }
  return TPU_OK;
}

/* Shape of x[indices]: B in place of the indexed dims (adjacent) or in front. */
static int index_result_shape(const plan_t* p, int xr, const int64_t* xd, int rb, const int64_t* B, int64_t* rs) {
  int n = 0, first = p->nk ? p->kdims[0] : 0;
  int in_place = p->adjacent;
  if (!in_place) for (int q = 0; q < rb; ++q) rs[n++] = B[q];
  for (int d = 0; d < xr; ++d) {
    int indexed = 0;
    for (int k = 0; k < p->nk; ++k) indexed |= p->kdims[k] == d;
    if (indexed) { if (in_place && d == first) for (int q = 0; q < rb; ++q) rs[n++] = B[q]; continue; }
    rs[n++] = xd[d];
  }
  return n;
}

/* perm = indexed dims then the others; returns the number of dims before the
 * indexed run (the result dims sit there when adjacent). */
static void index_perm(const plan_t* p, int xr, int64_t* perm, int64_t* inv) {
  int n = 0;
  for (int k = 0; k < p->nk; ++k) perm[n++] = p->kdims[k];
  for (int d = 0; d < xr; ++d) {
    int indexed = 0;
    for (int k = 0; k < p->nk; ++k) indexed |= p->kdims[k] == d;
    if (!indexed) perm[n++] = d;
  }
  for (int d = 0; d < xr; ++d) inv[perm[d]] = d;
}

/* The integer index values for every indexed dim (masks expanded to columns of
 * size n_mask, broadcast and normalized), each broadcast to B [rb]. */
static void index_values(tpu_lower_ctx_t* cx, int li, const plan_t* p, const int64_t* xd, int rb, const int64_t* B,
                         int* idx) {
  int k = 0;
  for (int e = 0; e < p->n; ++e) {
    if (p->is_mask[e]) {
      int mask = lw_list_input(cx, li, p->list_j[e], -1);
      if (ty(cx, mask).dtype != TPU_DTYPE_BOOL) mask = tpu_ir_compare(G, TPU_IR_CMP_NE, mask, lw_const_like(cx, 0, mask));
      int64_t n = B[rb - 1];
      int cols[TPU_MAX_DIMS], cnt;
      tpu_ir_type_t tm = ty(cx, mask);
      nonzero_cols(cx, mask, n, cols);
      /* A single true broadcasts against longer indices: the count is then 1, not n. */
      if (n > 1) {
        int flat = reshape1(cx, mask, tnumel(&tm));
        select_positions(cx, flat, n, &cnt);
        int one = tpu_ir_compare(G, TPU_IR_CMP_EQ, cnt, lw_const(cx, 1, I64, 1, (int64_t[]){1}));
        one = tpu_ir_broadcast(G, one, 1, &n, NULL);
        for (int q = 0; q < tm.rank; ++q) {
          int64_t s0 = 0, s1 = 1, st = 1;
          int first = tpu_ir_broadcast(G, tpu_ir_slice(G, cols[q], &s0, &s1, &st), 1, &n, NULL);
          cols[q] = tpu_ir_select(G, one, first, cols[q]);
        }
      }
      for (int q = 0; q < tm.rank; ++q) idx[k++] = tpu_ir_broadcast(G, cols[q], rb, B, NULL);
    } else {
      int v = lw_list_input(cx, li, p->list_j[e], I64);
      idx[k] = tpu_ir_broadcast(G, norm_index(cx, v, xd[p->kdims[k]], k), rb, B, NULL);
      k++;
    }
  }
}

/* x[..., mask, ...] with one mask (dims [k, k + mr)) and Nones: the selected slices
 * compacted in order, n of them (n from the output shape). */
static tpu_status_t index_one_mask(tpu_lower_ctx_t* cx, const plan_t* p, int xr, const int64_t* xd, int64_t n) {
  int k = p->dim[0], mr = p->mrank[0];
  const tpu_tensor_t* o = &cx->outs[0];
  if (tpu_numel(o->ndim, o->sizes) == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, 0, NULL));
  int mask = lw_list_input(cx, 1, p->list_j[0], -1);
  if (ty(cx, mask).dtype != TPU_DTYPE_BOOL) mask = tpu_ir_compare(G, TPU_IR_CMP_NE, mask, lw_const_like(cx, 0, mask));
  int64_t perm[TPU_MAX_DIMS], m = 1, PR = 1, rd[TPU_MAX_DIMS];
  int np = 0, nr = 0;
  for (int d = k; d < k + mr; ++d) { perm[np++] = d; m *= xd[d]; }
  for (int d = 0; d < xr; ++d) if (d < k || d >= k + mr) { perm[np++] = d; rd[nr++] = xd[d]; PR *= xd[d]; }
  int xt = tpu_ir_reshape(G, tpu_ir_transpose(G, lw_input(cx, 0, -1), perm), 2, (int64_t[]){m, PR});
  int pos = select_positions(cx, reshape1(cx, mask, m), n, NULL);
  int r = compact_rows(cx, xt, pos, n); /* [n, PR] */
  int64_t rs[TPU_MAX_DIMS];
  rs[0] = n;
  for (int q = 0; q < nr; ++q) rs[q + 1] = rd[q];
  r = tpu_ir_reshape(G, r, nr + 1, rs);
  if (k > 0) { /* [n, before, after] -> [before, n, after] */
    int64_t pm[TPU_MAX_DIMS]; int q = 0;
    for (int d = 0; d < k; ++d) pm[q++] = d + 1;
    pm[q++] = 0;
    for (int d = k + 1; d <= nr; ++d) pm[q++] = d;
    r = tpu_ir_transpose(G, r, pm);
  }
  return lw_output(cx, 0, r);
}

/* ---- index.Tensor(self, indices) -> out */
static tpu_status_t lower_index(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = &cx->outs[0];
  int xr = lw_rank_of(cx, 0);
  int64_t xd[TPU_MAX_DIMS];
  memcpy(xd, lw_sizes_of(cx, 0), sizeof(xd));
  plan_t p;
  TPU_RETURN_IF_ERROR(plan_indices(cx, 1, xr, xd, &p));
  int x = lw_input(cx, 0, -1);
  if (p.nk == 0) return lw_output(cx, 0, x);
  int rb; int64_t B[TPU_MAX_DIMS];
  TPU_RETURN_IF_ERROR(index_bcast_shape(cx, 1, &p, &rb, B));
  /* B as PyTorch computed it (a mask's count is data-dependent: take it from out) */
  int first = p.kdims[0], pos = p.adjacent ? first : 0;
  if (pos + rb > o->ndim) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: unexpected output rank", cx->op_name);
  for (int q = 0; q < rb; ++q) B[q] = o->sizes[pos + q];
  int64_t NB = tpu_numel(rb, B);
  int idx[TPU_MAX_DIMS];
  if (p.n == 1 && p.n_masks == 1) return index_one_mask(cx, &p, xr, xd, B[0]);
  if (p.nk == 1 && !p.n_masks) { /* one integer index: index_select along its dim */
    int k = p.kdims[0];
    int v = lw_list_input(cx, 1, p.list_j[0], I64);
    if (k != 0) v = norm_index(cx, v, xd[k], 0); /* errors name dimension 0 as PyTorch */
    tpu_ir_type_t tv = ty(cx, v);
    if (tnumel(&tv) != NB) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: index shape mismatch", cx->op_name);
    int r = xr == 1 ? tpu_ir_gather(G, x, reshape1(cx, v, NB), 0)
                    : tpu_ir_index_select(G, x, reshape1(cx, v, NB), k);
    int64_t rs[TPU_MAX_DIMS]; int n = 0;
    for (int d = 0; d < k; ++d) rs[n++] = xd[d];
    for (int q = 0; q < rb; ++q) rs[n++] = B[q];
    for (int d = k + 1; d < xr; ++d) rs[n++] = xd[d];
    return lw_output(cx, 0, tpu_ir_reshape(G, r, n, rs));
  }
  index_values(cx, 1, &p, xd, rb, B, idx);
  /* linear index into the indexed dims (row-major over kdims) */
  int lin = -1;
  int64_t stride = 1;
  for (int k = p.nk - 1; k >= 0; --k) {
    int term = idx[k];
    if (stride != 1) term = tpu_ir_binary(G, TPU_IR_MUL, term, tpu_ir_broadcast(G, c_i64(cx, stride), rb, B, NULL));
    lin = lin < 0 ? term : tpu_ir_binary(G, TPU_IR_ADD, lin, term);
    stride *= xd[p.kdims[k]];
  }
  int64_t perm[TPU_MAX_DIMS], inv[TPU_MAX_DIMS];
  index_perm(&p, xr, perm, inv);
  int64_t PK = stride, PR = 1, rd[TPU_MAX_DIMS];
  int nr = 0;
  for (int q = p.nk; q < xr; ++q) { rd[nr++] = xd[perm[q]]; PR *= xd[perm[q]]; }
  int xt = tpu_ir_transpose(G, x, perm);
  int sel = PR == 1 ? tpu_ir_gather(G, reshape1(cx, xt, PK), reshape1(cx, lin, NB), 0)
                    : tpu_ir_index_select(G, tpu_ir_reshape(G, xt, 2, (int64_t[]){PK, PR}), reshape1(cx, lin, NB), 0);
  int64_t rs[TPU_MAX_DIMS];
  int n = 0;
  for (int q = 0; q < rb; ++q) rs[n++] = B[q];
  for (int q = 0; q < nr; ++q) rs[n++] = rd[q];
  int r = tpu_ir_reshape(G, sel, n, rs);
  if (p.adjacent && first > 0) { /* [B, R_before, R_after] -> [R_before, B, R_after] */
    int64_t pm[TPU_MAX_DIMS]; int m = 0;
    for (int q = 0; q < first; ++q) pm[m++] = rb + q;
    for (int q = 0; q < rb; ++q) pm[m++] = q;
    for (int q = rb + first; q < n; ++q) pm[m++] = q;
    r = tpu_ir_transpose(G, r, pm);
  }
  return lw_output(cx, 0, r);
}

/* ---- index_put_ / _index_put_impl_(self, indices, values, accumulate[, unsafe]) */
static tpu_status_t check_same_dtype_put(tpu_lower_ctx_t* cx, int xdt, int vdt) {
  if (xdt != vdt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Index put requires the source and destination dtypes match, got %s for the destination and %s for the source.",
                   tpu_dtype_c10_name(xdt), tpu_dtype_c10_name(vdt));
  return TPU_OK;
}
static int can_bcast(int r, const int64_t* d, int R, const int64_t* D) {
  if (r > R) { for (int q = 0; q < r - R; ++q) if (d[q] != 1) return 0; d += r - R; r = R; }
  for (int q = 0; q < r; ++q) { int64_t a = d[q], b = D[R - r + q]; if (a != 1 && a != b) return 0; }
  return 1;
}
static tpu_status_t value_mismatch(tpu_lower_ctx_t* cx, int vr, const int64_t* vd, int rr, const int64_t* rs) {
  char a[200], b[200];
  shape_str(a, sizeof a, vr, vd); shape_str(b, sizeof b, rr, rs);
  return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape %s", a, b);
}

/* self[mask] = values (accumulate: +=) with one mask index and Nones: a select,
 * the values taken in order of the trues when they vary along the masked dim. */
static tpu_status_t put_mask(tpu_lower_ctx_t* cx, const plan_t* p, int xr, const int64_t* xd, int acc) {
  int k = p->dim[0], mr = p->mrank[0];
  int x = lw_input(cx, 0, -1);
  int mask = lw_list_input(cx, 1, p->list_j[0], -1);
  if (ty(cx, mask).dtype != TPU_DTYPE_BOOL) mask = tpu_ir_compare(G, TPU_IR_CMP_NE, mask, lw_const_like(cx, 0, mask));
  int64_t m = 1;
  for (int q = 0; q < mr; ++q) m *= xd[k + q];
  /* mask broadcast to self */
  int64_t md[TPU_MAX_DIMS];
  for (int d = 0; d < xr; ++d) md[d] = (d >= k && d < k + mr) ? xd[d] : 1;
  int mb = tpu_ir_broadcast(G, tpu_ir_reshape(G, mask, xr, md), xr, xd, NULL);
  /* values: must broadcast to rs = xd[:k] + [n] + xd[k+mr:]; n unknown, take v's own */
  int vr = lw_rank_of(cx, 2);
  int64_t vd[TPU_MAX_DIMS];
  memcpy(vd, lw_sizes_of(cx, 2), sizeof(vd));
  int rr = xr - mr + 1;
  int64_t rs[TPU_MAX_DIMS];
  for (int d = 0; d < k; ++d) rs[d] = xd[d];
  int vq = k - (rr - vr); /* v's dim aligned with the n dim */
  int64_t nv = (vq >= 0 && vq < vr) ? vd[vq] : 1;
  rs[k] = nv;
  for (int d = k + mr; d < xr; ++d) rs[d - mr + 1] = xd[d];
  if (!can_bcast(vr, vd, rr, rs)) { rs[k] = m; return value_mismatch(cx, vr, vd, rr, rs); }
  int v = lw_bcast(cx, lw_input(cx, 2, -1), rr, rs);
  int g;
  if (nv == 1) {
    int64_t gd[TPU_MAX_DIMS];
    for (int d = 0; d < xr; ++d) gd[d] = (d >= k && d < k + mr) ? 1 : xd[d];
    g = tpu_ir_broadcast(G, tpu_ir_reshape(G, v, xr, gd), xr, xd, NULL);
  } else {
    int cnt;
    int pos = select_positions(cx, reshape1(cx, mask, m), 0, &cnt);
    pos = tpu_ir_binary(G, TPU_IR_MAX, pos, lw_const_like(cx, 0, pos)); /* unselected -> 0 */
    /* a count other than the values' length is a shape mismatch in PyTorch: fail the
     * gather below (index nv is out of bounds) rather than write a partial result */
    int bad = tpu_ir_compare(G, TPU_IR_CMP_NE, cnt, lw_const(cx, (double)nv, I64, 1, (int64_t[]){1}));
    bad = tpu_ir_broadcast(G, bad, 1, &m, NULL);
    pos = tpu_ir_select(G, bad, lw_const_like(cx, (double)nv, pos), pos);
    g = tpu_ir_reshape(G, tpu_ir_index_select(G, v, pos, k), xr, xd);
  }
  int r = acc ? tpu_ir_binary(G, TPU_IR_ADD, x, tpu_ir_select(G, mb, g, lw_const_like(cx, 0, g)))
              : tpu_ir_select(G, mb, g, x);
  return lw_output(cx, 0, r);
}

static tpu_status_t lower_index_put(tpu_lower_ctx_t* cx) {
  int xr = lw_rank_of(cx, 0), xdt = lw_dtype_of(cx, 0);
  int64_t xd[TPU_MAX_DIMS];
  memcpy(xd, lw_sizes_of(cx, 0), sizeof(xd));
  int acc = (int)lw_int(cx, 3, 0);
  TPU_RETURN_IF_ERROR(check_same_dtype_put(cx, xdt, lw_dtype_of(cx, 2)));
  plan_t p;
  TPU_RETURN_IF_ERROR(plan_indices(cx, 1, xr, xd, &p));
  if (p.nk == 0) { /* self[...] = values */
    int vr = lw_rank_of(cx, 2);
    if (!can_bcast(vr, lw_sizes_of(cx, 2), xr, xd)) return value_mismatch(cx, vr, lw_sizes_of(cx, 2), xr, xd);
    int v = lw_bcast(cx, lw_input(cx, 2, -1), xr, xd);
    return lw_output(cx, 0, acc ? tpu_ir_binary(G, TPU_IR_ADD, lw_input(cx, 0, -1), v) : v);
  }
  if (p.n_masks) {
    if (p.n != 1)
      return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: a boolean mask combined with other indices is not supported on tpu", cx->op_name);
    return put_mask(cx, &p, xr, xd, acc);
  }
  int rb; int64_t B[TPU_MAX_DIMS];
  TPU_RETURN_IF_ERROR(index_bcast_shape(cx, 1, &p, &rb, B));
  int64_t rs[TPU_MAX_DIMS];
  int rr = index_result_shape(&p, xr, xd, rb, B, rs);
  int vr = lw_rank_of(cx, 2);
  int64_t vd[TPU_MAX_DIMS];
  memcpy(vd, lw_sizes_of(cx, 2), sizeof(vd));
  if (!can_bcast(vr, vd, rr, rs)) return value_mismatch(cx, vr, vd, rr, rs);
  int x = lw_input(cx, 0, -1);
  int v = lw_bcast(cx, lw_input(cx, 2, -1), rr, rs);
  int first = p.kdims[0];
  if (p.adjacent && first > 0) { /* [R_before, B, R_after] -> [B, R_before, R_after] */
    int64_t pm[TPU_MAX_DIMS]; int m = 0;
    for (int q = 0; q < rb; ++q) pm[m++] = first + q;
    for (int q = 0; q < first; ++q) pm[m++] = q;
    for (int q = first + rb; q < rr; ++q) pm[m++] = q;
    v = tpu_ir_transpose(G, v, pm);
  }
  int idx[TPU_MAX_DIMS];
  index_values(cx, 1, &p, xd, rb, B, idx);
  int64_t perm[TPU_MAX_DIMS], inv[TPU_MAX_DIMS], kd[TPU_MAX_DIMS];
  index_perm(&p, xr, perm, inv);
  for (int k = 0; k < p.nk; ++k) kd[k] = k;
  int r = tpu_ir_index_put(G, tpu_ir_transpose(G, x, perm), v, p.nk, idx, kd, acc);
  return lw_output(cx, 0, tpu_ir_transpose(G, r, inv));
}

/* ---- index_select(self, dim, index) */
static tpu_status_t lower_index_select(tpu_lower_ctx_t* cx) {
  int xr = lw_rank_of(cx, 0);
  int dim = lw_norm_dim(cx, lw_int(cx, 1, 0), xr);
  if (dim < 0) return TPU_OK;
  if (lw_rank_of(cx, 2) > 1) return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "index_select(): Index is supposed to be a vector");
  if (!is_index_dtype(lw_dtype_of(cx, 2)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "index_select(): Expected dtype int32 or int64 for index");
  const int64_t* is = lw_sizes_of(cx, 2);
  int64_t n = lw_rank_of(cx, 2) ? is[0] : 1;
  if (xr == 0 && n != 1)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "index_select(): Index to scalar can have only 1 value, got %lld value(s)", (long long)n);
  int x = lw_input(cx, 0, -1);
  if (xr == 0) x = reshape1(cx, x, 1);
  int idx = reshape1(cx, lw_input(cx, 2, I64), n);
  /* PyTorch rejects negative indices here: the kernels report them as given (no wrap) */
  int v = xr <= 1 ? tpu_ir_gather(G, x, idx, 0) : tpu_ir_index_select(G, x, idx, dim);
  if (v >= 0) G->ops[v].i1 = xr <= 1 ? 1 : 2;
  return lw_output(cx, 0, v);
}

/* ---- gather(self, dim, index, sparse_grad) */
static tpu_status_t check_gather_scatter_shapes(tpu_lower_ctx_t* cx, const char* what, int dim, int xi, int ii, int si) {
  int xr = lw_rank_of(cx, xi), ir = lw_rank_of(cx, ii);
  const int64_t *xd = lw_sizes_of(cx, xi), *id = lw_sizes_of(cx, ii);
  /* as ATen: an empty index is accepted whatever its dtype (nothing is read) */
  if (tpu_numel(ir, id) == 0) return TPU_OK;
  if (lw_dtype_of(cx, ii) != TPU_DTYPE_I64 && lw_dtype_of(cx, ii) != TPU_DTYPE_I32)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s(): Expected dtype int32/int64 for index", what);
  if (ir != xr && !(xr <= 1 && ir <= 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Index tensor must have the same number of dimensions as %s tensor", si >= 0 ? "self" : "input");
  if (si >= 0 && lw_is_tensor(cx, si) && lw_rank_of(cx, si) != xr && !(xr <= 1 && lw_rank_of(cx, si) <= 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Index tensor must have the same number of dimensions as src tensor");
  char a[200], b[200], c[200];
  for (int d = 0; d < ir; ++d) {
    int bad = d != dim && id[d] > (xr ? xd[d] : 1);
    int bad_src = si >= 0 && lw_is_tensor(cx, si) && lw_rank_of(cx, si) == ir && id[d] > lw_sizes_of(cx, si)[d];
    if (bad || bad_src) {
      shape_str(a, sizeof a, ir, id); shape_str(b, sizeof b, xr, xd);
      if (si < 0)
        return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Size does not match at dimension %d expected index %s to be no larger than self %s apart from dimension %d", d, a, b, dim);
      shape_str(c, sizeof c, lw_rank_of(cx, si), lw_sizes_of(cx, si));
      if (!lw_is_tensor(cx, si))
        return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected index %s to be no larger than self %s apart from dimension %d", a, b, dim);
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected index %s to be no larger than self %s apart from dimension %d and to be no larger size than src %s", a, b, dim, c);
    }
  }
  return TPU_OK;
}
/* rank-0 / rank-1 mixes are allowed by PyTorch: everything goes to rank max(r, 1). */
static int as_rank(tpu_lower_ctx_t* cx, int v, int r) {
  tpu_ir_type_t t = ty(cx, v);
  if (t.rank == r) return v;
  return tpu_ir_reshape(G, v, r, (int64_t[]){tnumel(&t)});
}
static tpu_status_t lower_gather(tpu_lower_ctx_t* cx) {
  int xr = lw_rank_of(cx, 0);
  int dim = lw_norm_dim(cx, lw_int(cx, 1, 0), xr);
  if (dim < 0) return TPU_OK;
  TPU_RETURN_IF_ERROR(check_gather_scatter_shapes(cx, "gather", dim, 0, 2, -1));
  const tpu_tensor_t* o = &cx->outs[0];
  if (tpu_numel(o->ndim, o->sizes) == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, 0, NULL));
  int r = xr > lw_rank_of(cx, 2) ? xr : lw_rank_of(cx, 2);
  int x = as_rank(cx, lw_input(cx, 0, -1), r), idx = as_rank(cx, lw_input(cx, 2, TPU_DTYPE_I64), r);
  int v = tpu_ir_gather(G, x, idx, dim);
  if (v >= 0) G->ops[v].i1 = 1; /* torch.gather rejects negative indices */
  return lw_output(cx, 0, v);
}

/* ---- scatter family: out = self with src (or value) written/reduced at index */
enum { SC_REPLACE = 0, SC_ADD = 1, SC_MUL = 2, SC_MAX = 3, SC_MIN = 4 };
static tpu_status_t scatter_common(tpu_lower_ctx_t* cx, int src_i, int mode, const char* what) {
  int xr = lw_rank_of(cx, 0), xdt = lw_dtype_of(cx, 0);
  int dim = lw_norm_dim(cx, lw_int(cx, 1, 0), xr);
  if (dim < 0) return TPU_OK;
  TPU_RETURN_IF_ERROR(check_gather_scatter_shapes(cx, what, dim, 0, 2, src_i));
  if (lw_is_tensor(cx, src_i) && lw_rank_of(cx, src_i) >= 0 && !lw_is_scalar_arg(cx, src_i) && lw_dtype_of(cx, src_i) != xdt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s(): Expected self.dtype to be equal to src.dtype", what);
  int x = lw_input(cx, 0, -1);
  tpu_ir_type_t ti = {I64, lw_rank_of(cx, 2), {0}};
  memcpy(ti.dims, lw_sizes_of(cx, 2), sizeof(ti.dims));
  if (tnumel(&ti) == 0) return lw_output(cx, 0, x);
  int r = xr > ti.rank ? xr : ti.rank;
  /* PyTorch's scatter rejects negative indices: range-checked through a no-wrap gather */
  int idx = norm_index_ex(cx, as_rank(cx, lw_input(cx, 2, TPU_DTYPE_I64), r), xr ? lw_sizes_of(cx, 0)[dim] : 1, dim, 1);
  ti = ty(cx, idx);
  int src;
  if (lw_is_scalar_arg(cx, src_i)) src = splat(cx, lw_scalar(cx, src_i, xdt), &ti);
  else {
    src = as_rank(cx, lw_input(cx, src_i, -1), r);
    tpu_ir_type_t ts = ty(cx, src);
    if (!tpu_ir_same_shape(&ts, &ti)) { /* the kernel walks index positions: crop src to them */
      int64_t s0[TPU_MAX_DIMS] = {0}, st[TPU_MAX_DIMS];
      for (int d = 0; d < r; ++d) st[d] = 1;
      src = tpu_ir_slice(G, src, s0, ti.dims, st);
    }
  }
  return lw_output(cx, 0, tpu_ir_scatter(G, as_rank(cx, x, r), idx, src, dim, mode));
}
static tpu_status_t lower_scatter_src(tpu_lower_ctx_t* cx) { return scatter_common(cx, 3, SC_REPLACE, "scatter"); }
static tpu_status_t lower_scatter_add(tpu_lower_ctx_t* cx) { return scatter_common(cx, 3, SC_ADD, "scatter_add"); }
static tpu_status_t lower_scatter_reduce(tpu_lower_ctx_t* cx) { /* (self, dim, index, src|value, *, reduce) */
  const char* red = lw_str(cx, 4, "");
  if (!strcmp(red, "add")) return scatter_common(cx, 3, SC_ADD, "scatter");
  if (!strcmp(red, "multiply")) return scatter_common(cx, 3, SC_MUL, "scatter");
  return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "reduce argument must be either add or multiply.");
}
/* Reduces src into x at idx along dim (mode: SC_ADD sum, SC_MUL, SC_MAX, SC_MIN; mean =
 * sum / count), with or without x's own values (include_self). idx and src have the
 * same shape, x's rank. */
static int scatter_reduce_core(tpu_lower_ctx_t* cx, int x, int idx, int src, int dim, int mode, int mean,
                               int include_self) {
  tpu_ir_type_t tx = ty(cx, x), ti = ty(cx, idx);
  int xdt = tx.dtype, base = x;
  if (!include_self) { /* reset the scattered-to positions to the identity */
    int c;
    if (!tpu_dtype_is_floating(xdt) && (mode == SC_MAX || mode == SC_MIN)) {
      int64_t lo = xdt == TPU_DTYPE_I64 ? INT64_MIN : xdt == TPU_DTYPE_I32 ? INT32_MIN : xdt == TPU_DTYPE_I16 ? INT16_MIN
                 : xdt == TPU_DTYPE_I8 ? INT8_MIN : 0;
      int64_t hi = xdt == TPU_DTYPE_I64 ? INT64_MAX : xdt == TPU_DTYPE_I32 ? INT32_MAX : xdt == TPU_DTYPE_I16 ? INT16_MAX
                 : xdt == TPU_DTYPE_I8 ? INT8_MAX : xdt == TPU_DTYPE_U8 ? 255 : 1;
      c = tpu_ir_convert(G, c_i64(cx, mode == SC_MAX ? lo : hi), xdt);
    } else {
      c = tpu_ir_constant(G, xdt, mode == SC_MUL ? 1 : mode == SC_MAX ? -INFINITY : mode == SC_MIN ? INFINITY : 0);
    }
    base = tpu_ir_scatter(G, x, idx, splat(cx, c, &ti), dim, SC_REPLACE);
  }
  int res = tpu_ir_scatter(G, base, idx, src, dim, mode);
  if (mean) {
    int cnt = tpu_ir_scatter(G, lw_const(cx, include_self ? 1 : 0, xdt, tx.rank, tx.dims), idx,
                             lw_const(cx, 1, xdt, ti.rank, ti.dims), dim, SC_ADD);
    cnt = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, cnt, lw_const_like(cx, 0, cnt)), lw_const_like(cx, 1, cnt), cnt);
    if (tpu_dtype_is_floating(xdt)) {
      int odt = tpu_opmath_dtype(xdt);
      res = tpu_ir_binary(G, TPU_IR_DIV, tpu_ir_convert(G, res, odt), tpu_ir_convert(G, cnt, odt));
    } else {
      res = tpu_ir_binary(G, TPU_IR_FLOOR_DIV, tpu_ir_convert(G, res, I64), tpu_ir_convert(G, cnt, I64));
    }
  }
  return res;
}
static int reduce_mode(const char* red, int* mean) {
  *mean = 0;
  if (!strcmp(red, "sum")) return SC_ADD;
  if (!strcmp(red, "prod")) return SC_MUL;
  if (!strcmp(red, "amax")) return SC_MAX;
  if (!strcmp(red, "amin")) return SC_MIN;
  if (!strcmp(red, "mean")) { *mean = 1; return SC_ADD; }
  return -1;
}
/* scatter_reduce.two(self, dim, index, src, reduce, *, include_self) */
static tpu_status_t lower_scatter_reduce_two(tpu_lower_ctx_t* cx) {
  const char* red = lw_str(cx, 4, "");
  int xr = lw_rank_of(cx, 0), xdt = lw_dtype_of(cx, 0), mean;
  int mode = reduce_mode(red, &mean);
  if (mode < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "reduce argument must be either sum, prod, mean, amax or amin, got %s", red);
  int dim = lw_norm_dim(cx, lw_int(cx, 1, 0), xr);
  if (dim < 0) return TPU_OK;
  TPU_RETURN_IF_ERROR(check_gather_scatter_shapes(cx, "scatter_reduce", dim, 0, 2, 3));
  if (lw_dtype_of(cx, 3) != xdt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "scatter_reduce(): Expected self.dtype to be equal to src.dtype");
  int x = lw_input(cx, 0, -1);
  tpu_ir_type_t ti = {I64, lw_rank_of(cx, 2), {0}};
  memcpy(ti.dims, lw_sizes_of(cx, 2), sizeof(ti.dims));
  if (tnumel(&ti) == 0) return lw_output(cx, 0, x);
  int r = xr > ti.rank ? xr : ti.rank;
  x = as_rank(cx, x, r);
  int idx = norm_index_ex(cx, as_rank(cx, lw_input(cx, 2, TPU_DTYPE_I64), r), xr ? lw_sizes_of(cx, 0)[dim] : 1, dim, 1);
  ti = ty(cx, idx);
  int src = as_rank(cx, lw_input(cx, 3, -1), r);
  tpu_ir_type_t ts = ty(cx, src);
  if (!tpu_ir_same_shape(&ts, &ti)) {
    int64_t s0[TPU_MAX_DIMS] = {0}, st[TPU_MAX_DIMS];
    for (int d = 0; d < r; ++d) st[d] = 1;
    src = tpu_ir_slice(G, src, s0, ti.dims, st);
  }
  return lw_output(cx, 0, scatter_reduce_core(cx, x, idx, src, dim, mode, mean, (int)lw_int(cx, 5, 1)));
}
/* index_reduce(self, dim, index, source, reduce, *, include_self): scatter_reduce with
 * the 1-D index spread over source's other dims */
static tpu_status_t lower_index_reduce(tpu_lower_ctx_t* cx) {
  const char* red = lw_str(cx, 4, "");
  int xr = lw_rank_of(cx, 0), xdt = lw_dtype_of(cx, 0), mean;
  int mode = reduce_mode(red, &mean);
  if (mode < 0 || (mode == SC_ADD && !mean))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got %s.", red);
  int dim = lw_norm_dim(cx, lw_int(cx, 1, 0), xr);
  if (dim < 0) return TPU_OK;
  if (lw_rank_of(cx, 2) > 1) return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "index_reduce_(): Index is supposed to be a vector");
  if (!is_index_dtype(lw_dtype_of(cx, 2)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "index_reduce_(): Expected dtype int32/int64 for index");
  if (lw_dtype_of(cx, 3) != xdt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "index_reduce_(): self (%s) and source (%s) must have the same scalar type",
                   tpu_dtype_name(xdt), tpu_dtype_name(lw_dtype_of(cx, 3)));
  int64_t n = tpu_numel(lw_rank_of(cx, 2), lw_sizes_of(cx, 2));
  int64_t xd[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
  memcpy(xd, lw_sizes_of(cx, 0), sizeof(xd));
  int r = xr ? xr : 1;
  if (!xr) xd[0] = 1;
  memcpy(sd, xd, sizeof(sd));
  sd[dim] = n;
  if (tpu_numel(lw_rank_of(cx, 3), lw_sizes_of(cx, 3)) != tpu_numel(r, sd) || (lw_rank_of(cx, 3) != xr && xr > 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "index_reduce_(): Source/destination tensor must have same slice shapes.");
  int x = lw_input(cx, 0, -1);
  if (n == 0) return lw_output(cx, 0, x);
  x = as_rank(cx, x, r);
  int64_t id[TPU_MAX_DIMS];
  for (int d = 0; d < r; ++d) id[d] = d == dim ? n : 1;
  int idx = norm_index_ex(cx, reshape1(cx, lw_input(cx, 2, I64), n), xd[dim], dim, 1);
  idx = tpu_ir_broadcast(G, tpu_ir_reshape(G, idx, r, id), r, sd, NULL);
  int src = tpu_ir_reshape(G, lw_input(cx, 3, -1), r, sd);
  int res = scatter_reduce_core(cx, x, idx, src, dim, mode, mean, (int)lw_int(cx, 5, 1));
  return lw_output(cx, 0, xr ? res : tpu_ir_reshape(G, res, 0, NULL));
}

/* bincount(self, weights?, minlength) -> [max(max(self) + 1, minlength)] (size from
 * tpu_op_infer): scatter-add of the weights (or ones) */
static tpu_status_t lower_bincount(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = &cx->outs[0];
  if (lw_rank_of(cx, 0) != 1 || !tpu_dtype_is_integral(lw_dtype_of(cx, 0)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "bincount only supports 1-d non-negative integral inputs.");
  int64_t n = lw_sizes_of(cx, 0)[0], nb = o->ndim == 1 ? o->sizes[0] : 0;
  int w = !lw_is_none(cx, 1);
  if (w && (lw_rank_of(cx, 1) != 1 || lw_sizes_of(cx, 1)[0] != n))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "weights should be 1-d and have the same length as input");
  if (n == 0 || nb == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, 0, NULL));
  int src = w ? lw_input(cx, 1, o->dtype) : lw_const(cx, 1, o->dtype, 1, &n);
  int idx = lw_input(cx, 0, I64);
  return lw_output(cx, 0, tpu_ir_scatter(G, lw_const(cx, 0, o->dtype, 1, &nb), idx, src, 0, SC_ADD));
}

/* histc(self, bins, min, max) -> [bins] in self's dtype. min and max are structural (key_scalars
 * bits 2, 3): min == max takes the range from the data's extrema; an empty range [v, v] is widened by
 * tpu_ir_histc_widen (PyTorch's: v -+ 1, or the next f32 / f64 value where that is farther). Floating
 * inputs follow PyTorch's CPU kernel in self's dtype, rounding each step: L = lo, R = hi as self's dtype, bin = trunc((x - L) * bins / (R - L)), the last bin closed at
 * R; x outside [L, R] (NaN included) is not counted. Integral inputs follow the CUDA kernel (the CPU
 * has none; Hugging Face's MoE layers pass int32 expert ids on accelerators): bin = (x - lo) * bins /
 * (hi - lo) in i64. Counts add up in f32 for bf16 / f16 and are rounded once (PyTorch's CPU adds 1s in
 * bf16 / f16 per thread, so a bin stops at 256 / 2048 per thread). A data range that is not finite (inf or
 * NaN data with min == max) raises PyTorch's error when the graph runs (the HISTC_EDGES custom call widens and
 * checks the f64 extrema: at the next sync, at once under TORCH_TPU_LAUNCH_BLOCKING=1). */
static tpu_status_t lower_histc(tpu_lower_ctx_t* cx) {
  int dt = lw_dtype_of(cx, 0), fl = tpu_dtype_is_floating(dt);
  if (dt == TPU_DTYPE_BOOL) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "\"histc\" not implemented for 'Bool'");
  int64_t bins = lw_int(cx, 1, 100), n = tpu_numel(lw_rank_of(cx, 0), lw_sizes_of(cx, 0));
  if (bins <= 0)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "torch.histogram(): bins must be > 0, but got %lld for dimension 0", (long long)bins);
  double lo = lw_key_scalar(cx, 2, 0), hi = lw_key_scalar(cx, 3, 0);
  if (!fl && isfinite(lo) && isfinite(hi)) { lo = trunc(lo); hi = trunc(hi); } /* Scalar.to<int>() */
  int from_data = lo == hi && n > 0;
  if (!from_data) TPU_RETURN_IF_ERROR(tpu_ir_histc_range(dt, &lo, &hi));
  if (n == 0) return lw_output(cx, 0, lw_const(cx, 0, dt, 1, &bins));
  int ct = fl ? tpu_opmath_dtype(dt) : I64;
#define RND(v) (fl && ct != dt ? tpu_ir_convert(G, tpu_ir_convert(G, (v), dt), ct) : (v)) /* one dt op */
  int x = tpu_ir_convert(G, reshape1(cx, lw_input(cx, 0, -1), n), ct), L, R;
  if (from_data && fl) { /* PyTorch's widening and checks on the extrema as double: HISTC_EDGES at run time */
    int mn = tpu_ir_convert(G, tpu_ir_reduce(G, TPU_IR_MONOID_MIN, x, (int64_t[]){1}), TPU_DTYPE_F64);
    int mx = tpu_ir_convert(G, tpu_ir_reduce(G, TPU_IR_MONOID_MAX, x, (int64_t[]){1}), TPU_DTYPE_F64);
    const tpu_ir_type_t t2 = {.dtype = TPU_DTYPE_F64, .rank = 1, .dims = {2}};
    int e = lw_custom(cx, TPU_IR_CUSTOM_HISTC_EDGES, dt, &t2, 2, (int[]){mn, mx});
    L = RND(tpu_ir_convert(G, tpu_ir_reshape(G, lw_slice_dim(cx, e, 0, 0, 1), 0, (int64_t[]){1}), ct));
    R = RND(tpu_ir_convert(G, tpu_ir_reshape(G, lw_slice_dim(cx, e, 0, 1, 2), 0, (int64_t[]){1}), ct));
  } else if (from_data) { /* integers: widened in the integer type (CUDA) */
    L = tpu_ir_reduce(G, TPU_IR_MONOID_MIN, x, (int64_t[]){1});
    R = tpu_ir_reduce(G, TPU_IR_MONOID_MAX, x, (int64_t[]){1});
    int eq = tpu_ir_compare(G, TPU_IR_CMP_EQ, L, R);
    L = tpu_ir_select(G, eq, tpu_ir_binary(G, TPU_IR_SUB, L, lw_const_like(cx, 1, L)), L);
    R = tpu_ir_select(G, eq, tpu_ir_binary(G, TPU_IR_ADD, R, lw_const_like(cx, 1, R)), R);
  } else {
    L = RND(tpu_ir_constant(G, ct, lo));
    R = RND(tpu_ir_constant(G, ct, hi));
  }
  int Lb = lw_bcast_like(cx, L, x), Rb = lw_bcast_like(cx, R, x);
  int in = tpu_ir_binary(G, TPU_IR_AND, tpu_ir_compare(G, TPU_IR_CMP_GE, x, Lb), tpu_ir_compare(G, TPU_IR_CMP_LE, x, Rb));
  int nb = RND(lw_const_like(cx, (double)bins, x)), pos;
  if (fl) {
    int q = RND(tpu_ir_binary(G, TPU_IR_DIV, RND(tpu_ir_binary(G, TPU_IR_MUL, RND(tpu_ir_binary(G, TPU_IR_SUB, x, Lb)), nb)),
                              RND(tpu_ir_binary(G, TPU_IR_SUB, Rb, Lb))));
    q = tpu_ir_select(G, in, tpu_ir_unary(G, TPU_IR_TRUNC, q), lw_const_like(cx, 0, q)); /* never convert NaN */
    pos = tpu_ir_convert(G, q, I64);
  } else {
    pos = tpu_ir_binary(G, TPU_IR_DIV, tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_SUB, x, Lb), nb),
                        tpu_ir_binary(G, TPU_IR_SUB, Rb, Lb));
  }
#undef RND
  int last = lw_const_like(cx, (double)bins, pos);
  pos = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, pos, last), lw_const_like(cx, (double)(bins - 1), pos), pos);
  pos = tpu_ir_clamp(G, lw_const_like(cx, 0, pos), pos, lw_const_like(cx, (double)(bins - 1), pos));
  pos = tpu_ir_select(G, in, pos, last); /* uncounted elements go to an extra slot, sliced off */
  int64_t nb1 = bins + 1, s0 = 0, st = 1;
  int h = tpu_ir_scatter(G, lw_const(cx, 0, ct, 1, &nb1), pos, lw_const(cx, 1, ct, 1, &n), 0, SC_ADD);
  h = tpu_ir_slice(G, h, &s0, &bins, &st);
  return lw_output(cx, 0, h);
}

/* ---- index_add / index_copy / index_fill along one dim (via index_put on dim-first) */
static tpu_status_t index_along(tpu_lower_ctx_t* cx, int dim_i, int idx_i, int src_i, int alpha_i, int acc, int fill,
                                const char* what) {
  int xr = lw_rank_of(cx, 0), xdt = lw_dtype_of(cx, 0);
  int dim = lw_norm_dim(cx, lw_int(cx, dim_i, 0), xr);
  if (dim < 0) return TPU_OK;
  if (lw_rank_of(cx, idx_i) > 1) return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "%s(): Index is supposed to be a vector", what);
  if (!is_index_dtype(lw_dtype_of(cx, idx_i)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s(): Expected dtype int32/int64 for index", what);
  int64_t n = tpu_numel(lw_rank_of(cx, idx_i), lw_sizes_of(cx, idx_i));
  int64_t xd[TPU_MAX_DIMS];
  memcpy(xd, lw_sizes_of(cx, 0), sizeof(xd));
  int r = xr ? xr : 1;
  if (!xr) xd[0] = 1;
  int x = lw_input(cx, 0, -1);
  if (n == 0) return lw_output(cx, 0, x);
  x = as_rank(cx, x, r);
  int64_t perm[TPU_MAX_DIMS], inv[TPU_MAX_DIMS], vd[TPU_MAX_DIMS];
  perm[0] = dim;
  for (int d = 0, m = 1; d < r; ++d) if (d != dim) perm[m++] = d;
  for (int d = 0; d < r; ++d) { inv[perm[d]] = d; vd[d] = xd[perm[d]]; }
  vd[0] = n;
  int v;
  if (!fill) {
    int sr = lw_rank_of(cx, src_i);
    const int64_t* sd = lw_sizes_of(cx, src_i);
    int ok = (sr == xr || (sr <= 1 && xr <= 1)) && lw_dtype_of(cx, src_i) == xdt;
    for (int d = 0; ok && d < sr; ++d) ok = sd[d] == (d == dim ? n : xd[d]);
    if (xr == 0 && sr <= 1) ok = ok && tpu_numel(sr, sd) == n;
    if (!ok) {
      if (lw_dtype_of(cx, src_i) != xdt)
        return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s(): self (%s) and source (%s) must have the same scalar type", what,
                       tpu_dtype_name(xdt), tpu_dtype_name(lw_dtype_of(cx, src_i)));
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s(): Source/destination tensor must have same slice shapes. Destination slice shape: %lld at dimension %d and source slice shape: %lld at dimension 0.",
                     what, (long long)(xr ? xd[dim] : 1), dim, (long long)(sr ? sd[0] : 1));
    }
    v = tpu_ir_transpose(G, as_rank(cx, lw_input(cx, src_i, -1), r), perm);
    if (alpha_i >= 0 && lw_is_scalar_arg(cx, alpha_i)) {
      int odt = tpu_opmath_dtype(xdt);
      v = tpu_ir_convert(G, v, odt);
      v = tpu_ir_binary(G, TPU_IR_MUL, v, lw_bcast_like(cx, lw_scalar(cx, alpha_i, odt), v));
      v = tpu_ir_convert(G, v, xdt);
    }
  } else { /* fill value */
    if (lw_is_tensor(cx, src_i) && lw_rank_of(cx, src_i) != 0)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).", lw_rank_of(cx, src_i));
    v = tpu_ir_broadcast(G, lw_input(cx, src_i, xdt), r, vd, NULL);
  }
  int idx = norm_index_ex(cx, reshape1(cx, lw_input(cx, idx_i, I64), n), xd[dim], dim, !fill); /* index_fill wraps */
  int64_t zero = 0;
  int res = tpu_ir_index_put(G, tpu_ir_transpose(G, x, perm), v, 1, &idx, &zero, acc);
  res = tpu_ir_transpose(G, res, inv);
  return lw_output(cx, 0, xr ? res : tpu_ir_reshape(G, res, 0, NULL));
}
static tpu_status_t lower_index_add(tpu_lower_ctx_t* cx) { return index_along(cx, 1, 2, 3, 4, 1, 0, "index_add_"); }
static tpu_status_t lower_index_copy(tpu_lower_ctx_t* cx) { return index_along(cx, 1, 2, 3, -1, 0, 0, "index_copy_"); }
static tpu_status_t lower_index_fill(tpu_lower_ctx_t* cx) { return index_along(cx, 1, 2, 3, -1, 0, 1, "index_fill_"); }

/* ---- take(self, index) / put_(self, index, source, accumulate): flat indexing */
static tpu_status_t lower_take(tpu_lower_ctx_t* cx) {
  if (lw_dtype_of(cx, 1) != I64)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "take(): Expected a long tensor for index, but got %s", tpu_dtype_name(lw_dtype_of(cx, 1)));
  int64_t n = tpu_numel(lw_rank_of(cx, 0), lw_sizes_of(cx, 0)), ni = tpu_numel(lw_rank_of(cx, 1), lw_sizes_of(cx, 1));
  const tpu_tensor_t* o = &cx->outs[0];
  if (ni == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, 0, NULL));
  if (n == 0) return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "take(): tried to take from an empty tensor");
  int x = reshape1(cx, lw_input(cx, 0, -1), n);
  int idx = reshape1(cx, lw_input(cx, 1, -1), ni);
  return lw_output(cx, 0, tpu_ir_reshape(G, tpu_ir_gather(G, x, idx, 0), o->ndim, o->sizes));
}
static tpu_status_t lower_put(tpu_lower_ctx_t* cx) {
  int xr = lw_rank_of(cx, 0);
  int64_t xd[TPU_MAX_DIMS];
  memcpy(xd, lw_sizes_of(cx, 0), sizeof(xd));
  int64_t n = tpu_numel(xr, xd), ni = tpu_numel(lw_rank_of(cx, 1), lw_sizes_of(cx, 1));
  int64_t ns = tpu_numel(lw_rank_of(cx, 2), lw_sizes_of(cx, 2));
  if (lw_dtype_of(cx, 1) != I64)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "put_(): Expected a long tensor for index, but got %s", tpu_dtype_name(lw_dtype_of(cx, 1)));
  if (lw_dtype_of(cx, 2) != lw_dtype_of(cx, 0))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "put_(): self and source expected to have the same dtype, but got self.dtype = %s and source.dtype = %s",
                   tpu_dtype_name(lw_dtype_of(cx, 0)), tpu_dtype_name(lw_dtype_of(cx, 2)));
  if (ns != ni)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "put_(): Expected source and index to have the same number of elements, but got source.numel() = %lld, index.numel() = %lld",
                   (long long)ns, (long long)ni);
  int x = lw_input(cx, 0, -1);
  if (ni == 0) return lw_output(cx, 0, x);
  int idx = norm_index(cx, reshape1(cx, lw_input(cx, 1, -1), ni), n, 0);
  int v = reshape1(cx, lw_input(cx, 2, -1), ni);
  int64_t zero = 0;
  int r = tpu_ir_index_put(G, reshape1(cx, x, n), v, 1, &idx, &zero, (int)lw_int(cx, 3, 0));
  return lw_output(cx, 0, tpu_ir_reshape(G, r, xr, xd));
}

/* ---- masked_select(self, mask) -> [n]; nonzero(self) -> [n, rank] */
static tpu_status_t lower_masked_select(tpu_lower_ctx_t* cx) {
  if (lw_dtype_of(cx, 1) != TPU_DTYPE_BOOL)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "masked_select: expected BoolTensor for mask");
  const tpu_tensor_t* o = &cx->outs[0];
  int64_t n = o->ndim == 1 ? o->sizes[0] : 0;
  /* joint broadcast shape */
  int ra = lw_rank_of(cx, 0), rm = lw_rank_of(cx, 1), r = ra > rm ? ra : rm;
  int64_t J[TPU_MAX_DIMS];
  for (int q = 0; q < r; ++q) {
    int qa = q - (r - ra), qm = q - (r - rm);
    int64_t a = qa >= 0 ? lw_sizes_of(cx, 0)[qa] : 1, m = qm >= 0 ? lw_sizes_of(cx, 1)[qm] : 1;
    if (a != m && a != 1 && m != 1)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton dimension %d",
                     (long long)a, (long long)m, q);
    J[q] = a == 1 ? m : a;
  }
  int64_t total = tpu_numel(r, J);
  if (n == 0 || total == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, 0, NULL));
  int x = reshape1(cx, lw_bcast(cx, lw_input(cx, 0, -1), r, J), total);
  int m = reshape1(cx, lw_bcast(cx, lw_input(cx, 1, -1), r, J), total);
  return lw_output(cx, 0, compact_flat(cx, x, select_positions(cx, m, n, NULL), n));
}
static tpu_status_t lower_nonzero(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = &cx->outs[0];
  int xr = lw_rank_of(cx, 0);
  int64_t n = o->ndim == 2 ? o->sizes[0] : 0;
  if (o->ndim != 2 || o->sizes[1] != xr)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "nonzero: out must be a 2-d tensor of shape [n, %d]", xr);
  if (n == 0 || xr == 0) return lw_output(cx, 0, lw_const(cx, 0, I64, 0, NULL));
  int x = lw_input(cx, 0, -1);
  int m = tpu_ir_compare(G, TPU_IR_CMP_NE, x, lw_const_like(cx, 0, x));
  int cols[TPU_MAX_DIMS];
  nonzero_cols(cx, m, n, cols);
  for (int d = 0; d < xr; ++d) cols[d] = tpu_ir_reshape(G, cols[d], 2, (int64_t[]){n, 1});
  return lw_output(cx, 0, xr == 1 ? cols[0] : tpu_ir_concat(G, xr, cols, 1));
}

/* ---- masked_scatter_(self, mask, source): the trues take source's elements in order */
static tpu_status_t lower_masked_scatter(tpu_lower_ctx_t* cx) {
  if (lw_dtype_of(cx, 1) != TPU_DTYPE_BOOL)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "masked_scatter_ only supports boolean masks, but got mask with dtype %s", tpu_dtype_name(lw_dtype_of(cx, 1)));
  if (lw_dtype_of(cx, 2) != lw_dtype_of(cx, 0))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "masked_scatter_: expected self and source to have same dtypes but got %s and %s",
                   tpu_dtype_name(lw_dtype_of(cx, 0)), tpu_dtype_name(lw_dtype_of(cx, 2)));
  const tpu_tensor_t* o = &cx->outs[0];
  int64_t total = tpu_numel(o->ndim, o->sizes), ns = tpu_numel(lw_rank_of(cx, 2), lw_sizes_of(cx, 2));
  int x = lw_input(cx, 0, -1);
  if (total == 0 || ns == 0) return lw_output(cx, 0, x); /* (PyTorch errors if ns == 0 and a mask is true) */
  int m = lw_bcast(cx, lw_input(cx, 1, -1), o->ndim, o->sizes);
  int pos = select_positions(cx, reshape1(cx, m, total), 0, NULL);
  int g = tpu_ir_index_select(G, reshape1(cx, lw_input(cx, 2, -1), ns), pos, 0);
  return lw_output(cx, 0, tpu_ir_select(G, m, tpu_ir_reshape(G, g, o->ndim, o->sizes), x));
}

/* ---- repeat_interleave.Tensor(repeats, *, output_size) -> [sum(repeats)] */
static tpu_status_t lower_repeat_interleave(tpu_lower_ctx_t* cx) {
  if (lw_rank_of(cx, 0) != 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "repeat_interleave only accept 1D vector as repeat");
  if (!is_index_dtype(lw_dtype_of(cx, 0)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "repeats has to be Long or Int tensor");
  const tpu_tensor_t* o = &cx->outs[0];
  int64_t total = o->ndim == 1 ? o->sizes[0] : 0, nr = lw_sizes_of(cx, 0)[0];
  if (total == 0 || nr == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, 0, NULL));
  /* out[j] = #{i : cumsum(repeats)[i] <= j}: count segment ends per position, then cumsum */
  int c = tpu_ir_cumulative(G, TPU_IR_MONOID_SUM, lw_input(cx, 0, I64), 0);
  c = tpu_ir_binary(G, TPU_IR_MIN, c, lw_const_like(cx, (double)total, c)); /* dump at `total` */
  int64_t zd = total + 1;
  int z = lw_const(cx, 0, I64, 1, &zd);
  int marks = tpu_ir_scatter(G, z, c, lw_const(cx, 1, I64, 1, &nr), 0, SC_ADD);
  int cs = tpu_ir_cumulative(G, TPU_IR_MONOID_SUM, marks, 0);
  int64_t s0 = 0, s1 = total, st = 1;
  return lw_output(cx, 0, tpu_ir_slice(G, cs, &s0, &s1, &st));
}

/* ---- tril_indices / triu_indices(row, col, offset) -> [2, n] */
static tpu_status_t tri_indices(tpu_lower_ctx_t* cx, int upper) {
  int64_t row = lw_int(cx, 0, 0), col = lw_int(cx, 1, 0), off = lw_int(cx, 2, 0);
  const tpu_tensor_t* o = &cx->outs[0];
  if (row < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "row must be non-negative, got%lld", (long long)row);
  if (col < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "col must be non-negative, got%lld", (long long)col);
  int64_t n = o->ndim == 2 ? o->sizes[1] : 0;
  if (n == 0) return lw_output(cx, 0, lw_const(cx, 0, I64, 0, NULL));
  int64_t d[2] = {row, col};
  int i = tpu_ir_iota(G, I64, 2, d, 0), j = tpu_ir_iota(G, I64, 2, d, 1);
  int diff = tpu_ir_binary(G, TPU_IR_SUB, j, i); /* j - i */
  int mask = tpu_ir_compare(G, upper ? TPU_IR_CMP_GE : TPU_IR_CMP_LE, diff, lw_const_like(cx, (double)off, diff));
  int cols[2];
  nonzero_cols(cx, mask, n, cols);
  int a = tpu_ir_reshape(G, cols[0], 2, (int64_t[]){1, n}), b = tpu_ir_reshape(G, cols[1], 2, (int64_t[]){1, n});
  return lw_output(cx, 0, tpu_ir_concat(G, 2, (int[]){a, b}, 0));
}
static tpu_status_t lower_tril_indices(tpu_lower_ctx_t* cx) { return tri_indices(cx, 0); }
static tpu_status_t lower_triu_indices(tpu_lower_ctx_t* cx) { return tri_indices(cx, 1); }

TPU_LOWERING_TABLE(tpu_lowerings_index) = {
  {"aten::index.Tensor_out", lower_index}, {"aten::index.Tensor", lower_index},
  {"aten::_index_put_impl_", lower_index_put}, {"aten::index_put_", lower_index_put},
  {"aten::index_put", lower_index_put},
  {"aten::index_select.out", lower_index_select}, {"aten::index_select", lower_index_select},
  {"aten::gather.out", lower_gather},
  {"aten::scatter.src_out", lower_scatter_src}, {"aten::scatter.value_out", lower_scatter_src},
  {"aten::scatter.reduce_out", lower_scatter_reduce}, {"aten::scatter.value_reduce_out", lower_scatter_reduce},
  {"aten::scatter_add.out", lower_scatter_add}, {"aten::scatter_reduce.two_out", lower_scatter_reduce_two},
  {"aten::index_add.out", lower_index_add}, {"aten::index_copy.out", lower_index_copy},
  {"aten::index_fill_.int_Scalar", lower_index_fill}, {"aten::index_fill_.int_Tensor", lower_index_fill},
  {"aten::take", lower_take}, {"aten::take.out", lower_take}, {"aten::put_", lower_put},
  {"aten::masked_select", lower_masked_select, .shapes = tpu_shapes_masked_select, .shapes_reads_data = true},
  {"aten::masked_select.out", lower_masked_select, .shapes = tpu_shapes_masked_select, .shapes_reads_data = true},
  {"aten::nonzero", lower_nonzero, .shapes = tpu_shapes_nonzero, .shapes_reads_data = true},
  {"aten::nonzero.out", lower_nonzero, .shapes = tpu_shapes_nonzero, .shapes_reads_data = true},
  {"aten::masked_scatter_", lower_masked_scatter},
  {"aten::index_reduce.out", lower_index_reduce},
  {"aten::bincount", lower_bincount, .shapes = tpu_shapes_bincount, .shapes_reads_data = true},
  {"aten::histc", lower_histc, (1u << 2) | (1u << 3)}, {"aten::histc.out", lower_histc, (1u << 2) | (1u << 3)},
  {"aten::repeat_interleave.Tensor", lower_repeat_interleave, .shapes = tpu_shapes_repeat_interleave,
   .shapes_reads_data = true},
  {"aten::tril_indices", lower_tril_indices}, {"aten::triu_indices", lower_triu_indices},
  {"aten::tril_indices.out", lower_tril_indices}, {"aten::triu_indices.out", lower_triu_indices},
  TPU_LOWERING_END
};
