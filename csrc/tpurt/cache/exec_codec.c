/* exec_codec.c — tpu_exec_entry_t <-> disk-cache payload (see exec_codec.h).
 *
 * Payload: u32 magic "TPEX", u32 version; i32 n_outputs, n_tbind, n_sbind, n_checks, n_arg_outs,
 * gen_arg; u64 rng_increment; the binding records as laid out in memory (the disk cache keys files
 * by library build, so layouts match); u64 graph length; the serialized graph (ir/serialize.h). */
#include "cache/exec_codec.h"

#include <stdlib.h>
#include <time.h>

#include "cache/disk_cache.h"
#include "ir/serialize.h"

#define MAGIC 0x58455054u /* "TPEX" */
#define VERSION 1
#define NS "op"

int tpu_exec_disk_enabled(void) { return tpu_disk_cache_enabled(); }

tpu_status_t tpu_exec_payload_encode(const tpu_exec_entry_t* e, uint8_t** out_buf, size_t* out_len) {
  *out_buf = NULL; *out_len = 0;
  uint8_t* g = NULL;
  size_t glen = 0;
  TPU_RETURN_IF_ERROR(tpu_ir_graph_serialize(tpu_host_exe_graph(e->exe), &g, &glen));
  size_t n = 8 + 6 * 4 + 8 + (size_t)e->n_tbind * sizeof(tpu_tensor_bind_t) +
             (size_t)e->n_sbind * sizeof(tpu_scalar_bind_t) + (size_t)e->n_checks * sizeof(tpu_scalar_check_t) +
             (size_t)e->n_arg_outs * sizeof(int16_t) + 8 + glen;
  uint8_t* buf = malloc(n);
  if (!buf) { free(g); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  uint8_t* p = buf;
#define PUT(src, bytes) do { memcpy(p, (src), (bytes)); p += (bytes); } while (0)
  uint32_t hdr[2] = {MAGIC, VERSION};
  int32_t counts[6] = {e->n_outputs, e->n_tbind, e->n_sbind, e->n_checks, e->n_arg_outs, e->gen_arg};
  uint64_t g64 = glen;
  PUT(hdr, 8); PUT(counts, 24); PUT(&e->rng_increment, 8);
  PUT(e->tbind, (size_t)e->n_tbind * sizeof(tpu_tensor_bind_t));
  PUT(e->sbind, (size_t)e->n_sbind * sizeof(tpu_scalar_bind_t));
  PUT(e->checks, (size_t)e->n_checks * sizeof(tpu_scalar_check_t));
  PUT(e->arg_outs, (size_t)e->n_arg_outs * sizeof(int16_t));
  PUT(&g64, 8); PUT(g, glen);
#undef PUT
  free(g);
  *out_buf = buf; *out_len = n;
  return TPU_OK;
}

/* A check message is a printf format given two doubles: only %g and %% may appear. */
static int safe_message(const char* msg, size_t cap) {
  if (!memchr(msg, '\0', cap)) return 0;
  int conv = 0;
  for (const char* s = msg; *s; ++s) {
    if (*s != '%') continue;
    if (s[1] == '%') { ++s; continue; }
    if (s[1] != 'g' || ++conv > 2) return 0;
    ++s;
  }
  return 1;
}
static int same_type(const tpu_ir_type_t* t, const tpu_tensor_t* x) {
  if (!x || x->ndim != t->rank || x->dtype != t->dtype) return 0;
  for (int d = 0; d < t->rank; ++d) if (x->sizes[d] != t->dims[d]) return 0;
  return 1;
}

#define BAD(...) TPU_ERR(INVALID_ARGUMENT, "cache payload: " __VA_ARGS__)

static tpu_status_t validate(const tpu_exec_entry_t* e, const tpu_ir_graph_t* g, const tpu_arg_t* args, int nargs,
                             const tpu_tensor_t* outs, int nouts) {
  if (e->n_outputs != nouts || g->n_outputs != nouts + e->n_arg_outs) return BAD("output count");
  if (e->n_tbind != g->n_params || e->n_sbind != g->n_scalars) return BAD("parameter count");
  if (e->gen_arg < -1 || e->gen_arg >= nargs) return BAD("generator argument");
  /* parameters: the graph's param ops in index order */
  for (int v = 0, p = 0; v < g->n_ops; ++v) {
    const tpu_ir_op_t* op = &g->ops[v];
    if (op->opcode != TPU_IR_PARAM) continue;
    const tpu_tensor_bind_t* b = &e->tbind[p++];
    const tpu_tensor_t* t = NULL;
    if (b->src == TPU_BIND_ARG) {
      if (b->arg >= 0 && b->arg < nargs && args[b->arg].kind == TPU_ARG_TENSOR) t = args[b->arg].tensor;
    } else if (b->src == TPU_BIND_LIST) {
      if (b->arg >= 0 && b->arg < nargs && args[b->arg].kind == TPU_ARG_TENSOR_LIST && b->index >= 0 &&
          b->index < args[b->arg].len && args[b->arg].tensors)
        t = &args[b->arg].tensors[b->index];
    } else if (b->src == TPU_BIND_OUT) {
      if (b->arg >= 0 && b->arg < nouts) t = &outs[b->arg];
    }
    if (!same_type(&op->type, t)) return BAD("parameter %d does not match its tensor", p - 1);
  }
  for (int s = 0; s < e->n_sbind; ++s) {
    const tpu_scalar_bind_t* b = &e->sbind[s];
    switch (b->kind) {
      case TPU_SBIND_GEN_SEED: case TPU_SBIND_GEN_OFFSET: break;
      case TPU_SBIND_VALUE: if (b->arg < 0 || b->arg >= nargs) return BAD("scalar %d argument", s); break;
      case TPU_SBIND_LIST_DOUBLE:
        if (b->arg < 0 || b->arg >= nargs || args[b->arg].kind != TPU_ARG_DOUBLE_LIST || b->index < 0 ||
            b->index >= args[b->arg].len)
          return BAD("scalar %d list entry", s);
        break;
      default: return BAD("scalar %d binding kind", s);
    }
  }
  for (int c = 0; c < e->n_checks; ++c)
    if (!safe_message(e->checks[c].msg, sizeof e->checks[c].msg)) return BAD("check message");
  for (int k = 0; k < nouts; ++k) {
    const tpu_ir_type_t* t = &g->ops[g->outputs[k]].type;
    if (outs[k].ndim < 0 ? t->rank != 0 : !same_type(t, &outs[k])) return BAD("output %d type", k);
  }
  for (int j = 0; j < e->n_arg_outs; ++j) {
    int a = e->arg_outs[j];
    if (a < 0 || a >= nargs || args[a].kind != TPU_ARG_TENSOR ||
        !same_type(&g->ops[g->outputs[nouts + j]].type, args[a].tensor))
      return BAD("argument output %d", j);
  }
  return TPU_OK;
}

tpu_status_t tpu_exec_graph_check(const tpu_exec_entry_t* e, const tpu_ir_graph_t* g, const tpu_arg_t* args,
                                  int nargs, const tpu_tensor_t* outs, int nouts) {
  return validate(e, g, args, nargs, outs, nouts);
}

tpu_status_t tpu_exec_payload_decode(const uint8_t* buf, size_t len, const tpu_arg_t* args, int nargs,
                                     const tpu_tensor_t* outs, int nouts, tpu_exec_entry_t** out_e) {
  *out_e = NULL;
  const uint8_t* p = buf;
  const uint8_t* end = buf + len;
#define GET(dst, bytes) do { size_t n_ = (bytes); if ((size_t)(end - p) < n_) return BAD("truncated"); \
                             memcpy((dst), p, n_); p += n_; } while (0)
  uint32_t hdr[2];
  int32_t c[6];
  GET(hdr, 8);
  if (hdr[0] != MAGIC || hdr[1] != VERSION) return BAD("bad magic or version");
  GET(c, 24);
  if (c[0] < 0 || c[1] < 0 || c[1] > TPU_LOWER_MAX_PARAMS || c[2] < 0 || c[2] > TPU_LOWER_MAX_SCALARS ||
      c[3] < 0 || c[3] > TPU_LOWER_MAX_CHECKS || c[4] < 0 || c[4] > TPU_LOWER_MAX_ARG_OUTS)
    return BAD("bad counts");
  tpu_exec_entry_t* e = calloc(1, sizeof(*e));
  if (!e) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  e->n_outputs = c[0]; e->n_tbind = c[1]; e->n_sbind = c[2]; e->n_checks = c[3]; e->n_arg_outs = c[4];
  e->gen_arg = c[5];
  tpu_status_t st = TPU_OK;
  uint64_t glen = 0;
#undef GET
#define GET(dst, bytes) do { size_t n_ = (bytes); if ((size_t)(end - p) < n_) { st = BAD("truncated"); goto done; } \
                             memcpy((dst), p, n_); p += n_; } while (0)
  GET(&e->rng_increment, 8);
  GET(e->tbind, (size_t)e->n_tbind * sizeof(tpu_tensor_bind_t));
  GET(e->sbind, (size_t)e->n_sbind * sizeof(tpu_scalar_bind_t));
  GET(e->checks, (size_t)e->n_checks * sizeof(tpu_scalar_check_t));
  GET(e->arg_outs, (size_t)e->n_arg_outs * sizeof(int16_t));
  GET(&glen, 8);
  if (glen != (uint64_t)(end - p)) { st = BAD("graph length"); goto done; }
