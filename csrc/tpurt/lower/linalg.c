/* linalg.c — dense linear algebra through the custom targets CHOLESKY, LU, LU_SOLVE and
 * TRI_SOLVE (drivers/host/linalg.c): linalg_cholesky_ex / cholesky, linalg_lu_factor_ex,
 * linalg_lu_solve, _linalg_solve_ex, linalg_inv_ex, _linalg_det, _linalg_slogdet,
 * linalg_solve_triangular, triangular_solve, cholesky_solve, cholesky_inverse; and through
 * the flat-packed targets QR, EIGH, SVD (drivers/host/linalg2.c): linalg_qr, _linalg_eigh,
 * _linalg_svd (their backward formulas are PyTorch's composites over ops we lower).
 *
 * PyTorch's meta functions have already checked shapes and dtypes and allocated the
 * outputs (LAPACK's column-major strides included); these lowerings see square (or, for
 * LU, rectangular) f32/f64 matrices. The targets pack side results into extra columns
 * (info, pivots), which the lowerings slice out. Right-multiplication forms (left=False)
 * solve the transposed system: X A = B <=> A^T X^T = B^T. Real dtypes only, so adjoint
 * = transpose. */
#include <string.h>

#include "lower/lower.h"

#define G (&cx->g)
#define BIN(op, a, b) tpu_ir_binary(G, TPU_IR_##op, (a), (b))

static tpu_ir_type_t ty(tpu_lower_ctx_t* cx, int v) { /* a copy: builders may move g->ops */
  tpu_ir_type_t t;
  if (v < 0 || v >= G->n_ops) { memset(&t, 0, sizeof(t)); return t; }
  return *tpu_ir_type(G, v);
}
/* argument i as f32 / f64 (the dtype PyTorch's meta function kept) */
static int la_in(tpu_lower_ctx_t* cx, int i, int* out_dt) {
  int dt = lw_dtype_of(cx, i);
  if (dt != TPU_DTYPE_F32 && dt != TPU_DTYPE_F64) {
    lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: not implemented for '%s' on tpu (float32 and float64 only)",
            cx->op_name, tpu_dtype_name(dt));
    return -1;
  }
  if (out_dt) *out_dt = dt;
  return lw_input(cx, i, dt);
}
/* swaps the last two dims */
static int mT(tpu_lower_ctx_t* cx, int v) {
  tpu_ir_type_t t = ty(cx, v);
  if (v < 0) return -1;
  int64_t perm[TPU_MAX_DIMS];
  for (int d = 0; d < t.rank; ++d) perm[d] = d;
  perm[t.rank - 1] = t.rank - 2; perm[t.rank - 2] = t.rank - 1;
  return tpu_ir_transpose(G, v, perm);
}
/* v[..., r0:r1, c0:c1] */
static int sub(tpu_lower_ctx_t* cx, int v, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  tpu_ir_type_t t = ty(cx, v);
  if (v < 0) return -1;
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS], st[TPU_MAX_DIMS];
  for (int d = 0; d < t.rank; ++d) { hi[d] = t.dims[d]; st[d] = 1; }
  lo[t.rank - 2] = r0; hi[t.rank - 2] = r1; lo[t.rank - 1] = c0; hi[t.rank - 1] = c1;
  return tpu_ir_slice(G, v, lo, hi, st);
}
/* v[..., :, c] (drops the last dim) */
static int col(tpu_lower_ctx_t* cx, int v, int64_t c, int64_t rows) {
  tpu_ir_type_t t = ty(cx, v);
  int s = sub(cx, v, 0, rows, c, c + 1);
  t.dims[t.rank - 2] = rows;
  return s < 0 ? -1 : tpu_ir_reshape(G, s, t.rank - 1, t.dims);
}
/* v broadcast to batch dims bd[0..nb) followed by its own last `m` dims */
static int bcast_batch(tpu_lower_ctx_t* cx, int v, int nb, const int64_t* bd, int m) {
  tpu_ir_type_t t = ty(cx, v);
  if (v < 0) return -1;
  int64_t dims[TPU_MAX_DIMS];
  memcpy(dims, bd, (size_t)nb * sizeof(int64_t));
  for (int d = 0; d < m; ++d) dims[nb + d] = t.dims[t.rank - m + d];
  return lw_bcast(cx, v, nb + m, dims);
}
static int custom(tpu_lower_ctx_t* cx, int target, int64_t attr, tpu_ir_type_t t, int n, const int* in) {
  return lw_custom(cx, target, attr, &t, n, in);
}
/* packed LU of a ([B..., m, n]) -> [B..., m, n+2]. det: PyTorch's _linalg_det / _linalg_slogdet
 * factor A^T when A is row-major contiguous (LAPACK reads its memory as is) and their backward
 * formulas expect that LU; strides are not in the executable key, so the kernel decides (i1 = 1). */
