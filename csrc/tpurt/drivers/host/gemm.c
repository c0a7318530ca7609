/* gemm.c — GEMM driver: dispatch, cache blocking, packing, threading; portable and reference kernels.
 *
 * Loop nest (BLIS/GotoBLAS), per thread tile C[i0:i1, j0:j1]:
 *   jc over n by NC:       B panel (kc, nc) packed into NR-wide strips  -> L3
 *     pc over k by KC:     first pass applies beta, later ones accumulate
 *       ic over m by MC:   A block (mc, kc) packed into MR-high strips  -> L2
 *         jr by NR, ir by MR: microkernel, B strip (kc, NR) stays in L1 (or L2) across ir
 * Threads get disjoint 2-D tiles of C and pack their own panels: no barriers, and packing is
 * O((m + n) k) against O(m n k) work. A tile with one k block and a small B (the minGPT backward's dW = dY^T X,
 * dX = dY W, attention's 64 x (16 x 8 x 16)) takes the kernel's small path instead: A read in place, row-major B
 * in place, no 14 x 32 padding (gemm_tile_small; AVX2: beta 0 only); same bits. Legend: see gemm.h. */
#include "drivers/host/gemm.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/common.h"
#include "runtime/runtime.h"

#define GEMM_ALIGN 64
#define GEMM_STACK_BYTES 16384           /* packing buffers of small problems live on the stack */
#define GEMM_PAR_GRAIN (96 * 96 * 96)     /* m*n*k per thread below which splitting does not pay */
#define GEMM_BATCH_SMALL (192 * 192 * 192) /* m*n*k below which a batch is split over matrices */
#define GEMM_SMALL_B_BYTES (256 * 1024) /* the small path's B (k, n) part at most (L2) */
#define GEMM_TINY_WIDEN (16 * 16 * 64) /* m*n*k of bf16/f16 products widened into the small path */
#define GEMV_CHUNK 4096                  /* max columns per gemv task (acc lives on the stack) */
/* A tile of C at most this many columns wide (twice that for row-major A; bf16 kernels: row-major A at any
 * width, see gemm_plan) reads A in place (the kernel's ukr_a) instead of packing it: a packed A strip would serve only a few B strips, and packing it cost
 * about as much as the multiply (attention's bmm 64x64 @ 64x32 on AVX2: pack_a 0.7-0.9x the microkernel's
 * time; 128 x (64x32x64) one thread 560-740 -> 465 us; 2048x128x128 row-major A 900 -> 830 us). Strided
 * A columns over a long k (weight gradients, A^T with k = 2048) stay packed: the in-place reads then
 * conflict in L1 (4-10% slower). */
#define GEMM_DIRECT_A_MAX_N 64

static const float kOneF = 1.0f;
static const double kOneD = 1.0;

/* ------------------------------------------------------------------ reference (naive) */

void tpu_host_sgemm_ref(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs,
                        int64_t a_cs, const float* b, int64_t b_rs, int64_t b_cs, float beta,
                        float* c, int64_t c_rs, int64_t c_cs) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      if (alpha != 0.0f)
        for (int64_t p = 0; p < k; ++p) s += (double)a[i * a_rs + p * a_cs] * (double)b[p * b_rs + j * b_cs];
      double r = (double)alpha * s;
      if (beta != 0.0f) r += (double)beta * (double)c[i * c_rs + j * c_cs];
      c[i * c_rs + j * c_cs] = (float)r;
    }
}

void tpu_host_dgemm_ref(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs,
                        int64_t a_cs, const double* b, int64_t b_rs, int64_t b_cs, double beta,
                        double* c, int64_t c_rs, int64_t c_cs) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      if (alpha != 0.0)
        for (int64_t p = 0; p < k; ++p) s += a[i * a_rs + p * a_cs] * b[p * b_rs + j * b_cs];
      double r = alpha * s;
      if (beta != 0.0) r += beta * c[i * c_rs + j * c_cs];
      c[i * c_rs + j * c_cs] = r;
    }
}

/* ------------------------------------------------------------------ portable kernels */

/* Generic strip packing: dst[strip s][p][q] = src[(s*h + q)*rs + p*cs], zero past `rows`.
 * The two layouts that matter get their own loops: strip-contiguous (rs == 1: copies) and
 * k-contiguous (cs == 1: a transpose reading h sequential streams). */
#define GEMM_DEFINE_PACK(NAME, T)                                                                \
  static void NAME(int h, int64_t rows, int64_t kc, const T* src, int64_t rs, int64_t cs, T* dst) { \
    for (int64_t i = 0; i < rows; i += h, dst += (int64_t)h * kc) {                              \
      int r = (int)TPU_MIN((int64_t)h, rows - i);                                                \
      const T* s = src + i * rs;                                                                 \
      if (rs == 1) {                                                                             \
        for (int64_t p = 0; p < kc; ++p) {                                                       \
          const T* sp = s + p * cs;                                                              \
          T* d = dst + p * h;                                                                    \
          for (int q = 0; q < r; ++q) d[q] = sp[q];                                              \
          for (int q = r; q < h; ++q) d[q] = 0;                                                  \
        }                                                                                        \
      } else {                                                                                   \
        for (int q = 0; q < r; ++q) {                                                            \
          const T* sq = s + q * rs;                                                              \
          if (cs == 1)                                                                           \
            for (int64_t p = 0; p < kc; ++p) dst[p * h + q] = sq[p];                             \
          else                                                                                   \
            for (int64_t p = 0; p < kc; ++p) dst[p * h + q] = sq[p * cs];                        \
        }                                                                                        \
        if (r < h)                                                                               \
          for (int64_t p = 0; p < kc; ++p)                                                       \
            for (int q = r; q < h; ++q) dst[p * h + q] = 0;                                      \
      }                                                                                          \
    }                                                                                            \
  }
GEMM_DEFINE_PACK(pack_generic_f32, float)
GEMM_DEFINE_PACK(pack_generic_f64, double)

/* Portable microkernel: a (MR, NR) accumulator tile the compiler keeps in (SSE) registers. */
#define GEMM_DEFINE_UKR(NAME, T, MR, NR)                                                         \
  static void NAME(int64_t kc, const void* ap_, const void* bp_, void* c_, int64_t c_rs,        \
                   int64_t c_cs, int mr, int nr, const void* alpha_, const void* beta_) {        \
    const T* ap = (const T*)ap_;                                                                 \
    const T* bp = (const T*)bp_;                                                                 \
    T* c = (T*)c_;                                                                               \
    T acc[MR][NR];                                                                               \
    for (int i = 0; i < MR; ++i)                                                                 \
      for (int j = 0; j < NR; ++j) acc[i][j] = 0;                                                \
    for (int64_t p = 0; p < kc; ++p, ap += MR, bp += NR)                                         \
      for (int i = 0; i < MR; ++i)                                                               \
        for (int j = 0; j < NR; ++j) acc[i][j] += ap[i] * bp[j];                                 \
    const T alpha = *(const T*)alpha_, beta = *(const T*)beta_;                                  \
    for (int i = 0; i < mr; ++i)                                                                 \
      for (int j = 0; j < nr; ++j) {                                                             \
        T* cij = c + i * c_rs + j * c_cs;                                                        \
        *cij = beta == 0 ? alpha * acc[i][j] : alpha * acc[i][j] + beta * *cij;                  \
      }                                                                                          \
  }
GEMM_DEFINE_UKR(ukr_portable_f32, float, 4, 8)
GEMM_DEFINE_UKR(ukr_portable_f64, double, 4, 4)

static void gemv_rows_portable(int64_t n, int64_t k, const float* x, int64_t xs, const float* b,
                               int64_t b_rs, float* acc) {
  for (int64_t p = 0; p < k; ++p) {
    const float xp = x[p * xs];
    const float* bp = b + p * b_rs;
    for (int64_t j = 0; j < n; ++j) acc[j] += xp * bp[j];
  }
}

