/* The simulated cluster's groups and their rendezvous (see sim.h for the protocol).
 * This file knows nothing about what a collective computes: it posts slots, checks that every rank of a
 * group called the same thing, builds split's child groups, and makes sure no rank waits forever.
 * Lock order: the cluster's mutex may be held while taking a group's, never the other way round. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sim.h"

/* ---- cluster ---- */

fsc_status sim_cluster_create(int world, double timeout_s, sim_cluster **out) {
    *out = NULL;
    sim_cluster *cl = calloc(1, sizeof(*cl));
    if (!cl) return fsc_error(FSC_ERR_NOMEM, "simulated cluster of %d ranks: out of memory", world);
    cl->world = world;
    cl->timeout_s = timeout_s;
    cl->fail_rank = -1;
    atomic_init(&cl->fail_claimed, 0);
    atomic_init(&cl->failed, 0);
    cl->exited = calloc((size_t)world, sizeof(*cl->exited));
    cl->revoked_by = calloc((size_t)world, sizeof(*cl->revoked_by));
    int *ident = malloc((size_t)world * sizeof(int));
    if (!cl->exited || !cl->revoked_by || !ident || pthread_mutex_init(&cl->mu, NULL) != 0) {
        free(cl->exited);
        free(cl->revoked_by);
        free(ident);
        free(cl);
        return fsc_error(FSC_ERR_NOMEM, "simulated cluster of %d ranks: out of memory", world);
    }
    for (int r = 0; r < world; r++) {
        atomic_init(&cl->exited[r], 0);
        atomic_init(&cl->revoked_by[r], -1);
        ident[r] = r;
    }
    cl->world_group = sim_group_new(cl, world, ident);
    free(ident);
    if (!cl->world_group) {
        pthread_mutex_destroy(&cl->mu);
        free(cl->exited);
        free(cl->revoked_by);
        free(cl);
        return fsc_error(FSC_ERR_NOMEM, "simulated cluster of %d ranks: out of memory", world);
    }
    sim_group_register(cl->world_group);
    *out = cl;
    return FSC_OK;
}

static void group_destroy(sim_group *g) {
    for (int r = 0; r < g->size; r++) {
        for (sim_msg *m = g->inbox[r]; m;) {
            sim_msg *next = m->next;
            free(m);
            m = next;
        }
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->inbox);
    free(g->slots);
    free(g->world_rank);
    free(g);
}

void sim_cluster_free(sim_cluster *cl) {
    if (!cl) return;
    for (sim_group *g = cl->groups; g;) {
        sim_group *next = g->next;
        group_destroy(g);
        g = next;
    }
    pthread_mutex_destroy(&cl->mu);
    free(cl->exited);
    free(cl->revoked_by);
    free(cl);
}

/* Wake every rank waiting on any group so it rechecks the cluster's state. */
static void wake_all(sim_cluster *cl) {
    pthread_mutex_lock(&cl->mu);
    for (sim_group *g = cl->groups; g; g = g->next) {
        pthread_mutex_lock(&g->mu);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
    pthread_mutex_unlock(&cl->mu);
}

void sim_cluster_fail(sim_cluster *cl, int rank, fsc_status s, const char *msg) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&cl->fail_claimed, &expect, 1)) {
        cl->fail_rank = rank;
        cl->fail_status = s;
        snprintf(cl->fail_msg, sizeof(cl->fail_msg), "%s", msg && msg[0] ? msg : fsc_status_str(s));
        atomic_store_explicit(&cl->failed, 1, memory_order_release);
    }
    wake_all(cl);
}

/* Rank `rank` returned: wake the ranks waiting on the groups holding it (only they wait for it; a thousand ranks
 * returning at once, stood in for, would otherwise wake every waiting rank a thousand times). */
