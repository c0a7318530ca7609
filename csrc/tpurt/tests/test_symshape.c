/* test_symshape.c — size templates (ir/symshape.h): graphs built at several (batch, seq) sizes
 * generalize into one template whose instances equal the graphs built directly at new sizes;
 * graphs that differ beyond size fields (another op, a size-dependent float constant, a dim that
 * is no c + k*m of the sizes) are refused with a reason and leave the template unchanged;
 * ambiguous sizes are refused, never guessed. Run under ASan/UBSan by `make test-sanitize`. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/symshape.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)
#define FAILS(expr, text) do { tpu_status_t s_ = (expr); CHECK(s_ != TPU_OK && strstr(tpu_status_message(s_), text), "%s -> %s", #expr, s_ ? tpu_status_message(s_) : "OK"); tpu_status_free(s_); } while (0)

enum { PLAIN = 0, OTHER_OP, FLOAT_OF_T, HALF_T, DIV_BY_T, RECIP_T, BESSEL_T };

/* A block of a transformer-like graph at batch B, sequence T, width C:
 *   x [B*T, C] @ w [C, 3C] -> [B*T, 3C] -> reshape [B, T, 3C] -> slice [B, T, C] (the first third)
 *   -> sum over T -> [B, C] * 0.5, then pad [B, C] -> [B, C + T] (a dim that is c + k*T). */
static void build(tpu_ir_graph_t* g, int64_t B, int64_t T, int variant) {
  const int64_t C = 5;
  tpu_ir_graph_init(g);
  int x = tpu_ir_param(g, TPU_DTYPE_F32, 2, (int64_t[]){B * T, C});
  int w = tpu_ir_param(g, TPU_DTYPE_F32, 2, (int64_t[]){C, 3 * C});
  int y = tpu_ir_dot(g, x, w, 0, TPU_DTYPE_F32);
  int r = tpu_ir_reshape(g, y, 3, (int64_t[]){B, T, 3 * C});
  int s = tpu_ir_slice(g, r, (int64_t[]){0, 0, 0}, (int64_t[]){B, T, C}, (int64_t[]){1, 1, 1});
  if (variant == OTHER_OP) s = tpu_ir_unary(g, TPU_IR_EXP, s);
  int red = tpu_ir_reduce(g, TPU_IR_MONOID_SUM, s, (int64_t[]){0, 1, 0});
  /* DIV_BY_T, RECIP_T: a mean's divisor or scale; FLOAT_OF_T: a size-dependent float of no such form */
  double k = variant == FLOAT_OF_T ? 0.3 * (double)T : variant == DIV_BY_T ? (double)T : variant == RECIP_T ? 1.0 / (double)T
           : variant == BESSEL_T ? (double)(B * T) / (double)(B * T - 1) : 0.5;
  int h = tpu_ir_binary(g, variant == DIV_BY_T ? TPU_IR_DIV : TPU_IR_MUL, red, tpu_ir_broadcast(g, tpu_ir_constant(g, TPU_DTYPE_F32, k), 2, (int64_t[]){B, C}, NULL));
  int64_t extra = variant == HALF_T ? (T + 1) / 2 : T;
  int p = tpu_ir_pad(g, h, tpu_ir_constant(g, TPU_DTYPE_F32, 0), (int64_t[]){0, 0}, (int64_t[]){0, extra});
  tpu_ir_output(g, p);
}

/* the template of the graph built at B = 4, T = 12 (the tests' first sample) */
static tpu_ir_template_t* sample_4x12(int variant) {
  tpu_ir_graph_t g;
  build(&g, 4, 12, variant);
  tpu_ir_template_t* t = NULL;
  OK(tpu_ir_template_create(&g, (int64_t[]){4, 12}, 2, &t));
  tpu_ir_graph_free(&g);
  return t;
}
static int add(tpu_ir_template_t* t, int64_t B, int64_t T, int variant, char* why, size_t cap) {
  tpu_ir_graph_t g;
  build(&g, B, T, variant);
  int verdict = -1;
  OK(tpu_ir_template_add(t, &g, (int64_t[]){B, T}, &verdict, why, cap));
  tpu_ir_graph_free(&g);
  return verdict;
}

