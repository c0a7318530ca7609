/* test_cache.c — the compilation cache: the 64-bit hash, IR serialization (round trip, fuzzed and
 * crafted inputs), the disk store (corrupt/truncated/stale files, size cap, concurrent writers) and
 * the op path's disk level (a hit compiles nothing; a crafted payload is never executed). */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/disk_cache.h"
#include "cache/exec_cache.h"
#include "cache/exec_codec.h"
#include "cache/hash.h"
#include "cache/shape_family.h"
#include "ir/serialize.h"
#include "tpurt.h"

static int g_pass, g_fail;
#define CHECK(cond, ...) do { if (cond) g_pass++; else { g_fail++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(expr) do { tpu_status_t s_ = (expr); CHECK(s_ == TPU_OK, "%s -> %s", #expr, tpu_status_message(s_)); tpu_status_free(s_); } while (0)

static uint64_t g_rng = 0x1234567ull;
static uint64_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }
static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}
static int distinct(uint64_t* h, int n) {
  qsort(h, (size_t)n, sizeof *h, cmp_u64);
  for (int i = 1; i < n; ++i) if (h[i] == h[i - 1]) return 0;
  return 1;
}

/* ---- hash quality: distinct values for lengths, single-bit flips and many short keys, and
 * avalanche (a flipped input bit flips about half the output bits) */
static void test_hash(void) {
  uint8_t zero[257] = {0};
  uint64_t hs[8192];
  for (int n = 0; n <= 256; ++n) hs[n] = tpu_hash64(zero, (size_t)n, 0);
  CHECK(distinct(hs, 257), "zero buffers of lengths 0..256 hash apart");
  CHECK(tpu_hash64("abc", 3, 0) == tpu_hash64("abc", 3, 0) && tpu_hash64("abc", 3, 0) != tpu_hash64("abc", 3, 1),
        "deterministic and seeded");
  const int sizes[] = {1, 7, 8, 9, 64, 1000};
  for (int si = 0; si < TPU_ARRAY_LEN(sizes); ++si) {
    int n = sizes[si];
    uint8_t buf[1000];
    for (int i = 0; i < n; ++i) buf[i] = (uint8_t)rnd();
    uint64_t h0 = tpu_hash64(buf, (size_t)n, 0);
    int nb = n * 8, m = 0;
    double flips = 0;
    for (int b = 0; b < nb && m < 8191; ++b) {
      buf[b / 8] ^= (uint8_t)(1u << (b % 8));
      hs[m] = tpu_hash64(buf, (size_t)n, 0);
      flips += __builtin_popcountll(hs[m] ^ h0);
      m++;
      buf[b / 8] ^= (uint8_t)(1u << (b % 8));
    }
    hs[m++] = h0;
    double avg = flips / (m - 1);
    CHECK(distinct(hs, m), "single-bit flips of a %d-byte buffer hash apart", n);
    CHECK(avg > 28 && avg < 36, "avalanche over %d bytes: %.2f output bits flip on average", n, avg);
  }
  uint64_t* many = malloc(200000 * sizeof *many);
  for (int i = 0; i < 200000; ++i) {
    char k[32];
    int n = snprintf(k, sizeof k, "aten::op.%d", i);
    many[i] = tpu_hash64(k, (size_t)n, 0);
  }
  CHECK(distinct(many, 200000), "200000 short keys hash apart");
  free(many);
  /* streaming in pieces is deterministic */
  uint64_t a = tpu_hash64_end(tpu_hash64_step(tpu_hash64_step(tpu_hash64_begin(5), "abcdefgh", 8), "ij", 2), 10);
  uint64_t b = tpu_hash64_end(tpu_hash64_step(tpu_hash64_begin(5), "abcdefghij", 10), 10);
  CHECK(a == b, "pieces of 8 bytes stream like the whole");
}

