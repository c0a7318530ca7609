/* record.c — debug recording of executed graphs (tpurt.h tpu_debug_*): the StableHLO
 * text of each executable tpu_op_run runs, with copies of its inputs and outputs, so
 * tests can run the same module on another XLA backend and compare. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "lower/record.h"

static atomic_int g_on;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_debug_graph_t** g_done;
static int g_n, g_cap;

void tpu_debug_record_graphs(bool enable) { atomic_store(&g_on, enable ? 1 : 0); }
int tpu_record_enabled(void) { return atomic_load_explicit(&g_on, memory_order_relaxed); }

void tpu_debug_graph_free(tpu_debug_graph_t* r) {
  if (!r) return;
  for (int k = 0; k < r->n_arrays; ++k) free(r->arrays[k].data);
  free(r->arrays); free(r->text); free(r->error); free(r);
}

tpu_debug_graph_t* tpu_debug_take_graph(void) {
  pthread_mutex_lock(&g_mu);
  tpu_debug_graph_t* r = NULL;
  if (g_n) { r = g_done[0]; memmove(g_done, g_done + 1, (size_t)(g_n - 1) * sizeof(*g_done)); g_n--; }
  pthread_mutex_unlock(&g_mu);
  return r;
}

static char* dup_str(const char* s) {
  size_t n = strlen(s) + 1;
  char* p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

tpu_debug_graph_t* tpu_record_begin(const char* op_name, const tpu_ir_graph_t* g, const tpu_host_scalar_t* scalars) {
  tpu_debug_graph_t* r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  snprintf(r->op_name, sizeof r->op_name, "%s", op_name);
  tpu_status_t st = tpu_ir_stablehlo_print(g, "main", &r->text);
  if (st) { r->error = dup_str(tpu_status_message(st)); tpu_status_free(st); }
  r->n_arrays = g->n_params + g->n_scalars + g->n_outputs;
  r->arrays = calloc((size_t)r->n_arrays, sizeof(*r->arrays));
  if (!r->arrays) { tpu_debug_graph_free(r); return NULL; }
  for (int v = 0; v < g->n_ops; ++v) { /* types of params and scalars, scalar values now */
    const tpu_ir_op_t* op = &g->ops[v];
    tpu_debug_array_t* a;
    if (op->opcode == TPU_IR_PARAM) { a = &r->arrays[op->i0]; a->role = TPU_DEBUG_PARAM; }
    else if (op->opcode == TPU_IR_SCALAR) { a = &r->arrays[g->n_params + op->i0]; a->role = TPU_DEBUG_SCALAR; }
    else continue;
    a->dtype = op->type.dtype; a->rank = op->type.rank;
    memcpy(a->dims, op->type.dims, sizeof(a->dims));
    if (op->opcode == TPU_IR_SCALAR) {
      a->nbytes = tpu_dtype_size(a->dtype);
      a->data = calloc(1, 8);
      if (!a->data) { tpu_debug_graph_free(r); return NULL; }
      const tpu_host_scalar_t* s = &scalars[op->i0];
      if (tpu_dtype_is_floating(a->dtype)) tpu_host_store_f64(a->data, a->dtype, s->f);
      else tpu_host_store_i64(a->data, a->dtype, s->i);
    }
  }
  for (int k = 0; k < g->n_outputs; ++k) {
    tpu_debug_array_t* a = &r->arrays[g->n_params + g->n_scalars + k];
    const tpu_ir_type_t* t = &g->ops[g->outputs[k]].type;
    a->role = TPU_DEBUG_OUTPUT; a->dtype = t->dtype; a->rank = t->rank;
    memcpy(a->dims, t->dims, sizeof(a->dims));
  }
  return r;
}

static void copy_out(tpu_debug_array_t* a, const tpu_host_view_t* v) {
  if (v->rank < 0 || v->dtype != a->dtype) return;
  int64_t n = 1;
  for (int d = 0; d < v->rank; ++d) n *= v->sizes[d];
  a->nbytes = (size_t)n * tpu_dtype_size(a->dtype);
  a->data = malloc(a->nbytes ? a->nbytes : 1);
  if (!a->data) return;
  tpu_host_view_t dst = *v;
  dst.data = a->data;
  int64_t s = 1;
  for (int d = v->rank - 1; d >= 0; --d) { dst.strides[d] = s; s *= v->sizes[d]; }
  if (n) tpu_status_free(tpu_host_k_copy(v, &dst));
}

void tpu_record_inputs(tpu_debug_graph_t* r, const tpu_host_view_t* params, int np) {
  for (int p = 0; p < np && p < r->n_arrays; ++p)
    if (r->arrays[p].role == TPU_DEBUG_PARAM) copy_out(&r->arrays[p], &params[p]);
}

void tpu_record_finish(tpu_debug_graph_t* r, const tpu_host_view_t* outs, int nout, tpu_status_t run_status) {
  int first = r->n_arrays - nout;
  for (int k = 0; k < nout && first >= 0; ++k)
    if (outs[k].rank >= 0 && outs[k].data) copy_out(&r->arrays[first + k], &outs[k]);
  if (run_status && !r->error) r->error = dup_str(tpu_status_message(run_status));
  pthread_mutex_lock(&g_mu);
  if (g_n == g_cap) {
    int cap = g_cap ? g_cap * 2 : 64;
    tpu_debug_graph_t** p = realloc(g_done, (size_t)cap * sizeof(*p));
    if (p) { g_done = p; g_cap = cap; }
  }
  if (g_n < g_cap) { g_done[g_n++] = r; r = NULL; }
  pthread_mutex_unlock(&g_mu);
  tpu_debug_graph_free(r); /* only if the list could not grow */
}
