/* test_runtime.c — unit tests for csrc/tpurt/runtime (no PyTorch). Exits non-zero on failure.
 * Sets its own environment (2 devices, 64 MiB per device, 4 pool threads) before the first
 * init; `make test-c` also exports TORCH_TPU_NUM_DEVICES=2. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"

static atomic_int g_pass, g_fail; /* CHECK runs on several threads */

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (cond) { g_pass++; }                                                  \
    else { g_fail++; fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); } \
  } while (0)

#define CHECK_OK(expr)                                                                  \
  do {                                                                                  \
    tpu_status_t st_ = (expr);                                                          \
    if (!st_) { g_pass++; }                                                             \
    else {                                                                              \
      g_fail++;                                                                         \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr,               \
              tpu_status_code_name(tpu_status_code(st_)), tpu_status_message(st_));     \
      tpu_status_free(st_);                                                             \
    }                                                                                   \
  } while (0)

/* expr must fail with `code` and a message containing `substr`. */
#define CHECK_ERR(expr, code, substr) check_err((expr), TPU_STATUS_##code, (substr), #expr, __LINE__)
static void check_err(tpu_status_t st, tpu_status_code_t code, const char* substr, const char* expr, int line) {
  if (tpu_status_code(st) == code && strstr(tpu_status_message(st), substr)) {
    g_pass++;
  } else {
    g_fail++;
    fprintf(stderr, "%s:%d: %s -> %s '%s'; expected %s containing '%s'\n", __FILE__, line, expr,
            tpu_status_code_name(tpu_status_code(st)), tpu_status_message(st), tpu_status_code_name(code), substr);
  }
  tpu_status_free(st);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static tpu_status_t task_sleep(void* ctx) { sleep_ms((int)(intptr_t)ctx); return TPU_OK; }
static tpu_status_t task_noop(void* ctx) { return TPU_OK; }

/* ------------------------------------------------------------------ status, dtype, cpu */

static void test_status_dtype_cpu(void) {
  tpu_status_t st = tpu_status_make(TPU_STATUS_INDEX_ERROR, "index %d out of range [0, %d)", 7, 3);
  CHECK(tpu_status_code(st) == TPU_STATUS_INDEX_ERROR);
  CHECK(strcmp(tpu_status_message(st), "index 7 out of range [0, 3)") == 0);
  tpu_status_free(st);
  CHECK(tpu_status_make(TPU_STATUS_OK, "nothing") == TPU_OK);
  CHECK(tpu_status_code(TPU_OK) == TPU_STATUS_OK);
  CHECK(strcmp(tpu_status_message(TPU_OK), "") == 0);
  tpu_status_free(TPU_OK);
  CHECK(strcmp(tpu_status_code_name(TPU_STATUS_OUT_OF_MEMORY), "OUT_OF_MEMORY") == 0);
  CHECK(strcmp(tpu_status_code_name(TPU_STATUS_INTERNAL), "INTERNAL") == 0);
  CHECK(strcmp(tpu_status_code_name((tpu_status_code_t)99), "UNKNOWN") == 0);

  static const char* names[] = {"float32", "float64", "float16", "bfloat16", "int64",
                                "int32",   "int16",   "int8",    "uint8",    "bool"};
  static const size_t sizes[] = {4, 8, 2, 2, 8, 4, 2, 1, 1, 1};
  for (int d = 0; d < TPU_DTYPE_COUNT; ++d) {
    CHECK(strcmp(tpu_dtype_name((tpu_dtype_t)d), names[d]) == 0);
    CHECK(tpu_dtype_size((tpu_dtype_t)d) == sizes[d]);
  }
  CHECK(tpu_dtype_size(TPU_DTYPE_COUNT) == 0);
  CHECK(strcmp(tpu_dtype_name((tpu_dtype_t)-1), "invalid") == 0);

  const char* f = tpu_cpu_features_string();
  CHECK(f && *f);
  if (tpu_cpu_has_avx2_fma()) CHECK(strstr(f, "avx2") && strstr(f, "fma"));
  CHECK(!tpu_cpu_has_avx512f() || strstr(f, "avx512f"));
  char buf[32];
  tpu_rt_format_bytes(512, buf, sizeof(buf));
  CHECK(strcmp(buf, "512 B") == 0);
  tpu_rt_format_bytes(3ull << 29, buf, sizeof(buf));
  CHECK(strcmp(buf, "1.50 GiB") == 0);
}

/* ------------------------------------------------------------------ env parsing */

static void test_env_parsers(void) {
  int64_t i = 0;
  CHECK_OK(tpu_rt_env_parse_int("V", "7", 1, 64, &i));
  CHECK(i == 7);
  CHECK_OK(tpu_rt_env_parse_int("V", " 64 ", 1, 64, &i));
  CHECK(i == 64);
  CHECK_ERR(tpu_rt_env_parse_int("TORCH_TPU_NUM_DEVICES", "abc", 1, 64, &i), INVALID_ARGUMENT,
            "TORCH_TPU_NUM_DEVICES='abc' is invalid: expected an integer in [1, 64]");
  const char* bad_ints[] = {"", "0", "65", "-1", "1x", "2.0", "99999999999999999999999", "0x10"};
  for (int k = 0; k < TPU_ARRAY_LEN(bad_ints); ++k)
    CHECK_ERR(tpu_rt_env_parse_int("TORCH_TPU_NUM_DEVICES", bad_ints[k], 1, 64, &i), INVALID_ARGUMENT,
              "TORCH_TPU_NUM_DEVICES='");
  CHECK_ERR(tpu_rt_env_parse_int("V", NULL, 1, 2, &i), INVALID_ARGUMENT, "V=''");

  struct { const char* s; uint64_t v; } good[] = {
      {"1048576", 1048576},  {"4K", 4096},        {"4k", 4096},        {"16G", 16ull << 30},
      {"2m", 2ull << 20},    {"1KiB", 1024},      {"512MB", 512ull << 20}, {"1T", 1ull << 40},
      {" 3 g ", 3ull << 30}, {"100B", 100},       {"16777215T", 16777215ull << 40},
  };
  for (int k = 0; k < TPU_ARRAY_LEN(good); ++k) {
    uint64_t v = 0;
    CHECK_OK(tpu_rt_env_parse_bytes("TORCH_TPU_HBM_BYTES", good[k].s, &v));
    CHECK(v == good[k].v);
  }
  const char* bad_bytes[] = {"0", "0G", "abc", "-5", "1.5G", "16Q", "", "G", "16 G B x", "1Gi",
                             "16777216T", "18446744073709551616"};
  for (int k = 0; k < TPU_ARRAY_LEN(bad_bytes); ++k) {
    uint64_t v = 0;
    CHECK_ERR(tpu_rt_env_parse_bytes("TORCH_TPU_HBM_BYTES", bad_bytes[k], &v), INVALID_ARGUMENT,
              "TORCH_TPU_HBM_BYTES='");
  }
  uint64_t v;
  CHECK_ERR(tpu_rt_env_parse_bytes("TORCH_TPU_HBM_BYTES", "lots", &v), INVALID_ARGUMENT,
            "expected a positive byte count, optionally with a K, M, G or T suffix");

  bool b = true;
  CHECK_OK(tpu_rt_env_parse_bool("V", "0", &b));
  CHECK(!b);
  CHECK_OK(tpu_rt_env_parse_bool("V", " 1", &b));
  CHECK(b);
  CHECK_ERR(tpu_rt_env_parse_bool("TORCH_TPU_LAUNCH_BLOCKING", "yes", &b), INVALID_ARGUMENT,
            "TORCH_TPU_LAUNCH_BLOCKING='yes' is invalid: expected 0 or 1");
  CHECK_ERR(tpu_rt_env_parse_bool("V", "2", &b), INVALID_ARGUMENT, "V='2'");

  /* whole config: defaults (unset/empty) and the first bad variable */
  tpu_rt_config_t c;
  setenv("TORCH_TPU_NUM_DEVICES", "4", 1);
  setenv("TORCH_TPU_HBM_BYTES", "", 1);
  unsetenv("TORCH_TPU_NUM_THREADS");
  CHECK_OK(tpu_rt_config_from_env(&c));
  CHECK(c.num_devices == 4 && !c.launch_blocking);
  CHECK(c.hbm_bytes == tpu_rt_default_hbm_bytes(4) && c.hbm_bytes > 0);
  CHECK(c.num_threads == tpu_rt_default_num_threads() && c.num_threads >= 1);
  setenv("TORCH_TPU_NUM_THREADS", "0", 1);
  CHECK_ERR(tpu_rt_config_from_env(&c), INVALID_ARGUMENT, "TORCH_TPU_NUM_THREADS='0' is invalid");
  unsetenv("TORCH_TPU_NUM_THREADS");
  const char* saved_wait = getenv("TORCH_TPU_POOL_WAIT_US");
  char* saved_copy = saved_wait ? strdup(saved_wait) : NULL;
  unsetenv("TORCH_TPU_POOL_WAIT_US");
  CHECK_OK(tpu_rt_config_from_env(&c));
  CHECK(c.pool_wait_us == 1000);
  setenv("TORCH_TPU_POOL_WAIT_US", "0", 1);
  CHECK_OK(tpu_rt_config_from_env(&c));
  CHECK(c.pool_wait_us == 0);
  setenv("TORCH_TPU_POOL_WAIT_US", "250", 1);
  CHECK_OK(tpu_rt_config_from_env(&c));
  CHECK(c.pool_wait_us == 250);
  setenv("TORCH_TPU_POOL_WAIT_US", "100001", 1);
  CHECK_ERR(tpu_rt_config_from_env(&c), INVALID_ARGUMENT, "TORCH_TPU_POOL_WAIT_US='100001' is invalid");
  setenv("TORCH_TPU_POOL_WAIT_US", "1ms", 1);
  CHECK_ERR(tpu_rt_config_from_env(&c), INVALID_ARGUMENT, "TORCH_TPU_POOL_WAIT_US='1ms' is invalid");
  if (saved_copy) { setenv("TORCH_TPU_POOL_WAIT_US", saved_copy, 1); free(saved_copy); }
  else unsetenv("TORCH_TPU_POOL_WAIT_US");
  unsetenv("TORCH_TPU_NUM_THREADS");
}

/* A failed init leaves the runtime uninitialized; fixing the environment makes it work. */
static void test_init(void) {
  setenv("TORCH_TPU_NUM_DEVICES", "abc", 1);
  CHECK_ERR(tpu_rt_init(), INVALID_ARGUMENT, "TORCH_TPU_NUM_DEVICES='abc' is invalid");
  CHECK(tpu_rt_device_count() == 0);
  void* p = NULL;
  CHECK_ERR(tpu_rt_malloc(0, 16, &p), INVALID_ARGUMENT, "TORCH_TPU_NUM_DEVICES");
  CHECK(tpu_rt_default_generator(0) == NULL);
  setenv("TORCH_TPU_NUM_DEVICES", "2", 1);
  setenv("TORCH_TPU_HBM_BYTES", "64Q", 1);
  CHECK_ERR(tpu_rt_init(), INVALID_ARGUMENT, "TORCH_TPU_HBM_BYTES='64Q'");
  setenv("TORCH_TPU_HBM_BYTES", "64M", 1);
  setenv("TORCH_TPU_NUM_THREADS", "4", 1);
  unsetenv("TORCH_TPU_LAUNCH_BLOCKING");
  CHECK_OK(tpu_rt_init());
  CHECK_OK(tpu_rt_init()); /* idempotent */
  CHECK(tpu_rt_device_count() == 2);
  CHECK(tpu_rt_num_threads() == 4 && tpu_pool_num_threads() == 4);
  CHECK(!tpu_rt_launch_blocking());
  CHECK_ERR(tpu_rt_synchronize(3), INVALID_ARGUMENT, "invalid device index 3: 2 tpu devices");
  CHECK_ERR(tpu_rt_synchronize(-1), INVALID_ARGUMENT, "invalid device index -1");
  CHECK_ERR(tpu_rt_malloc(2, 16, &p), INVALID_ARGUMENT, "invalid device index 2");
  CHECK(tpu_rt_default_generator(2) == NULL);
}

/* ------------------------------------------------------------------ allocator */

static tpu_rt_memory_stats_t stats(int device) {
  tpu_rt_memory_stats_t s;
  memset(&s, 0xff, sizeof(s));
  CHECK_OK(tpu_rt_memory_stats(device, &s));
  return s;
}

static void test_allocator(void) {
  const uint64_t MiB = 1ull << 20;
  void *p = (void*)1, *q = NULL, *r = NULL;
  CHECK_OK(tpu_rt_malloc(0, 0, &p));
  CHECK(p == NULL);
  tpu_rt_memory_stats_t s0 = stats(0);
  CHECK(s0.allocated_bytes == 0 && s0.reserved_bytes == 0 && s0.capacity_bytes == 64 * MiB);

  CHECK_OK(tpu_rt_malloc(0, 1000, &p));
  CHECK(p && (uintptr_t)p % 64 == 0);
  tpu_rt_memory_stats_t s = stats(0);
  CHECK(s.allocated_bytes == 1024 && s.requested_bytes == 1000 && s.num_allocs == 1);
  CHECK(s.max_allocated_bytes == 1024 && s.reserved_bytes == 1024);
  tpu_rt_free(0, p);
  s = stats(0);
  CHECK(s.allocated_bytes == 0 && s.requested_bytes == 0 && s.reserved_bytes == 1024 && s.num_frees == 1);
  CHECK_OK(tpu_rt_malloc(0, 700, &q)); /* same 1 KiB class: cache hit, same block */
  s = stats(0);
  CHECK(q == p && s.num_cache_hits == 1 && s.allocated_bytes == 1024 && s.reserved_bytes == 1024);
  tpu_rt_free(0, q);
  CHECK_OK(tpu_rt_malloc(0, 300, &q)); /* 512 B class: the cached 1 KiB block would waste > 1/8 */
  s = stats(0);
  CHECK(s.num_cache_hits == 1 && s.allocated_bytes == 512 && s.reserved_bytes == 1536);
  CHECK_OK(tpu_rt_malloc(0, 3000, &r)); /* class 3072; cached 1 KiB block is not a fit */
  void* tiny = NULL;
  CHECK_OK(tpu_rt_malloc(0, 4, &tiny)); /* <= 256 B: 64 B classes (a 0-dim tensor) */
  CHECK(tiny && (uintptr_t)tiny % 64 == 0 && stats(0).allocated_bytes == 512 + 3072 + 64);
  tpu_rt_free(0, tiny);
  tpu_rt_free(0, q);
  tpu_rt_free(0, r);

  /* large blocks: classes of 1/8 of their power of two (256 KiB steps in [2, 4) MiB), page aligned */
  CHECK_OK(tpu_rt_malloc(0, 3 * MiB + 1, &p));
  CHECK(p && (uintptr_t)p % 4096 == 0);
  s = stats(0);
  CHECK(s.allocated_bytes == 3 * MiB + 256 * 1024 && s.requested_bytes == 3 * MiB + 1);
  CHECK(s.max_allocated_bytes == 3 * MiB + 256 * 1024);
  tpu_rt_free(0, p);
  CHECK_OK(tpu_rt_malloc(0, MiB + 1, &q)); /* [1, 2) MiB: 128 KiB steps */
  CHECK(stats(0).allocated_bytes == MiB + 128 * 1024);
  tpu_rt_free(0, q);
  CHECK_OK(tpu_rt_reset_peak_memory_stats(0));
  s = stats(0);
  CHECK(s.max_allocated_bytes == 0 && s.max_reserved_bytes == s.reserved_bytes);

  /* unknown, NULL and double frees are ignored */
  int local;
  uint64_t frees = stats(0).num_frees;
  tpu_rt_free(0, &local);
  tpu_rt_free(0, NULL);
  tpu_rt_free(0, p); /* already freed (cached) */
  tpu_rt_free(7, p);
  CHECK(stats(0).num_frees == frees);

  /* OOM: status, counter, and the device keeps working */
  CHECK_ERR(tpu_rt_malloc(0, 100 * MiB, &p), OUT_OF_MEMORY,
            "tpu:0 out of memory: tried to allocate 100.00 MiB;");
  CHECK_ERR(tpu_rt_malloc(0, 100 * MiB, &p), OUT_OF_MEMORY, "64.00 MiB capacity (TORCH_TPU_HBM_BYTES)");
  CHECK_ERR(tpu_rt_malloc(0, SIZE_MAX, &p), OUT_OF_MEMORY, "out of memory");
  CHECK(stats(0).num_ooms == 3);
  CHECK_OK(tpu_rt_malloc(0, MiB, &p));
  tpu_rt_free(0, p);

  /* cached blocks are released to make room */
  CHECK_OK(tpu_rt_malloc(0, 40 * MiB, &p));
  tpu_rt_free(0, p);
  CHECK(stats(0).reserved_bytes >= 40 * MiB);
  CHECK_OK(tpu_rt_malloc(0, 48 * MiB, &q));
  s = stats(0);
  CHECK(s.allocated_bytes == 48 * MiB && s.reserved_bytes <= 64 * MiB);
  /* ... but only after queued work that may still read them has finished */
  CHECK_OK(tpu_rt_queue_enqueue(0, "slow", task_sleep, (void*)(intptr_t)30, NULL));
  uint64_t fence = tpu_rt_queue_enqueued_seq(0);
  tpu_rt_free(0, q); /* fence: the slow task may still read q */
  CHECK(tpu_rt_queue_completed_seq(0) < fence);
  CHECK_OK(tpu_rt_malloc(0, 40 * MiB, &p)); /* needs q's memory: waits for the slow task */
  CHECK(tpu_rt_queue_completed_seq(0) >= fence);
  CHECK(stats(0).reserved_bytes <= 64 * MiB);
  tpu_rt_free(0, p);
  CHECK_OK(tpu_rt_empty_cache(0));
  s = stats(0);
  CHECK(s.reserved_bytes == s.allocated_bytes);

  /* devices are independent */
  CHECK_OK(tpu_rt_malloc(1, 10 * MiB, &p));
  CHECK(stats(1).allocated_bytes == 10 * MiB && stats(0).allocated_bytes == s.allocated_bytes);
  tpu_rt_free(0, p); /* wrong device: ignored */
  CHECK(stats(1).allocated_bytes == 10 * MiB);
  tpu_rt_free(1, p);
  CHECK(stats(1).allocated_bytes == 0);

  /* many live blocks: map growth and backward-shift deletion */
  enum { N = 3000 };
  void** ptrs = malloc(N * sizeof(void*));
  for (int k = 0; k < N; ++k) CHECK_OK(tpu_rt_malloc(1, (size_t)(k % 37 + 1) * 100, &ptrs[k]));
  for (int k = 0; k < N; k += 2) tpu_rt_free(1, ptrs[k]);
  for (int k = 1; k < N; k += 2) tpu_rt_free(1, ptrs[k]);
  s = stats(1);
  CHECK(s.allocated_bytes == 0 && s.requested_bytes == 0 && s.num_frees == N + 1);
  free(ptrs);

  /* the direct-indexed small classes (64..256 by 64, 512..1 MiB by 512): each edge reuses its own
   * block, a small request takes a cached block up to 1/8 larger, 1 MiB shares its bucket with the
   * large classes, and empty_cache releases them all */
  CHECK_OK(tpu_rt_empty_cache(1));
  static const size_t edge[] = {1, 64, 65, 256, 257, 512, 513, MiB - 1, MiB};
  static const uint64_t cls[] = {64, 64, 128, 256, 512, 512, 1024, MiB, MiB};
  void* eb[9];
  for (int k = 0; k < 9; ++k) {
    uint64_t before = stats(1).allocated_bytes;
    CHECK_OK(tpu_rt_malloc(1, edge[k], &eb[k]));
    CHECK(eb[k] && stats(1).allocated_bytes == before + cls[k]);
  }
  for (int k = 0; k < 9; ++k) tpu_rt_free(1, eb[k]);
  s = stats(1);
  CHECK(s.allocated_bytes == 0 && s.reserved_bytes == 2 * 64 + 128 + 256 + 2 * 512 + 1024 + 2 * MiB);
  uint64_t hits = s.num_cache_hits;
  CHECK_OK(tpu_rt_malloc(1, 200, &p)); /* class 256: the one cached 256 block */
  CHECK(p == eb[3] && stats(1).num_cache_hits == hits + 1);
  CHECK_OK(tpu_rt_malloc(1, MiB, &q)); /* LIFO within the shared 1 MiB bucket */
  CHECK(q == eb[8] || q == eb[7]);
  tpu_rt_free(1, p);
  tpu_rt_free(1, q);
  CHECK_OK(tpu_rt_malloc(1, 8600, &p)); /* class 8704 */
  tpu_rt_free(1, p);
  CHECK_OK(tpu_rt_malloc(1, 8000, &q)); /* class 8192: the cached 8704 block is within 1/8 */
  CHECK(q == p && stats(1).allocated_bytes == 8704);
  tpu_rt_free(1, q);
  CHECK_OK(tpu_rt_empty_cache(1));
  s = stats(1);
  CHECK(s.allocated_bytes == 0 && s.reserved_bytes == 0);
}

/* Allocator hold: blocks the holding thread frees stay out of other threads' reach (they leave
 * allocated_bytes at once) until the hold ends; the holder's own allocations reuse them. */
typedef struct { size_t n; void* got; } other_alloc_t;
static void* other_alloc_thread(void* arg) {
  other_alloc_t* o = arg;
  tpu_status_t st = tpu_rt_malloc(0, o->n, &o->got);
  if (st) { tpu_status_free(st); o->got = NULL; }
  return NULL;
}
static void test_allocator_hold(void) {
  void *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(tpu_rt_malloc(0, 200000, &a));
  CHECK_OK(tpu_rt_malloc(0, 200000, &b));
  uint64_t live = stats(0).allocated_bytes;
  CHECK_OK(tpu_rt_alloc_hold_begin(0));
  tpu_status_t st = tpu_rt_alloc_hold_begin(0); /* one hold per thread */
  CHECK(st && tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT);
  tpu_status_free(st);
  tpu_rt_free(0, a);
  CHECK(stats(0).allocated_bytes == live - 200192);
  other_alloc_t o = {200000, NULL}; /* another thread: never the held block */
  pthread_t t;
  pthread_create(&t, NULL, other_alloc_thread, &o);
  pthread_join(t, NULL);
  CHECK(o.got && o.got != a);
  void* other = o.got;
  CHECK_OK(tpu_rt_malloc(0, 199999, &c)); /* the holder: its held block */
  CHECK(c == a);
  tpu_rt_free(0, b);
  tpu_rt_alloc_hold_end(0);
  tpu_rt_alloc_hold_end(0); /* no hold: no-op */
  o.got = NULL; /* b joined the shared cache */
  pthread_create(&t, NULL, other_alloc_thread, &o);
  pthread_join(t, NULL);
  CHECK(o.got == b);
  tpu_rt_free(0, o.got);
  tpu_rt_free(0, other);
  tpu_rt_free(0, c);
}

/* ------------------------------------------------------------------ queue */

typedef struct { int* log; atomic_int* n; int value; atomic_int* freed; } append_ctx_t;
static tpu_status_t task_append(void* ctx) {
  append_ctx_t* c = ctx;
  c->log[atomic_fetch_add(c->n, 1)] = c->value;
  return TPU_OK;
}
static void free_append(void* ctx) {
  atomic_fetch_add(((append_ctx_t*)ctx)->freed, 1);
  free(ctx);
}
static tpu_status_t task_fail(void* ctx) {
  return tpu_status_make(TPU_STATUS_INDEX_ERROR, "index %d is out of bounds", (int)(intptr_t)ctx);
}
static tpu_status_t task_set_flag(void* ctx) { atomic_store((atomic_int*)ctx, 1); return TPU_OK; }

static void test_queue_order_and_errors(void) {
  enum { N = 1000 };
  int* log = calloc(N, sizeof(int));
  atomic_int n = 0, freed = 0;
  for (int k = 0; k < N; ++k) {
    append_ctx_t* c = malloc(sizeof(*c));
    *c = (append_ctx_t){log, &n, k, &freed};
    CHECK_OK(tpu_rt_queue_enqueue(0, "append", task_append, c, free_append));
  }
  CHECK_OK(tpu_rt_synchronize(0));
  CHECK(atomic_load(&n) == N && atomic_load(&freed) == N);
  int in_order = 1;
  for (int k = 0; k < N; ++k) in_order &= log[k] == k;
  CHECK(in_order);
  CHECK(tpu_rt_queue_completed_seq(0) == tpu_rt_queue_enqueued_seq(0));
  free(log);

  /* the first async error surfaces once, prefixed by its op name; later tasks still run */
  atomic_int flag = 0;
  CHECK_OK(tpu_rt_queue_enqueue(0, "aten::index.Tensor", task_fail, (void*)(intptr_t)7, NULL));
  CHECK_OK(tpu_rt_queue_enqueue(0, "aten::gather", task_fail, (void*)(intptr_t)9, NULL));
  CHECK_OK(tpu_rt_queue_enqueue(0, "flag", task_set_flag, &flag, NULL));
  CHECK_ERR(tpu_rt_synchronize(0), INDEX_ERROR, "aten::index.Tensor: index 7 is out of bounds");
  CHECK(atomic_load(&flag) == 1);
  CHECK_OK(tpu_rt_synchronize(0));
  /* errors stay on their device; d2h reports them too */
  CHECK_OK(tpu_rt_queue_enqueue(1, "aten::bad", task_fail, (void*)(intptr_t)1, NULL));
  CHECK_OK(tpu_rt_synchronize(0));
  char host[4];
  CHECK_ERR(tpu_rt_memcpy_d2h(1, host, host, 0), INDEX_ERROR, "aten::bad: index 1");
  CHECK_OK(tpu_rt_synchronize(1));
  /* a NULL fn is refused and ctx is still freed */
  append_ctx_t* c = malloc(sizeof(*c));
  *c = (append_ctx_t){NULL, NULL, 0, &freed};
  CHECK_ERR(tpu_rt_queue_enqueue(0, "nofn", NULL, c, free_append), INVALID_ARGUMENT, "nofn");
  CHECK(atomic_load(&freed) == N + 1);
  /* bad device: ctx freed as well */
  c = malloc(sizeof(*c));
  *c = (append_ctx_t){NULL, NULL, 0, &freed};
  CHECK_ERR(tpu_rt_queue_enqueue(5, "x", task_append, c, free_append), INVALID_ARGUMENT, "invalid device index 5");
  CHECK(atomic_load(&freed) == N + 2);
}

/* Tasks may use the runtime: allocate, free, and "synchronize" their own device (no deadlock). */
static tpu_status_t task_uses_runtime(void* ctx) {
  void* p = NULL;
  TPU_RETURN_IF_ERROR(tpu_rt_malloc(0, 4096, &p));
  tpu_rt_free(0, p);
  TPU_RETURN_IF_ERROR(tpu_rt_synchronize(0));
  tpu_rt_queue_wait(0, tpu_rt_queue_enqueued_seq(0));
  atomic_store((atomic_int*)ctx, tpu_rt_queue_current_device() == 0 ? 1 : 2);
  return TPU_OK;
}

/* tpu_rt_queue_enqueue_small: on an idle queue whose worker sleeps, the task runs on the caller
 * with a sequence number and async error semantics; work enqueued meanwhile runs after it; a busy
 * or awake queue gets it in order like any task. */
typedef struct { pthread_t thread; atomic_int* inline_done; atomic_int* saw_done; atomic_int* n; } small_ctx_t;
static tpu_status_t task_note_thread(void* ctx) { ((small_ctx_t*)ctx)->thread = pthread_self(); return TPU_OK; }
static tpu_status_t task_check_after(void* ctx) {
  small_ctx_t* c = ctx;
  atomic_store(c->saw_done, atomic_load(c->inline_done));
  return TPU_OK;
}
static tpu_status_t task_enqueue_then_wait(void* ctx) { /* a small task that enqueues from inside */
  small_ctx_t* c = ctx;
  if (tpu_rt_queue_enqueue(0, "after", task_check_after, c, NULL)) return TPU_OK;
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL); /* the worker has the new task by now; it must wait for this one */
  atomic_store(c->inline_done, 1);
  return TPU_OK;
}
static tpu_status_t task_sleep_ms(void* ctx) {
  struct timespec ts = {0, (long)(intptr_t)ctx * 1000 * 1000};
  nanosleep(&ts, NULL);
  return TPU_OK;
}
static void let_worker_sleep(void) {
  CHECK_OK(tpu_rt_synchronize(0));
  struct timespec ts = {0, 50 * 1000 * 1000}; /* > the worker's ~30 us spin */
  nanosleep(&ts, NULL);
}
static void test_queue_small(void) {
  atomic_int inline_done = 0, saw_done = -1, n = 0;
  small_ctx_t c = {.inline_done = &inline_done, .saw_done = &saw_done, .n = &n};
  CHECK_OK(tpu_rt_queue_enqueue(0, "start", task_set_flag, &n, NULL)); /* the worker exists */
  uint64_t seq = 0;
  for (int attempt = 0; attempt < 20; ++attempt) { /* a loaded machine may keep the worker off-core */
    let_worker_sleep();
    seq = tpu_rt_queue_enqueued_seq(0);
    CHECK_OK(tpu_rt_queue_enqueue_small(0, "small", task_note_thread, &c, NULL));
    if (pthread_equal(c.thread, pthread_self())) break;
  }
  CHECK(pthread_equal(c.thread, pthread_self()));
  CHECK(tpu_rt_queue_enqueued_seq(0) == seq + 1 && tpu_rt_queue_completed_seq(0) == seq + 1);
  /* a failure is recorded for synchronize, prefixed by the op name, as on the worker */
  let_worker_sleep();
  CHECK_OK(tpu_rt_queue_enqueue_small(0, "aten::gather", task_fail, (void*)(intptr_t)4, NULL));
  CHECK_ERR(tpu_rt_synchronize(0), INDEX_ERROR, "aten::gather: index 4 is out of bounds");
  CHECK_OK(tpu_rt_synchronize(0));
  /* free_fn runs; a task enqueued from inside the inline task runs after it, on the worker */
  let_worker_sleep();
  atomic_int freed = 0;
  append_ctx_t* a = malloc(sizeof(*a));
  int log[1];
  *a = (append_ctx_t){log, &n, 5, &freed};
  atomic_store(&n, 0);
  CHECK_OK(tpu_rt_queue_enqueue_small(0, "append", task_append, a, free_append));
  CHECK_OK(tpu_rt_synchronize(0));
  CHECK(atomic_load(&freed) == 1 && log[0] == 5);
  let_worker_sleep();
  CHECK_OK(tpu_rt_queue_enqueue_small(0, "reenter", task_enqueue_then_wait, &c, NULL));
  CHECK_OK(tpu_rt_synchronize(0));
  CHECK(atomic_load(&saw_done) == 1);
  /* a busy queue: the small task waits its turn on the worker */
  let_worker_sleep();
  c.thread = pthread_self();
  CHECK_OK(tpu_rt_queue_enqueue(0, "slow", task_sleep_ms, (void*)(intptr_t)20, NULL));
  CHECK_OK(tpu_rt_queue_enqueue_small(0, "small", task_note_thread, &c, NULL));
  CHECK_OK(tpu_rt_synchronize(0));
  CHECK(!pthread_equal(c.thread, pthread_self()));
  /* NULL fn / bad device: refused, ctx freed */
  a = malloc(sizeof(*a));
  *a = (append_ctx_t){NULL, NULL, 0, &freed};
  CHECK_ERR(tpu_rt_queue_enqueue_small(0, "nofn", NULL, a, free_append), INVALID_ARGUMENT, "nofn");
  a = malloc(sizeof(*a));
  *a = (append_ctx_t){NULL, NULL, 0, &freed};
  CHECK_ERR(tpu_rt_queue_enqueue_small(5, "x", task_append, a, free_append), INVALID_ARGUMENT, "invalid device");
  CHECK(atomic_load(&freed) == 3);
}