void sim_cluster_exit(sim_cluster *cl, int rank) {
    atomic_store_explicit(&cl->exited[rank], 1, memory_order_release);
    pthread_mutex_lock(&cl->mu);
    for (sim_group *g = cl->groups; g; g = g->next) {
        int in = 0;
        for (int j = 0; j < g->size && !in; j++) in = g->world_rank[j] == rank;
        if (!in) continue;
        pthread_mutex_lock(&g->mu);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
    pthread_mutex_unlock(&cl->mu);
}

int sim_cluster_first_failure(sim_cluster *cl, fsc_status *s, const char **msg) {
    if (!atomic_load_explicit(&cl->failed, memory_order_acquire)) return -1;
    if (s) *s = cl->fail_status;
    if (msg) *msg = cl->fail_msg;
    return cl->fail_rank;
}

/* ---- groups ---- */

sim_group *sim_group_new(sim_cluster *cl, int size, const int *world_rank) {
    sim_group *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->cl = cl;
    g->size = size;
    g->revoker = -1;
    g->world_rank = malloc((size_t)size * sizeof(int));
    g->slots = calloc((size_t)size, sizeof(sim_slot));
    g->inbox = calloc((size_t)size, sizeof(sim_msg *));
    if (!g->world_rank || !g->slots || !g->inbox) goto fail;
    memcpy(g->world_rank, world_rank, (size_t)size * sizeof(int));
    if (sim_net_place(g) != 0) goto fail; /* two levels of links: the nodes it spans */
    if (pthread_mutex_init(&g->mu, NULL) != 0) goto fail;
    pthread_condattr_t ca;
    int ok = pthread_condattr_init(&ca) == 0;
    ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&g->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok) {
        pthread_mutex_destroy(&g->mu);
        goto fail;
    }
    atomic_init(&g->refs, size);
    return g;
fail:
    free(g->world_rank);
    free(g->slots);
    free(g->inbox);
    free(g);
    return NULL;
}

void sim_group_register(sim_group *g) {
    sim_cluster *cl = g->cl;
    pthread_mutex_lock(&cl->mu);
    g->next = cl->groups;
    cl->groups = g;
    pthread_mutex_unlock(&cl->mu);
}

void sim_group_unref(sim_group *g) {
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    sim_cluster *cl = g->cl;
    pthread_mutex_lock(&cl->mu);
    for (sim_group **p = &cl->groups; *p; p = &(*p)->next) {
        if (*p == g) {
            *p = g->next;
            break;
        }
    }
    if (cl->world_group == g) cl->world_group = NULL;
    pthread_mutex_unlock(&cl->mu);
    group_destroy(g);
}

void sim_rank_label(const sim_group *g, int rank, char *buf, size_t cap) {
    if (g->size == g->cl->world || g->world_rank[rank] == rank)
        snprintf(buf, cap, "rank %d", rank);
    else
        snprintf(buf, cap, "rank %d (world rank %d)", rank, g->world_rank[rank]);
}

static const char *redop_name(fsc_redop op) {
    return op == FSC_SUM ? "sum" : op == FSC_AVG ? "avg" : op == FSC_MAX ? "max" : "?";
}

void sim_slot_describe(const sim_slot *s, char *buf, size_t cap) {
    const char *dt = fsc_dtype_name(s->dt);
    switch (s->op) {
    case FSC_OP_ALL_REDUCE:
    case FSC_OP_REDUCE_SCATTER:
        snprintf(buf, cap, "%s(%zu x %s, %s)", fsc_comm_op_name(s->op), s->count, dt, redop_name(s->redop));
        break;
    case FSC_OP_BROADCAST:
        snprintf(buf, cap, "broadcast(%zu x %s, root %d)", s->count, dt, s->root);
        break;
    case FSC_OP_BARRIER: snprintf(buf, cap, "barrier"); break;
    case SIM_OP_SPLIT: snprintf(buf, cap, "split"); break;
    default: snprintf(buf, cap, "%s(%zu x %s)", fsc_comm_op_name(s->op), s->count, dt); break;
    }
}

static int slots_match(const sim_slot *a, const sim_slot *b) {
    if (a->op != b->op) return 0;
    if (a->op == FSC_OP_BARRIER || a->op == SIM_OP_SPLIT) return 1;
    if (a->count != b->count || a->dt != b->dt) return 0;
    if ((a->op == FSC_OP_ALL_REDUCE || a->op == FSC_OP_REDUCE_SCATTER) && a->redop != b->redop) return 0;
    if (a->op == FSC_OP_BROADCAST && a->root != b->root) return 0;
    return 1;
}

/* ---- split: the completing rank builds every child group ---- */

typedef struct { int color, key, rank; } split_ent;

