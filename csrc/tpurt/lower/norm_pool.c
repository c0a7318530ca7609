/* norm_pool.c — lowerings of batch norm (native_batch_norm with running-stat updates,
 * _native_batch_norm_legit[.no_stats], _batch_norm_with_update, backward), group norm
 * (+ backward), max pooling 1-3d with indices, max_unpool, average and adaptive
 * average / max pooling 2d/3d (+ backward), and nearest / nearest-exact / linear /
 * bilinear / bicubic / trilinear upsampling (+ backward).
 *
 * No value-dependent branching; Scalars (momentum, eps, scale factors) stay runtime values:
 *   - Batch norm (non-empty inputs): the host's channel kernels (custom targets CHANNEL_STATS /
 *     CHANNEL_AFFINE, drivers/host/norm.h) on x viewed [N, C, rest]; small [C] vectors in between
 *     are plain IR. Group norm (non-empty inputs): the host's group-norm targets on x viewed
 *     [N, C, HxW]: forward GROUP_NORM_STATS ([2, N, G] mean, rstd) + GROUP_NORM (y); backward
 *     GROUP_NORM_SUMS ([2, N + 1, C]: per (n, c) sums, d bias, d weight; only when either is
 *     requested) + GROUP_NORM_BWD (d x). Empty inputs keep the composite reduce formulas.
 *   - Max pooling with fixed windows: the host's window-argmax kernel (custom target
 *     POOL_ARGMAX, drivers/host/pool.c, PyTorch's CPU NaN/tie rules) gives the flat
 *     spatial indices; the values are a gather at them.
 *     Adaptive max pooling uses the same kernel with adaptive windows.
 *   - Average pools gather each window from the input flattened to [B, P] (P = spatial
 *     numel) with an index table [O..., K...] built from iotas (positions outside the
 *     input masked to 0) and sum over the window.
 *     Adaptive windows: start = floor(o*S/O), end = ceil((o+1)*S/O), padded to the
 *     longest window and masked. Backward passes scatter-add into [B, P].
 *   - Upsampling is separable: nearest modes index_select per spatial dim (exact);
 *     linear / cubic modes, and every backward, multiply each spatial dim by an
 *     [out, in] resampling matrix (GEMM) built from iotas and PyTorch's source-index
 *     formulas in the op-math dtype.
 *   - native_batch_norm in training mode writes running_mean / running_var, which its
 *     schema does not mark written: the lowering binds them with lw_output_arg. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/lower.h"

#define G (&cx->g)
#define BIN(op, a, b) tpu_ir_binary(G, TPU_IR_##op, (a), (b))
#define UN(op, a) tpu_ir_unary(G, TPU_IR_##op, (a))
#define I64 TPU_DTYPE_I64

static tpu_ir_type_t type_of(tpu_lower_ctx_t* cx, int v) {
  tpu_ir_type_t t = {0};
  if (v >= 0) t = *tpu_ir_type(G, v);
  return t;
}
static int float_check(tpu_lower_ctx_t* cx, int dt) {
  if (tpu_dtype_is_floating(dt)) return 1;
  tpu_ir_fail(G, TPU_ERR(UNSUPPORTED, "%s: expected a floating point tensor, but got %s", cx->op_name, tpu_dtype_name(dt)));
  return 0;
}
static int out_present(tpu_lower_ctx_t* cx, int k) {
  const tpu_tensor_t* o = lw_out_meta(cx, k);
  return o && o->ndim >= 0;
}
/* a constant filling output k's shape (for placeholder outputs such as eval-mode save_mean) */
static int const_out(tpu_lower_ctx_t* cx, int k, double v) {
  const tpu_tensor_t* o = lw_out_meta(cx, k);
  if (!o || o->ndim < 0) return -1;
  return lw_const(cx, v, o->dtype, o->ndim, o->sizes);
}
#define unreduce lw_unreduce
/* a [C] vector broadcast along dim `cd` of like */
static int along(tpu_lower_ctx_t* cx, int v, int like, int cd) {
  if (v < 0 || like < 0) return -1;
  tpu_ir_type_t t = type_of(cx, like);
  int64_t bd[1] = {cd};
  return tpu_ir_broadcast(G, v, t.rank, t.dims, bd);
}

/* ---------------------------------------------------------------- channel kernels */

/* custom CHANNEL_STATS / CHANNEL_AFFINE or GROUP_NORM_* (drivers/host/norm.h): result [rank, dims] of dtype dt */
static int chan_custom_i1(tpu_lower_ctx_t* cx, int target, int64_t i1, int n, const int* in, int rank,
                          const int64_t* dims, int dt) {
  tpu_ir_type_t t = {0};
  t.dtype = dt; t.rank = rank;
  for (int d = 0; d < rank; ++d) t.dims[d] = dims[d];
  return lw_custom(cx, target, i1, &t, n, in);
}
static int chan_custom(tpu_lower_ctx_t* cx, int target, int n, const int* in, int rank, const int64_t* dims, int dt) {
  return chan_custom_i1(cx, target, 0, n, in, rank, dims, dt);
}
/* [2, B] statistics of x3 [A, B, I] (n == 1) or of (g3, x3, m [B]) (n == 3) */
static int chan_stats(tpu_lower_ctx_t* cx, int n, const int* in, int64_t B, int dt) {
  int64_t d2[2] = {2, B};
  return chan_custom(cx, TPU_IR_CUSTOM_CHANNEL_STATS, n, in, 2, d2, dt);
}
/* row k of a [2, dims] statistics result ([2, B] CHANNEL_STATS, [2, N, G] GROUP_NORM_STATS), as [dims] */
static int chan_row(tpu_lower_ctx_t* cx, int st, int k, int rank, const int64_t* dims) {
  if (st < 0) return -1;
  int64_t lo[3] = {k, 0, 0}, hi[3] = {k + 1}, one[3] = {1, 1, 1};
  for (int d = 0; d < rank; ++d) hi[1 + d] = dims[d];
  return tpu_ir_reshape(G, tpu_ir_slice(G, st, lo, hi, one), rank, dims);
}
/* u3 a + c, or u3 a + v3 b + c (v3 < 0: the first) over [A, B, I], reshaped to `like`'s shape */
static int chan_affine(tpu_lower_ctx_t* cx, int u3, int v3, int a, int b, int c, int like) {
  if (u3 < 0 || like < 0) return -1;
  tpu_ir_type_t t3 = type_of(cx, u3), tl = type_of(cx, like);
  int in5[5] = {u3, v3, a, b, c}, in3[3] = {u3, a, c};
  int r = v3 >= 0 ? chan_custom(cx, TPU_IR_CUSTOM_CHANNEL_AFFINE, 5, in5, 3, t3.dims, t3.dtype)
                  : chan_custom(cx, TPU_IR_CUSTOM_CHANNEL_AFFINE, 3, in3, 3, t3.dims, t3.dtype);
  return r < 0 ? -1 : tpu_ir_reshape(G, r, tl.rank, tl.dims);
}

/* the channel kernels read input i as it is: bf16 / f16 with f32 statistics (dt, the op-math dtype) */
static int half_ok(tpu_lower_ctx_t* cx, int i, int dt) {
  int xdt = lw_dtype_of(cx, i);
  return dt == TPU_DTYPE_F32 && (xdt == TPU_DTYPE_BF16 || xdt == TPU_DTYPE_F16);
}

/* ---------------------------------------------------------------- batch norm */

/* Argument / output layout of one batch-norm forward overload: input, weight, bias,
 * running stats, training flag (-1: always training), momentum, eps; out_rs: index of
 * the first of the running-stat outputs (-1: none, -2: written into the running-stat arguments (lw_output_arg)),
 * out_y: index of the normalized output (then save_mean, save_invstd), n_extra: trailing
 * placeholder outputs (the reserve of _batch_norm_with_update). */
typedef struct { int ix, iw, ib, irm, irv, itrain, imom, ieps, out_rs, out_y, n_extra; } bn_spec_t;

