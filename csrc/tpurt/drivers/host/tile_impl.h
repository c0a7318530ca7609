/* tile_impl.h — elementwise tile kernels, included once per ISA by tile_base.c and
 * tile_avx2.c / tile_avx512.c / tile_avx512bf16.c with TILE_SUFFIX defined. Register buffers hold one class:
 * float (f32/f16/bf16), double (f64) or int64 (integers and bool, bool as 0/1).
 * The loops are written so that gcc vectorizes them for the ISA of the file;
 * -ffp-contract=off keeps rounding identical across ISAs. */
#include <math.h>

#include "drivers/host/host.h"
#include "drivers/host/vmath.h"

#define TILE_CAT2(a, b) a##b
#define TILE_CAT(a, b) TILE_CAT2(a, b)
#define TFN(name) TILE_CAT(name, TILE_SUFFIX)

#if defined(__F16C__)
#include <immintrin.h>
/* Contiguous f16 <-> f32 rows with F16C (the AVX2 / AVX-512 builds), the same bits as vmath.h's branch-free
 * forms: vcvtph2ps quiets a signaling NaN (sets f32 bit 22), which common.h's conversion keeps signaling, so those
 * lanes get the bit cleared again; vcvtps2ph rounds to nearest-even and keeps NaN payloads as tpu_f32_to_f16. */
static void TFN(tile_h2f)(float* restrict o, const uint16_t* s, int64_t n) {
  const __m256i m7e = _mm256_set1_epi32(0x7e00), m7c = _mm256_set1_epi32(0x7c00), m1ff = _mm256_set1_epi32(0x1ff);
  const __m256i q22 = _mm256_set1_epi32(0x400000), z = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128((const __m128i*)(const void*)(s + i));
    const __m256i w = _mm256_cvtepu16_epi32(h);
    const __m256i snan = _mm256_andnot_si256(_mm256_cmpeq_epi32(_mm256_and_si256(w, m1ff), z),
                                             _mm256_cmpeq_epi32(_mm256_and_si256(w, m7e), m7c));
    const __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    _mm256_storeu_ps(o + i, _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(snan, q22), f)));
  }
  for (; i < n; ++i) o[i] = tpu_f16_to_f32(s[i]);
}
static void TFN(tile_f2h)(uint16_t* o, const float* restrict s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i*)(void*)(o + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) o[i] = tpu_f32_to_f16(s[i]);
}
#endif

#if defined(__AVX512BF16__)
#include "drivers/host/gemm_avx512.h" /* tpu_avx512bf16_round32 */
/* contiguous f32 -> bf16 (the tail through masked loads / stores) */
static void TFN(tile_f2bf)(uint16_t* o, const float* restrict s, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(o + i, tpu_avx512bf16_round32(_mm512_loadu_ps(s + i), _mm512_loadu_ps(s + i + 16)));
  for (; i < n; i += 16) {
    const __mmask16 mk = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(mk, s + i);
    _mm256_mask_storeu_epi16(o + i, mk, _mm512_castsi512_si256(tpu_avx512bf16_round32(v, v)));
  }
}
/* x rounded to bf16 in place (a CONVERT to bf16 computed in registers) */
static void TFN(tile_round_bf16)(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i r = tpu_avx512bf16_round32(_mm512_loadu_ps(x + i), _mm512_loadu_ps(x + i + 16));
    _mm512_storeu_si512(x + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(r)), 16));
    _mm512_storeu_si512(x + i + 16, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(r, 1)), 16));
  }
  for (; i < n; ++i) x[i] = tpu_bf16_to_f32(tpu_f32_to_bf16(x[i]));
}
#endif

#if defined(__AVX512BF16__)
/* bf16 OP bf16 -> bf16 in one pass (tpu_host_tile_ops_t.bin_bf16): each 32 elements widened, OP in f32, rounded
 * by tile_f2bf's conversion, so the bits of tile_load + tile_compute + tile_store. 524K elements, one thread, L2:
 * 54 us vs 86 through 1024-element f32 tiles (eager bf16 a * b). Only this build has it: elsewhere the tile path. */
static inline __m512 TFN(bf16_lo)(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16)); }
static inline __m512 TFN(bf16_hi)(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16)); }
/* x + y, x * y with x the first source (its NaN wins over y's, as in tile_compute's loops, which test_tile_convert
 * checks): gcc picks the operand order of a commutative _mm512_add_ps / _mm512_mul_ps itself */
