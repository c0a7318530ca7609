/* disk_cache.h — the persistent level of the compilation cache: a content-addressed blob store in a
 * directory (internal; the public face is tpu_cache_* in tpurt.h). Notes for users of the store
 * (registry.c for per-op executables, fused eager for whole graphs): /work/notes/cache_api.md.
 *
 *     uint8_t* blob; size_t n;
 *     if (tpu_disk_cache_get("op", key, key_len, &blob, &n)) {   // valid file for exactly this key
 *       if (decode(blob, n) fails) tpu_disk_cache_reject("op", key, key_len);
 *       free(blob);
 *     } else {
 *       ... compile ...; tpu_disk_cache_put("op", key, key_len, payload, payload_len);
 *     }
 *
 * Configuration (read once, on first use): TORCH_TPU_CACHE_DIR (default $XDG_CACHE_HOME/torch_tpu
 * or ~/.cache/torch_tpu; "0" disables the disk level), TORCH_TPU_CACHE_MAX_BYTES (default 1G).
 *
 * A file is <dir>/<16 hex digits>.tpc, the hash of (namespace, key) seeded with the build identity
 * (library build id + driver + CPU features + format version). It holds a header (magic, format
 * version, build identity, lengths, checksum of namespace + key + payload), the namespace and key
 * (compared in full on load: a hash collision is a miss, never a wrong executable) and the payload.
 * Files are written to a temporary name in the same directory and renamed, so concurrent processes
 * see either no file or a whole one. A file that is short, corrupt, from another format or build,
 * or not owned by this user is rejected (counted, removed) and never returned. When the directory
 * is unusable (unwritable, read-only, full, not a directory) the store turns itself off: one
 * warning, memory-only caching. A size cap evicts the least recently used files (mtime; a hit
 * touches its file).
 *
 * Errors never propagate: the store is an optimization, every failure is a miss (counted). All
 * functions are thread-safe. */
#ifndef TPURT_CACHE_DISK_CACHE_H_
#define TPURT_CACHE_DISK_CACHE_H_

#include "common/common.h"

#define TPU_DISK_CACHE_FORMAT_VERSION 1

/* A cache file: this header, then the namespace (ns_len bytes, no NUL), the key, the payload. */
typedef struct tpu_disk_file_header_s {
  char magic[8];            /* "TPUCACHE" */
  uint32_t format_version;  /* TPU_DISK_CACHE_FORMAT_VERSION */
  uint32_t header_bytes;    /* sizeof(tpu_disk_file_header_t) */
  uint64_t build;           /* build identity (library build id, driver, CPU features, format) */
  uint32_t ns_len, reserved;
  uint64_t key_len, payload_len;
  uint64_t checksum;        /* tpu_disk_cache_checksum(ns, key, payload) */
} tpu_disk_file_header_t;
uint64_t tpu_disk_cache_checksum(const char* ns, size_t ns_len, const void* key, size_t key_len,
                                 const void* payload, size_t payload_len);

/* Reads the configuration once (later calls return the first result); an invalid variable is an
 * INVALID_ARGUMENT naming it (the disk level is then off). */
tpu_status_t tpu_disk_cache_init(void);
int tpu_disk_cache_enabled(void);

/* 1 and a malloc'ed copy of the payload (caller frees) if a valid file for (ns, key) exists;
 * 0 otherwise (miss, or a rejected file). ns: a short name of the key space ("op", "graph"). */
int tpu_disk_cache_get(const char* ns, const void* key, size_t key_len, uint8_t** out_payload, size_t* out_len);
/* Stores payload under (ns, key), replacing any file; then enforces the size cap. */
void tpu_disk_cache_put(const char* ns, const void* key, size_t key_len, const void* payload, size_t len);
/* The payload tpu_disk_cache_get returned for (ns, key) did not decode: counts a rejection and
 * removes the file (the caller compiles and puts a fresh one). Also counts as a miss: the hit it
 * reported is taken back. */
void tpu_disk_cache_reject(const char* ns, const void* key, size_t key_len);
/* Adds the seconds spent turning a disk hit into an executable (decode + driver compile). */
void tpu_disk_cache_add_load_seconds(double s);
/* Removes every cache file (*.tpc) in the directory. */
tpu_status_t tpu_disk_cache_clear(void);

#endif /* TPURT_CACHE_DISK_CACHE_H_ */
