/* shape.c — lowerings of data-movement ops whose output is a rearrangement of the
 * input: cat, flip, roll, tril/triu, channel_shuffle, im2col / col2im, and the cross product. (Views — view, transpose, expand, slice... —
 * are metadata-only and never reach libtpurt.) */
#include <stdio.h>
#include <stdlib.h>

#include "lower/lower.h"

#define G (&cx->g)

/* Concatenates n values along dim; the host kernel takes a bounded operand count,
 * so long lists are joined in groups. */
#define CAT_GROUP 16
static int concat_many(tpu_lower_ctx_t* cx, int n, int* xs, int dim) {
  while (n > CAT_GROUP) {
    int m = 0;
    for (int i = 0; i < n; i += CAT_GROUP) {
      int k = n - i < CAT_GROUP ? n - i : CAT_GROUP;
      xs[m++] = k == 1 ? xs[i] : tpu_ir_concat(G, k, xs + i, dim);
    }
    n = m;
  }
  return n == 1 ? xs[0] : tpu_ir_concat(G, n, xs, dim);
}

/* ---- cat.out(tensors, dim, *, out): dtype = out's (PyTorch promotes the inputs);
 * legacy 1-D empty tensors are skipped. */
static tpu_status_t lower_cat(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = &cx->outs[0];
  int n = lw_list_len(cx, 0);
  if (n <= 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "torch.cat(): expected a non-empty list of Tensors");
  int ref = -1;
  for (int j = 0; j < n; ++j) {
    const tpu_tensor_t* t = lw_list_meta(cx, 0, j);
    if (!t) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "torch.cat(): expected a list of Tensors");
    if (!(t->ndim == 1 && t->sizes[0] == 0) && ref < 0) ref = j;
  }
  if (ref < 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, 0, NULL)); /* all legacy-empty */
  const tpu_tensor_t* r = lw_list_meta(cx, 0, ref);
  int rank = r->ndim;
  if (rank == 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "zero-dimensional tensor (at position %d) cannot be concatenated", ref);
  int dim = lw_norm_dim(cx, lw_int(cx, 1, 0), rank);
  if (dim < 0) return TPU_OK;
  int* xs = malloc((size_t)n * sizeof(int));
  if (!xs) return lw_fail(cx, TPU_STATUS_OUT_OF_MEMORY, "out of host memory");
  int m = 0;
  tpu_status_t st = TPU_OK;
  for (int j = 0; j < n && !st; ++j) {
    const tpu_tensor_t* t = lw_list_meta(cx, 0, j);
    if (t->ndim == 1 && t->sizes[0] == 0) continue;
    if (t->ndim == 0) { st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "zero-dimensional tensor (at position %d) cannot be concatenated", j); break; }
    if (t->ndim != rank) { st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Tensors must have same number of dimensions: got %d and %d", rank, t->ndim); break; }
    for (int d = 0; d < rank; ++d)
      if (d != dim && t->sizes[d] != r->sizes[d]) {
        st = lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Sizes of tensors must match except in dimension %d. Expected size %lld but got size %lld for tensor number %d in the list.",
                     dim, (long long)r->sizes[d], (long long)t->sizes[d], j);
        break;
      }
    if (st) break;
    if (t->sizes[dim] == 0 && m > 0) continue; /* contributes nothing */
    xs[m++] = lw_list_input(cx, 0, j, o->dtype);
  }
  int v = st ? -1 : concat_many(cx, m, xs, dim);
  free(xs);
  if (st) return st;
  return lw_output(cx, 0, v);
}

/* ---- flip(self, dims) */
static tpu_status_t lower_flip(tpu_lower_ctx_t* cx) {
  const int64_t* dims;
  int nd = lw_int_list(cx, 1, &dims), rank = lw_rank_of(cx, 0);
  int64_t flags[TPU_MAX_DIMS] = {0};
  for (int k = 0; k < nd; ++k) {
    int d = lw_norm_dim(cx, dims[k], rank);
    if (d < 0) return TPU_OK;
    if (flags[d]) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "dims has duplicates, original flip dims size=%d, but unique flip dims size=%d", nd, nd - 1);
    flags[d] = 1;
  }
  int x = lw_input(cx, 0, -1);
  return lw_output(cx, 0, rank ? tpu_ir_reverse(G, x, flags) : x);
}

