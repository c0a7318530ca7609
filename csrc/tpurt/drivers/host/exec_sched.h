/* exec_sched.h — the host executor's step scheduler (internal to drivers/host; exec.c's planner calls it).
 *
 * A compiled graph comes in the order its tracer wrote it: a backward graph computes one layer's input gradient,
 * then that layer's weight gradient, then the next layer's input gradient..., so independent steps are seldom
 * next to each other and step groups (exec.c's plan_groups: runs of CONSECUTIVE steps that read none of each
 * other's results, one step per pool thread) stay narrow. tpu_host_sched_order places the steps again in rounds,
 * each a candidate group:
 *
 *     ready = the steps whose producers are all placed
 *     while ready:  h = the ready step with the longest estimated path (step costs) to the graph's end
 *                   round = h + ready steps, by that priority, that fit on the other pool threads (each onto the
 *                           least loaded) within h's cost (or an even share of all ready work when that is
 *                           larger: an optimizer's many tiny updates), and within the memory cap
 *                   a round of 2+ is kept when the group model below beats running its steps one by one,
 *                   else h is placed alone; a solo step (in->solo: plan_groups never groups it) is always alone
 *
 * The memory cap is the peak of live temporaries (step results, freed after their last reader) that the traced
 * order has under the same model, plus one step's (the largest: two steps side by side hold both their results). Views are placed just before the round that first reads them; the ops a step
 * evaluates (cluster members, a fused reduce's producer, an epilogue's GEMM) just before it, in traced order;
 * parameters, scalars, constants and scalar batches first. exec.c re-plans the permuted graph and keeps it only
 * when that plan's modelled time is lower and its modelled peak of temporaries no higher than the traced order's.
 * Every op computes what it computed before from the same operands: the same bits. Nothing here is thread-unsafe
 * (no globals). Known gap (one reason it is off by default): the order follows data edges only, so a step that can
 * fail at run time (an index check: gather, index_select, scatter, embedding_bag) may now run after an in-place
 * write that preceded it in traced order; the call still raises, but that write has happened (step groups already
 * allow this within a group). The executable reports the traced graph (tpu_host_exe_graph), not the permuted one.
 *
 *     int32_t order[n];  int changed;
 *     tpu_host_sched_in_t in = {.g = g, .unit = unit, .cost = cost, .bytes = bytes, .nth = 2};
 *     TPU_RETURN_IF_ERROR(tpu_host_sched_order(&in, order, &changed, NULL, NULL));
 *     if (changed) { tpu_ir_graph_t pg; TPU_RETURN_IF_ERROR(tpu_host_sched_permute(g, order, &pg)); ... }
 */
#ifndef TPURT_HOST_EXEC_SCHED_H_
#define TPURT_HOST_EXEC_SCHED_H_

#include "ir/ir.h"

/* The group cost model (shared with plan_groups). A step alone on nth pool threads: small ones run on one
 * thread, larger ones split, imperfectly (on the quiet 2-core machine a compiled UNet step took 5.3-5.5 ms of
 * device wall with one thread, 4.2-4.9 with two: 0.7 of the work at 2 threads, taken as 1.4 / nth at more). */
#define TPU_HOST_GRP_HANDOFF_NS 3000.0 /* a group's pool hand-off and wait */
#define TPU_HOST_GRP_MAX_LANES 16
static inline double tpu_host_grp_alone_ns(double c, int nth) { return c < 8000 ? c : 1.4 * c / nth + 2000; }
/* Solo steps (exec.c's step_solo decides, for plan_groups and tpu_host_sched_order alike): a memory-bound step that
 * splits over the pool on its own, i.e. reaches 2 pool chunks of its kernel's grain (divided by
 * TORCH_TPU_GRAPH_GRAIN_DIV when the run applies it): an elementwise cluster or lone convert (not a GEMM's epilogue)
 * of 2 x 32K output elements. It is never grouped: in a group it would run whole on one thread,
 * and the next step, split by index over the pool, would read half of it from the other core's cache (with the
 * vCPUs on different L3s bf16 softmax_backward's two 524K-element converts side by side cost 552-635 us a call
 * against 139-190 split: benchmarks/RESULTS.md, [stall] session 13). No other step is solo: products, reduces /
 * cumsums / pads / concats (they split by output lines or merged copy rows, often not at all: a full sum below 256K
 * elements, a dim-0 cat of contiguous tensors), kernels that run on one thread (index_select, gather, index_put,
 * sort, iota...), custom calls. */
