/* Devices by name, and the tagged memory ledger every backend shares (device.h, plugin/device_ops.h, device_impl.h).
 * The core owns the ledger: a small open-addressing hash map pointer -> (bytes, tag), so backends
 * only allocate and free. "cpu" is linked in; "cuda" is the plug-in libfsc_cuda.so loaded with dlopen.
 * The plug-in is $FSC_CUDA_PLUGIN (a file or a directory) when that is set, and only that file; else it is
 * searched next to the running executable, in its ../lib (an installed program), beside libfsc.so (a
 * program linked against the shared library), then by soname through the dynamic loader (fsc_plugin_places).
 * "count" (backends/count) is linked in too: the planner's device, whose memory is counted but not there.
 * The map has a mutex so a device shared between threads (a rank and its helper) stays consistent. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/device_impl.h"

typedef struct {
    void *p;       /* NULL: empty slot */
    size_t bytes;
    int tag;
} alloc_entry;

struct fsc_alloc_map {
    pthread_mutex_t mu;
    alloc_entry *slots; /* cap slots, cap a power of two */
    size_t cap, count;
};

static const char *tag_names[FSC_TAG_COUNT] = {"params", "grads", "optim", "acts", "comm", "workspace"};

const char *fsc_tag_name(fsc_tag t) { return ((unsigned)t < FSC_TAG_COUNT) ? tag_names[t] : "invalid"; }

static size_t ptr_hash(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* Insert into a table known to have room. */
static void map_put(alloc_entry *slots, size_t cap, alloc_entry e) {
    size_t i = ptr_hash(e.p, cap);
    while (slots[i].p) i = (i + 1) & (cap - 1);
    slots[i] = e;
}

static int map_grow(struct fsc_alloc_map *m) {
    size_t ncap = m->cap ? m->cap * 2 : 64;
    alloc_entry *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].p) map_put(ns, ncap, m->slots[i]);
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

/* Remove p; returns 0 and its entry, or -1 if p is not live. Backward-shift deletion (linear probing). */
static int map_take(struct fsc_alloc_map *m, const void *p, alloc_entry *out) {
    if (!m->cap) return -1;
    size_t mask = m->cap - 1, i = ptr_hash(p, m->cap);
    while (m->slots[i].p && m->slots[i].p != p) i = (i + 1) & mask;
    if (!m->slots[i].p) return -1;
    *out = m->slots[i];
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->slots[j].p; j = (j + 1) & mask) {
        size_t home = ptr_hash(m->slots[j].p, m->cap);
        /* move j into the hole unless its home lies cyclically in (hole, j] */
        int stays = (hole <= j) ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].p = NULL;
    m->count--;
    return 0;
}

/* ---- loading backends ---- */

int fsc_plugin_places(const char *file, char (*out)[PATH_MAX + 64]) {
    int n = 0;
    char dir[PATH_MAX + 1];
    ssize_t len = readlink("/proc/self/exe", dir, PATH_MAX);
    char *slash = len > 0 ? (dir[len] = '\0', strrchr(dir, '/')) : NULL;
    if (slash) { /* beside the program (build/), then ../lib (an installed bin/fsc-train) */
        *slash = '\0';
        snprintf(out[n++], PATH_MAX + 64, "%s/%s", dir, file);
        snprintf(out[n++], PATH_MAX + 64, "%s/../lib/%s", dir, file);
    }
    /* beside the file holding this code: libfsc.so, found by the program's rpath or LD_LIBRARY_PATH, which
     * dlopen of a bare name does not search (for a program linked with libfsc.a it is the program again) */
    Dl_info info;
    char lib[PATH_MAX + 1];
    if (dladdr((void *)fsc_plugin_places, &info) && info.dli_fname && realpath(info.dli_fname, lib) &&
        (slash = strrchr(lib, '/'))) {
        *slash = '\0';
        snprintf(out[n], PATH_MAX + 64, "%s/%s", lib, file);
        if (n == 0 || strcmp(out[n], out[0]) != 0) n++;
    }
    snprintf(out[n++], PATH_MAX + 64, "%s", file); /* the loader's own search */
    return n;
}