/* The window between a caller-run task's completion and its letting the worker go (held open by
 * the test hook): another producer's small task must not run on its own thread then, or the worker
 * could start a task enqueued after it beside it (and `completed` go backwards). */
static struct {
  atomic_int phase, hooked, x_started, x_on_b, y_started, y_during_x, x_done;
  pthread_t b;
} g_win;
static uint64_t win_elapsed_ms(uint64_t t0) { return (tpu_rt_now_ns() - t0) / 1000000; }
static tpu_status_t win_task_x(void* p) { /* producer B's small task */
  atomic_store(&g_win.x_started, 1);
  if (pthread_equal(pthread_self(), g_win.b)) { /* ran on B: does the worker start y beside it? */
    atomic_store(&g_win.x_on_b, 1);
    for (uint64_t t0 = tpu_rt_now_ns(); !atomic_load(&g_win.y_started) && win_elapsed_ms(t0) < 1000;) sleep_ms(1);
  }
  atomic_store(&g_win.x_done, 1);
  return TPU_OK;
}
static tpu_status_t win_task_y(void* p) {
  atomic_store(&g_win.y_started, 1);
  if (!atomic_load(&g_win.x_done)) atomic_store(&g_win.y_during_x, 1);
  return TPU_OK;
}
static void* win_thread_b(void* p) {
  while (atomic_load(&g_win.phase) != 1) sched_yield();
  CHECK_OK(tpu_rt_queue_enqueue_small(0, "x", win_task_x, NULL, NULL));
  atomic_store(&g_win.phase, 2);
  return p;
}
static void win_hook(int device) { /* on A's thread: its task has completed, the worker still waits */
  int zero = 0;
  if (device != 0 || !atomic_compare_exchange_strong(&g_win.phase, &zero, 1)) return;
  atomic_store(&g_win.hooked, 1);
  for (uint64_t t0 = tpu_rt_now_ns(); atomic_load(&g_win.phase) != 2 && !atomic_load(&g_win.x_started) &&
                                      win_elapsed_ms(t0) < 5000;)
    sched_yield();
  CHECK_OK(tpu_rt_queue_enqueue(0, "y", win_task_y, NULL, NULL)); /* after x; wakes the worker */
}
static void test_queue_caller_run_window(void) {
  CHECK_OK(tpu_rt_queue_enqueue(0, "start", task_noop, NULL, NULL)); /* the worker exists */
  pthread_t b;
  pthread_create(&b, NULL, win_thread_b, NULL);
  g_win.b = b;
  tpu_rt_queue_test_hook = win_hook;
  for (int attempt = 0; attempt < 20 && atomic_load(&g_win.phase) == 0; ++attempt) {
    let_worker_sleep(); /* A's small task runs on this thread only while the worker sleeps */
    CHECK_OK(tpu_rt_queue_enqueue_small(0, "a", task_noop, NULL, NULL));
  }
  tpu_rt_queue_test_hook = NULL;
  if (atomic_load(&g_win.phase) == 0) atomic_store(&g_win.phase, 1); /* never ran on the caller: let B go */
  pthread_join(b, NULL);
  CHECK(atomic_load(&g_win.hooked)); /* A ran on this thread and held the window open */
  CHECK(!atomic_load(&g_win.x_on_b));
  CHECK(!atomic_load(&g_win.y_during_x));
  /* y completing before x would leave `completed` below `enqueued` for good: wait with a bound */
  for (uint64_t t0 = tpu_rt_now_ns(); tpu_rt_queue_completed_seq(0) < tpu_rt_queue_enqueued_seq(0) &&
                                      win_elapsed_ms(t0) < 5000;)
    sleep_ms(1);
  CHECK(tpu_rt_queue_completed_seq(0) == tpu_rt_queue_enqueued_seq(0));
  if (tpu_rt_queue_completed_seq(0) != tpu_rt_queue_enqueued_seq(0)) {
    fprintf(stderr, "tpu:0 lost a completion; stopping (later tests would wait forever)\n");
    exit(1);
  }
  CHECK_OK(tpu_rt_synchronize(0));
  CHECK(atomic_load(&g_win.x_done) && atomic_load(&g_win.y_started));
}

