/* stablehlo_linalg.c — the dense linear algebra custom targets (ir.h; host kernels in
 * drivers/host/linalg.c compute in f64, so these expansions do too):
 *   TRI_SOLVE  stablehlo.triangular_solve (left side; i1: upper / unit diagonal / transposed)
 *   CHOLESKY   stablehlo.cholesky (lower) with the upper triangle zeroed and LAPACK's info
 *              (first non-positive or NaN pivot, 1-based) in column n, row 0. The run-time
 *              error of i1 = 1/2 has no StableHLO form: the values are computed all the same.
 * LU and LU_SOLVE (pivoting loops) are not expanded (UNSUPPORTED). */
#include "ir/stablehlo_impl.h"

#define F64 TPU_DTYPE_F64

int shlo_tri_solve(shlo_t* P, const tpu_ir_op_t* op, int a, int b) {
  int dt = op->type.dtype;
  a = shlo_convert(P, a, F64); b = shlo_convert(P, b, F64);
  int in[2] = {a, b};
  int r = shlo_begin(P, "stablehlo.triangular_solve", 2, in);
  if (r < 0) return -1;
  shlo_printf(P, " {left_side = true, lower = %s, transpose_a = #stablehlo<transpose %s>, unit_diagonal = %s}",
              (op->i1 & 1) ? "false" : "true", (op->i1 & 4) ? "TRANSPOSE" : "NO_TRANSPOSE",
              (op->i1 & 2) ? "true" : "false");
  return shlo_convert(P, shlo_end(P, r, 2, in, shlo_type(P, b)), dt);
}

int shlo_cholesky(shlo_t* P, const tpu_ir_op_t* op, int a) {
  int dt = op->type.dtype;
  a = shlo_convert(P, a, F64);
  const tpu_ir_type_t ta = *shlo_type(P, a);
  int rank = ta.rank;
  int64_t n = ta.dims[rank - 1];
  int r = shlo_begin(P, "stablehlo.cholesky", 1, &a);
  if (r < 0) return -1;
  shlo_printf(P, " {lower = true}");
  int l = shlo_end(P, r, 1, &a, &ta);
  tpu_ir_type_t ti = ta; ti.dtype = TPU_DTYPE_I64;
  int row = shlo_iota(P, &ti, rank - 2), col = shlo_iota(P, &ti, rank - 1);
  int zero = shlo_const_like(P, l, F64, 0);
  l = shlo_select(P, shlo_cmp(P, TPU_IR_CMP_GE, row, col), l, zero);
  /* diagonal, then the first bad pivot */
  int64_t fl[TPU_MAX_DIMS] = {0};
  fl[rank - 1] = 1;
  int diag = shlo_reduce(P, TPU_IR_MONOID_SUM, shlo_select(P, shlo_cmp(P, TPU_IR_CMP_EQ, row, col), l, zero), fl);
  const tpu_ir_type_t td = *shlo_type(P, diag); /* [B..., n] */
  int bad = shlo_bin(P, "stablehlo.or", shlo_cmp(P, TPU_IR_CMP_NE, diag, diag),
                     shlo_cmp(P, TPU_IR_CMP_LE, diag, shlo_const_like(P, diag, F64, 0)));
  tpu_ir_type_t tdi = td; tdi.dtype = TPU_DTYPE_I64;
  int j1 = shlo_bin(P, "stablehlo.add", shlo_iota(P, &tdi, td.rank - 1), shlo_const_like(P, diag, TPU_DTYPE_I64, 1));
  int cand = shlo_select(P, bad, j1, shlo_const_like(P, diag, TPU_DTYPE_I64, (double)(n + 1)));
  int64_t fl2[TPU_MAX_DIMS] = {0};
  fl2[td.rank - 1] = 1;
  int first = shlo_reduce(P, TPU_IR_MONOID_MIN, cand, fl2); /* [B...] */
  first = shlo_select(P, shlo_cmp(P, TPU_IR_CMP_GT, first, shlo_const_like(P, first, TPU_DTYPE_I64, (double)n)),
                      shlo_const_like(P, first, TPU_DTYPE_I64, 0), first);
  int info = shlo_convert(P, first, F64);
  tpu_ir_type_t tc = ta; tc.dims[rank - 1] = 1; /* [B..., n, 1] */
  int64_t bd[TPU_MAX_DIMS];
  for (int d = 0; d < rank - 2; ++d) bd[d] = d;
  int infob = shlo_bcast(P, info, tc.rank, tc.dims, bd);
  tpu_ir_type_t tci = tc; tci.dtype = TPU_DTYPE_I64;
  int r0 = shlo_cmp(P, TPU_IR_CMP_EQ, shlo_iota(P, &tci, rank - 2), shlo_const_like(P, infob, TPU_DTYPE_I64, 0));
  int colv = shlo_select(P, r0, infob, shlo_const_like(P, infob, F64, 0));
  int parts[2] = {l, colv};
  return shlo_convert(P, shlo_concat(P, 2, parts, rank - 1), dt);
}
