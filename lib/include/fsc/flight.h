/* The flight recorder: what each rank's communicators were doing, for finding where a job hangs.
 * One recorder per rank, owned by the caller and attached to the world communicator before groups are split:
 *   fsc_flight *f;  fsc_flight_create(&(fsc_flight_opts){ .rank = r->rank, .world = r->world, .dir = "fr" }, &f);
 *   fsc_comm_set_flight(r->comm, f);   the world and every group split from it later keep a ring of their calls
 *   ... train; when the rank fails (a timeout, a failed peer):  fsc_flight_write(f, "timeout", fsc_last_error());
 *   fsc_flight_free(f);
 * Each communicator keeps its last `depth` calls in a ring allocated when it is attached (nothing is allocated
 * per call, and no lock is taken: a ring is written by its rank's thread only): the sequence number (the call's
 * place among its communicator's calls, from 1, split included: every rank numbers a group's calls alike), the
 * operation, count, dtype, peer, root or split color, state (issued: an asynchronous call started, not waited for;
 * waiting: the rank blocks in it; completed; failed) and times. The first failed call freezes the recorder, so a
 * record shows the moment of the failure and not the calls a failing program makes afterwards.
 * Groups are told apart across ranks by an id derived from the splits (the parent's id, the split's number on
 * the parent, the color), so a reader pairs the ranks of a group without any exchange.
 *
 * A record is a small JSON file per rank, DIR/flight-rank-N.json (written to a temporary name and renamed);
 * fsc_flight_diagnose_dir reads a directory of them and names the rank and collective where the ranks diverge
 * (fsc-ckpt flight DIR prints it). docs/observability.md describes the format.
 *
 * Signals: the library installs no handler. A program that wants a record on SIGUSR1 starts a watcher (a thread
 * that sleeps in read(2) on a pipe), adds its recorders, and calls fsc_flight_watch_signal from its own handler:
 * that function only write(2)s a byte to the pipe and is async-signal-safe; the watcher thread then writes every
 * recorder it holds with ordinary code. The rings are read while their ranks keep running (a reader that meets
 * an entry being rewritten skips it). */
#ifndef FSC_FLIGHT_H
#define FSC_FLIGHT_H
#include "export.h"
#include <stddef.h>
#include "status.h"

FSC_BEGIN_DECLS

typedef struct fsc_flight fsc_flight;
typedef struct fsc_comm fsc_comm;

typedef struct {
    int rank, world;  /* this rank in the world, and the world's size (written into the record) */
    size_t depth;     /* calls each communicator keeps (0: FSC_FLIGHT_DEFAULT_DEPTH; at most FSC_FLIGHT_MAX_DEPTH) */
    const char *dir;  /* where fsc_flight_write puts DIR/flight-rank-N.json (copied; NULL: fsc_flight_write refuses).
                       * fsc_flight_create moves an earlier run's record of this rank there aside to
                       * flight-rank-N.json.prev, else removes it (rank 0: also those of ranks beyond world), so that
                       * a rank of this run that writes none reads as silent, not as the earlier run's rank; one
                       * that can be neither (a read-only directory) stays */
} fsc_flight_opts;

#define FSC_FLIGHT_DEFAULT_DEPTH 256
#define FSC_FLIGHT_MAX_DEPTH 65536
#define FSC_FLIGHT_MAX_WORLD 65536 /* the largest world a record describes (fsc_flight_diagnose_dir reads up to it) */

fsc_flight_opts fsc_flight_opts_default(void);
fsc_status fsc_flight_create(const fsc_flight_opts *o, fsc_flight **out);
/* Drops the caller's hold: the recorder's memory goes with its last holder (a communicator that records into it,
 * a watcher that holds it), so a communicator may outlive the caller's hold. */
void fsc_flight_free(fsc_flight *f);
/* Record the calls of c into f (NULL: stop); communicators split from c afterwards record into f too. */
void fsc_comm_set_flight(fsc_comm *c, fsc_flight *f);
/* Whether a call failed since the recorder was created (it froze then). */
int fsc_flight_failed(const fsc_flight *f);

/* Write DIR/flight-rank-N.json: every communicator's ring, oldest call first, with `reason` ("timeout",
 * "failure", "signal", ...) and the thread's last error message when one is given (msg may be NULL). */
fsc_status fsc_flight_write(fsc_flight *f, const char *reason, const char *msg);

/* The watcher for SIGUSR1 (or any signal the program chooses). */
typedef struct fsc_flight_watch fsc_flight_watch;
fsc_status fsc_flight_watch_start(fsc_flight_watch **out);
fsc_status fsc_flight_watch_add(fsc_flight_watch *w, fsc_flight *f);
void fsc_flight_watch_remove(fsc_flight_watch *w, fsc_flight *f);
/* Async-signal-safe: ask the watcher thread to write every recorder it holds (reason "signal"). */
void fsc_flight_watch_signal(fsc_flight_watch *w);
/* Records the watcher has written so far (a test waits for it to grow). */
unsigned long fsc_flight_watch_written(fsc_flight_watch *w);
/* Stops the thread (after a write in progress) and frees the watcher; the recorders stay the caller's. Restore
 * (or block) the signal handler that calls fsc_flight_watch_signal(w) first: after this, w is gone. */
void fsc_flight_watch_stop(fsc_flight_watch *w);

/* Read every DIR/flight-rank-N.json and write into report (cap bytes, always terminated) what each group of
 * ranks was doing and a last line "verdict: ...", naming the rank(s) whose calls diverge and the collective
 * (operation, sequence number, group with its world ranks: "data(0,1,2,3)") where they wait, and where the
 * others are. Damaged or missing files are named in the report and their ranks counted as silent.
 * FSC_ERR_IO when DIR cannot be listed, FSC_ERR_FORMAT when it holds no readable record. */
fsc_status fsc_flight_diagnose_dir(const char *dir, char *report, size_t cap);

FSC_END_DECLS

#endif
