/* colsum_impl.h — bf16 / f16 column sums (colsum.h), one source compiled per ISA: colsum.c (portable),
 * colsum_avx2.c (AVX2 + F16C), colsum_avx512.c. Define CS_SUFFIX before including.
 * Each column's double accumulator takes its rows in order (acc + x0) + x1 ...: every ISA gives the same
 * bits as the f32 kernel on the widened values. Rows are streamed CS_ROWS at a time (sequential reads, the
 * accumulators' block in L1), columns in register vectors of CS_W doubles. */
#include <string.h>

#include "common/common.h"
#include "drivers/host/colsum.h"

#define CS_CAT2(a, b) a##_##b
#define CS_CAT(a, b) CS_CAT2(a, b)
#define CFN(name) CS_CAT(name, CS_SUFFIX)

/* CS_W doubles per register vector; CS_LOAD(p): the CS_W bf16 at p widened (exactly) to doubles; CS_ADD(a, b) */
#if defined(__AVX512F__)
#include <immintrin.h>
#define CS_W 8
typedef __m512d cs_vd;
/* word q of the 8 loaded goes to the high half of 32-bit lane q (the f32 bits), zeros below: one vpermw */
#define CS_LOAD(p)                                                                                        \
  _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_maskz_permutexvar_epi16(                                    \
      (__mmask16)0xAAAA, _mm256_setr_epi16(0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7),                  \
      _mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(p))))))
#define CS_LDACC(p) _mm512_loadu_pd(p)
#define CS_STACC(p, v) _mm512_storeu_pd((p), (v))
#define CS_ADD(a, b) _mm512_add_pd((a), (b))
#elif defined(__AVX2__)
#include <immintrin.h>
#define CS_W 4
typedef __m256d cs_vd;
#define CS_LOAD(p) _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i*)(p))), 16)))
#define CS_LDACC(p) _mm256_loadu_pd(p)
#define CS_STACC(p, v) _mm256_storeu_pd((p), (v))
#define CS_ADD(a, b) _mm256_add_pd((a), (b))
#else
#define CS_W 2 /* SSE2 */
typedef double cs_vd __attribute__((vector_size(16)));
static inline cs_vd cs_load_base(const uint16_t* p) {
  cs_vd v = {(double)tpu_bf16_to_f32(p[0]), (double)tpu_bf16_to_f32(p[1])};
  return v;
}
#define CS_LOAD(p) cs_load_base(p)
static inline cs_vd cs_ldacc_base(const double* p) {
  cs_vd v;
  memcpy(&v, p, sizeof v);
  return v;
}
#define CS_LDACC(p) cs_ldacc_base(p)
#define CS_STACC(p, v) do { cs_vd s_ = (v); memcpy((p), &s_, sizeof s_); } while (0)
#define CS_ADD(a, b) ((a) + (b))
#endif
enum { CS_ROWS = 8, CS_U = 4 }; /* rows per pass; register vectors of columns per step */

static void CFN(col_bf16)(const uint16_t* x, int64_t ld, int64_t m, double* acc, int64_t n) {
  int64_t r = 0;
  for (; r + CS_ROWS <= m; r += CS_ROWS) {
    const uint16_t* x0 = x + r * ld;
    int64_t j = 0;
    for (; j + CS_U * CS_W <= n; j += CS_U * CS_W) {
      cs_vd a[CS_U];
      for (int u = 0; u < CS_U; ++u) a[u] = CS_LDACC(acc + j + u * CS_W);
      for (int q = 0; q < CS_ROWS; ++q)
        for (int u = 0; u < CS_U; ++u) a[u] = CS_ADD(a[u], CS_LOAD(x0 + q * ld + j + u * CS_W));
      for (int u = 0; u < CS_U; ++u) CS_STACC(acc + j + u * CS_W, a[u]);
    }
    for (; j + CS_W <= n; j += CS_W) {
      cs_vd a = CS_LDACC(acc + j);
      for (int q = 0; q < CS_ROWS; ++q) a = CS_ADD(a, CS_LOAD(x0 + q * ld + j));
      CS_STACC(acc + j, a);
    }
    for (; j < n; ++j) {
      double a = acc[j];
      for (int q = 0; q < CS_ROWS; ++q) a += (double)tpu_bf16_to_f32(x0[q * ld + j]);
      acc[j] = a;
    }
  }
  for (; r < m; ++r) {
    const uint16_t* xr = x + r * ld;
    for (int64_t j = 0; j < n; ++j) acc[j] += (double)tpu_bf16_to_f32(xr[j]);
  }
}

/* f16: a row chunk widened to f32 on the stack (F16C where the build has it), then added in order. */
static void CFN(col_f16)(const uint16_t* x, int64_t ld, int64_t m, double* acc, int64_t n) {
  float buf[256];
  for (int64_t j0 = 0; j0 < n; j0 += 256) {
    const int64_t nj = n - j0 < 256 ? n - j0 : 256;
    for (int64_t r = 0; r < m; ++r) {
      const uint16_t* xr = x + r * ld + j0;
      int64_t j = 0;
#if defined(__F16C__)
      for (; j + 8 <= nj; j += 8) {
        __m128i h;
        memcpy(&h, xr + j, 16);
        _mm256_storeu_ps(buf + j, _mm256_cvtph_ps(h));
      }
#endif
      for (; j < nj; ++j) buf[j] = tpu_f16_to_f32(xr[j]);
      double* a = acc + j0;
      for (j = 0; j < nj; ++j) a[j] += (double)buf[j];
    }
  }
}

const tpu_host_colsum_ops_t CFN(tpu_host_colsum_ops) = {CFN(col_bf16), CFN(col_f16)};
