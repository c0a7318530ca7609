/* norm.c — custom targets CHANNEL_STATS and CHANNEL_AFFINE (see norm.h): the reductions and the
 * final per-channel maps of batch norm and group norm, one pass each over the tensor instead of
 * the generic reduce/elementwise executor's per-row work (costly when rows are short: 2x2 maps). */
#include <math.h>

#include "drivers/host/norm.h"

/* ---- runs of n elements (stride st) in double: sum x, sum (x - m)^2, sum g (x - m). Eight
 * partial sums so contiguous f32/f64 runs vectorize (the build keeps IEEE order otherwise). */
#define NORM_RUNS(T, SUF)                                                                          \
  static double run_sum_##SUF(const T* x, int64_t n, int64_t st) {                                 \
    double acc[8] = {0}, s = 0;                                                                    \
    int64_t i = 0;                                                                                 \
    if (st == 1)                                                                                   \
      for (; i + 8 <= n; i += 8)                                                                   \
        for (int l = 0; l < 8; ++l) acc[l] += (double)x[i + l];                                    \
    for (; i < n; ++i) s += (double)x[i * st];                                                     \
    for (int l = 0; l < 8; ++l) s += acc[l];                                                       \
    return s;                                                                                      \
  }                                                                                                \
  static double run_sq_##SUF(const T* x, int64_t n, int64_t st, double m) {                        \
    double acc[8] = {0}, s = 0;                                                                    \
    int64_t i = 0;                                                                                 \
    if (st == 1)                                                                                   \
      for (; i + 8 <= n; i += 8)                                                                   \
        for (int l = 0; l < 8; ++l) { double d = (double)x[i + l] - m; acc[l] += d * d; }          \
    for (; i < n; ++i) { double d = (double)x[i * st] - m; s += d * d; }                           \
    for (int l = 0; l < 8; ++l) s += acc[l];                                                       \
    return s;                                                                                      \
  }                                                                                                \
  static double run_dot_##SUF(const T* g, int64_t gs, const T* x, int64_t xs, int64_t n, double m) { \
    double acc[8] = {0}, s = 0;                                                                    \
    int64_t i = 0;                                                                                 \
    if (gs == 1 && xs == 1)                                                                        \
      for (; i + 8 <= n; i += 8)                                                                   \
        for (int l = 0; l < 8; ++l) acc[l] += (double)g[i + l] * ((double)x[i + l] - m);           \
    for (; i < n; ++i) s += (double)g[i * gs] * ((double)x[i * xs] - m);                           \
    for (int l = 0; l < 8; ++l) s += acc[l];                                                       \
    return s;                                                                                      \
  }                                                                                                \
  /* o = u * a + c, or u * a + v * b + c (v may be NULL) */                                        \
  static void run_affine_##SUF(T* o, int64_t os, const T* u, int64_t us, const T* v, int64_t vs,   \
                               int64_t n, T a, T b, T c) {                                         \
    if (os == 1 && us == 1 && (!v || vs == 1)) {                                                   \
      if (v) for (int64_t i = 0; i < n; ++i) o[i] = u[i] * a + v[i] * b + c;                       \
      else for (int64_t i = 0; i < n; ++i) o[i] = u[i] * a + c;                                    \
    } else if (v) {                                                                                \
      for (int64_t i = 0; i < n; ++i) o[i * os] = u[i * us] * a + v[i * vs] * b + c;               \
    } else {                                                                                       \
      for (int64_t i = 0; i < n; ++i) o[i * os] = u[i * us] * a + c;                               \
    }                                                                                              \
  }
NORM_RUNS(float, f32)
NORM_RUNS(double, f64)
#undef NORM_RUNS

typedef struct {
  int affine, n, f64;
  const tpu_host_view_t *xs, *out;
  int64_t A, B, I;
} ch_job_t;

static double vec_at(const tpu_host_view_t* v, int64_t b, int f64) {
  return f64 ? ((const double*)v->data)[b * v->strides[0]] : (double)((const float*)v->data)[b * v->strides[0]];
}