static tpu_status_t lw_batch_norm(tpu_lower_ctx_t* cx, const bn_spec_t* sp) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, sp->ix)), rank = lw_rank_of(cx, sp->ix);
  if (!float_check(cx, dt)) return TPU_OK;
  if (rank < 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "batch_norm: expected input with at least 2 dims, got %d", rank);
  const int64_t* xs = lw_sizes_of(cx, sp->ix);
  int64_t C = xs[1], n = 1;
  for (int d = 0; d < rank; ++d) if (d != 1) n *= xs[d];
  int training = sp->itrain < 0 ? 1 : (int)lw_int(cx, sp->itrain, 0);
  int has_rs = sp->irm >= 0 && !lw_is_none(cx, sp->irm) && !lw_is_none(cx, sp->irv);
  const int ia[4] = {sp->iw, sp->ib, sp->irm, sp->irv};
  static const char* const names[4] = {"weight", "bias", "running_mean", "running_var"};
  for (int k = 0; k < 4; ++k) {
    int i = ia[k];
    if (i < 0 || lw_is_none(cx, i)) continue;
    if (lw_rank_of(cx, i) != 1 || lw_sizes_of(cx, i)[0] != C)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s should contain %lld elements not %lld", names[k], (long long)C,
                     (long long)(lw_rank_of(cx, i) == 1 ? lw_sizes_of(cx, i)[0] : -1));
  }
  int64_t fl[TPU_MAX_DIMS] = {0};
  for (int d = 0; d < rank; ++d) fl[d] = d != 1;
  int64_t d3[3] = {xs[0], C, C > 0 && xs[0] > 0 ? n / xs[0] : 0};
  int chan = n > 0 && C > 0;
  /* non-empty: the host's channel kernels over x as [N, C, rest] (one pass for each statistic, one
   * for y = x * scale + shift, as PyTorch's CPU kernel writes it); they read bf16 / f16 x as it is and
   * write y in its dtype (no widened copy of x, no f32 y to convert) */
  int x = lw_input(cx, sp->ix, chan && half_ok(cx, sp->ix, dt) ? -1 : dt);
  int mean, invstd, var = -1;
  int eps = lw_scalar(cx, sp->ieps, dt);
  int x3 = chan ? tpu_ir_reshape(G, x, 3, d3) : -1;
  if (training && chan) {
    int st = chan_stats(cx, 1, &x3, C, dt);
    mean = chan_row(cx, st, 0, 1, &C);
    var = chan_row(cx, st, 1, 1, &C);
    invstd = BIN(DIV, lw_const_like(cx, 1.0, var), UN(SQRT, BIN(ADD, var, lw_bcast_like(cx, eps, var))));
  } else if (training) {
    int cn = lw_const(cx, (double)n, dt, 1, &C);
    mean = BIN(DIV, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, x, fl), cn);
    int xc = BIN(SUB, x, unreduce(cx, mean, x, fl));
    var = BIN(DIV, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, xc, xc), fl), cn);
    invstd = BIN(DIV, lw_const_like(cx, 1.0, var), UN(SQRT, BIN(ADD, var, lw_bcast_like(cx, eps, var))));
  } else {
    if (!has_rs) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "running_mean must be defined in evaluation mode");
    mean = lw_input(cx, sp->irm, dt);
    int rv = lw_input(cx, sp->irv, dt);
    invstd = BIN(DIV, lw_const_like(cx, 1.0, rv), UN(SQRT, BIN(ADD, rv, lw_bcast_like(cx, eps, rv))));
  }
  /* y = (x - mean) * (invstd * w) + b */
  int scale = invstd;
  if (!lw_is_none(cx, sp->iw)) scale = BIN(MUL, scale, lw_input(cx, sp->iw, dt));
  int y;
  if (chan) {
    int shift = BIN(MUL, mean, scale);
    shift = lw_is_none(cx, sp->ib) ? UN(NEG, shift) : BIN(SUB, lw_input(cx, sp->ib, dt), shift);
    y = chan_affine(cx, x3, -1, scale, -1, shift, x);
  } else {
    y = BIN(MUL, BIN(SUB, x, along(cx, mean, x, 1)), along(cx, scale, x, 1));
    if (!lw_is_none(cx, sp->ib)) y = BIN(ADD, y, along(cx, lw_input(cx, sp->ib, dt), x, 1));
  }
  /* running stats: (1 - m) * r + m * stat (var unbiased); unchanged in eval mode */
  /* -2: the running stats are arguments the schema does not mark written (native_batch_norm) */
  int rs_args = sp->out_rs == -2 && training && has_rs;
  int out_rs = sp->out_rs == -2 ? -1 : sp->out_rs;
  int nrm = -1, nrv = -1;
  if (out_rs >= 0 || rs_args) {
    if (!has_rs) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: running stats must be defined", cx->op_name);
    int rdt = tpu_opmath_dtype(lw_dtype_of(cx, sp->irm));
    nrm = lw_input(cx, sp->irm, rdt);
    nrv = lw_input(cx, sp->irv, rdt);
    if (training) {
      int m = lw_scalar(cx, sp->imom, TPU_DTYPE_F64);
      int om = BIN(SUB, lw_const_like(cx, 1.0, m), m);
      int mc = lw_bcast_like(cx, tpu_ir_convert(G, m, rdt), nrm), omc = lw_bcast_like(cx, tpu_ir_convert(G, om, rdt), nrm);
      int uvar = BIN(MUL, var, lw_const_like(cx, n > 1 ? (double)n / (double)(n - 1) : (double)INFINITY, var));
      nrm = BIN(ADD, BIN(MUL, omc, nrm), BIN(MUL, mc, tpu_ir_convert(G, mean, rdt)));
      nrv = BIN(ADD, BIN(MUL, omc, nrv), BIN(MUL, mc, tpu_ir_convert(G, uvar, rdt)));
    }
  }
  /* bind in output order */
  for (int k = 0; k < cx->nouts; ++k) {
    if (k == out_rs) lw_output(cx, k, nrm);
    else if (out_rs >= 0 && k == out_rs + 1) lw_output(cx, k, nrv);
    else if (k == sp->out_y) lw_output(cx, k, y);
    else if (k == sp->out_y + 1) lw_output(cx, k, training ? mean : const_out(cx, k, 0));
    else if (k == sp->out_y + 2) lw_output(cx, k, training ? invstd : const_out(cx, k, 0));
    else lw_output(cx, k, const_out(cx, k, 0)); /* reserve */
  }
  if (rs_args) {
    lw_output_arg(cx, sp->irm, nrm);
    lw_output_arg(cx, sp->irv, nrv);
  }
  return cx->g.status;
}
/* native_batch_norm(input, weight?, bias?, running_mean?, running_var?, bool training,
 *   float momentum, float eps) -> (out, save_mean, save_invstd) [+ running_mean,
 *   running_var written when training with running stats, through lw_output_arg] */
static tpu_status_t lower_batch_norm(tpu_lower_ctx_t* cx) {
  const bn_spec_t sp = {0, 1, 2, 3, 4, 5, 6, 7, -2, 0, 0};
  return lw_batch_norm(cx, &sp);
}
/* _native_batch_norm_legit(input, weight?, bias?, running_mean(a!), running_var(b!), training,
 *   momentum, eps): outputs running_mean, running_var, then (out, save_mean, save_rstd) */
static tpu_status_t lower_batch_norm_legit(tpu_lower_ctx_t* cx) {
  const bn_spec_t sp = {0, 1, 2, 3, 4, 5, 6, 7, 0, 2, 0};
  return lw_batch_norm(cx, &sp);
}
/* _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps) */
static tpu_status_t lower_batch_norm_legit_no_stats(tpu_lower_ctx_t* cx) {
  const bn_spec_t sp = {0, 1, 2, -1, -1, 3, 4, 5, -1, 0, 0};
  return lw_batch_norm(cx, &sp);
}
/* _batch_norm_with_update(input, weight?, bias?, running_mean(a!), running_var(b!), momentum,
 *   eps): outputs running stats, then (out, save_mean, save_invstd, reserve) */
static tpu_status_t lower_batch_norm_with_update(tpu_lower_ctx_t* cx) {
  const bn_spec_t sp = {0, 1, 2, 3, 4, -1, 5, 6, 0, 2, 1};
  return lw_batch_norm(cx, &sp);
}

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
 *   save_mean?, save_invstd?, bool train, float eps, bool[3] output_mask)
 * train: d_input = w invstd (g - mean(g) - xh mean(g xh)); eval: g w invstd.
 * d_weight = sum(g xh), d_bias = sum(g) (xh = (x - mean) invstd). */
static tpu_status_t lower_batch_norm_bwd(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 1)), rank = lw_rank_of(cx, 1);
  if (!float_check(cx, dt)) return TPU_OK;
  if (rank < 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "batch_norm_backward: expected input with at least 2 dims");
  const int64_t* xs = lw_sizes_of(cx, 1);
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) if (d != 1) n *= xs[d];
  int train = (int)lw_int(cx, 7, 0);
  int64_t fl[TPU_MAX_DIMS] = {0};
  for (int d = 0; d < rank; ++d) fl[d] = d != 1;
  int64_t C = xs[1];
  /* channel kernels on bf16 / f16 g and x as they are (same dtype and shape) */
  int nat = n > 0 && C > 0 && half_ok(cx, 1, dt) && lw_dtype_of(cx, 0) == lw_dtype_of(cx, 1) &&
            lw_rank_of(cx, 0) == rank && !memcmp(lw_sizes_of(cx, 0), xs, (size_t)rank * sizeof(int64_t));
  int x = lw_input(cx, 1, nat ? -1 : dt);
  int g = lw_bcast_like(cx, lw_input(cx, 0, nat ? -1 : dt), x);
  int mean, invstd;
  if (train) {
    if (lw_is_none(cx, 5) || lw_is_none(cx, 6)) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "batch_norm_backward: save_mean/save_invstd must be defined in training mode");
    mean = lw_input(cx, 5, dt);
    invstd = lw_input(cx, 6, dt);
  } else {
    if (lw_is_none(cx, 3) || lw_is_none(cx, 4)) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "running_mean must be defined in evaluation mode");
    mean = lw_input(cx, 3, dt);
    int rv = lw_input(cx, 4, dt);
    invstd = BIN(DIV, lw_const_like(cx, 1.0, rv), UN(SQRT, BIN(ADD, rv, lw_bcast_like(cx, lw_scalar(cx, 8, dt), rv))));
  }
  if (n > 0 && C > 0) { /* the host's channel kernels: one pass for the sums, one for d_input */
    int64_t d3[3] = {xs[0], C, n / xs[0]};
    int x3 = tpu_ir_reshape(G, x, 3, d3), g3 = tpu_ir_reshape(G, g, 3, d3);
    int in[3] = {g3, x3, mean};
    int st = chan_stats(cx, 3, in, C, dt);
    int sg = chan_row(cx, st, 0, 1, &C), sgx = chan_row(cx, st, 1, 1, &C); /* sum g, sum g (x - mean) */
    int r = -1;
    if (out_present(cx, 0)) {
      int scale = invstd;
      if (!lw_is_none(cx, 2)) scale = BIN(MUL, scale, lw_input(cx, 2, dt));
      if (train) { /* (g - sg/n - (x - mean) k) scale, k = sgx invstd^2 / n */
        int inv_n = lw_const(cx, 1.0 / (double)n, dt, 1, &C);
        int m1 = BIN(MUL, sg, inv_n), k = BIN(MUL, BIN(MUL, sgx, BIN(MUL, invstd, invstd)), inv_n);
        int cb = UN(NEG, BIN(MUL, k, scale)), cc = BIN(MUL, BIN(SUB, BIN(MUL, mean, k), m1), scale);
        r = chan_affine(cx, g3, x3, scale, cb, cc, x);
      } else {
        r = chan_affine(cx, g3, -1, scale, -1, lw_const(cx, 0.0, dt, 1, &C), x);
      }
    }
    lw_output(cx, 0, r);
    lw_output(cx, 1, out_present(cx, 1) ? BIN(MUL, sgx, invstd) : -1);
    return lw_output(cx, 2, out_present(cx, 2) ? sg : -1);
  }
  int xh = BIN(MUL, BIN(SUB, x, along(cx, mean, x, 1)), along(cx, invstd, x, 1));
  if (out_present(cx, 0)) {
    int scale = invstd;
    if (!lw_is_none(cx, 2)) scale = BIN(MUL, scale, lw_input(cx, 2, dt));
    int r;
    if (train) {
      int inv_n = lw_const(cx, 1.0 / (double)n, dt, 1, &C);
      int m1 = BIN(MUL, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, g, fl), inv_n);
      int m2 = BIN(MUL, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, g, xh), fl), inv_n);
      r = BIN(SUB, BIN(SUB, g, along(cx, m1, x, 1)), BIN(MUL, xh, along(cx, m2, x, 1)));
      r = BIN(MUL, r, along(cx, scale, x, 1));
    } else {
      r = BIN(MUL, g, along(cx, scale, x, 1));
    }
    lw_output(cx, 0, r);
  } else {
    lw_output(cx, 0, -1);
  }
  lw_output(cx, 1, out_present(cx, 1) ? tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, g, xh), fl) : -1);
  return lw_output(cx, 2, out_present(cx, 2) ? tpu_ir_reduce(G, TPU_IR_MONOID_SUM, g, fl) : -1);
}

