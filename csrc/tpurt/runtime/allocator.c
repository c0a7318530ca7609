/* allocator.c — caching device allocator, one per device, capacity TORCH_TPU_HBM_BYTES.
 *
 * Size classes: requests of at most 256 B round up to 64 B (0-dim tensors: a capturable
 * optimizer's per-parameter step counts took 512 B each), others < 1 MiB to 512 B, larger ones to
 * 1/8 of their power of two
 * (128 KiB steps in [1, 2) MiB, 256 KiB in [2, 4) MiB, ...): at most 12.5% rounding, where
 * whole 2 MiB multiples made a step's peak of 1-2 MiB activations up to 2x the bytes asked
 * for (benchmarks/bench_memory.py). Freed
 * blocks go to a per-class stack (classes up to 1 MiB: an array indexed by class; larger: a hash map
 * keyed by class size) and are reused by later
 * allocations at once: all device work runs in queue order, so work enqueued after the free
 * runs after the work that still reads the block. Returning a cached block to the OS is
 * different: queued work may still read it, so each cached block remembers the queue position
 * at its free ("fence") and is released only once the queue has passed it. Live blocks are
 * tracked in a ptr -> (size, requested) map so unknown pointers are ignored.
 * No metadata is ever written into device blocks (queued work may still read them). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/runtime.h"

#define SMALL_LIMIT (1ull << 20)
#define SMALL_ROUND 512ull
#define TINY_LIMIT 256ull
#define TINY_ROUND 64ull /* == SMALL_ALIGN */
#define LARGE_ROUND (2ull << 20)
#define SMALL_ALIGN 64
#define LARGE_ALIGN 4096
#define SMALL_FIT_PROBES 8 /* a small request may take a block up to 8 classes (and 1/8) larger */

typedef struct { void* ptr; uint64_t fence; } cached_t;
typedef struct { uint64_t size; cached_t* items; uint32_t len, cap; } bucket_t; /* size 0: empty slot */
typedef struct { uintptr_t key; uint64_t size, requested; } live_t;          /* key 0: empty slot */

typedef struct {
  pthread_mutex_t mu;
  uint64_t capacity;
  live_t* live;
  uint64_t live_cap, live_len; /* open addressing, linear probing, backward-shift deletion */
  bucket_t* small; /* SMALL_CLASSES buckets indexed by small_index (classes <= SMALL_LIMIT), NULL until used */
  bucket_t* buckets;
  uint64_t bucket_cap, bucket_len; /* larger classes: open addressing, insert-only until empty/shutdown */
  uint64_t allocated, max_allocated, cached, max_reserved, requested;
  uint64_t num_allocs, num_frees, num_cache_hits, num_ooms;
} dev_alloc_t;

static dev_alloc_t* g_alloc;
static int g_nalloc;

/* A hold (tpu_rt_alloc_hold_begin): blocks the holding thread frees stay private to it (its own
 * allocations take them first) until the hold ends, when they join the shared cache. */
typedef struct { void* ptr; uint64_t size; } held_t;
static _Thread_local struct { int device, n, cap; held_t* b; } tl_hold = {-1, 0, 0, NULL};

static void* hold_take(uint64_t size, uint64_t* out_size) { /* the smallest held block that fits the class rule */
  int best = -1;
  for (int j = 0; j < tl_hold.n; ++j) {
    uint64_t cls = tl_hold.b[j].size;
    if (cls < size || (cls != size && (size >= SMALL_LIMIT || (cls - size) * 8 > size || cls - size > SMALL_FIT_PROBES * SMALL_ROUND)))
      continue;
    if (best < 0 || cls < tl_hold.b[best].size) best = j;
  }
  if (best < 0) return NULL;
  void* p = tl_hold.b[best].ptr;
  *out_size = tl_hold.b[best].size;
  tl_hold.b[best] = tl_hold.b[--tl_hold.n];
  return p;
}

