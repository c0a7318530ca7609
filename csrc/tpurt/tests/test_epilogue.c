/* test_epilogue.c — GEMM epilogue fusion of the host driver (exec.c run_dot_epilogue, gemm.c
 * tpu_host_gemm_epi_t): a DOT whose whole f32 result one elementwise cluster reads runs that cluster
 * on every finished block of C. Each graph is compiled with the fusion on and off and must give
 * bitwise the same outputs (same operations per element, only the order of the passes changes), for
 * odd shapes (1, 7, 33, 130, and k past the GEMM's k block), transposed operands, f32 / bf16 / f16
 * operands, batch (folded and not), reshapes between the DOT and the cluster, every GEMM kernel the
 * CPU has; and it must actually fuse (tpu_host_exe_num_epilogues). Also checks the GEMM's block
 * callback covers C exactly once with final values.
 * Legend: B batch, M rows, N columns, K reduction; A (B, M, K), W (B, K, N), C (B, M, N). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/gemm.h"
#include "drivers/host/host.h"
#include "runtime/runtime.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }
static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static void view_of(tpu_host_view_t* v, char* data, const tpu_ir_type_t* t) {
  memset(v, 0, sizeof(*v));
  v->data = data; v->dtype = t->dtype; v->rank = t->rank;
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; --d) { v->sizes[d] = t->dims[d]; v->strides[d] = s; s *= t->dims[d]; }
}
static size_t bytes_of(const tpu_ir_type_t* t) { return (size_t)tpu_ir_numel(t) * tpu_dtype_size(t->dtype) + 8; }

/* Epilogue kinds (what lowerings and autocast produce after a matmul). */
enum {
  EPI_CVT_BF16,   /* mm under autocast: f32 product -> bf16 */
  EPI_CVT_F16,
  EPI_ADDMM,      /* alpha * p + beta * bias (select on beta == 0), -> operand dtype */
  EPI_BIAS_GELU,  /* linear + bias along N, exact gelu, -> operand dtype */
  EPI_BIASM_RELU, /* bias along M, relu (select), f32 */
  EPI_SILU_RES,   /* silu(p) + residual (B, M, N), f32 */
  EPI_SCALE,      /* p * runtime scalar (attention scores), -> operand dtype */
  EPI_COUNT
};

typedef struct {
  int dt, epi, ta, tb, batch, fold, reshape;
  int64_t m, n, k;
} case_t;

static int bcast(tpu_ir_graph_t* g, int x, int rank, const int64_t* dims, const int64_t* bd) {
  return tpu_ir_broadcast(g, x, rank, dims, bd);
}
static int cst(tpu_ir_graph_t* g, double v, int rank, const int64_t* dims) {
  return bcast(g, tpu_ir_constant(g, TPU_DTYPE_F32, v), rank, dims, NULL);
}