static float sdot_portable(int64_t k, const float* x, const float* y) {
  float s[8] = {0};
  int64_t p = 0;
  for (; p + 8 <= k; p += 8)
    for (int q = 0; q < 8; ++q) s[q] += x[p + q] * y[p + q];
  for (; p < k; ++p) s[0] += x[p] * y[p];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static const tpu_host_gemm_kernel_t kSgemmPortable = {
    .name = "portable 4x8", .elem_size = 4, .mr = 4, .nr = 8, .kc = 256, .mc = 128, .nc = 2048,
    .ukr = ukr_portable_f32, .gemv_rows = gemv_rows_portable, .sdot = sdot_portable};
static const tpu_host_gemm_kernel_t kDgemmPortable = {
    .name = "portable 4x4", .elem_size = 8, .mr = 4, .nr = 4, .kc = 256, .mc = 96, .nc = 1024,
    .ukr = ukr_portable_f64};

/* ------------------------------------------------------------------ operand formats
 * How the driver makes a packed f32 value from a source element: as is (f32, f64), widened
 * exactly (bf16, f16), or split for the bf16 precisions of f32 operands (HI = bf16(x) rounded to
 * nearest even, LO = bf16(x - HI)). So that inf survives HIGH (inf * 0 would be NaN), LO is 0
 * where HI is infinite and the cross terms use HIF: HI with infinities replaced by 0. */
enum { FMT_PLAIN = 0, FMT_BF16, FMT_F16, FMT_HI, FMT_LO, FMT_HIF };

static inline float bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u; /* NaN stays NaN (quiet) */
  else u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  memcpy(&r, &u, 4);
  return r;
}

/* dst[i] = f(src[i * step]) for i < n; src is in the format's source type. */
static void fmt_convert(int fmt, const char* src, int64_t step, int64_t n, float* dst) {
  switch (fmt) {
    case FMT_BF16: {
      const uint16_t* s = (const uint16_t*)src;
      if (step == 1)
        for (int64_t i = 0; i < n; ++i) { uint32_t u = (uint32_t)s[i] << 16; memcpy(&dst[i], &u, 4); }
      else
        for (int64_t i = 0; i < n; ++i) { uint32_t u = (uint32_t)s[i * step] << 16; memcpy(&dst[i], &u, 4); }
      break;
    }
    case FMT_F16: {
      const uint16_t* s = (const uint16_t*)src;
      for (int64_t i = 0; i < n; ++i) dst[i] = tpu_f16_to_f32(s[i * step]);
      break;
    }
    case FMT_HI: {
      const float* s = (const float*)src;
      if (step == 1)
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_round(s[i]);
      else
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_round(s[i * step]);
      break;
    }
    case FMT_HIF: {
      const float* s = (const float*)src;
      for (int64_t i = 0; i < n; ++i) {
        float h = bf16_round(s[i * step]);
        dst[i] = (h == INFINITY || h == -INFINITY) ? 0.0f : h;
      }
      break;
    }
    case FMT_LO: {
      const float* s = (const float*)src;
      for (int64_t i = 0; i < n; ++i) {
        float x = s[i * step], h = bf16_round(x), d = x - h;
        dst[i] = (h - h == 0.0f) ? bf16_round(d) : 0.0f; /* h - h != 0: inf or NaN */
      }
      break;
    }
    default: {
      const float* s = (const float*)src;
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * step];
      break;
    }
  }
}

static float fmt_load(int fmt, const char* src, int64_t i) {
  float v;
  fmt_convert(fmt, src + i * (fmt == FMT_BF16 || fmt == FMT_F16 ? 2 : 4), 1, 1, &v);
  return v;
}

static int fmt_of_dtype(int dtype) {
  return dtype == TPU_DTYPE_BF16 ? FMT_BF16 : dtype == TPU_DTYPE_F16 ? FMT_F16 : FMT_PLAIN;
}

/* ------------------------------------------------------------------ dispatch */

static _Atomic int g_isa_limit = TPU_HOST_GEMM_ISA_BEST;
static _Atomic int g_direct_a = GEMM_DIRECT_A_MAX_N;

int tpu_host_gemm_set_direct_a(int max_cols) { return atomic_exchange(&g_direct_a, max_cols < 0 ? GEMM_DIRECT_A_MAX_N : max_cols); }
/* tiles planned with A read in place / with the bf16 store in the kernels, counted only while a test asks
 * (tpu_host_gemm_count_paths): shared atomic adds on every tile's plan would cost the threads of a GEMM */
static _Atomic int g_count_paths;
static _Atomic int64_t g_path_direct_a, g_path_store16, g_path_small;
int tpu_host_gemm_count_paths(int on) { return atomic_exchange(&g_count_paths, on != 0); }
void tpu_host_gemm_path_counts(int64_t* direct_a, int64_t* store16, int64_t* small) {
  *direct_a = atomic_load_explicit(&g_path_direct_a, memory_order_relaxed);
  *store16 = atomic_load_explicit(&g_path_store16, memory_order_relaxed);
  *small = atomic_load_explicit(&g_path_small, memory_order_relaxed);
}

tpu_host_gemm_isa_t tpu_host_gemm_set_isa(tpu_host_gemm_isa_t isa) {
  if ((int)isa < 0 || isa >= TPU_HOST_GEMM_ISA_COUNT) isa = TPU_HOST_GEMM_ISA_BEST;
  return (tpu_host_gemm_isa_t)atomic_exchange(&g_isa_limit, (int)isa);
}

static const tpu_host_gemm_kernel_t* gemm_pick(int elem_size) {
  int limit = atomic_load_explicit(&g_isa_limit, memory_order_relaxed);
#if defined(__x86_64__) || defined(__i386__)
  if (limit >= TPU_HOST_GEMM_ISA_AVX512 && tpu_cpu_has_avx512f())
    return elem_size == 4 ? &tpu_host_sgemm_kernel_avx512 : &tpu_host_dgemm_kernel_avx512;
  if (limit >= TPU_HOST_GEMM_ISA_AVX2 && tpu_cpu_has_avx2_fma())
    return elem_size == 4 ? &tpu_host_sgemm_kernel_avx2 : &tpu_host_dgemm_kernel_avx2;
#else
  (void)limit;
#endif
  return elem_size == 4 ? &kSgemmPortable : &kDgemmPortable;
}

/* TORCH_TPU_GEMM_BF16=0 turns the vdpbf16ps kernel off for the process (read once; torch_tpu
 * validates the value at import). */
static int g_bf16_env = -1;
static int gemm_bf16_env(void) { return tpu_rt_env_switch(&g_bf16_env, "TORCH_TPU_GEMM_BF16", 1); }

/* The vdpbf16ps kernel for an m-row C, when the setting, the environment and the CPU allow it (NULL
 * otherwise): 8-row strips where they pad fewer rows than 14-row ones (m = 64: 64 rows computed, not 70;
 * m = 32: 32, not 42), else 14. Same bits either way (each C element's sum does not depend on the strip). */
static const tpu_host_gemm_kernel_t* gemm_pick_bf16(int64_t m) {
#if defined(__x86_64__) || defined(__i386__)
  if (atomic_load_explicit(&g_isa_limit, memory_order_relaxed) >= TPU_HOST_GEMM_ISA_AVX512BF16 &&
      tpu_cpu_has_avx512bf16() && gemm_bf16_env())
    return (m + 7) / 8 * 8 < (m + 13) / 14 * 14 ? &tpu_host_sbgemm_kernel_avx512bf16_8
                                                 : &tpu_host_sbgemm_kernel_avx512bf16;
#else
  (void)m;
#endif
  return NULL;
}

const char* tpu_host_gemm_isa_name(void) {
  const tpu_host_gemm_kernel_t* kb = gemm_pick_bf16(14);
  return kb ? kb->name : gemm_pick(4)->name;
}

/* ------------------------------------------------------------------ blocked driver */

typedef struct gemm_args_s {
  const tpu_host_gemm_kernel_t* kr;
  int64_t m, n, k;
  const char* a;
  int64_t a_rs, a_cs;
  const char* b;
  int64_t b_rs, b_cs;
  char* c;
  int64_t c_rs, c_cs;
  const void* alpha;
  const void* beta;
  const void* one;
  /* pass t (t < npass) multiplies A in format fa[t] by B in format fb[t], all into C;
   * a_es / b_es: source element sizes (bytes) */
  int npass, fa[3], fb[3];
  int64_t a_es, b_es;
  const tpu_host_gemm_epi_t* epi; /* (optional) per finished block of C */
  int64_t epi_t;                  /* batch index passed to epi */
  int epi_tr;                     /* the driver computes C^T: swap coordinates back */
  int epi_local;                  /* blocks go to a per-thread buffer, not C (see tpu_host_gemm_epi_t) */
} gemm_args_t;

static int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
/* The direct bf16 store (tpu_host_gemm_epi_t.out_bf16) of the block C[t][i0:i0+mb, j0:j0+nb] (C's own
 * coordinates) whose values are at blk[i * rs + j * cs]. */
