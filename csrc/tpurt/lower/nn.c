/* nn.c — lowerings of neural-network ops: softmax / log_softmax and their backward,
 * losses (nll_loss, nll_loss2d, mse, binary cross entropy, smooth L1, huber) and
 * their backward, layer norm forward/backward, dropout, embedding backward and renorm, the fused weight
 * norm (+ backward).
 * Math runs in the op-math dtype (f32 for f16/bf16); reductions accumulate in f64
 * inside the reduce kernel. Softmax / log_softmax (+ backward) and non-empty layer norm run
 * as host row kernels (custom ROWS_SOFTMAX(_BWD), ROWS_LAYER_NORM(_BWD), CHANNEL_STATS).
 * Target indices are checked by the gather / scatter / index_put kernels at run time
 * (IndexError at the next sync), never clamped. */
#include <stdio.h>

#include "lower/lower.h"

#define G (&cx->g)
#define BIN(op, a, b) tpu_ir_binary(G, TPU_IR_##op, (a), (b))
#define UN(op, a) tpu_ir_unary(G, TPU_IR_##op, (a))

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

static tpu_ir_type_t type_of(tpu_lower_ctx_t* cx, int v) {
  tpu_ir_type_t t = {0};
  if (v >= 0) t = *tpu_ir_type(G, v); /* a copy: builders may move the op array */
  return t;
}
#define unreduce lw_unreduce
static int sum_all(tpu_lower_ctx_t* cx, int v) {
  tpu_ir_type_t t = type_of(cx, v);
  if (v < 0 || t.rank == 0) return v;
  int64_t fl[TPU_MAX_DIMS];
  for (int d = 0; d < t.rank; ++d) fl[d] = 1;
  return tpu_ir_reduce(G, TPU_IR_MONOID_SUM, v, fl);
}
static int scalar_like(tpu_lower_ctx_t* cx, int s, int like) { return lw_bcast_like(cx, s, like); }
static int reduction_arg(tpu_lower_ctx_t* cx, int i) {
  int64_t r = lw_int(cx, i, RED_MEAN);
  if (r < RED_NONE || r > RED_SUM) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: %lld is not a valid value for reduction", cx->op_name, (long long)r));
    return -1;
  }
  return (int)r;
}
/* none: v; sum: sum(v); mean: sum(v) / numel(v) (NaN for empty v, as PyTorch) */
static int reduce_loss(tpu_lower_ctx_t* cx, int v, int red) {
  if (v < 0 || red < 0) return -1;
  if (red == RED_NONE) return v;
  tpu_ir_type_t t = type_of(cx, v);
  int s = sum_all(cx, v);
  if (red == RED_SUM) return s;
  return BIN(DIV, s, lw_const_like(cx, (double)tpu_ir_numel(&t), s));
}
/* numpy broadcast of two shapes; returns the rank or -1 */
static int bshape(const int64_t* a, int ra, const int64_t* b, int rb, int64_t* out) {
  int r = ra > rb ? ra : rb;
  for (int d = 0; d < r; ++d) {
    int64_t x = d - (r - ra) >= 0 ? a[d - (r - ra)] : 1, y = d - (r - rb) >= 0 ? b[d - (r - rb)] : 1;
    if (x != y && x != 1 && y != 1) return -1;
    out[d] = x == 1 ? y : x;
  }
  return r;
}
static int float_check(tpu_lower_ctx_t* cx, int dt) {
  if (tpu_dtype_is_floating(dt)) return 1;
  tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: expected a floating point tensor, but got %s", cx->op_name, tpu_dtype_name(dt)));
  return 0;
}

/* ---------------------------------------------------------------- softmax */

/* a custom_call (tpu_ir_custom_t target, i1) of result [rank, dims] dtype dt */
static int custom_op(tpu_lower_ctx_t* cx, int target, int64_t i1, int n, const int* in, int rank, const int64_t* dims, int dt) {
  tpu_ir_type_t t = {0};
  t.dtype = dt; t.rank = rank;
  for (int d = 0; d < rank; ++d) t.dims[d] = dims[d];
  return lw_custom(cx, target, i1, &t, n, in);
}

/* rank-0 tensors are handled as [1] */
static int as_rank1(tpu_lower_ctx_t* cx, int v) {
  if (v < 0 || type_of(cx, v).rank) return v;
  return tpu_ir_reshape(G, v, 1, (int64_t[]){1});
}
/* softmax-family ops on f32/f64 run as the host's row kernels (custom ROWS_SOFTMAX(_BWD),
 * drivers/host/rows.h) over the operands viewed [A, N, I] (N = the softmax dim), then reshaped
 * back. Definition: softmax = exp(x - max) / sum exp(x - max), log_softmax = (x - max) - log(sum
 * exp(x - max)), as the StableHLO printer expands them (ir/stablehlo_custom.c). */
static int rows_custom(tpu_lower_ctx_t* cx, int target, int log, int n, const int* in, int dim) {
  for (int k = 0; k < n; ++k) if (in[k] < 0) return -1;
  tpu_ir_type_t t = type_of(cx, in[0]);
  int64_t d3[3] = {1, t.dims[dim], 1};
  for (int d = 0; d < t.rank; ++d) if (d != dim) d3[d < dim ? 0 : 2] *= t.dims[d];
  int in3[2];
  for (int k = 0; k < n; ++k) in3[k] = tpu_ir_reshape(G, in[k], 3, d3);
  int r = custom_op(cx, target, log, n, in3, 3, d3, t.dtype);
  return r < 0 ? -1 : tpu_ir_reshape(G, r, t.rank, t.dims);
}

/* _softmax.out / _log_softmax.out(self, int dim, bool half_to_float, *, out) */
static tpu_status_t lw_softmax(tpu_lower_ctx_t* cx, int log) {
  int in_dt = lw_dtype_of(cx, 0), rank = lw_rank_of(cx, 0);
  if (!float_check(cx, in_dt)) return TPU_OK;
  if (lw_int(cx, 2, 0) && in_dt != TPU_DTYPE_F16 && in_dt != TPU_DTYPE_BF16)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "conversion is supported for Half type only");
  int dim = lw_norm_dim(cx, lw_int(cx, 1, 0), rank);
  if (dim < 0) return TPU_OK;
  int x = as_rank1(cx, lw_input(cx, 0, tpu_opmath_dtype(in_dt)));
  return lw_output(cx, 0, rows_custom(cx, TPU_IR_CUSTOM_ROWS_SOFTMAX, log, 1, &x, dim));
}
static tpu_status_t lower_softmax(tpu_lower_ctx_t* cx) { return lw_softmax(cx, 0); }
static tpu_status_t lower_log_softmax(tpu_lower_ctx_t* cx) { return lw_softmax(cx, 1); }

/* _softmax_backward_data.out / _log_softmax_backward_data.out
 *   (grad_output, output, int dim, ScalarType input_dtype, *, grad_input)
 * softmax: y * (g - sum(g * y));  log_softmax: g - exp(y) * sum(g) */