static inline __m512 TFN(add_ab)(__m512 x, __m512 y) { __m512 r; __asm__("vaddps %2, %1, %0" : "=v"(r) : "v"(x), "v"(y)); return r; }
static inline __m512 TFN(mul_ab)(__m512 x, __m512 y) { __m512 r; __asm__("vmulps %2, %1, %0" : "=v"(r) : "v"(x), "v"(y)); return r; }
static int TFN(tile_bin_bf16)(int opcode, uint16_t* o, const uint16_t* a, const uint16_t* b, int64_t n) {
  int64_t i = 0;
#define BIN_BF16(VOP, EXPR)                                                                                  \
  for (; i + 32 <= n; i += 32) {                                                                             \
    const __m512i va = _mm512_loadu_si512(a + i), vb = _mm512_loadu_si512(b + i);                           \
    _mm512_storeu_si512(o + i, tpu_avx512bf16_round32(VOP(TFN(bf16_lo)(va), TFN(bf16_lo)(vb)),               \
                                                      VOP(TFN(bf16_hi)(va), TFN(bf16_hi)(vb))));             \
  }                                                                                                          \
  for (; i < n; ++i) { const float x = tpu_bf16_to_f32(a[i]), y = tpu_bf16_to_f32(b[i]); o[i] = tpu_f32_to_bf16(EXPR); } \
  return 0;
  switch (opcode) {
    case TPU_IR_ADD: BIN_BF16(TFN(add_ab), x + y)
    case TPU_IR_SUB: BIN_BF16(_mm512_sub_ps, x - y)
    case TPU_IR_MUL: BIN_BF16(TFN(mul_ab), x * y)
    case TPU_IR_DIV: BIN_BF16(_mm512_div_ps, x / y)
    default: return -1;
  }
#undef BIN_BF16
}
static int TFN(tile_bin_bf16_scalar)(int opcode, uint16_t* o, const uint16_t* a, float s, int s_first, int64_t n) {
  int64_t i = 0;
  const __m512 vs = _mm512_set1_ps(s);
#define BIN_BF16S(VOP, EXPR)                                                                                 \
  for (; i + 32 <= n; i += 32) {                                                                             \
    const __m512i va = _mm512_loadu_si512(a + i);                                                            \
    const __m512 x0 = s_first ? vs : TFN(bf16_lo)(va), y0 = s_first ? TFN(bf16_lo)(va) : vs;               \
    const __m512 x1 = s_first ? vs : TFN(bf16_hi)(va), y1 = s_first ? TFN(bf16_hi)(va) : vs;               \
    _mm512_storeu_si512(o + i, tpu_avx512bf16_round32(VOP(x0, y0), VOP(x1, y1)));                            \
  }                                                                                                          \
  for (; i < n; ++i) { const float v = tpu_bf16_to_f32(a[i]), x = s_first ? s : v, y = s_first ? v : s; o[i] = tpu_f32_to_bf16(EXPR); } \
  return 0;
  switch (opcode) {
    case TPU_IR_ADD: BIN_BF16S(TFN(add_ab), x + y)
    case TPU_IR_SUB: BIN_BF16S(_mm512_sub_ps, x - y)
    case TPU_IR_MUL: BIN_BF16S(TFN(mul_ab), x * y)
    case TPU_IR_DIV: BIN_BF16S(_mm512_div_ps, x / y)
    default: return -1;
  }
#undef BIN_BF16S
}
#endif

static void TFN(tile_load)(void* dst, int cls, const char* src, int dtype, int64_t st, int64_t n) {
#if defined(__F16C__)
  if (dtype == TPU_DTYPE_F16 && cls == TPU_HOST_CLS_F32 && st == 1) { TFN(tile_h2f)(dst, (const uint16_t*)(const void*)src, n); return; }
#endif
#define LOAD_LOOP(DT, CT, EXPR)                                          \
  do {                                                                   \
    DT* restrict o = (DT*)dst; const CT* s = (const CT*)src;             \
    if (st == 1) { for (int64_t i = 0; i < n; ++i) { CT v = s[i]; o[i] = (DT)(EXPR); } } \
    else if (st == 0) { CT v = s[0]; DT x = (DT)(EXPR); for (int64_t i = 0; i < n; ++i) o[i] = x; } \
    else { for (int64_t i = 0; i < n; ++i) { CT v = s[i * st]; o[i] = (DT)(EXPR); } } \
  } while (0)
#define LOAD_ALL(DT)                                                              \
  switch (dtype) {                                                                \
    case TPU_DTYPE_F32: LOAD_LOOP(DT, float, v); break;                           \
    case TPU_DTYPE_F64: LOAD_LOOP(DT, double, v); break;                          \
    case TPU_DTYPE_BF16: LOAD_LOOP(DT, uint16_t, tpu_bf16_to_f32(v)); break;      \
    case TPU_DTYPE_F16: LOAD_LOOP(DT, uint16_t, tpu_f16_to_f32(v)); break;       \
    case TPU_DTYPE_I64: LOAD_LOOP(DT, int64_t, v); break;                         \
    case TPU_DTYPE_I32: LOAD_LOOP(DT, int32_t, v); break;                         \
    case TPU_DTYPE_I16: LOAD_LOOP(DT, int16_t, v); break;                         \
    case TPU_DTYPE_I8: LOAD_LOOP(DT, int8_t, v); break;                           \
    case TPU_DTYPE_U8: LOAD_LOOP(DT, uint8_t, v); break;                          \
    case TPU_DTYPE_BOOL: LOAD_LOOP(DT, uint8_t, v != 0); break;                   \
  }
  if (cls == TPU_HOST_CLS_F32) { LOAD_ALL(float) }
  else if (cls == TPU_HOST_CLS_F64) { LOAD_ALL(double) }
  else {
    /* float -> int goes through a saturating cast (C casts of NaN/out-of-range are UB;
     * x86 gives INT64_MIN, which we reproduce). */
    int64_t* restrict o = (int64_t*)dst;
    if (tpu_dtype_is_floating(dtype)) {
      for (int64_t i = 0; i < n; ++i) {
        double v = tpu_host_load_f64(src + i * st * (int64_t)tpu_dtype_size(dtype), dtype);
        o[i] = (v >= -9.2233720368547758e18 && v < 9.2233720368547758e18) ? (int64_t)v : INT64_MIN;
      }
    } else { LOAD_ALL(int64_t) }
  }
#undef LOAD_ALL
#undef LOAD_LOOP
}

static inline int64_t tile_f2i(double v) {
  return (v >= -9.2233720368547758e18 && v < 9.2233720368547758e18) ? (int64_t)v : INT64_MIN;
}