static void store_bf16_portable(int64_t m, int64_t n, const float* x, int64_t x_rs, int64_t x_cs, const float* bias,
                                int64_t b_cs, uint16_t* out, int64_t o_rs, int64_t o_cs) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float v = x[i * x_rs + j * x_cs];
      out[i * o_rs + j * o_cs] = tpu_f32_to_bf16(bias ? bias[j * b_cs] + v : v);
    }
}
static void gemm_store_bf16(const tpu_host_gemm_epi_t* e, int64_t t, int64_t i0, int64_t j0, int64_t mb, int64_t nb,
                            const float* blk, int64_t rs, int64_t cs) {
  uint16_t* o = e->out_bf16 + t * e->out_bs + i0 * e->out_rs + j0 * e->out_cs;
  const float* bias = e->bias ? e->bias + t * e->bias_bs + j0 * e->bias_cs : NULL;
  if (cs == 1 && e->out_cs == 1 && (!bias || e->bias_cs == 1)) {
#if defined(__x86_64__) || defined(__i386__)
    const int limit = atomic_load_explicit(&g_isa_limit, memory_order_relaxed); /* tests pick each variant */
    if (limit >= TPU_HOST_GEMM_ISA_AVX512BF16 && tpu_cpu_has_avx512bf16()) {
      tpu_host_gemm_store_bf16_avx512bf16(mb, nb, blk, rs, bias, o, e->out_rs);
      return;
    }
    if (limit >= TPU_HOST_GEMM_ISA_AVX512 && tpu_cpu_has_avx512f()) {
      tpu_host_gemm_store_bf16_avx512(mb, nb, blk, rs, bias, o, e->out_rs);
      return;
    }
#endif
    store_bf16_portable(mb, nb, blk, rs, 1, bias, 1, o, e->out_rs, 1); /* unit strides as constants */
    return;
  }
  store_bf16_portable(mb, nb, blk, rs, cs, bias, e->bias_cs, o, e->out_rs, e->out_cs);
}

/* C[i0:i0+mb, j0:j0+nb] (the driver's coordinates) is final: run the epilogue on it. */
static void gemm_epi_at(const gemm_args_t* g, int64_t i0, int64_t j0, int64_t mb, int64_t nb, const float* blk,
                        int64_t rs, int64_t cs) {
  if (g->epi->out_bf16) {
    if (g->epi_tr) gemm_store_bf16(g->epi, g->epi_t, j0, i0, nb, mb, blk, cs, rs);
    else gemm_store_bf16(g->epi, g->epi_t, i0, j0, mb, nb, blk, rs, cs);
    return;
  }
  if (g->epi_tr) g->epi->fn(g->epi->ctx, g->epi_t, j0, i0, nb, mb, blk, cs, rs);
  else g->epi->fn(g->epi->ctx, g->epi_t, i0, j0, mb, nb, blk, rs, cs);
}
static void gemm_epi(const gemm_args_t* g, int64_t i0, int64_t j0, int64_t mb, int64_t nb) {
  if (!g->epi) return;
  gemm_epi_at(g, i0, j0, mb, nb, (const float*)g->c + i0 * g->c_rs + j0 * g->c_cs, g->c_rs, g->c_cs);
}
static int64_t round_up(int64_t x, int64_t y) { return ceil_div(x, y) * y; }
/* Even split of `len` into blocks of at most `max`, each a multiple of `unit`. */
static int64_t even_block(int64_t len, int64_t max, int64_t unit) {
  return round_up(ceil_div(len, ceil_div(len, max)), unit);
}

static void gemm_pack(const tpu_host_gemm_kernel_t* kr, tpu_host_gemm_pack_fn fn, int h,
                      int64_t rows, int64_t kc, const char* src, int64_t rs, int64_t cs, char* dst) {
  if (fn)
    fn(rows, kc, src, rs, cs, dst);
  else if (kr->elem_size == 4)
    pack_generic_f32(h, rows, kc, (const float*)src, rs, cs, (float*)dst);
  else
    pack_generic_f64(h, rows, kc, (const double*)src, rs, cs, (double*)dst);
}

/* Packed operand layout: element bytes, and kc rounded up to whole k groups (bf16 pairs). */
static int64_t pack_es(const tpu_host_gemm_kernel_t* kr) { return kr->pack_size ? kr->pack_size : kr->elem_size; }
static int64_t pack_kc(const tpu_host_gemm_kernel_t* kr, int64_t kc) { return kr->kunit > 1 ? round_up(kc, kr->kunit) : kc; }

/* f32 values that are exactly bf16 (the FMT_HI/LO/HIF conversions) -> their bf16 bits, in place:
 * element i moves from byte 4i to byte 2i, so a front-to-back pass never overwrites unread input. */
static void narrow_bf16_inplace(float* x, int64_t n) {
  uint16_t* d = (uint16_t*)x;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    d[i] = (uint16_t)(u >> 16);
  }
}

/* Rows converted per step by gemm_pack_fmt: whole strips, about 64 rows. */
static int64_t cvt_rows(int h) { return (int64_t)h * TPU_MAX(1, 64 / h); }

/* gemm_pack from a source in format fmt (element size ses): rows are converted to f32 in
 * chunks of whole strips into tmp (in the source's orientation, so the kernel's vectorized
 * copies and transposes still apply), then packed from there. The bf16 kernel (pack_size 2)
 * packs bf16 sources directly, HI with fn_hi (rounding while packing) and LO/HIF after narrowing
 * tmp to bf16. */
static void gemm_pack_fmt(const tpu_host_gemm_kernel_t* kr, tpu_host_gemm_pack_fn fn, tpu_host_gemm_pack_fn fn_hi, int h, int64_t rows,
                          int64_t kc, const char* src, int64_t rs, int64_t cs, int fmt, int64_t ses,
                          char* dst, float* tmp) {
  const int bf16_kernel = kr->pack_size == 2;
  if (fmt == FMT_PLAIN || (bf16_kernel && fmt == FMT_BF16)) {
    gemm_pack(kr, fn, h, rows, kc, src, rs, cs, dst);
    return;
  }
  if (bf16_kernel && fmt == FMT_HI && fn_hi) {
    fn_hi(rows, kc, src, rs, cs, dst);
    return;
  }
  const int64_t ch = cvt_rows(h);
  for (int64_t r0 = 0; r0 < rows; r0 += ch) {
    const int64_t nr = TPU_MIN(ch, rows - r0);
    const char* s = src + r0 * rs * ses;
    int64_t trs, tcs;
    if (rs == 1 && cs != 1) { /* rows contiguous for each p: tmp (kc, nr) */
      for (int64_t p = 0; p < kc; ++p) fmt_convert(fmt, s + p * cs * ses, 1, nr, tmp + p * nr);
      trs = 1, tcs = nr;
    } else { /* tmp (nr, kc) */
      for (int64_t r = 0; r < nr; ++r) fmt_convert(fmt, s + r * rs * ses, cs, kc, tmp + r * kc);
      trs = kc, tcs = 1;
    }
    if (bf16_kernel) narrow_bf16_inplace(tmp, nr * kc);
    gemm_pack(kr, fn, h, nr, kc, (const char*)tmp, trs, tcs, dst + r0 * pack_kc(kr, kc) * pack_es(kr));
  }
}

typedef struct gemm_plan_s {
  int64_t kc, mc, nc;          /* block sizes for this tile */
  size_t abytes, bbytes;       /* packing buffer sizes */
  size_t tbytes;               /* conversion scratch (formats other than plain) */
  size_t cbytes;               /* epi_local: one (mc, nc) block of C */
  int direct_a;                /* A is read in place (kernel's ukr_a) where its format allows (gemm_direct_fmt) */
  int store16;                 /* the direct bf16 store runs in the kernels (ukr_bf16 / ukr_a_bf16) */
} gemm_plan_t;

/* Pass t's A can be read in place: plain f32 for the f32 kernels, bf16 itself for the bf16 ones. */
static int gemm_direct_fmt(const gemm_args_t* g, int t) {
  return g->kr->pack_size == 2 ? g->fa[t] == FMT_BF16 : g->fa[t] == FMT_PLAIN;
}


static int gemm_needs_cvt(const gemm_args_t* g) {
  for (int t = 0; t < g->npass; ++t)
    if (g->fa[t] != FMT_PLAIN || g->fb[t] != FMT_PLAIN) return 1;
  return 0;
}