int fsc_plugin_candidates(const char *env, const char *file, char (*out)[PATH_MAX + 64]) {
    if (!env || !*env) return fsc_plugin_places(file, out);
    struct stat st;
    if (stat(env, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(out[0], PATH_MAX + 64, "%s/%s", env, file);
    else snprintf(out[0], PATH_MAX + 64, "%s", env);
    return 1;
}

void *fsc_plugin_open(char (*cands)[PATH_MAX + 64], int n, int flags, char *path, size_t cap, char *tried,
                      size_t tcap) {
    size_t used = 0;
    tried[0] = '\0';
    for (int i = 0; i < n; i++) {
        int fits = strlen(cands[i]) < cap;
        snprintf(path, cap, "%s", cands[i]);
        void *h = fits ? dlopen(path, flags) : NULL;
        if (h) return h;
        const char *e = fits ? dlerror() : "the path is too long";
        int k = snprintf(tried + used, tcap - used, "%s%s", used ? "; " : "", e ? e : path);
        if (k > 0) used = (used + (size_t)k < tcap) ? used + (size_t)k : tcap - 1;
    }
    return NULL;
}

int fsc_gpu_present(void) {
    if (access("/dev/nvidia0", F_OK) != 0 && access("/proc/driver/nvidia/version", F_OK) != 0) return 0;
    char cands[FSC_PLUGIN_PLACES][PATH_MAX + 64];
    int nc = fsc_plugin_candidates(getenv("FSC_CUDA_PLUGIN"), "libfsc_cuda.so", cands);
    for (int i = 0; i < nc; i++) /* a file on disk (not loaded here); the loader's bare-name search is not tried */
        if (strchr(cands[i], '/') && access(cands[i], R_OK) == 0) return 1;
    return 0;
}

/* The plug-in the search finds: $FSC_CUDA_PLUGIN alone when it is set (a file, or a directory holding
 * libfsc_cuda.so: a named plug-in that fails is an error, never a silent fall back to another one), else
 * the places fsc_plugin_places lists. On success path holds the file loaded. */
static fsc_status load_cuda(const char *env, char *path, size_t cap, void **out) {
    char tried[1024], cands[FSC_PLUGIN_PLACES][PATH_MAX + 64];
    int nc = fsc_plugin_candidates(env, "libfsc_cuda.so", cands);
    if ((*out = fsc_plugin_open(cands, nc, RTLD_NOW | RTLD_LOCAL, path, cap, tried, sizeof tried))) return FSC_OK;
    if (env)
        return fsc_error(FSC_ERR_INVALID, "FSC_CUDA_PLUGIN: cannot load %s as the cuda plug-in: %s (while "
                         "FSC_CUDA_PLUGIN is set, no other plug-in is tried)", path, tried);
    return fsc_error(FSC_ERR_UNSUPPORTED, "cuda device unavailable: the plug-in libfsc_cuda.so was not found or "
                     "could not be loaded (set FSC_CUDA_PLUGIN to its path; build it with nvcc present). Tried: %s",
                     tried);
}

static fsc_status open_cuda(const fsc_device_opts *opts, const fsc_device_ops **ops, void **ctx, void **handle) {
    char path[PATH_MAX + 32];
    const char *env = getenv("FSC_CUDA_PLUGIN");
    if (env && !*env) env = NULL;
    void *h = NULL;
    FSC_TRY(load_cuda(env, path, sizeof path, &h));
    /* a file named by the user that is not a plug-in is their mistake; one found by the search is not */
    fsc_status bad = env ? FSC_ERR_INVALID : FSC_ERR_UNSUPPORTED;
    const char *who = env ? "FSC_CUDA_PLUGIN: " : "";
    fsc_device_open_fn open_fn;
    void *sym = dlsym(h, "fsc_cuda_device_open");
    memcpy(&open_fn, &sym, sizeof open_fn);
    if (!sym) {
        dlclose(h);
        return fsc_error(bad, "%s%s is not an fsc cuda plug-in: it has no symbol fsc_cuda_device_open", who, path);
    }
    /* hand the plug-in our error setter: a program linked with libfsc.a exports no symbols to it */
    void *isym = dlsym(h, "fsc_plugin_init");
    if (isym) {
        fsc_plugin_init_fn init;
        memcpy(&init, &isym, sizeof init);
        init(FSC_DEVICE_ABI_VERSION, fsc_error);
    }
    fsc_clear_error();
    *ops = NULL;
    fsc_status s = open_fn(FSC_DEVICE_ABI_VERSION, opts, ops, ctx);
    if (s != FSC_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", fsc_last_error());
        dlclose(h);
        return fsc_error(s, "cuda device unavailable (plug-in %s): %s", path,
                         why[0] ? why : "the plug-in refused to open");
    }
    if (!*ops || (*ops)->abi_version != FSC_DEVICE_ABI_VERSION) {
        /* a table of another version has another layout: nothing in it is safe to call, not even destroy, so
         * the plug-in stays loaded (its threads, if any, may still run its code) */
        return fsc_error(bad, "%s%s is a cuda plug-in for device ABI version %d, this library needs %d (rebuild "
                         "the plug-in with this fsc)", who, path, *ops ? (*ops)->abi_version : -1,
                         FSC_DEVICE_ABI_VERSION);
    }
    *handle = h;
    return FSC_OK;
}

fsc_status fsc_device_create(const char *name, const fsc_device_opts *opts, fsc_device **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    if (!name) return fsc_error(FSC_ERR_INVALID, "fsc_device_create: name is NULL (use \"cpu\" or \"cuda\")");
    fsc_device_opts o = {0};
    if (opts) o = *opts;
    if (o.threads < 0) return fsc_error(FSC_ERR_INVALID, "device option threads is %d, must be >= 0", o.threads);
    if (o.ordinal < 0) return fsc_error(FSC_ERR_INVALID, "device option ordinal is %d, must be >= 0", o.ordinal);
    const fsc_device_ops *ops = NULL;
    void *ctx = NULL, *handle = NULL;
    if (strcmp(name, "cpu") == 0) {
        FSC_TRY(fsc_cpu_device_open(FSC_DEVICE_ABI_VERSION, &o, &ops, &ctx));
    } else if (strcmp(name, "cuda") == 0) {
        FSC_TRY(open_cuda(&o, &ops, &ctx, &handle));
    } else if (strcmp(name, "count") == 0) {
        FSC_TRY(fsc_count_device_open(FSC_DEVICE_ABI_VERSION, &o, &ops, &ctx));
    } else {
        return fsc_error(FSC_ERR_INVALID, "unknown device \"%s\" (known devices: \"cpu\", \"cuda\", \"count\")",
                         name);
    }
    fsc_device *d = calloc(1, sizeof *d);
    struct fsc_alloc_map *m = calloc(1, sizeof *m);
    if (!d || !m || pthread_mutex_init(&m->mu, NULL) != 0) {
        free(d);
        free(m);
        if (ops->destroy) ops->destroy(ctx);
        if (handle) dlclose(handle);
        return fsc_error(FSC_ERR_NOMEM, "out of memory creating device %s", name);
    }
    d->ops = ops;
    d->ctx = ctx;
    d->plugin = handle;
    d->is_count = strcmp(ops->name, "count") == 0;
    d->whole_products = !d->is_count && strcmp(ops->name, "cpu") != 0;
    d->live = m;
    *out = d;
    return FSC_OK;
}

/* Memory back to where fsc_device_alloc took it: the accelerator's pinned host memory for a host device made
 * by fsc_device_create_host, else the backend. */
static void backend_free(fsc_device *dev, void *p) {
    if (dev->mem_ops) dev->mem_ops->host_free(dev->mem_ctx, p);
    else dev->ops->free(dev->ctx, p);
}

void fsc_device_free(fsc_device *dev) {
    if (!dev) return;
    struct fsc_alloc_map *m = dev->live;
    /* memory still live at free time is returned to the backend (a leak in the caller, not a crash) */
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].p) backend_free(dev, m->slots[i].p);
    free(m->slots);
    pthread_mutex_destroy(&m->mu);
    free(m);
    if (dev->ops->destroy) dev->ops->destroy(dev->ctx);
    if (dev->plugin) dlclose(dev->plugin);
    free(dev);
}

