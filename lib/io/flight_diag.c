/* The diagnosis over a world of flight records (flight_read.h): where the ranks diverge.
 * 1. Groups: the ranks' communicators with the same group id form a group; each member's world rank is its
 *    record's. A member without a record (a rank stopped or killed) gets the world rank the others imply when
 *    only one fits (group ranks follow world ranks in order in every split fsc makes), else "?".
 * 2. Where each rank is: its call in state waiting or failed (the one it blocks in; the latest started when
 *    several), else "not in a collective" with its last completed call.
 * 3. A group is stuck when a member has a call that did not complete. At the lowest such number s, each member
 *    is at s (started it, not completed), past it, behind (never called it) or silent (no record); members at s
 *    with different calls (operation, count, dtype, root) are a mismatch.
 * 4. Suspicion: in each stuck group the smaller side is suspect: of a mismatch, the ranks outside the largest
 *    kind of call; else silent ranks; else the ranks at s against those behind (a tie blames those behind; of
 *    those at s, only the ones that block in it: one that issued it in the background went ahead); with
 *    some at s and the others past it (a rank stopped inside the call once its part had gone out: the others, or
 *    some, completed it and wait further on), those at s that failed in it only after every other member had
 *    written its record, else the ranks at s against those past it (a tie blames those at s); when all are at s,
 *    again those that failed in it only after every other member had written its record (a rank stopped inside
 *    the call, woken to find the others gone, times out last), else those that did not time out in it while
 *    others did (a rank stopped inside the call that failed otherwise when it resumed). The verdict names the
 *    most suspected ranks (direct evidence that a rank stopped, a missing record or a call failed only after
 *    every other member had given up, counts twice the smaller side), where they are, and where the others are; with stuck groups but no suspect (every
 *    member waits in the call: it hangs inside) it says so and where every rank is. A rank behind in one group and
 *    waiting in another (a deadlock: rank 3 in an all_gather the others never call, the others in a
 *    reduce_scatter rank 3 never reaches) is the minority in both. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/comm.h"
#include "fsc/dtype.h"
#include "io/flight_read.h"

typedef struct {
    char *p;
    size_t cap, len;
} out_buf;

static void put(out_buf *o, const char *fmt, ...) {
    if (o->len + 1 >= o->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0) o->len = o->len + (size_t)n < o->cap ? o->len + (size_t)n : o->cap - 1;
}

#define MAX_SLOTS (1 << 22) /* members of all groups together (a group of N ranks has N) */

typedef struct {
    uint64_t gid;
    int w;              /* world rank */
    flr_comm *c;
} ref;

typedef struct {
    uint64_t gid;
    int size;
    flr_comm **m;       /* (size) each member's communicator, NULL without a record */
    int *wr;            /* (size) each member's world rank, -1 unknown */
    char label[168];    /* "data(0,1,2,3)": a name of 31 bytes, ranks of 127 */
} group;

typedef struct {
    flr_record *const *recs;
    int world;
    group *g;
    int ng;
    int *suspect;       /* (world) each rank's weight of suspicion (SIDE, DIRECT) */
    int *silent;        /* (world + 1) silent[w]: ranks below w without a record */
    int stuck;          /* stuck groups */
} diag;

static int by_gid(const void *a, const void *b) {
    const ref *x = a, *y = b;
    if (x->gid != y->gid) return x->gid < y->gid ? -1 : 1;
    return x->w - y->w;
}

static const char *op_name(int op) { return op == FLR_OP_SPLIT ? "split" : fsc_comm_op_name((fsc_comm_op)op); }

static int group_of(const diag *d, uint64_t gid) {
    int lo = 0, hi = d->ng - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (d->g[mid].gid == gid) return mid;
        if (d->g[mid].gid < gid) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* Ranks as "0-3", "0,2,5" or "0,?,2". */
static void rank_list(const int *w, int n, char *buf, size_t cap) {
    out_buf o = {buf, cap, 0};
    buf[0] = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && w[i] >= 0 && w[j + 1] == w[j] + 1) j++;
        const char *sep = i ? "," : "";
        if (w[i] < 0) put(&o, "%s?", sep);
        else if (j - i >= 2) put(&o, "%s%d-%d", sep, w[i], w[j]);
        else {
            put(&o, "%s%d", sep, w[i]);
            if (j > i) put(&o, ",%d", w[j]);
        }
        i = j + 1;
    }
}

