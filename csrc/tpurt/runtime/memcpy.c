/* memcpy.c — host<->device and device<->device copies, ordered with the device queues.
 * h2d: direct copy if the queue is idle (run on the caller as the queue's next task), else a staged
 * snapshot copied by a queued task. d2h: synchronize (surfacing queued errors), then copy.
 * d2d: same device -> queued memmove; across devices -> synchronize both, then copy. */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

typedef struct {
  void* dst;
  const void* src; /* direct copy only */
  size_t nbytes;
  char data[];     /* staged snapshot (h2d) */
} copy_ctx_t;

static tpu_status_t copy_task(void* ctx) {
  copy_ctx_t* c = ctx;
  memmove(c->dst, c->src, c->nbytes);
  return TPU_OK;
}

static tpu_status_t check_args(const char* what, void* dst, const void* src, size_t nbytes) {
  if (nbytes && (!dst || !src))
    return TPU_ERR(INVALID_ARGUMENT, "%s: NULL %s pointer for a %zu-byte copy", what,
                   dst ? "source" : "destination", nbytes);
  return TPU_OK;
}

tpu_status_t tpu_rt_memcpy_h2d(int device, void* dst, const void* src, size_t nbytes) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  TPU_RETURN_IF_ERROR(check_args("memcpy_h2d", dst, src, nbytes));
  if (nbytes == 0) return TPU_OK;
  copy_ctx_t direct = {.dst = dst, .src = src, .nbytes = nbytes};
  if (tpu_rt_queue_run_if_idle(device, "memcpy_h2d", copy_task, &direct)) return TPU_OK;
  copy_ctx_t* c = malloc(sizeof(copy_ctx_t) + nbytes);
  if (!c)
    return TPU_ERR(OUT_OF_MEMORY, "memcpy_h2d: out of host memory staging %zu bytes for tpu:%d", nbytes, device);
  memcpy(c->data, src, nbytes);
  c->dst = dst;
  c->src = c->data;
  c->nbytes = nbytes;
  return tpu_rt_queue_enqueue(device, "memcpy_h2d", copy_task, c, free);
}

tpu_status_t tpu_rt_memcpy_d2h(int device, void* dst, const void* src, size_t nbytes) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(device));
  TPU_RETURN_IF_ERROR(check_args("memcpy_d2h", dst, src, nbytes));
  TPU_RETURN_IF_ERROR(tpu_rt_synchronize(device));
  if (nbytes) memcpy(dst, src, nbytes);
  return TPU_OK;
}

tpu_status_t tpu_rt_memcpy_d2d(int dst_device, void* dst, int src_device, const void* src,
                               size_t nbytes) {
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(dst_device));
  TPU_RETURN_IF_ERROR(tpu_rt_device_check(src_device));
  TPU_RETURN_IF_ERROR(check_args("memcpy_d2d", dst, src, nbytes));
  if (nbytes == 0) return TPU_OK;
  if (dst_device == src_device) {
    copy_ctx_t* c = malloc(sizeof(copy_ctx_t));
    if (!c) return TPU_ERR(OUT_OF_MEMORY, "memcpy_d2d: out of host memory");
    c->dst = dst;
    c->src = src;
    c->nbytes = nbytes;
    return tpu_rt_queue_enqueue(dst_device, "memcpy_d2d", copy_task, c, free);
  }
  TPU_RETURN_IF_ERROR(tpu_rt_synchronize(src_device));
  TPU_RETURN_IF_ERROR(tpu_rt_synchronize(dst_device));
  memcpy(dst, src, nbytes);
  return TPU_OK;
}
