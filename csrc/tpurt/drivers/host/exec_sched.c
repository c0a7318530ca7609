/* exec_sched.c — step scheduler for host executables (see exec_sched.h). */
#include <stdlib.h>
#include <string.h>

#include "drivers/host/exec_sched.h"
#include "runtime/runtime.h"

#define SCHED_FIT 1.1 /* a round's lanes may run 10% past its length */

/* ready[0..m) by decreasing priority, then traced order (insertion sort: kept nearly sorted between rounds). */
static void ready_sort(int32_t* r, int m, const double* prio) {
  for (int i = 1; i < m; ++i) {
    const int32_t x = r[i];
    int j = i;
    while (j > 0 && (prio[r[j - 1]] < prio[x] || (prio[r[j - 1]] == prio[x] && r[j - 1] > x))) { r[j] = r[j - 1]; --j; }
    r[j] = x;
  }
}

typedef struct {
  const tpu_ir_graph_t* g;
  const int32_t* unit;
  int32_t* pos;  /* per op: placed position, or -1 */
  int32_t* order;
  int n_placed;
  int bad;       /* an operand that is neither placed nor a view */
} emit_t;
/* Places the views among v's operands (and theirs) that are not placed yet; `self`: v's step, whose own ops
 * (an epilogue GEMM's reshapes) are placed with it. */
static void emit_views(emit_t* E, int v, int self, int depth) {
  const tpu_ir_graph_t* G = E->g;
  for (int k = 0; k < G->ops[v].n_in; ++k) {
    const int u = tpu_ir_operand(G, v, k);
    if (E->pos[u] >= 0) continue;
    if (E->unit[u] != TPU_HOST_SCHED_VIEW || depth > 256) { if (E->unit[u] != self) E->bad = 1; continue; }
    emit_views(E, u, self, depth + 1);
    int ready = !E->bad; /* (a view of the step's own GEMM waits for it) */
    for (int j = 0; j < G->ops[u].n_in && ready; ++j) ready = E->pos[tpu_ir_operand(G, u, j)] >= 0;
    if (ready) { E->pos[u] = E->n_placed; E->order[E->n_placed++] = u; }
  }
}
static void emit_op(emit_t* E, int v) {
  if (E->pos[v] >= 0) return;
  emit_views(E, v, E->unit[v], 0);
  E->pos[v] = E->n_placed;
  E->order[E->n_placed++] = v;
}

