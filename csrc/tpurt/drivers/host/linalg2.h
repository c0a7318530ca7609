/* linalg2.h — matrix decompositions of the host driver (internal): the custom targets QR, EIGH
 * and SVD (ir.h has each one's flat result layout). Every kernel reads any strides and f32/f64
 * operands, copies each matrix of the batch into a row-major double workspace and writes the
 * result flat into the output's last dim, in the output's dtype. Batches run in parallel on
 * the pool. Thread-safe.
 *   QR    Householder reflections as LAPACK geqr2/org2r, so R's diagonal signs are LAPACK's
 *         (beta = -sign(alpha) ||x||; no reflection when the column is already reduced).
 *   EIGH  cyclic Jacobi on the symmetric matrix taken from one triangle; ascending eigenvalues.
 *   SVD   one-sided Jacobi (Hestenes) on A or A^T (whichever is tall); S descending; singular
 *         vectors of zero singular values and full_matrices' extra columns are completed to an
 *         orthonormal basis by Gram-Schmidt over unit vectors. Signs (and bases of repeated
 *         eigen/singular values) are not LAPACK's: compare invariants.
 *
 * Legend: B = batch (product of leading dims), m x n = matrix, k = min(m, n).
 *
 *     // out [B, n + n*n] = EIGH(A [B, n, n]), i1 = 2 (lower triangle, with vectors)
 *     tpu_status_t st = tpu_host_k_linalg2(op, 1, &a_view, &out_view);
 *
 * Errors: INTERNAL for malformed operands; INVALID_ARGUMENT with PyTorch's message when an SVD
 * or EIGH input holds NaN/inf (LAPACK fails to converge there). */
#ifndef TPURT_DRIVERS_HOST_LINALG2_H_
#define TPURT_DRIVERS_HOST_LINALG2_H_

#include "drivers/host/host.h"

tpu_status_t tpu_host_k_linalg2(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);
/* Serial twin (one matrix after another on the calling thread): bit-identical results. */
tpu_status_t tpu_host_k_linalg2_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_LINALG2_H_ */
