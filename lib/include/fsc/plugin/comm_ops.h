/* The plug-in ABI, communicator half: what a communicator implements (sim/, linked in; NCCL in the cuda
 * plug-in). Installed as <fsc/plugin/comm_ops.h> for authors of backends; not part of the API a training
 * program uses (fsc.h does not include it). Its version is FSC_COMM_ABI_VERSION: the core passes it to
 * fsc_nccl_comm_open, and a plug-in built for another version refuses.
 * The core wraps every call: it validates arguments, counts calls and bytes, then calls the table. */
#ifndef FSC_PLUGIN_COMM_OPS_H
#define FSC_PLUGIN_COMM_OPS_H
#include "../export.h"
#include "../comm.h"

FSC_BEGIN_DECLS

#define FSC_COMM_ABI_VERSION 1

typedef struct fsc_comm_ops {
    int abi_version;
    const char *name;
    fsc_status (*all_reduce)(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt, fsc_redop op);
    fsc_status (*reduce_scatter)(void *ctx, const void *send, void *recv, size_t recvcount, fsc_dtype dt,
                                 fsc_redop op);
    fsc_status (*all_gather)(void *ctx, const void *send, void *recv, size_t sendcount, fsc_dtype dt);
    fsc_status (*broadcast)(void *ctx, void *buf, size_t count, fsc_dtype dt, int root);
    fsc_status (*send)(void *ctx, const void *buf, size_t count, fsc_dtype dt, int peer);
    fsc_status (*recv)(void *ctx, void *buf, size_t count, fsc_dtype dt, int peer);
    fsc_status (*all_to_all)(void *ctx, const void *send, void *recv, size_t count, fsc_dtype dt);
    fsc_status (*barrier)(void *ctx);
    /* returns the new group's ctx, rank and size */
    fsc_status (*split)(void *ctx, int color, int key, void **new_ctx, int *new_rank, int *new_size);
    void (*destroy)(void *ctx);
} fsc_comm_ops;

/* Entry points the cuda plug-in exports for its NCCL communicator (found with dlsym by the launcher):
 * "fsc_nccl_get_unique_id" fills the opaque id (bytes = 128) on the rank that creates it;
 * "fsc_nccl_comm_open" joins rank of world with that id on the plug-in device whose ctx is device_ctx
 * (collectives run on that device's current stream); a collective or barrier stuck longer than
 * timeout_s fails instead of hanging. */
typedef fsc_status (*fsc_nccl_get_unique_id_fn)(void *id, size_t bytes);
typedef fsc_status (*fsc_nccl_comm_open_fn)(int abi_version, const void *id, size_t bytes, int rank, int world,
                                            void *device_ctx, double timeout_s, const fsc_comm_ops **ops,
                                            void **ctx);

FSC_END_DECLS

#endif
