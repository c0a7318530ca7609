/* serialize.c — graph <-> bytes; the reader rebuilds through the builders (see serialize.h).
 *
 * Layout: u32 magic "TPIR", u32 version, i32 n_ops, n_operands, n_params, n_scalars, n_outputs,
 * precision, i32 outputs[n_outputs], then per op: i32 opcode, n_in, dtype, rank, prec; i64 dims[rank]; i64 i0, i1;
 * u64 bits of f0; u8 alen[3], u8 0; i64 a[r][alen[r]] for r = 0..2; i32 operands[n_in]. */
#include "ir/serialize.h"

#include <stdlib.h>

#define MAGIC 0x52495054u /* "TPIR" little-endian */
#define MAX_OPS (1 << 20)
#define MAX_VALUE (1ll << 53)
#define MAX_OUTPUTS ((int)(sizeof(((tpu_ir_graph_t*)0)->outputs) / sizeof(int32_t)))

typedef struct { uint8_t* p; size_t len, cap; int oom; } wbuf_t;
static void put(wbuf_t* w, const void* data, size_t n) {
  if (w->oom) return;
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 4096;
    while (cap < w->len + n) cap *= 2;
    uint8_t* p = realloc(w->p, cap);
    if (!p) { w->oom = 1; return; }
    w->p = p; w->cap = cap;
  }
  memcpy(w->p + w->len, data, n);
  w->len += n;
}
static void put_i32(wbuf_t* w, int32_t v) { put(w, &v, 4); }
static void put_i64(wbuf_t* w, int64_t v) { put(w, &v, 8); }

tpu_status_t tpu_ir_graph_serialize(const tpu_ir_graph_t* g, uint8_t** out_buf, size_t* out_len) {
  *out_buf = NULL; *out_len = 0;
  TPU_RETURN_IF_ERROR(tpu_ir_verify(g));
  wbuf_t w = {0};
  uint32_t hdr[2] = {MAGIC, TPU_IR_SERIAL_VERSION};
  put(&w, hdr, sizeof hdr);
  put_i32(&w, g->n_ops); put_i32(&w, g->n_operands); put_i32(&w, g->n_params);
  put_i32(&w, g->n_scalars); put_i32(&w, g->n_outputs); put_i32(&w, g->precision);
  put(&w, g->outputs, (size_t)g->n_outputs * 4);
  for (int v = 0; v < g->n_ops; ++v) {
    const tpu_ir_op_t* op = &g->ops[v];
    put_i32(&w, op->opcode); put_i32(&w, op->n_in); put_i32(&w, op->type.dtype); put_i32(&w, op->type.rank);
    put_i32(&w, op->prec);
    put(&w, op->type.dims, (size_t)op->type.rank * 8);
    put_i64(&w, op->i0); put_i64(&w, op->i1);
    uint64_t f; memcpy(&f, &op->f0, 8); put(&w, &f, 8);
    uint8_t alen[4] = {0, 0, 0, 0};
    for (int r = 0; r < 3; ++r)
      for (int d = TPU_MAX_DIMS; d > 0; --d) if (op->a[r][d - 1]) { alen[r] = (uint8_t)d; break; }
    put(&w, alen, 4);
    for (int r = 0; r < 3; ++r) put(&w, op->a[r], (size_t)alen[r] * 8);
    put(&w, &g->operands[op->in_off], (size_t)op->n_in * 4);
  }
  if (w.oom) { free(w.p); return TPU_ERR(OUT_OF_MEMORY, "ir: out of host memory serializing a graph"); }
  *out_buf = w.p; *out_len = w.len;
  return TPU_OK;
}

/* ---- reader */
typedef struct { const uint8_t* p; size_t len, off; int bad; } rbuf_t;
static int get(rbuf_t* r, void* out, size_t n) {
  if (r->bad || n > r->len - r->off) { r->bad = 1; memset(out, 0, n); return 0; }
  memcpy(out, r->p + r->off, n);
  r->off += n;
  return 1;
}
static int32_t get_i32(rbuf_t* r) { int32_t v; get(r, &v, 4); return v; }
static int64_t get_i64(rbuf_t* r) { int64_t v; get(r, &v, 8); return v; }

