/* What a run reports while it runs: the results the ranks share (run_state's buffers, gathered from every process
 * under a launcher), the banner before the first step, rank 0's progress line and --log record of every step, and
 * each rank's --trace file at the end.
 * Not here: how a record is formatted (../train_log.h), the summary at the end of a run (summary.c). */
#define _XOPEN_SOURCE 700 /* fileno, fdopen, ftruncate: POSIX, not C11 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include "train.h"
#include "../train_log.h"

/* The result buffers of a run, zeroed (losses and validation losses NAN): 0, or -1 when out of memory
 * (results_free frees what was made). The per-step ones hold the last RESULT_STEPS steps. */
int results_alloc(run_state *st, int steps, int world) {
    st->first = steps > RESULT_STEPS ? steps - RESULT_STEPS : 0;
    st->timed = 0, st->first_ms = st->sum_ms = st->moe_dropped = st->moe_assigned = 0;
    st->loss_bits = 14695981039346656037ull;
    size_t ns = (size_t)(steps - st->first) + 1, nw = (size_t)world;
    st->losses = calloc(ns, sizeof *st->losses);
    st->step_ms = calloc(ns, sizeof *st->step_ms);
    st->aux = calloc(ns, sizeof *st->aux);
    st->assigned = calloc(ns, sizeof *st->assigned);
    st->dropped = calloc(ns, sizeof *st->dropped);
    st->peak = calloc(nw, sizeof *st->peak);
    st->hpeak = calloc(nw, sizeof *st->hpeak);
    st->lay = calloc(nw, sizeof *st->lay);
    st->lr = calloc(ns, sizeof *st->lr);
    st->val_loss = malloc(ns * sizeof *st->val_loss);
    for (size_t i = 0; st->val_loss && i < ns; i++) st->val_loss[i] = NAN;
    for (size_t i = 0; st->losses && i < ns; i++) st->losses[i] = NAN; /* not run (a resumed run's first steps) */
    for (size_t i = 0; st->lr && i < ns; i++) st->lr[i] = NAN;         /* not run; a skipped step has its rate */
    if (!st->lr || !st->val_loss) return -1;
    return st->losses && st->step_ms && st->aux && st->assigned && st->dropped && st->peak && st->hpeak && st->lay ? 0 : -1;
}

void results_free(run_state *st) {
    free(st->losses);
    free(st->step_ms);
    free(st->aux);
    free(st->assigned);
    free(st->dropped);
    free(st->peak);
    free(st->hpeak);
    free(st->lay);
    free(st->lr);
    free(st->val_loss);
    free(st->params);
    free(st->pstats);
}

/* Rank 0's results of step (from 0): the totals of every step, and the values of one in the window. */
static void record_step(run_state *st, int step, const fsc_step_info *info, double ms, double lr, double val_loss) {
    if (st->timed++ == 0) st->first_ms = ms;
    else st->sum_ms += ms;
    st->skipped_steps += info->skipped != 0;
    st->loss_scale = info->loss_scale;
    if (isfinite(info->loss)) st->moe_dropped += (double)info->moe_dropped, st->moe_assigned += (double)info->moe_assigned;
    uint64_t b;
    memcpy(&b, &info->loss, sizeof b);
    for (int i = 0; i < 8; i++) st->loss_bits = (st->loss_bits ^ (b >> 8 * i & 0xff)) * 1099511628211ull;
    if (step < st->first) return;
    size_t k = (size_t)(step - st->first);
    st->losses[k] = info->loss, st->step_ms[k] = ms, st->lr[k] = lr, st->val_loss[k] = val_loss;
    st->aux[k] = info->aux_loss, st->assigned[k] = info->moe_assigned, st->dropped[k] = info->moe_dropped;
}

/* --check-ddp: whether two runs had the same loss at every step, bit for bit. */
int same_losses(const run_state *a, const run_state *b) {
    size_t n = (size_t)(a->cfg->steps - a->first);
    return a->loss_bits == b->loss_bits && a->first == b->first && memcmp(a->losses, b->losses, n * sizeof(double)) == 0;
}

/* The trace's clock (fsc_trace_now_us), so --log times and --trace spans read on one clock. */
double now_ms(void) { return 1e-3 * fsc_trace_now_us(); }

