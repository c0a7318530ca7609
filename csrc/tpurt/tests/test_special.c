/* test_special.c — the host driver's special functions (drivers/host/special.c: custom target
 * SPECIAL) against references computed differently here: I0/I1 from their integral
 * representations (trapezoid rule, exact to rounding for these periodic integrands), polygamma
 * from known values (zeta(3), pi^2/6, pi^4/15) and the recurrence psi_n(x+1) = psi_n(x) +
 * (-1)^n n!/x^(n+1); plus the strided kernel against the scalar function. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/special.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

/* I_nu(x) = (1/pi) int_0^pi exp(x cos t) cos(nu t) dt */
static double bessel_ref(int nu, double x) {
  const int n = 4000;
  double s = 0;
  for (int i = 0; i <= n; ++i) {
    double t = M_PI * i / n, w = (i == 0 || i == n) ? 0.5 : 1.0;
    s += w * exp(x * cos(t)) * cos(nu * t);
  }
  return s / n;
}
/* |a - b| <= rtol * scale (scale: the magnitude rounding errors are relative to) */
static int close_to(double a, double b, double rtol, double scale) { return fabs(a - b) <= rtol * scale; }
static int close(double a, double b, double rtol) { return close_to(a, b, rtol, fabs(b)); }

int main(void) {
  const double xs[] = {0.0, 1e-3, 0.5, -0.75, 1.0, 2.5, -4.0, 7.3, 12.0, -20.0, 29.9, 30.1, 45.0, -60.0, 100.0};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; ++i) {
    double x = xs[i];
    for (int nu = 0; nu < 2; ++nu) {
      double ref = bessel_ref(nu, x);
      double got = tpu_host_special_eval(nu ? TPU_IR_SPECIAL_I1 : TPU_IR_SPECIAL_I0, 0, x);
      double gote = tpu_host_special_eval(nu ? TPU_IR_SPECIAL_I1E : TPU_IR_SPECIAL_I0E, 0, x);
      /* the quadrature of I1 cancels near 0: its error is relative to I0's size */
      double scale = fabs(ref) + bessel_ref(0, x) * 1e-2;
      CHECK(close_to(got, ref, 1e-13, scale), "I%d(%g) = %.17g, reference %.17g", nu, x, got, ref);
      CHECK(close_to(gote, ref * exp(-fabs(x)), 1e-13, scale * exp(-fabs(x))), "I%de(%g) = %.17g, reference %.17g", nu, x, gote, ref * exp(-fabs(x)));
    }
  }
  CHECK(isinf(tpu_host_special_eval(TPU_IR_SPECIAL_I0, 0, 800.0)), "I0 overflows to inf");
  CHECK(isnan(tpu_host_special_eval(TPU_IR_SPECIAL_I1, 0, -INFINITY)), "I1(-inf) is NaN as on PyTorch CPU");
  CHECK(signbit(tpu_host_special_eval(TPU_IR_SPECIAL_I1E, 0, -INFINITY)), "I1e(-inf) = -0");
  CHECK(tpu_host_special_eval(TPU_IR_SPECIAL_I0E, 0, INFINITY) == 0.0, "I0e(inf)");
  CHECK(isnan(tpu_host_special_eval(TPU_IR_SPECIAL_I0, 0, NAN)), "I0(NaN)");
  /* polygamma */
  const double zeta3 = 1.2020569031595942;
  CHECK(close(tpu_host_special_eval(TPU_IR_SPECIAL_POLYGAMMA, 1, 1.0), M_PI * M_PI / 6, 1e-14), "trigamma(1)");
  CHECK(close(tpu_host_special_eval(TPU_IR_SPECIAL_POLYGAMMA, 2, 1.0), -2 * zeta3, 1e-14), "psi2(1)");
  CHECK(close(tpu_host_special_eval(TPU_IR_SPECIAL_POLYGAMMA, 3, 1.0), pow(M_PI, 4) / 15, 1e-14), "psi3(1)");
  CHECK(close(tpu_host_special_eval(TPU_IR_SPECIAL_POLYGAMMA, 1, 0.5), M_PI * M_PI / 2, 1e-14), "trigamma(1/2)");
  const double px[] = {-3.7, -0.4, 0.1, 0.9, 2.2, 5.5, 13.0, 80.0};
  for (int n = 1; n <= 5; ++n) {
    double fact = 1;
    for (int k = 2; k <= n; ++k) fact *= k;
    for (size_t i = 0; i < sizeof px / sizeof px[0]; ++i) {
      double x = px[i];
      double a = tpu_host_special_eval(TPU_IR_SPECIAL_POLYGAMMA, n, x);
      double b = tpu_host_special_eval(TPU_IR_SPECIAL_POLYGAMMA, n, x + 1);
      double step = (n % 2 ? -1.0 : 1.0) * fact / pow(x, n + 1);
      CHECK(close_to(b, a + step, 1e-13, fabs(a) + fabs(step) + fabs(b)), "psi_%d recurrence at %g: %.17g vs %.17g", n, x, b, a + step);
    }
    CHECK(isinf(tpu_host_special_eval(TPU_IR_SPECIAL_POLYGAMMA, n, -2.0)), "psi_%d pole", n);
  }
  /* the strided kernel = the scalar function: a transposed (3, 5) f32 view into f64 */
  float in[15];
  double out[15];
  for (int i = 0; i < 15; ++i) in[i] = (float)(i - 7) * 1.7f;
  tpu_host_view_t x = {.data = (char*)in, .dtype = TPU_DTYPE_F32, .rank = 2, .sizes = {5, 3}, .strides = {1, 5}};
  tpu_host_view_t o = {.data = (char*)out, .dtype = TPU_DTYPE_F32, .rank = 2, .sizes = {5, 3}, .strides = {3, 1}};
  float outf[15];
  o.data = (char*)outf;
  tpu_ir_op_t op;
  memset(&op, 0, sizeof op);
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_SPECIAL; op.i1 = TPU_IR_SPECIAL_POLYGAMMA; op.a[0][0] = 2;
  tpu_status_t st = tpu_host_k_special(&op, &x, &o);
  CHECK(st == TPU_OK, "special kernel: %s", tpu_status_message(st));
  tpu_status_free(st);
  int ok = 1;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      float want = (float)tpu_host_special_eval(TPU_IR_SPECIAL_POLYGAMMA, 2, in[i + 5 * j]);
      ok &= memcmp(&outf[i * 3 + j], &want, sizeof want) == 0;
    }
  CHECK(ok, "strided special kernel");
  (void)out;
  op.a[0][0] = 0; /* polygamma order 0 is digamma, never this target */
  st = tpu_host_k_special(&op, &x, &o);
  CHECK(tpu_status_code(st) == TPU_STATUS_INTERNAL, "order 0 rejected");
  tpu_status_free(st);
  printf("test_special: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