static int lu_packed(tpu_lower_ctx_t* cx, int a, int det) {
  tpu_ir_type_t t = ty(cx, a);
  t.dims[t.rank - 1] += 2;
  return custom(cx, TPU_IR_CUSTOM_LU, det, t, 1, &a);
}
/* X of A X = R (trans: A^T X = R) from packed LU [B..., n, n+2] and R [B'..., n, k]; batch dims
 * broadcast to the output's (nb, bd) */
static int lu_solve(tpu_lower_ctx_t* cx, int packed, int r, int trans, int nb, const int64_t* bd) {
  tpu_ir_type_t pt = ty(cx, packed), rt = ty(cx, r);
  if (packed < 0 || r < 0) return -1;
  int64_t n = pt.dims[pt.rank - 2];
  int ins[3] = {bcast_batch(cx, sub(cx, packed, 0, n, 0, n), nb, bd, 2),
                bcast_batch(cx, col(cx, packed, n, n), nb, bd, 1), bcast_batch(cx, r, nb, bd, 2)};
  tpu_ir_type_t t = ty(cx, ins[2]);
  (void)rt;
  return custom(cx, TPU_IR_CUSTOM_LU_SOLVE, trans, t, 3, ins);
}
/* packed LU -> (LU, pivots i32, info i32) bound to outputs kLU, kpiv, kinfo (-1: none); outputs
 * must be bound in increasing k (the graph's outputs are in binding order) */
static void lu_outputs(tpu_lower_ctx_t* cx, int packed, int kLU, int kpiv, int kinfo) {
  tpu_ir_type_t t = ty(cx, packed);
  if (packed < 0) return;
  int64_t m = t.dims[t.rank - 2], n = t.dims[t.rank - 1] - 2, k = m < n ? m : n;
  if (kLU >= 0) lw_output(cx, kLU, sub(cx, packed, 0, m, 0, n));
  if (kpiv >= 0) lw_output(cx, kpiv, tpu_ir_convert(G, col(cx, packed, n, k), TPU_DTYPE_I32));
  if (kinfo >= 0) {
    int info = m ? tpu_ir_reshape(G, sub(cx, packed, 0, 1, n + 1, n + 2), t.rank - 2, t.dims)
                 : lw_const(cx, 0, TPU_DTYPE_I32, t.rank - 2, t.dims);
    lw_output(cx, kinfo, tpu_ir_convert(G, info, TPU_DTYPE_I32));
  }
}
static tpu_status_t no_check_errors(tpu_lower_ctx_t* cx, int i) {
  if (lw_int(cx, i, 0))
    return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: check_errors=True is not implemented on tpu (call the non-_ex "
                   "function, which checks info)", cx->op_name);
  return TPU_OK;
}
static const tpu_tensor_t* out_meta(tpu_lower_ctx_t* cx, int k) {
  const tpu_tensor_t* o = lw_out_meta(cx, k);
  if (!o || o->ndim < 0) lw_fail(cx, TPU_STATUS_INTERNAL, "%s: output %d is missing", cx->op_name, k);
  return o && o->ndim >= 0 ? o : NULL;
}