/* CHANNEL_STATS over channels [b0, b1) */
static void stats_worker(void* ctx, int64_t b0, int64_t b1) {
  const ch_job_t* J = ctx;
  const tpu_host_view_t *x = &J->xs[J->n == 1 ? 0 : 1], *g = J->n == 1 ? NULL : &J->xs[0];
  const double cnt = (double)(J->A * J->I);
  for (int64_t b = b0; b < b1; ++b) {
    double r0 = 0, r1 = 0;
    if (!g) {
      for (int64_t a = 0; a < J->A; ++a) {
        int64_t off = a * x->strides[0] + b * x->strides[1];
        r0 += J->f64 ? run_sum_f64((const double*)x->data + off, J->I, x->strides[2])
                     : run_sum_f32((const float*)x->data + off, J->I, x->strides[2]);
      }
      r0 = cnt > 0 ? r0 / cnt : NAN;
      for (int64_t a = 0; a < J->A; ++a) {
        int64_t off = a * x->strides[0] + b * x->strides[1];
        r1 += J->f64 ? run_sq_f64((const double*)x->data + off, J->I, x->strides[2], r0)
                     : run_sq_f32((const float*)x->data + off, J->I, x->strides[2], r0);
      }
      r1 = cnt > 0 ? r1 / cnt : NAN;
    } else {
      double m = vec_at(&J->xs[2], b, J->f64);
      for (int64_t a = 0; a < J->A; ++a) {
        int64_t go = a * g->strides[0] + b * g->strides[1], xo = a * x->strides[0] + b * x->strides[1];
        if (J->f64) {
          r0 += run_sum_f64((const double*)g->data + go, J->I, g->strides[2]);
          r1 += run_dot_f64((const double*)g->data + go, g->strides[2], (const double*)x->data + xo, x->strides[2], J->I, m);
        } else {
          r0 += run_sum_f32((const float*)g->data + go, J->I, g->strides[2]);
          r1 += run_dot_f32((const float*)g->data + go, g->strides[2], (const float*)x->data + xo, x->strides[2], J->I, m);
        }
      }
    }
    const tpu_host_view_t* o = J->out;
    if (J->f64) {
      ((double*)o->data)[b * o->strides[1]] = r0;
      ((double*)o->data)[o->strides[0] + b * o->strides[1]] = r1;
    } else {
      ((float*)o->data)[b * o->strides[1]] = (float)r0;
      ((float*)o->data)[o->strides[0] + b * o->strides[1]] = (float)r1;
    }
  }
}

/* CHANNEL_AFFINE over rows r = a * B + b in [r0, r1) */
static void affine_worker(void* ctx, int64_t r0, int64_t r1) {
  const ch_job_t* J = ctx;
  const int two = J->n == 5;
  const tpu_host_view_t *u = &J->xs[0], *v = two ? &J->xs[1] : NULL, *o = J->out;
  const tpu_host_view_t *va = &J->xs[two ? 2 : 1], *vb = two ? &J->xs[3] : NULL, *vc = &J->xs[two ? 4 : 2];
  for (int64_t r = r0; r < r1; ++r) {
    int64_t a = r / J->B, b = r % J->B;
    int64_t uo = a * u->strides[0] + b * u->strides[1], oo = a * o->strides[0] + b * o->strides[1];
    int64_t vo = v ? a * v->strides[0] + b * v->strides[1] : 0;
    double ca = vec_at(va, b, J->f64), cb = vb ? vec_at(vb, b, J->f64) : 0, cc = vec_at(vc, b, J->f64);
    if (J->f64)
      run_affine_f64((double*)o->data + oo, o->strides[2], (const double*)u->data + uo, u->strides[2],
                     v ? (const double*)v->data + vo : NULL, v ? v->strides[2] : 0, J->I, ca, cb, cc);
    else
      run_affine_f32((float*)o->data + oo, o->strides[2], (const float*)u->data + uo, u->strides[2],
                     v ? (const float*)v->data + vo : NULL, v ? v->strides[2] : 0, J->I, (float)ca, (float)cb,
                     (float)cc);
  }
}

