/* test_exec.c — the host executor's run loop (drivers/host/exec.c): in-place outputs (an output
 * bound to the same memory as a parameter it is computed from) must give bitwise the results of the
 * same executable writing fresh memory, for clusters whose members read the aliased parameter
 * several times, strided (non-contiguous) aliased views, many in-place outputs in one graph (what
 * the _foreach_ optimizer lowerings produce), odd sizes (one tile, several tiles, large enough for
 * the pool to split), f32 / f64 / i64 / bf16; outputs that are reshapes of a step's result (computed
 * in the output's memory). Every result must also be the same whether the run uses the thread pool or
 * runs serially (inside a pool task, where the pool runs inline) or with finer pool chunks
 * (tpu_pool_set_grain_div, TORCH_TPU_GRAPH_GRAIN_DIV), reductions included; outputs that are views
 * (transposed slices) of a step's result, copied after the last step (small copies on the executor's
 * thread, large ones on the pool); rank-0 clusters (the executor's scalar path, one at a time and in scalar
 * batches) bitwise equal to the same clusters on shape [1], also in place; step groups (independent steps run
 * side by side) with an in-place output over a parameter the other step reads, and a failing step.
 * Legend: n elements; x, y parameters; s a runtime scalar. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "drivers/host/exec_sched.h"
#include "drivers/host/host.h"
#include "runtime/runtime.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }
static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static void fill(char* p, int dt, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double v = (urand() - 0.4) * 6;
    if (dt == TPU_DTYPE_I64) tpu_host_store_i64(p + i * 8, dt, (int64_t)(v * 7));
    else tpu_host_store_f64(p + i * (int64_t)tpu_dtype_size(dt), dt, v);
  }
}

/* One run of exe, optionally serial: inside a pool task nested parallel_for calls run inline. */
typedef struct {
  const tpu_host_exe_t* e;
  const tpu_host_view_t *params, *outs;
  const tpu_host_scalar_t* sc;
  tpu_status_t st;
} run_t;
static void run_body(void* ctx, int64_t b, int64_t e) {
  run_t* r = ctx;
  if (b == 0) r->st = tpu_host_exe_run(r->e, r->params, r->sc, r->outs);
}
static tpu_status_t run(const tpu_host_exe_t* e, const tpu_host_view_t* params, const tpu_host_scalar_t* sc,
                        const tpu_host_view_t* outs, int serial) {
  if (serial == 2) { /* the pool with grains divided by 16 (TORCH_TPU_GRAPH_GRAIN_DIV): more, smaller chunks */
    int old = tpu_pool_set_grain_div(16);
    tpu_status_t st = tpu_host_exe_run(e, params, sc, outs);
    tpu_pool_set_grain_div(old);
    return st;
  }
  if (!serial) return tpu_host_exe_run(e, params, sc, outs);
  run_t r = {e, params, outs, sc, TPU_OK};
  if (tpu_pool_num_threads() > 1) tpu_pool_parallel_for(2, 1, run_body, &r);
  else run_body(&r, 0, 2);
  return r.st;
}

/* out = (x * s + x * y) - x, then for floats rounded through the output dtype; every member reads x. */
static int build_chain(tpu_ir_graph_t* g, int dt, int64_t n) {
  int x = tpu_ir_param(g, dt, 1, &n), y = tpu_ir_param(g, dt, 1, &n), s = tpu_ir_scalar(g, dt);
  int sb = tpu_ir_broadcast(g, s, 1, &n, NULL);
  int a = tpu_ir_binary(g, TPU_IR_MUL, x, sb), b = tpu_ir_binary(g, TPU_IR_MUL, x, y);
  int c = tpu_ir_binary(g, TPU_IR_ADD, a, b);
  int o = tpu_ir_binary(g, TPU_IR_SUB, c, x);
  tpu_ir_output(g, o);
  return o;
}

/* x (viewed with element stride `st`, n elements over a buffer of n*st) updated in place. */
static void test_inplace_chain(int dt, int64_t n, int st, int serial) {
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  build_chain(&g, dt, n);
  tpu_host_exe_t* e = NULL;
  tpu_status_t s = tpu_host_compile(&g, &e);
  CHECK(s == TPU_OK, "compile: %s", s ? tpu_status_message(s) : "");
  if (s) { tpu_status_free(s); tpu_ir_graph_free(&g); return; }
  int64_t es = (int64_t)tpu_dtype_size(dt), span = n * st;
  char *x = malloc((size_t)(span * es)), *x0 = malloc((size_t)(span * es)), *y = malloc((size_t)(n * es));
  char* ref = malloc((size_t)(n * es));
  fill(x, dt, span); fill(y, dt, n);
  memcpy(x0, x, (size_t)(span * es));
  tpu_host_view_t p[2] = {{x, dt, 1, {n}, {st}}, {y, dt, 1, {n}, {1}}};
  tpu_host_view_t fresh = {ref, dt, 1, {n}, {1}};
  tpu_host_scalar_t sc = {0.75, 3};
  s = run(e, p, &sc, &fresh, serial); /* out of place */
  CHECK(s == TPU_OK, "out-of-place run");
  s = run(e, p, &sc, &p[0], serial); /* in place: the output is x's own view */
  CHECK(s == TPU_OK, "in-place run");
  int same = 1, untouched = 1;
  for (int64_t i = 0; i < n && same; ++i) same = !memcmp(x + i * st * es, ref + i * es, (size_t)es);
  for (int64_t i = 0; i < span && untouched; ++i)
    if (i % st) untouched = !memcmp(x + i * es, x0 + i * es, (size_t)es);
  CHECK(same, "in place differs from out of place: %s n=%lld stride %d serial %d", tpu_dtype_name(dt), (long long)n,
        st, serial);
  CHECK(untouched, "in place wrote outside its view: %s n=%lld stride %d", tpu_dtype_name(dt), (long long)n, st);
  free(x); free(x0); free(y); free(ref);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* K in-place updates in one graph (a _foreach_ step): x_k = x_k * s + y_k, outputs bound to x_k; also
 * the same graph run with the pool and serially must agree bit for bit. */
static void test_foreach_like(int K, int64_t n0) {
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int64_t n[16];
  int s = tpu_ir_scalar(&g, TPU_DTYPE_F32);
  for (int k = 0; k < K; ++k) {
    n[k] = n0 + 97 * k * k;
    int x = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n[k]), y = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n[k]);
    int sb = tpu_ir_broadcast(&g, s, 1, &n[k], NULL);
    tpu_ir_output(&g, tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_binary(&g, TPU_IR_MUL, x, sb), y));
  }
  tpu_host_exe_t* e = NULL;
  tpu_status_t st = tpu_host_compile(&g, &e);
  CHECK(st == TPU_OK, "compile foreach-like");
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return; }
  tpu_host_view_t p[32], o[16], f[16], pser[32];
  float* bufs[3][16];
  for (int k = 0; k < K; ++k) {
    for (int b = 0; b < 3; ++b) bufs[b][k] = malloc((size_t)n[k] * 4);
    float* ser = malloc((size_t)n[k] * 4);
    fill((char*)bufs[0][k], TPU_DTYPE_F32, n[k]); fill((char*)bufs[1][k], TPU_DTYPE_F32, n[k]);
    memcpy(ser, bufs[0][k], (size_t)n[k] * 4);
    p[2 * k] = (tpu_host_view_t){(char*)bufs[0][k], TPU_DTYPE_F32, 1, {n[k]}, {1}};
    p[2 * k + 1] = (tpu_host_view_t){(char*)bufs[1][k], TPU_DTYPE_F32, 1, {n[k]}, {1}};
    pser[2 * k] = (tpu_host_view_t){(char*)ser, TPU_DTYPE_F32, 1, {n[k]}, {1}};
    pser[2 * k + 1] = p[2 * k + 1];
    o[k] = p[2 * k];
    f[k] = (tpu_host_view_t){(char*)bufs[2][k], TPU_DTYPE_F32, 1, {n[k]}, {1}};
  }
  tpu_host_scalar_t sc = {0.9, 0};
  CHECK(run(e, p, &sc, f, 0) == TPU_OK, "fresh run");
  CHECK(run(e, p, &sc, o, 0) == TPU_OK, "in-place run (pool)");
  tpu_host_view_t oser[16];
  for (int k = 0; k < K; ++k) oser[k] = pser[2 * k];
  CHECK(run(e, pser, &sc, oser, 1) == TPU_OK, "in-place run (serial)");
  for (int k = 0; k < K; ++k) {
    CHECK(!memcmp(bufs[0][k], bufs[2][k], (size_t)n[k] * 4), "foreach-like element %d: in place differs", k);
    CHECK(!memcmp(bufs[0][k], pser[2 * k].data, (size_t)n[k] * 4), "foreach-like element %d: pool vs serial", k);
  }
  /* a second step, once with finer pool chunks (grain / 16) and once as before: the same bits */
  tpu_host_view_t pf[32], of[16];
  for (int k = 0; k < K; ++k) {
    pf[2 * k] = pser[2 * k]; /* holds the same values as bufs[0][k] now */
    pf[2 * k + 1] = p[2 * k + 1];
    of[k] = pf[2 * k];
  }
  CHECK(run(e, pf, &sc, of, 2) == TPU_OK, "in-place run (fine chunks)");
  CHECK(run(e, p, &sc, o, 0) == TPU_OK, "in-place run (pool), second step");
  for (int k = 0; k < K; ++k) {
    CHECK(!memcmp(bufs[0][k], pser[2 * k].data, (size_t)n[k] * 4), "foreach-like element %d: fine chunks differ", k);
    for (int b = 0; b < 3; ++b) free(bufs[b][k]);
    free(pser[2 * k].data);
  }
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* An output that is a reshape of a step's result ([6, m] of r = x * s + x, f32[6m]) gets r computed in
 * its memory; a later step (z = r * r, output 1) reads r there. Output 0 bound to fresh memory, to a
 * transposed view (cannot be viewed as [6m]: r goes through a temporary and a copy), and to x's own
 * memory (in place: r's step is x's last reader). */
