/* disk_cache.c — the persistent blob store (see disk_cache.h) and the public tpu_cache_* API. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cache/disk_cache.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/exec_cache.h"
#include "cache/hash.h"
#include "cache/shape_family.h"
#include "runtime/runtime.h"

#define DEFAULT_MAX_BYTES (1ull << 30)
#define SUFFIX ".tpc"

typedef tpu_disk_file_header_t file_header_t;
static const char kMagic[8] = {'T', 'P', 'U', 'C', 'A', 'C', 'H', 'E'};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static tpu_status_t g_init_status;
static char g_dir[4096];
static uint64_t g_max_bytes = DEFAULT_MAX_BYTES;
static uint64_t g_build;
static atomic_int g_enabled;
static atomic_int g_warned;          /* a warning was reported (or printed): never another */
static char g_warning[4600];          /* pending warning text ("" if none) */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* g_warning, g_bytes, eviction */
static int64_t g_bytes = -1;         /* estimate of the directory's size; -1 = not scanned yet */
static atomic_uint_fast64_t g_hits, g_misses, g_writes, g_rejected, g_evictions, g_errors, g_load_ns, g_store_ns;
static atomic_uint g_tmp_counter;

static double now_s(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void add_ns(atomic_uint_fast64_t* c, double s) {
  atomic_fetch_add_explicit(c, s > 0 ? (uint64_t)(s * 1e9 + 0.5) : 0, memory_order_relaxed);
}
static void count(atomic_uint_fast64_t* c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

/* Turns the disk level off with one warning (the first failure's reason). Called at init (the
 * warning waits for tpu_cache_take_warning, which Python turns into warnings.warn) or later, from
 * a failed write (then printed to stderr: no Python frame to attach it to). */
static void disable(const char* why, int at_init) {
  pthread_mutex_lock(&g_mu);
  int was = atomic_exchange(&g_enabled, 0);
  int print = 0;
  if ((was || at_init) && !atomic_load(&g_warned) && !g_warning[0]) {
    snprintf(g_warning, sizeof g_warning,
             "torch_tpu: the compilation cache directory '%s' is unusable (%s); caching compiled "
             "executables in memory only (set TORCH_TPU_CACHE_DIR to a writable directory, or 0 to "
             "turn the disk cache off)", g_dir, why);
    if (!at_init) { print = 1; atomic_store(&g_warned, 1); }
  }
  pthread_mutex_unlock(&g_mu);
  if (print) fprintf(stderr, "%s\n", g_warning);
}

/* ---- build identity: the GNU build id of the binary holding this code (changes with any code
 * change), else that file's size and mtime; plus driver, CPU features and format version. */
typedef struct { uintptr_t addr; uint64_t h; int found; char path[4096]; } id_ctx_t;
static int phdr_cb(struct dl_phdr_info* info, size_t size, void* arg) {
  id_ctx_t* c = arg;
  int mine = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && c->addr >= lo && c->addr < lo + ph->p_memsz) mine = 1;
  }
  if (!mine) return 0;
  snprintf(c->path, sizeof c->path, "%s", info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe");
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const unsigned char* p = (const unsigned char*)(info->dlpi_addr + ph->p_vaddr);
    size_t off = 0, n = ph->p_memsz;
    while (off + sizeof(ElfW(Nhdr)) <= n) {
      const ElfW(Nhdr)* nh = (const ElfW(Nhdr)*)(p + off);
      size_t name_off = off + sizeof(ElfW(Nhdr)), desc_off = name_off + ((nh->n_namesz + 3u) & ~3u);
      size_t next = desc_off + ((nh->n_descsz + 3u) & ~3u);
      if (next > n) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(p + name_off, "GNU", 4)) {
        c->h = tpu_hash64(p + desc_off, nh->n_descsz, c->h);
        c->found = 1;
        return 1;
      }
      off = next;
    }
  }
  return 1;
}
static uint64_t build_identity(void) {
  id_ctx_t c = {.addr = (uintptr_t)&build_identity, .h = 0x7470757274ull};
  dl_iterate_phdr(phdr_cb, &c);
  if (!c.found) {
    struct stat st;
    if (c.path[0] && stat(c.path, &st) == 0) {
      int64_t v[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
      c.h = tpu_hash64(v, sizeof v, c.h);
    } else {
      c.h ^= (uint64_t)time(NULL); /* unknown build: files from other processes never match */
    }
  }
  char tail[512];
  int n = snprintf(tail, sizeof tail, "driver=host;cpu=%s;format=%d;ir=%d;ptr=%zu", tpu_cpu_features_string(),
                   TPU_DISK_CACHE_FORMAT_VERSION, (int)TPU_IR_OPCODE_COUNT, sizeof(void*));
  return tpu_hash64(tail, (size_t)(n > 0 ? n : 0), c.h);
}

/* mkdir -p with mode 0700 for the parts it creates. */
static int mkdirs(const char* path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) { errno = ENAMETOOLONG; return -1; }
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
    buf[i] = c;
  }
  return 0;
}

