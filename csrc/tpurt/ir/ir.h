/* ir.h — the StableHLO-shaped graph IR of libtpurt (internal).
 *
 * A graph is a list of ops in topological order; the value of op i is "%i".
 * Every op has one result with a static type (dtype + dims). Elementwise ops
 * require operands of identical shape (broadcasts are explicit, as in
 * StableHLO); dtypes follow each op's rule (see tpu_ir_verify).
 *
 *     tpu_ir_graph_t g; tpu_ir_graph_init(&g);
 *     int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, (int64_t[]){4, 8});  // %0: f32[4,8]
 *     int s = tpu_ir_scalar(&g, TPU_DTYPE_F32);                       // %1: runtime scalar
 *     int y = tpu_ir_binary(&g, TPU_IR_MUL, x, tpu_ir_broadcast(&g, s, 2, (int64_t[]){4, 8}, NULL));
 *     tpu_ir_output(&g, y);
 *     // g.status != TPU_OK if any builder call failed (errors are sticky; -1 propagates)
 *
 * Builders never abort: a bad call records the first error in g->status and
 * returns -1; every builder given a -1 operand returns -1. Not thread-safe.
 */
#ifndef TPURT_IR_H_
#define TPURT_IR_H_

#include "common/common.h"

typedef enum tpu_ir_opcode_e {
  /* leaves */
  TPU_IR_PARAM = 0,   /* i0 = tensor parameter index */
  TPU_IR_SCALAR,      /* rank-0 runtime scalar; i0 = scalar parameter index */
  TPU_IR_CONSTANT,    /* rank-0 constant; f0 (floating/bool) or i0 (integral) */
  TPU_IR_IOTA,        /* i0 = dimension along which values count 0,1,2... */
  /* elementwise unary (operand and result types equal unless noted) */
  TPU_IR_NEG, TPU_IR_ABS, TPU_IR_SIGN, TPU_IR_EXP, TPU_IR_EXPM1, TPU_IR_LOG, TPU_IR_LOG1P,
  TPU_IR_SQRT, TPU_IR_RSQRT, TPU_IR_SIN, TPU_IR_COS, TPU_IR_TAN, TPU_IR_TANH, TPU_IR_LOGISTIC,
  TPU_IR_FLOOR, TPU_IR_CEIL, TPU_IR_ROUND_EVEN, TPU_IR_TRUNC, TPU_IR_ERF, TPU_IR_NOT,
  TPU_IR_ASIN, TPU_IR_ACOS, TPU_IR_ATAN, TPU_IR_SINH, TPU_IR_COSH, TPU_IR_ASINH, TPU_IR_ACOSH,
  TPU_IR_ATANH, TPU_IR_ERFINV, TPU_IR_LGAMMA, TPU_IR_DIGAMMA, TPU_IR_RECIPROCAL,
  TPU_IR_IS_FINITE,   /* result bool */
  TPU_IR_IS_NAN,      /* result bool */
  TPU_IR_IS_INF,      /* result bool */
  /* elementwise binary */
  TPU_IR_ADD, TPU_IR_SUB, TPU_IR_MUL, TPU_IR_DIV, TPU_IR_REM, TPU_IR_POW, TPU_IR_MAX,
  TPU_IR_MIN, TPU_IR_AND, TPU_IR_OR, TPU_IR_XOR, TPU_IR_SHL, TPU_IR_SHR, TPU_IR_ATAN2,
  TPU_IR_FLOOR_DIV,   /* integral: floor division (not in StableHLO; printed as a composite) */
  TPU_IR_FMOD,        /* C fmod semantics (StableHLO remainder) */
  TPU_IR_COMPARE,     /* i0 = tpu_ir_cmp_t; result bool */
  /* elementwise ternary */
  TPU_IR_SELECT,      /* (pred bool, on_true, on_false) */
  TPU_IR_CLAMP,       /* (min, x, max) as StableHLO */
  TPU_IR_CONVERT,     /* result dtype = type.dtype */
  /* views (no data movement when the operand is materialized) */
  TPU_IR_BROADCAST,   /* broadcast_in_dim: a[0][i] = result dim of operand dim i */
  TPU_IR_RESHAPE,
  TPU_IR_TRANSPOSE,   /* a[0] = permutation */
  TPU_IR_SLICE,       /* a[0] start, a[1] limit, a[2] stride */
  TPU_IR_REVERSE,     /* a[0][d] = 1 to reverse dim d */
  /* data movement / library ops */
  TPU_IR_CONCAT,      /* i0 = dimension; n operands */
  TPU_IR_PAD,         /* (x, pad_value rank-0); a[0] low, a[1] high (may be negative) */
  TPU_IR_DOT,         /* dot_general: (lhs [B..., M, K], rhs [B..., K, N]) -> [B..., M, N];
                         i0 = number of batch dims (canonical form, lowerings reshape to it) */
  TPU_IR_REDUCE,      /* i0 = tpu_ir_monoid_t; a[0][d] = 1 to reduce dim d (result drops them) */
  TPU_IR_ARGREDUCE,   /* i0 = 0 argmax / 1 argmin, i1 = dim; result i64, dim dropped */
  TPU_IR_CUMULATIVE,  /* i0 = monoid (sum/prod/max/min), i1 = dim */
  TPU_IR_GATHER,      /* torch.gather: (x, index i64); i0 = dim; result shape = index shape;
                         i1 = 1: negative indices are an error (torch.gather, scatter, index_add) instead
                         of wrapping (advanced indexing, take) */
  TPU_IR_INDEX_SELECT,/* (x, index i64 rank-1); i0 = dim; i1 = 1: ids outside [0, size) are an error (no wrap,
                         embedding_bag's message); i1 = 2: the same with index_select's message;
                         i1 = 3: the same with embedding_bag's "offsets[0] has to be 0" message */
  TPU_IR_SCATTER,     /* (x, index, src): torch scatter along i0 = dim; i1 = 0 replace / 1 add /
                         2 multiply / 3 max / 4 min (max/min propagate NaN) */
  TPU_IR_INDEX_PUT,   /* (x, values, idx_0..idx_{n-1}) advanced indexing on leading dims
                         a[0][j] = indexed dim for idx_j; i1 = accumulate */
  TPU_IR_RNG,         /* (seed u64 as i64 scalar, offset scalar) -> i0 = 0 uniform [0,1) / 1 normal /
                         2 uniform 32-bit integers [0, 2^32) / 3 uniform 64-bit patterns (modes 2, 3: i64) */
  TPU_IR_SORT,        /* (x) i0 = dim, i1 = descending, result values (stable) */
  TPU_IR_ARGSORT,     /* (x) i0 = dim, i1 = descending, result i64 indices (stable) */
  TPU_IR_CONV,        /* convolution (x [N, C, *S], w [O, C/groups, *K]) -> [N, O, *S']; canonical
                         channels-first; a[0] stride, a[1] padding (low=high), a[2] dilation per
                         spatial dim; i0 = groups, i1 = number of spatial dims; f0 unused.
                         Transposed convs are lowered to this (or to CUSTOM) by conv lowerings. */
  TPU_IR_REDUCE_WINDOW, /* pooling over trailing spatial dims: i0 = monoid, i1 = spatial dims;
                         a[0] window, a[1] stride, a[2] low padding (see kernel for ceil/count rules) */
  TPU_IR_CUSTOM,      /* custom_call: i0 = tpu_ir_custom_t target, i1 / a[][] target attributes;
                         n operands; the StableHLO printer expands each target */
  TPU_IR_OPCODE_COUNT
} tpu_ir_opcode_t;

