/* test_gemm.c — host-driver GEMM kernels against their naive _ref twins.
 *
 * Random shapes (1, odd sizes, edge tiles, 127, 257), k = 0, every layout (row-major, transposed,
 * strided, zero and negative strides), alpha/beta values, beta = 0 over NaN-filled C, m == 1 / n == 1 vector
 * paths, batched with broadcast batch strides, concurrent callers; A read in place (narrow C) equal bitwise
 * to packed A (f32, and bf16 k-pairs read from row-major A); bf16 operand formats and the direct bf16 store
 * (from the epilogue's block or the bf16 kernels' registers); each kernel ISA the CPU has.
 * Buffers are sized exactly and C's padding holds sentinels, so an out-of-bounds read shows up
 * under ASan and an out-of-bounds write as a failed check. Prints "N passed, M failed" last. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "drivers/host/gemm.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static _Atomic int g_passed, g_failed;

static uint64_t rng_next(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return *s = x;
}
static int64_t rng_int(uint64_t* s, int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(rng_next(s) % (uint64_t)(hi - lo + 1));
}
static double rng_unit(uint64_t* s) { return (double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0; }

/* One matrix operand: rows x cols stored with (rs, cs), `trans` = column-major, `pad` extra
 * elements between rows (or columns), `zero_rows` = row stride 0, `flip` = rows in reverse
 * order (negative row stride, as a flipped view). Element (i, j) is at off + i*rs + j*cs. */
typedef struct layout_s {
  int64_t rs, cs, off, extent; /* extent: elements spanned, so the buffer is exactly that big */
} layout_t;

static layout_t make_layout(int64_t rows, int64_t cols, int trans, int64_t pad, int zero_rows, int flip) {
  layout_t l;
  if (trans) l.rs = 1, l.cs = rows + pad;
  else l.rs = cols + pad, l.cs = 1;
  if (zero_rows) l.rs = 0;
  if (flip) l.rs = -l.rs;
  l.off = 0;
  if (rows <= 0 || cols <= 0) { l.extent = 0; return l; }
  int64_t lo = TPU_MIN((int64_t)0, (rows - 1) * l.rs) + TPU_MIN((int64_t)0, (cols - 1) * l.cs);
  int64_t hi = TPU_MAX((int64_t)0, (rows - 1) * l.rs) + TPU_MAX((int64_t)0, (cols - 1) * l.cs);
  l.off = -lo;
  l.extent = hi - lo + 1;
  return l;
}

typedef struct case_s {
  int dbl;
  int64_t batch, m, n, k;
  double alpha, beta;
  int ta, tb, tc;         /* transposed (column-major) operands */
  int64_t pa, pb, pc;     /* padding */
  int za, zb;             /* row stride 0 for A / B (broadcast) */
  int fa, fb, fc;         /* negative row strides (flipped views) */
  int a_bs0, b_bs0, c_bs0; /* batch stride 0 */
  int zc;                 /* C row stride 0 (aliasing outputs) */
  int nan_c;              /* fill C with NaN (beta must be 0) */
  int nan_ab;             /* fill A and B with NaN (alpha must be 0) */
} case_t;

static void report(int ok, const case_t* t, const char* what, double err, double tol) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  fprintf(stderr,
          "FAIL %s: %s batch=%lld m=%lld n=%lld k=%lld alpha=%g beta=%g ta=%d tb=%d tc=%d pads=%lld/%lld/%lld "
          "z=%d%d f=%d%d%d bs0=%d%d%d zc=%d nan=%d%d isa=%s err=%g tol=%g\n",
          t->dbl ? "dgemm" : "sgemm", what, (long long)t->batch, (long long)t->m, (long long)t->n,
          (long long)t->k, t->alpha, t->beta, t->ta, t->tb, t->tc, (long long)t->pa, (long long)t->pb,
          (long long)t->pc, t->za, t->zb, t->fa, t->fb, t->fc, t->a_bs0, t->b_bs0, t->c_bs0, t->zc, t->nan_c, t->nan_ab,
          tpu_host_gemm_isa_name(), err, tol);
}

#define SENTINEL 12345.0

static void run_case(const case_t* t, uint64_t seed) {
  const int64_t B = t->batch, m = t->m, n = t->n, k = t->k;
  const size_t es = t->dbl ? sizeof(double) : sizeof(float);
  layout_t la = make_layout(m, k, t->ta, t->pa, t->za, t->fa);
  layout_t lb = make_layout(k, n, t->tb, t->pb, t->zb, t->fb);
  layout_t lc = make_layout(m, n, t->tc, t->pc, t->zc, t->fc);
  int64_t a_bs = t->a_bs0 ? 0 : la.extent, b_bs = t->b_bs0 ? 0 : lb.extent, c_bs = t->c_bs0 ? 0 : lc.extent;
  int64_t na = t->a_bs0 ? la.extent : B * la.extent, nb = t->b_bs0 ? lb.extent : B * lb.extent;
  int64_t nc = t->c_bs0 ? lc.extent : B * lc.extent;
  void* a = malloc((size_t)TPU_MAX(na, 1) * es);
  void* b = malloc((size_t)TPU_MAX(nb, 1) * es);
  void* c = malloc((size_t)TPU_MAX(nc, 1) * es);
  void* c0 = malloc((size_t)TPU_MAX(nc, 1) * es);
  void* cr = malloc((size_t)TPU_MAX(nc, 1) * es);
  char* in_c = calloc((size_t)TPU_MAX(nc, 1), 1); /* 1 where some (t, i, j) maps */
  if (!a || !b || !c || !c0 || !cr || !in_c) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  uint64_t s = seed | 1;
  for (int64_t i = 0; i < na; ++i) {
    double v = t->nan_ab ? NAN : rng_unit(&s);
    if (t->dbl) ((double*)a)[i] = v; else ((float*)a)[i] = (float)v;
  }
  for (int64_t i = 0; i < nb; ++i) {
    double v = t->nan_ab ? NAN : rng_unit(&s);
    if (t->dbl) ((double*)b)[i] = v; else ((float*)b)[i] = (float)v;
  }
  for (int64_t bt = 0; bt < (t->c_bs0 ? 1 : B); ++bt)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) in_c[bt * c_bs + lc.off + i * lc.rs + j * lc.cs] = 1;
  for (int64_t i = 0; i < nc; ++i) {
    double v = !in_c[i] ? SENTINEL : t->nan_c ? NAN : rng_unit(&s);
    if (t->dbl) ((double*)c0)[i] = v; else ((float*)c0)[i] = (float)v;
  }
  memcpy(c, c0, (size_t)nc * es);
  memcpy(cr, c0, (size_t)nc * es);

  int batched = B != 1 || t->a_bs0 || t->b_bs0 || t->c_bs0;
  const char* a00 = (const char*)a + la.off * (int64_t)es; /* element (0, 0) of matrix 0 */
  const char* b00 = (const char*)b + lb.off * (int64_t)es;
  char* c00 = (char*)c + lc.off * (int64_t)es;
  char* cr00 = (char*)cr + lc.off * (int64_t)es;
  if (t->dbl) {
    if (batched)
      tpu_host_dgemm_batched(B, m, n, k, t->alpha, (const double*)a00, a_bs, la.rs, la.cs, (const double*)b00,
                             b_bs, lb.rs, lb.cs, t->beta, (double*)c00, c_bs, lc.rs, lc.cs);
    else
      tpu_host_dgemm(m, n, k, t->alpha, (const double*)a00, la.rs, la.cs, (const double*)b00, lb.rs, lb.cs,
                     t->beta, (double*)c00, lc.rs, lc.cs);
    for (int64_t bt = 0; bt < B; ++bt)
      tpu_host_dgemm_ref(m, n, k, t->alpha, (const double*)a00 + bt * a_bs, la.rs, la.cs,
                         (const double*)b00 + bt * b_bs, lb.rs, lb.cs, t->beta, (double*)cr00 + bt * c_bs,
                         lc.rs, lc.cs);
  } else {
    if (batched)
      tpu_host_sgemm_batched(B, m, n, k, (float)t->alpha, (const float*)a00, a_bs, la.rs, la.cs,
                             (const float*)b00, b_bs, lb.rs, lb.cs, (float)t->beta, (float*)c00, c_bs, lc.rs,
                             lc.cs);
    else
      tpu_host_sgemm(m, n, k, (float)t->alpha, (const float*)a00, la.rs, la.cs, (const float*)b00, lb.rs,
                     lb.cs, (float)t->beta, (float*)c00, lc.rs, lc.cs);
    for (int64_t bt = 0; bt < B; ++bt)
      tpu_host_sgemm_ref(m, n, k, (float)t->alpha, (const float*)a00 + bt * a_bs, la.rs, la.cs,
                         (const float*)b00 + bt * b_bs, lb.rs, lb.cs, (float)t->beta, (float*)cr00 + bt * c_bs,
                         lc.rs, lc.cs);
  }

  /* Error bound: summation-order rounding, eps * (k + 4) * (|alpha| sum|a||b| + |beta c|), per
   * element. Aliasing or shared-C cases must match the reference exactly up to that bound too
   * (c0 stands in for the magnitude of C). */
  const double eps = t->dbl ? 2.3e-16 : 1.2e-7;
  double worst = 0, worst_tol = 0;
  int ok = 1;
  for (int64_t bt = 0; bt < (t->c_bs0 ? 1 : B) && ok; ++bt)
    for (int64_t i = 0; i < m && ok; ++i)
      for (int64_t j = 0; j < n && ok; ++j) {
        int64_t ci = bt * c_bs + lc.off + i * lc.rs + j * lc.cs;
        double got = t->dbl ? ((double*)c)[ci] : ((float*)c)[ci];
        double want = t->dbl ? ((double*)cr)[ci] : ((float*)cr)[ci];
        double mag = 0;
        for (int64_t b2 = 0; b2 < (t->c_bs0 ? B : 1); ++b2) { /* shared C accumulates B products */
          int64_t ab = t->c_bs0 ? b2 : bt;
          for (int64_t p = 0; p < k; ++p) {
            int64_t ai = ab * a_bs + la.off + i * la.rs + p * la.cs;
            int64_t bi = ab * b_bs + lb.off + p * lb.rs + j * lb.cs;
            double av = t->dbl ? ((double*)a)[ai] : ((float*)a)[ai];
            double bv = t->dbl ? ((double*)b)[bi] : ((float*)b)[bi];
            mag += fabs(av * bv);
          }
        }
        double c0v = t->dbl ? ((double*)c0)[ci] : ((float*)c0)[ci];
        double fb = fabs(t->beta), reps = t->c_bs0 ? (double)B : 1.0;
        double cmag = t->nan_c ? 0 : fabs(c0v) * (fb > 1 ? pow(fb, reps) : fb) * reps;
        double tol = eps * (double)(k + 4) * reps * (fabs(t->alpha) * mag * (fb > 1 ? pow(fb, reps) : 1) + cmag) + 1e-300;
        if (t->nan_ab && t->alpha == 0) tol = 1e-300;
        double err = fabs(got - want);
        if (!(err <= tol) && !(isnan(got) && isnan(want))) {
          ok = 0;
          worst = err, worst_tol = tol;
        }
      }
  report(ok, t, "values", worst, worst_tol);
  int pad_ok = 1;
  for (int64_t i = 0; i < nc; ++i)
    if (!in_c[i]) {
      double v = t->dbl ? ((double*)c)[i] : ((float*)c)[i];
      if (v != SENTINEL) pad_ok = 0;
    }
  report(pad_ok, t, "padding untouched", 0, 0);
  free(a), free(b), free(c), free(c0), free(cr), free(in_c);
}

