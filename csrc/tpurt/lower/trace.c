/* trace.c — fused eager (recorded ops flushed as one graph) and graph capture/replay.
 *
 * Per device, a pending trace holds recorded ops (deep copies of their records), their
 * wiring and the set of live "writers":
 *   - every op output (and lw_output_arg output) is a value; a value is LIVE while it is the
 *     last write of its tensor view and the buffer has not been freed; live values become the
 *     fused graph's outputs, others stay internal;
 *   - a tensor input (or an output read back by lw_out_input) whose view is identical to a
 *     live value is wired to that value; one that partially overlaps a live value forces a
 *     flush first (so is an output partially overlapping one);
 *   - everything else is an external parameter bound to the recorded view.
 * Flush: the trace key (each op's signature, the wiring, the live flags) finds a cached fused
 * executable, or every recorded lowering is re-run in embedded mode (cx->embed: the lw_*
 * helpers call the tpu_trace_embed_* functions below) into ONE graph, which goes through
 * tpu_compiler_compile (the pass pipeline, then the host plan) like every compile; the disk
 * level of the compilation cache (namespace "graph", payload: cache/graph_codec.h) stores it
 * under the trace key. One task runs it. If the fused graph cannot be built, the ops are
 * enqueued one by one exactly as strict eager would.
 *
 * Bit-identity with strict eager: each op's outputs keep their dtype conversion in the graph
 * (a producer fused into a reduction sums in the order of the materialized reduce: the host
 * driver's tpu_host_reduce_plan serves both). A non-contiguous value read by a layout-sensitive op
 * (reduce, GEMM, custom kernels) stays an output, or the trace flushes before it is
 * overwritten, so that reader sees strict eager's strides.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/disk_cache.h"
#include "cache/graph_codec.h"
#include "cache/hash.h"
#include "compiler/compiler.h"
#include "lower/record.h"
#include "ir/symshape.h"
#include "lower/trace.h"
#include "runtime/runtime.h"

/* A trace runs once it holds this many ops, so the device starts while the host records the next
 * one. 256 kept the device idle through most of a Llama training step (fused/strict wall 0.72x,
 * 64: 1.04x, measured under load; benchmarks/RESULTS.md). */
#define TRACE_MAX_OPS 64
#define CAPTURE_MAX_OPS 8192
#define TRACE_MAX_OUTPUTS TPU_IR_MAX_GRAPH_OUTPUTS
#define TRACE_CACHE_BUCKETS 1024
#define TRACE_CACHE_MAX 512
#define VIEW_BIT (1 << 30) /* a wiring slot value: a view of value (slot - VIEW_BIT) */


/* ------------------------------------------------------------------ arena */
typedef struct blk_s { struct blk_s* next; size_t used, cap; char data[]; } blk_t;
typedef struct { blk_t* head; } arena_t;
static void* arena_alloc(arena_t* a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!a->head || a->head->used + n > a->head->cap) {
    size_t cap = n > 65536 ? n : 65536;
    blk_t* b = malloc(sizeof(blk_t) + cap);
    if (!b) return NULL;
    b->next = a->head; b->used = 0; b->cap = cap;
    a->head = b;
  }
  void* p = a->head->data + a->head->used;
  a->head->used += n;
  return p;
}
static void arena_reset(arena_t* a) { /* keeps the newest block */
  if (!a->head) return;
  blk_t* b = a->head->next;
  while (b) { blk_t* n = b->next; free(b); b = n; }
  a->head->next = NULL; a->head->used = 0;
}

/* ------------------------------------------------------------------ state */
typedef struct {
  const tpu_lowering_t* l;
  tpu_exec_entry_t* e; /* retained single-op executable: key, scalar binds, arg outs */
  const char* name;
  tpu_arg_t* args;
  tpu_tensor_t* outs;
  int nargs, nouts, n_vals, val0;
  int merge_out, merge_from; /* output written into a box of live value merge_from (-1: none): value
                              val0 + n_vals - 1 is that value with the box replaced */
  int32_t* arg_slot; /* per argument: its first wiring slot (-1: none) */
  int out_slot;      /* first slot of the outputs read back as inputs */
  uint64_t seed, offset;
  tpu_rt_generator_t* gen;
} rec_t;

typedef struct {
  const tpu_tensor_t* t; /* the recorded view (inside the op's record) */
  uintptr_t lo, hi;      /* bytes touched; lo == hi: empty or absent (never live) */
  int op, live, read; /* read: wired into a later op */
  int detached;       /* freed but still an output: written to scratch memory (lo == hi) */
} tval_t;

typedef struct {
  pthread_mutex_t mu;
  int device;
  rec_t* ops; int n_ops, cap_ops;
  tval_t* vals; int n_vals, cap_vals;
  int32_t* live; int n_live, cap_live; /* ids of live values */
  int32_t* wire; int n_wire, cap_wire; /* per slot: value id or -1 */
  uint8_t* key; size_t key_len, key_cap;
  int oom;
  arena_t arena;
  _Atomic int pending;                 /* n_ops, readable without mu */
  int capturing, capture_broken;
  char capture_reason[192];
} trace_t;

int _Atomic tpu_trace_mode;
static _Atomic uint64_t g_st_flushes, g_st_ops, g_st_hits, g_st_misses, g_st_fallbacks;
void tpu_trace_stats_get(tpu_trace_stats_t* out) {
  if (!out) return;
  out->flushes = atomic_load(&g_st_flushes); out->traced_ops = atomic_load(&g_st_ops);
  out->cache_hits = atomic_load(&g_st_hits); out->cache_misses = atomic_load(&g_st_misses);
  out->fallbacks = atomic_load(&g_st_fallbacks);
}
void tpu_trace_stats_reset(void) {
  atomic_store(&g_st_flushes, 0); atomic_store(&g_st_ops, 0); atomic_store(&g_st_hits, 0);
  atomic_store(&g_st_misses, 0); atomic_store(&g_st_fallbacks, 0);
}
static trace_t* g_traces;
static int g_ntraces;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static tpu_status_t g_init_error;
static _Thread_local int tl_flushing = -1; /* device whose trace this thread is flushing */

/* ------------------------------------------------------------------ fused executable cache */
typedef tpu_graph_bind_t fbind_t; /* op, src (tpu_bind_src_t / tpu_sbind_kind_t), arg, index */
/* A replay's task (its views: (params + outputs) x 208 bytes, ~50 KB for an optimizer graph) is kept by its
 * entry when the run finishes and taken by the next run, instead of a calloc on the host thread and a free on
 * the queue worker per run (with memset and fresh heap pages, ~15% of a replay's host CPU). Two slots: a run
 * enqueued while the previous one is still queued or running finds the one before it. */
#define FENTRY_SPARES 2
typedef struct fentry_s {
  uint64_t hash;
  size_t key_len;
  uint8_t* key;
  tpu_host_exe_t* exe;
  int n_tb, n_sb, n_out;
  fbind_t* tb;     /* per graph param */
  fbind_t* sb;     /* per runtime scalar (src = tpu_sbind_kind_t) */
  int32_t* outv;   /* per graph output: trace value id */
  char* name;      /* "fused graph (op, op, ...)": the task name, made once */
  int refcount;    /* atomic */
  struct fentry_s* chain;
  void* spare[FENTRY_SPARES]; /* atomic slots: tasks of finished runs kept for the next runs (ftask_take) */
} fentry_t;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static fentry_t* g_cache[TRACE_CACHE_BUCKETS];
static int g_cache_count;

static void fentry_release(fentry_t* f) {
  if (!f || __atomic_sub_fetch(&f->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  for (int i = 0; i < FENTRY_SPARES; ++i) free(f->spare[i]);
  tpu_host_exe_free(f->exe);
  free(f->key); free(f->tb); free(f->sb); free(f->outv); free(f->name); free(f);
}
static fentry_t* cache_lookup(uint64_t h, const uint8_t* key, size_t len) {
  pthread_mutex_lock(&g_cache_mu);
  fentry_t* f = g_cache[h % TRACE_CACHE_BUCKETS];
  while (f && !(f->hash == h && f->key_len == len && !memcmp(f->key, key, len))) f = f->chain;
  if (f) __atomic_add_fetch(&f->refcount, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_unlock(&g_cache_mu);
  return f;
}
static void cache_insert(fentry_t* f) { /* f->refcount already counts the caller */
  pthread_mutex_lock(&g_cache_mu);
  if (g_cache_count < TRACE_CACHE_MAX) {
    __atomic_add_fetch(&f->refcount, 1, __ATOMIC_ACQ_REL);
    f->chain = g_cache[f->hash % TRACE_CACHE_BUCKETS];
    g_cache[f->hash % TRACE_CACHE_BUCKETS] = f;
    g_cache_count++;
  }
  pthread_mutex_unlock(&g_cache_mu);
}

static inline uint64_t hash_bytes(const uint8_t* p, size_t n) { return tpu_hash64(p, n, 0); }

/* ------------------------------------------------------------------ small helpers */
#define GROW(arr, n, cap, need, fail)                                             \
  do {                                                                            \
    if ((n) + (need) > (cap)) {                                                   \
      int c_ = (cap) ? (cap) * 2 : 64;                                            \
      while (c_ < (n) + (need)) c_ *= 2;                                          \
      void* p_ = realloc((arr), (size_t)c_ * sizeof(*(arr)));                     \
      if (!p_) { fail; }                                                          \
      else { (arr) = p_; (cap) = c_; }                                            \
    }                                                                             \
  } while (0)

static void key_put(trace_t* tr, const void* p, size_t n) {
  if (tr->key_len + n > tr->key_cap) {
    size_t c = tr->key_cap ? tr->key_cap * 2 : 4096;
    while (c < tr->key_len + n) c *= 2;
    uint8_t* k = realloc(tr->key, c);
    if (!k) { tr->oom = 1; return; }
    tr->key = k; tr->key_cap = c;
  }
  memcpy(tr->key + tr->key_len, p, n);
  tr->key_len += n;
}

static void tensor_range(const tpu_tensor_t* t, uintptr_t* lo, uintptr_t* hi) {
  *lo = *hi = 0;
  if (!t || t->ndim < 0 || !t->data) return;
  int64_t mn = 0, mx = 0, es = (int64_t)tpu_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] == 0) return;
    int64_t ext = (t->sizes[d] - 1) * t->strides[d];
    if (ext < 0) mn += ext; else mx += ext;
  }
  *lo = (uintptr_t)((char*)t->data + mn * es);
  *hi = (uintptr_t)((char*)t->data + (mx + 1) * es);
}
static int is_contiguous(const tpu_tensor_t* t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->sizes[d] != 1 && t->strides[d] != s) return 0;
    s *= t->sizes[d];
  }
  return 1;
}
static int same_view(const tpu_tensor_t* a, const tpu_tensor_t* b) {
  if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d] || (a->sizes[d] > 1 && a->strides[d] != b->strides[d])) return 0;
  return 1;
}

/* Live value whose view is identical to t (>= 0), -1 if none overlaps, -2 on a partial overlap
 * (*out_overlap: the overlapping value). */
static int find_live2(const trace_t* tr, const tpu_tensor_t* t, int* out_overlap) {
  uintptr_t lo, hi;
  tensor_range(t, &lo, &hi);
  if (lo == hi) return -1;
  for (int i = 0; i < tr->n_live; ++i) {
    const tval_t* v = &tr->vals[tr->live[i]];
    if (v->lo < hi && lo < v->hi) {
      if (same_view(v->t, t)) return tr->live[i];
      if (out_overlap) *out_overlap = tr->live[i];
      return -2;
    }
  }
  return -1;
}
static int find_live(const trace_t* tr, const tpu_tensor_t* t) { return find_live2(tr, t, NULL); }

/* ---- a view (reshape/transpose/slice/select/expand/unsqueeze) of a live value V as IR view ops.
 * V must be dense in some dim order; t's non-broadcast dims, sorted by stride, must be a box
 * of a row-major "parent" shape of V's memory: flat = reshape(transpose(V, V's memory order)),
 * parent = reshape(flat, D), box = slice(parent, c, c + n), then transpose/reshape/broadcast
 * to t's order and sizes. */
