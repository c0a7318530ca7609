/* grid_sample.c — GRID_SAMPLE / GRID_SAMPLE_BWD (see grid_sample.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/grid_sample.h"

enum { GS_BILINEAR = 0, GS_NEAREST = 1, GS_BICUBIC = 2 };
enum { GS_ZEROS = 0, GS_BORDER = 1, GS_REFLECTION = 2 };

typedef struct {
  const tpu_host_view_t *x, *grid, *gout, *out;
  int mode, pad, align, which; /* which (backward): 0 d x, 1 d grid */
  int nd;                       /* 2, or 3 (grid_sampler_3d: D = depth, z = grid[..., 2]) */
  int64_t N, C, D, H, W, Do, Ho, Wo;
  int err;
} gs_job_t;

static inline double ld(const tpu_host_view_t* v, int64_t off) {
  return tpu_host_load_f64(v->data + off * (int64_t)tpu_dtype_size(v->dtype), v->dtype);
}
static inline void st(const tpu_host_view_t* v, int64_t off, double x) {
  tpu_host_store_f64(v->data + off * (int64_t)tpu_dtype_size(v->dtype), v->dtype, x);
}
/* element (n, c, z, y, x) of a rank-4 (z ignored) or rank-5 view */
static inline int64_t offx(const tpu_host_view_t* v, int64_t n, int64_t c, int64_t z, int64_t y, int64_t x) {
  const int64_t* s = v->strides;
  return v->rank == 5 ? n * s[0] + c * s[1] + z * s[2] + y * s[3] + x * s[4] : n * s[0] + c * s[1] + y * s[2] + x * s[3];
}
/* grid point (n, z, y, x) of a grid-shaped view [N, (Do,) Ho, Wo, nd]: offset of its component 0 */
static inline int64_t offg(const tpu_host_view_t* v, int64_t n, int64_t z, int64_t y, int64_t x) {
  const int64_t* s = v->strides;
  return v->rank == 5 ? n * s[0] + z * s[1] + y * s[2] + x * s[3] : n * s[0] + y * s[1] + x * s[2];
}

/* ---- PyTorch's coordinate rules (GridSampler.h), with d(result)/d(input) in *g */
static double unnormalize(double c, int64_t size, int align, double* g) {
  if (align) { *g = (double)(size - 1) / 2; return (c + 1) / 2 * (double)(size - 1); }
  *g = (double)size / 2;
  return ((c + 1) * (double)size - 1) / 2;
}
static double clip(double c, int64_t limit, double* g) {
  if (c <= 0) { *g = 0; return 0; }
  double mx = (double)(limit - 1);
  if (c >= mx) { *g = 0; return mx; }
  *g = 1;
  return c;
}
static double reflect(double c, int64_t twice_lo, int64_t twice_hi, double* g) {
  if (twice_lo == twice_hi) { *g = 0; return 0; }
  double mn = (double)twice_lo / 2, span = (double)(twice_hi - twice_lo) / 2, s = 1;
  c -= mn;
  if (c < 0) { s = -1; c = -c; }
  double extra = fmod(c, span);
  int64_t flips = (int64_t)floor(c / span);
  if (flips % 2 == 0) { *g = s; return extra + mn; }
  *g = -s;
  return span - extra + mn;
}
/* padding of an unnormalized coordinate as PyTorch's vectorized CPU kernel does it (its clip sends
 * NaN to 0; zeros padding leaves non-finite coordinates alone: they make bilinear/bicubic weights
 * NaN); *g multiplies into the chain */
static double clip_nan0(double c, int64_t limit, double* g) {
  if (c != c) { *g = 0; return 0; }
  return clip(c, limit, g);
}
/* grid_sampler_3d runs PyTorch's scalar CPU kernel instead: std::min(limit - 1, std::max(c, 0)) sends
 * NaN to limit - 1, and non-finite or huge results become -100 (sample nothing) */
