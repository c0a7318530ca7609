/* conv_avx512.c — the AVX-512F microkernel of the direct (padded-grid) convolution in conv.c.
 * Built with -mavx512f; call only after tpu_cpu_has_avx512f().
 *
 * tile (8, 48) row-major = sum_p ap[p*8 + i] * xb[voff[j / 16] + boff[p] + j % 16] for i < 8, j < 48:
 * 8 output channels times 3 runs of 16 grid positions (voff: where each run starts; 0, 16, 32 for 48
 * consecutive ones, or three output rows), 24 zmm accumulators. Row p of the implicit im2col matrix is
 * read in place at xb + boff[p] (unaligned), so nothing is packed. */
#include <immintrin.h>
#include <stdint.h>

#include "drivers/host/conv.h"

/* row i's lane vector j straight into y: yrow[i] + cy[j], clen[j] <= 16 lanes (masked; rows with yrow[i] NULL and
 * vectors with clen[j] 0 store nothing). Stores from the registers: reading a just-stored tile back in pieces
 * stalled on store forwarding (~20% of a 16-channel 8x8 convolution). */
static inline void dk_store(__m512 v, float* const* yrow, int i, const int64_t* cy, const int64_t* clen, int j) {
  if (!yrow[i] || clen[j] <= 0) return;
  _mm512_mask_storeu_ps(yrow[i] + cy[j], (__mmask16)(clen[j] >= 16 ? 0xffff : (1u << clen[j]) - 1u), v);
}

void tpu_host_conv_dk8x48_avx512(int64_t kc, const float* ap, const float* xb, const int64_t* boff,
                                 const int64_t* voff, float* tile, float* const* yrow, const int64_t* cy,
                                 const int64_t* clen) {
  __m512 c0[8], c1[8], c2[8];
  for (int i = 0; i < 8; ++i) c0[i] = c1[i] = c2[i] = _mm512_setzero_ps();
  const float *x0 = xb + voff[0], *x1 = xb + voff[1], *x2 = xb + voff[2];
  for (int64_t p = 0; p < kc; ++p) {
    const int64_t o = boff[p];
    const __m512 b0 = _mm512_loadu_ps(x0 + o), b1 = _mm512_loadu_ps(x1 + o), b2 = _mm512_loadu_ps(x2 + o);
    const float* a = ap + p * 8;
#define DK_ROW(i)                                    \
  do {                                               \
    const __m512 ai = _mm512_set1_ps(a[i]);          \
    c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);          \
    c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);          \
    c2[i] = _mm512_fmadd_ps(ai, b2, c2[i]);          \
  } while (0)
    DK_ROW(0); DK_ROW(1); DK_ROW(2); DK_ROW(3); DK_ROW(4); DK_ROW(5); DK_ROW(6); DK_ROW(7);
#undef DK_ROW
  }
  if (yrow) {
    for (int i = 0; i < 8; ++i) {
      dk_store(c0[i], yrow, i, cy, clen, 0);
      dk_store(c1[i], yrow, i, cy, clen, 1);
      dk_store(c2[i], yrow, i, cy, clen, 2);
    }
    return;
  }
  for (int i = 0; i < 8; ++i) {
    _mm512_storeu_ps(tile + i * 48, c0[i]);
    _mm512_storeu_ps(tile + i * 48 + 16, c1[i]);
    _mm512_storeu_ps(tile + i * 48 + 32, c2[i]);
  }
}

/* The same with 4 output channels x 96 positions (24 accumulators; for convolutions of <= 4 output channels per
 * group, where the 8-row tile computed half its rows for nothing). Per output the same sum in the same order. */
void tpu_host_conv_dk4x96_avx512(int64_t kc, const float* ap, const float* xb, const int64_t* boff,
                                 const int64_t* voff, float* tile, float* const* yrow, const int64_t* cy,
                                 const int64_t* clen) {
  __m512 c[4][6];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) c[i][j] = _mm512_setzero_ps();
  const float* xv[6];
  for (int j = 0; j < 6; ++j) xv[j] = xb + voff[j];
  for (int64_t p = 0; p < kc; ++p) {
    const int64_t o = boff[p];
    __m512 bv[6];
    for (int j = 0; j < 6; ++j) bv[j] = _mm512_loadu_ps(xv[j] + o);
    const float* a = ap + p * 4;
    for (int i = 0; i < 4; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      for (int j = 0; j < 6; ++j) c[i][j] = _mm512_fmadd_ps(ai, bv[j], c[i][j]);
    }
  }
  if (yrow) {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) dk_store(c[i][j], yrow, i, cy, clen, j);
    return;
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) _mm512_storeu_ps(tile + i * 96 + 16 * j, c[i][j]);
}

/* The gathered-operand microkernel of conv.c's "gk" paths (backward-weight, forward at any stride):
 * tile (8, 16*NG) (+)= sum_p A[aoff[p] + ash[i]] * B[boff[p] + bsh[j] + l] for i < 8, lane l < 16 of
 * column group j < NG. Rows are scalars broadcast from anywhere in A, column groups 16-float runs
 * from anywhere in B: the callers describe gathers (channels-last padded planes read at per-position
 * and per-tap offsets) with the tables instead of copying an im2col matrix. Fixed summation order
 * (p ascending), so results do not depend on the thread count. */
