/* reduce.c — lowerings of reductions: sum/nansum/prod/mean, amax/amin/aminmax,
 * max/min (full and along a dim, with indices), argmax/argmin, var/std (+ _mean),
 * norm/linalg_vector_norm, all/any, count_nonzero, cumsum/cumprod.
 *
 * Conventions (PyTorch's): `int[]? dim` None or [] reduces every dim; keepdim keeps
 * reduced dims as size 1 (we reduce, then reshape to the keepdim shape); the output
 * dtype given to us already follows PyTorch's rules (ints/bool sum to int64, the
 * `dtype` argument wins), so the input is converted to it first. Float reductions
 * accumulate in double inside the host kernel and round once. max/min/amax/amin
 * propagate NaN; argmax/argmin pick the first NaN or the first extreme value. */
#include <stdio.h>

#include "lower/lower.h"

#define G (&cx->g)
#define OUT_DT(k) (cx->outs[k].dtype)
#define c10_name tpu_dtype_c10_name
#define cpp_name tpu_dtype_cpp_name

static int check_out_dtype(tpu_lower_ctx_t* cx, int k, int want) {
  const tpu_tensor_t* o = lw_out_meta(cx, k);
  if (!o || o->ndim < 0 || o->dtype == want) return 0;
  tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "Expected out tensor to have dtype %s, but got %s instead", cpp_name(want),
                         cpp_name(o->dtype)));
  return -1;
}

/* ---- which dims a reduction covers */
typedef struct {
  int rank;                     /* input rank */
  int all;                      /* dim was None / [] (reduces every dim) */
  int keepdim;
  int n_red;                    /* reduced dims (0 for a rank-0 input) */
  int64_t flags[TPU_MAX_DIMS];  /* 1 = reduced */
  int64_t count;                /* input elements per output element */
} red_t;

/* Reads the dims of argument `arg` (int[]?, int? or int) for input argument 0.
 * Returns 0, or -1 with the error recorded in the graph. */
static int red_parse_ex(tpu_lower_ctx_t* cx, int arg, int keepdim, int empty_is_none, red_t* r) {
  memset(r, 0, sizeof(*r));
  r->rank = lw_rank_of(cx, 0);
  r->keepdim = keepdim;
  r->count = 1;
  const int64_t* sizes = lw_sizes_of(cx, 0);
  const int64_t* dims;
  int n = arg < 0 ? -1 : lw_int_list(cx, arg, &dims);
  if (n == 0 && empty_is_none) return 0;
  if (n <= 0) {
    r->all = 1;
    for (int d = 0; d < r->rank; ++d) r->flags[d] = 1;
  } else {
    for (int k = 0; k < n; ++k) {
      int d = lw_norm_dim(cx, dims[k], r->rank);
      if (d < 0) return -1;
      if (r->rank == 0) continue;
      if (r->flags[d]) {
        tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "dim %d appears multiple times in the list of dims", d));
        return -1;
      }
      r->flags[d] = 1;
    }
  }
  for (int d = 0; d < r->rank; ++d)
    if (r->flags[d]) { r->n_red++; r->count *= sizes[d]; }
  return 0;
}

static int red_parse(tpu_lower_ctx_t* cx, int arg, int keepdim, red_t* r) {
  return red_parse_ex(cx, arg, keepdim, 0, r);
}

/* Reduces x over r's dims (x keeps the input's shape). */
static int red_apply(tpu_lower_ctx_t* cx, int monoid, int x, const red_t* r) { return lw_reduce(cx, monoid, x, r->flags); }

/* Broadcasts a reduced value (dims dropped) back to the input's shape. */
static int red_expand(tpu_lower_ctx_t* cx, int v, const red_t* r) {
  if (!r->n_red || v < 0) return v;
  int64_t bdims[TPU_MAX_DIMS];
  int k = 0;
  for (int d = 0; d < r->rank; ++d) if (!r->flags[d]) bdims[k++] = d;
  return tpu_ir_broadcast(G, v, r->rank, lw_sizes_of(cx, 0), bdims);
}

