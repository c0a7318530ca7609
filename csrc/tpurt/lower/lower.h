/* lower.h — ATen op -> IR lowerings (internal).
 *
 * ONE lowering per ATen op family. A lowering reads the op's arguments through
 * the lw_* helpers, builds an IR graph with the tpu_ir_* builders and binds each
 * output with lw_output(). It never looks at data, strides or runtime scalar
 * values: tensor shapes/dtypes and structural arguments (ints, bools, strings,
 * lists) are the executable-cache key; Scalars and floats are runtime
 * parameters, so `x * 0.5` and `x * 0.25` share one executable.
 *
 *     static tpu_status_t lower_neg(tpu_lower_ctx_t* cx) {     // aten::neg.out(self, *, out)
 *       int x = lw_input(cx, 0, lw_compute_dtype(cx, 0));       // param, opmath dtype
 *       return lw_output(cx, 0, tpu_ir_unary(&cx->g, TPU_IR_NEG, x));
 *     }
 *     TPU_LOWERING("aten::neg.out", lower_neg)
 *
 * Registration: each lowering file ends with a table (see lower_registry.h).
 * Errors: a lowering returns a status; builder errors are sticky in cx->g.status.
 */
#ifndef TPURT_LOWER_H_
#define TPURT_LOWER_H_

#include "ir/ir.h"

#define TPU_LOWER_MAX_PARAMS 256 /* cat/stack of long lists binds one parameter per tensor */
#define TPU_LOWER_MAX_SCALARS 128 /* a _foreach_ op's Scalar[] binds one runtime scalar per tensor */

typedef enum { TPU_BIND_ARG = 0, TPU_BIND_LIST, TPU_BIND_OUT } tpu_bind_src_t;
typedef struct { int16_t src; int16_t arg; int32_t index; } tpu_tensor_bind_t;
typedef enum { TPU_SBIND_VALUE = 0, TPU_SBIND_GEN_SEED, TPU_SBIND_GEN_OFFSET, TPU_SBIND_LIST_DOUBLE } tpu_sbind_kind_t;
typedef struct { int16_t kind; int16_t arg; int32_t index; } tpu_scalar_bind_t;

/* A check on runtime scalar values, evaluated on every call before enqueueing (so a
 * bad value raises synchronously even though the executable is shared): value(arg)
 * <cmp> (arg2 >= 0 ? value(arg2) : bound) must hold, else msg (printf with the
 * value(s) as %g) becomes an INVALID_ARGUMENT error. */
#define TPU_LOWER_MAX_CHECKS 4
#define TPU_LOWER_MAX_ARG_OUTS 4
typedef struct { int16_t arg, arg2; int32_t cmp; double bound; char msg[112]; } tpu_scalar_check_t;

typedef struct tpu_lower_ctx_s {
  tpu_ir_graph_t g;
  const char* op_name;
  const tpu_arg_t* args;
  int nargs;
  const tpu_tensor_t* outs;
  int nouts;
  /* filled by the helpers: where each graph parameter comes from at run time */
  int n_tbind, n_sbind;
  tpu_tensor_bind_t tbind[TPU_LOWER_MAX_PARAMS];
  tpu_scalar_bind_t sbind[TPU_LOWER_MAX_SCALARS];
  int n_checks;
  tpu_scalar_check_t checks[TPU_LOWER_MAX_CHECKS];
  int n_arg_outs;         /* extra outputs written into tensor arguments (lw_output_arg) */
  int16_t arg_outs[TPU_LOWER_MAX_ARG_OUTS];
  int gen_arg;            /* argument holding the generator (-1: none) */
  uint64_t rng_increment; /* Philox counters to reserve per run */
  /* Non-NULL while trace.c lowers one recorded op into a fused graph: the helpers then take
   * inputs from earlier ops' values or trace-wide params and record outputs there instead. */
  struct tpu_trace_embed_s* embed;
  /* Non-NULL while foreach.c runs a single-tensor lowering for one element of a _foreach_
   * list op: the helpers map argument and output numbers back to the list op's. */
  struct tpu_lower_sub_s* sub;
} tpu_lower_ctx_t;