static case_t random_case(uint64_t* s, int64_t maxdim) {
  case_t t;
  memset(&t, 0, sizeof(t));
  t.dbl = rng_int(s, 0, 3) == 0;
  t.batch = 1;
  int64_t special[] = {1, 2, 5, 6, 7, 13, 14, 15, 16, 17, 31, 32, 33, 48};
  t.m = rng_int(s, 0, 2) ? rng_int(s, 1, maxdim) : special[rng_int(s, 0, TPU_ARRAY_LEN(special) - 1)];
  t.n = rng_int(s, 0, 2) ? rng_int(s, 1, maxdim) : special[rng_int(s, 0, TPU_ARRAY_LEN(special) - 1)];
  t.k = rng_int(s, 0, 2) ? rng_int(s, 1, maxdim) : special[rng_int(s, 0, TPU_ARRAY_LEN(special) - 1)];
  if (rng_int(s, 0, 30) == 0) t.k = 0;
  const double alphas[] = {1, 1, 1, -1, 0.5, 2.5, 0};
  const double betas[] = {0, 0, 0, 1, 1, -1, 0.5, 3};
  t.alpha = alphas[rng_int(s, 0, TPU_ARRAY_LEN(alphas) - 1)];
  t.beta = betas[rng_int(s, 0, TPU_ARRAY_LEN(betas) - 1)];
  t.ta = rng_int(s, 0, 2) == 0;
  t.tb = rng_int(s, 0, 2) == 0;
  t.tc = rng_int(s, 0, 4) == 0;
  t.pa = rng_int(s, 0, 3) == 0 ? rng_int(s, 1, 5) : 0;
  t.pb = rng_int(s, 0, 3) == 0 ? rng_int(s, 1, 5) : 0;
  t.pc = rng_int(s, 0, 3) == 0 ? rng_int(s, 1, 5) : 0;
  t.za = rng_int(s, 0, 20) == 0;
  t.zb = rng_int(s, 0, 20) == 0;
  t.fa = rng_int(s, 0, 12) == 0;
  t.fb = rng_int(s, 0, 12) == 0;
  t.fc = rng_int(s, 0, 12) == 0;
  t.nan_c = t.beta == 0 && rng_int(s, 0, 1);
  return t;
}

static void run_isa_suite(uint64_t seed, int nrandom, int64_t maxdim) {
  uint64_t s = seed;
  for (int r = 0; r < nrandom; ++r) {
    case_t t = random_case(&s, maxdim);
    run_case(&t, rng_next(&s));
  }
  /* Directed cases: vectors, k = 0, alpha = 0 over NaN inputs, aliasing C. */
  for (int dbl = 0; dbl < 2; ++dbl)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int tc = 0; tc < 2; ++tc) {
          case_t t = {.dbl = dbl, .batch = 1, .alpha = 1, .beta = 0, .ta = ta, .tb = tb, .tc = tc, .nan_c = 1};
          int64_t shapes[][3] = {{1, 37, 29}, {1, 1100, 9}, {45, 1, 33}, {1, 1, 70}, {3, 3, 0}, {1, 19, 0},
                                 {2, 5, 3}, {6, 16, 1}, {14, 32, 64}, {15, 33, 65}};
          for (int i = 0; i < TPU_ARRAY_LEN(shapes); ++i) {
            t.m = shapes[i][0], t.n = shapes[i][1], t.k = shapes[i][2];
            t.pa = (i & 1) * 3, t.pb = (i & 2), t.pc = (i & 4) / 4;
            run_case(&t, seed + (uint64_t)i);
            case_t u = t;
            u.nan_c = 0, u.beta = 0.5, u.alpha = -2;
            run_case(&u, seed + 100 + (uint64_t)i);
          }
          case_t z = t;
          z.m = 9, z.n = 21, z.k = 17, z.alpha = 0, z.beta = 2, z.nan_c = 0, z.nan_ab = 1;
          run_case(&z, seed + 7);
          z.beta = 0, z.nan_c = 1;
          run_case(&z, seed + 8);
          case_t al = t; /* C row stride 0: rows of C alias */
          al.m = 4, al.n = 7, al.k = 5, al.tc = 0, al.zc = 1, al.beta = 1, al.nan_c = 0;
          run_case(&al, seed + 9);
        }
}

/* Sizes large enough to take the threaded, multi-block paths (kc / mc / nc edges). */
static void run_large(uint64_t seed) {
  static const int64_t small[][3] = {{127, 257, 130}, {300, 40, 300}, {1, 3000, 700}, {257, 1, 300}};
  static const int64_t big[][3] = {{127, 257, 300}, {257, 127, 520}, {600, 35, 290},
                                   {33, 900, 257},  {1, 5000, 900},  {700, 1, 800}};
  const int64_t(*shapes)[3] = SANITIZED ? small : big;
  int nshapes = SANITIZED ? TPU_ARRAY_LEN(small) : TPU_ARRAY_LEN(big);
  for (int i = 0; i < nshapes; ++i)
    for (int v = 0; v < 4; ++v) {
      case_t t = {.dbl = v == 3, .batch = 1, .m = shapes[i][0], .n = shapes[i][1], .k = shapes[i][2],
                  .alpha = v == 1 ? 0.5 : 1, .beta = v == 1 ? 1 : 0, .ta = v == 2, .tb = v & 1, .tc = v == 2,
                  .pa = v, .pc = 2 * (v == 1), .nan_c = v != 1};
      run_case(&t, seed + (uint64_t)(i * 4 + v));
    }
}