static tpu_status_t lw_softmax_bwd(tpu_lower_ctx_t* cx, int log) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0)), rank = lw_rank_of(cx, 0);
  if (!float_check(cx, dt)) return TPU_OK;
  int dim = lw_norm_dim(cx, lw_int(cx, 2, 0), rank);
  if (dim < 0) return TPU_OK;
  int gy[2] = {as_rank1(cx, lw_input(cx, 0, dt)), as_rank1(cx, lw_input(cx, 1, dt))};
  return lw_output(cx, 0, rows_custom(cx, TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD, log, 2, gy, dim));
}
static tpu_status_t lower_softmax_bwd(tpu_lower_ctx_t* cx) { return lw_softmax_bwd(cx, 0); }
static tpu_status_t lower_log_softmax_bwd(tpu_lower_ctx_t* cx) { return lw_softmax_bwd(cx, 1); }

/* ---------------------------------------------------------------- nll_loss */

typedef struct {
  int cdim;            /* class dim of self (0 for 1-D self, else 1) */
  int64_t C;
  tpu_ir_type_t tt;    /* target shape */
  int64_t idx_dims[TPU_MAX_DIMS]; /* self's shape with the class dim = 1 */
  int ign;             /* bool [target]: target == ignore_index */
  int safe;            /* i64 [target]: 0 where ignored, C (out of range) where negative, else target */
  int w;               /* dt [target]: weight[target] (1 without weight), 0 where ignored */
} nll_t;

/* Validates (self, target, weight) at arg indices is, it, iw and builds the shared
 * values; is2d selects nll_loss2d's checks. Returns 0 on error (status set). */
static int nll_setup(tpu_lower_ctx_t* cx, int is, int it, int iw, int iignore, int is2d, int dt, nll_t* n) {
  int rs = lw_rank_of(cx, is), rt = lw_rank_of(cx, it);
  const int64_t *ss = lw_sizes_of(cx, is), *ts = lw_sizes_of(cx, it);
  char a[160], b[160];
  int na = 0, nb = 0;
  a[0] = b[0] = 0;
  for (int d = 0; d < rs; ++d) na += snprintf(a + na, sizeof a - (size_t)na, d ? ", %lld" : "%lld", (long long)ss[d]);
  for (int d = 0; d < rt; ++d) nb += snprintf(b + nb, sizeof b - (size_t)nb, d ? ", %lld" : "%lld", (long long)ts[d]);
  if (is2d) {
    if (rs != 4) { tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "only batches of spatial inputs supported (4D tensors), but got input of dimension: %d", rs)); return 0; }
    if (rt != 3) { tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "only batches of spatial targets supported (3D tensors) but got targets of dimension: %d", rt)); return 0; }
    if (ss[0] != ts[0] || ss[2] != ts[1] || ss[3] != ts[2]) {
      tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "size mismatch (got input: [%s] , target: [%s]", a, b));
      return 0;
    }
  } else {
    if (rs < 1 || rs > 2) { tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "input tensor should be 1D or 2D")); return 0; }
    if (rt > 1) { tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "0D or 1D target tensor expected, multi-target not supported")); return 0; }
    if (!(rs == 1 && rt == 0) && !(rs == 2 && rt == 1 && ss[0] == ts[0])) {
      tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "size mismatch (got input: [%s], target: [%s])", a, b));
      return 0;
    }
  }
  int tdt = lw_dtype_of(cx, it);
  if (tpu_dtype_is_floating(tdt) || tdt == TPU_DTYPE_BOOL) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "expected scalar type Long but found %s", tpu_dtype_name(tdt)));
    return 0;
  }
  n->cdim = rs == 1 ? 0 : 1;
  n->C = ss[n->cdim];
  if (!lw_is_none(cx, iw)) {
    const int64_t* ws = lw_sizes_of(cx, iw);
    int rw = lw_rank_of(cx, iw);
    if (rw != 1 || ws[0] != n->C) {
      nb = 0; b[0] = 0;
      for (int d = 0; d < rw; ++d) nb += snprintf(b + nb, sizeof b - (size_t)nb, d ? ", %lld" : "%lld", (long long)ws[d]);
      tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "weight tensor should be defined either for all %lld classes or no classes but got weight tensor of shape: [%s]", (long long)n->C, b));
      return 0;
    }
  }
  for (int d = 0; d < rs; ++d) n->idx_dims[d] = d == n->cdim ? 1 : ss[d];
  int t = tpu_ir_convert(G, lw_input(cx, it, -1), TPU_DTYPE_I64);
  n->tt = type_of(cx, t);
  n->ign = tpu_ir_compare(G, TPU_IR_CMP_EQ, t, lw_const_like(cx, (double)lw_int(cx, iignore, -100), t));
  int neg = tpu_ir_compare(G, TPU_IR_CMP_LT, t, lw_const_like(cx, 0, t));
  n->safe = tpu_ir_select(G, n->ign, lw_const_like(cx, 0, t), tpu_ir_select(G, neg, lw_const_like(cx, (double)n->C, t), t));
  int wg;
  if (!lw_is_none(cx, iw)) {
    int64_t numel = tpu_ir_numel(&n->tt);
    int flat = tpu_ir_reshape(G, n->safe, 1, &numel);
    wg = tpu_ir_reshape(G, tpu_ir_gather(G, lw_input(cx, iw, dt), flat, 0), n->tt.rank, n->tt.dims);
  } else {
    wg = lw_const(cx, 1.0, dt, n->tt.rank, n->tt.dims);
  }
  n->w = tpu_ir_select(G, n->ign, lw_const(cx, 0, dt, n->tt.rank, n->tt.dims), wg);
  return cx->g.status == TPU_OK;
}

/* nll_loss_forward.output / nll_loss2d_forward.output
 *   (self, target, weight?, int reduction, int ignore_index, *, output, total_weight) */
static tpu_status_t lw_nll_fwd(tpu_lower_ctx_t* cx, int is2d) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0));
  if (!float_check(cx, dt)) return TPU_OK;
  int red = reduction_arg(cx, 3);
  nll_t n;
  if (red < 0 || !nll_setup(cx, 0, 1, 2, 4, is2d, dt, &n)) return TPU_OK;
  int rs = lw_rank_of(cx, 0);
  int idx = tpu_ir_reshape(G, n.safe, rs, n.idx_dims);
  int xg = tpu_ir_reshape(G, tpu_ir_gather(G, lw_input(cx, 0, dt), idx, n.cdim), n.tt.rank, n.tt.dims);
  int zero = lw_const(cx, 0, dt, n.tt.rank, n.tt.dims);
  int loss = tpu_ir_select(G, n.ign, zero, BIN(MUL, UN(NEG, xg), n.w));
  if (red == RED_NONE && rs > 1) {
    lw_output(cx, 0, loss);
    return lw_output(cx, 1, lw_const(cx, 0, dt, 0, NULL));
  }
  int s = sum_all(cx, loss), tw = sum_all(cx, n.w);
  lw_output(cx, 0, red == RED_MEAN ? BIN(DIV, s, tw) : s);
  return lw_output(cx, 1, tw);
}
static tpu_status_t lower_nll_fwd(tpu_lower_ctx_t* cx) { return lw_nll_fwd(cx, 0); }
static tpu_status_t lower_nll2d_fwd(tpu_lower_ctx_t* cx) { return lw_nll_fwd(cx, 1); }

