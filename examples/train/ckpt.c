/* Checkpoints and weights files: --ckpt-dir (another run's refused, locked while the run lives, its train_config.json),
 * --save-every and --keep-last, --resume (the newest checkpoint that loads, the options it was written with
 * compared), and the weights files --save and --init-save (checked writable before training).
 * Not here: the checkpoint format and its reader (lib/ckpt, docs/checkpoints.md). */
#define _XOPEN_SOURCE 700 /* fstatat, dirfd: POSIX, not C11 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "train.h"

/* " (12.3 MiB in 45 ms)": the bytes of the regular files in dir (a checkpoint's step directory) and the time. */
static void size_and_time(const char *dir, double ms, char *buf, size_t cap) {
    double bytes = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            bytes += (double)st.st_size;
    }
    if (d) closedir(d);
    snprintf(buf, cap, " (%.1f MiB in %.0f ms)", bytes / 1048576.0, ms);
}

/* A run without --resume starts a new run: a --ckpt-dir holding checkpoints belongs to another one, and
 * the library refuses the first save there (unless --ckpt-overwrite). Say so before training. A run that resumes
 * continues the run of the checkpoint it resumes: --ckpt-dir's newest must be of that run (the same directory, or a
 * copy), or none (an unreadable newest is left to the library's check at the first save). */
float lr_at(const train_config *c, int64_t step) {
    const fsc_lr_schedule sched = { .kind = (fsc_lr_kind)c->lr_schedule, .lr = c->lr, .min_lr = c->min_lr,
                                    .warmup = c->warmup, .total = c->steps };
    return fsc_lr_at(&sched, step);
}

/* Whether --resume continues the run whose newest checkpoint in --ckpt-dir is `newest`: nothing to resume is a new
 * run (but where --resume is --ckpt-dir); a checkpoint whose metadata does not read, on either side, is left to the
 * resume and to the library's check at the first save. */
static int resumes_run_of(const train_config *c, const char *newest) {
    char from[4096];
    int64_t at = -1;
    snprintf(from, sizeof from, "%s/metadata.json", c->resume); /* DIR/step-NNNNNNNN itself, or DIR's newest */
    if (access(from, F_OK) == 0) snprintf(from, sizeof from, "%s", c->resume), at = 0;
    else if (fsc_ckpt_latest(c->resume, from, sizeof from, &at) != FSC_OK) at = -1;
    if (at < 0) return !strcmp(c->resume, c->ckpt_dir);
    fsc_ckpt_meta *r = NULL, *m = NULL;
    int same = 1;
    if (fsc_ckpt_meta_read(from, &r) == FSC_OK && fsc_ckpt_meta_read(newest, &m) == FSC_OK)
        same = !strcmp(r->run_id, m->run_id);
    fsc_ckpt_meta_free(r), fsc_ckpt_meta_free(m);
    return same;
}

int check_ckpt_dir(const train_config *c, char *err, size_t cap) {
    char path[4096], who[160] = "";
    int64_t step;
    if (!c->ckpt_dir || c->ckpt_overwrite) return 0;
    if (fsc_ckpt_latest(c->ckpt_dir, path, sizeof path, &step) != FSC_OK)
        return snprintf(err, cap, "--ckpt-dir: %s", fsc_last_error()), -1;
    if (step < 0 || (c->resume && resumes_run_of(c, path))) return 0;
    fsc_ckpt_meta *m = NULL;
    if (fsc_ckpt_meta_read(path, &m) == FSC_OK)
        snprintf(who, sizeof who, ": run %.8s, seed %llu, lr %g", m->run_id, (unsigned long long)m->seed,
                 (double)m->optim.lr);
    fsc_ckpt_meta_free(m);
    return snprintf(err, cap, "--ckpt-dir %s holds the checkpoints of another run (newest step %lld%s): continue it "
                    "with --resume %s, choose another --ckpt-dir, or give --ckpt-overwrite to start over (they are "
                    "removed at the first save)", c->ckpt_dir, (long long)step, who, c->ckpt_dir), -1;
}

/* --ckpt-dir: this run's alone while it lives (fsc_ckpt_lock, docs/checkpoints.md), taken before anything is
 * written there; a file system without locks is said on stderr and the run goes on. Collective. */
fsc_status lock_ckpt_dir(fsc_rank *r, fsc_engine *e, const char *dir, fsc_ckpt_dir_lock **lock) {
    fsc_status s = fsc_ckpt_lock(e, dir, lock);
    if (s == FSC_ERR_UNSUPPORTED && r->rank == 0)
        fprintf(stderr, "fsc-train: warning: --ckpt-dir %s: %s\n", dir, fsc_last_error());
    return s == FSC_ERR_UNSUPPORTED ? FSC_OK : s == FSC_OK ? s : fsc_error_prefix(s, "--ckpt-dir");
}

