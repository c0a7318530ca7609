/* symshape.c — size templates (symshape.h): anti-unification of IR graphs built at different
 * sizes. Slots: per op, its result dims, its attribute arrays a[3][] and, for a non-bool
 * CONSTANT, its value when it is an integer n (i0, or an integral f0 below 2^53: a mean's
 * divisor) or a float that is exactly 1.0 / n (a mean's scale) or n / (n - 1) (an unbiased
 * variance's correction), computed in double as the lowerings compute them, so instances are
 * bit-exact; everything else must be equal. A slot is constant (the first sample's value) or keeps a list of candidates
 * c + k*m that fit every sample; a monomial m is "determined" once it took two values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/symshape.h"

#define MAXD TPU_MAX_DIMS
#define VAL (4 * MAXD)   /* the CONSTANT value slot */
#define NSLOT (VAL + 1)  /* dims[MAXD], a[0][MAXD], a[1][MAXD], a[2][MAXD], value */
#define EXACT_F (9007199254740992.0) /* 2^53 */
#define MAX_MONO (TPU_IR_TEMPLATE_MAX_SYMS + TPU_IR_TEMPLATE_MAX_SYMS * (TPU_IR_TEMPLATE_MAX_SYMS + 1) / 2)

typedef struct { int16_t mono; int64_t k, c; } cand_t;
typedef struct { int32_t op, slot, n; cand_t c[MAX_MONO]; } var_t; /* op -1: extra slot `slot` */

struct tpu_ir_template_s {
  tpu_ir_graph_t g;        /* the first sample */
  int64_t* aux;            /* the first sample's extra slots (n_aux), then its exact words (n_exact) */
  int n_aux, n_exact;
  int n_syms, n_mono, n_samples;
  uint8_t determined[MAX_MONO];
  int64_t m0[MAX_MONO];    /* value of each undetermined monomial in every sample so far */
  int32_t* vidx;           /* per (op, slot): index into vars, or -1 (constant) */
  int32_t* op_nvars;       /* per op: how many of its slots are vars (0: the op is the first sample's) */
  var_t* vars; int n_vars, cap_vars;
};

/* For a CONSTANT whose value is a slot: 1 (the integer *out), 2 (a float 1.0 / *out), 3 (a float
 * *out / (*out - 1), *out >= 2); else 0. */
static int value_slot(const tpu_ir_op_t* op, int64_t* out) {
  if (op->opcode != TPU_IR_CONSTANT || op->type.dtype == TPU_DTYPE_BOOL) return 0;
  if (!tpu_dtype_is_floating(op->type.dtype)) { *out = op->i0; return 1; }
  double f = op->f0;
  if (f >= -EXACT_F && f <= EXACT_F && f == (double)(int64_t)f) { *out = (int64_t)f; return 1; }
  if (f != 0 && 1.0 / f >= -EXACT_F && 1.0 / f <= EXACT_F) {
    int64_t n = (int64_t)(1.0 / f + (f > 0 ? 0.5 : -0.5));
    if (n != 0 && 1.0 / (double)n == f) { *out = n; return 2; }
  }
  if (f > 1.0 && f < 2.0 && f / (f - 1.0) <= EXACT_F) {
    int64_t n = (int64_t)(f / (f - 1.0) + 0.5);
    if (n >= 2 && (double)n / (double)(n - 1) == f) { *out = n; return 3; }
  }
  return 0;
}
/* value_slot, reading the value as kind `hint` first (the template's kind for this op) when it fits:
 * n / (n - 1) at n = 2 is 2.0, an integer too; 1 / n at n = 1 likewise. */
