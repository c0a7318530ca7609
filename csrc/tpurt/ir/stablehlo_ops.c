/* stablehlo_ops.c — StableHLO expansions of the IR's indexing, sort, scan, argreduce,
 * convolution and window ops, with the host driver's semantics (see stablehlo.c for
 * the conventions): negative indices wrap, argmax/argmin take the first extremum and
 * the first NaN, sorts are stable with NaN last, cumulative float scans accumulate in
 * f64, windows are gathered through constant position tables (padding, dilation,
 * ceil-mode and adaptive windows alike). */
#include <stdlib.h>

#include "ir/stablehlo_impl.h"

/* ---- helpers */
static int64_t g_lo(int dt) {
  switch (dt) {
    case TPU_DTYPE_I32: return INT32_MIN; case TPU_DTYPE_I16: return INT16_MIN;
    case TPU_DTYPE_I8: return INT8_MIN; case TPU_DTYPE_U8: case TPU_DTYPE_BOOL: return 0;
    default: return INT64_MIN;
  }
}
static int64_t g_hi(int dt) {
  switch (dt) {
    case TPU_DTYPE_I32: return INT32_MAX; case TPU_DTYPE_I16: return INT16_MAX;
    case TPU_DTYPE_I8: return INT8_MAX; case TPU_DTYPE_U8: return 255; case TPU_DTYPE_BOOL: return 1;
    default: return INT64_MAX;
  }
}
/* rank-0 constant: -inf/lowest (lowest = 1) or +inf/highest of dt */
static int extreme(shlo_t* P, int dt, int lowest) {
  tpu_ir_type_t t = shlo_ty(dt, 0, NULL);
  if (tpu_dtype_is_floating(dt)) return shlo_const(P, &t, lowest ? -INFINITY : INFINITY, 0);
  return shlo_const(P, &t, 0, lowest ? g_lo(dt) : g_hi(dt));
}
static int is_nan(shlo_t* P, int x) { return shlo_cmp(P, TPU_IR_CMP_NE, x, x); }
static int not_(shlo_t* P, int x) { return shlo_un(P, "stablehlo.not", x); }
static int and_(shlo_t* P, int a, int b) { return shlo_bin(P, "stablehlo.and", a, b); }
static int or_(shlo_t* P, int a, int b) { return shlo_bin(P, "stablehlo.or", a, b); }

/* Dense i64 constant of shape dims from vals. */
static int const_table(shlo_t* P, int rank, const int64_t* dims, const int64_t* vals) {
  tpu_ir_type_t t = shlo_ty(TPU_DTYPE_I64, rank, dims);
  int64_t n = tpu_ir_numel(&t);
  int r = shlo_begin(P, "stablehlo.constant", 0, NULL);
  if (r < 0) return -1;
  shlo_printf(P, " {value = dense<");
  if (rank == 0) shlo_printf(P, "%lld", (long long)vals[0]);
  else {
    /* nested brackets in row-major order */
    int64_t idx[TPU_MAX_DIMS] = {0};
    for (int d = 0; d < rank; ++d) shlo_printf(P, "[");
    for (int64_t i = 0; i < n; ++i) {
      shlo_printf(P, "%lld", (long long)vals[i]);
      int d = rank - 1;
      while (d >= 0 && ++idx[d] == dims[d]) { idx[d] = 0; shlo_printf(P, "]"); --d; }
      if (d >= 0) { shlo_printf(P, ", "); for (int e = d + 1; e < rank; ++e) shlo_printf(P, "["); }
    }
    if (n == 0) for (int d = 0; d < rank; ++d) shlo_printf(P, "]");
  }
  shlo_printf(P, "> : ");
  shlo_tensor(P, &t);
  shlo_printf(P, "}");
  return shlo_end(P, r, 0, NULL, &t);
}

