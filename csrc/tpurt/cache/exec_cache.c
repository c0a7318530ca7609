/* exec_cache.c — chained hash table + LRU list of executables. */
#include <pthread.h>
#include <stdlib.h>

#include "cache/exec_cache.h"

#define NBUCKETS 4096
#define CAPACITY 4096

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_exec_entry_t* g_buckets[NBUCKETS];
static tpu_exec_entry_t *g_head, *g_tail; /* most recent first */
static size_t g_count;

static void entry_free(tpu_exec_entry_t* e) {
  tpu_host_exe_free(e->exe);
  free(e->key);
  free(e);
}
void tpu_exec_entry_release(tpu_exec_entry_t* e) {
  if (e && __atomic_sub_fetch(&e->refcount, 1, __ATOMIC_ACQ_REL) == 0) entry_free(e);
}
static void lru_unlink(tpu_exec_entry_t* e) {
  if (e->lru_prev) e->lru_prev->lru_next = e->lru_next; else g_head = e->lru_next;
  if (e->lru_next) e->lru_next->lru_prev = e->lru_prev; else g_tail = e->lru_prev;
  e->lru_prev = e->lru_next = NULL;
}
static void lru_push_front(tpu_exec_entry_t* e) {
  e->lru_prev = NULL; e->lru_next = g_head;
  if (g_head) g_head->lru_prev = e; else g_tail = e;
  g_head = e;
}
static tpu_exec_entry_t* find(uint64_t hash, const uint8_t* key, size_t len) {
  for (tpu_exec_entry_t* e = g_buckets[hash % NBUCKETS]; e; e = e->chain)
    if (e->hash == hash && e->key_len == len && !memcmp(e->key, key, len)) return e;
  return NULL;
}
static void remove_entry(tpu_exec_entry_t* e) {
  tpu_exec_entry_t** p = &g_buckets[e->hash % NBUCKETS];
  while (*p && *p != e) p = &(*p)->chain;
  if (*p) *p = e->chain;
  lru_unlink(e);
  g_count--;
  tpu_exec_entry_release(e); /* the cache's own reference */
}

tpu_exec_entry_t* tpu_exec_cache_lookup(uint64_t hash, const uint8_t* key, size_t len) {
  pthread_mutex_lock(&g_mu);
  tpu_exec_entry_t* e = find(hash, key, len);
  if (e) {
    if (g_head != e) { lru_unlink(e); lru_push_front(e); }
    __atomic_add_fetch(&e->refcount, 1, __ATOMIC_ACQ_REL);
  }
  pthread_mutex_unlock(&g_mu);
  return e;
}
tpu_exec_entry_t* tpu_exec_cache_insert(tpu_exec_entry_t* e) {
  pthread_mutex_lock(&g_mu);
  tpu_exec_entry_t* old = find(e->hash, e->key, e->key_len);
  if (old) {
    __atomic_add_fetch(&old->refcount, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&g_mu);
    entry_free(e);
    return old;
  }
  e->refcount = 2; /* cache + caller */
  e->chain = g_buckets[e->hash % NBUCKETS];
  g_buckets[e->hash % NBUCKETS] = e;
  lru_push_front(e);
  g_count++;
  while (g_count > CAPACITY && g_tail && g_tail != e) remove_entry(g_tail);
  tpu_metrics_set_cache_entries(g_count);
  pthread_mutex_unlock(&g_mu);
  return e;
}
static uint64_t g_generation; /* atomic; bumped by clear so per-thread memos drop their entries */
uint64_t tpu_exec_cache_generation(void) { return __atomic_load_n(&g_generation, __ATOMIC_ACQUIRE); }
void tpu_exec_cache_clear(void) {
  __atomic_add_fetch(&g_generation, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&g_mu);
  while (g_head) remove_entry(g_head);
  tpu_metrics_set_cache_entries(0);
  pthread_mutex_unlock(&g_mu);
}
size_t tpu_exec_cache_size(void) {
  pthread_mutex_lock(&g_mu);
  size_t n = g_count;
  pthread_mutex_unlock(&g_mu);
  return n;
}