static int value_slot_hint(const tpu_ir_op_t* op, int hint, int64_t* out) {
  int k = value_slot(op, out);
  if (!hint || k == hint || k != 1 || !tpu_dtype_is_floating(op->type.dtype)) return k;
  double f = op->f0;
  if (hint == 3 && f == 2.0) { *out = 2; return 3; }
  if (hint == 2 && f == 1.0) { *out = 1; return 2; }
  return k;
}
static int64_t* slot_ptr(tpu_ir_op_t* op, int s) { return s < MAXD ? &op->type.dims[s] : &op->a[(s - MAXD) / MAXD][(s - MAXD) % MAXD]; }
static int64_t slot_get(const tpu_ir_op_t* op, int s) {
  int64_t v = 0;
  if (s == VAL) return value_slot(op, &v) ? v : 0;
  return *slot_ptr((tpu_ir_op_t*)op, s);
}
/* op holds the first sample's value (its kind decides the form) */
static void slot_set(tpu_ir_op_t* op, int s, int64_t v) {
  int64_t old;
  if (s != VAL) *slot_ptr(op, s) = v;
  else if (!tpu_dtype_is_floating(op->type.dtype)) op->i0 = v;
  else {
    int kind = value_slot(op, &old);
    op->f0 = kind == 2 ? 1.0 / (double)v : kind == 3 ? (double)v / (double)(v - 1) : (double)v;
  }
}

/* Monomial values at syms; 0 on overflow (such a monomial is skipped: never a candidate). */
static int mono_values(int n_syms, const int64_t* syms, int64_t* out, uint8_t* ok) {
  int m = 0;
  for (int i = 0; i < n_syms; ++i) { out[m] = syms[i]; ok[m++] = 1; }
  for (int i = 0; i < n_syms; ++i)
    for (int j = i; j < n_syms; ++j) { ok[m] = !__builtin_mul_overflow(syms[i], syms[j], &out[m]); m++; }
  return m;
}
static void mono_name(const tpu_ir_template_t* t, int m, char* buf, size_t cap) {
  if (m < t->n_syms) { snprintf(buf, cap, "s%d", m); return; }
  m -= t->n_syms;
  for (int i = 0; i < t->n_syms; ++i)
    for (int j = i; j < t->n_syms; ++j, --m)
      if (m == 0) { snprintf(buf, cap, "s%d*s%d", i, j); return; }
  snprintf(buf, cap, "?");
}
/* c + k*mv, or 0 with *ok = 0 on overflow */
static int64_t cand_eval(const cand_t* c, const int64_t* mv, const uint8_t* mok, int* ok) {
  int64_t p, r;
  *ok = mok[c->mono] && !__builtin_mul_overflow(c->k, mv[c->mono], &p) && !__builtin_add_overflow(p, c->c, &r);
  return *ok ? r : 0;
}

static void slot_name(const tpu_ir_graph_t* g, int op, int s, char* buf, size_t cap) {
  const char* on = tpu_ir_opcode_name(g->ops[op].opcode);
  if (s < MAXD) snprintf(buf, cap, "%%%d (%s) dims[%d]", op, on, s);
  else if (s == VAL) snprintf(buf, cap, "%%%d (%s) value", op, on);
  else snprintf(buf, cap, "%%%d (%s) a[%d][%d]", op, on, (s - MAXD) / MAXD, (s - MAXD) % MAXD);
}

/* slot gi of a sample (g, aux); hint: the template's graph, whose constants' kinds read g's (or NULL) */
static int64_t sample_get(const tpu_ir_graph_t* g, const int64_t* aux, int gi, const tpu_ir_graph_t* hint) {
  int G = g->n_ops * NSLOT;
  if (gi >= G) return aux[gi - G];
  if (hint && gi % NSLOT == VAL) {
    int64_t v = 0, h;
    return value_slot_hint(&g->ops[gi / NSLOT], value_slot(&hint->ops[gi / NSLOT], &h), &v) ? v : 0;
  }
  return slot_get(&g->ops[gi / NSLOT], gi % NSLOT);
}
static void var_name(const tpu_ir_template_t* t, int op, int s, char* buf, size_t cap) {
  if (op < 0) snprintf(buf, cap, "extra slot %d", s);
  else slot_name(&t->g, op, s, buf, cap);
}

