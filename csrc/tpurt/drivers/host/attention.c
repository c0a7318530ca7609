/* attention.c — flash-style scaled-dot-product attention (forward, backward) and the
 * naive _ref twins. Contract and legend in attention.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/attention.h"
#include "drivers/host/gemm.h"
#include "drivers/host/vmath.h"

#define BQ 64  /* query rows per block */
#define BK 128 /* keys per block */
#define HROWS 256 /* stacked query rows per task at most (heads sharing a kv head x BQ) */

typedef struct {
  int64_t B, Hq, Hk, T, S, E, Ev;
  int causal, has_bias;
  float scale;
  const tpu_host_view_t *q, *k, *v, *bias, *dout, *o, *lse;
  float* out;
  tpu_status_t err;
} attn_t;

static const float* fp(const tpu_host_view_t* x, int64_t i0, int64_t i1, int64_t i2) {
  return (const float*)x->data + i0 * x->strides[0] + i1 * x->strides[1] + i2 * x->strides[2];
}
static float bias_at(const attn_t* A, int64_t b, int64_t h, int64_t i, int64_t j) {
  const tpu_host_view_t* x = A->bias;
  return ((const float*)x->data)[b * x->strides[0] + h * x->strides[1] + i * x->strides[2] + j * x->strides[3]];
}

static tpu_status_t attn_setup(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                               const tpu_host_view_t* out, attn_t* A) {
  memset(A, 0, sizeof(*A));
  int bwd = op->i0 == TPU_IR_CUSTOM_ATTENTION_BWD;
  A->causal = (int)(op->i1 & TPU_ATTN_CAUSAL);
  A->has_bias = (op->i1 & TPU_ATTN_BIAS) != 0;
  int base = bwd ? 1 : 0; /* q k v start */
  int need = base + 3 + (bwd ? 2 : 0) + A->has_bias + 1;
  if (n != need) return TPU_ERR(INTERNAL, "attention: %d operands, expected %d", n, need);
  for (int i = 0; i < n; ++i)
    if (xs[i].dtype != TPU_DTYPE_F32) return TPU_ERR(INTERNAL, "attention: operand %d is not f32", i);
  A->q = &xs[base]; A->k = &xs[base + 1]; A->v = &xs[base + 2];
  if (bwd) { A->dout = &xs[0]; A->o = &xs[base + 3]; A->lse = &xs[base + 4]; }
  if (A->has_bias) A->bias = &xs[n - 2];
  const tpu_host_view_t* sc = &xs[n - 1];
  if (sc->rank != 0) return TPU_ERR(INTERNAL, "attention: scale must be rank 0");
  A->scale = *(const float*)sc->data;
  if (A->q->rank != 4 || A->k->rank != 4 || A->v->rank != 4) return TPU_ERR(INTERNAL, "attention: rank");
  A->B = A->q->sizes[0]; A->Hq = A->q->sizes[1]; A->T = A->q->sizes[2]; A->E = A->q->sizes[3];
  A->Hk = A->k->sizes[1]; A->S = A->k->sizes[2]; A->Ev = A->v->sizes[3];
  if (A->k->sizes[0] != A->B || A->v->sizes[0] != A->B || A->v->sizes[1] != A->Hk || A->v->sizes[2] != A->S ||
      A->k->sizes[3] != A->E || A->Hk <= 0 || A->Hq % A->Hk)
    return TPU_ERR(INTERNAL, "attention: operand shapes");
  int64_t want = bwd ? A->B * A->Hq * A->T * A->E + A->B * A->Hk * A->S * (A->E + A->Ev)
                     : A->B * A->Hq * A->T * (A->Ev + 1);
  if (out->dtype != TPU_DTYPE_F32) return TPU_ERR(INTERNAL, "attention: result must be f32");
  int64_t on = 1, st = 1;
  for (int d = out->rank - 1; d >= 0; --d) {
    if (out->sizes[d] != 1 && out->strides[d] != st) return TPU_ERR(INTERNAL, "attention: result must be contiguous");
    on *= out->sizes[d]; st *= out->sizes[d];
  }
  if (on != want) return TPU_ERR(INTERNAL, "attention: result size");
  A->out = (float*)out->data;
  return TPU_OK;
}
static int masked(const attn_t* A, int64_t i, int64_t j) { return A->causal && j > i; }
/* How many of the nk keys from j0 query i sees: all, or (causal) those with j <= i. */
static int64_t visible(const attn_t* A, int64_t i, int64_t j0, int64_t nk) {
  if (!A->causal) return nk;
  int64_t n = i + 1 - j0;
  return n < 0 ? 0 : n < nk ? n : nk;
}
/* sum of x[0..n) in 8 interleaved partial sums (vectorizes; a fixed order, so every build agrees) */
static float row_sum(const float* x, int64_t n) {
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) a[k] += x[j + k];
  for (; j < n; ++j) a[j & 7] += x[j];
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

