/* factory.c — lowerings of tensor factories (arange, linspace, logspace, eye) and
 * random number ops (normal, uniform, bernoulli, random, exponential, log_normal,
 * cauchy, geometric, randperm).
 *
 * Ranges take their length from the output (PyTorch's meta function sized it);
 * start/end/step are runtime scalars, so arange(0, n) and arange(5, n + 5) share an
 * executable. Random ops draw from TPU_IR_RNG (Philox4x32-10, counter-based): each
 * run reserves a fresh counter range of the op's generator (lw_rng_state), so equal
 * seeds reproduce and successive calls differ. Floats are drawn in f32 (f64 for
 * f64 outputs) and transformed in the op-math dtype, rounding once. */
#include "lower/lower.h"

#define G (&cx->g)
#define I64 TPU_DTYPE_I64
#define OUT (&cx->outs[0])

static int64_t out_numel(tpu_lower_ctx_t* cx) { return tpu_numel(OUT->ndim, OUT->sizes); }
static int bc(tpu_lower_ctx_t* cx, int s) { return tpu_ir_broadcast(G, s, OUT->ndim, OUT->sizes, NULL); }
static int idx_f(tpu_lower_ctx_t* cx, int dt) { /* 0, 1, 2, ... over the (1-D) output, as dt */
  return tpu_ir_convert(G, tpu_ir_iota(G, I64, OUT->ndim, OUT->sizes, 0), dt);
}
static int c_i64(tpu_lower_ctx_t* cx, int64_t v) { /* exact (constants go through a double) */
  if (v >= -(INT64_C(1) << 53) && v <= (INT64_C(1) << 53)) return tpu_ir_constant(G, I64, (double)v);
  int64_t hi = v / (INT64_C(1) << 32), lo = v - hi * (INT64_C(1) << 32);
  int h = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_constant(G, I64, (double)hi), tpu_ir_constant(G, I64, 4294967296.0));
  return tpu_ir_binary(G, TPU_IR_ADD, h, tpu_ir_constant(G, I64, (double)lo));
}

/* ---- arange.start_out(start, end, step, *, out): out[i] = start + step * i, in the
 * accumulate type (f64 for f32/f64, f32 for f16/bf16, i64 for integers) */
static tpu_status_t lower_arange(tpu_lower_ctx_t* cx) {
  if (OUT->ndim != 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "arange: out must be 1-dimensional");
  int dt = OUT->dtype;
  if (dt == TPU_DTYPE_BOOL) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "\"arange_cpu\" not implemented for 'Bool'");
  if (out_numel(cx) == 0) return lw_output(cx, 0, lw_const(cx, 0, dt, 0, NULL));
  int acc = !tpu_dtype_is_floating(dt) ? I64 : (dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16) ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
  int start = bc(cx, lw_scalar(cx, 0, acc)), step = bc(cx, lw_scalar(cx, 2, acc));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_ADD, start, tpu_ir_binary(G, TPU_IR_MUL, step, idx_f(cx, acc))));
}

/* ---- linspace.out(start, end, steps, *, out): PyTorch's two-sided formula (the
 * second half counts back from end); the step is rounded to the output type for
 * floating outputs, kept in f64 for integers. */
static tpu_status_t lower_linspace(tpu_lower_ctx_t* cx) {
  int64_t steps = lw_int(cx, 2, 0);
  int dt = OUT->dtype;
  if (steps < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "number of steps must be non-negative");
  if (out_numel(cx) == 0) return lw_output(cx, 0, lw_const(cx, 0, dt, 0, NULL));
  int fl = tpu_dtype_is_floating(dt);
  int cdt = fl ? tpu_opmath_dtype(dt) : TPU_DTYPE_F64;
  /* start/end as scalar_t first */
  int s = tpu_ir_convert(G, lw_scalar(cx, 0, dt), cdt), e = tpu_ir_convert(G, lw_scalar(cx, 1, dt), cdt);
  if (steps == 1) return lw_output(cx, 0, bc(cx, s));
  int step = tpu_ir_binary(G, TPU_IR_DIV, tpu_ir_binary(G, TPU_IR_SUB, e, s), tpu_ir_constant(G, cdt, (double)(steps - 1)));
  if (fl) step = tpu_ir_convert(G, tpu_ir_convert(G, step, dt), cdt);
  int i = idx_f(cx, cdt);
  int lo = tpu_ir_binary(G, TPU_IR_ADD, bc(cx, s), tpu_ir_binary(G, TPU_IR_MUL, bc(cx, step), i));
  int back = tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, (double)(steps - 1), i), i);
  int hi = tpu_ir_binary(G, TPU_IR_SUB, bc(cx, e), tpu_ir_binary(G, TPU_IR_MUL, bc(cx, step), back));
  int first = tpu_ir_compare(G, TPU_IR_CMP_LT, i, lw_const_like(cx, (double)lw_size_decide(cx, TPU_SIZE_DECIDE_FLOOR_DIV, steps, 2), i));
  int r = tpu_ir_select(G, first, lo, hi);
  if (!fl) r = tpu_ir_unary(G, TPU_IR_TRUNC, r);
  return lw_output(cx, 0, r);
}

