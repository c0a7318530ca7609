/* dump.c — TORCH_TPU_DUMP_IR=dir: each compiled graph as IR text before and after the
 * passes (<dir>/<seq>_<name>.before.txt / .after.txt) and the graph after the passes as
 * StableHLO (<seq>_<name>.stablehlo.mlir). A directory that cannot be
 * written prints one warning and turns the dump off; nothing here can fail a compile. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "compiler/compiler.h"

static int g_state = 0;   /* 1 = dumping (set once by dump_init, cleared on a write error) */
static int g_seq;
static char g_dir[1024];

static void warn_off(const char* why, const char* path) {
  if (__atomic_exchange_n(&g_state, 0, __ATOMIC_RELAXED) != 0)
    fprintf(stderr, "torch_tpu: warning: TORCH_TPU_DUMP_IR: cannot write %s (%s); IR dumps are off\n", path, why);
}

static void dump_init(void) {
  const char* d = getenv("TORCH_TPU_DUMP_IR");
  int on = d && *d && strlen(d) < sizeof(g_dir) - 1;
  if (on) {
    snprintf(g_dir, sizeof(g_dir), "%s", d);
    if (mkdir(g_dir, 0777) != 0 && errno != EEXIST) {
      g_state = 1; /* so warn_off prints */
      warn_off(strerror(errno), g_dir);
      return;
    }
  }
  __atomic_store_n(&g_state, on, __ATOMIC_RELAXED);
}

int tpu_compiler_dump_next_seq(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, dump_init);
  return __atomic_load_n(&g_state, __ATOMIC_RELAXED) == 1 ? __atomic_fetch_add(&g_seq, 1, __ATOMIC_RELAXED) : -1;
}

static void write_file(const char* path, const char* text, size_t len) {
  FILE* f = fopen(path, "w");
  if (!f) { warn_off(strerror(errno), path); return; }
  size_t n = fwrite(text, 1, len, f);
  if (fclose(f) != 0 || n != len) warn_off("write failed", path);
}

void tpu_compiler_dump(const tpu_ir_graph_t* g, const char* name, int seq, const char* stage) {
  if (seq < 0 || __atomic_load_n(&g_state, __ATOMIC_RELAXED) != 1) return;
  char safe[96], path[1200];
  const char* n = name ? name : "graph";
  size_t j = 0;
  for (; *n && j + 1 < sizeof(safe); ++n) {
    char c = *n;
    safe[j++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ? c : '_';
  }
  safe[j] = 0;
  size_t need = tpu_ir_print(g, NULL, 0);
  char* text = malloc(need);
  if (!text) return;
  tpu_ir_print(g, text, need);
  snprintf(path, sizeof(path), "%s/%05d_%s.%s.txt", g_dir, seq, safe, stage);
  write_file(path, text, strlen(text));
  free(text);
  if (strcmp(stage, "after") != 0) return;
  /* the graph the driver runs, as StableHLO (a graph the printer cannot express gets a
   * one-line comment saying why, so the file set stays complete) */
  char* hlo = NULL;
  tpu_status_t st = tpu_ir_stablehlo_print(g, "main", &hlo);
  snprintf(path, sizeof(path), "%s/%05d_%s.stablehlo.mlir", g_dir, seq, safe);
  if (st == TPU_OK && hlo) {
    write_file(path, hlo, strlen(hlo));
  } else {
    char msg[512];
    int n = snprintf(msg, sizeof(msg), "// not expressible in StableHLO: %s\n", st ? tpu_status_message(st) : "?");
    write_file(path, msg, n > 0 ? TPU_MIN((size_t)n, sizeof(msg) - 1) : 0);
  }
  free(hlo);
  tpu_status_free(st);
}
