/* graph_codec.c — fused/captured graph payloads (see graph_codec.h).
 *
 * Payload: u32 magic "TPFG", u32 version; i32 n_tb, n_sb, n_out; the binding records (12 bytes
 * each: i32 op, i16 src, i16 arg, i32 index) for parameters then scalars; i32 outv[n_out];
 * u64 graph length; the serialized graph (ir/serialize.h). Native byte order: files are keyed by
 * library build. */
#include "cache/graph_codec.h"

#include <stdlib.h>
#include <string.h>

#include "ir/serialize.h"

#define MAGIC 0x47465054u /* "TPFG" */
#define VERSION 1
#define BAD(...) TPU_ERR(INVALID_ARGUMENT, "graph cache payload: " __VA_ARGS__)

_Static_assert(sizeof(tpu_graph_bind_t) == 12, "binding records are stored as laid out in memory");

tpu_status_t tpu_graph_payload_encode(const tpu_ir_graph_t* g, const tpu_graph_bind_t* tb, int n_tb,
                                      const tpu_graph_bind_t* sb, int n_sb, const int32_t* outv, int n_out,
                                      uint8_t** out_buf, size_t* out_len) {
  *out_buf = NULL; *out_len = 0;
  uint8_t* gb = NULL;
  size_t glen = 0;
  TPU_RETURN_IF_ERROR(tpu_ir_graph_serialize(g, &gb, &glen));
  size_t n = 8 + 12 + (size_t)(n_tb + n_sb) * sizeof(tpu_graph_bind_t) + (size_t)n_out * 4 + 8 + glen;
  uint8_t* buf = malloc(n);
  if (!buf) { free(gb); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  uint8_t* p = buf;
#define PUT(src, bytes) do { size_t n_ = (bytes); if (n_) memcpy(p, (src), n_); p += n_; } while (0)
  uint32_t hdr[2] = {MAGIC, VERSION};
  int32_t counts[3] = {n_tb, n_sb, n_out};
  uint64_t g64 = glen;
  PUT(hdr, 8); PUT(counts, 12);
  PUT(tb, (size_t)n_tb * sizeof(*tb)); PUT(sb, (size_t)n_sb * sizeof(*sb)); PUT(outv, (size_t)n_out * 4);
  PUT(&g64, 8); PUT(gb, glen);
#undef PUT
  free(gb);
  *out_buf = buf; *out_len = n;
  return TPU_OK;
}

void tpu_graph_payload_free(tpu_graph_payload_t* p) {
  if (!p) return;
  tpu_ir_graph_free(&p->g);
  free(p->tb); free(p->sb); free(p->outv);
  p->tb = p->sb = NULL; p->outv = NULL;
}

tpu_status_t tpu_graph_payload_decode(const uint8_t* buf, size_t len, tpu_graph_payload_t* out) {
  memset(out, 0, sizeof(*out));
  tpu_ir_graph_init(&out->g);
  const uint8_t* p = buf;
  const uint8_t* end = buf + len;
#define GET(dst, bytes) do { size_t n_ = (bytes); if ((size_t)(end - p) < n_) return BAD("truncated"); \
                             if (n_) { memcpy((dst), p, n_); } \
                             p += n_; } while (0)
  uint32_t hdr[2];
  int32_t c[3];
  uint64_t glen;
  GET(hdr, 8);
  if (hdr[0] != MAGIC || hdr[1] != VERSION) return BAD("bad magic or version");
  GET(c, 12);
  /* each count is bounded by what the remaining bytes can hold before the graph is parsed */
  size_t rest = (size_t)(end - p);
  if (c[0] < 0 || c[1] < 0 || c[2] < 0 || (size_t)c[0] > rest / 12 || (size_t)c[1] > rest / 12 ||
      (size_t)c[2] > rest / 4)
    return BAD("bad counts");
  out->n_tb = c[0]; out->n_sb = c[1]; out->n_out = c[2];
  out->tb = malloc((size_t)(c[0] ? c[0] : 1) * sizeof(tpu_graph_bind_t));
  out->sb = malloc((size_t)(c[1] ? c[1] : 1) * sizeof(tpu_graph_bind_t));
  out->outv = malloc((size_t)(c[2] ? c[2] : 1) * sizeof(int32_t));
  if (!out->tb || !out->sb || !out->outv) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  GET(out->tb, (size_t)c[0] * sizeof(tpu_graph_bind_t));
  GET(out->sb, (size_t)c[1] * sizeof(tpu_graph_bind_t));
  GET(out->outv, (size_t)c[2] * 4);
  GET(&glen, 8);
#undef GET
  if (glen != (uint64_t)(end - p)) return BAD("graph length");
  tpu_ir_graph_free(&out->g);
  TPU_RETURN_IF_ERROR(tpu_ir_graph_deserialize(p, (size_t)glen, &out->g));
  if (out->g.n_params != out->n_tb || out->g.n_scalars != out->n_sb ||
      out->g.n_outputs != (out->n_out ? out->n_out : 1))
    return BAD("tables do not match the graph");
  return TPU_OK;
}