tpu_status_t tpu_ir_template_create_ex(const tpu_ir_graph_t* g, const int64_t* aux, int n_aux, const int64_t* exact,
                                       int n_exact, const int64_t* syms, int n_syms, tpu_ir_template_t** out_t) {
  if (out_t) *out_t = NULL;
  if (!g || !out_t || (n_syms && !syms) || n_syms < 0 || n_syms > TPU_IR_TEMPLATE_MAX_SYMS || g->status ||
      n_aux < 0 || n_exact < 0 || (n_aux && !aux) || (n_exact && !exact) || g->n_ops > INT32_MAX / NSLOT - n_aux)
    return TPU_ERR(INVALID_ARGUMENT, "tpu_ir_template_create: bad arguments");
  tpu_ir_template_t* t = calloc(1, sizeof(*t));
  if (!t) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
  tpu_status_t st = tpu_ir_graph_clone(g, &t->g);
  if (st) { free(t); return st; }
  size_t nv = (size_t)g->n_ops * NSLOT + (size_t)n_aux;
  t->vidx = malloc((nv ? nv : 1) * sizeof(int32_t));
  t->aux = malloc((size_t)(n_aux + n_exact + 1) * sizeof(int64_t));
  t->op_nvars = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(int32_t));
  if (!t->vidx || !t->aux || !t->op_nvars) { tpu_ir_template_free(t); return TPU_ERR(OUT_OF_MEMORY, "out of host memory"); }
  for (size_t i = 0; i < nv; ++i) t->vidx[i] = -1;
  if (n_aux) memcpy(t->aux, aux, (size_t)n_aux * sizeof(int64_t));
  if (n_exact) memcpy(t->aux + n_aux, exact, (size_t)n_exact * sizeof(int64_t));
  t->n_aux = n_aux; t->n_exact = n_exact;
  t->n_syms = n_syms;
  uint8_t ok[MAX_MONO];
  t->n_mono = mono_values(n_syms, syms, t->m0, ok);
  for (int m = 0; m < t->n_mono; ++m) t->determined[m] = !ok[m]; /* overflowed: never a candidate */
  t->n_samples = 1;
  *out_t = t;
  return TPU_OK;
}
tpu_status_t tpu_ir_template_create(const tpu_ir_graph_t* g, const int64_t* syms, int n_syms,
                                    tpu_ir_template_t** out_t) {
  return tpu_ir_template_create_ex(g, NULL, 0, NULL, 0, syms, n_syms, out_t);
}

void tpu_ir_template_free(tpu_ir_template_t* t) {
  if (!t) return;
  tpu_ir_graph_free(&t->g);
  free(t->vidx); free(t->op_nvars); free(t->vars); free(t->aux); free(t);
}

/* Everything but the slots must be equal; the first difference goes into reason. */
static int same_structure(const tpu_ir_graph_t* a, const tpu_ir_graph_t* b, char* reason, size_t cap) {
  if (a->n_ops != b->n_ops) { snprintf(reason, cap, "%d IR ops instead of %d", b->n_ops, a->n_ops); return 0; }
  if (a->n_params != b->n_params || a->n_scalars != b->n_scalars || a->precision != b->precision) {
    snprintf(reason, cap, "parameters or precision differ"); return 0;
  }
  for (int v = 0; v < a->n_ops; ++v) {
    tpu_ir_op_t x = a->ops[v], y = b->ops[v];
    const char* on = tpu_ir_opcode_name(x.opcode);
    if (x.opcode != y.opcode) { snprintf(reason, cap, "%%%d is %s instead of %s", v, tpu_ir_opcode_name(y.opcode), on); return 0; }
    if (x.n_in != y.n_in || x.in_off != y.in_off ||
        (x.n_in && memcmp(a->operands + x.in_off, b->operands + y.in_off, (size_t)x.n_in * sizeof(int32_t)))) {
      snprintf(reason, cap, "%%%d (%s) has other operands", v, on); return 0;
    }
    if (x.type.dtype != y.type.dtype || x.type.rank != y.type.rank) { snprintf(reason, cap, "%%%d (%s) has another dtype or rank", v, on); return 0; }
    int64_t vx, vy;
    int kx = value_slot(&x, &vx), ky = value_slot_hint(&y, kx, &vy);
    if (kx && kx == ky) { x.f0 = y.f0 = 0; x.i0 = y.i0 = 0; } /* compared as a slot */
    if (memcmp(&x.f0, &y.f0, sizeof x.f0)) {
      snprintf(reason, cap, "%%%d (%s) has another float attribute (%.9g instead of %.9g: a size-dependent constant)", v, on, y.f0, x.f0);
      return 0;
    }
    if (x.i0 != y.i0 || x.i1 != y.i1 || x.prec != y.prec) { snprintf(reason, cap, "%%%d (%s) has other integer attributes", v, on); return 0; }
    for (int s = 0; s < VAL; ++s) { *slot_ptr(&x, s) = 0; *slot_ptr(&y, s) = 0; }
    if (memcmp(&x, &y, sizeof x)) { snprintf(reason, cap, "%%%d (%s) differs", v, on); return 0; }
  }
  if (a->n_outputs != b->n_outputs ||
      (a->n_outputs && memcmp(a->outputs, b->outputs, (size_t)a->n_outputs * sizeof(int32_t)))) {
    snprintf(reason, cap, "the graph outputs differ"); return 0;
  }
  return 1;
}