/* Binds a reduced value (dims dropped) as output k, reshaped to the keepdim shape. */
static tpu_status_t red_output(tpu_lower_ctx_t* cx, int k, int v, const red_t* r) {
  if (v < 0) return TPU_OK;
  const int64_t* sizes = lw_sizes_of(cx, 0);
  int64_t shape[TPU_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < r->rank; ++d) {
    if (!r->flags[d]) shape[n++] = sizes[d];
    else if (r->keepdim) shape[n++] = 1;
  }
  const tpu_tensor_t* o = lw_out_meta(cx, k);
  if (o && o->ndim < 0) return lw_output(cx, k, v); /* absent output */
  int same = o && o->ndim == n;
  for (int d = 0; same && d < n; ++d) same = o->sizes[d] == shape[d];
  if (!same) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: output %d does not have the reduced shape", cx->op_name, k);
  if (r->keepdim && r->n_red) v = tpu_ir_reshape(G, v, n, shape);
  return lw_output(cx, k, v);
}

/* PyTorch's zero_numel_check_dims for max/min-like reductions (no identity). */
static int red_check_nonempty(tpu_lower_ctx_t* cx, int dim_arg, const red_t* r, const char* fn) {
  const int64_t* sizes = lw_sizes_of(cx, 0);
  if (tpu_numel(r->rank, sizes) != 0) return 0;
  if (r->all) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: Expected reduction dim to be specified for input.numel() == 0. "
                                              "Specify the reduction dim with the 'dim' argument.", fn));
    return -1;
  }
  const int64_t* dims;
  int n = lw_int_list(cx, dim_arg, &dims);
  for (int k = 0; k < n; ++k) {
    int d = (int)(dims[k] < 0 ? dims[k] + r->rank : dims[k]);
    if (r->rank && sizes[d] == 0) {
      tpu_ir_fail(G, TPU_ERR(INDEX_ERROR, "%s: Expected reduction dim %lld to have non-zero size.", fn, (long long)dims[k]));
      return -1;
    }
  }
  return 0;
}

/* An f32 sum over the leading dims (a bias gradient) runs as the host's column-sum kernel (custom COL_SUMS,
 * drivers/host/rows.h: double accumulators per column in row order) in every mode, so strict eager and
 * fused-eager / compiled graphs give the same bits; a bf16 / f16 one (autocast's bias gradients) too: the
 * kernel reads the dtype directly (drivers/host/colsum.h: the values widened exactly while summed, no widened
 * copy), and its f32 sum is rounded once to the dtype, as the generic reduce rounds its f32 accumulator.
 * -1 where it does not apply (the generic reduce). */
static int col_sums(tpu_lower_ctx_t* cx, int monoid, int nan_zero, int x, const red_t* r) {
  if (monoid != TPU_IR_MONOID_SUM || nan_zero || x < 0 || !r->n_red || r->rank < 2) return -1;
  const tpu_ir_type_t t = *tpu_ir_type(G, x);
  if (t.dtype != TPU_DTYPE_F32 && t.dtype != TPU_DTYPE_BF16 && t.dtype != TPU_DTYPE_F16) return -1;
  int k = 0;
  while (k < r->rank && r->flags[k]) ++k;
  for (int d = k; d < r->rank; ++d) if (r->flags[d]) return -1;
  if (k == 0 || k == r->rank) return -1;
  int64_t d2[2] = {1, 1};
  for (int d = 0; d < r->rank; ++d) d2[d >= k] *= t.dims[d];
  if (d2[0] * d2[1] == 0) return -1;
  int x2 = tpu_ir_reshape(G, x, 2, d2);
  tpu_ir_type_t rt = {0};
  rt.dtype = TPU_DTYPE_F32; rt.rank = 1; rt.dims[0] = d2[1];
  int s = lw_custom(cx, TPU_IR_CUSTOM_COL_SUMS, 0, &rt, 1, &x2);
  if (s < 0) return -1;
  if (t.dtype != TPU_DTYPE_F32) s = tpu_ir_convert(G, s, t.dtype);
  return tpu_ir_reshape(G, s, r->rank - k, t.dims + k);
}

