/* capture_sizes.c — size templates over the captures of one graph segment (tpurt.h
 * tpu_capture_size_check / tpu_capture_instantiate): a sample is the captured graph before the
 * compiler passes plus the capture's bindings (lower/trace.c tpu_capture_encode: layouts and
 * offsets are size fields, kinds and indexes exact words) plus the caller's extra integers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/symshape.h"
#include "lower/trace.h"
#include "tpurt.h"

struct tpu_size_template_s {
  tpu_ir_template_t* t;
  int n_sizes, n_extra; /* extra: the last n_extra slots are the caller's */
};

/* The capture's sample: slots (bindings, then extra), exact words (bindings, then n_extra). NULL
 * slots/exact with reason set: the capture cannot be a sample. */
static tpu_status_t sample_of(const tpu_capture_t* capture, const int64_t* extra, int n_extra, int64_t** slots,
                              int* n_slots, int64_t** exact, int* n_exact, char* reason, size_t reason_len) {
  *slots = *exact = NULL;
  if (!tpu_capture_pre_graph(capture)) {
    snprintf(reason, reason_len, "the capture kept no graph (TPU_CAPTURE_KEEP_GRAPH)");
    return TPU_OK;
  }
  int64_t *a = NULL, *e = NULL;
  int na = 0, ne = 0;
  TPU_RETURN_IF_ERROR(tpu_capture_encode(capture, &a, &na, &e, &ne, reason, reason_len));
  if (!a) return TPU_OK;
  int64_t* a2 = realloc(a, (size_t)(na + n_extra + 1) * sizeof(int64_t));
  int64_t* e2 = a2 ? realloc(e, (size_t)(ne + 1) * sizeof(int64_t)) : NULL;
  if (!a2 || !e2) { free(a2 ? a2 : a); free(e); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  if (n_extra) memcpy(a2 + na, extra, (size_t)n_extra * sizeof(int64_t));
  e2[ne] = n_extra;
  *slots = a2; *n_slots = na + n_extra; *exact = e2; *n_exact = ne + 1;
  return TPU_OK;
}

tpu_status_t tpu_capture_size_check(tpu_size_template_t** io_template, const tpu_capture_t* capture,
                                    const int64_t* sizes, int n_sizes, const int64_t* extra, int n_extra,
                                    int* out_verdict, char* reason, size_t reason_len) {
  if (!io_template || !capture || !out_verdict || !reason || !reason_len || n_sizes < 0 || (n_sizes && !sizes) ||
      n_extra < 0 || (n_extra && !extra))
    return TPU_ERR(INVALID_ARGUMENT, "tpu_capture_size_check: bad arguments");
  if (n_sizes > TPU_IR_TEMPLATE_MAX_SYMS)
    return TPU_ERR(INVALID_ARGUMENT, "size template: %d size inputs (at most %d)", n_sizes, TPU_IR_TEMPLATE_MAX_SYMS);
  *out_verdict = TPU_SIZE_TEMPLATE_NOT_INSTANCE;
  reason[0] = 0;
  const tpu_ir_graph_t* g = tpu_capture_pre_graph(capture);
  int64_t *slots = NULL, *exact = NULL;
  int ns = 0, ne = 0;
  TPU_RETURN_IF_ERROR(sample_of(capture, extra, n_extra, &slots, &ns, &exact, &ne, reason, reason_len));
  if (!slots) return TPU_OK;
  tpu_size_template_t* st = *io_template;
  tpu_status_t s = TPU_OK;
  if (!st) {
    st = calloc(1, sizeof(*st));
    if (!st) s = TPU_ERR(OUT_OF_MEMORY, "out of host memory");
    if (!s) s = tpu_ir_template_create_ex(g, slots, ns, exact, ne, sizes, n_sizes, &st->t);
    if (s) free(st);
    else {
      st->n_sizes = n_sizes; st->n_extra = n_extra;
      *io_template = st;
      *out_verdict = TPU_SIZE_TEMPLATE_FIRST;
    }
  } else if (n_sizes != st->n_sizes) {
    s = TPU_ERR(INVALID_ARGUMENT, "size template: %d sizes given, the template has %d", n_sizes, st->n_sizes);
  } else {
    int v = TPU_IR_TEMPLATE_NOT_INSTANCE;
    s = tpu_ir_template_add_ex(st->t, g, slots, ns, exact, ne, sizes, &v, reason, reason_len);
    *out_verdict = v == TPU_IR_TEMPLATE_PREDICTED ? TPU_SIZE_TEMPLATE_PREDICTED
                 : v == TPU_IR_TEMPLATE_GENERALIZED ? TPU_SIZE_TEMPLATE_GENERALIZED : TPU_SIZE_TEMPLATE_NOT_INSTANCE;
  }
  free(slots); free(exact);
  return s;
}

tpu_status_t tpu_capture_instantiate(const tpu_size_template_t* t, int device, const int64_t* sizes, int n_sizes,
                                     unsigned flags, int64_t* out_extra, int n_extra, tpu_capture_t** out_capture,
                                     char* reason, size_t reason_len) {
  if (!t || !out_capture || !reason || !reason_len || n_sizes < 0 || (n_sizes && !sizes) || n_extra < 0 ||
      (n_extra && !out_extra))
    return TPU_ERR(INVALID_ARGUMENT, "tpu_capture_instantiate: bad arguments");
  *out_capture = NULL;
  reason[0] = 0;
  if (n_sizes != t->n_sizes || n_extra != t->n_extra) {
    snprintf(reason, reason_len, "%d sizes and %d extra slots asked, the template has %d and %d", n_sizes, n_extra,
             t->n_sizes, t->n_extra);
    return TPU_OK;
  }
  for (int i = 0; i < n_sizes; ++i)
    if (sizes[i] < 2) { /* Dynamo specializes 0 and 1; a lowering may too */
      snprintf(reason, reason_len, "size %d is %lld (below 2)", i, (long long)sizes[i]);
      return TPU_OK;
    }
  int na = tpu_ir_template_num_extra(t->t), ne = tpu_ir_template_num_exact(t->t);
  int64_t* slots = malloc((size_t)(na + 1) * sizeof(int64_t));
  tpu_ir_graph_t* g = malloc(sizeof(*g));
  if (!slots || !g) { free(slots); free(g); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  tpu_status_t st = tpu_ir_template_instantiate_ex(t->t, sizes, 2, g, slots);
  if (st) {
    snprintf(reason, reason_len, "%s", tpu_status_message(st));
    int oom = tpu_status_code(st) == TPU_STATUS_OUT_OF_MEMORY;
    tpu_status_free(st);
    free(slots); free(g);
    return oom ? TPU_ERR(OUT_OF_MEMORY, "out of host memory") : TPU_OK;
  }
  if (n_extra) memcpy(out_extra, slots + na - n_extra, (size_t)n_extra * sizeof(int64_t));
  /* g is the capture's now (freed with it, or at once without TPU_CAPTURE_KEEP_GRAPH) */
  st = tpu_capture_decode(device, g, slots, na - n_extra, tpu_ir_template_exact(t->t), ne - 1, flags, out_capture, reason,
                          reason_len);
  free(slots);
  return st;
}

int tpu_capture_same(const tpu_capture_t* a, const tpu_capture_t* b, char* reason, size_t reason_len) {
  if (!reason || !reason_len) return 0;
  reason[0] = 0;
  const tpu_ir_graph_t *x = tpu_capture_pre_graph(a), *y = tpu_capture_pre_graph(b);
  if (!x || !y) { snprintf(reason, reason_len, "a capture kept no graph"); return 0; }
  if (x->n_ops != y->n_ops || x->n_operands != y->n_operands || x->n_params != y->n_params ||
      x->n_scalars != y->n_scalars || x->n_outputs != y->n_outputs || x->precision != y->precision ||
      memcmp(x->outputs, y->outputs, (size_t)x->n_outputs * sizeof(int32_t)) ||
      memcmp(x->operands, y->operands, (size_t)x->n_operands * sizeof(int32_t))) {
    snprintf(reason, reason_len, "the graphs differ in structure (%d and %d ops)", x->n_ops, y->n_ops);
    return 0;
  }
  for (int v = 0; v < x->n_ops; ++v)
    if (memcmp(&x->ops[v], &y->ops[v], sizeof(tpu_ir_op_t))) {
      snprintf(reason, reason_len, "%%%d (%s) differs", v, tpu_ir_opcode_name(x->ops[v].opcode));
      return 0;
    }
  int64_t *sa = NULL, *ea = NULL, *sb = NULL, *eb = NULL;
  int nsa = 0, nea = 0, nsb = 0, neb = 0, same = 0;
  char r2[8];
  tpu_status_t st = tpu_capture_encode(a, &sa, &nsa, &ea, &nea, r2, sizeof r2);
  if (!st) st = tpu_capture_encode(b, &sb, &nsb, &eb, &neb, r2, sizeof r2);
  if (st) { snprintf(reason, reason_len, "%s", tpu_status_message(st)); tpu_status_free(st); }
  else if (!sa || !sb) snprintf(reason, reason_len, "a capture's bindings are not encodable");
  else if (nea != neb || memcmp(ea, eb, (size_t)nea * sizeof(int64_t))) snprintf(reason, reason_len, "the binding structure differs");
  else if (nsa != nsb) snprintf(reason, reason_len, "the binding counts differ");
  else {
    same = 1;
    for (int i = 0; i < nsa && same; ++i)
      if (sa[i] != sb[i]) { same = 0; snprintf(reason, reason_len, "binding slot %d is %lld, captured %lld", i, (long long)sa[i], (long long)sb[i]); }
  }
  free(sa); free(ea); free(sb); free(eb);
  return same;
}

size_t tpu_size_template_print(const tpu_size_template_t* t, char* buf, size_t cap) {
  if (!t) { if (cap) buf[0] = 0; return 1; }
  return tpu_ir_template_print(t->t, buf, cap);
}

void tpu_size_template_free(tpu_size_template_t* t) {
  if (!t) return;
  tpu_ir_template_free(t->t);
  free(t);
}
