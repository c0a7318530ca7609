/* test_exec_lowp.c — one-pass low-precision clusters (drivers/host/exec.c cluster_lowp, tile_impl.h lowp_run): every
 * cluster must give bit for bit what the tile path gives (tpu_host_set_lowp_clusters(0)): autocast's bf16 / f16 op
 * patterns (convert(leaf) -> f32 ops -> convert; the lone binary op also through cluster_bin_bf16 or the tile path), unary chains with ops of their own and ops run by the tile kernel,
 * GELU / SiLU custom members, mixed f32 and bf16 operands, f32 outputs, roundings inside the cluster, row / column
 * broadcast operands, runtime scalars (f64 and bf16), constants, select with a broadcast bool mask, compare, max / min
 * / clamp, in place (the output is a parameter's view), transposed operands, odd lengths (one element, tails of the
 * 16- and 32-lane loops, several blocks and tiles); a hand-written program through each AVX-512 build (check_builds). Inputs hold every value class: NaN (quiet and signaling,
 * payloads), infinities, zeros, subnormals, the largest finite, ordinary values (NaN results: see is_nan).
 * `test_exec_lowp bench`: one-thread CPU time of a few patterns, lowp against the tile path, alternating.
 * Legend: D the low-precision dtype (bf16 / f16); x, y [R, C] parameters of D; z [R, C] f32; s a runtime scalar. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "drivers/host/host.h"
#include "runtime/runtime.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }

/* one 16-bit value of dtype dt: 1 in 4 a special class */
static uint16_t rnd16(int dt) {
  const int bf = dt == TPU_DTYPE_BF16;
  const uint16_t sign = (uint16_t)(rnd() & 1) << 15;
  switch (rnd() % 32) {
    case 0: return sign | (bf ? 0x7fc0 : 0x7e00) | (uint16_t)(rnd() % (bf ? 0x40 : 0x200)); /* quiet NaN */
    case 1: return sign | (bf ? 0x7f80 : 0x7c00) | (uint16_t)(1 + rnd() % (bf ? 0x3f : 0x1ff)); /* signaling */
    case 2: return sign | (bf ? 0x7f80 : 0x7c00); /* inf */
    case 3: return sign; /* zero */
    case 4: return sign | (uint16_t)(1 + rnd() % (bf ? 0x7f : 0x3ff)); /* subnormal */
    case 5: return sign | (bf ? 0x7f7f : 0x7bff); /* largest */
    case 6: case 7: return (uint16_t)rnd(); /* any bits */
    default: { /* ordinary values near 1 */
      float f = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 8.0 - 4.0);
      return bf ? tpu_f32_to_bf16(f) : tpu_f32_to_f16(f);
    }
  }
}
static void fill(char* p, int dt, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16) { uint16_t h = rnd16(dt); memcpy(p + 2 * i, &h, 2); }
    else if (dt == TPU_DTYPE_F32) { /* a widened bf16 or f16 value, or ordinary f32 */
      uint16_t h = rnd16(rnd() & 1 ? TPU_DTYPE_BF16 : TPU_DTYPE_F16);
      float f = rnd() % 3 ? (float)((double)(rnd() >> 11) / 9007199254740992.0 * 6.0 - 3.0)
                          : (rnd() & 1 ? tpu_bf16_to_f32(h) : tpu_f16_to_f32(h));
      memcpy(p + 4 * i, &f, 4);
    } else if (dt == TPU_DTYPE_BOOL) p[i] = (char)(rnd() % 3 == 0);
    else tpu_host_store_f64(p + i * (int64_t)tpu_dtype_size(dt), dt, (double)(rnd() % 7) - 3.0);
  }
}

static int cvt(tpu_ir_graph_t* g, int x, int dt) { return tpu_ir_convert(g, x, dt); }
static int bin(tpu_ir_graph_t* g, int op, int x, int y) { return tpu_ir_binary(g, op, x, y); }
static int un(tpu_ir_graph_t* g, int op, int x) { return tpu_ir_unary(g, op, x); }
static int custom(tpu_ir_graph_t* g, int target, int n, const int* in) {
  tpu_ir_op_t p;
  memset(&p, 0, sizeof p);
  p.opcode = TPU_IR_CUSTOM;
  p.type = g->ops[in[0]].type;
  p.i0 = target;
  return tpu_ir_add_op(g, &p, n, in);
}

