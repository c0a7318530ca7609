/* shape_family.c — size templates for eager ops' new sizes (see shape_family.h). */
#include "cache/shape_family.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hash.h"
#include "ir/symshape.h"
#include "runtime/runtime.h"

#define NBUCKETS 1024
#define MAX_STRIKES 4

/* The binding tables of a lowering (tpu_lower_ctx_t's), which every instance must repeat exactly. */
typedef struct {
  int n_tbind, n_sbind, n_checks, n_arg_outs, gen_arg, n_outputs;
  uint64_t rng_increment;
  tpu_tensor_bind_t* tbind;
  tpu_scalar_bind_t* sbind;
  tpu_scalar_check_t* checks;
  int16_t arg_outs[TPU_LOWER_MAX_ARG_OUTS];
} tables_t;

typedef struct fam_s {
  uint64_t hash;
  uint8_t* key; size_t key_len;
  struct fam_s *chain, *older, *newer;
  int n_slots, strikes, ready;
  int64_t slots0[TPU_SHAPE_FAMILY_MAX_SLOTS]; /* the first sample's sizes */
  tables_t tab;
  /* one sample so far: its graphs; two or more: the symbol layout and the templates */
  int have_sample;
  struct sample_s { tpu_ir_graph_t pre, post; }* s1; /* allocated apart: 8 KiB of graph headers */
  int n_syms;
  int8_t sym_of[TPU_SHAPE_FAMILY_MAX_SLOTS]; /* -1: the slot is constant */
  tpu_ir_template_t *tpre, *tpost;
} fam_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static fam_t* g_buckets[NBUCKETS];
static fam_t *g_oldest, *g_newest;
static int g_count;
static uint64_t g_instantiated, g_samples, g_refused;
static int g_enabled = -1;

int tpu_shape_family_enabled(void) { return tpu_rt_env_switch(&g_enabled, "TORCH_TPU_EAGER_TEMPLATES", 1); }

int tpu_shape_family_set_enabled(int on) {
  return tpu_rt_env_switch_set(&g_enabled, "TORCH_TPU_EAGER_TEMPLATES", 1, on);
}

static void tables_free(tables_t* t) { free(t->tbind); free(t->sbind); free(t->checks); memset(t, 0, sizeof *t); }
static int tables_copy(tables_t* t, const tpu_lower_ctx_t* cx) {
  memset(t, 0, sizeof *t);
  t->n_tbind = cx->n_tbind; t->n_sbind = cx->n_sbind; t->n_checks = cx->n_checks; t->n_arg_outs = cx->n_arg_outs;
  t->gen_arg = cx->gen_arg; t->n_outputs = cx->nouts; t->rng_increment = cx->rng_increment;
  memcpy(t->arg_outs, cx->arg_outs, sizeof t->arg_outs);
  t->tbind = malloc((size_t)(t->n_tbind + 1) * sizeof(tpu_tensor_bind_t));
  t->sbind = malloc((size_t)(t->n_sbind + 1) * sizeof(tpu_scalar_bind_t));
  t->checks = malloc((size_t)(t->n_checks + 1) * sizeof(tpu_scalar_check_t));
  if (!t->tbind || !t->sbind || !t->checks) { tables_free(t); return -1; }
  memcpy(t->tbind, cx->tbind, (size_t)t->n_tbind * sizeof(tpu_tensor_bind_t));
  memcpy(t->sbind, cx->sbind, (size_t)t->n_sbind * sizeof(tpu_scalar_bind_t));
  memcpy(t->checks, cx->checks, (size_t)t->n_checks * sizeof(tpu_scalar_check_t));
  return 0;
}
static int tables_same(const tables_t* t, const tpu_lower_ctx_t* cx) {
  return t->n_tbind == cx->n_tbind && t->n_sbind == cx->n_sbind && t->n_checks == cx->n_checks &&
         t->n_arg_outs == cx->n_arg_outs && t->gen_arg == cx->gen_arg && t->n_outputs == cx->nouts &&
         t->rng_increment == cx->rng_increment && !memcmp(t->arg_outs, cx->arg_outs, sizeof t->arg_outs) &&
         !memcmp(t->tbind, cx->tbind, (size_t)t->n_tbind * sizeof(tpu_tensor_bind_t)) &&
         !memcmp(t->sbind, cx->sbind, (size_t)t->n_sbind * sizeof(tpu_scalar_bind_t)) &&
         !memcmp(t->checks, cx->checks, (size_t)t->n_checks * sizeof(tpu_scalar_check_t));
}

