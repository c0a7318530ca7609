/* host.h — the `host` driver: TPU chips emulated on the CPU (internal API).
 *
 * An executable is an IR graph plus a plan: elementwise ops are grouped into
 * clusters that run as one fused loop over L1-sized tiles (no intermediate
 * buffers), view ops (broadcast/transpose/reshape/slice/reverse) become strides,
 * and every other op runs a library kernel (GEMM, reduce, gather...). Parameter
 * strides are bound at run time, so one executable serves every layout.
 *
 * Legend for shape comments in this driver: r = rank, T = tile length.
 */
#ifndef TPURT_HOST_H_
#define TPURT_HOST_H_

#include "ir/ir.h"

/* A strided view of device memory; strides in elements (may be 0 or negative). */
typedef struct tpu_host_view_s {
  char* data;
  int32_t dtype;
  int32_t rank;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t strides[TPU_MAX_DIMS];
} tpu_host_view_t;

/* A runtime scalar parameter: f for floating dtypes, i for integral/bool ones. */
typedef struct tpu_host_scalar_s { double f; int64_t i; } tpu_host_scalar_t;

typedef struct tpu_host_exe_s tpu_host_exe_t;

/* Compiles a verified graph. The executable keeps its own copy of the graph.
 * Thread-safe; the executable is immutable and may run concurrently. */
tpu_status_t tpu_host_compile(const tpu_ir_graph_t* g, tpu_host_exe_t** out_exe);
void tpu_host_exe_free(tpu_host_exe_t* exe);
const tpu_ir_graph_t* tpu_host_exe_graph(const tpu_host_exe_t* exe);
int tpu_host_exe_num_steps(const tpu_host_exe_t* exe); /* kernels per run */
/* Fusion in the plan: elementwise clusters of 2+ ops, elementwise ops evaluated inside
 * another op's tile loop, clusters evaluated block by block inside their reduce. */
void tpu_host_exe_fusion_stats(const tpu_host_exe_t* exe, int32_t* out_clusters, int32_t* out_fused_ops,
                               int32_t* out_reduce_producers);

/* Memory plan of a run, for callers that place outputs in memory of parameters that die inside
 * the run: param_last[p] (n_params) is the last step that reads parameter p or a view of it (-1:
 * none; INT32_MAX: it is, or a view of it is, an output); out_first[k] (n_outputs) is the first
 * step that may write output k (n_ops: the copies after the last step). The runner writes an
 * output over a parameter only after the parameter's last step, else through a temporary. */
void tpu_host_exe_lifetimes(const tpu_host_exe_t* exe, int32_t* param_last, int32_t* out_first);

/* Runs the executable synchronously on the calling thread (a device queue
 * worker), using the shared thread pool inside kernels. params/outs: one view
 * per graph parameter/output, shapes equal to the graph's types. Returns index
 * errors etc. as statuses; never reads or writes out of bounds. */
tpu_status_t tpu_host_exe_run(const tpu_host_exe_t* exe, const tpu_host_view_t* params,
                              const tpu_host_scalar_t* scalars, const tpu_host_view_t* outs);

/* ---- element access helpers shared by kernels */
typedef enum { TPU_HOST_CLS_F32 = 0, TPU_HOST_CLS_F64, TPU_HOST_CLS_I64 } tpu_host_cls_t;
static inline int tpu_host_cls(int dtype) {
  switch (dtype) {
    case TPU_DTYPE_F32: case TPU_DTYPE_F16: case TPU_DTYPE_BF16: return TPU_HOST_CLS_F32;
    case TPU_DTYPE_F64: return TPU_HOST_CLS_F64;
    default: return TPU_HOST_CLS_I64;
  }
}
double tpu_host_load_f64(const char* p, int dtype);
int64_t tpu_host_load_i64(const char* p, int dtype);
void tpu_host_store_f64(char* p, int dtype, double v);
void tpu_host_store_i64(char* p, int dtype, int64_t v);

