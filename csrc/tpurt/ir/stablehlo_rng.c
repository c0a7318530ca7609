/* stablehlo_rng.c — TPU_IR_RNG as plain integer StableHLO: Philox4x32-10 with the host
 * driver's counter layout (runtime/generator.c, drivers/host/kernels.c), so uniform and
 * integer draws are bit-identical to the host and normals differ only by the transcendental
 * functions' rounding.
 *
 * Element i of the output (row-major) is lane i % 4 of block g = i / 4, block g being
 * philox(key = seed, counter = (lo32(g), hi32(g), lo32(offset), hi32(offset))). f64 and
 * 64-bit draws take a second block at offset ^ 2^63. 32-bit words are held in i64 values
 * in [0, 2^32): products of two words wrap exactly like u64 arithmetic. */
#include "ir/stablehlo_impl.h"

#define I64 TPU_DTYPE_I64
#define PHILOX_M0 0xD2511F53ull
#define PHILOX_M1 0xCD9E8D57ull
#define PHILOX_W0 0x9E3779B9ull
#define PHILOX_W1 0xBB67AE85ull

static int k64(shlo_t* P, int like, uint64_t v) {
  return shlo_const(P, shlo_type(P, like), 0, (int64_t)v);
}
static int lo32(shlo_t* P, int x) { return shlo_bin(P, "stablehlo.and", x, k64(P, x, 0xffffffffull)); }
static int hi32(shlo_t* P, int x) { return shlo_bin(P, "stablehlo.shift_right_logical", x, k64(P, x, 32)); }

/* 4 words [G] of philox(seed, offset, g = 0..G-1); seed/offset are rank-0 i64 values */
static void philox(shlo_t* P, int seed, int offset, int64_t G, int out[4]) {
  tpu_ir_type_t tg = shlo_ty(I64, 1, &G);
  int g = shlo_iota(P, &tg, 0);
  int off = shlo_bcast(P, offset, 1, &G, NULL), sd = shlo_bcast(P, seed, 1, &G, NULL);
  int c0 = lo32(P, g), c1 = hi32(P, g), c2 = lo32(P, off), c3 = hi32(P, off);
  int k0 = lo32(P, sd), k1 = hi32(P, sd);
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 = lo32(P, shlo_bin(P, "stablehlo.add", k0, k64(P, k0, PHILOX_W0)));
      k1 = lo32(P, shlo_bin(P, "stablehlo.add", k1, k64(P, k1, PHILOX_W1)));
    }
    int p0 = shlo_bin(P, "stablehlo.multiply", c0, k64(P, c0, PHILOX_M0));
    int p1 = shlo_bin(P, "stablehlo.multiply", c2, k64(P, c2, PHILOX_M1));
    int n0 = shlo_bin(P, "stablehlo.xor", shlo_bin(P, "stablehlo.xor", hi32(P, p1), c1), k0);
    int n2 = shlo_bin(P, "stablehlo.xor", shlo_bin(P, "stablehlo.xor", hi32(P, p0), c3), k1);
    c0 = n0; c1 = lo32(P, p1); c2 = n2; c3 = lo32(P, p0);
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* 53-bit uniform double from words (a, b): ((a << 32 | b) >> 11) * 2^-53 */
static int u53(shlo_t* P, int a, int b) {
  int w = shlo_bin(P, "stablehlo.or", shlo_bin(P, "stablehlo.shift_left", a, k64(P, a, 32)), b);
  int m = shlo_convert(P, shlo_bin(P, "stablehlo.shift_right_logical", w, k64(P, w, 11)), TPU_DTYPE_F64);
  return shlo_bin(P, "stablehlo.multiply", m, shlo_const_like(P, m, TPU_DTYPE_F64, 1.0 / 9007199254740992.0));
}
/* Box-Muller on (u, v) in dt (f32 or f64): rad = sqrt(-2 log(1 - u)), th = 2 pi v */
static void box_muller(shlo_t* P, int u, int v, int dt, int* out_c, int* out_s) {
  int one = shlo_const_like(P, u, dt, 1.0), m2 = shlo_const_like(P, u, dt, -2.0);
  int rad = shlo_un(P, "stablehlo.sqrt", shlo_bin(P, "stablehlo.multiply", m2,
                    shlo_un(P, "stablehlo.log", shlo_bin(P, "stablehlo.subtract", one, u))));
  int th = shlo_bin(P, "stablehlo.multiply", shlo_const_like(P, v, dt, 6.2831853071795865), v);
  *out_c = shlo_bin(P, "stablehlo.multiply", rad, shlo_un(P, "stablehlo.cosine", th));
  *out_s = shlo_bin(P, "stablehlo.multiply", rad, shlo_un(P, "stablehlo.sine", th));
}

