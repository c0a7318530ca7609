/* foreach.c — the aten::_foreach_* list ops: ONE graph per call, built by running the
 * single-tensor op's own lowering once per list element (never a second copy of its
 * semantics). For element j, a sub-context presents that lowering with the arguments it
 * expects — tensor list -> tensor j, Scalar[] -> scalar j, anything else passed through —
 * and with output j; while cx->sub is set the lw_* helpers ask this file to map argument
 * and output numbers back to the list op's, and to share inputs every element reads (a
 * Scalar, alpha, a 0-dim tensor) instead of binding them once per element. The glue passes
 * addcmul/addcdiv's `Tensor scalars` (a CPU 1-D tensor, one value per element) as a Scalar[].
 *
 * Every variant of a family shares one descriptor: functional `_foreach_add.List` (outputs:
 * a fresh Tensor[]), in-place `_foreach_add_.List` (outputs: the written self list) and
 * `_foreach_add.List_out` (outputs: the out list) all get n outputs, element j's at j.
 * The registry runs long lists as several calls over slices (list_split_plan). */
#include <stdlib.h>

#include "lower/lower.h"

#define G (&cx->g)
#define FE_MAX_ARGS 6
#define FE_MAX_SHARED 16

/* One family: `base.overload` runs `single` with arguments mapped by `map`: one char per
 * argument of the single op, a digit = the list op's argument of that index, '-' = None. */
typedef struct { const char* base; const char* overload; const char* single; const char* map; } fe_desc_t;

struct tpu_lower_sub_s {
  int j;                          /* the list element */
  int out_k;                      /* the list op's output for the element's output 0 */
  int8_t from[FE_MAX_ARGS];       /* sub argument -> list op argument (-1: None) */
  tpu_arg_t args[FE_MAX_ARGS];
  const tpu_arg_t* pargs;         /* the list op's arguments */
  int npargs;
  int n_shared;                   /* inputs that are not list elements, made once per graph */
  struct { int8_t scalar; int16_t src, arg; int v; } shared[FE_MAX_SHARED];
};

/* ---- the helpers' side (see lower.h) */
int tpu_lower_sub_arg(const tpu_lower_ctx_t* cx, int i) {
  const struct tpu_lower_sub_s* s = cx->sub;
  if (i < 0 || i >= cx->nargs || s->from[i] < 0) return -1;
  int k = s->pargs[s->from[i]].kind;
  return k == TPU_ARG_TENSOR_LIST || k == TPU_ARG_DOUBLE_LIST || k == TPU_ARG_INT_LIST ? -1 : s->from[i];
}
int tpu_lower_sub_out(const tpu_lower_ctx_t* cx, int k) { return cx->sub->out_k + k; }

static int find_shared(const struct tpu_lower_sub_s* s, int scalar, int src, int arg) {
  for (int k = 0; k < s->n_shared; ++k)
    if (s->shared[k].scalar == scalar && s->shared[k].src == src && s->shared[k].arg == arg) return s->shared[k].v;
  return -1;
}
int tpu_lower_sub_input(tpu_lower_ctx_t* cx, int scalar, int* src, int* i, int* j, int* out_v) {
  struct tpu_lower_sub_s* s = cx->sub;
  if (!scalar && *src == TPU_BIND_OUT) { *i = s->out_k + *i; *j = 0; return 0; }
  if ((!scalar && *src != TPU_BIND_ARG) || (scalar && *src != TPU_SBIND_VALUE) || *i < 0 || *i >= cx->nargs || s->from[*i] < 0) {
    *out_v = tpu_ir_fail(G, TPU_ERR(INTERNAL, "%s: unexpected input %d of a per-element lowering", cx->op_name, *i));
    return 1;
  }
  int p = s->from[*i];
  const tpu_arg_t* a = &s->pargs[p];
  if (a->kind == TPU_ARG_TENSOR_LIST) { /* element j of a tensor list: its own parameter */
    if (scalar) { *out_v = tpu_ir_fail(G, TPU_ERR(INTERNAL, "%s: tensor list read as a scalar", cx->op_name)); return 1; }
    *src = TPU_BIND_LIST; *i = p; *j = s->j;
    return 0;
  }
  if (a->kind == TPU_ARG_DOUBLE_LIST) { *src = TPU_SBIND_LIST_DOUBLE; *i = p; *j = s->j; return 0; }
  if (a->kind == TPU_ARG_INT_LIST) { /* all-integral Scalar[]: the values are in the cache key */
    *out_v = tpu_ir_constant(G, TPU_DTYPE_I64, (double)a->ints[s->j]);
    return 1;
  }
  *i = p; *j = 0;
  *out_v = find_shared(s, scalar, *src, p);
  return *out_v >= 0;
}
void tpu_lower_sub_note(tpu_lower_ctx_t* cx, int scalar, int src, int i, int j, int v) {
  struct tpu_lower_sub_s* s = cx->sub;
  (void)j;
  if ((scalar ? src != TPU_SBIND_VALUE : src != TPU_BIND_ARG) || s->n_shared >= FE_MAX_SHARED) return;
  s->shared[s->n_shared].scalar = (int8_t)scalar;
  s->shared[s->n_shared].src = (int16_t)src;
  s->shared[s->n_shared].arg = (int16_t)i;
  s->shared[s->n_shared].v = v;
  s->n_shared++;
}

