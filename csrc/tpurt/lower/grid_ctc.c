/* grid_ctc.c — two sampling/sequence ops through host custom targets:
 *   grid_sampler_2d / _3d (+ _backward): GRID_SAMPLE / GRID_SAMPLE_BWD (drivers/host/grid_sample.c);
 *     f32/f64 (f16/bf16 computed in f32 and rounded once).
 *   _ctc_loss (+ _backward): CTC / CTC_BWD (drivers/host/ctc.c). The length lists are schema
 *     int[]s, so they are structural: checked here with PyTorch's messages and baked into the
 *     graph as i64 constants (a new set of lengths compiles a new executable).
 * The composites above them (F.grid_sample's checks, ctc_loss's reductions and zero_infinity
 * masking) are PyTorch's own. */
#include <string.h>

#include "lower/lower.h"

#define G (&cx->g)


/* ---------------------------------------------------------------- grid_sampler_2d */

static int gs_dtype(tpu_lower_ctx_t* cx, int i) {
  int dt = lw_dtype_of(cx, i);
  if (dt == TPU_DTYPE_F64) return dt;
  if (dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16) return TPU_DTYPE_F32;
  lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: not implemented for '%s' on tpu", cx->op_name, tpu_dtype_name(dt));
  return -1;
}
/* input (arg ix) and grid (arg ig) as the compute dtype, after PyTorch's checks (rank: 4 or 5) */
static tpu_status_t gs_inputs(tpu_lower_ctx_t* cx, int ix, int ig, int rank, int* out_x, int* out_g, int* out_dt) {
  *out_x = *out_g = -1;
  int rx = lw_rank_of(cx, ix), rg = lw_rank_of(cx, ig);
  const int64_t *sx = lw_sizes_of(cx, ix), *sg = lw_sizes_of(cx, ig);
  if (rx != rank || rg != rank)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "grid_sampler(): expected %dD input and grid with same number of "
                   "dimensions, but got input with %d dimensions and grid with %d dimensions", rank, rx, rg);
  if (sx[0] != sg[0])
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "grid_sampler(): expected grid and input to have same batch size, "
                   "but got input with batch size %lld and grid with batch size %lld", (long long)sx[0], (long long)sg[0]);
  if (sg[rank - 1] != rank - 2)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "grid_sampler(): expected grid to have size %d in last dimension, "
                   "but got grid with size %lld", rank - 2, (long long)sg[rank - 1]);
  if (lw_dtype_of(cx, ix) != lw_dtype_of(cx, ig))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "grid_sampler(): expected input and grid to have same dtype, but "
                   "input has %s and grid has %s", tpu_dtype_c10_name(lw_dtype_of(cx, ix)),
                   tpu_dtype_c10_name(lw_dtype_of(cx, ig)));
  for (int d = 2; d < rank; ++d)
    if (sx[d] <= 0)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "grid_sampler(): expected input to have non-empty spatial "
                     "dimensions, but input has sizes with dimension %d being empty", d);
  int dt = gs_dtype(cx, ix);
  if (dt < 0) return TPU_OK;
  *out_dt = dt;
  *out_x = lw_input(cx, ix, dt);
  *out_g = lw_input(cx, ig, dt);
  return TPU_OK;
}
static int64_t gs_attr(tpu_lower_ctx_t* cx, int im, int ip, int ia, int rank, tpu_status_t* st) {
  int64_t mode = lw_int(cx, im, 0), pad = lw_int(cx, ip, 0), align = lw_int(cx, ia, 0);
  *st = TPU_OK;
  if (rank == 5 && mode == 2)
    *st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "grid_sampler(): bicubic interpolation only supports 4D input");
  else if (mode < 0 || mode > 2 || pad < 0 || pad > 2)
    *st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "grid_sampler(): invalid interpolation mode %lld or padding mode "
                  "%lld", (long long)mode, (long long)pad);
  return mode | pad << 2 | (align ? 1 : 0) << 4;
}
/* grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners) */
static tpu_status_t lw_grid_sampler(tpu_lower_ctx_t* cx, int rank) {
  int x, g, dt;
  tpu_status_t st;
  TPU_RETURN_IF_ERROR(gs_inputs(cx, 0, 1, rank, &x, &g, &dt));
  if (x < 0) return TPU_OK;
  int64_t attr = gs_attr(cx, 2, 3, 4, rank, &st);
  TPU_RETURN_IF_ERROR(st);
  tpu_ir_type_t tx = *tpu_ir_type(G, x), tg = *tpu_ir_type(G, g), t = tx;
  for (int d = 2; d < rank; ++d) t.dims[d] = tg.dims[d - 1];
  if (tpu_ir_numel(&t) == 0) return lw_output(cx, 0, lw_const(cx, 0, dt, rank, t.dims));
  int in[2] = {x, g};
  return lw_output(cx, 0, lw_custom(cx, TPU_IR_CUSTOM_GRID_SAMPLE, attr, &t, 2, in));
}
static tpu_status_t lower_grid_sampler_2d(tpu_lower_ctx_t* cx) { return lw_grid_sampler(cx, 4); }
static tpu_status_t lower_grid_sampler_3d(tpu_lower_ctx_t* cx) { return lw_grid_sampler(cx, 5); }
/* grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
 * output_mask) -> (grad_input, grad_grid) */
