/* status.c — tpu_status_t: a heap record (code + message); NULL is OK. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/runtime.h"

struct tpu_status_s {
  tpu_status_code_t code;
  const char* message; /* points at text[] or, for the static fallback, a literal */
  char text[];
};

/* Returned when the status itself cannot be allocated; never freed. */
static struct tpu_status_s g_status_nomem = {
    TPU_STATUS_OUT_OF_MEMORY, "out of host memory (while creating an error status)"};

tpu_status_t tpu_status_make(tpu_status_code_t code, const char* fmt, ...) {
  if (code == TPU_STATUS_OK) return TPU_OK;
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int len = vsnprintf(NULL, 0, fmt ? fmt : "", ap);
  va_end(ap);
  if (len < 0) len = 0;
  struct tpu_status_s* s = malloc(sizeof(*s) + (size_t)len + 1);
  if (!s) { va_end(ap2); return &g_status_nomem; }
  s->code = code;
  s->text[0] = '\0';
  vsnprintf(s->text, (size_t)len + 1, fmt ? fmt : "", ap2);
  va_end(ap2);
  s->message = s->text;
  return s;
}

tpu_status_code_t tpu_status_code(tpu_status_t status) {
  return status ? status->code : TPU_STATUS_OK;
}

const char* tpu_status_message(tpu_status_t status) { return status ? status->message : ""; }

void tpu_status_free(tpu_status_t status) {
  if (status && status != &g_status_nomem) free(status);
}

static const char* const k_code_names[] = {
    "OK", "INVALID_ARGUMENT", "TYPE_ERROR", "INDEX_ERROR", "OUT_OF_MEMORY", "UNSUPPORTED", "INTERNAL", "LINALG_ERROR",
};
_Static_assert(sizeof(k_code_names) / sizeof(k_code_names[0]) == TPU_STATUS_CODE_COUNT,
               "k_code_names out of sync with tpu_status_code_t");

const char* tpu_status_code_name(tpu_status_code_t code) {
  return (unsigned)code < TPU_STATUS_CODE_COUNT ? k_code_names[code] : "UNKNOWN";
}

/* ---- small helpers shared by the runtime */

void tpu_rt_format_bytes(uint64_t nbytes, char* buf, size_t buf_len) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (nbytes < 1024) { snprintf(buf, buf_len, "%llu B", (unsigned long long)nbytes); return; }
  double v = (double)nbytes / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u + 1 < TPU_ARRAY_LEN(units)) { v /= 1024.0; ++u; }
  snprintf(buf, buf_len, "%.2f %s", v, units[u]);
}

uint64_t tpu_rt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