/* Members without a record: the world rank between their neighbours' when exactly one silent rank fits. */
static void infer_silent(const diag *d, group *g) {
    for (int i = 0; i < g->size; i++) {
        if (g->wr[i] >= 0) continue;
        int j = i;
        while (j < g->size && g->wr[j] < 0) j++;
        int lo = i ? g->wr[i - 1] : -1, hi = j < g->size ? g->wr[j] : d->world;
        if (hi > lo && d->silent[hi] - d->silent[lo + 1] == j - i) /* exactly as many silent ranks between */
            for (int k = i, w = lo + 1; k < j; w++)
                if (!d->recs[w]) g->wr[k++] = w;
        i = j;
    }
}

static int build_groups(diag *d, out_buf *o) {
    size_t n = 0, k = 0;
    for (int w = 0; w < d->world; w++) n += d->recs[w] ? (size_t)d->recs[w]->ncomms : 0;
    ref *r = calloc(n + 1, sizeof *r);
    d->g = calloc(n + 1, sizeof *d->g);
    if (!r || !d->g) return free(r), -1;
    for (int w = 0; w < d->world; w++)
        for (int i = 0; d->recs[w] && i < d->recs[w]->ncomms; i++)
            r[k++] = (ref){ d->recs[w]->comms[i].gid, w, &d->recs[w]->comms[i] };
    qsort(r, n, sizeof *r, by_gid);
    size_t slots = 0;
    for (size_t a = 0; a < n;) {
        group *g = &d->g[d->ng++];
        g->gid = r[a].gid, g->size = r[a].c->size;
        if ((slots += (size_t)g->size) > MAX_SLOTS) { /* memory by what the records justify, not what they claim */
            put(o, "note: the groups' sizes add up to more than %d members: group of rank %d's comm '%s' left out\n",
                MAX_SLOTS, r[a].w, r[a].c->name);
            d->ng--, slots -= (size_t)g->size;
            while (++a < n && r[a].gid == g->gid) {}
            continue;
        }
        g->m = calloc((size_t)g->size, sizeof *g->m);
        g->wr = malloc((size_t)g->size * sizeof *g->wr);
        if (!g->m || !g->wr) return free(r), -1;
        for (int i = 0; i < g->size; i++) g->wr[i] = -1;
        for (; a < n && r[a].gid == g->gid; a++) {
            flr_comm *c = r[a].c;
            if (c->size != g->size || g->m[c->rank])
                put(o, "note: rank %d's comm '%s' disagrees with the other members of its group (size %d, rank %d): "
                    "left out\n", r[a].w, c->name, c->size, c->rank);
            else g->m[c->rank] = c, g->wr[c->rank] = r[a].w;
        }
        infer_silent(d, g);
        const char *name = "comm";
        for (int i = 0; i < g->size; i++)
            if (g->m[i]) name = g->m[i]->name;
        char ranks[128];
        rank_list(g->wr, g->size, ranks, sizeof ranks);
        snprintf(g->label, sizeof g->label, "%s(%s)", name, ranks);
    }
    free(r);
    return 0;
}

static const flr_call *call_at(const flr_comm *c, uint64_t seq) {
    size_t lo = 0, hi = c->ncalls;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->calls[mid].seq == seq) return &c->calls[mid];
        if (c->calls[mid].seq < seq) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* "all_gather #1812 of group data(0-3)" */
static void call_text(const diag *d, const flr_comm *c, const flr_call *k, char *buf, size_t cap) {
    int g = group_of(d, c->gid);
    snprintf(buf, cap, "%s #%" PRIu64 " of group %s", op_name(k->op), k->seq, g >= 0 ? d->g[g].label : c->name);
}

/* Where world rank w is, as a phrase: "waits in ...", "is not in a collective (...)", "left no record ..."
 * ("wait", "are" for several ranks: pl); detail adds how long and how it ended. */