static int split_cmp(const void *pa, const void *pb) {
    const split_ent *a = pa, *b = pb;
    if (a->color != b->color) return a->color < b->color ? -1 : 1;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

static fsc_status build_split(sim_group *g) {
    int n = g->size, nmade = 0, ok = 1;
    if (n < 1) return fsc_error(FSC_ERR_INTERNAL, "split of a group of %d ranks", n);
    split_ent *e = malloc((size_t)n * sizeof(*e));
    int *wr = malloc((size_t)n * sizeof(int));
    sim_group **made = calloc((size_t)n, sizeof(*made));
    for (int r = 0; r < n; r++) g->slots[r].child = NULL;
    if (!e || !wr || !made) ok = 0;
    for (int r = 0; ok && r < n; r++) e[r] = (split_ent){g->slots[r].color, g->slots[r].key, r};
    if (ok) qsort(e, (size_t)n, sizeof(*e), split_cmp);
    for (int lo = 0, hi; ok && lo < n; lo = hi) {
        for (hi = lo; hi < n && e[hi].color == e[lo].color; hi++) wr[hi - lo] = g->world_rank[e[hi].rank];
        sim_group *c = sim_group_new(g->cl, hi - lo, wr);
        if (!c) {
            ok = 0;
            break;
        }
        made[nmade++] = c;
        for (int i = lo; ok && i < hi; i++) {
            sim_handle *h = malloc(sizeof(*h));
            if (!h) ok = 0;
            else *h = (sim_handle){.g = c, .rank = i - lo};
            g->slots[e[i].rank].child = h;
        }
    }
    if (!ok) { /* nothing is registered yet: free what was built */
        for (int r = 0; r < n; r++) {
            free(g->slots[r].child);
            g->slots[r].child = NULL;
        }
        for (int k = 0; k < nmade; k++) group_destroy(made[k]);
    }
    free(e);
    free(wr);
    free(made);
    return ok ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "split of a group of %d ranks: out of memory", n);
}

/* ---- rendezvous ---- */

void sim_deadline(const sim_cluster *cl, struct timespec *out) {
    clock_gettime(CLOCK_MONOTONIC, out);
    double t = cl->timeout_s > 1e9 ? 1e9 : cl->timeout_s;
    time_t whole = (time_t)t;
    long ns = (long)((t - (double)whole) * 1e9);
    out->tv_sec += whole;
    out->tv_nsec += ns;
    if (out->tv_nsec >= 1000000000L) {
        out->tv_sec += 1;
        out->tv_nsec -= 1000000000L;
    }
}

int sim_wait(sim_group *g, const struct timespec *deadline) {
    return pthread_cond_timedwait(&g->cv, &g->mu, deadline) == ETIMEDOUT;
}

void sim_group_fail(sim_group *g, fsc_status s, const char *msg) {
    if (g->fail == FSC_OK) {
        g->fail = s;
        snprintf(g->fail_msg, sizeof(g->fail_msg), "%s", msg);
    }
    pthread_cond_broadcast(&g->cv);
}

fsc_status sim_check_failed(sim_handle *h, const char *what, int entering) {
    sim_group *g = h->g;
    sim_cluster *cl = g->cl;
    if (atomic_load_explicit(&cl->failed, memory_order_acquire)) {
        if (cl->fail_rank < 0)
            return fsc_error(FSC_ERR_COMM, "the cluster failed (%.300s) while this rank was in %s", cl->fail_msg,
                             what);
        return fsc_error(FSC_ERR_COMM, "world rank %d failed (%.300s) while this rank was in %s", cl->fail_rank,
                         cl->fail_msg, what);
    }
    if (g->fail != FSC_OK) atomic_store(&cl->revoked_by[g->world_rank[h->rank]], g->revoker);
    if (g->fail != FSC_OK && entering && !h->queued) { /* called after the failure, which may name this rank as
                                                        * missing */
        char lab[64];
        sim_rank_label(g, h->rank, lab, sizeof(lab));
        return fsc_error(g->fail, "%s called %s after its group had failed: %s", lab, what, g->fail_msg);
    }
    if (g->fail != FSC_OK) { /* another rank's words: say so, they may name this rank as the one missing */
        char lab[64];
        sim_rank_label(g, h->rank, lab, sizeof(lab));
        return fsc_error(g->fail, "%s's group failed while it was in %s: %s", lab, what, g->fail_msg);
    }
    return FSC_OK;
}

