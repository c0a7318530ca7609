/* conv_impl.h — the optimized convolution kernels for one element type, included by conv.c with
 * CT (float/double), CSUF (name suffix) and CGEMM (tpu_host_sgemm/dgemm) defined. */

#define CJOIN2(a, b) a##_##b
#define CJOIN(a, b) CJOIN2(a, b)
#define CFN(name) CJOIN(name, CSUF)

/* Operands (x, w, gy) may be stored in another dtype than CT (f32 kernels read bf16/f16 and
 * widen exactly): they are addressed in bytes (base + element offset * size) and read through
 * ldrun / ld1. dst[i] = base[(off + i * step)] for i < n. */
static void CFN(ldrun_gen)(CT* dst, const char* base, int64_t off, int64_t step, int64_t n, int dt) {
  if (dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16) {
    const uint16_t* s = (const uint16_t*)base + off;
    if (dt == TPU_DTYPE_BF16) for (int64_t i = 0; i < n; ++i) dst[i] = (CT)tpu_bf16_to_f32(s[i * step]);
    else for (int64_t i = 0; i < n; ++i) dst[i] = (CT)tpu_f16_to_f32(s[i * step]);
  } else {
    const CT* s = (const CT*)base + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i * step];
  }
}
/* the unit-stride copy inline (callers copy runs of 1-16 elements, where a call cost as much as the copy); the
 * rest out of line (inlined into big callers, the strided loop compiled ~2x slower) */
static inline void CFN(ldrun)(CT* dst, const char* base, int64_t off, int64_t step, int64_t n, int dt) {
  if (step == 1 && dt != TPU_DTYPE_BF16 && dt != TPU_DTYPE_F16) conv_copy(dst, (const CT*)base + off, (size_t)n * sizeof(CT));
  else CFN(ldrun_gen)(dst, base, off, step, n, dt);
}
static inline CT CFN(ld1)(const char* base, int64_t off, int dt) {
  if (dt == TPU_DTYPE_BF16) return (CT)tpu_bf16_to_f32(((const uint16_t*)base)[off]);
  if (dt == TPU_DTYPE_F16) return (CT)tpu_f16_to_f32(((const uint16_t*)base)[off]);
  return ((const CT*)base)[off];
}

/* im2col for 2-d, innermost-stride-1 convolutions: the input rows the tile reads are first copied (widened)
 * into a zero-padded band per channel, rows Wp = S2 + 2 pd2 apart, so every run of an im2col row is one
 * unconditional copy of consecutive band elements (no per-run bounds, zero fills or per-element widening:
 * the general walk below cost more than the GEMM on 16-channel maps). 0 when the case is not one it
 * takes or the band is not allocated (the general walk then runs). */
static int CFN(im2col_band)(const conv_geo_t* g, const char* x, const conv_tile_t* t, CT* col, int64_t ld) {
  /* rows of fewer than 8 outputs (4x4, 2x2 maps): the tables' per-element walk costs less than the band */
  if (g->S[0] != 1 || g->K[0] != 1 || g->Q[0] != 1 || g->st[2] != 1 || g->Q[2] < 8 || t->pt <= 0) return 0;
  const int64_t Q2 = g->Q[2], Wp = g->S[2] + 2 * g->pd[2];
  const int64_t q1a = t->p0 / Q2, q1b = (t->p0 + t->pt - 1) / Q2; /* output rows of the tile */
  const int64_t r0 = q1a * g->st[1] - g->pd[1], r1 = q1b * g->st[1] - g->pd[1] + (g->K[1] - 1) * g->dl[1] + 1;
  const int64_t nr = r1 - r0, plane = nr * Wp;
  if (Q2 - 1 + (g->K[2] - 1) * g->dl[2] >= Wp) return 0; /* a window past the padded row */
  CT* band = conv_alloc((size_t)(g->C * plane) * sizeof(CT));
  if (!band) return 0;
  for (int64_t c = 0; c < g->C; ++c) {
    CT* bc = band + c * plane;
    for (int64_t r = 0; r < nr; ++r) {
      CT* br = bc + r * Wp;
      const int64_t i1 = r0 + r;
      if ((uint64_t)i1 >= (uint64_t)g->S[1]) {
        memset(br, 0, (size_t)Wp * sizeof(CT));
        continue;
      }
      memset(br, 0, (size_t)g->pd[2] * sizeof(CT));
      CFN(ldrun)(br + g->pd[2], x, c * g->xs[1] + i1 * g->xs[3], g->xs[4], g->S[2], g->xdt);
      memset(br + g->pd[2] + g->S[2], 0, (size_t)g->pd[2] * sizeof(CT));
    }
  }
  for (int64_t c = 0; c < g->C; ++c)
    for (int64_t k1 = 0; k1 < g->K[1]; ++k1)
      for (int64_t k2 = 0; k2 < g->K[2]; ++k2) {
        CT* dst = col + (c * g->KK + k1 * g->K[2] + k2) * ld;
        const CT* src = band + c * plane + k1 * g->dl[1] * Wp + k2 * g->dl[2]; /* + (q1 st1 - r0 - pd1) Wp + q2 */
        int64_t q1 = q1a, q2 = t->p0 - q1a * Q2;
        for (int64_t j = 0; j < t->pt;) {
          const int64_t len = TPU_MIN(Q2 - q2, t->pt - j);
          const CT* sr = src + (q1 * g->st[1] - g->pd[1] - r0) * Wp + q2;
          CT* d = dst + j;
          for (int64_t q = 0; q < len; ++q) d[q] = sr[q];
          j += len; q2 = 0; ++q1;
        }
      }
  conv_free(band);
  return 1;
}

