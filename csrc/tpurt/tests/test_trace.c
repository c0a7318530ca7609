/* test_trace.c — fused eager and graph capture (lower/trace.c) without torch: recorded ops are
 * flushed as one graph that gives bitwise the results strict eager gives; views of pending
 * values, writes into slices of them and layout-sensitive readers stay exact; the trace cache,
 * the compiler passes and the disk level see fused graphs (a second process loads them instead
 * of compiling); captures replay on new inputs, refuse what they cannot replay with a reason;
 * the debug recorder sees fused graphs. Run under ASan/UBSan by `make test-sanitize`. */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

typedef struct { void* p; tpu_tensor_t t; } buf_t;

static uint32_t g_seed = 12345;
static float frand(void) { g_seed = g_seed * 1664525u + 1013904223u; return (float)(g_seed >> 8) / 16777216.0f * 2.0f - 1.0f; }

static buf_t fbuf(int ndim, const int64_t* sizes, const float* host) {
  buf_t b = {0};
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= sizes[d];
  OK(tpu_rt_malloc(0, (size_t)n * 4, &b.p));
  if (host) OK(tpu_rt_memcpy_h2d(0, b.p, host, (size_t)n * 4));
  b.t = tpu_tensor_contiguous(b.p, 0, TPU_DTYPE_F32, ndim, sizes);
  return b;
}
static void fget(const buf_t* b, float* host) {
  int64_t n = 1;
  for (int d = 0; d < b->t.ndim; ++d) n *= b->t.sizes[d];
  OK(tpu_rt_memcpy_d2h(0, host, b->p, (size_t)n * 4)); /* flushes the device's trace first */
}
static void drop(buf_t* b) { tpu_rt_free(0, b->p); b->p = NULL; }

static void add(const tpu_tensor_t* a, const tpu_tensor_t* b, double alpha, const tpu_tensor_t* out) {
  tpu_arg_t args[] = {tpu_arg_tensor(a), tpu_arg_tensor(b), tpu_arg_f64(alpha), tpu_arg_tensor(out)};
  OK(tpu_op_run(0, "aten::add.out", args, 4, out, 1));
}
static void mul(const tpu_tensor_t* a, const tpu_tensor_t* b, const tpu_tensor_t* out) {
  tpu_arg_t args[] = {tpu_arg_tensor(a), tpu_arg_tensor(b), tpu_arg_tensor(out)};
  OK(tpu_op_run(0, "aten::mul.out", args, 3, out, 1));
}
static void sum_dim(const tpu_tensor_t* x, int64_t dim, const tpu_tensor_t* out) {
  int64_t d[1] = {dim};
  tpu_arg_t args[] = {tpu_arg_tensor(x), tpu_arg_int_list(d, 1), tpu_arg_bool(false), tpu_arg_none(), tpu_arg_tensor(out)};
  OK(tpu_op_run(0, "aten::sum.IntList_out", args, 5, out, 1));
}
static tpu_tensor_t transposed(const tpu_tensor_t* t) { /* 2-d view with swapped dims */
  tpu_tensor_t v = *t;
  v.sizes[0] = t->sizes[1]; v.sizes[1] = t->sizes[0];
  v.strides[0] = t->strides[1]; v.strides[1] = t->strides[0];
  return v;
}
static tpu_trace_stats_t stats(void) { tpu_trace_stats_t s; tpu_trace_stats_get(&s); return s; }

/* ---- A workload run strict and fused: an elementwise chain, an in-place update of a pending
 * value, a transposed view of a pending value, a reduction of a non-contiguous intermediate
 * that is then overwritten (its reader must see strict eager's layout), a write into a row
 * slice of a pending value followed by a read of the whole. Results: d, s, e, c. */
#define R 37
#define C 53
typedef struct { float d[R * C], s[C], e[C * R], c[R * C], u[C]; } results_t;
static void workload(const buf_t* a, const buf_t* b, const buf_t* bt, results_t* out) {
  int64_t rc[2] = {R, C}, cr[2] = {C, R}, c1[1] = {C};
  buf_t c = fbuf(2, rc, NULL), d = fbuf(2, rc, NULL), s = fbuf(1, c1, NULL), e = fbuf(2, cr, NULL), u = fbuf(1, c1, NULL);
  buf_t nt = fbuf(2, cr, NULL);
  add(&a->t, &b->t, 2.5, &c.t);            /* c = a + 2.5 b */
  mul(&c.t, &a->t, &d.t);                  /* d = c * a */
  add(&d.t, &c.t, 1.0, &d.t);              /* d += c (in place on a pending value) */
  sum_dim(&d.t, 0, &s.t);                  /* s = d.sum(0) */
  tpu_tensor_t ct = transposed(&c.t);
  mul(&ct, &bt->t, &e.t);                  /* e = c^T * bt: a view of a pending value */
  tpu_tensor_t n = transposed(&nt.t);      /* n: (R, C) with transposed strides */
  mul(&a->t, &b->t, &n);
  sum_dim(&n, 0, &u.t);                    /* reduce of a non-contiguous value ... */
  add(&n, &a->t, 1.0, &n);                 /* ... which is then overwritten */
  tpu_tensor_t row = c.t;                  /* rows 3..9 of c += b's rows */
  row.sizes[0] = 7; row.data = (float*)c.p + 3 * C;
  tpu_tensor_t brow = b->t; brow.sizes[0] = 7;
  add(&row, &brow, -1.0, &row);
  mul(&c.t, &d.t, &c.t);                   /* reads the whole of c */
  fget(&d, out->d); fget(&s, out->s); fget(&e, out->e); fget(&c, out->c); fget(&u, out->u);
  drop(&c); drop(&d); drop(&s); drop(&e); drop(&u); drop(&nt);
}

