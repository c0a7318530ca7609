/* matmul.c — lowerings of mm, bmm, addmm, baddbmm, addbmm, addmv, dot/vdot and
 * _addmm_activation. Every product is one TPU_IR_DOT in canonical form
 * [B..., M, K] x [B..., K, N] -> [B..., M, N] (transposes/reshapes of parameters
 * are views). matmul/linear/outer/einsum/mv are composites that reach these.
 *
 * Dtypes: f32/f64; bf16/f16 multiply in f32 with f32 accumulation and round once
 * (the epilogue beta*self + alpha*(A@B) also runs in f32); integers accumulate
 * exactly in int64 and wrap to the output dtype. bool is rejected as on CPU.
 * beta == 0 ignores self entirely (NaN/garbage in self does not propagate), chosen
 * at run time with a select, since beta is a runtime scalar. */
#include <stdio.h>

#include "lower/lower.h"

#define G (&cx->g)
#define OUT_DT(k) (cx->outs[k].dtype)
#define c10_name tpu_dtype_c10_name
#define cpp_name tpu_dtype_cpp_name

static tpu_status_t check_not_bool(tpu_lower_ctx_t* cx, int dt, const char* kernel) {
  if (dt == TPU_DTYPE_BOOL)
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "\"%s\" not implemented for 'Bool'", kernel);
  return TPU_OK;
}

/* out= tensors of matrix products must have the operands' dtype (no implicit cast). */
static tpu_status_t check_out(tpu_lower_ctx_t* cx, int dt) {
  if (OUT_DT(0) != dt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected out tensor to have dtype %s, but got %s instead",
                   cpp_name(dt), cpp_name(OUT_DT(0)));
  return TPU_OK;
}

/* Dtype the product is computed in (the DOT result). */
static int mm_compute_dtype(int dt) { return tpu_opmath_dtype(dt); }

/* PyTorch's expand() check for self against the result shape. */
static tpu_status_t check_expand(tpu_lower_ctx_t* cx, int i, int rank, const int64_t* target) {
  int r = lw_rank_of(cx, i);
  const int64_t* s = lw_sizes_of(cx, i);
  char ts[160] = "", ss[160] = "";
  int n = 0;
  for (int d = 0; d < rank; ++d) n += snprintf(ts + n, sizeof ts - (size_t)n, d ? ", %lld" : "%lld", (long long)target[d]);
  n = 0;
  for (int d = 0; d < r; ++d) n += snprintf(ss + n, sizeof ss - (size_t)n, d ? ", %lld" : "%lld", (long long)s[d]);
  if (r > rank)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "expand(torch.%sTensor{[%s]}, size=[%s]): the number of sizes "
                   "provided (%d) must be greater or equal to the number of dimensions in the tensor (%d)",
                   c10_name(lw_dtype_of(cx, i)), ss, ts, rank, r);
  for (int d = 0; d < r; ++d) {
    int64_t want = target[rank - r + d];
    if (s[d] != 1 && s[d] != want)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "The expanded size of the tensor (%lld) must match the existing "
                     "size (%lld) at non-singleton dimension %d.  Target sizes: [%s].  Tensor sizes: [%s]",
                     (long long)want, (long long)s[d], rank - r + d, ts, ss);
  }
  return TPU_OK;
}

/* out = beta * self + alpha * prod  (prod in compute dtype ct, shape = output's);
 * beta == 0 drops self. Arguments: self i_self, beta i_beta, alpha i_alpha. */
/* beta and alpha are key scalars of every lowering calling this (addmm, _addmm_activation, baddbmm, addbmm,
 * addmv: bits 3, 4 in the table; a new caller must declare them too): with the
 * defaults beta = alpha = 1 (nn.Linear's bias) the result is self + prod, the same bits as the general
 * select(beta == 0, alpha prod, beta self + alpha prod) (1 x is exact, NaN and -0 included) in one
 * elementwise op instead of five, which the GEMM epilogue applies per block. */
/* keyed only by whether each is 1 (lw_key_class_is_one): other values are runtime parameters */
#define ADDMM_KEY_SCALARS ((1u << 3) | (1u << 4))
static int epilogue(tpu_lower_ctx_t* cx, int prod, int i_self, int i_beta, int i_alpha, int ct) {
  if (prod < 0) return -1;
  const tpu_ir_type_t* t = tpu_ir_type(G, prod);
  int rank = t->rank;
  int64_t dims[TPU_MAX_DIMS];
  memcpy(dims, t->dims, sizeof(dims));
  if (lw_key_scalar_is_one(cx, i_beta) && lw_key_scalar_is_one(cx, i_alpha))
    return tpu_ir_binary(G, TPU_IR_ADD, lw_bcast(cx, lw_input(cx, i_self, ct), rank, dims), prod);
  int alpha = lw_scalar(cx, i_alpha, ct), beta = lw_scalar(cx, i_beta, ct);
  int r = tpu_ir_binary(G, TPU_IR_MUL, lw_bcast(cx, alpha, rank, dims), prod);
  int self = lw_bcast(cx, lw_input(cx, i_self, ct), rank, dims);
  int bb = lw_bcast(cx, beta, rank, dims);
  int with_self = tpu_ir_binary(G, TPU_IR_ADD, tpu_ir_binary(G, TPU_IR_MUL, bb, self), r);
  int zero = tpu_ir_compare(G, TPU_IR_CMP_EQ, bb, lw_const_like(cx, 0, bb));
  return tpu_ir_select(G, zero, r, with_self);
}