/* custom_call targets (drivers provide fused kernels for them) */
typedef enum tpu_ir_custom_e {
  TPU_IR_CUSTOM_NONE = 0,
  TPU_IR_CUSTOM_ATTENTION,      /* fused scaled-dot-product attention (flash-style) */
  TPU_IR_CUSTOM_ATTENTION_BWD,
  TPU_IR_CUSTOM_CONV_BWD_INPUT, /* gradient of TPU_IR_CONV w.r.t. its input (conv transpose) */
  TPU_IR_CUSTOM_CONV_BWD_WEIGHT,
  TPU_IR_CUSTOM_POOL_BWD,       /* gradient of max/avg pooling */
  TPU_IR_CUSTOM_EMBEDDING_BAG, /* embedding_bag forward (drivers/host/embed.c): i1 bits 0-1 the mode (0 sum, 1 mean,
                                   2 max), bit 2 per-sample weights given, bit 3 include_last_offset (B = offsets - 1),
                                   bits 4-5 the result; a[0][0] padding_idx (-1: none). Result 1: (ids [N] i64/i32,
                                   offsets [no]) -> offset2bag [N] (the bags, found here only); 2: (ids, offset2bag,
                                   offsets) -> bag_size [>= no] (ids' dtype; offsets give B); 3 (max): (weight [nw, D],
                                   ids, offset2bag) -> max_indices [B, D]; 0: sum / mean (weight, ids, offset2bag, psw
                                   [N]?), max (weight, max_indices, bag_size) -> [B, D] (weight's dtype, f32 / f64 math).
                                   Run-time errors: offsets[0] != 0, an offset outside [0, N], include_last_offset's
                                   offsets[B] > N, an id outside [0, nw) (PyTorch's words) */
  TPU_IR_CUSTOM_TOPK,
  TPU_IR_CUSTOM_UPSAMPLE,
  TPU_IR_CUSTOM_UPSAMPLE_BWD,
  TPU_IR_CUSTOM_POOL_ARGMAX,    /* (x [B..., *S]) -> i64 [B..., *O]: flat spatial index of each max-pool
                                   window's max (PyTorch CPU rules); i1 = spatial dims, a[0] window,
                                   a[1] stride (0: adaptive windows), a[2] padding then dilation (drivers/host/pool.c) */
  TPU_IR_CUSTOM_LOGCUMSUMEXP,   /* (x f32/f64) -> same type: log(cumsum(exp(x))) along i1 = dim,
                                   computed stably in double (drivers/host/scan.c) */
  /* dense linear algebra (f32/f64; batch dims leading and equal across operands; math in double;
   * drivers/host/linalg.c; semantics in notes/custom_targets.md) */
  TPU_IR_CUSTOM_CHOLESKY,       /* (A [B..., n, n]) -> [B..., n, n+1]: lower Cholesky factor in columns
                                   0..n-1 (upper triangle 0), column n row 0 = LAPACK potrf info;
                                   i1 = 0, or 1/2: a nonzero info fails the run ("linalg.cholesky_ex"/"cholesky") */
  TPU_IR_CUSTOM_LU,             /* (A [B..., m, n]) -> [B..., m, n+2]: LAPACK getrf with partial pivoting:
                                   packed L\U in columns 0..n-1, 1-based pivots in column n rows
                                   0..min(m,n)-1, info in column n+1 row 0; i1 = 1 (square A): factor A^T
                                   when the operand is row-major contiguous (PyTorch's det/slogdet rule) */
  TPU_IR_CUSTOM_LU_SOLVE,       /* (LU [B..., n, n], pivots [B..., n] 1-based any dtype, R [B..., n, k]) -> X
                                   [B..., n, k]: A X = R with A = P L U; i1 = 1 solves A^T X = R */
  TPU_IR_CUSTOM_TRI_SOLVE,      /* (A [B..., n, n], R [B..., n, k]) -> X [B..., n, k]: op(A) X = R reading one
                                   triangle; i1 bit 0 = upper, bit 1 = unit diagonal, bit 2 = solve A^T */
  TPU_IR_CUSTOM_SPECIAL,        /* elementwise special function in double (x f32/f64) -> same type
                                   (drivers/host/special.c): i1 = tpu_ir_special_t, a[0][0] = its order */
  TPU_IR_CUSTOM_CHANNEL_STATS,  /* (x [A, B, I]) -> [2, B] mean, biased var over (A, I); (g, x, m [B]) -> [2, B]
                                   sum g, sum g (x - m): batch/group norm (drivers/host/norm.h) */
  TPU_IR_CUSTOM_CHANNEL_AFFINE, /* (x [A, B, I], a [B], c [B]) -> x a + c; (u, v, a, b, c) -> u a + v b + c */
  /* decompositions, flat-packed per batch element (f32/f64 in, same dtype out, math in double;
   * drivers/host/linalg2.c; layouts in notes/custom_targets.md) */
  TPU_IR_CUSTOM_QR,             /* (A [B..., m, n]) -> [B..., m*mq + kr*n]: Householder QR (LAPACK signs);
                                   i1 = 0 reduced (mq = kr = min(m,n)), 1 complete (mq = kr = m), 2 R only (mq = 0) */
  TPU_IR_CUSTOM_EIGH,           /* (A [B..., n, n]) -> [B..., n (+ n*n)]: ascending eigenvalues, then V row-major
                                   (eigenvectors in columns) if i1 bit 1; i1 bit 0: read the upper triangle */
  TPU_IR_CUSTOM_SVD,            /* (A [B..., m, n]) -> [B..., k] (S descending) or, i1 bit 1, [B..., m*ku + k + kv*n]
                                   (U, S, Vh); i1 bit 0 full_matrices (ku = m, kv = n; else k = min(m,n)) */
  TPU_IR_CUSTOM_GRID_SAMPLE,    /* (x [N, C, H, W], grid [N, Ho, Wo, 2]) -> [N, C, Ho, Wo], or 3-D: (x [N, C, D, H, W],
                                   grid [N, Do, Ho, Wo, 3]) -> [N, C, Do, Ho, Wo] (drivers/host/grid_sample.c);
                                   i1 = mode (0 bilinear, 1 nearest, 2 bicubic) | padding << 2 (0 zeros, 1 border,
                                   2 reflection) | align_corners << 4 */
  TPU_IR_CUSTOM_GRID_SAMPLE_BWD,/* (grad [N, C, Ho, Wo], x, grid) -> d x (i1 bit 5 = 0) or d grid (bit 5 = 1); i1 as above */
  TPU_IR_CUSTOM_CTC,            /* (log_probs [T, N, C], targets [N, S] or [sum] i64, in_len [N] i64, tgt_len [N] i64)
                                   -> [N, 1 + T*(2*Smax+1)]: nll, then log_alpha [T, 2*Smax+1] (drivers/host/ctc.c);
                                   i1 = blank, a[0][0] = 1 if targets are concatenated (1-D) */
  TPU_IR_CUSTOM_CTC_BWD,        /* (grad [N], log_probs, targets, in_len, tgt_len, nll [N], log_alpha [N, T, 2*Smax+1])
                                   -> d log_probs [T, N, C]; i1 = blank, a[0][0] as CTC, a[0][1] = zero_infinity */
  TPU_IR_CUSTOM_ROWS_SOFTMAX,   /* (x [A, N, I] f32/f64) -> same: softmax over N; i1 = 1 log_softmax (drivers/host/rows.h) */
  TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD, /* (g, y [A, N, I]) -> y (g - sum_N g y); i1 = 1: g - exp(y) sum_N g */
  TPU_IR_CUSTOM_ROWS_LAYER_NORM, /* (x [M, N] f32, mean [M], rstd [M], w [N]?, b [N]?) -> (x - mean) rstd [w] [+ b];
                                   i1 bit 0 w given, bit 1 b given (drivers/host/rows.h) */
  TPU_IR_CUSTOM_ROWS_LAYER_NORM_BWD, /* (g [M, N], x, mean [M], rstd [M], w [N]?) -> d x; i1 bit 0 w given */
  TPU_IR_CUSTOM_GELU,           /* (x f32, any shape) -> x Phi(x), exact (erf) GELU (drivers/host/rows.h) */
  TPU_IR_CUSTOM_GELU_BWD,       /* (g, x f32, same shape) -> g (Phi(x) + x phi(x)) */
  TPU_IR_CUSTOM_COL_SUMS,       /* i1 = 0: (x [M, N] f32, bf16 or f16) -> [N] f32 sums over M; i1 = 1: (g [M, N], x, mean [M], rstd [M])
                                   -> [2, N]: sum_M g (x - mean) rstd, sum_M g (drivers/host/rows.h) */
  TPU_IR_CUSTOM_SILU,           /* (x f32, any shape) -> x / (1 + exp(-x)) (drivers/host/rows.h) */
  TPU_IR_CUSTOM_SILU_BWD,       /* (g, x f32, same shape) -> g s (1 + x (1 - s)), s = sigmoid(x) */
  TPU_IR_CUSTOM_LERP,           /* (start, end f32 [same shape], weight f32 [rank 0 or same shape]) -> lerp, one rounding */
  TPU_IR_CUSTOM_ADDC,           /* (self, t1, t2 f32 [same shape], value f32 [rank 0]) -> i1 0: fma(value t1, t2, self),
                                   1: self + (value t1) / t2 (drivers/host/rows.h) */
  /* group norm over x [N, C, I] (I = HxW; G = C / Cg groups; drivers/host/norm.h); [N, G] / [C] vectors in the
     statistics dtype (f32, or f64 with f64 x); bf16 / f16 x read as they are with f32 statistics */
  TPU_IR_CUSTOM_GROUP_NORM_STATS, /* (x [N, C, I], eps f64 rank 0) -> [2, N, G]: mean, 1 / sqrt(var + eps) per group */
  TPU_IR_CUSTOM_GROUP_NORM,     /* (x, mean [N, G], rstd [N, G], w [C]?, b [C]?) -> y [N, C, I] (x's dtype);
                                   i1 bit 0 w given, bit 1 b given */
  TPU_IR_CUSTOM_GROUP_NORM_SUMS, /* (g, x [N, C, I], mean, rstd [N, G]) -> [2, N + 1, C]: [0, n, c] sum g, [1, n, c]
                                   sum g (x - mean) per (n, c); [0, N, c] d bias, [1, N, c] d weight */
  TPU_IR_CUSTOM_GROUP_NORM_BWD, /* (g, x [N, C, I], mean, rstd [N, G], w [C]?, sums [2, N + 1, C]?) -> d x;
                                   i1 bit 0 w given, bit 1 sums given (else computed as GROUP_NORM_SUMS would) */
  TPU_IR_CUSTOM_HISTC_EDGES,    /* (min f64 rank 0, max f64 rank 0) -> [2] f64 (lo, hi): histc's range from its
                                   data's extrema, widened by tpu_ir_histc_widen(i1 = the data's dtype) when they are
                                   equal; the run-time error INVALID_ARGUMENT "torch.histc: range of [lo, hi] is not
                                   finite" / "torch.histc: max must be larger than min" (PyTorch's checks) */
  TPU_IR_CUSTOM_EMBEDDING_BAG_BWD, /* (grad [B, D], ids [N], offset2bag [N], bag_size [>= B], psw [N]?) -> d weight
                                   [nw, D] (grad's dtype); i1 bits 0-1 / 2 as EMBEDDING_BAG, bit 3 scale_grad_by_freq;
                                   max: (grad, max_indices [B, D], bag_size [>= B]) -> d weight; bit 4: (grad, weight
                                   [nw, D], ids, offset2bag) -> d psw [N] instead; a[0][0] padding_idx */
  TPU_IR_CUSTOM_COUNT
} tpu_ir_custom_t;