/* ---------------------------------------------------------------- group norm */

/* native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean [N,G], rstd [N,G]);
 * widen: torch_tpu::group_norm_f32 (autocast's fp32 policy, csrc/glue/amp_group_norm.cpp), the same arguments with
 * a bf16 / f16 input read converted to f32 (exact) and an f32 out: the bits of native_group_norm(input.float()) */
static tpu_status_t lw_group_norm(tpu_lower_ctx_t* cx, int widen) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0));
  if (!float_check(cx, dt)) return TPU_OK;
  int64_t N = lw_int(cx, 3, 0), C = lw_int(cx, 4, 0), HW = lw_int(cx, 5, 0), Gp = lw_int(cx, 6, 1);
  if (Gp <= 0 || C % Gp)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected number of channels in input to be divisible by num_groups, but got input of shape [%lld, %lld] and num_groups=%lld",
                   (long long)N, (long long)C, (long long)Gp);
  int64_t d4[4] = {N, Gp, C / Gp, HW}, fl[4] = {0, 0, 1, 1}, n = (C / Gp) * HW;
  static const char* const names[3] = {NULL, "weight", "bias"};
  for (int k = 1; k <= 2; ++k)
    if (!lw_is_none(cx, k) && (lw_rank_of(cx, k) != 1 || lw_sizes_of(cx, k)[0] != C))
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected %s to be a vector of size equal to the number of channels in input, but got %s of shape [%lld] and input of shape [%lld, %lld]",
                     names[k], names[k], (long long)(lw_rank_of(cx, k) == 1 ? lw_sizes_of(cx, k)[0] : -1), (long long)N, (long long)C);
  if (N > 0 && C > 0 && HW > 0) { /* the host's group-norm kernels: statistics, then one pass for y */
    int64_t d3[3] = {N, C, HW}, d2[2] = {N, Gp}, ds[3] = {2, N, Gp};
    int x0 = lw_input(cx, 0, half_ok(cx, 0, dt) && !widen ? -1 : dt); /* bf16 / f16 read as they are, y in their dtype */
    int x3 = tpu_ir_reshape(G, x0, 3, d3);
    int st = chan_custom_i1(cx, TPU_IR_CUSTOM_GROUP_NORM_STATS, 0, 2, (int[]){x3, lw_scalar(cx, 7, TPU_DTYPE_F64)}, 3, ds, dt);
    int mean = chan_row(cx, st, 0, 2, d2), rstd = chan_row(cx, st, 1, 2, d2);
    int in[5] = {x3, mean, rstd}, n = 3, bits = 0;
    for (int k = 0; k < 2; ++k)
      if (!lw_is_none(cx, 1 + k)) { in[n++] = lw_input(cx, 1 + k, dt); bits |= 1 << k; }
    int y = x3 < 0 ? -1 : chan_custom_i1(cx, TPU_IR_CUSTOM_GROUP_NORM, bits, n, in, 3, d3, type_of(cx, x3).dtype);
    tpu_ir_type_t xt = type_of(cx, x0);
    lw_output(cx, 0, y < 0 ? -1 : tpu_ir_reshape(G, y, xt.rank, xt.dims));
    lw_output(cx, 1, mean);
    return lw_output(cx, 2, rstd);
  }
  int x = tpu_ir_reshape(G, lw_input(cx, 0, dt), 4, d4);
  int cn = lw_const(cx, (double)n, dt, 2, d4);
  int mean = BIN(DIV, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, x, fl), cn);
  int xc = BIN(SUB, x, unreduce(cx, mean, x, fl));
  int var = BIN(DIV, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, xc, xc), fl), cn);
  int rstd = UN(RSQRT, BIN(ADD, var, lw_bcast_like(cx, lw_scalar(cx, 7, dt), var)));
  int y = BIN(MUL, xc, unreduce(cx, rstd, x, fl));
  int64_t wd[2] = {Gp, C / Gp}, wb[2] = {1, 2};
  if (!lw_is_none(cx, 1)) y = BIN(MUL, y, tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, 1, dt), 2, wd), 4, d4, wb));
  if (!lw_is_none(cx, 2)) y = BIN(ADD, y, tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, 2, dt), 2, wd), 4, d4, wb));
  tpu_ir_type_t xt = type_of(cx, lw_input(cx, 0, -1));
  lw_output(cx, 0, tpu_ir_reshape(G, y, xt.rank, xt.dims));
  lw_output(cx, 1, mean);
  return lw_output(cx, 2, rstd);
}

static tpu_status_t lower_group_norm(tpu_lower_ctx_t* cx) { return lw_group_norm(cx, 0); }
static tpu_status_t lower_group_norm_f32(tpu_lower_ctx_t* cx) { return lw_group_norm(cx, 1); }

/* native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group,
 *   bool[3] output_mask) -> (d_input, d_weight, d_bias); also torch_tpu::group_norm_f32_backward (f32 grad_out,
 *   bf16 / f16 input: read converted to f32, d_input computed in f32 and rounded to the input's dtype by lw_output,
 *   as the backward of autocast's cast gave it) */
static tpu_status_t lower_group_norm_bwd(tpu_lower_ctx_t* cx) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 1));
  if (!float_check(cx, dt)) return TPU_OK;
  int64_t N = lw_int(cx, 5, 0), C = lw_int(cx, 6, 0), HW = lw_int(cx, 7, 0), Gp = lw_int(cx, 8, 1);
  if (Gp <= 0 || C % Gp) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "native_group_norm_backward: bad group count");
  int64_t d4[4] = {N, Gp, C / Gp, HW}, fl[4] = {0, 0, 1, 1}, bfl[4] = {1, 0, 0, 1}, n = (C / Gp) * HW, d2[2] = {N, Gp};
  int64_t wd[2] = {Gp, C / Gp}, wb[2] = {1, 2};
  if (!lw_is_none(cx, 4) && (lw_rank_of(cx, 4) != 1 || lw_sizes_of(cx, 4)[0] != C))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "native_group_norm_backward: expected weight of shape [%lld]", (long long)C);
  if (N > 0 && C > 0 && HW > 0) {
    /* the host's group-norm kernels: per (n, c) sums with d weight / d bias (when requested), then one pass for
     * d x (which makes the sums itself when they are not needed otherwise) */
    int64_t d3[3] = {N, C, HW}, dsm[3] = {2, N + 1, C}, c1 = C;
    const int nat = half_ok(cx, 1, dt) && lw_dtype_of(cx, 0) == lw_dtype_of(cx, 1); /* bf16 / f16 as they are */
    int x0 = lw_input(cx, 1, nat ? -1 : dt);
    int x3 = tpu_ir_reshape(G, x0, 3, d3), g3 = tpu_ir_reshape(G, lw_input(cx, 0, nat ? -1 : dt), 3, d3);
    int mean = tpu_ir_reshape(G, lw_input(cx, 2, dt), 2, d2), rstd = tpu_ir_reshape(G, lw_input(cx, 3, dt), 2, d2);
    const int want_w = out_present(cx, 1), want_b = out_present(cx, 2);
    int sums = want_w || want_b ? chan_custom_i1(cx, TPU_IR_CUSTOM_GROUP_NORM_SUMS, 0, 4, (int[]){g3, x3, mean, rstd}, 3, dsm, dt) : -1;
    if (out_present(cx, 0)) {
      int in[6] = {g3, x3, mean, rstd}, n = 4, bits = 0;
      if (!lw_is_none(cx, 4)) { in[n++] = lw_input(cx, 4, dt); bits |= 1; }
      if (sums >= 0) { in[n++] = sums; bits |= 2; }
      int dx = x3 < 0 ? -1 : chan_custom_i1(cx, TPU_IR_CUSTOM_GROUP_NORM_BWD, bits, n, in, 3, d3, type_of(cx, x3).dtype);
      tpu_ir_type_t xt = type_of(cx, x0);
      lw_output(cx, 0, dx < 0 ? -1 : tpu_ir_reshape(G, dx, xt.rank, xt.dims));
    } else {
      lw_output(cx, 0, -1);
    }
    int64_t lo1[3] = {1, N, 0}, hi1[3] = {2, N + 1, C}, lo0[3] = {0, N, 0}, hi0[3] = {1, N + 1, C}, one[3] = {1, 1, 1};
    lw_output(cx, 1, want_w && sums >= 0 ? tpu_ir_reshape(G, tpu_ir_slice(G, sums, lo1, hi1, one), 1, &c1) : -1);
    return lw_output(cx, 2, want_b && sums >= 0 ? tpu_ir_reshape(G, tpu_ir_slice(G, sums, lo0, hi0, one), 1, &c1) : -1);
  }
  int x = tpu_ir_reshape(G, lw_input(cx, 1, dt), 4, d4);
  int g = tpu_ir_reshape(G, lw_input(cx, 0, dt), 4, d4);
  int mean = unreduce(cx, tpu_ir_reshape(G, lw_input(cx, 2, dt), 2, d2), x, fl);
  int rstd = unreduce(cx, tpu_ir_reshape(G, lw_input(cx, 3, dt), 2, d2), x, fl);
  int xh = BIN(MUL, BIN(SUB, x, mean), rstd);
  tpu_ir_type_t xt = type_of(cx, lw_input(cx, 1, -1));
  if (out_present(cx, 0)) {
    int dxh = g;
    if (!lw_is_none(cx, 4)) dxh = BIN(MUL, g, tpu_ir_broadcast(G, tpu_ir_reshape(G, lw_input(cx, 4, dt), 2, wd), 4, d4, wb));
    int inv_n = lw_const(cx, 1.0 / (double)n, dt, 2, d4);
    int m1 = BIN(MUL, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, dxh, fl), inv_n);
    int m2 = BIN(MUL, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, dxh, xh), fl), inv_n);
    int r = BIN(MUL, rstd, BIN(SUB, BIN(SUB, dxh, unreduce(cx, m1, x, fl)), BIN(MUL, xh, unreduce(cx, m2, x, fl))));
    lw_output(cx, 0, tpu_ir_reshape(G, r, xt.rank, xt.dims));
  } else {
    lw_output(cx, 0, -1);
  }
  int64_t c1 = C;
  if (out_present(cx, 1))
    lw_output(cx, 1, tpu_ir_reshape(G, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, BIN(MUL, g, xh), bfl), 1, &c1));
  else
    lw_output(cx, 1, -1);
  if (out_present(cx, 2)) return lw_output(cx, 2, tpu_ir_reshape(G, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, g, bfl), 1, &c1));
  return lw_output(cx, 2, -1);
}

