/* test_stablehlo.c — the StableHLO printer's text on small graphs (ir/stablehlo*.c):
 * signature (params, then scalars, results in output order), op spellings, attribute
 * syntax, expansions of composite ops, errors. The numbers are checked by
 * tests/test_stablehlo.py, which runs the printed modules with jax's XLA on the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static char* print_ok(const tpu_ir_graph_t* g) {
  char* txt = NULL;
  tpu_status_t st = tpu_ir_stablehlo_print(g, "main", &txt);
  CHECK(st == TPU_OK && txt, "print failed: %s", tpu_status_message(st));
  tpu_status_free(st);
  return txt ? txt : calloc(1, 1);
}
static int count(const char* s, const char* sub) {
  int n = 0;
  for (const char* p = strstr(s, sub); p; p = strstr(p + 1, sub)) n++;
  return n;
}
#define HAS(txt, sub) CHECK(strstr((txt), (sub)) != NULL, "missing `%s` in:\n%s", (sub), (txt))

static void test_signature_and_elementwise(void) {
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, (int64_t[]){4, 8});
  int s = tpu_ir_scalar(&g, TPU_DTYPE_F32);
  int y = tpu_ir_param(&g, TPU_DTYPE_BF16, 1, (int64_t[]){8});
  int sb = tpu_ir_broadcast(&g, s, 2, (int64_t[]){4, 8}, NULL);
  int m = tpu_ir_binary(&g, TPU_IR_MUL, x, sb);
  int yb = tpu_ir_convert(&g, tpu_ir_broadcast(&g, y, 2, (int64_t[]){4, 8}, NULL), TPU_DTYPE_F32);
  int c = tpu_ir_compare(&g, TPU_IR_CMP_LT, m, yb);
  tpu_ir_output(&g, tpu_ir_select(&g, c, m, yb));
  tpu_ir_output(&g, tpu_ir_unary(&g, TPU_IR_EXP, y));
  char* t = print_ok(&g);
  HAS(t, "func.func public @main(%arg0: tensor<4x8xf32>, %arg1: tensor<8xbf16>, %arg2: tensor<f32>) -> (tensor<4x8xf32>, tensor<8xbf16>)");
  HAS(t, "\"stablehlo.broadcast_in_dim\"(%arg2) {broadcast_dimensions = array<i64>}");
  HAS(t, "{broadcast_dimensions = array<i64: 1>} : (tensor<8xbf16>) -> tensor<4x8xbf16>");
  HAS(t, "comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type FLOAT>");
  HAS(t, "\"stablehlo.select\"");
  /* bf16 math runs in f32 and rounds once, as the host */
  HAS(t, "\"stablehlo.exponential\"(%v");
  HAS(t, ": (tensor<8xf32>) -> tensor<8xbf16>");
  HAS(t, "\"func.return\"(");
  CHECK(count(t, "\"stablehlo.exponential\"") == 1, "one exp");
  free(t); tpu_ir_graph_free(&g);
}

static void test_integer_composites(void) {
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int a = tpu_ir_param(&g, TPU_DTYPE_I32, 1, (int64_t[]){5});
  int b = tpu_ir_param(&g, TPU_DTYPE_I32, 1, (int64_t[]){5});
  tpu_ir_output(&g, tpu_ir_binary(&g, TPU_IR_FLOOR_DIV, a, b));
  tpu_ir_output(&g, tpu_ir_binary(&g, TPU_IR_REM, a, b));
  tpu_ir_output(&g, tpu_ir_compare(&g, TPU_IR_CMP_GE, a, b));
  int u = tpu_ir_param(&g, TPU_DTYPE_U8, 1, (int64_t[]){5});
  tpu_ir_output(&g, tpu_ir_compare(&g, TPU_IR_CMP_GT, u, u));
  tpu_ir_output(&g, tpu_ir_binary(&g, TPU_IR_SHR, u, u));
  tpu_ir_output(&g, tpu_ir_convert(&g, a, TPU_DTYPE_BOOL));
  char* t = print_ok(&g);
  HAS(t, "compare_type = #stablehlo<comparison_type SIGNED>");
  HAS(t, "compare_type = #stablehlo<comparison_type UNSIGNED>");
  HAS(t, "\"stablehlo.shift_right_logical\"");      /* u8 */
  HAS(t, "\"stablehlo.remainder\"");
  HAS(t, "dense<0> : tensor<5xi32>");               /* the x / 0 = 0 guard */
  HAS(t, "-> tensor<5xi1>");
  free(t); tpu_ir_graph_free(&g);
}