int sim_stand_in(const sim_group *g, int j) {
    const int w = g->world_rank[j];
    if (!g->cl->stand_in || !atomic_load_explicit(&g->cl->exited[w], memory_order_acquire)) return -1;
    const int v = g->cl->stand_in[w]; /* written before w returned (fsc_cluster_opts.stand_in) */
    if (v < 0 || v == w) return -1;
    if (v < g->size && g->world_rank[v] == v) return v; /* the world's ranks in order (the world group) */
    for (int k = 0; k < g->size; k++)
        if (g->world_rank[k] == v) return k;
    return -2;
}

/* Under g->mu: a rank this collective waits for has returned from its function (and is not stood in for). */
static fsc_status check_exited(sim_group *g, const char *what) {
    for (int j = 0; j < g->size; j++) {
        if (g->slots[j].posted || sim_stand_in(g, j) >= 0) continue;
        if (atomic_load_explicit(&g->cl->exited[g->world_rank[j]], memory_order_acquire)) {
            char lab[64];
            sim_rank_label(g, j, lab, sizeof(lab));
            return fsc_error(FSC_ERR_COMM, "%s returned from its function without calling %s", lab, what);
        }
    }
    return FSC_OK;
}

/* Under g->mu: the message for a timeout, naming the ranks that never arrived. */
static void timeout_msg(sim_group *g, const char *what, char *buf, size_t cap) {
    int len = snprintf(buf, cap, "%s timed out after %g s: ", what, g->cl->timeout_s);
    int listed = 0, missing = 0;
    for (int j = 0; j < g->size; j++) {
        if (g->slots[j].posted) continue;
        missing++;
        if (listed < 8 && len > 0 && (size_t)len < cap) {
            char lab[64];
            sim_rank_label(g, j, lab, sizeof(lab));
            len += snprintf(buf + len, cap - (size_t)len, "%s%s", listed ? ", " : "", lab);
            listed++;
        }
    }
    if (len > 0 && (size_t)len < cap) {
        if (missing > listed)
            len += snprintf(buf + len, cap - (size_t)len, " and %d more", missing - listed);
        if (len > 0 && (size_t)len < cap)
            snprintf(buf + len, cap - (size_t)len, " never arrived");
    }
}

/* Under g->mu: the arrive rendezvous completes. Check the calls agree; build split's groups. */
static void complete_arrive(sim_group *g) {
    g->verdict = FSC_OK;
    for (int j = 0; j < g->size; j++) {
        if (!g->slots[j].stage_err) continue;
        char a[96], lab[64];
        sim_slot_describe(&g->slots[j], a, sizeof(a));
        sim_rank_label(g, j, lab, sizeof(lab));
        g->verdict = FSC_ERR_COMM;
        snprintf(g->verdict_msg, sizeof(g->verdict_msg), "%s could not stage its buffers for %s through host "
                 "memory: %.150s", lab, a, g->slots[j].stage_err);
        return;
    }
    for (int j = 1; j < g->size; j++) {
        if (slots_match(&g->slots[0], &g->slots[j])) continue;
        char a[96], b[96], lab[64];
        sim_slot_describe(&g->slots[0], a, sizeof(a));
        sim_slot_describe(&g->slots[j], b, sizeof(b));
        sim_rank_label(g, j, lab, sizeof(lab));
        g->verdict = FSC_ERR_COMM;
        snprintf(g->verdict_msg, sizeof(g->verdict_msg), "mismatched collectives: rank 0 called %s but %s called %s",
                 a, lab, b);
        return;
    }
    if (g->slots[0].op == SIM_OP_SPLIT && build_split(g) != FSC_OK) {
        g->verdict = FSC_ERR_NOMEM;
        snprintf(g->verdict_msg, sizeof(g->verdict_msg), "%s", fsc_last_error());
    }
}

/* Under g->mu: the ranks not posted are all stood in for by ranks that posted (fsc_cluster_opts.stand_in): their
 * slots become copies of those ranks' (what they send is what their stand-ins send), g->stood counts them, and 1
 * is returned (the collective can complete). 0: a rank not posted is not stood in for, or its stand-in has not
 * posted yet. A stand-in outside the group, or a split (whose groups a copied slot would misplace), fails the
 * collective (*why). */
