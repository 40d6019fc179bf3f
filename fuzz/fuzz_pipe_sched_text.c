/* libFuzzer harness for pipeline schedules as text (fsc_pipe_schedule_parse and _parse_ranks: a schedule file,
 * fsc-train's --schedule-file). The input is the text.
 * Checks: the parser never crashes or hangs and holds at most 64 KiB plus 128 bytes per input byte of heap (counted
 * through the sanitizer's allocation hooks); a refusal is FSC_ERR_INVALID with a message and leaves the lists
 * zeroed; an accepted text has sizes in range, every line outside comments either blank, the one placement line
 * before the actions, or tokens of 1 to 9 digits, F, B, I or W and 1 to 9 digits separated by spaces, tabs, commas
 * (and a carriage return), one line of them per rank; its lists pass the validator again, and written back
 * (fsc_pipe_schedule_format) read as the same lists.
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_pipe_sched_text.c (or make fuzz). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"
#include "fsc/pipe_schedule.h"
#include "heap_count.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int sep(char c) { return c == ' ' || c == '\t' || c == ',' || c == '\r'; }

/* The grammar, checked independently of the parser: the number of lines of actions, or -1. */
static int action_lines(const char *t, size_t n) {
    int lines = 0, placement = 0;
    const size_t bom = n >= 3 && !memcmp(t, "\xef\xbb\xbf", 3) ? 3 : 0; /* a UTF-8 byte-order mark first: read past */
    for (size_t i = bom; i < n;) {
        size_t e = i;
        while (e < n && t[e] != '\n' && t[e] != '#') e++;
        size_t j = i;
        while (j < e && sep(t[j])) j++;
        if (j < e && e - j >= 9 && !memcmp(t + j, "placement", 9)) {
            if (lines || placement) return -1;
            placement = 1;
        } else if (j < e) {
            for (size_t k = j; k < e;) {
                int d = 0;
                while (k < e && t[k] >= '0' && t[k] <= '9') k++, d++;
                if (d < 1 || d > 9 || k >= e || (t[k] != 'F' && t[k] != 'B' && t[k] != 'I' && t[k] != 'W')) return -1;
                k++, d = 0;
                while (k < e && t[k] >= '0' && t[k] <= '9') k++, d++;
                if (d < 1 || d > 9 || (k < e && !sep(t[k]))) return -1;
                while (k < e && sep(t[k])) k++;
            }
            lines++;
        }
        while (e < n && t[e] != '\n') e++; /* the comment */
        i = e + 1;
    }
    return lines;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    fsc_pipe_schedule_lists s;
    heap_count_begin();
    const fsc_status st = fsc_pipe_schedule_parse(text, size, &s);
    const long long peak = heap_count_end();
    if (peak > 65536 + 128 * (long long)size) __builtin_trap();
    if (st != FSC_OK) {
        if (st != FSC_ERR_INVALID && st != FSC_ERR_NOMEM) __builtin_trap();
        if (!fsc_last_error()[0] || s.lists || s.lens || s.p) __builtin_trap();
        return 0;
    }
    if (memchr(text, '\0', size) || action_lines(text, size) != s.p) __builtin_trap();
    if (s.p < 1 || s.v < 1 || s.m < 1 || (s.placement == FSC_PIPE_V && s.v != 2)) __builtin_trap();
    fsc_pipe_schedule_lists u; /* fsc_pipe_schedule_parse_ranks: the text's own count reads the same, another is refused */
    if (fsc_pipe_schedule_parse_ranks(text, size, s.p + 1, &u) != FSC_ERR_INVALID || u.lists) __builtin_trap();
    if (fsc_pipe_schedule_parse_ranks(text, size, s.p, &u) != FSC_OK || u.p != s.p || u.m != s.m) __builtin_trap();
    fsc_pipe_schedule_lists_free(&u);
    const fsc_pipe_action *const *l = (const fsc_pipe_action *const *)s.lists;
    if (fsc_pipe_schedule_validate_placed(s.placement, s.p, s.v, s.m, l, s.lens) != FSC_OK) __builtin_trap();
    size_t len = 0;
    if (fsc_pipe_schedule_format(s.placement, s.p, s.v, l, s.lens, NULL, 0, &len) != FSC_OK) __builtin_trap();
    char *back = malloc(len + 1);
    if (!back) return 0;
    size_t len2 = 0;
    fsc_pipe_schedule_lists t;
    if (fsc_pipe_schedule_format(s.placement, s.p, s.v, l, s.lens, back, len + 1, &len2) != FSC_OK || len2 != len ||
        fsc_pipe_schedule_parse(back, len, &t) != FSC_OK)
        __builtin_trap();
    if (t.placement != s.placement || t.p != s.p || t.v != s.v || t.m != s.m) __builtin_trap();
    for (int r = 0; r < s.p; r++)
        if (t.lens[r] != s.lens[r] || memcmp(t.lists[r], s.lists[r], (size_t)s.lens[r] * sizeof **s.lists))
            __builtin_trap();
    fsc_pipe_schedule_lists_free(&t);
    fsc_pipe_schedule_lists_free(&s);
    free(back);
    return 0;
}
