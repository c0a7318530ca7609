/* symshape.h — size templates: one IR graph with symbolic dims, learned from graphs built at
 * different concrete sizes (internal).
 *
 * torch.compile(dynamic=True) hands a graph segment its sizes as int inputs ("size symbols"
 * s0, s1, ...: batch, sequence length). The runtime still builds and compiles one concrete
 * graph per size; a template records which size fields of those graphs (below) are functions
 * of the symbols, so a later size can be
 * checked (or predicted) without assuming anything:
 *
 *     tpu_ir_template_t* t;
 *     tpu_ir_template_create(g_4x12, (int64_t[]){4, 12}, 2, &t);   // sample 0: all fields constant
 *     int verdict; char why[256];
 *     tpu_ir_template_add(t, g_6x12, (int64_t[]){6, 12}, &verdict, why, sizeof why);
 *     // verdict TPU_IR_TEMPLATE_GENERALIZED: dims 48 -> 72 became 12*s0 (or s0*s1: both fit so far)
 *     tpu_ir_template_add(t, g_5x9, (int64_t[]){5, 9}, &verdict, why, sizeof why);
 *     // 45: only s0*s1 fits both earlier samples and this one; the other candidate is dropped
 *     tpu_ir_graph_t g; tpu_ir_template_instantiate(t, (int64_t[]){3, 7}, &g);  // the 3x7 graph
 *
 * Size fields: result dims, the attribute arrays a[][] (slice/pad bounds...), and a CONSTANT's
 * value when it is an integer n, or a float exactly 1.0/n or n/(n-1) (a mean's scale, an unbiased
 * variance's correction) — n is the field.
 * Field expressions (anti-unification): every integer field is c + k*m with m one of the
 * monomials 1, s_i, s_i*s_j (k, c integers). A field keeps every candidate consistent with all
 * samples so far; a size is PREDICTED when all candidates of every field agree on its value.
 * Everything else must be identical in all samples (opcodes, operands, dtypes, ranks, f0,
 * outputs, precision): a graph that differs there is not an instance (the lowering or the
 * passes chose different IR for that size) and the template is left unchanged.
 * Templates are never printed as StableHLO: each instantiated graph is concrete; the text form
 * (tpu_ir_template_print) writes symbolic fields as expressions ("12*s0", "s0*s1+1", "?" when
 * still ambiguous). Not thread-safe (one owner).
 */
#ifndef TPURT_IR_SYMSHAPE_H_
#define TPURT_IR_SYMSHAPE_H_

#include "ir/ir.h"

#define TPU_IR_TEMPLATE_MAX_SYMS 8      /* size symbols per template */
#define TPU_IR_TEMPLATE_MAX_SAMPLES 64  /* sizes remembered (the oldest beyond it are forgotten) */

typedef enum tpu_ir_template_verdict_e {
  TPU_IR_TEMPLATE_NOT_INSTANCE = 0, /* the graph differs beyond size fields (reason says where) */
  TPU_IR_TEMPLATE_PREDICTED,        /* the template predicted this graph exactly from earlier sizes */
  TPU_IR_TEMPLATE_GENERALIZED,      /* consistent, but only after learning (new varying field / choice) */
  TPU_IR_TEMPLATE_VERDICT_COUNT
} tpu_ir_template_verdict_t;

typedef struct tpu_ir_template_s tpu_ir_template_t;

/* A template whose only sample is g at sizes syms[0..n_syms). Copies g (g stays the caller's).
 * Errors: INVALID_ARGUMENT (NULL, g->status set, n_syms outside 0..TPU_IR_TEMPLATE_MAX_SYMS),
 * OUT_OF_MEMORY. *out_t = NULL on error. */
tpu_status_t tpu_ir_template_create(const tpu_ir_graph_t* g, const int64_t* syms, int n_syms,
                                    tpu_ir_template_t** out_t);
void tpu_ir_template_free(tpu_ir_template_t* t);

/* Adds the graph g built at sizes syms (n_syms as at create). *out_verdict says whether g is an
 * instance; NOT_INSTANCE writes the first difference into reason (NUL-terminated, truncated)
 * and leaves t unchanged. Errors (t unchanged): INVALID_ARGUMENT, OUT_OF_MEMORY. */
tpu_status_t tpu_ir_template_add(tpu_ir_template_t* t, const tpu_ir_graph_t* g, const int64_t* syms,
                                 int* out_verdict, char* reason, size_t reason_len);

/* The graph at sizes syms, as *out_g (initialized here; the caller frees it). Errors
 * (INVALID_ARGUMENT, message saying which): the first field whose candidates disagree at these
 * sizes (ambiguous: add a sample that varies it), a field that overflows or a dim that comes out
 * negative, a result that fails tpu_ir_verify; OUT_OF_MEMORY. *out_g is freed on error. */
tpu_status_t tpu_ir_template_instantiate(const tpu_ir_template_t* t, const int64_t* syms, tpu_ir_graph_t* out_g);

/* 1 if g is exactly the graph instantiate would give at syms (every op bytewise, every size field
 * one all candidates agree on, varying fields >= min_varying), else 0: the check of a graph built at
 * new sizes against the prediction, without building the prediction. Templates without extra slots. */
int tpu_ir_template_matches(const tpu_ir_template_t* t, const tpu_ir_graph_t* g, const int64_t* syms,
                            int64_t min_varying);

/* Templates with extra slots: besides the graph, each sample brings n_aux integers that are size
 * fields too (c + k*m; a capture's bindings: input/buffer/output layouts, offsets) and n_exact
 * words that must be identical in every sample (their structure: kinds, indexes, dtypes, ranks).
 * A sample whose counts or exact words differ is NOT_INSTANCE. instantiate_ex writes the graph
 * and the n_aux slots (out_aux) at syms, and refuses (INVALID_ARGUMENT) when a field that varies
 * comes out below min_varying (INT64_MIN: no bound). The plain functions are these with none. */
tpu_status_t tpu_ir_template_create_ex(const tpu_ir_graph_t* g, const int64_t* aux, int n_aux, const int64_t* exact,
                                       int n_exact, const int64_t* syms, int n_syms, tpu_ir_template_t** out_t);
tpu_status_t tpu_ir_template_add_ex(tpu_ir_template_t* t, const tpu_ir_graph_t* g, const int64_t* aux, int n_aux,
                                    const int64_t* exact, int n_exact, const int64_t* syms, int* out_verdict,
                                    char* reason, size_t reason_len);
tpu_status_t tpu_ir_template_instantiate_ex(const tpu_ir_template_t* t, const int64_t* syms, int64_t min_varying,
                                            tpu_ir_graph_t* out_g, int64_t* out_aux);
int tpu_ir_template_num_extra(const tpu_ir_template_t* t);
int tpu_ir_template_num_exact(const tpu_ir_template_t* t);
const int64_t* tpu_ir_template_exact(const tpu_ir_template_t* t); /* borrowed: the exact words */


int tpu_ir_template_num_samples(const tpu_ir_template_t* t);
int tpu_ir_template_num_symbolic(const tpu_ir_template_t* t); /* fields that vary with the sizes */
/* Text: the first sample's graph (tpu_ir_print), then one line per symbolic field
 * ("%3 (reshape) dims[0] = s0*s1"). Returns the bytes needed, NUL included (as tpu_ir_print). */
size_t tpu_ir_template_print(const tpu_ir_template_t* t, char* buf, size_t cap);

#endif /* TPURT_IR_SYMSHAPE_H_ */
