/* test_ops.c — end-to-end checks of the C op path (lowering -> IR -> host executable
 * -> queue) against naive loops computed here, plus IR builder/verifier/printer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "drivers/host/host.h"
#include "ir/ir.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

static void* dev_alloc(size_t n) { void* p = NULL; OK(tpu_rt_malloc(0, n, &p)); return p; }

static void test_ir(void) {
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, (int64_t[]){4, 8});
  int s = tpu_ir_scalar(&g, TPU_DTYPE_F32);
  int y = tpu_ir_binary(&g, TPU_IR_MUL, x, tpu_ir_broadcast(&g, s, 2, (int64_t[]){4, 8}, NULL));
  tpu_ir_output(&g, y);
  OK(tpu_ir_verify(&g));
  char buf[1024];
  tpu_ir_print(&g, buf, sizeof buf);
  CHECK(strstr(buf, "multiply") && strstr(buf, "f32[4,8]"), "printer output: %s", buf);
  tpu_ir_graph_t h; tpu_ir_graph_init(&h);
  int x2 = tpu_ir_param(&h, TPU_DTYPE_F32, 2, (int64_t[]){4, 8});
  int s2 = tpu_ir_scalar(&h, TPU_DTYPE_F32);
  tpu_ir_output(&h, tpu_ir_binary(&h, TPU_IR_MUL, x2, tpu_ir_broadcast(&h, s2, 2, (int64_t[]){4, 8}, NULL)));
  CHECK(tpu_ir_hash(&g) == tpu_ir_hash(&h) && tpu_ir_equal(&g, &h), "structural hash/equality");
  /* errors are sticky and never abort */
  int bad = tpu_ir_binary(&h, TPU_IR_ADD, x2, s2);
  CHECK(bad == -1 && h.status != TPU_OK, "shape mismatch rejected");
  CHECK(tpu_ir_unary(&h, TPU_IR_EXP, bad) == -1, "error propagates");
  tpu_ir_graph_free(&g); tpu_ir_graph_free(&h);
}

static void test_add_broadcast(void) {
  /* out[3,5] = a[3,1] + b[5] * 2.5 */
  float a[3], b[5], out[15];
  for (int i = 0; i < 3; ++i) a[i] = frand();
  for (int i = 0; i < 5; ++i) b[i] = frand();
  void *da = dev_alloc(sizeof a), *db = dev_alloc(sizeof b), *dout = dev_alloc(sizeof out);
  OK(tpu_rt_memcpy_h2d(0, da, a, sizeof a));
  OK(tpu_rt_memcpy_h2d(0, db, b, sizeof b));
  tpu_tensor_t ta = tpu_tensor_contiguous(da, 0, TPU_DTYPE_F32, 2, (int64_t[]){3, 1});
  tpu_tensor_t tb = tpu_tensor_contiguous(db, 0, TPU_DTYPE_F32, 1, (int64_t[]){5});
  tpu_tensor_t to = tpu_tensor_contiguous(dout, 0, TPU_DTYPE_F32, 2, (int64_t[]){3, 5});
  tpu_arg_t args[] = {tpu_arg_tensor(&ta), tpu_arg_tensor(&tb), tpu_arg_f64(2.5), tpu_arg_tensor(&to)};
  OK(tpu_op_run(0, "aten::add.out", args, 4, &to, 1));
  OK(tpu_rt_memcpy_d2h(0, out, dout, sizeof out));
  int ok = 1;
  for (int i = 0; i < 3; ++i) for (int j = 0; j < 5; ++j) ok &= fabsf(out[i * 5 + j] - (a[i] + b[j] * 2.5f)) < 1e-6f;
  CHECK(ok, "add.out broadcast");
  /* second call with another alpha hits the executable cache */
  tpu_metrics_t m0, m1;
  tpu_metrics_get(&m0);
  args[2] = tpu_arg_f64(-1.0);
  OK(tpu_op_run(0, "aten::add.out", args, 4, &to, 1));
  tpu_metrics_get(&m1);
  CHECK(m1.exec_cache_hits == m0.exec_cache_hits + 1 && m1.compiles == m0.compiles, "scalar is a runtime parameter");
  OK(tpu_rt_memcpy_d2h(0, out, dout, sizeof out));
  CHECK(fabsf(out[7] - (a[1] - b[2])) < 1e-6f, "alpha -1");
  /* transposed output view: out^T = ... (strides [1, 3] over a [5,3] logical shape) */
  tpu_tensor_t tt = to; tt.sizes[0] = 5; tt.sizes[1] = 3; tt.strides[0] = 1; tt.strides[1] = 5;
  tpu_tensor_t ta2 = tpu_tensor_contiguous(da, 0, TPU_DTYPE_F32, 1, (int64_t[]){3});
  tpu_tensor_t tb2 = tpu_tensor_contiguous(db, 0, TPU_DTYPE_F32, 2, (int64_t[]){5, 1});
  tpu_arg_t args2[] = {tpu_arg_tensor(&ta2), tpu_arg_tensor(&tb2), tpu_arg_tensor(&tt)};
  OK(tpu_op_run(0, "aten::mul.out", args2, 3, &tt, 1));
  OK(tpu_rt_memcpy_d2h(0, out, dout, sizeof out));
  ok = 1;
  for (int i = 0; i < 3; ++i) for (int j = 0; j < 5; ++j) ok &= fabsf(out[i * 5 + j] - a[i] * b[j]) < 1e-6f;
  CHECK(ok, "mul.out into a transposed view");
  tpu_rt_free(0, da); tpu_rt_free(0, db); tpu_rt_free(0, dout);
}

