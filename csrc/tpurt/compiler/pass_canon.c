/* pass_canon.c — canonicalization and algebraic simplification, exact rewrites only:
 *   view chains: reshape(reshape x) -> reshape x; transpose(transpose x) and
 *     broadcast(broadcast x) compose; identity reshape/transpose/slice/reverse -> x
 *   involutions: neg(neg x), not(not x) -> x; abs(abs x), abs(neg x) -> abs x
 *   identities: x*1, 1*x, x/1, x-(+0), x+(-0) (floats), x+0, x-0, x|0, x^0 (integers) -> x;
 *     max/min/and/or(x, x) -> x; select(p, a, a) -> a; select(constant p, a, b) -> a or b
 *   converts: convert(convert(x, A), dtype(x)) -> x when A holds every value of x exactly
 *     (integer and bool sources only: float round trips would quiet signaling NaNs)
 * Each rewrite yields an existing value of the same type or an equivalent view. Rewrites that
 * replace a value by a differently computed one are made only where every reader is
 * elementwise or an output (tpu_rw_elementwise_readers): a reduce or dot could accumulate in
 * another order on another operand layout. */
#include <stdlib.h>

#include "compiler/compiler.h"
#include "compiler/rewrite.h"

#include <math.h>

/* Does dtype `mid` represent every value of integral/bool dtype `src` exactly? */
static int holds_exactly(int src, int mid) {
  if (src == TPU_DTYPE_BOOL) return 1;
  if (tpu_dtype_is_floating(src)) return 0;
  int bits; /* magnitude bits needed (value range of src) */
  switch (src) {
    case TPU_DTYPE_U8: bits = 8; break;
    case TPU_DTYPE_I8: bits = 7; break;
    case TPU_DTYPE_I16: bits = 15; break;
    case TPU_DTYPE_I32: bits = 31; break;
    default: bits = 63; break;
  }
  int is_signed = src != TPU_DTYPE_U8;
  switch (mid) {
    case TPU_DTYPE_BOOL: return 0;
    case TPU_DTYPE_U8: return !is_signed && bits <= 8;
    case TPU_DTYPE_I8: return bits <= 7 && is_signed;
    case TPU_DTYPE_I16: return bits <= 15;
    case TPU_DTYPE_I32: return bits <= 31;
    case TPU_DTYPE_I64: return 1;
    case TPU_DTYPE_BF16: return bits <= 8;  /* 8 significant bits */
    case TPU_DTYPE_F16: return bits <= 11;
    case TPU_DTYPE_F32: return bits <= 24;
    case TPU_DTYPE_F64: return bits <= 53;
    default: return 0;
  }
}

static int is_const(const tpu_ir_graph_t* g, int v, int want_f_bits, double want_f, int64_t want_i) {
  double f; int64_t i;
  if (tpu_rw_const_of(g, v, &f, &i) < 0) return 0;
  if (!tpu_dtype_is_floating(g->ops[v].type.dtype)) return i == want_i;
  if (want_f_bits) return f == want_f && signbit(f) == signbit(want_f);
  return f == want_f;
}
#define IS_ONE(g, v) is_const(g, v, 0, 1.0, 1)
/* x + c == x for every x only when c is -0.0 (floats) or 0 (integers); x - c when c is +0.0 or 0 */
#define IS_ADD_ZERO(g, v) is_const(g, v, 1, -0.0, 0)
#define IS_SUB_ZERO(g, v) is_const(g, v, 1, 0.0, 0)

