/* compiler.h — graph-to-graph passes over the IR and the compile entry point (internal).
 *
 * Every pass rewrites a verified graph into a new one (ops rebuilt in topological
 * order through a value remap) and reports how many rewrites it made. The pipeline
 * runs canonicalize -> fold -> CSE -> DCE until nothing changes (at most a few rounds),
 * running tpu_ir_verify after each pass when TORCH_TPU_VERIFY_PASSES=1 (the C tests
 * always verify).
 *
 *     tpu_compiler_stats_t st;
 *     TPU_RETURN_IF_ERROR(tpu_compiler_run(&g, "aten::add.out", &st));   // g rewritten in place
 *     // or passes + host-driver plan + metrics + TORCH_TPU_DUMP_IR in one call:
 *     tpu_host_exe_t* exe;
 *     TPU_RETURN_IF_ERROR(tpu_compiler_compile(&g, "aten::add.out", &exe));
 *
 * The hard rule of every pass: results never change bitwise. The host driver computes
 * each op in fixed register classes with -ffp-contract=off, so only rewrites that are
 * exact for every input are allowed: x*1 -> x but never x+0 -> x (x = -0.0); a convert
 * round trip folds only when it is the identity for every value (integers and bool
 * through a type that holds them, never floats: a signaling NaN would come back quiet);
 * constants fold by running the host driver itself on the rank-0 operands. Values read by
 * library kernels (a reduce sums in an order that depends on its operand's layout) are only
 * shared or kept, and a final guard keeps the original graph if a library op would start or
 * stop reading a graph output (written in the output tensor's layout; README.md). Whether a
 * reduce's producer is fused into it does not change its sum (tpu_host_reduce_plan).
 *
 * Passes keep every parameter and runtime scalar (their numbering is the binding order),
 * only drop or share computed values. Not thread-safe per graph; distinct graphs may be
 * compiled concurrently.
 */
#ifndef TPURT_COMPILER_H_
#define TPURT_COMPILER_H_

#include "drivers/host/host.h"
#include "ir/ir.h"

typedef struct tpu_compiler_stats_s {
  int32_t ops_before, ops_after;  /* graph sizes around the passes */
  int32_t canon_rewrites;         /* canonicalize: algebraic identities, view chains */
  int32_t folds;                  /* constant folding: ops replaced by a constant */
  int32_t cse_hits;               /* CSE: ops replaced by an identical earlier op */
  int32_t dce_removed;            /* DCE: ops that reached no output */
  int32_t rounds;                 /* pipeline rounds run */
  /* host plan (tpu_compiler_compile only) */
  int32_t fusion_clusters;        /* elementwise clusters (one fused tile loop each) */
  int32_t fusion_ops_fused;       /* elementwise ops evaluated inside another op's loop */
  int32_t fusion_reduce_producers;/* elementwise clusters evaluated inside their reduce */
} tpu_compiler_stats_t;

/* ---- individual passes: *g is replaced by the rewritten graph (the old one is freed);
 * *out_changes = rewrites made. On error *g is left unchanged. */
tpu_status_t tpu_compiler_canonicalize(tpu_ir_graph_t* g, int* out_changes);
tpu_status_t tpu_compiler_fold_constants(tpu_ir_graph_t* g, int* out_changes);
tpu_status_t tpu_compiler_cse(tpu_ir_graph_t* g, int* out_changes);
tpu_status_t tpu_compiler_dce(tpu_ir_graph_t* g, int* out_changes);

/* Runs the pass pipeline on *g (rewritten in place). `name` labels the IR dump and may be
 * NULL. verify: 1 = run tpu_ir_verify after each pass, -1 = as TORCH_TPU_VERIFY_PASSES says.
 * out_stats may be NULL. Errors: a pass that breaks the verifier -> TPU_STATUS_INTERNAL
 * naming the pass. */
tpu_status_t tpu_compiler_run_ex(tpu_ir_graph_t* g, const char* name, int verify,
                                 tpu_compiler_stats_t* out_stats);
tpu_status_t tpu_compiler_run(tpu_ir_graph_t* g, const char* name, tpu_compiler_stats_t* out_stats);

/* Passes, then tpu_host_compile; adds the graph sizes, rewrite and fusion counts to the
 * process metrics and writes the TORCH_TPU_DUMP_IR files. *g is rewritten; the executable
 * is owned by the caller. Compile time is NOT added here (callers time the lowering too). */
tpu_status_t tpu_compiler_compile(tpu_ir_graph_t* g, const char* name, tpu_host_exe_t** out_exe);

/* TORCH_TPU_DUMP_IR: writes <dir>/<seq>_<name>.<stage>.txt (and <seq>_<name>.stablehlo.mlir
 * for stage "after"). No-op when the variable is unset; an
 * unwritable directory prints one warning to stderr and disables the dump. */
void tpu_compiler_dump(const tpu_ir_graph_t* g, const char* name, int seq, const char* stage);
int tpu_compiler_dump_next_seq(void); /* -1 when dumping is off */

#endif /* TPURT_COMPILER_H_ */
