/* embed.c — embedding_bag sum / mean / max (embed.h). Bags are found once, by the offset2bag result (find_bags:
 * the count of offsets at or before each position, as PyTorch's make_offset2bag); the other results read
 * offset2bag, which is non-decreasing, so bag b's ids are one run of positions. Forward kernels split bags over
 * the pool, the weight gradient splits table rows (each part scans every id and adds only its own rows): either
 * way every output element sums its terms in id order, so results do not depend on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "drivers/host/embed.h"

enum { EB_MEAN = 1, EB_MAX = 2, EB_PSW = 4, EB_LAST = 8, EB_SCALE = 8, EB_PSW_GRAD = 16 };
enum { EB_ROWS = 0, EB_O2B = 1, EB_SIZE = 2, EB_ARGMAX = 3 };

static int is_index(int dt) { return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32; }
static int is_float(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16;
}
static inline int64_t ld_at(const tpu_host_view_t* v, int64_t at) {
  return v->dtype == TPU_DTYPE_I64 ? ((const int64_t*)(const void*)v->data)[at] : ((const int32_t*)(const void*)v->data)[at];
}
static inline int64_t ld_i(const tpu_host_view_t* v, int64_t j) { return ld_at(v, v->strides[0] * j); }
static inline void st_i(const tpu_host_view_t* v, int64_t at, int64_t x) {
  if (v->dtype == TPU_DTYPE_I64) ((int64_t*)(void*)v->data)[at] = x;
  else ((int32_t*)(void*)v->data)[at] = (int32_t)x;
}
/* element `at` (in elements) of a float view, exactly */
static inline double ld_e(const tpu_host_view_t* v, int64_t at) {
  switch (v->dtype) {
    case TPU_DTYPE_F32: return ((const float*)(const void*)v->data)[at];
    case TPU_DTYPE_BF16: return tpu_bf16_to_f32(((const uint16_t*)(const void*)v->data)[at]);
    case TPU_DTYPE_F16: return tpu_f16_to_f32(((const uint16_t*)(const void*)v->data)[at]);
    default: return ((const double*)(const void*)v->data)[at];
  }
}
static inline double ld_f(const tpu_host_view_t* v, int64_t j) { return ld_e(v, v->strides[0] * j); }
static inline void st_e(const tpu_host_view_t* v, int64_t at, double x) {
  switch (v->dtype) {
    case TPU_DTYPE_F32: ((float*)(void*)v->data)[at] = (float)x; break;
    case TPU_DTYPE_BF16: ((uint16_t*)(void*)v->data)[at] = tpu_f32_to_bf16((float)x); break;
    case TPU_DTYPE_F16: ((uint16_t*)(void*)v->data)[at] = tpu_f32_to_f16((float)x); break;
    default: ((double*)(void*)v->data)[at] = x;
  }
}
/* a value rounded to a 16-bit result dtype and back (the sum PyTorch divides for mean); others as they are */
static inline float round16(int dt, float x) {
  return dt == TPU_DTYPE_BF16 ? tpu_bf16_to_f32(tpu_f32_to_bf16(x)) : dt == TPU_DTYPE_F16 ? tpu_f16_to_f32(tpu_f32_to_f16(x)) : x;
}
static inline int own_rows(const tpu_host_view_t* v, int dt) { /* a contiguous [R, D] of dtype dt */
  return v->dtype == dt && (v->sizes[0] <= 1 || v->strides[0] == v->sizes[1]) && (v->sizes[1] <= 1 || v->strides[1] == 1);
}
/* parts to split `work` element-steps into: one below ~32k, else one per pool thread */
static int64_t eb_parts(int64_t work, int64_t units) {
  int64_t p = work < 32768 ? 1 : tpu_pool_num_threads();
  return p < units ? p : units > 0 ? units : 1;
}
static tpu_status_t bad_id(int64_t i, int64_t k, int64_t nw) {
  return TPU_ERR(INVALID_ARGUMENT, "Index %lld of input takes value %lld which is not in the valid range [0, %lld)",
                 (long long)i, (long long)k, (long long)nw);
}
static tpu_status_t oob(int64_t raw, int64_t nw) {
  return TPU_ERR(INDEX_ERROR, "index %lld is out of bounds for dimension 0 with size %lld", (long long)raw, (long long)nw);
}
static tpu_status_t oom(void) { return TPU_ERR(OUT_OF_MEMORY, "host: embedding_bag scratch"); }

/* ---- the one bag rule: offset2bag [N] from the first B offsets (EB_O2B). Checks offsets[0] == 0 (when there
 * are bags), every counted offset in [0, N] and, with include_last_offset (last), offsets[B] <= N as PyTorch's
 * CPU kernel does; otherwise offsets[B] is not read: ids after it stay in the last bag, as in PyTorch's CPU
 * kernels (tests/test_ops_misc.py last_offset_tail). Without bags every entry is 0. */
