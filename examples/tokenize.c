/* tokenize (installed as fsc-tokenize): a text file into the token file the trainer reads, with GPT-2's
 * tokenizer or another byte-level BPE (fsc/bpe.h: tokenizer.json, vocab.json + merges.txt, tiktoken files) or
 * sentencepiece's BPE (Llama 1 and 2's tokenizer.model), and a token file back into text.
 *   tokenize [--tokenizer FILE] [--format u16|llmc] [--eot] TEXT OUT    encode: OUT holds TEXT's ids
 *   tokenize --val F --val-out VAL ... TEXT OUT   the last F of the text (from the first place after that the ids
 *                                                 do not change) into VAL instead (fsc-train --val-data VAL)
 *   tokenize --decode [--tokenizer FILE] [--format u16|llmc] TOKENS OUT  decode: OUT holds the tokens' text
 * u16: headerless little-endian uint16 (the trainer's --data-format u16); llmc: llm.c's shard, a 1024-byte
 * header then uint16 (the trainer detects it). Train on either with --vocab 50257 (or the padded 50304).
 * The text is mapped, not read, and encoded in pieces of about 1 MiB cut where the ids do not change
 * (fsc_bpe_split_point), so a file of any size needs memory for one piece's ids.
 * Exit status: 0 done, 1 a file or the vocabulary could not be read or written (the message says which and
 * why), 2 usage. */
#define _XOPEN_SOURCE 700 /* realpath, PATH_MAX: POSIX, not C11 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "fsc/fsc.h"

static const char *prog = "tokenize";

/* The options, one table for parsing and the usage text */
typedef struct {
    const char *name, *arg, *help;
} option;
static const option options[] = {
    {"tokenizer", "FILE", "gpt2 (default: GPT-2's " FSC_BPE_GPT2_FILE " from examples/data/ or beside the program, "
                          "share/fsc/ when installed), or a byte-level BPE's file: tokenizer.json, a folder or vocab.json "
                          "with merges.txt beside it, a tiktoken file (plain or .gz), sentencepiece's BPE tokenizer.model "
                          "(Llama 1 and 2); llama3:FILE for Llama 3's pattern (docs/tokenizer.md)"},
    {"vocab", "FILE", "the same as --tokenizer"},
    {"format", "u16|llmc", "the token file: headerless uint16 (default) or llm.c's shard with its header"},
    {"eot", NULL, "encode: put the end-of-text token (GPT-2: 50256; sentencepiece: <s>) before the text, as llm.c's "
                  "shards begin documents"},
    {"val", "F", "encode: the last fraction F (0 < F < 1) of the text goes to --val-out, cut where a line starts "
                 "with a letter after a line that does not end in white space"},
    {"val-out", "PATH", "the validation tokens' file (with --val)"},
    {"decode", NULL, "TOKENS to text instead of TEXT to tokens"},
    {"version", NULL, "print the version and exit"},
    {"help", NULL, "print this and exit"},
};
#define NOPT (sizeof options / sizeof options[0])

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: %s [options] TEXT OUT | --decode [options] TOKENS OUT\n"
        "Turn a text file into the tokens the trainer reads (GPT-2's: --data OUT --data-format u16 --vocab 50257),\n"
        "or tokens back into text. Options:\n",
        prog);
    for (size_t i = 0; i < NOPT; i++) {
        char head[64];
        snprintf(head, sizeof head, "--%s%s%s", options[i].name, options[i].arg ? " " : "",
                 options[i].arg ? options[i].arg : "");
        fprintf(f, "  %-20s %s\n", head, options[i].help);
    }
}

typedef struct {
    const char *vocab, *in, *out, *val_out;
    int llmc, eot, decode;
    double val;
} config;

