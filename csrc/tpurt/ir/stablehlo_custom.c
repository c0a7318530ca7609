/* stablehlo_custom.c — custom_call targets expanded into plain StableHLO, computing what
 * the host driver's fused kernels compute (drivers/host/attention.h, conv.h, pool.c, scan.c):
 *   ATTENTION      softmax(q k^T * scale + bias, causal mask) v, with the row logsumexp
 *   ATTENTION_BWD  dq | dk | dv from recomputed probabilities (flat result)
 *   CONV_BWD_INPUT / CONV_BWD_WEIGHT  as convolutions (dilated input / swapped roles)
 *   POOL_ARGMAX    (stablehlo_ops.c)   LOGCUMSUMEXP  a scan with a logaddexp region in f64
 *   CHANNEL_STATS / CHANNEL_AFFINE  reduces (f64) and broadcast multiply-adds
 *   ROWS_SOFTMAX(_BWD)  max / exp / sum / divide (or log) along dim 1 of [A, N, I]
 *   ROWS_LAYER_NORM(_BWD)  broadcast multiply-adds and row sums over [M, N]
 *   GELU(_BWD)     x (1 + erf(x / sqrt 2)) / 2 and its derivative times g
 *   SILU(_BWD)     x logistic(x) and its derivative times g
 *   LERP           the two-sided lerp formula and a select
 *   ADDC           self + (value t1) * t2 or / t2
 *   COL_SUMS       reduces over dim 0 (the layer-norm pair concatenated)
 *   GROUP_NORM_STATS / GROUP_NORM / GROUP_NORM_SUMS / GROUP_NORM_BWD  f64 reduces over [N, G, Cg, I] and the
 *                  per (n, c) coefficient formulas of the host kernels in the statistics' dtype
 *   HISTC_EDGES    the widened range with chlo.next_after; NaN edges where the host raises (no StableHLO form)
 *   EMBEDDING_BAG(_BWD)  bags from a prefix sum of ones at the offsets, gathers and scatter-adds of rows (dump row
 *                  for skipped ids; what the host raises on is dropped instead)
 * TOPK, UPSAMPLE(_BWD) and POOL_BWD have no lowering emitting them: they are reported as UNSUPPORTED. */
#include <float.h>

#include "ir/stablehlo_impl.h"

#define F32 TPU_DTYPE_F32

static int dot4(shlo_t* P, int a, int b, int64_t ca, int64_t cb, int64_t m, int64_t n) {
  /* [B, H, ., .] x [B, H, ., .] contracting dim ca of a with cb of b -> [B, H, m, n] */
  const tpu_ir_type_t* ta = shlo_type(P, a);
  int64_t bd[2] = {0, 1}, dims[4] = {ta->dims[0], ta->dims[1], m, n};
  tpu_ir_type_t rt = shlo_ty(F32, 4, dims);
  return shlo_dot(P, a, b, 2, bd, bd, 1, &ca, &cb, &rt);
}
/* [B, Hk, S, E] -> [B, Hk * G, S, E] (query head h reads kv head h / G) */
static int expand_heads(shlo_t* P, int x, int64_t G) {
  if (G == 1) return x;
  const tpu_ir_type_t t = *shlo_type(P, x);
  int64_t d5[5] = {t.dims[0], t.dims[1], G, t.dims[2], t.dims[3]}, bd[4] = {0, 1, 3, 4};
  int b = shlo_bcast(P, x, 5, d5, bd);
  int64_t d4[4] = {t.dims[0], t.dims[1] * G, t.dims[2], t.dims[3]};
  return shlo_reshape(P, b, 4, d4);
}
/* [B, Hk * G, S, E] -> summed over each group -> [B, Hk, S, E] */
static int reduce_heads(shlo_t* P, int x, int64_t G) {
  if (G == 1) return x;
  const tpu_ir_type_t t = *shlo_type(P, x);
  int64_t d5[5] = {t.dims[0], t.dims[1] / G, G, t.dims[2], t.dims[3]}, fl[5] = {0, 0, 1, 0, 0};
  return shlo_reduce(P, TPU_IR_MONOID_SUM, shlo_reshape(P, x, 5, d5), fl);
}
/* masked, scaled, biased scores [B, Hq, T, S] */
static int scores(shlo_t* P, int q, int k, int bias, int scale, int causal) {
  const tpu_ir_type_t* tq = shlo_type(P, q);
  int64_t T = tq->dims[2], S = shlo_type(P, k)->dims[2];
  int s = dot4(P, q, k, 3, 3, T, S);
  const tpu_ir_type_t ts = *shlo_type(P, s);
  s = shlo_bin(P, "stablehlo.multiply", s, shlo_bcast(P, scale, 4, ts.dims, NULL));
  if (bias >= 0) s = shlo_bin(P, "stablehlo.add", s, bias);
  if (causal) { /* key j visible to query i iff j <= i */
    tpu_ir_type_t ti = ts; ti.dtype = TPU_DTYPE_I64;
    int vis = shlo_cmp(P, TPU_IR_CMP_LE, shlo_iota(P, &ti, 3), shlo_iota(P, &ti, 2));
    s = shlo_select(P, vis, s, shlo_const_like(P, s, F32, -INFINITY));
  }
  return s;
}

static int attention(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  int causal = (int)(op->i1 & 1), has_bias = (op->i1 & 2) != 0;
  int bwd = op->i0 == TPU_IR_CUSTOM_ATTENTION_BWD;
  int base = bwd ? 1 : 0;
  if (n != base + 3 + (bwd ? 2 : 0) + has_bias + 1) return shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: attention operands"));
  int q = in[base], k = in[base + 1], v = in[base + 2];
  int bias = has_bias ? in[n - 2] : -1, scale = in[n - 1];
  const tpu_ir_type_t tq = *shlo_type(P, q), tk = *shlo_type(P, k), tv = *shlo_type(P, v);
  int64_t B = tq.dims[0], Hq = tq.dims[1], T = tq.dims[2], E = tq.dims[3];
  int64_t Hk = tk.dims[1], S = tk.dims[2], Ev = tv.dims[3], G = Hk ? Hq / Hk : 1;
  int ke = expand_heads(P, k, G), ve = expand_heads(P, v, G);
  int s = scores(P, q, ke, bias, scale, causal);
  int64_t fl[4] = {0, 0, 0, 1}, bd3[3] = {0, 1, 2};
  const tpu_ir_type_t ts = *shlo_type(P, s);
  if (!bwd) {
    int m = shlo_reduce(P, TPU_IR_MONOID_MAX, s, fl);
    int minf = shlo_cmp(P, TPU_IR_CMP_EQ, m, shlo_const_like(P, m, F32, -INFINITY));
    int ms = shlo_select(P, minf, shlo_const_like(P, m, F32, 0), m); /* fully masked row */
    int e = shlo_un(P, "stablehlo.exponential", shlo_bin(P, "stablehlo.subtract", s, shlo_bcast(P, ms, 4, ts.dims, bd3)));
    int l = shlo_reduce(P, TPU_IR_MONOID_SUM, e, fl);
    int lz = shlo_cmp(P, TPU_IR_CMP_EQ, l, shlo_const_like(P, l, F32, 0));
    int ls = shlo_select(P, lz, shlo_const_like(P, l, F32, 1), l);
    int p = shlo_bin(P, "stablehlo.divide", e, shlo_bcast(P, ls, 4, ts.dims, bd3));
    int o = dot4(P, p, ve, 3, 2, T, Ev);
    int lse = shlo_bin(P, "stablehlo.add", ms, shlo_un(P, "stablehlo.log", l)); /* -inf when l = 0 */
    int64_t r4[4] = {B, Hq, T, 1};
    int parts[2] = {o, shlo_reshape(P, lse, 4, r4)};
    return shlo_concat(P, 2, parts, 3);
  }
  int dout = in[0], out = in[base + 3], lse = in[base + 4];
  int linf = shlo_cmp(P, TPU_IR_CMP_EQ, lse, shlo_const_like(P, lse, F32, -INFINITY));
  int lsafe = shlo_select(P, linf, shlo_const_like(P, lse, F32, 0), lse);
  int p = shlo_un(P, "stablehlo.exponential", shlo_bin(P, "stablehlo.subtract", s, shlo_bcast(P, lsafe, 4, ts.dims, bd3)));
  int dv = dot4(P, p, dout, 2, 2, S, Ev);                      /* [B, Hq, S, Ev] */
  int dp = dot4(P, dout, ve, 3, 3, T, S);                      /* [B, Hq, T, S] */
  int D = shlo_reduce(P, TPU_IR_MONOID_SUM, shlo_bin(P, "stablehlo.multiply", dout, out), fl);
  int ds = shlo_bin(P, "stablehlo.multiply", p, shlo_bin(P, "stablehlo.subtract", dp, shlo_bcast(P, D, 4, ts.dims, bd3)));
  int dq = dot4(P, ds, ke, 3, 2, T, E);
  int dk = dot4(P, ds, q, 2, 2, S, E);
  dq = shlo_bin(P, "stablehlo.multiply", dq, shlo_bcast(P, scale, 4, shlo_type(P, dq)->dims, NULL));
  dk = shlo_bin(P, "stablehlo.multiply", dk, shlo_bcast(P, scale, 4, shlo_type(P, dk)->dims, NULL));
  dk = reduce_heads(P, dk, G);
  dv = reduce_heads(P, dv, G);
  int64_t nq = B * Hq * T * E, nk = B * Hk * S * E, nv = B * Hk * S * Ev;
  int parts[3] = {shlo_reshape(P, dq, 1, &nq), shlo_reshape(P, dk, 1, &nk), shlo_reshape(P, dv, 1, &nv)};
  return shlo_concat(P, 3, parts, 0);
}

