/* exec.c — host executables: planning (clusters of elementwise ops, views, library
 * steps) and the runner. See host.h for the model. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "drivers/host/exec_sched.h"
#include "drivers/host/gemm.h"
#include "drivers/host/host.h"
#include "drivers/host/rows.h"
#include "runtime/runtime.h"

enum { K_PARAM, K_SCALAR, K_CONST, K_VIEW, K_MEMBER, K_ROOT, K_LIB };

struct tpu_host_exe_s {
  tpu_ir_graph_t g;       /* owned copy, in the order the steps run */
  tpu_ir_graph_t* traced; /* the graph as compiled when the scheduler reordered g (exec_sched.h), else NULL:
                           * what tpu_host_exe_graph returns, so shape families, the disk cache and recordings
                           * see the same graph for every size whatever order a size's plan chose */
  uint8_t* kind;          /* per op */
  int32_t* out_index;     /* per op: graph output slot it may write directly, or -1 */
  int32_t* mem_off; int32_t* mem_cnt; int32_t* members; /* per root: cluster members (topo order) */
  int32_t* leaf_off; int32_t* leaf_cnt; int32_t* leaves;
  int32_t* slot;          /* per op, per operand (in_off-indexed): tile slot in its cluster (see reg) */
  int32_t* reg;           /* per member/root: tile register of its result; per root: reg count in nreg */
  int32_t* nreg;          /* per root: registers of its cluster (slots nreg.. are its leaves) */
  uint8_t* fused;         /* per op: 1 = elementwise root evaluated block by block inside its reduce */
  int32_t* last_use;      /* per op: last step (op index) reading its storage; INT32_MAX = graph output */
  int32_t last_step;      /* op index of the last non-view step */
  int n_steps;
  /* GEMM epilogues: a DOT whose whole result only one elementwise cluster reads (directly or through
   * reshapes) runs at that cluster's step, and the cluster runs on each block of C the GEMM finishes
   * (run_dot_epilogue). epi_root: per DOT, that cluster's root; epi_dot: per root, the DOT; else -1. */
  int32_t* epi_root;
  int32_t* epi_dot;
  int32_t* param_op;      /* per graph parameter: its PARAM op (-1: none) */
  int32_t* in_dtype;      /* per member/root: dtype of the operand tile_compute reads as its input dtype */
  int32_t* host_out;      /* per root/library step that is no output itself: an output that is a reshape of it
                           * (it then computes straight into that output's memory when that is safe), or -1 */
  int32_t* out_alias;     /* outputs whose value may lie in a parameter's or another output's memory when a
                           * later step writes in place (views, parameters, values written into another
                           * output): the only ones the run loop checks against such a write */
  int n_out_alias;
  /* Scalar batches (run_scalar_batches): rank-0 clusters reading only rank-0 parameters, runtime scalars,
   * constants and other such clusters (a compiled optimizer's step counts and bias corrections) are evaluated
   * before the first step, clusters of one structure together, instead of as one step each. */
  uint8_t* sbatch;        /* per op: 1 = a root evaluated by the scalar batches */
  int32_t* sb_roots;      /* those roots, batch after batch, a batch's after every batch it reads */
  int32_t* sb_off;        /* batch b: sb_roots[sb_off[b] .. sb_off[b + 1]) */
  int n_sb;
  /* Step groups (plan_groups): runs of consecutive steps that read none of each other's results run side by
   * side, one step per pool thread, each kernel on its thread alone (see tpu_host_set_exec_groups). */
  int32_t* prev_use;      /* per op: the latest step before last_use reading its storage (-1: none) */
  int32_t* grp;           /* per op: the group its step runs in, or -1 */
  int32_t* grp_first;     /* per group: op index of its first and last step */
  int32_t* grp_last;
  int32_t* grp_off;       /* per group: its steps grp_items[grp_off[g] .. grp_off[g + 1]), by decreasing cost */
  int32_t* grp_items;
  int n_grp;
};
#define SB_SLOTS 32 /* registers + leaves of a rank-0 cluster (run one by one or batched) */
#define SB_CHUNK 64 /* clusters computed per kernel call */

static int g_epi_fusion = -1; /* -1: TORCH_TPU_GEMM_EPILOGUE not read yet */
static int epilogue_fusion_on(void) { return tpu_rt_env_switch(&g_epi_fusion, "TORCH_TPU_GEMM_EPILOGUE", 1); }
int tpu_host_set_epilogue_fusion(int on) {
  return tpu_rt_env_switch_set(&g_epi_fusion, "TORCH_TPU_GEMM_EPILOGUE", 1, on);
}

/* Elementwise custom calls (SILU, GELU and their gradients, LERP, ADDC: rows.h's one-pass f32 kernels) join
 * elementwise clusters like any other op, as members (an AdamW update's multiply -> ADDC, sqrt/divide/add ->
 * addcdiv; a bias add -> GELU in a GEMM epilogue) or roots with members: the same per-element kernel then runs
 * on each tile (rows_impl.h's loops compute element i from the operands' element i alone, so the bits do not
 * depend on tiling). A lone one (no member) stays a library step (rows.c's flat path). Their rank-0 operands
 * (ADDC's value, LERP's scalar weight) are leaves read as broadcasts of the cluster's shape.
 * TORCH_TPU_CUSTOM_FUSION=0 or tpu_host_set_custom_fusion(0) (a test hook) keeps every custom call a library
 * step. */
static int g_custom_fusion = -1; /* -1: TORCH_TPU_CUSTOM_FUSION not read yet */
static int custom_fusion_on(void) { return tpu_rt_env_switch(&g_custom_fusion, "TORCH_TPU_CUSTOM_FUSION", 1); }
int tpu_host_set_custom_fusion(int on) {
  return tpu_rt_env_switch_set(&g_custom_fusion, "TORCH_TPU_CUSTOM_FUSION", 1, on);
}
/* Runs custom member `op` over n f32 elements of its operands' tile slots (see tpu_ir_custom_elementwise). */
static void custom_compute(const tpu_ir_graph_t* G, const tpu_ir_op_t* op, float* dst, const void* const* in,
                           int64_t n) {
  const tpu_host_rows_ops_t* R = tpu_host_rows_ops();
  const float *a = in[0], *b = in[1];
  switch (op->i0) {
    case TPU_IR_CUSTOM_SILU: R->silu(a, dst, n); break;
    case TPU_IR_CUSTOM_GELU: R->gelu(a, dst, n); break;
    case TPU_IR_CUSTOM_SILU_BWD: R->silu_bwd(a, b, dst, n); break;
    case TPU_IR_CUSTOM_GELU_BWD: R->gelu_bwd(a, b, dst, n); break;
    case TPU_IR_CUSTOM_LERP: { /* a rank-0 weight's slot holds its value (first element) */
      const int ws = G->ops[G->operands[op->in_off + 2]].type.rank != 0 || op->type.rank == 0 ? 1 : 0;
      R->lerp(a, b, in[2], ws, dst, n);
      break;
    }
    default: R->addc(a, b, in[2], *(const float*)in[3], dst, n, op->i1 == 1); break; /* ADDC */
  }
}
/* A lone elementwise custom call (a library step: an in-place addcmul_ / addcdiv_ / lerp_, and silu_ / gelu / their
 * backward kernels when their output is an operand's view) may write over an operand that is the very same view: rows.c's kernels read element i of every operand before writing element i
 * of the result (flat, by rows, or through a scratch row), so the update needs no temporary and output copy. */
static int lib_in_place(const tpu_ir_graph_t* G, int v) {
  return G->ops[v].opcode == TPU_IR_CUSTOM && tpu_ir_custom_elementwise(G, v);
}
/* ew: elementwise ops and (custom fusion on) elementwise custom calls. */
static int plan_elementwise(const tpu_ir_graph_t* G, int v, int custom_on) {
  return tpu_ir_is_elementwise(G->ops[v].opcode) || (custom_on && tpu_ir_custom_elementwise(G, v));
}

/* Multi-step graphs (compiled replays, fused-eager traces, _foreach_ lists) run with the pool's grains
 * divided by this (TORCH_TPU_GRAPH_GRAIN_DIV; default 1 = the kernels' own grains): while a graph runs
 * the host thread often has nothing to do, so mid-size ops could be split over the pool too. Off by
 * default: on the shared 2-core machine 4 cost ~0.3 ms more device CPU per compiled minGPT step and
 * no wall-time gain could be shown under load (benchmarks/RESULTS.md, [exec]). Results do not depend
 * on it (kernels compute their units the same way whatever the chunking). */
#define GRAPH_MIN_STEPS 4
/* Elements per pool chunk of an elementwise cluster (run_cluster_leaves) and of a lone direct convert */
enum { CLUSTER_GRAIN = 32768 };
static _Atomic int g_graph_div = 0; /* 0: not read from the environment yet */
static int graph_grain_div(void) {
  int v = atomic_load_explicit(&g_graph_div, memory_order_relaxed);
  if (v == 0) {
    const char* s = getenv("TORCH_TPU_GRAPH_GRAIN_DIV");
    long x = s && *s ? strtol(s, NULL, 10) : 1;
    v = x < 1 ? 1 : x > 64 ? 64 : (int)x;
    atomic_store_explicit(&g_graph_div, v, memory_order_relaxed);
  }
  return v;
}


/* TORCH_TPU_EXEC_PROFILE=1 (a diagnostic, off by default): every executable step's CPU time on the
 * thread that runs it, summed per kind of step (library op / custom_call target / elementwise cluster by
 * its root and size / output copies), printed to stderr at exit, with the executables run and their steps. */
#define PROF_SLOTS 512
typedef struct { char key[48]; double ns; int64_t n; } prof_slot_t;
static prof_slot_t g_prof[PROF_SLOTS];
static pthread_mutex_t g_prof_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_prof_on = -1; /* -1: TORCH_TPU_EXEC_PROFILE not read yet */
static _Atomic int g_prof_dump_set;
static double prof_now(void) { /* this thread's CPU time (robust to other jobs; pool workers' not counted) */
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}
static void prof_dump(void) {
  double total = 0;
  int idx[PROF_SLOTS], m = 0;
  for (int i = 0; i < PROF_SLOTS; ++i)
    if (g_prof[i].n) { idx[m++] = i; if (strncmp(g_prof[i].key, "exe", 3)) total += g_prof[i].ns; }
  for (int i = 1; i < m; ++i) /* insertion sort by time, descending */
    for (int j = i; j > 0 && g_prof[idx[j]].ns > g_prof[idx[j - 1]].ns; --j) { int t = idx[j]; idx[j] = idx[j - 1]; idx[j - 1] = t; }
  fprintf(stderr, "exec profile: %.3f ms in steps\n", total / 1e6);
  for (int i = 0; i < m; ++i)
    fprintf(stderr, "  %-48s %10.3f ms %8lld calls %8.2f us/call\n", g_prof[idx[i]].key, g_prof[idx[i]].ns / 1e6,
            (long long)g_prof[idx[i]].n, g_prof[idx[i]].ns / 1e3 / (double)g_prof[idx[i]].n);
}
static int prof_on(void) {
  int v = tpu_rt_env_switch(&g_prof_on, "TORCH_TPU_EXEC_PROFILE", 0);
  if (v && !atomic_load_explicit(&g_prof_dump_set, memory_order_relaxed) && !atomic_exchange(&g_prof_dump_set, 1))
    atexit(prof_dump); /* once, on the first call that finds it on */
  return v;
}
static void prof_add(const char* key, double ns) {
  uint32_t h = 2166136261u;
  for (const char* c = key; *c; ++c) h = (h ^ (uint8_t)*c) * 16777619u;
  pthread_mutex_lock(&g_prof_mu);
  for (int i = 0; i < PROF_SLOTS; ++i) {
    prof_slot_t* sl = &g_prof[(h + (uint32_t)i) % PROF_SLOTS];
    if (!sl->n) snprintf(sl->key, sizeof(sl->key), "%s", key);
    else if (strcmp(sl->key, key)) continue;
    sl->ns += ns;
    sl->n++;
    break;
  }
  pthread_mutex_unlock(&g_prof_mu);
}
static void prof_step(const tpu_host_exe_t* e, int v, double ns);

const tpu_ir_graph_t* tpu_host_exe_graph(const tpu_host_exe_t* e) { return e->traced ? e->traced : &e->g; }
int tpu_host_exe_num_steps(const tpu_host_exe_t* e) { return e->n_steps; }
int tpu_host_exe_num_epilogues(const tpu_host_exe_t* e) {
  int c = 0;
  for (int v = 0; v < e->g.n_ops; ++v) c += e->epi_dot[v] >= 0;
  return c;
}
void tpu_host_exe_fusion_stats(const tpu_host_exe_t* e, int32_t* out_clusters, int32_t* out_fused_ops,
                               int32_t* out_reduce_producers) {
  int32_t c = 0, f = 0, r = 0;
  for (int v = 0; v < e->g.n_ops; ++v) {
    if (e->kind[v] == K_ROOT && e->mem_cnt[v] > 1) c++;
    if (e->kind[v] == K_MEMBER) f++;
    if (e->fused[v]) r++;
  }
  *out_clusters = c; *out_fused_ops = f; *out_reduce_producers = r;
}

void tpu_host_exe_lifetimes(const tpu_host_exe_t* e, int32_t* param_last, int32_t* out_first) {
  const tpu_ir_graph_t* G = &e->g;
  for (int p = 0; p < G->n_params; ++p) param_last[p] = -1;
  for (int k = 0; k < G->n_outputs; ++k) out_first[k] = G->n_ops; /* the copies after the last step */
  for (int v = 0; v < G->n_ops; ++v) {
    if (e->kind[v] == K_PARAM && param_last[G->ops[v].i0] < e->last_use[v]) param_last[G->ops[v].i0] = e->last_use[v];
    int k = e->out_index[v] >= 0 ? e->out_index[v] : e->host_out[v]; /* host_out: a reshape of v's result */
    if (k >= 0 && out_first[k] > v) out_first[k] = v;
  }
}

void tpu_host_exe_free(tpu_host_exe_t* e) {
  if (!e) return;
  free(e->g.ops); free(e->g.operands);
  if (e->traced) { tpu_ir_graph_free(e->traced); free(e->traced); }
  free(e->kind); free(e->out_index); free(e->mem_off); free(e->mem_cnt); free(e->members);
  free(e->leaf_off); free(e->leaf_cnt); free(e->leaves); free(e->slot); free(e->fused);
  free(e->reg); free(e->nreg);
  free(e->last_use); free(e->epi_root); free(e->epi_dot); free(e->param_op); free(e->in_dtype); free(e->host_out);
  free(e->out_alias);
  free(e->sbatch); free(e->sb_roots); free(e->sb_off);
  free(e->prev_use); free(e->grp); free(e->grp_first); free(e->grp_last); free(e->grp_off); free(e->grp_items);
  free(e);
}

/* Whether the clusters rooted at a and b compute the same ops wired the same way on leaves of the same dtypes (then
 * one kernel call per member computes both, each element as its own cluster would). */
static int sb_same(const tpu_host_exe_t* e, int a, int b) {
  const tpu_ir_graph_t* G = &e->g;
  if (e->mem_cnt[a] != e->mem_cnt[b] || e->leaf_cnt[a] != e->leaf_cnt[b] || e->nreg[a] != e->nreg[b]) return 0;
  for (int j = 0; j < e->leaf_cnt[a]; ++j)
    if (G->ops[e->leaves[e->leaf_off[a] + j]].type.dtype != G->ops[e->leaves[e->leaf_off[b] + j]].type.dtype) return 0;
  for (int i = 0; i < e->mem_cnt[a]; ++i) {
    const int x = e->members[e->mem_off[a] + i], y = e->members[e->mem_off[b] + i];
    const tpu_ir_op_t *p = &G->ops[x], *q = &G->ops[y];
    if (p->opcode != q->opcode || p->n_in != q->n_in || p->prec != q->prec || p->type.dtype != q->type.dtype ||
        p->i0 != q->i0 || p->i1 != q->i1 || memcmp(&p->f0, &q->f0, sizeof p->f0) || memcmp(p->a, q->a, sizeof p->a) ||
        e->in_dtype[x] != e->in_dtype[y] || e->reg[x] != e->reg[y])
      return 0;
    for (int k = 0; k < p->n_in; ++k)
      if (e->slot[p->in_off + k] != e->slot[q->in_off + k]) return 0;
  }
  return 1;
}
/* Scalar batches (see sbatch): a rank-0 root whose leaves are rank-0 parameters, runtime scalars, constants or
 * batched roots, with no custom call among its members (their scalar operands are read as one value); batched
 * with the earlier roots of its structure (sb_same) at its level (1 + its batched leaves' highest). */
static tpu_status_t plan_scalar_batches(tpu_host_exe_t* e) {
  const tpu_ir_graph_t* G = &e->g;
  const int n = G->n_ops;
  e->sbatch = calloc((size_t)(n ? n : 1), 1);
  int32_t* lvl = malloc((size_t)(n ? n : 1) * sizeof(int32_t));   /* per op: level of a batched root */
  int32_t* bat = malloc((size_t)(n ? n : 1) * sizeof(int32_t));   /* per op: its batch */
  int32_t* first = malloc((size_t)(n ? n : 1) * sizeof(int32_t)); /* per batch: its first root */
  int32_t* cnt = calloc((size_t)(n ? n : 1) + 1, sizeof(int32_t));
  if (!e->sbatch || !lvl || !bat || !first || !cnt) {
    free(lvl); free(bat); free(first); free(cnt);
    return TPU_ERR(OUT_OF_MEMORY, "host: out of memory compiling an executable");
  }
  int nb = 0, nroots = 0, maxl = 0;
  for (int v = 0; v < n; ++v) {
    if (e->kind[v] != K_ROOT || G->ops[v].type.rank != 0 || e->fused[v] || e->epi_dot[v] >= 0 ||
        e->nreg[v] + e->leaf_cnt[v] > SB_SLOTS)
      continue;
    int ok = 1, l = 0;
    for (int i = 0; i < e->mem_cnt[v] && ok; ++i) ok = G->ops[e->members[e->mem_off[v] + i]].opcode != TPU_IR_CUSTOM;
    for (int j = 0; j < e->leaf_cnt[v] && ok; ++j) {
      const int u = e->leaves[e->leaf_off[v] + j];
      if (e->sbatch[u]) { l = TPU_MAX(l, lvl[u] + 1); continue; }
      ok = e->kind[u] == K_SCALAR || e->kind[u] == K_CONST || (e->kind[u] == K_PARAM && G->ops[u].type.rank == 0);
    }
    if (!ok) continue;
    e->sbatch[v] = 1; lvl[v] = l; maxl = TPU_MAX(maxl, l); nroots++;
    int b = 0;
    while (b < nb && !(lvl[first[b]] == l && sb_same(e, first[b], v))) ++b;
    if (b == nb) first[nb++] = v;
    bat[v] = b; cnt[b]++;
  }
  e->sb_roots = malloc((size_t)(nroots ? nroots : 1) * sizeof(int32_t));
  e->sb_off = malloc((size_t)(nb + 1) * sizeof(int32_t));
  int32_t* start = malloc((size_t)(nb ? nb : 1) * sizeof(int32_t)); /* per batch: its first index in sb_roots */
  if (!e->sb_roots || !e->sb_off || !start) {
    free(lvl); free(bat); free(first); free(cnt); free(start);
    return TPU_ERR(OUT_OF_MEMORY, "host: out of memory compiling an executable");
  }
  int off = 0; /* batches by level (then by first root): each after the batches it reads */
  for (int l = 0; l <= maxl && nb; ++l)
    for (int b = 0; b < nb; ++b)
      if (lvl[first[b]] == l) { start[b] = off; e->sb_off[e->n_sb++] = off; off += cnt[b]; }
  e->sb_off[e->n_sb] = off;
  for (int v = 0; v < n; ++v)
    if (e->sbatch[v]) e->sb_roots[start[bat[v]]++] = v;
  free(lvl); free(bat); free(first); free(cnt); free(start);
  return TPU_OK;
}


/* ---- step groups. A compiled step's ops are mostly small (a tiny model's convolutions, GEMMs and elementwise
 * clusters take 2-60 us each): split over the pool they pay the hand-off and leave threads idle, while a
 * backward graph's input and weight gradients, or an optimizer's per-parameter updates, read the same values
 * and write different ones. plan_groups finds runs of consecutive steps that read none of each other's results
 * (no reordering) and keeps those whose estimated cost (step_cost) two threads running one step each would
 * finish sooner. A memory-bound step that splits over the pool on its own (step_solo) is never grouped (it ends
 * the run: cache locality, see exec_sched.h); the runner chooses every step's destination
 * first, in step order, then runs the group with
 * tpu_pool_parallel_for_each (costliest first, each kernel's own parallel_for calls inline on its thread; only
 * on pool workers that are awake: the run wakes them as it starts), then frees the temporaries. Kernel arithmetic does not depend on the thread that runs it: the same bits. */