/* A tiny product (m n k <= GEMM_TINY_WIDEN) of bf16 / f16 operands (one pass, no HI/LO split) runs on the f32
 * kernel's small path with both operands widened exactly into f32 scratch first (gemm_tile_small): packing
 * k-pairs for the vdpbf16ps kernel and planning its tiles cost several times such a product (minGPT's bf16
 * attention 64 x (16x8x16): ~245 ns a matrix). Chosen from the shape and formats alone, so every execution mode
 * takes the same kernel for the same product. */
static int gemm_widen_tiny(const gemm_args_t* g) {
  if (g->kr->elem_size != 4 || g->kr->pack_size == 2 || g->npass != 1) return 0;
  const int fa = g->fa[0], fb = g->fb[0];
  if ((fa != FMT_PLAIN && fa != FMT_BF16 && fa != FMT_F16) || (fb != FMT_PLAIN && fb != FMT_BF16 && fb != FMT_F16))
    return 0;
  return (double)g->m * (double)g->n * (double)g->k <= GEMM_TINY_WIDEN;
}

static gemm_plan_t gemm_plan(const gemm_args_t* g, int64_t rows, int64_t cols) {
  const tpu_host_gemm_kernel_t* kr = g->kr;
  gemm_plan_t pl;
  const int rm = kr->kc_rm && g->a_cs == 1 && g->k > kr->kc; /* layout only: bf16/f16 A = its widened f32 copy, bitwise */
  pl.kc = even_block(g->k, rm ? kr->kc_rm : kr->kc, TPU_MAX(kr->kunit, 1));
  pl.mc = even_block(rows, rm ? kr->mc_rm : kr->mc, kr->mr);
  pl.nc = even_block(cols, kr->nc, kr->nr);
  pl.abytes = (size_t)round_up(pl.mc * pack_kc(kr, pl.kc) * pack_es(kr), GEMM_ALIGN);
  pl.bbytes = (size_t)round_up(pl.nc * pack_kc(kr, pl.kc) * pack_es(kr), GEMM_ALIGN);
  pl.tbytes = gemm_needs_cvt(g)
                  ? (size_t)round_up(TPU_MAX(cvt_rows(kr->mr), cvt_rows(kr->nr)) * pl.kc * 4, GEMM_ALIGN)
                  : 0;
  const int64_t dmax = atomic_load_explicit(&g_direct_a, memory_order_relaxed);
  /* bf16 k-pairs from row-major A: in place at any width (one thread, 2048 x 384 x 128: 930 -> 903 us; k = 2048,
   * rows 4 KB apart: 1247 -> 1174 us for n = 128) */
  pl.direct_a = kr->ukr_a && (kr->ukr_a_rm ? g->a_cs == 1 && dmax > 0 : cols <= dmax || (g->a_cs == 1 && cols <= 2 * dmax));
  /* the bf16 store from the kernels' registers: C's own layout (not C^T), contiguous output rows and bias */
  const tpu_host_gemm_epi_t* e = g->epi;
  pl.store16 = g->epi_local && e->out_bf16 && !g->epi_tr && e->out_cs == 1 && (!e->bias || e->bias_cs == 1) &&
               kr->ukr_bf16 && (!pl.direct_a || kr->ukr_a_bf16);
  pl.cbytes = g->epi_local && !pl.store16 ? (size_t)round_up(pl.mc * pl.nc * kr->elem_size, GEMM_ALIGN) : 0;
  if (pl.direct_a && g->npass == 1 && gemm_direct_fmt(g, 0)) pl.abytes = 0; /* A is never packed */
  if (atomic_load_explicit(&g_count_paths, memory_order_relaxed)) {
    if (pl.direct_a && gemm_direct_fmt(g, 0)) atomic_fetch_add_explicit(&g_path_direct_a, 1, memory_order_relaxed);
    if (pl.store16) atomic_fetch_add_explicit(&g_path_store16, 1, memory_order_relaxed);
  }
  return pl;
}

/* C[i0:i1, j0:j1] on the calling thread. buf: abytes + bbytes + tbytes, 64-byte aligned. */
static void gemm_tile(const gemm_args_t* g, const gemm_plan_t* pl, int64_t i0, int64_t i1, int64_t j0,
                      int64_t j1, char* buf) {
  const tpu_host_gemm_kernel_t* kr = g->kr;
  const int64_t es = kr->elem_size, pes = pack_es(kr), MR = kr->mr, NR = kr->nr;
  char* abuf = buf;
  char* bbuf = buf + pl->abytes;
  float* tmp = (float*)(buf + pl->abytes + pl->bbytes);
  char* cbuf = buf + pl->abytes + pl->bbytes + pl->tbytes; /* epi_local: C block, row stride nc */
  for (int64_t jc = j0; jc < j1; jc += pl->nc) {
    const int64_t nc = TPU_MIN(pl->nc, j1 - jc);
    for (int t = 0; t < g->npass; ++t)
      for (int64_t pc = 0; pc < g->k; pc += pl->kc) {
        const int64_t kc = TPU_MIN(pl->kc, g->k - pc), kcp = pack_kc(kr, kc);
        const int direct = pl->direct_a && gemm_direct_fmt(g, t);
        const void* beta = (pc == 0 && t == 0) ? g->beta : g->one;
        gemm_pack_fmt(kr, kr->pack_b, kr->pack_b_hi, kr->nr, nc, kc, g->b + (pc * g->b_rs + jc * g->b_cs) * g->b_es, g->b_cs,
                      g->b_rs, g->fb[t], g->b_es, bbuf, tmp);
        for (int64_t ic = i0; ic < i1; ic += pl->mc) {
          const int64_t mc = TPU_MIN(pl->mc, i1 - ic);
          const char* a0 = g->a + (ic * g->a_rs + pc * g->a_cs) * g->a_es;
          if (!direct)
            gemm_pack_fmt(kr, kr->pack_a, kr->pack_a_hi, kr->mr, mc, kc, a0, g->a_rs, g->a_cs, g->fa[t], g->a_es, abuf, tmp);
          for (int64_t jr = 0; jr < nc; jr += NR) {
            const int nr = (int)TPU_MIN(NR, nc - jr);
            const char* bp = bbuf + jr * kcp * pes;
            const int64_t crs = g->epi_local ? nc : g->c_rs, ccs = g->epi_local ? 1 : g->c_cs;
            char* cj = g->epi_local ? cbuf + jr * es : g->c + (ic * g->c_rs + (jc + jr) * g->c_cs) * es;
            if (pl->store16) { /* one k pass: every tile is final here */
              const tpu_host_gemm_epi_t* e = g->epi;
              uint16_t* o = e->out_bf16 + g->epi_t * e->out_bs + ic * e->out_rs + jc + jr;
              const float* bias = e->bias ? e->bias + g->epi_t * e->bias_bs + jc + jr : NULL;
              const float alpha = *(const float*)g->alpha;
              if (direct)
                for (int64_t ir = 0; ir < mc; ir += MR)
                  kr->ukr_a_bf16(kc, a0 + ir * g->a_rs * g->a_es, g->a_rs, bp, o + ir * e->out_rs, e->out_rs, bias,
                                 (int)TPU_MIN(MR, mc - ir), nr, alpha);
              else
                for (int64_t ir = 0; ir < mc; ir += MR)
                  kr->ukr_bf16(kc, abuf + ir * kcp * pes, 0, bp, o + ir * e->out_rs, e->out_rs, bias,
                               (int)TPU_MIN(MR, mc - ir), nr, alpha);
            } else if (direct)
              for (int64_t ir = 0; ir < mc; ir += MR)
                kr->ukr_a(kc, a0 + ir * g->a_rs * g->a_es, g->a_rs, g->a_cs, bp, cj + ir * crs * es, crs, ccs,
                          (int)TPU_MIN(MR, mc - ir), nr, g->alpha, beta);
            else
              for (int64_t ir = 0; ir < mc; ir += MR)
                kr->ukr(kc, abuf + ir * kcp * pes, bp, cj + ir * crs * es, crs, ccs,
                        (int)TPU_MIN(MR, mc - ir), nr, g->alpha, beta);
          }
          if (t == g->npass - 1 && pc + kc >= g->k && !pl->store16) { /* block is final */
            if (g->epi_local) gemm_epi_at(g, ic, jc, mc, nc, (const float*)cbuf, nc, 1);
            else gemm_epi(g, ic, jc, mc, nc);
          }
        }
      }
  }
}

