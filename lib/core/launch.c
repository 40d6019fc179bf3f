/* One process per rank: the parts of fsc_cluster_run_from_env(_opts) (launch.h) below the simulator. On cuda:
 * NCCL (below); on cpu: the MPI plug-in libfsc_mpi.so (run_mpi, at the end); fsc_launch_run_process picks.
 * Reads the launcher's environment (torchrun, Slurm, Open MPI) and the job's rendezvous token, hands the
 * NCCL unique id from rank 0 to the other ranks (TCP at MASTER_ADDR:MASTER_PORT, in rendezvous.c, or a
 * shared file, here), opens the cuda device and the NCCL communicator that the cuda plug-in exports, and
 * runs the training function once.
 * No CUDA here: the GPU side lives in the plug-in (backends/cuda); without it, or without a GPU, the
 * run fails with FSC_ERR_UNSUPPORTED and a message. Not here: the entry points themselves, which run a single
 * process as a simulated world of 1 (sim/cluster_env.c, above both), and the simulated cluster (sim/). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/locale_impl.h"
#include "fsc/cluster.h"
#include "fsc/launch.h"
#include "core/device_impl.h"
#include "core/comm_impl.h"
#include "core/rendezvous_impl.h"
#include "core/launch_impl.h"

/* ---- the launcher's environment ---- */

