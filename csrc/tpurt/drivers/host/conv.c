/* conv.c — convolution kernels of the host driver: forward, backward-input, backward-weight
 * (see conv.h). Spatial dims are normalized to 3 (missing ones: size 1, stride 1, no padding). */
#include <stdlib.h>
#include <string.h>

#include "drivers/host/conv.h"
#include "drivers/host/gemm.h"

typedef struct conv_geo_s {
  int64_t N, C, O, G, Cg, Og, KK, KcG, P;
  int64_t S[3], K[3], Q[3], st[3], pd[3], dl[3];
  int64_t xs[5], ws[5], ys[5]; /* strides of x-like (N, C, *S), w-like (O, Cg, *K), y-like (N, O, *Q) */
  char *xd, *wd, *yd;
  int64_t Pt, ntiles;          /* output positions per tile, tiles per sample */
  /* y_direct: y's spatial dims flatten to one stride yps, so GEMMs read/write y in place;
   * x_direct: also a 1x1, stride-1, unpadded conv whose x flattens (stride xps): x is its own
   * im2col matrix (C, P). */
  int y_direct, x_direct;
  int64_t yps, xps;
  /* cl: x has unit channel stride (channels_last): im2col rows are output positions and
   * columns (group, kernel offset, channel), so gathers copy runs of channels */
  int cl;
  /* operand dtypes (x, w, gy; the kernel's CT for the output) and element sizes; precision
   * (tpu_ir_precision_t) of the f32 GEMMs */
  int xdt, wdt, ydt;
  int64_t xes, yes;
  int prec;
  int64_t ns;                  /* samples per work unit (> 1: sample groups, see conv_impl.h) */
} conv_geo_t;

/* A tile of output positions [p0, p0 + pt): per position the input base coordinate
 * (q * stride - padding) per spatial dim and the y-view offset of its spatial part. */
typedef struct conv_tile_s { int64_t p0, pt; int64_t *b0, *b1, *b2, *yoff; } conv_tile_t;

/* Short copies of operand rows (4-16 floats) as fixed-size moves: gcc turns copy loops of unknown length into
 * memcpy calls, whose call and size dispatch cost more than such a copy. Not for reading a tile the microkernels
 * just stored with zmm stores: these 16-byte pieces stall on store forwarding there (memcpy's zmm loads do not) */
static inline void conv_copy(void* dst, const void* src, size_t nb) {
  if (nb > 256) { memcpy(dst, src, nb); return; }
  char* d = dst;
  const char* s = src;
  for (; nb >= 64; nb -= 64, d += 64, s += 64) memcpy(d, s, 64);
  if (nb & 32) { memcpy(d, s, 32); d += 32; s += 32; }
  if (nb & 16) { memcpy(d, s, 16); d += 16; s += 16; }
  if (nb & 8) { memcpy(d, s, 8); d += 8; s += 8; }
  if (nb & 4) { memcpy(d, s, 4); d += 4; s += 4; }
  if (nb & 2) { memcpy(d, s, 2); d += 2; s += 2; }
  if (nb & 1) *d = *s;
}

/* temporaries come from the GEMM's buffer cache: no fresh page faults for every call */
static void* conv_alloc(size_t bytes) { return tpu_host_scratch_alloc(bytes); }
static void conv_free(void* p) { tpu_host_scratch_free(p); }
static int conv_tile_alloc(conv_tile_t* t, int64_t cap) {
  t->b0 = conv_alloc((size_t)(4 * cap) * sizeof(int64_t));
  if (!t->b0) return -1;
  t->b1 = t->b0 + cap; t->b2 = t->b1 + cap; t->yoff = t->b2 + cap;
  return 0;
}
static void conv_tile_free(conv_tile_t* t) { conv_free(t->b0); t->b0 = NULL; }
static void conv_tile_set(const conv_geo_t* g, conv_tile_t* t, int64_t ti) {
  int64_t p0 = ti * g->Pt;
  t->p0 = p0;
  t->pt = TPU_MIN(g->Pt, g->P - p0);
  if (t->pt <= 0) return;
  int64_t q0 = p0 / (g->Q[1] * g->Q[2]), q1 = (p0 / g->Q[2]) % g->Q[1], q2 = p0 % g->Q[2];
  for (int64_t j = 0; j < t->pt; ++j) { /* position p0 + j by counters: divisions cost more than the rest */
    t->b0[j] = q0 * g->st[0] - g->pd[0];
    t->b1[j] = q1 * g->st[1] - g->pd[1];
    t->b2[j] = q2 * g->st[2] - g->pd[2];
    t->yoff[j] = q0 * g->ys[2] + q1 * g->ys[3] + q2 * g->ys[4];
    if (++q2 == g->Q[2]) { q2 = 0; if (++q1 == g->Q[1]) { q1 = 0; ++q0; } }
  }
}

/* Output positions q of the innermost dim whose input i = q * st - pd + off is in [0, S):
 * [*lo, *hi), clamped to [0, Q). */
static void conv_inner_range(const conv_geo_t* g, int64_t off, int64_t* lo, int64_t* hi) {
  int64_t a = g->pd[2] - off, b = g->S[2] - 1 + g->pd[2] - off;
  *lo = a <= 0 ? 0 : (a + g->st[2] - 1) / g->st[2];
  *hi = b < 0 ? 0 : TPU_MIN(g->Q[2], b / g->st[2] + 1);
  if (*lo > *hi) *lo = *hi;
}

/* 1 if the 3 spatial dims (sizes sz, strides st) are one strided run; its stride in *out */
static int conv_flat(const int64_t* sz, const int64_t* st, int64_t* out) {
  int64_t step = st[2];
  if (sz[1] > 1 && st[1] != step * sz[2]) return 0;
  if (sz[0] > 1 && st[0] != (sz[1] > 1 ? st[1] * sz[1] : step * sz[2])) return 0;
  if (sz[2] == 1 && (sz[1] > 1 || sz[0] > 1)) return 0; /* keep it simple: innermost must count */
  *out = step;
  return 1;
}

static tpu_status_t conv_geo(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                             const int64_t* dilation, int64_t groups, const tpu_host_view_t* a,
                             const tpu_host_view_t* b, const tpu_host_view_t* out, conv_geo_t* g) {
  const tpu_host_view_t *x, *w, *y;
  switch (kind) {
    case TPU_HOST_CONV_FWD: x = a; w = b; y = out; break;
    case TPU_HOST_CONV_BWD_INPUT: y = a; w = b; x = out; break;
    case TPU_HOST_CONV_BWD_WEIGHT: x = a; y = b; w = out; break;
    default: return TPU_ERR(INTERNAL, "host: bad convolution kind %d", kind);
  }
  if (nsp < 1 || nsp > 3) return TPU_ERR(UNSUPPORTED, "host: convolution with %d spatial dims", nsp);
  if (x->rank != nsp + 2 || w->rank != nsp + 2 || y->rank != nsp + 2)
    return TPU_ERR(INTERNAL, "host: convolution operand ranks do not match %d spatial dims", nsp);
  memset(g, 0, sizeof(*g));
  g->N = x->sizes[0]; g->C = x->sizes[1]; g->O = w->sizes[0]; g->Cg = w->sizes[1]; g->G = groups;
  if (groups < 1 || g->O % groups || g->C != g->Cg * groups || y->sizes[1] != g->O || y->sizes[0] != g->N)
    return TPU_ERR(INTERNAL, "host: convolution shapes do not match (groups %lld)", (long long)groups);
  g->Og = g->O / groups;
  /* real spatial dims fill the LAST slots, so slot 2 is always the innermost one */
  for (int s = 0; s < 3; ++s) {
    int d = s - (3 - nsp), in = d >= 0;
    g->S[s] = in ? x->sizes[2 + d] : 1;
    g->K[s] = in ? w->sizes[2 + d] : 1;
    g->Q[s] = in ? y->sizes[2 + d] : 1;
    g->st[s] = in ? stride[d] : 1;
    g->pd[s] = in ? padding[d] : 0;
    g->dl[s] = in ? dilation[d] : 1;
    if (g->st[s] < 1 || g->dl[s] < 1)
      return TPU_ERR(INTERNAL, "host: convolution stride and dilation must be positive");
    g->xs[2 + s] = in ? x->strides[2 + d] : 0;
    g->ws[2 + s] = in ? w->strides[2 + d] : 0;
    g->ys[2 + s] = in ? y->strides[2 + d] : 0;
  }
  for (int d = 0; d < 2; ++d) { g->xs[d] = x->strides[d]; g->ws[d] = w->strides[d]; g->ys[d] = y->strides[d]; }
  g->xd = x->data; g->wd = w->data; g->yd = y->data;
  g->xdt = x->dtype; g->wdt = w->dtype; g->ydt = y->dtype;
  g->xes = (int64_t)tpu_dtype_size(x->dtype); g->yes = (int64_t)tpu_dtype_size(y->dtype);
  g->KK = g->K[0] * g->K[1] * g->K[2];
  g->KcG = g->Cg * g->KK;
  g->P = g->Q[0] * g->Q[1] * g->Q[2];
  g->y_direct = conv_flat(g->Q, g->ys + 2, &g->yps);
  int unit = g->KK == 1;
  for (int s = 0; s < 3; ++s) unit &= g->st[s] == 1 && g->pd[s] == 0 && g->S[s] == g->Q[s];
  g->x_direct = unit && conv_flat(g->S, g->xs + 2, &g->xps);
  g->cl = !g->x_direct && g->xs[1] == 1 && g->C > 1;
  return TPU_OK;
}

/* Tile size: the im2col tile (C*KK, Pt) stays within ~4 MiB; forward splits further so
 * every pool thread gets work. */
static int64_t g_forced_tile, g_forced_group;
static int g_flip_bwd_input = 1;
int tpu_host_conv_set_flip(int on) {
  int old = g_flip_bwd_input;
  g_flip_bwd_input = on != 0;
  return old;
}
int64_t tpu_host_conv_set_group(int64_t ns) {
  int64_t old = g_forced_group;
  g_forced_group = ns > 0 ? ns : 0;
  return old;
}
int64_t tpu_host_conv_set_tile(int64_t pt) {
  int64_t old = g_forced_tile;
  g_forced_tile = pt > 0 ? pt : 0;
  return old;
}

static void conv_plan(int kind, conv_geo_t* g, size_t elem) {
  int64_t rows = TPU_MAX((int64_t)1, g->C * g->KK);
  int64_t pt = TPU_MAX((int64_t)16, (int64_t)((4u << 20) / (elem * (size_t)rows)));
  if (kind != TPU_HOST_CONV_BWD_INPUT && g->N > 0) {
    int64_t want = (tpu_pool_num_threads() + g->N - 1) / g->N; /* tiles per sample */
    if (want > 1) pt = TPU_MIN(pt, TPU_MAX((int64_t)64, (g->P + want - 1) / want));
  }
  if (g_forced_tile) pt = g_forced_tile;
  g->Pt = TPU_MAX((int64_t)1, TPU_MIN(pt, g->P));
  g->ntiles = g->P > 0 ? (g->P + g->Pt - 1) / g->Pt : 0;
  /* Small outputs (a whole sample in one tile of < 256 positions): group samples so one GEMM
   * gets ~256 columns, within the im2col budget, keeping a unit per thread. */
  g->ns = 1;
  if (g->ntiles == 1 && g->P < 256 && g->N > 1 && !g->cl && (g_forced_group || !g_forced_tile)) {
    int64_t by_mem = (int64_t)((4u << 20) / (elem * (size_t)rows * (size_t)g->P));
    int64_t by_cols = (256 + g->P - 1) / g->P;
    int64_t nth = tpu_pool_num_threads();
    int64_t by_thr = (g->N + nth - 1) / TPU_MAX(nth, (int64_t)1);
    g->ns = TPU_MAX((int64_t)1, TPU_MIN(by_mem, TPU_MIN(by_cols, by_thr)));
    if (g_forced_group) g->ns = TPU_MIN(g_forced_group, g->N);
  }
}

/* 1 if the weight-like view (O, Cg, *K) is contiguous (one run, spatial dims innermost) */
static int conv_w_contig(const conv_geo_t* g) {
  if (!((g->O <= 1 || g->ws[0] == g->Cg * g->KK) && (g->Cg <= 1 || g->ws[1] == g->KK))) return 0;
  int64_t step = 1;
  for (int sl = 2; sl >= 0; --sl) {
    if (g->K[sl] > 1 && g->ws[2 + sl] != step) return 0;
    step *= g->K[sl];
  }
  return 1;
}
enum { BW_SUM_BLOCK = 4096 }; /* conv_impl.h bw_sum_worker */

/* CGEMMX(a_dtype, b_dtype, precision, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, c_cs):
 * C = A @ B + beta C with A, B given as byte pointers in their dtypes. */
#define CT float
#define CSUF f32
#define CDT TPU_DTYPE_F32
#define CGEMMX(adt, bdt, prec, m, n, k, a, ars, acs, b, brs, bcs, beta, c, crs, ccs) \
  tpu_host_sgemm_ex(adt, bdt, prec, m, n, k, 1.0f, a, ars, acs, b, brs, bcs, beta, c, crs, ccs)
#include "drivers/host/conv_impl.h"
#undef CT
#undef CSUF
#undef CDT
#undef CGEMMX
#define CT double
#define CSUF f64
#define CDT TPU_DTYPE_F64
#define CGEMMX(adt, bdt, prec, m, n, k, a, ars, acs, b, brs, bcs, beta, c, crs, ccs) \
  ((void)(adt), (void)(bdt), (void)(prec), tpu_host_dgemm(m, n, k, 1.0, (const double*)(const void*)(a), ars, acs, (const double*)(const void*)(b), brs, \
                 bcs, beta, c, crs, ccs))
#include "drivers/host/conv_impl.h"
#undef CT
#undef CSUF
#undef CDT
#undef CGEMMX

/* ---- direct convolution on the padded grid (stride 1, f32 result, AVX-512F).
 * Each input channel of a unit of ns samples is copied once into a zero-padded plane
 * xpad (C, L): sample s, padded position t at s * Lg + t (Lg = prod(S + 2p)). The output is
 * computed on the same grid, so row (c, kk) of the implicit im2col matrix is the plane read at
 * a fixed shift (c * L + sum_d k_d dl_d * stride_of_d): the microkernel reads it in place
 * (no im2col, no B packing) and positions that are not outputs (the padding rows/columns) are
 * computed and dropped. Worth it while most grid positions are outputs (>= 3/4; >= 1/2 with <= 4 output
 * channels per group, the 4 x 96 tile). */