/* idx (integer) -> i64 with negative values wrapped by size (the host's check_index). */
static int wrap_index(shlo_t* P, int idx, int64_t size) {
  idx = shlo_convert(P, idx, TPU_DTYPE_I64);
  int neg = shlo_cmp(P, TPU_IR_CMP_LT, idx, shlo_const_like(P, idx, TPU_DTYPE_I64, 0));
  return shlo_select(P, neg, shlo_bin(P, "stablehlo.add", idx, shlo_const_like(P, idx, TPU_DTYPE_I64, (double)size)), idx);
}

static void gather_attrs(shlo_t* P, const int64_t* offset, int no, const int64_t* collapsed, int nc,
                         const int64_t* start_map, int ns, int ivd, const int64_t* slice, int rank) {
  shlo_printf(P, " {dimension_numbers = #stablehlo.gather<offset_dims = ");
  shlo_list(P, offset, no);
  shlo_printf(P, ", collapsed_slice_dims = "); shlo_list(P, collapsed, nc);
  shlo_printf(P, ", start_index_map = "); shlo_list(P, start_map, ns);
  shlo_printf(P, ", index_vector_dim = %d>, indices_are_sorted = false, slice_sizes = ", ivd);
  shlo_i64s(P, slice, rank);
  shlo_printf(P, "}");
}

/* x.index_select(dim, idx) for idx i64 rank 1 holding valid (non-negative) indices. */
static int take_dim(shlo_t* P, int x, int idx, int dim) {
  if (x < 0 || idx < 0) return -1;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int r = tx->rank;
  int64_t k = shlo_type(P, idx)->dims[0];
  int64_t two[2] = {k, 1};
  int ix = shlo_reshape(P, idx, 2, two);
  int64_t offset[TPU_MAX_DIMS], slice[TPU_MAX_DIMS], cd = dim;
  int no = 0;
  for (int d = 0; d < r; ++d) { slice[d] = d == dim ? 1 : tx->dims[d]; if (d != dim) offset[no++] = d; }
  tpu_ir_type_t t = *tx;
  t.dims[dim] = k;
  int in[2] = {x, ix};
  int g = shlo_begin(P, "stablehlo.gather", 2, in);
  gather_attrs(P, offset, no, &cd, 1, &cd, 1, 1, slice, r);
  return shlo_end(P, g, 2, in, &t);
}

/* Full coordinates [I..., r] for torch.gather/scatter along dim with index idx (shape I). */
static int full_coords(shlo_t* P, int idx, int dim, int64_t dim_size) {
  const tpu_ir_type_t ti = *shlo_type(P, idx);
  int r = ti.rank;
  int parts[TPU_MAX_DIMS];
  tpu_ir_type_t t1 = ti; t1.dtype = TPU_DTYPE_I64; t1.dims[r] = 1; t1.rank = r + 1;
  for (int d = 0; d < r; ++d) {
    tpu_ir_type_t ty = ti; ty.dtype = TPU_DTYPE_I64;
    int c = d == dim ? wrap_index(P, idx, dim_size) : shlo_iota(P, &ty, d);
    parts[d] = shlo_reshape(P, c, t1.rank, t1.dims);
  }
  return shlo_concat(P, r, parts, r);
}