static void test_reshape_outputs(int64_t m, int serial) {
  int64_t n = 6 * m, d2[2] = {6, m};
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n), s = tpu_ir_scalar(&g, TPU_DTYPE_F32);
  int r = tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_binary(&g, TPU_IR_MUL, x, tpu_ir_broadcast(&g, s, 1, &n, NULL)), x);
  tpu_ir_output(&g, tpu_ir_reshape(&g, r, 2, d2));
  tpu_ir_output(&g, tpu_ir_binary(&g, TPU_IR_MUL, r, r));
  tpu_host_exe_t* e = NULL;
  tpu_status_t st = tpu_host_compile(&g, &e);
  CHECK(st == TPU_OK, "compile reshape outputs");
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return; }
  float *xb = malloc((size_t)n * 4), *x0 = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *z = malloc((size_t)n * 4);
  float *wy = malloc((size_t)n * 4), *wz = malloc((size_t)n * 4);
  fill((char*)xb, TPU_DTYPE_F32, n);
  memcpy(x0, xb, (size_t)n * 4);
  const float sv = 0.625f;
  for (int64_t i = 0; i < n; ++i) { float a = x0[i] * sv; wy[i] = a + x0[i]; wz[i] = wy[i] * wy[i]; }
  tpu_host_scalar_t sc = {sv, 0};
  for (int bind = 0; bind < 3; ++bind) {
    memcpy(xb, x0, (size_t)n * 4);
    memset(y, 0, (size_t)n * 4);
    tpu_host_view_t p = {(char*)xb, TPU_DTYPE_F32, 1, {n}, {1}};
    tpu_host_view_t o[2] = {{(char*)y, TPU_DTYPE_F32, 2, {6, m}, {m, 1}}, {(char*)z, TPU_DTYPE_F32, 1, {n}, {1}}};
    if (bind == 1) { o[0].strides[0] = 1; o[0].strides[1] = 6; } /* a transposed [m, 6] buffer */
    if (bind == 2) o[0].data = (char*)xb;                          /* in place over x */
    CHECK(run(e, &p, &sc, o, serial) == TPU_OK, "run reshape outputs bind %d", bind);
    int ok0 = 1, ok1 = !memcmp(z, wz, (size_t)n * 4);
    for (int64_t i = 0; i < 6 && ok0; ++i)
      for (int64_t j = 0; j < m && ok0; ++j)
        ok0 = ((float*)o[0].data)[i * o[0].strides[0] + j * o[0].strides[1]] == wy[i * m + j];
    CHECK(ok0, "reshape output: m=%lld bind %d serial %d", (long long)m, bind, serial);
    CHECK(ok1, "output reading the reshaped step: m=%lld bind %d serial %d", (long long)m, bind, serial);
  }
  free(xb); free(x0); free(y); free(z); free(wy); free(wz);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* Outputs that are views of a step's result the output memory cannot host (what compiled forward
 * graphs save: heads split from a qkv projection, x[:, :, h].transpose(1, 2); a transpose of a
 * step) are copied after the last step. r = x * s + x over [a, b, 3c]; output 0 = r[:, :, c:2c]
 * transposed to [b, a, c] (rows of c elements), output 1 = r[:, :, 0:c] as [a, c, b] (inner dim
 * strided), output 2 = r itself; outputs bound to fresh contiguous memory and to a strided buffer
 * (every other element of a larger one: the untouched elements stay). Small copies run on the
 * executor's thread, large ones (over 256 KiB) through tpu_host_k_copy: both give the reference. */
static void test_view_outputs(int dt, int64_t a, int64_t b, int64_t c, int strided, int serial) {
  int64_t d3[3] = {a, b, 3 * c}, n = a * b * 3 * c;
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, dt, 3, d3), s = tpu_ir_scalar(&g, dt);
  int r = tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_binary(&g, TPU_IR_MUL, x, tpu_ir_broadcast(&g, s, 3, d3, NULL)), x);
  int64_t st1[3] = {0, 0, c}, li1[3] = {a, b, 2 * c}, st0[3] = {0, 0, 0}, li0[3] = {a, b, c}, one[3] = {1, 1, 1};
  int64_t p0[3] = {1, 0, 2}, p1[3] = {0, 2, 1};
  tpu_ir_output(&g, tpu_ir_transpose(&g, tpu_ir_slice(&g, r, st1, li1, one), p0)); /* [b, a, c] */
  tpu_ir_output(&g, tpu_ir_transpose(&g, tpu_ir_slice(&g, r, st0, li0, one), p1)); /* [a, c, b] */
  tpu_ir_output(&g, r);
  tpu_host_exe_t* e = NULL;
  tpu_status_t st = tpu_host_compile(&g, &e);
  CHECK(st == TPU_OK, "compile view outputs");
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return; }
  const int64_t es = (int64_t)tpu_dtype_size(dt), m = a * b * c, k = strided ? 2 : 1;
  char *xb = malloc((size_t)(n * es)), *rr = malloc((size_t)(n * es));
  char *o0 = malloc((size_t)(m * k * es)), *o1 = malloc((size_t)(m * k * es)), *o2 = malloc((size_t)(n * es));
  char *u0 = malloc((size_t)(m * k * es)), *u1 = malloc((size_t)(m * k * es));
  fill(xb, dt, n);
  fill(o0, dt, m * k); fill(o1, dt, m * k);
  memcpy(u0, o0, (size_t)(m * k * es)); memcpy(u1, o1, (size_t)(m * k * es));
  tpu_host_scalar_t sc = {0.625, 3};
  { /* the reference r: the same graph's r output alone, fresh and contiguous */
    tpu_host_view_t p = {xb, dt, 3, {a, b, 3 * c}, {3 * b * c, 3 * c, 1}};
    tpu_host_view_t o[3] = {{o0, dt, 3, {b, a, c}, {a * c * k, c * k, k}}, {o1, dt, 3, {a, c, b}, {c * b * k, b * k, k}},
                            {rr, dt, 3, {a, b, 3 * c}, {3 * b * c, 3 * c, 1}}};
    o[2].data = o2;
    CHECK(run(e, &p, &sc, o, serial) == TPU_OK, "run view outputs");
    o[2].data = rr;
    memcpy(rr, o2, (size_t)(n * es));
  }
  int ok0 = 1, ok1 = 1, kept = 1;
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t l = 0; l < c; ++l) {
        const char* r1 = rr + ((i * b + j) * 3 * c + c + l) * es; /* r[i, j, c + l] */
        const char* r0 = rr + ((i * b + j) * 3 * c + l) * es;     /* r[i, j, l] */
        ok0 &= !memcmp(o0 + ((j * a + i) * c + l) * k * es, r1, (size_t)es);
        ok1 &= !memcmp(o1 + ((i * c + l) * b + j) * k * es, r0, (size_t)es);
      }
  for (int64_t i = 1; i < m * k && strided; i += 2)
    kept &= !memcmp(o0 + i * es, u0 + i * es, (size_t)es) && !memcmp(o1 + i * es, u1 + i * es, (size_t)es);
  /* r itself against x * s + x computed by a graph with r as its only output */
  tpu_ir_graph_t g2;
  tpu_ir_graph_init(&g2);
  int x2 = tpu_ir_param(&g2, dt, 3, d3), s2 = tpu_ir_scalar(&g2, dt);
  tpu_ir_output(&g2, tpu_ir_binary(&g2, TPU_IR_ADD, tpu_ir_binary(&g2, TPU_IR_MUL, x2, tpu_ir_broadcast(&g2, s2, 3, d3, NULL)), x2));
  tpu_host_exe_t* e2 = NULL;
  int ok2 = 0;
  if (tpu_host_compile(&g2, &e2) == TPU_OK) {
    char* w = malloc((size_t)(n * es));
    tpu_host_view_t p = {xb, dt, 3, {a, b, 3 * c}, {3 * b * c, 3 * c, 1}}, o = {w, dt, 3, {a, b, 3 * c}, {3 * b * c, 3 * c, 1}};
    ok2 = run(e2, &p, &sc, &o, serial) == TPU_OK && !memcmp(w, rr, (size_t)(n * es));
    free(w);
    tpu_host_exe_free(e2);
  }
  tpu_ir_graph_free(&g2);
  CHECK(ok0 && ok1 && ok2 && kept, "view outputs %s [%lld, %lld, %lld] strided %d serial %d: transposed slice %d, "
        "inner-strided %d, step %d, untouched %d", tpu_dtype_name(dt), (long long)a, (long long)b, (long long)(3 * c),
        strided, serial, ok0, ok1, ok2, kept);
  free(xb); free(rr); free(o0); free(o1); free(o2); free(u0); free(u1);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* In-place outputs over parameters that are pieces of one buffer (a flat parameter store), the pieces
 * laid out in memory in the reverse of their parameter order or in a random order: x_k = x_k * s + y_k
 * bound over x_k. mode 0: a parameter viewing the whole buffer is read (all * s, fresh memory) before
 * the updates; mode 1: after them (no update may then be written in place before that read: the
 * executor finds the parameters an output overlaps through ranges sorted by start with a running
 * maximum end, see prange_t in exec.c); mode 2: each piece also bound to a second parameter (its alias,
 * same range) read after the updates (every range the sort could lose changes a result). Results must
 * be those of the same graph writing fresh memory. */