/* Builds the graph of case c; returns 1 if the DOT is expected to fuse. */
static int build(tpu_ir_graph_t* g, const case_t* c) {
  tpu_ir_graph_init(g);
  int nb = c->batch ? (c->fold ? 1 : 2) : 0;
  int64_t bd[2] = {c->batch, 2};
  int64_t ad[4], wd[4], cd[4];
  int r = nb + 2;
  for (int d = 0; d < nb; ++d) ad[d] = wd[d] = cd[d] = bd[d];
  /* A stored (.., K, M) when ta, viewed transposed; W stored (.., N, K) when tb (a Linear weight) */
  ad[nb] = c->ta ? c->k : c->m; ad[nb + 1] = c->ta ? c->m : c->k;
  wd[nb] = c->tb ? c->n : c->k; wd[nb + 1] = c->tb ? c->k : c->n;
  cd[nb] = c->m; cd[nb + 1] = c->n;
  int64_t perm[4];
  for (int d = 0; d < r; ++d) perm[d] = d;
  perm[nb] = nb + 1; perm[nb + 1] = nb;
  int a, w;
  if (nb == 2) { /* A's batch dims (B, 2) stored as (2, B): not foldable into one stride */
    int64_t sd[4] = {ad[1], ad[0], ad[2], ad[3]};
    a = tpu_ir_transpose(g, tpu_ir_param(g, c->dt, r, sd), (int64_t[]){1, 0, 2, 3});
  } else {
    a = tpu_ir_param(g, c->dt, r, ad);
  }
  w = tpu_ir_param(g, c->dt, r, wd);
  if (c->ta) a = tpu_ir_transpose(g, a, perm);
  if (c->tb) w = tpu_ir_transpose(g, w, perm);
  int p = tpu_ir_dot(g, a, w, nb, TPU_DTYPE_F32);
  int rank = r;
  int64_t od[4];
  memcpy(od, cd, sizeof(od));
  if (c->reshape && nb == 0) { /* (M, N) -> (M/?, ...): split M as a Linear over (B, T, C) does */
    if (c->m % 2 == 0 && c->m >= 2) { od[0] = 2; od[1] = c->m / 2; od[2] = c->n; rank = 3; }
    else { od[0] = 1; od[1] = c->m; od[2] = c->n; rank = 3; }
    p = tpu_ir_reshape(g, p, rank, od);
  }
  int out_dt = c->dt;
  int y;
  switch (c->epi) {
    case EPI_CVT_BF16: y = tpu_ir_convert(g, p, TPU_DTYPE_BF16); break;
    case EPI_CVT_F16: y = tpu_ir_convert(g, p, TPU_DTYPE_F16); break;
    case EPI_ADDMM: {
      int bias = tpu_ir_convert(g, tpu_ir_param(g, c->dt, 1, &od[rank - 1]), TPU_DTYPE_F32);
      int sa = bcast(g, tpu_ir_scalar(g, TPU_DTYPE_F32), rank, od, NULL);
      int sb = bcast(g, tpu_ir_scalar(g, TPU_DTYPE_F32), rank, od, NULL);
      int self = bcast(g, bias, rank, od, (int64_t[]){rank - 1});
      int pr = tpu_ir_binary(g, TPU_IR_MUL, sa, p);
      int ws = tpu_ir_binary(g, TPU_IR_ADD, tpu_ir_binary(g, TPU_IR_MUL, sb, self), pr);
      int z = tpu_ir_compare(g, TPU_IR_CMP_EQ, sb, cst(g, 0, rank, od));
      y = tpu_ir_convert(g, tpu_ir_select(g, z, pr, ws), out_dt);
      break;
    }
    case EPI_BIAS_GELU: {
      int bias = tpu_ir_convert(g, tpu_ir_param(g, c->dt, 1, &od[rank - 1]), TPU_DTYPE_F32);
      int v = tpu_ir_binary(g, TPU_IR_ADD, p, bcast(g, bias, rank, od, (int64_t[]){rank - 1}));
      int e = tpu_ir_unary(g, TPU_IR_ERF, tpu_ir_binary(g, TPU_IR_MUL, v, cst(g, 0.7071067811865476, rank, od)));
      e = tpu_ir_binary(g, TPU_IR_MUL, cst(g, 0.5, rank, od), tpu_ir_binary(g, TPU_IR_ADD, cst(g, 1.0, rank, od), e));
      y = tpu_ir_convert(g, tpu_ir_binary(g, TPU_IR_MUL, v, e), out_dt);
      break;
    }
    case EPI_BIASM_RELU: {
      int bias = tpu_ir_param(g, TPU_DTYPE_F32, 1, &od[rank - 2]);
      int v = tpu_ir_binary(g, TPU_IR_ADD, p, bcast(g, bias, rank, od, (int64_t[]){rank - 2}));
      int zero = cst(g, 0, rank, od);
      y = tpu_ir_select(g, tpu_ir_compare(g, TPU_IR_CMP_LT, v, zero), zero, v);
      break;
    }
    case EPI_SILU_RES: {
      int res = tpu_ir_param(g, TPU_DTYPE_F32, rank, od);
      int sg = tpu_ir_unary(g, TPU_IR_LOGISTIC, p);
      y = tpu_ir_binary(g, TPU_IR_ADD, tpu_ir_binary(g, TPU_IR_MUL, p, sg), res);
      break;
    }
    default: {
      int s = bcast(g, tpu_ir_scalar(g, TPU_DTYPE_F32), rank, od, NULL);
      y = tpu_ir_convert(g, tpu_ir_binary(g, TPU_IR_MUL, p, s), out_dt);
      break;
    }
  }
  tpu_ir_output(g, y);
  return 1;
}

