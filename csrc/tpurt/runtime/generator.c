/* generator.c — Philox4x32-10 generator state (seed, offset) per device, and the block
 * function itself (Random123's philox4x32 with 10 rounds). */
#include <pthread.h>
#include <stdlib.h>

#include "runtime/runtime.h"

#define TPU_DEFAULT_SEED 67280421310721ull /* PyTorch's default_rng_seed_val */

struct tpu_rt_generator_s {
  pthread_mutex_t mu;
  uint64_t seed, offset;
  int device;
  bool is_default;
};

static tpu_rt_generator_t* g_defaults; /* one per device */
static int g_ndefaults;

static void gen_init(tpu_rt_generator_t* g, int device, uint64_t seed, bool is_default) {
  pthread_mutex_init(&g->mu, NULL);
  g->seed = seed;
  g->offset = 0;
  g->device = device;
  g->is_default = is_default;
}

tpu_status_t tpu_rt_generators_init(int num_devices) {
  g_defaults = calloc((size_t)num_devices, sizeof(tpu_rt_generator_t));
  if (!g_defaults) return TPU_ERR(OUT_OF_MEMORY, "out of host memory creating default generators");
  for (int d = 0; d < num_devices; ++d) gen_init(&g_defaults[d], d, TPU_DEFAULT_SEED, true);
  g_ndefaults = num_devices;
  return TPU_OK;
}

void tpu_rt_generators_shutdown(void) {
  for (int d = 0; d < g_ndefaults; ++d) pthread_mutex_destroy(&g_defaults[d].mu);
  free(g_defaults);
  g_defaults = NULL;
  g_ndefaults = 0;
}

tpu_status_t tpu_rt_generator_create(int device, uint64_t seed, tpu_rt_generator_t** out_gen) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  tpu_rt_generator_t* g = malloc(sizeof(*g));
  if (!g) return TPU_ERR(OUT_OF_MEMORY, "out of host memory creating a generator for tpu:%d", device);
  gen_init(g, device, seed, false);
  *out_gen = g;
  return TPU_OK;
}

void tpu_rt_generator_destroy(tpu_rt_generator_t* gen) {
  if (!gen || gen->is_default) return;
  pthread_mutex_destroy(&gen->mu);
  free(gen);
}

tpu_rt_generator_t* tpu_rt_default_generator(int device) {
  tpu_status_t st = tpu_rt_device_check(device);
  if (st) { tpu_status_free(st); return NULL; }
  return &g_defaults[device];
}

void tpu_rt_generator_set_seed(tpu_rt_generator_t* gen, uint64_t seed) {
  if (!gen) return;
  pthread_mutex_lock(&gen->mu);
  gen->seed = seed;
  gen->offset = 0;
  pthread_mutex_unlock(&gen->mu);
}

uint64_t tpu_rt_generator_seed(const tpu_rt_generator_t* gen) {
  if (!gen) return 0;
  tpu_rt_generator_t* g = (tpu_rt_generator_t*)gen; /* the mutex is not part of the value */
  pthread_mutex_lock(&g->mu);
  uint64_t v = g->seed;
  pthread_mutex_unlock(&g->mu);
  return v;
}

void tpu_rt_generator_set_offset(tpu_rt_generator_t* gen, uint64_t offset) {
  if (!gen) return;
  pthread_mutex_lock(&gen->mu);
  gen->offset = offset;
  pthread_mutex_unlock(&gen->mu);
}

uint64_t tpu_rt_generator_offset(const tpu_rt_generator_t* gen) {
  if (!gen) return 0;
  tpu_rt_generator_t* g = (tpu_rt_generator_t*)gen;
  pthread_mutex_lock(&g->mu);
  uint64_t v = g->offset;
  pthread_mutex_unlock(&g->mu);
  return v;
}

void tpu_rt_generator_reserve(tpu_rt_generator_t* gen, uint64_t increment, uint64_t* out_seed,
                              uint64_t* out_offset) {
  if (!gen) return;
  pthread_mutex_lock(&gen->mu);
  if (out_seed) *out_seed = gen->seed;
  if (out_offset) *out_offset = gen->offset;
  gen->offset += increment;
  pthread_mutex_unlock(&gen->mu);
}

/* ---- Philox4x32-10 */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void tpu_philox4x32_10(uint64_t seed, uint64_t counter_hi_offset, uint64_t counter_lo,
                       uint32_t out[4]) {
  uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
  uint32_t c2 = (uint32_t)counter_hi_offset, c3 = (uint32_t)(counter_hi_offset >> 32);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r) { k0 += PHILOX_W0; k1 += PHILOX_W1; }
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0; c1 = (uint32_t)p1; c2 = n2; c3 = (uint32_t)p0;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