#define GK_BODY(NG)                                                                          \
  __m512 c[8][NG];                                                                           \
  for (int i = 0; i < 8; ++i)                                                                \
    for (int j = 0; j < NG; ++j) c[i][j] = acc ? _mm512_loadu_ps(tile + i * 48 + j * 16) : _mm512_setzero_ps(); \
  const float* r0 = A + ash[0]; const float* r1 = A + ash[1]; const float* r2 = A + ash[2];  \
  const float* r3 = A + ash[3]; const float* r4 = A + ash[4]; const float* r5 = A + ash[5];  \
  const float* r6 = A + ash[6]; const float* r7 = A + ash[7];                                \
  for (int64_t p = 0; p < kc; ++p) {                                                         \
    const float* b = B + boff[p];                                                            \
    const int64_t ao = aoff[p];                                                              \
    __m512 bv[NG];                                                                           \
    for (int j = 0; j < NG; ++j) bv[j] = _mm512_loadu_ps(b + bsh[j]);                        \
    __m512 a;                                                                                \
    a = _mm512_set1_ps(r0[ao]); for (int j = 0; j < NG; ++j) c[0][j] = _mm512_fmadd_ps(a, bv[j], c[0][j]); \
    a = _mm512_set1_ps(r1[ao]); for (int j = 0; j < NG; ++j) c[1][j] = _mm512_fmadd_ps(a, bv[j], c[1][j]); \
    a = _mm512_set1_ps(r2[ao]); for (int j = 0; j < NG; ++j) c[2][j] = _mm512_fmadd_ps(a, bv[j], c[2][j]); \
    a = _mm512_set1_ps(r3[ao]); for (int j = 0; j < NG; ++j) c[3][j] = _mm512_fmadd_ps(a, bv[j], c[3][j]); \
    a = _mm512_set1_ps(r4[ao]); for (int j = 0; j < NG; ++j) c[4][j] = _mm512_fmadd_ps(a, bv[j], c[4][j]); \
    a = _mm512_set1_ps(r5[ao]); for (int j = 0; j < NG; ++j) c[5][j] = _mm512_fmadd_ps(a, bv[j], c[5][j]); \
    a = _mm512_set1_ps(r6[ao]); for (int j = 0; j < NG; ++j) c[6][j] = _mm512_fmadd_ps(a, bv[j], c[6][j]); \
    a = _mm512_set1_ps(r7[ao]); for (int j = 0; j < NG; ++j) c[7][j] = _mm512_fmadd_ps(a, bv[j], c[7][j]); \
  }                                                                                          \
  for (int i = 0; i < 8; ++i)                                                                \
    for (int j = 0; j < NG; ++j) _mm512_storeu_ps(tile + i * 48 + j * 16, c[i][j]);

static void gk_1(int64_t kc, const float* A, const int64_t* aoff, const int64_t* ash, const float* B,
                 const int64_t* boff, const int64_t* bsh, float* tile, int acc) { GK_BODY(1) }
static void gk_2(int64_t kc, const float* A, const int64_t* aoff, const int64_t* ash, const float* B,
                 const int64_t* boff, const int64_t* bsh, float* tile, int acc) { GK_BODY(2) }
static void gk_3(int64_t kc, const float* A, const int64_t* aoff, const int64_t* ash, const float* B,
                 const int64_t* boff, const int64_t* bsh, float* tile, int acc) { GK_BODY(3) }
#undef GK_BODY

void tpu_host_conv_gk_avx512(int ng, int64_t kc, const float* A, const int64_t* aoff, const int64_t* ash,
                             const float* B, const int64_t* boff, const int64_t* bsh, float* tile, int acc) {
  if (ng == 1) gk_1(kc, A, aoff, ash, B, boff, bsh, tile, acc);
  else if (ng == 2) gk_2(kc, A, aoff, ash, B, boff, bsh, tile, acc);
  else gk_3(kc, A, aoff, ash, B, boff, bsh, tile, acc);
}

/* 16 x 16 transpose of 32-bit words in registers: four butterfly levels (distance 8, 4, 2, 1), each
 * swapping the off-diagonal d x d blocks of every 2d x 2d block (two two-source permutes per row pair). */
/* level L (distance d = 8 >> L): lane k of the low row takes (k & d) ? hi[k - d] : lo[k], of the high row
 * (k & d) ? hi[k] : lo[k + d] (indices >= 16 select the second source) */