const char *fsc_device_name(const fsc_device *dev) { return dev ? dev->ops->name : "(null)"; }

int fsc_device_is_count(const fsc_device *dev) { return dev && dev->is_count; }

fsc_device *fsc_device_for_comm(fsc_device *dev) { return dev && dev->comm_dev ? dev->comm_dev : dev; }

int fsc_device_discards(const fsc_device *dev, const void *p) { return fsc_device_is_count(dev) && fsc_count_is_fake(p); }

fsc_status fsc_device_alloc(fsc_device *dev, fsc_tag tag, size_t bytes, void **out) {
    FSC_CHECK_ARG(out);
    *out = NULL;
    FSC_CHECK_ARG(dev);
    if ((unsigned)tag >= FSC_TAG_COUNT) return fsc_error(FSC_ERR_INVALID, "fsc_device_alloc: invalid tag %d", (int)tag);
    if (bytes == 0) return FSC_OK;
    struct fsc_alloc_map *m = dev->live;
    pthread_mutex_lock(&m->mu);
    if ((m->count + 1) * 2 > m->cap && map_grow(m) != 0) {
        pthread_mutex_unlock(&m->mu);
        return fsc_error(FSC_ERR_NOMEM, "out of host memory for the allocation ledger");
    }
    void *p = dev->mem_ops ? dev->mem_ops->host_alloc(dev->mem_ctx, bytes) : dev->ops->alloc(dev->ctx, bytes);
    if (!p) {
        pthread_mutex_unlock(&m->mu);
        return fsc_error(FSC_ERR_NOMEM, "%s device: cannot allocate %zu bytes for %s (%zu bytes live in all)",
                         dev->ops->name, bytes, tag_names[tag], dev->cur_total);
    }
    map_put(m->slots, m->cap, (alloc_entry){p, bytes, (int)tag});
    m->count++;
    dev->cur[tag] += bytes;
    if (dev->cur[tag] > dev->peak[tag]) dev->peak[tag] = dev->cur[tag];
    dev->cur_total += bytes;
    if (dev->cur_total > dev->peak_total) dev->peak_total = dev->cur_total;
    pthread_mutex_unlock(&m->mu);
    *out = p;
    return FSC_OK;
}

