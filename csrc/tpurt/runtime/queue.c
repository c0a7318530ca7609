/* queue.c — one in-order execution queue per device, run by a lazily started worker thread;
 * sequence numbers, first-error recording, synchronize, events.
 *
 * Hot path: producers take the queue mutex (shared only among producers) for a ring push and
 * signal the condvar only if the worker sleeps. The worker never locks to take a task: it
 * reads the ring between `head` (its own) and `tail` (release-stored by producers), and it
 * publishes completion with an atomic store, locking only to wake a waiter (Dekker-style:
 * seq_cst `completed` store, then `waiters` load). This keeps the main thread and the worker
 * from contending on a mutex (a futex system call each time they collide). The ring grows by
 * publishing a bigger copy; old rings stay allocated until shutdown, so a worker that read
 * the old pointer still reads valid slots. The worker spins ~30 us on `tail` before sleeping,
 * and waiters spin ~20 us on the completed counter, to cut wake-up latency. A sleeping waiter is
 * woken by the task it waits for, not by every task before it (wake_seq).
 * A failing task records the first error ("<op>: <message>"); later tasks still run (they
 * were validated at enqueue time; skipping them would leave outputs stale in ways that are
 * harder to diagnose). tpu_rt_synchronize returns and clears that error.
 * At most TPU_RT_QUEUE_MAX_PENDING tasks wait to start; enqueue blocks beyond that. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

#define QUEUE_SPIN_NS 30000ull
#define WAIT_SPIN_NS 20000ull
#define QUEUE_OP_NAME_LEN 96
#define QUEUE_EVENT_RING 4096 /* events whose completion times are kept */

typedef struct {
  tpu_rt_task_fn fn;
  void* ctx;
  tpu_rt_task_free_fn free_fn;
  uint64_t seq; /* sequence number */
  bool marker;  /* event marker: record completion time */
  char op[QUEUE_OP_NAME_LEN];
} task_t;

/* cap is a power of two; prev: the smaller ring this one replaced (freed at shutdown). */
typedef struct ring_s { struct ring_s* prev; uint64_t cap; task_t slots[]; } ring_t;

typedef struct {
  pthread_mutex_t mu; /* producers; the worker only to sleep; errors; waiters' condvar */
  pthread_cond_t cv_work, cv_done;
  _Atomic(ring_t*) ring;
  _Alignas(64) _Atomic uint64_t tail;     /* ring position: written by producers under mu */
  _Alignas(64) _Atomic uint64_t head;     /* ring position: written by the worker only */
  _Alignas(64) _Atomic uint64_t completed; /* sequence numbers (inline tasks included) */
  _Alignas(64) _Atomic uint64_t enqueued;
  _Atomic int waiters;
  _Atomic int inline_running; /* a small task runs on its producer (tpu_rt_queue_enqueue_small): the worker waits */
  _Atomic uint64_t wake_seq; /* lowest `completed` a sleeping waiter needs (UINT64_MAX: none; 0: any) */
  atomic_bool worker_sleeping; /* written under mu; read without it by queue_enqueue_small's pre-check */
  bool started;
  atomic_bool stop;
  pthread_t thread;
  int device;
  tpu_status_t error;        /* first task failure since the last synchronize */
  pthread_mutex_t inline_mu; /* LAUNCH_BLOCKING: one inline task at a time */
  pthread_mutex_t ev_mu;     /* completion times of the last QUEUE_EVENT_RING markers */
  uint64_t ev_count, ev_seq[QUEUE_EVENT_RING], ev_ns[QUEUE_EVENT_RING];
} queue_t;

static queue_t* g_queues;
static int g_nqueues;
static _Thread_local int tl_task_device = -1;

tpu_rt_flush_hook_fn _Atomic tpu_rt_flush_hook;
tpu_rt_free_hook_fn _Atomic tpu_rt_free_hook;
int _Atomic tpu_rt_traces_pending;
void tpu_rt_set_trace_hooks(tpu_rt_flush_hook_fn flush, tpu_rt_free_hook_fn on_free) {
  tpu_rt_free_hook = on_free;
  tpu_rt_flush_hook = flush;
}

int tpu_rt_queue_current_device(void) { return tl_task_device; }

tpu_rt_queue_test_hook_fn tpu_rt_queue_test_hook;