/* gx [N, C, *S] = input-gradient of conv(x, w): conv of gy dilated by the stride with the
 * spatially flipped kernel, in/out features swapped per group. */
static int conv_bwd_input_term(shlo_t* P, int gy, int w, void* ctx) {
  const tpu_ir_op_t* op = ctx;
  const tpu_ir_type_t* t = &op->type;
  int nsp = t->rank - 2;
  int64_t G = op->i1 ? op->i1 : 1;
  const tpu_ir_type_t tw = *shlo_type(P, w), tg = *shlo_type(P, gy);
  int64_t O = tw.dims[0], Cg = tw.dims[1], Og = O / G;
  int64_t d5[TPU_MAX_DIMS] = {G, Og, Cg}, perm[TPU_MAX_DIMS] = {0, 2, 1};
  for (int d = 0; d < nsp; ++d) { d5[3 + d] = tw.dims[2 + d]; perm[3 + d] = 3 + d; }
  int w5 = shlo_transpose(P, shlo_reshape(P, w, 3 + nsp, d5), perm);
  int64_t d4[TPU_MAX_DIMS] = {G * Cg, Og};
  for (int d = 0; d < nsp; ++d) d4[2 + d] = tw.dims[2 + d];
  int wr = shlo_reshape(P, w5, 2 + nsp, d4);
  int64_t rev[TPU_MAX_DIMS];
  for (int d = 0; d < nsp; ++d) rev[d] = 2 + d;
  int rv = shlo_begin(P, "stablehlo.reverse", 1, &wr);
  shlo_printf(P, " {dimensions = ");
  shlo_i64s(P, rev, nsp);
  shlo_printf(P, "}");
  wr = shlo_end(P, rv, 1, &wr, shlo_type(P, wr));
  int64_t pad[3][2], one[3] = {1, 1, 1};
  for (int d = 0; d < nsp; ++d) {
    int64_t K = tw.dims[2 + d], Q = tg.dims[2 + d], S = t->dims[2 + d];
    int64_t st = op->a[0][d], pd = op->a[1][d], dl = op->a[2][d];
    pad[d][0] = (K - 1) * dl - pd;
    pad[d][1] = S - (Q - 1) * st - 1 + pd;
  }
  return shlo_conv_general(P, gy, wr, "bf", "oi", "bf", nsp, one, (const int64_t(*)[2])pad, op->a[0], op->a[2], G, t);
}

/* gw [O, C/G, *K] = weight-gradient: x's batch dim contracted as the feature dim, per group. */
static int conv_bwd_weight_term(shlo_t* P, int x, int gy, void* ctx) {
  const tpu_ir_op_t* op = ctx;
  const tpu_ir_type_t* t = &op->type;
  int nsp = t->rank - 2;
  int64_t G = op->i1 ? op->i1 : 1;
  const tpu_ir_type_t tx = *shlo_type(P, x), tg = *shlo_type(P, gy);
  int64_t Cg = t->dims[1], Og = t->dims[0] / G;
  int64_t pad[3][2], one[3] = {1, 1, 1};
  for (int d = 0; d < nsp; ++d) {
    int64_t K = t->dims[2 + d], Q = tg.dims[2 + d], S = tx.dims[2 + d];
    int64_t st = op->a[0][d], pd = op->a[1][d], dl = op->a[2][d];
    pad[d][0] = pd;
    pad[d][1] = (K - 1) * dl + (Q - 1) * st + 1 - S - pd;
  }
  int parts[64];
  if (G > 64) return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: conv weight gradient with more than 64 groups"));
  tpu_ir_type_t rt = *t; rt.dims[0] = Og;
  for (int64_t g = 0; g < G; ++g) {
    int xg = G == 1 ? x : shlo_slice_dim(P, x, 1, g * Cg, (g + 1) * Cg);
    int yg = G == 1 ? gy : shlo_slice_dim(P, gy, 1, g * Og, (g + 1) * Og);
    parts[g] = shlo_conv_general(P, xg, yg, "fb", "io", "fb", nsp, op->a[2], (const int64_t(*)[2])pad, one, op->a[0], 1, &rt);
  }
  return shlo_concat(P, (int)G, parts, 0);
}

/* operands widened to the result dtype; f32 operands follow the op's matmul precision */
static int conv_bwd(shlo_t* P, const tpu_ir_op_t* op, int u, int v, shlo_prod_fn term) {
  int ct = op->type.dtype, f32 = shlo_type(P, u)->dtype == F32 && shlo_type(P, v)->dtype == F32;
  u = shlo_convert(P, u, ct); v = shlo_convert(P, v, ct);
  return shlo_with_precision(P, f32 ? op->prec : 0, u, v, term, (void*)op);
}

/* log(cumsum(exp(x))) along dim, as a scan with a stable logaddexp region, in f64 */
static int logcumsumexp(shlo_t* P, const tpu_ir_op_t* op, int x) {
  const tpu_ir_type_t tx = *shlo_type(P, x);
  int dim = (int)op->i1, r = tx.rank, dt = tx.dtype;
  int xc = shlo_convert(P, x, TPU_DTYPE_F64);
  tpu_ir_type_t t0 = shlo_ty(TPU_DTYPE_F64, 0, NULL);
  int init = shlo_const(P, &t0, -INFINITY, 0);
  int64_t n = tx.dims[dim];
  int in[2] = {xc, init};
  int w = shlo_begin(P, "stablehlo.reduce_window", 2, in);
  if (w < 0) return -1;
  int dts[2] = {TPU_DTYPE_F64, TPU_DTYPE_F64};
  int a = shlo_region_begin(P, 2, dts);
  if (a < 0) return -1;
  int mx = shlo_bin(P, "stablehlo.maximum", a, a + 1), mn = shlo_bin(P, "stablehlo.minimum", a, a + 1);
  int ninf = shlo_cmp(P, TPU_IR_CMP_EQ, mn, shlo_const(P, &t0, -INFINITY, 0));
  int d = shlo_select(P, ninf, shlo_const(P, &t0, -INFINITY, 0), shlo_bin(P, "stablehlo.subtract", mn, mx));
  int res = shlo_bin(P, "stablehlo.add", mx, shlo_un(P, "stablehlo.log_plus_one", shlo_un(P, "stablehlo.exponential", d)));
  res = shlo_select(P, ninf, mx, res);
  shlo_region_end(P, 1, &res);
  int64_t win[TPU_MAX_DIMS], one[TPU_MAX_DIMS], pad[TPU_MAX_DIMS][2];
  for (int k = 0; k < r; ++k) {
    win[k] = k == dim ? (n ? n : 1) : 1; one[k] = 1;
    pad[k][0] = k == dim && n ? n - 1 : 0; pad[k][1] = 0;
  }
  shlo_printf(P, " {");
  shlo_padding(P, (const int64_t(*)[2])pad, r);
  shlo_printf(P, ", window_dimensions = ");
  shlo_i64s(P, win, r);
  shlo_printf(P, ", window_strides = ");
  shlo_i64s(P, one, r);
  shlo_printf(P, "}");
  tpu_ir_type_t t = tx; t.dtype = TPU_DTYPE_F64;
  return shlo_convert(P, shlo_end(P, w, 2, in, &t), dt);
}

