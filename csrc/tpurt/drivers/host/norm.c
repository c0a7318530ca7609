/* norm.c — custom targets CHANNEL_STATS and CHANNEL_AFFINE (see norm.h): the reductions and the
 * final per-channel maps of batch norm and group norm, one pass each over the tensor instead of
 * the generic reduce/elementwise executor's per-row work (costly when rows are short: 2x2 maps). */
#include <math.h>

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
  /* one run per channel (A = 1: group norm's [1, N*G or N*C, I], layer norm's [1, M, n]): the runs of a block of
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
    if (fast && !g) { /* sums of x - k and (x - k)^2, k = the channel's first element: mean and variance in
                       * double without the second pass (cancellation only as (mean - k)^2 / variance) */
      const float* xb = (const float*)x->data + b * x->strides[1];
      const double k0 = (double)xb[0];
      if (batch) { r0 += bt1[k]; r1 += bt2[k]; } /* 0 + sum as the per-run path (sign of a zero sum) */
      else
        for (int64_t a = 0; a < J->A; ++a) {
          double t1, t2;
          ops->stat2_f32(NULL, xb + a * x->strides[0], J->I, k0, &t1, &t2);
          r0 += t1; r1 += t2;
        }
      const double d = r0 / cnt;
      r0 = k0 + d; r1 = r1 / cnt - d * d;
      r1 = r1 > 0 ? r1 : 0;
      if (isfinite(r0) && isfinite(r1)) goto store;
      r0 = r1 = 0; /* an inf or NaN: the two-pass sums below give the IEEE results (inf mean, NaN variance) */
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
    /* one row per channel with contiguous vectors (group norm's [1, N*C, HxW]): all rows in one call */
    tpu_host_rows_ops()->affine_rows((const float*)u->data + r0 * u->strides[1], u->strides[1],
                                     v ? (const float*)v->data + r0 * v->strides[1] : NULL, v ? v->strides[1] : 0,
                                     (float*)o->data + r0 * o->strides[1], o->strides[1], J->I, r1 - r0,
                                     (const float*)va->data + r0, vb ? (const float*)vb->data + r0 : NULL,
                                     (const float*)vc->data + r0);
    return;
  }
  if (J->kind == 0 && u->strides[2] == 1 && o->strides[2] == 1 && (!v || v->strides[2] == 1)) {
    /* f32 rows with contiguous runs (group norm's [1, N*C, HxW]): no per-row index division, dispatch or
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
