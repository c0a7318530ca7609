/* ir.c — builder, verifier, structural hash and text printer for the graph IR. */
#include "ir/ir.h"

#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* const kNames[] = {
  "parameter", "scalar", "constant", "iota",
  "negate", "abs", "sign", "exponential", "exponential_minus_one", "log", "log_plus_one",
  "sqrt", "rsqrt", "sine", "cosine", "tan", "tanh", "logistic",
  "floor", "ceil", "round_nearest_even", "trunc", "erf", "not",
  "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf_inv", "lgamma",
  "digamma", "reciprocal", "is_finite", "is_nan", "is_inf",
  "add", "subtract", "multiply", "divide", "remainder", "power", "maximum",
  "minimum", "and", "or", "xor", "shift_left", "shift_right_arithmetic", "atan2",
  "floor_divide", "fmod", "compare",
  "select", "clamp", "convert",
  "broadcast_in_dim", "reshape", "transpose", "slice", "reverse",
  "concatenate", "pad", "dot_general", "reduce", "argreduce", "cumulative", "gather",
  "index_select", "scatter", "index_put", "rng", "sort", "argsort",
  "convolution", "reduce_window", "custom_call",
};
_Static_assert(sizeof(kNames) / sizeof(kNames[0]) == TPU_IR_OPCODE_COUNT, "one name per opcode");

const char* tpu_ir_opcode_name(int opcode) {
  return (opcode >= 0 && opcode < TPU_IR_OPCODE_COUNT) ? kNames[opcode] : "?";
}
int tpu_ir_is_elementwise(int op) { return op >= TPU_IR_NEG && op <= TPU_IR_CONVERT; }
int tpu_ir_custom_elementwise(const tpu_ir_graph_t* G, int v) {
  const tpu_ir_op_t* op = &G->ops[v];
  if (op->opcode != TPU_IR_CUSTOM || op->type.dtype != TPU_DTYPE_F32) return 0;
  int scalar_k = -1, n_in;
  switch (op->i0) {
    case TPU_IR_CUSTOM_SILU: case TPU_IR_CUSTOM_GELU: n_in = 1; break;
    case TPU_IR_CUSTOM_SILU_BWD: case TPU_IR_CUSTOM_GELU_BWD: n_in = 2; break;
    case TPU_IR_CUSTOM_LERP: n_in = 3; scalar_k = 2; break;
    case TPU_IR_CUSTOM_ADDC: n_in = 4; scalar_k = 3; if (op->i1 != 0 && op->i1 != 1) return 0; break;
    default: return 0;
  }
  if (op->n_in != n_in) return 0;
  for (int k = 0; k < n_in; ++k) {
    const tpu_ir_type_t* t = &G->ops[tpu_ir_operand(G, v, k)].type;
    if (t->dtype != TPU_DTYPE_F32) return 0;
    if (t->rank == 0 && (k == scalar_k || op->type.rank == 0)) continue;
    if (k == scalar_k && op->i0 == TPU_IR_CUSTOM_ADDC) return 0; /* ADDC's value is rank 0 */
    if (t->rank != op->type.rank) return 0;
    for (int d = 0; d < t->rank; ++d) if (t->dims[d] != op->type.dims[d]) return 0;
  }
  return 1;
}
/* dtype dt, rank `rank`, dims a, b, c (as many as the rank) */
static int type_is(const tpu_ir_type_t* t, int dt, int rank, int64_t a, int64_t b, int64_t c) {
  return t->dtype == dt && t->rank == rank && (rank < 1 || t->dims[0] == a) && (rank < 2 || t->dims[1] == b) &&
         (rank < 3 || t->dims[2] == c);
}
int tpu_ir_custom_operands_ok(int64_t t, int64_t i1, int n, const tpu_ir_type_t* const* in, const tpu_ir_type_t* r) {
  if (t == TPU_IR_CUSTOM_HISTC_EDGES)
    return n == 2 && type_is(in[0], TPU_DTYPE_F64, 0, 0, 0, 0) && type_is(in[1], TPU_DTYPE_F64, 0, 0, 0, 0) &&
           type_is(r, TPU_DTYPE_F64, 1, 2, 0, 0);
  if (t < TPU_IR_CUSTOM_GROUP_NORM_STATS || t > TPU_IR_CUSTOM_GROUP_NORM_BWD) return 1;
  const int stats = t == TPU_IR_CUSTOM_GROUP_NORM_STATS, bwd = t == TPU_IR_CUSTOM_GROUP_NORM_SUMS || t == TPU_IR_CUSTOM_GROUP_NORM_BWD;
  const int hw = (t == TPU_IR_CUSTOM_GROUP_NORM || t == TPU_IR_CUSTOM_GROUP_NORM_BWD) && (i1 & 1);
  const int hb = t == TPU_IR_CUSTOM_GROUP_NORM && (i1 & 2), hs = t == TPU_IR_CUSTOM_GROUP_NORM_BWD && (i1 & 2);
  if (i1 < 0 || i1 > 3 || (stats && i1 != 0) || n != (stats ? 2 : (bwd ? 4 : 3) + hw + hb + hs)) return 0;
  const tpu_ir_type_t* x = in[bwd];
  const int xdt = x->dtype;
  if (x->rank != 3 || (xdt != TPU_DTYPE_F32 && xdt != TPU_DTYPE_BF16 && xdt != TPU_DTYPE_F16 && xdt != TPU_DTYPE_F64)) return 0;
  const int dt = xdt == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32; /* the statistics' dtype */
  const int64_t N = x->dims[0], C = x->dims[1], I = x->dims[2];
  if (stats)
    return in[1]->rank == 0 && tpu_dtype_is_floating(in[1]->dtype) && r->rank == 3 && r->dims[2] >= 1 &&
           C % r->dims[2] == 0 && type_is(r, dt, 3, 2, N, r->dims[2]);
  const tpu_ir_type_t *m = in[bwd + 1], *s = in[bwd + 2];
  if (m->rank != 2 || m->dims[1] < 1 || C % m->dims[1]) return 0;
  const int64_t G = m->dims[1];
  if (!type_is(m, dt, 2, N, G, 0) || !type_is(s, dt, 2, N, G, 0)) return 0;
  if (bwd && !type_is(in[0], xdt, 3, N, C, I)) return 0;
  int k = bwd + 3;
  if (hw && !type_is(in[k++], dt, 1, C, 0, 0)) return 0;
  if (hb && !type_is(in[k++], dt, 1, C, 0, 0)) return 0;
  if (hs && !type_is(in[k++], dt, 3, 2, N + 1, C)) return 0;
  return t == TPU_IR_CUSTOM_GROUP_NORM_SUMS ? type_is(r, dt, 3, 2, N + 1, C) : type_is(r, xdt, 3, N, C, I);
}
/* std::min / std::max: the first argument unless the second compares below / above it */
static double min_std(double a, double b) { return b < a ? b : a; }
static double max_std(double a, double b) { return a < b ? b : a; }
/* (float)v as x86 converts it: out of range -> +-inf (a C cast would be undefined there) */
static float to_f32(double v) { return v > FLT_MAX ? INFINITY : (v < -FLT_MAX ? -INFINITY : (float)v); }
void tpu_ir_histc_widen(int dtype, double* lo, double* hi) {
  if (dtype == TPU_DTYPE_F32) {
    *lo = min_std((double)nextafterf(to_f32(*lo), -FLT_MAX), *lo - 1.);
    *hi = max_std((double)nextafterf(to_f32(*hi), FLT_MAX), *hi + 1.);
  } else if (dtype == TPU_DTYPE_F64) {
    *lo = min_std(nextafter(*lo, -DBL_MAX), *lo - 1.);
    *hi = max_std(nextafter(*hi, DBL_MAX), *hi + 1.);
  } else {
    *lo -= 1; *hi += 1;
  }
}
tpu_status_t tpu_ir_histc_range(int dtype, double* lo, double* hi) {
  if (*lo == *hi) tpu_ir_histc_widen(dtype, lo, hi);
  if (!isfinite(*lo) || !isfinite(*hi))
    return TPU_ERR(INVALID_ARGUMENT, "torch.histc: range of [%g, %g] is not finite", *lo, *hi);
  if (!(*lo < *hi)) return TPU_ERR(INVALID_ARGUMENT, "torch.histc: max must be larger than min");
  return TPU_OK;
}
int tpu_ir_is_view(int op) { return op >= TPU_IR_BROADCAST && op <= TPU_IR_REVERSE; }
static int is_unary(int op) { return op >= TPU_IR_NEG && op <= TPU_IR_IS_INF; }
static int is_binary(int op) { return op >= TPU_IR_ADD && op <= TPU_IR_FMOD; }