#define BAD(...) TPU_ERR(INVALID_ARGUMENT, "ir: serialized graph: " __VA_ARGS__)

/* A known target whose operands follow its rule (tpu_ir_custom_operands_ok): a damaged cache file is refused at
 * load, before any step of its graph has run. */
static int check_custom(const tpu_ir_graph_t* g, const tpu_ir_op_t* op, const int32_t* in) {
  if (op->i0 <= TPU_IR_CUSTOM_NONE || op->i0 >= TPU_IR_CUSTOM_COUNT) return 0;
  const tpu_ir_type_t* few[8];
  const tpu_ir_type_t** ts = op->n_in <= 8 ? few : malloc((size_t)op->n_in * sizeof(*ts));
  if (!ts) return 0;
  for (int k = 0; k < op->n_in; ++k) ts[k] = &g->ops[in[k]].type;
  const int ok = tpu_ir_custom_operands_ok(op->i0, op->i1, op->n_in, ts, &op->type);
  if (ts != few) free(ts);
  return ok;
}

/* Attributes of the ops that have no validating builder (added with tpu_ir_add_op). */
static int check_unbuilt(const tpu_ir_graph_t* g, const tpu_ir_op_t* op, const int32_t* in) {
  const int rank = op->type.rank;
  switch (op->opcode) {
    case TPU_IR_CONSTANT: return op->n_in == 0 && rank == 0;
    case TPU_IR_CUSTOM: return check_custom(g, op, in);
    case TPU_IR_CONV: {
      /* y [N, O, *Q] = conv(x [N, C, *S], w [O, C/G, *K]): the shape rule of lower/conv.c */
      if (op->n_in != 2 || op->i1 < 1 || op->i1 > TPU_MAX_DIMS - 2 || op->i0 < 1 || rank != op->i1 + 2) return 0;
      const tpu_ir_type_t *x = &g->ops[in[0]].type, *w = &g->ops[in[1]].type;
      /* bf16/f16 operands may give an f32 result (the kernels widen while packing) */
      const int widen = op->type.dtype == TPU_DTYPE_F32 && (x->dtype == TPU_DTYPE_BF16 || x->dtype == TPU_DTYPE_F16);
      if (x->rank != rank || w->rank != rank || (x->dtype != op->type.dtype && !widen) || w->dtype != x->dtype) return 0;
      if (op->type.dims[0] != x->dims[0] || op->type.dims[1] != w->dims[0] || w->dims[0] % op->i0 ||
          x->dims[1] != w->dims[1] * op->i0)
        return 0;
      for (int d = 0; d < op->i1; ++d) {
        const int64_t s = op->a[0][d], p = op->a[1][d], dl = op->a[2][d];
        if (s < 1 || p < 0 || dl < 1 || s > INT32_MAX || p > INT32_MAX || dl > INT32_MAX) return 0;
        int64_t span, q;
        if (w->dims[2 + d] < 1 || __builtin_mul_overflow(dl, w->dims[2 + d] - 1, &span)) return 0;
        q = x->dims[2 + d] + 2 * p - span - 1; /* dims <= 2^53, p < 2^31: no overflow */
        if (q < 0 || op->type.dims[2 + d] != q / s + 1) return 0;
      }
      return 1;
    }
    case TPU_IR_REDUCE_WINDOW: {
      if (op->n_in != 1 || op->i0 < 0 || op->i0 >= TPU_IR_MONOID_COUNT || op->i1 < 1 || op->i1 > rank) return 0;
      if (g->ops[in[0]].type.rank != rank) return 0;
      for (int d = 0; d < op->i1; ++d) if (op->a[0][d] < 1 || op->a[1][d] < 1 || op->a[2][d] < 0) return 0;
      return 1;
    }
    default: return 0;
  }
}

/* Rebuilds op `want` (operands `in`, already range-checked) through its builder; returns the new
 * value id (must equal g->n_ops before the call) or -1. */