/* Candidates for a slot that was v in every sample so far and is d now: undetermined monomials
 * that change now (their old value m0 held in every sample). Returns the count. */
static int new_candidates(const tpu_ir_template_t* t, int64_t v, int64_t d, const int64_t* mv, const uint8_t* mok,
                          cand_t* out) {
  int n = 0;
  for (int m = 0; m < t->n_mono; ++m) {
    if (t->determined[m] || !mok[m] || mv[m] == t->m0[m]) continue;
    int64_t dd, dm, k, km, c;
    if (__builtin_sub_overflow(d, v, &dd) || __builtin_sub_overflow(mv[m], t->m0[m], &dm) || dd % dm) continue;
    k = dd / dm;
    if (__builtin_mul_overflow(k, t->m0[m], &km) || __builtin_sub_overflow(v, km, &c)) continue;
    out[n].mono = (int16_t)m; out[n].k = k; out[n].c = c; n++;
  }
  return n;
}

tpu_status_t tpu_ir_template_add_ex(tpu_ir_template_t* t, const tpu_ir_graph_t* g, const int64_t* aux, int n_aux,
                                    const int64_t* exact, int n_exact, const int64_t* syms, int* out_verdict,
                                    char* reason, size_t reason_len) {
  if (!t || !g || !out_verdict || !reason || !reason_len || (t->n_syms && !syms) || g->status || n_aux < 0 ||
      n_exact < 0 || (n_aux && !aux) || (n_exact && !exact))
    return TPU_ERR(INVALID_ARGUMENT, "tpu_ir_template_add: bad arguments");
  *out_verdict = TPU_IR_TEMPLATE_NOT_INSTANCE;
  reason[0] = 0;
  if (!same_structure(&t->g, g, reason, reason_len)) return TPU_OK;
  if (n_aux != t->n_aux || n_exact != t->n_exact) {
    snprintf(reason, reason_len, "%d extra slots and %d exact words instead of %d and %d", n_aux, n_exact, t->n_aux, t->n_exact);
    return TPU_OK;
  }
  for (int i = 0; i < n_exact; ++i)
    if (exact[i] != t->aux[t->n_aux + i]) {
      snprintf(reason, reason_len, "exact word %d is %lld instead of %lld", i, (long long)exact[i], (long long)t->aux[t->n_aux + i]);
      return TPU_OK;
    }
  int64_t mv[MAX_MONO];
  uint8_t mok[MAX_MONO];
  mono_values(t->n_syms, syms, mv, mok);
  int undet_moves = 0; /* an undetermined monomial changes: no constant slot is predictable */
  for (int m = 0; m < t->n_mono; ++m) undet_moves |= !t->determined[m] && (!mok[m] || mv[m] != t->m0[m]);
  int predicted = !undet_moves, n_new = 0;
  const int NV = g->n_ops * NSLOT + n_aux;
  cand_t tmp[MAX_MONO];
  char name[96];
  /* pass 1: check (t unchanged). An op with no symbolic slot that equals the first sample's
   * bytewise has every slot constant and equal: skipped (most of a graph's ops). */
  const int G = g->n_ops * NSLOT;
  for (int gi = 0; gi < NV; ++gi) {
    if (gi < G && gi % NSLOT == 0 && !t->op_nvars[gi / NSLOT] &&
        !memcmp(&t->g.ops[gi / NSLOT], &g->ops[gi / NSLOT], sizeof(tpu_ir_op_t))) {
      gi += NSLOT - 1;
      continue;
    }
    int64_t d = sample_get(g, aux, gi, &t->g), r = sample_get(&t->g, t->aux, gi, NULL);
    int vi = t->vidx[gi];
    if (vi < 0) {
      if (d == r) continue;
      if (!new_candidates(t, r, d, mv, mok, tmp)) {
        if (gi < G) slot_name(g, gi / NSLOT, gi % NSLOT, name, sizeof name);
        else var_name(t, -1, gi - G, name, sizeof name);
        snprintf(reason, reason_len, "%s is %lld at this size and %lld at the %d earlier one(s): no c + k*m fits", name,
                 (long long)d, (long long)r, t->n_samples);
        return TPU_OK;
      }
      n_new++; predicted = 0;
      continue;
    }
    const var_t* x = &t->vars[vi];
    int keep = 0, ok;
    for (int c = 0; c < x->n; ++c) keep += cand_eval(&x->c[c], mv, mok, &ok) == d && ok;
    if (!keep) {
      var_name(t, x->op, x->slot, name, sizeof name);
      snprintf(reason, reason_len, "%s is %lld at this size: none of its %d expression(s) gives it", name, (long long)d, x->n);
      return TPU_OK;
    }
    if (keep != x->n) predicted = 0;
  }
  /* pass 2: learn */
  if (n_new) {
    if (t->n_vars + n_new > t->cap_vars) {
      int cap = t->cap_vars ? t->cap_vars : 16;
      while (cap < t->n_vars + n_new) cap *= 2;
      var_t* p = realloc(t->vars, (size_t)cap * sizeof(var_t));
      if (!p) return TPU_ERR(OUT_OF_MEMORY, "out of host memory");
      t->vars = p; t->cap_vars = cap;
    }
  }
  for (int gi = 0; gi < NV; ++gi) {
    if (gi < G && gi % NSLOT == 0 && !t->op_nvars[gi / NSLOT] &&
        !memcmp(&t->g.ops[gi / NSLOT], &g->ops[gi / NSLOT], sizeof(tpu_ir_op_t))) {
      gi += NSLOT - 1;
      continue;
    }
    int64_t d = sample_get(g, aux, gi, &t->g), r = sample_get(&t->g, t->aux, gi, NULL);
    int32_t* vi = &t->vidx[gi];
    if (*vi < 0) {
      if (d == r) continue;
      var_t* x = &t->vars[t->n_vars];
      x->op = gi < G ? gi / NSLOT : -1; x->slot = gi < G ? gi % NSLOT : gi - G;
      x->n = new_candidates(t, r, d, mv, mok, x->c);
      if (x->op >= 0) t->op_nvars[x->op]++;
      *vi = t->n_vars++;
      continue;
    }
    var_t* x = &t->vars[*vi];
    int n = 0, ok;
    for (int c = 0; c < x->n; ++c)
      if (cand_eval(&x->c[c], mv, mok, &ok) == d && ok) x->c[n++] = x->c[c];
    x->n = n;
  }
  for (int m = 0; m < t->n_mono; ++m)
    if (!t->determined[m] && (!mok[m] || mv[m] != t->m0[m])) t->determined[m] = 1;
  t->n_samples++;
  *out_verdict = predicted ? TPU_IR_TEMPLATE_PREDICTED : TPU_IR_TEMPLATE_GENERALIZED;
  return TPU_OK;
}
tpu_status_t tpu_ir_template_add(tpu_ir_template_t* t, const tpu_ir_graph_t* g, const int64_t* syms,
                                 int* out_verdict, char* reason, size_t reason_len) {
  return tpu_ir_template_add_ex(t, g, NULL, 0, NULL, 0, syms, out_verdict, reason, reason_len);
}