/* Caller-run tasks (enqueue_small, direct h2d copies) from several threads, mixed with ordinary
 * enqueues: tasks of one queue never overlap, each producer's tasks run in its order and
 * `completed` never goes backwards. Catches a second caller-run task claimed while the first has
 * completed but not yet let the worker go (the worker then started a later task beside it). */
enum { MIX_THREADS = 3, MIX_TASKS = 3000 };
static struct {
  atomic_int running, overlap, order, done, small_on_caller;
  int last[MIX_THREADS];
  uint8_t dst[MIX_THREADS][64]; /* staged copies may land after their thread ends */
} g_mix;
typedef struct { int producer, index; pthread_t caller; } mix_task_t;
static tpu_status_t mix_task(void* p) {
  mix_task_t* m = p;
  if (atomic_fetch_add(&g_mix.running, 1) != 0) atomic_fetch_add(&g_mix.overlap, 1);
  if (pthread_equal(pthread_self(), m->caller)) atomic_fetch_add(&g_mix.small_on_caller, 1);
  if (m->index != g_mix.last[m->producer] + 1) atomic_fetch_add(&g_mix.order, 1);
  g_mix.last[m->producer] = m->index;
  for (int k = 0; k < 200 * (m->index % 4); ++k) tpu_rt_cpu_relax(); /* widen the windows */
  atomic_fetch_sub(&g_mix.running, 1);
  return TPU_OK;
}
static void* mix_thread(void* arg) {
  const int p = (int)(intptr_t)arg;
  uint8_t src[64] = {0};
  for (int k = 0; k < MIX_TASKS; ++k) {
    mix_task_t* m = malloc(sizeof(*m));
    *m = (mix_task_t){p, k, pthread_self()};
    if (k % 29 == 28) CHECK_OK(tpu_rt_queue_enqueue(0, "mix", mix_task, m, free));
    else CHECK_OK(tpu_rt_queue_enqueue_small(0, "mix_small", mix_task, m, free));
    if (k % 7 == 0) CHECK_OK(tpu_rt_memcpy_h2d(0, g_mix.dst[p], src, sizeof src));
    if (k % 4 == 3) { struct timespec ts = {0, 200000}; nanosleep(&ts, NULL); } /* the worker sleeps again */
  }
  return NULL;
}
static void* mix_monitor(void* arg) {
  uint64_t last = 0;
  while (!atomic_load(&g_mix.done)) {
    uint64_t c = tpu_rt_queue_completed_seq(0);
    if (c < last) atomic_fetch_add(&g_mix.order, 1);
    last = c;
  }
  return arg;
}
static void test_queue_caller_runs_concurrent(void) {
  for (int k = 0; k < MIX_THREADS; ++k) g_mix.last[k] = -1;
  CHECK_OK(tpu_rt_synchronize(0));
  pthread_t t[MIX_THREADS], mon;
  pthread_create(&mon, NULL, mix_monitor, NULL);
  for (int k = 0; k < MIX_THREADS; ++k) pthread_create(&t[k], NULL, mix_thread, (void*)(intptr_t)k);
  for (int k = 0; k < MIX_THREADS; ++k) pthread_join(t[k], NULL);
  CHECK_OK(tpu_rt_synchronize(0));
  atomic_store(&g_mix.done, 1);
  pthread_join(mon, NULL);
  CHECK(atomic_load(&g_mix.overlap) == 0);
  CHECK(atomic_load(&g_mix.order) == 0);
  for (int k = 0; k < MIX_THREADS; ++k) CHECK(g_mix.last[k] == MIX_TASKS - 1);
  CHECK(tpu_rt_queue_completed_seq(0) == tpu_rt_queue_enqueued_seq(0));
  if (getenv("TPU_TEST_VERBOSE"))
    fprintf(stderr, "caller-run mix: %d of %d small tasks on their producer, overlaps %d, order errors %d\n",
            atomic_load(&g_mix.small_on_caller), MIX_THREADS * (MIX_TASKS - MIX_TASKS / 29), atomic_load(&g_mix.overlap),
            atomic_load(&g_mix.order));
}