/* im2col of sample x (at n) for tile positions j < pt: col (C*KK, pt), rows ld apart. Walks the
 * tile in runs along the innermost output dim, where the valid input range is known. */
static void CFN(im2col)(const conv_geo_t* g, const char* x, const conv_tile_t* t, CT* col, int64_t ld) {
  if (CFN(im2col_band)(g, x, t, col, ld)) return;
  const int64_t* xs = g->xs;
  int64_t Q2 = g->Q[2], st2 = g->st[2], xs4 = xs[4];
  const int xdt = g->xdt;
  for (int64_t c = 0; c < g->C; ++c) {
    const int64_t xc = c * xs[1]; /* element offset of channel c */
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      int64_t o0 = k0 * g->dl[0], o1 = k1 * g->dl[1], o2 = k2 * g->dl[2], lo, hi;
      conv_inner_range(g, o2, &lo, &hi);
      CT* dst = col + (c * g->KK + kk) * ld;
      for (int64_t j = 0; j < t->pt;) {
        int64_t q2 = (t->p0 + j) % Q2, len = TPU_MIN(Q2 - q2, t->pt - j);
        int64_t i0 = t->b0[j] + o0, i1 = t->b1[j] + o1;
        CT* d = dst + j; /* d[q - q2] for q in [q2, q2 + len) */
        if ((uint64_t)i0 >= (uint64_t)g->S[0] || (uint64_t)i1 >= (uint64_t)g->S[1]) {
          for (int64_t q = 0; q < len; ++q) d[q] = (CT)0;
        } else {
          int64_t a = TPU_MIN(TPU_MAX(q2, lo), q2 + len), b = TPU_MAX(a, TPU_MIN(q2 + len, hi));
          int64_t sb = i0 * xs[2] + i1 * xs[3] + (o2 - g->pd[2]) * xs4; /* + q * st2 * xs4 */
          for (int64_t q = q2; q < a; ++q) d[q - q2] = (CT)0;
          if (b > a) CFN(ldrun)(d + (a - q2), x, xc + sb + a * st2 * xs4, st2 * xs4, b - a, xdt);
          for (int64_t q = b; q < q2 + len; ++q) d[q - q2] = (CT)0;
        }
        j += len;
      }
    }
  }
}

/* col2im: acc (C, S0*S1*S2) += col (C*KK, pt; rows ld apart) scattered back to input positions. */
static void CFN(col2im)(const conv_geo_t* g, const CT* col, const conv_tile_t* t, CT* acc, int64_t ld) {
  int64_t SS = g->S[0] * g->S[1] * g->S[2], Q2 = g->Q[2], st2 = g->st[2];
  for (int64_t c = 0; c < g->C; ++c) {
    CT* ac = acc + c * SS;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      int64_t o0 = k0 * g->dl[0], o1 = k1 * g->dl[1], o2 = k2 * g->dl[2], lo, hi;
      conv_inner_range(g, o2, &lo, &hi);
      const CT* src = col + (c * g->KK + kk) * ld;
      for (int64_t j = 0; j < t->pt;) {
        int64_t q2 = (t->p0 + j) % Q2, len = TPU_MIN(Q2 - q2, t->pt - j);
        int64_t i0 = t->b0[j] + o0, i1 = t->b1[j] + o1;
        if ((uint64_t)i0 < (uint64_t)g->S[0] && (uint64_t)i1 < (uint64_t)g->S[1]) {
          int64_t a = TPU_MAX(q2, lo), b = TPU_MIN(q2 + len, hi);
          const CT* s = src + j; /* s[q - q2] */
          int64_t db = (i0 * g->S[1] + i1) * g->S[2] + (o2 - g->pd[2]); /* + q * st2 */
          if (st2 == 1) {
            for (int64_t q = a; q < b; ++q) ac[db + q] += s[q - q2];
          } else {
            for (int64_t q = a; q < b; ++q) ac[db + q * st2] += s[q - q2];
          }
        }
        j += len;
      }
    }
  }
}

/* weight (O, Cg, *K) strided -> wp (O, Cg*KK) contiguous */
static void CFN(pack_w)(const conv_geo_t* g, const char* w, CT* wp) {
  if (conv_w_contig(g)) { /* (O, Cg, *K) contiguous: one converting copy */
    CFN(ldrun)(wp, w, 0, 1, g->O * g->Cg * g->KK, g->wdt);
    return;
  }
  for (int64_t o = 0; o < g->O; ++o)
    for (int64_t c = 0; c < g->Cg; ++c) {
      CT* d = wp + (o * g->Cg + c) * g->KK;
      const int64_t oc = o * g->ws[0] + c * g->ws[1];
      for (int64_t k0 = 0; k0 < g->K[0]; ++k0)
        for (int64_t k1 = 0; k1 < g->K[1]; ++k1, d += g->K[2])
          CFN(ldrun)(d, w, oc + k0 * g->ws[2] + k1 * g->ws[3], g->ws[4], g->K[2], g->wdt);
    }
}

typedef struct {
  const conv_geo_t* g;
  const CT* wp;       /* (O, KcG) packed weight (fwd, bwd_input) */
  CT* acc;            /* bwd_weight: (nchunks, O, KcG) partial sums */
  int64_t nunits_per_chunk, nunits;
  volatile int oom;
} CFN(conv_job_t);

