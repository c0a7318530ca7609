/* runtime.h — internal API of csrc/tpurt/runtime (not public; other libtpurt modules may use it).
 *
 * The runtime owns the process-wide state behind tpurt.h's tpu_rt_* calls: configuration read
 * from the environment, one caching allocator, one execution queue and one default generator
 * per device, and the shared thread pool (common.h). Everything is created by tpu_rt_init()
 * (called lazily by every public entry point) and destroyed by tpu_rt_shutdown(), which an
 * atexit handler also runs.
 *
 * Example (a module that runs work in queue order and waits for it):
 *
 *     TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));       // init + index check
 *     TPU_RETURN_IF_ERROR(tpu_rt_queue_enqueue(device, "my_op", run, ctx, free));
 *     tpu_rt_queue_wait(device, tpu_rt_queue_enqueued_seq(device)); // errors stay queued
 *
 * All functions are thread-safe unless a comment says otherwise.
 */
#ifndef TPURT_RUNTIME_H_
#define TPURT_RUNTIME_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"

/* ------------------------------------------------------------------ configuration (env.c) */

#define TPU_RT_MAX_DEVICES 64
#define TPU_RT_MAX_THREADS 1024

typedef struct tpu_rt_config_s {
  int num_devices;        /* TORCH_TPU_NUM_DEVICES, 1..64, default 1 */
  uint64_t hbm_bytes;     /* TORCH_TPU_HBM_BYTES, > 0, default tpu_rt_default_hbm_bytes() */
  bool launch_blocking;   /* TORCH_TPU_LAUNCH_BLOCKING, 0/1, default 0 */
  int num_threads;        /* TORCH_TPU_NUM_THREADS, 1..1024, default tpu_rt_default_num_threads() */
  int pool_wait_us;       /* TORCH_TPU_POOL_WAIT_US, 0..100000, default 1000 (pool.c's polling window) */
} tpu_rt_config_t;

/* Parsers for one environment value; `var` only names the variable in error messages. A NULL
 * or empty `value` is an error here (tpu_rt_config_from_env treats unset/empty as "default").
 * Errors: TPU_STATUS_INVALID_ARGUMENT, "VAR='value' is invalid: expected ...".
 *   int:   decimal integer in [lo, hi], surrounding blanks allowed.
 *   bytes: positive integer with optional suffix K, M, G, T (base 1024; also KB/KiB...,
 *          any case), e.g. "16G", "512MiB", "1048576"; must fit in uint64 and be > 0.
 *   bool:  "0" or "1". */
tpu_status_t tpu_rt_env_parse_int(const char* var, const char* value, int64_t lo, int64_t hi,
                                  int64_t* out_value);
tpu_status_t tpu_rt_env_parse_bytes(const char* var, const char* value, uint64_t* out_value);
tpu_status_t tpu_rt_env_parse_bool(const char* var, const char* value, bool* out_value);
/* An on/off switch read from the environment once: *cell starts at -1; unset or empty -> dflt, a value whose
 * first non-blank character is '0' -> 0, anything else -> 1. _set overrides it (test hooks) and returns the
 * previous value. */
int tpu_rt_env_switch(int* cell, const char* var, int dflt);
int tpu_rt_env_switch_set(int* cell, const char* var, int dflt, int on);

/* Reads all TORCH_TPU_* runtime variables; first invalid one wins. */
tpu_status_t tpu_rt_config_from_env(tpu_rt_config_t* out_config);
uint64_t tpu_rt_default_hbm_bytes(int num_devices); /* physical RAM / 2 / num_devices */
int tpu_rt_default_num_threads(void);               /* CPUs this process may run on */

/* ------------------------------------------------------------------ lifecycle (device.c) */

/* The active configuration; only meaningful after a successful tpu_rt_init(). Borrowed. */
const tpu_rt_config_t* tpu_rt_config(void);

/* Lazily initializes, then checks 0 <= device < count. Cheap after init (hot path).
 * Errors: init's, or INVALID_ARGUMENT "invalid device index 3: 2 tpu devices". */
tpu_status_t tpu_rt_device_check(int device);

/* Drains and joins every worker thread, frees all runtime memory (device allocations
 * included) and returns to the uninitialized state; the next tpu_rt_* call re-reads the
 * environment. Registered with atexit by the first successful init. NOT thread-safe: no
 * other thread may use the runtime (or hold pointers into it) while or after it runs. */
void tpu_rt_shutdown(void);

/* ------------------------------------------------------------------ per-module lifecycles */
/* Called by tpu_rt_init / tpu_rt_shutdown with the init lock held; not for other callers. */
tpu_status_t tpu_rt_alloc_init(int num_devices, uint64_t capacity_bytes);
void tpu_rt_alloc_shutdown(void);
tpu_status_t tpu_rt_queue_init(int num_devices);
void tpu_rt_queue_shutdown(void);
tpu_status_t tpu_rt_generators_init(int num_devices);
void tpu_rt_generators_shutdown(void);
void tpu_pool_init(int num_threads); /* workers start at the first parallel call */
void tpu_pool_shutdown(void);

/* ------------------------------------------------------------------ queues (queue.c) */

/* Enqueue blocks while this many tasks of the device wait to start (bounds host memory). */
#define TPU_RT_QUEUE_MAX_PENDING 16384

