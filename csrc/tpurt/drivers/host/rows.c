/* rows.c — custom targets ROWS_SOFTMAX(_BWD) and ROWS_LAYER_NORM(_BWD) (see rows.h): softmax, log_softmax and
 * their gradients one row at a time, a few passes over each row instead of the generic
 * reduce + elementwise executor's max / exp / sum / divide intermediates. Also the base-ISA
 * build of the contiguous f32 row kernels (rows_impl.h). */
#include <math.h>
#include <stdlib.h>

#define ROWS_SUFFIX base
#include "drivers/host/rows_impl.h"

const tpu_host_rows_ops_t* tpu_host_rows_ops(void) {
  static const tpu_host_rows_ops_t* ops;
  const tpu_host_rows_ops_t* o = __atomic_load_n(&ops, __ATOMIC_ACQUIRE);
  if (!o) {
    o = tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma() ? &tpu_host_rows_ops_avx512
        : tpu_cpu_has_avx2_fma() ? &tpu_host_rows_ops_avx2 : &tpu_host_rows_ops_base;
    __atomic_store_n(&ops, o, __ATOMIC_RELEASE);
  }
  return o;
}

/* ---- f64 rows (strided), libm in double, same formulas */
static void softmax_f64(const double* x, int64_t xs, double* y, int64_t ys, int64_t n, int lg) {
  double m = -INFINITY, s = 0;
  for (int64_t i = 0; i < n; ++i) m = x[i * xs] > m ? x[i * xs] : m;
  for (int64_t i = 0; i < n; ++i) s += exp(x[i * xs] - m);
  if (lg) {
    double ls = log(s);
    for (int64_t i = 0; i < n; ++i) y[i * ys] = (x[i * xs] - m) - ls;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i * ys] = exp(x[i * xs] - m) / s;
  }
}
static void softmax_bwd_f64(const double* g, int64_t gs, const double* y, int64_t ys, double* o, int64_t os,
                            int64_t n, int log) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += log ? g[i * gs] : g[i * gs] * y[i * ys];
  for (int64_t i = 0; i < n; ++i)
    o[i * os] = log ? g[i * gs] - exp(y[i * ys]) * s : y[i * ys] * (g[i * gs] - s);
}

typedef struct {
  const tpu_host_rows_ops_t* ops;
  const tpu_host_view_t *x, *y, *out; /* forward: x; backward: x = g, y = y */
  int bwd, log, f64;
  int64_t N, I;
  int oom; /* set (atomically) by a worker whose scratch allocation failed */
} rows_job_t;

static int64_t row_off(const tpu_host_view_t* v, int64_t r, int64_t I) {
  return (r / I) * v->strides[0] + (r % I) * v->strides[2];
}

static void rows_worker(void* ctx, int64_t r0, int64_t r1) {
  rows_job_t* J = ctx;
  const int64_t N = J->N;
  const tpu_host_view_t *x = J->x, *y = J->y, *o = J->out;
  if (J->f64) {
    for (int64_t r = r0; r < r1; ++r) {
      const double* xp = (const double*)x->data + row_off(x, r, J->I);
      double* op = (double*)o->data + row_off(o, r, J->I);
      if (J->bwd) softmax_bwd_f64(xp, x->strides[1], (const double*)y->data + row_off(y, r, J->I), y->strides[1], op,
                                  o->strides[1], N, J->log);
      else softmax_f64(xp, x->strides[1], op, o->strides[1], N, J->log);
    }
    return;
  }
  int contig = x->strides[1] == 1 && o->strides[1] == 1 && (!J->bwd || y->strides[1] == 1);
  float* tmp = NULL;
  if (!contig && !(tmp = malloc((size_t)N * (J->bwd ? 3 : 2) * sizeof(float)))) {
    __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const float* xp = (const float*)x->data + row_off(x, r, J->I);
    const float* yp = J->bwd ? (const float*)y->data + row_off(y, r, J->I) : NULL;
    float* op = (float*)o->data + row_off(o, r, J->I);
    if (contig) {
      if (J->bwd) J->ops->softmax_bwd(xp, yp, op, N, J->log);
      else J->ops->softmax(xp, op, N, J->log);
      continue;
    }
    float *tx = tmp, *ty = tmp + N, *to = tmp + (J->bwd ? 2 * N : N);
    for (int64_t i = 0; i < N; ++i) tx[i] = xp[i * x->strides[1]];
    if (J->bwd) for (int64_t i = 0; i < N; ++i) ty[i] = yp[i * y->strides[1]];
    if (J->bwd) J->ops->softmax_bwd(tx, ty, to, N, J->log);
    else J->ops->softmax(tx, to, N, J->log);
    for (int64_t i = 0; i < N; ++i) op[i * o->strides[1]] = to[i];
  }
  free(tmp);
}