static tpu_status_t find_bags(const tpu_host_view_t* off, int64_t B, int64_t N, int last, const tpu_host_view_t* out) {
  int64_t* cnt = calloc((size_t)(N + 1), sizeof(int64_t));
  if (!cnt) return oom();
  tpu_status_t st = TPU_OK;
  for (int64_t k = 0; k < B && !st; ++k) {
    const int64_t o = ld_i(off, k);
    if (k == 0 && o != 0)
      st = TPU_ERR(INVALID_ARGUMENT, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                   "from position 0. However, got %lld", (long long)o);
    else if (o < 0 || o > N)
      st = TPU_ERR(INVALID_ARGUMENT, "embedding_bag: offsets[%lld] = %lld is outside [0, %lld] (the number of indices)",
                   (long long)k, (long long)o, (long long)N);
    else cnt[o] += 1;
  }
  if (!st && last && off->sizes[0] > B && ld_i(off, B) > N)
    st = TPU_ERR(INVALID_ARGUMENT, "offsets[-1] can not be greater than input's length %lld but got offsets[-1] of %lld",
                 (long long)N, (long long)ld_i(off, B));
  int64_t c = -1;
  for (int64_t i = 0; i < N && !st; ++i) { c += cnt[i]; st_i(out, i * out->strides[0], c > 0 ? c : 0); }
  free(cnt);
  return st;
}
/* the forward's serial checks: ids in [0, nw) (PyTorch's message for the mode) and offset2bag non-decreasing in
 * [0, B) (it is EB_O2B's result; anything else is a malformed graph) */
static tpu_status_t check_fwd(const tpu_host_view_t* I, const tpu_host_view_t* O2B, int64_t nw, int64_t B, int max) {
  const int64_t N = I->sizes[0];
  int64_t prev = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t k = ld_i(I, i), b = ld_i(O2B, i);
    if (k < 0 || k >= nw)
      return max ? TPU_ERR(INVALID_ARGUMENT, "embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be %lld",
                           (long long)k) : bad_id(i, k, nw);
    if (B > 0 && (b < prev || b >= B)) return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG offset2bag not from EMBEDDING_BAG (ir.h)");
    prev = b;
  }
  return TPU_OK;
}
/* first position of bag b in a non-decreasing offset2bag */
static int64_t bag_start(const tpu_host_view_t* O2B, int64_t b) {
  int64_t lo = 0, hi = O2B->sizes[0];
  while (lo < hi) { const int64_t m = lo + (hi - lo) / 2; if (ld_i(O2B, m) < b) lo = m + 1; else hi = m; }
  return lo;
}

typedef struct {
  const tpu_host_view_t *W, *I, *O2B, *P, *out, *aux; /* aux: max_indices or bag_size */
  int64_t B, D, nw, pad, parts;
  int mode, fast; /* fast: 1 / 2 rows_fast_i64 / _i32 apply */
  double* scratch; /* [parts, 2 D] */
} eb_job_t;
/* fn(job, part) for parts [0, parts) on the pool, each with its own 2 D doubles of scratch (no allocation in
 * the parts: a failure is reported here) */
static tpu_status_t eb_run(int64_t parts, int64_t D, double** scratch, tpu_pool_fn fn, void* job) {
  *scratch = malloc((size_t)(parts * 2 * (D ? D : 1)) * sizeof(double));
  if (!*scratch) return oom();
  tpu_pool_parallel_for(parts, 1, fn, job);
  free(*scratch);
  *scratch = NULL;
  return TPU_OK;
}

/* Bodies for the math dtype T (float for f32 / bf16 / f16, double for f64). row_T: row r of a 2-D float view,
 * in place when it is T with unit stride, else converted into tmp [D]. */
