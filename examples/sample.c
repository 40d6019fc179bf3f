/* sample: generate tokens from a model file the trainer saved (fsc-train --save, or a Hugging Face GPT-2/Llama
 * state dict with --model-config) or from a training checkpoint (one step-NNNNNNNN directory, or a --ckpt-dir: its
 * newest checkpoint that verifies, damaged newer ones skipped with a warning as --resume skips them). The file's
 * metadata records the model's configuration (safetensors.h's FSC_ST_META_MODEL; a checkpoint's metadata.json its
 * "model"); the program builds that model (generate.h's fsc_model_from_config), checks the shapes of the tensors it
 * declares against the file's before anything is allocated, loads the weights into an engine of one rank (the
 * library's loader: Hugging Face names, F32/BF16/F16; or fsc_ckpt_load_weights, the parameters alone of any world,
 * layout and optimizer the run had) and
 * generates with generate.h.
 * A byte model (vocabulary 256) reads the prompt as text and prints text; any other reads and prints token ids.
 * Deterministic: the same file, prompt, options and seed give the same tokens.
 * Not here: tokenizers, the model code (lib/model), the sampling rule (lib/core/generate.c). */
#define _XOPEN_SOURCE 700 /* lstat, strdup: POSIX, not C11 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fsc/fsc.h"
#include "suggest.h"
#include "tied_head.h"

typedef struct {
    const char *model, *config, *prompt, *device, *tokenizer;
    int tokens, top_k, ids;
    float temperature;
    long long seed;
} sample_config;

typedef enum { K_STR, K_INT, K_FLOAT, K_LL, K_FLAG } kind;
typedef struct {
    const char *name, *arg, *dflt, *help;
    kind k;
    size_t off;
    double lo, hi;
} option;
#define F(x) offsetof(sample_config, x)
static const option options[] = {
    {"model", "PATH", NULL, "the weights file (fsc-train --save: safetensors recording the model), or a checkpoint: "
     "a --ckpt-dir (its newest) or a step-NNNNNNNN directory", K_STR, F(model), 0, 0},
    {"model-config", "JSON", NULL, "the model's configuration when the file records none (a Hugging Face file), as "
     "checkpoints record it: '{\"layers\":2,\"dim\":64,\"heads\":4,\"seq\":64,\"vocab\":256}' (GPT-2) or "
     "'{\"family\":\"llama\",...}'", K_STR, F(config), 0, 0},
    {"prompt", "TEXT", NULL, "the start: its bytes for a byte model (vocab 256; default a newline), else "
     "comma-separated token ids (default 0)", K_STR, F(prompt), 0, 0},
    {"tokens", "N", "64", "tokens to generate", K_INT, F(tokens), 0, 1e7},
    {"temperature", "X", "1", "softmax temperature; 0 is greedy (the most likely token)", K_FLOAT, F(temperature), 0, 1e6},
    {"top-k", "K", "0", "sample among the K most likely tokens only (0: all)", K_INT, F(top_k), 0, 1e9},
    {"seed", "N", "1", "seed of the draws: the same seed gives the same tokens", K_LL, F(seed), 0, 9.007199254740992e15},
    {"tokenizer", "FILE", NULL, "text in and out with this tokenizer: 'gpt2' (GPT-2's, shipped in examples/data/ "
     "and share/fsc/), a tokenizer.json, a folder or vocab.json with merges.txt, a tiktoken file (plain or .gz), or "
     "sentencepiece's BPE tokenizer.model (Llama 1 and 2: without --prompt it starts from <s>); "
     "llama3:FILE for Llama 3's pattern (docs/tokenizer.md): --prompt is text (default the end-of-text token), the "
     "output text; the model's vocabulary must hold it (GPT-2: 50257, or padded to 50304)", K_STR, F(tokenizer), 0, 0},
    {"ids", NULL, NULL, "print token ids (comma-separated) also for a byte model", K_FLAG, F(ids), 0, 0},
    {"device", "NAME", "cpu", "cpu|cuda", K_STR, F(device), 0, 0},
};
#define N_OPTIONS (sizeof options / sizeof *options)

/* The name the program was run as (fsc-sample when installed, sample in build/): its usage says it. */
static const char *prog = "sample";