static const int32_t tr_idx[4][2][16] = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}, {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}, {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}, {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}, {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}}};
static inline void tr16_epi32(__m512i r[16]) {
#define TR_LEVEL(L, d)                                                                        \
  do {                                                                                        \
    const __m512i xa = _mm512_loadu_si512((const void*)tr_idx[L][0]);                          \
    const __m512i xb = _mm512_loadu_si512((const void*)tr_idx[L][1]);                          \
    for (int i = 0; i < 16; ++i) {                                                            \
      if (i & d) continue;                                                                    \
      const __m512i lo = r[i], hi = r[i + d];                                                 \
      r[i] = _mm512_permutex2var_epi32(lo, xa, hi);                                           \
      r[i + d] = _mm512_permutex2var_epi32(lo, xb, hi);                                       \
    }                                                                                         \
  } while (0)
  TR_LEVEL(0, 8); TR_LEVEL(1, 4); TR_LEVEL(2, 2); TR_LEVEL(3, 1);
#undef TR_LEVEL
}

void tpu_host_conv_tr16_avx512(const float* const* src, float* const* dst) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512((const void*)src[i]);
  tr16_epi32(r);
  for (int j = 0; j < 16; ++j) _mm512_storeu_si512((void*)dst[j], r[j]);
}

void tpu_host_conv_tr16_pairs_avx512(int np, const uint16_t* const* src, uint16_t* const* dst) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) {
    if (i >= np) { r[i] = _mm512_setzero_si512(); continue; }
    const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(const void*)src[2 * i]));
    const __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(const void*)src[2 * i + 1]));
    r[i] = _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
  }
  tr16_epi32(r);
  const __mmask16 m = (__mmask16)(np >= 16 ? 0xFFFF : (1u << np) - 1);
  for (int j = 0; j < 16; ++j) _mm512_mask_storeu_epi32((void*)dst[j], m, r[j]);
}

/* The small-channel backward-weight kernel of conv.c (conv_dw_run): out[r * 9 + k] = sum over rows i < nrows,
 * lanes j < W of g_r[grow[i] + j] * x[xrow[i] + shift[k] + j] for r < 2, k < 9. The last vector of a row is
 * masked (zero lanes read nothing), so only output positions are summed: a padding position never multiplies
 * a zero by an inf. 18 zmm accumulators per lane, reduced in a fixed order at the end. */
void tpu_host_conv_dw2x9_avx512(int64_t nrows, const int64_t* grow, const int64_t* xrow, int64_t W, const float* g0,
                                const float* g1, const float* x, const int64_t* shift, float* out) {
  /* named accumulators: as arrays GCC kept them on the stack across rows (a load and a store each per row) */
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a04 = a00, a05 = a00, a06 = a00, a07 = a00,
         a08 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00, a14 = a00, a15 = a00, a16 = a00, a17 = a00, a18 = a00;
  const int64_t s0 = shift[0], s1 = shift[1], s2 = shift[2], s3 = shift[3], s4 = shift[4], s5 = shift[5],
                s6 = shift[6], s7 = shift[7], s8 = shift[8];
  const int64_t nv = (W + 15) / 16, n = nrows * nv; /* (row, vector) pairs in one loop */
  const __mmask16 mlast = (__mmask16)(W % 16 ? (1u << (W % 16)) - 1u : 0xffffu);
  for (int64_t t = 0, i = 0, j = 0; t < n; ++t) {
    const __mmask16 m = j == nv - 1 ? mlast : (__mmask16)0xffff;
    const int64_t go = grow[i] + 16 * j;
    const float* xj = x + xrow[i] + 16 * j;
    const __m512 v0 = _mm512_maskz_loadu_ps(m, g0 + go), v1 = _mm512_maskz_loadu_ps(m, g1 + go);
    __m512 xv;
#define DW_TAP(k, s)                           \
  xv = _mm512_maskz_loadu_ps(m, xj + (s));     \
  a0##k = _mm512_fmadd_ps(v0, xv, a0##k);      \
  a1##k = _mm512_fmadd_ps(v1, xv, a1##k);
    DW_TAP(0, s0) DW_TAP(1, s1) DW_TAP(2, s2) DW_TAP(3, s3) DW_TAP(4, s4) DW_TAP(5, s5) DW_TAP(6, s6)
    DW_TAP(7, s7) DW_TAP(8, s8)
#undef DW_TAP
    if (++j == nv) { j = 0; ++i; }
  }
  out[0] = _mm512_reduce_add_ps(a00); out[1] = _mm512_reduce_add_ps(a01); out[2] = _mm512_reduce_add_ps(a02);
  out[3] = _mm512_reduce_add_ps(a03); out[4] = _mm512_reduce_add_ps(a04); out[5] = _mm512_reduce_add_ps(a05);
  out[6] = _mm512_reduce_add_ps(a06); out[7] = _mm512_reduce_add_ps(a07); out[8] = _mm512_reduce_add_ps(a08);
  out[9] = _mm512_reduce_add_ps(a10); out[10] = _mm512_reduce_add_ps(a11); out[11] = _mm512_reduce_add_ps(a12);
  out[12] = _mm512_reduce_add_ps(a13); out[13] = _mm512_reduce_add_ps(a14); out[14] = _mm512_reduce_add_ps(a15);
  out[15] = _mm512_reduce_add_ps(a16); out[16] = _mm512_reduce_add_ps(a17); out[17] = _mm512_reduce_add_ps(a18);
}
