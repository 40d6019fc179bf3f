/* libFuzzer harness for the flight records' reader: flr_parse (lib/io/flight_read.c, one rank's
 * flight-rank-N.json) and the diagnosis over the records (flr_diagnose, lib/io/flight_diag.c). The input is up
 * to 4 records separated by NUL bytes. Checks beyond "no crash":
 *   - a refusal is FSC_ERR_FORMAT with a message naming the record ("rec"), and returns no record;
 *   - cJSON and the record never hold more than 24 bytes per input byte plus 128 KiB (allocations counted by
 *     cJSON's hooks, the record's arrays by their sizes);
 *   - an accepted record has 0 <= rank < world <= FLR_MAX_WORLD, communicators with 0 <= rank < size <= world,
 *     calls in strictly increasing order of their numbers (>= 1), each with a known operation, dtype and state,
 *     an end time only when ended;
 *   - the records accepted (each at its rank, the first one wins; worlds up to 64 ranks) diagnose into a report
 *     that is terminated inside its buffer and ends with a verdict (or is cut at the buffer's end).
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_flight.c (or make fuzz). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"
#include "io/flight_read.h"
#include "cjson_count.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static size_t record_bytes(const flr_record *r) {
    size_t b = sizeof *r + (size_t)r->ncomms * sizeof(flr_comm);
    for (int i = 0; i < r->ncomms; i++) b += r->comms[i].ncalls * sizeof(flr_call);
    return b;
}

static void check(const flr_record *r) {
    if (r->world < 1 || r->world > FLR_MAX_WORLD || r->rank < 0 || r->rank >= r->world) __builtin_trap();
    for (int i = 0; i < r->ncomms; i++) {
        const flr_comm *c = &r->comms[i];
        if (c->size < 1 || c->size > r->world || c->rank < 0 || c->rank >= c->size) __builtin_trap();
        for (size_t k = 0; k < c->ncalls; k++) {
            const flr_call *x = &c->calls[k];
            if (x->seq < 1 || (k && x->seq <= c->calls[k - 1].seq)) __builtin_trap();
            if (x->op < 0 || x->op > FLR_OP_SPLIT || x->dt < 0 || x->dt >= FSC_DTYPE_COUNT) __builtin_trap();
            if (x->state < FLR_ISSUED || x->state > FLR_FAILED) __builtin_trap();
            if (x->state < FLR_COMPLETED && x->t1 != 0) __builtin_trap();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int hooked;
    if (!hooked) {
        cJSON_Hooks h = { cj_malloc, cj_free };
        cJSON_InitHooks(&h);
        hooked = 1;
    }
    flr_record *recs[64] = {0}, *all[4] = {0};
    int world = 0, n = 0;
    const char *p = (const char *)data, *end = p + size;
    while (p <= end && n < 4) {
        const char *z = memchr(p, 0, (size_t)(end - p));
        size_t len = z ? (size_t)(z - p) : (size_t)(end - p);
        flr_record *r = (flr_record *)1;
        cj_peak = cj_now;
        fsc_status s = flr_parse(p, len, "rec", &r);
        size_t held = cj_peak - cj_now + (s == FSC_OK ? record_bytes(r) : 0);
        if (held > 24 * len + ((size_t)1 << 17)) __builtin_trap(); /* the bound */
        if (s != FSC_OK) {
            if (s != FSC_ERR_FORMAT || r || !strstr(fsc_last_error(), "rec")) __builtin_trap();
        } else {
            check(r);
            all[n++] = r;
            if (r->world <= 64 && !recs[r->rank]) {
                recs[r->rank] = r;
                world = r->world > world ? r->world : world;
            }
        }
        if (!z) break;
        p = z + 1;
    }
    if (world > 0) {
        char report[4096];
        memset(report, 'x', sizeof report);
        flr_diagnose(recs, world, "notes\n", report, sizeof report);
        size_t len = strnlen(report, sizeof report);
        if (len == sizeof report) __builtin_trap();
        if (len + 1 < sizeof report && !strstr(report, "verdict: ")) __builtin_trap();
    }
    for (int i = 0; i < n; i++) flr_free(all[i]);
    return 0;
}