static void fill(char* p, int dt, int64_t n) {
  int64_t es = (int64_t)tpu_dtype_size(dt);
  for (int64_t i = 0; i < n; ++i) {
    double v = (urand() * 2 - 1) * 2;
    if (rnd() % 97 == 0) v = 0.0;
    tpu_host_store_f64(p + i * es, dt, v);
  }
}

/* Compiles g with fusion `on`, runs it on `params` / `sc`; outputs into out (allocated). */
static int run(const tpu_ir_graph_t* g, int on, const tpu_host_view_t* params, const tpu_host_scalar_t* sc,
               char** out, int* n_epi) {
  int old = tpu_host_set_epilogue_fusion(on);
  tpu_host_exe_t* exe = NULL;
  tpu_status_t st = tpu_host_compile(g, &exe);
  tpu_host_set_epilogue_fusion(old);
  tpu_host_view_t ov[4];
  for (int k = 0; k < g->n_outputs; ++k) {
    const tpu_ir_type_t* t = &g->ops[g->outputs[k]].type;
    out[k] = malloc(bytes_of(t));
    memset(out[k], 0xA5, bytes_of(t));
    view_of(&ov[k], out[k], t);
  }
  if (st == TPU_OK) { *n_epi = tpu_host_exe_num_epilogues(exe); st = tpu_host_exe_run(exe, params, sc, ov); }
  int rc = st == TPU_OK ? 0 : -1;
  if (st) printf("  run failed: %s\n", tpu_status_message(st));
  tpu_status_free(st);
  tpu_host_exe_free(exe);
  return rc;
}

static void run_case(const case_t* c) {
  tpu_ir_graph_t g;
  build(&g, c);
  char what[200];
  snprintf(what, sizeof what, "%s epi %d m %lld n %lld k %lld ta %d tb %d batch %d fold %d reshape %d",
           tpu_dtype_name(c->dt), c->epi, (long long)c->m, (long long)c->n, (long long)c->k, c->ta, c->tb, c->batch,
           c->fold, c->reshape);
  CHECK(g.status == TPU_OK, "%s: build -> %s", what, tpu_status_message(g.status));
  if (g.status != TPU_OK) { tpu_ir_graph_free(&g); return; }
  char* pdata[8] = {0};
  tpu_host_view_t params[8];
  for (int v = 0; v < g.n_ops; ++v) {
    const tpu_ir_op_t* op = &g.ops[v];
    if (op->opcode != TPU_IR_PARAM) continue;
    pdata[op->i0] = malloc(bytes_of(&op->type));
    fill(pdata[op->i0], op->type.dtype, tpu_ir_numel(&op->type));
    view_of(&params[op->i0], pdata[op->i0], &op->type);
  }
  tpu_host_scalar_t sc[4];
  for (int i = 0; i < 4; ++i) { sc[i].f = (i == 1 && c->k % 2) ? 0.0 : urand() * 2 - 0.5; sc[i].i = 0; }
  char *o0[4] = {0}, *o1[4] = {0};
  int e0 = -1, e1 = -1;
  int r0 = run(&g, 0, params, sc, o0, &e0), r1 = run(&g, 1, params, sc, o1, &e1);
  CHECK(r0 == 0 && r1 == 0, "%s: runs", what);
  CHECK(e0 == 0 && e1 == 1, "%s: fused epilogues off %d on %d (want 0, 1)", what, e0, e1);
  if (r0 == 0 && r1 == 0) {
    const tpu_ir_type_t* t = &g.ops[g.outputs[0]].type;
    size_t nbytes = (size_t)tpu_ir_numel(t) * tpu_dtype_size(t->dtype);
    CHECK(memcmp(o0[0], o1[0], nbytes) == 0, "%s: fused output differs from unfused", what);
  }
  for (int k = 0; k < 4; ++k) { free(o0[k]); free(o1[k]); }
  for (int i = 0; i < 8; ++i) free(pdata[i]);
  tpu_ir_graph_free(&g);
}