/* op: names the task in a recorded error (t->op, or a caller-run task's own name, never copied) */
static void task_finish(queue_t* q, const task_t* t, const char* op, tpu_status_t st, bool record_error) {
  const uint64_t seq = t->seq;
  if (t->free_fn) t->free_fn(t->ctx);
  if (t->marker) {
    uint64_t now = tpu_rt_now_ns();
    pthread_mutex_lock(&q->ev_mu);
    q->ev_seq[q->ev_count % QUEUE_EVENT_RING] = seq;
    q->ev_ns[q->ev_count % QUEUE_EVENT_RING] = now;
    q->ev_count++;
    pthread_mutex_unlock(&q->ev_mu);
  }
  if (st && record_error) {
    pthread_mutex_lock(&q->mu);
    if (!q->error) q->error = tpu_status_make(tpu_status_code(st), "%s: %s", op ? op : "<unnamed task>", tpu_status_message(st));
    pthread_mutex_unlock(&q->mu);
  }
  atomic_store(&q->completed, seq); /* seq_cst: ordered before the waiters load (see the header) */
  /* wake sleepers only when one of them can proceed: a host thread synchronizing on a long queue
   * is not woken (two context switches and a mutex hand-off) by every task before its own */
  if (atomic_load(&q->waiters) && atomic_load(&q->wake_seq) <= seq) {
    pthread_mutex_lock(&q->mu);
    atomic_store(&q->wake_seq, UINT64_MAX); /* sleepers still waiting register again */
    pthread_cond_broadcast(&q->cv_done);
    pthread_mutex_unlock(&q->mu);
  }
  if (record_error) tpu_status_free(st);
}

/* Runs t as queue position t->seq on the calling thread: the worker, or a producer that claimed
 * the position (run_on_caller, run_inline). Returns the task's status if !record_error, else TPU_OK. */
static inline __attribute__((always_inline)) tpu_status_t task_run(queue_t* q, task_t* t, const char* op,
                                                                   bool record_error) {
  int* tl = &tl_task_device; /* one TLS look-up, not three */
  const int prev = *tl;       /* a task of another device may run one here */
  *tl = q->device;
  tpu_status_t st = t->fn ? t->fn(t->ctx) : TPU_OK;
  *tl = prev;
  task_finish(q, t, op, st, record_error);
  return record_error ? TPU_OK : st;
}

/* Sleeps on cv_done until `cond` holds; the caller holds q->mu. `target`: the `completed` value
 * that can make cond true (0: any task completion). Registering it in wake_seq (seq_cst store,
 * then the cond load; the worker stores `completed`, then loads wake_seq) loses no wake-up. */
#define QUEUE_WAIT_LOCKED(q, target, cond)                                         \
  do {                                                                            \
    atomic_fetch_add(&(q)->waiters, 1);                                           \
    while (!(cond)) {                                                             \
      if (atomic_load(&(q)->wake_seq) > (target)) atomic_store(&(q)->wake_seq, (target)); \
      if (cond) break;                                                            \
      pthread_cond_wait(&(q)->cv_done, &(q)->mu);                                 \
    }                                                                             \
    atomic_fetch_sub(&(q)->waiters, 1);                                           \
  } while (0)

static void* worker_main(void* arg) {
  queue_t* q = arg;
  for (;;) {
    uint64_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
    if (atomic_load_explicit(&q->tail, memory_order_acquire) == h) {
      if (atomic_load(&q->stop)) break;
      uint64_t t0 = tpu_rt_now_ns();
      for (int i = 1; atomic_load_explicit(&q->tail, memory_order_relaxed) == h &&
                      !atomic_load_explicit(&q->stop, memory_order_relaxed); ++i) {
        tpu_rt_cpu_relax();
        if ((i & 63) == 0 && tpu_rt_now_ns() - t0 > QUEUE_SPIN_NS) break;
      }
      pthread_mutex_lock(&q->mu); /* producers push under mu: no lost wake-up */
      if (atomic_load(&q->tail) == h && !atomic_load(&q->stop)) {
        atomic_store_explicit(&q->worker_sleeping, true, memory_order_relaxed);
        pthread_cond_wait(&q->cv_work, &q->mu);
        atomic_store_explicit(&q->worker_sleeping, false, memory_order_relaxed);
      }
      pthread_mutex_unlock(&q->mu);
      continue;
    }
    /* a task enqueued while a task runs on its producer (run_on_caller) comes after it */
    for (int i = 1; atomic_load_explicit(&q->inline_running, memory_order_acquire); ++i) {
      tpu_rt_cpu_relax();
      if ((i & 1023) == 0) sched_yield();
    }
    const ring_t* r = atomic_load_explicit(&q->ring, memory_order_acquire);
    task_t t = r->slots[h & (r->cap - 1)];
    atomic_store(&q->head, h + 1); /* seq_cst: backpressured producers read it after `waiters` */
    task_run(q, &t, t.op, true);
  }
  return NULL;
}