/* peak (FSC_TAG_COUNT + 1): dev's peak bytes by tag, then the peak of their sum (train_log.h's records). */
void read_peaks(const fsc_device *dev, size_t *peak) {
    for (int t = 0; t < FSC_TAG_COUNT; t++) peak[t] = fsc_device_peak_bytes(dev, (fsc_tag)t);
    peak[FSC_TAG_COUNT] = fsc_device_peak_total(dev);
}

/* One rank per process: every rank's slots of the per-rank results (peak memory, layout, pipeline
 * measurements) to every rank, so rank 0 reports them as a single process does. Agrees on s first, so no rank
 * waits in a gather for one that failed. */
fsc_status share_per_rank(fsc_rank *r, run_state *st, fsc_status s) {
    FSC_TRY(fsc_comm_agree(r->comm, r->dev, s));
    struct { void *base; size_t bytes; } slot[] = {
        {st->peak, sizeof *st->peak}, {st->hpeak, sizeof *st->hpeak}, {st->lay, sizeof *st->lay},
        {st->pstats, sizeof *st->pstats}};
    for (size_t i = 0; i < sizeof slot / sizeof slot[0]; i++) {
        if (!slot[i].base) continue;
        size_t b = slot[i].bytes, mine = (size_t)r->rank * b;
        uint8_t *d = NULL, *host = slot[i].base;
        FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_COMM, b * (size_t)r->world, (void **)&d));
        s = fsc_device_upload(r->dev, d + mine, host + mine, b);
        if (s == FSC_OK) s = fsc_comm_all_gather(r->comm, d + mine, d, b, FSC_U8);
        if (s == FSC_OK) s = fsc_device_download(r->dev, host, d, b * (size_t)r->world);
        fsc_device_release(r->dev, d);
        FSC_TRY(s);
    }
    return FSC_OK;
}

/* Rank 0, after step (from 0): its results recorded (record_step), the progress line on stdout and the step's --log
 * record. A --log that cannot be written fails the run. */
fsc_status report_step(run_state *st, fsc_rank *r, fsc_engine *e, const run_measures *m, int step,
                       const fsc_step_info *info, double ms, double val_loss) {
    const train_config *c = st->cfg;
    size_t peak[FSC_TAG_COUNT + 1], hpeak[FSC_TAG_COUNT + 1];
    record_step(st, step, info, ms, fsc_engine_lr(e), val_loss);
    char moe[128] = "";
    if (c->moe_experts) {
        snprintf(moe, sizeof moe, " | aux %.4f | dropped %lld/%lld", info->aux_loss, (long long)info->moe_dropped,
                 (long long)info->moe_assigned);
    }
    fsc_device *host = fsc_engine_host_device(e); /* offload: host memory has its own ledger */
    if (host) {
        read_peaks(host, hpeak);
        snprintf(moe + strlen(moe), sizeof moe - strlen(moe), " | host peak %.1f MiB",
                 (double)hpeak[FSC_TAG_COUNT] / 1048576.0);
    }
    char extra[192];
    snprintf(extra, sizeof extra, "%s%s", moe, info->skipped ? " | skipped (inf/nan loss or gradients)" : "");
    double mean = st->timed > 1 ? st->sum_ms / (st->timed - 1) : st->first_ms;
    read_peaks(r->dev, peak);
    step_record rec = {.step = step + 1, .steps = c->steps, .loss = info->loss, .lr = fsc_engine_lr(e),
                       .val_loss = val_loss, .validated = st->val && val_due(c, step), .ms = ms,
                       .tokens = m->tokens, .flops = m->flops,
                       .peak_flops = m->peak_flops, .eta_s = mean * 1e-3 * (c->steps - step - 1),
                       .elapsed_s = (now_ms() - m->t0_ms) * 1e-3, .peak = peak,
                       .host_peak = host ? hpeak : NULL, .extra = extra, .skipped = info->skipped != 0,
                       .loss_scale = precision_dtype[c->precision] == FSC_F16 ? info->loss_scale : 0};
    print_progress(stdout, &rec);
    if (st->log && log_step(st->log, &rec) != 0)
        return fsc_error(FSC_ERR_IO, "--log %s: cannot write: %s", c->log, strerror(errno));
    return FSC_OK;
}