enum { DK_TILE = 384 }; /* tile (mr, nr): (8, 48), or (4, 96) where a group has <= 4 output channels */
typedef struct {
  const conv_geo_t* g;
  int64_t mr, nr;    /* tile rows (output channels) and columns (grid positions) */
  float* wk;         /* (G, nob, KcG, mr): weights packed in mr-channel blocks, zero past Og */
  int64_t* boff;     /* (KcG): offset of im2col row (c, kk) in xpad, from the group's channel 0 */
  int64_t* yoff;     /* (nstrips * nr): y offset of grid position n of a unit (-1: not an output) */
  int64_t* runs;     /* (j0, len) per run of a strip's outputs whose y offsets step by ys[4] */
  int64_t* rstart;   /* (nstrips + 1): strip st's runs are rstart[st] .. rstart[st + 1] - 1 */
  /* rows: the tile's nr / 16 lane vectors are runs of <= 16 outputs along output rows ("chunks", cps per
   * sample), not consecutive grid positions, so no padding column or row is computed (a 16-wide map fills
   * every lane); chunk c starts at grid offset coff[c] and stores clen[c] outputs at y offset cy[c] */
  int rows;
  int64_t cps, *coff, *cy, *clen;
  /* shifted (with rows): the innermost dim is not padded but copied K2 times, copy k2 shifted by k2 dl2 - pd2
   * (zeros past the row ends), so the grid's innermost size is Q2 and tap (k0, k1, k2) reads copy k2 at a
   * shift over the outer dims only: a sample's outputs of one q0 are consecutive grid positions, and chunks
   * of 16 of them fill every lane on 8x8 / 4x4 maps (64% / 44% of the padded grid's positions are outputs).
   * Chunks then run along the flattened (q1, q2) (y flattens there) */
  int shifted;
  int64_t Sp[3], Lg, L, Lc, ns, nunits, nob; /* Lc: one channel's planes (L, or K2 copies of L) */
  volatile int oom;
} conv_dk_job_t;

static int conv_f32_operand(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16;
}

static int g_direct = 1;
int tpu_host_conv_set_direct(int on) {
  int old = g_direct;
  g_direct = on != 0;
  return old;
}

/* bf16 x bf16 products may take vdpbf16ps: the CPU has it and the GEMM's setting allows it (the GEMM ISA cap
 * and TORCH_TPU_GEMM_BF16=0 keep the widening kernels here too) */
static int gk_bf16_ok(void) {
  return tpu_cpu_has_avx512bf16() && strstr(tpu_host_gemm_isa_name(), "avx512bf16") != NULL;
}

/* 1 where the shifted planes (conv_dk_job_t.shifted) fill more lanes than output rows and than the padded grid:
 * (q1, q2) flattens in y (or Q1 = 1) and Q1 Q2 / (16 ceil(Q1 Q2 / 16)) beats Q2 / (16 ceil(Q2 / 16)) and P / grid.
 * Only up to 8 output channels per group (one tile row block): measured, 16 channels on 8x8 maps ran slower than
 * the gk kernel (38 vs 34 us; the K2 plane copies cost ~1/4 of the call), <= 8 faster (8 -> 16 8x8: 33 -> 25 us) */
static int conv_dk_shifted(const conv_geo_t* g) {
  if (g->Og > 8 || (g->Q[1] > 1 && g->ys[3] != g->Q[2] * g->ys[4])) return 0;
  const int64_t f = g->Q[1] * g->Q[2], f16 = (f + 15) / 16 * 16, q16 = (g->Q[2] + 15) / 16 * 16;
  int64_t grid = 1;
  for (int s = 0; s < 3; ++s) grid *= g->S[s] + 2 * g->pd[s];
  return f * q16 > g->Q[2] * f16 && f * grid > g->P * f16;
}

static int conv_direct_ok(int kind, const conv_geo_t* g) {
  /* f32 products of the operands as they are: f32 at HIGHEST, or bf16 / f16 operands (widened exactly while the
   * planes and the weight pack are copied; their products are exact in f32 above f32's normal range. Unlike
   * vdpbf16ps (the gk kernel's, from 16 channels), denormal products and operands are kept, not flushed) */
  if (kind != TPU_HOST_CONV_FWD || !g_direct || g->x_direct || g->ydt != TPU_DTYPE_F32 ||
      !conv_f32_operand(g->xdt) || !conv_f32_operand(g->wdt))
    return 0;
  const int bf = g->xdt == TPU_DTYPE_BF16 && g->wdt == TPU_DTYPE_BF16;
  if (g->prec != TPU_IR_PRECISION_HIGHEST && !bf) return 0;
  /* bf16 x bf16 from 16 output channels per group: the gk kernel's vdpbf16ps (2 products a lane) fills its
   * 16-channel lanes; below, they idle and the f32 tile wins (8 channels on 16x16: 57 -> 32 us, 16: 82 -> 108).
   * Without vdpbf16ps gk widens bf16 as this kernel does: the f32 rule applies */
  if (bf && g->Og >= 16 && gk_bf16_ok()) return 0;
  if (!tpu_cpu_has_avx512f() || strncmp(tpu_host_gemm_isa_name(), "avx512", 6) != 0) return 0;
  int64_t grid = 1;
  for (int s = 0; s < 3; ++s) {
    if (g->st[s] != 1) return 0;
    grid *= g->S[s] + 2 * g->pd[s];
  }
  /* measured: 16x16 and larger maps with pad 1 win, 8x8 (64% outputs) loses; with <= 4 output channels (the
   * 4 x 96 tile; im2col + GEMM then runs a 4-row GEMM) 8x8 wins */
  if (4 * g->P >= 3 * grid || (g->Og <= 4 && 2 * g->P >= grid)) return 1;
  /* the shifted planes by the same rule, their lanes' share of outputs for the grid's */
  const int64_t f = g->Q[1] * g->Q[2], f16 = (f + 15) / 16 * 16;
  /* (not bf16 x bf16 where the gk kernel has vdpbf16ps: measured, 8 channels on 8x8 / 4x4 maps ran faster there) */
  if (bf && gk_bf16_ok()) return 0;
  return conv_dk_shifted(g) && (4 * f >= 3 * f16 || (g->Og <= 4 && 2 * f >= f16));
}

/* The padded grid (sizes Sp = S + 2 pd) shared by the direct forward and the small-channel weight gradient:
 * x of sample n, channel c into its zero-padded plane dp (Lg positions; the caller zeroes it), and the grid
 * offset of every tap kk < KK (sum_d k_d dl_d * pitch_d) */
static void conv_grid_fill(const conv_geo_t* g, const int64_t* Sp, int64_t n, int64_t c, float* dp) {
  const int64_t xo = n * g->xs[0] + c * g->xs[1];
  dp += (g->pd[0] * Sp[1] + g->pd[1]) * Sp[2] + g->pd[2];
  for (int64_t i0 = 0; i0 < g->S[0]; ++i0)
    for (int64_t i1 = 0; i1 < g->S[1]; ++i1)
      ldrun_f32(dp + (i0 * Sp[1] + i1) * Sp[2], g->xd, xo + i0 * g->xs[2] + i1 * g->xs[3], g->xs[4], g->S[2], g->xdt);
}
/* (and, woff non-NULL, the weight view's offset of every tap: k0 ws2 + k1 ws3 + k2 ws4) */
static void conv_grid_taps(const conv_geo_t* g, const int64_t* Sp, int64_t* out, int64_t* woff) {
  for (int64_t k0 = 0, kk = 0; k0 < g->K[0]; ++k0)
    for (int64_t k1 = 0; k1 < g->K[1]; ++k1)
      for (int64_t k2 = 0; k2 < g->K[2]; ++k2, ++kk) {
        out[kk] = (k0 * g->dl[0] * Sp[1] + k1 * g->dl[1]) * Sp[2] + k2 * g->dl[2];
        if (woff) woff[kk] = k0 * g->ws[2] + k1 * g->ws[3] + k2 * g->ws[4];
      }
}

/* The shifted planes (conv_dk_job_t.shifted): x of sample n, channel c into K2 copies L floats apart, copy k2's
 * grid row (i0 + pd0, i1 + pd1) holding x[i0, i1, w + k2 dl2 - pd2] for w < Q2 (the zeros past the row ends are
 * the same positions for every sample: the caller zeroes the planes once) */
static void conv_grid_fill_shifted(const conv_geo_t* g, const int64_t* Sp, int64_t L, int64_t n, int64_t c,
                                   float* dp) {
  const int64_t xo = n * g->xs[0] + c * g->xs[1], Q2 = g->Q[2];
  dp += (g->pd[0] * Sp[1] + g->pd[1]) * Q2;
  for (int64_t k2 = 0; k2 < g->K[2]; ++k2, dp += L) {
    const int64_t sh = k2 * g->dl[2] - g->pd[2];                          /* x column of grid column w: w + sh */
    const int64_t w0 = TPU_MAX((int64_t)0, -sh), w1 = TPU_MIN(Q2, g->S[2] - sh); /* columns inside x */
    if (w1 <= w0) continue;
    for (int64_t i0 = 0; i0 < g->S[0]; ++i0)
      for (int64_t i1 = 0; i1 < g->S[1]; ++i1)
        ldrun_f32(dp + (i0 * Sp[1] + i1) * Q2 + w0, g->xd, xo + i0 * g->xs[2] + i1 * g->xs[3] + (w0 + sh) * g->xs[4],
                  g->xs[4], w1 - w0, g->xdt);
  }
}

static const int64_t dk_consecutive[6] = {0, 16, 32, 48, 64, 80}; /* a strip's lane vectors */

static void conv_dk_worker(void* ctx, int64_t begin, int64_t end) {
  conv_dk_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  const int64_t L = J->L, KcG = g->KcG, ys4 = g->ys[4], MR = J->mr, NR = J->nr;
  void (*const kern)(int64_t, const float*, const float*, const int64_t*, const int64_t*, float*, float* const*,
                     const int64_t*, const int64_t*) =
      MR == 4 ? tpu_host_conv_dk4x96_avx512 : tpu_host_conv_dk8x48_avx512; /* (4, 96) or (8, 48) tiles */
  const int64_t Lc = J->Lc;
  float* xpad = conv_alloc((size_t)(g->C * Lc) * sizeof(float));
  float* tile = conv_alloc((size_t)DK_TILE * sizeof(float));
  if (!xpad || !tile) { J->oom = 1; goto done; }
  /* zeroed once: every unit rewrites the same interior positions (a short last unit leaves earlier samples in
   * its unused slots, whose outputs are computed from them and dropped), the padding stays zero */
  memset(xpad, 0, (size_t)(g->C * Lc) * sizeof(float));
  for (int64_t u = begin; u < end; ++u) {
    const int64_t n0 = u * J->ns, nn = TPU_MIN(J->ns, g->N - n0);
    for (int64_t s = 0; s < nn; ++s)
      for (int64_t c = 0; c < g->C; ++c) {
        if (J->shifted) conv_grid_fill_shifted(g, J->Sp, L, n0 + s, c, xpad + c * Lc + s * J->Lg);
        else conv_grid_fill(g, J->Sp, n0 + s, c, xpad + c * Lc + s * J->Lg);
      }
    float* yu = (float*)g->yd + n0 * g->ys[0];
    if (J->rows) {
      const int64_t nv = NR / 16, nch = nn * J->cps, ntl = (nch + nv - 1) / nv;
      for (int64_t grp = 0; grp < g->G; ++grp) {
        const float* xg = xpad + grp * g->Cg * Lc;
        for (int64_t t = 0; t < ntl; ++t)
          for (int64_t ob = 0; ob < J->nob; ++ob) {
            const float* wb = J->wk + (grp * J->nob + ob) * KcG * MR;
            const int64_t o0 = grp * g->Og + ob * MR, mr = TPU_MIN(MR, g->Og - ob * MR);
            if (ys4 == 1) { /* straight into y's rows (chunk lengths past nch are 0 in clen2) */
              float* yrow[8];
              for (int64_t i = 0; i < MR; ++i) yrow[i] = i < mr ? yu + (o0 + i) * g->ys[1] : NULL;
              int64_t clen2[6];
              for (int64_t j = 0; j < nv; ++j) clen2[j] = t * nv + j < nch ? J->clen[t * nv + j] : 0;
              kern(KcG, wb, xg, J->boff, J->coff + t * nv, tile, yrow, J->cy + t * nv, clen2);
              continue;
            }
            kern(KcG, wb, xg, J->boff, J->coff + t * nv, tile, NULL, NULL, NULL);
            for (int64_t i = 0; i < mr; ++i) {
              float* yr = yu + (o0 + i) * g->ys[1];
              for (int64_t j = 0, c = t * nv; j < nv && c < nch; ++j, ++c) {
                const float* tr = tile + i * NR + 16 * j;
                float* d = yr + J->cy[c];
                if (ys4 == 1) memcpy(d, tr, (size_t)J->clen[c] * sizeof(float));
                else for (int64_t l = 0; l < J->clen[c]; ++l) d[l * ys4] = tr[l];
              }
            }
          }
      }
      continue;
    }
    const int64_t nstrips = (nn * J->Lg + NR - 1) / NR;
    for (int64_t grp = 0; grp < g->G; ++grp) {
      const float* xg = xpad + grp * g->Cg * Lc;
      for (int64_t st = 0; st < nstrips; ++st) {
        const int64_t* yo = J->yoff + st * NR;
        const int64_t nr = TPU_MIN(NR, nn * J->Lg - st * NR); /* not into sample nn */
        for (int64_t ob = 0; ob < J->nob; ++ob) {
          const float* wb = J->wk + (grp * J->nob + ob) * KcG * MR;
          kern(KcG, wb, xg + st * NR, J->boff, dk_consecutive, tile, NULL, NULL, NULL);
          const int64_t o0 = grp * g->Og + ob * MR, mr = TPU_MIN(MR, g->Og - ob * MR);
          for (int64_t i = 0; i < mr; ++i) {
            float* yr = yu + (o0 + i) * g->ys[1];
            const float* tr = tile + i * NR;
            for (int64_t r = J->rstart[st]; r < J->rstart[st + 1]; ++r) { /* runs of outputs, y-stride ys4 */
              const int64_t j0 = J->runs[2 * r], len = TPU_MIN(J->runs[2 * r + 1], nr - j0);
              if (len <= 0) continue; /* a run past the last sample of a short unit */
              float* d = yr + yo[j0];
              if (ys4 == 1) memcpy(d, tr + j0, (size_t)len * sizeof(float));
              else for (int64_t j = 0; j < len; ++j) d[j * ys4] = tr[j0 + j];
            }
          }
        }
      }
    }
  }
done:
  conv_free(xpad); conv_free(tile);
}

