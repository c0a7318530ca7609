/* attention.c — fused scaled-dot-product attention: the overrideable SDPA ops
 * (_scaled_dot_product_fused_attention_overrideable and its backward) as the custom
 * calls TPU_IR_CUSTOM_ATTENTION / _ATTENTION_BWD (flash-style host kernel,
 * drivers/host/attention.c; contract in attention.h).
 *
 * PyTorch's F.scaled_dot_product_attention reaches these ops when the glue's
 * _fused_sdp_choice stub picks the overrideable backend (csrc/glue/sdpa.cpp: f32/bf16/f16,
 * rank 4, no dropout, no mask that needs a gradient); everything else takes PyTorch's
 * math path, which decomposes into matmul/softmax lowerings and is the reference.
 * Grouped-query attention is read from the shapes (Hq % Hk == 0). The mask arrives
 * as an additive bias (bool: false -> -inf), broadcast to (B, Hq, T, S) as a view.
 * Math in f32 (q/k/v converted); outputs converted back to the query dtype.
 */
#include <math.h>

#include "lower/lower.h"

#define G (&cx->g)
#define F32 TPU_DTYPE_F32

enum { ATTN_CAUSAL = 1, ATTN_BIAS = 2 }; /* = TPU_ATTN_* of drivers/host/attention.h */

static int custom(tpu_lower_ctx_t* cx, int target, int flags, int n, const int* in, int rank, const int64_t* dims) {
  tpu_ir_type_t t = {0};
  t.dtype = F32; t.rank = rank;
  for (int d = 0; d < rank; ++d) t.dims[d] = dims[d];
  return lw_custom(cx, target, flags, &t, n, in);
}

typedef struct { int64_t B, Hq, Hk, T, S, E, Ev; } dims_t;

/* checks q, k, v (argument positions qi..qi+2); fills d */
static int attn_dims(tpu_lower_ctx_t* cx, int qi, dims_t* d) {
  for (int i = 0; i < 3; ++i) {
    if (lw_rank_of(cx, qi + i) != 4) {
      lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: query, key and value must be 4-D (batch, heads, seq, dim)", cx->op_name);
      return 0;
    }
    int dt = lw_dtype_of(cx, qi + i);
    if (dt != lw_dtype_of(cx, qi) || !tpu_dtype_is_floating(dt)) {
      lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected query, key, and value to have the same dtype, but got query.dtype: %s key.dtype: %s and value.dtype: %s instead.",
              tpu_dtype_name(lw_dtype_of(cx, qi)), tpu_dtype_name(lw_dtype_of(cx, qi + 1)), tpu_dtype_name(lw_dtype_of(cx, qi + 2)));
      return 0;
    }
  }
  const int64_t *q = lw_sizes_of(cx, qi), *k = lw_sizes_of(cx, qi + 1), *v = lw_sizes_of(cx, qi + 2);
  *d = (dims_t){q[0], q[1], k[1], q[2], k[2], q[3], v[3]};
  if (k[0] != d->B || v[0] != d->B || v[1] != d->Hk || v[2] != d->S || k[3] != d->E || d->Hk == 0 || d->Hq % d->Hk) {
    lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: incompatible query/key/value shapes", cx->op_name);
    return 0;
  }
  return 1;
}
/* additive f32 bias (B, Hq, T, S) from argument i, or -1 if None */
static int attn_bias(tpu_lower_ctx_t* cx, int i, const dims_t* d) {
  if (lw_is_none(cx, i)) return -1;
  int64_t bd[4] = {d->B, d->Hq, d->T, d->S};
  int r = lw_rank_of(cx, i);
  const int64_t* s = lw_sizes_of(cx, i);
  for (int j = 0; j < r; ++j) {
    int k = 4 - r + j;
    if (k < 0 || (s[j] != 1 && s[j] != bd[k])) {
      lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: attn_mask is not broadcastable to (%lld, %lld, %lld, %lld)", cx->op_name,
              (long long)bd[0], (long long)bd[1], (long long)bd[2], (long long)bd[3]);
      return -2;
    }
  }
  int b;
  if (lw_dtype_of(cx, i) == TPU_DTYPE_BOOL) {
    int m = lw_input(cx, i, -1);
    b = tpu_ir_select(G, m, lw_const_like(cx, 0, tpu_ir_convert(G, m, F32)), lw_const_like(cx, -INFINITY, tpu_ir_convert(G, m, F32)));
  } else {
    b = lw_input(cx, i, F32);
  }
  return lw_bcast(cx, b, 4, bd);
}
static int attn_scale(tpu_lower_ctx_t* cx, int i, const dims_t* d) {
  if (lw_is_none(cx, i)) return tpu_ir_constant(G, F32, 1.0 / sqrt((double)(d->E ? d->E : 1)));
  return lw_scalar(cx, i, F32);
}

/* _scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias, dropout_p,
 * is_causal, return_debug_mask, *, scale) -> (output, logsumexp, cum_seq_q, cum_seq_k,
 * max_q, max_k, philox_seed, philox_offset, debug_attn_mask) */
