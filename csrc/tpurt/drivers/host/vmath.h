/* vmath.h — branch-free f32 helpers shared by the tile kernels (tile_impl.h) and the row
 * kernels (rows_impl.h): bit casts, f16 <-> f32 conversions and exp (Cephes-style range reduction + minimax polynomial,
 * <= 2 ulp vs libm, checked in tests/test_tile.c), written so loops over them vectorize. */
#ifndef TPURT_DRIVERS_HOST_VMATH_H_
#define TPURT_DRIVERS_HOST_VMATH_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float tile_bits2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t tile_f2bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
/* f16 <-> f32 without branches, so loops over them vectorize (common.h's tpu_f16_to_f32 / tpu_f32_to_f16 loop
 * and branch per element; ~20x slower): the same bits for every input, NaN payloads included
 * (tests/test_tile_convert.c). Subnormal halves are exact int -> float conversions times 2^-24; a float below
 * 2^-14 rounds to its subnormal half by one IEEE add: |f| + 0.5 keeps |f| / 2^-24 rounded to nearest-even in its
 * low mantissa bits (default rounding mode, as every kernel assumes). */
static inline float tile_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, m = h & 0x7fffu;
  const uint32_t nrm = (m << 13) + (112u << 23), naninf = (m << 13) | 0x7f800000u;
  const uint32_t sub = tile_f2bits((float)(int32_t)m * 5.9604644775390625e-8f); /* m * 2^-24, m < 1024 */
  return tile_bits2f(sign | (m >= 0x7c00u ? naninf : (m >= 0x400u ? nrm : sub)));
}
static inline uint16_t tile_f32_to_f16(float f) {
  const uint32_t u = tile_f2bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  const uint32_t nrm = (a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13;
  const uint32_t sub = tile_f2bits(tile_bits2f(a) + 0.5f) - 0x3f000000u;
  const uint32_t r = a > 0x7f800000u ? nan : (a >= 0x477ff000u ? 0x7c00u : (a >= 0x38800000u ? nrm : sub));
  return (uint16_t)(sign | r);
}
static inline float tile_expf(float x) {
  float xc = x < -103.972084f ? -103.972084f : (x > 88.7228394f ? 88.7228394f : x);
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f; p = p * r + 8.3334519073E-3f; p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f; p = p * r + 5.0000001201E-1f;
  float y = p * (r * r) + r + 1.0f;
  int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;
  y = y * tile_bits2f((uint32_t)(n1 + 127) << 23) * tile_bits2f((uint32_t)(n2 + 127) << 23);
  y = x > 88.7228394f ? INFINITY : y;
  y = x < -103.972084f ? 0.0f : y;
  return x != x ? x : y;
}

#endif /* TPURT_DRIVERS_HOST_VMATH_H_ */
