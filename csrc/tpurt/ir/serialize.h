/* serialize.h — IR graphs as bytes, for the persistent compilation cache (internal).
 *
 * The format is private to one build of the library (the disk cache keys files by build), native
 * byte order, and versioned by TPU_IR_SERIAL_VERSION:
 *
 *     uint8_t* buf; size_t len;
 *     TPU_RETURN_IF_ERROR(tpu_ir_graph_serialize(&g, &buf, &len));   // buf: malloc'ed, caller frees
 *     tpu_ir_graph_t g2;
 *     TPU_RETURN_IF_ERROR(tpu_ir_graph_deserialize(buf, len, &g2));  // g2 == g (tpu_ir_equal)
 *
 * Deserialization treats its input as untrusted: every count and index is bounds-checked, and the
 * graph is rebuilt op by op through the validating builders of ir.h (each stored op must equal what
 * its builder makes from the stored operands and attributes), then checked with tpu_ir_verify. So
 * any graph it accepts is one the builders could have produced; a corrupt or crafted buffer gives
 * TPU_STATUS_INVALID_ARGUMENT, never an out-of-bounds access. Ops without a validating builder
 * (convolution, reduce_window, custom_call) get range checks of their attributes.
 *
 * Thread-safe (no shared state). */
#ifndef TPURT_IR_SERIALIZE_H_
#define TPURT_IR_SERIALIZE_H_

#include "ir/ir.h"

#define TPU_IR_SERIAL_VERSION 1

/* Serializes g: *out_buf is malloc'ed (caller frees), *out_len its size.
 * g must verify. Errors: INTERNAL (g does not verify), OUT_OF_MEMORY. */
tpu_status_t tpu_ir_graph_serialize(const tpu_ir_graph_t* g, uint8_t** out_buf, size_t* out_len);

/* Parses, validates and rebuilds a graph into *out_g (initialized here; free with
 * tpu_ir_graph_free, also on error). Errors: INVALID_ARGUMENT naming what was wrong. */
tpu_status_t tpu_ir_graph_deserialize(const uint8_t* buf, size_t len, tpu_ir_graph_t* out_g);

#endif /* TPURT_IR_SERIALIZE_H_ */