static void run_batched(uint64_t seed) {
  uint64_t s = seed;
  for (int r = 0; r < (SANITIZED ? 40 : 120); ++r) {
    case_t t = random_case(&s, 24);
    t.za = t.zb = 0;
    t.batch = rng_int(&s, 1, 7);
    t.a_bs0 = rng_int(&s, 0, 3) == 0;
    t.b_bs0 = rng_int(&s, 0, 3) == 0;
    t.c_bs0 = rng_int(&s, 0, 10) == 0;
    if (t.c_bs0) t.nan_c = 0, t.beta = 1;
    run_case(&t, rng_next(&s));
  }
  /* Large enough per matrix to be split inside, odd batch counts, broadcast B (as x @ W). */
  int64_t bshape[][4] = {{3, 130, 140, 150}, {2, 96, 200, 64}, {5, 64, 64, 64}, {16, 9, 33, 20}};
  for (int i = 0; i < TPU_ARRAY_LEN(bshape); ++i) {
    case_t t = {.dbl = i == 2, .batch = bshape[i][0], .m = bshape[i][1], .n = bshape[i][2], .k = bshape[i][3],
                .alpha = 1, .beta = i == 1 ? 0.5 : 0, .tb = i & 1, .b_bs0 = i != 3, .nan_c = i != 1};
    run_case(&t, seed + (uint64_t)i);
  }
}

/* ---- operand formats (tpu_host_sgemm_ex / _batched_ex). bf16/f16 operands must give exactly
 * what sgemm gives on their exact f32 widening (same packed values, same kernels), except the
 * m == 1 / n == 1 shapes, which skip the GEMV path (checked against the double reference), and
 * bf16 products on the vdpbf16ps kernel (other summation order: the double reference only). The
 * f32 precisions are checked against a double-precision emulation of the split written here
 * independently: hi = bf16(x), lo = bf16(x - hi); HIGH = hi*hi + hi*lo + lo*hi, DEFAULT = hi*hi. */
static float to_bf16_f(float x) { return tpu_bf16_to_f32(tpu_f32_to_bf16(x)); }
static int bf16_kernel_on(void) { return strstr(tpu_host_gemm_isa_name(), "avx512bf16") != NULL; }

static void run_fmt_case(uint64_t seed, int dt, int prec, int64_t batch, int64_t m, int64_t n, int64_t k,
                         int ta, int tb, int64_t pad) {
  uint64_t s = seed;
  layout_t la = make_layout(m, k, ta, pad, 0, 0), lb = make_layout(k, n, tb, pad, 0, 0);
  int64_t na = TPU_MAX(batch * la.extent, (int64_t)1), nb = TPU_MAX(batch * lb.extent, (int64_t)1);
  int64_t nc = TPU_MAX(batch * m * n, (int64_t)1);
  uint16_t* ah = malloc((size_t)na * 2);
  uint16_t* bh = malloc((size_t)nb * 2);
  float* af = malloc((size_t)na * 4);
  float* bf = malloc((size_t)nb * 4);
  float* c = malloc((size_t)nc * 4);
  float* cw = malloc((size_t)nc * 4);
  if (!ah || !bh || !af || !bf || !c || !cw) { fprintf(stderr, "out of memory\n"); exit(2); }
  for (int64_t i = 0; i < na; ++i) {
    float v = (float)(rng_unit(&s) * (1.0 + (i % 7)));
    if (dt == TPU_DTYPE_BF16) ah[i] = tpu_f32_to_bf16(v), af[i] = tpu_bf16_to_f32(ah[i]);
    else if (dt == TPU_DTYPE_F16) ah[i] = tpu_f32_to_f16(v), af[i] = tpu_f16_to_f32(ah[i]);
    else af[i] = v;
  }
  for (int64_t i = 0; i < nb; ++i) {
    float v = (float)rng_unit(&s);
    if (dt == TPU_DTYPE_BF16) bh[i] = tpu_f32_to_bf16(v), bf[i] = tpu_bf16_to_f32(bh[i]);
    else if (dt == TPU_DTYPE_F16) bh[i] = tpu_f32_to_f16(v), bf[i] = tpu_f16_to_f32(bh[i]);
    else bf[i] = v;
  }
  const void* ap = dt == TPU_DTYPE_F32 ? (const void*)af : (const void*)ah;
  const void* bp = dt == TPU_DTYPE_F32 ? (const void*)bf : (const void*)bh;
  for (int64_t i = 0; i < nc; ++i) c[i] = NAN, cw[i] = NAN;
  if (batch == 1)
    tpu_host_sgemm_ex(dt, dt, prec, m, n, k, 1.0f, (const char*)ap + la.off * (dt == TPU_DTYPE_F32 ? 4 : 2), la.rs, la.cs,
                      (const char*)bp + lb.off * (dt == TPU_DTYPE_F32 ? 4 : 2), lb.rs, lb.cs, 0.0f, c, n, 1);
  else
    tpu_host_sgemm_batched_ex(dt, dt, prec, batch, m, n, k, 1.0f, ap, la.extent, la.rs, la.cs, bp, lb.extent,
                              lb.rs, lb.cs, 0.0f, c, m * n, n, 1);
  int exact = dt != TPU_DTYPE_F32 && m > 1 && n > 1 && la.off == 0 && lb.off == 0 &&
              !(dt == TPU_DTYPE_BF16 && bf16_kernel_on());
  if (exact) /* the old path: widen, then sgemm */
    tpu_host_sgemm_batched(batch, m, n, k, 1.0f, af, la.extent, la.rs, la.cs, bf, lb.extent, lb.rs, lb.cs, 0.0f,
                           cw, m * n, n, 1);
  double worst = 0, worst_tol = 0;
  int ok = 1;
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          float x = af[t * la.extent + la.off + i * la.rs + p * la.cs];
          float y = bf[t * lb.extent + lb.off + p * lb.rs + j * lb.cs];
          double prod;
          if (dt == TPU_DTYPE_F32 && prec != 0) {
            float xh = to_bf16_f(x), yh = to_bf16_f(y);
            float xl = to_bf16_f(x - xh), yl = to_bf16_f(y - yh);
            prod = (double)xh * yh;
            if (prec == 1) prod += (double)xh * yl + (double)xl * yh;
          } else {
            prod = (double)x * y;
          }
          ref += prod;
          mag += fabs(prod);
        }
        float got = c[(t * m + i) * n + j];
        double err = fabs((double)got - ref), tol = 3.0 * (double)(k + 2) * 6e-8 * mag + 1e-30;
        if (exact && memcmp(&got, &cw[(t * m + i) * n + j], 4)) ok = 0, err = INFINITY;
        if (!(err <= tol)) ok = 0;
        if (!(err <= worst)) worst = err, worst_tol = tol;
      }
  case_t info = {.batch = batch, .m = m, .n = n, .k = k, .ta = ta, .tb = tb, .pa = pad, .pb = pad};
  char what[64];
  snprintf(what, sizeof what, "format dtype=%d precision=%d%s", dt, prec, exact ? " (bitwise vs widened sgemm)" : "");
  report(ok, &info, what, worst, worst_tol);
  free(ah); free(bh); free(af); free(bf); free(c); free(cw);
}

static void run_formats(uint64_t seed) {
  uint64_t s = seed;
  const int dts[3] = {TPU_DTYPE_BF16, TPU_DTYPE_F16, TPU_DTYPE_F32};
  for (int r = 0; r < (SANITIZED ? 30 : 90); ++r) {
    int dt = dts[r % 3], prec = dt == TPU_DTYPE_F32 ? (int)rng_int(&s, 0, 2) : (int)rng_int(&s, 0, 2);
    int64_t m = rng_int(&s, 1, 70), n = rng_int(&s, 1, 70), k = rng_int(&s, 1, 90);
    run_fmt_case(rng_next(&s), dt, prec, rng_int(&s, 0, 2) ? 1 : rng_int(&s, 2, 4), m, n, k, (int)rng_int(&s, 0, 1),
                 (int)rng_int(&s, 0, 1), rng_int(&s, 0, 2));
  }
  /* past one k block and several tiles/threads; x @ W^T layout */
  int64_t big[][3] = {{150, 130, 600}, {1, 300, 700}, {97, 1, 530}, {64, 257, 1100}};
  for (int i = 0; i < TPU_ARRAY_LEN(big); ++i)
    for (int v = 0; v < 5; ++v)
      run_fmt_case(seed + (uint64_t)(i * 5 + v), v < 2 ? dts[v] : TPU_DTYPE_F32, v < 2 ? 1 : v - 2, 1, big[i][0],
                   big[i][1], big[i][2], 0, (i + v) & 1, 0);
}