static void gemm_ref_tile(const gemm_args_t* g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t es = g->kr->elem_size;
  if (gemm_needs_cvt(g)) { /* f32 C; double sums of the converted products, pass by pass */
    const float alpha = *(const float*)g->alpha, beta = *(const float*)g->beta;
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = j0; j < j1; ++j) {
        double sum = 0.0;
        if (alpha != 0.0f)
          for (int t = 0; t < g->npass; ++t)
            for (int64_t p = 0; p < g->k; ++p)
              sum += (double)fmt_load(g->fa[t], g->a, i * g->a_rs + p * g->a_cs) *
                     (double)fmt_load(g->fb[t], g->b, p * g->b_rs + j * g->b_cs);
        float* cij = (float*)g->c + i * g->c_rs + j * g->c_cs;
        double r = (double)alpha * sum;
        if (beta != 0.0f) r += (double)beta * (double)*cij;
        *cij = (float)r;
      }
    gemm_epi(g, i0, j0, i1 - i0, j1 - j0);
    return;
  }
  const char* a = g->a + i0 * g->a_rs * es;
  const char* b = g->b + j0 * g->b_cs * es;
  char* c = g->c + (i0 * g->c_rs + j0 * g->c_cs) * es;
  if (es == 4)
    tpu_host_sgemm_ref(i1 - i0, j1 - j0, g->k, *(const float*)g->alpha, (const float*)a, g->a_rs,
                       g->a_cs, (const float*)b, g->b_rs, g->b_cs, *(const float*)g->beta,
                       (float*)c, g->c_rs, g->c_cs);
  else
    tpu_host_dgemm_ref(i1 - i0, j1 - j0, g->k, *(const double*)g->alpha, (const double*)a, g->a_rs,
                       g->a_cs, (const double*)b, g->b_rs, g->b_cs, *(const double*)g->beta,
                       (double*)c, g->c_rs, g->c_cs);
  gemm_epi(g, i0, j0, i1 - i0, j1 - j0);
}

/* ---- packing-buffer cache. Fresh multi-megabyte buffers cost page faults on every call (glibc
 * hands them back to the kernel), so freed buffers wait in a few lock-free slots for the next
 * caller. A buffer carries its capacity in a 64-byte header. The slots are globals: what they
 * hold stays reachable (no leak reports) and is at most GEMM_CACHE_SLOTS * GEMM_CACHE_MAX. */
#define GEMM_CACHE_SLOTS 16
#define GEMM_CACHE_MAX ((size_t)16 << 20)
static _Atomic(void*) g_buf_cache[GEMM_CACHE_SLOTS];

static char* gemm_buf_get(size_t bytes) {
  for (int i = 0; i < GEMM_CACHE_SLOTS; ++i) {
    if (!atomic_load_explicit(&g_buf_cache[i], memory_order_relaxed)) continue;
    void* blk = atomic_exchange_explicit(&g_buf_cache[i], NULL, memory_order_acquire);
    if (!blk) continue;
    const int64_t cap = (int64_t)*(size_t*)blk;
    if (*(size_t*)blk >= bytes) {
      tpu_rt_scratch_add(cap, -cap); /* scratch, reported by tpu_rt_memory_stats */
      return (char*)blk + GEMM_ALIGN;
    }
    tpu_rt_scratch_add(0, -cap);
    free(blk); /* too small: replace it */
    break;
  }
  void* blk = aligned_alloc(GEMM_ALIGN, (size_t)round_up((int64_t)bytes, GEMM_ALIGN) + GEMM_ALIGN);
  if (!blk) return NULL;
  *(size_t*)blk = bytes;
  tpu_rt_scratch_add((int64_t)bytes, 0);
  return (char*)blk + GEMM_ALIGN;
}

static void gemm_buf_put(char* buf) {
  void* blk = buf - GEMM_ALIGN;
  const int64_t cap = (int64_t)*(size_t*)blk;
  if (*(size_t*)blk <= GEMM_CACHE_MAX)
    for (int i = 0; i < GEMM_CACHE_SLOTS; ++i) {
      void* expected = NULL;
      if (atomic_compare_exchange_strong_explicit(&g_buf_cache[i], &expected, blk, memory_order_release,
                                                  memory_order_relaxed)) {
        tpu_rt_scratch_add(-cap, cap);
        return;
      }
    }
  tpu_rt_scratch_add(-cap, 0);
  free(blk);
}

void* tpu_host_scratch_alloc(size_t bytes) { return gemm_buf_get(bytes ? bytes : 1); }
void tpu_host_scratch_free(void* p) {
  if (p) gemm_buf_put((char*)p);
}

/* dst (rows, cols) row-major = src(i, j) = src[i * rs + j * cs] (elements of es bytes) in format fmt widened to
 * f32: contiguous bf16 rows by the kernel's widen_bf16, other bf16 in one loop (fmt_convert per row costs more
 * than a tiny product's rows). */
static void widen_2d(const tpu_host_gemm_kernel_t* kr, int fmt, const char* src, int64_t es, int64_t rows,
                     int64_t cols, int64_t rs, int64_t cs, float* dst) {
  if (fmt == FMT_BF16 && cs == 1 && kr->widen_bf16) {
    if (rs == cols) /* one contiguous block: as one row (a contiguous matrix of 16 x 8 is 8 vectors, not 16 rows) */
      kr->widen_bf16(1, rows * cols, (const uint16_t*)src, 0, dst);
    else
      kr->widen_bf16(rows, cols, (const uint16_t*)src, rs, dst);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) fmt_convert(fmt, src + i * rs * es, cs, cols, dst + i * cols);
}

/* The tile C[i0:i1, j0:j1] can take the kernel's small path (gemm.h): plain f32 in one k block (the packed
 * path's kc), contiguous C rows, and B's (k, cols) part small enough to stay in L2 while every row strip reads
 * it (the packed path re-reads its packed B panel the same way; A is then read in place once per 32 columns). */
static int gemm_small_ok(const gemm_args_t* g, int64_t cols) {
  const tpu_host_gemm_kernel_t* kr = g->kr;
  if (!kr->small || g->c_cs != 1 || (gemm_needs_cvt(g) && !gemm_widen_tiny(g)) ||
      atomic_load_explicit(&g_direct_a, memory_order_relaxed) == 0)
    return 0;
  if (kr->small_beta0 && *(const float*)g->beta != 0.0f) return 0;
  if (!(g->k <= kr->kc || (kr->kc_rm && g->a_cs == 1 && g->k <= kr->kc_rm))) return 0;
  return g->k * round_up(cols, kr->nr) * 4 <= GEMM_SMALL_B_BYTES;
}

/* gemm_tile_alloc's small path, scratch for B^T on the stack when small; the epilogue per block of about mc
 * rows while it is still in cache, from a per-thread buffer when only the epilogue reads C (epi_local, as the
 * packed path). Returns 0 (nothing done) when the heap is exhausted. */