/* ---- logspace.out(start, end, steps, base, *, out): base ** linspace, in f64 */
static tpu_status_t lower_logspace(tpu_lower_ctx_t* cx) {
  int64_t steps = lw_int(cx, 2, 0);
  int dt = OUT->dtype, f = TPU_DTYPE_F64;
  if (steps < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "number of steps must be non-negative");
  if (out_numel(cx) == 0) return lw_output(cx, 0, lw_const(cx, 0, dt, 0, NULL));
  int s = tpu_ir_convert(G, lw_scalar(cx, 0, dt), f), e = tpu_ir_convert(G, lw_scalar(cx, 1, dt), f);
  int base = bc(cx, lw_scalar(cx, 3, f));
  if (steps == 1) return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_POW, base, bc(cx, s)));
  int step = tpu_ir_binary(G, TPU_IR_DIV, tpu_ir_binary(G, TPU_IR_SUB, e, s), tpu_ir_constant(G, f, (double)(steps - 1)));
  int i = idx_f(cx, f);
  int lo = tpu_ir_binary(G, TPU_IR_ADD, bc(cx, s), tpu_ir_binary(G, TPU_IR_MUL, bc(cx, step), i));
  int back = tpu_ir_binary(G, TPU_IR_SUB, lw_const_like(cx, (double)(steps - 1), i), i);
  int hi = tpu_ir_binary(G, TPU_IR_SUB, bc(cx, e), tpu_ir_binary(G, TPU_IR_MUL, bc(cx, step), back));
  int first = tpu_ir_compare(G, TPU_IR_CMP_LT, i, lw_const_like(cx, (double)lw_size_decide(cx, TPU_SIZE_DECIDE_FLOOR_DIV, steps, 2), i));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_POW, base, tpu_ir_select(G, first, lo, hi)));
}

/* ---- eye.m_out(n, m, *, out) / eye.out(n, *, out) */
static tpu_status_t lower_eye(tpu_lower_ctx_t* cx) {
  if (OUT->ndim != 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "eye: out must be 2-dimensional");
  if (out_numel(cx) == 0) return lw_output(cx, 0, lw_const(cx, 0, OUT->dtype, 0, NULL));
  int i = tpu_ir_broadcast(G, tpu_ir_iota(G, I64, 1, OUT->sizes, 0), 2, OUT->sizes, (int64_t[]){0});
  int j = tpu_ir_broadcast(G, tpu_ir_iota(G, I64, 1, OUT->sizes + 1, 0), 2, OUT->sizes, (int64_t[]){1});
  return lw_output(cx, 0, tpu_ir_compare(G, TPU_IR_CMP_EQ, i, j));
}

/* ---------------------------------------------------------------- random numbers */

enum { RNG_UNIFORM = 0, RNG_NORMAL = 1, RNG_BITS32 = 2, RNG_BITS64 = 3 };

/* Random draws shaped like output 0: floats in the op-math dtype of the output
 * (f64 for f64, else f32), or int64 bit patterns. */
static int draw(tpu_lower_ctx_t* cx, int gen_i, int mode, int dt) {
  int seed, offset;
  lw_rng_state(cx, gen_i, (uint64_t)out_numel(cx), &seed, &offset);
  return tpu_ir_rng(G, dt, OUT->ndim, OUT->sizes, seed, offset, mode);
}
static int rng_dtype(tpu_lower_ctx_t* cx) { return OUT->dtype == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32; }
static tpu_status_t need_float(tpu_lower_ctx_t* cx, const char* what) {
  if (!tpu_dtype_is_floating(OUT->dtype))
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "\"%s\" not implemented for '%s'", what, tpu_dtype_name(OUT->dtype));
  return TPU_OK;
}
static int scal(tpu_lower_ctx_t* cx, int i, int dt) { return bc(cx, lw_scalar(cx, i, dt)); }
static int tens(tpu_lower_ctx_t* cx, int i, int dt) { return lw_bcast(cx, lw_input(cx, i, dt), OUT->ndim, OUT->sizes); }

