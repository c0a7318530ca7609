/* gemm.h — packed-panel matrix multiply of the host driver (internal, not public API).
 *
 * C = alpha * A @ B + beta * C on f32 and f64, for any element strides: row-major, column-major
 * (transposed views, row stride 1), sliced, and zero strides (broadcast inputs). The `_ref` twins
 * are naive triple loops with a double accumulator; tests compare the two.
 *
 * Example: C (m, n) row-major = A (m, k) row-major @ B^T where B is stored (n, k) row-major:
 *
 *     tpu_host_sgemm(m, n, k, 1.0f, a, k, 1,   b, 1, k,   0.0f, c, n, 1);
 *     //                            A: rs cs   B^T: rs cs       C: rs cs
 *
 * Semantics (as BLAS):
 *   - strides are in ELEMENTS; a_rs is the step between rows of A, a_cs between its columns;
 *   - beta == 0: C is only written, never read (NaN/garbage in C does not propagate);
 *   - alpha == 0 or k == 0: A and B are not read, C = beta * C;
 *   - C must not overlap A or B. A C stride of 0 along a dimension longer than 1 (outputs
 *     aliasing each other) is accepted and gives the reference loop's result.
 *
 * Threads: the calls are thread-safe and re-entrant. Large problems are split over the shared
 * pool (tpu_pool_parallel_for); called from inside a pool worker they run on that thread alone.
 * Kernels: AVX-512F or AVX2+FMA microkernels chosen at run time from the CPU features, portable C
 * otherwise. Results differ from the reference by summation order only.
 *
 * Legend: m rows of A and C, n columns of B and C, k the reduction length;
 * A (m, k), B (k, n), C (m, n); batched: (batch, m, k) @ (batch, k, n) -> (batch, m, n). */
#ifndef TPURT_DRIVERS_HOST_GEMM_H_
#define TPURT_DRIVERS_HOST_GEMM_H_

#include <stddef.h>
#include <stdint.h>

void tpu_host_sgemm(int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t a_rs, int64_t a_cs,
                    const float* b, int64_t b_rs, int64_t b_cs,
                    float beta, float* c, int64_t c_rs, int64_t c_cs);
void tpu_host_sgemm_ref(int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t a_rs, int64_t a_cs,
                        const float* b, int64_t b_rs, int64_t b_cs,
                        float beta, float* c, int64_t c_rs, int64_t c_cs);
void tpu_host_dgemm(int64_t m, int64_t n, int64_t k, double alpha,
                    const double* a, int64_t a_rs, int64_t a_cs,
                    const double* b, int64_t b_rs, int64_t b_cs,
                    double beta, double* c, int64_t c_rs, int64_t c_cs);
void tpu_host_dgemm_ref(int64_t m, int64_t n, int64_t k, double alpha,
                        const double* a, int64_t a_rs, int64_t a_cs,
                        const double* b, int64_t b_rs, int64_t b_cs,
                        double beta, double* c, int64_t c_rs, int64_t c_cs);

/* Batched: matrix t uses a + t*a_bs, b + t*b_bs, c + t*c_bs (element strides; a_bs or b_bs 0
 * broadcasts one matrix over the batch). Many small matrices run in parallel over the batch,
 * large ones one after another, each split over the pool. The C matrices must not overlap, except
 * c_bs == 0: then the products are applied to the one C in batch order (as a loop over
 * tpu_host_sgemm would). */
void tpu_host_sgemm_batched(int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
                            const float* a, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                            const float* b, int64_t b_bs, int64_t b_rs, int64_t b_cs,
                            float beta, float* c, int64_t c_bs, int64_t c_rs, int64_t c_cs);
void tpu_host_dgemm_batched(int64_t batch, int64_t m, int64_t n, int64_t k, double alpha,
                            const double* a, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                            const double* b, int64_t b_bs, int64_t b_rs, int64_t b_cs,
                            double beta, double* c, int64_t c_bs, int64_t c_rs, int64_t c_cs);

