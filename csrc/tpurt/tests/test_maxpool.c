/* test_maxpool.c — the max-pooling fast paths of drivers/host/maxpool.c against naive loops written
 * here (PyTorch's CPU rules: a window's first maximum wins, the last NaN wins): the 2-d window argmax
 * over many window / stride / padding / dilation / ceil-mode geometries, f32 / bf16 / f16 with ties,
 * NaN and -inf, padded output rows; the row gather and scatter-add (negative indices, repeated indices,
 * strided views), the cases they leave to the general kernels (returning 0 with nothing written), and the
 * general kernels' entry points (tpu_host_k_pool_argmax, tpu_host_k_gather / _scatter) giving the same. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/host.h"
#include "drivers/host/maxpool.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint16_t to_bf16(float f) { return tpu_f32_to_bf16(f); }

/* naive argmax of output (oh, ow) of plane xp (H x W floats) */
static int64_t naive_argmax(const float* xp, int64_t H, int64_t W, const int64_t* k, const int64_t* s, const int64_t* p,
                            const int64_t* d, int64_t oh, int64_t ow) {
  int64_t best = -1;
  float m = -INFINITY;
  for (int64_t a = 0; a < k[0]; ++a)
    for (int64_t c = 0; c < k[1]; ++c) {
      const int64_t h = oh * s[0] - p[0] + a * d[0], w = ow * s[1] - p[1] + c * d[1];
      if (h < 0 || h >= H || w < 0 || w >= W) continue;
      const float v = xp[h * W + w];
      if (best < 0) best = h * W + w;
      if (v > m || v != v) { m = v; best = h * W + w; }
    }
  return best;
}

static void test_argmax(void) {
  int cases = 0, fast = 0;
  for (int it = 0; it < 400; ++it) {
    int64_t k[2], s[2], p[2], d[2], S[2], O[2];
    const int dtc = it % 3, dt = dtc == 0 ? TPU_DTYPE_F32 : dtc == 1 ? TPU_DTYPE_BF16 : TPU_DTYPE_F16;
    const int ceil_mode = (it / 3) % 2;
    for (int j = 0; j < 2; ++j) {
      k[j] = 1 + rand() % 4; s[j] = 1 + rand() % 3; d[j] = it % 7 == 0 ? 1 + rand() % 2 : 1;
      p[j] = rand() % (k[j] / 2 + 1);
      S[j] = 1 + rand() % 19;
      const int64_t eff = d[j] * (k[j] - 1) + 1;
      if (S[j] + 2 * p[j] < eff) S[j] = eff;
      int64_t o = (S[j] + 2 * p[j] - eff + (ceil_mode ? s[j] - 1 : 0)) / s[j] + 1;
      if (ceil_mode && (o - 1) * s[j] >= S[j] + p[j]) --o; /* PyTorch: the last window starts inside */
      O[j] = o;
    }
    const int64_t B = 1 + rand() % 5, H = S[0], W = S[1], OH = O[0], OW = O[1];
    const int64_t opitch = OW + (it % 4 == 0 ? 3 : 0); /* padded output rows */
    float* xf = malloc(sizeof(float) * (size_t)(B * H * W));
    void* xb = malloc(4 * (size_t)(B * H * W));
    for (int64_t i = 0; i < B * H * W; ++i) {
      float v = (float)(rand() % 6) - 2.0f; /* many ties */
      if (rand() % 29 == 0) v = NAN;
      if (rand() % 31 == 0) v = -INFINITY;
      if (dt == TPU_DTYPE_F32) { xf[i] = v; ((float*)xb)[i] = v; }
      else if (dt == TPU_DTYPE_BF16) { ((uint16_t*)xb)[i] = to_bf16(v); xf[i] = tpu_bf16_to_f32(to_bf16(v)); }
      else { ((uint16_t*)xb)[i] = tpu_f32_to_f16(v); xf[i] = tpu_f16_to_f32(tpu_f32_to_f16(v)); }
    }
    int64_t* o1 = malloc(8 * (size_t)(B * OH * opitch));
    int64_t* o2 = malloc(8 * (size_t)(B * OH * opitch));
    for (int64_t i = 0; i < B * OH * opitch; ++i) o1[i] = o2[i] = -7;
    tpu_ir_op_t op;
    memset(&op, 0, sizeof op);
    op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_POOL_ARGMAX; op.i1 = 2;
    for (int j = 0; j < 2; ++j) { op.a[0][j] = k[j]; op.a[1][j] = s[j]; op.a[2][j] = p[j]; op.a[2][2 + j] = d[j]; }
    /* x as [B/.., 1, H, W] or [B, H, W] */
    tpu_host_view_t xv = {.data = (char*)xb, .dtype = dt, .rank = 3, .sizes = {B, H, W}, .strides = {H * W, W, 1}};
    tpu_host_view_t ov = {.data = (char*)o1, .dtype = TPU_DTYPE_I64, .rank = 3, .sizes = {B, OH, OW},
                          .strides = {OH * opitch, opitch, 1}};
    const int took = tpu_host_maxpool2d_argmax(&op, &xv, &ov);
    fast += took;
    ov.data = (char*)o2;
    tpu_status_t st = tpu_host_k_pool_argmax(&op, &xv, &ov);
    CHECK(st == TPU_OK, "pool_argmax general entry: %s", tpu_status_message(st));
    tpu_status_free(st);
    int ok = 1, ok2 = 1;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t want = naive_argmax(xf + b * H * W, H, W, k, s, p, d, oh, ow);
          const int64_t at = (b * OH + oh) * opitch + ow;
          if (want < 0) continue; /* a window without positions (dilation): not a PyTorch case */
          if (took) ok &= o1[at] == want;
          ok2 &= o2[at] == want;
        }
    for (int64_t b = 0; b < B; ++b) /* row padding untouched */
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = OW; ow < opitch; ++ow) ok &= o1[(b * OH + oh) * opitch + ow] == -7 && o2[(b * OH + oh) * opitch + ow] == -7;
    CHECK(ok && ok2, "argmax %s B%lld %lldx%lld k%lldx%lld s%lldx%lld p%lldx%lld d%lldx%lld ceil %d (fast %d)",
          tpu_dtype_name(dt), (long long)B, (long long)H, (long long)W, (long long)k[0], (long long)k[1], (long long)s[0],
          (long long)s[1], (long long)p[0], (long long)p[1], (long long)d[0], (long long)d[1], ceil_mode, took);
    ++cases;
    free(xf); free(xb); free(o1); free(o2);
  }
  CHECK(fast > cases / 2, "the fast argmax took %d of %d cases", fast, cases);
  /* cases it leaves alone: 1-d / 3-d, strided planes, adaptive (stride 0), f64 */
  float x[64] = {0};
  int64_t o[64];
  tpu_ir_op_t op;
  memset(&op, 0, sizeof op);
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_POOL_ARGMAX; op.i1 = 2;
  op.a[0][0] = op.a[0][1] = 2; op.a[1][0] = op.a[1][1] = 2;
  tpu_host_view_t xv = {.data = (char*)x, .dtype = TPU_DTYPE_F32, .rank = 3, .sizes = {1, 4, 4}, .strides = {32, 8, 2}};
  tpu_host_view_t ov = {.data = (char*)o, .dtype = TPU_DTYPE_I64, .rank = 3, .sizes = {1, 2, 2}, .strides = {4, 2, 1}};
  CHECK(!tpu_host_maxpool2d_argmax(&op, &xv, &ov), "strided columns: general kernel");
  xv.strides[2] = 1; xv.strides[1] = 4; xv.strides[0] = 16;
  CHECK(tpu_host_maxpool2d_argmax(&op, &xv, &ov), "contiguous planes: fast");
  op.a[1][0] = 0;
  CHECK(!tpu_host_maxpool2d_argmax(&op, &xv, &ov), "adaptive windows: general kernel");
  op.a[1][0] = 2; op.i1 = 1;
  CHECK(!tpu_host_maxpool2d_argmax(&op, &xv, &ov), "1-d: general kernel");
  op.i1 = 2; xv.dtype = TPU_DTYPE_F64;
  CHECK(!tpu_host_maxpool2d_argmax(&op, &xv, &ov), "f64: general kernel");
}

