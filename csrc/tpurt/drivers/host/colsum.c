/* colsum.c — bf16 / f16 column sums (colsum.h): the portable instance of colsum_impl.h, the ISA dispatch and
 * the kernel entry (column blocks over the pool; strided views gathered a row at a time). */
#define CS_SUFFIX base
#include "drivers/host/colsum_impl.h"

const tpu_host_colsum_ops_t* tpu_host_colsum_ops(int isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa >= 2 && tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) return &tpu_host_colsum_ops_avx512;
  if (isa >= 1 && tpu_cpu_has_avx2_fma()) return &tpu_host_colsum_ops_avx2;
#endif
  return &tpu_host_colsum_ops_base;
}

enum { CS_WIDE = 2048 }; /* columns per block: the accumulators (16 KB) stay in L1 */
typedef struct {
  tpu_host_colsum_fn fn;
  const tpu_host_view_t *x, *out;
  int64_t M, N, bw;
} cs_job_t;

static void cs_worker(void* ctx, int64_t b0, int64_t b1) {
  const cs_job_t* J = ctx;
  double acc[CS_WIDE];
  uint16_t row[CS_WIDE];
  const tpu_host_view_t *x = J->x, *o = J->out;
  const int64_t rs = x->strides[0], cs = x->strides[1];
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t j0 = b * J->bw, nj = TPU_MIN(J->bw, J->N - j0);
    for (int64_t j = 0; j < nj; ++j) acc[j] = 0;
    const uint16_t* xp = (const uint16_t*)x->data + j0 * cs;
    if (cs == 1) {
      J->fn(xp, rs, J->M, acc, nj);
    } else { /* strided columns: one row gathered at a time, same order */
      for (int64_t r = 0; r < J->M; ++r) {
        for (int64_t j = 0; j < nj; ++j) row[j] = xp[r * rs + j * cs];
        J->fn(row, 0, 1, acc, nj);
      }
    }
    float* op = (float*)o->data + j0 * o->strides[0];
    for (int64_t j = 0; j < nj; ++j) op[j * o->strides[0]] = (float)acc[j];
  }
}

tpu_status_t tpu_host_k_col_sums_lowp(const tpu_host_view_t* x, const tpu_host_view_t* out) {
  if ((x->dtype != TPU_DTYPE_BF16 && x->dtype != TPU_DTYPE_F16) || x->rank != 2 || out->rank != 1 ||
      out->dtype != TPU_DTYPE_F32 || out->sizes[0] != x->sizes[1])
    return TPU_ERR(INTERNAL, "host: low-precision column sums of a %s rank-%d operand into %s rank %d",
                   tpu_dtype_name(x->dtype), x->rank, tpu_dtype_name(out->dtype), out->rank);
  const tpu_host_colsum_ops_t* ops = tpu_host_colsum_ops(2);
  cs_job_t J = {x->dtype == TPU_DTYPE_BF16 ? ops->bf16 : ops->f16, x, out, x->sizes[0], x->sizes[1], CS_WIDE};
  if (J.N == 0) return TPU_OK;
  J.bw = tpu_pool_column_block(J.N, CS_WIDE, 64, 16);
  tpu_pool_parallel_for((J.N + J.bw - 1) / J.bw, 1, cs_worker, &J);
  return TPU_OK;
}