static void usage(FILE *out) {
    fprintf(out, "usage: %s --model PATH [options]\n"
                 "Generate tokens from a model file the trainer saved (GPT-2 or Llama).\n\n", prog);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option *o = &options[i];
        char head[64];
        snprintf(head, sizeof head, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "  %-20s %s%s%s%s\n", head, o->help, o->dflt ? " (default " : "", o->dflt ? o->dflt : "",
                o->dflt ? ")" : "");
    }
    fprintf(out, "  %-20s %s\n", "--help", "this text");
    fprintf(out, "  %-20s %s\n", "--version", "print the version and exit");
}

static int set_option(sample_config *c, const option *o, const char *v, char *err, size_t cap) {
    char *end = NULL;
    void *at = (char *)c + o->off;
    errno = 0;
    if (o->k == K_STR) return *(const char **)at = v, 0;
    double x = strtod(v, &end); /* decimal only: strtod would also read 0x10 as 16 */
    if (!*v || *end || errno || strspn(v, "0123456789+-.eE") != strlen(v) || !(x >= o->lo && x <= o->hi) ||
        (o->k != K_FLOAT && x != floor(x)))
        return snprintf(err, cap, "--%s %s: expected %s in [%g, %g]", o->name, v,
                        o->k == K_FLOAT ? "a number" : "an integer", o->lo, o->hi), -1;
    if (o->k == K_INT) *(int *)at = (int)x;
    else if (o->k == K_LL) *(long long *)at = (long long)x;
    else *(float *)at = (float)x;
    return 0;
}

/* The option a misspelt argument ("--name") was likely meant to be (suggest.h), or NULL. */
static const char *option_near(const char *arg) {
    if (strncmp(arg, "--", 2) != 0) return NULL;
    suggest s = {0};
    for (size_t i = 0; i < N_OPTIONS; i++) suggest_try(&s, arg + 2, strlen(arg + 2), options[i].name);
    return suggest_result(&s);
}

/* 0 ok, 1 help or version printed, -1 error in err. */
static int parse_args(int argc, char **argv, sample_config *c, char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (options[i].dflt && set_option(c, &options[i], options[i].dflt, err, cap)) return -1;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) return usage(stdout), 1;
        if (!strcmp(argv[a], "--version")) return printf("%s %s\n", prog, fsc_version_string()), 1;
        const option *o = NULL;
        for (size_t i = 0; i < N_OPTIONS && !o; i++)
            if (!strncmp(argv[a], "--", 2) && !strcmp(argv[a] + 2, options[i].name)) o = &options[i];
        const char *near = o ? NULL : option_near(argv[a]);
        if (!o) return snprintf(err, cap, "unknown argument '%s' (%s%s%s)", argv[a], near ? "did you mean --" : "see --help",
                                near ? near : "", near ? "?" : ""), -1;
        if (o->k == K_FLAG) {
            *(int *)((char *)c + o->off) = 1;
            continue;
        }
        if (a + 1 >= argc) return snprintf(err, cap, "--%s needs a value", o->name), -1;
        if (set_option(c, o, argv[++a], err, cap)) return -1;
    }
    if (!c->model) return snprintf(err, cap, "--model PATH is required (the weights file or checkpoint to sample from)"), -1;
    if (strcmp(c->device, "cpu") && strcmp(c->device, "cuda"))
        return snprintf(err, cap, "--device %s: expected cpu or cuda", c->device), -1;
    return 0;
}