/* ---------------------------------------------------------------- Cholesky */

/* lower/upper factor of A (arg 0) into output 0 (and info into output kinfo); check: 0, or the
 * CHOLESKY error mode (1 linalg.cholesky_ex, 2 cholesky) */
static tpu_status_t lw_cholesky(tpu_lower_ctx_t* cx, int upper, int check, int kinfo) {
  int a = la_in(cx, 0, NULL);
  if (a < 0) return TPU_OK;
  if (upper) a = mT(cx, a); /* the upper triangle of A is the lower one of A^T */
  tpu_ir_type_t t = ty(cx, a);
  int64_t n = t.dims[t.rank - 1];
  if (n == 0) {
    lw_output(cx, 0, lw_const(cx, 0, t.dtype, t.rank, t.dims));
    return kinfo >= 0 ? lw_output(cx, kinfo, lw_const(cx, 0, TPU_DTYPE_I32, t.rank - 2, t.dims)) : TPU_OK;
  }
  tpu_ir_type_t pt = t;
  pt.dims[pt.rank - 1] = n + 1;
  int packed = custom(cx, TPU_IR_CUSTOM_CHOLESKY, check, pt, 1, &a);
  int l = sub(cx, packed, 0, n, 0, n);
  lw_output(cx, 0, upper ? mT(cx, l) : l);
  if (kinfo < 0) return TPU_OK;
  int info = tpu_ir_reshape(G, sub(cx, packed, 0, 1, n, n + 1), t.rank - 2, t.dims);
  return lw_output(cx, kinfo, tpu_ir_convert(G, info, TPU_DTYPE_I32));
}
/* linalg_cholesky_ex.L(self, *, upper, check_errors, L, info) */
static tpu_status_t lower_cholesky_ex(tpu_lower_ctx_t* cx) {
  return lw_cholesky(cx, (int)lw_int(cx, 1, 0), lw_int(cx, 2, 0) ? 1 : 0, 1);
}
/* cholesky(self, upper) / cholesky.out: a non-PD input fails the run (raised at the next sync) */
static tpu_status_t lower_cholesky(tpu_lower_ctx_t* cx) { return lw_cholesky(cx, (int)lw_int(cx, 1, 0), 2, -1); }

/* (L or U, upper) -> X with (L L^T) X = R, or (U^T U) X = R */
static int chol_solve(tpu_lower_ctx_t* cx, int f, int r, int upper) {
  tpu_ir_type_t t = ty(cx, r);
  int a[2] = {f, r};
  /* first op(F) Y = R with op(F) lower: L, or U^T */
  int y = custom(cx, TPU_IR_CUSTOM_TRI_SOLVE, upper ? (1 | 4) : 0, t, 2, a);
  int b[2] = {f, y};
  return custom(cx, TPU_IR_CUSTOM_TRI_SOLVE, upper ? 1 : 4, t, 2, b);
}
/* _cholesky_solve_helper(self = B, A = factor, upper): batch dims already broadcast by the caller */
static tpu_status_t lower_cholesky_solve_helper(tpu_lower_ctx_t* cx) {
  int b = la_in(cx, 0, NULL), f = la_in(cx, 1, NULL);
  if (b < 0 || f < 0) return TPU_OK;
  tpu_ir_type_t bt = ty(cx, b);
  int nb = bt.rank - 2;
  f = bcast_batch(cx, f, nb, bt.dims, 2);
  return lw_output(cx, 0, chol_solve(cx, f, b, (int)lw_int(cx, 2, 0)));
}
/* cholesky_inverse(self = factor, upper) / .out */
static tpu_status_t lower_cholesky_inverse(tpu_lower_ctx_t* cx) {
  int f = la_in(cx, 0, NULL);
  if (f < 0) return TPU_OK;
  tpu_ir_type_t t = ty(cx, f);
  int r = t.rank;
  int eye = tpu_ir_convert(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, tpu_ir_iota(G, TPU_DTYPE_I64, r, t.dims, r - 2),
                                             tpu_ir_iota(G, TPU_DTYPE_I64, r, t.dims, r - 1)), t.dtype);
  return lw_output(cx, 0, chol_solve(cx, f, eye, (int)lw_int(cx, 1, 0)));
}