/* TPU_IR_CUSTOM_SPECIAL functions (i1) */
typedef enum tpu_ir_special_e {
  TPU_IR_SPECIAL_I0 = 0,    /* modified Bessel function of the first kind, order 0 */
  TPU_IR_SPECIAL_I0E,       /* exp(-|x|) I0(x) */
  TPU_IR_SPECIAL_I1,
  TPU_IR_SPECIAL_I1E,       /* exp(-|x|) I1(x) */
  TPU_IR_SPECIAL_POLYGAMMA, /* n-th derivative of digamma, n = a[0][0] >= 1 */
  TPU_IR_SPECIAL_COUNT
} tpu_ir_special_t;

typedef enum tpu_ir_cmp_e {
  TPU_IR_CMP_EQ = 0, TPU_IR_CMP_NE, TPU_IR_CMP_LT, TPU_IR_CMP_LE, TPU_IR_CMP_GT, TPU_IR_CMP_GE,
  TPU_IR_CMP_COUNT
} tpu_ir_cmp_t;

typedef enum tpu_ir_monoid_e {
  TPU_IR_MONOID_SUM = 0, TPU_IR_MONOID_PROD, TPU_IR_MONOID_MAX, TPU_IR_MONOID_MIN,
  TPU_IR_MONOID_AND, TPU_IR_MONOID_OR,
  TPU_IR_MONOID_NANMAX, /* max that propagates NaN (torch.amax semantics are NaN-propagating) */
  TPU_IR_MONOID_COUNT
} tpu_ir_monoid_t;