static void test_flat_params(int K, int mode, int serial, int shuffled) {
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int64_t n[40], off[40], N = 0;
  int order[40]; /* memory order of the pieces */
  for (int k = 0; k < K; ++k) order[k] = K - 1 - k;
  for (int k = K - 1; k > 0 && shuffled; --k) { int j = (int)(rnd() % (uint64_t)(k + 1)), t = order[k]; order[k] = order[j]; order[j] = t; }
  for (int i = 0; i < K; ++i) { int k = order[i]; n[k] = 37 + 61 * k; off[k] = N; N += n[k]; }
  const int na = mode == 2 ? K : 1; /* the late/early readers: aliases, or the whole buffer */
  int s = tpu_ir_scalar(&g, TPU_DTYPE_F32), rd[40];
  for (int i = 0; i < na; ++i) rd[i] = mode == 2 ? tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n[i]) : tpu_ir_param(&g, TPU_DTYPE_F32, 1, &N);
  int rdout[40];
#define READER(i) tpu_ir_binary(&g, TPU_IR_MUL, rd[i], tpu_ir_broadcast(&g, s, 1, mode == 2 ? &n[i] : &N, NULL))
  if (mode == 0) rdout[0] = READER(0);
  for (int k = 0; k < K; ++k) {
    int x = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n[k]), y = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n[k]);
    tpu_ir_output(&g, tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_binary(&g, TPU_IR_MUL, x, tpu_ir_broadcast(&g, s, 1, &n[k], NULL)), y));
  }
  for (int i = 0; i < na && mode; ++i) rdout[i] = READER(i);
#undef READER
  for (int i = 0; i < na; ++i) tpu_ir_output(&g, rdout[i]);
  tpu_host_exe_t* e = NULL;
  tpu_status_t st = tpu_host_compile(&g, &e);
  CHECK(st == TPU_OK, "compile flat params");
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return; }
  float *B = malloc((size_t)N * 4), *B0 = malloc((size_t)N * 4), *Y = malloc((size_t)N * 4);
  float *F = malloc((size_t)N * 4), *A1 = malloc((size_t)N * 4), *A2 = malloc((size_t)N * 4);
  fill((char*)B, TPU_DTYPE_F32, N); fill((char*)Y, TPU_DTYPE_F32, N);
  memcpy(B0, B, (size_t)N * 4);
  tpu_host_view_t p[120], fo[80], io[80];
  for (int i = 0; i < na; ++i) {
    p[i] = mode == 2 ? (tpu_host_view_t){(char*)(B + off[i]), TPU_DTYPE_F32, 1, {n[i]}, {1}}
                     : (tpu_host_view_t){(char*)B, TPU_DTYPE_F32, 1, {N}, {1}};
    fo[K + i] = (tpu_host_view_t){(char*)(A1 + (mode == 2 ? off[i] : 0)), TPU_DTYPE_F32, 1, {p[i].sizes[0]}, {1}};
    io[K + i] = (tpu_host_view_t){(char*)(A2 + (mode == 2 ? off[i] : 0)), TPU_DTYPE_F32, 1, {p[i].sizes[0]}, {1}};
  }
  for (int k = 0; k < K; ++k) {
    p[na + 2 * k] = (tpu_host_view_t){(char*)(B + off[k]), TPU_DTYPE_F32, 1, {n[k]}, {1}};
    p[na + 2 * k + 1] = (tpu_host_view_t){(char*)(Y + off[k]), TPU_DTYPE_F32, 1, {n[k]}, {1}};
    fo[k] = (tpu_host_view_t){(char*)(F + off[k]), TPU_DTYPE_F32, 1, {n[k]}, {1}};
    io[k] = p[na + 2 * k];
  }
  tpu_host_scalar_t sc = {0.75, 0};
  CHECK(run(e, p, &sc, fo, serial) == TPU_OK, "flat params fresh run");
  CHECK(!memcmp(B, B0, (size_t)N * 4), "flat params: a fresh run wrote its parameters");
  CHECK(run(e, p, &sc, io, serial) == TPU_OK, "flat params in-place run");
  CHECK(!memcmp(B, F, (size_t)N * 4) && !memcmp(A1, A2, (size_t)N * 4),
        "flat params K=%d mode %d serial %d shuffled %d: in place differs from fresh (updates %d, reads %d)", K, mode,
        serial, shuffled, !memcmp(B, F, (size_t)N * 4), !memcmp(A1, A2, (size_t)N * 4));
  free(B); free(B0); free(Y); free(F); free(A1); free(A2);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* Reductions of a graph (sums over each dim of x * x, f32[a, b], and a full sum) give the same bits
 * serially, on the pool, and on the pool with finer chunks: a kernel's units never depend on chunking. */
static void test_reduce_chunking(int64_t a, int64_t b) {
  int64_t d[2] = {a, b}, r0[2] = {1, 0}, r1[2] = {0, 1}, r01[2] = {1, 1};
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, d), sq = tpu_ir_binary(&g, TPU_IR_MUL, x, x);
  tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_SUM, sq, r0));
  tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_SUM, tpu_ir_binary(&g, TPU_IR_ADD, x, x), r1));
  tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_SUM, tpu_ir_unary(&g, TPU_IR_EXP, x), r01));
  tpu_host_exe_t* e = NULL;
  tpu_status_t st = tpu_host_compile(&g, &e);
  CHECK(st == TPU_OK, "compile reductions");
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return; }
  float* xb = malloc((size_t)(a * b) * 4);
  fill((char*)xb, TPU_DTYPE_F32, a * b);
  float* out[3][3];
  for (int mode = 0; mode < 3; ++mode) {
    out[mode][0] = calloc((size_t)b, 4); out[mode][1] = calloc((size_t)a, 4); out[mode][2] = calloc(1, 4);
    tpu_host_view_t p = {(char*)xb, TPU_DTYPE_F32, 2, {a, b}, {b, 1}};
    tpu_host_view_t o[3] = {{(char*)out[mode][0], TPU_DTYPE_F32, 1, {b}, {1}},
                            {(char*)out[mode][1], TPU_DTYPE_F32, 1, {a}, {1}},
                            {(char*)out[mode][2], TPU_DTYPE_F32, 0, {0}, {0}}};
    CHECK(run(e, &p, NULL, o, mode) == TPU_OK, "reductions run mode %d", mode);
  }
  for (int mode = 1; mode < 3; ++mode) {
    CHECK(!memcmp(out[0][0], out[mode][0], (size_t)b * 4) && !memcmp(out[0][1], out[mode][1], (size_t)a * 4) &&
              !memcmp(out[0][2], out[mode][2], 4),
          "reductions %lldx%lld: mode %d differs from serial", (long long)a, (long long)b, mode);
  }
  for (int mode = 0; mode < 3; ++mode) for (int k = 0; k < 3; ++k) free(out[mode][k]);
  free(xb);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* Rank-0 clusters run by exec.c's scalar path (run_cluster_scalar) must give the bits of the same clusters on
 * shape [1] (the tiled runner): x, y of dtype dt, s a runtime scalar; floats: r = 1 / sqrt(|(x s + y) / y|),
 * outputs convert(r, f32) and r - x; integers: r = x s + y - x, outputs convert(r, f32) and -r. Inputs include
 * NaN, -0, +-inf, a subnormal and overflowing products; the second output is also written in place over x. */
static int build_scalar_graph(tpu_ir_graph_t* g, int dt, int rank) {
  const int64_t one = 1;
  int x = tpu_ir_param(g, dt, rank, &one), y = tpu_ir_param(g, dt, rank, &one), s = tpu_ir_scalar(g, dt);
  if (rank) s = tpu_ir_broadcast(g, s, 1, &one, NULL);
  int r = tpu_ir_binary(g, TPU_IR_ADD, tpu_ir_binary(g, TPU_IR_MUL, x, s), y);
  if (tpu_dtype_is_floating(dt)) {
    r = tpu_ir_binary(g, TPU_IR_DIV, r, y);
    r = tpu_ir_unary(g, TPU_IR_RECIPROCAL, tpu_ir_unary(g, TPU_IR_SQRT, tpu_ir_unary(g, TPU_IR_ABS, r)));
    tpu_ir_output(g, tpu_ir_convert(g, r, TPU_DTYPE_F32));
    tpu_ir_output(g, tpu_ir_binary(g, TPU_IR_SUB, r, x));
  } else {
    r = tpu_ir_binary(g, TPU_IR_SUB, r, x);
    tpu_ir_output(g, tpu_ir_convert(g, r, TPU_DTYPE_F32));
    tpu_ir_output(g, tpu_ir_unary(g, TPU_IR_NEG, r));
  }
  return g->status == TPU_OK;
}
static void test_scalar_clusters(int dt) {
  tpu_ir_graph_t g0, g1;
  tpu_ir_graph_init(&g0); tpu_ir_graph_init(&g1);
  tpu_host_exe_t *e0 = NULL, *e1 = NULL;
  int ok = build_scalar_graph(&g0, dt, 0) && build_scalar_graph(&g1, dt, 1);
  ok = ok && tpu_host_compile(&g0, &e0) == TPU_OK && tpu_host_compile(&g1, &e1) == TPU_OK;
  CHECK(ok, "scalar cluster graphs (%s) build and compile", tpu_dtype_name(dt));
  const double fv[] = {NAN, -0.0, INFINITY, -INFINITY, 1.5, -2.25, 3e38, 1e-40, 7.0};
  const int64_t iv[] = {0, -1, 3, 1000003, -77, INT64_MAX / 3, 2147483647};
  const int fl = tpu_dtype_is_floating(dt), nv = fl ? 9 : 7;
  const int64_t es = (int64_t)tpu_dtype_size(dt);
  int same = 1, inplace = 1;
  for (int a = 0; a < nv && ok; ++a)
    for (int b = 0; b < nv; ++b)
      for (int c = 0; c < nv; c += 2) {
        char x[8], y[8], x2[8], o0[2][8], o1[2][8];
        if (fl) { tpu_host_store_f64(x, dt, fv[a]); tpu_host_store_f64(y, dt, fv[b]); }
        else { tpu_host_store_i64(x, dt, iv[a]); tpu_host_store_i64(y, dt, iv[b]); }
        memcpy(x2, x, 8);
        tpu_host_scalar_t sc = {fl ? fv[c] : 0.0, fl ? 0 : iv[c]};
        tpu_host_view_t p0[2] = {{x, dt, 0, {0}, {0}}, {y, dt, 0, {0}, {0}}};
        tpu_host_view_t p1[2] = {{x, dt, 1, {1}, {1}}, {y, dt, 1, {1}, {1}}};
        tpu_host_view_t q0[2] = {{o0[0], TPU_DTYPE_F32, 0, {0}, {0}}, {o0[1], dt, 0, {0}, {0}}};
        tpu_host_view_t q1[2] = {{o1[0], TPU_DTYPE_F32, 1, {1}, {1}}, {o1[1], dt, 1, {1}, {1}}};
        ok = tpu_host_exe_run(e0, p0, &sc, q0) == TPU_OK && tpu_host_exe_run(e1, p1, &sc, q1) == TPU_OK;
        same &= ok && !memcmp(o0[0], o1[0], 4) && !memcmp(o0[1], o1[1], (size_t)es);
        tpu_host_view_t px[2] = {{x2, dt, 0, {0}, {0}}, {y, dt, 0, {0}, {0}}};
        tpu_host_view_t qx[2] = {{o1[0], TPU_DTYPE_F32, 0, {0}, {0}}, {x2, dt, 0, {0}, {0}}}; /* r - x over x */
        ok = ok && tpu_host_exe_run(e0, px, &sc, qx) == TPU_OK;
        inplace &= ok && !memcmp(x2, o0[1], (size_t)es);
      }
  CHECK(ok && same, "rank-0 clusters differ from the same clusters on [1]: %s", tpu_dtype_name(dt));
  CHECK(ok && inplace, "rank-0 cluster written in place differs: %s", tpu_dtype_name(dt));
  tpu_host_exe_free(e0); tpu_host_exe_free(e1);
  tpu_ir_graph_free(&g0); tpu_ir_graph_free(&g1);
}