fsc_status fsc_device_calloc(fsc_device *dev, fsc_tag tag, size_t bytes, void **out) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(out);
    FSC_TRY(fsc_device_alloc(dev, tag, bytes, out));
    if (bytes == 0) return FSC_OK;
    fsc_status s = dev->ops->memset(dev->ctx, *out, 0, bytes);
    if (s != FSC_OK) {
        fsc_device_release(dev, *out);
        *out = NULL;
    }
    return s;
}

void fsc_device_release(fsc_device *dev, void *p) {
    if (!p || !dev) return;
    struct fsc_alloc_map *m = dev->live;
    alloc_entry e;
    pthread_mutex_lock(&m->mu);
    int found = map_take(m, p, &e) == 0;
    if (found) {
        dev->cur[e.tag] -= e.bytes;
        dev->cur_total -= e.bytes;
    }
    pthread_mutex_unlock(&m->mu);
    if (!found) {
        fsc_error(FSC_ERR_INTERNAL, "%s device: release of %p, which is not a live allocation of this device "
                  "(double release or foreign pointer)", dev->ops->name, p);
        return;
    }
    backend_free(dev, p);
}

fsc_status fsc_device_create_host(fsc_device *accel, fsc_device **out) {
    /* the counting device's host memory is counted, not there, like its own (the planner's offload) */
    FSC_TRY(fsc_device_create(fsc_device_is_count(accel) ? "count" : "cpu", NULL, out));
    (*out)->comm_dev = accel;
    if (accel && accel->ops->host_alloc && accel->ops->host_free) {
        (*out)->mem_ops = accel->ops;
        (*out)->mem_ctx = accel->ctx;
    }
    return FSC_OK;
}

size_t fsc_device_current_bytes(const fsc_device *dev, fsc_tag tag) {
    if (!dev) return 0;
    return ((unsigned)tag < FSC_TAG_COUNT) ? dev->cur[tag] : 0;
}

size_t fsc_device_peak_bytes(const fsc_device *dev, fsc_tag tag) {
    if (!dev) return 0;
    return ((unsigned)tag < FSC_TAG_COUNT) ? dev->peak[tag] : 0;
}

size_t fsc_device_peak_total(const fsc_device *dev) {
    if (!dev) return 0;
    return dev->peak_total;
}

void fsc_device_reset_peak(fsc_device *dev) {
    if (!dev) return;
    pthread_mutex_lock(&dev->live->mu);
    for (int t = 0; t < FSC_TAG_COUNT; t++) dev->peak[t] = dev->cur[t];
    dev->peak_total = dev->cur_total;
    pthread_mutex_unlock(&dev->live->mu);
}

