/* The model families the trainer trains: every family the library knows (family.h: the built-in ones and those a
 * program registered), its engine made from the options' configuration text (model_text, model_engine). The
 * built-in families have an entry in families[] (--model NAME finds it by name) with what the trainer adds to them:
 * the options only they take, their defaults and checks, their size, their line in the banner, the weights files
 * they refuse, their Hugging Face config.json and the planner's job. A registered family needs no entry: it gets
 * the generic one. Nothing else in the trainer asks which family it trains. Adding a family: its library code
 * (lib/model, registered in family.h's table or by the program: docs/models.md); an entry here only for options of
 * its own or Hugging Face files.
 * Not here: the models themselves (lib/model: gpt.h, llama.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "train.h"
#include "../tied_head.h"

/* The GPT the options describe (the MoE fields zero for a dense GPT). The options every family shares are checked
 * as this GPT's (check_config). */
fsc_gpt_config model_config(const train_config *c) {
    fsc_gpt_config g = {.layers = c->layers, .dim = c->dim, .heads = c->heads, .seq = c->seq, .vocab = c->vocab,
                        .padded_vocab = c->padded_vocab};
    if (c->moe_experts) {
        g.moe_experts = c->moe_experts, g.moe_top_k = c->moe_top_k, g.moe_every = c->moe_every;
        g.moe_capacity = c->moe_capacity, g.moe_aux = c->moe_aux;
    }
    return g;
}

/* The Llama the options describe (after resolve_model). */
fsc_llama_config llama_config(const train_config *c) {
    fsc_llama_config l = {.layers = c->layers, .dim = c->dim, .heads = c->heads, .kv_heads = c->kv_heads,
                          .ffn = c->ffn, .seq = c->seq, .vocab = c->vocab, .rope_theta = c->rope_theta,
                          .norm_eps = c->norm_eps, .padded_vocab = c->padded_vocab};
    if (c->moe_experts) { /* MoE decoder layers of GELU experts of width --ffn */
        l.moe_experts = c->moe_experts, l.moe_top_k = c->moe_top_k, l.moe_every = c->moe_every;
        l.moe_capacity = c->moe_capacity, l.moe_aux = c->moe_aux;
    }
    return l;
}

/* ---- gpt2: GPT-2 (gpt.h), its MLP 4 x --dim wide ------------------------------------------------------------- */

static int gpt_resolve(train_config *c, char *err, size_t cap) {
    if (!c->ffn) c->ffn = 4 * c->dim;
    if (c->ffn != 4 * c->dim)
        return snprintf(err, cap, "--ffn %d: the gpt2 MLP is 4 x --dim = %d wide (other widths: --model llama)",
                        c->ffn, 4 * c->dim), -1;
    return 0;
}

/* The vocab-parallel embedding and head split the vocabulary's vrows rows by --tp, and every rank's slice must hold
 * a real row: refused in the options' names (--vocab, --padded-vocab), for every built-in family. */
static int check_tp_vocab(const train_config *c, int vrows, char *err, size_t cap) {
    const int T = c->tp;
    if (vrows % T != 0) {
        const int up = (vrows + T - 1) / T * T;
        char pad[80] = ""; /* the padding that would do, where one does */
        if (c->vocab >= T && up - c->vocab < up / T)
            snprintf(pad, sizeof pad, "; --padded-vocab %d pads its rows to a multiple", up);
        return snprintf(err, cap, "--tp %d: %s %d does not divide over the tensor group (tensor parallelism splits "
                        "it%s)", T, c->padded_vocab > c->vocab ? "--padded-vocab" : "--vocab", vrows, pad), -1;
    }
    if (c->vocab < T)
        return snprintf(err, cap, "--tp %d: --vocab %d leaves a rank's slice of the vocabulary without a real row, "
                        "whatever the padding (at most --tp %d)", T, c->vocab, c->vocab), -1;
    if (vrows - c->vocab >= vrows / T)
        return snprintf(err, cap, "--tp %d: --padded-vocab %d (--vocab %d) leaves the last rank's slice of %d rows "
                        "without a real one: pad by fewer than %d rows", T, vrows, c->vocab, vrows / T, vrows / T), -1;
    return 0;
}

static int gpt_check_tp(const train_config *c, char *err, size_t cap) {
    fsc_gpt_config g = model_config(c);
    /* the heads first, as the library says it (fsc_tp_check_config); the vocabulary in the options' names */
    if (c->heads % c->tp == 0 && check_tp_vocab(c, fsc_gpt_vocab_rows(&g), err, cap) != 0) return -1;
    if (fsc_tp_check_config(&g, c->tp) != FSC_OK) return snprintf(err, cap, "--tp: %s", fsc_last_error()), -1;
    return 0;
}