typedef struct {
  int vrank, vperm[TPU_MAX_DIMS];
  int64_t N;
  int pk;                                  /* parent rank */
  int64_t D[TPU_MAX_DIMS + 1], c[TPU_MAX_DIMS + 1], n[TPU_MAX_DIMS + 1];
  int nk, kd[TPU_MAX_DIMS];                /* t's box dims, by stride descending */
  int bcast;                               /* t has stride-0 dims of size > 1 */
} vplan_t;
static int dense_order(const tpu_tensor_t* t, int* perm) { /* 1 if dense (no gaps/overlaps) in perm order */
  int r = t->ndim;
  for (int d = 0; d < r; ++d) perm[d] = d;
  for (int i = 1; i < r; ++i)
    for (int j = i; j > 0; --j) {
      int a = perm[j - 1], b = perm[j];
      int64_t sa = t->sizes[a] == 1 ? INT64_MAX : t->strides[a], sb = t->sizes[b] == 1 ? INT64_MAX : t->strides[b];
      if (sa < sb) { perm[j - 1] = b; perm[j] = a; } else break;
    }
  int64_t s = 1;
  for (int i = r - 1; i >= 0; --i) {
    int d = perm[i];
    if (t->sizes[d] == 1) continue;
    if (t->strides[d] != s) return 0;
    s *= t->sizes[d];
  }
  return 1;
}
static int view_plan(const tpu_tensor_t* V, const tpu_tensor_t* t, vplan_t* P) {
  if (V->dtype != t->dtype || V->ndim < 0 || t->ndim < 0 || !dense_order(V, P->vperm)) return 0;
  P->vrank = V->ndim;
  P->N = tpu_numel(V->ndim, V->sizes);
  int64_t es = (int64_t)tpu_dtype_size(t->dtype);
  intptr_t db = (char*)t->data - (char*)V->data;
  if (P->N <= 0 || db < 0 || db % es) return 0;
  int64_t off = db / es;
  P->nk = 0; P->bcast = 0;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] <= 1) continue;
    if (t->strides[d] == 0) { P->bcast = 1; continue; }
    if (t->strides[d] < 0) return 0;
    P->kd[P->nk++] = d;
  }
  for (int i = 1; i < P->nk; ++i) /* by stride descending */
    for (int j = i; j > 0 && t->strides[P->kd[j - 1]] < t->strides[P->kd[j]]; --j) {
      int x = P->kd[j]; P->kd[j] = P->kd[j - 1]; P->kd[j - 1] = x;
    }
  if (P->nk == 0) { /* one element */
    if (off >= P->N) return 0;
    P->pk = 1; P->D[0] = P->N; P->c[0] = off; P->n[0] = 1;
    return 1;
  }
  int64_t g[TPU_MAX_DIMS];
  for (int i = 0; i < P->nk; ++i) g[i] = t->strides[P->kd[i]];
  for (int i = 0; i + 1 < P->nk; ++i)
    if (g[i] == g[i + 1] || g[i] % g[i + 1] || g[i] < t->sizes[P->kd[i + 1]] * g[i + 1]) return 0;
  if (P->N % g[0]) return 0;
  int extra = g[P->nk - 1] > 1;
  P->pk = P->nk + extra;
  P->D[0] = P->N / g[0];
  for (int i = 1; i < P->nk; ++i) P->D[i] = g[i - 1] / g[i];
  if (extra) P->D[P->nk] = g[P->nk - 1];
  P->c[0] = off / g[0];
  for (int i = 1; i < P->nk; ++i) P->c[i] = (off / g[i]) % P->D[i];
  if (extra) P->c[P->nk] = off % g[P->nk - 1];
  for (int i = 0; i < P->nk; ++i) P->n[i] = t->sizes[P->kd[i]];
  if (extra) P->n[P->nk] = 1;
  for (int i = 0; i < P->pk; ++i) if (P->c[i] + P->n[i] > P->D[i]) return 0;
  return 1;
}
static int view_build(tpu_ir_graph_t* G, int v, const vplan_t* P, const tpu_tensor_t* t) {
  int64_t perm[TPU_MAX_DIMS], dims[TPU_MAX_DIMS + 1], lim[TPU_MAX_DIMS + 1], st[TPU_MAX_DIMS + 1];
  if (P->vrank > 1) {
    for (int d = 0; d < P->vrank; ++d) perm[d] = P->vperm[d];
    v = tpu_ir_transpose(G, v, perm);
  }
  v = tpu_ir_reshape(G, v, P->pk, P->D);
  for (int i = 0; i < P->pk; ++i) { lim[i] = P->c[i] + P->n[i]; st[i] = 1; }
  v = tpu_ir_slice(G, v, P->c, lim, st);
  int nk = P->nk;
  if (nk == 0) { /* a single element: to rank 0 first */
    v = tpu_ir_reshape(G, v, 0, dims);
  } else {
    for (int i = 0; i < nk; ++i) dims[i] = P->n[i];
    if (P->pk != nk) v = tpu_ir_reshape(G, v, nk, dims);
    /* box dims are in stride order; t's order is by dim index */
    int order[TPU_MAX_DIMS];
    for (int i = 0; i < nk; ++i) order[i] = i;
    for (int i = 1; i < nk; ++i)
      for (int j = i; j > 0 && P->kd[order[j - 1]] > P->kd[order[j]]; --j) { int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x; }
    for (int i = 0; i < nk; ++i) perm[i] = order[i];
    v = tpu_ir_transpose(G, v, perm);
  }
  int64_t ts[TPU_MAX_DIMS];
  for (int d = 0; d < t->ndim; ++d) ts[d] = (t->sizes[d] > 1 && t->strides[d] == 0) ? 1 : t->sizes[d];
  v = tpu_ir_reshape(G, v, t->ndim, ts);
  if (P->bcast) {
    int64_t bd[TPU_MAX_DIMS];
    for (int d = 0; d < t->ndim; ++d) bd[d] = d;
    v = tpu_ir_broadcast(G, v, t->ndim, t->sizes, bd);
  }
  return v;
}
/* V with the box P (of view t) replaced by W (t's shape): the inverse of view_build, then
 * select(mask, pad(W), parent) — data movement only, exact for every value. */
static int merge_build(tpu_ir_graph_t* G, int V, int W, const vplan_t* P, const tpu_tensor_t* vt, const tpu_tensor_t* t) {
  int64_t perm[TPU_MAX_DIMS], dims[TPU_MAX_DIMS + 1], lo[TPU_MAX_DIMS + 1], hi[TPU_MAX_DIMS + 1];
  int parent = V;
  if (P->vrank > 1) {
    for (int d = 0; d < P->vrank; ++d) perm[d] = P->vperm[d];
    parent = tpu_ir_transpose(G, parent, perm);
  }
  parent = tpu_ir_reshape(G, parent, P->pk, P->D);
  int nk = P->nk, w = W;
  if (nk > 0) {
    int order[TPU_MAX_DIMS];                 /* box dims (stride order) sorted by t's dim index */
    for (int i = 0; i < nk; ++i) order[i] = i;
    for (int i = 1; i < nk; ++i)
      for (int j = i; j > 0 && P->kd[order[j - 1]] > P->kd[order[j]]; --j) { int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x; }
    for (int i = 0; i < nk; ++i) dims[i] = P->n[order[i]];
    w = tpu_ir_reshape(G, w, nk, dims);      /* t's non-unit dims, in dim order */
    for (int i = 0; i < nk; ++i) perm[order[i]] = i;
    w = tpu_ir_transpose(G, w, perm);        /* to stride order */
  }
  w = tpu_ir_reshape(G, w, P->pk, P->n);
  for (int i = 0; i < P->pk; ++i) { lo[i] = P->c[i]; hi[i] = P->D[i] - P->c[i] - P->n[i]; }
  int dt = vt->dtype;
  int wp = tpu_ir_pad(G, w, tpu_ir_constant(G, dt, 0), lo, hi);
  int ones = tpu_ir_broadcast(G, tpu_ir_constant(G, TPU_DTYPE_BOOL, 1), P->pk, P->n, NULL);
  int mask = tpu_ir_pad(G, ones, tpu_ir_constant(G, TPU_DTYPE_BOOL, 0), lo, hi);
  int out = tpu_ir_select(G, mask, wp, parent);
  for (int d = 0; d < P->vrank; ++d) dims[d] = vt->sizes[P->vperm[d]];
  out = tpu_ir_reshape(G, out, P->vrank, dims);
  if (P->vrank > 1) {
    for (int d = 0; d < P->vrank; ++d) perm[P->vperm[d]] = d;
    out = tpu_ir_transpose(G, out, perm);
  }
  (void)t;
  return out;
}
static void live_remove(trace_t* tr, int id) {
  for (int i = 0; i < tr->n_live; ++i)
    if (tr->live[i] == id) { tr->live[i] = tr->live[--tr->n_live]; break; }
  tr->vals[id].live = 0;
}

static tpu_status_t trace_init_once_status(void);

/* ------------------------------------------------------------------ tasks */
typedef struct {
  fentry_t* f;          /* fused */
  tpu_exec_entry_t* e;  /* or a single op (fallback) */
  tpu_host_exe_t* exe;
  int np, ns, nout;
  double sink;           /* the placeholder output of a graph with nothing observable */
  tpu_debug_graph_t* rec; /* debug recording (lower/record.h), usually NULL */
  void* scratch;          /* outputs of detached values (freed, kept for their readers' layout) */
  tpu_host_scalar_t* scalars;
  int64_t* prof_ns;       /* TORCH_TPU_TRACE_PROFILE: where this task adds its device thread CPU time (or NULL) */
  tpu_host_view_t views[]; /* np params, then nout outputs; scalars follow */
} ftask_t;
/* TORCH_TPU_TRACE_PROFILE=<file> (a measurement mode, not for production runs): after two warm-up runs,
 * the runs of each distinct trace alternate between its fused executable and its ops run one by one
 * (strict eager's single-op executables; the same bits either way), and each run's device thread CPU
 * time is added to the trace's fused or op-by-op total; at exit <file> gets one line per trace: runs
 * and mean ms fused, runs and mean ms op by op, their ratio, the trace's name. With
 * TORCH_TPU_NUM_THREADS=1 every kernel runs on the device thread, so its CPU time is the whole
 * device time of the trace, and interleaving makes both sides see the same machine load
 * (benchmarks/RESULTS.md, [fused]). */
#define PROF_SLOTS 1024
typedef struct { uint64_t hash; int runs; int64_t n[2], ns[2]; char name[160]; } prof_t;
static prof_t* g_prof;
static const char* g_prof_path;
static pthread_once_t g_prof_once = PTHREAD_ONCE_INIT;
static void prof_write(void) {
  FILE* f = fopen(g_prof_path, "w");
  if (!f) { fprintf(stderr, "torch_tpu: TORCH_TPU_TRACE_PROFILE: cannot write %s\n", g_prof_path); return; }
  fprintf(f, "# fused_runs fused_ms op_by_op_runs op_by_op_ms fused/op_by_op name\n");
  for (int i = 0; i < PROF_SLOTS; ++i) {
    const prof_t* p = &g_prof[i];
    int64_t n0 = __atomic_load_n(&p->n[0], __ATOMIC_RELAXED), n1 = __atomic_load_n(&p->n[1], __ATOMIC_RELAXED);
    if (!n0 && !n1) continue;
    double m0 = n0 ? (double)__atomic_load_n(&p->ns[0], __ATOMIC_RELAXED) / (double)n0 * 1e-6 : 0;
    double m1 = n1 ? (double)__atomic_load_n(&p->ns[1], __ATOMIC_RELAXED) / (double)n1 * 1e-6 : 0;
    fprintf(f, "%lld %.3f %lld %.3f %.3f %s\n", (long long)n0, m0, (long long)n1, m1, m1 > 0 ? m0 / m1 : 0.0, p->name);
  }
  fclose(f);
}
static void prof_init(void) {
  const char* v = getenv("TORCH_TPU_TRACE_PROFILE");
  if (!v || !*v || !(g_prof = calloc(PROF_SLOTS, sizeof(prof_t)))) return;
  g_prof_path = v;
  atexit(prof_write);
}
/* The profile slot of trace hash h (mu held; NULL: profiling off or the table is full). */
static prof_t* prof_slot(uint64_t h) {
  pthread_once(&g_prof_once, prof_init);
  if (!g_prof) return NULL;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* traces of several devices */
  pthread_mutex_lock(&mu);
  prof_t* p = NULL;
  for (int i = 0; i < PROF_SLOTS && !p; ++i) {
    prof_t* q = &g_prof[(h + (uint64_t)i) % PROF_SLOTS];
    if (q->hash == h || (!q->hash && !q->name[0])) { p = q; p->hash = h; }
  }
  pthread_mutex_unlock(&mu);
  return p;
}
static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
static tpu_status_t ftask_run(void* ctx) {
  ftask_t* t = ctx;
  if (t->rec) tpu_record_inputs(t->rec, t->views, t->np);
  int64_t t0 = t->prof_ns ? thread_cpu_ns() : 0;
  tpu_status_t st = tpu_host_exe_run(t->exe, t->views, t->scalars, t->views + t->np);
  if (t->prof_ns) __atomic_add_fetch(t->prof_ns, thread_cpu_ns() - t0, __ATOMIC_RELAXED);
  if (t->rec) { tpu_record_finish(t->rec, t->views + t->np, t->nout, st); t->rec = NULL; }
  return st;
}
/* Starts the debug recording of a bound task (tests/stablehlo_oracle.py; off: one atomic load). */
static void ftask_record(ftask_t* t, const char* name) {
  if (tpu_record_enabled()) t->rec = tpu_record_begin(name, tpu_host_exe_graph(t->exe), t->scalars);
}
/* Called by the queue once the task will not run again (finished, failed or never started): a fused task
 * is parked in a free slot of its entry before the entry's reference is dropped (the entry frees its
 * spares when its last reference goes), else freed. */