/* ---- the families */
#define UNARY(X) \
  X(abs) X(acos) X(asin) X(atan) X(ceil) X(cos) X(cosh) X(erf) X(exp) X(expm1) X(floor) X(frac) X(lgamma) \
  X(log) X(log10) X(log1p) X(log2) X(neg) X(reciprocal) X(round) X(rsqrt) X(sigmoid) X(sign) X(sin) X(sinh) \
  X(sqrt) X(tan) X(tanh) X(trunc)
/* (base, overload, single op, map, key): functional, in-place and out variants. key FE_KEY_ALPHA: alpha (argument
 * 2) is keyed by whether it is 1, as add.out / sub.out key it (eltwise.c's alpha_is_one): alpha == 1, torch.optim's
 * _foreach_add_(params, updates), then runs one pass without the b * alpha multiply */
#define FE_KEY_ALPHA (1u << 2)
#define FAMILIES(X) \
  X(add, Scalar, "aten::add.out", "01", 0) X(add, List, "aten::add.out", "012", FE_KEY_ALPHA) \
  X(add, ScalarList, "aten::add.out", "01", 0) X(add, Tensor, "aten::add.out", "012", FE_KEY_ALPHA) \
  X(sub, Scalar, "aten::sub.out", "01", 0) X(sub, List, "aten::sub.out", "012", FE_KEY_ALPHA) \
  X(sub, ScalarList, "aten::sub.out", "01", 0) \
  X(mul, Scalar, "aten::mul.out", "01", 0) X(mul, List, "aten::mul.out", "01", 0) \
  X(mul, ScalarList, "aten::mul.out", "01", 0) X(mul, Tensor, "aten::mul.out", "01", 0) \
  X(div, Scalar, "aten::div.out", "01", 0) X(div, List, "aten::div.out", "01", 0) \
  X(div, ScalarList, "aten::div.out", "01", 0) X(div, Tensor, "aten::div.out", "01", 0) \
  X(clamp_min, Scalar, "aten::clamp_min.out", "01", 0) X(clamp_min, List, "aten::clamp_min.Tensor_out", "01", 0) \
  X(clamp_min, ScalarList, "aten::clamp_min.out", "01", 0) \
  X(clamp_max, Scalar, "aten::clamp_max.out", "01", 0) X(clamp_max, List, "aten::clamp_max.Tensor_out", "01", 0) \
  X(clamp_max, ScalarList, "aten::clamp_max.out", "01", 0) \
  /* PyTorch runs the Scalar forms of maximum/minimum as clamp_min/clamp_max */ \
  X(maximum, Scalar, "aten::clamp_min.out", "01", 0) X(maximum, List, "aten::maximum.out", "01", 0) \
  X(maximum, ScalarList, "aten::clamp_min.out", "01", 0) \
  X(minimum, Scalar, "aten::clamp_max.out", "01", 0) X(minimum, List, "aten::minimum.out", "01", 0) \
  X(minimum, ScalarList, "aten::clamp_max.out", "01", 0) \
  X(pow, Scalar, "aten::pow.Tensor_Scalar_out", "01", 0) X(pow, List, "aten::pow.Tensor_Tensor_out", "01", 0) \
  X(pow, ScalarList, "aten::pow.Tensor_Scalar_out", "01", 0) \
  X(addcmul, Scalar, "aten::addcmul.out", "0123", 0) X(addcmul, ScalarList, "aten::addcmul.out", "0123", 0) \
  X(addcmul, Tensor, "aten::addcmul.out", "0123", 0) \
  X(addcdiv, Scalar, "aten::addcdiv.out", "0123", 0) X(addcdiv, ScalarList, "aten::addcdiv.out", "0123", 0) \
  X(addcdiv, Tensor, "aten::addcdiv.out", "0123", 0) \
  X(lerp, Scalar, "aten::lerp.Scalar_out", "012", 0) X(lerp, List, "aten::lerp.Tensor_out", "012", 0) \
  X(lerp, ScalarList, "aten::lerp.Scalar_out", "012", 0)