/* 0, 1 to exit 0 (--help, --version), or 2 with the message printed */
static int parse_args(int argc, char **argv, config *c) {
    int npos = 0, operands = 0; /* after "--": every argument is a file, as getopt has it */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!operands && !strcmp(a, "--")) {
            operands = 1;
            continue;
        }
        if (operands || strncmp(a, "--", 2) != 0) {
            if (npos == 2) return fprintf(stderr, "%s: one TEXT and one OUT, not also '%s'\n", prog, a), 2;
            *(npos++ ? &c->out : &c->in) = a;
            continue;
        }
        size_t k = 0;
        while (k < NOPT && strcmp(a + 2, options[k].name) != 0) k++;
        if (k == NOPT) return fprintf(stderr, "%s: unknown option '%s' (--help lists them)\n", prog, a), 2;
        if (options[k].arg && i + 1 == argc) return fprintf(stderr, "%s: %s needs %s\n", prog, a, options[k].arg), 2;
        const char *v = options[k].arg ? argv[++i] : NULL;
        if (!strcmp(options[k].name, "help")) return usage(stdout), 1;
        if (!strcmp(options[k].name, "version")) return printf("%s %s\n", prog, fsc_version_string()), 1;
        if (!strcmp(options[k].name, "vocab") || !strcmp(options[k].name, "tokenizer")) {
            if (c->vocab) return fprintf(stderr, "%s: give one --tokenizer (or --vocab)\n", prog), 2;
            c->vocab = v;
        }
        if (!strcmp(options[k].name, "eot")) c->eot = 1;
        if (!strcmp(options[k].name, "decode")) c->decode = 1;
        if (!strcmp(options[k].name, "val-out")) c->val_out = v;
        if (!strcmp(options[k].name, "val")) {
            char *end;
            c->val = strtod(v, &end);
            if (end == v || *end || !(c->val > 0 && c->val < 1))
                return fprintf(stderr, "%s: --val must be a fraction in (0, 1), not '%s'\n", prog, v), 2;
        }
        if (!strcmp(options[k].name, "format")) {
            if (strcmp(v, "u16") != 0 && strcmp(v, "llmc") != 0)
                return fprintf(stderr, "%s: --format must be u16 or llmc, not '%s'\n", prog, v), 2;
            c->llmc = !strcmp(v, "llmc");
        }
    }
    if (npos < 2)
        return fprintf(stderr, "%s: give %s and OUT\n", prog, c->decode ? "TOKENS" : "TEXT"), usage(stderr), 2;
    if (c->decode && (c->eot || c->val > 0 || c->val_out))
        return fprintf(stderr, "%s: --eot, --val and --val-out are for encoding, not with --decode\n", prog), 2;
    if ((c->val > 0) != (c->val_out != NULL))
        return fprintf(stderr, "%s: give --val F and --val-out PATH together\n", prog), 2;
    return 0;
}

static int write_all(FILE *f, const char *path, const void *buf, size_t n) {
    if (n && fwrite(buf, 1, n, f) != n) return fprintf(stderr, "%s: writing %s: %s\n", prog, path, strerror(errno)), 1;
    return 0;
}

/* llm.c's header: magic, version 1, the token count, zeros to 1024 bytes */
static int write_header(FILE *f, const char *path, uint64_t count) {
    int32_t h[256] = {FSC_DATA_LLMC_MAGIC, 1, (int32_t)count};
    return write_all(f, path, h, sizeof h);
}

