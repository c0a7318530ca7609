/* test_exec_sched.c — the host executor's step scheduler (drivers/host/exec_sched.c): two independent chains of
 * GEMM + tanh (epilogue clusters) with reshapes between their steps, traced one chain after the other, must be
 * interleaved so that their steps form step groups (4 groups of 2 on a 2-thread pool, against at most 1 in the traced
 * order), the executable's graph must be a permutation of the traced one, and every result must be bitwise the
 * traced order's: scheduler on and off, groups on and off, serial runs, and the second chain's result written in
 * place over the parameter both chains read first (a write after reads the new order must still respect). Solo steps
 * (never grouped: large memory-bound ones) get rounds of their own.
 * Legend: N matrix size; x, wa, wb parameters (N, N). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/exec_sched.h"
#include "drivers/host/host.h"
#include "runtime/runtime.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
  g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
  return (float)((double)(g_rng >> 11) / 9007199254740992.0 - 0.5);
}

enum { N = 96, LEN = 4 };

/* chain c: a = x; LEN times a = reshape(reshape(tanh(a @ w_c), [N*N]), [N, N]); outputs: every a of chain A, then
 * of chain B (saved activations: output memory, so the scheduler's memory cap does not hold the chains apart) */
static void build(tpu_ir_graph_t* g) {
  const int64_t d[2] = {N, N}, flat = N * N;
  tpu_ir_graph_init(g);
  const int x = tpu_ir_param(g, TPU_DTYPE_F32, 2, d);
  const int w[2] = {tpu_ir_param(g, TPU_DTYPE_F32, 2, d), tpu_ir_param(g, TPU_DTYPE_F32, 2, d)};
  int out[2 * LEN];
  for (int c = 0; c < 2; ++c) {
    int a = x;
    for (int k = 0; k < LEN; ++k) {
      const int t = tpu_ir_unary(g, TPU_IR_TANH, tpu_ir_dot(g, a, w[c], 0, TPU_DTYPE_F32));
      out[c * LEN + k] = a = tpu_ir_reshape(g, tpu_ir_reshape(g, t, 1, &flat), 2, d);
    }
  }
  for (int k = 0; k < 2 * LEN; ++k) tpu_ir_output(g, out[k]);
}

/* serial: inside a pool task, where the kernels' parallel_for calls (and a group's) run inline */
typedef struct { const tpu_host_exe_t* e; const tpu_host_view_t *p, *o; tpu_status_t st; } run_t;
static void run_body(void* ctx, int64_t b, int64_t e) {
  run_t* r = ctx;
  if (b == 0) r->st = tpu_host_exe_run(r->e, r->p, NULL, r->o);
}
static tpu_status_t run(const tpu_host_exe_t* e, const tpu_host_view_t* p, const tpu_host_view_t* o, int serial) {
  if (!serial) { tpu_pool_wake(); return tpu_host_exe_run(e, p, NULL, o); }
  run_t r = {e, p, o, TPU_OK};
  if (tpu_pool_num_threads() > 1) tpu_pool_parallel_for(2, 1, run_body, &r);
  else run_body(&r, 0, 2);
  return r.st;
}

/* g compiled twice: *es with the step scheduler on, *et with it off (the traced order); the first error */
static tpu_status_t compile_sched_and_traced(const tpu_ir_graph_t* g, tpu_host_exe_t** es, tpu_host_exe_t** et) {
  const int old = tpu_host_set_exec_sched(1);
  tpu_status_t st = tpu_host_compile(g, es);
  tpu_host_set_exec_sched(0);
  if (!st) st = tpu_host_compile(g, et);
  tpu_host_set_exec_sched(old);
  return st;
}