static void test_unsupported(void) {
  tpu_status_t s = tpu_op_run(0, "aten::definitely_not_an_op", NULL, 0, NULL, 0);
  CHECK(tpu_status_code(s) == TPU_STATUS_UNSUPPORTED && strstr(tpu_status_message(s), "definitely_not_an_op"), "unsupported op named");
  tpu_status_free(s);
  CHECK(!tpu_op_supported("aten::definitely_not_an_op") && tpu_op_supported("aten::add.out"), "tpu_op_supported");
}

static void test_dtypes(void) {
  /* bf16 + int32 -> bf16 (computed in f32, rounded once); int32 overflow wraps */
  uint16_t a[4]; int32_t b[4] = {1, -2, 3, 2147483647}; uint16_t out[4]; int32_t iout[4];
  float av[4] = {0.5f, 1.25f, -3.0f, 100.0f};
  for (int i = 0; i < 4; ++i) { uint32_t bits; memcpy(&bits, &av[i], 4); a[i] = (uint16_t)(bits >> 16); }
  void *da = dev_alloc(8), *db = dev_alloc(16), *dout = dev_alloc(8), *diout = dev_alloc(16);
  OK(tpu_rt_memcpy_h2d(0, da, a, 8)); OK(tpu_rt_memcpy_h2d(0, db, b, 16));
  tpu_tensor_t ta = tpu_tensor_contiguous(da, 0, TPU_DTYPE_BF16, 1, (int64_t[]){4});
  tpu_tensor_t tb = tpu_tensor_contiguous(db, 0, TPU_DTYPE_I32, 1, (int64_t[]){4});
  tpu_tensor_t to = tpu_tensor_contiguous(dout, 0, TPU_DTYPE_BF16, 1, (int64_t[]){4});
  tpu_arg_t args[] = {tpu_arg_tensor(&ta), tpu_arg_tensor(&tb), tpu_arg_i64(1), tpu_arg_tensor(&to)};
  OK(tpu_op_run(0, "aten::add.out", args, 4, &to, 1));
  OK(tpu_rt_memcpy_d2h(0, out, dout, 8));
  uint32_t u = (uint32_t)out[0] << 16; float f; memcpy(&f, &u, 4);
  CHECK(f == 1.5f, "bf16 + i32 = %g", f);
  tpu_tensor_t tio = tpu_tensor_contiguous(diout, 0, TPU_DTYPE_I32, 1, (int64_t[]){4});
  tpu_arg_t args2[] = {tpu_arg_tensor(&tb), tpu_arg_tensor(&tb), tpu_arg_i64(1), tpu_arg_tensor(&tio)};
  OK(tpu_op_run(0, "aten::add.out", args2, 4, &tio, 1));
  OK(tpu_rt_memcpy_d2h(0, iout, diout, 16));
  CHECK(iout[1] == -4 && iout[3] == -2, "int32 wraps: %d %d", iout[1], iout[3]);
  /* float output into an int tensor is rejected synchronously with PyTorch's words */
  tpu_arg_t args3[] = {tpu_arg_tensor(&ta), tpu_arg_tensor(&tb), tpu_arg_i64(1), tpu_arg_tensor(&tio)};
  tpu_status_t s = tpu_op_run(0, "aten::add.out", args3, 4, &tio, 1);
  CHECK(s && strstr(tpu_status_message(s), "can't be cast"), "can't cast: %s", tpu_status_message(s));
  tpu_status_free(s);
  tpu_rt_free(0, da); tpu_rt_free(0, db); tpu_rt_free(0, dout); tpu_rt_free(0, diout);
}


