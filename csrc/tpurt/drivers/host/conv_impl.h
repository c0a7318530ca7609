/* conv_impl.h — the optimized convolution kernels for one element type, included by conv.c with
 * CT (float/double), CSUF (name suffix) and CGEMM (tpu_host_sgemm/dgemm) defined. */

#define CJOIN2(a, b) a##_##b
#define CJOIN(a, b) CJOIN2(a, b)
#define CFN(name) CJOIN(name, CSUF)

/* im2col of sample x (at n) for tile positions j < pt: col (C*KK, pt) row-major. Walks the
 * tile in runs along the innermost output dim, where the valid input range is known. */
static void CFN(im2col)(const conv_geo_t* g, const CT* x, const conv_tile_t* t, CT* col) {
  const int64_t* xs = g->xs;
  int64_t Q2 = g->Q[2], st2 = g->st[2], xs4 = xs[4];
  for (int64_t c = 0; c < g->C; ++c) {
    const CT* xc = x + c * xs[1];
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      int64_t o0 = k0 * g->dl[0], o1 = k1 * g->dl[1], o2 = k2 * g->dl[2], lo, hi;
      conv_inner_range(g, o2, &lo, &hi);
      CT* dst = col + (c * g->KK + kk) * t->pt;
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
          if (st2 == 1 && xs4 == 1) {
            if (b > a) memcpy(d + (a - q2), xc + sb + a, (size_t)(b - a) * sizeof(CT));
          } else {
            for (int64_t q = a; q < b; ++q) d[q - q2] = xc[sb + q * st2 * xs4];
          }
          for (int64_t q = b; q < q2 + len; ++q) d[q - q2] = (CT)0;
        }
        j += len;
      }
    }
  }
}