/* --ckpt-dir/train_config.json, the options as asked (loadable with --config; durable as checkpoints are): written by
 * rank 0 once the run holds the directory and has resumed, so that a refused run leaves the record as it was.
 * Collective. */
fsc_status write_run_config(fsc_rank *r, const run_state *st) {
    fsc_status s = FSC_OK;
    if (r->rank == 0) {
        cJSON *o = config_object(st->asked);
        if (o) absolute_paths(o); /* a rerun with --config from another directory opens the same files */
        char *text = o ? cJSON_Print(o) : NULL;
        cJSON_Delete(o);
        s = text ? fsc_ckpt_write_file(st->cfg->ckpt_dir, RUN_CONFIG, text, strlen(text))
                 : fsc_error(FSC_ERR_NOMEM, "out of memory");
        free(text);
        if (s != FSC_OK) fsc_error_prefix(s, "--ckpt-dir: " RUN_CONFIG);
    }
    return fsc_comm_agree(r->comm, r->dev, s);
}

/* --resume: the engine's state from the newest checkpoint of c->resume that loads (leftovers of interrupted saves
 * and damaged checkpoints said on stderr); *start is the step the run continues at (0 when there is none: a new
 * run). Collective. */
fsc_status resume_run(fsc_rank *r, const train_config *c, fsc_engine *e, int *start) {
    int64_t at = 0;
    int left = 0;
    char rep[1024];
    if (r->rank == 0 && fsc_ckpt_clean(c->resume, &left, rep, sizeof rep) == FSC_OK && left) /* resume skips them */
        fprintf(stderr, "fsc-train: warning: %d leftover%s of interrupted saves not removed: %s\n", left,
                left == 1 ? "" : "s", rep);
    char from[4096], skipped[4096], took[64] = "";
    const double t0 = now_ms();
    fsc_status s = fsc_ckpt_try_resume(e, c->resume, &at, from, sizeof from, skipped, sizeof skipped);
    if (s == FSC_OK && r->rank == 0 && from[0]) size_and_time(from, now_ms() - t0, took, sizeof took);
    if (s == FSC_OK && r->rank == 0 && skipped[0]) fprintf(stderr, "fsc-train: warning: %s\n", skipped);
    if (s == FSC_OK && at < 0) { /* nothing to resume: a first run (README's save-every/resume example) */
        at = 0;
        if (r->rank == 0) printf("no checkpoint in %s to resume from: starting a new run at step 0\n", c->resume);
    }
    *start = at < c->steps ? (int)at : c->steps;
    if (s == FSC_OK && r->rank == 0 && from[0] && at > 0) { /* the checkpoint's last rate against this run's schedule */
        const float was = fsc_engine_lr(e), now = lr_at(c, at - 1);
        if (was != now)
            fprintf(stderr, "fsc-train: warning: %s was trained at a rate of %g at its step %lld, where this run's "
                            "schedule gives %g: it was written under other options than this run's\n", from,
                    (double)was, (long long)at, (double)now);
    }
    if (s == FSC_OK && r->rank == 0 && from[0]) {
        printf("resumed from %s at step %lld%s\n", from, (long long)at, took);
        if (at >= c->steps)
            fprintf(stderr, "fsc-train: warning: the checkpoint is at step %lld, --steps is %d: no step left to train "
                            "(give a larger --steps to continue)\n", (long long)at, c->steps);
    }
    return s;
}

/* --save-every K: a checkpoint after step (from 0) when it is a multiple of K, then --keep-last's pruning.
 * Collective. */
fsc_status save_checkpoint(fsc_rank *r, const train_config *c, fsc_engine *e, int step) {
    if (!c->save_every || (step + 1) % c->save_every != 0) return FSC_OK;
    fsc_ckpt_save_opts so = {.format = (fsc_ckpt_format)c->ckpt_format, .start_over = c->ckpt_overwrite};
    const double t0 = now_ms();
    fsc_status s = fsc_ckpt_save(e, c->ckpt_dir, step + 1, &so); /* durable on every rank when it returns */
    if (s == FSC_OK && r->rank == 0) {
        char dir[4200], took[64];
        snprintf(dir, sizeof dir, "%s/step-%08d", c->ckpt_dir, step + 1);
        size_and_time(dir, now_ms() - t0, took, sizeof took);
        printf("checkpoint %s%s\n", dir, took);
    }
    char left[2048];
    if (s == FSC_OK && r->rank == 0 && c->keep_last) { /* durable on every rank: older ones may go */
        if (fsc_ckpt_prune(c->ckpt_dir, step + 1, c->keep_last, NULL, left, sizeof left) != FSC_OK)
            snprintf(left, sizeof left, "%s", fsc_last_error());
        if (left[0]) fprintf(stderr, "fsc-train: warning: --keep-last %d: %s\n", c->keep_last, left);
    }
    return s;
}

