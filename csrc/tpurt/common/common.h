/* common.h — internal helpers shared by every libtpurt module (not public API).
 * May include only the public header and the C standard library. */
#ifndef TPURT_COMMON_H_
#define TPURT_COMMON_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tpurt.h"

#define TPU_RETURN_IF_ERROR(expr)          \
  do {                                     \
    tpu_status_t tpu_st_ = (expr);         \
    if (tpu_st_ != TPU_OK) return tpu_st_; \
  } while (0)

#define TPU_ERR(code, ...) tpu_status_make(TPU_STATUS_##code, __VA_ARGS__)
#define TPU_ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define TPU_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TPU_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- bf16 / f16 <-> f32, round-to-nearest-even, NaN preserved (as PyTorch). */
static inline float tpu_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t tpu_f32_to_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
/* f16 <-> f32 without branches, so loops over them vectorize (the tile kernels' f16 loads / stores): subnormal
 * halves are exact int -> float conversions times 2^-24; a float below 2^-14 rounds to its subnormal half by one
 * IEEE add: |f| + 0.5 keeps |f| / 2^-24 rounded to nearest-even in its low mantissa bits (default rounding mode;
 * DAZ / FTZ change nothing: an f32 denormal rounds to a zero half either way, and the sums are normal). NaN
 * payloads kept, quieted. tests/test_tile_convert.c checks every input against an integer-only reference. */
static inline float tpu_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, m = h & 0x7fffu;
  const uint32_t nrm = (m << 13) + (112u << 23), naninf = (m << 13) | 0x7f800000u;
  const float subf = (float)(int32_t)m * 5.9604644775390625e-8f; /* m * 2^-24, m < 1024 */
  uint32_t sub, u;
  memcpy(&sub, &subf, 4);
  u = sign | (m >= 0x7c00u ? naninf : (m >= 0x400u ? nrm : sub));
  float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t tpu_f32_to_f16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  const uint32_t nrm = (a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13;
  float af; memcpy(&af, &a, 4); af += 0.5f;
  uint32_t sub; memcpy(&sub, &af, 4); sub -= 0x3f000000u;
  const uint32_t r = a > 0x7f800000u ? nan : (a >= 0x477ff000u ? 0x7c00u : (a >= 0x38800000u ? nrm : sub));
  return (uint16_t)(sign | r);
}

static inline int tpu_dtype_is_floating(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_F16 || dt == TPU_DTYPE_BF16;
}
static inline int tpu_dtype_is_integral(int dt) { /* bool excluded */
  return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32 || dt == TPU_DTYPE_I16 || dt == TPU_DTYPE_I8 ||
         dt == TPU_DTYPE_U8;
}
static inline int64_t tpu_numel(int ndim, const int64_t* sizes) {
  int64_t n = 1; for (int d = 0; d < ndim; ++d) n *= sizes[d]; return n;
}

/* ---- CPU features (runtime dispatch). Implemented in runtime/cpu.c. */
int tpu_cpu_has_avx2_fma(void); /* AVX2 + FMA + F16C */
int tpu_cpu_has_avx512f(void);
int tpu_cpu_has_avx512bf16(void); /* vdpbf16ps: CPUID.(7,1):EAX[5] + OS-enabled zmm state */
const char* tpu_cpu_features_string(void);

/* ---- thread pool (runtime/pool.c). One pool per process, sized by
 * TORCH_TPU_NUM_THREADS or the online core count. parallel_for splits [0, n)
 * into chunks of at least `grain` and calls fn(ctx, begin, end) on the pool
 * (the calling thread takes part). Runs inline when n <= grain or the pool has
 * one thread, or when called from inside a pool worker (no nesting). */
typedef void (*tpu_pool_fn)(void* ctx, int64_t begin, int64_t end);
void tpu_pool_parallel_for(int64_t n, int64_t grain, tpu_pool_fn fn, void* ctx);
int tpu_pool_num_threads(void);
/* Width of the column blocks that split n columns over the pool: ceil(n / wide) blocks, or one per thread of at
 * least `minw` columns when that is more, rounded up to a multiple of `align`, at most `wide`. Columns only, so
 * sums keep their order (the column-sum kernels: rows.c, colsum.c). */