/* A low-precision cluster program (exec.c cluster_lowp builds it, tile_impl.h lowp_run runs it; AVX-512 builds only):
 * a cluster whose values are f32 / bf16 / f16 (bool predicates as 1.0 / 0.0) evaluated blk elements at a time
 * (128 to 512: every register within TPU_LOWP_REG_FLOATS floats, 16 KiB of L1): bf16 / f16 leaves widened as they
 * are read, the result rounded as it is stored, so the cluster makes one pass over memory and none over f32 tiles.
 * Each instruction does what the tile path's load / compute / store does for that member (the same bits; a NaN result
 * is NaN, its payload / sign as the vector instructions give it: the tile path's own depend on whether an element
 * falls in a loop's vector body or scalar remainder; tests/test_exec_lowp.c); members with no instruction of their own run the tile kernel (KERNEL) or the caller's
 * custom kernel (CUSTOM) over the block. Registers d, a, b, c, e: blk floats each; a leaf's LOAD / SCALAR writes d. */
enum { TPU_LOWP_REG_FLOATS = 4096, TPU_LOWP_MAX_REGS = 24, TPU_LOWP_MAX_INS = 48 };
typedef enum {
  TPU_LOWP_LOAD = 0, /* r[d] = leaf a (contiguous; dt bf16 / f16 / f32, or bool read as 1.0 / 0.0) */
  TPU_LOWP_SCALAR,   /* r[d] = io->s[a] in every lane (once per call) */
  TPU_LOWP_COPY, TPU_LOWP_NEG, TPU_LOWP_ABS, TPU_LOWP_SQRT, TPU_LOWP_RSQRT, TPU_LOWP_RECIP,
  TPU_LOWP_ADD, TPU_LOWP_SUB, TPU_LOWP_MUL, TPU_LOWP_DIV, TPU_LOWP_MAX, TPU_LOWP_MIN,
  TPU_LOWP_CMP,      /* bool(r[a] aux r[b]), aux a TPU_IR_CMP_* direction */
  TPU_LOWP_NZ,       /* bool(r[a] != 0): a CONVERT to bool */
  TPU_LOWP_NOT,      /* bool(r[a] == 0) of a bool */
  TPU_LOWP_SELECT,   /* r[a] != 0 ? r[b] : r[c] */
  TPU_LOWP_CLAMP,    /* clamp(r[b], r[a], r[c]) as tile_compute (NaN x kept) */
  TPU_LOWP_ROUND,    /* r[d] = r[a] rounded to dt (bf16 / f16) */
  TPU_LOWP_KERNEL,   /* r[d] = the tile kernel of op over r[a], r[b], r[c] (input dtype in_dt) */
  TPU_LOWP_CUSTOM,   /* r[d] = io->custom(op) over r[a], r[b], r[c], r[e] */
  TPU_LOWP_COUNT
} tpu_host_lowp_kind_t;
typedef struct { uint8_t kind, d, a, b, c, e, dt, aux, in_dt; const tpu_ir_op_t* op; } tpu_host_lowp_ins_t;
typedef struct tpu_host_lowp_s {
  int n_ins, out_reg, out_dtype; /* the result: r[out_reg] stored as out_dtype (f32, bf16 or f16) */
  int64_t blk;                   /* elements per block, a multiple of 16 */
  tpu_host_lowp_ins_t ins[TPU_LOWP_MAX_INS];
} tpu_host_lowp_t;
typedef struct tpu_host_lowp_io_s {
  const void* leaf[TPU_LOWP_MAX_REGS]; /* LOAD leaf a's first element (n contiguous) */
  float s[TPU_LOWP_MAX_REGS];          /* SCALAR a's value */
  void* out;                           /* n contiguous elements of out_dtype; may be a LOAD leaf itself */
  void (*custom)(const void* ctx, const tpu_ir_op_t* op, float* dst, const void* const* in, int64_t n);
  const void* ctx;
} tpu_host_lowp_io_t;

