/* The data (fsc/data.h): --data and --val-data opened and checked before the ranks start, each step's batch by
 * the data order (examples/train_gpt.c states it), and the validation loss.
 * Not here: the files' formats and reading (lib/io/data.c). */
#define _XOPEN_SOURCE 700 /* readlink: POSIX, not C11 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "train.h"

/* The default corpus from any directory: without --data, when examples/data/coriolanus.txt is not found from
 * the working directory, it is looked up beside the program (the link /proc/self/exe names): in
 * ../share/fsc/ (an installed bin/fsc-train), ../examples/data/ and ../../examples/data/ (build/ and
 * build/<variant>/ of the source tree). buf (cap bytes) holds the path found. 0, or -1 with err saying what
 * to pass. */
int find_default_data(train_config *c, const int *given, char *buf, size_t cap, char *err, size_t ecap) {
    if (given[option_index("data")] || access(c->data, F_OK) == 0) return 0;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = '\0';
        const char *base = strrchr(c->data, '/') ? strrchr(c->data, '/') + 1 : c->data;
        const char *where[] = {"../share/fsc", "../examples/data", "../../examples/data"};
        for (int i = 0; i < 3; i++) {
            snprintf(buf, cap, "%s/%s/%s", exe, where[i], base);
            if (access(buf, R_OK) == 0) {
                c->data = buf;
                return 0;
            }
        }
    }
    return snprintf(err, ecap, "--data not given, and the default corpus %.80s is neither in this directory nor beside "
                    "the program (%.200s/../share/fsc, ../examples/data or ../../examples/data): give --data PATH (a "
                    "text file, llm.c token shards or a uint16 token file)", c->data, slash ? exe : "?"), -1;
}

/* Under --data-format auto, a stream read as bytes (no llm.c header, a vocabulary of at most 256) whose first file
 * looks like uint16 tokens, not text: bytes cannot tell them apart, so auto would read such a file as bytes and
 * train on it without a word. Refused here instead, naming the format to give, when its first 1024 bytes are
 * - an even number with every second one zero: uint16 tokens below 256, as tools/make_tokens and nanoGPT write them;
 * - or at least 16 control bytes (0-8, 14-31, 127; a 64th of them or more), which text does not hold: uint16
 *   tokens of a larger vocabulary (GPT-2's, whose common tokens' high bytes are below 9) read without --vocab.
 * 0, or -1 with err. */
static int u16_as_bytes(const train_config *c, const fsc_data *d, const char *opt, const char *spec, const char *why,
                        char *err, size_t cap) {
    if (c->data_format != FSC_DATA_AUTO || fsc_data_format_of(d) != FSC_DATA_BYTES) return 0;
    int i = 0;
    while (i < fsc_data_files(d) && fsc_data_file_tokens(d, i) == 0) i++; /* the file auto detected bytes from */
    const uint64_t n = fsc_data_file_tokens(d, i);
    int32_t head[1024];
    const size_t k = n < 1024 ? (size_t)n : 1024;
    if (n < 4 || fsc_data_read(d, 0, k, head) != FSC_OK) return 0; /* empty files first: it starts at 0 */
    size_t control = 0;
    int zero_odd = n % 2 == 0;
    for (size_t j = 0; j < k; j++) {
        control += head[j] < 9 || (head[j] >= 14 && head[j] < 32) || head[j] == 127;
        if (j % 2 && head[j] != 0) zero_odd = 0;
    }
    const char *file = fsc_data_file(d, i), *same = strcmp(file, spec) ? NULL : file;
    if (zero_odd)
        return snprintf(err, cap, "--%s %s: %s%sread as bytes (--data-format auto: %s), but every second byte of its "
                        "first %zu is 0, as in a file of uint16 tokens (tools/make_tokens' default, nanoGPT's "
                        "train.bin): give --data-format u16 for uint16 tokens, or bytes to read it as bytes", opt,
                        spec, same ? "" : file, same ? "" : " was ", why, k), -1;
    if (control >= 16 && control * 64 >= k)
        return snprintf(err, cap, "--%s %s: %s%sread as bytes (--data-format auto: %s), but %zu of its first %zu bytes "
                        "are control characters, which text does not hold: uint16 tokens (GPT-2's: --vocab 50257 "
                        "--data-format u16)? give --data-format u16 and the tokenizer's --vocab, or bytes to read it "
                        "as bytes", opt, spec, same ? "" : file, same ? "" : " was ", why, control, k), -1;
    return 0;
}

/* The data (fsc/data.h): the files of --data, read as batches need them, not copied, so their size costs no
 * memory of their own; regular files (a device such as /dev/zero, a FIFO or a directory is refused before
 * anything is read) of --data-format, holding at least --seq + 1 tokens, every one below --vocab (checked here
 * in one pass), that must not change while training (a step that meets a changed file fails, naming it). */