/* f32 result from operands of another format: A and B are f32, bf16 or f16 (a_dtype/b_dtype,
 * tpu_dtype_t; strides in elements of that dtype), widened exactly while the panels are packed
 * (no converted copy of the operands), f32 accumulation, C f32. precision (tpu_ir_precision_t)
 * applies when both operands are f32: 0 HIGHEST = f32 products; 1 HIGH = 3 passes of bf16 parts
 * (hi = bf16(x) round-to-nearest-even, lo = bf16(x - hi); hi*hi + hi*lo + lo*hi, about 3x the
 * time); 2 DEFAULT = hi*hi (same speed as HIGHEST on a CPU: it emulates TPU numerics). DEFAULT
 * with one bf16 and one f32 operand multiplies bf16 by hi (the convolution passes its exact-bf16
 * f32 copies of bf16 tensors this way); other mixed pairs are widened at any precision.
 * bf16 kernel: when every pass multiplies bf16 values (bf16 operands, or f32 at DEFAULT / HIGH)
 * and the CPU has AVX512-BF16, the products run on `vdpbf16ps` (2x the f32 FMA rate) instead of
 * the widening kernels. Its numerics differ: k-pairs are added as (acc + x1*y1) + x0*y0, and
 * denormal inputs and results are flushed to zero (MXCSR is ignored). f16 and HIGHEST never use it, nor do tiny
 * products of bf16/f16 operands (m n k <= 16 * 16 * 64: widened exactly into the f32 small path, gemm.c);
 * TORCH_TPU_GEMM_BF16=0 (read once) or tpu_host_gemm_set_isa(AVX512) keep the widening kernels. */
void tpu_host_sgemm_ex(int a_dtype, int b_dtype, int precision, int64_t m, int64_t n, int64_t k, float alpha,
                       const void* a, int64_t a_rs, int64_t a_cs, const void* b, int64_t b_rs, int64_t b_cs,
                       float beta, float* c, int64_t c_rs, int64_t c_cs);
void tpu_host_sgemm_batched_ex(int a_dtype, int b_dtype, int precision, int64_t batch, int64_t m, int64_t n,
                               int64_t k, float alpha, const void* a, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                               const void* b, int64_t b_bs, int64_t b_rs, int64_t b_cs, float beta, float* c,
                               int64_t c_bs, int64_t c_rs, int64_t c_cs);

/* Epilogue: `fn(ctx, t, i0, j0, mb, nb, blk, rs, cs)` runs once for every block C[t][i0:i0+mb, j0:j0+nb]
 * as soon as that block holds its final value (t = epi->t0 + the batch index), on the thread that
 * computed it, while the block is still in cache (the packed driver calls it per (mc, nc) block after
 * the last k pass). The block's values are at blk[i * rs + j * cs] (element (i0, j0) at blk[0]): in C
 * itself, or, with `c_unused` set, beta == 0 and one k pass, in a per-thread buffer, and C is then
 * never written (its memory traffic saved; the caller must not read C). The blocks are disjoint and
 * cover C; coordinates are C's own (also when the driver computes C^T). The fused elementwise
 * epilogues of the executor (exec.c) run here. */
typedef void (*tpu_host_gemm_epi_fn)(void* ctx, int64_t t, int64_t i0, int64_t j0, int64_t mb, int64_t nb,
                                     const float* blk, int64_t rs, int64_t cs);