/* ---- mm.out(self, mat2, *, out) */
static tpu_status_t lower_mm(tpu_lower_ctx_t* cx) {
  if (lw_rank_of(cx, 0) != 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "self must be a matrix");
  if (lw_rank_of(cx, 1) != 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "mat2 must be a matrix");
  const int64_t *a = lw_sizes_of(cx, 0), *b = lw_sizes_of(cx, 1);
  if (a[1] != b[0])
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                   (long long)a[0], (long long)a[1], (long long)b[0], (long long)b[1]);
  int dt = lw_dtype_of(cx, 0);
  if (dt != lw_dtype_of(cx, 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "expected m1 and m2 to have the same dtype, but got: %s != %s",
                   cpp_name(dt), cpp_name(lw_dtype_of(cx, 1)));
  TPU_RETURN_IF_ERROR(check_not_bool(cx, dt, "addmm_impl_cpu_"));
  TPU_RETURN_IF_ERROR(check_out(cx, dt));
  int p = tpu_ir_dot(G, lw_input(cx, 0, -1), lw_input(cx, 1, -1), 0, mm_compute_dtype(dt));
  return lw_output(cx, 0, p);
}

/* ---- bmm.out(self, mat2, *, out) / baddbmm.out(self, batch1, batch2, *, beta, alpha, out) */
static tpu_status_t check_bmm(tpu_lower_ctx_t* cx, int i1, int i2) {
  if (lw_rank_of(cx, i1) != 3) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "batch1 must be a 3D tensor");
  if (lw_rank_of(cx, i2) != 3) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "batch2 must be a 3D tensor");
  const int64_t *a = lw_sizes_of(cx, i1), *b = lw_sizes_of(cx, i2);
  if (b[0] != a[0] || b[1] != a[2])
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected size for first two dimensions of batch2 tensor to be: "
                   "[%lld, %lld] but got: [%lld, %lld].", (long long)a[0], (long long)a[2], (long long)b[0], (long long)b[1]);
  return TPU_OK;
}
static tpu_status_t lower_bmm(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(check_bmm(cx, 0, 1));
  int dt = lw_dtype_of(cx, 0);
  if (dt != lw_dtype_of(cx, 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "expected scalar type %s but found %s", c10_name(dt),
                   c10_name(lw_dtype_of(cx, 1)));
  TPU_RETURN_IF_ERROR(check_not_bool(cx, dt, "bmm"));
  TPU_RETURN_IF_ERROR(check_out(cx, dt));
  return lw_output(cx, 0, tpu_ir_dot(G, lw_input(cx, 0, -1), lw_input(cx, 1, -1), 1, mm_compute_dtype(dt)));
}
static tpu_status_t lower_baddbmm(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(check_bmm(cx, 1, 2));
  int dt = lw_dtype_of(cx, 1);
  if (lw_dtype_of(cx, 0) != dt || lw_dtype_of(cx, 2) != dt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Input dtypes must be the same, got: input %s, batch1: %s, batch2: %s",
                   cpp_name(lw_dtype_of(cx, 0)), cpp_name(dt), cpp_name(lw_dtype_of(cx, 2)));
  TPU_RETURN_IF_ERROR(check_not_bool(cx, dt, "baddbmm"));
  TPU_RETURN_IF_ERROR(check_out(cx, dt));
  const int64_t *a = lw_sizes_of(cx, 1), *b = lw_sizes_of(cx, 2);
  int64_t shape[3] = {a[0], a[1], b[2]};
  TPU_RETURN_IF_ERROR(check_expand(cx, 0, 3, shape));
  int ct = mm_compute_dtype(dt);
  int p = tpu_ir_dot(G, lw_input(cx, 1, -1), lw_input(cx, 2, -1), 1, ct);
  return lw_output(cx, 0, epilogue(cx, p, 0, 3, 4, ct));
}

/* ---- addmm.out(self, mat1, mat2, *, beta, alpha, out); _addmm_activation adds relu/gelu */
static int addmm_value(tpu_lower_ctx_t* cx, tpu_status_t* st) {
  *st = TPU_OK;
  int d0 = lw_dtype_of(cx, 0), d1 = lw_dtype_of(cx, 1), d2 = lw_dtype_of(cx, 2);
  if (d0 != d2) { *st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "self and mat2 must have the same dtype, but got %s and %s", c10_name(d0), c10_name(d2)); return -1; }
  if (d1 != d2) { *st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "mat1 and mat2 must have the same dtype, but got %s and %s", c10_name(d1), c10_name(d2)); return -1; }
  for (int i = 1; i <= 2; ++i)
    if (lw_rank_of(cx, i) != 2) {
      *st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "mat%d must be a matrix, got %d-D tensor", i, lw_rank_of(cx, i));
      return -1;
    }
  const int64_t *a = lw_sizes_of(cx, 1), *b = lw_sizes_of(cx, 2);
  if (a[1] != b[0]) {
    *st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                  (long long)a[0], (long long)a[1], (long long)b[0], (long long)b[1]);
    return -1;
  }
  if ((*st = check_not_bool(cx, d1, "addmm_impl_cpu_"))) return -1;
  if ((*st = check_out(cx, d1))) return -1;
  int64_t shape[2] = {a[0], b[1]};
  if ((*st = check_expand(cx, 0, 2, shape))) return -1;
  int ct = mm_compute_dtype(d1);
  int p = tpu_ir_dot(G, lw_input(cx, 1, -1), lw_input(cx, 2, -1), 0, ct);
  return epilogue(cx, p, 0, 3, 4, ct);
}
static tpu_status_t lower_addmm(tpu_lower_ctx_t* cx) {
  tpu_status_t st;
  int v = addmm_value(cx, &st);
  return st ? st : lw_output(cx, 0, v);
}
static tpu_status_t lower_addmm_activation(tpu_lower_ctx_t* cx) { /* (..., beta, alpha, use_gelu, out) */
  tpu_status_t st;
  int v = addmm_value(cx, &st);
  if (st) return st;
  if (v < 0) return TPU_OK;
  if (lw_int(cx, 5, 0)) { /* exact gelu, as the CPU kernel */
    int c = tpu_ir_unary(G, TPU_IR_ERF, tpu_ir_binary(G, TPU_IR_MUL, v, lw_const_like(cx, 0.7071067811865476, v)));
    c = tpu_ir_binary(G, TPU_IR_MUL, lw_const_like(cx, 0.5, v), tpu_ir_binary(G, TPU_IR_ADD, lw_const_like(cx, 1.0, v), c));
    v = tpu_ir_binary(G, TPU_IR_MUL, v, c);
  } else { /* relu keeps NaN */
    int z = lw_const_like(cx, 0, v);
    v = tpu_ir_select(G, tpu_ir_compare(G, TPU_IR_CMP_LT, v, z), z, v);
  }
  return lw_output(cx, 0, v);
}