static int g_groups = -1; /* -1: TORCH_TPU_EXEC_GROUPS not read yet */
static int groups_on(void) { return tpu_rt_env_switch(&g_groups, "TORCH_TPU_EXEC_GROUPS", 1); }
int tpu_host_set_exec_groups(int on) { return tpu_rt_env_switch_set(&g_groups, "TORCH_TPU_EXEC_GROUPS", 1, on); }
int tpu_host_exe_num_groups(const tpu_host_exe_t* e, int32_t* out_grouped_steps) {
  if (out_grouped_steps) *out_grouped_steps = e->n_grp ? e->grp_off[e->n_grp] : 0;
  return e->n_grp;
}

#define GRP_FLOP_NS 0.04      /* a small conv / GEMM on one thread: ~25 GFLOP/s */
#define GRP_STEP_NS 1500.0    /* a step's fixed cost */
#define GRP_HANDOFF_NS TPU_HOST_GRP_HANDOFF_NS
static double type_numel(const tpu_ir_type_t* t) { return (double)tpu_ir_numel(t); }
static double dot_flops(const tpu_ir_graph_t* G, int v) { /* [B..., M, N] = [B..., M, K] x [B..., K, N] */
  const tpu_ir_op_t* op = &G->ops[v];
  double out = type_numel(&op->type), b = 1;
  for (int d = 0; d < op->i0 && d < op->type.rank; ++d) b *= (double)op->type.dims[d];
  double a = type_numel(&G->ops[tpu_ir_operand(G, v, 0)].type), w = type_numel(&G->ops[tpu_ir_operand(G, v, 1)].type);
  return out > 0 && b > 0 ? 2 * out * sqrt(a * w / (out * b)) : 0;
}
/* Flops of a convolution-like product: 2 (elements of dy) (elements of w) / O, w = [O, Cg, *K]. */
static double conv_flops(const tpu_ir_type_t* dy, const tpu_ir_type_t* w) {
  return w->rank && w->dims[0] > 0 ? 2 * type_numel(dy) * type_numel(w) / (double)w->dims[0] : 0;
}
/* Whether step v is "solo" (plan_groups and the scheduler never group it: exec_sched.h): an elementwise cluster (a
 * lone CONVERT included; not a GEMM's epilogue) whose output reaches 2 pool chunks of CLUSTER_GRAIN (divided by
 * TORCH_TPU_GRAPH_GRAIN_DIV when the run applies it: GRAPH_MIN_STEPS+ steps), i.e. one that splits over the pool
 * on its own. Every other step never is: products, reduces / cumsums / pads / concats (they split by output lines
 * or merged copy rows, often not at all: a full sum below 256K elements, a dim-0 cat of contiguous tensors),
 * kernels that run on one thread (index_select, gather, index_put, sort, iota...) and custom calls. */
static int step_solo(const tpu_host_exe_t* e, int v) {
  if (e->kind[v] != K_ROOT || e->epi_dot[v] >= 0) return 0;
  const int div = e->n_steps >= GRAPH_MIN_STEPS ? graph_grain_div() : 1; /* as the run applies it */
  return type_numel(&e->g.ops[v].type) >= 2 * fmax(1, floor((double)CLUSTER_GRAIN / div));
}
/* Estimated single-thread time of step v (ns): only compared with other steps' (which to group). *out_solo
 * (optional): step_solo. */
static double step_cost_solo(const tpu_host_exe_t* e, int v, int* out_solo) {
  const tpu_ir_graph_t* G = &e->g;
  const tpu_ir_op_t* op = &G->ops[v];
  const double out = type_numel(&op->type);
  if (out_solo) *out_solo = step_solo(e, v);
  if (e->kind[v] == K_ROOT) {
    return GRP_STEP_NS + out * (0.5 + 0.5 * e->mem_cnt[v]) + (e->epi_dot[v] >= 0 ? dot_flops(G, e->epi_dot[v]) * GRP_FLOP_NS : 0);
  }
  const tpu_ir_type_t* t0 = op->n_in > 0 ? &G->ops[tpu_ir_operand(G, v, 0)].type : NULL;
  const tpu_ir_type_t* t1 = op->n_in > 1 ? &G->ops[tpu_ir_operand(G, v, 1)].type : NULL;
  if (op->opcode == TPU_IR_DOT) return GRP_STEP_NS + dot_flops(G, v) * GRP_FLOP_NS;
  if (op->opcode == TPU_IR_CONV && t1) return GRP_STEP_NS + conv_flops(&op->type, t1) * GRP_FLOP_NS;
  if (op->opcode == TPU_IR_CUSTOM && op->i0 == TPU_IR_CUSTOM_CONV_BWD_INPUT && t1)
    return GRP_STEP_NS + conv_flops(t0, t1) * GRP_FLOP_NS; /* (dy, w) */
  if (op->opcode == TPU_IR_CUSTOM && op->i0 == TPU_IR_CUSTOM_CONV_BWD_WEIGHT && t1)
    return GRP_STEP_NS + conv_flops(t1, &op->type) * GRP_FLOP_NS; /* (x, dy) -> w */
  double m = out;
  for (int k = 0; k < op->n_in; ++k) m = fmax(m, type_numel(&G->ops[tpu_ir_operand(G, v, k)].type));
  return GRP_STEP_NS + m;
}
static double step_cost(const tpu_host_exe_t* e, int v) { return step_cost_solo(e, v, NULL); }
#define alone_ns tpu_host_grp_alone_ns /* a step alone on nth pool threads (exec_sched.h) */
#define GRP_MAX_LANES TPU_HOST_GRP_MAX_LANES

typedef struct { double c; int32_t v; } grp_item_t;
static int grp_item_cmp(const void* x, const void* y) { /* decreasing cost, then step order */
  const grp_item_t *a = x, *b = y;
  return a->c > b->c ? -1 : a->c < b->c ? 1 : (a->v > b->v) - (a->v < b->v);
}
/* Makes L[0..m) (consecutive independent steps) a group when two threads running one step each (largest first)
 * beat running them one by one on the pool; else splits the run around its costliest step and tries both sides. */
static void grp_emit(tpu_host_exe_t* e, const int32_t* L, int m, const double* cost, grp_item_t* tmp, int nth) {
  const int nl = TPU_MIN(nth, GRP_MAX_LANES);
  while (m >= 2) {
    double alone = 0, lane[GRP_MAX_LANES] = {0};
    int imax = 0;
    for (int i = 0; i < m; ++i) {
      tmp[i] = (grp_item_t){cost[L[i]], L[i]};
      alone += alone_ns(cost[L[i]], nth);
      if (cost[L[i]] > cost[L[imax]]) imax = i;
    }
    qsort(tmp, (size_t)m, sizeof(*tmp), grp_item_cmp);
    for (int i = 0; i < m; ++i) tpu_host_grp_lane_put(lane, nl, tmp[i].c, INFINITY); /* costliest first */
    if (tpu_host_grp_wins(tpu_host_grp_busiest(lane, nl), alone)) {
      const int g = e->n_grp++, off = e->grp_off[g];
      e->grp_first[g] = L[0]; e->grp_last[g] = L[m - 1];
      for (int i = 0; i < m; ++i) { e->grp_items[off + i] = tmp[i].v; e->grp[tmp[i].v] = g; }
      e->grp_off[g + 1] = off + m;
      return;
    }
    if (m == 2) return;
    grp_emit(e, L, imax, cost, tmp, nth);
    L += imax + 1; m -= imax + 1;
  }
}
/* The step whose run writes value u's storage (views followed to their base), or -1 (parameters, constants,
 * scalar batches: ready before the first step). A DOT with an epilogue runs at its cluster's step. */
static int grp_step_of(const tpu_host_exe_t* e, int u) {
  while (e->kind[u] == K_VIEW) u = tpu_ir_operand(&e->g, u, 0);
  if ((e->kind[u] != K_ROOT && e->kind[u] != K_LIB) || e->sbatch[u]) return -1;
  return e->epi_root[u] >= 0 ? e->epi_root[u] : u;
}
/* cut (optional, per op): 1 = a run starts at this step (the scheduler's rounds) */
static tpu_status_t plan_groups(tpu_host_exe_t* e, const uint8_t* cut) {
  const tpu_ir_graph_t* G = &e->g;
  const int n = G->n_ops;
  const size_t nn = (size_t)(n ? n : 1);
  e->grp = malloc(nn * sizeof(int32_t));
  e->grp_first = malloc((nn / 2 + 1) * sizeof(int32_t));
  e->grp_last = malloc((nn / 2 + 1) * sizeof(int32_t));
  e->grp_off = calloc(nn / 2 + 2, sizeof(int32_t));
  e->grp_items = malloc(nn * sizeof(int32_t));
  int32_t* mark = calloc(nn, sizeof(int32_t)); /* per step: the candidate run it joined (1-based) */
  int32_t* L = malloc(nn * sizeof(int32_t));
  double* cost = malloc(nn * sizeof(double));
  grp_item_t* tmp = malloc(nn * sizeof(grp_item_t));
  if (!e->grp || !e->grp_first || !e->grp_last || !e->grp_off || !e->grp_items || !mark || !L || !cost || !tmp) {
    free(mark); free(L); free(cost); free(tmp);
    return TPU_ERR(OUT_OF_MEMORY, "host: out of memory compiling an executable");
  }
  /* planned for this process's pool (groups never run with one thread: planned as for two) */
  const int nth = TPU_MAX(tpu_pool_num_threads(), 2);
  int cid = 1, m = 0;
#define GRP_CLOSE() do { grp_emit(e, L, m, cost, tmp, nth); m = 0; cid++; } while (0)
#define GRP_READS(u) do { int s_ = grp_step_of(e, (u)); dep |= s_ >= 0 && s_ != v && mark[s_] == cid; } while (0)
  for (int v = 0; v < n; ++v) {
    e->grp[v] = -1;
    const tpu_ir_op_t* op = &G->ops[v];
    if (e->kind[v] == K_VIEW) { /* a reshape may copy its operand when it is applied: not one of the run's */
      int s_ = op->opcode == TPU_IR_RESHAPE ? grp_step_of(e, tpu_ir_operand(G, v, 0)) : -1;
      if (s_ >= 0 && mark[s_] == cid) GRP_CLOSE();
      continue;
    }
    if ((e->kind[v] != K_ROOT && e->kind[v] != K_LIB) || e->sbatch[v] || e->fused[v] || e->epi_root[v] >= 0) continue;
    if (cut && cut[v] && m) GRP_CLOSE();
    if (op->opcode == TPU_IR_REDUCE && e->fused[tpu_ir_operand(G, v, 0)]) { GRP_CLOSE(); continue; } /* takes scratch as it runs */
    int dep = 0;
    if (e->kind[v] == K_ROOT) {
      for (int j = 0; j < e->leaf_cnt[v]; ++j) GRP_READS(e->leaves[e->leaf_off[v] + j]);
      if (e->epi_dot[v] >= 0)
        for (int k = 0; k < G->ops[e->epi_dot[v]].n_in; ++k) GRP_READS(tpu_ir_operand(G, e->epi_dot[v], k));
    } else {
      for (int k = 0; k < op->n_in; ++k) GRP_READS(tpu_ir_operand(G, v, k));
    }
    if (dep) GRP_CLOSE();
    int solo;
    cost[v] = step_cost_solo(e, v, &solo);
    if (solo) { GRP_CLOSE(); continue; } /* runs alone, split over the pool; the next run starts after it */
    mark[v] = cid;
    L[m++] = v;
  }
  GRP_CLOSE();
#undef GRP_CLOSE
#undef GRP_READS
  free(mark); free(L); free(cost); free(tmp);
  return TPU_OK;
}


/* The plan of verified graph g, its steps in g's order (cut: see plan_groups). */
static tpu_status_t host_plan(const tpu_ir_graph_t* g, const uint8_t* cut, tpu_host_exe_t** out_exe) {
  *out_exe = NULL;
  int n = g->n_ops;
  tpu_host_exe_t* e = calloc(1, sizeof(*e));
  int32_t* users = calloc((size_t)n, sizeof(int32_t));
  int32_t* user = calloc((size_t)n, sizeof(int32_t));
  if (e) {
    e->g = *g; e->g.status = TPU_OK;
    e->g.ops = malloc((size_t)n * sizeof(tpu_ir_op_t));
    e->g.operands = malloc((size_t)(g->n_operands ? g->n_operands : 1) * sizeof(int32_t));
    e->kind = calloc((size_t)n, 1);
    e->out_index = malloc((size_t)n * sizeof(int32_t));
    e->mem_off = calloc((size_t)n, sizeof(int32_t)); e->mem_cnt = calloc((size_t)n, sizeof(int32_t));
    e->leaf_off = calloc((size_t)n, sizeof(int32_t)); e->leaf_cnt = calloc((size_t)n, sizeof(int32_t));
    e->members = malloc((size_t)n * sizeof(int32_t));
    e->leaves = malloc((size_t)(n * TPU_IR_MAX_INLINE_OPERANDS + g->n_operands + 1) * sizeof(int32_t));
    e->slot = malloc((size_t)(g->n_operands + 1) * sizeof(int32_t));
    e->reg = calloc((size_t)(n ? n : 1), sizeof(int32_t));
    e->nreg = calloc((size_t)(n ? n : 1), sizeof(int32_t));
    e->fused = calloc((size_t)n, 1);
    e->last_use = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    e->epi_root = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    e->epi_dot = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    e->param_op = malloc((size_t)(g->n_params ? g->n_params : 1) * sizeof(int32_t));
    e->in_dtype = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    e->host_out = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    e->prev_use = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
  }
  if (!e || !users || !user || !e->g.ops || !e->g.operands || !e->kind || !e->out_index || !e->mem_off ||
      !e->mem_cnt || !e->leaf_off || !e->leaf_cnt || !e->members || !e->leaves || !e->slot || !e->fused ||
      !e->last_use || !e->reg || !e->nreg || !e->epi_root || !e->epi_dot || !e->param_op || !e->in_dtype || !e->host_out ||
      !e->prev_use) {
    free(users); free(user); tpu_host_exe_free(e);
    return TPU_ERR(OUT_OF_MEMORY, "host: out of memory compiling an executable");
  }
  memcpy(e->g.ops, g->ops, (size_t)n * sizeof(tpu_ir_op_t));
  if (g->n_operands) memcpy(e->g.operands, g->operands, (size_t)g->n_operands * sizeof(int32_t));
  const tpu_ir_graph_t* G = &e->g;
  for (int p = 0; p < G->n_params; ++p) e->param_op[p] = -1;
  for (int v = n - 1; v >= 0; --v) /* the first PARAM op of an index, as the runner's search found it */
    if (G->ops[v].opcode == TPU_IR_PARAM && G->ops[v].i0 >= 0 && G->ops[v].i0 < G->n_params) e->param_op[G->ops[v].i0] = v;
  for (int v = 0; v < n; ++v) {
    e->out_index[v] = -1;
    const tpu_ir_op_t* op = &G->ops[v];
    /* tile_compute's input dtype: operand 0's (SELECT: operand 1's, the value) */
    e->in_dtype[v] = TPU_DTYPE_F32;
    for (int k = 0; k < op->n_in && k < 4; ++k)
      if (k == (op->opcode == TPU_IR_SELECT ? 1 : 0)) e->in_dtype[v] = G->ops[tpu_ir_operand(G, v, k)].type.dtype;
    for (int k = 0; k < op->n_in; ++k) { int u = tpu_ir_operand(G, v, k); users[u]++; user[u] = v; }
  }
  for (int k = 0; k < G->n_outputs; ++k) {
    int v = G->outputs[k];
    users[v] += 2; /* an output is always materialized */
    if (e->out_index[v] < 0) e->out_index[v] = k;
  }
  const int custom_on = custom_fusion_on();
  for (int v = 0; v < n; ++v) {
    int oc = G->ops[v].opcode;
    if (oc == TPU_IR_PARAM) e->kind[v] = K_PARAM;
    else if (oc == TPU_IR_SCALAR) e->kind[v] = K_SCALAR;
    else if (oc == TPU_IR_CONSTANT) e->kind[v] = K_CONST;
    else if (tpu_ir_is_view(oc)) e->kind[v] = K_VIEW;
    else if (plan_elementwise(G, v, custom_on)) e->kind[v] = K_ROOT; /* demoted below */
    else e->kind[v] = K_LIB;
  }
  /* (a member has its reader's shape: a rank-0 operand of a custom call stays a leaf) */
  for (int v = 0; v < n; ++v)
    if (e->kind[v] == K_ROOT && users[v] == 1 && plan_elementwise(G, user[v], custom_on) &&
        G->ops[v].type.rank == G->ops[user[v]].type.rank)
      e->kind[v] = K_MEMBER;
  /* Clusters keep at most 48 distinct leaves (the runner holds 64 leaf views; long fused-eager
   * chains would exceed that): walking each cluster from its root, last root first, a member whose
   * operands would push the count past 48 becomes a root itself (materialized; its cluster is walked
   * later). Elementwise results do not depend on how ops are clustered. */
  {
    int32_t* stk = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!stk) { free(users); free(user); tpu_host_exe_free(e); return TPU_ERR(OUT_OF_MEMORY, "host: out of memory compiling an executable"); }
    for (int r = n - 1; r >= 0; --r) {
      if (e->kind[r] != K_ROOT) continue;
      int32_t lv[64];
      int nlv = 0, top = 0;
      stk[top++] = r;
      while (top) {
        int v = stk[--top], fresh = 0;
        for (int k = 0; k < G->ops[v].n_in; ++k) {
          int u = tpu_ir_operand(G, v, k), seen = e->kind[u] == K_MEMBER;
          for (int j = 0; j < nlv && !seen; ++j) seen = lv[j] == u;
          fresh += !seen;
        }
        if (v != r && nlv + fresh > 48) { e->kind[v] = K_ROOT; lv[nlv++] = v; continue; }
        for (int k = 0; k < G->ops[v].n_in; ++k) {
          int u = tpu_ir_operand(G, v, k), seen = 0;
          if (e->kind[u] == K_MEMBER) { stk[top++] = u; continue; }
          for (int j = 0; j < nlv && !seen; ++j) seen = lv[j] == u;
          if (!seen && nlv < 64) lv[nlv++] = u;
        }
      }
    }
    free(stk);
  }
  /* a custom call that is a root without members runs its library kernel (rows.c) */
  for (int v = 0; v < n; ++v) {
    if (e->kind[v] != K_ROOT || G->ops[v].opcode != TPU_IR_CUSTOM) continue;
    int has = 0;
    for (int k = 0; k < G->ops[v].n_in; ++k) has |= e->kind[tpu_ir_operand(G, v, k)] == K_MEMBER;
    if (!has) e->kind[v] = K_LIB;
  }
  /* An elementwise root read only by a reduce is never materialized whole: the reduce
   * evaluates it block by block (cache-sized temporaries), see run_fused_reduce. */
  for (int v = 0; v < n; ++v)
    if (e->kind[v] == K_ROOT && users[v] == 1 && G->ops[user[v]].opcode == TPU_IR_REDUCE) e->fused[v] = 1;
  /* GEMM epilogues: an f32 DOT whose every reader (directly or through reshapes; none a graph
   * output) is a member of one cluster that is not itself evaluated inside a reduce; one DOT per
   * cluster. Same operations per element as unfused. While the readers are scanned, epi_root holds
   * the candidate cluster (-2: none seen yet, -1: no) and epi_dot maps a reshape to its DOT. */
  const int epi_on = epilogue_fusion_on();
  for (int v = 0; v < n; ++v) {
    e->epi_dot[v] = -1;
    e->epi_root[v] = epi_on && G->ops[v].opcode == TPU_IR_DOT && G->ops[v].type.dtype == TPU_DTYPE_F32 &&
                     e->out_index[v] < 0 ? -2 : -1;
    if (e->epi_root[v] == -2) e->epi_dot[v] = v;
  }
  for (int w = 0; w < n && epi_on; ++w) {
    if (G->ops[w].opcode == TPU_IR_RESHAPE) {
      int v = e->epi_dot[tpu_ir_operand(G, w, 0)];
      if (v >= 0 && e->out_index[w] >= 0) e->epi_root[v] = -1;
      if (v >= 0) e->epi_dot[w] = v;
      continue;
    }
    for (int k = 0; k < G->ops[w].n_in; ++k) {
      int v = e->epi_dot[tpu_ir_operand(G, w, k)];
      if (v < 0 || e->epi_root[v] == -1) continue;
      int u = w;
      while (e->kind[u] == K_MEMBER) u = user[u];
      if (e->kind[u] != K_ROOT || e->fused[u] || (e->epi_root[v] >= 0 && e->epi_root[v] != u)) u = -1;
      e->epi_root[v] = u;
    }
  }
  for (int v = 0; v < n; ++v) e->epi_dot[v] = -1;
  for (int v = 0; v < n; ++v) {
    int u = e->epi_root[v];
    if (u < 0 || e->epi_dot[u] >= 0 || tpu_ir_numel(&G->ops[u].type) != tpu_ir_numel(&G->ops[v].type)) {
      e->epi_root[v] = -1;
      continue;
    }
    e->epi_dot[u] = v;
  }
  /* Members of the cluster rooted at r: walk operands through K_MEMBER values. */
  int nm = 0, nl = 0;
  int32_t* stack = users; /* reuse as scratch */
  e->last_step = -1;
  for (int r = 0; r < n; ++r) {
    if (e->kind[r] == K_ROOT || e->kind[r] == K_LIB) { e->n_steps++; e->last_step = r; }
    if (e->kind[r] != K_ROOT) continue;
    int top = 0, m0 = nm, l0 = nl;
    stack[top++] = r;
    while (top) {
      int v = stack[--top];
      e->members[nm++] = v;
      for (int k = 0; k < G->ops[v].n_in; ++k) {
        int u = tpu_ir_operand(G, v, k);
        if (e->kind[u] == K_MEMBER) { stack[top++] = u; continue; }
        int seen = 0;
        for (int j = l0; j < nl; ++j) seen |= e->leaves[j] == u;
        if (!seen) e->leaves[nl++] = u;
      }
    }
    /* topological = increasing op index (insertion sort; clusters are small) */
    for (int i = m0 + 1; i < nm; ++i)
      for (int j = i; j > m0 && e->members[j - 1] > e->members[j]; --j) {
        int32_t t = e->members[j]; e->members[j] = e->members[j - 1]; e->members[j - 1] = t;
      }
    e->mem_off[r] = m0; e->mem_cnt[r] = nm - m0; e->leaf_off[r] = l0; e->leaf_cnt[r] = nl - l0;
    if (nl - l0 > 64) { /* the runner keeps at most 64 leaf views per cluster */
      free(users); free(user); tpu_host_exe_free(e);
      return TPU_ERR(UNSUPPORTED, "host: elementwise cluster with %d inputs", nl - l0);
    }
    /* Tile registers by liveness: every member has exactly one reader (a later member), so its
     * register is free again once that reader has its own (taken first: a result never shares a
     * buffer with an operand). Few live buffers keep a long chain's tiles in L1. */
    int nfree = 0, nr = 0;
    int32_t* freeregs = stack; /* the walk's stack is empty again */
    for (int i = m0; i < nm; ++i) {
      int v = e->members[i];
      e->reg[v] = nfree ? freeregs[--nfree] : nr++;
      for (int k = 0; k < G->ops[v].n_in; ++k) {
        int u = tpu_ir_operand(G, v, k);
        if (e->kind[u] == K_MEMBER) freeregs[nfree++] = e->reg[u];
      }
    }
    e->nreg[r] = nr;
    /* tile slot of every operand of every member: registers first, then leaves */
    for (int i = m0; i < nm; ++i) {
      int v = e->members[i];
      for (int k = 0; k < G->ops[v].n_in; ++k) {
        int u = tpu_ir_operand(G, v, k), slot = -1;
        if (e->kind[u] == K_MEMBER) slot = e->reg[u];
        for (int j = l0; j < nl && slot < 0; ++j) if (e->leaves[j] == u) slot = nr + (j - l0);
        e->slot[G->ops[v].in_off + k] = slot;
      }
    }
  }
  /* Storage lifetimes (memory planning): a temporary's block goes back to the per-thread
   * cache after the last step that reads it, so later steps reuse it and a long graph's peak
   * is its live set, not the sum of its temporaries. A value is read when the op using it
   * runs: a cluster member at its root's step, a fused producer at its reduce's step; views
   * share their operand's storage (base). `users` is free again: reuse it for the run times. */
  int32_t* when = users;
  for (int v = n - 1; v >= 0; --v)
    when[v] = (e->kind[v] == K_MEMBER || e->fused[v]) ? when[user[v]] : e->epi_root[v] >= 0 ? e->epi_root[v] : v;
  for (int v = 0; v < n; ++v) {
    user[v] = e->kind[v] == K_VIEW ? user[tpu_ir_operand(G, v, 0)] : v; /* base */
    e->last_use[v] = e->prev_use[v] = -1;
  }
  for (int w = 0; w < n; ++w)
    for (int k = 0; k < G->ops[w].n_in; ++k) {
      int b = user[tpu_ir_operand(G, w, k)], t = when[w];
      if (e->last_use[b] < t) { e->prev_use[b] = e->last_use[b]; e->last_use[b] = t; }
      else if (t < e->last_use[b] && e->prev_use[b] < t) e->prev_use[b] = t;
    }
  for (int k = 0; k < G->n_outputs; ++k) e->last_use[user[G->outputs[k]]] = INT32_MAX;
  /* Outputs that are reshapes of a step's result (saved activations of compiled forward graphs): the
   * step computes into the output's memory viewed in its own shape, so no copy after the last step. */
  for (int v = 0; v < n; ++v) e->host_out[v] = -1;
  for (int k = 0; k < G->n_outputs; ++k) {
    int u = G->outputs[k];
    if (G->ops[u].opcode != TPU_IR_RESHAPE) continue;
    while (G->ops[u].opcode == TPU_IR_RESHAPE) u = tpu_ir_operand(G, u, 0);
    if ((e->kind[u] == K_ROOT || e->kind[u] == K_LIB) && !e->fused[u] && e->epi_root[u] < 0 && e->out_index[u] < 0 &&
        e->host_out[u] < 0)
      e->host_out[u] = k;
  }
  /* A root or library output written into its own slot (or else into a temporary) never lies in
   * parameter or output memory while later steps run; every other output might. */
  e->out_alias = malloc((size_t)(G->n_outputs ? G->n_outputs : 1) * sizeof(int32_t));
  if (!e->out_alias) { free(users); free(user); tpu_host_exe_free(e); return TPU_ERR(OUT_OF_MEMORY, "host: out of memory"); }
  for (int k = 0; k < G->n_outputs; ++k) {
    int w = G->outputs[k];
    if ((e->kind[w] != K_ROOT && e->kind[w] != K_LIB) || e->out_index[w] != k || e->fused[w] || e->epi_root[w] >= 0)
      e->out_alias[e->n_out_alias++] = k;
  }
  free(users); free(user);
  tpu_status_t sst = plan_scalar_batches(e);
  if (!sst) sst = plan_groups(e, cut);
  if (sst) { tpu_host_exe_free(e); return sst; }
  *out_exe = e;
  return TPU_OK;
}

