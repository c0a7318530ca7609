/* linalg.h — dense linear algebra kernels of the host driver (internal): the custom
 * targets CHOLESKY, LU, LU_SOLVE and TRI_SOLVE (ir.h has each one's operand and result
 * layout). Every kernel reads any strides and f32/f64 operands, copies each matrix of
 * the batch into a row-major double workspace, factors / solves it there with LAPACK's
 * unblocked algorithms (potf2, getf2, getrs, trsm) and writes the result in the output's
 * dtype. Batches run in parallel on the pool. Thread-safe.
 *
 * Legend: B = batch (product of leading dims), n = order, m = rows, k = right-hand sides.
 *
 *     // out [B, n, n+1] = CHOLESKY(A [B, n, n])
 *     tpu_status_t st = tpu_host_k_linalg(op, 1, &a_view, &out_view);
 *
 * Errors: INTERNAL for malformed operands (lowerings check user input); for CHOLESKY with
 * i1 != 0, INVALID_ARGUMENT with PyTorch's message when a matrix is not positive-definite. */
#ifndef TPURT_DRIVERS_HOST_LINALG_H_
#define TPURT_DRIVERS_HOST_LINALG_H_

#include "drivers/host/host.h"

/* Runs custom op `op` (one of the four targets) on operands xs[0..n) into out. */
tpu_status_t tpu_host_k_linalg(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);
/* Serial twin: the same math, one matrix after another on the calling thread (tests check
 * that the parallel run equals it bit for bit; the math itself is checked by residuals). */
tpu_status_t tpu_host_k_linalg_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);

/* Shared by linalg.c and linalg2.c: the element offset of batch element b over the leading nb
 * dims of v, and a copy of the (m, n) matrix at element offset off of v into the row-major double
 * workspace w. */
int64_t tpu_host_linalg_batch_off(const tpu_host_view_t* v, int nb, int64_t b);
void tpu_host_linalg_load_mat(double* w, const tpu_host_view_t* v, int64_t off, int64_t m, int64_t n);

#endif /* TPURT_DRIVERS_HOST_LINALG_H_ */
