/* hash.h — a small 64-bit non-cryptographic hash for cache file names and checksums (internal).
 *
 * Why our own: xxHash (the library DESIGN.md suggests) is a system package (libxxhash-dev) that `make`
 * cannot install on a machine where the user is not root, and the build must work on a fresh machine.
 * This hash needs no dependency: each 8-byte word goes through murmur3's 64-bit finalizer (full
 * avalanche) and is folded into the state with a rotate and multiply; the length and seed enter at
 * both ends. Its quality is checked in tests/test_cache.c (single-bit flips, lengths, avalanche).
 * Collisions never cause wrong results: every cache entry stores and compares its full key.
 *
 *     uint64_t h = tpu_hash64(key, key_len, 0);      // file name
 *     uint64_t c = tpu_hash64(data, n, TPU_HASH_SEED_CHECKSUM);
 *
 * Pure function; thread-safe. */
#ifndef TPURT_CACHE_HASH_H_
#define TPURT_CACHE_HASH_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TPU_HASH_SEED_CHECKSUM 0x5bd1e9955bd1e995ull

static inline uint64_t tpu_hash_fmix64(uint64_t h) {
  h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}
static inline uint64_t tpu_hash_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Streaming: h = begin(seed); h = step(h, piece) per piece; end(h, total length). Pieces whose length
 * is not a multiple of 8 hash differently from their concatenation (use the same split everywhere). */
static inline uint64_t tpu_hash64_step(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w; memcpy(&w, p + i, 8);
    h ^= tpu_hash_fmix64(w ^ 0x9e3779b97f4a7c15ull);
    h = tpu_hash_rotl64(h, 27) * 0x9fb21c651e98df25ull + 0x52dce729u;
  }
  if (i < n) {
    uint64_t w = 0;
    memcpy(&w, p + i, n - i);
    h ^= tpu_hash_fmix64(w ^ ((uint64_t)(n - i) << 56) ^ 0x9e3779b97f4a7c15ull);
    h = tpu_hash_rotl64(h, 27) * 0x9fb21c651e98df25ull + 0x52dce729u;
  }
  return h;
}
static inline uint64_t tpu_hash64_begin(uint64_t seed) { return tpu_hash_fmix64(seed ^ 0x243f6a8885a308d3ull); }
static inline uint64_t tpu_hash64_end(uint64_t h, uint64_t total_len) {
  return tpu_hash_fmix64(h ^ (total_len * 0x9e3779b97f4a7c15ull));
}
static inline uint64_t tpu_hash64(const void* data, size_t n, uint64_t seed) {
  return tpu_hash64_end(tpu_hash64_step(tpu_hash64_begin(seed), data, n), n);
}

/* In-memory only (never stored: hash tables whose full keys are compared on lookup): one multiply-rotate
 * per word where tpu_hash64 mixes every word through fmix64 (~12 instructions a word). Streaming like the
 * above: h = tpu_hash_fast_step(h, piece) per piece (a short tail is zero-padded), then tpu_hash_fmix64. */
static inline uint64_t tpu_hash_fast_step(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w; memcpy(&w, p + i, 8);
    h = tpu_hash_rotl64((h ^ w) * 0x9fb21c651e98df25ull, 29);
  }
  if (i < n) {
    uint64_t w = 0; memcpy(&w, p + i, n - i);
    h = tpu_hash_rotl64((h ^ w) * 0x9fb21c651e98df25ull, 29);
  }
  return h;
}
static inline uint64_t tpu_hash_fast(const void* data, size_t n) {
  return tpu_hash_fmix64(tpu_hash_fast_step(0x243f6a8885a308d3ull ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull), data, n));
}

#endif /* TPURT_CACHE_HASH_H_ */