/* Scalar batches (exec.c run_scalar_batches): K rank-0 clusters of a few structures, as a compiled optimizer's
 * step counts and bias corrections, must give the bits of the same graph on shape [1] (one step per cluster):
 * c = convert(s) (s an i64 runtime scalar), per k: t_k = p_k + c (an output, also written in place over p_k),
 * floats: b_k = 1 - beta ** t_k (beta a runtime scalar; some t_k are 2: x ** 2 is x * x only when every exponent of
 * a call is 2), o_k = convert(sqrt(|b_k|) / q_k, f32); integers: o_k = convert(t_k ** 3 - q_k, f32). K > 64: several
 * chunks per batch; p, q of dtype dt (bf16 / i32: leaves loaded through a conversion). */
static int build_batch_graph(tpu_ir_graph_t* g, int dt, int rank, int K) {
  const int64_t one = 1;
  const int fl = tpu_dtype_is_floating(dt);
  int c = tpu_ir_convert(g, tpu_ir_scalar(g, TPU_DTYPE_I64), dt);
  int beta = tpu_ir_scalar(g, dt), un = tpu_ir_constant(g, dt, fl ? 1.0 : 3.0);
  if (rank) {
    c = tpu_ir_broadcast(g, c, 1, &one, NULL); beta = tpu_ir_broadcast(g, beta, 1, &one, NULL);
    un = tpu_ir_broadcast(g, un, 1, &one, NULL);
  }
  for (int k = 0; k < K; ++k) {
    int p = tpu_ir_param(g, dt, rank, &one), q = tpu_ir_param(g, dt, rank, &one);
    int t = tpu_ir_binary(g, TPU_IR_ADD, p, c);
    tpu_ir_output(g, t);
    int o;
    if (fl) {
      int b = tpu_ir_binary(g, TPU_IR_SUB, un, tpu_ir_binary(g, TPU_IR_POW, beta, t));
      o = tpu_ir_binary(g, TPU_IR_DIV, tpu_ir_unary(g, TPU_IR_SQRT, tpu_ir_unary(g, TPU_IR_ABS, b)), q);
    } else {
      o = tpu_ir_binary(g, TPU_IR_SUB, tpu_ir_binary(g, TPU_IR_POW, t, un), q);
    }
    tpu_ir_output(g, tpu_ir_convert(g, o, TPU_DTYPE_F32));
  }
  return g->status == TPU_OK;
}
static void test_scalar_batches(int dt, int K) {
  tpu_ir_graph_t g0, g1;
  tpu_ir_graph_init(&g0); tpu_ir_graph_init(&g1);
  tpu_host_exe_t *e0 = NULL, *e1 = NULL;
  int ok = build_batch_graph(&g0, dt, 0, K) && build_batch_graph(&g1, dt, 1, K);
  ok = ok && tpu_host_compile(&g0, &e0) == TPU_OK && tpu_host_compile(&g1, &e1) == TPU_OK;
  CHECK(ok, "scalar batch graphs (%s, %d) build and compile", tpu_dtype_name(dt), K);
  const int fl = tpu_dtype_is_floating(dt);
  const int64_t es = (int64_t)tpu_dtype_size(dt);
  const double pv[] = {1.0, 1.0, 0.5, -0.0, NAN, INFINITY, -3.0, 1e-3, 7.25, 1.0};
  char *P = calloc((size_t)K, 16), *P2 = calloc((size_t)K, 16), *Q = calloc((size_t)K, 16);
  char *O0 = calloc((size_t)K, 16), *O1 = calloc((size_t)K, 16), *O2 = calloc((size_t)K, 16);
  tpu_host_view_t *p0 = calloc((size_t)K * 2, sizeof(tpu_host_view_t)), *p1 = calloc((size_t)K * 2, sizeof(tpu_host_view_t));
  tpu_host_view_t *q0 = calloc((size_t)K * 2, sizeof(tpu_host_view_t)), *q1 = calloc((size_t)K * 2, sizeof(tpu_host_view_t));
  tpu_host_view_t *px = calloc((size_t)K * 2, sizeof(tpu_host_view_t)), *qx = calloc((size_t)K * 2, sizeof(tpu_host_view_t));
  ok = ok && P && P2 && Q && O0 && O1 && O2 && p0 && p1 && q0 && q1 && px && qx;
  int same = 1, inplace = 1;
  for (int trial = 0; trial < 4 && ok; ++trial) {
    for (int k = 0; k < K; ++k) {
      double v = trial == 0 ? pv[k % 10] : (urand() - 0.3) * 5;
      if (trial == 3 && k % 3) v = 1.0; /* mostly exponent 2 */
      if (fl) { tpu_host_store_f64(P + k * es, dt, v); tpu_host_store_f64(Q + k * es, dt, urand() + 0.5); }
      else { tpu_host_store_i64(P + k * es, dt, (int64_t)(v * 9)); tpu_host_store_i64(Q + k * es, dt, (int64_t)(rnd() % 1000)); }
    }
    memcpy(P2, P, (size_t)(K * es));
    const double bv[] = {0.9, 0.999, 1.0 + 1.0 / 4096, -2.5};
    tpu_host_scalar_t sc[2] = {{1.0, 1}, {bv[trial], (int64_t)bv[trial]}};
    for (int k = 0; k < K; ++k) {
      for (int r = 0; r < 2; ++r) {
        tpu_host_view_t* a = r ? p1 : p0;
        a[2 * k] = (tpu_host_view_t){P + k * es, dt, r, {1}, {1}};
        a[2 * k + 1] = (tpu_host_view_t){Q + k * es, dt, r, {1}, {1}};
        tpu_host_view_t* o = r ? q1 : q0;
        char* ob = r ? O1 : O0;
        o[2 * k] = (tpu_host_view_t){ob + k * 16, dt, r, {1}, {1}};
        o[2 * k + 1] = (tpu_host_view_t){ob + k * 16 + 8, TPU_DTYPE_F32, r, {1}, {1}};
      }
      px[2 * k] = (tpu_host_view_t){P2 + k * es, dt, 0, {1}, {1}};
      px[2 * k + 1] = p0[2 * k + 1];
      qx[2 * k] = px[2 * k]; /* t_k over p_k */
      qx[2 * k + 1] = (tpu_host_view_t){O2 + k * 16 + 8, TPU_DTYPE_F32, 0, {1}, {1}};
    }
    ok = tpu_host_exe_run(e0, p0, sc, q0) == TPU_OK && tpu_host_exe_run(e1, p1, sc, q1) == TPU_OK &&
         tpu_host_exe_run(e0, px, sc, qx) == TPU_OK;
    for (int k = 0; k < K && ok; ++k) {
      same &= !memcmp(O0 + k * 16, O1 + k * 16, (size_t)es) && !memcmp(O0 + k * 16 + 8, O1 + k * 16 + 8, 4);
      inplace &= !memcmp(P2 + k * es, O0 + k * 16, (size_t)es) && !memcmp(O2 + k * 16 + 8, O0 + k * 16 + 8, 4);
    }
  }
  CHECK(ok && same, "batched rank-0 clusters differ from the same clusters on [1]: %s, K %d", tpu_dtype_name(dt), K);
  CHECK(ok && inplace, "batched rank-0 clusters written in place differ: %s, K %d", tpu_dtype_name(dt), K);
  free(P); free(P2); free(Q); free(O0); free(O1); free(O2); free(p0); free(p1); free(q0); free(q1); free(px); free(qx);
  tpu_host_exe_free(e0); tpu_host_exe_free(e1);
  tpu_ir_graph_free(&g0); tpu_ir_graph_free(&g1);
}