tpu_status_t tpu_rt_queue_init(int num_devices) {
  size_t bytes = (size_t)num_devices * sizeof(queue_t); /* a multiple of 64 (aligned members) */
  g_queues = aligned_alloc(64, bytes);
  if (g_queues) memset(g_queues, 0, bytes);
  if (!g_queues) return TPU_ERR(OUT_OF_MEMORY, "out of host memory creating %d device queues", num_devices);
  for (int d = 0; d < num_devices; ++d) {
    queue_t* q = &g_queues[d];
    pthread_mutex_init(&q->mu, NULL);
    pthread_mutex_init(&q->inline_mu, NULL);
    pthread_mutex_init(&q->ev_mu, NULL);
    pthread_cond_init(&q->cv_work, NULL);
    pthread_cond_init(&q->cv_done, NULL);
    q->device = d;
    atomic_store(&q->wake_seq, UINT64_MAX);
  }
  g_nqueues = num_devices;
  return TPU_OK;
}

void tpu_rt_queue_shutdown(void) {
  for (int d = 0; d < g_nqueues; ++d) {
    queue_t* q = &g_queues[d];
    pthread_mutex_lock(&q->mu);
    atomic_store(&q->stop, true);
    pthread_cond_signal(&q->cv_work);
    pthread_mutex_unlock(&q->mu);
    if (q->started && !pthread_equal(q->thread, pthread_self())) pthread_join(q->thread, NULL);
    for (ring_t* r = atomic_load(&q->ring); r;) { ring_t* prev = r->prev; free(r); r = prev; }
    tpu_status_free(q->error);
    pthread_mutex_destroy(&q->mu);
    pthread_mutex_destroy(&q->inline_mu);
    pthread_mutex_destroy(&q->ev_mu);
    pthread_cond_destroy(&q->cv_work);
    pthread_cond_destroy(&q->cv_done);
  }
  free(g_queues);
  g_queues = NULL;
  g_nqueues = 0;
}

uint64_t tpu_rt_queue_enqueued_seq(int device) {
  return (device >= 0 && device < g_nqueues) ? atomic_load(&g_queues[device].enqueued) : 0;
}

uint64_t tpu_rt_queue_completed_seq(int device) {
  return (device >= 0 && device < g_nqueues) ? atomic_load(&g_queues[device].completed) : 0;
}

void tpu_rt_queue_wait(int device, uint64_t seq) {
  if (device < 0 || device >= g_nqueues || tl_task_device == device) return;
  tpu_rt_trace_flush_hook(device);
  queue_t* q = &g_queues[device];
  seq = TPU_MIN(seq, atomic_load(&q->enqueued));
  tpu_metrics_add_host_wait(); /* counted whether or not work was pending (deterministic) */
  uint64_t t0 = tpu_rt_now_ns();
  for (int i = 1; atomic_load_explicit(&q->completed, memory_order_acquire) < seq; ++i) {
    tpu_rt_cpu_relax();
    if ((i & 63) == 0 && tpu_rt_now_ns() - t0 > WAIT_SPIN_NS) {
      pthread_mutex_lock(&q->mu);
      QUEUE_WAIT_LOCKED(q, seq, atomic_load(&q->completed) >= seq);
      pthread_mutex_unlock(&q->mu);
      break;
    }
  }
}

static void op_name_copy(char* dst, const char* op) {
  if (!op) op = "<unnamed task>";
  size_t n = strnlen(op, QUEUE_OP_NAME_LEN - 1);
  memcpy(dst, op, n);
  dst[n] = '\0';
}

