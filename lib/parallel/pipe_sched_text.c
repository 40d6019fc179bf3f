/* Pipeline schedules as text (fsc/pipe_schedule.h, docs/pipeline.md "Schedules as text"): the parser a schedule
 * file goes through and the writer of the same text.
 *
 * The text: one line of actions per pipeline rank, in rank order; an action is written as PyTorch's pipelining
 * writes one, its stage, its kind and its micro-batch ("0F3": stage 0's forward of micro-batch 3; "6W1"; PyTorch's
 * "I", the input part of a split backward, is read as B, which is that part in a list with W), the
 * actions separated by spaces, tabs or commas. '#' starts a comment to the end of its line; blank lines are
 * skipped. One line "placement loop" or "placement v" may come before the first rank's (default loop). The ranks
 * are the lines, the chunks per rank come from the highest stage (a V: 2), the micro-batches from the highest
 * micro-batch; each action's stage must be one its line's rank holds; the lists are then validated as the engine
 * validates them (fsc_pipe_schedule_validate_placed).
 *
 * Bounds: a number has at most 9 digits; every list grows with what was read, so the memory is a small multiple
 * of the text's length, and the validator's is bounded by the actions read (it checks every rank's count
 * against 2 v m or 3 v m before it allocates). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/pipe_schedule.h"

#define MAX_RANKS (1 << 16) /* as the validator's */

/* One action as read. */
typedef struct {
    int stage, micro;
    fsc_pipe_action_kind kind;
} raw_action;

typedef struct {
    raw_action *a;
    int n, cap, line; /* line: where the rank's actions are */
    int input_at;     /* the first action written I (PyTorch's input part of a split backward), -1 none */
    int has_w;        /* a W among them */
} raw_rank;

static int is_sep(char ch) { return ch == ' ' || ch == '\t' || ch == ',' || ch == '\r'; }

/* A decimal number of 1 to 9 digits at *s (before end); advances *s. -1 when there is none or it is longer. */
static int read_number(const char **s, const char *end) {
    int v = 0, d = 0;
    while (*s < end && **s >= '0' && **s <= '9') {
        if (++d > 9) return -1;
        v = v * 10 + (**s - '0');
        (*s)++;
    }
    return d ? v : -1;
}

static fsc_status push_rank(raw_rank **ranks, int *n, int *cap, int line) {
    if (*n == MAX_RANKS) /* refused at once: the lines after it would only take memory */
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule text, line %d: more than %d lines of actions (ranks)",
                         line, MAX_RANKS);
    if (*n == *cap) {
        const int c = *cap ? 2 * *cap : 8;
        raw_rank *r = realloc(*ranks, (size_t)c * sizeof *r);
        if (!r) return fsc_error(FSC_ERR_NOMEM, "pipeline schedule text: out of memory");
        *ranks = r, *cap = c;
    }
    (*ranks)[(*n)++] = (raw_rank){ NULL, 0, 0, line, -1, 0 };
    return FSC_OK;
}

static fsc_status push_action(raw_rank *r, raw_action a) {
    if (r->n == r->cap) {
        const int c = r->cap ? 2 * r->cap : 4;
        raw_action *x = realloc(r->a, (size_t)c * sizeof *x);
        if (!x) return fsc_error(FSC_ERR_NOMEM, "pipeline schedule text: out of memory");
        r->a = x, r->cap = c;
    }
    r->a[r->n++] = a;
    return FSC_OK;
}

/* The tokens of one line (without its comment) [s, end): the placement line, or a rank's actions. */
static fsc_status read_line(const char *s, const char *end, int line, raw_rank **ranks, int *nr, int *cap,
                            fsc_pipe_placement *pl, int *seen_placement) {
    while (s < end && is_sep(*s)) s++;
    if (s == end) return FSC_OK;
    if (end - s >= 9 && !memcmp(s, "placement", 9) && (end - s == 9 || is_sep(s[9]))) {
        if (*nr > 0 || *seen_placement)
            return fsc_error(FSC_ERR_INVALID, "pipeline schedule text, line %d: 'placement' comes once, before the "
                             "first rank's actions", line);
        *seen_placement = 1;
        s += 9;
        while (s < end && is_sep(*s)) s++;
        const char *w = s;
        while (s < end && !is_sep(*s)) s++;
        const size_t n = (size_t)(s - w);
        while (s < end && is_sep(*s)) s++;
        if (s != end || !((n == 4 && !memcmp(w, "loop", 4)) || (n == 1 && (*w == 'v' || *w == 'V'))))
            return fsc_error(FSC_ERR_INVALID, "pipeline schedule text, line %d: 'placement' takes loop or v", line);
        *pl = n == 4 ? FSC_PIPE_LOOP : FSC_PIPE_V;
        return FSC_OK;
    }
    FSC_TRY(push_rank(ranks, nr, cap, line));
    raw_rank *r = &(*ranks)[*nr - 1];
    while (s < end) {
        const char *t = s;
        raw_action a;
        a.stage = read_number(&s, end);
        const char k = s < end ? *s++ : 0;
        a.kind = k == 'F' ? FSC_ACT_FORWARD : k == 'B' || k == 'I' ? FSC_ACT_BACKWARD : FSC_ACT_WEIGHT;
        a.micro = read_number(&s, end);
        if (a.stage < 0 || (k != 'F' && k != 'B' && k != 'I' && k != 'W') || a.micro < 0 || (s < end && !is_sep(*s))) {
            const char *e = t;
            while (e < end && !is_sep(*e)) e++;
            return fsc_error(FSC_ERR_INVALID, "pipeline schedule text, line %d: '%.*s' is not an action (stage, F, "
                             "B, I or W, micro-batch: 0F3, 6W1; numbers of at most 9 digits)", line,
                             (int)(e - t > 40 ? 40 : e - t), t);
        }
        if (k == 'I' && r->input_at < 0) r->input_at = r->n;
        r->has_w |= k == 'W';
        FSC_TRY(push_action(r, a));
        while (s < end && is_sep(*s)) s++;
    }
    return FSC_OK;
}

