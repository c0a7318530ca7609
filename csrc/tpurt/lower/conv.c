/* conv.c — convolution lowerings. An unknown backend reaches these through aten::_convolution's
 * "overrideable" path (conv1d/2d/3d, conv_transpose1d/2d/3d, 'same'/'valid' padding, which
 * PyTorch resolves — padding asymmetric 'same' explicitly — before this point):
 *   convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
 *                            output_padding, groups)
 *   convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
 *                            transposed, output_padding, groups, output_mask) -> (gi, gw, gb)
 * Everything becomes TPU_IR_CONV (x [N, C, *S], w [O, C/G, *K]) and the two custom calls
 * CONV_BWD_INPUT (gy, w) -> gx and CONV_BWD_WEIGHT (x, gy) -> gw of the host driver's conv.h;
 * a transposed convolution is the input-gradient of the convolution with its weight. Math
 * runs in the op-math dtype: f16/bf16 operands go to the kernels as they are (the host kernels
 * widen them exactly while copying) and the results are f32, rounded once by the output
 * convert. The ops carry the matmul precision (cx->g.precision) for f32 operands. */
#include "lower/lower.h"

typedef struct {
  int nsp;
  int64_t stride[3], padding[3], dilation[3], outpad[3], groups;
  int transposed;
} conv_attr_t;

/* Reads stride..groups starting at argument i0 (stride, padding, dilation, transposed,
 * output_padding, groups); one-element lists repeat. */
static tpu_status_t conv_attrs(tpu_lower_ctx_t* cx, int i0, int nsp, conv_attr_t* a) {
  a->nsp = nsp;
  int64_t* dst[4] = {a->stride, a->padding, a->dilation, a->outpad};
  const int arg[4] = {i0, i0 + 1, i0 + 2, i0 + 4};
  const char* names[4] = {"stride", "padding", "dilation", "output_padding"};
  for (int l = 0; l < 4; ++l) {
    const int64_t* v = NULL;
    int n = lw_int_list(cx, arg[l], &v);
    if (n != 1 && n != nsp)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "expected %s to be a single integer value or a list of %d values to match the convolution dimensions, but got %s=[%d values]",
                     names[l], nsp, names[l], n);
    for (int d = 0; d < nsp; ++d) dst[l][d] = v[n == 1 ? 0 : d];
  }
  a->transposed = (int)lw_int(cx, i0 + 3, 0);
  a->groups = lw_int(cx, i0 + 5, 1);
  for (int d = 0; d < nsp; ++d) {
    if (a->stride[d] < 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "non-positive stride is not supported");
    if (a->padding[d] < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "negative padding is not supported");
    if (a->dilation[d] < 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "dilation should be greater than zero");
    if (a->outpad[d] < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "negative output_padding is not supported");
  }
  if (a->groups < 1) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "non-positive groups is not supported");
  return TPU_OK;
}

static void conv_fill_op(tpu_ir_op_t* p, const conv_attr_t* a) {
  for (int d = 0; d < a->nsp; ++d) {
    p->a[0][d] = a->stride[d]; p->a[1][d] = a->padding[d]; p->a[2][d] = a->dilation[d];
  }
}

/* y [N, O, *Q] (dtype ct) = conv(x [N, C, *S], w [O, C/G, *K]) */
static int conv_fwd(tpu_lower_ctx_t* cx, int x, int w, const conv_attr_t* a, int ct) {
  if (x < 0 || w < 0) return -1;
  const tpu_ir_type_t* xt = tpu_ir_type(&cx->g, x);
  const tpu_ir_type_t* wt = tpu_ir_type(&cx->g, w);
  tpu_ir_op_t p = {0};
  p.opcode = TPU_IR_CONV;
  p.type.dtype = ct;
  p.prec = cx->g.precision;
  p.type.rank = xt->rank;
  p.type.dims[0] = xt->dims[0];
  p.type.dims[1] = wt->dims[0];
  for (int d = 0; d < a->nsp; ++d) {
    int64_t q = (xt->dims[2 + d] + 2 * a->padding[d] - a->dilation[d] * (wt->dims[2 + d] - 1) - 1);
    if (q < 0) return tpu_ir_fail(&cx->g, TPU_ERR(INVALID_ARGUMENT, "Calculated output size is too small"));
    /* a strided output size is no c + k*m of the input size: a size decision (lower.h) */
    p.type.dims[2 + d] = (a->stride[d] == 1 ? q : lw_size_decide(cx, TPU_SIZE_DECIDE_FLOOR_DIV, q, a->stride[d])) + 1;
  }
  p.i0 = a->groups;
  p.i1 = a->nsp;
  conv_fill_op(&p, a);
  return tpu_ir_add_op(&cx->g, &p, 2, (int[]){x, w});
}

