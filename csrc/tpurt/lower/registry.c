/* registry.c — tpu_op_run: op lookup, signature, executable cache, binding, enqueue. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cache/exec_cache.h"
#include "cache/hash.h"
#include "cache/exec_codec.h"
#include "cache/shape_family.h"
#include "compiler/compiler.h"
#include "lower/lower.h"
#include "lower/trace.h"
#include "lower/record.h"
#include "runtime/runtime.h"

/* ---- name -> lowering table (open addressing, built once) */
static const tpu_lowering_t* const kTables[] = {
  tpu_lowerings_eltwise, tpu_lowerings_reduce, tpu_lowerings_matmul, tpu_lowerings_nn,
  tpu_lowerings_index, tpu_lowerings_factory, tpu_lowerings_shape, tpu_lowerings_optim,
  tpu_lowerings_conv, tpu_lowerings_norm_pool, tpu_lowerings_attention, tpu_lowerings_misc,
  tpu_lowerings_linalg, tpu_lowerings_special, tpu_lowerings_grid_ctc, tpu_lowerings_foreach,
};
#define NSLOTS 4096
/* uses_precision (atomic, sticky): set once a graph of this lowering had a DOT or a
 * convolution; only then does an op read the matmul precision (a query into PyTorch that
 * costs more than the rest of a tiny op's key) and put it in the cache key. */
/* list_op (set with the table): 0 = not a per-tensor list op, 1 = aten::_fused_ ops, 2 = GradScaler's
 * unscale (a list plus one trailing found_inf output), 3 = aten::_foreach_ ops; see list_split_plan. */
struct tpu_op_s { const tpu_lowering_t* l; int uses_precision; int list_op; };
static struct tpu_op_s g_slots[NSLOTS];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static uint64_t hash_str(const char* s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) { h ^= (unsigned char)*s++; h *= 1099511628211ull; }
  return h;
}
static void build_table(void) {
  for (int t = 0; t < TPU_ARRAY_LEN(kTables); ++t)
    for (const tpu_lowering_t* l = kTables[t]; l->name; ++l) {
      uint64_t h = hash_str(l->name);
      for (uint64_t k = 0; k < NSLOTS; ++k) {
        const tpu_lowering_t** s = &g_slots[(h + k) % NSLOTS].l;
        if (!*s) {
          *s = l;
          g_slots[(h + k) % NSLOTS].list_op = !strcmp(l->name, "aten::_amp_foreach_non_finite_check_and_unscale_") ? 2
              : !strncmp(l->name, "aten::_foreach_", 15) ? 3 : !strncmp(l->name, "aten::_fused_", 13);
          break;
        }
        if (!strcmp((*s)->name, l->name)) break; /* first registration wins */
      }
    }
}
const tpu_op_t* tpu_op_find(const char* name) {
  if (!name) return NULL;
  pthread_once(&g_once, build_table);
  uint64_t h = hash_str(name);
  for (uint64_t k = 0; k < NSLOTS; ++k) {
    const struct tpu_op_s* s = &g_slots[(h + k) % NSLOTS];
    if (!s->l) return NULL;
    if (!strcmp(s->l->name, name)) return s;
  }
  return NULL;
}
const char* tpu_op_name(const tpu_op_t* op) { return op ? op->l->name : NULL; }
const tpu_lowering_t* tpu_lower_find(const char* op_name) {
  const tpu_op_t* op = tpu_op_find(op_name);
  return op ? op->l : NULL;
}
bool tpu_op_supported(const char* op_name) { return tpu_op_find(op_name) != NULL; }
tpu_op_shapes_kind_t tpu_op_shapes_kind(const tpu_op_t* op) {
  return !op || !op->l->shapes ? TPU_OP_SHAPES_NONE
         : op->l->shapes_reads_data ? TPU_OP_SHAPES_READS_DATA : TPU_OP_SHAPES_PURE;
}
tpu_status_t tpu_op_shapes_found(const tpu_op_t* op, int device, const tpu_arg_t* args, int nargs,
                                 tpu_tensor_t* out_meta, int max_outs, int* out_nouts) {
  if (out_nouts) *out_nouts = 0;
  if (!out_meta || !out_nouts || max_outs < 1 || nargs < 0 || (nargs && !args))
    return TPU_ERR(INVALID_ARGUMENT, "tpu_op_shapes_found: bad arguments");
  if (!op || !op->l->shapes) return TPU_ERR(UNSUPPORTED, "%s: no shape rule", op ? op->l->name : "(no op)");
  if (op->l->shapes_reads_data) TPU_RETURN_IF_ERROR(tpu_rt_init());
  int n = 0;
  TPU_RETURN_IF_ERROR(op->l->shapes(device, args, nargs, out_meta, max_outs, &n));
  if (n < 1 || n > max_outs) return TPU_ERR(INTERNAL, "%s: the shape rule gave %d results (room for %d)", op->l->name, n, max_outs);
  *out_nouts = n;
  return TPU_OK;
}
tpu_status_t tpu_op_infer(int device, const char* op_name, const tpu_arg_t* args, int nargs,
                          tpu_tensor_t* out_meta, int max_outs, int* out_nouts) {
  if (!op_name) return TPU_ERR(INVALID_ARGUMENT, "tpu_op_infer: bad arguments");
  const tpu_op_t* op = tpu_op_find(op_name);
  if (!op) return TPU_ERR(UNSUPPORTED, "%s: no shape rule", op_name);
  return tpu_op_shapes_found(op, device, args, nargs, out_meta, max_outs, out_nouts);
}