/* f32 rows along a strided dim with I innermost (stride 1 across rows): units of 8 adjacent rows,
 * u = a * ceil(I / 8) + block */
static void cols_worker(void* ctx, int64_t u0, int64_t u1) {
  rows_job_t* J = ctx;
  const int64_t nb = (J->I + 7) / 8;
  const tpu_host_view_t *x = J->x, *y = J->y, *o = J->out;
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t a = u / nb, i0 = (u % nb) * 8, w = TPU_MIN((int64_t)8, J->I - i0);
    const float* xp = (const float*)x->data + a * x->strides[0] + i0;
    float* op = (float*)o->data + a * o->strides[0] + i0;
    if (J->bwd)
      J->ops->softmax_cols_bwd(xp, x->strides[1], (const float*)y->data + a * y->strides[0] + i0, y->strides[1], op,
                               o->strides[1], J->N, w, J->log);
    else J->ops->softmax_cols(xp, x->strides[1], op, o->strides[1], J->N, w, J->log);
  }
}

static int same3(const tpu_host_view_t* v, const tpu_host_view_t* o) {
  return v->rank == 3 && v->dtype == o->dtype && v->sizes[0] == o->sizes[0] && v->sizes[1] == o->sizes[1] &&
         v->sizes[2] == o->sizes[2];
}

/* ---- layer norm rows (f32): operands gathered into a scratch row when not contiguous */
typedef struct {
  const tpu_host_rows_ops_t* ops;
  const tpu_host_view_t *g, *x, *mean, *rstd, *w, *b, *out; /* g: backward only */
  int64_t N;
  int oom;
} ln_job_t;

static const float* ln_row(const tpu_host_view_t* v, int64_t r, float* tmp, int64_t N) {
  const float* p = (const float*)v->data + (v->rank == 2 ? r * v->strides[0] : 0);
  int64_t st = v->strides[v->rank - 1];
  if (st == 1) return p;
  for (int64_t i = 0; i < N; ++i) tmp[i] = p[i * st];
  return tmp;
}
static float ln_at(const tpu_host_view_t* v, int64_t r) { return ((const float*)v->data)[r * v->strides[0]]; }

static void ln_worker(void* ctx, int64_t r0, int64_t r1) {
  ln_job_t* J = ctx;
  const int64_t N = J->N;
  float* tmp = malloc((size_t)N * 5 * sizeof(float)); /* x, g, w, b, out */
  if (!tmp) { __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED); return; }
  const float* w = J->w ? ln_row(J->w, 0, tmp + 2 * N, N) : NULL;
  const float* b = J->b ? ln_row(J->b, 0, tmp + 3 * N, N) : NULL;
  const int64_t ost = J->out->strides[1];
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = ln_row(J->x, r, tmp, N);
    float* o = ost == 1 ? (float*)J->out->data + r * J->out->strides[0] : tmp + 4 * N;
    if (J->g) J->ops->layer_norm_bwd(ln_row(J->g, r, tmp + N, N), x, ln_at(J->mean, r), ln_at(J->rstd, r), w, o, N);
    else J->ops->layer_norm(x, ln_at(J->mean, r), ln_at(J->rstd, r), w, b, o, N);
    if (ost != 1) {
      float* d = (float*)J->out->data + r * J->out->strides[0];
      for (int64_t i = 0; i < N; ++i) d[i * ost] = o[i];
    }
  }
  free(tmp);
}

