/* ckpt_tool: inspect and verify fsc training checkpoints, with the public API only.
 *   ckpt_tool list DIR      the checkpoints in DIR (step, format, files), the newest complete one marked,
 *                           and temporary directories (saves in progress, leftovers of interrupted ones)
 *   ckpt_tool show CKPT     configuration, step, loss scaler, files, and every tensor: dtype, shape and
 *                           pieces (file, element range, crc32)
 *   ckpt_tool verify CKPT   check the metadata, every file's structure and every checksum, and the
 *                           parameters against the recorded configuration of a GPT, a Llama or a family
 *                           the program registered
 *   ckpt_tool flight DIR    read the ranks' flight records (DIR/flight-rank-N.json, fsc/flight.h) and say
 *                           where they diverge: the rank, the collective, its number and group
 * CKPT is a checkpoint directory (DIR/step-NNNNNNNN) or a DIR, meaning its newest complete checkpoint.
 * Exit status: 0 fine, 1 a damaged or missing checkpoint (the message names the file and tensor) or no
 * readable flight record, 2 usage. */
#define _XOPEN_SOURCE 700 /* lstat, scandir, NAME_MAX: POSIX, not C11 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"

/* The name the program was run as (fsc-ckpt when installed, ckpt_tool in build/): its usage and messages use it. */
static const char *prog = "ckpt_tool";

static void usage(FILE *f) {
    fprintf(f, "usage: %s list DIR | show CKPT | verify CKPT | flight DIR | --version\n"
               "Inspect and verify fsc training checkpoints. CKPT: DIR/step-NNNNNNNN, or DIR for its newest.\n"
               "flight DIR: where the ranks of a failed or hung run diverge, from their flight records.\n",
            prog);
}

/* The room for a path below dir: dir, '/', and a name of at most NAME_MAX bytes (step-NNNNNNNN, metadata.json). Paths
 * are sized from the argument, never cut: a cut path names another file, and the message its cause. */
static size_t below(const char *dir) { return strlen(dir) + NAME_MAX + 2; }

/* The path and why a system call on it failed, whole (a library message holds at most 1 KiB). */
static int say_errno(const char *path) {
    fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
    return 1;
}

/* CKPT read into *m, its path in path (below(arg) bytes): the metadata (show), or everything verified (verify). CKPT
 * is one checkpoint (its metadata there, even a link that fails: the read says why), or a DIR, read as its newest
 * complete one, taken again when a live run removes it meanwhile (fsc_ckpt_latest_read). 0, or 1 with the message
 * printed. */
static int read_ckpt(const char *arg, int verify, char *path, fsc_ckpt_meta **m) {
    struct stat st;
    int64_t step = 0;
    fsc_status s;
    path[0] = 0;
    if (lstat(arg, &st) != 0) return say_errno(arg); /* not there at all: say so, not that it holds none */
    snprintf(path, below(arg), "%s/metadata.json", arg);
    const int one = lstat(path, &st) == 0;
    if (!one && errno == ENAMETOOLONG) return say_errno(path); /* and so are its checkpoints' */
    if (one) {
        snprintf(path, below(arg), "%s", arg);
        s = verify ? fsc_ckpt_verify(path, m) : fsc_ckpt_meta_read(path, m);
    } else {
        s = fsc_ckpt_latest_read(arg, verify ? FSC_CKPT_READ_VERIFY : 0, path, below(arg), &step, m, NULL, 0);
    }
    if (s == FSC_OK && step < 0) {
        fprintf(stderr, "%s: %s holds no complete checkpoint (no metadata.json)\n", prog, arg);
        return 1;
    }
    if (s != FSC_OK && verify && path[0]) fprintf(stderr, "%s: %s: damaged: %s\n", prog, path, fsc_last_error());
    else if (s != FSC_OK) fprintf(stderr, "%s: %s\n", prog, fsc_last_error()); /* DIR not listed, or show */
    return s != FSC_OK;
}

