/* Byte-level BPE tokenizers: GPT-2's (tiktoken's r50k_base) and others of its kind, encode and decode.
 *
 * Formats: tiktoken's file (below); Hugging Face's vocab.json + merges.txt and tokenizer.json (model.type "BPE",
 * byte-level: token strings in GPT-2's byte-to-character alphabet, merges "a b" or ["a", "b"], added_tokens
 * being special tokens). A Hugging Face token's merge rank is the index of the first merge that makes it: a
 * pair joins when its bytes are such a token, the lowest rank first (tiktoken's rule with those ranks, which
 * is Hugging Face's for GPT-2's files); a token of several bytes that no merge makes and an added token are
 * never given to text. Ids must be 0 .. n-1, each once; every byte must be a token. The end-of-text token is the
 * one named <|endoftext|> (or <|end_of_text|>), -1 when there is none.
 * Patterns: GPT-2's (below), or Llama 3's (tiktoken's cl100k pattern; tokenizer.json's Split with that regex
 * then ByteLevel, or the prefix "llama3:" of fsc_bpe_load_file, which then gives a tiktoken file Meta's 256
 * special tokens after the ranks: <|begin_of_text|>, <|end_of_text|>, ...).
 *
 * Vocabulary file: tiktoken's format, one token a line, "BASE64-BYTES RANK", plain or gzip-compressed (fsc
 * ships the GPT-2 ranks as examples/data/gpt2.tiktoken.gz, installed in share/fsc/). Ranks must be exactly
 * 0 .. n-1, each once, every single byte must be a token, and no token twice; the end-of-text token is n
 * ("<|endoftext|>": 50256 for GPT-2, vocabulary 50257).
 *
 * Encoding is tiktoken's encode_ordinary: text is split by GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (PCRE2, \s the Unicode White_Space characters and \p{L}, \p{N} Unicode 16.0's letters and numbers, as
 * tiktoken's regex reads them), a piece that is a token is that
 * token, and any other piece is merged pair by pair, lowest rank first (leftmost on ties). "<|endoftext|>"
 * in the text is text. Bytes that begin no valid UTF-8 character are not text: each maximal run of them is
 * one piece between the text around it (so any bytes encode, and decode gives them back exactly).
 * A text of len bytes gives at most len ids (fsc_bpe_max_ids; a sentencepiece model more). Decoding concatenates the tokens' bytes (the end-of-text token
 * as "<|endoftext|>"); the result need not be valid UTF-8 when ids are cut mid-character.
 *
 * Sentencepiece's BPE models (Llama 1 and 2's tokenizer.model, a protobuf ModelProto; fsc_bpe_load_spm) give
 * the same handle, encoded and decoded as sentencepiece does: spaces as U+2581, a U+2581 before the text
 * (add_dummy_prefix), the text cut into characters (user-defined pieces whole), the adjacent pair whose joined
 * bytes are the piece of highest score joined first (leftmost on ties), an unknown character as its bytes'
 * <0xNN> pieces (byte_fallback) or the unk id; a byte that begins no valid UTF-8 character is U+FFFD, as
 * sentencepiece reads it. Decoding drops control pieces and the dummy prefix's space and gives U+FFFD for byte
 * pieces that make no valid character. fsc_bpe_token is a piece's text alone (U+2581 a space, a byte piece its
 * byte, a control piece nothing); fsc_bpe_eot is its bos piece (<s>), the token a document starts with.
 * Refused: unigram models, normalization rules (only "identity", Llama's), unused pieces, whitespace as suffix.
 *
 * A loaded vocabulary is read-only: threads may encode and decode with it at once.
 * Not here: other tokenizers (sentencepiece's unigram, WordPiece), special tokens in the text, token files
 * (fsc/data.h). */
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
/* Hugging Face's vocab.json and merges.txt (GPT-2's pattern; "#version" on the first line is skipped) */
fsc_status fsc_bpe_load_hf(fsc_bpe **out, const char *vocab_json, const char *merges_txt);
fsc_status fsc_bpe_load_hf_memory(fsc_bpe **out, const void *vocab, size_t vlen, const void *merges, size_t mlen);
/* Hugging Face's tokenizer.json: a byte-level BPE with GPT-2's or Llama 3's pre-tokenizer and no normalizer;
 * what fsc would encode differently (dropout, a prefix space, subword affixes, byte fallback) is refused */