/* nll_loss_backward(.grad_input) / nll_loss2d_backward(.grad_input)
 *   (grad_output, self, target, weight?, reduction, ignore_index, total_weight, *, grad_input)
 * grad_input = 0 except [.., target, ..] = -w[target] * g (/ total_weight for mean) */
static tpu_status_t lw_nll_bwd(tpu_lower_ctx_t* cx, int is2d) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 1));
  if (!float_check(cx, dt)) return TPU_OK;
  int red = reduction_arg(cx, 4);
  nll_t n;
  if (red < 0 || !nll_setup(cx, 1, 2, 3, 5, is2d, dt, &n)) return TPU_OK;
  int rs = lw_rank_of(cx, 1);
  int g = lw_input(cx, 0, dt);
  if (red == RED_NONE && rs > 1) {
    if (type_of(cx, g).rank != n.tt.rank)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: grad_output must have the target's shape", cx->op_name);
    g = lw_bcast(cx, g, n.tt.rank, n.tt.dims);
  } else {
    if (g >= 0 && tpu_ir_numel(tpu_ir_type(G, g)) != 1)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected a single element grad_output tensor, but got: %lld",
                     (long long)tpu_ir_numel(tpu_ir_type(G, g)));
    g = tpu_ir_reshape(G, g, 0, NULL);
    if (red == RED_MEAN) g = BIN(DIV, g, tpu_ir_reshape(G, lw_input(cx, 6, dt), 0, NULL));
    g = lw_bcast(cx, g, n.tt.rank, n.tt.dims);
  }
  int val = tpu_ir_select(G, n.ign, lw_const(cx, 0, dt, n.tt.rank, n.tt.dims), BIN(MUL, UN(NEG, g), n.w));
  int idx = tpu_ir_reshape(G, n.safe, rs, n.idx_dims);
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int zeros = lw_const(cx, 0, dt, o->ndim, o->sizes);
  int r = tpu_ir_scatter(G, zeros, idx, tpu_ir_reshape(G, val, rs, n.idx_dims), n.cdim, 0);
  return lw_output(cx, 0, r);
}
static tpu_status_t lower_nll_bwd(tpu_lower_ctx_t* cx) { return lw_nll_bwd(cx, 0); }
static tpu_status_t lower_nll2d_bwd(tpu_lower_ctx_t* cx) { return lw_nll_bwd(cx, 1); }

/* ---------------------------------------------------------------- pointwise losses */

/* x = self, t = target (args 0, 1) in the promoted op-math dtype, broadcast together */
static int loss_inputs(tpu_lower_ctx_t* cx, int ix, int it, int* out_x, int* out_t, int64_t* dims) {
  int idx[2] = {ix, it};
  int dt = tpu_opmath_dtype(lw_result_type(cx, 2, idx));
  if (!float_check(cx, dt)) return -1;
  int r = bshape(lw_sizes_of(cx, ix), lw_rank_of(cx, ix), lw_sizes_of(cx, it), lw_rank_of(cx, it), dims);
  if (r < 0) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: the size of input and target must be broadcastable", cx->op_name));
    return -1;
  }
  *out_x = lw_bcast(cx, lw_input(cx, ix, dt), r, dims);
  *out_t = lw_bcast(cx, lw_input(cx, it, dt), r, dims);
  return r;
}

/* mse_loss.out(self, target, reduction, *, out) */
static tpu_status_t lower_mse(tpu_lower_ctx_t* cx) {
  int64_t dims[TPU_MAX_DIMS];
  int x, t, red = reduction_arg(cx, 2);
  if (red < 0 || loss_inputs(cx, 0, 1, &x, &t, dims) < 0) return TPU_OK;
  int d = BIN(SUB, x, t);
  return lw_output(cx, 0, reduce_loss(cx, BIN(MUL, d, d), red));
}
/* backward ops (grad_output, self, target, reduction, ...): x, t, g over self's shape
 * (the grad_input's shape) and the mean factor 1/numel(self) */
static int loss_bwd_inputs(tpu_lower_ctx_t* cx, int* x, int* t, int* g, int* norm) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int dt = tpu_opmath_dtype(o->dtype);
  if (!float_check(cx, dt)) return 0;
  *x = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  *t = lw_bcast(cx, lw_input(cx, 2, dt), o->ndim, o->sizes);
  *g = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int red = reduction_arg(cx, 3);
  if (red < 0) return 0;
  int64_t numel = tpu_numel(o->ndim, o->sizes);
  *norm = lw_const(cx, red == RED_MEAN ? 1.0 / (double)numel : 1.0, dt, o->ndim, o->sizes);
  return cx->g.status == TPU_OK;
}
/* mse_loss_backward(.grad_input)(grad_output, self, target, reduction): 2 (x - t) g [/ numel] */
static tpu_status_t lower_mse_bwd(tpu_lower_ctx_t* cx) {
  int x, t, g, norm;
  if (!loss_bwd_inputs(cx, &x, &t, &g, &norm)) return TPU_OK;
  int two_norm = BIN(MUL, lw_const_like(cx, 2.0, norm), norm);
  return lw_output(cx, 0, BIN(MUL, BIN(MUL, two_norm, BIN(SUB, x, t)), g));
}

/* binary_cross_entropy(.out)(self, target, weight?, reduction):
 * -w (t max(log x, -100) + (1 - t) max(log(1 - x), -100)). Inputs outside [0, 1]
 * (PyTorch raises) give NaN here. */