static void where(const diag *d, int w, int pl, int detail, char *buf, size_t cap) {
    const flr_record *r = d->recs[w];
    if (!r) {
        snprintf(buf, cap, "left no record (stopped, killed, or never reached a failure)");
        return;
    }
    const flr_comm *bc = NULL, *lc = NULL;
    const flr_call *best = NULL, *last = NULL;
    for (int i = 0; i < r->ncomms; i++)
        for (size_t j = 0; j < r->comms[i].ncalls; j++) {
            const flr_call *k = &r->comms[i].calls[j];
            if ((k->state == FLR_WAITING || k->state == FLR_FAILED) && (!best || k->t0 > best->t0))
                best = k, bc = &r->comms[i];
            if (k->state == FLR_COMPLETED && (!last || k->t1 > last->t1)) last = k, lc = &r->comms[i];
        }
    char what[224];
    if (best) {
        call_text(d, bc, best, what, sizeof what);
        double secs = 1e-6 * (double)((best->state == FLR_FAILED ? best->t1 : r->time_us) - best->t0);
        if (!detail) snprintf(buf, cap, "%s in %s", pl ? "wait" : "waits", what);
        else snprintf(buf, cap, "%s in %s (%.1f s%s%s)", pl ? "wait" : "waits", what, secs,
                      best->state == FLR_FAILED ? ", then failed: " : "",
                      best->state == FLR_FAILED ? best->status : "");
    } else if (last) {
        call_text(d, lc, last, what, sizeof what);
        if (!detail) snprintf(buf, cap, "%s not in a collective (the last call: %s)", pl ? "are" : "is", what);
        else snprintf(buf, cap, "%s not in a collective (the last call, %s, completed %.1f s before the record)",
                      pl ? "are" : "is", what, 1e-6 * (double)(r->time_us - last->t1));
    } else {
        snprintf(buf, cap, "%s not in a collective (no call recorded)", pl ? "are" : "is");
    }
}

enum { AT = 1, PAST, BEHIND, SILENT, TIMED_OUT, NOT_TIMED_OUT, LATE, AHEAD };

static int same_call(const flr_call *a, const flr_call *b) {
    if ((a->op == FSC_OP_SEND || a->op == FSC_OP_RECV) && (b->op == FSC_OP_SEND || b->op == FSC_OP_RECV)) return 1;
    return a->op == b->op && a->count == b->count && a->dt == b->dt &&
           (a->op != FSC_OP_BROADCAST || a->peer == b->peer);
}

/* Mark the world ranks of members i with cls[i] == want as suspects, `weight` times. */
static void blame_by(diag *d, const group *g, const int *cls, int want, int weight) {
    for (int i = 0; i < g->size; i++)
        if (cls[i] == want && g->wr[i] >= 0) d->suspect[g->wr[i]] += weight;
}

/* Being on the smaller side of a group counts once; evidence that a rank itself stopped (it left no record, or
 * failed in a call only after every other member had given up) counts twice, so a rank stopped inside a call of one
 * group outweighs a rank that merely went ahead of it in another (DIRECT). */
enum { SIDE = 1, DIRECT = 2 };

static void blame(diag *d, const group *g, const int *cls, int want) { blame_by(d, g, cls, want, SIDE); }

static void members_text(const group *g, const int *cls, int want, char *buf, size_t cap) {
    int w[256] = {0}, n = 0;
    for (int i = 0; i < g->size && n < 256; i++)
        if (cls[i] == want) w[n++] = g->wr[i];
    char list[128];
    rank_list(w, n, list, sizeof list);
    snprintf(buf, cap, "rank%s %s", n == 1 ? "" : "s", list);
}

/* The two latest record times of g's members (every member has one), and whose the latest is: the time the last
 * member other than i wrote its record is t.top[i == t.top_i]. */
typedef struct {
    int64_t top[2];
    int top_i;
} last_records;

static last_records records_of(const diag *d, const group *g) {
    last_records t = {{-1, -1}, -1};
    for (int i = 0; i < g->size; i++) {
        int64_t x = d->recs[g->wr[i]]->time_us;
        if (x > t.top[0]) t.top[1] = t.top[0], t.top[0] = x, t.top_i = i;
        else if (x > t.top[1]) t.top[1] = x;
    }
    return t;
}

