/* Model families by name: the families fsc_model_from_config (generate.h) builds from a configuration text, the
 * text weights files and checkpoints record (model.h's config; safetensors.h's FSC_ST_META_MODEL). The built-in
 * ones, "gpt2" (gpt.h; its text names no family) and "llama" (llama.h), are always there; a program adds its own
 * with fsc_model_family_register, once, before it builds models, and the sampler's way of building the model a
 * file records (fsc_model_from_config) then builds it too. docs/models.md shows a family added.
 * Not here: the trainer's options of a family (examples/train/models.c), the engine (parallel.h). */
#ifndef FSC_FAMILY_H
#define FSC_FAMILY_H
#include "export.h"
#include "status.h"
#include "device.h"
#include "model.h"

FSC_BEGIN_DECLS

typedef struct {
    /* The "family" of the family's configuration text: letters, digits, '_' and '-', at most 31 bytes; a string
     * that lives as long as the program uses the family (a literal). */
    const char *name;
    /* The model config describes, on dev: config is a JSON object whose "family" is name (the text the model's
     * config operation writes); every field checked, FSC_ERR_FORMAT naming a bad one, *out NULL then. The model
     * owns itself (fsc_model_free). Called from any thread. */
    fsc_status (*from_config)(fsc_device *dev, const char *config, fsc_model **out);
} fsc_model_family;

/* Adds f (copied) to the families fsc_model_from_config knows. FSC_ERR_INVALID for a name that is not one (see
 * above) or is already a family's (a built-in one's too), or without from_config; FSC_ERR_UNSUPPORTED beyond 32
 * registered families. A family stays registered while the program runs. Thread-safe. */
fsc_status fsc_model_family_register(const fsc_model_family *f);
/* The family of that name (built-in or registered), or NULL. The pointer stays valid while the program runs. */
const fsc_model_family *fsc_model_family_find(const char *name);

FSC_END_DECLS

#endif