/* ---- a graph using every builder and the add_op-only ops */
static void build_graph(tpu_ir_graph_t* g) {
  tpu_ir_graph_init(g);
  const int F = TPU_DTYPE_F32;
  int x = tpu_ir_param(g, F, 2, (int64_t[]){4, 8});
  int y = tpu_ir_param(g, F, 2, (int64_t[]){8, 3});
  int idx = tpu_ir_param(g, TPU_DTYPE_I64, 1, (int64_t[]){5});
  int idx2 = tpu_ir_param(g, TPU_DTYPE_I64, 2, (int64_t[]){4, 8});
  int s = tpu_ir_scalar(g, F);
  int seed = tpu_ir_scalar(g, TPU_DTYPE_I64), off = tpu_ir_scalar(g, TPU_DTYPE_I64);
  int c = tpu_ir_constant(g, F, 0.25), ci = tpu_ir_constant(g, TPU_DTYPE_I64, 9007199254740993.0);
  int io = tpu_ir_iota(g, F, 2, (int64_t[]){4, 8}, 1);
  int sb = tpu_ir_broadcast(g, s, 2, (int64_t[]){4, 8}, NULL);
  int e = tpu_ir_unary(g, TPU_IR_EXP, x);
  int a = tpu_ir_binary(g, TPU_IR_ADD, e, sb);
  int cmp = tpu_ir_compare(g, TPU_IR_CMP_LT, a, io);
  int sel = tpu_ir_select(g, cmp, a, io);
  int cl = tpu_ir_clamp(g, io, sel, tpu_ir_broadcast(g, c, 2, (int64_t[]){4, 8}, NULL));
  int cv = tpu_ir_convert(g, cl, TPU_DTYPE_BF16);
  int rs = tpu_ir_reshape(g, x, 3, (int64_t[]){2, 2, 8});
  int tr = tpu_ir_transpose(g, rs, (int64_t[]){2, 0, 1});
  int sl = tpu_ir_slice(g, x, (int64_t[]){1, 0}, (int64_t[]){4, 8}, (int64_t[]){2, 3});
  int rv = tpu_ir_reverse(g, x, (int64_t[]){1, 0});
  int cc = tpu_ir_concat(g, 2, (int[]){x, rv}, 0);
  int pd = tpu_ir_pad(g, x, c, (int64_t[]){1, -2}, (int64_t[]){0, 3});
  g->precision = TPU_IR_PRECISION_HIGH;
  int dt = tpu_ir_dot(g, x, y, 0, F);
  g->precision = 0;
  int rd = tpu_ir_reduce(g, TPU_IR_MONOID_MAX, x, (int64_t[]){0, 1});
  int ar = tpu_ir_argreduce(g, 1, x, 1);
  int cu = tpu_ir_cumulative(g, TPU_IR_MONOID_SUM, x, 1);
  int ga = tpu_ir_gather(g, x, idx2, 1);
  int is = tpu_ir_index_select(g, x, idx, 1);
  int sc = tpu_ir_scatter(g, x, idx2, e, 1, 1);
  int ip = tpu_ir_index_put(g, x, tpu_ir_slice(g, x, (int64_t[]){0, 0}, (int64_t[]){1, 8}, (int64_t[]){1, 1}), 1,
                            (int[]){tpu_ir_slice(g, idx, (int64_t[]){0}, (int64_t[]){1}, (int64_t[]){1})},
                            (int64_t[]){0}, 1);
  int rn = tpu_ir_rng(g, F, 2, (int64_t[]){3, 3}, seed, off, 1);
  int so = tpu_ir_sort(g, x, 1, 1, 0), as = tpu_ir_sort(g, x, 0, 0, 1);
  /* convolution and a custom call, built as the lowerings do (tpu_ir_add_op) */
  int cx = tpu_ir_reshape(g, x, 4, (int64_t[]){1, 2, 4, 4});
  int cw = tpu_ir_reshape(g, tpu_ir_slice(g, x, (int64_t[]){0, 0}, (int64_t[]){2, 8}, (int64_t[]){1, 1}), 4,
                          (int64_t[]){2, 2, 2, 2});
  tpu_ir_op_t p = {0};
  p.opcode = TPU_IR_CONV; p.type.dtype = F; p.type.rank = 4;
  p.type.dims[0] = 1; p.type.dims[1] = 2; p.type.dims[2] = 2; p.type.dims[3] = 2;
  p.i0 = 1; p.i1 = 2; p.prec = TPU_IR_PRECISION_DEFAULT;
  for (int d = 0; d < 2; ++d) { p.a[0][d] = 2; p.a[1][d] = 0; p.a[2][d] = 1; }
  int cn = tpu_ir_add_op(g, &p, 2, (int[]){cx, cw});
  tpu_ir_op_t q = {0};
  q.opcode = TPU_IR_CUSTOM; q.type.dtype = F; q.type.rank = 2; q.type.dims[0] = 4; q.type.dims[1] = 8;
  q.i0 = TPU_IR_CUSTOM_LOGCUMSUMEXP; q.i1 = 1;
  int cs = tpu_ir_add_op(g, &q, 1, &x);
  int outs[] = {cv, tr, sl, cc, pd, dt, rd, ar, cu, ga, is, sc, ip, rn, so, as, cn, cs, ci};
  /* graphs hold TPU_IR_MAX_OUTPUTS (16) or more outputs; ops beyond that stay in the graph, unused */
  const int cap = (int)(sizeof g->outputs / sizeof g->outputs[0]);
  for (int i = TPU_ARRAY_LEN(outs) - 1; i >= 0 && g->n_outputs < cap; --i) tpu_ir_output(g, outs[i]);
}

