/* maxpool.c — fast paths of the max-pooling kernels (see maxpool.h): the window argmax of 2-d
 * pools with fixed windows over contiguous planes (POOL_ARGMAX; pool.c keeps the general kernel)
 * and the row gather / scatter-add that max-pool forward / backward lower to (GATHER / SCATTER;
 * kernels.c keeps the general kernels). All give the general kernels' results bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/maxpool.h"

/* ---- window argmax, 2-d, fixed windows: one task per (batch row, output row) */
typedef struct {
  const char* x;
  int64_t* out;
  int dt, esz;
  int64_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t xb, ob, ohs; /* strides (elements) of a batch row of x / out, of an output row */
  int64_t* wlo;        /* (OW, 2): first column, past-the-end column of each output column's window */
} mp_job_t;

/* Output row oh of batch row b. Input row h of the window is widened once into sw phase rows, padded
 * with -inf: phase p, entry i = x[h, i sw + p - pw], so tap kc of output column ow reads phase (kc dw) % sw at
 * ow + (kc dw) / sw, and 4 consecutive output columns are one vector load. A -inf (padding, or a window
 * clipped at the right) is never taken: the comparisons and the first-max / last-NaN rule are the general
 * kernel's, done 4 columns at a time without branches (random data mispredicts a branch per tap). */
typedef float mp_v4f __attribute__((vector_size(16)));
typedef int32_t mp_v4i __attribute__((vector_size(16)));

static void mp_widen(const mp_job_t* J, const char* xrow, float* ph, int64_t plen) {
  for (int64_t p = 0; p < J->sw; ++p) {
    float* d = ph + p * plen;
    for (int64_t i = 0; i < plen; ++i) {
      const int64_t c = i * J->sw + p - J->pw;
      float v = -INFINITY;
      if (c >= 0 && c < J->W) {
        if (J->dt == TPU_DTYPE_F32) v = ((const float*)(const void*)xrow)[c];
        else if (J->dt == TPU_DTYPE_BF16) v = tpu_bf16_to_f32(((const uint16_t*)(const void*)xrow)[c]);
        else v = tpu_f16_to_f32(((const uint16_t*)(const void*)xrow)[c]);
      }
      d[i] = v;
    }
  }
}

