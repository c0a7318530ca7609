/* embed.c — embedding_bag sum / mean (embed.h). Bags are found by counting offsets at or before each position
 * (any offset order gives the bags the replaced cumsum graph gave), then one pass over the ids. */
#include <stdlib.h>
#include <string.h>

#include "drivers/host/embed.h"

enum { EB_MEAN = 1, EB_PSW = 4, EB_LAST = 8, EB_SCALE = 8, EB_PSW_GRAD = 16 };

static int is_index(int dt) { return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32; }
static int is_float(int dt) {
  return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16;
}
static inline int64_t ld_i(const tpu_host_view_t* v, int64_t j) {
  const int64_t s = v->strides[0] * j;
  return v->dtype == TPU_DTYPE_I64 ? ((const int64_t*)(const void*)v->data)[s] : ((const int32_t*)(const void*)v->data)[s];
}
static inline double ld_f(const tpu_host_view_t* v, int64_t j) {
  return tpu_host_load_f64(v->data + v->strides[0] * j * (int64_t)tpu_dtype_size(v->dtype), v->dtype);
}
/* row r of a 2-D float view as f32 / f64: in place when it is of that dtype with unit stride, else into tmp [D] */
static const float* row_f32(const tpu_host_view_t* v, int64_t r, float* tmp) {
  const int64_t D = v->sizes[1], s0 = v->strides[0] * r, s1 = v->strides[1];
  if (v->dtype == TPU_DTYPE_F32 && s1 == 1) return (const float*)(const void*)v->data + s0;
  if (v->dtype == TPU_DTYPE_F32) {
    const float* p = (const float*)(const void*)v->data + s0;
    for (int64_t d = 0; d < D; ++d) tmp[d] = p[d * s1];
  } else if (v->dtype == TPU_DTYPE_BF16) {
    const uint16_t* p = (const uint16_t*)(const void*)v->data + s0;
    for (int64_t d = 0; d < D; ++d) tmp[d] = tpu_bf16_to_f32(p[d * s1]);
  } else {
    const uint16_t* p = (const uint16_t*)(const void*)v->data + s0;
    for (int64_t d = 0; d < D; ++d) tmp[d] = tpu_f16_to_f32(p[d * s1]);
  }
  return tmp;
}
static const double* row_f64(const tpu_host_view_t* v, int64_t r, double* tmp) {
  const int64_t D = v->sizes[1], s0 = v->strides[0] * r, s1 = v->strides[1];
  if (v->dtype != TPU_DTYPE_F64) { /* an f32 / bf16 / f16 operand beside an f64 one */
    const int64_t es = (int64_t)tpu_dtype_size(v->dtype);
    for (int64_t d = 0; d < D; ++d) tmp[d] = tpu_host_load_f64(v->data + (s0 + d * s1) * es, v->dtype);
    return tmp;
  }
  const double* p = (const double*)(const void*)v->data + s0;
  if (s1 == 1) return p;
  for (int64_t d = 0; d < D; ++d) tmp[d] = p[d * s1];
  return tmp;
}
/* a 16-wide row (DLRM's size) with a constant trip count: no run-time alias check or remainder loop */
static inline void add16(float* restrict a, const float* restrict r) { for (int d = 0; d < 16; ++d) a[d] += r[d]; }
/* acc [R, D] of the math dtype (f32 or f64) -> out [R, D] (any float dtype and strides) */
static void store_rows(const void* acc, int f64, const tpu_host_view_t* out) {
  const int64_t R = out->sizes[0], D = out->sizes[1];
  const size_t es = tpu_dtype_size(out->dtype);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d = 0; d < D; ++d) {
      char* p = out->data + (r * out->strides[0] + d * out->strides[1]) * (int64_t)es;
      if (f64) { *(double*)(void*)p = ((const double*)acc)[r * D + d]; continue; }
      const float v = ((const float*)acc)[r * D + d];
      if (out->dtype == TPU_DTYPE_F32) *(float*)(void*)p = v;
      else if (out->dtype == TPU_DTYPE_BF16) *(uint16_t*)(void*)p = tpu_f32_to_bf16(v);
      else *(uint16_t*)(void*)p = tpu_f32_to_f16(v);
    }
}
/* the result's own memory when it is a contiguous [R, D] of the math dtype, else a zeroed scratch (*own = 1) */
static void* acc_rows(const tpu_host_view_t* out, int f64, int* own) {
  const int64_t R = out->sizes[0], D = out->sizes[1];
  const size_t es = f64 ? 8 : 4, bytes = (size_t)(R * D) * es;
  *own = !bytes || !(out->dtype == (f64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32) && (R <= 1 || out->strides[0] == D) &&
                     (D <= 1 || out->strides[1] == 1));
  void* a = *own ? malloc(bytes ? bytes : 1) : out->data;
  if (a) memset(a, 0, bytes);
  return a;
}