static const char *kind_name(fsc_parallel_kind k) { return fsc_parallel_kind_name(k); }
static const char *shard_name(fsc_shard_strategy s) {
    static const char *const n[] = { "full", "grad_op", "none", "hybrid" };
    return (unsigned)s < 4 ? n[s] : "?";
}

static void print_meta(const char *path, const fsc_ckpt_meta *m) {
    char shape[96];
    printf("checkpoint %s: %s format, step %lld (optimizer steps %lld), seed %llu\n", path,
           fsc_ckpt_format_name(m->format), (long long)m->step, (long long)m->optim_steps, (unsigned long long)m->seed);
    printf("run: %s\n", m->run_id);
    printf("model: %s\n", m->model_config ? m->model_config : "{}"); /* its config (model.h), whole, as recorded */
    if (m->optim.kind == FSC_OPT_ADAMW)
        printf("optimizer: adamw, lr %g, betas %g %g, eps %g, weight decay %g\n", (double)m->optim.lr,
               (double)m->optim.beta1, (double)m->optim.beta2, (double)m->optim.eps, (double)m->optim.weight_decay);
    else
        printf("optimizer: sgd, lr %g, momentum %g, weight decay %g\n", (double)m->optim.lr, (double)m->optim.momentum,
               (double)m->optim.weight_decay);
    printf("written by: %s", kind_name(m->kind));
    if (m->kind == FSC_PAR_FSDP) printf(" (%s)", shard_name(m->shard));
    printf(" on %d rank%s, tp %d, pp %d, ep %d, accum %d, parameters %s, reduction %s, clip %g\n", m->world,
           m->world == 1 ? "" : "s", m->tp, m->pp > 1 ? m->pp : 1, m->ep, m->accum, fsc_dtype_name(m->param_dtype),
           fsc_dtype_name(m->reduce_dtype), (double)m->clip);
    if (m->scaler_enabled)
        printf("loss scaler: scale %g, %d good steps, %lld skipped\n", (double)m->scaler.scale, m->scaler.good_steps,
               (long long)m->scaler.skipped);
    else
        printf("loss scaler: off\n");
    if (m->skipped_in_row > 0) /* non-finite steps skipped at the end, which max_skipped_steps counts on from */
        printf("steps skipped in a row at the end: %lld\n", (long long)m->skipped_in_row);
    printf("files (%d):\n", m->nfiles);
    for (int i = 0; i < m->nfiles; i++) printf("  %d %s\n", i, m->files[i]);
    uint64_t total = 0;
    for (int i = 0; i < m->ntensors; i++) total += m->tensors[i].numel;
    printf("tensors (%d, %llu elements):\n", m->ntensors, (unsigned long long)total);
    for (int i = 0; i < m->ntensors; i++) {
        const fsc_ckpt_tensor *t = &m->tensors[i];
        fsc_shape_str(shape, sizeof shape, t->ndim, t->shape);
        printf("  %-40s %-4s %-14s %d piece%s\n", t->name, "F32", shape, t->npieces, t->npieces == 1 ? "" : "s");
        for (int k = 0; k < t->npieces; k++) {
            const fsc_ckpt_piece *p = &t->pieces[k];
            printf("      [%llu, %llu) in %s as %s, crc32 %08x\n", (unsigned long long)p->first,
                   (unsigned long long)(p->first + p->n), m->files[p->file], p->entry, (unsigned)p->crc32);
        }
    }
}

/* scandir's order of step-N names: by step (more digits: a later step; step-100000000 after step-99999999, which
 * alphasort puts before it), each leftover step-N.tmp-* beside its step */
static int by_step(const struct dirent **a, const struct dirent **b) {
    const char *x = (*a)->d_name, *y = (*b)->d_name;
    const size_t dx = strspn(x + (strncmp(x, "step-", 5) ? 0 : 5), "0123456789"),
                 dy = strspn(y + (strncmp(y, "step-", 5) ? 0 : 5), "0123456789");
    return dx != dy ? (dx < dy ? -1 : 1) : strcmp(x, y);
}