static void test_task_reentry(void) {
  atomic_int flag = 0;
  CHECK_OK(tpu_rt_queue_enqueue(0, "reentry", task_uses_runtime, &flag, NULL));
  CHECK_OK(tpu_rt_synchronize(0));
  CHECK(atomic_load(&flag) == 1);
  CHECK(tpu_rt_queue_current_device() == -1);
}

/* ------------------------------------------------------------------ events */

static void test_events(void) {
  uint64_t e1 = 0, e2 = 0, e3 = 0;
  bool done = false;
  CHECK_OK(tpu_rt_event_record(0, &e1));
  CHECK_OK(tpu_rt_queue_enqueue(0, "sleep", task_sleep, (void*)(intptr_t)50, NULL));
  CHECK_OK(tpu_rt_event_record(0, &e2));
  CHECK(e2 == e1 + 2 && e2 == tpu_rt_queue_enqueued_seq(0));
  CHECK_OK(tpu_rt_event_query(0, e2, &done));
  CHECK(!done);
  int64_t ns = 0;
  CHECK_ERR(tpu_rt_event_elapsed_ns(0, e1, e2, &ns), INVALID_ARGUMENT, "has not completed");
  CHECK_OK(tpu_rt_event_synchronize(0, e2));
  CHECK_OK(tpu_rt_event_query(0, e2, &done));
  CHECK(done);
  CHECK_OK(tpu_rt_event_elapsed_ns(0, e1, e2, &ns));
  CHECK(ns >= 45 * 1000000LL && ns < 5000LL * 1000000LL);
  CHECK_OK(tpu_rt_event_query(0, 0, &done)); /* position 0: before everything */
  CHECK(done);
  CHECK_ERR(tpu_rt_event_query(0, e2 + 100, &done), INVALID_ARGUMENT, "was never recorded on tpu:0");
  CHECK_ERR(tpu_rt_event_synchronize(0, e2 + 100), INVALID_ARGUMENT, "never recorded");
  CHECK_ERR(tpu_rt_event_elapsed_ns(0, e1 + 1, e2, &ns), INVALID_ARGUMENT, "no timing for event");
  CHECK_ERR(tpu_rt_event_query(2, e1, &done), INVALID_ARGUMENT, "invalid device index 2");
  /* timing survives 4096 later tasks, but not 4096 later events */
  for (int k = 0; k < 5000; ++k) CHECK_OK(tpu_rt_queue_enqueue(0, "noop", task_noop, NULL, NULL));
  CHECK_OK(tpu_rt_event_record(0, &e3));
  CHECK_OK(tpu_rt_event_synchronize(0, e3));
  CHECK_OK(tpu_rt_event_elapsed_ns(0, e1, e3, &ns));
  CHECK(ns >= 45 * 1000000LL);
  uint64_t e = 0;
  for (int k = 0; k < 4100; ++k) tpu_status_free(tpu_rt_event_record(0, &e));
  CHECK_OK(tpu_rt_event_synchronize(0, e));
  CHECK_ERR(tpu_rt_event_elapsed_ns(0, e1, e, &ns), INVALID_ARGUMENT, "older than the last 4096 events");
  CHECK_OK(tpu_rt_event_elapsed_ns(0, e - 100, e, &ns));
  CHECK(ns >= 0);
}