/* bag[i] of each of the N ids: the count of the first B offsets at or before position i, minus 1 (-1 before the
 * first offset). Checks offsets[0] == 0 (when there are bags), every counted offset in [0, N] and, with
 * include_last_offset (last), offsets[B] <= N as PyTorch's CPU kernel does; otherwise offsets[B] is not read: ids
 * after it stay in the last bag, as in PyTorch's CPU reference kernel (tests/test_ops_misc.py last_offset_tail). */
static tpu_status_t find_bags(const tpu_host_view_t* off, int64_t B, int64_t N, int last, int64_t* bag /* [N + 1] */) {
  memset(bag, 0, (size_t)(N + 1) * sizeof(int64_t));
  for (int64_t k = 0; k < B; ++k) {
    const int64_t o = ld_i(off, k);
    if (k == 0 && o != 0)
      return TPU_ERR(INVALID_ARGUMENT, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                     "from position 0. However, got %lld", (long long)o);
    if (o < 0 || o > N)
      return TPU_ERR(INVALID_ARGUMENT, "embedding_bag: offsets[%lld] = %lld is outside [0, %lld] (the number of indices)",
                     (long long)k, (long long)o, (long long)N);
    bag[o] += 1;
  }
  if (last && off->sizes[0] > B && ld_i(off, B) > N)
    return TPU_ERR(INVALID_ARGUMENT, "offsets[-1] can not be greater than input's length %lld but got offsets[-1] of %lld",
                   (long long)N, (long long)ld_i(off, B));
  int64_t c = -1;
  for (int64_t i = 0; i < N; ++i) { c += bag[i]; bag[i] = c; }
  return TPU_OK;
}
static tpu_status_t bad_id(int64_t i, int64_t k, int64_t nw) {
  return TPU_ERR(INVALID_ARGUMENT, "Index %lld of input takes value %lld which is not in the valid range [0, %lld)",
                 (long long)i, (long long)k, (long long)nw);
}