size_t fsc_device_copied_bytes(const fsc_device *dev, int to_device) {
    return dev ? atomic_load_explicit(&((fsc_device *)dev)->copied[to_device ? 1 : 0], memory_order_relaxed) : 0;
}

void fsc_device_reset_copied(fsc_device *dev) {
    if (!dev) return;
    atomic_store(&dev->copied[0], 0);
    atomic_store(&dev->copied[1], 0);
}

void fsc_device_set_copy_cost(fsc_device *dev, double gbps) {
    if (dev) dev->copy_s_per_byte = gbps > 0 ? 1.0 / (gbps * 1e9) : 0.0;
}

int fsc_device_has_copy_cost(const fsc_device *dev) { return dev && dev->copy_s_per_byte > 0; }

int fsc_device_whole_products(const fsc_device *dev) { return dev ? dev->whole_products : 0; }

void fsc_device_set_whole_products(fsc_device *dev, int on) {
    if (dev) dev->whole_products = on != 0;
}

void fsc_device_set_copy_rank_clock(fsc_device *dev, int on) {
    if (dev) dev->copy_rank_clock = on != 0;
}

/* A synchronous copy made: into the ledger, and with a copy cost, the modelled link time slept at once. */
static void count_sync_copy(fsc_device *dev, int to_device, size_t bytes) {
    atomic_fetch_add_explicit(&dev->copied[to_device], bytes, memory_order_relaxed);
    if (dev->copy_s_per_byte > 0) fsc_device_copy_sleep_until(fsc_device_copy_reserve(dev, bytes));
}

fsc_status fsc_device_check_span(const char *fn, const char *name, const void *p, size_t bytes) {
    if (bytes <= UINTPTR_MAX - (uintptr_t)p) return FSC_OK;
    return fsc_error(FSC_ERR_INVALID, "%s: %s + %zu bytes passes the end of the address space (a negative size?)", fn,
                     name, bytes);
}

#define CHECK_SPAN(p, bytes) FSC_TRY(fsc_device_check_span(__func__, #p, p, bytes))

fsc_status fsc_device_upload(fsc_device *dev, void *dst, const void *host_src, size_t bytes) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(dst, bytes);
    FSC_CHECK_BUF(host_src, bytes);
    CHECK_SPAN(dst, bytes);
    CHECK_SPAN(host_src, bytes);
    if (bytes == 0) return FSC_OK;
    fsc_status s = dev->ops->upload(dev->ctx, dst, host_src, bytes);
    if (s == FSC_OK) count_sync_copy(dev, 1, bytes);
    return s;
}

fsc_status fsc_device_download(fsc_device *dev, void *host_dst, const void *src, size_t bytes) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(host_dst, bytes);
    FSC_CHECK_BUF(src, bytes);
    CHECK_SPAN(host_dst, bytes);
    CHECK_SPAN(src, bytes);
    if (bytes == 0) return FSC_OK;
    fsc_status s = dev->ops->download(dev->ctx, host_dst, src, bytes);
    if (s == FSC_OK) count_sync_copy(dev, 0, bytes);
    return s;
}

fsc_status fsc_device_copy(fsc_device *dev, void *dst, const void *src, size_t bytes) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(dst, bytes);
    FSC_CHECK_BUF(src, bytes);
    CHECK_SPAN(dst, bytes);
    CHECK_SPAN(src, bytes);
    if (bytes == 0) return FSC_OK;
    return dev->ops->copy(dev->ctx, dst, src, bytes);
}

fsc_status fsc_device_memset(fsc_device *dev, void *dst, int value, size_t bytes) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_BUF(dst, bytes);
    CHECK_SPAN(dst, bytes);
    if (bytes == 0) return FSC_OK;
    return dev->ops->memset(dev->ctx, dst, value, bytes);
}

fsc_status fsc_device_sync(fsc_device *dev) {
    FSC_CHECK_ARG(dev);
    return dev->ops->sync ? dev->ops->sync(dev->ctx) : FSC_OK;
}

fsc_device_opts fsc_device_opts_default(void) { return (fsc_device_opts){ .threads = 0, .ordinal = 0 }; }