static void init_once(void) {
  const char* v = getenv("TORCH_TPU_CACHE_MAX_BYTES");
  if (v && *v) {
    tpu_status_t st = tpu_rt_env_parse_bytes("TORCH_TPU_CACHE_MAX_BYTES", v, &g_max_bytes);
    if (st) { g_init_status = st; return; }
  }
  const char* d = getenv("TORCH_TPU_CACHE_DIR");
  int n;
  if (d && *d) {
    if (!strcmp(d, "0")) return; /* disk level off */
    n = snprintf(g_dir, sizeof g_dir, "%s", d);
  } else {
    const char* xdg = getenv("XDG_CACHE_HOME");
    const char* home = getenv("HOME");
    if (xdg && xdg[0] == '/') n = snprintf(g_dir, sizeof g_dir, "%s/torch_tpu", xdg);
    else if (home && *home) n = snprintf(g_dir, sizeof g_dir, "%s/.cache/torch_tpu", home);
    else { snprintf(g_dir, sizeof g_dir, "~/.cache/torch_tpu"); disable("HOME is not set", 1); return; }
  }
  while (n > 1 && g_dir[n - 1] == '/') g_dir[--n] = '\0';
  if (n <= 0 || (size_t)n >= sizeof g_dir - 64) { disable("path too long", 1); return; }
  g_build = build_identity();
  char why[256];
  struct stat st;
  if (mkdirs(g_dir) != 0 || stat(g_dir, &st) != 0) {
    snprintf(why, sizeof why, "cannot create it: %s", strerror(errno));
    disable(why, 1);
    return;
  }
  if (!S_ISDIR(st.st_mode)) { disable("not a directory", 1); return; }
  /* probe: can we create, write and remove a file here? (read-only filesystems, permissions;
   * access() would not see a read-only mount for root) */
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/.probe.%ld.tmp", g_dir, (long)getpid());
  int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, "ok", 2) != 2) {
    snprintf(why, sizeof why, "cannot write to it: %s", strerror(errno));
    if (fd >= 0) { close(fd); unlink(probe); }
    disable(why, 1);
    return;
  }
  close(fd);
  unlink(probe);
  atomic_store(&g_enabled, 1);
}

tpu_status_t tpu_disk_cache_init(void) {
  pthread_once(&g_once, init_once);
  return g_init_status ? tpu_status_make(tpu_status_code(g_init_status), "%s", tpu_status_message(g_init_status))
                       : TPU_OK;
}
int tpu_disk_cache_enabled(void) {
  pthread_once(&g_once, init_once);
  return atomic_load(&g_enabled);
}

/* ---- file names */
static uint64_t key_hash(const char* ns, const void* key, size_t key_len) {
  uint64_t h = tpu_hash64_begin(g_build);
  h = tpu_hash64_step(h, ns, strlen(ns) + 1);
  h = tpu_hash64_step(h, key, key_len);
  return tpu_hash64_end(h, strlen(ns) + 1 + key_len);
}
static void file_path(char* out, size_t cap, const char* ns, const void* key, size_t key_len) {
  snprintf(out, cap, "%s/%016llx" SUFFIX, g_dir, (unsigned long long)key_hash(ns, key, key_len));
}
uint64_t tpu_disk_cache_checksum(const char* ns, size_t ns_len, const void* key, size_t key_len,
                                 const void* payload, size_t len) {
  uint64_t h = tpu_hash64_begin(TPU_HASH_SEED_CHECKSUM);
  h = tpu_hash64_step(h, ns, ns_len);
  h = tpu_hash64_step(h, key, key_len);
  h = tpu_hash64_step(h, payload, len);
  return tpu_hash64_end(h, ns_len + key_len + len);
}

