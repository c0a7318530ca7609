/* device.c — runtime lifecycle: lazy, retryable init (mutex + flag, not pthread_once, so a
 * failed init can be retried after fixing the environment), device queries, shutdown. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/runtime.h"

static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_ready;
static tpu_rt_config_t g_cfg; /* written under g_init_mu before g_ready is released */
static bool g_atexit_registered;

static void shutdown_modules(int stage) {
  if (stage >= 4) tpu_pool_shutdown();
  if (stage >= 3) tpu_rt_generators_shutdown();
  if (stage >= 2) tpu_rt_queue_shutdown();
  if (stage >= 1) tpu_rt_alloc_shutdown();
}

static void atexit_shutdown(void) { tpu_rt_shutdown(); }

tpu_status_t tpu_rt_init(void) {
  if (atomic_load_explicit(&g_ready, memory_order_acquire)) return TPU_OK;
  pthread_mutex_lock(&g_init_mu);
  tpu_status_t st = TPU_OK;
  if (atomic_load_explicit(&g_ready, memory_order_relaxed)) goto done;
  tpu_rt_config_t cfg;
  int stage = 0;
  if ((st = tpu_rt_config_from_env(&cfg))) goto done;
  if ((st = tpu_rt_alloc_init(cfg.num_devices, cfg.hbm_bytes))) goto fail;
  stage = 1;
  if ((st = tpu_rt_queue_init(cfg.num_devices))) goto fail;
  stage = 2;
  if ((st = tpu_rt_generators_init(cfg.num_devices))) goto fail;
  stage = 3;
  tpu_pool_init(cfg.num_threads);
  g_cfg = cfg;
  if (!g_atexit_registered) g_atexit_registered = atexit(atexit_shutdown) == 0;
  atomic_store_explicit(&g_ready, true, memory_order_release);
  goto done;
fail:
  shutdown_modules(stage);
done:
  pthread_mutex_unlock(&g_init_mu);
  return st;
}

void tpu_rt_shutdown(void) {
  pthread_mutex_lock(&g_init_mu);
  if (atomic_load_explicit(&g_ready, memory_order_relaxed)) {
    /* Drain first, while still "ready": tasks may call tpu_rt_* (which must not block on
     * g_init_mu, held here). */
    for (int d = 0; d < g_cfg.num_devices; ++d) tpu_rt_queue_wait(d, tpu_rt_queue_enqueued_seq(d));
    atomic_store_explicit(&g_ready, false, memory_order_release);
    shutdown_modules(4);
  }
  pthread_mutex_unlock(&g_init_mu);
}

const tpu_rt_config_t* tpu_rt_config(void) { return &g_cfg; }

static _Atomic int g_matmul_precision; /* tpu_matmul_precision_t, 0 = HIGHEST */
void tpu_rt_set_matmul_precision(int precision) {
  if (precision >= TPU_MATMUL_PRECISION_HIGHEST && precision <= TPU_MATMUL_PRECISION_MEDIUM)
    atomic_store_explicit(&g_matmul_precision, precision, memory_order_relaxed);
}
static _Atomic(tpu_matmul_precision_source_t) g_matmul_precision_source;
void tpu_rt_set_matmul_precision_source(tpu_matmul_precision_source_t source) {
  atomic_store_explicit(&g_matmul_precision_source, source, memory_order_release);
}
int tpu_rt_matmul_precision(void) {
  tpu_matmul_precision_source_t src = atomic_load_explicit(&g_matmul_precision_source, memory_order_acquire);
  if (src) {
    int p = src();
    return p >= TPU_MATMUL_PRECISION_HIGHEST && p <= TPU_MATMUL_PRECISION_MEDIUM ? p : TPU_MATMUL_PRECISION_HIGHEST;
  }
  return atomic_load_explicit(&g_matmul_precision, memory_order_relaxed);
}

tpu_status_t tpu_rt_device_check(int device) {
  if (!atomic_load_explicit(&g_ready, memory_order_acquire)) TPU_RETURN_IF_ERROR(tpu_rt_init());
  if (device < 0 || device >= g_cfg.num_devices)
    return TPU_ERR(INVALID_ARGUMENT, "invalid device index %d: %d tpu device%s", device,
                   g_cfg.num_devices, g_cfg.num_devices == 1 ? "" : "s");
  return TPU_OK;
}

/* Queries never fail: an init error (bad environment) reads as "no devices". */
static bool ensure_init(void) {
  if (atomic_load_explicit(&g_ready, memory_order_acquire)) return true;
  tpu_status_t st = tpu_rt_init();
  tpu_status_free(st);
  return st == TPU_OK;
}

int tpu_rt_device_count(void) { return ensure_init() ? g_cfg.num_devices : 0; }
bool tpu_rt_launch_blocking(void) { return ensure_init() ? g_cfg.launch_blocking : false; }
int tpu_rt_num_threads(void) { return ensure_init() ? g_cfg.num_threads : 1; }

int tpu_rt_thread_create(pthread_t* out_thread, void* (*fn)(void*), void* arg, const char* name) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(out_thread, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc == 0 && name) { /* best effort; Linux allows 15 characters */
    char short_name[16];
    snprintf(short_name, sizeof(short_name), "%s", name);
    pthread_setname_np(*out_thread, short_name);
  }
  return rc;
}
