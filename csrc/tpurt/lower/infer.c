/* infer.c — shape rules of data-dependent ops (tpu_lowering_t.shapes with shapes_reads_data: nonzero,
 * masked_select, repeat_interleave.Tensor, bincount, _unique2, unique_consecutive). They read the data
 * they depend on back through tpu_rt_memcpy_d2h (which waits for the queue); the op's lowering then does
 * the real work with the output shape fixed. */
#include <stdlib.h>

#include "lower/lower.h"

/* Copies the memory span a strided tensor covers to the host; *base points at
 * element [0, ..., 0] inside *out_buf (free it). */
static tpu_status_t read_span(int device, const tpu_tensor_t* t, uint8_t** out_buf, const uint8_t** base) {
  int64_t es = (int64_t)tpu_dtype_size(t->dtype), lo = 0, hi = 0;
  *out_buf = NULL; *base = NULL;
  if (tpu_numel(t->ndim, t->sizes) == 0) return TPU_OK;
  for (int d = 0; d < t->ndim; ++d) {
    int64_t ext = (t->sizes[d] - 1) * t->strides[d];
    if (ext < 0) lo += ext; else hi += ext;
  }
  size_t nbytes = (size_t)((hi - lo + 1) * es);
  uint8_t* buf = malloc(nbytes);
  if (!buf) return TPU_ERR(OUT_OF_MEMORY, "out of host memory reading a %zu-byte tensor", nbytes);
  tpu_status_t st = tpu_rt_memcpy_d2h(device, buf, (const char*)t->data + lo * es, nbytes);
  if (st) { free(buf); return st; }
  *out_buf = buf;
  *base = buf - lo * es;
  return TPU_OK;
}

/* value bits without the sign bit for floats: -0.0 is zero, NaN is not */
static int elem_nonzero(const uint8_t* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_F64: { uint64_t u; memcpy(&u, p, 8); return (u << 1) != 0; }
    case TPU_DTYPE_F32: { uint32_t u; memcpy(&u, p, 4); return (u << 1) != 0; }
    case TPU_DTYPE_F16: case TPU_DTYPE_BF16: { uint16_t u; memcpy(&u, p, 2); return (uint16_t)(u << 1) != 0; }
    default: {
      size_t n = tpu_dtype_size(dt);
      for (size_t i = 0; i < n; ++i) if (p[i]) return 1;
      return 0;
    }
  }
}
static int64_t elem_i64(const uint8_t* p, int dt) {
  switch (dt) {
    case TPU_DTYPE_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case TPU_DTYPE_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case TPU_DTYPE_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TPU_DTYPE_I8: return (int8_t)p[0];
    default: return p[0];
  }
}

/* Visits every element of t (row-major) at base. */
#define FOR_EACH_ELEM(t, base, p, body)                                                     \
  do {                                                                                      \
    int64_t idx_[TPU_MAX_DIMS] = {0}, n_ = tpu_numel((t)->ndim, (t)->sizes);                \
    int64_t es_ = (int64_t)tpu_dtype_size((t)->dtype);                                      \
    for (int64_t i_ = 0; i_ < n_; ++i_) {                                                   \
      int64_t off_ = 0;                                                                     \
      for (int d_ = 0; d_ < (t)->ndim; ++d_) off_ += idx_[d_] * (t)->strides[d_];           \
      const uint8_t* p = (base) + off_ * es_;                                               \
      body;                                                                                 \
      for (int d_ = (t)->ndim - 1; d_ >= 0; --d_) { if (++idx_[d_] < (t)->sizes[d_]) break; idx_[d_] = 0; } \
    }                                                                                       \
  } while (0)

static tpu_status_t count_nonzero(int device, const tpu_tensor_t* t, int64_t* out_count) {
  uint8_t* buf; const uint8_t* base;
  *out_count = 0;
  TPU_RETURN_IF_ERROR(read_span(device, t, &buf, &base));
  int64_t c = 0;
  if (buf) FOR_EACH_ELEM(t, base, p, c += elem_nonzero(p, t->dtype));
  free(buf);
  *out_count = c;
  return TPU_OK;
}

/* ascending, NaN last (the host sort's order) */
static int cmp_nan_last(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  if (x != x) return y != y ? 0 : 1;
  if (y != y) return -1;
  return x < y ? -1 : x > y;
}