/* ---------------------------------------------------------------- forward */

/* Query heads that share a kv head are stacked into one block of rows (up to HC of them), so each GEMM
 * runs (heads x queries) rows against the shared keys: for Llama's 4 heads of 32 queries and head dim 16,
 * one 128-row product instead of four 32-row ones (the per-call packing and setup dominated). */
static int64_t heads_per_task(const attn_t* A) {
  const int64_t grp = A->Hq / A->Hk, hc = HROWS / BQ;
  return hc < grp ? hc : grp;
}
/* row r of a stacked block: head h0 + hh, query i0 + ii with (hh, ii) = (r / nq, r % nq), counted (no divisions) */
#define STACKED_ROWS(r, hh, ii, rows, nq) \
  for (int64_t r = 0, hh = 0, ii = 0; r < (rows); ++r, ii = ii + 1 == (nq) ? 0 : ii + 1, hh += ii == 0)

/* task = (b, kv head, chunk of its query heads, query block) */
static void fwd_worker(void* ctx, int64_t begin, int64_t end) {
  attn_t* A = ctx;
  const int64_t E = A->E, Ev = A->Ev, S = A->S, T = A->T, nqb = (T + BQ - 1) / BQ, grp = A->Hq / A->Hk;
  const int64_t hc = heads_per_task(A), nch = (grp + hc - 1) / hc, R = hc * BQ;
  float* buf = malloc(sizeof(float) * (size_t)(R * E + R * BK + R * Ev + 3 * R + 1) + sizeof(int64_t) * (size_t)R);
  if (!buf) { A->err = TPU_ERR(OUT_OF_MEMORY, "attention: out of memory"); return; }
  float *qs = buf, *s = qs + R * E, *acc = s + R * BK, *m = acc + R * Ev, *l = m + R, *mxs = l + R;
  int64_t* lims = (int64_t*)(void*)(mxs + R + ((R * (E + BK + Ev + 3)) & 1)); /* 8-byte aligned */
  for (int64_t t = begin; t < end; ++t) {
    const int64_t qb = t % nqb, c = t / nqb % nch, hk = t / (nqb * nch) % A->Hk, b = t / (nqb * nch * A->Hk);
    const int64_t i0 = qb * BQ, nq = T - i0 < BQ ? T - i0 : BQ, h0 = hk * grp + c * hc;
    const int64_t nh = grp - c * hc < hc ? grp - c * hc : hc, rows = nh * nq;
    const float sc = A->scale; /* locals: stores to qs may not alias them, so the copy vectorizes */
    const int64_t qst = A->q->strides[3];
    STACKED_ROWS(r, hh, ii, rows, nq) {
      const float* qr = fp(A->q, b, h0 + hh, i0 + ii);
      float* qd = qs + r * E;
      if (qst == 1) for (int64_t e = 0; e < E; ++e) qd[e] = qr[e] * sc;
      else for (int64_t e = 0; e < E; ++e) qd[e] = qr[e * qst] * sc;
      m[r] = -INFINITY; l[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)(rows * Ev));
    int64_t jend = A->causal ? (i0 + nq < S ? i0 + nq : S) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
      int64_t nk = jend - j0 < BK ? jend - j0 : BK;
      const float* kp = fp(A->k, b, hk, j0);
      /* s (rows, nk) = qs @ k_blk^T */
      tpu_host_sgemm(rows, nk, E, 1.0f, qs, E, 1, kp, A->k->strides[3], A->k->strides[2], 0.0f, s, nk, 1);
      /* the block's scores less their row maxima (masked keys -inf), then one exp over the whole block: short
       * rows (Llama's 8 keys) no longer pay a vector loop's set-up per row (same values: exp(-inf) = 0) */
      STACKED_ROWS(r, hh, ii, rows, nq) {
        const int64_t h = h0 + hh, i = i0 + ii;
        float* sr = s + r * nk;
        const int64_t lim = visible(A, i, j0, nk); /* keys [j0, j0 + lim) unmasked */
        if (A->has_bias)
          for (int64_t j = 0; j < lim; ++j) sr[j] += bias_at(A, b, h, i, j0 + j);
        float mx = m[r];
        for (int64_t j = 0; j < lim; ++j) mx = sr[j] > mx ? sr[j] : mx;
        mxs[r] = mx; lims[r] = lim;
        if (mx == -INFINITY) { for (int64_t j = 0; j < nk; ++j) sr[j] = -INFINITY; continue; }
        for (int64_t j = 0; j < lim; ++j) sr[j] = sr[j] - mx;
        for (int64_t j = lim; j < nk; ++j) sr[j] = -INFINITY;
      }
      for (int64_t x = 0; x < rows * nk; ++x) s[x] = tile_expf(s[x]);
      for (int64_t r = 0; r < rows; ++r) {
        const float mx = mxs[r];
        if (mx == -INFINITY) continue;
        float corr = tile_expf(m[r] - mx); /* m = -inf: corr 0 */
        l[r] = l[r] * corr + row_sum(s + r * nk, lims[r]);
        m[r] = mx;
        if (corr != 1.0f) for (int64_t e = 0; e < Ev; ++e) acc[r * Ev + e] *= corr;
      }
      /* acc (rows, Ev) += p @ v_blk */
      const float* vp = fp(A->v, b, hk, j0);
      tpu_host_sgemm(rows, Ev, nk, 1.0f, s, nk, 1, vp, A->v->strides[2], A->v->strides[3], 1.0f, acc, Ev, 1);
    }
    STACKED_ROWS(r, hh, ii, rows, nq) {
      float* orow = A->out + ((b * A->Hq + h0 + hh) * T + i0 + ii) * (Ev + 1);
      float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      for (int64_t e = 0; e < Ev; ++e) orow[e] = acc[r * Ev + e] * inv;
      orow[Ev] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
    }
  }
  free(buf);
}