/* ---- step order (exec_sched.h): a graph of SCHED_MIN_STEPS+ steps is planned twice when step groups can run,
 * in its traced order and in the scheduler's; the second plan is kept when its modelled time (plan_model) is lower
 * and its modelled peak of temporaries not above the traced order's by more than the largest step's (the
 * scheduler's cap; +1%: the models differ by a few small tensors). Off by default (TORCH_TPU_EXEC_SCHED=1 turns it on):
 * on the loaded 2-core machine no wall-time gain could be shown (benchmarks/RESULTS.md, [sched] session 13). */
#define SCHED_MIN_STEPS 8
static int g_sched = -1; /* -1: TORCH_TPU_EXEC_SCHED not read yet */
static int sched_on(void) { return tpu_rt_env_switch(&g_sched, "TORCH_TPU_EXEC_SCHED", 0); }
int tpu_host_set_exec_sched(int on) { return tpu_rt_env_switch_set(&g_sched, "TORCH_TPU_EXEC_SCHED", 0, on); }
/* Bytes of step v's temporary as the runner takes it (0: an output's memory, or a scalar's own storage). */
static double step_bytes(const tpu_host_exe_t* e, int v) {
  const tpu_ir_type_t* t = &e->g.ops[v].type;
  if (e->last_use[v] == INT32_MAX || (t->rank == 0 && e->kind[v] == K_ROOT)) return 0;
  return type_numel(t) * (double)tpu_dtype_size(t->dtype);
}
/* The run's modelled device time (ns: groups as grp_emit models them, other steps alone) and peak of live
 * temporaries (bytes: step results from their step to their last reader, a group's until its last step). */
static void plan_model(const tpu_host_exe_t* e, int nth, double* out_ns, double* out_peak) {
  const int n = e->g.n_ops, nl = TPU_MIN(nth, GRP_MAX_LANES);
  double t = 0, live = 0, peak = 0;
  int nlive = 0;
  double* lb = malloc((size_t)(n ? n : 1) * sizeof(double)); /* live temporaries: bytes, dead after step lf */
  int32_t* lf = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
  for (int v = 0; v < n && lb && lf; ++v) {
    if (e->kind[v] != K_ROOT && e->kind[v] != K_LIB) continue;
    if (e->sbatch[v] || e->fused[v]) continue;
    const double b = step_bytes(e, v);
    if (b > 0) { lb[nlive] = b; lf[nlive++] = e->last_use[v]; live += b; }
    if (live > peak) peak = live;
    if (e->epi_root[v] >= 0) continue; /* its buffer now, its GEMM at its cluster's step */
    const int g = e->grp[v];
    if (g >= 0 && v != e->grp_last[g]) continue;
    if (g >= 0) {
      double lane[GRP_MAX_LANES] = {0};
      for (int i = e->grp_off[g]; i < e->grp_off[g + 1]; ++i) /* by decreasing cost */
        tpu_host_grp_lane_put(lane, nl, step_cost(e, e->grp_items[i]), INFINITY);
      t += tpu_host_grp_busiest(lane, nl) + GRP_HANDOFF_NS;
    } else {
      t += alone_ns(step_cost(e, v), nth);
    }
    for (int i = 0; i < nlive;) /* released after the step (a group: after its last) */
      if (lf[i] <= v) { live -= lb[i]; lb[i] = lb[--nlive]; lf[i] = lf[nlive]; } else ++i;
  }
  free(lb); free(lf);
  *out_ns = t; *out_peak = peak;
}
/* *out_exe: e's graph planned in the scheduler's order when that models better, else NULL. */
static tpu_status_t host_schedule(const tpu_host_exe_t* e, tpu_host_exe_t** out_exe) {
  *out_exe = NULL;
  const tpu_ir_graph_t* G = &e->g;
  const int n = G->n_ops, nth = TPU_MAX(tpu_pool_num_threads(), 2);
  const size_t nn = (size_t)(n ? n : 1);
  int32_t* unit = malloc(nn * sizeof(int32_t));
  int32_t* order = malloc(nn * sizeof(int32_t));
  double* cost = calloc(nn, sizeof(double));
  double* bytes = calloc(nn, sizeof(double));
  double* tbytes = calloc(nn, sizeof(double));
  uint8_t* cut = malloc(nn);
  uint8_t* solo = calloc(nn, 1);
  tpu_status_t st = TPU_OK;
  if (!unit || !order || !cost || !bytes || !tbytes || !cut || !solo) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory compiling an executable"); goto out; }
  /* which step evaluates each op: steps themselves; a DOT with an epilogue, its cluster; a fused producer, its
   * reduce; members, their root's */
  for (int v = 0; v < n; ++v) {
    const int k = e->kind[v];
    unit[v] = k == K_VIEW ? TPU_HOST_SCHED_VIEW : TPU_HOST_SCHED_SRC;
    if ((k == K_ROOT || k == K_LIB) && !e->sbatch[v]) unit[v] = e->epi_root[v] >= 0 ? e->epi_root[v] : v;
  }
  for (int v = 0; v < n; ++v)
    if (G->ops[v].opcode == TPU_IR_REDUCE && e->kind[v] == K_LIB && e->fused[tpu_ir_operand(G, v, 0)])
      unit[tpu_ir_operand(G, v, 0)] = unit[v];
  for (int r = 0; r < n; ++r)
    if (e->kind[r] == K_ROOT)
      for (int i = 0; i < e->mem_cnt[r]; ++i) unit[e->members[e->mem_off[r] + i]] = unit[r];
  for (int v = 0; v < n; ++v)
    if (unit[v] == v) { int so; cost[v] = step_cost_solo(e, v, &so); solo[v] = (uint8_t)so; bytes[v] = step_bytes(e, v); }
  for (int v = 0; v < n; ++v) /* an epilogue's GEMM result: held while its cluster's step runs */
    if (e->epi_root[v] >= 0) tbytes[e->epi_root[v]] += step_bytes(e, v);
  int changed = 0;
  tpu_host_sched_stats_t S;
  const tpu_host_sched_in_t in = {.g = G, .unit = unit, .cost = cost, .bytes = bytes, .tbytes = tbytes, .solo = solo,
                                 .nth = nth};
  st = tpu_host_sched_order(&in, order, &changed, cut, &S);
  double t0 = 0, p0 = 0, t1 = 0, p1 = 0;
  if (!st && changed && S.wide) plan_model(e, nth, &t0, &p0);
  /* (no round of 2+: no group the traced order lacks; rounds no faster than the traced plan: nothing to gain) */
  if (st || !changed || !S.wide || S.model_ns >= 0.99 * t0) goto out;
  tpu_ir_graph_t pg;
  st = tpu_host_sched_permute(G, order, &pg);
  if (st) goto out;
  tpu_host_exe_t* s = NULL;
  st = host_plan(&pg, cut, &s);
  tpu_ir_graph_free(&pg);
  if (st) goto out;
  plan_model(s, nth, &t1, &p1);
  const int keep = t1 < 0.99 * t0 && p1 <= 1.01 * p0 + S.slack; /* (the models differ by a few small tensors) */
  if (prof_on()) {
    int32_t g0, g1;
    const int n0 = tpu_host_exe_num_groups(e, &g0), n1 = tpu_host_exe_num_groups(s, &g1);
    fprintf(stderr, "exec sched: %d steps, work %.0f us, critical path %.0f us, %d rounds (%d wide); modelled %.0f -> "
            "%.0f us, groups %d (%d steps) -> %d (%d steps), peak %.1f -> %.1f KB (cap +%.1f): %s\n", e->n_steps, S.work_ns / 1e3,
            S.crit_ns / 1e3, S.rounds, S.wide, t0 / 1e3, t1 / 1e3, n0, g0, n1, g1, p0 / 1e3, p1 / 1e3, S.slack / 1e3,
            keep ? "kept" : "traced order kept");
  }
  if (keep) *out_exe = s;
  else tpu_host_exe_free(s);
out:
  free(unit); free(order); free(cost); free(bytes); free(tbytes); free(cut); free(solo);
  return st;
}

tpu_status_t tpu_host_compile(const tpu_ir_graph_t* g, tpu_host_exe_t** out_exe) {
  *out_exe = NULL;
  TPU_RETURN_IF_ERROR(tpu_ir_verify(g));
  tpu_host_exe_t* e = NULL;
  TPU_RETURN_IF_ERROR(host_plan(g, NULL, &e));
  if (e->n_steps >= SCHED_MIN_STEPS && tpu_pool_num_threads() > 1 && groups_on() && sched_on()) {
    tpu_host_exe_t* s = NULL;
    tpu_status_t st = host_schedule(e, &s);
    if (st) tpu_status_free(st); /* an optimization: the traced plan runs as planned (out of memory here) */
    if (s && (s->traced = malloc(sizeof(tpu_ir_graph_t)))) { /* s keeps e's graph (moved) */
      *s->traced = e->g;
      memset(&e->g, 0, sizeof(e->g));
      tpu_host_exe_free(e);
      e = s;
    } else {
      tpu_host_exe_free(s);
    }
  }
  *out_exe = e;
  return TPU_OK;
}

/* ---------------------------------------------------------------- run time */

typedef struct {
  tpu_host_view_t v;
  int ready;
  union { double f; float f32; int64_t i; uint64_t u; uint8_t b[8]; } storage; /* scalars */
} val_t;

static void view_contiguous(tpu_host_view_t* v, char* data, const tpu_ir_type_t* t) {
  v->data = data; v->dtype = t->dtype; v->rank = t->rank;
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; --d) { v->sizes[d] = t->dims[d]; v->strides[d] = s; s *= t->dims[d]; }
}
static int64_t view_numel(const tpu_host_view_t* v) { return tpu_numel(v->rank, v->sizes); }

/* Byte range [lo, hi) a view touches (empty views touch nothing). */
static void view_range(const tpu_host_view_t* v, uintptr_t* lo, uintptr_t* hi) {
  int64_t mn = 0, mx = 0, es = (int64_t)tpu_dtype_size(v->dtype);
  if (view_numel(v) == 0) { *lo = *hi = 0; return; }
  for (int d = 0; d < v->rank; ++d) {
    int64_t ext = (v->sizes[d] - 1) * v->strides[d];
    if (ext < 0) mn += ext; else mx += ext;
  }
  *lo = (uintptr_t)(v->data + mn * es); *hi = (uintptr_t)(v->data + (mx + 1) * es);
}
static int views_overlap(const tpu_host_view_t* a, const tpu_host_view_t* b) {
  uintptr_t a0, a1, b0, b1;
  view_range(a, &a0, &a1); view_range(b, &b0, &b1);
  return a0 < b1 && b0 < a1;
}
static int views_identical(const tpu_host_view_t* a, const tpu_host_view_t* b) {
  if (a->data != b->data || a->rank != b->rank || a->dtype != b->dtype) return 0;
  for (int d = 0; d < a->rank; ++d)
    if (a->sizes[d] != b->sizes[d] || (a->sizes[d] > 1 && a->strides[d] != b->strides[d])) return 0;
  return 1;
}

/* A copy between two views of one dtype (an output copied from a view of a step's result: slices,
 * transposes) run here on this thread when it is small: dims coalesced, outer dims walked as an
 * odometer, short contiguous rows moved in 16/4-byte pieces. Returns 0 (nothing done) when the
 * dtypes differ or it is large: tpu_host_k_copy splits those over the pool. Bytes move as they are,
 * so the result is tpu_host_k_copy's. Measured against tpu_host_k_copy as it was before 6c9323a
 * (a division per row, memcpy per row); that commit gave tpu_host_k_copy an odometer and inline short
 * rows too, written at the same time: this is now a second copy of the same walk, to be folded into
 * tpu_host_k_copy's serial path once a benchmark shows what the executor's version still gains. */
#define SMALL_COPY_BYTES (256 << 10)
#define COPY_STRIDED_ROW(ES)                                                 \
  do {                                                                       \
    const char* s_ = s;                                                      \
    char* d_ = d;                                                            \
    for (int64_t i = 0; i < inner; ++i, s_ += sin, d_ += din) memcpy(d_, s_, (size_t)(ES)); \
  } while (0)
static int copy_small(const tpu_host_view_t* src, const tpu_host_view_t* dst) {
  if (src->dtype != dst->dtype || src->rank != dst->rank) return 0;
  const int64_t es = (int64_t)tpu_dtype_size(dst->dtype), total = view_numel(dst);
  if (total == 0) return 1;
  if (total * es > SMALL_COPY_BYTES) return 0;
  int64_t sz[TPU_MAX_DIMS], ss[TPU_MAX_DIMS], ds[TPU_MAX_DIMS];
  int r = 0;
  for (int k = 0; k < dst->rank; ++k) {
    int64_t n = dst->sizes[k];
    if (n == 1) continue;
    if (r > 0 && ss[r - 1] == src->strides[k] * n && ds[r - 1] == dst->strides[k] * n) {
      sz[r - 1] *= n; ss[r - 1] = src->strides[k]; ds[r - 1] = dst->strides[k];
      continue;
    }
    sz[r] = n; ss[r] = src->strides[k]; ds[r] = dst->strides[k]; r++;
  }
  const int64_t inner = r ? sz[r - 1] : 1, sin = r ? ss[r - 1] * es : 0, din = r ? ds[r - 1] * es : 0;
  const int64_t rows = total / inner, row_bytes = inner * es;
  const int unit = sin == es && din == es;
  int64_t idx[TPU_MAX_DIMS] = {0};
  const char* s = src->data;
  char* d = dst->data;
  for (int64_t row = 0; row < rows; ++row) {
    if (unit && row_bytes <= 64) {
      int64_t b = 0;
      for (; b + 16 <= row_bytes; b += 16) memcpy(d + b, s + b, 16);
      for (; b + 4 <= row_bytes; b += 4) memcpy(d + b, s + b, 4);
      for (; b < row_bytes; ++b) d[b] = s[b];
    } else if (unit) {
      memcpy(d, s, (size_t)row_bytes);
    } else if (es == 4) {
      COPY_STRIDED_ROW(4);
    } else if (es == 2) {
      COPY_STRIDED_ROW(2);
    } else if (es == 8) {
      COPY_STRIDED_ROW(8);
    } else {
      COPY_STRIDED_ROW(es);
    }
    for (int k = r - 2; k >= 0; --k) { /* odometer over the outer dims */
      s += ss[k] * es; d += ds[k] * es;
      if (++idx[k] < sz[k]) break;
      s -= sz[k] * ss[k] * es; d -= sz[k] * ds[k] * es;
      idx[k] = 0;
    }
  }
  return 1;
}
#undef COPY_STRIDED_ROW

