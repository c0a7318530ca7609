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

/* ---- reduce-fusion guard. The host plan evaluates an elementwise producer read only by one
 * reduce (and not an output) block by block inside it; above a few MiB that sums in another
 * order than a reduce of the materialized tensor. CSE and DCE change readers counts (and
 * canonicalize can hand a reduce another producer), so after the passes each reduce must see
 * the same fused/materialized status as before: a producer that became fused gets a dangling
 * view (it stays materialized); any other change keeps the original graph. */
#define GUARD_BYTES TPU_COMPILER_REDUCE_GUARD_BYTES /* the driver materializes whole below 4 MiB: margin */
static int32_t* count_readers(const tpu_ir_graph_t* g) {
  int32_t* n = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(int32_t));
  if (!n) return NULL;
  for (int v = 0; v < g->n_ops; ++v)
    for (int k = 0; k < g->ops[v].n_in; ++k) n[tpu_ir_operand(g, v, k)]++;
  for (int k = 0; k < g->n_outputs; ++k) n[g->outputs[k]] += 2;
  return n;
}
static int fused_into(const tpu_ir_graph_t* g, const int32_t* readers, int r) {
  int p = tpu_ir_operand(g, r, 0);
  return (tpu_ir_is_elementwise(g->ops[p].opcode) || tpu_ir_custom_elementwise(g, p)) && readers[p] == 1;
}
/* An elementwise custom call (tpu_ir_custom_elementwise) read only by the reduce is fused by the host plan
 * only when it has a member operand (and custom fusion is on), which depends on its operands' readers: the
 * guard cannot tell, so such a producer must keep its operands' reader counts, or the original is used. */
static int custom_producer_same(const tpu_ir_graph_t* g, const int32_t* rn, int r, const tpu_ir_graph_t* orig,
                                const int32_t* ro, int r0) {
  int p = tpu_ir_operand(g, r, 0), p0 = tpu_ir_operand(orig, r0, 0);
  int cn = tpu_ir_custom_elementwise(g, p), co = tpu_ir_custom_elementwise(orig, p0);
  if (!cn && !co) return 1;
  if (cn != co || g->ops[p].n_in != orig->ops[p0].n_in || g->ops[p].i0 != orig->ops[p0].i0) return 0;
  for (int k = 0; k < g->ops[p].n_in; ++k) {
    int u = tpu_ir_operand(g, p, k), u0 = tpu_ir_operand(orig, p0, k);
    if (rn[u] != ro[u0] || g->ops[u].opcode != orig->ops[u0].opcode) return 0;
  }
  return 1;
}
/* 1: g is fine (maybe with dangling views added), 0: use the original, -1: out of memory. */
static int guard_reduce_fusion(tpu_ir_graph_t* g, const tpu_ir_graph_t* orig, const int32_t* origin) {
  int32_t* ro = count_readers(orig);
  int32_t* rn = count_readers(g);
  int ok = ro && rn ? 1 : -1;
  int n = g->n_ops;
  /* A value that is a graph output is written straight into the output tensor (its layout);
   * a library op reading it then reads that layout instead of a contiguous temporary. */
  for (int r = 0; r < n && ok == 1; ++r) {
    int oc = g->ops[r].opcode, r0 = origin[r];
    if (tpu_ir_is_elementwise(oc) || tpu_ir_is_view(oc) || g->ops[r].n_in == 0 || r0 < 0) continue;
    if (orig->ops[r0].opcode != oc || orig->ops[r0].n_in != g->ops[r].n_in) { ok = 0; break; }
    for (int k = 0; k < g->ops[r].n_in && ok == 1; ++k) {
      int p = tpu_ir_operand(g, r, k), p0 = tpu_ir_operand(orig, r0, k), on = 0, oo = 0;
      for (int j = 0; j < g->n_outputs; ++j) on |= g->outputs[j] == p;
      for (int j = 0; j < orig->n_outputs; ++j) oo |= orig->outputs[j] == p0;
      if (on != oo) ok = 0;
    }
  }
  for (int r = 0; r < n && ok == 1; ++r) {
    if (g->ops[r].opcode != TPU_IR_REDUCE) continue;
    int r0 = origin[r];
    const tpu_ir_type_t* t = tpu_ir_type(orig, r0 >= 0 ? tpu_ir_operand(orig, r0, 0) : 0);
    if (r0 < 0 || orig->ops[r0].opcode != TPU_IR_REDUCE) { ok = 0; break; }
    if (tpu_ir_numel(t) * (int64_t)tpu_dtype_size(t->dtype) <= GUARD_BYTES) continue;
    int fo = fused_into(orig, ro, r0), fn = fused_into(g, rn, r);
    if (fo && fn && !custom_producer_same(g, rn, r, orig, ro, r0)) { ok = 0; break; }
    if (fo == fn) continue;
    if (fo) { ok = 0; break; }
    int p = tpu_ir_operand(g, r, 0);
    const tpu_ir_type_t* tp = tpu_ir_type(g, p);
    int64_t flat[2] = {1, tpu_ir_numel(tp)};
    if (tp->rank == 1) tpu_ir_reshape(g, p, 2, flat); else tpu_ir_reshape(g, p, 1, &flat[1]);
    rn[p]++;
    if (g->status) ok = -1;
  }
  free(ro); free(rn);
  return ok;
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
  int keep = err ? 1 : guard_reduce_fusion(g, &orig, origin);
  free(origin);
  if (keep < 0) err = TPU_ERR(OUT_OF_MEMORY, "compiler: out of host memory");
  if (!err && keep == 0) { /* the passes would change a reduction's order: keep the original */
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