static tpu_status_t lower_bce(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* s = cx->args[0].kind == TPU_ARG_TENSOR ? cx->args[0].tensor : NULL;
  if (!s) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: self must be a tensor", cx->op_name);
  int dt = tpu_opmath_dtype(s->dtype);
  if (!float_check(cx, dt)) return TPU_OK;
  int red = reduction_arg(cx, 3);
  if (red < 0) return TPU_OK;
  if (lw_rank_of(cx, 1) != s->ndim || memcmp(lw_sizes_of(cx, 1), s->sizes, (size_t)s->ndim * sizeof(int64_t)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Using a target size that is different to the input size is deprecated. Please ensure they have the same size.");
  int x = lw_input(cx, 0, dt), t = lw_input(cx, 1, dt);
  int lo = lw_const_like(cx, -100.0, x), one = lw_const_like(cx, 1.0, x);
  int lx = BIN(MAX, UN(LOG, x), lo), l1x = BIN(MAX, UN(LOG1P, UN(NEG, x)), lo);
  /* (t - 1) * log(1 - x) - t * log(x), PyTorch's order */
  int l = BIN(SUB, BIN(MUL, BIN(SUB, t, one), l1x), BIN(MUL, t, lx));
  if (!lw_is_none(cx, 2)) l = BIN(MUL, l, lw_bcast_like(cx, lw_input(cx, 2, dt), l));
  return lw_output(cx, 0, reduce_loss(cx, l, red));
}
/* binary_cross_entropy_backward(.grad_input)(grad, self, target, weight?, reduction):
 * w g (x - t) / max((1 - x) x, 1e-12) [/ numel] */
static tpu_status_t lower_bce_bwd(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int dt = tpu_opmath_dtype(o->dtype);
  if (!float_check(cx, dt)) return TPU_OK;
  int red = reduction_arg(cx, 4);
  if (red < 0) return TPU_OK;
  int x = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int t = lw_bcast(cx, lw_input(cx, 2, dt), o->ndim, o->sizes);
  int g = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int one = lw_const_like(cx, 1.0, x);
  int den = BIN(MAX, BIN(MUL, BIN(SUB, one, x), x), lw_const_like(cx, 1e-12, x));
  int r = BIN(DIV, BIN(MUL, g, BIN(SUB, x, t)), den);
  if (!lw_is_none(cx, 3)) r = BIN(MUL, r, lw_bcast_like(cx, lw_input(cx, 3, dt), r));
  if (red == RED_MEAN) r = BIN(DIV, r, lw_const_like(cx, (double)tpu_numel(o->ndim, o->sizes), r));
  return lw_output(cx, 0, r);
}

/* smooth_l1_loss.out(self, target, reduction, beta): |d| < beta ? 0.5 d^2 / beta : |d| - 0.5 beta */
static tpu_status_t lower_smooth_l1(tpu_lower_ctx_t* cx) {
  int64_t dims[TPU_MAX_DIMS];
  int x, t, red = reduction_arg(cx, 2);
  if (red < 0 || loss_inputs(cx, 0, 1, &x, &t, dims) < 0) return TPU_OK;
  int z = UN(ABS, BIN(SUB, x, t));
  int beta = scalar_like(cx, lw_scalar(cx, 3, type_of(cx, z).dtype), z), half = lw_const_like(cx, 0.5, z);
  int quad = BIN(DIV, BIN(MUL, BIN(MUL, half, z), z), beta);
  int lin = BIN(SUB, z, BIN(MUL, half, beta));
  return lw_output(cx, 0, reduce_loss(cx, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, z, beta), quad, lin), red));
}
/* smooth_l1_loss_backward.grad_input(grad, self, target, reduction, beta, *, grad_input) */
static tpu_status_t lower_smooth_l1_bwd(tpu_lower_ctx_t* cx) {
  int x, t, g, norm;
  if (!loss_bwd_inputs(cx, &x, &t, &g, &norm)) return TPU_OK;
  int d = BIN(SUB, x, t);
  int beta = scalar_like(cx, lw_scalar(cx, 4, type_of(cx, d).dtype), d);
  int ng = BIN(MUL, norm, g);
  int mid = BIN(DIV, BIN(MUL, BIN(MUL, norm, d), g), beta);
  int r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GE, d, beta), ng, mid);
  r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LE, d, UN(NEG, beta)), UN(NEG, ng), r);
  return lw_output(cx, 0, r);
}
/* huber_loss(.out)(self, target, reduction, delta): |d| < delta ? 0.5 d^2 : delta (|d| - 0.5 delta) */
static tpu_status_t lower_huber(tpu_lower_ctx_t* cx) {
  int64_t dims[TPU_MAX_DIMS];
  int x, t, red = reduction_arg(cx, 2);
  if (red < 0 || loss_inputs(cx, 0, 1, &x, &t, dims) < 0) return TPU_OK;
  int z = UN(ABS, BIN(SUB, x, t));
  int delta = scalar_like(cx, lw_scalar(cx, 3, type_of(cx, z).dtype), z), half = lw_const_like(cx, 0.5, z);
  int quad = BIN(MUL, BIN(MUL, half, z), z);
  int lin = BIN(MUL, delta, BIN(SUB, z, BIN(MUL, half, delta)));
  return lw_output(cx, 0, reduce_loss(cx, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, z, delta), quad, lin), red));
}
/* huber_loss_backward.out(grad, self, target, reduction, delta, *, grad_input) */
static tpu_status_t lower_huber_bwd(tpu_lower_ctx_t* cx) {
  int x, t, g, norm;
  if (!loss_bwd_inputs(cx, &x, &t, &g, &norm)) return TPU_OK;
  int d = BIN(SUB, x, t);
  int delta = scalar_like(cx, lw_scalar(cx, 4, type_of(cx, d).dtype), d);
  int ng = BIN(MUL, BIN(MUL, norm, g), delta);
  int mid = BIN(MUL, BIN(MUL, norm, d), g);
  int r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GE, d, delta), ng, mid);
  r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LE, d, UN(NEG, delta)), UN(NEG, ng), r);
  return lw_output(cx, 0, r);
}

/* ---------------------------------------------------------------- layer norm */

/* checks input[axis:] == normalized_shape (arg 1) and the optional affine shapes;
 * returns axis or -1 */
static int ln_axis(tpu_lower_ctx_t* cx, int ix, int ins, int iw, int ib) {
  const int64_t* ns;
  int nn = lw_int_list(cx, ins, &ns);
  int rank = lw_rank_of(cx, ix);
  const int64_t* xs = lw_sizes_of(cx, ix);
  char a[160] = {0}, b[160] = {0};
  int na = 0, nb = 0;
  for (int d = 0; d < nn; ++d) na += snprintf(a + na, sizeof a - (size_t)na, d ? ", %lld" : "%lld", (long long)ns[d]);
  if (nn < 1) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got normalized_shape = [%s]", a));
    return -1;
  }
  int axis = rank - nn, ok = axis >= 0;
  for (int d = 0; ok && d < nn; ++d) ok = xs[axis + d] == ns[d];
  if (!ok) {
    for (int d = 0; d < rank; ++d) nb += snprintf(b + nb, sizeof b - (size_t)nb, d ? ", %lld" : "%lld", (long long)xs[d]);
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "Given normalized_shape=[%s], expected input with shape [*, %s], but got input of size[%s]", a, a, b));
    return -1;
  }
  int ia[2] = {iw, ib};
  for (int k = 0; k < 2; ++k) {
    if (ia[k] < 0 || lw_is_none(cx, ia[k])) continue;
    int rw = lw_rank_of(cx, ia[k]);
    const int64_t* ws = lw_sizes_of(cx, ia[k]);
    ok = rw == nn;
    for (int d = 0; ok && d < nn; ++d) ok = ws[d] == ns[d];
    if (!ok) {
      nb = 0;
      for (int d = 0; d < rw; ++d) nb += snprintf(b + nb, sizeof b - (size_t)nb, d ? ", %lld" : "%lld", (long long)ws[d]);
      tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "Expected %s to be of same shape as normalized_shape, but got %s of shape [%s] and normalized_shape = [%s]",
                            k ? "bias" : "weight", k ? "bias" : "weight", b, a));
      return -1;
    }
  }
  return axis;
}

