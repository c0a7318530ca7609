/* pipeline.c — the pass pipeline (canonicalize -> fold -> CSE -> DCE, repeated until
 * nothing changes), the verifier between passes, and the compile entry point. */
#include <stddef.h>
#include <stdlib.h>

#include "compiler/compiler.h"
#include "compiler/rewrite.h"
#include "runtime/runtime.h"

#define MAX_ROUNDS 4

typedef tpu_status_t (*pass_fn)(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map);
static const struct { const char* name; pass_fn fn; size_t stat; } kPasses[] = {
  {"canonicalize", tpu_pass_canonicalize, offsetof(tpu_compiler_stats_t, canon_rewrites)},
  {"fold-constants", tpu_pass_fold_constants, offsetof(tpu_compiler_stats_t, folds)},
  {"cse", tpu_pass_cse, offsetof(tpu_compiler_stats_t, cse_hits)},
  {"dce", tpu_pass_dce, offsetof(tpu_compiler_stats_t, dce_removed)},
};

/* ---- output-layout guard. A graph output is written straight into the output tensor (its layout), so
 * a library op reading it reads that layout instead of a contiguous temporary, and a reduce sums in an
 * order that depends on its operand's strides: each library op must read outputs exactly where it did
 * in the input graph, or the original graph is kept. (Whether a reduce's elementwise producer is fused
 * does not matter: the host driver sums it in the same slabs either way, tpu_host_reduce_plan.) */
static int library_reads_same(const tpu_ir_graph_t* g, const tpu_ir_graph_t* orig, const int32_t* origin) {
  for (int r = 0; r < g->n_ops; ++r) {
    int oc = g->ops[r].opcode, r0 = origin[r];
    if (tpu_ir_is_elementwise(oc) || tpu_ir_is_view(oc) || g->ops[r].n_in == 0 || r0 < 0) continue;
    if (orig->ops[r0].opcode != oc || orig->ops[r0].n_in != g->ops[r].n_in) return 0;
    for (int k = 0; k < g->ops[r].n_in; ++k) {
      int p = tpu_ir_operand(g, r, k), p0 = tpu_ir_operand(orig, r0, k), on = 0, oo = 0;
      for (int j = 0; j < g->n_outputs; ++j) on |= g->outputs[j] == p;
      for (int j = 0; j < orig->n_outputs; ++j) oo |= orig->outputs[j] == p0;
      if (on != oo) return 0;
    }
  }
  return 1;
}

static int verify_from_env(void) {
  static int cached = -1;
  return tpu_rt_env_switch(&cached, "TORCH_TPU_VERIFY_PASSES", 0);
}

tpu_status_t tpu_compiler_run_ex(tpu_ir_graph_t* g, const char* name, int verify,
                                 tpu_compiler_stats_t* out_stats) {
  tpu_compiler_stats_t st;
  memset(&st, 0, sizeof(st));
  if (out_stats) *out_stats = st;
  if (verify < 0) verify = verify_from_env();
  if (g->status) return TPU_ERR(INTERNAL, "compiler: graph carries an error: %s", tpu_status_message(g->status));
  st.ops_before = g->n_ops;
  tpu_ir_graph_t orig;
  TPU_RETURN_IF_ERROR(tpu_ir_graph_clone(g, &orig));
  int32_t* origin = malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof(int32_t)); /* value -> original */
  if (!origin) { tpu_ir_graph_free(&orig); return TPU_ERR(OUT_OF_MEMORY, "compiler: out of host memory"); }
  for (int v = 0; v < g->n_ops; ++v) origin[v] = v;
  tpu_status_t err = TPU_OK;
  for (int round = 0; round < MAX_ROUNDS && !err; ++round) {
    int total = 0;
    st.rounds++;
    for (int p = 0; p < TPU_ARRAY_LEN(kPasses) && !err; ++p) {
      int changes = 0, old_n = g->n_ops;
      int32_t* map = NULL;
      tpu_status_t s = kPasses[p].fn(g, &changes, &map);
      int32_t* next = s ? NULL : malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof(int32_t));
      if (!s && !next) s = TPU_ERR(OUT_OF_MEMORY, "compiler: out of host memory");
      if (s) { free(map); err = s; break; }
      for (int v = 0; v < g->n_ops; ++v) next[v] = -1;
      for (int v = 0; v < old_n; ++v)
        if (map[v] >= 0 && map[v] < g->n_ops && next[map[v]] < 0) next[map[v]] = origin[v];
      free(map); free(origin);
      origin = next;
      if (verify) {
        s = tpu_ir_verify(g);
        if (s) {
          err = TPU_ERR(INTERNAL, "compiler: the IR verifier failed after pass %s on %s: %s",
                        kPasses[p].name, name ? name : "graph", tpu_status_message(s));
          tpu_status_free(s);
          break;
        }
      }
      *(int32_t*)((char*)&st + kPasses[p].stat) += changes;
      total += changes;
    }
    if (!total) break;
  }
  int keep = err ? 1 : library_reads_same(g, &orig, origin);
  free(origin);
  if (!err && keep == 0) { /* the passes would change a library op's operand layout: keep the original */
    tpu_ir_graph_free(g);
    *g = orig;
    tpu_ir_graph_init(&orig);
    memset(&st, 0, sizeof(st));
    st.ops_before = g->n_ops; st.rounds = 1;
  }
  tpu_ir_graph_free(&orig);
  if (err) return err;
  if (verify) TPU_RETURN_IF_ERROR(tpu_ir_verify(g));
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