static void ftask_free(void* ctx) {
  ftask_t* t = ctx;
  tpu_debug_graph_free(t->rec);
  free(t->scratch);
  tpu_exec_entry_release(t->e);
  fentry_t* f = t->f;
  for (int i = 0; f && t && i < FENTRY_SPARES; ++i) {
    void* none = NULL;
    if (__atomic_compare_exchange_n(&f->spare[i], &none, t, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) t = NULL;
  }
  fentry_release(f);
  free(t);
}
/* A finished task of f's runs to bind anew (views, scalars: the caller writes every one, as after
 * ftask_new; the rest of it is reset here), or NULL. */
static ftask_t* ftask_take(fentry_t* f) {
  for (int i = 0; i < FENTRY_SPARES; ++i) {
    ftask_t* t = __atomic_exchange_n(&f->spare[i], NULL, __ATOMIC_ACQUIRE);
    if (!t) continue;
    t->f = NULL; t->e = NULL; t->rec = NULL; t->scratch = NULL; t->prof_ns = NULL;
    return t;
  }
  return NULL;
}
static ftask_t* ftask_new(int np, int ns, int nout) {
  int placeholder = nout == 0;
  nout += placeholder;
  size_t sz = sizeof(ftask_t) + (size_t)(np + nout) * sizeof(tpu_host_view_t) + (size_t)(ns ? ns : 1) * sizeof(tpu_host_scalar_t);
  ftask_t* t = calloc(1, sz);
  if (!t) return NULL;
  t->np = np; t->ns = ns; t->nout = nout;
  t->scalars = (tpu_host_scalar_t*)(t->views + np + nout);
  if (placeholder) { t->views[np].data = (char*)&t->sink; t->views[np].dtype = TPU_DTYPE_F32; t->views[np].rank = 0; }
  return t;
}
static void to_view(tpu_host_view_t* v, const tpu_tensor_t* t) {
  v->data = t->data; v->dtype = t->dtype; v->rank = t->ndim;
  for (int d = 0; d < t->ndim; ++d) { v->sizes[d] = t->sizes[d]; v->strides[d] = t->strides[d]; }
}
static void scalar_of(tpu_host_scalar_t* v, const rec_t* r, int kind, int arg, int index) {
  if (kind == TPU_SBIND_GEN_SEED) { v->i = (int64_t)r->seed; v->f = 0; return; }
  if (kind == TPU_SBIND_GEN_OFFSET) { v->i = (int64_t)r->offset; v->f = 0; return; }
  const tpu_arg_t* a = &r->args[arg];
  if (kind == TPU_SBIND_LIST_DOUBLE) { v->f = a->doubles[index]; v->i = (int64_t)v->f; return; }
  if (a->kind == TPU_ARG_DOUBLE || (a->kind == TPU_ARG_SCALAR && tpu_dtype_is_floating(a->scalar_dtype))) {
    v->f = a->f;
    v->i = (a->f >= -9.2233720368547758e18 && a->f < 9.2233720368547758e18) ? (int64_t)a->f : INT64_MIN;
  } else { v->i = a->i; v->f = (double)a->i; }
}
static const tpu_tensor_t* bound_tensor(const rec_t* r, int src, int arg, int index) {
  return src == TPU_BIND_ARG ? r->args[arg].tensor : src == TPU_BIND_LIST ? &r->args[arg].tensors[index] : &r->outs[arg];
}
static const tpu_tensor_t* value_tensor(const trace_t* tr, int id) { return tr->vals[id].t; }

/* Strict-eager fallback: one task per recorded op, bound exactly as tpu_op_run binds. prof_ns: see
 * TORCH_TPU_TRACE_PROFILE (NULL: off). */
static tpu_status_t enqueue_single(trace_t* tr, const rec_t* r, int64_t* prof_ns) {
  tpu_exec_entry_t* e = r->e;
  static double sink;
  if (!e->exe) TPU_RETURN_IF_ERROR(tpu_exec_entry_materialize(e, r->l, r->name, r->args, r->nargs, r->outs, r->nouts));
  ftask_t* t = ftask_new(e->n_tbind, e->n_sbind, r->nouts + e->n_arg_outs);
  if (!t) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  __atomic_add_fetch(&e->refcount, 1, __ATOMIC_ACQ_REL);
  t->e = e; t->exe = e->exe;
  for (int p = 0; p < e->n_tbind; ++p)
    to_view(&t->views[p], bound_tensor(r, e->tbind[p].src, e->tbind[p].arg, e->tbind[p].index));
  for (int s = 0; s < e->n_sbind; ++s) scalar_of(&t->scalars[s], r, e->sbind[s].kind, e->sbind[s].arg, e->sbind[s].index);
  for (int j = 0; j < r->nouts; ++j) {
    tpu_host_view_t* v = &t->views[t->np + j];
    if (r->outs[j].ndim >= 0) { to_view(v, &r->outs[j]); continue; }
    v->data = (char*)&sink; v->dtype = TPU_DTYPE_F64; v->rank = 0; /* never read back */
  }
  for (int j = 0; j < e->n_arg_outs; ++j) to_view(&t->views[t->np + r->nouts + j], r->args[e->arg_outs[j]].tensor);
  ftask_record(t, r->name);
  t->prof_ns = prof_ns;
  return tpu_rt_queue_enqueue(tr->device, r->name, ftask_run, t, ftask_free);
}

/* ------------------------------------------------------------------ embedding */
struct tpu_trace_embed_s {
  trace_t* tr;
  int op, bound;
  int32_t* val_ir;
  fbind_t* tb; int n_tb, cap_tb;
  fbind_t* sb; int n_sb, cap_sb;
  int64_t* dec; int n_dec, cap_dec; /* size decisions (lw_size_decide): op, a, b, result per decision */
  int sampling;                      /* a size-template sample is taken (build_fused's pre_out): record dec */
  int oom;
};

void tpu_trace_embed_size_decision(tpu_lower_ctx_t* cx, int op, int64_t a, int64_t b, int64_t r) {
  struct tpu_trace_embed_s* em = cx->embed;
  if (!em->sampling) return;
  GROW(em->dec, em->n_dec, em->cap_dec, 4, em->oom = 1; return);
  em->dec[em->n_dec++] = op; em->dec[em->n_dec++] = a; em->dec[em->n_dec++] = b; em->dec[em->n_dec++] = r;
}

int tpu_trace_embed_tparam(tpu_lower_ctx_t* cx, int src, int i, int j, const tpu_tensor_t* t, int dtype) {
  struct tpu_trace_embed_s* em = cx->embed;
  const rec_t* r = &em->tr->ops[em->op];
  int slot = -1;
  if (src == TPU_BIND_OUT) slot = r->out_slot + i;
  else if (i >= 0 && i < r->nargs && r->arg_slot[i] >= 0) slot = r->arg_slot[i] + (src == TPU_BIND_LIST ? j : 0);
  int w = slot >= 0 ? em->tr->wire[slot] : -1;
  int v;
  if (w >= 0) {
    int id = w & ~VIEW_BIT;
    v = em->val_ir[id];
    if (v < 0) return tpu_ir_fail(&cx->g, TPU_ERR(INTERNAL, "%s: fused trace value %d read before it was written", cx->op_name, id));
    if (w & VIEW_BIT) {
      vplan_t P;
      if (!view_plan(em->tr->vals[id].t, t, &P))
        return tpu_ir_fail(&cx->g, TPU_ERR(INTERNAL, "%s: fused trace view of value %d no longer plans", cx->op_name, id));
      v = view_build(&cx->g, v, &P, t);
      if (v < 0) return v;
    }
  } else {
    GROW(em->tb, em->n_tb, em->cap_tb, 1, em->oom = 1; return tpu_ir_fail(&cx->g, TPU_ERR(OUT_OF_MEMORY, "out of host memory")));
    v = tpu_ir_param(&cx->g, t->dtype, t->ndim, t->sizes);
    if (v < 0) return v;
    em->tb[em->n_tb++] = (fbind_t){em->op, (int16_t)src, (int16_t)i, j};
  }
  return dtype < 0 ? v : tpu_ir_convert(&cx->g, v, dtype);
}
int tpu_trace_embed_sparam(tpu_lower_ctx_t* cx, int kind, int i, int j, int dtype) {
  struct tpu_trace_embed_s* em = cx->embed;
  GROW(em->sb, em->n_sb, em->cap_sb, 1, em->oom = 1; return tpu_ir_fail(&cx->g, TPU_ERR(OUT_OF_MEMORY, "out of host memory")));
  int v = tpu_ir_scalar(&cx->g, dtype);
  if (v < 0) return v;
  em->sb[em->n_sb++] = (fbind_t){em->op, (int16_t)kind, (int16_t)i, j};
  return v;
}
tpu_status_t tpu_trace_embed_output(tpu_lower_ctx_t* cx, int k, int arg, int v) {
  struct tpu_trace_embed_s* em = cx->embed;
  const rec_t* r = &em->tr->ops[em->op];
  int id = r->val0 + (arg >= 0 ? r->nouts + k : k);
  if (id < r->val0 || id >= r->val0 + r->n_vals - (r->merge_out >= 0))
    return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: output %d outside the recorded outputs", cx->op_name, k);
  em->val_ir[id] = v;
  em->bound++;
  return TPU_OK;
}

/* ------------------------------------------------------------------ flush */
static void trace_reset(trace_t* tr) {
  for (int j = 0; j < tr->n_ops; ++j) tpu_exec_entry_release(tr->ops[j].e);
  tr->n_ops = tr->n_vals = tr->n_live = tr->n_wire = 0;
  tr->key_len = 0; tr->oom = 0;
  arena_reset(&tr->arena);
  if (atomic_exchange(&tr->pending, 0)) atomic_fetch_sub_explicit(&tpu_rt_traces_pending, 1, memory_order_acq_rel);
}

static void fused_name(const trace_t* tr, char* buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "fused graph (");
  for (int j = 0; j < tr->n_ops && n + 8 < cap; ++j)
    n += (size_t)snprintf(buf + n, cap - n, j ? ", %s" : "%s", tr->ops[j].name);
  if (n + 2 < cap) snprintf(buf + n, cap - n, ")");
}
/* fused_name in a new 256-byte buffer (a cache entry's task name, made once); NULL when out of memory */
static char* fused_name_dup(const trace_t* tr) {
  char* name = malloc(256);
  if (name) fused_name(tr, name, 256);
  return name;
}

/* A capture's size-template sample besides its bindings: the graph before the compiler passes and the
 * size decisions its lowerings declared (lw_size_decide: op, a, b, result each). */
typedef struct { tpu_ir_graph_t* g; int64_t* dec; int n_dec; } pre_t;
static void pre_free(pre_t* p) {
  if (p->g) { tpu_ir_graph_free(p->g); free(p->g); }
  free(p->dec);
  p->g = NULL; p->dec = NULL; p->n_dec = 0;
}

/* Builds the fused graph of the pending trace. pre_out (optional): a copy of the graph before the
 * compiler passes and the size decisions (a capture's size-template sample); out NULL: only that
 * (lowered, not compiled). */
