/* The NCCL functions the communicator calls, as a table filled by dlopen (nccl_load.cu): the plug-in does not
 * link NCCL, so a machine without it still runs one GPU. Each entry has the type of NCCL's own prototype. */
#ifndef FSC_NCCL_LOAD_H
#define FSC_NCCL_LOAD_H
#include <nccl.h>
#include "cuda_internal.h"

#define NCCL_FUNCTIONS(X)                                                                                       \
    X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommGetAsyncError)        \
    X(ncclCommSplit) X(ncclCommUserRank) X(ncclCommCount) X(ncclGetErrorString) X(ncclGetLastError)           \
    X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclBroadcast) X(ncclSend) X(ncclRecv)           \
    X(ncclGroupStart) X(ncclGroupEnd)

typedef struct {
#define NCCL_FIELD(f) decltype(&::f) f;
    NCCL_FUNCTIONS(NCCL_FIELD)
#undef NCCL_FIELD
    int loaded;
} nccl_api;

/* Load NCCL once per process (thread-safe); FSC_ERR_UNSUPPORTED naming the library when it cannot be. */
fsc_status nccl_load(const nccl_api **out);
/* The table after a successful nccl_load (every communicator exists only after one). */
const nccl_api *nccl_loaded(void);

#endif