static void TFN(tile_store)(char* dst, int dtype, int64_t st, const void* src, int cls, int64_t n) {
#if defined(__AVX512BF16__)
  if (dtype == TPU_DTYPE_BF16 && cls == TPU_HOST_CLS_F32 && st == 1) { TFN(tile_f2bf)((uint16_t*)(void*)dst, src, n); return; }
#endif
#if defined(__F16C__)
  if (dtype == TPU_DTYPE_F16 && cls == TPU_HOST_CLS_F32 && st == 1) { TFN(tile_f2h)((uint16_t*)(void*)dst, src, n); return; }
#endif
#define STORE_LOOP(DT, CT, EXPR)                                               \
  do {                                                                         \
    DT* o = (DT*)dst; const CT* restrict s = (const CT*)src;                   \
    if (st == 1) { for (int64_t i = 0; i < n; ++i) { CT v = s[i]; o[i] = (DT)(EXPR); } } \
    else { for (int64_t i = 0; i < n; ++i) { CT v = s[i]; o[i * st] = (DT)(EXPR); } } \
  } while (0)
#define STORE_ALL(CT, TOINT)                                                        \
  switch (dtype) {                                                                  \
    case TPU_DTYPE_F32: STORE_LOOP(float, CT, v); break;                            \
    case TPU_DTYPE_F64: STORE_LOOP(double, CT, v); break;                           \
    case TPU_DTYPE_BF16: STORE_LOOP(uint16_t, CT, tpu_f32_to_bf16((float)v)); break;\
    case TPU_DTYPE_F16: STORE_LOOP(uint16_t, CT, tpu_f32_to_f16((float)v)); break; \
    case TPU_DTYPE_I64: STORE_LOOP(int64_t, CT, TOINT(v)); break;                   \
    case TPU_DTYPE_I32: STORE_LOOP(int32_t, CT, (uint32_t)TOINT(v)); break;         \
    case TPU_DTYPE_I16: STORE_LOOP(int16_t, CT, (uint16_t)TOINT(v)); break;         \
    case TPU_DTYPE_I8: STORE_LOOP(int8_t, CT, (uint8_t)TOINT(v)); break;            \
    case TPU_DTYPE_U8: STORE_LOOP(uint8_t, CT, (uint8_t)TOINT(v)); break;           \
    case TPU_DTYPE_BOOL: STORE_LOOP(uint8_t, CT, v != 0); break;                    \
  }
#define ID(v) (v)
  if (cls == TPU_HOST_CLS_F32) { STORE_ALL(float, tile_f2i) }
  else if (cls == TPU_HOST_CLS_F64) { STORE_ALL(double, tile_f2i) }
  else { STORE_ALL(int64_t, ID) }
#undef ID
#undef STORE_ALL
#undef STORE_LOOP
}

/* Rounds a float buffer to the precision of dtype (bf16/f16 values computed in f32). */
static void TFN(round_to)(float* x, int dtype, int64_t n) {
  if (dtype == TPU_DTYPE_BF16) {
#if defined(__AVX512BF16__)
    TFN(tile_round_bf16)(x, n);
#else
    for (int64_t i = 0; i < n; ++i) x[i] = tpu_bf16_to_f32(tpu_f32_to_bf16(x[i]));
#endif
  }
  else if (dtype == TPU_DTYPE_F16) {
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) /* finite and NaN lanes alike: cvtph2ps only quiets a NaN cvtps2ph already quieted */
      _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
#endif
    for (; i < n; ++i) x[i] = tpu_f16_to_f32(tpu_f32_to_f16(x[i]));
  }
}
/* Wraps an int64 buffer to the range of a narrower integer dtype. */
static void TFN(wrap_to)(int64_t* x, int dtype, int64_t n) {
  switch (dtype) {
    case TPU_DTYPE_I32: for (int64_t i = 0; i < n; ++i) x[i] = (int32_t)(uint32_t)x[i]; break;
    case TPU_DTYPE_I16: for (int64_t i = 0; i < n; ++i) x[i] = (int16_t)(uint16_t)x[i]; break;
    case TPU_DTYPE_I8: for (int64_t i = 0; i < n; ++i) x[i] = (int8_t)(uint8_t)x[i]; break;
    case TPU_DTYPE_U8: for (int64_t i = 0; i < n; ++i) x[i] = (uint8_t)x[i]; break;
    case TPU_DTYPE_BOOL: for (int64_t i = 0; i < n; ++i) x[i] = x[i] != 0; break;
    default: break;
  }
}

static inline float tile_signf(float v) { return (float)((v > 0) - (v < 0)); } /* sign(NaN) = 0 as PyTorch */
static inline double tile_sign(double v) { return (double)((v > 0) - (v < 0)); }
static inline double tile_sigm(double v) { return 1.0 / (1.0 + exp(-v)); }
/* Python-style (floor) modulus, as torch.remainder. */
static inline float tile_remf(float a, float b) {
  float m = fmodf(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}
static inline double tile_rem(double a, double b) {
  double m = fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}
static inline int64_t tile_irem(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return 0;
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}
static inline int64_t tile_ifloordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return (int64_t)(0 - (uint64_t)a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
static inline int64_t tile_ipow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
  uint64_t r = 1, x = (uint64_t)b;
  while (e) { if (e & 1) r *= x; x *= x; e >>= 1; }
  return (int64_t)r;
}
static inline float tile_erfinvf(float y) { /* Giles' approximation + 2 Newton steps in double */
  if (y <= -1) return y == -1 ? -INFINITY : NAN;
  if (y >= 1) return y == 1 ? INFINITY : NAN;
  double w = -log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) { w -= 2.5; x = 2.81022636e-08; x = 3.43273939e-07 + x * w; x = -3.5233877e-06 + x * w;
    x = -4.39150654e-06 + x * w; x = 0.00021858087 + x * w; x = -0.00125372503 + x * w;
    x = -0.00417768164 + x * w; x = 0.246640727 + x * w; x = 1.50140941 + x * w; }
  else { w = sqrt(w) - 3.0; x = -0.000200214257; x = 0.000100950558 + x * w; x = 0.00134934322 + x * w;
    x = -0.00367342844 + x * w; x = 0.00573950773 + x * w; x = -0.0076224613 + x * w;
    x = 0.00943887047 + x * w; x = 1.00167406 + x * w; x = 2.83297682 + x * w; }
  x *= y;
  for (int k = 0; k < 2; ++k) x -= (erf(x) - y) / (1.1283791670955126 * exp(-x * x));
  return (float)x;
}
static inline double tile_digamma(double x) {
  if (x == 0) return copysign(INFINITY, -x);
  if (x < 0) {
    if (x == floor(x)) return NAN;
    return tile_digamma(1 - x) - M_PI / tan(M_PI * x);
  }
  double r = 0;
  while (x < 6) { r -= 1 / x; x += 1; }
  double f = 1 / (x * x);
  return r + log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))));
}