/* The lists of the ranks read: every action's stage on its rank, chunks and micro-batches counted. */
static fsc_status to_lists(raw_rank *ranks, int p, fsc_pipe_placement pl, fsc_pipe_schedule_lists *out) {
    if (p < 1 || p > MAX_RANKS) /* the caller refused none and push_rank more than MAX_RANKS */
        return fsc_error(FSC_ERR_INTERNAL, "pipeline schedule text: %d ranks", p);
    int top = 0, m = 0;
    for (int r = 0; r < p; r++)
        for (int i = 0; i < ranks[r].n; i++) {
            if (ranks[r].a[i].stage > top) top = ranks[r].a[i].stage;
            if (ranks[r].a[i].micro >= m) m = ranks[r].a[i].micro + 1;
        }
    out->placement = pl, out->p = p, out->v = pl == FSC_PIPE_V ? 2 : top / p + 1, out->m = m;
    out->lists = calloc((size_t)p, sizeof *out->lists);
    out->lens = calloc((size_t)p, sizeof *out->lens);
    if (!out->lists || !out->lens) return fsc_error(FSC_ERR_NOMEM, "pipeline schedule text: out of memory");
    for (int r = 0; r < p; r++) {
        const raw_rank *rr = &ranks[r];
        if (rr->input_at >= 0 && !rr->has_w)
            return fsc_error(FSC_ERR_INVALID, "pipeline schedule text, line %d (rank %d): action %d, %dI%d is the input "
                             "part of a split backward (PyTorch's I), but the rank has no W actions: write B for the "
                             "whole backward, or add the Ws", rr->line, r, rr->input_at, rr->a[rr->input_at].stage,
                             rr->a[rr->input_at].micro);
        out->lists[r] = malloc((size_t)(rr->n ? rr->n : 1) * sizeof **out->lists);
        if (!out->lists[r]) return fsc_error(FSC_ERR_NOMEM, "pipeline schedule text: out of memory");
        for (int i = 0; i < rr->n; i++) {
            const raw_action *a = &rr->a[i];
            if (fsc_pipe_stage_rank(pl, p, a->stage) != r)
                return fsc_error(FSC_ERR_INVALID, "pipeline schedule text, line %d (rank %d): action %d, %d%c%d: "
                                 "stage %d is not this rank's (%s placement, %d ranks: rank %d holds it)", rr->line, r,
                                 i, a->stage, "FBW"[a->kind], a->micro, a->stage, pl == FSC_PIPE_V ? "a V" : "a loop",
                                 p, fsc_pipe_stage_rank(pl, p, a->stage));
            out->lists[r][i] = (fsc_pipe_action){ a->kind, a->micro, a->stage / p };
        }
        out->lens[r] = rr->n;
    }
    return FSC_OK;
}

fsc_status fsc_pipe_schedule_parse(const char *text, size_t len, fsc_pipe_schedule_lists *out) {
    return fsc_pipe_schedule_parse_ranks(text, len, 0, out);
}

