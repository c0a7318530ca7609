/* exec_cache.h — in-process executable cache keyed by op signature (internal).
 * Entries are reference counted: a queued task keeps its executable alive even
 * if the LRU evicts it meanwhile. Thread-safe. */
#ifndef TPURT_EXEC_CACHE_H_
#define TPURT_EXEC_CACHE_H_

#include "drivers/host/host.h"
#include "lower/lower.h"

typedef struct tpu_exec_entry_s {
  uint64_t hash;
  size_t key_len;
  uint8_t* key;
  tpu_host_exe_t* exe;
  int n_tbind, n_sbind, gen_arg, n_outputs;
  uint64_t rng_increment;
  tpu_tensor_bind_t tbind[TPU_LOWER_MAX_PARAMS];
  tpu_scalar_bind_t sbind[TPU_LOWER_MAX_SCALARS];
  int n_checks;
  tpu_scalar_check_t checks[TPU_LOWER_MAX_CHECKS];
  int n_arg_outs;
  int16_t arg_outs[TPU_LOWER_MAX_ARG_OUTS];
  int refcount; /* atomic */
  int small;    /* atomic; registry.c's entry_small: 0 not yet known, 1 small graph, 2 not */
  int disk_later; /* atomic; a size made from a shape family's templates, not written yet: written at its next call */
  struct tpu_exec_entry_s *lru_prev, *lru_next, *chain;
} tpu_exec_entry_t;

/* Returns a retained entry or NULL. */
tpu_exec_entry_t* tpu_exec_cache_lookup(uint64_t hash, const uint8_t* key, size_t key_len);
/* Inserts (taking ownership of e; the cache copies nothing) and returns it retained.
 * If an equal key raced in first, e is freed and the existing entry returned. */
tpu_exec_entry_t* tpu_exec_cache_insert(tpu_exec_entry_t* e);
void tpu_exec_entry_release(tpu_exec_entry_t* e);
void tpu_exec_cache_clear(void);
/* Changes on every clear: callers that memoize entries (registry.c) drop them when it moves. */
uint64_t tpu_exec_cache_generation(void);
size_t tpu_exec_cache_size(void);

#endif /* TPURT_EXEC_CACHE_H_ */