/* ---- tasks run on their producer's thread: every task under LAUNCH_BLOCKING (run_inline), a
 * small task on an idle queue whose worker sleeps (tpu_rt_queue_enqueue_small), a direct copy on
 * an idle queue (tpu_rt_queue_run_if_idle). All three go through run_on_caller: it claims the
 * next sequence number under mu and sets inline_running, runs the task as the worker would
 * (task_run), then clears inline_running; the worker takes a later task only after that. A claim
 * needs an idle queue (everything enqueued has completed) and no other caller-run task still
 * finishing (completed stored, inline_running not yet cleared): two overlapping runs would let
 * the worker start a later task before the second one ended, and `completed` go backwards.
 * Under LAUNCH_BLOCKING every claim is made holding inline_mu (the worker never starts). */
static inline __attribute__((always_inline)) bool run_on_caller(queue_t* q, task_t* t, const char* op, bool need_asleep,
                                                                bool record_error, tpu_status_t* out_st) {
  /* cheap pre-check without the lock: a busy queue takes the ordinary path */
  if ((need_asleep && !atomic_load_explicit(&q->worker_sleeping, memory_order_relaxed)) ||
      atomic_load_explicit(&q->completed, memory_order_acquire) != atomic_load_explicit(&q->enqueued, memory_order_relaxed))
    return false;
  pthread_mutex_lock(&q->mu);
  const uint64_t seq = atomic_load_explicit(&q->enqueued, memory_order_relaxed) + 1;
  const bool claim = !atomic_load(&q->stop) && atomic_load(&q->completed) == seq - 1 &&
                     !atomic_load(&q->inline_running) && (!need_asleep || atomic_load(&q->worker_sleeping));
  if (claim) {
    atomic_store_explicit(&q->inline_running, 1, memory_order_relaxed); /* published by the unlock */
    atomic_store_explicit(&q->enqueued, seq, memory_order_release);    /* a sequence number, no ring slot */
  }
  pthread_mutex_unlock(&q->mu);
  if (!claim) return false;
  t->seq = seq;
  *out_st = task_run(q, t, op, record_error);
  tpu_rt_queue_test_hook_fn hook = tpu_rt_queue_test_hook;
  if (__builtin_expect(hook != NULL, 0)) hook(q->device); /* tests: inside the window described above */
  atomic_store_explicit(&q->inline_running, 0, memory_order_release);
  return true;
}

/* LAUNCH_BLOCKING: drain, run on the caller, return the task's own status. */
static tpu_status_t run_inline(queue_t* q, task_t* t, uint64_t* out_seq) {
  if (tl_task_device == q->device) { /* enqueued from inside an inline task: part of it */
    tpu_status_t st = t->fn ? t->fn(t->ctx) : TPU_OK;
    if (t->free_fn) t->free_fn(t->ctx);
    if (out_seq) *out_seq = atomic_load(&q->enqueued);
    return st;
  }
  pthread_mutex_lock(&q->inline_mu);
  tpu_rt_queue_wait(q->device, atomic_load(&q->enqueued));
  tpu_status_t st = TPU_OK;
  const bool ran = run_on_caller(q, t, t->op, false, false, &st); /* drained, inline_mu held: only shutdown refuses */
  pthread_mutex_unlock(&q->inline_mu);
  if (!ran) {
    if (t->free_fn) t->free_fn(t->ctx);
    return TPU_ERR(INTERNAL, "%s: tpu:%d queue is shutting down", t->op, q->device);
  }
  if (out_seq) *out_seq = t->seq;
  return st;
}

bool tpu_rt_queue_run_if_idle(int device, const char* op_name, tpu_rt_task_fn fn, void* ctx) {
  /* inside a task of this device the queue is never idle (that task has not completed) */
  if (!fn || device < 0 || device >= g_nqueues || tl_task_device == device) return false;
  tpu_rt_trace_flush_hook(device);
  queue_t* q = &g_queues[device];
  const bool blocking = tpu_rt_config()->launch_blocking;
  if (blocking) pthread_mutex_lock(&q->inline_mu);
  task_t t = {.fn = fn, .ctx = ctx};
  tpu_status_t st;
  const bool ran = run_on_caller(q, &t, op_name, false, true, &st);
  if (blocking) pthread_mutex_unlock(&q->inline_mu);
  return ran;
}

