/* graph_codec.h — fused-eager / captured graph executables as disk-cache payloads (internal;
 * used by lower/trace.c in the disk cache's "graph" namespace).
 *
 * A payload holds what a flush needs besides the driver's plan: the post-pass IR graph and its
 * binding tables (which recorded op's argument feeds each parameter and runtime scalar, which
 * trace value each output writes). The key is the trace key (every recorded op's signature, the
 * wiring between them, the view layouts and which values are live), which determines the graph
 * the lowerings and passes would build; the store compares it in full on load.
 *
 *     tpu_graph_payload_t p;
 *     if (tpu_disk_cache_get("graph", key, key_len, &buf, &len)) {
 *       st = tpu_graph_payload_decode(buf, len, &p);   // then the caller validates p's tables
 *       ...                                            // against its trace, tpu_host_compile(&p.g)
 *       tpu_graph_payload_free(&p);
 *     }
 *
 * Decoding treats the bytes as untrusted: counts are bounded by the graph's (the graph itself is
 * rebuilt through ir/serialize.h's validating reader); the indices inside the bindings refer to
 * the caller's trace and are checked by the caller. Thread-safe (no shared state). */
#ifndef TPURT_CACHE_GRAPH_CODEC_H_
#define TPURT_CACHE_GRAPH_CODEC_H_

#include "ir/ir.h"

/* One binding: op = recorded op index; src/arg/index as in lower.h's tensor/scalar binds. */
typedef struct tpu_graph_bind_s { int32_t op; int16_t src, arg; int32_t index; } tpu_graph_bind_t;

typedef struct tpu_graph_payload_s {
  tpu_ir_graph_t g;            /* post-pass graph */
  int n_tb, n_sb, n_out;       /* == g's params, scalars, outputs (n_out 0: a placeholder output) */
  tpu_graph_bind_t* tb;        /* per parameter */
  tpu_graph_bind_t* sb;        /* per runtime scalar */
  int32_t* outv;               /* per output: the trace value it writes */
} tpu_graph_payload_t;

/* Encodes g and the tables; *out_buf malloc'ed (caller frees). Errors: OUT_OF_MEMORY, INTERNAL
 * (g does not verify). */
tpu_status_t tpu_graph_payload_encode(const tpu_ir_graph_t* g, const tpu_graph_bind_t* tb, int n_tb,
                                      const tpu_graph_bind_t* sb, int n_sb, const int32_t* outv, int n_out,
                                      uint8_t** out_buf, size_t* out_len);
/* Decodes into *out (free with tpu_graph_payload_free, also after an error). Errors:
 * INVALID_ARGUMENT naming what is wrong, OUT_OF_MEMORY. */
tpu_status_t tpu_graph_payload_decode(const uint8_t* buf, size_t len, tpu_graph_payload_t* out);
void tpu_graph_payload_free(tpu_graph_payload_t* p);

#endif /* TPURT_CACHE_GRAPH_CODEC_H_ */