/* ---- roll(self, shifts, dims): slices + concat per rolled dim; no dims = flattened */
static int roll_dim(tpu_lower_ctx_t* cx, int x, int64_t shift, int d) {
  if (x < 0) return -1;
  tpu_ir_type_t t = *tpu_ir_type(G, x);
  int64_t n = t.dims[d];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  int parts[2] = {lw_slice_dim(cx, x, d, n - s, n), lw_slice_dim(cx, x, d, 0, n - s)}; /* tail moves to the front */
  return tpu_ir_concat(G, 2, parts, d);
}
static tpu_status_t lower_roll(tpu_lower_ctx_t* cx) {
  const int64_t *shifts, *dims;
  int ns = lw_int_list(cx, 1, &shifts), nd = lw_int_list(cx, 2, &dims), rank = lw_rank_of(cx, 0);
  if (nd < 0) nd = 0;
  if (ns <= 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "`shifts` required");
  if (nd == 0 && ns != 1)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "shifts and dimensions must align. shifts: %d, dims:%d", ns, nd);
  if (nd != 0 && ns != nd)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "shifts and dimensions must align. shifts: %d, dims:%d", ns, nd);
  const tpu_tensor_t* o = &cx->outs[0];
  int x = lw_input(cx, 0, -1);
  if (tpu_numel(o->ndim, o->sizes) == 0) return lw_output(cx, 0, x);
  if (nd == 0) {
    int64_t n = tpu_numel(rank, lw_sizes_of(cx, 0));
    int f = roll_dim(cx, tpu_ir_reshape(G, x, 1, &n), shifts[0], 0);
    return lw_output(cx, 0, tpu_ir_reshape(G, f, rank, lw_sizes_of(cx, 0)));
  }
  for (int k = 0; k < nd && x >= 0; ++k) {
    int d = lw_norm_dim(cx, dims[k], rank);
    if (d < 0) return TPU_OK;
    x = roll_dim(cx, x, shifts[k], d);
  }
  return lw_output(cx, 0, x);
}

/* ---- tril / triu(self, diagonal) over the last two dims: iota compare + select */
static tpu_status_t tri(tpu_lower_ctx_t* cx, int upper) {
  int rank = lw_rank_of(cx, 0);
  if (rank < 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: input tensor must have at least 2 dimensions", upper ? "triu" : "tril");
  int64_t k = lw_int(cx, 1, 0);
  int x = lw_input(cx, 0, -1);
  if (x < 0) return TPU_OK;
  tpu_ir_type_t t = *tpu_ir_type(G, x);
  int64_t d2[2] = {t.dims[rank - 2], t.dims[rank - 1]};
  int i = tpu_ir_broadcast(G, tpu_ir_iota(G, TPU_DTYPE_I64, 1, d2, 0), 2, d2, (int64_t[]){0});
  int j = tpu_ir_broadcast(G, tpu_ir_iota(G, TPU_DTYPE_I64, 1, d2 + 1, 0), 2, d2, (int64_t[]){1});
  int diff = tpu_ir_binary(G, TPU_IR_SUB, j, i);
  int keep = tpu_ir_compare(G, upper ? TPU_IR_CMP_GE : TPU_IR_CMP_LE, diff, lw_const_like(cx, (double)k, diff));
  keep = tpu_ir_broadcast(G, keep, t.rank, t.dims, NULL);
  return lw_output(cx, 0, tpu_ir_select(G, keep, x, lw_const_like(cx, 0, x)));
}
static tpu_status_t lower_tril(tpu_lower_ctx_t* cx) { return tri(cx, 0); }
static tpu_status_t lower_triu(tpu_lower_ctx_t* cx) { return tri(cx, 1); }

/* ---- channel_shuffle(self [N, C, *], groups): [N, g, C/g, *] -> [N, C/g, g, *] -> [N, C, *] */
static tpu_status_t lower_channel_shuffle(tpu_lower_ctx_t* cx) {
  int r = lw_rank_of(cx, 0);
  int64_t g = lw_int(cx, 1, 1);
  const int64_t* s = lw_sizes_of(cx, 0);
  if (r < 3)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "channel_shuffle expects input to have at least 3 dimensions, but got input with %d dimension(s)", r);
  if (g <= 0) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Number of groups to divide channels in must be positive. Value of groups:%lld", (long long)g);
  if (s[1] % g)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Number of channels must be divisible by groups. Got %lld channels and %lld groups.", (long long)s[1], (long long)g);
  int64_t d5[TPU_MAX_DIMS + 1], perm[TPU_MAX_DIMS + 1];
  if (r + 1 > TPU_MAX_DIMS) return lw_fail(cx, TPU_STATUS_UNSUPPORTED, "channel_shuffle: input of rank %d", r);
  d5[0] = s[0]; d5[1] = g; d5[2] = s[1] / g;
  for (int d = 2; d < r; ++d) d5[d + 1] = s[d];
  for (int d = 0; d <= r; ++d) perm[d] = d;
  perm[1] = 2; perm[2] = 1;
  int x = tpu_ir_transpose(G, tpu_ir_reshape(G, lw_input(cx, 0, -1), r + 1, d5), perm);
  return lw_output(cx, 0, tpu_ir_reshape(G, x, r, s));
}