/* ---- bf16 operands with explicit strides (both non-unit, zero, negative), odd k across k blocks,
 * edge tiles, batched with broadcast; run under every ISA level, so the vdpbf16ps kernel and the
 * widening path both meet them. Against the double reference over the bf16 values. */
/* f32: the operands are f32 (not bf16-exact) at DEFAULT precision (rounded to bf16 while packing). */
static void run_bf16_strided(uint64_t seed, int64_t batch, int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs,
                             int64_t b_rs, int64_t b_cs, int a_bcast, int b_bcast, float beta, int f32) {
  uint64_t s = seed;
  /* extent of one matrix: offsets keep every index non-negative */
  int64_t a_off = (a_rs < 0 ? -(m - 1) * a_rs : 0) + (a_cs < 0 ? -(k - 1) * a_cs : 0);
  int64_t b_off = (b_rs < 0 ? -(k - 1) * b_rs : 0) + (b_cs < 0 ? -(n - 1) * b_cs : 0);
  int64_t a_ext = a_off + (m - 1) * TPU_MAX(a_rs, (int64_t)0) + (k - 1) * TPU_MAX(a_cs, (int64_t)0) + 1;
  int64_t b_ext = b_off + (k - 1) * TPU_MAX(b_rs, (int64_t)0) + (n - 1) * TPU_MAX(b_cs, (int64_t)0) + 1;
  int64_t a_bs = a_bcast ? 0 : a_ext, b_bs = b_bcast ? 0 : b_ext;
  int64_t na = a_bcast ? a_ext : batch * a_ext, nb = b_bcast ? b_ext : batch * b_ext;
  uint16_t* a = malloc((size_t)na * 2);
  uint16_t* b = malloc((size_t)nb * 2);
  float* af = malloc((size_t)na * 4);
  float* bf = malloc((size_t)nb * 4);
  float* c = malloc((size_t)(batch * m * n) * 4);
  float* c0 = malloc((size_t)(batch * m * n) * 4);
  if (!a || !b || !af || !bf || !c || !c0) { fprintf(stderr, "out of memory\n"); exit(2); }
  for (int64_t i = 0; i < na; ++i) af[i] = (float)rng_unit(&s) * 4.0f, a[i] = tpu_f32_to_bf16(af[i]);
  for (int64_t i = 0; i < nb; ++i) bf[i] = (float)rng_unit(&s), b[i] = tpu_f32_to_bf16(bf[i]);
  const int dt = f32 ? TPU_DTYPE_F32 : TPU_DTYPE_BF16, prec = f32 ? 2 : 0;
  const char* ap = f32 ? (const char*)(af + a_off) : (const char*)(a + a_off);
  const char* bp = f32 ? (const char*)(bf + b_off) : (const char*)(b + b_off);
  for (int64_t i = 0; i < batch * m * n; ++i) c[i] = c0[i] = beta == 0.0f ? NAN : (float)rng_unit(&s);
  if (batch == 1)
    tpu_host_sgemm_ex(dt, dt, prec, m, n, k, 1.5f, ap, a_rs, a_cs, bp, b_rs, b_cs, beta, c, n, 1);
  else
    tpu_host_sgemm_batched_ex(dt, dt, prec, batch, m, n, k, 1.5f, ap, a_bs, a_rs, a_cs, bp, b_bs, b_rs, b_cs, beta, c,
                              m * n, n, 1);
  double worst = 0, worst_tol = 0;
  int ok = 1;
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          double prod = (double)tpu_bf16_to_f32(a[t * a_bs + a_off + i * a_rs + p * a_cs]) *
                        (double)tpu_bf16_to_f32(b[t * b_bs + b_off + p * b_rs + j * b_cs]);
          ref += prod, mag += fabs(prod);
        }
        double cin = c0[(t * m + i) * n + j];
        ref = 1.5 * ref + (beta == 0.0f ? 0.0 : (double)beta * cin);
        mag = 1.5 * mag + (beta == 0.0f ? 0.0 : fabs((double)beta * cin));
        double err = fabs((double)c[(t * m + i) * n + j] - ref), tol = 3.0 * (double)(k + 2) * 6e-8 * mag + 1e-30;
        if (!(err <= tol)) ok = 0;
        if (!(err <= worst)) worst = err, worst_tol = tol;
      }
  case_t info = {.batch = batch, .m = m, .n = n, .k = k, .alpha = 1.5, .beta = beta, .a_bs0 = a_bcast,
                 .b_bs0 = b_bcast, .za = a_rs == 0, .zb = b_rs == 0, .fa = a_rs < 0, .fb = b_rs < 0};
  char what[96];
  snprintf(what, sizeof what, "%s strides a=(%lld,%lld) b=(%lld,%lld)", f32 ? "f32 DEFAULT" : "bf16", (long long)a_rs, (long long)a_cs,
           (long long)b_rs, (long long)b_cs);
  report(ok, &info, what, worst, worst_tol);
  free(a); free(b); free(af); free(bf); free(c); free(c0);
}

static void run_bf16_layouts(uint64_t seed) {
  uint64_t s = seed;
  for (int r = 0; r < (SANITIZED ? 20 : 60); ++r) {
    int64_t m = rng_int(&s, 1, 45), n = rng_int(&s, 1, 70), k = rng_int(&s, 1, 41), batch = rng_int(&s, 0, 2) ? 1 : 3;
    int64_t a_rs = k, a_cs = 1, b_rs = n, b_cs = 1;
    switch (rng_int(&s, 0, 5)) { /* A: row-major, column-major, both strided, zero rows, flipped rows, flipped k */
      case 1: a_rs = 1, a_cs = m; break;
      case 2: a_rs = 3 * k + 1, a_cs = 3; break;
      case 3: a_rs = 0; break;
      case 4: a_rs = -k; break;
      case 5: a_cs = -1; break;
      default: break;
    }
    switch (rng_int(&s, 0, 4)) { /* B: row-major, B^T (x @ W^T), both strided, zero rows, flipped rows */
      case 1: b_rs = 1, b_cs = k; break;
      case 2: b_rs = 2, b_cs = 2 * k + 5; break;
      case 3: b_rs = 0; break;
      case 4: b_rs = -n; break;
      default: break;
    }
    run_bf16_strided(rng_next(&s), batch, m, n, k, a_rs, a_cs, b_rs, b_cs, batch > 1 && rng_int(&s, 0, 1),
                     batch > 1 && rng_int(&s, 0, 1), rng_int(&s, 0, 2) ? 0.0f : 0.5f, r % 3 == 2);
  }
  /* odd k across several k blocks, edge tiles in m and n, split over threads */
  const int64_t big[][3] = {{29, 65, 1537}, {130, 97, 2049}, {15, 33, 3}, {200, 300, 777}};
  for (int i = 0; i < TPU_ARRAY_LEN(big); ++i) {
    run_bf16_strided(seed + (uint64_t)i, 1, big[i][0], big[i][1], big[i][2], big[i][2], 1, 1, big[i][2], 0, 0, 0.0f, i & 1);
    run_bf16_strided(seed + 7 + (uint64_t)i, 1, big[i][0], big[i][1], big[i][2], 1, big[i][0], big[i][1], 1, 0, 0, 1.0f,
                     !(i & 1));
  }
  run_bf16_strided(seed + 99, 6, 40, 50, 301, 301, 1, 1, 301, 0, 1, 0.0f, 0); /* batched x @ W^T, shared W */
}

/* vdpbf16ps flushes denormal bf16 inputs to zero (documented in gemm.h); the widening path keeps
 * them. A (m x 2) @ B (2 x m) with every row a = {2^-130, 1}, every column b = {2^100, 2^-20} (zero strides):
 * widening 2^-30 + 2^-20. m = 2 is a tiny product (gemm.c gemm_widen_tiny: widened on every ISA); m = 128
 * (m * m * 2 above the tiny bound) takes the vdpbf16ps kernel where there is one. */