static const struct {
    fsc_launcher l;
    const char *name, *rank, *size, *local;
} launchers[] = {
    {FSC_LAUNCHER_TORCHRUN, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {FSC_LAUNCHER_SLURM, "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {FSC_LAUNCHER_OPENMPI, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
};
#define N_LAUNCHERS (sizeof launchers / sizeof launchers[0])
#define MAX_WORLD (1 << 20)

const char *fsc_launcher_name(fsc_launcher l) {
    for (size_t i = 0; i < N_LAUNCHERS; i++)
        if (launchers[i].l == l) return launchers[i].name;
    return l == FSC_LAUNCHER_NONE ? "none" : "invalid";
}

static const char *env_get(fsc_env_lookup f, void *c, const char *name) { return f ? f(c, name) : getenv(name); }

/* A decimal integer in [lo, hi], surrounding blanks allowed. */
static fsc_status parse_long(const char *who, const char *name, const char *v, long lo, long hi, long *out) {
    if (!v) return fsc_error(FSC_ERR_INVALID, "%s: %s is not set", who, name);
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    const char *rest = end;
    while (*rest == ' ' || *rest == '\t' || *rest == '\n') rest++;
    if (end == v || *rest) return fsc_error(FSC_ERR_INVALID, "%s: %s is \"%s\", not an integer", who, name, v);
    if (errno == ERANGE || x < lo || x > hi)
        return fsc_error(FSC_ERR_INVALID, "%s: %s is %s, outside [%ld, %ld]", who, name, v, lo, hi);
    *out = x;
    return FSC_OK;
}

static fsc_status parse_seconds(const char *name, const char *v, double *out) {
    char *end;
    errno = 0;
    const locale_t c = fsc_c_numeric(); /* "0.5" whatever the host program's LC_NUMERIC */
    double x = c ? strtod_l(v, &end, c) : strtod(v, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end == v || *end || errno == ERANGE || !(x > 0) || x > 1e7)
        return fsc_error(FSC_ERR_INVALID, "%s is \"%s\": expected a number of seconds in (0, 1e7]", name, v);
    *out = x;
    return FSC_OK;
}

static fsc_status copy_string(const char *name, const char *v, char *dst, size_t cap) {
    if (!*v) return fsc_error(FSC_ERR_INVALID, "%s is set but empty", name);
    if (strlen(v) >= cap) return fsc_error(FSC_ERR_INVALID, "%s is %zu characters long (at most %zu)", name, strlen(v), cap - 1);
    memcpy(dst, v, strlen(v) + 1);
    return FSC_OK;
}

/* Where each launcher names the job, first found wins (launch.h); torchrun's "none" is no name. */
static const char *const job_ids[][3] = {
    [FSC_LAUNCHER_TORCHRUN] = {"TORCHELASTIC_RUN_ID", NULL, NULL},
    [FSC_LAUNCHER_SLURM] = {"SLURM_JOB_ID", NULL, NULL},
    [FSC_LAUNCHER_OPENMPI] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"},
};

/* The TCP rendezvous' job token: FSC_RENDEZVOUS_TOKEN, else "launcher:VARIABLE=value" of the job's name. */
static fsc_status job_token(fsc_env_lookup lookup, void *ctx, fsc_launcher l, fsc_launch_env *out) {
    const char *v = env_get(lookup, ctx, "FSC_RENDEZVOUS_TOKEN");
    if (v) {
        FSC_TRY(copy_string("FSC_RENDEZVOUS_TOKEN", v, out->token, sizeof out->token));
        snprintf(out->token_source, sizeof out->token_source, "FSC_RENDEZVOUS_TOKEN");
        return FSC_OK;
    }
    if (l == FSC_LAUNCHER_NONE) return FSC_OK;
    for (int i = 0; i < 3 && job_ids[l][i]; i++) {
        const char *name = job_ids[l][i];
        if (!(v = env_get(lookup, ctx, name)) || !*v || (l == FSC_LAUNCHER_TORCHRUN && strcmp(v, "none") == 0))
            continue;
        const char *step = l == FSC_LAUNCHER_SLURM ? env_get(lookup, ctx, "SLURM_STEP_ID") : NULL;
        int n = snprintf(out->token, sizeof out->token, "%s:%s=%s%s%s", fsc_launcher_name(l), name, v,
                         step ? ";SLURM_STEP_ID=" : "", step ? step : "");
        if (n < 0 || (size_t)n >= sizeof out->token) {
            out->token[0] = '\0';
            return fsc_error(FSC_ERR_INVALID, "%s%s is too long for a rendezvous token (%zu characters in all)", name,
                             step ? " with SLURM_STEP_ID" : "", sizeof out->token - 1);
        }
        snprintf(out->token_source, sizeof out->token_source, "%s", name);
        return FSC_OK;
    }
    return FSC_OK;
}

fsc_status fsc_launch_env_parse(fsc_env_lookup lookup, void *lookup_ctx, fsc_launch_env *out) {
    FSC_CHECK_ARG(out);
    memset(out, 0, sizeof *out);
    out->world = 1;
    out->timeout_s = 60.0;
    out->comm_timeout_s = 600.0;
    int chosen = -1;
    const char *force = env_get(lookup, lookup_ctx, "FSC_LAUNCHER");
    if (force && *force) {
        if (strcmp(force, "none") != 0) {
            for (size_t i = 0; i < N_LAUNCHERS; i++)
                if (strcmp(force, launchers[i].name) == 0) chosen = (int)i;
            if (chosen < 0)
                return fsc_error(FSC_ERR_INVALID, "FSC_LAUNCHER is \"%s\" (known: torchrun, slurm, openmpi, none)", force);
        }
    } else {
        for (size_t i = 0; i < N_LAUNCHERS && chosen < 0; i++)
            if (env_get(lookup, lookup_ctx, launchers[i].rank) || env_get(lookup, lookup_ctx, launchers[i].size) ||
                env_get(lookup, lookup_ctx, launchers[i].local))
                chosen = (int)i;
    }
    if (chosen >= 0) {
        char who[64];
        snprintf(who, sizeof who, "%s launch", launchers[chosen].name);
        /* mpirun inside a Slurm allocation inherits the batch script's SLURM_* variables (every process the same
         * SLURM_PROCID, or none under salloc): refuse to guess unless both name the same rank of the same world */
        const char *ompi = env_get(lookup, lookup_ctx, "OMPI_COMM_WORLD_SIZE"),
                   *ompi_rank = env_get(lookup, lookup_ctx, "OMPI_COMM_WORLD_RANK");
        if (!force && launchers[chosen].l == FSC_LAUNCHER_SLURM && (ompi || ompi_rank)) {
            const char *sn = env_get(lookup, lookup_ctx, "SLURM_NTASKS"),
                       *sr = env_get(lookup, lookup_ctx, "SLURM_PROCID");
            if (!ompi || !ompi_rank || !sn || !sr || strtol(ompi, NULL, 10) != strtol(sn, NULL, 10) ||
                strtol(ompi_rank, NULL, 10) != strtol(sr, NULL, 10))
                return fsc_error(FSC_ERR_INVALID, "both Slurm (SLURM_NTASKS=%s, SLURM_PROCID=%s) and Open MPI "
                                 "(OMPI_COMM_WORLD_SIZE=%s, OMPI_COMM_WORLD_RANK=%s) variables are set and disagree: "
                                 "set FSC_LAUNCHER=openmpi or FSC_LAUNCHER=slurm", sn ? sn : "unset",
                                 sr ? sr : "unset", ompi ? ompi : "unset", ompi_rank ? ompi_rank : "unset");
        }
        long world, rank, local;
        FSC_TRY(parse_long(who, launchers[chosen].size, env_get(lookup, lookup_ctx, launchers[chosen].size), 1,
                           MAX_WORLD, &world));
        FSC_TRY(parse_long(who, launchers[chosen].rank, env_get(lookup, lookup_ctx, launchers[chosen].rank), 0,
                           world - 1, &rank));
        FSC_TRY(parse_long(who, launchers[chosen].local, env_get(lookup, lookup_ctx, launchers[chosen].local), 0,
                           world - 1, &local));
        out->launcher = launchers[chosen].l;
        out->world = (int)world;
        out->rank = (int)rank;
        out->local_rank = (int)local;
    }
    const char *v;
    if ((v = env_get(lookup, lookup_ctx, "MASTER_ADDR")))
        FSC_TRY(copy_string("MASTER_ADDR", v, out->master_addr, sizeof out->master_addr));
    if ((v = env_get(lookup, lookup_ctx, "MASTER_PORT"))) {
        long port;
        FSC_TRY(parse_long("rendezvous", "MASTER_PORT", v, 1, 65535, &port));
        out->master_port = (int)port;
    }
    if ((v = env_get(lookup, lookup_ctx, "FSC_RENDEZVOUS_FILE")))
        FSC_TRY(copy_string("FSC_RENDEZVOUS_FILE", v, out->rendezvous_file, sizeof out->rendezvous_file));
    if ((v = env_get(lookup, lookup_ctx, "FSC_RENDEZVOUS_TIMEOUT")))
        FSC_TRY(parse_seconds("FSC_RENDEZVOUS_TIMEOUT", v, &out->timeout_s));
    if ((v = env_get(lookup, lookup_ctx, "FSC_COMM_TIMEOUT")))
        FSC_TRY(parse_seconds("FSC_COMM_TIMEOUT", v, &out->comm_timeout_s));
    return job_token(lookup, lookup_ctx, out->launcher, out);
}

/* The file's magic ("FSCRDV01": the file format is older than the TCP protocol's "FSCRDV02"). */
static const unsigned char FILE_MAGIC[8] = {'F', 'S', 'C', 'R', 'D', 'V', '0', '1'};

static fsc_status check_blob(const char *who, size_t len) {
    if (len == 0 || len > FSC_RENDEZVOUS_MAX_BLOB)
        return fsc_error(FSC_ERR_INVALID, "%s: blob of %zu bytes (1..%d allowed)", who, len, FSC_RENDEZVOUS_MAX_BLOB);
    return FSC_OK;
}

/* ---- file rendezvous: magic[8] world:u32 len:u32 blob[len], written to a temporary name and renamed ---- */

static fsc_status file_publish(const char *path, int world, const void *blob, size_t len) {
    char tmp[1200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return fsc_error(FSC_ERR_INVALID, "rendezvous file path too long: %s", path);
    unsigned char head[16];
    memcpy(head, FILE_MAGIC, 8);
    fsc_rdv_put_u32(head + 8, (uint32_t)world);
    fsc_rdv_put_u32(head + 12, (uint32_t)len);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return fsc_error(FSC_ERR_IO, "rendezvous: cannot create %s: %s", tmp, strerror(errno));
    int ok = write(fd, head, sizeof head) == (ssize_t)sizeof head && write(fd, blob, len) == (ssize_t)len &&
             fsync(fd) == 0;
    int err = errno;
    if (close(fd) != 0 && ok) ok = 0, err = errno;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) err = errno;
        unlink(tmp);
        return fsc_error(FSC_ERR_IO, "rendezvous: cannot write %s: %s", path, strerror(err));
    }
    /* make the rename durable (best effort: some shared filesystems refuse fsync on directories) */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    else snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return FSC_OK;
}

fsc_status fsc_rendezvous_file(const char *path, int rank, int world, void *blob, size_t len, double timeout_s) {
    FSC_CHECK_ARG(path);
    FSC_CHECK_ARG(blob);
    if (!*path) return fsc_error(FSC_ERR_INVALID, "rendezvous: empty file path");
    FSC_TRY(check_blob("fsc_rendezvous_file", len));
    if (world < 1 || world > MAX_WORLD || rank < 0 || rank >= world)
        return fsc_error(FSC_ERR_INVALID, "rendezvous: rank %d of world %d", rank, world);
    if (!(timeout_s > 0)) return fsc_error(FSC_ERR_INVALID, "rendezvous: timeout %g s must be positive", timeout_s);
    if (rank == 0) return file_publish(path, world, blob, len);
    unsigned char *buf = malloc(16 + len + 1);
    if (!buf) return fsc_error(FSC_ERR_NOMEM, "rendezvous: out of memory");
    double deadline = fsc_rdv_now() + timeout_s;
    uint32_t stale_world = 0;
    fsc_status st = FSC_OK;
    for (;;) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 && errno != ENOENT) {
            st = fsc_error(FSC_ERR_IO, "rendezvous: cannot open %s: %s", path, strerror(errno));
            break;
        }
        if (fd >= 0) {
            size_t got = 0;
            ssize_t r;
            while (got < 16 + len + 1 && (r = read(fd, buf + got, 16 + len + 1 - got)) > 0) got += (size_t)r;
            close(fd);
            if (got < 16 || memcmp(buf, FILE_MAGIC, 8) != 0) {
                st = fsc_error(FSC_ERR_FORMAT, "rendezvous: %s is not an fsc rendezvous file", path);
                break;
            }
            uint32_t w = fsc_rdv_get_u32(buf + 8), l = fsc_rdv_get_u32(buf + 12);
            if (l != len || got != 16 + len) {
                st = fsc_error(FSC_ERR_FORMAT, "rendezvous: %s holds a %u-byte id, rank %d expects %zu", path, l, rank, len);
                break;
            }
            if (w == (uint32_t)world) {
                memcpy(blob, buf + 16, len);
                break;
            }
            stale_world = w; /* left by an earlier run of another size: wait for rank 0 to replace it */
        }
        if (fsc_rdv_ms_until(deadline) == 0) {
            if (stale_world)
                st = fsc_error(FSC_ERR_TIMEOUT, "rendezvous: %s is for world size %u, not %d, and rank 0 did not "
                               "replace it within %g s (a file left by an earlier run? use a fresh path)", path,
                               stale_world, world, timeout_s);
            else
                st = fsc_error(FSC_ERR_TIMEOUT, "rendezvous: file %s did not appear within %g s (is rank 0 running "
                               "with the same FSC_RENDEZVOUS_FILE, on a filesystem every rank sees?)", path, timeout_s);
            break;
        }
        fsc_rdv_sleep(0.02);
    }
    free(buf);
    return st;
}

