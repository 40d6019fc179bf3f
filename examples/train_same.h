/* The trainer's part of what every rank must share (fsc/settings.h; the engine compares its own options,
 * optimizer, seed and model when it is created). Under a launcher each process parses its own command line,
 * so before anything else collective the ranks compare every option of the run (as --json names them) but
 * those that are a process's own, and the identity of --data and --val-data: tokens, each file's path and
 * tokens, and a sample of the content (FNV-1a of 64 runs of 16 tokens spread over the stream). Ranks that
 * differ refuse together: "ranks disagree on --lr: rank 0 has 0.001, rank 1 has 0.0001".
 * Only what is here decides what is compared; where the check runs stays in examples/train/loop.c (proc_fn). */
#ifndef TRAIN_SAME_H
#define TRAIN_SAME_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fsc/fsc.h"

/* Options each process may set its own way: resources, outputs only rank 0 or each rank writes for itself, and
 * --config, whose values are compared as the options they set. */
static const char *const per_process_options[] = {"threads", "log", "json", "plan", "trace", "trace-events", "peak-tflops",
                                                  "config", NULL};

static int per_process(const char *name) {
    for (int i = 0; per_process_options[i]; i++)
        if (strcmp(per_process_options[i], name) == 0) return 1;
    return 0;
}

/* The identity of a token stream: its size, its files, and a hash of a sample spread over it. */
static void add_data_identity(fsc_settings *s, const char *what, const fsc_data *d) {
    char name[64];
    const uint64_t n = fsc_data_tokens(d);
    snprintf(name, sizeof name, "%s tokens", what);
    fsc_settings_add(s, name, "%llu in %d files", (unsigned long long)n, fsc_data_files(d));
    for (int i = 0; i < fsc_data_files(d); i++) {
        snprintf(name, sizeof name, "%s file %d", what, i + 1);
        fsc_settings_add(s, name, "%s (%llu tokens)", fsc_data_file(d, i),
                         (unsigned long long)fsc_data_file_tokens(d, i));
    }
    enum { RUNS = 64, RUN = 16 };
    int32_t tok[RUN];
    uint64_t h = 14695981039346656037ull; /* FNV-1a, 64 bits */
    const size_t len = n < RUN ? (size_t)n : RUN;
    fsc_status st = FSC_OK;
    for (uint64_t k = 0; k < RUNS && st == FSC_OK && len; k++) {
        st = fsc_data_read(d, k * (n - len) / (RUNS - 1), len, tok);
        for (size_t i = 0; st == FSC_OK && i < len; i++)
            for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)tok[i] >> (8 * b)) & 0xffu)) * 1099511628211ull;
    }
    snprintf(name, sizeof name, "%s sample", what);
    if (st == FSC_OK) fsc_settings_add(s, name, "%016llx", (unsigned long long)h);
    else fsc_settings_add(s, name, "unreadable: %s", fsc_last_error());
}

/* Collective over r's world: the options of config (config_object's JSON) and the data's identity. */
static fsc_status same_run(fsc_rank *r, const cJSON *config, const fsc_data *data, const fsc_data *val) {
    fsc_settings *s = NULL;
    fsc_status st = config ? fsc_settings_create(&s) : fsc_error(FSC_ERR_NOMEM, "out of memory");
    if (st != FSC_OK) return fsc_comm_agree(r->comm, r->dev, st);
    const cJSON *o;
    char name[64];
    cJSON_ArrayForEach(o, config) {
        if (per_process(o->string)) continue;
        snprintf(name, sizeof name, "--%.60s", o->string);
        char *text = cJSON_IsString(o) ? NULL : cJSON_PrintUnformatted(o);
        fsc_settings_add(s, name, "%s", cJSON_IsString(o) ? o->valuestring : text ? text : "(out of memory)");
        cJSON_free(text);
    }
    add_data_identity(s, "--data", data);
    if (val) add_data_identity(s, "--val-data", val);
    st = fsc_settings_agree(s, r->comm, r->dev);
    fsc_settings_free(s);
    return st;
}

#endif