/* DOTs, convolutions and their backward custom ops carry the precision (tpu_ir_op_t.prec) */
static int graph_reads_precision(const tpu_ir_graph_t* g) {
  for (int i = 0; i < g->n_ops; ++i) {
    const tpu_ir_op_t* o = &g->ops[i];
    if (o->opcode == TPU_IR_DOT || o->opcode == TPU_IR_CONV ||
        (o->opcode == TPU_IR_CUSTOM && (o->i0 == TPU_IR_CUSTOM_CONV_BWD_INPUT || o->i0 == TPU_IR_CUSTOM_CONV_BWD_WEIGHT)))
      return 1;
  }
  return 0;
}

/* ---- signature: everything a lowering may depend on (not data, strides, or
 * runtime scalar values). */
/* sizes (optional, NULL on the hot path): a shape family's key (cache/shape_family.h) is the key
 * without tensor sizes; they go to sizes->v instead (n = -1 once there are too many). */
typedef struct { int64_t v[TPU_SHAPE_FAMILY_MAX_SLOTS]; int n; } key_sizes_t;
typedef struct { uint8_t* p; size_t len, cap; uint8_t inline_buf[1024]; int oom; key_sizes_t* sizes; } key_t_;
static inline void key_put(key_t_* k, const void* data, size_t n) {
  if (__builtin_expect(k->len + n > k->cap, 0)) {
    size_t cap = k->cap * 2;
    while (cap < k->len + n) cap *= 2;
    uint8_t* p = k->p == k->inline_buf ? malloc(cap) : realloc(k->p, cap);
    if (!p) { k->oom = 1; return; }
    if (k->p == k->inline_buf) memcpy(p, k->inline_buf, k->len);
    k->p = p; k->cap = cap;
  }
  memcpy(k->p + k->len, data, n);
  k->len += n;
}
static void key_tensor(key_t_* k, const tpu_tensor_t* t) {
  int32_t hdr[2] = {t->ndim, t->ndim >= 0 ? t->dtype : -1};
  key_put(k, hdr, sizeof(hdr));
  if (t->ndim <= 0) return;
  key_sizes_t* z = k->sizes;
  if (__builtin_expect(!z, 1)) { key_put(k, t->sizes, (size_t)t->ndim * sizeof(int64_t)); return; }
  if (z->n < 0 || z->n + t->ndim > TPU_SHAPE_FAMILY_MAX_SLOTS) { z->n = -1; return; }
  memcpy(z->v + z->n, t->sizes, (size_t)t->ndim * sizeof(int64_t));
  z->n += t->ndim;
}
static tpu_status_t build_key(key_t_* k, const char* name, const tpu_arg_t* args, int nargs,
                              const tpu_tensor_t* outs, int nouts, uint32_t key_scalars,
                              tpu_key_class_fn key_class, int precision) {
  /* a non-default matmul precision leads the key (a byte no op name starts with) */
  if (precision) { uint8_t b = (uint8_t)precision; key_put(k, &b, 1); }
  key_put(k, name, strlen(name) + 1);
  for (int i = 0; i < nargs; ++i) {
    const tpu_arg_t* a = &args[i];
    int32_t kind = a->kind;
    key_put(k, &kind, sizeof(kind));
    switch (a->kind) {
      case TPU_ARG_TENSOR:
        if (!a->tensor) return TPU_ERR(INVALID_ARGUMENT, "%s: argument %d: NULL tensor", name, i);
        if (a->tensor->ndim < 0 || a->tensor->ndim > TPU_MAX_DIMS ||
            a->tensor->dtype < 0 || a->tensor->dtype >= TPU_DTYPE_COUNT)
          return TPU_ERR(INVALID_ARGUMENT, "%s: argument %d: bad tensor record", name, i);
        key_tensor(k, a->tensor);
        break;
      case TPU_ARG_SCALAR: { int32_t s[2] = {a->scalar_dtype, (int32_t)a->scalar_flags}; key_put(k, s, sizeof(s)); break; }
      case TPU_ARG_INT: case TPU_ARG_BOOL: key_put(k, &a->i, sizeof(a->i)); break;
      case TPU_ARG_INT_LIST: case TPU_ARG_BOOL_LIST:
        key_put(k, &a->len, sizeof(a->len));
        if (a->len > 0) key_put(k, a->ints, (size_t)a->len * sizeof(int64_t));
        break;
      case TPU_ARG_DOUBLE_LIST: key_put(k, &a->len, sizeof(a->len)); break;
      case TPU_ARG_STRING: if (a->str) key_put(k, a->str, strlen(a->str) + 1); break;
      case TPU_ARG_TENSOR_LIST:
        key_put(k, &a->len, sizeof(a->len));
        for (int64_t j = 0; j < a->len; ++j) key_tensor(k, &a->tensors[j]);
        break;
      case TPU_ARG_GENERATOR: { int32_t g = a->generator != NULL; key_put(k, &g, sizeof(g)); break; }
      default: break; /* NONE, DOUBLE: kind only */
    }
    if (i < 32 && ((key_scalars >> i) & 1u) && (a->kind == TPU_ARG_SCALAR || a->kind == TPU_ARG_DOUBLE)) {
      /* a structural scalar (see tpu_lowering_t.key_scalars / key_class) */
      int fl = a->kind == TPU_ARG_DOUBLE || tpu_dtype_is_floating(a->scalar_dtype);
      if (key_class) {
        int32_t c = key_class(i, fl ? a->f : (double)a->i);
        key_put(k, &c, sizeof(c));
      } else if (fl) {
        key_put(k, &a->f, sizeof(a->f));
      } else {
        key_put(k, &a->i, sizeof(a->i));
      }
    }
  }
  int32_t n = nouts;
  key_put(k, &n, sizeof(n));
  for (int j = 0; j < nouts; ++j) {
    /* ndim == -1: an absent (undefined) output; lw_output binds a dummy for it */
    if (outs[j].ndim < -1 || outs[j].ndim > TPU_MAX_DIMS ||
        (outs[j].ndim >= 0 && (outs[j].dtype < 0 || outs[j].dtype >= TPU_DTYPE_COUNT)))
      return TPU_ERR(INVALID_ARGUMENT, "%s: output %d: bad tensor record", name, j);
    key_tensor(k, &outs[j]);
  }
  return k->oom ? TPU_ERR(OUT_OF_MEMORY, "out of host memory") : TPU_OK;
}