static tpu_status_t lw_grid_sampler_backward(tpu_lower_ctx_t* cx, int rank) {
  int x, g, dt;
  tpu_status_t st;
  TPU_RETURN_IF_ERROR(gs_inputs(cx, 1, 2, rank, &x, &g, &dt));
  if (x < 0) return TPU_OK;
  int64_t attr = gs_attr(cx, 3, 4, 5, rank, &st);
  TPU_RETURN_IF_ERROR(st);
  int go = lw_input(cx, 0, dt);
  const int64_t* mask = NULL;
  int nm = lw_int_list(cx, 6, &mask);
  int want[2] = {nm < 1 || mask[0], nm < 2 || mask[1]};
  int in[3] = {go, x, g};
  for (int k = 0; k < 2; ++k) {
    const tpu_tensor_t* o = lw_out_meta(cx, k);
    if (!o || o->ndim < 0) { lw_output(cx, k, -1); continue; }
    tpu_ir_type_t t = *tpu_ir_type(G, k ? g : x);
    if (!want[k] || tpu_ir_numel(&t) == 0 || tpu_ir_numel(tpu_ir_type(G, go)) == 0)
      lw_output(cx, k, lw_const(cx, 0, dt, t.rank, t.dims));
    else
      lw_output(cx, k, lw_custom(cx, TPU_IR_CUSTOM_GRID_SAMPLE_BWD, attr | (int64_t)k << 5, &t, 3, in));
  }
  return TPU_OK;
}
static tpu_status_t lower_grid_sampler_2d_backward(tpu_lower_ctx_t* cx) { return lw_grid_sampler_backward(cx, 4); }
static tpu_status_t lower_grid_sampler_3d_backward(tpu_lower_ctx_t* cx) { return lw_grid_sampler_backward(cx, 5); }

/* ---------------------------------------------------------------- CTC loss */

/* an i64 [n] constant holding v[0..n) (concatenations of at most 16 pieces per op) */
static int i64_array(tpu_lower_ctx_t* cx, int64_t n, const int64_t* v) {
  int64_t one = 1;
  if (n == 0) return lw_const(cx, 0, TPU_DTYPE_I64, 1, &n);
  int parts[16], np = 0;
  int64_t chunk = 1;
  while (chunk * 16 < n) chunk *= 16;
  if (chunk == 1) {
    for (int64_t i = 0; i < n; ++i) parts[np++] = lw_const(cx, (double)v[i], TPU_DTYPE_I64, 1, &one);
  } else {
    for (int64_t i = 0; i < n; i += chunk) parts[np++] = i64_array(cx, TPU_MIN(chunk, n - i), v + i);
  }
  return np == 1 ? parts[0] : tpu_ir_concat(G, np, parts, 0);
}
/* shared checks of _ctc_loss / _ctc_loss_backward (arg offset o: 1 in the backward); out: lengths as
 * constants, log_probs and targets as values */
