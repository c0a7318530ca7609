/* test_compiler.c — the compiler passes (compiler/): each pass on hand-built graphs
 * (expected op counts) and on random elementwise graphs, always checking that the
 * rewritten graph computes bitwise the same outputs as the original through the host
 * driver (random inputs with -0.0, +-inf, NaN), with the IR verifier after every pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/compiler.h"
#include "runtime/runtime.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }
static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* One random element of dtype dt at p: mostly N(0, 2)-ish values, sometimes specials. */
static int g_finite_inputs; /* 1: no specials (sums over specials are all NaN/inf and hide order) */
static void fill_elem(char* p, int dt) {
  double v;
  switch (g_finite_inputs ? 15 : rnd() % 16) {
    case 0: v = -0.0; break;
    case 1: v = 0.0; break;
    case 2: v = INFINITY; break;
    case 3: v = -INFINITY; break;
    case 4: v = NAN; break;
    case 5: v = 1.0; break;
    case 6: v = (double)(int64_t)(rnd() % 7) - 3; break;
    default: v = (urand() * 2 - 1) * 4; break;
  }
  if (tpu_dtype_is_floating(dt)) tpu_host_store_f64(p, dt, v);
  else tpu_host_store_i64(p, dt, (int64_t)(rnd() % 41) - 20);
}

typedef struct { char* data[16]; tpu_host_view_t view[16]; int n; } bufs_t;
static void bufs_free(bufs_t* b) { for (int i = 0; i < b->n; ++i) free(b->data[i]); b->n = 0; }
static void view_of(tpu_host_view_t* v, char* data, const tpu_ir_type_t* t) {
  memset(v, 0, sizeof(*v));
  v->data = data; v->dtype = t->dtype; v->rank = t->rank;
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; --d) { v->sizes[d] = t->dims[d]; v->strides[d] = s; s *= t->dims[d]; }
}
static size_t bytes_of(const tpu_ir_type_t* t) { return (size_t)tpu_ir_numel(t) * tpu_dtype_size(t->dtype) + 8; }

/* Random params (seeded) for graph g; the same seed gives the same inputs. */
static void make_inputs(const tpu_ir_graph_t* g, uint64_t seed, bufs_t* in, tpu_host_scalar_t* sc) {
  uint64_t save = g_rng;
  g_rng = seed * 2654435761u + 1;
  in->n = 0;
  for (int v = 0; v < g->n_ops; ++v) {
    const tpu_ir_op_t* op = &g->ops[v];
    if (op->opcode == TPU_IR_PARAM) {
      size_t nb = bytes_of(&op->type);
      char* p = calloc(1, nb);
      int64_t n = tpu_ir_numel(&op->type), es = (int64_t)tpu_dtype_size(op->type.dtype);
      for (int64_t i = 0; i < n; ++i) fill_elem(p + i * es, op->type.dtype);
      in->data[in->n] = p;
      view_of(&in->view[in->n], p, &op->type);
      in->n++;
    } else if (op->opcode == TPU_IR_SCALAR) {
      double f = (urand() * 2 - 1) * 3;
      sc[op->i0].f = f; sc[op->i0].i = (int64_t)f;
    }
  }
  g_rng = save;
}

/* Runs g through the host driver; outputs land in out (caller frees). Returns 0 on success. */
static int run_graph(const tpu_ir_graph_t* g, uint64_t seed, bufs_t* out) {
  bufs_t in = {0};
  tpu_host_scalar_t sc[16] = {{0}};
  make_inputs(g, seed, &in, sc);
  out->n = 0;
  for (int k = 0; k < g->n_outputs; ++k) {
    const tpu_ir_type_t* t = &g->ops[g->outputs[k]].type;
    out->data[k] = calloc(1, bytes_of(t));
    view_of(&out->view[k], out->data[k], t);
    out->n++;
  }
  tpu_host_exe_t* exe = NULL;
  tpu_status_t st = tpu_host_compile(g, &exe);
  if (st == TPU_OK) st = tpu_host_exe_run(exe, in.view, sc, out->view);
  int rc = st == TPU_OK ? 0 : -1;
  if (st) printf("  run failed: %s\n", tpu_status_message(st));
  tpu_status_free(st);
  tpu_host_exe_free(exe);
  bufs_free(&in);
  return rc;
}

/* Builds with `build` twice, runs the pipeline (verifier on) on one copy, compares outputs
 * bitwise on a few input seeds. Returns the optimized op count (or -1). */
