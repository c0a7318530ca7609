/* norm.c — custom targets CHANNEL_STATS and CHANNEL_AFFINE (the reductions and final per-channel maps of
 * batch norm and layer norm) and GROUP_NORM_STATS / GROUP_NORM / GROUP_NORM_SUMS / GROUP_NORM_BWD (group norm's
 * forward and backward as fused steps); see norm.h. One pass each over the tensor instead of the generic
 * reduce/elementwise executor's per-row work (costly when rows are short: 2x2 maps). */
#include <math.h>
#include <stdlib.h>

#include "drivers/host/norm.h"
#include "drivers/host/rows.h" /* stat_f32: contiguous f32 runs in the CPU's vector width */

/* ---- runs of n elements (stride st) in double: sum x, sum (x - m)^2, sum g (x - m). Eight
 * partial sums so contiguous f32/f64 runs vectorize (the build keeps IEEE order otherwise). */
#define NORM_RUNS(T, SUF, LD, ST, CT)                                                                          \
  static double run_sum_##SUF(const T* x, int64_t n, int64_t st) {                                 \
    double acc[8] = {0}, s = 0;                                                                    \
    int64_t i = 0;                                                                                 \
    if (st == 1)                                                                                   \
      for (; i + 8 <= n; i += 8)                                                                   \
        for (int l = 0; l < 8; ++l) acc[l] += (double)LD(x[i + l]);                                    \
    for (; i < n; ++i) s += (double)LD(x[i * st]);                                                     \
    for (int l = 0; l < 8; ++l) s += acc[l];                                                       \
    return s;                                                                                      \
  }                                                                                                \
  static double run_sq_##SUF(const T* x, int64_t n, int64_t st, double m) {                        \
    double acc[8] = {0}, s = 0;                                                                    \
    int64_t i = 0;                                                                                 \
    if (st == 1)                                                                                   \
      for (; i + 8 <= n; i += 8)                                                                   \
        for (int l = 0; l < 8; ++l) { double d = (double)LD(x[i + l]) - m; acc[l] += d * d; }          \
    for (; i < n; ++i) { double d = (double)LD(x[i * st]) - m; s += d * d; }                           \
    for (int l = 0; l < 8; ++l) s += acc[l];                                                       \
    return s;                                                                                      \
  }                                                                                                \
  static double run_dot_##SUF(const T* g, int64_t gs, const T* x, int64_t xs, int64_t n, double m) { \
    double acc[8] = {0}, s = 0;                                                                    \
    int64_t i = 0;                                                                                 \
    if (gs == 1 && xs == 1)                                                                        \
      for (; i + 8 <= n; i += 8)                                                                   \
        for (int l = 0; l < 8; ++l) acc[l] += (double)LD(g[i + l]) * ((double)LD(x[i + l]) - m);           \
    for (; i < n; ++i) s += (double)LD(g[i * gs]) * ((double)LD(x[i * xs]) - m);                           \
    for (int l = 0; l < 8; ++l) s += acc[l];                                                       \
    return s;                                                                                      \
  }                                                                                                \
  /* o = u * a + c, or u * a + v * b + c (v may be NULL) */                                        \
  static void run_affine_##SUF(T* o, int64_t os, const T* u, int64_t us, const T* v, int64_t vs,   \
                               int64_t n, CT a, CT b, CT c) {                                         \
    if (os == 1 && us == 1 && (!v || vs == 1)) {                                                   \
      if (v) for (int64_t i = 0; i < n; ++i) o[i] = ST(LD(u[i]) * a + LD(v[i]) * b + c);                       \
      else for (int64_t i = 0; i < n; ++i) o[i] = ST(LD(u[i]) * a + c);                                    \
    } else if (v) {                                                                                \
      for (int64_t i = 0; i < n; ++i) o[i * os] = ST(LD(u[i * us]) * a + LD(v[i * vs]) * b + c);               \
    } else {                                                                                       \
      for (int64_t i = 0; i < n; ++i) o[i * os] = ST(LD(u[i * us]) * a + c);                               \
    }                                                                                              \
  }
#define NORM_ID(v) (v)
NORM_RUNS(float, f32, NORM_ID, NORM_ID, float)
NORM_RUNS(double, f64, NORM_ID, NORM_ID, double)
/* bf16 / f16 full operands (vectors and statistics f32): widened exactly, the affine map in f32 as the f32
 * kernel and rounded once to the output dtype (what the f32 kernel followed by a convert gave) */
NORM_RUNS(uint16_t, bf16, tpu_bf16_to_f32, tpu_f32_to_bf16, float)
NORM_RUNS(uint16_t, f16, tpu_f16_to_f32, tpu_f32_to_f16, float)
#undef NORM_RUNS
#undef NORM_ID

typedef struct {
  int affine, n, f64;
  int kind; /* full operands (and the affine result): 0 f32, 1 f64, 2 bf16, 3 f16 (vectors / statistics f32) */
  const tpu_host_view_t *xs, *out;
  int64_t A, B, I;
} ch_job_t;

static double vec_at(const tpu_host_view_t* v, int64_t b, int f64) {
  return f64 ? ((const double*)v->data)[b * v->strides[0]] : (double)((const float*)v->data)[b * v->strides[0]];
}

/* mean and biased variance from s1 = sum (x - k0), s2 = sum (x - k0)^2 over cnt elements, k0 the first one (one pass
 * in double, cancellation only as (mean - k0)^2 / variance); 0 when either is inf / NaN: the two-pass sums give the
 * IEEE results (inf mean, NaN variance) */
static int shifted_moments(double k0, double s1, double s2, double cnt, double* out_m, double* out_v) {
  const double d = s1 / cnt, v = s2 / cnt - d * d;
  *out_m = k0 + d;
  *out_v = v > 0 ? v : 0;
  return isfinite(*out_m) && isfinite(*out_v);
}