static void test_serialize(void) {
  tpu_ir_graph_t g, h;
  build_graph(&g);
  CHECK(g.status == TPU_OK, "test graph builds: %s", tpu_status_message(g.status));
  OK(tpu_ir_verify(&g));
  uint8_t* buf = NULL;
  size_t len = 0;
  OK(tpu_ir_graph_serialize(&g, &buf, &len));
  OK(tpu_ir_graph_deserialize(buf, len, &h));
  CHECK(tpu_ir_equal(&g, &h) && g.n_params == h.n_params && g.n_scalars == h.n_scalars && g.precision == h.precision,
        "round trip gives an equal graph");
  /* and compiles */
  tpu_host_exe_t* exe = NULL;
  OK(tpu_host_compile(&h, &exe));
  tpu_host_exe_free(exe);
  tpu_ir_graph_free(&h);

  /* fuzz: random byte changes and truncations are rejected or give a graph that verifies */
  int accepted = 0, rejected = 0;
  uint8_t* m = malloc(len);
  for (int it = 0; it < 6000; ++it) {
    memcpy(m, buf, len);
    size_t n = len;
    int kind = (int)(rnd() % 4);
    if (kind == 0) n = (size_t)(rnd() % len);
    else if (kind == 1) m[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
    else if (kind == 2) for (int k = 0; k < 4; ++k) m[rnd() % len] = (uint8_t)rnd();
    else { int32_t v = (int32_t)(rnd() % 64) - 8; memcpy(m + (rnd() % (len - 4)) / 4 * 4, &v, 4); }
    tpu_status_t st = tpu_ir_graph_deserialize(m, n, &h);
    if (st == TPU_OK) {
      accepted++;
      tpu_status_t v = tpu_ir_verify(&h);
      CHECK(v == TPU_OK, "an accepted graph verifies");
      tpu_status_free(v);
      tpu_host_exe_t* e2 = NULL;
      tpu_status_t cs = tpu_host_compile(&h, &e2);
      tpu_status_free(cs);
      tpu_host_exe_free(e2);
    } else {
      rejected++;
    }
    tpu_status_free(st);
    tpu_ir_graph_free(&h);
  }
  printf("  fuzzed graphs: %d rejected, %d accepted (valid graphs)\n", rejected, accepted);
  CHECK(rejected > 3000, "most corruptions are rejected (%d)", rejected);
  free(m);

  /* crafted: an operand that refers forward, a bad opcode, absurd counts, an invalid permutation */
  tpu_ir_graph_t s; tpu_ir_graph_init(&s);
  int x = tpu_ir_param(&s, TPU_DTYPE_F32, 2, (int64_t[]){2, 3});
  tpu_ir_output(&s, tpu_ir_transpose(&s, x, (int64_t[]){1, 0}));
  uint8_t* sb = NULL;
  size_t sl = 0;
  OK(tpu_ir_graph_serialize(&s, &sb, &sl));
  /* the transpose's operand is the last 4 bytes; its permutation the 16 before them */
  uint8_t* c = malloc(sl);
  int32_t fwd = 1;
  memcpy(c, sb, sl); memcpy(c + sl - 4, &fwd, 4);
  tpu_status_t st = tpu_ir_graph_deserialize(c, sl, &h);
  CHECK(st && strstr(tpu_status_message(st), "out of order"), "forward operand: %s", tpu_status_message(st));
  tpu_status_free(st); tpu_ir_graph_free(&h);
  int64_t perm[2] = {0, 0};
  memcpy(c, sb, sl); memcpy(c + sl - 4 - 16, perm, 16);
  st = tpu_ir_graph_deserialize(c, sl, &h);
  CHECK(st != TPU_OK, "permutation [0, 0] rejected");
  tpu_status_free(st); tpu_ir_graph_free(&h);
  int32_t big = 1 << 30;
  memcpy(c, sb, sl); memcpy(c + 8, &big, 4); /* n_ops */
  st = tpu_ir_graph_deserialize(c, sl, &h);
  CHECK(st != TPU_OK, "2^30 ops rejected without allocating");
  tpu_status_free(st); tpu_ir_graph_free(&h);
  int32_t opc = TPU_IR_OPCODE_COUNT;
  memcpy(c, sb, sl); memcpy(c + 32, &opc, 4); /* first op's opcode (after 8 + 6*4 bytes of header) */
  st = tpu_ir_graph_deserialize(c, sl, &h);
  CHECK(st != TPU_OK, "opcode out of range rejected");
  tpu_status_free(st); tpu_ir_graph_free(&h);
  st = tpu_ir_graph_deserialize(NULL, 0, &h);
  CHECK(st != TPU_OK, "no data");
  tpu_status_free(st); tpu_ir_graph_free(&h);
  free(c); free(sb); tpu_ir_graph_free(&s);
  free(buf);
  tpu_ir_graph_free(&g);
}

/* ---- the disk store */
static char g_dir[256];
static int count_files(int64_t* out_bytes) {
  DIR* d = opendir(g_dir);
  int n = 0;
  int64_t bytes = 0;
  for (struct dirent* de; d && (de = readdir(d));) {
    size_t l = strlen(de->d_name);
    if (l > 4 && !strcmp(de->d_name + l - 4, ".tpc")) {
      n++;
      char p[600]; struct stat st;
      snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
      if (stat(p, &st) == 0) bytes += st.st_size;
    }
  }
  if (d) closedir(d);
  if (out_bytes) *out_bytes = bytes;
  return n;
}
/* path of the only .tpc file whose name is not in `skip` */
static int find_file(char* out, size_t cap) {
  DIR* d = opendir(g_dir);
  int found = 0;
  for (struct dirent* de; d && (de = readdir(d));) {
    size_t l = strlen(de->d_name);
    if (l > 4 && !strcmp(de->d_name + l - 4, ".tpc")) { snprintf(out, cap, "%s/%s", g_dir, de->d_name); found++; }
  }
  if (d) closedir(d);
  return found;
}
static size_t read_file(const char* path, uint8_t* buf, size_t cap) {
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}
static void write_file(const char* path, const uint8_t* buf, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f) return;
  fwrite(buf, 1, n, f);
  fclose(f);
}

