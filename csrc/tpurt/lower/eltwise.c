/* eltwise.c — lowerings of elementwise ATen ops (unary, binary, comparison, where,
 * clamp, activations and their backward, fill/copy/masked_fill). Arithmetic runs
 * in the op-math dtype (f32 for f16/bf16) and rounds once to the output dtype,
 * as PyTorch's CPU kernels do. */
#include "lower/lower.h"

#define G (&cx->g)
#define OUT_DT(k) (cx->outs[k].dtype)

/* out = op(self): schema (self, *, out) or functional (self). */
tpu_status_t lw_unary_float(tpu_lower_ctx_t* cx, int opcode) {
  int dt = tpu_opmath_dtype(OUT_DT(0));
  if (!tpu_dtype_is_floating(dt)) {
    if (opcode >= TPU_IR_FLOOR && opcode <= TPU_IR_TRUNC)  /* identity on integers */
      return lw_output(cx, 0, lw_input(cx, 0, dt));
    if (opcode != TPU_IR_NEG && opcode != TPU_IR_ABS && opcode != TPU_IR_SIGN && opcode != TPU_IR_NOT)
      return lw_fail(cx, TPU_STATUS_TYPE_ERROR, "%s: expected a floating point output, got %s", cx->op_name,
                     tpu_dtype_name(OUT_DT(0)));
  }
  int x = lw_input(cx, 0, dt);
  return lw_output(cx, 0, tpu_ir_unary(G, opcode, x));
}

/* out = op(a, b * alpha) in the promoted dtype. */
tpu_status_t lw_binary(tpu_lower_ctx_t* cx, int opcode, int ia, int ib, int ialpha, int out_k) {
  int idx[2] = {ia, ib};
  int common = lw_result_type(cx, 2, idx);
  if (!tpu_can_cast(common, OUT_DT(out_k)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "result type %s can't be cast to the desired output type %s",
                   tpu_dtype_name(common), tpu_dtype_name(OUT_DT(out_k)));
  int dt = tpu_opmath_dtype(common);
  if (opcode == TPU_IR_DIV && !tpu_dtype_is_floating(dt)) dt = TPU_DTYPE_F32;
  if (dt == TPU_DTYPE_BOOL && (opcode == TPU_IR_ADD || opcode == TPU_IR_MUL || opcode == TPU_IR_SUB)) {
    if (opcode == TPU_IR_SUB)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.");
    opcode = opcode == TPU_IR_ADD ? TPU_IR_OR : TPU_IR_AND;
  }
  const tpu_tensor_t* o = &cx->outs[out_k];
  int a = lw_bcast(cx, lw_input(cx, ia, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, ib, dt), o->ndim, o->sizes);
  if (ialpha >= 0 && lw_is_scalar_arg(cx, ialpha)) {
    /* alpha rounds to an f16/bf16 common dtype first, as on the CPU */
    int al = tpu_ir_convert(G, lw_scalar(cx, ialpha, common), dt);
    if (dt == TPU_DTYPE_BOOL) b = tpu_ir_binary(G, TPU_IR_AND, b, lw_bcast_like(cx, al, b));
    else b = tpu_ir_binary(G, TPU_IR_MUL, b, lw_bcast_like(cx, al, b));
  }
  return lw_output(cx, out_k, tpu_ir_binary(G, opcode, a, b));
}

#define BIN(fn, op) static tpu_status_t fn(tpu_lower_ctx_t* cx) { return lw_binary(cx, op, 0, 1, -1, 0); }
/* add/sub's alpha is keyed by whether it is 1 (key_class): alpha == 1 drops the b * alpha pass (b * 1 is b,
 * bit for bit, in every dtype), which the tile executor otherwise runs as a second loop over each tile
 * (x + y of 32x64x128 f32: 40% of the kernel time). _foreach_add/_sub .List/.Tensor key their alpha the same
 * way (foreach.c, KA), so a foreach element reads it as here. */
static int alpha_is_one(tpu_lower_ctx_t* cx) { return lw_key_scalar_is_one(cx, 2); }
static tpu_status_t lower_add(tpu_lower_ctx_t* cx) { return lw_binary(cx, TPU_IR_ADD, 0, 1, alpha_is_one(cx) ? -1 : 2, 0); }
static tpu_status_t lower_sub(tpu_lower_ctx_t* cx) { return lw_binary(cx, TPU_IR_SUB, 0, 1, alpha_is_one(cx) ? -1 : 2, 0); }
static tpu_status_t lower_rsub(tpu_lower_ctx_t* cx) { /* other - self * alpha */
  int idx[2] = {0, 1};
  int dt = tpu_opmath_dtype(lw_result_type(cx, 2, idx));
  const tpu_tensor_t* o = &cx->outs[0];
  int a = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  a = tpu_ir_binary(G, TPU_IR_MUL, a, lw_bcast_like(cx, lw_scalar(cx, 2, dt), a));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_SUB, b, a));
}
BIN(lower_mul, TPU_IR_MUL)
BIN(lower_div, TPU_IR_DIV)
BIN(lower_maximum, TPU_IR_MAX)
BIN(lower_minimum, TPU_IR_MIN)
BIN(lower_atan2, TPU_IR_ATAN2)
BIN(lower_remainder, TPU_IR_REM)
BIN(lower_fmod, TPU_IR_FMOD)
BIN(lower_bitand, TPU_IR_AND)
BIN(lower_bitor, TPU_IR_OR)
BIN(lower_bitxor, TPU_IR_XOR)
BIN(lower_shl, TPU_IR_SHL)
BIN(lower_shr, TPU_IR_SHR)

static tpu_status_t lower_div_mode(tpu_lower_ctx_t* cx) { /* (self, other, *, str? rounding_mode, out) */
  const char* mode = lw_str(cx, 2, NULL);
  if (!mode) return lw_binary(cx, TPU_IR_DIV, 0, 1, -1, 0);
  int idx[2] = {0, 1};
  int common = lw_result_type(cx, 2, idx), dt = tpu_opmath_dtype(common);
  const tpu_tensor_t* o = &cx->outs[0];
  int a = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int r;
  if (!strcmp(mode, "trunc"))
    r = tpu_dtype_is_floating(dt) ? tpu_ir_unary(G, TPU_IR_TRUNC, tpu_ir_binary(G, TPU_IR_DIV, a, b))
                                  : tpu_ir_binary(G, TPU_IR_DIV, a, b);
  else if (!strcmp(mode, "floor")) r = tpu_ir_binary(G, TPU_IR_FLOOR_DIV, a, b);
  else return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'", mode);
  return lw_output(cx, 0, r);
}
static tpu_status_t lower_floor_divide(tpu_lower_ctx_t* cx) {
  return lw_binary(cx, TPU_IR_FLOOR_DIV, 0, 1, -1, 0);
}

/* pow(Tensor, Scalar exponent): the exponent's form is a key scalar (bit 1) because PyTorch's CPU kernel picks
 * the algorithm by it for floating results: 0 -> 1, 1 -> copy, 2 -> x*x, 3 -> x*x*x, -1 -> 1/x,
 * -2 -> 1/(x*x), -0.5 -> 1/sqrt, else pow (0.5, and -0.5 in f16, go through pow there, as the CPU's
 * results at -0 and -inf show). These forms give the CPU's bits (bf16 rounds after each step, as the
 * CPU's bf16 vectors do; f16 does not; bf16 ** -0.5 rounds once, as the CPU's vector body does and its
 * scalar tail does not) in one pass: RMSNorm's backward runs pow(x, 1.0), which went through powf.
 * A _foreach_ element (cx->sub: the list op's key holds no scalar values) and integer results keep
 * the general POW. */
/* v rounded to bf16 and back when the op's dtype is bf16 */
static int lw_round_to(tpu_lower_ctx_t* cx, int v, int dtype, int opmath) {
  return dtype != TPU_DTYPE_BF16 ? v : tpu_ir_convert(G, tpu_ir_convert(G, v, dtype), opmath);
}
/* pow's key holds the exponent's form (key_class), not its value: 2.5 and 1.7 share one executable */
static int32_t pow_exponent_class(int arg, double e) {
  (void)arg;
  static const double special[] = {0, 1, 2, 3, -1, -2, -0.5};
  for (int32_t c = 0; c < (int32_t)(sizeof(special) / sizeof(special[0])); ++c)
    if (e == special[c]) return c + 1;
  return 0; /* any other exponent (NaN included): pow(x, e) with e a runtime parameter */
}
static tpu_status_t lower_pow(tpu_lower_ctx_t* cx) {
  if (!cx->sub && lw_is_tensor(cx, 0) && lw_is_scalar_arg(cx, 1)) {
    int idx[2] = {0, 1};
    int common = lw_result_type(cx, 2, idx), dt = tpu_opmath_dtype(common);
    double e = lw_key_scalar(cx, 1, NAN);
    if (tpu_dtype_is_floating(dt) && tpu_can_cast(common, OUT_DT(0)) &&
        (e == 0 || e == 1 || e == 2 || e == 3 || e == -1 || e == -2 ||
         (e == -0.5 && common != TPU_DTYPE_F16))) {
      const tpu_tensor_t* o = &cx->outs[0];
      int x = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes), r;
      if (e == 0) r = lw_const_like(cx, 1.0, x);
      else if (e == 1) r = x;
      else if (e == -1) r = tpu_ir_unary(G, TPU_IR_RECIPROCAL, x);
      else if (e == -0.5) r = tpu_ir_unary(G, TPU_IR_RSQRT, x);
      else {
        r = tpu_ir_binary(G, TPU_IR_MUL, x, x);
        if (e == 3) r = tpu_ir_binary(G, TPU_IR_MUL, lw_round_to(cx, r, common, dt), x);
        if (e == -2) r = tpu_ir_unary(G, TPU_IR_RECIPROCAL, lw_round_to(cx, r, common, dt));
      }
      return lw_output(cx, 0, r);
    }
  }
  return lw_binary(cx, TPU_IR_POW, 0, 1, -1, 0);
}

