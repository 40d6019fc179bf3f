/* Private: a model's configuration text (model.h's config) whole, whatever its length: what checkpoints, weights
 * files and the ranks' agreement record (lib/ckpt, lib/parallel) and what the sequential model compares (lib/layers).
 * A fixed buffer recorded a longer text as "{}" (a silent loss: a checkpoint then loaded into any model). */
#ifndef FSC_CORE_MODEL_TEXT_H
#define FSC_CORE_MODEL_TEXT_H
#include "fsc/model.h"

/* Longest configuration text recorded (bytes): within a checkpoint's metadata (FSC_CKPT_MAX_META, 64 MiB) and a
 * weights file's header (FSC_ST_MAX_HEADER, 100 MB) with room for the tensors' entries. */
#define FSC_MODEL_CONFIG_MAX ((size_t)16 << 20)

/* config(ctx, ...)'s text (model.h's contract: a text longer than the buffer is cut to cap - 1 bytes) into *out,
 * malloc'ed: asked with `first` bytes (at least 64), then again with a buffer twice as large while the text fills
 * the one it had; config NULL: "{}".
 * FSC_ERR_INVALID naming `what` past FSC_MODEL_CONFIG_MAX bytes or for an empty text (with the message the config
 * op left, the cause: a sequential model's layer text over the limit), FSC_ERR_NOMEM; *out NULL on error. */
fsc_status fsc_config_text_from(void (*config)(void *ctx, char *buf, size_t cap), void *ctx, const char *what,
                                size_t first, char **out);

/* A model's text, asked with 64 KiB first, as every caller gave before: a program's model that answers a text too
 * long for its buffer with a shorter one (the contract once allowed "{}") still has its texts up to 64 KiB whole. */
static inline fsc_status fsc_config_text(void (*config)(void *ctx, char *buf, size_t cap), void *ctx,
                                         const char *what, char **out) {
    return fsc_config_text_from(config, ctx, what, (size_t)1 << 16, out);
}

#endif