/* The value of var x at monomial values mv: 0 and *val, or why not: 1 its candidates disagree or
 * overflow, 2 below min_varying, 3 a negative dim, 4 a float constant that is not exact. */
static int var_value(const tpu_ir_template_t* t, const var_t* x, const int64_t* mv, const uint8_t* mok,
                     int64_t min_varying, int64_t* out) {
  int64_t val = 0;
  if (x->n <= 0) return 1;
  for (int c = 0; c < x->n; ++c) {
    int e_ok;
    int64_t e = cand_eval(&x->c[c], mv, mok, &e_ok);
    if (!e_ok || (c > 0 && e != val)) return 1;
    val = e;
  }
  *out = val;
  if (val < min_varying) return 2;
  if (x->op < 0) return 0;
  if (x->slot < MAXD && val < 0) return 3;
  if (x->slot == VAL && tpu_dtype_is_floating(t->g.ops[x->op].type.dtype)) {
    int64_t ref;
    int kind = value_slot(&t->g.ops[x->op], &ref);
    if (val > (int64_t)EXACT_F || val < -(int64_t)EXACT_F || (val == 0 && kind == 2) || (val < 2 && kind == 3)) return 4;
  }
  return 0;
}

/* Every undetermined monomial must keep its value (else nothing constant is predictable). */
static int undetermined_moved(const tpu_ir_template_t* t, const int64_t* mv, const uint8_t* mok) {
  for (int m = 0; m < t->n_mono; ++m)
    if (!t->determined[m] && (!mok[m] || mv[m] != t->m0[m])) return m + 1;
  return 0;
}

