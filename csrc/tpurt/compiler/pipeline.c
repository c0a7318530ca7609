/* pipeline.c — the pass pipeline (canonicalize -> fold -> CSE -> DCE, repeated until
 * nothing changes), the verifier between passes, and the compile entry point. */
#include <stddef.h>
#include <stdlib.h>

#include "compiler/compiler.h"

#define MAX_ROUNDS 4

typedef tpu_status_t (*pass_fn)(tpu_ir_graph_t* g, int* out_changes);
static const struct { const char* name; pass_fn fn; size_t stat; } kPasses[] = {
  {"canonicalize", tpu_compiler_canonicalize, offsetof(tpu_compiler_stats_t, canon_rewrites)},
  {"fold-constants", tpu_compiler_fold_constants, offsetof(tpu_compiler_stats_t, folds)},
  {"cse", tpu_compiler_cse, offsetof(tpu_compiler_stats_t, cse_hits)},
  {"dce", tpu_compiler_dce, offsetof(tpu_compiler_stats_t, dce_removed)},
};

static int verify_from_env(void) {
  static int cached = -1;
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    const char* s = getenv("TORCH_TPU_VERIFY_PASSES");
    v = s && *s && strcmp(s, "0") != 0;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

tpu_status_t tpu_compiler_run_ex(tpu_ir_graph_t* g, const char* name, int verify,
                                 tpu_compiler_stats_t* out_stats) {
  tpu_compiler_stats_t st;
  memset(&st, 0, sizeof(st));
  if (out_stats) *out_stats = st;
  if (verify < 0) verify = verify_from_env();
  if (g->status) return TPU_ERR(INTERNAL, "compiler: graph carries an error: %s", tpu_status_message(g->status));
  st.ops_before = g->n_ops;
  for (int round = 0; round < MAX_ROUNDS; ++round) {
    int total = 0;
    st.rounds++;
    for (int p = 0; p < TPU_ARRAY_LEN(kPasses); ++p) {
      int changes = 0;
      tpu_status_t s = kPasses[p].fn(g, &changes);
      if (s) return s;
      if (verify) {
        s = tpu_ir_verify(g);
        if (s) {
          tpu_status_t e = TPU_ERR(INTERNAL, "compiler: the IR verifier failed after pass %s on %s: %s",
                                   kPasses[p].name, name ? name : "graph", tpu_status_message(s));
          tpu_status_free(s);
          return e;
        }
      }
      *(int32_t*)((char*)&st + kPasses[p].stat) += changes;
      total += changes;
    }
    if (!total) break;
  }
  st.ops_after = g->n_ops;
  if (out_stats) *out_stats = st;
  return TPU_OK;
}

tpu_status_t tpu_compiler_run(tpu_ir_graph_t* g, const char* name, tpu_compiler_stats_t* out_stats) {
  return tpu_compiler_run_ex(g, name, -1, out_stats);
}

tpu_status_t tpu_compiler_compile(tpu_ir_graph_t* g, const char* name, tpu_host_exe_t** out_exe) {
  *out_exe = NULL;
  int seq = tpu_compiler_dump_next_seq();
  if (seq >= 0) tpu_compiler_dump(g, name, seq, "before");
  tpu_compiler_stats_t st;
  TPU_RETURN_IF_ERROR(tpu_compiler_run(g, name, &st));
  if (seq >= 0) tpu_compiler_dump(g, name, seq, "after");
  TPU_RETURN_IF_ERROR(tpu_host_compile(g, out_exe));
  tpu_host_exe_fusion_stats(*out_exe, &st.fusion_clusters, &st.fusion_ops_fused, &st.fusion_reduce_producers);
  tpu_metrics_add_graph((uint64_t)st.ops_before, (uint64_t)st.ops_after, (uint64_t)st.canon_rewrites,
                        (uint64_t)st.folds, (uint64_t)st.cse_hits, (uint64_t)st.dce_removed);
  tpu_metrics_add_fusion((uint64_t)st.fusion_clusters, (uint64_t)st.fusion_ops_fused,
                         (uint64_t)st.fusion_reduce_producers);
  return TPU_OK;
}