/* ------------------------------------------------------------------ memcpy */

static void test_memcpy(void) {
  enum { N = 1 << 18 };
  uint8_t* host = malloc(N);
  uint8_t* out = malloc(N);
  for (int k = 0; k < N; ++k) host[k] = (uint8_t)(k * 31 + 7);
  void *a, *b, *c;
  CHECK_OK(tpu_rt_malloc(0, N, &a));
  CHECK_OK(tpu_rt_malloc(0, N, &b));
  CHECK_OK(tpu_rt_malloc(1, N, &c));
  CHECK_OK(tpu_rt_memcpy_h2d(0, a, host, N)); /* idle queue: direct */
  memset(out, 0, N);
  CHECK_OK(tpu_rt_memcpy_d2h(0, out, a, N));
  CHECK(memcmp(out, host, N) == 0);
  /* busy queue: staged; the host buffer may be reused at once */
  CHECK_OK(tpu_rt_queue_enqueue(0, "sleep", task_sleep, (void*)(intptr_t)20, NULL));
  CHECK_OK(tpu_rt_memcpy_h2d(0, b, host, N));
  for (int k = 0; k < N; ++k) host[k] ^= 0xff;
  CHECK_OK(tpu_rt_memcpy_d2h(0, out, b, N));
  int same = 1;
  for (int k = 0; k < N; ++k) same &= out[k] == (uint8_t)(host[k] ^ 0xff);
  CHECK(same);
  /* d2d same device (queued) and across devices (synchronous) */
  CHECK_OK(tpu_rt_memcpy_h2d(0, a, host, N));
  CHECK_OK(tpu_rt_memcpy_d2d(0, b, 0, a, N));
  CHECK_OK(tpu_rt_memcpy_d2d(1, c, 0, b, N));
  memset(out, 0, N);
  CHECK_OK(tpu_rt_memcpy_d2h(1, out, c, N));
  CHECK(memcmp(out, host, N) == 0);
  CHECK_OK(tpu_rt_memcpy_h2d(0, a, host, 0));
  CHECK_ERR(tpu_rt_memcpy_h2d(0, NULL, host, 8), INVALID_ARGUMENT, "NULL destination");
  CHECK_ERR(tpu_rt_memcpy_d2h(0, out, NULL, 8), INVALID_ARGUMENT, "NULL source");
  CHECK_ERR(tpu_rt_memcpy_d2d(0, b, 4, a, 8), INVALID_ARGUMENT, "invalid device index 4");
  tpu_rt_free(0, a);
  tpu_rt_free(0, b);
  tpu_rt_free(1, c);
  free(host);
  free(out);
}

