/* ctc.c — CTC / CTC_BWD (see ctc.h). l' = the target with blanks around and between its
 * labels (length 2 L + 1): l'(s) = blank for even s, target[(s - 1) / 2] for odd s. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "drivers/host/ctc.h"

typedef struct {
  const tpu_host_view_t *lp, *tg, *il, *tl, *gout, *nll, *la, *out;
  int bwd, concat, zero_inf;
  int64_t T, N, C, S, Lp, blank;
  int64_t* toff; /* start of each sample's target */
  pthread_mutex_t mu;
  int err; /* 1 out of memory, 2 label out of range */
  int64_t err_b, err_label;
} ctc_job_t;

static inline double ld(const tpu_host_view_t* v, int64_t off) {
  return tpu_host_load_f64(v->data + off * (int64_t)tpu_dtype_size(v->dtype), v->dtype);
}
static inline void st(const tpu_host_view_t* v, int64_t off, double x) {
  tpu_host_store_f64(v->data + off * (int64_t)tpu_dtype_size(v->dtype), v->dtype, x);
}
static inline int64_t ldi(const tpu_host_view_t* v, int64_t i) {
  return tpu_host_load_i64(v->data + i * v->strides[0] * (int64_t)tpu_dtype_size(v->dtype), v->dtype);
}
static inline double lse3(double a, double b, double c) { /* log(e^a + e^b + e^c), -inf safe */
  double m = fmax(a, fmax(b, c));
  if (m == -INFINITY) m = 0;
  return log(exp(a - m) + exp(b - m) + exp(c - m)) + m;
}
static void set_err(ctc_job_t* J, int code, int64_t b, int64_t label) {
  pthread_mutex_lock(&J->mu);
  if (!J->err || b < J->err_b) { J->err = code; J->err_b = b; J->err_label = label; }
  pthread_mutex_unlock(&J->mu);
}

static void ctc_worker(void* ctx, int64_t b0, int64_t b1) {
  ctc_job_t* J = ctx;
  int64_t T = J->T, C = J->C, Lp = J->Lp;
  const tpu_host_view_t *lpv = J->lp, *o = J->out;
  double* la = malloc((size_t)(2 * T * Lp + T * C + 2 * Lp + 1) * sizeof(double));
  int64_t* lab = malloc((size_t)(Lp + 1) * sizeof(int64_t));
  if (!la || !lab) { free(la); free(lab); set_err(J, 1, 0, 0); return; }
  double *lb = la + T * Lp, *ga = lb + T * Lp;
  for (int64_t b = b0; b < b1; ++b) {
    int64_t Tb = ldi(J->il, b), L = ldi(J->tl, b), Lb = 2 * L + 1, bad = 0, bad_label = 0;
    for (int64_t s = 0; s < Lb; ++s) { /* l' */
      if (s % 2 == 0) { lab[s] = J->blank; continue; }
      int64_t i = (s - 1) / 2;
      const tpu_host_view_t* tg = J->tg;
      int64_t off = J->concat ? (J->toff[b] + i) * tg->strides[0] : b * tg->strides[0] + i * tg->strides[1];
      lab[s] = tpu_host_load_i64(tg->data + off * (int64_t)tpu_dtype_size(tg->dtype), tg->dtype);
      if (lab[s] < 0 || lab[s] >= C) { bad = 1; bad_label = lab[s]; }
    }
    if (bad) { set_err(J, 2, b, bad_label); continue; }
#define LP(t, c) ld(lpv, (t) * lpv->strides[0] + b * lpv->strides[1] + (c) * lpv->strides[2])
    if (!J->bwd) {
      for (int64_t i = 0; i < T * Lp; ++i) la[i] = -INFINITY;
      double nll = L == 0 ? -0.0 : INFINITY; /* empty input: PyTorch's likelihood 0 or -inf */
      if (Tb > 0) {
        la[0] = LP(0, J->blank);
        if (L > 0) la[1] = LP(0, lab[1]);
        for (int64_t t = 1; t < Tb; ++t)
          for (int64_t s = 0; s < Lb; ++s) {
            const double* p = la + (t - 1) * Lp;
            double a2 = s > 0 ? p[s - 1] : -INFINITY, a3 = s > 1 && lab[s - 2] != lab[s] ? p[s - 2] : -INFINITY;
            la[t * Lp + s] = lse3(p[s], a2, a3) + LP(t, lab[s]);
          }
        const double* e = la + (Tb - 1) * Lp;
        nll = -(L == 0 ? e[0] : lse3(e[Lb - 1], e[Lb - 2], -INFINITY));
      }
      int64_t oo = b * o->strides[0], os = o->strides[1];
      st(o, oo, nll);
      for (int64_t i = 0; i < T * Lp; ++i) st(o, oo + (1 + i) * os, la[i]);
      continue;
    }
    /* backward: d log_probs[t, b, c] = (exp(lp) - exp(log sum_{s: l'(s) = c} alpha beta + nll - lp)) * grad */
    double nll = ld(J->nll, b * J->nll->strides[0]), gr = ld(J->gout, b * J->gout->strides[0]);
    int64_t ot = o->strides[0], ob = b * o->strides[1], oc = o->strides[2];
    if ((J->zero_inf && nll == INFINITY) || Tb == 0) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) st(o, t * ot + ob + c * oc, 0);
      continue;
    }
    const tpu_host_view_t* lav = J->la;