/* ---- linalg_cross.out(self, other, dim, *, out): the cross product along dim (length 3) of the
 * broadcast operands, in the output dtype: (a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0) */
static tpu_status_t lower_linalg_cross(tpu_lower_ctx_t* cx) {
  const tpu_tensor_t* o = &cx->outs[0];
  int ra = lw_rank_of(cx, 0), rb = lw_rank_of(cx, 1);
  if (ra != rb)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "linalg.cross: inputs must have the same number of dimensions.");
  int dim = lw_norm_dim(cx, lw_int(cx, 2, -1), ra);
  if (dim < 0) return TPU_OK;
  int64_t la = lw_sizes_of(cx, 0)[dim], lb = lw_sizes_of(cx, 1)[dim];
  if (la != 3 || lb != 3)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "linalg.cross: inputs dimension %d must have length 3. Got %lld and %lld",
                   dim, (long long)la, (long long)lb);
  int dt = o->dtype;
  int a = lw_bcast(cx, lw_input(cx, 0, dt), o->ndim, o->sizes), b = lw_bcast(cx, lw_input(cx, 1, dt), o->ndim, o->sizes);
  int ca[3], cb[3], c[3];
  for (int k = 0; k < 3; ++k) { ca[k] = lw_slice_dim(cx, a, dim, k, k + 1); cb[k] = lw_slice_dim(cx, b, dim, k, k + 1); }
  for (int k = 0; k < 3; ++k) {
    int i = (k + 1) % 3, j = (k + 2) % 3;
    c[k] = tpu_ir_binary(G, TPU_IR_SUB, tpu_ir_binary(G, TPU_IR_MUL, ca[i], cb[j]), tpu_ir_binary(G, TPU_IR_MUL, ca[j], cb[i]));
  }
  return lw_output(cx, 0, tpu_ir_concat(G, 3, c, dim));
}

/* ---- im2col / col2im (F.unfold / F.fold, each the other's backward): sliding 2-D blocks.
 * Legend: N batch, C channels, H x W image (Hp x Wp padded), K = kh kw block offsets, oh x ow = L blocks;
 * column c K + ki kw + kj holds x[c, ki dh + oy sh - ph, kj dw + ox sw - pw] for block oy ow + ox (PyTorch's). */