/* Keys are hashed with hash.h's tpu_hash_fast: the full key is compared on lookup, so a collision costs a
 * miss, never a wrong executable, and the hash only picks memo slots and cache buckets (never stored on
 * disk: the disk level hashes keys itself); a tiny add's ~120-byte key: ~90 instructions where tpu_hash64
 * took ~350. */

static double now_s(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A shape family's view of one call (NULL: none): the key without sizes, and the sizes. */
typedef struct { const uint8_t* key; size_t len; const int64_t* slots; int n_slots; int instantiated; } fam_call_t;

/* lower_only: the entry gets everything but its executable (e->exe NULL; see tpu_exec_entry_materialize);
 * *out_reads_precision then says whether the lowered graph has DOTs/CONVs. fc (optional): a size the
 * op's shape family can make without the passes (fc->instantiated = 1), or a sample for it. */
static tpu_status_t compile_entry(const tpu_lowering_t* l, const char* name, const tpu_arg_t* args, int nargs,
                                  const tpu_tensor_t* outs, int nouts, int precision, int lower_only,
                                  int* out_reads_precision, fam_call_t* fc, tpu_exec_entry_t** out_e) {
  double t0 = now_s();
  tpu_lower_ctx_t* cx = calloc(1, sizeof(*cx));
  if (!cx) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  tpu_ir_graph_init(&cx->g);
  cx->g.precision = precision; /* DOTs and CONVs carry it */
  cx->op_name = name; cx->args = args; cx->nargs = nargs; cx->outs = outs; cx->nouts = nouts;
  cx->gen_arg = -1;
  tpu_status_t st = l->fn(cx);
  if (st == TPU_OK && cx->g.status) { st = cx->g.status; cx->g.status = TPU_OK; }
  if (st == TPU_OK && cx->g.n_outputs != nouts + cx->n_arg_outs)
    st = TPU_ERR(INTERNAL, "%s: lowering bound %d of %d outputs", name, cx->g.n_outputs, nouts);
  tpu_exec_entry_t* e = NULL;
  if (st == TPU_OK) {
    e = calloc(1, sizeof(*e));
    if (!e) st = TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  }
  if (st == TPU_OK) {
    e->n_tbind = cx->n_tbind; e->n_sbind = cx->n_sbind; e->gen_arg = cx->gen_arg;
    e->rng_increment = cx->rng_increment; e->n_outputs = nouts;
    e->n_arg_outs = cx->n_arg_outs;
    memcpy(e->arg_outs, cx->arg_outs, sizeof(e->arg_outs));
    memcpy(e->tbind, cx->tbind, (size_t)cx->n_tbind * sizeof(e->tbind[0]));
    memcpy(e->sbind, cx->sbind, (size_t)cx->n_sbind * sizeof(e->sbind[0]));
    e->n_checks = cx->n_checks;
    memcpy(e->checks, cx->checks, sizeof(e->checks));
  }
  if (st == TPU_OK && lower_only && out_reads_precision) *out_reads_precision = graph_reads_precision(&cx->g);
  if (st == TPU_OK && !lower_only && fc) {
    /* a new size of a known family: the optimized graph from its template, checked against this call */
    tpu_ir_graph_t post;
    int r = tpu_shape_family_try(fc->key, fc->len, fc->slots, fc->n_slots, cx, &post);
    if (r == 1) {
      int seq = tpu_compiler_dump_next_seq();
      if (seq >= 0) { tpu_compiler_dump(&cx->g, name, seq, "before"); tpu_compiler_dump(&post, name, seq, "after"); }
      tpu_status_t vs = tpu_exec_graph_check(e, &post, args, nargs, outs, nouts);
      if (!vs) vs = tpu_host_compile(&post, &e->exe);
      if (vs) { tpu_status_free(vs); e->exe = NULL; } /* never expected: compile in full below */
      else fc->instantiated = 1;
      tpu_ir_graph_free(&post);
    }
    if (!e->exe) {
      tpu_ir_graph_t pre;
      int learn = r == 0 && tpu_ir_graph_clone(&cx->g, &pre) == TPU_OK;
      st = tpu_compiler_compile(&cx->g, name, &e->exe); /* passes + host plan */
      if (learn && st == TPU_OK) tpu_shape_family_learn(fc->key, fc->len, fc->slots, fc->n_slots, cx, &pre, tpu_host_exe_graph(e->exe));
      else if (learn) tpu_ir_graph_free(&pre);
    }
  } else if (st == TPU_OK && !lower_only) {
    st = tpu_compiler_compile(&cx->g, name, &e->exe); /* passes + host plan */
  }
  if (st == TPU_OK) {
    if (!lower_only) tpu_metrics_add_compile(now_s() - t0);
    *out_e = e;
  } else if (e) {
    free(e);
  }
  tpu_ir_graph_free(&cx->g);
  free(cx);
  return st;
}

tpu_status_t tpu_exec_entry_materialize(tpu_exec_entry_t* e, const tpu_lowering_t* l, const char* name,
                                        const tpu_arg_t* args, int nargs, const tpu_tensor_t* outs, int nouts) {
  if (e->exe) return TPU_OK;
  tpu_exec_entry_t* full = NULL;
  TPU_RETURN_IF_ERROR(compile_entry(l, name, args, nargs, outs, nouts, 0, 0, NULL, NULL, &full));
  if (full->n_tbind != e->n_tbind || full->n_sbind != e->n_sbind || full->n_arg_outs != e->n_arg_outs ||
      full->rng_increment != e->rng_increment) {
    tpu_host_exe_free(full->exe); free(full);
    return TPU_ERR(INTERNAL, "%s: the lowering bound other parameters when compiled again", name);
  }
  e->exe = full->exe;
  free(full);
  return TPU_OK;
}

/* ---- per-thread memo in front of the shared cache: eager programs repeat a few
 * signatures, so most lookups skip the cache's mutex. Each slot holds a reference
 * (an evicted executable stays valid: equal keys always mean equal executables);
 * slots are released when the thread exits. */
#define MEMO_SLOTS 8
typedef struct { tpu_exec_entry_t* e[MEMO_SLOTS]; int next; uint64_t gen; } memo_t;
static pthread_key_t g_memo_key;
static pthread_once_t g_memo_once = PTHREAD_ONCE_INIT;
static _Thread_local memo_t* tl_memo; /* == pthread_getspecific(g_memo_key), without the call */
static void memo_destroy(void* p) { /* at thread exit, on that thread */
  memo_t* m = p;
  tl_memo = NULL;
  for (int i = 0; i < MEMO_SLOTS; ++i) tpu_exec_entry_release(m->e[i]);
  free(m);
}
static void memo_key_init(void) { pthread_key_create(&g_memo_key, memo_destroy); }
static memo_t* memo_get(void) {
  memo_t* m = tl_memo;
  if (__builtin_expect(!m, 0)) {
    pthread_once(&g_memo_once, memo_key_init);
    m = pthread_getspecific(g_memo_key);
    if (!m && (m = calloc(1, sizeof(*m)))) pthread_setspecific(g_memo_key, m);
    tl_memo = m;
  }
  if (m && m->gen != tpu_exec_cache_generation()) { /* the cache was cleared: so is the memo */
    for (int i = 0; i < MEMO_SLOTS; ++i) { tpu_exec_entry_release(m->e[i]); m->e[i] = NULL; }
    m->gen = tpu_exec_cache_generation();
  }
  return m;
}
static tpu_exec_entry_t* memo_lookup(uint64_t h, const uint8_t* key, size_t len) {
  memo_t* m = memo_get();
  if (!m) return NULL;
  for (int i = 0; i < MEMO_SLOTS; ++i) {
    tpu_exec_entry_t* e = m->e[i];
    if (e && e->hash == h && e->key_len == len && !memcmp(e->key, key, len)) {
      __atomic_add_fetch(&e->refcount, 1, __ATOMIC_ACQ_REL);
      return e;
    }
  }
  return NULL;
}
static void memo_store(tpu_exec_entry_t* e) {
  memo_t* m = memo_get();
  if (!m) return;
  __atomic_add_fetch(&e->refcount, 1, __ATOMIC_ACQ_REL);
  tpu_exec_entry_release(m->e[m->next]);
  m->e[m->next] = e;
  m->next = (m->next + 1) % MEMO_SLOTS;
}

/* ---- runtime scalar checks */
static double scalar_value(const tpu_arg_t* a) {
  if (a->kind == TPU_ARG_DOUBLE || (a->kind == TPU_ARG_SCALAR && tpu_dtype_is_floating(a->scalar_dtype))) return a->f;
  return (double)a->i;
}
static tpu_status_t check_scalar(const tpu_scalar_check_t* c, const tpu_arg_t* args, int nargs) {
  if (c->arg < 0 || c->arg >= nargs || args[c->arg].kind == TPU_ARG_NONE) return TPU_OK;
  double v = scalar_value(&args[c->arg]), w = c->bound;
  if (c->arg2 >= 0) {
    if (c->arg2 >= nargs || args[c->arg2].kind == TPU_ARG_NONE) return TPU_OK;
    w = scalar_value(&args[c->arg2]);
  }
  int ok;
  switch (c->cmp) {
    case TPU_IR_CMP_EQ: ok = v == w; break; case TPU_IR_CMP_NE: ok = v != w; break;
    case TPU_IR_CMP_LT: ok = v < w; break; case TPU_IR_CMP_LE: ok = v <= w; break;
    case TPU_IR_CMP_GT: ok = v > w; break; default: ok = v >= w; break;
  }
  if (ok) return TPU_OK;
  char buf[160];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  snprintf(buf, sizeof buf, c->msg, v, w);
#pragma GCC diagnostic pop
  return TPU_ERR(INVALID_ARGUMENT, "%s", buf);
}

/* ---- small tasks: run on the host thread when the queue is idle (tpu_rt_queue_enqueue_small) */
#define SMALL_MAX_ELEMS 4096  /* per tensor the task binds, and per value of its graph */
#define SMALL_MAX_TOTAL 16384 /* all values of its graph together */
#define SMALL_MAX_OPS 32
/* A graph of only elementwise / shape / reduction ops on a few thousand elements (no DOT, CONV,
 * pooling window or custom kernel): microseconds of work, wherever its tensors' data lies. */
static int entry_small(tpu_exec_entry_t* e) {
  int s = __atomic_load_n(&e->small, __ATOMIC_RELAXED);
  if (__builtin_expect(s != 0, 1)) return s == 1;
  const tpu_ir_graph_t* g = tpu_host_exe_graph(e->exe);
  int64_t total = 0;
  int ok = g != NULL && g->n_ops <= SMALL_MAX_OPS;
  for (int i = 0; ok && i < g->n_ops; ++i) {
    const tpu_ir_op_t* o = &g->ops[i];
    if (o->opcode == TPU_IR_DOT || o->opcode == TPU_IR_CONV || o->opcode == TPU_IR_CUSTOM ||
        o->opcode == TPU_IR_REDUCE_WINDOW || o->type.rank < 0 || o->type.rank > TPU_MAX_DIMS) { ok = 0; break; }
    int64_t n = 1;
    for (int d = 0; d < o->type.rank && ok; ++d) {
      if (o->type.dims[d] < 0 || o->type.dims[d] > SMALL_MAX_ELEMS) ok = 0;
      else n *= o->type.dims[d];
    }
    if (n > SMALL_MAX_ELEMS) ok = 0;
    total += n;
  }
  ok = ok && total <= SMALL_MAX_TOTAL;
  __atomic_store_n(&e->small, ok ? 1 : 2, __ATOMIC_RELAXED);
  return ok;
}
/* ---- execution task */
typedef struct {
  tpu_exec_entry_t* e;
  int np, nout;
  tpu_host_scalar_t scalars[TPU_LOWER_MAX_SCALARS];
  double sink; /* where absent outputs (ndim -1) are written */
  tpu_debug_graph_t* rec; /* debug recording (record.h), usually NULL */
  int pooled; /* a TASK_POOL_VIEWS-sized block that goes back to g_task_pool */
  tpu_host_view_t views[]; /* np params, then nout outputs */
} task_t;

/* Task blocks: ops allocate a task on the enqueuing thread and the device worker frees it;
 * a malloc/free pair across threads costs more than the rest of binding, so blocks of the
 * common size are recycled through a small global free list. Try-lock only: when the list
 * is busy, empty or full the block comes from / goes to malloc, so nobody ever waits. */
#define TASK_POOL_VIEWS 8
#define TASK_POOL_MAX 256
typedef struct task_blk_s { struct task_blk_s* next; } task_blk_t;
static struct { char busy; int n; task_blk_t* top; } g_task_pool;
static task_t* task_alloc(int nviews) {
  if (nviews <= TASK_POOL_VIEWS) {
    task_blk_t* b = NULL;
    if (!__atomic_test_and_set(&g_task_pool.busy, __ATOMIC_ACQUIRE)) {
      if ((b = g_task_pool.top)) { g_task_pool.top = b->next; g_task_pool.n--; }
      __atomic_clear(&g_task_pool.busy, __ATOMIC_RELEASE);
    }
    task_t* t = b ? (task_t*)b : malloc(sizeof(task_t) + TASK_POOL_VIEWS * sizeof(tpu_host_view_t));
    if (t) t->pooled = 1;
    return t;
  }
  task_t* t = malloc(sizeof(task_t) + (size_t)nviews * sizeof(tpu_host_view_t));
  if (t) t->pooled = 0;
  return t;
}
static void task_dealloc(task_t* t) {
  if (t->pooled && !__atomic_test_and_set(&g_task_pool.busy, __ATOMIC_ACQUIRE)) {
    int kept = g_task_pool.n < TASK_POOL_MAX;
    if (kept) { task_blk_t* b = (task_blk_t*)t; b->next = g_task_pool.top; g_task_pool.top = b; g_task_pool.n++; }
    __atomic_clear(&g_task_pool.busy, __ATOMIC_RELEASE);
    if (kept) return;
  }
  free(t);
}

static tpu_status_t task_run(void* ctx) {
  task_t* t = ctx;
  if (t->rec) tpu_record_inputs(t->rec, t->views, t->np);
  tpu_status_t st = tpu_host_exe_run(t->e->exe, t->views, t->scalars, t->views + t->np);
  if (t->rec) { tpu_record_finish(t->rec, t->views + t->np, t->nout, st); t->rec = NULL; }
  return st;
}
static void task_free(void* ctx) {
  task_t* t = ctx;
  tpu_debug_graph_free(t->rec);
  tpu_exec_entry_release(t->e);
  task_dealloc(t);
}
static void to_view(tpu_host_view_t* v, const tpu_tensor_t* t) {
  v->data = t->data; v->dtype = t->dtype; v->rank = t->ndim;
  for (int d = 0; d < t->ndim; ++d) { v->sizes[d] = t->sizes[d]; v->strides[d] = t->strides[d]; }
}

/* ---- per-tensor list ops (_foreach_*, _fused_* optimizers) over long lists run as
 * several calls over slices, so one graph stays within TPU_IR_MAX_OUTPUTS outputs
 * and TPU_LOWER_MAX_PARAMS inputs. Applies when every tensor list (and every
 * Scalar[] list) has length N or 0 and the outputs are blocks of N (written lists,
 * Tensor[] returns) — the per-tensor independence these op families guarantee. */
static int list_split_plan(int list_op, const tpu_arg_t* args, int nargs, int nouts, int64_t* out_n,
                           int64_t* out_chunk, int* out_tail) {
  /* GradScaler's unscale writes one found_inf flag after its list, which each call only
   * ever sets: every slice gets that trailing output too. */
  if (!list_op) return 0;
  int tail = list_op == 2;
  nouts -= tail;
  int64_t n = 0;
  int nlists = 0, nscalar_lists = 0;
  for (int i = 0; i < nargs; ++i) {
    if (args[i].kind != TPU_ARG_TENSOR_LIST || args[i].len == 0) continue;
    if (n && args[i].len != n) return 0;
    n = args[i].len; nlists++;
  }
  for (int i = 0; i < nargs; ++i) nscalar_lists += args[i].kind == TPU_ARG_DOUBLE_LIST && args[i].len == n;
  if (n <= 1 || nouts % n) return 0;
  int64_t per_out = nouts / n;
  /* _foreach_ lowerings (foreach.c) bind any number of outputs and read each list once;
   * the fused optimizers keep per-call arrays of TPU_IR_MAX_OUTPUTS */
  int64_t max_out = list_op == 3 ? TPU_LOWER_MAX_PARAMS : TPU_IR_MAX_OUTPUTS;
  int64_t chunk = per_out ? (max_out - tail) / per_out : n;
  int64_t by_in = (TPU_LOWER_MAX_PARAMS - 8) / (nlists + (list_op != 3));
  if (by_in < chunk) chunk = by_in;
  if (nscalar_lists && (TPU_LOWER_MAX_SCALARS - 8) / nscalar_lists < chunk) chunk = (TPU_LOWER_MAX_SCALARS - 8) / nscalar_lists;
  if (chunk < 1) chunk = 1;
  if (n <= chunk) return 0;
  *out_n = n; *out_chunk = chunk; *out_tail = tail;
  return 1;
}
static tpu_status_t list_split_run(int device, const char* name, const tpu_arg_t* args, int nargs,
                                   const tpu_tensor_t* outs, int nouts, int64_t n, int64_t chunk, int tail) {
  tpu_arg_t* a = malloc((size_t)(nargs ? nargs : 1) * sizeof(tpu_arg_t));
  tpu_tensor_t* o = malloc((size_t)(nouts ? nouts : 1) * sizeof(tpu_tensor_t));
  if (!a || !o) { free(a); free(o); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  int64_t blocks = (nouts - tail) / n;
  tpu_status_t st = TPU_OK;
  for (int64_t b = 0; b < n && st == TPU_OK; b += chunk) {
    int64_t c = TPU_MIN(chunk, n - b);
    for (int i = 0; i < nargs; ++i) {
      a[i] = args[i];
      if (args[i].len != n) continue;
      if (args[i].kind == TPU_ARG_TENSOR_LIST) { a[i].tensors = args[i].tensors + b; a[i].len = c; }
      else if (args[i].kind == TPU_ARG_DOUBLE_LIST) { a[i].doubles = args[i].doubles + b; a[i].len = c; }
      else if (args[i].kind == TPU_ARG_INT_LIST || args[i].kind == TPU_ARG_BOOL_LIST) { a[i].ints = args[i].ints + b; a[i].len = c; }
    }
    for (int64_t k = 0; k < blocks; ++k) memcpy(o + k * c, outs + k * n + b, (size_t)c * sizeof(tpu_tensor_t));
    memcpy(o + blocks * c, outs + blocks * n, (size_t)tail * sizeof(tpu_tensor_t));
    st = tpu_op_run(device, name, a, nargs, o, (int)(blocks * c + tail));
  }
  free(a); free(o);
  return st;
}

tpu_status_t tpu_op_run(int device, const char* op_name, const tpu_arg_t* args, int nargs,
                        const tpu_tensor_t* outs, int nouts) {
  if (!op_name) return TPU_ERR(INVALID_ARGUMENT, "tpu_op_run: bad arguments");
  const tpu_op_t* op = tpu_op_find(op_name);
  if (!op) {
    TPU_RETURN_IF_ERROR(tpu_rt_init());
    return TPU_ERR(UNSUPPORTED, "%s: not implemented for the tpu device", op_name);
  }
  return tpu_op_run_found(op, device, args, nargs, outs, nouts);
}

tpu_status_t tpu_op_run_found(const tpu_op_t* op, int device, const tpu_arg_t* args, int nargs,
                              const tpu_tensor_t* outs, int nouts) {
  if (!op || (nargs && !args) || (nouts && !outs) || nargs < 0 || nouts < 0)
    return TPU_ERR(INVALID_ARGUMENT, "tpu_op_run: bad arguments");
  TPU_RETURN_IF_ERROR(tpu_rt_init());
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  const tpu_lowering_t* l = op->l;
  const char* op_name = l->name;
  int64_t split_n = 0, split_chunk = 0;
  int split_tail = 0;
  if (list_split_plan(op->list_op, args, nargs, nouts, &split_n, &split_chunk, &split_tail))
    return list_split_run(device, op_name, args, nargs, outs, nouts, split_n, split_chunk, split_tail);
  key_t_ k; /* fields set one by one: an initializer would zero the 1 KiB inline buffer every op */
  k.p = k.inline_buf; k.len = 0; k.cap = sizeof(k.inline_buf); k.oom = 0; k.sizes = NULL;
  const int uses_precision = __atomic_load_n(&op->uses_precision, __ATOMIC_ACQUIRE);
  int precision = uses_precision ? tpu_rt_matmul_precision() : 0;
  tpu_status_t st = build_key(&k, op_name, args, nargs, outs, nouts, l->key_scalars, l->key_class, precision);
  if (st) { if (k.p != k.inline_buf) free(k.p); return st; }
  uint64_t h = tpu_hash_fast(k.p, k.len);
  tpu_exec_entry_t* e = memo_lookup(h, k.p, k.len);
  if (!e) {
    e = tpu_exec_cache_lookup(h, k.p, k.len);
    if (e) memo_store(e);
  }
  /* a made size called again is a program's fixed size, not one that changes every call: a later process
   * should find it on disk (the first call kept it in memory only, see below) */
  if (e && __atomic_load_n(&e->disk_later, __ATOMIC_RELAXED) && __atomic_exchange_n(&e->disk_later, 0, __ATOMIC_ACQ_REL))
    tpu_exec_disk_store(e);
  tpu_metrics_add_cache(e != NULL);
  if (!e) {
    /* the disk level (cache/exec_codec.h): a hit skips lowering and the compiler passes */
    /* not known to use the precision yet: compile with the current one; if the graph turns
     * out to use it, mark the lowering and key this entry with it */
    if (!uses_precision) precision = tpu_rt_matmul_precision();
    int from_disk = tpu_exec_disk_load(k.p, k.len, args, nargs, outs, nouts, &e);
    if (from_disk && !uses_precision && precision && graph_reads_precision(tpu_host_exe_graph(e->exe))) {
      tpu_host_exe_free(e->exe); free(e); e = NULL; from_disk = 0; /* built for HIGHEST */
    }
    /* While a capture records a new size, an op's own executable is only a fallback (the capture runs one
     * fused graph): lowered now (key, bindings, checks), compiled only if a fallback runs it; not cached. */
    int lazy = !from_disk && precision == 0 && tpu_trace_capturing(device), reads_precision = 0;
    /* the op's shape family (cache/shape_family.h): this key without its tensor sizes */
    key_sizes_t fz;
    key_t_ fk;
    fam_call_t fc = {0};
    fk.p = fk.inline_buf; fk.len = 0; fk.cap = sizeof(fk.inline_buf); fk.oom = 0; fk.sizes = &fz; fz.n = 0;
    if (!from_disk && !lazy && tpu_shape_family_enabled() &&
        build_key(&fk, op_name, args, nargs, outs, nouts, l->key_scalars, l->key_class, precision) == TPU_OK &&
        fz.n > 0) {
      fc.key = fk.p; fc.len = fk.len; fc.slots = fz.v; fc.n_slots = fz.n;
    }
    if (!from_disk) st = compile_entry(l, op_name, args, nargs, outs, nouts, precision, lazy, &reads_precision,
                                       fc.key ? &fc : NULL, &e);
    if (fk.p != fk.inline_buf) free(fk.p);
    if (st == TPU_OK && lazy) {
      if (!uses_precision && reads_precision) __atomic_store_n(&((struct tpu_op_s*)op)->uses_precision, 1, __ATOMIC_RELEASE);
      e->hash = h; e->key_len = k.len; e->refcount = 1;
      if (!(e->key = malloc(k.len))) { free(e); e = NULL; st = TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
      else memcpy(e->key, k.p, k.len);
    } else if (st == TPU_OK && !uses_precision && graph_reads_precision(tpu_host_exe_graph(e->exe))) {
      __atomic_store_n(&((struct tpu_op_s*)op)->uses_precision, 1, __ATOMIC_RELEASE);
      if (precision) {
        k.len = 0;
        st = build_key(&k, op_name, args, nargs, outs, nouts, l->key_scalars, l->key_class, precision);
        h = tpu_hash_fast(k.p, k.len);
        if (st) { tpu_host_exe_free(e->exe); free(e); e = NULL; }
      }
    }
    if (st == TPU_OK && !lazy) {
      e->hash = h; e->key_len = k.len;
      e->key = malloc(k.len);
      if (!e->key) { tpu_host_exe_free(e->exe); free(e); st = TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
      else {
        memcpy(e->key, k.p, k.len);
        /* a size made from a family's templates at its second call (families live in memory and disk hits do not
         * teach them, so a later process would compile a program's fixed size in full: the warm minGPT step's
         * zero_); a size that changes every call is never written: a file costs more (35-700 us here) than the
         * size costs to make */
        if (!from_disk && !fc.instantiated) tpu_exec_disk_store(e);
        else if (!from_disk) e->disk_later = 1;
        e = tpu_exec_cache_insert(e); memo_store(e);
      }
    }
  }
  if (k.p != k.inline_buf) free(k.p);
  if (st) return st;
  for (int c = 0; c < e->n_checks; ++c) {
    st = check_scalar(&e->checks[c], args, nargs);
    if (st) { tpu_exec_entry_release(e); return st; }
  }
  if (tpu_trace_should_record(device)) { /* fused eager or a capture: lower/trace.c runs it later */
    st = tpu_trace_record(device, l, op_name, args, nargs, outs, nouts, e);
    tpu_exec_entry_release(e);
    return st;
  }
  if (!e->exe) { /* a lazy entry whose capture ended meanwhile */
    st = tpu_exec_entry_materialize(e, l, op_name, args, nargs, outs, nouts);
    if (st) { tpu_exec_entry_release(e); return st; }
  }
  /* bind */
  task_t* t = task_alloc(e->n_tbind + nouts + e->n_arg_outs);
  if (!t) { tpu_exec_entry_release(e); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  t->e = e; t->np = e->n_tbind; t->nout = nouts + e->n_arg_outs; t->rec = NULL;
  for (int p = 0; p < e->n_tbind; ++p) {
    const tpu_tensor_bind_t* b = &e->tbind[p];
    const tpu_tensor_t* src = b->src == TPU_BIND_ARG ? args[b->arg].tensor
                            : b->src == TPU_BIND_LIST ? &args[b->arg].tensors[b->index] : &outs[b->arg];
    to_view(&t->views[p], src);
  }
  uint64_t seed = 0, offset = 0;
  if (e->rng_increment) { /* gen_arg < 0: the op has no Generator argument -> device default */
    tpu_rt_generator_t* g = e->gen_arg >= 0 && args[e->gen_arg].kind == TPU_ARG_GENERATOR && args[e->gen_arg].generator
                              ? args[e->gen_arg].generator : tpu_rt_default_generator(device);
    if (!g) { task_free(t); return TPU_ERR(INVALID_ARGUMENT, "%s: no generator for device %d", op_name, device); }
    tpu_rt_generator_reserve(g, e->rng_increment, &seed, &offset);
  }
  for (int s = 0; s < e->n_sbind; ++s) {
    const tpu_scalar_bind_t* b = &e->sbind[s];
    tpu_host_scalar_t* v = &t->scalars[s];
    if (b->kind == TPU_SBIND_GEN_SEED) { v->i = (int64_t)seed; v->f = 0; continue; }
    if (b->kind == TPU_SBIND_GEN_OFFSET) { v->i = (int64_t)offset; v->f = 0; continue; }
    const tpu_arg_t* a = &args[b->arg];
    if (b->kind == TPU_SBIND_LIST_DOUBLE) { v->f = a->doubles[b->index]; v->i = (int64_t)v->f; continue; }
    if (a->kind == TPU_ARG_DOUBLE || (a->kind == TPU_ARG_SCALAR && tpu_dtype_is_floating(a->scalar_dtype))) {
      v->f = a->f;
      v->i = (a->f >= -9.2233720368547758e18 && a->f < 9.2233720368547758e18) ? (int64_t)a->f : INT64_MIN;
    } else { v->i = a->i; v->f = (double)a->i; }
  }
  for (int j = 0; j < nouts; ++j) {
    tpu_host_view_t* v = &t->views[e->n_tbind + j];
    if (outs[j].ndim >= 0) { to_view(v, &outs[j]); continue; }
    v->data = (char*)&t->sink; v->dtype = TPU_DTYPE_F64; v->rank = 0;
  }
  for (int j = 0; j < e->n_arg_outs; ++j) to_view(&t->views[e->n_tbind + nouts + j], args[e->arg_outs[j]].tensor);
  t->rec = tpu_record_enabled() ? tpu_record_begin(op_name, tpu_host_exe_graph(e->exe), t->scalars) : NULL;
  tpu_metrics_add_ops(1);
  if (!t->rec && entry_small(e)) /* its graph's values are the views' sizes */
    return tpu_rt_queue_enqueue_small(device, op_name, task_run, t, task_free);
  return tpu_rt_queue_enqueue(device, op_name, task_run, t, task_free);
}