/* one run of the full operand(s) at element offsets, by kind */
static double k_sum(int kind, const char* d, int64_t off, int64_t n, int64_t st) {
  switch (kind) {
    case 1: return run_sum_f64((const double*)(const void*)d + off, n, st);
    case 2: return run_sum_bf16((const uint16_t*)(const void*)d + off, n, st);
    case 3: return run_sum_f16((const uint16_t*)(const void*)d + off, n, st);
    default: return run_sum_f32((const float*)(const void*)d + off, n, st);
  }
}
static double k_sq(int kind, const char* d, int64_t off, int64_t n, int64_t st, double m) {
  switch (kind) {
    case 1: return run_sq_f64((const double*)(const void*)d + off, n, st, m);
    case 2: return run_sq_bf16((const uint16_t*)(const void*)d + off, n, st, m);
    case 3: return run_sq_f16((const uint16_t*)(const void*)d + off, n, st, m);
    default: return run_sq_f32((const float*)(const void*)d + off, n, st, m);
  }
}
static double k_dot(int kind, const char* g, int64_t go, int64_t gs, const char* x, int64_t xo, int64_t xs, int64_t n,
                    double m) {
  switch (kind) {
    case 1: return run_dot_f64((const double*)(const void*)g + go, gs, (const double*)(const void*)x + xo, xs, n, m);
    case 2: return run_dot_bf16((const uint16_t*)(const void*)g + go, gs, (const uint16_t*)(const void*)x + xo, xs, n, m);
    case 3: return run_dot_f16((const uint16_t*)(const void*)g + go, gs, (const uint16_t*)(const void*)x + xo, xs, n, m);
    default: return run_dot_f32((const float*)(const void*)g + go, gs, (const float*)(const void*)x + xo, xs, n, m);
  }
}

/* CHANNEL_STATS over channels [b0, b1) */
static void stats_worker(void* ctx, int64_t b0, int64_t b1) {
  const ch_job_t* J = ctx;
  const tpu_host_view_t *x = &J->xs[J->n == 1 ? 0 : 1], *g = J->n == 1 ? NULL : &J->xs[0];
  const double cnt = (double)(J->A * J->I);
  /* contiguous f32 runs of 16 or more: one pass per run (rows.h stat2_f32, in the CPU's vector width) */
  const int fast = J->kind == 0 && J->I >= 16 && x->strides[2] == 1 && (!g || g->strides[2] == 1);
  const tpu_host_rows_ops_t* ops = fast ? tpu_host_rows_ops() : NULL;
  /* one run per channel (A = 1: layer norm's [1, M, n], batch norm's [1, C, HxW]): the runs of a block of
   * channels in one call (stat2_runs: the same sums per run, without a call and its latency per 16-element run) */
  const int batch = fast && J->A == 1 && (!g || g->strides[1] == x->strides[1]);
  enum { SB = 64 };
  double bt1[SB], bt2[SB], bm[SB];
  for (int64_t b = b0; b < b1; ++b) {
    double r0 = 0, r1 = 0;
    const int64_t k = (b - b0) % SB;
    if (batch && k == 0) {
      const int64_t nb = TPU_MIN((int64_t)SB, b1 - b), st = x->strides[1];
      if (g) for (int64_t j = 0; j < nb; ++j) bm[j] = vec_at(&J->xs[2], b + j, J->f64);
      ops->stat2_runs(g ? (const float*)g->data + b * st : NULL, (const float*)x->data + b * st, st, J->I, nb,
                      g ? bm : NULL, bt1, bt2);
    }
    if (fast && !g) { /* sums of x - k0 and (x - k0)^2, k0 = the channel's first element (shifted_moments) */
      const float* xb = (const float*)x->data + b * x->strides[1];
      const double k0 = (double)xb[0];
      if (batch) { r0 += bt1[k]; r1 += bt2[k]; } /* 0 + sum as the per-run path (sign of a zero sum) */
      else
        for (int64_t a = 0; a < J->A; ++a) {
          double t1, t2;
          ops->stat2_f32(NULL, xb + a * x->strides[0], J->I, k0, &t1, &t2);
          r0 += t1; r1 += t2;
        }
      if (shifted_moments(k0, r0, r1, cnt, &r0, &r1)) goto store;
      r0 = r1 = 0; /* an inf or NaN: the two-pass sums below */
    }
    if (fast && g) {
      if (batch) { r0 += bt1[k]; r1 += bt2[k]; goto store; } /* 0 + sum as the per-run path */
      const double m = vec_at(&J->xs[2], b, J->f64);
      for (int64_t a = 0; a < J->A; ++a) {
        double t1, t2;
        ops->stat2_f32((const float*)g->data + a * g->strides[0] + b * g->strides[1],
                       (const float*)x->data + a * x->strides[0] + b * x->strides[1], J->I, m, &t1, &t2);
        r0 += t1; r1 += t2;
      }
      goto store;
    }
    if (!g) {
      for (int64_t a = 0; a < J->A; ++a)
        r0 += k_sum(J->kind, x->data, a * x->strides[0] + b * x->strides[1], J->I, x->strides[2]);
      r0 = cnt > 0 ? r0 / cnt : NAN;
      for (int64_t a = 0; a < J->A; ++a)
        r1 += k_sq(J->kind, x->data, a * x->strides[0] + b * x->strides[1], J->I, x->strides[2], r0);
      r1 = cnt > 0 ? r1 / cnt : NAN;
    } else {
      double m = vec_at(&J->xs[2], b, J->f64);
      for (int64_t a = 0; a < J->A; ++a) {
        int64_t go = a * g->strides[0] + b * g->strides[1], xo = a * x->strides[0] + b * x->strides[1];
        r0 += k_sum(J->kind, g->data, go, J->I, g->strides[2]);
        r1 += k_dot(J->kind, g->data, go, g->strides[2], x->data, xo, x->strides[2], J->I, m);
      }
    }
  store:;
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
  if (J->kind == 0 && J->A == 1 && u->strides[2] == 1 && o->strides[2] == 1 && (!v || v->strides[2] == 1) &&
      va->strides[0] == 1 && vc->strides[0] == 1 && (!vb || vb->strides[0] == 1)) {
    /* one row per channel with contiguous vectors (batch norm with N == 1: [1, C, HxW]): all rows in one call */
    tpu_host_rows_ops()->affine_rows((const float*)u->data + r0 * u->strides[1], u->strides[1],
                                     v ? (const float*)v->data + r0 * v->strides[1] : NULL, v ? v->strides[1] : 0,
                                     (float*)o->data + r0 * o->strides[1], o->strides[1], J->I, r1 - r0,
                                     (const float*)va->data + r0, vb ? (const float*)vb->data + r0 : NULL,
                                     (const float*)vc->data + r0);
    return;
  }
  if (J->kind == 0 && u->strides[2] == 1 && o->strides[2] == 1 && (!v || v->strides[2] == 1)) {
    /* f32 rows with contiguous runs (batch norm's NCHW [N, C, HxW]): no per-row index division, dispatch or
     * double round trip (the per-row overhead was most of a 4x4 map's time); the same float operations */
    const int64_t I = J->I, B = J->B;
    const float *pa = (const float*)va->data, *pb = vb ? (const float*)vb->data : NULL, *pc = (const float*)vc->data;
    int64_t a = r0 / B, b = r0 % B;
    for (int64_t r = r0; r < r1; ++r) {
      const float* up = (const float*)u->data + a * u->strides[0] + b * u->strides[1];
      float* op = (float*)o->data + a * o->strides[0] + b * o->strides[1];
      const float ca = pa[b * va->strides[0]], cc = pc[b * vc->strides[0]];
      if (v) {
        const float* vp = (const float*)v->data + a * v->strides[0] + b * v->strides[1];
        const float cb = pb[b * vb->strides[0]];
        for (int64_t i = 0; i < I; ++i) op[i] = up[i] * ca + vp[i] * cb + cc;
      } else {
        for (int64_t i = 0; i < I; ++i) op[i] = up[i] * ca + cc;
      }
      if (++b == B) { b = 0; ++a; }
    }
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    int64_t a = r / J->B, b = r % J->B;
    int64_t uo = a * u->strides[0] + b * u->strides[1], oo = a * o->strides[0] + b * o->strides[1];
    int64_t vo = v ? a * v->strides[0] + b * v->strides[1] : 0;
    double ca = vec_at(va, b, J->f64), cb = vb ? vec_at(vb, b, J->f64) : 0, cc = vec_at(vc, b, J->f64);
    const int64_t vs = v ? v->strides[2] : 0;
#define AFF(SUF, T, CT)                                                                                          \
  run_affine_##SUF((T*)(void*)o->data + oo, o->strides[2], (const T*)(const void*)u->data + uo, u->strides[2],  \
                   v ? (const T*)(const void*)v->data + vo : NULL, vs, J->I, (CT)ca, (CT)cb, (CT)cc)
    switch (J->kind) {
      case 1: AFF(f64, double, double); break;
      case 2: AFF(bf16, uint16_t, float); break;
      case 3: AFF(f16, uint16_t, float); break;
      default: AFF(f32, float, float); break;
    }
#undef AFF
  }
}

