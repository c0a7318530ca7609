/* kernels.c — host library kernels: copy, reduce, argreduce, cumulative, dot, iota,
 * concat, pad, gather/index_select/scatter/index_put, rng, sort. Every kernel
 * takes strided views and checks indices before touching memory. */
#include <pthread.h>
#include <stdlib.h>

#include "drivers/host/gemm.h"
#include "drivers/host/host.h"
#include "drivers/host/maxpool.h"
#include "runtime/runtime.h"

const tpu_host_tile_ops_t* tpu_host_tile_ops(void) {
  static const tpu_host_tile_ops_t* ops;
  const tpu_host_tile_ops_t* o = __atomic_load_n(&ops, __ATOMIC_ACQUIRE);
  if (!o) {
    o = tpu_cpu_has_avx512bf16() && tpu_cpu_has_avx2_fma() ? &tpu_host_tile_ops_avx512bf16
        : tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma() ? &tpu_host_tile_ops_avx512
        : tpu_cpu_has_avx2_fma() ? &tpu_host_tile_ops_avx2 : &tpu_host_tile_ops_base;
    __atomic_store_n(&ops, o, __ATOMIC_RELEASE);
  }
  return o;
}

/* ---- scalar element access */
double tpu_host_load_f64(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F32: { float v; memcpy(&v, p, 4); return v; }
    case TPU_DTYPE_F64: { double v; memcpy(&v, p, 8); return v; }
    case TPU_DTYPE_BF16: { uint16_t v; memcpy(&v, p, 2); return tpu_bf16_to_f32(v); }
    case TPU_DTYPE_F16: { uint16_t v; memcpy(&v, p, 2); return tpu_f16_to_f32(v); }
    default: return (double)tpu_host_load_i64(p, dt);
  }
}
int64_t tpu_host_load_i64(const char* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case TPU_DTYPE_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case TPU_DTYPE_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TPU_DTYPE_I8: return (int8_t)p[0];
    case TPU_DTYPE_U8: return (uint8_t)p[0];
    case TPU_DTYPE_BOOL: return p[0] != 0;
    default: {
      double v = tpu_host_load_f64(p, dt);
      return (v >= -9.2233720368547758e18 && v < 9.2233720368547758e18) ? (int64_t)v : INT64_MIN;
    }
  }
}
void tpu_host_store_f64(char* p, int dt, double v) {
  switch (dt) {
    case TPU_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case TPU_DTYPE_F64: memcpy(p, &v, 8); return;
    case TPU_DTYPE_BF16: { uint16_t h = tpu_f32_to_bf16((float)v); memcpy(p, &h, 2); return; }
    case TPU_DTYPE_F16: { uint16_t h = tpu_f32_to_f16((float)v); memcpy(p, &h, 2); return; }
    case TPU_DTYPE_BOOL: p[0] = v != 0; return;
    default:
      tpu_host_store_i64(p, dt, (v >= -9.2233720368547758e18 && v < 9.2233720368547758e18) ? (int64_t)v : INT64_MIN);
  }
}
void tpu_host_store_i64(char* p, int dt, int64_t v) {
  switch (dt) {
    case TPU_DTYPE_I64: memcpy(p, &v, 8); return;
    case TPU_DTYPE_I32: { int32_t x = (int32_t)(uint32_t)v; memcpy(p, &x, 4); return; }
    case TPU_DTYPE_I16: { int16_t x = (int16_t)(uint16_t)v; memcpy(p, &x, 2); return; }
    case TPU_DTYPE_I8: p[0] = (char)(uint8_t)v; return;
    case TPU_DTYPE_U8: p[0] = (char)(uint8_t)v; return;
    case TPU_DTYPE_BOOL: p[0] = v != 0; return;
    default: tpu_host_store_f64(p, dt, (double)v);
  }
}

static int64_t numel_of(const tpu_host_view_t* v) { return tpu_numel(v->rank, v->sizes); }
static char* at(const tpu_host_view_t* v, const int64_t* idx) {
  int64_t off = 0;
  for (int d = 0; d < v->rank; ++d) off += idx[d] * v->strides[d];
  return v->data + off * (int64_t)tpu_dtype_size(v->dtype);
}
static int next_index(int64_t* idx, const int64_t* sizes, int rank) {
  for (int d = rank - 1; d >= 0; --d) { if (++idx[d] < sizes[d]) return 1; idx[d] = 0; }
  return 0;
}

/* ---- copy: rows along the innermost dim through the tile load/store kernels */
typedef struct { const tpu_host_view_t *src, *dst; int64_t rows, inner; } copy_job_t;
/* Same-dtype row: the bytes move as they are (every dtype's copy is exact), no register buffer. */
#define RAW_ROW(T)                                                                          \
  static void raw_row_##T(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {     \
    T* o = (T*)(void*)d; const T* x = (const T*)(const void*)s;                             \
    for (int64_t i = 0; i < n; ++i) o[i * ds] = x[i * ss];                                  \
  }
RAW_ROW(uint16_t)
RAW_ROW(uint32_t)
RAW_ROW(uint64_t)
#undef RAW_ROW
static void copy_row_raw(char* d, int64_t ds, const char* s, int64_t ss, size_t es, int64_t n) {
  const int64_t nb = n * (int64_t)es;
  if (ds == 1 && ss == 1 && nb <= 256) { /* short rows (attention heads' 32-64 bf16): no call into memcpy */
    int64_t b = 0;
    for (; b + 32 <= nb; b += 32) memcpy(d + b, s + b, 32);
    for (; b + 4 <= nb; b += 4) memcpy(d + b, s + b, 4);
    for (; b < nb; ++b) d[b] = s[b];
  } else if (ds == 1 && ss == 1) memcpy(d, s, (size_t)nb);
  else if (es == 4) raw_row_uint32_t(d, ds, s, ss, n);
  else if (es == 2) raw_row_uint16_t(d, ds, s, ss, n);
  else if (es == 8) raw_row_uint64_t(d, ds, s, ss, n);
  else for (int64_t i = 0; i < n; ++i) memcpy(d + i * ds * (int64_t)es, s + i * ss * (int64_t)es, es);
}
static void copy_worker(void* ctx, int64_t b, int64_t e) {
  copy_job_t* J = ctx;
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  const tpu_host_view_t *s = J->src, *d = J->dst;
  int r = d->rank, cls = tpu_host_cls(s->dtype);
  int64_t buf[512];
  int64_t ss = r ? s->strides[r - 1] : 0, ds = r ? d->strides[r - 1] : 0;
  size_t se = tpu_dtype_size(s->dtype), de = tpu_dtype_size(d->dtype);
  int raw = s->dtype == d->dtype;
  /* row b's offsets by division once, then an odometer over the outer dims (short rows, e.g. a
   * cat's halves of 8 floats, spent most of their time in the per-row divisions) */
  int64_t idx[TPU_MAX_DIMS], rem = b, so = 0, dof = 0;
  for (int k = r - 2; k >= 0; --k) {
    idx[k] = rem % d->sizes[k]; rem /= d->sizes[k];
    so += idx[k] * s->strides[k]; dof += idx[k] * d->strides[k];
  }
  if (raw && ss == 1 && ds == 1 && J->inner * (int64_t)se <= 256 && r >= 2) {
    /* short contiguous rows (a [B, H, T, D] <-> [B, T, H, D] head transpose: rows of D): the walk's sizes and
     * strides in locals (a store through char* may alias the views, so reading them per row reloaded them) and
     * the second innermost dim as a plain loop; 512 KB of 64-byte rows 50 -> 20 us */
    int64_t sz[TPU_MAX_DIMS], sst[TPU_MAX_DIMS], dst[TPU_MAX_DIMS];
    for (int k = 0; k < r - 1; ++k) { sz[k] = d->sizes[k]; sst[k] = s->strides[k] * (int64_t)se; dst[k] = d->strides[k] * (int64_t)se; }
    const int64_t nb = J->inner * (int64_t)se, s2 = sst[r - 2], d2 = dst[r - 2], n2 = sz[r - 2];
    const char* sp = s->data + so * (int64_t)se;
    char* dp = d->data + dof * (int64_t)de;
    for (int64_t row = b; row < e;) {
      const int64_t cnt = TPU_MIN(e - row, n2 - idx[r - 2]);
      for (int64_t q = 0; q < cnt; ++q, sp += s2, dp += d2) {
        int64_t o = 0;
        for (; o + 32 <= nb; o += 32) memcpy(dp + o, sp + o, 32);
        for (; o + 4 <= nb; o += 4) memcpy(dp + o, sp + o, 4);
        for (; o < nb; ++o) dp[o] = sp[o];
      }
      row += cnt;
      idx[r - 2] += cnt;
      if (idx[r - 2] < n2) continue;
      sp -= n2 * s2; dp -= n2 * d2; idx[r - 2] = 0;
      for (int k = r - 3; k >= 0; --k) {
        sp += sst[k]; dp += dst[k];
        if (++idx[k] < sz[k]) break;
        sp -= sz[k] * sst[k]; dp -= sz[k] * dst[k]; idx[k] = 0;
      }
    }
    return;
  }
  for (int64_t row = b; row < e; ++row) {
    if (raw) copy_row_raw(d->data + dof * (int64_t)de, ds, s->data + so * (int64_t)se, ss, se, J->inner);
    else
      for (int64_t t = 0; t < J->inner; t += 512) {
        int64_t n = TPU_MIN(512, J->inner - t);
        T->load(buf, cls, s->data + (so + t * ss) * (int64_t)se, s->dtype, ss, n);
        T->store(d->data + (dof + t * ds) * (int64_t)de, d->dtype, ds, buf, cls, n);
      }
    for (int k = r - 2; k >= 0; --k) {
      so += s->strides[k]; dof += d->strides[k];
      if (++idx[k] < d->sizes[k]) break;
      so -= idx[k] * s->strides[k]; dof -= idx[k] * d->strides[k]; idx[k] = 0;
    }
  }
}
/* A same-dtype copy that transposes: the destination's unit-stride (innermost) dim i has a source stride other
 * than 1 and another dim k has source stride 1 (k.transpose(-2, -1).contiguous(), permute(0, 2, 3, 1)). Copied
 * in TB x TB tiles, read along k and written along i, so every source line a tile touches is used whole while it
 * is in L1 (a row-by-row gather reads a new line per element); 8 x 8 blocks of 2-byte elements go through SSE2
 * unpacks. Units: (outer index, block of k); the bytes move as they are, in any order (no overlap). */