void tpu_ir_graph_init(tpu_ir_graph_t* g) { memset(g, 0, sizeof(*g)); }
void tpu_ir_graph_free(tpu_ir_graph_t* g) {
  free(g->ops); free(g->operands); tpu_status_free(g->status);
  memset(g, 0, sizeof(*g));
}
tpu_status_t tpu_ir_graph_clone(const tpu_ir_graph_t* g, tpu_ir_graph_t* out) {
  tpu_ir_graph_init(out);
  out->ops = malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof(tpu_ir_op_t));
  out->operands = malloc((size_t)(g->n_operands ? g->n_operands : 1) * sizeof(int32_t));
  if (!out->ops || !out->operands) { tpu_ir_graph_free(out); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  if (g->n_ops) memcpy(out->ops, g->ops, (size_t)g->n_ops * sizeof(tpu_ir_op_t));
  if (g->n_operands) memcpy(out->operands, g->operands, (size_t)g->n_operands * sizeof(int32_t));
  out->n_ops = out->cap_ops = g->n_ops;
  out->n_operands = out->cap_operands = g->n_operands;
  out->n_params = g->n_params; out->n_scalars = g->n_scalars;
  memcpy(out->outputs, g->outputs, sizeof(out->outputs));
  out->n_outputs = g->n_outputs; out->precision = g->precision;
  return TPU_OK;
}
int tpu_ir_fail(tpu_ir_graph_t* g, tpu_status_t st) {
  if (g->status == TPU_OK) g->status = st; else tpu_status_free(st);
  return -1;
}
#define FAIL(g, ...) tpu_ir_fail((g), TPU_ERR(INVALID_ARGUMENT, __VA_ARGS__))

int64_t tpu_ir_numel(const tpu_ir_type_t* t) { return tpu_numel(t->rank, t->dims); }
int tpu_ir_same_shape(const tpu_ir_type_t* a, const tpu_ir_type_t* b) {
  if (a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; ++d) if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}
