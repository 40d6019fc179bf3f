/* The peak an MFU divides by (--peak-tflops): the user's number ("given"); else the rank's device's measured fp32
 * gemm rate, cached per device and BLAS threads in FSC_CACHE_DIR (default $XDG_CACHE_HOME/fsc or ~/.cache/fsc; an
 * empty FSC_CACHE_DIR: no cache), so every run on a machine, a resumed one too, divides by the same number
 * ("cached"; the first run "measured" it). A step faster than the peak raises it to that step's rate ("raised"), so
 * MFU never passes 100%, and the raised value goes to the cache at the end of the run. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "train.h"

/* The BLAS threads of a rank of the run (the cache's key): --threads, else its default (train_gpt.c's
 * threads_per_rank, then fsc_cluster_run's or a launcher's): 1 with several ranks, --reduce exact or a launcher's
 * process, the library default (0) on one simulated rank. A peak measured with one count is not a rank's peak
 * with another. */
static int rank_threads(const run_state *st) {
    const train_config *c = st->cfg;
    return c->threads ? c->threads : c->world > 1 || c->reduce == 2 || st->procs ? 1 : 0;
}

/* The cache file of dev and the run's threads a rank into buf; 0 when there is no cache. */
static int cache_path(const run_state *st, fsc_device *dev, char *buf, size_t cap, char *dir, size_t dcap) {
    const char *env = getenv("FSC_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (env) n = snprintf(dir, dcap, "%s", env);
    else if (xdg && *xdg) n = snprintf(dir, dcap, "%s/fsc", xdg);
    else if (home && *home) n = snprintf(dir, dcap, "%s/.cache/fsc", home);
    else return 0;
    if (n <= 0 || (size_t)n >= dcap) return 0;
    n = snprintf(buf, cap, "%s/peak-%s-%dthreads.txt", dir, fsc_device_name(dev), rank_threads(st));
    return n > 0 && (size_t)n < cap;
}

/* The cache file's text (write_cache's "%.6g\n"): the TFLOP/s it holds, or 0 when it is not one decimal number in
 * (0, 1e7], written with digits, sign, point and exponent only and nothing after but spaces and newlines
 * (fuzz/fuzz_peak_cache.c). */
static double peak_cache_parse(const char *text) {
    size_t k = strspn(text, "0123456789+-.eE");
    if (k == 0 || strspn(text + k, " \n") != strlen(text + k)) return 0;
    char *end;
    double v = strtod(text, &end);
    return end == text + k && isfinite(v) && v > 0 && v <= 1e7 ? v : 0;
}

static double read_cache(const char *path) {
    char text[64] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return peak_cache_parse(text);
}

/* dir made with the folders above it (…/.cache/fsc), then path written whole and renamed over: readers see the old
 * number or the new one. Best effort: MFU is information, a failure changes no result. */
static void write_cache(const char *dir, const char *path, double tflops) {
    if (make_dirs(dir) != 0) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    int bad = fprintf(f, "%.6g\n", tflops) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) unlink(tmp);
}

void peak_choose(run_state *st, const train_config *c, fsc_device *dev) {
    char path[4096], dir[4000];
    st->tflops = 0;
    if (c->peak_tflops > 0) {
        st->tflops = c->peak_tflops;
        snprintf(st->peak_source, sizeof st->peak_source, "given");
        return;
    }
    const int cached = cache_path(st, dev, path, sizeof path, dir, sizeof dir);
    if (cached && (st->tflops = read_cache(path)) > 0) {
        snprintf(st->peak_source, sizeof st->peak_source, "cached");
        return;
    }
    const fsc_status measured = fsc_device_measure_tflops(dev, 512, &st->tflops);
    fsc_device_reset_peak(dev); /* the probe's buffers are not the run's memory: the ledger's peaks start after it */
    if (measured != FSC_OK || !(st->tflops > 0)) {
        st->tflops = 0; /* no MFU then */
        snprintf(st->peak_source, sizeof st->peak_source, "unknown");
        return;
    }
    snprintf(st->peak_source, sizeof st->peak_source, "measured");
    if (cached) write_cache(dir, path, st->tflops);
}

void peak_raise(run_state *st, run_measures *m, double ms) {
    if (!(m->peak_flops > 0) || !(ms > 0)) return;
    const double rate = m->flops / (ms * 1e-3);
    if (rate <= m->peak_flops) return;
    m->peak_flops = rate;
    st->tflops = rate / ((double)st->cfg->world * 1e12);
    snprintf(st->peak_source, sizeof st->peak_source, "raised");
}

void peak_keep(const run_state *st, fsc_device *dev) {
    char path[4096], dir[4000];
    if (strcmp(st->peak_source, "raised") == 0 && st->cfg->peak_tflops <= 0 &&
        cache_path(st, dev, path, sizeof path, dir, sizeof dir))
        write_cache(dir, path, st->tflops);
}