int tpu_ir_template_matches(const tpu_ir_template_t* t, const tpu_ir_graph_t* g, const int64_t* syms,
                            int64_t min_varying) {
  if (!t || !g || t->n_aux || (t->n_syms && !syms) || g->status) return 0;
  const tpu_ir_graph_t* a = &t->g;
  if (a->n_ops != g->n_ops || a->n_operands != g->n_operands || a->n_params != g->n_params ||
      a->n_scalars != g->n_scalars || a->n_outputs != g->n_outputs || a->precision != g->precision ||
      (a->n_operands && memcmp(a->operands, g->operands, (size_t)a->n_operands * sizeof(int32_t))) ||
      (a->n_outputs && memcmp(a->outputs, g->outputs, (size_t)a->n_outputs * sizeof(int32_t))))
    return 0; /* (memcmp's pointers must not be NULL even for 0 bytes: a graph without operands has none) */
  int64_t mv[MAX_MONO];
  uint8_t mok[MAX_MONO];
  mono_values(t->n_syms, syms, mv, mok);
  if (undetermined_moved(t, mv, mok)) return 0;
  for (int v = 0; v < a->n_ops; ++v) {
    if (!t->op_nvars[v]) {
      if (memcmp(&a->ops[v], &g->ops[v], sizeof(tpu_ir_op_t))) return 0;
      continue;
    }
    tpu_ir_op_t op = a->ops[v];
    for (int sl = 0; sl < NSLOT; ++sl) {
      int vi = t->vidx[v * NSLOT + sl];
      if (vi < 0) continue;
      int64_t val;
      if (var_value(t, &t->vars[vi], mv, mok, min_varying, &val)) return 0;
      slot_set(&op, sl, val);
    }
    if (memcmp(&op, &g->ops[v], sizeof op)) return 0;
  }
  return 1;
}