fsc_status fsc_bpe_load_tokenizer_json(fsc_bpe **out, const char *path);
fsc_status fsc_bpe_load_tokenizer_json_memory(fsc_bpe **out, const void *buf, size_t len);
/* Any of them by what spec names: "gpt2" (fsc_bpe_load_default); a folder holding tokenizer.json, else
 * vocab.json and merges.txt; a JSON file (tokenizer.json when it has a "model" object, else a vocab.json with
 * merges.txt beside it); a merges.txt ("#version" first) with vocab.json beside it; else a tiktoken file.
 * "llama3:" before the path uses Llama 3's pattern (and, for a tiktoken file, its special tokens), "gpt2:"
 * GPT-2's, whatever a tokenizer.json says. */
fsc_status fsc_bpe_load_file(fsc_bpe **out, const char *spec);
/* Sentencepiece's tokenizer.model (a BPE model; fsc_bpe_load_file also knows it by its contents); the message
 * names what is not read or not right */
fsc_status fsc_bpe_load_spm(fsc_bpe **out, const char *path);
fsc_status fsc_bpe_load_spm_memory(fsc_bpe **out, const void *buf, size_t len);
/* The same from len bytes in memory (plain or gzip); messages name it "memory". For tests and the fuzz harness. */
fsc_status fsc_bpe_load_memory(fsc_bpe **out, const void *buf, size_t len);
/* The GPT-2 vocabulary from where fsc puts it: examples/data/ of the working directory, else beside the
 * running program (../share/fsc/ of an installed bin/, ../examples/data/ and ../../examples/data/ of build/
 * and build/<variant>/), else beside the library (../share/fsc/ of the installed lib/libfsc.so a program of
 * one's own runs with). The message lists the places tried. */
fsc_status fsc_bpe_load_default(fsc_bpe **out);
void fsc_bpe_free(fsc_bpe *b);

size_t fsc_bpe_vocab(const fsc_bpe *b);  /* ids 0 .. vocab-1 (a tiktoken file: the ranks, then the special tokens) */
int32_t fsc_bpe_eot(const fsc_bpe *b);   /* the end-of-text token's id (GPT-2: vocab - 1); -1 for none or NULL */
/* The id a run of unknown text is given once (a sentencepiece model without byte fallback: its <unk>); -1 for any
 * other tokenizer or NULL. Parts cut at fsc_bpe_split_point give the ids of the whole but for one thing: when a
 * part ends in unknown text and the next begins with it, both give this id, where the whole gives it once. */
int32_t fsc_bpe_unk(const fsc_bpe *b);
/* The bytes of token id (*len of them; not NUL-terminated), or NULL with *len 0 when id is out of range. */
const uint8_t *fsc_bpe_token(const fsc_bpe *b, int32_t id, size_t *len);

/* The most ids len bytes of text can give: len for a byte-level BPE, 3 len + 3 for a sentencepiece model (a
 * space or a stray byte may become three byte pieces, and the dummy prefix one more); 0 for NULL */
size_t fsc_bpe_max_ids(const fsc_bpe *b, size_t len);
/* The ids of len bytes of text into ids (room for fsc_bpe_max_ids(b, len) ids at least; text and ids may be
 * NULL when len is 0); *n: how many. */
fsc_status fsc_bpe_encode(const fsc_bpe *b, const void *text, size_t len, int32_t *ids, size_t *n);
/* The same for text that continues a text already encoded (the part after a cut at fsc_bpe_split_point): a
 * sentencepiece model puts no dummy prefix before it (refused when a piece of the model holds a newline before
 * a letter, so that the cut would change the ids); a byte-level BPE encodes it as fsc_bpe_encode. */
fsc_status fsc_bpe_encode_more(const fsc_bpe *b, const void *text, size_t len, int32_t *ids, size_t *n);
/* The bytes of n ids into out (cap bytes; out may be NULL when cap is 0). *len: the bytes they need; when
 * that is more than cap, nothing is written and the call is refused (ask with cap 0 first). An id out of
 * range is refused, naming its position and value. */
fsc_status fsc_bpe_decode(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len);
/* The same for ids that continue ids already decoded: a sentencepiece model keeps the space of the first
 * piece's U+2581 (fsc_bpe_decode drops it as the dummy prefix's). Cut ids between characters: a sentencepiece
 * byte piece cut from the rest of its character decodes to U+FFFD. A byte-level BPE decodes as fsc_bpe_decode. */
fsc_status fsc_bpe_decode_more(const fsc_bpe *b, const int32_t *ids, size_t n, void *out, size_t cap, size_t *len);

/* A place to cut a text so that encoding the two parts gives the ids of the whole (the second with
 * fsc_bpe_encode_more): the first position p >= from where an ASCII letter follows a newline that follows an
 * ASCII byte other than white space; len when there is none. For encoding a large file in pieces. */
size_t fsc_bpe_split_point(const void *text, size_t len, size_t from);

FSC_END_DECLS
#endif
