/* Status names and the thread-local error message (status.h).
 * Each thread (each simulated rank) has its own message buffer, so ranks never overwrite each
 * other's explanation. Not a logging facility: only the last message is kept. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/status.h"

#define FSC_MSG_CAP 1024

static _Thread_local char msg[FSC_MSG_CAP];

const char *fsc_last_error(void) { return msg; }

void fsc_clear_error(void) { msg[0] = '\0'; }

/* A UTF-8 character's first byte at or after p (a cut never splits one). */
static const char *char_start(const char *p) {
    while (((unsigned char)*p & 0xC0) == 0x80) p++;
    return p;
}

/* Text of n bytes into msg: whole when it fits, else its head and its tail around " ... ": a message that names a
 * long path (a deep directory) still ends with its cause ("... : No space left on device"), which a plain cut at
 * the cap lost. */
static void set_message(const char *text, size_t n) {
    if (n < FSC_MSG_CAP) {
        memcpy(msg, text, n + 1);
        return;
    }
    static const char gap[] = " ... ";
    const size_t head = FSC_MSG_CAP / 2, tail = FSC_MSG_CAP - 1 - head - (sizeof gap - 1);
    size_t h = head;
    while (h > 0 && ((unsigned char)text[h] & 0xC0) == 0x80) h--; /* text[h] starts a character: cut before it */
    const char *t = char_start(text + n - tail);
    memcpy(msg, text, h);
    memcpy(msg + h, gap, sizeof gap - 1);
    memcpy(msg + h + sizeof gap - 1, t, (size_t)(text + n - t) + 1);
}

fsc_status fsc_error(fsc_status s, const char *fmt, ...) {
    if (!fmt) return fsc_error(s, "%s", fsc_status_str(s));
    /* formatted apart, then copied: an argument may be the message itself ("%s", fsc_last_error()), which
     * vsnprintf into msg overwrote while reading it ("rank 3: rank 3: rank 3: rank") */
    char text[FSC_MSG_CAP];
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    char *whole = n >= (int)sizeof text ? malloc((size_t)n + 1) : NULL; /* longer: formatted whole, its middle cut */
    if (whole && vsnprintf(whole, (size_t)n + 1, fmt, again) == n) set_message(whole, (size_t)n);
    else set_message(n < 0 ? "" : text, n < 0 ? 0 : strlen(text)); /* no memory: cut at the cap */
    va_end(again);
    free(whole);
    return s;
}

/* "rank N:" or "rank N of " at the start of m (the forms a rank's failure is reported in). */
static int names_a_rank(const char *m) {
    if (strncmp(m, "rank ", 5) != 0) return 0;
    const char *p = m + 5;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
    return *p == ':' || strncmp(p, " of ", 4) == 0;
}

/* The length of the rank's name that starts m with its ": " ("rank 0: ", "rank 1 of the 'pair' group: "), 0 if none. */
static size_t rank_name_len(const char *m) {
    const char *end = names_a_rank(m) ? strstr(m, ": ") : NULL;
    return end ? (size_t)(end - m) + 2 : 0;
}

/* A message that starts with the rank it came from (an agreed failure) keeps that name first, the prefix behind it:
 * "rank 0: saving: disk full", which the cluster's report (fsc_error_rank) then leaves as it is. Before it, the
 * report named a second rank ("rank 1: saving: rank 0: disk full"). */
static fsc_status prefix_v(fsc_status s, const char *fmt, va_list ap) {
    char old[FSC_MSG_CAP], prefix[FSC_MSG_CAP];
    snprintf(old, sizeof old, "%s", msg[0] ? msg : fsc_status_str(s));
    if (vsnprintf(prefix, sizeof prefix, fmt, ap) < 0) prefix[0] = '\0';
    const size_t rank = rank_name_len(old);
    return fsc_error(s, "%.*s%s: %s", (int)rank, old, prefix, old + rank);
}

fsc_status fsc_error_prefix(fsc_status s, const char *fmt, ...) {
    if (!fmt) return s;
    va_list ap;
    va_start(ap, fmt);
    s = prefix_v(s, fmt, ap);
    va_end(ap);
    return s;
}


fsc_status fsc_error_rank(fsc_status s, const char *fmt, ...) {
    if (!fmt || names_a_rank(msg)) return s;
    va_list ap;
    va_start(ap, fmt);
    s = prefix_v(s, fmt, ap);
    va_end(ap);
    return s;
}

const char *fsc_status_str(fsc_status s) {
    switch (s) {
    case FSC_OK: return "ok";
    case FSC_ERR_INVALID: return "invalid argument";
    case FSC_ERR_NOMEM: return "out of memory";
    case FSC_ERR_IO: return "i/o error";
    case FSC_ERR_FORMAT: return "malformed data";
    case FSC_ERR_COMM: return "communication failure";
    case FSC_ERR_TIMEOUT: return "timeout";
    case FSC_ERR_STATE: return "wrong state";
    case FSC_ERR_UNSUPPORTED: return "unsupported";
    case FSC_ERR_INTERNAL: return "internal error";
    case FSC_ERR_NUMERIC: return "non-finite values";
    }
    return "unknown status";
}