/* ------------------------------------------------------------------ pool */

typedef struct {
  uint8_t* seen;
  _Atomic int64_t sum, chunks, min_chunk;
  atomic_int nested_inline;
} pool_ctx_t;

static void pool_body(void* p, int64_t begin, int64_t end) {
  pool_ctx_t* c = p;
  int64_t s = 0;
  for (int64_t i = begin; i < end; ++i) { c->seen[i]++; s += i; }
  atomic_fetch_add(&c->sum, s);
  atomic_fetch_add(&c->chunks, 1);
  int64_t m = atomic_load(&c->min_chunk);
  while (end - begin < m && !atomic_compare_exchange_weak(&c->min_chunk, &m, end - begin)) {}
}

/* dyn: tpu_pool_parallel_for_dynamic (up to 4 chunks per thread) */
static void pool_run_check_ex(int64_t n, int64_t grain, int max_chunks, int dyn) {
  pool_ctx_t c = {.seen = calloc((size_t)n, 1), .min_chunk = INT64_MAX};
  if (dyn) tpu_pool_parallel_for_dynamic(n, grain, pool_body, &c);
  else tpu_pool_parallel_for(n, grain, pool_body, &c);
  int once = 1;
  for (int64_t i = 0; i < n; ++i) once &= c.seen[i] == 1;
  CHECK(once);
  CHECK(atomic_load(&c.sum) == n * (n - 1) / 2);
  CHECK(atomic_load(&c.chunks) >= 1 && atomic_load(&c.chunks) <= max_chunks);
  CHECK(atomic_load(&c.chunks) == 1 || atomic_load(&c.min_chunk) >= grain);
  free(c.seen);
}
static void pool_run_check(int64_t n, int64_t grain, int max_chunks) { pool_run_check_ex(n, grain, max_chunks, 0); }

typedef struct { pthread_t caller; atomic_int calls, other_thread; } nest_ctx_t;
static void nest_inner(void* p, int64_t b, int64_t e) {
  nest_ctx_t* c = p;
  atomic_fetch_add(&c->calls, 1);
  if (!pthread_equal(pthread_self(), c->caller)) atomic_store(&c->other_thread, 1);
}
static void nest_outer(void* p, int64_t b, int64_t e) {
  nest_ctx_t inner = {.caller = pthread_self()};
  tpu_pool_parallel_for(100000, 1, nest_inner, &inner); /* nested: inline, one call */
  if (atomic_load(&inner.calls) != 1 || atomic_load(&inner.other_thread)) atomic_store(&((nest_ctx_t*)p)->other_thread, 1);
}

static void* pool_thread(void* arg) {
  for (int k = 0; k < 50; ++k) pool_run_check(20000 + k, 100, 4);
  return arg;
}

static tpu_status_t task_pool(void* arg) {
  for (int k = 0; k < 20; ++k) pool_run_check_ex(50000, 1000, k % 2 ? 16 : 4, k % 2);
  return TPU_OK;
}

/* Locality: parallel_for(_dynamic) gives thread t the t-th contiguous block of chunks, so a chain of ops over
 * same-sized data runs each index range on the same thread (its lines stay in that core's cache). The chunks run in
 * lockstep (a thread's k-th chunk waits, up to ~1 s, until every thread has started its k-th), so no thread runs
 * out of its own block while another still has chunks left to steal, and claim order (the old rule: chunks in
 * turn) would interleave the threads' chunks. A worker woken more than ~1 s late spoils a run: most runs must pass. */
enum { LOC_CHUNKS = 16, LOC_GRAIN = 64 };
typedef struct { pthread_t who[LOC_CHUNKS]; atomic_int started[LOC_CHUNKS]; int nth, id; } loc_ctx_t;
static _Thread_local int tl_loc_id = -1, tl_loc_k;
static void loc_body(void* p, int64_t b, int64_t e) {
  loc_ctx_t* c = p;
  c->who[b / LOC_GRAIN] = pthread_self();
  if (tl_loc_id != c->id) { tl_loc_id = c->id; tl_loc_k = 0; }
  const int k = tl_loc_k++;
  atomic_fetch_add(&c->started[k], 1);
  const uint64_t t0 = tpu_rt_now_ns();
  while (atomic_load(&c->started[k]) < c->nth && tpu_rt_now_ns() - t0 < 1000000000ull) sched_yield();
}
static void test_pool_locality(void) {
  const int nth = tpu_pool_num_threads(), per = LOC_CHUNKS / nth;
  CHECK(nth == 4);
  int good = 0;
  for (int run = 0; run < 20; ++run) {
    loc_ctx_t c = {.nth = nth, .id = run};
    tpu_pool_parallel_for_dynamic(LOC_CHUNKS * LOC_GRAIN, LOC_GRAIN, loc_body, &c); /* 4 chunks per thread */
    int ok = pthread_equal(c.who[0], pthread_self()); /* the caller's block is the first */
    for (int i = 0; i < LOC_CHUNKS; ++i) ok &= pthread_equal(c.who[i], c.who[i / per * per]);
    for (int b = 0; b < nth; ++b)
      for (int b2 = 0; b2 < b; ++b2) ok &= !pthread_equal(c.who[b * per], c.who[b2 * per]);
    good += ok;
  }
  CHECK(good >= 15);
}

