/* Device memory and copies of the cuda device.
 *
 * Allocation: a caching allocator with explicit lifetimes. cudaFree synchronizes the whole GPU, which
 * would stall FSDP (it frees gathered parameters every unit) and every simulated rank sharing the GPU.
 * A freed block instead records an event on every stream of the device and waits in a free list; the
 * next allocation of the same rounded size takes it back after making every stream wait for those
 * events, so no stream can touch it while earlier work still uses it. Sizes repeat exactly from step to
 * step, so the cache settles after the first step and peak memory is the same every step. Out of
 * memory: the cache is emptied and the allocation retried. FSC_CUDA_NO_CACHE=1 uses cudaMalloc/cudaFree.
 *
 * Copies: uploads go through two pinned staging buffers (the host returns once the data is staged, and
 * the copy overlaps the next chunk's memcpy); downloads are pipelined the same way and wait for the data.
 * Pinned host buffers are copied directly.
 *
 * Asynchronous copies (upload_async, download_async, copy_wait; docs/offload.md): one cudaMemcpyAsync on the
 * device's copy stream, ordered after the work already queued on the current stream (an event it waits for),
 * and an event recorded after it. The wait makes the current stream wait for that event (cudaStreamWaitEvent:
 * kernels and collectives queued later see the data) and then the host (cudaEventSynchronize: a download is
 * readable, an upload's source reusable). Pinned host memory (the host device's, cu_host_alloc) makes the copy a
 * DMA that overlaps the kernels; pageable memory still copies correctly, with CUDA's staging. One stream: the
 * copies complete in issue order. Memory freed after its copy was waited for is safe; a block freed earlier still
 * waits for every stream, the copy stream included, before the cache hands it out again (cu_free).
 * Compiled, never run: no GPU where this was written. */
#include <stdlib.h>
#include <string.h>
#include <map>
#include <new>
#include <unordered_map>
#include <vector>
#include "cuda_internal.h"

struct cu_free_block {
    void *p;
    cudaEvent_t ev[CU_MAX_STREAMS];
    int nev;
};

struct cu_alloc_cache {
    int enabled;
    std::unordered_map<void *, size_t> live;        /* pointer -> rounded size */
    std::multimap<size_t, cu_free_block> free_list; /* rounded size -> block */
    std::vector<cudaEvent_t> event_pool;
};

static size_t round_size(size_t bytes) {
    size_t q = bytes <= ((size_t)1 << 20) ? 512 : ((size_t)2 << 20);
    size_t r = (bytes + q - 1) / q * q;
    return r < bytes ? 0 : r; /* 0: overflow */
}

fsc_status cu_cache_create(cu_ctx *c) {
    cu_alloc_cache *a = new (std::nothrow) cu_alloc_cache();
    if (!a) return cu_err(FSC_ERR_NOMEM, "cuda: out of host memory for the allocator");
    const char *no = getenv("FSC_CUDA_NO_CACHE");
    a->enabled = !(no && *no && strcmp(no, "0") != 0);
    c->cache = a;
    return FSC_OK;
}

/* Give every cached block back to CUDA (after the work that used them). */
static void cache_release(cu_ctx *c) {
    cu_alloc_cache *a = c->cache;
    if (a->free_list.empty()) return;
    for (int i = 0; i < c->nstreams; i++) cudaStreamSynchronize(c->streams[i]->s);
    for (auto &kv : a->free_list) {
        cudaFree(kv.second.p);
        for (int i = 0; i < kv.second.nev; i++) a->event_pool.push_back(kv.second.ev[i]);
    }
    a->free_list.clear();
}

void cu_cache_destroy(cu_ctx *c) {
    cu_alloc_cache *a = c->cache;
    if (!a) return;
    cache_release(c);
    for (auto &kv : a->live) cudaFree(kv.first); /* the core frees live memory first; this is a backstop */
    for (cudaEvent_t e : a->event_pool) cudaEventDestroy(e);
    delete a;
    c->cache = NULL;
}