static tpu_status_t build_fused(trace_t* tr, const uint8_t* key, size_t key_len, uint64_t h, fentry_t** out,
                                pre_t* pre_out) {
  double t0 = (double)tpu_rt_now_ns() * 1e-9;
  tpu_lower_ctx_t* cx = calloc(1, sizeof(*cx));
  struct tpu_trace_embed_s em = {.tr = tr, .sampling = pre_out != NULL};
  em.val_ir = malloc((size_t)(tr->n_vals ? tr->n_vals : 1) * sizeof(int32_t));
  if (!cx || !em.val_ir) { free(cx); free(em.val_ir); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  for (int v = 0; v < tr->n_vals; ++v) em.val_ir[v] = -1;
  tpu_ir_graph_init(&cx->g);
  cx->embed = &em;
  tpu_status_t st = TPU_OK;
  for (int j = 0; j < tr->n_ops && st == TPU_OK; ++j) {
    const rec_t* r = &tr->ops[j];
    cx->op_name = r->name; cx->args = r->args; cx->nargs = r->nargs; cx->outs = r->outs; cx->nouts = r->nouts;
    cx->n_checks = 0; cx->n_arg_outs = 0; cx->gen_arg = -1; cx->rng_increment = 0;
    cx->n_tbind = cx->n_sbind = 0;
    em.op = j; em.bound = 0;
    st = r->l->fn(cx);
    if (st == TPU_OK && cx->g.status) { st = cx->g.status; cx->g.status = TPU_OK; }
    int own = r->n_vals - (r->merge_out >= 0);
    if (st == TPU_OK && (em.bound != own || cx->n_arg_outs != r->e->n_arg_outs))
      st = TPU_ERR(INTERNAL, "%s: embedded lowering bound %d of %d outputs", r->name, em.bound, own);
    if (st == TPU_OK && r->merge_out >= 0) {
      const tval_t* V = &tr->vals[r->merge_from];
      const tpu_tensor_t* t = &r->outs[r->merge_out];
      vplan_t P;
      int v = em.val_ir[r->merge_from], w = em.val_ir[r->val0 + r->merge_out];
      if (v < 0 || w < 0 || !view_plan(V->t, t, &P) || P.bcast)
        st = TPU_ERR(INTERNAL, "%s: fused trace write into a pending value no longer plans", r->name);
      else em.val_ir[r->val0 + r->n_vals - 1] = merge_build(&cx->g, v, w, &P, V->t, t);
      if (st == TPU_OK && cx->g.status) { st = cx->g.status; cx->g.status = TPU_OK; }
    }
  }
  if (st == TPU_OK && em.oom) st = TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  fentry_t* f = NULL;
  if (st == TPU_OK) {
    f = calloc(1, sizeof(*f));
    int nout = 0;
    for (int v = 0; v < tr->n_vals; ++v) nout += tr->vals[v].live;
    if (f) { f->outv = malloc((size_t)(nout ? nout : 1) * sizeof(int32_t)); f->key = malloc(key_len); }
    if (!f || !f->outv || !f->key) st = TPU_ERR(OUT_OF_MEMORY, "out of host memory");
    for (int v = 0; v < tr->n_vals && st == TPU_OK; ++v) {
      if (!tr->vals[v].live) continue;
      if (em.val_ir[v] < 0) { st = TPU_ERR(INTERNAL, "fused trace: live value %d has no IR value", v); break; }
      f->outv[f->n_out++] = v;
      tpu_ir_output(&cx->g, em.val_ir[v]);
    }
    if (st == TPU_OK && f->n_out == 0) { /* nothing observable: keep the graph valid */
      tpu_ir_output(&cx->g, tpu_ir_constant(&cx->g, TPU_DTYPE_F32, 0));
    }
    if (st == TPU_OK && cx->g.status) { st = cx->g.status; cx->g.status = TPU_OK; }
  }
  if (st == TPU_OK && pre_out) {
    tpu_ir_graph_t* pre = malloc(sizeof(*pre));
    if (pre && tpu_ir_graph_clone(&cx->g, pre) == TPU_OK) {
      pre_out->g = pre;
      pre_out->dec = em.dec; pre_out->n_dec = em.n_dec; em.dec = NULL;
    } else free(pre); /* no sample: the size template is skipped for this capture */
  }
  if (st == TPU_OK && !out) { free(f->outv); free(f->key); free(f); f = NULL; }
  else if (st == TPU_OK) {
    if (!(f->name = fused_name_dup(tr))) st = TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  }
  if (st == TPU_OK && f) st = tpu_compiler_compile(&cx->g, f->name, &f->exe); /* passes + host plan, as every compile */
  if (st == TPU_OK && f) {
    memcpy(f->key, key, key_len);
    f->key_len = key_len; f->hash = h; f->refcount = 1;
    f->tb = em.tb; f->n_tb = em.n_tb; em.tb = NULL;
    f->sb = em.sb; f->n_sb = em.n_sb; em.sb = NULL;
    tpu_metrics_add_compile((double)tpu_rt_now_ns() * 1e-9 - t0);
    *out = f;
  } else if (f) {
    free(f->outv); free(f->key); free(f->name); free(f);
  }
  free(em.tb); free(em.sb); free(em.dec); free(em.val_ir);
  tpu_ir_graph_free(&cx->g);
  free(cx);
  return st;
}

/* ------------------------------------------------------------------ disk level ("graph" namespace) */
#define DISK_NS "graph"
static int same_shape(const tpu_ir_type_t* t, const tpu_tensor_t* x) {
  if (!x || x->ndim != t->rank || x->dtype != t->dtype) return 0;
  for (int d = 0; d < t->rank; ++d) if (x->sizes[d] != t->dims[d]) return 0;
  return 1;
}
/* The tables of a payload must fit this trace: every binding names an argument of the right
 * kind whose tensor has the parameter's type, outputs are exactly the live values. */
static tpu_status_t payload_check(const trace_t* tr, const tpu_graph_payload_t* p) {
  const tpu_ir_graph_t* g = &p->g;
  for (int v = 0; v < g->n_ops; ++v) {
    const tpu_ir_op_t* op = &g->ops[v];
    if (op->opcode != TPU_IR_PARAM) continue;
    const fbind_t* b = &p->tb[op->i0];
    const tpu_tensor_t* t = NULL;
    if (b->op < 0 || b->op >= tr->n_ops) return TPU_ERR(INVALID_ARGUMENT, "parameter %d: op", (int)op->i0);
    const rec_t* r = &tr->ops[b->op];
    if (b->src == TPU_BIND_ARG) {
      if (b->arg >= 0 && b->arg < r->nargs && r->args[b->arg].kind == TPU_ARG_TENSOR) t = r->args[b->arg].tensor;
    } else if (b->src == TPU_BIND_LIST) {
      if (b->arg >= 0 && b->arg < r->nargs && r->args[b->arg].kind == TPU_ARG_TENSOR_LIST && b->index >= 0 &&
          b->index < r->args[b->arg].len)
        t = &r->args[b->arg].tensors[b->index];
    } else if (b->src == TPU_BIND_OUT) {
      if (b->arg >= 0 && b->arg < r->nouts) t = &r->outs[b->arg];
    }
    if (!same_shape(&op->type, t)) return TPU_ERR(INVALID_ARGUMENT, "parameter %d does not match its tensor", (int)op->i0);
  }
  for (int s = 0; s < p->n_sb; ++s) {
    const fbind_t* b = &p->sb[s];
    if (b->op < 0 || b->op >= tr->n_ops) return TPU_ERR(INVALID_ARGUMENT, "scalar %d: op", s);
    const rec_t* r = &tr->ops[b->op];
    int ok = b->src == TPU_SBIND_GEN_SEED || b->src == TPU_SBIND_GEN_OFFSET ||
             (b->src == TPU_SBIND_VALUE && b->arg >= 0 && b->arg < r->nargs) ||
             (b->src == TPU_SBIND_LIST_DOUBLE && b->arg >= 0 && b->arg < r->nargs &&
              r->args[b->arg].kind == TPU_ARG_DOUBLE_LIST && b->index >= 0 && b->index < r->args[b->arg].len);
    if (!ok) return TPU_ERR(INVALID_ARGUMENT, "scalar %d binding", s);
  }
  int k = 0;
  for (int v = 0; v < tr->n_vals; ++v) {
    if (!tr->vals[v].live) continue;
    if (k >= p->n_out || p->outv[k] != v || !same_shape(tpu_ir_type(g, g->outputs[k]), tr->vals[v].t))
      return TPU_ERR(INVALID_ARGUMENT, "output %d does not match the live values", k);
    k++;
  }
  if (k != p->n_out) return TPU_ERR(INVALID_ARGUMENT, "output count");
  if (k == 0) { /* the placeholder: written into a double */
    const tpu_ir_type_t* t = tpu_ir_type(g, g->outputs[0]);
    if (t->rank != 0 || t->dtype != TPU_DTYPE_F32) return TPU_ERR(INVALID_ARGUMENT, "placeholder output");
  }
  return TPU_OK;
}
/* A fused executable from the disk level, or NULL (miss; a payload that does not fit is
 * rejected: counted, its file removed). Not a compile: no lowering, no passes. */
static fentry_t* disk_load(const trace_t* tr, const uint8_t* key, size_t key_len, uint64_t h) {
  uint8_t* buf = NULL;
  size_t len = 0;
  if (!tpu_disk_cache_enabled() || !tpu_disk_cache_get(DISK_NS, key, key_len, &buf, &len)) return NULL;
  uint64_t t0 = tpu_rt_now_ns();
  tpu_graph_payload_t p;
  tpu_status_t st = tpu_graph_payload_decode(buf, len, &p);
  free(buf);
  if (!st) st = payload_check(tr, &p);
  fentry_t* f = st ? NULL : calloc(1, sizeof(*f));
  if (!st && (!f || !(f->key = malloc(key_len)))) st = TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  if (!st) st = tpu_host_compile(&p.g, &f->exe);
  if (!st) {
    memcpy(f->key, key, key_len);
    f->key_len = key_len; f->hash = h; f->refcount = 1;
    f->tb = p.tb; f->n_tb = p.n_tb; p.tb = NULL;
    f->sb = p.sb; f->n_sb = p.n_sb; p.sb = NULL;
    f->outv = p.outv; f->n_out = p.n_out; p.outv = NULL;
    f->name = fused_name_dup(tr); /* NULL (out of memory): the task is named at each flush instead */
  }
  tpu_graph_payload_free(&p);
  tpu_disk_cache_add_load_seconds((double)(tpu_rt_now_ns() - t0) * 1e-9);
  if (st) {
    tpu_status_free(st);
    if (f) { free(f->key); free(f); }
    tpu_disk_cache_reject(DISK_NS, key, key_len);
    return NULL;
  }
  return f;
}
static void disk_store(const fentry_t* f) {
  if (!tpu_disk_cache_enabled()) return;
  uint8_t* buf = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_graph_payload_encode(tpu_host_exe_graph(f->exe), f->tb, f->n_tb, f->sb, f->n_sb, f->outv,
                                             f->n_out, &buf, &len);
  if (st) { tpu_status_free(st); return; }
  tpu_disk_cache_put(DISK_NS, f->key, f->key_len, buf, len);
  free(buf);
}

static tpu_status_t fail_task(void* ctx) { return tpu_status_make(TPU_STATUS_INTERNAL, "%s", (const char*)ctx); }

typedef struct tpu_capture_s tpu_capture_t;
static tpu_status_t capture_make(trace_t* tr, fentry_t* f, tpu_capture_t** out, pre_t* pre);
static int capture_keeps_graph(void);

/* Enqueues the pending trace (mu held). Never loses work: if the fused graph cannot be built
 * the ops run one by one; an enqueue failure is returned (err_name, if given: the trace's name then). */
static tpu_status_t flush_locked_named(trace_t* tr, tpu_capture_t** capture_out, char* err_name, size_t err_cap) {
  if (tr->n_ops == 0) return TPU_OK;
  int prev = tl_flushing;
  tl_flushing = tr->device;
  tpu_status_t st = TPU_OK;
  size_t base = tr->key_len;
  for (int v = 0; v < tr->n_vals; v += 8) {
    uint8_t b = 0;
    for (int k = 0; k < 8 && v + k < tr->n_vals; ++k) b |= (uint8_t)(tr->vals[v + k].live << k);
    key_put(tr, &b, 1);
  }
  fentry_t* f = NULL;
  pre_t pre = {0}; /* a capture's graph before the passes and its size decisions (capture_keeps_graph) */
  int64_t* prof_ns = NULL;
  if (!tr->oom) {
    uint64_t h = hash_bytes(tr->key, tr->key_len);
    prof_t* prof = capture_out ? NULL : prof_slot(h);
    f = cache_lookup(h, tr->key, tr->key_len);
    atomic_fetch_add(f ? &g_st_hits : &g_st_misses, 1);
    if (!f && (f = disk_load(tr, tr->key, tr->key_len, h))) cache_insert(f);
    if (!f) {
      tpu_status_t bst = build_fused(tr, tr->key, tr->key_len, h, &f, capture_keeps_graph() ? &pre : NULL);
      if (bst) { /* strict fallback below; remembered so the same trace does not try again */
        tpu_status_free(bst);
        f = calloc(1, sizeof(*f));
        if (f && (f->key = malloc(tr->key_len))) {
          memcpy(f->key, tr->key, tr->key_len);
          f->key_len = tr->key_len; f->hash = h; f->refcount = 1;
          cache_insert(f);
        } else { free(f); f = NULL; }
      } else {
        disk_store(f);
        cache_insert(f);
      }
    }
    if (f && !f->exe) { fentry_release(f); f = NULL; }
    if (f && !pre.g && capture_out && capture_keeps_graph()) /* a cached executable: lower once more for the sample */
      tpu_status_free(build_fused(tr, tr->key, tr->key_len, h, NULL, &pre));
    if (prof && f) { /* warm-up runs untimed, then fused (even) and op by op (odd) alternate */
      if (!prof->name[0]) fused_name(tr, prof->name, sizeof prof->name);
      int run = prof->runs++;
      if (run >= 2) {
        prof_ns = &prof->ns[run & 1];
        __atomic_add_fetch(&prof->n[run & 1], 1, __ATOMIC_RELAXED);
        if (run & 1) { fentry_release(f); f = NULL; }
      }
    }
  }
  tr->key_len = base;
  atomic_fetch_add(&g_st_flushes, 1);
  atomic_fetch_add(&g_st_ops, (uint64_t)tr->n_ops);
  if (!f && !prof_ns) atomic_fetch_add(&g_st_fallbacks, 1);
  if (f) {
    ftask_t* t = ftask_take(f);
    if (!t) t = ftask_new(f->n_tb, f->n_sb, f->n_out);
    if (!t) { fentry_release(f); f = NULL; st = TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
    else {
      t->f = f; t->exe = f->exe;
      for (int p = 0; p < f->n_tb; ++p) {
        const fbind_t* b = &f->tb[p];
        to_view(&t->views[p], bound_tensor(&tr->ops[b->op], b->src, b->arg, b->index));
      }
      for (int s = 0; s < f->n_sb; ++s) {
        const fbind_t* b = &f->sb[s];
        scalar_of(&t->scalars[s], &tr->ops[b->op], b->src, b->arg, b->index);
      }
      size_t scratch = 0;
      for (int k = 0; k < f->n_out; ++k) {
        const tpu_tensor_t* vt = value_tensor(tr, f->outv[k]);
        to_view(&t->views[f->n_tb + k], vt);
        if (tr->vals[f->outv[k]].detached) {
          uintptr_t lo, hi;
          tensor_range(vt, &lo, &hi);
          scratch += (hi - lo + 63) & ~(size_t)63;
        }
      }
      if (scratch && !(t->scratch = malloc(scratch))) { /* never run into reused memory */
        ftask_free(t); t = NULL; f = NULL;
        st = TPU_ERR(OUT_OF_MEMORY, "out of host memory");
      }
      size_t off = 0;
      for (int k = 0; t && t->scratch && k < f->n_out; ++k) {
        if (!tr->vals[f->outv[k]].detached) continue;
        const tpu_tensor_t* vt = value_tensor(tr, f->outv[k]);
        uintptr_t lo, hi;
        tensor_range(vt, &lo, &hi);
        t->views[f->n_tb + k].data = (char*)t->scratch + off + ((uintptr_t)vt->data - lo);
        off += (hi - lo + 63) & ~(size_t)63;
      }
      if (t && capture_out) {
        __atomic_add_fetch(&f->refcount, 1, __ATOMIC_ACQ_REL);
        st = capture_make(tr, f, capture_out, &pre);
      }
      if (t) {
        char buf[256];
        const char* name = f->name;
        if (!name) { fused_name(tr, buf, sizeof buf); name = buf; }
        ftask_record(t, name);
        t->prof_ns = prof_ns;
        tpu_status_t est = tpu_rt_queue_enqueue(tr->device, name, ftask_run, t, ftask_free);
        if (est) { if (!st) st = est; else tpu_status_free(est); }
      }
    }
  } else {
    if (capture_out) { *capture_out = NULL; }
    for (int j = 0; j < tr->n_ops && st == TPU_OK; ++j) st = enqueue_single(tr, &tr->ops[j], prof_ns);
  }
  pre_free(&pre);
  if (st && err_name) fused_name(tr, err_name, err_cap);
  trace_reset(tr);
  tl_flushing = prev;
  return st;
}

static tpu_status_t flush_locked(trace_t* tr, tpu_capture_t** capture_out) {
  return flush_locked_named(tr, capture_out, NULL, 0);
}

/* Flush from a runtime hook: errors become a failing task (reported at the next synchronize). */
static void flush_reporting(trace_t* tr, const char* why) {
  if (tr->capturing && !tr->capture_broken) {
    tr->capture_broken = 1;
    snprintf(tr->capture_reason, sizeof tr->capture_reason, "the trace was flushed while capturing (%s)", why);
  }
  char name[256];
  tpu_status_t st = flush_locked_named(tr, NULL, name, sizeof name);
  if (!st) return;
  char* msg = malloc(512);
  if (msg) {
    snprintf(msg, 512, "%s", tpu_status_message(st));
    int prev = tl_flushing;
    tl_flushing = tr->device;
    tpu_status_t e2 = tpu_rt_queue_enqueue(tr->device, name, fail_task, msg, free);
    tl_flushing = prev;
    tpu_status_free(e2);
  }
  tpu_status_free(st);
}

static void hook_flush(int device) {
  if (device < 0 || device >= g_ntraces || tl_flushing == device) return;
  trace_t* tr = &g_traces[device];
  if (!atomic_load_explicit(&tr->pending, memory_order_acquire)) return;
  pthread_mutex_lock(&tr->mu);
  flush_reporting(tr, "device work outside the trace");
  pthread_mutex_unlock(&tr->mu);
}

/* Layout sensitivity. A fused graph hands an internal value to its readers as a contiguous
 * temporary, strict eager as the tensor it wrote. Elementwise and data-movement readers give the
 * same bits either way; a reduction (or GEMM, conv, custom kernel...) may sum in an order that
 * follows its operand's strides. So a non-contiguous value that such an op read stays an output
 * (written in the tensor's own layout) or, when that is impossible, the trace flushes. */
static int exact_for_any_layout(int opcode) {
  return tpu_ir_is_elementwise(opcode) || tpu_ir_is_view(opcode) || opcode == TPU_IR_CONCAT || opcode == TPU_IR_PAD ||
         opcode == TPU_IR_GATHER || opcode == TPU_IR_INDEX_SELECT;
}
/* Whether the single-op graph of e reads its tensor (src, arg, index) through a layout-sensitive op. */
static int param_sensitive(const tpu_exec_entry_t* e, int src, int arg, int index) {
  const tpu_ir_graph_t* g = e->exe ? tpu_host_exe_graph(e->exe) : NULL;
  if (!g) return 1;
  uint8_t* reach = calloc((size_t)(g->n_ops ? g->n_ops : 1), 1);
  if (!reach) return 1;
  int any = 0, sens = 0;
  for (int p = 0; p < e->n_tbind; ++p) {
    const tpu_tensor_bind_t* b = &e->tbind[p];
    if (b->src != src || b->arg != arg || (src == TPU_BIND_LIST && b->index != index)) continue;
    for (int v = 0; v < g->n_ops; ++v)
      if (g->ops[v].opcode == TPU_IR_PARAM && g->ops[v].i0 == p) { reach[v] = 1; any = 1; }
  }
  for (int v = 0; any && v < g->n_ops && !sens; ++v) { /* topological order: one forward sweep */
    const tpu_ir_op_t* op = &g->ops[v];
    int from = 0;
    for (int k = 0; k < op->n_in && !from; ++k) from = reach[tpu_ir_operand(g, v, k)];
    if (!from) continue;
    if (!exact_for_any_layout(op->opcode)) sens = 1;
    reach[v] = 1;
  }
  free(reach);
  return sens;
}
/* Whether a recorded op read value `id` through a layout-sensitive op. */
static int read_sensitively(const trace_t* tr, int id) {
  if (!tr->vals[id].read) return 0;
  for (int j = tr->vals[id].op + 1; j < tr->n_ops; ++j) {
    const rec_t* r = &tr->ops[j];
    if (!r->e->exe) tpu_status_free(tpu_exec_entry_materialize(r->e, r->l, r->name, r->args, r->nargs, r->outs, r->nouts)); /* failed: sensitive */
    for (int i = 0; i < r->nargs; ++i) {
      const tpu_arg_t* a = &r->args[i];
      int n = a->kind == TPU_ARG_TENSOR ? 1 : a->kind == TPU_ARG_TENSOR_LIST ? (int)a->len : 0;
      for (int k = 0; k < n && r->arg_slot[i] >= 0; ++k) {
        int w = tr->wire[r->arg_slot[i] + k];
        if (w >= 0 && (w & ~VIEW_BIT) == id &&
            param_sensitive(r->e, a->kind == TPU_ARG_TENSOR ? TPU_BIND_ARG : TPU_BIND_LIST, i, k))
          return 1;
      }
    }
    for (int k = 0; k < r->nouts; ++k) {
      int w = tr->wire[r->out_slot + k];
      if (w >= 0 && (w & ~VIEW_BIT) == id && param_sensitive(r->e, TPU_BIND_OUT, k, 0)) return 1;
    }
  }
  return 0;
}
static bool hook_free(int device, uintptr_t lo, uintptr_t hi) {
  if (device < 0 || device >= g_ntraces) return false;
  trace_t* tr = &g_traces[device];
  if (!atomic_load_explicit(&tr->pending, memory_order_acquire)) return false;
  if (tl_flushing == device) return true; /* cannot happen (flushing never frees); be safe */
  pthread_mutex_lock(&tr->mu);
  bool pending = tr->n_ops > 0;
  for (int i = 0; i < tr->n_live;) {
    tval_t* v = &tr->vals[tr->live[i]];
    /* A freed non-contiguous value that an op read through a layout-sensitive op stays an
     * output (written as strict eager writes it), so that reader sees strict eager's layout. */
    if (v->lo >= lo && v->lo < hi) {
      if (is_contiguous(v->t) || !read_sensitively(tr, tr->live[i])) { v->live = 0; tr->live[i] = tr->live[--tr->n_live]; continue; }
      /* its memory may be reused by a later op: the flush writes it to scratch memory instead */
      v->detached = 1; v->lo = v->hi = 0;
    }
    ++i;
  }
  pthread_mutex_unlock(&tr->mu);
  return pending;
}

static void flush_all_atexit(void) {
  for (int d = 0; d < g_ntraces; ++d) {
    trace_t* tr = &g_traces[d];
    if (!atomic_load(&tr->pending)) continue;
    pthread_mutex_lock(&tr->mu);
    flush_reporting(tr, "process exit");
    pthread_mutex_unlock(&tr->mu);
    tpu_status_free(tpu_rt_synchronize(d));
  }
}

static void trace_init(void) {
  g_init_error = tpu_rt_init();
  if (g_init_error) return;
  const char* v = getenv("TORCH_TPU_FUSED_EAGER");
  bool on = false;
  if (v && *v) {
    g_init_error = tpu_rt_env_parse_bool("TORCH_TPU_FUSED_EAGER", v, &on);
    if (g_init_error) return;
  }
  int n = tpu_rt_device_count();
  g_traces = calloc((size_t)n, sizeof(trace_t));
  if (!g_traces) { g_init_error = TPU_ERR(OUT_OF_MEMORY, "out of host memory"); return; }
  for (int d = 0; d < n; ++d) { pthread_mutex_init(&g_traces[d].mu, NULL); g_traces[d].device = d; }
  g_ntraces = n;
  tpu_rt_set_trace_hooks(hook_flush, hook_free);
  atexit(flush_all_atexit);
  if (on && !tpu_rt_launch_blocking()) atomic_fetch_or(&tpu_trace_mode, 1);
}
static tpu_status_t trace_init_once_status(void) {
  pthread_once(&g_once, trace_init);
  return g_init_error ? tpu_status_make(tpu_status_code(g_init_error), "%s", tpu_status_message(g_init_error)) : TPU_OK;
}

/* ------------------------------------------------------------------ recording */
static _Atomic int g_inited;
int tpu_trace_should_record(int device) {
  if (__builtin_expect(!atomic_load_explicit(&g_inited, memory_order_acquire), 0)) {
    tpu_status_free(trace_init_once_status()); /* an invalid TORCH_TPU_FUSED_EAGER is reported by record */
    atomic_store(&g_inited, 1);
  }
  int mode = atomic_load_explicit(&tpu_trace_mode, memory_order_relaxed);
  if (!mode || tpu_rt_queue_current_device() >= 0 || tl_flushing >= 0) return 0;
  if (mode & 1) return 1;
  return device >= 0 && device < g_ntraces && g_traces[device].capturing;
}

int tpu_trace_recording(int device) { return tpu_trace_should_record(device); }
int tpu_trace_capturing(int device) {
  if (!(atomic_load_explicit(&tpu_trace_mode, memory_order_relaxed) & 2) || device < 0 || device >= g_ntraces) return 0;
  if (tpu_rt_queue_current_device() >= 0 || tl_flushing >= 0) return 0; /* not recorded (tpu_trace_should_record) */
  return __atomic_load_n(&g_traces[device].capturing, __ATOMIC_RELAXED);
}

static tpu_status_t copy_record(trace_t* tr, rec_t* r, const char* name, const tpu_arg_t* args, int nargs,
                                const tpu_tensor_t* outs, int nouts) {
  arena_t* A = &tr->arena;
  size_t nl = strlen(name) + 1;
  char* nm = arena_alloc(A, nl);
  r->args = arena_alloc(A, (size_t)(nargs ? nargs : 1) * sizeof(tpu_arg_t));
  r->outs = arena_alloc(A, (size_t)(nouts ? nouts : 1) * sizeof(tpu_tensor_t));
  r->arg_slot = arena_alloc(A, (size_t)(nargs ? nargs : 1) * sizeof(int32_t));
  if (!nm || !r->args || !r->outs || !r->arg_slot) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  memcpy(nm, name, nl); r->name = nm;
  if (nargs) memcpy(r->args, args, (size_t)nargs * sizeof(tpu_arg_t));
  if (nouts) memcpy(r->outs, outs, (size_t)nouts * sizeof(tpu_tensor_t));
  r->nargs = nargs; r->nouts = nouts;
  for (int i = 0; i < nargs; ++i) {
    tpu_arg_t* a = &r->args[i];
    if (a->kind == TPU_ARG_TENSOR && a->tensor) {
      tpu_tensor_t* t = arena_alloc(A, sizeof(tpu_tensor_t));
      if (!t) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
      *t = *a->tensor; a->tensor = t;
    } else if (a->kind == TPU_ARG_TENSOR_LIST && a->len > 0) {
      tpu_tensor_t* t = arena_alloc(A, (size_t)a->len * sizeof(tpu_tensor_t));
      if (!t) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
      memcpy(t, a->tensors, (size_t)a->len * sizeof(tpu_tensor_t)); a->tensors = t;
    } else if ((a->kind == TPU_ARG_INT_LIST || a->kind == TPU_ARG_BOOL_LIST) && a->len > 0) {
      int64_t* p = arena_alloc(A, (size_t)a->len * sizeof(int64_t));
      if (!p) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
      memcpy(p, a->ints, (size_t)a->len * sizeof(int64_t)); a->ints = p;
    } else if (a->kind == TPU_ARG_DOUBLE_LIST && a->len > 0) {
      double* p = arena_alloc(A, (size_t)a->len * sizeof(double));
      if (!p) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
      memcpy(p, a->doubles, (size_t)a->len * sizeof(double)); a->doubles = p;
    } else if (a->kind == TPU_ARG_STRING && a->str) {
      size_t n = strlen(a->str) + 1;
      char* p = arena_alloc(A, n);
      if (!p) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
      memcpy(p, a->str, n); a->str = p;
    }
  }
  return TPU_OK;
}

/* Wiring of one input view: value id (| VIEW_BIT for a view of it), -1 external, -2 conflict
 * (flush needed). */
static int wire_of(const trace_t* tr, const tpu_tensor_t* t) {
  if (t->ndim < 0) return -1;
  int over = -1;
  int w = find_live2(tr, t, &over);
  if (w != -2) return w;
  uintptr_t lo, hi;
  tensor_range(t, &lo, &hi);
  const tval_t* V = &tr->vals[over];
  vplan_t P;
  if (lo < V->lo || hi > V->hi || !view_plan(V->t, t, &P)) return -2;
  /* t must not also overlap another live value */
  for (int i = 0; i < tr->n_live; ++i) {
    const tval_t* u = &tr->vals[tr->live[i]];
    if (tr->live[i] != over && u->lo < hi && lo < u->hi) return -2;
  }
  return over | VIEW_BIT;
}
/* Key bytes of a view wire: the view's layout relative to its value's. */
static void key_view(trace_t* tr, int w, const tpu_tensor_t* t) {
  const tpu_tensor_t* V = tr->vals[w & ~VIEW_BIT].t;
  int64_t buf[2 + 2 * TPU_MAX_DIMS];
  int n = 0;
  buf[n++] = ((char*)t->data - (char*)V->data) / (int64_t)tpu_dtype_size(t->dtype);
  buf[n++] = t->ndim;
  for (int d = 0; d < t->ndim; ++d) buf[n++] = t->sizes[d] > 1 ? t->strides[d] : 0;
  for (int d = 0; d < V->ndim; ++d) buf[n++] = V->sizes[d] > 1 ? V->strides[d] : 0;
  key_put(tr, buf, (size_t)n * sizeof(int64_t));
}

/* Whether recording the op now needs a flush first (conflicting overlaps, limits). */
static int needs_flush(const trace_t* tr, const tpu_arg_t* args, int nargs, const tpu_tensor_t* outs, int nouts,
                       const tpu_exec_entry_t* e, const char** why) {
  if (tr->n_ops == 0) return 0;
  if (tr->n_ops >= (tr->capturing ? CAPTURE_MAX_OPS : TRACE_MAX_OPS)) { *why = "op limit"; return 1; }
  if (tr->n_live + nouts + e->n_arg_outs > TRACE_MAX_OUTPUTS) { *why = "output limit"; return 1; }
  for (int i = 0; i < nargs; ++i) {
    if (args[i].kind == TPU_ARG_TENSOR && args[i].tensor && wire_of(tr, args[i].tensor) == -2) { *why = "partial overlap"; return 1; }
    if (args[i].kind == TPU_ARG_TENSOR_LIST)
      for (int64_t j = 0; j < args[i].len; ++j)
        if (wire_of(tr, &args[i].tensors[j]) == -2) { *why = "partial overlap"; return 1; }
  }
  /* A write into a box of one live value (cat into a slice, out= views, slice assignment) is
   * recorded as that value with the box replaced; at most one per op. */
  int merges = 0;
  for (int k = 0; k < nouts; ++k) {
    if (outs[k].ndim < 0 || find_live(tr, &outs[k]) != -2) continue;
    int w = wire_of(tr, &outs[k]);
    vplan_t P;
    if (w < 0 || !(w & VIEW_BIT) || merges++ || !view_plan(tr->vals[w & ~VIEW_BIT].t, &outs[k], &P) || P.bcast) {
      *why = "partial overlap"; return 1;
    }
    const tval_t* V = &tr->vals[w & ~VIEW_BIT];
    if (!is_contiguous(V->t) && read_sensitively(tr, w & ~VIEW_BIT)) { *why = "overwriting a non-contiguous value"; return 1; }
  }
  for (int k = 0; k < e->n_arg_outs; ++k) {
    const tpu_tensor_t* t = args[e->arg_outs[k]].tensor;
    if (t && t->ndim >= 0 && find_live(tr, t) == -2) { *why = "partial overlap"; return 1; }
  }
  /* Overwriting a non-contiguous value that an op read would make it internal: the fused graph
   * would hand its readers a contiguous temporary, and a reduction sums in an order that follows
   * its operand's strides. Flushed instead, so readers see strict eager's layout. */
  for (int k = 0; k < nouts + e->n_arg_outs; ++k) {
    const tpu_tensor_t* t = k < nouts ? &outs[k] : args[e->arg_outs[k - nouts]].tensor;
    int id = t && t->ndim >= 0 ? find_live(tr, t) : -1;
    if (id >= 0 && !is_contiguous(tr->vals[id].t) && read_sensitively(tr, id)) { *why = "overwriting a non-contiguous value"; return 1; }
  }
  return 0;
}

/* internal: the value never becomes live (a box written into a live value: see merge_out) */
static tpu_status_t add_value(trace_t* tr, int op, const tpu_tensor_t* t, int internal) {
  GROW(tr->vals, tr->n_vals, tr->cap_vals, 1, return TPU_ERR(OUT_OF_MEMORY, "out of host memory"));
  GROW(tr->live, tr->n_live, tr->cap_live, 1, return TPU_ERR(OUT_OF_MEMORY, "out of host memory"));
  int id = tr->n_vals++;
  tval_t* v = &tr->vals[id];
  v->t = t; v->op = op; v->live = 0; v->read = 0; v->detached = 0;
  tensor_range(t, &v->lo, &v->hi);
  if (v->lo == v->hi || internal) return TPU_OK; /* empty or absent: nothing to write */
  int old = find_live(tr, t);
  if (old >= 0) live_remove(tr, old);
  v->live = 1;
  tr->live[tr->n_live++] = id;
  return TPU_OK;
}

tpu_status_t tpu_trace_record(int device, const tpu_lowering_t* l, const char* op_name, const tpu_arg_t* args,
                              int nargs, const tpu_tensor_t* outs, int nouts, tpu_exec_entry_t* e) {
  TPU_RETURN_IF_ERROR(trace_init_once_status());
  trace_t* tr = &g_traces[device];
  /* RNG counters are reserved now, in eager order, so random streams match strict eager. */
  uint64_t seed = 0, offset = 0;
  tpu_rt_generator_t* g = NULL;
  if (e->rng_increment) {
    g = e->gen_arg >= 0 && args[e->gen_arg].kind == TPU_ARG_GENERATOR && args[e->gen_arg].generator
            ? args[e->gen_arg].generator : tpu_rt_default_generator(device);
    if (!g) return TPU_ERR(INVALID_ARGUMENT, "%s: no generator for device %d", op_name, device);
  }
  pthread_mutex_lock(&tr->mu);
  const char* why = NULL;
  tpu_status_t st = TPU_OK;
  if (e->key_len && e->key[0] < 8) {
    /* a non-default matmul precision leads the op's key: such ops run unfused (after the trace) */
    if (tr->capturing && !tr->capture_broken) {
      tr->capture_broken = 1;
      snprintf(tr->capture_reason, sizeof tr->capture_reason, "%s runs under a non-default matmul precision", op_name);
    }
    st = flush_locked(tr, NULL);
    if (g) tpu_rt_generator_reserve(g, e->rng_increment, &seed, &offset);
    rec_t one = {.l = l, .e = e, .name = op_name, .args = (tpu_arg_t*)args, .outs = (tpu_tensor_t*)outs,
                 .nargs = nargs, .nouts = nouts, .seed = seed, .offset = offset, .gen = g};
    int prev = tl_flushing;
    tl_flushing = device;
    if (!st) st = enqueue_single(tr, &one, NULL);
    tl_flushing = prev;
    pthread_mutex_unlock(&tr->mu);
    return st;
  }
  if (needs_flush(tr, args, nargs, outs, nouts, e, &why)) {
    if (tr->capturing && !tr->capture_broken) {
      tr->capture_broken = 1;
      snprintf(tr->capture_reason, sizeof tr->capture_reason, "the trace was flushed while capturing (%s at %s)", why, op_name);
    }
    st = flush_locked(tr, NULL);
  }
  if (g) tpu_rt_generator_reserve(g, e->rng_increment, &seed, &offset);
  if (!st) {
    GROW(tr->ops, tr->n_ops, tr->cap_ops, 1, st = TPU_ERR(OUT_OF_MEMORY, "out of host memory"));
  }
  rec_t* r = NULL;
  if (!st) {
    r = &tr->ops[tr->n_ops];
    memset(r, 0, sizeof(*r));
    st = copy_record(tr, r, op_name, args, nargs, outs, nouts);
  }
  if (!st) {
    r->l = l; r->e = e; r->seed = seed; r->offset = offset; r->gen = g;
    r->n_vals = nouts + e->n_arg_outs;
    /* wiring (before this op's outputs become live) */
    int nslots = nouts;
    for (int i = 0; i < nargs; ++i) {
      r->arg_slot[i] = -1;
      if (r->args[i].kind == TPU_ARG_TENSOR) nslots += 1;
      else if (r->args[i].kind == TPU_ARG_TENSOR_LIST) nslots += (int)r->args[i].len;
    }
    GROW(tr->wire, tr->n_wire, tr->cap_wire, nslots, st = TPU_ERR(OUT_OF_MEMORY, "out of host memory"));
    if (!st) {
      int s0 = tr->n_wire, s = s0;
      for (int i = 0; i < nargs; ++i) {
        const tpu_arg_t* a = &r->args[i];
        if (a->kind == TPU_ARG_TENSOR) { r->arg_slot[i] = s; tr->wire[s++] = a->tensor ? wire_of(tr, a->tensor) : -1; }
        else if (a->kind == TPU_ARG_TENSOR_LIST) {
          r->arg_slot[i] = s;
          for (int64_t j = 0; j < a->len; ++j) tr->wire[s++] = wire_of(tr, &a->tensors[j]);
        }
      }
      r->out_slot = s;
      for (int k = 0; k < nouts; ++k) tr->wire[s++] = wire_of(tr, &r->outs[k]); /* read back by lw_out_input */
      for (int i = s0; i < s; ++i) {
        if (tr->wire[i] < -1) tr->wire[i] = -1; /* (a flush cleared conflicts) */
        if (tr->wire[i] >= 0) tr->vals[tr->wire[i] & ~VIEW_BIT].read = 1;
      }
      tr->n_wire = s;
      uint32_t hdr[3] = {(uint32_t)e->key_len, (uint32_t)(s - s0), (uint32_t)tr->n_vals};
      key_put(tr, hdr, sizeof hdr);
      key_put(tr, e->key, e->key_len);
      key_put(tr, tr->wire + s0, (size_t)(s - s0) * sizeof(int32_t));
      for (int i = 0, q = s0; i < nargs; ++i) { /* layouts of view wires */
        const tpu_arg_t* a = &r->args[i];
        if (a->kind == TPU_ARG_TENSOR) { if (tr->wire[q] >= 0 && (tr->wire[q] & VIEW_BIT)) key_view(tr, tr->wire[q], a->tensor); q++; }
        else if (a->kind == TPU_ARG_TENSOR_LIST)
          for (int64_t j = 0; j < a->len; ++j, ++q) if (tr->wire[q] >= 0 && (tr->wire[q] & VIEW_BIT)) key_view(tr, tr->wire[q], &a->tensors[j]);
      }
      for (int k = 0; k < nouts; ++k) { int q = r->out_slot + k; if (tr->wire[q] >= 0 && (tr->wire[q] & VIEW_BIT)) key_view(tr, tr->wire[q], &r->outs[k]); }
      r->val0 = tr->n_vals;
      r->merge_out = r->merge_from = -1;
      for (int k = 0; k < nouts; ++k) {
        int w = tr->wire[r->out_slot + k];
        if (w >= 0 && (w & VIEW_BIT)) { r->merge_out = k; r->merge_from = w & ~VIEW_BIT; }
      }
      int op = tr->n_ops;
      for (int k = 0; k < nouts && !st; ++k) st = add_value(tr, op, &r->outs[k], k == r->merge_out);
      for (int k = 0; k < e->n_arg_outs && !st; ++k) st = add_value(tr, op, r->args[e->arg_outs[k]].tensor, 0);
      if (!st && r->merge_out >= 0) { /* the written live value, box replaced */
        st = add_value(tr, op, tr->vals[r->merge_from].t, 0);
        r->n_vals++;
      }
      if (!st) {
        __atomic_add_fetch(&e->refcount, 1, __ATOMIC_ACQ_REL);
        if (tr->n_ops++ == 0) atomic_fetch_add_explicit(&tpu_rt_traces_pending, 1, memory_order_acq_rel);
        atomic_store_explicit(&tr->pending, tr->n_ops, memory_order_release);
        tpu_metrics_add_ops(1);
      } else {
        tr->n_vals = r->val0; /* drop half-added values */
      }
    }
  }
  pthread_mutex_unlock(&tr->mu);
  return st;
}

/* ------------------------------------------------------------------ public: fused eager */
tpu_status_t tpu_trace_set_enabled(bool enabled) {
  TPU_RETURN_IF_ERROR(trace_init_once_status());
  if (enabled && !tpu_rt_launch_blocking()) { atomic_fetch_or(&tpu_trace_mode, 1); return TPU_OK; }
  atomic_fetch_and(&tpu_trace_mode, ~1);
  tpu_status_t first = TPU_OK;
  for (int d = 0; d < g_ntraces; ++d) {
    tpu_status_t st = tpu_trace_flush(d);
    if (st && !first) first = st; else tpu_status_free(st);
  }
  return first;
}
bool tpu_trace_enabled(void) {
  if (trace_init_once_status() != TPU_OK) return false;
  return (atomic_load(&tpu_trace_mode) & 1) != 0;
}
tpu_status_t tpu_trace_flush(int device) {
  TPU_RETURN_IF_ERROR(trace_init_once_status());
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  trace_t* tr = &g_traces[device];
  if (!atomic_load(&tr->pending)) return TPU_OK;
  pthread_mutex_lock(&tr->mu);
  if (tr->capturing && !tr->capture_broken) {
    tr->capture_broken = 1;
    snprintf(tr->capture_reason, sizeof tr->capture_reason, "the trace was flushed while capturing (explicit flush)");
  }
  tpu_status_t st = flush_locked(tr, NULL);
  pthread_mutex_unlock(&tr->mu);
  return st;
}

/* ------------------------------------------------------------------ capture */
enum { CB_INPUT = 0, CB_CONST, CB_FRESH };
typedef struct { int kind, index; int64_t off; tpu_tensor_t t; } cbind_t; /* off: bytes from the input's data */
struct tpu_capture_s {
  int device, n_inputs, n_outputs, n_ops;
  fentry_t* f;
  tpu_tensor_t* inputs;   /* captured input records (layout checks) */
  cbind_t* params;        /* per graph param */
  cbind_t* outs;          /* per graph output: CB_INPUT/CB_CONST (fixed view), CB_FRESH (buffer index) */
  int n_bufs;
  tpu_tensor_t* buf_meta; /* per fresh buffer: the layout the graph writes (data NULL) */
  tpu_host_scalar_t* scalars;
  int* scalar_rng;        /* per scalar: -1 value; else 2*rng_op + (0 seed, 1 offset) */
  uint64_t* rng_inc;      /* per op: counters to reserve (0: none) */
  tpu_tensor_t* user_out; /* per user output: its layout (data NULL) */
  int* user_alias;        /* per user output: input index it is a view of, or -1 */
  int* user_buf;          /* ... else the fresh buffer it is a view of */
  int64_t* user_off;      /* element offset from that input's / buffer's data */
  tpu_ir_graph_t* pre;    /* the graph before the compiler passes (TPU_CAPTURE_KEEP_GRAPH), or NULL */
  int64_t* dec;           /* with pre: its size decisions (lw_size_decide), 4 words each */
  int n_dec;
  int instantiated;       /* made from a size template (tpu_capture_instantiate), not recorded */
};

/* Capture being ended: filled by tpu_capture_end before the flush. */
typedef struct {
  const tpu_tensor_t *inputs, *constants, *outputs;
  int n_inputs, n_constants, n_outputs;
  char* reason; size_t reason_len;
  unsigned flags;
} capture_req_t;
static _Thread_local capture_req_t* tl_req;
static int capture_keeps_graph(void) { return tl_req && (tl_req->flags & TPU_CAPTURE_KEEP_GRAPH); }

static int inside(const tpu_tensor_t* outer, const tpu_tensor_t* t) {
  uintptr_t a0, a1, b0, b1;
  tensor_range(outer, &a0, &a1); tensor_range(t, &b0, &b1);
  if (b0 == b1) return outer->data != NULL && outer->data == t->data;
  return a0 <= b0 && b1 <= a1;
}
static int locate(const capture_req_t* q, const tpu_tensor_t* t, cbind_t* b) {
  for (int i = 0; i < q->n_inputs; ++i)
    if (inside(&q->inputs[i], t)) {
      b->kind = CB_INPUT; b->index = i; b->t = *t;
      b->off = (int64_t)((char*)t->data - (char*)q->inputs[i].data);
      return 1;
    }
  for (int i = 0; i < q->n_constants; ++i)
    if (inside(&q->constants[i], t)) { b->kind = CB_CONST; b->index = i; b->t = *t; b->off = 0; return 1; }
  return 0;
}
static void tensor_desc(const tpu_tensor_t* t, char* buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%s[", tpu_dtype_name(t->dtype));
  for (int d = 0; d < t->ndim && n < cap; ++d) n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)t->sizes[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

void tpu_capture_free(tpu_capture_t* c) {
  if (!c) return;
  fentry_release(c->f);
  free(c->inputs); free(c->params); free(c->outs); free(c->scalars); free(c->scalar_rng); free(c->rng_inc);
  free(c->user_out); free(c->user_alias); free(c->user_buf); free(c->user_off); free(c->buf_meta);
  tpu_capture_drop_graph(c);
  free(c);
}

static tpu_status_t capture_make(trace_t* tr, fentry_t* f, tpu_capture_t** out, pre_t* pre) {
  capture_req_t* q = tl_req;
  *out = NULL;
  tpu_capture_t* c = calloc(1, sizeof(*c));
  if (!c) { fentry_release(f); pre_free(pre); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  c->pre = pre->g; c->dec = pre->dec; c->n_dec = pre->n_dec; /* taken over */
  pre->g = NULL; pre->dec = NULL; pre->n_dec = 0;
  c->f = f; c->device = tr->device; c->n_ops = tr->n_ops;
  c->n_inputs = q->n_inputs; c->n_outputs = q->n_outputs;
  c->inputs = malloc((size_t)(q->n_inputs + 1) * sizeof(tpu_tensor_t));
  c->params = calloc((size_t)f->n_tb + 1, sizeof(cbind_t));
  c->outs = calloc((size_t)f->n_out + 1, sizeof(cbind_t));
  c->scalars = calloc((size_t)f->n_sb + 1, sizeof(tpu_host_scalar_t));
  c->scalar_rng = calloc((size_t)f->n_sb + 1, sizeof(int));
  c->rng_inc = calloc((size_t)tr->n_ops + 1, sizeof(uint64_t));
  c->user_out = calloc((size_t)q->n_outputs + 1, sizeof(tpu_tensor_t));
  c->user_alias = calloc((size_t)q->n_outputs + 1, sizeof(int));
  c->user_buf = calloc((size_t)q->n_outputs + 1, sizeof(int));
  c->user_off = calloc((size_t)q->n_outputs + 1, sizeof(int64_t));
  c->buf_meta = calloc((size_t)f->n_out + 1, sizeof(tpu_tensor_t));
  if (!c->inputs || !c->params || !c->outs || !c->scalars || !c->scalar_rng || !c->rng_inc || !c->user_out ||
      !c->user_alias || !c->user_buf || !c->user_off || !c->buf_meta) {
    tpu_capture_free(c);
    return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  }
  if (q->n_inputs) memcpy(c->inputs, q->inputs, (size_t)q->n_inputs * sizeof(tpu_tensor_t));
  char d[96];
  const char* fail = NULL;
  for (int p = 0; p < f->n_tb && !fail; ++p) {
    const fbind_t* b = &f->tb[p];
    const tpu_tensor_t* t = bound_tensor(&tr->ops[b->op], b->src, b->arg, b->index);
    if (!locate(q, t, &c->params[p])) {
      tensor_desc(t, d, sizeof d);
      snprintf(q->reason, q->reason_len, "tensor read by %s (argument %d, %s) is neither an input nor a constant",
               tr->ops[b->op].name, b->arg, d);
      fail = q->reason;
    }
  }
  for (int j = 0; j < tr->n_ops && !fail; ++j) {
    const rec_t* r = &tr->ops[j];
    if (!r->e->rng_increment) continue;
    if (r->gen != tpu_rt_default_generator(tr->device)) {
      snprintf(q->reason, q->reason_len, "%s uses an explicit generator (only default generators replay)", r->name);
      fail = q->reason;
    }
    c->rng_inc[j] = r->e->rng_increment;
  }
  for (int s = 0; s < f->n_sb && !fail; ++s) {
    const fbind_t* b = &f->sb[s];
    scalar_of(&c->scalars[s], &tr->ops[b->op], b->src, b->arg, b->index);
    c->scalar_rng[s] = b->src == TPU_SBIND_GEN_SEED ? 2 * b->op : b->src == TPU_SBIND_GEN_OFFSET ? 2 * b->op + 1 : -1;
  }
  for (int k = 0; k < f->n_out && !fail; ++k) {
    const tpu_tensor_t* t = value_tensor(tr, f->outv[k]);
    cbind_t* b = &c->outs[k];
    if (!tr->vals[f->outv[k]].detached && locate(q, t, b)) continue; /* written into an input or a constant */
    b->kind = CB_FRESH; b->index = c->n_bufs; b->t = *t;
    c->buf_meta[c->n_bufs] = *t; c->buf_meta[c->n_bufs].data = NULL;
    c->n_bufs++;
  }
  /* user outputs: views of an input, or of a fresh buffer the graph writes */
  for (int u = 0; u < q->n_outputs && !fail; ++u) {
    const tpu_tensor_t* o = &q->outputs[u];
    int64_t es = (int64_t)tpu_dtype_size(o->dtype);
    c->user_out[u] = *o; c->user_out[u].data = NULL;
    c->user_alias[u] = c->user_buf[u] = -1;
    for (int i = 0; i < q->n_inputs && c->user_alias[u] < 0; ++i)
      if (q->inputs[i].dtype == o->dtype && inside(&q->inputs[i], o)) {
        c->user_alias[u] = i;
        c->user_off[u] = ((char*)o->data - (char*)q->inputs[i].data) / es;
      }
    for (int k = 0; k < f->n_out && c->user_alias[u] < 0 && c->user_buf[u] < 0; ++k) {
      const cbind_t* b = &c->outs[k];
      if (b->kind == CB_FRESH && !tr->vals[f->outv[k]].detached && b->t.dtype == o->dtype && inside(&b->t, o)) {
        c->user_buf[u] = b->index;
        c->user_off[u] = ((char*)o->data - (char*)b->t.data) / es;
      }
    }
    if (c->user_alias[u] < 0 && c->user_buf[u] < 0) {
      tensor_desc(o, d, sizeof d);
      snprintf(q->reason, q->reason_len, "output %d (%s) is not (a view of) a tensor a captured op wrote or an input", u, d);
      fail = q->reason;
    }
  }
  if (fail) { tpu_capture_free(c); return TPU_OK; }
  *out = c;
  return TPU_OK;
}

tpu_status_t tpu_capture_begin(int device) {
  TPU_RETURN_IF_ERROR(trace_init_once_status());
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  if (tpu_rt_launch_blocking()) return TPU_ERR(UNSUPPORTED, "graph capture is not available with TORCH_TPU_LAUNCH_BLOCKING=1");
  trace_t* tr = &g_traces[device];
  pthread_mutex_lock(&tr->mu);
  tpu_status_t st = TPU_OK;
  if (tr->capturing) st = TPU_ERR(INVALID_ARGUMENT, "tpu:%d is already capturing (capture_begin called twice)", device);
  if (!st) st = flush_locked(tr, NULL);
  if (!st) {
    tr->capturing = 1; tr->capture_broken = 0; tr->capture_reason[0] = 0;
    atomic_fetch_or(&tpu_trace_mode, 2);
  }
  pthread_mutex_unlock(&tr->mu);
  return st;
}

tpu_status_t tpu_capture_end(int device, const tpu_tensor_t* inputs, int n_inputs, const tpu_tensor_t* constants,
                             int n_constants, const tpu_tensor_t* outputs, int n_outputs, tpu_capture_t** out_capture,
                             char* reason, size_t reason_len) {
  return tpu_capture_end_ex(device, inputs, n_inputs, constants, n_constants, outputs, n_outputs, 0, out_capture, reason,
                            reason_len);
}
tpu_status_t tpu_capture_end_ex(int device, const tpu_tensor_t* inputs, int n_inputs, const tpu_tensor_t* constants,
                                int n_constants, const tpu_tensor_t* outputs, int n_outputs, unsigned flags,
                                tpu_capture_t** out_capture, char* reason, size_t reason_len) {
  TPU_RETURN_IF_ERROR(trace_init_once_status());
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  if (!out_capture || !reason || reason_len == 0 || n_inputs < 0 || n_constants < 0 || n_outputs < 0 ||
      (n_inputs && !inputs) || (n_constants && !constants) || (n_outputs && !outputs))
    return TPU_ERR(INVALID_ARGUMENT, "tpu_capture_end: bad arguments");
  *out_capture = NULL;
  reason[0] = 0;
  trace_t* tr = &g_traces[device];
  pthread_mutex_lock(&tr->mu);
  if (!tr->capturing) {
    pthread_mutex_unlock(&tr->mu);
    return TPU_ERR(INVALID_ARGUMENT, "tpu:%d is not capturing (capture_end without capture_begin)", device);
  }
  tr->capturing = 0;
  int any = 0;
  for (int d = 0; d < g_ntraces; ++d) any |= d != device && g_traces[d].capturing;
  if (!any) atomic_fetch_and(&tpu_trace_mode, ~2);
  tpu_status_t st = TPU_OK;
  if (tr->capture_broken) {
    snprintf(reason, reason_len, "%s", tr->capture_reason);
    st = flush_locked(tr, NULL);
  } else if (tr->n_ops == 0) {
    snprintf(reason, reason_len, "no tpu op ran while capturing");
  } else {
    capture_req_t q = {inputs, constants, outputs, n_inputs, n_constants, n_outputs, reason, reason_len, flags};
    tl_req = &q;
    st = flush_locked(tr, out_capture);
    tl_req = NULL;
    if (!st && !*out_capture && !reason[0]) snprintf(reason, reason_len, "the captured ops could not be fused into one graph");
  }
  pthread_mutex_unlock(&tr->mu);
  if (st) { tpu_capture_free(*out_capture); *out_capture = NULL; }
  return st;
}

int tpu_capture_num_outputs(const tpu_capture_t* c) { return c ? c->n_outputs : 0; }
int tpu_capture_num_ops(const tpu_capture_t* c) { return c ? c->n_ops : 0; }
int tpu_capture_num_buffers(const tpu_capture_t* c) { return c ? c->n_bufs : 0; }
const tpu_ir_graph_t* tpu_capture_graph(const tpu_capture_t* c) { return c && c->f && c->f->exe ? tpu_host_exe_graph(c->f->exe) : NULL; }

tpu_status_t tpu_capture_buffer_info(const tpu_capture_t* c, int b, tpu_tensor_t* out_meta) {
  if (!c || b < 0 || b >= c->n_bufs || !out_meta) return TPU_ERR(INVALID_ARGUMENT, "tpu_capture_buffer_info: bad arguments");
  *out_meta = c->buf_meta[b];
  return TPU_OK;
}

tpu_status_t tpu_capture_output_info(const tpu_capture_t* c, int k, tpu_tensor_t* out_meta, int* out_input,
                                     int* out_buffer, int64_t* out_offset) {
  if (!c || k < 0 || k >= c->n_outputs || !out_meta || !out_input || !out_buffer || !out_offset)
    return TPU_ERR(INVALID_ARGUMENT, "tpu_capture_output_info: bad arguments");
  *out_meta = c->user_out[k];
  *out_input = c->user_alias[k];
  *out_buffer = c->user_buf[k];
  *out_offset = c->user_off[k];
  return TPU_OK;
}

tpu_status_t tpu_capture_lifetimes(const tpu_capture_t* c, int32_t* out_input_last, int32_t* out_buffer_first) {
  if (!c || (c->n_inputs && !out_input_last) || (c->n_bufs && !out_buffer_first))
    return TPU_ERR(INVALID_ARGUMENT, "tpu_capture_lifetimes: bad arguments");
  const fentry_t* f = c->f;
  int32_t* pl = malloc((size_t)(f->n_tb + f->n_out + 1) * sizeof(int32_t));
  if (!pl) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  int32_t* of = pl + f->n_tb;
  tpu_host_exe_lifetimes(f->exe, pl, of);
  for (int i = 0; i < c->n_inputs; ++i) out_input_last[i] = -1;
  for (int b = 0; b < c->n_bufs; ++b) out_buffer_first[b] = INT32_MAX;
  for (int p = 0; p < f->n_tb; ++p)
    if (c->params[p].kind == CB_INPUT && out_input_last[c->params[p].index] < pl[p]) out_input_last[c->params[p].index] = pl[p];
  for (int k = 0; k < f->n_out; ++k) {
    const cbind_t* b = &c->outs[k];
    if (b->kind == CB_INPUT) out_input_last[b->index] = INT32_MAX; /* written in place: never dead */
    else if (b->kind == CB_FRESH && out_buffer_first[b->index] > of[k]) out_buffer_first[b->index] = of[k];
  }
  for (int u = 0; u < c->n_outputs; ++u)
    if (c->user_alias[u] >= 0) out_input_last[c->user_alias[u]] = INT32_MAX;
  free(pl);
  return TPU_OK;
}

int tpu_capture_inputs_match(const tpu_capture_t* c, const tpu_tensor_t* inputs, int n_inputs) {
  if (!c || n_inputs != c->n_inputs || (n_inputs && !inputs)) return 0;
  for (int i = 0; i < n_inputs; ++i) {
    const tpu_tensor_t *a = &c->inputs[i], *b = &inputs[i];
    int ok = a->dtype == b->dtype && a->ndim == b->ndim && b->device == c->device;
    for (int d = 0; ok && d < a->ndim; ++d) ok = a->sizes[d] == b->sizes[d] && (a->sizes[d] <= 1 || a->strides[d] == b->strides[d]);
    if (!ok) return 0;
  }
  return 1;
}

tpu_status_t tpu_capture_run(tpu_capture_t* c, const tpu_tensor_t* inputs, int n_inputs, const tpu_tensor_t* buffers,
                             int n_buffers) {
  if (!c) return TPU_ERR(INVALID_ARGUMENT, "tpu_capture_run: NULL capture");
  if (n_inputs != c->n_inputs || (n_inputs && !inputs))
    return TPU_ERR(INVALID_ARGUMENT, "captured graph: expected %d inputs, got %d", c->n_inputs, n_inputs);
  if (n_buffers != c->n_bufs || (n_buffers && !buffers))
    return TPU_ERR(INVALID_ARGUMENT, "captured graph: expected %d output buffers, got %d", c->n_bufs, n_buffers);
  for (int i = 0; i < n_inputs; ++i) {
    const tpu_tensor_t *a = &c->inputs[i], *b = &inputs[i];
    int ok = a->dtype == b->dtype && a->ndim == b->ndim && b->device == c->device;
    for (int d = 0; ok && d < a->ndim; ++d) ok = a->sizes[d] == b->sizes[d] && (a->sizes[d] <= 1 || a->strides[d] == b->strides[d]);
    if (!ok) {
      char x[96], y[96];
      tensor_desc(a, x, sizeof x); tensor_desc(b, y, sizeof y);
      return TPU_ERR(INVALID_ARGUMENT, "captured graph: input %d must have the captured device, dtype, sizes and strides (%s); got %s", i, x, y);
    }
  }
  for (int k = 0; k < n_buffers; ++k) {
    const tpu_tensor_t *a = &c->buf_meta[k], *b = &buffers[k];
    int ok = a->dtype == b->dtype && a->ndim == b->ndim && (b->data || tpu_numel(b->ndim, b->sizes) == 0);
    for (int d = 0; ok && d < a->ndim; ++d) ok = a->sizes[d] == b->sizes[d] && (a->sizes[d] <= 1 || a->strides[d] == b->strides[d]);
    if (!ok) return TPU_ERR(INVALID_ARGUMENT, "captured graph: output buffer %d does not have the captured layout", k);
  }
  fentry_t* f = c->f;
  ftask_t* t = ftask_take(f);
  if (!t) t = ftask_new(f->n_tb, f->n_sb, f->n_out);
  if (!t) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  __atomic_add_fetch(&f->refcount, 1, __ATOMIC_ACQ_REL);
  t->f = f; t->exe = f->exe;
  for (int p = 0; p < f->n_tb; ++p) {
    const cbind_t* b = &c->params[p];
    tpu_tensor_t v = b->t;
    if (b->kind == CB_INPUT) v.data = (char*)inputs[b->index].data + b->off;
    to_view(&t->views[p], &v);
  }
  for (int k = 0; k < f->n_out; ++k) {
    const cbind_t* b = &c->outs[k];
    tpu_tensor_t v = b->t;
    if (b->kind == CB_INPUT) v.data = (char*)inputs[b->index].data + b->off;
    else if (b->kind == CB_FRESH) v = buffers[b->index];
    to_view(&t->views[f->n_tb + k], &v);
  }
  /* RNG: reserve in op order from the default generator, as eager would */
  tpu_rt_generator_t* g = tpu_rt_default_generator(c->device);
  for (int s = 0; s < f->n_sb; ++s) t->scalars[s] = c->scalars[s];
  for (int j = 0; j < c->n_ops; ++j) {
    if (!c->rng_inc[j]) continue;
    uint64_t seed, offset;
    tpu_rt_generator_reserve(g, c->rng_inc[j], &seed, &offset);
    for (int s = 0; s < f->n_sb; ++s) {
      if (c->scalar_rng[s] == 2 * j) { t->scalars[s].i = (int64_t)seed; t->scalars[s].f = 0; }
      if (c->scalar_rng[s] == 2 * j + 1) { t->scalars[s].i = (int64_t)offset; t->scalars[s].f = 0; }
    }
  }
  char name[64];
  snprintf(name, sizeof name, "captured graph (%d ops)", c->n_ops);
  ftask_record(t, name);
  return tpu_rt_queue_enqueue(c->device, name, ftask_run, t, ftask_free);
}

/* ------------------------------------------------------------------ capture <-> size-template sample */
const tpu_ir_graph_t* tpu_capture_pre_graph(const tpu_capture_t* c) { return c ? c->pre : NULL; }
void tpu_capture_drop_graph(tpu_capture_t* c) {
  if (!c) return;
  free(c->dec); c->dec = NULL; c->n_dec = 0;
  if (!c->pre) return;
  tpu_ir_graph_free(c->pre); free(c->pre); c->pre = NULL;
}
int tpu_capture_is_instantiated(const tpu_capture_t* c) { return c ? c->instantiated : 0; }

/* slots: size fields (c + k*m); exact: structure words that must be equal in every sample */
typedef struct { int64_t *a, *e; int na, ne, capa, cape, oom; } enc_t;
static void put_a(enc_t* E, int64_t v) { GROW(E->a, E->na, E->capa, 1, E->oom = 1; return); E->a[E->na++] = v; }
static void put_e(enc_t* E, int64_t v) { GROW(E->e, E->ne, E->cape, 1, E->oom = 1; return); E->e[E->ne++] = v; }
/* norm: a stride of a dim of size <= 1 is not part of the layout (checks ignore it) */
static void enc_tensor(enc_t* E, const tpu_tensor_t* t, int norm) {
  put_e(E, t->dtype); put_e(E, t->ndim);
  for (int d = 0; d < t->ndim; ++d) { put_a(E, t->sizes[d]); put_a(E, norm && t->sizes[d] <= 1 ? 0 : t->strides[d]); }
}
#define ENC_MAGIC 0x54504343 /* format of this encoding; a template of another one is no instance */

tpu_status_t tpu_capture_encode(const tpu_capture_t* c, int64_t** out_slots, int* out_n_slots, int64_t** out_exact,
                                int* out_n_exact, char* reason, size_t reason_len) {
  *out_slots = *out_exact = NULL; *out_n_slots = *out_n_exact = 0;
  const fentry_t* f = c->f;
  for (int p = 0; p < f->n_tb; ++p)
    if (c->params[p].kind == CB_CONST) { snprintf(reason, reason_len, "the capture reads a constant (not templated)"); return TPU_OK; }
  for (int k = 0; k < f->n_out; ++k)
    if (c->outs[k].kind == CB_CONST) { snprintf(reason, reason_len, "the capture writes a constant (not templated)"); return TPU_OK; }
  enc_t E = {0};
  put_e(&E, ENC_MAGIC); put_e(&E, c->device);
  put_e(&E, c->n_inputs); put_e(&E, c->n_outputs); put_e(&E, c->n_ops); put_e(&E, c->n_bufs);
  put_e(&E, f->n_tb); put_e(&E, f->n_sb); put_e(&E, f->n_out);
  for (int i = 0; i < c->n_inputs; ++i) enc_tensor(&E, &c->inputs[i], 1);
  for (int p = 0; p < f->n_tb; ++p) {
    const cbind_t* b = &c->params[p];
    put_e(&E, b->kind); put_e(&E, b->index); put_a(&E, b->off); enc_tensor(&E, &b->t, 0);
  }
  for (int k = 0; k < f->n_out; ++k) {
    const cbind_t* b = &c->outs[k];
    put_e(&E, b->kind); put_e(&E, b->index); put_a(&E, b->kind == CB_INPUT ? b->off : 0); enc_tensor(&E, &b->t, 0);
  }
  for (int b = 0; b < c->n_bufs; ++b) enc_tensor(&E, &c->buf_meta[b], 0);
  for (int s = 0; s < f->n_sb; ++s) {
    const tpu_host_scalar_t* v = &c->scalars[s];
    put_e(&E, c->scalar_rng[s]);
    if (c->scalar_rng[s] >= 0) continue; /* reserved at each run */
    double fi = (double)v->i;
    if (v->i > -(1LL << 53) && v->i < (1LL << 53) && !memcmp(&fi, &v->f, sizeof fi)) { put_e(&E, 1); put_a(&E, v->i); }
    else { int64_t bits; memcpy(&bits, &v->f, sizeof bits); put_e(&E, 2); put_e(&E, bits); put_e(&E, v->i); }
  }
  for (int j = 0; j < c->n_ops; ++j) put_a(&E, (int64_t)c->rng_inc[j]);
  for (int u = 0; u < c->n_outputs; ++u) {
    enc_tensor(&E, &c->user_out[u], 0);
    put_e(&E, c->user_alias[u]); put_e(&E, c->user_buf[u]); put_a(&E, c->user_off[u]);
  }
  put_e(&E, c->n_dec / 4); /* size decisions: the op exact, its operands and result size fields */
  for (int k = 0; k + 3 < c->n_dec; k += 4) { put_e(&E, c->dec[k]); put_a(&E, c->dec[k + 1]); put_a(&E, c->dec[k + 2]); put_a(&E, c->dec[k + 3]); }
  if (E.oom) { free(E.a); free(E.e); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  *out_slots = E.a; *out_n_slots = E.na; *out_exact = E.e; *out_n_exact = E.ne;
  return TPU_OK;
}

/* ---- decoding an instantiated sample: every word is checked, nothing is trusted */
typedef struct { const int64_t *a, *e; int na, ne, ia, ie, bad; } dec_t;
static int64_t get_a(dec_t* D) { if (D->ia >= D->na) { D->bad = 1; return 0; } return D->a[D->ia++]; }
static int64_t get_e(dec_t* D) { if (D->ie >= D->ne) { D->bad = 1; return 0; } return D->e[D->ie++]; }
static void dec_tensor(dec_t* D, tpu_tensor_t* t, int device) {
  memset(t, 0, sizeof *t);
  int64_t dt = get_e(D), nd = get_e(D);
  if (dt < 0 || dt >= TPU_DTYPE_COUNT || nd < 0 || nd > TPU_MAX_DIMS) { D->bad = 1; return; }
  t->dtype = (int32_t)dt; t->ndim = (int32_t)nd; t->device = device;
  for (int d = 0; d < t->ndim; ++d) {
    t->sizes[d] = get_a(D); t->strides[d] = get_a(D);
    if (t->sizes[d] < 0 || t->strides[d] < 0) D->bad = 1;
  }
}
/* Element extent [lo, hi) of a layout relative to its data (0 elements: lo == hi == 0); 0 on overflow. */
static int extent(const tpu_tensor_t* t, int64_t* lo, int64_t* hi) {
  int64_t mx = 0;
  *lo = *hi = 0;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] == 0) return 1;
    int64_t e;
    if (__builtin_mul_overflow(t->sizes[d] - 1, t->strides[d], &e) || __builtin_add_overflow(mx, e, &mx)) return 0;
  }
  *hi = mx + 1;
  return 1;
}
/* view (at byte offset off_bytes from outer's data) lies inside outer; 0 on overflow (instantiated sizes
 * are caller ints) */
static int view_inside(const tpu_tensor_t* outer, const tpu_tensor_t* view, int64_t off_bytes) {
  int64_t olo, ohi, vlo, vhi, es = (int64_t)tpu_dtype_size(view->dtype), oes = (int64_t)tpu_dtype_size(outer->dtype);
  if (!extent(outer, &olo, &ohi) || !extent(view, &vlo, &vhi) || off_bytes < 0 || off_bytes % es) return 0;
  if (vhi == vlo) return 1;
  int64_t b0, b1, lo, hi;
  if (__builtin_mul_overflow(vlo, es, &b0) || __builtin_add_overflow(b0, off_bytes, &b0) ||
      __builtin_mul_overflow(vhi, es, &b1) || __builtin_add_overflow(b1, off_bytes, &b1) ||
      __builtin_mul_overflow(olo, oes, &lo) || __builtin_mul_overflow(ohi, oes, &hi))
    return 0;
  return b0 >= lo && b1 <= hi;
}
static int type_is(const tpu_ir_type_t* ty, const tpu_tensor_t* t) {
  if (ty->dtype != t->dtype || ty->rank != t->ndim) return 0;
  for (int d = 0; d < t->ndim; ++d) if (ty->dims[d] != t->sizes[d]) return 0;
  return 1;
}

tpu_status_t tpu_capture_decode(int device, tpu_ir_graph_t* g, const int64_t* slots, int n_slots, const int64_t* exact,
                                int n_exact, unsigned flags, tpu_capture_t** out, char* reason, size_t reason_len) {
  *out = NULL;
  tpu_status_t st0 = trace_init_once_status();
  if (!st0) st0 = tpu_rt_device_check(device);
  if (st0) { tpu_ir_graph_free(g); free(g); return st0; } /* g is ours in every case */
  dec_t D = {slots, exact, n_slots, n_exact, 0, 0, 0};
  tpu_capture_t* c = calloc(1, sizeof(*c));
  fentry_t* f = calloc(1, sizeof(*f));
  if (!c || !f) { free(c); free(f); tpu_ir_graph_free(g); free(g); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  c->f = f; f->refcount = 1; c->instantiated = 1;
  c->pre = g; /* freed with c (kept only with TPU_CAPTURE_KEEP_GRAPH) */
  const char* why = NULL;
  if (get_e(&D) != ENC_MAGIC || get_e(&D) != device) why = "another encoding or device";
  int64_t ni = get_e(&D), no = get_e(&D), nops = get_e(&D), nb = get_e(&D), ntb = get_e(&D), nsb = get_e(&D), nout = get_e(&D);
  if (!why && (D.bad || ni < 0 || no < 0 || nops < 0 || nb < 0 || ntb < 0 || nsb < 0 || nout < 0 || ni > (1 << 20) ||
               no > (1 << 20) || nops > CAPTURE_MAX_OPS || nb > nout || ntb > (1 << 20) || nsb > (1 << 20) ||
               nout > TPU_IR_MAX_GRAPH_OUTPUTS))
    why = "bad counts";
  if (!why && (ntb != g->n_params || nsb != g->n_scalars || (nout ? nout : 1) != g->n_outputs))
    why = "the graph's parameters, scalars or outputs differ from the bindings";
  if (!why) {
    c->device = device; c->n_inputs = (int)ni; c->n_outputs = (int)no; c->n_ops = (int)nops; c->n_bufs = (int)nb;
    f->n_tb = (int)ntb; f->n_sb = (int)nsb; f->n_out = (int)nout;
    c->inputs = calloc((size_t)ni + 1, sizeof(tpu_tensor_t));
    c->params = calloc((size_t)ntb + 1, sizeof(cbind_t));
    c->outs = calloc((size_t)nout + 1, sizeof(cbind_t));
    c->scalars = calloc((size_t)nsb + 1, sizeof(tpu_host_scalar_t));
    c->scalar_rng = calloc((size_t)nsb + 1, sizeof(int));
    c->rng_inc = calloc((size_t)nops + 1, sizeof(uint64_t));
    c->user_out = calloc((size_t)no + 1, sizeof(tpu_tensor_t));
    c->user_alias = calloc((size_t)no + 1, sizeof(int));
    c->user_buf = calloc((size_t)no + 1, sizeof(int));
    c->user_off = calloc((size_t)no + 1, sizeof(int64_t));
    c->buf_meta = calloc((size_t)nb + 1, sizeof(tpu_tensor_t));
    if (!c->inputs || !c->params || !c->outs || !c->scalars || !c->scalar_rng || !c->rng_inc || !c->user_out ||
        !c->user_alias || !c->user_buf || !c->user_off || !c->buf_meta) {
      tpu_capture_free(c);
      return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
    }
  }
  for (int i = 0; !why && i < c->n_inputs; ++i) dec_tensor(&D, &c->inputs[i], device);
  /* parameter p is the graph's PARAM with i0 == p */
  const tpu_ir_type_t** ptype = why ? NULL : calloc((size_t)f->n_tb + 1, sizeof(*ptype));
  if (!why && !ptype) why = "out of host memory";
  for (int v = 0; !why && v < g->n_ops; ++v)
    if (g->ops[v].opcode == TPU_IR_PARAM && g->ops[v].i0 >= 0 && g->ops[v].i0 < f->n_tb) ptype[g->ops[v].i0] = &g->ops[v].type;
  for (int p = 0; !why && p < f->n_tb; ++p) {
    cbind_t* b = &c->params[p];
    b->kind = (int)get_e(&D); b->index = (int)get_e(&D); b->off = get_a(&D);
    dec_tensor(&D, &b->t, device);
    if (D.bad || b->kind != CB_INPUT || b->index < 0 || b->index >= c->n_inputs || !ptype[p] || !type_is(ptype[p], &b->t) ||
        !view_inside(&c->inputs[b->index], &b->t, b->off))
      why = "a parameter binding is not a view inside its input of the graph parameter's type";
  }
  free(ptype);
  int* buf_of = why ? NULL : calloc((size_t)c->n_bufs + 1, sizeof(int));
  if (!why && !buf_of) why = "out of host memory";
  for (int k = 0; !why && k < f->n_out; ++k) {
    cbind_t* b = &c->outs[k];
    b->kind = (int)get_e(&D); b->index = (int)get_e(&D); b->off = get_a(&D);
    dec_tensor(&D, &b->t, device);
    const tpu_ir_type_t* ty = tpu_ir_type(g, g->outputs[k]);
    if (D.bad || !type_is(ty, &b->t)) why = "an output binding does not have its graph output's type";
    else if (b->kind == CB_INPUT && (b->index < 0 || b->index >= c->n_inputs || !view_inside(&c->inputs[b->index], &b->t, b->off)))
      why = "an output written into an input is not inside it";
    else if (b->kind == CB_FRESH && (b->index < 0 || b->index >= c->n_bufs || buf_of[b->index]++)) why = "bad fresh buffer index";
    else if (b->kind != CB_INPUT && b->kind != CB_FRESH) why = "bad output binding kind";
  }
  free(buf_of);
  for (int b = 0; !why && b < c->n_bufs; ++b) dec_tensor(&D, &c->buf_meta[b], device);
  for (int k = 0; !why && k < f->n_out; ++k) { /* a fresh buffer is exactly what the graph writes */
    const cbind_t* b = &c->outs[k];
    if (b->kind != CB_FRESH) continue;
    const tpu_tensor_t* m = &c->buf_meta[b->index];
    int same = m->dtype == b->t.dtype && m->ndim == b->t.ndim;
    for (int d = 0; same && d < m->ndim; ++d) same = m->sizes[d] == b->t.sizes[d] && m->strides[d] == b->t.strides[d];
    if (!same) why = "a fresh buffer's layout is not its output's";
  }
  for (int s = 0; !why && s < f->n_sb; ++s) {
    int64_t rng = get_e(&D);
    if (rng < -1 || rng >= 2 * (int64_t)c->n_ops) { why = "bad scalar binding"; break; }
    c->scalar_rng[s] = (int)rng;
    if (rng >= 0) continue;
    int64_t kind = get_e(&D);
    if (kind == 1) { c->scalars[s].i = get_a(&D); c->scalars[s].f = (double)c->scalars[s].i; }
    else if (kind == 2) { int64_t bits = get_e(&D); memcpy(&c->scalars[s].f, &bits, sizeof bits); c->scalars[s].i = get_e(&D); }
    else why = "bad scalar kind";
  }
  for (int j = 0; !why && j < c->n_ops; ++j) {
    int64_t r = get_a(&D);
    if (r < 0) why = "negative RNG increment";
    c->rng_inc[j] = (uint64_t)r;
  }
  for (int u = 0; !why && u < c->n_outputs; ++u) {
    dec_tensor(&D, &c->user_out[u], device);
    c->user_out[u].data = NULL;
    int64_t al = get_e(&D), bu = get_e(&D), off = get_a(&D);
    c->user_alias[u] = (int)al; c->user_buf[u] = (int)bu; c->user_off[u] = off;
    int64_t es = (int64_t)tpu_dtype_size(c->user_out[u].dtype);
    if (D.bad || __builtin_mul_overflow(off, es, &off)) why = "bad user output";
    else if (al >= 0 ? al >= c->n_inputs || !view_inside(&c->inputs[al], &c->user_out[u], off)
                     : bu < 0 || bu >= c->n_bufs || !view_inside(&c->buf_meta[bu], &c->user_out[u], off))
      why = "a user output is not a view inside its input or buffer";
  }
  /* size decisions: each evaluated again at these sizes must give the result the template predicts */
  int64_t ndec = why ? 0 : get_e(&D);
  if (!why && (ndec < 0 || ndec > (int64_t)(D.na - D.ia) / 3)) why = "bad size decision count";
  if (!why && ndec) {
    c->dec = malloc((size_t)ndec * 4 * sizeof(int64_t));
    if (!c->dec) why = "out of host memory";
  }
  for (int64_t k = 0; !why && k < ndec; ++k) {
    int64_t op = get_e(&D), a = get_a(&D), b = get_a(&D), r = get_a(&D), now;
    int64_t* w = &c->dec[4 * k];
    w[0] = op; w[1] = a; w[2] = b; w[3] = r;
    c->n_dec += 4;
    if (D.bad || op < 0 || op >= TPU_SIZE_DECIDE_COUNT || !tpu_size_decide_eval((int)op, a, b, &now)) {
      why = "bad size decision";
    } else if (now != r) {
      static const char* const names[] = {"floor division", "ceil division", "remainder", "less than", "equality",
                                          "adaptive pooling window"};
      _Static_assert(sizeof names / sizeof *names == TPU_SIZE_DECIDE_COUNT, "size decision names");
      snprintf(reason, reason_len, "a size decision changes at these sizes: %s (%lld, %lld) is %lld, the template's %lld",
               names[op], (long long)a, (long long)b, (long long)now, (long long)r);
      tpu_capture_free(c);
      return TPU_OK;
    }
  }
  if (!why && (D.bad || D.ia != D.na || D.ie != D.ne)) why = "the encoding's length does not match";
  if (why) {
    snprintf(reason, reason_len, "instantiated bindings refused: %s", why);
    tpu_capture_free(c);
    return TPU_OK;
  }
  /* the concrete graph through the compiler: passes and host plan at these sizes */
  double t0 = (double)tpu_rt_now_ns() * 1e-9;
  tpu_ir_graph_t work;
  tpu_status_t st = tpu_ir_graph_clone(g, &work);
  if (!st) {
    f->name = malloc(64);
    if (f->name) snprintf(f->name, 64, "captured graph (instantiated, %d ops)", c->n_ops);
    st = tpu_compiler_compile(&work, f->name ? f->name : "captured graph (instantiated)", &f->exe);
    tpu_ir_graph_free(&work);
  }
  if (st) {
    snprintf(reason, reason_len, "the instantiated graph did not compile: %s", tpu_status_message(st));
    tpu_status_free(st);
    tpu_capture_free(c);
    return TPU_OK;
  }
  tpu_metrics_add_compile((double)tpu_rt_now_ns() * 1e-9 - t0);
  if (!(flags & TPU_CAPTURE_KEEP_GRAPH)) tpu_capture_drop_graph(c);
  *out = c;
  return TPU_OK;
}
