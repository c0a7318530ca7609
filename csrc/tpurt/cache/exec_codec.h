/* exec_codec.h — per-op executables as disk-cache payloads (internal; used by lower/registry.c).
 *
 * A payload is everything tpu_op_run needs besides the driver's plan: the binding tables of a
 * tpu_exec_entry_t and the (post-pass) IR graph. Loading re-plans the graph with tpu_host_compile,
 * which is much cheaper than lowering + compiler passes.
 *
 *     tpu_exec_entry_t* e = NULL;
 *     if (tpu_exec_disk_load(key, key_len, args, nargs, outs, nouts, &e) && e) ...   // disk hit
 *     ... after a compile: tpu_exec_disk_store(e);
 *
 * Loading validates the payload against the call it serves: every binding must name an argument
 * of the right kind and every parameter/output type must equal its tensor's (the key fixes kinds,
 * dtypes and sizes, so what holds for this call holds for every call with the same key); scalar
 * check messages may only hold %g conversions. A payload that fails is rejected (counted, its file
 * removed) and the op compiles as on a miss. Thread-safe. */
#ifndef TPURT_CACHE_EXEC_CODEC_H_
#define TPURT_CACHE_EXEC_CODEC_H_

#include "cache/exec_cache.h"

/* 1 if the disk level is on (callers skip key copies otherwise). */
int tpu_exec_disk_enabled(void);
/* On a valid disk hit sets *out_e to a new entry (refcount 0, hash/key unset: the caller fills
 * them and inserts it) and returns 1; otherwise *out_e = NULL and 0. */
int tpu_exec_disk_load(const uint8_t* key, size_t key_len, const tpu_arg_t* args, int nargs,
                       const tpu_tensor_t* outs, int nouts, tpu_exec_entry_t** out_e);
/* Writes e (key and executable set) to the disk level; failures are counted, never returned. */
void tpu_exec_disk_store(const tpu_exec_entry_t* e);

/* Checks a graph for e's tables against a call (what a disk load checks: every parameter and output
 * type equals its tensor's, bindings name arguments of the right kind); INVALID_ARGUMENT if not. */
tpu_status_t tpu_exec_graph_check(const tpu_exec_entry_t* e, const tpu_ir_graph_t* g, const tpu_arg_t* args,
                                  int nargs, const tpu_tensor_t* outs, int nouts);

/* For tests: the payload of e, and its decoding + validation against a call. */
tpu_status_t tpu_exec_payload_encode(const tpu_exec_entry_t* e, uint8_t** out_buf, size_t* out_len);
tpu_status_t tpu_exec_payload_decode(const uint8_t* buf, size_t len, const tpu_arg_t* args, int nargs,
                                     const tpu_tensor_t* outs, int nouts, tpu_exec_entry_t** out_e);

#endif /* TPURT_CACHE_EXEC_CODEC_H_ */