/* The prompt as tokens: bytes for a byte model, else comma-separated ids in [0, V). */
static int parse_prompt(const sample_config *c, int V, const fsc_bpe *bpe, int32_t **out, int *n, char *err, size_t cap) {
    const int bytes = V == 256; /* --ids changes the output only */
    const char *p = c->prompt ? c->prompt : bytes ? "\n" : "0";
    size_t len = strlen(p);
    size_t room = bpe ? fsc_bpe_max_ids(bpe, len) : len; /* sentencepiece: more ids than bytes can come */
    int32_t *t = malloc((room + 1 + (size_t)c->tokens) * sizeof *t);
    if (!t) return snprintf(err, cap, "out of memory"), -1;
    int k = 0;
    if (bpe && !c->prompt) {
        if (fsc_bpe_eot(bpe) < 0)
            return free(t), snprintf(err, cap, "--tokenizer %s has no end-of-text token to start from: give --prompt",
                                     c->tokenizer), -1;
        t[k++] = fsc_bpe_eot(bpe); /* unconditional, as GPT-2 samples */
    } else if (bpe) {
        size_t nk;
        if (fsc_bpe_encode(bpe, p, len, t, &nk) != FSC_OK)
            return free(t), snprintf(err, cap, "--prompt: %s", fsc_last_error()), -1;
        k = (int)nk;
    } else if (bytes) {
        for (size_t i = 0; i < len; i++) t[k++] = (unsigned char)p[i];
    } else {
        const char *s = p;
        while (*s) {
            char *end;
            errno = 0;
            long v = strtol(s, &end, 10);
            /* an id (digits: strtol would also skip white space and take a sign, reading the text " 1" as id 1),
             * then a comma and another id, or the end ("1,,2", "1,2,", "1 x", " 1" and "+1" are refused) */
            int ok = *s >= '0' && *s <= '9' && end != s && !errno && v < V &&
                     (*end == '\0' || (*end == ',' && end[1] != '\0'));
            if (!ok) {
                free(t);
                return snprintf(err, cap, "--prompt '%s': expected comma-separated token ids in [0, %d) (the model's "
                                "vocabulary is not bytes: give --tokenizer FILE to write the prompt as text)", p, V), -1;
            }
            t[k++] = (int32_t)v;
            s = *end ? end + 1 : end;
        }
    }
    if (k == 0) {
        free(t);
        return snprintf(err, cap, "--prompt is empty: give at least one token"), -1;
    }
    *out = t, *n = k;
    return 0;
}

typedef struct {
    const sample_config *c;
    const char *config;        /* the model's configuration text */
    const char *ckpt;          /* a checkpoint directory to load instead of the weights file, or NULL */
    const fsc_ckpt_meta *meta; /* its metadata (with ckpt) */
    int removed;               /* set by rank 0: the checkpoint's load failed and its directory is gone */
} run_arg;

/* Whether checkpoint path is gone: removed by a live run while it was loaded (--keep-last's retention, a save
 * replacing its step), not damaged; a newer one is then in its directory. */
static int ckpt_removed(const char *path) {
    struct stat st;
    return lstat(path, &st) != 0 && errno == ENOENT;
}

/* The entries of weights file path that hold the tensors m declares, under m's names (the file may give them
 * Hugging Face's prefix), into *out (*n of them; free with free). An entry fsc cannot read is refused for what it is
 * (its ndim and shape say nothing: 0 for more than 4 dimensions). */
static fsc_status file_tensors(const fsc_model *m, const char *path, fsc_param_info **out, int *n) {
    fsc_st_file *f = NULL;
    *out = NULL, *n = 0;
    FSC_TRY(fsc_st_open(path, &f));
    fsc_param_info *held = calloc((size_t)m->n_tensors + 1, sizeof *held);
    fsc_status s = held ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; s == FSC_OK && i < m->n_tensors; i++) {
        const fsc_param_info *p = &m->info[i];
        const fsc_st_entry *en = fsc_st_find_weight(f, p->name);
        if (en && en->unreadable) {
            s = fsc_error(FSC_ERR_FORMAT, "%s: %s has %s, which fsc does not read (the model expects floats: F32, BF16 "
                          "or F16 of at most 4 dimensions)", path, p->name, en->unreadable);
        } else if (en) {
            fsc_param_info *h = &held[(*n)++];
            snprintf(h->name, sizeof h->name, "%s", p->name);
            h->ndim = en->ndim;
            memcpy(h->shape, en->shape, sizeof h->shape);
        }
    }
    fsc_st_close(f);
    if (s != FSC_OK) free(held), held = NULL, *n = 0;
    *out = held;
    return s;
}

/* Every tensor model m declares is in the weights file or the checkpoint with its shape (fsc_model_check_held, as
 * ckpt_tool verify checks a checkpoint against its record): checked on the model's declarations, before the engine
 * allocates and initializes it, so a configuration that does not describe the file (a record claiming a wider model or
 * a longer context) costs nothing to refuse. A weights file may hold more (Hugging Face's buffers) and a padded
 * vocabulary's real rows only; the load checks the rest. */