/* Elementwise custom calls (SILU, GELU, their gradients, LERP, ADDC) as cluster members and roots (exec.c's
 * custom_elementwise): every output must be bitwise the same as with each custom call a library step of its own
 * (tpu_host_set_custom_fusion(0), rows.c's kernels), with fewer steps. The graph (x, y, z [R, C] f32; s, v, w
 * rank-0 f32 runtime scalars): b = silu(x s); c = addcmul(b, y, z, v); e = gelu(c / 2) (an output and read
 * again); f = silu_bwd(e, x); l = lerp(f, y, w); l2 = lerp(l, z, y) (tensor weight); o = addcdiv(l2, x, |z| + 1, v);
 * r = sum over dim 1 of gelu_bwd(x, y) * 2 (a cluster evaluated inside its reduce); p = x @ W + bias -> gelu
 * (a GEMM epilogue). x may be a transposed view; o is also written in place over x. Inputs include NaN,
 * +-inf and -0. */
static int custom_op(tpu_ir_graph_t* g, int target, int64_t i1, int n, const int* in) {
  tpu_ir_op_t p;
  memset(&p, 0, sizeof p);
  p.opcode = TPU_IR_CUSTOM;
  p.type = g->ops[in[0]].type;
  p.i0 = target;
  p.i1 = i1;
  return tpu_ir_add_op(g, &p, n, in);
}
static void build_custom_graph(tpu_ir_graph_t* g, int64_t R, int64_t C) {
  const int64_t d[2] = {R, C}, wd[2] = {C, 5}, pd[2] = {R, 5};
  const int F = TPU_DTYPE_F32;
  int x = tpu_ir_param(g, F, 2, d), y = tpu_ir_param(g, F, 2, d), z = tpu_ir_param(g, F, 2, d);
  int W = tpu_ir_param(g, F, 2, wd), bias = tpu_ir_param(g, F, 1, &wd[1]);
  int s = tpu_ir_scalar(g, F), v = tpu_ir_scalar(g, F), w = tpu_ir_scalar(g, F);
  int b = custom_op(g, TPU_IR_CUSTOM_SILU, 0, 1, (int[]){tpu_ir_binary(g, TPU_IR_MUL, x, tpu_ir_broadcast(g, s, 2, d, NULL))});
  int c = custom_op(g, TPU_IR_CUSTOM_ADDC, 0, 4, (int[]){b, y, z, v});
  int half = tpu_ir_broadcast(g, tpu_ir_constant(g, F, 2.0), 2, d, NULL);
  int e = custom_op(g, TPU_IR_CUSTOM_GELU, 0, 1, (int[]){tpu_ir_binary(g, TPU_IR_DIV, c, half)});
  int f = custom_op(g, TPU_IR_CUSTOM_SILU_BWD, 0, 2, (int[]){e, x});
  int l = custom_op(g, TPU_IR_CUSTOM_LERP, 0, 3, (int[]){f, y, w});
  int l2 = custom_op(g, TPU_IR_CUSTOM_LERP, 0, 3, (int[]){l, z, y});
  int one = tpu_ir_broadcast(g, tpu_ir_constant(g, F, 1.0), 2, d, NULL);
  int den = tpu_ir_binary(g, TPU_IR_ADD, tpu_ir_unary(g, TPU_IR_ABS, z), one);
  int o = custom_op(g, TPU_IR_CUSTOM_ADDC, 1, 4, (int[]){l2, x, den, v});
  int gb = custom_op(g, TPU_IR_CUSTOM_GELU_BWD, 0, 2, (int[]){x, y});
  int r = tpu_ir_reduce(g, TPU_IR_MONOID_SUM, tpu_ir_binary(g, TPU_IR_MUL, gb, half), (const int64_t[]){0, 1});
  int pb = tpu_ir_broadcast(g, bias, 2, pd, (const int64_t[]){1});
  int pg = custom_op(g, TPU_IR_CUSTOM_GELU, 0, 1, (int[]){tpu_ir_binary(g, TPU_IR_ADD, tpu_ir_dot(g, x, W, 0, F), pb)});
  tpu_ir_output(g, o); tpu_ir_output(g, e); tpu_ir_output(g, r); tpu_ir_output(g, pg);
}
static void fill_special(float* p, int64_t n) {
  const float sp[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 30.0f, -30.0f, 1e-30f};
  for (int64_t i = 0; i < n; ++i) p[i] = (float)((urand() - 0.45) * 8);
  for (int64_t i = 0; i < n; i += 97) p[i] = sp[(i / 97) % 8];
}
static void test_custom_members(int64_t R, int64_t C, int transposed, int serial) {
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  build_custom_graph(&g, R, C);
  tpu_host_exe_t *ef = NULL, *eu = NULL;
  int old = tpu_host_set_custom_fusion(1);
  int ok = g.status == TPU_OK && tpu_host_compile(&g, &ef) == TPU_OK;
  tpu_host_set_custom_fusion(0);
  ok = ok && tpu_host_compile(&g, &eu) == TPU_OK;
  tpu_host_set_custom_fusion(old);
  CHECK(ok, "custom-member graph %lldx%lld builds and compiles", (long long)R, (long long)C);
  if (!ok) { tpu_host_exe_free(ef); tpu_host_exe_free(eu); tpu_ir_graph_free(&g); return; }
  CHECK(tpu_host_exe_num_steps(ef) + 6 <= tpu_host_exe_num_steps(eu), "custom calls fused: %d vs %d steps",
        tpu_host_exe_num_steps(ef), tpu_host_exe_num_steps(eu));
  const int64_t n = R * C, F = TPU_DTYPE_F32;
  float *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4), *W = malloc(C * 5 * 4), *bias = malloc(5 * 4);
  float *xi = malloc(n * 4), *out[2][4];
  fill_special(x, n); fill_special(y, n); fill_special(z, n);
  for (int64_t i = 0; i < C * 5; ++i) W[i] = (float)(urand() - 0.5);
  for (int i = 0; i < 5; ++i) bias[i] = (float)(urand() - 0.5);
  const int64_t osz[4] = {n, n, R, R * 5};
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 4; ++j) out[k][j] = malloc((size_t)osz[j] * 4);
  /* x transposed: stored [C, R], viewed [R, C] */
  tpu_host_view_t xv = {(char*)x, F, 2, {R, C}, {transposed ? 1 : C, transposed ? R : 1}};
  tpu_host_view_t p[5] = {xv, {(char*)y, F, 2, {R, C}, {C, 1}}, {(char*)z, F, 2, {R, C}, {C, 1}},
                          {(char*)W, F, 2, {C, 5}, {5, 1}}, {(char*)bias, F, 1, {5}, {1}}};
  tpu_host_scalar_t sc[3] = {{0.75, 0}, {-0.3, 0}, {0.6, 0}};
  int same = 1;
  for (int pass = 0; pass < 2 && ok; ++pass) { /* pass 1: w = 0.3 (lerp's other branch) */
    if (pass) sc[2].f = 0.3;
    for (int k = 0; k < 2 && ok; ++k) {
      tpu_host_view_t q[4] = {{(char*)out[k][0], F, 2, {R, C}, {C, 1}}, {(char*)out[k][1], F, 2, {R, C}, {C, 1}},
                              {(char*)out[k][2], F, 1, {R}, {1}}, {(char*)out[k][3], F, 2, {R, 5}, {5, 1}}};
      ok = run(k ? eu : ef, p, sc, q, serial) == TPU_OK;
    }
    for (int j = 0; j < 4 && ok; ++j) same &= !memcmp(out[0][j], out[1][j], (size_t)osz[j] * 4);
  }
  CHECK(ok && same, "custom members fused differ from library steps: %lldx%lld transposed %d serial %d", (long long)R,
        (long long)C, transposed, serial);
  /* in place: o over x's own view (fused plan) must equal the out-of-place result */
  memcpy(xi, x, (size_t)n * 4);
  tpu_host_view_t pi[5] = {p[0], p[1], p[2], p[3], p[4]};
  pi[0].data = (char*)xi;
  tpu_host_view_t qi[4] = {pi[0], {(char*)out[1][1], F, 2, {R, C}, {C, 1}}, {(char*)out[1][2], F, 1, {R}, {1}},
                           {(char*)out[1][3], F, 2, {R, 5}, {5, 1}}};
  ok = ok && run(ef, pi, sc, qi, serial) == TPU_OK;
  int inplace = ok;
  for (int64_t i = 0; i < R && inplace; ++i)
    for (int64_t j = 0; j < C && inplace; ++j)
      inplace = !memcmp(&xi[transposed ? j * R + i : i * C + j], &out[0][0][i * C + j], 4);
  CHECK(inplace, "custom cluster written in place over x differs: %lldx%lld transposed %d", (long long)R, (long long)C,
        transposed);
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 4; ++j) free(out[k][j]);
  free(x); free(y); free(z); free(W); free(bias); free(xi);
  tpu_host_exe_free(ef); tpu_host_exe_free(eu);
  tpu_ir_graph_free(&g);
}

/* A reduce over more than 4 MiB sums in slabs (tpu_host_reduce_plan): its elementwise producer fused into it
 * (evaluated slab by slab) and the same producer materialized first (a dangling reshape gives it a second reader)
 * must give the same bits, serially and on the pool, and both stay close to a double reference. x is read
 * transposed (stored [c, b, a]) or contiguous; p = x * x + x, summed (or maxed) over `red`. */
