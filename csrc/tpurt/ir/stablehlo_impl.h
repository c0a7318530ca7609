/* stablehlo_impl.h — internal helpers shared by the StableHLO printer's files
 * (stablehlo.c: core, elementwise, views, reduce; stablehlo_ops.c: indexing, sort,
 * scans, conv, windows; stablehlo_custom.c: custom_call expansions).
 * Builders print one op and return its value id (-1 after an error, which is sticky
 * in P->st; every builder given -1 returns -1). */
#ifndef TPURT_IR_STABLEHLO_IMPL_H_
#define TPURT_IR_STABLEHLO_IMPL_H_

#include "ir/ir.h"

typedef struct {
  tpu_ir_type_t t;
  int arg;            /* function argument number, or -1 */
  int res_of, res_idx; /* result res_idx of multi-result op %m(res_of - 1); res_of 0 = none */
  int multi;
} shlo_val_t;

typedef struct {
  char* buf; size_t len, cap;
  shlo_val_t* vals; int n_vals, cap_vals;
  int* map;           /* graph value -> printer value */
  int indent;
  tpu_status_t st;    /* first error */
} shlo_t;

void shlo_printf(shlo_t* P, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
int shlo_fail(shlo_t* P, tpu_status_t st);
const tpu_ir_type_t* shlo_type(shlo_t* P, int v);
void shlo_tensor(shlo_t* P, const tpu_ir_type_t* t);
void shlo_name(shlo_t* P, int v);
void shlo_i64s(shlo_t* P, const int64_t* a, int n);   /* array<i64: ...> */
void shlo_padding(shlo_t* P, const int64_t (*pad)[2], int n); /* padding = dense<[[lo, hi], ...]> */
void shlo_list(shlo_t* P, const int64_t* a, int n);   /* [a, b, ...] */
tpu_ir_type_t shlo_ty(int dtype, int rank, const int64_t* dims);
tpu_ir_type_t shlo_ty_like(shlo_t* P, int v, int dtype);

int shlo_begin(shlo_t* P, const char* name, int n, const int* in);
int shlo_end(shlo_t* P, int r, int n, const int* in, const tpu_ir_type_t* rt);
int shlo_begin_multi(shlo_t* P, const char* name, int nres, int n, const int* in);
int shlo_end_multi(shlo_t* P, int r, int nres, int n, const int* in, const tpu_ir_type_t* rts);
int shlo_region_begin(shlo_t* P, int n, const int* dtypes); /* returns the first block argument */
void shlo_region_end(shlo_t* P, int n, const int* rets);

int shlo_op1(shlo_t* P, const char* name, int x, const tpu_ir_type_t* rt);
int shlo_un(shlo_t* P, const char* name, int x);
int shlo_bin(shlo_t* P, const char* name, int a, int b);
int shlo_cmp(shlo_t* P, int dir, int a, int b);          /* dir: tpu_ir_cmp_t */
int shlo_select(shlo_t* P, int p, int a, int b);
int shlo_convert(shlo_t* P, int x, int dtype);            /* plain stablehlo.convert */
int shlo_convert_host(shlo_t* P, int x, int dtype);       /* IR CONVERT semantics (host) */
int shlo_const(shlo_t* P, const tpu_ir_type_t* t, double f, int64_t i);
int shlo_const_like(shlo_t* P, int x, int dtype, double v);
int shlo_scalar_const(shlo_t* P, int dtype, double v);
int shlo_bcast(shlo_t* P, int x, int rank, const int64_t* dims, const int64_t* bdims);
int shlo_bcast_to(shlo_t* P, int x, const tpu_ir_type_t* like, const int64_t* bdims);
int shlo_reshape(shlo_t* P, int x, int rank, const int64_t* dims);
int shlo_transpose(shlo_t* P, int x, const int64_t* perm);
int shlo_slice(shlo_t* P, int x, const int64_t* start, const int64_t* limit, const int64_t* stride);
int shlo_slice_dim(shlo_t* P, int x, int dim, int64_t lo, int64_t hi);
int shlo_concat(shlo_t* P, int n, const int* xs, int dim);
int shlo_iota(shlo_t* P, const tpu_ir_type_t* t, int dim);
int shlo_pad(shlo_t* P, int x, int pv, const int64_t* lo, const int64_t* hi);
int shlo_dot(shlo_t* P, int a, int b, int nb, const int64_t* lb, const int64_t* rb, int nc,
             const int64_t* lc, const int64_t* rc, const tpu_ir_type_t* rt);
/* fn(P, a, b, ctx) prints one product (dot, convolution); shlo_with_precision sums the products
 * that the matmul precision prec (tpu_ir_precision_t) of f32 operands a, b implies. */
typedef int (*shlo_prod_fn)(shlo_t* P, int a, int b, void* ctx);
int shlo_with_precision(shlo_t* P, int prec, int a, int b, shlo_prod_fn fn, void* ctx);
int shlo_identity(shlo_t* P, int monoid, int dtype);     /* rank-0 identity of the monoid */
void shlo_monoid_region(shlo_t* P, int monoid, int dtype);
int shlo_reduce(shlo_t* P, int monoid, int x, const int64_t* flags);

/* stablehlo_ops.c: every opcode stablehlo.c does not handle; in[] are the operands' values. */
int shlo_print_other(shlo_t* P, const tpu_ir_graph_t* g, int v, const int* in);
/* POOL_ARGMAX expansion (used by stablehlo_custom.c). */
int shlo_pool_argmax(shlo_t* P, const tpu_ir_op_t* op, int x);
/* stablehlo.convolution; dl/dr/dout name the first two dims of lhs/rhs/result: "bf" (batch,
 * feature), "fb", "oi", "io"; spatial dims follow in order. pad[d] = {low, high}. */
int shlo_conv_general(shlo_t* P, int lhs, int rhs, const char* dl, const char* dr, const char* dout, int nsp,
                      const int64_t* strides, const int64_t (*pad)[2], const int64_t* lhs_dil,
                      const int64_t* rhs_dil, int64_t groups, const tpu_ir_type_t* rt);
/* stablehlo_rng.c: TPU_IR_RNG (seed, offset rank-0 values). */
int shlo_rng(shlo_t* P, const tpu_ir_op_t* op, int seed, int offset);
/* stablehlo_linalg.c: TRI_SOLVE (a, b) and CHOLESKY (a) custom targets. */
int shlo_tri_solve(shlo_t* P, const tpu_ir_op_t* op, int a, int b);
int shlo_cholesky(shlo_t* P, const tpu_ir_op_t* op, int a);
/* stablehlo_custom.c: TPU_IR_CUSTOM targets. */
int shlo_print_custom(shlo_t* P, const tpu_ir_graph_t* g, int v, const int* in);

#endif /* TPURT_IR_STABLEHLO_IMPL_H_ */
