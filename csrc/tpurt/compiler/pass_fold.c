/* pass_fold.c — constant folding. An elementwise op whose operands are all rank-0
 * constants (possibly broadcast) is evaluated at rank 0 BY THE HOST DRIVER'S OWN tile
 * kernels (what a rank-0 fused cluster runs), so the folded constant is bitwise what the op would have computed
 * at run time; a non-scalar result becomes broadcast(constant). Ops the driver rejects
 * are left alone. */
#include <stdlib.h>

#include "compiler/compiler.h"
#include "compiler/rewrite.h"

/* Evaluates old op on the constant operands (new-graph ids in `in`) exactly as a rank-0
 * fused cluster of the host driver does (same tile load/compute/store kernels, same
 * register classes, same rounding); returns 0 and the result, or -1 if unsupported. */
static int eval_scalar(const tpu_ir_graph_t* ng, const tpu_ir_op_t* op, const int32_t* in,
                       double* out_f, int64_t* out_i) {
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  int64_t regs[TPU_IR_MAX_INLINE_OPERANDS + 1][2];
  const void* ins[TPU_IR_MAX_INLINE_OPERANDS] = {0};
  int in_dtype = TPU_DTYPE_F32;
  for (int k = 0; k < op->n_in; ++k) {
    double f; int64_t i;
    int c = tpu_rw_const_of(ng, in[k], &f, &i);
    int dt = ng->ops[c].type.dtype;
    char mem[16] = {0}; /* the constant as the driver stores it (scalar_store in exec.c) */
    if (tpu_dtype_is_floating(dt)) tpu_host_store_f64(mem, dt, f); else tpu_host_store_i64(mem, dt, i);
    T->load(regs[k + 1], tpu_host_cls(dt), mem, dt, 1, 1);
    ins[k] = regs[k + 1];
    if (k == (op->opcode == TPU_IR_SELECT ? 1 : 0)) in_dtype = dt;
  }
  if (T->compute(op, op->type.dtype, regs[0], in_dtype, ins, 1)) return -1;
  char res[16] = {0};
  T->store(res, op->type.dtype, 1, regs[0], tpu_host_cls(op->type.dtype), 1);
  if (tpu_dtype_is_floating(op->type.dtype)) { *out_f = tpu_host_load_f64(res, op->type.dtype); *out_i = 0; }
  else { *out_i = tpu_host_load_i64(res, op->type.dtype); *out_f = 0; }
  return 0;
}

tpu_status_t tpu_compiler_fold_constants(tpu_ir_graph_t* g, int* out_changes) { return tpu_pass_fold_constants(g, out_changes, NULL); }

tpu_status_t tpu_pass_fold_constants(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map) {
  *out_changes = 0;
  if (out_map) *out_map = NULL;
  tpu_rw_t rw;
  TPU_RETURN_IF_ERROR(tpu_rw_begin(&rw, g));
  rw.keep_map = out_map;
  uint8_t* ew = tpu_rw_elementwise_readers(g); /* a broadcast constant is read with stride 0 */
  int changes = 0;
  for (int v = 0; v < g->n_ops && !rw.ng.status; ++v) {
    const tpu_ir_op_t* op = &g->ops[v];
    const int32_t* in = tpu_rw_inputs(&rw, v);
    int foldable = ew && ew[v] && tpu_ir_is_elementwise(op->opcode) && op->n_in > 0 && op->n_in <= TPU_IR_MAX_INLINE_OPERANDS;
    for (int k = 0; k < op->n_in && foldable; ++k) {
      double f; int64_t i;
      foldable = tpu_rw_const_of(&rw.ng, in[k], &f, &i) >= 0;
    }
    double f = 0; int64_t i = 0;
    if (foldable && eval_scalar(&rw.ng, op, in, &f, &i) == 0) {
      tpu_ir_op_t c;
      memset(&c, 0, sizeof(c));
      c.opcode = TPU_IR_CONSTANT; c.type.dtype = op->type.dtype;
      if (tpu_dtype_is_floating(op->type.dtype)) c.f0 = f; else c.i0 = i;
      int r = tpu_rw_emit(&rw, &c, 0, NULL);
      if (op->type.rank > 0) r = tpu_ir_broadcast(&rw.ng, r, op->type.rank, op->type.dims, NULL);
      rw.map[v] = r; changes++;
      continue;
    }
    rw.map[v] = tpu_rw_copy(&rw, v);
  }
  free(ew);
  tpu_status_t st = tpu_rw_finish(&rw, g);
  if (st == TPU_OK) *out_changes = changes;
  return st;
}
