/* GPT-2's tokenizer: byte-level BPE over the GPT-2 ranks (tiktoken's r50k_base), encode and decode.
 *
 * Vocabulary file: tiktoken's format, one token a line, "BASE64-BYTES RANK", plain or gzip-compressed (fsc
 * ships the GPT-2 ranks as examples/data/gpt2.tiktoken.gz, installed in share/fsc/). Ranks must be exactly
 * 0 .. n-1, each once, every single byte must be a token, and no token twice; the end-of-text token is n
 * ("<|endoftext|>": 50256 for GPT-2, vocabulary 50257).
 *
 * Encoding is tiktoken's encode_ordinary: text is split by GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (PCRE2, \s the Unicode White_Space characters as tiktoken's regex reads it), a piece that is a token is that
 * token, and any other piece is merged pair by pair, lowest rank first (leftmost on ties). "<|endoftext|>"
 * in the text is text. Bytes that begin no valid UTF-8 character are not text: each maximal run of them is
 * one piece between the text around it (so any bytes encode, and decode gives them back exactly).
 * A text of len bytes gives at most len ids. Decoding concatenates the tokens' bytes (the end-of-text token
 * as "<|endoftext|>"); the result need not be valid UTF-8 when ids are cut mid-character.
 *
 * A loaded vocabulary is read-only: threads may encode and decode with it at once.
 * Not here: other tokenizers (sentencepiece), special tokens in the text, token files (fsc/data.h). */
#ifndef FSC_BPE_H
#define FSC_BPE_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"

FSC_BEGIN_DECLS

typedef struct fsc_bpe fsc_bpe;

/* The GPT-2 vocabulary's file name, looked for by fsc_bpe_load_default */
#define FSC_BPE_GPT2_FILE "gpt2.tiktoken.gz"

/* Load a vocabulary file (plain or gzip). The message names the file, and the line and what is wrong with it. */
fsc_status fsc_bpe_load(fsc_bpe **out, const char *path);
/* The same from len bytes in memory (plain or gzip); messages name it "memory". For tests and the fuzz harness. */
fsc_status fsc_bpe_load_memory(fsc_bpe **out, const void *buf, size_t len);
/* The GPT-2 vocabulary from where fsc puts it: examples/data/ of the working directory, else beside the
 * running program (../share/fsc/ of an installed bin/, ../examples/data/ and ../../examples/data/ of build/
 * and build/<variant>/). The message lists the places tried. */
fsc_status fsc_bpe_load_default(fsc_bpe **out);
void fsc_bpe_free(fsc_bpe *b);

size_t fsc_bpe_vocab(const fsc_bpe *b);  /* ids 0 .. vocab-1: the ranks and the end-of-text token */
int32_t fsc_bpe_eot(const fsc_bpe *b);   /* the end-of-text token's id (vocab - 1); -1 for NULL */
/* The bytes of token id (*len of them; not NUL-terminated), or NULL with *len 0 when id is out of range. */
const uint8_t *fsc_bpe_token(const fsc_bpe *b, int32_t id, size_t *len);

/* The ids of len bytes of text into ids (room for len ids at least; text and ids may be NULL when len is 0);
 * *n: how many. */
fsc_status fsc_bpe_encode(const fsc_bpe *b, const void *text, size_t len, int32_t *ids, size_t *n);
/* The bytes of n ids into out (cap bytes; out may be NULL when cap is 0). *len: the bytes they need; when
 * that is more than cap, nothing is written and the call is refused (ask with cap 0 first). An id out of
 * range is refused, naming its position and value. */
fsc_status fsc_bpe_decode(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len);

/* A place to cut a text so that encoding the two parts gives the ids of the whole: the first position p >=
 * from where an ASCII letter follows a newline that follows an ASCII byte other than white space; len when
 * there is none. For encoding a large file in pieces. */
size_t fsc_bpe_split_point(const void *text, size_t len, size_t from);

FSC_END_DECLS
#endif
