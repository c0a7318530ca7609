/* colsum.h — column sums of bf16 / f16 matrices (the host driver's COL_SUMS custom call on a low-precision
 * operand: autocast's bias gradients, sum over the leading dims of a bf16 tensor).
 *
 *   COL_SUMS (x [M, N] bf16 or f16) -> [N] f32: each column adds its values, widened exactly, in row order
 *            into a double, rounded once to f32 (the f32 kernel's sums, rows.h, on the widened values: same
 *            bits as converting first, without the widened copy). The lowering (lower/reduce.c) rounds the
 *            f32 result to the dtype.
 *
 * Per ISA (colsum_impl.h compiled as colsum.c's portable instance, colsum_avx2.c and colsum_avx512.c):
 * rows are streamed a few at a time with the column accumulators in L1; parallel over column blocks.
 * Legend: M rows (summed over), N columns. */
#ifndef TPURT_DRIVERS_HOST_COLSUM_H_
#define TPURT_DRIVERS_HOST_COLSUM_H_

#include "drivers/host/host.h"

/* x: one [M, N] bf16 / f16 view (any strides); out: [N] f32. */
tpu_status_t tpu_host_k_col_sums_lowp(const tpu_host_view_t* x, const tpu_host_view_t* out);

/* acc[j] += x[r * ld + j] (widened) for r < m in row order, j < n: contiguous rows (per ISA). */
typedef void (*tpu_host_colsum_fn)(const uint16_t* x, int64_t ld, int64_t m, double* acc, int64_t n);
typedef struct {
  tpu_host_colsum_fn bf16, f16;
} tpu_host_colsum_ops_t;
extern const tpu_host_colsum_ops_t tpu_host_colsum_ops_base, tpu_host_colsum_ops_avx2, tpu_host_colsum_ops_avx512;
/* The ops for this CPU, or for at most `isa` (0 base, 1 AVX2, 2 AVX-512; tests compare them). */
const tpu_host_colsum_ops_t* tpu_host_colsum_ops(int isa);

#endif /* TPURT_DRIVERS_HOST_COLSUM_H_ */