enum { F = TPU_DTYPE_F32 };
#define NPAT 16
static const char* g_pat_name[NPAT] = {"x*y", "x+1-s", "unary chain", "kernel ops", "gelu/silu", "gelu_bwd",
                                       "(z+x)*x (f32 out)", "z*x-x -> D", "(x+row)*y", "col*x+x", "masked_fill",
                                       "where(x>y)", "max/min/clamp", "double rounding", "x/y+y in place", "x.t()*y-y"};
/* Builds pattern p over [R, C] with low-precision dtype D; returns the output value. */
static int build(tpu_ir_graph_t* g, int p, int D, int64_t R, int64_t C) {
  const int64_t d[2] = {R, C}, row[1] = {C}, col[1] = {R}, cc[2] = {C, C};
  const int64_t bd0[1] = {0}, bd1[1] = {1};
  int x = tpu_ir_param(g, D, 2, d), y = tpu_ir_param(g, D, 2, d);
  int fx = cvt(g, x, F), fy = cvt(g, y, F);
  switch (p) {
    case 0: return cvt(g, bin(g, TPU_IR_MUL, fx, fy), D);
    case 1: { /* (x + 1) - s, s an f64 runtime scalar */
      int s = cvt(g, tpu_ir_broadcast(g, tpu_ir_scalar(g, TPU_DTYPE_F64), 2, d, NULL), F);
      int one = tpu_ir_broadcast(g, tpu_ir_constant(g, F, 1.0), 2, d, NULL);
      return cvt(g, bin(g, TPU_IR_SUB, bin(g, TPU_IR_ADD, fx, one), s), D);
    }
    case 2: { /* rsqrt(|-x| * y) + 1 / sqrt(y) */
      int a = un(g, TPU_IR_RSQRT, bin(g, TPU_IR_MUL, un(g, TPU_IR_ABS, un(g, TPU_IR_NEG, fx)), fy));
      return cvt(g, bin(g, TPU_IR_ADD, a, un(g, TPU_IR_RECIPROCAL, un(g, TPU_IR_SQRT, fy))), D);
    }
    case 3: return cvt(g, bin(g, TPU_IR_MUL, un(g, TPU_IR_TANH, fx), un(g, TPU_IR_EXP, un(g, TPU_IR_LOGISTIC, fy))), D);
    case 4: return cvt(g, bin(g, TPU_IR_ADD, custom(g, TPU_IR_CUSTOM_GELU, 1, &fx), custom(g, TPU_IR_CUSTOM_SILU, 1, &fy)), D);
    case 5: return cvt(g, custom(g, TPU_IR_CUSTOM_GELU_BWD, 2, (int[]){fy, fx}), D);
    case 6: return bin(g, TPU_IR_MUL, bin(g, TPU_IR_ADD, tpu_ir_param(g, F, 2, d), fx), fx);
    case 7: return cvt(g, bin(g, TPU_IR_SUB, bin(g, TPU_IR_MUL, tpu_ir_param(g, F, 2, d), fx), fx), D);
    case 8: return cvt(g, bin(g, TPU_IR_MUL, bin(g, TPU_IR_ADD, fx, cvt(g, tpu_ir_broadcast(g, tpu_ir_param(g, D, 1, row), 2, d, bd1), F)), fy), D);
    case 9: return cvt(g, bin(g, TPU_IR_ADD, bin(g, TPU_IR_MUL, cvt(g, tpu_ir_broadcast(g, tpu_ir_param(g, D, 1, col), 2, d, bd0), F), fx), fx), D);
    case 10: { /* x.masked_fill(~mask, -inf) in D, mask [C, C] broadcast over rows of C when R = k C */
      const int64_t d3[3] = {R / C, C, C}, b12[2] = {1, 2};
      int m = un(g, TPU_IR_NOT, tpu_ir_broadcast(g, tpu_ir_param(g, TPU_DTYPE_BOOL, 2, cc), 3, d3, b12));
      int x3 = tpu_ir_reshape(g, x, 3, d3);
      return tpu_ir_select(g, m, tpu_ir_broadcast(g, tpu_ir_constant(g, D, -INFINITY), 3, d3, NULL), x3);
    }
    case 11: return cvt(g, tpu_ir_select(g, tpu_ir_compare(g, TPU_IR_CMP_GT, fx, fy), fx,
                                         bin(g, TPU_IR_MUL, fy, tpu_ir_broadcast(g, tpu_ir_constant(g, F, 2.0), 2, d, NULL))), D);
    case 12: {
      int lo = tpu_ir_broadcast(g, tpu_ir_constant(g, F, -1.5), 2, d, NULL);
      int hi = cvt(g, tpu_ir_broadcast(g, tpu_ir_scalar(g, D), 2, d, NULL), F);
      return cvt(g, tpu_ir_clamp(g, lo, bin(g, TPU_IR_MAX, fx, un(g, TPU_IR_NEG, fy)), bin(g, TPU_IR_MIN, hi, fy)), D);
    }
    case 13: { /* (x * y rounded to D) * z -> D, and its f32 copy compared NE against z */
      int r = cvt(g, cvt(g, bin(g, TPU_IR_MUL, fx, fy), D), F), z = tpu_ir_param(g, F, 2, d);
      int w = tpu_ir_select(g, tpu_ir_compare(g, TPU_IR_CMP_NE, r, z), bin(g, TPU_IR_MUL, r, z), fx);
      return cvt(g, w, D);
    }
    case 14: return cvt(g, bin(g, TPU_IR_ADD, bin(g, TPU_IR_DIV, fx, fy), fy), D);
    default: return cvt(g, bin(g, TPU_IR_SUB, bin(g, TPU_IR_MUL, fx, fy), fy), D); /* x passed transposed */
  }
}