static tpu_status_t ch_check(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out,
                             ch_job_t* J) {
  int affine = op->i0 == TPU_IR_CUSTOM_CHANNEL_AFFINE;
  if (affine ? (n != 3 && n != 5) : (n != 1 && n != 3))
    return TPU_ERR(INTERNAL, "host: channel %s with %d operands", affine ? "affine" : "stats", n);
  int nfull = affine ? (n == 5 ? 2 : 1) : (n == 3 ? 2 : 1);
  const tpu_host_view_t* x = &xs[0];
  /* dt: the vectors' and statistics' dtype (f32 or f64); hdt: the full operands' (dt, or bf16 / f16 with f32) */
  int dt = affine ? xs[n - 1].dtype : out->dtype, hdt = x->dtype;
  if (dt != TPU_DTYPE_F32 && dt != TPU_DTYPE_F64) return TPU_ERR(UNSUPPORTED, "host: channel norm of %s", tpu_dtype_name(dt));
  if (hdt != dt && !(dt == TPU_DTYPE_F32 && (hdt == TPU_DTYPE_BF16 || hdt == TPU_DTYPE_F16)))
    return TPU_ERR(UNSUPPORTED, "host: channel norm of %s with %s statistics", tpu_dtype_name(hdt), tpu_dtype_name(dt));
  if (affine && out->dtype != hdt) return TPU_ERR(INTERNAL, "host: channel affine result dtype does not match");
  if (x->rank != 3) return TPU_ERR(INTERNAL, "host: channel norm operand of rank %d", x->rank);
  *J = (ch_job_t){.affine = affine, .n = n, .f64 = dt == TPU_DTYPE_F64, .xs = xs, .out = out,
                  .kind = hdt == TPU_DTYPE_F64 ? 1 : hdt == TPU_DTYPE_BF16 ? 2 : hdt == TPU_DTYPE_F16 ? 3 : 0,
                  .A = x->sizes[0], .B = x->sizes[1], .I = x->sizes[2]};
  for (int k = 0; k < n; ++k) {
    const tpu_host_view_t* v = &xs[k];
    int ok = k < nfull ? v->dtype == hdt && v->rank == 3 && v->sizes[0] == J->A && v->sizes[1] == J->B && v->sizes[2] == J->I
                       : v->dtype == dt && v->rank == 1 && v->sizes[0] == J->B;
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
  if (J.affine) tpu_pool_parallel_for_dynamic(J.A * J.B, TPU_MAX((int64_t)1, 32768 / per), affine_worker, &J);
  else tpu_pool_parallel_for_dynamic(J.B, TPU_MAX((int64_t)1, 32768 / per), stats_worker, &J);
  return TPU_OK;
}

/* ---- reference: element by element through tpu_host_load_f64, straightforward sums */
tpu_status_t tpu_host_k_channel_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out) {
  ch_job_t J = {0}; /* set by ch_check on success; zeroed for the compiler's flow analysis */
  TPU_RETURN_IF_ERROR(ch_check(op, n, xs, out, &J));
  const int dt = out->dtype;
  const int64_t es = (int64_t)tpu_dtype_size(dt);
#define ES(v) ((int64_t)tpu_dtype_size((v)->dtype))
#define AT(v, a, b, i) tpu_host_load_f64((v)->data + ((a) * (v)->strides[0] + (b) * (v)->strides[1] + (i) * (v)->strides[2]) * ES(v), (v)->dtype)
#define VEC(v, b) tpu_host_load_f64((v)->data + (b) * (v)->strides[0] * ES(v), (v)->dtype)
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
#undef ES
  return TPU_OK;
}

/* ================================================================ group norm (GROUP_NORM_*, norm.h)
 * Legend: N batch, C channels, G groups of Cg = C / G channels, I spatial (HxW); x, g, y, dx [N, C, I] views with
 * any strides; mean, rstd [N, G]; w, b [C]. Statistics and per-(n, c) coefficients in dt (f32, or f64 with f64 x);
 * sums in double. Every value is computed by one task in a fixed order: the bits do not depend on threads. */

