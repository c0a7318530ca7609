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
  int64_t N, C, H, W, Ho, Wo;
  int err;
} gs_job_t;

static inline double ld(const tpu_host_view_t* v, int64_t off) {
  return tpu_host_load_f64(v->data + off * (int64_t)tpu_dtype_size(v->dtype), v->dtype);
}
static inline void st(const tpu_host_view_t* v, int64_t off, double x) {
  tpu_host_store_f64(v->data + off * (int64_t)tpu_dtype_size(v->dtype), v->dtype, x);
}
static inline int64_t off4(const tpu_host_view_t* v, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * v->strides[0] + b * v->strides[1] + c * v->strides[2] + d * v->strides[3];
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
static double pad_coord(double c, int64_t size, int pad, int align, double* g) {
  double g1 = 1, g2 = 1;
  if (pad == GS_BORDER) {
    c = clip_nan0(c, size, &g1);
  } else if (pad == GS_REFLECTION) {
    c = align ? reflect(c, 0, 2 * (size - 1), &g1) : reflect(c, -1, 2 * size - 1, &g1);
    c = clip_nan0(c, size, &g2);
  }
  *g = g1 * g2;
  return c;
}
static double source_index(double c, int64_t size, int pad, int align, double* g) {
  double gu, gp;
  c = unnormalize(c, size, align, &gu);
  c = pad_coord(c, size, pad, align, &gp);
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
  double cx = pad_coord(x, J->W, J->pad, J->align, &g), cy = pad_coord(y, J->H, J->pad, J->align, &g);
  if (!inb(cy, cx, J->H, J->W)) return 0;
  *out_x = (int64_t)cx; *out_y = (int64_t)cy;
  return 1;
}

/* the sampling of one grid point: up to 16 taps (y, x, weight) and per-tap -d weight/d ix, -d weight/d iy
 * (unnormalized coordinates); gx, gy: d ix / d grid_x, d iy / d grid_y */
typedef struct { int n, nan; int64_t y[16], x[16]; double w[16], dwx[16], dwy[16]; double gx, gy; } taps_t;

static void taps_of(const gs_job_t* J, double gxv, double gyv, taps_t* T) {
  T->n = 0;
  T->nan = 0;
  if (J->mode == GS_BICUBIC) {
    double ix = unnormalize(gxv, J->W, J->align, &T->gx), iy = unnormalize(gyv, J->H, J->align, &T->gy);
    if (!isfinite(ix) || !isfinite(iy)) { T->nan = 1; return; } /* NaN weights, as on the CPU */
    double fx = floor(ix), fy = floor(iy), tx = ix - fx, ty = iy - fy;
    double wx[4], wy[4], dx[4], dy[4];
    cubic_w(tx, wx); cubic_w(ty, wy); cubic_wgrad(tx, dx); cubic_wgrad(ty, dy);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        int64_t yy, xx;
        if (!cubic_tap(fx - 1 + i, fy - 1 + j, J, &yy, &xx)) continue;
        int k = T->n++;
        T->y[k] = yy; T->x[k] = xx;
        T->w[k] = wx[i] * wy[j];
        T->dwx[k] = dx[i] * wy[j];
        T->dwy[k] = dy[j] * wx[i];
      }
    return;
  }
  double ix = source_index(gxv, J->W, J->pad, J->align, &T->gx);
  double iy = source_index(gyv, J->H, J->pad, J->align, &T->gy);
  if (J->mode == GS_NEAREST) {
    double x = nearbyint(ix), y = nearbyint(iy);
    if (inb(y, x, J->H, J->W)) { T->y[0] = (int64_t)y; T->x[0] = (int64_t)x; T->w[0] = 1; T->dwx[0] = T->dwy[0] = 0; T->n = 1; }
    return;
  }
  if (!isfinite(ix) || !isfinite(iy)) { T->nan = 1; return; }
  double x0 = floor(ix), y0 = floor(iy), x1 = x0 + 1, y1 = y0 + 1;
  /* corners nw, ne, sw, se: weight and -d weight/d ix, -d weight/d iy */
  const double cx[4] = {x0, x1, x0, x1}, cy[4] = {y0, y0, y1, y1};
  const double w[4] = {(x1 - ix) * (y1 - iy), (ix - x0) * (y1 - iy), (x1 - ix) * (iy - y0), (ix - x0) * (iy - y0)};
  const double dwx[4] = {(y1 - iy), -(y1 - iy), (iy - y0), -(iy - y0)};
  const double dwy[4] = {(x1 - ix), (ix - x0), -(x1 - ix), -(ix - x0)};
  for (int c = 0; c < 4; ++c) {
    if (!inb(cy[c], cx[c], J->H, J->W)) continue;
    int k = T->n++;
    T->y[k] = (int64_t)cy[c]; T->x[k] = (int64_t)cx[c]; T->w[k] = w[c]; T->dwx[k] = dwx[c]; T->dwy[k] = dwy[c];
  }
}
static void grid_at(const gs_job_t* J, int64_t n, int64_t h, int64_t w, double* gx, double* gy) {
  const tpu_host_view_t* g = J->grid;
  int64_t o = n * g->strides[0] + h * g->strides[1] + w * g->strides[2];
  *gx = ld(g, o);
  *gy = ld(g, o + g->strides[3]);
}

