/* Training checkpoints: everything a run needs to continue exactly (fp32 master parameters, optimizer
 * state and step count, loss-scaler state, the seed, the data position) and its configuration, written by
 * every rank at once and loadable into any world size and parallel setting (docs/checkpoints.md).
 *
 * On disk, DIR/step-00000042/ holds
 *   metadata.json                      every tensor's global name, shape, dtype and pieces (which file holds
 *                                      which element range, with a zlib crc32 per piece), the step, the
 *                                      loss scaler and the configuration (the model's: its config JSON
 *                                      object, model.h); written by rank 0
 *   rank-00003-of-00008.safetensors    sharded format: the pieces rank 3 writes, one 1-D entry per piece
 *                                      named "<tensor>@<first element>"
 *   model.safetensors                  full format: the weights in the single-rank layout (loadable by
 *   optim.safetensors                  fsc_engine_load_weights) and the optimizer state, same shapes
 * Tensors: the parameters by the model's names (model.h's tensor names), the optimizer state as
 * "optim.m.<name>", "optim.v.<name>" (AdamW) or "optim.momentum.<name>" (SGD with momentum), all F32.
 *
 * A save writes into DIR/step-00000042.tmp-XXXXXX, fsyncs every file, and rank 0 renames the directory
 * once every rank is done, then fsyncs DIR: a crash at any point leaves the previous checkpoints intact and
 * at most a .tmp directory, which fsc_ckpt_resume ignores and removes. One run writes to a DIR at a time
 * (fsc_ckpt_lock keeps a second one out).
 *
 * metadata.json carries its own checksum (metadata_crc32) and the id of the run that wrote it: a DIR
 * belongs to one run. An engine continues the run of the checkpoint it loaded; a fresh engine starts a
 * new one. A save into a DIR whose newest checkpoint belongs to another run is refused unless
 * fsc_ckpt_save_opts.start_over says to remove that run's checkpoints (docs/checkpoints.md). */
#ifndef FSC_CKPT_H
#define FSC_CKPT_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "dtype.h"
#include "model.h"
#include "optim.h"
#include "parallel.h"
#include "safetensors.h"

FSC_BEGIN_DECLS

typedef enum { FSC_CKPT_SHARDED = 0, FSC_CKPT_FULL } fsc_ckpt_format;

/* For tests of atomicity: make rank crash_rank fail at a point of the save as if its process died
 * there. The save returns FSC_ERR_IO on every rank and leaves its temporary directory behind. An unknown
 * crash_at, a crash_rank outside the world, or the full format's MID_SHARD, BEFORE_META or BEFORE_RENAME on a
 * rank other than 0 (the one that writes those files and renames) is refused (FSC_ERR_INVALID), never a save
 * without its crash. */
typedef enum {
    FSC_CKPT_CRASH_NONE = 0,
    FSC_CKPT_CRASH_MID_SHARD,     /* after part of the rank's shard file is written */
    FSC_CKPT_CRASH_BEFORE_META,   /* every shard file complete, metadata.json not written */
    FSC_CKPT_CRASH_BEFORE_RENAME  /* everything written and synced, the directory not renamed */
} fsc_ckpt_crash;

typedef struct {
    fsc_ckpt_format format;
    fsc_ckpt_crash crash_at;      /* testing only; FSC_CKPT_CRASH_NONE in real runs */
    int crash_rank;
    int start_over;               /* DIR holds another run's checkpoints: remove them (0: refuse the save) */
} fsc_ckpt_save_opts;
/* The defaults: the sharded format, no injected crash, no start over (another run's DIR is refused). */
fsc_ckpt_save_opts fsc_ckpt_save_opts_default(void);

/* Collective: write the engine's state as DIR/step-NNNNNNNN (step = the optimizer steps the caller has
 * taken: the data position; not fewer than the optimizer's own count). DIR is created if missing; an
 * existing checkpoint of the same step is replaced. The checkpoint records the engine's run (the run of
 * the checkpoint it loaded, else a new random id made at its first save). FSC_ERR_INVALID, writing
 * nothing, if the newest checkpoint in DIR belongs to another run (or cannot be read), unless
 * opts->start_over: then every checkpoint of another run in DIR is removed first. opts may be NULL
 * (sharded). Sharded: each rank writes only the pieces it owns, from device memory through a bounded host
 * buffer. Full: rank 0 writes, receiving one bounded chunk at a time. FSC_ERR_NUMERIC, writing nothing, when
 * a parameter or optimizer state is inf or NaN (fsc_engine_check_finite). */