typedef struct { tpu_host_exe_t* e; int np; tpu_host_view_t p[8]; char* buf[8]; tpu_host_view_t out; char* obuf; } inst_t;
static int inst_make(inst_t* I, int pat, int D, int64_t R, int64_t C) {
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int o = build(&g, pat, D, R, C);
  tpu_ir_output(&g, o);
  memset(I, 0, sizeof *I);
  tpu_status_t st = tpu_host_compile(&g, &I->e);
  CHECK(st == TPU_OK, "compile %s: %s", g_pat_name[pat], st ? tpu_status_message(st) : "");
  if (st) { tpu_status_free(st); tpu_ir_graph_free(&g); return 0; }
  for (int v = 0; v < g.n_ops; ++v) {
    const tpu_ir_op_t* op = &g.ops[v];
    if (op->opcode != TPU_IR_PARAM) continue;
    int k = (int)op->i0;
    tpu_host_view_t* P = &I->p[k];
    P->dtype = op->type.dtype;
    P->rank = op->type.rank;
    int64_t n = 1;
    for (int a = P->rank - 1; a >= 0; --a) { P->sizes[a] = op->type.dims[a]; P->strides[a] = n; n *= P->sizes[a]; }
    I->buf[k] = malloc((size_t)(n * (int64_t)tpu_dtype_size(P->dtype)) + 64);
    P->data = I->buf[k] + (int64_t)tpu_dtype_size(P->dtype) * (int64_t)(rnd() % 8); /* starts not 64-byte aligned */
    fill(P->data, P->dtype, n);
    if (k + 1 > I->np) I->np = k + 1;
  }
  if (pat == 15) { I->p[0].strides[0] = 1; I->p[0].strides[1] = R; } /* x read transposed (same buffer) */
  const tpu_ir_type_t* t = &g.ops[o].type;
  I->out.dtype = t->dtype;
  I->out.rank = t->rank;
  int64_t n = 1;
  for (int a = t->rank - 1; a >= 0; --a) { I->out.sizes[a] = t->dims[a]; I->out.strides[a] = n; n *= t->dims[a]; }
  I->obuf = malloc((size_t)(n * (int64_t)tpu_dtype_size(t->dtype)) + 64);
  I->out.data = I->obuf + tpu_dtype_size(t->dtype);
  tpu_ir_graph_free(&g);
  return 1;
}
static void inst_free(inst_t* I) {
  for (int k = 0; k < 8; ++k) free(I->buf[k]);
  free(I->obuf);
  tpu_host_exe_free(I->e);
}
/* NaN results compare as NaN: which payload (two NaN operands) or sign (a NaN through tanh / exp) the tile path gives
 * depends on whether the element falls in its loops' vector body or scalar remainder, i.e. on the tile boundaries
 * (seen here: the same tile kernel over the same inputs with another n); every other value compares bit for bit. */