/* Sequence numbers: the n-th task enqueued on a device has seq n (1-based); completed_seq is
 * the seq of the last finished task (tasks finish in order). Both only grow until shutdown. */
uint64_t tpu_rt_queue_enqueued_seq(int device);
uint64_t tpu_rt_queue_completed_seq(int device);

/* Waits until completed_seq >= seq. Leaves a recorded task error in place (unlike
 * tpu_rt_synchronize). Returns at once when called from a task of the same device (the task
 * itself can never complete while it waits; everything enqueued before it has finished). */
void tpu_rt_queue_wait(int device, uint64_t seq);

/* Device whose task is running on the calling thread (queue worker or a LAUNCH_BLOCKING
 * caller), or -1. */
int tpu_rt_queue_current_device(void);

/* If the device's queue is idle (completed == enqueued) and the caller is not one of its tasks,
 * runs fn(ctx) on the calling thread at once as the next task, as the worker would (its sequence
 * number; a failure recorded for synchronize, prefixed by op_name), and returns true; work enqueued
 * meanwhile runs after it. Else returns false and runs nothing (e.g. the caller stages a copy). */
bool tpu_rt_queue_run_if_idle(int device, const char* op_name, tpu_rt_task_fn fn, void* ctx);

/* tpu_rt_queue_enqueue for a task known to be small (microseconds): if the queue is idle, its
 * worker sleeps and the caller is not a task, runs it on the calling thread at once, as the worker
 * would (its sequence number, a failure recorded for synchronize, TPU_OK returned, free_fn
 * called); else enqueues it. */
tpu_status_t tpu_rt_queue_enqueue_small(int device, const char* op_name, tpu_rt_task_fn fn, void* ctx,
                                        tpu_rt_task_free_fn free_fn);

/* Tests only (test_runtime.c), NULL otherwise: called on the producer's thread after a task it ran
 * there (enqueue_small, run_if_idle, LAUNCH_BLOCKING) has completed, before the worker may start
 * the tasks enqueued meanwhile. Set it while no task runs. */
typedef void (*tpu_rt_queue_test_hook_fn)(int device);
extern tpu_rt_queue_test_hook_fn tpu_rt_queue_test_hook;

/* Enqueues a no-op marker whose completion time is recorded (events); *out_seq is its seq. */
tpu_status_t tpu_rt_queue_enqueue_marker(int device, uint64_t* out_seq);

/* Fused-eager hooks (lower/trace.c registers them; runtime/ never includes lower/).
 * flush(device): called before any work is enqueued on, waited for on, or copied directly into
 * `device` (queue pushes, waits, synchronize, idle-queue copies) by a thread that is not running
 * a task; it must enqueue the device's pending recorded ops first.
 * on_free(device, lo, hi): called by tpu_rt_free with the block [lo, hi) (allocator lock held:
 * it must not call the allocator); returns true when recorded-but-unflushed ops exist on the
 * device, so the block's release fence moves past the task that will run them. */
typedef void (*tpu_rt_flush_hook_fn)(int device);
typedef bool (*tpu_rt_free_hook_fn)(int device, uintptr_t lo, uintptr_t hi);
void tpu_rt_set_trace_hooks(tpu_rt_flush_hook_fn flush, tpu_rt_free_hook_fn on_free);
extern tpu_rt_flush_hook_fn _Atomic tpu_rt_flush_hook;
extern tpu_rt_free_hook_fn _Atomic tpu_rt_free_hook;
/* Devices with recorded-but-unflushed ops (trace.c counts a device's 0 -> some and back): while it is
 * 0, tpu_rt_free skips on_free (a load instead of a call per free). */
extern int _Atomic tpu_rt_traces_pending;
static inline void tpu_rt_trace_flush_hook(int device) {
  tpu_rt_flush_hook_fn f = tpu_rt_flush_hook;
  if (__builtin_expect(f != NULL, 0) && tpu_rt_queue_current_device() < 0) f(device);
}

/* ------------------------------------------------------------------ RNG (generator.c) */

/* One Philox4x32-10 block (Random123): counter words (c0, c1, c2, c3) =
 * (lo32(counter_lo), hi32(counter_lo), lo32(counter_hi_offset), hi32(counter_hi_offset)),
 * key = (lo32(seed), hi32(seed)). Writes 4 uniformly distributed 32-bit words. */
void tpu_philox4x32_10(uint64_t seed, uint64_t counter_hi_offset, uint64_t counter_lo,
                       uint32_t out[4]);

/* ------------------------------------------------------------------ small helpers */

/* pthread_create with every signal blocked in the new thread (signals go to the application's
 * own threads, e.g. Python's main thread) and a name for debuggers ("tpu-queue-0"). Returns
 * pthread_create's error number. */
int tpu_rt_thread_create(pthread_t* out_thread, void* (*fn)(void*), void* arg, const char* name);

/* "512 B", "1.50 KiB", "2.00 MiB", "1.00 GiB", "3.25 TiB" into buf (>= 32 chars). */
void tpu_rt_format_bytes(uint64_t nbytes, char* buf, size_t buf_len);
uint64_t tpu_rt_now_ns(void); /* CLOCK_MONOTONIC */
static inline void tpu_rt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif /* TPURT_RUNTIME_H_ */