/* A rank-0 leaf of a cluster of rank > 0 (a custom call's scalar operand, see tpu_ir_custom_elementwise) as a
 * broadcast of the cluster's shape. */
static void leaf_bcast(tpu_host_view_t* v, int rank, const int64_t* sizes) {
  if (v->rank != 0 || rank == 0) return;
  v->rank = rank;
  for (int d = 0; d < rank; ++d) { v->sizes[d] = sizes[d]; v->strides[d] = 0; }
}

/* Strides for viewing `src` with new sizes without copying (PyTorch's computeStride
 * rule); returns 0 if impossible. */
static int reshape_strides(const tpu_host_view_t* src, int rank, const int64_t* sizes, int64_t* out) {
  int64_t numel = view_numel(src);
  if (numel == 0) { int64_t s = 1; for (int d = rank - 1; d >= 0; --d) { out[d] = s; s *= sizes[d] ? sizes[d] : 1; } return 1; }
  if (src->rank == 0) { for (int d = 0; d < rank; ++d) out[d] = 1; return 1; } /* one element: any strides */
  int view_d = rank - 1;
  int64_t chunk_base_stride = src->rank ? src->strides[src->rank - 1] : 1;
  int64_t tensor_numel = 1, view_numel_ = 1;
  for (int d = src->rank - 1; d >= 0; --d) {
    tensor_numel *= src->sizes[d];
    if (d == 0 || (src->sizes[d - 1] != 1 && src->strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel_ < tensor_numel || sizes[view_d] == 1)) {
        out[view_d] = view_numel_ * chunk_base_stride;
        view_numel_ *= sizes[view_d];
        view_d--;
      }
      if (view_numel_ != tensor_numel) return 0;
      if (d > 0) { chunk_base_stride = src->strides[d - 1]; tensor_numel = 1; view_numel_ = 1; }
    }
  }
  if (view_d != -1) return 0;
  return 1;
}

/* Temporaries of one run. Blocks come from a small per-thread cache so repeated runs
 * (training steps) reuse warm memory instead of page-faulting fresh allocations. */
typedef struct { void* p; size_t n; int32_t free_at; } blk_t; /* free_at: step after which it is dead */
/* min_free: the smallest free_at among blks (INT32_MAX: none), so the release after each step is one compare
 * unless a block dies there (a long graph keeps dozens of temporaries live; scanning them after each of its
 * thousands of steps was ~2% of a compiled UNet step's device time) */
typedef struct { blk_t* blks; int n, cap; int32_t min_free; } scratch_t;
#define SCRATCH_CACHE_BLOCKS 128 /* a fused graph keeps dozens of temporaries live at once */
#define SCRATCH_CACHE_BYTES ((size_t)512 << 20)
typedef struct { blk_t b[SCRATCH_CACHE_BLOCKS]; int n; size_t total; } scratch_cache_t; /* b sorted by size */
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static void scratch_cache_destroy(void* p) {
  scratch_cache_t* c = p;
  for (int i = 0; i < c->n; ++i) free(c->b[i].p);
  tpu_rt_scratch_add(0, -(int64_t)c->total);
  free(c);
}
static void scratch_key_init(void) { pthread_key_create(&g_scratch_key, scratch_cache_destroy); }
static scratch_cache_t* scratch_cache(void) {
  pthread_once(&g_scratch_once, scratch_key_init);
  scratch_cache_t* c = pthread_getspecific(g_scratch_key);
  if (!c && (c = calloc(1, sizeof(*c)))) pthread_setspecific(g_scratch_key, c);
  return c;
}
static char* scratch_alloc(scratch_t* s, size_t bytes) {
  if (bytes == 0) bytes = 64;
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 8;
    blk_t* p = realloc(s->blks, (size_t)cap * sizeof(blk_t));
    if (!p) return NULL;
    s->blks = p; s->cap = cap;
  }
  scratch_cache_t* c = scratch_cache();
  blk_t got = {NULL, 0, INT32_MAX};
  if (c) { /* smallest cached block that fits without wasting more than 2x (binary search: sorted by size) */
    int a = 0, b = c->n;
    while (a < b) { int mid = a + (b - a) / 2; if (c->b[mid].n < bytes) a = mid + 1; else b = mid; }
    if (a < c->n && c->b[a].n <= 2 * bytes + 65536) {
      got = c->b[a]; c->total -= got.n; got.free_at = INT32_MAX;
      memmove(&c->b[a], &c->b[a + 1], (size_t)(c->n - a - 1) * sizeof(blk_t));
      c->n--;
      tpu_rt_scratch_add(0, -(int64_t)got.n);
    }
  }
  if (!got.p) {
    void* m = NULL;
    if (posix_memalign(&m, 64, bytes)) return NULL;
    got.p = m; got.n = bytes;
  }
  tpu_rt_scratch_add((int64_t)got.n, 0); /* reported by tpu_rt_memory_stats (not allocator memory) */
  s->blks[s->n++] = got;
  return got.p;
}
/* A block allocated for a value dead after step `free_at` (see last_use). */
static char* scratch_alloc_until(scratch_t* s, size_t bytes, int32_t free_at) {
  char* p = scratch_alloc(s, bytes);
  if (p) s->blks[s->n - 1].free_at = free_at;
  if (p && free_at < s->min_free) s->min_free = free_at;
  return p;
}
static void scratch_put(scratch_cache_t* c, blk_t b) {
  tpu_rt_scratch_add(-(int64_t)b.n, 0);
  if (c && b.n <= SCRATCH_CACHE_BYTES) {
    /* over the byte cap: evict the largest blocks; only out of slots: evict the smallest (large
     * blocks are the ones whose fresh pages fault on every use, small ones come back from malloc) */
    while (c->n > 0 && (c->n == SCRATCH_CACHE_BLOCKS || c->total + b.n > SCRATCH_CACHE_BYTES)) {
      const int largest = c->total + b.n > SCRATCH_CACHE_BYTES;
      const int v = largest ? c->n - 1 : 0; /* sorted by size */
      if (!largest && c->b[v].n >= b.n) break; /* every cached block is at least as big: drop b */
      free(c->b[v].p); c->total -= c->b[v].n; tpu_rt_scratch_add(0, -(int64_t)c->b[v].n);
      memmove(&c->b[v], &c->b[v + 1], (size_t)(c->n - v - 1) * sizeof(blk_t));
      c->n--;
    }
    if (c->n == SCRATCH_CACHE_BLOCKS || c->total + b.n > SCRATCH_CACHE_BYTES) { free(b.p); return; }
    int a = 0, hi = c->n; /* insertion point: after the blocks of its size or smaller */
    while (a < hi) { int mid = a + (hi - a) / 2; if (c->b[mid].n <= b.n) a = mid + 1; else hi = mid; }
    memmove(&c->b[a + 1], &c->b[a], (size_t)(c->n - a) * sizeof(blk_t));
    c->b[a] = b; c->n++; c->total += b.n;
    tpu_rt_scratch_add(0, (int64_t)b.n);
  } else {
    free(b.p);
  }
}
/* Returns the blocks dead after step t to the cache (the next allocations reuse them). */
static void scratch_release(scratch_t* s, int32_t t) {
  if (t < s->min_free) return;
  scratch_cache_t* c = NULL;
  int32_t mn = INT32_MAX;
  for (int i = 0; i < s->n;) {
    if (s->blks[i].free_at > t) { if (s->blks[i].free_at < mn) mn = s->blks[i].free_at; ++i; continue; }
    if (!c) c = scratch_cache();
    scratch_put(c, s->blks[i]);
    s->blks[i] = s->blks[--s->n];
  }
  s->min_free = mn;
}
static void scratch_free(scratch_t* s) {
  if (s->n == 0) { free(s->blks); return; } /* (a run that wrote only its outputs: no thread-key look-up) */
  scratch_cache_t* c = scratch_cache();
  for (int i = 0; i < s->n; ++i) scratch_put(c, s->blks[i]);
  free(s->blks);
}

/* ---- fused elementwise cluster */
#define TILE 512 /* one flat tile (run_cluster_flat) and the tiled runner's smallest tile */
/* The tiled runner's tile length per cluster (cluster_tile): the tile buffers a tile touches (member registers
 * other than a directly written root's, leaves loaded or broadcast into a buffer) kept within TILE_BUDGET bytes of
 * L1, so a cluster with few buffers (an in-place a += b or a *= s) pays its per-tile work (leaf offsets, one kernel
 * call per member) over up to TILE_MAX elements instead of 512. One thread, 360K f32 in cache: a += b 52 -> 44 us,
 * a *= s 45 -> 37, a += b s 83 -> 73. Not longer: with operands in DRAM (an optimizer step over 8M floats) tiles of
 * 2048+ made a += b s 2x slower (3.3 -> 6.3 ms) and a *= s 1.1-1.7x; 1024 is as fast as 512 there. */
#define TILE_MAX 1024
#define TILE_BUDGET 16384

/* How a tile reads a leaf: LEAF_DIRECT in place (contiguous over the whole tile and already in its
 * register dtype: f32, f64 or i64), LEAF_BCAST filled once and reused while the tile's source
 * element stays the same (stride 0 over the tile: scalars, row statistics of one-row tiles),
 * LEAF_ROWB one fill per row (stride 0 along rows that differ: row statistics), LEAF_LOAD
 * converted or gathered into the leaf's tile buffer (row by row when the rows do not abut). */
enum { LEAF_LOAD, LEAF_DIRECT, LEAF_BCAST, LEAF_ROWB };

/* A tile is `len` consecutive elements of one row (rows of TILE or more elements), or, for short
 * rows, `krows` whole rows along the second innermost dim (never crossing an outer index), so a
 * row of 64 or 128 elements (softmax, layer norm) does not pay the per-tile work alone. */
typedef struct {
  const tpu_host_exe_t* e;
  int root;
  const tpu_host_view_t* out;
  int nleaf;
  tpu_host_view_t* leaf;     /* views of leaves, coalesced to `rank` dims */
  int rank;                  /* coalesced iteration rank */
  int direct;                /* the root writes its result straight into `out` (LEAF_DIRECT's rule) */
  int64_t tile;              /* tile length (cluster_tile) */
  int64_t sizes[TPU_MAX_DIMS];
  int64_t ostrides[TPU_MAX_DIMS];
  int64_t tiles_per_row, rows;
  int64_t krows, rows2, blocks2; /* rows per tile; size of dim rank-2 (1 if none); its blocks */
  uint8_t lmode[64];
  int bin, bin_op, bin_leaf[2]; /* bin: one-pass bf16 binary tiles (cluster_bin_bf16): OP and its leaves a, b */
  int bin_scalar;               /* -1, or which operand of OP is the broadcast scalar bin_s (its leaf unused) */
  float bin_s;
  int lowp;                     /* one-pass low-precision program lp (cluster_lowp); leaf j a SCALAR if lscalar[j] */
  uint8_t lscalar[TPU_LOWP_MAX_REGS];
  tpu_host_lowp_t lp;
  tpu_status_t err;
} cluster_job_t;

static int dtype_is_register(int dt) { return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_I64; }

/* Tile shape, leaf modes and direct output for views already coalesced to J->rank dims.
 * `alias[j]`: leaf j is the output's own view (an in-place op). It is still read in place: every
 * member before the root has consumed the whole tile of it before the root runs, and the root's
 * loop reads element i of its operands before it writes element i of the output (elementwise, same
 * index), so the copy into a tile buffer that this used to take is not needed (it cost ~40% of a
 * memory-bound in-place update such as an optimizer step). Exception: a CONVERT root copies with
 * memcpy, which must not see its source as its destination. */
static int alias_needs_copy(const cluster_job_t* J) { return J->e->g.ops[J->root].opcode == TPU_IR_CONVERT; }
static void cluster_plan_io(cluster_job_t* J, const uint8_t* alias, int may_direct) {
  int r = J->rank;
  int64_t inner = r ? J->sizes[r - 1] : 1;
  J->rows2 = r >= 2 ? J->sizes[r - 2] : 1;
  J->krows = inner > 0 && inner * 2 <= J->tile ? TPU_MAX(1, TPU_MIN(J->tile / inner, J->rows2)) : 1;
  J->blocks2 = (J->rows2 + J->krows - 1) / J->krows;
  int multi = J->krows > 1;
  int64_t ors = r >= 2 ? J->ostrides[r - 2] : 0;
  J->direct = may_direct && dtype_is_register(J->out->dtype) && (r == 0 || J->ostrides[r - 1] == 1) &&
              (!multi || ors == inner);
  for (int j = 0; j < J->nleaf; ++j) {
    const tpu_host_view_t* L = &J->leaf[j];
    int64_t ls = r ? L->strides[r - 1] : 0, rs = r >= 2 ? L->strides[r - 2] : 0;
    if (ls == 0) J->lmode[j] = (!multi || rs == 0) ? LEAF_BCAST : LEAF_ROWB;
    else J->lmode[j] = (ls == 1 && (!multi || rs == inner) && dtype_is_register(L->dtype) &&
                        !(J->direct && alias[j] && alias_needs_copy(J))) ? LEAF_DIRECT : LEAF_LOAD;
  }
}

/* alias[j]: leaf j overlaps the output. Returns 0 if one overlaps it without being the same view
 * (then the root's result goes through its tile buffer, as every leaf of the tile is read first). */
static int cluster_alias(const tpu_host_view_t* out, int nleaf, const tpu_host_view_t* leaf, uint8_t* alias) {
  int ok = 1;
  for (int j = 0; j < nleaf; ++j) {
    alias[j] = (uint8_t)views_overlap(out, &leaf[j]);
    if (alias[j] && !views_identical(out, &leaf[j])) ok = 0;
  }
  return ok;
}

/* Operand k of a cluster_bin_bf16 OP as a broadcast scalar: an f32 leaf that is one element for the whole run, or a
 * CONVERT to f32 of such a leaf of a floating dtype (`a * 0.5`: an f64 scalar). 1 and *out_s its f32 value, as the
 * tile path computes it; 0 if not. */
static int bin_scalar_operand(const cluster_job_t* J, int v, int k, float* out_s) {
  const tpu_host_exe_t* e = J->e;
  const tpu_ir_graph_t* G = &e->g;
  const int nr = e->nreg[J->root];
  int slot = e->slot[G->ops[v].in_off + k];
  if (slot < nr) {
    const tpu_ir_op_t* cv = &G->ops[tpu_ir_operand(G, v, k)];
    if (cv->opcode != TPU_IR_CONVERT || cv->type.dtype != TPU_DTYPE_F32) return 0;
    slot = e->slot[cv->in_off];
    if (slot < nr) return 0;
  }
  const int j = slot - nr;
  if (j >= J->nleaf || J->lmode[j] != LEAF_BCAST) return 0;
  const tpu_host_view_t* L = &J->leaf[j];
  for (int d = 0; d < J->rank; ++d)
    if (L->strides[d] != 0) return 0;
  if (slot == e->slot[G->ops[v].in_off + k] && L->dtype != TPU_DTYPE_F32) return 0; /* read as f32 directly */
  if (L->dtype != TPU_DTYPE_F32 && L->dtype != TPU_DTYPE_F64 && L->dtype != TPU_DTYPE_BF16) return 0;
  /* exact in double, then one rounding to f32: tile_load's conversion, then (for f64) tile_compute's CONVERT */
  *out_s = (float)tpu_host_load_f64(L->data, L->dtype);
  return 1;
}

/* An eager bf16 binary op's cluster: convert(bf16 leaf a) OP convert(bf16 leaf b) in f32, converted to a bf16
 * output, OP one of T->bin_bf16's: tiles contiguous in a, b and the output run as one bin_bf16 call each instead of
 * two loads, the OP and a store over f32 tile buffers (same bits). One operand may be a broadcast scalar instead
 * (bin_scalar_operand; T->bin_bf16_scalar). Sets J->bin. Not with an output that overlaps a leaf other than as the
 * same view (may_direct == 0). */
static void cluster_bin_bf16(cluster_job_t* J, int may_direct) {
  const tpu_host_exe_t* e = J->e;
  const tpu_ir_graph_t* G = &e->g;
  const int root = J->root, nr = e->nreg[root], nm = e->mem_cnt[root];
  const tpu_ir_op_t* rop = &G->ops[root];
  J->bin = 0;
  if (!may_direct || !tpu_host_tile_ops()->bin_bf16 || J->out->dtype != TPU_DTYPE_BF16 || nm > 4 ||
      rop->opcode != TPU_IR_CONVERT || rop->type.dtype != TPU_DTYPE_BF16 || e->in_dtype[root] != TPU_DTYPE_F32 ||
      e->slot[rop->in_off] >= nr)
    return;
  const int v = tpu_ir_operand(G, root, 0);
  const tpu_ir_op_t* op = &G->ops[v];
  if ((op->opcode != TPU_IR_ADD && op->opcode != TPU_IR_SUB && op->opcode != TPU_IR_MUL && op->opcode != TPU_IR_DIV) ||
      op->n_in != 2 || op->type.dtype != TPU_DTYPE_F32 || e->in_dtype[v] != TPU_DTYPE_F32)
    return;
  J->bin_scalar = -1;
  for (int k = 0; k < 2; ++k) {
    if (J->bin_scalar < 0 && tpu_host_tile_ops()->bin_bf16_scalar && bin_scalar_operand(J, v, k, &J->bin_s)) {
      J->bin_scalar = k;
      continue;
    }
    if (e->slot[op->in_off + k] >= nr) return; /* an f32 leaf read directly */
    const tpu_ir_op_t* cv = &G->ops[tpu_ir_operand(G, v, k)];
    const int ls = e->slot[cv->in_off];
    if (cv->opcode != TPU_IR_CONVERT || cv->type.dtype != TPU_DTYPE_F32 || ls < nr || ls - nr >= J->nleaf) return;
    const int j = ls - nr;
    if (J->leaf[j].dtype != TPU_DTYPE_BF16 || J->lmode[j] != LEAF_LOAD) return;
    J->bin_leaf[k] = j;
  }
  if (J->bin_scalar >= 0) J->bin_leaf[J->bin_scalar] = J->bin_leaf[1 - J->bin_scalar]; /* (not read) */
  J->bin_op = op->opcode;
  J->bin = 1;
}

static int g_lowp = -1; /* -1: TORCH_TPU_LOWP_CLUSTERS not read yet */
static int lowp_on(void) { return tpu_rt_env_switch(&g_lowp, "TORCH_TPU_LOWP_CLUSTERS", 1); }
int tpu_host_set_lowp_clusters(int on) { return tpu_rt_env_switch_set(&g_lowp, "TORCH_TPU_LOWP_CLUSTERS", 1, on); }

/* ---- one-pass low-precision clusters (tpu_host_lowp_t): the cluster's program over registers of blk floats,
 * built once per run, when every leaf is contiguous along the tile in f32 / bf16 / f16 / bool or one value
 * per tile (a scalar: any dtype a CONVERT to float reads, or one of those), every member a float op (or a bool
 * predicate) and the output f32 / bf16 / f16 with some bf16 / f16 leaf or output. */