tpu_status_t tpu_host_sched_order(const tpu_host_sched_in_t* in, int32_t* order, int* out_changed,
                                  uint8_t* out_cut, tpu_host_sched_stats_t* out_stats) {
  const tpu_ir_graph_t* G = in->g;
  const int n = G->n_ops, nl = TPU_MAX(2, TPU_MIN(in->nth, TPU_HOST_GRP_MAX_LANES));
  const int32_t* unit = in->unit;
  const double *cost = in->cost, *bytes = in->bytes, *tb = in->tbytes;
  const size_t nn = (size_t)(n > 0 ? n : 1), ne = (size_t)(G->n_operands > 0 ? G->n_operands : 1);
  *out_changed = 0;
  for (int i = 0; i < n; ++i) order[i] = i;
  if (out_cut && n > 0) memset(out_cut, 0, (size_t)n);
  tpu_host_sched_stats_t S = {0};
  int32_t* base = malloc(nn * sizeof(int32_t));    /* per op: the step whose result it reads as storage, or -1 */
  int32_t* uoff = calloc(nn + 1, sizeof(int32_t)); /* per step: its ops uops[uoff[s] .. uoff[s + 1]) */
  int32_t* uops = malloc(nn * sizeof(int32_t));
  int32_t* ep = malloc(ne * sizeof(int32_t));      /* edges producer ep[i] -> reader er[i] (distinct pairs) */
  int32_t* er = malloc(ne * sizeof(int32_t));
  int32_t* soff = calloc(nn + 1, sizeof(int32_t)); /* per step: its readers succ[soff[s] .. soff[s + 1]) */
  int32_t* succ = malloc(ne * sizeof(int32_t));
  int32_t* poff = calloc(nn + 1, sizeof(int32_t)); /* per step: its producers pred[poff[s] .. poff[s + 1]) */
  int32_t* pred = malloc(ne * sizeof(int32_t));
  int32_t* mark = malloc(nn * sizeof(int32_t));
  int32_t* indeg = calloc(nn, sizeof(int32_t));
  int32_t* rem = malloc(nn * sizeof(int32_t));     /* per step: readers not placed yet */
  int32_t* ready = malloc(nn * sizeof(int32_t));
  int32_t* round = malloc(nn * sizeof(int32_t));
  int32_t* steps = malloc(nn * sizeof(int32_t));   /* steps placed, in order */
  int32_t* pos = malloc(nn * sizeof(int32_t));
  uint8_t* rlast = calloc(nn, 1);                  /* per placed step: the last of its round */
  uint8_t* inr = calloc(nn, 1);                    /* per step: in the round being placed */
  double* prio = calloc(nn, sizeof(double));
  tpu_status_t st = TPU_OK;
  if (!base || !uoff || !uops || !ep || !er || !soff || !succ || !poff || !pred || !mark || !indeg || !rem || !ready ||
      !round || !steps || !pos || !rlast || !inr || !prio) {
    st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory scheduling an executable");
    goto done;
  }
  /* ops per step (traced order within it) */
  int ns = 0;
  for (int v = 0; v < n; ++v) {
    base[v] = unit[v] >= 0 ? unit[v] : -1;
    if (unit[v] == TPU_HOST_SCHED_VIEW && G->ops[v].n_in > 0) base[v] = base[tpu_ir_operand(G, v, 0)];
    if (unit[v] >= 0) uoff[unit[v] + 1]++;
    if (unit[v] == v) ns++;
  }
  for (int v = 0; v < n; ++v) uoff[v + 1] += uoff[v];
  for (int v = 0; v < n; ++v) mark[v] = uoff[v];
  for (int v = 0; v < n; ++v) if (unit[v] >= 0) uops[mark[unit[v]]++] = v;
  /* edges between steps: distinct (producer, reader) pairs */
  int m = 0;
  for (int v = 0; v < n; ++v) mark[v] = -1;
  for (int s = 0; s < n; ++s) {
    if (unit[s] != s) continue;
    for (int i = uoff[s]; i < uoff[s + 1]; ++i)
      for (int k = 0; k < G->ops[uops[i]].n_in; ++k) {
        const int p = base[tpu_ir_operand(G, uops[i], k)];
        if (p < 0 || p == s || mark[p] == s) continue;
        if (p > s || unit[p] != p) goto done; /* not a step before s: leave the traced order */
        mark[p] = s;
        ep[m] = p; er[m] = s; m++;
        soff[p + 1]++; poff[s + 1]++;
      }
  }
  for (int v = 0; v < n; ++v) { soff[v + 1] += soff[v]; poff[v + 1] += poff[v]; }
  for (int v = 0; v < n; ++v) mark[v] = soff[v];
  for (int i = 0; i < m; ++i) succ[mark[ep[i]]++] = er[i];
  for (int v = 0; v < n; ++v) mark[v] = poff[v];
  for (int i = 0; i < m; ++i) pred[mark[er[i]]++] = ep[i];
  /* priorities: cost of the longest path to the end; the traced order's memory peak (the cap) */
  for (int s = n - 1; s >= 0; --s) {
    if (unit[s] != s) continue;
    double b = 0;
    for (int i = soff[s]; i < soff[s + 1]; ++i) if (prio[succ[i]] > b) b = prio[succ[i]];
    prio[s] = cost[s] + b;
    S.work_ns += cost[s];
    if (prio[s] > S.crit_ns) S.crit_ns = prio[s];
  }
  double live = 0;
  for (int s = 0; s < n; ++s) {
    if (unit[s] != s) continue;
    rem[s] = soff[s + 1] - soff[s];
    live += bytes[s];
    if (live + (tb ? tb[s] : 0) > S.peak0) S.peak0 = live + (tb ? tb[s] : 0);
    for (int i = poff[s]; i < poff[s + 1]; ++i) if (--rem[pred[i]] == 0) live -= bytes[pred[i]];
    if (rem[s] == 0) live -= bytes[s];
  }
  for (int s = 0; s < n; ++s) /* the cap: the traced peak plus one step's temporaries (the largest) */
    if (unit[s] == s && bytes[s] + (tb ? tb[s] : 0) > S.slack) S.slack = bytes[s] + (tb ? tb[s] : 0);
  const double cap = S.peak0 + S.slack;
  /* rounds */
  int nr = 0, placed = 0;
  for (int s = 0; s < n; ++s) {
    if (unit[s] != s) continue;
    indeg[s] = poff[s + 1] - poff[s];
    rem[s] = soff[s + 1] - soff[s];
    if (!indeg[s]) ready[nr++] = s;
  }
  live = 0;
  while (nr > 0) {
    ready_sort(ready, nr, prio);
    const int h = ready[0];
    double lane[TPU_HOST_GRP_MAX_LANES] = {0}, sum = 0, alloc = bytes[h] + (tb ? tb[h] : 0);
    for (int i = 0; i < nr; ++i) sum += cost[ready[i]];
    const double len = SCHED_FIT * (cost[h] > sum / nl ? cost[h] : sum / nl);
    int rn = 0;
    round[rn++] = h;
    lane[0] = cost[h];
    for (int i = 1; i < nr && !(in->solo && in->solo[h]); ++i) {
      const int c = ready[i];
      const double b = bytes[c] + (tb ? tb[c] : 0);
      if ((in->solo && in->solo[c]) || live + alloc + b > cap || !tpu_host_grp_lane_put(lane, nl, cost[c], len)) continue;
      alloc += b;
      round[rn++] = c;
    }
    double busiest = 0, alone = 0;
    if (rn > 1) { /* the group model: busiest thread + hand-off against the steps one by one */
      busiest = tpu_host_grp_busiest(lane, nl);
      for (int i = 0; i < rn; ++i) alone += tpu_host_grp_alone_ns(cost[round[i]], in->nth);
      if (!tpu_host_grp_wins(busiest, alone)) { rn = 1; alloc = bytes[h] + (tb ? tb[h] : 0); }
    }
    S.model_ns += rn > 1 ? busiest + TPU_HOST_GRP_HANDOFF_NS : tpu_host_grp_alone_ns(cost[h], in->nth);
    S.rounds++;
    S.wide += rn > 1;
    for (int i = 1; i < rn; ++i) /* traced order within the round */
      for (int j = i; j > 0 && round[j - 1] > round[j]; --j) { int32_t t = round[j]; round[j] = round[j - 1]; round[j - 1] = t; }
    live += alloc;
    if (live > S.peak1) S.peak1 = live;
    for (int i = 0; i < rn; ++i) {
      const int s = round[i];
      steps[placed++] = s;
      live -= tb ? tb[s] : 0;
      for (int k = poff[s]; k < poff[s + 1]; ++k) if (--rem[pred[k]] == 0) live -= bytes[pred[k]];
      if (rem[s] == 0) live -= bytes[s];
      for (int k = soff[s]; k < soff[s + 1]; ++k) indeg[succ[k]]--;
    }
    /* the round leaves the ready list; its readers whose producers are all placed join it */
    int w = 0;
    for (int i = 0; i < rn; ++i) inr[round[i]] = 1;
    for (int i = 0; i < nr; ++i)
      if (!inr[ready[i]]) ready[w++] = ready[i];
    nr = w;
    for (int i = placed - rn; i < placed; ++i)
      for (int k = soff[steps[i]]; k < soff[steps[i] + 1]; ++k)
        if (indeg[succ[k]] == 0) { indeg[succ[k]] = -1; ready[nr++] = succ[k]; }
    rlast[placed - 1] = 1;
  }
  if (placed != ns) goto done;
  /* ops: sources first, then each round's views, then its steps with their ops; the rest (views only outputs
   * read) last, in traced order */
  for (int v = 0; v < n; ++v) pos[v] = -1;
  emit_t E = {.g = G, .unit = unit, .pos = pos, .order = order, .n_placed = 0, .bad = 0};
  for (int v = 0; v < n; ++v) if (unit[v] == TPU_HOST_SCHED_SRC) emit_op(&E, v);
  for (int r0 = 0; r0 < placed && !E.bad;) {
    int r1 = r0;
    while (!rlast[r1]) ++r1;
    const int end = r1 + 1;
    for (int i = r0; i < end; ++i)
      for (int j = uoff[steps[i]]; j < uoff[steps[i] + 1]; ++j) emit_views(&E, uops[j], steps[i], 0);
    for (int i = r0; i < end; ++i)
      for (int j = uoff[steps[i]]; j < uoff[steps[i] + 1]; ++j) emit_op(&E, uops[j]);
    if (out_cut && !E.bad) out_cut[pos[steps[r0]]] = 1;
    r0 = end;
  }
  for (int v = 0; v < n && !E.bad; ++v) emit_op(&E, v);
  int ok = !E.bad && E.n_placed == n;
  for (int i = 0; i < n && ok; ++i) /* topological, every op once */
    for (int k = 0; k < G->ops[order[i]].n_in && ok; ++k) ok = pos[tpu_ir_operand(G, order[i], k)] < i;
  if (!ok) {
    for (int i = 0; i < n; ++i) order[i] = i;
    if (out_cut && n > 0) memset(out_cut, 0, (size_t)n);
    goto done;
  }
  for (int i = 0; i < n; ++i) *out_changed |= order[i] != i;
done:
  if (out_stats) *out_stats = S;
  free(base); free(uoff); free(uops); free(ep); free(er); free(soff); free(succ); free(poff); free(pred); free(mark);
  free(indeg); free(rem); free(ready); free(round); free(steps); free(pos); free(rlast); free(inr); free(prio);
  return st;
}