/* ---- fsc_cluster_run_from_env ---- */

static void *plugin_sym(fsc_device *dev, const char *name) {
    return dlsym(dev->plugin ? dev->plugin : RTLD_DEFAULT, name);
}

/* GPU of this process: the local rank's, or 0 when CUDA_VISIBLE_DEVICES leaves a single GPU visible. */
static int pick_ordinal(const fsc_launch_env *env) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && *vis && !strchr(vis, ',')) return 0;
    return env->local_rank;
}

static const char *no_token_reason(fsc_launcher l) {
    switch (l) {
    case FSC_LAUNCHER_TORCHRUN: return "TORCHELASTIC_RUN_ID is unset or \"none\": torchrun without --rdzv-id or --standalone";
    case FSC_LAUNCHER_SLURM: return "SLURM_JOB_ID is not set";
    case FSC_LAUNCHER_OPENMPI: return "none of PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid, OMPI_MCA_orte_ess_jobid is set";
    default: return "no launcher names the job";
    }
}

/* One process per GPU: the cuda device and the NCCL communicator of the cuda plug-in. */
static fsc_status run_nccl(const fsc_launch_env *envp, const char *who, double timeout_s, int native, fsc_rank_fn fn,
                           void *arg) {
    fsc_launch_env env = *envp;
    env.comm_timeout_s = timeout_s;
    if (env.world > 1 && !env.rendezvous_file[0] && (!env.master_addr[0] || !env.master_port))
        return fsc_error(FSC_ERR_INVALID, "%s: a world of %d processes on the cuda device (NCCL) needs a "
                         "rendezvous: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free port) or "
                         "FSC_RENDEZVOUS_FILE (a path every rank sees); for the cpu device under mpirun, set "
                         "FSC_DEVICE=cpu", who, env.world);
    if (env.world > 1 && !env.rendezvous_file[0] && !env.token[0])
        return fsc_error(FSC_ERR_INVALID, "%s: the TCP rendezvous admits only ranks that know the job's token, and "
                         "there is none (%s): set FSC_RENDEZVOUS_TOKEN to the same secret on every rank (for example "
                         "export FSC_RENDEZVOUS_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n') before "
                         "launching), or use FSC_RENDEZVOUS_FILE", who, no_token_reason(env.launcher));
    fsc_device *dev = NULL;
    fsc_device_opts dopts = {0};
    dopts.ordinal = pick_ordinal(&env);
    fsc_status s = fsc_device_create("cuda", &dopts, &dev);
    if (s != FSC_OK) return fsc_error_rank(s, "%s", who);
    fsc_nccl_get_unique_id_fn get_id;
    fsc_nccl_comm_open_fn comm_open;
    void *p1 = plugin_sym(dev, "fsc_nccl_get_unique_id"), *p2 = plugin_sym(dev, "fsc_nccl_comm_open");
    memcpy(&get_id, &p1, sizeof get_id);
    memcpy(&comm_open, &p2, sizeof comm_open);
    if (!p1 || !p2) {
        fsc_device_free(dev);
        return fsc_error(FSC_ERR_UNSUPPORTED, "%s: the cuda plug-in has no NCCL communicator "
                         "(fsc_nccl_get_unique_id/fsc_nccl_comm_open missing)", who);
    }
    unsigned char id[FSC_UNIQUE_ID_BYTES] = {0};
    if (env.rank == 0) s = get_id(id, sizeof id);
    if (s == FSC_OK && env.world > 1) {
        if (env.rendezvous_file[0])
            s = fsc_rendezvous_file(env.rendezvous_file, env.rank, env.world, id, sizeof id, env.timeout_s);
        else
            s = fsc_rendezvous_tcp(env.master_addr, env.master_port, env.token, env.rank, env.world, id, sizeof id,
                                   env.timeout_s);
    }
    const fsc_comm_ops *cops = NULL;
    void *cctx = NULL;
    if (s == FSC_OK)
        s = comm_open(FSC_COMM_ABI_VERSION, id, sizeof id, env.rank, env.world, dev->ctx, env.comm_timeout_s, native,
                      &cops, &cctx);
    /* the communicator is up only once every rank has joined, so every rank has read the file */
    if (s == FSC_OK && env.rank == 0 && env.world > 1 && env.rendezvous_file[0]) unlink(env.rendezvous_file);
    fsc_comm *comm = NULL;
    if (s == FSC_OK) s = fsc_comm_wrap(cops, cctx, env.rank, env.world, "world", &comm);
    if (s != FSC_OK) {
        s = fsc_error_rank(s, "%s", who);
        fsc_device_free(dev);
        return s;
    }
    fsc_rank r = {.rank = env.rank, .world = env.world, .local_rank = env.local_rank, .dev = dev, .comm = comm};
    s = fn(&r, arg);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fsc_last_error());
    fsc_comm_free(comm);
    fsc_device_free(dev);
    if (s == FSC_OK) return FSC_OK;
    fsc_error(s, "%s", msg[0] ? msg : fsc_status_str(s));
    return fsc_error_rank(s, "%s", who); /* a failure agreed from another rank keeps that rank's name */
}

