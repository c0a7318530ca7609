/* test_tile.c — the fused elementwise tile kernels: the AVX2 build against the
 * portable build (bit-identical: both are compiled with -ffp-contract=off), and both
 * against a naive per-element reference for every opcode and register class;
 * load/store conversions round-trip every dtype. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "drivers/host/host.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

enum { N = 333 };

static double ref_unary(int op, double a) {
  switch (op) {
    case TPU_IR_NEG: return -a; case TPU_IR_ABS: return fabs(a);
    case TPU_IR_EXP: return exp(a); case TPU_IR_LOG: return log(a); case TPU_IR_SQRT: return sqrt(a);
    case TPU_IR_TANH: return tanh(a); case TPU_IR_LOGISTIC: return 1 / (1 + exp(-a));
    case TPU_IR_FLOOR: return floor(a); case TPU_IR_CEIL: return ceil(a); case TPU_IR_ERF: return erf(a);
    case TPU_IR_SIN: return sin(a); case TPU_IR_COS: return cos(a); case TPU_IR_RSQRT: return 1 / sqrt(a);
    case TPU_IR_RECIPROCAL: return 1 / a; case TPU_IR_EXPM1: return expm1(a); case TPU_IR_LOG1P: return log1p(a);
    default: return NAN;
  }
}
static double ref_binary(int op, double a, double b) {
  switch (op) {
    case TPU_IR_ADD: return a + b; case TPU_IR_SUB: return a - b; case TPU_IR_MUL: return a * b;
    case TPU_IR_DIV: return a / b; case TPU_IR_POW: return pow(a, b); case TPU_IR_ATAN2: return atan2(a, b);
    case TPU_IR_MAX: return isnan(a) || isnan(b) ? NAN : fmax(a, b);
    case TPU_IR_MIN: return isnan(a) || isnan(b) ? NAN : fmin(a, b);
    case TPU_IR_FMOD: return fmod(a, b);
    case TPU_IR_REM: { double m = fmod(a, b); if (m != 0 && ((m < 0) != (b < 0))) m += b; return m; }
    default: return NAN;
  }
}
/* within a few ulps of the reference (rounded to the class precision) */
static int close_to(double got, double want, int f32) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  double tol = (f32 ? 4e-6 : 1e-13) * fmax(1.0, fabs(want));
  return fabs(got - want) <= tol;
}

static void test_float_ops(void) {
  static const int un[] = {TPU_IR_NEG, TPU_IR_ABS, TPU_IR_EXP, TPU_IR_LOG, TPU_IR_SQRT, TPU_IR_TANH, TPU_IR_LOGISTIC,
                           TPU_IR_FLOOR, TPU_IR_CEIL, TPU_IR_ERF, TPU_IR_SIN, TPU_IR_COS, TPU_IR_RSQRT,
                           TPU_IR_RECIPROCAL, TPU_IR_EXPM1, TPU_IR_LOG1P};
  static const int bin[] = {TPU_IR_ADD, TPU_IR_SUB, TPU_IR_MUL, TPU_IR_DIV, TPU_IR_POW, TPU_IR_ATAN2,
                            TPU_IR_MAX, TPU_IR_MIN, TPU_IR_FMOD, TPU_IR_REM};
  float a[N], b[N], o1[N], o2[N];
  double da[N], db[N], d1[N], d2[N];
  for (int i = 0; i < N; ++i) {
    a[i] = (float)((rand() / (double)RAND_MAX - 0.3) * 8); b[i] = (float)((rand() / (double)RAND_MAX - 0.3) * 3);
    if (i % 50 == 7) a[i] = NAN;
    if (i % 60 == 9) b[i] = INFINITY;
    if (i % 70 == 3) b[i] = 0;
    da[i] = a[i]; db[i] = b[i];
  }
  /* every ISA build this CPU can run must match the portable one bit for bit */
  const tpu_host_tile_ops_t *B = &tpu_host_tile_ops_base, *V = tpu_host_tile_ops(), *isa[4];
  int n_isa = 0;
  isa[n_isa++] = V;
  if (tpu_cpu_has_avx2_fma() && V != &tpu_host_tile_ops_avx2) isa[n_isa++] = &tpu_host_tile_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma() && V != &tpu_host_tile_ops_avx512) isa[n_isa++] = &tpu_host_tile_ops_avx512;
  if (tpu_cpu_has_avx512bf16() && tpu_cpu_has_avx2_fma() && V != &tpu_host_tile_ops_avx512bf16) isa[n_isa++] = &tpu_host_tile_ops_avx512bf16;
  for (int k = 0; k < TPU_ARRAY_LEN(un) + TPU_ARRAY_LEN(bin); ++k) {
    tpu_ir_op_t op; memset(&op, 0, sizeof op);
    int is_un = k < TPU_ARRAY_LEN(un);
    op.opcode = is_un ? un[k] : bin[k - TPU_ARRAY_LEN(un)];
    const void* in[2] = {a, b};
    CHECK(B->compute(&op, TPU_DTYPE_F32, o1, TPU_DTYPE_F32, in, N) == 0, "base %s", tpu_ir_opcode_name(op.opcode));
    for (int q = 0; q < n_isa; ++q) {
      CHECK(isa[q]->compute(&op, TPU_DTYPE_F32, o2, TPU_DTYPE_F32, in, N) == 0, "isa %s", tpu_ir_opcode_name(op.opcode));
      CHECK(!memcmp(o1, o2, sizeof o1), "%s: ISA build %d differs from the portable build", tpu_ir_opcode_name(op.opcode), q);
    }
    int ok = 1;
    for (int i = 0; i < N && ok; ++i) {
      double want = is_un ? ref_unary(op.opcode, a[i]) : ref_binary(op.opcode, a[i], b[i]);
      ok = close_to(o1[i], (float)want, 1);
      if (!ok) printf("  %s(%g, %g) = %g, want %g\n", tpu_ir_opcode_name(op.opcode), a[i], b[i], o1[i], want);
    }
    CHECK(ok, "f32 %s vs reference", tpu_ir_opcode_name(op.opcode));
    const void* din[2] = {da, db};
    CHECK(V->compute(&op, TPU_DTYPE_F64, d1, TPU_DTYPE_F64, din, N) == 0 &&
          B->compute(&op, TPU_DTYPE_F64, d2, TPU_DTYPE_F64, din, N) == 0, "f64 %s", tpu_ir_opcode_name(op.opcode));
    ok = !memcmp(d1, d2, sizeof d1);
    for (int i = 0; i < N && ok; ++i) {
      double want = is_un ? ref_unary(op.opcode, da[i]) : ref_binary(op.opcode, da[i], db[i]);
      ok = close_to(d1[i], want, 0);
    }
    CHECK(ok, "f64 %s vs reference", tpu_ir_opcode_name(op.opcode));
  }
}