/* Row statistics of layer norm through the host's channel kernel (custom CHANNEL_STATS,
 * drivers/host/norm.h, sums in double): n == 1: (x) -> [2, M] mean, biased variance of each of
 * the M rows of n elements; n == 3: (g, x, mean [M]) -> [2, M] sum g, sum g (x - mean). */
static int ln_stats(tpu_lower_ctx_t* cx, int n, const int* in, int64_t M, int64_t len, int dt) {
  int64_t d3[3] = {1, M, len}, d2[2] = {2, M};
  int in3[3];
  for (int k = 0; k < n; ++k) in3[k] = k == 2 ? in[k] : tpu_ir_reshape(G, in[k], 3, d3);
  return custom_op(cx, TPU_IR_CUSTOM_CHANNEL_STATS, 0, n, in3, 2, d2, dt);
}
/* row k of a [2, M] statistics result, as [M] */
static int ln_row(tpu_lower_ctx_t* cx, int st, int k, int64_t M) {
  if (st < 0) return -1;
  int64_t lo[2] = {k, 0}, hi[2] = {k + 1, M}, one[2] = {1, 1};
  return tpu_ir_reshape(G, tpu_ir_slice(G, st, lo, hi, one), 1, &M);
}

/* native_layer_norm(input, normalized_shape, weight?, bias?, float eps) -> (out, mean, rstd)
 * mean/rstd have the input's shape with the normalized dims set to 1 (PyTorch's meta). */
static tpu_status_t lower_layer_norm(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0)), rank = lw_rank_of(cx, 0);
  if (!float_check(cx, dt)) return TPU_OK;
  int axis = ln_axis(cx, 0, 1, 2, 3);
  if (axis < 0) return TPU_OK;
  const int64_t* xs = lw_sizes_of(cx, 0);
  int64_t fl[TPU_MAX_DIMS] = {0}, kd[TPU_MAX_DIMS], n = 1;
  for (int d = 0; d < rank; ++d) {
    fl[d] = d >= axis;
    kd[d] = d >= axis ? 1 : xs[d];
    if (d >= axis) n *= xs[d];
  }
  int x = lw_input(cx, 0, dt);
  int mean, var, xc;
  int64_t M = 1;
  for (int d = 0; d < axis; ++d) M *= xs[d];
  if (M * n > 0) { /* rows' mean and biased variance in one kernel: CHANNEL_STATS on x viewed [1, M, n] */
    int st = ln_stats(cx, 1, &x, M, n, dt);
    mean = ln_row(cx, st, 0, M);
    var = ln_row(cx, st, 1, M);
    if (dt == TPU_DTYPE_F32) { /* then one pass over each row: custom ROWS_LAYER_NORM (drivers/host/rows.h) */
      int64_t d2[2] = {M, n};
      int eps = lw_bcast_like(cx, lw_scalar(cx, 4, dt), var);
      int rstd = UN(RSQRT, BIN(ADD, var, eps));
      int in[5] = {tpu_ir_reshape(G, x, 2, d2), mean, rstd}, nin = 3, bits = 0;
      for (int k = 0; k < 2; ++k)
        if (!lw_is_none(cx, 2 + k)) { in[nin++] = tpu_ir_reshape(G, lw_input(cx, 2 + k, dt), 1, &n); bits |= 1 << k; }
      int y = custom_op(cx, TPU_IR_CUSTOM_ROWS_LAYER_NORM, bits, nin, in, 2, d2, dt);
      lw_output(cx, 0, y < 0 ? -1 : tpu_ir_reshape(G, y, rank, xs));
      lw_output(cx, 1, tpu_ir_reshape(G, mean, rank, kd));
      return lw_output(cx, 2, tpu_ir_reshape(G, rstd, rank, kd));
    }
    mean = tpu_ir_reshape(G, mean, axis, xs);
    var = tpu_ir_reshape(G, var, axis, xs);
    xc = BIN(SUB, x, unreduce(cx, mean, x, fl));
  } else {
    mean = BIN(DIV, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, x, fl), lw_const(cx, (double)n, dt, axis, xs));
    xc = BIN(SUB, x, unreduce(cx, mean, x, fl));
    var = BIN(DIV, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, xc, xc), fl), lw_const(cx, (double)n, dt, axis, xs));
  }
  int eps = lw_bcast_like(cx, lw_scalar(cx, 4, dt), var);
  int rstd = UN(RSQRT, BIN(ADD, var, eps));
  int y = BIN(MUL, xc, unreduce(cx, rstd, x, fl));
  if (!lw_is_none(cx, 2)) y = BIN(MUL, y, lw_bcast_like(cx, lw_input(cx, 2, dt), y));
  if (!lw_is_none(cx, 3)) y = BIN(ADD, y, lw_bcast_like(cx, lw_input(cx, 3, dt), y));
  lw_output(cx, 0, y);
  lw_output(cx, 1, tpu_ir_reshape(G, mean, rank, kd));
  return lw_output(cx, 2, tpu_ir_reshape(G, rstd, rank, kd));
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
 *   bool[3] output_mask) -> (d_input?, d_weight?, d_bias?)
 * d_input = rstd (dxh - mean(dxh) - xh mean(dxh xh)), dxh = g w, xh = (x - mean) rstd;
 * d_weight = sum_batch(g xh); d_bias = sum_batch(g). Masked-off outputs are absent. */