/* Hugging Face's config.json of the model beside the weights file at path (rank 0), so that the directory loads
 * with from_pretrained. Not for MoE models (transformers has no GPT-2 or Llama with experts). A config.json there
 * that is not a Hugging Face one (no "model_type": a run's options, named so before train_config.json) is left
 * as it is, said on stderr. */
static fsc_status write_hf_config(const train_config *c, const char *path) {
    const model_family *f = model_family_of(c);
    if (c->moe_experts || !f->hf_config) return FSC_OK;
    const char *slash = strrchr(path, '/');
    char dir[4200], old[4300], why[256], *text = NULL;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (!dir[0]) snprintf(dir, sizeof dir, "/");
    snprintf(old, sizeof old, "%s/config.json", dir);
    size_t n = 0;
    if (access(old, F_OK) == 0) {
        cJSON *was = read_text_file(old, old, CONFIG_MAX, &text, &n, why, sizeof why) == 0 ? cJSON_ParseWithLength(text, n)
                                                                                   : NULL;
        const int hf = cJSON_GetObjectItemCaseSensitive(was, "model_type") != NULL;
        cJSON_Delete(was), free(text), text = NULL;
        if (!hf) {
            fprintf(stderr, "fsc-train: warning: %s is not a Hugging Face model configuration (no model_type): left "
                    "as it is, no config.json written for %s\n", old, path);
            return FSC_OK;
        }
    }
    cJSON *o = f->hf_config(c);
    text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    fsc_status s = text ? fsc_ckpt_write_file(dir, "config.json", text, strlen(text))
                        : fsc_error(FSC_ERR_NOMEM, "out of memory");
    free(text);
    return s == FSC_OK ? s : fsc_error_prefix(s, "%s: the Hugging Face config.json", path);
}

/* --save or --init-save: the engine's weights at path, in --save-dtype, and Hugging Face's config.json beside them
 * (write_hf_config). Collective. */
fsc_status save_weights(fsc_rank *r, fsc_engine *e, const train_config *c, const char *path) {
    static const fsc_dtype save_dt[] = { FSC_F32, FSC_BF16, FSC_F16 }; /* --save-dtype */
    FSC_TRY(fsc_engine_save_weights_dtype(e, path, save_dt[c->save_dtype]));
    return fsc_comm_agree(r->comm, r->dev, r->rank == 0 ? write_hf_config(c, path) : FSC_OK);
}

/* --save or --init-save (opt), before training: the weights file can be written (path names a file, not a
 * directory, and the writer creates its temporary beside it: made and removed here), so that the weights are not
 * lost after the run; the temporaries a killed write of path left are removed first (fsc_st_remove_leftovers:
 * only those names, of processes that are gone). */
int check_weights_path(const char *opt, const char *path, char *err, size_t cap) {
    struct stat sb;
    const char *slash = strrchr(path, '/');
    if (!*path || (slash && !slash[1])) return snprintf(err, cap, "--%s '%s': not a file name", opt, path), -1;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return snprintf(err, cap, "--%s %s: is a directory: give a file name (%s/model.safetensors)", opt, path, path), -1;
    int removed = 0;
    if (fsc_st_remove_leftovers(path, &removed) == FSC_OK && removed)
        fprintf(stderr, "fsc-train: --%s %s: removed %d temporary file%s of an interrupted write (%s.tmp.*)\n", opt,
                path, removed, removed == 1 ? "" : "s", path);
    fsc_st_writer *w = NULL;
    if (fsc_st_writer_open(path, &w) != FSC_OK)
        return snprintf(err, cap, "--%s %s (checked before training, so that the weights are not lost after it)",
                        opt, fsc_last_error()), -1;
    fsc_st_writer_abort(w);
    return 0;
}

/* Whether the recorded --data text spec names the files of data, the stream this run opened: the same files (device
 * and inode) in the same order, however the paths are written (./a.txt, an absolute path, a glob). */
static int same_data_files(const char *spec, const fsc_data *data, int vocab) {
    fsc_data *was = NULL;
    if (!data || fsc_data_open(&was, spec, fsc_data_format_of(data), vocab) != FSC_OK) return 0;
    int same = fsc_data_files(was) == fsc_data_files(data);
    for (int i = 0; same && i < fsc_data_files(data); i++) {
        struct stat a, b;
        same = stat(fsc_data_file(was, i), &a) == 0 && stat(fsc_data_file(data, i), &b) == 0 && a.st_dev == b.st_dev &&
               a.st_ino == b.st_ino;
    }
    fsc_data_free(was);
    return same;
}

