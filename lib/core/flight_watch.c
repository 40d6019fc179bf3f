/* The flight recorder's watcher (flight.h): a thread that writes its recorders when asked from a signal handler.
 * Why a thread: writing a record takes fopen, stdio and a mutex, none of them async-signal-safe, and a rank that
 * hangs never returns to a point where it could write. So the program's handler calls fsc_flight_watch_signal,
 * which only write(2)s one byte to a pipe (async-signal-safe, errno kept); the thread, asleep in read(2) on the
 * other end, wakes and writes every recorder it holds with ordinary code, while the ranks stay where they hang.
 * The library installs no handler: the program chooses the signal and installs it. Stopping sends another byte.
 * Not here: the rings and the record's format (flight.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/flight_impl.h"

#define MAX_WATCHED 1024 /* recorders one watcher holds: a simulated world of up to 1024 ranks */

struct fsc_flight_watch {
    int fd[2];                 /* the pipe: [0] the thread reads, [1] the handler writes */
    pthread_t thread;
    pthread_mutex_t mu;        /* guards the list */
    fsc_flight **list;         /* (MAX_WATCHED) held recorders, NULL where free */
    atomic_ulong written;
    atomic_int stopping;       /* fsc_flight_watch_stop asked the thread to end */
};

static void write_all(fsc_flight_watch *w) {
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < MAX_WATCHED; i++)
        if (w->list[i] && fsc_flight_write(w->list[i], "signal", NULL) == FSC_OK) atomic_fetch_add(&w->written, 1);
    pthread_mutex_unlock(&w->mu);
}

static void *watch_main(void *arg) {
    fsc_flight_watch *w = arg;
    for (;;) {
        char b;
        ssize_t n = read(w->fd[0], &b, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || b == 'q' || atomic_load(&w->stopping)) return NULL;
        write_all(w);
    }
}

fsc_status fsc_flight_watch_start(fsc_flight_watch **out) {
    if (!out) return fsc_error(FSC_ERR_INVALID, "fsc_flight_watch_start: out is NULL");
    *out = NULL;
    fsc_flight_watch *w = calloc(1, sizeof *w);
    fsc_flight **list = calloc(MAX_WATCHED, sizeof *list);
    if (!w || !list) {
        free(w), free(list);
        return fsc_error(FSC_ERR_NOMEM, "fsc_flight_watch_start: out of memory");
    }
    w->list = list;
    if (pipe2(w->fd, O_CLOEXEC) != 0) { /* close-on-exec from the start: a fork on another thread inherits neither */
        fsc_status s = fsc_error(FSC_ERR_IO, "fsc_flight_watch_start: pipe: %s", strerror(errno));
        free(w->list), free(w);
        return s;
    }
    fcntl(w->fd[1], F_SETFL, O_NONBLOCK); /* a handler never blocks: a full pipe already holds a request */
    pthread_mutex_init(&w->mu, NULL);
    atomic_init(&w->written, 0);
    atomic_init(&w->stopping, 0);
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    if (rc != 0) {
        close(w->fd[0]), close(w->fd[1]);
        pthread_mutex_destroy(&w->mu);
        free(w->list), free(w);
        return fsc_error(FSC_ERR_INTERNAL, "fsc_flight_watch_start: cannot start its thread: %s", strerror(rc));
    }
    *out = w;
    return FSC_OK;
}

fsc_status fsc_flight_watch_add(fsc_flight_watch *w, fsc_flight *f) {
    if (!w || !f) return fsc_error(FSC_ERR_INVALID, "fsc_flight_watch_add: %s is NULL", w ? "recorder" : "watcher");
    pthread_mutex_lock(&w->mu);
    int i = 0;
    while (i < MAX_WATCHED && w->list[i]) i++;
    if (i < MAX_WATCHED) flight_ref(f), w->list[i] = f;
    pthread_mutex_unlock(&w->mu);
    if (i == MAX_WATCHED)
        return fsc_error(FSC_ERR_INVALID, "fsc_flight_watch_add: a watcher holds at most %d recorders", MAX_WATCHED);
    return FSC_OK;
}

void fsc_flight_watch_remove(fsc_flight_watch *w, fsc_flight *f) {
    if (!w || !f) return;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < MAX_WATCHED; i++)
        if (w->list[i] == f) {
            w->list[i] = NULL;
            flight_unref(f);
            break;
        }
    pthread_mutex_unlock(&w->mu);
}

void fsc_flight_watch_signal(fsc_flight_watch *w) {
    if (!w) return;
    int saved = errno;
    ssize_t n = write(w->fd[1], "w", 1);
    (void)n;
    errno = saved;
}

unsigned long fsc_flight_watch_written(fsc_flight_watch *w) { return w ? atomic_load(&w->written) : 0; }

/* The pipe stays non-blocking: a blocking one deadlocked under a stream of signals (a handler on the watcher's own
 * thread blocked on the full pipe that only that thread drains, and the stop byte behind it). The flag ends the
 * thread at the next byte it reads: the stop byte, or one of the requests filling the pipe when that did not fit. */
void fsc_flight_watch_stop(fsc_flight_watch *w) {
    if (!w) return;
    atomic_store(&w->stopping, 1);
    ssize_t n;
    do n = write(w->fd[1], "q", 1);
    while (n < 0 && errno == EINTR);
    pthread_join(w->thread, NULL);
    close(w->fd[0]), close(w->fd[1]);
    for (int i = 0; i < MAX_WATCHED; i++)
        if (w->list[i]) flight_unref(w->list[i]);
    pthread_mutex_destroy(&w->mu);
    free(w->list);
    free(w);
}