typedef void (*build_fn)(tpu_ir_graph_t* g);
static int check_same(const char* what, tpu_ir_graph_t* ref, tpu_ir_graph_t* opt, tpu_compiler_stats_t* st) {
  tpu_status_t s = tpu_compiler_run_ex(opt, what, 1, st);
  CHECK(s == TPU_OK, "%s: pipeline -> %s", what, tpu_status_message(s));
  if (s) { tpu_status_free(s); return -1; }
  OK(tpu_ir_verify(opt));
  CHECK(opt->n_params == ref->n_params && opt->n_scalars == ref->n_scalars && opt->n_outputs == ref->n_outputs,
        "%s: params/scalars/outputs kept", what);
  int same = 1;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    bufs_t a = {0}, b = {0};
    int ra = run_graph(ref, seed, &a), rb = run_graph(opt, seed, &b);
    if (ra || rb) { same = 0; CHECK(0, "%s: run failed (%d %d)", what, ra, rb); }
    for (int k = 0; k < a.n && same && !ra && !rb; ++k) {
      const tpu_ir_type_t* t = &ref->ops[ref->outputs[k]].type;
      size_t nb = (size_t)tpu_ir_numel(t) * tpu_dtype_size(t->dtype);
      if (memcmp(a.data[k], b.data[k], nb)) {
        same = 0;
        char buf[8192];
        tpu_ir_print(ref, buf, sizeof buf);
        printf("  before:\n%s", buf);
        tpu_ir_print(opt, buf, sizeof buf);
        printf("  after:\n%s", buf);
      }
    }
    bufs_free(&a); bufs_free(&b);
  }
  CHECK(same, "%s: outputs bitwise identical after the passes", what);
  return opt->n_ops;
}
static int run_case(const char* what, build_fn build, tpu_compiler_stats_t* st) {
  tpu_ir_graph_t ref, opt;
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  build(&ref); build(&opt);
  OK(tpu_ir_verify(&ref));
  int n = check_same(what, &ref, &opt, st);
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
  return n;
}
static int count_op(const tpu_ir_graph_t* g, int opcode) {
  int c = 0;
  for (int v = 0; v < g->n_ops; ++v) c += g->ops[v].opcode == opcode;
  return c;
}

static const int64_t S2[2] = {3, 37};
static int bconst(tpu_ir_graph_t* g, int dt, double v) { return tpu_ir_broadcast(g, tpu_ir_constant(g, dt, v), 2, S2, NULL); }

/* ---- hand-built cases */
static void b_cse(tpu_ir_graph_t* g) {
  int x = tpu_ir_param(g, TPU_DTYPE_F32, 2, S2);
  int e1 = tpu_ir_unary(g, TPU_IR_EXP, x), e2 = tpu_ir_unary(g, TPU_IR_EXP, x);
  int c1 = bconst(g, TPU_DTYPE_F32, 2.5), c2 = bconst(g, TPU_DTYPE_F32, 2.5);
  tpu_ir_output(g, tpu_ir_binary(g, TPU_IR_ADD, tpu_ir_binary(g, TPU_IR_MUL, e1, c1), tpu_ir_binary(g, TPU_IR_MUL, e2, c2)));
}
static void test_cse(void) {
  tpu_compiler_stats_t st;
  int n = run_case("cse", b_cse, &st);
  /* x, exp, const, broadcast, mul, add */
  CHECK(n == 6 && st.cse_hits == 4, "cse: %d ops (want 6), %d hits (want 4)", n, st.cse_hits);
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  b_cse(&g);
  int ch = 0;
  OK(tpu_compiler_cse(&g, &ch));
  CHECK(ch == 4 && count_op(&g, TPU_IR_EXP) == 1, "cse pass alone: %d changes", ch);
  OK(tpu_ir_verify(&g));
  tpu_ir_graph_free(&g);
}

static void b_dce(tpu_ir_graph_t* g) {
  int x = tpu_ir_param(g, TPU_DTYPE_F32, 2, S2);
  int unused = tpu_ir_param(g, TPU_DTYPE_F32, 1, (int64_t[]){5});
  int s = tpu_ir_scalar(g, TPU_DTYPE_F32);
  int dead1 = tpu_ir_unary(g, TPU_IR_LOG, x);
  tpu_ir_unary(g, TPU_IR_SQRT, dead1);
  tpu_ir_unary(g, TPU_IR_NEG, unused);
  int y = tpu_ir_binary(g, TPU_IR_MUL, x, tpu_ir_broadcast(g, s, 2, S2, NULL));
  tpu_ir_output(g, y);
  tpu_ir_output(g, x); /* a parameter may be an output */
}
static void test_dce(void) {
  tpu_compiler_stats_t st;
  int n = run_case("dce", b_dce, &st);
  /* x, unused, s, broadcast, mul */
  CHECK(n == 5 && st.dce_removed == 3, "dce: %d ops (want 5), removed %d (want 3)", n, st.dce_removed);
}

