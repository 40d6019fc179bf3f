/* The trainer's per-step report (examples/train/report.c): one record per step that rank 0 fills (the step's loss,
 * its learning rate and validation loss when known, time, FLOPs, memory) and turns into the progress line on
 * stdout and, with --log FILE.jsonl, one JSON object per line, flushed as it goes:
 *   {"type":"train","step":3,"loss":5.1,"lr":0.003,"ms":41.2,"tokens_per_s":12427,"mfu":0.012,"eta_s":1.1,
 *    "elapsed_s":0.2,"peak_bytes":{"params":..,"grads":..,..,"total":..},
 *    "host_peak_bytes":{"params":..,..,"total":..}}                             (one per step)
 *   {"type":"val","step":3,"val_loss":5.3}                                      (one per validation)
 * The first line of a log is {"type":"config", "config":{...}} (the options of the run, as --json names them).
 * lr, mfu and eta_s are left out when not known, host_peak_bytes without --offload; a loss or val_loss that is inf
 * or NaN is null. tools/plot reads these lines.
 * Only what is here formats; the training loop and its measurements stay in examples/train/ (loop.c, report.c). */
#ifndef TRAIN_LOG_H
#define TRAIN_LOG_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"

typedef struct {
    int step, steps;    /* the step just taken (1-based), of steps */
    double loss;
    double lr;          /* the learning rate the step used; NAN: not known */
    double val_loss;    /* the validation loss computed after this step (inf or NaN when it diverged) */
    int validated;      /* the run validated after this step (val_loss is its loss) */
    double ms;          /* the step's wall time */
    double tokens;      /* tokens of the step (global batch x context) */
    double flops;       /* FLOPs of the step over all ranks (fsc_model_flops); 0: unknown */
    double peak_flops;  /* FLOP/s of all ranks together (world x --peak-tflops or the measured rate); 0: unknown */
    double eta_s;       /* time left at the mean step time so far; < 0: not known yet */
    double elapsed_s;   /* since the first step began */
    const size_t *peak; /* (FSC_TAG_COUNT + 1) rank 0's peak device bytes by tag, then the total */
    const size_t *host_peak; /* (FSC_TAG_COUNT + 1) the same of rank 0's host ledger (offload); NULL: none */
    int skipped;        /* the step made no update (inf/NaN loss or gradients) */
    double loss_scale;  /* fp16's dynamic loss scale the step used; 0: no scaler (not logged) */
    const char *extra;  /* appended to the progress line (MoE statistics, a skipped step); may be NULL */
} step_record;

static inline double record_mfu(const step_record *r) {
    return r->flops > 0 && r->peak_flops > 0 && r->ms > 0 ? r->flops / (r->ms * 1e-3) / r->peak_flops : NAN;
}

/* "1h02m", "3m07s", "12.4s" */
static inline void format_duration(char *buf, size_t cap, double s) {
    if (!(s >= 0) || !isfinite(s)) snprintf(buf, cap, "?");
    else if (s < 60) snprintf(buf, cap, "%.1fs", s);
    else if (s < 3600) snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* The progress line: step, loss, validation loss (when computed), lr, ms/step, tokens/s, MFU, peak memory, ETA. */
static inline void print_progress(FILE *f, const step_record *r) {
    char val[32] = "", lr[32] = "", mfu[32] = "", eta[32] = "";
    if (r->validated) snprintf(val, sizeof val, " | val %.6f", r->val_loss); /* "val -nan": it diverged */
    if (isfinite(r->lr)) snprintf(lr, sizeof lr, " | lr %.3e", r->lr);
    double m = record_mfu(r);
    if (isfinite(m)) snprintf(mfu, sizeof mfu, " | MFU %5.2f%%", 100.0 * m);
    if (r->eta_s >= 0) {
        char d[16];
        format_duration(d, sizeof d, r->eta_s);
        snprintf(eta, sizeof eta, " | ETA %s", d);
    }
    fprintf(f, "step %4d/%d | loss %.6f%s%s | %8.1f ms | %9.0f tok/s%s | peak %.1f MiB%s%s\n", r->step, r->steps,
            r->loss, val, lr, r->ms, r->ms > 0 ? r->tokens / (r->ms * 1e-3) : 0.0, mfu,
            r->peak ? (double)r->peak[FSC_TAG_COUNT] / 1048576.0 : 0.0, eta, r->extra ? r->extra : "");
    fflush(f);
}

/* A number that reads back as the same double (%.17g); JSON has no inf or NaN: those become null. */
static inline void add_exact(cJSON *o, const char *k, double x) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.17g", x);
    cJSON_AddItemToObject(o, k, isfinite(x) ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
}

/* The length of the valid UTF-8 character at p (1 .. 4; len > 0 bytes there), or 0 when none begins there. */
static inline size_t utf8_len(const unsigned char *p, size_t len) {
    const unsigned c = p[0];
    const size_t n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n == 0 || n > len) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) || (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))
        return 0; /* overlong, a surrogate, past U+10FFFF */
    return n;
}