/* ---------------------------------------------------------------- backward */

/* task = (b, kv head): owns dk, dv of that head and dq of its query heads, which it runs in stacked
 * chunks per query block (dq rows gathered in a scratch block, written once) */
static void bwd_worker(void* ctx, int64_t begin, int64_t end) {
  attn_t* A = ctx;
  const int64_t E = A->E, Ev = A->Ev, S = A->S, T = A->T, grp = A->Hq / A->Hk;
  const int64_t hc = heads_per_task(A), R = hc * BQ;
  float* dq_all = A->out;
  float* dk_all = dq_all + A->B * A->Hq * T * E;
  float* dv_all = dk_all + A->B * A->Hk * S * E;
  float* buf = malloc(sizeof(float) * (size_t)(2 * R * BK + 2 * R * E + R * Ev + R));
  if (!buf) { A->err = TPU_ERR(OUT_OF_MEMORY, "attention: out of memory"); return; }
  float *p = buf, *dp = p + R * BK, *qs = dp + R * BK, *dqs = qs + R * E, *dob = dqs + R * E, *dd = dob + R * Ev;
  for (int64_t t = begin; t < end; ++t) {
    int64_t b = t / A->Hk, hk = t % A->Hk;
    float* dk = dk_all + (b * A->Hk + hk) * S * E;
    float* dv = dv_all + (b * A->Hk + hk) * S * Ev;
    memset(dk, 0, sizeof(float) * (size_t)(S * E));
    memset(dv, 0, sizeof(float) * (size_t)(S * Ev));
    for (int64_t hs = 0; hs < grp; hs += hc) {
      const int64_t h0 = hk * grp + hs, nh = grp - hs < hc ? grp - hs : hc;
      for (int64_t i0 = 0; i0 < T; i0 += BQ) {
        const int64_t nq = T - i0 < BQ ? T - i0 : BQ, rows = nh * nq;
        const int64_t qst = A->q->strides[3], gst = A->dout->strides[3], ost = A->o->strides[3];
        STACKED_ROWS(r, hh, ii, rows, nq) {
          const int64_t h = h0 + hh, i = i0 + ii;
          const float *qr = fp(A->q, b, h, i), *gr = fp(A->dout, b, h, i), *orow = fp(A->o, b, h, i);
          double d = 0;
          for (int64_t e = 0; e < E; ++e) qs[r * E + e] = qr[e * qst];
          for (int64_t e = 0; e < Ev; ++e) {
            float g = gr[e * gst];
            dob[r * Ev + e] = g;
            d += (double)g * orow[e * ost];
          }
          dd[r] = (float)d;
        }
        memset(dqs, 0, sizeof(float) * (size_t)(rows * E));
        int64_t jend = A->causal ? (i0 + nq < S ? i0 + nq : S) : S;
        for (int64_t j0 = 0; j0 < jend; j0 += BK) {
          int64_t nk = jend - j0 < BK ? jend - j0 : BK;
          const float *kp = fp(A->k, b, hk, j0), *vp = fp(A->v, b, hk, j0);
          /* p (rows, nk) = softmax rows recomputed: exp(scale * q k^T + bias - lse) */
          tpu_host_sgemm(rows, nk, E, A->scale, qs, E, 1, kp, A->k->strides[3], A->k->strides[2], 0.0f, p, nk, 1);
          STACKED_ROWS(r, hh, ii, rows, nq) { /* then one exp over the block, as in the forward */
            const int64_t h = h0 + hh, i = i0 + ii;
            float L = ((const float*)A->lse->data)[b * A->lse->strides[0] + h * A->lse->strides[1] + i * A->lse->strides[2]];
            float* pr = p + r * nk;
            const int64_t lim = L == -INFINITY ? 0 : visible(A, i, j0, nk);
            if (A->has_bias)
              for (int64_t j = 0; j < lim; ++j) pr[j] += bias_at(A, b, h, i, j0 + j);
            for (int64_t j = 0; j < lim; ++j) pr[j] = pr[j] - L;
            for (int64_t j = lim; j < nk; ++j) pr[j] = -INFINITY;
          }
          for (int64_t x = 0; x < rows * nk; ++x) p[x] = tile_expf(p[x]);
          /* dv_blk (nk, Ev) += p^T @ dout_blk */
          tpu_host_sgemm(nk, Ev, rows, 1.0f, p, 1, nk, dob, Ev, 1, 1.0f, dv + j0 * Ev, Ev, 1);
          /* dp (rows, nk) = dout_blk @ v_blk^T */
          tpu_host_sgemm(rows, nk, Ev, 1.0f, dob, Ev, 1, vp, A->v->strides[3], A->v->strides[2], 0.0f, dp, nk, 1);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < nk; ++j) dp[r * nk + j] = p[r * nk + j] * (dp[r * nk + j] - dd[r]); /* ds */
          /* dq (rows, E) += scale * ds @ k_blk ; dk_blk (nk, E) += scale * ds^T @ q_blk */
          tpu_host_sgemm(rows, E, nk, A->scale, dp, nk, 1, kp, A->k->strides[2], A->k->strides[3], 1.0f, dqs, E, 1);
          tpu_host_sgemm(nk, E, rows, A->scale, dp, 1, nk, qs, E, 1, 1.0f, dk + j0 * E, E, 1);
        }
        STACKED_ROWS(r, hh, ii, rows, nq)
          memcpy(dq_all + ((b * A->Hq + h0 + hh) * T + i0 + ii) * E, dqs + r * E, sizeof(float) * (size_t)E);
      }
    }
  }
  free(buf);
}