/* Every member is in call s (none behind, none past it): when some failed in it by a timeout and the others
 * failed otherwise (as a rank stopped inside the call does when it resumes to find the others gone), the others
 * are what the ones that timed out waited for. Members still waiting say nothing either way. cls: rewritten. */
static void timed_out_waiting(diag *d, const group *g, uint64_t s, int *cls, out_buf *o) {
    int n[2] = {0, 0};
    for (int i = 0; i < g->size; i++) {
        if (cls[i] != AT) return;
        const flr_call *k = call_at(g->m[i], s);
        cls[i] = k->state != FLR_FAILED ? AT : !strcmp(k->status, "timeout") ? TIMED_OUT : NOT_TIMED_OUT;
        if (cls[i] != AT) n[cls[i] == TIMED_OUT]++;
    }
    if (!n[0] || !n[1]) return;
    char a[192], b[192];
    members_text(g, cls, TIMED_OUT, a, sizeof a);
    members_text(g, cls, NOT_TIMED_OUT, b, sizeof b);
    put(o, "group %s, call #%" PRIu64 ": %s timed out in it, waiting; %s failed otherwise\n", g->label, s, a, b);
    blame(d, g, cls, NOT_TIMED_OUT);
}

/* Members at call s (cls AT) whose call failed only after every other member of g had written its record (a rank
 * stopped or hung inside the call fails when it is woken to find the others gone): marked LATE; how many. */
static int mark_late(const diag *d, const group *g, uint64_t s, int *cls) {
    const last_records t = records_of(d, g);
    int n = 0;
    for (int i = 0; i < g->size; i++) {
        const flr_call *k = cls[i] == AT ? call_at(g->m[i], s) : NULL;
        if (k && k->state == FLR_FAILED && k->t1 > t.top[i == t.top_i]) cls[i] = LATE, n++;
    }
    return n;
}

/* Those at call s that failed in it only after every other member had given up (mark_late): reported and blamed;
 * 1 when there were any. */
static int blame_late(diag *d, const group *g, uint64_t s, int *cls, out_buf *o) {
    char a[192];
    if (!mark_late(d, g, s, cls)) return 0;
    members_text(g, cls, LATE, a, sizeof a);
    put(o, "group %s, call #%" PRIu64 ": %s failed in it only after every other member had given up (stopped or "
        "hung inside the call)\n", g->label, s, a);
    blame_by(d, g, cls, LATE, DIRECT);
    return 1;
}

/* Every member is at call s or past it, some of each (a rank stopped inside a call once its part had gone out:
 * the others, or some, completed it and wait further on, for it). Suspect: those at s that failed in it only after
 * every other member had given up; else the smaller side, a tie those at s (those past it alone went on while the
 * others still wait in it, for their part). */
static void went_past(diag *d, const group *g, uint64_t s, int *cls, int at, int past, out_buf *o) {
    char a[192], b[192];
    if (blame_late(d, g, s, cls, o)) return;
    members_text(g, cls, AT, a, sizeof a);
    members_text(g, cls, PAST, b, sizeof b);
    if (at <= past)
        put(o, "group %s, call #%" PRIu64 ": %s did not complete it and %s did (stopped or hung inside the call once "
            "its part had gone out)\n", g->label, s, a, b);
    else
        put(o, "group %s, call #%" PRIu64 ": %s went past it while %s still wait in it\n", g->label, s, b, a);
    blame(d, g, cls, at <= past ? AT : PAST);
}

/* Blame the members at call s that block in it; those that only issued it (started in the background, not waited
 * for) went ahead of the others and are not held there. */
static void blame_blocked(diag *d, const group *g, uint64_t s, int *cls) {
    for (int i = 0; i < g->size; i++)
        if (cls[i] == AT && call_at(g->m[i], s)->state == FLR_ISSUED) cls[i] = AHEAD;
    blame(d, g, cls, AT);
}