static void *alloc_cached(cu_ctx *c, size_t bytes) {
    cu_alloc_cache *a = c->cache;
    size_t r = round_size(bytes);
    if (!r) return NULL;
    auto it = a->free_list.find(r);
    if (it != a->free_list.end()) {
        cu_free_block b = it->second;
        for (int s = 0; s < c->nstreams; s++)
            for (int i = 0; i < b.nev; i++)
                if (cudaStreamWaitEvent(c->streams[s]->s, b.ev[i], 0) != cudaSuccess) {
                    (void)cudaGetLastError(); /* cannot order: wait for it on the host instead */
                    cudaEventSynchronize(b.ev[i]);
                }
        a->free_list.erase(it);
        for (int i = 0; i < b.nev; i++) a->event_pool.push_back(b.ev[i]);
        a->live[b.p] = r;
        return b.p;
    }
    void *p = NULL;
    if (cudaMalloc(&p, r) != cudaSuccess) {
        (void)cudaGetLastError();
        cache_release(c);
        if (cudaMalloc(&p, r) != cudaSuccess) {
            (void)cudaGetLastError();
            return NULL;
        }
    }
    try {
        a->live[p] = r;
    } catch (...) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

void *cu_alloc(void *ctx, size_t bytes) {
    cu_ctx *c = cu_of(ctx);
    if (cu_enter(c) != FSC_OK || bytes == 0) return NULL;
    if (!c->cache->enabled) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            return NULL;
        }
        return p;
    }
    try {
        return alloc_cached(c, bytes);
    } catch (...) {
        return NULL;
    }
}

void *cu_host_alloc(void *ctx, size_t bytes) {
    cu_ctx *c = cu_of(ctx);
    void *p = NULL;
    if (cu_enter(c) != FSC_OK || bytes == 0) return NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void cu_host_free(void *ctx, void *p) {
    cu_ctx *c = cu_of(ctx);
    if (!p || cu_enter(c) != FSC_OK) return;
    cudaFreeHost(p); /* synchronizes with the device: no copy from or to it is left in flight */
    (void)cudaGetLastError();
}

void cu_free(void *ctx, void *p) {
    cu_ctx *c = cu_of(ctx);
    if (!p || cu_enter(c) != FSC_OK) return;
    cu_alloc_cache *a = c->cache;
    auto it = a->enabled ? a->live.find(p) : a->live.end();
    if (it == a->live.end()) {
        cudaFree(p); /* not cached: CUDA waits for the work that uses it */
        (void)cudaGetLastError();
        return;
    }
    size_t r = it->second;
    a->live.erase(it);
    cu_free_block b;
    b.p = p;
    b.nev = 0;
    for (int s = 0; s < c->nstreams; s++) {
        cudaEvent_t e;
        if (!a->event_pool.empty()) {
            e = a->event_pool.back();
            a->event_pool.pop_back();
        } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
            e = NULL;
        }
        if (!e || cudaEventRecord(e, c->streams[s]->s) != cudaSuccess) {
            (void)cudaGetLastError();
            if (e) a->event_pool.push_back(e);
            for (int i = 0; i < b.nev; i++) a->event_pool.push_back(b.ev[i]);
            cudaFree(p); /* could not track it: free it the synchronous way */
            return;
        }
        b.ev[b.nev++] = e;
    }
    try {
        a->free_list.insert(std::make_pair(r, b));
    } catch (...) {
        for (int i = 0; i < b.nev; i++) a->event_pool.push_back(b.ev[i]);
        cudaFree(p);
    }
}

/* ---- copies ---- */

static int is_pinned_host(const void *p) {
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return at.type == cudaMemoryTypeHost;
}