static size_t gpt_num_params(const train_config *c) {
    fsc_gpt_config g = model_config(c);
    return fsc_gpt_num_params(&g);
}

static int gpt_moe_blocks(const train_config *c) {
    fsc_gpt_config g = model_config(c);
    return fsc_gpt_num_moe_blocks(&g);
}

static void gpt_describe(const train_config *c, char *buf, size_t cap) { (void)c, snprintf(buf, cap, "%s", ""); }

static void gpt_plan(const train_config *c, fsc_plan_job *j) { j->gpt = model_config(c); }

/* The torch_dtype of config.json: the element type of the weights file beside it (--save-dtype), as transformers'
 * save_pretrained records it (from_pretrained(torch_dtype="auto") builds the model in it). */
static const char *hf_dtype(const train_config *c) {
    static const char *const n[] = { "float32", "bfloat16", "float16" }; /* f32|bf16|f16 */
    return (unsigned)c->save_dtype < 3 ? n[c->save_dtype] : "float32";
}

/* Hugging Face's GPT2Config of the model (transformers' names; dropout 0 as fsc trains; GELU with tanh). */
static cJSON *gpt_hf_config(const train_config *c) {
    cJSON *o = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(o, "n_positions", c->seq);
    cJSON_AddNumberToObject(o, "n_ctx", c->seq);
    cJSON_AddNumberToObject(o, "n_embd", c->dim);
    cJSON_AddNumberToObject(o, "n_layer", c->layers);
    cJSON_AddNumberToObject(o, "n_head", c->heads);
    cJSON_AddNullToObject(o, "n_inner"); /* 4 x n_embd */
    cJSON_AddStringToObject(o, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(o, "initializer_range", 0.02);
    cJSON_AddNumberToObject(o, "resid_pdrop", 0.0);
    cJSON_AddNumberToObject(o, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(o, "attn_pdrop", 0.0);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(o, "torch_dtype", hf_dtype(c));
    return o;
}

/* ---- llama: Llama (llama.h, Hugging Face LlamaForCausalLM's layout) --------------------------------------------- */

static const char *const llama_options[] = {"kv-heads", "rope-theta", "norm-eps", NULL};

/* --ffn's default (Llama's rule), the Llama's own checks, and what tensor parallelism splits. */
static int llama_resolve(train_config *c, char *err, size_t cap) {
    if (!c->ffn) c->ffn = fsc_llama_default_ffn(c->dim);
    fsc_llama_config l = llama_config(c);
    if (fsc_llama_config_validate(&l) != FSC_OK) return snprintf(err, cap, "model: %s", fsc_last_error()), -1;
    if (c->tp > 1) { /* the tensor-parallel layers split heads, kv heads, the MLP width and the vocabulary */
        const char *what[3] = {"--heads", "--kv-heads", "--ffn"};
        const int n[3] = {c->heads, c->kv_heads, c->ffn};
        for (int i = 0; i < 3; i++)
            if (n[i] % c->tp != 0)
                return snprintf(err, cap, "--tp %d: %s %d does not divide over the tensor group (tensor parallelism "
                                "splits it)", c->tp, what[i], n[i]), -1;
        if (check_tp_vocab(c, fsc_llama_vocab_rows(&l), err, cap) != 0) return -1;
        if (c->sequence_parallel && c->seq % c->tp != 0)
            return snprintf(err, cap, "--sequence-parallel: --seq %d does not divide by --tp %d (between layers "
                            "each rank holds B x seq / tp consecutive rows of a micro-batch's B x seq)", c->seq,
                            c->tp), -1;
    }
    return 0;
}

static size_t llama_num_params(const train_config *c) {
    fsc_llama_config l = llama_config(c);
    return fsc_llama_num_params(&l);
}

static int llama_moe_blocks(const train_config *c) {
    return fsc_llama_num_moe_layers(&(fsc_llama_config){ .layers = c->layers, .moe_experts = c->moe_experts,
                                                         .moe_every = c->moe_every });
}

static void llama_describe(const train_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, " (%d kv), ffn %d", c->kv_heads, c->ffn);
}

static void llama_plan(const train_config *c, fsc_plan_job *j) {
    j->model = FSC_PLAN_LLAMA;
    j->llama = llama_config(c);
    j->sequence_parallel = c->sequence_parallel;
}

/* The double of float_text's decimal (1e-5f as 1e-05, not 9.99999974737875e-06). */
static double short_decimal(float f) {
    char buf[32];
    float_text(f, buf, sizeof buf);
    return strtod(buf, NULL);
}

/* Hugging Face's LlamaConfig of the model (lm_head its own tensor: not tied). */
static cJSON *llama_hf_config(const train_config *c) {
    const fsc_llama_config l = llama_config(c);
    cJSON *o = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(o, "model_type", "llama");
    cJSON_AddNumberToObject(o, "vocab_size", l.vocab);
    cJSON_AddNumberToObject(o, "hidden_size", l.dim);
    cJSON_AddNumberToObject(o, "intermediate_size", l.ffn);
    cJSON_AddNumberToObject(o, "num_hidden_layers", l.layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", l.heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", l.kv_heads ? l.kv_heads : l.heads);
    cJSON_AddNumberToObject(o, "max_position_embeddings", l.seq);
    cJSON_AddNumberToObject(o, "rms_norm_eps", short_decimal(l.norm_eps));
    cJSON_AddNumberToObject(o, "rope_theta", short_decimal(l.rope_theta));
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 0);
    cJSON_AddNumberToObject(o, "initializer_range", 0.02);
    cJSON_AddStringToObject(o, "torch_dtype", hf_dtype(c));
    return o;
}