static double clip_scalar(double c, int64_t limit, double* g) {
  if (c != c) { *g = 0; return (double)(limit - 1); }
  return clip(c, limit, g);
}
static inline double safe_scalar(double c) { return (!isfinite(c) || c > 2147483646.0 || c < -2147483648.0) ? -100.0 : c; }
static double pad_coord(double c, int64_t size, int pad, int align, int scalar, double* g) {
  double g1 = 1, g2 = 1;
  double (*cl)(double, int64_t, double*) = scalar ? clip_scalar : clip_nan0;
  if (pad == GS_BORDER) {
    c = cl(c, size, &g1);
  } else if (pad == GS_REFLECTION) {
    c = align ? reflect(c, 0, 2 * (size - 1), &g1) : reflect(c, -1, 2 * size - 1, &g1);
    c = cl(c, size, &g2);
  }
  *g = g1 * g2;
  return scalar ? safe_scalar(c) : c;
}
static double source_index(double c, int64_t size, int pad, int align, int scalar, double* g) {
  double gu, gp;
  c = unnormalize(c, size, align, &gu);
  c = pad_coord(c, size, pad, align, scalar, &gp);
  *g = gu * gp;
  return c;
}
/* in bounds, tested in double (no conversion of huge or NaN coordinates) */
static inline int inb(double y, double x, int64_t H, int64_t W) { return y >= 0 && y < (double)H && x >= 0 && x < (double)W; }

/* cubic convolution (A = -0.75) weights of the 4 taps around t in [0, 1), and their -d/dt */
static void cubic_w(double t, double w[4]) {
  const double A = -0.75;
  double x = t + 1;
  w[0] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  x = t;
  w[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
  x = 1 - t;
  w[2] = ((A + 2) * x - (A + 3)) * x * x + 1;
  x = 2 - t;
  w[3] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}
static void cubic_wgrad(double t, double w[4]) {
  const double A = -0.75;
  double x = -1 - t;
  w[0] = (-3 * A * x - 10 * A) * x - 8 * A;
  x = -t;
  w[1] = (-3 * (A + 2) * x - 2 * (A + 3)) * x;
  x = 1 - t;
  w[2] = (3 * (A + 2) * x - 2 * (A + 3)) * x;
  x = 2 - t;
  w[3] = (3 * A * x - 10 * A) * x + 8 * A;
}
/* a bicubic tap (integer position before padding) -> in-bounds (y, x) or 0 */
static int cubic_tap(double x, double y, const gs_job_t* J, int64_t* out_y, int64_t* out_x) {
  double g;
  double cx = pad_coord(x, J->W, J->pad, J->align, 0, &g), cy = pad_coord(y, J->H, J->pad, J->align, 0, &g);
  if (!inb(cy, cx, J->H, J->W)) return 0;
  *out_x = (int64_t)cx; *out_y = (int64_t)cy;
  return 1;
}

/* the sampling of one grid point: up to 16 taps (z, y, x, weight) and per-tap -d weight / d (ix, iy, iz)
 * (unnormalized coordinates); g[a]: d i_a / d grid_a. nan: the output is NaN (as on the CPU). */
typedef struct { int n, nan; int64_t z[16], y[16], x[16]; double w[16], dw[16][3]; double g[3]; } taps_t;

static void taps_of(const gs_job_t* J, const double gv[3], taps_t* T) {
  T->n = 0;
  T->nan = 0;
  T->g[2] = 0;
  if (J->mode == GS_BICUBIC) { /* 2-D only */
    double ix = unnormalize(gv[0], J->W, J->align, &T->g[0]), iy = unnormalize(gv[1], J->H, J->align, &T->g[1]);
    if (!isfinite(ix) || !isfinite(iy)) { T->nan = 1; return; } /* NaN weights, as on the CPU */
    double fx = floor(ix), fy = floor(iy), tx = ix - fx, ty = iy - fy;
    double wx[4], wy[4], dx[4], dy[4];
    cubic_w(tx, wx); cubic_w(ty, wy); cubic_wgrad(tx, dx); cubic_wgrad(ty, dy);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        int64_t yy, xx;
        if (!cubic_tap(fx - 1 + i, fy - 1 + j, J, &yy, &xx)) continue;
        int k = T->n++;
        T->z[k] = 0; T->y[k] = yy; T->x[k] = xx;
        T->w[k] = wx[i] * wy[j];
        T->dw[k][0] = dx[i] * wy[j];
        T->dw[k][1] = dy[j] * wx[i];
        T->dw[k][2] = 0;
      }
    return;
  }
  const int64_t size[3] = {J->W, J->H, J->D};
  double ic[3] = {0, 0, 0};
  int sc = J->nd == 3;
  for (int a = 0; a < J->nd; ++a) ic[a] = source_index(gv[a], size[a], J->pad, J->align, sc, &T->g[a]);
  if (J->mode == GS_NEAREST) {
    double x = nearbyint(ic[0]), y = nearbyint(ic[1]), z = nearbyint(ic[2]);
    if (inb(y, x, J->H, J->W) && z >= 0 && z < (double)J->D) {
      T->z[0] = (int64_t)z; T->y[0] = (int64_t)y; T->x[0] = (int64_t)x; T->w[0] = 1;
      T->dw[0][0] = T->dw[0][1] = T->dw[0][2] = 0;
      T->n = 1;
    }
    return;
  }
  if (!isfinite(ic[0]) || !isfinite(ic[1])) { T->nan = 1; return; }
  /* (tri)linear: corner bits (bx, by, bz); 1-D weights lo = (f + 1 - i), hi = (i - f) */
  double f[3], lo[3], hi[3];
  for (int a = 0; a < 3; ++a) { f[a] = floor(ic[a]); hi[a] = ic[a] - f[a]; lo[a] = 1 - hi[a]; }
  if (J->nd == 2) { lo[2] = 1; hi[2] = 0; }
  for (int c = 0; c < (J->nd == 3 ? 8 : 4); ++c) {
    int bit[3] = {c & 1, (c >> 1) & 1, (c >> 2) & 1};
    double px = f[0] + bit[0], py = f[1] + bit[1], pz = f[2] + bit[2];
    if (!inb(py, px, J->H, J->W) || !(pz >= 0 && pz < (double)J->D)) continue;
    double w1[3];
    for (int a = 0; a < 3; ++a) w1[a] = bit[a] ? hi[a] : lo[a];
    int k = T->n++;
    T->z[k] = (int64_t)pz; T->y[k] = (int64_t)py; T->x[k] = (int64_t)px;
    T->w[k] = w1[0] * w1[1] * w1[2];
    for (int a = 0; a < 3; ++a) /* -d w / d i_a = -(+-1) * the other two factors */
      T->dw[k][a] = (bit[a] ? -1.0 : 1.0) * w1[(a + 1) % 3] * w1[(a + 2) % 3];
  }
}
static void grid_at(const gs_job_t* J, int64_t n, int64_t z, int64_t h, int64_t w, double gv[3]) {
  const tpu_host_view_t* g = J->grid;
  int64_t o = offg(g, n, z, h, w), cs = g->strides[g->rank - 1];
  gv[2] = 0;
  for (int a = 0; a < J->nd; ++a) gv[a] = ld(g, o + a * cs);
}