/* ---- addbmm(self, batch1, batch2, *, beta, alpha): sum over the batch folded
 * into K: [N, B*M] x [B*M, P] with batch1 viewed as (N, B, M). */
static tpu_status_t lower_addbmm(tpu_lower_ctx_t* cx) {
  if (lw_rank_of(cx, 1) != 3) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "batch1 must be a 3D tensor");
  if (lw_rank_of(cx, 2) != 3) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "batch2 must be a 3D tensor");
  const int64_t *a = lw_sizes_of(cx, 1), *b = lw_sizes_of(cx, 2);
  if (a[0] != b[0])
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "batch1 and batch2 must have same number of batches, got %lld and %lld",
                   (long long)a[0], (long long)b[0]);
  if (a[2] != b[1])
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Incompatible matrix sizes for bmm (%lldx%lld and %lldx%lld)",
                   (long long)a[1], (long long)a[2], (long long)b[1], (long long)b[2]);
  int dt = lw_dtype_of(cx, 1);
  if (lw_dtype_of(cx, 0) != dt || lw_dtype_of(cx, 2) != dt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "expected scalar type %s but found %s", c10_name(dt),
                   c10_name(lw_dtype_of(cx, 0) != dt ? lw_dtype_of(cx, 0) : lw_dtype_of(cx, 2)));
  TPU_RETURN_IF_ERROR(check_not_bool(cx, dt, "addbmm"));
  TPU_RETURN_IF_ERROR(check_out(cx, dt));
  int64_t shape[2] = {a[1], b[2]};
  TPU_RETURN_IF_ERROR(check_expand(cx, 0, 2, shape));
  int ct = mm_compute_dtype(dt);
  int x1 = tpu_ir_transpose(G, lw_input(cx, 1, -1), (int64_t[]){1, 0, 2});       /* (M, B, K) */
  x1 = tpu_ir_reshape(G, x1, 2, (int64_t[]){a[1], a[0] * a[2]});                  /* (M, B*K) */
  int x2 = tpu_ir_reshape(G, lw_input(cx, 2, -1), 2, (int64_t[]){b[0] * b[1], b[2]}); /* (B*K, N) */
  int p = tpu_ir_dot(G, x1, x2, 0, ct);
  return lw_output(cx, 0, epilogue(cx, p, 0, 3, 4, ct));
}