/* ---------------------------------------------------------------- pooling */

typedef struct {
  int nsp;                /* spatial dims (trailing) */
  int lead;               /* leading dims of the input (batch, channels) */
  int64_t B;              /* product of the leading dims */
  int64_t S[3], O[3], K[3];
  int64_t P, Qo, Kt;      /* spatial numel of input / output / window */
  int start[3];           /* i64 [O_j]: first window position (may be negative) */
  int len[3];             /* i64 [O_j]: valid window length, or -1 (K_j) */
  int64_t dil[3];
  int flat;               /* i64 [Qo, Kt] flat spatial offset (0 where invalid) */
  int valid;              /* bool [Qo, Kt] */
} win_t;

static int iota_i64(tpu_lower_ctx_t* cx, int64_t n) { return tpu_ir_iota(G, I64, 1, &n, 0); }

/* fills w->flat / w->valid from start / len / dil */
static int win_build(tpu_lower_ctx_t* cx, win_t* w) {
  int nsp = w->nsp;
  int64_t full[6];
  for (int j = 0; j < nsp; ++j) { full[j] = w->O[j]; full[nsp + j] = w->K[j]; }
  int flat = -1, valid = -1;
  int64_t stride = 1;
  for (int j = nsp - 1; j >= 0; --j) {
    int64_t od[2] = {w->O[j], w->K[j]}, b0[1] = {0}, b1[1] = {1};
    int st = tpu_ir_broadcast(G, w->start[j], 2, od, b0);
    int k = tpu_ir_broadcast(G, iota_i64(cx, w->K[j]), 2, od, b1);
    int pos = BIN(ADD, st, BIN(MUL, k, lw_const_like(cx, (double)w->dil[j], k)));
    int ok = tpu_ir_binary(G, TPU_IR_AND, tpu_ir_compare(G, TPU_IR_CMP_GE, pos, lw_const_like(cx, 0, pos)),
                           tpu_ir_compare(G, TPU_IR_CMP_LT, pos, lw_const_like(cx, (double)w->S[j], pos)));
    if (w->len[j] >= 0)
      ok = tpu_ir_binary(G, TPU_IR_AND, ok, tpu_ir_compare(G, TPU_IR_CMP_LT, k, tpu_ir_broadcast(G, w->len[j], 2, od, b0)));
    int64_t bd[2] = {j, nsp + j};
    int posf = tpu_ir_broadcast(G, BIN(MUL, pos, lw_const_like(cx, (double)stride, pos)), 2 * nsp, full, bd);
    int okf = tpu_ir_broadcast(G, ok, 2 * nsp, full, bd);
    flat = flat < 0 ? posf : BIN(ADD, flat, posf);
    valid = valid < 0 ? okf : tpu_ir_binary(G, TPU_IR_AND, valid, okf);
    stride *= w->S[j];
  }
  flat = tpu_ir_select(G, valid, flat, lw_const_like(cx, 0, flat));
  int64_t qk[2] = {w->Qo, w->Kt};
  w->flat = tpu_ir_reshape(G, flat, 2, qk);
  w->valid = tpu_ir_reshape(G, valid, 2, qk);
  return cx->g.status == TPU_OK;
}

/* shapes from the input (arg ix) and the output spatial sizes */
static int win_shapes(tpu_lower_ctx_t* cx, win_t* w, int ix, int nsp, const int64_t* osz) {
  int rank = lw_rank_of(cx, ix);
  const int64_t* xs = lw_sizes_of(cx, ix);
  if (rank != nsp + 1 && rank != nsp + 2) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: expected %dD or %dD input, got %dD", cx->op_name, nsp + 1, nsp + 2, rank));
    return 0;
  }
  w->nsp = nsp; w->lead = rank - nsp; w->B = 1; w->P = 1; w->Qo = 1; w->Kt = 1;
  for (int d = 0; d < w->lead; ++d) w->B *= xs[d];
  for (int j = 0; j < nsp; ++j) {
    w->S[j] = xs[w->lead + j]; w->O[j] = osz[j];
    w->P *= w->S[j]; w->Qo *= w->O[j];
    w->len[j] = -1; w->dil[j] = 1;
  }
  return 1;
}
/* fixed windows: start = o*stride - pad */
static void win_fixed(tpu_lower_ctx_t* cx, win_t* w, const int64_t* k, const int64_t* s, const int64_t* p, const int64_t* dil) {
  for (int j = 0; j < w->nsp; ++j) {
    w->K[j] = k[j]; w->Kt *= k[j]; w->dil[j] = dil ? dil[j] : 1;
    int o = iota_i64(cx, w->O[j]);
    w->start[j] = BIN(SUB, BIN(MUL, o, lw_const_like(cx, (double)s[j], o)), lw_const_like(cx, (double)p[j], o));
  }
}
/* adaptive windows: [floor(o S / O), ceil((o+1) S / O)) */
static void win_adaptive(tpu_lower_ctx_t* cx, win_t* w) {
  for (int j = 0; j < w->nsp; ++j) {
    int64_t S = w->S[j], O = w->O[j];
    int64_t kmax = O > 0 ? lw_size_decide(cx, TPU_SIZE_DECIDE_ADAPTIVE_WINDOW, S, O) : 0; /* not c + k*m of S */
    w->K[j] = kmax; w->Kt *= kmax;
    int o = iota_i64(cx, O);
    int a = tpu_ir_binary(G, TPU_IR_FLOOR_DIV, BIN(MUL, o, lw_const_like(cx, (double)S, o)), lw_const_like(cx, (double)O, o));
    int o1 = BIN(ADD, o, lw_const_like(cx, 1, o));
    int b = tpu_ir_binary(G, TPU_IR_FLOOR_DIV, BIN(ADD, BIN(MUL, o1, lw_const_like(cx, (double)S, o)), lw_const_like(cx, (double)(O - 1), o)),
                          lw_const_like(cx, (double)O, o));
    w->start[j] = a;
    w->len[j] = BIN(SUB, b, a);
  }
}

/* input (arg ix) as [B, P] in dtype dt; the windows gathered as [B, Qo, Kt] */
static int win_gather(tpu_lower_ctx_t* cx, win_t* w, int ix, int dt) {
  int64_t bp[2] = {w->B, w->P}, bq[2] = {w->B, w->Qo * w->Kt}, bqk[3] = {w->B, w->Qo, w->Kt}, b1[1] = {1};
  int x = tpu_ir_reshape(G, lw_input(cx, ix, dt), 2, bp);
  int64_t q = w->Qo * w->Kt;
  int idx = tpu_ir_broadcast(G, tpu_ir_reshape(G, w->flat, 1, &q), 2, bq, b1);
  return tpu_ir_reshape(G, tpu_ir_gather(G, x, idx, 1), 3, bqk);
}
static int valid3(tpu_lower_ctx_t* cx, win_t* w) {
  int64_t bqk[3] = {w->B, w->Qo, w->Kt}, b12[2] = {1, 2};
  return tpu_ir_broadcast(G, w->valid, 3, bqk, b12);
}
/* output dims: input lead dims + O */
static int to_out(tpu_lower_ctx_t* cx, win_t* w, int v, int ix) {
  const int64_t* xs = lw_sizes_of(cx, ix);
  int64_t od[TPU_MAX_DIMS];
  for (int d = 0; d < w->lead; ++d) od[d] = xs[d];
  for (int j = 0; j < w->nsp; ++j) od[w->lead + j] = w->O[j];
  return tpu_ir_reshape(G, v, w->lead + w->nsp, od);
}

/* grad_input (output 0, shaped like arg ix) = scatter-add of grad (arg ig) at indices (arg ii) */
static tpu_status_t max_pool_bwd(tpu_lower_ctx_t* cx, int ig, int ix, int ii, int nsp) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, ig));
  if (!float_check(cx, dt)) return TPU_OK;
  int rank = lw_rank_of(cx, ix);
  if (rank < nsp + 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: bad input rank %d", cx->op_name, rank);
  if (lw_dtype_of(cx, ii) != I64) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: expected indices of dtype Long", cx->op_name);
  const int64_t *xs = lw_sizes_of(cx, ix), *gs = lw_sizes_of(cx, ig);
  int64_t B = 1, P = 1, Q = 1;
  for (int d = 0; d < rank - nsp; ++d) B *= xs[d];
  for (int d = rank - nsp; d < rank; ++d) { P *= xs[d]; Q *= gs[d]; }
  int64_t bp[2] = {B, P}, bq[2] = {B, Q};
  int g = tpu_ir_reshape(G, lw_input(cx, ig, dt), 2, bq);
  int idx = tpu_ir_reshape(G, lw_input(cx, ii, I64), 2, bq);
  int r = tpu_ir_scatter(G, lw_const(cx, 0, dt, 2, bp), idx, g, 1, 1);
  return lw_output(cx, 0, tpu_ir_reshape(G, r, rank, xs));
}

static void expand_list(tpu_lower_ctx_t* cx, int i, int nsp, const int64_t* dflt, double fill, int64_t* out) {
  const int64_t* v;
  int n = lw_int_list(cx, i, &v);
  for (int j = 0; j < nsp; ++j) out[j] = n <= 0 ? (dflt ? dflt[j] : (int64_t)fill) : n == 1 ? v[0] : v[j];
  if (n > 1 && n != nsp) tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: expected %d values in argument %d", cx->op_name, nsp, i));
}
static const int64_t* out_spatial(tpu_lower_ctx_t* cx, int k, int nsp) {
  const tpu_tensor_t* o = lw_out_meta(cx, k);
  if (!o || o->ndim < nsp) { tpu_ir_fail(G, TPU_ERR(INTERNAL, "%s: bad output", cx->op_name)); return NULL; }
  return o->sizes + o->ndim - nsp;
}