typedef struct {
  tpu_host_view_t g, x, out;         /* [N, C, I] (g: backward only), size-1 dims' strides normalized */
  const tpu_host_view_t *mean, *rstd, *w, *b, *sums; /* NULL when absent */
  int kind, f64;                     /* x's kind (0 f32, 1 f64, 2 bf16, 3 f16); f64: dt is f64 */
  int64_t N, C, G, Cg, I;
  double eps;
  double* s;                         /* scratch [2][N * C]: per (n, c) sum g, sum g (x - mean) */
  void *ca, *cb, *cc;                /* scratch [N * C] in dt: o = u ca + v cb + cc per (n, c) */
  const tpu_host_view_t *u, *v;      /* the apply pass's operands (v NULL: one) */
} gn_job_t;

static double gn_vec2(const tpu_host_view_t* v, int64_t i, int64_t j, int f64) { /* [N, G] or [2, N + 1, C] row */
  const int64_t o = i * v->strides[0] + j * v->strides[1];
  return f64 ? ((const double*)v->data)[o] : (double)((const float*)v->data)[o];
}
static void gn_put3(const tpu_host_view_t* o, int64_t k, int64_t i, int64_t j, int f64, double val) {
  const int64_t e = k * o->strides[0] + i * o->strides[1] + j * o->strides[2];
  if (f64) ((double*)o->data)[e] = val;
  else ((float*)o->data)[e] = (float)val;
}
/* f32 statistics: PyTorch CPU's rstd = 1 / sqrt(max(var, 0) + eps) with var a float and eps a double, so the sqrt
 * and the divide run in f64 and the result is rounded to f32 once */
static float gn_rstd_f32(double var, double eps) { return (float)(1.0 / sqrt((double)(float)var + eps)); }
/* size-1 dims may carry any stride: give them the one the fast paths test for */
static tpu_host_view_t gn_norm_view(const tpu_host_view_t* v) {
  tpu_host_view_t r = *v;
  if (r.sizes[2] == 1) r.strides[2] = 1;
  if (r.sizes[1] == 1) r.strides[1] = r.sizes[2] == 1 ? 1 : r.strides[2] * r.sizes[2];
  return r;
}

/* mean and biased variance of group (n, channels c0 .. c0 + Cg) in double */
static void gn_moments(const gn_job_t* J, int64_t n, int64_t c0, double* out_m, double* out_v) {
  const tpu_host_view_t* x = &J->x;
  const int64_t sc = x->strides[1], si = x->strides[2], Cg = J->Cg, I = J->I, base = n * x->strides[0] + c0 * sc;
  const double cnt = (double)(Cg * I);
  if (J->kind == 0 && (si == 1 || sc == 1)) {
    /* f32 with unit-stride runs: one pass, sums of x - k and (x - k)^2 about the group's first element k (as
     * CHANNEL_STATS: its one-run path when the group is one run); an inf / NaN falls to the two passes below */
    const float* xb = (const float*)x->data + base;
    const double k0 = (double)xb[0];
    double s1 = 0, s2 = 0;
    if (si == 1) {
      const tpu_host_rows_ops_t* ops = tpu_host_rows_ops();
      if (sc == I || Cg == 1) {
        ops->stat2_f32(NULL, xb, Cg * I, k0, &s1, &s2);
      } else {
        for (int64_t c = 0; c < Cg; ++c) {
          double t1, t2;
          ops->stat2_f32(NULL, xb + c * sc, I, k0, &t1, &t2);
          s1 += t1; s2 += t2;
        }
      }
    } else { /* channels innermost (channels_last): one double lane per channel, over the positions */
      enum { CB = 64 };
      for (int64_t cb = 0; cb < Cg; cb += CB) {
        const int64_t nc = TPU_MIN((int64_t)CB, Cg - cb);
        double a1[CB], a2[CB];
        for (int64_t c = 0; c < nc; ++c) a1[c] = a2[c] = 0;
        for (int64_t i = 0; i < I; ++i) {
          const float* p = xb + i * si + cb;
          for (int64_t c = 0; c < nc; ++c) { const double d = (double)p[c] - k0; a1[c] += d; a2[c] += d * d; }
        }
        for (int64_t c = 0; c < nc; ++c) { s1 += a1[c]; s2 += a2[c]; }
      }
    }
    if (shifted_moments(k0, s1, s2, cnt, out_m, out_v)) return;
  }
  double s = 0, q = 0;
  for (int64_t c = 0; c < Cg; ++c) s += k_sum(J->kind, x->data, base + c * sc, I, si);
  const double m = s / cnt;
  for (int64_t c = 0; c < Cg; ++c) q += k_sq(J->kind, x->data, base + c * sc, I, si, m);
  *out_m = m; *out_v = q / cnt;
}

/* GROUP_NORM_STATS over groups t = n G + j in [t0, t1) */
static void gn_stats_worker(void* ctx, int64_t t0, int64_t t1) {
  const gn_job_t* J = ctx;
  const tpu_host_view_t* x = &J->x;
  const int64_t len = J->Cg * J->I;
  /* f32 groups that are single runs at one stride (contiguous NCHW): the runs of up to 64 groups in one call
   * (stat2_runs: the same sums per run as gn_moments' stat2_f32 about the run's first element) */
  const int runs = J->kind == 0 && len > 0 && x->strides[2] == 1 && x->strides[1] == J->I &&
                   (J->N == 1 || x->strides[0] == J->G * len);
  enum { RB = 64 };
  double b1[RB], b2[RB];
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / J->G, j = t % J->G, k = (t - t0) % RB;
    double m = NAN, v = NAN;
    if (runs && k == 0) {
      tpu_host_rows_ops()->stat2_runs(NULL, (const float*)x->data + n * x->strides[0] + j * len, len, len,
                                      TPU_MIN((int64_t)RB, t1 - t), NULL, b1, b2);
    }
    if (runs) {
      const double k0 = (double)((const float*)x->data)[n * x->strides[0] + j * J->Cg * x->strides[1]], cnt = (double)len;
      if (!shifted_moments(k0, b1[k], b2[k], cnt, &m, &v)) /* as gn_moments' one-run path */
        gn_moments(J, n, j * J->Cg, &m, &v);                /* an inf / NaN: its two passes */
    } else if (len > 0) {
      gn_moments(J, n, j * J->Cg, &m, &v);
    }
    if (J->f64) {
      gn_put3(&J->out, 0, n, j, 1, m);
      gn_put3(&J->out, 1, n, j, 1, 1.0 / sqrt(v + J->eps));
    } else { /* PyTorch CPU's order: the variance rounded to f32, then 1 / sqrt(var + eps) in f64, rounded once */
      gn_put3(&J->out, 0, n, j, 0, m);
      gn_put3(&J->out, 1, n, j, 0, gn_rstd_f32(v, J->eps));
    }
  }
}