static void test_rows(void) {
  for (int it = 0; it < 60; ++it) {
    const int dtc = it % 4;
    const int dt = dtc == 0 ? TPU_DTYPE_F32 : dtc == 1 ? TPU_DTYPE_BF16 : dtc == 2 ? TPU_DTYPE_F16 : TPU_DTYPE_F64;
    const size_t es = tpu_dtype_size(dt);
    const int64_t B = 1 + rand() % 9, P = 1 + rand() % 40, n = 1 + rand() % 50, ipitch = n + it % 3;
    int64_t* idx = malloc(8 * (size_t)(B * ipitch));
    for (int64_t i = 0; i < B * ipitch; ++i) idx[i] = rand() % (2 * P) - P; /* negative ones wrap */
    /* src / x values: small integers (exact sums in every dtype) */
    char* src = malloc(es * (size_t)(B * n));
    char* acc1 = calloc((size_t)(B * P), es);
    char* acc2 = calloc((size_t)(B * P), es);
    double* want = calloc((size_t)(B * P), sizeof(double));
    for (int64_t i = 0; i < B * n; ++i) tpu_host_store_f64(src + i * (int64_t)es, dt, (double)(rand() % 7 - 3));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < n; ++j) {
        int64_t kk = idx[b * ipitch + j];
        if (kk < 0) kk += P;
        want[b * P + kk] += tpu_host_load_f64(src + (b * n + j) * (int64_t)es, dt);
      }
    tpu_host_view_t iv = {.data = (char*)idx, .dtype = TPU_DTYPE_I64, .rank = 2, .sizes = {B, n}, .strides = {ipitch, 1}};
    tpu_host_view_t sv = {.data = src, .dtype = dt, .rank = 2, .sizes = {B, n}, .strides = {n, 1}};
    tpu_host_view_t av = {.data = acc1, .dtype = dt, .rank = 2, .sizes = {B, P}, .strides = {P, 1}};
    CHECK(tpu_host_scatter_add_rows(&iv, &sv, &av), "scatter rows taken (%s)", tpu_dtype_name(dt));
    tpu_ir_op_t op;
    memset(&op, 0, sizeof op);
    op.opcode = TPU_IR_SCATTER; op.i0 = 1; op.i1 = 1;
    av.data = acc2;
    tpu_status_t st = tpu_host_k_scatter(&op, &av, &iv, &sv, &av);
    CHECK(st == TPU_OK, "scatter general entry: %s", tpu_status_message(st));
    tpu_status_free(st);
    int ok = 1;
    for (int64_t i = 0; i < B * P; ++i)
      ok &= tpu_host_load_f64(acc1 + i * (int64_t)es, dt) == want[i] && tpu_host_load_f64(acc2 + i * (int64_t)es, dt) == want[i];
    CHECK(ok, "scatter-add rows %s B%lld P%lld n%lld", tpu_dtype_name(dt), (long long)B, (long long)P, (long long)n);
    /* gather: out[b, j] = acc[b, idx[b, j]] */
    char* g1 = malloc(es * (size_t)(B * n));
    tpu_host_view_t gv = {.data = g1, .dtype = dt, .rank = 2, .sizes = {B, n}, .strides = {n, 1}};
    av.data = acc1;
    CHECK(tpu_host_gather_rows(&av, &iv, &gv, 0), "gather rows taken");
    ok = 1;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < n; ++j) {
        int64_t kk = idx[b * ipitch + j];
        if (kk < 0) kk += P;
        ok &= memcmp(g1 + (b * n + j) * (int64_t)es, acc1 + (b * P + kk) * (int64_t)es, es) == 0;
      }
    CHECK(ok, "gather rows %s", tpu_dtype_name(dt));
    /* no wrap (i1 = 1): a negative index goes to the general kernel's error */
    int has_neg = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < n; ++j) has_neg |= idx[b * ipitch + j] < 0;
    if (has_neg) {
      CHECK(!tpu_host_gather_rows(&av, &iv, &gv, 1), "gather rows no-wrap with negative indices: general kernel");
      memset(&op, 0, sizeof op);
      op.opcode = TPU_IR_GATHER; op.i0 = 1; op.i1 = 1;
      st = tpu_host_k_gather(&op, &av, &iv, &gv);
      CHECK(st != TPU_OK, "gather no-wrap negative index reported");
      tpu_status_free(st);
    }
    /* an index out of range: nothing written, the general kernel reports it */
    idx[(B - 1) * ipitch + n - 1] = P;
    memcpy(acc2, acc1, es * (size_t)(B * P));
    av.data = acc2;
    CHECK(!tpu_host_scatter_add_rows(&iv, &sv, &av), "scatter rows with a bad index: general kernel");
    CHECK(memcmp(acc1, acc2, es * (size_t)(B * P)) == 0, "scatter rows with a bad index wrote nothing");
    CHECK(!tpu_host_gather_rows(&av, &iv, &gv, 0), "gather rows with a bad index: general kernel");
    memset(&op, 0, sizeof op);
    op.opcode = TPU_IR_SCATTER; op.i0 = 1; op.i1 = 1;
    st = tpu_host_k_scatter(&op, &av, &iv, &sv, &av);
    CHECK(st != TPU_OK, "scatter bad index reported");
    tpu_status_free(st);
    free(idx); free(src); free(acc1); free(acc2); free(want); free(g1);
  }
  /* overlapping or transposed output rows: general kernel */
  float out[16] = {0}, src[4] = {1, 2, 3, 4};
  int64_t idx[4] = {0, 1, 0, 1};
  tpu_host_view_t iv = {.data = (char*)idx, .dtype = TPU_DTYPE_I64, .rank = 2, .sizes = {2, 2}, .strides = {2, 1}};
  tpu_host_view_t sv = {.data = (char*)src, .dtype = TPU_DTYPE_F32, .rank = 2, .sizes = {2, 2}, .strides = {2, 1}};
  tpu_host_view_t ov = {.data = (char*)out, .dtype = TPU_DTYPE_F32, .rank = 2, .sizes = {2, 4}, .strides = {1, 2}};
  CHECK(!tpu_host_scatter_add_rows(&iv, &sv, &ov), "transposed output: general kernel");
  ov.strides[0] = 2; ov.strides[1] = 1;
  CHECK(!tpu_host_scatter_add_rows(&iv, &sv, &ov), "overlapping rows: general kernel");
  sv.dtype = TPU_DTYPE_I32;
  ov.strides[0] = 4;
  CHECK(!tpu_host_scatter_add_rows(&iv, &sv, &ov), "mixed dtypes: general kernel");
}

int main(void) {
  srand(11);
  tpu_status_t st = tpu_rt_init();
  CHECK(st == TPU_OK, "init");
  tpu_status_free(st);
  test_argmax();
  test_rows();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