/* Branch-free f32 exp/log/tanh (Cephes-style range reduction + minimax polynomials) so
 * the loops vectorize; specials (NaN, +-inf, 0, subnormals) handled with selects.
 * Accuracy vs libm is checked in csrc/tpurt/tests/test_tile.c (<= 2 ulp over sweeps). */
static inline float tile_logf(float x) {
  int sub = x < 1.17549435e-38f;
  float xs = sub ? x * 8388608.0f : x;
  uint32_t u = tile_f2bits(xs);
  int32_t e = (int32_t)((u >> 23) & 0xffu) - 127 - (sub ? 23 : 0);
  float m = tile_bits2f((u & 0x007fffffu) | 0x3f800000u);
  int big = m > 1.41421356237f;
  m = big ? m * 0.5f : m;
  e += big;
  float f = m - 1.0f, z = f * f;
  float y = 7.0376836292E-2f;
  y = y * f - 1.1514610310E-1f; y = y * f + 1.1676998740E-1f; y = y * f - 1.2420140846E-1f;
  y = y * f + 1.4249322787E-1f; y = y * f - 1.6668057665E-1f; y = y * f + 2.0000714765E-1f;
  y = y * f - 2.4999993993E-1f; y = y * f + 3.3333331174E-1f;
  y = y * f * z;
  float fe = (float)e;
  y = y + -2.12194440e-4f * fe;
  y = y - 0.5f * z;
  float r = f + y;
  r = r + 0.693359375f * fe;
  r = x < 0.0f ? NAN : r;
  r = x == 0.0f ? -INFINITY : r;
  r = x == INFINITY ? INFINITY : r;
  return x != x ? x : r;
}
static inline float tile_tanhf(float x) {
  float z = x * x;
  float p = -5.70498872745E-3f;
  p = p * z + 2.06390887954E-2f; p = p * z - 5.37397155531E-2f;
  p = p * z + 1.33314422036E-1f; p = p * z - 3.33332819422E-1f;
  float small = x + x * z * p;
  float ax = x < 0 ? -x : x;
  float e = tile_expf(2.0f * (ax > 9.0f ? 9.0f : ax));
  float t = 1.0f - 2.0f / (e + 1.0f);
  t = ax > 9.0f ? 1.0f : t;
  float big = x < 0 ? -t : t;
  return ax < 0.625f ? small : (x != x ? x : big);
}
/* erf: Maclaurin series below 0.75 (relative accuracy near 0), Abramowitz-Stegun 7.1.26
 * above (absolute error <= 1.5e-7, the approximation PyTorch's vectorized CPU erf uses). */
static inline float tile_erff(float x) {
  float ax = x < 0 ? -x : x, z = x * x;
  float s = 1.0f / 6894720.0f;
  s = s * z - 1.0f / 685440.0f; s = s * z + 1.0f / 75600.0f; s = s * z - 1.0f / 9360.0f;
  s = s * z + 1.0f / 1320.0f; s = s * z - 1.0f / 216.0f; s = s * z + 1.0f / 42.0f;
  s = s * z - 1.0f / 10.0f; s = s * z + 1.0f / 3.0f;
  float small = 1.12837916709551257f * (x - x * z * s);
  float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f; p = p * t + 1.421413741f; p = p * t - 0.284496736f; p = p * t + 0.254829592f;
  float big = 1.0f - p * t * tile_expf(-z);
  big = x < 0 ? -big : big;
  return ax < 0.75f ? small : (x != x ? x : big);
}

static inline float tile_sigmoidf(float x) { return 1.0f / (1.0f + tile_expf(-x)); }