static int valid(const tpu_ir_graph_t* g, int v) { return v >= 0 && v < g->n_ops; }

int tpu_ir_add_op(tpu_ir_graph_t* g, const tpu_ir_op_t* proto, int n_in, const int* in) {
  if (g->status) return -1;
  for (int k = 0; k < n_in; ++k) if (!valid(g, in[k])) return FAIL(g, "ir: invalid operand");
  if (proto->type.rank < 0 || proto->type.rank > TPU_MAX_DIMS)
    return FAIL(g, "ir: rank %d exceeds the limit of %d dims", proto->type.rank, TPU_MAX_DIMS);
  for (int d = 0; d < proto->type.rank; ++d)
    if (proto->type.dims[d] < 0) return FAIL(g, "ir: negative dimension");
  if (g->n_ops == g->cap_ops) {
    int cap = g->cap_ops ? g->cap_ops * 2 : 16;
    tpu_ir_op_t* p = realloc(g->ops, (size_t)cap * sizeof(*p));
    if (!p) return tpu_ir_fail(g, TPU_ERR(OUT_OF_MEMORY, "ir: out of host memory"));
    g->ops = p; g->cap_ops = cap;
  }
  if (g->n_operands + n_in > g->cap_operands) {
    int cap = g->cap_operands ? g->cap_operands * 2 : 32;
    while (cap < g->n_operands + n_in) cap *= 2;
    int32_t* p = realloc(g->operands, (size_t)cap * sizeof(*p));
    if (!p) return tpu_ir_fail(g, TPU_ERR(OUT_OF_MEMORY, "ir: out of host memory"));
    g->operands = p; g->cap_operands = cap;
  }
  tpu_ir_op_t* op = &g->ops[g->n_ops];
  *op = *proto;
  if (op->opcode != TPU_IR_DOT && op->opcode != TPU_IR_CONV && op->opcode != TPU_IR_CUSTOM) op->prec = 0;
  for (int d = op->type.rank; d < TPU_MAX_DIMS; ++d) op->type.dims[d] = 0;
  op->n_in = n_in; op->in_off = g->n_operands;
  for (int k = 0; k < n_in; ++k) g->operands[g->n_operands++] = in[k];
  return g->n_ops++;
}

static tpu_ir_op_t proto_of(int opcode, int dtype, int rank, const int64_t* dims) {
  tpu_ir_op_t p; memset(&p, 0, sizeof(p));
  p.opcode = opcode; p.type.dtype = dtype; p.type.rank = rank;
  for (int d = 0; d < rank && d < TPU_MAX_DIMS; ++d) p.type.dims[d] = dims[d];
  return p;
}
static tpu_ir_op_t proto_like(int opcode, const tpu_ir_type_t* t) {
  return proto_of(opcode, t->dtype, t->rank, t->dims);
}
#define CHECK_IN(g, ...) do { int ins_[] = {__VA_ARGS__}; if ((g)->status) return -1; \
  for (int k_ = 0; k_ < TPU_ARRAY_LEN(ins_); ++k_) if (!valid((g), ins_[k_])) return FAIL(g, "ir: invalid operand"); } while (0)

int tpu_ir_param(tpu_ir_graph_t* g, int dtype, int rank, const int64_t* dims) {
  tpu_ir_op_t p = proto_of(TPU_IR_PARAM, dtype, rank, dims);
  p.i0 = g->n_params;
  int v = tpu_ir_add_op(g, &p, 0, NULL);
  if (v >= 0) g->n_params++;
  return v;
}
int tpu_ir_scalar(tpu_ir_graph_t* g, int dtype) {
  tpu_ir_op_t p = proto_of(TPU_IR_SCALAR, dtype, 0, NULL);
  p.i0 = g->n_scalars;
  int v = tpu_ir_add_op(g, &p, 0, NULL);
  if (v >= 0) g->n_scalars++;
  return v;
}
int tpu_ir_constant(tpu_ir_graph_t* g, int dtype, double value) {
  tpu_ir_op_t p = proto_of(TPU_IR_CONSTANT, dtype, 0, NULL);
  if (tpu_dtype_is_floating(dtype)) p.f0 = value; else p.i0 = (int64_t)value;
  return tpu_ir_add_op(g, &p, 0, NULL);
}
int tpu_ir_iota(tpu_ir_graph_t* g, int dtype, int rank, const int64_t* dims, int dim) {
  if (dim < 0 || dim >= rank) return FAIL(g, "ir: iota dim out of range");
  tpu_ir_op_t p = proto_of(TPU_IR_IOTA, dtype, rank, dims);
  p.i0 = dim;
  return tpu_ir_add_op(g, &p, 0, NULL);
}