typedef struct tpu_host_gemm_epi_s {
  tpu_host_gemm_epi_fn fn;
  void* ctx;
  int64_t t0;
  int c_unused; /* only the epilogue reads C: blocks may stay in a per-thread buffer */
  /* (optional) a bf16 store the packed driver does itself in place of fn (autocast's linear layers and
   * bmms: the product, plus a bias, rounded to bf16): with out_bf16 set, a finished block's values v go to
   * out_bf16[t * out_bs + i * out_rs + j * out_cs] as bf16(bias[t * bias_bs + j * bias_cs] + v) (bias f32,
   * may be NULL: bf16(v)), rounded to nearest even with NaN kept (tpu_f32_to_bf16), the add in that operand
   * order: the bits of the elementwise ops it replaces. fn must still be set: paths without blocks call it.
   * t is the epilogue's t (t0 + the batch index): out and bias must be linear in it. */
  uint16_t* out_bf16;
  int64_t out_bs, out_rs, out_cs;
  const float* bias;
  int64_t bias_bs, bias_cs;
} tpu_host_gemm_epi_t;
/* tpu_host_sgemm_batched_ex with an epilogue (epi may be NULL: none). */
void tpu_host_sgemm_batched_epi(int a_dtype, int b_dtype, int precision, int64_t batch, int64_t m, int64_t n,
                                int64_t k, float alpha, const void* a, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                                const void* b, int64_t b_bs, int64_t b_rs, int64_t b_cs, float beta, float* c,
                                int64_t c_bs, int64_t c_rs, int64_t c_cs, const tpu_host_gemm_epi_t* epi);

/* Scratch memory from the GEMM's buffer cache (64-byte aligned; recently freed multi-megabyte
 * blocks are reused instead of being page-faulted in again). tpu_host_scratch_free(NULL) is fine. */
void* tpu_host_scratch_alloc(size_t bytes);
void tpu_host_scratch_free(void* p);

/* ---- testing and benchmarking hooks ---------------------------------------------------------
 * Restricts the kernels to at most `isa` (clamped to what the CPU has), for every thread; returns
 * the previous setting. TPU_HOST_GEMM_ISA_BEST (the default) picks the best available. */
typedef enum tpu_host_gemm_isa_e {
  TPU_HOST_GEMM_ISA_PORTABLE = 0,
  TPU_HOST_GEMM_ISA_AVX2,
  TPU_HOST_GEMM_ISA_AVX512,     /* f32 kernels only: bf16 operands are widened (the exact path) */
  TPU_HOST_GEMM_ISA_AVX512BF16, /* + the vdpbf16ps kernel for bf16 products */
  TPU_HOST_GEMM_ISA_BEST,
  TPU_HOST_GEMM_ISA_COUNT
} tpu_host_gemm_isa_t;
tpu_host_gemm_isa_t tpu_host_gemm_set_isa(tpu_host_gemm_isa_t isa);
/* Tiles of C at most max_cols wide (2 max_cols for row-major A; the bf16 kernels: row-major bf16 A at any width)
 * read A in place (the kernels' ukr_a) instead of packing it; 0: never, negative: the default (64). For every
 * thread; returns the previous value. Same bits either way. */
int tpu_host_gemm_set_direct_a(int max_cols);
/* Small problems (one k block, B small enough to stay in cache: see gemm.c gemm_small_ok) skip packing A
 * (the kernel's small: the f32 AVX-512 kernel, and the AVX2 one with beta 0) while set_direct_a is not 0; 0 packs
 * A everywhere. */
/* Test hooks: while counting is on (count_paths(1); off by default, so the planning of every thread tile costs
 * one relaxed load of the flag), path_counts says how many tiles were planned reading A in place (in the format
 * of the first pass), storing bf16 from the kernels' registers (tpu_host_gemm_epi_t.out_bf16) and taken by the
 * small path, so tests can show that those paths ran (they give the same bits as the packed / f32-block
 * paths). The counts are totals over all threads and never reset; count_paths returns the previous setting. */
int tpu_host_gemm_count_paths(int on);
void tpu_host_gemm_path_counts(int64_t* direct_a, int64_t* store16, int64_t* small);
/* The kernels sgemm uses now, e.g. "avx512 14x32", with the bf16 kernel when it is enabled
 * ("avx512 14x32 + avx512bf16 14x32"). */
const char* tpu_host_gemm_isa_name(void);