/* The group model: a step of cost c onto the least loaded of lanes[0..nl) when it ends there by `limit`; returns
 * whether it was placed. Costs offered largest first (plan_groups, plan_model; the scheduler's rounds). */
static inline int tpu_host_grp_lane_put(double* lane, int nl, double c, double limit) {
  int j = 0;
  for (int l = 1; l < nl; ++l) if (lane[l] < lane[j]) j = l;
  if (lane[j] + c > limit) return 0;
  lane[j] += c;
  return 1;
}
static inline double tpu_host_grp_busiest(const double* lane, int nl) {
  double b = 0;
  for (int l = 0; l < nl; ++l) if (lane[l] > b) b = lane[l];
  return b;
}
/* Whether steps whose busiest lane takes `busiest` ns run faster as a group than one by one (`alone`: the sum of
 * their tpu_host_grp_alone_ns). */
static inline int tpu_host_grp_wins(double busiest, double alone) { return busiest + TPU_HOST_GRP_HANDOFF_NS < 0.9 * alone; }

enum { TPU_HOST_SCHED_VIEW = -1, TPU_HOST_SCHED_SRC = -2 };
typedef struct {
  const tpu_ir_graph_t* g; /* in its traced order (topological) */
  const int32_t* unit;     /* per op: the step (op index) whose run evaluates it (a step: itself), or VIEW (placed
                            * before its first reader), or SRC (placed first: parameters, scalars, constants,
                            * scalar batches) */
  const double* cost;      /* per step: estimated single-thread ns */
  const double* bytes;     /* per step: its temporary's bytes (0: none, or memory that lives to the end) */
  const double* tbytes;    /* per step (optional): bytes it holds only while it runs (an epilogue's GEMM result) */
  const uint8_t* solo;     /* per step (optional): 1 = never in a round with other steps (solo steps above) */
  int nth;                 /* pool threads planned for (>= 2) */
} tpu_host_sched_in_t;

typedef struct {
  double work_ns, crit_ns; /* all steps' cost; the longest path */
  int rounds, wide;        /* rounds placed; of them with 2+ steps */
  double model_ns;         /* the rounds' modelled time (plan_groups' model: a round of 2+ as one group) */
  double peak0, peak1;     /* modelled peak of temporaries (bytes): traced order, the new order */
  double slack;            /* the cap is peak0 + slack: the largest step's temporaries (bytes + tbytes) */
} tpu_host_sched_stats_t;

/* Fills out_order (n_ops entries: the op placed i-th); *out_changed = 0 when that is the traced order (also when
 * the rounds would not give a topological order: an op this does not know how to place). out_cut (optional, n_ops
 * entries): 1 at the position of each round's first step, else 0 (plan_groups starts a new run there, so its groups
 * are the rounds, or parts of them). out_stats optional. Errors: OUT_OF_MEMORY. */
tpu_status_t tpu_host_sched_order(const tpu_host_sched_in_t* in, int32_t* out_order, int* out_changed,
                                  uint8_t* out_cut, tpu_host_sched_stats_t* out_stats);
/* g with its ops in `order` (operands and outputs renumbered) into *out (initialized here; the caller frees it
 * with tpu_ir_graph_free). Errors: OUT_OF_MEMORY. */
tpu_status_t tpu_host_sched_permute(const tpu_ir_graph_t* g, const int32_t* order, tpu_ir_graph_t* out);

/* Testing hook: whether tpu_host_compile reorders steps (default off: no wall-time gain shown yet on the loaded
 * 2-core machine; TORCH_TPU_EXEC_SCHED=1, read once, turns it on; only when step groups are on and the pool has 2+
 * threads); applies to executables compiled afterwards. Returns the previous setting. (exec.c) */
int tpu_host_set_exec_sched(int on);

#endif /* TPURT_HOST_EXEC_SCHED_H_ */