#define EB_TYPED(T, SUF, NATIVE)                                                                                       \
  static const T* row_##SUF(const tpu_host_view_t* v, int64_t r, T* tmp) {                                             \
    const int64_t D = v->sizes[1], s0 = v->strides[0] * r, s1 = v->strides[1];                                        \
    if (v->dtype == NATIVE && s1 == 1) return (const T*)(const void*)v->data + s0;                                     \
    for (int64_t d = 0; d < D; ++d) tmp[d] = (T)ld_e(v, s0 + d * s1);                                                  \
    return tmp;                                                                                                        \
  }                                                                                                                    \
  /* a 16-wide row (DLRM's size) with a constant trip count: no run-time alias check or remainder loop */             \
  static inline void add16_##SUF(T* restrict a, const T* restrict r) { for (int d = 0; d < 16; ++d) a[d] += r[d]; }    \
  /* sum / mean rows of bags [b0, b1): acc [D] over the bag's ids in order, then stored */                              \
  static void rows_##SUF(const eb_job_t* J, int64_t b0, int64_t b1, T* tmp, T* acc0) {                                 \
    const int64_t D = J->D, N = J->I->sizes[0], odt = J->out->dtype;                                                  \
    const int own = own_rows(J->out, NATIVE);                                                                          \
    int64_t p = bag_start(J->O2B, b0);                                                                                 \
    for (int64_t b = b0; b < b1; ++b) {                                                                                \
      T* acc = own ? (T*)(void*)J->out->data + b * D : acc0;                                                           \
      memset(acc, 0, (size_t)D * sizeof(T));                                                                           \
      int64_t c = 0;                                                                                                   \
      for (; p < N && ld_i(J->O2B, p) == b; ++p) {                                                                     \
        const int64_t k = ld_i(J->I, p);                                                                               \
        if (k == J->pad) continue;                                                                                     \
        ++c;                                                                                                           \
        const T* r = row_##SUF(J->W, k, tmp);                                                                          \
        if (J->P) { const T s = (T)ld_f(J->P, p); for (int64_t d = 0; d < D; ++d) acc[d] += r[d] * s; }               \
        else if (D == 16) add16_##SUF(acc, r);                                                                         \
        else for (int64_t d = 0; d < D; ++d) acc[d] += r[d];                                                           \
      }                                                                                                                \
      const T den = sizeof(T) == 4 ? (T)round16((int)odt, (float)(c > 1 ? c : 1)) : (T)(c > 1 ? c : 1);             \
      if (J->mode == EB_MEAN) /* a 16-bit result: PyTorch rounds the sum and the count to it, then divides */          \
        for (int64_t d = 0; d < D; ++d) acc[d] = (sizeof(T) == 4 ? (T)round16((int)odt, (float)acc[d]) : acc[d]) / den; \
      if (!own)                                                                                                        \
        for (int64_t d = 0; d < D; ++d) st_e(J->out, b * J->out->strides[0] + d * J->out->strides[1], (double)acc[d]); \
    }                                                                                                                  \
  }                                                                                                                    \
  /* max_indices of bags [b0, b1): per column the first non-padding id, replaced by a later one only when its value  \
   * is greater (PyTorch's CPU loop: NaN never replaces and is kept when first); 0 for an empty bag */                 \
  static void argmax_##SUF(const eb_job_t* J, int64_t b0, int64_t b1, T* tmp, T* cur) {                                \
    const int64_t D = J->D, N = J->I->sizes[0];                                                                        \
    const tpu_host_view_t* mi = J->out;                                                                                \
    int64_t p = bag_start(J->O2B, b0);                                                                                 \
    for (int64_t b = b0; b < b1; ++b) {                                                                                \
      const int64_t at = b * mi->strides[0];                                                                           \
      for (int64_t d = 0; d < D; ++d) st_i(mi, at + d * mi->strides[1], 0);                                           \
      int first = 1;                                                                                                   \
      for (; p < N && ld_i(J->O2B, p) == b; ++p) {                                                                     \
        const int64_t k = ld_i(J->I, p);                                                                               \
        if (k == J->pad) continue;                                                                                     \
        const T* r = row_##SUF(J->W, k, tmp);                                                                          \
        for (int64_t d = 0; d < D; ++d)                                                                                \
          if (first || r[d] > cur[d]) { cur[d] = r[d]; st_i(mi, at + d * mi->strides[1], k); }                         \
        first = 0;                                                                                                     \
      }                                                                                                                \
    }                                                                                                                  \
  }
EB_TYPED(float, f32, TPU_DTYPE_F32)
EB_TYPED(double, f64, TPU_DTYPE_F64)
#undef EB_TYPED

/* ---- fast paths for the common layout (DLRM's): an f32 table with unit column stride, an own f32 result / f32
 * accumulator, contiguous ids and offset2bag of one index dtype, f32 per-sample weights. Same bits as the
 * bodies above (the same operations in the same order; x / 1 and x * 1 are exact). Rows are gathered from a
 * table that the optimizer step has usually pushed out of the near caches, so the row EB_AHEAD ids ahead is
 * prefetched: the loop is bound by memory latency, not arithmetic. */
enum { EB_AHEAD = 12 };
static int vec1(const tpu_host_view_t* v) { return v->rank == 1 && (v->sizes[0] <= 1 || v->strides[0] == 1); }
static int fast_idx(const tpu_host_view_t* I, const tpu_host_view_t* O2B) {
  return vec1(I) && vec1(O2B) && I->dtype == O2B->dtype;
}
static inline void eb_prefetch_row(const float* r, int64_t D, int rw) {
  if (rw) { __builtin_prefetch(r, 1); if (D > 16) __builtin_prefetch(r + D - 1, 1); }
  else { __builtin_prefetch(r, 0); if (D > 16) __builtin_prefetch(r + D - 1, 0); }
}
static inline void axpy16(float* restrict a, const float* restrict r, float s) { for (int d = 0; d < 16; ++d) a[d] += r[d] * s; }
static inline void axpyn(float* restrict a, const float* restrict r, float s, int64_t D) { for (int64_t d = 0; d < D; ++d) a[d] += r[d] * s; }
static inline void addn(float* restrict a, const float* restrict r, int64_t D) { for (int64_t d = 0; d < D; ++d) a[d] += r[d]; }
#define EB_FAST(IT, IS)                                                                                                \
  /* sum / mean rows of bags [b0, b1) into the own f32 result */                                                      \
  static void rows_fast_##IS(const eb_job_t* J, int64_t b0, int64_t b1) {                                              \
    const IT *ids = (const IT*)(const void*)J->I->data, *o2b = (const IT*)(const void*)J->O2B->data;                  \
    const float* W = (const float*)(const void*)J->W->data;                                                            \
    const float* P = J->P ? (const float*)(const void*)J->P->data : NULL;                                              \
    float* out = (float*)(void*)J->out->data;                                                                          \
    const int64_t D = J->D, N = J->I->sizes[0], ws = J->W->strides[0], pad = J->pad;                                   \
    int64_t p = bag_start(J->O2B, b0);                                                                                 \
    for (int64_t b = b0; b < b1; ++b) {                                                                                \
      float* acc = out + b * D;                                                                                        \
      memset(acc, 0, (size_t)D * sizeof(float));                                                                       \
      int64_t c = 0;                                                                                                   \
      for (; p < N && o2b[p] == b; ++p) {                                                                              \
        if (p + EB_AHEAD < N) eb_prefetch_row(W + ids[p + EB_AHEAD] * ws, D, 0);                                       \
        const int64_t k = ids[p];                                                                                      \
        if (k == pad) continue;                                                                                        \
        ++c;                                                                                                           \
        const float* r = W + k * ws;                                                                                   \
        if (P) { if (D == 16) axpy16(acc, r, P[p]); else axpyn(acc, r, P[p], D); }                                     \
        else if (D == 16) add16_f32(acc, r);                                                                           \
        else addn(acc, r, D);                                                                                          \
      }                                                                                                                \
      if (J->mode == EB_MEAN) {                                                                                        \
        const float den = (float)(c > 1 ? c : 1);                                                                      \
        for (int64_t d = 0; d < D; ++d) acc[d] /= den;                                                                 \
      }                                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
  /* the forward's checks (check_fwd) for these layouts */                                                             \
  static tpu_status_t check_fast_##IS(const tpu_host_view_t* I, const tpu_host_view_t* O2B, int64_t nw, int64_t B,     \
                                      int max) {                                                                       \
    const IT *ids = (const IT*)(const void*)I->data, *o2b = (const IT*)(const void*)O2B->data;                        \
    const int64_t N = I->sizes[0];                                                                                     \
    int bad = 0;                                                                                                       \
    IT prev = 0;                                                                                                       \
    for (int64_t i = 0; i < N; ++i) { /* branch-free: one pass, the error found again below */                       \
      bad |= (uint64_t)(int64_t)ids[i] >= (uint64_t)nw;                                                                \
      bad |= B > 0 && (o2b[i] < prev || o2b[i] >= B);                                                                  \
      prev = o2b[i];                                                                                                   \
    }                                                                                                                  \
    return bad ? check_fwd(I, O2B, nw, B, max) : TPU_OK;                                                               \
  }