/* result 0: the bags' rows [B, D] */
static tpu_status_t bag_rows(const tpu_ir_op_t* op, const tpu_host_view_t* xs, const int64_t* bag, int64_t N,
                             int64_t B, const tpu_host_view_t* out) {
  const tpu_host_view_t *W = &xs[0], *I = &xs[1], *P = (op->i1 & EB_PSW) ? &xs[3] : NULL;
  const int64_t nw = W->sizes[0], D = W->sizes[1], pad = op->a[0][0];
  const int mean = (int)(op->i1 & EB_MEAN), f64 = W->dtype == TPU_DTYPE_F64;
  int own;
  void* acc = acc_rows(out, f64, &own);
  int64_t* cnt = mean ? calloc((size_t)(B ? B : 1), sizeof(int64_t)) : NULL;
  void* tmp = malloc((size_t)(D ? D : 1) * 8);
  tpu_status_t st = TPU_OK;
  if (!acc || !tmp || (mean && !cnt)) { st = TPU_ERR(OUT_OF_MEMORY, "host: embedding_bag scratch"); goto done; }
  for (int64_t i = 0; i < N; ++i) {
    const int64_t k = ld_i(I, i), b = bag[i];
    if (k < 0 || k >= nw) { st = bad_id(i, k, nw); goto done; }
    if (b < 0 || (pad >= 0 && k == pad)) continue; /* before the first offset (no bags), or padding */
    if (mean) cnt[b] += 1;
    if (f64) {
      const double* r = row_f64(W, k, tmp);
      double* a = (double*)acc + b * D;
      if (P) { const double s = ld_f(P, i); for (int64_t d = 0; d < D; ++d) a[d] += r[d] * s; }
      else for (int64_t d = 0; d < D; ++d) a[d] += r[d];
    } else {
      const float* r = row_f32(W, k, tmp);
      float* a = (float*)acc + b * D;
      if (P) {
        const float s = P->dtype == TPU_DTYPE_F32 ? ((const float*)(const void*)P->data)[i * P->strides[0]] : (float)ld_f(P, i);
        for (int64_t d = 0; d < D; ++d) a[d] += r[d] * s;
      } else if (D == 16) add16(a, r);
      else for (int64_t d = 0; d < D; ++d) a[d] += r[d];
    }
  }
  if (mean)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t c = cnt[b] > 1 ? cnt[b] : 1;
      if (f64) { double* a = (double*)acc + b * D; for (int64_t d = 0; d < D; ++d) a[d] /= (double)c; }
      else { float* a = (float*)acc + b * D; for (int64_t d = 0; d < D; ++d) a[d] /= (float)c; }
    }
  if (own) store_rows(acc, f64, out);
done:
  if (own) free(acc);
  free(cnt); free(tmp);
  return st;
}

static tpu_status_t embed_fwd(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const int what = (int)((op->i1 >> 4) & 3), psw = (op->i1 & EB_PSW) != 0;
  const tpu_host_view_t *I = &xs[what ? 0 : 1], *O = &xs[what ? 1 : 2];
  if (what > 2 || n != (what ? 2 : 3 + psw) || I->rank != 1 || O->rank != 1 || !is_index(I->dtype) || !is_index(O->dtype))
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG operands (ir.h)");
  const int64_t N = I->sizes[0], no = O->sizes[0], B0 = no - ((op->i1 & EB_LAST) ? 1 : 0), B = B0 > 0 ? B0 : 0;
  if (what == 0) {
    const tpu_host_view_t* W = &xs[0];
    if (W->rank != 2 || !is_float(W->dtype) || out->rank != 2 || !is_float(out->dtype) || out->sizes[0] != B ||
        out->sizes[1] != W->sizes[1] || (W->dtype == TPU_DTYPE_F64) != (out->dtype == TPU_DTYPE_F64) ||
        (psw && (xs[3].rank != 1 || xs[3].sizes[0] != N || !is_float(xs[3].dtype))))
      return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG rows operands (ir.h)");
  } else if (out->rank != 1 || !is_index(out->dtype) || (what == 1 ? out->sizes[0] != N : out->sizes[0] < B)) {
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG offset2bag / bag_size result (ir.h)");
  }
  int64_t* bag = malloc((size_t)(N + 1) * sizeof(int64_t));
  if (!bag) return TPU_ERR(OUT_OF_MEMORY, "host: embedding_bag scratch");
  tpu_status_t st = find_bags(O, B, N, (op->i1 & EB_LAST) != 0, bag);
  if (!st && what == 0) st = bag_rows(op, xs, bag, N, B, out);
  if (!st && what > 0) { /* offset2bag = max(bag, 0); bag_size: the non-padding ids per bag, counted in bag[] */
    const int64_t pad = op->a[0][0], m = out->sizes[0];
    if (what == 1) for (int64_t i = 0; i < N; ++i) bag[i] = bag[i] > 0 ? bag[i] : 0;
    else {
      int64_t* cnt = calloc((size_t)(m ? m : 1), sizeof(int64_t));
      if (!cnt) { free(bag); return TPU_ERR(OUT_OF_MEMORY, "host: embedding_bag scratch"); }
      for (int64_t i = 0; i < N; ++i)
        if (bag[i] >= 0 && !(pad >= 0 && ld_i(I, i) == pad)) cnt[bag[i]] += 1;
      free(bag);
      bag = cnt;
    }
    const int64_t os = out->strides[0];
    if (out->dtype == TPU_DTYPE_I64) for (int64_t j = 0; j < m; ++j) ((int64_t*)(void*)out->data)[j * os] = bag[j];
    else for (int64_t j = 0; j < m; ++j) ((int32_t*)(void*)out->data)[j * os] = (int32_t)bag[j];
  }
  free(bag);
  return st;
}