static tpu_status_t lower_layer_norm_bwd(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 1)), rank = lw_rank_of(cx, 1);
  if (!float_check(cx, dt)) return TPU_OK;
  int axis = ln_axis(cx, 1, 2, 5, -1);
  if (axis < 0) return TPU_OK;
  const int64_t* xs = lw_sizes_of(cx, 1);
  int64_t fl[TPU_MAX_DIMS] = {0}, bfl[TPU_MAX_DIMS] = {0}, kd[TPU_MAX_DIMS], n = 1;
  for (int d = 0; d < rank; ++d) {
    fl[d] = d >= axis; bfl[d] = d < axis;
    kd[d] = d >= axis ? 1 : xs[d];
    if (d >= axis) n *= xs[d];
  }
  int x = lw_input(cx, 1, dt);
  int g = lw_bcast_like(cx, lw_input(cx, 0, dt), x);
  /* mean / rstd: [M..., 1...] or flat [M] */
  int stats[2];
  for (int k = 0; k < 2; ++k) {
    int v = lw_input(cx, 3 + k, dt);
    stats[k] = lw_bcast_like(cx, tpu_ir_reshape(G, v, rank, kd), x);
  }
  int xh = BIN(MUL, BIN(SUB, x, stats[0]), stats[1]);
  const tpu_tensor_t *o0 = lw_out_meta(cx, 0), *o1 = lw_out_meta(cx, 1), *o2 = lw_out_meta(cx, 2);
  int64_t M = 1, d2[2];
  for (int d = 0; d < axis; ++d) M *= xs[d];
  d2[0] = M; d2[1] = n;
  if (o0 && o0->ndim >= 0 && dt == TPU_DTYPE_F32 && M * n > 0) { /* custom ROWS_LAYER_NORM_BWD (drivers/host/rows.h) */
    int in[5] = {tpu_ir_reshape(G, g, 2, d2), tpu_ir_reshape(G, x, 2, d2), tpu_ir_reshape(G, lw_input(cx, 3, dt), 1, &M),
                 tpu_ir_reshape(G, lw_input(cx, 4, dt), 1, &M)};
    int hw = !lw_is_none(cx, 5);
    if (hw) in[4] = tpu_ir_reshape(G, lw_input(cx, 5, dt), 1, &n);
    int dx = custom_op(cx, TPU_IR_CUSTOM_ROWS_LAYER_NORM_BWD, hw, 4 + hw, in, 2, d2, dt);
    lw_output(cx, 0, dx < 0 ? -1 : tpu_ir_reshape(G, dx, rank, xs));
  } else if (o0 && o0->ndim >= 0) {
    int dxh = lw_is_none(cx, 5) ? g : BIN(MUL, g, lw_bcast_like(cx, lw_input(cx, 5, dt), x));
    int inv_n = lw_const(cx, 1.0 / (double)n, dt, axis, xs);
    int m1, m2;
    if (M * n > 0) { /* sum dxh and sum dxh (x - mean) = sum dxh xh / rstd in one kernel */
      int in3[3] = {dxh, x, tpu_ir_reshape(G, lw_input(cx, 3, dt), 1, &M)};
      int st = ln_stats(cx, 3, in3, M, n, dt);
      int rstd = tpu_ir_reshape(G, lw_input(cx, 4, dt), axis, xs);
      m1 = BIN(MUL, tpu_ir_reshape(G, ln_row(cx, st, 0, M), axis, xs), inv_n);
      m2 = BIN(MUL, BIN(MUL, tpu_ir_reshape(G, ln_row(cx, st, 1, M), axis, xs), rstd), inv_n);
    } else {
      m1 = BIN(MUL, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, dxh, fl), inv_n);
      m2 = BIN(MUL, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, dxh, xh), fl), inv_n);
    }
    int inner = BIN(SUB, BIN(SUB, dxh, unreduce(cx, m1, x, fl)), BIN(MUL, xh, unreduce(cx, m2, x, fl)));
    lw_output(cx, 0, BIN(MUL, stats[1], inner));
  } else {
    lw_output(cx, 0, -1);
  }
  const int want_w = o1 && o1->ndim >= 0, want_b = o2 && o2->ndim >= 0;
  if ((want_w || want_b) && dt == TPU_DTYPE_F32 && M * n > 0) {
    /* custom COL_SUMS (drivers/host/rows.h): sum g xh and sum g over the rows in one pass, as [2, n] */
    int in[4] = {tpu_ir_reshape(G, g, 2, d2), tpu_ir_reshape(G, x, 2, d2), tpu_ir_reshape(G, lw_input(cx, 3, dt), 1, &M),
                 tpu_ir_reshape(G, lw_input(cx, 4, dt), 1, &M)};
    int st = custom_op(cx, TPU_IR_CUSTOM_COL_SUMS, 1, 4, in, 2, (int64_t[]){2, n}, dt);
    const int64_t* ws = xs + axis;
    lw_output(cx, 1, want_w && st >= 0 ? tpu_ir_reshape(G, ln_row(cx, st, 0, n), rank - axis, ws) : -1);
    return lw_output(cx, 2, want_b && st >= 0 ? tpu_ir_reshape(G, ln_row(cx, st, 1, n), rank - axis, ws) : -1);
  }
  if (o1 && o1->ndim >= 0) lw_output(cx, 1, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, g, xh), bfl));
  else lw_output(cx, 1, -1);
  if (o2 && o2->ndim >= 0) return lw_output(cx, 2, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, g, bfl));
  return lw_output(cx, 2, -1);
}

/* ---------------------------------------------------------------- dropout */

/* native_dropout(input, float p, bool? train) -> (out, mask bool). Training: mask =
 * uniform < 1 - p from the device's default generator; out = x * mask * scale with
 * scale = 1 / (1 - p) (0 when p == 1), as PyTorch's CPU kernel. */
static tpu_status_t lower_native_dropout(tpu_lower_ctx_t* cx) {
  int in_dt = lw_dtype_of(cx, 0), dt = tpu_opmath_dtype(in_dt);
  if (!float_check(cx, dt)) return TPU_OK;
  int train = lw_is_none(cx, 2) ? 1 : (int)lw_int(cx, 2, 1);
  int x = lw_input(cx, 0, dt);
  tpu_ir_type_t t = type_of(cx, x);
  if (!train) {
    lw_output(cx, 0, x);
    return lw_output(cx, 1, lw_const(cx, 1, TPU_DTYPE_BOOL, t.rank, t.dims));
  }
  int rdt = dt == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
  int seed, off;
  lw_rng_state(cx, -1, (uint64_t)lw_size_decide(cx, TPU_SIZE_DECIDE_CEIL_DIV, tpu_ir_numel(&t), 4), &seed, &off);
  int u = tpu_ir_rng(G, rdt, t.rank, t.dims, seed, off, 0);
  int p = lw_scalar(cx, 1, TPU_DTYPE_F64);
  int p1m = BIN(SUB, lw_const_like(cx, 1.0, p), p);
  int scale = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, p1m, lw_const_like(cx, 0, p1m)),
                            lw_const_like(cx, 0, p1m), BIN(DIV, lw_const_like(cx, 1.0, p1m), p1m));
  int keep = tpu_ir_compare(G, TPU_IR_CMP_LT, u, lw_bcast_like(cx, tpu_ir_convert(G, p1m, rdt), u));
  int y = BIN(MUL, BIN(MUL, x, tpu_ir_convert(G, keep, dt)), lw_bcast_like(cx, tpu_ir_convert(G, scale, dt), x));
  lw_output(cx, 0, y);
  return lw_output(cx, 1, keep);
}
/* native_dropout_backward(grad_output, mask, float scale) = g * mask * scale */
static tpu_status_t lower_native_dropout_bwd(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int dt = tpu_opmath_dtype(o->dtype);
  if (!float_check(cx, dt)) return TPU_OK;
  int g = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int m = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int s = lw_bcast_like(cx, lw_scalar(cx, 2, dt), g);
  return lw_output(cx, 0, BIN(MUL, BIN(MUL, g, m), s));
}

/* ---------------------------------------------------------------- weight norm */

/* The fused weight norm of PyTorch's CPU kernel: norms over every dim of v [*S] but `dim` (0 or the
 * last), in the op-math dtype. Sets *k = S[dim]; fails for other dims. */
