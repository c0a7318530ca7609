/* stablehlo.c — prints an IR graph as a StableHLO MLIR module (generic op syntax).
 *
 * Every IR op becomes plain StableHLO ops whose results match the host driver's
 * (drivers/host): composite IR ops (floor_divide, Python-style remainder, guarded
 * integer division, NaN-first argmax, stable NaN-last sort, ...) are expanded here,
 * bf16/f16 math is computed in f32 and rounded once per IR op as the host does, and
 * custom_call targets are expanded by stablehlo_custom.c. Special functions without a
 * StableHLO op (erf, lgamma, asin, ...) use CHLO ops, as jax emits them.
 * Values: %argK for parameters and scalars, %vN for everything else (N counts every
 * printed op, so region values never clash). Errors are sticky on the printer. */
#include "ir/stablehlo_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- text buffer and value table */
void shlo_printf(shlo_t* P, const char* fmt, ...) {
  if (P->st) return;
  for (;;) {
    va_list ap; va_start(ap, fmt);
    size_t room = P->cap - P->len;
    int n = vsnprintf(P->buf ? P->buf + P->len : NULL, P->buf ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { P->st = TPU_ERR(INTERNAL, "stablehlo: format error"); return; }
    if (P->buf && (size_t)n < room) { P->len += (size_t)n; return; }
    size_t cap = P->cap ? P->cap * 2 : 4096;
    while (cap < P->len + (size_t)n + 1) cap *= 2;
    char* b = realloc(P->buf, cap);
    if (!b) { P->st = TPU_ERR(OUT_OF_MEMORY, "stablehlo: out of host memory"); return; }
    P->buf = b; P->cap = cap;
  }
}

int shlo_fail(shlo_t* P, tpu_status_t st) {
  if (!P->st) P->st = st; else tpu_status_free(st);
  return -1;
}

static int new_value(shlo_t* P, const tpu_ir_type_t* t, int arg) {
  if (P->st) return -1;
  if (P->n_vals == P->cap_vals) {
    int cap = P->cap_vals ? P->cap_vals * 2 : 256;
    shlo_val_t* v = realloc(P->vals, (size_t)cap * sizeof(*v));
    if (!v) return shlo_fail(P, TPU_ERR(OUT_OF_MEMORY, "stablehlo: out of host memory"));
    P->vals = v; P->cap_vals = cap;
  }
  shlo_val_t* v = &P->vals[P->n_vals];
  memset(v, 0, sizeof(*v));
  if (t) v->t = *t;
  v->arg = arg;
  return P->n_vals++;
}
const tpu_ir_type_t* shlo_type(shlo_t* P, int v) { return &P->vals[v].t; }

static const char* elem_name(int dt) {
  static const char* const n[TPU_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "ui8", "i1"};
  return (dt >= 0 && dt < TPU_DTYPE_COUNT) ? n[dt] : "?";
}
void shlo_tensor(shlo_t* P, const tpu_ir_type_t* t) {
  shlo_printf(P, "tensor<");
  for (int d = 0; d < t->rank; ++d) shlo_printf(P, "%lldx", (long long)t->dims[d]);
  shlo_printf(P, "%s>", elem_name(t->dtype));
}
void shlo_name(shlo_t* P, int v) {
  if (v < 0) { shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: invalid value")); return; }
  const shlo_val_t* x = &P->vals[v];
  if (x->arg >= 0) shlo_printf(P, "%%arg%d", x->arg);
  else if (x->res_of > 0) shlo_printf(P, "%%m%d#%d", x->res_of - 1, x->res_idx);
  else shlo_printf(P, "%%v%d", v);
}
void shlo_i64s(shlo_t* P, const int64_t* a, int n) {
  shlo_printf(P, "array<i64");
  for (int i = 0; i < n; ++i) shlo_printf(P, i ? ", %lld" : ": %lld", (long long)a[i]);
  shlo_printf(P, ">");
}
void shlo_padding(shlo_t* P, const int64_t (*pad)[2], int n) {
  shlo_printf(P, "padding = dense<[");
  for (int d = 0; d < n; ++d) shlo_printf(P, "%s[%lld, %lld]", d ? ", " : "", (long long)pad[d][0], (long long)pad[d][1]);
  shlo_printf(P, "]> : tensor<%dx2xi64>", n);
}
void shlo_list(shlo_t* P, const int64_t* a, int n) {
  shlo_printf(P, "[");
  for (int i = 0; i < n; ++i) shlo_printf(P, i ? ", %lld" : "%lld", (long long)a[i]);
  shlo_printf(P, "]");
}
tpu_ir_type_t shlo_ty(int dtype, int rank, const int64_t* dims) {
  tpu_ir_type_t t; memset(&t, 0, sizeof(t));
  t.dtype = dtype; t.rank = rank;
  for (int d = 0; d < rank; ++d) t.dims[d] = dims[d];
  return t;
}
tpu_ir_type_t shlo_ty_like(shlo_t* P, int v, int dtype) {
  tpu_ir_type_t t = *shlo_type(P, v);
  t.dtype = dtype;
  return t;
}

/* "%vN = "name"(ins)" — the caller may print attributes/regions, then calls shlo_end. */
int shlo_begin(shlo_t* P, const char* name, int n, const int* in) {
  for (int k = 0; k < n; ++k) if (in[k] < 0) return shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: invalid operand"));
  int r = new_value(P, NULL, -1);
  if (r < 0) return -1;
  shlo_printf(P, "%*s%%v%d = \"%s\"(", P->indent, "", r, name);
  for (int k = 0; k < n; ++k) { if (k) shlo_printf(P, ", "); shlo_name(P, in[k]); }
  shlo_printf(P, ")");
  return r;
}
int shlo_end(shlo_t* P, int r, int n, const int* in, const tpu_ir_type_t* rt) {
  if (r < 0 || P->st) return -1;
  P->vals[r].t = *rt;
  shlo_printf(P, " : (");
  for (int k = 0; k < n; ++k) { if (k) shlo_printf(P, ", "); shlo_tensor(P, shlo_type(P, in[k])); }
  shlo_printf(P, ") -> ");
  shlo_tensor(P, rt);
  shlo_printf(P, "\n");
  return r;
}
/* Multi-result op "%mN:k = ..."; its results are referenced as %mN#0 .. %mN#(k-1). */
int shlo_begin_multi(shlo_t* P, const char* name, int nres, int n, const int* in) {
  for (int k = 0; k < n; ++k) if (in[k] < 0) return shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: invalid operand"));
  int r = new_value(P, NULL, -1);
  for (int k = 1; k < nres; ++k) new_value(P, NULL, -1);
  if (r < 0 || P->st) return -1;
  P->vals[r].multi = nres;
  shlo_printf(P, "%*s%%m%d:%d = \"%s\"(", P->indent, "", r, nres, name);
  for (int k = 0; k < n; ++k) { if (k) shlo_printf(P, ", "); shlo_name(P, in[k]); }
  shlo_printf(P, ")");
  return r;
}
/* Ends a multi-result op: values r..r+nres-1 name its results. */
int shlo_end_multi(shlo_t* P, int r, int nres, int n, const int* in, const tpu_ir_type_t* rts) {
  if (r < 0 || P->st) return -1;
  shlo_printf(P, " : (");
  for (int k = 0; k < n; ++k) { if (k) shlo_printf(P, ", "); shlo_tensor(P, shlo_type(P, in[k])); }
  shlo_printf(P, ") -> (");
  for (int k = 0; k < nres; ++k) {
    if (k) shlo_printf(P, ", ");
    shlo_tensor(P, &rts[k]);
    P->vals[r + k].t = rts[k];
    P->vals[r + k].res_of = r + 1; /* 1-based, 0 = not a multi-result */
    P->vals[r + k].res_idx = k;
  }
  shlo_printf(P, ")\n");
  return r;
}

/* Block arguments of a region: "({\n ^bb0(%vA: t, ...):" */
int shlo_region_begin(shlo_t* P, int n, const int* dtypes) {
  shlo_printf(P, " ({\n%*s^bb0(", P->indent, "");
  int first = -1;
  for (int k = 0; k < n; ++k) {
    tpu_ir_type_t t = shlo_ty(dtypes[k], 0, NULL);
    int v = new_value(P, &t, -1);
    if (v < 0) return -1;
    if (!k) first = v;
    if (k) shlo_printf(P, ", ");
    shlo_printf(P, "%%v%d: ", v);
    shlo_tensor(P, &t);
  }
  shlo_printf(P, "):\n");
  P->indent += 2;
  return first;
}
void shlo_region_end(shlo_t* P, int n, const int* rets) {
  shlo_printf(P, "%*s\"stablehlo.return\"(", P->indent, "");
  for (int k = 0; k < n; ++k) { if (k) shlo_printf(P, ", "); shlo_name(P, rets[k]); }
  shlo_printf(P, ") : (");
  for (int k = 0; k < n; ++k) { if (k) shlo_printf(P, ", "); shlo_tensor(P, shlo_type(P, rets[k])); }
  shlo_printf(P, ") -> ()\n");
  P->indent -= 2;
  shlo_printf(P, "%*s})", P->indent, "");
}

/* ---- small builders */
int shlo_op1(shlo_t* P, const char* name, int x, const tpu_ir_type_t* rt) {
  int r = shlo_begin(P, name, 1, &x);
  return shlo_end(P, r, 1, &x, rt ? rt : shlo_type(P, x));
}
int shlo_un(shlo_t* P, const char* name, int x) { return shlo_op1(P, name, x, NULL); }
int shlo_bin(shlo_t* P, const char* name, int a, int b) {
  int in[2] = {a, b};
  int r = shlo_begin(P, name, 2, in);
  return shlo_end(P, r, 2, in, shlo_type(P, a));
}
int shlo_cmp(shlo_t* P, int dir, int a, int b) {
  static const char* const d[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  if (dir < 0 || dir >= TPU_IR_CMP_COUNT) return shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: bad comparison"));
  int in[2] = {a, b};
  int r = shlo_begin(P, "stablehlo.compare", 2, in);
  if (r < 0) return -1;
  int dt = shlo_type(P, a)->dtype;
  const char* ct = tpu_dtype_is_floating(dt) ? "FLOAT"
                   : (dt == TPU_DTYPE_U8 || dt == TPU_DTYPE_BOOL) ? "UNSIGNED" : "SIGNED";
  shlo_printf(P, " {comparison_direction = #stablehlo<comparison_direction %s>, "
                 "compare_type = #stablehlo<comparison_type %s>}", d[dir], ct);
  tpu_ir_type_t t = shlo_ty_like(P, a, TPU_DTYPE_BOOL);
  return shlo_end(P, r, 2, in, &t);
}
int shlo_select(shlo_t* P, int p, int a, int b) {
  int in[3] = {p, a, b};
  int r = shlo_begin(P, "stablehlo.select", 3, in);
  return shlo_end(P, r, 3, in, shlo_type(P, a));
}
int shlo_convert(shlo_t* P, int x, int dtype) {
  if (x < 0) return -1;
  if (shlo_type(P, x)->dtype == dtype) return x;
  tpu_ir_type_t t = shlo_ty_like(P, x, dtype);
  return shlo_op1(P, "stablehlo.convert", x, &t);
}
/* Splat constant of type t. Floats are written as bit patterns so inf/NaN and bf16 are exact. */
int shlo_const(shlo_t* P, const tpu_ir_type_t* t, double f, int64_t i) {
  int r = new_value(P, NULL, -1);
  if (r < 0) return -1;
  shlo_printf(P, "%*s%%v%d = \"stablehlo.constant\"() {value = dense<", P->indent, "", r);
  switch (t->dtype) {
    case TPU_DTYPE_F32: { float x = (float)f; uint32_t u; memcpy(&u, &x, 4); shlo_printf(P, "0x%08X", u); break; }
    case TPU_DTYPE_F64: { uint64_t u; memcpy(&u, &f, 8); shlo_printf(P, "0x%016llX", (unsigned long long)u); break; }
    case TPU_DTYPE_BF16: shlo_printf(P, "0x%04X", tpu_f32_to_bf16((float)f)); break;
    case TPU_DTYPE_F16: shlo_printf(P, "0x%04X", tpu_f32_to_f16((float)f)); break;
    case TPU_DTYPE_I64: shlo_printf(P, "%lld", (long long)i); break;
    case TPU_DTYPE_I32: shlo_printf(P, "%d", (int32_t)(uint32_t)i); break;
    case TPU_DTYPE_I16: shlo_printf(P, "%d", (int16_t)(uint16_t)i); break;
    case TPU_DTYPE_I8: shlo_printf(P, "%d", (int8_t)(uint8_t)i); break;
    case TPU_DTYPE_U8: shlo_printf(P, "%u", (unsigned)(uint8_t)i); break;
    case TPU_DTYPE_BOOL: shlo_printf(P, "%s", i ? "true" : "false"); break;
    default: return shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: bad constant dtype"));
  }
  shlo_printf(P, "> : ");
  shlo_tensor(P, t);
  shlo_printf(P, "} : () -> ");
  shlo_tensor(P, t);
  shlo_printf(P, "\n");
  P->vals[r].t = *t;
  return r;
}
/* Constant with x's shape and the given dtype; value v (floats) or (int64)v. */
int shlo_const_like(shlo_t* P, int x, int dtype, double v) {
  if (x < 0) return -1;
  tpu_ir_type_t t = shlo_ty_like(P, x, dtype);
  return shlo_const(P, &t, v, (int64_t)v);
}
int shlo_scalar_const(shlo_t* P, int dtype, double v) {
  tpu_ir_type_t t = shlo_ty(dtype, 0, NULL);
  return shlo_const(P, &t, v, (int64_t)v);
}
int shlo_bcast(shlo_t* P, int x, int rank, const int64_t* dims, const int64_t* bdims) {
  if (x < 0) return -1;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int64_t bd[TPU_MAX_DIMS];
  for (int i = 0; i < tx->rank; ++i) bd[i] = bdims ? bdims[i] : rank - tx->rank + i;
  tpu_ir_type_t t = shlo_ty(tx->dtype, rank, dims);
  int r = shlo_begin(P, "stablehlo.broadcast_in_dim", 1, &x);
  shlo_printf(P, " {broadcast_dimensions = ");
  shlo_i64s(P, bd, tx->rank);
  shlo_printf(P, "}");
  return shlo_end(P, r, 1, &x, &t);
}
int shlo_bcast_to(shlo_t* P, int x, const tpu_ir_type_t* like, const int64_t* bdims) {
  return shlo_bcast(P, x, like->rank, like->dims, bdims);
}
int shlo_reshape(shlo_t* P, int x, int rank, const int64_t* dims) {
  if (x < 0) return -1;
  tpu_ir_type_t t = shlo_ty(shlo_type(P, x)->dtype, rank, dims);
  return shlo_op1(P, "stablehlo.reshape", x, &t);
}
int shlo_transpose(shlo_t* P, int x, const int64_t* perm) {
  if (x < 0) return -1;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  tpu_ir_type_t t = *tx;
  for (int d = 0; d < tx->rank; ++d) t.dims[d] = tx->dims[perm[d]];
  int r = shlo_begin(P, "stablehlo.transpose", 1, &x);
  shlo_printf(P, " {permutation = ");
  shlo_i64s(P, perm, tx->rank);
  shlo_printf(P, "}");
  return shlo_end(P, r, 1, &x, &t);
}
int shlo_slice(shlo_t* P, int x, const int64_t* start, const int64_t* limit, const int64_t* stride) {
  if (x < 0) return -1;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int64_t one[TPU_MAX_DIMS];
  for (int d = 0; d < TPU_MAX_DIMS; ++d) one[d] = 1;
  if (!stride) stride = one;
  tpu_ir_type_t t = *tx;
  for (int d = 0; d < tx->rank; ++d) t.dims[d] = (limit[d] - start[d] + stride[d] - 1) / stride[d];
  int r = shlo_begin(P, "stablehlo.slice", 1, &x);
  shlo_printf(P, " {start_indices = "); shlo_i64s(P, start, tx->rank);
  shlo_printf(P, ", limit_indices = "); shlo_i64s(P, limit, tx->rank);
  shlo_printf(P, ", strides = "); shlo_i64s(P, stride, tx->rank);
  shlo_printf(P, "}");
  return shlo_end(P, r, 1, &x, &t);
}
/* Slice [lo, hi) of one dim. */
int shlo_slice_dim(shlo_t* P, int x, int dim, int64_t lo, int64_t hi) {
  if (x < 0) return -1;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int64_t s[TPU_MAX_DIMS] = {0}, l[TPU_MAX_DIMS];
  for (int d = 0; d < tx->rank; ++d) l[d] = tx->dims[d];
  s[dim] = lo; l[dim] = hi;
  return shlo_slice(P, x, s, l, NULL);
}
int shlo_concat(shlo_t* P, int n, const int* xs, int dim) {
  for (int k = 0; k < n; ++k) if (xs[k] < 0) return -1;
  if (n == 1) return xs[0];
  tpu_ir_type_t t = *shlo_type(P, xs[0]);
  t.dims[dim] = 0;
  for (int k = 0; k < n; ++k) t.dims[dim] += shlo_type(P, xs[k])->dims[dim];
  int r = shlo_begin(P, "stablehlo.concatenate", n, xs);
  shlo_printf(P, " {dimension = %d : i64}", dim);
  return shlo_end(P, r, n, xs, &t);
}
int shlo_iota(shlo_t* P, const tpu_ir_type_t* t, int dim) {
  int r = shlo_begin(P, "stablehlo.iota", 0, NULL);
  shlo_printf(P, " {iota_dimension = %d : i64}", dim);
  return shlo_end(P, r, 0, NULL, t);
}
int shlo_pad(shlo_t* P, int x, int pv, const int64_t* lo, const int64_t* hi) {
  if (x < 0 || pv < 0) return -1;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int64_t zero[TPU_MAX_DIMS] = {0};
  tpu_ir_type_t t = *tx;
  for (int d = 0; d < tx->rank; ++d) t.dims[d] = tx->dims[d] + lo[d] + hi[d];
  int in[2] = {x, pv};
  int r = shlo_begin(P, "stablehlo.pad", 2, in);
  shlo_printf(P, " {edge_padding_high = "); shlo_i64s(P, hi, tx->rank);
  shlo_printf(P, ", edge_padding_low = "); shlo_i64s(P, lo, tx->rank);
  shlo_printf(P, ", interior_padding = "); shlo_i64s(P, zero, tx->rank);
  shlo_printf(P, "}");
  return shlo_end(P, r, 2, in, &t);
}
/* dot_general with explicit dimension numbers; result type given. */
int shlo_dot(shlo_t* P, int a, int b, int nb, const int64_t* lb, const int64_t* rb, int nc,
             const int64_t* lc, const int64_t* rc, const tpu_ir_type_t* rt) {
  int in[2] = {a, b};
  int r = shlo_begin(P, "stablehlo.dot_general", 2, in);
  shlo_printf(P, " {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = ");
  shlo_list(P, lb, nb);
  shlo_printf(P, ", rhs_batching_dimensions = "); shlo_list(P, rb, nb);
  shlo_printf(P, ", lhs_contracting_dimensions = "); shlo_list(P, lc, nc);
  shlo_printf(P, ", rhs_contracting_dimensions = "); shlo_list(P, rc, nc);
  shlo_printf(P, ">, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]}");
  return shlo_end(P, r, 2, in, rt);
}

/* f32 products under a reduced matmul precision (tpu_ir_precision_t), as the host's GEMM and
 * conv kernels compute them: DEFAULT = bf16(a) * bf16(b); HIGH = hi*hi + hi*lo + lo*hi with
 * hi = bf16(x), lo = bf16(x - hi); f32 accumulation. Other operand dtypes ignore it. */
static int round_bf16(shlo_t* P, int x) { return shlo_convert(P, shlo_convert(P, x, TPU_DTYPE_BF16), TPU_DTYPE_F32); }
int shlo_with_precision(shlo_t* P, int prec, int a, int b, shlo_prod_fn fn, void* ctx) {
  if (a < 0 || b < 0) return -1;
  if (prec == TPU_IR_PRECISION_HIGHEST || shlo_type(P, a)->dtype != TPU_DTYPE_F32 ||
      shlo_type(P, b)->dtype != TPU_DTYPE_F32)
    return fn(P, a, b, ctx);
  int ah = round_bf16(P, a), bh = round_bf16(P, b);
  if (prec != TPU_IR_PRECISION_HIGH) return fn(P, ah, bh, ctx);
  int al = round_bf16(P, shlo_bin(P, "stablehlo.subtract", a, ah));
  int bl = round_bf16(P, shlo_bin(P, "stablehlo.subtract", b, bh));
  int r = fn(P, ah, bh, ctx);
  r = shlo_bin(P, "stablehlo.add", r, fn(P, ah, bl, ctx));
  return shlo_bin(P, "stablehlo.add", r, fn(P, al, bh, ctx));
}

/* ---- monoid regions */
static const char* monoid_op(int m, int dt) {
  int b = dt == TPU_DTYPE_BOOL;
  switch (m) {
    case TPU_IR_MONOID_SUM: return b ? "stablehlo.or" : "stablehlo.add";
    case TPU_IR_MONOID_PROD: return b ? "stablehlo.and" : "stablehlo.multiply";
    case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX: return b ? "stablehlo.or" : "stablehlo.maximum";
    case TPU_IR_MONOID_MIN: return b ? "stablehlo.and" : "stablehlo.minimum";
    case TPU_IR_MONOID_AND: return "stablehlo.and";
    case TPU_IR_MONOID_OR: return "stablehlo.or";
    default: return NULL;
  }
}
/* Lowest / highest value of a dtype (as double for floats, int64 for integers). */
static int64_t int_lo(int dt) {
  switch (dt) {
    case TPU_DTYPE_I32: return INT32_MIN; case TPU_DTYPE_I16: return INT16_MIN;
    case TPU_DTYPE_I8: return INT8_MIN; case TPU_DTYPE_U8: case TPU_DTYPE_BOOL: return 0;
    default: return INT64_MIN;
  }
}
static int64_t int_hi(int dt) {
  switch (dt) {
    case TPU_DTYPE_I32: return INT32_MAX; case TPU_DTYPE_I16: return INT16_MAX;
    case TPU_DTYPE_I8: return INT8_MAX; case TPU_DTYPE_U8: return 255; case TPU_DTYPE_BOOL: return 1;
    default: return INT64_MAX;
  }
}
int shlo_identity(shlo_t* P, int m, int dt) {
  tpu_ir_type_t t = shlo_ty(dt, 0, NULL);
  switch (m) {
    case TPU_IR_MONOID_SUM: case TPU_IR_MONOID_OR: return shlo_const(P, &t, 0, 0);
    case TPU_IR_MONOID_PROD: case TPU_IR_MONOID_AND: return shlo_const(P, &t, 1, 1);
    case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX: return shlo_const(P, &t, -INFINITY, int_lo(dt));
    case TPU_IR_MONOID_MIN: return shlo_const(P, &t, INFINITY, int_hi(dt));
    default: return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: monoid %d", m));
  }
}
/* Region "(a, b) -> monoid(a, b)" for scalars of dtype dt. */
void shlo_monoid_region(shlo_t* P, int m, int dt) {
  int dts[2] = {dt, dt};
  int a = shlo_region_begin(P, 2, dts);
  if (a < 0) return;
  const char* name = monoid_op(m, dt);
  if (!name) { shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: monoid %d", m)); return; }
  int r = shlo_bin(P, name, a, a + 1);
  shlo_region_end(P, 1, &r);
}
/* reduce x over flagged dims with monoid m (x's dtype). */
int shlo_reduce(shlo_t* P, int m, int x, const int64_t* flags) {
  if (x < 0) return -1;
  const tpu_ir_type_t* tx = shlo_type(P, x);
  int dt = tx->dtype;
  int init = shlo_identity(P, m, dt);
  int in[2] = {x, init};
  int64_t dims[TPU_MAX_DIMS]; int nd = 0;
  tpu_ir_type_t t = shlo_ty(dt, 0, NULL);
  for (int d = 0; d < tx->rank; ++d) {
    if (flags[d]) dims[nd++] = d; else t.dims[t.rank++] = tx->dims[d];
  }
  int r = shlo_begin(P, "stablehlo.reduce", 2, in);
  if (r < 0) return -1;
  shlo_monoid_region(P, m, dt);
  shlo_printf(P, " {dimensions = ");
  shlo_i64s(P, dims, nd);
  shlo_printf(P, "}");
  return shlo_end(P, r, 2, in, &t);
}

/* ---- elementwise */
static int is_half(int dt) { return dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16; }
static int unop(shlo_t* P, const char* name, int x) { return shlo_un(P, name, x); }
static int recip(shlo_t* P, int x) { return shlo_bin(P, "stablehlo.divide", shlo_const_like(P, x, shlo_type(P, x)->dtype, 1), x); }

/* Float unary math in x's (f32/f64) type, host semantics. */
static int float_unary(shlo_t* P, int opc, int x) {
  int dt = shlo_type(P, x)->dtype;
  switch (opc) {
    case TPU_IR_EXP: return unop(P, "stablehlo.exponential", x);
    case TPU_IR_EXPM1: return unop(P, "stablehlo.exponential_minus_one", x);
    case TPU_IR_LOG: return unop(P, "stablehlo.log", x);
    case TPU_IR_LOG1P: return unop(P, "stablehlo.log_plus_one", x);
    case TPU_IR_SQRT: return unop(P, "stablehlo.sqrt", x);
    case TPU_IR_RSQRT: return recip(P, unop(P, "stablehlo.sqrt", x)); /* host: 1 / sqrt(x) */
    case TPU_IR_SIN: return unop(P, "stablehlo.sine", x);
    case TPU_IR_COS: return unop(P, "stablehlo.cosine", x);
    case TPU_IR_TAN: return unop(P, "stablehlo.tan", x);
    case TPU_IR_TANH: return unop(P, "stablehlo.tanh", x);
    case TPU_IR_LOGISTIC: return unop(P, "stablehlo.logistic", x);
    case TPU_IR_FLOOR: return unop(P, "stablehlo.floor", x);
    case TPU_IR_CEIL: return unop(P, "stablehlo.ceil", x);
    case TPU_IR_ROUND_EVEN: return unop(P, "stablehlo.round_nearest_even", x);
    case TPU_IR_TRUNC: { /* no StableHLO op: ceil below zero, floor above */
      int neg = shlo_cmp(P, TPU_IR_CMP_LT, x, shlo_const_like(P, x, dt, 0));
      return shlo_select(P, neg, unop(P, "stablehlo.ceil", x), unop(P, "stablehlo.floor", x));
    }
    case TPU_IR_SIGN: { /* host: (x > 0) - (x < 0), so sign(NaN) = 0 and sign(-0) = +0 */
      int z = shlo_const_like(P, x, dt, 0);
      int pos = shlo_convert(P, shlo_cmp(P, TPU_IR_CMP_GT, x, z), dt);
      int neg = shlo_convert(P, shlo_cmp(P, TPU_IR_CMP_LT, x, z), dt);
      return shlo_bin(P, "stablehlo.subtract", pos, neg);
    }
    case TPU_IR_ERF: return unop(P, "chlo.erf", x);
    case TPU_IR_ERFINV: return unop(P, "chlo.erf_inv", x);
    case TPU_IR_ASIN: return unop(P, "chlo.asin", x);
    case TPU_IR_ACOS: return unop(P, "chlo.acos", x);
    case TPU_IR_ATAN: return unop(P, "chlo.atan", x);
    case TPU_IR_SINH: return unop(P, "chlo.sinh", x);
    case TPU_IR_COSH: return unop(P, "chlo.cosh", x);
    case TPU_IR_ASINH: return unop(P, "chlo.asinh", x);
    case TPU_IR_ACOSH: return unop(P, "chlo.acosh", x);
    case TPU_IR_ATANH: return unop(P, "chlo.atanh", x);
    case TPU_IR_LGAMMA: return unop(P, "chlo.lgamma", x);
    case TPU_IR_DIGAMMA: return unop(P, "chlo.digamma", x);
    case TPU_IR_RECIPROCAL: return recip(P, x);
    default: return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: no float form for %s", tpu_ir_opcode_name(opc)));
  }
}
/* Float binary math in a's (f32/f64) type, host semantics. */
static int float_binary(shlo_t* P, int opc, int a, int b) {
  int dt = shlo_type(P, a)->dtype;
  switch (opc) {
    case TPU_IR_ADD: return shlo_bin(P, "stablehlo.add", a, b);
    case TPU_IR_SUB: return shlo_bin(P, "stablehlo.subtract", a, b);
    case TPU_IR_MUL: return shlo_bin(P, "stablehlo.multiply", a, b);
    case TPU_IR_DIV: return shlo_bin(P, "stablehlo.divide", a, b);
    case TPU_IR_FMOD: return shlo_bin(P, "stablehlo.remainder", a, b);
    case TPU_IR_POW: return shlo_bin(P, "stablehlo.power", a, b);
    case TPU_IR_ATAN2: return shlo_bin(P, "stablehlo.atan2", a, b);
    case TPU_IR_FLOOR_DIV: return unop(P, "stablehlo.floor", shlo_bin(P, "stablehlo.divide", a, b));
    case TPU_IR_REM: { /* m = fmod(a, b); m != 0 && (m < 0) != (b < 0) ? m + b : m */
      int m = shlo_bin(P, "stablehlo.remainder", a, b);
      int z = shlo_const_like(P, a, dt, 0);
      int fix = shlo_bin(P, "stablehlo.and", shlo_cmp(P, TPU_IR_CMP_NE, m, z),
                         shlo_cmp(P, TPU_IR_CMP_NE, shlo_cmp(P, TPU_IR_CMP_LT, m, z), shlo_cmp(P, TPU_IR_CMP_LT, b, z)));
      return shlo_select(P, fix, shlo_bin(P, "stablehlo.add", m, b), m);
    }
    default: return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: no float form for %s", tpu_ir_opcode_name(opc)));
  }
}
/* Integer binary ops with the host's guards (x / 0 = 0, x % 0 = 0, floor division). */
static int int_binary(shlo_t* P, int opc, int a, int b) {
  int dt = shlo_type(P, a)->dtype;
  int z = -1, zero_b = -1, safe_b = -1;
  if (opc == TPU_IR_DIV || opc == TPU_IR_FMOD || opc == TPU_IR_REM || opc == TPU_IR_FLOOR_DIV) {
    z = shlo_const_like(P, a, dt, 0);
    zero_b = shlo_cmp(P, TPU_IR_CMP_EQ, b, z);
    safe_b = shlo_select(P, zero_b, shlo_const_like(P, a, dt, 1), b);
  }
  switch (opc) {
    case TPU_IR_ADD: return shlo_bin(P, "stablehlo.add", a, b);
    case TPU_IR_SUB: return shlo_bin(P, "stablehlo.subtract", a, b);
    case TPU_IR_MUL: return shlo_bin(P, "stablehlo.multiply", a, b);
    case TPU_IR_POW: return shlo_bin(P, "stablehlo.power", a, b);
    case TPU_IR_MAX: return shlo_bin(P, "stablehlo.maximum", a, b);
    case TPU_IR_MIN: return shlo_bin(P, "stablehlo.minimum", a, b);
    case TPU_IR_AND: return shlo_bin(P, "stablehlo.and", a, b);
    case TPU_IR_OR: return shlo_bin(P, "stablehlo.or", a, b);
    case TPU_IR_XOR: return shlo_bin(P, "stablehlo.xor", a, b);
    case TPU_IR_SHL: return shlo_bin(P, "stablehlo.shift_left", a, b);
    case TPU_IR_SHR: /* u8 values are non-negative in the host's int64 registers: logical shift */
      return shlo_bin(P, dt == TPU_DTYPE_U8 ? "stablehlo.shift_right_logical" : "stablehlo.shift_right_arithmetic", a, b);
    case TPU_IR_DIV: return shlo_select(P, zero_b, z, shlo_bin(P, "stablehlo.divide", a, safe_b));
    case TPU_IR_FMOD: return shlo_select(P, zero_b, z, shlo_bin(P, "stablehlo.remainder", a, safe_b));
    case TPU_IR_REM: case TPU_IR_FLOOR_DIV: {
      int q = shlo_bin(P, "stablehlo.divide", a, safe_b);
      int m = shlo_bin(P, "stablehlo.remainder", a, safe_b);
      int sgn = shlo_cmp(P, TPU_IR_CMP_NE, shlo_cmp(P, TPU_IR_CMP_LT, m, z), shlo_cmp(P, TPU_IR_CMP_LT, safe_b, z));
      int fix = shlo_bin(P, "stablehlo.and", shlo_cmp(P, TPU_IR_CMP_NE, m, z), sgn);
      int r = opc == TPU_IR_REM ? shlo_select(P, fix, shlo_bin(P, "stablehlo.add", m, safe_b), m)
                                : shlo_select(P, fix, shlo_bin(P, "stablehlo.subtract", q, shlo_const_like(P, a, dt, 1)), q);
      return shlo_select(P, zero_b, z, r);
    }
    default: return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: no integer form for %s", tpu_ir_opcode_name(opc)));
  }
}

/* CONVERT with host semantics: to bool is "!= 0"; float -> integer truncates through int64
 * (then wraps to narrower types); integer/f64 -> bf16/f16 rounds through f32. */
int shlo_convert_host(shlo_t* P, int x, int to) {
  if (x < 0) return -1;
  int from = shlo_type(P, x)->dtype;
  if (from == to) return x;
  if (to == TPU_DTYPE_BOOL) return shlo_cmp(P, TPU_IR_CMP_NE, x, shlo_const_like(P, x, from, 0));
  if (tpu_dtype_is_floating(from) && !tpu_dtype_is_floating(to)) {
    int i = shlo_convert(P, is_half(from) ? shlo_convert(P, x, TPU_DTYPE_F32) : x, TPU_DTYPE_I64);
    return shlo_convert(P, i, to);
  }
  if (is_half(to) && from != TPU_DTYPE_F32 && from != TPU_DTYPE_BF16 && from != TPU_DTYPE_F16)
    return shlo_convert(P, shlo_convert(P, x, TPU_DTYPE_F32), to);
  return shlo_convert(P, x, to);
}

static int elementwise(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  int opc = op->opcode, odt = op->type.dtype;
  int idt = n ? shlo_type(P, in[0])->dtype : odt;
  int fl = tpu_dtype_is_floating(idt), bl = idt == TPU_DTYPE_BOOL;
  switch (opc) {
    case TPU_IR_CONVERT: return shlo_convert_host(P, in[0], odt);
    case TPU_IR_COMPARE: return shlo_cmp(P, (int)op->i0, in[0], in[1]);
    case TPU_IR_SELECT: return shlo_select(P, in[0], in[1], in[2]);
    case TPU_IR_CLAMP: { /* host: NaN x stays NaN; comparisons with NaN bounds are false */
      int v = shlo_select(P, shlo_cmp(P, TPU_IR_CMP_LT, in[1], in[0]), in[0], in[1]);
      return shlo_select(P, shlo_cmp(P, TPU_IR_CMP_GT, v, in[2]), in[2], v);
    }
    case TPU_IR_IS_FINITE:
      if (!fl) return shlo_const_like(P, in[0], TPU_DTYPE_BOOL, 1);
      return shlo_op1(P, "stablehlo.is_finite", in[0], &op->type);
    case TPU_IR_IS_NAN:
      if (!fl) return shlo_const_like(P, in[0], TPU_DTYPE_BOOL, 0);
      return shlo_cmp(P, TPU_IR_CMP_NE, in[0], in[0]);
    case TPU_IR_IS_INF:
      if (!fl) return shlo_const_like(P, in[0], TPU_DTYPE_BOOL, 0);
      return shlo_cmp(P, TPU_IR_CMP_EQ, unop(P, "stablehlo.abs", in[0]), shlo_const_like(P, in[0], idt, INFINITY));
    case TPU_IR_NEG: return unop(P, "stablehlo.negate", in[0]);
    case TPU_IR_ABS: return unop(P, "stablehlo.abs", in[0]);
    case TPU_IR_NOT: return unop(P, "stablehlo.not", in[0]);
    default: break;
  }
  if (bl) { /* bool arithmetic as the host: computed as 0/1 then "!= 0" */
    switch (opc) {
      case TPU_IR_AND: case TPU_IR_MUL: case TPU_IR_MIN: return shlo_bin(P, "stablehlo.and", in[0], in[1]);
      case TPU_IR_OR: case TPU_IR_ADD: case TPU_IR_MAX: return shlo_bin(P, "stablehlo.or", in[0], in[1]);
      case TPU_IR_XOR: case TPU_IR_SUB: return shlo_bin(P, "stablehlo.xor", in[0], in[1]);
      default: return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: %s on bool", tpu_ir_opcode_name(opc)));
    }
  }
  if (!fl) {
    if (opc == TPU_IR_SIGN) /* no unsigned sign in StableHLO */
      return idt == TPU_DTYPE_U8 ? shlo_convert(P, shlo_cmp(P, TPU_IR_CMP_NE, in[0], shlo_const_like(P, in[0], idt, 0)), idt)
                                 : unop(P, "stablehlo.sign", in[0]);
    if (n == 2) return int_binary(P, opc, in[0], in[1]);
    return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: %s on integers", tpu_ir_opcode_name(opc)));
  }
  if (opc == TPU_IR_MAX) return shlo_bin(P, "stablehlo.maximum", in[0], in[1]); /* NaN-propagating, exact */
  if (opc == TPU_IR_MIN) return shlo_bin(P, "stablehlo.minimum", in[0], in[1]);
  /* float math: bf16/f16 computed in f32 and rounded once, as the host */
  int cdt = is_half(idt) ? TPU_DTYPE_F32 : idt;
  int a = shlo_convert(P, in[0], cdt), r;
  if (n == 1) r = float_unary(P, opc, a);
  else r = float_binary(P, opc, a, shlo_convert(P, in[1], cdt));
  return shlo_convert(P, r, odt);
}

/* canonical IR dot: [B..., M, K] x [B..., K, N] */
typedef struct { int nb; tpu_ir_type_t rt; } dot_ctx_t;
static int canon_dot(shlo_t* P, int a, int b, void* ctx) {
  const dot_ctx_t* c = ctx;
  int64_t bd[TPU_MAX_DIMS], lc = c->nb + 1, rc = c->nb;
  for (int d = 0; d < c->nb; ++d) bd[d] = d;
  return shlo_dot(P, a, b, c->nb, bd, bd, 1, &lc, &rc, &c->rt);
}

/* ---- the per-op dispatcher */
static int print_op(shlo_t* P, const tpu_ir_graph_t* g, int v) {
  const tpu_ir_op_t* op = &g->ops[v];
  int in[2 + TPU_MAX_DIMS + 16];
  int n = op->n_in;
  if (n > TPU_ARRAY_LEN(in)) return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: too many operands"));
  for (int k = 0; k < n; ++k) in[k] = P->map[tpu_ir_operand(g, v, k)];
  const tpu_ir_type_t* t = &op->type;
  const tpu_ir_type_t* t0 = n ? shlo_type(P, in[0]) : NULL;
  if (tpu_ir_is_elementwise(op->opcode)) return elementwise(P, op, n, in);
  switch (op->opcode) {
    case TPU_IR_CONSTANT: return shlo_const(P, t, op->f0, op->i0);
    case TPU_IR_IOTA: return shlo_iota(P, t, (int)op->i0);
    case TPU_IR_BROADCAST: return shlo_bcast(P, in[0], t->rank, t->dims, op->a[0]);
    case TPU_IR_RESHAPE: return shlo_reshape(P, in[0], t->rank, t->dims);
    case TPU_IR_TRANSPOSE: return shlo_transpose(P, in[0], op->a[0]);
    case TPU_IR_SLICE: return shlo_slice(P, in[0], op->a[0], op->a[1], op->a[2]);
    case TPU_IR_REVERSE: {
      int64_t dims[TPU_MAX_DIMS]; int nd = 0;
      for (int d = 0; d < t->rank; ++d) if (op->a[0][d]) dims[nd++] = d;
      if (!nd) return in[0];
      int r = shlo_begin(P, "stablehlo.reverse", 1, in);
      shlo_printf(P, " {dimensions = "); shlo_i64s(P, dims, nd); shlo_printf(P, "}");
      return shlo_end(P, r, 1, in, t);
    }
    case TPU_IR_CONCAT: return shlo_concat(P, n, in, (int)op->i0);
    case TPU_IR_PAD: return shlo_pad(P, in[0], in[1], op->a[0], op->a[1]);
    case TPU_IR_DOT: {
      int dt = t->dtype;
      /* bf16/f16 products accumulate in f32 and round once, as the host's GEMM */
      int cdt = is_half(dt) || is_half(t0->dtype) ? TPU_DTYPE_F32 : dt;
      dot_ctx_t c = {(int)op->i0, *t};
      c.rt.dtype = cdt;
      int a = shlo_convert(P, in[0], cdt), b = shlo_convert(P, in[1], cdt);
      if (t0->dtype != TPU_DTYPE_F32) return shlo_convert(P, canon_dot(P, a, b, &c), dt);
      return shlo_convert(P, shlo_with_precision(P, op->prec, a, b, canon_dot, &c), dt);
    }
    case TPU_IR_REDUCE: {
      int m = (int)op->i0, dt = t0->dtype, x = in[0];
      if ((m == TPU_IR_MONOID_AND || m == TPU_IR_MONOID_OR) && dt != TPU_DTYPE_BOOL) /* host: (a != 0) && ... */
        return shlo_convert_host(P, shlo_reduce(P, m, shlo_convert_host(P, x, TPU_DTYPE_BOOL), op->a[0]), dt);
      if (is_half(dt) && (m == TPU_IR_MONOID_SUM || m == TPU_IR_MONOID_PROD)) /* f32 accumulation */
        return shlo_convert(P, shlo_reduce(P, m, shlo_convert(P, x, TPU_DTYPE_F32), op->a[0]), dt);
      return shlo_reduce(P, m, x, op->a[0]);
    }
    default: return shlo_print_other(P, g, v, in); /* stablehlo_ops.c */
  }
}

tpu_status_t tpu_ir_stablehlo_print(const tpu_ir_graph_t* g, const char* func_name, char** out_text) {
  if (!out_text) return TPU_ERR(INVALID_ARGUMENT, "stablehlo: out_text is NULL");
  *out_text = NULL;
  tpu_status_t vs = tpu_ir_verify(g);
  if (vs) {
    tpu_status_t e = TPU_ERR(INVALID_ARGUMENT, "stablehlo: %s", tpu_status_message(vs));
    tpu_status_free(vs);
    return e;
  }
  shlo_t P; memset(&P, 0, sizeof(P));
  P.map = malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof(int));
  if (!P.map) return TPU_ERR(OUT_OF_MEMORY, "stablehlo: out of host memory");
  /* arguments: params by index, then scalars by index */
  int np = g->n_params;
  for (int v = 0; v < g->n_ops; ++v) {
    const tpu_ir_op_t* op = &g->ops[v];
    if (op->opcode == TPU_IR_PARAM) P.map[v] = new_value(&P, &op->type, (int)op->i0);
    else if (op->opcode == TPU_IR_SCALAR) P.map[v] = new_value(&P, &op->type, np + (int)op->i0);
  }
  shlo_printf(&P, "module @torch_tpu attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n");
  shlo_printf(&P, "  func.func public @%s(", func_name && *func_name ? func_name : "main");
  for (int a = 0; a < np + g->n_scalars; ++a) {
    for (int v = 0; v < g->n_ops; ++v) {
      const tpu_ir_op_t* op = &g->ops[v];
      int k = op->opcode == TPU_IR_PARAM ? (int)op->i0 : op->opcode == TPU_IR_SCALAR ? np + (int)op->i0 : -1;
      if (k != a) continue;
      shlo_printf(&P, "%s%%arg%d: ", a ? ", " : "", a);
      shlo_tensor(&P, &op->type);
    }
  }
  shlo_printf(&P, ") -> (");
  for (int k = 0; k < g->n_outputs; ++k) {
    if (k) shlo_printf(&P, ", ");
    shlo_tensor(&P, &g->ops[g->outputs[k]].type);
  }
  shlo_printf(&P, ") {\n");
  P.indent = 4;
  for (int v = 0; v < g->n_ops && !P.st; ++v) {
    int opc = g->ops[v].opcode;
    if (opc == TPU_IR_PARAM || opc == TPU_IR_SCALAR) continue;
    int r = print_op(&P, g, v);
    if (r < 0 && !P.st) P.st = TPU_ERR(INTERNAL, "stablehlo: %%%d (%s) failed", v, tpu_ir_opcode_name(opc));
    if (!P.st && !tpu_ir_same_shape(shlo_type(&P, r), &g->ops[v].type))
      P.st = TPU_ERR(INTERNAL, "stablehlo: %%%d (%s) printed with the wrong shape", v, tpu_ir_opcode_name(opc));
    if (!P.st && shlo_type(&P, r)->dtype != g->ops[v].type.dtype)
      P.st = TPU_ERR(INTERNAL, "stablehlo: %%%d (%s) printed with the wrong dtype", v, tpu_ir_opcode_name(opc));
    P.map[v] = r;
  }
  if (P.st) { free(P.map); free(P.vals); free(P.buf); return P.st; } /* P.map is not filled past the failed op */
  shlo_printf(&P, "    \"func.return\"(");
  for (int k = 0; k < g->n_outputs; ++k) { if (k) shlo_printf(&P, ", "); shlo_name(&P, P.map[g->outputs[k]]); }
  shlo_printf(&P, ") : (");
  for (int k = 0; k < g->n_outputs; ++k) {
    if (k) shlo_printf(&P, ", ");
    shlo_tensor(&P, &g->ops[g->outputs[k]].type);
  }
  shlo_printf(&P, ") -> ()\n  }\n}\n");
  free(P.map); free(P.vals);
  if (P.st) { free(P.buf); return P.st; }
  *out_text = P.buf;
  return TPU_OK;
}
