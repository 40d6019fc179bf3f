/* NCCL, loaded when the first communicator is opened (dlopen), so that the plug-in loads and runs one GPU on a
 * machine without NCCL: only nccl_comm.cu calls NCCL, and only through the table this file fills.
 * The library is $FSC_NCCL_LIBRARY when that is set (a file; an error names it if it does not load), else
 * libnccl.so.2 from the loader path (LD_LIBRARY_PATH, ldconfig's cache, the plug-in's RUNPATH).
 * Not here: the communicator itself (nccl_comm.cu). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "nccl_load.h"

static nccl_api api;            /* filled once, under the once below; read-only afterwards */
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static char api_error[1024];    /* why loading failed ("" when it worked) */

static void api_load(void) {
    const char *env = getenv("FSC_NCCL_LIBRARY");
    const char *path = env && *env ? env : "libnccl.so.2";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(api_error, sizeof api_error, "nccl: cannot load %s%s: %s (NCCL is needed for one process per GPU; "
                 "install it, register its folder with ldconfig or set FSC_NCCL_LIBRARY to the file)",
                 path, env && *env ? " (FSC_NCCL_LIBRARY)" : "", e ? e : "dlopen failed");
        return;
    }
#define NCCL_LOOKUP(f)                                                                                          \
    {                                                                                                           \
        void *sym = dlsym(h, #f);                                                                               \
        if (!sym) {                                                                                             \
            snprintf(api_error, sizeof api_error, "nccl: %s has no %s (NCCL 2.18 or newer is needed)", path, #f); \
            dlclose(h);                                                                                         \
            return;                                                                                             \
        }                                                                                                       \
        api.f = (decltype(api.f))sym;                                                                           \
    }
    NCCL_FUNCTIONS(NCCL_LOOKUP)
#undef NCCL_LOOKUP
    api.loaded = 1;
}

fsc_status nccl_load(const nccl_api **out) {
    pthread_once(&api_once, api_load);
    if (!api.loaded) return cu_err(FSC_ERR_UNSUPPORTED, "%s", api_error);
    *out = &api;
    return FSC_OK;
}

const nccl_api *nccl_loaded(void) { return &api; }