static tpu_status_t conv_direct_run(conv_geo_t* g) {
  conv_dk_job_t J = {.g = g, .mr = g->Og <= 4 ? 4 : 8};
  J.nr = DK_TILE / J.mr;
  const int64_t MR = J.mr, NR = J.nr;
  for (int s = 0; s < 3; ++s) J.Sp[s] = g->S[s] + 2 * g->pd[s];
  J.shifted = conv_dk_shifted(g);
  if (J.shifted) J.Sp[2] = g->Q[2];
  J.Lg = J.Sp[0] * J.Sp[1] * J.Sp[2];
  int64_t nth = TPU_MAX((int64_t)1, (int64_t)tpu_pool_num_threads());
  J.ns = TPU_MAX((int64_t)1, TPU_MIN((512 + J.Lg - 1) / J.Lg, (g->N + nth - 1) / nth));
  J.nunits = (g->N + J.ns - 1) / J.ns;
  const int64_t nstrips = (J.ns * J.Lg + NR - 1) / NR;
  int64_t maxshift = 0;
  for (int s = 0; s < 3; ++s) maxshift = maxshift * J.Sp[s] + (s < 2 || !J.shifted ? (g->K[s] - 1) * g->dl[s] : 0);
  /* rows where they leave fewer lanes idle than the grid's padding positions: Q2 / (16 ceil(Q2 / 16)) >= P / Lg */
  const int64_t q16 = (g->Q[2] + 15) / 16, nv = NR / 16, f16 = (g->Q[1] * g->Q[2] + 15) / 16;
  J.rows = J.shifted || g->Q[2] * J.Lg >= g->P * 16 * q16;
  J.cps = J.shifted ? g->Q[0] * f16 : g->Q[0] * g->Q[1] * q16;
  const int64_t nct = (J.ns * J.cps + nv - 1) / nv * nv; /* chunk table entries */
  J.L = J.rows ? J.ns * J.Lg + 16 + maxshift : nstrips * NR + maxshift; /* a chunk reads 16 from its start */
  J.Lc = J.shifted ? g->K[2] * J.L : J.L;
  J.nob = (g->Og + MR - 1) / MR;
  J.wk = conv_alloc((size_t)(g->G * J.nob * g->KcG * MR) * sizeof(float));
  J.boff = conv_alloc((size_t)(g->KcG + (J.rows ? 3 * nct : 3 * nstrips * NR + nstrips + 1)) * sizeof(int64_t));
  tpu_status_t st = TPU_OK;
  if (!J.wk || !J.boff) {
    st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries");
    goto done;
  }
  J.yoff = J.boff + g->KcG; J.runs = J.yoff + nstrips * NR; J.rstart = J.runs + 2 * nstrips * NR;
  J.coff = J.boff + g->KcG; J.cy = J.coff + nct; J.clen = J.cy + nct;
  /* tables by counters (no divisions: they cost as much as a small convolution's stores); row (c, kk) at
   * c * L + tap(kk): the taps land in boff[0, KK) and channel 0 keeps them, so higher channels go first */
  conv_grid_taps(g, J.Sp, J.boff, NULL);
  if (J.shifted) /* tap (k0, k1, k2): copy k2, no shift along the innermost dim */
    for (int64_t kk = 0; kk < g->KK; ++kk) J.boff[kk] += (kk % g->K[2]) * (J.L - g->dl[2]);
  for (int64_t c = g->Cg - 1; c > 0; --c)
    for (int64_t kk = 0; kk < g->KK; ++kk) J.boff[c * g->KK + kk] = c * J.Lc + J.boff[kk];
  if (J.shifted) { /* chunks of 16 consecutive outputs of one (sample, q0) */
    const int64_t f = g->Q[1] * g->Q[2];
    int64_t c = 0;
    for (int64_t s = 0; s < J.ns; ++s)
      for (int64_t q0 = 0; q0 < g->Q[0]; ++q0)
        for (int64_t f0 = 0; f0 < f; f0 += 16, ++c) {
          J.coff[c] = s * J.Lg + q0 * J.Sp[1] * J.Sp[2] + f0;
          J.cy[c] = s * g->ys[0] + q0 * g->ys[2] + f0 * g->ys[4];
          J.clen[c] = TPU_MIN((int64_t)16, f - f0);
        }
    for (; c < nct; ++c) { J.coff[c] = 0; J.cy[c] = 0; J.clen[c] = 0; }
  } else if (J.rows) {
    int64_t c = 0;
    for (int64_t s = 0; s < J.ns; ++s)
      for (int64_t q0 = 0; q0 < g->Q[0]; ++q0)
        for (int64_t q1 = 0; q1 < g->Q[1]; ++q1)
          for (int64_t q2 = 0; q2 < g->Q[2]; q2 += 16, ++c) {
            J.coff[c] = s * J.Lg + (q0 * J.Sp[1] + q1) * J.Sp[2] + q2;
            J.cy[c] = s * g->ys[0] + q0 * g->ys[2] + q1 * g->ys[3] + q2 * g->ys[4];
            J.clen[c] = TPU_MIN((int64_t)16, g->Q[2] - q2);
          }
    for (; c < nct; ++c) { J.coff[c] = 0; J.cy[c] = 0; J.clen[c] = 0; }
  } else {
    int64_t s = 0, i0 = 0, i1 = 0, i2 = 0, nrun = 0;
    for (int64_t n = 0; n < nstrips * NR; ++n) {
      int ok = s < J.ns && i0 < g->Q[0] && i1 < g->Q[1] && i2 < g->Q[2];
      J.yoff[n] = ok ? s * g->ys[0] + i0 * g->ys[2] + i1 * g->ys[3] + i2 * g->ys[4] : -1;
      if (n % NR == 0) J.rstart[n / NR] = nrun;
      if (ok) {
        if (n % NR && J.yoff[n - 1] >= 0 && J.yoff[n] == J.yoff[n - 1] + g->ys[4]) ++J.runs[2 * nrun - 1];
        else { J.runs[2 * nrun] = n % NR; J.runs[2 * nrun + 1] = 1; ++nrun; }
      }
      if (++i2 == J.Sp[2]) { i2 = 0; if (++i1 == J.Sp[1]) { i1 = 0; if (++i0 == J.Sp[0]) { i0 = 0; ++s; } } }
    }
    J.rstart[nstrips] = nrun;
  }
  memset(J.wk, 0, (size_t)(g->G * J.nob * g->KcG * MR) * sizeof(float));
  for (int64_t grp = 0; grp < g->G; ++grp)
    for (int64_t o = 0; o < g->Og; ++o) {
      float* d = J.wk + (grp * J.nob + o / MR) * g->KcG * MR + o % MR;
      const int64_t wo = (grp * g->Og + o) * g->ws[0];
      int64_t r = 0;
      for (int64_t c = 0; c < g->Cg; ++c)
        for (int64_t k0 = 0; k0 < g->K[0]; ++k0)
          for (int64_t k1 = 0; k1 < g->K[1]; ++k1)
            for (int64_t k2 = 0; k2 < g->K[2]; ++k2, ++r)
              d[r * MR] = ld1_f32(g->wd, wo + c * g->ws[1] + k0 * g->ws[2] + k1 * g->ws[3] + k2 * g->ws[4], g->wdt);
    }
  tpu_pool_parallel_for(J.nunits, 1, conv_dk_worker, &J);
  if (J.oom) st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries");
done:
  conv_free(J.wk); conv_free(J.boff);
  return st;
}

/* ---- small-channel backward-weight (stride 1, f32 result, AVX-512F, one group): gw[o, c, k] = sum over output rows
 * (n, q0, q1) and q2 of gy[n, o, q] xpad[c, n Lg + q + shift(k)], x first copied into zero-padded planes as
 * for the padded-grid forward (Lg = prod(S + 2 pd); the grid coordinate of tap k of output q is q + k dl).
 * Where Cg and Og are under 16 the gk kernel pads its lanes to 16 channels (4 channels on a 16x16 map ran at
 * ~9 GFLOP/s); here lanes run along q2 (rows of gy read in place), 2 output channels x 9 taps a unit. The
 * planes and tap offsets are the padded-grid forward's (conv_grid_fill, conv_grid_taps). bf16 / f16 operands are
 * widened exactly into the planes and an f32 copy of gy (their products are exact in f32: bf16 x bf16 at DEFAULT
 * too, where the GEMM's vdpbf16ps would flush denormals; here they are kept). */
typedef struct {
  const conv_geo_t* g;
  const float* gy;              /* gy (N, O, *Q): the view itself when f32, else a widened contiguous copy */
  int64_t gys[5];               /* its strides */
  float* xpad;                  /* (C, Lx) */
  int64_t Sp[3], Lg, Lx, nop, nkc, R;
  int64_t *grow, *xrow, *shift; /* (R) gy row offsets, (R) xpad row offsets, (nkc * 9) tap shifts */
  float* res;                   /* (units, 18) */
} conv_dw_job_t;

static int conv_dw_ok(int kind, const conv_geo_t* g) {
  if (kind != TPU_HOST_CONV_BWD_WEIGHT || !g_direct || g->G != 1 || g->Cg >= 16 || g->Og >= 16 || g->KK < 5 ||
      g->N * g->P == 0 || !conv_f32_operand(g->xdt) || !conv_f32_operand(g->ydt) || g->wdt != TPU_DTYPE_F32)
    return 0;
  if (g->prec != TPU_IR_PRECISION_HIGHEST && !(g->xdt == TPU_DTYPE_BF16 && g->ydt == TPU_DTYPE_BF16)) return 0;
  if (g->ydt == TPU_DTYPE_F32 && g->Q[2] > 1 && g->ys[4] != 1) return 0; /* f32 gy rows read in place */
  if (2 * g->Q[2] < 16 * ((g->Q[2] + 15) / 16)) return 0; /* >= 1/2 of the lanes are positions (8-wide: 3x im2col) */
  if (!tpu_cpu_has_avx512f() || strncmp(tpu_host_gemm_isa_name(), "avx512", 6) != 0) return 0;
  int64_t grid = 1;
  for (int s = 0; s < 3; ++s) {
    if (g->st[s] != 1) return 0;
    grid *= g->S[s] + 2 * g->pd[s];
  }
  return g->C * (g->N * grid + 16) <= ((int64_t)16 << 20); /* xpad <= 64 MiB */
}

static void conv_dw_xpad_worker(void* ctx, int64_t begin, int64_t end) {
  conv_dw_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  for (int64_t c = begin; c < end; ++c) {
    float* xc = J->xpad + c * J->Lx;
    memset(xc, 0, (size_t)J->Lx * sizeof(float));
    for (int64_t n = 0; n < g->N; ++n) conv_grid_fill(g, J->Sp, n, c, xc + n * J->Lg);
  }
}

static void conv_dw_worker(void* ctx, int64_t begin, int64_t end) {
  conv_dw_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  const float* gy = J->gy;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t kc = u % J->nkc, c = (u / J->nkc) % g->C, op = u / (J->nkc * g->C);
    const int64_t o1 = TPU_MIN(2 * op + 1, g->O - 1); /* an odd last channel: computed twice, dropped */
    tpu_host_conv_dw2x9_avx512(J->R, J->grow, J->xrow, g->Q[2], gy + 2 * op * J->gys[1], gy + o1 * J->gys[1],
                               J->xpad + c * J->Lx, J->shift + kc * 9, J->res + u * 18);
  }
}

static tpu_status_t conv_dw_run(const conv_geo_t* g) {
  conv_dw_job_t J = {.g = g};
  for (int s = 0; s < 3; ++s) J.Sp[s] = g->S[s] + 2 * g->pd[s];
  J.Lg = J.Sp[0] * J.Sp[1] * J.Sp[2];
  J.Lx = g->N * J.Lg + 16;
  J.nop = (g->O + 1) / 2;
  J.nkc = (g->KK + 8) / 9;
  J.R = g->N * g->Q[0] * g->Q[1];
  const int64_t units = J.nop * g->C * J.nkc;
  J.xpad = conv_alloc((size_t)(g->C * J.Lx) * sizeof(float));
  J.grow = conv_alloc((size_t)(2 * J.R + J.nkc * 9 + g->KK) * sizeof(int64_t));
  J.res = conv_alloc((size_t)(units * 18) * sizeof(float));
  float* gy32 = NULL;
  tpu_status_t st = TPU_OK;
  if (g->ydt != TPU_DTYPE_F32) gy32 = conv_alloc((size_t)(g->N * g->O * g->P) * sizeof(float));
  if (!J.xpad || !J.grow || !J.res || (g->ydt != TPU_DTYPE_F32 && !gy32)) {
    st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries");
    goto done;
  }
  J.gy = (const float*)(const void*)g->yd;
  for (int d = 0; d < 5; ++d) J.gys[d] = g->ys[d];
  if (gy32) { /* widened, (N, O, Q0, Q1, Q2) contiguous */
    float* d = gy32;
    for (int64_t n = 0; n < g->N; ++n)
      for (int64_t o = 0; o < g->O; ++o)
        for (int64_t q0 = 0; q0 < g->Q[0]; ++q0)
          for (int64_t q1 = 0; q1 < g->Q[1]; ++q1, d += g->Q[2])
            ldrun_f32(d, g->yd, n * g->ys[0] + o * g->ys[1] + q0 * g->ys[2] + q1 * g->ys[3], g->ys[4], g->Q[2], g->ydt);
    J.gy = gy32;
    J.gys[4] = 1; J.gys[3] = g->Q[2]; J.gys[2] = g->Q[1] * g->Q[2]; J.gys[1] = g->P; J.gys[0] = g->O * g->P;
  }
  J.xrow = J.grow + J.R; J.shift = J.xrow + J.R;
  int64_t* woff = J.shift + J.nkc * 9;
  for (int64_t n = 0, i = 0; n < g->N; ++n)
    for (int64_t q0 = 0; q0 < g->Q[0]; ++q0)
      for (int64_t q1 = 0; q1 < g->Q[1]; ++q1, ++i) {
        J.grow[i] = n * J.gys[0] + q0 * J.gys[2] + q1 * J.gys[3];
        J.xrow[i] = n * J.Lg + (q0 * J.Sp[1] + q1) * J.Sp[2];
      }
  conv_grid_taps(g, J.Sp, J.shift, woff);
  for (int64_t kk = g->KK; kk < J.nkc * 9; ++kk) J.shift[kk] = 0; /* taps past KK: computed, dropped */
  tpu_pool_parallel_for(g->C, 1, conv_dw_xpad_worker, &J);
  tpu_pool_parallel_for(units, 1, conv_dw_worker, &J);
  {
    float* gw = (float*)(void*)g->wd;
    for (int64_t u = 0; u < units; ++u) {
      const int64_t kc = u % J.nkc, c = (u / J.nkc) % g->C, op = u / (J.nkc * g->C);
      for (int64_t r = 0; r < 2 && 2 * op + r < g->O; ++r)
        for (int64_t k = 0; k < 9 && kc * 9 + k < g->KK; ++k)
          gw[(2 * op + r) * g->ws[0] + c * g->ws[1] + woff[kc * 9 + k]] = J.res[u * 18 + r * 9 + k];
    }
  }
done:
  conv_free(J.xpad); conv_free(J.grow); conv_free(J.res); conv_free(gy32);
  return st;
}