/* CHANNEL_STATS / CHANNEL_AFFINE (drivers/host/norm.h) over [A, B, I] views; [B] vectors
 * broadcast along dim 1; sums in f64 as the host kernel accumulates them */
static int chan_bcast(shlo_t* P, int vec, const tpu_ir_type_t* like) {
  int64_t bd[1] = {1};
  return shlo_bcast_to(P, vec, like, bd);
}
static int chan_sum(shlo_t* P, int x) { /* [A, B, I] f64 -> [1, B] */
  static const int64_t fl[3] = {1, 0, 1};
  int r = shlo_reduce(P, TPU_IR_MONOID_SUM, x, fl);
  if (r < 0) return -1;
  int64_t d2[2] = {1, shlo_type(P, r)->dims[0]};
  return shlo_reshape(P, r, 2, d2);
}
static int channel_stats(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  const tpu_ir_type_t tx = *shlo_type(P, in[0]);
  int dt = op->type.dtype, F64 = TPU_DTYPE_F64; /* f32 statistics of bf16 / f16 operands too */
  int r0, r1;
  if (n == 1) {
    int x = shlo_convert(P, in[0], F64);
    tpu_ir_type_t t64 = tx; t64.dtype = F64;
    int s0 = chan_sum(P, x);
    int cnt = shlo_const_like(P, s0, F64, (double)(tx.dims[0] * tx.dims[2]));
    r0 = shlo_bin(P, "stablehlo.divide", s0, cnt);
    int64_t d1[1] = {tx.dims[1]};
    int xc = shlo_bin(P, "stablehlo.subtract", x, chan_bcast(P, shlo_reshape(P, r0, 1, d1), &t64));
    r1 = shlo_bin(P, "stablehlo.divide", chan_sum(P, shlo_bin(P, "stablehlo.multiply", xc, xc)), cnt);
  } else {
    int g = shlo_convert(P, in[0], F64), x = shlo_convert(P, in[1], F64), m = shlo_convert(P, in[2], F64);
    tpu_ir_type_t t64 = tx; t64.dtype = F64;
    r0 = chan_sum(P, g);
    r1 = chan_sum(P, shlo_bin(P, "stablehlo.multiply", g, shlo_bin(P, "stablehlo.subtract", x, chan_bcast(P, m, &t64))));
  }
  int both[2] = {r0, r1};
  return shlo_convert(P, shlo_concat(P, 2, both, 0), dt);
}
static int channel_affine(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  tpu_ir_type_t tx = *shlo_type(P, in[0]);
  int two = n == 5, vdt = shlo_type(P, in[n - 1])->dtype; /* bf16 / f16 operands: f32 math, rounded once */
  int u = in[0], v = two ? in[1] : -1;
  if (tx.dtype != vdt) {
    u = shlo_convert(P, u, vdt);
    if (two) v = shlo_convert(P, v, vdt);
    tx.dtype = vdt;
  }
  int r = shlo_bin(P, "stablehlo.multiply", u, chan_bcast(P, in[two ? 2 : 1], &tx));
  if (two) r = shlo_bin(P, "stablehlo.add", r, shlo_bin(P, "stablehlo.multiply", v, chan_bcast(P, in[3], &tx)));
  r = shlo_bin(P, "stablehlo.add", r, chan_bcast(P, in[two ? 4 : 2], &tx));
  return vdt != op->type.dtype ? shlo_convert(P, r, op->type.dtype) : r;
}

/* ROWS_SOFTMAX / ROWS_SOFTMAX_BWD (drivers/host/rows.h) over [A, N, I], reducing dim 1 */
static int rows_back(shlo_t* P, int r, const tpu_ir_type_t* like) { /* [A, I] -> [A, N, I] */
  static const int64_t bd[2] = {0, 2};
  return shlo_bcast_to(P, r, like, bd);
}
static int rows_softmax(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  static const int64_t fl[3] = {0, 1, 0};
  const tpu_ir_type_t t = *shlo_type(P, in[0]);
  const int log = op->i1 != 0;
  if (op->i0 == TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD) { /* g - exp(y) sum g  |  y (g - sum g y) */
    int g = in[0], y = in[1];
    int s = shlo_reduce(P, TPU_IR_MONOID_SUM, log ? g : shlo_bin(P, "stablehlo.multiply", g, y), fl);
    if (log) return shlo_bin(P, "stablehlo.subtract", g, shlo_bin(P, "stablehlo.multiply", shlo_un(P, "stablehlo.exponential", y), rows_back(P, s, &t)));
    return shlo_bin(P, "stablehlo.multiply", y, shlo_bin(P, "stablehlo.subtract", g, rows_back(P, s, &t)));
  }
  int m = shlo_reduce(P, TPU_IR_MONOID_MAX, in[0], fl);
  int xs = shlo_bin(P, "stablehlo.subtract", in[0], rows_back(P, m, &t));
  int e = shlo_un(P, "stablehlo.exponential", xs);
  int s = shlo_reduce(P, TPU_IR_MONOID_SUM, e, fl);
  if (log) return shlo_bin(P, "stablehlo.subtract", xs, rows_back(P, shlo_un(P, "stablehlo.log", s), &t));
  return shlo_bin(P, "stablehlo.divide", e, rows_back(P, s, &t));
}

/* ROWS_LAYER_NORM(_BWD) (drivers/host/rows.h): [M] statistics broadcast along dim 0, [N] affine
 * vectors along dim 1 of [M, N] */
static int ln_vec(shlo_t* P, int v, const tpu_ir_type_t* like, int64_t d) { return shlo_bcast_to(P, v, like, &d); }
static int rows_layer_norm(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  const int bwd = op->i0 == TPU_IR_CUSTOM_ROWS_LAYER_NORM_BWD, nf = bwd ? 2 : 1, hw = (int)(op->i1 & 1);
  const tpu_ir_type_t t = *shlo_type(P, in[0]);
  int x = in[nf - 1], mean = ln_vec(P, in[nf], &t, 0), rstd = ln_vec(P, in[nf + 1], &t, 0);
  int xh = shlo_bin(P, "stablehlo.multiply", shlo_bin(P, "stablehlo.subtract", x, mean), rstd);
  if (!bwd) {
    int y = xh;
    if (hw) y = shlo_bin(P, "stablehlo.multiply", y, ln_vec(P, in[3], &t, 1));
    if (op->i1 & 2) y = shlo_bin(P, "stablehlo.add", y, ln_vec(P, in[3 + hw], &t, 1));
    return y;
  }
  static const int64_t fl[2] = {0, 1};
  int dxh = hw ? shlo_bin(P, "stablehlo.multiply", in[0], ln_vec(P, in[4], &t, 1)) : in[0];
  int inv_n = shlo_const_like(P, dxh, t.dtype, 1.0 / (double)t.dims[1]);
  int m1 = shlo_bin(P, "stablehlo.multiply", ln_vec(P, shlo_reduce(P, TPU_IR_MONOID_SUM, dxh, fl), &t, 0), inv_n);
  int m2 = shlo_bin(P, "stablehlo.multiply", ln_vec(P, shlo_reduce(P, TPU_IR_MONOID_SUM, shlo_bin(P, "stablehlo.multiply", dxh, xh), fl), &t, 0), inv_n);
  int inner = shlo_bin(P, "stablehlo.subtract", shlo_bin(P, "stablehlo.subtract", dxh, m1), shlo_bin(P, "stablehlo.multiply", xh, m2));
  return shlo_bin(P, "stablehlo.multiply", rstd, inner);
}