static void test_disk(void) {
  OK(tpu_disk_cache_init());
  CHECK(tpu_disk_cache_enabled(), "disk level on in %s", g_dir);
  CHECK(!strcmp(tpu_cache_dir(), g_dir), "tpu_cache_dir: %s", tpu_cache_dir());
  OK(tpu_disk_cache_clear());
  tpu_cache_stats_t s0, s1;
  tpu_cache_stats_get(&s0);
  uint8_t payload[3000];
  for (size_t i = 0; i < sizeof payload; ++i) payload[i] = (uint8_t)rnd();
  tpu_disk_cache_put("t", "key-a", 5, payload, sizeof payload);
  uint8_t* got = NULL;
  size_t n = 0;
  CHECK(tpu_disk_cache_get("t", "key-a", 5, &got, &n) && n == sizeof payload && !memcmp(got, payload, n), "put/get");
  free(got);
  CHECK(!tpu_disk_cache_get("t", "key-b", 5, &got, &n) && !got, "other key misses");
  CHECK(!tpu_disk_cache_get("u", "key-a", 5, &got, &n), "other namespace misses");
  tpu_cache_stats_get(&s1);
  CHECK(s1.disk_hits == s0.disk_hits + 1 && s1.disk_misses == s0.disk_misses + 2 && s1.disk_writes == s0.disk_writes + 1,
        "counters: hits %llu misses %llu writes %llu", (unsigned long long)(s1.disk_hits - s0.disk_hits),
        (unsigned long long)(s1.disk_misses - s0.disk_misses), (unsigned long long)(s1.disk_writes - s0.disk_writes));

  char path[600];
  CHECK(find_file(path, sizeof path) == 1, "one file");
  uint8_t orig[8192], bad[8192];
  size_t fl = read_file(path, orig, sizeof orig);
  CHECK(fl == sizeof(tpu_disk_file_header_t) + 1 + 5 + sizeof payload, "file size %zu", fl);
  /* corrupt one payload byte, truncate, another format version, another build: each rejected + removed */
  const char* what[] = {"corrupt byte", "truncated", "truncated header", "format version", "build", "magic"};
  for (int k = 0; k < 6; ++k) {
    memcpy(bad, orig, fl);
    size_t bl = fl;
    tpu_disk_file_header_t* h = (tpu_disk_file_header_t*)bad;
    if (k == 0) bad[fl - 100] ^= 0x20;
    if (k == 1) bl = fl - 1000;
    if (k == 2) bl = 10;
    if (k == 3) h->format_version += 1;
    if (k == 4) h->build ^= 1;
    if (k == 5) h->magic[0] = 'X';
    write_file(path, bad, bl);
    tpu_cache_stats_get(&s0);
    got = NULL;
    int hit = tpu_disk_cache_get("t", "key-a", 5, &got, &n);
    tpu_cache_stats_get(&s1);
    struct stat st;
    CHECK(!hit && !got && s1.disk_rejected == s0.disk_rejected + 1 && stat(path, &st) != 0,
          "%s: rejected, counted and removed", what[k]);
    free(got);
  }
  /* rewrite -> valid again */
  tpu_disk_cache_put("t", "key-a", 5, payload, sizeof payload);
  CHECK(tpu_disk_cache_get("t", "key-a", 5, &got, &n) && n == sizeof payload, "rewritten file is used");
  free(got);

  /* two processes (four, here) writing the same and different keys at once */
  OK(tpu_disk_cache_clear());
  pid_t kids[4];
  for (int c = 0; c < 4; ++c) {
    kids[c] = fork();
    if (kids[c] == 0) {
      for (int i = 0; i < 40; ++i) {
        char k[32];
        int kl = snprintf(k, sizeof k, "shared-%d", i);
        uint8_t p[2000];
        for (int j = 0; j < 2000; ++j) p[j] = (uint8_t)(i * 7 + j);
        tpu_disk_cache_put("t", k, (size_t)kl, p, sizeof p);
        kl = snprintf(k, sizeof k, "own-%d-%d", c, i);
        tpu_disk_cache_put("t", k, (size_t)kl, p, (size_t)(1000 + i));
      }
      _exit(0);
    }
  }
  int all_ok = 1;
  for (int c = 0; c < 4; ++c) { int ws = 0; waitpid(kids[c], &ws, 0); all_ok &= WIFEXITED(ws) && WEXITSTATUS(ws) == 0; }
  CHECK(all_ok, "concurrent writers exit cleanly");
  int valid = 0;
  for (int i = 0; i < 40; ++i) {
    char k[32];
    int kl = snprintf(k, sizeof k, "shared-%d", i);
    got = NULL;
    if (tpu_disk_cache_get("t", k, (size_t)kl, &got, &n) && n == 2000) {
      int same = 1;
      for (int j = 0; j < 2000; ++j) same &= got[j] == (uint8_t)(i * 7 + j);
      valid += same;
    }
    free(got);
    for (int c = 0; c < 4; ++c) {
      kl = snprintf(k, sizeof k, "own-%d-%d", c, i);
      got = NULL;
      valid += tpu_disk_cache_get("t", k, (size_t)kl, &got, &n) && n == (size_t)(1000 + i);
      free(got);
    }
  }
  CHECK(valid == 200, "every concurrently written file is whole and valid (%d of 200)", valid);

  /* size cap (TORCH_TPU_CACHE_MAX_BYTES=256K, set in main): the oldest files go */
  OK(tpu_disk_cache_clear());
  tpu_cache_stats_get(&s0);
  uint8_t big[8000];
  memset(big, 7, sizeof big);
  for (int i = 0; i < 60; ++i) {
    char k[32];
    int kl = snprintf(k, sizeof k, "cap-%d", i);
    tpu_disk_cache_put("t", k, (size_t)kl, big, sizeof big);
  }
  tpu_cache_stats_get(&s1);
  int64_t bytes = 0;
  int files = count_files(&bytes);
  CHECK(s1.disk_evictions > s0.disk_evictions && bytes <= 256 * 1024, "size cap: %d files, %lld bytes, %llu evicted",
        files, (long long)bytes, (unsigned long long)(s1.disk_evictions - s0.disk_evictions));
  got = NULL;
  CHECK(tpu_disk_cache_get("t", "cap-59", 6, &got, &n), "the newest file survives eviction");
  free(got);
  got = NULL;
  CHECK(!tpu_disk_cache_get("t", "cap-1", 5, &got, &n), "an old file was evicted");
  free(got);
  OK(tpu_disk_cache_clear());
  CHECK(count_files(NULL) == 0, "clear removes every file");
}