static void test_two_chains(void) {
  tpu_ir_graph_t g;
  build(&g);
  CHECK(g.status == TPU_OK, "build");
  tpu_host_exe_t *es = NULL, *et = NULL;
  tpu_status_t st = compile_sched_and_traced(&g, &es, &et);
  CHECK(st == TPU_OK, "compile: %s", st ? tpu_status_message(st) : "");
  if (st) { tpu_status_free(st); tpu_host_exe_free(es); tpu_ir_graph_free(&g); return; }
  /* the executable reports the graph as compiled (shape families, the disk cache and recordings must see the same
   * graph whatever order a size's plan chose), whichever order its steps run in */
  const tpu_ir_graph_t *gs = tpu_host_exe_graph(es), *gt = tpu_host_exe_graph(et);
  int same = gs->n_ops == g.n_ops && gt->n_ops == g.n_ops && gs->n_operands == g.n_operands &&
             gs->n_outputs == g.n_outputs;
  same = same && !memcmp(gs->ops, g.ops, (size_t)g.n_ops * sizeof(tpu_ir_op_t)) &&
         !memcmp(gs->operands, g.operands, (size_t)g.n_operands * sizeof(int32_t)) &&
         !memcmp(gs->outputs, g.outputs, (size_t)g.n_outputs * sizeof(int32_t));
  CHECK(same, "the scheduled executable does not report the traced graph");
  if (tpu_pool_num_threads() == 2) { /* the plan is made for the process's pool */
    int32_t ns = 0, nt = 0;
    const int gsn = tpu_host_exe_num_groups(es, &ns), gtn = tpu_host_exe_num_groups(et, &nt);
    CHECK(gsn == LEN && ns == 2 * LEN, "scheduled: %d groups (%d steps), want %d of 2", gsn, ns, LEN);
    CHECK(gtn <= 1, "traced order: %d groups", gtn);
  }
  const size_t B = (size_t)N * N * 4, K = 2 * LEN;
  float *X0 = malloc(B), *X = malloc(B), *WA = malloc(B), *WB = malloc(B), *R = malloc(B * K), *O = malloc(B * K);
  for (int i = 0; i < N * N; ++i) { X0[i] = frand() * 2; WA[i] = frand() * 0.3f; WB[i] = frand() * 0.3f; }
  memcpy(X, X0, B);
#define V(ptr) {(char*)(ptr), TPU_DTYPE_F32, 2, {N, N}, {N, 1}}
  tpu_host_view_t p[3] = {V(X), V(WA), V(WB)};
  tpu_host_view_t fresh[2 * LEN], o[2 * LEN], inplace[2 * LEN]; /* in place: chain B's last over x */
  for (size_t k = 0; k < K; ++k) {
    fresh[k] = (tpu_host_view_t)V(R + k * N * N);
    o[k] = inplace[k] = (tpu_host_view_t)V(O + k * N * N);
  }
  inplace[K - 1] = p[0];
  st = run(et, p, fresh, 0); /* the reference: traced order, fresh outputs */
  CHECK(st == TPU_OK, "traced run");
  tpu_status_free(st);
  for (int mode = 0; mode < 6; ++mode) { /* scheduled / traced x pool, serial, groups off; fresh, then in place */
    const tpu_host_exe_t* e = mode & 1 ? et : es;
    const int serial = mode / 2 == 1, goff = mode / 2 == 2;
    for (int ip = 0; ip < 2; ++ip) {
      memcpy(X, X0, B);
      memset(O, 0, B * K);
      const int gold = goff ? tpu_host_set_exec_groups(0) : -1;
      st = run(e, p, ip ? inplace : o, serial);
      if (goff) tpu_host_set_exec_groups(gold);
      CHECK(st == TPU_OK, "run mode %d in place %d", mode, ip);
      tpu_status_free(st);
      CHECK(!memcmp(O, R, B * (K - 1)) && !memcmp(ip ? X : O + (K - 1) * N * N, R + (K - 1) * N * N, B),
            "mode %d in place %d: differs from the traced order", mode, ip);
    }
  }
#undef V
  free(X0); free(X); free(WA); free(WB); free(R); free(O);
  tpu_host_exe_free(es); tpu_host_exe_free(et);
  tpu_ir_graph_free(&g);
}

/* Solo steps (in->solo: memory-bound steps that split over the pool, exec.c's step_solo) are placed
 * in rounds of their own: 4 independent equal steps on 2 threads form one round; all solo, 4 rounds of 1; the first
 * solo, it alone, then a round of 2 (the third step's lane would run past the round's length) and the last. */
static void test_solo_rounds(void) {
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  const int64_t d = 8;
  const int x = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &d);
  const int ops[4] = {TPU_IR_EXP, TPU_IR_TANH, TPU_IR_NEG, TPU_IR_ABS};
  for (int k = 0; k < 4; ++k) tpu_ir_output(&g, tpu_ir_unary(&g, ops[k], x));
  CHECK(g.status == TPU_OK && g.n_ops == 5, "solo graph");
  int32_t unit[5], order[5];
  double cost[5], bytes[5] = {0};
  uint8_t solo[5] = {0}, cut[5];
  for (int v = 0; v < 5; ++v) { unit[v] = v ? v : TPU_HOST_SCHED_SRC; cost[v] = v ? 20000 : 0; }
  for (int c = 0; c < 3; ++c) {
    for (int v = 1; v < 5; ++v) solo[v] = c == 1 || (c == 2 && v == 1);
    tpu_host_sched_in_t in = {.g = &g, .unit = unit, .cost = cost, .bytes = bytes, .solo = c ? solo : NULL, .nth = 2};
    tpu_host_sched_stats_t S;
    int changed = 0;
    tpu_status_t st = tpu_host_sched_order(&in, order, &changed, cut, &S);
    CHECK(st == TPU_OK, "solo order");
    tpu_status_free(st);
    const int want_rounds = c == 0 ? 1 : c == 1 ? 4 : 3, want_wide = c == 1 ? 0 : 1;
    CHECK(S.rounds == want_rounds && S.wide == want_wide, "solo case %d: %d rounds (%d wide), want %d (%d)", c,
          S.rounds, S.wide, want_rounds, want_wide);
    for (int i = 0; i < 5; ++i) /* a solo step starts a round and the next step starts another */
      if (c && order[i] > 0 && solo[order[i]]) CHECK(cut[i] && (i == 4 || cut[i + 1]), "solo case %d: step %d shares a round", c, order[i]);
  }
  tpu_ir_graph_free(&g);
}