static void test_fused_reduce_slabs(int dt, int monoid, const int64_t* dims, const int64_t* red, int transposed,
                                    int expect_slabs) {
  int64_t n = dims[0] * dims[1] * dims[2], es = (int64_t)tpu_dtype_size(dt);
  tpu_host_exe_t* e[2] = {NULL, NULL};
  tpu_ir_graph_t g[2];
  int ok = 1, r = 0;
  for (int k = 0; k < 2; ++k) {
    tpu_ir_graph_init(&g[k]);
    int x = tpu_ir_param(&g[k], dt, 3, dims);
    int p = tpu_ir_binary(&g[k], TPU_IR_ADD, tpu_ir_binary(&g[k], TPU_IR_MUL, x, x), x);
    if (k) tpu_ir_reshape(&g[k], p, 1, &n); /* dangling: p materialized */
    int rk = tpu_ir_reduce(&g[k], monoid, p, red);
    if (!k) r = rk;
    tpu_ir_output(&g[k], rk);
    ok = ok && g[k].status == TPU_OK && tpu_host_compile(&g[k], &e[k]) == TPU_OK;
  }
  CHECK(ok, "slab reduce graphs compile");
  const tpu_ir_type_t* ot = &g[0].ops[r].type;
  int64_t on = tpu_ir_numel(ot);
  char* xb = malloc((size_t)(n * es));
  char* out[2][3];
  for (int k = 0; k < 2; ++k) for (int m = 0; m < 3; ++m) out[k][m] = calloc((size_t)on, 8);
  fill(xb, dt, n);
  tpu_host_view_t xv = {xb, dt, 3, {dims[0], dims[1], dims[2]},
                        {transposed ? 1 : dims[1] * dims[2], transposed ? dims[0] : dims[2],
                         transposed ? dims[0] * dims[1] : 1}};
  tpu_host_view_t ov = {NULL, ot->dtype, ot->rank, {0}, {0}};
  for (int d = ot->rank - 1, st = 1; d >= 0; --d) { ov.sizes[d] = ot->dims[d]; ov.strides[d] = st; st *= (int)ot->dims[d]; }
  tpu_host_view_t pv = {NULL, dt, 3, {dims[0], dims[1], dims[2]}, {dims[1] * dims[2], dims[2], 1}};
  tpu_ir_op_t rop = g[0].ops[r];
  tpu_host_reduce_plan_t plan;
  CHECK(tpu_host_reduce_plan(&rop, &pv, &ov, &plan) == expect_slabs, "slab plan %d expected for %lldx%lldx%lld",
        expect_slabs, (long long)dims[0], (long long)dims[1], (long long)dims[2]);
  for (int k = 0; k < 2 && ok; ++k)
    for (int m = 0; m < 3 && ok; ++m) {
      tpu_host_view_t o = ov;
      o.data = out[k][m];
      ok = run(e[k], &xv, NULL, &o, m) == TPU_OK;
    }
  int same = ok;
  for (int k = 0; k < 2; ++k) for (int m = 0; m < 3; ++m) same &= !memcmp(out[0][0], out[k][m], (size_t)(on * (int64_t)tpu_dtype_size(ot->dtype)));
  CHECK(same, "fused and materialized producers sum alike: dtype %s %lldx%lldx%lld red %lld%lld%lld transposed %d",
        tpu_dtype_name(dt), (long long)dims[0], (long long)dims[1], (long long)dims[2], (long long)red[0],
        (long long)red[1], (long long)red[2], transposed);
  /* a double reference over a few outputs (every output would be slow for 4M-element sums) */
  int close = ok;
  for (int64_t o = 0; o < on && close; o += TPU_MAX(1, on / 5)) {
    int64_t oi[3] = {0, 0, 0}, rem = o;
    for (int d = 2; d >= 0; --d) if (!red[d]) { oi[d] = rem % dims[d]; rem /= dims[d]; }
    double acc = monoid == TPU_IR_MONOID_MAX ? -INFINITY : 0, mag = 0;
    for (int64_t i = red[0] ? 0 : oi[0]; i < (red[0] ? dims[0] : oi[0] + 1); ++i)
      for (int64_t j = red[1] ? 0 : oi[1]; j < (red[1] ? dims[1] : oi[1] + 1); ++j)
        for (int64_t l = red[2] ? 0 : oi[2]; l < (red[2] ? dims[2] : oi[2] + 1); ++l) {
          int64_t xi = i * xv.strides[0] + j * xv.strides[1] + l * xv.strides[2];
          double v;
          if (dt == TPU_DTYPE_I64) { int64_t a = tpu_host_load_i64(xb + xi * es, dt); v = (double)(a * a + a); }
          else if (dt == TPU_DTYPE_F64) { double a = tpu_host_load_f64(xb + xi * es, dt); v = a * a + a; }
          else { float a = (float)tpu_host_load_f64(xb + xi * es, dt), q = a * a + a;
                 char t[8]; tpu_host_store_f64(t, dt, q); v = tpu_host_load_f64(t, dt); } /* rounded as the op */
          acc = monoid == TPU_IR_MONOID_MAX ? (v > acc ? v : acc) : acc + v;
          mag += fabs(v);
        }
    double got = dt == TPU_DTYPE_I64 ? (double)tpu_host_load_i64(out[0][0] + o * 8, ot->dtype)
                                     : tpu_host_load_f64(out[0][0] + o * (int64_t)tpu_dtype_size(ot->dtype), ot->dtype);
    double tol = dt == TPU_DTYPE_F64 ? 1e-13 * mag : dt == TPU_DTYPE_F32 ? 1e-7 * mag + 1e-7 * fabs(acc)
                 : dt == TPU_DTYPE_I64 ? 0 : 1e-2 * fabs(acc) + 1e-6 * mag;
    close = fabs(got - acc) <= tol;
    if (!close) printf("  output %lld: %.17g vs reference %.17g\n", (long long)o, got, acc);
  }
  CHECK(close, "slab reduce close to a double reference: dtype %s", tpu_dtype_name(dt));
  for (int k = 0; k < 2; ++k) { for (int m = 0; m < 3; ++m) free(out[k][m]); tpu_host_exe_free(e[k]); tpu_ir_graph_free(&g[k]); }
  free(xb);
}

/* Wakes the pool's workers and gives them time to start polling for work. */
static void pool_awake(void) {
  tpu_pool_wake();
  struct timespec ts = {0, 300000};
  nanosleep(&ts, NULL);
}

/* Step groups (exec.c plan_groups): A = exp(x) * y (output 1, fresh memory) and B = x * s + y (output 0, bound
 * in place over x) read none of each other's results, so they run side by side. B may then not write over x
 * while A still reads it (b_first: B before A, x's last reader is A; else A, the other reader of x, runs in B's
 * group). Results: bitwise those of fresh outputs, with groups on (pool, serial) and off. Grouped: 2K-64K
 * elements (below, two ~3 us steps gain less than a hand-off costs; from 64K = 2 chunks of the clusters' 32K grain
 * on, each step splits over the pool alone, a solo step: the same checks then run without a group). */
static void test_group_inplace(int64_t n, int b_first) {
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n), y = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n);
  int s = tpu_ir_scalar(&g, TPU_DTYPE_F32), a = -1, b = -1;
  for (int k = 0; k < 2; ++k) {
    if (k == (b_first ? 1 : 0)) a = tpu_ir_binary(&g, TPU_IR_MUL, tpu_ir_unary(&g, TPU_IR_EXP, x), y);
    else b = tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_binary(&g, TPU_IR_MUL, x, tpu_ir_broadcast(&g, s, 1, &n, NULL)), y);
  }
  tpu_ir_output(&g, b);
  tpu_ir_output(&g, a);
  tpu_host_exe_t* e = NULL;
  tpu_status_t st = tpu_host_compile(&g, &e);
  CHECK(st == TPU_OK, "compile group in place");
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return; }
  int32_t ng = 0;
  /* The plan is for this process's pool: with more than 2 threads a mid-size step may split over all of them
   * instead (the results below are checked anyway) */
  const int want = n >= 2000 && n < 65536, planned = tpu_pool_num_threads() <= 2;
  CHECK(!planned || (tpu_host_exe_num_groups(e, &ng) == want && ng == 2 * want), "group in place n=%lld: %d groups, %d steps",
        (long long)n, tpu_host_exe_num_groups(e, NULL), ng);
  float *X = malloc((size_t)n * 4), *X0 = malloc((size_t)n * 4), *Y = malloc((size_t)n * 4);
  float *RB = malloc((size_t)n * 4), *RA = malloc((size_t)n * 4), *A = malloc((size_t)n * 4);
  fill((char*)X0, TPU_DTYPE_F32, n); fill((char*)Y, TPU_DTYPE_F32, n);
  memcpy(X, X0, (size_t)n * 4);
  tpu_host_view_t p[2] = {{(char*)X, TPU_DTYPE_F32, 1, {n}, {1}}, {(char*)Y, TPU_DTYPE_F32, 1, {n}, {1}}};
  tpu_host_view_t fo[2] = {{(char*)RB, TPU_DTYPE_F32, 1, {n}, {1}}, {(char*)RA, TPU_DTYPE_F32, 1, {n}, {1}}};
  tpu_host_view_t io[2] = {p[0], {(char*)A, TPU_DTYPE_F32, 1, {n}, {1}}};
  tpu_host_scalar_t sc = {1.25, 0};
  CHECK(run(e, p, &sc, fo, 0) == TPU_OK, "group fresh run");
  for (int mode = 0; mode < 4; ++mode) { /* pool, serial, fine chunks, groups off */
    memcpy(X, X0, (size_t)n * 4);
    memset(A, 0, (size_t)n * 4);
    const int old = mode == 3 ? tpu_host_set_exec_groups(0) : -1;
    pool_awake(); /* groups run on awake workers only */
    CHECK(run(e, p, &sc, io, mode == 3 ? 0 : mode) == TPU_OK, "group in-place run");
    if (mode == 3) tpu_host_set_exec_groups(old);
    CHECK(!memcmp(X, RB, (size_t)n * 4) && !memcmp(A, RA, (size_t)n * 4),
          "group in place n=%lld b_first %d mode %d: differs from fresh (B %d, A %d)", (long long)n, b_first, mode,
          !memcmp(X, RB, (size_t)n * 4), !memcmp(A, RA, (size_t)n * 4));
  }
  free(X); free(X0); free(Y); free(RB); free(RA); free(A);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* A failing step in a group (index_select with an index out of range) returns its error; the other step's
 * status is dropped (ASan: nothing leaks); the executable stays usable. Serial (the group's steps inline,
 * costliest first: the index_select), the failure skips the group's later step (exp, after it in step order). */