static tpu_status_t lw_logical(tpu_lower_ctx_t* cx, int opcode) {
  const tpu_tensor_t* o = &cx->outs[0];
  int z0 = lw_input(cx, 0, -1), z1 = lw_input(cx, 1, -1);
  int a = tpu_ir_compare(G, TPU_IR_CMP_NE, z0, lw_const_like(cx, 0, z0));
  int b = tpu_ir_compare(G, TPU_IR_CMP_NE, z1, lw_const_like(cx, 0, z1));
  a = lw_bcast(cx, a, o->ndim, o->sizes); b = lw_bcast(cx, b, o->ndim, o->sizes);
  return lw_output(cx, 0, tpu_ir_binary(G, opcode, a, b));
}
static tpu_status_t lower_logical_and(tpu_lower_ctx_t* cx) { return lw_logical(cx, TPU_IR_AND); }
static tpu_status_t lower_logical_or(tpu_lower_ctx_t* cx) { return lw_logical(cx, TPU_IR_OR); }
static tpu_status_t lower_logical_xor(tpu_lower_ctx_t* cx) { return lw_logical(cx, TPU_IR_XOR); }
static tpu_status_t lower_logical_not(tpu_lower_ctx_t* cx) {
  int x = lw_input(cx, 0, -1);
  return lw_output(cx, 0, tpu_ir_compare(G, TPU_IR_CMP_EQ, x, lw_const_like(cx, 0, x)));
}
static tpu_status_t lower_bitwise_not(tpu_lower_ctx_t* cx) {
  if (tpu_dtype_is_floating(lw_dtype_of(cx, 0)))
    return lw_fail(cx, TPU_STATUS_TYPE_ERROR, "bitwise_not: not implemented for floating point dtypes");
  return lw_output(cx, 0, tpu_ir_unary(G, TPU_IR_NOT, lw_input(cx, 0, OUT_DT(0))));
}

static tpu_status_t lw_cmp(tpu_lower_ctx_t* cx, int cmp) {
  int idx[2] = {0, 1};
  int dt = lw_result_type(cx, 2, idx);
  const tpu_tensor_t* o = &cx->outs[0];
  int a = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  return lw_output(cx, 0, tpu_ir_compare(G, cmp, a, b));
}
static tpu_status_t lower_eq(tpu_lower_ctx_t* cx) { return lw_cmp(cx, TPU_IR_CMP_EQ); }
static tpu_status_t lower_ne(tpu_lower_ctx_t* cx) { return lw_cmp(cx, TPU_IR_CMP_NE); }
static tpu_status_t lower_lt(tpu_lower_ctx_t* cx) { return lw_cmp(cx, TPU_IR_CMP_LT); }
static tpu_status_t lower_le(tpu_lower_ctx_t* cx) { return lw_cmp(cx, TPU_IR_CMP_LE); }
static tpu_status_t lower_gt(tpu_lower_ctx_t* cx) { return lw_cmp(cx, TPU_IR_CMP_GT); }
static tpu_status_t lower_ge(tpu_lower_ctx_t* cx) { return lw_cmp(cx, TPU_IR_CMP_GE); }

static tpu_status_t lower_where(tpu_lower_ctx_t* cx) { /* (condition, self, other, *, out) */
  int idx[2] = {1, 2};
  int dt = lw_result_type(cx, 2, idx);
  const tpu_tensor_t* o = &cx->outs[0];
  int c = lw_input(cx, 0, -1);
  if (c >= 0 && tpu_ir_type(G, c)->dtype != TPU_DTYPE_BOOL) {
    if (tpu_ir_type(G, c)->dtype != TPU_DTYPE_U8)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "where expected condition to be a boolean tensor, but got a tensor with dtype %s", tpu_dtype_name(tpu_ir_type(G, c)->dtype));
    c = tpu_ir_compare(G, TPU_IR_CMP_NE, c, lw_const_like(cx, 0, c));
  }
  c = lw_bcast(cx, c, o->ndim, o->sizes);
  int a = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 2, dt), o->ndim, o->sizes);
  return lw_output(cx, 0, tpu_ir_select(G, c, a, b));
}

/* clamp(self, min?, max?) — Scalar or Tensor bounds; NaN in x propagates. */
static tpu_status_t lw_clamp(tpu_lower_ctx_t* cx, int imin, int imax) {
  int idx[3], n = 0;
  idx[n++] = 0;
  if (imin >= 0 && !lw_is_none(cx, imin)) idx[n++] = imin;
  if (imax >= 0 && !lw_is_none(cx, imax)) idx[n++] = imax;
  if (n == 1 && imin >= 0 && imax >= 0)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "torch.clamp: At least one of 'min' or 'max' must not be None");
  int dt = tpu_opmath_dtype(lw_result_type(cx, n, idx));
  const tpu_tensor_t* o = &cx->outs[0];
  int x = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  if (imin >= 0 && !lw_is_none(cx, imin)) {
    int lo = lw_bcast(cx, lw_input(cx, imin, dt), o->ndim, o->sizes);
    /* max(x, lo) with NaN from either side propagating, as PyTorch */
    x = tpu_ir_binary(G, TPU_IR_MAX, x, lo);
  }
  if (imax >= 0 && !lw_is_none(cx, imax)) {
    int hi = lw_bcast(cx, lw_input(cx, imax, dt), o->ndim, o->sizes);
    x = tpu_ir_binary(G, TPU_IR_MIN, x, hi);
  }
  return lw_output(cx, 0, x);
}
static tpu_status_t lower_clamp(tpu_lower_ctx_t* cx) { return lw_clamp(cx, 1, 2); }
static tpu_status_t lower_clamp_min(tpu_lower_ctx_t* cx) { return lw_clamp(cx, 1, -1); }
static tpu_status_t lower_clamp_max(tpu_lower_ctx_t* cx) { return lw_clamp(cx, -1, 1); }

/* The host's one-pass f32 kernels (custom GELU/SILU/LERP/ADDC, drivers/host/rows.h) take f32 values only:
 * every operand built and f32 (bf16/f16 arrive widened, f64 keeps the composite IR). */
static int f32_operands(tpu_lower_ctx_t* cx, int n, const int* v) {
  for (int k = 0; k < n; ++k)
    if (v[k] < 0 || tpu_ir_type(G, v[k])->dtype != TPU_DTYPE_F32) return 0;
  return 1;
}
static int same_dims(tpu_lower_ctx_t* cx, int u, int v) {
  const tpu_ir_type_t *tu = tpu_ir_type(G, u), *tv = tpu_ir_type(G, v);
  return tu->rank == tv->rank && !memcmp(tu->dims, tv->dims, sizeof(int64_t) * (size_t)tu->rank);
}
/* lerp(self, end, weight): self + w * (end - self); PyTorch uses the other form for |w| >= 0.5. */
static tpu_status_t lower_lerp(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(OUT_DT(0));
  const tpu_tensor_t* o = &cx->outs[0];
  int a = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int w = lw_input(cx, 2, dt);
  /* f32 with a scalar (rank-0) or full-shape weight: the host's one-pass kernel (custom LERP), PyTorch's
   * CPU formula with its one rounding, in every mode (fused eager keeps strict eager's bits) */
  const int abw[3] = {a, b, w};
  if (f32_operands(cx, 3, abw) && (tpu_ir_type(G, w)->rank == 0 || same_dims(cx, w, a))) {
    const tpu_ir_type_t t = *tpu_ir_type(G, a);
    return lw_output(cx, 0, lw_custom(cx, TPU_IR_CUSTOM_LERP, 0, &t, 3, abw));
  }
  /* |w| < 0.5 and 1 - w on w's own shape (a Scalar weight: once, not per element), then broadcast */
  int small = tpu_ir_compare(G, TPU_IR_CMP_LT, tpu_ir_unary(G, TPU_IR_ABS, w), lw_const_like(cx, 0.5, w));
  int one_minus = tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, 1.0, w), w);
  w = lw_bcast(cx, w, o->ndim, o->sizes);
  small = lw_bcast(cx, small, o->ndim, o->sizes);
  one_minus = lw_bcast(cx, one_minus, o->ndim, o->sizes);
  int diff = tpu_ir_binary(G, TPU_IR_SUB, b, a);
  int r1 = tpu_ir_binary(G, TPU_IR_ADD, a, tpu_ir_binary(G, TPU_IR_MUL, w, diff));
  int r2 = tpu_ir_binary(G, TPU_IR_SUB, b, tpu_ir_binary(G, TPU_IR_MUL, diff, one_minus));
  return lw_output(cx, 0, tpu_ir_select(G, small, r1, r2));
}
/* addcmul/addcdiv(self, t1, t2, *, value=1): self + value * (t1 op t2) */
static tpu_status_t lw_addc(tpu_lower_ctx_t* cx, int opcode) {
  int idx[3] = {0, 1, 2};
  int dt = tpu_opmath_dtype(lw_result_type(cx, 3, idx));
  if (opcode == TPU_IR_DIV && !tpu_dtype_is_floating(dt))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform a true division of tensor1 and tensor2.");
  const tpu_tensor_t* o = &cx->outs[0];
  int s = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int a = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 2, dt), o->ndim, o->sizes);
  int v0 = lw_scalar(cx, 3, dt);
  /* f32 (bf16/f16 widened): the host's one-pass kernel (custom ADDC) in PyTorch's CPU order and
   * roundings, fma(v t1, t2, self) / self + (v t1) / t2, in every mode (fused eager keeps strict's bits) */
  const int in4[4] = {s, a, b, v0};
  if (f32_operands(cx, 4, in4) && tpu_ir_type(G, v0)->rank == 0) {
    const tpu_ir_type_t t = *tpu_ir_type(G, s);
    return lw_output(cx, 0, lw_custom(cx, TPU_IR_CUSTOM_ADDC, opcode == TPU_IR_DIV, &t, 4, in4));
  }
  int v = lw_bcast(cx, v0, o->ndim, o->sizes);
  int t = tpu_ir_binary(G, TPU_IR_MUL, v, a); /* (v t1) op t2, as the CPU */
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_ADD, s, tpu_ir_binary(G, opcode, t, b)));
}
static tpu_status_t lower_addcmul(tpu_lower_ctx_t* cx) { return lw_addc(cx, TPU_IR_MUL); }
static tpu_status_t lower_addcdiv(tpu_lower_ctx_t* cx) { return lw_addc(cx, TPU_IR_DIV); }

