/* test_capture_codec.c — a capture's bindings encoding (lower/trace.c tpu_capture_encode / tpu_capture_decode,
 * the size-template sample of lower/capture_sizes.c) round-trips: encode -> decode -> encode gives the same
 * words, the decoded capture has the same buffers and outputs and replays bit-identically, and a damaged
 * encoding is refused with a reason (never trusted). The two functions mirror their field order by hand;
 * this is the test that notices when one changes and the other does not. The capture covers every part of
 * the encoding: a non-contiguous input, a parameter at an offset inside its input, an output written into
 * an input slice, fresh buffers, a user output that is an offset view of a buffer, integer and
 * non-integer scalars, RNG-reserved scalars and increments (dropout), size decisions (median, dropout's
 * Philox blocks). Run under ASan/UBSan by `make test-sanitize`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "lower/trace.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

enum { N = 5, K = 7 }; /* odd sizes */
static uint32_t g_seed = 2024;
static float frand(void) { g_seed = g_seed * 1664525u + 1013904223u; return (float)(g_seed >> 8) / 16777216.0f * 2.0f - 1.0f; }

typedef struct { void* p; tpu_tensor_t t; size_t bytes; } buf_t;
static buf_t dev_buf(int dtype, int ndim, const int64_t* sizes) {
  buf_t b = {0};
  b.bytes = tpu_dtype_size(dtype);
  for (int d = 0; d < ndim; ++d) b.bytes *= (size_t)sizes[d];
  OK(tpu_rt_malloc(0, b.bytes ? b.bytes : 1, &b.p));
  b.t = tpu_tensor_contiguous(b.p, 0, dtype, ndim, sizes);
  return b;
}
static void fill_random(buf_t* b) {
  float* h = malloc(b->bytes);
  for (size_t i = 0; i < b->bytes / 4; ++i) h[i] = frand();
  OK(tpu_rt_memcpy_h2d(0, b->p, h, b->bytes));
  free(h);
}
static void* host_copy(const buf_t* b) {
  void* h = malloc(b->bytes ? b->bytes : 1);
  OK(tpu_rt_memcpy_d2h(0, h, b->p, b->bytes));
  return h;
}
static void run_op(const char* op, tpu_arg_t* args, int nargs, const tpu_tensor_t* outs, int nouts) {
  OK(tpu_op_run(0, op, args, nargs, outs, nouts));
}

/* The capture's inputs: x (N, K); wt (K, N) read transposed; acc (N + 2, K), whose row 1 is read at an
 * offset and written in place. */
typedef struct { buf_t x, wt, acc; } inputs_t;
static inputs_t make_inputs(void) {
  inputs_t in = {dev_buf(TPU_DTYPE_F32, 2, (int64_t[]){N, K}), dev_buf(TPU_DTYPE_F32, 2, (int64_t[]){K, N}),
                 dev_buf(TPU_DTYPE_F32, 2, (int64_t[]){N + 2, K})};
  fill_random(&in.x); fill_random(&in.wt); fill_random(&in.acc);
  return in;
}
static void free_inputs(inputs_t* in) { tpu_rt_free(0, in->x.p); tpu_rt_free(0, in->wt.p); tpu_rt_free(0, in->acc.p); }
static tpu_tensor_t transposed(const tpu_tensor_t* t) {
  tpu_tensor_t v = *t;
  v.sizes[0] = t->sizes[1]; v.sizes[1] = t->sizes[0];
  v.strides[0] = t->strides[1]; v.strides[1] = t->strides[0];
  return v;
}
static tpu_tensor_t row_of(const tpu_tensor_t* t, int64_t r) { /* (K,) view of row r */
  tpu_tensor_t v = *t;
  v.ndim = 1; v.sizes[0] = t->sizes[1]; v.strides[0] = t->strides[1];
  v.data = (char*)t->data + r * t->strides[0] * (int64_t)tpu_dtype_size(t->dtype);
  return v;
}

