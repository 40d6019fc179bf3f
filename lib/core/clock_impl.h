/* Private to the library: the clock every timing of the library reads (traces, the trainer's step times, the
 * pipeline's waits, balance's layer times, the simulated network and copy link). A thread reads
 * CLOCK_MONOTONIC, unless the simulated cluster has given it a virtual clock (fsc_cluster_opts.sim_clock,
 * docs/overlap.md): then its time is the simulated time of its rank. A rank's virtual time advances by the CPU
 * time its own thread spends (its computation, measured per thread, so other threads and other programs on the
 * machine do not slow it), and jumps forward to the end of what it waits for (a collective's modelled end, a
 * message's arrival, a modelled copy). Not here: what the simulator models (sim/sim_net.c). */
#ifndef FSC_CORE_CLOCK_IMPL_H
#define FSC_CORE_CLOCK_IMPL_H

/* A rank's virtual clock: its time was t when its thread had used cpu seconds of CPU time. A modelled clock
 * (the planner's replay) does not count CPU time: it advances only by fsc_clock_advance (the counting device's
 * modelled kernels) and by what the rank waits for. */
typedef struct fsc_vclock {
    double t, cpu;
    int modelled;
} fsc_vclock;

/* From now on the calling thread reads c, which starts at t (NULL: back to CLOCK_MONOTONIC). */
void fsc_clock_attach(fsc_vclock *c, double t);
/* The calling thread's virtual clock (NULL: the monotonic clock), and back to it as it stands (a cluster of one
 * rank runs on its caller's thread, which may be a rank of another cluster: sim/cluster.c). */
fsc_vclock *fsc_clock_current(void);
void fsc_clock_restore(fsc_vclock *c);
/* Whether the calling thread has a virtual clock. */
int fsc_clock_is_virtual(void);
/* The calling thread's time in seconds: CLOCK_MONOTONIC's, or its rank's virtual time. */
double fsc_clock_now(void);
/* CLOCK_MONOTONIC in seconds, whatever the thread's clock (deadlines and timeouts are real time). */
double fsc_clock_wall(void);
/* Wait until t: sleep (CLOCK_MONOTONIC), or move a virtual clock forward to t (never back). */
void fsc_clock_wait_until(double t);
/* A virtual clock only: now is exactly t, and the CPU time spent since the last reading is not charged (the
 * simulator's own work inside a call, which the network model prices instead). No effect on a wall clock. */
void fsc_clock_set(double t);
/* A modelled clock only: move it forward by dt seconds (a modelled kernel's time). No effect on other clocks. */
void fsc_clock_advance(double dt);

#endif
