/* The library's clock (clock_impl.h): CLOCK_MONOTONIC, or a simulated rank's virtual clock. The virtual clock
 * is attached to a thread by the simulated cluster (sim/cluster.c) for its rank threads only; other threads
 * (progress threads, a rank's helpers, the program's own) read the monotonic clock. */
#include <errno.h>
#include <math.h>
#include <time.h>
#include "core/clock_impl.h"

static _Thread_local fsc_vclock *tl_clock; /* the calling thread's rank clock, NULL: wall clock */

static double read_clock(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double fsc_clock_wall(void) { return read_clock(CLOCK_MONOTONIC); }

void fsc_clock_attach(fsc_vclock *c, double t) {
    tl_clock = c;
    if (c) c->t = t, c->cpu = c->modelled ? 0 : read_clock(CLOCK_THREAD_CPUTIME_ID);
}

fsc_vclock *fsc_clock_current(void) { return tl_clock; }

void fsc_clock_restore(fsc_vclock *c) { tl_clock = c; }

int fsc_clock_is_virtual(void) { return tl_clock != NULL; }

double fsc_clock_now(void) {
    fsc_vclock *c = tl_clock;
    if (!c) return fsc_clock_wall();
    return c->modelled ? c->t : c->t + (read_clock(CLOCK_THREAD_CPUTIME_ID) - c->cpu);
}

void fsc_clock_set(double t) {
    fsc_vclock *c = tl_clock;
    if (c) c->t = t, c->cpu = c->modelled ? 0 : read_clock(CLOCK_THREAD_CPUTIME_ID);
}

void fsc_clock_advance(double dt) {
    fsc_vclock *c = tl_clock;
    if (c && c->modelled && dt > 0) c->t += dt;
}

void fsc_clock_wait_until(double t) {
    fsc_vclock *c = tl_clock;
    if (c) {
        const double cpu = c->modelled ? 0 : read_clock(CLOCK_THREAD_CPUTIME_ID), now = c->t + (cpu - c->cpu);
        if (t > now) c->t = t, c->cpu = cpu;
        return;
    }
    if (!(t > fsc_clock_wall())) return;
    if (t > 4e18) t = 4e18; /* a time_t still (the cast of a larger one is undefined): an absurd wait stays one */
    const double whole = floor(t);
    struct timespec ts = {.tv_sec = (time_t)whole, .tv_nsec = (long)((t - whole) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec += 1, ts.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}
