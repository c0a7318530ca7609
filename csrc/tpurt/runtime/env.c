/* env.c — TORCH_TPU_* runtime configuration: strict parsers with messages that name the
 * variable, the bad value and what is accepted. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "runtime/runtime.h"

#define TPU_BYTES_HINT \
  "a positive byte count, optionally with a K, M, G or T suffix (base 1024), e.g. 16G"

static const char* skip_blanks(const char* s) {
  while (*s && isspace((unsigned char)*s)) ++s;
  return s;
}

tpu_status_t tpu_rt_env_parse_int(const char* var, const char* value, int64_t lo, int64_t hi,
                                  int64_t* out_value) {
  const char* s = value ? skip_blanks(value) : "";
  char* end = NULL;
  errno = 0;
  long long v = (*s == '-' || *s == '+' || isdigit((unsigned char)*s)) ? strtoll(s, &end, 10) : 0;
  bool ok = end && end != s && errno == 0 && *skip_blanks(end) == '\0' && v >= lo && v <= hi;
  if (!ok)
    return TPU_ERR(INVALID_ARGUMENT, "%s='%s' is invalid: expected an integer in [%lld, %lld]", var,
                   value ? value : "", (long long)lo, (long long)hi);
  *out_value = v;
  return TPU_OK;
}

tpu_status_t tpu_rt_env_parse_bytes(const char* var, const char* value, uint64_t* out_value) {
  const char* s = value ? skip_blanks(value) : "";
  uint64_t v = 0;
  bool ok = isdigit((unsigned char)*s), overflow = false;
  for (; isdigit((unsigned char)*s); ++s) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) overflow = true;
    v = v * 10 + d;
  }
  s = skip_blanks(s);
  int shift = 0;
  switch (toupper((unsigned char)*s)) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: break;
  }
  if (shift) {
    ++s;
    if (*s == 'i' || *s == 'I') { ++s; if (toupper((unsigned char)*s) != 'B') ok = false; }
    if (toupper((unsigned char)*s) == 'B') ++s;
  } else if (toupper((unsigned char)*s) == 'B') {
    ++s;
  }
  if (*skip_blanks(s) != '\0') ok = false;
  if (shift && v > (UINT64_MAX >> shift)) overflow = true;
  v <<= shift;
  if (!ok || overflow || v == 0)
    return TPU_ERR(INVALID_ARGUMENT, "%s='%s' is invalid: expected %s%s", var, value ? value : "",
                   TPU_BYTES_HINT, overflow ? " (value overflows 64 bits)" : "");
  *out_value = v;
  return TPU_OK;
}

tpu_status_t tpu_rt_env_parse_bool(const char* var, const char* value, bool* out_value) {
  const char* s = value ? skip_blanks(value) : "";
  bool ok = (*s == '0' || *s == '1') && *skip_blanks(s + 1) == '\0';
  if (!ok) return TPU_ERR(INVALID_ARGUMENT, "%s='%s' is invalid: expected 0 or 1", var, value ? value : "");
  *out_value = *s == '1';
  return TPU_OK;
}

uint64_t tpu_rt_default_hbm_bytes(int num_devices) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t ram = (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : (16ull << 30);
  uint64_t per = ram / 2 / (uint64_t)(num_devices > 0 ? num_devices : 1);
  return per ? per : 1;
}

int tpu_rt_default_num_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int a = CPU_COUNT(&set);
    if (a > 0 && (n <= 0 || a < n)) n = a;
  }
  if (n < 1) n = 1;
  if (n > TPU_RT_MAX_THREADS) n = TPU_RT_MAX_THREADS;
  return (int)n;
}

/* Unset or empty means "use the default". */
static const char* env_get(const char* var) {
  const char* v = getenv(var);
  return (v && *skip_blanks(v)) ? v : NULL;
}

int tpu_rt_env_switch(int* cell, const char* var, int dflt) {
  int v = __atomic_load_n(cell, __ATOMIC_RELAXED);
  if (v >= 0) return v;
  const char* s = env_get(var);
  int expected = -1;
  (void)__atomic_compare_exchange_n(cell, &expected, s ? *skip_blanks(s) != '0' : (dflt != 0), 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
  return __atomic_load_n(cell, __ATOMIC_RELAXED);
}
int tpu_rt_env_switch_set(int* cell, const char* var, int dflt, int on) {
  int old = tpu_rt_env_switch(cell, var, dflt);
  __atomic_store_n(cell, on ? 1 : 0, __ATOMIC_RELAXED);
  return old;
}

tpu_status_t tpu_rt_config_from_env(tpu_rt_config_t* out_config) {
  tpu_rt_config_t c = {.num_devices = 1, .launch_blocking = false, .pool_wait_us = 1000};
  int64_t i;
  const char* v;
  if ((v = env_get("TORCH_TPU_NUM_DEVICES"))) {
    TPU_RETURN_IF_ERROR(tpu_rt_env_parse_int("TORCH_TPU_NUM_DEVICES", v, 1, TPU_RT_MAX_DEVICES, &i));
    c.num_devices = (int)i;
  }
  if ((v = env_get("TORCH_TPU_HBM_BYTES"))) {
    TPU_RETURN_IF_ERROR(tpu_rt_env_parse_bytes("TORCH_TPU_HBM_BYTES", v, &c.hbm_bytes));
  } else {
    c.hbm_bytes = tpu_rt_default_hbm_bytes(c.num_devices);
  }
  if ((v = env_get("TORCH_TPU_LAUNCH_BLOCKING")))
    TPU_RETURN_IF_ERROR(tpu_rt_env_parse_bool("TORCH_TPU_LAUNCH_BLOCKING", v, &c.launch_blocking));
  if ((v = env_get("TORCH_TPU_NUM_THREADS"))) {
    TPU_RETURN_IF_ERROR(tpu_rt_env_parse_int("TORCH_TPU_NUM_THREADS", v, 1, TPU_RT_MAX_THREADS, &i));
    c.num_threads = (int)i;
  } else {
    c.num_threads = tpu_rt_default_num_threads();
  }
  if ((v = env_get("TORCH_TPU_POOL_WAIT_US"))) {
    TPU_RETURN_IF_ERROR(tpu_rt_env_parse_int("TORCH_TPU_POOL_WAIT_US", v, 0, 100000, &i));
    c.pool_wait_us = (int)i;
  }
  *out_config = c;
  return TPU_OK;
}