static int gemm_tile_small(const gemm_args_t* g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const tpu_host_gemm_kernel_t* kr = g->kr;
  const int64_t rows_all = i1 - i0, cols = j1 - j0, k = g->k;
  const int64_t mb = !g->epi || rows_all <= kr->mc ? rows_all
                                                  : TPU_MAX(kr->mr, TPU_MIN(kr->mc, GEMM_SMALL_B_BYTES / 4 / cols / kr->mr * kr->mr));
  /* gemm_widen_tiny: A (rows_all, k) and B (k, cols) widened to f32 in their own orientation (contiguous runs stay
   * contiguous: A^T / B^T keep the kernel's in-place and transpose paths), then the plain small path */
  const int cvt = gemm_needs_cvt(g);
  const int a_cm = cvt && g->a_rs == 1 && g->a_cs != 1, b_tr = cvt && g->b_rs == 1 && g->b_cs != 1;
  const int64_t b_cs = cvt ? (b_tr ? k : 1) : g->b_cs;
  const size_t wbytes = cvt ? (size_t)round_up((rows_all + cols) * k * 4, GEMM_ALIGN) : 0;
  const size_t bbytes = b_cs != 1 ? (size_t)round_up(round_up(cols, kr->nr) * k * 4, GEMM_ALIGN) : 0;
  const size_t cbytes = g->epi_local ? (size_t)(mb * cols * 4) : 0;
  _Alignas(GEMM_ALIGN) char stack_buf[GEMM_STACK_BYTES];
  char* heap = NULL;
  char* buf = wbytes + bbytes + cbytes <= GEMM_STACK_BYTES ? stack_buf : (heap = gemm_buf_get(wbytes + bbytes + cbytes));
  if (!buf) return 0;
  if (atomic_load_explicit(&g_count_paths, memory_order_relaxed))
    atomic_fetch_add_explicit(&g_path_small, 1, memory_order_relaxed);
  const float alpha = *(const float*)g->alpha, beta = *(const float*)g->beta;
  const float* a = (const float*)g->a + i0 * g->a_rs; /* row i0 */
  const float* b = (const float*)g->b + j0 * g->b_cs;
  int64_t a_rs = g->a_rs, a_cs = g->a_cs, b_rs = g->b_rs;
  if (cvt) {
    float* wa = (float*)(buf + bbytes + cbytes);
    float* wb = wa + rows_all * k;
    const char* sa = g->a + i0 * g->a_rs * g->a_es;
    const char* sb = g->b + j0 * g->b_cs * g->b_es;
    if (a_cm) /* wa (k, rows_all): column p of A */
      widen_2d(kr, g->fa[0], sa, g->a_es, k, rows_all, g->a_cs, 1, wa);
    else /* wa (rows_all, k) */
      widen_2d(kr, g->fa[0], sa, g->a_es, rows_all, k, g->a_rs, g->a_cs, wa);
    if (b_tr) /* wb (cols, k): column j of B */
      widen_2d(kr, g->fb[0], sb, g->b_es, cols, k, g->b_cs, 1, wb);
    else /* wb (k, cols) */
      widen_2d(kr, g->fb[0], sb, g->b_es, k, cols, g->b_rs, g->b_cs, wb);
    a = wa, a_rs = a_cm ? 1 : k, a_cs = a_cm ? rows_all : 1;
    b = wb, b_rs = b_tr ? 1 : cols;
  }
  for (int64_t i = i0; i < i1; i += mb) {
    const int64_t rows = TPU_MIN(mb, i1 - i);
    float* c = g->epi_local ? (float*)(buf + bbytes) : (float*)g->c + i * g->c_rs + j0;
    const int64_t c_rs = g->epi_local ? cols : g->c_rs;
    kr->small(rows, cols, k, a + (i - i0) * a_rs, a_rs, a_cs, i == i0 || !bbytes ? b : NULL, b_rs, b_cs, c, c_rs,
              alpha, beta, (float*)buf); /* B^T packed once */
    if (g->epi_local) gemm_epi_at(g, i, j0, rows, cols, c, c_rs, 1);
    else gemm_epi(g, i, j0, rows, cols);
  }
  if (heap) gemm_buf_put(heap);
  return 1;
}

/* One thread's tile with its own packing buffers: on the stack when small, else from the cache.
 * If the heap is exhausted the tile still gets computed, by the reference loop. */
static void gemm_tile_alloc(const gemm_args_t* g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (gemm_small_ok(g, j1 - j0) && gemm_tile_small(g, i0, i1, j0, j1)) return;
  gemm_plan_t pl = gemm_plan(g, i1 - i0, j1 - j0);
  size_t bytes = pl.abytes + pl.bbytes + pl.tbytes + pl.cbytes;
  if (bytes <= GEMM_STACK_BYTES) {
    _Alignas(GEMM_ALIGN) char stack_buf[GEMM_STACK_BYTES];
    gemm_tile(g, &pl, i0, i1, j0, j1, stack_buf);
    return;
  }
  char* buf = gemm_buf_get(bytes);
  if (!buf) {
    gemm_ref_tile(g, i0, i1, j0, j1);
    return;
  }
  gemm_tile(g, &pl, i0, i1, j0, j1, buf);
  gemm_buf_put(buf);
}

typedef struct gemm_par_s {
  const gemm_args_t* g;
  int64_t tm, tn;          /* thread grid */
  int64_t mstrips, nstrips; /* C in MR / NR units */
} gemm_par_t;

static void gemm_par_fn(void* ctx, int64_t begin, int64_t end) {
  const gemm_par_t* pp = (const gemm_par_t*)ctx;
  const gemm_args_t* g = pp->g;
  for (int64_t t = begin; t < end; ++t) {
    int64_t ti = t / pp->tn, tj = t % pp->tn;
    int64_t i0 = TPU_MIN(g->m, ti * pp->mstrips / pp->tm * g->kr->mr);
    int64_t i1 = TPU_MIN(g->m, (ti + 1) * pp->mstrips / pp->tm * g->kr->mr);
    int64_t j0 = TPU_MIN(g->n, tj * pp->nstrips / pp->tn * g->kr->nr);
    int64_t j1 = TPU_MIN(g->n, (tj + 1) * pp->nstrips / pp->tn * g->kr->nr);
    if (i0 < i1 && j0 < j1) gemm_tile_alloc(g, i0, i1, j0, j1);
  }
}

/* Picks a tm x tn grid (tm * tn <= threads) minimizing the largest tile's multiply work plus
 * its packing (about a quarter of an FMA's worth per packed element and k, times the tile
 * register width so the two terms compare). */
static void gemm_grid(const gemm_args_t* g, int threads, int64_t* tm_out, int64_t* tn_out) {
  const int64_t mstrips = ceil_div(g->m, g->kr->mr), nstrips = ceil_div(g->n, g->kr->nr);
  const int64_t pack_w = 8;
  int64_t best_tm = 1, best_tn = 1;
  double best = -1;
  for (int64_t tm = 1; tm <= threads && tm <= mstrips; ++tm)
    for (int64_t tn = 1; tm * tn <= threads && tn <= nstrips; ++tn) {
      double rows = (double)ceil_div(mstrips, tm) * g->kr->mr;
      double cols = (double)ceil_div(nstrips, tn) * g->kr->nr;
      double cost = rows * cols + pack_w * (rows + cols);
      if (best < 0 || cost < best * 0.999) best = cost, best_tm = tm, best_tn = tn;
    }
  *tm_out = best_tm;
  *tn_out = best_tn;
}

/* Threads the packed driver splits a product over: the pool's, fewer for small work. */
static int gemm_threads(const gemm_args_t* g, int parallel) {
  int threads = parallel ? tpu_pool_num_threads() : 1;
  double work = (double)g->m * (double)g->n * (double)g->k;
  if (threads > 1 && work < (double)GEMM_PAR_GRAIN * threads)
    threads = (int)TPU_MAX(1.0, work / GEMM_PAR_GRAIN);
  return threads;
}

static void gemm_packed(const gemm_args_t* g, int parallel) {
  const int threads = gemm_threads(g, parallel);
  int64_t tm = 1, tn = 1;
  if (threads > 1) gemm_grid(g, threads, &tm, &tn);
  if (tm * tn == 1) {
    gemm_tile_alloc(g, 0, g->m, 0, g->n);
    return;
  }
  gemm_par_t pp = {g, tm, tn, ceil_div(g->m, g->kr->mr), ceil_div(g->n, g->kr->nr)};
  tpu_pool_parallel_for(tm * tn, 1, gemm_par_fn, &pp);
}

/* ------------------------------------------------------------------ f32 GEMV (m == 1) */

typedef struct gemv_s {
  const tpu_host_gemm_kernel_t* kr;
  int64_t n, k;
  const float* x;
  int64_t xs;
  const float* b;
  int64_t b_rs, b_cs;
  float alpha, beta;
  float* c;
  int64_t c_cs;
  int64_t w; /* columns per task: whole rows of B stream best, split only to feed the threads */
} gemv_t;

static void gemv_store(const gemv_t* v, int64_t j, float s) {
  float* cj = v->c + j * v->c_cs;
  *cj = v->beta == 0.0f ? v->alpha * s : v->alpha * s + v->beta * *cj;
}

/* B rows contiguous: acc(chunk) += x[p] * B[p, chunk], streaming B once. */
static void gemv_rows_fn(void* ctx, int64_t begin, int64_t end) {
  const gemv_t* v = (const gemv_t*)ctx;
  float acc[GEMV_CHUNK];
  for (int64_t t = begin; t < end; ++t) {
    int64_t j0 = t * v->w, w = TPU_MIN(v->w, v->n - j0);
    memset(acc, 0, (size_t)w * sizeof(float));
    v->kr->gemv_rows(w, v->k, v->x, v->xs, v->b + j0, v->b_rs, acc);
    for (int64_t j = 0; j < w; ++j) gemv_store(v, j0 + j, acc[j]);
  }
}

