/* metrics.c — process-wide counters behind tpu_metrics_get (C11 atomics, lock-free). */
#include <stdatomic.h>

#include "runtime/runtime.h"

static _Atomic uint64_t g_ops, g_hits, g_misses, g_compiles, g_entries, g_compile_ns, g_kernels;
static _Atomic uint64_t g_ops_before, g_ops_after, g_canon, g_folds, g_cse, g_dce;
static _Atomic uint64_t g_clusters, g_fused_ops, g_reduce_producers, g_host_waits, g_group_steps;
#define ADD(var, n) atomic_fetch_add_explicit(&(var), (n), memory_order_relaxed)
void tpu_metrics_add_graph(uint64_t ops_before, uint64_t ops_after, uint64_t canon, uint64_t folds,
                           uint64_t cse, uint64_t dce) {
  ADD(g_ops_before, ops_before); ADD(g_ops_after, ops_after); ADD(g_canon, canon);
  ADD(g_folds, folds); ADD(g_cse, cse); ADD(g_dce, dce);
}
void tpu_metrics_add_fusion(uint64_t clusters, uint64_t fused_ops, uint64_t reduce_producers) {
  ADD(g_clusters, clusters); ADD(g_fused_ops, fused_ops); ADD(g_reduce_producers, reduce_producers);
}
#undef ADD

void tpu_metrics_add_ops(uint64_t n) { atomic_fetch_add_explicit(&g_ops, n, memory_order_relaxed); }
void tpu_metrics_add_cache(int hit) {
  atomic_fetch_add_explicit(hit ? &g_hits : &g_misses, 1, memory_order_relaxed);
}
void tpu_metrics_add_compile(double seconds) {
  uint64_t ns = seconds > 0 ? (uint64_t)(seconds * 1e9 + 0.5) : 0;
  atomic_fetch_add_explicit(&g_compiles, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&g_compile_ns, ns, memory_order_relaxed);
}
void tpu_metrics_set_cache_entries(uint64_t n) { atomic_store_explicit(&g_entries, n, memory_order_relaxed); }
void tpu_metrics_add_kernels(uint64_t n) { atomic_fetch_add_explicit(&g_kernels, n, memory_order_relaxed); }
void tpu_metrics_add_group_steps(uint64_t n) { atomic_fetch_add_explicit(&g_group_steps, n, memory_order_relaxed); }
void tpu_metrics_add_host_wait(void) { atomic_fetch_add_explicit(&g_host_waits, 1, memory_order_relaxed); }

void tpu_metrics_get(tpu_metrics_t* out_metrics) {
  if (!out_metrics) return;
  *out_metrics = (tpu_metrics_t){
      .ops_run = atomic_load(&g_ops), .exec_cache_hits = atomic_load(&g_hits),
      .exec_cache_misses = atomic_load(&g_misses), .compiles = atomic_load(&g_compiles),
      .exec_cache_entries = atomic_load(&g_entries),
      .compile_seconds = (double)atomic_load(&g_compile_ns) * 1e-9,
      .kernels_launched = atomic_load(&g_kernels), .group_steps = atomic_load(&g_group_steps),
      .graph_ops_before = atomic_load(&g_ops_before), .graph_ops_after = atomic_load(&g_ops_after),
      .pass_canon_rewrites = atomic_load(&g_canon), .pass_folds = atomic_load(&g_folds),
      .pass_cse_hits = atomic_load(&g_cse), .pass_dce_removed = atomic_load(&g_dce),
      .fusion_clusters = atomic_load(&g_clusters), .fusion_ops_fused = atomic_load(&g_fused_ops),
      .fusion_reduce_producers = atomic_load(&g_reduce_producers), .host_waits = atomic_load(&g_host_waits),
  };
}

/* Counters restart at zero; exec_cache_entries describes the cache's current size and stays. */
void tpu_metrics_reset(void) {
  atomic_store(&g_ops, 0); atomic_store(&g_hits, 0); atomic_store(&g_misses, 0);
  atomic_store(&g_compiles, 0); atomic_store(&g_compile_ns, 0); atomic_store(&g_kernels, 0);
  atomic_store(&g_ops_before, 0); atomic_store(&g_ops_after, 0); atomic_store(&g_canon, 0);
  atomic_store(&g_folds, 0); atomic_store(&g_cse, 0); atomic_store(&g_dce, 0);
  atomic_store(&g_clusters, 0); atomic_store(&g_fused_ops, 0); atomic_store(&g_reduce_producers, 0);
  atomic_store(&g_host_waits, 0); atomic_store(&g_group_steps, 0);
}
