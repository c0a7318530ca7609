/* special.c — Bessel I0/I1 (and exponentially scaled) and polygamma (see special.h). */
#include <math.h>

#include "drivers/host/special.h"

/* exp(-|x|) I_nu(x), nu = 0 or 1 */
static double bessel_ie(int nu, double x) {
  double ax = fabs(x);
  if (isnan(x)) return x;
  if (isinf(x)) return nu ? copysign(0.0, x) : 0.0;
  if (ax < 30) { /* sum_k (x/2)^(2k+nu) / (k! (k+nu)!): positive terms, no cancellation */
    double q = 0.25 * x * x, t = nu ? 0.5 * x : 1.0, s = t;
    for (int k = 1; k < 500; ++k) {
      t *= q / ((double)k * (double)(k + nu));
      s += t;
      if (fabs(t) <= 1e-17 * fabs(s)) break;
    }
    return s * exp(-ax);
  }
  /* e^x / sqrt(2 pi x) * sum_k (-1)^k a_k / x^k, a_k = a_{k-1} (4 nu^2 - (2k-1)^2) / (8k) */
  double mu = 4.0 * nu * nu, a = 1.0, s = 1.0;
  for (int k = 1; k < 60; ++k) {
    double f = (mu - (double)(2 * k - 1) * (double)(2 * k - 1)) / (8.0 * k * ax);
    a *= -f;
    s += a;
    if (fabs(a) <= 1e-17 * fabs(s)) break;
  }
  s /= sqrt(2.0 * M_PI * ax);
  return nu && x < 0 ? -s : s;
}
static double bessel_i(int nu, double x) {
  if (isinf(x)) return NAN; /* as PyTorch's CPU kernels (exp(x) * series / sqrt(x) = inf / inf) */
  return bessel_ie(nu, x) * exp(fabs(x)); /* overflows to inf where the exact value does */
}

/* Hurwitz zeta(s, q) for integer s >= 2 */
static double hurwitz_zeta(double s, double q) {
  if (q <= 0 && q == floor(q)) return INFINITY;
  /* B_{2j} / (2j)!, j = 1..12 */
  static const double b2j[12] = {
    1.0 / 6 / 2, -1.0 / 30 / 24, 1.0 / 42 / 720, -1.0 / 30 / 40320, 5.0 / 66 / 3628800,
    -691.0 / 2730 / 479001600, 7.0 / 6 / 87178291200.0, -3617.0 / 510 / 20922789888000.0,
    43867.0 / 798 / 6402373705728000.0, -174611.0 / 330 / 2432902008176640000.0,
    854513.0 / 138 / 1.1240007277776077e21, -236364091.0 / 2730 / 6.204484017332394e23,
  };
  double sum = 0, a = q;
  int n = 0;
  while (a < 10 || n < 9) { sum += pow(a, -s); a += 1; ++n; }
  /* tail: a^(1-s)/(s-1) + a^-s/2 + sum_j B_2j/(2j)! s(s+1)..(s+2j-2) a^(-s-2j+1) */
  double tail = pow(a, 1 - s) / (s - 1) + 0.5 * pow(a, -s);
  double rising = s, p = pow(a, -s - 1);
  for (int j = 0; j < 12; ++j) {
    double t = b2j[j] * rising * p;
    tail += t;
    if (fabs(t) <= 1e-17 * fabs(sum + tail)) break;
    rising *= (s + 2 * j + 1) * (s + 2 * j + 2);
    p /= a * a;
  }
  return sum + tail;
}
static double polygamma(int64_t n, double x) {
  if (isnan(x)) return x;
  double fact = 1;
  for (int64_t k = 2; k <= n; ++k) fact *= (double)k;
  return ((n % 2) ? 1.0 : -1.0) * fact * hurwitz_zeta((double)(n + 1), x);
}

double tpu_host_special_eval(int f, int64_t n, double x) {
  switch (f) {
    case TPU_IR_SPECIAL_I0: return bessel_i(0, x);
    case TPU_IR_SPECIAL_I0E: return bessel_ie(0, x);
    case TPU_IR_SPECIAL_I1: return bessel_i(1, x);
    case TPU_IR_SPECIAL_I1E: return bessel_ie(1, x);
    case TPU_IR_SPECIAL_POLYGAMMA: return polygamma(n, x);
    default: return NAN;
  }
}

typedef struct { const tpu_ir_op_t* op; const tpu_host_view_t *x, *out; } sp_job_t;
static void sp_worker(void* ctx, int64_t b, int64_t e) {
  const sp_job_t* J = ctx;
  const tpu_host_view_t *x = J->x, *out = J->out;
  int f = (int)J->op->i1;
  int64_t n = J->op->a[0][0];
  size_t xs = tpu_dtype_size(x->dtype), os = tpu_dtype_size(out->dtype);
  for (int64_t i = b; i < e; ++i) {
    int64_t rem = i, xo = 0, oo = 0;
    for (int d = x->rank - 1; d >= 0; --d) {
      int64_t k = rem % x->sizes[d];
      rem /= x->sizes[d];
      xo += k * x->strides[d]; oo += k * out->strides[d];
    }
    double v = tpu_host_load_f64(x->data + xo * (int64_t)xs, x->dtype);
    tpu_host_store_f64(out->data + oo * (int64_t)os, out->dtype, tpu_host_special_eval(f, n, v));
  }
}
tpu_status_t tpu_host_k_special(const tpu_ir_op_t* op, const tpu_host_view_t* x, const tpu_host_view_t* out) {
  if ((x->dtype != TPU_DTYPE_F32 && x->dtype != TPU_DTYPE_F64) || out->dtype != x->dtype || out->rank != x->rank ||
      op->i1 < 0 || op->i1 >= TPU_IR_SPECIAL_COUNT || (op->i1 == TPU_IR_SPECIAL_POLYGAMMA && op->a[0][0] < 1))
    return TPU_ERR(INTERNAL, "special: operands");
  int64_t n = 1;
  for (int d = 0; d < x->rank; ++d) {
    if (out->sizes[d] != x->sizes[d]) return TPU_ERR(INTERNAL, "special: shapes");
    n *= x->sizes[d];
  }
  sp_job_t J = {op, x, out};
  if (n) tpu_pool_parallel_for(n, 2048, sp_worker, &J);
  return TPU_OK;
}