/* ---- argmax/argmin: reduce over (value, index) pairs */
static int argreduce(shlo_t* P, const tpu_ir_op_t* op, int x) {
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int dt = tx->dtype, is_min = (int)op->i0, dim = (int)op->i1;
  tpu_ir_type_t ti = *tx; ti.dtype = TPU_DTYPE_I64;
  int iota = shlo_iota(P, &ti, dim);
  int iv = extreme(P, dt, !is_min);
  int ii = shlo_scalar_const(P, TPU_DTYPE_I64, 0);
  ii = shlo_const(P, shlo_type(P, ii), 0, INT64_MAX);
  int in[4] = {x, iota, iv, ii};
  int r = shlo_begin_multi(P, "stablehlo.reduce", 2, 4, in);
  if (r < 0) return -1;
  int dts[4] = {dt, TPU_DTYPE_I64, dt, TPU_DTYPE_I64};
  int a = shlo_region_begin(P, 4, dts);
  if (a < 0) return -1;
  int av = a, ai = a + 1, bv = a + 2, bi = a + 3;
  int better = shlo_cmp(P, is_min ? TPU_IR_CMP_LT : TPU_IR_CMP_GT, av, bv);
  int tie = shlo_cmp(P, TPU_IR_CMP_EQ, av, bv);
  if (tpu_dtype_is_floating(dt)) { /* NaN beats numbers; NaNs tie */
    int an = is_nan(P, av), bn = is_nan(P, bv);
    better = or_(P, better, and_(P, an, not_(P, bn)));
    tie = or_(P, tie, and_(P, an, bn));
  }
  int take_a = or_(P, better, and_(P, tie, shlo_cmp(P, TPU_IR_CMP_LT, ai, bi)));
  int rets[2] = {shlo_select(P, take_a, av, bv), shlo_select(P, take_a, ai, bi)};
  shlo_region_end(P, 2, rets);
  shlo_printf(P, " {dimensions = array<i64: %d>}", dim);
  tpu_ir_type_t rt[2];
  rt[0] = shlo_ty(dt, 0, NULL);
  for (int d = 0; d < tx->rank; ++d) if (d != dim) rt[0].dims[rt[0].rank++] = tx->dims[d];
  rt[1] = rt[0]; rt[1].dtype = TPU_DTYPE_I64;
  if (shlo_end_multi(P, r, 2, 4, in, rt) < 0) return -1;
  return r + 1;
}

/* ---- cumulative scan as a reduce_window of the whole prefix (f64 for floats, as the host) */
static int cumulative(shlo_t* P, const tpu_ir_op_t* op, int x) {
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int dt = tx->dtype, m = (int)op->i0, dim = (int)op->i1, r = tx->rank;
  int cdt = tpu_dtype_is_floating(dt) ? TPU_DTYPE_F64 : dt;
  int xc = shlo_convert(P, x, cdt);
  if (dt == TPU_DTYPE_BOOL && (m == TPU_IR_MONOID_SUM || m == TPU_IR_MONOID_PROD))
    return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: cumulative sum of bool"));
  int init = shlo_identity(P, m, cdt);
  int64_t n = tx->dims[dim];
  int64_t win[TPU_MAX_DIMS], one[TPU_MAX_DIMS], pad[TPU_MAX_DIMS][2];
  for (int d = 0; d < r; ++d) { win[d] = d == dim ? (n ? n : 1) : 1; one[d] = 1; pad[d][0] = d == dim ? (n ? n - 1 : 0) : 0; pad[d][1] = 0; }
  int in[2] = {xc, init};
  int w = shlo_begin(P, "stablehlo.reduce_window", 2, in);
  if (w < 0) return -1;
  shlo_monoid_region(P, m, cdt);
  shlo_printf(P, " {");
  shlo_padding(P, (const int64_t(*)[2])pad, r);
  shlo_printf(P, ", window_dimensions = ");
  shlo_i64s(P, win, r);
  shlo_printf(P, ", window_strides = ");
  shlo_i64s(P, one, r);
  shlo_printf(P, "}");
  tpu_ir_type_t t = *tx; t.dtype = cdt;
  return shlo_convert(P, shlo_end(P, w, 2, in, &t), dt);
}

