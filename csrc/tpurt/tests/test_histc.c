/* test_histc.c — histc's range from its data (custom HISTC_EDGES, ir.h): PyTorch's widening of an empty range
 * (tpu_ir_histc_widen), the host kernel's run-time errors, the operand rule a loaded graph is checked against,
 * and the StableHLO expansion. Run under ASan/UBSan by `make test-sanitize`. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/host/host.h"
#include "ir/ir.h"
#include "ir/serialize.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static void test_widen(void) {
  struct { int dt; double v, lo, hi; } c[] = {
    {TPU_DTYPE_F32, 3.0, 2.0, 4.0},
    {TPU_DTYPE_F32, 16777218.0, 16777216.0, 16777220.0},     /* f32 neighbours are 2 away: farther than 1 */
    {TPU_DTYPE_F32, INFINITY, FLT_MAX, INFINITY},            /* PyTorch's "[3.40282e+38, inf]" */
    {TPU_DTYPE_F32, -INFINITY, -INFINITY, -FLT_MAX},
    {TPU_DTYPE_F64, 9007199254740994.0, 9007199254740992.0, 9007199254740996.0},
    {TPU_DTYPE_F64, INFINITY, DBL_MAX, INFINITY},
    {TPU_DTYPE_BF16, 1e30, 1e30 - 1, 1e30 + 1},              /* other dtypes: -+ 1 (lost here: PyTorch raises) */
    {TPU_DTYPE_I64, 5.0, 4.0, 6.0},
  };
  for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); ++k) {
    double lo = c[k].v, hi = c[k].v;
    tpu_ir_histc_widen(c[k].dt, &lo, &hi);
    CHECK(lo == c[k].lo && hi == c[k].hi, "widen %zu (%g): [%.17g, %.17g], want [%.17g, %.17g]", k, c[k].v, lo, hi,
          c[k].lo, c[k].hi);
  }
}

/* the kernel through the host's custom-call entry: (min, max) -> (lo, hi) or the error */
static tpu_status_t run_edges(int dt, double mn, double mx, double out[2]) {
  tpu_ir_op_t op = {0};
  op.opcode = TPU_IR_CUSTOM; op.i0 = TPU_IR_CUSTOM_HISTC_EDGES; op.i1 = dt;
  op.type.dtype = TPU_DTYPE_F64; op.type.rank = 1; op.type.dims[0] = 2;
  tpu_host_view_t in[2] = {{0}, {0}}, o = {0};
  in[0].data = (char*)&mn; in[0].dtype = TPU_DTYPE_F64;
  in[1].data = (char*)&mx; in[1].dtype = TPU_DTYPE_F64;
  o.data = (char*)out; o.dtype = TPU_DTYPE_F64; o.rank = 1; o.sizes[0] = 2; o.strides[0] = 1;
  return tpu_host_k_custom(&op, 2, in, &o);
}
static void test_kernel(void) {
  double o[2];
  tpu_status_t s = run_edges(TPU_DTYPE_F32, -1.5, 2.0, o);
  CHECK(s == TPU_OK && o[0] == -1.5 && o[1] == 2.0, "a range with width is kept");
  tpu_status_free(s);
  s = run_edges(TPU_DTYPE_F32, 1e30, 1e30, o);
  CHECK(s == TPU_OK && o[0] == (double)nextafterf(1e30f, 0) && o[1] == (double)nextafterf(1e30f, INFINITY), "f32 [1e30, 1e30]");
  tpu_status_free(s);
  struct { int dt; double mn, mx; const char* msg; } e[] = {
    {TPU_DTYPE_F32, 1.0, INFINITY, "torch.histc: range of [1, inf] is not finite"},
    {TPU_DTYPE_F32, INFINITY, INFINITY, "torch.histc: range of [3.40282e+38, inf] is not finite"},
    {TPU_DTYPE_F64, NAN, NAN, "torch.histc: range of [nan, nan] is not finite"},
    {TPU_DTYPE_BF16, 1e30, 1e30, "torch.histc: max must be larger than min"},
  };
  for (size_t k = 0; k < sizeof(e) / sizeof(e[0]); ++k) {
    s = run_edges(e[k].dt, e[k].mn, e[k].mx, o);
    CHECK(s != TPU_OK && tpu_status_code(s) == TPU_STATUS_INVALID_ARGUMENT && !strcmp(tpu_status_message(s), e[k].msg),
          "error %zu: %s", k, s ? tpu_status_message(s) : "OK");
    tpu_status_free(s);
  }
}

/* (min, max) scalars -> HISTC_EDGES; damage 1: an f32 operand, 2: a [3] result */
static int edges_graph(tpu_ir_graph_t* g, int damage) {
  tpu_ir_graph_init(g);
  int mn = tpu_ir_scalar(g, TPU_DTYPE_F64), mx = tpu_ir_scalar(g, damage == 1 ? TPU_DTYPE_F32 : TPU_DTYPE_F64);
  tpu_ir_op_t p = {0};
  p.opcode = TPU_IR_CUSTOM; p.i0 = TPU_IR_CUSTOM_HISTC_EDGES; p.i1 = TPU_DTYPE_F32;
  p.type.dtype = TPU_DTYPE_F64; p.type.rank = 1; p.type.dims[0] = damage == 2 ? 3 : 2;
  tpu_ir_output(g, tpu_ir_add_op(g, &p, 2, (int[]){mn, mx}));
  return g->status == TPU_OK;
}
static void test_serialize_and_stablehlo(void) {
  for (int k = 0; k < 3; ++k) {
    tpu_ir_graph_t g, back;
    CHECK(edges_graph(&g, k), "graph %d builds", k);
    uint8_t* buf = NULL;
    size_t len = 0;
    tpu_status_t s = tpu_ir_graph_serialize(&g, &buf, &len);
    CHECK(s == TPU_OK, "serialize %d", k);
    tpu_status_free(s);
    s = tpu_ir_graph_deserialize(buf, len, &back);
    if (k == 0) CHECK(s == TPU_OK && tpu_ir_equal(&g, &back), "HISTC_EDGES graph round-trips");
    else CHECK(s != TPU_OK, "damaged HISTC_EDGES graph %d must be refused at load", k);
    if (k == 0) {
      char* text = NULL;
      tpu_status_t p = tpu_ir_stablehlo_print(&g, "main", &text);
      CHECK(p == TPU_OK && text && strstr(text, "chlo.next_after") && strstr(text, "stablehlo.is_finite"),
            "StableHLO expansion: %s", p ? tpu_status_message(p) : (text ? text : "(null)"));
      tpu_status_free(p);
      free(text);
    }
    tpu_ir_graph_free(&back);
    tpu_status_free(s);
    free(buf);
    tpu_ir_graph_free(&g);
  }
}

int main(void) {
  test_widen();
  test_kernel();
  test_serialize_and_stablehlo();
  printf("test_histc: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
