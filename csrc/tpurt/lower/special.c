/* special.c — special functions without a StableHLO-style IR opcode, through the custom target
 * SPECIAL (drivers/host/special.c, double math): i0, special_i0e, special_i1, special_i1e,
 * polygamma (n = 0 is digamma, an IR opcode). Output dtype from PyTorch's meta function
 * (integers promote to float); f16/bf16 compute in f32 and round once. */
#include "lower/lower.h"

#define G (&cx->g)

/* out 0 = f(arg xi) of order n */
static tpu_status_t lw_special(tpu_lower_ctx_t* cx, int xi, int f, int64_t n) {
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  if (!o || !tpu_dtype_is_floating(o->dtype))
    return lw_fail(cx, TPU_STATUS_TYPE_ERROR, "%s: expected a floating point output", cx->op_name);
  int dt = o->dtype == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
  int x = lw_input(cx, xi, dt);
  if (x < 0) return TPU_OK;
  tpu_ir_op_t p = {0};
  p.opcode = TPU_IR_CUSTOM;
  p.type = *tpu_ir_type(G, x);
  p.i0 = TPU_IR_CUSTOM_SPECIAL;
  p.i1 = f;
  p.a[0][0] = n;
  return lw_output(cx, 0, tpu_ir_add_op(G, &p, 1, &x));
}
static tpu_status_t lower_i0(tpu_lower_ctx_t* cx) { return lw_special(cx, 0, TPU_IR_SPECIAL_I0, 0); }
static tpu_status_t lower_i0e(tpu_lower_ctx_t* cx) { return lw_special(cx, 0, TPU_IR_SPECIAL_I0E, 0); }
static tpu_status_t lower_i1(tpu_lower_ctx_t* cx) { return lw_special(cx, 0, TPU_IR_SPECIAL_I1, 0); }
static tpu_status_t lower_i1e(tpu_lower_ctx_t* cx) { return lw_special(cx, 0, TPU_IR_SPECIAL_I1E, 0); }
/* polygamma.out(int n, Tensor self, *, out) */
static tpu_status_t lower_polygamma(tpu_lower_ctx_t* cx) {
  int64_t n = lw_int(cx, 0, 0);
  if (n < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "polygamma(n, x) does not support negative n.");
  if (n > 0) return lw_special(cx, 1, TPU_IR_SPECIAL_POLYGAMMA, n);
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  if (!o || !tpu_dtype_is_floating(o->dtype))
    return lw_fail(cx, TPU_STATUS_TYPE_ERROR, "%s: expected a floating point output", cx->op_name);
  return lw_output(cx, 0, tpu_ir_unary(G, TPU_IR_DIGAMMA, lw_input(cx, 1, tpu_opmath_dtype(o->dtype))));
}

TPU_LOWERING_TABLE(tpu_lowerings_special) = {
  {"aten::i0.out", lower_i0}, {"aten::special_i0e.out", lower_i0e},
  {"aten::special_i1.out", lower_i1}, {"aten::special_i1e.out", lower_i1e},
  {"aten::polygamma.out", lower_polygamma},
  TPU_LOWERING_END
};