/* forward: rows (n, z, h) of the output */
static void fwd_worker(void* ctx, int64_t r0, int64_t r1) {
  gs_job_t* J = ctx;
  taps_t T;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t n = r / (J->Do * J->Ho), z = (r / J->Ho) % J->Do, h = r % J->Ho;
    for (int64_t w = 0; w < J->Wo; ++w) {
      double gv[3];
      grid_at(J, n, z, h, w, gv);
      taps_of(J, gv, &T);
      for (int64_t c = 0; c < J->C; ++c) {
        double acc = T.nan ? NAN : 0;
        for (int k = 0; k < T.n; ++k) acc += ld(J->x, offx(J->x, n, c, T.z[k], T.y[k], T.x[k])) * T.w[k];
        st(J->out, offx(J->out, n, c, z, h, w), acc);
      }
    }
  }
}
/* d x: planes (n, c); a double accumulator per plane */
static void bwd_x_worker(void* ctx, int64_t p0, int64_t p1) {
  gs_job_t* J = ctx;
  int64_t plane = J->D * J->H * J->W;
  double* acc = malloc((size_t)(plane + 1) * sizeof(double));
  if (!acc) { J->err = 1; return; }
  taps_t T;
  for (int64_t p = p0; p < p1; ++p) {
    int64_t n = p / J->C, c = p % J->C;
    memset(acc, 0, (size_t)plane * sizeof(double));
    for (int64_t z = 0; z < J->Do; ++z)
      for (int64_t h = 0; h < J->Ho; ++h)
        for (int64_t w = 0; w < J->Wo; ++w) {
          double gv[3];
          grid_at(J, n, z, h, w, gv);
          taps_of(J, gv, &T);
          double go = ld(J->gout, offx(J->gout, n, c, z, h, w));
          for (int k = 0; k < T.n; ++k) acc[(T.z[k] * J->H + T.y[k]) * J->W + T.x[k]] += T.w[k] * go;
        }
    for (int64_t z = 0; z < J->D; ++z)
      for (int64_t y = 0; y < J->H; ++y)
        for (int64_t x = 0; x < J->W; ++x) st(J->out, offx(J->out, n, c, z, y, x), acc[(z * J->H + y) * J->W + x]);
  }
  free(acc);
}
/* d grid: rows (n, z, h) */
static void bwd_grid_worker(void* ctx, int64_t r0, int64_t r1) {
  gs_job_t* J = ctx;
  taps_t T;
  const tpu_host_view_t* o = J->out;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t n = r / (J->Do * J->Ho), z = (r / J->Ho) % J->Do, h = r % J->Ho;
    for (int64_t w = 0; w < J->Wo; ++w) {
      double gv[3], d[3] = {0, 0, 0};
      grid_at(J, n, z, h, w, gv);
      taps_of(J, gv, &T);
      if (J->mode != GS_NEAREST)
        for (int64_t c = 0; c < J->C; ++c) {
          double go = ld(J->gout, offx(J->gout, n, c, z, h, w));
          for (int k = 0; k < T.n; ++k) {
            double v = ld(J->x, offx(J->x, n, c, T.z[k], T.y[k], T.x[k])) * go;
            for (int a = 0; a < 3; ++a) d[a] -= v * T.dw[k][a];
          }
        }
      int64_t oo = offg(o, n, z, h, w), cs = o->strides[o->rank - 1];
      for (int a = 0; a < J->nd; ++a) st(o, oo + a * cs, T.nan ? NAN : T.g[a] * d[a]);
    }
  }
}