typedef tpu_status_t (*tpu_lower_fn)(tpu_lower_ctx_t* cx);
/* key_scalars (optional, 0 = none): bit i set makes the VALUE of Scalar/float
 * argument i part of the executable-cache key, for the rare argument that picks
 * an algorithm rather than feeding arithmetic (a vector norm's order: inf -> max,
 * 2 -> sqrt(sum x^2), p -> pow). Only such declared arguments may be read with
 * lw_key_scalar(); every other Scalar stays a runtime parameter.
 * key_class (optional): when set, the key holds key_class(i, value) instead of the
 * value, for an argument whose few special values pick a form and whose other
 * values all lower to one graph that reads it as a runtime parameter (pow's
 * exponent: 2 -> x*x, any other -> pow(x, e)); the lowering must then decide only
 * on what the class tells apart, so every value of a class shares one executable. */
typedef int32_t (*tpu_key_class_fn)(int arg, double value);
/* shapes (optional): the op's output dtypes and sizes (contiguous strides, data NULL) from its
 * argument records (args as tpu_op_run gets them, without outs), written as *out_n <= max records into
 * out_meta; device is the call's. TPU_STATUS_UNSUPPORTED declines (arguments outside the rule, bad ones
 * included: the caller takes its usual path, PyTorch's meta function and its errors); any other error is
 * the op's and is raised (a negative repeat count). Two kinds (shapes_reads_data):
 *  - pure (false): sizes from records alone, exactly what the meta function gives, for ops whose meta
 *    function is Python (~35 us a call) with sizes that vary per call (embedding_bag's id count) or
 *    missing (_logcumsumexp): the glue asks the rule instead of the meta function on a meta-cache miss;
 *  - data-dependent (true): reads the tensor data its sizes depend on (nonzero's count) back, so it
 *    waits for the queue: the glue asks it only once the meta function failed.
 * The runtime reaches it through tpu_op_shapes_found (registry.c). */
typedef tpu_status_t (*tpu_shapes_fn)(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max,
                                      int* out_n);
typedef struct {
  const char* name; tpu_lower_fn fn; uint32_t key_scalars; tpu_key_class_fn key_class;
  tpu_shapes_fn shapes; bool shapes_reads_data;
} tpu_lowering_t;
/* key_class for coefficients whose only special value is 1 (add/sub's alpha, addmm's beta/alpha) */
static inline int32_t lw_key_class_is_one(int arg, double value) { (void)arg; return value == 1.0; }
/* Tables write entries as {name, fn}: key_scalars defaults to 0 without a warning. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
/* Value of a Scalar/float argument declared in key_scalars; dflt if None. */
static inline double lw_key_scalar(const tpu_lower_ctx_t* cx, int i, double dflt) {
  if (i < 0 || i >= cx->nargs) return dflt;
  const tpu_arg_t* a = &cx->args[i];
  if (a->kind == TPU_ARG_DOUBLE || (a->kind == TPU_ARG_SCALAR && tpu_dtype_is_floating(a->scalar_dtype))) return a->f;
  if (a->kind == TPU_ARG_SCALAR || a->kind == TPU_ARG_INT || a->kind == TPU_ARG_BOOL) return (double)a->i;
  return dflt;
}
/* Argument i is a Scalar (not a tensor) declared in key_scalars and equal to 1. */
static inline int lw_key_scalar_is_one(const tpu_lower_ctx_t* cx, int i) {
  if (i < 0 || i >= cx->nargs) return 0;
  const tpu_arg_t* a = &cx->args[i];
  return (a->kind == TPU_ARG_SCALAR || a->kind == TPU_ARG_DOUBLE) && lw_key_scalar(cx, i, 0) == 1.0;
}