static tpu_status_t k_layer_norm(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const int bwd = op->i0 == TPU_IR_CUSTOM_ROWS_LAYER_NORM_BWD, hw = (op->i1 & 1) != 0, hb = !bwd && (op->i1 & 2);
  const int nf = bwd ? 2 : 1; /* leading [M, N] operands */
  if (n != nf + 2 + hw + hb || out->rank != 2 || out->dtype != TPU_DTYPE_F32)
    return TPU_ERR(INTERNAL, "host: row layer norm with %d operands, result rank %d %s", n, out->rank,
                   tpu_dtype_name(out->dtype));
  const int64_t M = out->sizes[0], N = out->sizes[1];
  for (int k = 0; k < n; ++k) {
    const tpu_host_view_t* v = &xs[k];
    int64_t want = k < nf ? -1 : k < nf + 2 ? M : N;
    int ok = v->dtype == TPU_DTYPE_F32 && (want < 0 ? v->rank == 2 && v->sizes[0] == M && v->sizes[1] == N
                                                     : v->rank == 1 && v->sizes[0] == want);
    if (!ok) return TPU_ERR(INTERNAL, "host: row layer norm operand %d does not match", k);
  }
  ln_job_t J = {.ops = tpu_host_rows_ops(), .g = bwd ? &xs[0] : NULL, .x = &xs[nf - 1],
                .mean = &xs[nf], .rstd = &xs[nf + 1], .w = hw ? &xs[nf + 2] : NULL,
                .b = hb ? &xs[nf + 2 + hw] : NULL, .out = out, .N = N};
  if (M == 0 || N == 0) return TPU_OK;
  tpu_pool_parallel_for_dynamic(M, TPU_MAX((int64_t)1, 16384 / N), ln_worker, &J);
  if (J.oom) return TPU_ERR(OUT_OF_MEMORY, "host: row layer norm: out of memory for %lld-element scratch rows", (long long)N);
  return TPU_OK;
}

/* ---- GELU and SILU (f32, any rank): flat when every operand is contiguous, else rows along the last dim */
enum { GELU_CHUNK = 4096 };
typedef struct {
  void (*fwd)(const float* x, float* y, int64_t n);                  /* the forward kernel, or */
  void (*bwd)(const float* g, const float* x, float* o, int64_t n);  /* the backward one, or */
  void (*lerp)(const float* a, const float* b, const float* w, int64_t ws, float* o, int64_t n);
  const tpu_host_view_t *g, *x, *out; /* g: backward only (lerp: g = start, x = end) */
  const tpu_host_view_t* w;           /* lerp's weight: rank 0, or the result's shape; addc: t2 */
  const tpu_host_view_t* s;           /* addc: self (x = t1) */
  float v; int div;                   /* addc: value, addcdiv */
  const tpu_host_rows_ops_t* ops;
  int64_t N, flat;                    /* last-dim length; flat: operands are contiguous */
  int oom;
} gelu_job_t;

