/* A Llama weights file saved with tied embeddings: Hugging Face leaves lm_head.weight out of the state dict of a
 * LlamaForCausalLM with tie_word_embeddings, keeping model.embed_tokens.weight only. fsc's Llama has an untied
 * head, so such a file cannot be loaded; the trainer and the sampler say so instead of "tensor lm_head.weight is
 * missing". Public API only (fsc/safetensors.h). Not a loader: it only looks at the names. */
#ifndef FSC_EXAMPLES_TIED_HEAD_H
#define FSC_EXAMPLES_TIED_HEAD_H
#include <stdio.h>
#include "fsc/fsc.h"

/* 1 (with the explanation in err) when path holds model.embed_tokens.weight and no lm_head.weight; 0 otherwise,
 * also when the file cannot be read (the loader reports that). */
static inline int tied_llama_head(const char *path, char *err, size_t cap) {
    fsc_st_file *f = NULL;
    if (fsc_st_open(path, &f) != FSC_OK) return 0;
    const int tied = fsc_st_find_weight(f, "model.embed_tokens.weight") && !fsc_st_find_weight(f, "lm_head.weight");
    fsc_st_close(f);
    if (tied)
        snprintf(err, cap,
                 "%s: lm_head.weight is missing: the file holds a Llama with tied embeddings (Hugging Face leaves "
                 "lm_head.weight out with tie_word_embeddings), and fsc's Llama is untied: it needs lm_head.weight. "
                 "Save the head as a copy of the embeddings: sd[\"lm_head.weight\"] = "
                 "sd[\"model.embed_tokens.weight\"].clone()", path);
    return tied;
}

#endif