/* Precision of f32 products (StableHLO precision_config; torch.set_float32_matmul_precision):
 * HIGHEST = f32 products ("highest"); HIGH = 3-pass bf16: x = hi + lo with hi = bf16(x),
 * lo = bf16(x - hi), hi*hi + hi*lo + lo*hi accumulated in f32 ("high"); DEFAULT = one bf16 pass
 * hi*hi, f32 accumulation ("medium"). bf16/f16/f64 operands ignore it. Zero is HIGHEST. */
typedef enum tpu_ir_precision_e {
  TPU_IR_PRECISION_HIGHEST = 0, TPU_IR_PRECISION_HIGH = 1, TPU_IR_PRECISION_DEFAULT = 2,
  TPU_IR_PRECISION_COUNT
} tpu_ir_precision_t;

typedef struct tpu_ir_type_s {
  int32_t dtype;
  int32_t rank;
  int64_t dims[TPU_MAX_DIMS];
} tpu_ir_type_t;

#define TPU_IR_MAX_INLINE_OPERANDS 4

/* Plain old data: zero-initialized, hashed and compared bytewise. */
typedef struct tpu_ir_op_s {
  int32_t opcode;
  int32_t n_in;
  int32_t in_off;  /* operands: g->operands[in_off .. in_off + n_in) */
  int32_t prec;    /* DOT, CONV, CUSTOM CONV_BWD_*: tpu_ir_precision_t of f32 operands; 0 elsewhere */
  tpu_ir_type_t type;
  int64_t i0, i1;
  double f0;
  int64_t a[3][TPU_MAX_DIMS];
} tpu_ir_op_t;