/* ---- one process per rank on the cpu device: the MPI plug-in ---- */

/* $FSC_MPI_PLUGIN alone when set (a file or a folder holding libfsc_mpi.so), else the places
 * fsc_plugin_places lists (the executable's folder, its ../lib, beside libfsc.so, the loader's path).
 * RTLD_GLOBAL: Open MPI's own components resolve symbols of libmpi. */
static fsc_status load_mpi(const char *who, int world, char *path, size_t cap, void **out) {
    char tried[1024], cands[FSC_PLUGIN_PLACES][PATH_MAX + 64];
    int nc = fsc_plugin_candidates(getenv("FSC_MPI_PLUGIN"), "libfsc_mpi.so", cands);
    if ((*out = fsc_plugin_open(cands, nc, RTLD_NOW | RTLD_GLOBAL, path, cap, tried, sizeof tried))) return FSC_OK;
    int no_runtime = strstr(tried, "libmpi") != NULL;
    return fsc_error(FSC_ERR_UNSUPPORTED, "%s: %d processes on the cpu device talk through MPI, and %s (tried: %s). "
                     "Build the plug-in with `make mpi` where mpicc is installed (apt-get install libopenmpi-dev "
                     "openmpi-bin; `make install` then puts it beside libfsc.so), or set FSC_MPI_PLUGIN to its "
                     "path (build/libfsc_mpi.so), and start the program with mpirun -n N; or run simulated ranks in one process instead (no launcher variables)", who,
                     world, no_runtime ? "the MPI runtime (libmpi) is not installed" : "the MPI plug-in libfsc_mpi.so "
                     "was not found", tried);
}