/* custom conv backward: target BWD_INPUT (gy, w) or BWD_WEIGHT (x, gy), result shape dims, dtype ct */
static int conv_bwd(tpu_lower_ctx_t* cx, int target, int u, int v, int rank, const int64_t* dims,
                    const conv_attr_t* a, int ct) {
  if (u < 0 || v < 0) return -1;
  tpu_ir_op_t p = {0};
  p.opcode = TPU_IR_CUSTOM;
  p.type.dtype = ct;
  p.prec = cx->g.precision;
  p.type.rank = rank;
  for (int d = 0; d < rank; ++d) p.type.dims[d] = dims[d];
  p.i0 = target;
  p.i1 = a->groups;
  conv_fill_op(&p, a);
  return tpu_ir_add_op(&cx->g, &p, 2, (int[]){u, v});
}

/* bias [O] broadcast along dim 1 of y and added */
static int conv_add_bias(tpu_lower_ctx_t* cx, int y, int b) {
  if (y < 0 || b < 0) return -1;
  const tpu_ir_type_t* t = tpu_ir_type(&cx->g, y);
  int64_t dims[TPU_MAX_DIMS];
  memcpy(dims, t->dims, sizeof(dims));
  int rank = t->rank;
  int bb = tpu_ir_broadcast(&cx->g, b, rank, dims, (int64_t[]){1});
  return tpu_ir_binary(&cx->g, TPU_IR_ADD, y, bb);
}

static tpu_status_t conv_check_inputs(tpu_lower_ctx_t* cx, int xi, int wi, int* out_nsp) {
  if (!lw_is_tensor(cx, xi) || !lw_is_tensor(cx, wi))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: input and weight must be tensors", cx->op_name);
  int r = lw_rank_of(cx, xi);
  if (r < 3 || r > 5 || lw_rank_of(cx, wi) != r)
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: %d-dimensional input with a %d-dimensional weight is not supported",
                   cx->op_name, r, lw_rank_of(cx, wi));
  int dt = lw_dtype_of(cx, xi);
  if (!tpu_dtype_is_floating(dt))
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: not implemented for '%s'", cx->op_name, tpu_dtype_name(dt));
  if (lw_dtype_of(cx, wi) != dt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Input type (%s) and weight type (%s) should be the same",
                   tpu_dtype_name(dt), tpu_dtype_name(lw_dtype_of(cx, wi)));
  *out_nsp = r - 2;
  return TPU_OK;
}

/* aten::convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
 *                                output_padding, groups) -> Tensor */
static tpu_status_t lower_convolution(tpu_lower_ctx_t* cx) {
  int nsp;
  TPU_RETURN_IF_ERROR(conv_check_inputs(cx, 0, 1, &nsp));
  conv_attr_t a;
  TPU_RETURN_IF_ERROR(conv_attrs(cx, 3, nsp, &a));
  int ct = tpu_opmath_dtype(lw_dtype_of(cx, 0));
  const int64_t* xs = lw_sizes_of(cx, 0);
  const int64_t* ws = lw_sizes_of(cx, 1);
  int x = lw_input(cx, 0, -1), w = lw_input(cx, 1, -1), y;
  if (!a.transposed) {
    if (xs[1] != ws[1] * a.groups || ws[0] % a.groups)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Given groups=%lld, weight of size [%lld, %lld, ...], expected input[%lld, %lld, ...] to have %lld channels, but got %lld channels instead",
                     (long long)a.groups, (long long)ws[0], (long long)ws[1], (long long)xs[0], (long long)xs[1],
                     (long long)(ws[1] * a.groups), (long long)xs[1]);
    y = conv_fwd(cx, x, w, &a, ct);
  } else {
    /* weight [Cin, Cout/G, *K]: y [N, Cout, *S'] is the input-gradient of conv(y) = x */
    if (xs[1] != ws[0] || ws[0] % a.groups)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Given transposed=1, weight of size [%lld, %lld, ...], expected input[%lld, %lld, ...] to have %lld channels, but got %lld channels instead",
                     (long long)ws[0], (long long)ws[1], (long long)xs[0], (long long)xs[1], (long long)ws[0],
                     (long long)xs[1]);
    int64_t dims[5] = {xs[0], ws[1] * a.groups};
    for (int d = 0; d < nsp; ++d) {
      dims[2 + d] = (xs[2 + d] - 1) * a.stride[d] - 2 * a.padding[d] + a.dilation[d] * (ws[2 + d] - 1) +
                    a.outpad[d] + 1;
      if (dims[2 + d] < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Calculated output size is too small");
    }
    y = conv_bwd(cx, TPU_IR_CUSTOM_CONV_BWD_INPUT, x, w, nsp + 2, dims, &a, ct);
  }
  if (!lw_is_none(cx, 2)) y = conv_add_bias(cx, y, lw_input(cx, 2, ct));
  return lw_output(cx, 0, y);
}