/* Tile kernels (tile_impl.h, compiled per ISA; dispatched at run time). */
typedef struct tpu_host_tile_ops_s {
  /* Loads n elements (stride in elements) of dtype into a register buffer of class cls. */
  void (*load)(void* dst, int cls, const char* src, int dtype, int64_t stride, int64_t n);
  void (*store)(char* dst, int dtype, int64_t stride, const void* src, int cls, int64_t n);
  /* Computes one elementwise op over register buffers; returns 0 or -1 if unsupported. */
  int (*compute)(const tpu_ir_op_t* op, int out_dtype, void* out, int in_dtype, const void* const* in,
                 int64_t n);
  /* (optional) o[i] = bf16(f32(a[i]) OP f32(b[i])) over n contiguous elements, OP = TPU_IR_ADD / SUB / MUL / DIV:
   * the bits of load, compute and store, in one pass without an f32 tile between them; -1 for other opcodes.
   * o may be a or b itself (element i is read before it is written), not a shifted overlap. */
  int (*bin_bf16)(int opcode, uint16_t* o, const uint16_t* a, const uint16_t* b, int64_t n);
  /* (optional) the same with a broadcast f32 scalar s for b (s_first: s OP f32(a[i]) instead). */
  int (*bin_bf16_scalar)(int opcode, uint16_t* o, const uint16_t* a, float s, int s_first, int64_t n);
  /* (optional) runs a low-precision cluster program over n elements (see tpu_host_lowp_t); 0, or -1 if it cannot */
  int (*lowp_run)(const struct tpu_host_lowp_s* P, const struct tpu_host_lowp_io_s* io, int64_t n);
} tpu_host_tile_ops_t;
const tpu_host_tile_ops_t* tpu_host_tile_ops(void);
extern const tpu_host_tile_ops_t tpu_host_tile_ops_base;
extern const tpu_host_tile_ops_t tpu_host_tile_ops_avx2;
extern const tpu_host_tile_ops_t tpu_host_tile_ops_avx512;
extern const tpu_host_tile_ops_t tpu_host_tile_ops_avx512bf16; /* only where tpu_cpu_has_avx512bf16() */

