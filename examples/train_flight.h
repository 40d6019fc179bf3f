/* The trainer's flight recorder (fsc/flight.h): each rank's last collectives, written when they help find a hang.
 * --flight-recorder DIR (default: --ckpt-dir, else --trace; without any of them nothing is recorded) gives every
 * rank a recorder on its world communicator, so the engine's groups record too. A rank whose collective failed
 * (a timeout, a failed peer) writes DIR/flight-rank-N.json before it returns; SIGUSR1 makes every rank of the
 * process write its record at once, where it stands (a hang that no timeout ends yet): the handler installed
 * here only wakes the library's watcher thread (fsc_flight_watch_signal is async-signal-safe), which writes.
 * `fsc-ckpt flight DIR` reads the ranks' records and names the rank and collective where they diverge.
 * Not here: the rings and the reader (lib/core/flight.c, lib/io/flight_read.c). */
#ifndef FSC_TRAIN_FLIGHT_H
#define FSC_TRAIN_FLIGHT_H
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "fsc/fsc.h"

typedef struct {
    fsc_status (*fn)(fsc_rank *r, void *arg); /* the rank's work */
    void *arg;
    const char *dir;                          /* NULL: no recorder */
} flight_job;

/* The handler reaches the watcher through the program's own global: a signal handler has no argument. */
static fsc_flight_watch *flight_watch;

/* SIGUSR1 as the program found it (flight_usr1_hold), given back by flight_usr1_restore. */
static struct sigaction flight_usr1_was;
static int flight_usr1_held;

/* SIGUSR1 ignored while the trainer runs without its recorder (before it starts, after it stops, or without a
 * directory), where its default action would end the process: a job that hangs while starting, sent SIGUSR1 to
 * see where (mpirun passes it on to every process), goes on instead of dying. A handler the host program set is
 * left as it is. */
static void flight_usr1_hold(void) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGUSR1, NULL, &flight_usr1_was) != 0) return;
    flight_usr1_held = 1;
    if (flight_usr1_was.sa_handler == SIG_DFL) sigaction(SIGUSR1, &ign, NULL);
}

static void flight_usr1_restore(void) {
    if (flight_usr1_held) sigaction(SIGUSR1, &flight_usr1_was, NULL);
    flight_usr1_held = 0;
}

/* SIGUSR1 back to what flight_usr1_hold left, in one change (ignored where the program found the default): never
 * the default action for a moment in between. */
static void flight_usr1_rehold(void) {
    struct sigaction a = flight_usr1_was;
    if (!flight_usr1_held || a.sa_handler == SIG_DFL) {
        memset(&a, 0, sizeof a);
        a.sa_handler = SIG_IGN;
        sigemptyset(&a.sa_mask);
    }
    sigaction(SIGUSR1, &a, NULL);
}

static void flight_on_signal(int sig) {
    (void)sig;
    fsc_flight_watch_signal(flight_watch);
}

/* The directory the records go to: --flight-recorder, else --ckpt-dir, else --trace (NULL: none). */
static const char *flight_dir(const char *flight, const char *ckpt_dir, const char *trace) {
    return flight ? flight : ckpt_dir ? ckpt_dir : trace;
}

/* Make dir, start the watcher and install the SIGUSR1 handler (nothing without dir); opt: the option dir came from
 * (flight_dir's choice), named in the messages. 0, or -1 with err. */
static int flight_start(const char *dir, const char *opt, char *err, size_t cap) {
    if (!dir) return 0;
    if (make_dirs(dir) != 0)
        return snprintf(err, cap, "%s %s: cannot create the directory: %s", opt, dir, strerror(errno)), -1;
    if (fsc_flight_watch_start(&flight_watch) != FSC_OK)
        return snprintf(err, cap, "--flight-recorder: %s", fsc_last_error()), -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = flight_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    return 0;
}

/* SIGUSR1 as it was before flight_start from here on (ignored, flight_usr1_hold), not its default action, which ends
 * the process: a request that comes as the run ends (a monitor's, or one mpirun passes on while this process
 * finishes) must not kill a finished run. */
static void flight_stop(void) {
    if (!flight_watch) return;
    flight_usr1_rehold(); /* as before flight_start: ignored (flight_usr1_hold) or the host program's */
    fsc_flight_watch_stop(flight_watch);
    flight_watch = NULL;
}

/* The rank's work with a recorder on its world; a failed collective leaves the rank's record. */
static fsc_status flight_fn(fsc_rank *r, void *arg) {
    const flight_job *j = arg;
    fsc_flight *f = NULL;
    if (!j->dir) return j->fn(r, j->arg);
    FSC_TRY(fsc_flight_create(&(fsc_flight_opts){.rank = r->rank, .world = r->world, .dir = j->dir}, &f));
    fsc_comm_set_flight(r->comm, f);
    fsc_flight_watch_add(flight_watch, f);
    fsc_status s = j->fn(r, j->arg);
    if (s != FSC_OK && (fsc_flight_failed(f) || s == FSC_ERR_TIMEOUT || s == FSC_ERR_COMM)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fsc_last_error());
        if (fsc_flight_write(f, s == FSC_ERR_TIMEOUT ? "timeout" : "failure", msg) == FSC_OK)
            fprintf(stderr, "fsc-train: rank %d: flight record %s/flight-rank-%d.json (read the ranks' records with: "
                            "fsc-ckpt flight %s)\n", r->rank, j->dir, r->rank, j->dir);
        else fprintf(stderr, "fsc-train: rank %d: warning: %s\n", r->rank, fsc_last_error());
        fsc_error(s, "%s", msg);
    }
    fsc_flight_watch_remove(flight_watch, f);
    fsc_comm_set_flight(r->comm, NULL);
    fsc_flight_free(f);
    return s;
}

#endif