/* ---- a family the library knows and the trainer does not (a program registered it: family.h) ----------------- */

/* Its model built from the options' text on the cpu device (a model declares its tensors; the engine allocates
 * them), *n its parameters: 0, or -1 with the family's refusal in err. */
static int generic_count(const train_config *c, size_t *n, char *err, size_t cap) {
    char *text = model_text(c);
    fsc_device *dev = NULL;
    fsc_model *m = NULL;
    fsc_status s = text ? fsc_device_create("cpu", NULL, &dev) : fsc_error(FSC_ERR_NOMEM, "out of memory");
    if (s == FSC_OK) s = fsc_model_from_config(dev, text, &m);
    if (s != FSC_OK && err) snprintf(err, cap, "--model %s: %s", c->model, fsc_last_error());
    *n = m ? fsc_model_num_full_params(m) : 0;
    fsc_model_free(m);
    fsc_device_free(dev);
    free(text);
    return s == FSC_OK ? 0 : -1;
}

static int generic_resolve(train_config *c, char *err, size_t cap) {
    size_t n;
    return generic_count(c, &n, err, cap);
}

static int generic_check_tp(const train_config *c, char *err, size_t cap) {
    if (!fsc_model_family_find(c->model)->build)
        return snprintf(err, cap, "--tp %d: model family '%s' has no tensor-parallel form (its family's build is "
                        "NULL)", c->tp, c->model), -1;
    return 0;
}

static size_t generic_num_params(const train_config *c) {
    size_t n;
    generic_count(c, &n, NULL, 0);
    return n;
}

static int generic_moe_blocks(const train_config *c) { return (void)c, 0; }

/* ---- the table ------------------------------------------------------------------------------------------------- */

static const model_family families[] = {
    {"gpt2", NULL, gpt_resolve, gpt_check_tp, gpt_num_params, gpt_moe_blocks, gpt_describe, NULL,
     gpt_hf_config, gpt_plan},
    {"llama", llama_options, llama_resolve, NULL, llama_num_params, llama_moe_blocks, llama_describe,
     tied_llama_head, llama_hf_config, llama_plan},
};
enum { NFAMILIES = sizeof families / sizeof families[0] };
static const model_family generic = {NULL, NULL, generic_resolve, generic_check_tp, generic_num_params,
                                     generic_moe_blocks, gpt_describe, NULL, NULL, NULL};

/* The trainer's entry of a family the library knows: the table's, else the generic one; NULL for a name the library
 * does not know. */
const model_family *model_family_find(const char *name) {
    for (int i = 0; i < NFAMILIES; i++)
        if (strcmp(families[i].name, name) == 0) return &families[i];
    return fsc_model_family_find(name) ? &generic : NULL;
}

/* --model's family (test_trainer runs each of those --help names). */
const model_family *model_family_of(const train_config *c) { return model_family_find(c->model); }