/* Enqueues t on q, whose pending recorded (fused eager) work the caller has flushed. */
static tpu_status_t queue_push_flushed(queue_t* q, const char* op, task_t* t, uint64_t* out_seq) {
  const int device = q->device;
  op_name_copy(t->op, op);
  if (tpu_rt_config()->launch_blocking) return run_inline(q, t, out_seq);
  tpu_status_t st = TPU_OK;
  pthread_mutex_lock(&q->mu);
  /* Backpressure: bound host memory held by not-yet-started tasks (staging copies...). A task
   * enqueueing on its own device is never blocked (the worker would wait for itself). */
  if (atomic_load(&q->tail) - atomic_load(&q->head) >= TPU_RT_QUEUE_MAX_PENDING && tl_task_device != device)
    QUEUE_WAIT_LOCKED(q, 0, atomic_load(&q->tail) - atomic_load(&q->head) < TPU_RT_QUEUE_MAX_PENDING ||
                             atomic_load(&q->stop));
  const uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed); /* only producers write it, under mu */
  ring_t* r = atomic_load_explicit(&q->ring, memory_order_relaxed);
  const uint64_t head = atomic_load(&q->head); /* may be stale (lower): copying extra slots is harmless */
  if (atomic_load(&q->stop)) {
    st = TPU_ERR(INTERNAL, "%s: tpu:%d queue is shutting down", t->op, device);
  } else if (!r || tail - head == r->cap) {
    uint64_t cap = r ? r->cap * 2 : 256;
    ring_t* nr = malloc(sizeof(ring_t) + cap * sizeof(task_t));
    if (!nr) {
      st = TPU_ERR(OUT_OF_MEMORY, "%s: out of host memory growing the tpu:%d queue", t->op, device);
    } else {
      nr->prev = r;
      nr->cap = cap;
      for (uint64_t i = head; i < tail; ++i) nr->slots[i & (cap - 1)] = r->slots[i & (r->cap - 1)];
      atomic_store_explicit(&q->ring, nr, memory_order_release);
      r = nr;
    }
  }
  if (!st && !q->started) {
    char name[32];
    snprintf(name, sizeof(name), "tpu-queue-%d", device);
    int rc = tpu_rt_thread_create(&q->thread, worker_main, q, name);
    if (rc) st = TPU_ERR(INTERNAL, "%s: cannot start the tpu:%d worker thread: %s", t->op, device, strerror(rc));
    else q->started = true;
  }
  if (st) {
    pthread_mutex_unlock(&q->mu);
    if (t->free_fn) t->free_fn(t->ctx);
    return st;
  }
  uint64_t seq = atomic_load_explicit(&q->enqueued, memory_order_relaxed) + 1;
  t->seq = seq;
  r->slots[tail & (r->cap - 1)] = *t;
  atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
  atomic_store_explicit(&q->enqueued, seq, memory_order_release);
  if (atomic_load_explicit(&q->worker_sleeping, memory_order_relaxed)) pthread_cond_signal(&q->cv_work);
  pthread_mutex_unlock(&q->mu);
  if (out_seq) *out_seq = seq;
  return TPU_OK;
}

static tpu_status_t queue_push(int device, const char* op, tpu_rt_task_fn fn, void* ctx,
                               tpu_rt_task_free_fn free_fn, bool marker, uint64_t* out_seq) {
  tpu_status_t st = tpu_rt_device_check(device);
  if (!st && !fn && !marker) st = TPU_ERR(INVALID_ARGUMENT, "%s: enqueued a task with no function", op ? op : "?");
  if (st) { if (free_fn) free_fn(ctx); return st; }
  tpu_rt_trace_flush_hook(device); /* recorded (fused eager) work runs first */
  task_t t = {.fn = fn, .ctx = ctx, .free_fn = free_fn, .marker = marker};
  return queue_push_flushed(&g_queues[device], op, &t, out_seq);
}

tpu_status_t tpu_rt_queue_enqueue(int device, const char* op_name, tpu_rt_task_fn fn, void* ctx,
                                  tpu_rt_task_free_fn free_fn) {
  return queue_push(device, op_name, fn, ctx, free_fn, false, NULL);
}

/* An idle queue whose worker sleeps runs a small task on the caller (run_on_caller): waking the
 * worker (a futex system call, then a context switch on an idle or busy core before the task
 * starts) costs more than the task. A worker that is still awake (spinning after its last task, as
 * in a stream of ops) gets the task as usual and runs it in parallel with the host thread. */