/* Pageable host memory goes through the two pinned staging buffers, under stage_mu (one copy at a time). */
static fsc_status staged_upload(cu_ctx *c, cudaStream_t s, void *dst, const char *src, size_t bytes) {
    for (size_t off = 0; off < bytes;) {
        int k = c->stage_next;
        c->stage_next ^= 1;
        size_t len = bytes - off < CU_STAGE_BYTES ? bytes - off : CU_STAGE_BYTES;
        FSC_TRY(cu_check(cudaEventSynchronize(c->stage_ev[k]), "upload: staging buffer wait"));
        memcpy(c->stage[k], src + off, len);
        FSC_TRY(cu_check(cudaMemcpyAsync((char *)dst + off, c->stage[k], len, cudaMemcpyHostToDevice, s), "upload"));
        FSC_TRY(cu_check(cudaEventRecord(c->stage_ev[k], s), "upload: cudaEventRecord"));
        off += len;
    }
    return FSC_OK;
}

fsc_status cu_upload(void *ctx, void *dst, const void *host_src, size_t bytes) {
    cu_ctx *c = cu_of(ctx);
    FSC_TRY(cu_enter(c));
    cudaStream_t s = cu_stream_of(c);
    if (is_pinned_host(host_src)) { /* the caller may reuse its buffer once we return */
        FSC_TRY(cu_check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s), "upload"));
        return cu_check(cudaStreamSynchronize(s), "upload: cudaStreamSynchronize");
    }
    pthread_mutex_lock(&c->stage_mu);
    fsc_status st = staged_upload(c, s, dst, (const char *)host_src, bytes);
    pthread_mutex_unlock(&c->stage_mu);
    return st;
}

static fsc_status staged_download(cu_ctx *c, cudaStream_t s, char *dst, const void *src, size_t bytes) {
    /* chunk i goes through buffer k_i; chunk i+1 is in flight while chunk i is copied out */
    size_t off = 0, pend_off = 0, pend_len = 0;
    int pend_k = -1;
    while (off < bytes || pend_k >= 0) {
        int issued_k = -1;
        size_t len = 0;
        if (off < bytes) {
            issued_k = c->stage_next;
            c->stage_next ^= 1;
            len = bytes - off < CU_STAGE_BYTES ? bytes - off : CU_STAGE_BYTES;
            FSC_TRY(cu_check(cudaEventSynchronize(c->stage_ev[issued_k]), "download: staging buffer wait"));
            FSC_TRY(cu_check(cudaMemcpyAsync(c->stage[issued_k], (const char *)src + off, len, cudaMemcpyDeviceToHost, s),
                             "download"));
            FSC_TRY(cu_check(cudaEventRecord(c->stage_ev[issued_k], s), "download: cudaEventRecord"));
        }
        if (pend_k >= 0) {
            FSC_TRY(cu_check(cudaEventSynchronize(c->stage_ev[pend_k]), "download"));
            memcpy(dst + pend_off, c->stage[pend_k], pend_len);
        }
        pend_k = issued_k;
        pend_off = off;
        pend_len = len;
        off += len;
    }
    return FSC_OK;
}

fsc_status cu_download(void *ctx, void *host_dst, const void *src, size_t bytes) {
    cu_ctx *c = cu_of(ctx);
    FSC_TRY(cu_enter(c));
    cudaStream_t s = cu_stream_of(c);
    if (is_pinned_host(host_dst)) {
        FSC_TRY(cu_check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s), "download"));
        FSC_TRY(cu_check(cudaStreamSynchronize(s), "download: cudaStreamSynchronize"));
        return cu_deferred_check(c);
    }
    pthread_mutex_lock(&c->stage_mu);
    fsc_status st = staged_download(c, s, (char *)host_dst, src, bytes);
    pthread_mutex_unlock(&c->stage_mu);
    FSC_TRY(st);
    return cu_deferred_check(c);
}