char *model_text(const train_config *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "family", c->model);
    const struct { const char *key; int v; } ints[] = {
        {"layers", c->layers}, {"dim", c->dim}, {"heads", c->heads}, {"seq", c->seq}, {"vocab", c->vocab},
        {"kv_heads", c->kv_heads}, {"ffn", c->ffn}, {"padded_vocab", c->padded_vocab}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].v) cJSON_AddNumberToObject(o, ints[i].key, ints[i].v);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta); /* a float: exact as a double, and back */
    cJSON_AddNumberToObject(o, "norm_eps", c->norm_eps);
    if (c->moe_experts) { /* (model_config's: the MoE fields only of an MoE model) */
        cJSON_AddNumberToObject(o, "moe_experts", c->moe_experts);
        cJSON_AddNumberToObject(o, "moe_top_k", c->moe_top_k);
        cJSON_AddNumberToObject(o, "moe_every", c->moe_every);
        cJSON_AddNumberToObject(o, "moe_capacity", c->moe_capacity);
        cJSON_AddNumberToObject(o, "moe_aux", c->moe_aux);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

fsc_status model_engine(fsc_rank *r, const train_config *c, const fsc_parallel_opts *po, const fsc_optim_config *oc,
                        fsc_engine **e) {
    char *text = model_text(c);
    fsc_status s = text ? fsc_engine_create_config(r, text, po, oc, c->seed, e)
                        : fsc_error(FSC_ERR_NOMEM, "out of memory for the model's configuration");
    free(text);
    return s;
}

/* An option another family owns, given for this one: "--kv-heads applies to --model llama only". */
int check_family_options(const train_config *c, const int *given, char *err, size_t cap) {
    const model_family *f = model_family_of(c);
    if (!f->name) return 0; /* a registered family: its text holds every model option; it reads the ones it knows */
    for (int i = 0; i < NFAMILIES; i++) {
        const model_family *g = &families[i];
        for (int k = 0; g != f && g->options && g->options[k]; k++)
            if (given[option_index(g->options[k])])
                return snprintf(err, cap, "--%s applies to --model %s only", g->options[k], g->name), -1;
    }
    return 0;
}

/* --load's weights file against the model it records (safetensors.h's FSC_ST_META_MODEL), every family's: a record
 * that is not a JSON object, that its family refuses, or whose model has other tensors than the file holds (more or
 * fewer layers, another width or context: fsc_model_config_check_held, as ckpt_tool verify checks a checkpoint's
 * record against its tensors and as the sampler builds its model from the record) makes the file malformed: 1 with
 * err. A file without a record (Hugging Face's), one of a family this program does not know, a checkpoint directory
 * and a file that does not open are the load's to judge. The file's entries are taken by their names without
 * Hugging Face's prefix; those fsc cannot read are no tensor of any model. */
int check_load_record(const char *path, char *err, size_t cap) {
    struct stat sb;
    fsc_st_file *f = NULL;
    if (stat(path, &sb) != 0 || S_ISDIR(sb.st_mode) || fsc_st_open(path, &f) != FSC_OK) return 0;
    const char *rec = fsc_st_metadata(f, FSC_ST_META_MODEL);
    cJSON *o = rec ? cJSON_Parse(rec) : NULL;
    const int object = cJSON_IsObject(o);
    cJSON_Delete(o);
    const int n = fsc_st_count(f);
    fsc_param_info *held = object ? calloc((size_t)n + 1, sizeof *held) : NULL;
    int k = 0;
    for (int i = 0; held && i < n; i++) {
        const fsc_st_entry *en = fsc_st_entry_at(f, i);
        if (en->unreadable) continue;
        snprintf(held[k].name, sizeof held[k].name, "%s", fsc_st_weight_name(en->name));
        held[k].ndim = en->ndim;
        memcpy(held[k++].shape, en->shape, sizeof en->shape);
    }
    fsc_status s = FSC_OK;
    if (rec && !object) s = fsc_error(FSC_ERR_FORMAT, "%s: its model record (%s) is not a JSON object: %.200s", path,
                                      FSC_ST_META_MODEL, rec);
    else if (object && !held) s = fsc_error(FSC_ERR_NOMEM, "%s: out of memory", path);
    else if (held && (s = fsc_model_config_check_held(rec, held, k, FSC_HELD_EXACT | FSC_HELD_FILE_ROWS)) != FSC_OK)
        s = s == FSC_ERR_UNSUPPORTED ? FSC_OK /* not told here */
            : fsc_error_prefix(s, "%s: its model record (%s) %s", path, FSC_ST_META_MODEL, s == FSC_ERR_INVALID
                               ? "is refused by its family" : "does not describe the tensors it holds");
    free(held);
    fsc_st_close(f);
    if (s == FSC_OK) return 0;
    snprintf(err, cap, "%s", fsc_last_error());
    return 1;
}
