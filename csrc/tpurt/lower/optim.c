/* optim.c — fused optimizer steps (_fused_adam_, _fused_adamw_, _fused_sgd_) and the
 * GradScaler ops (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_): one
 * graph per call over the tensor lists (the registry runs long lists as several
 * calls over slices). The math mirrors PyTorch's CPU fused kernels (FusedAdamKernel,
 * FusedSGDKernel): per-call coefficients in f64, cast once to the op-math dtype;
 * each updated tensor rounds once to its own dtype. Runtime-scalar conditions
 * (weight_decay != 0, momentum != 0, found_inf == 1) are selects, not branches.
 *
 * Outputs, as the glue passes them: the tensors of every written list in schema
 * order — params, grads, (exp_avgs, exp_avg_sqs, max_exp_avg_sqs | momentum bufs). */
#include "lower/lower.h"

#define G (&cx->g)
#define BIN(op, a, b) tpu_ir_binary(G, TPU_IR_##op, (a), (b))
#define MAXN TPU_IR_MAX_OUTPUTS

static int bc(tpu_lower_ctx_t* cx, int s, int like) { return lw_bcast_like(cx, s, like); }
static int as_scalar(tpu_lower_ctx_t* cx, int v) { /* a 1-element tensor as rank 0 */
  if (v < 0) return v;
  if (tpu_ir_numel(tpu_ir_type(G, v)) != 1)
    return tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: expected a one-element tensor", cx->op_name));
  return tpu_ir_reshape(G, v, 0, NULL);
}
/* f64 scalar input (float arg or a one-element tensor such as lr / step) */
static int in_f64(tpu_lower_ctx_t* cx, int i) { return as_scalar(cx, lw_input(cx, i, TPU_DTYPE_F64)); }
static int c64(tpu_lower_ctx_t* cx, double v) { return tpu_ir_constant(G, TPU_DTYPE_F64, v); }

/* lists 0..nl-1 must all have length n (list `opt_list` may also be empty) and
 * match list 0's shapes (except `steps_list`, the 0-dim step counters) */