/* ---- stable sort along dim (NaN last ascending, first descending); returns values or indices */
static int sort_op(shlo_t* P, int x, int dim, int desc, int want_idx) {
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int dt = tx->dtype;
  if (tx->rank == 0) return want_idx ? shlo_const_like(P, x, TPU_DTYPE_I64, 0) : x;
  tpu_ir_type_t ti = *tx; ti.dtype = TPU_DTYPE_I64;
  int in[2] = {x, shlo_iota(P, &ti, dim)};
  int n = want_idx ? 2 : 1;
  int r = n == 2 ? shlo_begin_multi(P, "stablehlo.sort", 2, 2, in) : shlo_begin(P, "stablehlo.sort", 1, in);
  if (r < 0) return -1;
  int dts[4] = {dt, dt, TPU_DTYPE_I64, TPU_DTYPE_I64};
  if (n == 1) dts[1] = dt;
  int a = shlo_region_begin(P, 2 * n, dts);
  if (a < 0) return -1;
  int av = a, bv = a + 1; /* sort regions take (lhs_0, rhs_0, lhs_1, rhs_1) */
  int less = shlo_cmp(P, desc ? TPU_IR_CMP_GT : TPU_IR_CMP_LT, av, bv);
  if (tpu_dtype_is_floating(dt)) {
    int an = is_nan(P, av), bn = is_nan(P, bv);
    less = or_(P, less, desc ? and_(P, an, not_(P, bn)) : and_(P, not_(P, an), bn));
  }
  shlo_region_end(P, 1, &less);
  shlo_printf(P, " {dimension = %d : i64, is_stable = true}", dim);
  if (n == 1) return shlo_end(P, r, 1, in, tx);
  tpu_ir_type_t rt[2] = {*tx, ti};
  if (shlo_end_multi(P, r, 2, 2, in, rt) < 0) return -1;
  return r + 1;
}

/* ---- scatter (x, coords [U..., n], updates [U..., W...]) with a combiner */
static int scatter(shlo_t* P, int x, int coords, int upd, int n_idx, int ivd, int mode) {
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int dt = tx->dtype, ur = shlo_type(P, upd)->rank;
  int64_t uwd[TPU_MAX_DIMS], ins[TPU_MAX_DIMS];
  int nw = 0;
  for (int d = ivd; d < ur; ++d) uwd[nw++] = d;
  for (int j = 0; j < n_idx; ++j) ins[j] = j;
  int in[3] = {x, coords, upd};
  int s = shlo_begin(P, "stablehlo.scatter", 3, in);
  if (s < 0) return -1;
  int dts[2] = {dt, dt};
  int a = shlo_region_begin(P, 2, dts);
  if (a < 0) return -1;
  int res;
  int b = dt == TPU_DTYPE_BOOL;
  switch (mode) {
    case 0: res = a + 1; break;
    case 1: res = shlo_bin(P, b ? "stablehlo.or" : "stablehlo.add", a, a + 1); break;
    case 2: res = shlo_bin(P, b ? "stablehlo.and" : "stablehlo.multiply", a, a + 1); break;
    case 3: res = shlo_bin(P, b ? "stablehlo.or" : "stablehlo.maximum", a, a + 1); break;
    case 4: res = shlo_bin(P, b ? "stablehlo.and" : "stablehlo.minimum", a, a + 1); break;
    default: return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: scatter mode %d", mode));
  }
  shlo_region_end(P, 1, &res);
  shlo_printf(P, " {indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = ");
  shlo_list(P, uwd, nw);
  shlo_printf(P, ", inserted_window_dims = "); shlo_list(P, ins, n_idx);
  shlo_printf(P, ", scatter_dims_to_operand_dims = "); shlo_list(P, ins, n_idx);
  shlo_printf(P, ", index_vector_dim = %d>, unique_indices = false}", ivd);
  return shlo_end(P, s, 3, in, tx);
}

/* ---- windows: gather each spatial dim through a constant position table.
 * Spatial dim j of x (absolute dim sd) -> dims (O_j, K_j); valid[o, k] says whether the
 * position is inside the input. Adaptive (stride 0): [floor(o S / O), ceil((o + 1) S / O)). */