/* ---- sum / nansum / prod: (self, dim, keepdim, *, dtype, out) */
static tpu_status_t lw_sum_like(tpu_lower_ctx_t* cx, int monoid, int dim_arg, int keep_arg, int nan_zero) {
  red_t r;
  /* nansum(x, dim=[]): PyTorch's meta function (which shaped our output) reduces nothing, its CPU kernel
   * everything; we follow the output we were given. */
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  int none = nan_zero && o && o->ndim == lw_rank_of(cx, 0) && o->ndim > 0 &&
             !memcmp(o->sizes, lw_sizes_of(cx, 0), (size_t)o->ndim * sizeof(int64_t));
  if (red_parse_ex(cx, dim_arg, keep_arg < 0 ? 0 : (int)lw_int(cx, keep_arg, 0), none, &r)) return TPU_OK;
  int x = lw_input(cx, 0, OUT_DT(0));
  if (nan_zero && tpu_dtype_is_floating(OUT_DT(0)))
    x = tpu_ir_select(G, tpu_ir_unary(G, TPU_IR_IS_NAN, x), lw_const_like(cx, 0, x), x);
  int cs = col_sums(cx, monoid, nan_zero, x, &r);
  if (cs >= 0) return red_output(cx, 0, cs, &r);
  return red_output(cx, 0, red_apply(cx, monoid, x, &r), &r);
}
static tpu_status_t lower_sum(tpu_lower_ctx_t* cx) { return lw_sum_like(cx, TPU_IR_MONOID_SUM, 1, 2, 0); }
static tpu_status_t lower_nansum(tpu_lower_ctx_t* cx) { return lw_sum_like(cx, TPU_IR_MONOID_SUM, 1, 2, 1); }
static tpu_status_t lower_prod_dim(tpu_lower_ctx_t* cx) { return lw_sum_like(cx, TPU_IR_MONOID_PROD, 1, 2, 0); }
static tpu_status_t lower_prod_all(tpu_lower_ctx_t* cx) { return lw_sum_like(cx, TPU_IR_MONOID_PROD, -1, -1, 0); }
/* count_nonzero.dim_IntList(self, int[] dim) -> int64 */
static tpu_status_t lower_count_nonzero(tpu_lower_ctx_t* cx) {
  red_t r;
  if (red_parse(cx, 1, 0, &r)) return TPU_OK;
  int x = tpu_ir_convert(G, lw_nonzero_mask(cx, lw_input(cx, 0, -1)), TPU_DTYPE_I64);
  return red_output(cx, 0, red_apply(cx, TPU_IR_MONOID_SUM, x, &r), &r);
}

/* mean.out(self, dim?, keepdim, *, dtype?, out): sum in op-math, divide, round once. */
static tpu_status_t lower_mean(tpu_lower_ctx_t* cx) {
  int dt = OUT_DT(0);
  if (!tpu_dtype_is_floating(dt)) {
    if (lw_is_none(cx, 3))
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "mean(): could not infer output dtype. Input dtype must be either "
                     "a floating point or complex dtype. Got: %s", c10_name(lw_dtype_of(cx, 0)));
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "mean(): could not infer output dtype. Optional dtype must be either "
                   "a floating point or complex dtype. Got: %s", c10_name(dt));
  }
  red_t r;
  if (red_parse(cx, 1, (int)lw_int(cx, 2, 0), &r)) return TPU_OK;
  int ct = tpu_opmath_dtype(dt);
  int s = red_apply(cx, TPU_IR_MONOID_SUM, lw_input(cx, 0, ct), &r);
  return red_output(cx, 0, tpu_ir_binary(G, TPU_IR_DIV, s, lw_const_like(cx, (double)r.count, s)), &r);
}