/* GELU(_BWD) (drivers/host/rows.h): x Phi(x), Phi = (1 + erf(x / sqrt 2)) / 2; g (Phi + x exp(-x^2 / 2) / sqrt(2 pi)) */
static int gelu(shlo_t* P, const tpu_ir_op_t* op, const int* in) {
  const int bwd = op->i0 == TPU_IR_CUSTOM_GELU_BWD, x = in[bwd];
  const tpu_ir_type_t t = *shlo_type(P, x);
  int z = shlo_bin(P, "stablehlo.multiply", x, shlo_const_like(P, x, t.dtype, 0.7071067811865476));
  int one = shlo_const_like(P, x, t.dtype, 1.0), half = shlo_const_like(P, x, t.dtype, 0.5);
  int cdf = shlo_bin(P, "stablehlo.multiply", half, shlo_bin(P, "stablehlo.add", one, shlo_un(P, "chlo.erf", z)));
  if (!bwd) return shlo_bin(P, "stablehlo.multiply", x, cdf);
  int h = shlo_bin(P, "stablehlo.multiply", shlo_const_like(P, x, t.dtype, -0.5), shlo_bin(P, "stablehlo.multiply", x, x));
  int pdf = shlo_bin(P, "stablehlo.multiply", shlo_const_like(P, x, t.dtype, 0.3989422804014327), shlo_un(P, "stablehlo.exponential", h));
  return shlo_bin(P, "stablehlo.multiply", in[0], shlo_bin(P, "stablehlo.add", cdf, shlo_bin(P, "stablehlo.multiply", x, pdf)));
}

/* SILU(_BWD) (drivers/host/rows.h): x s, s = logistic(x); g s (1 + x (1 - s)) */
static int silu(shlo_t* P, const tpu_ir_op_t* op, const int* in) {
  const int bwd = op->i0 == TPU_IR_CUSTOM_SILU_BWD, x = in[bwd];
  const tpu_ir_type_t t = *shlo_type(P, x);
  int s = shlo_un(P, "stablehlo.logistic", x);
  if (!bwd) return shlo_bin(P, "stablehlo.multiply", x, s);
  int one = shlo_const_like(P, x, t.dtype, 1.0);
  int d = shlo_bin(P, "stablehlo.add", one, shlo_bin(P, "stablehlo.multiply", x, shlo_bin(P, "stablehlo.subtract", one, s)));
  return shlo_bin(P, "stablehlo.multiply", shlo_bin(P, "stablehlo.multiply", in[0], s), d);
}

/* LERP (drivers/host/rows.h): |w| < 0.5 ? start + w (end - start) : end - (end - start) (1 - w) */
static int lerp(shlo_t* P, const int* in) {
  const tpu_ir_type_t t = *shlo_type(P, in[0]);
  int w = shlo_type(P, in[2])->rank == 0 ? shlo_bcast_to(P, in[2], &t, NULL) : in[2];
  int d = shlo_bin(P, "stablehlo.subtract", in[1], in[0]);
  int one = shlo_const_like(P, in[0], t.dtype, 1.0);
  int small = shlo_cmp(P, TPU_IR_CMP_LT, shlo_un(P, "stablehlo.abs", w), shlo_const_like(P, in[0], t.dtype, 0.5));
  int r1 = shlo_bin(P, "stablehlo.add", in[0], shlo_bin(P, "stablehlo.multiply", w, d));
  int r2 = shlo_bin(P, "stablehlo.subtract", in[1], shlo_bin(P, "stablehlo.multiply", d, shlo_bin(P, "stablehlo.subtract", one, w)));
  return shlo_select(P, small, r1, r2);
}

/* ADDC (drivers/host/rows.h): self + (value t1) * t2 or self + (value t1) / t2 */
static int addc(shlo_t* P, const tpu_ir_op_t* op, const int* in) {
  const tpu_ir_type_t t = *shlo_type(P, in[0]);
  int vt = shlo_bin(P, "stablehlo.multiply", shlo_bcast_to(P, in[3], &t, NULL), in[1]);
  return shlo_bin(P, "stablehlo.add", in[0], shlo_bin(P, op->i1 == 1 ? "stablehlo.divide" : "stablehlo.multiply", vt, in[2]));
}

/* COL_SUMS (drivers/host/rows.h): sums over dim 0 of [M, N]; the layer-norm pair stacked as [2, N] */
static int col_sums(shlo_t* P, const tpu_ir_op_t* op, const int* in) {
  static const int64_t fl[2] = {1, 0};
  if (op->i1 != 1) /* a bf16 / f16 operand sums its values widened to f32 (the result's dtype) */
    return shlo_reduce(P, TPU_IR_MONOID_SUM, shlo_type(P, in[0])->dtype == op->type.dtype ? in[0]
                                                 : shlo_convert(P, in[0], op->type.dtype), fl);
  const tpu_ir_type_t t = *shlo_type(P, in[0]);
  static const int64_t d0 = 0;
  int xh = shlo_bin(P, "stablehlo.multiply", shlo_bin(P, "stablehlo.subtract", in[1], shlo_bcast_to(P, in[2], &t, &d0)),
                    shlo_bcast_to(P, in[3], &t, &d0));
  int64_t d2[2] = {1, t.dims[1]};
  int r[2] = {shlo_reshape(P, shlo_reduce(P, TPU_IR_MONOID_SUM, shlo_bin(P, "stablehlo.multiply", in[0], xh), fl), 2, d2),
              shlo_reshape(P, shlo_reduce(P, TPU_IR_MONOID_SUM, in[0], fl), 2, d2)};
  return shlo_concat(P, 2, r, 0);
}

/* GROUP_NORM_STATS / GROUP_NORM / GROUP_NORM_SUMS / GROUP_NORM_BWD (drivers/host/norm.h) over x [N, C, I] with
 * [N, G] statistics: sums in f64 as the host kernels make them, the per (n, c) coefficients in the statistics'
 * dtype dt in the host's order (1 / sqrt, not rsqrt: the host divides) */
#define MUL(a, b) shlo_bin(P, "stablehlo.multiply", (a), (b))
#define ADD(a, b) shlo_bin(P, "stablehlo.add", (a), (b))
#define SUB(a, b) shlo_bin(P, "stablehlo.subtract", (a), (b))
static int gn_bng(shlo_t* P, int v, const int64_t* d4) { /* [N, G] -> [N, G, Cg, I] */
  static const int64_t bd[2] = {0, 1};
  return shlo_bcast(P, v, 4, d4, bd);
}
static int gn_bc(shlo_t* P, int v, const int64_t* d4) { /* [C] -> [N, G, Cg, I] */
  static const int64_t bd[2] = {1, 2};
  int64_t gc[2] = {d4[1], d4[2]};
  return shlo_bcast(P, shlo_reshape(P, v, 2, gc), 4, d4, bd);
}
static int gn_x4(shlo_t* P, int x, const int64_t* d4, int dtype) { /* [N, C, I] -> [N, G, Cg, I] in dtype */
  int r = shlo_reshape(P, x, 4, d4);
  return shlo_type(P, r)->dtype == dtype ? r : shlo_convert(P, r, dtype);
}
/* per (n, c) sums in f64 as [N, C]: sum g, sum g (x - mean) (reduced over [N, G, Cg, I], not CHANNEL_STATS' [1, N C, I]:
 * XLA sums the two shapes in different orders, f64 results a few ulp apart) */