/* ---- internals shared by gemm.c and the ISA files (gemm_avx2.c, gemm_avx512.c) --------------
 * A microkernel computes one MR x NR tile of C from packed panels:
 *   ap (kc, MR): MR-high row strip of A, column p at ap[p*MR], zero-padded past the edge;
 *   bp (kc, NR): NR-wide column strip of B, row p at bp[p*NR], zero-padded, 64-byte aligned;
 *   C[i, j] (i < mr, j < nr) = alpha * sum_p ap[p*MR+i] * bp[p*NR+j] + beta * C[i, j],
 *   where beta == 0 means C is not read. mr <= MR and nr <= NR trim the edge tiles.
 * Scalars arrive by pointer to the element type, so one driver serves f32 and f64.
 * A kernel with kunit 2 (bf16 pairs) packs k in pairs: a strip is (ceil(kc/2), MR, 2) elements of
 * pack_size bytes, the last pair zero-padded; the driver cuts k blocks at even offsets. 
 * pack_a copies an (mc, kc) block of A with any strides (s_rs, s_cs) into MR-high strips, one
 * after another, zero-padding the last; pack_b does the same for B^T (nc, kc) with NR-high strips
 * (B's column stride is B^T's row stride). Either may be NULL: the driver's generic copy runs.
 * gemv_rows (f32, may be NULL): acc[j] += sum_p x[p*xs] * b[p*b_rs + j] for j < n (n <= 4096).
 * sdot (f32, may be NULL): sum_p x[p] * y[p] over contiguous vectors. */
typedef void (*tpu_host_gemm_ukr_fn)(int64_t kc, const void* ap, const void* bp, void* c,
                                     int64_t c_rs, int64_t c_cs, int mr, int nr,
                                     const void* alpha, const void* beta);
/* ukr_a: the same tile reading A in place, A(i, p) = a[i * a_rs + p * a_cs] (i < mr: never past the edge),
 * same products in the same order (same bits): the driver skips packing A where each A strip would
 * be used by few B strips (narrow C). */
typedef void (*tpu_host_gemm_ukr_a_fn)(int64_t kc, const void* a, int64_t a_rs, int64_t a_cs, const void* bp,
                                       void* c, int64_t c_rs, int64_t c_cs, int mr, int nr, const void* alpha,
                                       const void* beta);
/* ukr_bf16 / ukr_a_bf16 (optional, f32 accumulators): the tile written straight to bf16, the epilogue's direct
 * store (tpu_host_gemm_epi_t.out_bf16) without the f32 block: out[i * o_rs + j] = bf16(bias[j] + alpha * acc)
 * (bias may be NULL: bf16(alpha * acc)), rounded as tpu_f32_to_bf16 (the bits the f32 write-back plus the store
 * would give). a: the packed strip (ukr_bf16; a_rs unused) or A in place with row stride a_rs (ukr_a_bf16). */
typedef void (*tpu_host_gemm_ukr_bf16_fn)(int64_t kc, const void* a, int64_t a_rs, const void* bp, uint16_t* out,
                                          int64_t o_rs, const float* bias, int mr, int nr, float alpha);
typedef void (*tpu_host_gemm_pack_fn)(int64_t rows, int64_t kc, const void* src, int64_t s_rs,
                                      int64_t s_cs, void* dst);
typedef void (*tpu_host_gemv_rows_fn)(int64_t n, int64_t k, const float* x, int64_t xs,
                                      const float* b, int64_t b_rs, float* acc);
typedef float (*tpu_host_sdot_fn)(int64_t k, const float* x, const float* y);
/* small (f32, may be NULL): C (m, n) = alpha * A @ B + beta * C in one k block (k <= kc) without packing A:
 * A(i, p) = a[i * a_rs + p * a_cs] read in place, B(p, j) = b[p * b_rs + j * b_cs] read in place when b_cs is 1
 * (else packed into scratch: round_up(n, nr) * k floats, 64-byte aligned; b NULL: B is the one an earlier call
 * with the same n, k and strides packed there), C rows contiguous (c_cs 1). Rows are cut into strips of at most
 * mr that waste no rows (m = 16: 8 + 8, not 14 + 2 padded to 28). Same products in the same order and the same
 * write-back as ukr: the packed path's bits. */
typedef void (*tpu_host_gemm_small_fn)(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
                                       const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs,
                                       float alpha, float beta, float* scratch);

