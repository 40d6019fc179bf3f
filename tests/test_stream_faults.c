/* Streamed full parameters (lib/parallel/stream.c) when one rank fails part-way: every rank returns the failure
 * at once, in step, with no rank left waiting in a collective the others skipped. The failures are injected by
 * wrapping the allocators (the Makefile links this test with -Wl,--wrap=malloc,--wrap=aligned_alloc): a rank
 * arms its own thread, and the next matching allocation of that thread fails.
 *   - An offloaded owner (FSDP, offload all, pp 2 x dp 2) whose device chunk cannot be allocated: the chunk is
 *     taken before the stream's agreement, so the owners never start sending to receivers that would wait.
 *   - A receiver whose host offsets cannot be allocated (pp 2): its failure goes into the stream's first agreement.
 * Then the ranks' next collective (an agreement of the caller's) must pair with itself on every rank. */
#include <time.h>
#include "partest.h"

void *__real_malloc(size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
static _Thread_local size_t fail_malloc_size;  /* the next malloc of this size fails (0: none) */
static _Thread_local size_t fail_aligned_above; /* the next aligned_alloc of at least this many bytes fails */

void *__wrap_malloc(size_t n) {
    if (fail_malloc_size && n == fail_malloc_size) {
        fail_malloc_size = 0;
        return NULL;
    }
    return __real_malloc(n);
}

void *__wrap_aligned_alloc(size_t a, size_t n) {
    if (fail_aligned_above && n >= fail_aligned_above) {
        fail_aligned_above = 0;
        return NULL;
    }
    return __real_aligned_alloc(a, n);
}

typedef struct {
    int offload;   /* 1: FSDP, offload all, pp 2 x dp 2, the last rank's device chunk fails; 0: DDP pp 2, rank 0's
                    * offsets fail */
    fsc_status got[4];
    char msg[4][256];
    double seconds[4];
    fsc_status after[4]; /* the caller's agreement after the call */
} fault_run;

static fsc_status fault_rank(fsc_rank *r, void *arg) {
    fault_run *f = arg;
    fsc_gpt_config cfg = { .layers = 4, .dim = 32, .heads = 2, .seq = 8, .vocab = 64 };
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = f->offload ? FSC_PAR_FSDP : FSC_PAR_DDP;
    po.pp = 2, po.accum = 2, po.no_sync = 1;
    if (f->offload) po.offload = FSC_OFFLOAD_ALL;
    fsc_optim_config oc = pt_adamw();
    fsc_engine *e = NULL;
    FSC_TRY(fsc_engine_create(r, &cfg, &po, &oc, 1, &e));
    float *host = calloc(fsc_gpt_num_params(&cfg), sizeof(float));
    fsc_status s = host ? fsc_comm_barrier(r->comm) : FSC_ERR_NOMEM;
    if (f->offload && r->rank == r->world - 1) fail_aligned_above = 4096; /* its first device chunk */
    if (!f->offload && r->rank == 0) fail_malloc_size = ((size_t)fsc_engine_model(e)->n_tensors + 1) * sizeof(size_t);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (s == FSC_OK) {
        s = fsc_engine_full_params(e, r->rank == 0 ? host : NULL);
        snprintf(f->msg[r->rank], sizeof f->msg[r->rank], "%s", s ? fsc_last_error() : "");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fail_aligned_above = 0;
    fail_malloc_size = 0;
    f->got[r->rank] = s;
    f->seconds[r->rank] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    f->after[r->rank] = fsc_comm_agree(r->comm, r->dev, FSC_OK); /* in step with the others */
    free(host);
    fsc_engine_free(e);
    return FSC_OK;
}

static void run_fault(int offload, int world, const char *want) {
    fault_run f;
    memset(&f, 0, sizeof f);
    f.offload = offload;
    fsc_cluster_opts co = { .world = world, .device = "cpu", .timeout_s = 20 };
    assert_ok(fsc_cluster_run(&co, fault_rank, &f));
    for (int r = 0; r < world; r++) {
        if (f.got[r] == FSC_OK) fail_msg("rank %d: the failure of another rank was not returned", r);
        if (!strstr(f.msg[r], want)) fail_msg("rank %d: \"%s\" does not name \"%s\"", r, f.msg[r], want);
        if (f.seconds[r] > 5.0) fail_msg("rank %d returned after %.1f s: it waited", r, f.seconds[r]);
        if (f.after[r] != FSC_OK) fail_msg("rank %d: the next collective did not pair with the others'", r);
    }
}

static void test_offloaded_owner_chunk_fails(void **state) {
    (void)state;
    run_fault(1, 4, "cannot allocate");
}

static void test_receiver_offsets_fail(void **state) {
    (void)state;
    run_fault(0, 2, "out of host memory");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offloaded_owner_chunk_fails),
        cmocka_unit_test(test_receiver_offsets_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