typedef struct { int64_t O, K; int64_t* pos; int64_t* ok; } wtab_t;
static int wtab_make(wtab_t* w, int64_t S, int64_t O, int64_t K, int64_t st, int64_t pd, int64_t dl) {
  if (st == 0) { /* adaptive: K = widest window */
    K = 1;
    for (int64_t o = 0; o < O; ++o) {
      int64_t s = (o * S) / O, e = ((o + 1) * S + O - 1) / O;
      if (e - s > K) K = e - s;
    }
  }
  w->O = O; w->K = K;
  w->pos = calloc((size_t)(O * K + 1), sizeof(int64_t));
  w->ok = calloc((size_t)(O * K + 1), sizeof(int64_t));
  if (!w->pos || !w->ok) return -1;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < K; ++k) {
      int64_t p, valid;
      if (st == 0) { int64_t s = (o * S) / O, e = ((o + 1) * S + O - 1) / O; p = s + k; valid = p < e; }
      else { p = o * st - pd + k * dl; valid = p >= 0 && p < S; }
      w->pos[o * K + k] = valid ? p : 0;
      w->ok[o * K + k] = valid;
    }
  return 0;
}
static void wtab_free(wtab_t* w) { free(w->pos); free(w->ok); }

/* x [B..., S_0..S_{n-1}] -> windows [B..., O_0, K_0, ..., O_{n-1}, K_{n-1}] plus (optional)
 * the mask and flat spatial positions of the same shape. a0 window, a1 stride, a2 padding then
 * dilation (as the IR ops). */
static int windows(shlo_t* P, int x, int n, const int64_t* out_dims, const int64_t* a0, const int64_t* a1,
                   const int64_t* a2, int* out_mask, int* out_flat) {
  const tpu_ir_type_t tx = *shlo_type(P, x);
  int lead = tx.rank - n;
  wtab_t W[3];
  memset(W, 0, sizeof W);
  int fail = 0;
  for (int j = 0; j < n; ++j)
    if (wtab_make(&W[j], tx.dims[lead + j], out_dims[lead + j], a0[j], a1[j], a2[j], a2[n + j] ? a2[n + j] : 1)) fail = 1;
  if (fail) { for (int j = 0; j < n; ++j) wtab_free(&W[j]); return shlo_fail(P, TPU_ERR(OUT_OF_MEMORY, "stablehlo: out of memory")); }
  int cur = x;
  /* gather spatial dims one at a time; after step j the shape is [B..., O_0, K_0, .., O_j, K_j, S_{j+1}..] */
  for (int j = 0; j < n; ++j) {
    int d = lead + 2 * j;
    int64_t nk = W[j].O * W[j].K;
    int tab = const_table(P, 1, &nk, W[j].pos);
    int g = take_dim(P, cur, tab, d);
    tpu_ir_type_t t = *shlo_type(P, g);
    tpu_ir_type_t t2 = t;
    t2.rank = t.rank + 1;
    for (int e = t.rank; e > d + 1; --e) t2.dims[e] = t.dims[e - 1];
    t2.dims[d] = W[j].O; t2.dims[d + 1] = W[j].K;
    cur = shlo_reshape(P, g, t2.rank, t2.dims);
  }
  const tpu_ir_type_t tw = *shlo_type(P, cur);
  if (out_mask || out_flat) {
    int mask = -1, flat = -1;
    int64_t stride = 1;
    for (int j = n - 1; j >= 0; --j) {
      int64_t od[2] = {W[j].O, W[j].K}, bd[2] = {lead + 2 * j, lead + 2 * j + 1};
      int okt = shlo_bcast(P, shlo_convert_host(P, const_table(P, 2, od, W[j].ok), TPU_DTYPE_BOOL), tw.rank, tw.dims, bd);
      mask = mask < 0 ? okt : and_(P, mask, okt);
      if (out_flat) {
        int pt = shlo_bcast(P, const_table(P, 2, od, W[j].pos), tw.rank, tw.dims, bd);
        if (stride != 1) pt = shlo_bin(P, "stablehlo.multiply", pt, shlo_const_like(P, pt, TPU_DTYPE_I64, (double)stride));
        flat = flat < 0 ? pt : shlo_bin(P, "stablehlo.add", flat, pt);
      }
      stride *= tx.dims[lead + j];
    }
    if (out_mask) *out_mask = mask;
    if (out_flat) *out_flat = flat;
  }
  for (int j = 0; j < n; ++j) wtab_free(&W[j]);
  return cur;
}

