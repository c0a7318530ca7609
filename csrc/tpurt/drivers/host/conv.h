/* conv.h — convolution kernels of the host driver (internal).
 *
 * Three kernels share one geometry (canonical channels-first, 1 to 3 spatial dims):
 *   forward     (x [N, C, *S], w [O, C/G, *K])   -> y  [N, O, *Q]      TPU_IR_CONV
 *   bwd_input   (gy [N, O, *Q], w [O, C/G, *K])  -> gx [N, C, *S]      TPU_IR_CUSTOM_CONV_BWD_INPUT
 *   bwd_weight  (x [N, C, *S], gy [N, O, *Q])    -> gw [O, C/G, *K]    TPU_IR_CUSTOM_CONV_BWD_WEIGHT
 * with input coordinate i = q * stride - padding + k * dilation per spatial dim (out-of-range
 * i reads zero / is dropped). Attributes: a[0] stride, a[1] padding, a[2] dilation (one per
 * spatial dim); groups in i0 (CONV) or i1 (CUSTOM). The result type fixes the third shape, so
 * bwd_input also serves transposed convolutions (output_padding is just a larger gx).
 *
 * Every view may have any strides (channels_last included); f64, or an f32 result from f32,
 * bf16 or f16 operands (widened exactly while im2col, weight packing and the GEMM panels copy
 * them; f32 accumulation). The optimized kernels are im2col + packed GEMM over tiles of output
 * positions (memory bounded by the tile); the `_ref` twins are direct loops with a double
 * accumulator. Legend: N batch, C input channels, O output channels, G groups, S input
 * spatial, K kernel spatial, Q output spatial, KK = prod(K), P = prod(Q). */
#ifndef TPURT_DRIVERS_HOST_CONV_H_
#define TPURT_DRIVERS_HOST_CONV_H_

#include "drivers/host/host.h"

typedef enum tpu_host_conv_kind_e {
  TPU_HOST_CONV_FWD = 0,
  TPU_HOST_CONV_BWD_INPUT,
  TPU_HOST_CONV_BWD_WEIGHT,
  TPU_HOST_CONV_KIND_COUNT
} tpu_host_conv_kind_t;

/* a: the two operands in the order above; stride/padding/dilation: nsp values each. */
tpu_status_t tpu_host_conv_run(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                               const int64_t* dilation, int64_t groups, const tpu_host_view_t* a,
                               const tpu_host_view_t* b, const tpu_host_view_t* out);
/* Same, with the f32 GEMMs at `precision` (tpu_ir_precision_t; gemm.h tpu_host_sgemm_ex). An f32
 * output may have f32, bf16 or f16 operands (read and widened exactly in place: no converted copy). */
tpu_status_t tpu_host_conv_run_prec(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                                    const int64_t* dilation, int64_t groups, int precision,
                                    const tpu_host_view_t* a, const tpu_host_view_t* b,
                                    const tpu_host_view_t* out);
tpu_status_t tpu_host_conv_run_ref(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                                   const int64_t* dilation, int64_t groups, const tpu_host_view_t* a,
                                   const tpu_host_view_t* b, const tpu_host_view_t* out);
/* Testing hook: forces tiles of `pt` output positions (0 = automatic); returns the previous value.
 * Not thread-safe against running kernels. */
int64_t tpu_host_conv_set_tile(int64_t pt);
/* Testing hook: forces sample groups of `ns` samples wherever outputs are small enough to group
 * (0 = automatic); returns the previous value. Not thread-safe against running kernels. */
int64_t tpu_host_conv_set_group(int64_t ns);
/* Testing hook: 0 turns off running stride-1 backward-input as a forward convolution with the
 * flipped, transposed weight (1, the default: on where groups == 1 and the padding allows);
 * returns the previous value. Not thread-safe against running kernels. */
int tpu_host_conv_set_flip(int on);
/* Testing hook: 0 turns off the direct padded-grid kernel for stride-1 forward convolutions
 * (conv.c; 1, the default: used where the CPU has AVX-512F and most of the grid is output);
 * returns the previous value. Not thread-safe against running kernels. */
