/* Private to the library: a C string written as a JSON string by the files it writes for other programs to read
 * (trace.c's timelines, flight.c's records). JSON text is UTF-8, and strict readers (Python's json, jq) refuse a
 * file with other bytes, while names and messages may hold any: a file name in Latin-1, a name cut mid-character
 * by a fixed-size buffer. */
#ifndef FSC_CORE_JSON_STR_IMPL_H
#define FSC_CORE_JSON_STR_IMPL_H
#include <stdio.h>
#include <string.h>

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

/* The JSON form of the character at p into e (7 bytes, NUL-terminated), its length into *n: a quote, a backslash,
 * a control character or DEL escaped, a byte that begins no valid UTF-8 character as U+FFFD, else the character.
 * Returns the bytes of p it stands for (1 .. 4). The one set of rules of both forms below. */
static inline int fsc_json_str_char(const unsigned char *p, char e[7], size_t *n) {
    const int k = fsc_utf8_len(p);
    if (*p == '"' || *p == '\\') e[0] = '\\', e[1] = (char)*p, e[2] = '\0', *n = 2;
    else if (*p < 0x20 || *p == 0x7f) *n = (size_t)snprintf(e, 7, "\\u%04x", *p);
    else if (k == 0) *n = (size_t)snprintf(e, 7, "\\ufffd");
    else memcpy(e, p, (size_t)k), e[k] = '\0', *n = (size_t)k;
    return k ? k : 1;
}

/* s as a JSON string: quotes, backslashes, control characters and DEL escaped, and each byte that begins no valid
 * UTF-8 character as U+FFFD. */
static inline void fsc_json_put_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        char e[7];
        size_t n;
        p += fsc_json_str_char(p, e, &n);
        fwrite(e, 1, n, f);
    }
    fputc('"', f);
}

/* Bytes that fsc_json_str_buf may need for a string of len bytes: 6 per byte at most (\u001f, \ufffd), the two
 * quotes and the NUL. */
#define FSC_JSON_STR_CAP(len) (6 * (size_t)(len) + 3)

/* s as a JSON string (quotes included, fsc_json_put_str's rules) into out, NUL-terminated. Returns the length of the
 * whole JSON string without the NUL, as snprintf does. When that is cap or more the string did not fit and out
 * holds "" (cap > 0), never a part: a cut escape or a missing closing quote would make the JSON around it invalid,
 * so a caller that receives a return >= cap must refuse or make room (FSC_JSON_STR_CAP always fits). */
static inline size_t fsc_json_str_buf(char *out, size_t cap, const char *s) {
    size_t at = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        char e[7];
        size_t n;
        p += fsc_json_str_char(p, e, &n);
        if (at + 1 + n + 1 < cap) memcpy(out + 1 + at, e, n); /* after the opening quote, room for '"' and NUL */
        at += n;
    }
    const size_t len = at + 2;
    if (len < cap) out[0] = '"', out[len - 1] = '"', out[len] = '\0';
    else if (cap > 0) out[0] = '\0';
    return len;
}

#endif