static int lowp_kernel_op(int opc) { /* float ops run by the tile kernel over the block (compute_f32; not POW's
                                      * whole-call x ** 2 rule) */
  switch (opc) {
    case TPU_IR_EXP: case TPU_IR_EXPM1: case TPU_IR_LOG: case TPU_IR_LOG1P: case TPU_IR_SIN: case TPU_IR_COS:
    case TPU_IR_TAN: case TPU_IR_TANH: case TPU_IR_LOGISTIC: case TPU_IR_FLOOR: case TPU_IR_CEIL:
    case TPU_IR_ROUND_EVEN: case TPU_IR_TRUNC: case TPU_IR_ERF: case TPU_IR_ASIN: case TPU_IR_ACOS: case TPU_IR_ATAN:
    case TPU_IR_SINH: case TPU_IR_COSH: case TPU_IR_ASINH: case TPU_IR_ACOSH: case TPU_IR_ATANH: case TPU_IR_ERFINV:
    case TPU_IR_LGAMMA: case TPU_IR_DIGAMMA: case TPU_IR_SIGN: case TPU_IR_REM: case TPU_IR_FMOD: case TPU_IR_ATAN2:
    case TPU_IR_FLOOR_DIV: return 1;
    default: return 0;
  }
}
static int lowp_native(int opc) {
  switch (opc) {
    case TPU_IR_NEG: return TPU_LOWP_NEG; case TPU_IR_ABS: return TPU_LOWP_ABS; case TPU_IR_SQRT: return TPU_LOWP_SQRT;
    case TPU_IR_RSQRT: return TPU_LOWP_RSQRT; case TPU_IR_RECIPROCAL: return TPU_LOWP_RECIP;
    case TPU_IR_ADD: return TPU_LOWP_ADD; case TPU_IR_SUB: return TPU_LOWP_SUB; case TPU_IR_MUL: return TPU_LOWP_MUL;
    case TPU_IR_DIV: return TPU_LOWP_DIV; case TPU_IR_MAX: return TPU_LOWP_MAX; case TPU_IR_MIN: return TPU_LOWP_MIN;
    case TPU_IR_COMPARE: return TPU_LOWP_CMP; case TPU_IR_SELECT: return TPU_LOWP_SELECT;
    case TPU_IR_CLAMP: return TPU_LOWP_CLAMP;
    default: return -1;
  }
}
static int lowp_dt(int dt) { return dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16; }
static int lowp_val(int dt) { return dt == TPU_DTYPE_F32 || lowp_dt(dt) || dt == TPU_DTYPE_BOOL; }
static void lowp_custom(const void* ctx, const tpu_ir_op_t* op, float* dst, const void* const* in, int64_t n) {
  custom_compute(ctx, op, dst, in, n);
}
/* Whether member i (a CONVERT to f32 that does not round; a bool operand's register holds 1.0 / 0.0) may read its
 * operand's register `a` in place instead of copying it: a leaf's register is never written, a member's only if no
 * later member is allocated to it. The register allocator gives the next member its operand's register, so for a
 * member's value this holds only for the last member (review 2 of session 15: a COPY stays for the others). */
static int lowp_alias_ok(const tpu_host_exe_t* e, const int32_t* mem, int nm, int i, int a, int nr) {
  if (a >= nr) return 1;
  for (int k = i + 1; k < nm; ++k)
    if (e->reg[mem[k]] == a) return 0;
  return 1;
}
/* Builds J->lp (sets J->lowp) for a plan whose output is written straight or as the same view as a leaf
 * (may_direct). Leaf j is LOADed into register nr + j, or is a SCALAR there (J->lscalar[j]). */
static void cluster_lowp(cluster_job_t* J, int may_direct) {
  const tpu_host_exe_t* e = J->e;
  const tpu_ir_graph_t* G = &e->g;
  const int root = J->root, nr = e->nreg[root], nm = e->mem_cnt[root], r = J->rank;
  const int32_t* mem = e->members + e->mem_off[root];
  tpu_host_lowp_t* P = &J->lp;
  J->lowp = 0;
  const int odt = J->out->dtype;
  if (!may_direct || !tpu_host_tile_ops()->lowp_run || !(odt == TPU_DTYPE_F32 || lowp_dt(odt)) ||
      nr + J->nleaf > TPU_LOWP_MAX_REGS || (r && J->ostrides[r - 1] != 1))
    return;
  int any_lowp = lowp_dt(odt), n = 0;
  uint8_t cur[TPU_LOWP_MAX_REGS]; /* the register holding slot s's value (an identity CONVERT of a leaf: the leaf's) */
  for (int s = 0; s < nr + J->nleaf; ++s) cur[s] = (uint8_t)s;
  for (int j = 0; j < J->nleaf; ++j) {
    const tpu_host_view_t* L = &J->leaf[j];
    const int64_t ls = r ? L->strides[r - 1] : 0;
    tpu_host_lowp_ins_t* I = &P->ins[n++];
    *I = (tpu_host_lowp_ins_t){.d = (uint8_t)(nr + j), .a = (uint8_t)j, .dt = (uint8_t)L->dtype};
    any_lowp |= lowp_dt(L->dtype);
    if (J->lmode[j] == LEAF_BCAST || J->lmode[j] == LEAF_ROWB) { I->kind = TPU_LOWP_SCALAR; J->lscalar[j] = 1; }
    else if (ls == 1 && lowp_val(L->dtype)) { I->kind = TPU_LOWP_LOAD; J->lscalar[j] = 0; }
    else return;
  }
  if (!any_lowp) return;
  for (int i = 0; i < nm; ++i) {
    const int v = mem[i], is_root = i == nm - 1;
    const tpu_ir_op_t* op = &G->ops[v];
    const int ot = op->type.dtype, d = e->reg[v];
    int in_s[4] = {0, 0, 0, 0}, in_dt[4] = {0, 0, 0, 0};
    if (op->n_in > 4 || d >= nr || !lowp_val(ot) || n + 2 > TPU_LOWP_MAX_INS) return;
    for (int k = 0; k < op->n_in; ++k) {
      in_s[k] = e->slot[op->in_off + k];
      in_dt[k] = G->ops[tpu_ir_operand(G, v, k)].type.dtype;
      if (in_s[k] >= nr + J->nleaf) return;
      /* another dtype only as a scalar leaf's CONVERT to a float (its value read as that float) */
      if (!lowp_val(in_dt[k]) && !(op->opcode == TPU_IR_CONVERT && in_s[k] >= nr && J->lscalar[in_s[k] - nr] &&
                                   ot != TPU_DTYPE_BOOL))
        return;
    }
    const int fin = in_dt[0] != TPU_DTYPE_BOOL, fout = ot != TPU_DTYPE_BOOL; /* float operand 0 / result */
    tpu_host_lowp_ins_t* I = &P->ins[n];
    *I = (tpu_host_lowp_ins_t){.d = (uint8_t)d, .a = cur[in_s[0]], .b = cur[in_s[op->n_in > 1 ? 1 : 0]],
                               .c = cur[in_s[op->n_in > 2 ? 2 : 0]], .e = cur[in_s[op->n_in > 3 ? 3 : 0]],
                               .dt = (uint8_t)ot, .in_dt = (uint8_t)e->in_dtype[v], .op = op};
    int kind = -1, rounds = fout && lowp_dt(ot);
    if (op->opcode == TPU_IR_CONVERT) {
      if (!fout) kind = fin ? TPU_LOWP_NZ : TPU_LOWP_COPY;
      else if ((!rounds && lowp_alias_ok(e, mem, nm, i, cur[in_s[0]], nr)) || (fin && is_root && odt == ot)) {
        cur[d] = cur[in_s[0]]; /* a value already in f32 (the store rounds a root's) */
        continue;
      } else if (rounds) { /* one ROUND pass from the source (not a COPY, then a ROUND of it) */
        I->kind = TPU_LOWP_ROUND;
        n++;
        cur[d] = (uint8_t)d;
        continue;
      } else kind = TPU_LOWP_COPY;
    } else if (op->opcode == TPU_IR_NOT) {
      if (fin || fout) return;
      kind = TPU_LOWP_NOT;
    } else if (op->opcode == TPU_IR_CUSTOM) {
      if (!tpu_ir_custom_elementwise(G, v)) return;
      kind = TPU_LOWP_CUSTOM;
      rounds = 0; /* as compute_members: custom_compute does not round */
    } else {
      for (int k = 0; k < op->n_in; ++k) /* bool operands: SELECT's predicate only */
        if ((in_dt[k] == TPU_DTYPE_BOOL) != (op->opcode == TPU_IR_SELECT && k == 0)) return;
      if (!fout && op->opcode != TPU_IR_COMPARE) return;
      kind = lowp_native(op->opcode);
      if (kind == TPU_LOWP_CMP) { if (op->i0 < 0 || op->i0 >= TPU_IR_CMP_COUNT) return; I->aux = (uint8_t)op->i0; }
      if (kind < 0) {
        if (!lowp_kernel_op(op->opcode) || op->n_in > 3) return;
        kind = TPU_LOWP_KERNEL;
        rounds = 0; /* tile_compute rounds */
      }
    }
    I->kind = (uint8_t)kind;
    n++;
    cur[d] = (uint8_t)d;
    if (rounds && !(is_root && odt == ot))
      P->ins[n++] = (tpu_host_lowp_ins_t){.kind = TPU_LOWP_ROUND, .d = (uint8_t)d, .a = (uint8_t)d, .dt = (uint8_t)ot};
  }
  const int rv = mem[nm - 1];
  if (G->ops[rv].type.dtype == TPU_DTYPE_BOOL) return;
  /* Only where it measured faster (one thread, [32, 4, 64, 64]): a select / compare / max / min / clamp (masked_fill
   * 1.4-1.7x) or two or more members that compute (chains 1.2-1.5x); a lone add / neg / convert mix was not */
  int work = 0;
  for (int i = 0; i < nm; ++i) {
    const int opc = G->ops[mem[i]].opcode;
    work += opc == TPU_IR_SELECT || opc == TPU_IR_COMPARE || opc == TPU_IR_MAX || opc == TPU_IR_MIN ||
            opc == TPU_IR_CLAMP ? 2 : opc != TPU_IR_CONVERT;
  }
  if (work < 2) return;
  P->n_ins = n;
  P->out_reg = cur[e->reg[rv]];
  P->out_dtype = odt;
  P->blk = 512;
  while (P->blk > 128 && (nr + J->nleaf) * P->blk > TPU_LOWP_REG_FLOATS) P->blk /= 2;
  J->lowp = 1;
}

/* Tile registers: per thread, grown on demand, freed by a key destructor at thread exit. */
typedef struct { size_t cap; int64_t data[]; } tile_buf_t;
static pthread_key_t g_tile_key;
static pthread_once_t g_tile_once = PTHREAD_ONCE_INIT;
static void tile_key_init(void) { pthread_key_create(&g_tile_key, free); }
static int64_t* tile_buffers(size_t n) {
  pthread_once(&g_tile_once, tile_key_init);
  tile_buf_t* b = pthread_getspecific(g_tile_key);
  if (b && b->cap >= n) return b->data;
  free(b);
  b = malloc(sizeof(tile_buf_t) + n * sizeof(int64_t));
  pthread_setspecific(g_tile_key, b);
  if (!b) return NULL;
  b->cap = n;
  return b->data;
}

/* A CONVERT whose result equals its operand's register bits: the same register class, and narrowing to the target
 * changes no value of the source dtype (f32 from bf16 / f16, i64 from narrower integers, a dtype to itself).
 * tile_compute would only memcpy it (autocast's bf16 ops: convert(bf16 leaf) -> op -> convert to bf16). */
static int convert_is_identity(int to, int from) {
  return tpu_host_cls(to) == tpu_host_cls(from) &&
         (to == from || to == TPU_DTYPE_F32 || to == TPU_DTYPE_F64 || to == TPU_DTYPE_I64);
}

/* Copies a cluster's tile skips (same bits): 1 for a member that is an identity CONVERT of a leaf
 * (convert_is_identity): its register's slot points at the leaf's instead (every member has one reader, later, and
 * its register is not reused before that reader runs); 2 for a root CONVERT within one register class whose result
 * is stored into its own dtype (res_ok), not computed: the store reads its operand and narrows it as the CONVERT
 * would have (rounding a value twice to bf16 / f16, or wrapping an integer twice, gives the first result). */
static int member_skip(const tpu_host_exe_t* e, int root, int v, int is_root, int res_ok) {
  const tpu_ir_op_t* op = &e->g.ops[v];
  if (op->opcode != TPU_IR_CONVERT || tpu_host_cls(op->type.dtype) != tpu_host_cls(e->in_dtype[v])) return 0;
  if (is_root) return res_ok ? 2 : 0;
  return e->slot[op->in_off] >= e->nreg[root] && convert_is_identity(op->type.dtype, e->in_dtype[v]);
}

/* The members of the cluster rooted at `root`, in topological order (the root last), over n elements: ptr
 * holds every slot's input (registers, then leaves), each member writes its register at
 * regs + reg * reg_stride (int64 units), the root into root_dst instead when it is not NULL, and its slot is
 * pointed back at its register (member_skip's members point it elsewhere). With out_res (the root's result is
 * stored into the root's dtype), *out_res is where the root's result lies. */
static tpu_status_t compute_members_res(const tpu_host_exe_t* e, const tpu_host_tile_ops_t* T, int root,
                                        const void** ptr, int64_t* regs, size_t reg_stride, void* root_dst,
                                        int64_t n, const void** out_res) {
  const tpu_ir_graph_t* G = &e->g;
  const int32_t* mem = e->members + e->mem_off[root];
  const int nm = e->mem_cnt[root];
  for (int i = 0; i < nm; ++i) {
    const int v = mem[i];
    const tpu_ir_op_t* op = &G->ops[v];
    const void* in[4] = {0};
    for (int k = 0; k < op->n_in && k < 4; ++k) in[k] = ptr[e->slot[op->in_off + k]];
    const int sk = member_skip(e, root, v, i == nm - 1, out_res && !root_dst);
    if (sk == 2) { *out_res = in[0]; return TPU_OK; }
    if (sk == 1) { ptr[e->reg[v]] = in[0]; continue; }
    void* reg = regs + (size_t)e->reg[v] * reg_stride;
    ptr[e->reg[v]] = reg;
    void* dst = (i == nm - 1 && root_dst) ? root_dst : reg;
    if (op->opcode == TPU_IR_CUSTOM) { custom_compute(G, op, dst, in, n); continue; }
    if (T->compute(op, op->type.dtype, dst, e->in_dtype[v], in, n))
      return TPU_ERR(UNSUPPORTED, "host: %s is not supported for %s", tpu_ir_opcode_name(op->opcode),
                     tpu_dtype_name(e->in_dtype[v]));
  }
  if (out_res) *out_res = regs + (size_t)e->reg[root] * reg_stride;
  return TPU_OK;
}
static tpu_status_t compute_members(const tpu_host_exe_t* e, const tpu_host_tile_ops_t* T, int root,
                                    const void** ptr, int64_t* regs, size_t reg_stride, void* root_dst,
                                    int64_t n) {
  return compute_members_res(e, T, root, ptr, regs, reg_stride, root_dst, n, NULL);
}

/* Scalar leaf value as the tile path reads it into a float register (an f64 / integer one: as its CONVERT gives it) */
static float lowp_scalar(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: { float f; memcpy(&f, p, 4); return f; }
    case TPU_DTYPE_BF16: { uint16_t h; memcpy(&h, p, 2); return tpu_bf16_to_f32(h); }
    case TPU_DTYPE_F16: { uint16_t h; memcpy(&h, p, 2); return tpu_f16_to_f32(h); }
    case TPU_DTYPE_F64: return (float)tpu_host_load_f64(p, dt);
    case TPU_DTYPE_BOOL: return *(const uint8_t*)p != 0;
    default: return (float)tpu_host_load_i64(p, dt);
  }
}
/* One tile of a lowp plan: one program call over its kr rows of rlen when they abut in every operand, else one per
 * row (row-broadcast leaves) when rows are long; 0, 1 if the tile path is to run it, -1 on failure. */