/* executor scratch (common.h): process-wide, lock-free */
static _Atomic int64_t g_scratch_live, g_scratch_peak, g_scratch_cached;
void tpu_rt_scratch_add(int64_t live_delta, int64_t cached_delta) {
  if (cached_delta) atomic_fetch_add_explicit(&g_scratch_cached, cached_delta, memory_order_relaxed);
  if (!live_delta) return;
  int64_t now = atomic_fetch_add_explicit(&g_scratch_live, live_delta, memory_order_relaxed) + live_delta;
  int64_t p = atomic_load_explicit(&g_scratch_peak, memory_order_relaxed);
  while (now > p && !atomic_compare_exchange_weak_explicit(&g_scratch_peak, &p, now, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

/* n >= SMALL_LIMIT rounded up to a multiple of (largest power of two <= n) / 8 */
static inline uint64_t large_class(uint64_t n) {
  uint64_t step = (1ull << (63 - __builtin_clzll(n))) >> 3;
  return (n + step - 1) & ~(step - 1);
}

/* classes of at most SMALL_LIMIT bytes: 64..256 by 64 (0..3), then 512..SMALL_LIMIT by 512 (4..2051) */
#define SMALL_CLASSES (4 + SMALL_LIMIT / SMALL_ROUND)
static inline uint64_t small_index(uint64_t size) {
  return size <= TINY_LIMIT ? size / TINY_ROUND - 1 : 3 + size / SMALL_ROUND;
}

/* live-map home slot: blocks are 64-byte aligned; one multiply (bits 29.. of the product depend on all
 * address bits below them), ~4 instructions where mix64 took ~12 a probe and a shifted entry */
static inline uint64_t ptr_hash(uintptr_t key) {
  return ((uint64_t)(key >> 6) * 0x9e3779b97f4a7c15ull) >> 29;
}

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
  return x;
}

/* ---- live map: ptr -> (size, requested) */

static int64_t live_find(const dev_alloc_t* a, uintptr_t key) {
  if (!a->live_cap) return -1;
  uint64_t mask = a->live_cap - 1;
  for (uint64_t i = ptr_hash(key) & mask;; i = (i + 1) & mask) {
    if (a->live[i].key == key) return (int64_t)i;
    if (a->live[i].key == 0) return -1;
  }
}

static void live_put(live_t* tab, uint64_t cap, live_t e) {
  uint64_t mask = cap - 1, i = ptr_hash(e.key) & mask;
  while (tab[i].key) i = (i + 1) & mask;
  tab[i] = e;
}

static bool live_insert(dev_alloc_t* a, uintptr_t key, uint64_t size, uint64_t requested) {
  if ((a->live_len + 1) * 2 > a->live_cap) {
    uint64_t cap = a->live_cap ? a->live_cap * 2 : 64;
    live_t* tab = calloc(cap, sizeof(live_t));
    if (!tab) return false;
    for (uint64_t i = 0; i < a->live_cap; ++i)
      if (a->live[i].key) live_put(tab, cap, a->live[i]);
    free(a->live);
    a->live = tab;
    a->live_cap = cap;
  }
  live_put(a->live, a->live_cap, (live_t){key, size, requested});
  a->live_len++;
  return true;
}

static void live_erase(dev_alloc_t* a, uint64_t i) {
  uint64_t mask = a->live_cap - 1;
  for (uint64_t j = (i + 1) & mask; a->live[j].key; j = (j + 1) & mask) {
    uint64_t home = ptr_hash(a->live[j].key) & mask;
    /* move j back into the hole at i unless its home lies cyclically in (i, j] */
    if (((j - home) & mask) >= ((j - i) & mask)) { a->live[i] = a->live[j]; i = j; }
  }
  a->live[i].key = 0;
  a->live_len--;
}

/* ---- cache: class size -> stack of free blocks */

static bucket_t* bucket_get_slow(dev_alloc_t* a, uint64_t size, bool create);

/* a class kept in the direct-indexed array: at most SMALL_LIMIT and on its step's grid (an off-grid size
 * such as 576 must not share the 512 class's slot) */
static inline bool small_class(uint64_t size) {
  return size <= SMALL_LIMIT && !(size & (size <= TINY_LIMIT ? TINY_ROUND - 1 : SMALL_ROUND - 1));
}

/* the direct-indexed small classes inline (every tiny op's alloc and free), the rest out of line */
static inline bucket_t* bucket_get(dev_alloc_t* a, uint64_t size, bool create) {
  if (a->small && small_class(size)) return &a->small[small_index(size)];
  return bucket_get_slow(a, size, create);
}

static __attribute__((noinline)) bucket_t* bucket_get_slow(dev_alloc_t* a, uint64_t size, bool create) {
  if (small_class(size)) { /* direct index; each slot's size set once */
    if (!a->small) {
      if (!create) return NULL;
      a->small = calloc(SMALL_CLASSES, sizeof(bucket_t));
      if (!a->small) return NULL;
      for (uint64_t i = 0; i < SMALL_CLASSES; ++i) a->small[i].size = i < 4 ? (i + 1) * TINY_ROUND : (i - 3) * SMALL_ROUND;
    }
    return &a->small[small_index(size)];
  }
  if (a->bucket_cap) {
    uint64_t mask = a->bucket_cap - 1;
    for (uint64_t i = mix64(size) & mask; a->buckets[i].size; i = (i + 1) & mask)
      if (a->buckets[i].size == size) return &a->buckets[i];
  }
  if (!create) return NULL;
  if ((a->bucket_len + 1) * 2 > a->bucket_cap) {
    uint64_t cap = a->bucket_cap ? a->bucket_cap * 2 : 64;
    bucket_t* tab = calloc(cap, sizeof(bucket_t));
    if (!tab) return NULL;
    for (uint64_t i = 0; i < a->bucket_cap; ++i) {
      if (!a->buckets[i].size) continue;
      uint64_t j = mix64(a->buckets[i].size) & (cap - 1);
      while (tab[j].size) j = (j + 1) & (cap - 1);
      tab[j] = a->buckets[i];
    }
    free(a->buckets);
    a->buckets = tab;
    a->bucket_cap = cap;
  }
  uint64_t mask = a->bucket_cap - 1, i = mix64(size) & mask;
  while (a->buckets[i].size) i = (i + 1) & mask;
  a->buckets[i].size = size;
  a->bucket_len++;
  return &a->buckets[i];
}

static bool cache_push(dev_alloc_t* a, void* ptr, uint64_t size, uint64_t fence) {
  bucket_t* b = bucket_get(a, size, true);
  if (!b) return false;
  if (b->len == b->cap) {
    uint32_t cap = b->cap ? b->cap * 2 : 8;
    cached_t* items = realloc(b->items, cap * sizeof(cached_t));
    if (!items) return false;
    b->items = items;
    b->cap = cap;
  }
  b->items[b->len++] = (cached_t){ptr, fence};
  a->cached += size;
  return true;
}

static void* cache_take(dev_alloc_t* a, uint64_t size, uint64_t* out_size) {
  int probes = size < SMALL_LIMIT ? SMALL_FIT_PROBES : 0;
  for (int k = 0; k <= probes; ++k) {
    uint64_t cls = size + (uint64_t)k * SMALL_ROUND;
    if (k && (cls - size) * 8 > size) break;
    bucket_t* b = bucket_get(a, cls, false);
    if (b && b->len) {
      a->cached -= cls;
      *out_size = cls;
      return b->items[--b->len].ptr;  /* LIFO: the warmest block */
    }
  }
  return NULL;
}

/* Frees cached blocks whose fence the queue has passed; returns the largest fence among the
 * blocks still cached (0 if none). */
static uint64_t cache_release(dev_alloc_t* a, uint64_t completed) {
  uint64_t pending = 0;
  uint64_t nsmall = a->small ? SMALL_CLASSES : 0;
  for (uint64_t i = 0; i < nsmall + a->bucket_cap; ++i) {
    bucket_t* b = i < nsmall ? &a->small[i] : &a->buckets[i - nsmall];
    uint32_t keep = 0;
    for (uint32_t j = 0; j < b->len; ++j) {
      if (b->items[j].fence <= completed) { free(b->items[j].ptr); a->cached -= b->size; continue; }
      pending = TPU_MAX(pending, b->items[j].fence);
      b->items[keep++] = b->items[j];
    }
    b->len = keep;
  }
  return pending;
}

/* ---- lifecycle */

tpu_status_t tpu_rt_alloc_init(int num_devices, uint64_t capacity_bytes) {
  g_alloc = calloc((size_t)num_devices, sizeof(dev_alloc_t));
  if (!g_alloc) return TPU_ERR(OUT_OF_MEMORY, "out of host memory creating %d allocators", num_devices);
  for (int d = 0; d < num_devices; ++d) {
    pthread_mutex_init(&g_alloc[d].mu, NULL);
    g_alloc[d].capacity = capacity_bytes;
  }
  g_nalloc = num_devices;
  return TPU_OK;
}

void tpu_rt_alloc_shutdown(void) {
  for (int d = 0; d < g_nalloc; ++d) {
    dev_alloc_t* a = &g_alloc[d];
    cache_release(a, UINT64_MAX);
    for (uint64_t i = 0; a->small && i < SMALL_CLASSES; ++i) free(a->small[i].items);
    for (uint64_t i = 0; i < a->bucket_cap; ++i) free(a->buckets[i].items);
    free(a->small);
    for (uint64_t i = 0; i < a->live_cap; ++i) free((void*)a->live[i].key); /* free(NULL) ok */
    free(a->buckets);
    free(a->live);
    pthread_mutex_destroy(&a->mu);
  }
  free(g_alloc);
  g_alloc = NULL;
  g_nalloc = 0;
}

/* ---- API */

static inline bool fits(const dev_alloc_t* a, uint64_t used, uint64_t size) {
  return used <= a->capacity && size <= a->capacity - used; /* used + size <= capacity, no overflow */
}

static tpu_status_t oom(dev_alloc_t* a, int device, size_t nbytes, const char* why) {
  char req[32], al[32], res[32], cap[32];
  a->num_ooms++;
  tpu_rt_format_bytes(nbytes, req, sizeof(req));
  tpu_rt_format_bytes(a->allocated, al, sizeof(al));
  tpu_rt_format_bytes(a->allocated + a->cached, res, sizeof(res));
  tpu_rt_format_bytes(a->capacity, cap, sizeof(cap));
  return TPU_ERR(OUT_OF_MEMORY, "tpu:%d out of memory: tried to allocate %s; %s allocated, %s reserved, "
                 "%s capacity (TORCH_TPU_HBM_BYTES)%s", device, req, al, res, cap, why);
}

tpu_status_t tpu_rt_malloc(int device, size_t nbytes, void** out_ptr) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  if (nbytes == 0) { *out_ptr = NULL; return TPU_OK; }
  dev_alloc_t* a = &g_alloc[device];
  pthread_mutex_lock(&a->mu);
  if ((uint64_t)nbytes > a->capacity || (uint64_t)nbytes > UINT64_MAX - LARGE_ROUND) {
    tpu_status_t st = oom(a, device, nbytes, "");
    pthread_mutex_unlock(&a->mu);
    return st;
  }
  uint64_t size = nbytes <= TINY_LIMIT  ? (nbytes + TINY_ROUND - 1) & ~(TINY_ROUND - 1)
                  : nbytes < SMALL_LIMIT ? (nbytes + SMALL_ROUND - 1) & ~(SMALL_ROUND - 1)
                                         : large_class((uint64_t)nbytes);
  uint64_t bsize = size;
  void* p = tl_hold.device == device ? hold_take(size, &bsize) : NULL;
  if (p) a->cached -= bsize; /* counted as cached while held */
  if (!p) p = cache_take(a, size, &bsize);
  if (p) {
    a->num_cache_hits++;
  } else {
    if (!fits(a, a->allocated + a->cached, size)) {
      uint64_t pending = cache_release(a, tpu_rt_queue_completed_seq(device));
      if (!fits(a, a->allocated + a->cached, size) && fits(a, a->allocated, size) && pending &&
          tpu_rt_queue_current_device() != device) {
        pthread_mutex_unlock(&a->mu); /* queued work may call the allocator: never wait holding mu */
        tpu_rt_queue_wait(device, pending);
        pthread_mutex_lock(&a->mu);
        cache_release(a, tpu_rt_queue_completed_seq(device));
      }
    }
    if (!fits(a, a->allocated + a->cached, size)) {
      tpu_status_t st = oom(a, device, nbytes, "");
      pthread_mutex_unlock(&a->mu);
      return st;
    }
    size_t align = size < SMALL_LIMIT ? SMALL_ALIGN : LARGE_ALIGN;
    p = aligned_alloc(align, size);
    if (!p && a->cached) {
      cache_release(a, tpu_rt_queue_completed_seq(device));
      p = aligned_alloc(align, size);
    }
    if (!p) {
      tpu_status_t st = oom(a, device, nbytes, "; the host could not provide the memory");
      pthread_mutex_unlock(&a->mu);
      return st;
    }
  }
  if (!live_insert(a, (uintptr_t)p, bsize, nbytes)) {
    free(p); /* block is no longer counted as cached */
    tpu_status_t st = oom(a, device, nbytes, "; no host memory for the block table");
    pthread_mutex_unlock(&a->mu);
    return st;
  }
  a->allocated += bsize;
  a->requested += nbytes;
  a->num_allocs++;
  a->max_allocated = TPU_MAX(a->max_allocated, a->allocated);
  a->max_reserved = TPU_MAX(a->max_reserved, a->allocated + a->cached);
  pthread_mutex_unlock(&a->mu);
  *out_ptr = p;
  return TPU_OK;
}

void tpu_rt_free(int device, void* ptr) {
  if (!ptr || device < 0 || device >= g_nalloc) return; /* never initialized: cannot be ours */
  dev_alloc_t* a = &g_alloc[device];
  uint64_t fence = tpu_rt_queue_enqueued_seq(device);
  pthread_mutex_lock(&a->mu);
  int64_t i = live_find(a, (uintptr_t)ptr);
  if (i >= 0) {
    live_t e = a->live[i];
    /* recorded fused-eager ops may still read the block: the fence is the task that runs them */
    if (__builtin_expect(atomic_load_explicit(&tpu_rt_traces_pending, memory_order_acquire) != 0, 0)) {
      tpu_rt_free_hook_fn hook = tpu_rt_free_hook;
      if (hook && hook(device, (uintptr_t)ptr, (uintptr_t)ptr + e.size)) fence++;
    }
    live_erase(a, (uint64_t)i);
    a->allocated -= e.size;
    a->requested -= e.requested;
    a->num_frees++;
    if (tl_hold.device == device) { /* never shared before the hold ends (else: keep it live) */
      if (tl_hold.n == tl_hold.cap) {
        int cap = tl_hold.cap ? 2 * tl_hold.cap : 64;
        held_t* b = realloc(tl_hold.b, (size_t)cap * sizeof(held_t));
        if (!b) {
          live_insert(a, e.key, e.size, e.requested); /* cannot fail: the erase made room */
          a->allocated += e.size; a->requested += e.requested; a->num_frees--;
          pthread_mutex_unlock(&a->mu);
          return;
        }
        tl_hold.b = b; tl_hold.cap = cap;
      }
      tl_hold.b[tl_hold.n++] = (held_t){ptr, e.size};
      a->cached += e.size;
      pthread_mutex_unlock(&a->mu);
      return;
    }
    if (!cache_push(a, ptr, e.size, fence)) { /* no host memory to cache it: release when safe */
      if (tpu_rt_queue_current_device() == device) { /* cannot wait here: keep it live */
        live_insert(a, e.key, e.size, e.requested); /* cannot fail: the erase made room */
        a->allocated += e.size;
        a->requested += e.requested;
        a->num_frees--;
        pthread_mutex_unlock(&a->mu);
        return;
      }
      pthread_mutex_unlock(&a->mu);
      tpu_rt_queue_wait(device, fence);
      free(ptr);
      return;
    }
  }
  pthread_mutex_unlock(&a->mu);
}

tpu_status_t tpu_rt_alloc_hold_begin(int device) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  if (tl_hold.device >= 0) return TPU_ERR(INVALID_ARGUMENT, "tpu_rt_alloc_hold_begin: this thread already holds tpu:%d", tl_hold.device);
  tl_hold.device = device;
  tl_hold.n = 0;
  return TPU_OK;
}