#define TB 32
typedef struct {
  const tpu_host_view_t *s, *d;
  int k, nout; int od[TPU_MAX_DIMS];  /* the dims other than k and the innermost */
  int64_t nkb;
} tr_job_t;
#if defined(__SSE2__)
#include <emmintrin.h>
/* dst[j][i] = src[i][j] for an 8 x 8 block of 2-byte elements; src rows along k (stride sst), dst rows along i. */
static inline void tr8x8_u16(char* d, int64_t dst_, const char* s, int64_t sst) {
  __m128i r[8], t[8];
  for (int q = 0; q < 8; ++q) r[q] = _mm_loadu_si128((const __m128i*)(const void*)(s + q * sst));
  for (int q = 0; q < 4; ++q) {
    t[2 * q] = _mm_unpacklo_epi16(r[2 * q], r[2 * q + 1]);
    t[2 * q + 1] = _mm_unpackhi_epi16(r[2 * q], r[2 * q + 1]);
  }
  for (int q = 0; q < 2; ++q) {
    r[4 * q + 0] = _mm_unpacklo_epi32(t[4 * q + 0], t[4 * q + 2]);
    r[4 * q + 1] = _mm_unpackhi_epi32(t[4 * q + 0], t[4 * q + 2]);
    r[4 * q + 2] = _mm_unpacklo_epi32(t[4 * q + 1], t[4 * q + 3]);
    r[4 * q + 3] = _mm_unpackhi_epi32(t[4 * q + 1], t[4 * q + 3]);
  }
  for (int q = 0; q < 4; ++q) {
    _mm_storeu_si128((__m128i*)(void*)(d + (2 * q) * dst_), _mm_unpacklo_epi64(r[q], r[q + 4]));
    _mm_storeu_si128((__m128i*)(void*)(d + (2 * q + 1) * dst_), _mm_unpackhi_epi64(r[q], r[q + 4]));
  }
}
#endif
#define TR_TILE(T)                                                                                     \
  do {                                                                                                 \
    for (int64_t kk = 0; kk < nk; ++kk)                                                                \
      for (int64_t ii = 0; ii < ni; ++ii)                                                              \
        ((T*)(void*)(dp + kk * dk))[ii] = *(const T*)(const void*)(sp + kk * es + ii * si);            \
  } while (0)
static void transpose_worker(void* ctx, int64_t b, int64_t e) {
  const tr_job_t* J = ctx;
  const tpu_host_view_t *s = J->s, *d = J->d;
  const int r = d->rank, k = J->k;
  const int64_t es = (int64_t)tpu_dtype_size(d->dtype), inner = d->sizes[r - 1], nkt = d->sizes[k];
  const int64_t si = s->strides[r - 1] * es, dk = d->strides[k] * es; /* bytes */
  for (int64_t u = b; u < e; ++u) {
    int64_t o = u / J->nkb, k0 = (u % J->nkb) * TB, so = k0 /* s->strides[k] == 1 */, dof = k0 * d->strides[k];
    for (int q = J->nout - 1; q >= 0; --q) {
      const int dd = J->od[q];
      int64_t i = o % d->sizes[dd]; o /= d->sizes[dd];
      so += i * s->strides[dd]; dof += i * d->strides[dd];
    }
    const int64_t nk = TPU_MIN(TB, nkt - k0);
    for (int64_t i0 = 0; i0 < inner; i0 += TB) {
      const int64_t ni = TPU_MIN(TB, inner - i0);
      const char* sp = s->data + (so + i0 * s->strides[r - 1]) * es;
      char* dp = d->data + (dof + i0) * es;
#if defined(__SSE2__)
      if (es == 2 && nk == TB && ni == TB) {
        for (int64_t kb = 0; kb < TB; kb += 8)
          for (int64_t ib = 0; ib < TB; ib += 8) tr8x8_u16(dp + kb * dk + ib * 2, dk, sp + kb * 2 + ib * si, si);
        continue;
      }
#endif
      if (es == 2) TR_TILE(uint16_t);
      else if (es == 4) TR_TILE(uint32_t);
      else if (es == 8) TR_TILE(uint64_t);
      else
        for (int64_t kk = 0; kk < nk; ++kk)
          for (int64_t ii = 0; ii < ni; ++ii) memcpy(dp + kk * dk + ii * es, sp + kk * es + ii * si, (size_t)es);
    }
  }
}
#undef TR_TILE
/* The transposing copy of coalesced views s -> d, or 0 when it does not apply (see tr_job_t). */
static int copy_transposed(const tpu_host_view_t* s, const tpu_host_view_t* d) {
  const int r = d->rank;
  if (s->dtype != d->dtype || r < 2 || d->strides[r - 1] != 1 || s->strides[r - 1] == 1 || d->sizes[r - 1] < 8)
    return 0;
  int k = -1;
  for (int q = 0; q < r - 1; ++q) if (s->strides[q] == 1 && d->sizes[q] >= 8) k = q;
  if (k < 0) return 0;
  tr_job_t J = {.s = s, .d = d, .k = k};
  for (int q = 0; q < r - 1; ++q) if (q != k) J.od[J.nout++] = q;
  J.nkb = (d->sizes[k] + TB - 1) / TB;
  int64_t units = J.nkb;
  for (int q = 0; q < J.nout; ++q) units *= d->sizes[J.od[q]];
  tpu_pool_parallel_for(units, TPU_MAX(1, TPU_HOST_COPY_GRAIN / (TB * d->sizes[r - 1])), transpose_worker, &J);
  return 1;
}
#undef TB

tpu_status_t tpu_host_k_copy(const tpu_host_view_t* src, const tpu_host_view_t* dst) {
  if (src->rank != dst->rank) return TPU_ERR(INTERNAL, "host: copy rank mismatch");
  int64_t total = numel_of(dst);
  if (total == 0) return TPU_OK;
  /* coalesce dims contiguous in both */
  tpu_host_view_t s = *src, d = *dst;
  int r = 0;
  for (int k = 0; k < dst->rank; ++k) {
    if (dst->sizes[k] == 1) continue;
    if (r > 0 && s.strides[r - 1] == src->strides[k] * dst->sizes[k] &&
        d.strides[r - 1] == dst->strides[k] * dst->sizes[k]) {
      d.sizes[r - 1] *= dst->sizes[k]; s.sizes[r - 1] = d.sizes[r - 1];
      s.strides[r - 1] = src->strides[k]; d.strides[r - 1] = dst->strides[k];
      continue;
    }
    s.sizes[r] = d.sizes[r] = dst->sizes[k];
    s.strides[r] = src->strides[k]; d.strides[r] = dst->strides[k];
    r++;
  }
  s.rank = d.rank = r;
  if (copy_transposed(&s, &d)) return TPU_OK;
  copy_job_t J = {&s, &d, 0, r ? d.sizes[r - 1] : 1};
  J.rows = total / J.inner;
  tpu_pool_parallel_for(J.rows, TPU_MAX(1, TPU_HOST_COPY_GRAIN / J.inner), copy_worker, &J);
  return TPU_OK;
}

/* ---- reduce
 * Two loop orders. "inner": each output walks its reduced elements in runs along the
 * innermost reduced dim. "outer": when a kept dim is more inner than every reduced dim
 * (column sums such as a bias gradient), blocks of RB outputs along that dim are
 * accumulated together, each reduced index adding one strided run of RB values.
 * Floats are loaded through the tile loader and accumulate in double, ints in int64.
 * Few outputs over many elements split the reduced range into chunks whose size
 * depends only on the shapes (results do not depend on the thread count); the
 * per-chunk partials are combined in order. */
#define RB 1024
#define RCHUNK 65536
typedef struct { double f; int64_t i; int nan; } acc_t;
typedef struct {
  const tpu_host_view_t *x, *out;
  int m, isf, cls;
  int nk; int kd[TPU_MAX_DIMS];                          /* kept input dims (= output dims) */
  int nr; int64_t rsz[TPU_MAX_DIMS], rst[TPU_MAX_DIMS];  /* reduced dims, coalesced, innermost last */
  int64_t rcount, nout;
  int kv;                                                 /* outer: index into kd, or -1 (inner) */
  int64_t nblk, nitems, chunks, chunk_len;
  acc_t* part;                                            /* [nout][chunks] when chunks > 1 */
  int oom;
} reduce_job_t;

static inline double red_f(int m, double a, double v) {
  switch (m) {
    case TPU_IR_MONOID_SUM: return a + v;
    case TPU_IR_MONOID_PROD: return a * v;
    case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX: return (a != a || v != v) ? NAN : (v > a ? v : a);
    case TPU_IR_MONOID_MIN: return (a != a || v != v) ? NAN : (v < a ? v : a);
    case TPU_IR_MONOID_AND: return (a != 0) && (v != 0);
    default: return (a != 0) || (v != 0);
  }
}
static inline int64_t red_i(int m, int64_t a, int64_t v) {
  switch (m) {
    case TPU_IR_MONOID_SUM: return (int64_t)((uint64_t)a + (uint64_t)v);
    case TPU_IR_MONOID_PROD: return (int64_t)((uint64_t)a * (uint64_t)v);
    case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX: return v > a ? v : a;
    case TPU_IR_MONOID_MIN: return v < a ? v : a;
    case TPU_IR_MONOID_AND: return (a != 0) && (v != 0);
    default: return (a != 0) || (v != 0);
  }
}
static double init_f(int m) {
  switch (m) {
    case TPU_IR_MONOID_SUM: case TPU_IR_MONOID_OR: return 0;
    case TPU_IR_MONOID_PROD: case TPU_IR_MONOID_AND: return 1;
    case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX: return -INFINITY;
    default: return INFINITY;
  }
}
static int64_t init_i(int m, int dt) {
  switch (m) {
    case TPU_IR_MONOID_SUM: case TPU_IR_MONOID_OR: return 0;
    case TPU_IR_MONOID_PROD: case TPU_IR_MONOID_AND: return 1;
    case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX: return dt == TPU_DTYPE_U8 || dt == TPU_DTYPE_BOOL ? 0 : INT64_MIN;
    default: return dt == TPU_DTYPE_BOOL ? 1 : INT64_MAX;
  }
}
static int is_minmax(int m) { return m == TPU_IR_MONOID_MAX || m == TPU_IR_MONOID_NANMAX || m == TPU_IR_MONOID_MIN; }

/* Max (is_max) or min of n values and x, exact in T; two vector lanes of 16 bytes (GCC
 * vector extensions: SSE2/NEON without intrinsics); NaN is tracked apart (*nan). */
