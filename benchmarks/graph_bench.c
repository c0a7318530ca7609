/* graph_bench.c — a multi-op graph (what fused eager records) through the compiler and the
 * host driver: ops before/after the passes, run time per execution, and peak memory.
 *
 * The graph: x f32[n]; K steps of  a = tanh(v); v = a * a + v  (each a and v has two readers,
 * so each is a materialized temporary), plus per step the redundancy fused eager records:
 * a duplicate of the step's tanh, a re-broadcast scalar and a dead value.
 *
 * Build (from the repo root, after `make lib`):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -pthread -Icsrc/tpurt/include -Icsrc/tpurt \
 *       benchmarks/graph_bench.c build/tpurt/libtpurt.a -lm -o build/graph_bench
 * Run: build/graph_bench [n] [K] [runs] [nopass]   (defaults 4194304 12 20; "nopass" skips the
 * compiler passes). Peak memory is the process's max RSS (getrusage), so compare fresh processes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "compiler/compiler.h"
#include "runtime/runtime.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 4194304;
  int K = argc > 2 ? atoi(argv[2]) : 12, runs = argc > 3 ? atoi(argv[3]) : 20;
  int passes = !(argc > 4 && !strcmp(argv[4], "nopass"));
  tpu_ir_graph_t g;
  tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 1, &n);
  int s = tpu_ir_scalar(&g, TPU_DTYPE_F32);
  int v = x;
  for (int k = 0; k < K; ++k) {
    int a = tpu_ir_unary(&g, TPU_IR_TANH, v);
    int a2 = tpu_ir_unary(&g, TPU_IR_TANH, v); /* duplicate */
    int sb = tpu_ir_broadcast(&g, s, 1, &n, NULL);
    tpu_ir_unary(&g, TPU_IR_EXP, a2);          /* dead */
    int m = tpu_ir_binary(&g, TPU_IR_MUL, a, a2);
    v = tpu_ir_binary(&g, TPU_IR_ADD, tpu_ir_binary(&g, TPU_IR_MUL, m, sb), v);
  }
  tpu_ir_output(&g, v);
  if (g.status) { fprintf(stderr, "build: %s\n", tpu_status_message(g.status)); return 1; }
  int before = g.n_ops;
  tpu_compiler_stats_t st = {0};
  double t0 = now_s();
  if (passes) {
    tpu_status_t e = tpu_compiler_run_ex(&g, "bench", 0, &st);
    if (e) { fprintf(stderr, "passes: %s\n", tpu_status_message(e)); return 1; }
  }
  double tp = now_s() - t0;
  tpu_host_exe_t* exe = NULL;
  tpu_status_t e = tpu_host_compile(&g, &exe);
  if (e) { fprintf(stderr, "compile: %s\n", tpu_status_message(e)); return 1; }
  float* xb = malloc((size_t)n * 4);
  float* yb = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) xb[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
  tpu_host_view_t xv = {.data = (char*)xb, .dtype = TPU_DTYPE_F32, .rank = 1, .sizes = {n}, .strides = {1}};
  tpu_host_view_t yv = xv;
  yv.data = (char*)yb;
  tpu_host_scalar_t sc = {.f = 0.5, .i = 0};
  double best = 1e30, total = 0;
  for (int r = 0; r < runs; ++r) {
    double t1 = now_s();
    e = tpu_host_exe_run(exe, &xv, &sc, &yv);
    double dt = now_s() - t1;
    if (e) { fprintf(stderr, "run: %s\n", tpu_status_message(e)); return 1; }
    if (dt < best) best = dt;
    total += dt;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double checksum = 0;
  for (int64_t i = 0; i < n; i += 4099) checksum += yb[i];
  printf("n=%lld K=%d passes=%d: ops %d -> %d (passes %.3f ms), steps/run %d, run best %.2f ms mean %.2f ms, "
         "max RSS %.0f MiB (inputs+outputs %.0f MiB), checksum %.9g\n",
         (long long)n, K, passes, before, g.n_ops, tp * 1e3, tpu_host_exe_num_steps(exe), best * 1e3,
         total / runs * 1e3, ru.ru_maxrss / 1024.0, 2.0 * (double)n * 4 / 1048576.0, checksum);
  tpu_host_exe_free(exe);
  tpu_ir_graph_free(&g);
  free(xb); free(yb);
  return 0;
}