static void fam_drop_sample(fam_t* f) {
  if (!f->have_sample) return;
  tpu_ir_graph_free(&f->s1->pre); tpu_ir_graph_free(&f->s1->post);
  free(f->s1); f->s1 = NULL;
  f->have_sample = 0;
}
/* f's first sample (none held): pre taken, a copy of post; 0, or -1 (out of memory: none) */
static int fam_set_sample(fam_t* f, tpu_ir_graph_t* pre, const tpu_ir_graph_t* post, const int64_t* slots) {
  if (!(f->s1 = malloc(sizeof *f->s1))) return -1;
  if (tpu_ir_graph_clone(post, &f->s1->post) != TPU_OK) { free(f->s1); f->s1 = NULL; return -1; }
  f->s1->pre = *pre; tpu_ir_graph_init(pre);
  memcpy(f->slots0, slots, (size_t)f->n_slots * sizeof(int64_t));
  f->have_sample = 1;
  return 0;
}
static void fam_free(fam_t* f) {
  fam_drop_sample(f);
  tpu_ir_template_free(f->tpre); tpu_ir_template_free(f->tpost);
  tables_free(&f->tab);
  free(f->key); free(f);
}
static void fam_unlink(fam_t* f) {
  fam_t** p = &g_buckets[f->hash % NBUCKETS];
  while (*p && *p != f) p = &(*p)->chain;
  if (*p) *p = f->chain;
  if (f->older) f->older->newer = f->newer; else g_oldest = f->newer;
  if (f->newer) f->newer->older = f->older; else g_newest = f->older;
  g_count--;
}
static fam_t* fam_find(uint64_t h, const uint8_t* key, size_t len) {
  for (fam_t* f = g_buckets[h % NBUCKETS]; f; f = f->chain)
    if (f->hash == h && f->key_len == len && !memcmp(f->key, key, len)) return f;
  return NULL;
}
static fam_t* fam_insert(uint64_t h, const uint8_t* key, size_t len, int n_slots) {
  fam_t* f = calloc(1, sizeof *f);
  if (!f || !(f->key = malloc(len ? len : 1))) { free(f); return NULL; }
  memcpy(f->key, key, len);
  f->hash = h; f->key_len = len; f->n_slots = n_slots;
  while (g_count >= TPU_SHAPE_FAMILY_MAX && g_oldest) { fam_t* o = g_oldest; fam_unlink(o); fam_free(o); }
  f->chain = g_buckets[h % NBUCKETS]; g_buckets[h % NBUCKETS] = f;
  f->older = g_newest; if (g_newest) g_newest->newer = f; else g_oldest = f;
  g_newest = f;
  g_count++;
  return f;
}
static void fam_strike(fam_t* f) {
  g_refused++;
  if (++f->strikes >= MAX_STRIKES) { /* stop learning: keep only the key */
    f->ready = 0;
    fam_drop_sample(f);
    tpu_ir_template_free(f->tpre); tpu_ir_template_free(f->tpost);
    f->tpre = f->tpost = NULL;
  }
}

/* Starts f again from one sample (pre taken): its templates and held sample go, a strike is counted when
 * `strike` (4 strikes: stop learning, no sample kept), and its tables become cx's (cx NULL: kept as they are). */
static void fam_restart(fam_t* f, int strike, const tpu_lower_ctx_t* cx, tpu_ir_graph_t* pre,
                        const tpu_ir_graph_t* post, const int64_t* slots) {
  if (strike) fam_strike(f);
  fam_drop_sample(f);
  tpu_ir_template_free(f->tpre); tpu_ir_template_free(f->tpost);
  f->tpre = f->tpost = NULL;
  f->ready = 0;
  if (cx) tables_free(&f->tab);
  if (f->strikes >= MAX_STRIKES || (cx && tables_copy(&f->tab, cx))) return;
  if (fam_set_sample(f, pre, post, slots) && cx) tables_free(&f->tab);
}

/* The call's symbol values under f's layout: 1; 0 if the call does not fit it (a constant slot
 * changed, two slots of one symbol differ); -1 if it fits but a symbol is below 2 (a size 0 or 1 may
 * lower differently: compiled in full, neither instantiated nor learned from, no strike). */