static int read_all(int fd, void* buf, size_t n, off_t at) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char*)buf + got, n - got, at + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}
static int write_all(int fd, const void* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = write(fd, (const char*)buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) { if (r == 0) errno = EIO; return -1; }
    done += (size_t)r;
  }
  return 0;
}

static void reject_file(const char* path) {
  count(&g_rejected);
  unlink(path); /* a rewrite after the recompile replaces it in any case */
}

int tpu_disk_cache_get(const char* ns, const void* key, size_t key_len, uint8_t** out_payload, size_t* out_len) {
  *out_payload = NULL; *out_len = 0;
  if (!tpu_disk_cache_enabled()) return 0;
  double t0 = now_s();
  size_t ns_len = strlen(ns);
  char path[4200];
  file_path(path, sizeof path, ns, key, key_len);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) count(&g_errors);
    count(&g_misses);
    return 0;
  }
  /* verdict: 1 valid, 0 corrupt/truncated/stale (removed), 2 miss that leaves the file alone.
   * One read of the whole file: most of a disk hit's cost is system calls. */
  struct stat st;
  file_header_t h;
  uint8_t* buf = NULL;
  const uint8_t* body = NULL;
  uint64_t body_len = 0;
  int verdict = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    verdict = 2; /* not ours: never used, never removed */
    count(&g_rejected);
  } else if ((uint64_t)st.st_size < sizeof h) {
    verdict = 0; /* truncated */
  } else if ((uint64_t)st.st_size > (1ull << 34) || !(buf = malloc((size_t)st.st_size)) ||
             read_all(fd, buf, (size_t)st.st_size, 0) != 0) {
    verdict = 2;
    count(&g_errors);
  } else if (memcpy(&h, buf, sizeof h), memcmp(h.magic, kMagic, 8) || h.header_bytes != sizeof h) {
    verdict = 0; /* corrupt */
  } else if (h.format_version != TPU_DISK_CACHE_FORMAT_VERSION || h.build != g_build) {
    verdict = 0; /* stale: another format or library build */
  } else if (__builtin_add_overflow((uint64_t)h.ns_len, h.key_len, &body_len) ||
             __builtin_add_overflow(body_len, h.payload_len, &body_len) || body_len + sizeof h != (uint64_t)st.st_size) {
    verdict = 0; /* truncated (or lengths corrupt) */
  } else if (body = buf + sizeof h,
             tpu_disk_cache_checksum((const char*)body, h.ns_len, body + h.ns_len, (size_t)h.key_len,
                                     body + h.ns_len + h.key_len, (size_t)h.payload_len) != h.checksum) {
    verdict = 0; /* corrupt */
  } else if (h.ns_len != ns_len || h.key_len != key_len || memcmp(body, ns, ns_len) ||
             memcmp(body + ns_len, key, key_len)) {
    verdict = 2; /* a whole file for another key with the same name (hash collision): a miss */
  } else {
    verdict = 1;
  }
  /* LRU: mtime = last use, refreshed at most once a minute (a metadata write per hit is not free) */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (verdict == 1 && now.tv_sec - st.st_mtim.tv_sec > 60) futimens(fd, NULL);
  close(fd);
  if (verdict != 1) {
    free(buf);
    if (verdict == 0) reject_file(path);
    count(&g_misses);
    add_ns(&g_load_ns, now_s() - t0);
    return 0;
  }
  size_t plen = (size_t)h.payload_len;
  memmove(buf, buf + sizeof h + ns_len + key_len, plen);
  *out_payload = buf; *out_len = plen;
  count(&g_hits);
  add_ns(&g_load_ns, now_s() - t0);
  return 1;
}

