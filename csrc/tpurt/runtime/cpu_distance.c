/* cpu_distance.c — how far apart two CPUs are right now: a pinned cache-line ping-pong (benchmarks/common.py).
 *
 * A virtual machine's vCPUs can sit on nearby physical cores at one moment and on cores with different L3 caches
 * the next (the 2-vCPU VM of session 13 flipped about every 20 s: round trips of 78-260 TSC cycles vs 546-624),
 * and data moving between the pool's threads costs several times more in the far state. Two short-lived threads,
 * each pinned to one CPU, pass one cache line back and forth; the median round trip tells the states apart. */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

#define PROBE_TRIPS 1000              /* ~0.05 ms near, ~0.25 ms far */
#define PROBE_MIN_TRIPS 100           /* fewer by the deadline: no answer */
#define PROBE_READY_NS 2000000ull     /* after the barrier, the echo thread running within 2 ms */
#define PROBE_TRIPS_NS 1000000ull     /* and the trips within 1 ms (0.05-0.4 ms unless a thread is preempted: then
                                       * spinning on costs the measured process CPU time for no answer) */
#define PROBE_STOP (-1L)

typedef struct {
  _Alignas(64) atomic_long flag; /* the line: 2i + 1 = ping i sent, 2i + 2 = answered, PROBE_STOP = done */
  _Alignas(64) atomic_int echo_up; /* the echo thread is past the barrier */
  atomic_int failed;               /* a pin failed (no permission, CPU not allowed) or a thread did not start */
  pthread_barrier_t meet;          /* both threads pinned (they sleep there: no CPU taken from the measured process) */
  int met;                         /* the echo thread ran while the ping thread waited for it */
  int cpu[2];
  int trips;                      /* round trips timed */
  uint64_t ticks0, ticks1, ns0, ns1;
  uint64_t t[PROBE_TRIPS];        /* per round trip, in ticks */
} probe_t;

static inline uint64_t probe_ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#else
  return tpu_rt_now_ns();
#endif
}

static int probe_pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0 && sched_getcpu() == cpu;
}

/* Pins the thread and sleeps until the other one is pinned too; 0 when a pin failed. A sleeper wakes with a
 * scheduler's preference, so the pair gets both CPUs at once far sooner than threads spinning or yielding for a
 * turn would (and meanwhile takes no CPU time from the process being measured). */
static int probe_meet(probe_t* p, int self) {
  if (!probe_pin(p->cpu[self])) atomic_store(&p->failed, 1);
  pthread_barrier_wait(&p->meet);
  return !atomic_load(&p->failed);
}

/* Answers ping i (2i + 1 -> 2i + 2) with a CAS: a plain store could overwrite the ping thread's PROBE_STOP (echo
 * reads 2i + 1 and is preempted, ping gives up and stores STOP, echo stores 2i + 2 and waits for 2i + 3 forever).
 * Also leaves after 100 ms without a ping (a second guard; ping always ends with STOP). */