/* x*1, 1*x, x/1, x-(+0), x+(-0) vanish; x+(+0) and x-(-0) must stay (x = -0.0) */
static void b_identities(tpu_ir_graph_t* g) {
  int x = tpu_ir_param(g, TPU_DTYPE_F32, 2, S2);
  int y = tpu_ir_binary(g, TPU_IR_MUL, x, bconst(g, TPU_DTYPE_F32, 1.0));
  y = tpu_ir_binary(g, TPU_IR_MUL, bconst(g, TPU_DTYPE_F32, 1.0), y);
  y = tpu_ir_binary(g, TPU_IR_DIV, y, bconst(g, TPU_DTYPE_F32, 1.0));
  y = tpu_ir_binary(g, TPU_IR_SUB, y, bconst(g, TPU_DTYPE_F32, 0.0));
  y = tpu_ir_binary(g, TPU_IR_ADD, y, bconst(g, TPU_DTYPE_F32, -0.0));
  y = tpu_ir_unary(g, TPU_IR_NEG, tpu_ir_unary(g, TPU_IR_NEG, y));
  tpu_ir_output(g, y);
  int z = tpu_ir_binary(g, TPU_IR_ADD, x, bconst(g, TPU_DTYPE_F32, 0.0));
  z = tpu_ir_binary(g, TPU_IR_SUB, z, bconst(g, TPU_DTYPE_F32, -0.0));
  tpu_ir_output(g, z);
  int p = tpu_ir_compare(g, TPU_IR_CMP_GT, x, z);
  tpu_ir_output(g, tpu_ir_select(g, p, y, y));
  tpu_ir_output(g, tpu_ir_binary(g, TPU_IR_MAX, z, z));
  tpu_ir_output(g, tpu_ir_binary(g, TPU_IR_ADD, x, bconst(g, TPU_DTYPE_F32, 0.0))); /* -0.0 + 0.0 = +0.0 */
  tpu_ir_output(g, tpu_ir_binary(g, TPU_IR_SUB, x, bconst(g, TPU_DTYPE_F32, -0.0)));
}
static void test_identities(void) {
  tpu_compiler_stats_t st;
  tpu_ir_graph_t ref, opt;
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_identities(&ref); b_identities(&opt);
  check_same("identities", &ref, &opt, &st);
  CHECK(opt.outputs[0] == 0 && opt.outputs[2] == 0, "x*1/1*x/x/1/x-0/x+(-0)/neg(neg)/select(p,a,a) -> x");
  CHECK(count_op(&opt, TPU_IR_ADD) == 1 && count_op(&opt, TPU_IR_SUB) == 2 && count_op(&opt, TPU_IR_MAX) == 0,
        "x+(+0) and x-(-0) kept, max(z,z) -> z: add %d sub %d", count_op(&opt, TPU_IR_ADD), count_op(&opt, TPU_IR_SUB));
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
}

static void b_views(tpu_ir_graph_t* g) {
  int x = tpu_ir_param(g, TPU_DTYPE_F32, 3, (int64_t[]){2, 3, 5});
  int t = tpu_ir_transpose(g, tpu_ir_transpose(g, x, (int64_t[]){2, 0, 1}), (int64_t[]){1, 2, 0}); /* identity */
  int r = tpu_ir_reshape(g, tpu_ir_reshape(g, t, 2, (int64_t[]){6, 5}), 1, (int64_t[]){30});
  int t2 = tpu_ir_transpose(g, tpu_ir_transpose(g, x, (int64_t[]){1, 0, 2}), (int64_t[]){0, 2, 1});
  int s = tpu_ir_param(g, TPU_DTYPE_F32, 1, (int64_t[]){5});
  int bb = tpu_ir_broadcast(g, tpu_ir_broadcast(g, s, 2, (int64_t[]){3, 5}, NULL), 3, (int64_t[]){2, 3, 5}, NULL);
  tpu_ir_output(g, tpu_ir_unary(g, TPU_IR_EXP, r));
  tpu_ir_output(g, tpu_ir_binary(g, TPU_IR_ADD, t2, tpu_ir_transpose(g, bb, (int64_t[]){1, 2, 0})));
  int64_t st0[3] = {0, 0, 0}, lim[3] = {2, 3, 5}, one[3] = {1, 1, 1}, rf[3] = {0, 0, 0};
  tpu_ir_output(g, tpu_ir_reverse(g, tpu_ir_slice(g, x, st0, lim, one), rf));
}
static void test_views(void) {
  tpu_compiler_stats_t st;
  tpu_ir_graph_t ref, opt;
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_views(&ref); b_views(&opt);
  check_same("views", &ref, &opt, &st);
  CHECK(count_op(&opt, TPU_IR_RESHAPE) == 1 && count_op(&opt, TPU_IR_TRANSPOSE) == 2 &&
        count_op(&opt, TPU_IR_BROADCAST) == 1 && count_op(&opt, TPU_IR_SLICE) == 0 &&
        count_op(&opt, TPU_IR_REVERSE) == 0 && opt.outputs[2] == 0,
        "view chains composed: reshape %d transpose %d broadcast %d slice %d reverse %d",
        count_op(&opt, TPU_IR_RESHAPE), count_op(&opt, TPU_IR_TRANSPOSE), count_op(&opt, TPU_IR_BROADCAST),
        count_op(&opt, TPU_IR_SLICE), count_op(&opt, TPU_IR_REVERSE));
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
}