static fsc_status check_shapes(const fsc_model *m, const run_arg *ra) {
    const char *path = ra->ckpt ? ra->ckpt : ra->c->model;
    fsc_param_info *held = NULL;
    int n = 0;
    fsc_status s = ra->ckpt ? fsc_ckpt_meta_params(ra->meta, &held, &n) : file_tensors(m, path, &held, &n);
    if (s == FSC_OK && (s = fsc_model_check_held(m, held, n, ra->ckpt ? 0 : FSC_HELD_FILE_ROWS, NULL)) != FSC_OK)
        s = fsc_error(s, "%s: %s (the model configuration: %.300s)", path, fsc_last_error(), ra->config);
    free(held);
    return s;
}

static fsc_status run(fsc_rank *r, void *arg) {
    const run_arg *ra = arg;
    const sample_config *c = ra->c;
    fsc_model *m = NULL;
    fsc_engine *e = NULL;
    fsc_generator *g = NULL;
    int32_t *tok = NULL;
    fsc_bpe *bpe = NULL;
    FSC_TRY(fsc_model_from_config(r->dev, ra->config, &m));
    fsc_status s = check_shapes(m, ra);
    if (s == FSC_OK && c->tokenizer)
        s = fsc_bpe_load_file(&bpe, c->tokenizer); /* "gpt2": fsc_bpe_load_default */
    if (s != FSC_OK) {
        fsc_model_free(m);
        return s;
    }
    fsc_parallel_opts po = fsc_parallel_opts_default();
    fsc_optim_config oc = fsc_optim_config_default();
    oc.kind = FSC_OPT_SGD; /* no optimizer state: the engine only holds the weights, of a checkpoint too */
    s = fsc_engine_create_model(r, m, &po, &oc, 1, &e);
    if (s == FSC_OK) s = ra->ckpt ? fsc_ckpt_load_weights(e, ra->ckpt, NULL) : fsc_engine_load_weights(e, c->model);
    if (s != FSC_OK && ra->ckpt && r->rank == 0 && ckpt_removed(ra->ckpt)) ((run_arg *)arg)->removed = 1;
    if (s == FSC_OK) s = fsc_generator_create(r->dev, fsc_engine_model(e), &g);
    int n = 0, V = 0;
    const float *lg;
    /* the vocabulary: one forward over a token 0 */
    if (s == FSC_OK) s = fsc_generator_next(g, &(int32_t){ 0 }, 1, &lg, &V);
    char err[512];
    if (s == FSC_OK && bpe && (size_t)V < fsc_bpe_vocab(bpe))
        s = fsc_error(FSC_ERR_INVALID, "--tokenizer %s has %zu tokens, more than the model's vocabulary %d", c->tokenizer,
                      fsc_bpe_vocab(bpe), V);
    if (s == FSC_OK && parse_prompt(c, V, bpe, &tok, &n, err, sizeof err) != 0) s = fsc_error(FSC_ERR_INVALID, "%s", err);
    fsc_sample_opts so = { .temperature = c->temperature, .top_k = c->top_k, .seed = (uint64_t)c->seed };
    if (s == FSC_OK) s = fsc_generate(g, tok, n, c->tokens, &so);
    if (s == FSC_OK) {
        const int bytes = V == 256 && !c->ids, text = bpe && !c->ids;
        size_t tl;
        const uint8_t *tb = NULL;
        for (int i = 0; i < n + c->tokens; i++) {
            if (text && (tb = fsc_bpe_token(bpe, tok[i], &tl)) != NULL) fwrite(tb, 1, tl, stdout);
            else if (text) printf("<|%d|>", (int)tok[i]); /* a padding row's id: no text */
            else if (bytes) putchar(tok[i]);
            else printf(i ? ",%d" : "%d", (int)tok[i]);
        }
        int nl = text ? tb && tl && tb[tl - 1] == '\n' : n + c->tokens > 0 && tok[n + c->tokens - 1] == '\n';
        if (!(bytes || text) || !nl) putchar('\n'); /* text ends a line */
        fflush(stdout);
    }
    free(tok);
    fsc_bpe_free(bpe);
    fsc_generator_free(g);
    fsc_engine_free(e);
    fsc_model_free(m);
    return s;
}