typedef struct { int64_t k[2], d[2], p[2], s[2], o[2]; } blocks_t;
static int blocks_parse(tpu_lower_ctx_t* cx, int a0, int64_t H, int64_t W, blocks_t* b) {
  int64_t* f[4] = {b->k, b->d, b->p, b->s};
  static const char* names[4] = {"kernel_size", "dilation", "padding", "stride"};
  for (int i = 0; i < 4; ++i) {
    const int64_t* v;
    if (lw_int_list(cx, a0 + i, &v) != 2)
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: %s must have 2 elements", cx->op_name, names[i]), -1;
    f[i][0] = v[0]; f[i][1] = v[1];
    if (i == 2 ? (v[0] < 0 || v[1] < 0) : (v[0] <= 0 || v[1] <= 0))
      return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "%s: %s should be %s, but got (%lld, %lld)", cx->op_name, names[i],
                     i == 2 ? "non-negative" : "greater than zero", (long long)v[0], (long long)v[1]), -1;
  }
  int64_t hw[2] = {H, W};
  for (int j = 0; j < 2; ++j) {
    int64_t span = hw[j] + 2 * b->p[j] - (b->d[j] * (b->k[j] - 1) + 1);
    b->o[j] = span < 0 ? 0 : lw_size_decide(cx, TPU_SIZE_DECIDE_FLOOR_DIV, span, b->s[j]) + 1;
  }
  if (b->o[0] < 1 || b->o[1] < 1)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Given input with spatial size (%lld, %lld), kernel_size=(%lld, %lld), "
                   "dilation=(%lld, %lld), padding=(%lld, %lld), calculated shape of the array of sliding blocks as (%lld, %lld), "
                   "but its components must be at least one.", (long long)H, (long long)W, (long long)b->k[0], (long long)b->k[1],
                   (long long)b->d[0], (long long)b->d[1], (long long)b->p[0], (long long)b->p[1], (long long)b->o[0],
                   (long long)b->o[1]), -1;
  return 0;
}
/* im2col(self [N,] C, H, W, kernel_size, dilation, padding, stride) -> [N,] C K, L */
static tpu_status_t lower_im2col(tpu_lower_ctx_t* cx) {
  int r = lw_rank_of(cx, 0);
  if (r != 3 && r != 4)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected 3D or 4D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions for input, but got: %dD", r);
  const int64_t* s = lw_sizes_of(cx, 0);
  int64_t N = r == 4 ? s[0] : 1, C = s[r - 3], H = s[r - 2], W = s[r - 1];
  blocks_t b;
  if (blocks_parse(cx, 1, H, W, &b) < 0) return TPU_OK;
  const tpu_tensor_t* o = &cx->outs[0];
  int64_t K = b.k[0] * b.k[1], L = b.o[0] * b.o[1];
  if (N * C * K * L == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, o->ndim, o->sizes));
  int x = tpu_ir_reshape(G, lw_input(cx, 0, -1), 4, (int64_t[]){N, C, H, W});
  int64_t plo[4] = {0, 0, b.p[0], b.p[1]};
  x = tpu_ir_pad(G, x, lw_const(cx, 0, o->dtype, 0, NULL), plo, plo);
  int* parts = malloc(sizeof(int) * (size_t)K);
  if (!parts) return lw_fail(cx, TPU_STATUS_OUT_OF_MEMORY, "im2col: out of host memory");
  for (int64_t ki = 0; ki < b.k[0]; ++ki)
    for (int64_t kj = 0; kj < b.k[1]; ++kj) {
      int64_t lo[4] = {0, 0, ki * b.d[0], kj * b.d[1]};
      int64_t hi[4] = {N, C, lo[2] + (b.o[0] - 1) * b.s[0] + 1, lo[3] + (b.o[1] - 1) * b.s[1] + 1}, st[4] = {1, 1, b.s[0], b.s[1]};
      parts[ki * b.k[1] + kj] = tpu_ir_reshape(G, tpu_ir_slice(G, x, lo, hi, st), 4, (int64_t[]){N, C, 1, L});
    }
  int y = concat_many(cx, (int)K, parts, 2); /* [N, C, K, L] */
  free(parts);
  return lw_output(cx, 0, tpu_ir_reshape(G, y, o->ndim, o->sizes));
}
/* col2im(self [N,] C K, L, output_size, kernel_size, dilation, padding, stride) -> [N,] C, H, W: every
 * column entry added into its image position (index_put accumulate in the op-math dtype) */