/* ---- addmv.out(self, mat, vec, *, beta, alpha, out); mv reaches it as addmv_(uninit, ..., beta=0) */
static tpu_status_t lower_addmv(tpu_lower_ctx_t* cx) {
  int rs = lw_rank_of(cx, 0), rm = lw_rank_of(cx, 1), rv = lw_rank_of(cx, 2);
  if (!(rm == 2 && rv == 1 && rs <= 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "vector + matrix @ vector expected, got %d, %d, %d", rs, rm, rv);
  const int64_t *m = lw_sizes_of(cx, 1), *v = lw_sizes_of(cx, 2);
  int64_t self_n = tpu_numel(rs, lw_sizes_of(cx, 0));
  if (!(m[1] == v[0] && (m[0] == self_n || self_n == 1)))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "size mismatch, got input (%lld), mat (%lldx%lld), vec (%lld)",
                   (long long)self_n, (long long)m[0], (long long)m[1], (long long)v[0]);
  int dt = lw_dtype_of(cx, 1);
  if (lw_dtype_of(cx, 2) != dt || lw_dtype_of(cx, 0) != dt)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "addmv input tensors must have the same dtype, but got %s, %s, and %s",
                   c10_name(lw_dtype_of(cx, 0)), c10_name(dt), c10_name(lw_dtype_of(cx, 2)));
  TPU_RETURN_IF_ERROR(check_not_bool(cx, dt, "addmv_impl_cpu"));
  TPU_RETURN_IF_ERROR(check_out(cx, dt));
  int ct = mm_compute_dtype(dt);
  int vec = tpu_ir_reshape(G, lw_input(cx, 2, -1), 2, (int64_t[]){v[0], 1});
  int p = tpu_ir_reshape(G, tpu_ir_dot(G, lw_input(cx, 1, -1), vec, 0, ct), 1, m);
  return lw_output(cx, 0, epilogue(cx, p, 0, 3, 4, ct));
}

/* ---- dot(self, tensor) / vdot (real): sum of products, double accumulation */
static tpu_status_t lower_dot(tpu_lower_ctx_t* cx) {
  int r0 = lw_rank_of(cx, 0), r1 = lw_rank_of(cx, 1);
  if (r0 != 1 || r1 != 1)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "1D tensors expected, but got %dD and %dD tensors", r0, r1);
  int64_t n0 = lw_sizes_of(cx, 0)[0], n1 = lw_sizes_of(cx, 1)[0];
  int dt = lw_dtype_of(cx, 0);
  if (dt != lw_dtype_of(cx, 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "dot : expected both vectors to have same dtype, but found %s and %s",
                   c10_name(dt), c10_name(lw_dtype_of(cx, 1)));
  if (n0 != n1)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "inconsistent tensor size, expected tensor [%lld] and src [%lld] to "
                   "have the same number of elements, but got %lld and %lld elements respectively",
                   (long long)n0, (long long)n1, (long long)n0, (long long)n1);
  TPU_RETURN_IF_ERROR(check_not_bool(cx, dt, "dot"));
  int ct = mm_compute_dtype(dt);
  int p = tpu_ir_binary(G, TPU_IR_MUL, lw_input(cx, 0, ct), lw_input(cx, 1, ct));
  return lw_output(cx, 0, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, p, (int64_t[]){1}));
}

TPU_LOWERING_TABLE(tpu_lowerings_matmul) = {
  {"aten::mm.out", lower_mm}, {"aten::bmm.out", lower_bmm},
  {"aten::addmm.out", lower_addmm, ADDMM_KEY_SCALARS, lw_key_class_is_one}, {"aten::_addmm_activation.out", lower_addmm_activation, ADDMM_KEY_SCALARS, lw_key_class_is_one},
  {"aten::baddbmm.out", lower_baddbmm, ADDMM_KEY_SCALARS, lw_key_class_is_one},
  {"aten::addbmm", lower_addbmm, ADDMM_KEY_SCALARS, lw_key_class_is_one}, {"aten::addbmm.out", lower_addbmm, ADDMM_KEY_SCALARS, lw_key_class_is_one},
  {"aten::addbmm_", lower_addbmm, ADDMM_KEY_SCALARS, lw_key_class_is_one}, {"aten::addmv.out", lower_addmv, ADDMM_KEY_SCALARS, lw_key_class_is_one}, {"aten::dot", lower_dot}, {"aten::vdot", lower_dot},
  TPU_LOWERING_END
};