/* REDUCE_WINDOW: windows masked with the identity, reduced in f64 (the host accumulates in f64;
 * MAX/MIN skip NaN there, NANMAX propagates it). */
static int reduce_window(shlo_t* P, const tpu_ir_op_t* op, int x) {
  int n = (int)op->i1, m = (int)op->i0;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int dt = tx->dtype, lead = tx->rank - n;
  if (n < 1 || n > 3 || lead < 0) return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: reduce_window rank"));
  int cdt = tpu_dtype_is_floating(dt) ? TPU_DTYPE_F64 : dt;
  int mask = -1;
  int w = windows(P, shlo_convert(P, x, cdt), n, op->type.dims, op->a[0], op->a[1], op->a[2], &mask, NULL);
  int id = shlo_identity(P, m, cdt);
  const tpu_ir_type_t tw = *shlo_type(P, w);
  int idb = shlo_bcast(P, id, tw.rank, tw.dims, NULL);
  if (tpu_dtype_is_floating(dt) && (m == TPU_IR_MONOID_MAX || m == TPU_IR_MONOID_MIN))
    mask = and_(P, mask, not_(P, is_nan(P, w)));
  w = shlo_select(P, mask, w, idb);
  int64_t flags[TPU_MAX_DIMS] = {0};
  for (int j = 0; j < n; ++j) flags[lead + 2 * j + 1] = 1;
  return shlo_convert(P, shlo_reduce(P, m == TPU_IR_MONOID_NANMAX ? TPU_IR_MONOID_MAX : m, w, flags), dt);
}

/* POOL_ARGMAX (custom): per window the flat spatial index of the max, PyTorch's CPU rule
 * (strictly greater replaces, NaN always replaces so the last NaN wins; first valid
 * position if nothing replaced). */
int shlo_pool_argmax(shlo_t* P, const tpu_ir_op_t* op, int x) {
  int n = (int)op->i1;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int dt = tx->dtype, lead = tx->rank - n;
  if (n < 1 || n > 3 || lead < 0) return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: pool_argmax rank"));
  int mask = -1, flat = -1;
  int w = windows(P, x, n, op->type.dims, op->a[0], op->a[1], op->a[2], &mask, &flat);
  const tpu_ir_type_t tw = *shlo_type(P, w);
  w = shlo_select(P, mask, w, shlo_bcast(P, extreme(P, dt, 1), tw.rank, tw.dims, NULL));
  tpu_ir_type_t tf = tw; tf.dtype = TPU_DTYPE_I64;
  flat = shlo_select(P, mask, flat, shlo_const(P, &tf, 0, INT64_MAX));
  /* reduce over the K dims with the pair rule; NaN: larger index wins (last NaN) */
  int iv = extreme(P, dt, 1), ii = shlo_const(P, &(tpu_ir_type_t){.dtype = TPU_DTYPE_I64}, 0, INT64_MAX);
  int in[4] = {w, flat, iv, ii};
  int r = shlo_begin_multi(P, "stablehlo.reduce", 2, 4, in);
  if (r < 0) return -1;
  int dts[4] = {dt, TPU_DTYPE_I64, dt, TPU_DTYPE_I64};
  int a = shlo_region_begin(P, 4, dts);
  if (a < 0) return -1;
  int av = a, ai = a + 1, bv = a + 2, bi = a + 3;
  int a_first = shlo_cmp(P, TPU_IR_CMP_LT, ai, bi);
  int gt = shlo_cmp(P, TPU_IR_CMP_GT, av, bv), eq = shlo_cmp(P, TPU_IR_CMP_EQ, av, bv);
  int take_a = or_(P, gt, and_(P, eq, a_first));
  if (tpu_dtype_is_floating(dt)) {
    int an = is_nan(P, av), bn = is_nan(P, bv);
    int both = and_(P, an, bn);
    take_a = shlo_select(P, both, not_(P, a_first), or_(P, and_(P, an, not_(P, bn)), and_(P, not_(P, bn), take_a)));
  }
  int rets[2] = {shlo_select(P, take_a, av, bv), shlo_select(P, take_a, ai, bi)};
  shlo_region_end(P, 2, rets);
  int64_t rd[3];
  for (int j = 0; j < n; ++j) rd[j] = lead + 2 * j + 1;
  shlo_printf(P, " {dimensions = ");
  shlo_i64s(P, rd, n);
  shlo_printf(P, "}");
  tpu_ir_type_t rt[2];
  rt[0] = shlo_ty(dt, 0, NULL);
  for (int d = 0; d < tw.rank; ++d) {
    int red = 0;
    for (int j = 0; j < n; ++j) red |= d == rd[j];
    if (!red) rt[0].dims[rt[0].rank++] = tw.dims[d];
  }
  rt[1] = rt[0]; rt[1].dtype = TPU_DTYPE_I64;
  if (shlo_end_multi(P, r, 2, 4, in, rt) < 0) return -1;
  return r + 1;
}