/* ---- argument access (i = schema argument index) */
int lw_is_none(const tpu_lower_ctx_t* cx, int i);
int lw_is_tensor(const tpu_lower_ctx_t* cx, int i);       /* device tensor or CPU scalar tensor */
int lw_is_scalar_arg(const tpu_lower_ctx_t* cx, int i);   /* SCALAR or DOUBLE */
int64_t lw_int(const tpu_lower_ctx_t* cx, int i, int64_t dflt); /* INT/BOOL; dflt if None */
const char* lw_str(const tpu_lower_ctx_t* cx, int i, const char* dflt);
int lw_int_list(const tpu_lower_ctx_t* cx, int i, const int64_t** out_vals); /* -1 if None */
int lw_dtype_of(const tpu_lower_ctx_t* cx, int i);        /* tensor/scalar dtype */
int lw_rank_of(const tpu_lower_ctx_t* cx, int i);
const int64_t* lw_sizes_of(const tpu_lower_ctx_t* cx, int i);
const tpu_tensor_t* lw_out_meta(const tpu_lower_ctx_t* cx, int k);
int lw_list_len(const tpu_lower_ctx_t* cx, int i);
const tpu_tensor_t* lw_list_meta(const tpu_lower_ctx_t* cx, int i, int j); /* NULL if None entry */

/* ---- graph inputs */
/* Argument i as an IR value: a parameter for device tensors, a runtime scalar
 * for Scalars/doubles/CPU 0-dim tensors; converted to dtype (-1 keeps it). */
int lw_input(tpu_lower_ctx_t* cx, int i, int dtype);
int lw_list_input(tpu_lower_ctx_t* cx, int i, int j, int dtype);
int lw_out_input(tpu_lower_ctx_t* cx, int k, int dtype);   /* current contents of output k */
/* A runtime scalar from argument i (Scalar/double), as dtype; rank 0. */
int lw_scalar(tpu_lower_ctx_t* cx, int i, int dtype);
/* Requires value(arg) <cmp> bound (or <cmp> value(arg2) when arg2 >= 0) on every call. */
void lw_check_scalar(tpu_lower_ctx_t* cx, int arg, int cmp, double bound, int arg2, const char* msg);
/* (seed, offset) runtime scalars from the generator argument i; reserves `counters`. */
void lw_rng_state(tpu_lower_ctx_t* cx, int i, uint64_t counters, int* out_seed, int* out_offset);

/* ---- size decisions (dynamic shapes). A size template (lower/capture_sizes.c) learns every size field
 * of a captured graph as c + k*m of the size inputs and instantiates new sizes without lowering again,
 * so a lowering whose IR depends on its sizes any other way (a floor division, a threshold, a
 * divisibility test: `(n - 1) / 2`, `n < 16`) computes that value with lw_size_decide: it returns
 * op(a, b) and, while a capture is lowered, records (op, a, b, result) into the sample, so that an
 * instantiation at other sizes evaluates op again and refuses (captures instead) when the result is
 * not the one the template predicts. a and b must themselves be sizes (c + k*m) or decided values.
 * Eager and fused eager: only the value. */
typedef enum {
  TPU_SIZE_DECIDE_FLOOR_DIV = 0, /* floor(a / b), b > 0 */
  TPU_SIZE_DECIDE_CEIL_DIV,      /* ceil(a / b), b > 0 */
  TPU_SIZE_DECIDE_REM,           /* a - b * floor(a / b), b > 0 */
  TPU_SIZE_DECIDE_LT,            /* a < b: 1 or 0 */
  TPU_SIZE_DECIDE_EQ,            /* a == b: 1 or 0 */
  TPU_SIZE_DECIDE_ADAPTIVE_WINDOW, /* the longest adaptive pooling window of a inputs into b outputs:
                                    * max over o < b of ceil((o + 1) a / b) - floor(o a / b); 1 <= b <= 2^20 */
  TPU_SIZE_DECIDE_COUNT
} tpu_size_decide_op_t;
int64_t lw_size_decide(tpu_lower_ctx_t* cx, int op, int64_t a, int64_t b);
/* op(a, b) into *out; 0 when op is unknown or b <= 0 for a division (then *out = 0). */
int tpu_size_decide_eval(int op, int64_t a, int64_t b, int64_t* out);
/* (trace.c) records a decision into the graph being embedded (cx->embed set) */
void tpu_trace_embed_size_decision(tpu_lower_ctx_t* cx, int op, int64_t a, int64_t b, int64_t r);