#define UN(fn, op) static tpu_status_t fn(tpu_lower_ctx_t* cx) { return lw_unary_float(cx, op); }
UN(lower_neg, TPU_IR_NEG) UN(lower_abs, TPU_IR_ABS) UN(lower_sign, TPU_IR_SIGN)
UN(lower_exp, TPU_IR_EXP) UN(lower_expm1, TPU_IR_EXPM1) UN(lower_log, TPU_IR_LOG)
UN(lower_log1p, TPU_IR_LOG1P) UN(lower_sqrt, TPU_IR_SQRT) UN(lower_rsqrt, TPU_IR_RSQRT)
UN(lower_sin, TPU_IR_SIN) UN(lower_cos, TPU_IR_COS) UN(lower_tan, TPU_IR_TAN)
UN(lower_tanh, TPU_IR_TANH) UN(lower_sigmoid, TPU_IR_LOGISTIC) UN(lower_floor, TPU_IR_FLOOR)
UN(lower_ceil, TPU_IR_CEIL) UN(lower_round, TPU_IR_ROUND_EVEN) UN(lower_trunc, TPU_IR_TRUNC)
UN(lower_erf, TPU_IR_ERF) UN(lower_asin, TPU_IR_ASIN) UN(lower_acos, TPU_IR_ACOS)
UN(lower_atan, TPU_IR_ATAN) UN(lower_sinh, TPU_IR_SINH) UN(lower_cosh, TPU_IR_COSH)
UN(lower_asinh, TPU_IR_ASINH) UN(lower_acosh, TPU_IR_ACOSH) UN(lower_atanh, TPU_IR_ATANH)
UN(lower_erfinv, TPU_IR_ERFINV) UN(lower_lgamma, TPU_IR_LGAMMA) UN(lower_digamma, TPU_IR_DIGAMMA)
UN(lower_reciprocal, TPU_IR_RECIPROCAL)

static tpu_status_t lw_log_base(tpu_lower_ctx_t* cx, double inv_ln) {
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = tpu_ir_unary(G, TPU_IR_LOG, lw_input(cx, 0, dt));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, x, lw_const_like(cx, inv_ln, x)));
}
static tpu_status_t lower_log2(tpu_lower_ctx_t* cx) { return lw_log_base(cx, 1.4426950408889634); }
static tpu_status_t lower_log10(tpu_lower_ctx_t* cx) { return lw_log_base(cx, 0.43429448190325176); }
static tpu_status_t lower_exp2(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt);
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_POW, lw_const_like(cx, 2.0, x), x));
}
static tpu_status_t lower_frac(tpu_lower_ctx_t* cx) {
  int x = lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0)));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_SUB, x, tpu_ir_unary(G, TPU_IR_TRUNC, x)));
}
static tpu_status_t lower_round_decimals(tpu_lower_ctx_t* cx) { /* (self, *, int decimals, out) */
  int64_t dec = lw_int(cx, 1, 0);
  int x = lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0)));
  if (dec == 0) return lw_output(cx, 0, tpu_ir_unary(G, TPU_IR_ROUND_EVEN, x));
  double ten = 1; for (int64_t i = 0; i < (dec < 0 ? -dec : dec); ++i) ten *= 10;
  int s = lw_const_like(cx, ten, x);
  if (dec > 0) return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_DIV, tpu_ir_unary(G, TPU_IR_ROUND_EVEN, tpu_ir_binary(G, TPU_IR_MUL, x, s)), s));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_unary(G, TPU_IR_ROUND_EVEN, tpu_ir_binary(G, TPU_IR_DIV, x, s)), s));
}
static tpu_status_t lower_isnan(tpu_lower_ctx_t* cx) {
  return lw_output(cx, 0, tpu_ir_unary(G, TPU_IR_IS_NAN, lw_input(cx, 0, -1)));
}
static tpu_status_t lower_isinf(tpu_lower_ctx_t* cx) {
  return lw_output(cx, 0, tpu_ir_unary(G, TPU_IR_IS_INF, lw_input(cx, 0, -1)));
}
static tpu_status_t lower_isfinite(tpu_lower_ctx_t* cx) {
  return lw_output(cx, 0, tpu_ir_unary(G, TPU_IR_IS_FINITE, lw_input(cx, 0, -1)));
}
static tpu_status_t lower_signbit(tpu_lower_ctx_t* cx) {
  int x = lw_input(cx, 0, -1);
  if (x >= 0 && tpu_dtype_is_floating(tpu_ir_type(G, x)->dtype)) {
    /* copysign(1, x) < 0 detects -0.0 and negative NaN payloads are ignored */
    int one = lw_const_like(cx, 1.0, x);
    int neg0 = tpu_ir_compare(G, TPU_IR_CMP_LT, tpu_ir_binary(G, TPU_IR_DIV, one, x), lw_const_like(cx, 0, x));
    int neg = tpu_ir_compare(G, TPU_IR_CMP_LT, x, lw_const_like(cx, 0, x));
    int zero = tpu_ir_compare(G, TPU_IR_CMP_EQ, x, lw_const_like(cx, 0, x));
    return lw_output(cx, 0, tpu_ir_select(G, zero, neg0, neg));
  }
  return lw_output(cx, 0, tpu_ir_compare(G, TPU_IR_CMP_LT, x, lw_const_like(cx, 0, x)));
}

/* ---- activations */
static tpu_status_t lower_relu(tpu_lower_ctx_t* cx) {
  int x = lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0)));
  int z = lw_const_like(cx, 0, x);
  /* relu(NaN) = NaN as PyTorch (clamp_min semantics) */
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, x, z), z, x));
}
static int gelu_fwd(tpu_lower_ctx_t* cx, int x, int tanh_approx, int* out_cdf, int* out_pdf) {
  if (tanh_approx) { /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    int x3 = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, x, x), x);
    int inner = tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.7978845608028654, x),
                              tpu_ir_binary(G, TPU_IR_ADD, x, tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.044715, x), x3)));
    int t = tpu_ir_unary(G, TPU_IR_TANH, inner);
    if (out_cdf) *out_cdf = t;
    return tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.5, x), x),
                         tpu_ir_binary(G, TPU_IR_ADD, lw_const_like(cx, 1.0, x), t));
  }
  int cdf = tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.5, x),
                          tpu_ir_binary(G, TPU_IR_ADD, lw_const_like(cx, 1.0, x),
                                        tpu_ir_unary(G, TPU_IR_ERF, tpu_ir_binary(G, TPU_IR_MUL, x, lw_const_like(cx, 0.7071067811865476, x)))));
  if (out_cdf) *out_cdf = cdf;
  if (out_pdf) *out_pdf = tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.3989422804014327, x),
                                        tpu_ir_unary(G, TPU_IR_EXP, tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, -0.5, x), tpu_ir_binary(G, TPU_IR_MUL, x, x))));
  return tpu_ir_binary(G, TPU_IR_MUL, x, cdf);
}
static int approx_arg(tpu_lower_ctx_t* cx, int i) {
  const char* a = lw_str(cx, i, "none");
  if (!strcmp(a, "tanh")) return 1;
  if (strcmp(a, "none")) { tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "approximate argument must be either none or tanh.")); }
  return 0;
}
/* Exact (erf) GELU on f32 values runs as the host's one-pass kernel (custom GELU / GELU_BWD,
 * drivers/host/rows.h) in every mode, so strict eager, fused-eager traces and compiled graphs give the same
 * bits (a GELU after a linear is therefore not fused into the GEMM epilogue; the kernel's pass is cheaper
 * than the composite erf it replaces). f64 and the tanh form keep the composite IR. */
