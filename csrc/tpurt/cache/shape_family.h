/* shape_family.h — new sizes of an eager op without the compiler passes (internal; used by
 * lower/registry.c on an executable-cache miss).
 *
 * A family is every call of one op whose cache keys differ only in tensor sizes (same op, ranks,
 * dtypes, argument kinds and values that are keyed): embedding_bag at each new id count, an NLP
 * op at each sequence length. Its first size only records the sizes (no graph copies: a program
 * whose sizes never vary pays a key and a lookup, no more); from the second size on, every full
 * compile is a sample. The first two samples fix which size slots of the key vary together
 * (size symbols s0, s1, ...: slots equal to each other in both samples share one); every compiled
 * size after that is a sample of two size templates (ir/symshape.h): one over the lowered graph
 * (before the passes) and one over the optimized graph (after them). Once a sample was predicted
 * exactly by both, a new size is made like this:
 *
 *     lower the op at this size                        (cheap: ~10% of a compile)
 *     its binding tables == the family's, and
 *     its lowered graph == what the first template predicts at these sizes (every field)
 *       -> the second template's graph at these sizes, checked (tpu_ir_verify, and the
 *          caller checks every parameter/output type against the call's tensors)
 *       -> tpu_host_compile only (no canonicalize / fold / CSE / DCE rounds)
 *
 * Why that is the per-size compile's graph: the lowering ran at this size, so every decision it
 * makes on sizes is in the compared graph; the passes decide on types only by equality (identical
 * shapes, a slice covering its operand, equal operands for CSE) and on sizes of 1, and a varying
 * field is refused below 2 (each symbol too). An equality between two varying fields that held in
 * the samples holds at every size (both are the same c + k*m); one that holds only at this size
 * would let the passes drop an identity slice or merge two equal values, the same values either way.
 * Anything else (a sample that is no instance, other tables, a symbol layout the call does not fit)
 * compiles as before; a family that failed 4 times stops learning.
 *
 *     int r = tpu_shape_family_try(fkey, n, slots, ns, cx, &post);  // 1: post is the graph to plan
 *     if (r == 0) { clone cx->g; compile; tpu_shape_family_learn(fkey, n, slots, ns, cx, &pre, exe_graph); }
 *
 * TORCH_TPU_EAGER_TEMPLATES=0 turns it off (every size compiles in full). Thread-safe (one mutex;
 * lowering and planning run outside it). */
#ifndef TPURT_CACHE_SHAPE_FAMILY_H_
#define TPURT_CACHE_SHAPE_FAMILY_H_

#include "ir/ir.h"
#include "lower/lower.h"

#define TPU_SHAPE_FAMILY_MAX_SLOTS 48 /* size slots (tensor dims) per call; more: no family */
#define TPU_SHAPE_FAMILY_MAX 512      /* families kept (the oldest beyond it are dropped) */

int tpu_shape_family_enabled(void);

/* cx: the op lowered at these sizes (its graph before the passes, its binding tables).
 * 1: *out_post is the optimized graph at these sizes (caller frees); 0: compile in full, then
 * call tpu_shape_family_learn with a copy of cx->g made before the passes; -1: compile in full,
 * nothing to learn (the family's first size, or a family that stopped learning). */
int tpu_shape_family_try(const uint8_t* fkey, size_t fkey_len, const int64_t* slots, int n_slots,
                         const tpu_lower_ctx_t* cx, tpu_ir_graph_t* out_post);
/* A full compile's sample: pre (taken: freed or kept), cx's tables, the optimized graph post
 * (borrowed). */
void tpu_shape_family_learn(const uint8_t* fkey, size_t fkey_len, const int64_t* slots, int n_slots,
                            const tpu_lower_ctx_t* cx, tpu_ir_graph_t* pre, const tpu_ir_graph_t* post);

typedef struct {
  uint64_t families;      /* families held now */
  uint64_t instantiated;  /* sizes made from templates (no passes) */
  uint64_t samples;       /* full compiles learned from */
  uint64_t refused;       /* tries and samples that were no instance (compiled in full) */
} tpu_shape_family_stats_t;
void tpu_shape_family_stats(tpu_shape_family_stats_t* out);
void tpu_shape_family_clear(void); /* drops every family (tpu_cache_clear) */
int tpu_shape_family_set_enabled(int on); /* tests: overrides the variable; returns the previous setting */

#endif /* TPURT_CACHE_SHAPE_FAMILY_H_ */