static void test_fused_matches_strict(void) {
  static float ha[R * C], hb[R * C], hbt[C * R];
  for (int i = 0; i < R * C; ++i) { ha[i] = frand(); hb[i] = frand(); hbt[i] = frand(); }
  int64_t rc[2] = {R, C}, cr[2] = {C, R};
  buf_t a = fbuf(2, rc, ha), b = fbuf(2, rc, hb), bt = fbuf(2, cr, hbt);
  static results_t strict, fused, again;
  OK(tpu_trace_set_enabled(false));
  workload(&a, &b, &bt, &strict);
  /* strict results against loops (elementwise exactly as the kernels round: no contraction) */
  int ok = 1;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) {
      float c = ha[i * C + j] + (float)(2.5 * hb[i * C + j]), d = c * ha[i * C + j];
      d = d + c;
      ok &= fabsf(strict.d[i * C + j] - d) <= 1e-6f * (1 + fabsf(d));
      ok &= fabsf(strict.e[j * R + i] - c * hbt[j * R + i]) <= 1e-6f * (1 + fabsf(c));
    }
  CHECK(ok, "strict eager results against loops");
  tpu_metrics_t m0, m1;
  tpu_metrics_get(&m0);
  tpu_trace_stats_reset();
  OK(tpu_trace_set_enabled(true));
  CHECK(tpu_trace_enabled(), "fused eager on");
  workload(&a, &b, &bt, &fused);
  tpu_trace_stats_t s1 = stats();
  tpu_metrics_get(&m1);
  CHECK(s1.traced_ops >= 10 && s1.flushes >= 1 && s1.flushes <= 3 && s1.fallbacks == 0,
        "recorded and flushed as few graphs: %llu ops, %llu flushes, %llu fallbacks", (unsigned long long)s1.traced_ops,
        (unsigned long long)s1.flushes, (unsigned long long)s1.fallbacks);
  CHECK(m1.graph_ops_before > m0.graph_ops_before && m1.compiles > m0.compiles, "the fused graphs went through the compiler");
  CHECK(!memcmp(&strict, &fused, sizeof strict), "fused eager is bitwise strict eager");
  workload(&a, &b, &bt, &again);
  tpu_trace_stats_t s2 = stats();
  CHECK(s2.cache_hits >= s1.cache_misses && s2.cache_misses == s1.cache_misses, "the same trace hits the trace cache");
  CHECK(!memcmp(&strict, &again, sizeof strict), "cached fused executable is bitwise strict eager");
  OK(tpu_trace_set_enabled(false));
  drop(&a); drop(&b); drop(&bt);
}

/* ---- the debug recorder (tests/stablehlo_oracle.py's source) sees fused graphs */
static void test_recorder_sees_fused_graphs(void) {
  float hx[24];
  for (int i = 0; i < 24; ++i) hx[i] = frand();
  int64_t sz[2] = {4, 6};
  buf_t x = fbuf(2, sz, hx), y = fbuf(2, sz, NULL);
  OK(tpu_rt_synchronize(0));
  while (1) { tpu_debug_graph_t* g = tpu_debug_take_graph(); if (!g) break; tpu_debug_graph_free(g); }
  OK(tpu_trace_set_enabled(true));
  tpu_debug_record_graphs(true);
  mul(&x.t, &x.t, &y.t);
  add(&y.t, &x.t, 0.5, &y.t);
  OK(tpu_trace_flush(0));
  OK(tpu_rt_synchronize(0));
  tpu_debug_record_graphs(false);
  OK(tpu_trace_set_enabled(false));
  float hy[24];
  fget(&y, hy);
  int n = 0, fused = 0, ok = 0;
  for (tpu_debug_graph_t* g; (g = tpu_debug_take_graph()); tpu_debug_graph_free(g)) {
    n++;
    if (strncmp(g->op_name, "fused graph (aten::mul.out, aten::add.out", 40) != 0) continue;
    fused++;
    const tpu_debug_array_t* o = &g->arrays[g->n_arrays - 1];
    ok = g->text && strstr(g->text, "stablehlo.multiply") && !g->error && o->role == TPU_DEBUG_OUTPUT &&
         o->nbytes == sizeof hy && o->data && !memcmp(o->data, hy, sizeof hy);
  }
  CHECK(n == 1 && fused == 1 && ok, "one fused graph recorded with its StableHLO and output (%d records)", n);
  drop(&x); drop(&y);
}