/* ---- convolution: dimension numbers for nsp spatial dims */
static void conv_dnums(shlo_t* P, const char* lhs, const char* rhs, const char* out, int nsp) {
  const char* parts[3] = {lhs, rhs, out};
  shlo_printf(P, "dimension_numbers = #stablehlo.conv<");
  for (int k = 0; k < 3; ++k) {
    shlo_printf(P, "%s[%c, %c", k == 0 ? "" : k == 1 ? "x" : "->", parts[k][0], parts[k][1]);
    for (int d = 0; d < nsp; ++d) shlo_printf(P, ", %d", d);
    shlo_printf(P, "]");
  }
  shlo_printf(P, ">");
}
int shlo_conv_general(shlo_t* P, int lhs, int rhs, const char* dl, const char* dr, const char* dout, int nsp,
                      const int64_t* strides, const int64_t (*pad)[2], const int64_t* lhs_dil,
                      const int64_t* rhs_dil, int64_t groups, const tpu_ir_type_t* rt) {
  int in[2] = {lhs, rhs};
  int r = shlo_begin(P, "stablehlo.convolution", 2, in);
  if (r < 0) return -1;
  shlo_printf(P, " {batch_group_count = 1 : i64, ");
  conv_dnums(P, dl, dr, dout, nsp);
  shlo_printf(P, ", feature_group_count = %lld : i64, lhs_dilation = ", (long long)groups);
  shlo_i64s(P, lhs_dil, nsp);
  shlo_printf(P, ", ");
  shlo_padding(P, (const int64_t(*)[2])pad, nsp);
  shlo_printf(P, ", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>], rhs_dilation = ");
  shlo_i64s(P, rhs_dil, nsp);
  shlo_printf(P, ", window_strides = ");
  shlo_i64s(P, strides, nsp);
  shlo_printf(P, "}");
  return shlo_end(P, r, 2, in, rt);
}
static int conv_fwd_term(shlo_t* P, int x, int w, void* ctx) {
  const tpu_ir_op_t* op = ctx;
  int nsp = (int)op->i1;
  int64_t one[3] = {1, 1, 1}, pad[3][2];
  for (int d = 0; d < nsp; ++d) pad[d][0] = pad[d][1] = op->a[1][d];
  return shlo_conv_general(P, x, w, "bf", "oi", "bf", nsp, op->a[0], (const int64_t(*)[2])pad, one, op->a[2], op->i0, &op->type);
}
static int conv_fwd(shlo_t* P, const tpu_ir_op_t* op, int x, int w) {
  int cdt = op->type.dtype, f32 = shlo_type(P, x)->dtype == TPU_DTYPE_F32;
  x = shlo_convert(P, x, cdt); w = shlo_convert(P, w, cdt);
  return shlo_with_precision(P, f32 ? op->prec : 0, x, w, conv_fwd_term, (void*)op);
}

