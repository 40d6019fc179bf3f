/* train_family: a program's own model family, registered with the library and trained by the trainer
 * (fsc-train's code, fsc_train_main) with --model mini: every option of fsc-train works for it (strategies,
 * pipelines, --tp, checkpoints, --check-ddp, --json). The family is one file's worth of code: a name, a
 * configuration parser that builds the model a text describes (from_config) and its builder on a tensor group
 * (build); as a built-in family it would be a file of lib/model and a row of the library's table
 * (lib/model/model_config.c), with nothing in the trainer (docs/models.md).
 *
 * "mini" is a GPT-2 made of the built-in layers (fsc/layers.h): token and position embeddings, `layers` GPT-2
 * blocks, a final LayerNorm and a head of its own (not tied to the embedding). Its configuration text is the
 * trainer's (examples/train/models.c's model_text): {"family":"mini","layers":2,"dim":64,"heads":4,"seq":64,
 * "vocab":256,...}; it reads those five fields and ignores the others.
 *
 * Build: make build/train_family (this file, examples/train_gpt.c and the files of examples/train/, with -DFSC_TRAIN_NO_MAIN).
 * Run:   build/train_family --model mini --layers 2 --dim 32 --heads 4 --seq 32 --steps 20 */
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"
#include "train/train.h"

/* An integer field of the text in [1, 2^20]: FSC_ERR_FORMAT naming it otherwise. */
static fsc_status mini_int(const cJSON *o, const char *key, int *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 1 ||
        x->valuedouble > (1 << 20))
        return fsc_error(FSC_ERR_FORMAT, "mini: %s is missing or not an integer in [1, 1048576]", key);
    *out = (int)x->valuedouble;
    return FSC_OK;
}

/* The model on dev; with tensor (NULL: none) each layer holds this rank's slices and runs the group's collectives. */
static fsc_status mini_build(fsc_device *dev, const char *config, fsc_comm *tensor, int sp, fsc_model **out) {
    *out = NULL;
    /* cJSON's parser writes a global (its last error): the ranks' threads parse one at a time */
    static pthread_mutex_t parse_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&parse_mu);
    cJSON *o = cJSON_Parse(config);
    pthread_mutex_unlock(&parse_mu);
    int L = 0, C = 0, H = 0, T = 0, V = 0;
    fsc_status s = cJSON_IsObject(o) ? FSC_OK : fsc_error(FSC_ERR_FORMAT, "mini: the configuration is not a JSON object");
    if (s == FSC_OK) s = mini_int(o, "layers", &L);
    if (s == FSC_OK) s = mini_int(o, "dim", &C);
    if (s == FSC_OK) s = mini_int(o, "heads", &H);
    if (s == FSC_OK) s = mini_int(o, "seq", &T);
    if (s == FSC_OK) s = mini_int(o, "vocab", &V);
    cJSON_Delete(o);
    if (s == FSC_OK && (C % H != 0 || L > 64))
        s = fsc_error(FSC_ERR_FORMAT, "mini: dim %d does not split into %d heads, or more than 64 layers (%d)", C, H, L);
    FSC_TRY(s);
    fsc_seq_layer layers[66] = {{0}};
    char prefix[64][16];
    int n = 0;
    s = fsc_layer_embedding_opts(&(fsc_embedding_opts){.T = T, .C = C, .V = V, .positions = 1, .tp = tensor, .sp = sp},
                                 &layers[n++].layer); /* wte.weight, wpe.weight */
    for (int l = 0; l < L && s == FSC_OK; l++) {
        fsc_block_opts b = fsc_block_opts_default(FSC_BLOCK_GPT2, T, C, H);
        b.tp = tensor, b.sp = sp;
        snprintf(prefix[l], sizeof prefix[l], "h.%d.", l);
        layers[n].prefix = prefix[l];
        s = fsc_layer_block(&b, &layers[n++].layer);
    }
    if (s == FSC_OK)
        s = fsc_layer_lm_head_opts(&(fsc_lm_head_opts){.T = T, .C = C, .V = V, .norm = FSC_HEAD_NORM_LAYERNORM,
                                                       .norm_name = "ln_f.", .head_name = "lm_head.weight",
                                                       .tp = tensor, .sp = sp}, &layers[n++].layer);
    if (s != FSC_OK) { /* the layers made so far (the model takes them only when it is made) */
        for (int i = 0; i < n; i++) fsc_layer_free(layers[i].layer);
        return s;
    }
    return fsc_seq_model_create(dev, layers, n, out);
}

static fsc_status mini_from_config(fsc_device *dev, const char *config, fsc_model **out) {
    return mini_build(dev, config, NULL, 0, out);
}

int main(int argc, char **argv) {
    if (fsc_model_family_register(&(fsc_model_family){"mini", mini_from_config, mini_build}) != FSC_OK) {
        fprintf(stderr, "train_family: %s\n", fsc_last_error());
        return 1;
    }
    return fsc_train_main(argc, argv); /* --model mini trains it, as fsc-train trains gpt2 */
}