/* d weight [nw, D]: grad[offset2bag[i]] (/ max(bag_size, 1) for mean, * psw[i], / count of the id for
 * scale_grad_by_freq) added to row ids[i], in id order; padding ids add nothing */
static tpu_status_t embed_bwd_weight(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const int psw = (op->i1 & EB_PSW) != 0, mean = (op->i1 & EB_MEAN) != 0, scale = (op->i1 & EB_SCALE) != 0;
  const tpu_host_view_t *G = &xs[0], *I = &xs[1], *O2B = &xs[2], *BS = &xs[3], *P = psw ? &xs[4] : NULL;
  if (n != 4 + psw || G->rank != 2 || !is_float(G->dtype) || I->rank != 1 || O2B->rank != 1 || BS->rank != 1 ||
      !is_index(I->dtype) || !is_index(O2B->dtype) || O2B->sizes[0] != I->sizes[0] || out->rank != 2 ||
      !is_float(out->dtype) || out->sizes[1] != G->sizes[1] || (G->dtype == TPU_DTYPE_F64) != (out->dtype == TPU_DTYPE_F64) ||
      (mean && BS->sizes[0] < G->sizes[0]) || (P && (P->rank != 1 || P->sizes[0] != I->sizes[0] || !is_float(P->dtype))))
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG_BWD operands (ir.h)");
  const int64_t N = I->sizes[0], B = G->sizes[0], D = G->sizes[1], nw = out->sizes[0], pad = op->a[0][0];
  const int f64 = G->dtype == TPU_DTYPE_F64;
  int own;
  void* acc = acc_rows(out, f64, &own);
  int64_t* cnt = scale ? calloc((size_t)(nw ? nw : 1), sizeof(int64_t)) : NULL;
  void* tmp = malloc((size_t)(D ? D : 1) * 8);
  tpu_status_t st = TPU_OK;
  if (!acc || !tmp || (scale && !cnt)) { st = TPU_ERR(OUT_OF_MEMORY, "host: embedding_bag backward scratch"); goto done; }
  for (int64_t pass = scale ? 0 : 1; pass < 2; ++pass) /* scale: count every id first */
    for (int64_t i = 0; i < N; ++i) {
      const int64_t raw = ld_i(I, i);
      int64_t k = raw < 0 ? raw + nw : raw;
      if (k < 0 || k >= nw) {
        st = TPU_ERR(INDEX_ERROR, "index %lld is out of bounds for dimension 0 with size %lld", (long long)raw, (long long)nw);
        goto done;
      }
      if (pass == 0) { cnt[k] += 1; continue; }
      if ((pad >= 0 && raw == pad) || B == 0) continue; /* adds a zero row */
      const int64_t b = ld_i(O2B, i);
      if (b < 0 || b >= B) { st = bad_id(i, b, B); goto done; }
      if (f64) {
        const double* g = row_f64(G, b, tmp);
        const double den = mean ? (double)(ld_i(BS, b) > 1 ? ld_i(BS, b) : 1) : 1, s = P ? ld_f(P, i) : 1;
        const double c = scale ? (double)cnt[k] : 1;
        double* a = (double*)acc + k * D;
        for (int64_t d = 0; d < D; ++d) {
          double v = g[d];
          if (mean) v /= den;
          if (P) v *= s;
          if (scale) v /= c;
          a[d] += v;
        }
      } else {
        const float* g = row_f32(G, b, tmp);
        const float den = mean ? (float)(ld_i(BS, b) > 1 ? ld_i(BS, b) : 1) : 1, s = P ? (float)ld_f(P, i) : 1;
        const float c = scale ? (float)cnt[k] : 1;
        float* a = (float*)acc + k * D;
        if (!mean && !P && !scale) {
          if (D == 16) add16(a, g); else for (int64_t d = 0; d < D; ++d) a[d] += g[d];
          continue;
        }
        for (int64_t d = 0; d < D; ++d) {
          float v = g[d];
          if (mean) v /= den;
          if (P) v *= s;
          if (scale) v /= c;
          a[d] += v;
        }
      }
    }
  if (own) store_rows(acc, f64, out);
done:
  if (own) free(acc);
  free(cnt); free(tmp);
  return st;
}