static tpu_capture_t* capture(inputs_t* in) {
  int64_t nk[2] = {N, K}, n1[1] = {N};
  buf_t y = dev_buf(TPU_DTYPE_F32, 2, nk), s = dev_buf(TPU_DTYPE_F32, 1, n1), d = dev_buf(TPU_DTYPE_F32, 2, nk);
  buf_t mask = dev_buf(TPU_DTYPE_BOOL, 2, nk), med = dev_buf(TPU_DTYPE_F32, 1, n1), idx = dev_buf(TPU_DTYPE_I64, 1, n1);
  tpu_tensor_t w = transposed(&in->wt.t), acc1 = row_of(&in->acc.t, 1), x2 = row_of(&in->x.t, 2);
  OK(tpu_capture_begin(0));
  run_op("aten::mul.out", (tpu_arg_t[]){tpu_arg_tensor(&in->x.t), tpu_arg_tensor(&w), tpu_arg_tensor(&y.t)}, 3, &y.t, 1);
  run_op("aten::add.out", (tpu_arg_t[]){tpu_arg_tensor(&y.t), tpu_arg_tensor(&in->x.t), tpu_arg_f64(2.5), tpu_arg_tensor(&y.t)}, 4, &y.t, 1);
  run_op("aten::add.out", (tpu_arg_t[]){tpu_arg_tensor(&acc1), tpu_arg_tensor(&x2), tpu_arg_f64(3.0), tpu_arg_tensor(&acc1)}, 4, &acc1, 1);
  run_op("aten::sum.IntList_out", (tpu_arg_t[]){tpu_arg_tensor(&y.t), tpu_arg_int_list((int64_t[]){1}, 1), tpu_arg_bool(false),
                                                tpu_arg_none(), tpu_arg_tensor(&s.t)}, 5, &s.t, 1);
  tpu_tensor_t dm[2] = {d.t, mask.t};
  run_op("aten::native_dropout", (tpu_arg_t[]){tpu_arg_tensor(&y.t), tpu_arg_double(0.25), tpu_arg_bool(true)}, 3, dm, 2);
  tpu_tensor_t mi[2] = {med.t, idx.t};
  run_op("aten::median.dim_values", (tpu_arg_t[]){tpu_arg_tensor(&in->x.t), tpu_arg_int(1), tpu_arg_bool(false),
                                                  tpu_arg_tensor(&med.t), tpu_arg_tensor(&idx.t)}, 5, mi, 2);
  tpu_tensor_t y_tail = y.t; /* rows 2.. of y: a user output at an offset inside its buffer */
  y_tail.sizes[0] = N - 2; y_tail.data = (float*)y_tail.data + 2 * K;
  tpu_tensor_t ins[3] = {in->x.t, in->wt.t, in->acc.t};
  tpu_tensor_t outs[7] = {y_tail, s.t, d.t, mask.t, med.t, idx.t, acc1};
  tpu_capture_t* cap = NULL;
  char reason[256] = "";
  OK(tpu_capture_end_ex(0, ins, 3, NULL, 0, outs, 7, TPU_CAPTURE_KEEP_GRAPH, &cap, reason, sizeof reason));
  CHECK(cap != NULL, "capture made: %s", reason);
  OK(tpu_rt_synchronize(0));
  buf_t all[] = {y, s, d, mask, med, idx};
  for (int i = 0; i < 6; ++i) tpu_rt_free(0, all[i].p);
  return cap;
}

/* encode(c) into *a / *e (owned); 0 when it is no sample */
static int encode(const tpu_capture_t* c, int64_t** a, int* na, int64_t** e, int* ne) {
  char reason[256] = "";
  OK(tpu_capture_encode(c, a, na, e, ne, reason, sizeof reason));
  CHECK(*a != NULL, "encodable: %s", reason);
  return *a != NULL;
}
/* decode(clone of c's pre-pass graph, a, e); NULL with reason when refused */
static tpu_capture_t* decode(const tpu_capture_t* c, int device, const int64_t* a, int na, const int64_t* e, int ne,
                             char* reason, size_t reason_len) {
  tpu_ir_graph_t* g = malloc(sizeof(*g));
  OK(tpu_ir_graph_clone(tpu_capture_pre_graph(c), g));
  tpu_capture_t* out = NULL;
  reason[0] = 0;
  OK(tpu_capture_decode(device, g, a, na, e, ne, TPU_CAPTURE_KEEP_GRAPH, &out, reason, reason_len)); /* takes g */
  return out;
}

