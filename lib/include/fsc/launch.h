/* Launching one process per rank (what fsc_cluster_run_from_env is made of, exposed so it can be tested
 * and reused): reading the launcher's environment, and the rendezvous that hands the communicator's
 * opaque id (the NCCL unique id, FSC_UNIQUE_ID_BYTES) from rank 0 to every other rank, over TCP at
 * MASTER_ADDR:MASTER_PORT or through a shared file. Nothing here needs a GPU. On the cpu device the
 * processes use MPI (libfsc_mpi.so), which needs no rendezvous of ours: mpirun (or srun) wires it up.
 *
 * Environment, first launcher found wins (FSC_LAUNCHER=torchrun|slurm|openmpi forces one):
 *   torchrun   RANK, WORLD_SIZE, LOCAL_RANK
 *   Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
 *   Open MPI   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
 *   none       a single process: rank 0 of 1
 * Slurm's and Open MPI's variables together (mpirun inside a Slurm job inherits SLURM_*) are refused unless they name
 * the same rank of the same world: FSC_LAUNCHER then says which.
 * and MASTER_ADDR, MASTER_PORT (TCP rendezvous), FSC_RENDEZVOUS_FILE (file rendezvous, preferred when
 * set), FSC_RENDEZVOUS_TIMEOUT (seconds, default 60), FSC_COMM_TIMEOUT (seconds, default 600).
 * The GPU is the local rank's, or GPU 0 when CUDA_VISIBLE_DEVICES names a single GPU.
 *
 * The TCP rendezvous admits only ranks that know the job's token: FSC_RENDEZVOUS_TOKEN when set (it wins),
 * else the chosen launcher's name for the job:
 *   torchrun   TORCHELASTIC_RUN_ID (--rdzv-id; --standalone makes a random one; "none" does not count)
 *   Slurm      SLURM_JOB_ID and SLURM_STEP_ID
 *   Open MPI   PMIX_NAMESPACE, else OMPI_MCA_ess_base_jobid, else OMPI_MCA_orte_ess_jobid
 * With neither, fsc_cluster_run_from_env refuses a TCP rendezvous of more than one rank (the file
 * rendezvous needs no token). A job id keeps out other jobs and strays; a secret FSC_RENDEZVOUS_TOKEN
 * keeps out anyone who can see the job id too. */
#ifndef FSC_LAUNCH_H
#define FSC_LAUNCH_H
#include "export.h"
#include <stddef.h>
#include "status.h"

FSC_BEGIN_DECLS

#define FSC_UNIQUE_ID_BYTES 128
#define FSC_RENDEZVOUS_MAX_BLOB 4096

typedef enum { FSC_LAUNCHER_NONE = 0, FSC_LAUNCHER_TORCHRUN, FSC_LAUNCHER_SLURM, FSC_LAUNCHER_OPENMPI } fsc_launcher;

const char *fsc_launcher_name(fsc_launcher l); /* "none", "torchrun", "slurm", "openmpi" */

typedef struct {
    fsc_launcher launcher;
    int rank, world, local_rank;
    char master_addr[256];      /* "" when MASTER_ADDR is not set */
    int master_port;            /* 0 when MASTER_PORT is not set */
    char rendezvous_file[1024]; /* "" when FSC_RENDEZVOUS_FILE is not set */
    double timeout_s;           /* FSC_RENDEZVOUS_TIMEOUT, default 60 */
    double comm_timeout_s;      /* FSC_COMM_TIMEOUT: a collective stuck this long fails (default 600) */
    char token[256];            /* the job token of the TCP rendezvous; "" when none was found */
    char token_source[64];      /* where it came from ("FSC_RENDEZVOUS_TOKEN", "SLURM_JOB_ID", ...); "" */
} fsc_launch_env;

/* How variables are looked up: returns the value of name or NULL. */
typedef const char *(*fsc_env_lookup)(void *ctx, const char *name);

/* Read and validate the launcher variables through lookup (NULL: the process environment, getenv).
 * Missing, non-numeric and out-of-range values are FSC_ERR_INVALID with a message naming the variable. */
fsc_status fsc_launch_env_parse(fsc_env_lookup lookup, void *lookup_ctx, fsc_launch_env *out);

/* TCP rendezvous. Rank 0 listens at addr (MASTER_ADDR; only there: "0.0.0.0" or "::" must be asked for;
 * port 0: an ephemeral port, reported in *bound_port), then serves blob to the world-1 other ranks; every
 * other rank fetches it, retrying the connection until timeout_s. A rank is admitted only by answering
 * rank 0's challenge with an HMAC keyed by token (the same non-empty string on every rank; it never crosses
 * the wire) and each rank id is admitted once; rank 0 serves every pending connection at once and drops
 * one that stays silent for 5 s, so strangers neither join nor delay the job.
 * Errors: FSC_ERR_TIMEOUT (nobody came / rank 0 never answered), FSC_ERR_INVALID (unresolvable address,
 * no token, a token rank 0 refuses, a rank id already taken), FSC_ERR_IO (port in use, address not of
 * this host, socket failure), FSC_ERR_FORMAT (a peer speaking another protocol or blob size, or an
 * answer not signed with the token). */
typedef struct fsc_rendezvous_server fsc_rendezvous_server;
fsc_status fsc_rendezvous_listen(const char *addr, int port, fsc_rendezvous_server **out, int *bound_port);
fsc_status fsc_rendezvous_serve(fsc_rendezvous_server *s, const char *token, int world, const void *blob, size_t len,
                                double timeout_s);
void fsc_rendezvous_close(fsc_rendezvous_server *s);
fsc_status fsc_rendezvous_fetch(const char *addr, int port, const char *token, int rank, void *blob, size_t len,
                                double timeout_s);
/* Rank 0: listen at addr:port and serve; other ranks: fetch from addr:port. */
fsc_status fsc_rendezvous_tcp(const char *addr, int port, const char *token, int rank, int world, void *blob,
                              size_t len, double timeout_s);

/* File rendezvous: rank 0 writes blob to path atomically (temporary name, fsync, rename); the others poll
 * until it appears (for the same world size) or timeout_s passes. Use a fresh path for every run. */
fsc_status fsc_rendezvous_file(const char *path, int rank, int world, void *blob, size_t len, double timeout_s);

FSC_END_DECLS

#endif