fsc_status fsc_ckpt_save(fsc_engine *e, const char *dir, int64_t step, const fsc_ckpt_save_opts *opts);
/* Collective: load the checkpoint directory path (".../step-NNNNNNNN") into e, which may have another
 * world size and parallel setting than the writer; world rank 0 reads and validates metadata.json once and
 * sends every rank the part it needs, each rank reads the element ranges it holds and checks the checksum
 * of every piece it reads. The model configuration and optimizer kind must match. *step (may be NULL)
 * receives the checkpoint's step; e continues the checkpoint's run. After a failed load the engine's state
 * is undefined. */
fsc_status fsc_ckpt_load(fsc_engine *e, const char *path, int64_t *step);
/* Collective: load only the weights of checkpoint path (its parameters, not the optimizer's state) into e, whose
 * optimizer may be another than the writer's: to sample, evaluate or fine-tune from a checkpoint without the memory
 * of its optimizer's state. Any world size and parallel setting, and the model configuration must match, as for
 * fsc_ckpt_load. e's optimizer state, step count, learning rate, loss scaler and run are left as they were (its
 * saves start a run of their own). *step (may be NULL) receives the checkpoint's step. After a failed load the
 * engine's parameters are undefined (some pieces may have been read), as after fsc_ckpt_load. */
fsc_status fsc_ckpt_load_weights(fsc_engine *e, const char *path, int64_t *step);
/* The newest complete checkpoint in dir: path (cap bytes) and *step; *step = -1 and path "" if there is
 * none (a missing dir has none). Complete: a step-NNNNNNNN directory holding metadata.json, or one whose
 * metadata.json cannot be examined (no search permission, a looping link: a damaged one, its load says why).
 * Temporary directories are ignored. */
fsc_status fsc_ckpt_latest(const char *dir, char *path, size_t cap, int64_t *step);
/* Remove the temporary directories (step-*.tmp-*) an interrupted save left in dir, never following a
 * symbolic link and removing only files of the names a save writes. A leftover that cannot be removed (a
 * link or a file, other files inside it, read-only media) is left in place: *left (may be NULL) counts
 * them and report (cap bytes, may be NULL) says which and why ("" when none). While another process holds dir's
 * lock (fsc_ckpt_lock: a live run writes there) nothing is removed, its temporary directories being saves in
 * progress (report says so; *left is 0). FSC_ERR_IO only when dir cannot be listed. */
fsc_status fsc_ckpt_clean(const char *dir, int *left, char *report, size_t cap);
/* Write dir/name (len bytes; dir is created if absent, one level) as checkpoints are written: a temporary,
 * fsync, rename, fsync of dir. For files that travel with the checkpoints (the trainer's train_config.json); name is
 * a plain name, not step-*. Not collective: call it on one rank. */
fsc_status fsc_ckpt_write_file(const char *dir, const char *name, const void *data, size_t len);
/* Collective: rank 0 removes leftover temporary directories (what fsc_ckpt_clean leaves is skipped), then
 * every rank loads the newest complete checkpoint in dir. FSC_ERR_IO (every rank) if dir holds none. */
fsc_status fsc_ckpt_resume(fsc_engine *e, const char *dir, int64_t *step);
/* Collective: resume a run that may be starting, from the newest complete checkpoint of dir that loads.
 * A missing dir, or one without a complete checkpoint, is no error: *step = -1 and e is untouched (a fresh
 * start). When a checkpoint fails to load and rank 0 finds it damaged (fsc_ckpt_verify fails: unreadable
 * metadata, a missing, truncated or corrupted file), it is skipped for the next older one; skipped (scap
 * bytes, every rank, may be NULL) names each skipped checkpoint and why ("" when none). A checkpoint that is
 * sound but refused (another model or optimizer) is that error. Every checkpoint damaged: FSC_ERR_FORMAT
 * naming them (e's state undefined). loaded (lcap bytes, may be NULL) receives the loaded path. dir may also be
 * one checkpoint (it holds metadata.json: DIR/step-NNNNNNNN): that one is loaded, without falling back; a
 * directory named like a checkpoint (step-NNNNNNNN, step-N.tmp-*) that is not complete is FSC_ERR_IO. */
fsc_status fsc_ckpt_try_resume(fsc_engine *e, const char *dir, int64_t *step, char *loaded, size_t lcap,
                               char *skipped, size_t scap);
/* fsc_ckpt_latest_read (below) with FSC_CKPT_READ_VERIFY | FSC_CKPT_READ_FALLBACK, no metadata: the newest checkpoint
 * of dir that verifies (its metadata, every file, every checksum), damaged newer ones skipped and named in skipped
 * (fsc_ckpt_try_resume's fallback for a program without an engine yet). */
