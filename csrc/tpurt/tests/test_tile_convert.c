/* test_tile_convert.c — the tile loader's bf16 / f16 -> f32 and the tile store's f32 -> bf16 / f16 conversions
 * (tile_impl.h, vectorized by the compiler in each ISA build) against common.h's scalar conversions, bit for bit:
 * every 16-bit input for the loads; for the stores every sign / exponent / top mantissa pattern combined with the
 * low-bit patterns that decide rounding (ties, just below / above half, all ones) and random patterns, NaN
 * payloads, infinities and subnormals included. Contiguous, strided and broadcast (stride 0) calls of odd lengths,
 * so vector bodies and scalar tails are both covered; and the same patterns rounded in registers (a CONVERT to
 * bf16 / f16 computed by tile_compute). */
#include <stdio.h>
#include <stdlib.h>

#include "drivers/host/host.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t rng(uint64_t* s) { *s = *s * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(*s >> 32); }

enum { CH = 4096 };
/* The integer-only f16 conversions (IEEE round to nearest even, NaN payloads kept and quieted): the reference
 * that common.h's branch-free tpu_f16_to_f32 / tpu_f32_to_f16 must equal for every input (check_common_f16). */
static float ref_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0) {
    if (man == 0) { u = sign; }
    else { /* subnormal: normalize */
      int e = -1; do { ++e; man <<= 1; } while (!(man & 0x400u));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f; memcpy(&f, &u, 4); return f;
}
static uint16_t ref_f32_to_f16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow (after rounding) -> inf */
  if (a < 0x38800000u) { /* result is subnormal or zero */
    if (a < 0x33000000u) return (uint16_t)sign; /* < half of smallest subnormal */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14 + (113 - e) */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u; /* rebias 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

static void check_common_f16(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536 && !bad; ++h)
    if (f2u(tpu_f16_to_f32((uint16_t)h)) != f2u(ref_f16_to_f32((uint16_t)h))) {
      bad = 1; printf("  tpu_f16_to_f32(0x%04x) = 0x%08x, want 0x%08x\n", h, f2u(tpu_f16_to_f32((uint16_t)h)),
                      f2u(ref_f16_to_f32((uint16_t)h)));
    }
  CHECK(!bad, "common.h f16 -> f32 equals the integer reference for every half");
  bad = 0;
  uint64_t seed = 7;
  for (uint64_t i = 0; i < (1ull << 32) && !bad; i += 1 + (i < (1ull << 24) ? 0 : rng(&seed) % 4093)) {
    const float f = u2f((uint32_t)i);
    if (tpu_f32_to_f16(f) != ref_f32_to_f16(f)) {
      bad = 1; printf("  tpu_f32_to_f16(0x%08x) = 0x%04x, want 0x%04x\n", (uint32_t)i, tpu_f32_to_f16(f), ref_f32_to_f16(f));
    }
  }
  CHECK(!bad, "common.h f32 -> f16 equals the integer reference (every f32 below 2^24 as bits, then strided)");
}


/* loads of every 16-bit pattern, in calls of 1..37 elements: contiguous, stride 3, and broadcast (stride 0) */
static void check_loads(const tpu_host_tile_ops_t* T, const char* isa, int dt) {
  static uint16_t src[65536 * 3];
  static float got[65536];
  int bad = 0;
  for (int st = 0; st <= 3 && !bad; st += st == 0 ? 1 : 2) {
    for (int i = 0; i < 65536 * 3; ++i) src[i] = (uint16_t)(i % 3 ? 0xffc1 : i / 3);
    if (st == 1) for (int i = 0; i < 65536; ++i) src[i] = (uint16_t)i;
    for (int64_t i = 0, len = 1; i < 65536 && !bad; i += len, len = len % 37 + 1) {
      const int64_t n = TPU_MIN(len, 65536 - i);
      T->load(got, TPU_HOST_CLS_F32, (const char*)(src + i * (st ? st : 3)), dt, st, n);
      for (int64_t k = 0; k < n; ++k) {
        const uint16_t h = (uint16_t)(st ? i + k : i);
        const float want = dt == TPU_DTYPE_BF16 ? tpu_bf16_to_f32(h) : ref_f16_to_f32(h);
        if (f2u(got[k]) != f2u(want)) {
          bad = 1;
          printf("  %s load %s stride %d: 0x%04x -> 0x%08x, want 0x%08x\n", isa, tpu_dtype_name(dt), st, h,
                 f2u(got[k]), f2u(want));
          break;
        }
      }
    }
  }
  CHECK(!bad, "%s: %s loads match common.h", isa, tpu_dtype_name(dt));
}

/* stores of the f32 patterns hi | lo, hi over every top `hib` bits, lo from the rounding-relevant set */
/* round: the f32 -> bf16 / f16 CONVERT a tile computes in registers (tile_compute's round_to), not a store */
static void check_stores(const tpu_host_tile_ops_t* T, const char* isa, int dt, int round) {
  const int lob = dt == TPU_DTYPE_BF16 ? 16 : 13;
  const uint32_t half = 1u << (lob - 1), all = (1u << lob) - 1;
  const uint32_t los[] = {0, 1, half - 1, half, half + 1, all, all - 1, half | 1, 2, half >> 1, 0x155 & all,
                          0x2aa & all};
  const int nlo = TPU_ARRAY_LEN(los);
  static float x[CH];
  static uint16_t got[CH * 2];
  uint64_t seed = 12345;
  const uint64_t nhi = 1ull << (32 - lob);
  int bad = 0, len = 1, st = 1;
  uint64_t total = nhi * (uint64_t)(nlo + 8);
  for (uint64_t base = 0; base < total && !bad; base += CH) {
    int64_t n = (int64_t)TPU_MIN((uint64_t)CH, total - base);
    for (int64_t k = 0; k < n; ++k) {
      uint64_t j = base + (uint64_t)k, hi = j / (uint64_t)(nlo + 8), li = j % (uint64_t)(nlo + 8);
      uint32_t lo = li < (uint64_t)nlo ? los[li] : rng(&seed) & all;
      x[k] = u2f((uint32_t)(hi << lob) | lo);
    }
    for (int64_t i = 0; i < n && !bad;) {
      int64_t m = TPU_MIN((int64_t)len, n - i);
      if (round) {
        static float gr[CH];
        const void* in[1] = {x + i};
        tpu_ir_op_t op = {0};
        op.opcode = TPU_IR_CONVERT;
        T->compute(&op, dt, gr, TPU_DTYPE_F32, in, m);
        for (int64_t k = 0; k < m; ++k) {
          const uint16_t h = dt == TPU_DTYPE_BF16 ? tpu_f32_to_bf16(x[i + k]) : ref_f32_to_f16(x[i + k]);
          const float want = dt == TPU_DTYPE_BF16 ? tpu_bf16_to_f32(h) : ref_f16_to_f32(h);
          if (f2u(gr[k]) != f2u(want)) {
            bad = 1;
            printf("  %s round to %s: 0x%08x -> 0x%08x, want 0x%08x\n", isa, tpu_dtype_name(dt), f2u(x[i + k]),
                   f2u(gr[k]), f2u(want));
            break;
          }
        }
        i += m; len = len % 37 + 1;
        if (len == 1) len = 64 + (int)(rng(&seed) % 1500);
        continue;
      }
      T->store((char*)got, dt, st, x + i, TPU_HOST_CLS_F32, m);
      for (int64_t k = 0; k < m; ++k) {
        uint16_t want = dt == TPU_DTYPE_BF16 ? tpu_f32_to_bf16(x[i + k]) : ref_f32_to_f16(x[i + k]);
        if (got[k * st] != want) {
          bad = 1;
          printf("  %s store %s stride %d: 0x%08x -> 0x%04x, want 0x%04x\n", isa, tpu_dtype_name(dt), st,
                 f2u(x[i + k]), got[k * st], want);
          break;
        }
      }
      i += m; len = len % 37 + 1; st = 3 - st; /* strides 1 and 2 alternate */
      if (len == 1) len = 64 + (int)(rng(&seed) % 1500); /* and some long calls */
    }
  }
  CHECK(!bad, "%s: %s %s match common.h", isa, tpu_dtype_name(dt), round ? "roundings" : "stores");
}

/* bin_bf16 (one pass: bf16 OP bf16 -> bf16) against the path it replaces, the same build's tile load of a and b,
 * tile_compute of OP and tile store (which of two NaN operands' payloads survives is the compiler's choice of
 * operand order, so it is compared with that path, not with a scalar formula): every bf16 a against random b (NaN
 * payloads, infinities, zeros and subnormals among them; results that overflow, underflow or round to a tie), odd
 * lengths (vector body and tail), unaligned starts and in place (o == a); bin_bf16_scalar likewise. */
static void check_bin_bf16(const tpu_host_tile_ops_t* T, const char* isa) {
  if (!T->bin_bf16) return;
  enum { NB = 65536 + 37 };
  uint16_t *a = malloc(NB * 2 + 64), *b = malloc(NB * 2 + 64), *o = malloc(NB * 2 + 64), *w = malloc(NB * 2 + 64);
  float *fa = malloc(NB * 4), *fb = malloc(NB * 4), *fr = malloc(NB * 4);
  uint64_t st = 7;
  for (int i = 0; i < NB; ++i) { a[i] = (uint16_t)i; b[i] = (uint16_t)rng(&st); }
  for (int i = 0; i < NB; i += 97) b[i] = (uint16_t)(i & 1 ? 0x7fc1 : 0x0001); /* NaN payloads, subnormals */
  const int ops[4] = {TPU_IR_ADD, TPU_IR_SUB, TPU_IR_MUL, TPU_IR_DIV};
  for (int k = 0; k < 4; ++k)
    for (int off = 0; off < 3; ++off) {
      const int64_t n = NB - 2 * off - (k & 1);
      int bad = 0;
      CHECK(T->bin_bf16(ops[k], o + off, a + off, b + 2 * off, n) == 0, "%s bin_bf16 op %d", isa, ops[k]);
      tpu_ir_op_t op;
      memset(&op, 0, sizeof op);
      op.opcode = ops[k];
      const void* in[2] = {fa, fb};
      T->load(fa, TPU_HOST_CLS_F32, (const char*)(a + off), TPU_DTYPE_BF16, 1, n);
      T->load(fb, TPU_HOST_CLS_F32, (const char*)(b + 2 * off), TPU_DTYPE_BF16, 1, n);
      T->compute(&op, TPU_DTYPE_F32, fr, TPU_DTYPE_F32, in, n);
      T->store((char*)w, TPU_DTYPE_BF16, 1, fr, TPU_HOST_CLS_F32, n);
      for (int64_t i = 0; i < n; ++i)
        if (o[off + i] != w[i] && !bad++) printf("  %s op %d a %04x b %04x: %04x, ref %04x\n", isa, ops[k], a[off + i], b[2 * off + i], o[off + i], w[i]);
      CHECK(!bad, "%s bin_bf16 op %d offset %d: %d differ", isa, ops[k], off, bad);
      memcpy(o, a, NB * 2); /* in place: o == a */
      T->bin_bf16(ops[k], o + off, o + off, b + 2 * off, n);
      CHECK(memcmp(o + off, w, (size_t)n * 2) == 0, "%s bin_bf16 op %d in place", isa, ops[k]);
    }
  CHECK(T->bin_bf16(TPU_IR_MAX, o, a, b, 8) == -1, "%s bin_bf16 refuses other opcodes", isa);
  /* bin_bf16_scalar: a OP s and s OP a for scalars of every kind (NaN, infinities, zeros, subnormal, ordinary) */
  const float sv[8] = {0.5f, -3.0f, 0.0f, -0.0f, u2f(0x7f800000u), u2f(0x7fc00001u), u2f(0x7fa00000u), 1e-40f};
  for (int k = 0; k < 4 && T->bin_bf16_scalar; ++k)
    for (int q = 0; q < 16; ++q) {
      const int sf = q & 1, off = q % 3;
      const int64_t n = NB - off - (q & 2);
      tpu_ir_op_t op;
      memset(&op, 0, sizeof op);
      op.opcode = ops[k];
      T->load(fa, TPU_HOST_CLS_F32, (const char*)(a + off), TPU_DTYPE_BF16, 1, n);
      T->load(fb, TPU_HOST_CLS_F32, (const char*)&sv[q / 2], TPU_DTYPE_F32, 0, n);
      const void* in[2] = {sf ? fb : fa, sf ? fa : fb};
      T->compute(&op, TPU_DTYPE_F32, fr, TPU_DTYPE_F32, in, n);
      T->store((char*)w, TPU_DTYPE_BF16, 1, fr, TPU_HOST_CLS_F32, n);
      CHECK(T->bin_bf16_scalar(ops[k], o, a + off, sv[q / 2], sf, n) == 0 && memcmp(o, w, (size_t)n * 2) == 0,
            "%s bin_bf16_scalar op %d s %08x s_first %d", isa, ops[k], (unsigned)f2u(sv[q / 2]), sf);
    }
  free(a); free(b); free(o); free(w); free(fa); free(fb); free(fr);
}

int main(void) {
  check_common_f16();
  const tpu_host_tile_ops_t* isa[4] = {&tpu_host_tile_ops_base, NULL, NULL, NULL};
  const char* name[4] = {"base", "avx2", "avx512", "avx512bf16"};
  if (tpu_cpu_has_avx2_fma()) isa[1] = &tpu_host_tile_ops_avx2;
  if (tpu_cpu_has_avx512f() && tpu_cpu_has_avx2_fma()) isa[2] = &tpu_host_tile_ops_avx512;
  if (tpu_cpu_has_avx512bf16() && tpu_cpu_has_avx2_fma()) isa[3] = &tpu_host_tile_ops_avx512bf16;
  for (int q = 0; q < 4; ++q) {
    if (!isa[q]) { printf("  (%s build not run: CPU lacks it)\n", name[q]); continue; }
    for (int d = 0; d < 2; ++d) {
      int dt = d ? TPU_DTYPE_F16 : TPU_DTYPE_BF16;
      check_loads(isa[q], name[q], dt);
      check_stores(isa[q], name[q], dt, 0);
      check_stores(isa[q], name[q], dt, 1);
    }
    check_bin_bf16(isa[q], name[q]);
  }
  printf("test_tile_convert: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