static tpu_status_t lower_gelu(tpu_lower_ctx_t* cx) { /* (self, *, approximate, out) */
  int x = lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0)));
  int tanh_approx = approx_arg(cx, 1);
  if (!tanh_approx && f32_operands(cx, 1, &x)) {
    const tpu_ir_type_t t = *tpu_ir_type(G, x); /* copied: adding ops may move the graph's arrays */
    return lw_output(cx, 0, lw_custom(cx, TPU_IR_CUSTOM_GELU, 0, &t, 1, &x));
  }
  return lw_output(cx, 0, gelu_fwd(cx, x, tanh_approx, NULL, NULL));
}
static tpu_status_t lower_gelu_backward(tpu_lower_ctx_t* cx) { /* (grad, self, *, approximate, grad_input) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int gr = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  int r;
  const int tanh_approx = approx_arg(cx, 2), gx[2] = {gr, x};
  if (!tanh_approx && f32_operands(cx, 2, gx) && same_dims(cx, gr, x)) {
    const tpu_ir_type_t t = *tpu_ir_type(G, x);
    return lw_output(cx, 0, lw_custom(cx, TPU_IR_CUSTOM_GELU_BWD, 0, &t, 2, gx));
  }
  if (tanh_approx) {
    int t;
    gelu_fwd(cx, x, 1, &t, NULL);
    /* d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2) */
    int one = lw_const_like(cx, 1.0, x);
    int left = tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.5, x), tpu_ir_binary(G, TPU_IR_ADD, one, t));
    int sech2 = tpu_ir_binary(G, TPU_IR_SUB, one, tpu_ir_binary(G, TPU_IR_MUL, t, t));
    int inner_d = tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.7978845608028654, x),
                                tpu_ir_binary(G, TPU_IR_ADD, one, tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 3 * 0.044715, x), tpu_ir_binary(G, TPU_IR_MUL, x, x))));
    int right = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.5, x), x), tpu_ir_binary(G, TPU_IR_MUL, sech2, inner_d));
    r = tpu_ir_binary(G, TPU_IR_MUL, gr, tpu_ir_binary(G, TPU_IR_ADD, left, right));
  } else {
    int cdf, pdf;
    gelu_fwd(cx, x, 0, &cdf, &pdf);
    r = tpu_ir_binary(G, TPU_IR_MUL, gr, tpu_ir_binary(G, TPU_IR_ADD, cdf, tpu_ir_binary(G, TPU_IR_MUL, x, pdf)));
  }
  return lw_output(cx, 0, r);
}
/* SiLU on f32 values (f32, or bf16/f16 widened) runs as the host's one-pass kernel (custom SILU /
 * SILU_BWD, drivers/host/rows.h) in every mode, so fused eager keeps strict eager's bits; f64 keeps the
 * composite IR. */
static tpu_status_t lower_silu(tpu_lower_ctx_t* cx) {
  int x = lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0)));
  if (f32_operands(cx, 1, &x)) {
    const tpu_ir_type_t t = *tpu_ir_type(G, x);
    return lw_output(cx, 0, lw_custom(cx, TPU_IR_CUSTOM_SILU, 0, &t, 1, &x));
  }
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, x, tpu_ir_unary(G, TPU_IR_LOGISTIC, x)));
}
static tpu_status_t lower_silu_backward(tpu_lower_ctx_t* cx) { /* g * s * (1 + x (1 - s)) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  const int gx[2] = {g, x};
  if (f32_operands(cx, 2, gx) && same_dims(cx, g, x)) {
    const tpu_ir_type_t t = *tpu_ir_type(G, x);
    return lw_output(cx, 0, lw_custom(cx, TPU_IR_CUSTOM_SILU_BWD, 0, &t, 2, gx));
  }
  int s = tpu_ir_unary(G, TPU_IR_LOGISTIC, x), one = lw_const_like(cx, 1.0, x);
  int d = tpu_ir_binary(G, TPU_IR_MUL, s, tpu_ir_binary(G, TPU_IR_ADD, one, tpu_ir_binary(G, TPU_IR_MUL, x, tpu_ir_binary(G, TPU_IR_SUB, one, s))));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, g, d));
}
static tpu_status_t lower_sigmoid_backward(tpu_lower_ctx_t* cx) { /* (grad, output) -> g * y (1 - y) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), y = lw_input(cx, 1, dt);
  int d = tpu_ir_binary(G, TPU_IR_MUL, y, tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, 1.0, y), y));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, g, d));
}
static tpu_status_t lower_tanh_backward(tpu_lower_ctx_t* cx) { /* g * (1 - y^2) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), y = lw_input(cx, 1, dt);
  int d = tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, 1.0, y), tpu_ir_binary(G, TPU_IR_MUL, y, y));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, g, d));
}
static tpu_status_t lower_threshold_backward(tpu_lower_ctx_t* cx) { /* (grad, self, threshold) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  const tpu_tensor_t* o = &cx->outs[0];
  int g = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int x = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int th = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LE, x, th), lw_const_like(cx, 0, g), g));
}
static tpu_status_t lower_threshold(tpu_lower_ctx_t* cx) { /* (self, threshold, value) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt);
  int th = lw_bcast_like(cx, lw_scalar(cx, 1, dt), x), val = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LE, x, th), val, x));
}
/* x > 0 ? v : v * s, the select of leaky_relu and prelu (v = x) and of their backward (v = grad);
 * *out_pos (optional) gets the x > 0 mask */
static int leaky_select(tpu_lower_ctx_t* cx, int x, int v, int s, int* out_pos) {
  int pos = tpu_ir_compare(G, TPU_IR_CMP_GT, x, lw_const_like(cx, 0, x));
  if (out_pos) *out_pos = pos;
  return tpu_ir_select(G, pos, v, tpu_ir_binary(G, TPU_IR_MUL, v, s));
}
static tpu_status_t lower_leaky_relu(tpu_lower_ctx_t* cx) { /* (self, negative_slope) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt), s = lw_bcast_like(cx, lw_scalar(cx, 1, dt), x);
  return lw_output(cx, 0, leaky_select(cx, x, x, s, NULL));
}
static tpu_status_t lower_leaky_relu_backward(tpu_lower_ctx_t* cx) { /* (grad, self, slope, self_is_result) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt), s = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
  return lw_output(cx, 0, leaky_select(cx, x, g, s, NULL));
}
static tpu_status_t lower_hardtanh(tpu_lower_ctx_t* cx) { /* (self, min_val, max_val) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt);
  int lo = lw_bcast_like(cx, lw_scalar(cx, 1, dt), x), hi = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MIN, tpu_ir_binary(G, TPU_IR_MAX, x, lo), hi));
}
static tpu_status_t lower_hardtanh_backward(tpu_lower_ctx_t* cx) { /* (grad, self, min, max) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  int lo = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x), hi = lw_bcast_like(cx, lw_scalar(cx, 3, dt), x);
  int out = tpu_ir_binary(G, TPU_IR_OR, tpu_ir_compare(G, TPU_IR_CMP_LE, x, lo), tpu_ir_compare(G, TPU_IR_CMP_GE, x, hi));
  return lw_output(cx, 0, tpu_ir_select(G, out, lw_const_like(cx, 0, g), g));
}
/* softplus(x) = x if beta*x > threshold else log1p(exp(beta x)) / beta */
static tpu_status_t lower_softplus(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt);
  int b = lw_bcast_like(cx, lw_scalar(cx, 1, dt), x), th = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
  int bx = tpu_ir_binary(G, TPU_IR_MUL, x, b);
  int soft = tpu_ir_binary(G, TPU_IR_DIV, tpu_ir_unary(G, TPU_IR_LOG1P, tpu_ir_unary(G, TPU_IR_EXP, bx)), b);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, bx, th), x, soft));
}
static tpu_status_t lower_softplus_backward(tpu_lower_ctx_t* cx) { /* (grad, self, beta, threshold) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  int b = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x), th = lw_bcast_like(cx, lw_scalar(cx, 3, dt), x);
  int bx = tpu_ir_binary(G, TPU_IR_MUL, x, b);
  int z = tpu_ir_unary(G, TPU_IR_EXP, bx);
  int d = tpu_ir_binary(G, TPU_IR_DIV, z, tpu_ir_binary(G, TPU_IR_ADD, z, lw_const_like(cx, 1.0, z)));
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, bx, th), g, tpu_ir_binary(G, TPU_IR_MUL, g, d)));
}
static tpu_status_t lower_elu(tpu_lower_ctx_t* cx) { /* (self, alpha, scale, input_scale) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt);
  int a = lw_bcast_like(cx, lw_scalar(cx, 1, dt), x), s = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
  int is = lw_bcast_like(cx, lw_scalar(cx, 3, dt), x);
  int neg = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, a, tpu_ir_unary(G, TPU_IR_EXPM1, tpu_ir_binary(G, TPU_IR_MUL, x, is))), s);
  int pos = tpu_ir_binary(G, TPU_IR_MUL, x, s);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, x, lw_const_like(cx, 0, x)), pos, neg));
}
static tpu_status_t lower_elu_backward(tpu_lower_ctx_t* cx) {
  /* (grad, alpha, scale, input_scale, bool is_result, self_or_result) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 5, dt);
  int negcoef = tpu_ir_binary(G, TPU_IR_MUL, lw_bcast_like(cx, lw_scalar(cx, 1, dt), x), lw_bcast_like(cx, lw_scalar(cx, 2, dt), x));
  int poscoef = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
  int negipt = lw_bcast_like(cx, lw_scalar(cx, 3, dt), x);
  int neg;
  if (lw_int(cx, 4, 0))
    neg = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, g, negipt), tpu_ir_binary(G, TPU_IR_ADD, x, negcoef));
  else
    neg = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, g, negipt), negcoef),
                        tpu_ir_unary(G, TPU_IR_EXP, tpu_ir_binary(G, TPU_IR_MUL, x, negipt)));
  int pos = tpu_ir_binary(G, TPU_IR_MUL, g, poscoef);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LE, x, lw_const_like(cx, 0, x)), neg, pos));
}
static tpu_status_t lower_nan_to_num(tpu_lower_ctx_t* cx) { /* (self, nan?, posinf?, neginf?) */
  int dt = OUT_DT(0);
  int x = lw_input(cx, 0, -1);
  if (!tpu_dtype_is_floating(dt)) return lw_output(cx, 0, x);
  double big = dt == TPU_DTYPE_F64 ? 1.7976931348623157e308 : dt == TPU_DTYPE_F32 ? 3.4028234663852886e38
             : dt == TPU_DTYPE_BF16 ? 3.3895313892515355e38 : 65504.0;
  int nanv = lw_is_none(cx, 1) ? lw_const_like(cx, 0, x) : lw_bcast_like(cx, lw_scalar(cx, 1, dt), x);
  int pinf = lw_is_none(cx, 2) ? lw_const_like(cx, big, x) : lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
  int ninf = lw_is_none(cx, 3) ? lw_const_like(cx, -big, x) : lw_bcast_like(cx, lw_scalar(cx, 3, dt), x);
  int r = tpu_ir_select(G, tpu_ir_unary(G, TPU_IR_IS_NAN, x), nanv, x);
  int isinf = tpu_ir_unary(G, TPU_IR_IS_INF, x);
  int pos = tpu_ir_compare(G, TPU_IR_CMP_GT, x, lw_const_like(cx, 0, x));
  r = tpu_ir_select(G, tpu_ir_binary(G, TPU_IR_AND, isinf, pos), pinf, r);
  r = tpu_ir_select(G, tpu_ir_binary(G, TPU_IR_AND, isinf, tpu_ir_unary(G, TPU_IR_NOT, pos)), ninf, r);
  return lw_output(cx, 0, r);
}


