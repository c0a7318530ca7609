/* gemm_bench.c — GFLOP/s of the host driver's sgemm/dgemm against the machine's FMA peak.
 *
 * Build (from the repo root, after `make lib`):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -pthread -Icsrc/tpurt/include -Icsrc/tpurt \
 *       benchmarks/gemm_bench.c build/tpurt/libtpurt.a -lm -o build/gemm_bench
 * Run: TORCH_TPU_NUM_THREADS=1 build/gemm_bench   (single core), build/gemm_bench (all cores).
 * Args: [m n k ...] triples replace the default shapes; "-d" also times dgemm; "-c" times by
 * process CPU time instead of wall time (steadier for single-thread tuning on a busy machine);
 * "-avx2" / "-portable" / "-avx512" cap the kernels at that ISA ("-avx512": no vdpbf16ps kernel);
 * "-bf16" makes A and B bf16 (tpu_host_sgemm_ex, f32 C: the AVX512-BF16 kernel where the CPU has it);
 * "-b B" makes the following triples batched (B matrices each, as torch.bmm; -b 0 ends that); "-bt" stores the batched
 * B matrices transposed ((n, k) row-major, as attention's q @ k^T); "-da N": A is read in place for C tiles up to N
 * columns (2N for row-major A; tpu_host_gemm_set_direct_a, 0 = never, which also turns the small path off: the
 * packed driver everywhere). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "drivers/host/gemm.h"

static int g_cpu_clock; /* -c: time by process CPU time (tuning on a busy single-thread run) */
static double now_s(void) {
  struct timespec t;
  clock_gettime(g_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Register-only FMA loops: 12 (or 24) independent chains hide the FMA latency. */
#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static double peak_avx2(double secs) {
  __m256 acc[12], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps((float)i);
  long iters = 0;
  double t0 = now_s(), t;
  do {
    for (int r = 0; r < 100000; ++r)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    iters += 100000;
  } while ((t = now_s() - t0) < secs);
  float sink[8], s = 0;
  for (int i = 0; i < 12; ++i) { _mm256_storeu_ps(sink, acc[i]); s += sink[0]; }
  if (s == 12345.f) puts("");
  return (double)iters * 12 * 16 / t * 1e-9;
}
__attribute__((target("avx512f"))) static double peak_avx512(double secs) {
  __m512 acc[24], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps((float)i);
  long iters = 0;
  double t0 = now_s(), t;
  do {
    for (int r = 0; r < 100000; ++r)
#pragma GCC unroll 24
      for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    iters += 100000;
  } while ((t = now_s() - t0) < secs);
  float s = 0;
  for (int i = 0; i < 24; ++i) s += _mm512_reduce_add_ps(acc[i]);
  if (s == 12345.f) puts("");
  return (double)iters * 24 * 32 / t * 1e-9;
}
#endif

static double g_peak_core;
static void peak_fn(void* ctx, int64_t b, int64_t e) {
  double* out = (double*)ctx;
  for (int64_t i = b; i < e; ++i) {
#if defined(__x86_64__)
    out[i] = 0;
    for (int r = 0; r < 3; ++r) { /* best of three: the machine may be shared */
      double g = tpu_cpu_has_avx512f() ? peak_avx512(0.2) : tpu_cpu_has_avx2_fma() ? peak_avx2(0.2) : 0;
      out[i] = g > out[i] ? g : out[i];
    }
#else
    out[i] = 0;
#endif
  }
}

static int g_bf16; /* -bf16: operands in bf16 */
static int g_bt;   /* -bt: batched B stored (n, k) */
static void fill(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = (float)((i * 7919 % 2001) - 1000) * 1e-3f;
  if (g_bf16) { /* the bf16 bits in the first half of the buffer */
    uint16_t* h = (uint16_t*)x;
    for (int64_t i = 0; i < n; ++i) h[i] = tpu_f32_to_bf16(x[i]);
  }
}
/* C (m, n) = A @ B with element strides, f32 or (g_bf16) bf16 operands. */
static void run_s(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                  int64_t b_rs, int64_t b_cs, float* c) {
  if (g_bf16)
    tpu_host_sgemm_ex(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, m, n, k, 1.0f, a, a_rs, a_cs, b, b_rs, b_cs, 0.0f, c, n, 1);
  else
    tpu_host_sgemm(m, n, k, 1.0f, a, a_rs, a_cs, b, b_rs, b_cs, 0.0f, c, n, 1);
}

static void bench_s(int64_t m, int64_t n, int64_t k, int trans_b, double peak_all) {
  float* a = malloc(sizeof(float) * m * k);
  float* b = malloc(sizeof(float) * k * n);
  float* c = malloc(sizeof(float) * m * n);
  fill(a, m * k);
  fill(b, k * n);
  double flops = 2.0 * m * n * k, best = 1e30, total = 0;
  for (int r = 0; r < 200000 && (r < 3 || total < 1.0); ++r) {
    double t = now_s();
    if (trans_b) /* B stored (n, k): x @ W^T as in nn.Linear */
      run_s(m, n, k, a, k, 1, b, 1, k, c);
    else
      run_s(m, n, k, a, k, 1, b, n, 1, c);
    t = now_s() - t;
    if (r > 0 || m * n * k < 1e8) best = t < best ? t : best;
    total += t;
  }
  double gf = flops / best * 1e-9;
  printf("%s %5lld x %5lld x %5lld %s: %7.1f GFLOP/s  (%4.1f%% of FMA peak) %10.2f us\n", g_bf16 ? "bf16 " : "sgemm",
         (long long)m,
         (long long)n, (long long)k, trans_b ? "B^T" : "   ", gf, 100.0 * gf / peak_all, best * 1e6);
  free(a); free(b); free(c);
}

/* (batch, m, k) @ (batch, k, n), as torch.bmm. */
static void bench_batched(int64_t batch, int64_t m, int64_t n, int64_t k, double peak_all) {
  float* a = malloc(sizeof(float) * batch * m * k);
  float* b = malloc(sizeof(float) * batch * k * n);
  float* c = malloc(sizeof(float) * batch * m * n);
  fill(a, batch * m * k);
  fill(b, batch * k * n);
  double best = 1e30, total = 0;
  for (int r = 0; r < 200000 && (r < 3 || total < 1.0); ++r) {
    double t = now_s();
    if (g_bf16)
      tpu_host_sgemm_batched_ex(TPU_DTYPE_BF16, TPU_DTYPE_BF16, 0, batch, m, n, k, 1.0f, a, m * k, k, 1, b, k * n,
                                g_bt ? 1 : n, g_bt ? k : 1, 0.0f, c, m * n, n, 1);
    else
      tpu_host_sgemm_batched(batch, m, n, k, 1.0f, a, m * k, k, 1, b, k * n, g_bt ? 1 : n, g_bt ? k : 1, 0.0f, c, m * n,
                             n, 1);
    t = now_s() - t;
    best = t < best ? t : best;
    total += t;
  }
  double gf = 2.0 * batch * m * n * k / best * 1e-9;
  printf("bmm%s %4lld x (%4lld x %4lld x %4lld): %7.1f GFLOP/s  (%4.1f%% of FMA peak) %10.2f us\n",
         g_bt ? " B^T" : "", (long long)batch, (long long)m, (long long)n, (long long)k, gf, 100.0 * gf / peak_all,
         best * 1e6);
  free(a); free(b); free(c);
}

static void bench_d(int64_t m, int64_t n, int64_t k, double peak_all) {
  double* a = malloc(sizeof(double) * m * k);
  double* b = malloc(sizeof(double) * k * n);
  double* c = malloc(sizeof(double) * m * n);
  for (int64_t i = 0; i < m * k; ++i) a[i] = (double)(i % 17) * 0.1;
  for (int64_t i = 0; i < k * n; ++i) b[i] = (double)(i % 13) * 0.1;
  double best = 1e30, total = 0;
  for (int r = 0; r < 100 && (r < 3 || total < 1.5); ++r) {
    double t = now_s();
    tpu_host_dgemm(m, n, k, 1.0, a, k, 1, b, n, 1, 0.0, c, n, 1);
    t = now_s() - t;
    best = t < best ? t : best;
    total += t;
  }
  double gf = 2.0 * m * n * k / best * 1e-9;
  printf("dgemm %5lld x %5lld x %5lld    : %7.1f GFLOP/s  (%4.1f%% of f64 FMA peak)\n", (long long)m,
         (long long)n, (long long)k, gf, 200.0 * gf / peak_all);
  free(a); free(b); free(c);
}

int main(int argc, char** argv) {
  int threads = tpu_pool_num_threads(), with_d = 0;
  int64_t shapes[64][4];
  int ns = 0;
  int64_t batch = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-d")) { with_d = 1; continue; }
    if (!strcmp(argv[i], "-c")) { g_cpu_clock = 1; continue; }
    if (!strcmp(argv[i], "-avx2")) { tpu_host_gemm_set_isa(TPU_HOST_GEMM_ISA_AVX2); continue; }
    if (!strcmp(argv[i], "-avx512")) { tpu_host_gemm_set_isa(TPU_HOST_GEMM_ISA_AVX512); continue; }
    if (!strcmp(argv[i], "-bf16")) { g_bf16 = 1; continue; }
    if (!strcmp(argv[i], "-bt")) { g_bt = 1; continue; }
    if (!strcmp(argv[i], "-da") && i + 1 < argc) { tpu_host_gemm_set_direct_a(atoi(argv[++i])); continue; }
    if (!strcmp(argv[i], "-portable")) { tpu_host_gemm_set_isa(TPU_HOST_GEMM_ISA_PORTABLE); continue; }
    if (!strcmp(argv[i], "-b") && i + 1 < argc) { batch = atoll(argv[++i]); continue; }
    if (i + 2 < argc && ns < 64) {
      shapes[ns][0] = atoll(argv[i]); shapes[ns][1] = atoll(argv[i + 1]); shapes[ns][2] = atoll(argv[i + 2]);
      shapes[ns][3] = batch;
      ++ns; i += 2;
    }
  }
  if (ns == 0) {
    int64_t def[][4] = {{1024, 1024, 1024, 0}, {4096, 4096, 1024, 0}, {256, 256, 256, 0}, {64, 64, 64, 0},
                        {1, 4096, 4096, 0}, {64, 64, 64, 32}, {256, 256, 64, 8}};
    ns = TPU_ARRAY_LEN(def);
    memcpy(shapes, def, sizeof(def));
  }
  double per[256] = {0};
  tpu_pool_parallel_for(threads, 1, peak_fn, per);
  double peak_all = 0;
  for (int i = 0; i < threads; ++i) peak_all += per[i];
  g_peak_core = per[0];
  printf("threads %d, kernels %s, f32 FMA peak %.1f GFLOP/s per core, %.1f all threads\n", threads,
         tpu_host_gemm_isa_name(), g_peak_core, peak_all);
  for (int i = 0; i < ns; ++i) {
    if (shapes[i][3] > 0) {
      bench_batched(shapes[i][3], shapes[i][0], shapes[i][1], shapes[i][2], peak_all);
      continue;
    }
    bench_s(shapes[i][0], shapes[i][1], shapes[i][2], 0, peak_all);
    bench_s(shapes[i][0], shapes[i][1], shapes[i][2], 1, peak_all);
  }
  if (with_d)
    for (int i = 0; i < ns && i < 2; ++i) bench_d(shapes[i][0], shapes[i][1], shapes[i][2], peak_all);
  return 0;
}