/* integer round trips fold; float ones (and narrowing-first ones) never */
static void b_converts(tpu_ir_graph_t* g) {
  int i = tpu_ir_param(g, TPU_DTYPE_I32, 2, S2);
  int b = tpu_ir_param(g, TPU_DTYPE_BF16, 2, S2);
  int f = tpu_ir_param(g, TPU_DTYPE_F32, 2, S2);
  int u = tpu_ir_param(g, TPU_DTYPE_U8, 2, S2);
  tpu_ir_output(g, tpu_ir_convert(g, tpu_ir_convert(g, i, TPU_DTYPE_I64), TPU_DTYPE_I32));  /* -> i */
  tpu_ir_output(g, tpu_ir_convert(g, tpu_ir_convert(g, i, TPU_DTYPE_F64), TPU_DTYPE_I32));  /* -> i */
  tpu_ir_output(g, tpu_ir_convert(g, tpu_ir_convert(g, i, TPU_DTYPE_F32), TPU_DTYPE_I32));  /* kept: 2^24 */
  tpu_ir_output(g, tpu_ir_convert(g, tpu_ir_convert(g, b, TPU_DTYPE_F32), TPU_DTYPE_BF16)); /* kept: sNaN */
  tpu_ir_output(g, tpu_ir_convert(g, tpu_ir_convert(g, f, TPU_DTYPE_BF16), TPU_DTYPE_F32)); /* kept: rounds */
  tpu_ir_output(g, tpu_ir_convert(g, tpu_ir_convert(g, u, TPU_DTYPE_BF16), TPU_DTYPE_U8));  /* -> u */
  tpu_ir_output(g, tpu_ir_convert(g, tpu_ir_convert(g, u, TPU_DTYPE_I8), TPU_DTYPE_U8));    /* kept: wraps */
  int p = tpu_ir_compare(g, TPU_IR_CMP_GT, f, f);
  tpu_ir_output(g, tpu_ir_convert(g, tpu_ir_convert(g, p, TPU_DTYPE_F16), TPU_DTYPE_BOOL)); /* -> p */
}
static void test_converts(void) {
  tpu_compiler_stats_t st;
  tpu_ir_graph_t ref, opt;
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_converts(&ref); b_converts(&opt);
  check_same("converts", &ref, &opt, &st);
  int o[8];
  for (int k = 0; k < 8; ++k) o[k] = opt.outputs[k];
  CHECK(o[0] == 0 && o[1] == 0 && o[5] == 3 && opt.ops[o[7]].opcode == TPU_IR_COMPARE,
        "exact integer round trips fold (%d %d %d %s)", o[0], o[1], o[5], tpu_ir_opcode_name(opt.ops[o[7]].opcode));
  CHECK(opt.ops[o[2]].opcode == TPU_IR_CONVERT && opt.ops[o[3]].opcode == TPU_IR_CONVERT &&
        opt.ops[o[4]].opcode == TPU_IR_CONVERT && opt.ops[o[6]].opcode == TPU_IR_CONVERT,
        "inexact round trips stay");
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
}

/* constants fold through the host driver's own arithmetic, bf16 rounding included */
static void b_fold(tpu_ir_graph_t* g) {
  int x = tpu_ir_param(g, TPU_DTYPE_BF16, 2, S2);
  int a = tpu_ir_constant(g, TPU_DTYPE_BF16, 1.0), b = tpu_ir_constant(g, TPU_DTYPE_BF16, 0.00390625);
  int c = tpu_ir_binary(g, TPU_IR_ADD, a, tpu_ir_binary(g, TPU_IR_MUL, b, tpu_ir_constant(g, TPU_DTYPE_BF16, 3.0)));
  int e = tpu_ir_unary(g, TPU_IR_EXP, tpu_ir_convert(g, c, TPU_DTYPE_F32));
  int k = tpu_ir_convert(g, e, TPU_DTYPE_BF16);
  tpu_ir_output(g, tpu_ir_binary(g, TPU_IR_MUL, x, tpu_ir_broadcast(g, k, 2, S2, NULL)));
  int i = tpu_ir_binary(g, TPU_IR_FLOOR_DIV, tpu_ir_constant(g, TPU_DTYPE_I64, -7), tpu_ir_constant(g, TPU_DTYPE_I64, 2));
  int fz = tpu_ir_binary(g, TPU_IR_DIV, bconst(g, TPU_DTYPE_F32, 0.0), bconst(g, TPU_DTYPE_F32, 0.0)); /* NaN */
  tpu_ir_output(g, tpu_ir_broadcast(g, i, 2, S2, NULL));
  tpu_ir_output(g, fz);
}
static void test_fold(void) {
  tpu_compiler_stats_t st;
  tpu_ir_graph_t ref, opt;
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_fold(&ref); b_fold(&opt);
  check_same("fold", &ref, &opt, &st);
  CHECK(st.folds >= 7 && count_op(&opt, TPU_IR_EXP) == 0 && count_op(&opt, TPU_IR_FLOOR_DIV) == 0 &&
        count_op(&opt, TPU_IR_DIV) == 0 && count_op(&opt, TPU_IR_MUL) == 1,
        "constant subgraphs folded (%d folds, %d ops left)", st.folds, opt.n_ops);
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
}

/* What fused eager records for y = (x * s) .exp() * s; z = y.sum() with bf16 x: each op
 * converts its operands to f32 and its result back, and re-broadcasts the scalar. */