/* len bytes of text as token ids into f (named out); more: the text continues one encoded before */
static int encode_into(const fsc_bpe *b, const config *c, const uint8_t *text, size_t len, int more, const char *out, FILE *f,
                       uint64_t *tokens) {
    enum { PIECE = 1 << 20 };
    int32_t *ids = NULL;
    uint16_t *u16 = NULL;
    size_t cap = 0;
    uint64_t count = 0;
    if (c->llmc && write_header(f, out, 0) != 0) return 1;
    const int32_t unk = fsc_bpe_unk(b); /* a run of unknown text across a cut is one id, as in the whole */
    int32_t last = -1;
    uint16_t eot = (uint16_t)fsc_bpe_eot(b);
    if (c->eot && write_all(f, out, &eot, 2) != 0) return 1;
    count += c->eot != 0;
    for (size_t at = 0; at < len;) {
        size_t end = fsc_bpe_split_point(text, len, at + PIECE < len ? at + PIECE : len), n;
        if (fsc_bpe_max_ids(b, end - at) > cap) {
            cap = fsc_bpe_max_ids(b, end - at);
            free(ids), free(u16);
            ids = malloc(cap * sizeof *ids), u16 = malloc(cap * sizeof *u16);
            if (!ids || !u16)
                return free(ids), free(u16), fprintf(stderr, "%s: out of memory for the ids of %zu bytes of text (%zu "
                                                      "ids at most)\n", prog, end - at, cap), 1;
        }
        /* after the first piece (or the cut of --val) the text continues: no sentencepiece dummy prefix */
        fsc_status s = more || at > 0 ? fsc_bpe_encode_more(b, text + at, end - at, ids, &n)
                                      : fsc_bpe_encode(b, text + at, end - at, ids, &n);
        if (s != FSC_OK)
            return free(ids), free(u16), fprintf(stderr, "%s: %s: %s\n", prog, c->in, fsc_last_error()), 1;
        const size_t skip = at > 0 && n > 0 && unk >= 0 && ids[0] == unk && last == unk;
        for (size_t i = skip; i < n; i++) u16[i - skip] = (uint16_t)ids[i]; /* little-endian, as the trainer reads */
        if (write_all(f, out, u16, (n - skip) * 2) != 0) return free(ids), free(u16), 1;
        if (n) last = ids[n - 1];
        count += n - skip, at = end;
    }
    free(ids), free(u16);
    if (c->llmc && count > INT32_MAX)
        return fprintf(stderr, "%s: %llu tokens: more than an llm.c shard holds (2^31 - 1): use --format u16 or split "
                       "the text\n", prog, (unsigned long long)count), 1;
    if (c->llmc && fseek(f, 0, SEEK_SET) != 0) /* the header's count is written last: OUT must be a file */
        return fprintf(stderr, "%s: writing %s: cannot go back to its header to write the token count: %s\n", prog, out,
                       strerror(errno)), 1;
    if (c->llmc && write_header(f, out, count) != 0) return 1;
    *tokens = count;
    return 0;
}

/* len bytes of text into the token file out (more: the text continues one encoded before) */
static int encode_file(const fsc_bpe *b, const config *c, const uint8_t *text, size_t len, int more, const char *out) {
    FILE *f = fopen(out, "wb");
    if (!f) return fprintf(stderr, "%s: cannot write %s: %s\n", prog, out, strerror(errno)), 1;
    uint64_t count = 0;
    int rc = encode_into(b, c, text, len, more, out, f, &count);
    if (fclose(f) != 0 && rc == 0) rc = (fprintf(stderr, "%s: writing %s: %s\n", prog, out, strerror(errno)), 1);
    if (rc == 0) /* said once the file is whole */
        printf("%s: %zu bytes -> %llu tokens (%s) in %s\n", c->in, len, (unsigned long long)count,
               c->llmc ? "llmc" : "u16", out);
    return rc;
}

/* Where the last character of ids[0 .. k) that some byte pieces spell would end past k (ids[k] continuing it):
 * the id that begins it, where a chunk of ids is cut instead, so that no character is decoded in two halves;
 * else k. A lead byte opens at most 3 continuation bytes; a longer run of them decodes alike when cut anywhere. */
static size_t char_cut(const fsc_bpe *b, const int32_t *ids, size_t k) {
    size_t tl;
    const uint8_t *t = fsc_bpe_token(b, ids[k], &tl);
    if (!t || tl != 1 || (t[0] & 0xc0) != 0x80) return k; /* ids[k] begins a character, or is no byte */
    for (size_t j = k; j > 0 && k - j < 4; j--) {
        t = fsc_bpe_token(b, ids[j - 1], &tl);
        if (!t || tl != 1) return k;
        if ((t[0] & 0xc0) == 0x80) continue;
        const size_t need = t[0] >= 0xf0 ? 4 : t[0] >= 0xe0 ? 3 : t[0] >= 0xc0 ? 2 : 1;
        return j - 1 + need > k && j - 1 > 0 ? j - 1 : k;
    }
    return k;
}

/* path with its folder resolved (realpath) into buf; 0, or -1 when the folder does not resolve */
static int resolved(const char *path, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX], real[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    if (!realpath(dir, real)) return -1;
    return snprintf(buf, cap, "%s/%s", real, slash ? slash + 1 : path) < (int)cap ? 0 : -1;
}