int make_dirs(const char *dir) {
    char path[4096];
    const size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) return errno = n ? ENAMETOOLONG : ENOENT, -1;
    memcpy(path, dir, n + 1);
    for (char *p = path + 1; *p; p++) /* each folder above it, then it */
        if (*p == '/' && p[-1] != '/') {
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    struct stat sb; /* it, made or found: a file or a device there is no directory (ENOTDIR) */
    if (mkdir(path, 0777) == 0) return 0;
    if (errno != EEXIST || stat(path, &sb) != 0) return -1;
    return S_ISDIR(sb.st_mode) ? 0 : (errno = ENOTDIR, -1);
}

/* Whether the regular file at path ends inside a line (its last byte is not a newline: a run that failed writing it,
 * a full disk); an empty or unreadable file, or one that is not regular (a FIFO: not opened to be read), does not. */
static int ends_mid_line(const char *path) {
    struct stat sb;
    FILE *f = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? fopen(path, "rb") : NULL;
    int c = f && fseek(f, -1, SEEK_END) == 0 ? fgetc(f) : '\n';
    if (f) fclose(f);
    return c != EOF && c != '\n';
}

/* The input of the run that the existing file at path is (the same device and inode), as "--data FILE": a file of
 * --data or --val-data, --config's file, or (with load 1) --load's; NULL when none (or path does not exist). */
static const char *input_at(const train_config *c, const fsc_data *data, const fsc_data *val, int load,
                            const char *path, char *buf, size_t cap) {
    struct stat o, i;
    if (stat(path, &o) != 0) return NULL;
    const fsc_data *streams[2] = { data, val };
    for (int k = 0; k < 2; k++)
        for (int f = 0; streams[k] && f < fsc_data_files(streams[k]); f++) {
            const char *in = fsc_data_file(streams[k], f);
            if (stat(in, &i) == 0 && i.st_dev == o.st_dev && i.st_ino == o.st_ino)
                return snprintf(buf, cap, "%s %s", k ? "--val-data's" : "--data's", in), buf;
        }
    const char *one[2] = { c->config, load ? c->load : NULL }, *name[2] = { "--config", "--load" };
    for (int k = 0; k < 2; k++)
        if (one[k] && stat(one[k], &i) == 0 && S_ISREG(i.st_mode) && i.st_dev == o.st_dev && i.st_ino == o.st_ino)
            return snprintf(buf, cap, "%s %s", name[k], one[k]), buf;
    return NULL;
}

/* Whether paths a and b name one file: the same file where one exists (a link to it too), else the same name in the
 * same directory (where either would be made). */