fsc_status cu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    cu_ctx *c = cu_of(ctx);
    if (dst == src || bytes == 0) return FSC_OK;
    FSC_TRY(cu_enter(c));
    cudaStream_t s = cu_stream_of(c);
    const char *d = (const char *)dst, *x = (const char *)src;
    if (d < x + bytes && x < d + bytes) { /* overlapping: memmove semantics through scratch */
        void *tmp;
        FSC_TRY(cu_scratch(c, bytes, &tmp));
        FSC_TRY(cu_check(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, s), "copy"));
        return cu_check(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, s), "copy");
    }
    return cu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "copy");
}

fsc_status cu_memset(void *ctx, void *dst, int value, size_t bytes) {
    cu_ctx *c = cu_of(ctx);
    FSC_TRY(cu_enter(c));
    return cu_check(cudaMemsetAsync(dst, value, bytes, cu_stream_of(c)), "memset");
}

/* ---- asynchronous copies ---- */

struct cu_async_copy {
    cudaEvent_t done;
};

static fsc_status event_get(cu_ctx *c, cudaEvent_t *e) {
    cu_alloc_cache *a = c->cache;
    if (!a->event_pool.empty()) {
        *e = a->event_pool.back();
        a->event_pool.pop_back();
        return FSC_OK;
    }
    return cu_check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
}

static void event_put(cu_ctx *c, cudaEvent_t e) {
    try {
        c->cache->event_pool.push_back(e);
    } catch (...) {
        cudaEventDestroy(e);
    }
}

static fsc_status copy_start(cu_ctx *c, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, void **copy) {
    *copy = NULL;
    FSC_TRY(cu_enter(c));
    cu_async_copy *h = (cu_async_copy *)calloc(1, sizeof *h);
    if (!h) return cu_err(FSC_ERR_NOMEM, "cuda: out of host memory for a copy");
    cudaEvent_t before = NULL;
    fsc_status s = event_get(c, &before);
    if (s == FSC_OK) s = event_get(c, &h->done);
    /* after what the current stream has queued (the kernels that wrote a gradient, or still read a buffer) */
    if (s == FSC_OK) s = cu_check(cudaEventRecord(before, cu_stream_of(c)), "copy: cudaEventRecord");
    if (s == FSC_OK) s = cu_check(cudaStreamWaitEvent(c->copy->s, before, 0), "copy: cudaStreamWaitEvent");
    if (s == FSC_OK) s = cu_check(cudaMemcpyAsync(dst, src, bytes, kind, c->copy->s), "copy: cudaMemcpyAsync");
    if (s == FSC_OK) s = cu_check(cudaEventRecord(h->done, c->copy->s), "copy: cudaEventRecord");
    if (before) event_put(c, before); /* reusable once recorded and waited on: CUDA captured its state */
    if (s != FSC_OK) {
        if (h->done) {
            cudaStreamSynchronize(c->copy->s);
            event_put(c, h->done);
        }
        free(h);
        return s;
    }
    *copy = h;
    return FSC_OK;
}

fsc_status cu_upload_async(void *ctx, void *dst, const void *host_src, size_t bytes, void **copy) {
    return copy_start(cu_of(ctx), dst, host_src, bytes, cudaMemcpyHostToDevice, copy);
}

fsc_status cu_download_async(void *ctx, void *host_dst, const void *src, size_t bytes, void **copy) {
    return copy_start(cu_of(ctx), host_dst, src, bytes, cudaMemcpyDeviceToHost, copy);
}

fsc_status cu_copy_wait(void *ctx, void *copy) {
    cu_ctx *c = cu_of(ctx);
    cu_async_copy *h = (cu_async_copy *)copy;
    if (!h) return FSC_OK;
    fsc_status s = cu_enter(c);
    /* the device's later work on the current stream sees the data; then the host does */
    if (s == FSC_OK) s = cu_check(cudaStreamWaitEvent(cu_stream_of(c), h->done, 0), "copy wait: cudaStreamWaitEvent");
    fsc_status w = cu_check(cudaEventSynchronize(h->done), "copy wait: cudaEventSynchronize");
    event_put(c, h->done);
    free(h);
    return s != FSC_OK ? s : w;
}