static void b_eager_chain(tpu_ir_graph_t* g) {
  int x = tpu_ir_param(g, TPU_DTYPE_BF16, 2, S2);
  int s = tpu_ir_scalar(g, TPU_DTYPE_F32);
  int prev = x;
  for (int step = 0; step < 3; ++step) {
    int xf = tpu_ir_convert(g, prev, TPU_DTYPE_F32);
    int sb = tpu_ir_broadcast(g, s, 2, S2, NULL);
    int m = tpu_ir_binary(g, TPU_IR_MUL, xf, sb);
    int one = tpu_ir_broadcast(g, tpu_ir_constant(g, TPU_DTYPE_F32, 1.0), 2, S2, NULL);
    m = tpu_ir_binary(g, TPU_IR_MUL, m, one); /* alpha = 1 */
    int dead = tpu_ir_unary(g, TPU_IR_EXP, xf); /* a value the program never reads */
    (void)dead;
    prev = tpu_ir_convert(g, tpu_ir_unary(g, TPU_IR_EXP, m), TPU_DTYPE_BF16);
    tpu_ir_convert(g, tpu_ir_convert(g, prev, TPU_DTYPE_F32), TPU_DTYPE_BF16);
  }
  tpu_ir_output(g, prev);
  tpu_ir_output(g, tpu_ir_reduce(g, TPU_IR_MONOID_SUM, tpu_ir_convert(g, prev, TPU_DTYPE_F32), (int64_t[]){1, 1}));
}
static void test_eager_chain(void) {
  tpu_compiler_stats_t st;
  tpu_ir_graph_t ref, opt;
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_eager_chain(&ref); b_eager_chain(&opt);
  check_same("eager chain", &ref, &opt, &st);
  CHECK(st.ops_after < st.ops_before && count_op(&opt, TPU_IR_BROADCAST) == 1 && st.cse_hits >= 2 &&
        st.dce_removed >= 3, "multi-op graph shrinks: %d -> %d ops (cse %d, dce %d, canon %d)", st.ops_before,
        st.ops_after, st.cse_hits, st.dce_removed, st.canon_rewrites);
  printf("eager chain: %d -> %d ops (canon %d, folds %d, cse %d, dce %d, rounds %d)\n", st.ops_before, st.ops_after,
         st.canon_rewrites, st.folds, st.cse_hits, st.dce_removed, st.rounds);
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
}

/* ---- random elementwise graphs: duplicates, constants, dead values, view round trips */
static int g_fuzz_dt;
static void b_random(tpu_ir_graph_t* g) {
  int dt = g_fuzz_dt;
  int pool[256], np = 0;
  pool[np++] = tpu_ir_param(g, dt, 2, S2);
  pool[np++] = tpu_ir_param(g, dt, 2, S2);
  pool[np++] = tpu_ir_broadcast(g, tpu_ir_scalar(g, dt), 2, S2, NULL);
  static const double kc[] = {0.0, -0.0, 1.0, 2.0, 0.5, -3.0, 1e30};
  static const int kun[] = {TPU_IR_NEG, TPU_IR_ABS, TPU_IR_EXP, TPU_IR_SQRT, TPU_IR_TANH, TPU_IR_FLOOR, TPU_IR_LOGISTIC};
  static const int kbin[] = {TPU_IR_ADD, TPU_IR_SUB, TPU_IR_MUL, TPU_IR_DIV, TPU_IR_MAX, TPU_IR_MIN};
  int n = 8 + (int)(rnd() % 24);
  for (int i = 0; i < n && np < 250; ++i) {
    int a = pool[rnd() % np], b = pool[rnd() % np], r;
    switch (rnd() % 10) {
      case 0: r = bconst(g, dt, kc[rnd() % 7]); break;
      case 1: r = tpu_ir_unary(g, kun[rnd() % 7], a); break;
      case 2: case 3: r = tpu_ir_binary(g, kbin[rnd() % 6], a, b); break;
      case 4: { /* duplicate an earlier computed op */
        int v = pool[rnd() % np];
        const tpu_ir_op_t* op = &g->ops[v];
        if (op->opcode == TPU_IR_PARAM || op->opcode == TPU_IR_SCALAR) { r = v; break; }
        int ins[8];
        for (int k = 0; k < op->n_in && k < 8; ++k) ins[k] = tpu_ir_operand(g, v, k);
        tpu_ir_op_t p = *op;
        r = tpu_ir_add_op(g, &p, op->n_in, ins);
        break;
      }
      case 5: { /* convert round trips, exact or not */
        static const int mids[] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16, TPU_DTYPE_I32, TPU_DTYPE_F16};
        r = tpu_ir_convert(g, tpu_ir_convert(g, a, mids[rnd() % 5]), dt);
        break;
      }
      case 6: r = tpu_ir_transpose(g, tpu_ir_transpose(g, a, (int64_t[]){1, 0}), (int64_t[]){1, 0}); break;
      case 7: r = tpu_ir_reshape(g, tpu_ir_reshape(g, a, 1, (int64_t[]){111}), 2, S2); break;
      case 8: r = tpu_ir_select(g, tpu_ir_compare(g, (int)(rnd() % 6), a, b), a, rnd() % 2 ? a : b); break;
      default: r = tpu_ir_unary(g, TPU_IR_NEG, tpu_ir_unary(g, TPU_IR_NEG, a)); break;
    }
    if (r >= 0) pool[np++] = r;
  }
  int nout = 1 + (int)(rnd() % 12);
  for (int k = 0; k < nout; ++k) tpu_ir_output(g, np > 3 ? pool[3 + rnd() % (np - 3)] : pool[0]);
  if (rnd() % 2) { /* a reduction over an elementwise producer (fused in the plan) */
    tpu_ir_output(g, tpu_ir_reduce(g, TPU_IR_MONOID_MAX, pool[np - 1], (int64_t[]){0, 1}));
  }
}
static void test_random(void) {
  static const int dts[] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_F16, TPU_DTYPE_F64};
  int graphs = 0, before = 0, after = 0, bad = 0;
  for (int it = 0; it < 160; ++it) {
    g_fuzz_dt = dts[it % 4];
    uint64_t seed = g_rng;
    tpu_ir_graph_t ref, opt;
    tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
    b_random(&ref);
    g_rng = seed;
    b_random(&opt);
    if (ref.status) { bad++; tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt); continue; }
    tpu_compiler_stats_t st;
    int f0 = g_fail;
    check_same("random", &ref, &opt, &st);
    if (g_fail != f0) printf("  (random graph %d, dtype %s)\n", it, tpu_dtype_name(g_fuzz_dt));
    graphs++; before += st.ops_before; after += st.ops_after;
    tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
  }
  CHECK(graphs >= 150 && after < before, "random graphs: %d checked (%d builder rejects), %d -> %d ops", graphs, bad,
        before, after);
  printf("random: %d graphs, %d -> %d ops\n", graphs, before, after);
}

