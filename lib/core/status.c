/* Status names and the thread-local error message (status.h).
 * Each thread (each simulated rank) has its own message buffer, so ranks never overwrite each
 * other's explanation. Not a logging facility: only the last message is kept. */
#include <stdarg.h>
#include <stdio.h>
#include "fsc/status.h"

#define FSC_MSG_CAP 1024

static _Thread_local char msg[FSC_MSG_CAP];

const char *fsc_last_error(void) { return msg; }

void fsc_clear_error(void) { msg[0] = '\0'; }

fsc_status fsc_error(fsc_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) msg[0] = '\0';
    return s;
}

fsc_status fsc_error_prefix(fsc_status s, const char *fmt, ...) {
    char old[FSC_MSG_CAP], prefix[FSC_MSG_CAP];
    snprintf(old, sizeof old, "%s", msg[0] ? msg : fsc_status_str(s));
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(prefix, sizeof prefix, fmt, ap) < 0) prefix[0] = '\0';
    va_end(ap);
    return fsc_error(s, "%s: %s", prefix, old);
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
    }
    return "unknown status";
}