static int lowp_tile(const cluster_job_t* J, const tpu_host_tile_ops_t* T, const int64_t* loff, const int64_t* les,
                     const int64_t* lls, const int64_t* lrs, int64_t ooff, int64_t t0, int64_t kr, int64_t rlen) {
  const int r = J->rank;
  const int64_t o_rs = r >= 2 ? J->ostrides[r - 2] : 0, oes = (int64_t)tpu_dtype_size(J->out->dtype);
  int whole = kr == 1 || o_rs == rlen;
  for (int j = 0; j < J->nleaf && whole && kr > 1; ++j) whole = lrs[j] == (J->lscalar[j] ? 0 : rlen);
  if (!whole && rlen < 256) return 1; /* a call per short row ([.., 64] + row [64]: 2x slower): the tile path */
  tpu_host_lowp_io_t io = {.custom = lowp_custom, .ctx = &J->e->g};
  const int64_t rows = whole ? 1 : kr, n = whole ? kr * rlen : rlen;
  for (int64_t k = 0; k < rows; ++k) {
    for (int j = 0; j < J->nleaf; ++j) {
      const char* src = J->leaf[j].data + (loff[j] + t0 * lls[j] + k * lrs[j]) * les[j];
      if (J->lscalar[j]) io.s[j] = lowp_scalar(src, J->leaf[j].dtype);
      else io.leaf[j] = src;
    }
    io.out = J->out->data + (ooff + t0 + k * o_rs) * oes;
    if (T->lowp_run(&J->lp, &io, n)) return -1;
  }
  return 0;
}
static void cluster_worker(void* ctx, int64_t begin, int64_t end) {
  cluster_job_t* J = ctx;
  const tpu_host_exe_t* e = J->e;
  const tpu_ir_graph_t* G = &e->g;
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  int nr = e->nreg[J->root], nslots = nr + J->nleaf;
  /* nslots tile buffers, then the slots' pointers for the current tile */
  const int64_t TL = J->tile;
  int64_t* bufs = tile_buffers((size_t)nslots * (TL + 1));
  if (!bufs) { J->err = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for tile buffers"); return; }
  const void** ptr = (const void**)(bufs + (size_t)nslots * TL);
  int r = J->rank;
  int64_t in_st = r ? J->ostrides[r - 1] : 1, o_rs = r >= 2 ? J->ostrides[r - 2] : 0;
  int64_t inner = r ? J->sizes[r - 1] : 1;
  int ocls = tpu_host_cls(G->ops[J->root].type.dtype);
  int64_t oes = (int64_t)tpu_dtype_size(J->out->dtype);
  const char* bsrc[64];      /* LEAF_BCAST: source element its buffer holds, and how many copies */
  int64_t blen[64];
  int64_t les[64], lls[64], lrs[64]; /* per leaf: element size, strides along the tile and rows */
  int lcls[64];
  for (int i = 0; i < nr; ++i) ptr[i] = bufs + (size_t)i * TL;
  for (int j = 0; j < J->nleaf; ++j) {
    bsrc[j] = NULL; blen[j] = 0;
    les[j] = (int64_t)tpu_dtype_size(J->leaf[j].dtype);
    lcls[j] = tpu_host_cls(J->leaf[j].dtype);
    lls[j] = r ? J->leaf[j].strides[r - 1] : 0;
    lrs[j] = r >= 2 ? J->leaf[j].strides[r - 2] : 0;
  }
  /* tile u = (outer, b2, tr): advanced incrementally (no divisions per tile); outer's index over dims
   * [0, rank - 2) and its offsets (obase, lbase) kept as an odometer (short rows: a division per dim and tile
   * was a sixth of a rotary embedding's tiles of 64 elements) */
  int64_t tr = begin % J->tiles_per_row, q0 = begin / J->tiles_per_row;
  int64_t b2 = q0 % J->blocks2, outer = q0 / J->blocks2;
  int64_t oidx[TPU_MAX_DIMS], obase = 0, lbase[64];
  for (int j = 0; j < J->nleaf; ++j) lbase[j] = 0;
  for (int64_t d = r - 3, rem = outer; d >= 0; --d) {
    oidx[d] = rem % J->sizes[d]; rem /= J->sizes[d];
    obase += oidx[d] * J->ostrides[d];
    for (int j = 0; j < J->nleaf; ++j) lbase[j] += oidx[d] * J->leaf[j].strides[d];
  }
  for (int64_t u = begin; u < end; ++u) {
    int64_t t0 = tr * TL, i2 = b2 * J->krows;
    int64_t kr = TPU_MIN(J->krows, J->rows2 - i2);           /* rows in this tile */
    int64_t rlen = TPU_MIN(TL, inner - t0), len = kr * rlen; /* per row, in all */
    /* offsets of this tile's first element for the output and each leaf */
    int64_t ooff = obase + (r >= 2 ? i2 * o_rs : 0);
    int64_t loff[64];
    for (int j = 0; j < J->nleaf; ++j) loff[j] = lbase[j] + i2 * lrs[j];
    if (J->lowp) {
      const int lr = lowp_tile(J, T, loff, les, lls, lrs, ooff, t0, kr, rlen);
      if (lr < 0) {
        if (!J->err) J->err = TPU_ERR(INTERNAL, "host: low-precision cluster program failed");
        return;
      }
      if (lr == 0) goto next_tile;
    }
    if (J->bin) { /* cluster_bin_bf16: one pass when a, b and the output are contiguous over the tile */
      const int ja = J->bin_leaf[0], jb = J->bin_leaf[1];
      uint16_t* po = (uint16_t*)(void*)(J->out->data + (ooff + t0) * 2);
      const uint16_t* pa = (const uint16_t*)(const void*)(J->leaf[ja].data + (loff[ja] + t0) * 2);
      const uint16_t* pb = (const uint16_t*)(const void*)(J->leaf[jb].data + (loff[jb] + t0) * 2);
      if (lls[ja] == 1 && lls[jb] == 1 && in_st == 1 &&
          (kr == 1 || (lrs[ja] == rlen && lrs[jb] == rlen && o_rs == rlen)) &&
          (J->bin_scalar < 0 ? T->bin_bf16(J->bin_op, po, pa, pb, len)
                             : T->bin_bf16_scalar(J->bin_op, po, J->bin_scalar ? pa : pb, J->bin_s, J->bin_scalar == 0, len)) == 0)
        goto next_tile;
    }
    for (int j = 0; j < J->nleaf; ++j) {
      const tpu_host_view_t* L = &J->leaf[j];
      int64_t ls = lls[j], rs = lrs[j], es = les[j];
      const char* src = L->data + (loff[j] + t0 * ls) * es;
      int64_t* buf = bufs + (size_t)(nr + j) * TL;
      int cls = lcls[j];
      ptr[nr + j] = buf;
      switch (J->lmode[j]) {
        case LEAF_DIRECT: ptr[nr + j] = src; break;
        case LEAF_BCAST:
          if (src != bsrc[j] || len > blen[j]) {
            T->load(buf, cls, src, L->dtype, 0, len);
            bsrc[j] = src; blen[j] = len;
          }
          break;
        default: /* LEAF_ROWB, LEAF_LOAD: one load per row unless the rows abut */
          if (kr == 1 || rs == ls * rlen) T->load(buf, cls, src, L->dtype, ls, len);
          else if (rlen <= 16 && L->dtype == TPU_DTYPE_F32 && cls == TPU_HOST_CLS_F32 && (ls == 1 || ls == 0)) {
            /* short f32 rows (a rotary embedding's transposed heads of 8): copied here, not one call each */
            float* o = (float*)(void*)buf;
            const float* sp = (const float*)(const void*)src;
            for (int64_t k = 0; k < kr; ++k, o += rlen, sp += rs)
              if (ls) for (int64_t i = 0; i < rlen; ++i) o[i] = sp[i];
              else for (int64_t i = 0; i < rlen; ++i) o[i] = sp[0];
          } else
            for (int64_t k = 0; k < kr; ++k)
              T->load((char*)buf + k * rlen * (cls == TPU_HOST_CLS_F32 ? 4 : 8), cls, src + k * rs * es, L->dtype, ls,
                      rlen);
      }
    }
    char* odst = J->out->data + (ooff + t0 * in_st) * oes;
    const void* res = NULL;
    tpu_status_t cst = compute_members_res(e, T, J->root, ptr, bufs, (size_t)TL, J->direct ? (void*)odst : NULL,
                                           len, J->out->dtype == G->ops[J->root].type.dtype ? &res : NULL);
    if (cst) {
      if (!J->err) J->err = cst;
      else tpu_status_free(cst);
      return;
    }
    if (!J->direct) {
      const char* rb = res ? (const char*)res : (const char*)(bufs + (size_t)e->reg[J->root] * TL);
      if (kr == 1 || o_rs == in_st * rlen) T->store(odst, J->out->dtype, in_st, rb, ocls, len);
      else
        for (int64_t k = 0; k < kr; ++k)
          T->store(odst + k * o_rs * oes, J->out->dtype, in_st, rb + k * rlen * (ocls == TPU_HOST_CLS_F32 ? 4 : 8),
                   ocls, rlen);
    }
  next_tile:
    if (++tr == J->tiles_per_row) {
      tr = 0;
      if (++b2 == J->blocks2) {
        b2 = 0;
        for (int d = r - 3; d >= 0; --d) { /* the odometer's next outer index */
          obase += J->ostrides[d];
          for (int j = 0; j < J->nleaf; ++j) lbase[j] += J->leaf[j].strides[d];
          if (++oidx[d] < J->sizes[d]) break;
          obase -= J->sizes[d] * J->ostrides[d];
          for (int j = 0; j < J->nleaf; ++j) lbase[j] -= J->sizes[d] * J->leaf[j].strides[d];
          oidx[d] = 0;
        }
      }
    }
  }
}

/* The tile buffers a tile of plan J touches, and the tile length for that many (see TILE_BUDGET). */
static int cluster_nbuf(const cluster_job_t* J) {
  const tpu_host_exe_t* e = J->e;
  const int32_t* mem = e->members + e->mem_off[J->root];
  const int nm = e->mem_cnt[J->root], res_ok = !J->direct && J->out->dtype == e->g.ops[J->root].type.dtype;
  uint64_t seen[4] = {0}; /* registers written (member_skip's members write none; a direct root none) */
  int nbuf = 0;
  for (int i = 0; i < nm - J->direct; ++i) {
    const int v = mem[i], r = e->reg[v];
    if (member_skip(e, J->root, v, i == nm - 1, res_ok)) continue;
    if (r >= 256) { ++nbuf; continue; }
    nbuf += !(seen[r >> 6] >> (r & 63) & 1);
    seen[r >> 6] |= 1ull << (r & 63);
  }
  for (int j = 0; j < J->nleaf; ++j) nbuf += J->lmode[j] != LEAF_DIRECT;
  return nbuf;
}
static int64_t cluster_tile(const cluster_job_t* J, int nbuf) {
  const int64_t es = tpu_host_cls(J->e->g.ops[J->root].type.dtype) == TPU_HOST_CLS_F32 ? 4 : 8;
  int64_t t = TILE_MAX;
  while (t > TILE && (int64_t)nbuf * t * es > TILE_BUDGET) t /= 2;
  return t;
}

/* Runs the cluster rooted at `root` with the given leaf views (same shape as out). */
/* Small clusters (one tile) whose output is contiguous and whose leaves are each contiguous over
 * the same shape or a broadcast scalar run as one flat tile: cluster_worker's work for that one tile
 * (same leaf modes, same kernels, same bits) done here directly, without dimension sorting,
 * coalescing, pool dispatch or a cluster_job_t; leaves are passed by pointer (no view copies), and
 * the per-thread tile buffers are only fetched when some slot needs one (a single op over leaves in
 * its register dtype writing its output in place needs none: an eager add is one kernel call).
 * These costs were most of a tiny eager op's executor time. 0 if not applicable. */
static int run_cluster_flat(const tpu_host_exe_t* e, int root, const tpu_host_view_t* const* lp,
                            const tpu_host_view_t* out, tpu_status_t* out_st) {
  const tpu_ir_graph_t* G = &e->g;
  const int nleaf = e->leaf_cnt[root], nr = e->nreg[root], nm = e->mem_cnt[root];
  int64_t n = 1;
  for (int d = out->rank - 1; d >= 0; --d) {
    if (out->sizes[d] != 1 && out->strides[d] != n) return 0;
    n *= out->sizes[d];
  }
  if (n == 0 || n > TILE || nleaf > 64 || nr + nleaf > 128) return 0;
  uint8_t bc[64];
  for (int j = 0; j < nleaf; ++j) {
    const tpu_host_view_t* L = lp[j];
    int contig = L->rank == out->rank, scalar = 1;
    for (int d = 0; d < L->rank; ++d) {
      if (L->sizes[d] != 1 && L->strides[d] != 0) scalar = 0;
      if (contig && (L->sizes[d] != out->sizes[d] || (L->sizes[d] != 1 && L->strides[d] != out->strides[d])))
        contig = 0;
    }
    if (!contig && !scalar) return 0;
    bc[j] = (uint8_t)scalar; /* a broadcast leaf (LEAF_BCAST), else contiguous like out */
  }
  /* cluster_alias and cluster_plan_io for this one contiguous tile, from byte ranges */
  const uintptr_t o0 = (uintptr_t)out->data, o1 = o0 + (uintptr_t)(n * (int64_t)tpu_dtype_size(out->dtype));
  uint8_t alias[64];
  int may_direct = 1;
  for (int j = 0; j < nleaf; ++j) {
    const tpu_host_view_t* L = lp[j];
    uintptr_t l0 = (uintptr_t)L->data, l1 = l0 + (uintptr_t)((bc[j] ? 1 : n) * (int64_t)tpu_dtype_size(L->dtype));
    alias[j] = l0 < o1 && o0 < l1;
    if (alias[j] && !(l0 == o0 && L->dtype == out->dtype && (!bc[j] || n == 1))) may_direct = 0;
  }
  const int direct = may_direct && dtype_is_register(out->dtype);
  const int conv = G->ops[root].opcode == TPU_IR_CONVERT; /* alias_needs_copy */
  const void* ptr[128];
  int need = nm > 1 || !direct; /* tile buffers: registers of members, or of the root when stored */
  for (int j = 0; j < nleaf; ++j) {
    const tpu_host_view_t* L = lp[j];
    if (!bc[j] && dtype_is_register(L->dtype) && !(direct && alias[j] && conv)) ptr[nr + j] = L->data; /* DIRECT */
    else { ptr[nr + j] = NULL; need = 1; }
  }
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  int64_t* bufs = NULL;
  if (need) {
    bufs = tile_buffers((size_t)(nr + nleaf) * (TILE + 1));
    if (!bufs) { *out_st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for tile buffers"); return 1; }
    for (int i = 0; i < nr; ++i) ptr[i] = bufs + (size_t)i * TILE;
    for (int j = 0; j < nleaf; ++j) {
      if (ptr[nr + j]) continue;
      const tpu_host_view_t* L = lp[j];
      int64_t* buf = bufs + (size_t)(nr + j) * TILE;
      T->load(buf, tpu_host_cls(L->dtype), L->data, L->dtype, bc[j] ? 0 : 1, n); /* BCAST or LOAD */
      ptr[nr + j] = buf;
    }
  }
  const void* res = NULL;
  *out_st = compute_members_res(e, T, root, ptr, bufs, TILE, direct ? out->data : NULL, n,
                                out->dtype == G->ops[root].type.dtype ? &res : NULL);
  if (*out_st) return 1;
  if (!direct)
    T->store(out->data, out->dtype, 1, res ? res : bufs + (size_t)e->reg[root] * TILE,
             tpu_host_cls(G->ops[root].type.dtype), n);
  *out_st = TPU_OK;
  return 1;
}

/* The general tiled runner (leaf views are rewritten to the coalesced iteration dims). */
static tpu_status_t run_cluster_tiled(const tpu_host_exe_t* e, int root, tpu_host_view_t* leaf,
                                      const tpu_host_view_t* out) {
  int nleaf = e->leaf_cnt[root];
  /* Iteration order: dims sorted by |output stride| descending, size-1 dims dropped,
   * then adjacent dims coalesced when every operand is contiguous across them. */
  int R = out->rank, perm[TPU_MAX_DIMS], r = 0;
  for (int d = 0; d < R; ++d) if (out->sizes[d] != 1) perm[r++] = d;
  for (int i = 1; i < r; ++i)
    for (int j = i; j > 0 && llabs(out->strides[perm[j - 1]]) < llabs(out->strides[perm[j]]); --j) {
      int t = perm[j]; perm[j] = perm[j - 1]; perm[j - 1] = t;
    }
  cluster_job_t J = {.e = e, .root = root, .out = out, .nleaf = nleaf, .leaf = leaf};
  uint8_t alias[64];
  int may_direct = cluster_alias(out, nleaf, leaf, alias);
  int64_t ls[64][TPU_MAX_DIMS];
  int cr = 0;
  for (int i = 0; i < r; ++i) {
    int d = perm[i];
    if (cr > 0) {
      int ok = J.ostrides[cr - 1] == out->strides[d] * out->sizes[d];
      for (int j = 0; j < nleaf && ok; ++j) ok = ls[j][cr - 1] == leaf[j].strides[d] * out->sizes[d];
      if (ok) {
        J.sizes[cr - 1] *= out->sizes[d]; J.ostrides[cr - 1] = out->strides[d];
        for (int j = 0; j < nleaf; ++j) ls[j][cr - 1] = leaf[j].strides[d];
        continue;
      }
    }
    J.sizes[cr] = out->sizes[d]; J.ostrides[cr] = out->strides[d];
    for (int j = 0; j < nleaf; ++j) ls[j][cr] = leaf[j].strides[d];
    cr++;
  }
  for (int j = 0; j < nleaf; ++j) {
    leaf[j].rank = cr;
    for (int d = 0; d < cr; ++d) leaf[j].strides[d] = ls[j][d];
  }
  J.rank = cr;
  J.tile = TILE;
  cluster_plan_io(&J, alias, may_direct);
  const int nbuf = cluster_nbuf(&J);
  const int64_t tile = cluster_tile(&J, nbuf);
  if (tile != J.tile) { /* a longer tile: kept unless it spans rows that need more buffers (short rows) */
    J.tile = tile;
    cluster_plan_io(&J, alias, may_direct);
    if (cluster_nbuf(&J) > nbuf) { J.tile = TILE; cluster_plan_io(&J, alias, may_direct); }
  }
  int64_t inner = cr ? J.sizes[cr - 1] : 1, total = 1;
  for (int d = 0; d < cr; ++d) total *= J.sizes[d];
  if (total == 0 || view_numel(out) == 0) return TPU_OK;
  cluster_bin_bf16(&J, may_direct); /* (after the empty check: it reads a scalar operand's element) */
  if (!J.bin && lowp_on()) cluster_lowp(&J, may_direct); /* (bin_bf16 keeps its operands in registers: faster) */
  J.tiles_per_row = (inner + J.tile - 1) / J.tile;
  J.rows = total / inner;
  int64_t units = J.rows / J.rows2 * J.blocks2 * J.tiles_per_row;
  /* ~32K elements per task so tiny ops stay on the calling thread */
  int64_t per_unit = TPU_MIN(inner, J.tile) * J.krows;
  tpu_pool_parallel_for(units, TPU_MAX(1, CLUSTER_GRAIN / per_unit), cluster_worker, &J);
  return J.err;
}

/* A lone CONVERT between f32 and bf16 (or f16 -> f32) over one contiguous layout: the CPU's
 * tile store / load conversion straight from the input to the output, in 32K-element chunks over
 * the pool, instead of a register tile per 512 elements (load, round in f32, store). Same bits:
 * rounding a value that is already a bf16 again changes nothing, NaN payloads included
 * (common.h's tpu_f32_to_bf16). Autocast's activation casts (minGPT bf16: ~70 a step of 262K-524K
 * elements) were ~2.4x PyTorch CPU's time through the tile path. 0 if not applicable. */
typedef struct {
  const tpu_host_tile_ops_t* T;
  const char* src; char* dst;
  int from, to;
} convert_job_t;
enum { CONVERT_CHUNK = CLUSTER_GRAIN };
static void convert_worker(void* ctx, int64_t c0, int64_t c1) {
  const convert_job_t* J = ctx;
  const int64_t n = c1 - c0, fs = tpu_dtype_size(J->from), ts = tpu_dtype_size(J->to);
  if (J->from == TPU_DTYPE_F32) J->T->store(J->dst + c0 * ts, J->to, 1, J->src + c0 * fs, TPU_HOST_CLS_F32, n);
  else J->T->load(J->dst + c0 * ts, TPU_HOST_CLS_F32, J->src + c0 * fs, J->from, 1, n);
}
static int run_convert_direct(const tpu_host_exe_t* e, int root, const tpu_host_view_t* L,
                              const tpu_host_view_t* out) {
  const int from = L->dtype, to = out->dtype;
  if (e->mem_cnt[root] != 1 || e->leaf_cnt[root] != 1 || e->g.ops[root].opcode != TPU_IR_CONVERT ||
      e->g.ops[root].type.dtype != to ||
      !((from == TPU_DTYPE_F32 && to == TPU_DTYPE_BF16) ||
        ((from == TPU_DTYPE_BF16 || from == TPU_DTYPE_F16) && to == TPU_DTYPE_F32)) ||
      L->rank != out->rank)
    return 0;
  int64_t n = 1;
  for (int d = out->rank - 1; d >= 0; --d) {
    if (L->sizes[d] != out->sizes[d]) return 0;
    if (out->sizes[d] != 1 && (out->strides[d] != n || L->strides[d] != n)) return 0;
    n *= out->sizes[d];
  }
  if (n < TILE) return 0; /* one tile: run_cluster_flat */
  const uintptr_t o0 = (uintptr_t)out->data, o1 = o0 + (uintptr_t)n * tpu_dtype_size(to);
  const uintptr_t l0 = (uintptr_t)L->data, l1 = l0 + (uintptr_t)n * tpu_dtype_size(from);
  if (l0 < o1 && o0 < l1) return 0; /* overlapping (other element sizes): the tiled path's copies */
  convert_job_t J = {.T = tpu_host_tile_ops(), .src = L->data, .dst = out->data, .from = from, .to = to};
  tpu_pool_parallel_for(n, CONVERT_CHUNK, convert_worker, &J);
  return 1;
}

/* The cluster over leaf views lp[0..nleaf) (nleaf <= 64): one flat tile, a lone direct convert, or tiled. */
static tpu_status_t run_cluster_views(const tpu_host_exe_t* e, int root, const tpu_host_view_t* const* lp,
                                      const tpu_host_view_t* out) {
  const int nleaf = e->leaf_cnt[root];
  tpu_status_t st;
  if (run_cluster_flat(e, root, lp, out, &st)) return st;
  if (nleaf == 1 && run_convert_direct(e, root, lp[0], out)) return TPU_OK;
  tpu_host_view_t leaf[64]; /* run_cluster_tiled rewrites them to its iteration dims */
  for (int j = 0; j < nleaf; ++j) { leaf[j] = *lp[j]; leaf_bcast(&leaf[j], out->rank, out->sizes); }
  return run_cluster_tiled(e, root, leaf, out);
}

static tpu_status_t run_cluster_leaves(const tpu_host_exe_t* e, int root, tpu_host_view_t* leaf,
                                       const tpu_host_view_t* out) {
  int nleaf = e->leaf_cnt[root];
  if (nleaf > 64) return run_cluster_tiled(e, root, leaf, out);
  const tpu_host_view_t* lp[64];
  lp[0] = NULL; /* (read only below nleaf; this quiets -Wmaybe-uninitialized for nleaf == 0) */
  for (int j = 0; j < nleaf; ++j) lp[j] = &leaf[j];
  return run_cluster_views(e, root, lp, out);
}

/* A rank-0 cluster (scalar arithmetic: a compiled optimizer's per-parameter bias corrections, ~450 per UNet
 * step) evaluated with the same tile kernels on one element: every leaf loaded into its register slot, the members
 * computed in order, the root stored, as cluster_worker does for a one-element tile, without its set-up (leaf
 * modes, tile geometry, per-thread buffers). Every leaf is read before the result is stored, so an in-place update
 * (the output is a leaf) is safe. 0 if not applicable (rank > 0, or more slots than the stack buffers hold). */
static int run_cluster_scalar(const tpu_host_exe_t* e, int root, const val_t* vals, const tpu_host_view_t* out,
                              tpu_status_t* out_st) {
  const tpu_ir_graph_t* G = &e->g;
  const int nleaf = e->leaf_cnt[root], nr = e->nreg[root];
  if (G->ops[root].type.rank != 0 || nr + nleaf > SB_SLOTS) return 0;
  const int32_t* lv = e->leaves + e->leaf_off[root];
  for (int j = 0; j < nleaf; ++j)
    if (view_numel(&vals[lv[j]].v) != 1) return 0;
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  int64_t buf[SB_SLOTS][8]; /* one element per slot; 64 bytes each, as a vector kernel might touch */
  const void* ptr[SB_SLOTS];
  for (int i = 0; i < nr; ++i) ptr[i] = buf[i];
  for (int j = 0; j < nleaf; ++j) {
    const tpu_host_view_t* L = &vals[lv[j]].v;
    T->load(buf[nr + j], tpu_host_cls(L->dtype), L->data, L->dtype, 0, 1);
    ptr[nr + j] = buf[nr + j];
  }
  *out_st = compute_members(e, T, root, ptr, &buf[0][0], 8, NULL, 1);
  if (*out_st) return 1;
  T->store(out->data, out->dtype, 1, buf[e->reg[root]], tpu_host_cls(G->ops[root].type.dtype), 1);
  *out_st = TPU_OK;
  return 1;
}

static tpu_status_t run_cluster(const tpu_host_exe_t* e, int root, val_t* vals, const tpu_host_view_t* out) {
  int nleaf = e->leaf_cnt[root];
  if (nleaf > 64) return TPU_ERR(UNSUPPORTED, "host: elementwise cluster with %d inputs", nleaf);
  tpu_status_t sst;
  if (run_cluster_scalar(e, root, vals, out, &sst)) return sst;
  const int32_t* lv = e->leaves + e->leaf_off[root];
  const tpu_host_view_t* lp[64];
  lp[0] = NULL; /* (read only below nleaf; this quiets -Wmaybe-uninitialized for nleaf == 0) */
  for (int j = 0; j < nleaf; ++j) lp[j] = &vals[lv[j]].v;
  return run_cluster_views(e, root, lp, out);
}

/* ---- GEMM epilogue: the cluster rooted at r runs on each block of the DOT's C as the GEMM finishes it
 * (still in cache), instead of one more pass over the whole product. The cluster's views (its shape)
 * are re-expressed in the DOT's shape [B..., M, N] (reshape strides; if some view cannot be, the
 * two run one after the other as unfused); a block is then the same sub-box of every view. */
typedef struct {
  const tpu_host_exe_t* e;
  int root, nleaf, nb;             /* nb: batch dims of the DOT */
  tpu_host_view_t leaf[64], out;   /* in the DOT's shape */
  uint8_t is_c[64];                /* leaf j is the product itself: read from the GEMM's block */
  pthread_mutex_t mu;
  _Atomic int failed;
  tpu_status_t err;
} dot_epi_t;

static void dot_epi_sub(const tpu_host_view_t* v, int nb, const int64_t* bidx, int64_t i0, int64_t j0, int64_t mb,
                        int64_t nbk, tpu_host_view_t* out) {
  *out = *v;
  int64_t off = i0 * v->strides[nb] + j0 * v->strides[nb + 1];
  for (int d = 0; d < nb; ++d) { off += bidx[d] * v->strides[d]; out->sizes[d] = 1; }
  out->sizes[nb] = mb; out->sizes[nb + 1] = nbk;
  out->data = v->data + off * (int64_t)tpu_dtype_size(v->dtype);
}

static void dot_epi_block(void* ctx, int64_t t, int64_t i0, int64_t j0, int64_t mb, int64_t nbk, const float* blk,
                          int64_t rs, int64_t cs) {
  dot_epi_t* D = ctx;
  if (atomic_load_explicit(&D->failed, memory_order_relaxed)) return;
  int64_t bidx[TPU_MAX_DIMS];
  for (int d = D->nb - 1; d >= 0; --d) { bidx[d] = t % D->out.sizes[d]; t /= D->out.sizes[d]; }
  tpu_host_view_t leaf[64], out;
  for (int j = 0; j < D->nleaf; ++j) {
    dot_epi_sub(&D->leaf[j], D->nb, bidx, i0, j0, mb, nbk, &leaf[j]);
    if (D->is_c[j]) { leaf[j].data = (char*)blk; leaf[j].strides[D->nb] = rs; leaf[j].strides[D->nb + 1] = cs; }
  }
  dot_epi_sub(&D->out, D->nb, bidx, i0, j0, mb, nbk, &out);
  tpu_status_t st = run_cluster_leaves(D->e, D->root, leaf, &out);
  if (st) {
    pthread_mutex_lock(&D->mu);
    if (!D->err) D->err = st;
    else tpu_status_free(st);
    atomic_store(&D->failed, 1);
    pthread_mutex_unlock(&D->mu);
  }
}

/* Views `v` (the cluster's shape) as the DOT's shape `t`; 0 if that needs a copy. */
static int dot_epi_view(const tpu_host_view_t* v, const tpu_ir_type_t* t, tpu_host_view_t* out) {
  *out = *v;
  out->rank = t->rank;
  for (int d = 0; d < t->rank; ++d) out->sizes[d] = t->dims[d];
  return reshape_strides(v, t->rank, t->dims, out->strides);
}

/* The stride s with which a view's batch dims [0, nb) are at t * s for their row-major index t (0 when every
 * batch dim has size 1), or 0 with *ok = 0 when there is none. */
static int64_t epi_batch_stride(const tpu_host_view_t* v, int nb, int* ok) {
  int64_t s = 0, span = 1;
  for (int d = nb - 1; d >= 0; --d) {
    if (v->sizes[d] == 1) continue;
    if (span == 1) s = v->strides[d];
    else if (v->strides[d] != s * span) *ok = 0;
    span *= v->sizes[d];
  }
  return s;
}

/* A cluster that only rounds the product to bf16, with a bias row added first (autocast's linear layers:
 * convert(add(broadcast(bias f32), dot)); bmms: convert(dot)) is the GEMM's own bf16 store
 * (tpu_host_gemm_epi_t.out_bf16): the same operations per element, without the cluster's tile passes.
 * Sets epi's direct-store fields when it applies. */
static void dot_epi_direct(const tpu_host_exe_t* e, int r, const dot_epi_t* D, tpu_host_gemm_epi_t* epi) {
  const tpu_ir_graph_t* G = &e->g;
  const int32_t* mem = e->members + e->mem_off[r];
  const int cnt = e->mem_cnt[r], nb = D->nb;
  const int32_t* lv = e->leaves + e->leaf_off[r];
  if ((cnt != 1 && cnt != 2) || G->ops[r].opcode != TPU_IR_CONVERT || G->ops[r].type.dtype != TPU_DTYPE_BF16 ||
      D->out.dtype != TPU_DTYPE_BF16 || mem[cnt - 1] != r)
    return;
  int jc = -1, jb = -1; /* leaf indices of the product and of the bias */
  for (int j = 0; j < D->nleaf; ++j) if (D->is_c[j]) jc = j;
  if (jc < 0) return;
  int src = tpu_ir_operand(G, r, 0);
  if (cnt == 2) {
    const int a = mem[0];
    if (src != a || G->ops[a].opcode != TPU_IR_ADD || G->ops[a].type.dtype != TPU_DTYPE_F32 || D->nleaf != 2) return;
    if (tpu_ir_operand(G, a, 1) != lv[jc]) return;
    for (int j = 0; j < D->nleaf; ++j) if (lv[j] == tpu_ir_operand(G, a, 0) && j != jc) jb = j;
    if (jb < 0) return;
    const tpu_host_view_t* bv = &D->leaf[jb];
    if (bv->dtype != TPU_DTYPE_F32 || bv->strides[nb] != 0) return; /* one row, the same for every row */
  } else if (D->nleaf != 1 || src != lv[jc]) {
    return;
  }
  int ok = 1;
  const int64_t out_bs = epi_batch_stride(&D->out, nb, &ok);
  const int64_t bias_bs = jb >= 0 ? epi_batch_stride(&D->leaf[jb], nb, &ok) : 0;
  if (!ok) return;
  epi->out_bf16 = (uint16_t*)D->out.data;
  epi->out_bs = out_bs, epi->out_rs = D->out.strides[nb], epi->out_cs = D->out.strides[nb + 1];
  if (jb >= 0) {
    epi->bias = (const float*)D->leaf[jb].data;
    epi->bias_bs = bias_bs, epi->bias_cs = D->leaf[jb].strides[nb + 1];
  }
}

#define EPI_MANY_MATS 16  /* a batched DOT of at least this many matrices of at most EPI_SMALL_MAT elements */
#define EPI_SMALL_MAT 4096 /* runs its epilogue cluster once, after the product (see run_dot_epilogue) */
static tpu_status_t run_dot_epilogue(const tpu_host_exe_t* e, int d, int r, val_t* vals,
                                     const tpu_host_view_t* out) {
  const tpu_ir_graph_t* G = &e->g;
  const tpu_ir_op_t* op = &G->ops[d];
  const tpu_host_view_t* a = &vals[tpu_ir_operand(G, d, 0)].v;
  const tpu_host_view_t* b = &vals[tpu_ir_operand(G, d, 1)].v;
  const tpu_host_view_t* c = &vals[d].v;
  int nleaf = e->leaf_cnt[r];
  const int32_t* lv = e->leaves + e->leaf_off[r];
  dot_epi_t* D = malloc(sizeof(*D)); /* ~40 KB: not on a pool thread's stack */
  if (!D) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory");
  D->e = e; D->root = r; D->nleaf = nleaf; D->nb = (int)op->i0; D->err = TPU_OK;
  atomic_init(&D->failed, 0);
  int ok = nleaf <= 64 && dot_epi_view(out, &op->type, &D->out);
  for (int j = 0; j < nleaf && ok; ++j) {
    tpu_host_view_t lj = vals[lv[j]].v;
    leaf_bcast(&lj, op->type.rank, op->type.dims); /* (all strides 0: any shape of the same numel) */
    ok = dot_epi_view(&lj, &op->type, &D->leaf[j]);
    int u = lv[j];
    while (G->ops[u].opcode == TPU_IR_RESHAPE) u = tpu_ir_operand(G, u, 0);
    D->is_c[j] = u == d;
  }
  tpu_status_t st;
  tpu_host_gemm_epi_t epi = {.fn = dot_epi_block, .ctx = D, .t0 = 0, .c_unused = 1}; /* only the cluster reads the product */
  if (ok) dot_epi_direct(e, r, D, &epi);
  /* Many small matrices (attention's 64 x (16 x 16) scores): a cluster call per matrix costs more than one pass
   * of the cluster over the whole product (minGPT's scale + mask: 32 -> 23 us, one thread); a direct bf16
   * store stays fused (no cluster call, and no f32 product to write). */
  int64_t nmat = 1;
  for (int q = 0; q < D->nb; ++q) nmat *= op->type.dims[q];
  if (!epi.out_bf16 && nmat >= EPI_MANY_MATS && op->type.dims[D->nb] * op->type.dims[D->nb + 1] <= EPI_SMALL_MAT) ok = 0;
  if (!ok) { /* unfused: the product, then the cluster over it */
    free(D);
    TPU_RETURN_IF_ERROR(tpu_host_k_dot(op, a, b, c));
    return run_cluster(e, r, vals, out);
  }
  pthread_mutex_init(&D->mu, NULL);
  st = tpu_host_k_dot_epi(op, a, b, c, &epi);
  if (st == TPU_OK) st = D->err;
  else if (D->err) tpu_status_free(D->err);
  pthread_mutex_destroy(&D->mu);
  free(D);
  return st;
}

/* reduce(cluster) without materializing the cluster: kernels.c's slab plan for a reduce of the
 * materialized (row-major) cluster, each slab evaluated into a ~1 MiB temporary that stays in L2,
 * so the sums are those of the unfused plan (tpu_host_reduce_plan). */
typedef struct { const tpu_host_exe_t* e; int u, nleaf, d0; const tpu_host_view_t* leaf; tpu_host_view_t lb[64]; } slab_job_t;
static tpu_status_t fill_slab(void* ctx, int64_t row0, tpu_host_view_t* blk) {
  slab_job_t* J = ctx;
  for (int j = 0; j < J->nleaf; ++j) {
    J->lb[j] = J->leaf[j];
    J->lb[j].data += row0 * J->leaf[j].strides[J->d0] * (int64_t)tpu_dtype_size(J->leaf[j].dtype);
    J->lb[j].sizes[J->d0] = blk->sizes[J->d0];
  }
  return run_cluster_leaves(J->e, J->u, J->lb, blk);
}
static tpu_status_t run_fused_reduce(const tpu_host_exe_t* e, int v, int u, val_t* vals,
                                     const tpu_host_view_t* dst, scratch_t* s) {
  const tpu_ir_op_t* op = &e->g.ops[v];
  const tpu_ir_type_t* S = &e->g.ops[u].type;
  int nleaf = e->leaf_cnt[u];
  if (nleaf > 64) return TPU_ERR(UNSUPPORTED, "host: elementwise cluster with %d inputs", nleaf);
  tpu_host_view_t leaf[64], full;
  const int32_t* lv = e->leaves + e->leaf_off[u];
  for (int j = 0; j < nleaf; ++j) { leaf[j] = vals[lv[j]].v; leaf_bcast(&leaf[j], S->rank, S->dims); }
  view_contiguous(&full, NULL, S);
  tpu_host_reduce_plan_t p;
  if (!tpu_host_reduce_plan(op, &full, dst, &p)) { /* summed whole: materialize it */
    full.data = scratch_alloc_until(s, (size_t)tpu_ir_numel(S) * tpu_dtype_size(S->dtype), v);
    if (!full.data) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a temporary");
    TPU_RETURN_IF_ERROR(run_cluster_leaves(e, u, leaf, &full));
    return tpu_host_k_reduce(op, &full, dst);
  }
  char* blk = scratch_alloc_until(s, (size_t)p.block_bytes, v);
  char* pb = p.kept ? NULL : scratch_alloc_until(s, (size_t)p.partial_bytes, v);
  if (!blk || (!p.kept && !pb)) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a temporary");
  slab_job_t J = {.e = e, .u = u, .nleaf = nleaf, .d0 = p.d0, .leaf = leaf};
  return tpu_host_k_reduce_blocks(op, &p, &full, fill_slab, &J, blk, pb, dst);
}

static tpu_status_t materialize(val_t* x, const tpu_ir_type_t* t, scratch_t* s) {
  char* buf = scratch_alloc(s, (size_t)tpu_ir_numel(t) * tpu_dtype_size(t->dtype));
  if (!buf) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a temporary");
  tpu_host_view_t dst;
  view_contiguous(&dst, buf, t);
  if (!copy_small(&x->v, &dst)) TPU_RETURN_IF_ERROR(tpu_host_k_copy(&x->v, &dst));
  x->v = dst;
  return TPU_OK;
}

static tpu_status_t apply_view(const tpu_ir_op_t* op, val_t* in, val_t* out, scratch_t* s,
                               const tpu_ir_type_t* in_type) {
  tpu_host_view_t v = in->v, r;
  r.data = v.data; r.dtype = op->type.dtype; r.rank = op->type.rank;
  for (int d = 0; d < r.rank; ++d) { r.sizes[d] = op->type.dims[d]; r.strides[d] = 0; }
  int64_t es = (int64_t)tpu_dtype_size(v.dtype);
  switch (op->opcode) {
    case TPU_IR_BROADCAST:
      for (int i = 0; i < v.rank; ++i) {
        int od = (int)op->a[0][i];
        r.strides[od] = v.sizes[i] == r.sizes[od] ? v.strides[i] : 0;
      }
      break;
    case TPU_IR_TRANSPOSE:
      for (int d = 0; d < r.rank; ++d) r.strides[d] = v.strides[op->a[0][d]];
      break;
    case TPU_IR_SLICE: {
      int64_t off = 0;
      for (int d = 0; d < r.rank; ++d) { off += op->a[0][d] * v.strides[d]; r.strides[d] = v.strides[d] * op->a[2][d]; }
      if (tpu_ir_numel(&op->type) > 0) r.data = v.data + off * es;
      break;
    }
    case TPU_IR_REVERSE: {
      int64_t off = 0;
      for (int d = 0; d < r.rank; ++d) {
        r.strides[d] = op->a[0][d] ? -v.strides[d] : v.strides[d];
        if (op->a[0][d] && v.sizes[d] > 0) off += (v.sizes[d] - 1) * v.strides[d];
      }
      r.data = v.data + off * es;
      break;
    }
    case TPU_IR_RESHAPE:
      if (!reshape_strides(&v, r.rank, r.sizes, r.strides)) {
        TPU_RETURN_IF_ERROR(materialize(in, in_type, s));
        if (!reshape_strides(&in->v, r.rank, r.sizes, r.strides))
          return TPU_ERR(INTERNAL, "host: reshape of a contiguous temporary failed");
        r.data = in->v.data;
      }
      break;
    default: return TPU_ERR(INTERNAL, "host: not a view op");
  }
  out->v = r; out->ready = 1;
  return TPU_OK;
}

static tpu_status_t run_lib(const tpu_host_exe_t* e, int v, val_t* vals, const tpu_host_view_t* dst,
                            const tpu_host_scalar_t* scalars) {
  const tpu_ir_graph_t* G = &e->g;
  const tpu_ir_op_t* op = &G->ops[v];
#define IN(k) (&vals[tpu_ir_operand(G, v, k)].v)
  switch (op->opcode) {
    case TPU_IR_IOTA: return tpu_host_k_iota(op, dst);
    case TPU_IR_REDUCE: return tpu_host_k_reduce(op, IN(0), dst);
    case TPU_IR_ARGREDUCE: return tpu_host_k_argreduce(op, IN(0), dst);
    case TPU_IR_CUMULATIVE: return tpu_host_k_cumulative(op, IN(0), dst);
    case TPU_IR_DOT: return tpu_host_k_dot(op, IN(0), IN(1), dst);
    case TPU_IR_PAD: return tpu_host_k_pad(op, IN(0), IN(1), dst);
    case TPU_IR_GATHER: return tpu_host_k_gather(op, IN(0), IN(1), dst);
    case TPU_IR_INDEX_SELECT: return tpu_host_k_index_select(op, IN(0), IN(1), dst);
    case TPU_IR_SCATTER: return tpu_host_k_scatter(op, IN(0), IN(1), IN(2), dst);
    case TPU_IR_SORT: case TPU_IR_ARGSORT: return tpu_host_k_sort(op, IN(0), dst);
    case TPU_IR_CONV: return tpu_host_k_conv(op, IN(0), IN(1), dst); /* (operands in place: no view copies) */
    case TPU_IR_REDUCE_WINDOW: return tpu_host_k_reduce_window(op, IN(0), dst);
    case TPU_IR_CUSTOM: {
      tpu_host_view_t xs[16];
      int n = op->n_in;
      if (n > TPU_ARRAY_LEN(xs)) return TPU_ERR(UNSUPPORTED, "host: too many operands");
      for (int k = 0; k < n; ++k) xs[k] = *IN(k);
      return tpu_host_k_custom(op, n, xs, dst);
    }
    case TPU_IR_RNG: {
      const val_t* s = &vals[tpu_ir_operand(G, v, 0)];
      const val_t* o = &vals[tpu_ir_operand(G, v, 1)];
      return tpu_host_k_rng(op, (uint64_t)s->storage.i, (uint64_t)o->storage.i, dst);
    }
    case TPU_IR_CONCAT: case TPU_IR_INDEX_PUT: {
      tpu_host_view_t xs[2 + TPU_MAX_DIMS + 16];
      int n = op->n_in;
      if (n > TPU_ARRAY_LEN(xs)) return TPU_ERR(UNSUPPORTED, "host: too many operands");
      for (int k = 0; k < n; ++k) xs[k] = *IN(k);
      if (op->opcode == TPU_IR_CONCAT) return tpu_host_k_concat(op, n, xs, dst);
      return tpu_host_k_index_put(op, &xs[0], &xs[1], n - 2, xs + 2, dst);
    }
    default:
      return TPU_ERR(UNSUPPORTED, "host: no kernel for %s", tpu_ir_opcode_name(op->opcode));
  }
#undef IN
}

/* The parameters' byte ranges [lo, hi), sorted by lo, with maxhi the largest hi among entries
 * 0..i: the parameters an output's range overlaps are found by a binary search and a short walk
 * down (a _foreach_ graph writes hundreds of outputs in place over hundreds of parameters; a scan
 * of every parameter per output was most of its run loop). Empty views touch nothing: left out. */
typedef struct { uintptr_t lo, hi, maxhi; int p; } prange_t;
static int prange_less(const prange_t* x, const prange_t* y) { return x->lo < y->lo || (x->lo == y->lo && x->p < y->p); }
/* Natural merge sort of pr[0..m) by (lo, p) through tmp[0..m): ascending runs found first, then merged
 * pairwise (parameters often arrive in address order, or in a few runs: then it is nearly one pass; no
 * comparison callback as qsort's, which was ~17% of a 300-tensor foreach graph's run). */
static void prange_sort(prange_t* pr, prange_t* tmp, int m) {
  while (m > 1) {
    int runs = 0, out = 0;
    for (int a = 0; a < m;) {
      int b = a + 1;
      while (b < m && !prange_less(&pr[b], &pr[b - 1])) ++b;
      int c = b < m ? b + 1 : b;
      while (c < m && !prange_less(&pr[c], &pr[c - 1])) ++c;
      int i = a, j = b;                        /* merge [a, b) and [b, c) into tmp[out..) */
      while (i < b && j < c) tmp[out++] = prange_less(&pr[j], &pr[i]) ? pr[j++] : pr[i++];
      while (i < b) tmp[out++] = pr[i++];
      while (j < c) tmp[out++] = pr[j++];
      runs++;
      a = c;
    }
    memcpy(pr, tmp, (size_t)m * sizeof(*pr));
    if (runs == 1) break;
  }
}
/* Up to PRANGE_LINEAR parameters (every eager op) the ranges stay unsorted and every one is tested (no
 * sort, no maxhi, no binary search: these were ~10% of a tiny eager add's executor instructions). */
#define PRANGE_LINEAR 8
static int prange_build(const tpu_host_view_t* params, int n, prange_t* pr) {
  int m = 0;
  for (int p = 0; p < n; ++p) {
    view_range(&params[p], &pr[m].lo, &pr[m].hi);
    if (pr[m].lo < pr[m].hi) pr[m++].p = p;
  }
  if (n <= PRANGE_LINEAR) return m;
  prange_sort(pr, pr + n, m);
  for (int i = 0; i < m; ++i) pr[i].maxhi = i && pr[i - 1].maxhi > pr[i].hi ? pr[i - 1].maxhi : pr[i].hi;
  return m;
}
/* The number of entries with lo < x. */
static int prange_below(const prange_t* pr, int n, uintptr_t x) {
  int a = 0, b = n;
  while (a < b) { int mid = a + (b - a) / 2; if (pr[mid].lo < x) a = mid + 1; else b = mid; }
  return a;
}

static void scalar_store(val_t* x, int dtype, double f, int64_t i) {
  memset(&x->storage, 0, sizeof(x->storage));
  if (tpu_dtype_is_floating(dtype)) tpu_host_store_f64((char*)x->storage.b, dtype, f);
  else tpu_host_store_i64((char*)x->storage.b, dtype, i);
  x->v.data = (char*)x->storage.b; x->v.dtype = dtype; x->v.rank = 0; x->ready = 1;
}

/* A leaf of a batched cluster: a parameter's view, a runtime scalar or constant stored in its value, or an
 * earlier batch's result. */
static const tpu_host_view_t* sb_leaf(const tpu_host_exe_t* e, int u, val_t* vals, const tpu_host_view_t* params,
                                      const tpu_host_scalar_t* scalars) {
  const tpu_ir_op_t* op = &e->g.ops[u];
  if (e->kind[u] == K_PARAM) return &params[op->i0];
  if (e->kind[u] == K_SCALAR) scalar_store(&vals[u], op->type.dtype, scalars[op->i0].f, scalars[op->i0].i);
  else if (e->kind[u] == K_CONST) scalar_store(&vals[u], op->type.dtype, op->f0, op->i0);
  return &vals[u].v;
}
/* Evaluates the scalar batches (see sbatch) into their roots' values, as run_cluster_scalar evaluates one cluster:
 * each leaf loaded into its slot, the members computed in order, the root stored into its dtype; here up to
 * SB_CHUNK clusters of one structure side by side, one kernel call per member (elementwise: element i is what
 * cluster i alone gives). Clusters with a float POW compute one at a time: its kernel takes x * x for x ** 2 only
 * when every exponent of the call is 2. A value of a register dtype is loaded and stored by a copy of its bytes
 * (what tile load / store do for it). Results never go straight into outputs: the final copies write them. */
static tpu_status_t run_scalar_batches(const tpu_host_exe_t* e, val_t* vals, const tpu_host_view_t* params,
                                       const tpu_host_scalar_t* scalars) {
  const tpu_ir_graph_t* G = &e->g;
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  int64_t buf[SB_SLOTS][SB_CHUNK]; /* slot s, cluster i: element i of the slot's class, or buf[s][i] one at a time */
  for (int b = 0; b < e->n_sb; ++b) {
    const int r0 = e->sb_roots[e->sb_off[b]], nr = e->nreg[r0], nl = e->leaf_cnt[r0];
    const int32_t* mem = e->members + e->mem_off[r0];
    int single = 0;
    for (int i = 0; i < e->mem_cnt[r0]; ++i)
      single |= G->ops[mem[i]].opcode == TPU_IR_POW && tpu_host_cls(e->in_dtype[mem[i]]) != TPU_HOST_CLS_I64;
    for (int c0 = e->sb_off[b]; c0 < e->sb_off[b + 1]; c0 += SB_CHUNK) {
      const int n = TPU_MIN(SB_CHUNK, e->sb_off[b + 1] - c0);
      for (int j = 0; j < nl; ++j) {
        const int dt = G->ops[e->leaves[e->leaf_off[r0] + j]].type.dtype, cls = tpu_host_cls(dt);
        const size_t ces = single ? 8 : cls == TPU_HOST_CLS_F32 ? 4 : 8;
        const int reg_dt = dt == (cls == TPU_HOST_CLS_F32 ? TPU_DTYPE_F32 : cls == TPU_HOST_CLS_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_I64);
        char* dst = (char*)buf[nr + j];
        for (int i = 0; i < n; ++i) {
          const tpu_host_view_t* L = sb_leaf(e, e->leaves[e->leaf_off[e->sb_roots[c0 + i]] + j], vals, params, scalars);
          if (reg_dt) memcpy(dst + (size_t)i * ces, L->data, cls == TPU_HOST_CLS_F32 ? 4 : 8);
          else T->load(dst + (size_t)i * ces, cls, L->data, L->dtype, 0, 1);
        }
      }
      const void* ptr[SB_SLOTS];
      tpu_status_t st = TPU_OK;
      for (int i = 0; i < (single ? n : 1) && !st; ++i) {
        for (int k = 0; k < nr + nl; ++k) ptr[k] = single ? (const void*)&buf[k][i] : (const void*)buf[k];
        st = compute_members(e, T, r0, ptr, single ? &buf[0][i] : &buf[0][0], SB_CHUNK, NULL, single ? 1 : n);
      }
      if (st) return st;
      const int rdt = G->ops[r0].type.dtype, rcls = tpu_host_cls(rdt);
      const size_t res = single ? 8 : rcls == TPU_HOST_CLS_F32 ? 4 : 8;
      const int reg_rdt = rdt == (rcls == TPU_HOST_CLS_F32 ? TPU_DTYPE_F32 : rcls == TPU_HOST_CLS_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_I64);
      const char* src = (const char*)buf[e->reg[r0]];
      for (int i = 0; i < n; ++i) {
        const int v = e->sb_roots[c0 + i];
        val_t* x = &vals[v];
        memset(&x->storage, 0, sizeof(x->storage));
        view_contiguous(&x->v, (char*)x->storage.b, &G->ops[v].type);
        if (reg_rdt) memcpy(x->v.data, src + (size_t)i * res, rcls == TPU_HOST_CLS_F32 ? 4 : 8);
        else T->store(x->v.data, rdt, 1, src + (size_t)i * res, rcls, 1);
      }
      tpu_metrics_add_kernels((uint64_t)n);
    }
  }
  return TPU_OK;
}

static void prof_step(const tpu_host_exe_t* e, int v, double ns) {
  const tpu_ir_op_t* op = &e->g.ops[v];
  char key[48];
  int64_t numel = tpu_ir_numel(&op->type);
  const char* sz = numel <= 1 ? "1" : numel < 1024 ? "<1K" : numel < 16384 ? "<16K" : numel < 262144 ? "<256K" : ">=256K";
  if (e->kind[v] == K_ROOT && e->epi_dot[v] >= 0) snprintf(key, sizeof(key), "dot+epilogue %s", sz);
  else if (e->kind[v] == K_ROOT)
    snprintf(key, sizeof(key), "cluster %s n%s %s", tpu_ir_opcode_name(op->opcode),
             e->mem_cnt[v] > 4 ? ">4" : e->mem_cnt[v] > 1 ? "2-4" : "1", sz);
  else if (op->opcode == TPU_IR_CUSTOM) snprintf(key, sizeof(key), "custom %lld %s", (long long)op->i0, sz);
  else if (op->opcode == TPU_IR_REDUCE && e->fused[tpu_ir_operand(&e->g, v, 0)])
    snprintf(key, sizeof(key), "reduce(fused) %s", sz);
  else snprintf(key, sizeof(key), "%s %s", tpu_ir_opcode_name(op->opcode), sz);
  prof_add(key, ns);
}

/* Runs step v into its destination vals[v].v (chosen by the caller). s: the run's temporaries (a fused reduce
 * takes its slabs there; never in a step group). */
static tpu_status_t run_step(const tpu_host_exe_t* e, int v, val_t* vals, const tpu_host_scalar_t* scalars,
                             scratch_t* s) {
  const tpu_ir_graph_t* G = &e->g;
  const tpu_ir_op_t* op = &G->ops[v];
  if (e->kind[v] == K_ROOT && e->epi_dot[v] >= 0) return run_dot_epilogue(e, e->epi_dot[v], v, vals, &vals[v].v);
  if (e->kind[v] == K_ROOT) return run_cluster(e, v, vals, &vals[v].v);
  if (op->opcode == TPU_IR_REDUCE && e->fused[tpu_ir_operand(G, v, 0)])
    return run_fused_reduce(e, v, tpu_ir_operand(G, v, 0), vals, &vals[v].v, s);
  return run_lib(e, v, vals, &vals[v].v, scalars);
}

typedef struct {
  const tpu_host_exe_t* e;
  val_t* vals;
  const tpu_host_scalar_t* scalars;
  const int32_t* items;
  int prof;
  pthread_mutex_t mu; /* failures only: the one of the earliest step is kept */
  tpu_status_t first;
  _Atomic int first_v; /* that step (INT32_MAX: none); steps after it are skipped: the run fails anyway */
} grp_job_t;
static void grp_worker(void* ctx, int64_t begin, int64_t end) {
  grp_job_t* J = ctx;
  for (int64_t i = begin; i < end; ++i) {
    const int v = J->items[i];
    if (v > atomic_load_explicit(&J->first_v, memory_order_relaxed)) continue; /* (earlier ones still run: the
                                                                                 * error returned is the earliest) */
    const double t = J->prof ? prof_now() : 0;
    tpu_status_t st = run_step(J->e, v, J->vals, J->scalars, NULL);
    if (J->prof) prof_step(J->e, v, prof_now() - t);
    if (st == TPU_OK) { tpu_metrics_add_kernels(1); continue; }
    pthread_mutex_lock(&J->mu);
    if (v < J->first_v) { tpu_status_t old = J->first; J->first = st; atomic_store(&J->first_v, v); st = old; }
    pthread_mutex_unlock(&J->mu);
    tpu_status_free(st);
  }
}
/* Runs group g's steps (destinations chosen) side by side; the first failure in step order is returned. */
static tpu_status_t run_group(const tpu_host_exe_t* e, int g, val_t* vals, const tpu_host_scalar_t* scalars, int prof) {
  const int off = e->grp_off[g], cnt = e->grp_off[g + 1] - off;
  grp_job_t J = {.e = e, .vals = vals, .scalars = scalars, .items = e->grp_items + off, .prof = prof,
                 .mu = PTHREAD_MUTEX_INITIALIZER, .first = TPU_OK, .first_v = INT32_MAX};
  tpu_pool_parallel_for_each(cnt, grp_worker, &J);
  tpu_metrics_add_group_steps((uint64_t)cnt);
  pthread_mutex_destroy(&J.mu);
  return J.first;
}

tpu_status_t tpu_host_exe_run(const tpu_host_exe_t* e, const tpu_host_view_t* params,
                              const tpu_host_scalar_t* scalars, const tpu_host_view_t* outs) {
  const tpu_ir_graph_t* G = &e->g;
  int n = G->n_ops;
  val_t small[32];
  val_t* vals = n <= 32 ? small : malloc((size_t)n * sizeof(val_t));
  if (!vals) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory");
  scratch_t s = {.min_free = INT32_MAX};
  tpu_status_t st = TPU_OK;
  unsigned char written[TPU_IR_MAX_GRAPH_OUTPUTS]; /* per output: already written in place */
  prange_t pr_small[32], *pr = NULL;             /* parameter byte ranges (built at the first direct write) */
  int n_pr = 0;
  const int grain_div = e->n_steps >= GRAPH_MIN_STEPS ? tpu_pool_set_grain_div(graph_grain_div()) : 0;
  memset(written, 0, (size_t)G->n_outputs);
  const int prof = prof_on();
  const int grp_on = e->n_grp && tpu_pool_num_threads() > 1 && groups_on();
  if (grp_on) tpu_pool_wake(); /* a sleeping worker would join the groups late: they run on awake threads only */
  const double prof_t0 = prof ? prof_now() : 0;
  if (prof) prof_add("exe clock floor (back-to-back reads)", prof_now() - prof_t0); /* subtract from per-call rows */
  if (e->n_sb) {
    const double tb = prof ? prof_now() : 0;
    st = run_scalar_batches(e, vals, params, scalars);
    if (prof) prof_add("scalar batches", prof_now() - tb);
  }
  for (int v = 0; v < n && st == TPU_OK; ++v) {
    const tpu_ir_op_t* op = &G->ops[v];
    val_t* x = &vals[v];
    x->ready = 0;
    switch (e->kind[v]) {
      case K_PARAM: x->v = params[op->i0]; x->ready = 1; break;
      case K_SCALAR: scalar_store(x, op->type.dtype, scalars[op->i0].f, scalars[op->i0].i); break;
      case K_CONST: scalar_store(x, op->type.dtype, op->f0, op->i0); break;
      case K_VIEW: {
        int u = tpu_ir_operand(G, v, 0);
        const double tv = prof ? prof_now() : 0;
        const char* was = prof ? vals[u].v.data : NULL;
        st = apply_view(op, &vals[u], x, &s, &G->ops[u].type);
        if (prof) prof_add(vals[u].v.data != was ? "view (materialized)" : "view", prof_now() - tv);
        break;
      }
      case K_MEMBER: break;
      case K_ROOT: case K_LIB: {
        if (e->sbatch[v]) { x->ready = 1; break; } /* evaluated by run_scalar_batches */
        if (e->fused[v]) break; /* evaluated inside its reduce */
        if (e->epi_root[v] >= 0) { /* a DOT run at its epilogue's step: only its C buffer now */
          char* buf = scratch_alloc_until(&s, (size_t)tpu_ir_numel(&op->type) * tpu_dtype_size(op->type.dtype),
                                          e->last_use[v]);
          if (!buf) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a temporary"); break; }
          view_contiguous(&x->v, buf, &op->type);
          x->ready = 1;
          break;
        }
        /* Destination: the output view when that is safe, else a contiguous temporary. */
        const double t_dest = prof ? prof_now() : 0;
        int k = e->out_index[v];
        tpu_host_view_t hv; /* host_out: that output viewed in this step's shape */
        const tpu_host_view_t* o = k >= 0 ? &outs[k] : NULL;
        if (k < 0 && e->host_out[v] >= 0 && !written[e->host_out[v]]) {
          k = e->host_out[v];
          hv = outs[k];
          hv.rank = op->type.rank;
          for (int d = 0; d < hv.rank; ++d) hv.sizes[d] = op->type.dims[d];
          o = hv.dtype == op->type.dtype && reshape_strides(&outs[k], hv.rank, hv.sizes, hv.strides) ? &hv : NULL;
        }
        int direct = o && !written[k];
        /* in a group, steps from its first one on may still read what this one writes */
        const int gf = grp_on && e->grp[v] >= 0 ? e->grp_first[e->grp[v]] : -1;
        if (direct && !pr) { /* parameter byte ranges, once per run, sorted by start (see prange_t) */
          pr = G->n_params <= 16 ? pr_small : malloc((size_t)G->n_params * 2 * sizeof(prange_t)); /* + merge space */
          if (!pr) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory"); break; }
          n_pr = prange_build(params, G->n_params, pr);
        }
        if (direct) {
          uintptr_t o0, o1;
          view_range(o, &o0, &o1);
          const int lin = G->n_params <= PRANGE_LINEAR; /* unsorted: test each */
          for (int i = lin ? n_pr - 1 : prange_below(pr, n_pr, o1) - 1; i >= 0 && direct; --i) {
            if (!lin && pr[i].maxhi <= o0) break;
            if (pr[i].hi <= o0 || pr[i].lo >= o1) continue; /* [lo, hi) overlaps the output's [o0, o1) */
            int p = pr[i].p;
            /* writing over a parameter is safe once every step reading it has run (last_use of
             * its op; INT32_MAX when the parameter or a view of it is itself an output) */
            int lu = e->param_op[p] >= 0 ? e->last_use[e->param_op[p]] : INT32_MAX;
            if (lu < v && lu < (gf >= 0 ? gf : v)) continue;
            const int lib_ew = e->kind[v] == K_LIB && lib_in_place(G, v);
            if (lu != v || (e->kind[v] == K_LIB && !lib_ew) || e->epi_dot[v] >= 0 ||
                (gf >= 0 && e->prev_use[e->param_op[p]] >= gf)) {
              direct = 0;
              break;
            }
            const int32_t* lv = lib_ew ? G->operands + op->in_off : e->leaves + e->leaf_off[v];
            for (int j = 0; j < (lib_ew ? op->n_in : e->leaf_cnt[v]) && direct; ++j)
              if (views_overlap(o, &vals[lv[j]].v) && !views_identical(o, &vals[lv[j]].v)) direct = 0;
            /* other outputs still to be copied from (views of) that parameter read it after us (only
             * out_alias ones can: any other is in its own slot already, in a temporary, or not run) */
            for (int a = 0; a < e->n_out_alias && direct; ++a) {
              int k2 = e->out_alias[a], w = G->outputs[k2];
              if (k2 == k || w == v || (w < v && (!vals[w].ready || (written[k2] && e->out_index[w] == k2)))) continue;
              /* not evaluated yet: it cannot read p (every read of p or of a view of p is at
               * step <= lu == v), so only an output that is a parameter itself is checked */
              if (w > v && e->kind[w] != K_PARAM) continue;
              if (views_overlap(o, w > v ? &params[G->ops[w].i0] : &vals[w].v)) direct = 0;
            }
          }
        }
        if (direct) { x->v = *o; written[k] = o == &hv ? 2 : 1; } /* 2: holds a step that the output reshapes */
        else if (op->type.rank == 0 && e->kind[v] == K_ROOT) { /* a scalar: its own 8 bytes, no scratch */
          view_contiguous(&x->v, (char*)x->storage.b, &op->type);
        } else {
          char* buf = scratch_alloc_until(&s, (size_t)tpu_ir_numel(&op->type) * tpu_dtype_size(op->type.dtype),
                                          e->last_use[v]);
          if (!buf) { st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a temporary"); break; }
          view_contiguous(&x->v, buf, &op->type);
        }
        x->ready = 1;
        const double t_step = prof ? prof_now() : 0;
        if (prof) prof_add("destination choice", t_step - t_dest);
        if (gf >= 0) { /* a group's steps run together once every one has its destination */
          if (v == e->grp_last[e->grp[v]]) {
            st = run_group(e, e->grp[v], vals, scalars, prof);
            scratch_release(&s, v);
          }
          break;
        }
        st = run_step(e, v, vals, scalars, &s);
        if (prof) prof_step(e, v, prof_now() - t_step);
        if (st == TPU_OK) tpu_metrics_add_kernels(1);
        scratch_release(&s, v);
        break;
      }
    }
  }
  const double prof_t1 = prof ? prof_now() : 0;
  for (int k = 0; k < G->n_outputs && st == TPU_OK; ++k) {
    int v = G->outputs[k];
    if (written[k] == 1 && e->out_index[v] == k) continue;
    if (written[k] == 2 && views_identical(&vals[v].v, &outs[k])) continue; /* the reshape is the output itself */
    if (!copy_small(&vals[v].v, &outs[k])) st = tpu_host_k_copy(&vals[v].v, &outs[k]);
  }
  if (prof) {
    double t2 = prof_now();
    prof_add("output copies", t2 - prof_t1);
    char key[48];
    if (e->n_steps < 64) snprintf(key, sizeof(key), "exe total, %s steps", e->n_steps < 4 ? "<4" : "<64");
    else snprintf(key, sizeof(key), "exe total, %d steps", e->n_steps); /* compiled graphs: one row each */
    prof_add(key, t2 - prof_t0);
  }
  scratch_free(&s);
  if (vals != small) free(vals);
  if (pr != pr_small) free(pr);
  if (grain_div) tpu_pool_set_grain_div(grain_div);
  return st;
}