/* ---- amax / amin / aminmax: (self, dim=[], keepdim, *, out) */
static tpu_status_t lw_amax_like(tpu_lower_ctx_t* cx, int monoid, const char* fn) {
  red_t r;
  if (red_parse(cx, 1, (int)lw_int(cx, 2, 0), &r)) return TPU_OK;
  if (red_check_nonempty(cx, 1, &r, fn)) return TPU_OK;
  if (OUT_DT(0) != lw_dtype_of(cx, 0))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected the dtype for input and out to match, but got %s for input's "
                   "dtype and %s for out's dtype.", c10_name(lw_dtype_of(cx, 0)), c10_name(OUT_DT(0)));
  return red_output(cx, 0, red_apply(cx, monoid, lw_input(cx, 0, -1), &r), &r);
}
static tpu_status_t lower_amax(tpu_lower_ctx_t* cx) { return lw_amax_like(cx, TPU_IR_MONOID_MAX, "amax()"); }
static tpu_status_t lower_amin(tpu_lower_ctx_t* cx) { return lw_amax_like(cx, TPU_IR_MONOID_MIN, "amin()"); }
/* aminmax.out(self, *, dim?, keepdim, min, max) */
static tpu_status_t lower_aminmax(tpu_lower_ctx_t* cx) {
  red_t r;
  if (red_parse(cx, 1, (int)lw_int(cx, 2, 0), &r)) return TPU_OK;
  if (tpu_numel(r.rank, lw_sizes_of(cx, 0)) == 0) {
    if (r.all)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "aminmax(): cannot compute aminmax over an empty dimension as the "
                     "operation has no identity.");
    int64_t d = lw_int(cx, 1, 0);
    if (r.rank && lw_sizes_of(cx, 0)[d < 0 ? d + r.rank : d] == 0)
      return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "aminmax: Expected reduction dim %lld to have non-zero size.", (long long)d);
  }
  int x = lw_input(cx, 0, -1);
  TPU_RETURN_IF_ERROR(red_output(cx, 0, red_apply(cx, TPU_IR_MONOID_MIN, x, &r), &r));
  return red_output(cx, 1, red_apply(cx, TPU_IR_MONOID_MAX, x, &r), &r);
}

/* ---- max / min: full (functional or unary_out) and along a dim with indices */
static tpu_status_t lw_max_all(tpu_lower_ctx_t* cx, int monoid, const char* fn) {
  red_t r;
  if (red_parse(cx, -1, 0, &r)) return TPU_OK;
  if (tpu_numel(r.rank, lw_sizes_of(cx, 0)) == 0)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: Expected reduction dim to be specified for input.numel() == 0. "
                   "Specify the reduction dim with the 'dim' argument.", fn);
  return red_output(cx, 0, red_apply(cx, monoid, lw_input(cx, 0, -1), &r), &r);
}
static tpu_status_t lower_max_all(tpu_lower_ctx_t* cx) { return lw_max_all(cx, TPU_IR_MONOID_MAX, "max()"); }
static tpu_status_t lower_min_all(tpu_lower_ctx_t* cx) { return lw_max_all(cx, TPU_IR_MONOID_MIN, "min()"); }

/* max.dim_max(self, dim, keepdim, *, max, max_values): outs = (values, indices) */
static tpu_status_t lw_max_dim(tpu_lower_ctx_t* cx, int is_min, const char* fn) {
  red_t r;
  if (red_parse(cx, 1, (int)lw_int(cx, 2, 0), &r)) return TPU_OK;
  int64_t d = lw_int(cx, 1, 0);
  if (r.rank && lw_sizes_of(cx, 0)[d < 0 ? d + r.rank : d] == 0)
    return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "%s: Expected reduction dim %lld to have non-zero size.", fn, (long long)d);
  if (check_out_dtype(cx, 0, lw_dtype_of(cx, 0)) || check_out_dtype(cx, 1, TPU_DTYPE_I64)) return TPU_OK;
  int x = lw_input(cx, 0, -1);
  if (r.rank == 0) {
    TPU_RETURN_IF_ERROR(red_output(cx, 0, x, &r));
    return red_output(cx, 1, lw_const(cx, 0, TPU_DTYPE_I64, 0, NULL), &r);
  }
  int dim = (int)(d < 0 ? d + r.rank : d);
  TPU_RETURN_IF_ERROR(red_output(cx, 0, red_apply(cx, is_min ? TPU_IR_MONOID_MIN : TPU_IR_MONOID_MAX, x, &r), &r));
  return red_output(cx, 1, tpu_ir_argreduce(G, is_min, x, dim), &r);
}
static tpu_status_t lower_max_dim(tpu_lower_ctx_t* cx) { return lw_max_dim(cx, 0, "max()"); }
static tpu_status_t lower_min_dim(tpu_lower_ctx_t* cx) { return lw_max_dim(cx, 1, "min()"); }