fsc_status fsc_ckpt_latest_sound(const char *dir, char *path, size_t cap, int64_t *step, char *skipped, size_t scap);
/* Retention (not collective: one process, after a save returned FSC_OK on every rank): remove dir's complete
 * checkpoints older than step `written` beyond the newest keep - 1 of them, so that keep remain counting
 * step `written`, which must be complete (FSC_ERR_STATE otherwise, nothing removed). Never removed: step
 * `written`, any newer one, anything not complete (temporary directories of interrupted saves, a step
 * directory without metadata.json), any file a save does not write (such a directory is left in place).
 * *removed (may be NULL) counts the removed checkpoints; report (cap bytes, may be NULL) says what was left
 * in place and why ("" when nothing). */
fsc_status fsc_ckpt_prune(const char *dir, int64_t written, int keep, int *removed, char *report, size_t cap);
/* One writer per directory: a lock on DIR/.lock, held until fsc_ckpt_unlock or the death of the process
 * (the kernel releases it), so a second program writing checkpoints into DIR is refused before it writes.
 * Collective: world rank 0 takes it (creating DIR, one level, and the file, which then names the holder: "pid P
 * on host H since T"), and a rank in another process than rank 0's holds it too, so a run restarted after a
 * kill is refused while any process of the old one still lives. Take it before anything is written into DIR
 * (before fsc_ckpt_try_resume on DIR, which removes leftovers). FSC_ERR_STATE on every rank, naming the
 * holder, when another holds it; FSC_ERR_UNSUPPORTED when the file system has no locks (flock). Saves do not
 * take it themselves: a program that may run twice takes it first. */
typedef struct fsc_ckpt_dir_lock fsc_ckpt_dir_lock;
fsc_status fsc_ckpt_lock(fsc_engine *e, const char *dir, fsc_ckpt_dir_lock **out);
/* Release the lock (not collective: each rank its own; NULL is ignored). DIR/.lock stays. */
void fsc_ckpt_unlock(fsc_ckpt_dir_lock *l);
/* Collective: optimizer state `which` (0: SGD momentum or AdamW m, 1: AdamW v) of every parameter in
 * tensor order, gathered into host (one float per element of the model's parameters) on rank 0 one bounded
 * chunk at a time; host may be NULL on other ranks. FSC_ERR_INVALID if the optimizer has no such state. */
fsc_status fsc_ckpt_full_state(fsc_engine *e, int which, float *host);

/* ---- Reading checkpoints without an engine (inspection, verification, fuzzing) ---- */

#define FSC_CKPT_MAX_FILE 64          /* bytes of a file name in a checkpoint, with the NUL */
#define FSC_CKPT_RUN_ID 33            /* a run id: 32 lowercase hex digits and the NUL */
#define FSC_CKPT_MAX_META (64u << 20) /* metadata.json above 64 MiB is refused as too large */

typedef struct {
    int file;                      /* index into fsc_ckpt_meta.files */
    char entry[FSC_ST_MAX_NAME];   /* the safetensors entry holding it (numel == n) */
    uint64_t first, n;             /* elements [first, first + n) of the tensor (row-major) */
    uint32_t crc32;                /* zlib crc32 of the n elements as stored (little-endian) */
} fsc_ckpt_piece;

typedef struct {
    char name[FSC_ST_MAX_NAME];
    fsc_dtype dtype;               /* F32 */
    int ndim;
    int64_t shape[4];
    uint64_t numel;
    int npieces;
    fsc_ckpt_piece *pieces;        /* ascending first; they tile [0, numel) exactly */
} fsc_ckpt_tensor;

typedef struct {
    fsc_ckpt_format format;
    char run_id[FSC_CKPT_RUN_ID];  /* the run that wrote it (hex); a DIR holds one run's checkpoints */
    int64_t step;                  /* the data position: steps taken by the writer's training loop */
    int64_t optim_steps;           /* optimizer steps (fewer when f16 steps were skipped) */
    int64_t skipped_in_row;        /* the last steps skipped in a row (inf/NaN): max_skipped_steps counts on from it */
    uint64_t seed;                 /* the keyed initialization's seed (fsc's only RNG state) */
    char *model_config;            /* the model's configuration, a JSON object's text (model.h's config) */
    fsc_optim_config optim;
    /* the writer's parallel setting (for information; a load may use any other) */
    fsc_parallel_kind kind;
    fsc_shard_strategy shard;
    int world, tp, pp, hybrid_group, accum;
    int ep;                        /* expert-parallel ranks (1: every rank held every expert; 1 for checkpoints
                                    * written before the record held it) */
    fsc_dtype param_dtype, reduce_dtype;
    float clip;
    int scaler_enabled;            /* the writer used f16 loss scaling */
    fsc_loss_scaler scaler;
    int nfiles;
    char (*files)[FSC_CKPT_MAX_FILE];
    int ntensors;
    fsc_ckpt_tensor *tensors;
} fsc_ckpt_meta;