static fsc_status run_mpi(const fsc_launch_env *env, const char *who, const fsc_cluster_opts *o, double timeout_s,
                          fsc_rank_fn fn, void *arg) {
    if (env->launcher != FSC_LAUNCHER_OPENMPI && env->launcher != FSC_LAUNCHER_SLURM)
        return fsc_error(FSC_ERR_UNSUPPORTED, "%s: processes on the cpu device talk through MPI, which %s cannot "
                         "start: use mpirun -n %d <program> (or srun --mpi=pmix -n %d)", who,
                         fsc_launcher_name(env->launcher), env->world, env->world);
    char path[PATH_MAX + 32];
    void *h = NULL;
    FSC_TRY(load_mpi(who, env->world, path, sizeof path, &h));
    void *sym = dlsym(h, "fsc_mpi_comm_open");
    fsc_mpi_comm_open_fn open_fn;
    memcpy(&open_fn, &sym, sizeof open_fn);
    if (!sym) {
        dlclose(h);
        return fsc_error(FSC_ERR_INVALID, "%s: %s is not the fsc MPI plug-in (no fsc_mpi_comm_open)", who, path);
    }
    const fsc_comm_ops *cops = NULL;
    void *cctx = NULL;
    fsc_clear_error();
    fsc_status s = open_fn(FSC_COMM_ABI_VERSION, fsc_error, env->rank, env->world, timeout_s, o->reduce_native, &cops, &cctx);
    fsc_comm *comm = NULL;
    if (s == FSC_OK) s = fsc_comm_wrap(cops, cctx, env->rank, env->world, "world", &comm);
    fsc_device *dev = NULL;
    fsc_device_opts dopts = {.threads = o->threads_per_rank ? o->threads_per_rank : 1};
    if (s == FSC_OK) s = fsc_device_create("cpu", &dopts, &dev);
    if (s != FSC_OK) {
        s = fsc_error_rank(s, "%s", who);
        fsc_comm_free(comm); /* the plug-in stays loaded: MPI cannot be initialized twice in a process */
        return s;
    }
    fsc_rank r = {.rank = env->rank, .world = env->world, .local_rank = env->local_rank, .dev = dev, .comm = comm};
    s = fn(&r, arg);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fsc_last_error());
    fsc_device_free(dev);
    fsc_comm_free(comm); /* the last communicator finalizes MPI (unless it broke) */
    if (s == FSC_OK) return FSC_OK;
    fsc_error(s, "%s", msg[0] ? msg : fsc_status_str(s));
    return fsc_error_rank(s, "%s", who);
}

fsc_status fsc_launch_run_process(const fsc_launch_env *env, const char *who, const fsc_cluster_opts *o,
                                  double timeout_s, fsc_rank_fn fn, void *arg) {
    if (o->device && strcmp(o->device, "cuda") == 0) return run_nccl(env, who, timeout_s, o->reduce_native, fn, arg);
    return run_mpi(env, who, o, timeout_s, fn, arg);
}
