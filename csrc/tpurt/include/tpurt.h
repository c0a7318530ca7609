/* tpurt.h — public C API of libtpurt, the torch_tpu runtime core.
 *
 * libtpurt runs PyTorch ATen operators on TPU chips. The default driver, `host`,
 * emulates the chips on the CPU (SIMD kernels, one shared thread pool). The API is
 * pure C11 and knows nothing about PyTorch: the C++ glue in csrc/glue marshals
 * ATen's boxed calls into the records below.
 *
 * Example (error handling elided; every fallible call returns tpu_status_t):
 *
 *     tpu_rt_init();
 *     void *a, *b;
 *     tpu_rt_malloc(0, 64 * sizeof(float), &a);             // device 0, 64 floats
 *     tpu_rt_malloc(0, 64 * sizeof(float), &b);
 *     tpu_rt_memcpy_h2d(0, a, host_data, 64 * sizeof(float));
 *     tpu_tensor_t ta = tpu_tensor_contiguous(a, 0, TPU_DTYPE_F32, 1, (int64_t[]){64});
 *     tpu_tensor_t tb = tpu_tensor_contiguous(b, 0, TPU_DTYPE_F32, 1, (int64_t[]){64});
 *     tpu_arg_t args[] = { tpu_arg_tensor(&ta), tpu_arg_f64(0.5) };
 *     tpu_op_run(0, "aten::mul.out", args, 2, &tb, 1);          // b = a * 0.5, async
 *     tpu_rt_memcpy_d2h(0, host_out, b, 64 * sizeof(float));    // waits for the queue
 *
 * Conventions
 *   - Every fallible function returns tpu_status_t; NULL (TPU_OK) means success.
 *     A non-NULL status is owned by the caller: read it, then tpu_status_free() it.
 *   - Outputs come last, prefixed out_, and are set on success only.
 *   - Device memory is addressed by plain pointers ("device addresses"). With the
 *     host driver they are host addresses; callers must never dereference them.
 *   - All functions are thread-safe unless a comment says otherwise.
 */
#ifndef TPURT_H_
#define TPURT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status */

typedef enum tpu_status_code_e {
  TPU_STATUS_OK = 0,
  TPU_STATUS_INVALID_ARGUMENT,  /* bad shape/dtype/value: RuntimeError in Python */
  TPU_STATUS_TYPE_ERROR,        /* wrong kind of argument: TypeError */
  TPU_STATUS_INDEX_ERROR,       /* index out of range: IndexError */
  TPU_STATUS_OUT_OF_MEMORY,     /* device memory exhausted: torch.OutOfMemoryError */
  TPU_STATUS_UNSUPPORTED,       /* op/dtype/argument not implemented: NotImplementedError */
  TPU_STATUS_INTERNAL,          /* a bug in libtpurt */
  TPU_STATUS_LINALG_ERROR,      /* a matrix the algorithm cannot factor (not positive-definite,
                                   non-finite input): torch.linalg.LinAlgError */
  TPU_STATUS_CODE_COUNT
} tpu_status_code_t;

typedef struct tpu_status_s* tpu_status_t;
#define TPU_OK ((tpu_status_t)0)

/* Creates a status with a printf-style message. Never returns NULL for code != OK
 * (falls back to a static out-of-memory status if the heap is exhausted). */