static void run_bf16_denormals(void) {
  const uint16_t a[2] = {tpu_f32_to_bf16(0x1p-130f), tpu_f32_to_bf16(1.0f)};
  const uint16_t b[2] = {tpu_f32_to_bf16(0x1p100f), tpu_f32_to_bf16(0x1p-20f)};
  static float c[128 * 128];
  const int64_t last = 128 * 128 - 1;
  tpu_host_gemm_isa_t old = tpu_host_gemm_set_isa(TPU_HOST_GEMM_ISA_AVX512);
  tpu_host_sgemm_ex(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, 128, 128, 2, 1.0f, a, 0, 1, b, 1, 0, 0.0f, c, 128, 1);
  case_t info = {.batch = 1, .m = 128, .n = 128, .k = 2};
  report(c[0] == 0x1p-30f + 0x1p-20f && c[last] == c[0], &info, "bf16 denormal kept (widening path)", c[0], 0);
  tpu_host_gemm_set_isa(TPU_HOST_GEMM_ISA_AVX512BF16);
  tpu_host_sgemm_ex(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, 2, 2, 2, 1.0f, a, 0, 1, b, 1, 0, 0.0f, c, 2, 1);
  report(c[0] == 0x1p-30f + 0x1p-20f && c[3] == c[0], &(case_t){.batch = 1, .m = 2, .n = 2, .k = 2},
         "bf16 denormal kept (tiny product: widened on every ISA)", c[0], 0);
  if (bf16_kernel_on()) {
    tpu_host_sgemm_ex(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, 128, 128, 2, 1.0f, a, 0, 1, b, 1, 0, 0.0f, c, 128, 1);
    report(c[0] == 0x1p-20f && c[last] == c[0], &info, "bf16 denormal flushed (vdpbf16ps)", c[0], 0);
  } else {
    printf("vdpbf16ps kernel: skipped (CPU lacks AVX512-BF16)\n");
  }
  tpu_host_gemm_set_isa(old);
}

/* A read in place (ukr_a, narrow tiles of C) gives the packed kernel's bits: the same products in the
 * same order. Every A layout, edge rows (m % MR), several k blocks (beta applied once), strided C. */
static void run_direct_a(uint64_t seed) {
  uint64_t s = seed;
  for (int r = 0; r < (SANITIZED ? 30 : 120); ++r) {
    const int64_t m = rng_int(&s, 1, r % 10 == 0 ? 300 : 40), n = rng_int(&s, 1, r % 7 == 0 ? 200 : 64);
    const int64_t k = r % 5 == 0 ? rng_int(&s, 257, 700) : rng_int(&s, 1, 80), batch = r % 4 == 0 ? 3 : 1;
    int64_t a_rs = k, a_cs = 1, a_off = 0;
    switch (rng_int(&s, 0, 5)) { /* row-major, column-major, both strided, zero rows, flipped rows, flipped k */
      case 1: a_rs = 1, a_cs = m; break;
      case 2: a_rs = 3 * k + 1, a_cs = 3; break;
      case 3: a_rs = 0; break;
      case 4: a_rs = -k, a_off = (m - 1) * k; break;
      case 5: a_cs = -1, a_off = k - 1; break;
      default: break;
    }
    const int tb = (int)rng_int(&s, 0, 1), c_tr = r % 6 == 5;
    const float beta = rng_int(&s, 0, 1) ? 0.0f : 0.5f;
    const int64_t a_span = 3 * m * k + 3 * k + 1, a_bs = a_span;
    float* a = malloc((size_t)(batch * a_span) * sizeof(float));
    float* b = malloc((size_t)(batch * k * n) * sizeof(float));
    float* c0 = malloc((size_t)(batch * m * n) * sizeof(float));
    float* c1 = malloc((size_t)(batch * m * n) * sizeof(float));
    float* c2 = malloc((size_t)(batch * m * n) * sizeof(float));
    for (int64_t i = 0; i < batch * a_span; ++i) a[i] = (float)rng_unit(&s);
    for (int64_t i = 0; i < batch * k * n; ++i) b[i] = (float)rng_unit(&s);
    for (int64_t i = 0; i < batch * m * n; ++i) c0[i] = (float)rng_unit(&s);
    memcpy(c1, c0, (size_t)(batch * m * n) * sizeof(float));
    memcpy(c2, c0, (size_t)(batch * m * n) * sizeof(float));
    const int64_t b_rs = tb ? 1 : n, b_cs = tb ? k : 1, c_rs = c_tr ? 1 : n, c_cs = c_tr ? m : 1;
    int old = tpu_host_gemm_set_direct_a(1 << 30);
    tpu_host_sgemm_batched(batch, m, n, k, 1.25f, a + a_off, a_bs, a_rs, a_cs, b, k * n, b_rs, b_cs, beta, c1, m * n,
                           c_rs, c_cs);
    tpu_host_gemm_set_direct_a(0);
    tpu_host_sgemm_batched(batch, m, n, k, 1.25f, a + a_off, a_bs, a_rs, a_cs, b, k * n, b_rs, b_cs, beta, c2, m * n,
                           c_rs, c_cs);
    tpu_host_gemm_set_direct_a(old);
    case_t info = {.batch = batch, .m = m, .n = n, .k = k, .alpha = 1.25, .beta = beta, .tb = tb};
    char what[96];
    snprintf(what, sizeof what, "A in place == packed, bitwise, a=(%lld,%lld) c_cs=%lld", (long long)a_rs, (long long)a_cs,
             (long long)c_cs);
    report(!memcmp(c1, c2, (size_t)(batch * m * n) * sizeof(float)), &info, what, 0, 0);
    free(a); free(b); free(c0); free(c1); free(c2);
  }
}

/* ---- the epilogue's direct bf16 store (tpu_host_gemm_epi_t.out_bf16): out = bf16(bias + C) equals the
 * rounding of the f32 product the same kernels compute into C, bit for bit; fn is never called on the block
 * path. Random bf16 / f32 operands and layouts, m or n of 1 (GEMV), k over one block (C written, then
 * stored), transposed C and output, broadcast / strided / absent bias, batches in one call or one call per
 * matrix with t0 counting (as the executor's unfolded batch loop). */