/* Every string in o made valid UTF-8, as JSON needs (a file name may hold any bytes): each byte that begins no
 * valid character becomes U+FFFD. */
static inline void json_valid_utf8(cJSON *o) {
    for (cJSON *x = o ? o->child : NULL; x; x = x->next) {
        json_valid_utf8(x);
        if (!cJSON_IsString(x) || !x->valuestring) continue;
        const unsigned char *v = (const unsigned char *)x->valuestring;
        size_t len = strlen(x->valuestring), at = 0, n;
        while (at < len && (n = utf8_len(v + at, len - at)) > 0) at += n;
        if (at == len) continue;
        char *t = malloc(3 * len + 1), *w = t;
        if (!t) continue;
        for (at = 0; at < len; at += n ? n : 1) {
            n = utf8_len(v + at, len - at);
            if (n) memcpy(w, v + at, n), w += n;
            else memcpy(w, "\xef\xbf\xbd", 3), w += 3;
        }
        *w = '\0';
        cJSON_SetValuestring(x, t); /* keeps the old text when out of memory */
        free(t);
    }
}

/* Write o as one line and flush it; 0, or -1 when the write failed. Takes o. */
static inline int log_line(FILE *f, cJSON *o) {
    json_valid_utf8(o);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    int bad = !text || fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0;
    free(text);
    cJSON_Delete(o);
    return bad ? -1 : 0;
}

/* {"params":..,"grads":..,..,"total":..}: peak (FSC_TAG_COUNT + 1) bytes by tag, then the total (--log and --json). */
static inline cJSON *tag_object(const size_t *peak) {
    cJSON *o = cJSON_CreateObject();
    for (int t = 0; t < FSC_TAG_COUNT; t++) cJSON_AddNumberToObject(o, fsc_tag_name((fsc_tag)t), (double)peak[t]);
    cJSON_AddNumberToObject(o, "total", (double)peak[FSC_TAG_COUNT]);
    return o;
}

/* The --log record of a validation after step (0: before the first). */
static inline int log_val(FILE *f, int step, double val_loss) {
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "type", "val");
    cJSON_AddNumberToObject(v, "step", step);
    add_exact(v, "val_loss", val_loss);
    return log_line(f, v);
}

/* The --log record of a step (and, when it has one, of its validation after it). */
static inline int log_step(FILE *f, const step_record *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "train");
    cJSON_AddNumberToObject(o, "step", r->step);
    add_exact(o, "loss", r->loss);
    if (isfinite(r->lr)) add_exact(o, "lr", r->lr);
    cJSON_AddBoolToObject(o, "skipped", r->skipped);
    if (r->loss_scale > 0) cJSON_AddNumberToObject(o, "loss_scale", r->loss_scale);
    cJSON_AddNumberToObject(o, "ms", r->ms);
    cJSON_AddNumberToObject(o, "tokens_per_s", r->ms > 0 ? r->tokens / (r->ms * 1e-3) : 0);
    double m = record_mfu(r);
    if (isfinite(m)) cJSON_AddNumberToObject(o, "mfu", m);
    if (r->eta_s >= 0) cJSON_AddNumberToObject(o, "eta_s", r->eta_s);
    cJSON_AddNumberToObject(o, "elapsed_s", r->elapsed_s);
    if (r->peak) cJSON_AddItemToObject(o, "peak_bytes", tag_object(r->peak));
    if (r->host_peak) cJSON_AddItemToObject(o, "host_peak_bytes", tag_object(r->host_peak));
    if (log_line(f, o) != 0) return -1;
    return r->validated ? log_val(f, r->step, r->val_loss) : 0; /* val_loss null when not finite */
}

/* The first line of a log: the run's options (takes config). */
static inline int log_config(FILE *f, cJSON *config) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "config");
    cJSON_AddItemToObject(o, "config", config);
    return log_line(f, o);
}

#endif