static void test_int_ops(void) {
  int64_t a[N], b[N], o[N];
  for (int i = 0; i < N; ++i) { a[i] = rand() % 2001 - 1000; b[i] = rand() % 41 - 20; }
  a[0] = INT64_MIN; b[0] = -1; /* the one overflowing division: defined as wrapping, no trap */
  tpu_ir_op_t op; memset(&op, 0, sizeof op);
  const void* in[2] = {a, b};
  op.opcode = TPU_IR_FLOOR_DIV;
  CHECK(tpu_host_tile_ops()->compute(&op, TPU_DTYPE_I64, o, TPU_DTYPE_I64, in, N) == 0, "floor_div");
  int ok = 1;
  for (int i = 1; i < N; ++i) {
    if (b[i] == 0) continue;
    int64_t q = (int64_t)floor((double)a[i] / (double)b[i]);
    ok &= o[i] == q;
  }
  CHECK(ok, "integer floor division matches floor(a / b)");
  op.opcode = TPU_IR_REM;
  tpu_host_tile_ops()->compute(&op, TPU_DTYPE_I64, o, TPU_DTYPE_I64, in, N);
  ok = 1;
  for (int i = 1; i < N; ++i) if (b[i]) ok &= o[i] == a[i] - (int64_t)floor((double)a[i] / (double)b[i]) * b[i];
  CHECK(ok, "integer remainder has the sign of the divisor");
  /* int32 results wrap like C's two's complement conversion */
  int64_t big[2] = {2147483647, 1}, one[2] = {1, 1};
  const void* in2[2] = {big, one};
  op.opcode = TPU_IR_ADD;
  tpu_host_tile_ops()->compute(&op, TPU_DTYPE_I32, o, TPU_DTYPE_I64, in2, 2);
  CHECK(o[0] == INT32_MIN && o[1] == 2, "int32 wraps");
}