static int syms_of(const fam_t* f, const int64_t* slots, int64_t* syms) {
  int seen[TPU_IR_TEMPLATE_MAX_SYMS] = {0};
  for (int i = 0; i < f->n_slots; ++i) {
    int s = f->sym_of[i];
    if (s < 0) { if (slots[i] != f->slots0[i]) return 0; continue; }
    if (!seen[s]) { syms[s] = slots[i]; seen[s] = 1; }
    else if (syms[s] != slots[i]) return 0;
  }
  for (int s = 0; s < f->n_syms; ++s) if (syms[s] < 2) return -1;
  return 1;
}

int tpu_shape_family_try(const uint8_t* fkey, size_t fkey_len, const int64_t* slots, int n_slots,
                         const tpu_lower_ctx_t* cx, tpu_ir_graph_t* out_post) {
  if (!tpu_shape_family_enabled() || n_slots <= 0 || n_slots > TPU_SHAPE_FAMILY_MAX_SLOTS) return -1;
  uint64_t h = tpu_hash_fast(fkey, fkey_len);
  int r = 0;
  pthread_mutex_lock(&g_mu);
  fam_t* f = fam_find(h, fkey, fkey_len);
  if (!f) { /* the first size: only its sizes (most programs never see a second one; no graph copies) */
    if ((f = fam_insert(h, fkey, fkey_len, n_slots))) memcpy(f->slots0, slots, (size_t)n_slots * sizeof(int64_t));
    r = -1;
    goto out;
  }
  if (f->strikes >= MAX_STRIKES || f->n_slots != n_slots) { r = -1; goto out; }
  /* no sample yet: a second size is the first sample; the first size again (the memory level dropped it) is not */
  if (!f->tpre && !f->have_sample) {
    if (!memcmp(f->slots0, slots, (size_t)n_slots * sizeof(int64_t))) r = -1;
    goto out;
  }
  if (!f->ready) goto out;
  int64_t syms[TPU_IR_TEMPLATE_MAX_SYMS];
  /* another symbol layout (two sizes that moved together in the first samples part) or other tables:
   * compiled in full; tpu_shape_family_learn starts the family again from it (a strike) */
  const int fit = syms_of(f, slots, syms);
  if (fit < 0) { r = -1; goto out; }
  if (!fit || !tables_same(&f->tab, cx)) goto out;
  /* not the predicted graph: compiled in full and learned from (tpu_shape_family_learn decides) */
  if (!tpu_ir_template_matches(f->tpre, &cx->g, syms, 2)) goto out;
  tpu_status_t st = tpu_ir_template_instantiate_ex(f->tpost, syms, 2, out_post, NULL);
  if (st) { tpu_status_free(st); f->ready = 0; goto out; }
  g_instantiated++;
  r = 1;
out:
  pthread_mutex_unlock(&g_mu);
  return r;
}

/* Two samples fix the layout: slots that differ are symbols, equal (old, new) pairs one symbol. */
static int make_layout(fam_t* f, const int64_t* slots, int64_t* syms1, int64_t* syms2) {
  int n = 0;
  for (int i = 0; i < f->n_slots; ++i) {
    f->sym_of[i] = -1;
    if (slots[i] == f->slots0[i]) continue;
    int s = 0;
    while (s < n && !(syms1[s] == f->slots0[i] && syms2[s] == slots[i])) ++s;
    if (s == n) {
      if (n == TPU_IR_TEMPLATE_MAX_SYMS) return -1;
      syms1[n] = f->slots0[i]; syms2[n] = slots[i]; n++;
    }
    f->sym_of[i] = (int8_t)s;
  }
  f->n_syms = n;
  return n;
}