/* ---- gathered-operand ("gk") paths: f32 result on AVX-512F, any stride, dilation, padding, groups.
 * The operands are first copied (widened) into channels-last, zero-padded planes:
 *   xT (N * Lg rows, Cx): sample n, padded position t (Lg = prod(S + 2 pd)) at row n * Lg + t;
 *   yT (N * P rows, Oy):  gy at (n, q) (backward-weight only);
 * so the input element of output position q and tap k is row xrow(n, q) + shift(k) of xT, with
 * xrow = n Lg + sum_d q_d st_d pitch_d and shift = sum_d k_d dl_d pitch_d (pitch: the padded grid's).
 * One microkernel (conv_avx512.c: 8 rows of scalars x 1-3 groups of 16 lanes, both read through
 * offset tables) serves both kinds, so no im2col matrix is materialized and no position of the
 * padding is computed:
 *   backward-weight: gw[o, c, k] = sum over (n, q) of gy[n, o, q] xT[xrow(n, q) + shift(k), c], the
 *     positions being the kernel's reduction; rows o (from yT) and lane groups (k, 16 channels) of
 *     xT ("lanes over c"), or rows (k, c) of xT and lane groups of 16 output channels of yT ("lanes
 *     over o"), whichever pads less. Every gw element belongs to one tile, so threads split tiles
 *     and nothing is reduced across threads; positions are summed in blocks of GK_PB in order.
 *   forward: y[n, o, q] = sum over (k, c) of xT[xrow(n, q) + shift(k), c] w[o, c, k]: rows are 8
 *     output positions, lane groups 16 output channels of the weight packed (G, KK*Cg, Op).
 * Used for forward convolutions the padded-grid kernel does not take (stride > 1, small maps) and
 * for backward-weight, where enough of the tiles is real work (conv_gk_plan). */
enum { GK_MR = 8, GK_PB = 512 };
static int g_gk = 1; /* 0 off, 1 where it pays, 2 wherever it applies (tests) */
int tpu_host_conv_set_gk(int mode) {
  int old = g_gk;
  g_gk = mode < 0 ? 0 : mode > 2 ? 2 : mode;
  return old;
}

typedef struct {
  const conv_geo_t* g;
  int64_t Sp[3], Lg, Cx, Oy;
  float *xT, *yT, *wp, *z; /* z: channels-last result (gk_unpack), NULL when written in place */
  /* bf: bf16 forward on the AVX512-BF16 kernel: xT16 (N * Lg rows, Cx = G * Cp bf16; group grp's channel c
   * at grp * Cp + c, Cp = Cg rounded up to even, the odd one zero) and wp16 (G, KK, Cp / 2, Opg, 2): the
   * reduction runs over kc = KK * Cp / 2 channel pairs */
  uint16_t *xT16, *wp16;
  int64_t Cp;
  int64_t* xpos; /* NCHW x with flat planes (stride xps): padded-grid row of input position s (xt16) */
  int64_t xps;
  /* bf16 backward-weight (bf, output rows an even length): the reduction runs over position pairs
   * (2 pp, 2 pp + 1), one output row's neighbours, so x of the pair's second position is grid row + st2:
   * xI (N * Lg rows, Cx words) = (xT16[r, c], xT16[r + st2, c]); yI (T / 2 rows, Oy words) = gy's pair */
  uint32_t *xI, *yI;
  int ng, fwd, bf;
  int64_t mr, tp; /* forward: rows per block (8, or 12 for the bf16 kernel at ng <= 2) and tile row pitch */
  int64_t nrow, ncol, ntiles, ncb, kc, lstep, Opg, NCHp;
  int64_t *ash, *rw;         /* per row entry: A offset, output offset part (-1: padding) */
  int64_t *bsh, *cw, *clim;  /* per lane group: B offset, output offset part, valid lanes */
  int64_t* tiles;            /* (ntiles, 2): first row entry, first lane group (backward-weight) */
  int64_t *aoff, *boff;      /* per reduction index p */
  float* acc;                /* backward-weight: (ntiles, 8 * 48) */
  const float *A, *B;
  const uint32_t *A16, *B16; /* bf16 backward-weight: xI / yI */
} conv_gk_job_t;

static int64_t gk_shift(const conv_geo_t* g, const conv_gk_job_t* J, int64_t kk) {
  int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
  return (k0 * g->dl[0] * J->Sp[1] + k1 * g->dl[1]) * J->Sp[2] + k2 * g->dl[2];
}
static int64_t gk_woff(const conv_geo_t* g, int64_t kk) {
  int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
  return k0 * g->ws[2] + k1 * g->ws[3] + k2 * g->ws[4];
}
/* xr[t] = xrow(t) * Cx and (yo non-NULL) yo[t] = y-view offset, for every position t = n * P + q */
static void gk_pos_tables(const conv_geo_t* g, const conv_gk_job_t* J, int64_t* xr, int64_t* yo) {
  int64_t t = 0;
  for (int64_t n = 0; n < g->N; ++n)
    for (int64_t q0 = 0; q0 < g->Q[0]; ++q0)
      for (int64_t q1 = 0; q1 < g->Q[1]; ++q1) {
        const int64_t xb = n * J->Lg + (q0 * g->st[0] * J->Sp[1] + q1 * g->st[1]) * J->Sp[2];
        const int64_t yb = n * g->ys[0] + q0 * g->ys[2] + q1 * g->ys[3];
        for (int64_t q2 = 0; q2 < g->Q[2]; ++q2, ++t) {
          xr[t] = (xb + q2 * g->st[2]) * J->Cx;
          if (yo) yo[t] = yb + q2 * g->ys[4];
        }
      }
}
static int gk_pick_ng(int64_t nch) { return nch % 3 == 0 ? 3 : nch % 2 == 0 ? 2 : nch == 1 ? 1 : 3; }

/* One row of W pixels x C channels (element strides cs, ws from src + so) into channels-last
 * f32 rows ld floats apart: dr[w * ld + c]. */
static void ld_row_cl(float* dr, int64_t ld, const char* src, int64_t so, int64_t cs, int64_t ws, int64_t W,
                      int64_t C, int dt) {
  if (cs == 1) {
    for (int64_t w = 0; w < W; ++w) ldrun_f32(dr + w * ld, src, so + w * ws, 1, C, dt);
  } else if (dt == TPU_DTYPE_F32) {
    const float* f = (const float*)(const void*)src + so;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t w = 0; w < W; ++w) dr[w * ld + c] = f[c * cs + w * ws];
  } else {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t w = 0; w < W; ++w) dr[w * ld + c] = ld1_f32(src, so + c * cs + w * ws, dt);
  }
}
/* f32 planes (C channels cs apart, SS positions sps apart) into channels-last rows: d[row(s) * ld + c], row(s) =
 * pos[s] (or s): 16 x 16 blocks through the register transpose where positions are contiguous, the rest one
 * element at a time */
static void cl_from_planes_f32(float* d, const int64_t* pos, int64_t ld, const float* src, int64_t cs, int64_t sps,
                               int64_t SS, int64_t C) {
  const int64_t cb = C / 16 * 16;
  const float* sr[16];
  float* dr[16];
  int64_t s0 = 0;
  for (; s0 + 16 <= SS && sps == 1 && cb > 0; s0 += 16)
    for (int64_t c0 = 0; c0 < cb; c0 += 16) {
      for (int i = 0; i < 16; ++i) sr[i] = src + (c0 + i) * cs + s0;
      for (int j = 0; j < 16; ++j) dr[j] = d + (pos ? pos[s0 + j] : s0 + j) * ld + c0;
      tpu_host_conv_tr16_avx512(sr, dr);
    }
  for (int64_t s = 0; s < SS; ++s) {
    float* row = d + (pos ? pos[s] : s) * ld;
    for (int64_t c = s < s0 ? cb : 0; c < C; ++c) row[c] = src[c * cs + s * sps];
  }
}

static void gk_xt_worker(void* ctx, int64_t begin, int64_t end) {
  conv_gk_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  const int64_t Cx = J->Cx;
  for (int64_t n = begin; n < end; ++n) {
    float* d = J->xT + n * J->Lg * Cx;
    memset(d, 0, (size_t)(J->Lg * Cx) * sizeof(float));
    if (J->xpos && g->xdt == TPU_DTYPE_F32) { /* NCHW f32, flat planes */
      cl_from_planes_f32(d, J->xpos, Cx, (const float*)(const void*)g->xd + n * g->xs[0], g->xs[1], J->xps,
                         g->S[0] * g->S[1] * g->S[2], g->C);
      continue;
    }
    for (int64_t i0 = 0; i0 < g->S[0]; ++i0)
      for (int64_t i1 = 0; i1 < g->S[1]; ++i1) {
        float* dr = d + (((i0 + g->pd[0]) * J->Sp[1] + i1 + g->pd[1]) * J->Sp[2] + g->pd[2]) * Cx;
        const int64_t so = n * g->xs[0] + i0 * g->xs[2] + i1 * g->xs[3];
        ld_row_cl(dr, Cx, g->xd, so, g->xs[1], g->xs[4], g->S[2], g->C, g->xdt);
      }
  }
}
/* bf16 x copied as it is (no widening) into xT16's channels-last rows, channel pairs per group */
static void gk_xt16_worker(void* ctx, int64_t begin, int64_t end) {
  conv_gk_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  const int64_t Cx = J->Cx, Cp = J->Cp, Cg = g->Cg, W = g->S[2], cs = g->xs[1], ws = g->xs[4];
  const uint16_t* x = (const uint16_t*)(const void*)g->xd;
  for (int64_t n = begin; n < end; ++n) {
    uint16_t* d = J->xT16 + n * J->Lg * Cx;
    memset(d, 0, (size_t)(J->Lg * Cx) * sizeof(uint16_t));
    for (int64_t i0 = 0; i0 < g->S[0] && !J->xpos; ++i0)
      for (int64_t i1 = 0; i1 < g->S[1]; ++i1) {
        uint16_t* dr = d + (((i0 + g->pd[0]) * J->Sp[1] + i1 + g->pd[1]) * J->Sp[2] + g->pd[2]) * Cx;
        const uint16_t* sr = x + n * g->xs[0] + i0 * g->xs[2] + i1 * g->xs[3];
        if (cs == 1 && ws == Cx && Cp == Cg && g->G * Cg == Cx) { /* a dense channels-last row */
          memcpy(dr, sr, (size_t)(W * Cx) * sizeof(uint16_t));
        } else if (cs == 1) {
          for (int64_t w = 0; w < W; ++w)
            for (int64_t grp = 0; grp < g->G; ++grp) {
              uint16_t* dw = dr + w * Cx + grp * Cp;
              const uint16_t* sw = sr + w * ws + grp * Cg;
              if (Cg >= 16) conv_copy(dw, sw, (size_t)Cg * sizeof(uint16_t));
              else for (int64_t c = 0; c < Cg; ++c) dw[c] = sw[c];
            }
        } else {
          for (int64_t grp = 0; grp < g->G; ++grp)
            for (int64_t c = 0; c < Cg; ++c) {
              const uint16_t* sc = sr + (grp * Cg + c) * cs;
              uint16_t* dc = dr + grp * Cp + c;
              for (int64_t w = 0; w < W; ++w) dc[w * Cx] = sc[w * ws];
            }
        }
      }
    if (!J->xpos) continue;
    /* NCHW, flat planes: blocks of 16 positions x up to 16 channel pairs (of the group's Cp channels) through
     * the register transpose, the odd channel's partner read from zeros; the rest one element at a time */
    static const uint16_t zeros[16];
    const int64_t SS = g->S[0] * g->S[1] * g->S[2], xps = J->xps;
    const uint16_t* xn = x + n * g->xs[0];
    const uint16_t* src[32];
    uint16_t* dst[16];
    int64_t s0 = 0;
    for (; s0 + 16 <= SS && xps == 1 && Cp >= 8; s0 += 16) /* fewer than 4 pairs: not worth a transpose */
      for (int64_t grp = 0; grp < g->G; ++grp)
        for (int64_t c0 = 0; c0 < Cp; c0 += 32) {
          const int np = (int)TPU_MIN((int64_t)16, (Cp - c0) / 2);
          for (int i = 0; i < 2 * np; ++i) src[i] = c0 + i < Cg ? xn + (grp * Cg + c0 + i) * cs + s0 : zeros;
          for (int j = 0; j < 16; ++j) dst[j] = d + J->xpos[s0 + j] * Cx + grp * Cp + c0;
          tpu_host_conv_tr16_pairs_avx512(np, src, dst);
        }
    for (int64_t s = 0; s < SS; ++s) { /* blocks covered channels < Cp / 2 * 2 (all but an odd Cp's last) */
      uint16_t* dr = d + J->xpos[s] * Cx;
      for (int64_t grp = 0; grp < g->G; ++grp)
        for (int64_t c = s < s0 ? Cp / 2 * 2 : 0; c < Cg; ++c) dr[grp * Cp + c] = xn[(grp * Cg + c) * cs + s * xps];
    }
  }
}
static void gk_yt_worker(void* ctx, int64_t begin, int64_t end) {
  conv_gk_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  const int64_t Oy = J->Oy;
  int64_t yps = 0;
  const int planes = g->ydt == TPU_DTYPE_F32 && g->ys[1] != 1 && conv_flat(g->Q, g->ys + 2, &yps);
  for (int64_t n = begin; n < end; ++n) {
    float* d = J->yT + n * g->P * Oy;
    if (Oy != g->O) memset(d, 0, (size_t)(g->P * Oy) * sizeof(float));
    if (planes) { /* NCHW f32, flat planes */
      cl_from_planes_f32(d, NULL, Oy, (const float*)(const void*)g->yd + n * g->ys[0], g->ys[1], yps, g->P, g->O);
      continue;
    }
    int64_t q = 0;
    for (int64_t q0 = 0; q0 < g->Q[0]; ++q0)
      for (int64_t q1 = 0; q1 < g->Q[1]; ++q1, q += g->Q[2]) {
        const int64_t so = n * g->ys[0] + q0 * g->ys[2] + q1 * g->ys[3];
        float* dr = d + q * Oy;
        ld_row_cl(dr, Oy, g->yd, so, g->ys[1], g->ys[4], g->Q[2], g->O, g->ydt);
      }
  }
}