/* ---------------------------------------------------------------- LU and solves */

/* linalg_lu_factor_ex.out(A, *, pivot, check_errors, LU, pivots, info) */
static tpu_status_t lower_lu_factor_ex(tpu_lower_ctx_t* cx) {
  if (!lw_int(cx, 1, 1))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
  TPU_RETURN_IF_ERROR(no_check_errors(cx, 2));
  int a = la_in(cx, 0, NULL);
  if (a < 0) return TPU_OK;
  tpu_ir_type_t t = ty(cx, a);
  if (t.dims[t.rank - 2] == 0 || t.dims[t.rank - 1] == 0) { /* nothing to factor */
    lw_output(cx, 0, a);
    lw_output(cx, 1, lw_const(cx, 0, TPU_DTYPE_I32, 0, NULL));
    return lw_output(cx, 2, lw_const(cx, 0, TPU_DTYPE_I32, 0, NULL));
  }
  lu_outputs(cx, lu_packed(cx, a, 0), 0, 1, 2);
  return TPU_OK;
}
/* linalg_lu_solve.out(LU, pivots, B, *, left, adjoint, out) */
static tpu_status_t lower_lu_solve(tpu_lower_ctx_t* cx) {
  int left = (int)lw_int(cx, 3, 1), adj = (int)lw_int(cx, 4, 0);
  int lu = la_in(cx, 0, NULL), b = la_in(cx, 2, NULL);
  int piv = lw_input(cx, 1, TPU_DTYPE_I32);
  const tpu_tensor_t* o = out_meta(cx, 0);
  if (lu < 0 || b < 0 || piv < 0 || !o) return TPU_OK;
  int nb = o->ndim - 2;
  const int64_t* bd = o->sizes;
  if (!left) b = mT(cx, b);
  tpu_ir_type_t bt = ty(cx, b);
  if (bt.dims[bt.rank - 2] == 0 || bt.dims[bt.rank - 1] == 0 || tpu_numel(nb, bd) == 0)
    return lw_output(cx, 0, lw_const(cx, 0, o->dtype, o->ndim, o->sizes));
  int ins[3] = {bcast_batch(cx, lu, nb, bd, 2), bcast_batch(cx, piv, nb, bd, 1), bcast_batch(cx, b, nb, bd, 2)};
  /* left: A X = B (adjoint: A^T X = B); right: X A = B <=> A^T X^T = B^T (adjoint: A X^T = B^T) */
  int x = custom(cx, TPU_IR_CUSTOM_LU_SOLVE, left ? adj : !adj, ty(cx, ins[2]), 3, ins);
  return lw_output(cx, 0, left ? x : mT(cx, x));
}
/* _linalg_solve_ex.result(A, B, *, left, check_errors, result, LU, pivots, info) */
static tpu_status_t lower_solve_ex(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(no_check_errors(cx, 3));
  int left = (int)lw_int(cx, 2, 1);
  int a = la_in(cx, 0, NULL), b = la_in(cx, 1, NULL);
  const tpu_tensor_t* o = out_meta(cx, 0);
  if (a < 0 || b < 0 || !o) return TPU_OK;
  tpu_ir_type_t at = ty(cx, a), bt0 = ty(cx, b);
  /* PyTorch's vector case: B is [n] or A.shape[:-1] */
  int vec = bt0.rank == 1 || (bt0.rank == at.rank - 1 && !memcmp(bt0.dims, at.dims, (size_t)bt0.rank * sizeof(int64_t)));
  int64_t n = at.dims[at.rank - 1];
  int64_t rdims[TPU_MAX_DIMS];
  memcpy(rdims, o->sizes, (size_t)o->ndim * sizeof(int64_t));
  int rr = o->ndim;
  if (vec) rdims[rr++] = 1; /* the result as [batch..., n, 1] */
  int nb = rr - 2;
  if (vec) { /* B.unsqueeze(-1) */
    int64_t d[TPU_MAX_DIMS];
    memcpy(d, bt0.dims, (size_t)bt0.rank * sizeof(int64_t));
    d[bt0.rank] = 1;
    b = tpu_ir_reshape(G, b, bt0.rank + 1, d);
  }
  if (!left) b = mT(cx, b);
  if (!n || tpu_ir_numel(&at) == 0) { /* outputs bind in order: result, LU, pivots, info */
    lw_output(cx, 0, lw_const(cx, 0, o->dtype, o->ndim, o->sizes));
    lw_output(cx, 1, a);
    lw_output(cx, 2, lw_const(cx, 0, TPU_DTYPE_I32, 0, NULL));
    return lw_output(cx, 3, lw_const(cx, 0, TPU_DTYPE_I32, 0, NULL));
  }
  int packed = lu_packed(cx, a, 0);
  if (tpu_numel(rr, rdims) == 0) lw_output(cx, 0, lw_const(cx, 0, o->dtype, o->ndim, o->sizes));
  else {
    int x = lu_solve(cx, packed, b, !left, nb, rdims);
    if (!left) x = mT(cx, x);
    lw_output(cx, 0, vec ? tpu_ir_reshape(G, x, o->ndim, o->sizes) : x);
  }
  lu_outputs(cx, packed, 1, 2, 3);
  return TPU_OK;
}
/* linalg_inv_ex.inverse(A, *, check_errors, inverse, info) */
static tpu_status_t lower_inv_ex(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(no_check_errors(cx, 1));
  int a = la_in(cx, 0, NULL);
  if (a < 0) return TPU_OK;
  tpu_ir_type_t t = ty(cx, a);
  int r = t.rank;
  if (t.dims[r - 1] == 0 || tpu_ir_numel(&t) == 0) {
    lw_output(cx, 0, a);
    return lw_output(cx, 1, lw_const(cx, 0, TPU_DTYPE_I32, 0, NULL));
  }
  int eye = tpu_ir_convert(G, tpu_ir_compare(G, TPU_IR_CMP_EQ, tpu_ir_iota(G, TPU_DTYPE_I64, r, t.dims, r - 2),
                                             tpu_ir_iota(G, TPU_DTYPE_I64, r, t.dims, r - 1)), t.dtype);
  int packed = lu_packed(cx, a, 0);
  lw_output(cx, 0, lu_solve(cx, packed, eye, 0, r - 2, t.dims));
  lu_outputs(cx, packed, -1, -1, 1);
  return TPU_OK;
}