int load_data(const train_config *c, fsc_data **out, size_t *n, char *err, size_t cap) {
    fsc_data *d = NULL;
    fsc_status s = fsc_data_open(&d, c->data, (fsc_data_format)c->data_format, c->vocab);
    if (s == FSC_OK && fsc_data_tokens(d) <= (uint64_t)c->seq) {
        uint64_t nt = fsc_data_tokens(d);
        snprintf(err, cap, "--data %s: %llu tokens, but --seq %d needs at least %d", c->data, (unsigned long long)nt,
                 c->seq, c->seq + 1);
        fsc_data_free(d);
        return -1;
    }
    if (s == FSC_OK && u16_as_bytes(c, d, "data", c->data, "no llm.c header, and --vocab at most 256", err, cap)) {
        fsc_data_free(d);
        return -1;
    }
    if (s == FSC_OK) s = fsc_data_check(d);
    if (s != FSC_OK) {
        snprintf(err, cap, "--data %s%s", fsc_last_error(),
                 strstr(fsc_last_error(), "vocabulary size") ? " (--vocab; is --data-format right?)" : "");
        fsc_data_free(d);
        return -1;
    }
    *out = d;
    *n = (size_t)fsc_data_tokens(d);
    return 0;
}

/* The sequences of data-parallel index d for step s, per the data-order contract (fsc_data_batch; every
 * stage and tensor rank of that index sees the same sequences). */
fsc_status fill_batch(const run_state *st, int d, int s, int32_t *tok, int32_t *tgt) {
    const train_config *c = st->cfg;
    int bl = c->batch / c->dp;
    return fsc_data_batch(st->data, s, c->batch, c->seq, d * bl, bl, tok, tgt);
}

/* --val-data: the files as --data's (fsc/data.h, --data-format), at least --seq + 1 tokens, all below --vocab.
 * Under auto, the format detected for --data (train): one --data-format holds for both streams, so llm.c shards
 * for training do not validate on a file without the magic read as bytes (or bytes on a shard). */
int load_val_data(const train_config *c, const fsc_data *train, fsc_data **out, char *err, size_t cap) {
    fsc_data_format f = (fsc_data_format)c->data_format;
    if (f == FSC_DATA_AUTO && train) f = fsc_data_format_of(train);
    fsc_status s = fsc_data_open(out, c->val_data, f, c->vocab);
    if (s == FSC_OK && fsc_data_tokens(*out) <= (uint64_t)c->seq)
        s = fsc_error(FSC_ERR_INVALID, "%llu tokens, but --seq %d needs at least %d",
                      (unsigned long long)fsc_data_tokens(*out), c->seq, c->seq + 1);
    if (s == FSC_OK && u16_as_bytes(c, *out, "val-data", c->val_data, "the format detected for --data", err, cap)) {
        fsc_data_free(*out);
        *out = NULL;
        return -1;
    }
    if (s == FSC_OK) s = fsc_data_check(*out);
    if (s == FSC_OK) return 0;
    int n = snprintf(err, cap, "--val-data %s: %s", c->val_data, fsc_last_error());
    fsc_data_free(*out);
    *out = NULL;
    fsc_data *own = NULL; /* under auto, files of another format than --data's: the message was about reading them
                           * as --data's, so say where that format came from */
    if (f != (fsc_data_format)c->data_format && n >= 0 && (size_t)n < cap &&
        fsc_data_open(&own, c->val_data, FSC_DATA_AUTO, c->vocab) == FSC_OK && fsc_data_tokens(own) > 0 &&
        fsc_data_format_of(own) != f)
        snprintf(err + n, cap - (size_t)n, "; under --data-format auto, --val-data is read in the format detected for "
                 "--data (%s), and these files are %s: give files of one format", fsc_data_format_name(f),
                 fsc_data_format_name(fsc_data_format_of(own)));
    fsc_data_free(own);
    return -1;
}

/* Whether the run validates after step (from 0): every --val-every steps and after the last. */
int val_due(const train_config *c, int step) {
    return (c->val_every > 0 && (step + 1) % c->val_every == 0) || step + 1 == c->steps;
}

/* The validation loss (collective): the mean of fsc_engine_eval over --val-batches batches of --batch sequences,
 * batch j being the sequences of step j of --val-data by the data order (this rank's part: those of data-parallel
 * index d), the same batches every time. tok and tgt hold this rank's part of a batch. */
fsc_status validate(const run_state *st, fsc_engine *e, int d, int32_t *tok, int32_t *tgt, double *loss) {
    const train_config *c = st->cfg;
    const int bl = c->batch / c->dp;
    double sum = 0;
    for (int j = 0; j < c->val_batches; j++) {
        double l = 0;
        FSC_TRY(fsc_data_batch(st->val, j, c->batch, c->seq, d * bl, bl, tok, tgt));
        FSC_TRY(fsc_engine_eval(e, tok, tgt, bl, c->batch, &l));
        sum += l;
    }
    *loss = sum / c->val_batches;
    return FSC_OK;
}