/* Float-class unary/binary loops: T = float or double, F = f or empty suffix. */
#define FLOAT_OPS(T, SFX, SIGN, SIGM, REM, EXP, LOG, TANH, ERF)                                                      \
  switch (op->opcode) {                                                                         \
    case TPU_IR_NEG: U(-a); case TPU_IR_ABS: U(fabs##SFX(a)); case TPU_IR_SIGN: U(SIGN(a));      \
    case TPU_IR_EXP: U(EXP(a)); case TPU_IR_EXPM1: U(expm1##SFX(a));                       \
    case TPU_IR_LOG: U(LOG(a)); case TPU_IR_LOG1P: U(log1p##SFX(a));                       \
    case TPU_IR_SQRT: U(sqrt##SFX(a)); case TPU_IR_RSQRT: U((T)1 / sqrt##SFX(a));               \
    case TPU_IR_SIN: U(sin##SFX(a)); case TPU_IR_COS: U(cos##SFX(a)); case TPU_IR_TAN: U(tan##SFX(a)); \
    case TPU_IR_TANH: U(TANH(a)); case TPU_IR_LOGISTIC: U(SIGM(a));                        \
    case TPU_IR_FLOOR: U(floor##SFX(a)); case TPU_IR_CEIL: U(ceil##SFX(a));                     \
    case TPU_IR_ROUND_EVEN: U(nearbyint##SFX(a)); case TPU_IR_TRUNC: U(trunc##SFX(a));          \
    case TPU_IR_ERF: U(ERF(a)); case TPU_IR_ASIN: U(asin##SFX(a)); case TPU_IR_ACOS: U(acos##SFX(a)); \
    case TPU_IR_ATAN: U(atan##SFX(a)); case TPU_IR_SINH: U(sinh##SFX(a)); case TPU_IR_COSH: U(cosh##SFX(a)); \
    case TPU_IR_ASINH: U(asinh##SFX(a)); case TPU_IR_ACOSH: U(acosh##SFX(a));                   \
    case TPU_IR_ATANH: U(atanh##SFX(a)); case TPU_IR_ERFINV: U((T)tile_erfinvf((float)a));      \
    case TPU_IR_LGAMMA: U(lgamma##SFX(a)); case TPU_IR_DIGAMMA: U((T)tile_digamma(a));          \
    case TPU_IR_RECIPROCAL: U((T)1 / a);                                                        \
    case TPU_IR_ADD: B(a + b); case TPU_IR_SUB: B(a - b); case TPU_IR_MUL: B(a * b);            \
    case TPU_IR_DIV: B(a / b); case TPU_IR_REM: B(REM(a, b)); case TPU_IR_FMOD: B(fmod##SFX(a, b)); \
    case TPU_IR_POW: { /* x ** 2 (RMSNorm's x.pow(2)) as x * x, as PyTorch's CPU kernel: vectorized, exact */ \
      const T* restrict x0 = in[0]; const T* restrict x1 = in[1]; int sq = 1;                   \
      for (int64_t i = 0; i < n; ++i) sq &= x1[i] == (T)2;                                      \
      if (sq) { for (int64_t i = 0; i < n; ++i) o[i] = x0[i] * x0[i]; return 0; }               \
      B(pow##SFX(a, b)); }                                                                       \
    case TPU_IR_ATAN2: B(atan2##SFX(a, b));                                                     \
    case TPU_IR_MAX: B((a != a) ? a : ((b != b) ? b : (a > b ? a : b)));                        \
    case TPU_IR_MIN: B((a != a) ? a : ((b != b) ? b : (a < b ? a : b)));                        \
    case TPU_IR_FLOOR_DIV: B(floor##SFX(a / b));                                                \
    case TPU_IR_CLAMP: { const T *lo = in[0], *x = in[1], *hi = in[2];                          \
      for (int64_t i = 0; i < n; ++i) { T v = x[i]; v = (v != v) ? v : (v < lo[i] ? lo[i] : v); \
        o[i] = (v != v) ? v : (v > hi[i] ? hi[i] : v); } return 0; }                             \
    default: return -1;                                                                         \
  }

#define U(EXPR) { const T* restrict x0 = in[0]; for (int64_t i = 0; i < n; ++i) { T a = x0[i]; o[i] = (EXPR); } return 0; }
#define B(EXPR) { const T* restrict x0 = in[0]; const T* restrict x1 = in[1]; \
  for (int64_t i = 0; i < n; ++i) { T a = x0[i], b = x1[i]; o[i] = (EXPR); } return 0; }

static int TFN(compute_f32)(const tpu_ir_op_t* op, float* restrict o, const void* const* in, int64_t n) {
  typedef float T;
  FLOAT_OPS(float, f, tile_signf, tile_sigmoidf, tile_remf, tile_expf, tile_logf, tile_tanhf, tile_erff)
}
static int TFN(compute_f64)(const tpu_ir_op_t* op, double* restrict o, const void* const* in, int64_t n) {
  typedef double T;
  FLOAT_OPS(double, , tile_sign, tile_sigm, tile_rem, exp, log, tanh, erf)
}
static int TFN(compute_i64)(const tpu_ir_op_t* op, int64_t* restrict o, const void* const* in, int64_t n) {
  typedef int64_t T;
  switch (op->opcode) {
    case TPU_IR_NEG: U((int64_t)(0 - (uint64_t)a)); case TPU_IR_ABS: U(a < 0 ? (int64_t)(0 - (uint64_t)a) : a);
    case TPU_IR_SIGN: U((a > 0) - (a < 0)); case TPU_IR_NOT: U(~a);
    case TPU_IR_ADD: B((int64_t)((uint64_t)a + (uint64_t)b)); case TPU_IR_SUB: B((int64_t)((uint64_t)a - (uint64_t)b));
    case TPU_IR_MUL: B((int64_t)((uint64_t)a * (uint64_t)b));
    case TPU_IR_DIV: B(b == 0 ? 0 : (b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b));
    case TPU_IR_FMOD: B((b == 0 || b == -1) ? 0 : a % b);
    case TPU_IR_REM: B(tile_irem(a, b)); case TPU_IR_FLOOR_DIV: B(tile_ifloordiv(a, b));
    case TPU_IR_POW: B(tile_ipow(a, b));
    case TPU_IR_MAX: B(a > b ? a : b); case TPU_IR_MIN: B(a < b ? a : b);
    case TPU_IR_AND: B(a & b); case TPU_IR_OR: B(a | b); case TPU_IR_XOR: B(a ^ b);
    case TPU_IR_SHL: B((b < 0 || b >= 64) ? 0 : (int64_t)((uint64_t)a << b));
    case TPU_IR_SHR: B((b < 0 || b >= 64) ? (a < 0 ? -1 : 0) : (a >> b));
    case TPU_IR_CLAMP: { const T *lo = in[0], *x = in[1], *hi = in[2];
      for (int64_t i = 0; i < n; ++i) { T v = x[i] < lo[i] ? lo[i] : x[i]; o[i] = v > hi[i] ? hi[i] : v; } return 0; }
    default: return -1;
  }
}
#undef U
#undef B

#define CMP_LOOP(T)                                                                            \
  { const T* restrict x0 = in[0]; const T* restrict x1 = in[1];                                \
    switch (op->i0) {                                                                          \
      case TPU_IR_CMP_EQ: for (int64_t i = 0; i < n; ++i) o[i] = x0[i] == x1[i]; break;        \
      case TPU_IR_CMP_NE: for (int64_t i = 0; i < n; ++i) o[i] = x0[i] != x1[i]; break;        \
      case TPU_IR_CMP_LT: for (int64_t i = 0; i < n; ++i) o[i] = x0[i] < x1[i]; break;         \
      case TPU_IR_CMP_LE: for (int64_t i = 0; i < n; ++i) o[i] = x0[i] <= x1[i]; break;        \
      case TPU_IR_CMP_GT: for (int64_t i = 0; i < n; ++i) o[i] = x0[i] > x1[i]; break;         \
      case TPU_IR_CMP_GE: for (int64_t i = 0; i < n; ++i) o[i] = x0[i] >= x1[i]; break;        \
      default: return -1;                                                                      \
    } return 0; }

static int TFN(tile_compute)(const tpu_ir_op_t* op, int out_dtype, void* out, int in_dtype,
                             const void* const* in, int64_t n) {
  int ocls = tpu_host_cls(out_dtype), icls = tpu_host_cls(in_dtype);
  switch (op->opcode) {
    case TPU_IR_CONVERT: {
      /* register-class change; narrowing to the target dtype happens below */
      if (ocls == icls) memcpy(out, in[0], (size_t)n * 8 / (ocls == TPU_HOST_CLS_F32 ? 2 : 1));
      else if (ocls == TPU_HOST_CLS_F32 && icls == TPU_HOST_CLS_F64) { float* o = out; const double* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = (float)x[i]; }
      else if (ocls == TPU_HOST_CLS_F32) { float* o = out; const int64_t* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = (float)x[i]; }
      else if (ocls == TPU_HOST_CLS_F64 && icls == TPU_HOST_CLS_F32) { double* o = out; const float* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = x[i]; }
      else if (ocls == TPU_HOST_CLS_F64) { double* o = out; const int64_t* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = (double)x[i]; }
      else if (out_dtype == TPU_DTYPE_BOOL && icls == TPU_HOST_CLS_F32) { int64_t* o = out; const float* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = x[i] != 0; }
      else if (out_dtype == TPU_DTYPE_BOOL) { int64_t* o = out; const double* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = x[i] != 0; }
      else if (icls == TPU_HOST_CLS_F32) { int64_t* o = out; const float* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = tile_f2i(x[i]); }
      else { int64_t* o = out; const double* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = tile_f2i(x[i]); }
      break;
    }
    case TPU_IR_COMPARE: {
      int64_t* restrict o = out;
      if (icls == TPU_HOST_CLS_F32) CMP_LOOP(float)
      else if (icls == TPU_HOST_CLS_F64) CMP_LOOP(double)
      else CMP_LOOP(int64_t)
    }
    case TPU_IR_IS_FINITE: case TPU_IR_IS_NAN: case TPU_IR_IS_INF: {
      int64_t* o = out;
      if (icls == TPU_HOST_CLS_I64) { for (int64_t i = 0; i < n; ++i) o[i] = op->opcode == TPU_IR_IS_FINITE; return 0; }
      for (int64_t i = 0; i < n; ++i) {
        double v = icls == TPU_HOST_CLS_F32 ? ((const float*)in[0])[i] : ((const double*)in[0])[i];
        o[i] = op->opcode == TPU_IR_IS_FINITE ? isfinite(v) : op->opcode == TPU_IR_IS_NAN ? isnan(v) : isinf(v);
      }
      return 0;
    }
    case TPU_IR_SELECT: {
      const int64_t* p = in[0];
      if (ocls == TPU_HOST_CLS_F32) { float* o = out; const float *t = in[1], *f = in[2]; for (int64_t i = 0; i < n; ++i) o[i] = p[i] ? t[i] : f[i]; }
      else { int64_t* o = out; const int64_t *t = in[1], *f = in[2]; for (int64_t i = 0; i < n; ++i) o[i] = p[i] ? t[i] : f[i]; }
      return 0; /* f64 and i64 share the 8-byte path */
    }
    case TPU_IR_NOT:
      if (out_dtype == TPU_DTYPE_BOOL) { int64_t* o = out; const int64_t* x = in[0]; for (int64_t i = 0; i < n; ++i) o[i] = !x[i]; return 0; }
      /* fallthrough */
    default: {
      int rc = ocls == TPU_HOST_CLS_F32 ? TFN(compute_f32)(op, out, in, n)
             : ocls == TPU_HOST_CLS_F64 ? TFN(compute_f64)(op, out, in, n)
             : TFN(compute_i64)(op, out, in, n);
      if (rc) return rc;
      if (out_dtype == TPU_DTYPE_BOOL && (op->opcode == TPU_IR_AND || op->opcode == TPU_IR_OR ||
                                          op->opcode == TPU_IR_XOR || op->opcode == TPU_IR_MAX ||
                                          op->opcode == TPU_IR_MIN)) return 0;
    }
  }
  if (ocls == TPU_HOST_CLS_F32) TFN(round_to)(out, out_dtype, n);
  else if (ocls == TPU_HOST_CLS_I64) TFN(wrap_to)(out, out_dtype, n);
  return 0;
}
#undef CMP_LOOP

#if defined(__AVX512F__)
/* Low-precision cluster programs (tpu_host_lowp_t, host.h): per block of blk elements, each instruction over
 * the block's f32 registers (16 lanes at a time); leaves widened on load, the result rounded on store, as tile_load /
 * tile_compute / tile_store do it (NaN payloads included: x OP y with x's NaN first, as add_ab / mul_ab). */
#include "drivers/host/gemm_avx512.h" /* tpu_avx512_bf16_round16 (guarded) */
static inline __m512 TFN(lp_add)(__m512 x, __m512 y) { __m512 r; __asm__("vaddps %2, %1, %0" : "=v"(r) : "v"(x), "v"(y)); return r; }
static inline __m512 TFN(lp_mul)(__m512 x, __m512 y) { __m512 r; __asm__("vmulps %2, %1, %0" : "=v"(r) : "v"(x), "v"(y)); return r; }
static inline __m512 TFN(lp_bool)(__mmask16 m) { return _mm512_maskz_mov_ps(m, _mm512_set1_ps(1.0f)); }
static inline __m512 TFN(bf16_lo_)(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16)); }
static inline __m512 TFN(bf16_hi_)(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16)); }
static inline __mmask16 TFN(lp_nan)(__m512 x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q); }
/* f16 lanes widened as tile_h2f (signaling NaN kept signaling) */
static inline __m512 TFN(lp_h2f)(__m256i h) {
  const __m512i w = _mm512_cvtepu16_epi32(h), z = _mm512_setzero_si512();
  const __mmask16 snan = _mm512_mask_cmpneq_epi32_mask(
      _mm512_cmpeq_epi32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7e00)), _mm512_set1_epi32(0x7c00)),
      _mm512_and_si512(w, _mm512_set1_epi32(0x1ff)), z);
  const __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h));
  return _mm512_castsi512_ps(_mm512_mask_andnot_epi32(f, snan, _mm512_set1_epi32(0x400000), f));
}
static inline __m256i TFN(lp_f2bf16)(__m512 v) { /* tpu_f32_to_bf16 of 16 lanes */
#if defined(__AVX512BF16__)
  return _mm512_castsi512_si256(tpu_avx512bf16_round32(v, v));
#else
  return tpu_avx512_bf16_round16(v);
#endif
}
static inline __m512 TFN(lp_round)(__m512 v, int dt) {
  if (dt == TPU_DTYPE_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(TFN(lp_f2bf16)(v)), 16));
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline __mmask16 TFN(lp_mask)(int64_t k, int64_t m) { return m - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (m - k)) - 1u); }
static inline __m512i TFN(lp_f2bf32)(__m512 v0, __m512 v1) { /* tpu_f32_to_bf16 of 32 lanes */
#if defined(__AVX512BF16__)
  return tpu_avx512bf16_round32(v0, v1);
#else
  return _mm512_inserti64x4(_mm512_castsi256_si512(tpu_avx512_bf16_round16(v0)), tpu_avx512_bf16_round16(v1), 1);
#endif
}
static inline __m512 TFN(lp_widen)(__m256i h, int dt) {
  return dt == TPU_DTYPE_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : TFN(lp_h2f)(h);
}
/* r[0, mv) = leaf elements [0, m) as f32 (0 beyond m) */
static void TFN(lp_load)(float* restrict r, const char* src, int dt, int64_t m, int64_t mv) {
  int64_t k = 0;
  if (dt == TPU_DTYPE_F32) {
    const float* s = (const float*)(const void*)src;
    for (; k + 16 <= m; k += 16) _mm512_store_ps(r + k, _mm512_loadu_ps(s + k));
    for (; k < mv; k += 16) _mm512_store_ps(r + k, _mm512_maskz_loadu_ps(TFN(lp_mask)(k, m), s + k));
  } else if (dt == TPU_DTYPE_BOOL) {
    for (; k < mv; k += 16)
      _mm512_store_ps(r + k, TFN(lp_bool)(_mm512_test_epi32_mask(
                                 _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(TFN(lp_mask)(k, m), src + k)), _mm512_set1_epi32(0xff))));
  } else {
    const uint16_t* s = (const uint16_t*)(const void*)src;
    if (dt == TPU_DTYPE_BF16)
      for (; k + 32 <= m; k += 32) {
        const __m512i v = _mm512_loadu_si512(s + k);
        _mm512_store_ps(r + k, TFN(bf16_lo_)(v));
        _mm512_store_ps(r + k + 16, TFN(bf16_hi_)(v));
      }
    for (; k + 16 <= m; k += 16) _mm512_store_ps(r + k, TFN(lp_widen)(_mm256_loadu_si256((const __m256i*)(const void*)(s + k)), dt));
    for (; k < mv; k += 16) _mm512_store_ps(r + k, TFN(lp_widen)(_mm256_maskz_loadu_epi16(TFN(lp_mask)(k, m), s + k), dt));
  }
}
/* out elements [0, m) = r rounded to dt as tile_store */
static void TFN(lp_store)(char* dst, int dt, const float* r, int64_t m) {
  int64_t k = 0;
  if (dt == TPU_DTYPE_F32) {
    float* o = (float*)(void*)dst;
    for (; k + 16 <= m; k += 16) _mm512_storeu_ps(o + k, _mm512_loadu_ps(r + k));
    if (k < m) _mm512_mask_storeu_ps(o + k, TFN(lp_mask)(k, m), _mm512_loadu_ps(r + k));
  } else if (dt == TPU_DTYPE_BF16) {
    uint16_t* o = (uint16_t*)(void*)dst;
    for (; k + 32 <= m; k += 32) _mm512_storeu_si512(o + k, TFN(lp_f2bf32)(_mm512_loadu_ps(r + k), _mm512_loadu_ps(r + k + 16)));
    for (; k < m; k += 16) _mm256_mask_storeu_epi16(o + k, TFN(lp_mask)(k, m), TFN(lp_f2bf16)(_mm512_loadu_ps(r + k)));
  } else {
    uint16_t* o = (uint16_t*)(void*)dst;
    for (; k < m; k += 16)
      _mm256_mask_storeu_epi16(o + k, TFN(lp_mask)(k, m), _mm512_cvtps_ph(_mm512_loadu_ps(r + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

static int TFN(tile_lowp_run)(const tpu_host_lowp_t* P, const tpu_host_lowp_io_t* io, int64_t n) {
  float R[TPU_LOWP_REG_FLOATS] __attribute__((aligned(64)));
  const int64_t B = P->blk;
  for (int i = 0; i < P->n_ins; ++i) { /* scalars: once */
    const tpu_host_lowp_ins_t* I = &P->ins[i];
    if (I->kind == TPU_LOWP_SCALAR) { float* d = R + I->d * B; for (int64_t k = 0; k < B; ++k) d[k] = io->s[I->a]; }
  }
  for (int64_t i0 = 0; i0 < n; i0 += B) {
    const int64_t m = TPU_MIN(B, n - i0), mv = (m + 15) & ~(int64_t)15; /* lanes stored, computed */
    const float* rp[TPU_LOWP_MAX_REGS]; /* where each register's block is: R, or an f32 leaf read in place */
    for (int i = 0; i < TPU_LOWP_MAX_REGS; ++i) rp[i] = R + i * B;
    for (int i = 0; i < P->n_ins; ++i) {
      const tpu_host_lowp_ins_t* I = &P->ins[i];
      float* d = R + I->d * B;
      const float *a = rp[I->a], *b = rp[I->b], *c = rp[I->c];
      rp[I->d] = d;
      switch (I->kind) {
        case TPU_LOWP_LOAD: {
          const int64_t es = I->dt == TPU_DTYPE_F32 ? 4 : I->dt == TPU_DTYPE_BOOL ? 1 : 2;
          const char* src = (const char*)io->leaf[I->a] + i0 * es;
          if (I->dt == TPU_DTYPE_F32 && m == mv) rp[I->d] = (const float*)(const void*)src; /* no copy */
          else TFN(lp_load)(d, src, I->dt, m, mv);
          break;
        }
        case TPU_LOWP_SCALAR: break;
#define LP_LOOP(EXPR) for (int64_t k = 0; k < mv; k += 16) { \
          const __m512 x = _mm512_loadu_ps(a + k), y = _mm512_loadu_ps(b + k), z = _mm512_loadu_ps(c + k); \
          (void)y; (void)z; _mm512_store_ps(d + k, (EXPR)); } break;
        case TPU_LOWP_COPY: LP_LOOP(x)
        case TPU_LOWP_NEG: LP_LOOP(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u))))
        case TPU_LOWP_ABS: LP_LOOP(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff))))
        case TPU_LOWP_SQRT: LP_LOOP(_mm512_sqrt_ps(x))
        case TPU_LOWP_RSQRT: LP_LOOP(_mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(x)))
        case TPU_LOWP_RECIP: LP_LOOP(_mm512_div_ps(_mm512_set1_ps(1.0f), x))
        case TPU_LOWP_ADD: LP_LOOP(TFN(lp_add)(x, y))
        case TPU_LOWP_SUB: LP_LOOP(_mm512_sub_ps(x, y))
        case TPU_LOWP_MUL: LP_LOOP(TFN(lp_mul)(x, y))
        case TPU_LOWP_DIV: LP_LOOP(_mm512_div_ps(x, y))
        /* (a != a) ? a : ((b != b) ? b : (a > b ? a : b)), and with < for MIN */
        case TPU_LOWP_MAX: LP_LOOP(_mm512_mask_mov_ps(_mm512_mask_mov_ps(_mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, y, _CMP_GT_OQ), x), TFN(lp_nan)(y), y), TFN(lp_nan)(x), x))
        case TPU_LOWP_MIN: LP_LOOP(_mm512_mask_mov_ps(_mm512_mask_mov_ps(_mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, y, _CMP_LT_OQ), x), TFN(lp_nan)(y), y), TFN(lp_nan)(x), x))
        case TPU_LOWP_CMP:
          switch (I->aux) {
            case TPU_IR_CMP_EQ: LP_LOOP(TFN(lp_bool)(_mm512_cmp_ps_mask(x, y, _CMP_EQ_OQ)))
            case TPU_IR_CMP_NE: LP_LOOP(TFN(lp_bool)(_mm512_cmp_ps_mask(x, y, _CMP_NEQ_UQ)))
            case TPU_IR_CMP_LT: LP_LOOP(TFN(lp_bool)(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ)))
            case TPU_IR_CMP_LE: LP_LOOP(TFN(lp_bool)(_mm512_cmp_ps_mask(x, y, _CMP_LE_OQ)))
            case TPU_IR_CMP_GT: LP_LOOP(TFN(lp_bool)(_mm512_cmp_ps_mask(x, y, _CMP_GT_OQ)))
            case TPU_IR_CMP_GE: LP_LOOP(TFN(lp_bool)(_mm512_cmp_ps_mask(x, y, _CMP_GE_OQ)))
            default: return -1;
          }
          break;
        case TPU_LOWP_NZ: LP_LOOP(TFN(lp_bool)(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ)))
        case TPU_LOWP_NOT: LP_LOOP(TFN(lp_bool)(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ)))
        case TPU_LOWP_SELECT: LP_LOOP(_mm512_mask_mov_ps(z, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ), y))
        case TPU_LOWP_CLAMP: { /* v = (v != v) ? v : (v < lo ? lo : v); (v != v) ? v : (v > hi ? hi : v); x = lo */
          for (int64_t k = 0; k < mv; k += 16) {
            const __m512 lo = _mm512_loadu_ps(a + k), hi = _mm512_loadu_ps(c + k);
            __m512 v = _mm512_loadu_ps(b + k);
            v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
            v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
            _mm512_store_ps(d + k, v);
          }
          break;
        }
        case TPU_LOWP_ROUND: LP_LOOP(TFN(lp_round)(x, I->dt))
#undef LP_LOOP
        case TPU_LOWP_KERNEL: {
          const void* in[3] = {a, b, c};
          if (TFN(tile_compute)(I->op, I->op->type.dtype, d, I->in_dt, in, mv)) return -1;
          break;
        }
        case TPU_LOWP_CUSTOM: {
          const void* in[4] = {a, b, c, rp[I->e]};
          io->custom(io->ctx, I->op, d, in, mv);
          break;
        }
        default: return -1;
      }
    }
    TFN(lp_store)((char*)io->out + i0 * (P->out_dtype == TPU_DTYPE_F32 ? 4 : 2), P->out_dtype, rp[P->out_reg], m);
  }
  return 0;
}
#endif

const tpu_host_tile_ops_t TILE_CAT(tpu_host_tile_ops, TILE_SUFFIX) = {
  .load = TFN(tile_load), .store = TFN(tile_store), .compute = TFN(tile_compute),
#if defined(__AVX512BF16__)
  .bin_bf16 = TFN(tile_bin_bf16), .bin_bf16_scalar = TFN(tile_bin_bf16_scalar),
#endif
#if defined(__AVX512F__)
  .lowp_run = TFN(tile_lowp_run),
#endif
};
