/* pool.c — the process-wide thread pool behind tpu_pool_parallel_for (common.h).
 *
 * One job at a time: the caller publishes (fn, ctx, n) and a 64-bit claim word
 * gen:32 | nchunks:16 | next:16. Workers and the caller take chunks by CAS on that word, so a
 * worker that wakes late for an old job can never take a chunk of a newer one (the gen
 * differs), and a successful claim proves the job is still running (its fields are stable).
 * Hand-off: workers spin ~50 us on the claim word, then poll it with sched_yield for up to
 * ~1 ms more, then sleep on a condvar; the caller signals only if someone sleeps (seq_cst
 * Dekker pair: sleepers/claim, waiting/done); the caller waits for the last chunk the same way.
 * The yield phase keeps a worker awake across the gaps between a step's ops (most are < 1 ms)
 * without holding a core another thread wants: a sleeping worker woke late (on a quiet virtual
 * machine an idle vCPU halts, and waking it costs far more than 50 us), so small ops ran on
 * the caller alone and large ones waited for the late chunk.
 * tpu_pool_parallel_for_dynamic splits into up to POOL_DYN_CHUNKS chunks per thread, so a late
 * or slower thread leaves its share to the others; tpu_pool_parallel_for_each into one chunk per unit.
 * A second concurrent caller (another device queue) does not wait: it runs inline, so the
 * pool can never deadlock. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/runtime.h"

#define POOL_SPIN_NS 50000ull /* pause loop */
#define POOL_DYN_CHUNKS 4     /* tpu_pool_parallel_for_dynamic: chunks per thread */
/* then the sched_yield loop: TORCH_TPU_POOL_WAIT_US (tpu_rt_config_t.pool_wait_us, 0..100000, default 1000;
 * 0: sleep right after the pause loop, as before session 7), read once when the workers start */
static uint64_t g_pool_yield_ns = 1000000ull;

/* Called every 64 polls while waiting since t0: 0 keep polling (yielding the core once past
 * the pause phase), 1 go to sleep. */
static int pool_wait_step(uint64_t t0) {
  uint64_t el = tpu_rt_now_ns() - t0;
  if (el <= POOL_SPIN_NS) return 0;
  if (el > POOL_SPIN_NS + g_pool_yield_ns) return 1;
  sched_yield();
  return 0;
}

static struct {
  pthread_mutex_t start_mu; /* guards nthreads / workers / started */
  atomic_int nthreads;      /* size kernels plan for, caller included (tpu_pool_num_threads) */
  int nworkers;             /* worker threads actually running */
  pthread_t* workers;
  atomic_bool started;
  pthread_mutex_t call_mu; /* held by the caller whose job is published */
  tpu_pool_fn fn;          /* job fields: written before claim is published */
  void* ctx;
  int64_t n;
  _Atomic uint64_t claim;
  atomic_int done;
  pthread_mutex_t mu; /* sleep/wake only */
  pthread_cond_t cv_work, cv_done;
  atomic_int sleepers;
  atomic_bool waiting, stop;
} g_pool = {
    .start_mu = PTHREAD_MUTEX_INITIALIZER, .nthreads = 1, .call_mu = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER, .cv_work = PTHREAD_COND_INITIALIZER,
    .cv_done = PTHREAD_COND_INITIALIZER,
};

/* Set on workers for life and on a caller during its parallel_for: nested calls run inline. */
static _Thread_local bool tl_in_pool;
static _Thread_local int tl_grain_div = 1; /* tpu_pool_set_grain_div */

int tpu_pool_set_grain_div(int div) {
  int old = tl_grain_div;
  tl_grain_div = div < 1 ? 1 : div;
  return old;
}

static inline uint32_t claim_gen(uint64_t c) { return (uint32_t)(c >> 32); }