/* --resume DIR: the options of DIR/train_config.json (DIR/config.json of runs before the name changed, when it is
 * not a Hugging Face model configuration) (the run that wrote the checkpoints; when DIR is one checkpoint, its
 * directory's) that decide the updates after a checkpoint, against this run's. A difference is allowed (lowering the
 * rate or extending a run is often meant) but said, once per option, on stderr: the resumed run is then not the
 * recorded run continued bit for bit (docs/checkpoints.md). Neither file (checkpoints from elsewhere): nothing to
 * compare. --data-format auto reads as the format it chose for data (this run's stream), and --data as its files
 * (the same files under another path are no difference). Returns the count. */
int check_resume_config(const train_config *asked, const fsc_data *data, const char *dir) {
    static const char *const keys[] = { "lr", "lr-schedule", "warmup", "min-lr", "steps", "optimizer", "momentum",
                                        "weight-decay", "decay-all", "clip", "batch", "seq", "data", "data-format" };
    char path[4200], why[512], *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/metadata.json", dir);
    const int one = access(path, F_OK) == 0; /* one checkpoint: its directory's options */
    size_t dn = strlen(dir);
    while (dn > 1 && dir[dn - 1] == '/') dn--; /* runs/step-00000004/ names runs/step-00000004 */
    const char *slash = NULL;
    for (size_t i = 0; i < dn; i++) slash = dir[i] == '/' ? dir + i : slash;
    char base[4096]; /* room for the file name in path */
    if (!one) snprintf(base, sizeof base, "%s/", dir);
    else if (slash) snprintf(base, sizeof base, "%.*s/", (int)(slash - dir), dir);
    else base[0] = '\0';
    snprintf(path, sizeof path, "%s%s", base, RUN_CONFIG);
    int legacy = 0;
    if (access(path, F_OK) != 0) snprintf(path, sizeof path, "%sconfig.json", base), legacy = 1;
    if (access(path, F_OK) != 0) return 0;
    if (read_text_file(path, path, CONFIG_MAX, &text, &n, why, sizeof why) != 0) {
        fprintf(stderr, "fsc-train: warning: --resume %s: %s: options not compared\n", dir, why);
        return 0;
    }
    cJSON *was = cJSON_ParseWithLength(text, n), *now = config_object(asked);
    int differ = 0;
    if (legacy && cJSON_GetObjectItemCaseSensitive(was, "model_type")) { /* Hugging Face's: no options recorded */
        cJSON_Delete(was), cJSON_Delete(now);
        free(text);
        return 0;
    }
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(was, "lr-schedule");
    const int decays = (cJSON_IsString(ws) && strcmp(ws->valuestring, "constant") != 0) ||
                       asked->lr_schedule != FSC_LR_CONSTANT; /* --steps sets where a decay ends */
    for (size_t i = 0; was && now && i < sizeof keys / sizeof *keys; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(was, keys[i]), *b = cJSON_GetObjectItemCaseSensitive(now, keys[i]);
        if (!a || !b || (!strcmp(keys[i], "steps") && !decays)) continue;
        /* this run's numbers are raw text (config_object), the file's parsed: compared as the floats they set */
        char *sa = cJSON_PrintUnformatted(a), *sb = cJSON_PrintUnformatted(b), *ea = NULL, *eb = NULL;
        int same = sa && sb && (!strcmp(sa, sb) || (strtof(sa, &ea) == strtof(sb, &eb) && ea != sa && !*ea &&
                                                    eb != sb && !*eb));
        if (!same && data && !strcmp(keys[i], "data-format") && cJSON_IsString(a) && cJSON_IsString(b)) {
            const char *chose = fsc_data_format_name(fsc_data_format_of(data)); /* what auto read */
            same = !strcmp(!strcmp(a->valuestring, "auto") ? chose : a->valuestring,
                           !strcmp(b->valuestring, "auto") ? chose : b->valuestring);
        }
        if (!same && !strcmp(keys[i], "data") && cJSON_IsString(a)) same = same_data_files(a->valuestring, data, asked->vocab);
        if (same || !sa || !sb) {
            free(sa), free(sb);
            continue;
        }
        fprintf(stderr, "fsc-train: warning: --resume %s: --%s is %s, the run that wrote the checkpoints had %s "
                        "(%s): the steps from here differ from that run's\n", dir, keys[i], sb ? sb : "?",
                sa ? sa : "?", path);
        free(sa), free(sb);
        differ++;
    }
    if (!was && n > 0) fprintf(stderr, "fsc-train: warning: --resume %s: %s is not JSON: options not compared\n", dir, path);
    cJSON_Delete(was), cJSON_Delete(now);
    free(text);
    return differ;
}