/* Whether paths a and b name one file: the same device and inode where both exist, else the same resolved name */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    const int ha = stat(a, &sa) == 0, hb = stat(b, &sb) == 0;
    if (ha && hb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ha || hb) return 0;
    char ra[PATH_MAX + 256], rb[PATH_MAX + 256];
    if (resolved(a, ra, sizeof ra) != 0 || resolved(b, rb, sizeof rb) != 0) return strcmp(a, b) == 0;
    return strcmp(ra, rb) == 0;
}

/* The token file c->in into the text file c->out, opened (emptied) only once the tokens could be opened */
static int decode_file(const fsc_bpe *b, const config *c) {
    fsc_data *d = NULL;
    if (fsc_data_open(&d, c->in, c->llmc ? FSC_DATA_LLMC : FSC_DATA_U16, (int)fsc_bpe_vocab(b)) != FSC_OK) {
        char why[1024]; /* the message, before the probe below replaces it */
        snprintf(why, sizeof why, "%s", fsc_last_error());
        fsc_data *own = NULL; /* llm.c shards read as u16: the library's message, with the option that reads them
                               * in place of its "read it with the format llmc" (one hint, not two) */
        if (!c->llmc && fsc_data_open(&own, c->in, FSC_DATA_AUTO, (int)fsc_bpe_vocab(b)) == FSC_OK &&
            fsc_data_format_of(own) == FSC_DATA_LLMC)
            fprintf(stderr, "%s: %s begins with llm.c's magic %d: it is an llm.c token shard, not headerless uint16 "
                    "tokens (give --format llmc)\n", prog, fsc_data_file(own, 0), FSC_DATA_LLMC_MAGIC);
        else fprintf(stderr, "%s: %s\n", prog, why);
        fsc_data_free(own);
        return 1;
    }
    for (int i = 0; i < fsc_data_files(d); i++) /* TOKENS may be a list or a glob: OUT is none of its files */
        if (same_file(fsc_data_file(d, i), c->out))
            return fprintf(stderr, "%s: OUT %s is %s, a file of TOKENS: writing it would erase what is read; give "
                           "another OUT\n", prog, c->out, fsc_data_file(d, i)), fsc_data_free(d), 1;
    FILE *f = fopen(c->out, "wb");
    if (!f) return fprintf(stderr, "%s: cannot write %s: %s\n", prog, c->out, strerror(errno)), fsc_data_free(d), 1;
    enum { CHUNK = 1 << 16, AHEAD = 4 };
    int32_t *ids = malloc((CHUNK + AHEAD) * sizeof *ids);
    char *text = malloc((size_t)CHUNK * 256);
    int rc = ids && text ? 0 : (fprintf(stderr, "%s: out of memory\n", prog), 1);
    uint64_t n = fsc_data_tokens(d), bytes = 0;
    int text_yet = 0; /* some id so far has text: until then a chunk begins the text (sentencepiece's dummy prefix) */
    for (uint64_t at = 0, k; rc == 0 && at < n; at += k) {
        size_t got = n - at < CHUNK + AHEAD ? (size_t)(n - at) : CHUNK + AHEAD, len;
        if (fsc_data_read(d, at, got, ids) != FSC_OK) {
            rc = (fprintf(stderr, "%s: %s\n", prog, fsc_last_error()), 1);
            break;
        }
        /* chunks cut between characters, not in one that sentencepiece byte pieces spell */
        k = got < CHUNK ? got : CHUNK;
        if (k < got) k = char_cut(b, ids, k);
        fsc_status s = text_yet ? fsc_bpe_decode_more(b, ids, (size_t)k, text, (size_t)CHUNK * 256, &len)
                                : fsc_bpe_decode(b, ids, (size_t)k, text, (size_t)CHUNK * 256, &len);
        for (size_t i = 0, tl; !text_yet && i < (size_t)k; i++) text_yet = fsc_bpe_token(b, ids[i], &tl) && tl > 0;
        if (s != FSC_OK) rc = (fprintf(stderr, "%s: %s\n", prog, fsc_last_error()), 1);
        else rc = write_all(f, c->out, text, len), bytes += len;
    }
    if (fclose(f) != 0 && rc == 0) rc = (fprintf(stderr, "%s: writing %s: %s\n", prog, c->out, strerror(errno)), 1);
    if (rc == 0)
        printf("%s: %llu tokens -> %llu bytes of text in %s\n", c->in, (unsigned long long)n, (unsigned long long)bytes,
               c->out);
    free(ids), free(text);
    fsc_data_free(d);
    return rc;
}