tpu_status_t tpu_host_sched_permute(const tpu_ir_graph_t* g, const int32_t* order, tpu_ir_graph_t* out) {
  tpu_ir_graph_init(out);
  const int n = g->n_ops;
  int32_t* pos = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
  out->ops = malloc((size_t)(n ? n : 1) * sizeof(tpu_ir_op_t));
  out->operands = malloc((size_t)(g->n_operands ? g->n_operands : 1) * sizeof(int32_t));
  if (!pos || !out->ops || !out->operands) {
    free(pos); tpu_ir_graph_free(out);
    return TPU_ERR(OUT_OF_MEMORY, "host: out of memory scheduling an executable");
  }
  for (int i = 0; i < n; ++i) pos[order[i]] = i;
  int off = 0;
  for (int i = 0; i < n; ++i) {
    tpu_ir_op_t* op = &out->ops[i];
    *op = g->ops[order[i]];
    for (int k = 0; k < op->n_in; ++k) out->operands[off + k] = pos[g->operands[op->in_off + k]];
    op->in_off = off;
    off += op->n_in;
  }
  out->n_ops = out->cap_ops = n;
  out->n_operands = out->cap_operands = off;
  out->n_params = g->n_params; out->n_scalars = g->n_scalars;
  out->n_outputs = g->n_outputs;
  for (int k = 0; k < g->n_outputs; ++k) out->outputs[k] = pos[g->outputs[k]];
  out->precision = g->precision;
  free(pos);
  return TPU_OK;
}