#define MINMAX_FN(T, IT, W)                                                                       \
  static double minmax_##T(const T* v, int64_t n, double x, int is_max, int* nan) {               \
    typedef T vt __attribute__((vector_size(16)));                                                \
    typedef IT vi __attribute__((vector_size(16)));                                               \
    vt l0, l1; vi nn = {0};                                                                       \
    for (int k = 0; k < W; ++k) { l0[k] = (T)x; l1[k] = (T)x; }                                   \
    int64_t i = 0;                                                                                \
    for (; i + 2 * W <= n; i += 2 * W) {                                                          \
      vt a, b; memcpy(&a, v + i, 16); memcpy(&b, v + i + W, 16);                                  \
      nn |= (a != a) | (b != b);                                                                  \
      vi ma = is_max ? (a > l0) : (a < l0), mb = is_max ? (b > l1) : (b < l1);                    \
      l0 = (vt)(((vi)a & ma) | ((vi)l0 & ~ma));                                                   \
      l1 = (vt)(((vi)b & mb) | ((vi)l1 & ~mb));                                                   \
    }                                                                                             \
    int any = 0;                                                                                  \
    for (int k = 0; k < W; ++k) {                                                                 \
      any |= nn[k] != 0;                                                                          \
      x = (is_max ? l0[k] > x : l0[k] < x) ? l0[k] : x;                                           \
      x = (is_max ? l1[k] > x : l1[k] < x) ? l1[k] : x;                                           \
    }                                                                                             \
    for (; i < n; ++i) { T e = v[i]; any |= e != e; if (is_max ? e > x : e < x) x = e; }          \
    *nan |= any;                                                                                  \
    return x;                                                                                     \
  }
MINMAX_FN(float, int32_t, 4)
MINMAX_FN(double, int64_t, 2)
#undef MINMAX_FN

/* Folds n values of a loaded block (class cls) into one accumulator. */
typedef double red_v2d __attribute__((vector_size(16)));
#define FOLD_F(T)                                                                                    \
  do {                                                                                               \
    const T* v = buf; double x = a->f; int nan = a->nan; int64_t i = 0;                             \
    switch (m) {                                                                                     \
      case TPU_IR_MONOID_SUM: { /* 16 partial sums (element i into lane i % 16), added as a fixed tree: */    \
        red_v2d a0 = {0, 0}, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0; /* 4 of them \
           left the adds latency-bound, ~1 cycle an element; named, not an array gcc zeroes by rep stos */ \
        for (; i + 16 <= n; i += 16) {                                                               \
          a0 += (red_v2d){v[i], v[i + 1]}; a1 += (red_v2d){v[i + 2], v[i + 3]};                     \
          a2 += (red_v2d){v[i + 4], v[i + 5]}; a3 += (red_v2d){v[i + 6], v[i + 7]};                 \
          a4 += (red_v2d){v[i + 8], v[i + 9]}; a5 += (red_v2d){v[i + 10], v[i + 11]};               \
          a6 += (red_v2d){v[i + 12], v[i + 13]}; a7 += (red_v2d){v[i + 14], v[i + 15]};             \
        }                                                                                            \
        a0 += a4; a1 += a5; a2 += a6; a3 += a7; a0 += a2; a1 += a3; a0 += a1;                        \
        double t = a0[0] + a0[1];                                                                    \
        for (; i < n; ++i) t += v[i];                                                                \
        x += t; break;                                                                               \
      }                                                                                              \
      case TPU_IR_MONOID_PROD: for (; i < n; ++i) x *= v[i]; break;                                  \
      case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX: x = minmax_##T(v, n, x, 1, &nan); break;     \
      case TPU_IR_MONOID_MIN: x = minmax_##T(v, n, x, 0, &nan); break;                                 \
      case TPU_IR_MONOID_AND: for (; i < n; ++i) x = (x != 0) && (v[i] != 0); break;                 \
      default: for (; i < n; ++i) x = (x != 0) || (v[i] != 0); break;                                \
    }                                                                                                \
    a->f = x; a->nan = nan;                                                                          \
  } while (0)
static void fold_block(int m, int cls, const void* buf, int64_t n, acc_t* a) {
  if (cls == TPU_HOST_CLS_F32) { FOLD_F(float); return; }
  if (cls == TPU_HOST_CLS_F64) { FOLD_F(double); return; }
  const int64_t* v = buf;
  int64_t x = a->i;
  for (int64_t i = 0; i < n; ++i) x = red_i(m, x, v[i]);
  a->i = x;
}
#undef FOLD_F
/* Folds a loaded block elementwise into n accumulators (structure of arrays). */
typedef struct { double f[RB]; int64_t i[RB]; uint8_t nan[RB]; int64_t buf[RB]; } accv_t;
#define FOLDV_F(T)                                                                                    \
  do {                                                                                                \
    const T* v = buf; double* f = a->f; uint8_t* nan = a->nan;                                       \
    switch (m) {                                                                                      \
      case TPU_IR_MONOID_SUM: for (int64_t i = 0; i < n; ++i) f[i] += v[i]; break;                   \
      case TPU_IR_MONOID_PROD: for (int64_t i = 0; i < n; ++i) f[i] *= v[i]; break;                  \
      case TPU_IR_MONOID_MAX: case TPU_IR_MONOID_NANMAX:                                              \
        for (int64_t i = 0; i < n; ++i) { double e = v[i]; nan[i] |= e != e; f[i] = e > f[i] ? e : f[i]; } break; \
      case TPU_IR_MONOID_MIN:                                                                         \
        for (int64_t i = 0; i < n; ++i) { double e = v[i]; nan[i] |= e != e; f[i] = e < f[i] ? e : f[i]; } break; \
      case TPU_IR_MONOID_AND: for (int64_t i = 0; i < n; ++i) f[i] = (f[i] != 0) && (v[i] != 0); break; \
      default: for (int64_t i = 0; i < n; ++i) f[i] = (f[i] != 0) || (v[i] != 0); break;             \
    }                                                                                                 \
  } while (0)
static void fold_vec(int m, int cls, const void* buf, int64_t n, accv_t* a) {
  if (cls == TPU_HOST_CLS_F32) { FOLDV_F(float); return; }
  if (cls == TPU_HOST_CLS_F64) { FOLDV_F(double); return; }
  const int64_t* v = buf;
  int64_t* x = a->i;
  switch (m) {
    case TPU_IR_MONOID_SUM: for (int64_t i = 0; i < n; ++i) x[i] = (int64_t)((uint64_t)x[i] + (uint64_t)v[i]); break;
    default: for (int64_t i = 0; i < n; ++i) x[i] = red_i(m, x[i], v[i]); break;
  }
}
#undef FOLDV_F
static void acc_init(const reduce_job_t* J, acc_t* a) { a->f = init_f(J->m); a->i = init_i(J->m, J->x->dtype); a->nan = 0; }
static void acc_combine(const reduce_job_t* J, acc_t* a, const acc_t* b) {
  if (J->isf) { a->f = red_f(J->m, a->f, b->f); a->nan |= b->nan; } else a->i = red_i(J->m, a->i, b->i);
}
static void acc_store(const reduce_job_t* J, char* p, const acc_t* a) {
  if (J->isf) tpu_host_store_f64(p, J->out->dtype, a->nan && is_minmax(J->m) ? NAN : a->f);
  else tpu_host_store_i64(p, J->out->dtype, a->i);
}
/* Input and output element offsets of kept multi-index kidx. */
static void kept_offsets(const reduce_job_t* J, const int64_t* kidx, int64_t* xo, int64_t* oo) {
  *xo = 0; *oo = 0;
  for (int k = 0; k < J->nk; ++k) { *xo += kidx[k] * J->x->strides[J->kd[k]]; *oo += kidx[k] * J->out->strides[k]; }
}
static void lin_to_kidx(const reduce_job_t* J, int64_t o, int64_t* kidx) {
  for (int k = J->nk - 1; k >= 0; --k) { int64_t s = J->x->sizes[J->kd[k]]; kidx[k] = o % s; o /= s; }
}
/* Input offset of reduced linear index r (innermost reduced dim fastest). */
static int64_t red_offset(const reduce_job_t* J, int64_t r, int64_t* ridx) {
  int64_t off = 0;
  for (int k = J->nr - 1; k >= 0; --k) { ridx[k] = r % J->rsz[k]; r /= J->rsz[k]; off += ridx[k] * J->rst[k]; }
  return off;
}