void tpu_shape_family_learn(const uint8_t* fkey, size_t fkey_len, const int64_t* slots, int n_slots,
                            const tpu_lower_ctx_t* cx, tpu_ir_graph_t* pre, const tpu_ir_graph_t* post) {
  if (!tpu_shape_family_enabled() || n_slots <= 0 || n_slots > TPU_SHAPE_FAMILY_MAX_SLOTS) { tpu_ir_graph_free(pre); return; }
  uint64_t h = tpu_hash_fast(fkey, fkey_len);
  char why[160];
  pthread_mutex_lock(&g_mu);
  fam_t* f = fam_find(h, fkey, fkey_len);
  if (!f || f->strikes >= MAX_STRIKES || f->n_slots != n_slots) goto out;
  g_samples++;
  if (!f->tpre && !f->have_sample) { /* the first sample */
    if (tables_copy(&f->tab, cx)) goto out;
    if (fam_set_sample(f, pre, post, slots)) tables_free(&f->tab);
    goto out;
  }
  int64_t syms[TPU_IR_TEMPLATE_MAX_SYMS];
  const int fit = f->tpre ? syms_of(f, slots, syms) : 1;
  if (fit < 0) goto out; /* a symbol below 2: not a sample (see syms_of) */
  if (!tables_same(&f->tab, cx) || !fit) {
    /* no instance of this family as learned: start again from this sample with its tables */
    fam_restart(f, 1, cx, pre, post, slots);
    goto out;
  }
  int verdict = TPU_IR_TEMPLATE_NOT_INSTANCE;
  if (f->have_sample) { /* the second sample: the layout, then both templates */
    int64_t s1[TPU_IR_TEMPLATE_MAX_SYMS], s2[TPU_IR_TEMPLATE_MAX_SYMS];
    int n = make_layout(f, slots, s1, s2);
    if (n == 0) goto out; /* the same sizes again (the memory level dropped it): nothing new */
    int small1 = 0, small2 = 0;
    for (int s = 0; s < n; ++s) { small1 |= s1[s] < 2; small2 |= s2[s] < 2; }
    if (n < 0) { fam_strike(f); goto out; } /* too many symbols */
    if (small2) goto out; /* a size 0 or 1 may lower differently: not a sample, no strike */
    tpu_status_t st = TPU_OK;
    if (!small1) {
      st = tpu_ir_template_create(&f->s1->pre, s1, n, &f->tpre);
      if (!st) st = tpu_ir_template_create(&f->s1->post, s1, n, &f->tpost);
      if (!st) st = tpu_ir_template_add(f->tpre, pre, s2, &verdict, why, sizeof why);
      if (!st && verdict != TPU_IR_TEMPLATE_NOT_INSTANCE) st = tpu_ir_template_add(f->tpost, post, s2, &verdict, why, sizeof why);
      if (st) tpu_status_free(st);
    }
    if (small1 || st || verdict == TPU_IR_TEMPLATE_NOT_INSTANCE) {
      /* start again from this sample (sample 1 was small, or the two are no instances of one template) */
      fam_restart(f, !small1, NULL, pre, post, slots);
      goto out;
    }
    fam_drop_sample(f);
    goto out;
  }
  int vpre = TPU_IR_TEMPLATE_NOT_INSTANCE, vpost = TPU_IR_TEMPLATE_NOT_INSTANCE;
  tpu_status_t st = tpu_ir_template_add(f->tpre, pre, syms, &vpre, why, sizeof why);
  if (!st && vpre != TPU_IR_TEMPLATE_NOT_INSTANCE) st = tpu_ir_template_add(f->tpost, post, syms, &vpost, why, sizeof why);
  if (st) { tpu_status_free(st); f->ready = 0; goto out; }
  if (vpre == TPU_IR_TEMPLATE_NOT_INSTANCE) { f->ready = 0; fam_strike(f); goto out; }
  if (vpost == TPU_IR_TEMPLATE_NOT_INSTANCE) {
    /* the lowered graphs agree but the passes made another graph at this size: never instantiate */
    f->strikes = MAX_STRIKES - 1;
    fam_strike(f);
    goto out;
  }
  f->ready = vpre == TPU_IR_TEMPLATE_PREDICTED && vpost == TPU_IR_TEMPLATE_PREDICTED;
out:
  pthread_mutex_unlock(&g_mu);
  tpu_ir_graph_free(pre);
}

void tpu_shape_family_stats(tpu_shape_family_stats_t* out) {
  pthread_mutex_lock(&g_mu);
  *out = (tpu_shape_family_stats_t){.families = (uint64_t)g_count, .instantiated = g_instantiated,
                                    .samples = g_samples, .refused = g_refused};
  pthread_mutex_unlock(&g_mu);
}

void tpu_shape_family_clear(void) {
  pthread_mutex_lock(&g_mu);
  while (g_oldest) { fam_t* f = g_oldest; fam_unlink(f); fam_free(f); }
  pthread_mutex_unlock(&g_mu);
}