static int instance_equals_built_v(const tpu_ir_template_t* t, int64_t B, int64_t T, int variant) {
  tpu_ir_graph_t a, b;
  tpu_status_t st = tpu_ir_template_instantiate(t, (int64_t[]){B, T}, &a);
  if (st) { printf("  instantiate %lldx%lld: %s\n", (long long)B, (long long)T, tpu_status_message(st)); tpu_status_free(st); return 0; }
  build(&b, B, T, variant);
  int eq = tpu_ir_equal(&a, &b);
  tpu_ir_graph_free(&a); tpu_ir_graph_free(&b);
  return eq;
}
static int instance_equals_built(const tpu_ir_template_t* t, int64_t B, int64_t T) { return instance_equals_built_v(t, B, T, PLAIN); }

/* A mean's divisor: an integral float constant that is a size is a slot like a dim. */
static void test_size_constant(void) {
  tpu_ir_template_t* t = sample_4x12(DIV_BY_T);
  char why[256];
  CHECK(add(t, 6, 12, DIV_BY_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  CHECK(add(t, 5, 9, DIV_BY_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  CHECK(add(t, 3, 7, DIV_BY_T, why, sizeof why) == TPU_IR_TEMPLATE_PREDICTED, "%s", why);
  CHECK(instance_equals_built_v(t, 8, 11, DIV_BY_T), "8x11");
  size_t need = tpu_ir_template_print(t, NULL, 0);
  char* text = malloc(need);
  CHECK(text && tpu_ir_template_print(t, text, need) == need && strstr(text, "(constant) value = s1"), "%s", text ? text : "");
  free(text);
  /* the 0.5 of the plain graph is 1/2, not an integer: another kind of constant, compared exactly */
  CHECK(add(t, 3, 7, PLAIN, why, sizeof why) == TPU_IR_TEMPLATE_NOT_INSTANCE && strstr(why, "float attribute (0.5"), "%s", why);
  tpu_ir_template_free(t);
  /* 1.0 / T (a mean's scale) likewise, bit-exact */
  t = sample_4x12(RECIP_T);
  CHECK(add(t, 6, 12, RECIP_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  CHECK(add(t, 5, 9, RECIP_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  CHECK(add(t, 3, 7, RECIP_T, why, sizeof why) == TPU_IR_TEMPLATE_PREDICTED, "%s", why);
  for (int64_t T = 2; T < 40; T += 3) CHECK(instance_equals_built_v(t, 5, T, RECIP_T), "T=%lld", (long long)T);
  need = tpu_ir_template_print(t, NULL, 0);
  text = malloc(need);
  CHECK(text && tpu_ir_template_print(t, text, need) == need && strstr(text, "(constant) value = 1/(s1)"), "%s", text ? text : "");
  free(text);
  tpu_ir_template_free(t);
  /* n / (n - 1) with n = B*T (a batch norm's unbiased running variance), bit-exact */
  t = sample_4x12(BESSEL_T);
  CHECK(add(t, 6, 12, BESSEL_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  CHECK(add(t, 5, 9, BESSEL_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  CHECK(add(t, 3, 7, BESSEL_T, why, sizeof why) == TPU_IR_TEMPLATE_PREDICTED, "%s", why);
  /* n = 2: n / (n - 1) is 2.0, which also reads as the integer 2; the template's kind decides (ResNet at batch 2) */
  CHECK(add(t, 1, 2, BESSEL_T, why, sizeof why) == TPU_IR_TEMPLATE_PREDICTED, "n = 2: %s", why);
  for (int64_t T = 2; T < 40; T += 3) CHECK(instance_equals_built_v(t, 7, T, BESSEL_T), "T=%lld", (long long)T);
  CHECK(instance_equals_built_v(t, 1, 2, BESSEL_T), "n = 2 instance");
  need = tpu_ir_template_print(t, NULL, 0);
  text = malloc(need);
  CHECK(text && tpu_ir_template_print(t, text, need) == need && strstr(text, "(constant) value = n/(n-1), n = s0*s1"), "%s", text ? text : "");
  free(text);
  tpu_ir_template_free(t);
}

static void test_generalize_and_predict(void) {
  tpu_ir_graph_t g;
  build(&g, 4, 12, PLAIN);
  CHECK(g.status == TPU_OK, "build");
  tpu_ir_template_t* t = NULL;
  OK(tpu_ir_template_create(&g, (int64_t[]){4, 12}, 2, &t));
  tpu_ir_graph_free(&g);
  char why[256];
  CHECK(instance_equals_built(t, 4, 12), "the sample itself");
  /* only the batch changed: B*T = 48 -> 72 fits 12*s0 and s0*s1 (both kept) */
  CHECK(add(t, 6, 12, PLAIN, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  tpu_ir_graph_t tmp;
  FAILS(tpu_ir_template_instantiate(t, (int64_t[]){5, 9}, &tmp), "s1 never varied");
  CHECK(instance_equals_built(t, 7, 12), "batch only: predictable");
  /* the sequence changes the first time: learned, not predicted */
  CHECK(add(t, 5, 9, PLAIN, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  /* from now on every size is predicted and equals the graph built directly */
  CHECK(add(t, 3, 7, PLAIN, why, sizeof why) == TPU_IR_TEMPLATE_PREDICTED, "%s", why);
  CHECK(add(t, 8, 11, PLAIN, why, sizeof why) == TPU_IR_TEMPLATE_PREDICTED, "%s", why);
  CHECK(tpu_ir_template_num_samples(t) == 5, "samples %d", tpu_ir_template_num_samples(t));
  for (int64_t B = 2; B <= 9; B += 3)
    for (int64_t T = 2; T <= 20; T += 5) CHECK(instance_equals_built(t, B, T), "%lldx%lld", (long long)B, (long long)T);
  /* symbolic fields: x dims[0], dot dims[0], reshape dims[0..1], slice dims, a[1] limits, reduce, ... */
  CHECK(tpu_ir_template_num_symbolic(t) >= 10, "symbolic %d", tpu_ir_template_num_symbolic(t));
  size_t need = tpu_ir_template_print(t, NULL, 0);
  char* text = malloc(need);
  CHECK(text && tpu_ir_template_print(t, text, need) == need && strlen(text) + 1 == need, "print size");
  CHECK(text && strstr(text, "%0 (parameter) dims[0] = s0*s1") && strstr(text, "dims[1] = s1+5"), "%s", text ? text : "");
  free(text);
  /* refusals leave the template unchanged */
  CHECK(add(t, 6, 10, OTHER_OP, why, sizeof why) == TPU_IR_TEMPLATE_NOT_INSTANCE && strstr(why, "instead of"), "%s", why);
  CHECK(add(t, 6, 10, FLOAT_OF_T, why, sizeof why) == TPU_IR_TEMPLATE_NOT_INSTANCE && strstr(why, "float attribute"), "%s", why);
  CHECK(add(t, 6, 10, HALF_T, why, sizeof why) == TPU_IR_TEMPLATE_NOT_INSTANCE && strstr(why, "none of its"), "%s", why);
  CHECK(tpu_ir_template_num_samples(t) == 5, "unchanged");
  CHECK(add(t, 6, 10, PLAIN, why, sizeof why) == TPU_IR_TEMPLATE_PREDICTED, "%s", why);
  tpu_ir_template_free(t);
}

/* A dim that is not c + k*m: refused when it first varies; a size-dependent constant likewise. */
static void test_not_affine(void) {
  tpu_ir_template_t* t = sample_4x12(HALF_T);
  char why[256];
  CHECK(add(t, 6, 12, HALF_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  /* (T+1)/2: 6 -> 5 while T 12 -> 9: no integer k with 6 + k*(9-12) = 5, nor with T*T, ... */
  CHECK(add(t, 5, 9, HALF_T, why, sizeof why) == TPU_IR_TEMPLATE_NOT_INSTANCE && strstr(why, "no c + k*m fits"), "%s", why);
  tpu_ir_template_free(t);
  t = sample_4x12(FLOAT_OF_T);
  CHECK(add(t, 6, 12, FLOAT_OF_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  CHECK(add(t, 6, 9, FLOAT_OF_T, why, sizeof why) == TPU_IR_TEMPLATE_NOT_INSTANCE, "%s", why);
  tpu_ir_template_free(t);
}

/* One symbol; a dim d = s0*s0 + 1 seen at s0 = 1, 2 also fits 3*s0 - 1: ambiguous at s0 = 3 (refused), and a
 * third sample decides. */
static void build1(tpu_ir_graph_t* g, int64_t d) {
  tpu_ir_graph_init(g);
  tpu_ir_output(g, tpu_ir_unary(g, TPU_IR_NEG, tpu_ir_param(g, TPU_DTYPE_F32, 1, &d)));
}
static void test_ambiguous(void) {
  tpu_ir_graph_t g;
  build1(&g, 2);
  tpu_ir_template_t* t = NULL;
  OK(tpu_ir_template_create(&g, (int64_t[]){1}, 1, &t));
  tpu_ir_graph_free(&g);
  build1(&g, 5);
  int verdict = -1;
  char why[256];
  OK(tpu_ir_template_add(t, &g, (int64_t[]){2}, &verdict, why, sizeof why));
  tpu_ir_graph_free(&g);
  CHECK(verdict == TPU_IR_TEMPLATE_GENERALIZED, "%d %s", verdict, why);
  tpu_ir_graph_t out;
  FAILS(tpu_ir_template_instantiate(t, (int64_t[]){3}, &out), "disagree");
  build1(&g, 10);
  OK(tpu_ir_template_add(t, &g, (int64_t[]){3}, &verdict, why, sizeof why));
  tpu_ir_graph_free(&g);
  CHECK(verdict == TPU_IR_TEMPLATE_GENERALIZED, "%d %s", verdict, why); /* a candidate was dropped */
  OK(tpu_ir_template_instantiate(t, (int64_t[]){6}, &out));
  CHECK(out.ops[0].type.dims[0] == 37, "%lld", (long long)out.ops[0].type.dims[0]);
  tpu_ir_graph_free(&out);
  /* negative dims and overflow are refused */
  FAILS(tpu_ir_template_instantiate(t, (int64_t[]){INT64_MAX / 2}, &out), "overflow");
  tpu_ir_template_free(t);
  /* a linear dim with an offset going negative */
  build1(&g, 7);
  OK(tpu_ir_template_create(&g, (int64_t[]){10}, 1, &t));
  tpu_ir_graph_free(&g);
  build1(&g, 9);
  OK(tpu_ir_template_add(t, &g, (int64_t[]){12}, &verdict, why, sizeof why));
  tpu_ir_graph_free(&g);
  FAILS(tpu_ir_template_instantiate(t, (int64_t[]){2}, &out), "negative");
  OK(tpu_ir_template_instantiate(t, (int64_t[]){20}, &out));
  CHECK(out.ops[0].type.dims[0] == 17, "%lld", (long long)out.ops[0].type.dims[0]);
  tpu_ir_graph_free(&out);
  tpu_ir_template_free(t);
}

static void test_bad_arguments(void) {
  tpu_ir_graph_t g;
  build1(&g, 4);
  tpu_ir_template_t* t = (tpu_ir_template_t*)&g;
  FAILS(tpu_ir_template_create(NULL, (int64_t[]){1}, 1, &t), "bad arguments");
  CHECK(t == NULL, "out set to NULL");
  int64_t many[TPU_IR_TEMPLATE_MAX_SYMS + 1] = {0};
  FAILS(tpu_ir_template_create(&g, many, TPU_IR_TEMPLATE_MAX_SYMS + 1, &t), "bad arguments");
  FAILS(tpu_ir_template_create(&g, NULL, 1, &t), "bad arguments");
  OK(tpu_ir_template_create(&g, NULL, 0, &t)); /* no symbols: only the graph itself is an instance */
  int verdict = -1;
  char why[128];
  OK(tpu_ir_template_add(t, &g, NULL, &verdict, why, sizeof why));
  CHECK(verdict == TPU_IR_TEMPLATE_PREDICTED, "%d", verdict);
  tpu_ir_graph_t h;
  build1(&h, 5);
  OK(tpu_ir_template_add(t, &h, NULL, &verdict, why, sizeof why));
  CHECK(verdict == TPU_IR_TEMPLATE_NOT_INSTANCE, "%d", verdict);
  FAILS(tpu_ir_template_add(t, &h, NULL, NULL, why, sizeof why), "bad arguments");
  FAILS(tpu_ir_template_add(t, &h, NULL, &verdict, why, 0), "bad arguments");
  tpu_ir_fail(&h, TPU_ERR(INVALID_ARGUMENT, "broken"));
  FAILS(tpu_ir_template_add(t, &h, NULL, &verdict, why, sizeof why), "bad arguments");
  FAILS(tpu_ir_template_instantiate(NULL, NULL, &h), "bad arguments");
  tpu_ir_graph_free(&h);
  tpu_ir_template_free(t);
  tpu_ir_template_free(NULL);
  CHECK(tpu_ir_template_print(NULL, why, sizeof why) == 1 && why[0] == 0, "print NULL");
  tpu_ir_graph_free(&g);
}

/* Extra slots (a capture's bindings): layouts that are size fields too, exact words that must match;
 * instantiate_ex gives both at new sizes and refuses a varying field below the bound. */
static void extra_of(int64_t B, int64_t T, int64_t* slots, int64_t* exact) {
  slots[0] = B * T; slots[1] = 5;        /* an input's sizes [B*T, 5] */
  slots[2] = 5; slots[3] = 1;            /* ... its strides */
  slots[4] = T - 1;                      /* an output view's offset */
  exact[0] = 2; exact[1] = 7;            /* rank, an input index */
}
static void test_extra_slots(void) {
  int64_t a[5], e[2], got[5];
  char why[256];
  int verdict = -1;
  tpu_ir_graph_t g;
  tpu_ir_template_t* t = NULL;
  build(&g, 4, 12, PLAIN);
  extra_of(4, 12, a, e);
  OK(tpu_ir_template_create_ex(&g, a, 5, e, 2, (int64_t[]){4, 12}, 2, &t));
  tpu_ir_graph_free(&g);
  static const int64_t sizes[][2] = {{6, 12}, {5, 9}, {3, 7}, {8, 11}};
  for (int i = 0; i < 4; ++i) {
    build(&g, sizes[i][0], sizes[i][1], PLAIN);
    extra_of(sizes[i][0], sizes[i][1], a, e);
    OK(tpu_ir_template_add_ex(t, &g, a, 5, e, 2, sizes[i], &verdict, why, sizeof why));
    CHECK(verdict != TPU_IR_TEMPLATE_NOT_INSTANCE, "%lldx%lld: %s", (long long)sizes[i][0], (long long)sizes[i][1], why);
    tpu_ir_graph_free(&g);
  }
  CHECK(verdict == TPU_IR_TEMPLATE_PREDICTED, "8x11 predicted");
  /* another exact word: no instance, template unchanged */
  build(&g, 7, 10, PLAIN);
  extra_of(7, 10, a, e);
  e[1] = 8;
  OK(tpu_ir_template_add_ex(t, &g, a, 5, e, 2, (int64_t[]){7, 10}, &verdict, why, sizeof why));
  CHECK(verdict == TPU_IR_TEMPLATE_NOT_INSTANCE && strstr(why, "exact word 1"), "exact word: %s", why);
  tpu_ir_graph_free(&g);
  /* instance at 7x10: graph and slots as built there */
  tpu_ir_graph_t inst;
  OK(tpu_ir_template_instantiate_ex(t, (int64_t[]){7, 10}, 2, &inst, got));
  build(&g, 7, 10, PLAIN);
  extra_of(7, 10, a, e);
  CHECK(tpu_ir_equal(&inst, &g) && !memcmp(got, a, sizeof a), "7x10 instance");
  CHECK(tpu_ir_template_num_exact(t) == 2 && tpu_ir_template_exact(t)[1] == 7, "exact words kept");
  tpu_ir_graph_free(&inst); tpu_ir_graph_free(&g);
  /* T = 2: the offset T - 1 varies into 1, below the bound: refused (a size 1 may lower differently) */
  FAILS(tpu_ir_template_instantiate_ex(t, (int64_t[]){7, 2}, 2, &inst, got), "below 2");
  OK(tpu_ir_template_instantiate_ex(t, (int64_t[]){7, 2}, INT64_MIN, &inst, got));
  tpu_ir_graph_free(&inst);
  /* the plain instantiate refuses a template with extra slots */
  FAILS(tpu_ir_template_instantiate(t, (int64_t[]){7, 10}, &inst), "extra slots");
  tpu_ir_template_free(t);
}

/* tpu_ir_template_matches: a graph built at new sizes is the prediction exactly when instantiate would
 * build it; other variants, sizes that leave the prediction (a monomial never varied, a varying field
 * below min_varying) and a graph with another size are not. */
static int matches_built(const tpu_ir_template_t* t, int64_t B, int64_t T, int64_t bB, int64_t bT, int variant, int64_t minv) {
  tpu_ir_graph_t g;
  build(&g, bB, bT, variant);
  int m = tpu_ir_template_matches(t, &g, (int64_t[]){B, T}, minv);
  tpu_ir_graph_free(&g);
  return m;
}
static void test_matches(void) {
  tpu_ir_template_t* t = sample_4x12(DIV_BY_T);
  char why[256];
  CHECK(matches_built(t, 4, 12, 4, 12, DIV_BY_T, 2), "the sample itself");
  CHECK(!matches_built(t, 5, 12, 5, 12, DIV_BY_T, 2), "nothing varied yet: no prediction");
  CHECK(add(t, 6, 12, DIV_BY_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  CHECK(!matches_built(t, 5, 9, 5, 9, DIV_BY_T, 2), "s1 never varied");
  CHECK(add(t, 5, 9, DIV_BY_T, why, sizeof why) == TPU_IR_TEMPLATE_GENERALIZED, "%s", why);
  int all = 1, same_as_instantiate = 1;
  for (int64_t B = 2; B <= 9; B += 3)
    for (int64_t T = 2; T <= 20; T += 3) {
      all &= matches_built(t, B, T, B, T, DIV_BY_T, 2);
      same_as_instantiate &= instance_equals_built_v(t, B, T, DIV_BY_T);
    }
  CHECK(all && same_as_instantiate, "every built graph matches its sizes");
  CHECK(!matches_built(t, 5, 9, 5, 10, DIV_BY_T, 2), "a graph built at other sizes");
  CHECK(!matches_built(t, 5, 9, 5, 9, PLAIN, 2) && !matches_built(t, 5, 9, 5, 9, OTHER_OP, 2), "another graph");
  CHECK(!matches_built(t, 5, 1, 5, 1, DIV_BY_T, 2) && matches_built(t, 5, 1, 5, 1, DIV_BY_T, INT64_MIN),
        "a varying field below min_varying");
  CHECK(tpu_ir_template_matches(NULL, NULL, NULL, 2) == 0, "bad arguments");
  tpu_ir_template_free(t);
}

int main(void) {
  test_matches();
  test_extra_slots();
  test_generalize_and_predict();
  test_not_affine();
  test_size_constant();
  test_ambiguous();
  test_bad_arguments();
  printf("test_symshape: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