int shlo_rng(shlo_t* P, const tpu_ir_op_t* op, int seed, int offset) {
  const tpu_ir_type_t* t = &op->type;
  int mode = (int)op->i0, dt = t->dtype;
  if (mode >= 2 ? dt != I64 : !tpu_dtype_is_floating(dt))
    return shlo_fail(P, TPU_ERR(UNSUPPORTED, "stablehlo: rng mode %d with dtype %d", mode, dt));
  int64_t N = tpu_ir_numel(t), G = (N + 3) / 4;
  if (N == 0) return shlo_const(P, t, 0, 0);
  seed = shlo_convert(P, seed, I64); offset = shlo_convert(P, offset, I64);
  int r[4], lane[4];
  philox(P, seed, offset, G, r);
  int need2 = mode == 3 || (dt == TPU_DTYPE_F64 && mode <= 1);
  int r2[4] = {-1, -1, -1, -1};
  if (need2) {
    tpu_ir_type_t t0 = shlo_ty(I64, 0, NULL);
    int flip = shlo_const(P, &t0, 0, INT64_MIN); /* offset ^ 2^63 */
    philox(P, seed, shlo_bin(P, "stablehlo.xor", offset, flip), G, r2);
  }
  if (mode == 2) for (int l = 0; l < 4; ++l) lane[l] = r[l];
  else if (mode == 3)
    for (int l = 0; l < 4; ++l) lane[l] = shlo_bin(P, "stablehlo.or", shlo_bin(P, "stablehlo.shift_left", r[l], k64(P, r[l], 32)), r2[l]);
  else if (dt == TPU_DTYPE_F64) {
    lane[0] = u53(P, r[0], r[1]); lane[1] = u53(P, r[2], r[3]);
    lane[2] = u53(P, r2[0], r2[1]); lane[3] = u53(P, r2[2], r2[3]);
    if (mode == 1) for (int l = 0; l < 4; l += 2) box_muller(P, lane[l], lane[l + 1], TPU_DTYPE_F64, &lane[l], &lane[l + 1]);
  } else {
    for (int l = 0; l < 4; ++l) { /* top 24 bits */
      int f = shlo_convert(P, shlo_bin(P, "stablehlo.shift_right_logical", r[l], k64(P, r[l], 8)), TPU_DTYPE_F32);
      lane[l] = shlo_bin(P, "stablehlo.multiply", f, shlo_const_like(P, f, TPU_DTYPE_F32, 1.0 / 16777216.0));
    }
    if (mode == 1) for (int l = 0; l < 4; l += 2) box_muller(P, lane[l], lane[l + 1], TPU_DTYPE_F32, &lane[l], &lane[l + 1]);
    else if (dt == TPU_DTYPE_BF16 || dt == TPU_DTYPE_F16) { /* uniform stays < 1 after rounding */
      double top = dt == TPU_DTYPE_BF16 ? 0.99609375 : 0.99951171875;
      for (int l = 0; l < 4; ++l) {
        int rounded = shlo_convert(P, shlo_convert(P, lane[l], dt), TPU_DTYPE_F32);
        int ge = shlo_cmp(P, TPU_IR_CMP_GE, rounded, shlo_const_like(P, rounded, TPU_DTYPE_F32, 1.0));
        lane[l] = shlo_select(P, ge, shlo_const_like(P, rounded, TPU_DTYPE_F32, top), lane[l]);
      }
    }
  }
  int64_t g1[2] = {G, 1}, flat = 4 * G;
  int cols[4];
  for (int l = 0; l < 4; ++l) cols[l] = shlo_reshape(P, shlo_convert(P, lane[l], dt), 2, g1);
  int all = shlo_reshape(P, shlo_concat(P, 4, cols, 1), 1, &flat);
  if (flat != N) all = shlo_slice_dim(P, all, 0, 0, N);
  return shlo_reshape(P, all, t->rank, t->dims);
}