static tpu_status_t ctc_inputs(tpu_lower_ctx_t* cx, int o, int64_t blank, int* out_lp, int* out_tg, int* out_il,
                               int* out_tl, int64_t* out_smax, int* out_concat) {
  const char* c = "ctc_loss_allocate_outputs";
  *out_lp = -1;
  int dt = lw_dtype_of(cx, o);
  if (lw_rank_of(cx, o) != 3)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected 3-dimensional tensor, but got %d-dimensional tensor for "
                   "argument #1 'log_probs' (while checking arguments for %s)", lw_rank_of(cx, o), c);
  if (dt != TPU_DTYPE_F32 && dt != TPU_DTYPE_F64)
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: not implemented for '%s' on tpu", cx->op_name, tpu_dtype_name(dt));
  int tr = lw_rank_of(cx, o + 1), tdt = lw_dtype_of(cx, o + 1);
  if (tr < 1 || tr > 2)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected 1 to 2 dimensions, but got %d-dimensional tensor for "
                   "argument #2 'targets' (while checking arguments for %s)", tr, c);
  if (tdt != TPU_DTYPE_I64 && tdt != TPU_DTYPE_I32)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "ctc_loss: targets must be int32 or int64, got %s",
                   tpu_dtype_name(tdt));
  const int64_t *lps = lw_sizes_of(cx, o), *tgs = lw_sizes_of(cx, o + 1), *il = NULL, *tl = NULL;
  int64_t T = lps[0], N = lps[1], C = lps[2];
  int nil = lw_int_list(cx, o + 2, &il), ntl = lw_int_list(cx, o + 3, &tl);
  if (blank < 0 || blank >= C) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "blank must be in label range");
  if (nil != N) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "input_lengths must be of size batch_size");
  if (ntl != N) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "target_lengths must be of size batch_size");
  int64_t smax = 0, pos = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (tl[i] < 0)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected target_lengths to have value at least 0, but got value "
                     "%lld (while checking arguments for %s)", (long long)tl[i], c);
    pos += tl[i];
    smax = TPU_MAX(smax, tl[i]);
  }
  if (tr == 1 && tgs[0] != pos)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected tensor to have size %lld at dimension 0, but got size "
                   "%lld for argument #2 'targets' (while checking arguments for %s)", (long long)pos,
                   (long long)tgs[0], c);
  if (tr == 2 && tgs[0] != N)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected tensor to have size %lld at dimension 0, but got size "
                   "%lld for argument #2 'targets' (while checking arguments for %s)", (long long)N, (long long)tgs[0], c);
  if (tr == 2 && tgs[1] < smax)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected tensor to have size at least %lld at dimension 1, but got "
                   "size %lld for argument #2 'targets' (while checking arguments for %s)", (long long)smax,
                   (long long)tgs[1], c);
  for (int64_t i = 0; i < N; ++i) {
    if (il[i] < 0)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected input_lengths to have value at least 0, but got value "
                     "%lld (while checking arguments for %s)", (long long)il[i], c);
    if (il[i] > T)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected input_lengths to have value at most %lld, but got value "
                     "%lld (while checking arguments for %s)", (long long)T, (long long)il[i], c);
  }
  *out_smax = smax;
  *out_concat = tr == 1;
  *out_lp = lw_input(cx, o, dt);
  *out_tg = lw_input(cx, o + 1, TPU_DTYPE_I64);
  *out_il = i64_array(cx, N, il);
  *out_tl = i64_array(cx, N, tl);
  return TPU_OK;
}
/* _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity) -> (nll, log_alpha) */
static tpu_status_t lower_ctc_loss(tpu_lower_ctx_t* cx) {
  int64_t blank = lw_int(cx, 4, 0), smax;
  int in[4], concat;
  TPU_RETURN_IF_ERROR(ctc_inputs(cx, 0, blank, &in[0], &in[1], &in[2], &in[3], &smax, &concat));
  if (in[0] < 0) return TPU_OK;
  tpu_ir_type_t lt = *tpu_ir_type(G, in[0]);
  int64_t T = lt.dims[0], N = lt.dims[1], Lp = 2 * smax + 1;
  if (N == 0 || T == 0) { /* nothing to align: PyTorch reads log_probs[0] here; keep it well defined */
    if (T == 0 && N > 0)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "ctc_loss: log_probs has no time steps");
    lw_output(cx, 0, lw_const(cx, 0, lt.dtype, 1, &N));
    return lw_output(cx, 1, lw_const(cx, 0, lt.dtype, 3, (int64_t[]){N, T, Lp}));
  }
  tpu_ir_type_t t = lt;
  t.rank = 2; t.dims[0] = N; t.dims[1] = 1 + T * Lp;
  int f = lw_custom_a(cx, TPU_IR_CUSTOM_CTC, blank, concat, 0, &t, 4, in);
  int nll = tpu_ir_reshape(G, tpu_ir_slice(G, f, (int64_t[]){0, 0}, (int64_t[]){N, 1}, (int64_t[]){1, 1}), 1, &N);
  int la = tpu_ir_slice(G, f, (int64_t[]){0, 1}, (int64_t[]){N, 1 + T * Lp}, (int64_t[]){1, 1});
  lw_output(cx, 0, nll);
  return lw_output(cx, 1, tpu_ir_reshape(G, la, 3, (int64_t[]){N, T, Lp}));
}
/* _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
 * blank, zero_infinity) */
