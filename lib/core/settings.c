/* Settings every rank must share (settings.h). Each setting is hashed (the first 8 bytes of SHA-256 over its
 * name, a zero byte and its value). One all-gather of a 32-byte summary per rank (the count and a digest of
 * the hashes) decides; only when the summaries differ does an all-gather of every rank's hashes find the first
 * setting that differs, the first rank that differs there from rank 0 and how many do, and two broadcasts
 * bring rank 0's and that rank's text, so that every rank builds the same message from the same bytes.
 * Local failures (memory) are agreed on before each collective that depends on them, so no rank waits alone.
 * Not here: what a program or the engine puts in the list (lib/parallel/engine_settings.c, the trainer). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/sha256.h"
#include "fsc/settings.h"

enum { NAME_CAP = 64, SHOWN = 300, SUMMARY = 32 };
/* A setting as it travels for a message: a byte "present", the name, then the value (cut at SHOWN bytes). */
enum { TEXT = 1 + NAME_CAP + SHOWN + 4 };

typedef struct {
    char name[NAME_CAP];
    char *value;
    uint8_t hash[8];
} setting;

struct fsc_settings {
    setting *v;   /* (cap) */
    int n, cap;
    fsc_status failed; /* the first add that failed (FSC_OK: none), and its message */
    char why[256];
};

fsc_status fsc_settings_create(fsc_settings **out) {
    FSC_CHECK_ARG(out);
    *out = calloc(1, sizeof **out);
    return *out ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "settings: out of memory");
}

void fsc_settings_free(fsc_settings *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->v[i].value);
    free(s->v);
    free(s);
}

int fsc_settings_count(const fsc_settings *s) { return s ? s->n : 0; }

/* Keep the first failure of an add (returned by agree on every rank) and return it. */
static fsc_status keep_failure(fsc_settings *s, fsc_status st, const char *msg) {
    if (s->failed == FSC_OK) {
        s->failed = st;
        snprintf(s->why, sizeof s->why, "%s", msg);
    }
    return fsc_error(st, "%s", msg);
}

fsc_status fsc_settings_add(fsc_settings *s, const char *name, const char *fmt, ...) {
    FSC_CHECK_ARG_AS(s, "settings");
    if (s->failed != FSC_OK) return fsc_error(s->failed, "%s", s->why);
    char msg[160];
    const size_t nl = name ? strlen(name) : 0;
    if (nl == 0 || nl >= NAME_CAP || !fmt) {
        snprintf(msg, sizeof msg, "setting \"%.80s\": %s", name ? name : "(null)",
                 !name ? "the name is NULL" : !fmt ? "the value's format fmt is NULL" : "a name has 1 to 63 bytes");
        return keep_failure(s, FSC_ERR_INVALID, msg);
    }
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    char line[256]; /* formatted once where it fits (a model's tensors: a setting each, on every rank) */
    const int len = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char *value = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (value && (size_t)len < sizeof line) memcpy(value, line, (size_t)len + 1);
    else if (value) vsnprintf(value, (size_t)len + 1, fmt, again);
    va_end(again);
    if (value && s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 32;
        setting *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (v) s->v = v, s->cap = cap;
    }
    if (!value || s->n == s->cap) {
        free(value);
        snprintf(msg, sizeof msg, "setting %s: %s", name, len < 0 ? "its value cannot be formatted" : "out of memory");
        return keep_failure(s, len < 0 ? FSC_ERR_INVALID : FSC_ERR_NOMEM, msg);
    }
    setting *t = &s->v[s->n++];
    memcpy(t->name, name, nl + 1);
    t->value = value;
    uint8_t h[FSC_SHA256_BYTES];
    fsc_sha256_ctx ctx;
    fsc_sha256_init(&ctx);
    fsc_sha256_update(&ctx, name, nl + 1);
    fsc_sha256_update(&ctx, value, (size_t)len);
    fsc_sha256_final(&ctx, h);
    memcpy(t->hash, h, sizeof t->hash);
    return FSC_OK;
}

/* ---- the exchange ---- */

