/* Private to the library: a C string written as a JSON string by the files it writes for other programs to read
 * (trace.c's timelines, flight.c's records). JSON text is UTF-8, and strict readers (Python's json, jq) refuse a
 * file with other bytes, while names and messages may hold any: a file name in Latin-1, a name cut mid-character
 * by a fixed-size buffer. */
#ifndef FSC_CORE_JSON_STR_IMPL_H
#define FSC_CORE_JSON_STR_IMPL_H
#include <stdio.h>

/* Bytes of the valid UTF-8 character at s (1 .. 4), 0 when none begins there (a stray or cut byte, an overlong
 * form, a surrogate, past U+10FFFF). s is NUL-terminated, so a cut sequence stops at the NUL. */
static inline int fsc_utf8_len(const unsigned char *s) {
    const unsigned c = s[0];
    const int k = c < 0x80                  ? 1
                  : c >= 0xc2 && c <= 0xdf ? 2
                  : c >= 0xe0 && c <= 0xef ? 3
                  : c >= 0xf0 && c <= 0xf4 ? 4
                                           : 0;
    for (int j = 1; j < k; j++)
        if ((s[j] & 0xc0) != 0x80) return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return k;
}

/* s as a JSON string: quotes, backslashes, control characters and DEL escaped, and each byte that begins no valid
 * UTF-8 character as U+FFFD. */
static inline void fsc_json_put_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const int k = fsc_utf8_len(p);
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else if (k == 0) fputs("\\ufffd", f);
        else fwrite(p, 1, (size_t)k, f);
        p += k ? k : 1;
    }
    fputc('"', f);
}

#endif