/* argmax.out(self, dim?, keepdim, *, out): dim None = the flattened input. */
static tpu_status_t lw_argmax(tpu_lower_ctx_t* cx, int is_min) {
  const char* fn = is_min ? "argmin()" : "argmax()";
  red_t r;
  int keep = (int)lw_int(cx, 2, 0);
  if (red_parse(cx, 1, keep, &r)) return TPU_OK;
  const int64_t* sizes = lw_sizes_of(cx, 0);
  int64_t numel = tpu_numel(r.rank, sizes);
  if (check_out_dtype(cx, 0, TPU_DTYPE_I64)) return TPU_OK;
  int x = lw_input(cx, 0, -1);
  if (r.all) {
    if (numel == 0)
      return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "%s: Expected reduction dim to be specified for input.numel() == 0.", fn);
    int flat = tpu_ir_reshape(G, x, 1, &numel);
    return red_output(cx, 0, tpu_ir_argreduce(G, is_min, flat, 0), &r);
  }
  int64_t d = lw_int(cx, 1, 0);
  if (r.rank == 0) return red_output(cx, 0, lw_const(cx, 0, TPU_DTYPE_I64, 0, NULL), &r);
  int dim = (int)(d < 0 ? d + r.rank : d);
  if (sizes[dim] == 0)
    return lw_fail(cx, TPU_STATUS_INDEX_ERROR, "%s: Expected reduction dim %lld to have non-zero size.", fn, (long long)d);
  return red_output(cx, 0, tpu_ir_argreduce(G, is_min, x, dim), &r);
}
static tpu_status_t lower_argmax(tpu_lower_ctx_t* cx) { return lw_argmax(cx, 0); }
static tpu_status_t lower_argmin(tpu_lower_ctx_t* cx) { return lw_argmax(cx, 1); }

/* ---- var / std (+ _mean): (self, dim?, *, correction?, keepdim[, out]).
 * Two passes in op-math: mean, then the sum of squared deviations;
 * var = M2 / max(0, N - correction) (correction None = 1). */
static tpu_status_t lw_var(tpu_lower_ctx_t* cx, int take_sqrt, int with_mean) {
  if (!tpu_dtype_is_floating(lw_dtype_of(cx, 0)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "std and var only support floating point and complex dtypes");
  red_t r;
  if (red_parse(cx, 1, (int)lw_int(cx, 3, 0), &r)) return TPU_OK;
  int ct = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, ct);
  int s = red_apply(cx, TPU_IR_MONOID_SUM, x, &r);
  int mean = tpu_ir_binary(G, TPU_IR_DIV, s, lw_const_like(cx, (double)r.count, s));
  int dev = tpu_ir_binary(G, TPU_IR_SUB, x, red_expand(cx, mean, &r));
  int m2 = red_apply(cx, TPU_IR_MONOID_SUM, tpu_ir_binary(G, TPU_IR_MUL, dev, dev), &r);
  int corr = lw_is_none(cx, 2) ? tpu_ir_constant(G, ct, 1.0) : lw_scalar(cx, 2, ct);
  int divisor = tpu_ir_binary(G, TPU_IR_SUB, tpu_ir_constant(G, ct, (double)r.count), corr);
  divisor = tpu_ir_binary(G, TPU_IR_MAX, divisor, tpu_ir_constant(G, ct, 0.0));
  int v = tpu_ir_binary(G, TPU_IR_DIV, m2, lw_bcast_like(cx, divisor, m2));
  if (take_sqrt) v = tpu_ir_unary(G, TPU_IR_SQRT, v);
  TPU_RETURN_IF_ERROR(red_output(cx, 0, v, &r));
  return with_mean ? red_output(cx, 1, mean, &r) : TPU_OK;
}
static tpu_status_t lower_var(tpu_lower_ctx_t* cx) { return lw_var(cx, 0, 0); }
static tpu_status_t lower_std(tpu_lower_ctx_t* cx) { return lw_var(cx, 1, 0); }
static tpu_status_t lower_var_mean(tpu_lower_ctx_t* cx) { return lw_var(cx, 0, 1); }
static tpu_status_t lower_std_mean(tpu_lower_ctx_t* cx) { return lw_var(cx, 1, 1); }