/* indices from the host's window-argmax kernel (stride 0: adaptive windows), values
 * gathered at them -> outputs 0 (values) and 1 (indices) */
static tpu_status_t max_pool_kernel(tpu_lower_ctx_t* cx, int nsp, const int64_t* k, const int64_t* s,
                                    const int64_t* p, const int64_t* d) {
  const int64_t* os = out_spatial(cx, 0, nsp);
  win_t w;
  if (!os || !win_shapes(cx, &w, 0, nsp, os)) return TPU_OK;
  if (!float_check(cx, lw_dtype_of(cx, 0))) return TPU_OK;
  /* indices from the host's window-argmax kernel, values gathered at them */
  int x = lw_input(cx, 0, -1);
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM;
  op.i0 = TPU_IR_CUSTOM_POOL_ARGMAX;
  op.i1 = nsp;
  op.type.dtype = I64;
  op.type.rank = w.lead + nsp;
  for (int j = 0; j < w.lead; ++j) op.type.dims[j] = lw_sizes_of(cx, 0)[j];
  for (int j = 0; j < nsp; ++j) {
    op.type.dims[w.lead + j] = os[j];
    op.a[0][j] = k[j]; op.a[1][j] = s[j]; op.a[2][j] = p[j]; op.a[2][nsp + j] = d[j];
    if (k[j] < 1 || s[j] < 0 || d[j] < 1 || p[j] < 0)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: kernel size, stride and dilation must be positive and padding non-negative", cx->op_name);
  }
  int ind = tpu_ir_add_op(G, &op, 1, &x);
  int64_t bp[2] = {w.B, w.P}, bq[2] = {w.B, w.Qo};
  int v = tpu_ir_gather(G, tpu_ir_reshape(G, x, 2, bp), tpu_ir_reshape(G, ind, 2, bq), 1);
  lw_output(cx, 0, to_out(cx, &w, v, 0));
  return lw_output(cx, 1, ind);
}
/* max_pool{2,3}d_with_indices(self, kernel, stride, padding, dilation, ceil_mode) */
static tpu_status_t lw_max_pool(tpu_lower_ctx_t* cx, int nsp) {
  int64_t k[3], s[3], p[3], d[3];
  expand_list(cx, 1, nsp, NULL, 1, k);
  expand_list(cx, 2, nsp, k, 1, s);
  expand_list(cx, 3, nsp, NULL, 0, p);
  expand_list(cx, 4, nsp, NULL, 1, d);
  for (int j = 0; j < nsp; ++j)
    if (s[j] < 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: stride should be greater than zero", cx->op_name);
  return max_pool_kernel(cx, nsp, k, s, p, d);
}
static tpu_status_t lower_max_pool2d(tpu_lower_ctx_t* cx) { return lw_max_pool(cx, 2); }
static tpu_status_t lower_max_pool3d(tpu_lower_ctx_t* cx) { return lw_max_pool(cx, 3); }
/* max_pool{2,3}d_with_indices_backward(grad_output, self, k, s, p, d, ceil_mode, indices) */
static tpu_status_t lower_max_pool2d_bwd(tpu_lower_ctx_t* cx) { return max_pool_bwd(cx, 0, 1, 7, 2); }
static tpu_status_t lower_max_pool3d_bwd(tpu_lower_ctx_t* cx) { return max_pool_bwd(cx, 0, 1, 7, 3); }
/* adaptive_max_pool{2,3}d(self, output_size) -> (out, indices): the argmax kernel's adaptive windows */
static tpu_status_t lw_adaptive_max_pool(tpu_lower_ctx_t* cx, int nsp) {
  const int64_t k[3] = {1, 1, 1}, s[3] = {0, 0, 0}, p[3] = {0, 0, 0}, d[3] = {1, 1, 1};
  return max_pool_kernel(cx, nsp, k, s, p, d);
}
static tpu_status_t lower_adaptive_max_pool2d(tpu_lower_ctx_t* cx) { return lw_adaptive_max_pool(cx, 2); }
static tpu_status_t lower_adaptive_max_pool3d(tpu_lower_ctx_t* cx) { return lw_adaptive_max_pool(cx, 3); }
/* adaptive_max_pool{2,3}d_backward(grad_output, self, indices) */
static tpu_status_t lower_adaptive_max_pool2d_bwd(tpu_lower_ctx_t* cx) { return max_pool_bwd(cx, 0, 1, 2, 2); }
static tpu_status_t lower_adaptive_max_pool3d_bwd(tpu_lower_ctx_t* cx) { return max_pool_bwd(cx, 0, 1, 2, 3); }

/* max_unpool2d(self, indices, output_size) / max_unpool3d(self, indices, output_size, stride,
 * padding): zeros with self's values placed at the flat spatial indices (an index outside
 * the output is an error at the next sync) */
static tpu_status_t lw_max_unpool(tpu_lower_ctx_t* cx, int nsp) {
  int dt = lw_dtype_of(cx, 0), rank = lw_rank_of(cx, 0);
  if (rank != nsp + 1 && rank != nsp + 2)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: expected %dD or %dD input, got %dD", cx->op_name, nsp + 1, nsp + 2, rank);
  if (lw_dtype_of(cx, 1) != I64) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "elements in indices should be type int64");
  const int64_t *xs = lw_sizes_of(cx, 0), *is = lw_sizes_of(cx, 1);
  if (lw_rank_of(cx, 1) != rank || memcmp(xs, is, (size_t)rank * sizeof(int64_t)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected shape of indices to be same as that of the input tensor");
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  if (!o || o->ndim != rank) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: bad output", cx->op_name);
  int64_t B = 1, Q = 1, P = 1;
  for (int d = 0; d < rank - nsp; ++d) B *= xs[d];
  for (int d = rank - nsp; d < rank; ++d) { Q *= xs[d]; P *= o->sizes[d]; }
  int64_t bq[2] = {B, Q}, bp[2] = {B, P};
  int x = tpu_ir_reshape(G, lw_input(cx, 0, -1), 2, bq);
  int idx = tpu_ir_reshape(G, lw_input(cx, 1, I64), 2, bq);
  int r = tpu_ir_scatter(G, lw_const(cx, 0, dt, 2, bp), idx, x, 1, 0);
  return lw_output(cx, 0, tpu_ir_reshape(G, r, rank, o->sizes));
}
static tpu_status_t lower_max_unpool2d(tpu_lower_ctx_t* cx) { return lw_max_unpool(cx, 2); }
static tpu_status_t lower_max_unpool3d(tpu_lower_ctx_t* cx) { return lw_max_unpool(cx, 3); }

/* divisor per output position [Qo] (f dtype) for avg_pool: include_pad counts the window
 * clipped to the padded input, else the window clipped to the input */
static int avg_divisor(tpu_lower_ctx_t* cx, win_t* w, const int64_t* k, const int64_t* p, int include_pad, int dt) {
  int div = -1;
  int64_t od[3];
  for (int j = 0; j < w->nsp; ++j) od[j] = w->O[j];
  for (int j = 0; j < w->nsp; ++j) {
    int st = w->start[j];
    int en = BIN(MIN, BIN(ADD, st, lw_const_like(cx, (double)k[j], st)), lw_const_like(cx, (double)(w->S[j] + p[j]), st));
    int sz;
    if (include_pad) {
      sz = BIN(SUB, en, st);
    } else {
      int a = BIN(MAX, st, lw_const_like(cx, 0, st)), b = BIN(MIN, en, lw_const_like(cx, (double)w->S[j], st));
      sz = BIN(SUB, b, a);
    }
    int64_t bd[1] = {j};
    sz = tpu_ir_broadcast(G, tpu_ir_convert(G, sz, dt), w->nsp, od, bd);
    div = div < 0 ? sz : BIN(MUL, div, sz);
  }
  return tpu_ir_reshape(G, div, 1, &w->Qo);
}
/* adaptive windows: the product of the window lengths, [Qo] */
static int adaptive_divisor(tpu_lower_ctx_t* cx, win_t* w, int dt) {
  int div = -1;
  int64_t od[3];
  for (int j = 0; j < w->nsp; ++j) od[j] = w->O[j];
  for (int j = 0; j < w->nsp; ++j) {
    int64_t bd[1] = {j};
    int sz = tpu_ir_broadcast(G, tpu_ir_convert(G, w->len[j], dt), w->nsp, od, bd);
    div = div < 0 ? sz : BIN(MUL, div, sz);
  }
  return tpu_ir_reshape(G, div, 1, &w->Qo);
}

/* avg_pool{2,3}d(self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override?):
 * the windows of input ix (kernel list at arg ik), output spatial sizes os */
static int avg_setup(tpu_lower_ctx_t* cx, win_t* w, int ix, const int64_t* os, int ik, int nsp, int dt, int* out_div) {
  int64_t k[3], s[3], p[3];
  expand_list(cx, ik, nsp, NULL, 1, k);
  expand_list(cx, ik + 1, nsp, k, 1, s);
  expand_list(cx, ik + 2, nsp, NULL, 0, p);
  if (!win_shapes(cx, w, ix, nsp, os)) return 0;
  win_fixed(cx, w, k, s, p, NULL);
  if (!win_build(cx, w)) return 0;
  int include_pad = (int)lw_int(cx, ik + 4, 1);
  if (!lw_is_none(cx, ik + 5)) {
    int64_t dv = lw_int(cx, ik + 5, 1);
    if (dv == 0) { tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "divisor must be not zero")); return 0; }
    *out_div = lw_const(cx, (double)dv, dt, 1, &w->Qo);
  } else {
    *out_div = avg_divisor(cx, w, k, p, include_pad, dt);
  }
  return cx->g.status == TPU_OK;
}
/* window sums of input ix divided by div [Qo] -> output 0 */
static tpu_status_t avg_out(tpu_lower_ctx_t* cx, win_t* w, int ix, int div, int dt) {
  int v = win_gather(cx, w, ix, dt);
  v = tpu_ir_select(G, valid3(cx, w), v, lw_const_like(cx, 0, v));
  int64_t last[3] = {0, 0, 1}, bq[2] = {w->B, w->Qo}, b1[1] = {1};
  int sm = tpu_ir_reduce(G, TPU_IR_MONOID_SUM, v, last);
  return lw_output(cx, 0, to_out(cx, w, BIN(DIV, sm, tpu_ir_broadcast(G, div, 2, bq, b1)), ix));
}
/* scatter-add of per-window values src [B, Qo, Kt] (0 at invalid positions) into [B, P] */
static int win_scatter(tpu_lower_ctx_t* cx, win_t* w, int src, int dt) {
  int64_t bp[2] = {w->B, w->P}, q = w->Qo * w->Kt, bq[2] = {w->B, q}, b1[1] = {1};
  src = tpu_ir_select(G, valid3(cx, w), src, lw_const_like(cx, 0, src));
  int idx = tpu_ir_broadcast(G, tpu_ir_reshape(G, w->flat, 1, &q), 2, bq, b1);
  return tpu_ir_scatter(G, lw_const(cx, 0, dt, 2, bp), idx, tpu_ir_reshape(G, src, 2, bq), 1, 1);
}
/* grad (arg 0) / div spread over the windows -> output 0 shaped like arg ix */
static tpu_status_t avg_bwd_out(tpu_lower_ctx_t* cx, win_t* w, int ix, int div, int dt) {
  int64_t bq[2] = {w->B, w->Qo}, bqk[3] = {w->B, w->Qo, w->Kt}, b01[2] = {0, 1}, b1[1] = {1};
  int g = BIN(DIV, tpu_ir_reshape(G, lw_input(cx, 0, dt), 2, bq), tpu_ir_broadcast(G, div, 2, bq, b1));
  int r = win_scatter(cx, w, tpu_ir_broadcast(G, g, 3, bqk, b01), dt);
  return lw_output(cx, 0, tpu_ir_reshape(G, r, lw_rank_of(cx, ix), lw_sizes_of(cx, ix)));
}