/* normal_(self, mean, std, *, generator) */
static tpu_status_t lower_normal_(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(need_float(cx, "normal_kernel_cpu"));
  lw_check_scalar(cx, 2, TPU_IR_CMP_GE, 0.0, -1, "normal expects std >= 0.0, but found std %g");
  int dt = rng_dtype(cx);
  int z = draw(cx, 3, RNG_NORMAL, dt);
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_ADD, tpu_ir_binary(G, TPU_IR_MUL, z, scal(cx, 2, dt)), scal(cx, 1, dt)));
}
/* normal.{Tensor_float, float_Tensor, Tensor_Tensor}(mean, std, *, generator[, out]) */
static tpu_status_t lower_normal_fn(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(need_float(cx, "normal"));
  int dt = rng_dtype(cx);
  int z = draw(cx, 2, RNG_NORMAL, dt);
  int mean = lw_is_tensor(cx, 0) && !lw_is_scalar_arg(cx, 0) ? tens(cx, 0, dt) : scal(cx, 0, dt);
  int std = lw_is_tensor(cx, 1) && !lw_is_scalar_arg(cx, 1) ? tens(cx, 1, dt) : scal(cx, 1, dt);
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_ADD, tpu_ir_binary(G, TPU_IR_MUL, z, std), mean));
}
/* normal.float_float_out(mean, std, size, *, generator, out) */
static tpu_status_t lower_normal_ff(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(need_float(cx, "normal"));
  lw_check_scalar(cx, 1, TPU_IR_CMP_GE, 0.0, -1, "normal expects std >= 0.0, but found std %g");
  int dt = rng_dtype(cx);
  int z = draw(cx, 3, RNG_NORMAL, dt);
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_ADD, tpu_ir_binary(G, TPU_IR_MUL, z, scal(cx, 1, dt)), scal(cx, 0, dt)));
}
/* log_normal_(self, mean, std, *, generator) = exp(normal(mean, std)) */
static tpu_status_t lower_log_normal_(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(need_float(cx, "log_normal_cpu"));
  int dt = rng_dtype(cx);
  int z = draw(cx, 3, RNG_NORMAL, dt);
  int n = tpu_ir_binary(G, TPU_IR_ADD, tpu_ir_binary(G, TPU_IR_MUL, z, scal(cx, 2, dt)), scal(cx, 1, dt));
  return lw_output(cx, 0, tpu_ir_unary(G, TPU_IR_EXP, n));
}

/* uniform_(self, from, to, *, generator): from + u (to - from); for f16/bf16 a value
 * that rounds up to `to` is moved just below it so the result stays in [from, to). */
static tpu_status_t lower_uniform_(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(need_float(cx, "uniform_kernel_cpu"));
  lw_check_scalar(cx, 1, TPU_IR_CMP_LE, 0.0, 2, "uniform_ expects to return a [from, to) range, but found from=%g > to=%g");
  int dt = rng_dtype(cx), odt = OUT->dtype;
  int u = draw(cx, 3, RNG_UNIFORM, dt);
  int from = scal(cx, 1, dt), to = scal(cx, 2, dt);
  int r = tpu_ir_binary(G, TPU_IR_ADD, from, tpu_ir_binary(G, TPU_IR_MUL, u, tpu_ir_binary(G, TPU_IR_SUB, to, from)));
  if (odt == TPU_DTYPE_BF16 || odt == TPU_DTYPE_F16) {
    double ulp = odt == TPU_DTYPE_BF16 ? 1.0 / 128 : 1.0 / 1024; /* relative spacing bound */
    int rounded = tpu_ir_convert(G, tpu_ir_convert(G, r, odt), dt);
    int over = tpu_ir_compare(G, TPU_IR_CMP_GE, rounded, to);
    int below = tpu_ir_binary(G, TPU_IR_SUB, r, tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_unary(G, TPU_IR_ABS, to), lw_const_like(cx, ulp, r)));
    below = tpu_ir_binary(G, TPU_IR_MAX, below, from);
    r = tpu_ir_select(G, over, below, r);
  }
  return lw_output(cx, 0, r);
}
/* exponential_(self, lambd, *, generator) = -log(1 - u) / lambd */
static tpu_status_t lower_exponential_(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(need_float(cx, "exponential_cpu"));
  int dt = rng_dtype(cx);
  int u = draw(cx, 2, RNG_UNIFORM, dt);
  int l = tpu_ir_unary(G, TPU_IR_LOG1P, tpu_ir_unary(G, TPU_IR_NEG, u));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_DIV, tpu_ir_unary(G, TPU_IR_NEG, l), scal(cx, 1, dt)));
}
/* cauchy_(self, median, sigma, *, generator) = median + sigma tan(pi (u - 1/2)) */
static tpu_status_t lower_cauchy_(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(need_float(cx, "cauchy_cpu"));
  int dt = rng_dtype(cx);
  int u = draw(cx, 3, RNG_UNIFORM, dt);
  int a = tpu_ir_binary(G, TPU_IR_MUL, tpu_ir_binary(G, TPU_IR_SUB, u, lw_const_like(cx, 0.5, u)), lw_const_like(cx, M_PI, u));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_ADD, scal(cx, 1, dt), tpu_ir_binary(G, TPU_IR_MUL, scal(cx, 2, dt), tpu_ir_unary(G, TPU_IR_TAN, a))));
}
/* geometric_(self, p, *, generator) = ceil(log(1 - u) / log1p(-p)), at least 1 */
static tpu_status_t lower_geometric_(tpu_lower_ctx_t* cx) {
  int dt = OUT->dtype == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
  int u = draw(cx, 2, RNG_UNIFORM, dt);
  int num = tpu_ir_unary(G, TPU_IR_LOG1P, tpu_ir_unary(G, TPU_IR_NEG, u));
  int den = tpu_ir_unary(G, TPU_IR_LOG1P, tpu_ir_unary(G, TPU_IR_NEG, scal(cx, 1, dt)));
  int r = tpu_ir_unary(G, TPU_IR_CEIL, tpu_ir_binary(G, TPU_IR_DIV, num, den));
  return lw_output(cx, 0, tpu_ir_binary(G, TPU_IR_MAX, r, lw_const_like(cx, 1, r)));
}