/* ---- vector norms. The order (argument 1) is a structural scalar: it selects
 * the algorithm, so it is part of the cache key (key_scalars bit 1). */
static tpu_status_t lw_vector_norm(tpu_lower_ctx_t* cx, int dim_arg, int keep_arg) {
  int in_dt = lw_dtype_of(cx, 0);
  if (!tpu_dtype_is_floating(in_dt))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "linalg.vector_norm: Expected a floating point or complex tensor as "
                   "input. Got %s", c10_name(in_dt));
  double ord = lw_key_scalar(cx, 1, 2.0);
  red_t r;
  if (red_parse(cx, dim_arg, (int)lw_int(cx, keep_arg, 0), &r)) return TPU_OK;
  int want = (int)lw_int(cx, 4, in_dt);  /* arg 4: the `dtype`, when there is one */
  if (tpu_promote_types(in_dt, want) != want)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "linalg.vector_norm: the dtype of the input (%s) should be convertible "
                   "without narrowing to the specified dtype (%s)", c10_name(in_dt), c10_name(want));
  if (check_out_dtype(cx, 0, want)) return TPU_OK;
  const int64_t* sizes = lw_sizes_of(cx, 0);
  if (tpu_numel(r.rank, sizes) == 0 && (ord < 0 || ord == INFINITY)) {
    char os[64];
    const tpu_arg_t* a = &cx->args[1];
    if (a->kind == TPU_ARG_SCALAR && !tpu_dtype_is_floating(a->scalar_dtype)) snprintf(os, sizeof os, "%lld", (long long)a->i);
    else snprintf(os, sizeof os, "%g", ord);
    if (r.all)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "linalg.vector_norm cannot compute the %s norm on an empty tensor "
                     "because the operation does not have an identity", os);
    for (int d = 0; d < r.rank; ++d)
      if (r.flags[d] && sizes[d] == 0)
        return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "linalg.vector_norm cannot compute the %s norm on an empty "
                       "dimension because the operation does not have an identity", os);
  }
  int ct = tpu_opmath_dtype(OUT_DT(0));
  return red_output(cx, 0, lw_pnorm(cx, lw_input(cx, 0, ct), ord, r.flags), &r);
}
/* linalg_vector_norm.out(self, ord=2, dim?, keepdim, *, dtype?, out) */
static tpu_status_t lower_linalg_vector_norm(tpu_lower_ctx_t* cx) { return lw_vector_norm(cx, 2, 3); }
/* norm.out(self, p?, int[1] dim, keepdim, *, out) / norm.dtype_out(..., dtype, out) */
static tpu_status_t lower_norm(tpu_lower_ctx_t* cx) { return lw_vector_norm(cx, 2, 3); }

/* ---- all / any: (self[, dim, keepdim], *, out); bool out, or uint8 for uint8 input */
static tpu_status_t lw_all_any(tpu_lower_ctx_t* cx, int monoid, int dim_arg, int keep_arg) {
  red_t r; /* all.dims(x, dim=[]) reduces nothing, dim=None everything */
  if (red_parse_ex(cx, dim_arg, keep_arg < 0 ? 0 : (int)lw_int(cx, keep_arg, 0), 1, &r)) return TPU_OK;
  int odt = OUT_DT(0);
  if (odt != TPU_DTYPE_BOOL && !(odt == TPU_DTYPE_U8 && lw_dtype_of(cx, 0) == TPU_DTYPE_U8))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s only supports bool tensor for result, got: %s",
                   monoid == TPU_IR_MONOID_AND ? "all" : "any", c10_name(odt));
  int x = lw_nonzero_mask(cx, lw_input(cx, 0, -1));
  return red_output(cx, 0, red_apply(cx, monoid, x, &r), &r);
}
static tpu_status_t lower_all_all(tpu_lower_ctx_t* cx) { return lw_all_any(cx, TPU_IR_MONOID_AND, -1, -1); }
static tpu_status_t lower_any_all(tpu_lower_ctx_t* cx) { return lw_all_any(cx, TPU_IR_MONOID_OR, -1, -1); }
static tpu_status_t lower_all_dim(tpu_lower_ctx_t* cx) { return lw_all_any(cx, TPU_IR_MONOID_AND, 1, 2); }
static tpu_status_t lower_any_dim(tpu_lower_ctx_t* cx) { return lw_all_any(cx, TPU_IR_MONOID_OR, 1, 2); }