#define TPU_IR_MAX_OUTPUTS 16        /* per op lowering (foreach ops are split to stay within it) */
#define TPU_IR_MAX_GRAPH_OUTPUTS 1024 /* any graph (fused-eager traces and captures bind many outputs) */

typedef struct tpu_ir_graph_s {
  tpu_ir_op_t* ops;
  int32_t n_ops, cap_ops;
  int32_t* operands;
  int32_t n_operands, cap_operands;
  int32_t n_params, n_scalars;
  int32_t outputs[TPU_IR_MAX_GRAPH_OUTPUTS];
  int32_t n_outputs;
  int32_t precision;   /* tpu_ir_precision_t that tpu_ir_dot gives new DOTs (0: HIGHEST) */
  tpu_status_t status; /* first builder error (owned) */
} tpu_ir_graph_t;

void tpu_ir_graph_init(tpu_ir_graph_t* g);
void tpu_ir_graph_free(tpu_ir_graph_t* g);
/* A deep copy of g (status not copied; g must have none). *out is initialized here. Errors: OUT_OF_MEMORY. */
tpu_status_t tpu_ir_graph_clone(const tpu_ir_graph_t* g, tpu_ir_graph_t* out);
static inline const tpu_ir_op_t* tpu_ir_op(const tpu_ir_graph_t* g, int v) { return &g->ops[v]; }
static inline const tpu_ir_type_t* tpu_ir_type(const tpu_ir_graph_t* g, int v) { return &g->ops[v].type; }
static inline int32_t tpu_ir_operand(const tpu_ir_graph_t* g, int v, int k) {
  return g->operands[g->ops[v].in_off + k];
}
const char* tpu_ir_opcode_name(int opcode);
int tpu_ir_is_elementwise(int opcode);  /* unary/binary/compare/select/clamp/convert */
/* A custom call computed element by element over f32 operands of its own shape (rank-0 scalars where the op
 * takes them): SiLU/GELU (+ backward), LERP, ADDC. The host plan may run it inside elementwise clusters. */