tpu_status_t tpu_host_k_attention(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                  const tpu_host_view_t* out) {
  attn_t A;
  tpu_status_t st = attn_setup(op, n, xs, out, &A);
  if (st) return st;
  if (op->i0 == TPU_IR_CUSTOM_ATTENTION) {
    const int64_t hc = heads_per_task(&A), nch = (A.Hq / A.Hk + hc - 1) / hc;
    int64_t tasks = A.B * A.Hk * nch * ((A.T + BQ - 1) / BQ);
    if (tasks) tpu_pool_parallel_for(tasks, 1, fwd_worker, &A);
  } else {
    if (A.B > 0 && A.Hk > 0) tpu_pool_parallel_for(A.B * A.Hk, 1, bwd_worker, &A);
  }
  return A.err;
}

/* ---------------------------------------------------------------- naive twins */

tpu_status_t tpu_host_k_attention_ref(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                      const tpu_host_view_t* out) {
  attn_t A;
  tpu_status_t st = attn_setup(op, n, xs, out, &A);
  if (st) return st;
  const int64_t E = A.E, Ev = A.Ev, S = A.S, T = A.T, grp = A.Hq / A.Hk;
  int bwd = op->i0 == TPU_IR_CUSTOM_ATTENTION_BWD;
  double* P = malloc(sizeof(double) * (size_t)(T * S + 1));
  double* dP = malloc(sizeof(double) * (size_t)(T * S + 1));
  if (!P || !dP) { free(P); free(dP); return TPU_ERR(OUT_OF_MEMORY, "attention: out of memory"); }
  float* dq_all = A.out;
  float* dk_all = dq_all + A.B * A.Hq * T * E;
  float* dv_all = dk_all + A.B * A.Hk * S * E;
  if (bwd) memset(A.out, 0, sizeof(float) * (size_t)(A.B * A.Hq * T * E + A.B * A.Hk * S * (E + Ev)));
  for (int64_t b = 0; b < A.B; ++b)
    for (int64_t h = 0; h < A.Hq; ++h) {
      int64_t hk = h / grp;
      for (int64_t i = 0; i < T; ++i) { /* P = softmax(scale q k^T + bias, masked) */
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          double x = 0;
          for (int64_t e = 0; e < E; ++e)
            x += (double)fp(A.q, b, h, i)[e * A.q->strides[3]] * fp(A.k, b, hk, j)[e * A.k->strides[3]];
          x *= A.scale;
          if (A.has_bias) x += bias_at(&A, b, h, i, j);
          if (masked(&A, i, j)) x = -INFINITY;
          P[i * S + j] = x;
          if (x > mx) mx = x;
        }
        for (int64_t j = 0; j < S; ++j) { P[i * S + j] = mx == -INFINITY ? 0 : exp(P[i * S + j] - mx); sum += P[i * S + j]; }
        for (int64_t j = 0; j < S; ++j) P[i * S + j] = sum > 0 ? P[i * S + j] / sum : 0;
        if (!bwd) {
          float* orow = A.out + ((b * A.Hq + h) * T + i) * (Ev + 1);
          for (int64_t e = 0; e < Ev; ++e) {
            double a = 0;
            for (int64_t j = 0; j < S; ++j) a += P[i * S + j] * fp(A.v, b, hk, j)[e * A.v->strides[3]];
            orow[e] = (float)a;
          }
          orow[Ev] = sum > 0 ? (float)(mx + log(sum)) : -INFINITY;
        }
      }
      if (!bwd) continue;
      float* dq = dq_all + (b * A.Hq + h) * T * E;
      float* dk = dk_all + (b * A.Hk + hk) * S * E;
      float* dv = dv_all + (b * A.Hk + hk) * S * Ev;
      for (int64_t i = 0; i < T; ++i) {
        const float* g = fp(A.dout, b, h, i);
        double d = 0;
        for (int64_t j = 0; j < S; ++j) {
          double x = 0;
          for (int64_t e = 0; e < Ev; ++e) x += (double)g[e * A.dout->strides[3]] * fp(A.v, b, hk, j)[e * A.v->strides[3]];
          dP[i * S + j] = x;
          d += P[i * S + j] * x;
        }
        for (int64_t j = 0; j < S; ++j) {
          double ds = P[i * S + j] * (dP[i * S + j] - d) * A.scale;
          for (int64_t e = 0; e < Ev; ++e) dv[j * Ev + e] += (float)(P[i * S + j] * g[e * A.dout->strides[3]]);
          for (int64_t e = 0; e < E; ++e) {
            dq[i * E + e] += (float)(ds * fp(A.k, b, hk, j)[e * A.k->strides[3]]);
            dk[j * E + e] += (float)(ds * fp(A.q, b, h, i)[e * A.q->strides[3]]);
          }
        }
      }
    }
  free(P); free(dP);
  return TPU_OK;
}