/* Parse and validate metadata.json text (len bytes, at most FSC_CKPT_MAX_META); `what` names it in
 * messages. Validated before parsing: the size, metadata_crc32 (the first member: zlib's crc32 of the text
 * with its 8 hex digits read as "00000000"), and that parsing allocates at most about 12 bytes per byte of
 * text. Then every field's type and range, and every field against its second source: optim_steps and
 * the scaler's counts against step, the files against the layout and world size, the tensors against one
 * another and the optimizer (every optimizer state with its parameter's shape, every parameter with every
 * state), entry names against their tensor and first element, pieces that reference a file, fit in their
 * tensor and tile it without gap or overlap, unique (file, entry) pairs. Messages name the field. The
 * tensors against the recorded model configuration are the model's to check (model.h's check_tensors, run
 * at save and load; fsc_ckpt_meta_params gives a reader without a model what to pass such a check), and
 * against the model itself the load's. */
fsc_status fsc_ckpt_meta_parse(const char *text, size_t len, const char *what, fsc_ckpt_meta **out);
/* Read path/metadata.json; when path's last component is a checkpoint name (step-NNNNNNNN), its step must
 * be the metadata's. */
fsc_status fsc_ckpt_meta_read(const char *path, fsc_ckpt_meta **out);
void fsc_ckpt_meta_free(fsc_ckpt_meta *m);
const fsc_ckpt_tensor *fsc_ckpt_meta_find(const fsc_ckpt_meta *m, const char *name);
/* The checkpoint's parameters (its tensors that are no optimizer state) in file order: name, ndim, shape and
 * numel of *n of them into *out (free with free; names longer than fsc_param_info's are cut), for a model's
 * check of its recorded configuration (model.h's check_tensors) by a reader without the model. */
fsc_status fsc_ckpt_meta_params(const fsc_ckpt_meta *m, fsc_param_info **out, int *n);
const char *fsc_ckpt_format_name(fsc_ckpt_format f); /* "sharded", "full" */

/* Check an opened file against the metadata's pieces for file index `file`: each piece's entry exists with
 * dtype F32 and n elements, the file has no other entries, and with check_data every piece's checksum and
 * then that every value is finite (FSC_ERR_NUMERIC otherwise, naming the element; loads check the same).
 * The message names the file and the tensor. */
fsc_status fsc_ckpt_check_file(const fsc_ckpt_meta *m, int file, fsc_st_file *f, int check_data);
/* Verify a checkpoint directory: its metadata, every file's structure, every checksum, that every value is
 * finite, and that the recorded model configuration has exactly the tensors the checkpoint holds: a GPT's
 * (fsc_gpt_check_tensors), or the model another family known to the program (family.h) builds from it, on the
 * counting device. *out (may be NULL) receives the metadata on success. */
fsc_status fsc_ckpt_verify(const char *path, fsc_ckpt_meta **out);
/* How fsc_ckpt_latest_read reads (flags, or'd): every file and checksum too (fsc_ckpt_verify; else the metadata,
 * fsc_ckpt_meta_read), and past a checkpoint that fails to the one before. */
enum { FSC_CKPT_READ_VERIFY = 1, FSC_CKPT_READ_FALLBACK = 2 };
/* Not collective, for readers that must not change dir and that a live run may be writing into (ckpt_tool, the
 * sampler): the newest complete checkpoint of dir, read as flags say; path (cap bytes; a longer path is FSC_ERR_INVALID
 * with path "", never cut, as fsc_ckpt_latest gives it) and *step name it, *meta
 * (may be NULL) receives its metadata (fsc_ckpt_meta_free). *step = -1, path "" and *meta NULL when dir holds no
 * complete checkpoint (a missing dir holds none); FSC_ERR_IO when dir cannot be listed. A checkpoint whose read
 * fails is that error, path and *step naming it; with FSC_CKPT_READ_FALLBACK it is skipped for the one before,
 * named with the reason in skipped (scap bytes, may be NULL; "" when none), and every one failing is
 * FSC_ERR_FORMAT naming them. A checkpoint removed while it is read (a live run's --keep-last retention, a save
 * replacing its step: its directory gone once the read failed) is neither: dir is listed again and its newest read
 * (up to 16 times). Removes nothing. */
fsc_status fsc_ckpt_latest_read(const char *dir, int flags, char *path, size_t cap, int64_t *step, fsc_ckpt_meta **meta,
                                char *skipped, size_t scap);

FSC_END_DECLS

#endif