/* Graphs the fusion must leave alone: the product is also an output, read by two clusters, or by a reduce. */
static void run_not_fused(void) {
  int64_t d[2] = {9, 5}, w[2] = {5, 11}, o[2] = {9, 11};
  for (int kind = 0; kind < 3; ++kind) {
    tpu_ir_graph_t g;
    tpu_ir_graph_init(&g);
    int p = tpu_ir_dot(&g, tpu_ir_param(&g, TPU_DTYPE_F32, 2, d), tpu_ir_param(&g, TPU_DTYPE_F32, 2, w), 0, TPU_DTYPE_F32);
    if (kind == 0) { tpu_ir_output(&g, p); tpu_ir_output(&g, tpu_ir_convert(&g, p, TPU_DTYPE_BF16)); }
    if (kind == 1) { /* read by two clusters */
      tpu_ir_output(&g, tpu_ir_unary(&g, TPU_IR_EXP, p));
      tpu_ir_output(&g, tpu_ir_convert(&g, tpu_ir_reshape(&g, p, 1, (int64_t[]){99}), TPU_DTYPE_BF16));
    }
    if (kind == 2) tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_SUM, p, (int64_t[]){0, 1}));
    (void)o;
    tpu_host_exe_t* exe = NULL;
    tpu_status_t st = tpu_host_compile(&g, &exe);
    CHECK(st == TPU_OK && tpu_host_exe_num_epilogues(exe) == 0, "not fused: kind %d", kind);
    tpu_status_free(st);
    tpu_host_exe_free(exe);
    tpu_ir_graph_free(&g);
  }
}