#define LA(t, s) ld(lav, b * lav->strides[0] + (t) * lav->strides[1] + (s) * lav->strides[2])
    for (int64_t i = 0; i < T * C; ++i) ga[i] = -INFINITY;
    for (int64_t i = 0; i < T * Lp; ++i) lb[i] = -INFINITY;
    double* e = lb + (Tb - 1) * Lp;
    e[Lb - 1] = LP(Tb - 1, J->blank);
    ga[(Tb - 1) * C + J->blank] = LA(Tb - 1, Lb - 1) + e[Lb - 1];
    if (L > 0) {
      e[Lb - 2] = LP(Tb - 1, lab[Lb - 2]);
      ga[(Tb - 1) * C + lab[Lb - 2]] = LA(Tb - 1, Lb - 2) + e[Lb - 2];
    }
    for (int64_t t = Tb - 2; t >= 0; --t)
      for (int64_t s = Lb - 1; s >= 0; --s) {
        const double* n1 = lb + (t + 1) * Lp;
        double b2 = s < Lb - 1 ? n1[s + 1] : -INFINITY, b3 = s < Lb - 2 && lab[s + 2] != lab[s] ? n1[s + 2] : -INFINITY;
        double v = lse3(n1[s], b2, b3) + LP(t, lab[s]);
        lb[t * Lp + s] = v;
        double ab = LA(t, s) + v, *g = &ga[t * C + lab[s]];
        if (*g == -INFINITY) *g = ab;
        else { double m = fmax(*g, ab); *g = log(exp(*g - m) + exp(ab - m)) + m; }
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double r = 0;
        if (t < Tb) {
          double lp = LP(t, c);
          r = (exp(lp) - exp(ga[t * C + c] + nll - lp)) * gr;
        }
        st(o, t * ot + ob + c * oc, r);
      }
#undef LA
#undef LP
  }
  free(la); free(lab);
}

tpu_status_t tpu_host_k_ctc(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs, const tpu_host_view_t* out) {
  ctc_job_t J = {.mu = PTHREAD_MUTEX_INITIALIZER};
  J.bwd = op->i0 == TPU_IR_CUSTOM_CTC_BWD;
  if (n != (J.bwd ? 7 : 4)) return TPU_ERR(INTERNAL, "ctc: operands");
  const tpu_host_view_t* x = J.bwd ? xs + 1 : xs; /* log_probs, targets, in_len, tgt_len */
  J.lp = &x[0]; J.tg = &x[1]; J.il = &x[2]; J.tl = &x[3];
  if (J.bwd) { J.gout = &xs[0]; J.nll = &xs[5]; J.la = &xs[6]; }
  J.out = out; J.blank = op->i1; J.concat = (int)op->a[0][0]; J.zero_inf = (int)op->a[0][1];
  if (J.lp->rank != 3 || J.il->rank != 1 || J.tl->rank != 1 || J.tg->rank != (J.concat ? 1 : 2))
    return TPU_ERR(INTERNAL, "ctc: operand ranks");
  if ((J.lp->dtype != TPU_DTYPE_F32 && J.lp->dtype != TPU_DTYPE_F64) || tpu_host_cls(J.tg->dtype) != TPU_HOST_CLS_I64)
    return TPU_ERR(INTERNAL, "ctc: dtypes");
  J.T = J.lp->sizes[0]; J.N = J.lp->sizes[1]; J.C = J.lp->sizes[2];
  if (J.il->sizes[0] != J.N || J.tl->sizes[0] != J.N || J.blank < 0 || J.blank >= J.C)
    return TPU_ERR(INTERNAL, "ctc: lengths");
  if (J.bwd) {
    if (J.la->rank != 3 || J.la->sizes[0] != J.N || J.la->sizes[1] != J.T || out->rank != 3 ||
        out->sizes[0] != J.T || out->sizes[1] != J.N || out->sizes[2] != J.C)
      return TPU_ERR(INTERNAL, "ctc: backward shapes");
    J.Lp = J.la->sizes[2];
  } else {
    if (out->rank != 2 || out->sizes[0] != J.N || J.T == 0 || (out->sizes[1] - 1) % J.T != 0)
      return TPU_ERR(INTERNAL, "ctc: result shape");
    J.Lp = (out->sizes[1] - 1) / J.T;
  }
  /* lengths were checked by the lowering (they are compile-time lists); re-check what indexing relies on */
  J.toff = malloc((size_t)(J.N + 1) * sizeof(int64_t));
  if (!J.toff) return TPU_ERR(OUT_OF_MEMORY, "ctc: out of host memory");
  int64_t acc = 0;
  for (int64_t b = 0; b < J.N; ++b) {
    int64_t tb = ldi(J.il, b), L = ldi(J.tl, b);
    J.toff[b] = acc;
    acc += L;
    if (tb < 0 || tb > J.T || L < 0 || 2 * L + 1 > J.Lp || (!J.concat && L > J.tg->sizes[1])) {
      free(J.toff);
      return TPU_ERR(INTERNAL, "ctc: lengths out of range");
    }
  }
  if (J.concat && acc > J.tg->sizes[0]) { free(J.toff); return TPU_ERR(INTERNAL, "ctc: targets too short"); }
  if (J.N > 0) tpu_pool_parallel_for(J.N, 1, ctc_worker, &J);
  free(J.toff);
  pthread_mutex_destroy(&J.mu);
  if (J.err == 1) return TPU_ERR(OUT_OF_MEMORY, "ctc: out of host memory for a workspace");
  if (J.err == 2)
    return TPU_ERR(INVALID_ARGUMENT, "ctc_loss: target label %lld of batch element %lld is out of range [0, %lld)",
                   (long long)J.err_label, (long long)J.err_b, (long long)J.C);
  return TPU_OK;
}