static int stand_ins(sim_group *g, const char **why) {
    int n = 0;
    *why = NULL;
    for (int j = 0; j < g->size; j++) {
        if (g->slots[j].posted) continue;
        const int k = sim_stand_in(g, j);
        if (k == -1 || (k >= 0 && !g->slots[k].posted)) return 0;
        if (k == -2) *why = "its stand-in is not in this group";
        n++;
    }
    for (int j = 0; j < g->size && n && !*why; j++) {
        if (g->slots[j].posted) continue;
        const int k = sim_stand_in(g, j);
        g->slots[j] = g->slots[k];
        g->slots[j].posted = 0;
        g->slots[j].child = NULL;
        if (g->slots[k].op == SIM_OP_SPLIT) *why = "a split cannot stand in for it";
    }
    g->stood = n;
    return 1;
}

/* Under g->mu: every rank has posted or is stood in for: check the calls, commit, wake the group. */
static void commit(sim_group *g, const char *stood_why) {
    if (stood_why) {
        g->verdict = FSC_ERR_COMM;
        snprintf(g->verdict_msg, sizeof(g->verdict_msg), "a rank of the group returned from its function and was "
                 "stood in for, but %s", stood_why);
    } else {
        complete_arrive(g);
    }
    if ((sim_net_on(g->cl) || g->cl->virt) && g->verdict == FSC_OK) sim_net_commit(g);
    for (int j = 0; j < g->size; j++) g->slots[j].posted = 0;
    g->arrived = 0;
    g->arrive_gen++;
    pthread_cond_broadcast(&g->cv);
}

fsc_status sim_arrive(sim_handle *h, const sim_slot *mine) {
    sim_group *g = h->g;
    char what[96];
    sim_slot_describe(mine, what, sizeof(what));
    struct timespec deadline;
    sim_deadline(g->cl, &deadline);

    pthread_mutex_lock(&g->mu);
    fsc_status s = sim_check_failed(h, what, 1);
    if (s != FSC_OK) {
        pthread_mutex_unlock(&g->mu);
        return s;
    }
    g->slots[h->rank] = *mine;
    g->slots[h->rank].t_arrive = h->t_arrive;
    g->slots[h->rank].posted = 1;
    g->slots[h->rank].child = NULL;
    unsigned gen = g->arrive_gen;
    const char *why = NULL;
    if (++g->arrived == g->size) {
        g->stood = 0;
        commit(g, NULL);
    } else if (g->cl->stand_in && stand_ins(g, &why)) {
        commit(g, why);
    }
    int timed_out = 0;
    for (;;) {
        if (g->arrive_gen == gen && g->cl->stand_in && stand_ins(g, &why)) commit(g, why); /* one returned */
        if (g->arrive_gen != gen) { /* committed: every rank arrived (or is stood in for) */
            h->t_done = g->t_done;
            s = g->verdict == FSC_OK ? FSC_OK : fsc_error(g->verdict, "%s", g->verdict_msg);
            break;
        }
        /* exited before failed: a rank fails the cluster before it exits, so a failure is never missed */
        fsc_status e = check_exited(g, what);
        s = sim_check_failed(h, what, 0);
        if (s == FSC_OK) s = e;
        if (s == FSC_OK && timed_out) {
            char msg[SIM_MSG_CAP];
            timeout_msg(g, what, msg, sizeof(msg));
            sim_group_fail(g, FSC_ERR_TIMEOUT, msg);
            s = fsc_error(FSC_ERR_TIMEOUT, "%s", msg);
        }
        if (s != FSC_OK) { /* withdraw: the collective can no longer complete */
            g->slots[h->rank].posted = 0;
            g->arrived--;
            break;
        }
        timed_out = sim_wait(g, &deadline);
    }
    pthread_mutex_unlock(&g->mu);
    return s;
}

void sim_depart(sim_handle *h) {
    sim_group *g = h->g;
    pthread_mutex_lock(&g->mu);
    unsigned gen = g->depart_gen;
    if (++g->departed + g->stood == g->size) {
        g->departed = 0;
        g->depart_gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->depart_gen == gen) pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}
