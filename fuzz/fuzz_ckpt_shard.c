/* libFuzzer harness for reading a checkpoint shard against its metadata. Input: a 4-byte little-endian
 * length L, L bytes of metadata.json (its metadata_crc32 made right by the harness, ck_meta_seal, so that
 * mutations reach the shard), then the image of the file the metadata calls file 0. Either the metadata
 * or the file is refused with a message, or fsc_ckpt_check_file accepts the file; then every piece it
 * places there reads completely and its bytes have the checksum the metadata gives.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_ckpt_shard.c (or make fuzz). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "ckpt/ckpt_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    size_t L = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    if (L > size - 4) return 0;
    fsc_ckpt_meta *m = NULL;
    char *meta = malloc(L + 1);
    if (!meta) abort();
    memcpy(meta, data + 4, L);
    ck_meta_seal(meta, L);
    fsc_status ms = fsc_ckpt_meta_parse(meta, L, "fuzz", &m);
    free(meta);
    if (ms != FSC_OK || m->nfiles < 1) {
        fsc_ckpt_meta_free(m);
        return 0;
    }
    fsc_st_file *f = NULL;
    if (fsc_st_parse_buffer(data + 4 + L, size - 4 - L, &f) != FSC_OK) {
        fsc_ckpt_meta_free(m);
        return 0;
    }
    fsc_status s = fsc_ckpt_check_file(m, 0, f, 1);
    if (s != FSC_OK && fsc_last_error()[0] == 0) __builtin_trap();
    if (s == FSC_OK) {
        int placed = 0;
        for (int i = 0; i < m->ntensors; i++)
            for (int k = 0; k < m->tensors[i].npieces; k++) {
                const fsc_ckpt_piece *p = &m->tensors[i].pieces[k];
                if (p->file != 0) continue;
                placed++;
                const fsc_st_entry *e = fsc_st_find(f, p->entry);
                if (!e || e->dtype != FSC_F32) __builtin_trap();
                if (p->n > (size - 4 - L) / 4) __builtin_trap(); /* an accepted piece lies inside the input */
                float *buf = malloc((size_t)p->n * sizeof(float));
                if (!buf) abort();
                if (fsc_st_read(f, e, buf, 0, p->n) != FSC_OK) __builtin_trap();
                uLong crc = crc32(crc32(0L, Z_NULL, 0), (const Bytef *)buf, (uInt)(p->n * sizeof(float)));
                if ((uint32_t)crc != p->crc32) __builtin_trap();
                free(buf);
            }
        if (placed != fsc_st_count(f)) __builtin_trap(); /* nothing in the file that the metadata does not place */
    }
    fsc_st_close(f);
    fsc_ckpt_meta_free(m);
    return 0;
}