static void test_group_error(void) {
  int64_t xd[2] = {600, 100}, nidx = 600, nx = 600 * 100, n = 50000; /* (exp below 64K elements: not solo) */
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, xd), idx = tpu_ir_param(&g, TPU_DTYPE_I64, 1, &nidx);
  int z = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n);
  tpu_ir_output(&g, tpu_ir_index_select(&g, x, idx, 0));
  tpu_ir_output(&g, tpu_ir_unary(&g, TPU_IR_EXP, z));
  tpu_host_exe_t* e = NULL;
  tpu_status_t st = tpu_host_compile(&g, &e);
  CHECK(st == TPU_OK, "compile group error");
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return; }
  CHECK(tpu_pool_num_threads() > 2 || tpu_host_exe_num_groups(e, NULL) == 1, "group error: %d groups",
        tpu_host_exe_num_groups(e, NULL));
  float *X = malloc((size_t)nx * 4), *Z = malloc((size_t)n * 4), *O1 = malloc((size_t)nx * 4), *O2 = malloc((size_t)n * 4);
  int64_t* I = malloc((size_t)nidx * 8);
  fill((char*)X, TPU_DTYPE_F32, nx); fill((char*)Z, TPU_DTYPE_F32, n);
  for (int64_t i = 0; i < nidx; ++i) I[i] = (i * 7) % 600;
  tpu_host_view_t p[3] = {{(char*)X, TPU_DTYPE_F32, 2, {600, 100}, {100, 1}}, {(char*)I, TPU_DTYPE_I64, 1, {nidx}, {1}},
                          {(char*)Z, TPU_DTYPE_F32, 1, {n}, {1}}};
  tpu_host_view_t o[2] = {{(char*)O1, TPU_DTYPE_F32, 2, {nidx, 100}, {100, 1}}, {(char*)O2, TPU_DTYPE_F32, 1, {n}, {1}}};
  for (int serial = 0; serial < 2; ++serial)
    for (int bad = 1; bad >= 0; --bad) {
      I[nidx / 2] = bad ? 600 : 3;
      memset(O2, 0xff, (size_t)n * 4); /* a NaN exp never writes */
      pool_awake();
      st = run(e, p, NULL, o, serial);
      CHECK(bad ? st != TPU_OK : st == TPU_OK, "group error: bad %d gave status %s", bad, st ? tpu_status_message(st) : "ok");
      tpu_status_free(st);
      int o2_left = 1; /* every element still the fill's bits */
      for (int64_t i = 0; i < n && o2_left; ++i) { uint32_t u; memcpy(&u, O2 + i, 4); o2_left = u == 0xffffffffu; }
      CHECK(bad ? !serial || o2_left : !o2_left, "group error: bad %d serial %d: exp's output %s", bad, serial,
            o2_left ? "not written" : "written");
    }
  CHECK(!memcmp(O1 + 100 * (nidx / 2), X + 300, 400), "group error: usable after a failure");
  free(X); free(Z); free(O1); free(O2); free(I);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* Solo steps (exec.c step_solo: never grouped) are the memory-bound steps that split over the pool on their own;
 * two independent steps the cost model would group (a 2-thread pool), with or without one:
 *   0: index_select of 100K rows (a single-threaded kernel: never solo) + exp of 60K elements   -> 1 group
 *   1: the same index_select + exp of 70K (2+ chunks of the clusters' 32K grain: solo)          -> no group
 *   2: a full sum over 100K elements (a reduce: never solo) + exp of 60K                        -> 1 group
 *   3: two full sums over 200K elements each (serial below 256K: never solo)                    -> 1 group
 * Results: bitwise the same with groups on (pool, serial) and off. */
static void test_group_solo(int c) {
  const int64_t nx = 1000, nidx = 100000, nz = c == 1 ? 70000 : 60000, rows = c == 3 ? 200 : 100, cols = 1000;
  const int64_t xd[2] = {nx, 1}, rd[2] = {rows, cols}, r1[2] = {0, 1};
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  const int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, xd), idx = tpu_ir_param(&g, TPU_DTYPE_I64, 1, &nidx);
  const int z = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &nz), r = tpu_ir_param(&g, TPU_DTYPE_F32, 2, rd);
  const int r2 = tpu_ir_param(&g, TPU_DTYPE_F32, 2, rd); /* (a second param: a reduce of a cluster would be fused) */
  if (c <= 1) tpu_ir_output(&g, tpu_ir_index_select(&g, x, idx, 0));
  else tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_SUM, r, r1));
  if (c <= 2) tpu_ir_output(&g, tpu_ir_unary(&g, TPU_IR_EXP, z));
  else tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_SUM, r2, r1));
  tpu_host_exe_t* e = NULL;
  tpu_status_t st = tpu_host_compile(&g, &e);
  CHECK(st == TPU_OK, "compile group solo %d", c);
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return; }
  int32_t ng = 0;
  const int want = c != 1, ngr = tpu_host_exe_num_groups(e, &ng); /* full sums: serial below 256K, never solo */
  CHECK(tpu_pool_num_threads() > 2 || (ngr == want && ng == 2 * want), "group solo case %d: %d groups (%d steps), want %d",
        c, ngr, ng, want);
  float *X = malloc((size_t)nx * 4), *Z = malloc((size_t)nz * 4), *R = malloc((size_t)(rows * cols) * 4);
  int64_t* I = malloc((size_t)nidx * 8);
  const int64_t n0 = c <= 1 ? nidx : rows, n1 = c <= 2 ? nz : rows;
  float *O[2][2];
  for (int k = 0; k < 2; ++k) { O[k][0] = malloc((size_t)n0 * 4); O[k][1] = malloc((size_t)n1 * 4); }
  fill((char*)X, TPU_DTYPE_F32, nx); fill((char*)Z, TPU_DTYPE_F32, nz); fill((char*)R, TPU_DTYPE_F32, rows * cols);
  for (int64_t i = 0; i < nidx; ++i) I[i] = (i * 7919) % nx;
  tpu_host_view_t p[5] = {{(char*)X, TPU_DTYPE_F32, 2, {nx, 1}, {1, 1}}, {(char*)I, TPU_DTYPE_I64, 1, {nidx}, {1}},
                          {(char*)Z, TPU_DTYPE_F32, 1, {nz}, {1}}, {(char*)R, TPU_DTYPE_F32, 2, {rows, cols}, {cols, 1}},
                          {(char*)R, TPU_DTYPE_F32, 2, {rows, cols}, {cols, 1}}};
  for (int mode = 0; mode < 3; ++mode) { /* groups off (the reference), pool, serial */
    const int k = mode ? 1 : 0;
    tpu_host_view_t o[2] = {c <= 1 ? (tpu_host_view_t){(char*)O[k][0], TPU_DTYPE_F32, 2, {nidx, 1}, {1, 1}}
                                   : (tpu_host_view_t){(char*)O[k][0], TPU_DTYPE_F32, 1, {rows}, {1}},
                            {(char*)O[k][1], TPU_DTYPE_F32, 1, {n1}, {1}}};
    memset(O[k][0], 0, (size_t)n0 * 4); memset(O[k][1], 0, (size_t)n1 * 4);
    const int old = mode == 0 ? tpu_host_set_exec_groups(0) : -1;
    pool_awake();
    CHECK(run(e, p, NULL, o, mode == 2) == TPU_OK, "group solo case %d run mode %d", c, mode);
    if (mode == 0) tpu_host_set_exec_groups(old);
    if (mode) CHECK(!memcmp(O[0][0], O[1][0], (size_t)n0 * 4) && !memcmp(O[0][1], O[1][1], (size_t)n1 * 4),
                    "group solo case %d mode %d: differs from groups off", c, mode);
  }
  CHECK(c > 1 || O[0][0][5] == X[(5 * 7919) % nx], "group solo case %d: index_select result", c);
  for (int k = 0; k < 2; ++k) { free(O[k][0]); free(O[k][1]); }
  free(X); free(Z); free(R); free(I);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

/* Short rows through transposed views (session 15, the cluster runner's odometer over outer dims and its inline f32
 * row gathers): a rotary embedding x cos + cat(-x[..., D/2:], x[..., :D/2]) sin over x [B*T, H*D] viewed (B, T, H, D)
 * and transposed to (B, H, T, D), times a row statistic r [B, T, H, 1] (a row-broadcast leaf, transposed too), plus
 * an f64 leaf (gathered by the tile kernel); odd sizes, serial / pool / finer pool chunks; bitwise vs naive loops. */