/* Runs c on fresh copies of `in` (generator at a fixed state); returns the host bytes of every buffer and
 * of acc (the input it writes), concatenated; *out_len its length. */
static uint8_t* replay(tpu_capture_t* c, const inputs_t* in, size_t* out_len) {
  inputs_t run = {dev_buf(TPU_DTYPE_F32, 2, (int64_t[]){N, K}), dev_buf(TPU_DTYPE_F32, 2, (int64_t[]){K, N}),
                  dev_buf(TPU_DTYPE_F32, 2, (int64_t[]){N + 2, K})};
  OK(tpu_rt_memcpy_d2d(0, run.x.p, 0, in->x.p, in->x.bytes));
  OK(tpu_rt_memcpy_d2d(0, run.wt.p, 0, in->wt.p, in->wt.bytes));
  OK(tpu_rt_memcpy_d2d(0, run.acc.p, 0, in->acc.p, in->acc.bytes));
  int nb = tpu_capture_num_buffers(c);
  buf_t* bufs = calloc((size_t)nb + 1, sizeof(buf_t));
  tpu_tensor_t* bt = calloc((size_t)nb + 1, sizeof(tpu_tensor_t));
  size_t total = run.acc.bytes;
  for (int b = 0; b < nb; ++b) {
    tpu_tensor_t meta;
    OK(tpu_capture_buffer_info(c, b, &meta));
    bufs[b] = dev_buf(meta.dtype, meta.ndim, meta.sizes); /* dense: the captured buffers are */
    bt[b] = meta;
    bt[b].data = bufs[b].p;
    total += bufs[b].bytes;
  }
  tpu_rt_generator_t* gen = tpu_rt_default_generator(0);
  tpu_rt_generator_set_seed(gen, 77);
  tpu_rt_generator_set_offset(gen, 40);
  tpu_tensor_t ins[3] = {run.x.t, run.wt.t, run.acc.t};
  OK(tpu_capture_run(c, ins, 3, bt, nb));
  uint8_t* host = malloc(total), *p = host;
  void* h = host_copy(&run.acc);
  memcpy(p, h, run.acc.bytes); p += run.acc.bytes; free(h);
  for (int b = 0; b < nb; ++b) { h = host_copy(&bufs[b]); memcpy(p, h, bufs[b].bytes); p += bufs[b].bytes; free(h); tpu_rt_free(0, bufs[b].p); }
  free(bufs); free(bt);
  free_inputs(&run);
  *out_len = total;
  return host;
}