static void test_constants(void) {
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int c1 = tpu_ir_constant(&g, TPU_DTYPE_F32, -INFINITY);
  int c2 = tpu_ir_constant(&g, TPU_DTYPE_BF16, 1.0);
  int c3 = tpu_ir_constant(&g, TPU_DTYPE_BOOL, 1);
  int c4 = tpu_ir_constant(&g, TPU_DTYPE_U8, 255);
  tpu_ir_output(&g, c1); tpu_ir_output(&g, c2); tpu_ir_output(&g, c3); tpu_ir_output(&g, c4);
  char* t = print_ok(&g);
  HAS(t, "dense<0xFF800000> : tensor<f32>");
  HAS(t, "dense<0x3F80> : tensor<bf16>");
  HAS(t, "dense<true> : tensor<i1>");
  HAS(t, "dense<255> : tensor<ui8>");
  CHECK(!strstr(t, "%arg"), "no arguments");
  free(t); tpu_ir_graph_free(&g);
}

static void test_views_and_reduce(void) {
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
  int tr = tpu_ir_transpose(&g, x, (int64_t[]){2, 0, 1});
  int sl = tpu_ir_slice(&g, tr, (int64_t[]){1, 0, 0}, (int64_t[]){4, 2, 3}, (int64_t[]){2, 1, 2});
  int pv = tpu_ir_constant(&g, TPU_DTYPE_F32, 0);
  int pd = tpu_ir_pad(&g, sl, pv, (int64_t[]){1, -1, 0}, (int64_t[]){0, 2, 1});
  tpu_ir_output(&g, pd);
  tpu_ir_output(&g, tpu_ir_reduce(&g, TPU_IR_MONOID_NANMAX, x, (int64_t[]){0, 1, 0}));
  int xs[2] = {x, x};
  tpu_ir_output(&g, tpu_ir_concat(&g, 2, xs, 1));
  char* t = print_ok(&g);
  HAS(t, "{permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>");
  HAS(t, "{start_indices = array<i64: 1, 0, 0>, limit_indices = array<i64: 4, 2, 3>, strides = array<i64: 2, 1, 2>}");
  HAS(t, "edge_padding_low = array<i64: 1, -1, 0>");
  HAS(t, "\"stablehlo.reduce\"(%arg0, %v");
  HAS(t, "\"stablehlo.maximum\"");
  HAS(t, "{dimensions = array<i64: 1>} : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x4xf32>");
  HAS(t, "\"stablehlo.return\"");
  HAS(t, "{dimension = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x6x4xf32>");
  free(t); tpu_ir_graph_free(&g);
}

static void test_dot(void) {
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int a = tpu_ir_param(&g, TPU_DTYPE_F32, 3, (int64_t[]){2, 3, 5});
  int b = tpu_ir_param(&g, TPU_DTYPE_F32, 3, (int64_t[]){2, 5, 7});
  tpu_ir_output(&g, tpu_ir_dot(&g, a, b, 1, TPU_DTYPE_F32));
  char* t = print_ok(&g);
  HAS(t, "#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
         "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>");
  HAS(t, "-> tensor<2x3x7xf32>");
  free(t); tpu_ir_graph_free(&g);
}

static void test_indexing_sort_rng(void) {
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  int x = tpu_ir_param(&g, TPU_DTYPE_F32, 2, (int64_t[]){3, 5});
  int i = tpu_ir_param(&g, TPU_DTYPE_I64, 2, (int64_t[]){3, 2});
  int seed = tpu_ir_scalar(&g, TPU_DTYPE_I64), off = tpu_ir_scalar(&g, TPU_DTYPE_I64);
  tpu_ir_output(&g, tpu_ir_gather(&g, x, i, 1));
  tpu_ir_output(&g, tpu_ir_argreduce(&g, 0, x, 1));
  tpu_ir_output(&g, tpu_ir_sort(&g, x, 1, 0, 1));
  tpu_ir_output(&g, tpu_ir_cumulative(&g, TPU_IR_MONOID_SUM, x, 0));
  tpu_ir_output(&g, tpu_ir_rng(&g, TPU_DTYPE_F32, 1, (int64_t[]){6}, seed, off, 0));
  char* t = print_ok(&g);
  HAS(t, "func.func public @main(%arg0: tensor<3x5xf32>, %arg1: tensor<3x2xi64>, %arg2: tensor<i64>, %arg3: tensor<i64>)");
  HAS(t, "#stablehlo.gather<offset_dims = [], collapsed_slice_dims = [0, 1], start_index_map = [0, 1], index_vector_dim = 2>");
  HAS(t, "\"stablehlo.reduce\"(%arg0, %v");                  /* argmax: (value, index) pairs */
  HAS(t, "-> (tensor<3xf32>, tensor<3xi64>)");
  HAS(t, "{dimension = 1 : i64, is_stable = true}");
  HAS(t, "\"stablehlo.reduce_window\"");
  HAS(t, "dense<3528531795> : tensor<2xi64>");               /* Philox multiplier 0xD2511F53 */
  CHECK(count(t, "dense<3528531795>") == 10, "ten Philox rounds");
  free(t); tpu_ir_graph_free(&g);
}