static void run_chunks(uint32_t gen) {
  uint64_t c = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
  for (;;) {
    uint32_t nch = (uint32_t)(c >> 16) & 0xffffu, idx = (uint32_t)c & 0xffffu;
    if (claim_gen(c) != gen || idx >= nch) return;
    if (!atomic_compare_exchange_weak_explicit(&g_pool.claim, &c, c + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    int64_t q = g_pool.n / nch, r = g_pool.n % nch;
    int64_t begin = q * idx + TPU_MIN((int64_t)idx, r), end = begin + q + ((int64_t)idx < r);
    g_pool.fn(g_pool.ctx, begin, end);
    if (atomic_fetch_add(&g_pool.done, 1) + 1 == (int)nch && atomic_load(&g_pool.waiting)) {
      pthread_mutex_lock(&g_pool.mu);
      pthread_cond_signal(&g_pool.cv_done);
      pthread_mutex_unlock(&g_pool.mu);
    }
    c = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
  }
}

static void* worker_main(void* arg) {
  uint32_t seen = (uint32_t)(uintptr_t)arg;
  tl_in_pool = true;
  for (;;) {
    uint32_t g = claim_gen(atomic_load_explicit(&g_pool.claim, memory_order_acquire));
    if (g != seen) { seen = g; run_chunks(g); continue; }
    if (atomic_load(&g_pool.stop)) break;
    uint64_t t0 = tpu_rt_now_ns();
    for (int i = 1;; ++i) {
      if (claim_gen(atomic_load_explicit(&g_pool.claim, memory_order_acquire)) != seen ||
          atomic_load_explicit(&g_pool.stop, memory_order_relaxed))
        break;
      tpu_rt_cpu_relax();
      if ((i & 63) == 0 && pool_wait_step(t0)) {
        pthread_mutex_lock(&g_pool.mu);
        atomic_fetch_add(&g_pool.sleepers, 1);
        while (claim_gen(atomic_load(&g_pool.claim)) == seen && !atomic_load(&g_pool.stop))
          pthread_cond_wait(&g_pool.cv_work, &g_pool.mu);
        atomic_fetch_sub(&g_pool.sleepers, 1);
        pthread_mutex_unlock(&g_pool.mu);
        break;
      }
    }
  }
  return NULL;
}

static void workers_start(void) {
  pthread_mutex_lock(&g_pool.start_mu);
  if (!atomic_load(&g_pool.started)) {
    g_pool_yield_ns = (uint64_t)tpu_rt_config()->pool_wait_us * 1000ull;
    int want = atomic_load(&g_pool.nthreads) - 1;
    g_pool.workers = want > 0 ? calloc((size_t)want, sizeof(pthread_t)) : NULL;
    uint32_t gen = claim_gen(atomic_load(&g_pool.claim));
    for (int i = 0; g_pool.workers && i < want; ++i) {
      char name[32];
      snprintf(name, sizeof(name), "tpu-pool-%d", i + 1);
      if (tpu_rt_thread_create(&g_pool.workers[g_pool.nworkers], worker_main, (void*)(uintptr_t)gen, name))
        break; /* run with the workers we got */
      ++g_pool.nworkers;
    }
    atomic_store(&g_pool.nthreads, g_pool.nworkers + 1); /* plan for the workers we got */
    atomic_store(&g_pool.started, true);
  }
  pthread_mutex_unlock(&g_pool.start_mu);
}

void tpu_pool_init(int num_threads) {
  pthread_mutex_lock(&g_pool.start_mu);
  int n = TPU_MAX(num_threads, 1);
  /* Once the workers run, the pool can only shrink: kernels must never plan for threads it lacks. */
  if (atomic_load(&g_pool.started)) n = TPU_MIN(n, g_pool.nworkers + 1);
  atomic_store(&g_pool.nthreads, n);
  pthread_mutex_unlock(&g_pool.start_mu);
}

void tpu_pool_shutdown(void) {
  pthread_mutex_lock(&g_pool.start_mu);
  if (atomic_load(&g_pool.started)) {
    pthread_mutex_lock(&g_pool.mu);
    atomic_store(&g_pool.stop, true);
    pthread_cond_broadcast(&g_pool.cv_work);
    pthread_mutex_unlock(&g_pool.mu);
    for (int i = 0; i < g_pool.nworkers; ++i) pthread_join(g_pool.workers[i], NULL);
    free(g_pool.workers);
    g_pool.workers = NULL;
    g_pool.nworkers = 0;
    atomic_store(&g_pool.stop, false);
    atomic_store(&g_pool.started, false);
  }
  atomic_store(&g_pool.nthreads, 1);
  pthread_mutex_unlock(&g_pool.start_mu);
}

int tpu_pool_num_threads(void) {
  (void)tpu_rt_num_threads(); /* the runtime's lazy init sizes the pool from TORCH_TPU_NUM_THREADS */
  return atomic_load_explicit(&g_pool.nthreads, memory_order_relaxed);
}

static void pool_run(int64_t n, int64_t grain, tpu_pool_fn fn, void* ctx, int64_t per_thread, int awake_only) {
  if (n <= 0 || !fn) return;
  if (tl_grain_div > 1) grain /= tl_grain_div;
  if (grain < 1) grain = 1;
  if (n <= grain || tl_in_pool || tpu_pool_num_threads() <= 1) { fn(ctx, 0, n); return; }
  if (!atomic_load_explicit(&g_pool.started, memory_order_acquire)) workers_start();
  int64_t nch = TPU_MIN(TPU_MIN(per_thread * (g_pool.nworkers + 1), (int64_t)0xffff), n / grain);
  if (nch <= 1 || (awake_only && atomic_load(&g_pool.sleepers) >= g_pool.nworkers) ||
      pthread_mutex_trylock(&g_pool.call_mu) != 0) {
    fn(ctx, 0, n);
    return;
  }
  tl_in_pool = true;
  g_pool.fn = fn;
  g_pool.ctx = ctx;
  g_pool.n = n;
  atomic_store_explicit(&g_pool.done, 0, memory_order_relaxed);
  uint32_t gen = claim_gen(atomic_load(&g_pool.claim)) + 1;
  atomic_store(&g_pool.claim, ((uint64_t)gen << 32) | ((uint64_t)nch << 16));
  if (atomic_load(&g_pool.sleepers) > 0) {
    pthread_mutex_lock(&g_pool.mu);
    pthread_cond_broadcast(&g_pool.cv_work);
    pthread_mutex_unlock(&g_pool.mu);
  }
  run_chunks(gen);
  uint64_t t0 = tpu_rt_now_ns();
  for (int i = 1; atomic_load_explicit(&g_pool.done, memory_order_acquire) < nch; ++i) {
    tpu_rt_cpu_relax();
    if ((i & 63) == 0 && pool_wait_step(t0)) {
      pthread_mutex_lock(&g_pool.mu);
      atomic_store(&g_pool.waiting, true);
      while (atomic_load(&g_pool.done) < nch) pthread_cond_wait(&g_pool.cv_done, &g_pool.mu);
      atomic_store(&g_pool.waiting, false);
      pthread_mutex_unlock(&g_pool.mu);
      break;
    }
  }
  tl_in_pool = false;
  pthread_mutex_unlock(&g_pool.call_mu);
}

/* An empty job (no chunks): sleeping workers wake and poll for the next one (the pause and yield phases). */
void tpu_pool_wake(void) {
  if (tl_in_pool || tpu_pool_num_threads() <= 1) return;
  if (!atomic_load_explicit(&g_pool.started, memory_order_acquire)) workers_start();
  if (atomic_load(&g_pool.sleepers) == 0 || pthread_mutex_trylock(&g_pool.call_mu) != 0) return;
  uint32_t gen = claim_gen(atomic_load(&g_pool.claim)) + 1;
  atomic_store(&g_pool.claim, (uint64_t)gen << 32);
  pthread_mutex_lock(&g_pool.mu);
  pthread_cond_broadcast(&g_pool.cv_work);
  pthread_mutex_unlock(&g_pool.mu);
  pthread_mutex_unlock(&g_pool.call_mu);
}

void tpu_pool_parallel_for(int64_t n, int64_t grain, tpu_pool_fn fn, void* ctx) { pool_run(n, grain, fn, ctx, 1, 0); }

void tpu_pool_parallel_for_dynamic(int64_t n, int64_t grain, tpu_pool_fn fn, void* ctx) {
  pool_run(n, grain, fn, ctx, POOL_DYN_CHUNKS, 0);
}

void tpu_pool_parallel_for_each(int64_t n, tpu_pool_fn fn, void* ctx) { pool_run(n, 1, fn, ctx, 0xffff, 1); }