/* ---- shape/dtype helpers */
int lw_bcast(tpu_lower_ctx_t* cx, int v, int rank, const int64_t* dims); /* numpy-style */
int lw_bcast_like(tpu_lower_ctx_t* cx, int v, int like);
int lw_const_like(tpu_lower_ctx_t* cx, double value, int like);
/* v, the result of reducing `like` over the dims flagged in `flags`, broadcast back to like's shape. */
int lw_unreduce(tpu_lower_ctx_t* cx, int v, int like, const int64_t* flags);   /* splat of like's shape+dtype */
int lw_const(tpu_lower_ctx_t* cx, double value, int dtype, int rank, const int64_t* dims);
/* v[..., lo:hi, ...] along dim (negative: from the end), every other dim whole. */
int lw_slice_dim(tpu_lower_ctx_t* cx, int v, int dim, int64_t lo, int64_t hi);
/* x reduced with `monoid` over the dims flagged in flags (dropped); x itself when none is flagged. */
int lw_reduce(tpu_lower_ctx_t* cx, int monoid, int x, const int64_t* flags);
/* x != 0 as bool (x itself when bool): count_nonzero, the 0-norm */
int lw_nonzero_mask(tpu_lower_ctx_t* cx, int x);
/* The ord vector norm of x over the flagged dims (dropped), in x's dtype: the one p-norm ladder of
 * linalg.vector_norm, renorm, cdist, embedding_renorm_ and weight norm (ord 2). 0 counts nonzeros,
 * 2 = sqrt(sum x^2), 1 = sum |x|, +-inf = max / min |x|, else sum(|x|^ord)^(1/ord). */
int lw_pnorm(tpu_lower_ctx_t* cx, int x, double ord, const int64_t* flags);
/* a CUSTOM op (i0 = target, i1, a[0][0..1] = a0, a1) of result type t over n inputs; -1 if an input is -1 */
int lw_custom_a(tpu_lower_ctx_t* cx, int target, int64_t i1, int64_t a0, int64_t a1, const tpu_ir_type_t* t, int n,
                const int* in);
static inline int lw_custom(tpu_lower_ctx_t* cx, int target, int64_t i1, const tpu_ir_type_t* t, int n, const int* in) {
  return lw_custom_a(cx, target, i1, 0, 0, t, n, in);
}
/* Binds v as an extra output written into tensor argument `arg`, for ops that update an
 * input their schema does not mark as written (native_batch_norm's running stats). Call
 * after every lw_output. */
tpu_status_t lw_output_arg(tpu_lower_ctx_t* cx, int arg, int v);
/* Binds v as output k: converted to the output's dtype, broadcast to its shape.
 * An absent output (record ndim == -1: an undefined tensor the meta function
 * returned, e.g. a masked-off gradient) gets a dummy and v is ignored (may be -1). */