static int same_output(const char *a, const char *b) {
    struct stat x, y;
    if (stat(a, &x) == 0 && stat(b, &y) == 0) return x.st_dev == y.st_dev && x.st_ino == y.st_ino;
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    const char *na = sa ? sa + 1 : a, *nb = sb ? sb + 1 : b;
    if (strcmp(na, nb) != 0) return 0;
    char da[4096], db[4096];
    snprintf(da, sizeof da, "%.*s", sa ? (int)(sa - a) + 1 : 1, sa ? a : ".");
    snprintf(db, sizeof db, "%.*s", sb ? (int)(sb - b) + 1 : 1, sb ? b : ".");
    return stat(da, &x) == 0 && stat(db, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* --trace DIR: the files of ranks this run does not have (rank-N.json, N >= world: an earlier run's with more ranks)
 * moved aside to rank-N.json.prev (replacing an older one), else removed, so tools/trace_merge and tools/pipe_timeline
 * do not show them as this run's ranks. The files of this run's ranks are replaced as they are made. Best effort, as
 * the flight recorder's records (a file that can be neither moved nor removed stays). */
static void trace_set_aside(const char *dir, int world) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *p = e->d_name + 5;
        if (strncmp(e->d_name, "rank-", 5) != 0 || *p < '0' || *p > '9' || (*p == '0' && p[1] != '.')) continue;
        long n = 0;
        for (; *p >= '0' && *p <= '9'; p++) n = n >= world ? n : n * 10 + (*p - '0'); /* (held at world and past) */
        if (strcmp(p, ".json") != 0 || n < world) continue;
        char from[4200], to[4200];
        snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
        snprintf(to, sizeof to, "%s/%s.prev", dir, e->d_name);
        if (rename(from, to) != 0 && errno != ENOENT) (void)unlink(from);
    }
    closedir(d);
}

/* Whether descriptor fd is the file of descriptor other (stdout, stderr). */
static int same_fd_file(int fd, int other) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstat(other, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* What the run writes besides checkpoints, on rank 0's process: --save and --init-save checked (check_weights_path);
 * --log opened, not yet emptied or written (begin_log, once the run has started); --trace's directory (every process
 * makes it; rank 0's sets aside an earlier run's files of ranks this one does not have: trace_set_aside). None of --log, --save and
 * --init-save may be a file the run reads (data and val, the opened streams; --save over --load's file, a run that
 * trains its weights on, is allowed) or another of the three: refused before it is written. (--ckpt-dir's train_config.json:
 * write_run_config, once the run is accepted.) */
int open_outputs(const train_config *c, int me, const fsc_data *data, const fsc_data *val,
                 FILE **log, char *err, size_t cap) {
    *log = NULL;
    if (c->trace && make_dirs(c->trace) != 0)
        return snprintf(err, cap, "--trace %s: cannot create the directory: %s", c->trace, strerror(errno)), -1;
    if (me != 0) return 0;
    if (c->trace) trace_set_aside(c->trace, c->world);
    const char *out[3] = { c->log, c->save, c->init_save }, *name[3] = { "--log", "--save", "--init-save" };
    char in[4200];
    for (int k = 0; k < 3; k++)
        if (out[k] && input_at(c, data, val, k != 1, out[k], in, sizeof in))
            return snprintf(err, cap, "%s %s is %s, which the run reads: writing it would destroy it; give another "
                            "file", name[k], out[k], in), -1;
    for (int k = 0; k < 3; k++) /* two outputs in one file: the later would replace the earlier */
        for (int j = k + 1; j < 3; j++)
            if (out[k] && out[j] && same_output(out[k], out[j]))
                return snprintf(err, cap, "%s %s and %s %s are one file: the run would write one over the other; give "
                                "each its own file", name[k], out[k], name[j], out[j]), -1;
    if (c->save && check_weights_path("save", c->save, err, cap) != 0) return -1;
    if (c->init_save && check_weights_path("init-save", c->init_save, err, cap) != 0) return -1;
    if (c->log && !(*log = fopen(c->log, "a"))) /* not emptied here: a run refused before it starts (a bad --load, a
                                                  * --resume of another model) leaves an earlier run's log whole */
        return snprintf(err, cap, "--log %s: cannot open: %s", c->log, strerror(errno)), -1;
    for (int std = STDOUT_FILENO; *log && std <= STDERR_FILENO; std++) {
        /* --log /dev/stdout > out.txt: written through stdout's own offset; opened again, the file had one of its own
         * and the two wrote over each other's lines */
        const int fd = same_fd_file(fileno(*log), std) ? dup(std) : -1;
        FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
        if (f) fclose(*log), *log = f;
        else if (fd >= 0) close(fd);
    }
    return 0;
}

/* Empty --log's file of an earlier run's records: a regular file that is not also stdout's or stderr's (--log
 * /dev/stdout > out.txt: the shell emptied it, and the banner is in it by now). 0, or -1 with errno. */
static int empty_log(FILE *log) {
    const int fd = fileno(log);
    struct stat sb;
    if (fstat(fd, &sb) != 0) return -1;
    if (!S_ISREG(sb.st_mode) || same_fd_file(fd, STDOUT_FILENO) || same_fd_file(fd, STDERR_FILENO)) return 0;
    return ftruncate(fd, 0);
}

/* Once the run has started (start_run: --ckpt-dir locked, --load and --resume done), --log's first line, the config:
 * in a file emptied of an earlier run's records (a new run: empty_log), or after them (--resume: on a line of its own
 * after a last line that a failed run left cut short). Collective. */
fsc_status begin_log(fsc_rank *r, const run_state *st) {
    const train_config *c = st->cfg;
    fsc_status s = FSC_OK;
    if (r->rank == 0 && st->log) {
        const int bad = c->resume ? ends_mid_line(c->log) && fputc('\n', st->log) == EOF : empty_log(st->log) != 0;
        if (bad || log_config(st->log, config_object(st->asked)) != 0)
            s = fsc_error(FSC_ERR_IO, "--log %s: cannot write: %s", c->log, strerror(errno));
    }
    return fsc_comm_agree(r->comm, r->dev, s);
}

/* The lines before training: the model, the data, the ranks (rank 0's process prints; main silenced the others). */
void print_banner(const run_state *st, const fsc_data *data) {
    const train_config *c = st->cfg;
    const model_family *f = model_family_of(c);
    char pbuf[32];
    char kv[64] = "";
    f->describe(c, kv, sizeof kv);
    printf("model: %s, %d layers, width %d, %d heads%s, context %d, vocab %d: %zu parameters | data: %s, %zu tokens (%s, %d file%s) | "
           "world %d, parallel %s, %s\n", c->model,
           c->layers, c->dim, c->heads, kv, c->seq, c->vocab, st->nparams, c->data, st->ntok,
           fsc_data_format_name(fsc_data_format_of(data)), fsc_data_files(data), fsc_data_files(data) == 1 ? "" : "s", c->world,
           c->parallel == PAR_PIPE ? "pipe" : fsc_parallel_kind_name((fsc_parallel_kind)c->parallel),
           option_choice("precision", c->precision, pbuf, sizeof pbuf));
    if (c->moe_experts)
        printf("moe: %d of %d blocks (--moe-every %d) with %d experts, top-%d, capacity factor %g, aux %g; expert "
               "groups of %d rank%s (%d expert%s per rank)\n", f->moe_blocks(c), c->layers, c->moe_every,
               c->moe_experts, c->moe_top_k, (double)c->moe_capacity, (double)c->moe_aux, c->ep, c->ep == 1 ? "" : "s",
               c->moe_experts / c->ep, c->moe_experts / c->ep == 1 ? "" : "s");
    if (st->procs)
        printf("processes: %d, one rank each, %s\n", c->world, c->reduce == 1 ? "--reduce native: the communicator's own "
               "sums (bits may differ from simulated ranks)" : c->reduce == 2 ? "--reduce exact: int64 sums (the bits "
               "of any world size)" : "--reduce ordered: sums in rank order (the simulated ranks' bits)");
    fflush(stdout);
}

/* --accum (or --chunks) with --reduce exact's --unit and no pipeline: the units are the micro-batches, local batch / U
 * of them on each rank, whatever --accum says (the bits depend on the unit alone: docs/determinism.md). Not refused,
 * since runs that differ in --accum keep their bits by a fixed --unit (--world 1 --accum 12 --unit 2 against --world 2
 * --accum 3 --unit 2); said when --accum would have run other micro-batches. */
void note_unused_options(const train_config *c, const int *given) {
    const int local = c->batch / c->dp;
    if (c->unit > 0 && c->pp == 1 && (given[option_index("accum")] || given[option_index("chunks")]) &&
        c->accum != local / c->unit)
        fprintf(stderr, "fsc-train: note: %s %d has no effect: --unit %d sets the micro-batches (each rank runs its %d "
                "sequences as %d units of %d; docs/determinism.md)\n", c->chunks ? "--chunks" : "--accum", c->accum,
                c->unit, local, local / c->unit, c->unit);
}

/* --trace: rank r's file, DIR/rank-N.json. */
void trace_path(const fsc_rank *r, const train_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/rank-%d.json", c->trace, r->rank);
}

/* --trace: the end of rank r's streamed file (the spans still open, the closing lines); a full recorder is said
 * on stderr (the file says how many events it dropped). */
fsc_status write_trace(fsc_rank *r, const train_config *c, fsc_trace *tr) {
    char path[4200];
    trace_path(r, c, path, sizeof path);
    fsc_status ts = fsc_trace_write(tr, path);
    if (ts == FSC_OK && fsc_trace_dropped(tr))
        fprintf(stderr, "fsc-train: warning: rank %d's trace filled up at %zu event%s and dropped %zu later one%s "
                "(raise --trace-events)\n", r->rank, fsc_trace_count(tr), fsc_trace_count(tr) == 1 ? "" : "s",
                fsc_trace_dropped(tr), fsc_trace_dropped(tr) == 1 ? "" : "s");
    return ts;
}