static int cmd_list(const char *dir) {
    struct dirent **names = NULL;
    const int nn = scandir(dir, &names, NULL, by_step); /* step-NNNNNNNN in step order */
    if (nn < 0) {
        fprintf(stderr, "%s: cannot list %s: %s\n", prog, dir, strerror(errno));
        return 1;
    }
    char *newest = calloc(1, below(dir)), *path = malloc(below(dir));
    if (!newest || !path) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    int64_t step = -1;
    if (fsc_ckpt_latest(dir, newest, below(dir), &step) != FSC_OK) fprintf(stderr, "%s: %s\n", prog, fsc_last_error());
    int n = 0;
    for (int i = 0; i < nn; i++) {
        const struct dirent *de = names[i];
        if (strncmp(de->d_name, "step-", 5) != 0) continue;
        snprintf(path, below(dir), "%s/%s", dir, de->d_name);
        n++;
        if (strstr(de->d_name, ".tmp-")) {
            /* a live run's save (or removal) in progress looks the same: its run holds DIR/.lock meanwhile */
            printf("%-32s temporary: a save in progress, or the leftover of an interrupted one (a resume removes "
                   "leftovers a save made)\n", de->d_name);
            continue;
        }
        fsc_ckpt_meta *m = NULL;
        if (fsc_ckpt_meta_read(path, &m) != FSC_OK) {
            printf("%-32s unreadable: %s\n", de->d_name, fsc_last_error());
            continue;
        }
        printf("%-32s step %lld, run %.8s, %s, %d file%s, written by %s on %d rank%s%s\n", de->d_name,
               (long long)m->step, m->run_id, fsc_ckpt_format_name(m->format), m->nfiles, m->nfiles == 1 ? "" : "s",
               kind_name(m->kind), m->world, m->world == 1 ? "" : "s", !strcmp(path, newest) ? "  (newest)" : "");
        fsc_ckpt_meta_free(m);
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
    free(newest), free(path);
    if (n == 0) printf("no checkpoints in %s\n", dir);
    return 0;
}

/* The diagnosis of DIR's flight records. */
static int cmd_flight(const char *dir) {
    static char report[1 << 16];
    struct stat st;
    if (lstat(dir, &st) != 0) return say_errno(dir);
    if (fsc_flight_diagnose_dir(dir, report, sizeof report) != FSC_OK) {
        fprintf(stderr, "%s: %s\n", prog, fsc_last_error());
        return 1;
    }
    fputs(report, stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 0 && argv[0] && argv[0][0]) {
        const char *slash = strrchr(argv[0], '/');
        prog = slash ? slash + 1 : argv[0];
    }
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("%s %s\n", prog, fsc_version_string());
        return 0;
    }
    if (argc != 3) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "list")) return cmd_list(argv[2]);
    if (!strcmp(cmd, "flight")) return cmd_flight(argv[2]);
    if (strcmp(cmd, "show") != 0 && strcmp(cmd, "verify") != 0) {
        fprintf(stderr, "%s: unknown command '%s'\n", prog, cmd);
        usage(stderr);
        return 2;
    }
    char *path = malloc(below(argv[2]));
    fsc_ckpt_meta *m = NULL;
    if (!path) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    if (read_ckpt(argv[2], !strcmp(cmd, "verify"), path, &m) != 0) {
        free(path);
        return 1;
    }
    if (!strcmp(cmd, "show")) {
        print_meta(path, m);
        fsc_ckpt_meta_free(m);
        free(path);
        return 0;
    }
    size_t pieces = 0; /* verify: metadata, files, checksums, the recorded model against its tensors */
    uint64_t elems = 0;
    for (int i = 0; i < m->ntensors; i++) {
        pieces += (size_t)m->tensors[i].npieces;
        elems += m->tensors[i].numel;
    }
    printf("%s: ok (%d tensors, %llu elements, %zu pieces in %d files, every checksum matches)\n", path, m->ntensors,
           (unsigned long long)elems, pieces, m->nfiles);
    fsc_ckpt_meta_free(m);
    free(path);
    return 0;
}