static tpu_status_t lower_ctc_loss_backward(tpu_lower_ctx_t* cx) {
  int64_t blank = lw_int(cx, 7, 0), smax;
  int in[7], concat;
  TPU_RETURN_IF_ERROR(ctc_inputs(cx, 1, blank, &in[1], &in[2], &in[3], &in[4], &smax, &concat));
  if (in[1] < 0) return TPU_OK;
  tpu_ir_type_t lt = *tpu_ir_type(G, in[1]);
  int dt = lt.dtype;
  const int64_t* las = lw_sizes_of(cx, 6);
  if (lw_rank_of(cx, 6) != 3 || las[0] != lt.dims[1] || las[1] != lt.dims[0] || las[2] < 2 * smax + 1 ||
      lw_rank_of(cx, 0) != 1 || lw_sizes_of(cx, 0)[0] != lt.dims[1] || lw_rank_of(cx, 5) != 1 ||
      lw_sizes_of(cx, 5)[0] != lt.dims[1])
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "_ctc_loss_backward: grad, neg_log_likelihood or log_alpha do not "
                   "match log_probs");
  if (tpu_ir_numel(&lt) == 0) return lw_output(cx, 0, lw_const(cx, 0, dt, 3, lt.dims));
  in[0] = lw_input(cx, 0, dt);
  in[5] = lw_input(cx, 5, dt);
  in[6] = lw_input(cx, 6, dt);
  return lw_output(cx, 0, lw_custom_a(cx, TPU_IR_CUSTOM_CTC_BWD, blank, concat, lw_int(cx, 8, 0) ? 1 : 0, &lt, 7, in));
}

/* shape rule (pure): PyTorch has no meta function for it; grad is shaped like log_probs (arg 1) */
static tpu_status_t shapes_ctc_loss_backward(int dev, const tpu_arg_t* a, int n, tpu_tensor_t* o, int max, int* out_n) {
  return lw_shapes_like_arg(dev, a, n, 1, o, max, out_n);
}

TPU_LOWERING_TABLE(tpu_lowerings_grid_ctc) = {
  {"aten::grid_sampler_2d", lower_grid_sampler_2d},
  {"aten::grid_sampler_2d_backward", lower_grid_sampler_2d_backward},
  {"aten::grid_sampler_3d", lower_grid_sampler_3d},
  {"aten::grid_sampler_3d_backward", lower_grid_sampler_3d_backward},
  {"aten::_ctc_loss", lower_ctc_loss},
  {"aten::_ctc_loss_backward", lower_ctc_loss_backward, .shapes = shapes_ctc_loss_backward},
  TPU_LOWERING_END
};