int tpu_ir_custom_elementwise(const tpu_ir_graph_t* g, int v);
/* The operand rule of custom target `target` (attributes i1, n operand types in[], result type out): 1 when they
 * follow it or the target has no rule written here. One copy, read where a cached graph is loaded (serialize.c) and
 * by the kernels (drivers/host/norm.c gn_check), so a damaged graph is refused before any step has run. Group norm:
 * x [N, C, I] f32 / bf16 / f16 with f32 statistics, or f64 with f64 ones; STATS: i1 0, eps floating rank 0, result
 * [2, N, G] with C % G == 0; the others: [N, G] mean and rstd, [C] weight and bias and [2, N + 1, C] sums in the
 * statistics' dtype, g and the result of GROUP_NORM / _BWD of x's shape and dtype, SUMS' result [2, N + 1, C].
 * HISTC_EDGES: two f64 rank-0 operands, an f64 [2] result. */
int tpu_ir_custom_operands_ok(int64_t target, int64_t i1, int n, const tpu_ir_type_t* const* in, const tpu_ir_type_t* out);
int tpu_ir_is_view(int opcode);         /* broadcast/reshape/transpose/slice/reverse */
/* histc's widening of an empty range [v, v] (PyTorch's bins_edges_correction) for data of `dtype`: f32 / f64
 * take min(the next value of the dtype below v, v - 1) and max(the next above, v + 1), other dtypes v -+ 1.
 * (tpu_ir_histc_range: the widening and the checks.) */