/* forward: unit u = (n, tile) */
static void CFN(fwd_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  CT* col = conv_alloc((size_t)(g->C * g->KK * g->Pt) * sizeof(CT));
  CT* ct = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  if (!col || !ct || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  CT* yd = (CT*)g->yd;
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / g->ntiles, ti = u % g->ntiles;
    conv_tile_set(g, &t, ti);
    const char* B = (const char*)col; /* (C*KK, pt) */
    int64_t b_rs = t.pt, b_cs = 1, b_es = sizeof(CT);
    int bdt = CDT;
    if (g->x_direct) {
      B = g->xd + (n * g->xs[0] + t.p0 * g->xps) * g->xes; b_rs = g->xs[1]; b_cs = g->xps;
      b_es = g->xes; bdt = g->xdt;
    } else {
      CFN(im2col)(g, g->xd + n * g->xs[0] * g->xes, &t, col, t.pt);
    }
    CT* yn = yd + n * g->ys[0];
    CT* C = g->y_direct ? yn + t.p0 * g->yps : ct; /* (O, pt) */
    int64_t c_rs = g->y_direct ? g->ys[1] : t.pt, c_cs = g->y_direct ? g->yps : 1;
    for (int64_t grp = 0; grp < g->G; ++grp)
      CGEMMX(CDT, bdt, g->prec, g->Og, t.pt, g->KcG, J->wp + grp * g->Og * g->KcG, g->KcG, 1,
             B + grp * g->KcG * b_rs * b_es, b_rs, b_cs, (CT)0, C + grp * g->Og * c_rs, c_rs, c_cs);
    if (!g->y_direct)
      for (int64_t o = 0; o < g->O; ++o)
        for (int64_t j = 0; j < t.pt; ++j) yn[o * g->ys[1] + t.yoff[j]] = ct[o * t.pt + j];
  }
done:
  conv_free(col); conv_free(ct); conv_tile_free(&t);
}

/* gx of one sample (xn: the x view at the sample) = acc (C, S0*S1*S2): a copy per channel where the spatial
 * dims are one run, else rows along the innermost dim (no index division per element) */
static void CFN(store_planes)(const conv_geo_t* g, const CT* acc, CT* xn) {
  const int64_t SS = g->S[0] * g->S[1] * g->S[2], S2 = g->S[2], x4 = g->xs[4];
  int64_t run = 0;
  const int flat = conv_flat(g->S, g->xs + 2, &run) && run == 1;
  for (int64_t c = 0; c < g->C; ++c) {
    const CT* a = acc + c * SS;
    CT* xc = xn + c * g->xs[1];
    if (flat) {
      memcpy(xc, a, (size_t)SS * sizeof(CT));
      continue;
    }
    for (int64_t s0 = 0; s0 < g->S[0]; ++s0)
      for (int64_t s1 = 0; s1 < g->S[1]; ++s1, a += S2) {
        CT* xr = xc + s0 * g->xs[2] + s1 * g->xs[3];
        for (int64_t s2 = 0; s2 < S2; ++s2) xr[s2 * x4] = a[s2];
      }
  }
}

