/* Mixture-of-experts routing on the host (moe.h): softmax of the gate logits, top-1/top-2 choices,
 * capacity slots with first choices before second choices (FairScale's top2gating), combine weights,
 * the load-balancing loss, and the gradient of all of it with respect to the gate logits.
 * Everything here is plain host arithmetic in double (stored as float), deterministic and independent of
 * where the tokens' experts live. Not here: moving tokens and running experts (moe.c). */
#include <float.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "moe_impl.h"

/* The factor as it was given: the shortest decimal that reads back as cf (1.1, not 1.10000002). */
static double given(float cf) {
    char buf[32];
    for (int p = 1; p <= 9 && isfinite(cf); p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)cf);
        if (strtof(buf, NULL) == cf) return strtod(buf, NULL);
    }
    return (double)cf;
}

/* ceil(cf k S / E) of the factor as given: 1.1 x 40 / 4 is 11 slots, where 1.1's float (1.10000002) gave 11.0000002
 * and a ceiling of 12; the double product of the decimal is within a few of its ulps of a whole number only when
 * it is one. */
int moe_capacity(int Sg, int E, int k, float cf) {
    const double x = given(cf) * k * (double)Sg / (double)E, r = nearbyint(x);
    double c = fabs(x - r) <= 8 * DBL_EPSILON * fabs(x) ? r : ceil(x);
    if (c > Sg) c = Sg; /* an expert gets at most one assignment per token */
    return c < 1 ? 1 : (int)c;
}

void moe_route_free(moe_route *r) {
    free(r->prob), free(r->expert), free(r->slot), free(r->gate), free(r->idx), free(r->slot_gate), free(r->frac);
    memset(r, 0, sizeof *r);
}

/* argmax of p (E) skipping `skip` (-1: none); the lowest index wins ties */
static int argmax(const float *p, int E, int skip) {
    int best = -1;
    for (int e = 0; e < E; e++)
        if (e != skip && (best < 0 || p[e] > p[best])) best = e;
    return best;
}

fsc_status moe_route_compute(moe_route *r, const float *logits, int S, int E, int k, int groups, float cf) {
    memset(r, 0, sizeof *r);
    int Sg = S / groups, cap = moe_capacity(Sg, E, k, cf);
    size_t slots = (size_t)E * groups * cap, sk = (size_t)S * k;
    r->S = S, r->E = E, r->k = k, r->groups = groups, r->cap = cap;
    r->prob = malloc((size_t)S * E * sizeof(float));
    r->expert = malloc(sk * sizeof(int32_t)), r->slot = malloc(sk * sizeof(int32_t)), r->gate = malloc(sk * sizeof(float));
    r->idx = malloc(slots * sizeof(int32_t)), r->slot_gate = calloc(slots, sizeof(float));
    r->frac = calloc((size_t)groups * E, sizeof(double));
    int *count = calloc((size_t)E, sizeof(int));
    if (!r->prob || !r->expert || !r->slot || !r->gate || !r->idx || !r->slot_gate || !r->frac || !count) {
        free(count);
        moe_route_free(r);
        return fsc_error(FSC_ERR_NOMEM, "moe: out of host memory routing %d tokens", S);
    }
    for (size_t s = 0; s < slots; s++) r->idx[s] = S;
    for (int n = 0; n < S; n++) { /* softmax in double */
        const float *z = logits + (size_t)n * E;
        double mx = z[0], sum = 0;
        for (int e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
        for (int e = 0; e < E; e++) sum += exp((double)z[e] - mx);
        for (int e = 0; e < E; e++) r->prob[(size_t)n * E + e] = (float)(exp((double)z[e] - mx) / sum);
    }
    double aux = 0;
    for (int g = 0; g < groups; g++) {
        int n0 = g * Sg;
        memset(count, 0, (size_t)E * sizeof(int));
        for (int j = 0; j < k; j++) /* every first choice takes its slot before any second choice */
            for (int n = n0; n < n0 + Sg; n++) {
                const float *p = r->prob + (size_t)n * E;
                int e = argmax(p, E, j == 0 ? -1 : r->expert[(size_t)n * k]);
                int loc = count[e]++;
                r->expert[(size_t)n * k + j] = e;
                r->slot[(size_t)n * k + j] = loc < cap ? (e * groups + g) * cap + loc : -1;
                if (loc >= cap) r->dropped++;
                if (j == 0) r->frac[(size_t)g * E + e] += 1.0 / Sg;
            }
        double ga = 0;
        for (int e = 0; e < E; e++) {
            double P = 0;
            for (int n = n0; n < n0 + Sg; n++) P += r->prob[(size_t)n * E + e];
            ga += r->frac[(size_t)g * E + e] * (P / Sg);
        }
        aux += E * ga;
    }
    r->aux = aux / groups;
    for (int n = 0; n < S; n++) { /* combine weights */
        double pk[2] = { 0, 0 }, D = 0;
        for (int j = 0; j < k; j++) {
            size_t c = (size_t)n * k + j;
            pk[j] = r->slot[c] >= 0 ? r->prob[(size_t)n * E + r->expert[c]] : 0.0;
            D += pk[j];
        }
        if (D < FLT_EPSILON) D = FLT_EPSILON;
        for (int j = 0; j < k; j++) {
            size_t c = (size_t)n * k + j;
            r->gate[c] = (float)(k == 1 ? pk[j] : pk[j] / D);
            if (r->slot[c] >= 0) {
                r->idx[r->slot[c]] = n;
                r->slot_gate[r->slot[c]] = r->gate[c];
            }
        }
    }
    free(count);
    return FSC_OK;
}

fsc_status moe_route_backward(const moe_route *r, float *dlogits, const float *dslot, float daux) {
    int E = r->E, k = r->k, Sg = r->S / r->groups;
    double *dp = malloc((size_t)E * sizeof(double));
    if (!dp) return fsc_error(FSC_ERR_NOMEM, "moe: out of host memory for the gate gradient");
    for (int n = 0; n < r->S; n++) {
        int g = n / Sg;
        const float *p = r->prob + (size_t)n * E;
        for (int e = 0; e < E; e++) dp[e] = (double)daux / r->groups * E * r->frac[(size_t)g * E + e] / Sg;
        if (k == 1) {
            if (r->slot[n] >= 0) dp[r->expert[n]] += dslot[r->slot[n]];
        } else { /* g_j = p_j / D over the kept choices: dL/dp_j = (dg_j - sum_i g_i dg_i) / D; with D clamped at
                  * FLT_EPSILON (the forward's) a constant: dg_j / FLT_EPSILON */
            double D = 0, sgd = 0;
            for (int j = 0; j < 2; j++) {
                size_t c = (size_t)n * 2 + j;
                if (r->slot[c] < 0) continue;
                D += p[r->expert[c]];
                sgd += (double)r->gate[c] * dslot[r->slot[c]];
            }
            if (D < FLT_EPSILON) D = FLT_EPSILON, sgd = 0;
            for (int j = 0; j < 2; j++) {
                size_t c = (size_t)n * 2 + j;
                if (r->slot[c] >= 0) dp[r->expert[c]] += ((double)dslot[r->slot[c]] - sgd) / D;
            }
        }
        double dot = 0; /* softmax backward */
        for (int e = 0; e < E; e++) dot += (double)p[e] * dp[e];
        for (int e = 0; e < E; e++) dlogits[(size_t)n * E + e] = (float)((double)p[e] * (dp[e] - dot));
    }
    free(dp);
    return FSC_OK;
}