static int wn_setup(tpu_lower_ctx_t* cx, int iv, int ig, int idim, int64_t* k) {
  int r = lw_rank_of(cx, iv);
  int64_t dim = lw_int(cx, idim, 0);
  if (!tpu_dtype_is_floating(lw_dtype_of(cx, iv))) {
    lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "\"weight_norm_kernel\" not implemented for '%s'", tpu_dtype_c10_name(lw_dtype_of(cx, iv)));
    return -1;
  }
  if (r == 0 || (dim != 0 && dim != r - 1)) {
    lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "fused kernels can only be applied for first or last dim");
    return -1;
  }
  *k = lw_sizes_of(cx, iv)[dim];
  if (tpu_numel(lw_rank_of(cx, ig), lw_sizes_of(cx, ig)) != *k) {
    lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: g must have %lld elements, one per slice of v along dim %lld", cx->op_name,
            (long long)*k, (long long)dim);
    return -1;
  }
  return (int)dim;
}
/* fl[d] = 1 for every dim of v but `dim` (a 1-D v reduces nothing): reducing over fl gives [K] */
static const int64_t* wn_flags(tpu_lower_ctx_t* cx, int iv, int dim, int64_t* fl) {
  for (int d = 0; d < lw_rank_of(cx, iv); ++d) fl[d] = d != dim;
  return fl;
}
/* [K] -> v's shape along dim */
static int wn_bcast(tpu_lower_ctx_t* cx, int a, int iv, int dim) {
  return tpu_ir_broadcast(G, a, lw_rank_of(cx, iv), lw_sizes_of(cx, iv), (int64_t[]){dim});
}
/* _weight_norm_interface(v, g, dim) -> (w = v * (g / norm), norm = ||v|| per slice, shaped like g) */
static tpu_status_t lower_weight_norm(tpu_lower_ctx_t* cx) {
  int64_t k;
  int dim = wn_setup(cx, 0, 1, 2, &k);
  if (dim < 0) return TPU_OK;
  int ct = tpu_opmath_dtype(lw_dtype_of(cx, 0));
  int v = lw_input(cx, 0, ct);
  int64_t fl[TPU_MAX_DIMS];
  int norm = lw_pnorm(cx, v, 2, wn_flags(cx, 0, dim, fl)); /* [K] */
  int a = BIN(DIV, tpu_ir_reshape(G, lw_input(cx, 1, ct), 1, &k), norm);
  const tpu_tensor_t* on = lw_out_meta(cx, 1);
  if (tpu_numel(on->ndim, on->sizes) != k) /* PyTorch's meta function sizes a 1-D v's norms [1] */
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: a 1-D v with more than one element (the meta function's norms "
                   "have %lld elements, not %lld)", cx->op_name, (long long)tpu_numel(on->ndim, on->sizes), (long long)k);
  TPU_RETURN_IF_ERROR(lw_output(cx, 0, BIN(MUL, v, wn_bcast(cx, a, 0, dim))));
  return lw_output(cx, 1, tpu_ir_reshape(G, norm, on->ndim, on->sizes));
}
/* _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim) -> (grad_v, grad_g):
 * s = sum(grad_w v) per slice, grad_g = s / norm, a = g / norm, b = a grad_g / norm,
 * grad_v = a grad_w - b v (PyTorch's CPU kernel's order) */
