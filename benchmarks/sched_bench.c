/* sched_bench.c — the step scheduler (drivers/host/exec_sched.c) A/B in one process: each compiled graph found in a
 * disk-cache directory is planned twice, in its stored order (TORCH_TPU_EXEC_SCHED off) and in the scheduler's,
 * and the two executables run alternately on the same random inputs (fresh outputs), with the traced one also run
 * with step groups off, so a slow spell of a shared machine hits all alike. Prints per graph: steps, groups (grouped
 * steps) each way, median wall us each way and the medians of the per-round ratios traced / scheduled (> 1: the
 * scheduler's order is faster) and groups off / traced (what step groups themselves gain), and both compile times.
 *
 * Make the graphs in traced order first (the cache stores the order a graph was planned in):
 *   TORCH_TPU_EXEC_SCHED=0 TORCH_TPU_CACHE_DIR=/tmp/g python benchmarks/bench_compile.py --only unet --repeat 3 ...
 * Build (after `make lib`):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -pthread -Icsrc/tpurt/include -Icsrc/tpurt benchmarks/sched_bench.c \
 *       build/tpurt/libtpurt.a -lm -o build/sched_bench
 * Run: TORCH_TPU_NUM_THREADS=2 build/sched_bench /tmp/g [runs] [min_steps]   (defaults 200, 30) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/disk_cache.h"
#include "cache/graph_codec.h"
#include "drivers/host/exec_sched.h"
#include "drivers/host/host.h"
#include "runtime/runtime.h"
#include "tpurt.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}
static int cmp_d(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y); }
static double median(double* v, int n) { qsort(v, (size_t)n, sizeof(double), cmp_d); return n ? v[n / 2] : 0; }

static char* view_alloc(tpu_host_view_t* v, const tpu_ir_type_t* t, int random) {
  const size_t es = tpu_dtype_size(t->dtype), n = (size_t)tpu_ir_numel(t);
  char* p = aligned_alloc(64, ((n * es + 63) / 64 + 1) * 64);
  if (!p) return NULL;
  memset(p, 0, n * es);
  if (random && t->dtype == TPU_DTYPE_F32)
    for (size_t i = 0; i < n; ++i) ((float*)(void*)p)[i] = (float)((double)rand() / RAND_MAX - 0.5) * 0.1f;
  v->data = p; v->dtype = t->dtype; v->rank = t->rank;
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; --d) { v->sizes[d] = t->dims[d]; v->strides[d] = s; s *= t->dims[d]; }
  return p;
}

static void bench_file(const char* path, int runs, int min_steps) {
  FILE* f = fopen(path, "rb");
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t* buf = malloc((size_t)len);
  if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) { fclose(f); free(buf); return; }
  fclose(f);
  tpu_disk_file_header_t h;
  if ((size_t)len < sizeof h) { free(buf); return; }
  memcpy(&h, buf, sizeof h);
  if (memcmp(h.magic, "TPUCACHE", 8) || h.ns_len != 5 || memcmp(buf + sizeof h, "graph", 5)) { free(buf); return; }
  tpu_graph_payload_t p;
  tpu_status_t st = tpu_graph_payload_decode(buf + sizeof h + h.ns_len + h.key_len, (size_t)h.payload_len, &p);
  free(buf);
  if (st) { tpu_status_free(st); tpu_graph_payload_free(&p); return; }
  tpu_host_exe_t *et = NULL, *es = NULL;
  const int old = tpu_host_set_exec_sched(0);
  const double c0 = now_us();
  st = tpu_host_compile(&p.g, &et);
  const double c1 = now_us();
  tpu_host_set_exec_sched(1);
  if (!st) st = tpu_host_compile(&p.g, &es);
  const double c2 = now_us();
  tpu_host_set_exec_sched(old);
  if (st || tpu_host_exe_num_steps(et) < min_steps) {
    tpu_status_free(st); tpu_host_exe_free(et); tpu_host_exe_free(es); tpu_graph_payload_free(&p);
    return;
  }
  const tpu_ir_graph_t* G = &p.g;
  tpu_host_view_t* pv = calloc((size_t)G->n_params + 1, sizeof(tpu_host_view_t));
  tpu_host_view_t* ov = calloc((size_t)G->n_outputs + 1, sizeof(tpu_host_view_t));
  tpu_host_scalar_t* sc = calloc((size_t)G->n_scalars + 1, sizeof(tpu_host_scalar_t));
  for (int s = 0; s < G->n_scalars; ++s) { sc[s].f = 1e-3; sc[s].i = 1; }
  int ok = pv && ov && sc;
  for (int v = 0; v < G->n_ops && ok; ++v)
    if (G->ops[v].opcode == TPU_IR_PARAM && !pv[G->ops[v].i0].data) ok = view_alloc(&pv[G->ops[v].i0], &G->ops[v].type, 1) != NULL;
  for (int k = 0; k < G->n_outputs && ok; ++k) ok = view_alloc(&ov[k], &G->ops[G->outputs[k]].type, 0) != NULL;
  double* tt = malloc((size_t)runs * sizeof(double));
  double* ts = malloc((size_t)runs * sizeof(double));
  double* rr = malloc((size_t)runs * sizeof(double));
  double* to = malloc((size_t)runs * sizeof(double)); /* traced, groups off */
  double* ro = malloc((size_t)runs * sizeof(double));
  int fails = 0;
  ok = ok && tt && ts && rr && to && ro;
  for (int r = -5; r < runs && ok; ++r) { /* 5 warm-up rounds */
    for (int k = 0; k < 3; ++k) {
      const int side = (r + k) % 3; /* rotate which side goes first */
      const tpu_host_exe_t* e = side == 1 ? es : et;
      const int gold = side == 2 ? tpu_host_set_exec_groups(0) : -1;
      tpu_pool_wake();
      const double t0 = now_us();
      tpu_status_t rs = tpu_host_exe_run(e, pv, sc, ov);
      const double dt = now_us() - t0;
      if (side == 2) tpu_host_set_exec_groups(gold);
      if (rs) { fails++; tpu_status_free(rs); }
      if (r >= 0) (side == 0 ? tt : side == 1 ? ts : to)[r] = dt;
    }
    if (r >= 0) { rr[r] = tt[r] / ts[r]; ro[r] = to[r] / tt[r]; }
  }
  if (ok) {
    int32_t gt = 0, gs = 0;
    const int nt = tpu_host_exe_num_groups(et, &gt), ns = tpu_host_exe_num_groups(es, &gs);
    const double r = median(rr, runs), a = median(tt, runs), b = median(ts, runs), o = median(to, runs);
    printf("%-20.20s %4d steps  groups %3d (%4d) -> %3d (%4d)  traced %8.1f us  scheduled %8.1f us  ratio %.3f  "
           "groups off %8.1f us  ratio %.3f  compile %.0f / %.0f us%s\n", strrchr(path, '/') ? strrchr(path, '/') + 1 : path,
           tpu_host_exe_num_steps(et), nt, gt, ns, gs, a, b, r, o, median(ro, runs), c1 - c0, c2 - c1,
           fails ? "  (runs failed: random inputs)" : "");
  }
  for (int q = 0; q < G->n_params; ++q) free(pv[q].data);
  for (int k = 0; k < G->n_outputs; ++k) free(ov[k].data);
  free(pv); free(ov); free(sc); free(tt); free(ts); free(rr); free(to); free(ro);
  tpu_host_exe_free(et); tpu_host_exe_free(es);
  tpu_graph_payload_free(&p);
}

int main(int argc, char** argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s CACHE_DIR [runs] [min_steps]\n", argv[0]); return 2; }
  const int runs = argc > 2 ? atoi(argv[2]) : 200, min_steps = argc > 3 ? atoi(argv[3]) : 30;
  tpu_status_t st = tpu_rt_init();
  if (st) { printf("init: %s\n", tpu_status_message(st)); return 1; }
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "find '%s' -type f", argv[1]);
  FILE* ls = popen(cmd, "r");
  char line[4096];
  while (ls && fgets(line, sizeof line, ls)) {
    line[strcspn(line, "\n")] = 0;
    bench_file(line, runs, min_steps);
  }
  if (ls) pclose(ls);
  return 0;
}