static int is_nan(const char* p, int dt) {
  uint16_t h;
  uint32_t u;
  switch (dt) {
    case TPU_DTYPE_BF16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80;
    case TPU_DTYPE_F16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00;
    case TPU_DTYPE_F32: memcpy(&u, p, 4); return (u & 0x7fffffffu) > 0x7f800000u;
    default: return 0;
  }
}
static void check_one(int pat, int D, int64_t R, int64_t C, int in_place) {
  inst_t I;
  if (!inst_make(&I, pat, D, R, C)) return;
  tpu_host_scalar_t sc[2] = {{-0.3, 0}, {2.25, 0}};
  int64_t n = R * C, es = (int64_t)tpu_dtype_size(I.out.dtype);
  char *ref = malloc((size_t)(n * es)), *x0 = malloc((size_t)(n * es));
  const int ip = in_place && I.p[0].dtype == I.out.dtype && pat != 15 && pat != 10;
  if (ip) memcpy(x0, I.p[0].data, (size_t)(n * es));
  int old = tpu_host_set_lowp_clusters(0);
  tpu_status_t st = tpu_host_exe_run(I.e, I.p, sc, &I.out);
  CHECK(st == TPU_OK, "tile run %s", g_pat_name[pat]);
  memcpy(ref, I.out.data, (size_t)(n * es));
  tpu_host_set_lowp_clusters(1);
  memset(I.out.data, 0x5a, (size_t)(n * es));
  st = tpu_host_exe_run(I.e, I.p, sc, ip ? &I.p[0] : &I.out);
  CHECK(st == TPU_OK, "lowp run %s", g_pat_name[pat]);
  const char* got = ip ? I.p[0].data : I.out.data;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (memcmp(got + i * es, ref + i * es, (size_t)es) && !(is_nan(got + i * es, I.out.dtype) && is_nan(ref + i * es, I.out.dtype))) {
      if (first < 0) first = i;
      bad++;
    }
  CHECK(!bad, "%s %s [%lld, %lld]%s: %lld of %lld differ (first %lld)", g_pat_name[pat], tpu_dtype_name(D),
        (long long)R, (long long)C, ip ? " in place" : "", (long long)bad, (long long)n, (long long)first);
  tpu_host_set_lowp_clusters(old);
  free(ref); free(x0);
  inst_free(&I);
}

/* The same hand-written program through every ISA build that has lowp_run and this CPU can run (the AVX-512F build's
 * integer bf16 rounding against the AVX512-BF16 build's vcvtne2ps2bf16): bit for bit, NaN results included (every
 * lane takes the same vector instructions). r0 = x, r1 = y (D), r2 = z (f32), r3 = x * y rounded to D, r4 = r3 + z,
 * r5 = max(r4, -x), stored as D. */