static void gk_xi_worker(void* ctx, int64_t begin, int64_t end) {
  conv_gk_job_t* J = ctx;
  const int64_t Cx = J->Cx, rows = J->g->N * J->Lg, st2 = J->g->st[2];
  for (int64_t n = begin; n < end; ++n)
    for (int64_t r = n * J->Lg; r < (n + 1) * J->Lg; ++r) {
      const uint16_t* a = J->xT16 + r * Cx;
      const uint16_t* b = J->xT16 + (r + st2) * Cx;
      uint32_t* d = J->xI + r * Cx;
      if (r + st2 < rows)
        for (int64_t c = 0; c < Cx; ++c) d[c] = (uint32_t)a[c] | (uint32_t)b[c] << 16;
      else
        for (int64_t c = 0; c < Cx; ++c) d[c] = a[c];
    }
}
static void gk_yi_worker(void* ctx, int64_t begin, int64_t end) {
  conv_gk_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  const int64_t Oy = J->Oy, P = g->P, hP = P / 2;
  const uint16_t* y = (const uint16_t*)(const void*)g->yd;
  int64_t yps = 0;
  const int tr = g->ys[1] != 1 && conv_flat(g->Q, g->ys + 2, &yps) && yps == 1;
  const int64_t ob = tr ? g->O / 16 * 16 : 0, pb = tr ? hP / 16 * 16 : 0;
  for (int64_t n = begin; n < end; ++n) {
    uint32_t* d = J->yI + n * hP * Oy;
    uint16_t* d16 = (uint16_t*)(void*)d;
    if (Oy != g->O) memset(d, 0, (size_t)(hP * Oy) * sizeof(uint32_t));
    const uint16_t* yn = y + n * g->ys[0];
    /* NCHW with flat planes: a position pair is one word of a channel row; 16 x 16 word blocks */
    const float* src[16];
    float* dst[16];
    for (int64_t o0 = 0; o0 < ob; o0 += 16)
      for (int64_t p0 = 0; p0 < pb; p0 += 16) {
        for (int i = 0; i < 16; ++i) src[i] = (const float*)(const void*)(yn + (o0 + i) * g->ys[1] + 2 * p0);
        for (int i = 0; i < 16; ++i) dst[i] = (float*)(void*)(d + (p0 + i) * Oy + o0);
        tpu_host_conv_tr16_avx512(src, dst);
      }
    int64_t q = 0;
    for (int64_t q0 = 0; q0 < g->Q[0]; ++q0)
      for (int64_t q1 = 0; q1 < g->Q[1]; ++q1)
        for (int64_t q2 = 0; q2 < g->Q[2]; ++q2, ++q) {
          const uint16_t* yq = yn + q0 * g->ys[2] + q1 * g->ys[3] + q2 * g->ys[4];
          uint16_t* dq = d16 + (q / 2) * Oy * 2 + (q & 1);
          for (int64_t o = (q / 2 < pb ? ob : 0); o < g->O; ++o) dq[2 * o] = yq[o * g->ys[1]];
        }
  }
}

static void gk_bw_worker(void* ctx, int64_t begin, int64_t end) {
  conv_gk_job_t* J = ctx;
  for (int64_t p0 = 0; p0 < J->kc; p0 += GK_PB) {
    const int64_t kc = TPU_MIN((int64_t)GK_PB, J->kc - p0);
    for (int64_t t = begin; t < end; ++t)
      if (J->bf)
        tpu_host_conv_gk_bf16_avx512bf16(J->ng, kc, (const uint16_t*)(const void*)J->A16, J->aoff + p0,
                                         J->ash + J->tiles[2 * t], (const uint16_t*)(const void*)J->B16, J->boff + p0,
                                         J->bsh + J->tiles[2 * t + 1], J->acc + t * (GK_MR * 48), p0 > 0);
      else
        tpu_host_conv_gk_avx512(J->ng, kc, J->A, J->aoff + p0, J->ash + J->tiles[2 * t], J->B, J->boff + p0,
                              J->bsh + J->tiles[2 * t + 1], J->acc + t * (GK_MR * 48), p0 > 0);
  }
}

/* The gk paths produce tiles of (8 positions, 16-channel groups). Where the output's channel stride is
 * not 1 (NCHW) they are stored into a channels-last buffer z (row n * SS + s, pitch G * Cpg, channel
 * grp * Cpg + c) and a blocked transpose writes the view one channel plane at a time: scattering a
 * tile straight into NCHW touches every plane per position, and planes 4 KiB apart alias in L1. */
typedef struct {
  const float* z;
  float* out;
  int64_t zpitch, SS, Sz[3], os[5], G, Cg, Cpg;
} gk_unpack_t;
static void gk_unpack_worker(void* ctx, int64_t begin, int64_t end) {
  const gk_unpack_t* U = ctx;
  int64_t soff[64];
  for (int64_t n = begin; n < end; ++n)
    for (int64_t s0 = 0; s0 < U->SS; s0 += 64) {
      const int64_t ns = TPU_MIN((int64_t)64, U->SS - s0);
      int64_t a = s0 / (U->Sz[1] * U->Sz[2]), b = (s0 / U->Sz[2]) % U->Sz[1], c = s0 % U->Sz[2];
      for (int64_t j = 0; j < ns; ++j) { /* position s0 + j by counters */
        soff[j] = n * U->os[0] + a * U->os[2] + b * U->os[3] + c * U->os[4];
        if (++c == U->Sz[2]) { c = 0; if (++b == U->Sz[1]) { b = 0; ++a; } }
      }
      const float* zr = U->z + (n * U->SS + s0) * U->zpitch;
      /* runs of 16 positions that are contiguous in the view: 16 channels at a time through the register
       * transpose (a last block of fewer channels too: z rows hold Cpg, a multiple of 16, so the block reads
       * inside z, and the planes past Cg go to a dummy row); the rest (the whole block when its positions are
       * not one run) one element at a time */
      int contig = 1;
      for (int64_t j = 1; j < ns && contig; ++j) contig = soff[j] == soff[0] + j;
      const int64_t nb16 = contig ? ns / 16 * 16 : 0, cb = nb16 > 0 ? U->Cg : 0;
      if (nb16 > 0) {
        const float* src[16];
        float* dst[16];
        float dummy[16];
        for (int64_t grp = 0; grp < U->G; ++grp)
          for (int64_t c0 = 0; c0 < U->Cg; c0 += 16)
            for (int64_t j0 = 0; j0 < nb16; j0 += 16) {
              for (int i = 0; i < 16; ++i) src[i] = zr + (j0 + i) * U->zpitch + grp * U->Cpg + c0;
              for (int i = 0; i < 16; ++i)
                dst[i] = c0 + i < U->Cg ? U->out + (grp * U->Cg + c0 + i) * U->os[1] + soff[j0] : dummy;
              tpu_host_conv_tr16_avx512(src, dst);
            }
      }
      for (int64_t grp = 0; grp < U->G; ++grp)
        for (int64_t c = 0; c < U->Cg; ++c) {
          float* o = U->out + (grp * U->Cg + c) * U->os[1];
          const float* zc = zr + grp * U->Cpg + c;
          for (int64_t j = c < cb ? nb16 : 0; j < ns; ++j) o[soff[j]] = zc[j * U->zpitch];
        }
    }
}
static tpu_status_t gk_unpack(const float* z, int64_t N, int64_t SS, const int64_t* Sz, const int64_t* os, int64_t G,
                              int64_t Cg, int64_t Cpg, float* out) {
  gk_unpack_t U = {.z = z, .out = out, .zpitch = G * Cpg, .SS = SS, .G = G, .Cg = Cg, .Cpg = Cpg};
  for (int d = 0; d < 3; ++d) U.Sz[d] = Sz[d];
  for (int d = 0; d < 5; ++d) U.os[d] = os[d];
  tpu_pool_parallel_for(N, 1, gk_unpack_worker, &U);
  return TPU_OK;
}