static void mp_worker(void* ctx, int64_t begin, int64_t end) {
  const mp_job_t* J = ctx;
  const int64_t OWv = (J->OW + 3) / 4 * 4, plen = OWv + ((J->kw - 1) * J->dw) / J->sw + 1;
  float* buf = malloc((size_t)(J->sw * plen + 2 * OWv) * sizeof(float));
  if (!buf) { /* no scratch: the same rule element by element */
    for (int64_t t = begin; t < end; ++t) {
      const int64_t b = t / J->OH, oh = t % J->OH;
      int64_t h0 = oh * J->sh - J->ph;
      const int64_t h1 = TPU_MIN(h0 + (J->kh - 1) * J->dh + 1, J->H);
      while (h0 < 0) h0 += J->dh;
      for (int64_t ow = 0; ow < J->OW; ++ow) {
        int64_t best = h0 * J->W + J->wlo[2 * ow];
        float m = -INFINITY;
        for (int64_t h = h0; h < h1; h += J->dh)
          for (int64_t c = J->wlo[2 * ow]; c < J->wlo[2 * ow + 1]; c += J->dw) {
            const int64_t o = b * J->xb + h * J->W + c;
            const float v = J->dt == TPU_DTYPE_F32 ? ((const float*)(const void*)J->x)[o]
                          : J->dt == TPU_DTYPE_BF16 ? tpu_bf16_to_f32(((const uint16_t*)(const void*)J->x)[o])
                                                    : tpu_f16_to_f32(((const uint16_t*)(const void*)J->x)[o]);
            if (v > m || v != v) { m = v; best = h * J->W + c; }
          }
        J->out[b * J->ob + oh * J->ohs + ow] = best;
      }
    }
    return;
  }
  float* ph = buf;
  float* mb = ph + J->sw * plen;
  int32_t* bb = (int32_t*)(void*)(mb + OWv); /* flat plane index (the plane has < 2^31 positions) */
  const size_t es = J->dt == TPU_DTYPE_F32 ? 4 : 2;
  const int32_t sw = (int32_t)J->sw;
  const mp_v4i lane = {0, sw, 2 * sw, 3 * sw};
  for (int64_t t = begin; t < end; ++t) {
    const int64_t b = t / J->OH, oh = t % J->OH;
    int64_t h0 = oh * J->sh - J->ph;
    const int64_t h1 = TPU_MIN(h0 + (J->kh - 1) * J->dh + 1, J->H);
    while (h0 < 0) h0 += J->dh;
    for (int64_t ow = 0; ow < OWv; ++ow) {
      mb[ow] = -INFINITY;
      bb[ow] = (int32_t)(h0 * J->W + (ow < J->OW ? J->wlo[2 * ow] : 0));
    }
    for (int64_t h = h0; h < h1; h += J->dh) {
      mp_widen(J, J->x + (size_t)(b * J->xb + h * J->W) * es, ph, plen);
      for (int64_t kc = 0; kc < J->kw; ++kc) {
        const float* pr = ph + ((kc * J->dw) % J->sw) * plen + (kc * J->dw) / J->sw;
        const int32_t base = (int32_t)(h * J->W - J->pw + kc * J->dw);
        for (int64_t ow = 0; ow < OWv; ow += 4) {
          mp_v4f v, m;
          mp_v4i bi;
          memcpy(&v, pr + ow, sizeof v);
          memcpy(&m, mb + ow, sizeof m);
          memcpy(&bi, bb + ow, sizeof bi);
          const mp_v4i take = (v > m) | (v != v);
          m = (mp_v4f)((take & (mp_v4i)v) | (~take & (mp_v4i)m));
          bi = (take & (lane + (int32_t)(base + ow * sw))) | (~take & bi);
          memcpy(mb + ow, &m, sizeof m);
          memcpy(bb + ow, &bi, sizeof bi);
        }
      }
    }
    int64_t* orow = J->out + b * J->ob + oh * J->ohs;
    for (int64_t ow = 0; ow < J->OW; ++ow) orow[ow] = bb[ow];
  }
  free(buf);
}