/* col2im: acc (C, S0*S1*S2) += col (C*KK, pt) scattered back to input positions. */
static void CFN(col2im)(const conv_geo_t* g, const CT* col, const conv_tile_t* t, CT* acc) {
  int64_t SS = g->S[0] * g->S[1] * g->S[2], Q2 = g->Q[2], st2 = g->st[2];
  for (int64_t c = 0; c < g->C; ++c) {
    CT* ac = acc + c * SS;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      int64_t o0 = k0 * g->dl[0], o1 = k1 * g->dl[1], o2 = k2 * g->dl[2], lo, hi;
      conv_inner_range(g, o2, &lo, &hi);
      const CT* src = col + (c * g->KK + kk) * t->pt;
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
static void CFN(pack_w)(const conv_geo_t* g, const CT* w, CT* wp) {
  for (int64_t o = 0; o < g->O; ++o)
    for (int64_t c = 0; c < g->Cg; ++c)
      for (int64_t kk = 0; kk < g->KK; ++kk) {
        int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
        wp[(o * g->Cg + c) * g->KK + kk] = w[o * g->ws[0] + c * g->ws[1] + k0 * g->ws[2] + k1 * g->ws[3] + k2 * g->ws[4]];
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
  conv_tile_t t;
  CT* col = conv_alloc((size_t)(g->C * g->KK * g->Pt) * sizeof(CT));
  CT* ct = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  if (!col || !ct || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  const CT* xd = (const CT*)g->xd;
  CT* yd = (CT*)g->yd;
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / g->ntiles, ti = u % g->ntiles;
    conv_tile_set(g, &t, ti);
    const CT* B = col; /* (C*KK, pt) */
    int64_t b_rs = t.pt, b_cs = 1;
    if (g->x_direct) {
      B = xd + n * g->xs[0] + t.p0 * g->xps; b_rs = g->xs[1]; b_cs = g->xps;
    } else {
      CFN(im2col)(g, xd + n * g->xs[0], &t, col);
    }
    CT* yn = yd + n * g->ys[0];
    CT* C = g->y_direct ? yn + t.p0 * g->yps : ct; /* (O, pt) */
    int64_t c_rs = g->y_direct ? g->ys[1] : t.pt, c_cs = g->y_direct ? g->yps : 1;
    for (int64_t grp = 0; grp < g->G; ++grp)
      CGEMM(g->Og, t.pt, g->KcG, (CT)1, J->wp + grp * g->Og * g->KcG, g->KcG, 1,
            B + grp * g->KcG * b_rs, b_rs, b_cs, (CT)0, C + grp * g->Og * c_rs, c_rs, c_cs);
    if (!g->y_direct)
      for (int64_t o = 0; o < g->O; ++o)
        for (int64_t j = 0; j < t.pt; ++j) yn[o * g->ys[1] + t.yoff[j]] = ct[o * t.pt + j];
  }
done:
  free(col); free(ct); conv_tile_free(&t);
}

/* backward input: unit = n (the scatter of overlapping windows stays in one thread) */
static void CFN(bwd_input_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  int64_t SS = g->S[0] * g->S[1] * g->S[2];
  conv_tile_t t;
  CT* col = conv_alloc((size_t)(g->C * g->KK * g->Pt) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  CT* acc = conv_alloc((size_t)(g->C * SS) * sizeof(CT));
  if (!col || !gt || !acc || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  const CT* yd = (const CT*)g->yd;
  CT* xd = (CT*)g->xd;
  for (int64_t n = begin; n < end; ++n) {
    memset(acc, 0, (size_t)(g->C * SS) * sizeof(CT));
    const CT* yn = yd + n * g->ys[0];
    for (int64_t ti = 0; ti < g->ntiles; ++ti) {
      conv_tile_set(g, &t, ti);
      const CT* B = gt; /* gy tile (O, pt) */
      int64_t b_rs = t.pt, b_cs = 1;
      if (g->y_direct) {
        B = yn + t.p0 * g->yps; b_rs = g->ys[1]; b_cs = g->yps;
      } else {
        for (int64_t o = 0; o < g->O; ++o)
          for (int64_t j = 0; j < t.pt; ++j) gt[o * t.pt + j] = yn[o * g->ys[1] + t.yoff[j]];
      }
      /* col_g (KcG, pt) = wp_g^T (KcG, Og) @ gy_g (Og, pt) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMM(g->KcG, t.pt, g->Og, (CT)1, J->wp + grp * g->Og * g->KcG, 1, g->KcG,
              B + grp * g->Og * b_rs, b_rs, b_cs, (CT)0, col + grp * g->KcG * t.pt, t.pt, 1);
      CFN(col2im)(g, col, &t, acc);
    }
    CT* xn = xd + n * g->xs[0];
    for (int64_t c = 0; c < g->C; ++c)
      for (int64_t s = 0; s < SS; ++s) {
        int64_t s0 = s / (g->S[1] * g->S[2]), s1 = (s / g->S[2]) % g->S[1], s2 = s % g->S[2];
        xn[c * g->xs[1] + s0 * g->xs[2] + s1 * g->xs[3] + s2 * g->xs[4]] = acc[c * SS + s];
      }
  }
done:
  free(col); free(gt); free(acc); conv_tile_free(&t);
}

/* backward weight: chunk k sums units [k*per, (k+1)*per) into its own (O, KcG) */
static void CFN(bwd_weight_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  conv_tile_t t;
  CT* col = conv_alloc((size_t)(g->C * g->KK * g->Pt) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  if (!col || !gt || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  const CT* xd = (const CT*)g->xd;
  const CT* yd = (const CT*)g->yd;
  for (int64_t k = begin; k < end; ++k) {
    CT* acc = J->acc + k * g->O * g->KcG;
    int64_t u1 = TPU_MIN(J->nunits, (k + 1) * J->nunits_per_chunk);
    for (int64_t u = k * J->nunits_per_chunk; u < u1; ++u) {
      int64_t n = u / g->ntiles, ti = u % g->ntiles;
      conv_tile_set(g, &t, ti);
      const CT* X = col; /* im2col (C*KK, pt) */
      int64_t x_rs = t.pt, x_cs = 1;
      if (g->x_direct) {
        X = xd + n * g->xs[0] + t.p0 * g->xps; x_rs = g->xs[1]; x_cs = g->xps;
      } else {
        CFN(im2col)(g, xd + n * g->xs[0], &t, col);
      }
      const CT* yn = yd + n * g->ys[0];
      const CT* A = gt; /* gy tile (O, pt) */
      int64_t a_rs = t.pt, a_cs = 1;
      if (g->y_direct) {
        A = yn + t.p0 * g->yps; a_rs = g->ys[1]; a_cs = g->yps;
      } else {
        for (int64_t o = 0; o < g->O; ++o)
          for (int64_t j = 0; j < t.pt; ++j) gt[o * t.pt + j] = yn[o * g->ys[1] + t.yoff[j]];
      }
      /* acc_g (Og, KcG) += gy_g (Og, pt) @ col_g^T (pt, KcG) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMM(g->Og, g->KcG, t.pt, (CT)1, A + grp * g->Og * a_rs, a_rs, a_cs,
              X + grp * g->KcG * x_rs, x_cs, x_rs, (CT)1, acc + grp * g->Og * g->KcG, g->KcG, 1);
    }
  }
done:
  free(col); free(gt); conv_tile_free(&t);
}

/* ---- channels-last variants (g->cl): col (pt, C*KK) with columns ordered (group, kk, cg);
 * weights packed (O, KK, Cg); gy tiles (pt, O). */
static void CFN(im2col_cl)(const conv_geo_t* g, const CT* x, const conv_tile_t* t, CT* col) {
  int64_t CKK = g->C * g->KK, Cg = g->Cg;
  for (int64_t j = 0; j < t->pt; ++j) {
    CT* row = col + j * CKK;
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      int64_t i0 = t->b0[j] + k0 * g->dl[0], i1 = t->b1[j] + k1 * g->dl[1], i2 = t->b2[j] + k2 * g->dl[2];
      int ok = (uint64_t)i0 < (uint64_t)g->S[0] && (uint64_t)i1 < (uint64_t)g->S[1] &&
               (uint64_t)i2 < (uint64_t)g->S[2];
      const CT* src = ok ? x + i0 * g->xs[2] + i1 * g->xs[3] + i2 * g->xs[4] : NULL;
      for (int64_t grp = 0; grp < g->G; ++grp) {
        CT* d = row + grp * g->KcG + kk * Cg;
        if (ok) memcpy(d, src + grp * Cg, (size_t)Cg * sizeof(CT));
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
static void CFN(pack_w_cl)(const conv_geo_t* g, const CT* w, CT* wq, int unpack) {
  for (int64_t o = 0; o < g->O; ++o)
    for (int64_t kk = 0; kk < g->KK; ++kk) {
      int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
      for (int64_t c = 0; c < g->Cg; ++c) {
        int64_t off = o * g->ws[0] + c * g->ws[1] + k0 * g->ws[2] + k1 * g->ws[3] + k2 * g->ws[4];
        if (unpack) ((CT*)w)[off] = wq[(o * g->KK + kk) * g->Cg + c];
        else wq[(o * g->KK + kk) * g->Cg + c] = w[off];
      }
    }
}
/* gy tile (pt, O): in place in y when it flattens, else gathered into gt */
static const CT* CFN(gy_tile_cl)(const conv_geo_t* g, const CT* yn, const conv_tile_t* t, CT* gt,
                                 int64_t* rs, int64_t* cs) {
  if (g->y_direct) { *rs = g->yps; *cs = g->ys[1]; return yn + t->p0 * g->yps; }
  for (int64_t j = 0; j < t->pt; ++j)
    for (int64_t o = 0; o < g->O; ++o) gt[j * g->O + o] = yn[o * g->ys[1] + t->yoff[j]];
  *rs = g->O; *cs = 1;
  return gt;
}

static void CFN(fwd_cl_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  conv_tile_t t;
  int64_t CKK = g->C * g->KK;
  CT* col = conv_alloc((size_t)(CKK * g->Pt) * sizeof(CT));
  CT* ct = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  if (!col || !ct || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  for (int64_t u = begin; u < end; ++u) {
    int64_t n = u / g->ntiles, ti = u % g->ntiles;
    conv_tile_set(g, &t, ti);
    CFN(im2col_cl)(g, (const CT*)g->xd + n * g->xs[0], &t, col);
    CT* yn = (CT*)g->yd + n * g->ys[0];
    CT* C = g->y_direct ? yn + t.p0 * g->yps : ct; /* (pt, O) */
    int64_t c_rs = g->y_direct ? g->yps : g->O, c_cs = g->y_direct ? g->ys[1] : 1;
    /* y_g (pt, Og) = col_g (pt, KcG) @ wq_g^T (KcG, Og) */
    for (int64_t grp = 0; grp < g->G; ++grp)
      CGEMM(t.pt, g->Og, g->KcG, (CT)1, col + grp * g->KcG, CKK, 1, J->wp + grp * g->Og * g->KcG, 1, g->KcG,
            (CT)0, C + grp * g->Og * c_cs, c_rs, c_cs);
    if (!g->y_direct)
      for (int64_t j = 0; j < t.pt; ++j)
        for (int64_t o = 0; o < g->O; ++o) yn[o * g->ys[1] + t.yoff[j]] = ct[j * g->O + o];
  }
done:
  free(col); free(ct); conv_tile_free(&t);
}

static void CFN(bwd_input_cl_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  int64_t SS = g->S[0] * g->S[1] * g->S[2], CKK = g->C * g->KK;
  conv_tile_t t;
  CT* col = conv_alloc((size_t)(CKK * g->Pt) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  CT* acc = conv_alloc((size_t)(g->C * SS) * sizeof(CT));
  if (!col || !gt || !acc || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  for (int64_t n = begin; n < end; ++n) {
    memset(acc, 0, (size_t)(g->C * SS) * sizeof(CT));
    const CT* yn = (const CT*)g->yd + n * g->ys[0];
    for (int64_t ti = 0; ti < g->ntiles; ++ti) {
      conv_tile_set(g, &t, ti);
      int64_t a_rs, a_cs;
      const CT* A = CFN(gy_tile_cl)(g, yn, &t, gt, &a_rs, &a_cs);
      /* col_g (pt, KcG) = gy_g (pt, Og) @ wq_g (Og, KcG) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMM(t.pt, g->KcG, g->Og, (CT)1, A + grp * g->Og * a_cs, a_rs, a_cs, J->wp + grp * g->Og * g->KcG,
              g->KcG, 1, (CT)0, col + grp * g->KcG, CKK, 1);
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
  free(col); free(gt); free(acc); conv_tile_free(&t);
}

static void CFN(bwd_weight_cl_worker)(void* ctx, int64_t begin, int64_t end) {
  CFN(conv_job_t)* J = ctx;
  const conv_geo_t* g = J->g;
  int64_t CKK = g->C * g->KK;
  conv_tile_t t;
  CT* col = conv_alloc((size_t)(CKK * g->Pt) * sizeof(CT));
  CT* gt = conv_alloc((size_t)(g->O * g->Pt) * sizeof(CT));
  if (!col || !gt || conv_tile_alloc(&t, g->Pt)) { J->oom = 1; goto done; }
  for (int64_t k = begin; k < end; ++k) {
    CT* acc = J->acc + k * g->O * g->KcG; /* (O, KK, Cg) */
    int64_t u1 = TPU_MIN(J->nunits, (k + 1) * J->nunits_per_chunk);
    for (int64_t u = k * J->nunits_per_chunk; u < u1; ++u) {
      int64_t n = u / g->ntiles, ti = u % g->ntiles;
      conv_tile_set(g, &t, ti);
      CFN(im2col_cl)(g, (const CT*)g->xd + n * g->xs[0], &t, col);
      int64_t a_rs, a_cs;
      const CT* A = CFN(gy_tile_cl)(g, (const CT*)g->yd + n * g->ys[0], &t, gt, &a_rs, &a_cs);
      /* acc_g (Og, KcG) += gy_g^T (Og, pt) @ col_g (pt, KcG) */
      for (int64_t grp = 0; grp < g->G; ++grp)
        CGEMM(g->Og, g->KcG, t.pt, (CT)1, A + grp * g->Og * a_cs, a_cs, a_rs, col + grp * g->KcG, CKK, 1,
              (CT)1, acc + grp * g->Og * g->KcG, g->KcG, 1);
    }
  }
done:
  free(col); free(gt); conv_tile_free(&t);
}

static tpu_status_t CFN(conv_run)(int kind, conv_geo_t* g) {
  CFN(conv_job_t) J = {.g = g};
  tpu_status_t st = TPU_OK;
  int nth = tpu_pool_num_threads();
  if (kind == TPU_HOST_CONV_FWD || kind == TPU_HOST_CONV_BWD_INPUT) {
    CT* wp = conv_alloc((size_t)(g->O * g->KcG) * sizeof(CT));
    if (!wp) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a convolution weight");
    if (g->cl) CFN(pack_w_cl)(g, (const CT*)g->wd, wp, 0);
    else CFN(pack_w)(g, (const CT*)g->wd, wp);
    J.wp = wp;
    if (kind == TPU_HOST_CONV_FWD)
      tpu_pool_parallel_for(g->N * g->ntiles, 1, g->cl ? CFN(fwd_cl_worker) : CFN(fwd_worker), &J);
    else
      tpu_pool_parallel_for(g->N, 1, g->cl ? CFN(bwd_input_cl_worker) : CFN(bwd_input_worker), &J);
    free(wp);
  } else {
    int64_t nunits = g->N * g->ntiles;
    int64_t nchunks = TPU_MAX(1, TPU_MIN((int64_t)nth, nunits));
    J.nunits = nunits;
    J.nunits_per_chunk = (nunits + nchunks - 1) / nchunks;
    J.acc = conv_alloc((size_t)(nchunks * g->O * g->KcG) * sizeof(CT));
    if (!J.acc) return TPU_ERR(OUT_OF_MEMORY, "host: out of memory for a convolution gradient");
    memset(J.acc, 0, (size_t)(nchunks * g->O * g->KcG) * sizeof(CT));
    if (nunits > 0)
      tpu_pool_parallel_for(nchunks, 1, g->cl ? CFN(bwd_weight_cl_worker) : CFN(bwd_weight_worker), &J);
    int64_t M = g->O * g->KcG;
    for (int64_t k = 1; k < nchunks; ++k)
      for (int64_t i = 0; i < M; ++i) J.acc[i] += J.acc[k * M + i];
    CT* wd = (CT*)g->wd;
    if (g->cl) {
      CFN(pack_w_cl)(g, wd, J.acc, 1);
    } else {
      for (int64_t o = 0; o < g->O; ++o)
        for (int64_t c = 0; c < g->Cg; ++c)
          for (int64_t kk = 0; kk < g->KK; ++kk) {
            int64_t k0 = kk / (g->K[1] * g->K[2]), k1 = (kk / g->K[2]) % g->K[1], k2 = kk % g->K[2];
            wd[o * g->ws[0] + c * g->ws[1] + k0 * g->ws[2] + k1 * g->ws[3] + k2 * g->ws[4]] =
                J.acc[(o * g->Cg + c) * g->KK + kk];
          }
    }
    free(J.acc);
  }
  if (J.oom) st = TPU_ERR(OUT_OF_MEMORY, "host: out of memory for convolution temporaries");
  return st;
}

#undef CFN
#undef CJOIN
#undef CJOIN2