static void gk_fwd_worker(void* ctx, int64_t begin, int64_t end) {
  conv_gk_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  float tile[GK_MR * 48];
  const int64_t ncb = J->ncb, mr = J->mr, tp = J->tp;
  float* yd = (float*)(void*)g->yd;
  for (int64_t t = begin; t < end; ++t) {
    const int64_t cb = t % ncb, grp = (t / ncb) % g->G, rb = t / (ncb * g->G);
    if (J->bf && mr == 12)
      tpu_host_conv_gk12_bf16_avx512bf16(J->ng, J->kc, J->xT16 + grp * J->Cp, J->aoff, J->ash + rb * mr,
                                         J->wp16 + grp * J->kc * J->Opg * 2, J->boff, J->bsh + cb * J->ng, tile);
    else if (J->bf)
      tpu_host_conv_gk_bf16_avx512bf16(J->ng, J->kc, J->xT16 + grp * J->Cp, J->aoff, J->ash + rb * mr,
                                       J->wp16 + grp * J->kc * J->Opg * 2, J->boff, J->bsh + cb * J->ng, tile, 0);
    else
      tpu_host_conv_gk_avx512(J->ng, J->kc, J->xT + grp * g->Cg, J->aoff, J->ash + rb * mr,
                              J->wp + grp * J->kc * J->Opg, J->boff, J->bsh + cb * J->ng, tile, 0);
    for (int64_t i = 0; i < mr; ++i) {
      const int64_t yo = J->rw[rb * mr + i];
      if (yo < 0) continue;
      if (J->z) { /* row t = rb * mr + i of z */
        memcpy(J->z + ((rb * mr + i) * g->G + grp) * J->Opg + cb * J->ng * 16, tile + i * tp,
               (size_t)J->ng * 16 * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < J->ng; ++j) {
        const int64_t o0 = (cb * J->ng + j) * 16, nl = TPU_MIN((int64_t)16, g->Og - o0);
        if (nl <= 0) break;
        float* yr = yd + yo + (grp * g->Og + o0) * g->ys[1];
        const float* tr = tile + i * tp + j * 16;
        if (g->ys[1] == 1) memcpy(yr, tr, (size_t)nl * sizeof(float));
        else for (int64_t l = 0; l < nl; ++l) yr[l * g->ys[1]] = tr[l];
      }
    }
  }
}


/* 1 if the gk path takes this convolution (J gets its sizes); conv_gk_run does the rest */
static int conv_gk_plan(int kind, const conv_geo_t* g, conv_gk_job_t* J) {
  if (!g_gk || !g_direct || kind == TPU_HOST_CONV_BWD_INPUT) return 0;
  if (!conv_f32_operand(g->xdt) || !conv_f32_operand(g->wdt) || !conv_f32_operand(g->ydt)) return 0;
  /* exact f32 products: HIGHEST, or DEFAULT where both operands are bf16 (exact in f32); f32 operands
   * at DEFAULT / HIGH keep the GEMM's bf16 passes */
  if (g->prec != TPU_IR_PRECISION_HIGHEST && !(g->prec == TPU_IR_PRECISION_DEFAULT && g->xdt == TPU_DTYPE_BF16 &&
                                               (kind == TPU_HOST_CONV_FWD ? g->wdt : g->ydt) == TPU_DTYPE_BF16))
    return 0;
  if (!tpu_cpu_has_avx512f() || strncmp(tpu_host_gemm_isa_name(), "avx512", 6) != 0) return 0;
  if (g->N * g->P == 0 || g->KcG == 0) return 0;
  memset(J, 0, sizeof(*J));
  J->g = g;
  J->fwd = kind == TPU_HOST_CONV_FWD;
  for (int s = 0; s < 3; ++s) J->Sp[s] = g->S[s] + 2 * g->pd[s];
  J->Lg = J->Sp[0] * J->Sp[1] * J->Sp[2];
  const int64_t c16 = (g->Cg + 15) / 16, o16 = (g->Og + 15) / 16;
  double useful = (double)g->Og * (double)g->KcG, work;
  if (J->fwd) {
    if (g->x_direct) return 0;
    J->ng = gk_pick_ng(o16);
    J->NCHp = (o16 + J->ng - 1) / J->ng * J->ng;
    J->Opg = J->NCHp * 16;
    J->bf = g->xdt == TPU_DTYPE_BF16 && g->wdt == TPU_DTYPE_BF16 && gk_bf16_ok();
    J->Cp = J->bf ? (g->Cg + 1) / 2 * 2 : g->Cg;
    J->Cx = J->bf ? g->G * J->Cp : g->C;
    work = (double)J->Opg * (double)g->KcG;
  } else {
    /* lanes over c: rows O (pad 8), lane groups KK * c16 (pad ng); lanes over o: rows KK * Cg, groups o16 */
    int ngc = (int)TPU_MIN((int64_t)3, g->KK * c16), ngo = gk_pick_ng(o16);
    double wc = (double)((g->Og + 7) / 8 * 8) * (double)((g->KK * c16 + ngc - 1) / ngc * ngc * 16);
    double wo = (double)((g->KcG + 7) / 8 * 8) * (double)((o16 + ngo - 1) / ngo * ngo * 16);
    J->lstep = wo < wc ? -1 : 0; /* marks the orientation until conv_gk_run */
    J->ng = wo < wc ? ngo : ngc;
    work = TPU_MIN(wc, wo);
    J->Cx = wo < wc ? g->C : (g->G - 1) * g->Cg + c16 * 16;
    J->Oy = wo < wc ? (g->G - 1) * g->Og + o16 * 16 : g->O;
    J->bf = g->xdt == TPU_DTYPE_BF16 && g->ydt == TPU_DTYPE_BF16 && g->Q[2] % 2 == 0 && gk_bf16_ok();
    J->Cp = g->Cg; /* xT16: channel grp * Cg + c, rows Cx apart */
  }
  double mem = (double)g->N * (double)J->Lg * (double)J->Cx + (double)g->N * (double)g->P * (double)J->Oy;
  if (mem * 4 > (double)(256u << 20)) return 0;
  if (g_gk == 2) return 1;
  if (g->KK == 1) return 0; /* 1x1: the im2col is a cheap gather (a strided one reads 1/st of x) */
  if (useful < 0.45 * work) return 0; /* mostly padding lanes: im2col + GEMM */
  if (J->fwd) return g->Og >= 8;
  return 1;
}

static tpu_status_t conv_gk_run(int kind, conv_gk_job_t* J) {
  const conv_geo_t* g = J->g;
  tpu_status_t st = TPU_OK;
  const int64_t T = g->N * g->P;
  const int lanes_o = J->lstep == -1;
  const int64_t SS = g->S[0] * g->S[1] * g->S[2];
  if (g->xs[1] != 1 && conv_flat(g->S, g->xs + 2, &J->xps)) { /* NCHW x: whole planes at a time */
    J->xpos = conv_alloc((size_t)SS * sizeof(int64_t));
    if (!J->xpos) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries");
    for (int64_t s = 0; s < SS; ++s) {
      const int64_t i0 = s / (g->S[1] * g->S[2]), i1 = (s / g->S[2]) % g->S[1], i2 = s % g->S[2];
      J->xpos[s] = ((i0 + g->pd[0]) * J->Sp[1] + i1 + g->pd[1]) * J->Sp[2] + g->pd[2] + i2;
    }
  }
  if (J->bf) {
    J->xT16 = conv_alloc((size_t)(g->N * J->Lg * J->Cx) * sizeof(uint16_t));
    if (!J->xT16) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    tpu_pool_parallel_for(g->N, 1, gk_xt16_worker, J);
  } else {
    J->xT = conv_alloc((size_t)(g->N * J->Lg * J->Cx) * sizeof(float));
    if (!J->xT) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    tpu_pool_parallel_for(g->N, 1, gk_xt_worker, J);
  }
  if (J->fwd && J->bf) {
    /* pairs p = kk * hp + cp (channels 2 cp, 2 cp + 1 of tap kk) */
    J->mr = J->ng <= 2 ? 12 : GK_MR;
    J->tp = J->mr == 12 ? 32 : 48;
    const int64_t mr = J->mr, hp = J->Cp / 2, np = g->KK * hp, nrb = (T + mr - 1) / mr, Opg = J->Opg;
    J->kc = np;
    J->ncb = J->NCHp / J->ng;
    J->wp16 = conv_alloc((size_t)(g->G * np * Opg * 2) * sizeof(uint16_t));
    J->aoff = conv_alloc((size_t)(2 * np + 2 * nrb * mr + J->NCHp) * sizeof(int64_t));
    if (!J->wp16 || !J->aoff) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    J->boff = J->aoff + np; J->ash = J->boff + np; J->rw = J->ash + nrb * mr; J->bsh = J->rw + nrb * mr;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      const int64_t sh = gk_shift(g, J, kk) * J->Cx;
      for (int64_t cp = 0; cp < hp; ++cp) J->aoff[kk * hp + cp] = sh + 2 * cp;
    }
    for (int64_t p = 0; p < np; ++p) J->boff[p] = p * Opg * 2;
    gk_pos_tables(g, J, J->ash, J->rw);
    for (int64_t t = T; t < nrb * mr; ++t) { J->ash[t] = 0; J->rw[t] = -1; }
    for (int64_t j = 0; j < J->NCHp; ++j) J->bsh[j] = j * 32;
    const uint16_t* w16 = (const uint16_t*)(const void*)g->wd;
    for (int64_t grp = 0; grp < g->G; ++grp)
      for (int64_t kk = 0; kk < g->KK; ++kk) {
        const int64_t wo = gk_woff(g, kk);
        for (int64_t cp = 0; cp < hp; ++cp) {
          uint16_t* d = J->wp16 + ((grp * np + kk * hp + cp) * Opg) * 2;
          for (int64_t o = 0; o < Opg; ++o)
            for (int64_t e = 0; e < 2; ++e) {
              const int64_t c = 2 * cp + e;
              d[2 * o + e] = o < g->Og && c < g->Cg ? w16[(grp * g->Og + o) * g->ws[0] + c * g->ws[1] + wo] : 0;
            }
        }
      }
    if (g->ys[1] != 1) {
      J->z = conv_alloc((size_t)(T * g->G * Opg) * sizeof(float));
      if (!J->z) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    }
    tpu_pool_parallel_for(nrb * g->G * J->ncb, 1, gk_fwd_worker, J);
    if (J->z) st = gk_unpack(J->z, g->N, g->P, g->Q, g->ys, g->G, g->Og, Opg, (float*)(void*)g->yd);
    goto done;
  }
  if (J->fwd) {
    const int64_t KcG = g->KcG, nrb = (T + GK_MR - 1) / GK_MR;
    J->mr = GK_MR;
    J->tp = 48;
    J->kc = KcG;
    J->ncb = J->NCHp / J->ng;
    J->wp = conv_alloc((size_t)(g->G * KcG * J->Opg) * sizeof(float));
    J->aoff = conv_alloc((size_t)(2 * KcG + 2 * nrb * GK_MR + J->NCHp) * sizeof(int64_t));
    if (!J->wp || !J->aoff) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    J->boff = J->aoff + KcG; J->ash = J->boff + KcG; J->rw = J->ash + nrb * GK_MR; J->bsh = J->rw + nrb * GK_MR;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      const int64_t sh = gk_shift(g, J, kk) * J->Cx;
      for (int64_t c = 0; c < g->Cg; ++c) J->aoff[kk * g->Cg + c] = sh + c;
    }
    for (int64_t p = 0; p < KcG; ++p) J->boff[p] = p * J->Opg;
    gk_pos_tables(g, J, J->ash, J->rw);
    for (int64_t t = T; t < nrb * GK_MR; ++t) { J->ash[t] = 0; J->rw[t] = -1; }
    for (int64_t j = 0; j < J->NCHp; ++j) J->bsh[j] = j * 16;
    for (int64_t grp = 0; grp < g->G; ++grp)
      for (int64_t kk = 0; kk < g->KK; ++kk) {
        const int64_t wo = gk_woff(g, kk);
        for (int64_t c = 0; c < g->Cg; ++c) {
          float* d = J->wp + (grp * KcG + kk * g->Cg + c) * J->Opg;
          ldrun_f32(d, g->wd, grp * g->Og * g->ws[0] + c * g->ws[1] + wo, g->ws[0], g->Og, g->wdt);
          memset(d + g->Og, 0, (size_t)(J->Opg - g->Og) * sizeof(float));
        }
      }
    if (g->ys[1] != 1) {
      J->z = conv_alloc((size_t)(T * g->G * J->Opg) * sizeof(float));
      if (!J->z) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    }
    tpu_pool_parallel_for(nrb * g->G * J->ncb, 1, gk_fwd_worker, J);
    if (J->z) st = gk_unpack(J->z, g->N, g->P, g->Q, g->ys, g->G, g->Og, J->Opg, (float*)(void*)g->yd);
    goto done;
  }
  /* backward-weight */
  if (J->bf) {
    J->xI = conv_alloc((size_t)(g->N * J->Lg * J->Cx) * sizeof(uint32_t));
    J->yI = conv_alloc((size_t)(T / 2 * J->Oy) * sizeof(uint32_t));
    if (!J->xI || !J->yI) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    tpu_pool_parallel_for(g->N, 1, gk_xi_worker, J);
    tpu_pool_parallel_for(g->N, 1, gk_yi_worker, J);
  } else {
    J->yT = conv_alloc((size_t)(T * J->Oy) * sizeof(float));
    if (!J->yT) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    tpu_pool_parallel_for(g->N, 1, gk_yt_worker, J);
  }
  {
    const int64_t c16 = (g->Cg + 15) / 16, o16 = (g->Og + 15) / 16, ng = J->ng;
    const int64_t rows_g = lanes_o ? g->KcG : g->Og, cols_g = lanes_o ? o16 : g->KK * c16;
    const int64_t rp = (rows_g + GK_MR - 1) / GK_MR * GK_MR, cp = (cols_g + ng - 1) / ng * ng;
    J->nrow = g->G * rp; J->ncol = g->G * cp;
    J->ntiles = g->G * (rp / GK_MR) * (cp / ng);
    J->kc = T;
    J->aoff = conv_alloc((size_t)(2 * T + 2 * J->nrow + 3 * J->ncol + 2 * J->ntiles) * sizeof(int64_t));
    J->acc = conv_alloc((size_t)(J->ntiles * GK_MR * 48) * sizeof(float));
    if (!J->aoff || !J->acc) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
    J->boff = J->aoff + T; J->ash = J->boff + T; J->rw = J->ash + J->nrow; J->bsh = J->rw + J->nrow;
    J->cw = J->bsh + J->ncol; J->clim = J->cw + J->ncol; J->tiles = J->clim + J->ncol;
    gk_pos_tables(g, J, lanes_o ? J->aoff : J->boff, NULL);
    for (int64_t p = 0; p < T; ++p) (lanes_o ? J->boff : J->aoff)[p] = p * J->Oy;
    if (J->bf) { /* pairs: (2 pp, 2 pp + 1) at the first one's offsets, in bf16 elements (2 per word) */
      J->kc = T / 2;
      for (int64_t pp = 0; pp < T / 2; ++pp) {
        J->aoff[pp] = 2 * J->aoff[2 * pp];
        J->boff[pp] = 2 * J->boff[2 * pp];
      }
      if (lanes_o) for (int64_t pp = 0; pp < T / 2; ++pp) J->boff[pp] = pp * J->Oy * 2;
      else for (int64_t pp = 0; pp < T / 2; ++pp) J->aoff[pp] = pp * J->Oy * 2;
    }
    J->A = lanes_o ? J->xT : J->yT;
    J->B = lanes_o ? J->yT : J->xT;
    J->A16 = lanes_o ? J->xI : J->yI;
    J->B16 = lanes_o ? J->yI : J->xI;
    J->lstep = lanes_o ? g->ws[0] : g->ws[1];
    int64_t nt = 0;
    for (int64_t grp = 0; grp < g->G; ++grp) {
      const int64_t r0 = grp * rp, c0 = grp * cp;
      for (int64_t r = 0; r < rp; ++r) {
        int64_t* a = J->ash + r0 + r; int64_t* w = J->rw + r0 + r;
        if (r >= rows_g) { *a = 0; *w = -1; continue; }
        if (lanes_o) {
          const int64_t kk = r / g->Cg, c = r % g->Cg;
          *a = gk_shift(g, J, kk) * J->Cx + grp * g->Cg + c;
          *w = c * g->ws[1] + gk_woff(g, kk);
        } else {
          const int64_t o = grp * g->Og + r;
          *a = o;
          *w = o * g->ws[0];
        }
      }
      for (int64_t j = 0; j < cp; ++j) {
        const int64_t e = c0 + j;
        if (j >= cols_g) { J->bsh[e] = 0; J->cw[e] = 0; J->clim[e] = 0; continue; }
        if (lanes_o) {
          J->bsh[e] = grp * g->Og + j * 16;
          J->cw[e] = (grp * g->Og + j * 16) * g->ws[0];
          J->clim[e] = TPU_MIN((int64_t)16, g->Og - j * 16);
        } else {
          const int64_t kk = j / c16, ch = j % c16;
          J->bsh[e] = gk_shift(g, J, kk) * J->Cx + grp * g->Cg + ch * 16;
          J->cw[e] = gk_woff(g, kk) + ch * 16 * g->ws[1];
          J->clim[e] = TPU_MIN((int64_t)16, g->Cg - ch * 16);
        }
      }
      if (J->bf) { /* word offsets -> bf16 element offsets */
        for (int64_t r = 0; r < rp; ++r) J->ash[r0 + r] *= 2;
        for (int64_t j = 0; j < cp; ++j) J->bsh[c0 + j] *= 2;
      }
      for (int64_t rb = 0; rb < rp; rb += GK_MR)
        for (int64_t cb = 0; cb < cp; cb += ng) {
          J->tiles[2 * nt] = r0 + rb;
          J->tiles[2 * nt + 1] = c0 + cb;
          ++nt;
        }
    }
    tpu_pool_parallel_for(J->ntiles, 1, gk_bw_worker, J);
    float* wd = (float*)(void*)g->wd;
    for (int64_t t = 0; t < J->ntiles; ++t) {
      const float* tl = J->acc + t * (GK_MR * 48);
      for (int64_t i = 0; i < GK_MR; ++i) {
        const int64_t w0 = J->rw[J->tiles[2 * t] + i];
        if (w0 < 0) continue;
        for (int64_t j = 0; j < ng; ++j) {
          const int64_t e = J->tiles[2 * t + 1] + j;
          for (int64_t l = 0; l < J->clim[e]; ++l) wd[w0 + J->cw[e] + l * J->lstep] = tl[i * 48 + j * 16 + l];
        }
      }
    }
  }
done:
  conv_free(J->xT); conv_free(J->yT); conv_free(J->wp); conv_free(J->aoff); conv_free(J->acc); conv_free(J->z);
  conv_free(J->xT16); conv_free(J->wp16); conv_free(J->xpos); conv_free(J->xI); conv_free(J->yI);
  return st;
}

/* ---- backward-input at stride > 1 on the gk kernel, in gather form by phases. Per dim, input
 * position i receives tap k from output q = (i + pd - k dl) / st where that divides: with the phase
 * r = (i + pd) mod st, exactly the taps with k dl = r (mod st) contribute, at q = base(i) - m(k),
 * base = (i + pd - r) / st, m = (k dl - r) / st >= 0. So the positions of one phase class (r per
 * dim) form a dense sub-problem: gx[n, c, i] = sum over (k in class, o) of
 * gyT[row(n, base(i)) - shift(k), o] w[o, c, k], with gy copied channels-last into a grid padded by
 * max m below and up to the largest base above (zero rows where q leaves [0, Q)). Rows are 8
 * positions of a class, lane groups 16 input channels of the class's packed weight (kk, o, Cp);
 * a class without taps writes zeros (kc = 0). No col2im scatter, no positions that receive nothing. */