/* ---- capture and replay */
static void test_capture_replay(void) {
  enum { N = 8, K = 16 };
  float hx[N * K], hw[N * K], hx2[N * K];
  for (int i = 0; i < N * K; ++i) { hx[i] = frand(); hw[i] = frand(); hx2[i] = frand(); }
  int64_t sz[2] = {N, K}, n1[1] = {N};
  buf_t x = fbuf(2, sz, hx), w = fbuf(2, sz, hw), y = fbuf(2, sz, NULL), s = fbuf(1, n1, NULL);
  OK(tpu_capture_begin(0));
  tpu_status_t st = tpu_capture_begin(0);
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT, "a second begin is refused");
  tpu_status_free(st);
  mul(&x.t, &w.t, &y.t);          /* y = x * w  (w: a constant) */
  add(&y.t, &x.t, 1.0, &y.t);     /* y += x */
  sum_dim(&y.t, 1, &s.t);         /* s = y.sum(1) */
  tpu_tensor_t outs[2] = {y.t, s.t};
  tpu_capture_t* cap = NULL;
  char reason[256];
  OK(tpu_capture_end(0, &x.t, 1, &w.t, 1, outs, 2, &cap, reason, sizeof reason));
  CHECK(cap && tpu_capture_num_ops(cap) == 3 && tpu_capture_num_outputs(cap) == 2 && tpu_capture_num_buffers(cap) == 2,
        "capture made: %s", reason);
  tpu_capture_t* none = NULL;
  st = tpu_capture_end(0, &x.t, 1, NULL, 0, outs, 2, &none, reason, sizeof reason);
  CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT && !none, "end without begin is refused");
  tpu_status_free(st);
  float hy[N * K], hs[N];
  fget(&y, hy); fget(&s, hs);
  int ok = 1;
  for (int i = 0; i < N * K; ++i) ok &= hy[i] == hx[i] * hw[i] + hx[i];
  CHECK(ok, "the captured ops ran once at capture_end");
  CHECK(cap != NULL, "capture kept");
  if (cap) {
    buf_t x2 = fbuf(2, sz, hx2), bufs[2];
    tpu_tensor_t bt[2];
    for (int b = 0; b < 2; ++b) {
      tpu_tensor_t meta;
      OK(tpu_capture_buffer_info(cap, b, &meta));
      bufs[b] = fbuf(meta.ndim, meta.sizes, NULL);
      bt[b] = bufs[b].t;
    }
    st = tpu_capture_run(cap, &x2.t, 0, bt, 2);
    CHECK(tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT, "wrong input count refused");
    tpu_status_free(st);
    OK(tpu_capture_run(cap, &x2.t, 1, bt, 2));
    float ry[N * K], rs[N];
    int yb = -1, sb = -1;
    for (int k = 0; k < 2; ++k) {
      tpu_tensor_t meta;
      int in = -1, b = -1;
      int64_t off = -1;
      OK(tpu_capture_output_info(cap, k, &meta, &in, &b, &off));
      if (k == 0) yb = b; else sb = b;
      CHECK(in == -1 && off == 0, "output %d is a fresh buffer", k);
    }
    CHECK(yb >= 0 && sb >= 0 && yb != sb, "outputs map to buffers");
    if (yb >= 0 && sb >= 0) {
      fget(&bufs[yb], ry); fget(&bufs[sb], rs);
      /* strict eager on x2 */
      mul(&x2.t, &w.t, &y.t); add(&y.t, &x2.t, 1.0, &y.t); sum_dim(&y.t, 1, &s.t);
      fget(&y, hy); fget(&s, hs);
      CHECK(!memcmp(ry, hy, sizeof ry) && !memcmp(rs, hs, sizeof rs), "replay on new inputs is bitwise strict eager");
    }
    tpu_capture_free(cap);
    drop(&x2); drop(&bufs[0]); drop(&bufs[1]);
  }
  /* a tensor that is neither an input nor a constant: not replayable, still executed */
  OK(tpu_capture_begin(0));
  mul(&x.t, &w.t, &y.t);
  outs[0] = y.t;
  OK(tpu_capture_end(0, &x.t, 1, NULL, 0, outs, 1, &cap, reason, sizeof reason));
  CHECK(!cap && strstr(reason, "neither an input nor a constant"), "undeclared tensor: %s", reason);
  fget(&y, hy);
  ok = 1;
  for (int i = 0; i < N * K; ++i) ok &= hy[i] == hx[i] * hw[i];
  CHECK(ok, "the refused capture's ops still ran");
  /* an explicit flush while capturing makes it non-replayable */
  OK(tpu_capture_begin(0));
  mul(&x.t, &w.t, &y.t);
  OK(tpu_trace_flush(0));
  OK(tpu_capture_end(0, &x.t, 1, &w.t, 1, outs, 1, &cap, reason, sizeof reason));
  CHECK(!cap && strstr(reason, "flushed while capturing"), "flush while capturing: %s", reason);
  st = tpu_trace_flush(99);
  CHECK(st != TPU_OK, "bad device refused");
  tpu_status_free(st);
  drop(&x); drop(&w); drop(&y); drop(&s);
}

/* ---- replays in flight: a finished replay's task is taken by a later replay of the same graph
 * (lower/trace.c ftask_take), so replays queued behind a held queue, replays enqueued while earlier
 * ones run, a replay after a failed task and replays still queued when the capture is freed must each
 * write strict eager's bits for their own inputs into their own buffers. */
