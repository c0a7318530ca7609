/* stablehlo_ops.c — StableHLO expansions of the IR's indexing, sort, scan, convolution
 * and window ops (see stablehlo.c for the conventions). */
#include "ir/stablehlo_impl.h"

int shlo_print_other(shlo_t* P, const tpu_ir_graph_t* g, int v, const int* in) {
  const tpu_ir_op_t* op = &g->ops[v];
  switch (op->opcode) {
    case TPU_IR_CUSTOM: return shlo_print_custom(P, g, v, in);
    default:
      return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: %s is not printed yet", tpu_ir_opcode_name(op->opcode)));
  }
}
