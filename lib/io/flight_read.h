/* Private: flight records (flight.h) read back, and the diagnosis over a world of them. flight_read.c parses one
 * rank's file (outside data: every field checked, sizes bounded before allocating); flight_diag.c pairs the
 * ranks of each group and says where they diverge. Used by fsc_flight_diagnose_dir, the tests and the fuzzer. */
#ifndef FSC_IO_FLIGHT_READ_H
#define FSC_IO_FLIGHT_READ_H
#include <stddef.h>
#include <stdint.h>
#include "fsc/flight.h" /* FSC_FLIGHT_MAX_WORLD */
#include "fsc/status.h"

#define FLR_MAX_BYTES ((size_t)32 << 20) /* a record file at most */
#define FLR_MAX_WORLD FSC_FLIGHT_MAX_WORLD
#define FLR_MAX_COMMS 4096

enum { FLR_ISSUED = 1, FLR_WAITING, FLR_COMPLETED, FLR_FAILED };
#define FLR_OP_SPLIT 8 /* FSC_OP_COUNT: a split */

typedef struct {
    uint64_t seq, count;
    int op;             /* fsc_comm_op, or FLR_OP_SPLIT */
    int dt;             /* fsc_dtype */
    int peer, state;
    int64_t t0, t1;     /* microseconds; t1 0 while not ended */
    char status[32];    /* of a failed call */
} flr_call;

typedef struct {
    char name[32];
    uint64_t gid;
    int rank, size, closed;
    flr_call *calls;    /* (ncalls) by seq, increasing */
    size_t ncalls;
} flr_comm;

typedef struct {
    int rank, world, failed;
    char reason[32], message[1024], first_error[1024];
    int64_t time_us;
    flr_comm *comms;    /* (ncomms) */
    int ncomms;
} flr_record;

/* Parse one rank's record (len bytes of text; what names it in messages). FSC_ERR_FORMAT saying what is wrong. */
fsc_status flr_parse(const char *text, size_t len, const char *what, flr_record **out);
void flr_free(flr_record *r);

/* The diagnosis of a world of `world` ranks: recs[w] is world rank w's record or NULL (none, or damaged);
 * notes (may be NULL) is put first. Writes report (always terminated, cut at cap). */
void flr_diagnose(flr_record *const *recs, int world, const char *notes, char *report, size_t cap);

#endif