void tpu_rt_alloc_hold_end(int device) {
  if (device < 0 || device >= g_nalloc || tl_hold.device != device) return;
  dev_alloc_t* a = &g_alloc[device];
  uint64_t fence = tpu_rt_queue_enqueued_seq(device); /* the work enqueued during the hold may read them */
  pthread_mutex_lock(&a->mu);
  for (int j = 0; j < tl_hold.n; ++j) {
    a->cached -= tl_hold.b[j].size;
    if (!cache_push(a, tl_hold.b[j].ptr, tl_hold.b[j].size, fence)) { /* no host memory for the cache entry */
      live_insert(a, (uintptr_t)tl_hold.b[j].ptr, tl_hold.b[j].size, 0); /* stays live (leaked) rather than unsafe */
      a->allocated += tl_hold.b[j].size;
    }
  }
  tl_hold.n = 0;
  tl_hold.device = -1;
  pthread_mutex_unlock(&a->mu);
  free(tl_hold.b);
  tl_hold.b = NULL; tl_hold.cap = 0;
}

tpu_status_t tpu_rt_empty_cache(int device) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  tpu_rt_queue_wait(device, tpu_rt_queue_enqueued_seq(device));
  dev_alloc_t* a = &g_alloc[device];
  pthread_mutex_lock(&a->mu);
  cache_release(a, tpu_rt_queue_completed_seq(device));
  pthread_mutex_unlock(&a->mu);
  return TPU_OK;
}