static void reduce_worker(void* ctx, int64_t b, int64_t e) {
  reduce_job_t* J = ctx;
  const tpu_host_view_t *x = J->x, *out = J->out;
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  int64_t es = (int64_t)tpu_dtype_size(x->dtype), oes = (int64_t)tpu_dtype_size(out->dtype);
  int64_t buf[512];
  acc_t acc[1];
  accv_t* av = J->kv >= 0 ? malloc(sizeof(accv_t)) : NULL;
  if (J->kv >= 0 && !av) { __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED); return; }
  int64_t kidx[TPU_MAX_DIMS], ridx[TPU_MAX_DIMS];
  for (int64_t u = b; u < e; ++u) {
    int64_t item = u / J->chunks, c = u % J->chunks;
    int64_t r0 = c * J->chunk_len, r1 = TPU_MIN(r0 + J->chunk_len, J->rcount);
    int64_t xo, oo;
    if (J->kv < 0) {                                   /* inner: item = one output */
      lin_to_kidx(J, item, kidx);
      kept_offsets(J, kidx, &xo, &oo);
      acc_init(J, &acc[0]);
      int64_t ln = J->rsz[J->nr - 1], lst = J->rst[J->nr - 1];
      for (int64_t r = r0; r < r1;) {
        int64_t col = r % ln, len = TPU_MIN(ln - col, r1 - r);
        const char* p = x->data + (xo + red_offset(J, r - col, ridx) + col * lst) * es;
        if (lst == 1 && tpu_host_cls(x->dtype) == J->cls && (int64_t)tpu_dtype_size(x->dtype) == 8 - 4 * (J->cls == TPU_HOST_CLS_F32)) {
          fold_block(J->m, J->cls, p, len, &acc[0]);  /* already in the accumulation class: no copy */
        } else {
          for (int64_t t = 0; t < len; t += 512) {
            int64_t n = TPU_MIN(512, len - t);
            T->load(buf, J->cls, p + t * lst * es, x->dtype, lst, n);
            fold_block(J->m, J->cls, buf, n, &acc[0]);
          }
        }
        r += len;
      }
      if (J->chunks > 1) J->part[item * J->chunks + c] = acc[0];
      else acc_store(J, out->data + oo * oes, &acc[0]);
    } else {                                           /* outer: item = (other kept dims, block) */
      int64_t blk = item % J->nblk, other = item / J->nblk;
      int kv = J->kv, dv = J->kd[kv];
      int64_t nv = x->sizes[dv], sv = x->strides[dv], ov = out->strides[kv];
      for (int k = J->nk - 1; k >= 0; --k) {
        if (k == kv) { kidx[k] = blk * RB; continue; }
        int64_t s = x->sizes[J->kd[k]]; kidx[k] = other % s; other /= s;
      }
      kept_offsets(J, kidx, &xo, &oo);
      int64_t n = TPU_MIN(RB, nv - blk * RB);
      for (int64_t i = 0; i < n; ++i) { av->f[i] = init_f(J->m); av->i[i] = init_i(J->m, x->dtype); av->nan[i] = 0; }
      int64_t roff = r0 < r1 ? red_offset(J, r0, ridx) : 0;
      int direct = sv == 1 && (x->dtype == TPU_DTYPE_F32 || x->dtype == TPU_DTYPE_F64 || x->dtype == TPU_DTYPE_I64);
      for (int64_t r = r0; r < r1; ++r) {
        const char* p = x->data + (xo + roff) * es;
        if (direct) fold_vec(J->m, J->cls, p, n, av);   /* already in the accumulation class */
        else {
          T->load(av->buf, J->cls, p, x->dtype, sv, n);
          fold_vec(J->m, J->cls, av->buf, n, av);
        }
        for (int k = J->nr - 1; k >= 0; --k) {          /* odometer over the reduced dims */
          roff += J->rst[k];
          if (++ridx[k] < J->rsz[k]) break;
          roff -= ridx[k] * J->rst[k]; ridx[k] = 0;
        }
      }
      if (J->chunks > 1) {
        int64_t o = 0;
        for (int k = 0; k < J->nk; ++k) o = o * x->sizes[J->kd[k]] + kidx[k];
        int64_t pitch = 1;
        for (int k = kv + 1; k < J->nk; ++k) pitch *= x->sizes[J->kd[k]];
        for (int64_t i = 0; i < n; ++i) {
          acc_t* p = &J->part[(o + i * pitch) * J->chunks + c];
          p->f = av->f[i]; p->i = av->i[i]; p->nan = av->nan[i];
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          acc_t a = {av->f[i], av->i[i], av->nan[i]};
          acc_store(J, out->data + (oo + i * ov) * oes, &a);
        }
      }
    }
  }
  free(av);
}
static tpu_status_t reduce_whole(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  reduce_job_t J = {.x = x, .out = out, .m = (int)op->i0, .rcount = 1, .kv = -1, .chunks = 1};
  J.isf = tpu_dtype_is_floating(x->dtype);
  J.cls = J.isf ? (x->dtype == TPU_DTYPE_F64 ? TPU_HOST_CLS_F64 : TPU_HOST_CLS_F32) : TPU_HOST_CLS_I64;
  int rd[TPU_MAX_DIMS], nrd = 0;
  for (int d = 0; d < x->rank; ++d) {
    if (op->a[0][d]) { J.rcount *= x->sizes[d]; if (x->sizes[d] != 1) rd[nrd++] = d; }
    else J.kd[J.nk++] = d;
  }
  J.nout = numel_of(out);
  if (J.nout == 0) return TPU_OK;
  /* reduced dims by |stride| descending, adjacent ones coalesced when contiguous */
  for (int i = 1; i < nrd; ++i)
    for (int j = i; j > 0 && llabs(x->strides[rd[j - 1]]) < llabs(x->strides[rd[j]]); --j) { int t = rd[j]; rd[j] = rd[j - 1]; rd[j - 1] = t; }
  for (int i = 0; i < nrd; ++i) {
    int64_t s = x->sizes[rd[i]], st = x->strides[rd[i]];
    if (J.nr && J.rst[J.nr - 1] == st * s) { J.rsz[J.nr - 1] *= s; J.rst[J.nr - 1] = st; continue; }
    J.rsz[J.nr] = s; J.rst[J.nr] = st; J.nr++;
  }
  if (J.nr == 0) { J.rsz[0] = J.rcount; J.rst[0] = 0; J.nr = 1; }  /* rcount is 0 or 1 here */
  /* outer order when a kept dim is more inner than the innermost reduced run */
  int64_t best = -1;
  for (int k = 0; k < J.nk; ++k) {
    int d = J.kd[k];
    if (x->sizes[d] > 1 && (best < 0 || llabs(x->strides[d]) < best)) { best = llabs(x->strides[d]); J.kv = k; }
  }
  if (J.kv >= 0 && !(J.rcount > 1 && best < llabs(J.rst[J.nr - 1]))) J.kv = -1;
  int64_t per_r = 1;
  if (J.kv >= 0) {
    J.nblk = (x->sizes[J.kd[J.kv]] + RB - 1) / RB;
    J.nitems = J.nout / x->sizes[J.kd[J.kv]] * J.nblk;
    per_r = RB;
  } else {
    J.nitems = J.nout;
  }
  J.chunk_len = TPU_MAX(J.rcount, 1);
  int64_t clen = TPU_MAX(1, RCHUNK / per_r);
  if (J.nitems < 64 && J.rcount >= 4 * clen) {
    int64_t chunks = TPU_MIN((J.rcount + clen - 1) / clen, TPU_MAX(1, (1 << 20) / J.nout));
    if (chunks > 1) {
      J.chunk_len = (J.rcount + chunks - 1) / chunks;
      J.chunks = (J.rcount + J.chunk_len - 1) / J.chunk_len;
      J.part = malloc((size_t)(J.nout * J.chunks) * sizeof(acc_t));
      if (!J.part) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for reduction partials");
    }
  }
  int64_t work = TPU_MAX(1, TPU_MIN(J.chunk_len, J.rcount) * per_r);
  tpu_pool_parallel_for(J.nitems * J.chunks, TPU_MAX(1, TPU_HOST_COPY_GRAIN / work), reduce_worker, &J);
  if (J.oom) { free(J.part); return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for reduction accumulators"); }
  if (J.part) {
    int64_t kidx[TPU_MAX_DIMS], xo, oo, oes = (int64_t)tpu_dtype_size(out->dtype);
    for (int64_t o = 0; o < J.nout; ++o) {
      acc_t a = J.part[o * J.chunks];
      for (int64_t c = 1; c < J.chunks; ++c) acc_combine(&J, &a, &J.part[o * J.chunks + c]);
      lin_to_kidx(&J, o, kidx);
      kept_offsets(&J, kidx, &xo, &oo);
      acc_store(&J, out->data + oo * oes, &a);
    }
    free(J.part);
  }
  return TPU_OK;
}

/* ---- blocked reduce (host.h, tpu_host_reduce_plan): one plan for a materialized operand (views of its
 * slabs, no copy) and exec.c's fused producers (each slab evaluated into a buffer), so the two sum alike. */
#define REDUCE_BLOCK_BYTES ((int64_t)1 << 20) /* a slab stays in L2 */
int tpu_host_reduce_plan(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out,
                         tpu_host_reduce_plan_t* out_plan) {
  memset(out_plan, 0, sizeof *out_plan);
  int64_t total = numel_of(x), es = (int64_t)tpu_dtype_size(x->dtype);
  if (total * es <= 4 * REDUCE_BLOCK_BYTES) return 0;
  /* dense: sorted by stride (largest first), each non-unit dim steps over the elements of those inside it */
  int nd = 0, dd[TPU_MAX_DIMS];
  for (int d = 0; d < x->rank; ++d) {
    if (x->sizes[d] == 1) continue;
    int j = nd++;
    for (; j > 0 && x->strides[dd[j - 1]] < x->strides[d]; --j) dd[j] = dd[j - 1];
    dd[j] = d;
  }
  int64_t inner = 1;
  for (int j = nd - 1; j >= 0; --j) {
    if (x->strides[dd[j]] != inner) return 0;
    inner *= x->sizes[dd[j]];
  }
  const int d0 = dd[0];
  const int64_t row = total / x->sizes[d0];
  tpu_host_reduce_plan_t* p = out_plan;
  p->d0 = d0;
  p->rows = TPU_MAX(1, REDUCE_BLOCK_BYTES / es / row);
  p->nb = (x->sizes[d0] + p->rows - 1) / p->rows;
  p->kept = !op->a[0][d0];
  if (!p->kept && out->rank + 1 > TPU_MAX_DIMS) return 0;
  for (int d = 0; d < d0; ++d) p->od += !op->a[0][d];
  p->block_bytes = p->rows * row * es;
  if (!p->kept) {
    p->pt.dtype = tpu_dtype_is_floating(x->dtype) && op->i0 != TPU_IR_MONOID_AND && op->i0 != TPU_IR_MONOID_OR
                      ? TPU_DTYPE_F64 : TPU_DTYPE_I64;
    p->pt.rank = out->rank + 1;
    p->pt.dims[0] = p->nb;
    for (int d = 0; d < out->rank; ++d) p->pt.dims[d + 1] = out->sizes[d];
    p->partial_bytes = tpu_ir_numel(&p->pt) * 8;
  }
  return p->nb > 1 && p->partial_bytes <= total * es / 4;
}
tpu_status_t tpu_host_k_reduce_blocks(const tpu_ir_op_t* op, const tpu_host_reduce_plan_t* p, const tpu_host_view_t* x,
                                      tpu_host_reduce_block_fn block, void* ctx, char* buf, char* partials,
                                      const tpu_host_view_t* out) {
  const int d0 = p->d0;
  tpu_host_view_t P, bv, ov;
  if (!p->kept) { /* [nb, out...] row-major */
    P.data = partials; P.dtype = p->pt.dtype; P.rank = p->pt.rank;
    int64_t st = 1;
    for (int d = P.rank - 1; d >= 0; --d) { P.sizes[d] = p->pt.dims[d]; P.strides[d] = st; st *= p->pt.dims[d]; }
  }
  for (int64_t i = 0; i < p->nb; ++i) {
    int64_t b0 = i * p->rows, len = TPU_MIN(p->rows, x->sizes[d0] - b0);
    bv = *x; /* block i: x's slab, or a row-major one over buf for `block` to fill */
    bv.sizes[d0] = len;
    if (buf) {
      int64_t st = 1;
      bv.data = buf;
      for (int d = bv.rank - 1; d >= 0; --d) { bv.strides[d] = st; st *= bv.sizes[d]; }
    } else {
      bv.data = x->data + b0 * x->strides[d0] * (int64_t)tpu_dtype_size(x->dtype);
    }
    if (block) TPU_RETURN_IF_ERROR(block(ctx, b0, &bv));
    ov = p->kept ? *out : P;
    if (p->kept) {
      ov.data += b0 * out->strides[p->od] * (int64_t)tpu_dtype_size(out->dtype);
      ov.sizes[p->od] = len;
    } else {
      ov.rank = P.rank - 1;
      for (int d = 0; d < ov.rank; ++d) { ov.sizes[d] = P.sizes[d + 1]; ov.strides[d] = P.strides[d + 1]; }
      ov.data = P.data + i * P.strides[0] * 8;
    }
    TPU_RETURN_IF_ERROR(reduce_whole(op, &bv, &ov));
  }
  if (p->kept) return TPU_OK;
  tpu_ir_op_t comb = *op;
  memset(comb.a[0], 0, sizeof(comb.a[0]));
  comb.a[0][0] = 1;
  return reduce_whole(&comb, &P, out);
}
tpu_status_t tpu_host_k_reduce(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  tpu_host_reduce_plan_t p;
  if (!tpu_host_reduce_plan(op, x, out, &p)) return reduce_whole(op, x, out);
  char* partials = p.kept ? NULL : malloc((size_t)p.partial_bytes);
  if (!p.kept && !partials) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for reduction partials");
  tpu_status_t st = tpu_host_k_reduce_blocks(op, &p, x, NULL, NULL, NULL, partials, out);
  free(partials);
  return st;
}

/* ---- argmax / argmin along one dim (first occurrence; NaN wins, as PyTorch).
 * Parallel over outputs; each line is scanned in tiles loaded into f32/f64/i64. */
typedef struct { const tpu_host_view_t *x, *out; int dim, is_min, cls; } arg_job_t;
#define ARG_SCAN(T, NANCHECK)                                                                       \
  do {                                                                                              \
    const T* v = (const T*)buf;                                                                     \
    for (int64_t i = 0; i < len; ++i) {                                                             \
      T e = v[i];                                                                                   \
      if (NANCHECK(e)) { best = t + i; done = 1; break; }                                           \
      if (first || (J->is_min ? e < bv : e > bv)) { bv = (double)e; bi = (int64_t)e; best = t + i; first = 0; } \
    }                                                                                               \
  } while (0)
#define ARG_ISNAN(e) ((e) != (e))
#define ARG_NONAN(e) 0
static void arg_worker(void* ctx, int64_t b, int64_t e) {
  arg_job_t* J = ctx;
  const tpu_host_view_t *x = J->x, *out = J->out;
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  int64_t n = x->sizes[J->dim], st = x->strides[J->dim], es = (int64_t)tpu_dtype_size(x->dtype);
  int64_t buf[512], oidx[TPU_MAX_DIMS];
  for (int64_t o = b; o < e; ++o) {
    int64_t rem = o, base = 0, ooff = 0;
    for (int k = out->rank - 1; k >= 0; --k) { oidx[k] = rem % out->sizes[k]; rem /= out->sizes[k]; ooff += oidx[k] * out->strides[k]; }
    for (int d = 0, k = 0; d < x->rank; ++d) if (d != J->dim) base += oidx[k++] * x->strides[d];
    int64_t best = 0, bi = 0; double bv = 0; int first = 1, done = 0;
    for (int64_t t = 0; t < n && !done; t += 512) {
      int64_t len = TPU_MIN(512, n - t);
      T->load(buf, J->cls, x->data + (base + t * st) * es, x->dtype, st, len);
      if (J->cls == TPU_HOST_CLS_F32) ARG_SCAN(float, ARG_ISNAN);
      else if (J->cls == TPU_HOST_CLS_F64) ARG_SCAN(double, ARG_ISNAN);
      else {
        const int64_t* v = (const int64_t*)buf;
        for (int64_t i = 0; i < len; ++i)
          if (first || (J->is_min ? v[i] < bi : v[i] > bi)) { bi = v[i]; best = t + i; first = 0; }
      }
    }
    tpu_host_store_i64(out->data + ooff * (int64_t)tpu_dtype_size(out->dtype), out->dtype, best);
  }
}
#undef ARG_SCAN
#undef ARG_ISNAN
#undef ARG_NONAN
tpu_status_t tpu_host_k_argreduce(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  int dim = (int)op->i1;
  int64_t n = x->sizes[dim], nout = numel_of(out);
  if (n == 0 && nout > 0)
    return TPU_ERR(INDEX_ERROR, "argmax/argmin: expected reduction dim %d to have non-zero size", dim);
  if (nout == 0) return TPU_OK;
  arg_job_t J = {x, out, dim, (int)op->i0, tpu_host_cls(x->dtype)};
  tpu_pool_parallel_for(nout, TPU_MAX(1, TPU_HOST_COPY_GRAIN / TPU_MAX(1, n)), arg_worker, &J);
  return TPU_OK;
}

/* ---- cumulative sum/prod/max/min along one dim (double accumulator for floats).
 * Parallel over lines; each line goes through tile load/store buffers. */
typedef struct { const tpu_host_view_t *x, *out; int dim, m, cls; } cum_job_t;
static void cum_worker(void* ctx, int64_t b, int64_t e) {
  cum_job_t* J = ctx;
  const tpu_host_view_t *x = J->x, *out = J->out;
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  int dim = J->dim, m = J->m;
  int64_t n = x->sizes[dim], xs = x->strides[dim], os = out->strides[dim];
  int64_t es = (int64_t)tpu_dtype_size(x->dtype), oes = (int64_t)tpu_dtype_size(out->dtype);
  int64_t buf[512];
  for (int64_t line = b; line < e; ++line) {
    int64_t rem = line, xo = 0, oo = 0;
    for (int d = x->rank - 1; d >= 0; --d) {
      if (d == dim) continue;
      int64_t i = rem % x->sizes[d]; rem /= x->sizes[d];
      xo += i * x->strides[d]; oo += i * out->strides[d];
    }
    double af = init_f(m); int64_t ai = init_i(m, x->dtype);
    for (int64_t t = 0; t < n; t += 512) {
      int64_t len = TPU_MIN(512, n - t);
      T->load(buf, J->cls, x->data + (xo + t * xs) * es, x->dtype, xs, len);
      if (J->cls == TPU_HOST_CLS_F32) { float* v = (float*)buf; for (int64_t i = 0; i < len; ++i) { af = red_f(m, af, v[i]); v[i] = (float)af; } }
      else if (J->cls == TPU_HOST_CLS_F64) { double* v = (double*)buf; for (int64_t i = 0; i < len; ++i) { af = red_f(m, af, v[i]); v[i] = af; } }
      else { int64_t* v = buf; for (int64_t i = 0; i < len; ++i) { ai = red_i(m, ai, v[i]); v[i] = ai; } }
      T->store(out->data + (oo + t * os) * oes, out->dtype, os, buf, J->cls, len);
    }
  }
}
tpu_status_t tpu_host_k_cumulative(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  int dim = (int)op->i1;
  int64_t n = x->sizes[dim];
  if (numel_of(x) == 0) return TPU_OK;
  /* out and x share a dtype (the IR op keeps its operand's type) */
  cum_job_t J = {x, out, dim, (int)op->i0, tpu_host_cls(x->dtype)};
  tpu_pool_parallel_for(numel_of(x) / n, TPU_MAX(1, TPU_HOST_COPY_GRAIN / n), cum_worker, &J);
  return TPU_OK;
}

/* ---- dot_general in canonical form: [B..., M, K] x [B..., K, N] -> [B..., M, N] */
static tpu_status_t to_f32(const tpu_host_view_t* v, float** out, tpu_host_view_t* fv) {
  int64_t n = numel_of(v);
  float* buf = NULL;
  if (posix_memalign((void**)&buf, 64, (size_t)(n ? n : 1) * sizeof(float))) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory");
  fv->data = (char*)buf; fv->dtype = TPU_DTYPE_F32; fv->rank = v->rank;
  int64_t s = 1;
  for (int d = v->rank - 1; d >= 0; --d) { fv->sizes[d] = v->sizes[d]; fv->strides[d] = s; s *= v->sizes[d]; }
  *out = buf;
  return tpu_host_k_copy(v, fv);
}
/* Folds batch dims [0, nb) into one (count, stride) if they are uniformly strided in a, b and c. */
static int fold_batch(int nb, const tpu_host_view_t* a, const tpu_host_view_t* b, const tpu_host_view_t* c,
                      int64_t* count, int64_t* sa, int64_t* sb, int64_t* sc) {
  *count = 1; *sa = *sb = *sc = 0;
  int first = 1;
  for (int d = nb - 1; d >= 0; --d) {
    int64_t n = c->sizes[d];
    if (n == 1) continue;
    if (first) { *sa = a->strides[d]; *sb = b->strides[d]; *sc = c->strides[d]; *count = n; first = 0; continue; }
    if (a->strides[d] != *sa * *count || b->strides[d] != *sb * *count || c->strides[d] != *sc * *count) return 0;
    *count *= n;
  }
  return 1;
}
tpu_status_t tpu_host_k_dot(const tpu_ir_op_t* op, const tpu_host_view_t* a, const tpu_host_view_t* b,
                            const tpu_host_view_t* c) {
  return tpu_host_k_dot_epi(op, a, b, c, NULL);
}
/* epi (optional): see tpu_host_gemm_epi_t; t is the row-major index over c's batch dims. Paths
 * without a block-wise GEMM run it once per matrix (the block pointer is only meaningful for an f32 C:
 * the executor fuses f32 products only). */
static void dot_epi_whole(const tpu_host_gemm_epi_t* epi, const tpu_host_view_t* c, int nb) {
  if (!epi) return;
  int64_t nmat = 1;
  for (int d = 0; d < nb; ++d) nmat *= c->sizes[d];
  int64_t idx[TPU_MAX_DIMS] = {0};
  for (int64_t t = 0; t < nmat; ++t) { /* row-major over the batch dims */
    int64_t off = 0;
    for (int64_t d = nb - 1, r = t; d >= 0; --d) { idx[d] = r % c->sizes[d]; r /= c->sizes[d]; off += idx[d] * c->strides[d]; }
    epi->fn(epi->ctx, epi->t0 + t, 0, 0, c->sizes[nb], c->sizes[nb + 1], (const float*)c->data + off,
            c->strides[nb], c->strides[nb + 1]);
  }
}
tpu_status_t tpu_host_k_dot_epi(const tpu_ir_op_t* op, const tpu_host_view_t* a, const tpu_host_view_t* b,
                                const tpu_host_view_t* c, const tpu_host_gemm_epi_t* epi) {
  int nb = (int)op->i0;
  int64_t M = c->sizes[nb], N = c->sizes[nb + 1], K = a->sizes[nb + 1];
  if (numel_of(c) == 0) return TPU_OK;
  int dt = a->dtype;
  if (dt != TPU_DTYPE_F32 && dt != TPU_DTYPE_F64 && dt != TPU_DTYPE_BF16 && dt != TPU_DTYPE_F16) {
    /* integer matmul: exact int64 accumulation */
    int64_t idx[TPU_MAX_DIMS] = {0};
    do {
      int64_t ao = 0, bo = 0;
      for (int d = 0; d < nb; ++d) { ao += idx[d] * a->strides[d]; bo += idx[d] * b->strides[d]; }
      int64_t i = idx[nb], j = idx[nb + 1], acc = 0;
      for (int64_t p = 0; p < K; ++p)
        acc = (int64_t)((uint64_t)acc + (uint64_t)tpu_host_load_i64(a->data + (ao + i * a->strides[nb] + p * a->strides[nb + 1]) * (int64_t)tpu_dtype_size(dt), dt) *
                        (uint64_t)tpu_host_load_i64(b->data + (bo + p * b->strides[nb] + j * b->strides[nb + 1]) * (int64_t)tpu_dtype_size(dt), dt));
      tpu_host_store_i64(at(c, idx), c->dtype, acc);
    } while (next_index(idx, c->sizes, c->rank));
    dot_epi_whole(epi, c, nb);
    return TPU_OK;
  }
  /* bf16/f16 operands are widened to f32 while the GEMM packs its panels; f32 accumulation.
   * op->prec (precision_config) reaches the f32 GEMM: bf16 passes for f32 operands. */
  tpu_host_view_t A = *a, B = *b, C = *c;
  float* fc = NULL;
  tpu_status_t st = TPU_OK;
  int use_f64 = dt == TPU_DTYPE_F64;
  int prec = (int)op->prec;
  if (!use_f64 && c->dtype != TPU_DTYPE_F32) {
    if ((st = to_f32(c, &fc, &C))) goto done;
  }
  int64_t cnt, sa, sb, sc;
  const tpu_host_gemm_epi_t* gepi = use_f64 || fc ? NULL : epi; /* block-wise only into an f32 C */
  if (fold_batch(nb, &A, &B, &C, &cnt, &sa, &sb, &sc)) {
    if (use_f64)
      tpu_host_dgemm_batched(cnt, M, N, K, 1.0, (const double*)A.data, sa, A.strides[nb], A.strides[nb + 1],
                             (const double*)B.data, sb, B.strides[nb], B.strides[nb + 1], 0.0,
                             (double*)C.data, sc, C.strides[nb], C.strides[nb + 1]);
    else
      tpu_host_sgemm_batched_epi(dt, dt, prec, cnt, M, N, K, 1.0f, A.data, sa, A.strides[nb], A.strides[nb + 1],
                                 B.data, sb, B.strides[nb], B.strides[nb + 1], 0.0f,
                                 (float*)C.data, sc, C.strides[nb], C.strides[nb + 1], gepi);
  } else {
    int64_t idx[TPU_MAX_DIMS] = {0};
    int64_t es = (int64_t)tpu_dtype_size(dt), ces = use_f64 ? 8 : 4;
    tpu_host_gemm_epi_t e1 = gepi ? *gepi : (tpu_host_gemm_epi_t){0};
    do {
      int64_t ao = 0, bo = 0, co = 0;
      for (int d = 0; d < nb; ++d) { ao += idx[d] * A.strides[d]; bo += idx[d] * B.strides[d]; co += idx[d] * C.strides[d]; }
      if (use_f64)
        tpu_host_dgemm(M, N, K, 1.0, (const double*)(A.data + ao * es), A.strides[nb], A.strides[nb + 1],
                       (const double*)(B.data + bo * es), B.strides[nb], B.strides[nb + 1], 0.0,
                       (double*)(C.data + co * ces), C.strides[nb], C.strides[nb + 1]);
      else
        tpu_host_sgemm_batched_epi(dt, dt, prec, 1, M, N, K, 1.0f, A.data + ao * es, 0, A.strides[nb],
                                   A.strides[nb + 1], B.data + bo * es, 0, B.strides[nb], B.strides[nb + 1], 0.0f,
                                   (float*)(C.data + co * ces), 0, C.strides[nb], C.strides[nb + 1],
                                   gepi ? &e1 : NULL);
      e1.t0++;
    } while (next_index(idx, C.sizes, nb));
  }
  if (fc) st = tpu_host_k_copy(&C, c);
  if (st == TPU_OK && !gepi) dot_epi_whole(epi, c, nb);
done:
  free(fc);
  return st;
}

/* ---- iota / concat / pad */
static int row_major(const tpu_host_view_t* v);
tpu_status_t tpu_host_k_iota(const tpu_ir_op_t* op, const tpu_host_view_t* out) {
  int64_t idx[TPU_MAX_DIMS] = {0};
  if (numel_of(out) == 0) return TPU_OK;
  if (out->dtype == TPU_DTYPE_I64 && row_major(out)) { /* value = (i / inner) % size along dim */
    int64_t inner = 1, n = numel_of(out), size = out->sizes[op->i0];
    for (int d = out->rank - 1; d > op->i0; --d) inner *= out->sizes[d];
    int64_t* o = (int64_t*)out->data;
    for (int64_t i = 0, v = 0, c = 0; i < n; ++i) {
      o[i] = v;
      if (++c == inner) { c = 0; if (++v == size) v = 0; }
    }
    return TPU_OK;
  }
  do tpu_host_store_i64(at(out, idx), out->dtype, idx[op->i0]);
  while (next_index(idx, out->sizes, out->rank));
  return TPU_OK;
}
tpu_status_t tpu_host_k_concat(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  int dim = (int)op->i0;
  int64_t off = 0;
  for (int k = 0; k < n; ++k) {
    tpu_host_view_t dst = *out;
    dst.sizes[dim] = xs[k].sizes[dim];
    dst.data = out->data + off * out->strides[dim] * (int64_t)tpu_dtype_size(out->dtype);
    if (numel_of(&dst)) TPU_RETURN_IF_ERROR(tpu_host_k_copy(&xs[k], &dst));
    off += xs[k].sizes[dim];
  }
  return TPU_OK;
}
tpu_status_t tpu_host_k_pad(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* v,
                            const tpu_host_view_t* out) {
  tpu_host_view_t fill = *out;
  fill.data = v->data; fill.dtype = v->dtype;
  for (int d = 0; d < fill.rank; ++d) fill.strides[d] = 0;
  TPU_RETURN_IF_ERROR(tpu_host_k_copy(&fill, out));
  tpu_host_view_t src = *x, dst = *out;
  int64_t es = (int64_t)tpu_dtype_size(x->dtype), oes = (int64_t)tpu_dtype_size(out->dtype);
  for (int d = 0; d < x->rank; ++d) {
    int64_t lo = op->a[0][d], hi = op->a[1][d];
    int64_t s0 = lo < 0 ? -lo : 0, s1 = x->sizes[d] - (hi < 0 ? -hi : 0);
    if (s1 <= s0) return TPU_OK;
    src.data += s0 * x->strides[d] * es; src.sizes[d] = s1 - s0;
    dst.data += (lo > 0 ? lo : 0) * out->strides[d] * oes; dst.sizes[d] = s1 - s0;
  }
  return tpu_host_k_copy(&src, &dst);
}

/* ---- indexing */
static tpu_status_t check_index(int64_t* i, int64_t size, int dim) {
  int64_t v = *i;
  if (v < -size || v >= size)
    return TPU_ERR(INDEX_ERROR, "index %lld is out of bounds for dimension %d with size %lld",
                   (long long)v, dim, (long long)size);
  if (v < 0) *i = v + size;
  return TPU_OK;
}
tpu_status_t tpu_host_k_gather(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* idx,
                               const tpu_host_view_t* out) {
  int dim = (int)op->i0;
  int64_t i[TPU_MAX_DIMS] = {0}, src[TPU_MAX_DIMS];
  if (numel_of(out) == 0) return TPU_OK;
  size_t es = tpu_dtype_size(x->dtype);
  int64_t dsize = x->rank ? x->sizes[dim] : 1;
  if (dim == 1 && tpu_host_gather_rows(x, idx, out, op->i1 == 1)) return TPU_OK; /* maxpool.c: rows in parallel */
  /* i1 = 1: no negative wrap; such an index is reported as PyTorch does (checked first, so a
   * negative index never reaches check_index's wrap) */
#define GATHER_NO_WRAP(k) if (op->i1 == 1 && (k) < 0) \
    return TPU_ERR(INDEX_ERROR, "index %lld is out of bounds for dimension %d with size %lld", (long long)(k), dim, (long long)dsize)
  if (x->rank == 1 && idx->dtype == TPU_DTYPE_I64 && out->dtype == x->dtype) { /* flat: no index vectors */
    const int64_t* ip = (const int64_t*)idx->data;
    int64_t n = out->sizes[0], is = idx->strides[0], xs = x->strides[0] * (int64_t)es, os = out->strides[0] * (int64_t)es;
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = ip[j * is];
      GATHER_NO_WRAP(k);
      TPU_RETURN_IF_ERROR(check_index(&k, dsize, dim));
      memcpy(out->data + j * os, x->data + k * xs, es);
    }
    return TPU_OK;
  }
  do {
    int64_t k = tpu_host_load_i64(at(idx, i), idx->dtype);
    GATHER_NO_WRAP(k);
    TPU_RETURN_IF_ERROR(check_index(&k, dsize, dim));
    memcpy(src, i, sizeof(src));
    if (x->rank) src[dim] = k;
    memcpy(at(out, i), at(x, src), es);
  } while (next_index(i, out->sizes, out->rank));
  return TPU_OK;
#undef GATHER_NO_WRAP
}
/* The elements of a view (all dims, or all but `skip`) as ONE run: *out_n elements
 * `*out_st` apart. 0 when the dims do not nest (e.g. a transposed block). */