static int list_check(tpu_lower_ctx_t* cx, int nl, int opt_list, int steps_list, int* out_n) {
  int n = lw_list_len(cx, 0);
  if (n < 0) { tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: expected tensor lists", cx->op_name)); return 0; }
  if (n > MAXN) { tpu_ir_fail(G, TPU_ERR(UNSUPPORTED, "%s: at most %d tensors per call", cx->op_name, MAXN)); return 0; }
  for (int l = 1; l < nl; ++l) {
    int len = lw_list_len(cx, l);
    if (len == n || (l == opt_list && len == 0)) continue;
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: tensor list %d has %d tensors, expected %d", cx->op_name, l, len, n));
    return 0;
  }
  for (int l = 0; l < nl; ++l)
    for (int j = 0; j < lw_list_len(cx, l); ++j) {
      const tpu_tensor_t* t = lw_list_meta(cx, l, j);
      const tpu_tensor_t* p = lw_list_meta(cx, 0, j);
      if (!t || !p) { tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: undefined tensor in list %d", cx->op_name, l)); return 0; }
      if (l == 0 || l == steps_list) continue;
      if (t->ndim != p->ndim || memcmp(t->sizes, p->sizes, (size_t)p->ndim * sizeof(int64_t))) {
        tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: tensor %d of list %d does not match its parameter's shape", cx->op_name, j, l));
        return 0;
      }
      if (!tpu_dtype_is_floating(t->dtype)) {
        tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: expected floating point tensors, got %s", cx->op_name, tpu_dtype_name(t->dtype)));
        return 0;
      }
    }
  if (cx->nouts != 0 && cx->nouts % (n ? n : 1)) {
    tpu_ir_fail(G, TPU_ERR(INTERNAL, "%s: %d outputs for %d tensors", cx->op_name, cx->nouts, n));
    return 0;
  }
  *out_n = n;
  return cx->g.status == TPU_OK;
}
/* grad_scale (ig) / found_inf (ifound): optional one-element tensors */
static int opt_scalar(tpu_lower_ctx_t* cx, int i) { return lw_is_none(cx, i) ? -1 : in_f64(cx, i); }
/* found_inf == 1: keep the old value (PyTorch's kernels return before touching anything) */
static int guard(tpu_lower_ctx_t* cx, int found, int old, int nw) {
  if (found < 0 || nw < 0) return nw;
  int is_inf = tpu_ir_compare(G, TPU_IR_CMP_EQ, found, c64(cx, 1.0));
  return tpu_ir_select(G, lw_bcast_like(cx, is_inf, nw), old, nw);
}

/* _fused_adam_ / _fused_adamw_ (and .tensor_lr)
 *   (self[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[], state_steps[], *, lr,
 *    float beta1, float beta2, float weight_decay, float eps, bool amsgrad, bool maximize,
 *    Tensor? grad_scale, Tensor? found_inf) */
static tpu_status_t lw_fused_adam(tpu_lower_ctx_t* cx, int adamw) {
  int n;
  if (!list_check(cx, 6, 4, 5, &n)) return TPU_OK;
  int amsgrad = (int)lw_int(cx, 11, 0), maximize = (int)lw_int(cx, 12, 0);
  int has_max = lw_list_len(cx, 4) == n && n > 0;
  if (amsgrad && !has_max)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: amsgrad needs max_exp_avg_sqs", cx->op_name);
  int nblocks = 4 + has_max;
  if (cx->nouts != nblocks * n)
    return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: expected %d outputs, got %d", cx->op_name, nblocks * n, cx->nouts);
  int lr = in_f64(cx, 6), b1 = lw_scalar(cx, 7, TPU_DTYPE_F64), b2 = lw_scalar(cx, 8, TPU_DTYPE_F64);
  int wd = lw_scalar(cx, 9, TPU_DTYPE_F64), eps = lw_scalar(cx, 10, TPU_DTYPE_F64);
  int gscale = opt_scalar(cx, 13), found = opt_scalar(cx, 14);
  int one = c64(cx, 1.0);
  int wd_nz = tpu_ir_compare(G, TPU_IR_CMP_NE, wd, c64(cx, 0));
  int res[5][MAXN];
  for (int i = 0; i < n; ++i) {
    int dt = tpu_opmath_dtype(lw_list_meta(cx, 0, i)->dtype);
    int p0 = lw_list_input(cx, 0, i, dt), g0 = lw_list_input(cx, 1, i, dt);
    int m0 = lw_list_input(cx, 2, i, dt), v0 = lw_list_input(cx, 3, i, dt);
    int vm0 = has_max ? lw_list_input(cx, 4, i, dt) : -1;
    int step = as_scalar(cx, lw_list_input(cx, 5, i, TPU_DTYPE_F64));
    /* per-tensor coefficients (f64, as the CPU kernel's doubles) */
    int bc1 = BIN(SUB, one, BIN(POW, b1, step)), bc2 = BIN(SUB, one, BIN(POW, b2, step));
    int step_size = tpu_ir_convert(G, BIN(DIV, lr, bc1), dt);
    int bc2_sqrt = tpu_ir_convert(G, tpu_ir_unary(G, TPU_IR_SQRT, bc2), dt);
    int c1 = tpu_ir_convert(G, BIN(SUB, one, b1), dt), c2 = tpu_ir_convert(G, BIN(SUB, one, b2), dt);
    int p = p0, g = g0;
    if (gscale >= 0) g = BIN(DIV, g, bc(cx, tpu_ir_convert(G, gscale, dt), g));
    int g_out = g;
    if (maximize) g = tpu_ir_unary(G, TPU_IR_NEG, g);
    if (adamw) {
      int decay = tpu_ir_convert(G, BIN(SUB, one, BIN(MUL, lr, wd)), dt);
      p = tpu_ir_select(G, bc(cx, wd_nz, p), BIN(MUL, p, bc(cx, decay, p)), p);
    } else {
      int gw = BIN(ADD, g, BIN(MUL, p, bc(cx, tpu_ir_convert(G, wd, dt), p)));
      g = tpu_ir_select(G, bc(cx, wd_nz, g), gw, g);
    }
    /* exp_avg.lerp_(grad, 1 - beta1) */
    int w = bc(cx, c1, g), diff = BIN(SUB, g, m0);
    int small = tpu_ir_compare(G, TPU_IR_CMP_LT, tpu_ir_unary(G, TPU_IR_ABS, w), lw_const_like(cx, 0.5, w));
    int m = tpu_ir_select(G, small, BIN(ADD, m0, BIN(MUL, w, diff)),
                          BIN(SUB, g, BIN(MUL, diff, BIN(SUB, lw_const_like(cx, 1.0, w), w))));
    int v = BIN(ADD, BIN(MUL, v0, bc(cx, tpu_ir_convert(G, b2, dt), v0)), BIN(MUL, BIN(MUL, bc(cx, c2, g), g), g));
    int vm = has_max ? BIN(MAX, vm0, v) : -1;
    int denom = BIN(ADD, BIN(DIV, tpu_ir_unary(G, TPU_IR_SQRT, amsgrad ? vm : v), bc(cx, bc2_sqrt, v)),
                    bc(cx, tpu_ir_convert(G, eps, dt), v));
    int pn = BIN(SUB, p, BIN(DIV, BIN(MUL, bc(cx, step_size, m), m), denom));
    int fnd = found;
    res[0][i] = guard(cx, fnd, p0, pn);
    res[1][i] = guard(cx, fnd, g0, g_out);
    res[2][i] = guard(cx, fnd, m0, m);
    res[3][i] = guard(cx, fnd, v0, v);
    if (has_max) res[4][i] = guard(cx, fnd, vm0, amsgrad ? vm : vm0);
  }
  for (int b = 0; b < nblocks; ++b)
    for (int i = 0; i < n; ++i) lw_output(cx, b * n + i, res[b][i]);
  return TPU_OK;
}
static tpu_status_t lower_fused_adam(tpu_lower_ctx_t* cx) { return lw_fused_adam(cx, 0); }
static tpu_status_t lower_fused_adamw(tpu_lower_ctx_t* cx) { return lw_fused_adam(cx, 1); }

/* _fused_sgd_(.tensor_lr)(self[], grads[], momentum_buffer_list[], *, float weight_decay,
 *   float momentum, lr, float dampening, bool nesterov, bool maximize, bool is_first_step,
 *   Tensor? grad_scale, Tensor? found_inf) */
static tpu_status_t lower_fused_sgd(tpu_lower_ctx_t* cx) {
  int n;
  if (!list_check(cx, 3, 2, -1, &n)) return TPU_OK;
  int has_buf = lw_list_len(cx, 2) == n && n > 0;
  int nesterov = (int)lw_int(cx, 7, 0), maximize = (int)lw_int(cx, 8, 0), first = (int)lw_int(cx, 9, 0);
  int nblocks = 2 + has_buf;
  if (cx->nouts != nblocks * n)
    return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: expected %d outputs, got %d", cx->op_name, nblocks * n, cx->nouts);
  int wd = lw_scalar(cx, 3, TPU_DTYPE_F64), mom = lw_scalar(cx, 4, TPU_DTYPE_F64);
  int lr = in_f64(cx, 5), damp = lw_scalar(cx, 6, TPU_DTYPE_F64);
  int gscale = opt_scalar(cx, 10), found = opt_scalar(cx, 11);
  int wd_nz = tpu_ir_compare(G, TPU_IR_CMP_NE, wd, c64(cx, 0));
  int mom_nz = tpu_ir_compare(G, TPU_IR_CMP_NE, mom, c64(cx, 0));
  int res[3][MAXN];
  for (int i = 0; i < n; ++i) {
    int dt = tpu_opmath_dtype(lw_list_meta(cx, 0, i)->dtype);
    int p0 = lw_list_input(cx, 0, i, dt), g0 = lw_list_input(cx, 1, i, dt);
    int g = g0;
    if (gscale >= 0) g = BIN(DIV, g, bc(cx, tpu_ir_convert(G, gscale, dt), g));
    int g_out = g;
    if (maximize) g = tpu_ir_unary(G, TPU_IR_NEG, g);
    g = tpu_ir_select(G, bc(cx, wd_nz, g), BIN(ADD, g, BIN(MUL, p0, bc(cx, tpu_ir_convert(G, wd, dt), p0))), g);
    int buf = -1, buf0 = -1;
    if (has_buf) {
      buf0 = lw_list_input(cx, 2, i, dt);
      int momf = bc(cx, tpu_ir_convert(G, mom, dt), g);
      int nb = first ? g
                     : BIN(ADD, BIN(MUL, buf0, momf),
                           BIN(MUL, g, bc(cx, tpu_ir_convert(G, BIN(SUB, c64(cx, 1.0), damp), dt), g)));
      int gm = nesterov ? BIN(ADD, g, BIN(MUL, nb, momf)) : nb;
      int on = bc(cx, mom_nz, g);
      buf = tpu_ir_select(G, on, nb, buf0);
      g = tpu_ir_select(G, on, gm, g);
    }
    int pn = BIN(SUB, p0, BIN(MUL, g, bc(cx, tpu_ir_convert(G, lr, dt), g)));
    res[0][i] = guard(cx, found, p0, pn);
    res[1][i] = guard(cx, found, g0, g_out);
    if (has_buf) res[2][i] = guard(cx, found, buf0, buf);
  }
  for (int b = 0; b < nblocks; ++b)
    for (int i = 0; i < n; ++i) lw_output(cx, b * n + i, res[b][i]);
  return TPU_OK;
}

/* ---- GradScaler (torch.amp): the CPU kernels' semantics (AmpKernels.cpp). */
static int one_elem_float(tpu_lower_ctx_t* cx, int i, const char* what) {
  const tpu_tensor_t* t = lw_is_tensor(cx, i) ? cx->args[i].tensor : NULL;
  tpu_status_t st = TPU_OK;
  int64_t numel = 1;
  for (int d = 0; t && d < t->ndim; ++d) numel *= t->sizes[d];
  if (!t) st = TPU_ERR(INVALID_ARGUMENT, "%s: %s must be a tensor", cx->op_name, what);
  else if (numel != 1) st = TPU_ERR(INVALID_ARGUMENT, "%s must be a 1-element tensor.", what);
  else if (t->dtype != TPU_DTYPE_F32) st = TPU_ERR(INVALID_ARGUMENT, "%s must be a float tensor.", what);
  if (st) tpu_ir_fail(G, st);
  return st == TPU_OK;
}

/* _amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) found_inf,
 *   Tensor inv_scale): self[i] *= inv_scale (op-math dtype, rounded once); found_inf = 1
 * if any element of any tensor is inf/NaN, else unchanged (so the registry may run a
 * long list as slices that share found_inf). Outputs: self[0..n), found_inf. */
static tpu_status_t lower_amp_unscale(tpu_lower_ctx_t* cx) {
  int n = lw_list_len(cx, 0);
  if (n < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: expected a tensor list", cx->op_name);
  if (n + 1 > MAXN) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: at most %d tensors per call", cx->op_name, MAXN - 1);
  if (cx->nouts != n + 1) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: expected %d outputs, got %d", cx->op_name, n + 1, cx->nouts);
  if (!one_elem_float(cx, 1, "found_inf") || !one_elem_float(cx, 2, "inv_scale")) return TPU_OK;
  int found0 = as_scalar(cx, lw_input(cx, 1, TPU_DTYPE_F32));
  int inv = as_scalar(cx, lw_input(cx, 2, TPU_DTYPE_F32));
  int any = tpu_ir_constant(G, TPU_DTYPE_BOOL, 0);
  int res[MAXN];
  for (int i = 0; i < n; ++i) {
    const tpu_tensor_t* t = lw_list_meta(cx, 0, i);
    if (!t) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: undefined tensor in the list", cx->op_name);
    if (!tpu_dtype_is_floating(t->dtype))
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: expected floating point tensors, got %s", cx->op_name, tpu_dtype_name(t->dtype));
    int dt = tpu_opmath_dtype(t->dtype);
    int x = lw_list_input(cx, 0, i, dt);
    int64_t all[TPU_MAX_DIMS];
    for (int d = 0; d < t->ndim; ++d) all[d] = 1;
    int bad = tpu_ir_unary(G, TPU_IR_NOT, tpu_ir_unary(G, TPU_IR_IS_FINITE, x));
    if (t->ndim > 0) bad = tpu_ir_reduce(G, TPU_IR_MONOID_OR, bad, all);
    any = BIN(OR, any, bad);
    res[i] = BIN(MUL, x, bc(cx, tpu_ir_convert(G, inv, dt), x));
  }
  int found = tpu_ir_select(G, any, tpu_ir_constant(G, TPU_DTYPE_F32, 1.0), found0);
  for (int i = 0; i < n; ++i) lw_output(cx, i, res[i]);
  return lw_output(cx, n, found);
}

/* _amp_update_scale_(Tensor(a!) self, Tensor(b!) growth_tracker, Tensor found_inf,
 *   float scale_growth_factor, float scale_backoff_factor, int growth_interval):
 * found_inf: scale *= backoff, tracker = 0; else tracker + 1 == interval: scale *= growth
 * (kept only if finite), tracker = 0; else tracker += 1. Products in f64, rounded to f32.
 * Outputs: self, growth_tracker. */
static tpu_status_t lower_amp_update_scale(tpu_lower_ctx_t* cx) {
  if (!one_elem_float(cx, 0, "current_scale") || !one_elem_float(cx, 2, "found_inf")) return TPU_OK;
  const tpu_tensor_t* gt = lw_is_tensor(cx, 1) ? cx->args[1].tensor : NULL;
  if (!gt || gt->dtype != TPU_DTYPE_I32)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "growth_tracker must be an int tensor.");
  int64_t numel = 1;
  for (int d = 0; d < gt->ndim; ++d) numel *= gt->sizes[d];
  if (numel != 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "growth_tracker must be a 1-element tensor.");
  if (cx->nouts != 2) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: expected 2 outputs, got %d", cx->op_name, cx->nouts);
  int scale = as_scalar(cx, lw_input(cx, 0, TPU_DTYPE_F64));
  int tracker = as_scalar(cx, lw_input(cx, 1, TPU_DTYPE_I32));
  int found = as_scalar(cx, lw_input(cx, 2, TPU_DTYPE_F32));
  int growth = lw_scalar(cx, 3, TPU_DTYPE_F64), backoff = lw_scalar(cx, 4, TPU_DTYPE_F64);
  int interval = tpu_ir_constant(G, TPU_DTYPE_I32, (double)lw_int(cx, 5, 2000));
  int is_inf = tpu_ir_compare(G, TPU_IR_CMP_NE, found, tpu_ir_constant(G, TPU_DTYPE_F32, 0.0));
  int succ = BIN(ADD, tracker, tpu_ir_constant(G, TPU_DTYPE_I32, 1));
  int grow = tpu_ir_compare(G, TPU_IR_CMP_EQ, succ, interval);
  int grown = tpu_ir_convert(G, BIN(MUL, scale, growth), TPU_DTYPE_F32);
  int scale32 = tpu_ir_convert(G, scale, TPU_DTYPE_F32);
  int kept = tpu_ir_select(G, tpu_ir_unary(G, TPU_IR_IS_FINITE, grown), grown, scale32);
  int zero = tpu_ir_constant(G, TPU_DTYPE_I32, 0);
  int new_scale = tpu_ir_select(G, is_inf, tpu_ir_convert(G, BIN(MUL, scale, backoff), TPU_DTYPE_F32),
                                tpu_ir_select(G, grow, kept, scale32));
  int new_tracker = tpu_ir_select(G, is_inf, zero, tpu_ir_select(G, grow, zero, succ));
  lw_output(cx, 0, new_scale);
  return lw_output(cx, 1, new_tracker);
}

TPU_LOWERING_TABLE(tpu_lowerings_optim) = {
  {"aten::_fused_adam_", lower_fused_adam}, {"aten::_fused_adam_.tensor_lr", lower_fused_adam},
  {"aten::_fused_adamw_", lower_fused_adamw}, {"aten::_fused_adamw_.tensor_lr", lower_fused_adamw},
  {"aten::_fused_sgd_", lower_fused_sgd}, {"aten::_fused_sgd_.tensor_lr", lower_fused_sgd},
  {"aten::_amp_foreach_non_finite_check_and_unscale_", lower_amp_unscale},
  {"aten::_amp_update_scale_", lower_amp_update_scale},
  TPU_LOWERING_END
};
