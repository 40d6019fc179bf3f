/* The timing and median helpers the benchmarks share: a monotonic clock in seconds and the median of a sample.
 * Not a library interface: each bench/ program includes it, nothing under lib/ does. */
#ifndef FSC_BENCH_UTIL_H
#define FSC_BENCH_UTIL_H

#include <stdlib.h>
#include "fsc/fsc.h"

/* The library's trace clock (fsc_trace_now_us) in seconds: CLOCK_MONOTONIC, or on a rank of a cluster run with a
 * virtual clock (bench_pipe) that rank's simulated time. */
static inline double now_s(void) { return 1e-6 * fsc_trace_now_us(); }

/* qsort order for doubles, ascending. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of x[0..n) (sorts x in place; 0 for n = 0). */
static inline double median(double *x, int n) {
    if (n <= 0) return 0.0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

#endif