/* backward input: unit = n (the scatter of overlapping windows stays in one thread) */
static void CFN(bwd_input_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  int64_t SS = g->S[0] * g->S[1] * g->S[2];
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  CT* col = conv_alloc((size_t)(g->C * g->KK * g->Pt) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  CT* acc = conv_alloc((size_t)(g->C * SS) * sizeof(CT));
  if (!col || !gt || !acc || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  CT* xd = (CT*)g->xd;
  for (int64_t n = begin; n < end; ++n) {
    memset(acc, 0, (size_t)(g->C * SS) * sizeof(CT));
    const char* yn = g->yd + n * g->ys[0] * g->yes;
    for (int64_t ti = 0; ti < g->ntiles; ++ti) {
      conv_tile_set(g, &t, ti);
      const char* B = (const char*)gt; /* gy tile (O, pt) */
      int64_t b_rs = t.pt, b_cs = 1, b_es = sizeof(CT);
      int bdt = CDT;
      if (g->y_direct) {
        B = yn + t.p0 * g->yps * g->yes; b_rs = g->ys[1]; b_cs = g->yps; b_es = g->yes; bdt = g->ydt;
      } else {
        for (int64_t o = 0; o < g->O; ++o)
          for (int64_t j = 0; j < t.pt; ++j) gt[o * t.pt + j] = CFN(ld1)(yn, o * g->ys[1] + t.yoff[j], g->ydt);
      }
      /* col_g (KcG, pt) = wp_g^T (KcG, Og) @ gy_g (Og, pt) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMMX(CDT, bdt, g->prec, g->KcG, t.pt, g->Og, J->wp + grp * g->Og * g->KcG, 1, g->KcG,
               B + grp * g->Og * b_rs * b_es, b_rs, b_cs, (CT)0, col + grp * g->KcG * t.pt, t.pt, 1);
      CFN(col2im)(g, col, &t, acc, t.pt);
    }
    CFN(store_planes)(g, acc, xd + n * g->xs[0]);
  }
done:
  conv_free(col); conv_free(gt); conv_free(acc); conv_tile_free(&t);
}

/* backward weight: chunk k sums units [k*per, (k+1)*per) into its own (O, KcG) */
static void CFN(bwd_weight_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  CT* col = conv_alloc((size_t)(g->C * g->KK * g->Pt) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  if (!col || !gt || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  for (int64_t k = begin; k < end; ++k) {
    CT* acc = J->acc + k * g->O * g->KcG;
    int64_t u1 = TPU_MIN(J->nunits, (k + 1) * J->nunits_per_chunk);
    for (int64_t u = k * J->nunits_per_chunk; u < u1; ++u) {
      int64_t n = u / g->ntiles, ti = u % g->ntiles;
      conv_tile_set(g, &t, ti);
      const char* X = (const char*)col; /* im2col (C*KK, pt) */
      int64_t x_rs = t.pt, x_cs = 1, x_es = sizeof(CT);
      int xdt = CDT;
      if (g->x_direct) {
        X = g->xd + (n * g->xs[0] + t.p0 * g->xps) * g->xes; x_rs = g->xs[1]; x_cs = g->xps;
        x_es = g->xes; xdt = g->xdt;
      } else {
        CFN(im2col)(g, g->xd + n * g->xs[0] * g->xes, &t, col, t.pt);
      }
      const char* yn = g->yd + n * g->ys[0] * g->yes;
      const char* A = (const char*)gt; /* gy tile (O, pt) */
      int64_t a_rs = t.pt, a_cs = 1, a_es = sizeof(CT);
      int adt = CDT;
      if (g->y_direct) {
        A = yn + t.p0 * g->yps * g->yes; a_rs = g->ys[1]; a_cs = g->yps; a_es = g->yes; adt = g->ydt;
      } else {
        for (int64_t o = 0; o < g->O; ++o)
          for (int64_t j = 0; j < t.pt; ++j) gt[o * t.pt + j] = CFN(ld1)(yn, o * g->ys[1] + t.yoff[j], g->ydt);
      }
      /* acc_g (Og, KcG) += gy_g (Og, pt) @ col_g^T (pt, KcG) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMMX(adt, xdt, g->prec, g->Og, g->KcG, t.pt, A + grp * g->Og * a_rs * a_es, a_rs, a_cs,
               X + grp * g->KcG * x_rs * x_es, x_cs, x_rs, (CT)1, acc + grp * g->Og * g->KcG, g->KcG, 1);
    }
  }
done:
  conv_free(col); conv_free(gt); conv_tile_free(&t);
}

/* ---- sample groups (g->ns > 1: small outputs, one tile per sample): a unit is ns samples whose
 * im2col columns sit side by side, so one GEMM of ns * P columns replaces ns small ones (the
 * weight is packed once per group instead of once per sample, and the GEMM's n / k is long
 * enough to run at speed). Tiles cover whole samples (p0 = 0, pt = P). */
/* Per-position offsets of a whole-sample tile, shared by every sample and channel of a group:
 * xo[kk * P + j] = x-view offset of (kk, position j) or -1 in the padding; so (optional, may be
 * NULL) = the same input position as an index into a contiguous (S0*S1*S2) plane, or -1. */
static void CFN(conv_tables)(const conv_geo_t* g, const conv_tile_t* t, int64_t* xo, int64_t* so) {
  for (int64_t kk = 0; kk < g->KK; ++kk) {
    int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
    for (int64_t j = 0; j < t->pt; ++j) {
      int64_t i0 = t->b0[j] + k0 * g->dl[0], i1 = t->b1[j] + k1 * g->dl[1], i2 = t->b2[j] + k2 * g->dl[2];
      int ok = (uint64_t)i0 < (uint64_t)g->S[0] && (uint64_t)i1 < (uint64_t)g->S[1] && (uint64_t)i2 < (uint64_t)g->S[2];
      xo[kk * t->pt + j] = ok ? i0 * g->xs[2] + i1 * g->xs[3] + i2 * g->xs[4] : -1;
      if (so) so[kk * t->pt + j] = ok ? (i0 * g->S[1] + i1) * g->S[2] + i2 : -1;
    }
  }
}
/* im2col of one sample through the tables: col (C*KK, P), rows ld apart */
static void CFN(im2col_tab)(const conv_geo_t* g, const char* x, const int64_t* xo, int64_t P, CT* col, int64_t ld) {
  const int dt = g->xdt;
  for (int64_t c = 0; c < g->C; ++c) {
    const int64_t xc = c * g->xs[1];
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      CT* d = col + (c * g->KK + kk) * ld;
      const int64_t* o = xo + kk * P;
      if (dt == CDT) {
        const CT* xs = (const CT*)x + xc;
        for (int64_t j = 0; j < P; ++j) d[j] = o[j] >= 0 ? xs[o[j]] : (CT)0;
      } else {
        for (int64_t j = 0; j < P; ++j) d[j] = o[j] >= 0 ? CFN(ld1)(x, xc + o[j], dt) : (CT)0;
      }
    }
  }
}
/* col2im of one sample through the tables: acc (C, S0*S1*S2) += col (C*KK, P), rows ld apart */
static void CFN(col2im_tab)(const conv_geo_t* g, const CT* col, const int64_t* so, int64_t P, CT* acc, int64_t ld) {
  const int64_t SS = g->S[0] * g->S[1] * g->S[2];
  for (int64_t c = 0; c < g->C; ++c) {
    CT* ac = acc + c * SS;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      const CT* src = col + (c * g->KK + kk) * ld;
      const int64_t* o = so + kk * P;
      for (int64_t j = 0; j < P; ++j)
        if (o[j] >= 0) ac[o[j]] += src[j];
    }
  }
}

/* im2col of sample x into a group's columns (col (C*KK, P), rows ld apart): x itself where it is its own
 * im2col matrix (1x1, stride 1, unpadded: a copy per channel), else the band, else the tables, built at
 * their first use (*xo_ready) */
static void CFN(im2col_sample)(const conv_geo_t* g, const char* x, const conv_tile_t* t, int64_t* xo, int* xo_ready,
                               CT* col, int64_t ld) {
  if (g->x_direct) {
    for (int64_t c = 0; c < g->C; ++c) CFN(ldrun)(col + c * ld, x, c * g->xs[1], g->xps, g->P, g->xdt);
    return;
  }
  if (CFN(im2col_band)(g, x, t, col, ld)) return;
  if (!*xo_ready) { CFN(conv_tables)(g, t, xo, NULL); *xo_ready = 1; }
  CFN(im2col_tab)(g, x, xo, g->P, col, ld);
}

static void CFN(gather_gy)(const conv_geo_t* g, const conv_tile_t* t, int64_t n0, int64_t nn, CT* gt) {
  const int64_t cols = nn * t->pt;
  for (int64_t s = 0; s < nn; ++s) {
    const char* yn = g->yd + (n0 + s) * g->ys[0] * g->yes;
    for (int64_t o = 0; o < g->O; ++o) {
      CT* d = gt + o * cols + s * t->pt;
      if (g->y_direct && g->yps == 1) CFN(ldrun)(d, yn, o * g->ys[1], 1, t->pt, g->ydt);
      else for (int64_t j = 0; j < t->pt; ++j) d[j] = CFN(ld1)(yn, o * g->ys[1] + t->yoff[j], g->ydt);
    }
  }
}

static void CFN(fwd_group_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  const int64_t wcols = g->ns * g->P;
  CT* col = conv_alloc((size_t)(g->C * g->KK * wcols) * sizeof(CT));
  CT* ct = conv_alloc((size_t)(g->O * wcols) * sizeof(CT));
  int64_t* xo = conv_alloc((size_t)(g->KK * g->P) * sizeof(int64_t));
  if (!col || !ct || !xo || conv_tile_alloc(&t, g->P)) { J->oom = 1; goto done; }
  conv_tile_set(g, &t, 0);
  int xo_ready = 0;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t n0 = u * g->ns, nn = TPU_MIN(g->ns, g->N - n0), cols = nn * g->P;
    for (int64_t s = 0; s < nn; ++s)
      CFN(im2col_sample)(g, g->xd + (n0 + s) * g->xs[0] * g->xes, &t, xo, &xo_ready, col + s * g->P, cols);
    for (int64_t grp = 0; grp < g->G; ++grp)
      CGEMMX(CDT, CDT, g->prec, g->Og, cols, g->KcG, J->wp + grp * g->Og * g->KcG, g->KcG, 1,
             (const char*)(col + grp * g->KcG * cols), cols, 1, (CT)0, ct + grp * g->Og * cols, cols, 1);
    for (int64_t s = 0; s < nn; ++s) {
      CT* yn = (CT*)g->yd + (n0 + s) * g->ys[0];
      for (int64_t o = 0; o < g->O; ++o) {
        const CT* src = ct + o * cols + s * g->P;
        CT* yo = yn + o * g->ys[1];
        if (g->y_direct && g->yps == 1) memcpy(yo, src, (size_t)g->P * sizeof(CT));
        else for (int64_t j = 0; j < g->P; ++j) yo[t.yoff[j]] = src[j];
      }
    }
  }
done:
  conv_free(col); conv_free(ct); conv_free(xo); conv_tile_free(&t);
}

static void CFN(bwd_input_group_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  const int64_t SS = g->S[0] * g->S[1] * g->S[2], wcols = g->ns * g->P;
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  CT* col = conv_alloc((size_t)(g->C * g->KK * wcols) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * wcols) * sizeof(CT));
  CT* acc = conv_alloc((size_t)(g->C * SS) * sizeof(CT));
  int64_t* xo = conv_alloc((size_t)(2 * g->KK * g->P) * sizeof(int64_t));
  if (!col || !gt || !acc || !xo || conv_tile_alloc(&t, g->P)) { J->oom = 1; goto done; }
  conv_tile_set(g, &t, 0);
  int64_t* so = xo + g->KK * g->P;
  CFN(conv_tables)(g, &t, xo, so);
  for (int64_t u = begin; u < end; ++u) {
    const int64_t n0 = u * g->ns, nn = TPU_MIN(g->ns, g->N - n0), cols = nn * g->P;
    CFN(gather_gy)(g, &t, n0, nn, gt);
    /* col_g (KcG, cols) = wp_g^T (KcG, Og) @ gy_g (Og, cols) */
    for (int64_t grp = 0; grp < g->G; ++grp)
      CGEMMX(CDT, CDT, g->prec, g->KcG, cols, g->Og, J->wp + grp * g->Og * g->KcG, 1, g->KcG,
             (const char*)(gt + grp * g->Og * cols), cols, 1, (CT)0, col + grp * g->KcG * cols, cols, 1);
    for (int64_t s = 0; s < nn; ++s) {
      memset(acc, 0, (size_t)(g->C * SS) * sizeof(CT));
      CFN(col2im_tab)(g, col + s * g->P, so, g->P, acc, cols);
      CFN(store_planes)(g, acc, (CT*)g->xd + (n0 + s) * g->xs[0]);
    }
  }
done:
  conv_free(col); conv_free(gt); conv_free(acc); conv_free(xo); conv_tile_free(&t);
}

static void CFN(bwd_weight_group_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  const int64_t wcols = g->ns * g->P;
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  CT* col = conv_alloc((size_t)(g->C * g->KK * wcols) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * wcols) * sizeof(CT));
  int64_t* xo = conv_alloc((size_t)(g->KK * g->P) * sizeof(int64_t));
  if (!col || !gt || !xo || conv_tile_alloc(&t, g->P)) { J->oom = 1; goto done; }
  conv_tile_set(g, &t, 0);
  int xo_ready = 0;
  for (int64_t k = begin; k < end; ++k) {
    CT* acc = J->acc + k * g->O * g->KcG;
    int64_t u1 = TPU_MIN(J->nunits, (k + 1) * J->nunits_per_chunk);
    for (int64_t u = k * J->nunits_per_chunk; u < u1; ++u) {
      const int64_t n0 = u * g->ns, nn = TPU_MIN(g->ns, g->N - n0), cols = nn * g->P;
      for (int64_t s = 0; s < nn; ++s)
        CFN(im2col_sample)(g, g->xd + (n0 + s) * g->xs[0] * g->xes, &t, xo, &xo_ready, col + s * g->P, cols);
      CFN(gather_gy)(g, &t, n0, nn, gt);
      /* acc_g (Og, KcG) += gy_g (Og, cols) @ col_g^T (cols, KcG) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMMX(CDT, CDT, g->prec, g->Og, g->KcG, cols, (const char*)(gt + grp * g->Og * cols), cols, 1,
               (const char*)(col + grp * g->KcG * cols), 1, cols, (CT)1, acc + grp * g->Og * g->KcG, g->KcG, 1);
    }
  }
done:
  conv_free(col); conv_free(gt); conv_free(xo); conv_tile_free(&t);
}

/* ---- channels-last variants (g->cl): col (pt, C*KK) with columns ordered (group, kk, cg);
 * weights packed (O, KK, Cg); gy tiles (pt, O). */
static void CFN(im2col_cl)(const conv_geo_t* g, const char* x, const conv_tile_t* t, CT* col) {
  int64_t CKK = g->C * g->KK, Cg = g->Cg;
  for (int64_t j = 0; j < t->pt; ++j) {
    CT* row = col + j * CKK;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      int64_t i0 = t->b0[j] + k0 * g->dl[0], i1 = t->b1[j] + k1 * g->dl[1], i2 = t->b2[j] + k2 * g->dl[2];
      int ok = (uint64_t)i0 < (uint64_t)g->S[0] && (uint64_t)i1 < (uint64_t)g->S[1] &&
               (uint64_t)i2 < (uint64_t)g->S[2];
      const int64_t src = i0 * g->xs[2] + i1 * g->xs[3] + i2 * g->xs[4];
      for (int64_t grp = 0; grp < g->G; ++grp) {
        CT* d = row + grp * g->KcG + kk * Cg;
        if (ok) CFN(ldrun)(d, x, src + grp * Cg, 1, Cg, g->xdt);
        else memset(d, 0, (size_t)Cg * sizeof(CT));
      }
    }
  }
}
/* acc (S0*S1*S2, C) += col (pt, C*KK) */
static void CFN(col2im_cl)(const conv_geo_t* g, const CT* col, const conv_tile_t* t, CT* acc) {
  int64_t CKK = g->C * g->KK, Cg = g->Cg;
  for (int64_t j = 0; j < t->pt; ++j) {
    const CT* row = col + j * CKK;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      int64_t i0 = t->b0[j] + k0 * g->dl[0], i1 = t->b1[j] + k1 * g->dl[1], i2 = t->b2[j] + k2 * g->dl[2];
      if ((uint64_t)i0 >= (uint64_t)g->S[0] || (uint64_t)i1 >= (uint64_t)g->S[1] ||
          (uint64_t)i2 >= (uint64_t)g->S[2])
        continue;
      CT* d = acc + ((i0 * g->S[1] + i1) * g->S[2] + i2) * g->C;
      for (int64_t grp = 0; grp < g->G; ++grp) {
        const CT* s = row + grp * g->KcG + kk * Cg;
        CT* dg = d + grp * Cg;
        for (int64_t c = 0; c < Cg; ++c) dg[c] += s[c];
      }
    }
  }
}
/* weight (O, Cg, *K) strided <-> wq (O, KK, Cg) contiguous */
static void CFN(pack_w_cl)(const conv_geo_t* g, const char* w, CT* wq, int unpack) {
  for (int64_t o = 0; o < g->O; ++o)
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      for (int64_t c = 0; c < g->Cg; ++c) {
        int64_t off = o * g->ws[0] + c * g->ws[1] + k0 * g->ws[2] + k1 * g->ws[3] + k2 * g->ws[4];
        if (unpack) ((CT*)w)[off] = wq[(o * g->KK + kk) * g->Cg + c];
        else wq[(o * g->KK + kk) * g->Cg + c] = CFN(ld1)(w, off, g->wdt);
      }
    }
}
/* gy tile (pt, O): in place in y when it flattens, else gathered into gt */
static const char* CFN(gy_tile_cl)(const conv_geo_t* g, const char* yn, const conv_tile_t* t, CT* gt,
                                   int64_t* rs, int64_t* cs, int64_t* es, int* dt) {
  if (g->y_direct) {
    *rs = g->yps; *cs = g->ys[1]; *es = g->yes; *dt = g->ydt;
    return yn + t->p0 * g->yps * g->yes;
  }
  for (int64_t j = 0; j < t->pt; ++j)
    for (int64_t o = 0; o < g->O; ++o) gt[j * g->O + o] = CFN(ld1)(yn, o * g->ys[1] + t->yoff[j], g->ydt);
  *rs = g->O; *cs = 1; *es = sizeof(CT); *dt = CDT;
  return (const char*)gt;
}

static void CFN(fwd_cl_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  int64_t CKK = g->C * g->KK;
  CT* col = conv_alloc((size_t)(CKK * g->Pt) * sizeof(CT));
  CT* ct = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  if (!col || !ct || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / g->ntiles, ti = u % g->ntiles;
    conv_tile_set(g, &t, ti);
    CFN(im2col_cl)(g, g->xd + n * g->xs[0] * g->xes, &t, col);
    CT* yn = (CT*)g->yd + n * g->ys[0];
    CT* C = g->y_direct ? yn + t.p0 * g->yps : ct; /* (pt, O) */
    int64_t c_rs = g->y_direct ? g->yps : g->O, c_cs = g->y_direct ? g->ys[1] : 1;
    /* y_g (pt, Og) = col_g (pt, KcG) @ wq_g^T (KcG, Og) */
    for (int64_t grp = 0; grp < g->G; ++grp)
      CGEMMX(CDT, CDT, g->prec, t.pt, g->Og, g->KcG, col + grp * g->KcG, CKK, 1, J->wp + grp * g->Og * g->KcG, 1,
             g->KcG, (CT)0, C + grp * g->Og * c_cs, c_rs, c_cs);
    if (!g->y_direct)
      for (int64_t j = 0; j < t.pt; ++j)
        for (int64_t o = 0; o < g->O; ++o) yn[o * g->ys[1] + t.yoff[j]] = ct[j * g->O + o];
  }
done:
  conv_free(col); conv_free(ct); conv_tile_free(&t);
}

static void CFN(bwd_input_cl_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  int64_t SS = g->S[0] * g->S[1] * g->S[2], CKK = g->C * g->KK;
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  CT* col = conv_alloc((size_t)(CKK * g->Pt) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  CT* acc = conv_alloc((size_t)(g->C * SS) * sizeof(CT));
  if (!col || !gt || !acc || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  for (int64_t n = begin; n < end; ++n) {
    memset(acc, 0, (size_t)(g->C * SS) * sizeof(CT));
    const char* yn = g->yd + n * g->ys[0] * g->yes;
    for (int64_t ti = 0; ti < g->ntiles; ++ti) {
      conv_tile_set(g, &t, ti);
      int64_t a_rs, a_cs, a_es;
      int adt;
      const char* A = CFN(gy_tile_cl)(g, yn, &t, gt, &a_rs, &a_cs, &a_es, &adt);
      /* col_g (pt, KcG) = gy_g (pt, Og) @ wq_g (Og, KcG) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMMX(adt, CDT, g->prec, t.pt, g->KcG, g->Og, A + grp * g->Og * a_cs * a_es, a_rs, a_cs,
               J->wp + grp * g->Og * g->KcG, g->KcG, 1, (CT)0, col + grp * g->KcG, CKK, 1);
      CFN(col2im_cl)(g, col, &t, acc);
    }
    CT* xn = (CT*)g->xd + n * g->xs[0];
    for (int64_t s = 0; s < SS; ++s) {
      int64_t s0 = s / (g->S[1] * g->S[2]), s1 = (s / g->S[2]) % g->S[1], s2 = s % g->S[2];
      CT* xs = xn + s0 * g->xs[2] + s1 * g->xs[3] + s2 * g->xs[4];
      for (int64_t c = 0; c < g->C; ++c) xs[c * g->xs[1]] = acc[s * g->C + c];
    }
  }
done:
  conv_free(col); conv_free(gt); conv_free(acc); conv_tile_free(&t);
}

static void CFN(bwd_weight_cl_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  int64_t CKK = g->C * g->KK;
  conv_tile_t t = {0}; /* b0 NULL until conv_tile_alloc: the OOM path frees it */
  CT* col = conv_alloc((size_t)(CKK * g->Pt) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  if (!col || !gt || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  for (int64_t k = begin; k < end; ++k) {
    CT* acc = J->acc + k * g->O * g->KcG; /* (O, KK, Cg) */
    int64_t u1 = TPU_MIN(J->nunits, (k + 1) * J->nunits_per_chunk);
    for (int64_t u = k * J->nunits_per_chunk; u < u1; ++u) {
      int64_t n = u / g->ntiles, ti = u % g->ntiles;
      conv_tile_set(g, &t, ti);
      CFN(im2col_cl)(g, g->xd + n * g->xs[0] * g->xes, &t, col);
      int64_t a_rs, a_cs, a_es;
      int adt;
      const char* A = CFN(gy_tile_cl)(g, g->yd + n * g->ys[0] * g->yes, &t, gt, &a_rs, &a_cs, &a_es, &adt);
      /* acc_g (Og, KcG) += gy_g^T (Og, pt) @ col_g (pt, KcG) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMMX(adt, CDT, g->prec, g->Og, g->KcG, t.pt, A + grp * g->Og * a_cs * a_es, a_cs, a_rs,
               col + grp * g->KcG, CKK, 1, (CT)1, acc + grp * g->Og * g->KcG, g->KcG, 1);
    }
  }
done:
  conv_free(col); conv_free(gt); conv_tile_free(&t);
}

/* weight gradient: acc[i] = ((acc[i] + acc[M + i]) + acc[2M + i]) + ... (the per-chunk partial sums in chunk
 * order, as one thread adds them) for blocks [begin, end) of BW_SUM_BLOCK elements */
typedef struct { CT* acc; int64_t M, nchunks; } CFN(bw_sum_t);
static void CFN(bw_sum_worker)(void* ctx, int64_t begin, int64_t end) {
  const CFN(bw_sum_t)* S = ctx;
  const int64_t i0 = begin * BW_SUM_BLOCK, i1 = TPU_MIN(S->M, end * BW_SUM_BLOCK);
  for (int64_t k = 1; k < S->nchunks; ++k) {
    const CT* src = S->acc + k * S->M;
    for (int64_t i = i0; i < i1; ++i) S->acc[i] += src[i];
  }
}

/* 1x1 maps and kernels (ResNet's last stage once conv_crop_taps dropped the padding taps): per group one GEMM on
 * the views as they are, (N, Cg) x (Cg, Og) and its transposes, no packing or per-sample copies */
static void CFN(conv_run_pointwise)(int kind, const conv_geo_t* g) {
  for (int64_t grp = 0; grp < g->G; ++grp) {
    const char* x = g->xd + grp * g->Cg * g->xs[1] * g->xes;
    const char* w = g->wd + grp * g->Og * g->ws[0] * (int64_t)tpu_dtype_size(g->wdt);
    const char* y = g->yd + grp * g->Og * g->ys[1] * g->yes;
    if (kind == TPU_HOST_CONV_FWD) /* y (N, Og) = x (N, Cg) @ w^T (Cg, Og) */
      CGEMMX(g->xdt, g->wdt, g->prec, g->N, g->Og, g->Cg, x, g->xs[0], g->xs[1], w, g->ws[1], g->ws[0], (CT)0,
             (CT*)(void*)y, g->ys[0], g->ys[1]);
    else if (kind == TPU_HOST_CONV_BWD_INPUT) /* gx (N, Cg) = gy (N, Og) @ w (Og, Cg) */
      CGEMMX(g->ydt, g->wdt, g->prec, g->N, g->Cg, g->Og, y, g->ys[0], g->ys[1], w, g->ws[0], g->ws[1], (CT)0,
             (CT*)(void*)x, g->xs[0], g->xs[1]);
    else /* gw (Og, Cg) = gy^T (Og, N) @ x (N, Cg) */
      CGEMMX(g->ydt, g->xdt, g->prec, g->Og, g->Cg, g->N, y, g->ys[1], g->ys[0], x, g->xs[0], g->xs[1], (CT)0,
             (CT*)(void*)w, g->ws[0], g->ws[1]);
  }
}

static tpu_status_t CFN(conv_run)(int kind, conv_geo_t* g) {
  CFN(conv_job_t) J = {.g = g};
  tpu_status_t st = TPU_OK;
  int nth = tpu_pool_num_threads();
  if (g->P == 1 && g->KK == 1 && g->S[0] * g->S[1] * g->S[2] == 1) {
    CFN(conv_run_pointwise)(kind, g);
    return TPU_OK;
  }
  if (kind == TPU_HOST_CONV_FWD || kind == TPU_HOST_CONV_BWD_INPUT) {
    CT* wp = conv_alloc((size_t)(g->O * g->KcG) * sizeof(CT));
    if (!wp) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a convolution weight");
    if (g->cl) CFN(pack_w_cl)(g, g->wd, wp, 0);
    else CFN(pack_w)(g, g->wd, wp);
    J.wp = wp;
    /* units are independent (each writes its own outputs): taken dynamically, a few per thread */
    const int64_t ngroups = (g->N + g->ns - 1) / g->ns;
    if (kind == TPU_HOST_CONV_FWD && g->ns > 1)
      tpu_pool_parallel_for_dynamic(ngroups, 1, CFN(fwd_group_worker), &J);
    else if (kind == TPU_HOST_CONV_FWD)
      tpu_pool_parallel_for_dynamic(g->N * g->ntiles, 1, g->cl ? CFN(fwd_cl_worker) : CFN(fwd_worker), &J);
    else if (g->ns > 1)
      tpu_pool_parallel_for_dynamic(ngroups, 1, CFN(bwd_input_group_worker), &J);
    else
      tpu_pool_parallel_for_dynamic(g->N, 1, g->cl ? CFN(bwd_input_cl_worker) : CFN(bwd_input_worker), &J);
    conv_free(wp);
  } else {
    int64_t nunits = g->ns > 1 ? (g->N + g->ns - 1) / g->ns : g->N * g->ntiles;
    int64_t nchunks = TPU_MAX(1, TPU_MIN((int64_t)nth, nunits));
    J.nunits = nunits;
    J.nunits_per_chunk = (nunits + nchunks - 1) / nchunks;
    J.acc = conv_alloc((size_t)(nchunks * g->O * g->KcG) * sizeof(CT));
    if (!J.acc) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a convolution gradient");
    memset(J.acc, 0, (size_t)(nchunks * g->O * g->KcG) * sizeof(CT));
    if (nunits > 0)
      tpu_pool_parallel_for(nchunks, 1, g->ns > 1 ? CFN(bwd_weight_group_worker)
                                        : g->cl ? CFN(bwd_weight_cl_worker) : CFN(bwd_weight_worker), &J);
    CFN(bw_sum_t) S = {.acc = J.acc, .M = g->O * g->KcG, .nchunks = nchunks};
    if (nchunks > 1) /* blocks of BW_SUM_BLOCK elements, 4+ blocks per pool chunk */
      tpu_pool_parallel_for((S.M + BW_SUM_BLOCK - 1) / BW_SUM_BLOCK, 4, CFN(bw_sum_worker), &S);
    CT* wd = (CT*)g->wd;
    if (g->cl) {
      CFN(pack_w_cl)(g, (char*)wd, J.acc, 1);
    } else if (conv_w_contig(g)) {
      memcpy(wd, J.acc, (size_t)S.M * sizeof(CT));
    } else {
      const CT* a = J.acc; /* (O, Cg, K0, K1, K2) in order, by counters (no division per element) */
      for (int64_t o = 0; o < g->O; ++o)
        for (int64_t c = 0; c < g->Cg; ++c)
          for (int64_t k0 = 0; k0 < g->K[0]; ++k0)
            for (int64_t k1 = 0; k1 < g->K[1]; ++k1) {
              CT* wr = wd + o * g->ws[0] + c * g->ws[1] + k0 * g->ws[2] + k1 * g->ws[3];
              for (int64_t k2 = 0; k2 < g->K[2]; ++k2) wr[k2 * g->ws[4]] = *a++;
            }
    }
    conv_free(J.acc);
  }
  if (J.oom) st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries");
  return st;
}

#undef CFN
#undef CJOIN
#undef CJOIN2