/* diagonal of the packed LU's U [B..., n] and the permutation's sign [B...] (+-1, dtype dt) */
static void lu_diag_sign(tpu_lower_ctx_t* cx, int packed, int* out_diag, int* out_psign) {
  tpu_ir_type_t t = ty(cx, packed);
  int r = t.rank;
  int64_t n = t.dims[r - 2];
  int lu = sub(cx, packed, 0, n, 0, n);
  int64_t flat[TPU_MAX_DIMS], lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS], st[TPU_MAX_DIMS];
  memcpy(flat, t.dims, sizeof flat);
  flat[r - 2] = n * n;
  for (int d = 0; d < r - 1; ++d) { hi[d] = flat[d]; st[d] = 1; }
  st[r - 2] = n + 1;
  *out_diag = tpu_ir_slice(G, tpu_ir_reshape(G, lu, r - 1, flat), lo, hi, st);
  /* sign = (-1)^(number of pivots that swap) */
  int piv = col(cx, packed, n, n);
  int64_t pd[TPU_MAX_DIMS];
  memcpy(pd, t.dims, sizeof pd);
  int idx = BIN(ADD, tpu_ir_iota(G, t.dtype, r - 1, pd, r - 2), lw_const(cx, 1, t.dtype, r - 1, pd));
  int swaps = tpu_ir_convert(G, tpu_ir_compare(G, TPU_IR_CMP_NE, piv, idx), t.dtype);
  int64_t red[TPU_MAX_DIMS] = {0};
  red[r - 2] = 1;
  int cnt = tpu_ir_reduce(G, TPU_IR_MONOID_SUM, swaps, red);
  int odd = BIN(FMOD, cnt, lw_const(cx, 2, t.dtype, r - 2, t.dims));
  *out_psign = BIN(SUB, lw_const(cx, 1, t.dtype, r - 2, t.dims), BIN(MUL, odd, lw_const(cx, 2, t.dtype, r - 2, t.dims)));
}
/* One family: _linalg_det.result(A, *, result, LU, pivots) and
 * _linalg_slogdet.sign(A, *, sign, logabsdet, LU, pivots): both read the LU diagonal and the
 * permutation's sign; det multiplies them, slogdet splits sign and log|.|. */