/* aten::convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
 *     transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias);
 * aten::convolution_backward has bias_sizes before stride (attrs from argument 4). */
static tpu_status_t conv_backward(tpu_lower_ctx_t* cx, int attr0) {
  int nsp;
  TPU_RETURN_IF_ERROR(conv_check_inputs(cx, 1, 2, &nsp));
  conv_attr_t a;
  TPU_RETURN_IF_ERROR(conv_attrs(cx, attr0, nsp, &a));
  if (!lw_is_tensor(cx, 0) || lw_rank_of(cx, 0) != nsp + 2)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: grad_output must have the input's rank", cx->op_name);
  int ct = tpu_opmath_dtype(lw_dtype_of(cx, 1));
  int rank = nsp + 2;
  const int64_t* xs = lw_sizes_of(cx, 1);
  const int64_t* ws = lw_sizes_of(cx, 2);
  int need_in = cx->nouts > 0 && lw_out_meta(cx, 0)->ndim >= 0;
  int need_w = cx->nouts > 1 && lw_out_meta(cx, 1)->ndim >= 0;
  int need_b = cx->nouts > 2 && lw_out_meta(cx, 2)->ndim >= 0;
  int gy = lw_input(cx, 0, -1);
  int x = need_w ? lw_input(cx, 1, -1) : -1;
  int w = need_in ? lw_input(cx, 2, -1) : -1;
  int gi = -1, gw = -1, gb = -1;
  if (!a.transposed) {
    if (need_in) gi = conv_bwd(cx, TPU_IR_CUSTOM_CONV_BWD_INPUT, gy, w, rank, xs, &a, ct);
    if (need_w) gw = conv_bwd(cx, TPU_IR_CUSTOM_CONV_BWD_WEIGHT, x, gy, rank, ws, &a, ct);
  } else {
    /* y = conv_bwd_input(x, w): gx = conv(gy, w), gw = conv_bwd_weight(gy, x) */
    if (need_in) gi = conv_fwd(cx, gy, w, &a, ct);
    if (need_w) gw = conv_bwd(cx, TPU_IR_CUSTOM_CONV_BWD_WEIGHT, gy, x, rank, ws, &a, ct);
  }
  if (need_b) {
    int64_t flags[TPU_MAX_DIMS] = {0};
    for (int d = 0; d < rank; ++d) flags[d] = d != 1;
    gb = tpu_ir_reduce(&cx->g, TPU_IR_MONOID_SUM, tpu_ir_convert(&cx->g, gy, ct), flags);
  }
  TPU_RETURN_IF_ERROR(lw_output(cx, 0, gi));
  TPU_RETURN_IF_ERROR(lw_output(cx, 1, gw));
  return lw_output(cx, 2, gb);
}

static tpu_status_t lower_convolution_backward_overrideable(tpu_lower_ctx_t* cx) { return conv_backward(cx, 3); }
static tpu_status_t lower_convolution_backward(tpu_lower_ctx_t* cx) { return conv_backward(cx, 4); }

/* aten::convolution / convolution_backward (same schemas but bias_sizes) are what traced ATen
 * graphs (AOTAutograd) contain; eager dispatch reaches the overrideable pair. */
TPU_LOWERING_TABLE(tpu_lowerings_conv) = {
  {"aten::convolution_overrideable", lower_convolution},
  {"aten::convolution_backward_overrideable", lower_convolution_backward_overrideable},
  {"aten::convolution", lower_convolution},
  {"aten::convolution_backward", lower_convolution_backward},
  TPU_LOWERING_END
};