/* Through tpu_host_compile (exec.c's step_solo feeds the scheduler and plan_groups alike): two independent chains of
 * 4 steps on [100K] values, traced one chain after the other, every value an output. Index_selects of 100K rows run
 * on one thread, are never solo, and are paired into 4 groups of 2; tanh clusters of 100K elements split over the
 * pool (2+ chunks of the clusters' 32K grain), are solo, and form no group. Results: bitwise the traced order's. */
static void test_sched_solo(int ew) {
  const int64_t M = 100000, d2[2] = {M, 1};
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  const int x = ew ? tpu_ir_param(&g, TPU_DTYPE_F32, 1, &M) : tpu_ir_param(&g, TPU_DTYPE_F32, 2, d2);
  const int idx[2] = {tpu_ir_param(&g, TPU_DTYPE_I64, 1, &M), tpu_ir_param(&g, TPU_DTYPE_I64, 1, &M)};
  int out[2 * LEN];
  for (int c = 0; c < 2; ++c) {
    int a = x;
    for (int k = 0; k < LEN; ++k)
      out[c * LEN + k] = a = ew ? tpu_ir_unary(&g, TPU_IR_TANH, a) : tpu_ir_index_select(&g, a, idx[c], 0);
  }
  for (int k = 0; k < 2 * LEN; ++k) tpu_ir_output(&g, out[k]);
  CHECK(g.status == TPU_OK, "sched solo build %d", ew);
  tpu_host_exe_t *es = NULL, *et = NULL;
  tpu_status_t st = compile_sched_and_traced(&g, &es, &et);
  CHECK(st == TPU_OK, "sched solo compile: %s", st ? tpu_status_message(st) : "");
  if (st) { tpu_status_free(st); tpu_host_exe_free(es); tpu_ir_graph_free(&g); return; }
  if (tpu_pool_num_threads() == 2) {
    int32_t ns = 0;
    const int gsn = tpu_host_exe_num_groups(es, &ns), want = ew ? 0 : LEN;
    CHECK(gsn == want && ns == 2 * want, "sched solo %s: %d groups (%d steps), want %d of 2", ew ? "tanh" : "index_select",
          gsn, ns, want);
  }
  const size_t K = 2 * LEN;
  float *X = malloc((size_t)M * 4), *R = malloc((size_t)M * 4 * K), *O = malloc((size_t)M * 4 * K);
  int64_t* I = malloc((size_t)M * 16);
  for (int64_t i = 0; i < M; ++i) { X[i] = frand() * 4; I[i] = (i * 7919) % M; I[M + i] = (i * 104729 + 3) % M; }
  tpu_host_view_t p[3] = {{(char*)X, TPU_DTYPE_F32, ew ? 1 : 2, {M, 1}, {1, 1}}, {(char*)I, TPU_DTYPE_I64, 1, {M}, {1}},
                          {(char*)(I + M), TPU_DTYPE_I64, 1, {M}, {1}}};
  tpu_host_view_t fr[2 * LEN], o[2 * LEN];
  for (size_t k = 0; k < K; ++k) {
    fr[k] = (tpu_host_view_t){(char*)(R + k * M), TPU_DTYPE_F32, ew ? 1 : 2, {M, 1}, {1, 1}};
    o[k] = (tpu_host_view_t){(char*)(O + k * M), TPU_DTYPE_F32, ew ? 1 : 2, {M, 1}, {1, 1}};
  }
  st = run(et, p, fr, 0);
  CHECK(st == TPU_OK, "sched solo traced run");
  tpu_status_free(st);
  for (int serial = 0; serial < 2; ++serial) {
    memset(O, 0, (size_t)M * 4 * K);
    st = run(es, p, o, serial);
    CHECK(st == TPU_OK, "sched solo run");
    tpu_status_free(st);
    CHECK(!memcmp(O, R, (size_t)M * 4 * K), "sched solo %d serial %d: differs from the traced order", ew, serial);
  }
  free(X); free(R); free(O); free(I);
  tpu_host_exe_free(es); tpu_host_exe_free(et);
  tpu_ir_graph_free(&g);
}

int main(void) {
  tpu_status_t st = tpu_rt_init();
  if (st) { printf("init: %s\n", tpu_status_message(st)); return 1; }
  test_two_chains();
  test_solo_rounds();
  test_sched_solo(0);
  test_sched_solo(1);
  printf("test_exec_sched: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