static void epi_never(void* ctx, int64_t t, int64_t i0, int64_t j0, int64_t mb, int64_t nb, const float* blk,
                      int64_t rs, int64_t cs) {
  (void)t, (void)i0, (void)j0, (void)mb, (void)nb, (void)blk, (void)rs, (void)cs;
  ++*(int*)ctx;
}
static void run_store_bf16(uint64_t seed) {
  uint64_t s = seed;
  int64_t den_total = 0;
  for (int r = 0; r < (SANITIZED ? 40 : 160); ++r) {
    const int64_t batch = r % 3 == 0 ? rng_int(&s, 2, 5) : 1;
    const int64_t m = r % 9 == 0 ? 1 : rng_int(&s, 1, r % 5 == 0 ? 300 : 70);
    const int64_t n = r % 11 == 0 ? 1 : rng_int(&s, 1, r % 4 == 0 ? 200 : 70);
    const int64_t k = r % 13 == 0 ? rng_int(&s, 800, 1100) : rng_int(&s, 1, 140);
    const int dt = r % 4 == 3 ? TPU_DTYPE_F32 : TPU_DTYPE_BF16;
    const int ta = (int)rng_int(&s, 0, 1), tb = (int)rng_int(&s, 0, 1), c_tr = r % 5 == 4, o_tr = r % 7 == 6;
    int bias_kind = (int)rng_int(&s, 0, 3); /* none, per column, per (matrix, column), stepped */
    if (r % 10 == 1) bias_kind = 1 + bias_kind % 3;
    const int per_call = batch > 1 && r % 2;
    const int64_t es = dt == TPU_DTYPE_BF16 ? 2 : 4;
    char* a = malloc((size_t)(batch * m * k) * (size_t)es);
    char* b = malloc((size_t)(batch * k * n) * (size_t)es);
    float* c = malloc((size_t)(batch * m * n) * sizeof(float));
    float* bias = malloc((size_t)(batch * 2 * n) * sizeof(float));
    uint16_t* out = malloc((size_t)(batch * m * n + 1) * sizeof(uint16_t));
    for (int64_t i = 0; i < batch * m * k; ++i) {
      float v = (float)rng_unit(&s) * 4;
      if (dt == TPU_DTYPE_BF16) ((uint16_t*)a)[i] = tpu_f32_to_bf16(v); else ((float*)a)[i] = v;
    }
    for (int64_t i = 0; i < batch * k * n; ++i) {
      float v = (float)rng_unit(&s) * (r % 10 == 1 ? 0.0f : 1.0f); /* r % 10 == 1: denormal bias + 0 */
      if (i % 101 == 7) v = i % 2 ? INFINITY : NAN;
      if (dt == TPU_DTYPE_BF16) ((uint16_t*)b)[i] = tpu_f32_to_bf16(v); else ((float*)b)[i] = v;
    }
    for (int64_t i = 0; i < batch * 2 * n; ++i)
      bias[i] = (float)rng_unit(&s) * (r % 10 == 1 ? 1e-39f : i % 17 == 3 ? 1e30f : 8.0f); /* f32 denormals */
    const int64_t a_rs = ta ? 1 : k, a_cs = ta ? m : 1, b_rs = tb ? 1 : n, b_cs = tb ? k : 1;
    const int64_t c_rs = c_tr ? 1 : n, c_cs = c_tr ? m : 1, o_rs = o_tr ? 1 : n, o_cs = o_tr ? m : 1;
    const float* bp = bias_kind ? bias : NULL;
    const int64_t bias_bs = bias_kind == 2 ? 2 * n : 0, bias_cs = bias_kind == 3 ? 2 : 1;
    /* expected: the f32 product into C, then rounded */
    tpu_host_sgemm_batched_ex(dt, dt, 0, batch, m, n, k, 1.0f, a, m * k, a_rs, a_cs, b, k * n, b_rs, b_cs, 0.0f, c,
                              m * n, c_rs, c_cs);
    out[batch * m * n] = 0xabcd; /* sentinel */
    for (int64_t i = 0; i < batch * m * n; ++i) out[i] = 0x1234;
    int calls = 0;
    tpu_host_gemm_epi_t epi = {epi_never, &calls, 0, (int)rng_int(&s, 0, 1), out, m * n, o_rs, o_cs, bp, bias_bs, bias_cs};
    float* c2 = malloc((size_t)(batch * m * n) * sizeof(float));
    if (per_call)
      for (int64_t t = 0; t < batch; ++t, ++epi.t0)
        tpu_host_sgemm_batched_epi(dt, dt, 0, 1, m, n, k, 1.0f, a + t * m * k * es, 0, a_rs, a_cs, b + t * k * n * es,
                                   0, b_rs, b_cs, 0.0f, c2 + t * m * n, 0, c_rs, c_cs, &epi);
    else
      tpu_host_sgemm_batched_epi(dt, dt, 0, batch, m, n, k, 1.0f, a, m * k, a_rs, a_cs, b, k * n, b_rs, b_cs, 0.0f, c2,
                                 m * n, c_rs, c_cs, &epi);
    int ok = calls == 0 && out[batch * m * n] == 0xabcd, denormals = 0;
    for (int64_t t = 0; t < batch && ok; ++t)
      for (int64_t i = 0; i < m && ok; ++i)
        for (int64_t j = 0; j < n && ok; ++j) {
          const float v = c[t * m * n + i * c_rs + j * c_cs];
          const uint16_t want = tpu_f32_to_bf16(bp ? bp[t * bias_bs + j * bias_cs] + v : v);
          ok = out[t * m * n + i * o_rs + j * o_cs] == want;
          denormals += (want & 0x7f80) == 0 && (want & 0x7f) != 0;
        }
    case_t info = {.batch = batch, .m = m, .n = n, .k = k, .alpha = 1, .beta = 0, .tb = tb};
    char what[128];
    snprintf(what, sizeof what, "direct bf16 store == bf16(bias + C) %s ta %d c_tr %d o_tr %d bias %d per_call %d den %d",
             dt == TPU_DTYPE_BF16 ? "bf16" : "f32", ta, c_tr, o_tr, bias_kind, per_call, denormals);
    report(ok, &info, what, 0, 0);
    den_total += denormals;
    free(a); free(b); free(c); free(c2); free(bias); free(out);
  }
  if (den_total == 0) report(0, &(case_t){0}, "direct bf16 store: no denormal result was produced", 0, 0);
}

/* ---- bf16 operands with A read in place (the bf16 kernels' ukr_a reads A's k-pairs as words from row-major
 * rows): bitwise equal to packed A. Odd k (the last pair is A's last element alone: read past it, ASan would
 * see it at the buffer's end), several k blocks, padded / zero / negative row strides, strided C, m around both
 * strip heights (8 and 14). */
static void run_direct_a_bf16(uint64_t seed) {
  uint64_t s = seed;
  int64_t in_place_on = 0, in_place_off = 0, d0, d1, st, sm;
  const int counting = tpu_host_gemm_count_paths(1);
  for (int r = 0; r < (SANITIZED ? 30 : 100); ++r) {
    const int64_t m = r % 8 == 0 ? rng_int(&s, 60, 200) : rng_int(&s, 1, 70), n = rng_int(&s, 1, r % 5 == 0 ? 128 : 64);
    const int64_t k = r % 6 == 0 ? rng_int(&s, 769, 1700) : rng_int(&s, 1, 90), batch = r % 4 == 0 ? 3 : 1;
    const int kind = (int)rng_int(&s, 0, 3); /* row-major, padded rows, zero rows, flipped rows */
    const int64_t a_rs = kind == 1 ? k + rng_int(&s, 1, 5) : kind == 2 ? 0 : kind == 3 ? -k : k;
    const int64_t a_span = (m - 1) * (a_rs < 0 ? -a_rs : a_rs) + k, a_off = a_rs < 0 ? (m - 1) * k : 0;
    const int tb = (int)rng_int(&s, 0, 1), c_tr = r % 7 == 6;
    const float beta = rng_int(&s, 0, 1) ? 0.0f : 0.5f;
    uint16_t* a = malloc((size_t)(batch * a_span) * 2);
    uint16_t* b = malloc((size_t)(batch * k * n) * 2);
    float* c0 = malloc((size_t)(batch * m * n) * sizeof(float));
    float* c1 = malloc((size_t)(batch * m * n) * sizeof(float));
    float* c2 = malloc((size_t)(batch * m * n) * sizeof(float));
    for (int64_t i = 0; i < batch * a_span; ++i) a[i] = tpu_f32_to_bf16((float)rng_unit(&s) * 3.0f);
    for (int64_t i = 0; i < batch * k * n; ++i) b[i] = tpu_f32_to_bf16((float)rng_unit(&s));
    for (int64_t i = 0; i < batch * m * n; ++i) c0[i] = (float)rng_unit(&s);
    memcpy(c1, c0, (size_t)(batch * m * n) * sizeof(float));
    memcpy(c2, c0, (size_t)(batch * m * n) * sizeof(float));
    const int64_t b_rs = tb ? 1 : n, b_cs = tb ? k : 1, c_rs = c_tr ? 1 : n, c_cs = c_tr ? m : 1;
    int old = tpu_host_gemm_set_direct_a(1 << 30);
    tpu_host_gemm_path_counts(&d0, &st, &sm);
    tpu_host_sgemm_batched_ex(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, batch, m, n, k, 1.25f, a + a_off, a_span, a_rs, 1, b,
                              k * n, b_rs, b_cs, beta, c1, m * n, c_rs, c_cs);
    tpu_host_gemm_path_counts(&d1, &st, &sm);
    in_place_on += d1 - d0;
    tpu_host_gemm_set_direct_a(0);
    tpu_host_sgemm_batched_ex(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, batch, m, n, k, 1.25f, a + a_off, a_span, a_rs, 1, b,
                              k * n, b_rs, b_cs, beta, c2, m * n, c_rs, c_cs);
    tpu_host_gemm_path_counts(&d0, &st, &sm);
    in_place_off += d0 - d1;
    tpu_host_gemm_set_direct_a(old);
    case_t info = {.batch = batch, .m = m, .n = n, .k = k, .alpha = 1.25, .beta = beta, .tb = tb};
    char what[96];
    snprintf(what, sizeof what, "bf16 A in place == packed, bitwise, a_rs=%lld c_cs=%lld", (long long)a_rs,
             (long long)c_cs);
    report(!memcmp(c1, c2, (size_t)(batch * m * n) * sizeof(float)), &info, what, 0, 0);
    free(a); free(b); free(c0); free(c1); free(c2);
  }
  tpu_host_gemm_count_paths(counting);
  /* the comparison above means something only if the first call read A in place and the second did not */
  report(in_place_off == 0 && (in_place_on > 0 || !bf16_kernel_on()), &(case_t){0},
         "bf16 A in place: tiles read A in place only when enabled", 0, 0);
}