typedef struct {
  const conv_geo_t* g;
  int64_t Pl[3], Qp[3], Lq, Cpg, ng, ncb;
  float *yT, *wp;
  int64_t ncls;
  int64_t *ckc, *coff, *cwp; /* per class: reduction length, first aoff/boff entry, weight pack offset */
  int64_t *aoff, *boff, *ash, *rw, *rz, *tiles; /* tiles: (class, first row entry) per row block */
  int64_t nrb;
  float* z; /* channels-last result (gk_unpack), NULL when written in place */
} conv_bi_job_t;

static void bi_yt_worker(void* ctx, int64_t begin, int64_t end) {
  conv_bi_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  const int64_t O = g->O;
  for (int64_t n = begin; n < end; ++n) {
    float* d = J->yT + n * J->Lq * O;
    memset(d, 0, (size_t)(J->Lq * O) * sizeof(float));
    for (int64_t q0 = 0; q0 < g->Q[0]; ++q0)
      for (int64_t q1 = 0; q1 < g->Q[1]; ++q1) {
        float* dr = d + (((q0 + J->Pl[0]) * J->Qp[1] + q1 + J->Pl[1]) * J->Qp[2] + J->Pl[2]) * O;
        const int64_t so = n * g->ys[0] + q0 * g->ys[2] + q1 * g->ys[3];
        if (g->ys[1] == 1) {
          for (int64_t q2 = 0; q2 < g->Q[2]; ++q2) ldrun_f32(dr + q2 * O, g->yd, so + q2 * g->ys[4], 1, O, g->ydt);
        } else if (g->ydt == TPU_DTYPE_F32) {
          const float* yf = (const float*)(const void*)g->yd + so;
          for (int64_t o = 0; o < O; ++o)
            for (int64_t q2 = 0; q2 < g->Q[2]; ++q2) dr[q2 * O + o] = yf[o * g->ys[1] + q2 * g->ys[4]];
        } else {
          for (int64_t o = 0; o < O; ++o)
            for (int64_t q2 = 0; q2 < g->Q[2]; ++q2) dr[q2 * O + o] = ld1_f32(g->yd, so + o * g->ys[1] + q2 * g->ys[4], g->ydt);
        }
      }
  }
}

static void bi_worker(void* ctx, int64_t begin, int64_t end) {
  conv_bi_job_t* J = ctx;
  const conv_geo_t* g = J->g;
  float tile[GK_MR * 48];
  float* xd = (float*)(void*)g->xd;
  const int64_t ncb = J->ncb;
  for (int64_t t = begin; t < end; ++t) {
    const int64_t cb = t % ncb, grp = (t / ncb) % g->G, b = t / (ncb * g->G);
    const int64_t cls = J->tiles[2 * b], r0 = J->tiles[2 * b + 1], kc = J->ckc[cls];
    tpu_host_conv_gk_avx512((int)J->ng, kc, J->yT + grp * g->Og, J->aoff + J->coff[cls], J->ash + r0,
                            J->wp + J->cwp[cls] + grp * kc * J->Cpg, J->boff + J->coff[cls], (const int64_t[]){
                                cb * J->ng * 16, (cb * J->ng + 1) * 16, (cb * J->ng + 2) * 16}, tile, 0);
    for (int64_t i = 0; i < GK_MR; ++i) {
      const int64_t xo = J->rw[r0 + i];
      if (xo < 0) continue;
      if (J->z) {
        memcpy(J->z + (J->rz[r0 + i] * g->G + grp) * J->Cpg + cb * J->ng * 16, tile + i * 48,
               (size_t)J->ng * 16 * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < J->ng; ++j) {
        const int64_t c0 = (cb * J->ng + j) * 16, nl = TPU_MIN((int64_t)16, g->Cg - c0);
        if (nl <= 0) break;
        float* xr = xd + xo + (grp * g->Cg + c0) * g->xs[1];
        const float* tr = tile + i * 48 + j * 16;
        if (g->xs[1] == 1) memcpy(xr, tr, (size_t)nl * sizeof(float));
        else for (int64_t l = 0; l < nl; ++l) xr[l * g->xs[1]] = tr[l];
      }
    }
  }
}

static int conv_bi_ok(const conv_geo_t* g, int force) {
  if (!g_gk || !g_direct || g->xdt != TPU_DTYPE_F32) return 0; /* gx (the result) f32 */
  if (!conv_f32_operand(g->wdt) || !conv_f32_operand(g->ydt)) return 0;
  if (g->prec != TPU_IR_PRECISION_HIGHEST &&
      !(g->prec == TPU_IR_PRECISION_DEFAULT && g->ydt == TPU_DTYPE_BF16 && g->wdt == TPU_DTYPE_BF16))
    return 0;
  if (!tpu_cpu_has_avx512f() || strncmp(tpu_host_gemm_isa_name(), "avx512", 6) != 0) return 0;
  if (g->N * g->P == 0 || g->KcG == 0) return 0;
  if (g_gk == 2 || force) return 1;
  const int64_t c16 = (g->Cg + 15) / 16;
  const int ng = gk_pick_ng(c16);
  if ((double)g->Cg < 0.45 * (double)((c16 + ng - 1) / ng * ng * 16)) return 0;
  return g->Og >= 4;
}

static tpu_status_t conv_bi_run(const conv_geo_t* g) {
  conv_bi_job_t J = {.g = g};
  tpu_status_t st = TPU_OK;
  int64_t nph[3], ncls = 1;
  for (int d = 0; d < 3; ++d) {
    nph[d] = g->st[d];
    ncls *= nph[d];
    J.Pl[d] = (g->K[d] - 1) * g->dl[d] / g->st[d];
    J.Qp[d] = J.Pl[d] + TPU_MAX(g->Q[d], (g->S[d] - 1 + g->pd[d]) / g->st[d] + 1);
  }
  J.Lq = J.Qp[0] * J.Qp[1] * J.Qp[2];
  const int64_t SS = g->S[0] * g->S[1] * g->S[2];
  const int64_t c16 = (g->Cg + 15) / 16;
  J.ng = gk_pick_ng(c16);
  J.ncb = (c16 + J.ng - 1) / J.ng;
  J.Cpg = J.ncb * J.ng * 16;
  J.ncls = ncls;
  /* positions per class: product over dims of the count of i in [0, S) with (i + pd) % st == r */
  int64_t rows_total = 0;
  J.ckc = conv_alloc((size_t)(3 * ncls + 1) * sizeof(int64_t));
  if (!J.ckc) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries");
  J.coff = J.ckc + ncls; J.cwp = J.coff + ncls;
  int64_t* crow = conv_alloc((size_t)(ncls + 1) * sizeof(int64_t)); /* first row entry of each class */
  J.yT = conv_alloc((size_t)(g->N * J.Lq * g->O) * sizeof(float));
  J.wp = conv_alloc((size_t)(g->G * g->KK * g->Og * J.Cpg) * sizeof(float));
  if (!crow || !J.yT || !J.wp) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries"); goto done; }
  int64_t ktot = 0, wtot = 0;
  for (int64_t cls = 0; cls < ncls; ++cls) {
    int64_t r[3] = {cls / (nph[1] * nph[2]), (cls / nph[2]) % nph[1], cls % nph[2]}, npos = g->N, ntap = 1;
    for (int d = 0; d < 3; ++d) {
      int64_t cnt = 0, kt = 0;
      for (int64_t i = 0; i < g->S[d]; ++i) cnt += (i + g->pd[d]) % g->st[d] == r[d];
      for (int64_t k = 0; k < g->K[d]; ++k) kt += (k * g->dl[d]) % g->st[d] == r[d];
      npos *= cnt; ntap *= kt;
    }
    crow[cls] = rows_total;
    rows_total += (npos + GK_MR - 1) / GK_MR * GK_MR;
    J.ckc[cls] = ntap * g->Og;
    J.coff[cls] = ktot;
    J.cwp[cls] = wtot;
    ktot += ntap * g->Og;
    wtot += g->G * ntap * g->Og * J.Cpg;
  }
  crow[ncls] = rows_total;
  J.nrb = rows_total / GK_MR;
  J.aoff = conv_alloc((size_t)(2 * ktot + 3 * rows_total + 2 * J.nrb + 1) * sizeof(int64_t));
  if (g->xs[1] != 1) J.z = conv_alloc((size_t)(g->N * SS * g->G * J.Cpg) * sizeof(float));
  if (!J.aoff || (g->xs[1] != 1 && !J.z)) {
    st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries");
    goto done;
  }
  J.boff = J.aoff + ktot; J.ash = J.boff + ktot; J.rw = J.ash + rows_total; J.rz = J.rw + rows_total;
  J.tiles = J.rz + rows_total;
  tpu_pool_parallel_for(g->N, 1, bi_yt_worker, &J);
  for (int64_t cls = 0; cls < ncls; ++cls) {
    int64_t r[3] = {cls / (nph[1] * nph[2]), (cls / nph[2]) % nph[1], cls % nph[2]};
    /* taps of the class (in kk order), their shift and packed weights */
    int64_t p = J.coff[cls], kidx = 0;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k[3] = {kk / (g->K[1] * g->K[2]), (kk / g->K[2]) % g->K[1], kk % g->K[2]}, m[3];
      int ok = 1;
      for (int d = 0; d < 3; ++d) {
        ok &= (k[d] * g->dl[d]) % g->st[d] == r[d];
        m[d] = (k[d] * g->dl[d] - r[d]) / g->st[d];
      }
      if (!ok) continue;
      const int64_t sh = ((m[0] * J.Qp[1] + m[1]) * J.Qp[2] + m[2]) * g->O, wo = gk_woff(g, kk);
      for (int64_t o = 0; o < g->Og; ++o, ++p) {
        J.aoff[p] = o - sh;
        J.boff[p] = (p - J.coff[cls]) * J.Cpg;
      }
      for (int64_t grp = 0; grp < g->G; ++grp)
        for (int64_t o = 0; o < g->Og; ++o) {
          float* d = J.wp + J.cwp[cls] + (grp * J.ckc[cls] + kidx * g->Og + o) * J.Cpg;
          const int64_t wb = (grp * g->Og + o) * g->ws[0] + wo;
          for (int64_t c = 0; c < J.Cpg; ++c) d[c] = c < g->Cg ? ld1_f32(g->wd, wb + c * g->ws[1], g->wdt) : 0.0f;
        }
      ++kidx;
    }
    /* rows: positions of the class, sample-major */
    int64_t e = crow[cls];
    int64_t i00[3]; /* first position of the class per dim: (i + pd) mod st == r; then every st-th */
    for (int d = 0; d < 3; ++d) i00[d] = ((r[d] - g->pd[d]) % g->st[d] + g->st[d]) % g->st[d];
    /* base(i) = (i + pd - r) / st steps by 1 as i steps by st (no division per row: they cost more than a small
     * map's kernel); along the row by steps too */
    const int64_t b00 = (i00[0] + g->pd[0] - r[0]) / g->st[0] + J.Pl[0], b10 = (i00[1] + g->pd[1] - r[1]) / g->st[1] + J.Pl[1];
    const int64_t b2 = (i00[2] + g->pd[2] - r[2]) / g->st[2] + J.Pl[2], O = g->O, st2 = g->st[2];
    for (int64_t n = 0; n < g->N; ++n)
      for (int64_t i0 = i00[0], b0 = b00; i0 < g->S[0]; i0 += g->st[0], ++b0) {
        for (int64_t i1 = i00[1], b1 = b10; i1 < g->S[1]; i1 += g->st[1], ++b1) {
          int64_t a = (n * J.Lq + (b0 * J.Qp[1] + b1) * J.Qp[2] + b2) * O;
          int64_t xo = n * g->xs[0] + i0 * g->xs[2] + i1 * g->xs[3] + i00[2] * g->xs[4], xstep = st2 * g->xs[4];
          int64_t zo = n * SS + (i0 * g->S[1] + i1) * g->S[2] + i00[2];
          for (int64_t i2 = i00[2]; i2 < g->S[2]; i2 += st2, ++e, a += O, xo += xstep, zo += st2) {
            J.ash[e] = a;
            J.rw[e] = xo;
            J.rz[e] = zo;
          }
        }
      }
    /* padding rows read a real row of the class (row 0 minus a tap shift would lie before yT) */
    for (; e < crow[cls + 1]; ++e) { J.ash[e] = J.ash[crow[cls]]; J.rw[e] = -1; J.rz[e] = 0; }
    for (int64_t r0 = crow[cls]; r0 < crow[cls + 1]; r0 += GK_MR) {
      J.tiles[2 * (r0 / GK_MR)] = cls;
      J.tiles[2 * (r0 / GK_MR) + 1] = r0;
    }
  }
  tpu_pool_parallel_for(J.nrb * g->G * J.ncb, 1, bi_worker, &J);
  if (J.z) st = gk_unpack(J.z, g->N, SS, g->S, g->xs, g->G, g->Cg, J.Cpg, (float*)(void*)g->xd);
done:
  conv_free(J.ckc); conv_free(crow); conv_free(J.yT); conv_free(J.wp); conv_free(J.aoff); conv_free(J.z);
  return st;
}

static int64_t view_numel(const tpu_host_view_t* v) {
  int64_t n = 1;
  for (int d = 0; d < v->rank; ++d) n *= v->sizes[d];
  return n;
}

/* +0.0 into every element of a float view (all-zero bits), a run of its contiguous innermost dims at a time */
static void conv_zero_view(const tpu_host_view_t* v) {
  int r = v->rank - 1;
  const int64_t es = (int64_t)tpu_dtype_size(v->dtype);
  int64_t W = v->sizes[r], ws = v->strides[r];
  while (r > 0 && ws == 1 && v->strides[r - 1] == W) W *= v->sizes[--r];
  const int64_t rows = W > 0 ? view_numel(v) / W : 0;
  int64_t idx[TPU_MAX_DIMS] = {0};
  for (int64_t i = 0; i < rows; ++i) {
    int64_t off = 0;
    for (int d = 0; d < r; ++d) off += idx[d] * v->strides[d];
    if (ws == 1) memset(v->data + off * es, 0, (size_t)(W * es));
    else for (int64_t j = 0; j < W; ++j) memset(v->data + (off + j * ws) * es, 0, (size_t)es);
    for (int d = r - 1; d >= 0; --d) { if (++idx[d] < v->sizes[d]) break; idx[d] = 0; }
  }
}