static tpu_status_t lower_col2im(tpu_lower_ctx_t* cx) {
  int r = lw_rank_of(cx, 0);
  if (r != 2 && r != 3)
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions for input, but got: %dD", r);
  const int64_t* os;
  if (lw_int_list(cx, 1, &os) != 2) return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "col2im: output_size must have 2 elements");
  const int64_t* s = lw_sizes_of(cx, 0);
  int64_t H = os[0], W = os[1], N = r == 3 ? s[0] : 1, CK = s[r - 2], L = s[r - 1];
  blocks_t b;
  if (blocks_parse(cx, 2, H, W, &b) < 0) return TPU_OK;
  int64_t K = b.k[0] * b.k[1], Hp = H + 2 * b.p[0], Wp = W + 2 * b.p[1];
  if (CK % K || L != b.o[0] * b.o[1])
    return lw_fail(cx, TPU_STATUS_INVALID_ARGUMENT, "Given output_size=(%lld, %lld), kernel_size=(%lld, %lld), dilation=(%lld, %lld), "
                   "padding=(%lld, %lld), stride=(%lld, %lld), expected size of input's dimension 1 to be divisible by the product "
                   "of kernel_size (%lld) and size of input's dimension 2 to match the calculated number of sliding blocks "
                   "%lld * %lld = %lld, but got input.size(1)=%lld and input.size(2)=%lld.", (long long)H, (long long)W,
                   (long long)b.k[0], (long long)b.k[1], (long long)b.d[0], (long long)b.d[1], (long long)b.p[0],
                   (long long)b.p[1], (long long)b.s[0], (long long)b.s[1], (long long)K, (long long)b.o[0], (long long)b.o[1],
                   (long long)(b.o[0] * b.o[1]), (long long)CK, (long long)L);
  const tpu_tensor_t* o = &cx->outs[0];
  int64_t C = CK / K, KL = K * L;
  if (N * C * H * W == 0 || KL == 0) return lw_output(cx, 0, lw_const(cx, 0, o->dtype, o->ndim, o->sizes));
  int ct = tpu_opmath_dtype(o->dtype), I64 = TPU_DTYPE_I64;
  /* position of column entry (k, oy, ox) in the padded image, flattened [K L] */
  int64_t kd[3] = {K, b.o[0], b.o[1]};
  int kk = tpu_ir_iota(G, I64, 3, kd, 0), oy = tpu_ir_iota(G, I64, 3, kd, 1), ox = tpu_ir_iota(G, I64, 3, kd, 2);
#define C64(v) lw_const_like(cx, (double)(v), kk)
#define B(op, a, c) tpu_ir_binary(G, TPU_IR_##op, (a), (c))
  int ki = B(DIV, kk, C64(b.k[1])), kj = B(SUB, kk, B(MUL, ki, C64(b.k[1])));
  int py = B(ADD, B(MUL, ki, C64(b.d[0])), B(MUL, oy, C64(b.s[0])));
  int px = B(ADD, B(MUL, kj, C64(b.d[1])), B(MUL, ox, C64(b.s[1])));
  int pos = tpu_ir_reshape(G, B(ADD, B(MUL, py, C64(Wp)), px), 1, &KL);
#undef C64
#undef B
  int v = tpu_ir_reshape(G, lw_input(cx, 0, ct), 3, (int64_t[]){N, C, KL});
  v = tpu_ir_transpose(G, v, (int64_t[]){2, 0, 1}); /* [K L, N, C] */
  int64_t zero = 0, HW = Hp * Wp;
  int img = tpu_ir_index_put(G, lw_const(cx, 0, ct, 3, (int64_t[]){HW, N, C}), v, 1, &pos, &zero, 1);
  img = tpu_ir_reshape(G, tpu_ir_transpose(G, img, (int64_t[]){1, 2, 0}), 4, (int64_t[]){N, C, Hp, Wp});
  img = tpu_ir_slice(G, img, (int64_t[]){0, 0, b.p[0], b.p[1]}, (int64_t[]){N, C, b.p[0] + H, b.p[1] + W}, (int64_t[]){1, 1, 1, 1});
  return lw_output(cx, 0, tpu_ir_reshape(G, img, o->ndim, o->sizes));
}

TPU_LOWERING_TABLE(tpu_lowerings_shape) = {
  {"aten::cat.out", lower_cat}, {"aten::cat", lower_cat},
  {"aten::flip", lower_flip}, {"aten::flip.out", lower_flip},
  {"aten::roll", lower_roll}, {"aten::roll.out", lower_roll},
  {"aten::tril.out", lower_tril}, {"aten::triu.out", lower_triu},
  {"aten::channel_shuffle", lower_channel_shuffle}, {"aten::linalg_cross.out", lower_linalg_cross},
  {"aten::im2col", lower_im2col}, {"aten::im2col.out", lower_im2col},
  {"aten::col2im", lower_col2im}, {"aten::col2im.out", lower_col2im},
  TPU_LOWERING_END
};