static void test_round_trip(void) {
  inputs_t in = make_inputs();
  tpu_capture_t* c = capture(&in);
  int64_t *a1 = NULL, *e1 = NULL, *a2 = NULL, *e2 = NULL;
  int na1 = 0, ne1 = 0, na2 = 0, ne2 = 0;
  char reason[512];
  if (!c || !encode(c, &a1, &na1, &e1, &ne1)) { tpu_capture_free(c); free_inputs(&in); return; }
  tpu_capture_t* d = decode(c, 0, a1, na1, e1, ne1, reason, sizeof reason);
  CHECK(d != NULL, "decoded: %s", reason);
  if (d && encode(d, &a2, &na2, &e2, &ne2)) {
    CHECK(na1 == na2 && !memcmp(a1, a2, (size_t)na1 * sizeof(int64_t)), "size slots round-trip (%d, %d words)", na1, na2);
    CHECK(ne1 == ne2 && !memcmp(e1, e2, (size_t)ne1 * sizeof(int64_t)), "exact words round-trip (%d, %d words)", ne1, ne2);
  }
  if (d) {
    CHECK(tpu_capture_same(c, d, reason, sizeof reason), "decoded = captured: %s", reason);
    CHECK(tpu_capture_num_ops(c) == tpu_capture_num_ops(d) && tpu_capture_num_outputs(c) == tpu_capture_num_outputs(d) &&
          tpu_capture_num_buffers(c) == tpu_capture_num_buffers(d), "same counts");
    for (int k = 0; k < tpu_capture_num_outputs(c); ++k) {
      tpu_tensor_t m1, m2;
      int i1, i2, b1, b2;
      int64_t o1, o2;
      OK(tpu_capture_output_info(c, k, &m1, &i1, &b1, &o1));
      OK(tpu_capture_output_info(d, k, &m2, &i2, &b2, &o2));
      CHECK(i1 == i2 && b1 == b2 && o1 == o2 && m1.dtype == m2.dtype && m1.ndim == m2.ndim &&
            !memcmp(m1.sizes, m2.sizes, sizeof m1.sizes[0] * (size_t)m1.ndim) &&
            !memcmp(m1.strides, m2.strides, sizeof m1.strides[0] * (size_t)m1.ndim), "output %d binds the same", k);
    }
    CHECK(tpu_capture_num_outputs(c) == 7, "7 outputs");
    tpu_tensor_t m;
    int i0 = -1, b0 = -1, i6 = -1, b6 = -1;
    int64_t o0 = -1, o6 = -1;
    OK(tpu_capture_output_info(c, 0, &m, &i0, &b0, &o0));
    OK(tpu_capture_output_info(c, 6, &m, &i6, &b6, &o6));
    CHECK(i0 == -1 && b0 >= 0 && o0 == 2 * K, "y[2:] is a view at offset %lld of a buffer", (long long)o0);
    CHECK(i6 == 2 && o6 == K, "acc[1] is a view at offset %lld of input %d", (long long)o6, i6);
    size_t l1 = 0, l2 = 0;
    uint8_t* r1 = replay(c, &in, &l1);
    uint8_t* r2 = replay(d, &in, &l2);
    CHECK(l1 == l2 && !memcmp(r1, r2, l1), "the decoded capture replays bit-identically (%zu bytes)", l1);
    if (getenv("TPU_TEST_VERBOSE")) printf("%d slots, %d exact words; replay compares %zu bytes\n", na1, ne1, l1);
    uint8_t* r3 = replay(c, &in, &l2); /* the comparison sees the generator state: same again */
    CHECK(l1 == l2 && !memcmp(r1, r3, l1), "replay is deterministic at a fixed generator state");
    free(r1); free(r2); free(r3);
  }

  /* damaged encodings: refused with a reason, the graph freed (ASan), never a crash */
  struct { const char* what; int da, de, flip_e, device; const char* want; } bad[] = {
      {"one size slot short", -1, 0, -1, 0, "refused"},
      {"one size slot extra", +1, 0, -1, 0, "refused"},
      {"one exact word short", 0, -1, -1, 0, "refused"},
      {"another magic", 0, 0, 0, 0, "another encoding or device"},
      {"another device", 0, 0, -1, 1, "another encoding or device"},
      {"another input count", 0, 0, 2, 0, "refused"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; ++k) {
    int64_t* a = malloc((size_t)(na1 + 1) * sizeof(int64_t));
    int64_t* e = malloc((size_t)ne1 * sizeof(int64_t));
    memcpy(a, a1, (size_t)na1 * sizeof(int64_t)); a[na1] = 3;
    memcpy(e, e1, (size_t)ne1 * sizeof(int64_t));
    if (bad[k].flip_e >= 0) e[bad[k].flip_e] += 1;
    tpu_capture_t* x = decode(c, bad[k].device, a, na1 + bad[k].da, e, ne1 + bad[k].de, reason, sizeof reason);
    CHECK(!x && strstr(reason, bad[k].want), "%s: refused (%s)", bad[k].what, reason);
    if (getenv("TPU_TEST_VERBOSE")) printf("%s: %s\n", bad[k].what, reason);
    tpu_capture_free(x);
    free(a); free(e);
  }
  free(a1); free(e1); free(a2); free(e2);
  tpu_capture_free(d);
  tpu_capture_free(c);
  free_inputs(&in);
}

int main(void) {
  setenv("TORCH_TPU_NUM_DEVICES", "2", 1); /* a second device: an encoding for another one is refused */
  test_round_trip();
  OK(tpu_rt_synchronize(0));
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