/* ---- cumsum / cumprod: (self, dim, *, dtype?, out), computed in the output dtype */
static tpu_status_t lw_cumulative(tpu_lower_ctx_t* cx, int monoid) {
  int rank = lw_rank_of(cx, 0);
  int dim = lw_norm_dim(cx, lw_int(cx, 1, 0), rank);
  if (dim < 0) return TPU_OK;
  int x = lw_input(cx, 0, OUT_DT(0));
  return lw_output(cx, 0, rank ? tpu_ir_cumulative(G, monoid, x, dim) : x);
}
static tpu_status_t lower_cumsum(tpu_lower_ctx_t* cx) { return lw_cumulative(cx, TPU_IR_MONOID_SUM); }
static tpu_status_t lower_cumprod(tpu_lower_ctx_t* cx) { return lw_cumulative(cx, TPU_IR_MONOID_PROD); }

/* renorm.out(self, p, dim, maxnorm, *, out): each slice along dim whose p-norm exceeds
 * maxnorm is scaled by maxnorm / (norm + 1e-7). p is structural (key_scalars bit 1). */
static tpu_status_t lower_renorm(tpu_lower_ctx_t* cx) {
  double p = lw_key_scalar(cx, 1, 2.0);
  if (!tpu_dtype_is_floating(lw_dtype_of(cx, 0)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "renorm: expected a floating point input, got %s", c10_name(lw_dtype_of(cx, 0)));
  if (!(p > 0)) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "renorm: non-positive-norm not supported");
  int rank = lw_rank_of(cx, 0);
  if (rank <= 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "renorm: input needs at least 2 dimensions, got %d dimensions", rank);
  int dim = lw_norm_dim(cx, lw_int(cx, 2, 0), rank);
  if (dim < 0) return TPU_OK;
  red_t r;
  if (red_parse(cx, -1, 0, &r)) return TPU_OK;
  r.flags[dim] = 0; r.n_red--; r.count /= TPU_MAX(1, lw_sizes_of(cx, 0)[dim]); r.all = 0;
  int ct = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, ct);
  int norm = red_expand(cx, lw_pnorm(cx, x, p, r.flags), &r);
  int maxn = lw_bcast_like(cx, lw_scalar(cx, 3, ct), norm);
  int scale = tpu_ir_binary(G, TPU_IR_DIV, maxn, tpu_ir_binary(G, TPU_IR_ADD, norm, lw_const_like(cx, 1e-7, norm)));
  int factor = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, norm, maxn), scale, lw_const_like(cx, 1.0, norm));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, x, factor));
}

/* trace(self): sum of the main diagonal, read as a strided slice of the flattened matrix. */
static tpu_status_t lower_trace(tpu_lower_ctx_t* cx) {
  if (lw_rank_of(cx, 0) != 2)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "trace: expected a matrix, but got tensor with dim %d", lw_rank_of(cx, 0));
  const int64_t* s = lw_sizes_of(cx, 0);
  int64_t k = TPU_MIN(s[0], s[1]), numel = s[0] * s[1];
  int x = tpu_ir_reshape(G, lw_input(cx, 0, OUT_DT(0)), 1, &numel);
  int64_t start = 0, limit = k ? (k - 1) * (s[1] + 1) + 1 : 0, stride = s[1] + 1;
  int d = tpu_ir_slice(G, x, &start, &limit, &stride);
  return lw_output(cx, 0, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, d, (int64_t[]){1}));
}