EB_FAST(int64_t, i64)
EB_FAST(int32_t, i32)
#undef EB_FAST

static void fwd_worker(void* ctx, int64_t t0, int64_t t1) {
  const eb_job_t* J = ctx;
  const int64_t D = J->D;
  const int f64 = J->W->dtype == TPU_DTYPE_F64;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t b0 = J->B * t / J->parts, b1 = J->B * (t + 1) / J->parts;
    double* buf = J->scratch + t * 2 * (D ? D : 1);
    if (J->mode == EB_MAX) {
      if (f64) argmax_f64(J, b0, b1, buf, buf + D); else argmax_f32(J, b0, b1, (float*)buf, (float*)buf + D);
    } else if (J->fast) {
      if (J->fast == 1) rows_fast_i64(J, b0, b1); else rows_fast_i32(J, b0, b1);
    } else if (f64) rows_f64(J, b0, b1, buf, buf + D);
    else rows_f32(J, b0, b1, (float*)buf, (float*)buf + D);
  }
}
/* max rows from max_indices: weight[mi[b, d], d], 0 for bags without counted ids (bag_size 0) */
static tpu_status_t max_rows(const eb_job_t* J) {
  const tpu_host_view_t *W = J->W, *mi = J->aux, *bs = J->I, *out = J->out;
  for (int64_t b = 0; b < J->B; ++b) {
    const int empty = ld_i(bs, b) <= 0;
    for (int64_t d = 0; d < J->D; ++d) {
      const int64_t k = ld_at(mi, b * mi->strides[0] + d * mi->strides[1]);
      if (empty) { st_e(out, b * out->strides[0] + d * out->strides[1], 0.0); continue; } /* (an empty table too) */
      if (k < 0 || k >= J->nw) return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG max_indices not from EMBEDDING_BAG (ir.h)");
      st_e(out, b * out->strides[0] + d * out->strides[1], ld_e(W, k * W->strides[0] + d * W->strides[1]));
    }
  }
  return TPU_OK;
}