static tpu_status_t one_result(tpu_tensor_t* out_meta, int* out_n, int device, int dt, int ndim, const int64_t* sizes) {
  out_meta[0] = tpu_tensor_contiguous(NULL, device, (tpu_dtype_t)dt, ndim, sizes);
  *out_n = 1;
  return TPU_OK;
}

/* (self) -> [count, ndim] */
tpu_status_t tpu_shapes_nonzero(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max, int* out_n) {
  (void)max;
  const tpu_tensor_t* x = lw_args_tensor(args, nargs, 0);
  if (!x) return TPU_ERR(INVALID_ARGUMENT, "aten::nonzero: expected a tensor");
  int64_t n;
  TPU_RETURN_IF_ERROR(count_nonzero(device, x, &n));
  return one_result(out_meta, out_n, device, TPU_DTYPE_I64, 2, (int64_t[]){n, x->ndim});
}

/* (self, mask) -> [count(mask) * copies of each mask element in the broadcast shape] */
tpu_status_t tpu_shapes_masked_select(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max,
                                      int* out_n) {
  (void)max;
  const tpu_tensor_t *x = lw_args_tensor(args, nargs, 0), *m = lw_args_tensor(args, nargs, 1);
  if (!x || !m) return TPU_ERR(INVALID_ARGUMENT, "aten::masked_select: expected tensors");
  if (m->dtype != TPU_DTYPE_BOOL) return TPU_ERR(INVALID_ARGUMENT, "masked_select: expected BoolTensor for mask");
  int r = x->ndim > m->ndim ? x->ndim : m->ndim;
  int64_t rep = 1;
  for (int q = 0; q < r; ++q) {
    int qa = q - (r - x->ndim), qm = q - (r - m->ndim);
    int64_t a = qa >= 0 ? x->sizes[qa] : 1, b = qm >= 0 ? m->sizes[qm] : 1;
    if (a != b && a != 1 && b != 1)
      return TPU_ERR(INVALID_ARGUMENT, "The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton dimension %d",
                     (long long)a, (long long)b, q);
    if (b == 1) rep *= a;
  }
  int64_t n;
  TPU_RETURN_IF_ERROR(count_nonzero(device, m, &n));
  return one_result(out_meta, out_n, device, x->dtype, 1, (int64_t[]){n * rep});
}

/* (repeats, output_size?) -> [sum(repeats)] */
tpu_status_t tpu_shapes_repeat_interleave(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max,
                                          int* out_n) {
  (void)max;
  const tpu_tensor_t* r = lw_args_tensor(args, nargs, 0);
  if (!r) return TPU_ERR(INVALID_ARGUMENT, "aten::repeat_interleave.Tensor: expected a tensor");
  if (r->ndim != 1) return TPU_ERR(INVALID_ARGUMENT, "repeat_interleave only accept 1D vector as repeat");
  if (r->dtype != TPU_DTYPE_I64 && r->dtype != TPU_DTYPE_I32)
    return TPU_ERR(INVALID_ARGUMENT, "repeats has to be Long or Int tensor");
  int64_t total = 0;
  if (nargs > 1 && args[1].kind == TPU_ARG_INT) total = args[1].i;
  else {
    uint8_t* buf; const uint8_t* base;
    TPU_RETURN_IF_ERROR(read_span(device, r, &buf, &base));
    int neg = 0;
    if (buf) FOR_EACH_ELEM(r, base, p, { int64_t v = elem_i64(p, r->dtype); neg |= v < 0; total += v; });
    free(buf);
    if (neg) return TPU_ERR(INVALID_ARGUMENT, "repeats can not be negative");
  }
  return one_result(out_meta, out_n, device, r->dtype, 1, &total);
}

