/* rewrite.h — the graph rebuilder every pass uses (internal to compiler/).
 *
 * A pass walks the old graph in order and, for each op, either copies it into the new
 * graph with its operands remapped (tpu_rw_copy) or maps it to another new value. Param
 * and scalar ops must be copied, in order, so binding indices stay valid. */
#ifndef TPURT_COMPILER_REWRITE_H_
#define TPURT_COMPILER_REWRITE_H_

#include "ir/ir.h"

typedef struct tpu_rw_s {
  const tpu_ir_graph_t* g; /* old graph (borrowed) */
  tpu_ir_graph_t ng;       /* new graph (owned until finish) */
  int32_t* map;            /* old value -> new value (-1: dropped) */
  int32_t* ins;            /* scratch: remapped operands of the current op */
  int32_t** keep_map;      /* if set: finish hands the old -> new map over here (caller frees) */
} tpu_rw_t;

tpu_status_t tpu_rw_begin(tpu_rw_t* rw, const tpu_ir_graph_t* g);
/* Remapped operands of old op v (valid until the next call). */
const int32_t* tpu_rw_inputs(tpu_rw_t* rw, int v);
/* Copies old op v with `ins` as its operands into the new graph; returns the new value. */
int tpu_rw_emit(tpu_rw_t* rw, const tpu_ir_op_t* proto, int n_in, const int32_t* ins);
int tpu_rw_copy(tpu_rw_t* rw, int v);
/* Remaps the outputs and replaces *g (the old graph) with the new one, or returns the new
 * graph's builder error (the old graph is kept). Frees the rebuilder either way. */
tpu_status_t tpu_rw_finish(tpu_rw_t* rw, tpu_ir_graph_t* g);
void tpu_rw_abort(tpu_rw_t* rw);

/* The passes with their old -> new value map (-1: dropped) handed to *out_map when out_map is
 * not NULL (malloc'd, g's old op count entries; the caller frees it). */
tpu_status_t tpu_pass_canonicalize(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map);
tpu_status_t tpu_pass_fold_constants(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map);
tpu_status_t tpu_pass_cse(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map);
tpu_status_t tpu_pass_dce(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map);

/* Per value of g: 1 when every reader is elementwise (directly or through views) or a graph
 * output. Such a value may be replaced by any equal value: a fused loop computes each element
 * the same whatever the operand's layout. A library kernel (reduce, dot) may accumulate in an
 * order that depends on its operand's layout or on whether it was fused, so values it reads
 * are only replaced by identical ops (CSE) or layout-preserving view rewrites. NULL if out of
 * memory (callers then rewrite nothing). Caller frees. */
uint8_t* tpu_rw_elementwise_readers(const tpu_ir_graph_t* g);

/* If value v of g is a rank-0 constant, possibly seen through broadcasts and reshapes,
 * returns that constant's id and its value (f for floating dtypes, i otherwise); else -1. */
int tpu_rw_const_of(const tpu_ir_graph_t* g, int v, double* out_f, int64_t* out_i);

#endif /* TPURT_COMPILER_REWRITE_H_ */
