/* Status names and the thread-local error message (status.h).
 * Each thread (each simulated rank) has its own message buffer, so ranks never overwrite each
 * other's explanation. Not a logging facility: only the last message is kept. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "fsc/status.h"

#define FSC_MSG_CAP 1024

static _Thread_local char msg[FSC_MSG_CAP];

const char *fsc_last_error(void) { return msg; }

void fsc_clear_error(void) { msg[0] = '\0'; }

fsc_status fsc_error(fsc_status s, const char *fmt, ...) {
    if (!fmt) return fsc_error(s, "%s", fsc_status_str(s));
    /* formatted apart, then copied: an argument may be the message itself ("%s", fsc_last_error()), which
     * vsnprintf into msg overwrote while reading it ("rank 3: rank 3: rank 3: rank") */
    char text[FSC_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0) text[0] = '\0';
    memcpy(msg, text, strlen(text) + 1);
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