/* d psw [N]: <grad[offset2bag[i]], weight[ids[i]]> (products in the math dtype, summed in double); 0 for padding
 * ids and offset2bag entries outside [0, B) */
static tpu_status_t embed_bwd_psw(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const tpu_host_view_t *G = &xs[0], *W = &xs[1], *I = &xs[2], *O2B = &xs[3];
  if (n != 4 || G->rank != 2 || W->rank != 2 || !is_float(G->dtype) || !is_float(W->dtype) || G->sizes[1] != W->sizes[1] ||
      I->rank != 1 || O2B->rank != 1 || !is_index(I->dtype) || !is_index(O2B->dtype) || O2B->sizes[0] != I->sizes[0] ||
      out->rank != 1 || out->sizes[0] != I->sizes[0] || !is_float(out->dtype))
    return TPU_ERR(INTERNAL, "host: EMBEDDING_BAG_BWD psw operands (ir.h)");
  const int64_t N = I->sizes[0], B = G->sizes[0], D = G->sizes[1], nw = W->sizes[0], pad = op->a[0][0];
  const int f64 = W->dtype == TPU_DTYPE_F64 || G->dtype == TPU_DTYPE_F64;
  const size_t es = tpu_dtype_size(out->dtype);
  void* tmp = malloc((size_t)(2 * (D ? D : 1)) * 8);
  if (!tmp) return TPU_ERR(OUT_OF_MEMORY, "host: embedding_bag backward scratch");
  tpu_status_t st = TPU_OK;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t raw = ld_i(I, i), b = ld_i(O2B, i);
    int64_t k = raw < 0 ? raw + nw : raw;
    if (k < 0 || k >= nw) {
      st = TPU_ERR(INDEX_ERROR, "index %lld is out of bounds for dimension 0 with size %lld", (long long)raw, (long long)nw);
      break;
    }
    double r = 0;
    if (b >= 0 && b < B && !(pad >= 0 && raw == pad)) {
      if (f64) {
        const double *g = row_f64(G, b, tmp), *w = row_f64(W, k, (double*)tmp + D);
        for (int64_t d = 0; d < D; ++d) r += g[d] * w[d];
      } else {
        const float *g = row_f32(G, b, tmp), *w = row_f32(W, k, (float*)tmp + D);
        for (int64_t d = 0; d < D; ++d) r += (double)(g[d] * w[d]);
      }
    }
    tpu_host_store_f64(out->data + i * out->strides[0] * (int64_t)es, out->dtype, r);
  }
  free(tmp);
  return st;
}

tpu_status_t tpu_host_k_embed_bag(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  if (op->i0 == TPU_IR_CUSTOM_EMBEDDING_BAG) return embed_fwd(op, n, xs, out);
  if (op->i0 == TPU_IR_CUSTOM_EMBEDDING_BAG_BWD)
    return (op->i1 & EB_PSW_GRAD) ? embed_bwd_psw(op, n, xs, out) : embed_bwd_weight(op, n, xs, out);
  return TPU_ERR(INTERNAL, "host: not an embedding_bag target");
}