static int view_contig(const tpu_host_view_t* v) {
  int64_t st = 1;
  for (int d = v->rank - 1; d >= 0; --d) {
    if (v->sizes[d] != 1 && v->strides[d] != st) return 0;
    st *= v->sizes[d];
  }
  return 1;
}
/* every element the same one (a broadcast scalar: stride 0 wherever the size is not 1), rank >= 1 */
static int view_splat(const tpu_host_view_t* v) {
  for (int d = 0; d < v->rank; ++d)
    if (v->sizes[d] != 1 && v->strides[d] != 0) return 0;
  return v->rank > 0;
}
/* the flat path's operand for elements [a, a + len): in place, or a splat's value repeated into buf */
static const float* flat_src(const tpu_host_view_t* v, int64_t a, int64_t len, float* buf) {
  if (!view_splat(v)) return (const float*)v->data + a;
  const float c = *(const float*)v->data;
  for (int64_t i = 0; i < len; ++i) buf[i] = c;
  return buf;
}
static int64_t view_row_off(const tpu_host_view_t* v, int64_t r) { /* element offset of row r (dims 0..rank-2) */
  int64_t off = 0;
  for (int d = v->rank - 2; d >= 0; --d) { off += (r % v->sizes[d]) * v->strides[d]; r /= v->sizes[d]; }
  return off;
}
static const float* gelu_row(const tpu_host_view_t* v, int64_t r, float* tmp, int64_t N) {
  const float* p = (const float*)v->data + view_row_off(v, r);
  int64_t st = v->rank ? v->strides[v->rank - 1] : 1;
  if (st == 1) return p;
  for (int64_t i = 0; i < N; ++i) tmp[i] = p[i * st];
  return tmp;
}

static void gelu_worker(void* ctx, int64_t r0, int64_t r1) {
  gelu_job_t* J = ctx;
  if (J->flat) {
    /* index c is elements [c, c + 1) * GELU_CHUNK; splat operands (a broadcast scalar, e.g. a compiled
     * optimizer's rank-0 value broadcast over a weight) are repeated into a chunk-sized buffer of their own */
    const int splat = view_splat(J->x) || (J->g && view_splat(J->g)) || (J->s && view_splat(J->s)) ||
                      (J->w && view_splat(J->w));
    float* sbuf = splat ? malloc(3 * GELU_CHUNK * sizeof(float)) : NULL;
    if (splat && !sbuf) { __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED); return; }
    float *sx = sbuf, *sg = sbuf + GELU_CHUNK, *sw = sbuf + 2 * GELU_CHUNK;
    /* without a splat, the whole range at once; with one, a chunk at a time */
    const int64_t total = J->N, step = splat ? 1 : r1 - r0;
    for (int64_t c = r0; c < r1; c += step) {
      const int64_t a = c * GELU_CHUNK, b = TPU_MIN(total, (c + step) * GELU_CHUNK), len = b - a;
      const float* x = flat_src(J->x, a, len, sx);
      float* o = (float*)J->out->data + a;
      if (J->s) J->ops->addc(flat_src(J->s, a, len, sg), x, flat_src(J->w, a, len, sw), J->v, o, len, J->div);
      else if (J->lerp) {
        const int ws = J->w->rank != 0;
        J->lerp(flat_src(J->g, a, len, sg), x, ws ? flat_src(J->w, a, len, sw) : (const float*)J->w->data, ws, o,
                len);
      } else if (J->g) J->bwd(flat_src(J->g, a, len, sg), x, o, len);
      else J->fwd(x, o, len);
    }
    free(sbuf);
    return;
  }
  const int64_t N = J->N, ost = J->out->rank ? J->out->strides[J->out->rank - 1] : 1;
  float* tmp = malloc((size_t)N * 5 * sizeof(float)); /* x, g, out, w, s */
  if (!tmp) { __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED); return; }
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = gelu_row(J->x, r, tmp, N);
    float* op = (float*)J->out->data + view_row_off(J->out, r);
    float* o = ost == 1 ? op : tmp + 2 * N;
    if (J->s)
      J->ops->addc(gelu_row(J->s, r, tmp + 4 * N, N), x, gelu_row(J->w, r, tmp + 3 * N, N), J->v, o, N, J->div);
    else if (J->lerp) {
      const int ws = J->w->rank != 0;
      J->lerp(gelu_row(J->g, r, tmp + N, N), x, ws ? gelu_row(J->w, r, tmp + 3 * N, N) : (const float*)J->w->data, ws, o, N);
    } else if (J->g) J->bwd(gelu_row(J->g, r, tmp + N, N), x, o, N);
    else J->fwd(x, o, N);
    if (ost != 1) for (int64_t i = 0; i < N; ++i) op[i * ost] = o[i];
  }
  free(tmp);
}

