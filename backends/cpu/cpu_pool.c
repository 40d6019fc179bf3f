/* The CPU device's worker threads: a fixed pool that runs one kernel call as contiguous index chunks,
 * which the calling thread and the workers take in turn. A device opened with threads = N > 1 (or, with 0, OpenBLAS's
 * own count) gets N - 1 workers; with one thread there is no pool and every kernel runs on the caller.
 *
 * Bits: every kernel that splits its work computes each output element exactly as the whole call would
 * (elementwise and per-row work split by rows, sums over rows split by columns, order-free reductions
 * such as max and integer sums split anywhere), so results never depend on the number of workers.
 * Only calls big enough to repay a wake-up are split. A device used by two threads at once runs the
 * second caller's kernel on that caller alone (same bits).
 *
 * A call is cut into a few chunks per thread, and the threads take chunks in turn from a shared counter,
 * so a thread that the machine's other programs hold up leaves its chunks to the others.
 * Idle workers spin briefly (yielding) after a job, then sleep on a condition variable: kernels come in
 * bursts between gemms, and OpenBLAS's own threads need the cores during a gemm. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "cpu.h"

enum { SPIN = 200 };      /* sched_yield rounds before sleeping (tens of microseconds) */
enum { PER_THREAD = 4 };  /* chunks per thread in a call */

typedef struct {
    struct cpu_pool *pool;
    int id; /* 1..nworkers */
} worker_arg;

struct cpu_pool {
    int nworkers;
    pthread_t *th;
    worker_arg *wa;
    pthread_mutex_t submit;   /* one job at a time */
    pthread_mutex_t mu;       /* guards sleeping on wake/done and stop */
    pthread_cond_t wake, done;
    atomic_uint gen;          /* bumped once per job, after the job is written (release) */
    atomic_int pending;       /* workers yet to finish the current job */
    atomic_int next;          /* the next chunk of the current job to take */
    int stop;
    /* the current job: written by the submitter before gen is bumped, read by workers after */
    cpu_range_fn fn;
    void *arg;
    size_t n, step;
    int parts;                /* chunks */
};

/* Bounds of chunk p of parts over [0, n) in whole steps (the last chunk takes the remainder). */
static void range_of(size_t n, size_t step, int parts, int p, size_t *lo, size_t *hi) {
    size_t nsteps = (n + step - 1) / step;
    size_t a = nsteps * (size_t)p / (size_t)parts, b = nsteps * (size_t)(p + 1) / (size_t)parts;
    *lo = a * step < n ? a * step : n;
    *hi = b * step < n ? b * step : n;
}

/* Take chunks until none is left. */
static void run_chunks(cpu_pool *pool) {
    for (;;) {
        int c = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
        if (c >= pool->parts) return;
        size_t lo, hi;
        range_of(pool->n, pool->step, pool->parts, c, &lo, &hi);
        if (hi > lo) pool->fn(pool->arg, lo, hi);
    }
}

static void *worker(void *p) {
    worker_arg *w = p;
    cpu_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN; i++) {
            sched_yield();
            g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&pool->mu);
            while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen && !pool->stop)
                pthread_cond_wait(&pool->wake, &pool->mu);
            int stop = pool->stop && g == seen;
            pthread_mutex_unlock(&pool->mu);
            if (stop) return NULL;
        }
        seen = g;
        run_chunks(pool);
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

cpu_pool *cpu_pool_create(int threads) {
    if (threads < 2) return NULL;
    if (threads > 64) threads = 64;
    cpu_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->th = calloc((size_t)threads - 1, sizeof *pool->th);
    pool->wa = calloc((size_t)threads - 1, sizeof *pool->wa);
    if (!pool->th || !pool->wa || pthread_mutex_init(&pool->submit, NULL) != 0) {
        free(pool->th);
        free(pool->wa);
        free(pool);
        return NULL;
    }
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->gen, 0u);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->next, 0);
    for (int i = 0; i < threads - 1; i++) {
        pool->wa[i] = (worker_arg){ pool, i + 1 };
        if (pthread_create(&pool->th[i], NULL, worker, &pool->wa[i]) != 0) break;
        pool->nworkers++;
    }
    if (pool->nworkers == 0) { /* no thread could start: run everything on the caller */
        cpu_pool_free(pool);
        return NULL;
    }
    return pool;
}

void cpu_pool_free(cpu_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->nworkers; i++) pthread_join(pool->th[i], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->mu);
    pthread_mutex_destroy(&pool->submit);
    free(pool->th);
    free(pool->wa);
    free(pool);
}

int cpu_threads(void *ctx) {
    const cpu_ctx *c = ctx;
    return c && c->pool ? c->pool->nworkers + 1 : 1;
}

void cpu_parallel(void *ctx, size_t n, size_t step, size_t grain, cpu_range_fn fn, void *arg) {
    cpu_ctx *c = ctx;
    cpu_pool *pool = c ? c->pool : NULL;
    if (n == 0) return;
    if (step == 0) step = 1;
    if (grain < step) grain = step;
    size_t most = n / grain; /* chunks of at least grain elements */
    int parts = pool ? (pool->nworkers + 1) * PER_THREAD : 1;
    if ((size_t)parts > most) parts = most > 1 ? (int)most : 1;
    if (parts <= 1 || pthread_mutex_trylock(&pool->submit) != 0) {
        fn(arg, 0, n);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->n = n;
    pool->step = step;
    pool->parts = parts;
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->pending, pool->nworkers, memory_order_relaxed);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add_explicit(&pool->gen, 1u, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    run_chunks(pool);
    for (int i = 0; i < SPIN && atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; i++) sched_yield();
    if (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&pool->mu);
        while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0)
            pthread_cond_wait(&pool->done, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
    pthread_mutex_unlock(&pool->submit);
}