#undef GET
  tpu_ir_graph_t g;
  st = tpu_ir_graph_deserialize(p, (size_t)glen, &g);
  if (!st) st = validate(e, &g, args, nargs, outs, nouts);
  if (!st) st = tpu_host_compile(&g, &e->exe);
  tpu_ir_graph_free(&g);
done:
  if (st) { free(e); return st; }
  *out_e = e;
  return TPU_OK;
}

static double now_s(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tpu_exec_disk_load(const uint8_t* key, size_t key_len, const tpu_arg_t* args, int nargs,
                       const tpu_tensor_t* outs, int nouts, tpu_exec_entry_t** out_e) {
  *out_e = NULL;
  uint8_t* buf = NULL;
  size_t len = 0;
  if (!tpu_disk_cache_get(NS, key, key_len, &buf, &len)) return 0;
  double t0 = now_s();
  tpu_status_t st = tpu_exec_payload_decode(buf, len, args, nargs, outs, nouts, out_e);
  free(buf);
  tpu_disk_cache_add_load_seconds(now_s() - t0);
  if (st) {
    /* OUT_OF_MEMORY is not the file's fault, but a recompile rewrites the file either way */
    tpu_status_free(st);
    tpu_disk_cache_reject(NS, key, key_len);
    return 0;
  }
  return 1;
}

void tpu_exec_disk_store(const tpu_exec_entry_t* e) {
  if (!tpu_disk_cache_enabled()) return;
  uint8_t* buf = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_exec_payload_encode(e, &buf, &len);
  if (st) { tpu_status_free(st); return; }
  tpu_disk_cache_put(NS, e->key, e->key_len, buf, len);
  free(buf);
}
