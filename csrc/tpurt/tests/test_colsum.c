/* test_colsum.c — bf16 / f16 column sums (drivers/host/colsum.h) against a naive twin: each column's values
 * widened and added in row order into a double, rounded to f32 (the f32 kernel's sums on the widened values).
 * Every ISA the CPU has, odd sizes (tails of the vector and row loops), strided rows and columns, negative and
 * zero strides, NaN / inf / denormal inputs; results equal bitwise. With "-bench" times the kernel (one thread,
 * process CPU time). Prints "N passed, M failed" last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "drivers/host/colsum.h"

static int g_passed, g_failed;

static uint64_t rng_next(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return *s = x;
}

static float widen(int dt, uint16_t h) { return dt == TPU_DTYPE_BF16 ? tpu_bf16_to_f32(h) : tpu_f16_to_f32(h); }

/* x (m, n) at base + r * rs + j * cs */
static void col_sums_ref(int dt, const uint16_t* x, int64_t rs, int64_t cs, int64_t m, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t r = 0; r < m; ++r) s += (double)widen(dt, x[r * rs + j * cs]);
    out[j] = (float)s;
  }
}

static void check(int dt, int64_t m, int64_t n, int64_t rs, int64_t cs, int specials, uint64_t* seed) {
  /* storage spans the view; negative strides start from the far end */
  int64_t span = 1 + (m - 1) * (rs < 0 ? -rs : rs) + (n - 1) * (cs < 0 ? -cs : cs);
  uint16_t* buf = malloc((size_t)(span > 0 ? span : 1) * 2);
  for (int64_t i = 0; i < span; ++i) {
    float v = (float)((int64_t)(rng_next(seed) % 20001) - 10000) * 1e-3f;
    buf[i] = dt == TPU_DTYPE_BF16 ? tpu_f32_to_bf16(v) : tpu_f32_to_f16(v);
    if (specials && rng_next(seed) % 97 == 0) {
      static const uint16_t bf[] = {0x7fc0, 0xff80, 0x7f80, 0x0001, 0x8003, 0x7f7f};
      static const uint16_t hf[] = {0x7e00, 0xfc00, 0x7c00, 0x0001, 0x8003, 0x7bff};
      buf[i] = (dt == TPU_DTYPE_BF16 ? bf : hf)[rng_next(seed) % 6];
    }
  }
  uint16_t* x0 = buf + (rs < 0 ? -(m - 1) * rs : 0) + (cs < 0 ? -(n - 1) * cs : 0);
  float* want = malloc((size_t)(n + 1) * 4);
  float* got = malloc((size_t)(n + 1) * 4);
  col_sums_ref(dt, x0, rs, cs, m, n, want);
  tpu_host_view_t xv = {(char*)x0, dt, 2, {m, n}, {rs, cs}}, ov = {(char*)got, TPU_DTYPE_F32, 1, {n}, {1}};
  for (int isa = 0; isa <= 2; ++isa) {
    if (isa > 0 && tpu_host_colsum_ops(isa) == tpu_host_colsum_ops(isa - 1)) continue;
    for (int64_t j = 0; j <= n; ++j) got[j] = -12345.0f; /* got[n]: a sentinel past the end */
    tpu_status_t st;
    if (isa == 2) {
      st = tpu_host_k_col_sums_lowp(&xv, &ov);
    } else { /* one ISA's row kernel directly (contiguous columns only) */
      if (cs != 1) continue;
      double* acc = calloc((size_t)(n > 0 ? n : 0) + 1, 8);
      const tpu_host_colsum_ops_t* o = tpu_host_colsum_ops(isa);
      (dt == TPU_DTYPE_BF16 ? o->bf16 : o->f16)(x0, rs, m, acc, n);
      for (int64_t j = 0; j < n; ++j) got[j] = (float)acc[j];
      free(acc);
      st = TPU_OK;
    }
    int ok = st == TPU_OK && got[n] == -12345.0f;
    for (int64_t j = 0; j < n && ok; ++j) /* same bits, or both NaN (payloads may follow either operand) */
      ok = memcmp(&got[j], &want[j], 4) == 0 || (got[j] != got[j] && want[j] != want[j]);
    if (ok) ++g_passed;
    else {
      ++g_failed;
      fprintf(stderr, "FAIL %s isa %d m %lld n %lld rs %lld cs %lld specials %d\n", dt == TPU_DTYPE_BF16 ? "bf16" : "f16",
              isa, (long long)m, (long long)n, (long long)rs, (long long)cs, specials);
    }
    tpu_status_free(st);
  }
  free(buf); free(want); free(got);
}

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void bench(int64_t m, int64_t n) {
  uint16_t* x = calloc((size_t)(m * n), 2);
  float* o = malloc((size_t)n * 4);
  for (int64_t i = 0; i < m * n; ++i) x[i] = tpu_f32_to_bf16((float)(i % 17) * 0.25f);
  tpu_host_view_t xv = {(char*)x, TPU_DTYPE_BF16, 2, {m, n}, {n, 1}}, ov = {(char*)o, TPU_DTYPE_F32, 1, {n}, {1}};
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    double t = cpu_s();
    for (int k = 0; k < 50; ++k) tpu_status_free(tpu_host_k_col_sums_lowp(&xv, &ov));
    t = (cpu_s() - t) / 50;
    best = t < best ? t : best;
  }
  printf("bf16 col sums %lld x %lld: %.1f us\n", (long long)m, (long long)n, best * 1e6);
  free(x); free(o);
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "-bench")) {
    bench(2048, 128); bench(2048, 384); bench(2048, 512);
    return 0;
  }
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  static const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 33, 130}, ns[] = {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 129, 2049, 4100};
  for (int dt = 0; dt < 2; ++dt) {
    const int d = dt ? TPU_DTYPE_F16 : TPU_DTYPE_BF16;
    for (size_t a = 0; a < TPU_ARRAY_LEN(ms); ++a)
      for (size_t b = 0; b < TPU_ARRAY_LEN(ns); ++b) {
        const int64_t m = ms[a], n = ns[b];
        if (m * n > 200000) continue;
        check(d, m, n, n, 1, 0, &seed);               /* contiguous */
        check(d, m, n, n + 5, 1, (int)(b & 1), &seed); /* padded rows, specials */
        check(d, m, n, 1, m, 0, &seed);               /* transposed: strided columns */
        check(d, m, n, -n, 1, 0, &seed);              /* rows reversed */
        check(d, m, n, 0, 1, 0, &seed);               /* one row broadcast */
        check(d, m, n, 2 * n + 1, -2, 1, &seed);      /* reversed, stepped columns */
      }
  }
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed != 0;
}