static tpu_status_t lower_det_impl(tpu_lower_ctx_t* cx, int slog) {
  int a = la_in(cx, 0, NULL);
  if (a < 0) return TPU_OK;
  tpu_ir_type_t t = ty(cx, a);
  int r = t.rank, lu_k = slog ? 2 : 1;
  if (t.dims[r - 1] == 0 || tpu_ir_numel(&t) == 0) {
    lw_output(cx, 0, lw_const(cx, 1, t.dtype, r - 2, t.dims));
    if (slog) lw_output(cx, 1, lw_const(cx, 0, t.dtype, r - 2, t.dims));
    lw_output(cx, lu_k, a);
    return lw_output(cx, lu_k + 1, lw_const(cx, 0, TPU_DTYPE_I32, 0, NULL));
  }
  int packed = lu_packed(cx, a, 1), diag, psign;
  lu_diag_sign(cx, packed, &diag, &psign);
  int64_t red[TPU_MAX_DIMS] = {0};
  red[r - 2] = 1;
  if (slog) {
    lw_output(cx, 0, BIN(MUL, tpu_ir_reduce(G, TPU_IR_MONOID_PROD, tpu_ir_unary(G, TPU_IR_SIGN, diag), red), psign));
    lw_output(cx, 1, tpu_ir_reduce(G, TPU_IR_MONOID_SUM, tpu_ir_unary(G, TPU_IR_LOG, tpu_ir_unary(G, TPU_IR_ABS, diag)), red));
  } else {
    lw_output(cx, 0, BIN(MUL, tpu_ir_reduce(G, TPU_IR_MONOID_PROD, diag, red), psign));
  }
  lu_outputs(cx, packed, lu_k, lu_k + 1, -1);
  return TPU_OK;
}
static tpu_status_t lower_det(tpu_lower_ctx_t* cx) { return lower_det_impl(cx, 0); }
static tpu_status_t lower_slogdet(tpu_lower_ctx_t* cx) { return lower_det_impl(cx, 1); }

/* ---------------------------------------------------------------- triangular solves */