static int flat_run(const tpu_host_view_t* v, int first, int skip, int64_t* out_n, int64_t* out_st) {
  int64_t n = 1, st = 0, next = 0;
  for (int d = v->rank - 1; d >= first; --d) {
    if (d == skip || v->sizes[d] == 1) continue;
    if (n > 1 && v->strides[d] != next) return 0;
    if (n == 1) st = v->strides[d];
    n *= v->sizes[d];
    next = st * n;
  }
  *out_n = n; *out_st = n > 1 ? st : 1;
  return 1;
}
/* dst[r * ds] (+)= src[r * ss], r < n, one dtype; strides in elements. Returns 0 (nothing
 * done) for dtypes without a typed loop. Float adds round once, as PyTorch's kernels. */
static inline __attribute__((always_inline)) int run_move(char* dst, int64_t ds, const char* src, int64_t ss, int dt, int64_t n, int acc) {
  const int64_t es = (int64_t)tpu_dtype_size(dt);
  if (!acc) {
    if (ds == 1 && ss == 1) memcpy(dst, src, (size_t)(n * es));
    else for (int64_t r = 0; r < n; ++r) memcpy(dst + r * ds * es, src + r * ss * es, (size_t)es);
    return 1;
  }
  /* unit strides (rows of an embedding table, index_put's accumulated blocks): a separate loop the
   * vectorizer can take (strided gathers defeat it); same per-element expression, same result */
#define ACC_LOOP(T, EXPR) { T* d = (T*)(void*)dst; const T* s = (const T*)(const void*)src; \
    if (ds == 1 && ss == 1) { for (int64_t r = 0; r < n; ++r) { const T a = d[r], b = s[r]; d[r] = (EXPR); } return 1; } \
    for (int64_t r = 0; r < n; ++r) { T* dp = d + r * ds; const T a = *dp, b = s[r * ss]; *dp = (EXPR); } return 1; }
  switch (dt) {
    case TPU_DTYPE_F32: ACC_LOOP(float, a + b)
    case TPU_DTYPE_F64: ACC_LOOP(double, a + b)
    case TPU_DTYPE_BF16: ACC_LOOP(uint16_t, tpu_f32_to_bf16(tpu_bf16_to_f32(a) + tpu_bf16_to_f32(b)))
    case TPU_DTYPE_F16: ACC_LOOP(uint16_t, tpu_f32_to_f16(tpu_f16_to_f32(a) + tpu_f16_to_f32(b)))
    case TPU_DTYPE_I64: ACC_LOOP(int64_t, (int64_t)((uint64_t)a + (uint64_t)b))
    case TPU_DTYPE_I32: ACC_LOOP(int32_t, (int32_t)((uint32_t)a + (uint32_t)b))
    case TPU_DTYPE_BOOL: ACC_LOOP(uint8_t, (uint8_t)(a || b))
    default: return 0;
  }