/* per (n, c) sums into J->s: units are channels (n C + c), or blocks of 64 channels of one sample when f32 channels
 * are innermost (units n nb + k) */
enum { GN_CB = 64 };
static int gn_sums_cl(const gn_job_t* J) {
  return J->kind == 0 && J->x.strides[1] == 1 && J->g.strides[1] == 1 && J->I > 1 && J->C > 1;
}
static void gn_sums_worker(void* ctx, int64_t t0, int64_t t1) {
  const gn_job_t* J = ctx;
  const tpu_host_view_t *g = &J->g, *x = &J->x;
  const int64_t NC = J->N * J->C, I = J->I;
  if (gn_sums_cl(J)) {
    const int64_t nb = (J->C + GN_CB - 1) / GN_CB;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / nb, c0 = (t % nb) * GN_CB, nc = TPU_MIN((int64_t)GN_CB, J->C - c0);
      double a1[GN_CB], a2[GN_CB], m[GN_CB];
      for (int64_t c = 0; c < nc; ++c) { a1[c] = a2[c] = 0; m[c] = gn_vec2(J->mean, n, (c0 + c) / J->Cg, J->f64); }
      const float* gb = (const float*)g->data + n * g->strides[0] + c0;
      const float* xb = (const float*)x->data + n * x->strides[0] + c0;
      for (int64_t i = 0; i < I; ++i) {
        const float *gp = gb + i * g->strides[2], *xp = xb + i * x->strides[2];
        for (int64_t c = 0; c < nc; ++c) { const double gv = (double)gp[c]; a1[c] += gv; a2[c] += gv * ((double)xp[c] - m[c]); }
      }
      for (int64_t c = 0; c < nc; ++c) { J->s[n * J->C + c0 + c] = a1[c]; J->s[NC + n * J->C + c0 + c] = a2[c]; }
    }
    return;
  }
  const int fast = J->kind == 0 && g->strides[2] == 1 && x->strides[2] == 1 && I > 0;
  const tpu_host_rows_ops_t* ops = fast ? tpu_host_rows_ops() : NULL;
  if (fast && g->strides[1] == x->strides[1]) {
    /* the runs of up to 64 channels of one sample in one call (stat2_runs: the same sums per run as stat2_f32,
     * without a call per short run: HxW = 16 runs took ~17 ns each one by one) */
    double m[GN_CB], s1[GN_CB], s2[GN_CB];
    for (int64_t t = t0; t < t1;) {
      const int64_t n = t / J->C, c0 = t % J->C, cnt = TPU_MIN(TPU_MIN(t1 - t, J->C - c0), (int64_t)GN_CB);
      for (int64_t k = 0; k < cnt; ++k) m[k] = gn_vec2(J->mean, n, (c0 + k) / J->Cg, J->f64);
      ops->stat2_runs((const float*)g->data + n * g->strides[0] + c0 * g->strides[1],
                      (const float*)x->data + n * x->strides[0] + c0 * x->strides[1], x->strides[1], I, cnt, m, s1, s2);
      for (int64_t k = 0; k < cnt; ++k) { J->s[t + k] = s1[k]; J->s[NC + t + k] = s2[k]; }
      t += cnt;
    }
    return;
  }
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / J->C, c = t % J->C;
    const int64_t go = n * g->strides[0] + c * g->strides[1], xo = n * x->strides[0] + c * x->strides[1];
    const double m = gn_vec2(J->mean, n, c / J->Cg, J->f64);
    double s1 = 0, s2 = 0;
    if (fast) ops->stat2_f32((const float*)g->data + go, (const float*)x->data + xo, I, m, &s1, &s2);
    else {
      s1 = k_sum(J->kind, g->data, go, I, g->strides[2]);
      s2 = k_dot(J->kind, g->data, go, g->strides[2], x->data, xo, x->strides[2], I, m);
    }
    J->s[t] = s1; J->s[NC + t] = s2;
  }
}

/* the apply pass o = u ca + v cb + cc with coefficients per row r = n C + c: rows [r0, r1) */
static void gn_apply_rows(void* ctx, int64_t r0, int64_t r1) {
  const gn_job_t* J = ctx;
  const tpu_host_view_t *u = J->u, *v = J->v, *o = &J->out;
  const int64_t C = J->C, I = J->I;
  const int rows_f32 = J->kind == 0 && u->strides[2] == 1 && o->strides[2] == 1 && (!v || v->strides[2] == 1);
  for (int64_t r = r0; r < r1;) {
    const int64_t n = r / C, c = r % C;
    /* rows of one sample, or to r1 when the samples follow each other at the row stride (contiguous NCHW) */
    const int uni = u->strides[0] == C * u->strides[1] && o->strides[0] == C * o->strides[1] &&
                    (!v || v->strides[0] == C * v->strides[1]);
    const int64_t cnt = uni ? r1 - r : TPU_MIN(r1 - r, C - c);
    const int64_t uo = n * u->strides[0] + c * u->strides[1], oo = n * o->strides[0] + c * o->strides[1];
    const int64_t vo = v ? n * v->strides[0] + c * v->strides[1] : 0;
    if (rows_f32) {
      tpu_host_rows_ops()->affine_rows((const float*)u->data + uo, u->strides[1], v ? (const float*)v->data + vo : NULL,
                                       v ? v->strides[1] : 0, (float*)o->data + oo, o->strides[1], I, cnt,
                                       (const float*)J->ca + r, v ? (const float*)J->cb + r : NULL, (const float*)J->cc + r);
      r += cnt;
      continue;
    }
    for (int64_t k = 0; k < cnt; ++k) {
      const int64_t rr = r + k, uk = uo + k * u->strides[1], ok = oo + k * o->strides[1], vk = vo + (v ? k * v->strides[1] : 0);
      const int64_t vs = v ? v->strides[2] : 0;
#define GN_AFF(SUF, T, CT, CA)                                                                                        \
  run_affine_##SUF((T*)(void*)o->data + ok, o->strides[2], (const T*)(const void*)u->data + uk, u->strides[2],      \
                   v ? (const T*)(const void*)v->data + vk : NULL, vs, I, ((const CA*)J->ca)[rr],                   \
                   v ? ((const CA*)J->cb)[rr] : (CT)0, ((const CA*)J->cc)[rr])
      switch (J->kind) {
        case 1: GN_AFF(f64, double, double, double); break;
        case 2: GN_AFF(bf16, uint16_t, float, float); break;
        case 3: GN_AFF(f16, uint16_t, float, float); break;
        default: GN_AFF(f32, float, float, float); break;
      }
#undef GN_AFF
    }
    r += cnt;
  }
}
/* f32 with channels innermost (channels_last): one unit per (n, i), a run over the C channels (the same f32
 * operations in the same order as affine_rows: the same bits) */