static tpu_status_t k_gelu(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const int bwd = op->i0 == TPU_IR_CUSTOM_GELU_BWD || op->i0 == TPU_IR_CUSTOM_SILU_BWD;
  const int silu = op->i0 == TPU_IR_CUSTOM_SILU || op->i0 == TPU_IR_CUSTOM_SILU_BWD;
  const int lerp = op->i0 == TPU_IR_CUSTOM_LERP, addc = op->i0 == TPU_IR_CUSTOM_ADDC;
  if (addc) { /* (self, t1, t2, value): value rank 0 */
    if (n != 4 || out->dtype != TPU_DTYPE_F32 || xs[3].dtype != TPU_DTYPE_F32 || xs[3].rank != 0)
      return TPU_ERR(INTERNAL, "host: addcmul/addcdiv with %d operands", n);
    n = 3;
  } else if (lerp) { /* (start, end, weight): the weight is rank 0 or shaped as the result */
    if (n != 3 || out->dtype != TPU_DTYPE_F32 || xs[2].dtype != TPU_DTYPE_F32 ||
        (xs[2].rank != 0 && xs[2].rank != out->rank))
      return TPU_ERR(INTERNAL, "host: lerp with %d operands", n);
    n = xs[2].rank == 0 ? 2 : 3;
  } else if (n != (bwd ? 2 : 1) || out->dtype != TPU_DTYPE_F32)
    return TPU_ERR(INTERNAL, "host: gelu with %d operands, result %s", n, tpu_dtype_name(out->dtype));
  int contig = view_contig(out);
  int64_t total = 1;
  for (int d = 0; d < out->rank; ++d) total *= out->sizes[d];
  for (int k = 0; k < n; ++k) {
    const tpu_host_view_t* v = &xs[k];
    int ok = v->dtype == TPU_DTYPE_F32 && v->rank == out->rank;
    for (int d = 0; ok && d < out->rank; ++d) ok = v->sizes[d] == out->sizes[d];
    if (!ok) return TPU_ERR(INTERNAL, "host: gelu operand %d does not match its result", k);
    contig &= view_contig(v) || view_splat(v);
  }
  if (total == 0) return TPU_OK;
  const tpu_host_rows_ops_t* ops = tpu_host_rows_ops();
  gelu_job_t J = {.fwd = silu ? ops->silu : ops->gelu, .bwd = silu ? ops->silu_bwd : ops->gelu_bwd,
                  .lerp = lerp ? ops->lerp : NULL, .g = bwd || lerp ? &xs[0] : NULL, .x = &xs[bwd || lerp],
                  .w = lerp || addc ? &xs[2] : NULL, .out = out, .ops = ops};
  if (addc) { J.s = &xs[0]; J.x = &xs[1]; J.g = NULL; J.v = *(const float*)xs[3].data; J.div = op->i1 == 1; }
  if (contig || out->rank <= 1) {
    if (!contig) { /* rank 1 strided: one row */
      J.N = total;
      tpu_pool_parallel_for(1, 1, gelu_worker, &J);
    } else {
      J.flat = 1; J.N = total;
      tpu_pool_parallel_for((total + GELU_CHUNK - 1) / GELU_CHUNK, 1, gelu_worker, &J);
    }
  } else {
    J.N = out->sizes[out->rank - 1];
    if (J.N == 0) return TPU_OK;
    tpu_pool_parallel_for(total / J.N, TPU_MAX((int64_t)1, 16384 / J.N), gelu_worker, &J);
  }
  if (J.oom) return TPU_ERR(OUT_OF_MEMORY, "host: gelu: out of memory for a %lld-element scratch row", (long long)J.N);
  return TPU_OK;
}