/* A stuck group: its report line and suspects. cls: (size) scratch. */
static void stuck_group(diag *d, const group *g, uint64_t s, int *cls, out_buf *o) {
    const flr_call *ref_call = NULL;
    int n[SILENT + 1] = {0}, kinds = 0, ref_n = 0;
    for (int i = 0; i < g->size; i++) {
        const flr_call *k = g->m[i] ? call_at(g->m[i], s) : NULL;
        if (!g->m[i]) cls[i] = SILENT;
        else if (k) cls[i] = k->state == FLR_COMPLETED ? PAST : AT;
        else cls[i] = g->m[i]->ncalls && g->m[i]->calls[g->m[i]->ncalls - 1].seq > s ? PAST : BEHIND;
        n[cls[i]]++;
    }
    enum { KINDS = 16 }; /* the most common call at s among those at it, of the first KINDS kinds seen */
    const flr_call *kind[KINDS];
    int count[KINDS] = {0}, nk = 0;
    for (int i = 0; i < g->size; i++) {
        if (cls[i] != AT) continue;
        const flr_call *k = call_at(g->m[i], s);
        int j = 0;
        while (j < nk && !same_call(kind[j], k)) j++;
        if (j == nk && nk < KINDS) kind[nk++] = k;
        if (j < nk && ++count[j] > ref_n) ref_n = count[j], ref_call = kind[j];
    }
    for (int i = 0; i < g->size; i++)
        if (cls[i] == AT && !same_call(ref_call, call_at(g->m[i], s))) cls[i] = 0, kinds = 1; /* 0: mismatch */
    char a[192], b[192];
    put(o, "group %s, call #%" PRIu64 ":", g->label, s);
    members_text(g, cls, AT, a, sizeof a);
    put(o, " %s %s in %s (%" PRIu64 " x %s)", a, ref_n == 1 ? "is" : "are",
        op_name(ref_call->op), ref_call->count, fsc_dtype_name((fsc_dtype)ref_call->dt));
    if (kinds) {
        members_text(g, cls, 0, b, sizeof b);
        put(o, "; %s called something else (a mismatch)", b);
        blame(d, g, cls, 0);
    }
    if (n[PAST]) members_text(g, cls, PAST, b, sizeof b), put(o, "; %s completed it", b);
    if (n[BEHIND]) members_text(g, cls, BEHIND, b, sizeof b), put(o, "; %s never called it", b);
    if (n[SILENT]) members_text(g, cls, SILENT, b, sizeof b), put(o, "; %s left no record", b);
    put(o, "\n");
    if (kinds) return;
    if (n[SILENT]) blame_by(d, g, cls, SILENT, DIRECT); /* a rank that left no record stopped or died */
    else if (n[BEHIND] && ref_n < n[BEHIND]) blame_blocked(d, g, s, cls);
    else if (n[BEHIND]) blame(d, g, cls, BEHIND);
    else if (n[PAST]) went_past(d, g, s, cls, n[AT], n[PAST], o);
    else if (!blame_late(d, g, s, cls, o)) timed_out_waiting(d, g, s, cls, o);
}

/* The lowest call number some member did not complete, 0 if none. */
static uint64_t first_pending(const group *g) {
    uint64_t s = 0;
    for (int i = 0; i < g->size; i++)
        for (size_t j = 0; g->m[i] && j < g->m[i]->ncalls; j++)
            if (g->m[i]->calls[j].state != FLR_COMPLETED) {
                if (!s || g->m[i]->calls[j].seq < s) s = g->m[i]->calls[j].seq;
                break;
            }
    return s;
}

typedef struct {
    char at[320];       /* where the rank is (singular) */
    int w;
} place;

static int by_place(const void *a, const void *b) {
    const place *x = a, *y = b;
    int c = strcmp(x->at, y->at);
    return c ? c : x->w - y->w;
}

typedef struct {
    int start, w; /* a run of one place in the sorted places: where it starts, its first (lowest) rank */
} run_start;

static int by_first(const void *a, const void *b) { return ((const run_start *)a)->w - ((const run_start *)b)->w; }

/* The ranks not suspected `most` times (-1: every rank), grouped by where they are (in the order of each group's
 * first rank). */