int tpu_host_maxpool2d_argmax(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  const int r = x->rank;
  if (op->i1 != 2 || r < 2 || out->rank != r || out->dtype != TPU_DTYPE_I64) return 0;
  if (x->dtype != TPU_DTYPE_F32 && x->dtype != TPU_DTYPE_BF16 && x->dtype != TPU_DTYPE_F16) return 0;
  mp_job_t J = {.x = x->data, .out = (int64_t*)(void*)out->data, .dt = x->dtype};
  J.H = x->sizes[r - 2]; J.W = x->sizes[r - 1]; J.OH = out->sizes[r - 2]; J.OW = out->sizes[r - 1];
  J.kh = op->a[0][0]; J.kw = op->a[0][1]; J.sh = op->a[1][0]; J.sw = op->a[1][1];
  J.ph = op->a[2][0]; J.pw = op->a[2][1];
  J.dh = op->a[2][2] ? op->a[2][2] : 1; J.dw = op->a[2][3] ? op->a[2][3] : 1;
  if (J.sh < 1 || J.sw < 1 || J.kh < 1 || J.kw < 1 || J.dh < 1 || J.dw < 1 || J.ph < 0 || J.pw < 0) return 0;
  if (J.H < 1 || J.W < 1 || J.OH < 1 || J.OW < 1 || J.H * J.W + J.OW * J.sw + J.kw * J.dw >= (int64_t)1 << 31) return 0;
  /* contiguous planes in both; the leading dims one flat run each (batch x channels) */
  if (x->strides[r - 1] != 1 || x->strides[r - 2] != J.W || out->strides[r - 1] != 1) return 0;
  int64_t nb = 1;
  for (int d = 0; d < r - 2; ++d) {
    if (x->sizes[d] != out->sizes[d]) return 0;
    nb *= x->sizes[d];
  }
  /* leading dims: one stride per batch row (row-major over them, each dim's stride = inner size x stride) */
  J.xb = J.H * J.W; J.ob = out->strides[r - 2] * J.OH;
  {
    int64_t xe = J.xb, oe = J.ob;
    for (int d = r - 3; d >= 0; --d) {
      if (x->sizes[d] > 1 && (x->strides[d] != xe || out->strides[d] != oe)) return 0;
      xe *= x->sizes[d]; oe *= x->sizes[d];
    }
  }
  J.ohs = out->strides[r - 2];
  if (nb == 0) return 1;
  /* every window must hold a position (PyTorch's output-size rule guarantees it; else the general kernel) */
  for (int64_t oh = 0; oh < J.OH; ++oh) {
    int64_t h0 = oh * J.sh - J.ph, h1 = TPU_MIN(h0 + (J.kh - 1) * J.dh + 1, J.H);
    while (h0 < 0) h0 += J.dh;
    if (h0 >= h1) return 0;
  }
  int64_t wlo_s[2 * 256];
  int64_t* wlo = J.OW <= 256 ? wlo_s : malloc((size_t)(2 * J.OW) * sizeof(int64_t));
  if (!wlo) return 0;
  J.wlo = wlo;
  int ok = 1;
  for (int64_t ow = 0; ow < J.OW; ++ow) {
    int64_t c0 = ow * J.sw - J.pw, c1 = TPU_MIN(c0 + (J.kw - 1) * J.dw + 1, J.W);
    while (c0 < 0) c0 += J.dw;
    if (c0 >= c1) ok = 0;
    wlo[2 * ow] = c0; wlo[2 * ow + 1] = c1;
  }
  if (ok) {
    const int64_t per = J.OW * J.kh * J.kw * 2;
    tpu_pool_parallel_for(nb * J.OH, TPU_MAX((int64_t)1, 16384 / TPU_MAX(per, (int64_t)1)), mp_worker, &J);
  }
  if (wlo != wlo_s) free(wlo);
  return ok;
}

/* ---- scatter-add along the last dim of rank-2 views: out[b, idx[b, j]] += src[b, j] */
typedef struct {
  const tpu_host_view_t *idx, *src, *out;
} sr_job_t;

#define SR_ROW(T, ADD)                                                                     \
  {                                                                                        \
    T* o = (T*)(void*)J->out->data + b * J->out->strides[0];                               \
    const T* s = (const T*)(const void*)J->src->data + b * J->src->strides[0];             \
    const int64_t os = J->out->strides[1], ss = J->src->strides[1];                        \
    for (int64_t j = 0; j < n; ++j) {                                                      \
      int64_t k = ip[j * is];                                                              \
      if (k < 0) k += P;                                                                   \
      T* d = o + k * os;                                                                   \
      const T a = *d, c = s[j * ss];                                                       \
      *d = (ADD);                                                                          \
    }                                                                                      \
  }

static void sr_worker(void* ctx, int64_t begin, int64_t end) {
  const sr_job_t* J = ctx;
  const int64_t n = J->idx->sizes[1], is = J->idx->strides[1], P = J->out->sizes[1];
  for (int64_t b = begin; b < end; ++b) {
    const int64_t* ip = (const int64_t*)(const void*)J->idx->data + b * J->idx->strides[0];
    switch (J->out->dtype) {
      case TPU_DTYPE_F32: SR_ROW(float, a + c) break;
      case TPU_DTYPE_F64: SR_ROW(double, a + c) break;
      case TPU_DTYPE_BF16: SR_ROW(uint16_t, tpu_f32_to_bf16(tpu_bf16_to_f32(a) + tpu_bf16_to_f32(c))) break;
      default: SR_ROW(uint16_t, tpu_f32_to_f16(tpu_f16_to_f32(a) + tpu_f16_to_f32(c))) break;
    }
  }
}