/* ---- the op path: a disk hit compiles nothing and gives the same result; a crafted payload
 * (valid checksum, bad binding) is rejected and recompiled */
static void run_add(void* da, void* db, void* dout, double alpha) {
  tpu_tensor_t ta = tpu_tensor_contiguous(da, 0, TPU_DTYPE_F32, 2, (int64_t[]){3, 1});
  tpu_tensor_t tb = tpu_tensor_contiguous(db, 0, TPU_DTYPE_F32, 1, (int64_t[]){5});
  tpu_tensor_t to = tpu_tensor_contiguous(dout, 0, TPU_DTYPE_F32, 2, (int64_t[]){3, 5});
  tpu_arg_t args[] = {tpu_arg_tensor(&ta), tpu_arg_tensor(&tb), tpu_arg_f64(alpha), tpu_arg_tensor(&to)};
  OK(tpu_op_run(0, "aten::add.out", args, 4, &to, 1));
  OK(tpu_rt_synchronize(0));
}
static int check_add(const float* a, const float* b, void* dout, double alpha) {
  float out[15];
  tpu_status_t s = tpu_rt_memcpy_d2h(0, out, dout, sizeof out);
  tpu_status_free(s);
  int ok = 1;
  for (int i = 0; i < 3; ++i) for (int j = 0; j < 5; ++j) ok &= out[i * 5 + j] == a[i] + (float)(b[j] * alpha);
  return ok;
}