/* bernoulli_.float(self, p, *, generator) / bernoulli_.Tensor(self, p, *, generator) /
 * bernoulli(self = p, *, generator) [.out]: u < p */
static tpu_status_t bernoulli(tpu_lower_ctx_t* cx, int p_i, int gen_i) {
  int dt = lw_is_tensor(cx, p_i) && lw_dtype_of(cx, p_i) == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
  if (lw_is_tensor(cx, p_i) && !tpu_dtype_is_floating(lw_dtype_of(cx, p_i)))
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "\"bernoulli_tensor_cpu_p_\" not implemented for '%s'", tpu_dtype_name(lw_dtype_of(cx, p_i)));
  if (lw_is_scalar_arg(cx, p_i)) {
    lw_check_scalar(cx, p_i, TPU_IR_CMP_GE, 0.0, -1, "bernoulli_ expects p to be in [0, 1], but got p=%g");
    lw_check_scalar(cx, p_i, TPU_IR_CMP_LE, 1.0, -1, "bernoulli_ expects p to be in [0, 1], but got p=%g");
  }
  int u = draw(cx, gen_i, RNG_UNIFORM, dt);
  int p = lw_is_scalar_arg(cx, p_i) ? scal(cx, p_i, dt) : tens(cx, p_i, dt);
  return lw_output(cx, 0, tpu_ir_compare(G, TPU_IR_CMP_LT, u, p));
}
static tpu_status_t lower_bernoulli_p(tpu_lower_ctx_t* cx) { return bernoulli(cx, 1, 2); }
static tpu_status_t lower_bernoulli_self(tpu_lower_ctx_t* cx) { return bernoulli(cx, 0, 1); }

/* random_ family: integers uniform in [from, to) (to = None: up to the dtype's
 * largest value; floats: 2^digits, as PyTorch). 32 random bits serve ranges up to
 * 2^32, 64 bits larger ones. */