/* op(A) X = B for A (arg ia), B (arg ib) into output 0; left = 0 solves X A = B */
static tpu_status_t lw_tri(tpu_lower_ctx_t* cx, int ia, int ib, int upper, int trans, int unit, int left) {
  int a = la_in(cx, ia, NULL), b = la_in(cx, ib, NULL);
  const tpu_tensor_t* o = out_meta(cx, 0);
  if (a < 0 || b < 0 || !o) return TPU_OK;
  int nb = o->ndim - 2;
  if (tpu_numel(o->ndim, o->sizes) == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, o->ndim, o->sizes));
  if (!left) { b = mT(cx, b); trans = !trans; }
  int ins[2] = {bcast_batch(cx, a, nb, o->sizes, 2), bcast_batch(cx, b, nb, o->sizes, 2)};
  int x = custom(cx, TPU_IR_CUSTOM_TRI_SOLVE, (upper ? 1 : 0) | (unit ? 2 : 0) | (trans ? 4 : 0), ty(cx, ins[1]), 2, ins);
  return lw_output(cx, 0, left ? x : mT(cx, x));
}
/* linalg_solve_triangular(self = A, B, *, upper, left, unitriangular) (+ .out) */
static tpu_status_t lower_solve_triangular(tpu_lower_ctx_t* cx) {
  return lw_tri(cx, 0, 1, (int)lw_int(cx, 2, 0), 0, (int)lw_int(cx, 4, 0), (int)lw_int(cx, 3, 1));
}
/* triangular_solve.X(self = B, A, upper, transpose, unitriangular, *, X, M): M = A broadcast */
static tpu_status_t lower_triangular_solve(tpu_lower_ctx_t* cx) {
  TPU_RETURN_IF_ERROR(lw_tri(cx, 1, 0, (int)lw_int(cx, 2, 1), (int)lw_int(cx, 3, 0), (int)lw_int(cx, 4, 0), 1));
  const tpu_tensor_t* m = out_meta(cx, 1);
  int a = la_in(cx, 1, NULL);
  if (!m || a < 0) return TPU_OK;
  return lw_output(cx, 1, bcast_batch(cx, a, m->ndim - 2, m->sizes, 2));
}

/* ---------------------------------------------------------------- QR, eigh, SVD (flat-packed targets) */