void tpu_disk_cache_reject(const char* ns, const void* key, size_t key_len) {
  if (!tpu_disk_cache_enabled()) return;
  char path[4200];
  file_path(path, sizeof path, ns, key, key_len);
  reject_file(path);
  uint_fast64_t h = atomic_load(&g_hits); /* take back the hit (unless the counters were reset since) */
  while (h && !atomic_compare_exchange_weak(&g_hits, &h, h - 1)) {}
  count(&g_misses);
}
void tpu_disk_cache_add_load_seconds(double s) { add_ns(&g_load_ns, s); }

/* ---- size cap: oldest files (by mtime) first, down to 3/4 of the cap. Caller holds g_mu. */
typedef struct { char name[32]; int64_t size; int64_t mtime_ns; } file_ent_t;
static int by_mtime(const void* a, const void* b) {
  const file_ent_t *x = a, *y = b;
  return (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
}
static int is_cache_name(const char* n) {
  size_t l = strlen(n);
  return l == 16 + strlen(SUFFIX) && !strcmp(n + 16, SUFFIX);
}
static int64_t scan(int evict) {
  DIR* dir = opendir(g_dir);
  if (!dir) return -1;
  file_ent_t* ents = NULL;
  size_t n = 0, cap = 0;
  int64_t total = 0;
  int dfd = dirfd(dir);
  struct timespec now; clock_gettime(CLOCK_REALTIME, &now);
  for (struct dirent* de; (de = readdir(dir));) {
    struct stat st;
    if (de->d_name[0] == '.' && !strncmp(de->d_name, ".tmp.", 5)) {
      /* a temp file older than an hour belongs to a writer that died */
      if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && now.tv_sec - st.st_mtim.tv_sec > 3600)
        unlinkat(dfd, de->d_name, 0);
      continue;
    }
    if (!is_cache_name(de->d_name) || fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    total += st.st_size;
    if (!evict) continue;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 256;
      file_ent_t* p = realloc(ents, nc * sizeof *p);
      if (!p) break;
      ents = p; cap = nc;
    }
    memcpy(ents[n].name, de->d_name, 16 + sizeof SUFFIX); /* is_cache_name: 20 chars + NUL */
    ents[n].size = st.st_size;
    ents[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    n++;
  }
  if (evict && (uint64_t)total > g_max_bytes) {
    qsort(ents, n, sizeof *ents, by_mtime);
    uint64_t target = g_max_bytes - g_max_bytes / 4;
    for (size_t i = 0; i < n && (uint64_t)total > target; ++i) {
      if (unlinkat(dfd, ents[i].name, 0) == 0 || errno == ENOENT) {
        total -= ents[i].size;
        count(&g_evictions);
      }
    }
  }
  free(ents);
  closedir(dir);
  return total;
}

void tpu_disk_cache_put(const char* ns, const void* key, size_t key_len, const void* payload, size_t len) {
  if (!tpu_disk_cache_enabled()) return;
  double t0 = now_s();
  size_t ns_len = strlen(ns);
  file_header_t h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, kMagic, 8);
  h.format_version = TPU_DISK_CACHE_FORMAT_VERSION;
  h.header_bytes = sizeof h;
  h.build = g_build;
  h.ns_len = (uint32_t)ns_len; h.key_len = key_len; h.payload_len = len;
  h.checksum = tpu_disk_cache_checksum(ns, ns_len, key, key_len, payload, len);
  char path[4200], tmp[4300];
  file_path(path, sizeof path, ns, key, key_len);
  snprintf(tmp, sizeof tmp, "%s/.tmp.%ld.%u", g_dir, (long)getpid(), atomic_fetch_add(&g_tmp_counter, 1));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  int err = 0;
  if (fd < 0) err = errno;
  else {
    const size_t total = sizeof h + ns_len + key_len + len; /* one write: one system call */
    uint8_t* out = malloc(total);
    if (!out) err = ENOMEM;
    else {
      memcpy(out, &h, sizeof h);
      memcpy(out + sizeof h, ns, ns_len);
      memcpy(out + sizeof h + ns_len, key, key_len);
      memcpy(out + sizeof h + ns_len + key_len, payload, len);
      if (write_all(fd, out, total)) err = errno ? errno : EIO;
      free(out);
    }
  }
  if (fd >= 0 && close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    count(&g_errors);
    if (err == ENOSPC || err == EDQUOT || err == EFBIG || err == EROFS || err == EACCES || err == EPERM ||
        err == ENOENT || err == ENOTDIR) {
      char why[160];
      snprintf(why, sizeof why, "writing a cache file failed: %s", strerror(err));
      disable(why, 0);
    }
    return;
  }
  count(&g_writes);
  add_ns(&g_store_ns, now_s() - t0);
  pthread_mutex_lock(&g_mu);
  if (g_bytes < 0) g_bytes = scan(0);
  else g_bytes += (int64_t)(sizeof h + ns_len + key_len + len);
  if (g_bytes > 0 && (uint64_t)g_bytes > g_max_bytes) g_bytes = scan(1);
  pthread_mutex_unlock(&g_mu);
}