/* Taps that read only padding at every output position add nothing (a 3x3 kernel with pad 1 on a 1x1 map: 8
 * of 9, ResNet's last stage). Per spatial dim the kernel is cropped to the taps [klo, khi] that read input
 * somewhere: the weight view (*wv) is sliced and the padding lowered by klo * dl (pd2), kept only where the
 * cropped geometry still has its right padding <= its left one (the padded-grid kernels' assumption). Returns
 * 1 when it cropped, -1 when no tap reads input (the result is all zeros), else 0. Like the _ref twin, the
 * dropped taps multiply nothing (an inf weight over padding gives no NaN). */
static int conv_crop_taps(int kind, int nsp, const int64_t* stride, const int64_t* padding, const int64_t* dilation,
                          const tpu_host_view_t* a, const tpu_host_view_t* b, const tpu_host_view_t* out,
                          tpu_host_view_t* wv, int64_t* pd2) {
  const tpu_host_view_t* x = kind == TPU_HOST_CONV_BWD_INPUT ? out : a;
  const tpu_host_view_t* y = kind == TPU_HOST_CONV_FWD ? out : kind == TPU_HOST_CONV_BWD_INPUT ? a : b;
  const tpu_host_view_t* w = kind == TPU_HOST_CONV_BWD_WEIGHT ? out : b;
  int cropped = 0;
  *wv = *w;
  for (int d = 0; d < nsp; ++d) {
    const int64_t S = x->sizes[2 + d], Q = y->sizes[2 + d], K = w->sizes[2 + d];
    const int64_t st = stride[d], pd = padding[d], dl = dilation[d];
    int64_t klo = -1, khi = -1;
    pd2[d] = pd;
    for (int64_t k = 0; k < K; ++k) { /* the first output q with q st - pd + k dl >= 0 reads inside? */
      const int64_t lo = pd - k * dl, q = lo <= 0 ? 0 : (lo + st - 1) / st;
      if (q < Q && q * st - pd + k * dl <= S - 1) { if (klo < 0) klo = k; khi = k; }
    }
    if (klo < 0) return -1;
    const int64_t p2 = pd - klo * dl, right = (Q - 1) * st + (khi - klo) * dl - p2 - (S - 1);
    if ((klo == 0 && khi == K - 1) || p2 < 0 || right > p2) continue;
    pd2[d] = p2;
    wv->data += klo * w->strides[2 + d] * (int64_t)tpu_dtype_size(w->dtype);
    wv->sizes[2 + d] = khi - klo + 1;
    cropped = 1;
  }
  return cropped;
}


tpu_status_t tpu_host_conv_run(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                               const int64_t* dilation, int64_t groups, const tpu_host_view_t* a,
                               const tpu_host_view_t* b, const tpu_host_view_t* out) {
  return tpu_host_conv_run_prec(kind, nsp, stride, padding, dilation, groups, 0, a, b, out);
}

tpu_status_t tpu_host_conv_run_prec(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                                    const int64_t* dilation, int64_t groups, int precision,
                                    const tpu_host_view_t* a, const tpu_host_view_t* b,
                                    const tpu_host_view_t* out) {
  conv_geo_t g;
  TPU_RETURN_IF_ERROR(conv_geo(kind, nsp, stride, padding, dilation, groups, a, b, out, &g));
  int dt = out->dtype;
  int ok = dt == TPU_DTYPE_F64 ? a->dtype == dt && b->dtype == dt
                               : dt == TPU_DTYPE_F32 && conv_f32_operand(a->dtype) && conv_f32_operand(b->dtype);
  if (!ok) return TPU_ERR(UNSUPPORTED, "host: convolution of %s", tpu_dtype_name(a->dtype));
  g.prec = a->dtype == TPU_DTYPE_F32 && b->dtype == TPU_DTYPE_F32 ? precision : 0; /* f32 operands only */
  /* bf16 operands: the f32 copies made of them (im2col, packed weight, gy gathers) hold exact bf16
   * values, so DEFAULT (f32 rounded to bf16) changes no product and lets the GEMM take its bf16
   * kernel (vdpbf16ps, gemm.h) where the CPU has one. */
  if (a->dtype == TPU_DTYPE_BF16 && b->dtype == TPU_DTYPE_BF16) g.prec = TPU_IR_PRECISION_DEFAULT;
  if (view_numel(out) == 0) return TPU_OK;
  {
    tpu_host_view_t wv;
    int64_t pd2[3];
    const int crop = conv_crop_taps(kind, nsp, stride, padding, dilation, a, b, out, &wv, pd2);
    if (crop < 0 || (crop > 0 && kind == TPU_HOST_CONV_BWD_WEIGHT)) conv_zero_view(out); /* gw: the dropped taps */
    if (crop > 0)
      return kind == TPU_HOST_CONV_BWD_WEIGHT
                 ? tpu_host_conv_run_prec(kind, nsp, stride, pd2, dilation, groups, precision, a, b, &wv)
                 : tpu_host_conv_run_prec(kind, nsp, stride, pd2, dilation, groups, precision, a, &wv, out);
    if (crop < 0) return TPU_OK;
  }
  if (kind == TPU_HOST_CONV_BWD_INPUT && g_flip_bwd_input) {
    /* Stride 1: gx = conv(gy, w') with w'[c, o, k] = w[o, c, K-1-k] and padding d(K-1) - p, a
     * forward conv (gathers, output written in place) instead of GEMM + col2im scatter. */
    int flip = g.G == 1 && (g.C >= 8 || g.C >= g.O); /* fewer gx channels: a GEMM m too short */
    int64_t pd2[3];
    tpu_host_view_t wv = *b;
    for (int d = 0; d < nsp && flip; ++d) {
      int64_t K = b->sizes[2 + d], span = dilation[d] * (K - 1);
      pd2[d] = span - padding[d];
      flip = stride[d] == 1 && pd2[d] >= 0 && out->sizes[2 + d] == a->sizes[2 + d] + span - 2 * padding[d];
      wv.data += (K - 1) * b->strides[2 + d] * (int64_t)tpu_dtype_size(b->dtype);
      wv.strides[2 + d] = -b->strides[2 + d];
    }
    if (flip) {
      wv.sizes[0] = b->sizes[1]; wv.sizes[1] = b->sizes[0];
      wv.strides[0] = b->strides[1]; wv.strides[1] = b->strides[0];
      return tpu_host_conv_run_prec(TPU_HOST_CONV_FWD, nsp, stride, pd2, dilation, 1, precision, a, &wv, out);
    }
  }
  if (dt == TPU_DTYPE_F32 && kind == TPU_HOST_CONV_BWD_INPUT && conv_bi_ok(&g, 0)) return conv_bi_run(&g);
  if (dt == TPU_DTYPE_F32 && conv_direct_ok(kind, &g)) return conv_direct_run(&g);
  if (dt == TPU_DTYPE_F32 && conv_dw_ok(kind, &g)) return conv_dw_run(&g);
  conv_gk_job_t gk;
  if (dt == TPU_DTYPE_F32 && conv_gk_plan(kind, &g, &gk)) return conv_gk_run(kind, &gk);
  conv_plan(kind, &g, tpu_dtype_size(dt));
  return dt == TPU_DTYPE_F32 ? conv_run_f32(kind, &g) : conv_run_f64(kind, &g);
}

/* ---- reference: direct loops, double accumulator, any floating dtype */
static double ld(const char* d, int dt, int64_t off) {
  return tpu_host_load_f64(d + off * (int64_t)tpu_dtype_size(dt), dt);
}
tpu_status_t tpu_host_conv_run_ref(int kind, int nsp, const int64_t* stride, const int64_t* padding,
                                   const int64_t* dilation, int64_t groups, const tpu_host_view_t* a,
                                   const tpu_host_view_t* b, const tpu_host_view_t* out) {
  conv_geo_t g;
  TPU_RETURN_IF_ERROR(conv_geo(kind, nsp, stride, padding, dilation, groups, a, b, out, &g));
  int xt = kind == TPU_HOST_CONV_BWD_INPUT ? out->dtype : a->dtype;
  int wt = kind == TPU_HOST_CONV_FWD ? b->dtype : kind == TPU_HOST_CONV_BWD_INPUT ? b->dtype : out->dtype;
  int yt = kind == TPU_HOST_CONV_FWD ? out->dtype : b->dtype;
  if (kind == TPU_HOST_CONV_BWD_INPUT) yt = a->dtype;
  int64_t SS = g.S[0] * g.S[1] * g.S[2];
#define XOFF(n, c, i0, i1, i2) ((n) * g.xs[0] + (c) * g.xs[1] + (i0) * g.xs[2] + (i1) * g.xs[3] + (i2) * g.xs[4])
#define WOFF(o, c, k0, k1, k2) ((o) * g.ws[0] + (c) * g.ws[1] + (k0) * g.ws[2] + (k1) * g.ws[3] + (k2) * g.ws[4])
#define YOFF(n, o, q0, q1, q2) ((n) * g.ys[0] + (o) * g.ys[1] + (q0) * g.ys[2] + (q1) * g.ys[3] + (q2) * g.ys[4])
  if (kind == TPU_HOST_CONV_FWD) {
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t p = 0; p < g.P; ++p) {
          int64_t q[3] = {p / (g.Q[1] * g.Q[2]), (p / g.Q[2]) % g.Q[1], p % g.Q[2]};
          int64_t grp = o / g.Og;
          double acc = 0;
          for (int64_t c = 0; c < g.Cg; ++c)
            for (int64_t kk = 0; kk < g.KK; ++kk) {
              int64_t k[3] = {kk / (g.K[1] * g.K[2]), (kk / g.K[2]) % g.K[1], kk % g.K[2]}, i[3];
              int ok = 1;
              for (int d = 0; d < 3; ++d) {
                i[d] = q[d] * g.st[d] - g.pd[d] + k[d] * g.dl[d];
                ok &= i[d] >= 0 && i[d] < g.S[d];
              }
              if (ok) acc += ld(g.xd, xt, XOFF(n, grp * g.Cg + c, i[0], i[1], i[2])) *
                             ld(g.wd, wt, WOFF(o, c, k[0], k[1], k[2]));
            }
          tpu_host_store_f64(g.yd + YOFF(n, o, q[0], q[1], q[2]) * (int64_t)tpu_dtype_size(out->dtype),
                             out->dtype, acc);
        }
  } else if (kind == TPU_HOST_CONV_BWD_INPUT) {
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t s = 0; s < SS; ++s) {
          int64_t i[3] = {s / (g.S[1] * g.S[2]), (s / g.S[2]) % g.S[1], s % g.S[2]};
          int64_t grp = c / g.Cg;
          double acc = 0;
          for (int64_t o = grp * g.Og; o < (grp + 1) * g.Og; ++o)
            for (int64_t kk = 0; kk < g.KK; ++kk) {
              int64_t k[3] = {kk / (g.K[1] * g.K[2]), (kk / g.K[2]) % g.K[1], kk % g.K[2]}, q[3];
              int ok = 1;
              for (int d = 0; d < 3; ++d) {
                int64_t num = i[d] + g.pd[d] - k[d] * g.dl[d];
                ok &= num >= 0 && num % g.st[d] == 0 && num / g.st[d] < g.Q[d];
                q[d] = ok ? num / g.st[d] : 0;
              }
              if (ok) acc += ld(g.yd, yt, YOFF(n, o, q[0], q[1], q[2])) *
                             ld(g.wd, wt, WOFF(o, c - grp * g.Cg, k[0], k[1], k[2]));
            }
          tpu_host_store_f64(g.xd + XOFF(n, c, i[0], i[1], i[2]) * (int64_t)tpu_dtype_size(out->dtype),
                             out->dtype, acc);
        }
  } else {
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t c = 0; c < g.Cg; ++c)
        for (int64_t kk = 0; kk < g.KK; ++kk) {
          int64_t k[3] = {kk / (g.K[1] * g.K[2]), (kk / g.K[2]) % g.K[1], kk % g.K[2]};
          int64_t grp = o / g.Og;
          double acc = 0;
          for (int64_t n = 0; n < g.N; ++n)
            for (int64_t p = 0; p < g.P; ++p) {
              int64_t q[3] = {p / (g.Q[1] * g.Q[2]), (p / g.Q[2]) % g.Q[1], p % g.Q[2]}, i[3];
              int ok = 1;
              for (int d = 0; d < 3; ++d) {
                i[d] = q[d] * g.st[d] - g.pd[d] + k[d] * g.dl[d];
                ok &= i[d] >= 0 && i[d] < g.S[d];
              }
              if (ok) acc += ld(g.yd, yt, YOFF(n, o, q[0], q[1], q[2])) *
                             ld(g.xd, xt, XOFF(n, grp * g.Cg + c, i[0], i[1], i[2]));
            }
          tpu_host_store_f64(g.wd + WOFF(o, c, k[0], k[1], k[2]) * (int64_t)tpu_dtype_size(out->dtype),
                             out->dtype, acc);
        }
  }
#undef XOFF
#undef WOFF
#undef YOFF
  return TPU_OK;
}

/* ---- IR entry points */
tpu_status_t tpu_host_k_conv(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* w,
                             const tpu_host_view_t* out) {
  return tpu_host_conv_run_prec(TPU_HOST_CONV_FWD, (int)op->i1, op->a[0], op->a[1], op->a[2], op->i0, (int)op->prec,
                                x, w, out);
}

tpu_status_t tpu_host_k_conv_custom(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out) {
  if (n != 2) return TPU_ERR(INTERNAL, "host: convolution backward takes 2 operands, got %d", n);
  int kind = op->i0 == TPU_IR_CUSTOM_CONV_BWD_INPUT ? TPU_HOST_CONV_BWD_INPUT : TPU_HOST_CONV_BWD_WEIGHT;
  return tpu_host_conv_run_prec(kind, out->rank - 2, op->a[0], op->a[1], op->a[2], op->i1, (int)op->prec, &xs[0],
                                &xs[1], out);
}
