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
 * pool can never deadlock.
 * Locality: parallel_for and parallel_for_dynamic hand thread t (the caller is 0, worker i is i) the t-th of
 * (running workers + 1, at most 64) contiguous blocks of chunks first (its own block front to back, then the
 * others' back to front), so
 * the ops of a chain over same-sized tensors give every thread the same index range each time, as OpenMP's static
 * schedule does: the lines a thread wrote stay in its core's cache for the next op. Chunks taken in claim order
 * (as before) gave a thread the other's half in about half the chunks of a chain; where the host placed the two
 * vCPUs on different L3s (measured: 2 MB written over lines the other core read took 230-840 us instead of 33),
 * that made bf16 softmax_backward 5-8x slower. parallel_for_each keeps claim order (costliest unit first). */
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

/* Block claims (see Locality above): word gen:32 | lo:16 | hi:16 per thread, one cache line each; the owner takes
 * lo, others take hi - 1. g_blocked_gen: the gen of the latest job run this way (its chunks are in the blocks). */
#define POOL_MAX_BLOCKS 64
static struct { _Alignas(64) _Atomic uint64_t w; } g_blocks[POOL_MAX_BLOCKS];
static _Atomic uint32_t g_blocked_gen;
static atomic_int g_nblocks; /* set before the job's claim word is published */

/* Set on workers for life and on a caller during its parallel_for: nested calls run inline. */
static _Thread_local bool tl_in_pool;
static _Thread_local int tl_pool_index; /* 0 on callers, i on worker i */
static uint32_t g_start_gen;            /* the claim word's gen when the workers were created */
static _Thread_local int tl_grain_div = 1; /* tpu_pool_set_grain_div */

int tpu_pool_set_grain_div(int div) {
  int old = tl_grain_div;
  tl_grain_div = div < 1 ? 1 : div;
  return old;
}

static inline uint32_t claim_gen(uint64_t c) { return (uint32_t)(c >> 32); }

/* Runs chunk idx of the published job's nch chunks (a claim proved it this thread's) and counts it done. */
static void chunk_run(uint32_t idx, uint32_t nch) {
  int64_t q = g_pool.n / nch, r = g_pool.n % nch;
  int64_t begin = q * idx + TPU_MIN((int64_t)idx, r), end = begin + q + ((int64_t)idx < r);
  g_pool.fn(g_pool.ctx, begin, end);
  if (atomic_fetch_add(&g_pool.done, 1) + 1 == (int)nch && atomic_load(&g_pool.waiting)) {
    pthread_mutex_lock(&g_pool.mu);
    pthread_cond_signal(&g_pool.cv_done);
    pthread_mutex_unlock(&g_pool.mu);
  }
}
static void run_chunks(uint32_t gen) {
  uint64_t c = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
  for (;;) {
    uint32_t nch = (uint32_t)(c >> 16) & 0xffffu, idx = (uint32_t)c & 0xffffu;
    if (claim_gen(c) != gen || idx >= nch) return;
    if (!atomic_compare_exchange_weak_explicit(&g_pool.claim, &c, c + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    chunk_run(idx, nch);
    c = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
  }
}
/* Job gen's chunks from the blocks: block `self` front to back, then the others back to front. A claim is a CAS
 * on a word that still holds gen, so it proves the job runs (its fields are stable), as in run_chunks. */
static void run_blocks(uint32_t gen, uint32_t nch) {
  const int nb = atomic_load_explicit(&g_nblocks, memory_order_relaxed), self = tl_pool_index;
  for (int k = 0; k < nb; ++k) {
    const int b = (self + k) % nb, own = b == self;
    _Atomic uint64_t* w = &g_blocks[b].w;
    uint64_t c = atomic_load_explicit(w, memory_order_acquire);
    for (;;) {
      uint32_t lo = (uint32_t)(c >> 16) & 0xffffu, hi = (uint32_t)c & 0xffffu;
      if (claim_gen(c) != gen) return; /* the job is over */
      if (lo >= hi) break;
      uint64_t nc = own ? c + (1ull << 16) : c - 1;
      if (!atomic_compare_exchange_weak_explicit(w, &c, nc, memory_order_acq_rel, memory_order_acquire)) continue;
      chunk_run(own ? lo : hi - 1, nch);
      c = atomic_load_explicit(w, memory_order_acquire);
    }
  }
}
static void run_job(uint32_t gen) {
  uint64_t c = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
  if (claim_gen(c) != gen) return;
  if (atomic_load(&g_blocked_gen) == gen) run_blocks(gen, (uint32_t)(c >> 16) & 0xffffu);
  else run_chunks(gen);
}

static void* worker_main(void* arg) {
  uint32_t seen = g_start_gen; /* jobs published from now on are new to this worker */
  tl_pool_index = (int)(intptr_t)arg;
  tl_in_pool = true;
  for (;;) {
    uint32_t g = claim_gen(atomic_load_explicit(&g_pool.claim, memory_order_acquire));
    if (g != seen) { seen = g; run_job(g); continue; }
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
    g_start_gen = claim_gen(atomic_load(&g_pool.claim)); /* read by the workers as they start */
    for (int i = 0; g_pool.workers && i < want; ++i) {
      char name[32];
      snprintf(name, sizeof(name), "tpu-pool-%d", i + 1);
      if (tpu_rt_thread_create(&g_pool.workers[g_pool.nworkers], worker_main, (void*)(intptr_t)(g_pool.nworkers + 1), name))
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
  const int blocked = !awake_only; /* parallel_for(_dynamic): blocks; parallel_for_each: claim order */
  if (blocked) {
    const int nb = TPU_MIN(g_pool.nworkers + 1, POOL_MAX_BLOCKS);
    atomic_store_explicit(&g_nblocks, nb, memory_order_relaxed);
    for (int b = 0; b < nb; ++b) { /* block b: chunks [ceil(b nch / nb), ceil((b + 1) nch / nb)) */
      const uint64_t lo = ((uint64_t)b * nch + nb - 1) / nb, hi = ((uint64_t)(b + 1) * nch + nb - 1) / nb;
      atomic_store_explicit(&g_blocks[b].w, (uint64_t)gen << 32 | lo << 16 | hi, memory_order_relaxed);
    }
    atomic_store(&g_blocked_gen, gen);
  }
  /* with blocks, next = nch: run_chunks finds nothing to claim */
  atomic_store(&g_pool.claim, ((uint64_t)gen << 32) | ((uint64_t)nch << 16) | (blocked ? (uint64_t)nch : 0));
  if (atomic_load(&g_pool.sleepers) > 0) {
    pthread_mutex_lock(&g_pool.mu);
    pthread_cond_broadcast(&g_pool.cv_work);
    pthread_mutex_unlock(&g_pool.mu);
  }
  if (blocked) run_blocks(gen, (uint32_t)nch);
  else run_chunks(gen);
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