#undef ACC_LOOP
}
/* index_select's index j with value *k along a dim of `size`: i1 == 1 (embedding_bag's ids: no negative wrap,
 * PyTorch's RuntimeError), i1 == 2 (index_select: no negative wrap, reported as given), i1 == 3 (embedding_bag's
 * offsets[0] != 0), else a wrapped index */
static tpu_status_t select_index(const tpu_ir_op_t* op, int64_t j, int64_t* k, int64_t size, int dim) {
  if (*k >= 0 && *k < size) return TPU_OK;
  if (op->i1 == 1)
    return TPU_ERR(INVALID_ARGUMENT, "Index %lld of input takes value %lld which is not in the valid range [0, %lld)",
                   (long long)j, (long long)*k, (long long)size);
  if (op->i1 == 3) /* embedding_bag's offsets[0], read from a one-row table */
    return TPU_ERR(INVALID_ARGUMENT, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                   "from position 0. However, got %lld", (long long)*k);
  if (op->i1 == 2 && *k < 0)
    return TPU_ERR(INDEX_ERROR, "index %lld is out of bounds for dimension %d with size %lld", (long long)*k, dim,
                   (long long)size);
  return check_index(k, size, dim);
}
/* q 16-byte moves (q constant at the call): gcc -O3 turned memcpy(d, s, 64) into `rep movsl`, whose start-up made
 * a 643-row f32 [., 16] embedding gather ~7 us (PyTorch CPU ~3 us for the whole op) */