static tpu_status_t lower_weight_norm_bwd(tpu_lower_ctx_t* cx) {
  int64_t k;
  int dim = wn_setup(cx, 1, 2, 4, &k);
  if (dim < 0) return TPU_OK;
  if (tpu_numel(lw_rank_of(cx, 3), lw_sizes_of(cx, 3)) != k)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: saved_norms must have %lld elements", cx->op_name, (long long)k);
  int ct = tpu_opmath_dtype(lw_dtype_of(cx, 1));
  int gw = lw_input(cx, 0, ct), v = lw_input(cx, 1, ct);
  if (!tpu_ir_same_shape(tpu_ir_type(G, gw), tpu_ir_type(G, v)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: grad_w and saved_v must have the same shape", cx->op_name);
  int g = tpu_ir_reshape(G, lw_input(cx, 2, ct), 1, &k), norm = tpu_ir_reshape(G, lw_input(cx, 3, ct), 1, &k);
  int64_t fl[TPU_MAX_DIMS];
  int gg = BIN(DIV, lw_reduce(cx, TPU_IR_MONOID_SUM, BIN(MUL, gw, v), wn_flags(cx, 1, dim, fl)), norm);
  int a = BIN(DIV, g, norm), b = BIN(DIV, BIN(MUL, a, gg), norm);
  int gv = BIN(SUB, BIN(MUL, wn_bcast(cx, a, 1, dim), gw), BIN(MUL, wn_bcast(cx, b, 1, dim), v));
  const tpu_tensor_t* og = lw_out_meta(cx, 1);
  TPU_RETURN_IF_ERROR(lw_output(cx, 0, gv));
  return lw_output(cx, 1, tpu_ir_reshape(G, gg, og->ndim, og->sizes));
}

/* ---------------------------------------------------------------- embedding backward */

/* embedding_dense_backward(grad_output [*idx, D], indices, num_weights, padding_idx,
 * scale_grad_by_freq) -> [num_weights, D]: rows of grad accumulated at their index;
 * indices == padding_idx contribute nothing; with scale_grad_by_freq each row is
 * divided by its index's count. Indices out of range: IndexError at run time. */
static tpu_status_t lower_embedding_bwd(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int dt = tpu_opmath_dtype(o->dtype);
  if (!float_check(cx, dt)) return TPU_OK;
  int idt = lw_dtype_of(cx, 1);
  if (idt != TPU_DTYPE_I64 && idt != TPU_DTYPE_I32)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got %s instead", tpu_dtype_name(idt));
  int64_t nw = lw_int(cx, 2, 0), pad = lw_int(cx, 3, -1);
  int scale_freq = (int)lw_int(cx, 4, 0);
  int64_t n = tpu_numel(lw_rank_of(cx, 1), lw_sizes_of(cx, 1));
  int gr = lw_rank_of(cx, 0);
  const int64_t* gs = lw_sizes_of(cx, 0);
  int64_t D = gr ? gs[gr - 1] : 1;
  if (o->ndim != 2 || o->sizes[0] != nw || o->sizes[1] != D || tpu_numel(gr, gs) != n * D)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: grad_output must have shape [*indices.shape, %lld]", cx->op_name, (long long)D);
  int idx = tpu_ir_reshape(G, tpu_ir_convert(G, lw_input(cx, 1, -1), TPU_DTYPE_I64), 1, &n);
  int64_t vd[2] = {n, D};
  int vals = tpu_ir_reshape(G, lw_input(cx, 0, dt), 2, vd);
  if (pad >= 0) {
    int is_pad = tpu_ir_compare(G, TPU_IR_CMP_EQ, idx, lw_const_like(cx, (double)pad, idx));
    vals = tpu_ir_select(G, tpu_ir_broadcast(G, is_pad, 2, vd, (int64_t[]){0}), lw_const_like(cx, 0, vals), vals);
  }
  int64_t zero_dim = 0;
  if (scale_freq) {
    int counts = tpu_ir_index_put(G, lw_const(cx, 0, dt, 1, &nw), lw_const(cx, 1.0, dt, 1, &n), 1, &idx, &zero_dim, 1);
    int c = tpu_ir_gather(G, counts, idx, 0);
    vals = BIN(DIV, vals, tpu_ir_broadcast(G, c, 2, vd, (int64_t[]){0}));
  }
  int64_t od[2] = {nw, D};
  return lw_output(cx, 0, tpu_ir_index_put(G, lw_const(cx, 0, dt, 2, od), vals, 1, &idx, &zero_dim, 1));
}

/* embedding_renorm_(self [V, D], indices, max_norm, norm_type): each row named in indices whose p-norm
 * exceeds max_norm is scaled by max_norm / (norm + 1e-7), as PyTorch's CPU kernel (norm in the row's op-math
 * dtype, the scale in double, rounded to it to multiply). norm_type is structural (key_scalars bit 3): it
 * selects the norm. Only the named rows are read and rewritten (index_select, index_put). Indices out of range:
 * IndexError at run time. */
static tpu_status_t lower_embedding_renorm(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int dt = tpu_opmath_dtype(o->dtype);
  if (!float_check(cx, dt)) return TPU_OK;
  if (o->ndim != 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "embedding_renorm_: self must be 2-D, got %d-D", o->ndim);
  int idt = lw_dtype_of(cx, 1);
  if (idt != TPU_DTYPE_I64 && idt != TPU_DTYPE_I32)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected tensor for argument #2 'indices' to have one of the following scalar types: Long, Int; but got %s instead", tpu_dtype_name(idt));
  double p = lw_key_scalar(cx, 3, 2.0);
  int64_t V = o->sizes[0], n = tpu_numel(lw_rank_of(cx, 1), lw_sizes_of(cx, 1));
  int w = lw_input(cx, 0, -1); /* in its own dtype: only the named rows are converted to the op-math dtype */
  if (n == 0 || V == 0 || o->sizes[1] == 0) return lw_output(cx, 0, w);
  /* only the named rows are read and written back (a repeated id writes its row's one result again) */
  int idx = tpu_ir_reshape(G, tpu_ir_convert(G, lw_input(cx, 1, -1), TPU_DTYPE_I64), 1, &n);
  int rows0 = tpu_ir_index_select(G, w, idx, 0), rows = tpu_ir_convert(G, rows0, dt);  /* [n, D] */
  int nd = tpu_ir_convert(G, lw_pnorm(cx, rows, p, (int64_t[]){0, 1}), TPU_DTYPE_F64); /* [n] */
  int mx = lw_bcast_like(cx, lw_scalar(cx, 2, TPU_DTYPE_F64), nd);
  int scale = tpu_ir_convert(G, BIN(DIV, mx, BIN(ADD, nd, lw_const_like(cx, 1e-7, nd))), dt);
  int hit = tpu_ir_compare(G, TPU_IR_CMP_GT, nd, mx);                                  /* [n] */
  int64_t rd[2] = {n, o->sizes[1]}, zero = 0;
  int f = tpu_ir_broadcast(G, scale, 2, rd, (int64_t[]){0});
  /* rows not scaled keep their bits (w * 1 would too, but NaN payloads and -0 stay untouched) */
  int upd = tpu_ir_select(G, tpu_ir_broadcast(G, hit, 2, rd, (int64_t[]){0}), tpu_ir_convert(G, BIN(MUL, rows, f), o->dtype), rows0);
  return lw_output(cx, 0, tpu_ir_index_put(G, w, upd, 1, &idx, &zero, 0));
}

/* shape rule (tpu_lowering_t.shapes, pure): PyTorch's meta function (Python) gives
 * grad_output.new_empty(num_weights, grad_output.size(-1)); a new token count is a new meta-cache key */
static tpu_status_t shapes_embedding_bwd(int dev, const tpu_arg_t* a, int n, tpu_tensor_t* o, int max, int* out_n) {
  (void)max;
  const tpu_tensor_t* g = n == 5 ? lw_args_tensor(a, n, 0) : NULL;
  if (!g || g->ndim < 1 || g->ndim > TPU_MAX_DIMS || a[2].kind != TPU_ARG_INT || a[2].i < 0 ||
      !tpu_dtype_is_floating(g->dtype))
    return lw_shapes_decline("embedding_dense_backward");
  o[0] = tpu_tensor_contiguous(NULL, dev, (tpu_dtype_t)g->dtype, 2, (int64_t[]){a[2].i, g->sizes[g->ndim - 1]});
  *out_n = 1;
  return TPU_OK;
}

TPU_LOWERING_TABLE(tpu_lowerings_nn) = {
  {"aten::_softmax.out", lower_softmax}, {"aten::_log_softmax.out", lower_log_softmax},
  {"aten::_softmax_backward_data.out", lower_softmax_bwd},
  {"aten::_log_softmax_backward_data.out", lower_log_softmax_bwd},
  {"aten::nll_loss_forward.output", lower_nll_fwd}, {"aten::nll_loss_backward.grad_input", lower_nll_bwd},
  {"aten::nll_loss2d_forward", lower_nll2d_fwd}, {"aten::nll_loss2d_forward.output", lower_nll2d_fwd},
  {"aten::nll_loss2d_backward", lower_nll2d_bwd}, {"aten::nll_loss2d_backward.grad_input", lower_nll2d_bwd},
  {"aten::mse_loss.out", lower_mse},
  {"aten::mse_loss_backward", lower_mse_bwd}, {"aten::mse_loss_backward.grad_input", lower_mse_bwd},
  {"aten::binary_cross_entropy", lower_bce}, {"aten::binary_cross_entropy.out", lower_bce},
  {"aten::binary_cross_entropy_backward", lower_bce_bwd},
  {"aten::binary_cross_entropy_backward.grad_input", lower_bce_bwd},
  {"aten::smooth_l1_loss.out", lower_smooth_l1},
  {"aten::smooth_l1_loss_backward.grad_input", lower_smooth_l1_bwd},
  {"aten::huber_loss", lower_huber}, {"aten::huber_loss.out", lower_huber},
  {"aten::huber_loss_backward.out", lower_huber_bwd},
  {"aten::native_layer_norm", lower_layer_norm},
  {"aten::native_layer_norm_backward", lower_layer_norm_bwd},
  {"aten::native_dropout", lower_native_dropout},
  {"aten::native_dropout_backward", lower_native_dropout_bwd},
  {"aten::embedding_dense_backward", lower_embedding_bwd, .shapes = shapes_embedding_bwd},
  {"aten::embedding_renorm_", lower_embedding_renorm, 1u << 3},
  {"aten::_weight_norm_interface", lower_weight_norm},
  {"aten::_weight_norm_interface_backward", lower_weight_norm_bwd},
  TPU_LOWERING_END
};