/* _cummax_helper(self, values!, indices!, dim) / _cummin_helper: running max/min (NaN
 * sticks from its first occurrence) and the index of the last element that set or tied
 * it, or of the last NaN once there is one, as PyTorch's CPU kernel. */
static tpu_status_t lw_cummaxmin(tpu_lower_ctx_t* cx, int monoid) {
  int rank = lw_rank_of(cx, 0);
  int dim = lw_norm_dim(cx, lw_int(cx, 3, 0), rank);
  if (dim < 0) return TPU_OK;
  int x = lw_input(cx, 0, OUT_DT(0));
  if (rank == 0) {
    TPU_RETURN_IF_ERROR(lw_output(cx, 0, x));
    return lw_output(cx, 1, lw_const(cx, 0, TPU_DTYPE_I64, 0, NULL));
  }
  const int64_t* sizes = lw_sizes_of(cx, 0);
  int cm = tpu_ir_cumulative(G, monoid, x, dim);
  int cond = tpu_ir_compare(G, TPU_IR_CMP_EQ, x, cm);
  if (tpu_dtype_is_floating(OUT_DT(0))) cond = tpu_ir_binary(G, TPU_IR_OR, cond, tpu_ir_unary(G, TPU_IR_IS_NAN, x));
  int iota = tpu_ir_iota(G, TPU_DTYPE_I64, rank, sizes, dim);
  int cand = tpu_ir_select(G, cond, iota, lw_const_like(cx, -1, iota));
  TPU_RETURN_IF_ERROR(lw_output(cx, 0, cm));
  return lw_output(cx, 1, tpu_ir_cumulative(G, TPU_IR_MONOID_MAX, cand, dim));
}
static tpu_status_t lower_cummax(tpu_lower_ctx_t* cx) { return lw_cummaxmin(cx, TPU_IR_MONOID_MAX); }
static tpu_status_t lower_cummin(tpu_lower_ctx_t* cx) { return lw_cummaxmin(cx, TPU_IR_MONOID_MIN); }

TPU_LOWERING_TABLE(tpu_lowerings_reduce) = {
  {"aten::sum.IntList_out", lower_sum}, {"aten::nansum.out", lower_nansum}, {"aten::nansum", lower_nansum},
  {"aten::prod.int_out", lower_prod_dim}, {"aten::prod", lower_prod_all}, {"aten::prod.out", lower_prod_all},
  {"aten::mean.out", lower_mean}, {"aten::count_nonzero.dim_IntList", lower_count_nonzero},
  {"aten::amax.out", lower_amax}, {"aten::amin.out", lower_amin}, {"aten::aminmax.out", lower_aminmax},
  {"aten::max", lower_max_all}, {"aten::min", lower_min_all},
  {"aten::max.unary_out", lower_max_all}, {"aten::min.unary_out", lower_min_all},
  {"aten::max.dim_max", lower_max_dim}, {"aten::min.dim_min", lower_min_dim},
  {"aten::argmax.out", lower_argmax}, {"aten::argmin.out", lower_argmin},
  {"aten::var.correction", lower_var}, {"aten::var.correction_out", lower_var},
  {"aten::std.correction", lower_std}, {"aten::std.correction_out", lower_std},
  {"aten::var_mean.correction", lower_var_mean}, {"aten::std_mean.correction", lower_std_mean},
  {"aten::linalg_vector_norm.out", lower_linalg_vector_norm, 1u << 1},
  {"aten::norm.out", lower_norm, 1u << 1}, {"aten::norm.dtype_out", lower_norm, 1u << 1},
  {"aten::all.all_out", lower_all_all}, {"aten::any.all_out", lower_any_all},
  {"aten::all.out", lower_all_dim}, {"aten::any.out", lower_any_dim},
  {"aten::all.dims_out", lower_all_dim}, {"aten::any.dims_out", lower_any_dim},
  {"aten::cumsum.out", lower_cumsum}, {"aten::cumprod.out", lower_cumprod},
  {"aten::_cummax_helper", lower_cummax}, {"aten::_cummin_helper", lower_cummin},
  {"aten::trace", lower_trace}, {"aten::renorm.out", lower_renorm, 1u << 1},
  TPU_LOWERING_END
};