static void check_builds(int D) {
  const tpu_host_tile_ops_t* B[2] = {NULL, NULL};
  if (tpu_cpu_has_avx512f()) B[0] = &tpu_host_tile_ops_avx512;
  if (tpu_cpu_has_avx512bf16()) B[1] = &tpu_host_tile_ops_avx512bf16;
  if (!B[0] || !B[1]) return;
  tpu_host_lowp_t P;
  memset(&P, 0, sizeof P);
  const tpu_host_lowp_ins_t ins[] = {
    {.kind = TPU_LOWP_LOAD, .d = 0, .a = 0, .dt = (uint8_t)D}, {.kind = TPU_LOWP_LOAD, .d = 1, .a = 1, .dt = (uint8_t)D},
    {.kind = TPU_LOWP_LOAD, .d = 2, .a = 2, .dt = F}, {.kind = TPU_LOWP_MUL, .d = 3, .a = 0, .b = 1},
    {.kind = TPU_LOWP_ROUND, .d = 3, .a = 3, .dt = (uint8_t)D}, {.kind = TPU_LOWP_ADD, .d = 4, .a = 3, .b = 2},
    {.kind = TPU_LOWP_NEG, .d = 6, .a = 0}, {.kind = TPU_LOWP_MAX, .d = 5, .a = 4, .b = 6}};
  P.n_ins = (int)(sizeof ins / sizeof ins[0]);
  memcpy(P.ins, ins, sizeof ins);
  P.out_reg = 5;
  P.out_dtype = D;
  P.blk = 128;
  const int64_t N = 1000;
  uint16_t *x = malloc(N * 2), *y = malloc(N * 2), *o[2] = {malloc(N * 2), malloc(N * 2)};
  float* z = malloc(N * 4);
  fill((char*)x, D, N); fill((char*)y, D, N); fill((char*)z, F, N);
  const int64_t ns[] = {1, 15, 16, 17, 31, 33, 127, 128, 129, 1000};
  for (size_t q = 0; q < sizeof ns / sizeof ns[0]; ++q) {
    for (int b = 0; b < 2; ++b) {
      tpu_host_lowp_io_t io = {.leaf = {x, y, z}, .out = o[b]};
      memset(o[b], 0, N * 2);
      CHECK(B[b]->lowp_run(&P, &io, ns[q]) == 0, "lowp_run build %d", b);
    }
    CHECK(!memcmp(o[0], o[1], (size_t)ns[q] * 2), "lowp_run %s n=%lld: AVX-512F and AVX512-BF16 builds differ",
          tpu_dtype_name(D), (long long)ns[q]);
  }
  free(x); free(y); free(z); free(o[0]); free(o[1]);
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void bench(void) {
  const int64_t R = 2048, C = 256; /* 524K elements: [32, 4, 64, 64] */
  const int pats[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 14};
  for (int D = TPU_DTYPE_BF16; ; D = TPU_DTYPE_F16) {
    for (size_t q = 0; q < sizeof pats / sizeof pats[0]; ++q) {
      inst_t I;
      if (!inst_make(&I, pats[q], D, R, C)) return;
      tpu_host_scalar_t sc[2] = {{-0.3, 0}, {2.25, 0}};
      double best[2] = {1e9, 1e9};
      for (int round = 0; round < 7; ++round)
        for (int on = 0; on < 2; ++on) {
          int old = tpu_host_set_lowp_clusters(on);
          double t0 = cpu_now();
          for (int it = 0; it < 20; ++it) tpu_status_free(tpu_host_exe_run(I.e, I.p, sc, &I.out));
          double t = (cpu_now() - t0) / 20;
          tpu_host_set_lowp_clusters(old);
          if (t < best[on]) best[on] = t;
        }
      printf("  %-16s %s  tile %7.1f us  lowp %7.1f us  (%.2fx)\n", g_pat_name[pats[q]], tpu_dtype_name(D),
             best[0] * 1e6, best[1] * 1e6, best[0] / best[1]);
      inst_free(&I);
    }
    if (D == TPU_DTYPE_F16) break;
  }
}

int main(int argc, char** argv) {
  tpu_status_t st = tpu_rt_init();
  if (st) { printf("init: %s\n", tpu_status_message(st)); return 1; }
  if (argc > 1 && !strcmp(argv[1], "bench")) { bench(); return 0; }
  if (!tpu_host_tile_ops()->lowp_run) printf("  (no AVX-512: lowp programs off, both runs take the tile path)\n");
  const int64_t shapes[][2] = {{1, 1}, {3, 5}, {4, 4}, {2, 17}, {8, 33}, {16, 64}, {33, 127}, {64, 96}, {96, 512}, {256, 257}, {1024, 136}};
  check_builds(TPU_DTYPE_BF16);
  check_builds(TPU_DTYPE_F16);
  for (int D = TPU_DTYPE_BF16; ; D = TPU_DTYPE_F16) {
    for (int pat = 0; pat < NPAT; ++pat)
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
        int64_t R = shapes[s][0], C = shapes[s][1];
        if (pat == 10) R = C * (1 + (int64_t)(s % 3)); /* rows of C x C blocks */
        check_one(pat, D, R, C, 0);
        check_one(pat, D, R, C, 1);
      }
    if (D == TPU_DTYPE_F16) break;
  }
  printf("test_exec_lowp: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
