/* Token datasets: one stream of tokens from one or more files, read with pread as tokens are asked for
 * (nothing is mapped, copied or read whole), in three formats:
 *   bytes  each byte is one token (vocabulary up to 256);
 *   llmc   llm.c's token shards: a 1024-byte header of 256 little-endian int32 (magic 20240520, version 1,
 *          token count), then that many little-endian uint16 tokens, nothing after them;
 *   u16    headerless little-endian uint16 tokens (nanoGPT's train.bin and val.bin).
 * FSC_DATA_AUTO reads a file that begins with llm.c's magic as llmc, any other as bytes when the vocabulary
 * is at most 256, and refuses it otherwise (a uint16 file cannot be told from bytes: say u16). Every file of
 * a stream must be of its format; a file of another format is refused with a message naming it.
 *
 * A spec is a comma-separated list of paths, each of which may be a glob (sorted, as the shell sorts):
 * their tokens are one stream, in that order. Opening checks each file's structure (a regular file; for
 * u16 an even size; for llmc the magic, version and a count that agrees with the file's size). Token values
 * are checked against the vocabulary as they are read (fsc_data_read, fsc_data_batch), and all at once by
 * fsc_data_check (a sequential pass in reads of 2^20 tokens: nothing is held).
 * The files must not change while the stream is open: each read opens the file again (a relative path from the
 * working directory of fsc_data_open, whatever the program's directory is now, unless that directory has no name
 * or the two together pass PATH_MAX: then from the directory of the read) and refuses it (an I/O error
 * naming it) when it is no longer the file of the size that was opened, or ends early.
 *
 * Data order (the trainer's contract): with N tokens, global batch B and context T, sequence i of step s
 * starts at ((s*B + i) * T) mod (N - T) of the stream (fsc_data_seq_start); its inputs are the T tokens
 * from there and its targets the next T, whatever the format and however the files split the stream. */
#ifndef FSC_DATA_H
#define FSC_DATA_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"

FSC_BEGIN_DECLS

#define FSC_DATA_LLMC_MAGIC 20240520
#define FSC_DATA_LLMC_HEADER 1024 /* bytes: 256 int32 */

typedef enum { FSC_DATA_AUTO = 0, FSC_DATA_BYTES, FSC_DATA_LLMC, FSC_DATA_U16 } fsc_data_format;

typedef struct fsc_data fsc_data;

/* Open the files of spec as one stream of tokens below vocab (1 .. 2^24). The message names the file and
 * what is wrong with it, or the list when it is empty or has an empty entry. */
fsc_status fsc_data_open(fsc_data **out, const char *spec, fsc_data_format format, int vocab);
/* The same over n file images held in memory (the caller keeps them alive until fsc_data_free); file i is
 * named "memory[i]" in messages; bufs[i] may be NULL only when lens[i] is 0. For tests and the fuzz harness. */
fsc_status fsc_data_open_memory(fsc_data **out, int n, const void *const *bufs, const size_t *lens,
                                fsc_data_format format, int vocab);
void fsc_data_free(fsc_data *d);

uint64_t fsc_data_tokens(const fsc_data *d);          /* N: tokens in the whole stream */
fsc_data_format fsc_data_format_of(const fsc_data *d); /* the format read (never AUTO) */
int fsc_data_files(const fsc_data *d);                 /* how many files make the stream */
const char *fsc_data_file(const fsc_data *d, int i);   /* path of file i (NULL out of range) */
uint64_t fsc_data_file_tokens(const fsc_data *d, int i); /* tokens of file i (0 out of range) */

/* Tokens [pos, pos + n) of the stream into out, across file boundaries; refused past the end, or when a
 * token is not below the vocabulary (the message names the file, the offset and the value). */
fsc_status fsc_data_read(const fsc_data *d, uint64_t pos, size_t n, int32_t *out);
/* Every token below the vocabulary: one pass over the stream; the first one that is not is the error. */
fsc_status fsc_data_check(const fsc_data *d);

/* Where sequence i of step s starts: ((s*B + i) * T) mod (N - T), computed in uint64_t. 0 when N <= T. */
uint64_t fsc_data_seq_start(uint64_t ntokens, int64_t step, int batch, int seq, int64_t i);
/* Sequences first .. first+count-1 of step s for global batch B and context T, by the data order: row j of
 * tok and tgt (count rows of T int32 each) holds the inputs and the targets of sequence first + j.
 * Refused when the stream has no more than T tokens or a token is out of the vocabulary. */
fsc_status fsc_data_batch(const fsc_data *d, int64_t step, int batch, int seq, int first, int count,
                          int32_t *tok, int32_t *tgt);

/* "auto", "bytes", "llmc", "u16" and back; parse refuses other names with a message listing these. */
const char *fsc_data_format_name(fsc_data_format f);
fsc_status fsc_data_format_parse(const char *name, fsc_data_format *out);

FSC_END_DECLS
#endif