static void gn_apply_cl(void* ctx, int64_t t0, int64_t t1) {
  const gn_job_t* J = ctx;
  const tpu_host_view_t *u = J->u, *v = J->v, *o = &J->out;
  const int64_t C = J->C, I = J->I;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / I, i = t % I;
    const float* up = (const float*)u->data + n * u->strides[0] + i * u->strides[2];
    float* op = (float*)o->data + n * o->strides[0] + i * o->strides[2];
    const float *a = (const float*)J->ca + n * C, *cc = (const float*)J->cc + n * C;
    if (v) {
      const float* vp = (const float*)v->data + n * v->strides[0] + i * v->strides[2];
      const float* b = (const float*)J->cb + n * C;
      for (int64_t c = 0; c < C; ++c) op[c] = up[c] * a[c] + vp[c] * b[c] + cc[c];
    } else {
      for (int64_t c = 0; c < C; ++c) op[c] = up[c] * a[c] + cc[c];
    }
  }
}
static void gn_apply(gn_job_t* J) {
  const tpu_host_view_t *u = J->u, *v = J->v, *o = &J->out;
  if (J->N * J->C * J->I == 0) return;
  if (J->kind == 0 && J->I > 1 && J->C > 1 && u->strides[1] == 1 && o->strides[1] == 1 && (!v || v->strides[1] == 1) &&
      !(u->strides[2] == 1 && o->strides[2] == 1))
    tpu_pool_parallel_for_dynamic(J->N * J->I, TPU_MAX((int64_t)1, 32768 / J->C), gn_apply_cl, J);
  else
    tpu_pool_parallel_for_dynamic(J->N * J->C, TPU_MAX((int64_t)1, 32768 / TPU_MAX((int64_t)1, J->I)), gn_apply_rows, J);
}

/* the backward's per (n, c) coefficients from the sums (s1 = sum g, s2 = sum g (x - mean), rounded to dt):
 * m1 = sum_c w s1 / n, m2 = rstd sum_c w s2 / n per group (n = Cg I), then
 * d x = rstd (g w - m1 - (x - mean) rstd m2) = g (rstd w) + x (-rstd^2 m2) + rstd (mean rstd m2 - m1) */
#define GN_BWD_COEF(T, SUF)                                                                                         \
  static void gn_bwd_coef_##SUF(const gn_job_t* J, const double* S1, const double* S2) {                           \
    T *A = J->ca, *B = J->cb, *Cc = J->cc;                                                                          \
    const T* w = J->w ? (const T*)(const void*)J->w->data : NULL;                                                   \
    const int64_t ws = J->w ? J->w->strides[0] : 0, Cg = J->Cg;                                                     \
    const T *mp = (const T*)(const void*)J->mean->data, *rp = (const T*)(const void*)J->rstd->data;                 \
    const double inv = 1.0 / (double)(Cg * J->I);                                                                   \
    for (int64_t n = 0; n < J->N; ++n)                                                                              \
      for (int64_t j = 0; j < J->G; ++j) {                                                                          \
        const int64_t o = n * J->C + j * Cg;                                                                        \
        double t1 = 0, t2 = 0;                                                                                      \
        for (int64_t c = 0; c < Cg; ++c) {                                                                          \
          const double wc = w ? (double)w[(j * Cg + c) * ws] : 1.0;                                                 \
          t1 += wc * S1[o + c]; t2 += wc * S2[o + c];                                                               \
        }                                                                                                           \
        const T r = rp[n * J->rstd->strides[0] + j * J->rstd->strides[1]];                                          \
        const T mu = mp[n * J->mean->strides[0] + j * J->mean->strides[1]];                                         \
        const T m1 = (T)(t1 * inv), m2b = r * (T)(t2 * inv);                                                        \
        const T b = -((r * r) * m2b), cc = r * ((mu * r) * m2b - m1);                                               \
        for (int64_t c = 0; c < Cg; ++c) {                                                                          \
          A[o + c] = w ? r * w[(j * Cg + c) * ws] : r;                                                              \
          B[o + c] = b; Cc[o + c] = cc;                                                                             \
        }                                                                                                           \
      }                                                                                                             \
  }
/* the forward's: y = x (rstd w) + (b - mean rstd w) */
#define GN_FWD_COEF(T, SUF)                                                                                         \
  static void gn_fwd_coef_##SUF(const gn_job_t* J) {                                                                \
    T *A = J->ca, *Cc = J->cc;                                                                                      \
    const T* w = J->w ? (const T*)(const void*)J->w->data : NULL;                                                   \
    const T* bp = J->b ? (const T*)(const void*)J->b->data : NULL;                                                  \
    const int64_t ws = J->w ? J->w->strides[0] : 0, bs = J->b ? J->b->strides[0] : 0, Cg = J->Cg;                  \
    const T *mp = (const T*)(const void*)J->mean->data, *rp = (const T*)(const void*)J->rstd->data;                 \
    for (int64_t n = 0; n < J->N; ++n)                                                                              \
      for (int64_t j = 0; j < J->G; ++j) {                                                                          \
        const int64_t o = n * J->C + j * Cg;                                                                        \
        const T r = rp[n * J->rstd->strides[0] + j * J->rstd->strides[1]];                                          \
        const T mu = mp[n * J->mean->strides[0] + j * J->mean->strides[1]];                                         \
        for (int64_t c = 0; c < Cg; ++c) {                                                                          \
          const T a = w ? r * w[(j * Cg + c) * ws] : r;                                                             \
          const T sh = -(mu * a);                                                                                   \
          A[o + c] = a;                                                                                             \
          Cc[o + c] = bp ? sh + bp[(j * Cg + c) * bs] : sh;                                                         \
        }                                                                                                           \
      }                                                                                                             \
  }