static tpu_status_t embed_fwd(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const int what = (int)((op->i1 >> 4) & 3), psw = (op->i1 & EB_PSW) != 0, mode = (int)(op->i1 & 3);
  const int64_t pad = op->a[0][0];
  if (mode == 3 || (what == EB_ARGMAX && mode != EB_MAX))
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG mode (ir.h)");
  if (what == EB_O2B) {
    const tpu_host_view_t *I = &xs[0], *O = &xs[1];
    if (n != 2 || I->rank != 1 || O->rank != 1 || !is_index(I->dtype) || !is_index(O->dtype) || out->rank != 1 ||
        !is_index(out->dtype) || out->sizes[0] != I->sizes[0])
      return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG offset2bag operands (ir.h)");
    const int64_t B = O->sizes[0] - ((op->i1 & EB_LAST) ? 1 : 0);
    return find_bags(O, B > 0 ? B : 0, I->sizes[0], (op->i1 & EB_LAST) != 0, out);
  }
  if (what == EB_SIZE) { /* bag_size [m]: the non-padding ids per bag (offsets read for B only; entries past B 0) */
    const tpu_host_view_t *I = &xs[0], *O2B = &xs[1];
    const int64_t N = I->sizes[0], B0 = xs[2].sizes[0] - ((op->i1 & EB_LAST) ? 1 : 0), B = B0 > 0 ? B0 : 0, m = out->sizes[0];
    if (n != 3 || xs[2].rank != 1 || I->rank != 1 || O2B->rank != 1 || !is_index(I->dtype) || !is_index(O2B->dtype) || O2B->sizes[0] != N ||
        out->rank != 1 || !is_index(out->dtype) || B < 0 || m < B)
      return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG bag_size operands (ir.h)");
    int64_t* cnt = calloc((size_t)(m ? m : 1), sizeof(int64_t));
    if (!cnt) return oom();
    for (int64_t i = 0; i < N && B > 0; ++i) {
      const int64_t b = ld_i(O2B, i);
      if (b < 0 || b >= B) { free(cnt); return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG offset2bag not from EMBEDDING_BAG (ir.h)"); }
      if (ld_i(I, i) != pad) cnt[b] += 1;
    }
    for (int64_t j = 0; j < m; ++j) st_i(out, j * out->strides[0], cnt[j]);
    free(cnt);
    return TPU_OK;
  }
  const tpu_host_view_t* W = &xs[0];
  if (n < 3 || W->rank != 2 || !is_float(W->dtype) || out->rank != 2 || out->sizes[1] != W->sizes[1])
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG operands (ir.h)");
  eb_job_t J = {.W = W, .out = out, .B = out->sizes[0], .D = W->sizes[1], .nw = W->sizes[0], .pad = pad, .mode = mode};
  if (what == EB_ROWS && mode == EB_MAX) { /* (weight, max_indices [B, D], bag_size [>= B]) */
    J.aux = &xs[1]; J.I = &xs[2];
    if (n != 3 || !is_float(out->dtype) || (W->dtype == TPU_DTYPE_F64) != (out->dtype == TPU_DTYPE_F64) ||
        xs[1].rank != 2 || !is_index(xs[1].dtype) || xs[1].sizes[0] != J.B || xs[1].sizes[1] != J.D || xs[2].rank != 1 ||
        !is_index(xs[2].dtype) || xs[2].sizes[0] < J.B)
      return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG max rows operands (ir.h)");
    return max_rows(&J);
  }
  J.I = &xs[1]; J.O2B = &xs[2]; J.P = psw ? &xs[3] : NULL;
  const int64_t N = J.I->sizes[0];
  if (n != 3 + psw || J.I->rank != 1 || J.O2B->rank != 1 || !is_index(J.I->dtype) || !is_index(J.O2B->dtype) ||
      J.O2B->sizes[0] != N || (psw && (xs[3].rank != 1 || xs[3].sizes[0] != N || !is_float(xs[3].dtype))) ||
      (what == EB_ARGMAX ? !is_index(out->dtype)
                         : !is_float(out->dtype) || (W->dtype == TPU_DTYPE_F64) != (out->dtype == TPU_DTYPE_F64)))
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG rows operands (ir.h)");
  const int fidx = fast_idx(J.I, J.O2B) ? (J.I->dtype == TPU_DTYPE_I64 ? 1 : 2) : 0;
  if (fidx == 1) TPU_RETURN_IF_ERROR(check_fast_i64(J.I, J.O2B, J.nw, J.B, mode == EB_MAX));
  else if (fidx == 2) TPU_RETURN_IF_ERROR(check_fast_i32(J.I, J.O2B, J.nw, J.B, mode == EB_MAX));
  else TPU_RETURN_IF_ERROR(check_fwd(J.I, J.O2B, J.nw, J.B, mode == EB_MAX));
  if (what == EB_ROWS && W->dtype == TPU_DTYPE_F32 && (J.D <= 1 || W->strides[1] == 1) && own_rows(out, TPU_DTYPE_F32) &&
      (!J.P || (J.P->dtype == TPU_DTYPE_F32 && vec1(J.P))))
    J.fast = fidx;
  J.parts = eb_parts((N + J.B) * J.D, J.B); /* bags split evenly */
  return eb_run(J.parts, J.D, &J.scratch, fwd_worker, &J);
}

/* ---- backward: d weight [nw, D], table rows [k0, k1) per part */
typedef struct {
  const tpu_host_view_t *G, *I, *O2B, *BS, *P, *out;
  int64_t N, B, D, nw, pad, parts;
  int mode, scale, fast; /* fast: 1 / 2 bwd_fast_i64 / _i32 apply */
  void* acc;       /* [nw, D] of the math dtype: out itself or scratch */
  int64_t* cnt;    /* [nw] for scale_grad_by_freq */
  double* scratch; /* [parts, 2 D] */
} eb_bwd_t;

#define EB_BWD(T, SUF, NATIVE)                                                                                         \
  static void bwd_##SUF(const eb_bwd_t* J, int64_t k0, int64_t k1, T* tmp) {                                           \
    const int64_t D = J->D;                                                                                            \
    T* acc = (T*)J->acc;                                                                                               \
    memset(acc + k0 * D, 0, (size_t)((k1 - k0) * D) * sizeof(T));                                                     \
    if (J->scale) {                                                                                                    \
      memset(J->cnt + k0, 0, (size_t)(k1 - k0) * sizeof(int64_t));                                                     \
      for (int64_t i = 0; i < J->N; ++i) {                                                                             \
        const int64_t raw = ld_i(J->I, i), k = raw < 0 ? raw + J->nw : raw;                                            \
        if (k >= k0 && k < k1) J->cnt[k] += 1;                                                                         \
      }                                                                                                                \
    }                                                                                                                  \
    if (J->B == 0) return; /* every id adds a zero row */                                                              \
    for (int64_t i = 0; i < J->N; ++i) {                                                                               \
      const int64_t raw = ld_i(J->I, i), k = raw < 0 ? raw + J->nw : raw;                                              \
      if (k < k0 || k >= k1 || (J->pad >= 0 && raw == J->pad)) continue; /* pad -1: none */                            \
      const int64_t b = ld_i(J->O2B, i);                                                                               \
      const T* g = row_##SUF(J->G, b, tmp);                                                                            \
      T* a = acc + k * D;                                                                                              \
      if (J->mode != EB_MEAN && !J->P && !J->scale) {                                                                            \
        if (D == 16) add16_##SUF(a, g); else for (int64_t d = 0; d < D; ++d) a[d] += g[d];                             \
        continue;                                                                                                      \
      }                                                                                                                \
      const int64_t bs = J->mode == EB_MEAN ? ld_i(J->BS, b) : 1;                                                                 \
      const T den = (T)(bs > 1 ? bs : 1), s = J->P ? (T)ld_f(J->P, i) : 1, c = J->scale ? (T)J->cnt[k] : 1;            \
      for (int64_t d = 0; d < D; ++d) {                                                                                \
        T v = g[d];                                                                                                    \
        if (J->mode == EB_MEAN) v /= den;                                                                              \
        if (J->P) v *= s;                                                                                              \
        if (J->scale) v /= c;                                                                                          \
        a[d] += v;                                                                                                     \
      }                                                                                                                \
    }                                                                                                                  \
  }