/* ---- more activations and special functions */
static tpu_status_t lower_log_sigmoid(tpu_lower_ctx_t* cx) { /* -> (output, buffer) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt), zero = lw_const_like(cx, 0, x);
  /* min(x, 0) - log1p(exp(-|x|)): stable for large |x| */
  int mn = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, x, zero), x, zero);
  int z = tpu_ir_unary(G, TPU_IR_EXP, tpu_ir_unary(G, TPU_IR_NEG, tpu_ir_unary(G, TPU_IR_ABS, x)));
  TPU_RETURN_IF_ERROR(lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_SUB, mn, tpu_ir_unary(G, TPU_IR_LOG1P, z))));
  if (cx->nouts < 2) return TPU_OK;
  const tpu_tensor_t* b = &cx->outs[1];
  if (b->ndim < 0) return lw_output(cx, 1, -1);
  /* the buffer is ours to define (backward recomputes from self); keep it zero */
  return lw_output(cx, 1, lw_const(cx, 0, b->dtype, 0, NULL));
}
static tpu_status_t lower_log_sigmoid_backward(tpu_lower_ctx_t* cx) { /* (grad, self, buffer) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  /* d/dx log(sigmoid(x)) = sigmoid(-x) */
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, g, tpu_ir_unary(G, TPU_IR_LOGISTIC, tpu_ir_unary(G, TPU_IR_NEG, x))));
}
static tpu_status_t lw_xlogy(tpu_lower_ctx_t* cx, int log1p) { /* self * log(other), 0 where self == 0 */
  int idx[2] = {0, 1};
  int dt = tpu_opmath_dtype(lw_result_type(cx, 2, idx));
  if (!tpu_dtype_is_floating(dt)) dt = TPU_DTYPE_F32;
  const tpu_tensor_t* o = &cx->outs[0];
  int x = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int y = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int r = tpu_ir_binary(G, TPU_IR_MUL, x, tpu_ir_unary(G, log1p ? TPU_IR_LOG1P : TPU_IR_LOG, y));
  int zero = lw_const_like(cx, 0, x);
  r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, x, zero), zero, r);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_unary(G, TPU_IR_IS_NAN, y), y, r));
}
static tpu_status_t lower_xlogy(tpu_lower_ctx_t* cx) { return lw_xlogy(cx, 0); }
static tpu_status_t lower_xlog1py(tpu_lower_ctx_t* cx) { return lw_xlogy(cx, 1); }
static int logit_clamp(tpu_lower_ctx_t* cx, int x, int eps_arg) {
  if (lw_is_none(cx, eps_arg)) return x;
  int e = lw_bcast_like(cx, lw_scalar(cx, eps_arg, tpu_ir_type(G, x)->dtype), x);
  int hi = tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, 1.0, x), e);
  x = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, x, e), e, x);
  return tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, x, hi), hi, x);
}
static tpu_status_t lower_logit(tpu_lower_ctx_t* cx) { /* (self, eps?) */
  int x = logit_clamp(cx, lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0))), 1);
  int r = tpu_ir_unary(G, TPU_IR_LOG, tpu_ir_binary(G, TPU_IR_DIV, x, tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, 1.0, x), x)));
  return lw_output(cx, 0, r);
}
static tpu_status_t lower_logit_backward(tpu_lower_ctx_t* cx) { /* (grad, self, eps?) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  int d = tpu_ir_binary(G, TPU_IR_DIV, g, tpu_ir_binary(G, TPU_IR_MUL, x, tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, 1.0, x), x)));
  if (!lw_is_none(cx, 2)) {
    int e = lw_bcast_like(cx, lw_scalar(cx, 2, dt), x);
    int hi = tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, 1.0, x), e);
    int out = tpu_ir_binary(G, TPU_IR_OR, tpu_ir_compare(G, TPU_IR_CMP_LT, x, e), tpu_ir_compare(G, TPU_IR_CMP_GT, x, hi));
    d = tpu_ir_select(G, out, lw_const_like(cx, 0, d), d);
  }
  return lw_output(cx, 0, d);
}
static tpu_status_t lw_isinf_sign(tpu_lower_ctx_t* cx, int neg) {
  int x = lw_input(cx, 0, -1);
  if (x >= 0 && !tpu_dtype_is_floating(tpu_ir_type(G, x)->dtype))
    return lw_output(cx, 0, lw_const(cx, 0, TPU_DTYPE_BOOL, 0, NULL));
  return lw_output(cx, 0, tpu_ir_compare(G, TPU_IR_CMP_EQ, x, lw_const_like(cx, neg ? -INFINITY : INFINITY, x)));
}
static tpu_status_t lower_isneginf(tpu_lower_ctx_t* cx) { return lw_isinf_sign(cx, 1); }
static tpu_status_t lower_isposinf(tpu_lower_ctx_t* cx) { return lw_isinf_sign(cx, 0); }
/* hardsigmoid = clamp(x/6 + 1/2, 0, 1); hardswish = x * hardsigmoid(x) */
static int hsig(tpu_lower_ctx_t* cx, int x) {
  int r = tpu_ir_binary(G, TPU_IR_ADD, tpu_ir_binary(G, TPU_IR_DIV, x, lw_const_like(cx, 6.0, x)), lw_const_like(cx, 0.5, x));
  return tpu_ir_binary(G, TPU_IR_MIN, tpu_ir_binary(G, TPU_IR_MAX, r, lw_const_like(cx, 0, x)), lw_const_like(cx, 1.0, x));
}
static tpu_status_t lower_hardsigmoid(tpu_lower_ctx_t* cx) {
  return lw_output(cx, 0, hsig(cx, lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0)))));
}
static tpu_status_t lower_hardswish(tpu_lower_ctx_t* cx) {
  int x = lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0)));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, x, hsig(cx, x)));
}
static tpu_status_t lower_hardsigmoid_backward(tpu_lower_ctx_t* cx) { /* g/6 inside (-3, 3) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  int in = tpu_ir_binary(G, TPU_IR_AND, tpu_ir_compare(G, TPU_IR_CMP_GT, x, lw_const_like(cx, -3.0, x)),
                         tpu_ir_compare(G, TPU_IR_CMP_LT, x, lw_const_like(cx, 3.0, x)));
  return lw_output(cx, 0, tpu_ir_select(G, in, tpu_ir_binary(G, TPU_IR_DIV, g, lw_const_like(cx, 6.0, g)), lw_const_like(cx, 0, g)));
}
static tpu_status_t lower_hardswish_backward(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  int mid = tpu_ir_binary(G, TPU_IR_MUL, g, tpu_ir_binary(G, TPU_IR_ADD, tpu_ir_binary(G, TPU_IR_DIV, x, lw_const_like(cx, 3.0, x)), lw_const_like(cx, 0.5, x)));
  int r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, x, lw_const_like(cx, 3.0, x)), mid, g);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LE, x, lw_const_like(cx, -3.0, x)), lw_const_like(cx, 0, g), r));
}
static int softplus1(tpu_lower_ctx_t* cx, int x) { /* log1p(exp(x)) with threshold 20, as F.softplus */
  int soft = tpu_ir_unary(G, TPU_IR_LOG1P, tpu_ir_unary(G, TPU_IR_EXP, x));
  return tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, x, lw_const_like(cx, 20.0, x)), x, soft);
}
static tpu_status_t lower_mish(tpu_lower_ctx_t* cx) { /* x * tanh(softplus(x)) */
  int x = lw_input(cx, 0, tpu_opmath_dtype(OUT_DT(0)));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, x, tpu_ir_unary(G, TPU_IR_TANH, softplus1(cx, x))));
}
static tpu_status_t lower_mish_backward(tpu_lower_ctx_t* cx) { /* g * (t + x * s * (1 - t^2)) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt);
  int t = tpu_ir_unary(G, TPU_IR_TANH, softplus1(cx, x)), s = tpu_ir_unary(G, TPU_IR_LOGISTIC, x);
  int one = lw_const_like(cx, 1.0, x);
  int d = tpu_ir_binary(G, TPU_IR_ADD, t, tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, x, s), tpu_ir_binary(G, TPU_IR_SUB, one, tpu_ir_binary(G, TPU_IR_MUL, t, t))));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, g, d));
}

/* logaddexp(a, b) = max + log1p(exp(-|a - b|)); equal infinities give that infinity.
 * logaddexp2 is the same in base 2. */
static tpu_status_t lw_logaddexp(tpu_lower_ctx_t* cx, int base2) {
  int idx[2] = {0, 1};
  int dt = tpu_opmath_dtype(lw_result_type(cx, 2, idx));
  if (!tpu_dtype_is_floating(dt)) dt = TPU_DTYPE_F32;
  const tpu_tensor_t* o = &cx->outs[0];
  int a = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int m = tpu_ir_binary(G, TPU_IR_MAX, a, b);
  int d = tpu_ir_unary(G, TPU_IR_NEG, tpu_ir_unary(G, TPU_IR_ABS, tpu_ir_binary(G, TPU_IR_SUB, a, b)));
  int r;
  if (base2) { /* m + log2(1 + 2^d) */
    int p = tpu_ir_binary(G, TPU_IR_POW, lw_const_like(cx, 2.0, d), d);
    r = tpu_ir_binary(G, TPU_IR_ADD, m, tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_unary(G, TPU_IR_LOG1P, p), lw_const_like(cx, 1.4426950408889634, p)));
  } else {
    r = tpu_ir_binary(G, TPU_IR_ADD, m, tpu_ir_unary(G, TPU_IR_LOG1P, tpu_ir_unary(G, TPU_IR_EXP, d)));
  }
  int same_inf = tpu_ir_binary(G, TPU_IR_AND, tpu_ir_unary(G, TPU_IR_IS_INF, a), tpu_ir_compare(G, TPU_IR_CMP_EQ, a, b));
  return lw_output(cx, 0, tpu_ir_select(G, same_inf, a, r));
}
static tpu_status_t lower_logaddexp(tpu_lower_ctx_t* cx) { return lw_logaddexp(cx, 0); }
static tpu_status_t lower_logaddexp2(tpu_lower_ctx_t* cx) { return lw_logaddexp(cx, 1); }
/* equal(self, other) -> bool: same shape and every element equal (NaN != NaN). The glue
 * passes the bool result as a 0-dim output tensor. */
