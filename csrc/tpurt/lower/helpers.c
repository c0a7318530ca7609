/* helpers.c — the lw_* helpers lowerings are written with, and type promotion. */
#include <stdarg.h>
#include <stdio.h>

#include "lower/lower.h"

tpu_status_t lw_fail(tpu_lower_ctx_t* cx, tpu_status_code_t code, const char* fmt, ...) {
  char msg[512];
  va_list ap; va_start(ap, fmt); vsnprintf(msg, sizeof(msg), fmt, ap); va_end(ap);
  return tpu_status_make(code, "%s", msg);
}

static const tpu_arg_t* arg(const tpu_lower_ctx_t* cx, int i) {
  static const tpu_arg_t none = {0};
  return (i >= 0 && i < cx->nargs) ? &cx->args[i] : &none;
}
int lw_is_none(const tpu_lower_ctx_t* cx, int i) { return arg(cx, i)->kind == TPU_ARG_NONE; }
int lw_is_tensor(const tpu_lower_ctx_t* cx, int i) {
  const tpu_arg_t* a = arg(cx, i);
  return a->kind == TPU_ARG_TENSOR || (a->kind == TPU_ARG_SCALAR && (a->scalar_flags & TPU_SCALAR_ZERODIM));
}
int lw_is_scalar_arg(const tpu_lower_ctx_t* cx, int i) {
  return arg(cx, i)->kind == TPU_ARG_SCALAR || arg(cx, i)->kind == TPU_ARG_DOUBLE;
}
int64_t lw_int(const tpu_lower_ctx_t* cx, int i, int64_t dflt) {
  const tpu_arg_t* a = arg(cx, i);
  return (a->kind == TPU_ARG_INT || a->kind == TPU_ARG_BOOL) ? a->i : dflt;
}
const char* lw_str(const tpu_lower_ctx_t* cx, int i, const char* dflt) {
  const tpu_arg_t* a = arg(cx, i);
  return a->kind == TPU_ARG_STRING && a->str ? a->str : dflt;
}
int lw_int_list(const tpu_lower_ctx_t* cx, int i, const int64_t** out) {
  const tpu_arg_t* a = arg(cx, i);
  if (a->kind == TPU_ARG_INT_LIST || a->kind == TPU_ARG_BOOL_LIST) { *out = a->ints; return (int)a->len; }
  if (a->kind == TPU_ARG_INT) { *out = &a->i; return 1; }
  *out = NULL;
  return -1;
}
int lw_dtype_of(const tpu_lower_ctx_t* cx, int i) {
  const tpu_arg_t* a = arg(cx, i);
  if (a->kind == TPU_ARG_TENSOR) return a->tensor->dtype;
  if (a->kind == TPU_ARG_SCALAR) return a->scalar_dtype;
  if (a->kind == TPU_ARG_DOUBLE) return TPU_DTYPE_F64;
  if (a->kind == TPU_ARG_INT) return TPU_DTYPE_I64;
  if (a->kind == TPU_ARG_BOOL) return TPU_DTYPE_BOOL;
  return -1;
}
int lw_rank_of(const tpu_lower_ctx_t* cx, int i) {
  const tpu_arg_t* a = arg(cx, i);
  return a->kind == TPU_ARG_TENSOR ? a->tensor->ndim : 0;
}
const int64_t* lw_sizes_of(const tpu_lower_ctx_t* cx, int i) {
  static const int64_t zero[TPU_MAX_DIMS] = {0};
  const tpu_arg_t* a = arg(cx, i);
  return a->kind == TPU_ARG_TENSOR ? a->tensor->sizes : zero;
}
const tpu_tensor_t* lw_out_meta(const tpu_lower_ctx_t* cx, int k) {
  return (k >= 0 && k < cx->nouts) ? &cx->outs[k] : NULL;
}
int lw_list_len(const tpu_lower_ctx_t* cx, int i) {
  const tpu_arg_t* a = arg(cx, i);
  return a->kind == TPU_ARG_TENSOR_LIST ? (int)a->len : -1;
}
const tpu_tensor_t* lw_list_meta(const tpu_lower_ctx_t* cx, int i, int j) {
  const tpu_arg_t* a = arg(cx, i);
  if (a->kind != TPU_ARG_TENSOR_LIST || j < 0 || j >= a->len || a->tensors[j].ndim < 0) return NULL;
  return &a->tensors[j];
}