static void test_conversions(void) {
  /* every dtype: store then load back through each register class */
  double vals[] = {0, 1, -1, 0.5, 3.75, 1e-3, 100, -128, 255, 65504, 1e30, -0.0};
  for (int dt = 0; dt < TPU_DTYPE_COUNT; ++dt) {
    int ok = 1;
    for (int i = 0; i < TPU_ARRAY_LEN(vals); ++i) {
      char mem[8];
      tpu_host_store_f64(mem, dt, vals[i]);
      double back = tpu_host_load_f64(mem, dt);
      double buf[1];
      tpu_host_tile_ops()->load(buf, TPU_HOST_CLS_F64, mem, dt, 1, 1);
      ok &= (buf[0] == back) || (isnan(buf[0]) && isnan(back));
    }
    CHECK(ok, "tile load agrees with scalar load for %s", tpu_dtype_name(dt));
  }
  /* bf16/f16 rounding: round-to-nearest-even and overflow */
  CHECK(tpu_bf16_to_f32(tpu_f32_to_bf16(1.00390625f)) == 1.0f, "bf16 ties to even");
  CHECK(tpu_f16_to_f32(tpu_f32_to_f16(65520.0f)) == INFINITY, "f16 overflow to inf");
  CHECK(tpu_f16_to_f32(tpu_f32_to_f16(5.96046448e-08f)) == 5.96046448e-08f, "f16 smallest subnormal");
  CHECK(isnan(tpu_bf16_to_f32(tpu_f32_to_bf16(NAN))), "bf16 NaN stays NaN");
  /* float -> int saturates to INT64_MIN like x86 instead of UB */
  float nanv = NAN;
  int64_t iv[1];
  tpu_host_tile_ops()->load(iv, TPU_HOST_CLS_I64, (const char*)&nanv, TPU_DTYPE_F32, 1, 1);
  CHECK(iv[0] == INT64_MIN, "NaN -> int is INT64_MIN");
}


/* ulp distance between two floats (same sign handling via ordered integers) */
static int64_t ulp_diff(float a, float b) {
  if (isnan(a) || isnan(b)) return (isnan(a) && isnan(b)) ? 0 : INT64_MAX;
  int32_t ia, ib;
  memcpy(&ia, &a, 4); memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return llabs((int64_t)ia - (int64_t)ib);
}
/* The vectorized f32 transcendentals against double-precision libm, over dense sweeps
 * and special values. */
static void test_transcendental_ulp(void) {
  enum { M = 200000 };
  static float x[M], y[M];
  struct { int op; double lo, hi; int geometric; int64_t max_ulp; } cases[] = {
    {TPU_IR_EXP, -104, 89, 0, 2}, {TPU_IR_LOG, 1e-44, 3e38, 1, 2}, {TPU_IR_LOG, 0.5, 2.0, 0, 2},
    {TPU_IR_TANH, -12, 12, 0, 3}, {TPU_IR_TANH, -0.7, 0.7, 0, 2}, {TPU_IR_LOGISTIC, -100, 100, 0, 3},
    {TPU_IR_ERF, -0.7, 0.7, 0, 2}, {TPU_IR_ERF, -5, 5, 0, 5},
  };
  for (int c = 0; c < TPU_ARRAY_LEN(cases); ++c) {
    for (int i = 0; i < M; ++i) {
      double t = (double)i / (M - 1);
      x[i] = (float)(cases[c].geometric ? cases[c].lo * pow(cases[c].hi / cases[c].lo, t)
                                        : cases[c].lo + (cases[c].hi - cases[c].lo) * t);
    }
    float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f, 88.7228394f, 88.73f, -104.0f, 1.0f};
    for (int i = 0; i < TPU_ARRAY_LEN(sp); ++i) x[i] = sp[i];
    tpu_ir_op_t op; memset(&op, 0, sizeof op); op.opcode = cases[c].op;
    const void* in[1] = {x};
    tpu_host_tile_ops()->compute(&op, TPU_DTYPE_F32, y, TPU_DTYPE_F32, in, M);
    int64_t worst = 0; float wx = 0;
    for (int i = 0; i < M; ++i) {
      double r = cases[c].op == TPU_IR_EXP ? exp(x[i]) : cases[c].op == TPU_IR_LOG ? log(x[i])
               : cases[c].op == TPU_IR_TANH ? tanh(x[i]) : cases[c].op == TPU_IR_ERF ? erf(x[i])
               : 1.0 / (1.0 + exp(-(double)x[i]));
      int64_t d = ulp_diff(y[i], (float)r);
      if (fabs((double)y[i] - r) < 1e-37) d = 0; /* subnormal results: absolute error only */
      if (d > worst) { worst = d; wx = x[i]; }
    }
    CHECK(worst <= cases[c].max_ulp, "%s: %lld ulp at x=%g (limit %lld)", tpu_ir_opcode_name(cases[c].op),
          (long long)worst, wx, (long long)cases[c].max_ulp);
  }
}

int main(void) {
  srand(42);
  test_float_ops();
  test_int_ops();
  test_conversions();
  test_transcendental_ulp();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail != 0;
}