/* ---- COL_SUMS (f32 [M, N] -> [N], or the layer-norm pair -> [2, N]): column blocks in parallel. Plain sums
 * stream whole rows (blocks up to COL_WIDE columns); the layer-norm pair keeps register blocks down
 * COL_ROWS rows (blocks up to COL_BLOCK columns). Both split N into one block per thread where N allows
 * (minGPT's N = 128 ran on one thread). */
enum { COL_BLOCK = 256, COL_WIDE = 2048 };
typedef struct {
  const tpu_host_rows_ops_t* ops;
  const tpu_host_view_t *g, *x, *mean, *rstd, *out; /* ln: g, x, mean, rstd; plain: x */
  int64_t M, N, bw; /* bw: columns per block */
} col_job_t;

static void col_worker(void* ctx, int64_t b0, int64_t b1) {
  col_job_t* J = ctx;
  double a1[COL_WIDE], a2[COL_BLOCK];
  const tpu_host_view_t *x = J->x, *o = J->out;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t j0 = b * J->bw, nj = TPU_MIN(J->bw, J->N - j0);
    for (int64_t j = 0; j < nj; ++j) a1[j] = 0;
    if (J->g) for (int64_t j = 0; j < nj; ++j) a2[j] = 0;
    const float* xp = (const float*)x->data + j0 * x->strides[1];
    if (!J->g) {
      if (x->strides[1] == 1) J->ops->col_sums(xp, x->strides[0], J->M, a1, nj);
      else for (int64_t r = 0; r < J->M; ++r) for (int64_t j = 0; j < nj; ++j) a1[j] += (double)xp[r * x->strides[0] + j * x->strides[1]];
      float* op = (float*)o->data + j0 * o->strides[0];
      for (int64_t j = 0; j < nj; ++j) op[j * o->strides[0]] = (float)a1[j];
      continue;
    }
    const tpu_host_view_t* g = J->g;
    const float* gp = (const float*)g->data + j0 * g->strides[1];
    const float *mp = (const float*)J->mean->data, *rp = (const float*)J->rstd->data;
    const int64_t ms = J->mean->strides[0], rs = J->rstd->strides[0];
    if (x->strides[1] == 1 && g->strides[1] == 1) {
      J->ops->ln_col_sums(gp, g->strides[0], xp, x->strides[0], mp, ms, rp, rs, J->M, a1, a2, nj);
    } else {
      for (int64_t r = 0; r < J->M; ++r) {
        const float mu = mp[r * ms], rstd = rp[r * rs];
        for (int64_t j = 0; j < nj; ++j) {
          const float gv = gp[r * g->strides[0] + j * g->strides[1]], xv = xp[r * x->strides[0] + j * x->strides[1]];
          a1[j] += (double)(gv * ((xv - mu) * rstd)); a2[j] += (double)gv;
        }
      }
    }
    float* op = (float*)o->data + j0 * o->strides[1];
    for (int64_t j = 0; j < nj; ++j) { op[j * o->strides[1]] = (float)a1[j]; op[o->strides[0] + j * o->strides[1]] = (float)a2[j]; }
  }
}