static void test_pool(void) {
  CHECK(tpu_pool_num_threads() == 4);
  test_pool_locality();
  pool_run_check(1000000, 1000, 4);
  pool_run_check(4500, 1000, 4);
  pool_run_check(1999, 1000, 1); /* < 2 grains: one chunk */
  pool_run_check(7, 0, 4);       /* grain 0 behaves as 1 */
  pool_run_check(1, 1, 1);
  pool_run_check_ex(1000000, 1000, 16, 1);
  pool_run_check_ex(4500, 1000, 4, 1);
  pool_run_check_ex(1999, 1000, 1, 1);
  pool_run_check_ex(7, 0, 7, 1);
  tpu_pool_parallel_for_dynamic(0, 1, pool_body, NULL);
  tpu_pool_parallel_for(0, 1, pool_body, NULL); /* n == 0: fn never called */
  tpu_pool_parallel_for(-5, 1, pool_body, NULL);
  nest_ctx_t small = {.caller = pthread_self()};
  tpu_pool_parallel_for(10, 10, nest_inner, &small); /* n <= grain: inline */
  CHECK(atomic_load(&small.calls) == 1 && !atomic_load(&small.other_thread));
  nest_ctx_t outer = {0};
  tpu_pool_parallel_for(64, 1, nest_outer, &outer);
  CHECK(!atomic_load(&outer.other_thread));
  /* concurrent callers: two plain threads and both device queues */
  pthread_t t[2];
  for (int k = 0; k < 2; ++k) pthread_create(&t[k], NULL, pool_thread, NULL);
  CHECK_OK(tpu_rt_queue_enqueue(0, "pool0", task_pool, NULL, NULL));
  CHECK_OK(tpu_rt_queue_enqueue(1, "pool1", task_pool, NULL, NULL));
  for (int k = 0; k < 2; ++k) pthread_join(t[k], NULL);
  CHECK_OK(tpu_rt_synchronize(0));
  CHECK_OK(tpu_rt_synchronize(1));
  /* tpu_pool_init sizes what kernels plan for; once workers run it can only shrink the pool */
  tpu_pool_init(1);
  CHECK(tpu_pool_num_threads() == 1 && tpu_rt_num_threads() == 4);
  pool_run_check(1000000, 1000, 1); /* one thread: one inline chunk */
  tpu_pool_init(8);
  CHECK(tpu_pool_num_threads() == 4);
  pool_run_check(1000000, 1000, 4);
}

/* ------------------------------------------------------------------ concurrent enqueue */

enum { ENQ_THREADS = 4, ENQ_TASKS = 500 };
typedef struct { int last[ENQ_THREADS]; atomic_int bad, count; } enq_state_t;
typedef struct { enq_state_t* s; int thread, index; } enq_ctx_t;
static enq_state_t g_enq;

static tpu_status_t task_enq(void* p) {
  enq_ctx_t* c = p;
  /* runs on the single worker: per-thread order must be preserved */
  if (c->index != c->s->last[c->thread] + 1) atomic_fetch_add(&c->s->bad, 1);
  c->s->last[c->thread] = c->index;
  atomic_fetch_add(&c->s->count, 1);
  return TPU_OK;
}

static void* enq_thread(void* arg) {
  int id = (int)(intptr_t)arg;
  for (int k = 0; k < ENQ_TASKS; ++k) {
    enq_ctx_t* c = malloc(sizeof(*c));
    *c = (enq_ctx_t){&g_enq, id, k};
    tpu_status_t st = tpu_rt_queue_enqueue(0, "enq", task_enq, c, free);
    if (st) { atomic_fetch_add(&g_enq.bad, 1); tpu_status_free(st); }
    if (k % 100 == 0) { uint64_t e; tpu_status_free(tpu_rt_event_record(0, &e)); }
  }
  return NULL;
}

static void test_concurrent_enqueue(void) {
  for (int k = 0; k < ENQ_THREADS; ++k) g_enq.last[k] = -1;
  pthread_t t[ENQ_THREADS];
  for (int k = 0; k < ENQ_THREADS; ++k) pthread_create(&t[k], NULL, enq_thread, (void*)(intptr_t)k);
  for (int k = 0; k < ENQ_THREADS; ++k) pthread_join(t[k], NULL);
  CHECK_OK(tpu_rt_synchronize(0));
  CHECK(atomic_load(&g_enq.bad) == 0);
  CHECK(atomic_load(&g_enq.count) == ENQ_THREADS * ENQ_TASKS);
}

/* Enqueue blocks while TPU_RT_QUEUE_MAX_PENDING tasks wait to start. */
static tpu_status_t task_gate(void* p) {
  while (!atomic_load((atomic_int*)p)) sleep_ms(1);
  return TPU_OK;
}
static void* flood_thread(void* p) {
  for (int k = 0; k < TPU_RT_QUEUE_MAX_PENDING + 10; ++k) tpu_status_free(tpu_rt_queue_enqueue(1, "noop", task_noop, NULL, NULL));
  atomic_store((atomic_int*)p, 1);
  return NULL;
}

static void test_backpressure(void) {
  atomic_int open = 0, flooded = 0;
  CHECK_OK(tpu_rt_queue_enqueue(1, "gate", task_gate, &open, NULL));
  uint64_t base = tpu_rt_queue_enqueued_seq(1);
  pthread_t t;
  pthread_create(&t, NULL, flood_thread, &flooded);
  for (int k = 0; k < 2000 && tpu_rt_queue_enqueued_seq(1) < base + TPU_RT_QUEUE_MAX_PENDING; ++k) sleep_ms(1);
  sleep_ms(5);
  CHECK(!atomic_load(&flooded));
  CHECK(tpu_rt_queue_enqueued_seq(1) - base <= TPU_RT_QUEUE_MAX_PENDING);
  atomic_store(&open, 1);
  pthread_join(t, NULL);
  CHECK(atomic_load(&flooded));
  CHECK_OK(tpu_rt_synchronize(1));
  CHECK(tpu_rt_queue_enqueued_seq(1) == base + TPU_RT_QUEUE_MAX_PENDING + 10);
}

/* ------------------------------------------------------------------ RNG */

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

enum { RES_THREADS = 4, RES_EACH = 1000 };
static uint64_t g_reserved[RES_THREADS * RES_EACH];
typedef struct { tpu_rt_generator_t* gen; int id; } res_ctx_t;
static void* reserve_thread(void* p) {
  res_ctx_t* c = p;
  for (int k = 0; k < RES_EACH; ++k) {
    uint64_t seed, off;
    tpu_rt_generator_reserve(c->gen, 4, &seed, &off);
    g_reserved[c->id * RES_EACH + k] = off;
  }
  return NULL;
}

static void test_rng(void) {
  /* Random123 known-answer vectors for philox4x32-10 */
  uint32_t o[4];
  tpu_philox4x32_10(0, 0, 0, o);
  CHECK(o[0] == 0x6627e8d5u && o[1] == 0xe169c58du && o[2] == 0xbc57ac4cu && o[3] == 0x9b00dbd8u);
  tpu_philox4x32_10(UINT64_MAX, UINT64_MAX, UINT64_MAX, o);
  CHECK(o[0] == 0x408f276du && o[1] == 0x41c83b0eu && o[2] == 0xa20bc7c6u && o[3] == 0x6d5451fdu);
  /* ctr = 243f6a88 85a308d3 13198a2e 03707344, key = a4093822 299f31d0 (digits of pi) */
  tpu_philox4x32_10(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, o);
  CHECK(o[0] == 0xd16cfe09u && o[1] == 0x94fdccebu && o[2] == 0x5001e420u && o[3] == 0x24126ea1u);

  tpu_rt_generator_t* d0 = tpu_rt_default_generator(0);
  tpu_rt_generator_t* d1 = tpu_rt_default_generator(1);
  CHECK(d0 && d1 && d0 != d1 && d0 == tpu_rt_default_generator(0));
  CHECK(tpu_rt_generator_seed(d0) == 67280421310721ull && tpu_rt_generator_offset(d0) == 0);
  uint64_t seed = 0, off = 99;
  tpu_rt_generator_reserve(d0, 8, &seed, &off);
  CHECK(seed == 67280421310721ull && off == 0 && tpu_rt_generator_offset(d0) == 8);
  tpu_rt_generator_set_offset(d0, 100);
  CHECK(tpu_rt_generator_offset(d0) == 100);
  tpu_rt_generator_set_seed(d0, 42);
  CHECK(tpu_rt_generator_seed(d0) == 42 && tpu_rt_generator_offset(d0) == 0);
  CHECK(tpu_rt_generator_seed(d1) == 67280421310721ull);
  tpu_rt_generator_destroy(d0); /* default generators are not destroyed */
  CHECK(tpu_rt_generator_seed(d0) == 42);
  tpu_rt_generator_destroy(NULL);

  tpu_rt_generator_t* g = NULL;
  CHECK_OK(tpu_rt_generator_create(1, 7, &g));
  CHECK(g && tpu_rt_generator_seed(g) == 7 && tpu_rt_generator_offset(g) == 0);
  CHECK_ERR(tpu_rt_generator_create(9, 7, &g), INVALID_ARGUMENT, "invalid device index 9");
  pthread_t t[RES_THREADS];
  res_ctx_t ctx[RES_THREADS];
  for (int k = 0; k < RES_THREADS; ++k) {
    ctx[k] = (res_ctx_t){g, k};
    pthread_create(&t[k], NULL, reserve_thread, &ctx[k]);
  }
  for (int k = 0; k < RES_THREADS; ++k) pthread_join(t[k], NULL);
  CHECK(tpu_rt_generator_offset(g) == 4ull * RES_THREADS * RES_EACH);
  qsort(g_reserved, RES_THREADS * RES_EACH, sizeof(uint64_t), cmp_u64);
  int distinct = 1;
  for (int k = 0; k < RES_THREADS * RES_EACH; ++k) distinct &= g_reserved[k] == 4ull * k;
  CHECK(distinct);
  tpu_rt_generator_destroy(g);
}