static atomic_int g_gate;
static tpu_status_t gate_task(void* ctx) {
  (void)ctx;
  while (!atomic_load(&g_gate)) sched_yield();
  return TPU_OK;
}
static tpu_status_t failing_task(void* ctx) { (void)ctx; return TPU_ERR(INTERNAL, "injected failure"); }
static void test_capture_replays_in_flight(void) {
  enum { N = 8, K = 16, M = 24 };
  static float hx[M][N * K], hw[N * K], ry[N * K], rs[N], hy[N * K], hs[N];
  for (int i = 0; i < N * K; ++i) hw[i] = frand();
  for (int m = 0; m < M; ++m)
    for (int i = 0; i < N * K; ++i) hx[m][i] = frand();
  int64_t sz[2] = {N, K}, n1[1] = {N};
  buf_t x = fbuf(2, sz, hx[0]), w = fbuf(2, sz, hw), y = fbuf(2, sz, NULL), s = fbuf(1, n1, NULL);
  OK(tpu_capture_begin(0));
  mul(&x.t, &w.t, &y.t);
  add(&y.t, &x.t, 1.0, &y.t);
  sum_dim(&y.t, 1, &s.t);
  tpu_tensor_t outs[2] = {y.t, s.t};
  tpu_capture_t* cap = NULL;
  char reason[256];
  OK(tpu_capture_end(0, &x.t, 1, &w.t, 1, outs, 2, &cap, reason, sizeof reason));
  CHECK(cap && tpu_capture_num_buffers(cap) == 2, "capture made: %s", reason);
  if (!cap) { drop(&x); drop(&w); drop(&y); drop(&s); return; }
  int ob[2] = {-1, -1};
  for (int k = 0; k < 2; ++k) {
    tpu_tensor_t meta;
    int in = -1;
    int64_t off = -1;
    OK(tpu_capture_output_info(cap, k, &meta, &in, &ob[k], &off));
  }
  static buf_t xs[M], bufs[M][2];
  for (int m = 0; m < M; ++m) {
    xs[m] = fbuf(2, sz, hx[m]);
    for (int b = 0; b < 2; ++b) {
      tpu_tensor_t meta;
      OK(tpu_capture_buffer_info(cap, b, &meta));
      bufs[m][b] = fbuf(meta.ndim, meta.sizes, NULL);
    }
  }
  OK(tpu_rt_synchronize(0));
  int m = 0;
  atomic_store(&g_gate, 0);
  OK(tpu_rt_queue_enqueue(0, "gate", gate_task, NULL, NULL)); /* holds the queue: these 6 are all queued */
  for (; m < 6; ++m) {
    tpu_tensor_t bt[2] = {bufs[m][0].t, bufs[m][1].t};
    OK(tpu_capture_run(cap, &xs[m].t, 1, bt, 2));
  }
  atomic_store(&g_gate, 1);
  for (; m < 16; ++m) { /* while earlier ones run or have finished */
    tpu_tensor_t bt[2] = {bufs[m][0].t, bufs[m][1].t};
    OK(tpu_capture_run(cap, &xs[m].t, 1, bt, 2));
  }
  OK(tpu_rt_queue_enqueue(0, "failing task", failing_task, NULL, NULL));
  for (; m < 20; ++m) { /* after the failure */
    tpu_tensor_t bt[2] = {bufs[m][0].t, bufs[m][1].t};
    OK(tpu_capture_run(cap, &xs[m].t, 1, bt, 2));
  }
  tpu_status_t st = tpu_rt_synchronize(0);
  CHECK(st && strstr(tpu_status_message(st), "injected failure"), "the failure is reported: %s", tpu_status_message(st));
  tpu_status_free(st);
  for (; m < M; ++m) { /* the capture is freed while these are queued */
    tpu_tensor_t bt[2] = {bufs[m][0].t, bufs[m][1].t};
    OK(tpu_capture_run(cap, &xs[m].t, 1, bt, 2));
  }
  tpu_capture_free(cap);
  OK(tpu_rt_synchronize(0));
  int same = 0;
  for (m = 0; m < M; ++m) {
    fget(&bufs[m][ob[0]], ry); fget(&bufs[m][ob[1]], rs);
    mul(&xs[m].t, &w.t, &y.t); add(&y.t, &xs[m].t, 1.0, &y.t); sum_dim(&y.t, 1, &s.t);
    fget(&y, hy); fget(&s, hs);
    same += !memcmp(ry, hy, sizeof ry) && !memcmp(rs, hs, sizeof rs);
    drop(&xs[m]); drop(&bufs[m][0]); drop(&bufs[m][1]);
  }
  CHECK(same == M, "%d of %d replays in flight are bitwise strict eager on their inputs", same, M);
  drop(&x); drop(&w); drop(&y); drop(&s);
}

/* ---- ops recorded while capturing a new size are lowered, not compiled: a capture compiles one
 * executable (the fused graph); a capture broken by a flush compiles each flushed trace instead. */