/* Reductions over big elementwise producers: the host plan sums a producer fused into its
 * reduce (read by nothing else) slab by slab, in the slabs a reduce of the materialized tensor
 * uses (tpu_host_reduce_plan), so passes may change which producers are fused (DCE, CSE) and
 * the bits stay; they must not hand a reduce a differently laid out operand. */
static const int64_t SBIG[2] = {2048, 1031}; /* 16 MiB of f64: above the driver's slab size */
static void b_guard_dce(tpu_ir_graph_t* g) { /* DCE would leave exp(x) read only by the sum */
  int x = tpu_ir_param(g, TPU_DTYPE_F64, 2, SBIG);
  int p = tpu_ir_unary(g, TPU_IR_EXP, x);
  tpu_ir_unary(g, TPU_IR_NEG, p); /* dead reader */
  tpu_ir_output(g, tpu_ir_reduce(g, TPU_IR_MONOID_SUM, p, (int64_t[]){1, 0}));
}
static void b_guard_cse(tpu_ir_graph_t* g) { /* two fused producers; CSE would share one */
  int x = tpu_ir_param(g, TPU_DTYPE_F64, 2, SBIG);
  int p1 = tpu_ir_unary(g, TPU_IR_EXP, x), p2 = tpu_ir_unary(g, TPU_IR_EXP, x);
  tpu_ir_output(g, tpu_ir_reduce(g, TPU_IR_MONOID_SUM, p1, (int64_t[]){1, 0}));
  tpu_ir_output(g, tpu_ir_reduce(g, TPU_IR_MONOID_SUM, p2, (int64_t[]){1, 1}));
}
static void b_guard_canon(tpu_ir_graph_t* g) { /* sum(x * 1): x may be strided, x*1 is not */
  int x = tpu_ir_param(g, TPU_DTYPE_F64, 2, SBIG);
  int one = tpu_ir_broadcast(g, tpu_ir_constant(g, TPU_DTYPE_F64, 1.0), 2, SBIG, NULL);
  int y = tpu_ir_binary(g, TPU_IR_MUL, x, one);
  int t = tpu_ir_transpose(g, y, (int64_t[]){1, 0});
  tpu_ir_output(g, tpu_ir_reduce(g, TPU_IR_MONOID_SUM, t, (int64_t[]){1, 0}));
  tpu_ir_output(g, tpu_ir_unary(g, TPU_IR_NEG, tpu_ir_binary(g, TPU_IR_MUL, x, tpu_ir_unary(g, TPU_IR_NEG, tpu_ir_unary(g, TPU_IR_NEG, one)))));
}
static void b_guard_output(tpu_ir_graph_t* g) { /* CSE would make the dot read an output */
  int x = tpu_ir_param(g, TPU_DTYPE_F32, 2, (int64_t[]){9, 9});
  tpu_ir_output(g, tpu_ir_unary(g, TPU_IR_EXP, x));
  tpu_ir_output(g, tpu_ir_dot(g, tpu_ir_unary(g, TPU_IR_EXP, x), x, 0, TPU_DTYPE_F32));
}
static void b_guard_custom(tpu_ir_graph_t* g) { /* gelu(x + 1) twice, one summed (fused), one negated: CSE would
                                                  * share it, materializing the summed producer */
  int x = tpu_ir_param(g, TPU_DTYPE_F32, 2, SBIG);
  int one = tpu_ir_broadcast(g, tpu_ir_constant(g, TPU_DTYPE_F32, 1.0), 2, SBIG, NULL);
  int gl[2];
  for (int i = 0; i < 2; ++i) {
    tpu_ir_op_t p;
    memset(&p, 0, sizeof p);
    p.opcode = TPU_IR_CUSTOM, p.i0 = TPU_IR_CUSTOM_GELU;
    int a = tpu_ir_binary(g, TPU_IR_ADD, x, one);
    p.type = g->ops[a].type;
    gl[i] = tpu_ir_add_op(g, &p, 1, &a);
  }
  tpu_ir_output(g, tpu_ir_reduce(g, TPU_IR_MONOID_SUM, gl[0], (int64_t[]){2, 0, 1}));
  tpu_ir_output(g, tpu_ir_unary(g, TPU_IR_NEG, gl[1]));
}
static void test_reduce_order(void) {
  tpu_compiler_stats_t st;
  g_finite_inputs = 1;
  tpu_ir_graph_t ref, opt;
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_guard_dce(&ref); b_guard_dce(&opt);
  check_same("guard dce", &ref, &opt, &st);
  CHECK(count_op(&opt, TPU_IR_NEG) == 0 && count_op(&opt, TPU_IR_RESHAPE) == 0,
        "dead reader dropped, exp(x) now fused into its sum (reshape %d)", count_op(&opt, TPU_IR_RESHAPE));
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_guard_cse(&ref); b_guard_cse(&opt);
  check_same("guard cse", &ref, &opt, &st);
  CHECK(count_op(&opt, TPU_IR_EXP) == 1 && st.cse_hits >= 1, "fused producers shared, now materialized (exp %d)",
        count_op(&opt, TPU_IR_EXP));
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_guard_canon(&ref); b_guard_canon(&opt);
  check_same("guard canon", &ref, &opt, &st);
  CHECK(count_op(&opt, TPU_IR_MUL) == 1 && count_op(&opt, TPU_IR_NEG) == 1,
        "x*1 kept where a reduce reads it, removed where only elementwise ops do (mul %d)", count_op(&opt, TPU_IR_MUL));
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_guard_output(&ref); b_guard_output(&opt);
  check_same("guard output", &ref, &opt, &st);
  CHECK(count_op(&opt, TPU_IR_EXP) == 2, "a library op never starts reading a graph output (exp %d)",
        count_op(&opt, TPU_IR_EXP));
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
  tpu_ir_graph_init(&ref); tpu_ir_graph_init(&opt);
  b_guard_custom(&ref); b_guard_custom(&opt);
  check_same("guard custom", &ref, &opt, &st);
  CHECK(count_op(&opt, TPU_IR_CUSTOM) == 1, "a fused custom producer shared with another reader (custom %d)",
        count_op(&opt, TPU_IR_CUSTOM));
  tpu_ir_graph_free(&ref); tpu_ir_graph_free(&opt);
  g_finite_inputs = 0;
}