/* B columns contiguous (x contiguous too): one dot product per output. */
static void gemv_dots_fn(void* ctx, int64_t begin, int64_t end) {
  const gemv_t* v = (const gemv_t*)ctx;
  for (int64_t j = begin; j < end; ++j) gemv_store(v, j, v->kr->sdot(v->k, v->x, v->b + j * v->b_cs));
}

/* Returns 0 when the layout has no GEMV path (the packed driver takes it). */
static int sgemv(const gemm_args_t* g, int parallel) {
  const tpu_host_gemm_kernel_t* kr = g->kr;
  gemv_t v = {kr, g->n, g->k, (const float*)g->a, g->a_cs, (const float*)g->b, g->b_rs, g->b_cs,
              *(const float*)g->alpha, *(const float*)g->beta, (float*)g->c, g->c_cs, GEMV_CHUNK};
  const int64_t grain_cols = TPU_MAX((int64_t)1, GEMM_PAR_GRAIN / TPU_MAX(g->k, (int64_t)1));
  if (g->b_cs == 1 && kr->gemv_rows) {
    const int threads = parallel ? tpu_pool_num_threads() : 1;
    v.w = TPU_MIN((int64_t)GEMV_CHUNK, round_up(ceil_div(g->n, threads), 64));
    int64_t chunks = ceil_div(g->n, v.w);
    int64_t grain = ceil_div(grain_cols, v.w);
    if (parallel && chunks > grain)
      tpu_pool_parallel_for(chunks, grain, gemv_rows_fn, &v);
    else
      gemv_rows_fn(&v, 0, chunks);
    return 1;
  }
  if (g->b_rs == 1 && kr->sdot) {
    float* xcopy = NULL;
    if (g->a_cs != 1) {
      xcopy = (float*)malloc((size_t)g->k * sizeof(float));
      if (!xcopy) return 0;
      for (int64_t p = 0; p < g->k; ++p) xcopy[p] = v.x[p * g->a_cs];
      v.x = xcopy;
    }
    if (parallel && g->n > grain_cols)
      tpu_pool_parallel_for(g->n, grain_cols, gemv_dots_fn, &v);
    else
      gemv_dots_fn(&v, 0, g->n);
    free(xcopy);
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ entry points */

static void scale_c(int64_t es, int64_t m, int64_t n, const void* beta, char* c, int64_t c_rs,
                    int64_t c_cs) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      if (es == 4) {
        float* p = (float*)c + i * c_rs + j * c_cs;
        float bt = *(const float*)beta;
        *p = bt == 0.0f ? 0.0f : bt * *p;
      } else {
        double* p = (double*)c + i * c_rs + j * c_cs;
        double bt = *(const double*)beta;
        *p = bt == 0.0 ? 0.0 : bt * *p;
      }
    }
}

static int is_zero(int64_t es, const void* x) {
  return es == 4 ? *(const float*)x == 0.0f : *(const double*)x == 0.0;
}

/* Operand formats of one product: es 4 (f32 C) with A/B dtypes f32/bf16/f16 and a precision
 * (tpu_ir_precision_t; used when both operands are f32), or es 8 (all f64). */
typedef struct gemm_fmt_s { int a_dt, b_dt, prec; } gemm_fmt_t;

static void gemm_set_fmt(gemm_args_t* g, int es, const gemm_fmt_t* f) {
  g->npass = 1;
  g->fa[0] = g->fb[0] = FMT_PLAIN;
  g->a_es = g->b_es = es;
  if (es != 4 || !f) return;
  g->fa[0] = fmt_of_dtype(f->a_dt);
  g->fb[0] = fmt_of_dtype(f->b_dt);
  if (g->fa[0] != FMT_PLAIN) g->a_es = 2;
  if (g->fb[0] != FMT_PLAIN) g->b_es = 2;
  if (f->prec == 2 && f->a_dt == TPU_DTYPE_BF16 && f->b_dt == TPU_DTYPE_F32) g->fb[0] = FMT_HI; /* bf16 x hi */
  if (f->prec == 2 && f->a_dt == TPU_DTYPE_F32 && f->b_dt == TPU_DTYPE_BF16) g->fa[0] = FMT_HI;
  if (f->a_dt != TPU_DTYPE_F32 || f->b_dt != TPU_DTYPE_F32) return;
  if (f->prec == 1) { /* HIGH: hi*hi + hi*lo + lo*hi */
    g->npass = 3;
    g->fa[0] = FMT_HI, g->fb[0] = FMT_HI;
    g->fa[1] = FMT_HIF, g->fb[1] = FMT_LO;
    g->fa[2] = FMT_LO, g->fb[2] = FMT_HIF;
  } else if (f->prec == 2) { /* DEFAULT: hi*hi */
    g->fa[0] = FMT_HI, g->fb[0] = FMT_HI;
  }
}

/* Every pass multiplies values that are exactly bf16 (the vdpbf16ps kernel can take them). */
static int gemm_bf16_products(const gemm_args_t* g) {
  for (int t = 0; t < g->npass; ++t)
    for (int s = 0; s < 2; ++s) {
      int f = s ? g->fb[t] : g->fa[t];
      if (f != FMT_BF16 && f != FMT_HI && f != FMT_LO && f != FMT_HIF) return 0;
    }
  return 1;
}

/* Fills *gp for one product and runs the paths that finish it at once (aliasing outputs, k == 0 or alpha == 0,
 * GEMV); returns 1 when the packed driver is left to run (gemm_packed). */
static int gemm_prepare(gemm_args_t* gp, int es, const gemm_fmt_t* fmt, int64_t m, int64_t n, int64_t k,
                        const void* alpha, const void* a, int64_t a_rs, int64_t a_cs, const void* b, int64_t b_rs,
                        int64_t b_cs, const void* beta, void* c, int64_t c_rs, int64_t c_cs, int parallel,
                        const tpu_host_gemm_epi_t* epi, int64_t t) {
  if (m <= 0 || n <= 0) return 0;
  /* field by field into *gp: an initializer zero-fills the whole struct first (rep stos, then a 200-byte copy:
   * a third of a 16x8x8 product's time); fa/fb past npass are never read */
  gemm_args_t* const g = gp;
  g->kr = gemm_pick(es), g->m = m, g->n = n, g->k = k;
  g->a = (const char*)a, g->a_rs = a_rs, g->a_cs = a_cs, g->b = (const char*)b, g->b_rs = b_rs, g->b_cs = b_cs;
  g->c = (char*)c, g->c_rs = c_rs, g->c_cs = c_cs;
  g->alpha = alpha, g->beta = beta, g->one = es == 4 ? (const void*)&kOneF : (const void*)&kOneD;
  g->epi = epi, g->epi_t = epi ? epi->t0 + t : 0, g->epi_tr = 0, g->epi_local = 0;
  gemm_set_fmt(g, es, fmt);
  if ((m > 1 && c_rs == 0) || (n > 1 && c_cs == 0)) { /* outputs alias: keep the loop's order */
    gemm_ref_tile(g, 0, m, 0, n);
    return 0;
  }
  if (k <= 0 || is_zero(es, alpha)) {
    scale_c(es, m, n, beta, g->c, c_rs, c_cs);
    gemm_epi(g, 0, 0, m, n);
    return 0;
  }
  /* Prefer contiguous C rows (vector write-back) and m == 1 for vectors: C^T = B^T A^T. */
  if ((n == 1 && m > 1) || (m > 1 && c_cs != 1 && c_rs == 1)) {
    g->m = n, g->n = m;
    g->a = (const char*)b, g->a_rs = b_cs, g->a_cs = b_rs;
    g->b = (const char*)a, g->b_rs = a_cs, g->b_cs = a_rs;
    g->c_rs = c_cs, g->c_cs = c_rs;
    for (int t = 0; t < g->npass; ++t) { int f = g->fa[t]; g->fa[t] = g->fb[t]; g->fb[t] = f; }
    int64_t e = g->a_es; g->a_es = g->b_es; g->b_es = e;
    g->epi_tr = 1;
  }
  if (es == 4 && gemm_bf16_products(g) && !gemm_widen_tiny(g)) { /* (strip height for the driver's m: after the swap) */
    const tpu_host_gemm_kernel_t* kb = gemm_pick_bf16(g->m);
    if (kb) g->kr = kb;
  }
  if (g->m == 1 && es == 4 && !gemm_needs_cvt(g) && sgemv(g, parallel)) {
    gemm_epi(g, 0, 0, g->m, g->n);
    return 0;
  }
  /* one k pass into a zero C: each block can live in a per-thread buffer until its epilogue ran */
  g->epi_local = epi && epi->c_unused && es == 4 && g->npass == 1 && k <= g->kr->kc && is_zero(es, beta);
  return 1;
}