static uint64_t compiles(void) { tpu_metrics_t m; tpu_metrics_get(&m); return m.compiles; }
static void test_capture_compiles_one_executable(void) {
  for (int broken = 0; broken < 2; ++broken) {
    const int64_t N = broken ? 5 : 7, K = broken ? 11 : 13; /* sizes no other test ran: cache misses */
    float hx[7 * 13], hw[7 * 13];
    for (int i = 0; i < N * K; ++i) { hx[i] = frand(); hw[i] = frand(); }
    int64_t sz[2] = {N, K}, n1[1] = {N};
    buf_t x = fbuf(2, sz, hx), w = fbuf(2, sz, hw), y = fbuf(2, sz, NULL), s = fbuf(1, n1, NULL);
    uint64_t c0 = compiles();
    OK(tpu_capture_begin(0));
    mul(&x.t, &w.t, &y.t);
    CHECK(compiles() == c0, "recording compiled nothing (%llu)", (unsigned long long)(compiles() - c0));
    if (broken) OK(tpu_trace_flush(0)); /* the recorded mul runs as a trace of its own */
    add(&y.t, &x.t, 1.0, &y.t);
    sum_dim(&y.t, 1, &s.t);
    tpu_tensor_t outs[2] = {y.t, s.t};
    tpu_capture_t* cap = NULL;
    char reason[256];
    OK(tpu_capture_end(0, &x.t, 1, &w.t, 1, outs, 2, &cap, reason, sizeof reason));
    CHECK(broken ? !cap : cap != NULL, "capture (broken %d): %s", broken, reason);
    /* intact: the fused graph is the one compile; broken: (mul) and (add, sum) */
    CHECK(compiles() - c0 == (broken ? 2u : 1u), "broken %d: %llu compiles", broken, (unsigned long long)(compiles() - c0));
    float hy[7 * 13], hs[7];
    fget(&y, hy); fget(&s, hs);
    int ok = 1;
    for (int i = 0; i < N * K; ++i) ok &= hy[i] == hx[i] * hw[i] + hx[i];
    CHECK(ok, "broken %d: results", broken);
    tpu_capture_free(cap);
    drop(&x); drop(&w); drop(&y); drop(&s);
  }
  /* Overwriting a non-contiguous value that a reduction read needs that reader's compiled graph (the
   * layout check): its lazy entry is compiled then, and the check flushes as before. */
  const int64_t N = 6, K = 9;
  float hx[6 * 9], hw[6 * 9];
  for (int i = 0; i < N * K; ++i) { hx[i] = frand(); hw[i] = frand(); }
  int64_t sz[2] = {N, K}, szt[2] = {K, N}, n1[1] = {N};
  buf_t x = fbuf(2, sz, hx), w = fbuf(2, sz, hw), y = fbuf(2, szt, NULL), s = fbuf(1, n1, NULL);
  tpu_tensor_t yt = transposed(&y.t); /* (N, K), not contiguous */
  uint64_t c0 = compiles();
  OK(tpu_capture_begin(0));
  mul(&x.t, &w.t, &yt);
  sum_dim(&yt, 1, &s.t);
  add(&x.t, &x.t, 1.0, &yt); /* overwrites yt, which the sum read */
  tpu_tensor_t outs[2] = {yt, s.t};
  tpu_capture_t* cap = NULL;
  char reason[256];
  OK(tpu_capture_end(0, &x.t, 1, &w.t, 1, outs, 2, &cap, reason, sizeof reason));
  CHECK(!cap && strstr(reason, "non-contiguous"), "layout check: %s", reason);
  /* the sum's own executable (the check), the (mul, sum) trace, the (add) trace */
  CHECK(compiles() - c0 == 3u, "%llu compiles", (unsigned long long)(compiles() - c0));
  float hy[6 * 9], hs[6];
  fget(&y, hy); fget(&s, hs);
  int ok = 1;
  for (int i = 0; i < N; ++i) {
    float r = 0;
    for (int j = 0; j < K; ++j) { ok &= hy[j * N + i] == hx[i * K + j] + hx[i * K + j]; r += hx[i * K + j] * hw[i * K + j]; }
    ok &= fabsf(hs[i] - r) <= 1e-5f * (1 + fabsf(r));
  }
  CHECK(ok, "layout check: results");
  drop(&x); drop(&w); drop(&y); drop(&s);
}

/* ---- size templates over captures (tpu_capture_size_check): the same ops captured at several
 * (N, K) sizes; verdicts, a capture of other ops refused, bad arguments; a capture instantiated
 * from the template at a new size equals the one recorded there and computes the same. */