static tpu_status_t random_impl(tpu_lower_ctx_t* cx, int64_t from, int has_to, int64_t to, int gen_i) {
  int dt = OUT->dtype;
  uint64_t range; /* 0 = 2^64 */
  if (!has_to) {
    int64_t top;
    switch (dt) {
      case TPU_DTYPE_F32: top = INT64_C(1) << 24; break;
      case TPU_DTYPE_F64: top = INT64_C(1) << 53; break;
      case TPU_DTYPE_F16: top = INT64_C(1) << 11; break;
      case TPU_DTYPE_BF16: top = INT64_C(1) << 8; break;
      case TPU_DTYPE_I64: top = INT64_MAX; break;
      case TPU_DTYPE_I32: top = INT32_MAX; break;
      case TPU_DTYPE_I16: top = INT16_MAX; break;
      case TPU_DTYPE_I8: top = INT8_MAX; break;
      case TPU_DTYPE_U8: top = 255; break;
      default: top = 1; break;
    }
    if (from > top)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' casted to dtype, but got from=%lld > to_inc=%lld",
                     (long long)from, (long long)top);
    range = (uint64_t)top - (uint64_t)from + 1u;
  } else {
    if (from >= to)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld", (long long)from, (long long)to);
    range = (uint64_t)to - (uint64_t)from;
  }
  if (out_numel(cx) == 0) return lw_output(cx, 0, lw_const(cx, 0, dt, 0, NULL));
  int v;
  if (range == 0) v = draw(cx, gen_i, RNG_BITS64, I64); /* all of int64 */
  else {
    int bits = draw(cx, gen_i, range <= (UINT64_C(1) << 32) ? RNG_BITS32 : RNG_BITS64, I64);
    if (!(range & (range - 1)))        /* power of two: low bits */
      v = tpu_ir_binary(G, TPU_IR_AND, bits, bc(cx, c_i64(cx, (int64_t)(range - 1))));
    else if (range <= (uint64_t)INT64_MAX)
      v = tpu_ir_binary(G, TPU_IR_REM, bits, bc(cx, c_i64(cx, (int64_t)range)));  /* floor mod: [0, range) */
    else { /* 2^63 < range < 2^64: unsigned bits mod range = bits < range ? bits : bits - range */
      int flip = bc(cx, c_i64(cx, INT64_MIN)), r = bc(cx, c_i64(cx, (int64_t)range));
      int lt = tpu_ir_compare(G, TPU_IR_CMP_LT, tpu_ir_binary(G, TPU_IR_XOR, bits, flip), tpu_ir_binary(G, TPU_IR_XOR, r, flip));
      v = tpu_ir_select(G, lt, bits, tpu_ir_binary(G, TPU_IR_SUB, bits, r));
    }
    if (from != 0) v = tpu_ir_binary(G, TPU_IR_ADD, v, bc(cx, c_i64(cx, from)));
  }
  return lw_output(cx, 0, v);
}
static tpu_status_t lower_random_(tpu_lower_ctx_t* cx) { return random_impl(cx, 0, 0, 0, 1); }
static tpu_status_t lower_random_to(tpu_lower_ctx_t* cx) { return random_impl(cx, 0, 1, lw_int(cx, 1, 0), 2); }
static tpu_status_t lower_random_from(tpu_lower_ctx_t* cx) {
  return random_impl(cx, lw_int(cx, 1, 0), !lw_is_none(cx, 2), lw_int(cx, 2, 0), 3);
}

/* randperm.generator_out(n, *, generator, out): argsort of random keys */
static tpu_status_t lower_randperm(tpu_lower_ctx_t* cx) {
  int64_t n = lw_int(cx, 0, 0);
  if (n < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "n must be non-negative, got%lld", (long long)n);
  if (OUT->ndim != 1 || OUT->sizes[0] != n) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "randperm: out must have shape [%lld]", (long long)n);
  if (n == 0) return lw_output(cx, 0, lw_const(cx, 0, OUT->dtype, 0, NULL));
  int keys = draw(cx, 1, RNG_BITS64, I64);
  return lw_output(cx, 0, tpu_ir_sort(G, keys, 0, 0, 1));
}

TPU_LOWERING_TABLE(tpu_lowerings_factory) = {
  {"aten::arange.start_out", lower_arange}, {"aten::linspace.out", lower_linspace},
  {"aten::logspace.out", lower_logspace}, {"aten::eye.m_out", lower_eye}, {"aten::eye.out", lower_eye},
  {"aten::normal_", lower_normal_}, {"aten::normal.Tensor_float", lower_normal_fn},
  {"aten::normal.float_Tensor", lower_normal_fn}, {"aten::normal.Tensor_Tensor", lower_normal_fn},
  {"aten::normal.Tensor_float_out", lower_normal_fn}, {"aten::normal.float_Tensor_out", lower_normal_fn},
  {"aten::normal.Tensor_Tensor_out", lower_normal_fn}, {"aten::normal.float_float_out", lower_normal_ff},
  {"aten::log_normal_", lower_log_normal_},
  {"aten::uniform_", lower_uniform_}, {"aten::exponential_", lower_exponential_},
  {"aten::cauchy_", lower_cauchy_}, {"aten::geometric_", lower_geometric_},
  {"aten::bernoulli_.float", lower_bernoulli_p}, {"aten::bernoulli_.Tensor", lower_bernoulli_p},
  {"aten::bernoulli", lower_bernoulli_self}, {"aten::bernoulli.out", lower_bernoulli_self},
  {"aten::random_", lower_random_}, {"aten::random_.to", lower_random_to}, {"aten::random_.from", lower_random_from},
  {"aten::randperm.generator_out", lower_randperm},
  TPU_LOWERING_END
};
