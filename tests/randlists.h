/* Random valid pipeline action lists (test_pipe_random.c, test_tp_random.c): the ranks run together, each step one
 * action that some rank could run next (the next F, B or W of one of its chunks in ascending micro-batch order, B
 * after its F, W after its B, an F or B only when what it receives is at the head of its stream: first in, first
 * out per link, direction and, in a V, chunk, with buffered sends), picked at random with the weights of its kind.
 * The lists are deadlock-free by construction. Define MAXP (ranks), MAXV (chunks per rank) and MAXM (micro-batches)
 * before including this. */
#ifndef FSC_RANDLISTS_H
#define FSC_RANDLISTS_H
#include <string.h>
#include "fsc/pipe_schedule.h"
#include "testrng.h"

/* A stream of messages into a rank (stage and micro-batch of each), first in, first out. */
typedef struct {
    int stage[MAXV * MAXM], micro[MAXV * MAXM]; /* a stream carries one message per stage and micro-batch at most */
    int head, tail;
} queue;

typedef struct {
    fsc_pipe_placement pl;
    int p, v, m;
    int withw[MAXP];    /* rank r's list has W actions */
    int weight[3];      /* the generator's weight of a candidate F, B, W */
} list_spec;

/* The stream a message to stage g travels on (fwd: an output, else an input gradient): per receiving rank,
 * direction, sending rank and, in a V, the receiving chunk (chunk 1's messages have links of their own). */
static inline queue *stream_of(queue *q, const list_spec *sp, int g, int fwd) {
    const int p = sp->p, to = fsc_pipe_stage_rank(sp->pl, p, g);
    const int from = fsc_pipe_stage_rank(sp->pl, p, fwd ? g - 1 : g + 1);
    const int cls = sp->pl == FSC_PIPE_V ? g / p : 0;
    return &q[((to * 2 + !fwd) * p + from) * 2 + cls];
}

static inline int at_head(queue *q, const list_spec *sp, int g, int fwd, int k) {
    const queue *s = stream_of(q, sp, g, fwd);
    return s->head < s->tail && s->stage[s->head] == g && s->micro[s->head] == k;
}

static inline void send_to(queue *q, const list_spec *sp, int g, int fwd, int k) {
    queue *s = stream_of(q, sp, g, fwd);
    s->stage[s->tail] = g, s->micro[s->tail] = k;
    s->tail++;
}

typedef struct {
    int r, c, kind;
} cand_t;

/* Random lists (above) into a[r] (lens[r] actions); 0, or -1 if no rank could move (a bug of the generator). */
static inline int generate(const list_spec *sp, rng *R, fsc_pipe_action a[MAXP][3 * MAXV * MAXM], int *lens) {
    const int p = sp->p, v = sp->v, m = sp->m, S = p * v;
    queue q[MAXP * 2 * MAXP * 2];
    int nx[MAXP][MAXV][3]; /* next micro-batch of each rank, chunk and kind */
    int left = 0;
    memset(q, 0, sizeof q);
    memset(nx, 0, sizeof nx);
    for (int r = 0; r < p; r++) {
        lens[r] = 0;
        left += (2 + sp->withw[r]) * v * m;
    }
    for (; left > 0; left--) {
        cand_t cand[MAXP * MAXV * 3];
        int nc = 0, total = 0;
        for (int r = 0; r < p; r++)
            for (int c = 0; c < v; c++) {
                const int g = fsc_pipe_stage_at(sp->pl, p, r, c), *n = nx[r][c];
                if (n[0] < m && (g == 0 || at_head(q, sp, g, 1, n[0]))) cand[nc++] = (cand_t){ r, c, 0 };
                if (n[1] < n[0] && (g == S - 1 || at_head(q, sp, g, 0, n[1]))) cand[nc++] = (cand_t){ r, c, 1 };
                if (sp->withw[r] && n[2] < n[1]) cand[nc++] = (cand_t){ r, c, 2 };
            }
        if (nc == 0) return -1;
        for (int i = 0; i < nc; i++) total += sp->weight[cand[i].kind];
        int pick = rng_int(R, total), i = 0;
        while (pick >= sp->weight[cand[i].kind]) pick -= sp->weight[cand[i].kind], i++;
        const int r = cand[i].r, c = cand[i].c, kind = cand[i].kind, k = nx[r][c][kind]++;
        const int g = fsc_pipe_stage_at(sp->pl, p, r, c);
        a[r][lens[r]++] = (fsc_pipe_action){ (fsc_pipe_action_kind)kind, k, c };
        if (kind == 0 && g > 0) stream_of(q, sp, g, 1)->head++;
        if (kind == 0 && g < S - 1) send_to(q, sp, g + 1, 1, k);
        if (kind == 1 && g < S - 1) stream_of(q, sp, g, 0)->head++;
        if (kind == 1 && g > 0) send_to(q, sp, g - 1, 0, k);
    }
    return 0;
}

#endif