static void others(diag *d, int most, out_buf *o) {
    place *p = calloc((size_t)d->world + 1, sizeof *p);
    int *list = calloc((size_t)d->world + 1, sizeof *list), n = 0;
    if (!p || !list) return free(p), free(list);
    for (int w = 0; w < d->world; w++)
        if (d->suspect[w] != most) p[n].w = w, where(d, w, 0, 0, p[n].at, sizeof p[n].at), n++;
    qsort(p, (size_t)n, sizeof *p, by_place); /* runs of one place, each run by rank */
    int runs = 0;
    for (int i = 0; i < n; i++) /* list: where each run starts, ordered by the run's first rank */
        if (!i || strcmp(p[i - 1].at, p[i].at)) list[runs++] = i;
    run_start *rs = calloc((size_t)runs + 1, sizeof *rs);
    for (int i = 0; rs && i < runs; i++) rs[i] = (run_start){ list[i], p[list[i]].w };
    if (rs) qsort(rs, (size_t)runs, sizeof *rs, by_first);
    for (int i = 0; rs && i < runs; i++) list[i] = rs[i].start;
    free(rs);
    int *ranks = calloc((size_t)n + 1, sizeof *ranks);
    for (int r = 0; ranks && r < runs; r++) {
        int k = 0;
        for (int i = list[r]; i < n && (i == list[r] || !strcmp(p[i].at, p[list[r]].at)); i++) ranks[k++] = p[i].w;
        char names[128], at[320];
        rank_list(ranks, k, names, sizeof names);
        where(d, ranks[0], k > 1, 0, at, sizeof at);
        put(o, "; rank%s %s %s", k == 1 ? "" : "s", names, at);
    }
    free(ranks), free(p), free(list);
}

static void verdict(diag *d, out_buf *o) {
    int most = 0;
    for (int w = 0; w < d->world; w++) most = d->suspect[w] > most ? d->suspect[w] : most;
    if (!most && !d->stuck) {
        put(o, "verdict: no rank diverges: no group has a call that some of its ranks did not complete\n");
        return;
    }
    if (!most) { /* e.g. every member of each stuck group waits in its call */
        put(o, "verdict: no rank stands out in the stuck groups (their calls themselves may hang, or the network "
            "failed)");
        others(d, -1, o);
        put(o, "\n");
        return;
    }
    char at[320];
    put(o, "verdict:");
    for (int w = 0, first = 1; w < d->world; w++) /* the suspects, each with where it is */
        if (d->suspect[w] == most) {
            where(d, w, 0, 1, at, sizeof at);
            put(o, "%s rank %d %s", first ? "" : ";", w, at);
            first = 0;
        }
    others(d, most, o);
    put(o, "\n");
}

void flr_diagnose(flr_record *const *recs, int world, const char *notes, char *report, size_t cap) {
    if (!cap) return;
    report[0] = 0;
    out_buf o = {report, cap, 0};
    if (notes) put(&o, "%s", notes);
    diag d = {.recs = recs, .world = world};
    d.suspect = calloc((size_t)world + 1, sizeof *d.suspect);
    d.silent = calloc((size_t)world + 1, sizeof *d.silent);
    int *cls = calloc((size_t)world + 1, sizeof *cls);
    for (int w = 0; d.silent && w < world; w++) d.silent[w + 1] = d.silent[w] + !recs[w];
    if (!d.suspect || !d.silent || !cls || build_groups(&d, &o) != 0) {
        put(&o, "out of memory for the diagnosis\n");
    } else {
        int nrec = 0;
        for (int w = 0; w < world; w++) nrec += recs[w] != NULL;
        put(&o, "records of %d of %d ranks\n", nrec, world);
        for (int i = 0; i < d.ng; i++) {
            uint64_t s = first_pending(&d.g[i]);
            if (s) stuck_group(&d, &d.g[i], s, cls, &o), d.stuck++;
        }
        verdict(&d, &o);
    }
    for (int i = 0; i < d.ng; i++) free(d.g[i].m), free(d.g[i].wr);
    free(d.g), free(d.suspect), free(d.silent), free(cls);
}