/* families without an in-place form: (base, overload, out suffix, single op, map) */
#define FUNCTIONAL(X) \
  X(norm, ".Scalar", ".Scalar_out", "aten::linalg_vector_norm.out", "01--2") \
  X(max, "", ".out", "aten::max", "0") X(clone, "", ".out", "aten::copy_", "00") \
  X(zero, "", ".out", "aten::zero_", "0") X(copy, "", ".out", "aten::copy_", "012")

static const fe_desc_t kDescs[] = {
#define D_UN(op) {"_foreach_" #op, "", "aten::" #op ".out", "0"},
  UNARY(D_UN)
#define D_FAM(b, o, single, map, key) {"_foreach_" #b, #o, single, map},
  FAMILIES(D_FAM)
#define D_FN(b, o, out, single, map) {"_foreach_" #b, o[0] ? o + 1 : o, single, map},
  FUNCTIONAL(D_FN)
  {"_foreach_pow", "ScalarAndTensor", "aten::pow.Scalar_out", "01"},
};

/* "aten::_foreach_add_.List_out" -> base "_foreach_add", overload "List" */
static const fe_desc_t* find_desc(const char* name) {
  if (strncmp(name, "aten::", 6)) return NULL;
  name += 6;
  const char* dot = strchr(name, '.');
  size_t blen = dot ? (size_t)(dot - name) : strlen(name);
  const char* ov = dot ? dot + 1 : "";
  size_t olen = strlen(ov);
  if (olen >= 3 && !strcmp(ov + olen - 3, "out")) olen = olen == 3 ? 0 : olen - 4; /* "out" / "X_out" */
  for (int k = 0; k < TPU_ARRAY_LEN(kDescs); ++k) {
    const fe_desc_t* d = &kDescs[k];
    size_t dl = strlen(d->base);
    int base_ok = (blen == dl || (blen == dl + 1 && name[dl] == '_')) && !strncmp(name, d->base, dl);
    if (base_ok && strlen(d->overload) == olen && !strncmp(ov, d->overload, olen)) return d;
  }
  return NULL;
}