GN_BWD_COEF(double, f64)
GN_BWD_COEF(float, f32)
GN_FWD_COEF(double, f64)
GN_FWD_COEF(float, f32)
#undef GN_BWD_COEF
#undef GN_FWD_COEF

/* checks the operands against the target's rule (tpu_ir_custom_operands_ok, ir.h: the one a loaded graph is checked
 * against) and fills J */
static tpu_status_t gn_check(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out,
                             gn_job_t* J) {
  const int tgt = (int)op->i0, bwd = tgt == TPU_IR_CUSTOM_GROUP_NORM_SUMS || tgt == TPU_IR_CUSTOM_GROUP_NORM_BWD;
  enum { MAXN = 6 }; /* GROUP_NORM_BWD with w and sums */
  tpu_ir_type_t ts[MAXN + 1];
  const tpu_ir_type_t* in[MAXN];
  const int fits = n >= 1 && n <= MAXN;
  for (int k = 0; fits && k <= n; ++k) { /* the operands' types, then the result's */
    const tpu_host_view_t* v = k < n ? &xs[k] : out;
    ts[k] = (tpu_ir_type_t){.dtype = v->dtype, .rank = v->rank};
    for (int d = 0; d < v->rank && d < TPU_MAX_DIMS; ++d) ts[k].dims[d] = v->sizes[d];
    if (k < n) in[k] = &ts[k];
  }
  if (!fits || !tpu_ir_custom_operands_ok(op->i0, op->i1, n, in, &ts[n]))
    return TPU_ERR(INTERNAL, "host: group norm target %d with %d operands: operand shapes or dtypes do not match", tgt, n);
  const tpu_host_view_t* x = &xs[bwd];
  const int kind = x->dtype == TPU_DTYPE_F64 ? 1 : x->dtype == TPU_DTYPE_BF16 ? 2 : x->dtype == TPU_DTYPE_F16 ? 3 : 0;
  const int64_t C = x->sizes[1], G = tgt == TPU_IR_CUSTOM_GROUP_NORM_STATS ? out->sizes[2] : xs[bwd + 1].sizes[1];
  *J = (gn_job_t){.x = gn_norm_view(x), .out = *out, .kind = kind, .f64 = kind == 1,
                  .N = x->sizes[0], .C = C, .G = G, .Cg = C / G, .I = x->sizes[2]};
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM_STATS) {
    J->eps = tpu_host_load_f64(xs[1].data, xs[1].dtype);
    return TPU_OK;
  }
  if (bwd) J->g = gn_norm_view(&xs[0]);
  J->mean = &xs[bwd + 1]; J->rstd = &xs[bwd + 2];
  const int hw = (tgt == TPU_IR_CUSTOM_GROUP_NORM || tgt == TPU_IR_CUSTOM_GROUP_NORM_BWD) && (op->i1 & 1);
  int k = bwd + 3;
  if (hw) J->w = &xs[k++];
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM && (op->i1 & 2)) J->b = &xs[k++];
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM_BWD && (op->i1 & 2)) J->sums = &xs[k++];
  if (tgt != TPU_IR_CUSTOM_GROUP_NORM_SUMS) J->out = gn_norm_view(out);
  return TPU_OK;
}

tpu_status_t tpu_host_k_group_norm(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  gn_job_t J = {0};
  TPU_RETURN_IF_ERROR(gn_check(op, n, xs, out, &J));
  const int tgt = (int)op->i0;
  const int64_t NC = J.N * J.C, per = TPU_MAX((int64_t)1, J.I);
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM_STATS) {
    tpu_pool_parallel_for_dynamic(J.N * J.G, TPU_MAX((int64_t)1, 32768 / TPU_MAX((int64_t)1, J.Cg * J.I)), gn_stats_worker, &J);
    return TPU_OK;
  }
  const size_t es = J.f64 ? sizeof(double) : sizeof(float);
  const int need_s = tgt != TPU_IR_CUSTOM_GROUP_NORM; /* the sums, made here or (GROUP_NORM_BWD's operand) read in */
  char* scratch = malloc((size_t)NC * ((need_s ? 2 * sizeof(double) : 0) + 3 * es) + 1);
  if (!scratch) return TPU_ERR(OUT_OF_MEMORY, "host: group norm scratch of %lld channels", (long long)NC);
  const size_t so = need_s ? (size_t)NC * 2 * sizeof(double) : 0; /* the doubles first: aligned */
  J.s = need_s ? (double*)(void*)scratch : NULL;
  J.ca = scratch + so; J.cb = scratch + so + NC * es; J.cc = scratch + so + 2 * NC * es;
  if (need_s && !J.sums) {
    if (gn_sums_cl(&J))
      tpu_pool_parallel_for_dynamic(J.N * ((J.C + GN_CB - 1) / GN_CB), TPU_MAX((int64_t)1, 32768 / (per * GN_CB)), gn_sums_worker, &J);
    else
      tpu_pool_parallel_for_dynamic(NC, TPU_MAX((int64_t)1, 32768 / per), gn_sums_worker, &J);
  }
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM_SUMS) { /* per (n, c) rounded to dt, then the sums over n in double */
    double* tot = J.s; /* reused: [0, C) d bias, [C, 2C) d weight, overwritten after their row is read */
    for (int64_t b = 0; b < J.N; ++b)
      for (int64_t j = 0; j < J.G; ++j) {
        const double r = gn_vec2(J.rstd, b, j, J.f64);
        for (int64_t c = j * J.Cg; c < (j + 1) * J.Cg; ++c) {
          const double s1 = J.s[b * J.C + c], s2 = J.s[NC + b * J.C + c];
          gn_put3(out, 0, b, c, J.f64, s1);
          gn_put3(out, 1, b, c, J.f64, s2);
          if (b == 0) { tot[c] = 0.0 + s1; tot[NC + c] = 0.0 + s2 * r; } /* sums from 0 (the sign of a zero) */
          else { tot[c] += s1; tot[NC + c] += s2 * r; }
        }
      }
    for (int64_t c = 0; c < J.C; ++c) {
      gn_put3(out, 0, J.N, c, J.f64, tot[c]);
      gn_put3(out, 1, J.N, c, J.f64, tot[NC + c]);
    }
    free(scratch);
    return TPU_OK;
  }
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM) {
    J.u = &J.x; J.v = NULL;
    if (J.f64) gn_fwd_coef_f64(&J); else gn_fwd_coef_f32(&J);
  } else {
    /* the sums as GROUP_NORM_SUMS gives them (rounded to dt), from its result or computed here */
    double* S = J.s;
    if (J.sums) {
      const tpu_host_view_t* sv = J.sums;
      for (int64_t b = 0; b < J.N; ++b)
        for (int64_t c = 0; c < J.C; ++c) {
          const int64_t e = b * sv->strides[1] + c * sv->strides[2];
          S[b * J.C + c] = J.f64 ? ((const double*)sv->data)[e] : (double)((const float*)sv->data)[e];
          S[NC + b * J.C + c] = J.f64 ? ((const double*)sv->data)[sv->strides[0] + e] : (double)((const float*)sv->data)[sv->strides[0] + e];
        }
    } else if (!J.f64) {
      for (int64_t t = 0; t < 2 * NC; ++t) S[t] = (double)(float)S[t];
    }
    const double *S1 = S, *S2 = S + NC;
    if (J.f64) gn_bwd_coef_f64(&J, S1, S2); else gn_bwd_coef_f32(&J, S1, S2);
    J.u = &J.g; J.v = &J.x;
  }
  gn_apply(&J);
  free(scratch);
  return TPU_OK;
}