static tpu_status_t k_col_sums(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  const int ln = op->i1 == 1;
  if (n != (ln ? 4 : 1) || out->dtype != TPU_DTYPE_F32 || out->rank != (ln ? 2 : 1))
    return TPU_ERR(INTERNAL, "host: column sums with %d operands, result rank %d %s", n, out->rank, tpu_dtype_name(out->dtype));
  const int64_t M = xs[0].sizes[0], N = xs[0].sizes[1];
  for (int k = 0; k < n; ++k) {
    const tpu_host_view_t* v = &xs[k];
    int ok = v->dtype == TPU_DTYPE_F32 && (k < (ln ? 2 : 1) ? v->rank == 2 && v->sizes[0] == M && v->sizes[1] == N
                                                           : v->rank == 1 && v->sizes[0] == M);
    if (!ok) return TPU_ERR(INTERNAL, "host: column sums operand %d does not match", k);
  }
  if (out->sizes[out->rank - 1] != N || (ln && out->sizes[0] != 2))
    return TPU_ERR(INTERNAL, "host: column sums result does not match its operands");
  if (N == 0) return TPU_OK;
  col_job_t J = {.ops = tpu_host_rows_ops(), .g = ln ? &xs[0] : NULL, .x = &xs[ln ? 1 : 0], .mean = ln ? &xs[2] : NULL,
                 .rstd = ln ? &xs[3] : NULL, .out = out, .M = M, .N = N, .bw = COL_BLOCK};
  J.bw = tpu_pool_column_block(N, ln ? COL_BLOCK : COL_WIDE, ln ? 32 : 64, 8);
  tpu_pool_parallel_for((N + J.bw - 1) / J.bw, 1, col_worker, &J);
  return TPU_OK;
}

tpu_status_t tpu_host_k_rows(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  if (op->i0 == TPU_IR_CUSTOM_COL_SUMS) return k_col_sums(op, n, xs, out);
  if (op->i0 == TPU_IR_CUSTOM_ROWS_LAYER_NORM || op->i0 == TPU_IR_CUSTOM_ROWS_LAYER_NORM_BWD)
    return k_layer_norm(op, n, xs, out);
  if (op->i0 == TPU_IR_CUSTOM_GELU || op->i0 == TPU_IR_CUSTOM_GELU_BWD || op->i0 == TPU_IR_CUSTOM_SILU ||
      op->i0 == TPU_IR_CUSTOM_SILU_BWD || op->i0 == TPU_IR_CUSTOM_LERP || op->i0 == TPU_IR_CUSTOM_ADDC)
    return k_gelu(op, n, xs, out);
  const int bwd = op->i0 == TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD;
  if (n != (bwd ? 2 : 1) || out->rank != 3)
    return TPU_ERR(INTERNAL, "host: row softmax with %d operands of result rank %d", n, out->rank);
  if (out->dtype != TPU_DTYPE_F32 && out->dtype != TPU_DTYPE_F64)
    return TPU_ERR(UNSUPPORTED, "host: row softmax of %s", tpu_dtype_name(out->dtype));
  for (int k = 0; k < n; ++k)
    if (!same3(&xs[k], out)) return TPU_ERR(INTERNAL, "host: row softmax operand %d does not match its result", k);
  rows_job_t J = {.ops = tpu_host_rows_ops(), .x = &xs[0], .y = bwd ? &xs[1] : NULL, .out = out, .bwd = bwd,
                  .log = op->i1 != 0, .f64 = out->dtype == TPU_DTYPE_F64, .N = out->sizes[1], .I = out->sizes[2]};
  const int64_t rows = out->sizes[0] * out->sizes[2];
  if (rows == 0 || J.N == 0) return TPU_OK;
  if (!J.f64 && J.I > 1 && out->strides[2] == 1 && xs[0].strides[2] == 1 && (!bwd || xs[1].strides[2] == 1)) {
    const int64_t units = out->sizes[0] * ((J.I + 7) / 8);
    tpu_pool_parallel_for_dynamic(units, TPU_MAX((int64_t)1, 2048 / J.N), cols_worker, &J);
    return TPU_OK;
  }
  tpu_pool_parallel_for_dynamic(rows, TPU_MAX((int64_t)1, 16384 / J.N), rows_worker, &J);
  if (J.oom) return TPU_ERR(OUT_OF_MEMORY, "host: row softmax: out of memory for a %lld-element scratch row",
                            (long long)J.N);
  return TPU_OK;
}