static void gn_sums(shlo_t* P, int g, int x, int mean, const int64_t* d4, int* out_s1, int* out_s2) {
  static const int64_t fl[4] = {0, 0, 0, 1};
  const int F64 = TPU_DTYPE_F64;
  int g4 = gn_x4(P, g, d4, F64);
  int t = MUL(g4, SUB(gn_x4(P, x, d4, F64), gn_bng(P, shlo_convert(P, mean, F64), d4)));
  int64_t d2[2] = {d4[0], d4[1] * d4[2]};
  *out_s1 = shlo_reshape(P, shlo_reduce(P, TPU_IR_MONOID_SUM, g4, fl), 2, d2);
  *out_s2 = shlo_reshape(P, shlo_reduce(P, TPU_IR_MONOID_SUM, t, fl), 2, d2);
}
static int group_norm(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  const int tgt = (int)op->i0, bwd = tgt == TPU_IR_CUSTOM_GROUP_NORM_SUMS || tgt == TPU_IR_CUSTOM_GROUP_NORM_BWD;
  const int F64 = TPU_DTYPE_F64;
  const tpu_ir_type_t tx = *shlo_type(P, in[bwd]);
  const int64_t N = tx.dims[0], C = tx.dims[1], I = tx.dims[2];
  const int64_t G = tgt == TPU_IR_CUSTOM_GROUP_NORM_STATS ? op->type.dims[2] : shlo_type(P, in[bwd + 1])->dims[1];
  if (G < 1 || C % G) return shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: group norm groups"));
  const int64_t d4[4] = {N, G, C / G, I};
  const double inv = 1.0 / (double)(C / G * I);
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM_STATS) { /* not channel_stats over [1, N G, Cg I]: XLA's f64 sums differ (gn_sums) */
    const int dt = op->type.dtype;
    static const int64_t fl[4] = {0, 0, 1, 1};
    int x = gn_x4(P, in[0], d4, F64);
    int cnt = shlo_scalar_const(P, F64, (double)(C / G * I));
    int s = shlo_reduce(P, TPU_IR_MONOID_SUM, x, fl);
    int m = shlo_bin(P, "stablehlo.divide", s, shlo_bcast_to(P, cnt, shlo_type(P, s), NULL));
    int xc = SUB(x, gn_bng(P, m, d4));
    int q = shlo_reduce(P, TPU_IR_MONOID_SUM, MUL(xc, xc), fl);
    int v = shlo_bin(P, "stablehlo.divide", q, shlo_bcast_to(P, cnt, shlo_type(P, q), NULL));
    /* rstd in f64 from the variance rounded to dt, rounded to dt once (PyTorch CPU's f32 order; drivers/host/norm.c) */
    int vd = dt == F64 ? v : shlo_convert(P, shlo_convert(P, v, dt), F64);
    int r = shlo_bin(P, "stablehlo.divide", shlo_const_like(P, vd, F64, 1.0),
                     shlo_un(P, "stablehlo.sqrt", ADD(vd, shlo_bcast_to(P, in[1], shlo_type(P, vd), NULL))));
    if (dt != F64) r = shlo_convert(P, r, dt);
    int64_t d3[3] = {1, N, G};
    int both[2] = {shlo_reshape(P, dt == F64 ? m : shlo_convert(P, m, dt), 3, d3), shlo_reshape(P, r, 3, d3)};
    return shlo_concat(P, 2, both, 0);
  }
  const int dt = shlo_type(P, in[bwd + 1])->dtype;
  int mean = in[bwd + 1], rstd = in[bwd + 2];
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM_SUMS) {
    int s1, s2;
    gn_sums(P, in[0], in[1], mean, d4, &s1, &s2);
    static const int64_t f0[2] = {1, 0}, bd[2] = {0, 1};
    int64_t dnc[2] = {N, C}, d3n[3] = {1, N, C}, d31[3] = {1, 1, C};
    int r64 = shlo_reshape(P, shlo_bcast(P, shlo_convert(P, rstd, F64), 3, d4, bd), 2, dnc); /* [N, C] */
    int db = shlo_reduce(P, TPU_IR_MONOID_SUM, s1, f0), dw = shlo_reduce(P, TPU_IR_MONOID_SUM, MUL(s2, r64), f0);
    int rows[2];
    int p0[2] = {shlo_reshape(P, s1, 3, d3n), shlo_reshape(P, db, 3, d31)};
    int p1[2] = {shlo_reshape(P, s2, 3, d3n), shlo_reshape(P, dw, 3, d31)};
    rows[0] = shlo_concat(P, 2, p0, 1);
    rows[1] = shlo_concat(P, 2, p1, 1);
    int r = shlo_concat(P, 2, rows, 0);
    return dt == F64 ? r : shlo_convert(P, r, dt);
  }
  const int hw = (int)(op->i1 & 1);
  int w = hw ? in[bwd + 3] : -1;
  int r4 = gn_bng(P, rstd, d4), m4 = gn_bng(P, mean, d4);
  int64_t d3[3] = {N, C, I};
  if (tgt == TPU_IR_CUSTOM_GROUP_NORM) { /* y = x a + c, a = rstd w, c = -(mean a) + b */
    int a = w >= 0 ? MUL(r4, gn_bc(P, w, d4)) : r4;
    int c = shlo_un(P, "stablehlo.negate", MUL(m4, a));
    if (op->i1 & 2) c = ADD(c, gn_bc(P, in[3 + hw], d4));
    int y = ADD(MUL(gn_x4(P, in[0], d4, dt), a), c);
    y = shlo_reshape(P, y, 3, d3);
    return tx.dtype == dt ? y : shlo_convert(P, y, tx.dtype);
  }
  /* GROUP_NORM_BWD: the sums (rounded to dt) from the operand or made here */
  int s1, s2;
  if (op->i1 & 2) {
    int sm = shlo_convert(P, in[n - 1], F64);
    int64_t lo0[3] = {0, 0, 0}, hi0[3] = {1, N, C}, lo1[3] = {1, 0, 0}, hi1[3] = {2, N, C}, one[3] = {1, 1, 1};
    int64_t dnc[2] = {N, C};
    s1 = shlo_reshape(P, shlo_slice(P, sm, lo0, hi0, one), 2, dnc);
    s2 = shlo_reshape(P, shlo_slice(P, sm, lo1, hi1, one), 2, dnc);
  } else {
    gn_sums(P, in[0], in[1], mean, d4, &s1, &s2);
    if (dt != F64) { s1 = shlo_convert(P, shlo_convert(P, s1, dt), F64); s2 = shlo_convert(P, shlo_convert(P, s2, dt), F64); }
  }
  /* per group in f64: t = sum_c w s; m1 = t1 / n, m2 = t2 / n rounded to dt */
  static const int64_t fc[3] = {0, 0, 1};
  int64_t d3g[3] = {N, G, C / G};
  int ws1 = shlo_reshape(P, s1, 3, d3g), ws2 = shlo_reshape(P, s2, 3, d3g);
  if (w >= 0) {
    static const int64_t bd[2] = {1, 2};
    int64_t gc[2] = {G, C / G};
    int w64 = shlo_bcast(P, shlo_reshape(P, shlo_convert(P, w, F64), 2, gc), 3, d3g, bd);
    ws1 = MUL(w64, ws1); ws2 = MUL(w64, ws2);
  }
  int t1 = shlo_reduce(P, TPU_IR_MONOID_SUM, ws1, fc), t2 = shlo_reduce(P, TPU_IR_MONOID_SUM, ws2, fc);
  int iv = shlo_const_like(P, t1, F64, inv);
  int m1 = MUL(t1, iv), m2 = MUL(t2, iv);
  if (dt != F64) { m1 = shlo_convert(P, m1, dt); m2 = shlo_convert(P, m2, dt); }
  int m2b = MUL(rstd, m2);                                                          /* [N, G] */
  int b = shlo_un(P, "stablehlo.negate", MUL(MUL(rstd, rstd), m2b));
  int cc = MUL(rstd, SUB(MUL(MUL(mean, rstd), m2b), m1));
  int a = w >= 0 ? MUL(r4, gn_bc(P, w, d4)) : r4;
  int dx = ADD(ADD(MUL(gn_x4(P, in[0], d4, dt), a), MUL(gn_x4(P, in[1], d4, dt), gn_bng(P, b, d4))), gn_bng(P, cc, d4));
  dx = shlo_reshape(P, dx, 3, d3);
  return tx.dtype == dt ? dx : shlo_convert(P, dx, tx.dtype);
}
#undef MUL
#undef ADD
#undef SUB

/* HISTC_EDGES: tpu_ir_histc_widen with chlo.next_after; XLA has no run-time error to raise, so a range that fails
 * PyTorch's checks gives NaN edges (no element is counted) */