static tpu_status_t lw_avg_pool(tpu_lower_ctx_t* cx, int nsp) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0));
  if (!float_check(cx, dt)) return TPU_OK;
  const int64_t* os = out_spatial(cx, 0, nsp);
  win_t w;
  int div;
  if (!os || !avg_setup(cx, &w, 0, os, 1, nsp, dt, &div)) return TPU_OK;
  return avg_out(cx, &w, 0, div, dt);
}
static tpu_status_t lower_avg_pool2d(tpu_lower_ctx_t* cx) { return lw_avg_pool(cx, 2); }
static tpu_status_t lower_avg_pool3d(tpu_lower_ctx_t* cx) { return lw_avg_pool(cx, 3); }
/* avg_pool{2,3}d_backward(grad_output, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override?) */
static tpu_status_t lw_avg_pool_bwd(tpu_lower_ctx_t* cx, int nsp) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0));
  if (!float_check(cx, dt)) return TPU_OK;
  int rg = lw_rank_of(cx, 0);
  if (rg < nsp + 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: bad grad_output rank", cx->op_name);
  win_t w;
  int div;
  if (!avg_setup(cx, &w, 1, lw_sizes_of(cx, 0) + rg - nsp, 2, nsp, dt, &div)) return TPU_OK;
  return avg_bwd_out(cx, &w, 1, div, dt);
}
static tpu_status_t lower_avg_pool2d_bwd(tpu_lower_ctx_t* cx) { return lw_avg_pool_bwd(cx, 2); }
static tpu_status_t lower_avg_pool3d_bwd(tpu_lower_ctx_t* cx) { return lw_avg_pool_bwd(cx, 3); }

/* _adaptive_avg_pool{2,3}d(self, output_size) */
static tpu_status_t lw_adaptive_avg_pool(tpu_lower_ctx_t* cx, int nsp) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0));
  if (!float_check(cx, dt)) return TPU_OK;
  const int64_t* os = out_spatial(cx, 0, nsp);
  win_t w;
  if (!os || !win_shapes(cx, &w, 0, nsp, os)) return TPU_OK;
  win_adaptive(cx, &w);
  if (!win_build(cx, &w)) return TPU_OK;
  return avg_out(cx, &w, 0, adaptive_divisor(cx, &w, dt), dt);
}
static tpu_status_t lower_adaptive_avg_pool2d(tpu_lower_ctx_t* cx) { return lw_adaptive_avg_pool(cx, 2); }
static tpu_status_t lower_adaptive_avg_pool3d(tpu_lower_ctx_t* cx) { return lw_adaptive_avg_pool(cx, 3); }
/* _adaptive_avg_pool{2,3}d_backward(grad_output, self) */
static tpu_status_t lw_adaptive_avg_pool_bwd(tpu_lower_ctx_t* cx, int nsp) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0));
  if (!float_check(cx, dt)) return TPU_OK;
  int rg = lw_rank_of(cx, 0);
  if (rg < nsp + 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: bad grad_output rank", cx->op_name);
  win_t w;
  if (!win_shapes(cx, &w, 1, nsp, lw_sizes_of(cx, 0) + rg - nsp)) return TPU_OK;
  win_adaptive(cx, &w);
  if (!win_build(cx, &w)) return TPU_OK;
  return avg_bwd_out(cx, &w, 1, adaptive_divisor(cx, &w, dt), dt);
}
static tpu_status_t lower_adaptive_avg_pool2d_bwd(tpu_lower_ctx_t* cx) { return lw_adaptive_avg_pool_bwd(cx, 2); }
static tpu_status_t lower_adaptive_avg_pool3d_bwd(tpu_lower_ctx_t* cx) { return lw_adaptive_avg_pool_bwd(cx, 3); }

/* ---------------------------------------------------------------- upsampling */

/* PyTorch's compute_scales_value in opmath type sdt: scale given (> 0) ? 1/scale : in/out */
static int up_scale(tpu_lower_ctx_t* cx, int iscale, int64_t in, int64_t out, int sdt) {
  int dflt = tpu_ir_constant(G, sdt, (double)in / (double)out);
  if (sdt == TPU_DTYPE_F32) dflt = tpu_ir_constant(G, sdt, (double)((float)in / (float)out));
  if (iscale < 0 || lw_is_none(cx, iscale)) return dflt;
  int s = lw_scalar(cx, iscale, TPU_DTYPE_F64);
  int inv = tpu_ir_convert(G, BIN(DIV, tpu_ir_constant(G, TPU_DTYPE_F64, 1.0), s), sdt);
  return tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_GT, s, tpu_ir_constant(G, TPU_DTYPE_F64, 0)), inv, dflt);
}
/* resampling modes */
enum { UP_NEAREST = 0, UP_NEAREST_EXACT = 1, UP_LINEAR = 2, UP_CUBIC = 3 };

/* nearest source index per output position, i64 [out]: min(floor(o * scale), in - 1), or
 * min(floor((o + 0.5) * scale), in - 1) for nearest-exact (f32 math as PyTorch) */
static int nearest_idx(tpu_lower_ctx_t* cx, int iscale, int64_t in, int64_t out, int exact) {
  int sc = up_scale(cx, iscale, in, out, TPU_DTYPE_F32);
  int o = tpu_ir_iota(G, TPU_DTYPE_F32, 1, &out, 0);
  if (exact) o = BIN(ADD, o, lw_const_like(cx, 0.5, o));
  int src = tpu_ir_convert(G, UN(FLOOR, BIN(MUL, o, lw_bcast_like(cx, sc, o))), I64);
  return BIN(MIN, src, lw_const_like(cx, (double)(in - 1), src));
}
/* linear source indices i0, i1 and weights l0, l1 (sdt [out]) as PyTorch's
 * area_pixel_compute_source_index (non-cubic) */
static void linear_idx(tpu_lower_ctx_t* cx, int iscale, int64_t in, int64_t out, int align, int sdt, int* i0, int* i1,
                       int* l0, int* l1) {
  int o = tpu_ir_iota(G, sdt, 1, &out, 0);
  int src;
  if (align) {
    double sc = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0;
    if (sdt == TPU_DTYPE_F32) sc = out > 1 ? (double)((float)(in - 1) / (float)(out - 1)) : 0.0;
    src = BIN(MUL, o, lw_const_like(cx, sc, o));
  } else {
    int sc = lw_bcast_like(cx, up_scale(cx, iscale, in, out, sdt), o);
    src = BIN(SUB, BIN(MUL, sc, BIN(ADD, o, lw_const_like(cx, 0.5, o))), lw_const_like(cx, 0.5, o));
    src = BIN(MAX, src, lw_const_like(cx, 0, src));
  }
  *i0 = tpu_ir_convert(G, UN(TRUNC, src), I64);
  int lt = tpu_ir_compare(G, TPU_IR_CMP_LT, *i0, lw_const_like(cx, (double)(in - 1), *i0));
  *i1 = BIN(ADD, *i0, tpu_ir_convert(G, lt, I64));
  *l1 = BIN(SUB, src, tpu_ir_convert(G, *i0, sdt));
  *l0 = BIN(SUB, lw_const_like(cx, 1.0, *l1), *l1);
}

/* bicubic (PyTorch's A = -0.75 convolution, 4 taps at clamp(floor(src) - 1 + k, 0, in - 1),
 * src without the linear modes' clamp at 0) as an [out, in] matrix */