/* ---- the direct bf16 store from the bf16 kernels' registers (ukr_bf16 / ukr_a_bf16: one k pass, c_unused,
 * contiguous output rows and bias): out == bf16(bias + C) of the same kernels, bit for bit, with A packed or in
 * place, m around both strip heights, odd k, NaN/inf products, alpha != 1, and f32 denormal results (a denormal
 * bias over zero products; tiny products scaled by alpha), which vcvtne2ps2bf16 would flush. */
static void run_store_bf16_regs(uint64_t seed) {
  uint64_t s = seed;
  int64_t da, st0, st1, sm;
  const int counting = tpu_host_gemm_count_paths(1);
  tpu_host_gemm_path_counts(&da, &st0, &sm);
  const int64_t shapes[][3] = {{64, 64, 32}, {64, 32, 64}, {32, 64, 64}, {70, 33, 31}, {8, 32, 2}, {14, 7, 1},
                               {9, 100, 129}, {130, 64, 768}, {1, 40, 5}, {23, 1, 9}, {57, 96, 3}};
  for (int r = 0; r < (SANITIZED ? 24 : 88); ++r) {
    const int64_t* sh = shapes[r % TPU_ARRAY_LEN(shapes)];
    const int64_t m = sh[0], n = sh[1], k = sh[2], batch = r % 3 == 0 ? 2 : 1;
    const int ta = r % 4 == 3, tb = (r / 4) % 2, bias_kind = (r / 2) % 3; /* none, one row, one row per matrix */
    const int den = (r / 5) % 4 == 1, tiny = (r / 5) % 4 == 2;          /* denormal bias / tiny products */
    const float alpha = tiny ? 0x1p-10f : r % 5 == 2 ? 1.5f : 1.0f;
    const int64_t a_rs = ta ? 1 : k, a_cs = ta ? m : 1, b_rs = tb ? 1 : n, b_cs = tb ? k : 1;
    uint16_t* a = malloc((size_t)(batch * m * k) * 2);
    uint16_t* b = malloc((size_t)(batch * k * n) * 2);
    float* c = malloc((size_t)(batch * m * n) * sizeof(float));
    float* c2 = malloc((size_t)(batch * m * n) * sizeof(float));
    float* bias = malloc((size_t)(batch * n) * sizeof(float));
    uint16_t* out = malloc((size_t)(batch * m * n + 1) * sizeof(uint16_t));
    for (int64_t i = 0; i < batch * m * k; ++i)
      a[i] = tpu_f32_to_bf16(tiny ? 0x1p-60f * (float)rng_unit(&s) : (float)rng_unit(&s) * 4);
    for (int64_t i = 0; i < batch * k * n; ++i) {
      float v = den ? 0.0f : tiny ? 0x1p-60f * (float)rng_unit(&s) : (float)rng_unit(&s);
      if (!den && !tiny && i % 97 == 5) v = i % 2 ? INFINITY : NAN;
      b[i] = tpu_f32_to_bf16(v);
    }
    for (int64_t i = 0; i < batch * n; ++i)
      bias[i] = den ? (float)(rng_unit(&s) + 3.0) * 2.5e-40f : tiny ? 0.0f : (float)rng_unit(&s) * 8; /* den: 5e-40..1e-39 */
    const float* bp = bias_kind ? bias : NULL;
    const int64_t bias_bs = bias_kind == 2 ? n : 0;
    tpu_host_sgemm_batched_ex(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, batch, m, n, k, alpha, a, m * k, a_rs, a_cs, b, k * n,
                              b_rs, b_cs, 0.0f, c, m * n, n, 1);
    int ok = 1, denormals = 0;
    for (int direct = 0; direct < 2; ++direct) {
      int old = tpu_host_gemm_set_direct_a(direct ? 1 << 30 : 0), calls = 0;
      for (int64_t i = 0; i <= batch * m * n; ++i) out[i] = 0xabcd;
      tpu_host_gemm_epi_t epi = {epi_never, &calls, 0, 1, out, m * n, n, 1, bp, bias_bs, 1};
      tpu_host_sgemm_batched_epi(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, batch, m, n, k, alpha, a, m * k, a_rs, a_cs, b,
                                 k * n, b_rs, b_cs, 0.0f, c2, m * n, n, 1, &epi);
      tpu_host_gemm_set_direct_a(old);
      ok &= calls == 0 && out[batch * m * n] == 0xabcd;
      for (int64_t t = 0; t < batch; ++t)
        for (int64_t i = 0; i < m * n; ++i) {
          const float v = c[t * m * n + i];
          const uint16_t want = tpu_f32_to_bf16(bp ? bp[t * bias_bs + i % n] + v : v);
          ok &= out[t * m * n + i] == want;
          denormals += !direct && (want & 0x7f80) == 0 && (want & 0x7f) != 0;
        }
    }
    case_t info = {.batch = batch, .m = m, .n = n, .k = k, .alpha = alpha, .ta = ta, .tb = tb};
    char what[128];
    snprintf(what, sizeof what, "bf16 store from registers == bf16(bias + C) bias %d den %d tiny %d (%d denormal)",
             bias_kind, den, tiny, denormals);
    report(ok && (!((den && bp) || tiny) || denormals > 0 || !bf16_kernel_on()), &info, what, 0, 0);
    free(a); free(b); free(c); free(c2); free(bias); free(out);
  }
  tpu_host_gemm_path_counts(&da, &st1, &sm); /* the register store ran (same bits as the f32 block path) */
  tpu_host_gemm_count_paths(counting);
  report(st1 > st0 || !bf16_kernel_on(), &(case_t){0}, "bf16 store from registers: the kernels' store path ran", 0, 0);
}

/* ---- the small path (gemm.h small: one k block, A read in place, row strips cut to the rows there are) gives
 * the packed path's bits: A row-major / column-major / strided / zero / flipped rows, B row-major (in place) /
 * B^T (x @ W^T) / strided / zero / flipped rows, transposed C (computed as C^T), beta 0 over NaN C and beta
 * != 0, m across strip splits (1..14 rows, 16 = 8 + 8), n around the 16- and 32-column chunks, k up to one k
 * block and past it (packed), batches (broadcast A or B), the minGPT backward's shapes (dW = dY^T X with
 * k = batch * seq, dX = dY W, attention's 64 x (16 x 8 x 16)). With an f32 epilogue (C kept, or c_unused) the
 * blocks are disjoint, cover C and hold its final bits. Counted: the small path ran where the kernel has one,
 * and not with set_direct_a(0) (the reference run). */