static int histc_edges(shlo_t* P, const tpu_ir_op_t* op, const int* in) {
  const int dt = (int)op->i1, F64 = TPU_DTYPE_F64;
  int lo = in[0], hi = in[1];
  int wl = shlo_bin(P, "stablehlo.subtract", lo, shlo_const_like(P, lo, F64, 1.0));
  int wh = shlo_bin(P, "stablehlo.add", hi, shlo_const_like(P, hi, F64, 1.0));
  if (dt == TPU_DTYPE_F32 || dt == F64) { /* min(next below, v - 1), max(next above, v + 1) as std::min / max */
    const double big = dt == F64 ? DBL_MAX : FLT_MAX;
    int l = shlo_convert(P, lo, dt), h = shlo_convert(P, hi, dt);
    int nl = shlo_convert(P, shlo_bin(P, "chlo.next_after", l, shlo_const_like(P, l, dt, -big)), F64);
    int nh = shlo_convert(P, shlo_bin(P, "chlo.next_after", h, shlo_const_like(P, h, dt, big)), F64);
    wl = shlo_select(P, shlo_cmp(P, TPU_IR_CMP_LT, wl, nl), wl, nl);
    wh = shlo_select(P, shlo_cmp(P, TPU_IR_CMP_LT, nh, wh), wh, nh);
  }
  int eq = shlo_cmp(P, TPU_IR_CMP_EQ, lo, hi);
  lo = shlo_select(P, eq, wl, lo);
  hi = shlo_select(P, eq, wh, hi);
  const tpu_ir_type_t tb = shlo_ty(TPU_DTYPE_BOOL, 0, NULL);
  int ok = shlo_bin(P, "stablehlo.and", shlo_op1(P, "stablehlo.is_finite", lo, &tb), shlo_op1(P, "stablehlo.is_finite", hi, &tb));
  ok = shlo_bin(P, "stablehlo.and", ok, shlo_cmp(P, TPU_IR_CMP_LT, lo, hi));
  int nan = shlo_const_like(P, lo, F64, NAN);
  int64_t one = 1;
  int parts[2] = {shlo_reshape(P, shlo_select(P, ok, lo, nan), 1, &one), shlo_reshape(P, shlo_select(P, ok, hi, nan), 1, &one)};
  return shlo_concat(P, 2, parts, 0);
}

/* EMBEDDING_BAG(_BWD) (drivers/host/embed.c). offset2bag (result 1, the only one reading offsets for the bags):
 * max(bag, 0) with bag[i] = (the count of the first B offsets at or before position i) - 1, a scatter of ones at the
 * offsets and a prefix sum (reduce_window over the whole prefix, i64); the other results read offset2bag. Rows are
 * gathered and scatter-added into one more row than the result has, the last a dump row for the ids the host
 * skips (padding), sums in f32 (f64 for f64 operands) as the host's; a 16-bit mean divides the sum rounded to its
 * dtype. max: a scatter-max per bag, then the first position holding it (scatter-min of positions), its id;
 * the rows are the table's elements at (max_indices, column); the backward scatter-adds grad there. The host's
 * run-time errors have no StableHLO form: an id outside the table (after the backward's wrap of negative ids)
 * reads and adds nothing (bag sizes still count it), an offset outside [0, N) is not counted, offsets[0] != 0
 * and offsets[B] > N are not checked, an offset2bag entry outside [0, B) adds nothing; a NaN in a max bag
 * propagates (stablehlo.maximum) where the host keeps the first value unless a later one is greater. */
#define EB_I64 TPU_DTYPE_I64
static int eb_i64(shlo_t* P, int x) { return shlo_convert(P, x, EB_I64); }
static int eb_and(shlo_t* P, int a, int b) { return shlo_bin(P, "stablehlo.and", a, b); }
static int eb_in(shlo_t* P, int x, int64_t lo, int64_t hi) { /* lo <= x < hi (x i64) */
  return eb_and(P, shlo_cmp(P, TPU_IR_CMP_GE, x, shlo_const_like(P, x, EB_I64, (double)lo)),
                shlo_cmp(P, TPU_IR_CMP_LT, x, shlo_const_like(P, x, EB_I64, (double)hi)));
}
static int eb_zeros(shlo_t* P, int dtype, int rank, const int64_t* dims) {
  tpu_ir_type_t t = shlo_ty(dtype, rank, dims);
  return shlo_const(P, &t, 0, 0);
}
/* x [R] or [R, D] at rows idx [N] (i64 in [0, R), R > 0) -> [N] or [N, D] */
static int eb_take(shlo_t* P, int x, int idx) {
  if (x < 0 || idx < 0) return -1;
  const tpu_ir_type_t tx = *shlo_type(P, x);
  const int64_t N = shlo_type(P, idx)->dims[0], n1[2] = {N, 1}, slice[2] = {1, tx.rank > 1 ? tx.dims[1] : 1};
  int in[2] = {x, shlo_reshape(P, idx, 2, n1)};
  tpu_ir_type_t t = tx;
  t.dims[0] = N;
  int g = shlo_begin(P, "stablehlo.gather", 2, in);
  shlo_printf(P, " {dimension_numbers = #stablehlo.gather<offset_dims = [%s], collapsed_slice_dims = [0], "
                 "start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = ",
              tx.rank > 1 ? "1" : "");
  shlo_i64s(P, slice, tx.rank);
  shlo_printf(P, "}");
  return shlo_end(P, g, 2, in, &t);
}
/* init [R + 1] or [R + 1, D] of upd's dtype with upd [N] / [N, D] combined (stablehlo.add / maximum / minimum) at
 * rows idx [N] (i64 in [0, R], R the dump row), then the first R rows (all R + 1 with keep_dump) */
static int eb_scatter(shlo_t* P, int64_t R, int idx, int upd, const char* fn, double init, int keep_dump) {
  if (idx < 0 || upd < 0) return -1;
  const tpu_ir_type_t tu = *shlo_type(P, upd);
  const int64_t n1[2] = {tu.dims[0], 1}, od[2] = {R + 1, tu.rank > 1 ? tu.dims[1] : 1};
  tpu_ir_type_t ti = shlo_ty(tu.dtype, tu.rank, od);
  int in[3] = {init == 0 ? eb_zeros(P, tu.dtype, tu.rank, od) : shlo_const(P, &ti, init, isfinite(init) ? (int64_t)init : 0),
               shlo_reshape(P, idx, 2, n1), upd};
  int s = shlo_begin(P, "stablehlo.scatter", 3, in);
  if (s < 0) return -1;
  int dts[2] = {tu.dtype, tu.dtype};
  int a = shlo_region_begin(P, 2, dts);
  if (a < 0) return -1;
  int res = shlo_bin(P, fn, a, a + 1);
  shlo_region_end(P, 1, &res);
  shlo_printf(P, " {indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = "
                 "[%s], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, "
                 "unique_indices = false}", tu.rank > 1 ? "1" : "");
  int r = shlo_end(P, s, 3, in, shlo_type(P, in[0]));
  return keep_dump ? r : shlo_slice_dim(P, r, 0, 0, R);
}
static int eb_scatter_add(shlo_t* P, int64_t R, int idx, int upd) { return eb_scatter(P, R, idx, upd, "stablehlo.add", 0, 0); }
/* bag[i] (i64 [N], -1 before the first counted offset) from the first B offsets */
static int eb_bags(shlo_t* P, int off, int64_t B, int64_t N) {
  if (B == 0) { tpu_ir_type_t t = shlo_ty(EB_I64, 1, &N); return shlo_const(P, &t, 0, -1); }
  int o = shlo_slice_dim(P, eb_i64(P, off), 0, 0, B);
  o = shlo_select(P, eb_in(P, o, 0, N), o, shlo_const_like(P, o, EB_I64, (double)N));
  int cnt = eb_scatter_add(P, N, o, shlo_const_like(P, o, EB_I64, 1)); /* [N] */
  const int64_t win = N, pad[1][2] = {{N - 1, 0}}, one = 1;
  int in[2] = {cnt, shlo_scalar_const(P, EB_I64, 0)};
  int w = shlo_begin(P, "stablehlo.reduce_window", 2, in);
  if (w < 0) return -1;
  shlo_monoid_region(P, TPU_IR_MONOID_SUM, EB_I64);
  shlo_printf(P, " {");
  shlo_padding(P, pad, 1);
  shlo_printf(P, ", window_dimensions = ");
  shlo_i64s(P, &win, 1);
  shlo_printf(P, ", window_strides = ");
  shlo_i64s(P, &one, 1);
  shlo_printf(P, "}");
  int c = shlo_end(P, w, 2, in, shlo_type(P, cnt));
  return shlo_bin(P, "stablehlo.subtract", c, shlo_const_like(P, c, EB_I64, 1));
}
/* (ids, offsets) -> bag[] and the counted mask; bag_size [m] (the counted ids per bag, zeros past B) */
static int eb_sizes(shlo_t* P, int bag, int counted, int64_t m) {
  int one = shlo_const_like(P, bag, EB_I64, 1);
  return eb_scatter_add(P, m, shlo_select(P, counted, bag, shlo_const_like(P, bag, EB_I64, (double)m)), one);
}
/* element (mi[b, d], d) of x [R, D] for every (b, d) of mi [B, D] (i64 in [0, R)): x flattened, read at
 * mi * D + d -> [B, D] */
