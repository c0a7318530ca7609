/* kernels.c — host library kernels: copy, reduce, argreduce, cumulative, dot, iota,
 * concat, pad, gather/index_select/scatter/index_put, rng, sort. Every kernel
 * takes strided views and checks indices before touching memory. */
#include <pthread.h>
#include <stdlib.h>

#include "drivers/host/gemm.h"
#include "drivers/host/host.h"
#include "runtime/runtime.h"

const tpu_host_tile_ops_t* tpu_host_tile_ops(void) {
  static const tpu_host_tile_ops_t* ops;
  const tpu_host_tile_ops_t* o = __atomic_load_n(&ops, __ATOMIC_ACQUIRE);
  if (!o) {
    o = tpu_cpu_has_avx2_fma() ? &tpu_host_tile_ops_avx2 : &tpu_host_tile_ops_base;
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
static void copy_worker(void* ctx, int64_t b, int64_t e) {
  copy_job_t* J = ctx;
  const tpu_host_tile_ops_t* T = tpu_host_tile_ops();
  const tpu_host_view_t *s = J->src, *d = J->dst;
  int r = d->rank, cls = tpu_host_cls(s->dtype);
  int64_t buf[512];
  int64_t ss = r ? s->strides[r - 1] : 0, ds = r ? d->strides[r - 1] : 0;
  size_t se = tpu_dtype_size(s->dtype), de = tpu_dtype_size(d->dtype);
  for (int64_t row = b; row < e; ++row) {
    int64_t rem = row, so = 0, dof = 0;
    for (int k = r - 2; k >= 0; --k) {
      int64_t i = rem % d->sizes[k]; rem /= d->sizes[k];
      so += i * s->strides[k]; dof += i * d->strides[k];
    }
    for (int64_t t = 0; t < J->inner; t += 512) {
      int64_t n = TPU_MIN(512, J->inner - t);
      T->load(buf, cls, s->data + (so + t * ss) * (int64_t)se, s->dtype, ss, n);
      T->store(d->data + (dof + t * ds) * (int64_t)de, d->dtype, ds, buf, cls, n);
    }
  }
}
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
  copy_job_t J = {&s, &d, 0, r ? d.sizes[r - 1] : 1};
  J.rows = total / J.inner;
  tpu_pool_parallel_for(J.rows, TPU_MAX(1, 65536 / J.inner), copy_worker, &J);
  return TPU_OK;
}

/* ---- reduce */
typedef struct {
  const tpu_ir_op_t* op; const tpu_host_view_t *x, *out;
  int nk, nr; int kd[TPU_MAX_DIMS], rd[TPU_MAX_DIMS];
  int64_t rcount;
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

/* Reduces n elements at p (stride st) into *acc; float types accumulate in double. */
static void reduce_run_f(int m, const char* p, int dt, int64_t st, int64_t n, double* acc) {
  double a = *acc;
  if (dt == TPU_DTYPE_F32 && m == TPU_IR_MONOID_SUM) {
    const float* f = (const float*)p;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    if (st == 1) for (; i + 4 <= n; i += 4) { s0 += f[i]; s1 += f[i + 1]; s2 += f[i + 2]; s3 += f[i + 3]; }
    for (; i < n; ++i) s0 += f[i * st];
    *acc = a + ((s0 + s1) + (s2 + s3));
    return;
  }
  size_t es = tpu_dtype_size(dt);
  for (int64_t i = 0; i < n; ++i) a = red_f(m, a, tpu_host_load_f64(p + i * st * (int64_t)es, dt));
  *acc = a;
}
static void reduce_run_i(int m, const char* p, int dt, int64_t st, int64_t n, int64_t* acc) {
  int64_t a = *acc;
  size_t es = tpu_dtype_size(dt);
  for (int64_t i = 0; i < n; ++i) a = red_i(m, a, tpu_host_load_i64(p + i * st * (int64_t)es, dt));
  *acc = a;
}

static void reduce_worker(void* ctx, int64_t b, int64_t e) {
  reduce_job_t* J = ctx;
  const tpu_host_view_t *x = J->x, *out = J->out;
  int m = (int)J->op->i0, isf = tpu_dtype_is_floating(x->dtype) && m != TPU_IR_MONOID_AND && m != TPU_IR_MONOID_OR;
  size_t es = tpu_dtype_size(x->dtype), oes = tpu_dtype_size(out->dtype);
  int last = J->nr - 1;
  int64_t ln = J->nr ? x->sizes[J->rd[last]] : 1, lst = J->nr ? x->strides[J->rd[last]] : 0;
  for (int64_t o = b; o < e; ++o) {
    int64_t rem = o, base = 0, ooff = 0;
    for (int k = J->nk - 1; k >= 0; --k) {
      int d = J->kd[k];
      int64_t i = rem % x->sizes[d]; rem /= x->sizes[d];
      base += i * x->strides[d]; ooff += i * out->strides[k];
    }
    double af = init_f(m); int64_t ai = init_i(m, x->dtype);
    int64_t ridx[TPU_MAX_DIMS] = {0};
    int64_t outer = ln ? J->rcount / ln : 0;
    for (int64_t q = 0; q < outer; ++q) {
      int64_t off = base;
      for (int k = 0; k < last; ++k) off += ridx[k] * x->strides[J->rd[k]];
      const char* p = x->data + off * (int64_t)es;
      if (isf) reduce_run_f(m, p, x->dtype, lst, ln, &af); else reduce_run_i(m, p, x->dtype, lst, ln, &ai);
      for (int k = last - 1; k >= 0; --k) { if (++ridx[k] < x->sizes[J->rd[k]]) break; ridx[k] = 0; }
    }
    char* op = out->data + ooff * (int64_t)oes;
    if (isf) tpu_host_store_f64(op, out->dtype, af); else tpu_host_store_i64(op, out->dtype, ai);
  }
}
tpu_status_t tpu_host_k_reduce(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  reduce_job_t J = {.op = op, .x = x, .out = out, .rcount = 1};
  for (int d = 0; d < x->rank; ++d) {
    if (op->a[0][d]) { J.rd[J.nr++] = d; J.rcount *= x->sizes[d]; } else J.kd[J.nk++] = d;
  }
  /* innermost reduced dim = smallest |stride| for sequential access */
  if (J.nr > 1) {
    int best = 0;
    for (int k = 1; k < J.nr; ++k) if (llabs(x->strides[J.rd[k]]) < llabs(x->strides[J.rd[best]])) best = k;
    int t = J.rd[best]; J.rd[best] = J.rd[J.nr - 1]; J.rd[J.nr - 1] = t;
  }
  int64_t nout = numel_of(out);
  if (nout == 0) return TPU_OK;
  if (nout == 1 && J.rcount > 65536 && J.nr > 0) {
    /* full reduction: per-thread partials over the outermost reduced dim, combined in order */
    (void)0;
  }
  tpu_pool_parallel_for(nout, TPU_MAX(1, 65536 / TPU_MAX(1, J.rcount)), reduce_worker, &J);
  return TPU_OK;
}

/* ---- argmax / argmin along one dim (first occurrence; NaN wins, as PyTorch) */
tpu_status_t tpu_host_k_argreduce(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  int dim = (int)op->i1, is_min = (int)op->i0;
  int64_t n = x->sizes[dim], st = x->strides[dim];
  if (n == 0 && numel_of(out) > 0)
    return TPU_ERR(INDEX_ERROR, "argmax/argmin: expected reduction dim %d to have non-zero size", dim);
  int64_t oidx[TPU_MAX_DIMS] = {0}, nout = numel_of(out);
  size_t es = tpu_dtype_size(x->dtype);
  int isf = tpu_dtype_is_floating(x->dtype);
  for (int64_t o = 0; o < nout; ++o) {
    int64_t base = 0;
    for (int d = 0, k = 0; d < x->rank; ++d) if (d != dim) base += oidx[k++] * x->strides[d];
    const char* p = x->data + base * (int64_t)es;
    int64_t best = 0;
    if (isf) {
      double bv = tpu_host_load_f64(p, x->dtype);
      for (int64_t i = 1; i < n && bv == bv; ++i) {
        double v = tpu_host_load_f64(p + i * st * (int64_t)es, x->dtype);
        if (v != v || (is_min ? v < bv : v > bv)) { bv = v; best = i; }
      }
    } else {
      int64_t bv = tpu_host_load_i64(p, x->dtype);
      for (int64_t i = 1; i < n; ++i) {
        int64_t v = tpu_host_load_i64(p + i * st * (int64_t)es, x->dtype);
        if (is_min ? v < bv : v > bv) { bv = v; best = i; }
      }
    }
    tpu_host_store_i64(at(out, oidx), out->dtype, best);
    next_index(oidx, out->sizes, out->rank);
  }
  return TPU_OK;
}

/* ---- cumulative sum/prod/max/min along one dim (double accumulator for floats) */
tpu_status_t tpu_host_k_cumulative(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  int dim = (int)op->i1, m = (int)op->i0;
  int64_t idx[TPU_MAX_DIMS] = {0}, sizes[TPU_MAX_DIMS];
  memcpy(sizes, x->sizes, sizeof(sizes));
  int64_t n = x->sizes[dim];
  if (numel_of(x) == 0) return TPU_OK;
  sizes[dim] = 1;
  int isf = tpu_dtype_is_floating(out->dtype);
  size_t es = tpu_dtype_size(x->dtype), oes = tpu_dtype_size(out->dtype);
  do {
    const char* p = at(x, idx);
    char* q = at(out, idx);
    double af = init_f(m); int64_t ai = init_i(m, x->dtype);
    for (int64_t i = 0; i < n; ++i) {
      if (isf) { af = red_f(m, af, tpu_host_load_f64(p + i * x->strides[dim] * (int64_t)es, x->dtype));
                 tpu_host_store_f64(q + i * out->strides[dim] * (int64_t)oes, out->dtype, af); }
      else { ai = red_i(m, ai, tpu_host_load_i64(p + i * x->strides[dim] * (int64_t)es, x->dtype));
             tpu_host_store_i64(q + i * out->strides[dim] * (int64_t)oes, out->dtype, ai); }
    }
  } while (next_index(idx, sizes, x->rank));
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
    return TPU_OK;
  }
  tpu_host_view_t A = *a, B = *b, C = *c;
  float *fa = NULL, *fb = NULL, *fc = NULL;
  tpu_status_t st = TPU_OK;
  int use_f64 = dt == TPU_DTYPE_F64;
  if (!use_f64 && dt != TPU_DTYPE_F32) {  /* bf16/f16: f32 math, f32 accumulation */
    if ((st = to_f32(a, &fa, &A)) || (st = to_f32(b, &fb, &B))) goto done;
  }
  if (!use_f64 && c->dtype != TPU_DTYPE_F32) {
    if ((st = to_f32(c, &fc, &C))) goto done;
  }
  int64_t cnt, sa, sb, sc;
  if (fold_batch(nb, &A, &B, &C, &cnt, &sa, &sb, &sc)) {
    if (use_f64)
      tpu_host_dgemm_batched(cnt, M, N, K, 1.0, (const double*)A.data, sa, A.strides[nb], A.strides[nb + 1],
                             (const double*)B.data, sb, B.strides[nb], B.strides[nb + 1], 0.0,
                             (double*)C.data, sc, C.strides[nb], C.strides[nb + 1]);
    else
      tpu_host_sgemm_batched(cnt, M, N, K, 1.0f, (const float*)A.data, sa, A.strides[nb], A.strides[nb + 1],
                             (const float*)B.data, sb, B.strides[nb], B.strides[nb + 1], 0.0f,
                             (float*)C.data, sc, C.strides[nb], C.strides[nb + 1]);
  } else {
    int64_t idx[TPU_MAX_DIMS] = {0};
    size_t es = use_f64 ? 8 : 4;
    do {
      int64_t ao = 0, bo = 0, co = 0;
      for (int d = 0; d < nb; ++d) { ao += idx[d] * A.strides[d]; bo += idx[d] * B.strides[d]; co += idx[d] * C.strides[d]; }
      if (use_f64)
        tpu_host_dgemm(M, N, K, 1.0, (const double*)(A.data + ao * (int64_t)es), A.strides[nb], A.strides[nb + 1],
                       (const double*)(B.data + bo * (int64_t)es), B.strides[nb], B.strides[nb + 1], 0.0,
                       (double*)(C.data + co * (int64_t)es), C.strides[nb], C.strides[nb + 1]);
      else
        tpu_host_sgemm(M, N, K, 1.0f, (const float*)(A.data + ao * (int64_t)es), A.strides[nb], A.strides[nb + 1],
                       (const float*)(B.data + bo * (int64_t)es), B.strides[nb], B.strides[nb + 1], 0.0f,
                       (float*)(C.data + co * (int64_t)es), C.strides[nb], C.strides[nb + 1]);
    } while (next_index(idx, C.sizes, nb));
  }
  if (fc) st = tpu_host_k_copy(&C, c);
done:
  free(fa); free(fb); free(fc);
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
  if (x->rank == 1 && idx->dtype == TPU_DTYPE_I64 && out->dtype == x->dtype) { /* flat: no index vectors */
    const int64_t* ip = (const int64_t*)idx->data;
    int64_t n = out->sizes[0], is = idx->strides[0], xs = x->strides[0] * (int64_t)es, os = out->strides[0] * (int64_t)es;
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = ip[j * is];
      TPU_RETURN_IF_ERROR(check_index(&k, dsize, dim));
      memcpy(out->data + j * os, x->data + k * xs, es);
    }
    return TPU_OK;
  }
  do {
    int64_t k = tpu_host_load_i64(at(idx, i), idx->dtype);
    TPU_RETURN_IF_ERROR(check_index(&k, dsize, dim));
    memcpy(src, i, sizeof(src));
    if (x->rank) src[dim] = k;
    memcpy(at(out, i), at(x, src), es);
  } while (next_index(i, out->sizes, out->rank));
  return TPU_OK;
}
tpu_status_t tpu_host_k_index_select(const tpu_ir_op_t* op, const tpu_host_view_t* x,
                                     const tpu_host_view_t* idx, const tpu_host_view_t* out) {
  int dim = (int)op->i0;
  int64_t n = idx->sizes[0];
  int64_t es = (int64_t)tpu_dtype_size(x->dtype);
  for (int64_t j = 0; j < n; ++j) {
    int64_t k = tpu_host_load_i64(idx->data + j * idx->strides[0] * (int64_t)tpu_dtype_size(idx->dtype), idx->dtype);
    TPU_RETURN_IF_ERROR(check_index(&k, x->sizes[dim], dim));
    tpu_host_view_t s = *x, d = *out;
    s.data += k * x->strides[dim] * es; s.sizes[dim] = 1;
    d.data += j * out->strides[dim] * (int64_t)tpu_dtype_size(out->dtype); d.sizes[dim] = 1;
    TPU_RETURN_IF_ERROR(tpu_host_k_copy(&s, &d));
  }
  return TPU_OK;
}
static void accumulate(char* dst, const char* src, int dt) {
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
  do {
    int64_t off = 0, voff = 0;
    for (int j = 0; j < n_idx; ++j) {
      int64_t k = tpu_host_load_i64(at(&idx[j], si), idx[j].dtype);
      TPU_RETURN_IF_ERROR(check_index(&k, out->sizes[j], j));
      off += k * out->strides[j];
    }
    for (int q = 0; q < srank; ++q) voff += si[q] * vals->strides[q];
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