static void* probe_echo(void* arg) {
  probe_t* p = arg;
  if (!probe_meet(p, 1)) return NULL;
  atomic_store(&p->echo_up, 1);
  unsigned idle = 0;
  uint64_t since = 0;
  for (long want = 1;;) {
    long v = atomic_load_explicit(&p->flag, memory_order_acquire);
    if (v == PROBE_STOP) break;
    if (v == want) {
      if (atomic_compare_exchange_strong_explicit(&p->flag, &v, want + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
        want += 2;
      idle = 0, since = 0;
      continue;
    }
    if (++idle & 1023) continue;
    uint64_t now = tpu_rt_now_ns();
    if (!since) since = now;
    else if (now - since > 100000000ull) break;
  }
  return NULL;
}

static void* probe_ping(void* arg) {
  probe_t* p = arg;
  int up = 0;
  if (probe_meet(p, 0)) {
    uint64_t end = tpu_rt_now_ns() + PROBE_READY_NS;
    for (unsigned spins = 1; !(up = atomic_load(&p->echo_up)); ++spins)
      if (!(spins & 255) && tpu_rt_now_ns() > end) break;
  }
  if ((p->met = up)) {
    p->ns0 = tpu_rt_now_ns();
    p->ticks0 = probe_ticks();
    uint64_t end = p->ns0 + PROBE_TRIPS_NS;
    int i = 0, late = 0;
    for (; i < PROBE_TRIPS && !late; ++i) {
      uint64_t t0 = probe_ticks();
      atomic_store_explicit(&p->flag, 2L * i + 1, memory_order_release);
      for (unsigned spins = 1; atomic_load_explicit(&p->flag, memory_order_acquire) != 2L * i + 2; ++spins)
        if (!(spins & 1023) && tpu_rt_now_ns() > end) { late = 1; break; }
      if (!late) p->t[i] = probe_ticks() - t0;
    }
    p->trips = late ? i - 1 : i;
    p->ticks1 = probe_ticks();
    p->ns1 = tpu_rt_now_ns();
  }
  atomic_store_explicit(&p->flag, PROBE_STOP, memory_order_release); /* lets the echo thread go in every case */
  return NULL;
}

static int probe_cmp(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

tpu_status_t tpu_rt_cpu_distance_probe(tpu_rt_cpu_distance_t* out_distance) {
  if (!out_distance) return TPU_ERR(INVALID_ARGUMENT, "cpu distance: out_distance is NULL");
  *out_distance = (tpu_rt_cpu_distance_t){.cpu_a = -1, .cpu_b = -1};
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return TPU_ERR(UNSUPPORTED, "cpu distance: this thread's CPU affinity cannot be read");
  probe_t* p = aligned_alloc(64, (sizeof *p + 63) & ~(size_t)63); /* its lines are _Alignas(64): not calloc */
  if (!p) return TPU_ERR(OUT_OF_MEMORY, "cpu distance: no memory for the probe");
  memset(p, 0, sizeof *p);
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < 2; ++c)
    if (CPU_ISSET(c, &allowed)) p->cpu[n++] = c;
  tpu_status_t st = TPU_OK;
  pthread_t th[2];
  if (n < 2) {
    st = TPU_ERR(UNSUPPORTED, "cpu distance: needs two CPUs, this thread may run on %d", n);
  } else if (pthread_barrier_init(&p->meet, NULL, 2) != 0) {
    st = TPU_ERR(UNSUPPORTED, "cpu distance: no barrier");
  } else {
    if (tpu_rt_thread_create(&th[1], probe_echo, p, "tpu-probe-echo") != 0) {
      st = TPU_ERR(UNSUPPORTED, "cpu distance: could not start a thread");
    } else {
      if (tpu_rt_thread_create(&th[0], probe_ping, p, "tpu-probe-ping") != 0) {
        atomic_store(&p->failed, 1); /* stands in for the ping thread at the barrier: the echo thread leaves */
        pthread_barrier_wait(&p->meet);
        st = TPU_ERR(UNSUPPORTED, "cpu distance: could not start a thread");
      } else {
        pthread_join(th[0], NULL);
      }
      pthread_join(th[1], NULL);
    }
    pthread_barrier_destroy(&p->meet);
  }
  if (!st && atomic_load(&p->failed))
    st = TPU_ERR(UNSUPPORTED, "cpu distance: cannot pin threads to CPUs %d and %d", p->cpu[0], p->cpu[1]);
  else if (!st && !p->met)
    st = TPU_ERR(UNSUPPORTED, "cpu distance: CPUs %d and %d too busy (the second thread did not run within %d ms)",
                 p->cpu[0], p->cpu[1], (int)(PROBE_READY_NS / 1000000));
  else if (!st && p->trips < PROBE_MIN_TRIPS)
    st = TPU_ERR(UNSUPPORTED, "cpu distance: CPUs %d and %d too busy (%d round trips in time)", p->cpu[0],
                 p->cpu[1], p->trips);
  if (!st) {
    qsort(p->t, (size_t)p->trips, sizeof p->t[0], probe_cmp);
    /* ticks -> ns at the rate measured across the trips (TSC on x86; identity elsewhere) */
    uint64_t dt = p->ticks1 - p->ticks0;
    double ns_per_tick = dt ? (double)(p->ns1 - p->ns0) / (double)dt : 1.0;
#if defined(__x86_64__) || defined(__i386__)
    int tsc = 1;
#else
    int tsc = 0;
#endif
    uint64_t med = p->t[p->trips / 2], p10 = p->t[p->trips / 10];
    *out_distance = (tpu_rt_cpu_distance_t){
        .rtt_ns = (double)med * ns_per_tick, .rtt_p10_ns = (double)p10 * ns_per_tick,
        .rtt_cycles = tsc ? (double)med : 0.0, .cpu_a = p->cpu[0], .cpu_b = p->cpu[1], .trips = p->trips};
  }
  free(p);
  return st;
}