EB_BWD(float, f32, TPU_DTYPE_F32)
EB_BWD(double, f64, TPU_DTYPE_F64)
#undef EB_BWD

/* the weight gradient's fast path (the layouts of the forward's, grad f32 with unit column stride): bwd_f32's
 * operations in its order, per id v = g / den * s / c with den = s = c = 1 where they do not apply (exact), the
 * accumulator row EB_AHEAD ids ahead prefetched for writing */
static inline void add16s(float* restrict a, const float* restrict g, float den, float s, float c) {
  for (int d = 0; d < 16; ++d) a[d] += g[d] / den * s / c;
}
static inline void addns(float* restrict a, const float* restrict g, float den, float s, float c, int64_t D) {
  for (int64_t d = 0; d < D; ++d) a[d] += g[d] / den * s / c;
}
#define EB_BWD_FAST(IT, IS)                                                                                            \
  static void bwd_fast_##IS(const eb_bwd_t* J, int64_t k0, int64_t k1) {                                               \
    const IT *ids = (const IT*)(const void*)J->I->data, *o2b = (const IT*)(const void*)J->O2B->data;                  \
    const float* G = (const float*)(const void*)J->G->data;                                                            \
    const float* P = J->P ? (const float*)(const void*)J->P->data : NULL;                                              \
    const int64_t D = J->D, N = J->N, nw = J->nw, gs = J->G->strides[0], pad = J->pad;                                \
    const int mean = J->mode == EB_MEAN, plain = !mean && !P && !J->scale;                                             \
    float* acc = (float*)J->acc;                                                                                       \
    memset(acc + k0 * D, 0, (size_t)((k1 - k0) * D) * sizeof(float));                                                 \
    if (J->scale) {                                                                                                    \
      memset(J->cnt + k0, 0, (size_t)(k1 - k0) * sizeof(int64_t));                                                     \
      for (int64_t i = 0; i < N; ++i) {                                                                                \
        const int64_t raw = ids[i], k = raw < 0 ? raw + nw : raw;                                                      \
        if (k >= k0 && k < k1) J->cnt[k] += 1;                                                                         \
      }                                                                                                                \
    }                                                                                                                  \
    if (J->B == 0) return;                                                                                             \
    for (int64_t i = 0; i < N; ++i) {                                                                                  \
      if (i + EB_AHEAD < N) {                                                                                          \
        const int64_t r2 = ids[i + EB_AHEAD], k2 = r2 < 0 ? r2 + nw : r2;                                              \
        if (k2 >= k0 && k2 < k1) eb_prefetch_row(acc + k2 * D, D, 1);                                                  \
      }                                                                                                                \
      const int64_t raw = ids[i], k = raw < 0 ? raw + nw : raw;                                                        \
      if (k < k0 || k >= k1 || (pad >= 0 && raw == pad)) continue;                                                     \
      const float* g = G + o2b[i] * gs;                                                                                \
      float* a = acc + k * D;                                                                                          \
      if (plain) { if (D == 16) add16_f32(a, g); else addn(a, g, D); continue; }                                       \
      const int64_t bs = mean ? ld_i(J->BS, o2b[i]) : 1;                                                               \
      const float den = (float)(bs > 1 ? bs : 1), sc = P ? P[i] : 1, c = J->scale ? (float)J->cnt[k] : 1;              \
      if (D == 16) add16s(a, g, den, sc, c); else addns(a, g, den, sc, c, D);                                          \
    }                                                                                                                  \
  }                                                                                                                    \
  /* embed_bwd_weight's checks for these layouts: one branch-free pass, the error found again by the loop there */    \
  static int bwd_bad_##IS(const eb_bwd_t* J) {                                                                         \
    const IT *ids = (const IT*)(const void*)J->I->data, *o2b = (const IT*)(const void*)J->O2B->data;                  \
    int bad = 0;                                                                                                       \
    for (int64_t i = 0; i < J->N; ++i) {                                                                               \
      const int64_t raw = ids[i];                                                                                      \
      bad |= (uint64_t)(raw < 0 ? raw + J->nw : raw) >= (uint64_t)J->nw;                                               \
      bad |= J->B > 0 && !(J->pad >= 0 && raw == J->pad) && (uint64_t)(int64_t)o2b[i] >= (uint64_t)J->B;              \
    }                                                                                                                  \
    return bad;                                                                                                        \
  }
