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