/* reduce(elementwise(x)) large enough for the executor's blocked evaluation: blocking a
 * kept dim (sum over dim 1) and a reduced dim (sum over dim 0, partials), vs naive sums. */
static void test_fused_reduce(void) {
  enum { M = 700, N = 1100 };
  float* x = malloc(sizeof(float) * M * N);
  for (int i = 0; i < M * N; ++i) x[i] = frand();
  for (int reduce_dim = 0; reduce_dim < 2; ++reduce_dim) {
    tpu_ir_graph_t g; tpu_ir_graph_init(&g);
    int p = tpu_ir_param(&g, TPU_DTYPE_F32, 2, (int64_t[]){M, N});
    int sq = tpu_ir_binary(&g, TPU_IR_MUL, p, p);
    int y = tpu_ir_binary(&g, TPU_IR_ADD, sq, tpu_ir_broadcast(&g, tpu_ir_constant(&g, TPU_DTYPE_F32, 0.5), 2, (int64_t[]){M, N}, NULL));
    int64_t flags[2] = {reduce_dim == 0, reduce_dim == 1};
    tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_SUM, y, flags));
    tpu_host_exe_t* exe = NULL;
    OK(tpu_host_compile(&g, &exe));
    int n_out = reduce_dim == 0 ? N : M;
    float* out = malloc(sizeof(float) * n_out);
    tpu_host_view_t in = {(char*)x, TPU_DTYPE_F32, 2, {M, N}, {N, 1}};
    tpu_host_view_t ov = {(char*)out, TPU_DTYPE_F32, 1, {n_out}, {1}};
    OK(exe ? tpu_host_exe_run(exe, &in, NULL, &ov) : TPU_ERR(INTERNAL, "no exe"));
    int ok = 1;
    for (int o = 0; o < n_out && ok; ++o) {
      double acc = 0;
      for (int r = 0; r < (reduce_dim == 0 ? M : N); ++r) {
        float v = reduce_dim == 0 ? x[r * N + o] : x[o * N + r];
        acc += (double)(v * v + 0.5f);
      }
      ok = fabs(out[o] - acc) <= 1e-5 * fabs(acc) + 1e-4;
      if (!ok) printf("  dim %d out[%d] = %g, want %g\n", reduce_dim, o, out[o], acc);
    }
    CHECK(ok, "blocked reduce of an elementwise producer over dim %d", reduce_dim);
    tpu_host_exe_free(exe); tpu_ir_graph_free(&g); free(out);
  }
  free(x);
}

int main(void) {
  srand(1234);
  OK(tpu_rt_init());
  test_ir();
  test_add_broadcast();
  test_unsupported();
  test_dtypes();
  test_fused_reduce();
  OK(tpu_rt_synchronize(0));
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail != 0;
}