/* (self, weights?, minlength) -> [max(max(self) + 1, minlength)] */
tpu_status_t tpu_shapes_bincount(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max, int* out_n) {
  (void)max;
  const tpu_tensor_t *x = lw_args_tensor(args, nargs, 0), *w = lw_args_tensor(args, nargs, 1);
  if (!x) return TPU_ERR(INVALID_ARGUMENT, "aten::bincount: expected a tensor");
  if (x->ndim != 1 || !tpu_dtype_is_integral(x->dtype))
    return TPU_ERR(INVALID_ARGUMENT, "bincount only supports 1-d non-negative integral inputs.");
  int64_t minlength = (nargs > 2 && args[2].kind == TPU_ARG_INT) ? args[2].i : 0, top = -1;
  if (minlength < 0) return TPU_ERR(INVALID_ARGUMENT, "minlength should be >= 0");
  uint8_t* buf; const uint8_t* base;
  TPU_RETURN_IF_ERROR(read_span(device, x, &buf, &base));
  int neg = 0;
  if (buf) FOR_EACH_ELEM(x, base, p, { int64_t v = elem_i64(p, x->dtype); neg |= v < 0; if (v > top) top = v; });
  free(buf);
  if (neg) return TPU_ERR(INVALID_ARGUMENT, "bincount only supports 1-d non-negative integral inputs.");
  int64_t n = top + 1 > minlength ? top + 1 : minlength;
  int dt = !w ? TPU_DTYPE_I64 : w->dtype == TPU_DTYPE_F32 ? TPU_DTYPE_F32 : TPU_DTYPE_F64;
  return one_result(out_meta, out_n, device, dt, 1, &n);
}

/* (self, [sorted,] return_inverse, return_counts[, dim]) -> (values [n], inverse, counts);
 * consec: unique_consecutive (no sort, no sorted argument) */
static tpu_status_t shapes_unique(int device, const tpu_arg_t* args, int nargs, int consec, tpu_tensor_t* out_meta,
                                  int max, int* out_n) {
  const char* op = consec ? "aten::unique_consecutive" : "aten::_unique2";
  if (max < 3) return TPU_ERR(INVALID_ARGUMENT, "%s: needs 3 output records", op);
  const tpu_tensor_t* x = lw_args_tensor(args, nargs, 0);
  if (!x) return TPU_ERR(INVALID_ARGUMENT, "%s: expected a tensor", op);
  if (consec && nargs > 3 && args[3].kind != TPU_ARG_NONE) return TPU_ERR(UNSUPPORTED, "%s: the dim argument", op);
  int a0 = consec ? 1 : 2;
  int inv = nargs > a0 && args[a0].i, cnt = nargs > a0 + 1 && args[a0 + 1].i;
  int64_t m = tpu_numel(x->ndim, x->sizes), n = 0, zero = 0;
  double* v = malloc(sizeof(double) * (size_t)(m ? m : 1));
  uint8_t* buf; const uint8_t* base;
  tpu_status_t st = v ? read_span(device, x, &buf, &base) : TPU_ERR(OUT_OF_MEMORY, "unique: out of host memory");
  if (st) { free(v); return st; }
  int64_t k = 0;
  int fl = tpu_dtype_is_floating(x->dtype);
  if (buf) FOR_EACH_ELEM(x, base, p, {
    double e;
    if (!fl) e = (double)elem_i64(p, x->dtype);
    else if (x->dtype == TPU_DTYPE_F64) memcpy(&e, p, 8);
    else if (x->dtype == TPU_DTYPE_F32) { float f; memcpy(&f, p, 4); e = f; }
    else { uint16_t h; memcpy(&h, p, 2); e = x->dtype == TPU_DTYPE_BF16 ? (double)tpu_bf16_to_f32(h) : (double)tpu_f16_to_f32(h); }
    v[k++] = e;
  });
  free(buf);
  if (!consec) qsort(v, (size_t)m, sizeof(double), cmp_nan_last);
  for (int64_t i = 0; i < m; ++i) n += i == 0 || !(v[i] == v[i - 1]); /* as the lowering: NaN != NaN */
  free(v);
  out_meta[0] = tpu_tensor_contiguous(NULL, device, (tpu_dtype_t)x->dtype, 1, &n);
  out_meta[1] = inv ? tpu_tensor_contiguous(NULL, device, TPU_DTYPE_I64, x->ndim, x->sizes)
                    : tpu_tensor_contiguous(NULL, device, TPU_DTYPE_I64, 1, &zero);
  out_meta[2] = tpu_tensor_contiguous(NULL, device, TPU_DTYPE_I64, 1, cnt ? &n : &zero);
  *out_n = 3;
  return TPU_OK;
}
tpu_status_t tpu_shapes_unique2(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max, int* out_n) {
  return shapes_unique(device, args, nargs, 0, out_meta, max, out_n);
}
tpu_status_t tpu_shapes_unique_consecutive(int device, const tpu_arg_t* args, int nargs, tpu_tensor_t* out_meta, int max,
                                           int* out_n) {
  return shapes_unique(device, args, nargs, 1, out_meta, max, out_n);
}