void tpu_ir_histc_widen(int dtype, double* lo, double* hi);
/* histc's range [lo, hi]: widened when empty, then PyTorch's checks (INVALID_ARGUMENT "torch.histc: range of
 * [lo, hi] is not finite" / "torch.histc: max must be larger than min"). One copy: the lowering (bounds given)
 * and the HISTC_EDGES kernel (bounds from the data) both call it. */
tpu_status_t tpu_ir_histc_range(int dtype, double* lo, double* hi);

/* Records an error on g (first wins) and returns -1. */
int tpu_ir_fail(tpu_ir_graph_t* g, tpu_status_t st);

/* ---- builders (return the new value id, or -1) */
int tpu_ir_param(tpu_ir_graph_t* g, int dtype, int rank, const int64_t* dims);
int tpu_ir_scalar(tpu_ir_graph_t* g, int dtype);
int tpu_ir_constant(tpu_ir_graph_t* g, int dtype, double value);
int tpu_ir_iota(tpu_ir_graph_t* g, int dtype, int rank, const int64_t* dims, int dim);
int tpu_ir_unary(tpu_ir_graph_t* g, int opcode, int x);
int tpu_ir_binary(tpu_ir_graph_t* g, int opcode, int x, int y);
int tpu_ir_compare(tpu_ir_graph_t* g, int cmp, int x, int y);
int tpu_ir_select(tpu_ir_graph_t* g, int pred, int on_true, int on_false);
int tpu_ir_clamp(tpu_ir_graph_t* g, int lo, int x, int hi);
int tpu_ir_convert(tpu_ir_graph_t* g, int x, int dtype); /* no-op if same dtype */
/* bdims NULL = trailing alignment (numpy-style) */
int tpu_ir_broadcast(tpu_ir_graph_t* g, int x, int rank, const int64_t* dims, const int64_t* bdims);
int tpu_ir_reshape(tpu_ir_graph_t* g, int x, int rank, const int64_t* dims);
int tpu_ir_transpose(tpu_ir_graph_t* g, int x, const int64_t* perm);
int tpu_ir_slice(tpu_ir_graph_t* g, int x, const int64_t* start, const int64_t* limit,
                 const int64_t* stride);
