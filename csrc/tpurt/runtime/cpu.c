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
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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