/* ---- reference: element by element through tpu_host_load_f64, the formulas in double */
tpu_status_t tpu_host_k_group_norm_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                       const tpu_host_view_t* out) {
  gn_job_t J = {0};
  TPU_RETURN_IF_ERROR(gn_check(op, n, xs, out, &J));
  const int tgt = (int)op->i0;
#define EL(v, a, b, i) tpu_host_load_f64((v)->data + ((a) * (v)->strides[0] + (b) * (v)->strides[1] + (i) * (v)->strides[2]) * (int64_t)tpu_dtype_size((v)->dtype), (v)->dtype)
#define V1(v, c) tpu_host_load_f64((v)->data + (c) * (v)->strides[0] * (int64_t)tpu_dtype_size((v)->dtype), (v)->dtype)
#define V2(v, a, b) tpu_host_load_f64((v)->data + ((a) * (v)->strides[0] + (b) * (v)->strides[1]) * (int64_t)tpu_dtype_size((v)->dtype), (v)->dtype)
#define PUT(o, a, b, i, val) tpu_host_store_f64((o)->data + ((a) * (o)->strides[0] + (b) * (o)->strides[1] + (i) * (o)->strides[2]) * (int64_t)tpu_dtype_size((o)->dtype), (o)->dtype, (val))
  const tpu_host_view_t *x = &J.x, *g = &J.g;
  const double cnt = (double)(J.Cg * J.I);
  for (int64_t b = 0; b < J.N; ++b)
    for (int64_t j = 0; j < J.G; ++j) {
      const int64_t c0 = j * J.Cg, c1 = c0 + J.Cg;
      if (tgt == TPU_IR_CUSTOM_GROUP_NORM_STATS) {
        double s = 0, q = 0;
        for (int64_t c = c0; c < c1; ++c) for (int64_t i = 0; i < J.I; ++i) s += EL(x, b, c, i);
        const double m = s / cnt;
        for (int64_t c = c0; c < c1; ++c) for (int64_t i = 0; i < J.I; ++i) { const double d = EL(x, b, c, i) - m; q += d * d; }
        const double v = q / cnt;
        PUT(out, 0, b, j, m);
        PUT(out, 1, b, j, J.f64 ? 1.0 / sqrt(v + J.eps) : (double)gn_rstd_f32(v, J.eps));
        continue;
      }
      const double m = V2(J.mean, b, j), r = V2(J.rstd, b, j);
      if (tgt == TPU_IR_CUSTOM_GROUP_NORM) {
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t i = 0; i < J.I; ++i)
            PUT(&J.out, b, c, i, (EL(x, b, c, i) - m) * r * (J.w ? V1(J.w, c) : 1.0) + (J.b ? V1(J.b, c) : 0.0));
        continue;
      }
      double t1 = 0, t2 = 0;
      for (int64_t c = c0; c < c1; ++c) {
        double s1 = 0, s2 = 0;
        for (int64_t i = 0; i < J.I; ++i) { s1 += EL(g, b, c, i); s2 += EL(g, b, c, i) * (EL(x, b, c, i) - m); }
        if (J.sums) { s1 = EL(J.sums, 0, b, c); s2 = EL(J.sums, 1, b, c); }
        if (tgt == TPU_IR_CUSTOM_GROUP_NORM_SUMS) {
          PUT(out, 0, b, c, s1);
          PUT(out, 1, b, c, s2);
          /* totals: accumulated below over b */
        }
        const double wc = J.w ? V1(J.w, c) : 1.0;
        t1 += wc * s1; t2 += wc * s2;
      }
      if (tgt == TPU_IR_CUSTOM_GROUP_NORM_SUMS) continue;
      const double m1 = t1 / cnt, m2 = t2 / cnt;
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t i = 0; i < J.I; ++i) {
          const double wc = J.w ? V1(J.w, c) : 1.0;
          PUT(&J.out, b, c, i, r * (EL(g, b, c, i) * wc - m1 - (EL(x, b, c, i) - m) * r * r * m2));
        }
    }
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM_SUMS)
    for (int64_t c = 0; c < J.C; ++c) {
      double db = 0, dw = 0;
      for (int64_t b = 0; b < J.N; ++b) {
        double s1 = 0, s2 = 0;
        const double m = V2(J.mean, b, c / J.Cg);
        for (int64_t i = 0; i < J.I; ++i) { s1 += EL(g, b, c, i); s2 += EL(g, b, c, i) * (EL(x, b, c, i) - m); }
        db += s1; dw += s2 * V2(J.rstd, b, c / J.Cg);
      }
      PUT(out, 0, J.N, c, db);
      PUT(out, 1, J.N, c, dw);
    }
#undef EL
#undef V1
#undef V2
#undef PUT
  return TPU_OK;
}