tpu_status_t tpu_rt_queue_enqueue_small(int device, const char* op_name, tpu_rt_task_fn fn, void* ctx,
                                        tpu_rt_task_free_fn free_fn) {
  if (!fn || device < 0 || device >= g_nqueues || tl_task_device >= 0 || tpu_rt_config()->launch_blocking)
    return queue_push(device, op_name, fn, ctx, free_fn, false, NULL); /* errors and the rest */
  tpu_rt_trace_flush_hook(device); /* recorded (fused eager) work runs first; once */
  queue_t* q = &g_queues[device];
  task_t t = {.fn = fn, .ctx = ctx, .free_fn = free_fn};
  tpu_status_t st;
  if (run_on_caller(q, &t, op_name, true, true, &st)) return st; /* TPU_OK: a failure is recorded */
  return queue_push_flushed(q, op_name, &t, NULL);
}

tpu_status_t tpu_rt_queue_enqueue_marker(int device, uint64_t* out_seq) {
  return queue_push(device, "event_record", NULL, NULL, NULL, true, out_seq);
}

tpu_status_t tpu_rt_synchronize(int device) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  if (tl_task_device == device) return TPU_OK; /* inside a task: earlier work is done */
  tpu_rt_trace_flush_hook(device);
  queue_t* q = &g_queues[device];
  tpu_rt_queue_wait(device, atomic_load(&q->enqueued));
  pthread_mutex_lock(&q->mu);
  tpu_status_t st = q->error;
  q->error = NULL;
  pthread_mutex_unlock(&q->mu);
  return st;
}

/* ---- events: positions (seq numbers) in a device's queue */

static tpu_status_t event_check(int device, uint64_t event) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  uint64_t last = atomic_load(&g_queues[device].enqueued);
  if (event > last)
    return TPU_ERR(INVALID_ARGUMENT, "event %llu was never recorded on tpu:%d (last queue position %llu)",
                   (unsigned long long)event, device, (unsigned long long)last);
  return TPU_OK;
}

tpu_status_t tpu_rt_event_record(int device, uint64_t* out_event) {
  return tpu_rt_queue_enqueue_marker(device, out_event);
}

tpu_status_t tpu_rt_event_query(int device, uint64_t event, bool* out_done) {
  TPU_RETURN_IF_ERROR(event_check(device, event));
  *out_done = atomic_load(&g_queues[device].completed) >= event;
  return TPU_OK;
}

tpu_status_t tpu_rt_event_synchronize(int device, uint64_t event) {
  TPU_RETURN_IF_ERROR(event_check(device, event));
  tpu_rt_queue_wait(device, event);
  return TPU_OK;
}

static tpu_status_t event_time(int device, uint64_t event, uint64_t* out_ns) {
  TPU_RETURN_IF_ERROR(event_check(device, event));
  queue_t* q = &g_queues[device];
  if (atomic_load(&q->completed) < event)
    return TPU_ERR(INVALID_ARGUMENT, "event %llu on tpu:%d has not completed yet; synchronize it first",
                   (unsigned long long)event, device);
  pthread_mutex_lock(&q->ev_mu);
  uint64_t lo = q->ev_count > QUEUE_EVENT_RING ? q->ev_count - QUEUE_EVENT_RING : 0, hi = q->ev_count;
  while (lo < hi) { /* markers complete in seq order: the ring is sorted */
    uint64_t mid = lo + (hi - lo) / 2;
    if (q->ev_seq[mid % QUEUE_EVENT_RING] < event) lo = mid + 1; else hi = mid;
  }
  bool found = lo < q->ev_count && q->ev_seq[lo % QUEUE_EVENT_RING] == event;
  if (found) *out_ns = q->ev_ns[lo % QUEUE_EVENT_RING];
  pthread_mutex_unlock(&q->ev_mu);
  if (!found)
    return TPU_ERR(INVALID_ARGUMENT,
                   "no timing for event %llu on tpu:%d: not a recorded event, or older than the "
                   "last %d events",
                   (unsigned long long)event, device, QUEUE_EVENT_RING);
  return TPU_OK;
}

tpu_status_t tpu_rt_event_elapsed_ns(int device, uint64_t start, uint64_t end, int64_t* out_ns) {
  uint64_t t0, t1;
  TPU_RETURN_IF_ERROR(event_time(device, start, &t0));
  TPU_RETURN_IF_ERROR(event_time(device, end, &t1));
  *out_ns = (int64_t)(t1 - t0);
  return TPU_OK;
}