tpu_status_t tpu_ir_template_instantiate_ex(const tpu_ir_template_t* t, const int64_t* syms, int64_t min_varying,
                                            tpu_ir_graph_t* out_g, int64_t* out_aux) {
  if (!t || !out_g || (t->n_syms && !syms) || (t->n_aux && !out_aux))
    return TPU_ERR(INVALID_ARGUMENT, "tpu_ir_template_instantiate: bad arguments");
  tpu_ir_graph_init(out_g);
  int64_t mv[MAX_MONO];
  uint8_t mok[MAX_MONO];
  mono_values(t->n_syms, syms, mv, mok);
  for (int m = 0; m < t->n_mono; ++m)
    if (!t->determined[m] && (!mok[m] || mv[m] != t->m0[m])) {
      char mn[32];
      mono_name(t, m, mn, sizeof mn);
      return TPU_ERR(INVALID_ARGUMENT, "size template: %s never varied in the %d sample(s): every constant field is ambiguous at these sizes",
                     mn, t->n_samples);
    }
  TPU_RETURN_IF_ERROR(tpu_ir_graph_clone(&t->g, out_g));
  if (t->n_aux) memcpy(out_aux, t->aux, (size_t)t->n_aux * sizeof(int64_t));
  tpu_status_t st = TPU_OK;
  char name[96];
  for (int i = 0; i < t->n_vars && !st; ++i) {
    const var_t* x = &t->vars[i];
    int64_t val = 0;
    int why = var_value(t, x, mv, mok, min_varying, &val);
    if (why) {
      var_name(t, x->op, x->slot, name, sizeof name);
      if (why == 1) st = TPU_ERR(INVALID_ARGUMENT, "size template: %s has %d expression(s) that disagree (or overflow) at these sizes", name, x->n);
      else if (why == 2)
        st = TPU_ERR(INVALID_ARGUMENT, "size template: %s is %lld at these sizes (a varying field below %lld: a size 0 or 1 may lower differently)",
                     name, (long long)val, (long long)min_varying);
      else if (why == 3) st = TPU_ERR(INVALID_ARGUMENT, "size template: %s is negative (%lld) at these sizes", name, (long long)val);
      else st = TPU_ERR(INVALID_ARGUMENT, "size template: %s is not exact as a float (or 1 / 0) at these sizes", name);
    } else if (x->op < 0) out_aux[x->slot] = val;
    else slot_set(&out_g->ops[x->op], x->slot, val);
  }
  if (!st) st = tpu_ir_verify(out_g);
  if (st) tpu_ir_graph_free(out_g);
  return st;
}
tpu_status_t tpu_ir_template_instantiate(const tpu_ir_template_t* t, const int64_t* syms, tpu_ir_graph_t* out_g) {
  if (t && t->n_aux) return TPU_ERR(INVALID_ARGUMENT, "tpu_ir_template_instantiate: the template has extra slots (use _ex)");
  return tpu_ir_template_instantiate_ex(t, syms, INT64_MIN, out_g, NULL);
}
int tpu_ir_template_num_exact(const tpu_ir_template_t* t) { return t ? t->n_exact : 0; }
const int64_t* tpu_ir_template_exact(const tpu_ir_template_t* t) { return t ? t->aux + t->n_aux : NULL; }
int tpu_ir_template_num_extra(const tpu_ir_template_t* t) { return t ? t->n_aux : 0; }

int tpu_ir_template_num_samples(const tpu_ir_template_t* t) { return t ? t->n_samples : 0; }
int tpu_ir_template_num_symbolic(const tpu_ir_template_t* t) { return t ? t->n_vars : 0; }

size_t tpu_ir_template_print(const tpu_ir_template_t* t, char* buf, size_t cap) {
  if (cap) buf[0] = 0;
  if (!t) return 1;
  size_t n = tpu_ir_print(&t->g, buf, cap); /* bytes needed, NUL included */
  n = n ? n - 1 : 0;
  for (int i = 0; i < t->n_vars; ++i) {
    const var_t* x = &t->vars[i];
    char line[192], name[96], e[64] = "?";
    var_name(t, x->op, x->slot, name, sizeof name);
    if (x->n == 1) {
      char mn[32];
      mono_name(t, x->c[0].mono, mn, sizeof mn);
      if (x->c[0].k == 1) snprintf(e, sizeof e, "%s", mn);
      else snprintf(e, sizeof e, "%lld*%s", (long long)x->c[0].k, mn);
      if (x->c[0].c) snprintf(e + strlen(e), sizeof e - strlen(e), "%+lld", (long long)x->c[0].c);
    }
    int64_t ref;
    int kind = x->op >= 0 && x->slot == VAL ? value_slot(&t->g.ops[x->op], &ref) : 0;
    int len = kind == 2 ? snprintf(line, sizeof line, "%s = 1/(%s)\n", name, e)
            : kind == 3 ? snprintf(line, sizeof line, "%s = n/(n-1), n = %s\n", name, e)
                        : snprintf(line, sizeof line, "%s = %s\n", name, e);
    if (len > 0 && n + (size_t)len < cap) memcpy(buf + n, line, (size_t)len + 1);
    n += len > 0 ? (size_t)len : 0;
  }
  return n + 1;
}
