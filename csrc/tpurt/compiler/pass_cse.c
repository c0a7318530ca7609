/* pass_cse.c — common subexpression elimination: an op equal to an earlier one (same
 * opcode, type and attributes byte for byte, same operands after remapping) is replaced
 * by it. Every IR op is a pure function of its operands (RNG takes seed and offset as
 * operands), so sharing never changes a result. Params and scalars are never merged
 * (their index differs anyway). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/compiler.h"
#include "compiler/rewrite.h"
#include "cache/hash.h"

/* The bytes that define an op's value besides its operands: all of it but in_off (prec, the
 * precision_config, is an attribute: compared). */
enum { OFF_IN = offsetof(tpu_ir_op_t, in_off), END_IN = OFF_IN + sizeof(((tpu_ir_op_t*)0)->in_off) };
static uint64_t hash_new(const tpu_ir_graph_t* ng, int v) {
  const tpu_ir_op_t* op = &ng->ops[v];
  /* only equal hashes matter (same_new decides): cache/hash.h's in-memory word hash */
  uint64_t h = tpu_hash_fast_step(0x243f6a8885a308d3ull, op, OFF_IN);
  h = tpu_hash_fast_step(h, (const char*)op + END_IN, sizeof(*op) - END_IN);
  return tpu_hash_fmix64(tpu_hash_fast_step(h, ng->operands + op->in_off, (size_t)op->n_in * sizeof(int32_t)));
}
static int same_new(const tpu_ir_graph_t* ng, int a, int b) {
  const tpu_ir_op_t *x = &ng->ops[a], *y = &ng->ops[b];
  return !memcmp(x, y, OFF_IN) && !memcmp((const char*)x + END_IN, (const char*)y + END_IN, sizeof(*x) - END_IN) &&
         !memcmp(ng->operands + x->in_off, ng->operands + y->in_off, (size_t)x->n_in * sizeof(int32_t));
}

tpu_status_t tpu_compiler_cse(tpu_ir_graph_t* g, int* out_changes) { return tpu_pass_cse(g, out_changes, NULL); }

tpu_status_t tpu_pass_cse(tpu_ir_graph_t* g, int* out_changes, int32_t** out_map) {
  *out_changes = 0;
  if (out_map) *out_map = NULL;
  tpu_rw_t rw;
  TPU_RETURN_IF_ERROR(tpu_rw_begin(&rw, g));
  rw.keep_map = out_map;
  size_t cap = 16;
  while (cap < (size_t)g->n_ops * 2) cap *= 2;
  int32_t* table = malloc(cap * sizeof(int32_t));
  if (!table) { tpu_rw_abort(&rw); return TPU_ERR(OUT_OF_MEMORY, "compiler: out of host memory"); }
  for (size_t i = 0; i < cap; ++i) table[i] = -1;
  int changes = 0;
  for (int v = 0; v < g->n_ops && !rw.ng.status; ++v) {
    int nv = tpu_rw_copy(&rw, v);
    rw.map[v] = nv;
    int oc = g->ops[v].opcode;
    if (nv < 0 || oc == TPU_IR_PARAM || oc == TPU_IR_SCALAR) continue;
    size_t slot = (size_t)hash_new(&rw.ng, nv) & (cap - 1);
    while (table[slot] >= 0 && !same_new(&rw.ng, table[slot], nv)) slot = (slot + 1) & (cap - 1);
    if (table[slot] < 0) { table[slot] = nv; continue; }
    /* duplicate: drop the copy just appended (it is the last op) and reuse the first */
    rw.map[v] = table[slot];
    rw.ng.n_operands -= rw.ng.ops[nv].n_in;
    rw.ng.n_ops--;
    changes++;
  }
  free(table);
  tpu_status_t st = tpu_rw_finish(&rw, g);
  if (st == TPU_OK) *out_changes = changes;
  return st;
}