static void mul_add_sum(const float* hx, const float* hw, int64_t N, int64_t K, float* y, float* s) {
  for (int64_t i = 0; i < N; ++i) {
    float r = 0;
    for (int64_t j = 0; j < K; ++j) { float v = hx[i * K + j] * hw[i * K + j]; v = v + hx[i * K + j]; y[i * K + j] = v; r += v; }
    s[i] = r;
  }
}
static tpu_capture_t* capture_at(int64_t N, int64_t K, int only_mul, unsigned flags) {
  float hx[9 * 9], hw[9 * 9];
  for (int i = 0; i < N * K; ++i) { hx[i] = frand(); hw[i] = frand(); }
  int64_t sz[2] = {N, K}, n1[1] = {N};
  buf_t x = fbuf(2, sz, hx), w = fbuf(2, sz, hw), y = fbuf(2, sz, NULL), s = fbuf(1, n1, NULL);
  OK(tpu_capture_begin(0));
  mul(&x.t, &w.t, &y.t);
  if (!only_mul) { add(&y.t, &x.t, 1.0, &y.t); sum_dim(&y.t, 1, &s.t); }
  tpu_tensor_t outs[2] = {y.t, s.t}, ins[2] = {x.t, w.t};
  tpu_capture_t* cap = NULL;
  char reason[256];
  OK(tpu_capture_end_ex(0, ins, 2, NULL, 0, outs, only_mul ? 1 : 2, flags, &cap, reason, sizeof reason));
  CHECK(cap != NULL, "capture %lldx%lld: %s", (long long)N, (long long)K, reason);
  OK(tpu_rt_synchronize(0));
  drop(&x); drop(&w); drop(&y); drop(&s);
  return cap;
}
/* Runs cap on random (N, K) inputs and compares with mul_add_sum. */
static int runs_right(tpu_capture_t* cap, int64_t N, int64_t K) {
  float hx[9 * 9], hw[9 * 9], y[9 * 9], s[9], ry[9 * 9], rs[9];
  for (int i = 0; i < N * K; ++i) { hx[i] = frand(); hw[i] = frand(); }
  int64_t sz[2] = {N, K};
  buf_t x = fbuf(2, sz, hx), w = fbuf(2, sz, hw), bufs[2] = {{0}, {0}};
  tpu_tensor_t ins[2] = {x.t, w.t}, bt[2];
  int nb = tpu_capture_num_buffers(cap), ok = nb == 2 && tpu_capture_inputs_match(cap, ins, 2);
  for (int b = 0; ok && b < 2; ++b) {
    tpu_tensor_t meta;
    OK(tpu_capture_buffer_info(cap, b, &meta));
    bufs[b] = fbuf(meta.ndim, meta.sizes, NULL);
    bt[b] = bufs[b].t;
  }
  if (ok) OK(tpu_capture_run(cap, ins, 2, bt, 2));
  for (int k = 0; ok && k < 2; ++k) {
    tpu_tensor_t meta;
    int in = -1, b = -1;
    int64_t off = -1;
    OK(tpu_capture_output_info(cap, k, &meta, &in, &b, &off));
    ok = in == -1 && off == 0 && b >= 0 && b < 2 && meta.ndim == 2 - k && meta.sizes[0] == N;
    if (ok) fget(&bufs[b], k == 0 ? ry : rs);
  }
  mul_add_sum(hx, hw, N, K, y, s);
  for (int i = 0; ok && i < N * K; ++i) ok = ry[i] == y[i];
  for (int i = 0; ok && i < N; ++i) ok = fabsf(rs[i] - s[i]) <= 1e-5f * (1 + fabsf(s[i]));
  drop(&x); drop(&w);
  for (int b = 0; b < 2; ++b) if (bufs[b].p) drop(&bufs[b]);
  return ok;
}
static void test_capture_size_template(void) {
  static const int64_t sizes[][2] = {{4, 6}, {6, 6}, {5, 9}, {3, 7}, {8, 5}};
  static const int want[] = {TPU_SIZE_TEMPLATE_FIRST, TPU_SIZE_TEMPLATE_GENERALIZED, TPU_SIZE_TEMPLATE_GENERALIZED,
                             TPU_SIZE_TEMPLATE_PREDICTED, TPU_SIZE_TEMPLATE_PREDICTED};
  tpu_size_template_t* t = NULL;
  char why[256];
  for (int i = 0; i < 5; ++i) {
    tpu_capture_t* cap = capture_at(sizes[i][0], sizes[i][1], 0, TPU_CAPTURE_KEEP_GRAPH);
    int verdict = -1;
    if (cap) OK(tpu_capture_size_check(&t, cap, sizes[i], 2, NULL, 0, &verdict, why, sizeof why));
    CHECK(verdict == want[i], "size %d: verdict %d (%s)", i, verdict, why);
    tpu_capture_free(cap);
  }
  { /* a size seen before: its executable comes from the trace cache, the kept graph from one more lowering */
    uint64_t c0 = compiles();
    tpu_capture_t* again = capture_at(4, 6, 0, TPU_CAPTURE_KEEP_GRAPH);
    int verdict = -1;
    if (again) OK(tpu_capture_size_check(&t, again, (int64_t[]){4, 6}, 2, NULL, 0, &verdict, why, sizeof why));
    CHECK(verdict == TPU_SIZE_TEMPLATE_PREDICTED && compiles() == c0, "cached 4x6: verdict %d (%s), %llu compiles", verdict,
          why, (unsigned long long)(compiles() - c0));
    tpu_capture_free(again);
  }
  size_t need = tpu_size_template_print(t, NULL, 0);
  char* text = malloc(need);
  CHECK(text && tpu_size_template_print(t, text, need) == need && strstr(text, "= s0") && strstr(text, "= s1"), "%s", text ? text : "");
  free(text);
  /* a new size: instantiated (never recorded) = recorded there, and it computes the same */
  tpu_capture_t* inst = NULL;
  OK(tpu_capture_instantiate(t, 0, (int64_t[]){7, 8}, 2, TPU_CAPTURE_KEEP_GRAPH, NULL, 0, &inst, why, sizeof why));
  tpu_capture_t* rec = capture_at(7, 8, 0, TPU_CAPTURE_KEEP_GRAPH);
  CHECK(inst && rec && tpu_capture_same(inst, rec, why, sizeof why), "instantiated 7x8 = captured 7x8: %s", why);
  CHECK(inst && runs_right(inst, 7, 8) && runs_right(inst, 7, 8), "instantiated 7x8 runs right");
  CHECK(inst && !runs_right(inst, 6, 8), "instantiated 7x8 refuses 6x8 inputs");
  tpu_capture_free(inst); tpu_capture_free(rec);
  inst = NULL;
  OK(tpu_capture_instantiate(t, 0, (int64_t[]){9, 2}, 2, 0, NULL, 0, &inst, why, sizeof why));
  CHECK(inst && runs_right(inst, 9, 2), "instantiated 9x2: %s", why);
  tpu_capture_free(inst);
  inst = NULL;
  OK(tpu_capture_instantiate(t, 0, (int64_t[]){1, 8}, 2, 0, NULL, 0, &inst, why, sizeof why));
  CHECK(!inst && strstr(why, "below 2"), "size 1 refused: %s", why);
  OK(tpu_capture_instantiate(t, 0, (int64_t[]){7, 8, 3}, 3, 0, NULL, 0, &inst, why, sizeof why));
  CHECK(!inst && why[0], "3 sizes refused: %s", why);
  tpu_capture_t* other = capture_at(7, 8, 1, TPU_CAPTURE_KEEP_GRAPH); /* other ops: not an instance, template unchanged */
  int verdict = -1;
  if (other) OK(tpu_capture_size_check(&t, other, (int64_t[]){7, 8}, 2, NULL, 0, &verdict, why, sizeof why));
  CHECK(verdict == TPU_SIZE_TEMPLATE_NOT_INSTANCE && why[0], "other ops: %d %s", verdict, why);
  tpu_status_t st = tpu_capture_size_check(&t, other, (int64_t[]){7}, 1, NULL, 0, &verdict, why, sizeof why);
  CHECK(st && strstr(tpu_status_message(st), "the template has 2"), "size count: %s", st ? tpu_status_message(st) : "OK");
  tpu_status_free(st);
  int64_t many[9] = {0};
  tpu_size_template_t* t2 = NULL;
  st = tpu_capture_size_check(&t2, other, many, 9, NULL, 0, &verdict, why, sizeof why);
  CHECK(st && !t2, "9 sizes refused");
  tpu_status_free(st);
  st = tpu_capture_size_check(&t2, NULL, many, 2, NULL, 0, &verdict, why, sizeof why);
  CHECK(st && !t2, "NULL capture refused");
  tpu_status_free(st);
  tpu_capture_drop_graph(other); /* no kept graph: no sample */
  OK(tpu_capture_size_check(&t2, other, many, 2, NULL, 0, &verdict, why, sizeof why));
  CHECK(!t2 && verdict == TPU_SIZE_TEMPLATE_NOT_INSTANCE && strstr(why, "kept no graph"), "no graph: %s", why);
  tpu_capture_free(other);
  tpu_size_template_free(t);
  tpu_size_template_free(NULL);
}