static int eb_take_cols(shlo_t* P, int x, int mi) {
  const tpu_ir_type_t tx = *shlo_type(P, x), tm = *shlo_type(P, mi);
  const int64_t R = tx.dims[0], D = tx.dims[1], B = tm.dims[0], flat = R * D, bd = B * D;
  tpu_ir_type_t ti = shlo_ty(EB_I64, 2, tm.dims);
  int at = shlo_bin(P, "stablehlo.add", shlo_bin(P, "stablehlo.multiply", mi, shlo_const_like(P, mi, EB_I64, (double)D)),
                    shlo_iota(P, &ti, 1));
  return shlo_reshape(P, eb_take(P, shlo_reshape(P, x, 1, &flat), shlo_reshape(P, at, 1, &bd)), 2, tm.dims);
}
/* max_indices [B, D]: per column the first position (in id order) of the bag's maximum, its id; 0 for bags
 * without counted ids (rows [N, D] in the math dtype, to [N] the bag of each id or B for the dump row) */
static int eb_argmax(shlo_t* P, int rows, int to, int ids, int64_t B) {
  const tpu_ir_type_t tr = *shlo_type(P, rows);
  const int64_t N = tr.dims[0], D = tr.dims[1], bd = B * D, one = 1;
  int m = eb_scatter(P, B, to, rows, "stablehlo.maximum", -INFINITY, 1); /* [B + 1, D] */
  int eq = shlo_cmp(P, TPU_IR_CMP_EQ, rows, eb_take(P, m, to));
  tpu_ir_type_t tp = shlo_ty(EB_I64, 2, tr.dims);
  int pos = shlo_select(P, eq, shlo_iota(P, &tp, 0), shlo_const_like(P, rows, EB_I64, (double)N));
  int first = eb_scatter(P, B, to, pos, "stablehlo.minimum", (double)N, 0); /* [B, D], N where none */
  tpu_ir_type_t t1 = shlo_ty(EB_I64, 1, &one);
  int ids_pad = shlo_concat(P, 2, (int[]){ids, shlo_const(P, &t1, 0, 0)}, 0); /* [N + 1]: 0 past the end */
  int64_t bdims[2] = {B, D};
  return shlo_reshape(P, eb_take(P, ids_pad, shlo_reshape(P, first, 1, &bd)), 2, bdims);
}
static int embedding_bag(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  const int what = (int)((op->i1 >> 4) & 3), psw = (op->i1 & 4) != 0, mode = (int)(op->i1 & 3);
  const int last = (op->i1 & 8) != 0, ii = what == 1 || what == 2 ? 0 : 1, max_rows = what == 0 && mode == 2;
  const int want = what == 1 ? 2 : what == 2 || what == 3 || max_rows ? 3 : 3 + psw;
  if (n != want || shlo_type(P, in[ii])->rank != (max_rows ? 2 : 1) || shlo_type(P, in[ii + 1])->rank != 1)
    return shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: EMBEDDING_BAG operands (ir.h)"));
  const tpu_ir_type_t* t = &op->type;
  const int64_t pad = op->a[0][0];
  if (tpu_ir_numel(t) == 0) return eb_zeros(P, t->dtype, t->rank, t->dims);
  if (max_rows) { /* (weight, max_indices, bag_size): weight[mi[b, d], d], 0 where bag_size[b] is 0 */
    const int64_t B = t->dims[0], nw = shlo_type(P, in[0])->dims[0], bd0 = 0;
    int mi = eb_i64(P, in[1]);
    mi = shlo_select(P, eb_in(P, mi, 0, nw), mi, shlo_const_like(P, mi, EB_I64, 0));
    int v = eb_take_cols(P, in[0], mi);
    int sz = shlo_slice_dim(P, eb_i64(P, in[2]), 0, 0, B);
    int full = shlo_bcast(P, shlo_cmp(P, TPU_IR_CMP_GT, sz, shlo_const_like(P, sz, EB_I64, 0)), 2, t->dims, &bd0);
    return shlo_select(P, full, v, shlo_const_like(P, v, t->dtype, 0));
  }
  const int64_t N = shlo_type(P, in[ii])->dims[0];
  if (N == 0) return eb_zeros(P, t->dtype, t->rank, t->dims);
  int ids = eb_i64(P, in[ii]);
  if (what == 1) { /* the one bag rule: offset2bag = max(bag, 0) */
    const int64_t no = shlo_type(P, in[1])->dims[0], B = no - last > 0 ? no - last : 0;
    int bag = eb_bags(P, in[1], B, N);
    return shlo_convert(P, shlo_bin(P, "stablehlo.maximum", bag, shlo_const_like(P, bag, EB_I64, 0)), t->dtype);
  }
  int bag = eb_i64(P, in[ii + 1]); /* offset2bag */
  int counted = pad >= 0 ? shlo_cmp(P, TPU_IR_CMP_NE, ids, shlo_const_like(P, ids, EB_I64, (double)pad))
                         : shlo_cmp(P, TPU_IR_CMP_EQ, ids, ids); /* all */
  if (what == 2) { /* bag_size [m] from (ids, offset2bag, offsets): 0 without bags */
    const int64_t no = shlo_type(P, in[2])->dims[0];
    if (no - last <= 0) return eb_zeros(P, t->dtype, t->rank, t->dims);
    return shlo_convert(P, eb_sizes(P, bag, counted, t->dims[0]), t->dtype);
  }
  const tpu_ir_type_t tw = *shlo_type(P, in[0]);
  const int md = tw.dtype == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : F32;
  const int64_t nw = tw.dims[0], D = tw.dims[1], bd0 = 0, nd[2] = {N, D}, B = t->dims[0];
  if (nw == 0) return eb_zeros(P, t->dtype, t->rank, t->dims);
  int in_table = eb_in(P, ids, 0, nw);
  int rows = shlo_convert(P, eb_take(P, in[0], shlo_select(P, in_table, ids, shlo_const_like(P, ids, EB_I64, 0))), md);
  if (psw) rows = shlo_bin(P, "stablehlo.multiply", rows, shlo_bcast(P, shlo_convert(P, in[3], md), 2, nd, &bd0));
  int to = shlo_select(P, eb_and(P, counted, in_table), bag, shlo_const_like(P, bag, EB_I64, (double)B));
  if (what == 3) return shlo_convert(P, eb_argmax(P, rows, to, ids, B), t->dtype);
  int r = eb_scatter_add(P, B, to, rows); /* [B, D] */
  if (mode == 1) { /* the sum and max(count, 1) rounded to a 16-bit result first (PyTorch's), then divided */
    if (t->dtype != md) r = shlo_convert(P, shlo_convert(P, r, t->dtype), md);
    int sz = eb_sizes(P, bag, counted, B);
    sz = shlo_convert(P, shlo_bin(P, "stablehlo.maximum", sz, shlo_const_like(P, sz, EB_I64, 1)), md);
    if (t->dtype != md) sz = shlo_convert(P, shlo_convert(P, sz, t->dtype), md); /* the count rounded to it too */
    r = shlo_bin(P, "stablehlo.divide", r, shlo_bcast(P, sz, 2, t->dims, &bd0));
  }
  return shlo_convert(P, r, t->dtype);
}
static int embedding_bag_bwd(shlo_t* P, const tpu_ir_op_t* op, int n, const int* in) {
  const int pgrad = (op->i1 & 16) != 0, psw = !pgrad && (op->i1 & 4), mean = !pgrad && (op->i1 & 3) == 1;
  const int scale = !pgrad && (op->i1 & 8) && (op->i1 & 3) != 2, ii = pgrad ? 2 : 1;
  const int maxb = !pgrad && (op->i1 & 3) == 2;
  if (n != (pgrad ? 4 : maxb ? 3 : 4 + psw) || shlo_type(P, in[0])->rank != 2 || shlo_type(P, in[ii])->rank != (maxb ? 2 : 1))
    return shlo_fail(P, TPU_ERR(INTERNAL, "stablehlo: EMBEDDING_BAG_BWD operands (ir.h)"));
  const tpu_ir_type_t* t = &op->type;
  const tpu_ir_type_t tg = *shlo_type(P, in[0]);
  const int64_t B = tg.dims[0], D = tg.dims[1], N = shlo_type(P, in[ii])->dims[0], pad = op->a[0][0];
  if (!pgrad && (op->i1 & 3) == 2) { /* max: grad[b, d] added at (mi[b, d], d) for bags with bag_size > 0 */
    const int64_t nw = t->dims[0], bd = B * D, flat = nw * D;
    if (B == 0 || nw == 0 || D == 0) return eb_zeros(P, t->dtype, t->rank, t->dims);
    const int md = tg.dtype == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : F32, bd0 = 0;
    int mi = eb_i64(P, in[1]), sz = shlo_slice_dim(P, eb_i64(P, in[2]), 0, 0, B);
    int ok = eb_and(P, eb_in(P, mi, 0, nw),
                    shlo_bcast(P, shlo_cmp(P, TPU_IR_CMP_GT, sz, shlo_const_like(P, sz, EB_I64, 0)), 2, tg.dims, (const int64_t[]){bd0}));
    tpu_ir_type_t ti = shlo_ty(EB_I64, 2, tg.dims);
    int at = shlo_bin(P, "stablehlo.add", shlo_bin(P, "stablehlo.multiply", mi, shlo_const_like(P, mi, EB_I64, (double)D)),
                      shlo_iota(P, &ti, 1));
    at = shlo_select(P, ok, at, shlo_const_like(P, at, EB_I64, (double)flat));
    int r = eb_scatter_add(P, flat, shlo_reshape(P, at, 1, &bd), shlo_reshape(P, shlo_convert(P, in[0], md), 1, &bd));
    return shlo_convert(P, shlo_reshape(P, r, 2, t->dims), t->dtype);
  }
  const int64_t nw = pgrad ? shlo_type(P, in[1])->dims[0] : t->dims[0], bd0 = 0, nd[2] = {N, D};
  if (B == 0 || N == 0 || nw == 0 || D == 0) return eb_zeros(P, t->dtype, t->rank, t->dims);
  int raw = eb_i64(P, in[ii]), b = eb_i64(P, in[ii + 1]);
  int k = shlo_select(P, shlo_cmp(P, TPU_IR_CMP_LT, raw, shlo_const_like(P, raw, EB_I64, 0)),
                      shlo_bin(P, "stablehlo.add", raw, shlo_const_like(P, raw, EB_I64, (double)nw)), raw);
  int kin = eb_in(P, k, 0, nw), bin = eb_in(P, b, 0, B), zero = shlo_const_like(P, k, EB_I64, 0);
  int ok = eb_and(P, kin, bin);
  if (pad >= 0) ok = eb_and(P, ok, shlo_cmp(P, TPU_IR_CMP_NE, raw, shlo_const_like(P, raw, EB_I64, (double)pad)));
  int kc = shlo_select(P, kin, k, zero), bc = shlo_select(P, bin, b, zero);
  const int f64 = tg.dtype == TPU_DTYPE_F64 || (pgrad && shlo_type(P, in[1])->dtype == TPU_DTYPE_F64);
  const int md = f64 ? TPU_DTYPE_F64 : F32;
  int g = shlo_convert(P, eb_take(P, in[0], bc), md); /* [N, D] */
  if (pgrad) { /* <grad[b], weight[k]>: products in the math dtype, summed in f64 */
    static const int64_t fl[2] = {0, 1};
    int prod = shlo_bin(P, "stablehlo.multiply", g, shlo_convert(P, eb_take(P, in[1], kc), md));
    int s = shlo_reduce(P, TPU_IR_MONOID_SUM, shlo_convert(P, prod, TPU_DTYPE_F64), fl);
    return shlo_convert_host(P, shlo_select(P, ok, s, shlo_const_like(P, s, TPU_DTYPE_F64, 0)), t->dtype);
  }
  if (mean) { /* / max(bag_size[b], 1) */
    int sz = eb_take(P, eb_i64(P, in[3]), bc);
    sz = shlo_convert(P, shlo_bin(P, "stablehlo.maximum", sz, shlo_const_like(P, sz, EB_I64, 1)), md);
    if (t->dtype != md) sz = shlo_convert(P, shlo_convert(P, sz, t->dtype), md); /* the count rounded to it too */
    g = shlo_bin(P, "stablehlo.divide", g, shlo_bcast(P, sz, 2, nd, &bd0));
  }
  if (psw) g = shlo_bin(P, "stablehlo.multiply", g, shlo_bcast(P, shlo_convert(P, in[4], md), 2, nd, &bd0));
  if (scale) { /* / the count of the id among all ids (padding included) */
    int cnt = eb_scatter_add(P, nw, shlo_select(P, kin, k, shlo_const_like(P, k, EB_I64, (double)nw)),
                             shlo_const_like(P, k, EB_I64, 1));
    int c = shlo_convert(P, eb_take(P, cnt, kc), md);
    g = shlo_bin(P, "stablehlo.divide", g, shlo_bcast(P, c, 2, nd, &bd0));
  }
  int r = eb_scatter_add(P, nw, shlo_select(P, ok, k, shlo_const_like(P, k, EB_I64, (double)nw)), g);
  return shlo_convert(P, r, t->dtype);
}
#undef EB_I64