tpu_status_t tpu_disk_cache_clear(void) {
  if (!tpu_disk_cache_enabled()) return TPU_OK;
  DIR* dir = opendir(g_dir);
  if (!dir) return TPU_ERR(INVALID_ARGUMENT, "cannot read the cache directory '%s': %s", g_dir, strerror(errno));
  int dfd = dirfd(dir);
  for (struct dirent* de; (de = readdir(dir));)
    if (is_cache_name(de->d_name)) unlinkat(dfd, de->d_name, 0);
  closedir(dir);
  pthread_mutex_lock(&g_mu);
  g_bytes = -1;
  pthread_mutex_unlock(&g_mu);
  return TPU_OK;
}

/* ---- public API (tpurt.h) */
tpu_status_t tpu_cache_init(void) { return tpu_disk_cache_init(); }

void tpu_cache_stats_get(tpu_cache_stats_t* out) {
  if (!out) return;
  int en = tpu_disk_cache_enabled();
  int64_t bytes = -1;
  if (en) {
    pthread_mutex_lock(&g_mu);
    if (g_bytes < 0) g_bytes = scan(0);
    bytes = g_bytes;
    pthread_mutex_unlock(&g_mu);
  }
  *out = (tpu_cache_stats_t){
      .disk_enabled = en,
      .memory_entries = tpu_exec_cache_size(),
      .disk_hits = atomic_load(&g_hits), .disk_misses = atomic_load(&g_misses),
      .disk_writes = atomic_load(&g_writes), .disk_rejected = atomic_load(&g_rejected),
      .disk_evictions = atomic_load(&g_evictions), .disk_errors = atomic_load(&g_errors),
      .disk_bytes = bytes > 0 ? (uint64_t)bytes : 0, .disk_max_bytes = g_max_bytes,
      .disk_load_seconds = (double)atomic_load(&g_load_ns) * 1e-9,
      .disk_store_seconds = (double)atomic_load(&g_store_ns) * 1e-9,
  };
}
void tpu_cache_stats_reset(void) {
  atomic_store(&g_hits, 0); atomic_store(&g_misses, 0); atomic_store(&g_writes, 0);
  atomic_store(&g_rejected, 0); atomic_store(&g_evictions, 0); atomic_store(&g_errors, 0);
  atomic_store(&g_load_ns, 0); atomic_store(&g_store_ns, 0);
}
tpu_status_t tpu_cache_clear(void) {
  tpu_exec_cache_clear();
  tpu_shape_family_clear();
  return tpu_disk_cache_clear();
}
const char* tpu_cache_dir(void) {
  pthread_once(&g_once, init_once);
  return atomic_load(&g_enabled) ? g_dir : "";
}
const char* tpu_cache_take_warning(void) {
  pthread_once(&g_once, init_once);
  pthread_mutex_lock(&g_mu);
  const char* w = (g_warning[0] && !atomic_load(&g_warned)) ? g_warning : NULL;
  if (w) atomic_store(&g_warned, 1);
  pthread_mutex_unlock(&g_mu);
  return w;
}