static void test_op_path(void) {
  OK(tpu_disk_cache_clear());
  float a[3] = {1.5f, -2.0f, 0.25f}, b[5] = {0.5f, 1.0f, -3.0f, 2.0f, 7.0f};
  void *da = NULL, *db = NULL, *dout = NULL;
  OK(tpu_rt_malloc(0, sizeof a, &da)); OK(tpu_rt_malloc(0, sizeof b, &db)); OK(tpu_rt_malloc(0, 15 * 4, &dout));
  OK(tpu_rt_memcpy_h2d(0, da, a, sizeof a)); OK(tpu_rt_memcpy_h2d(0, db, b, sizeof b));
  tpu_metrics_t m0, m1;
  tpu_cache_stats_t s0, s1;
  tpu_metrics_get(&m0); tpu_cache_stats_get(&s0);
  run_add(da, db, dout, 2.0);
  tpu_metrics_get(&m1); tpu_cache_stats_get(&s1);
  CHECK(m1.compiles == m0.compiles + 1 && s1.disk_writes == s0.disk_writes + 1, "cold: one compile, one file");
  CHECK(check_add(a, b, dout, 2.0), "cold result");
  /* a fresh memory level (as in a new process): the disk hit compiles nothing */
  tpu_exec_cache_clear();
  tpu_metrics_get(&m0); tpu_cache_stats_get(&s0);
  run_add(da, db, dout, -0.5);
  tpu_metrics_get(&m1); tpu_cache_stats_get(&s1);
  CHECK(m1.compiles == m0.compiles && s1.disk_hits == s0.disk_hits + 1, "warm: a disk hit, no compile");
  CHECK(check_add(a, b, dout, -0.5), "warm result");

  /* crafted payloads with a valid checksum: fuzz the payload; every run must succeed */
  char path[600];
  CHECK(find_file(path, sizeof path) == 1, "one op file");
  static uint8_t orig[1 << 16], m[1 << 16];
  size_t fl = read_file(path, orig, sizeof orig);
  const tpu_disk_file_header_t* h = (const tpu_disk_file_header_t*)orig;
  size_t hdr = sizeof *h + h->ns_len + h->key_len;
  CHECK(fl > hdr && fl == hdr + h->payload_len, "op file layout");
  int rejected = 0, used = 0;
  for (int it = 0; it < 400 && fl > hdr; ++it) {
    memcpy(m, orig, fl);
    for (int k = 0; k < 1 + (int)(rnd() % 3); ++k) m[hdr + rnd() % (fl - hdr)] ^= (uint8_t)(1u << (rnd() % 8));
    tpu_disk_file_header_t* mh = (tpu_disk_file_header_t*)m;
    mh->checksum = tpu_disk_cache_checksum((const char*)m + sizeof *mh, mh->ns_len, m + sizeof *mh + mh->ns_len,
                                           mh->key_len, m + hdr, mh->payload_len);
    write_file(path, m, fl);
    tpu_exec_cache_clear();
    tpu_cache_stats_get(&s0);
    run_add(da, db, dout, 1.25); /* not 1: add's key tells alpha == 1 apart (another executable, another file) */
    tpu_cache_stats_get(&s1);
    rejected += s1.disk_rejected > s0.disk_rejected;
    used += s1.disk_hits > s0.disk_hits;
  }
  printf("  fuzzed op payloads: %d rejected, %d loaded\n", rejected, used);
  CHECK(rejected > 0, "crafted payloads are rejected");
  /* accidental corruption (checksum not updated) is always rejected, and the result is right */
  memcpy(m, orig, fl);
  m[fl - 7] ^= 1;
  write_file(path, m, fl);
  tpu_exec_cache_clear();
  tpu_cache_stats_get(&s0);
  run_add(da, db, dout, 3.0);
  tpu_cache_stats_get(&s1);
  CHECK(s1.disk_rejected == s0.disk_rejected + 1 && check_add(a, b, dout, 3.0), "corrupt op file rejected, recompiled");
  tpu_rt_free(0, da); tpu_rt_free(0, db); tpu_rt_free(0, dout);
}

