/* Private: what the checkpoint files share (ckpt_meta.c, ckpt_fs.c, ckpt_save.c, ckpt_load.c).
 * Global tensors of a checkpoint are numbered g = state * n_tensors + t: state 0 the parameters, state
 * k >= 1 the optimizer's state k-1 (fsc_optim_state), t the model's tensor index. */
#ifndef FSC_CKPT_IMPL_H
#define FSC_CKPT_IMPL_H
#include "fsc/comm.h"
#include "fsc/device.h"
#include "fsc/tensor.h"
#include "fsc/parallel.h"
#include "fsc/safetensors.h"
#include "fsc/schedule.h"
#include "fsc/ckpt.h"
#include "parallel/engine_ckpt.h" /* what checkpoints see of the engine: nothing else of it */

_Static_assert(FSC_ENGINE_RUN_ID == FSC_CKPT_RUN_ID, "the engine's run id holds a checkpoint run id");

/* The engine as checkpoints see it (engine_ckpt.h's view: its world, device, model, optimizer, options, ...). */
#define ENG(e) fsc_engine_ckpt_view(e)

#define CK_CHUNK FSC_PIECE_CHUNK             /* floats per bounded host or device transfer (256 KiB) */
#define CK_MAX_META ((size_t)FSC_CKPT_MAX_META)
#define CK_META_NAME "metadata.json"
#define CK_META_VERSION 2

/* ---- ckpt_meta.c ---- */
/* The metadata as JSON text (sealed: metadata_crc32 first and correct; free it with cJSON_free), or NULL
 * when out of memory. */
char *ck_meta_json(const fsc_ckpt_meta *m);
/* Write the crc32 of text into its metadata_crc32 member (which must come first); 0, or -1 when text does
 * not start with one. */
int ck_meta_seal(char *text, size_t len);

/* ---- ckpt_meta_check.c ---- */
/* Before parsing: the size (at most CK_MAX_META: "too large"), metadata_crc32, and what parsing would
 * allocate (at most CK_PARSE_FACTOR bytes per byte of text). */
#define CK_PARSE_FACTOR 12
fsc_status ck_meta_check_text(const char *text, size_t len, const char *what);
/* After parsing: every field against its second source (the model configuration for the tensors, the
 * layout and world size for the files, the step for the counters, ...). */
fsc_status ck_meta_check_sources(const fsc_ckpt_meta *m, const char *what);
/* The step against the name of the checkpoint's directory path (when it is a step-NNNNNNNN name). */
fsc_status ck_meta_check_dir(const fsc_ckpt_meta *m, const char *path, const char *what);
/* "m", "v" (AdamW), "momentum" (SGD); NULL for a state the optimizer kind does not have. */
const char *ck_state_name(fsc_optim_kind kind, int which);
/* The global name of state `state` (0: the parameter) of a tensor: "optim.m.wte.weight". */
void ck_global_name(char *buf, size_t cap, fsc_optim_kind kind, int state, const char *tensor);

/* ---- ckpt_fs.c ---- */
/* a + "/" + b into buf; FSC_ERR_INVALID if it does not fit */
fsc_status ck_join(char *buf, size_t cap, const char *a, const char *b);
/* Whether name is "step-" followed by 8 or more digits (*step set), nothing else, as a save names it: more than 8
 * digits only without a leading zero. */
int ck_parse_step_name(const char *name, int64_t *step);
/* Whether dir/name (a step directory) is a complete checkpoint to the readers: its metadata.json is there (lstat: a
 * link, even a broken or looping one, counts), or cannot be examined (a directory without search permission: the
 * load says why); not where it is absent or name is no directory. */
int ck_step_complete(const char *dir, const char *name);
/* ck_step_complete, or with unexaminable 0 only a step whose metadata.json is there (lstat succeeds): retention's
 * rule, so that a damaged checkpoint never takes a kept place from a sound one. */
int ck_step_present(const char *dir, const char *name, int unexaminable);
/* Remove the checkpoint or temporary directory `path` that a save made, without following links: only
 * regular files of the names a save writes, then the directory. FSC_OK when it is gone (or was not
 * there); otherwise FSC_ERR_IO saying what was left in place and why (a link or file instead of a
 * directory, a file a save does not write, a file that cannot be removed). */
fsc_status ck_remove_dir(const char *path);
fsc_status ck_fsync_dir(const char *path);
/* ---- ckpt_lock.c ---- */
/* Whether another process than this one holds dir's lock (fsc_ckpt_lock): a live run writes there. who (cap bytes)
 * then names it. Not collective. */
int ck_dir_in_use(const char *dir, char *who, size_t cap);
/* ---- ckpt_keep.c ---- */
/* Whether the newest complete checkpoint of dir whose metadata reads is of run `run` (damaged newer ones
 * skipped, as fsc_ckpt_try_resume skips them); 0 when none reads or run is "". */
int ck_newest_readable_of_run(const char *dir, const char *run);
/* Write len bytes to path (created, must not exist), fsync, close. */
fsc_status ck_write_synced(const char *path, const void *buf, size_t len);
/* Read a whole file of at most max bytes (malloc'd, NUL-terminated). */
fsc_status ck_read_all(const char *path, size_t max, char **out, size_t *len);

/* Stream piece p of tensor t from file f (called fname in messages) in chunks of CK_CHUNK elements through
 * host buffer buf, pass each chunk to sink (may be NULL) and compare the crc32 at the end. */
fsc_status ck_read_piece(fsc_st_file *f, const char *fname, const fsc_ckpt_tensor *t, const fsc_ckpt_piece *p,
                         float *buf, fsc_piece_sink sink, void *ctx);

/* ---- ckpt_comm.c ---- */
/* Every rank of the world returns the same verdict: FSC_OK if every rank passed FSC_OK, else the status
 * and message of the lowest failing rank ("rank 2: ..." on the others). */
fsc_status ck_agree(fsc_engine *e, fsc_status mine);
/* Broadcast len bytes of host memory from world rank 0 (any size: bounded chunks through one device
 * buffer). */
fsc_status ck_bcast_host(fsc_engine *e, void *host, size_t len);

/* The engine's model configuration (model.h's config; "{}" without one) as compact JSON, *out from malloc. */
fsc_status ck_model_config(const fsc_engine *e, char **out);
/* The model's check of the checkpoint's parameters against its recorded configuration (model.h's
 * check_tensors; FSC_OK without one); the message starts with what. */
fsc_status ck_check_model_tensors(const fsc_engine *e, const fsc_ckpt_meta *m, const char *what);
/* Tensor t as the checkpoint stores it: the full tensor (with tensor parallelism not this rank's slice). */
const fsc_param_info *ck_info(const fsc_engine *e, int t);
#endif