/* Generate from c's model: 0, or the exit status of a failure, said on stderr. A --model DIR's newest checkpoint that
 * verifies, read with its metadata by fsc_ckpt_latest_read (which takes the newest again when a live run removes one
 * while it is read); when a live run removes it later, while the ranks load it, *again is set and nothing is said
 * (unless last): the caller takes the newest again (nothing was printed: the load comes before generation). */
static int sample_model(const sample_config *c, int last, int *again) {
    run_arg ra = { .c = c };
    char ckpt[4096], err[512];
    char *config = NULL;
    fsc_ckpt_meta *ckmeta = NULL; /* a checkpoint's metadata */
    fsc_status s;
    struct stat sb;
    int64_t step = -1;
    *again = 0;
    /* the model's configuration: --model-config, else the file's or the checkpoint's record */
    if (stat(c->model, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char meta[4200], skipped[8192] = "";
        snprintf(meta, sizeof meta, "%s/metadata.json", c->model);
        if (access(meta, F_OK) == 0) { /* one checkpoint */
            snprintf(ckpt, sizeof ckpt, "%s", c->model);
            s = fsc_ckpt_meta_read(ckpt, &ckmeta);
        } else { /* the newest that verifies, as --resume falls back past a damaged one */
            s = fsc_ckpt_latest_read(c->model, FSC_CKPT_READ_VERIFY | FSC_CKPT_READ_FALLBACK, ckpt, sizeof ckpt, &step,
                                     &ckmeta, skipped, sizeof skipped);
        }
        if (s != FSC_OK || !ckmeta) {
            if (s != FSC_OK) fprintf(stderr, "sample: %s\n", fsc_last_error());
            else fprintf(stderr, "sample: --model %s: a directory without a complete checkpoint (nor metadata.json)\n",
                         c->model);
            return 1;
        }
        if (skipped[0]) fprintf(stderr, "sample: warning: %s; sampling from %s\n", skipped, ckpt);
        config = strdup(c->config ? c->config : ckmeta->model_config);
        ra.ckpt = ckpt, ra.meta = ckmeta;
    } else {
        fsc_st_file *f = NULL;
        if ((s = fsc_st_open(c->model, &f)) != FSC_OK) {
            fprintf(stderr, "sample: %s\n", fsc_last_error());
            return 1;
        }
        const char *rec = fsc_st_metadata(f, FSC_ST_META_MODEL);
        config = c->config ? strdup(c->config) : rec ? strdup(rec) : NULL;
        fsc_st_close(f);
        if (tied_llama_head(c->model, err, sizeof err)) { /* a Hugging Face Llama with tie_word_embeddings */
            fprintf(stderr, "sample: %s\n", err);
            free(config);
            return 1;
        }
    }
    if (!config) {
        fprintf(stderr, "sample: %s records no model configuration (a file not written by fsc-train --save): give "
                "it with --model-config JSON (see --help)\n", c->model);
        fsc_ckpt_meta_free(ckmeta);
        return 2;
    }
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.device = c->device;
    ra.config = config;
    s = fsc_cluster_run(&co, run, &ra);
    free(config);
    fsc_ckpt_meta_free(ckmeta);
    if (s != FSC_OK && ra.removed && step >= 0 && !last) { /* a DIR's newest, removed meanwhile */
        *again = 1;
        return 1;
    }
    if (s != FSC_OK) { /* a configuration the caller gave is named as such (it can be what is wrong) */
        const int given = c->config && strstr(fsc_last_error(), "configuration");
        fprintf(stderr, "sample: %s%s\n", given ? "--model-config: " : "", fsc_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    sample_config c;
    char err[512];
    if (argc > 0 && argv[0] && argv[0][0]) {
        const char *slash = strrchr(argv[0], '/');
        prog = slash ? slash + 1 : argv[0];
    }
    int rc = parse_args(argc, argv, &c, err, sizeof err);
    if (rc == 1) return 0;
    if (rc < 0) {
        fprintf(stderr, "sample: %s\n", err);
        return 2;
    }
    int again = 1;
    for (int attempt = 0; again; attempt++) rc = sample_model(&c, attempt == 15, &again);
    return rc;
}