int tpu_host_conv_set_direct(int on);
/* Testing hook: the gathered-operand paths (conv.c "gk": backward-weight, and forward convolutions
 * the padded-grid kernel does not take) 0 off, 1 where they pay (default), 2 wherever they apply;
 * also off while tpu_host_conv_set_direct(0). Returns the previous value. Not thread-safe. */
int tpu_host_conv_set_gk(int mode);
/* conv_avx512.c: tile (8, 48) = sum_p ap[p*8 + i] * xb[voff[j / 16] + boff[p] + j % 16] (3 runs of 16 positions
 * starting at voff[0..2]; call only with AVX-512F). With yrow non-NULL the tile is not written: row i's run j goes
 * to yrow[i] + cy[j], its first clen[j] lanes (rows with yrow[i] NULL and runs with clen[j] 0 are dropped) */
void tpu_host_conv_dk8x48_avx512(int64_t kc, const float* ap, const float* xb, const int64_t* boff,
                                 const int64_t* voff, float* tile, float* const* yrow, const int64_t* cy,
                                 const int64_t* clen);
/* conv_avx512.c: the same as a (4, 96) tile (6 runs, voff[0..5]), ap holding 4 rows per p (<= 4 output channels) */
void tpu_host_conv_dk4x96_avx512(int64_t kc, const float* ap, const float* xb, const int64_t* boff,
                                 const int64_t* voff, float* tile, float* const* yrow, const int64_t* cy,
                                 const int64_t* clen);
/* conv_avx512.c: tile (8, 16*ng) (+= when acc) = sum_p A[aoff[p] + ash[i]] * B[boff[p] + bsh[j] + l],
 * ng in 1..3, tile rows 48 floats apart (call only with AVX-512F) */
void tpu_host_conv_gk_avx512(int ng, int64_t kc, const float* A, const int64_t* aoff, const int64_t* ash,
                             const float* B, const int64_t* boff, const int64_t* bsh, float* tile, int acc);
/* conv_avx512.c: out[r * 9 + k] = sum_i sum_{j < W} g_r[grow[i] + j] x[xrow[i] + shift[k] + j], r < 2, k < 9
 * (rows of W output positions; masked tails; AVX-512F) */
void tpu_host_conv_dw2x9_avx512(int64_t nrows, const int64_t* grow, const int64_t* xrow, int64_t W, const float* g0,
                                const float* g1, const float* x, const int64_t* shift, float* out);
/* conv_avx512.c: dst[j][i] = src[i][j] for i, j < 16 (32-bit elements; rows anywhere; AVX-512F) */
void tpu_host_conv_tr16_avx512(const float* const* src, float* const* dst);
/* conv_avx512.c: channel rows to channels-last pairs: dst[j][2 i + e] = src[2 i + e][j] for i < np <= 16, j < 16,
 * e < 2 (16-bit elements: 2 np source rows of 16, 16 destination rows of 2 np; AVX-512F) */
void tpu_host_conv_tr16_pairs_avx512(int np, const uint16_t* const* src, uint16_t* const* dst);
/* conv_avx512bf16.c: the same tile from bf16 operands stored in pairs along the reduction: tile (8, 16*ng)
 * (+= when acc) = sum_p sum_e A[aoff[p] + ash[i] + e] * B[boff[p] + bsh[j] + 2 l + e] (offsets in bf16
 * elements, `vdpbf16ps`, f32 lanes; call only with AVX512-BF16) */
void tpu_host_conv_gk_bf16_avx512bf16(int ng, int64_t np, const uint16_t* A, const int64_t* aoff, const int64_t* ash,
                                      const uint16_t* B, const int64_t* boff, const int64_t* bsh, float* tile,
                                      int acc);
/* conv_avx512bf16.c: the same with 12 rows and ng 1-2 (tile rows 32 floats apart; no accumulate) */
void tpu_host_conv_gk12_bf16_avx512bf16(int ng, int64_t np, const uint16_t* A, const int64_t* aoff,
                                        const int64_t* ash, const uint16_t* B, const int64_t* boff,
                                        const int64_t* bsh, float* tile);
/* TPU_IR_CUSTOM entry for the two backward targets (called by tpu_host_k_custom). */
tpu_status_t tpu_host_k_conv_custom(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out);

#endif /* TPURT_DRIVERS_HOST_CONV_H_ */