/* The files given twice: an output that is the input, or --val-out that is OUT; 0, or 1 with the message */
static int check_paths(const config *c) {
    const char *in = c->decode ? "TOKENS" : "TEXT";
    if (same_file(c->in, c->out))
        return fprintf(stderr, "%s: OUT %s is %s itself: writing it would erase what is read; give another OUT\n",
                       prog, c->out, in), 1;
    if (c->val_out && same_file(c->in, c->val_out))
        return fprintf(stderr, "%s: --val-out %s is TEXT itself: give another file\n", prog, c->val_out), 1;
    if (c->val_out && same_file(c->out, c->val_out))
        return fprintf(stderr, "%s: --val-out %s is OUT too: the validation tokens would replace the training ones; "
                       "give another file\n", prog, c->val_out), 1;
    return 0;
}

/* TEXT mapped read-only (an empty file maps nothing) */
static int map_text(const char *path, const uint8_t **text, size_t *len) {
    int fd = open(path, O_RDONLY | O_NONBLOCK); /* a FIFO: refused below, never waited on */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return fprintf(stderr, "%s: cannot read %s: %s\n", prog, path, strerror(errno)), (fd >= 0 ? close(fd) : 0), 1;
    if (!S_ISREG(st.st_mode))
        return close(fd), fprintf(stderr, "%s: %s is not a regular file: give a text file\n", prog, path), 1;
    *len = (size_t)st.st_size, *text = (const uint8_t *)"";
    void *m = *len ? mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (*len && m == MAP_FAILED) return fprintf(stderr, "%s: cannot map %s: %s\n", prog, path, strerror(errno)), 1;
    if (*len) *text = m;
    return 0;
}

int main(int argc, char **argv) {
    const char *base = strrchr(argv[0], '/');
    prog = base ? base + 1 : argv[0];
    config c = {0};
    int rc = parse_args(argc, argv, &c);
    if (rc) return rc == 1 ? 0 : rc;
    fsc_bpe *b = NULL;
    if (fsc_bpe_load_file(&b, c.vocab ? c.vocab : "gpt2") != FSC_OK)
        return fprintf(stderr, "%s: %s\n", prog, fsc_last_error()), 1;
    if (fsc_bpe_vocab(b) > 65536)
        return fprintf(stderr, "%s: a vocabulary of %zu tokens does not fit uint16 token files\n", prog,
                       fsc_bpe_vocab(b)),
               fsc_bpe_free(b), 1;
    if (c.eot && fsc_bpe_eot(b) < 0)
        return fprintf(stderr, "%s: --eot: the tokenizer %s has no end-of-text token\n", prog,
                       c.vocab ? c.vocab : "gpt2"),
               fsc_bpe_free(b), 1;
    const uint8_t *text = NULL;
    size_t len = 0;
    if (check_paths(&c) != 0) return fsc_bpe_free(b), 1;
    if (!c.decode && map_text(c.in, &text, &len) != 0) return fsc_bpe_free(b), 1;
    if (c.decode) {
        rc = decode_file(b, &c);
    } else {
        /* --val: the first place at or after 1 - F of the text where the ids do not change */
        size_t cut = c.val > 0 ? fsc_bpe_split_point(text, len, len - (size_t)((double)len * c.val)) : len;
        if (c.val > 0 && (cut == len || cut == 0))
            rc = (fprintf(stderr, "%s: --val %g: no place in the last %g of %s to cut it (a line that starts with a "
                          "letter after a line that does not end in white space)\n", prog, c.val, c.val, c.in), 1);
        else rc = encode_file(b, &c, text, cut, 0, c.out);
        if (rc == 0 && c.val > 0) rc = encode_file(b, &c, text + cut, len - cut, 1, c.val_out);
    }
    if (len) munmap((void *)text, len);
    fsc_bpe_free(b);
    return rc;
}