/* The block callback: every element of C exactly once, after its final value is stored. */
typedef struct { int64_t m, n, rs, cs; const float* c; const float* ref; int* seen; int bad; } cover_t;
static void cover_fn(void* ctx, int64_t t, int64_t i0, int64_t j0, int64_t mb, int64_t nb, const float* blk,
                     int64_t rs, int64_t cs) {
  cover_t* cv = ctx;
  for (int64_t i = i0; i < i0 + mb; ++i)
    for (int64_t j = j0; j < j0 + nb; ++j) {
      int64_t x = t * cv->m * cv->n + i * cv->rs + j * cv->cs;
      __atomic_fetch_add(&cv->seen[x], 1, __ATOMIC_RELAXED);
      if (blk[(i - i0) * rs + (j - j0) * cs] != cv->ref[x]) cv->bad = 1;
    }
}
static void run_cover(void) {
  const int64_t shapes[][4] = {{1, 1, 1, 1}, {1, 1, 300, 40}, {1, 200, 1, 40}, {3, 7, 33, 5}, {2, 130, 70, 600},
                               {1, 260, 3100, 20}, {5, 64, 64, 64}, {1, 0, 5, 5}, {2, 4, 4, 0}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
    for (int tc = 0; tc < 4; ++tc) { /* tc & 1: C column-major; tc & 2: C unused (block buffers) */
      int64_t B = shapes[s][0], m = shapes[s][1], n = shapes[s][2], k = shapes[s][3];
      float* a = malloc((size_t)(B * m * k + 1) * 4);
      float* b = malloc((size_t)(B * k * n + 1) * 4);
      float* c = malloc((size_t)(B * m * n + 1) * 4);
      float* ref = malloc((size_t)(B * m * n + 1) * 4);
      int* seen = calloc((size_t)(B * m * n + 1), sizeof(int));
      for (int64_t i = 0; i < B * m * k; ++i) a[i] = (float)(urand() - 0.5);
      for (int64_t i = 0; i < B * k * n; ++i) b[i] = (float)(urand() - 0.5);
      /* tc: C column-major (the driver computes C^T) */
      int64_t c_rs = tc & 1 ? 1 : n, c_cs = tc & 1 ? m : 1;
      tpu_host_sgemm_batched(B, m, n, k, 1.0f, a, m * k, k, 1, b, k * n, n, 1, 0.0f, ref, m * n, c_rs, c_cs);
      for (int64_t i = 0; i < B * m * n; ++i) c[i] = NAN; /* the callback must see values, not this */
      cover_t cv = {m, n, c_rs, c_cs, c, ref, seen, 0};
      tpu_host_gemm_epi_t epi = {.fn = cover_fn, .ctx = &cv, .t0 = 0, .c_unused = tc >> 1};
      tpu_host_sgemm_batched_epi(TPU_DTYPE_F32, TPU_DTYPE_F32, 0, B, m, n, k, 1.0f, a, m * k, k, 1, b, k * n, n, 1,
                                 0.0f, c, m * n, c_rs, c_cs, &epi);
      int once = 1;
      for (int64_t i = 0; i < B * m * n; ++i) once &= seen[i] == 1;
      CHECK(once, "epi coverage B %lld m %lld n %lld k %lld tc %d", (long long)B, (long long)m, (long long)n,
            (long long)k, tc);
      CHECK(!cv.bad, "epi sees final values B %lld m %lld n %lld k %lld tc %d", (long long)B, (long long)m,
            (long long)n, (long long)k, tc);
      free(a); free(b); free(c); free(ref); free(seen);
    }
}

int main(void) {
  run_cover();
  run_not_fused();
  static const int64_t dims[] = {1, 7, 33, 130};
  const int dts[] = {TPU_DTYPE_F32, TPU_DTYPE_BF16, TPU_DTYPE_F16};
  const tpu_host_gemm_isa_t isas[] = {TPU_HOST_GEMM_ISA_PORTABLE, TPU_HOST_GEMM_ISA_AVX2, TPU_HOST_GEMM_ISA_AVX512,
                                      TPU_HOST_GEMM_ISA_BEST};
  for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ++ii) {
    tpu_host_gemm_set_isa(isas[ii]);
    int ncase = ii + 1 == sizeof isas / sizeof isas[0] ? 160 : 40;
    for (int i = 0; i < ncase; ++i) {
      case_t c;
      c.dt = dts[rnd() % 3];
      c.epi = (int)(rnd() % EPI_COUNT);
      c.m = dims[rnd() % 4]; c.n = dims[rnd() % 4]; c.k = dims[rnd() % 4];
      c.ta = (int)(rnd() % 2); c.tb = (int)(rnd() % 2);
      c.batch = rnd() % 3 == 0 ? (int)(1 + rnd() % 4) : 0;
      c.fold = 1;
      c.reshape = !c.batch && rnd() % 3 == 0;
      run_case(&c);
    }
    /* larger: several GEMM blocks and k passes, threads */
    case_t big[] = {{TPU_DTYPE_BF16, EPI_BIAS_GELU, 0, 1, 0, 1, 0, 300, 520, 600},
                    {TPU_DTYPE_F32, EPI_ADDMM, 1, 0, 0, 1, 1, 258, 3100, 40},
                    {TPU_DTYPE_BF16, EPI_CVT_BF16, 0, 0, 8, 1, 0, 64, 64, 64},
                    {TPU_DTYPE_F32, EPI_SILU_RES, 0, 1, 3, 1, 0, 200, 130, 70},
                    {TPU_DTYPE_F16, EPI_SCALE, 1, 1, 2, 1, 0, 33, 1, 513}};
    for (size_t j = 0; j < sizeof big / sizeof big[0]; ++j) run_case(&big[j]);
  }
  tpu_host_gemm_set_isa(TPU_HOST_GEMM_ISA_BEST);
  printf("kernels %s\n%d passed, %d failed\n", tpu_host_gemm_isa_name(), g_pass, g_fail);
  return g_fail ? 1 : 0;
}