static int rebuild(tpu_ir_graph_t* g, const tpu_ir_op_t* want, const int32_t* in) {
  const int oc = want->opcode, n = want->n_in, rank = want->type.rank, dt = want->type.dtype;
  const int64_t* dims = want->type.dims;
  const int64_t i0 = want->i0, i1 = want->i1;
  int small0 = i0 >= INT32_MIN && i0 <= INT32_MAX, small1 = i1 >= INT32_MIN && i1 <= INT32_MAX;
#define NEED(cond) do { if (!(cond)) return -1; } while (0)
  if (oc == TPU_IR_CONSTANT || oc == TPU_IR_CONV || oc == TPU_IR_REDUCE_WINDOW || oc == TPU_IR_CUSTOM) {
    NEED(check_unbuilt(g, want, in));
    int ids[2 + TPU_MAX_DIMS];
    int* xs = n <= (int)TPU_ARRAY_LEN(ids) ? ids : malloc((size_t)n * sizeof(int));
    NEED(xs);
    for (int k = 0; k < n; ++k) xs[k] = in[k];
    tpu_ir_op_t p = *want;
    int v = tpu_ir_add_op(g, &p, n, xs);
    if (xs != ids) free(xs);
    return v;
  }
  if (oc >= TPU_IR_NEG && oc <= TPU_IR_IS_INF) { NEED(n == 1); return tpu_ir_unary(g, oc, in[0]); }
  if (oc >= TPU_IR_ADD && oc <= TPU_IR_FMOD) { NEED(n == 2); return tpu_ir_binary(g, oc, in[0], in[1]); }
  switch (oc) {
    case TPU_IR_PARAM: NEED(n == 0); return tpu_ir_param(g, dt, rank, dims);
    case TPU_IR_SCALAR: NEED(n == 0 && rank == 0); return tpu_ir_scalar(g, dt);
    case TPU_IR_IOTA: NEED(n == 0 && small0); return tpu_ir_iota(g, dt, rank, dims, (int)i0);
    case TPU_IR_COMPARE: NEED(n == 2 && small0); return tpu_ir_compare(g, (int)i0, in[0], in[1]);
    case TPU_IR_SELECT: NEED(n == 3); return tpu_ir_select(g, in[0], in[1], in[2]);
    case TPU_IR_CLAMP: NEED(n == 3); return tpu_ir_clamp(g, in[0], in[1], in[2]);
    case TPU_IR_CONVERT: NEED(n == 1); return tpu_ir_convert(g, in[0], dt);
    case TPU_IR_BROADCAST: NEED(n == 1); return tpu_ir_broadcast(g, in[0], rank, dims, want->a[0]);
    case TPU_IR_RESHAPE: NEED(n == 1); return tpu_ir_reshape(g, in[0], rank, dims);
    case TPU_IR_TRANSPOSE: NEED(n == 1 && g->ops[in[0]].type.rank == rank); return tpu_ir_transpose(g, in[0], want->a[0]);
    case TPU_IR_SLICE: NEED(n == 1); return tpu_ir_slice(g, in[0], want->a[0], want->a[1], want->a[2]);
    case TPU_IR_REVERSE: NEED(n == 1); return tpu_ir_reverse(g, in[0], want->a[0]);
    case TPU_IR_CONCAT: {
      NEED(n >= 1 && small0);
      int* xs = malloc((size_t)n * sizeof(int));
      NEED(xs);
      for (int k = 0; k < n; ++k) xs[k] = in[k];
      int v = tpu_ir_concat(g, n, xs, (int)i0);
      free(xs);
      return v;
    }
    case TPU_IR_PAD: NEED(n == 2); return tpu_ir_pad(g, in[0], in[1], want->a[0], want->a[1]);
    case TPU_IR_DOT: {
      NEED(n == 2 && i0 >= 0 && i0 <= TPU_MAX_DIMS - 2);
      const int32_t keep = g->precision;
      g->precision = want->prec; /* tpu_ir_dot stamps the graph's precision on the op */
      int v = tpu_ir_dot(g, in[0], in[1], (int)i0, dt);
      g->precision = keep;
      return v;
    }
    case TPU_IR_REDUCE:
      NEED(n == 1 && i0 >= 0 && i0 < TPU_IR_MONOID_COUNT);
      return tpu_ir_reduce(g, (int)i0, in[0], want->a[0]);
    case TPU_IR_ARGREDUCE: NEED(n == 1 && (i0 == 0 || i0 == 1) && small1); return tpu_ir_argreduce(g, (int)i0, in[0], (int)i1);
    case TPU_IR_CUMULATIVE:
      NEED(n == 1 && i0 >= 0 && i0 < TPU_IR_MONOID_COUNT && small1);
      return tpu_ir_cumulative(g, (int)i0, in[0], (int)i1);
    case TPU_IR_GATHER: { /* i1 = 1: negative indices are an error (no wrap) */
      NEED(n == 2 && small0 && (i1 == 0 || i1 == 1));
      int v = tpu_ir_gather(g, in[0], in[1], (int)i0);
      if (v >= 0) g->ops[v].i1 = i1;
      return v;
    }
    case TPU_IR_INDEX_SELECT: { /* i1 = 1: embedding_bag's range check (no negative wrap) */
      NEED(n == 2 && small0 && i1 >= 0 && i1 <= 2);
      int v = tpu_ir_index_select(g, in[0], in[1], (int)i0);
      if (v >= 0) g->ops[v].i1 = i1;
      return v;
    }
    case TPU_IR_SCATTER: NEED(n == 3 && small0 && i1 >= 0 && i1 <= 4); return tpu_ir_scatter(g, in[0], in[1], in[2], (int)i0, (int)i1);
    case TPU_IR_INDEX_PUT: {
      NEED(n >= 3 && n <= 2 + TPU_MAX_DIMS && small1);
      const int xr = g->ops[in[0]].type.rank;
      int idx[TPU_MAX_DIMS];
      for (int j = 0; j < n - 2; ++j) {
        NEED(want->a[0][j] >= 0 && want->a[0][j] < xr);
        idx[j] = in[2 + j];
      }
      return tpu_ir_index_put(g, in[0], in[1], n - 2, idx, want->a[0], (int)i1);
    }
    case TPU_IR_RNG:
      NEED(n == 2 && i0 >= 0 && i0 <= 3);
      return tpu_ir_rng(g, dt, rank, dims, in[0], in[1], (int)i0);
    case TPU_IR_SORT: case TPU_IR_ARGSORT:
      NEED(n == 1 && small0 && small1);
      return tpu_ir_sort(g, in[0], (int)i0, (int)i1, oc == TPU_IR_ARGSORT);
    default: return -1;
  }
#undef NEED
}