static inline int64_t tpu_pool_column_block(int64_t n, int64_t wide, int64_t minw, int64_t align) {
  int64_t nb = (n + wide - 1) / wide, per_thread = n / minw, th = tpu_pool_num_threads();
  if (per_thread > th) per_thread = th;
  if (per_thread > nb) nb = per_thread;
  int64_t bw = ((n + nb - 1) / nb + align - 1) / align * align;
  return bw < wide ? bw : wide;
}
/* Same, in up to 4 chunks per thread taken as threads come free (for units of uneven cost, or
 * many units: a thread that starts late leaves its share to the others). */
void tpu_pool_parallel_for_dynamic(int64_t n, int64_t grain, tpu_pool_fn fn, void* ctx);
/* Same, one chunk per unit (up to 65535 units), taken in order as threads come free: units sorted by
 * decreasing cost balance like longest-processing-time first (the host executor's step groups). Runs on
 * the caller alone when every worker sleeps (waking one costs more than short units gain; see tpu_pool_wake). */
void tpu_pool_parallel_for_each(int64_t n, tpu_pool_fn fn, void* ctx);
/* Wakes sleeping pool workers without giving them work: they poll for the next job for a while
 * (TORCH_TPU_POOL_WAIT_US), so a job published soon after starts on every thread at once (a sleeping worker
 * on a virtual machine wakes late). Returns at once; a no-op with one thread or inside a pool task. */
void tpu_pool_wake(void);
/* Per calling thread: later parallel_for calls of this thread use grain / div (at least 1), so
 * mid-size work is split too. The host executor sets it while it runs a multi-step graph (the
 * host thread is then mostly idle). Kernels must not depend on how [0, n) is chunked (every
 * kernel's units are computed the same way on any thread). Returns the previous divisor. */
int tpu_pool_set_grain_div(int div);

/* ---- device queues (runtime/queue.c). A task runs on the device's worker
 * thread in enqueue order. Ownership of ctx passes to the queue: free_fn(ctx)
 * is called after fn ran (or if enqueueing fails). A task's failure status is
 * recorded (first one wins, message prefixed with op_name) and returned by the
 * next tpu_rt_synchronize. With TORCH_TPU_LAUNCH_BLOCKING=1 the queue is
 * drained, fn runs on the calling thread, and its status is returned directly. */
typedef tpu_status_t (*tpu_rt_task_fn)(void* ctx);
typedef void (*tpu_rt_task_free_fn)(void* ctx);
tpu_status_t tpu_rt_queue_enqueue(int device, const char* op_name, tpu_rt_task_fn fn, void* ctx,
                                  tpu_rt_task_free_fn free_fn);

/* ---- executor scratch (runtime/allocator.c), process-wide atomics: a driver's temporaries outside
 * the caching allocator (host executor: values inside one executable's run, and its block cache).
 * live_delta: bytes taken (+) / given back (-) by running executables; cached_delta: bytes kept
 * (+) / released (-) by the drivers' block caches. Reported by tpu_rt_memory_stats. */
void tpu_rt_scratch_add(int64_t live_delta, int64_t cached_delta);

/* ---- metrics counters (runtime/metrics.c), atomics. */
void tpu_metrics_add_ops(uint64_t n);
void tpu_metrics_add_cache(int hit);
void tpu_metrics_add_compile(double seconds);
void tpu_metrics_set_cache_entries(uint64_t n);
void tpu_metrics_add_kernels(uint64_t n);
void tpu_metrics_add_group_steps(uint64_t n);
void tpu_metrics_add_host_wait(void);
/* compiler/pipeline.c: graph sizes around the passes and their rewrite counts; fusion in the plan. */
void tpu_metrics_add_graph(uint64_t ops_before, uint64_t ops_after, uint64_t canon, uint64_t folds,
                           uint64_t cse, uint64_t dce);
void tpu_metrics_add_fusion(uint64_t clusters, uint64_t fused_ops, uint64_t reduce_producers);

#endif /* TPURT_COMMON_H_ */