static int add_tparam(tpu_lower_ctx_t* cx, int src, int i, int j, const tpu_tensor_t* t, int dtype) {
  int v;
  if (cx->sub && tpu_lower_sub_input(cx, 0, &src, &i, &j, &v)) return dtype < 0 || v < 0 ? v : tpu_ir_convert(&cx->g, v, dtype);
  if (cx->embed) {
    v = tpu_trace_embed_tparam(cx, src, i, j, t, -1);
  } else {
    if (cx->n_tbind >= TPU_LOWER_MAX_PARAMS)
      return tpu_ir_fail(&cx->g, TPU_ERR(UNSUPPORTED, "%s: too many tensor inputs", cx->op_name));
    v = tpu_ir_param(&cx->g, t->dtype, t->ndim, t->sizes);
    if (v < 0) return v;
    cx->tbind[cx->n_tbind].src = (int16_t)src;
    cx->tbind[cx->n_tbind].arg = (int16_t)i;
    cx->tbind[cx->n_tbind].index = j;
    cx->n_tbind++;
  }
  if (cx->sub && v >= 0) tpu_lower_sub_note(cx, 0, src, i, j, v);
  return dtype < 0 || v < 0 ? v : tpu_ir_convert(&cx->g, v, dtype);
}
static int add_sparam(tpu_lower_ctx_t* cx, int kind, int i, int j, int dtype) {
  int v;
  if (cx->sub && tpu_lower_sub_input(cx, 1, &kind, &i, &j, &v)) return v;
  if (cx->embed) {
    v = tpu_trace_embed_sparam(cx, kind, i, j, dtype);
  } else {
    if (cx->n_sbind >= TPU_LOWER_MAX_SCALARS)
      return tpu_ir_fail(&cx->g, TPU_ERR(UNSUPPORTED, "%s: too many scalar inputs", cx->op_name));
    v = tpu_ir_scalar(&cx->g, dtype);
    if (v < 0) return v;
    cx->sbind[cx->n_sbind].kind = (int16_t)kind;
    cx->sbind[cx->n_sbind].arg = (int16_t)i;
    cx->sbind[cx->n_sbind].index = j;
    cx->n_sbind++;
  }
  if (cx->sub && v >= 0) tpu_lower_sub_note(cx, 1, kind, i, j, v);
  return v;
}
int lw_scalar(tpu_lower_ctx_t* cx, int i, int dtype) {
  const tpu_arg_t* a = arg(cx, i);
  int v;
  if (a->kind == TPU_ARG_SCALAR) v = add_sparam(cx, TPU_SBIND_VALUE, i, 0, a->scalar_dtype);
  else if (a->kind == TPU_ARG_DOUBLE) v = add_sparam(cx, TPU_SBIND_VALUE, i, 0, TPU_DTYPE_F64);
  else if (a->kind == TPU_ARG_INT) v = add_sparam(cx, TPU_SBIND_VALUE, i, 0, TPU_DTYPE_I64);
  else if (a->kind == TPU_ARG_BOOL) v = add_sparam(cx, TPU_SBIND_VALUE, i, 0, TPU_DTYPE_BOOL);
  else return tpu_ir_fail(&cx->g, TPU_ERR(INVALID_ARGUMENT, "%s: argument %d is not a scalar", cx->op_name, i));
  return dtype < 0 ? v : tpu_ir_convert(&cx->g, v, dtype);
}
int lw_input(tpu_lower_ctx_t* cx, int i, int dtype) {
  const tpu_arg_t* a = arg(cx, i);
  if (a->kind == TPU_ARG_TENSOR) return add_tparam(cx, TPU_BIND_ARG, i, 0, a->tensor, dtype);
  if (a->kind == TPU_ARG_SCALAR || a->kind == TPU_ARG_DOUBLE || a->kind == TPU_ARG_INT || a->kind == TPU_ARG_BOOL)
    return lw_scalar(cx, i, dtype);
  return tpu_ir_fail(&cx->g, TPU_ERR(INVALID_ARGUMENT, "%s: expected a tensor for argument %d", cx->op_name, i));
}
int lw_list_input(tpu_lower_ctx_t* cx, int i, int j, int dtype) {
  const tpu_tensor_t* t = lw_list_meta(cx, i, j);
  if (!t) return tpu_ir_fail(&cx->g, TPU_ERR(INVALID_ARGUMENT, "%s: missing tensor %d in list argument %d", cx->op_name, j, i));
  return add_tparam(cx, TPU_BIND_LIST, i, j, t, dtype);
}
int lw_out_input(tpu_lower_ctx_t* cx, int k, int dtype) {
  if (k < 0 || k >= cx->nouts) return tpu_ir_fail(&cx->g, TPU_ERR(INTERNAL, "%s: bad output index", cx->op_name));
  return add_tparam(cx, TPU_BIND_OUT, k, 0, &cx->outs[k], dtype);
}
void lw_check_scalar(tpu_lower_ctx_t* cx, int arg, int cmp, double bound, int arg2, const char* msg) {
  if (cx->sub) { /* a list op: the check applies to its own (shared) argument */
    int a = tpu_lower_sub_arg(cx, arg), b = arg2 >= 0 ? tpu_lower_sub_arg(cx, arg2) : -1;
    if (a < 0 || (arg2 >= 0 && b < 0)) {
      tpu_ir_fail(&cx->g, TPU_ERR(UNSUPPORTED, "%s: a per-tensor scalar that needs a runtime check", cx->op_name));
      return;
    }
    arg = a; arg2 = b;
  }
  if (cx->n_checks >= TPU_LOWER_MAX_CHECKS) {
    tpu_ir_fail(&cx->g, TPU_ERR(INTERNAL, "%s: too many scalar checks", cx->op_name));
    return;
  }
  tpu_scalar_check_t* c = &cx->checks[cx->n_checks++];
  c->arg = (int16_t)arg; c->arg2 = (int16_t)arg2; c->cmp = cmp; c->bound = bound;
  snprintf(c->msg, sizeof(c->msg), "%s", msg);
}
int tpu_size_decide_eval(int op, int64_t a, int64_t b, int64_t* out) {
  *out = 0;
  switch (op) {
    case TPU_SIZE_DECIDE_FLOOR_DIV:
    case TPU_SIZE_DECIDE_CEIL_DIV:
    case TPU_SIZE_DECIDE_REM: {
      if (b <= 0) return 0;
      int64_t q = a / b, r = a % b;
      if (r < 0) { q -= 1; r += b; } /* floor */
      *out = op == TPU_SIZE_DECIDE_FLOOR_DIV ? q : op == TPU_SIZE_DECIDE_REM ? r : q + (r != 0);
      return 1;
    }
    case TPU_SIZE_DECIDE_LT: *out = a < b; return 1;
    case TPU_SIZE_DECIDE_EQ: *out = a == b; return 1;
    case TPU_SIZE_DECIDE_ADAPTIVE_WINDOW: {
      if (a < 0 || b < 1) return 0;
      int64_t kmax = 0, end;
      if (__builtin_mul_overflow(b, a, &end)) return 0; /* (o + 1) * a below for every o < b */
      for (int64_t o = 0; o < b; ++o) {
        int64_t lo = (o * a) / b, hi = ((o + 1) * a + b - 1) / b;
        if (hi - lo > kmax) kmax = hi - lo;
      }
      *out = kmax;
      return 1;
    }
    default: return 0;
  }
}
int64_t lw_size_decide(tpu_lower_ctx_t* cx, int op, int64_t a, int64_t b) {
  int64_t r;
  if (!tpu_size_decide_eval(op, a, b, &r)) {
    tpu_ir_fail(&cx->g, TPU_ERR(INTERNAL, "%s: bad size decision %d(%lld, %lld)", cx->op_name, op, (long long)a, (long long)b));
    return 0;
  }
  if (cx->embed) tpu_trace_embed_size_decision(cx, op, a, b, r);
  return r;
}
void lw_rng_state(tpu_lower_ctx_t* cx, int i, uint64_t counters, int* seed, int* offset) {
  cx->gen_arg = i;
  /* whole Philox blocks of 4 counters: a size decision (ceil) when counters follow the sizes */
  cx->rng_increment = counters > (uint64_t)INT64_MAX ? ((counters + 3) / 4) * 4
                    : (uint64_t)lw_size_decide(cx, TPU_SIZE_DECIDE_CEIL_DIV, (int64_t)counters, 4) * 4;
  if (cx->rng_increment == 0) cx->rng_increment = 4;
  *seed = add_sparam(cx, TPU_SBIND_GEN_SEED, i, 0, TPU_DTYPE_I64);
  *offset = add_sparam(cx, TPU_SBIND_GEN_OFFSET, i, 0, TPU_DTYPE_I64);
}