EB_BWD_FAST(int64_t, i64)
EB_BWD_FAST(int32_t, i32)
#undef EB_BWD_FAST

static void bwd_store(const eb_bwd_t* J, int64_t k0, int64_t k1) {
  const int f64 = J->G->dtype == TPU_DTYPE_F64;
  for (int64_t k = k0; k < k1; ++k)
    for (int64_t d = 0; d < J->D; ++d)
      st_e(J->out, k * J->out->strides[0] + d * J->out->strides[1],
           f64 ? ((const double*)J->acc)[k * J->D + d] : ((const float*)J->acc)[k * J->D + d]);
}
/* max: grad[b, d] added to row max_indices[b, d] of column d for bags with bag_size > 0, in bag order */
static void bwd_max(const eb_bwd_t* J, int64_t k0, int64_t k1) {
  const int f64 = J->G->dtype == TPU_DTYPE_F64;
  const tpu_host_view_t *mi = J->I, *G = J->G;
  memset((char*)J->acc + k0 * J->D * (f64 ? 8 : 4), 0, (size_t)((k1 - k0) * J->D) * (f64 ? 8 : 4));
  for (int64_t b = 0; b < J->B; ++b) {
    if (ld_i(J->BS, b) <= 0) continue;
    for (int64_t d = 0; d < J->D; ++d) {
      const int64_t k = ld_at(mi, b * mi->strides[0] + d * mi->strides[1]);
      if (k < k0 || k >= k1) continue;
      const double g = ld_e(G, b * G->strides[0] + d * G->strides[1]);
      if (f64) ((double*)J->acc)[k * J->D + d] += g;
      else ((float*)J->acc)[k * J->D + d] += (float)g;
    }
  }
}
static void bwd_worker(void* ctx, int64_t t0, int64_t t1) {
  const eb_bwd_t* J = ctx;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t k0 = J->nw * t / J->parts, k1 = J->nw * (t + 1) / J->parts;
    double* buf = J->scratch + t * 2 * (J->D ? J->D : 1);
    if (J->mode == EB_MAX) bwd_max(J, k0, k1);
    else if (J->fast == 1) bwd_fast_i64(J, k0, k1);
    else if (J->fast == 2) bwd_fast_i32(J, k0, k1);
    else if (J->G->dtype == TPU_DTYPE_F64) bwd_f64(J, k0, k1, buf);
    else bwd_f32(J, k0, k1, (float*)buf);
    if (J->acc != J->out->data) bwd_store(J, k0, k1);
  }
}

/* d weight [nw, D] (sum / mean: grad[offset2bag[i]] / max(bag_size, 1) * psw[i] / the id's count, added to row
 * ids[i] in id order, padding ids adding nothing; max: embed.h) */
static tpu_status_t embed_bwd_weight(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const int mode = (int)(op->i1 & 3), psw = mode != EB_MAX && (op->i1 & EB_PSW), scale = mode != EB_MAX && (op->i1 & EB_SCALE);
  const tpu_host_view_t* G = &xs[0];
  eb_bwd_t J = {.G = G, .out = out, .B = G->sizes[0], .D = G->sizes[1], .nw = out->sizes[0], .pad = op->a[0][0],
                .mode = mode, .scale = scale};
  if (G->rank != 2 || !is_float(G->dtype) || out->rank != 2 || !is_float(out->dtype) || out->sizes[1] != J.D ||
      (G->dtype == TPU_DTYPE_F64) != (out->dtype == TPU_DTYPE_F64) || mode == 3)
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG_BWD operands (ir.h)");
  if (mode == EB_MAX) { /* (grad [B, D], max_indices [B, D], bag_size [>= B]) */
    J.I = &xs[1]; J.BS = &xs[2];
    if (n != 3 || J.I->rank != 2 || !is_index(J.I->dtype) || J.I->sizes[0] != J.B || J.I->sizes[1] != J.D ||
        J.BS->rank != 1 || !is_index(J.BS->dtype) || J.BS->sizes[0] < J.B)
      return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG_BWD max operands (ir.h)");
    for (int64_t b = 0; b < J.B; ++b)
      for (int64_t d = 0; d < J.D && ld_i(J.BS, b) > 0; ++d) {
        const int64_t k = ld_at(J.I, b * J.I->strides[0] + d * J.I->strides[1]);
        if (k < 0 || k >= J.nw) return oob(k, J.nw);
      }
    J.N = J.B;
  } else {
    J.I = &xs[1]; J.O2B = &xs[2]; J.BS = &xs[3]; J.P = psw ? &xs[4] : NULL; J.N = J.I->sizes[0];
    if (n != 4 + psw || J.I->rank != 1 || J.O2B->rank != 1 || J.BS->rank != 1 || !is_index(J.I->dtype) ||
        !is_index(J.O2B->dtype) || !is_index(J.BS->dtype) || J.O2B->sizes[0] != J.N || (mode == EB_MEAN && J.BS->sizes[0] < J.B) ||
        (J.P && (J.P->rank != 1 || J.P->sizes[0] != J.N || !is_float(J.P->dtype))))
      return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG_BWD operands (ir.h)");
    if (G->dtype == TPU_DTYPE_F32 && (J.D <= 1 || G->strides[1] == 1) && fast_idx(J.I, J.O2B) &&
        (!J.P || (J.P->dtype == TPU_DTYPE_F32 && vec1(J.P))))
      J.fast = J.I->dtype == TPU_DTYPE_I64 ? 1 : 2;
    const int bad = J.fast == 1 ? bwd_bad_i64(&J) : J.fast == 2 ? bwd_bad_i32(&J) : 1;
    for (int64_t i = 0; i < J.N && bad; ++i) { /* the errors, in id order, before any part runs */
      const int64_t raw = ld_i(J.I, i), k = raw < 0 ? raw + J.nw : raw;
      if (k < 0 || k >= J.nw) return oob(raw, J.nw);
      if ((J.pad >= 0 && raw == J.pad) || J.B == 0) continue;
      const int64_t b = ld_i(J.O2B, i);
      if (b < 0 || b >= J.B) return bad_id(i, b, J.B);
    }
  }
  const int f64 = G->dtype == TPU_DTYPE_F64;
  const size_t bytes = (size_t)(J.nw * J.D) * (f64 ? 8 : 4);
  J.acc = own_rows(out, f64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32) ? out->data : malloc(bytes ? bytes : 1);
  J.cnt = scale ? malloc((size_t)(J.nw ? J.nw : 1) * sizeof(int64_t)) : NULL;
  tpu_status_t st = TPU_OK;
  if (!J.acc || (scale && !J.cnt)) st = oom();
  else {
    J.parts = eb_parts((J.N + J.nw) * J.D, J.nw);
    st = eb_run(J.parts, J.D, &J.scratch, bwd_worker, &J);
  }
  if (J.acc != out->data) free(J.acc);
  free(J.cnt);
  return st;
}