static void gemm_run(int es, const gemm_fmt_t* fmt, int64_t m, int64_t n, int64_t k, const void* alpha,
                     const void* a, int64_t a_rs, int64_t a_cs, const void* b, int64_t b_rs, int64_t b_cs,
                     const void* beta, void* c, int64_t c_rs, int64_t c_cs, int parallel,
                     const tpu_host_gemm_epi_t* epi, int64_t t) {
  gemm_args_t g;
  if (gemm_prepare(&g, es, fmt, m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, c_cs, parallel, epi, t))
    gemm_packed(&g, parallel);
}

void tpu_host_sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs,
                    int64_t a_cs, const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c,
                    int64_t c_rs, int64_t c_cs) {
  gemm_run(4, NULL, m, n, k, &alpha, a, a_rs, a_cs, b, b_rs, b_cs, &beta, c, c_rs, c_cs, 1, NULL, 0);
}

void tpu_host_dgemm(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs,
                    int64_t a_cs, const double* b, int64_t b_rs, int64_t b_cs, double beta, double* c,
                    int64_t c_rs, int64_t c_cs) {
  gemm_run(8, NULL, m, n, k, &alpha, a, a_rs, a_cs, b, b_rs, b_cs, &beta, c, c_rs, c_cs, 1, NULL, 0);
}

void tpu_host_sgemm_ex(int a_dtype, int b_dtype, int precision, int64_t m, int64_t n, int64_t k, float alpha,
                       const void* a, int64_t a_rs, int64_t a_cs, const void* b, int64_t b_rs, int64_t b_cs,
                       float beta, float* c, int64_t c_rs, int64_t c_cs) {
  gemm_fmt_t f = {a_dtype, b_dtype, precision};
  gemm_run(4, &f, m, n, k, &alpha, a, a_rs, a_cs, b, b_rs, b_cs, &beta, c, c_rs, c_cs, 1, NULL, 0);
}

/* ------------------------------------------------------------------ batched */

typedef struct gemm_batch_s {
  int es;
  const gemm_fmt_t* fmt;
  int64_t a_es, b_es; /* source element sizes */
  int64_t m, n, k;
  const void* alpha;
  const char* a;
  int64_t a_bs, a_rs, a_cs;
  const char* b;
  int64_t b_bs, b_rs, b_cs;
  const void* beta;
  char* c;
  int64_t c_bs, c_rs, c_cs;
  const tpu_host_gemm_epi_t* epi;
} gemm_batch_t;

/* Matrices [begin, end) one after another. When the first one takes the small path on one thread, so do the
 * others (same shape, strides and formats): they skip gemm_prepare and go to gemm_tile_small directly. */
static void gemm_batch_range(const gemm_batch_t* bt, int64_t begin, int64_t end, int parallel) {
  gemm_args_t g;
  int small = 0;
  for (int64_t t = begin; t < end; ++t) {
    const char* a = bt->a + t * bt->a_bs * bt->a_es;
    const char* b = bt->b + t * bt->b_bs * bt->b_es;
    char* c = bt->c + t * bt->c_bs * bt->es;
    if (small) {
      g.a = g.epi_tr ? b : a, g.b = g.epi_tr ? a : b, g.c = c;
      g.epi_t = bt->epi ? bt->epi->t0 + t : 0;
      if (!gemm_tile_small(&g, 0, g.m, 0, g.n)) gemm_tile_alloc(&g, 0, g.m, 0, g.n);
      continue;
    }
    if (gemm_prepare(&g, bt->es, bt->fmt, bt->m, bt->n, bt->k, bt->alpha, a, bt->a_rs, bt->a_cs, b, bt->b_rs,
                     bt->b_cs, bt->beta, c, bt->c_rs, bt->c_cs, parallel, bt->epi, t)) {
      small = gemm_threads(&g, parallel) == 1 && gemm_small_ok(&g, g.n);
      gemm_packed(&g, parallel);
    }
  }
}

static void gemm_batch_fn(void* ctx, int64_t begin, int64_t end) {
  gemm_batch_range((const gemm_batch_t*)ctx, begin, end, 0); /* already on the pool: each product on this thread */
}

static void gemm_batched(const gemm_batch_t* bt, int64_t batch) {
  if (batch <= 0 || bt->m <= 0 || bt->n <= 0) return;
  const double work = (double)bt->m * (double)bt->n * (double)TPU_MAX(bt->k, (int64_t)1);
  const int threads = tpu_pool_num_threads();
  /* Split over matrices when each is small or the batch divides well over the threads; a
   * shared C (c_bs == 0) must see the products in order. */
  int over_batch = threads > 1 && batch > 1 && bt->c_bs != 0 &&
                   (work < GEMM_BATCH_SMALL || batch % threads == 0 || batch >= 4 * threads);
  if (over_batch) {
    int64_t grain = (int64_t)TPU_MAX(1.0, (double)GEMM_PAR_GRAIN / work);
    tpu_pool_parallel_for(batch, grain, gemm_batch_fn, (void*)bt);
    return;
  }
  gemm_batch_range(bt, 0, batch, 1);
}

void tpu_host_sgemm_batched(int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
                            const float* a, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                            const float* b, int64_t b_bs, int64_t b_rs, int64_t b_cs,
                            float beta, float* c, int64_t c_bs, int64_t c_rs, int64_t c_cs) {
  gemm_batch_t bt = {4, NULL, 4, 4, m, n, k, &alpha, (const char*)a, a_bs, a_rs, a_cs, (const char*)b, b_bs,
                     b_rs, b_cs, &beta, (char*)c, c_bs, c_rs, c_cs, NULL};
  gemm_batched(&bt, batch);
}

void tpu_host_dgemm_batched(int64_t batch, int64_t m, int64_t n, int64_t k, double alpha,
                            const double* a, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                            const double* b, int64_t b_bs, int64_t b_rs, int64_t b_cs,
                            double beta, double* c, int64_t c_bs, int64_t c_rs, int64_t c_cs) {
  gemm_batch_t bt = {8, NULL, 8, 8, m, n, k, &alpha, (const char*)a, a_bs, a_rs, a_cs, (const char*)b, b_bs,
                     b_rs, b_cs, &beta, (char*)c, c_bs, c_rs, c_cs, NULL};
  gemm_batched(&bt, batch);
}

void tpu_host_sgemm_batched_ex(int a_dtype, int b_dtype, int precision, int64_t batch, int64_t m, int64_t n,
                               int64_t k, float alpha, const void* a, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                               const void* b, int64_t b_bs, int64_t b_rs, int64_t b_cs, float beta, float* c,
                               int64_t c_bs, int64_t c_rs, int64_t c_cs) {
  gemm_fmt_t f = {a_dtype, b_dtype, precision};
  gemm_batch_t bt = {4, &f, (int64_t)tpu_dtype_size(a_dtype), (int64_t)tpu_dtype_size(b_dtype), m, n, k, &alpha,
                     (const char*)a, a_bs, a_rs, a_cs, (const char*)b, b_bs, b_rs, b_cs, &beta, (char*)c, c_bs,
                     c_rs, c_cs, NULL};
  gemm_batched(&bt, batch);
}

void tpu_host_sgemm_batched_epi(int a_dtype, int b_dtype, int precision, int64_t batch, int64_t m, int64_t n,
                                int64_t k, float alpha, const void* a, int64_t a_bs, int64_t a_rs, int64_t a_cs,
                                const void* b, int64_t b_bs, int64_t b_rs, int64_t b_cs, float beta, float* c,
                                int64_t c_bs, int64_t c_rs, int64_t c_cs, const tpu_host_gemm_epi_t* epi) {
  gemm_fmt_t f = {a_dtype, b_dtype, precision};
  gemm_batch_t bt = {4, &f, (int64_t)tpu_dtype_size(a_dtype), (int64_t)tpu_dtype_size(b_dtype), m, n, k, &alpha,
                     (const char*)a, a_bs, a_rs, a_cs, (const char*)b, b_bs, b_rs, b_cs, &beta, (char*)c, c_bs,
                     c_rs, c_cs, epi};
  gemm_batched(&bt, batch);
}