/* flat [B..., L] -> its part [pos, pos + r*c) as [B..., r, c] */
static int unflat(tpu_lower_ctx_t* cx, int f, int64_t pos, int64_t r, int64_t c) {
  tpu_ir_type_t t = ty(cx, f);
  if (f < 0) return -1;
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS], st[TPU_MAX_DIMS];
  for (int d = 0; d < t.rank; ++d) { hi[d] = t.dims[d]; st[d] = 1; }
  lo[t.rank - 1] = pos; hi[t.rank - 1] = pos + (c < 0 ? r : r * c);
  int s = tpu_ir_slice(G, f, lo, hi, st);
  t.dims[t.rank - 1] = r;
  t.dims[t.rank] = c;
  return c < 0 ? tpu_ir_reshape(G, s, t.rank, t.dims) : tpu_ir_reshape(G, s, t.rank + 1, t.dims);
}
/* a flat-packed decomposition of a [B..., m, n] into [B..., len] */
static int flat_custom(tpu_lower_ctx_t* cx, int target, int64_t attr, int a, int64_t len) {
  tpu_ir_type_t t = ty(cx, a);
  t.rank -= 1;
  t.dims[t.rank - 1] = len;
  return custom(cx, target, attr, t, 1, &a);
}
/* an output PyTorch leaves empty (Q of mode='r', eigenvectors / U, Vh when not computed) */
static tpu_status_t empty_out(tpu_lower_ctx_t* cx, int k) {
  const tpu_tensor_t* o = out_meta(cx, k);
  return o ? lw_output(cx, k, lw_const(cx, 0, o->dtype, o->ndim, o->sizes)) : TPU_OK;
}
/* linalg_qr.out(A, mode, *, Q, R) */
static tpu_status_t lower_qr(tpu_lower_ctx_t* cx) {
  const char* mode = lw_str(cx, 1, "reduced");
  int a = la_in(cx, 0, NULL);
  if (a < 0) return TPU_OK;
  int md = !strcmp(mode, "complete") ? 1 : !strcmp(mode, "r") ? 2 : 0;
  tpu_ir_type_t t = ty(cx, a);
  int64_t m = t.dims[t.rank - 2], n = t.dims[t.rank - 1], k = m < n ? m : n;
  int64_t mq = md == 0 ? k : md == 1 ? m : 0, kr = md == 1 ? m : k;
  int f = flat_custom(cx, TPU_IR_CUSTOM_QR, md, a, m * mq + kr * n);
  if (md == 2) empty_out(cx, 0);
  else lw_output(cx, 0, unflat(cx, f, 0, m, mq));
  return lw_output(cx, 1, unflat(cx, f, m * mq, kr, n));
}
/* _linalg_eigh.eigenvalues(A, UPLO, compute_v, *, eigenvalues, eigenvectors) */
static tpu_status_t lower_eigh(tpu_lower_ctx_t* cx) {
  const char* uplo = lw_str(cx, 1, "L");
  int vec = (int)lw_int(cx, 2, 1);
  int a = la_in(cx, 0, NULL);
  if (a < 0) return TPU_OK;
  tpu_ir_type_t t = ty(cx, a);
  int64_t n = t.dims[t.rank - 1];
  int upper = uplo[0] == 'U' || uplo[0] == 'u';
  int f = flat_custom(cx, TPU_IR_CUSTOM_EIGH, upper | (vec ? 2 : 0), a, vec ? n + n * n : n);
  lw_output(cx, 0, unflat(cx, f, 0, n, -1));
  return vec ? lw_output(cx, 1, unflat(cx, f, n, n, n)) : empty_out(cx, 1);
}
/* _linalg_svd.U(A, full_matrices, compute_uv, *, driver, U, S, Vh) */
static tpu_status_t lower_svd(tpu_lower_ctx_t* cx) {
  if (!lw_is_none(cx, 3))
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "torch.linalg.svd: keyword argument `driver=` is only supported on "
                   "CUDA inputs with cuSOLVER backend.");
  int full = (int)lw_int(cx, 1, 0), uv = (int)lw_int(cx, 2, 1);
  int a = la_in(cx, 0, NULL);
  if (a < 0) return TPU_OK;
  tpu_ir_type_t t = ty(cx, a);
  int64_t m = t.dims[t.rank - 2], n = t.dims[t.rank - 1], k = m < n ? m : n;
  int64_t ku = full ? m : k, kv = full ? n : k;
  int f = flat_custom(cx, TPU_IR_CUSTOM_SVD, (full ? 1 : 0) | (uv ? 2 : 0), a, uv ? m * ku + k + kv * n : k);
  if (!uv) {
    empty_out(cx, 0);
    lw_output(cx, 1, unflat(cx, f, 0, k, -1));
    return empty_out(cx, 2);
  }
  lw_output(cx, 0, unflat(cx, f, 0, m, ku));
  lw_output(cx, 1, unflat(cx, f, m * ku, k, -1));
  return lw_output(cx, 2, unflat(cx, f, m * ku + k, kv, n));
}

TPU_LOWERING_TABLE(tpu_lowerings_linalg) = {
  {"aten::linalg_qr.out", lower_qr},
  {"aten::_linalg_eigh.eigenvalues", lower_eigh},
  {"aten::_linalg_svd.U", lower_svd},
  {"aten::linalg_cholesky_ex.L", lower_cholesky_ex},
  {"aten::cholesky", lower_cholesky}, {"aten::cholesky.out", lower_cholesky},
  {"aten::_cholesky_solve_helper", lower_cholesky_solve_helper},
  {"aten::cholesky_inverse", lower_cholesky_inverse}, {"aten::cholesky_inverse.out", lower_cholesky_inverse},
  {"aten::linalg_lu_factor_ex.out", lower_lu_factor_ex},
  {"aten::linalg_lu_solve.out", lower_lu_solve},
  {"aten::_linalg_solve_ex.result", lower_solve_ex},
  {"aten::linalg_inv_ex.inverse", lower_inv_ex},
  {"aten::_linalg_det.result", lower_det},
  {"aten::_linalg_slogdet.sign", lower_slogdet},
  {"aten::linalg_solve_triangular", lower_solve_triangular},
  {"aten::linalg_solve_triangular.out", lower_solve_triangular},
  {"aten::triangular_solve.X", lower_triangular_solve},
  TPU_LOWERING_END
};