/* d psw [N]: <grad[offset2bag[i]], weight[ids[i]]> (products in the math dtype, summed in double); 0 for padding
 * ids and offset2bag entries outside [0, B) */
typedef struct {
  const tpu_host_view_t *G, *W, *I, *O2B, *out;
  int64_t B, D, nw, pad, parts;
  int f64;
  double* scratch; /* [parts, 2 D] */
} eb_psw_t;
static void psw_worker(void* ctx, int64_t t0, int64_t t1) {
  const eb_psw_t* J = ctx;
  const int64_t D = J->D, N = J->I->sizes[0];
  for (int64_t t = t0; t < t1; ++t) {
    double* buf = J->scratch + t * 2 * (D ? D : 1);
    for (int64_t i = N * t / J->parts; i < N * (t + 1) / J->parts; ++i) {
      const int64_t raw = ld_i(J->I, i), b = ld_i(J->O2B, i), k = raw < 0 ? raw + J->nw : raw;
      double r = 0;
      if (b >= 0 && b < J->B && !(J->pad >= 0 && raw == J->pad)) {
        if (J->f64) {
          const double *g = row_f64(J->G, b, buf), *w = row_f64(J->W, k, buf + D);
          for (int64_t d = 0; d < D; ++d) r += g[d] * w[d];
        } else {
          const float *g = row_f32(J->G, b, (float*)buf), *w = row_f32(J->W, k, (float*)buf + D);
          for (int64_t d = 0; d < D; ++d) r += (double)(g[d] * w[d]);
        }
      }
      tpu_host_store_f64(J->out->data + i * J->out->strides[0] * (int64_t)tpu_dtype_size(J->out->dtype), J->out->dtype, r);
    }
  }
}
static tpu_status_t embed_bwd_psw(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const tpu_host_view_t *G = &xs[0], *W = &xs[1], *I = &xs[2], *O2B = &xs[3];
  if (n != 4 || G->rank != 2 || W->rank != 2 || !is_float(G->dtype) || !is_float(W->dtype) || G->sizes[1] != W->sizes[1] ||
      I->rank != 1 || O2B->rank != 1 || !is_index(I->dtype) || !is_index(O2B->dtype) || O2B->sizes[0] != I->sizes[0] ||
      out->rank != 1 || out->sizes[0] != I->sizes[0] || !is_float(out->dtype))
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG_BWD psw operands (ir.h)");
  eb_psw_t J = {.G = G, .W = W, .I = I, .O2B = O2B, .out = out, .B = G->sizes[0], .D = G->sizes[1], .nw = W->sizes[0],
                .pad = op->a[0][0], .f64 = W->dtype == TPU_DTYPE_F64 || G->dtype == TPU_DTYPE_F64};
  const int64_t N = I->sizes[0];
  for (int64_t i = 0; i < N; ++i) {
    const int64_t raw = ld_i(I, i), k = raw < 0 ? raw + J.nw : raw;
    if (k < 0 || k >= J.nw) return oob(raw, J.nw);
  }
  J.parts = eb_parts(N * J.D, N);
  return eb_run(J.parts, J.D, &J.scratch, psw_worker, &J);
}

tpu_status_t tpu_host_k_embed_bag(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  if (op->i0 == TPU_IR_CUSTOM_EMBEDDING_BAG) return embed_fwd(op, n, xs, out);
  if (op->i0 == TPU_IR_CUSTOM_EMBEDDING_BAG_BWD)
    return (op->i1 & EB_PSW_GRAD) ? embed_bwd_psw(op, n, xs, out) : embed_bwd_weight(op, n, xs, out);
  return TPU_ERR(INTERNAL, "host: not an embedding_bag target");
}