static tpu_status_t lower_foreach(tpu_lower_ctx_t* cx) {
  const fe_desc_t* d = find_desc(cx->op_name);
  const tpu_lowering_t* l = d ? tpu_lower_find(d->single) : NULL;
  if (!l) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "%s: not implemented for the tpu device", cx->op_name);
  int nmap = (int)strlen(d->map);
  if (nmap > FE_MAX_ARGS) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: %d arguments per element", cx->op_name, nmap);
  /* every tensor list and Scalar[] has the same length n */
  int n = -1;
  for (int i = 0; i < cx->nargs; ++i) {
    const tpu_arg_t* a = &cx->args[i];
    if (a->kind != TPU_ARG_TENSOR_LIST) continue;
    if (n >= 0 && a->len != n)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Tensor lists must have the same number of tensors, got %d and %lld.", n, (long long)a->len);
    n = (int)a->len;
  }
  if (n < 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: expected a tensor list", cx->op_name);
  for (int i = 0; i < cx->nargs; ++i) {
    const tpu_arg_t* a = &cx->args[i];
    if ((a->kind == TPU_ARG_DOUBLE_LIST || a->kind == TPU_ARG_INT_LIST) && a->len != n)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Tensor list must have same number of elements as scalar list.");
    if (a->kind == TPU_ARG_TENSOR && !strcmp(d->overload, "Tensor")) { /* .Tensor: a 0-dim tensor, or addc*'s n values */
      int64_t numel = 1;
      for (int k = 0; k < a->tensor->ndim; ++k) numel *= a->tensor->sizes[k];
      if (!strncmp(d->base, "_foreach_addc", 13)) /* the glue passes a CPU tensor's values as a Scalar[] */
        return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected scalars to be on CPU, got tpu:0 instead.");
      if (a->tensor->ndim != 0)
        return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "scalar tensor expected to be 0 dim but it has %d dimensions and %lld elements.", a->tensor->ndim, (long long)numel);
    }
  }
  if (cx->nouts != n) return lw_fail(cx, TPU_STATUS_INTERNAL, "%s: %d outputs for %d tensors", cx->op_name, cx->nouts, n);
  if (n == 0) { /* nothing to compute: keep the graph valid */
    tpu_ir_output(G, tpu_ir_constant(G, TPU_DTYPE_F32, 0));
    return TPU_OK;
  }
  struct tpu_lower_sub_s* s = calloc(1, sizeof(*s));
  tpu_lower_ctx_t* sub = malloc(sizeof(*sub));
  if (!s || !sub) { free(s); free(sub); return lw_fail(cx, TPU_STATUS_OUT_OF_MEMORY, "out of host memory"); }
  s->pargs = cx->args; s->npargs = cx->nargs;
  tpu_status_t st = TPU_OK;
  for (int j = 0; j < n && st == TPU_OK && cx->g.status == TPU_OK; ++j) {
    s->j = j; s->out_k = j;
    for (int k = 0; k < nmap; ++k) {
      int p = d->map[k] == '-' ? -1 : d->map[k] - '0';
      tpu_arg_t* a = &s->args[k];
      memset(a, 0, sizeof(*a));
      s->from[k] = (int8_t)(p < cx->nargs ? p : -1);
      if (p < 0 || p >= cx->nargs) { a->kind = TPU_ARG_NONE; continue; }
      const tpu_arg_t* pa = &cx->args[p];
      if (pa->kind == TPU_ARG_TENSOR_LIST) {
        if (pa->tensors[j].ndim < 0) { st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: undefined tensor in a list", cx->op_name); break; }
        a->kind = TPU_ARG_TENSOR; a->tensor = &pa->tensors[j];
      } else if (pa->kind == TPU_ARG_DOUBLE_LIST) {
        a->kind = TPU_ARG_SCALAR; a->scalar_dtype = TPU_DTYPE_F64; a->scalar_flags = TPU_SCALAR_WRAPPED;
        a->f = pa->doubles[j]; a->i = (int64_t)a->f;
      } else if (pa->kind == TPU_ARG_INT_LIST) {
        a->kind = TPU_ARG_SCALAR; a->scalar_dtype = TPU_DTYPE_I64; a->scalar_flags = TPU_SCALAR_WRAPPED;
        a->i = pa->ints[j]; a->f = (double)a->i;
      } else {
        *a = *pa;
      }
    }
    if (st) break;
    /* the element's lowering works on the list op's graph and bindings, then hands them back */
    *sub = *cx;
    sub->args = s->args; sub->nargs = nmap;
    sub->outs = &cx->outs[j]; sub->nouts = 1;
    sub->sub = s;
    int n_out0 = cx->g.n_outputs;
    st = l->fn(sub);
    const tpu_arg_t* keep_args = cx->args;
    const tpu_tensor_t* keep_outs = cx->outs;
    int keep_nargs = cx->nargs, keep_nouts = cx->nouts;
    *cx = *sub;
    cx->args = keep_args; cx->nargs = keep_nargs; cx->outs = keep_outs; cx->nouts = keep_nouts; cx->sub = NULL;
    if (st == TPU_OK && cx->g.status == TPU_OK && !cx->embed && cx->g.n_outputs != n_out0 + 1)
      st = lw_fail(cx, TPU_STATUS_INTERNAL, "%s: element %d bound %d outputs", cx->op_name, j, cx->g.n_outputs - n_out0);
  }
  free(sub); free(s);
  return st;
}

TPU_LOWERING_TABLE(tpu_lowerings_foreach) = {
#define R_UN(op) {"aten::_foreach_" #op, lower_foreach}, {"aten::_foreach_" #op "_", lower_foreach}, \
                 {"aten::_foreach_" #op ".out", lower_foreach},
  UNARY(R_UN)
#define R_FAM(b, o, single, map, key) {"aten::_foreach_" #b "." #o, lower_foreach, key, lw_key_class_is_one}, \
    {"aten::_foreach_" #b "_." #o, lower_foreach, key, lw_key_class_is_one}, \
    {"aten::_foreach_" #b "." #o "_out", lower_foreach, key, lw_key_class_is_one},
  FAMILIES(R_FAM)
  {"aten::_foreach_norm.Scalar", lower_foreach, 1u << 1}, {"aten::_foreach_norm.Scalar_out", lower_foreach, 1u << 1},
  {"aten::_foreach_max", lower_foreach}, {"aten::_foreach_max.out", lower_foreach},
  {"aten::_foreach_clone", lower_foreach}, {"aten::_foreach_clone.out", lower_foreach},
  {"aten::_foreach_zero_", lower_foreach}, {"aten::_foreach_zero", lower_foreach}, {"aten::_foreach_zero.out", lower_foreach},
  {"aten::_foreach_copy_", lower_foreach}, {"aten::_foreach_copy", lower_foreach}, {"aten::_foreach_copy.out", lower_foreach},
  {"aten::_foreach_pow.ScalarAndTensor", lower_foreach},
  TPU_LOWERING_END
};