/* host[rank * bytes ..] to every rank: host holds size x bytes, this rank's block filled (staged through dev). */
static fsc_status gather(fsc_comm *c, fsc_device *dev, uint8_t *host, size_t bytes) {
    const size_t N = (size_t)fsc_comm_size(c), mine = (size_t)fsc_comm_rank(c) * bytes;
    uint8_t *d = NULL;
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_COMM, N * bytes, (void **)&d));
    fsc_status s = fsc_device_upload(dev, d + mine, host + mine, bytes);
    if (s == FSC_OK) s = fsc_comm_all_gather(c, d + mine, d, bytes, FSC_U8);
    if (s == FSC_OK) s = fsc_device_download(dev, host, d, N * bytes);
    fsc_device_release(dev, d);
    return s;
}

static fsc_status bcast(fsc_comm *c, fsc_device *dev, uint8_t *host, size_t bytes, int root) {
    uint8_t *d = NULL;
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_COMM, bytes, (void **)&d));
    fsc_status s = fsc_comm_rank(c) == root ? fsc_device_upload(dev, d, host, bytes) : FSC_OK;
    if (s == FSC_OK) s = fsc_comm_broadcast(c, d, bytes, FSC_U8, root);
    if (s == FSC_OK) s = fsc_device_download(dev, host, d, bytes);
    fsc_device_release(dev, d);
    return s;
}

/* The count (8 bytes, little-endian) and the first 24 bytes of SHA-256 over every setting's hash. */
static void summarize(const fsc_settings *s, uint8_t out[SUMMARY]) {
    for (int b = 0; b < 8; b++) out[b] = (uint8_t)((uint64_t)s->n >> (8 * b));
    fsc_sha256_ctx ctx;
    fsc_sha256_init(&ctx);
    for (int i = 0; i < s->n; i++) fsc_sha256_update(&ctx, s->v[i].hash, sizeof s->v[i].hash);
    uint8_t h[FSC_SHA256_BYTES];
    fsc_sha256_final(&ctx, h);
    memcpy(out + 8, h, SUMMARY - 8);
}

static uint64_t count_of(const uint8_t *summary) {
    uint64_t n = 0;
    for (int b = 0; b < 8; b++) n |= (uint64_t)summary[b] << (8 * b);
    return n;
}

/* Setting i as it travels (TEXT bytes), or absent (a zero byte) when this rank has fewer. */
static void encode(const fsc_settings *s, int i, uint8_t *out) {
    memset(out, 0, TEXT);
    if (i >= s->n) return;
    out[0] = 1;
    memcpy(out + 1, s->v[i].name, NAME_CAP);
    const char *v = s->v[i].value;
    const size_t len = strlen(v);
    snprintf((char *)out + 1 + NAME_CAP, SHOWN + 4, "%.*s%s", SHOWN, v, len > SHOWN ? "..." : "");
}

/* "value" (or "name = value" when with_name), "\"\"" for an empty value, "(none)" when absent. */
static const char *shown(const uint8_t *t, int with_name, char *buf, size_t cap) {
    if (!t[0]) return "(none)";
    const char *name = (const char *)t + 1, *v = (const char *)t + 1 + NAME_CAP;
    snprintf(buf, cap, "%.*s%s%.*s", NAME_CAP - 1, with_name ? name : "", with_name ? " = " : "", SHOWN + 3,
             v[0] ? v : "\"\"");
    return buf;
}

/* The verdict every rank reaches from the same gathered hashes (N ranks, M settings each at most, count[r]):
 * the first setting i where some rank differs from rank 0, the first such rank, how many. */
static void first_difference(const uint8_t *hashes, const uint64_t *count, int N, size_t M, int *at, int *who,
                             int *ndiff) {
    *at = -1, *who = -1, *ndiff = 0;
    for (size_t i = 0; i < M && *at < 0; i++)
        for (int r = 1; r < N; r++) {
            const int has0 = i < count[0], has = i < count[r];
            const int same = has0 == has && (!has || memcmp(hashes + i * 8, hashes + ((size_t)r * M + i) * 8, 8) == 0);
            if (same) continue;
            if (*at < 0) *at = (int)i, *who = r;
            (*ndiff)++;
        }
}