int tpu_ir_reverse(tpu_ir_graph_t* g, int x, const int64_t* flags);
int tpu_ir_concat(tpu_ir_graph_t* g, int n, const int* xs, int dim);
int tpu_ir_pad(tpu_ir_graph_t* g, int x, int pad_value, const int64_t* lo, const int64_t* hi);
int tpu_ir_dot(tpu_ir_graph_t* g, int lhs, int rhs, int n_batch, int out_dtype);
int tpu_ir_reduce(tpu_ir_graph_t* g, int monoid, int x, const int64_t* reduce_flags);
int tpu_ir_argreduce(tpu_ir_graph_t* g, int is_min, int x, int dim);
int tpu_ir_cumulative(tpu_ir_graph_t* g, int monoid, int x, int dim);
int tpu_ir_gather(tpu_ir_graph_t* g, int x, int index, int dim);
int tpu_ir_index_select(tpu_ir_graph_t* g, int x, int index, int dim);
int tpu_ir_scatter(tpu_ir_graph_t* g, int x, int index, int src, int dim, int add);
int tpu_ir_index_put(tpu_ir_graph_t* g, int x, int values, int n_idx, const int* idx,
                     const int64_t* idx_dims, int accumulate);
int tpu_ir_rng(tpu_ir_graph_t* g, int dtype, int rank, const int64_t* dims, int seed, int offset,
               int normal);
int tpu_ir_sort(tpu_ir_graph_t* g, int x, int dim, int descending, int indices);
/* Generic op (advanced use): type given, operands given. */
int tpu_ir_add_op(tpu_ir_graph_t* g, const tpu_ir_op_t* proto, int n_in, const int* in);
void tpu_ir_output(tpu_ir_graph_t* g, int v);

/* ---- checks and printing */
tpu_status_t tpu_ir_verify(const tpu_ir_graph_t* g);
uint64_t tpu_ir_hash(const tpu_ir_graph_t* g);              /* structural */
int tpu_ir_equal(const tpu_ir_graph_t* a, const tpu_ir_graph_t* b);
/* Text form into buf (truncated with "..." if too small); returns bytes needed. */
size_t tpu_ir_print(const tpu_ir_graph_t* g, char* buf, size_t cap);
/* StableHLO MLIR text of g: one `func.func public @<func_name>` ("main" if NULL) in a module.
 * Arguments: the tensor params %arg0.. in param index order, then the runtime scalars as
 * rank-0 tensors in scalar index order. Results: the graph outputs in order. Composite IR ops
 * and custom_call targets are expanded into StableHLO (plus CHLO for special functions) that
 * computes what the host driver computes (docs/stablehlo.md lists the known gaps).
 * *out_text: malloc'd, NUL-terminated, the caller free()s it; NULL on error.
 * Errors: INVALID_ARGUMENT if g fails tpu_ir_verify; UNSUPPORTED naming an op or target the
 * printer cannot express (e.g. rng). Thread-safe for distinct or unchanging graphs. */
tpu_status_t tpu_ir_stablehlo_print(const tpu_ir_graph_t* g, const char* func_name, char** out_text);
int tpu_ir_same_shape(const tpu_ir_type_t* a, const tpu_ir_type_t* b);
int64_t tpu_ir_numel(const tpu_ir_type_t* t);

#endif /* TPURT_IR_H_ */