static tpu_status_t lower_equal(tpu_lower_ctx_t* cx) {
  int ra = lw_rank_of(cx, 0), rb = lw_rank_of(cx, 1);
  const int64_t *sa = lw_sizes_of(cx, 0), *sb = lw_sizes_of(cx, 1);
  int same = ra == rb;
  for (int d = 0; d < ra && same; ++d) same = sa[d] == sb[d];
  if (!same) return lw_output(cx, 0, lw_const(cx, 0, TPU_DTYPE_BOOL, 0, NULL));
  int idx[2] = {0, 1};
  int dt = lw_result_type(cx, 2, idx);
  int eq = tpu_ir_compare(G, TPU_IR_CMP_EQ, lw_input(cx, 0, dt), lw_input(cx, 1, dt));
  if (ra == 0) return lw_output(cx, 0, eq);
  int64_t flags[TPU_MAX_DIMS];
  for (int d = 0; d < ra; ++d) flags[d] = 1;
  return lw_output(cx, 0, tpu_ir_reduce(G, TPU_IR_MONOID_AND, eq, flags));
}

/* ---- small special functions (copysign, hypot, heaviside, sinc, softshrink, entr) */
static int float_common(tpu_lower_ctx_t* cx) {
  int idx[2] = {0, 1};
  int dt = tpu_opmath_dtype(lw_result_type(cx, lw_is_none(cx, 1) || !(lw_is_tensor(cx, 1) || lw_is_scalar_arg(cx, 1)) ? 1 : 2, idx));
  return tpu_dtype_is_floating(dt) ? dt : TPU_DTYPE_F32;
}
static tpu_status_t lower_copysign(tpu_lower_ctx_t* cx) {
  int dt = float_common(cx);
  const tpu_tensor_t* o = &cx->outs[0];
  int a = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int zero = lw_const_like(cx, 0, b);
  /* negative, or -0.0 (1 / -0.0 = -inf) */
  int neg = tpu_ir_binary(G, TPU_IR_OR, tpu_ir_compare(G, TPU_IR_CMP_LT, b, zero),
                          tpu_ir_binary(G, TPU_IR_AND, tpu_ir_compare(G, TPU_IR_CMP_EQ, b, zero),
                                        tpu_ir_compare(G, TPU_IR_CMP_LT, tpu_ir_binary(G, TPU_IR_DIV, lw_const_like(cx, 1.0, b), b), zero)));
  int m = tpu_ir_unary(G, TPU_IR_ABS, a);
  return lw_output(cx, 0, tpu_ir_select(G, neg, tpu_ir_unary(G, TPU_IR_NEG, m), m));
}
static tpu_status_t lower_hypot(tpu_lower_ctx_t* cx) {
  int dt = float_common(cx);
  const tpu_tensor_t* o = &cx->outs[0];
  int a = tpu_ir_unary(G, TPU_IR_ABS, lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes));
  int b = tpu_ir_unary(G, TPU_IR_ABS, lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes));
  /* scaled to avoid overflow: m * sqrt(1 + (n/m)^2); inf wins over nan as in C hypot */
  int m = tpu_ir_binary(G, TPU_IR_MAX, a, b), n = tpu_ir_binary(G, TPU_IR_MIN, a, b);
  int q = tpu_ir_binary(G, TPU_IR_DIV, n, m);
  int r = tpu_ir_binary(G, TPU_IR_MUL, m, tpu_ir_unary(G, TPU_IR_SQRT, tpu_ir_binary(G, TPU_IR_ADD, lw_const_like(cx, 1.0, q), tpu_ir_binary(G, TPU_IR_MUL, q, q))));
  r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, m, lw_const_like(cx, 0, m)), lw_const_like(cx, 0, m), r);
  int inf = tpu_ir_binary(G, TPU_IR_OR, tpu_ir_unary(G, TPU_IR_IS_INF, a), tpu_ir_unary(G, TPU_IR_IS_INF, b));
  return lw_output(cx, 0, tpu_ir_select(G, inf, lw_const_like(cx, INFINITY, r), r));
}
/* fmax / fmin: maximum / minimum that ignore a NaN operand (NaN only where both are NaN). */
static tpu_status_t fminmax(tpu_lower_ctx_t* cx, int opcode) {
  int idx[2] = {0, 1};
  int dt = tpu_opmath_dtype(lw_result_type(cx, 2, idx));
  const tpu_tensor_t* o = &cx->outs[0];
  int a = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int b = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int r = tpu_ir_binary(G, opcode, a, b);
  if (tpu_dtype_is_floating(dt))
    r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_NE, a, a), b, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_NE, b, b), a, r));
  return lw_output(cx, 0, r);
}
static tpu_status_t lower_fmax(tpu_lower_ctx_t* cx) { return fminmax(cx, TPU_IR_MAX); }
static tpu_status_t lower_fmin(tpu_lower_ctx_t* cx) { return fminmax(cx, TPU_IR_MIN); }
static tpu_status_t lower_heaviside(tpu_lower_ctx_t* cx) { /* (self, values) */
  if (lw_dtype_of(cx, 0) != lw_dtype_of(cx, 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "heaviside is not yet implemented for tensors with different dtypes");
  int dt = OUT_DT(0);
  const tpu_tensor_t* o = &cx->outs[0];
  int x = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes);
  int v = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int zero = lw_const_like(cx, 0, x);
  int r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, x, zero), lw_const_like(cx, 1, x), zero);
  /* x == 0 ? values : (x > 0), so NaN gives 0 as on the CPU */
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, x, zero), v, r));
}
static tpu_status_t lower_sinc(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt);
  int px = tpu_ir_binary(G, TPU_IR_MUL, x, lw_const_like(cx, 3.14159265358979323846, x));
  int r = tpu_ir_binary(G, TPU_IR_DIV, tpu_ir_unary(G, TPU_IR_SIN, px), px);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, x, lw_const_like(cx, 0, x)), lw_const_like(cx, 1.0, x), r));
}
static tpu_status_t lower_softshrink(tpu_lower_ctx_t* cx) { /* (self, lambd) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  lw_check_scalar(cx, 1, TPU_IR_CMP_GE, 0.0, -1, "lambda must be greater or equal to 0, but found to be %g.");
  int x = lw_input(cx, 0, dt), l = lw_bcast_like(cx, lw_scalar(cx, 1, dt), x);
  int r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, x, l), tpu_ir_binary(G, TPU_IR_SUB, x, l), lw_const_like(cx, 0, x));
  r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, x, tpu_ir_unary(G, TPU_IR_NEG, l)), tpu_ir_binary(G, TPU_IR_ADD, x, l), r);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_unary(G, TPU_IR_IS_NAN, x), x, r));
}
/* The backwards of softshrink and hardshrink (and hardshrink itself) take lambd rounded to self's dtype first, as
 * PyTorch's CPU kernels do (bf16: lambd 0.3 is 0.30078125); softshrink's forward keeps it in the op-math dtype */
static int shrink_lambd(tpu_lower_ctx_t* cx, int arg, int dt, int like) {
  return lw_bcast_like(cx, tpu_ir_convert(G, lw_scalar(cx, arg, OUT_DT(0)), dt), like);
}
/* -l <= x <= l (false for NaN) */
static int shrink_band(tpu_lower_ctx_t* cx, int x, int l) {
  return tpu_ir_binary(G, TPU_IR_AND, tpu_ir_compare(G, TPU_IR_CMP_GE, x, tpu_ir_unary(G, TPU_IR_NEG, l)),
                       tpu_ir_compare(G, TPU_IR_CMP_LE, x, l));
}
static tpu_status_t lower_softshrink_backward(tpu_lower_ctx_t* cx) { /* (grad, self, lambd) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int g = lw_input(cx, 0, dt), x = lw_input(cx, 1, dt), l = shrink_lambd(cx, 2, dt, x);
  int out = tpu_ir_compare(G, TPU_IR_CMP_GT, tpu_ir_unary(G, TPU_IR_ABS, x), l);
  return lw_output(cx, 0, tpu_ir_select(G, out, g, lw_const_like(cx, 0, g)));
}
/* hardshrink: 0 where -lambd <= x <= lambd, else x (NaN passes); backward: 0 there, else grad */
static tpu_status_t lower_hardshrink(tpu_lower_ctx_t* cx) { /* (self, lambd) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt), l = shrink_lambd(cx, 1, dt, x);
  int in = shrink_band(cx, x, l);
  return lw_output(cx, 0, tpu_ir_select(G, in, lw_const_like(cx, 0, x), x));
}
static tpu_status_t lower_hardshrink_backward(tpu_lower_ctx_t* cx) { /* (grad, self, lambd) */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  const tpu_tensor_t* o = &cx->outs[0];
  int g = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes), x = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int l = shrink_lambd(cx, 2, dt, x);
  int in = shrink_band(cx, x, l);
  return lw_output(cx, 0, tpu_ir_select(G, in, lw_const_like(cx, 0, g), g));
}
/* _prelu_kernel(self, weight) (weight already shaped to broadcast): x > 0 ? x : w x;
 * _prelu_kernel_backward(grad, self, weight) -> (x > 0 ? g : w g, x > 0 ? 0 : x g), both of the broadcast
 * shape (autograd sums the weight's gradient back to its shape) */
static tpu_status_t lower_prelu(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = &cx->outs[0];
  int dt = tpu_opmath_dtype(o->dtype);
  int x = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes), w = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  return lw_output(cx, 0, leaky_select(cx, x, x, w, NULL));
}
static tpu_status_t lower_prelu_backward(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = &cx->outs[0];
  int dt = tpu_opmath_dtype(o->dtype);
  int g = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes), x = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int w = lw_bcast(cx, lw_input(cx, 2, dt), o->ndim, o->sizes);
  int pos;
  TPU_RETURN_IF_ERROR(lw_output(cx, 0, leaky_select(cx, x, g, w, &pos)));
  return lw_output(cx, 1, tpu_ir_select(G, pos, lw_const_like(cx, 0, g), tpu_ir_binary(G, TPU_IR_MUL, x, g)));
}
/* glu(self, dim): a * sigmoid(b) over the two halves of dim (LOGISTIC: 1 / (1 + exp(-b)), the CPU
 * kernel's form); glu_backward(grad, self, dim) = cat(g s, g a s (1 - s)) */