static tpu_status_t ch_check(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out,
                             ch_job_t* J) {
  int affine = op->i0 == TPU_IR_CUSTOM_CHANNEL_AFFINE;
  if (affine ? (n != 3 && n != 5) : (n != 1 && n != 3))
    return TPU_ERR(INTERNAL, "host: channel %s with %d operands", affine ? "affine" : "stats", n);
  int nfull = affine ? (n == 5 ? 2 : 1) : (n == 3 ? 2 : 1);
  const tpu_host_view_t* x = &xs[0];
  int dt = out->dtype;
  if (dt != TPU_DTYPE_F32 && dt != TPU_DTYPE_F64) return TPU_ERR(UNSUPPORTED, "host: channel norm of %s", tpu_dtype_name(dt));
  if (x->rank != 3) return TPU_ERR(INTERNAL, "host: channel norm operand of rank %d", x->rank);
  *J = (ch_job_t){.affine = affine, .n = n, .f64 = dt == TPU_DTYPE_F64, .xs = xs, .out = out,
                  .A = x->sizes[0], .B = x->sizes[1], .I = x->sizes[2]};
  for (int k = 0; k < n; ++k) {
    const tpu_host_view_t* v = &xs[k];
    int ok = v->dtype == dt && (k < nfull ? v->rank == 3 && v->sizes[0] == J->A && v->sizes[1] == J->B && v->sizes[2] == J->I
                                          : v->rank == 1 && v->sizes[0] == J->B);
    if (!ok) return TPU_ERR(INTERNAL, "host: channel norm operand %d does not match", k);
  }
  int ook = affine ? out->rank == 3 && out->sizes[0] == J->A && out->sizes[1] == J->B && out->sizes[2] == J->I
                   : out->rank == 2 && out->sizes[0] == 2 && out->sizes[1] == J->B;
  if (!ook) return TPU_ERR(INTERNAL, "host: channel norm result shape does not match");
  return TPU_OK;
}

tpu_status_t tpu_host_k_channel(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  ch_job_t J = {0}; /* set by ch_check on success; zeroed for the compiler's flow analysis */
  TPU_RETURN_IF_ERROR(ch_check(op, n, xs, out, &J));
  int64_t per = TPU_MAX((int64_t)1, J.I * (J.affine ? 1 : J.A));
  if (J.affine) tpu_pool_parallel_for(J.A * J.B, TPU_MAX((int64_t)1, 32768 / per), affine_worker, &J);
  else tpu_pool_parallel_for(J.B, TPU_MAX((int64_t)1, 32768 / per), stats_worker, &J);
  return TPU_OK;
}

/* ---- reference: element by element through tpu_host_load_f64, straightforward sums */
tpu_status_t tpu_host_k_channel_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out) {
  ch_job_t J = {0}; /* set by ch_check on success; zeroed for the compiler's flow analysis */
  TPU_RETURN_IF_ERROR(ch_check(op, n, xs, out, &J));
  const int dt = out->dtype;
  const int64_t es = (int64_t)tpu_dtype_size(dt);
#define AT(v, a, b, i) tpu_host_load_f64((v)->data + ((a) * (v)->strides[0] + (b) * (v)->strides[1] + (i) * (v)->strides[2]) * es, dt)
#define VEC(v, b) tpu_host_load_f64((v)->data + (b) * (v)->strides[0] * es, dt)
  for (int64_t b = 0; b < J.B; ++b) {
    if (J.affine) {
      int two = n == 5;
      double ca = VEC(&xs[two ? 2 : 1], b), cb = two ? VEC(&xs[3], b) : 0, cc = VEC(&xs[two ? 4 : 2], b);
      for (int64_t a = 0; a < J.A; ++a)
        for (int64_t i = 0; i < J.I; ++i) {
          double r = AT(&xs[0], a, b, i) * ca + (two ? AT(&xs[1], a, b, i) * cb : 0) + cc;
          tpu_host_store_f64(out->data + (a * out->strides[0] + b * out->strides[1] + i * out->strides[2]) * es, dt, r);
        }
      continue;
    }
    double r0 = 0, r1 = 0, cnt = (double)(J.A * J.I);
    if (n == 1) {
      for (int64_t a = 0; a < J.A; ++a) for (int64_t i = 0; i < J.I; ++i) r0 += AT(&xs[0], a, b, i);
      r0 /= cnt;
      for (int64_t a = 0; a < J.A; ++a)
        for (int64_t i = 0; i < J.I; ++i) { double d = AT(&xs[0], a, b, i) - r0; r1 += d * d; }
      r1 /= cnt;
    } else {
      double m = VEC(&xs[2], b);
      for (int64_t a = 0; a < J.A; ++a)
        for (int64_t i = 0; i < J.I; ++i) {
          r0 += AT(&xs[0], a, b, i);
          r1 += AT(&xs[0], a, b, i) * (AT(&xs[1], a, b, i) - m);
        }
    }
    tpu_host_store_f64(out->data + b * out->strides[1] * es, dt, r0);
    tpu_host_store_f64(out->data + (out->strides[0] + b * out->strides[1]) * es, dt, r1);
  }
#undef AT
#undef VEC
  return TPU_OK;
}
