/* kernels_nn.c — host kernels for convolution, pooling and custom calls (being written). */
#include "drivers/host/host.h"
#include "drivers/host/conv.h"
#include "drivers/host/attention.h"
#include "drivers/host/scan.h"
#include "drivers/host/linalg.h"
#include "drivers/host/linalg2.h"
#include "drivers/host/grid_sample.h"
#include "drivers/host/ctc.h"
#include "drivers/host/special.h"
#include "drivers/host/norm.h"
#include "drivers/host/rows.h"
#include "drivers/host/colsum.h"
#include "drivers/host/embed.h"

/* HISTC_EDGES (ir.h): histc's range from its data's extrema, PyTorch's widening and checks */
static tpu_status_t histc_edges(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  if (n != 2 || xs[0].rank || xs[1].rank || xs[0].dtype != TPU_DTYPE_F64 || xs[1].dtype != TPU_DTYPE_F64 ||
      out->dtype != TPU_DTYPE_F64 || out->rank != 1 || out->sizes[0] != 2)
    return TPU_ERR(INTERNAL, "host: HISTC_EDGES takes (min f64, max f64) -> f64 [2]");
  double lo = *(const double*)xs[0].data, hi = *(const double*)xs[1].data;
  TPU_RETURN_IF_ERROR(tpu_ir_histc_range((int)op->i1, &lo, &hi));
  double* o = (double*)out->data;
  o[0] = lo; o[out->strides[0]] = hi;
  return TPU_OK;
}

tpu_status_t tpu_host_k_custom(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  if (op->i0 == TPU_IR_CUSTOM_HISTC_EDGES) return histc_edges(op, n, xs, out);
  if (op->i0 == TPU_IR_CUSTOM_EMBEDDING_BAG || op->i0 == TPU_IR_CUSTOM_EMBEDDING_BAG_BWD)
    return tpu_host_k_embed_bag(op, n, xs, out); /* embed.c */
  if (op->i0 == TPU_IR_CUSTOM_CONV_BWD_INPUT || op->i0 == TPU_IR_CUSTOM_CONV_BWD_WEIGHT)
    return tpu_host_k_conv_custom(op, n, xs, out); /* conv.c */
  if (op->i0 == TPU_IR_CUSTOM_POOL_ARGMAX && n == 1) return tpu_host_k_pool_argmax(op, &xs[0], out); /* pool.c */
  if (op->i0 == TPU_IR_CUSTOM_ATTENTION || op->i0 == TPU_IR_CUSTOM_ATTENTION_BWD)
    return tpu_host_k_attention(op, n, xs, out); /* attention.c */
  if (op->i0 == TPU_IR_CUSTOM_LOGCUMSUMEXP && n == 1) return tpu_host_k_logcumsumexp(op, &xs[0], out); /* scan.c */
  if (op->i0 == TPU_IR_CUSTOM_CHOLESKY || op->i0 == TPU_IR_CUSTOM_LU || op->i0 == TPU_IR_CUSTOM_LU_SOLVE ||
      op->i0 == TPU_IR_CUSTOM_TRI_SOLVE)
    return tpu_host_k_linalg(op, n, xs, out); /* linalg.c */
  if (op->i0 == TPU_IR_CUSTOM_QR || op->i0 == TPU_IR_CUSTOM_EIGH || op->i0 == TPU_IR_CUSTOM_SVD)
    return tpu_host_k_linalg2(op, n, xs, out); /* linalg2.c */
  if (op->i0 == TPU_IR_CUSTOM_GRID_SAMPLE || op->i0 == TPU_IR_CUSTOM_GRID_SAMPLE_BWD)
    return tpu_host_k_grid_sample(op, n, xs, out); /* grid_sample.c */
  if (op->i0 == TPU_IR_CUSTOM_CTC || op->i0 == TPU_IR_CUSTOM_CTC_BWD) return tpu_host_k_ctc(op, n, xs, out); /* ctc.c */
  if (op->i0 == TPU_IR_CUSTOM_SPECIAL && n == 1) return tpu_host_k_special(op, &xs[0], out); /* special.c */
  if (op->i0 == TPU_IR_CUSTOM_CHANNEL_STATS || op->i0 == TPU_IR_CUSTOM_CHANNEL_AFFINE)
    return tpu_host_k_channel(op, n, xs, out); /* norm.c */
  if (op->i0 == TPU_IR_CUSTOM_GROUP_NORM_STATS || op->i0 == TPU_IR_CUSTOM_GROUP_NORM ||
      op->i0 == TPU_IR_CUSTOM_GROUP_NORM_SUMS || op->i0 == TPU_IR_CUSTOM_GROUP_NORM_BWD)
    return tpu_host_k_group_norm(op, n, xs, out); /* norm.c */
  if (op->i0 == TPU_IR_CUSTOM_COL_SUMS && op->i1 == 0 && n == 1 && xs[0].dtype != TPU_DTYPE_F32)
    return tpu_host_k_col_sums_lowp(&xs[0], out); /* colsum.c: bf16 / f16 read directly */
  if (op->i0 == TPU_IR_CUSTOM_ROWS_SOFTMAX || op->i0 == TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD ||
      op->i0 == TPU_IR_CUSTOM_ROWS_LAYER_NORM || op->i0 == TPU_IR_CUSTOM_ROWS_LAYER_NORM_BWD ||
      op->i0 == TPU_IR_CUSTOM_GELU || op->i0 == TPU_IR_CUSTOM_GELU_BWD || op->i0 == TPU_IR_CUSTOM_COL_SUMS ||
      op->i0 == TPU_IR_CUSTOM_SILU || op->i0 == TPU_IR_CUSTOM_SILU_BWD || op->i0 == TPU_IR_CUSTOM_LERP ||
      op->i0 == TPU_IR_CUSTOM_ADDC)
    return tpu_host_k_rows(op, n, xs, out); /* rows.c */
  return TPU_ERR(UNSUPPORTED, "host: custom_call target %lld not implemented", (long long)op->i0);
}
