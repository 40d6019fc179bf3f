/* fsc status codes and the thread-local error message.
 * Every library function that can fail returns fsc_status; on failure the calling thread's
 * message (fsc_last_error) says what was wrong in words a user can act on.
 *
 * NULL arguments, for every public function: a function returning fsc_status refuses a NULL pointer
 * argument with FSC_ERR_INVALID and a message naming the function and the argument ("fsc_engine_step:
 * tokens is NULL"), unless its header says the argument may be NULL; a buffer with an element count may be
 * NULL when the count is 0. A function returning anything else does nothing on a NULL object and returns
 * 0, NULL or an empty string (its header says where it returns another value); the free functions accept
 * NULL. tests/test_null_args.c holds every public function to this. */
#ifndef FSC_STATUS_H
#define FSC_STATUS_H
#include "export.h"

FSC_BEGIN_DECLS

typedef enum {
    FSC_OK = 0,
    FSC_ERR_INVALID,     /* a bad argument or option from the caller */
    FSC_ERR_NOMEM,       /* an allocation failed */
    FSC_ERR_IO,          /* reading or writing a file failed */
    FSC_ERR_FORMAT,      /* a file or message is malformed or corrupted */
    FSC_ERR_COMM,        /* a collective failed (mismatch, failed peer) */
    FSC_ERR_TIMEOUT,     /* a collective waited longer than its timeout */
    FSC_ERR_STATE,       /* a call in the wrong state (e.g. backward before forward) */
    FSC_ERR_UNSUPPORTED, /* a valid request this build or backend cannot serve */
    FSC_ERR_INTERNAL,    /* a broken internal invariant: a bug in fsc */
    FSC_ERR_NUMERIC      /* inf or NaN where finite numbers are needed (a diverged step, weights on load/save) */
} fsc_status;

/* The message of the last error set on this thread ("" if none). */
const char *fsc_last_error(void);
/* A short name for a status ("invalid argument", ...). */
const char *fsc_status_str(fsc_status s);
/* Set this thread's message (printf-style) and return s; for library and backend code. fmt NULL: the message
 * is fsc_status_str(s). An argument may be fsc_last_error() itself (fsc_error_prefix says the same shorter).
 * A message over 1023 bytes keeps its head and its end around " ... " (a long path's cause stays). */
fsc_status fsc_error(fsc_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Put "<fmt>: " before this thread's message (or before fsc_status_str(s) when there is none) and return
 * s: how a caller adds what it was doing to a callee's explanation. fmt NULL: the message stays as it is. A message
 * that starts by naming the rank it came from (fsc_error_rank's forms, "rank 0: ...") keeps that name first:
 * "rank 0: <fmt>: ...", so that the rank is named once, first. */
fsc_status fsc_error_prefix(fsc_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Say which rank the message is about, once: like fsc_error_prefix with fmt naming a rank ("rank %d"),
 * but a message that already starts by naming one ("rank 3: ...", "rank 3 of 8 ...") is left as it is,
 * since a failure passed on from rank to rank (fsc_comm_agree, the cluster's report) keeps its origin. */
fsc_status fsc_error_rank(fsc_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Forget this thread's message. */
void fsc_clear_error(void);

/* Propagate a failing status. */
#define FSC_TRY(expr)                      \
    do {                                   \
        fsc_status fsc_try_s_ = (expr);    \
        if (fsc_try_s_ != FSC_OK) return fsc_try_s_; \
    } while (0)

/* The argument checks atop a public function, one line per pointer: a NULL pointer is FSC_ERR_INVALID with a
 * message naming the function and the argument ("fsc_engine_step: tokens is NULL"). FSC_CHECK_ARG_AS: the
 * argument under the name its header gives it; FSC_CHECK_BUF: a buffer of n elements, NULL only when n is 0. */
#define FSC_CHECK_ARG_AS(p, name)                                                               \
    do {                                                                                        \
        if (!(p)) return fsc_error(FSC_ERR_INVALID, "%s: %s is NULL", __func__, name);          \
    } while (0)
#define FSC_CHECK_ARG(p) FSC_CHECK_ARG_AS(p, #p)
#define FSC_CHECK_BUF(p, n)                                                                     \
    do {                                                                                        \
        if (!(p) && (n) > 0)                                                                    \
            return fsc_error(FSC_ERR_INVALID, "%s: %s is NULL for %zu elements", __func__, #p, (size_t)(n)); \
    } while (0)

FSC_END_DECLS

#endif
