/* trace.h — fused eager and graph capture (internal; public API in tpurt.h).
 *
 * With fused eager on (TORCH_TPU_FUSED_EAGER=1 or tpu_trace_set_enabled) or while a capture is
 * open, tpu_op_run validates an op exactly as strict eager does (signature, single-op
 * executable (while capturing a new size: lowered only, see tpu_exec_entry_materialize), runtime
 * scalar checks, RNG counters reserved), then calls tpu_trace_record
 * instead of enqueueing it. Recorded ops of a device form one pending trace, flushed as ONE
 * fused graph (all recorded lowerings embedded into one IR graph, cached by the trace's
 * signature) before anything else touches the device (runtime hooks), at a size limit, or on
 * demand. See docs/execution_modes.md.
 */
#ifndef TPURT_TRACE_H_
#define TPURT_TRACE_H_

#include "cache/exec_cache.h"
#include "lower/lower.h"

/* Nonzero when ops on `device` are to be recorded (fast; called for every op). */
extern int _Atomic tpu_trace_mode; /* bit 0: fused eager on; bit 1: some capture open */
int tpu_trace_should_record(int device);

/* Records a validated op (e: its single-op executable, borrowed; retained by the trace).
 * Errors: out of host memory; a failing flush the recording forced. */
tpu_status_t tpu_trace_record(int device, const tpu_lowering_t* l, const char* op_name, const tpu_arg_t* args,
                              int nargs, const tpu_tensor_t* outs, int nouts, tpu_exec_entry_t* e);

/* Nonzero while a capture is open on `device` (cheap). */
int tpu_trace_capturing(int device);

/* An op recorded while capturing a new size gets a lazy entry (lower/registry.c): lowered (key,
 * bindings, checks, RNG) but not compiled, e->exe NULL, owned by the trace record only (never
 * cached). Compiles its executable when a fallback needs it (op-by-op flush, layout check) from the
 * op's records. Errors: the compile's. */
tpu_status_t tpu_exec_entry_materialize(tpu_exec_entry_t* e, const tpu_lowering_t* l, const char* name,
                                        const tpu_arg_t* args, int nargs, const tpu_tensor_t* outs, int nouts);

/* The graph a capture's executable runs (after the compiler passes); borrowed, NULL if none. */
const tpu_ir_graph_t* tpu_capture_graph(const struct tpu_capture_s* c);

/* The graph a capture recorded, before the compiler passes (TPU_CAPTURE_KEEP_GRAPH); borrowed, or NULL. */
const tpu_ir_graph_t* tpu_capture_pre_graph(const struct tpu_capture_s* c);
int tpu_capture_is_instantiated(const struct tpu_capture_s* c);
/* A capture's bindings as a size-template sample (capture_sizes.c): slots (size fields) and exact
 * words (malloc'ed, the caller frees); both NULL with reason set when it cannot be one (a constant). */
tpu_status_t tpu_capture_encode(const struct tpu_capture_s* c, int64_t** out_slots, int* out_n_slots,
                                int64_t** out_exact, int* out_n_exact, char* reason, size_t reason_len);
/* The capture an instantiated sample describes: g (malloc'ed, taken over in every case) and the
 * encoding, every binding checked against g; g compiled. Refused: *out NULL, reason, TPU_OK. */
tpu_status_t tpu_capture_decode(int device, tpu_ir_graph_t* g, const int64_t* slots, int n_slots, const int64_t* exact,
                                int n_exact, unsigned flags, struct tpu_capture_s** out, char* reason, size_t reason_len);

#endif /* TPURT_TRACE_H_ */
