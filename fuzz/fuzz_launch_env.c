/* libFuzzer harness for the launcher environment (fsc_launch_env_parse, lib/core/launch.c). Input:
 * "NAME=value" entries separated by NUL bytes, the environment seen through the lookup callback (the
 * first entry of a name wins; the process environment is never read). A refusal says why and names one of
 * the variables; an accepted environment has 0 <= rank, local_rank < world <= 2^20, equal to the chosen
 * launcher's variables (world 1 without one), the addresses and paths as given and NUL-terminated, a port
 * in [1, 65535] when MASTER_PORT is set, timeouts in (0, 1e7] and the rendezvous token as launch.h says
 * (FSC_RENDEZVOUS_TOKEN, else "launcher:NAME=value" of the launcher's first job name, else empty).
 * Build and run: ci/fuzz.sh SECONDS fuzz/fuzz_launch_env.c (or make fuzz). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/fsc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const known[] = {
    "FSC_LAUNCHER", "RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
    "FSC_RENDEZVOUS_FILE", "FSC_RENDEZVOUS_TIMEOUT", "FSC_COMM_TIMEOUT", "FSC_RENDEZVOUS_TOKEN",
    "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_ess_jobid",
};
#define NKNOWN (sizeof known / sizeof known[0])

typedef struct {
    char **entries; /* "NAME=value", each its own allocation */
    int n;
} fake_env;

static const char *lookup(void *ctx, const char *name) {
    const fake_env *e = ctx;
    size_t k = strlen(name);
    for (int i = 0; i < e->n; i++)
        if (strncmp(e->entries[i], name, k) == 0 && e->entries[i][k] == '=') return e->entries[i] + k + 1;
    return NULL;
}

static long value_of(fake_env *e, const char *name) {
    const char *v = lookup(e, name);
    if (!v) __builtin_trap(); /* an accepted launcher had its variables */
    return strtol(v, NULL, 10);
}

/* The job token as launch.h states it: FSC_RENDEZVOUS_TOKEN, else the launcher's first job name. */
static void check_token(fake_env *e, const fsc_launch_env *o) {
    static const char *const ids[4][3] = {
        {NULL, NULL, NULL},
        {"TORCHELASTIC_RUN_ID", NULL, NULL},
        {"SLURM_JOB_ID", NULL, NULL},
        {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"},
    };
    static const char *const names[4] = {"none", "torchrun", "slurm", "openmpi"};
    if (memchr(o->token, 0, sizeof o->token) == NULL || memchr(o->token_source, 0, sizeof o->token_source) == NULL)
        __builtin_trap();
    char want[2048] = "", source[64] = "";
    const char *mine = lookup(e, "FSC_RENDEZVOUS_TOKEN");
    if (mine) {
        snprintf(want, sizeof want, "%s", mine);
        snprintf(source, sizeof source, "FSC_RENDEZVOUS_TOKEN");
    } else {
        for (int i = 0; i < 3 && ids[o->launcher][i]; i++) {
            const char *v = lookup(e, ids[o->launcher][i]);
            if (!v || !*v || (o->launcher == FSC_LAUNCHER_TORCHRUN && strcmp(v, "none") == 0)) continue;
            const char *step = o->launcher == FSC_LAUNCHER_SLURM ? lookup(e, "SLURM_STEP_ID") : NULL;
            snprintf(want, sizeof want, "%s:%s=%s%s%s", names[o->launcher], ids[o->launcher][i], v,
                     step ? ";SLURM_STEP_ID=" : "", step ? step : "");
            snprintf(source, sizeof source, "%s", ids[o->launcher][i]);
            break;
        }
    }
    if (strcmp(o->token, want) != 0 || strcmp(o->token_source, source) != 0) __builtin_trap();
    if (mine && !*mine) __builtin_trap(); /* an empty FSC_RENDEZVOUS_TOKEN is refused */
}

static void check_accepted(fake_env *e, const fsc_launch_env *o) {
    static const char *const vars[4][3] = {
        {NULL, NULL, NULL},
        {"WORLD_SIZE", "RANK", "LOCAL_RANK"},
        {"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"},
        {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
    };
    if ((int)o->launcher < 0 || (int)o->launcher > 3) __builtin_trap();
    if (o->world < 1 || o->world > (1 << 20) || o->rank < 0 || o->rank >= o->world || o->local_rank < 0 ||
        o->local_rank >= o->world)
        __builtin_trap();
    if (o->launcher == FSC_LAUNCHER_NONE) {
        if (o->world != 1 || o->rank != 0 || o->local_rank != 0) __builtin_trap();
    } else {
        const char *const *v = vars[o->launcher];
        if (value_of(e, v[0]) != o->world || value_of(e, v[1]) != o->rank || value_of(e, v[2]) != o->local_rank)
            __builtin_trap();
    }
    if (memchr(o->master_addr, 0, sizeof o->master_addr) == NULL ||
        memchr(o->rendezvous_file, 0, sizeof o->rendezvous_file) == NULL)
        __builtin_trap();
    const char *addr = lookup(e, "MASTER_ADDR"), *file = lookup(e, "FSC_RENDEZVOUS_FILE"), *port = lookup(e, "MASTER_PORT");
    if (strcmp(o->master_addr, addr ? addr : "") != 0 || strcmp(o->rendezvous_file, file ? file : "") != 0)
        __builtin_trap();
    if (port ? (o->master_port < 1 || o->master_port > 65535 || strtol(port, NULL, 10) != o->master_port)
             : o->master_port != 0)
        __builtin_trap();
    if (!(o->timeout_s > 0 && o->timeout_s <= 1e7) || !(o->comm_timeout_s > 0 && o->comm_timeout_s <= 1e7))
        __builtin_trap();
    check_token(e, o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fake_env e = {malloc((size + 1) * sizeof(char *)), 0};
    if (!e.entries) abort();
    for (size_t i = 0; i < size;) {
        size_t n = 0;
        while (i + n < size && data[i + n] != 0) n++;
        char *s = malloc(n + 1);
        if (!s) abort();
        memcpy(s, data + i, n);
        s[n] = '\0';
        e.entries[e.n++] = s;
        i += n + 1;
    }
    fsc_launch_env out;
    fsc_clear_error();
    fsc_status st = fsc_launch_env_parse(lookup, &e, &out);
    if (st == FSC_OK) {
        check_accepted(&e, &out);
    } else {
        /* a refusal is FSC_ERR_INVALID with a message naming a variable */
        const char *msg = fsc_last_error();
        size_t k = 0;
        while (k < NKNOWN && !strstr(msg, known[k])) k++;
        if (st != FSC_ERR_INVALID || k == NKNOWN) __builtin_trap();
    }
    for (int i = 0; i < e.n; i++) free(e.entries[i]);
    free(e.entries);
    return 0;
}