static int same_op(const tpu_ir_op_t* a, const tpu_ir_op_t* b) {
  if (a->opcode != b->opcode || a->n_in != b->n_in || a->type.dtype != b->type.dtype || a->prec != b->prec ||
      a->type.rank != b->type.rank || a->i0 != b->i0 || a->i1 != b->i1 ||
      memcmp(&a->f0, &b->f0, sizeof a->f0) || memcmp(a->a, b->a, sizeof a->a))
    return 0;
  for (int d = 0; d < a->type.rank; ++d) if (a->type.dims[d] != b->type.dims[d]) return 0;
  return 1;
}

tpu_status_t tpu_ir_graph_deserialize(const uint8_t* buf, size_t len, tpu_ir_graph_t* out_g) {
  tpu_ir_graph_t* g = out_g;
  tpu_ir_graph_init(g);
  if (!buf) return BAD("no data");
  rbuf_t r = {buf, len, 0, 0};
  uint32_t hdr[2];
  get(&r, hdr, sizeof hdr);
  if (r.bad || hdr[0] != MAGIC) return BAD("bad magic");
  if (hdr[1] != TPU_IR_SERIAL_VERSION) return BAD("format version %u, expected %u", hdr[1], TPU_IR_SERIAL_VERSION);
  int32_t n_ops = get_i32(&r), n_operands = get_i32(&r), n_params = get_i32(&r), n_scalars = get_i32(&r),
          n_outputs = get_i32(&r), precision = get_i32(&r);
  if (r.bad || n_ops < 1 || n_ops > MAX_OPS || n_operands < 0 || n_params < 0 || n_scalars < 0 ||
      n_outputs < 1 || n_outputs > MAX_OUTPUTS || precision < 0 || precision >= TPU_IR_PRECISION_COUNT)
    return BAD("bad counts");
  g->precision = precision;
  /* every op takes at least 48 bytes, every operand 4: reject absurd counts before allocating */
  if ((size_t)n_ops > (len - r.off) / 48 || (size_t)n_operands > (len - r.off) / 4) return BAD("truncated");
  int32_t outputs[sizeof(((tpu_ir_graph_t*)0)->outputs) / sizeof(int32_t)];
  get(&r, outputs, (size_t)n_outputs * 4);
  int32_t* in = malloc((size_t)(n_operands ? n_operands : 1) * sizeof(int32_t));
  if (!in) return TPU_ERR(OUT_OF_MEMORY, "ir: out of host memory");
  tpu_status_t st = TPU_OK;
  int64_t seen_operands = 0;
  for (int v = 0; v < n_ops && !st; ++v) {
    tpu_ir_op_t want; memset(&want, 0, sizeof want);
    want.opcode = get_i32(&r); want.n_in = get_i32(&r); want.type.dtype = get_i32(&r); want.type.rank = get_i32(&r);
    want.prec = get_i32(&r);
    if (r.bad) { st = BAD("truncated"); break; }
    if (want.prec < 0 || want.prec >= TPU_IR_PRECISION_COUNT) { st = BAD("%%%d: bad precision", v); break; }
    if (want.opcode < 0 || want.opcode >= TPU_IR_OPCODE_COUNT) { st = BAD("%%%d: bad opcode %d", v, want.opcode); break; }
    if (want.type.dtype < 0 || want.type.dtype >= TPU_DTYPE_COUNT) { st = BAD("%%%d: bad dtype", v); break; }
    if (want.type.rank < 0 || want.type.rank > TPU_MAX_DIMS) { st = BAD("%%%d: bad rank", v); break; }
    if (want.n_in < 0 || want.n_in > n_operands - seen_operands) { st = BAD("%%%d: bad operand count", v); break; }
    get(&r, want.type.dims, (size_t)want.type.rank * 8);
    /* sizes and attributes within 2^53 keep every builder's arithmetic (element counts, pad and
     * slice bounds) far from int64 overflow */
    int64_t numel = 1;
    for (int d = 0; d < want.type.rank; ++d)
      if (want.type.dims[d] < 0 || want.type.dims[d] > MAX_VALUE || __builtin_mul_overflow(numel, want.type.dims[d], &numel) ||
          numel > MAX_VALUE)
        r.bad = 1;
    want.i0 = get_i64(&r); want.i1 = get_i64(&r);
    get(&r, &want.f0, 8);
    uint8_t alen[4];
    get(&r, alen, 4);
    for (int k = 0; k < 3; ++k) {
      if (alen[k] > TPU_MAX_DIMS) { r.bad = 1; break; }
      get(&r, want.a[k], (size_t)alen[k] * 8);
      for (int d = 0; d < alen[k]; ++d) if (want.a[k][d] < -MAX_VALUE || want.a[k][d] > MAX_VALUE) r.bad = 1;
    }
    get(&r, in, (size_t)want.n_in * 4);
    if (r.bad || alen[3]) { st = BAD("%%%d: truncated or malformed", v); break; }
    for (int k = 0; k < want.n_in; ++k)
      if (in[k] < 0 || in[k] >= v) { st = BAD("%%%d: operand %d out of order", v, in[k]); break; }
    if (st) break;
    seen_operands += want.n_in;
    int got = rebuild(g, &want, in);
    if (got != v || g->status || !same_op(&g->ops[v], &want)) {
      st = BAD("%%%d (%s) does not match what its builder makes%s%s", v, tpu_ir_opcode_name(want.opcode),
               g->status ? ": " : "", g->status ? tpu_status_message(g->status) : "");
      break;
    }
  }
  free(in);
  if (!st && r.off != len) st = BAD("%zu trailing bytes", len - r.off);
  if (!st && (seen_operands != n_operands || g->n_params != n_params || g->n_scalars != n_scalars))
    st = BAD("counts do not match the ops");
  if (!st) {
    for (int k = 0; k < n_outputs; ++k) tpu_ir_output(g, outputs[k]);
    if (g->status) { st = BAD("bad outputs"); }
  }
  if (!st) {
    tpu_status_t vs = tpu_ir_verify(g);
    if (vs) { st = BAD("%s", tpu_status_message(vs)); tpu_status_free(vs); }
  }
  return st;
}