tpu_status_t tpu_status_make(tpu_status_code_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
tpu_status_code_t tpu_status_code(tpu_status_t status);  /* OK for NULL */
const char* tpu_status_message(tpu_status_t status);     /* "" for NULL; borrowed */
void tpu_status_free(tpu_status_t status);                /* NULL is fine */
const char* tpu_status_code_name(tpu_status_code_t code);

/* ------------------------------------------------------------------ dtypes */

typedef enum tpu_dtype_e {
  TPU_DTYPE_F32 = 0,
  TPU_DTYPE_F64,
  TPU_DTYPE_F16,
  TPU_DTYPE_BF16,
  TPU_DTYPE_I64,
  TPU_DTYPE_I32,
  TPU_DTYPE_I16,
  TPU_DTYPE_I8,
  TPU_DTYPE_U8,
  TPU_DTYPE_BOOL,
  TPU_DTYPE_COUNT
} tpu_dtype_t;

size_t tpu_dtype_size(tpu_dtype_t dtype);      /* bytes per element */
const char* tpu_dtype_name(tpu_dtype_t dtype); /* "float32", "bfloat16", ... */

/* ------------------------------------------------------------------ runtime */

/* Initializes the runtime once (idempotent, thread-safe). Reads the environment:
 *   TORCH_TPU_NUM_DEVICES   emulated chips (default 1, 1..64)
 *   TORCH_TPU_HBM_BYTES     per-chip capacity; bytes, or with suffix K/M/G
 *                           (default: 1/2 of physical RAM divided by chips)
 *   TORCH_TPU_LAUNCH_BLOCKING=1  run every op synchronously
 *   TORCH_TPU_NUM_THREADS   thread pool size (default: online cores)
 * An invalid value returns TPU_STATUS_INVALID_ARGUMENT naming the variable; the
 * runtime then stays uninitialized and the next call retries. */
tpu_status_t tpu_rt_init(void);
int tpu_rt_device_count(void);             /* 0 before a successful init */
bool tpu_rt_launch_blocking(void);
int tpu_rt_num_threads(void);

/* How far apart two CPUs are right now: two short-lived threads, pinned to the first two CPUs the calling
 * thread may run on, pass one cache line back and forth 1000 times. A virtual machine's vCPUs may sit on
 * nearby cores at one moment and on cores with different L3 caches the next, which changes the cost of data
 * moving between the thread pool's threads several times over (benchmarks/common.py tags each measured round
 * near / far by rtt_ns). Takes under 1 ms with both CPUs free. The threads sleep until both are pinned, so a CPU
 * that other work holds delays the answer (a few ms, up to tens at load 8 on 2 CPUs) but costs no CPU time; the
 * round trips then get 1 ms. Independent of tpu_rt_init. Errors (UNSUPPORTED, *out_distance zeroed with cpus
 * -1): fewer than two CPUs allowed, threads that cannot be started or pinned (no permission), CPUs too busy to
 * answer in time. Thread-safe; concurrent probes disturb each other. */
typedef struct tpu_rt_cpu_distance_s {
  double rtt_ns;     /* median round trip, ns */
  double rtt_p10_ns; /* its 10th percentile, ns */
  double rtt_cycles; /* the median in TSC cycles (x86; 0 elsewhere) */
  int cpu_a, cpu_b;  /* the two CPUs */
  int trips;         /* round trips timed (100..1000) */
} tpu_rt_cpu_distance_t;
tpu_status_t tpu_rt_cpu_distance_probe(tpu_rt_cpu_distance_t* out_distance);

/* Precision of f32 matrix products and convolutions (torch.set_float32_matmul_precision).
 * Read only when an op's graph has a DOT or a convolution (see tpu_op_find). Values match the
 * IR's precision_config:
 *   HIGHEST (0, default): f32 products;  HIGH (1): 3-pass bf16 (x = hi + lo, hi*hi + hi*lo + lo*hi);
 *   MEDIUM (2): 1-pass bf16 (hi*hi), as StableHLO DEFAULT on a TPU. Accumulation is f32 in all
 * three; bf16/f16/f64 operands are not affected. Part of the executable-cache key. Process-wide;
 * an out-of-range value is ignored. */
typedef enum tpu_matmul_precision_e {
  TPU_MATMUL_PRECISION_HIGHEST = 0, TPU_MATMUL_PRECISION_HIGH = 1, TPU_MATMUL_PRECISION_MEDIUM = 2
} tpu_matmul_precision_t;
void tpu_rt_set_matmul_precision(int precision);
/* The current precision: the source's answer if one is set, else the last value set. */
int tpu_rt_matmul_precision(void);
/* A function that returns the current precision (the glue reads PyTorch's setting): called
 * instead of the stored value, only by ops whose graphs use it (so most ops never pay for the
 * query). Must be thread-safe and must not fail (out-of-range answers mean HIGHEST). NULL
 * removes it. */
typedef int (*tpu_matmul_precision_source_t)(void);
void tpu_rt_set_matmul_precision_source(tpu_matmul_precision_source_t source);

/* Caching allocator, one per device. Blocks are rounded to size classes and kept
 * for reuse; a freed block may be reused by work enqueued after the free (all
 * work on a device runs in enqueue order). On exhaustion the cache is emptied
 * and the allocation retried before TPU_STATUS_OUT_OF_MEMORY is returned with
 * requested / allocated / reserved / capacity in the message. nbytes == 0 gives
 * a unique non-NULL pointer-free result: *out_ptr = NULL, TPU_OK. */
tpu_status_t tpu_rt_malloc(int device, size_t nbytes, void** out_ptr);
void tpu_rt_free(int device, void* ptr); /* NULL is fine; unknown ptr ignored */
tpu_status_t tpu_rt_empty_cache(int device);
/* Hold: between begin and end, blocks of `device` that the calling thread frees are kept for the
 * calling thread's own allocations (they leave allocated_bytes at once) and join the shared cache
 * at the end. For freeing memory that work not yet enqueued still reads (a captured graph's dead
 * inputs, given to its outputs): end the hold after enqueueing that work, and no other thread's
 * work can be enqueued on such a block before it. One hold per thread; end is a no-op when none. */
tpu_status_t tpu_rt_alloc_hold_begin(int device);
void tpu_rt_alloc_hold_end(int device);

typedef struct tpu_rt_memory_stats_s {
  uint64_t allocated_bytes;      /* bytes in live blocks (rounded sizes) */
  uint64_t max_allocated_bytes;  /* peak of allocated_bytes since reset */
  uint64_t reserved_bytes;       /* live + cached blocks */
  uint64_t max_reserved_bytes;
  uint64_t requested_bytes;      /* bytes asked for by live allocations */
  uint64_t capacity_bytes;       /* TORCH_TPU_HBM_BYTES */
  uint64_t num_allocs, num_frees, num_cache_hits, num_ooms;
  /* Executor scratch: temporaries the driver allocates outside this allocator (the host executor's
   * values inside one executable's run, e.g. a fused graph's intermediates), process-wide (all
   * devices). Not in allocated_bytes; peak since reset (reset with the allocator's). */
  uint64_t scratch_bytes, max_scratch_bytes;
  uint64_t scratch_cached_bytes; /* blocks kept by the executors' caches for reuse, not in use */
} tpu_rt_memory_stats_t;
tpu_status_t tpu_rt_memory_stats(int device, tpu_rt_memory_stats_t* out_stats);
tpu_status_t tpu_rt_reset_peak_memory_stats(int device);

/* Copies. h2d snapshots `src` before returning (the host buffer may be reused at
 * once) and completes asynchronously in queue order. d2h waits for all queued
 * work on the device first. d2d is enqueued (same device) or synchronous
 * (across devices). */
tpu_status_t tpu_rt_memcpy_h2d(int device, void* dst, const void* src, size_t nbytes);
tpu_status_t tpu_rt_memcpy_d2h(int device, void* dst, const void* src, size_t nbytes);
tpu_status_t tpu_rt_memcpy_d2d(int dst_device, void* dst, int src_device, const void* src,
                               size_t nbytes);

/* Waits until all work enqueued on `device` has finished. If any of it failed,
 * returns the first failure ("<op name>: <message>") and clears it. */
tpu_status_t tpu_rt_synchronize(int device);

/* Events are positions in a device's queue (one queue per device; every stream
 * handle maps onto it). */
tpu_status_t tpu_rt_event_record(int device, uint64_t* out_event);
tpu_status_t tpu_rt_event_query(int device, uint64_t event, bool* out_done);
tpu_status_t tpu_rt_event_synchronize(int device, uint64_t event);
/* Monotonic time (ns) at which the event's queue position completed; 0 if not yet. */
tpu_status_t tpu_rt_event_elapsed_ns(int device, uint64_t start, uint64_t end, int64_t* out_ns);

/* Philox4x32-10 generators. Each device has a default generator; more can be
 * created. Ops that draw random numbers take (seed, offset) at enqueue time and
 * advance offset by the number of 128-bit counters they use (rounded up to 4). */
typedef struct tpu_rt_generator_s tpu_rt_generator_t;
tpu_status_t tpu_rt_generator_create(int device, uint64_t seed, tpu_rt_generator_t** out_gen);
void tpu_rt_generator_destroy(tpu_rt_generator_t* gen);  /* not for default generators */
tpu_rt_generator_t* tpu_rt_default_generator(int device); /* borrowed; NULL if bad device */
void tpu_rt_generator_set_seed(tpu_rt_generator_t* gen, uint64_t seed); /* resets offset */
uint64_t tpu_rt_generator_seed(const tpu_rt_generator_t* gen);
void tpu_rt_generator_set_offset(tpu_rt_generator_t* gen, uint64_t offset);
uint64_t tpu_rt_generator_offset(const tpu_rt_generator_t* gen);
/* Atomically returns the current (seed, offset) and advances offset by `increment`. */
void tpu_rt_generator_reserve(tpu_rt_generator_t* gen, uint64_t increment, uint64_t* out_seed,
                              uint64_t* out_offset);

/* ------------------------------------------------------------------ ops */

#define TPU_MAX_DIMS 12

/* A strided tensor in device memory. data points at element [0, ..., 0] (the
 * storage offset is already applied). Strides are in elements and may be 0. */
typedef struct tpu_tensor_s {
  void* data;
  int32_t device;
  int32_t dtype;  /* tpu_dtype_t */
  int32_t ndim;   /* 0..TPU_MAX_DIMS; -1 marks an absent entry in a tensor list */
  int32_t flags;  /* reserved, 0 */
  int64_t sizes[TPU_MAX_DIMS];
  int64_t strides[TPU_MAX_DIMS];
} tpu_tensor_t;

typedef enum tpu_arg_kind_e {
  TPU_ARG_NONE = 0,     /* None / absent optional */
  TPU_ARG_TENSOR,       /* .tensor */
  TPU_ARG_SCALAR,       /* runtime scalar value: .scalar_dtype + .f / .i; see below */
  TPU_ARG_INT,          /* .i (int, SymInt, also ScalarType/Layout/MemoryFormat as ints) */
  TPU_ARG_DOUBLE,       /* .f (schema `float`); a runtime value like SCALAR */
  TPU_ARG_BOOL,         /* .i = 0/1 */
  TPU_ARG_INT_LIST,     /* .ints[.len] */
  TPU_ARG_DOUBLE_LIST,  /* .doubles[.len] */
  TPU_ARG_BOOL_LIST,    /* .ints[.len] of 0/1 */
  TPU_ARG_STRING,       /* .str */
  TPU_ARG_TENSOR_LIST,  /* .tensors[.len]; entries with ndim == -1 are None */
  TPU_ARG_GENERATOR,    /* .generator (NULL = the device's default generator) */
  TPU_ARG_KIND_COUNT
} tpu_arg_kind_t;

/* SCALAR flags: how the value takes part in type promotion. */
#define TPU_SCALAR_WRAPPED 1u  /* a Python number / at::Scalar (lowest priority) */
#define TPU_SCALAR_ZERODIM 2u  /* a CPU 0-dim tensor (priority of a 0-dim tensor) */

typedef struct tpu_arg_s {
  int32_t kind;          /* tpu_arg_kind_t */
  int32_t scalar_dtype;  /* SCALAR: tpu_dtype_t of the value (F64, I64, BOOL, or the
                            0-dim tensor's dtype) */
  uint32_t scalar_flags; /* SCALAR: TPU_SCALAR_* */
  int32_t reserved;
  double f;              /* SCALAR with floating dtype, DOUBLE */
  int64_t i;             /* SCALAR with integral/bool dtype, INT, BOOL */
  int64_t len;           /* *_LIST, TENSOR_LIST */
  const tpu_tensor_t* tensor;
  const tpu_tensor_t* tensors;
  const int64_t* ints;
  const double* doubles;
  const char* str;
  tpu_rt_generator_t* generator;
} tpu_arg_t;

/* Runs ATen operator `op_name` ("aten::add.out": schema name + "." + overload,
 * no overload suffix when the overload is empty) on `device`.
 *   args:  every schema argument in schema order (out= tensors included).
 *   outs:  the tensors the op writes: the out= arguments, `self` for in-place
 *          ops, or outputs the caller allocated for a functional op (shapes,
 *          strides and dtypes as PyTorch's meta function computes them).
 * Validates synchronously; the computation is enqueued and runs asynchronously
 * (synchronously with TORCH_TPU_LAUNCH_BLOCKING=1). Errors found while running
 * (e.g. an index out of range) are reported by the next tpu_rt_synchronize().
 * Returns TPU_STATUS_UNSUPPORTED ("<op>: not implemented ...") for unknown ops. */
tpu_status_t tpu_op_run(int device, const char* op_name, const tpu_arg_t* args, int nargs,
                        const tpu_tensor_t* outs, int nouts);

/* True if libtpurt has a lowering for op_name. */
bool tpu_op_supported(const char* op_name);

/* An op's lowering, looked up by name once: tpu_op_find returns NULL for unsupported ops,
 * else a handle valid for the life of the process (borrowed; never freed). Thread-safe.
 * tpu_op_run_found(op, ...) is tpu_op_run(..., tpu_op_name(op), ...) without the by-name
 * lookup; the glue caches the handle per operator. */
typedef struct tpu_op_s tpu_op_t;
const tpu_op_t* tpu_op_find(const char* op_name);
const char* tpu_op_name(const tpu_op_t* op);
tpu_status_t tpu_op_run_found(const tpu_op_t* op, int device, const tpu_arg_t* args, int nargs,
                              const tpu_tensor_t* outs, int nouts);

/* Shape rules: output dtypes and sizes (contiguous strides, data == NULL) of a call from its
 * arguments' records, for the ops that carry one. Two kinds (tpu_op_shapes_kind):
 *   PURE: from the records alone, exactly what PyTorch's meta function gives, where that is Python
 *     (the embedding_bag family, embedding_dense_backward) or missing (_logcumsumexp,
 *     _ctc_loss_backward); the glue asks it in place of the meta function.
 *   READS_DATA: sizes that depend on data (nonzero, masked_select, repeat_interleave.Tensor, bincount,
 *     _unique2, unique_consecutive), read back from the device: waits for the queue.
 * tpu_op_shapes_found runs op's rule on args (as tpu_op_run_found takes them, without outs) and writes
 * *out_nouts (<= max_outs) records into out_meta (caller-owned; *out_nouts = 0 on error).
 * TPU_STATUS_UNSUPPORTED: no rule, or the rule declines these arguments (outside it, bad ones included:
 * the caller then runs PyTorch's meta function, whose error is PyTorch's); other errors are the op's
 * (INVALID_ARGUMENT: "repeats can not be negative"). Thread-safe (READS_DATA rules synchronize device).
 * tpu_op_infer is tpu_op_shapes_found(tpu_op_find(op_name), ...) by name. */
typedef enum tpu_op_shapes_kind_e {
  TPU_OP_SHAPES_NONE = 0,
  TPU_OP_SHAPES_PURE,
  TPU_OP_SHAPES_READS_DATA,
  TPU_OP_SHAPES_KIND_COUNT
} tpu_op_shapes_kind_t;
tpu_op_shapes_kind_t tpu_op_shapes_kind(const tpu_op_t* op); /* NONE for NULL */
tpu_status_t tpu_op_shapes_found(const tpu_op_t* op, int device, const tpu_arg_t* args, int nargs,
                                 tpu_tensor_t* out_meta, int max_outs, int* out_nouts);
tpu_status_t tpu_op_infer(int device, const char* op_name, const tpu_arg_t* args, int nargs,
                          tpu_tensor_t* out_meta, int max_outs, int* out_nouts);

/* ---- debugging: recording of executed graphs (tests of the StableHLO printer).
 * While enabled, every tpu_op_run records the StableHLO text of the executable it runs
 * (compiled or taken from the cache), a copy of its inputs taken just before it runs and
 * of its outputs just after. Costs nothing while disabled. Thread-safe. */
typedef enum { TPU_DEBUG_PARAM = 0, TPU_DEBUG_SCALAR, TPU_DEBUG_OUTPUT } tpu_debug_role_t;
typedef struct tpu_debug_array_s {
  int32_t role;                 /* tpu_debug_role_t; in StableHLO argument / result order */
  int32_t dtype, rank;
  int64_t dims[TPU_MAX_DIMS];
  void* data;                   /* contiguous row-major copy; NULL for an absent output */
  size_t nbytes;
} tpu_debug_array_t;
typedef struct tpu_debug_graph_s {
  char op_name[128];
  char* text;                   /* StableHLO module (func @main), or NULL if not printable */
  char* error;                  /* why text is NULL, or the run's error; NULL if none */
  int n_arrays;
  tpu_debug_array_t* arrays;
} tpu_debug_graph_t;
void tpu_debug_record_graphs(bool enable);
/* Oldest finished record (owned: free with tpu_debug_graph_free), or NULL if none. */
tpu_debug_graph_t* tpu_debug_take_graph(void);
void tpu_debug_graph_free(tpu_debug_graph_t* r);   /* NULL is fine */

/* ------------------------------------------------------------------ fused eager and capture
 *
 * Fused eager (TORCH_TPU_FUSED_EAGER=1, or tpu_trace_set_enabled): tpu_op_run validates each
 * op as usual (errors stay synchronous, RNG counters are reserved in call order) but records it
 * instead of enqueueing it. A device's recorded ops run as ONE fused executable (cached by the
 * trace's signature) when anything else needs the device: a host copy, synchronize, an event, a
 * data-dependent op, a write the trace cannot record (lower/README.md), 256 ops (8192 while
 * capturing), TPU_IR_MAX_GRAPH_OUTPUTS live results, or tpu_trace_flush. Results are
 * bit-identical to strict eager. Not used with TORCH_TPU_LAUNCH_BLOCKING=1.
 *
 *     tpu_trace_set_enabled(true);
 *     tpu_op_run(0, "aten::mul.out", ...);   // recorded
 *     tpu_op_run(0, "aten::add.out", ...);   // recorded
 *     tpu_rt_memcpy_d2h(0, host, dev, n);    // flushes: one task runs both, then copies
 *
 * Capture: ops run on `device` between tpu_capture_begin and tpu_capture_end form one trace
 * that is never flushed early (an early flush makes it non-replayable). tpu_capture_end runs it
 * and returns a replayable capture: tensors its ops read must lie inside `inputs` (rebound at
 * each run, same layouts required) or `constants` (same memory at each run; the caller keeps
 * them alive); each of `outputs` must be a tensor a captured op wrote (fresh at each run) or one
 * of `inputs` (or a view of one). When the trace is not replayable, *out_capture = NULL, `reason` says why, and
 * the status is TPU_OK (the ops still ran). Outputs may be views of written tensors or of inputs. */
tpu_status_t tpu_trace_set_enabled(bool enabled); /* turning it off flushes every device */
bool tpu_trace_enabled(void);
tpu_status_t tpu_trace_flush(int device);          /* enqueues the device's recorded ops now */
/* Nonzero when ops on `device` issued from this thread are being recorded (fused eager or an open
 * capture). Callers that would move memory directly (a same-layout device copy) use an op instead,
 * so the copy joins the trace rather than flushing it. Thread-safe, cheap. */
int tpu_trace_recording(int device);

typedef struct tpu_trace_stats_s {
  uint64_t flushes;        /* traces enqueued (fused graph or op-by-op fallback) */
  uint64_t traced_ops;     /* ops recorded into flushed traces */
  uint64_t cache_hits;     /* flushes that found their fused executable cached */
  uint64_t cache_misses;   /* flushes that built a fused graph */
  uint64_t fallbacks;      /* flushes run op by op (the fused graph could not be built) */
} tpu_trace_stats_t;
void tpu_trace_stats_get(tpu_trace_stats_t* out_stats);
void tpu_trace_stats_reset(void);

typedef struct tpu_capture_s tpu_capture_t;
tpu_status_t tpu_capture_begin(int device);
tpu_status_t tpu_capture_end(int device, const tpu_tensor_t* inputs, int n_inputs, const tpu_tensor_t* constants,
                             int n_constants, const tpu_tensor_t* outputs, int n_outputs,
                             tpu_capture_t** out_capture, char* reason, size_t reason_len);
/* tpu_capture_end with flags: TPU_CAPTURE_KEEP_GRAPH keeps the captured graph as built before the
 * compiler passes in the capture (a size-template sample, see tpu_capture_size_check; it costs
 * the graph's memory, and a lowering run when the executable came from the cache). */
enum { TPU_CAPTURE_KEEP_GRAPH = 1 };
tpu_status_t tpu_capture_end_ex(int device, const tpu_tensor_t* inputs, int n_inputs, const tpu_tensor_t* constants,
                                int n_constants, const tpu_tensor_t* outputs, int n_outputs, unsigned flags,
                                tpu_capture_t** out_capture, char* reason, size_t reason_len);
int tpu_capture_num_outputs(const tpu_capture_t* capture);
int tpu_capture_num_ops(const tpu_capture_t* capture);
/* Fresh buffers: tensors the graph writes that are not inside an input or a constant; the caller
 * allocates one per run with the layout tpu_capture_buffer_info gives (data NULL). */
int tpu_capture_num_buffers(const tpu_capture_t* capture);
tpu_status_t tpu_capture_buffer_info(const tpu_capture_t* capture, int b, tpu_tensor_t* out_meta);
/* Output k is a view (out_meta: dtype, sizes, strides; data NULL) at element offset *out_offset
 * of inputs[*out_input] (when >= 0) or else of fresh buffer *out_buffer. */
tpu_status_t tpu_capture_output_info(const tpu_capture_t* capture, int k, tpu_tensor_t* out_meta, int* out_input,
                                     int* out_buffer, int64_t* out_offset);
/* Lifetimes inside one run, for callers that give a run's fresh buffers memory of inputs nobody
 * else holds: out_input_last[i] (n_inputs) is the last step of the run that reads input i (-1: none;
 * INT32_MAX: the run writes it or returns a view of it), out_buffer_first[b] (num_buffers) the
 * first step that may write buffer b. A buffer allocated after freeing input i is safe when
 * out_input_last[i] < out_buffer_first[b] (the executor writes an output over an input only
 * after the input's last reader; in any other overlap it goes through a temporary). */
tpu_status_t tpu_capture_lifetimes(const tpu_capture_t* capture, int32_t* out_input_last, int32_t* out_buffer_first);
/* Runs the captured graph once more (async, one task): inputs as at capture (layouts checked),
 * buffers as tpu_capture_buffer_info says. RNG counters are reserved from the device's default
 * generator as eager would. */
tpu_status_t tpu_capture_run(tpu_capture_t* capture, const tpu_tensor_t* inputs, int n_inputs,
                             const tpu_tensor_t* buffers, int n_buffers);
void tpu_capture_free(tpu_capture_t* capture); /* NULL is fine; queued runs stay valid */
/* 1 when tpu_capture_run would accept these inputs' device, dtypes, sizes and strides, else 0. */
int tpu_capture_inputs_match(const tpu_capture_t* capture, const tpu_tensor_t* inputs, int n_inputs);

/* Size templates (dynamic shapes). A graph segment compiled with torch.compile(dynamic=True) gets
 * its sizes (batch, sequence length) as int inputs, and each new size is a new signature. A size
 * template learns, over the captures of one segment (each made with TPU_CAPTURE_KEEP_GRAPH), which
 * integer fields of the captured graph before the compiler passes (result dims, slice/pad/...
 * bounds, size constants), of the capture's bindings (input, parameter, buffer and output
 * layouts and offsets, integer scalars, RNG increments) and of the caller's `extra` integers are
 * c + k*m of the sizes (m: 1, s_i or s_i*s_j); everything else must be identical. Each capture gets
 * a verdict: TPU_SIZE_TEMPLATE_PREDICTED (exactly what the earlier sizes predicted), _GENERALIZED (an
 * instance once a newly varying field or an ambiguity was learned), _NOT_INSTANCE (`reason` names
 * the first difference: another op, a size-dependent float constant...; the template is unchanged;
 * also a capture without a kept graph), _FIRST (*io_template was NULL: created from this capture).
 *     tpu_size_template_t* t = NULL; int verdict; char why[256];
 *     tpu_capture_size_check(&t, capture_4x12, (int64_t[]){4, 12}, 2, NULL, 0, &verdict, why, sizeof why);
 * Errors: INVALID_ARGUMENT (NULLs, more than 8 sizes or another count than at creation),
 * OUT_OF_MEMORY. One owner (not thread-safe); the template does not keep the capture. */
typedef struct tpu_size_template_s tpu_size_template_t;
enum { TPU_SIZE_TEMPLATE_NOT_INSTANCE = 0, TPU_SIZE_TEMPLATE_PREDICTED, TPU_SIZE_TEMPLATE_GENERALIZED,
       TPU_SIZE_TEMPLATE_FIRST };
tpu_status_t tpu_capture_size_check(tpu_size_template_t** io_template, const tpu_capture_t* capture,
                                    const int64_t* sizes, int n_sizes, const int64_t* extra, int n_extra,
                                    int* out_verdict, char* reason, size_t reason_len);
/* A capture for new sizes made from the template instead of recording: the graph and bindings with
 * the sizes substituted, the bindings checked against the graph (parameter and output types, every
 * view inside its input or buffer), the graph compiled (compiler passes and host plan on the
 * concrete graph); out_extra gets the caller's extra integers at these sizes. Learned, not proved:
 * the caller decides when the template has seen enough (e.g. two predicted captures in a row).
 * Refused (*out_capture NULL, reason says why, TPU_OK): a size below 2, a field still ambiguous or
 * varying into a value below 2 (sizes 0 and 1 may lower differently), bindings that do not check,
 * a graph that does not compile. Errors: INVALID_ARGUMENT (NULLs), OUT_OF_MEMORY. flags: as
 * tpu_capture_end_ex (TPU_CAPTURE_KEEP_GRAPH: for tpu_capture_same). */
tpu_status_t tpu_capture_instantiate(const tpu_size_template_t* t, int device, const int64_t* sizes, int n_sizes,
                                     unsigned flags, int64_t* out_extra, int n_extra, tpu_capture_t** out_capture,
                                     char* reason, size_t reason_len);
/* 1 when two captures (both with kept graphs) have the same graph before the passes and the same
 * bindings (an instantiated capture checked against a recorded one), else 0 with the first
 * difference in reason. */
int tpu_capture_same(const tpu_capture_t* a, const tpu_capture_t* b, char* reason, size_t reason_len);
/* Frees a capture's kept graph (after its size check). */
void tpu_capture_drop_graph(tpu_capture_t* capture);
/* Text of the template: the first sample's graph, then one line per size field ("%3 (reshape)
 * dims[0] = s0*s1"; "?" while ambiguous). Returns the bytes needed, NUL included. */
size_t tpu_size_template_print(const tpu_size_template_t* t, char* buf, size_t cap);
void tpu_size_template_free(tpu_size_template_t* t); /* NULL is fine */

/* ------------------------------------------------------------------ metrics */

typedef struct tpu_metrics_s {
  uint64_t ops_run;             /* tpu_op_run calls that enqueued work */
  uint64_t exec_cache_hits;     /* executable found by op signature */
  uint64_t exec_cache_misses;
  uint64_t compiles;            /* IR graphs compiled into executables */
  uint64_t exec_cache_entries;
  double compile_seconds;
  uint64_t kernels_launched;    /* host-driver steps executed */
  uint64_t group_steps;         /* of those, steps run side by side in step groups (TORCH_TPU_EXEC_GROUPS) */
  /* compiler (summed over compiles): graph sizes before/after the passes, rewrites per pass,
   * fusion in the host plans */
  uint64_t graph_ops_before, graph_ops_after;
  uint64_t pass_canon_rewrites, pass_folds, pass_cse_hits, pass_dce_removed;
  uint64_t fusion_clusters;         /* elementwise clusters of 2+ ops (one tile loop each) */
  uint64_t fusion_ops_fused;        /* elementwise ops evaluated inside another op's loop */
  uint64_t fusion_reduce_producers; /* elementwise clusters evaluated inside their reduce */
  uint64_t host_waits;              /* host threads waiting for a device queue (synchronize, d2h copies,
                                       .item(), events): each stalls the asynchronous pipeline */
} tpu_metrics_t;
void tpu_metrics_get(tpu_metrics_t* out_metrics);
void tpu_metrics_reset(void);

/* ------------------------------------------------------------------ compilation cache
 * Two levels: an in-process LRU of executables and a persistent directory (TORCH_TPU_CACHE_DIR,
 * default ~/.cache/torch_tpu; "0" turns it off) shared by processes, capped at
 * TORCH_TPU_CACHE_MAX_BYTES (least recently used files go first). A second process with the same
 * directory and library build loads executables instead of lowering and optimizing again. An
 * unusable directory makes the cache memory-only, with one warning. All functions thread-safe. */
typedef struct tpu_cache_stats_s {
  int disk_enabled;             /* 0: memory only (off, or the directory was unusable) */
  uint64_t memory_entries;      /* executables in the in-process cache */
  uint64_t disk_hits;           /* executables loaded from the directory (not compiled) */
  uint64_t disk_misses;         /* lookups that found no usable file */
  uint64_t disk_writes;         /* files written */
  uint64_t disk_rejected;       /* corrupt, truncated, stale or foreign files refused (and removed) */
  uint64_t disk_evictions;      /* files removed by the size cap */
  uint64_t disk_errors;         /* I/O errors (each is a miss or a skipped write) */
  uint64_t disk_bytes;          /* size of the cache files in the directory (estimate) */
  uint64_t disk_max_bytes;      /* the size cap */
  double disk_load_seconds;     /* reading files and turning hits into executables */
  double disk_store_seconds;    /* writing files */
} tpu_cache_stats_t;
/* Reads the cache configuration (also done on first use); INVALID_ARGUMENT names a bad variable. */
tpu_status_t tpu_cache_init(void);
void tpu_cache_stats_get(tpu_cache_stats_t* out_stats);
void tpu_cache_stats_reset(void);       /* counters to zero (tpu_metrics_reset does not) */
tpu_status_t tpu_cache_clear(void);     /* empties the memory level and deletes the cache files */
const char* tpu_cache_dir(void);        /* the directory in use; "" when the disk level is off */
/* The warning about an unusable directory found at init, once (then NULL); borrowed. */
const char* tpu_cache_take_warning(void);

/* Small helpers (header-only) for building records. */
static inline tpu_tensor_t tpu_tensor_contiguous(void* data, int device, tpu_dtype_t dtype,
                                                 int ndim, const int64_t* sizes) {
  tpu_tensor_t t;
  int64_t stride = 1;
  t.data = data; t.device = device; t.dtype = (int32_t)dtype; t.ndim = ndim; t.flags = 0;
  for (int d = TPU_MAX_DIMS - 1; d >= 0; --d) { t.sizes[d] = 0; t.strides[d] = 0; }
  for (int d = ndim - 1; d >= 0; --d) { t.sizes[d] = sizes[d]; t.strides[d] = stride; stride *= sizes[d]; }
  return t;
}
static inline tpu_arg_t tpu_arg_none(void) { tpu_arg_t a = {0}; a.kind = TPU_ARG_NONE; return a; }
static inline tpu_arg_t tpu_arg_tensor(const tpu_tensor_t* t) {
  tpu_arg_t a = {0}; a.kind = TPU_ARG_TENSOR; a.tensor = t; return a;
}
static inline tpu_arg_t tpu_arg_f64(double v) {
  tpu_arg_t a = {0}; a.kind = TPU_ARG_SCALAR; a.scalar_dtype = TPU_DTYPE_F64;
  a.scalar_flags = TPU_SCALAR_WRAPPED; a.f = v; return a;
}
static inline tpu_arg_t tpu_arg_i64(int64_t v) {
  tpu_arg_t a = {0}; a.kind = TPU_ARG_SCALAR; a.scalar_dtype = TPU_DTYPE_I64;
  a.scalar_flags = TPU_SCALAR_WRAPPED; a.i = v; return a;
}
static inline tpu_arg_t tpu_arg_int(int64_t v) { tpu_arg_t a = {0}; a.kind = TPU_ARG_INT; a.i = v; return a; }
static inline tpu_arg_t tpu_arg_bool(bool v) { tpu_arg_t a = {0}; a.kind = TPU_ARG_BOOL; a.i = v; return a; }
static inline tpu_arg_t tpu_arg_double(double v) { tpu_arg_t a = {0}; a.kind = TPU_ARG_DOUBLE; a.f = v; return a; }
static inline tpu_arg_t tpu_arg_int_list(const int64_t* v, int64_t n) {
  tpu_arg_t a = {0}; a.kind = TPU_ARG_INT_LIST; a.ints = v; a.len = n; return a;
}
static inline tpu_arg_t tpu_arg_string(const char* s) { tpu_arg_t a = {0}; a.kind = TPU_ARG_STRING; a.str = s; return a; }

#ifdef __cplusplus
}
#endif
#endif /* TPURT_H_ */