/* Returns the new value replacing old op v, or -1 when no rule applies. */
static int simplify(tpu_rw_t* rw, int v, const int32_t* in) {
  const tpu_ir_op_t* op = &rw->g->ops[v];
  tpu_ir_graph_t* ng = &rw->ng;
  int oc = op->opcode, dt = op->type.dtype;
  const tpu_ir_op_t* a = op->n_in > 0 ? &ng->ops[in[0]] : NULL;
  int a0 = a && a->n_in > 0 ? tpu_ir_operand(ng, in[0], 0) : -1;
  int flt = tpu_dtype_is_floating(dt);
  switch (oc) {
    case TPU_IR_CONVERT:
      if (a->type.dtype == dt) return in[0];
      if (a->opcode == TPU_IR_CONVERT && ng->ops[a0].type.dtype == dt && holds_exactly(dt, a->type.dtype))
        return a0;
      return -1;
    case TPU_IR_RESHAPE:
      if (tpu_ir_same_shape(&a->type, &op->type)) return in[0];
      if (a->opcode == TPU_IR_RESHAPE) return tpu_ir_reshape(ng, a0, op->type.rank, op->type.dims);
      return -1;
    case TPU_IR_TRANSPOSE: {
      int64_t perm[TPU_MAX_DIMS];
      for (int d = 0; d < op->type.rank; ++d) perm[d] = op->a[0][d];
      if (a->opcode == TPU_IR_TRANSPOSE) {
        for (int d = 0; d < op->type.rank; ++d) perm[d] = a->a[0][op->a[0][d]];
        return tpu_ir_transpose(ng, a0, perm);
      }
      int ident = 1;
      for (int d = 0; d < op->type.rank; ++d) ident &= perm[d] == d;
      return ident ? in[0] : -1;
    }
    case TPU_IR_BROADCAST: {
      int64_t bd[TPU_MAX_DIMS];
      if (a->opcode == TPU_IR_BROADCAST) {
        int r0 = ng->ops[a0].type.rank;
        for (int i = 0; i < r0; ++i) bd[i] = op->a[0][a->a[0][i]];
        return tpu_ir_broadcast(ng, a0, op->type.rank, op->type.dims, bd);
      }
      if (tpu_ir_same_shape(&a->type, &op->type)) {
        int ident = 1;
        for (int i = 0; i < a->type.rank; ++i) ident &= op->a[0][i] == i;
        if (ident) return in[0];
      }
      return -1;
    }
    case TPU_IR_SLICE: {
      int ident = 1;
      for (int d = 0; d < op->type.rank; ++d)
        ident &= op->a[0][d] == 0 && op->a[1][d] == a->type.dims[d] && op->a[2][d] == 1;
      return ident ? in[0] : -1;
    }
    case TPU_IR_REVERSE: {
      int any = 0;
      for (int d = 0; d < op->type.rank; ++d) any |= op->a[0][d] && op->type.dims[d] > 1;
      return any ? -1 : in[0];
    }
    case TPU_IR_NEG: case TPU_IR_NOT:
      return a->opcode == oc ? a0 : -1;
    case TPU_IR_ABS:
      if (a->opcode == TPU_IR_ABS) return in[0];
      if (a->opcode == TPU_IR_NEG) return tpu_ir_unary(ng, TPU_IR_ABS, a0);
      return -1;
    case TPU_IR_MUL:
      if (IS_ONE(ng, in[1])) return in[0];
      if (IS_ONE(ng, in[0])) return in[1];
      return -1;
    case TPU_IR_DIV:
      return IS_ONE(ng, in[1]) ? in[0] : -1;
    case TPU_IR_ADD:
      if (IS_ADD_ZERO(ng, in[1])) return in[0];
      if (IS_ADD_ZERO(ng, in[0])) return in[1];
      return -1;
    case TPU_IR_SUB:
      return IS_SUB_ZERO(ng, in[1]) ? in[0] : -1;
    case TPU_IR_OR: case TPU_IR_XOR:
      if (flt) return -1;
      if (in[0] == in[1] && oc == TPU_IR_OR) return in[0];
      if (is_const(ng, in[1], 0, 0, 0)) return in[0];
      if (is_const(ng, in[0], 0, 0, 0)) return in[1];
      return -1;
    case TPU_IR_MAX: case TPU_IR_MIN: case TPU_IR_AND:
      return in[0] == in[1] ? in[0] : -1;
    case TPU_IR_SELECT: {
      if (in[1] == in[2]) return in[1];
      double f; int64_t i;
      if (tpu_rw_const_of(ng, in[0], &f, &i) >= 0) return i ? in[1] : in[2];
      return -1;
    }
    default: return -1;
  }
}

tpu_status_t tpu_compiler_canonicalize(tpu_ir_graph_t* g, int* out_changes) { return tpu_pass_canonicalize(g, out_changes, NULL); }

tpu_status_t tpu_pass_canonicalize(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map) {
  *out_changes = 0;
  if (out_map) *out_map = NULL;
  tpu_rw_t rw;
  TPU_RETURN_IF_ERROR(tpu_rw_begin(&rw, g));
  rw.keep_map = out_map;
  uint8_t* ew = tpu_rw_elementwise_readers(g);
  int changes = 0;
  for (int v = 0; v < g->n_ops && !rw.ng.status; ++v) {
    const int32_t* in = tpu_rw_inputs(&rw, v);
    /* rewrites that keep the representation (views with the same strides, a new op of the
     * same kind) are always fine; replacing a value by another needs elementwise readers */
    int oc = g->ops[v].opcode;
    int keeps_layout = oc == TPU_IR_TRANSPOSE || oc == TPU_IR_BROADCAST || oc == TPU_IR_SLICE ||
                       oc == TPU_IR_REVERSE;
    int r = (keeps_layout || (ew && ew[v])) ? simplify(&rw, v, in) : -1;
    if (r >= 0) {
      const tpu_ir_type_t *t0 = &g->ops[v].type, *t1 = &rw.ng.ops[r].type;
      if (t0->dtype != t1->dtype || !tpu_ir_same_shape(t0, t1)) {
        tpu_ir_fail(&rw.ng, TPU_ERR(INTERNAL, "compiler: canonicalize changed the type of %%%d", v));
        break;
      }
      rw.map[v] = r; changes++;
      continue;
    }
    rw.map[v] = tpu_rw_copy(&rw, v);
  }
  free(ew);
  tpu_status_t st = tpu_rw_finish(&rw, g);
  if (st == TPU_OK) *out_changes = changes;
  return st;
}