/* tpu_debug_record_graphs: an op run records its module, inputs, scalars and outputs */
static void test_recording(void) {
  float a[6] = {1, -2, 3, 4.5f, -5, 6}, b[6] = {0.5f, 1, -1, 2, 3, -4}, out[6];
  void *da = NULL, *db = NULL, *dout = NULL;
  tpu_status_t st = tpu_rt_malloc(0, sizeof a, &da);
  if (!st) st = tpu_rt_malloc(0, sizeof b, &db);
  if (!st) st = tpu_rt_malloc(0, sizeof out, &dout);
  if (!st) st = tpu_rt_memcpy_h2d(0, da, a, sizeof a);
  if (!st) st = tpu_rt_memcpy_h2d(0, db, b, sizeof b);
  CHECK(st == TPU_OK, "setup: %s", tpu_status_message(st));
  tpu_status_free(st);
  tpu_tensor_t ta = tpu_tensor_contiguous(da, 0, TPU_DTYPE_F32, 2, (int64_t[]){2, 3});
  tpu_tensor_t tb = tpu_tensor_contiguous(db, 0, TPU_DTYPE_F32, 2, (int64_t[]){2, 3});
  tpu_tensor_t to = tpu_tensor_contiguous(dout, 0, TPU_DTYPE_F32, 2, (int64_t[]){2, 3});
  tpu_arg_t args[] = {tpu_arg_tensor(&ta), tpu_arg_tensor(&tb), tpu_arg_f64(2.0), tpu_arg_tensor(&to)};
  CHECK(tpu_debug_take_graph() == NULL, "nothing recorded before enabling");
  tpu_debug_record_graphs(true);
  st = tpu_op_run(0, "aten::add.out", args, 4, &to, 1);
  if (!st) st = tpu_rt_synchronize(0);
  tpu_debug_record_graphs(false);
  CHECK(st == TPU_OK, "add.out: %s", tpu_status_message(st));
  tpu_status_free(st);
  tpu_debug_graph_t* r = tpu_debug_take_graph();
  CHECK(r && r->text && !r->error, "one record with text");
  if (r && r->text) {
    HAS(r->text, "func.func public @main(");
    int np = 0, ns = 0, no = 0;
    for (int k = 0; k < r->n_arrays; ++k) {
      const tpu_debug_array_t* x = &r->arrays[k];
      np += x->role == TPU_DEBUG_PARAM; ns += x->role == TPU_DEBUG_SCALAR; no += x->role == TPU_DEBUG_OUTPUT;
      CHECK(x->data != NULL, "array %d has data", k);
    }
    CHECK(np == 2 && no == 1 && ns >= 1, "params %d scalars %d outputs %d", np, ns, no);
    const tpu_debug_array_t* o = &r->arrays[r->n_arrays - 1];
    int ok = o->nbytes == sizeof out && o->data;
    for (int i = 0; ok && i < 6; ++i) ok &= ((const float*)o->data)[i] == a[i] + 2.0f * b[i];
    CHECK(ok, "recorded output = a + 2 b");
    CHECK(r->arrays[0].nbytes == sizeof a && !memcmp(r->arrays[0].data, a, sizeof a), "recorded input a");
  }
  tpu_debug_graph_free(r);
  CHECK(tpu_debug_take_graph() == NULL, "exactly one record");
  tpu_rt_free(0, da); tpu_rt_free(0, db); tpu_rt_free(0, dout);
}

static void test_errors(void) {
  char* t = (char*)1;
  tpu_ir_graph_t g; tpu_ir_graph_init(&g);
  tpu_status_t st = tpu_ir_stablehlo_print(&g, "main", &t); /* no outputs: fails the verifier */
  CHECK(st && tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT && t == NULL, "empty graph: %s", tpu_status_message(st));
  tpu_status_free(st);
  st = tpu_ir_stablehlo_print(&g, "main", NULL);
  CHECK(st != TPU_OK, "NULL out_text");
  tpu_status_free(st);
  tpu_ir_graph_free(&g);
}

int main(void) {
  test_signature_and_elementwise();
  test_integer_composites();
  test_constants();
  test_views_and_reduce();
  test_dot();
  test_indexing_sort_rng();
  test_recording();
  test_errors();
  printf("test_stablehlo: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
