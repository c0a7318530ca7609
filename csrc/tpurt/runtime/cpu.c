/* cpu.c — runtime CPU feature detection for kernel dispatch and cache keys. */
#include <pthread.h>
#include <stdio.h>

#include "runtime/runtime.h"

#if defined(__x86_64__) || defined(__i386__)
#define TPU_CPU_X86 1
#endif

int tpu_cpu_has_avx2_fma(void) {
#ifdef TPU_CPU_X86
  __builtin_cpu_init();
  /* F16C too: the AVX2 / AVX-512 tile builds convert f16 with vcvtph2ps / vcvtps2ph (every AVX2 CPU has it; a VM
   * could hide it) */
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return 0;
#endif
}

int tpu_cpu_has_avx512f(void) {
#ifdef TPU_CPU_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return 0;
#endif
}

#ifdef TPU_CPU_X86
#include <cpuid.h>

/* The OS saves the opmask and all zmm registers (XCR0 bits 1, 2, 5, 6, 7) and CPUID reports
 * AVX512-BF16 (leaf 7 subleaf 1, EAX bit 5) on top of AVX-512F/BW. */
static int cpu_detect_avx512bf16(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0xe6u) != 0xe6u) return 0;
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(b & (1u << 16)) || !(b & (1u << 30))) return 0; /* AVX512F, AVX512BW */
  if (a < 1) return 0; /* leaf 7 has no subleaf 1 */
  __cpuid_count(7, 1, a, b, c, d);
  return (a >> 5) & 1u;
}
static int g_bf16 = -1;
static pthread_once_t g_bf16_once = PTHREAD_ONCE_INIT;
static void bf16_init(void) { g_bf16 = cpu_detect_avx512bf16(); }
#endif

int tpu_cpu_has_avx512bf16(void) {
#ifdef TPU_CPU_X86
  pthread_once(&g_bf16_once, bf16_init);
  return g_bf16;
#else
  return 0;
#endif
}

static char g_features[128];
static pthread_once_t g_features_once = PTHREAD_ONCE_INIT;

static void features_build(void) {
  size_t n = 0;
  g_features[0] = '\0';
#define TPU_ADD_FEATURE(cond, name) \
  if (cond) n += (size_t)snprintf(g_features + n, sizeof(g_features) - n, "%s%s", n ? "," : "", name)
#ifdef TPU_CPU_X86
  __builtin_cpu_init();
  TPU_ADD_FEATURE(__builtin_cpu_supports("avx512f"), "avx512f");
  TPU_ADD_FEATURE(__builtin_cpu_supports("avx512bw"), "avx512bw");
  TPU_ADD_FEATURE(__builtin_cpu_supports("avx512vl"), "avx512vl");
  TPU_ADD_FEATURE(tpu_cpu_has_avx512bf16(), "avx512bf16");
  TPU_ADD_FEATURE(__builtin_cpu_supports("avx2"), "avx2");
  TPU_ADD_FEATURE(__builtin_cpu_supports("fma"), "fma");
#elif defined(__aarch64__)
  TPU_ADD_FEATURE(1, "neon");
#endif
#undef TPU_ADD_FEATURE
  if (n == 0) snprintf(g_features, sizeof(g_features), "generic");
}

const char* tpu_cpu_features_string(void) {
  pthread_once(&g_features_once, features_build);
  return g_features;
}