tpu_status_t tpu_host_k_grid_sample(const tpu_ir_op_t* op, int n, const tpu_host_view_t* xs,
                                    const tpu_host_view_t* out) {
  int bwd = op->i0 == TPU_IR_CUSTOM_GRID_SAMPLE_BWD;
  if (n != (bwd ? 3 : 2)) return TPU_ERR(INTERNAL, "grid_sample: operands");
  gs_job_t J = {0};
  J.gout = bwd ? &xs[0] : NULL;
  J.x = &xs[bwd ? 1 : 0];
  J.grid = &xs[bwd ? 2 : 1];
  J.out = out;
  J.mode = (int)(op->i1 & 3); J.pad = (int)((op->i1 >> 2) & 3); J.align = (int)((op->i1 >> 4) & 1);
  J.which = (int)((op->i1 >> 5) & 1);
  const tpu_host_view_t *x = J.x, *g = J.grid;
  int r = x->rank;
  J.nd = r - 2;
  if ((r != 4 && r != 5) || g->rank != r || out->rank != r || g->sizes[r - 1] != J.nd || g->sizes[0] != x->sizes[0] ||
      (J.nd == 3 && J.mode == GS_BICUBIC))
    return TPU_ERR(INTERNAL, "grid_sample: shapes");
  J.N = x->sizes[0]; J.C = x->sizes[1]; J.W = x->sizes[r - 1]; J.H = x->sizes[r - 2]; J.D = r == 5 ? x->sizes[2] : 1;
  J.Wo = g->sizes[r - 2]; J.Ho = g->sizes[r - 3]; J.Do = r == 5 ? g->sizes[1] : 1;
  for (int q = 0; q < n; ++q)
    if (xs[q].dtype != TPU_DTYPE_F32 && xs[q].dtype != TPU_DTYPE_F64) return TPU_ERR(INTERNAL, "grid_sample: dtype");
  /* y = [N, C, *So] */
  int64_t ys[5] = {J.N, J.C, J.Do, J.Ho, J.Wo};
  if (r == 4) { ys[2] = J.Ho; ys[3] = J.Wo; }
  if (bwd) {
    if (J.gout->rank != r) return TPU_ERR(INTERNAL, "grid_sample: grad shape");
    for (int d = 0; d < r; ++d)
      if (J.gout->sizes[d] != ys[d]) return TPU_ERR(INTERNAL, "grid_sample: grad shape");
  }
  int64_t rows = J.N * J.Do * J.Ho, grain_rows = TPU_MAX(1, 4096 / (J.Wo * (J.C + 1) + 1));
  const tpu_host_view_t* like = !bwd ? NULL : !J.which ? x : g;
  for (int d = 0; d < r; ++d)
    if (out->sizes[d] != (like ? like->sizes[d] : ys[d])) return TPU_ERR(INTERNAL, "grid_sample: result shape");
  if (!bwd) tpu_pool_parallel_for(rows, grain_rows, fwd_worker, &J);
  else if (!J.which) tpu_pool_parallel_for(J.N * J.C, 1, bwd_x_worker, &J);
  else tpu_pool_parallel_for(rows, grain_rows, bwd_grid_worker, &J);
  if (J.err) return TPU_ERR(OUT_OF_MEMORY, "grid_sample: out of host memory for a workspace");
  return TPU_OK;
}