typedef struct small_epi_s {
  int64_t batch, m, n;
  const float* want; /* (batch, m, n) row-major */
  int* seen;
  int bad;
} small_epi_t;
static void small_epi_fn(void* ctx, int64_t t, int64_t i0, int64_t j0, int64_t mb, int64_t nb, const float* blk,
                         int64_t rs, int64_t cs) {
  small_epi_t* e = (small_epi_t*)ctx;
  if (t < 0 || t >= e->batch || i0 < 0 || j0 < 0 || mb < 1 || nb < 1 || i0 + mb > e->m || j0 + nb > e->n) {
    e->bad = 1;
    return;
  }
  for (int64_t i = 0; i < mb; ++i)
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t x = (t * e->m + i0 + i) * e->n + j0 + j;
      e->seen[x]++;
      if (memcmp(&blk[i * rs + j * cs], &e->want[x], 4)) e->bad = 1;
    }
}
static void run_small(uint64_t seed) {
  uint64_t s = seed;
  int64_t da, st, sm0, sm1, small_on = 0, small_off = 0;
  const int counting = tpu_host_gemm_count_paths(1);
  static const int64_t shapes[][4] = {{1, 96, 32, 256}, {1, 32, 32, 256}, {1, 32, 128, 256}, {1, 128, 32, 256},
                                      {1, 40, 32, 256}, {1, 256, 32, 96},  {1, 256, 128, 32}, {1, 256, 40, 32},
                                      {64, 16, 8, 16},  {64, 8, 16, 16},   {64, 16, 16, 8},   {3, 15, 17, 512},
                                      {2, 29, 33, 513}, {1, 14, 48, 1}};
  const int nshapes = TPU_ARRAY_LEN(shapes), rounds = SANITIZED ? 60 : 240;
  for (int r = 0; r < rounds; ++r) {
    int64_t batch, m, n, k;
    if (r < 2 * nshapes) {
      const int64_t* sh = shapes[r % nshapes];
      batch = sh[0], m = sh[1], n = sh[2], k = sh[3];
    } else {
      batch = rng_int(&s, 0, 3) ? 1 : rng_int(&s, 2, 5);
      m = rng_int(&s, 1, r % 9 == 0 ? 300 : 45), n = rng_int(&s, 1, r % 7 == 0 ? 160 : 70);
      k = r % 8 == 0 ? rng_int(&s, 300, 600) : rng_int(&s, 1, 90);
    }
    int64_t a_rs = k, a_cs = 1, a_off = 0, b_rs = n, b_cs = 1, b_off = 0;
    switch (r < 2 * nshapes ? (r / nshapes) * 4 + (r % 2) : (int)rng_int(&s, 0, 5)) { /* A layouts */
      case 1: case 5: a_rs = 1, a_cs = m; break;
      case 2: a_rs = 2 * k + 3, a_cs = 2; break;
      case 3: a_rs = 0; break;
      case 4: a_rs = -k, a_off = (m - 1) * k; break;
      default: break;
    }
    switch (r < 2 * nshapes ? (r / 2) % 2 : (int)rng_int(&s, 0, 4)) { /* B layouts */
      case 1: b_rs = 1, b_cs = k; break;
      case 2: b_rs = 2 * n + 1, b_cs = 2; break;
      case 3: b_rs = 0; break;
      case 4: b_rs = -n, b_off = (k - 1) * n; break;
      default: break;
    }
    const int c_tr = r % 6 == 5, a_bc = batch > 1 && r % 5 == 1, b_bc = batch > 1 && r % 5 == 2;
    const float beta = r % 3 == 2 ? 0.75f : 0.0f, alpha = r % 4 == 3 ? -1.5f : 1.0f;
    const int64_t a_span = 2 * m * k + 3 * m + 3 * k + 1, b_span = 2 * k * n + 2 * n + 2 * k + 1, mn = m * n;
    float* a = malloc((size_t)(batch * a_span) * sizeof(float));
    float* b = malloc((size_t)(batch * b_span) * sizeof(float));
    float* c0 = malloc((size_t)(batch * mn) * sizeof(float));
    float* c1 = malloc((size_t)(batch * mn) * sizeof(float));
    float* c2 = malloc((size_t)(batch * mn) * sizeof(float));
    float* want = malloc((size_t)(batch * mn) * sizeof(float));
    int* seen = calloc((size_t)(batch * mn), sizeof(int));
    if (!a || !b || !c0 || !c1 || !c2 || !want || !seen) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (int64_t i = 0; i < batch * a_span; ++i) a[i] = (float)rng_unit(&s);
    for (int64_t i = 0; i < batch * b_span; ++i) b[i] = (float)rng_unit(&s);
    for (int64_t i = 0; i < batch * mn; ++i) c0[i] = beta == 0.0f ? NAN : (float)rng_unit(&s);
    const int64_t c_rs = c_tr ? 1 : n, c_cs = c_tr ? m : 1;
    const int64_t a_bs = a_bc ? 0 : a_span, b_bs = b_bc ? 0 : b_span;
    int ok = 1;
    for (int v = 0; v < 3; ++v) { /* 0: packed (reference), 1: small path, 2: small path with an epilogue */
      memcpy(v == 0 ? c2 : c1, c0, (size_t)(batch * mn) * sizeof(float));
      tpu_host_gemm_path_counts(&da, &st, &sm0);
      const int old = tpu_host_gemm_set_direct_a(v == 0 ? 0 : -1);
      small_epi_t e = {batch, m, n, want, seen, 0};
      tpu_host_gemm_epi_t epi = {small_epi_fn, &e, 0, beta == 0.0f && r % 2, NULL, 0, 0, 0, NULL, 0, 0};
      tpu_host_sgemm_batched_epi(TPU_DTYPE_F32, TPU_DTYPE_F32, 0, batch, m, n, k, alpha, a + a_off, a_bs, a_rs, a_cs,
                                 b + b_off, b_bs, b_rs, b_cs, beta, v == 0 ? c2 : c1, mn, c_rs, c_cs,
                                 v == 2 ? &epi : NULL);
      tpu_host_gemm_set_direct_a(old);
      tpu_host_gemm_path_counts(&da, &st, &sm1);
      if (v == 0) small_off += sm1 - sm0;
      else small_on += sm1 - sm0;
      if (v == 0) /* C's final values in (t, i, j) order for the epilogue check */
        for (int64_t t = 0; t < batch; ++t)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) want[(t * m + i) * n + j] = c2[t * mn + i * c_rs + j * c_cs];
      if (v == 1) ok &= !memcmp(c1, c2, (size_t)(batch * mn) * sizeof(float));
      if (v == 2) {
        ok &= !e.bad && (epi.c_unused || !memcmp(c1, c2, (size_t)(batch * mn) * sizeof(float)));
        for (int64_t i = 0; i < batch * mn; ++i) ok &= seen[i] == 1;
      }
    }
    case_t info = {.batch = batch, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta, .tc = c_tr};
    char what[128];
    snprintf(what, sizeof what, "small path == packed, bitwise (+ epilogue blocks), a=(%lld,%lld) b=(%lld,%lld)",
             (long long)a_rs, (long long)a_cs, (long long)b_rs, (long long)b_cs);
    report(ok, &info, what, 0, 0);
    free(a); free(b); free(c0); free(c1); free(c2); free(want); free(seen);
  }
  tpu_host_gemm_count_paths(counting);
  const int has_small = strstr(tpu_host_gemm_isa_name(), "avx") != NULL; /* AVX2: beta 0 only */
  report(small_off == 0 && (small_on > 0 || !has_small), &(case_t){0}, "small path: ran only when enabled", 0, 0);
}

/* Two threads calling into the shared pool at once: the second runs inline, results still right. */
static void* concurrent_main(void* arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg;
  for (int r = 0; r < (SANITIZED ? 3 : 8); ++r) {
    case_t t = {.batch = 1, .m = 120 + r, .n = 130, .k = 140, .alpha = 1, .beta = 0, .nan_c = 1, .tb = r & 1};
    run_case(&t, rng_next(&s));
  }
  return NULL;
}

int main(void) {
  const tpu_host_gemm_isa_t isas[] = {TPU_HOST_GEMM_ISA_PORTABLE, TPU_HOST_GEMM_ISA_AVX2, TPU_HOST_GEMM_ISA_AVX512,
                                      TPU_HOST_GEMM_ISA_AVX512BF16, TPU_HOST_GEMM_ISA_BEST};
  const char* last = "";
  for (int i = 0; i < TPU_ARRAY_LEN(isas); ++i) {
    tpu_host_gemm_set_isa(isas[i]);
    if (i > 0 && !strcmp(last, tpu_host_gemm_isa_name())) continue; /* CPU lacks this ISA */
    last = tpu_host_gemm_isa_name();
    int before = g_failed;
    run_isa_suite(0x9e3779b97f4a7c15ull + (uint64_t)i, SANITIZED ? 150 : 400, SANITIZED ? 40 : 70);
    run_large(77 + (uint64_t)i);
    run_batched(1234 + (uint64_t)i);
    run_formats(4321 + (uint64_t)i);
    run_bf16_layouts(555 + (uint64_t)i);
    run_direct_a(999 + (uint64_t)i);
    run_store_bf16(2024 + (uint64_t)i);
    run_direct_a_bf16(3030 + (uint64_t)i);
    run_store_bf16_regs(4040 + (uint64_t)i);
    run_small(5050 + (uint64_t)i);
    printf("kernels %-16s %s\n", last, g_failed == before ? "ok" : "FAILED");
  }
  run_bf16_denormals();
  tpu_host_gemm_set_isa(TPU_HOST_GEMM_ISA_BEST);
  pthread_t th[2];
  for (int i = 0; i < 2; ++i) pthread_create(&th[i], NULL, concurrent_main, (void*)(uintptr_t)(99 + i));
  for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
  printf("%d passed, %d failed\n", (int)g_passed, (int)g_failed);
  return g_failed ? 1 : 0;
}