/* Memory planning in the host driver: temporaries go back to the cache after their last
 * reader, so later steps reuse their blocks. A graph whose early temporaries are read again
 * at the end through view chains (transpose of transpose, reshape) must still see their
 * values: checked against loops here (IEEE-exact ops and max, so the comparison is exact). */
static void test_memplan(void) {
  enum { R = 8, C = 33, STEPS = 6 };
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int64_t rc[2] = {R, C};
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, rc);
  int a = tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_binary(&g, TPU_IR_MUL, x, x), x);   /* read at the end */
  int at = tpu_ir_transpose(&g, a, (int64_t[]){1, 0});
  /* an early view chain of a, read only by the last op */
  int back = tpu_ir_reshape(&g, tpu_ir_transpose(&g, at, (int64_t[]){1, 0}), 1, (int64_t[]){R * C});
  int v = a;
  for (int k = 0; k < STEPS; ++k) {
    int b = tpu_ir_binary(&g, TPU_IR_SUB, tpu_ir_binary(&g, TPU_IR_MUL, v, v), x);  /* 2 readers: a root */
    int c = tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_unary(&g, TPU_IR_SQRT, tpu_ir_unary(&g, TPU_IR_ABS, b)), b);
    int m = tpu_ir_reduce(&g, TPU_IR_MONOID_MAX, c, (int64_t[]){0, 1});             /* library step */
    v = tpu_ir_binary(&g, TPU_IR_MIN, c, tpu_ir_broadcast(&g, m, 2, rc, (int64_t[]){0}));
    v = tpu_ir_binary(&g, TPU_IR_MUL, v, tpu_ir_broadcast(&g, tpu_ir_constant(&g, TPU_DTYPE_F32, 0.5), 2, rc, NULL));
  }
  tpu_ir_output(&g, tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_reshape(&g, v, 1, (int64_t[]){R * C}), back));
  tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_MAX, v, (int64_t[]){1, 0}));
  OK(tpu_compiler_run_ex(&g, "memplan", 1, NULL));
  float xs[R * C], ref0[R * C], ref1[C], av[R * C], vv[R * C];
  for (int i = 0; i < R * C; ++i) xs[i] = (float)((i * 37) % 23) / 8.0f - 1.3f;
  for (int i = 0; i < R * C; ++i) { av[i] = xs[i] * xs[i] + xs[i]; vv[i] = av[i]; }
  for (int k = 0; k < STEPS; ++k) {
    float cv[R * C];
    for (int i = 0; i < R * C; ++i) { float b = vv[i] * vv[i] - xs[i]; cv[i] = sqrtf(fabsf(b)) + b; }
    for (int r = 0; r < R; ++r) {
      float m = -INFINITY;
      for (int j = 0; j < C; ++j) m = cv[r * C + j] > m ? cv[r * C + j] : m;
      for (int j = 0; j < C; ++j) { float t = cv[r * C + j] < m ? cv[r * C + j] : m; vv[r * C + j] = t * 0.5f; }
    }
  }
  for (int i = 0; i < R * C; ++i) ref0[i] = vv[i] + av[i];
  for (int j = 0; j < C; ++j) { float m = -INFINITY; for (int r = 0; r < R; ++r) m = vv[r * C + j] > m ? vv[r * C + j] : m; ref1[j] = m; }
  tpu_host_exe_t* exe = NULL;
  OK(tpu_host_compile(&g, &exe));
  float o0[R * C], o1[C];
  tpu_host_view_t pv, ov[2];
  view_of(&pv, (char*)xs, &g.ops[x].type);
  view_of(&ov[0], (char*)o0, &g.ops[g.outputs[0]].type);
  view_of(&ov[1], (char*)o1, &g.ops[g.outputs[1]].type);
  for (int run = 0; run < 3 && exe; ++run) { /* later runs start from a warm block cache */
    memset(o0, 0, sizeof o0); memset(o1, 0, sizeof o1);
    OK(tpu_host_exe_run(exe, &pv, NULL, ov));
    CHECK(!memcmp(o0, ref0, sizeof o0) && !memcmp(o1, ref1, sizeof o1), "memplan run %d matches the loops", run);
  }
  tpu_host_exe_free(exe);
  tpu_ir_graph_free(&g);
}