static tpu_status_t lower_sdpa(tpu_lower_ctx_t* cx) {
  dims_t d;
  if (!attn_dims(cx, 0, &d)) return TPU_OK;
  if (lw_int(cx, 6, 0)) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: return_debug_mask=True", cx->op_name);
  lw_check_scalar(cx, 4, TPU_IR_CMP_EQ, 0.0, -1, "_scaled_dot_product_fused_attention_overrideable: dropout_p=%g is not supported on tpu (use the math path)");
  int bias = attn_bias(cx, 3, &d);
  if (bias == -2) return TPU_OK;
  int flags = (lw_int(cx, 5, 0) ? ATTN_CAUSAL : 0) | (bias >= 0 ? ATTN_BIAS : 0);
  int in[5], n = 0;
  for (int i = 0; i < 3; ++i) in[n++] = lw_input(cx, i, F32);
  if (bias >= 0) in[n++] = bias;
  in[n++] = attn_scale(cx, 7, &d);
  int64_t od[4] = {d.B, d.Hq, d.T, d.Ev + 1};
  int r = custom(cx, TPU_IR_CUSTOM_ATTENTION, flags, n, in, 4, od);
  int64_t ld[3] = {d.B, d.Hq, d.T};
  tpu_status_t st = lw_output(cx, 0, lw_slice_dim(cx, r, -1, 0, d.Ev));
  if (!st) st = lw_output(cx, 1, tpu_ir_reshape(G, lw_slice_dim(cx, r, -1, d.Ev, d.Ev + 1), 3, ld));
  if (!st) st = lw_output(cx, 2, -1);
  if (!st) st = lw_output(cx, 3, -1);
  if (!st) st = lw_output(cx, 4, tpu_ir_constant(G, TPU_DTYPE_I64, (double)d.T));
  if (!st) st = lw_output(cx, 5, tpu_ir_constant(G, TPU_DTYPE_I64, (double)d.S));
  if (!st) st = lw_output(cx, 6, tpu_ir_constant(G, TPU_DTYPE_I64, 0));
  if (!st) st = lw_output(cx, 7, tpu_ir_constant(G, TPU_DTYPE_I64, 0));
  if (!st && cx->nouts > 8) st = lw_output(cx, 8, -1);
  return st;
}

/* _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query, key, value,
 * attn_bias, grad_input_mask[4], out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
 * dropout_p, is_causal, philox_seed, philox_offset, *, scale) -> (dq, dk, dv, d_bias) */
static tpu_status_t lower_sdpa_bwd(tpu_lower_ctx_t* cx) {
  dims_t d;
  if (!attn_dims(cx, 1, &d)) return TPU_OK;
  const int64_t* gmask = NULL;
  if (lw_int_list(cx, 5, &gmask) == 4 && gmask[3])
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: gradient of attn_bias", cx->op_name);
  lw_check_scalar(cx, 12, TPU_IR_CMP_EQ, 0.0, -1, "_scaled_dot_product_fused_attention_overrideable_backward: dropout_p=%g is not supported on tpu");
  int bias = attn_bias(cx, 4, &d);
  if (bias == -2) return TPU_OK;
  int flags = (lw_int(cx, 13, 0) ? ATTN_CAUSAL : 0) | (bias >= 0 ? ATTN_BIAS : 0);
  int in[8], n = 0;
  in[n++] = lw_input(cx, 0, F32);
  for (int i = 1; i < 4; ++i) in[n++] = lw_input(cx, i, F32);
  in[n++] = lw_input(cx, 6, F32);
  in[n++] = lw_input(cx, 7, F32);
  if (bias >= 0) in[n++] = bias;
  in[n++] = attn_scale(cx, 16, &d);
  int64_t nq = d.B * d.Hq * d.T * d.E, nk = d.B * d.Hk * d.S * d.E, nv = d.B * d.Hk * d.S * d.Ev;
  int64_t tot = nq + nk + nv;
  int r = custom(cx, TPU_IR_CUSTOM_ATTENTION_BWD, flags, n, in, 1, &tot);
  int64_t qd[4] = {d.B, d.Hq, d.T, d.E}, kd[4] = {d.B, d.Hk, d.S, d.E}, vd[4] = {d.B, d.Hk, d.S, d.Ev};
  tpu_status_t st = lw_output(cx, 0, tpu_ir_reshape(G, lw_slice_dim(cx, r, -1, 0, nq), 4, qd));
  if (!st) st = lw_output(cx, 1, tpu_ir_reshape(G, lw_slice_dim(cx, r, -1, nq, nq + nk), 4, kd));
  if (!st) st = lw_output(cx, 2, tpu_ir_reshape(G, lw_slice_dim(cx, r, -1, nq + nk, tot), 4, vd));
  if (!st && cx->nouts > 3) { /* not requested (grad_input_mask[3] false): zeros if allocated */
    const tpu_tensor_t* m = lw_out_meta(cx, 3);
    st = lw_output(cx, 3, m->ndim >= 0 ? lw_const(cx, 0, F32, m->ndim, m->sizes) : -1);
  }
  return st;
}

TPU_LOWERING_TABLE(tpu_lowerings_attention) = {
  {"aten::_scaled_dot_product_fused_attention_overrideable", lower_sdpa},
  {"aten::_scaled_dot_product_fused_attention_overrideable_backward", lower_sdpa_bwd},
  TPU_LOWERING_END
};