/* widen_bf16 (optional): dst[i * cols + j] = f32(src[i * rs + j]) for i < rows, j < cols (bf16 bits, rows
 * contiguous): the exact widening of tiny bf16 products' operands for the small path (gemm.c gemm_widen_tiny). */
typedef void (*tpu_host_gemm_widen_fn)(int64_t rows, int64_t cols, const uint16_t* src, int64_t rs, float* dst);

/* out[i * o_rs + j] = bf16(bias[j] + x[i * x_rs + j]) (bias may be NULL: bf16(x)) for i < m, j < n: the direct
 * bf16 store of an epilogue (tpu_host_gemm_epi_t.out_bf16) on contiguous rows; per ISA. */
typedef void (*tpu_host_gemm_store_bf16_fn)(int64_t m, int64_t n, const float* x, int64_t x_rs, const float* bias,
                                            uint16_t* out, int64_t o_rs);
void tpu_host_gemm_store_bf16_avx512(int64_t m, int64_t n, const float* x, int64_t x_rs, const float* bias,
                                     uint16_t* out, int64_t o_rs);
void tpu_host_gemm_store_bf16_avx512bf16(int64_t m, int64_t n, const float* x, int64_t x_rs, const float* bias,
                                         uint16_t* out, int64_t o_rs);

typedef struct tpu_host_gemm_kernel_s {
  const char* name;
  int elem_size;          /* 4 (f32) or 8 (f64): C, alpha, beta and the accumulators */
  int pack_size;          /* bytes per packed operand element; 0 = elem_size (2: bf16) */
  int kunit;              /* k is packed in groups of kunit (0 or 1: none; 2: bf16 pairs) */
  int mr, nr;             /* microkernel tile */
  int64_t kc, mc, nc;     /* cache blocking: kc x nc B panel (L3), mc x kc A block (L2) */
  int64_t kc_rm, mc_rm;   /* (optional) kc, mc for plain row-major A (unit column stride) when k > kc */
  tpu_host_gemm_ukr_fn ukr;
  tpu_host_gemm_ukr_a_fn ukr_a; /* (optional) A read in place: plain A (f32 kernels), or bf16 A (bf16 kernels) */
  int ukr_a_rm;                 /* ukr_a / ukr_a_bf16 need A's column stride 1 (they read bf16 k-pairs as words) */
  tpu_host_gemm_ukr_bf16_fn ukr_bf16, ukr_a_bf16; /* (optional) the direct bf16 store from registers */
  tpu_host_gemm_pack_fn pack_a; /* rows = mc: MR-high strips of A */
  tpu_host_gemm_pack_fn pack_b; /* rows = nc: NR-high strips of B^T */
  /* (optional, bf16 kernel) pack from f32 rounding each value to bf16 (the HI format) in one pass;
   * may flush f32 denormals to zero */
  tpu_host_gemm_pack_fn pack_a_hi, pack_b_hi;
  tpu_host_gemv_rows_fn gemv_rows;
  tpu_host_sdot_fn sdot;
  tpu_host_gemm_small_fn small;
  int small_beta0; /* small only with beta 0 (its write-back matches ukr's bits only then) */
  tpu_host_gemm_widen_fn widen_bf16;
} tpu_host_gemm_kernel_t;

extern const tpu_host_gemm_kernel_t tpu_host_sgemm_kernel_avx2, tpu_host_dgemm_kernel_avx2;
extern const tpu_host_gemm_kernel_t tpu_host_sgemm_kernel_avx512, tpu_host_dgemm_kernel_avx512;
extern const tpu_host_gemm_kernel_t tpu_host_sbgemm_kernel_avx512bf16;   /* bf16 pairs, f32 C, 14 x 32 */
extern const tpu_host_gemm_kernel_t tpu_host_sbgemm_kernel_avx512bf16_8; /* the same, 8 x 32 (m that 14 wastes) */

#endif /* TPURT_DRIVERS_HOST_GEMM_H_ */