/* Note: `dims` may point into the graph (another value's type); builders can reallocate
 * the graph's op array, so helpers copy such arguments before adding ops. */
int lw_bcast(tpu_lower_ctx_t* cx, int v, int rank, const int64_t* dims_in) {
  if (v < 0) return -1;
  if (rank < 0 || rank > TPU_MAX_DIMS) return tpu_ir_fail(&cx->g, TPU_ERR(INVALID_ARGUMENT, "%s: bad rank", cx->op_name));
  int64_t dims[TPU_MAX_DIMS];
  memcpy(dims, dims_in, (size_t)rank * sizeof(int64_t));
  const tpu_ir_type_t* t = tpu_ir_type(&cx->g, v);
  if (t->rank > rank) {
    /* allow dropping leading size-1 dims (e.g. a [1,n] operand for an [n] output) */
    int extra = t->rank - rank;
    for (int d = 0; d < extra; ++d)
      if (t->dims[d] != 1) return tpu_ir_fail(&cx->g, TPU_ERR(INVALID_ARGUMENT, "%s: shape mismatch: cannot broadcast a rank-%d tensor to rank %d", cx->op_name, t->rank, rank));
    v = tpu_ir_reshape(&cx->g, v, rank, t->dims + extra);
    if (v < 0) return v;
    t = tpu_ir_type(&cx->g, v);
  }
  for (int d = 0; d < t->rank; ++d) {
    int64_t s = t->dims[d], o = dims[rank - t->rank + d];
    if (s != 1 && s != o) {
      char a[128] = {0}, b[128] = {0};
      int n = 0;
      for (int k = 0; k < t->rank; ++k) n += snprintf(a + n, sizeof(a) - (size_t)n, k ? ", %lld" : "%lld", (long long)t->dims[k]);
      n = 0;
      for (int k = 0; k < rank; ++k) n += snprintf(b + n, sizeof(b) - (size_t)n, k ? ", %lld" : "%lld", (long long)dims[k]);
      return tpu_ir_fail(&cx->g, TPU_ERR(INVALID_ARGUMENT, "%s: the size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton dimension %d (shapes [%s] and [%s])",
                                        cx->op_name, (long long)s, (long long)o, rank - t->rank + d, a, b));
    }
  }
  return tpu_ir_broadcast(&cx->g, v, rank, dims, NULL);
}
int lw_bcast_like(tpu_lower_ctx_t* cx, int v, int like) {
  if (like < 0) return -1;
  const tpu_ir_type_t* t = tpu_ir_type(&cx->g, like);
  return lw_bcast(cx, v, t->rank, t->dims);
}
int lw_const(tpu_lower_ctx_t* cx, double value, int dtype, int rank, const int64_t* dims_in) {
  if (rank < 0 || rank > TPU_MAX_DIMS) return tpu_ir_fail(&cx->g, TPU_ERR(INVALID_ARGUMENT, "%s: bad rank", cx->op_name));
  int64_t dims[TPU_MAX_DIMS];
  if (rank) memcpy(dims, dims_in, (size_t)rank * sizeof(int64_t));
  int c = tpu_ir_constant(&cx->g, dtype, value);
  return rank ? tpu_ir_broadcast(&cx->g, c, rank, dims, NULL) : c;
}
int lw_const_like(tpu_lower_ctx_t* cx, double value, int like) {
  if (like < 0) return -1;
  const tpu_ir_type_t* t = tpu_ir_type(&cx->g, like);
  return lw_const(cx, value, t->dtype, t->rank, t->dims);
}
int lw_unreduce(tpu_lower_ctx_t* cx, int v, int like, const int64_t* flags) {
  if (v < 0 || like < 0) return -1;
  tpu_ir_type_t t = *tpu_ir_type(&cx->g, like); /* a copy: builders may move the op array */
  int64_t bd[TPU_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < t.rank; ++d) if (!flags[d]) bd[n++] = d;
  return tpu_ir_broadcast(&cx->g, v, t.rank, t.dims, bd);
}
int lw_slice_dim(tpu_lower_ctx_t* cx, int v, int dim, int64_t lo, int64_t hi) {
  if (v < 0) return -1;
  tpu_ir_type_t t = *tpu_ir_type(&cx->g, v); /* a copy: builders may move the op array */
  if (dim < 0) dim += t.rank;
  if (dim < 0 || dim >= t.rank) return tpu_ir_fail(&cx->g, TPU_ERR(INTERNAL, "%s: slice of dim %d of a rank-%d value", cx->op_name, dim, t.rank));
  int64_t s[TPU_MAX_DIMS] = {0}, l[TPU_MAX_DIMS], st[TPU_MAX_DIMS];
  for (int d = 0; d < t.rank; ++d) { l[d] = t.dims[d]; st[d] = 1; }
  s[dim] = lo; l[dim] = hi;
  return tpu_ir_slice(&cx->g, v, s, l, st);
}
int lw_reduce(tpu_lower_ctx_t* cx, int monoid, int x, const int64_t* flags) {
  if (x < 0) return -1;
  int rank = tpu_ir_type(&cx->g, x)->rank, any = 0;
  for (int d = 0; flags && d < rank; ++d) any |= flags[d] != 0;
  return any ? tpu_ir_reduce(&cx->g, monoid, x, flags) : x;
}
int lw_nonzero_mask(tpu_lower_ctx_t* cx, int x) {
  if (x < 0 || tpu_ir_type(&cx->g, x)->dtype == TPU_DTYPE_BOOL) return x;
  return tpu_ir_compare(&cx->g, TPU_IR_CMP_NE, x, lw_const_like(cx, 0, x));
}
int lw_pnorm(tpu_lower_ctx_t* cx, int x, double ord, const int64_t* flags) {
  tpu_ir_graph_t* g = &cx->g;
  if (x < 0) return -1;
  if (ord == 0)
    return lw_reduce(cx, TPU_IR_MONOID_SUM, tpu_ir_convert(g, lw_nonzero_mask(cx, x), tpu_ir_type(g, x)->dtype), flags);
  if (ord == 2) return tpu_ir_unary(g, TPU_IR_SQRT, lw_reduce(cx, TPU_IR_MONOID_SUM, tpu_ir_binary(g, TPU_IR_MUL, x, x), flags));
  int ax = tpu_ir_unary(g, TPU_IR_ABS, x);
  if (ord == 1) return lw_reduce(cx, TPU_IR_MONOID_SUM, ax, flags);
  if (ord == INFINITY) return lw_reduce(cx, TPU_IR_MONOID_MAX, ax, flags);
  if (ord == -INFINITY) return lw_reduce(cx, TPU_IR_MONOID_MIN, ax, flags);
  int s = lw_reduce(cx, TPU_IR_MONOID_SUM, tpu_ir_binary(g, TPU_IR_POW, ax, lw_const_like(cx, ord, ax)), flags);
  return tpu_ir_binary(g, TPU_IR_POW, s, lw_const_like(cx, 1.0 / ord, s));
}
tpu_status_t lw_output(tpu_lower_ctx_t* cx, int k, int v) {
  if (cx->g.status) return TPU_OK; /* reported by the caller */
  if (k < 0 || k >= cx->nouts) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: no output %d", cx->op_name, k);
  const tpu_tensor_t* o = &cx->outs[k];
  if (o->ndim < 0) { /* absent output (undefined tensor): v is ignored and may be -1 */
    if (cx->embed) return tpu_trace_embed_output(cx, cx->sub ? tpu_lower_sub_out(cx, k) : k, -1, -1);
    tpu_ir_output(&cx->g, tpu_ir_constant(&cx->g, TPU_DTYPE_F64, 0));
    return TPU_OK;
  }
  v = tpu_ir_convert(&cx->g, v, o->dtype);
  v = lw_bcast(cx, v, o->ndim, o->sizes);
  if (v >= 0) {
    const tpu_ir_type_t* t = tpu_ir_type(&cx->g, v);
    if (t->rank != o->ndim) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: output rank mismatch", cx->op_name);
  }
  if (cx->embed) return tpu_trace_embed_output(cx, cx->sub ? tpu_lower_sub_out(cx, k) : k, -1, v);
  tpu_ir_output(&cx->g, v);
  return TPU_OK;
}
tpu_status_t lw_output_arg(tpu_lower_ctx_t* cx, int arg, int v) {
  if (cx->g.status) return TPU_OK;
  if (cx->sub || arg < 0 || arg >= cx->nargs || cx->args[arg].kind != TPU_ARG_TENSOR || cx->n_arg_outs >= TPU_LOWER_MAX_ARG_OUTS)
    return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: argument %d cannot be written", cx->op_name, arg);
  if (!cx->embed && cx->g.n_outputs != cx->nouts + cx->n_arg_outs)
    return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: bind every output before argument outputs", cx->op_name);
  const tpu_tensor_t* t = cx->args[arg].tensor;
  v = tpu_ir_convert(&cx->g, v, t->dtype);
  v = lw_bcast(cx, v, t->ndim, t->sizes);
  if (cx->embed) {
    tpu_status_t st = tpu_trace_embed_output(cx, cx->n_arg_outs, arg, v);
    if (st == TPU_OK) cx->arg_outs[cx->n_arg_outs++] = (int16_t)arg;
    return st;
  }
  tpu_ir_output(&cx->g, v);
  cx->arg_outs[cx->n_arg_outs++] = (int16_t)arg;
  return TPU_OK;
}
int lw_norm_dim(tpu_lower_ctx_t* cx, int64_t dim, int rank) {
  int r = rank ? rank : 1;
  if (dim < -r || dim >= r) {
    tpu_ir_fail(&cx->g, TPU_ERR(INDEX_ERROR, "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                                -r, r - 1, (long long)dim));
    return -1;
  }
  return (int)(dim < 0 ? dim + r : dim);
}

/* ---- type promotion (c10::promoteTypes and at::result_type) */
static int rank_int(int dt) {
  switch (dt) {
    case TPU_DTYPE_I8: return 1; case TPU_DTYPE_I16: return 2; case TPU_DTYPE_I32: return 3;
    case TPU_DTYPE_I64: return 4; default: return 0;
  }
}
int tpu_promote_types(int a, int b) {
  if (a < 0) return b;
  if (b < 0 || a == b) return a;
  if (a == TPU_DTYPE_BOOL) return b;
  if (b == TPU_DTYPE_BOOL) return a;
  int fa = tpu_dtype_is_floating(a), fb = tpu_dtype_is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    if (a == TPU_DTYPE_F64 || b == TPU_DTYPE_F64) return TPU_DTYPE_F64;
    return TPU_DTYPE_F32; /* f32 with anything, or f16 with bf16 */
  }
  if (a == TPU_DTYPE_U8 || b == TPU_DTYPE_U8) {
    int s = a == TPU_DTYPE_U8 ? b : a;
    return s == TPU_DTYPE_I8 ? TPU_DTYPE_I16 : s;
  }
  return rank_int(a) > rank_int(b) ? a : b;
}
static int is_float_or_complex(int dt) { return tpu_dtype_is_floating(dt); }
static int combine(int higher, int lower) {
  if (higher >= 0 && tpu_dtype_is_floating(higher)) return higher;
  if (higher == TPU_DTYPE_BOOL || (lower >= 0 && is_float_or_complex(lower)))
    return tpu_promote_types(higher, lower);
  if (higher >= 0) return higher;
  return lower;
}
int lw_result_type(const tpu_lower_ctx_t* cx, int n, const int* idx) {
  int dim_t = -1, zero_t = -1, wrapped_t = -1;
  for (int k = 0; k < n; ++k) {
    const tpu_arg_t* a = arg(cx, idx[k]);
    if (a->kind == TPU_ARG_TENSOR) {
      if (a->tensor->ndim > 0) dim_t = tpu_promote_types(dim_t, a->tensor->dtype);
      else zero_t = tpu_promote_types(zero_t, a->tensor->dtype);
    } else if (a->kind == TPU_ARG_SCALAR) {
      if (a->scalar_flags & TPU_SCALAR_ZERODIM) zero_t = tpu_promote_types(zero_t, a->scalar_dtype);
      else {
        int dt = tpu_dtype_is_floating(a->scalar_dtype) ? TPU_DTYPE_F32 : a->scalar_dtype;
        wrapped_t = tpu_promote_types(wrapped_t, dt);
      }
    } else if (a->kind == TPU_ARG_DOUBLE) {
      wrapped_t = tpu_promote_types(wrapped_t, TPU_DTYPE_F32);
    }
  }
  int r = combine(dim_t, combine(zero_t, wrapped_t));
  return r < 0 ? TPU_DTYPE_F32 : r;
}
int tpu_can_cast(int from, int to) {
  if (tpu_dtype_is_floating(from) && !tpu_dtype_is_floating(to)) return 0;
  if (from != TPU_DTYPE_BOOL && to == TPU_DTYPE_BOOL) return 0;
  return 1;
}
int tpu_opmath_dtype(int dt) { return (dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16) ? TPU_DTYPE_F32 : dt; }
const char* tpu_dtype_c10_name(int dt) {
  static const char* const n[TPU_DTYPE_COUNT] = {"Float", "Double", "Half", "BFloat16", "Long",
                                                 "Int", "Short", "Char", "Byte", "Bool"};
  return (dt >= 0 && dt < TPU_DTYPE_COUNT) ? n[dt] : "?";
}
const char* tpu_dtype_cpp_name(int dt) {
  static const char* const n[TPU_DTYPE_COUNT] = {"float", "double", "c10::Half", "c10::BFloat16", "long int",
                                                 "int", "short int", "signed char", "unsigned char", "bool"};
  return (dt >= 0 && dt < TPU_DTYPE_COUNT) ? n[dt] : "?";
}
int lw_custom_a(tpu_lower_ctx_t* cx, int target, int64_t i1, int64_t a0, int64_t a1, const tpu_ir_type_t* t, int n,
                const int* in) {
  for (int k = 0; k < n; ++k)
    if (in[k] < 0) return -1;
  tpu_ir_op_t p = {0};
  p.opcode = TPU_IR_CUSTOM;
  p.type = *t;
  p.i0 = target;
  p.i1 = i1;
  p.a[0][0] = a0;
  p.a[0][1] = a1;
  return tpu_ir_add_op(&cx->g, &p, n, in);
}

/* ---- shape rules */
const tpu_tensor_t* lw_args_tensor(const tpu_arg_t* args, int nargs, int i) {
  return i >= 0 && i < nargs && args[i].kind == TPU_ARG_TENSOR && args[i].tensor && args[i].tensor->ndim >= 0
             ? args[i].tensor : NULL;
}
tpu_status_t lw_shapes_decline(const char* what) {
  return TPU_ERR(UNSUPPORTED, "%s: arguments outside its C shape rule", what);
}
tpu_status_t lw_shapes_like_arg(int device, const tpu_arg_t* args, int nargs, int i, tpu_tensor_t* out_meta, int max,
                                int* out_n) {
  (void)max;
  const tpu_tensor_t* x = lw_args_tensor(args, nargs, i);
  if (!x) return TPU_ERR(INVALID_ARGUMENT, "expected a tensor as argument %d", i);
  out_meta[0] = tpu_tensor_contiguous(NULL, device, (tpu_dtype_t)x->dtype, x->ndim, x->sizes);
  *out_n = 1;
  return TPU_OK;
}
