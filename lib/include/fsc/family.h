/* Model families by name: a family is a name, a configuration parser that builds the model a text describes
 * (from_config) and, optionally, its builder on a tensor group (build). fsc_model_from_config (generate.h) builds
 * the model of a configuration text, the text weights files and checkpoints record (model.h's config;
 * safetensors.h's FSC_ST_META_MODEL); fsc_engine_create_config (below) makes the engine for it, so a program that
 * holds a configuration text (the trainer, the sampler) never asks which family it is. The built-in ones, "gpt2"
 * (gpt.h; its text names no family) and "llama" (llama.h), are always there; a program adds its own with
 * fsc_model_family_register, once, before it builds models, and both then build it too. docs/models.md shows a
 * family added.
 * Not here: the trainer's options of a family (examples/train/models.c), the engine (parallel.h). */
#ifndef FSC_FAMILY_H
#define FSC_FAMILY_H
#include "export.h"
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "model.h"
#include "cluster.h"
#include "optim.h"
#include "parallel.h"

FSC_BEGIN_DECLS

typedef struct {
    /* The "family" of the family's configuration text: letters, digits, '_' and '-', at most 31 bytes (copied by
     * fsc_model_family_register: the caller's string may go). */
    const char *name;
    /* The model config describes, on dev: config is a JSON object whose "family" is name (the text the model's
     * config operation writes; a model of layers, fsc_seq_model_create's, made through fsc_model_from_config or
     * fsc_engine_create_config writes config itself, so its weights files and checkpoints record the family's
     * text); every field checked, naming a bad one (the built-in families: FSC_ERR_FORMAT for a field missing, not
     * a number of its type or unknown; FSC_ERR_INVALID for a value beyond the family's limits or fields that do
     * not fit together, as heads that do not divide dim), *out NULL then. The model owns itself
     * (fsc_model_free). Called from any thread. */
    fsc_status (*from_config)(fsc_device *dev, const char *config, fsc_model **out);
    /* Optional: the model config describes on a tensor group, as parallel.h's fsc_model_build_fn (tensor NULL:
     * without tensor parallelism, as from_config; else this rank's slices over the group, sequence_parallel as
     * the engine's option). NULL: the family has no tensor-parallel form (an engine with tp > 1 refuses it). */
    fsc_status (*build)(fsc_device *dev, const char *config, fsc_comm *tensor, int sequence_parallel,
                        fsc_model **out);
} fsc_model_family;

/* Adds f (copied, its name too) to the families fsc_model_from_config knows. FSC_ERR_INVALID for a name that is
 * not one (see above) or is already a family's (a built-in one's too), or without from_config; FSC_ERR_UNSUPPORTED
 * beyond 32 registered families. A family stays registered while the program runs. Thread-safe. */
fsc_status fsc_model_family_register(const fsc_model_family *f);
/* The family of that name (built-in or registered), or NULL. The pointer stays valid while the program runs. */
const fsc_model_family *fsc_model_family_find(const char *name);
/* The family a configuration text names ("family"; a text without one and with "layers" is a GPT-2's), or NULL
 * with FSC_ERR_FORMAT naming the problem (not a JSON object, no family, an unknown one). */
fsc_status fsc_model_family_of(const char *config, const fsc_model_family **out);

/* The one constructor for a model given as text: the engine (parallel.h's fsc_engine_create_built, collective)
 * for the model config describes, built by its family (build on the tensor group with po->tp > 1, else build
 * or from_config); the engine owns the model. Every rank passes an equal text. A family without build refuses
 * po->tp > 1 (FSC_ERR_UNSUPPORTED). The trainer makes every family's engine this way (docs/models.md). */
fsc_status fsc_engine_create_config(fsc_rank *r, const char *config, const fsc_parallel_opts *po,
                                    const fsc_optim_config *oc, uint64_t seed, fsc_engine **out);

FSC_END_DECLS

#endif
