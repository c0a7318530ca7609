/* stablehlo_custom.c — custom_call targets expanded into plain StableHLO. */
#include "ir/stablehlo_impl.h"

int shlo_print_custom(shlo_t* P, const tpu_ir_graph_t* g, int v, const int* in) {
  const tpu_ir_op_t* op = &g->ops[v];
  return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: custom_call target %lld is not expanded yet", (long long)op->i0));
}