int tpu_ir_unary(tpu_ir_graph_t* g, int opcode, int x) {
  CHECK_IN(g, x);
  if (!is_unary(opcode)) return FAIL(g, "ir: %s is not unary", tpu_ir_opcode_name(opcode));
  tpu_ir_op_t p = proto_like(opcode, tpu_ir_type(g, x));
  if (opcode == TPU_IR_IS_FINITE || opcode == TPU_IR_IS_NAN || opcode == TPU_IR_IS_INF)
    p.type.dtype = TPU_DTYPE_BOOL;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_binary(tpu_ir_graph_t* g, int opcode, int x, int y) {
  CHECK_IN(g, x, y);
  if (!is_binary(opcode) || opcode == TPU_IR_COMPARE)
    return FAIL(g, "ir: %s is not binary", tpu_ir_opcode_name(opcode));
  const tpu_ir_type_t *tx = tpu_ir_type(g, x), *ty = tpu_ir_type(g, y);
  if (!tpu_ir_same_shape(tx, ty) || tx->dtype != ty->dtype)
    return FAIL(g, "ir: %s operands differ in type", tpu_ir_opcode_name(opcode));
  tpu_ir_op_t p = proto_like(opcode, tx);
  int in[2] = {x, y};
  return tpu_ir_add_op(g, &p, 2, in);
}
int tpu_ir_compare(tpu_ir_graph_t* g, int cmp, int x, int y) {
  CHECK_IN(g, x, y);
  const tpu_ir_type_t *tx = tpu_ir_type(g, x), *ty = tpu_ir_type(g, y);
  if (!tpu_ir_same_shape(tx, ty) || tx->dtype != ty->dtype) return FAIL(g, "ir: compare operands differ");
  if (cmp < 0 || cmp >= TPU_IR_CMP_COUNT) return FAIL(g, "ir: bad comparison");
  tpu_ir_op_t p = proto_like(TPU_IR_COMPARE, tx);
  p.type.dtype = TPU_DTYPE_BOOL; p.i0 = cmp;
  int in[2] = {x, y};
  return tpu_ir_add_op(g, &p, 2, in);
}
int tpu_ir_select(tpu_ir_graph_t* g, int pred, int t, int f) {
  CHECK_IN(g, pred, t, f);
  const tpu_ir_type_t *tp = tpu_ir_type(g, pred), *tt = tpu_ir_type(g, t), *tf = tpu_ir_type(g, f);
  if (tp->dtype != TPU_DTYPE_BOOL || !tpu_ir_same_shape(tp, tt) || !tpu_ir_same_shape(tt, tf) ||
      tt->dtype != tf->dtype)
    return FAIL(g, "ir: select operand types");
  tpu_ir_op_t p = proto_like(TPU_IR_SELECT, tt);
  int in[3] = {pred, t, f};
  return tpu_ir_add_op(g, &p, 3, in);
}
int tpu_ir_clamp(tpu_ir_graph_t* g, int lo, int x, int hi) {
  CHECK_IN(g, lo, x, hi);
  const tpu_ir_type_t *tl = tpu_ir_type(g, lo), *tx = tpu_ir_type(g, x), *th = tpu_ir_type(g, hi);
  if (!tpu_ir_same_shape(tl, tx) || !tpu_ir_same_shape(th, tx) || tl->dtype != tx->dtype ||
      th->dtype != tx->dtype)
    return FAIL(g, "ir: clamp operand types");
  tpu_ir_op_t p = proto_like(TPU_IR_CLAMP, tx);
  int in[3] = {lo, x, hi};
  return tpu_ir_add_op(g, &p, 3, in);
}
int tpu_ir_convert(tpu_ir_graph_t* g, int x, int dtype) {
  CHECK_IN(g, x);
  if (tpu_ir_type(g, x)->dtype == dtype) return x;
  tpu_ir_op_t p = proto_like(TPU_IR_CONVERT, tpu_ir_type(g, x));
  p.type.dtype = dtype;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_broadcast(tpu_ir_graph_t* g, int x, int rank, const int64_t* dims, const int64_t* bdims) {
  CHECK_IN(g, x);
  const tpu_ir_type_t* tx = tpu_ir_type(g, x);
  if (tx->rank > rank) return FAIL(g, "ir: broadcast to a lower rank");
  tpu_ir_op_t p = proto_of(TPU_IR_BROADCAST, tx->dtype, rank, dims);
  int same = tx->rank == rank;
  for (int i = 0; i < tx->rank; ++i) {
    int64_t od = bdims ? bdims[i] : rank - tx->rank + i;
    if (od < 0 || od >= rank || (i > 0 && od <= p.a[0][i - 1]))
      return FAIL(g, "ir: broadcast dims must be increasing and in range");
    if (tx->dims[i] != 1 && tx->dims[i] != dims[od])
      return FAIL(g, "ir: cannot broadcast dim %d of size %lld to %lld", i,
                  (long long)tx->dims[i], (long long)dims[od]);
    p.a[0][i] = od;
    if (od != i || tx->dims[i] != dims[od]) same = 0;
  }
  if (same) return x;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_reshape(tpu_ir_graph_t* g, int x, int rank, const int64_t* dims) {
  CHECK_IN(g, x);
  const tpu_ir_type_t* tx = tpu_ir_type(g, x);
  if (tpu_numel(rank, dims) != tpu_ir_numel(tx)) return FAIL(g, "ir: reshape changes element count");
  tpu_ir_op_t p = proto_of(TPU_IR_RESHAPE, tx->dtype, rank, dims);
  if (tpu_ir_same_shape(&p.type, tx)) return x;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_transpose(tpu_ir_graph_t* g, int x, const int64_t* perm) {
  CHECK_IN(g, x);
  const tpu_ir_type_t* tx = tpu_ir_type(g, x);
  tpu_ir_op_t p = proto_like(TPU_IR_TRANSPOSE, tx);
  int seen[TPU_MAX_DIMS] = {0}, ident = 1;
  for (int d = 0; d < tx->rank; ++d) {
    if (perm[d] < 0 || perm[d] >= tx->rank || seen[perm[d]]++) return FAIL(g, "ir: bad permutation");
    p.a[0][d] = perm[d]; p.type.dims[d] = tx->dims[perm[d]];
    if (perm[d] != d) ident = 0;
  }
  if (ident) return x;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_slice(tpu_ir_graph_t* g, int x, const int64_t* start, const int64_t* limit,
                 const int64_t* stride) {
  CHECK_IN(g, x);
  const tpu_ir_type_t* tx = tpu_ir_type(g, x);
  tpu_ir_op_t p = proto_like(TPU_IR_SLICE, tx);
  for (int d = 0; d < tx->rank; ++d) {
    if (start[d] < 0 || limit[d] > tx->dims[d] || stride[d] < 1 || start[d] > limit[d])
      return FAIL(g, "ir: slice out of range");
    p.a[0][d] = start[d]; p.a[1][d] = limit[d]; p.a[2][d] = stride[d];
    p.type.dims[d] = (limit[d] - start[d] + stride[d] - 1) / stride[d];
  }
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_reverse(tpu_ir_graph_t* g, int x, const int64_t* flags) {
  CHECK_IN(g, x);
  tpu_ir_op_t p = proto_like(TPU_IR_REVERSE, tpu_ir_type(g, x));
  for (int d = 0; d < p.type.rank; ++d) p.a[0][d] = flags[d] ? 1 : 0;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_concat(tpu_ir_graph_t* g, int n, const int* xs, int dim) {
  if (g->status) return -1;
  if (n < 1) return FAIL(g, "ir: concatenate needs operands");
  for (int k = 0; k < n; ++k) if (!valid(g, xs[k])) return FAIL(g, "ir: invalid operand");
  const tpu_ir_type_t* t0 = tpu_ir_type(g, xs[0]);
  if (dim < 0 || dim >= t0->rank) return FAIL(g, "ir: concatenate dim out of range");
  tpu_ir_op_t p = proto_like(TPU_IR_CONCAT, t0);
  p.i0 = dim; p.type.dims[dim] = 0;
  for (int k = 0; k < n; ++k) {
    const tpu_ir_type_t* t = tpu_ir_type(g, xs[k]);
    if (t->rank != t0->rank || t->dtype != t0->dtype) return FAIL(g, "ir: concatenate operand types");
    for (int d = 0; d < t->rank; ++d)
      if (d != dim && t->dims[d] != t0->dims[d]) return FAIL(g, "ir: concatenate shapes");
    p.type.dims[dim] += t->dims[dim];
  }
  return tpu_ir_add_op(g, &p, n, xs);
}
int tpu_ir_pad(tpu_ir_graph_t* g, int x, int pad_value, const int64_t* lo, const int64_t* hi) {
  CHECK_IN(g, x, pad_value);
  const tpu_ir_type_t* tx = tpu_ir_type(g, x);
  if (tpu_ir_type(g, pad_value)->rank != 0 || tpu_ir_type(g, pad_value)->dtype != tx->dtype)
    return FAIL(g, "ir: pad value must be a rank-0 value of the operand's dtype");
  tpu_ir_op_t p = proto_like(TPU_IR_PAD, tx);
  for (int d = 0; d < tx->rank; ++d) {
    p.a[0][d] = lo[d]; p.a[1][d] = hi[d];
    p.type.dims[d] = tx->dims[d] + lo[d] + hi[d];
    if (p.type.dims[d] < 0) return FAIL(g, "ir: pad gives a negative size");
  }
  int in[2] = {x, pad_value};
  return tpu_ir_add_op(g, &p, 2, in);
}
int tpu_ir_dot(tpu_ir_graph_t* g, int lhs, int rhs, int nb, int out_dtype) {
  CHECK_IN(g, lhs, rhs);
  const tpu_ir_type_t *tl = tpu_ir_type(g, lhs), *tr = tpu_ir_type(g, rhs);
  if (tl->rank != nb + 2 || tr->rank != nb + 2) return FAIL(g, "ir: dot_general canonical rank");
  for (int d = 0; d < nb; ++d) if (tl->dims[d] != tr->dims[d]) return FAIL(g, "ir: dot batch dims differ");
  if (tl->dims[nb + 1] != tr->dims[nb]) return FAIL(g, "ir: dot contracting dims differ");
  if (tl->dtype != tr->dtype) return FAIL(g, "ir: dot operand dtypes differ");
  tpu_ir_op_t p = proto_like(TPU_IR_DOT, tl);
  p.type.dtype = out_dtype; p.i0 = nb; p.prec = g->precision;
  p.type.dims[nb + 1] = tr->dims[nb + 1];
  int in[2] = {lhs, rhs};
  return tpu_ir_add_op(g, &p, 2, in);
}
int tpu_ir_reduce(tpu_ir_graph_t* g, int monoid, int x, const int64_t* flags) {
  CHECK_IN(g, x);
  const tpu_ir_type_t* tx = tpu_ir_type(g, x);
  tpu_ir_op_t p = proto_like(TPU_IR_REDUCE, tx);
  p.i0 = monoid; p.type.rank = 0;
  for (int d = 0; d < tx->rank; ++d) {
    p.a[0][d] = flags[d] ? 1 : 0;
    if (!flags[d]) p.type.dims[p.type.rank++] = tx->dims[d];
  }
  for (int d = p.type.rank; d < TPU_MAX_DIMS; ++d) p.type.dims[d] = 0;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_argreduce(tpu_ir_graph_t* g, int is_min, int x, int dim) {
  CHECK_IN(g, x);
  const tpu_ir_type_t* tx = tpu_ir_type(g, x);
  if (dim < 0 || dim >= tx->rank) return FAIL(g, "ir: argreduce dim out of range");
  tpu_ir_op_t p = proto_like(TPU_IR_ARGREDUCE, tx);
  p.type.dtype = TPU_DTYPE_I64; p.i0 = is_min; p.i1 = dim; p.type.rank = 0;
  for (int d = 0; d < tx->rank; ++d) if (d != dim) p.type.dims[p.type.rank++] = tx->dims[d];
  for (int d = p.type.rank; d < TPU_MAX_DIMS; ++d) p.type.dims[d] = 0;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_cumulative(tpu_ir_graph_t* g, int monoid, int x, int dim) {
  CHECK_IN(g, x);
  if (dim < 0 || dim >= tpu_ir_type(g, x)->rank) return FAIL(g, "ir: cumulative dim out of range");
  tpu_ir_op_t p = proto_like(TPU_IR_CUMULATIVE, tpu_ir_type(g, x));
  p.i0 = monoid; p.i1 = dim;
  return tpu_ir_add_op(g, &p, 1, &x);
}
int tpu_ir_gather(tpu_ir_graph_t* g, int x, int index, int dim) {
  CHECK_IN(g, x, index);
  const tpu_ir_type_t *tx = tpu_ir_type(g, x), *ti = tpu_ir_type(g, index);
  if (ti->dtype != TPU_DTYPE_I64 || ti->rank != tx->rank || dim < 0 || (dim >= tx->rank && tx->rank))
    return FAIL(g, "ir: gather operand types");
  tpu_ir_op_t p = proto_like(TPU_IR_GATHER, ti);
  p.type.dtype = tx->dtype; p.i0 = dim;
  int in[2] = {x, index};
  return tpu_ir_add_op(g, &p, 2, in);
}
int tpu_ir_index_select(tpu_ir_graph_t* g, int x, int index, int dim) {
  CHECK_IN(g, x, index);
  const tpu_ir_type_t *tx = tpu_ir_type(g, x), *ti = tpu_ir_type(g, index);
  if (ti->dtype != TPU_DTYPE_I64 || ti->rank != 1 || dim < 0 || dim >= tx->rank)
    return FAIL(g, "ir: index_select operand types");
  tpu_ir_op_t p = proto_like(TPU_IR_INDEX_SELECT, tx);
  p.i0 = dim; p.type.dims[dim] = ti->dims[0];
  int in[2] = {x, index};
  return tpu_ir_add_op(g, &p, 2, in);
}
int tpu_ir_scatter(tpu_ir_graph_t* g, int x, int index, int src, int dim, int add) {
  CHECK_IN(g, x, index, src);
  const tpu_ir_type_t *tx = tpu_ir_type(g, x), *ti = tpu_ir_type(g, index), *ts = tpu_ir_type(g, src);
  if (ti->dtype != TPU_DTYPE_I64 || ti->rank != tx->rank || ts->dtype != tx->dtype ||
      ts->rank != tx->rank || dim < 0 || (dim >= tx->rank && tx->rank))
    return FAIL(g, "ir: scatter operand types");
  tpu_ir_op_t p = proto_like(TPU_IR_SCATTER, tx);
  p.i0 = dim; p.i1 = add;
  int in[3] = {x, index, src};
  return tpu_ir_add_op(g, &p, 3, in);
}
int tpu_ir_index_put(tpu_ir_graph_t* g, int x, int values, int n_idx, const int* idx,
                     const int64_t* idx_dims, int accumulate) {
  if (g->status) return -1;
  if (n_idx < 1 || n_idx + 2 > 2 + TPU_MAX_DIMS) return FAIL(g, "ir: index_put index count");
  int in[2 + TPU_MAX_DIMS];
  in[0] = x; in[1] = values;
  tpu_ir_op_t p = proto_like(TPU_IR_INDEX_PUT, tpu_ir_type(g, x));
  p.i1 = accumulate;
  for (int j = 0; j < n_idx; ++j) { in[2 + j] = idx[j]; p.a[0][j] = idx_dims[j]; }
  return tpu_ir_add_op(g, &p, 2 + n_idx, in);
}
int tpu_ir_rng(tpu_ir_graph_t* g, int dtype, int rank, const int64_t* dims, int seed, int offset,
               int normal) {
  CHECK_IN(g, seed, offset);
  tpu_ir_op_t p = proto_of(TPU_IR_RNG, dtype, rank, dims);
  p.i0 = normal;
  int in[2] = {seed, offset};
  return tpu_ir_add_op(g, &p, 2, in);
}
int tpu_ir_sort(tpu_ir_graph_t* g, int x, int dim, int descending, int indices) {
  CHECK_IN(g, x);
  const tpu_ir_type_t* tx = tpu_ir_type(g, x);
  if (dim < 0 || (dim >= tx->rank && tx->rank)) return FAIL(g, "ir: sort dim out of range");
  tpu_ir_op_t p = proto_like(indices ? TPU_IR_ARGSORT : TPU_IR_SORT, tx);
  if (indices) p.type.dtype = TPU_DTYPE_I64;
  p.i0 = dim; p.i1 = descending;
  return tpu_ir_add_op(g, &p, 1, &x);
}
void tpu_ir_output(tpu_ir_graph_t* g, int v) {
  if (g->status) return;
  if (!valid(g, v)) { FAIL(g, "ir: invalid output"); return; }
  if (g->n_outputs >= TPU_IR_MAX_GRAPH_OUTPUTS) { FAIL(g, "ir: too many outputs"); return; }
  g->outputs[g->n_outputs++] = v;
}

/* ---- verifier: re-checks the invariants the builders establish, so passes that
 * rewrite graphs (compiler/) can run it after each rewrite. */
tpu_status_t tpu_ir_verify(const tpu_ir_graph_t* g) {
  if (g->status) return TPU_ERR(INTERNAL, "ir: graph carries an error: %s", tpu_status_message(g->status));
  int np = 0, ns = 0;
  for (int v = 0; v < g->n_ops; ++v) {
    const tpu_ir_op_t* op = &g->ops[v];
    if (op->opcode < 0 || op->opcode >= TPU_IR_OPCODE_COUNT) return TPU_ERR(INTERNAL, "ir: %%%d bad opcode", v);
    if (op->type.dtype < 0 || op->type.dtype >= TPU_DTYPE_COUNT) return TPU_ERR(INTERNAL, "ir: %%%d bad dtype", v);
    if (op->type.rank < 0 || op->type.rank > TPU_MAX_DIMS) return TPU_ERR(INTERNAL, "ir: %%%d bad rank", v);
    for (int k = 0; k < op->n_in; ++k) {
      int u = g->operands[op->in_off + k];
      if (u < 0 || u >= v) return TPU_ERR(INTERNAL, "ir: %%%d uses %%%d out of order", v, u);
    }
    if (op->opcode == TPU_IR_PARAM && op->i0 != np++) return TPU_ERR(INTERNAL, "ir: parameter numbering");
    if (op->opcode == TPU_IR_SCALAR && op->i0 != ns++) return TPU_ERR(INTERNAL, "ir: scalar numbering");
    if (op->opcode == TPU_IR_SCALAR && op->type.rank != 0) return TPU_ERR(INTERNAL, "ir: scalar rank");
    if (tpu_ir_is_elementwise(op->opcode) && op->opcode != TPU_IR_CONVERT) {
      for (int k = 0; k < op->n_in; ++k) {
        const tpu_ir_type_t* t = &g->ops[g->operands[op->in_off + k]].type;
        if (!tpu_ir_same_shape(t, &op->type)) return TPU_ERR(INTERNAL, "ir: %%%d elementwise shape mismatch", v);
      }
    }
    if (op->opcode == TPU_IR_CONVERT && !tpu_ir_same_shape(&g->ops[g->operands[op->in_off]].type, &op->type))
      return TPU_ERR(INTERNAL, "ir: %%%d convert changes shape", v);
    if (op->opcode == TPU_IR_RESHAPE &&
        tpu_ir_numel(&g->ops[g->operands[op->in_off]].type) != tpu_ir_numel(&op->type))
      return TPU_ERR(INTERNAL, "ir: %%%d reshape element count", v);
  }
  if (np != g->n_params || ns != g->n_scalars) return TPU_ERR(INTERNAL, "ir: parameter count");
  if (g->n_outputs < 1) return TPU_ERR(INTERNAL, "ir: graph has no outputs");
  for (int k = 0; k < g->n_outputs; ++k)
    if (g->outputs[k] < 0 || g->outputs[k] >= g->n_ops) return TPU_ERR(INTERNAL, "ir: bad output");
  return TPU_OK;
}

/* FNV-1a over the ops (POD, zeroed padding), operands and outputs. */
static uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const unsigned char* c = p;
  for (size_t i = 0; i < n; ++i) { h ^= c[i]; h *= 1099511628211ull; }
  return h;
}
uint64_t tpu_ir_hash(const tpu_ir_graph_t* g) {
  uint64_t h = 1469598103934665603ull;
  h = fnv(h, g->ops, (size_t)g->n_ops * sizeof(tpu_ir_op_t));
  h = fnv(h, g->operands, (size_t)g->n_operands * sizeof(int32_t));
  h = fnv(h, g->outputs, (size_t)g->n_outputs * sizeof(int32_t));
  return h;
}
int tpu_ir_equal(const tpu_ir_graph_t* a, const tpu_ir_graph_t* b) {
  return a->n_ops == b->n_ops && a->n_operands == b->n_operands && a->n_outputs == b->n_outputs &&
         !memcmp(a->ops, b->ops, (size_t)a->n_ops * sizeof(tpu_ir_op_t)) &&
         !memcmp(a->operands, b->operands, (size_t)a->n_operands * sizeof(int32_t)) &&
         !memcmp(a->outputs, b->outputs, (size_t)a->n_outputs * sizeof(int32_t));
}

/* ---- printer: "%3 = add(%1, %2) : f32[4,8]" one op per line. */
typedef struct { char* buf; size_t cap, len; } sbuf_t;
static void sb_printf(sbuf_t* s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t* s, const char* fmt, ...) {
  va_list ap; va_start(ap, fmt);
  size_t room = s->len < s->cap ? s->cap - s->len : 0;
  int n = vsnprintf(room ? s->buf + s->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) s->len += (size_t)n;
}
static const char* short_dtype(int dt) {
  static const char* const n[TPU_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "ui8", "i1"};
  return (dt >= 0 && dt < TPU_DTYPE_COUNT) ? n[dt] : "?";
}
static void sb_type(sbuf_t* s, const tpu_ir_type_t* t) {
  sb_printf(s, "%s[", short_dtype(t->dtype));
  for (int d = 0; d < t->rank; ++d) sb_printf(s, d ? ",%lld" : "%lld", (long long)t->dims[d]);
  sb_printf(s, "]");
}
static void sb_ints(sbuf_t* s, const char* name, const int64_t* a, int n) {
  sb_printf(s, " %s=[", name);
  for (int d = 0; d < n; ++d) sb_printf(s, d ? ",%lld" : "%lld", (long long)a[d]);
  sb_printf(s, "]");
}
size_t tpu_ir_print(const tpu_ir_graph_t* g, char* buf, size_t cap) {
  sbuf_t s = {buf, cap, 0};
  if (cap) buf[0] = 0;
  for (int v = 0; v < g->n_ops; ++v) {
    const tpu_ir_op_t* op = &g->ops[v];
    sb_printf(&s, "%%%d = %s(", v, tpu_ir_opcode_name(op->opcode));
    for (int k = 0; k < op->n_in; ++k) sb_printf(&s, k ? ", %%%d" : "%%%d", g->operands[op->in_off + k]);
    sb_printf(&s, ")");
    int in_rank = op->n_in ? g->ops[g->operands[op->in_off]].type.rank : 0;
    switch (op->opcode) {
      case TPU_IR_PARAM: case TPU_IR_SCALAR: sb_printf(&s, " index=%lld", (long long)op->i0); break;
      case TPU_IR_CONSTANT:
        if (tpu_dtype_is_floating(op->type.dtype)) sb_printf(&s, " value=%.17g", op->f0);
        else sb_printf(&s, " value=%lld", (long long)op->i0);
        break;
      case TPU_IR_COMPARE: {
        static const char* const c[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
        sb_printf(&s, " direction=%s", (op->i0 >= 0 && op->i0 < 6) ? c[op->i0] : "?"); break;
      }
      case TPU_IR_BROADCAST: sb_ints(&s, "dims", op->a[0], in_rank); break;
      case TPU_IR_TRANSPOSE: sb_ints(&s, "permutation", op->a[0], op->type.rank); break;
      case TPU_IR_SLICE:
        sb_ints(&s, "start", op->a[0], in_rank); sb_ints(&s, "limit", op->a[1], in_rank);
        sb_ints(&s, "stride", op->a[2], in_rank); break;
      case TPU_IR_REVERSE: sb_ints(&s, "dims", op->a[0], op->type.rank); break;
      case TPU_IR_PAD: sb_ints(&s, "low", op->a[0], in_rank); sb_ints(&s, "high", op->a[1], in_rank); break;
      case TPU_IR_REDUCE: {
        static const char* const m[] = {"sum", "prod", "max", "min", "and", "or", "nanmax"};
        sb_printf(&s, " monoid=%s", (op->i0 >= 0 && op->i0 < 7) ? m[op->i0] : "?");
        sb_ints(&s, "dims", op->a[0], in_rank); break;
      }
      case TPU_IR_INDEX_PUT: sb_ints(&s, "indexed_dims", op->a[0], op->n_in - 2);
        sb_printf(&s, " accumulate=%lld", (long long)op->i1); break;
      case TPU_IR_IOTA: case TPU_IR_CONCAT: case TPU_IR_GATHER: case TPU_IR_INDEX_SELECT:
        sb_printf(&s, " dim=%lld", (long long)op->i0); break;
      case TPU_IR_DOT: sb_printf(&s, " batch_dims=%lld", (long long)op->i0); break;
      case TPU_IR_ARGREDUCE: case TPU_IR_CUMULATIVE: case TPU_IR_SCATTER: case TPU_IR_SORT:
      case TPU_IR_ARGSORT: case TPU_IR_RNG:
        sb_printf(&s, " mode=%lld dim=%lld", (long long)op->i0, (long long)op->i1); break;
      default: break;
    }
    if (op->prec > 0 && op->prec < TPU_IR_PRECISION_COUNT)
      sb_printf(&s, " precision=%s", op->prec == TPU_IR_PRECISION_HIGH ? "HIGH" : "DEFAULT");
    sb_printf(&s, " : ");
    sb_type(&s, &op->type);
    sb_printf(&s, "\n");
  }
  sb_printf(&s, "return(");
  for (int k = 0; k < g->n_outputs; ++k) sb_printf(&s, k ? ", %%%d" : "%%%d", g->outputs[k]);
  sb_printf(&s, ")\n");
  if (s.len >= cap && cap >= 4) memcpy(buf + cap - 4, "...", 4);
  return s.len + 1;
}
