/* pass_dce.c — dead code elimination: ops that reach no output are dropped. Params and
 * runtime scalars always stay (their numbering is the binding order). */
#include <stdlib.h>

#include "compiler/compiler.h"
#include "compiler/rewrite.h"

tpu_status_t tpu_compiler_dce(tpu_ir_graph_t* g, int* out_changes) { return tpu_pass_dce(g, out_changes, NULL); }

tpu_status_t tpu_pass_dce(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map) {
  *out_changes = 0;
  if (out_map) *out_map = NULL;
  uint8_t* live = calloc((size_t)(g->n_ops ? g->n_ops : 1), 1);
  if (!live) return TPU_ERR(OUT_OF_MEMORY, "compiler: out of host memory");
  for (int k = 0; k < g->n_outputs; ++k) live[g->outputs[k]] = 1;
  int dead = 0;
  for (int v = g->n_ops - 1; v >= 0; --v) {
    int oc = g->ops[v].opcode;
    if (oc == TPU_IR_PARAM || oc == TPU_IR_SCALAR) live[v] = 1;
    if (!live[v]) { dead++; continue; }
    for (int k = 0; k < g->ops[v].n_in; ++k) live[tpu_ir_operand(g, v, k)] = 1;
  }
  if (!dead) {
    free(live);
    if (out_map) { /* nothing dropped: the identity map */
      *out_map = malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof(int32_t));
      if (!*out_map) return TPU_ERR(OUT_OF_MEMORY, "compiler: out of host memory");
      for (int v = 0; v < g->n_ops; ++v) (*out_map)[v] = v;
    }
    return TPU_OK;
  }
  tpu_rw_t rw;
  tpu_status_t st = tpu_rw_begin(&rw, g);
  if (st) { free(live); return st; }
  rw.keep_map = out_map;
  for (int v = 0; v < g->n_ops && !rw.ng.status; ++v)
    if (live[v]) rw.map[v] = tpu_rw_copy(&rw, v);
  free(live);
  st = tpu_rw_finish(&rw, g);
  if (st == TPU_OK) *out_changes = dead;
  return st;
}