static int glu_halves(tpu_lower_ctx_t* cx, int ix, int idim, int dt, int* a, int* b) {
  int r = lw_rank_of(cx, ix);
  if (r == 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "glu does not support scalars because halving size must be even"), -1;
  int dim = lw_norm_dim(cx, lw_int(cx, idim, -1), r);
  if (dim < 0) return -1;
  const int64_t* s = lw_sizes_of(cx, ix);
  if (s[dim] % 2)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Halving dimension must be even, but dimension %d is size %lld", dim, (long long)s[dim]), -1;
  int x = lw_input(cx, ix, dt);
  int64_t h = s[dim] / 2;
  *a = lw_slice_dim(cx, x, dim, 0, h);
  *b = lw_slice_dim(cx, x, dim, h, 2 * h);
  return dim;
}
static tpu_status_t lower_glu(tpu_lower_ctx_t* cx) { /* (self, dim) */
  int dt = tpu_opmath_dtype(OUT_DT(0)), a, b;
  if (glu_halves(cx, 0, 1, dt, &a, &b) < 0) return TPU_OK;
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MUL, a, tpu_ir_unary(G, TPU_IR_LOGISTIC, b)));
}
static tpu_status_t lower_glu_backward(tpu_lower_ctx_t* cx) { /* (grad_output, self, dim) */
  int dt = tpu_opmath_dtype(OUT_DT(0)), a, b;
  int dim = glu_halves(cx, 1, 2, dt, &a, &b);
  if (dim < 0) return TPU_OK;
  int g = lw_input(cx, 0, dt), sg = tpu_ir_unary(G, TPU_IR_LOGISTIC, b);
  if (!tpu_ir_same_shape(tpu_ir_type(G, g), tpu_ir_type(G, a)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "glu_backward: grad_output must have half of self's size along dim %d", dim);
  int ga = tpu_ir_binary(G, TPU_IR_MUL, g, sg);
  int gb = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_MUL, g, a), sg),
                         tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, 1.0, sg), sg));
  return lw_output(cx, 0, tpu_ir_concat(G, 2, (int[]){ga, gb}, dim));
}
/* angle of a real tensor: pi below 0, else 0; NaN stays (integers: as float) */
static tpu_status_t lower_angle(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(OUT_DT(0));
  if (!tpu_dtype_is_floating(dt)) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "angle: expected a floating output, got %s", tpu_dtype_name(dt));
  int x = lw_input(cx, 0, dt);
  int r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, x, lw_const_like(cx, 0, x)), lw_const_like(cx, 3.14159265358979323846, x),
                        lw_const_like(cx, 0, x));
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_unary(G, TPU_IR_IS_NAN, x), x, r));
}
static tpu_status_t lower_entr(tpu_lower_ctx_t* cx) { /* -x log x; 0 at 0; -inf below 0 */
  int dt = tpu_opmath_dtype(OUT_DT(0));
  int x = lw_input(cx, 0, dt), zero = lw_const_like(cx, 0, x);
  int r = tpu_ir_unary(G, TPU_IR_NEG, tpu_ir_binary(G, TPU_IR_MUL, x, tpu_ir_unary(G, TPU_IR_LOG, x)));
  r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, x, zero), zero, r);
  r = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, x, zero), lw_const_like(cx, -INFINITY, x), r);
  return lw_output(cx, 0, tpu_ir_select(G, tpu_ir_unary(G, TPU_IR_IS_NAN, x), x, r));
}

/* ---- fill / copy / masked_fill (in-place: outs[0] is self) */
static tpu_status_t lower_fill(tpu_lower_ctx_t* cx) { /* fill_.Scalar(self, value) / fill_.Tensor */
  if (lw_rank_of(cx, 1) != 0)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "fill_ only supports 0-dimension value tensor but got tensor with %d dimensions.", lw_rank_of(cx, 1));
  return lw_output(cx, 0, lw_input(cx, 1, OUT_DT(0)));
}
static tpu_status_t lower_zero(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = &cx->outs[0];
  return lw_output(cx, 0, lw_const(cx, 0, o->dtype, 0, NULL));
}
static tpu_status_t lower_copy(tpu_lower_ctx_t* cx) { /* copy_(self, src, non_blocking) */
  return lw_output(cx, 0, lw_input(cx, 1, -1));
}
static tpu_status_t lower_masked_fill(tpu_lower_ctx_t* cx) { /* masked_fill_(self, mask, value) */
  const tpu_tensor_t* o = &cx->outs[0];
  if (lw_dtype_of(cx, 1) != TPU_DTYPE_BOOL)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "masked_fill_ only supports boolean masks, but got mask with dtype %s", tpu_dtype_name(lw_dtype_of(cx, 1)));
  if (lw_is_tensor(cx, 2) && lw_rank_of(cx, 2) != 0)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).", lw_rank_of(cx, 2));
  int x = lw_input(cx, 0, -1);
  int m = lw_bcast(cx, lw_input(cx, 1, -1), o->ndim, o->sizes);
  int v = lw_bcast(cx, lw_input(cx, 2, o->dtype), o->ndim, o->sizes);
  return lw_output(cx, 0, tpu_ir_select(G, m, v, x));
}

