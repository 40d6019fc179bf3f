/* "Did you mean": the programs' one way to name the option a misspelt one was meant to be. A candidate is
 * close when the typed name is a prefix of it, or its edit distance (insertions, deletions, substitutions)
 * from the typed name is at most 2 and at most half the typed name (so "--x" suggests nothing). The
 * suggestion is the one closest candidate; a tie suggests nothing (a guess between two would mislead).
 * Header-only for the examples (the trainer, the sampler); not the library's. */
#ifndef FSC_EXAMPLES_SUGGEST_H
#define FSC_EXAMPLES_SUGGEST_H
#include <string.h>

typedef struct {
    const char *best; /* the closest candidate so far; NULL: none close */
    int dist;         /* its distance (0 for a prefix match) */
    int ties;         /* other candidates as close */
} suggest;

/* The edit distance of typed[0..len) and cand, or 3 (too far) when either is longer than 64 bytes. */
static int suggest_distance(const char *typed, size_t len, const char *cand) {
    size_t m = strlen(cand);
    if (len > 64 || m > 64) return 3;
    int row[65];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= len; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (typed[i - 1] != cand[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up, row[j] = best;
        }
    }
    return row[m];
}

/* Weighs one candidate for typed[0..len). */
static void suggest_try(suggest *s, const char *typed, size_t len, const char *cand) {
    int d = len > 0 && strncmp(cand, typed, len) == 0 ? 0 : suggest_distance(typed, len, cand);
    if (d > 2 || (d > 0 && (size_t)d * 2 > len)) return;
    if (!s->best || d < s->dist) s->best = cand, s->dist = d, s->ties = 0;
    else if (d == s->dist) s->ties++;
}

/* The suggestion, or NULL. */
static const char *suggest_result(const suggest *s) { return s->best && !s->ties ? s->best : NULL; }

#endif