/* Library kernels (kernels.c). Each returns a status (index errors are statuses). */
tpu_status_t tpu_host_k_reduce(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
/* A reduce over more than 4 MiB of dense elements (x's non-unit dims a permutation of row-major strides) sums
 * in slabs: `rows` whole rows (~1 MiB, at least one) of its outermost non-unit dim in memory, d0. A kept d0
 * gives each slab its slice of the output; a reduced d0 gives per-slab partials (`pt` = [nb, out...], f64 for
 * floats, i64 otherwise) combined by a final reduce, and is blocked only while they take at most a quarter of
 * x's bytes. tpu_host_k_reduce follows this plan on views of x's slabs; exec.c evaluates an elementwise
 * producer fused into its reduce slab by slab into a buffer through the same plan, so a reduce gives the same
 * bits whether its producer is fused or materialized. tpu_host_reduce_plan: 1 and *out_plan when x (its
 * strides; data unused) is reduced in slabs, else 0 (summed whole). */
typedef struct tpu_host_reduce_plan_s {
  int d0, od, kept;              /* the blocked dim; its output dim when kept */
  int64_t rows, nb;              /* rows of d0 per slab, slabs */
  int64_t block_bytes;           /* one row-major slab */
  int64_t partial_bytes;         /* the partials (reduced d0) */
  tpu_ir_type_t pt;
} tpu_host_reduce_plan_t;
int tpu_host_reduce_plan(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out,
                         tpu_host_reduce_plan_t* out_plan);
/* Fills slab `blk` (x with d0 cut to the slab's rows from row0, row-major over the caller's buffer). */
typedef tpu_status_t (*tpu_host_reduce_block_fn)(void* ctx, int64_t row0, tpu_host_view_t* blk);
/* Runs plan p: with `block` (and `buf`, block_bytes), each slab is filled into buf; without, slabs are views of
 * x. `partials` (partial_bytes) is needed when !p->kept. Borrows everything; thread-safe for distinct buffers. */
tpu_status_t tpu_host_k_reduce_blocks(const tpu_ir_op_t* op, const tpu_host_reduce_plan_t* p, const tpu_host_view_t* x,
                                      tpu_host_reduce_block_fn block, void* ctx, char* buf, char* partials,
                                      const tpu_host_view_t* out);
tpu_status_t tpu_host_k_argreduce(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_cumulative(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_dot(const tpu_ir_op_t* op, const tpu_host_view_t* a, const tpu_host_view_t* b,
                            const tpu_host_view_t* out);
/* k_dot with a GEMM epilogue run on every finished block of `out` (gemm.h, tpu_host_gemm_epi_t). */
struct tpu_host_gemm_epi_s;
tpu_status_t tpu_host_k_dot_epi(const tpu_ir_op_t* op, const tpu_host_view_t* a, const tpu_host_view_t* b,
                                const tpu_host_view_t* out, const struct tpu_host_gemm_epi_s* epi);
/* Testing hook: whether tpu_host_compile fuses an elementwise cluster into the GEMM that feeds it
 * (default on; TORCH_TPU_GEMM_EPILOGUE=0, read once, turns it off). Returns the previous setting;
 * applies to executables compiled afterwards. */
int tpu_host_set_epilogue_fusion(int on);
/* Testing hook: whether tpu_host_compile runs f32 custom kernels (GELU, SiLU, LERP, ADDC, ...) inside
 * elementwise clusters (default on; TORCH_TPU_CUSTOM_FUSION=0 turns it off). Returns the previous setting. */
int tpu_host_set_custom_fusion(int on);
/* Testing hook: whether elementwise clusters over bf16 / f16 run as one-pass programs (tpu_host_lowp_t; default on,
 * TORCH_TPU_LOWP_CLUSTERS=0 turns them off: the tile path, the same values); applies at once. Returns the previous one. */
int tpu_host_set_lowp_clusters(int on);
/* How many GEMMs of the executable run an elementwise cluster as their epilogue. */
int tpu_host_exe_num_epilogues(const tpu_host_exe_t* exe);
/* Step groups: runs of consecutive steps that read none of each other's results, run side by side (one
 * step per pool thread, each kernel on its thread alone) when their estimated costs say the pool's threads
 * finish them sooner that way than one step after another split over the pool. The same bits either way. Testing hook:
 * whether runs use them (default on; TORCH_TPU_EXEC_GROUPS=0, read once, turns it off; never with one pool
 * thread); applies at once (the plan is made at compile time). Returns the previous setting. */
int tpu_host_set_exec_groups(int on);
/* How many step groups the executable has; *out_grouped_steps (optional): steps in them. */
int tpu_host_exe_num_groups(const tpu_host_exe_t* exe, int32_t* out_grouped_steps);
tpu_status_t tpu_host_k_iota(const tpu_ir_op_t* op, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_concat(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_pad(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* v,
                            const tpu_host_view_t* out);
tpu_status_t tpu_host_k_gather(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* idx,
                               const tpu_host_view_t* out);
tpu_status_t tpu_host_k_index_select(const tpu_ir_op_t* op, const tpu_host_view_t* x,
                                     const tpu_host_view_t* idx, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_scatter(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* idx,
                                const tpu_host_view_t* src, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_index_put(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* vals,
                                  int n_idx, const tpu_host_view_t* idx, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_rng(const tpu_ir_op_t* op, uint64_t seed, uint64_t offset, const tpu_host_view_t* out);
tpu_status_t tpu_host_k_sort(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
/* Neural-network kernels (kernels_nn.c, conv.c, attention.c, ...). */
tpu_status_t tpu_host_k_conv(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* w,
                             const tpu_host_view_t* out);
tpu_status_t tpu_host_k_reduce_window(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
/* custom target POOL_ARGMAX (pool.c) */
tpu_status_t tpu_host_k_pool_argmax(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out);
/* Dispatches on op->i0 (tpu_ir_custom_t). */
tpu_status_t tpu_host_k_custom(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out);
/* Copies (with dtype conversion) src into dst of the same shape. */
tpu_status_t tpu_host_k_copy(const tpu_host_view_t* src, const tpu_host_view_t* dst);
/* Elements per pool chunk of the copy, reduce, argreduce and cumulative kernels (kernels.c; the pool divides it by
 * its grain divisor). */
enum { TPU_HOST_COPY_GRAIN = 65536 };

#endif /* TPURT_HOST_H_ */