/* ---- shape families (cache/shape_family.h): new sizes of an op made from its size templates give
 * the bits a full compile gives; they go to the disk level at their second call. mean over dim 0 of [n, 5]
 * (its scale 1/n is a size field) and add of [n, 1] + [5], n = 2..40. */
static void run_mean_add(int64_t n, int families, float* out_mean, float* out_add) {
  tpu_shape_family_set_enabled(families);
  float* x = malloc((size_t)n * 5 * sizeof(float));
  for (int64_t i = 0; i < n * 5; ++i) x[i] = (float)((double)(int64_t)(rnd() % 2001 - 1000) / 7.0);
  void *dx = NULL, *dm = NULL, *da = NULL;
  OK(tpu_rt_malloc(0, (size_t)n * 5 * 4, &dx)); OK(tpu_rt_malloc(0, 5 * 4, &dm)); OK(tpu_rt_malloc(0, (size_t)n * 5 * 4, &da));
  OK(tpu_rt_memcpy_h2d(0, dx, x, (size_t)n * 5 * 4));
  tpu_tensor_t tx = tpu_tensor_contiguous(dx, 0, TPU_DTYPE_F32, 2, (int64_t[]){n, 5});
  tpu_tensor_t tm = tpu_tensor_contiguous(dm, 0, TPU_DTYPE_F32, 1, (int64_t[]){5});
  int64_t dim0 = 0;
  tpu_arg_t margs[] = {tpu_arg_tensor(&tx), tpu_arg_int_list(&dim0, 1), tpu_arg_bool(false), tpu_arg_none(), tpu_arg_tensor(&tm)};
  OK(tpu_op_run(0, "aten::mean.out", margs, 5, &tm, 1));
  tpu_tensor_t tc = tpu_tensor_contiguous(dx, 0, TPU_DTYPE_F32, 2, (int64_t[]){n, 1});
  tpu_tensor_t ta = tpu_tensor_contiguous(da, 0, TPU_DTYPE_F32, 2, (int64_t[]){n, 5});
  tpu_arg_t aargs[] = {tpu_arg_tensor(&tc), tpu_arg_tensor(&tm), tpu_arg_f64(0.75), tpu_arg_tensor(&ta)};
  OK(tpu_op_run(0, "aten::add.out", aargs, 4, &ta, 1));
  OK(tpu_rt_synchronize(0));
  tpu_status_free(tpu_rt_memcpy_d2h(0, out_mean, dm, 5 * 4));
  tpu_status_free(tpu_rt_memcpy_d2h(0, out_add, da, (size_t)n * 5 * 4));
  tpu_rt_free(0, dx); tpu_rt_free(0, dm); tpu_rt_free(0, da);
  free(x);
}
static void test_shape_families(void) {
  OK(tpu_cache_clear());
  int was = tpu_shape_family_set_enabled(1);
  tpu_shape_family_stats_t f0, f1;
  tpu_cache_stats_t s0, s1;
  tpu_metrics_t m0, m1;
  tpu_shape_family_stats(&f0); tpu_cache_stats_get(&s0); tpu_metrics_get(&m0);
  int same = 1, nn = 0;
  static float m_on[5], m_off[5], a_on[43 * 5], a_off[43 * 5];
  for (int64_t n = 2; n <= 40; ++n, ++nn) {
    uint64_t seed = g_rng;
    run_mean_add(n, 1, m_on, a_on);
    g_rng = seed;
    tpu_exec_cache_clear(); /* the full compile of this size (and the families stay) */
    OK(tpu_disk_cache_clear()); /* not the file the template's executable wrote */
    tpu_cache_stats_t sx; tpu_cache_stats_get(&sx);
    run_mean_add(n, 0, m_off, a_off);
    same &= !memcmp(m_on, m_off, sizeof m_on) && !memcmp(a_on, a_off, (size_t)n * 5 * 4);
    tpu_exec_cache_clear();
  }
  tpu_shape_family_set_enabled(1);
  tpu_shape_family_stats(&f1); tpu_cache_stats_get(&s1); tpu_metrics_get(&m1);
  CHECK(same, "every size: the same bits with and without the templates");
  uint64_t inst = f1.instantiated - f0.instantiated;
  printf("  shape families: %llu of %d sizes x 2 ops instantiated, %llu samples\n", (unsigned long long)inst, nn,
         (unsigned long long)(f1.samples - f0.samples));
  CHECK(inst >= 2 * (uint64_t)(nn - 4), "all but the first sizes are instantiated (%llu)", (unsigned long long)inst);
  /* each size made twice (on, off; off compiles in full: the disk files are removed in between); every
   * executable written but the instantiated ones, each called once here (written at a second call, below) */
  CHECK(m1.compiles - m0.compiles == 4 * (uint64_t)nn, "every size compiled");
  CHECK(s1.disk_writes - s0.disk_writes == 4 * (uint64_t)nn - inst, "every executable written but the made sizes");
  /* a size 1 (may lower differently) is never instantiated; the result is still right */
  tpu_shape_family_stats(&f0);
  run_mean_add(1, 1, m_on, a_on);
  tpu_shape_family_stats(&f1);
  CHECK(f1.instantiated == f0.instantiated, "size 1: compiled in full");
  /* ... and does not reset what the family learned: the next new sizes are still made from the templates */
  for (int64_t n = 41; n <= 43; ++n) run_mean_add(n, 1, m_on, a_on);
  tpu_shape_family_stats(&f0);
  CHECK(f0.instantiated - f1.instantiated == 6, "after a size 1, new sizes instantiated (%llu of 6)",
        (unsigned long long)(f0.instantiated - f1.instantiated));
  /* those were made from the templates: kept in memory only, and written at their second call (a size a
   * program keeps using) */
  tpu_cache_stats_get(&s0);
  run_mean_add(42, 1, m_on, a_on);
  tpu_cache_stats_get(&s1);
  CHECK(s1.disk_writes - s0.disk_writes == 2, "a made size's second call writes it (%llu writes)",
        (unsigned long long)(s1.disk_writes - s0.disk_writes));
  run_mean_add(42, 1, m_on, a_on);
  tpu_cache_stats_get(&s0);
  CHECK(s0.disk_writes == s1.disk_writes, "written once");
  /* a reduce over more than 4 MiB (summed in slabs, fused producer or not: tpu_host_reduce_plan) is instantiated
   * like any other size, with the bits of a full compile */
  enum { NBIG = 300000 }; /* 6 MB of f32 */
  float* big_on = malloc((size_t)NBIG * 5 * sizeof(float));
  float* big_off = malloc((size_t)NBIG * 5 * sizeof(float));
  uint64_t seed = g_rng;
  run_mean_add(NBIG, 1, m_on, big_on);
  tpu_shape_family_stats(&f1);
  g_rng = seed;
  tpu_exec_cache_clear();
  OK(tpu_disk_cache_clear()); /* a full compile, not the template's executable from disk */
  run_mean_add(NBIG, 0, m_off, big_off);
  CHECK(f1.instantiated - f0.instantiated == 2, "a 6 MB mean and its add instantiated (%llu)",
        (unsigned long long)(f1.instantiated - f0.instantiated));
  CHECK(!memcmp(m_on, m_off, sizeof m_on) && !memcmp(big_on, big_off, (size_t)NBIG * 5 * 4),
        "the 6 MB mean: the same bits with and without the templates");
  free(big_on); free(big_off);
  tpu_shape_family_set_enabled(was);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/tpu_test_cache_XXXXXX");
  if (!mkdtemp(g_dir)) { printf("mkdtemp failed\n"); return 1; }
  setenv("TORCH_TPU_CACHE_DIR", g_dir, 1);
  setenv("TORCH_TPU_CACHE_MAX_BYTES", "256K", 1);
  test_hash();
  test_serialize();
  test_disk(); /* forks: before the runtime starts its threads */
  OK(tpu_rt_init());
  test_op_path();
  test_shape_families();
  tpu_disk_cache_clear();
  rmdir(g_dir);
  printf("test_cache: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