static int cubic_matrix(tpu_lower_ctx_t* cx, int64_t in, int64_t out, int align, int isc, int dt) {
  int64_t oi[2] = {out, in}, b0[1] = {0};
  int o = tpu_ir_iota(G, dt, 1, &out, 0);
  int src;
  if (align) {
    double sc = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0;
    if (dt == TPU_DTYPE_F32) sc = out > 1 ? (double)((float)(in - 1) / (float)(out - 1)) : 0.0;
    src = BIN(MUL, o, lw_const_like(cx, sc, o));
  } else {
    int sc = lw_bcast_like(cx, up_scale(cx, isc, in, out, dt), o);
    src = BIN(SUB, BIN(MUL, sc, BIN(ADD, o, lw_const_like(cx, 0.5, o))), lw_const_like(cx, 0.5, o));
  }
  int fl = BIN(MIN, UN(FLOOR, src), lw_const_like(cx, (double)(in - 1), src));
  int t = BIN(MIN, BIN(MAX, BIN(SUB, src, fl), lw_const_like(cx, 0, src)), lw_const_like(cx, 1, src));
  int base = tpu_ir_convert(G, fl, I64);
  const double A = -0.75;
  /* conv1(x) = ((A + 2) x - (A + 3)) x x + 1; conv2(x) = ((A x - 5A) x + 8A) x - 4A */
#define CONV1(x) BIN(ADD, BIN(MUL, BIN(MUL, BIN(SUB, BIN(MUL, lw_const_like(cx, A + 2, x), x), lw_const_like(cx, A + 3, x)), x), x), lw_const_like(cx, 1, x))
#define CONV2(x) BIN(SUB, BIN(MUL, BIN(ADD, BIN(MUL, BIN(SUB, BIN(MUL, lw_const_like(cx, A, x), x), lw_const_like(cx, 5 * A, x)), x), lw_const_like(cx, 8 * A, x)), x), lw_const_like(cx, 4 * A, x))
  int one = lw_const_like(cx, 1, t), t2 = BIN(SUB, one, t);
  int w[4] = {CONV2(BIN(ADD, t, one)), CONV1(t), CONV1(t2), CONV2(BIN(ADD, t2, one))};
#undef CONV1
#undef CONV2
  int col = tpu_ir_iota(G, I64, 2, oi, 1), z = lw_const(cx, 0, dt, 2, oi), m = -1;
  for (int k = 0; k < 4; ++k) {
    int idx = BIN(ADD, base, lw_const_like(cx, (double)(k - 1), base));
    idx = BIN(MIN, BIN(MAX, idx, lw_const_like(cx, 0, idx)), lw_const_like(cx, (double)(in - 1), idx));
    int tap = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, col, tpu_ir_broadcast(G, idx, 2, oi, b0)),
                            tpu_ir_broadcast(G, w[k], 2, oi, b0), z);
    m = m < 0 ? tap : BIN(ADD, m, tap);
  }
  return m;
}

/* the resampling matrix [out, in] of one dim: M[o, i] = sum of the weights of o's taps at i */
static int up_matrix(tpu_lower_ctx_t* cx, int64_t in, int64_t out, int mode, int align, int isc, int dt) {
  int64_t oi[2] = {out, in}, b0[1] = {0};
  int col = tpu_ir_iota(G, I64, 2, oi, 1);
  if (mode == UP_NEAREST || mode == UP_NEAREST_EXACT) {
    int idx = tpu_ir_broadcast(G, nearest_idx(cx, isc, in, out, mode == UP_NEAREST_EXACT), 2, oi, b0);
    return tpu_ir_convert(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, col, idx), dt);
  }
  if (mode == UP_CUBIC) return cubic_matrix(cx, in, out, align, isc, dt);
  int i0, i1, l0, l1;
  linear_idx(cx, isc, in, out, align, dt, &i0, &i1, &l0, &l1);
  int z = lw_const(cx, 0, dt, 2, oi);
  int m0 = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, col, tpu_ir_broadcast(G, i0, 2, oi, b0)), tpu_ir_broadcast(G, l0, 2, oi, b0), z);
  int m1 = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, col, tpu_ir_broadcast(G, i1, 2, oi, b0)), tpu_ir_broadcast(G, l1, 2, oi, b0), z);
  return BIN(ADD, m0, m1);
}

/* One upsampling op: ns spatial dims (1..3), the output_size / input_size / align_corners
 * argument indices and the scale argument of each spatial dim. */
typedef struct { int ns, mode, iout, iin, ialign, isc[3]; } up_spec_t;

/* x [BC, S...] with spatial dim j (tensor dim 1 + j) mapped through m [in_j, out_j] by a GEMM:
 * the dim moves last (a view), [R, in_j] . m -> [R, out_j], and moves back */
static int up_apply_dim(tpu_lower_ctx_t* cx, int x, int j, int m, int dt) {
  tpu_ir_type_t t = type_of(cx, x), mt = type_of(cx, m);
  if (x < 0 || m < 0) return -1;
  int r = t.rank, d = 1 + j;
  int64_t perm[TPU_MAX_DIMS], inv[TPU_MAX_DIMS], pd[TPU_MAX_DIMS], R = 1;
  int n = 0;
  for (int k = 0; k < r; ++k) if (k != d) perm[n++] = k;
  perm[n] = d;
  for (int k = 0; k < r; ++k) { pd[k] = t.dims[perm[k]]; inv[perm[k]] = k; if (k < r - 1) R *= pd[k]; }
  int xt = d == r - 1 ? x : tpu_ir_transpose(G, x, perm);
  int64_t r2[2] = {R, t.dims[d]};
  const int32_t prec = G->precision; /* interpolation weights are not a matmul: always f32 products */
  G->precision = TPU_IR_PRECISION_HIGHEST;
  int y = tpu_ir_dot(G, tpu_ir_reshape(G, xt, 2, r2), m, 0, dt);
  G->precision = prec;
  pd[r - 1] = mt.dims[1];
  y = tpu_ir_reshape(G, y, r, pd);
  return d == r - 1 ? y : tpu_ir_transpose(G, y, inv);
}

/* spatial sizes (in / out) of the op; full_in: the input's full shape */
static int up_sizes(tpu_lower_ctx_t* cx, const up_spec_t* sp, int rank, const int64_t* full_in, int64_t* insz,
                    int64_t* outsz) {
  const int64_t* os;
  if (rank != sp->ns + 2) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: expected a %dD input, got %dD", cx->op_name, sp->ns + 2, rank));
    return 0;
  }
  if (lw_int_list(cx, sp->iout, &os) != sp->ns) {
    tpu_ir_fail(G, TPU_ERR(INVALID_ARGUMENT, "%s: expected output_size of %d values", cx->op_name, sp->ns));
    return 0;
  }
  for (int j = 0; j < sp->ns; ++j) {
    insz[j] = full_in[2 + j]; outsz[j] = os[j];
    if (insz[j] <= 0 || outsz[j] <= 0) {
      tpu_ir_fail(G, TPU_ERR(UNSUPPORTED, "%s: empty spatial sizes", cx->op_name));
      return 0;
    }
  }
  return 1;
}

static tpu_status_t lw_upsample(tpu_lower_ctx_t* cx, const up_spec_t* sp) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0)), rank = lw_rank_of(cx, 0);
  if (!float_check(cx, dt)) return TPU_OK;
  const int64_t* xs = lw_sizes_of(cx, 0);
  int64_t insz[3], outsz[3];
  if (!up_sizes(cx, sp, rank, xs, insz, outsz)) return TPU_OK;
  int align = sp->ialign >= 0 ? (int)lw_int(cx, sp->ialign, 0) : 0;
  int64_t r[TPU_MAX_DIMS] = {xs[0] * xs[1]}, p10[2] = {1, 0};
  for (int j = 0; j < sp->ns; ++j) r[1 + j] = insz[j];
  int y = tpu_ir_reshape(G, lw_input(cx, 0, dt), 1 + sp->ns, r);
  for (int j = sp->ns - 1; j >= 0; --j) { /* last dim first (PyTorch's blend order) */
    if (sp->mode == UP_NEAREST || sp->mode == UP_NEAREST_EXACT) /* exact gathers */
      y = tpu_ir_index_select(G, y, nearest_idx(cx, sp->isc[j], insz[j], outsz[j], sp->mode == UP_NEAREST_EXACT), 1 + j);
    else
      y = up_apply_dim(cx, y, j, tpu_ir_transpose(G, up_matrix(cx, insz[j], outsz[j], sp->mode, align, sp->isc[j], dt), p10), dt);
  }
  const tpu_tensor_t* o = lw_out_meta(cx, 0);
  if (!o || o->ndim != rank) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: bad output", cx->op_name);
  return lw_output(cx, 0, tpu_ir_reshape(G, y, rank, o->sizes));
}
/* *_backward(grad_output, output_size, input_size, [align_corners,] scales...): the
 * transposed maps as GEMMs with the [out, in] matrices */
static tpu_status_t lw_upsample_bwd(tpu_lower_ctx_t* cx, const up_spec_t* sp) {
  int dt = tpu_opmath_dtype(lw_dtype_of(cx, 0)), rank = lw_rank_of(cx, 0);
  if (!float_check(cx, dt)) return TPU_OK;
  const int64_t* is;
  if (lw_int_list(cx, sp->iin, &is) != sp->ns + 2)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: expected input_size of %d values", cx->op_name, sp->ns + 2);
  int64_t insz[3], outsz[3];
  if (!up_sizes(cx, sp, rank, is, insz, outsz)) return TPU_OK;
  const int64_t* gs = lw_sizes_of(cx, 0);
  int ok = gs[0] == is[0] && gs[1] == is[1];
  for (int j = 0; j < sp->ns; ++j) ok &= gs[2 + j] == outsz[j];
  if (!ok) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: grad_output shape does not match output_size", cx->op_name);
  int align = sp->ialign >= 0 ? (int)lw_int(cx, sp->ialign, 0) : 0;
  int64_t r[TPU_MAX_DIMS] = {gs[0] * gs[1]};
  for (int j = 0; j < sp->ns; ++j) r[1 + j] = outsz[j];
  int g = tpu_ir_reshape(G, lw_input(cx, 0, dt), 1 + sp->ns, r);
  for (int j = sp->ns - 1; j >= 0; --j)
    g = up_apply_dim(cx, g, j, up_matrix(cx, insz[j], outsz[j], sp->mode, align, sp->isc[j], dt), dt);
  return lw_output(cx, 0, tpu_ir_reshape(G, g, rank, is));
}

#define UP_FWD(fn, ns, mode, ialign, sc0, sc1, sc2) \
  static tpu_status_t fn(tpu_lower_ctx_t* cx) { const up_spec_t sp = {ns, mode, 1, -1, ialign, {sc0, sc1, sc2}}; return lw_upsample(cx, &sp); }
#define UP_BWD(fn, ns, mode, ialign, sc0, sc1, sc2) \
  static tpu_status_t fn(tpu_lower_ctx_t* cx) { const up_spec_t sp = {ns, mode, 1, 2, ialign, {sc0, sc1, sc2}}; return lw_upsample_bwd(cx, &sp); }