TPU_LOWERING_TABLE(tpu_lowerings_eltwise) = {
  {"aten::add.out", lower_add, 1u << 2, lw_key_class_is_one}, {"aten::sub.out", lower_sub, 1u << 2, lw_key_class_is_one}, {"aten::rsub.Tensor", lower_rsub},
  {"aten::mul.out", lower_mul}, {"aten::div.out", lower_div}, {"aten::div.out_mode", lower_div_mode},
  {"aten::floor_divide.out", lower_floor_divide}, {"aten::floor_divide", lower_floor_divide},
  {"aten::remainder.Tensor_out", lower_remainder}, {"aten::fmod.Tensor_out", lower_fmod},
  {"aten::pow.Tensor_Tensor_out", lower_pow}, {"aten::pow.Tensor_Scalar_out", lower_pow, 1u << 1, pow_exponent_class},
  {"aten::pow.Scalar_out", lower_pow}, {"aten::maximum.out", lower_maximum},
  {"aten::minimum.out", lower_minimum}, {"aten::atan2.out", lower_atan2},
  {"aten::bitwise_and.Tensor_out", lower_bitand}, {"aten::bitwise_or.Tensor_out", lower_bitor},
  {"aten::bitwise_xor.Tensor_out", lower_bitxor}, {"aten::bitwise_left_shift.Tensor_out", lower_shl},
  {"aten::bitwise_right_shift.Tensor_out", lower_shr}, {"aten::bitwise_not.out", lower_bitwise_not},
  {"aten::logical_and.out", lower_logical_and}, {"aten::logical_or.out", lower_logical_or},
  {"aten::logical_xor.out", lower_logical_xor}, {"aten::logical_not.out", lower_logical_not},
  {"aten::eq.Tensor_out", lower_eq}, {"aten::eq.Scalar_out", lower_eq},
  {"aten::ne.Tensor_out", lower_ne}, {"aten::ne.Scalar_out", lower_ne},
  {"aten::lt.Tensor_out", lower_lt}, {"aten::lt.Scalar_out", lower_lt},
  {"aten::le.Tensor_out", lower_le}, {"aten::le.Scalar_out", lower_le},
  {"aten::gt.Tensor_out", lower_gt}, {"aten::gt.Scalar_out", lower_gt},
  {"aten::ge.Tensor_out", lower_ge}, {"aten::ge.Scalar_out", lower_ge},
  {"aten::where.self_out", lower_where}, {"aten::where.self", lower_where},
  {"aten::clamp.out", lower_clamp}, {"aten::clamp.Tensor_out", lower_clamp},
  {"aten::clamp_min.out", lower_clamp_min}, {"aten::clamp_max.out", lower_clamp_max},
  {"aten::clamp_min.Tensor_out", lower_clamp_min}, {"aten::clamp_max.Tensor_out", lower_clamp_max},
  {"aten::lerp.Scalar_out", lower_lerp}, {"aten::lerp.Tensor_out", lower_lerp},
  {"aten::addcmul.out", lower_addcmul}, {"aten::addcdiv.out", lower_addcdiv},
  {"aten::neg.out", lower_neg}, {"aten::abs.out", lower_abs}, {"aten::sign.out", lower_sign},
  {"aten::sgn.out", lower_sign}, {"aten::exp.out", lower_exp}, {"aten::expm1.out", lower_expm1},
  {"aten::exp2.out", lower_exp2}, {"aten::log.out", lower_log}, {"aten::log1p.out", lower_log1p},
  {"aten::log2.out", lower_log2}, {"aten::log10.out", lower_log10}, {"aten::sqrt.out", lower_sqrt},
  {"aten::rsqrt.out", lower_rsqrt}, {"aten::sin.out", lower_sin}, {"aten::cos.out", lower_cos},
  {"aten::tan.out", lower_tan}, {"aten::tanh.out", lower_tanh}, {"aten::sigmoid.out", lower_sigmoid},
  {"aten::floor.out", lower_floor}, {"aten::ceil.out", lower_ceil}, {"aten::round.out", lower_round},
  {"aten::round.decimals_out", lower_round_decimals}, {"aten::trunc.out", lower_trunc},
  {"aten::frac.out", lower_frac}, {"aten::erf.out", lower_erf}, {"aten::erfinv.out", lower_erfinv},
  {"aten::asin.out", lower_asin}, {"aten::acos.out", lower_acos}, {"aten::atan.out", lower_atan},
  {"aten::sinh.out", lower_sinh}, {"aten::cosh.out", lower_cosh}, {"aten::asinh.out", lower_asinh},
  {"aten::acosh.out", lower_acosh}, {"aten::atanh.out", lower_atanh}, {"aten::lgamma.out", lower_lgamma},
  {"aten::digamma.out", lower_digamma}, {"aten::reciprocal.out", lower_reciprocal},
  {"aten::isnan", lower_isnan}, {"aten::isinf", lower_isinf}, {"aten::isfinite", lower_isfinite},
  {"aten::signbit.out", lower_signbit},
  {"aten::relu", lower_relu}, {"aten::relu_", lower_relu},
  {"aten::gelu.out", lower_gelu}, {"aten::gelu_backward.grad_input", lower_gelu_backward},
  {"aten::silu.out", lower_silu}, {"aten::silu_backward.grad_input", lower_silu_backward},
  {"aten::silu_backward", lower_silu_backward},
  {"aten::sigmoid_backward.grad_input", lower_sigmoid_backward},
  {"aten::tanh_backward.grad_input", lower_tanh_backward},
  {"aten::threshold_backward.grad_input", lower_threshold_backward},
  {"aten::threshold.out", lower_threshold},
  {"aten::leaky_relu.out", lower_leaky_relu}, {"aten::leaky_relu_backward.grad_input", lower_leaky_relu_backward},
  {"aten::hardtanh.out", lower_hardtanh}, {"aten::hardtanh", lower_hardtanh}, {"aten::hardtanh_", lower_hardtanh},
  {"aten::hardtanh_backward.grad_input", lower_hardtanh_backward},
  {"aten::hardtanh_backward", lower_hardtanh_backward},
  {"aten::elu_backward", lower_elu_backward}, {"aten::elu_backward.grad_input", lower_elu_backward},
  {"aten::softplus.out", lower_softplus}, {"aten::softplus_backward.grad_input", lower_softplus_backward},
  {"aten::elu.out", lower_elu}, {"aten::nan_to_num.out", lower_nan_to_num},
  {"aten::fill_.Scalar", lower_fill}, {"aten::fill_.Tensor", lower_fill}, {"aten::zero_", lower_zero},
  {"aten::copy_", lower_copy}, {"aten::masked_fill_.Scalar", lower_masked_fill},
  {"aten::masked_fill_.Tensor", lower_masked_fill},
  {"aten::log_sigmoid_forward", lower_log_sigmoid}, {"aten::log_sigmoid_forward.output", lower_log_sigmoid},
  {"aten::log_sigmoid_backward", lower_log_sigmoid_backward},
  {"aten::log_sigmoid_backward.grad_input", lower_log_sigmoid_backward},
  {"aten::xlogy.OutTensor", lower_xlogy}, {"aten::xlogy.OutScalar_Self", lower_xlogy},
  {"aten::xlogy.OutScalar_Other", lower_xlogy}, {"aten::special_xlog1py.out", lower_xlog1py},
  {"aten::special_xlog1py.self_scalar_out", lower_xlog1py}, {"aten::special_xlog1py.other_scalar_out", lower_xlog1py},
  {"aten::logit", lower_logit}, {"aten::logit.out", lower_logit},
  {"aten::logit_backward", lower_logit_backward}, {"aten::logit_backward.grad_input", lower_logit_backward},
  {"aten::isneginf.out", lower_isneginf}, {"aten::isposinf.out", lower_isposinf},
  {"aten::hardsigmoid", lower_hardsigmoid}, {"aten::hardsigmoid.out", lower_hardsigmoid},
  {"aten::hardswish", lower_hardswish}, {"aten::hardswish.out", lower_hardswish},
  {"aten::hardsigmoid_backward", lower_hardsigmoid_backward},
  {"aten::hardsigmoid_backward.grad_input", lower_hardsigmoid_backward},
  {"aten::hardswish_backward", lower_hardswish_backward}, {"aten::hardswish_backward.out", lower_hardswish_backward},
  {"aten::mish", lower_mish}, {"aten::mish.out", lower_mish}, {"aten::mish_backward", lower_mish_backward},
  {"aten::logaddexp.out", lower_logaddexp}, {"aten::logaddexp", lower_logaddexp},
  {"aten::logaddexp2.out", lower_logaddexp2}, {"aten::logaddexp2", lower_logaddexp2},
  {"aten::equal", lower_equal},
  {"aten::fmax.out", lower_fmax}, {"aten::fmin.out", lower_fmin},
  {"aten::copysign.out", lower_copysign}, {"aten::copysign.Scalar_out", lower_copysign},
  {"aten::hypot.out", lower_hypot}, {"aten::heaviside.out", lower_heaviside}, {"aten::sinc.out", lower_sinc},
  {"aten::softshrink.out", lower_softshrink}, {"aten::softshrink_backward.grad_input", lower_softshrink_backward},
  {"aten::softshrink_backward", lower_softshrink_backward}, {"aten::special_entr.out", lower_entr},
  {"aten::hardshrink.out", lower_hardshrink}, {"aten::hardshrink_backward.grad_input", lower_hardshrink_backward},
  {"aten::hardshrink_backward", lower_hardshrink_backward},
  {"aten::_prelu_kernel", lower_prelu}, {"aten::_prelu_kernel_backward", lower_prelu_backward},
  {"aten::glu", lower_glu}, {"aten::glu.out", lower_glu},
  {"aten::glu_backward", lower_glu_backward}, {"aten::glu_backward.grad_input", lower_glu_backward},
  {"aten::angle", lower_angle}, {"aten::angle.out", lower_angle},
  TPU_LOWERING_END
};