int tpu_host_scatter_add_rows(const tpu_host_view_t* idx, const tpu_host_view_t* src, const tpu_host_view_t* out) {
  const int dt = out->dtype;
  if (out->rank != 2 || idx->rank != 2 || src->rank != 2 || idx->dtype != TPU_DTYPE_I64 || src->dtype != dt) return 0;
  if (dt != TPU_DTYPE_F32 && dt != TPU_DTYPE_F64 && dt != TPU_DTYPE_BF16 && dt != TPU_DTYPE_F16) return 0;
  const int64_t B = idx->sizes[0], n = idx->sizes[1], P = out->sizes[1];
  if (B > out->sizes[0] || B > src->sizes[0] || n > src->sizes[1]) return 0;
  if (B == 0 || n == 0) return 1;
  /* rows of out must not overlap (each task owns its rows) */
  if (out->strides[1] != 1 || (B > 1 && out->strides[0] < P)) return 0;
  /* every index in range (else the general kernel reports it, with nothing written yet) */
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* ip = (const int64_t*)(const void*)idx->data + b * idx->strides[0];
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = ip[j * idx->strides[1]];
      if (k < -P || k >= P) return 0;
    }
  }
  sr_job_t J = {idx, src, out};
  tpu_pool_parallel_for(B, TPU_MAX((int64_t)1, 8192 / n), sr_worker, &J);
  return 1;
}

/* ---- gather along the last dim of rank-2 views: out[b, j] = x[b, idx[b, j]] */
typedef struct {
  const tpu_host_view_t *x, *idx, *out;
} gr_job_t;

#define GR_ROW(T)                                                                      \
  {                                                                                    \
    T* o = (T*)(void*)J->out->data + b * J->out->strides[0];                           \
    const T* s = (const T*)(const void*)J->x->data + b * J->x->strides[0];             \
    const int64_t os = J->out->strides[1], xs = J->x->strides[1];                      \
    for (int64_t j = 0; j < n; ++j) {                                                  \
      int64_t k = ip[j * is];                                                          \
      if (k < 0) k += P;                                                               \
      o[j * os] = s[k * xs];                                                           \
    }                                                                                  \
  }

static void gr_worker(void* ctx, int64_t begin, int64_t end) {
  const gr_job_t* J = ctx;
  const int64_t n = J->out->sizes[1], is = J->idx->strides[1], P = J->x->sizes[1];
  const size_t es = tpu_dtype_size(J->x->dtype);
  for (int64_t b = begin; b < end; ++b) {
    const int64_t* ip = (const int64_t*)(const void*)J->idx->data + b * J->idx->strides[0];
    if (es == 8) GR_ROW(uint64_t)
    else if (es == 4) GR_ROW(uint32_t)
    else if (es == 2) GR_ROW(uint16_t)
    else GR_ROW(uint8_t)
  }
}

int tpu_host_gather_rows(const tpu_host_view_t* x, const tpu_host_view_t* idx, const tpu_host_view_t* out, int no_wrap) {
  if (out->rank != 2 || idx->rank != 2 || x->rank != 2 || idx->dtype != TPU_DTYPE_I64 || x->dtype != out->dtype) return 0;
  const size_t es = tpu_dtype_size(x->dtype);
  if (es != 1 && es != 2 && es != 4 && es != 8) return 0;
  const int64_t B = out->sizes[0], n = out->sizes[1], P = x->sizes[1];
  if (B > x->sizes[0] || B > idx->sizes[0] || n > idx->sizes[1]) return 0;
  if (B == 0 || n == 0) return 1;
  /* every index in range (else the general kernel reports it) */
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* ip = (const int64_t*)(const void*)idx->data + b * idx->strides[0];
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = ip[j * idx->strides[1]];
      if (k < (no_wrap ? 0 : -P) || k >= P) return 0;
    }
  }
  gr_job_t J = {x, idx, out};
  tpu_pool_parallel_for(B, TPU_MAX((int64_t)1, 16384 / n), gr_worker, &J);
  return 1;
}