int shlo_print_custom(shlo_t* P, const tpu_ir_graph_t* g, int v, const int* in) {
  const tpu_ir_op_t* op = &g->ops[v];
  switch (op->i0) {
    case TPU_IR_CUSTOM_ATTENTION: case TPU_IR_CUSTOM_ATTENTION_BWD: return attention(P, op, op->n_in, in);
    case TPU_IR_CUSTOM_CONV_BWD_INPUT: return conv_bwd(P, op, in[0], in[1], conv_bwd_input_term);
    case TPU_IR_CUSTOM_CONV_BWD_WEIGHT: return conv_bwd(P, op, in[0], in[1], conv_bwd_weight_term);
    case TPU_IR_CUSTOM_POOL_ARGMAX: return shlo_pool_argmax(P, op, in[0]);
    case TPU_IR_CUSTOM_LOGCUMSUMEXP: return logcumsumexp(P, op, in[0]);
    case TPU_IR_CUSTOM_TRI_SOLVE: return shlo_tri_solve(P, op, in[0], in[1]);   /* stablehlo_linalg.c */
    case TPU_IR_CUSTOM_CHOLESKY: return shlo_cholesky(P, op, in[0]);
    case TPU_IR_CUSTOM_CHANNEL_STATS: return channel_stats(P, op, op->n_in, in);
    case TPU_IR_CUSTOM_CHANNEL_AFFINE: return channel_affine(P, op, op->n_in, in);
    case TPU_IR_CUSTOM_ROWS_SOFTMAX: case TPU_IR_CUSTOM_ROWS_SOFTMAX_BWD: return rows_softmax(P, op, op->n_in, in);
    case TPU_IR_CUSTOM_ROWS_LAYER_NORM: case TPU_IR_CUSTOM_ROWS_LAYER_NORM_BWD: return rows_layer_norm(P, op, op->n_in, in);
    case TPU_IR_CUSTOM_GELU: case TPU_IR_CUSTOM_GELU_BWD: return gelu(P, op, in);
    case TPU_IR_CUSTOM_COL_SUMS: return col_sums(P, op, in);
    case TPU_IR_CUSTOM_SILU: case TPU_IR_CUSTOM_SILU_BWD: return silu(P, op, in);
    case TPU_IR_CUSTOM_LERP: return lerp(P, in);
    case TPU_IR_CUSTOM_ADDC: return addc(P, op, in);
    case TPU_IR_CUSTOM_GROUP_NORM_STATS: case TPU_IR_CUSTOM_GROUP_NORM: case TPU_IR_CUSTOM_GROUP_NORM_SUMS:
    case TPU_IR_CUSTOM_GROUP_NORM_BWD: return group_norm(P, op, op->n_in, in);
    case TPU_IR_CUSTOM_HISTC_EDGES: return histc_edges(P, op, in);
    case TPU_IR_CUSTOM_EMBEDDING_BAG: return embedding_bag(P, op, op->n_in, in);
    case TPU_IR_CUSTOM_EMBEDDING_BAG_BWD: return embedding_bag_bwd(P, op, op->n_in, in);
    default:
      return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: custom_call target %lld has no StableHLO expansion yet (docs/stablehlo.md lists the gaps)",
                                  (long long)op->i0));
  }
}
