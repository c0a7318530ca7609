/* rewrite.c — the graph rebuilder shared by the passes. */
#include "compiler/rewrite.h"

#include <stdlib.h>

tpu_status_t tpu_rw_begin(tpu_rw_t* rw, const tpu_ir_graph_t* g) {
  memset(rw, 0, sizeof(*rw));
  rw->g = g;
  /* graph-wide settings (any field besides the op lists) carry over */
  rw->ng = *g;
  rw->ng.ops = NULL; rw->ng.operands = NULL;
  rw->ng.n_ops = rw->ng.cap_ops = rw->ng.n_operands = rw->ng.cap_operands = 0;
  rw->ng.n_params = rw->ng.n_scalars = rw->ng.n_outputs = 0;
  rw->ng.status = TPU_OK;
  rw->map = malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof(int32_t));
  rw->ins = malloc((size_t)(g->n_operands ? g->n_operands : 1) * sizeof(int32_t));
  if (!rw->map || !rw->ins) {
    tpu_rw_abort(rw);
    return TPU_ERR(OUT_OF_MEMORY, "compiler: out of host memory");
  }
  for (int v = 0; v < g->n_ops; ++v) rw->map[v] = -1;
  return TPU_OK;
}

const int32_t* tpu_rw_inputs(tpu_rw_t* rw, int v) {
  const tpu_ir_op_t* op = &rw->g->ops[v];
  for (int k = 0; k < op->n_in; ++k) rw->ins[k] = rw->map[tpu_ir_operand(rw->g, v, k)];
  return rw->ins;
}

int tpu_rw_emit(tpu_rw_t* rw, const tpu_ir_op_t* proto, int n_in, const int32_t* ins) {
  tpu_ir_graph_t* ng = &rw->ng;
  for (int k = 0; k < n_in; ++k)
    if (ins[k] < 0) return tpu_ir_fail(ng, TPU_ERR(INTERNAL, "compiler: operand of a dropped value"));
  tpu_ir_op_t p = *proto;
  if (p.opcode == TPU_IR_PARAM) p.i0 = ng->n_params;
  if (p.opcode == TPU_IR_SCALAR) p.i0 = ng->n_scalars;
  int v = tpu_ir_add_op(ng, &p, n_in, (const int*)ins);
  if (v >= 0 && p.opcode == TPU_IR_PARAM) ng->n_params++;
  if (v >= 0 && p.opcode == TPU_IR_SCALAR) ng->n_scalars++;
  return v;
}

int tpu_rw_copy(tpu_rw_t* rw, int v) {
  const tpu_ir_op_t* op = &rw->g->ops[v];
  return tpu_rw_emit(rw, op, op->n_in, tpu_rw_inputs(rw, v));
}

tpu_status_t tpu_rw_finish(tpu_rw_t* rw, tpu_ir_graph_t* g) {
  tpu_ir_graph_t* ng = &rw->ng;
  for (int k = 0; k < rw->g->n_outputs; ++k) tpu_ir_output(ng, rw->map[rw->g->outputs[k]]);
  if (ng->n_params != rw->g->n_params || ng->n_scalars != rw->g->n_scalars)
    tpu_ir_fail(ng, TPU_ERR(INTERNAL, "compiler: a pass dropped a parameter"));
  tpu_status_t st = ng->status;
  ng->status = TPU_OK;
  if (st == TPU_OK) {
    tpu_ir_graph_free(g);
    *g = *ng;
    memset(ng, 0, sizeof(*ng));
    if (rw->keep_map) { *rw->keep_map = rw->map; rw->map = NULL; }
  }
  tpu_rw_abort(rw);
  return st;
}

void tpu_rw_abort(tpu_rw_t* rw) {
  tpu_ir_graph_free(&rw->ng);
  free(rw->map); free(rw->ins);
  rw->map = rw->ins = NULL;
}

uint8_t* tpu_rw_elementwise_readers(const tpu_ir_graph_t* g) {
  uint8_t* ok = malloc((size_t)(g->n_ops ? g->n_ops : 1));
  if (!ok) return NULL;
  memset(ok, 1, (size_t)(g->n_ops ? g->n_ops : 1));
  for (int w = g->n_ops - 1; w >= 0; --w) {
    int oc = g->ops[w].opcode;
    int fine = tpu_ir_is_elementwise(oc) || (tpu_ir_is_view(oc) && ok[w]);
    if (fine) continue;
    for (int k = 0; k < g->ops[w].n_in; ++k) ok[tpu_ir_operand(g, w, k)] = 0;
  }
  return ok;
}

int tpu_rw_const_of(const tpu_ir_graph_t* g, int v, double* out_f, int64_t* out_i) {
  while (v >= 0 && (g->ops[v].opcode == TPU_IR_BROADCAST || g->ops[v].opcode == TPU_IR_RESHAPE))
    v = tpu_ir_operand(g, v, 0);
  if (v < 0 || g->ops[v].opcode != TPU_IR_CONSTANT || g->ops[v].type.rank != 0) return -1;
  *out_f = g->ops[v].f0; *out_i = g->ops[v].i0;
  return v;
}