/* forward: rows (n, h) of the output */
static void fwd_worker(void* ctx, int64_t r0, int64_t r1) {
  gs_job_t* J = ctx;
  taps_t T;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t n = r / J->Ho, h = r % J->Ho;
    for (int64_t w = 0; w < J->Wo; ++w) {
      double gx, gy;
      grid_at(J, n, h, w, &gx, &gy);
      taps_of(J, gx, gy, &T);
      for (int64_t c = 0; c < J->C; ++c) {
        double acc = T.nan ? NAN : 0;
        for (int k = 0; k < T.n; ++k) acc += ld(J->x, off4(J->x, n, c, T.y[k], T.x[k])) * T.w[k];
        st(J->out, off4(J->out, n, c, h, w), acc);
      }
    }
  }
}
/* d x: planes (n, c); a double accumulator per plane */
static void bwd_x_worker(void* ctx, int64_t p0, int64_t p1) {
  gs_job_t* J = ctx;
  double* acc = malloc((size_t)(J->H * J->W + 1) * sizeof(double));
  if (!acc) { J->err = 1; return; }
  taps_t T;
  for (int64_t p = p0; p < p1; ++p) {
    int64_t n = p / J->C, c = p % J->C;
    memset(acc, 0, (size_t)(J->H * J->W) * sizeof(double));
    for (int64_t h = 0; h < J->Ho; ++h)
      for (int64_t w = 0; w < J->Wo; ++w) {
        double gx, gy;
        grid_at(J, n, h, w, &gx, &gy);
        taps_of(J, gx, gy, &T);
        double go = ld(J->gout, off4(J->gout, n, c, h, w));
        for (int k = 0; k < T.n; ++k) acc[T.y[k] * J->W + T.x[k]] += T.w[k] * go;
      }
    for (int64_t y = 0; y < J->H; ++y)
      for (int64_t x = 0; x < J->W; ++x) st(J->out, off4(J->out, n, c, y, x), acc[y * J->W + x]);
  }
  free(acc);
}
/* d grid: rows (n, h) */
static void bwd_grid_worker(void* ctx, int64_t r0, int64_t r1) {
  gs_job_t* J = ctx;
  taps_t T;
  const tpu_host_view_t* o = J->out;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t n = r / J->Ho, h = r % J->Ho;
    for (int64_t w = 0; w < J->Wo; ++w) {
      double gx, gy, dx = 0, dy = 0;
      grid_at(J, n, h, w, &gx, &gy);
      taps_of(J, gx, gy, &T);
      if (J->mode != GS_NEAREST)
        for (int64_t c = 0; c < J->C; ++c) {
          double go = ld(J->gout, off4(J->gout, n, c, h, w));
          for (int k = 0; k < T.n; ++k) {
            double v = ld(J->x, off4(J->x, n, c, T.y[k], T.x[k])) * go;
            dx -= v * T.dwx[k];
            dy -= v * T.dwy[k];
          }
        }
      int64_t oo = n * o->strides[0] + h * o->strides[1] + w * o->strides[2];
      if (T.nan) dx = dy = NAN;
      st(o, oo, T.gx * dx);
      st(o, oo + o->strides[3], T.gy * dy);
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
  if (x->rank != 4 || g->rank != 4 || out->rank != 4 || g->sizes[3] != 2 || g->sizes[0] != x->sizes[0])
    return TPU_ERR(INTERNAL, "grid_sample: shapes");
  J.N = x->sizes[0]; J.C = x->sizes[1]; J.H = x->sizes[2]; J.W = x->sizes[3];
  J.Ho = g->sizes[1]; J.Wo = g->sizes[2];
  for (int q = 0; q < n; ++q)
    if (xs[q].dtype != TPU_DTYPE_F32 && xs[q].dtype != TPU_DTYPE_F64) return TPU_ERR(INTERNAL, "grid_sample: dtype");
  if (bwd && (J.gout->rank != 4 || J.gout->sizes[0] != J.N || J.gout->sizes[1] != J.C || J.gout->sizes[2] != J.Ho ||
              J.gout->sizes[3] != J.Wo))
    return TPU_ERR(INTERNAL, "grid_sample: grad shape");
  int64_t grain_rows = TPU_MAX(1, 4096 / (J.Wo * (J.C + 1) + 1));
  if (!bwd) {
    if (out->sizes[0] != J.N || out->sizes[1] != J.C || out->sizes[2] != J.Ho || out->sizes[3] != J.Wo)
      return TPU_ERR(INTERNAL, "grid_sample: result shape");
    tpu_pool_parallel_for(J.N * J.Ho, grain_rows, fwd_worker, &J);
  } else if (!J.which) {
    for (int d = 0; d < 4; ++d)
      if (out->sizes[d] != x->sizes[d]) return TPU_ERR(INTERNAL, "grid_sample: d x shape");
    tpu_pool_parallel_for(J.N * J.C, 1, bwd_x_worker, &J);
  } else {
    for (int d = 0; d < 4; ++d)
      if (out->sizes[d] != g->sizes[d]) return TPU_ERR(INTERNAL, "grid_sample: d grid shape");
    tpu_pool_parallel_for(J.N * J.Ho, grain_rows, bwd_grid_worker, &J);
  }
  if (J.err) return TPU_ERR(OUT_OF_MEMORY, "grid_sample: out of host memory for a workspace");
  return TPU_OK;
}