tpu_status_t tpu_rt_memory_stats(int device, tpu_rt_memory_stats_t* out_stats) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  dev_alloc_t* a = &g_alloc[device];
  pthread_mutex_lock(&a->mu);
  *out_stats = (tpu_rt_memory_stats_t){
      .allocated_bytes = a->allocated, .max_allocated_bytes = a->max_allocated,
      .reserved_bytes = a->allocated + a->cached, .max_reserved_bytes = a->max_reserved,
      .requested_bytes = a->requested, .capacity_bytes = a->capacity,
      .num_allocs = a->num_allocs, .num_frees = a->num_frees,
      .num_cache_hits = a->num_cache_hits, .num_ooms = a->num_ooms,
      .scratch_bytes = (uint64_t)TPU_MAX(0, atomic_load(&g_scratch_live)),
      .max_scratch_bytes = (uint64_t)TPU_MAX(0, atomic_load(&g_scratch_peak)),
      .scratch_cached_bytes = (uint64_t)TPU_MAX(0, atomic_load(&g_scratch_cached)),
  };
  pthread_mutex_unlock(&a->mu);
  return TPU_OK;
}

tpu_status_t tpu_rt_reset_peak_memory_stats(int device) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  dev_alloc_t* a = &g_alloc[device];
  pthread_mutex_lock(&a->mu);
  a->max_allocated = a->allocated;
  a->max_reserved = a->allocated + a->cached;
  pthread_mutex_unlock(&a->mu);
  atomic_store(&g_scratch_peak, atomic_load(&g_scratch_live));
  return TPU_OK;
}