int shlo_print_other(shlo_t* P, const tpu_ir_graph_t* g, int v, const int* in) {
  const tpu_ir_op_t* op = &g->ops[v];
  const tpu_ir_type_t* t = &op->type;
  switch (op->opcode) {
    case TPU_IR_ARGREDUCE: return argreduce(P, op, in[0]);
    case TPU_IR_CUMULATIVE: return cumulative(P, op, in[0]);
    case TPU_IR_SORT: case TPU_IR_ARGSORT: return sort_op(P, in[0], (int)op->i0, (int)op->i1, op->opcode == TPU_IR_ARGSORT);
    case TPU_IR_INDEX_SELECT: {
      int dim = (int)op->i0;
      return take_dim(P, in[0], wrap_index(P, in[1], shlo_type(P, in[0])->dims[dim]), dim);
    }
    case TPU_IR_GATHER: {
      const tpu_ir_type_t tx = *shlo_type(P, in[0]);
      int dim = (int)op->i0, r = tx.rank;
      if (r == 0) return shlo_bcast(P, in[0], t->rank, t->dims, NULL);
      int c = full_coords(P, in[1], dim, tx.dims[dim]);
      int64_t coll[TPU_MAX_DIMS], slice[TPU_MAX_DIMS];
      for (int d = 0; d < r; ++d) { coll[d] = d; slice[d] = 1; }
      int ins[2] = {in[0], c};
      int gth = shlo_begin(P, "stablehlo.gather", 2, ins);
      gather_attrs(P, NULL, 0, coll, r, coll, r, r, slice, r);
      return shlo_end(P, gth, 2, ins, t);
    }
    case TPU_IR_SCATTER: {
      const tpu_ir_type_t tx = *shlo_type(P, in[0]);
      const tpu_ir_type_t ti = *shlo_type(P, in[1]);
      int dim = (int)op->i0;
      if (tx.rank == 0) return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: scatter into a rank-0 tensor"));
      int64_t z[TPU_MAX_DIMS] = {0};
      int src = shlo_slice(P, in[2], z, ti.dims, NULL);
      int c = full_coords(P, in[1], dim, tx.dims[dim]);
      return scatter(P, in[0], c, src, tx.rank, ti.rank, (int)op->i1);
    }
    case TPU_IR_INDEX_PUT: {
      const tpu_ir_type_t tx = *shlo_type(P, in[0]);
      int n = op->n_in - 2;
      const tpu_ir_type_t ts = *shlo_type(P, in[2]);
      int parts[TPU_MAX_DIMS];
      tpu_ir_type_t t1 = ts; t1.dtype = TPU_DTYPE_I64; t1.dims[ts.rank] = 1; t1.rank = ts.rank + 1;
      for (int j = 0; j < n; ++j) {
        if (!tpu_ir_same_shape(shlo_type(P, in[2 + j]), &ts)) return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: index_put index shapes differ"));
        parts[j] = shlo_reshape(P, wrap_index(P, in[2 + j], tx.dims[j]), t1.rank, t1.dims);
      }
      int c = shlo_concat(P, n, parts, ts.rank);
      int vals = shlo_convert(P, in[1], tx.dtype);
      if (shlo_type(P, vals)->rank != ts.rank + tx.rank - n)
        return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: index_put values rank"));
      return scatter(P, in[0], c, vals, n, ts.rank, op->i1 ? 1 : 0);
    }
    case TPU_IR_CONV: return conv_fwd(P, op, in[0], in[1]);
    case TPU_IR_REDUCE_WINDOW: return reduce_window(P, op, in[0]);
    case TPU_IR_CUSTOM: return shlo_print_custom(P, g, v, in);
    case TPU_IR_RNG: return shlo_rng(P, op, in[0], in[1]); /* stablehlo_rng.c */
    default:
      return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: %s is not printed", tpu_ir_opcode_name(op->opcode)));
  }
}