tpu_status_t lw_output(tpu_lower_ctx_t* cx, int k, int v);
tpu_status_t lw_fail(tpu_lower_ctx_t* cx, tpu_status_code_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* PyTorch type promotion over arguments (tensors, 0-dim tensors, wrapped scalars). */
int tpu_promote_types(int a, int b);
int lw_result_type(const tpu_lower_ctx_t* cx, int n, const int* arg_idx);
int tpu_can_cast(int from, int to);
int tpu_opmath_dtype(int dtype);
const char* tpu_dtype_c10_name(int dtype); /* "Float", "BFloat16": c10::ScalarType names in messages */
const char* tpu_dtype_cpp_name(int dtype); /* "float", "c10::BFloat16": caffe2::TypeMeta names */  /* f16/bf16 -> f32; others unchanged */
int lw_norm_dim(tpu_lower_ctx_t* cx, int64_t dim, int rank); /* wraps negative dims; -1 on error */

/* ---- common op shapes */
tpu_status_t lw_unary_float(tpu_lower_ctx_t* cx, int opcode);   /* out = op(self), float math */
tpu_status_t lw_binary(tpu_lower_ctx_t* cx, int opcode, int a, int b, int alpha, int out_k);

/* ---- fused-eager embedding (trace.c), called by the helpers when cx->embed is set */
int tpu_trace_embed_tparam(tpu_lower_ctx_t* cx, int src, int i, int j, const tpu_tensor_t* t, int dtype);
int tpu_trace_embed_sparam(tpu_lower_ctx_t* cx, int kind, int i, int j, int dtype);
/* v already converted/broadcast like lw_output does; arg >= 0: an lw_output_arg output. */
tpu_status_t tpu_trace_embed_output(tpu_lower_ctx_t* cx, int k, int arg, int v);

/* ---- per-element lowering of _foreach_ ops (foreach.c), called by the helpers when cx->sub is set.
 * sub_input maps an input reference (scalar = 0: tensor src/arg/index; 1: scalar kind/arg/index)
 * to the list op's and returns 1 with *out_v when the value already exists (an input shared by
 * the elements, or a constant); sub_note remembers a newly made one; sub_out maps output k;
 * sub_arg maps a plain argument (-1: a list element). */
int tpu_lower_sub_input(tpu_lower_ctx_t* cx, int scalar, int* src, int* i, int* j, int* out_v);
void tpu_lower_sub_note(tpu_lower_ctx_t* cx, int scalar, int src, int i, int j, int v);
int tpu_lower_sub_out(const tpu_lower_ctx_t* cx, int k);
int tpu_lower_sub_arg(const tpu_lower_ctx_t* cx, int i);
/* ---- shape rules (tpu_lowering_t.shapes) */
/* Tensor argument i, or NULL when it is not a present tensor (None, another kind, i >= nargs). */
const tpu_tensor_t* lw_args_tensor(const tpu_arg_t* args, int nargs, int i);
/* TPU_STATUS_UNSUPPORTED "<what>: arguments outside its C shape rule": a rule declining a call */
tpu_status_t lw_shapes_decline(const char* what);
/* Data-dependent rules (infer.c): .shapes = tpu_shapes_X, .shapes_reads_data = true */
tpu_status_t tpu_shapes_nonzero(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max, int* out_n);
tpu_status_t tpu_shapes_masked_select(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max,
                                      int* out_n);
tpu_status_t tpu_shapes_repeat_interleave(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max,
                                          int* out_n);
tpu_status_t tpu_shapes_bincount(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max, int* out_n);
tpu_status_t tpu_shapes_unique2(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max, int* out_n);
tpu_status_t tpu_shapes_unique_consecutive(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max,
                                           int* out_n);
/* A pure rule: one result shaped and typed like tensor argument i (ops without a meta function) */
tpu_status_t lw_shapes_like_arg(int device, const tpu_arg_t* args, int nargs, int i, tpu_tensor_t* out_meta, int max,
                                int* out_n);

/* The lowering registered under an op name (registry.c); NULL if none. */
const tpu_lowering_t* tpu_lower_find(const char* op_name);

/* Registration tables (each lowering file defines one; registry.c lists them). */
#define TPU_LOWERING_TABLE(name) const tpu_lowering_t name[]
#define TPU_LOWERING_END {NULL, NULL}
extern const tpu_lowering_t tpu_lowerings_eltwise[];
extern const tpu_lowering_t tpu_lowerings_reduce[];
extern const tpu_lowering_t tpu_lowerings_matmul[];
extern const tpu_lowering_t tpu_lowerings_nn[];
extern const tpu_lowering_t tpu_lowerings_index[];
extern const tpu_lowering_t tpu_lowerings_factory[];
extern const tpu_lowering_t tpu_lowerings_shape[];
extern const tpu_lowering_t tpu_lowerings_optim[];
extern const tpu_lowering_t tpu_lowerings_conv[];
extern const tpu_lowering_t tpu_lowerings_norm_pool[];
extern const tpu_lowering_t tpu_lowerings_attention[];
extern const tpu_lowering_t tpu_lowerings_misc[];
extern const tpu_lowering_t tpu_lowerings_linalg[];
extern const tpu_lowering_t tpu_lowerings_special[];
extern const tpu_lowering_t tpu_lowerings_grid_ctc[];
extern const tpu_lowering_t tpu_lowerings_foreach[];

#endif /* TPURT_LOWER_H_ */