/* ------------------------------------------------------------------ metrics */

static void test_metrics(void) {
  tpu_metrics_reset();
  tpu_metrics_add_ops(3);
  tpu_metrics_add_cache(1);
  tpu_metrics_add_cache(0);
  tpu_metrics_add_cache(0);
  tpu_metrics_add_compile(0.25);
  tpu_metrics_add_compile(0.5);
  tpu_metrics_set_cache_entries(5);
  tpu_metrics_add_kernels(11);
  tpu_metrics_t m;
  tpu_metrics_get(&m);
  CHECK(m.ops_run == 3 && m.exec_cache_hits == 1 && m.exec_cache_misses == 2);
  CHECK(m.compiles == 2 && m.compile_seconds > 0.7499 && m.compile_seconds < 0.7501);
  CHECK(m.exec_cache_entries == 5 && m.kernels_launched == 11);
  tpu_metrics_reset();
  tpu_metrics_get(&m);
  CHECK(m.ops_run == 0 && m.compiles == 0 && m.compile_seconds == 0.0 && m.kernels_launched == 0);
}

/* ------------------------------------------------------------------ shutdown, LAUNCH_BLOCKING */

typedef struct { pthread_t runner; atomic_int ran; } blk_ctx_t;
static tpu_status_t task_record_thread(void* p) {
  blk_ctx_t* c = p;
  c->runner = pthread_self();
  atomic_fetch_add(&c->ran, 1);
  return TPU_OK;
}

typedef struct { void* dst; const uint8_t* src; int ran; } h2d_ctx_t;
static tpu_status_t task_h2d(void* p) {
  h2d_ctx_t* h = p;
  h->ran = 1;
  return tpu_rt_memcpy_h2d(0, h->dst, h->src, 100);
}

static void test_shutdown_and_blocking(void) {
  /* shutdown drains pending work and frees its contexts (LeakSanitizer checks the latter) */
  atomic_int n = 0, freed = 0;
  int log[64];
  void* leak_is_freed = NULL;
  CHECK_OK(tpu_rt_malloc(1, 12345, &leak_is_freed));
  CHECK_OK(tpu_rt_queue_enqueue(1, "sleep", task_sleep, (void*)(intptr_t)10, NULL));
  for (int k = 0; k < 64; ++k) {
    append_ctx_t* c = malloc(sizeof(*c));
    *c = (append_ctx_t){log, &n, k, &freed};
    CHECK_OK(tpu_rt_queue_enqueue(1, "append", task_append, c, free_append));
  }
  tpu_rt_shutdown();
  CHECK(atomic_load(&n) == 64 && atomic_load(&freed) == 64);
  tpu_rt_shutdown(); /* twice is fine */

  /* re-init reads the environment again */
  setenv("TORCH_TPU_LAUNCH_BLOCKING", "1", 1);
  setenv("TORCH_TPU_NUM_DEVICES", "1", 1);
  CHECK_OK(tpu_rt_init());
  CHECK(tpu_rt_launch_blocking() && tpu_rt_device_count() == 1);
  CHECK(stats(0).allocated_bytes == 0);
  blk_ctx_t b = {0};
  CHECK_OK(tpu_rt_queue_enqueue(0, "blocking", task_record_thread, &b, NULL));
  CHECK(atomic_load(&b.ran) == 1 && pthread_equal(b.runner, pthread_self()));
  /* the task's own status comes back directly; nothing is left for synchronize */
  CHECK_ERR(tpu_rt_queue_enqueue(0, "aten::bad", task_fail, (void*)(intptr_t)3, NULL), INDEX_ERROR,
            "index 3 is out of bounds");
  CHECK_OK(tpu_rt_synchronize(0));
  uint64_t e1, e2;
  bool done = false;
  CHECK_OK(tpu_rt_event_record(0, &e1));
  CHECK_OK(tpu_rt_queue_enqueue(0, "sleep", task_sleep, (void*)(intptr_t)5, NULL));
  CHECK_OK(tpu_rt_event_record(0, &e2));
  CHECK_OK(tpu_rt_event_query(0, e2, &done));
  CHECK(done);
  int64_t ns = 0;
  CHECK_OK(tpu_rt_event_elapsed_ns(0, e1, e2, &ns));
  CHECK(ns >= 4000000);
  uint8_t src[100], dst[100], out[100];
  for (int k = 0; k < 100; ++k) src[k] = (uint8_t)k;
  void* d;
  CHECK_OK(tpu_rt_malloc(0, 100, &d));
  CHECK_OK(tpu_rt_memcpy_h2d(0, d, src, 100));
  CHECK_OK(tpu_rt_memcpy_d2d(0, dst, 0, d, 100));
  CHECK_OK(tpu_rt_memcpy_d2h(0, out, dst, 100));
  CHECK(memcmp(out, src, 100) == 0);
  atomic_int flag = 0;
  CHECK_OK(tpu_rt_queue_enqueue(0, "reentry", task_uses_runtime, &flag, NULL));
  CHECK(atomic_load(&flag) == 1);
  CHECK_ERR(tpu_rt_queue_enqueue_small(0, "aten::bad", task_fail, (void*)(intptr_t)5, NULL), INDEX_ERROR,
            "index 5 is out of bounds");
  CHECK_OK(tpu_rt_synchronize(0));
  h2d_ctx_t h = {d, src, 0};
  uint64_t before = tpu_rt_queue_enqueued_seq(0);
  for (int k = 0; k < 100; ++k) src[k] = (uint8_t)(255 - k);
  CHECK_OK(tpu_rt_queue_enqueue(0, "h2d_inside", task_h2d, &h, NULL)); /* a copy from inside a task: part of it */
  CHECK_OK(tpu_rt_memcpy_d2h(0, out, d, 100));
  CHECK(memcmp(out, src, 100) == 0 && tpu_rt_queue_enqueued_seq(0) == before + 1);
  CHECK_OK(tpu_rt_memcpy_h2d(0, d, src, 100)); /* idle: direct, a queue position of its own */
  CHECK(tpu_rt_queue_enqueued_seq(0) == before + 2 && tpu_rt_queue_completed_seq(0) == before + 2);
  tpu_rt_free(0, d);
  tpu_rt_shutdown();
  unsetenv("TORCH_TPU_LAUNCH_BLOCKING");
}

int main(void) {
  unsetenv("TORCH_TPU_LAUNCH_BLOCKING");
  test_status_dtype_cpu();
  test_env_parsers();
  test_init();
  test_allocator();
  test_allocator_hold();
  test_queue_order_and_errors();
  test_task_reentry();
  test_queue_small();
  test_queue_caller_run_window();
  test_queue_caller_runs_concurrent();
  test_events();
  test_memcpy();
  test_pool();
  test_concurrent_enqueue();
  test_backpressure();
  test_rng();
  test_metrics();
  test_shutdown_and_blocking();
  printf("%d passed, %d failed\n", atomic_load(&g_pass), atomic_load(&g_fail));
  return g_fail ? 1 : 0;
}