static void test_short_rows(int64_t B, int64_t T, int64_t H, int64_t D, int serial) {
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int64_t xd[2] = {B * T, H * D}, cd[2] = {T, D}, r4[4] = {B, T, H, D}, rr[4] = {B, T, H, 1}, perm[4] = {0, 2, 1, 3};
  int64_t o4[4] = {B, H, T, D}, one[4] = {1, 1, 1, 1}, z[4] = {0, 0, 0, 0}, hs[4] = {0, 0, 0, D / 2};
  int64_t lo_lim[4] = {B, T, H, D / 2}, bd[2] = {2, 3}, rb[4] = {0, 1, 2, 3};
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, xd), c = tpu_ir_param(&g, TPU_DTYPE_F32, 2, cd);
  int sn = tpu_ir_param(&g, TPU_DTYPE_F32, 2, cd), rs = tpu_ir_param(&g, TPU_DTYPE_F32, 4, rr);
  int y = tpu_ir_param(&g, TPU_DTYPE_F64, 4, r4);
  int xr = tpu_ir_reshape(&g, x, 4, r4);
  int ng = tpu_ir_unary(&g, TPU_IR_NEG, tpu_ir_transpose(&g, tpu_ir_slice(&g, xr, hs, r4, one), perm));
  int cat2[2] = {ng, tpu_ir_transpose(&g, tpu_ir_slice(&g, xr, z, lo_lim, one), perm)};
  int rot = tpu_ir_concat(&g, 2, cat2, 3);
  int a = tpu_ir_binary(&g, TPU_IR_MUL, tpu_ir_transpose(&g, xr, perm), tpu_ir_broadcast(&g, c, 4, o4, bd));
  int b = tpu_ir_binary(&g, TPU_IR_MUL, rot, tpu_ir_broadcast(&g, sn, 4, o4, bd));
  int64_t r4t[4] = {B, T, H, D};
  int rsb = tpu_ir_transpose(&g, tpu_ir_broadcast(&g, rs, 4, r4t, rb), perm);
  int yt = tpu_ir_convert(&g, tpu_ir_transpose(&g, y, perm), TPU_DTYPE_F32);
  int o = tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_binary(&g, TPU_IR_MUL, tpu_ir_binary(&g, TPU_IR_ADD, a, b), rsb), yt);
  tpu_ir_output(&g, o);
  tpu_host_exe_t* e = NULL;
  tpu_status_t s = tpu_host_compile(&g, &e);
  CHECK(s == TPU_OK, "short rows compile: %s", tpu_status_message(s));
  if (s) { tpu_status_free(s); tpu_ir_graph_free(&g); return; }
  const int64_t n = B * T * H * D;
  float *xb = malloc(4 * n), *cb = malloc(4 * T * D), *sb = malloc(4 * T * D), *rsv = malloc(4 * B * T * H);
  float *ob = malloc(4 * n);
  double* yb = malloc(8 * n);
  fill((char*)xb, TPU_DTYPE_F32, n); fill((char*)cb, TPU_DTYPE_F32, T * D); fill((char*)sb, TPU_DTYPE_F32, T * D);
  fill((char*)rsv, TPU_DTYPE_F32, B * T * H); fill((char*)yb, TPU_DTYPE_F64, n);
  tpu_host_view_t p[5], out;
  const int ids[5] = {x, c, sn, rs, y};
  char* bufs[5] = {(char*)xb, (char*)cb, (char*)sb, (char*)rsv, (char*)yb};
  for (int k = 0; k < 5; ++k) {
    const tpu_ir_type_t* t = &g.ops[ids[k]].type;
    memset(&p[k], 0, sizeof(p[k]));
    p[k].data = bufs[k]; p[k].dtype = t->dtype; p[k].rank = t->rank;
    for (int d = t->rank - 1, st = 1; d >= 0; --d) { p[k].sizes[d] = t->dims[d]; p[k].strides[d] = st; st *= (int)t->dims[d]; }
  }
  memset(&out, 0, sizeof(out));
  out.data = (char*)ob; out.dtype = TPU_DTYPE_F32; out.rank = 4;
  for (int d = 3, st = 1; d >= 0; --d) { out.sizes[d] = o4[d]; out.strides[d] = st; st *= (int)o4[d]; }
  s = run(e, p, NULL, &out, serial);
  CHECK(s == TPU_OK, "short rows run: %s", tpu_status_message(s));
  tpu_status_free(s);
  int64_t bad = 0;
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          const float* xrow = xb + (bb * T + t) * H * D + h * D;
          float xv = xrow[d], rv = d < D / 2 ? -xrow[d + D / 2] : xrow[d - D / 2];
          float m1 = xv * cb[t * D + d], m2 = rv * sb[t * D + d], ad = m1 + m2, mr = ad * rsv[(bb * T + t) * H + h];
          float ref = mr + (float)yb[((bb * T + t) * H + h) * D + d];
          float got = ob[((bb * H + h) * T + t) * D + d];
          bad += memcmp(&ref, &got, 4) != 0;
        }
  CHECK(bad == 0, "short rows B%lld T%lld H%lld D%lld serial %d: %lld of %lld differ", (long long)B, (long long)T,
        (long long)H, (long long)D, serial, (long long)bad, (long long)n);
  free(xb); free(cb); free(sb); free(rsv); free(ob); free(yb);
  tpu_host_exe_free(e);
  tpu_ir_graph_free(&g);
}

int main(void) {
  tpu_status_t st = tpu_rt_init();
  if (st) { printf("init: %s\n", tpu_status_message(st)); return 1; }
  const int dts[] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_I64, TPU_DTYPE_BF16};
  const int64_t ns[] = {1, 7, 512, 513, 4099, 100003};
  for (int serial = 0; serial < 3; ++serial)
    for (int d = 0; d < 4; ++d)
      for (int i = 0; i < 6; ++i) {
        test_inplace_chain(dts[d], ns[i], 1, serial);
        if (ns[i] > 1) test_inplace_chain(dts[d], ns[i], 3, serial);
      }
  const int sdts[] = {TPU_DTYPE_F32, TPU_DTYPE_F64, TPU_DTYPE_BF16, TPU_DTYPE_F16, TPU_DTYPE_I64, TPU_DTYPE_I32};
  for (int d = 0; d < 6; ++d) test_scalar_clusters(sdts[d]);
  for (int d = 0; d < 6; ++d) { test_scalar_batches(sdts[d], 3); test_scalar_batches(sdts[d], 150); }
  /* (rows of 300 / 700: one or several rows per tile of the tiled runner's 512 and 1024 elements) */
  const int64_t cshape[][2] = {{1, 1}, {7, 5}, {3, 513}, {9, 300}, {5, 700}, {37, 1001}, {1100, 1000}};
  for (int serial = 0; serial < 3; ++serial)
    for (int i = 0; i < 7; ++i)
      for (int t = 0; t < 2; ++t) test_custom_members(cshape[i][0], cshape[i][1], t, serial);
  for (int b_first = 0; b_first < 2; ++b_first) {
    test_group_inplace(1000, b_first);
    test_group_inplace(4099, b_first);
    test_group_inplace(50001, b_first);
    test_group_inplace(300001, b_first);
  }
  test_group_error();
  for (int c = 0; c < 4; ++c) test_group_solo(c);
  const int64_t srs[][4] = {{16, 8, 4, 8}, {3, 5, 3, 6}, {7, 9, 2, 16}, {2, 3, 5, 34}, {33, 17, 3, 4}};
  for (int serial = 0; serial < 3; ++serial)
    for (int i = 0; i < 5; ++i) test_short_rows(srs[i][0], srs[i][1], srs[i][2], srs[i][3], serial);
  test_foreach_like(6, 1000);
  test_foreach_like(12, 70001);
  test_reduce_chunking(37, 2053);
  test_reduce_chunking(3, 300001);
  test_reduce_chunking(4001, 17);
  {
    const int64_t F = TPU_DTYPE_F32, D = TPU_DTYPE_F64, I = TPU_DTYPE_I64, B = TPU_DTYPE_BF16, S = TPU_IR_MONOID_SUM;
    const int64_t d1[3] = {1, 600, 1031}, d2[3] = {3, 500, 1001}, d3[3] = {2100, 1, 1031}, d4[3] = {5, 7, 3};
    const struct { int64_t dt, m; const int64_t *dims; int64_t red[3]; int slabs; } C[] = {
      {D, S, d1, {0, 1, 0}, 1}, {D, S, d1, {0, 0, 1}, 1}, {D, S, d1, {1, 1, 1}, 1},      /* reduced / kept d0, all */
      {F, S, d2, {1, 0, 1}, 1}, {F, S, d2, {0, 1, 1}, 1}, {F, S, d2, {1, 1, 1}, 1},      /* 2 MB rows: 1-row slabs */
      {F, S, d2, {1, 0, 0}, 0},                                      /* partials as big as x: summed whole */
      {F, TPU_IR_MONOID_MAX, d2, {1, 1, 0}, 1}, {B, S, d3, {1, 0, 0}, 1}, {I, S, d1, {0, 1, 1}, 1},
      {F, S, d4, {1, 0, 1}, 0},                                      /* small: whole */
    };
    for (int i = 0; i < (int)TPU_ARRAY_LEN(C); ++i)
      for (int t = 0; t < 2; ++t) test_fused_reduce_slabs((int)C[i].dt, (int)C[i].m, C[i].dims, C[i].red, t, C[i].slabs);
  }
  for (int serial = 0; serial < 3; ++serial) {
    test_reshape_outputs(1, serial);
    test_reshape_outputs(333, serial);
    test_reshape_outputs(20011, serial);
  }
  for (int serial = 0; serial < 3; ++serial)
    for (int mode = 0; mode < 3; ++mode) {
      for (int shuffled = 0; shuffled < 2; ++shuffled) {
        test_flat_params(1, mode, serial, shuffled);
        test_flat_params(5, mode, serial, shuffled);
        test_flat_params(12, mode, serial, shuffled);
        test_flat_params(40, mode, serial, shuffled);
      }
    }
  const int64_t vs[][3] = {{1, 1, 1}, {2, 3, 1}, {16, 16, 8}, {5, 7, 3}, {3, 2, 17}, {64, 33, 9}, {40, 40, 40}};
  for (int serial = 0; serial < 2; ++serial)
    for (int d = 0; d < 4; ++d)
      for (int i = 0; i < 7; ++i)
        for (int strided = 0; strided < 2; ++strided)
          test_view_outputs(dts[d], vs[i][0], vs[i][1], vs[i][2], strided, serial);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