/* The ranks' settings differ (their summaries do): find where, fetch the two texts, say it. */
static fsc_status explain(const fsc_settings *s, fsc_comm *c, fsc_device *dev, const uint8_t *summaries) {
    const int N = fsc_comm_size(c), me = fsc_comm_rank(c);
    uint64_t *count = malloc((size_t)N * sizeof *count);
    size_t M = 0;
    for (int r = 0; count && r < N; r++) {
        count[r] = count_of(summaries + (size_t)r * SUMMARY);
        if (count[r] > M) M = (size_t)count[r];
    }
    /* every rank's counts are the same bytes, so M is the same everywhere; a rank short of memory says so first */
    uint8_t *hashes = count && M <= SIZE_MAX / 8 / (size_t)N ? calloc((size_t)N * M + 1, 8) : NULL;
    fsc_status st = fsc_comm_agree(c, dev, hashes ? FSC_OK : fsc_error(FSC_ERR_NOMEM, "settings: out of memory "
                                                                       "comparing %zu settings", M));
    if (st == FSC_OK) {
        for (int i = 0; i < s->n; i++) memcpy(hashes + ((size_t)me * M + (size_t)i) * 8, s->v[i].hash, 8);
        st = gather(c, dev, hashes, M * 8);
    }
    int at = -1, who = -1, ndiff = 0;
    if (st == FSC_OK) first_difference(hashes, count, N, M, &at, &who, &ndiff);
    free(hashes);
    free(count);
    FSC_TRY(st);
    if (at < 0) /* summaries differ, hashes do not: not for distinct lists (a 24-byte digest of equal hashes) */
        return fsc_error(FSC_ERR_INTERNAL, "ranks disagree on their settings, but no setting differs");
    uint8_t t0[TEXT], tw[TEXT];
    encode(s, at, t0);
    encode(s, at, tw);
    FSC_TRY(bcast(c, dev, t0, TEXT, 0));
    FSC_TRY(bcast(c, dev, tw, TEXT, who));
    char a[TEXT + NAME_CAP + 8], b[TEXT + NAME_CAP + 8], more[64] = "";
    if (ndiff > 1) snprintf(more, sizeof more, " (%d of %d ranks differ from rank 0)", ndiff, N);
    if (t0[0] && tw[0] && strcmp((const char *)t0 + 1, (const char *)tw + 1) == 0)
        return fsc_error(FSC_ERR_INVALID, "ranks disagree on %s: rank 0 has %s, rank %d has %s%s", (const char *)t0 + 1,
                         shown(t0, 0, a, sizeof a), who, shown(tw, 0, b, sizeof b), more);
    return fsc_error(FSC_ERR_INVALID, "ranks disagree on setting %d: rank 0 has %s, rank %d has %s%s", at + 1,
                     shown(t0, 1, a, sizeof a), who, shown(tw, 1, b, sizeof b), more);
}

fsc_status fsc_settings_agree(const fsc_settings *s, fsc_comm *c, fsc_device *dev) {
    FSC_CHECK_ARG_AS(c, "comm");
    FSC_CHECK_ARG(dev);
    fsc_status mine = !s ? fsc_error(FSC_ERR_INVALID, "fsc_settings_agree: settings is NULL")
                         : s->failed != FSC_OK ? fsc_error(s->failed, "%s", s->why) : FSC_OK;
    const int N = fsc_comm_size(c);
    uint8_t *summaries = mine == FSC_OK ? calloc((size_t)N, SUMMARY) : NULL;
    if (mine == FSC_OK && !summaries) mine = fsc_error(FSC_ERR_NOMEM, "settings: out of memory");
    fsc_status st = fsc_comm_agree(c, dev, mine);
    if (st == FSC_OK && N > 1) {
        summarize(s, summaries + (size_t)fsc_comm_rank(c) * SUMMARY);
        st = gather(c, dev, summaries, SUMMARY);
        int same = 1;
        for (int r = 1; st == FSC_OK && r < N && same; r++)
            same = memcmp(summaries, summaries + (size_t)r * SUMMARY, SUMMARY) == 0;
        if (st == FSC_OK && !same) st = explain(s, c, dev, summaries);
    }
    free(summaries);
    return st;
}