fsc_status fsc_pipe_schedule_parse_ranks(const char *text, size_t len, int want, fsc_pipe_schedule_lists *out) {
    FSC_CHECK_ARG(out);
    memset(out, 0, sizeof *out);
    FSC_CHECK_ARG(text);
    if (len > (size_t)INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule text: %zu bytes (at most %d)", len, INT_MAX);
    raw_rank *ranks = NULL;
    int nr = 0, cap = 0, line = 0, seen_placement = 0;
    fsc_pipe_placement pl = FSC_PIPE_LOOP;
    fsc_status st = FSC_OK;
    const int bom = len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3); /* a UTF-8 byte-order mark, as some editors write */
    for (const char *s = text + (bom ? 3 : 0), *end = text + len; s < end && st == FSC_OK;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s)), *eol = nl ? nl : end;
        const char *hash = memchr(s, '#', (size_t)(eol - s));
        line++;
        if (memchr(s, '\0', (size_t)(eol - s)))
            st = fsc_error(FSC_ERR_INVALID, "pipeline schedule text, line %d: a NUL byte (not text)", line);
        else
            st = read_line(s, hash ? hash : eol, line, &ranks, &nr, &cap, &pl, &seen_placement);
        s = nl ? nl + 1 : end;
    }
    if (st == FSC_OK && nr == 0)
        st = fsc_error(FSC_ERR_INVALID, "pipeline schedule text: no rank's actions (one line of actions per pipeline "
                       "rank, such as '0F0 0F1 0B0 0B1')");
    if (st == FSC_OK && want > 0 && nr != want)
        st = fsc_error(FSC_ERR_INVALID, "pipeline schedule text: %d line%s of actions for %d pipeline ranks (one line "
                       "per rank: is a line cut in two, or are two joined?)", nr, nr == 1 ? "" : "s", want);
    if (st == FSC_OK && pl == FSC_PIPE_V) {
        for (int r = 0; r < nr && st == FSC_OK; r++)
            for (int i = 0; i < ranks[r].n && st == FSC_OK; i++)
                if (ranks[r].a[i].stage >= 2 * nr)
                    st = fsc_error(FSC_ERR_INVALID, "pipeline schedule text, line %d: stage %d, but a V of %d ranks has "
                                   "stages 0 .. %d", ranks[r].line, ranks[r].a[i].stage, nr, 2 * nr - 1);
    }
    if (st == FSC_OK) st = to_lists(ranks, nr, pl, out);
    for (int r = 0; r < nr; r++) free(ranks[r].a);
    free(ranks);
    if (st == FSC_OK)
        st = fsc_pipe_schedule_validate_placed(pl, out->p, out->v, out->m, (const fsc_pipe_action *const *)out->lists,
                                               out->lens);
    if (st != FSC_OK) fsc_pipe_schedule_lists_free(out);
    return st;
}

void fsc_pipe_schedule_lists_free(fsc_pipe_schedule_lists *s) {
    if (!s) return;
    for (int r = 0; s->lists && r < s->p; r++) free(s->lists[r]);
    free(s->lists);
    free(s->lens);
    memset(s, 0, sizeof *s);
}

/* Appends to buf (cap bytes) at *at what printf would write (short: under 64 bytes); *at counts every byte, written
 * or not. */
static void put(char *buf, size_t cap, size_t *at, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    if (buf && *at < cap) memcpy(buf + *at, tmp, (size_t)n < cap - *at ? (size_t)n : cap - *at);
    *at += (size_t)n;
}

fsc_status fsc_pipe_schedule_format(fsc_pipe_placement pl, int p, int v, const fsc_pipe_action *const *lists,
                                    const int *lens, char *buf, size_t cap, size_t *len) {
    FSC_CHECK_ARG(lists);
    FSC_CHECK_ARG(lens);
    FSC_CHECK_ARG(len);
    *len = 0;
    if (!buf && cap) return fsc_error(FSC_ERR_INVALID, "pipeline schedule text: buf is NULL but cap is %zu", cap);
    if (pl != FSC_PIPE_LOOP && pl != FSC_PIPE_V)
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule text: unknown placement %d (loop or v)", (int)pl);
    if (p < 1 || v < 1 || (pl == FSC_PIPE_V && v != 2))
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule text: %d ranks of %d chunks (%s)", p, v,
                         pl == FSC_PIPE_V ? "a V has 2" : "need at least 1 of each");
    size_t at = 0;
    put(buf, cap, &at, "# fsc pipeline schedule: %d rank%s, %d chunk%s per rank\n", p, p == 1 ? "" : "s", v,
        v == 1 ? "" : "s");
    put(buf, cap, &at, "placement %s\n", pl == FSC_PIPE_V ? "v" : "loop");
    for (int r = 0; r < p; r++) {
        if (!lists[r] || lens[r] < 0)
            return fsc_error(FSC_ERR_INVALID, "pipeline schedule text: rank %d has no list", r);
        for (int i = 0; i < lens[r]; i++) {
            const fsc_pipe_action *a = &lists[r][i];
            const int stage = fsc_pipe_stage_at(pl, p, r, a->chunk);
            if (stage < 0 || a->chunk >= v || a->micro < 0 || (unsigned)a->kind > FSC_ACT_WEIGHT)
                return fsc_error(FSC_ERR_INVALID, "pipeline schedule text: rank %d, action %d: kind %d, chunk %d, "
                                 "micro-batch %d (need F, B or W, a chunk below %d, a micro-batch >= 0)", r, i,
                                 (int)a->kind, a->chunk, a->micro, v);
            put(buf, cap, &at, i ? " %d%c%d" : "%d%c%d", stage, "FBW"[a->kind], a->micro);
        }
        put(buf, cap, &at, "\n");
    }
    *len = at;
    if (buf && at >= cap) {
        if (cap) buf[cap - 1] = '\0';
        return fsc_error(FSC_ERR_INVALID, "pipeline schedule text: %zu bytes of text need a buffer of %zu, not %zu",
                         at, at + 1, cap);
    }
    if (buf) buf[at] = '\0';
    return FSC_OK;
}