/* ---- size decisions (lw_size_decide): median.dim picks element (K - 1) / 2 of each sorted row, a
 * floor division of the size that no c + k*m is. Captured where it stays 2 (K = 5, 6), the template
 * predicts 2 everywhere; at K = 7 the decision is evaluated again and the size refused (before
 * decisions were recorded, it was instantiated and picked the wrong element); at a size where it still
 * holds the instance computes the right medians. */
static tpu_capture_t* median_at(int64_t N, int64_t K, const float* hx, float* vals) {
  int64_t sz[2] = {N, K}, n1[1] = {N};
  buf_t x = fbuf(2, sz, hx), v = fbuf(1, n1, NULL), ix = {0};
  OK(tpu_rt_malloc(0, (size_t)N * 8, &ix.p));
  ix.t = tpu_tensor_contiguous(ix.p, 0, TPU_DTYPE_I64, 1, n1);
  OK(tpu_capture_begin(0));
  tpu_arg_t args[] = {tpu_arg_tensor(&x.t), tpu_arg_int(1), tpu_arg_bool(false), tpu_arg_tensor(&v.t), tpu_arg_tensor(&ix.t)};
  tpu_tensor_t outs[2] = {v.t, ix.t};
  OK(tpu_op_run(0, "aten::median.dim_values", args, 5, outs, 2));
  tpu_capture_t* cap = NULL;
  char reason[256];
  OK(tpu_capture_end_ex(0, &x.t, 1, NULL, 0, outs, 2, TPU_CAPTURE_KEEP_GRAPH, &cap, reason, sizeof reason));
  CHECK(cap != NULL, "median capture %lldx%lld: %s", (long long)N, (long long)K, reason);
  if (vals) fget(&v, vals);
  OK(tpu_rt_synchronize(0));
  drop(&x); drop(&v); drop(&ix);
  return cap;
}
static float row_median(const float* row, int64_t K) { /* the lower median */
  float s[16];
  memcpy(s, row, (size_t)K * sizeof(float));
  for (int64_t i = 1; i < K; ++i) for (int64_t j = i; j > 0 && s[j - 1] > s[j]; --j) { float t = s[j]; s[j] = s[j - 1]; s[j - 1] = t; }
  return s[(K - 1) / 2];
}
static void test_size_decision_refuses(void) {
  static const int64_t sizes[][2] = {{3, 5}, {4, 5}, {4, 6}, {5, 5}, {5, 6}};
  tpu_size_template_t* t = NULL;
  char why[256];
  float hx[16 * 16], got[16];
  int verdict = -1;
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 16 * 16; ++j) hx[j] = frand();
    tpu_capture_t* cap = median_at(sizes[i][0], sizes[i][1], hx, got);
    int ok = 1;
    for (int64_t r = 0; r < sizes[i][0]; ++r) ok = ok && got[r] == row_median(hx + r * sizes[i][1], sizes[i][1]);
    CHECK(ok, "median %lldx%lld captured", (long long)sizes[i][0], (long long)sizes[i][1]);
    if (cap) OK(tpu_capture_size_check(&t, cap, sizes[i], 2, NULL, 0, &verdict, why, sizeof why));
    tpu_capture_free(cap);
  }
  CHECK(verdict == TPU_SIZE_TEMPLATE_PREDICTED, "median: last verdict %d (%s)", verdict, why);
  tpu_capture_t* inst = NULL;
  OK(tpu_capture_instantiate(t, 0, (int64_t[]){3, 7}, 2, 0, NULL, 0, &inst, why, sizeof why));
  CHECK(!inst && strstr(why, "size decision") && strstr(why, "(6, 2) is 3, the template's 2"), "K = 7 refused: %s", why);
  tpu_capture_free(inst);
  inst = NULL;
  OK(tpu_capture_instantiate(t, 0, (int64_t[]){7, 6}, 2, TPU_CAPTURE_KEEP_GRAPH, NULL, 0, &inst, why, sizeof why));
  tpu_capture_t* rec = median_at(7, 6, hx, NULL);
  CHECK(inst && rec && tpu_capture_same(inst, rec, why, sizeof why), "median 7x6 instantiated = captured: %s", why);
  if (inst) { /* run it */
    int64_t sz[2] = {7, 6};
    buf_t x = fbuf(2, sz, hx);
    tpu_tensor_t meta, bt[2];
    buf_t bufs[2] = {{0}, {0}};
    int nb = tpu_capture_num_buffers(inst);
    CHECK(nb == 2, "median: %d buffers", nb);
    for (int b = 0; b < nb && b < 2; ++b) {
      OK(tpu_capture_buffer_info(inst, b, &meta));
      OK(tpu_rt_malloc(0, (size_t)meta.sizes[0] * tpu_dtype_size(meta.dtype), &bufs[b].p));
      bufs[b].t = tpu_tensor_contiguous(bufs[b].p, 0, meta.dtype, meta.ndim, meta.sizes);
      bt[b] = bufs[b].t;
    }
    if (nb == 2) OK(tpu_capture_run(inst, &x.t, 1, bt, 2));
    int in = -1, b = -1, ok = nb == 2;
    int64_t off = -1;
    if (ok) OK(tpu_capture_output_info(inst, 0, &meta, &in, &b, &off));
    ok = ok && b >= 0 && b < 2 && bufs[b].t.dtype == TPU_DTYPE_F32;
    if (ok) OK(tpu_rt_memcpy_d2h(0, got, bufs[b].p, 7 * 4));
    for (int64_t r = 0; ok && r < 7; ++r) ok = got[r] == row_median(hx + r * 6, 6);
    CHECK(ok, "instantiated median 7x6 computes the medians");
    drop(&x);
    for (int k = 0; k < 2; ++k) if (bufs[k].p) drop(&bufs[k]);
  }
  tpu_capture_free(inst); tpu_capture_free(rec);
  tpu_size_template_free(t);
}