/* The pipeline never touches a graph whose builder failed, and reports it. */
static void test_errors(void) {
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, S2);
  tpu_ir_binary(&g, TPU_IR_ADD, x, tpu_ir_param(&g, TPU_DTYPE_F32, 1, (int64_t[]){4}));
  tpu_status_t s = tpu_compiler_run_ex(&g, "bad", 1, NULL);
  CHECK(s && tpu_status_code(s) == TPU_STATUS_INTERNAL, "graph with a builder error is rejected");
  tpu_status_free(s);
  tpu_ir_graph_free(&g);
}

/* tpu_compiler_compile: metrics and the IR dump (TORCH_TPU_DUMP_IR, read at first use). */
static void test_compile_and_dump(void) {
  char dir[] = "/tmp/tpu_dump_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  setenv("TORCH_TPU_DUMP_IR", dir, 1);
  tpu_metrics_t m0, m1;
  tpu_metrics_get(&m0);
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  b_eager_chain(&g);
  tpu_host_exe_t* exe = NULL;
  OK(tpu_compiler_compile(&g, "test::chain/1", &exe));
  tpu_metrics_get(&m1);
  CHECK(m1.graph_ops_before > m0.graph_ops_before && m1.graph_ops_after - m0.graph_ops_after == (uint64_t)g.n_ops &&
        m1.pass_cse_hits > m0.pass_cse_hits && m1.pass_dce_removed > m0.pass_dce_removed,
        "compile metrics: graph sizes and pass counts");
  CHECK(m1.fusion_clusters > m0.fusion_clusters && m1.fusion_ops_fused > m0.fusion_ops_fused &&
        m1.fusion_reduce_producers > m0.fusion_reduce_producers, "fusion metrics: clusters %llu ops %llu reduce %llu",
        (unsigned long long)(m1.fusion_clusters - m0.fusion_clusters),
        (unsigned long long)(m1.fusion_ops_fused - m0.fusion_ops_fused),
        (unsigned long long)(m1.fusion_reduce_producers - m0.fusion_reduce_producers));
  tpu_host_exe_free(exe);
  tpu_ir_graph_free(&g);
  char path[256];
  struct stat sb;
  snprintf(path, sizeof path, "%s/00000_test__chain_1.before.txt", dir);
  CHECK(stat(path, &sb) == 0 && sb.st_size > 0, "dump written: %s", path);
  unlink(path);
  snprintf(path, sizeof path, "%s/00000_test__chain_1.after.txt", dir);
  CHECK(stat(path, &sb) == 0 && sb.st_size > 0, "dump written: %s", path);
  unlink(path);
  snprintf(path, sizeof path, "%s/00000_test__chain_1.stablehlo.mlir", dir);
  FILE* f = fopen(path, "r");
  char head[4096] = {0};
  if (f) { size_t n = fread(head, 1, sizeof head - 1, f); head[n] = 0; fclose(f); }
  CHECK(strstr(head, "func.func") && strstr(head, "stablehlo."), "StableHLO dump: %.200s", head);
  unlink(path);
  rmdir(dir);
  unsetenv("TORCH_TPU_DUMP_IR");
}

int main(void) {
  test_cse();
  test_dce();
  test_identities();
  test_views();
  test_converts();
  test_fold();
  test_eager_chain();
  test_random();
  test_reduce_order();
  test_memplan();
  test_errors();
  test_compile_and_dump();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