typedef int64_t kern_v16 __attribute__((vector_size(16)));
static inline __attribute__((always_inline)) void move16(char* d, const char* s, int q) {
  for (int k = 0; k < q; ++k) { kern_v16 t; memcpy(&t, s + 16 * k, 16); memcpy(d + 16 * k, &t, 16); }
}
tpu_status_t tpu_host_k_index_select(const tpu_ir_op_t* op, const tpu_host_view_t* x,
                                     const tpu_host_view_t* idx, const tpu_host_view_t* out) {
  int dim = (int)op->i0;
  int64_t n = idx->sizes[0];
  int64_t es = (int64_t)tpu_dtype_size(x->dtype), oes = (int64_t)tpu_dtype_size(out->dtype);
  int64_t ies = (int64_t)tpu_dtype_size(idx->dtype);
  /* one run per selected slice (e.g. rows of a contiguous table) */
  int64_t sn = 0, sst = 0, dn = 0, dst_ = 0;
  const int runs = x->dtype == out->dtype && flat_run(x, 0, dim, &sn, &sst) && flat_run(out, 0, dim, &dn, &dst_) &&
                   sn == dn;
  if (runs && sst == 1 && dst_ == 1 && idx->dtype == TPU_DTYPE_I64) {
    /* contiguous rows by an i64 index vector (embedding / embedding_bag rows): the row copied with a
     * fixed-size memcpy the compiler inlines for the common short rows */
    const int64_t* ip = (const int64_t*)(const void*)idx->data;
    const int64_t is = idx->strides[0], rb = sn * es, xs = x->strides[dim] * es, os = out->strides[dim] * oes;
    const int64_t size = x->sizes[dim];
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = ip[j * is];
      TPU_RETURN_IF_ERROR(select_index(op, j, &k, size, dim));
      char* d = out->data + j * os;
      const char* src = x->data + k * xs;
      switch (rb) {
        case 8: memcpy(d, src, 8); break;
        case 16: move16(d, src, 1); break;
        case 32: move16(d, src, 2); break;
        case 64: move16(d, src, 4); break;
        case 128: move16(d, src, 8); break;
        default: memcpy(d, src, (size_t)rb); break;
      }
    }
    return TPU_OK;
  }
  for (int64_t j = 0; j < n; ++j) {
    int64_t k = tpu_host_load_i64(idx->data + j * idx->strides[0] * ies, idx->dtype);
    TPU_RETURN_IF_ERROR(select_index(op, j, &k, x->sizes[dim], dim));
    if (runs) {
      run_move(out->data + j * out->strides[dim] * oes, dst_, x->data + k * x->strides[dim] * es, sst, x->dtype, sn, 0);
      continue;
    }
    tpu_host_view_t s = *x, d = *out;
    s.data += k * x->strides[dim] * es; s.sizes[dim] = 1;
    d.data += j * out->strides[dim] * oes; d.sizes[dim] = 1;
    TPU_RETURN_IF_ERROR(tpu_host_k_copy(&s, &d));
  }
  return TPU_OK;
}
static void accumulate(char* dst, const char* src, int dt) {
  if (run_move(dst, 1, src, 1, dt, 1, 1)) return;
  if (tpu_dtype_is_floating(dt)) tpu_host_store_f64(dst, dt, tpu_host_load_f64(dst, dt) + tpu_host_load_f64(src, dt));
  else if (dt == TPU_DTYPE_BOOL) dst[0] = dst[0] || src[0];
  else tpu_host_store_i64(dst, dt, (int64_t)((uint64_t)tpu_host_load_i64(dst, dt) + (uint64_t)tpu_host_load_i64(src, dt)));
}
/* scatter modes 2 multiply, 3 max, 4 min (NaN propagates, as PyTorch's scatter_reduce) */
static void scatter_combine(char* dst, const char* src, int dt, int mode) {
  if (tpu_dtype_is_floating(dt)) {
    double a = tpu_host_load_f64(dst, dt), b = tpu_host_load_f64(src, dt);
    double r = mode == 2 ? a * b : (a != a || b != b) ? NAN : mode == 3 ? (b > a ? b : a) : (b < a ? b : a);
    tpu_host_store_f64(dst, dt, r);
  } else {
    int64_t a = tpu_host_load_i64(dst, dt), b = tpu_host_load_i64(src, dt);
    int64_t r = mode == 2 ? (int64_t)((uint64_t)a * (uint64_t)b) : mode == 3 ? (b > a ? b : a) : (b < a ? b : a);
    tpu_host_store_i64(dst, dt, r);
  }
}
tpu_status_t tpu_host_k_scatter(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* idx,
                                const tpu_host_view_t* src, const tpu_host_view_t* out) {
  int dim = (int)op->i0, add = (int)op->i1;
  if (x->data != out->data) TPU_RETURN_IF_ERROR(tpu_host_k_copy(x, out));
  if (add == 1 && dim == 1 && tpu_host_scatter_add_rows(idx, src, out)) return TPU_OK; /* maxpool.c: rows in parallel */
  int64_t i[TPU_MAX_DIMS] = {0}, d[TPU_MAX_DIMS];
  if (numel_of(idx) == 0) return TPU_OK;
  size_t es = tpu_dtype_size(out->dtype);
  int64_t dsize = out->rank ? out->sizes[dim] : 1;
  if (out->rank == 1 && idx->dtype == TPU_DTYPE_I64 && src->dtype == out->dtype && add <= 1) { /* flat */
    const int64_t* ip = (const int64_t*)idx->data;
    int64_t n = idx->sizes[0], is = idx->strides[0], ss = src->strides[0] * (int64_t)es, os = out->strides[0] * (int64_t)es;
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = ip[j * is];
      TPU_RETURN_IF_ERROR(check_index(&k, dsize, dim));
      if (add) accumulate(out->data + k * os, src->data + j * ss, out->dtype);
      else memcpy(out->data + k * os, src->data + j * ss, es);
    }
    return TPU_OK;
  }
  do {
    int64_t k = tpu_host_load_i64(at(idx, i), idx->dtype);
    TPU_RETURN_IF_ERROR(check_index(&k, dsize, dim));
    memcpy(d, i, sizeof(d));
    if (out->rank) d[dim] = k;
    for (int q = 0; q < out->rank; ++q)
      if (q != dim && d[q] >= out->sizes[q]) return TPU_ERR(INDEX_ERROR, "scatter: index shape exceeds the output");
    if (add == 1) accumulate(at(out, d), at(src, i), out->dtype);
    else if (add >= 2) scatter_combine(at(out, d), at(src, i), out->dtype, add);
    else memcpy(at(out, d), at(src, i), es);
  } while (next_index(i, idx->sizes, idx->rank));
  return TPU_OK;
}
/* x: [D_0..D_{n-1}, rest...]; idx_j: shape S (all equal); vals: [S..., rest...]. */
tpu_status_t tpu_host_k_index_put(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* vals,
                                  int n_idx, const tpu_host_view_t* idx, const tpu_host_view_t* out) {
  int acc = (int)op->i1;
  if (x->data != out->data) TPU_RETURN_IF_ERROR(tpu_host_k_copy(x, out));
  const tpu_host_view_t* s0 = &idx[0];
  int64_t si[TPU_MAX_DIMS] = {0};
  if (numel_of(s0) == 0) return TPU_OK;
  int rest = out->rank - n_idx, srank = s0->rank;
  int64_t es = (int64_t)tpu_dtype_size(out->dtype), ves = (int64_t)tpu_dtype_size(vals->dtype);
  /* the block each index tuple writes as one run in both tensors, same dtype: typed loops */
  int64_t dn = 0, dst_ = 0, vn = 0, vst = 0;
  int runs = vals->dtype == out->dtype && flat_run(out, n_idx, -1, &dn, &dst_) && flat_run(vals, srank, -1, &vn, &vst) &&
             dn == vn && (!acc || run_move(NULL, 1, NULL, 1, out->dtype, 0, 1));
  if (runs && n_idx == 1 && srank == 1 && idx[0].dtype == TPU_DTYPE_I64) {
    /* one i64 index vector over rows (embedding / embedding_bag backward, x[idx] += v): the
     * general loop's index arithmetic per row costs more than moving a short row */
    const int64_t* ip = (const int64_t*)(const void*)idx[0].data;
    const int64_t n = s0->sizes[0], is = idx[0].strides[0], os = out->strides[0] * es, vs = vals->strides[0] * ves;
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = ip[j * is];
      TPU_RETURN_IF_ERROR(check_index(&k, out->sizes[0], 0));
      run_move(out->data + k * os, dst_, vals->data + j * vs, vst, out->dtype, dn, acc);
    }
    return TPU_OK;
  }
  int64_t ies[TPU_MAX_DIMS];
  for (int j = 0; j < n_idx && j < TPU_MAX_DIMS; ++j) ies[j] = (int64_t)tpu_dtype_size(idx[j].dtype);
  do {
    int64_t off = 0, voff = 0;
    for (int j = 0; j < n_idx; ++j) {
      int64_t io = 0;
      for (int q = 0; q < srank; ++q) io += si[q] * idx[j].strides[q];
      const char* ip = idx[j].data + io * ies[j];
      int64_t k;
      if (idx[j].dtype == TPU_DTYPE_I64) memcpy(&k, ip, 8);
      else k = tpu_host_load_i64(ip, idx[j].dtype);
      TPU_RETURN_IF_ERROR(check_index(&k, out->sizes[j], j));
      off += k * out->strides[j];
    }
    for (int q = 0; q < srank; ++q) voff += si[q] * vals->strides[q];
    if (runs) {
      run_move(out->data + off * es, dst_, vals->data + voff * ves, vst, out->dtype, dn, acc);
      continue;
    }
    tpu_host_view_t dst, src;
    dst.data = out->data + off * es; dst.dtype = out->dtype; dst.rank = rest;
    src.data = vals->data + voff * ves; src.dtype = vals->dtype; src.rank = rest;
    for (int q = 0; q < rest; ++q) {
      dst.sizes[q] = src.sizes[q] = out->sizes[n_idx + q];
      dst.strides[q] = out->strides[n_idx + q]; src.strides[q] = vals->strides[srank + q];
    }
    if (!acc) TPU_RETURN_IF_ERROR(tpu_host_k_copy(&src, &dst));
    else {
      int64_t ri[TPU_MAX_DIMS] = {0};
      if (numel_of(&dst)) do {
        char tmp[8];
        tpu_host_store_f64(tmp, dst.dtype, 0);
        if (tpu_dtype_is_floating(dst.dtype)) tpu_host_store_f64(tmp, dst.dtype, tpu_host_load_f64(at(&src, ri), src.dtype));
        else tpu_host_store_i64(tmp, dst.dtype, tpu_host_load_i64(at(&src, ri), src.dtype));
        accumulate(at(&dst, ri), tmp, dst.dtype);
      } while (next_index(ri, dst.sizes, rest));
    }
  } while (next_index(si, s0->sizes, srank));
  return TPU_OK;
}

