/* capture_sizes.c — size templates over the captures of one graph segment (tpurt.h
 * tpu_capture_size_check): the captured executable's graph is a sample of ir/symshape.h's
 * template at the segment's sizes. */
#include <stdlib.h>
#include <string.h>

#include "ir/symshape.h"
#include "lower/trace.h"
#include "tpurt.h"

struct tpu_size_template_s {
  tpu_ir_template_t* t;
  int n_sizes;
};

tpu_status_t tpu_capture_size_check(tpu_size_template_t** io_template, const tpu_capture_t* capture,
                                    const int64_t* sizes, int n_sizes, int* out_verdict, char* reason,
                                    size_t reason_len) {
  if (!io_template || !capture || !out_verdict || !reason || !reason_len || n_sizes < 0 || (n_sizes && !sizes))
    return TPU_ERR(INVALID_ARGUMENT, "tpu_capture_size_check: bad arguments");
  if (n_sizes > TPU_IR_TEMPLATE_MAX_SYMS)
    return TPU_ERR(INVALID_ARGUMENT, "size template: %d size inputs (at most %d)", n_sizes, TPU_IR_TEMPLATE_MAX_SYMS);
  *out_verdict = TPU_SIZE_TEMPLATE_NOT_INSTANCE;
  reason[0] = 0;
  const tpu_ir_graph_t* g = tpu_capture_graph(capture);
  if (!g) return TPU_ERR(INVALID_ARGUMENT, "size template: the capture has no executable graph");
  tpu_size_template_t* st = *io_template;
  if (!st) {
    st = calloc(1, sizeof(*st));
    if (!st) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
    tpu_status_t s = tpu_ir_template_create(g, sizes, n_sizes, &st->t);
    if (s) { free(st); return s; }
    st->n_sizes = n_sizes;
    *io_template = st;
    *out_verdict = TPU_SIZE_TEMPLATE_FIRST;
    return TPU_OK;
  }
  if (n_sizes != st->n_sizes)
    return TPU_ERR(INVALID_ARGUMENT, "size template: %d sizes given, the template has %d", n_sizes, st->n_sizes);
  int v = TPU_IR_TEMPLATE_NOT_INSTANCE;
  TPU_RETURN_IF_ERROR(tpu_ir_template_add(st->t, g, sizes, &v, reason, reason_len));
  *out_verdict = v == TPU_IR_TEMPLATE_PREDICTED ? TPU_SIZE_TEMPLATE_PREDICTED
               : v == TPU_IR_TEMPLATE_GENERALIZED ? TPU_SIZE_TEMPLATE_GENERALIZED : TPU_SIZE_TEMPLATE_NOT_INSTANCE;
  return TPU_OK;
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