/* upsample_nearest{1,2,3}d(self, output_size, scales...), _upsample_nearest_exact*: same */
UP_FWD(lower_upsample_nearest1d, 1, UP_NEAREST, -1, 2, -1, -1)
UP_FWD(lower_upsample_nearest2d, 2, UP_NEAREST, -1, 2, 3, -1)
UP_FWD(lower_upsample_nearest3d, 3, UP_NEAREST, -1, 2, 3, 4)
UP_FWD(lower_upsample_nearest_exact1d, 1, UP_NEAREST_EXACT, -1, 2, -1, -1)
UP_FWD(lower_upsample_nearest_exact2d, 2, UP_NEAREST_EXACT, -1, 2, 3, -1)
UP_FWD(lower_upsample_nearest_exact3d, 3, UP_NEAREST_EXACT, -1, 2, 3, 4)
/* upsample_{linear1d,bilinear2d,trilinear3d}(self, output_size, align_corners, scales...) */
UP_FWD(lower_upsample_linear1d, 1, UP_LINEAR, 2, 3, -1, -1)
UP_FWD(lower_upsample_bilinear2d, 2, UP_LINEAR, 2, 3, 4, -1)
UP_FWD(lower_upsample_trilinear3d, 3, UP_LINEAR, 2, 3, 4, 5)
UP_FWD(lower_upsample_bicubic2d, 2, UP_CUBIC, 2, 3, 4, -1)
/* backward(grad_output, output_size, input_size, [align_corners,] scales...) */
UP_BWD(lower_upsample_bicubic2d_bwd, 2, UP_CUBIC, 3, 4, 5, -1)
UP_BWD(lower_upsample_nearest1d_bwd, 1, UP_NEAREST, -1, 3, -1, -1)
UP_BWD(lower_upsample_nearest2d_bwd, 2, UP_NEAREST, -1, 3, 4, -1)
UP_BWD(lower_upsample_nearest3d_bwd, 3, UP_NEAREST, -1, 3, 4, 5)
UP_BWD(lower_upsample_nearest_exact1d_bwd, 1, UP_NEAREST_EXACT, -1, 3, -1, -1)
UP_BWD(lower_upsample_nearest_exact2d_bwd, 2, UP_NEAREST_EXACT, -1, 3, 4, -1)
UP_BWD(lower_upsample_nearest_exact3d_bwd, 3, UP_NEAREST_EXACT, -1, 3, 4, 5)
UP_BWD(lower_upsample_linear1d_bwd, 1, UP_LINEAR, 3, 4, -1, -1)
UP_BWD(lower_upsample_bilinear2d_bwd, 2, UP_LINEAR, 3, 4, 5, -1)
UP_BWD(lower_upsample_trilinear3d_bwd, 3, UP_LINEAR, 3, 4, 5, 6)

TPU_LOWERING_TABLE(tpu_lowerings_norm_pool) = {
  {"aten::native_batch_norm", lower_batch_norm},
  {"aten::native_batch_norm_backward", lower_batch_norm_bwd},
  {"aten::_native_batch_norm_legit", lower_batch_norm_legit},
  {"aten::_native_batch_norm_legit.no_stats", lower_batch_norm_legit_no_stats},
  {"aten::_batch_norm_with_update", lower_batch_norm_with_update},
  /* batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
   *   save_var?, bool update, eps, output_mask, reserve): native_batch_norm_backward's layout */
  {"aten::batch_norm_backward", lower_batch_norm_bwd},
  {"aten::native_group_norm", lower_group_norm},
  {"aten::native_group_norm_backward", lower_group_norm_bwd},
  {"torch_tpu::group_norm_f32", lower_group_norm_f32},
  {"torch_tpu::group_norm_f32_backward", lower_group_norm_bwd},
  {"aten::max_pool2d_with_indices", lower_max_pool2d},
  {"aten::max_pool2d_with_indices.out", lower_max_pool2d},
  {"aten::max_pool2d_with_indices_backward", lower_max_pool2d_bwd},
  {"aten::max_pool2d_with_indices_backward.grad_input", lower_max_pool2d_bwd},
  {"aten::max_pool3d_with_indices", lower_max_pool3d},
  {"aten::max_pool3d_with_indices.out", lower_max_pool3d},
  {"aten::max_pool3d_with_indices_backward", lower_max_pool3d_bwd},
  {"aten::max_pool3d_with_indices_backward.grad_input", lower_max_pool3d_bwd},
  {"aten::adaptive_max_pool2d", lower_adaptive_max_pool2d},
  {"aten::adaptive_max_pool2d.out", lower_adaptive_max_pool2d},
  {"aten::adaptive_max_pool2d_backward", lower_adaptive_max_pool2d_bwd},
  {"aten::adaptive_max_pool2d_backward.grad_input", lower_adaptive_max_pool2d_bwd},
  {"aten::avg_pool2d", lower_avg_pool2d},
  {"aten::avg_pool2d.out", lower_avg_pool2d},
  {"aten::avg_pool2d_backward", lower_avg_pool2d_bwd},
  {"aten::avg_pool2d_backward.grad_input", lower_avg_pool2d_bwd},
  {"aten::_adaptive_avg_pool2d", lower_adaptive_avg_pool2d},
  {"aten::_adaptive_avg_pool2d.out", lower_adaptive_avg_pool2d},
  {"aten::_adaptive_avg_pool2d_backward", lower_adaptive_avg_pool2d_bwd},
  {"aten::_adaptive_avg_pool2d_backward.out", lower_adaptive_avg_pool2d_bwd},
  {"aten::adaptive_max_pool3d", lower_adaptive_max_pool3d},
  {"aten::adaptive_max_pool3d.out", lower_adaptive_max_pool3d},
  {"aten::adaptive_max_pool3d_backward", lower_adaptive_max_pool3d_bwd},
  {"aten::adaptive_max_pool3d_backward.grad_input", lower_adaptive_max_pool3d_bwd},
  {"aten::max_unpool2d", lower_max_unpool2d},
  {"aten::max_unpool2d.out", lower_max_unpool2d},
  {"aten::max_unpool3d", lower_max_unpool3d},
  {"aten::max_unpool3d.out", lower_max_unpool3d},
  {"aten::avg_pool3d", lower_avg_pool3d},
  {"aten::avg_pool3d.out", lower_avg_pool3d},
  {"aten::avg_pool3d_backward", lower_avg_pool3d_bwd},
  {"aten::avg_pool3d_backward.grad_input", lower_avg_pool3d_bwd},
  {"aten::_adaptive_avg_pool3d", lower_adaptive_avg_pool3d},
  {"aten::_adaptive_avg_pool3d.out", lower_adaptive_avg_pool3d},
  {"aten::_adaptive_avg_pool3d_backward", lower_adaptive_avg_pool3d_bwd},
  {"aten::_adaptive_avg_pool3d_backward.out", lower_adaptive_avg_pool3d_bwd},
  {"aten::upsample_nearest2d", lower_upsample_nearest2d},
  {"aten::upsample_nearest2d.out", lower_upsample_nearest2d},
  {"aten::upsample_nearest2d_backward", lower_upsample_nearest2d_bwd},
  {"aten::upsample_nearest2d_backward.grad_input", lower_upsample_nearest2d_bwd},
  {"aten::upsample_bilinear2d", lower_upsample_bilinear2d},
  {"aten::upsample_bilinear2d.out", lower_upsample_bilinear2d},
  {"aten::upsample_bilinear2d_backward", lower_upsample_bilinear2d_bwd},
  {"aten::upsample_bilinear2d_backward.grad_input", lower_upsample_bilinear2d_bwd},
  {"aten::_upsample_nearest_exact2d", lower_upsample_nearest_exact2d},
  {"aten::_upsample_nearest_exact2d.out", lower_upsample_nearest_exact2d},
  {"aten::_upsample_nearest_exact2d_backward", lower_upsample_nearest_exact2d_bwd},
  {"aten::_upsample_nearest_exact2d_backward.grad_input", lower_upsample_nearest_exact2d_bwd},
  {"aten::upsample_nearest1d", lower_upsample_nearest1d},
  {"aten::upsample_nearest1d.out", lower_upsample_nearest1d},
  {"aten::upsample_nearest1d_backward", lower_upsample_nearest1d_bwd},
  {"aten::upsample_nearest1d_backward.grad_input", lower_upsample_nearest1d_bwd},
  {"aten::_upsample_nearest_exact1d", lower_upsample_nearest_exact1d},
  {"aten::_upsample_nearest_exact1d.out", lower_upsample_nearest_exact1d},
  {"aten::_upsample_nearest_exact1d_backward", lower_upsample_nearest_exact1d_bwd},
  {"aten::_upsample_nearest_exact1d_backward.grad_input", lower_upsample_nearest_exact1d_bwd},
  {"aten::upsample_linear1d", lower_upsample_linear1d},
  {"aten::upsample_linear1d.out", lower_upsample_linear1d},
  {"aten::upsample_linear1d_backward", lower_upsample_linear1d_bwd},
  {"aten::upsample_linear1d_backward.grad_input", lower_upsample_linear1d_bwd},
  {"aten::upsample_bicubic2d", lower_upsample_bicubic2d},
  {"aten::upsample_bicubic2d.out", lower_upsample_bicubic2d},
  {"aten::upsample_bicubic2d_backward", lower_upsample_bicubic2d_bwd},
  {"aten::upsample_bicubic2d_backward.grad_input", lower_upsample_bicubic2d_bwd},
  {"aten::upsample_nearest3d", lower_upsample_nearest3d},
  {"aten::upsample_nearest3d.out", lower_upsample_nearest3d},
  {"aten::upsample_nearest3d_backward", lower_upsample_nearest3d_bwd},
  {"aten::upsample_nearest3d_backward.grad_input", lower_upsample_nearest3d_bwd},
  {"aten::_upsample_nearest_exact3d", lower_upsample_nearest_exact3d},
  {"aten::_upsample_nearest_exact3d.out", lower_upsample_nearest_exact3d},
  {"aten::_upsample_nearest_exact3d_backward", lower_upsample_nearest_exact3d_bwd},
  {"aten::_upsample_nearest_exact3d_backward.grad_input", lower_upsample_nearest_exact3d_bwd},
  {"aten::upsample_trilinear3d", lower_upsample_trilinear3d},
  {"aten::upsample_trilinear3d.out", lower_upsample_trilinear3d},
  {"aten::upsample_trilinear3d_backward", lower_upsample_trilinear3d_bwd},
  {"aten::upsample_trilinear3d_backward.grad_input", lower_upsample_trilinear3d_bwd},
  TPU_LOWERING_END
};
