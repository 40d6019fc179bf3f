/* Small byte-level BPE files for the tests of lib/text/ and its programs, written in GPT-2's byte-to-character
 * alphabet (Hugging Face's bytes_to_unicode: the printable Latin-1 bytes as themselves, the other 68 bytes as
 * U+0100 .. U+0143 in order). */
#ifndef FSC_BPETEST_H
#define FSC_BPETEST_H
#include <stdio.h>

/* The code point byte c is written as */
static inline unsigned bpetest_char_of(int c) {
    int k = 0;
    for (int x = 0; x < 256; x++) {
        int printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
        if (x == c) return printable ? (unsigned)c : 256u + (unsigned)k;
        k += !printable;
    }
    return 0;
}

/* The 256 bytes as vocabulary entries "c": c (JSON, no braces; static storage) */
static inline const char *bpetest_byte_entries(void) {
    static char buf[4096];
    size_t at = 0;
    for (int c = 0; c < 256; c++) {
        unsigned cp = bpetest_char_of(c);
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s\"", c ? ", " : "");
        if (cp == '"' || cp == '\\') buf[at++] = '\\';
        if (cp < 0x80) buf[at++] = (char)cp;
        else buf[at++] = (char)(0xc0 | cp >> 6), buf[at++] = (char)(0x80 | (cp & 0x3f));
        at += (size_t)snprintf(buf + at, sizeof buf - at, "\": %d", c);
    }
    return buf;
}

/* A tokenizer.json with the bytes (0 .. 255), "ab" (256, merge "a b"), "Ġa" (257, merge "Ġ a": a space then a)
 * and, when eot, <|endoftext|> (258, an added token); 0, or -1 when the file cannot be written */
static inline int bpetest_write_tokenizer(const char *path, int eot) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"added_tokens\": [%s], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
            "\"add_prefix_space\": false, \"use_regex\": true}, \"model\": {\"type\": \"BPE\", \"vocab\": {%s, \"ab\": 256, "
            "\"\xc4\xa0" "a\": 257%s}, \"merges\": [\"a b\", \"\xc4\xa0 a\"]}}\n",
            eot ? "{\"id\": 258, \"content\": \"<|endoftext|>\", \"special\": true}" : "", bpetest_byte_entries(),
            eot ? ", \"<|endoftext|>\": 258" : "");
    return fclose(f) == 0 ? 0 : -1;
}

#endif