/* ---- random numbers: Philox4x32-10, counter (offset, i / 4), lane i % 4 (element i of
 * the output in row-major order, whatever its strides). Uniform floats take the top 24
 * bits (53 bits from two blocks for f64); normals are Box-Muller pairs, in float math
 * for f32/f16/bf16 outputs and double math for f64. */
typedef struct { const tpu_host_view_t* out; uint64_t seed, offset; int normal; } rng_job_t;
static int row_major(const tpu_host_view_t* v) {
  int64_t s = 1;
  for (int d = v->rank - 1; d >= 0; --d) {
    if (v->sizes[d] != 1 && v->strides[d] != s) return 0;
    s *= v->sizes[d];
  }
  return 1;
}
static char* rng_at(const tpu_host_view_t* o, int contig, int64_t lin) {
  if (contig) return o->data + lin * (int64_t)tpu_dtype_size(o->dtype);
  int64_t idx[TPU_MAX_DIMS];
  for (int d = o->rank - 1; d >= 0; --d) { idx[d] = lin % o->sizes[d]; lin /= o->sizes[d]; }
  return at(o, idx);
}
static void rng_worker(void* ctx, int64_t b, int64_t e) {
  rng_job_t* J = ctx;
  const tpu_host_view_t* o = J->out;
  int dbl = o->dtype == TPU_DTYPE_F64, contig = row_major(o);
  int64_t total = numel_of(o);
  for (int64_t g = b; g < e; ++g) {           /* g = group of 4 (uniform) or 2 pairs (normal) */
    uint32_t r[4];
    int nl = (int)TPU_MIN(4, total - g * 4);
    tpu_philox4x32_10(J->seed, J->offset, (uint64_t)g, r);
    if (J->normal >= 2) { /* integer modes: 2 = 32 random bits, 3 = 64 random bits (as int64) */
      int64_t iv[4];
      if (J->normal == 2) for (int l = 0; l < 4; ++l) iv[l] = (int64_t)r[l];
      else {
        uint32_t r2[4];
        tpu_philox4x32_10(J->seed, J->offset ^ 0x8000000000000000ull, (uint64_t)g, r2);
        for (int l = 0; l < 4; ++l) iv[l] = (int64_t)(((uint64_t)r[l] << 32) | r2[l]);
      }
      for (int l = 0; l < nl; ++l) tpu_host_store_i64(rng_at(o, contig, g * 4 + l), o->dtype, iv[l]);
      continue;
    }
    if (!dbl) {
      float f[4];
      for (int l = 0; l < 4; ++l) f[l] = (float)(r[l] >> 8) * (1.0f / 16777216.0f);
      if (J->normal) { /* Box-Muller on (f0, f1) and (f2, f3); 1 - f is in (0, 1] */
        for (int l = 0; l < 4; l += 2) {
          float rad = sqrtf(-2.0f * logf(1.0f - f[l])), th = 6.2831853071795865f * f[l + 1];
          f[l] = rad * cosf(th); f[l + 1] = rad * sinf(th);
        }
      }
      if (contig && o->dtype == TPU_DTYPE_F32) { memcpy(o->data + g * 16, f, (size_t)nl * 4); continue; }
      for (int l = 0; l < nl; ++l) {
        float x = f[l];
        if (!J->normal) { /* uniform in [0, 1) must stay < 1 after rounding to the output dtype */
          if (o->dtype == TPU_DTYPE_BF16 && tpu_bf16_to_f32(tpu_f32_to_bf16(x)) >= 1.0f) x = 0.99609375f;
          if (o->dtype == TPU_DTYPE_F16 && tpu_f16_to_f32(tpu_f32_to_f16(x)) >= 1.0f) x = 0.99951171875f;
        }
        tpu_host_store_f64(rng_at(o, contig, g * 4 + l), o->dtype, x);
      }
      continue;
    }
    double v[4];
    v[0] = (double)((((uint64_t)r[0] << 32) | r[1]) >> 11) * (1.0 / 9007199254740992.0);
    v[1] = (double)((((uint64_t)r[2] << 32) | r[3]) >> 11) * (1.0 / 9007199254740992.0);
    tpu_philox4x32_10(J->seed, J->offset ^ 0x8000000000000000ull, (uint64_t)g, r);
    v[2] = (double)((((uint64_t)r[0] << 32) | r[1]) >> 11) * (1.0 / 9007199254740992.0);
    v[3] = (double)((((uint64_t)r[2] << 32) | r[3]) >> 11) * (1.0 / 9007199254740992.0);
    if (J->normal) { /* Box-Muller on (v0, v1) and (v2, v3) */
      for (int l = 0; l < 4; l += 2) {
        double u1 = 1.0 - v[l], u2 = v[l + 1];
        double rad = sqrt(-2.0 * log(u1));
        v[l] = rad * cos(2.0 * M_PI * u2); v[l + 1] = rad * sin(2.0 * M_PI * u2);
      }
    }
    if (contig) { memcpy(o->data + g * 32, v, (size_t)nl * 8); continue; }
    for (int l = 0; l < nl; ++l) tpu_host_store_f64(rng_at(o, contig, g * 4 + l), o->dtype, v[l]);
  }
}
tpu_status_t tpu_host_k_rng(const tpu_ir_op_t* op, uint64_t seed, uint64_t offset, const tpu_host_view_t* out) {
  if (op->i0 >= 2 ? out->dtype != TPU_DTYPE_I64 : !tpu_dtype_is_floating(out->dtype))
    return TPU_ERR(UNSUPPORTED, "rng: %s output required", op->i0 >= 2 ? "int64" : "floating");
  rng_job_t J = {out, seed, offset, (int)op->i0};
  int64_t groups = (numel_of(out) + 3) / 4;
  tpu_pool_parallel_for(groups, 4096, rng_worker, &J);
  return TPU_OK;
}

/* ---- stable sort along a dim (NaN sorts as the largest value, as PyTorch) */
typedef struct { double v; int64_t iv; int64_t i; } sort_item_t;
static int g_sort_desc, g_sort_float;
static int cmp_items(const sort_item_t* a, const sort_item_t* b) {
  int c;
  if (g_sort_float) {
    int an = a->v != a->v, bn = b->v != b->v;
    if (an || bn) c = an - bn;
    else c = (a->v > b->v) - (a->v < b->v);
  } else c = (a->iv > b->iv) - (a->iv < b->iv);
  if (g_sort_desc) c = -c;
  return c ? c : (a->i > b->i) - (a->i < b->i);
}
static void merge_sort(sort_item_t* a, sort_item_t* tmp, int64_t n) {
  if (n < 2) return;
  int64_t h = n / 2;
  merge_sort(a, tmp, h); merge_sort(a + h, tmp, n - h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = cmp_items(&a[j], &a[i]) < 0 ? a[j++] : a[i++];
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, (size_t)n * sizeof(*a));
}
tpu_status_t tpu_host_k_sort(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  int dim = (int)op->i0;
  int64_t n = x->rank ? x->sizes[dim] : 1, st = x->rank ? x->strides[dim] : 0;
  int64_t ost = out->rank ? out->strides[dim] : 0;
  if (numel_of(x) == 0) return TPU_OK;
  sort_item_t* items = malloc((size_t)n * 2 * sizeof(sort_item_t));
  if (!items) return TPU_ERR(OUT_OF_MEMORY, "sort: out of memory");
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* guards the comparator's globals */
  pthread_mutex_lock(&mu);
  g_sort_desc = (int)op->i1; g_sort_float = tpu_dtype_is_floating(x->dtype);
  int64_t idx[TPU_MAX_DIMS] = {0}, sizes[TPU_MAX_DIMS];
  memcpy(sizes, x->sizes, sizeof(sizes));
  if (x->rank) sizes[dim] = 1;
  size_t es = tpu_dtype_size(x->dtype), oes = tpu_dtype_size(out->dtype);
  do {
    const char* p = at(x, idx);
    char* q = at(out, idx);
    for (int64_t i = 0; i < n; ++i) {
      items[i].i = i;
      if (g_sort_float) items[i].v = tpu_host_load_f64(p + i * st * (int64_t)es, x->dtype);
      else items[i].iv = tpu_host_load_i64(p + i * st * (int64_t)es, x->dtype);
    }
    merge_sort(items, items + n, n);
    for (int64_t i = 0; i < n; ++i) {
      char* d = q + i * ost * (int64_t)oes;
      if (op->opcode == TPU_IR_ARGSORT) tpu_host_store_i64(d, out->dtype, items[i].i);
      else memcpy(d, p + items[i].i * st * (int64_t)es, es);
    }
  } while (next_index(idx, sizes, x->rank));
  pthread_mutex_unlock(&mu);
  free(items);
  return TPU_OK;
}