/* ---- the disk level: a second process running the same fused trace compiles nothing */
static int child_main(void) {
  tpu_cache_stats_t c0, c1;
  tpu_cache_stats_get(&c0);
  static float ha[R * C], hb[R * C], hbt[C * R];
  for (int i = 0; i < R * C; ++i) { ha[i] = frand(); hb[i] = frand(); hbt[i] = frand(); }
  int64_t rc[2] = {R, C}, cr[2] = {C, R};
  buf_t a = fbuf(2, rc, ha), b = fbuf(2, rc, hb), bt = fbuf(2, cr, hbt);
  static results_t r;
  OK(tpu_trace_set_enabled(true));
  workload(&a, &b, &bt, &r);
  OK(tpu_trace_set_enabled(false));
  tpu_metrics_t m;
  tpu_metrics_get(&m);
  tpu_cache_stats_get(&c1);
  CHECK(m.compiles == 0 && c1.disk_hits > c0.disk_hits && c1.disk_rejected == 0,
        "child: %llu compiles, %llu disk hits", (unsigned long long)m.compiles, (unsigned long long)c1.disk_hits);
  drop(&a); drop(&b); drop(&bt);
  return g_fail ? 1 : 0;
}
static void test_second_process_loads_fused_graphs(const char* self) {
  tpu_cache_stats_t cs;
  tpu_cache_stats_get(&cs);
  if (!cs.disk_enabled) { printf("skip: disk cache off\n"); return; }
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' child", self);
  CHECK(system(cmd) == 0, "a second process loads every graph of the fused workload from disk");
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "child")) { g_seed = 777; return child_main(); }
  tpu_status_t st = tpu_rt_init();
  if (st) { printf("init: %s\n", tpu_status_message(st)); return 1; }
  test_fused_matches_strict();
  test_recorder_sees_fused_graphs();
  test_capture_replay();
  test_capture_replays_in_flight();
  test_capture_compiles_one_executable();
  test_capture_size_template();
  test_size_decision_refuses();
  test_second_process_loads_fused_graphs(argv[0]);
  OK(tpu_rt_synchronize(0));
  printf("test_trace: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
