/* The planner's memory half (fsc/plan.h, docs/planning.md): a job's per-rank ledger peaks, from the engine's
 * own setup and one step run on simulated ranks. fsc_plan_memory runs them on the counting device (nothing is
 * allocated or computed beyond a few kilobytes per rank), fsc_plan_measure on the cpu device (the real run).
 * Each rank does what fsc-train's rank function does up to its first step: build the model as the trainer
 * builds it (a job's configuration text, any family's, through fsc_engine_create_config), build the engine,
 * run one step, read the ledger, the step's collective bytes per group and (on the counting device) its gemm
 * FLOPs.
 * Not here: the counting device (backends/count), step time, the search over layouts. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fsc/cluster.h"
#include "fsc/family.h"
#include "fsc/gpt_engine.h"
#include "fsc/plan.h"
#include "fsc/trace.h" /* fsc_trace_now_us: a rank's clock */
#include "plan_impl.h"
#include "core/kernels.h" /* fsc_count_gemm_flops, fsc_count_work */
#include "core/comm_impl.h"   /* a communicator's group id */
#include "parallel/engine_impl.h" /* the engine's communicators */

_Static_assert((int)FSC_PLAN_BINS == (int)FSC_COUNT_BINS, "the plan's work bins are the counting device's");
_Static_assert((int)FSC_PLAN_COMMS >= FSC_ENGINE_MAX_GROUPS + 1, "a plan holds every communicator of an engine");

static void add_comm(fsc_plan_rank *o, const fsc_comm *c, int kind) {
    if (!c || o->ncomms >= FSC_PLAN_COMMS) return;
    o->comms[o->ncomms++] = (fsc_plan_comm){.id = c->gid, .kind = kind, .size = c->size, .stats = c->stats};
}

enum { PLAN_MAX_TIMED = 16 }; /* steps plan_time_steps times at most */
enum { PLAN_TIMEOUT_S = 900 }; /* seconds a rank may wait at a collective of the plan (the simulator's default: 60) */

/* One rank per role: what decides a rank's step, beside its data-parallel index (role_of). */
enum { ROLE_WORDS = 8 + 4 * FSC_PLAN_COMMS + 4 * FSC_TAG_COUNT + 2 };
typedef struct {
    uint64_t w[ROLE_WORDS];
} role_key;

typedef struct {
    const fsc_plan_job *job;
    fsc_plan_rank *out;
    int timed;       /* steps timed after the first (plan_time_steps, plan_replay_step), 0: none */
    const fsc_plan_rates *model; /* the replay's rates (the counting device's kernels move the modelled clock) */
    double seconds;  /* rank 0's timed step: the median of the timed ones, or the replayed one */
    /* one rank per role (roles 1): after the setup each rank writes its key; rank 0 then picks the rank that runs
     * the step for each (stand_in: the cluster's table), the others return and take its results */
    int roles;
    role_key *keys;  /* (world) */
    int *stand_in;   /* (world) the rank whose step stands for each rank's (itself: it runs its own) */
    _Atomic int stood; /* ranks that returned stood in for */
} plan_run;

/* 64-bit mixing (splitmix64's finalizer) of a running hash with v: the key's variable-length parts */
static uint64_t mix(uint64_t h, uint64_t v) {
    uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* What decides this rank's step beside its data index: its tensor rank and stage, each communicator's kind, size
 * and (for tensor, pipeline and expert groups) its rank in it, or (for data and world groups, whose ranks are
 * alike but for which part of the data they take) only whether it is the group's first; its ledger after the setup
 * (the shards' sizes); the gradient segments and clipping pieces' lengths; the optimizer's ranges without weight
 * decay (fsc_engine_apply_decay's: where in its segments its shards hold tensors that are not decayed; nothing with
 * decay_all or no decay). That is all a rank's holdings change in a step (the optimizer's calls, one per range
 * between them): which tensors a shard holds and where in them does not, so the ranks of a sharded strategy whose
 * shards are alike in size and in those ranges share a role. Two ranks of equal keys run the same step:
 * the same kernels on the same shapes, the same allocations, the same collectives (tests/test_plan.c checks the
 * shortcut against every rank run over a matrix of layouts). */
static fsc_status role_of(fsc_engine *e, const fsc_device *dev, role_key *k) {
    memset(k, 0, sizeof *k);
    int n = 0;
    const fsc_layout *lay = fsc_engine_layout(e);
    k->w[n++] = (uint64_t)lay->tensor, k->w[n++] = (uint64_t)lay->pipe;
    k->w[n++] = (uint64_t)lay->tp, k->w[n++] = (uint64_t)lay->pp, k->w[n++] = (uint64_t)lay->dp;
    const fsc_comm *c[FSC_PLAN_COMMS];
    int kind[FSC_PLAN_COMMS], nc = 0;
    c[nc] = e->comm, kind[nc++] = FSC_GROUP_DATA;
    for (int g = 0; g < e->ngroups && nc < FSC_PLAN_COMMS; g++) c[nc] = e->groups[g], kind[nc++] = e->group_kind[g];
    k->w[n++] = (uint64_t)nc;
    for (int i = 0; i < nc; i++) {
        const int alike = kind[i] == FSC_GROUP_DATA || kind[i] == FSC_GROUP_WORLD;
        k->w[n++] = (uint64_t)kind[i];
        k->w[n++] = c[i] ? (uint64_t)c[i]->size : 0;
        k->w[n++] = !c[i] ? 0 : alike ? (uint64_t)(c[i]->rank == 0) : (uint64_t)c[i]->rank;
        k->w[n++] = c[i] == e->norm_comm; /* which group the clipping norm sums over */
    }
    const fsc_device *host = fsc_engine_host_device(e);
    for (int t = 0; t < FSC_TAG_COUNT; t++) {
        k->w[n++] = fsc_device_peak_bytes(dev, (fsc_tag)t), k->w[n++] = fsc_device_current_bytes(dev, (fsc_tag)t);
        k->w[n++] = host ? fsc_device_peak_bytes(host, (fsc_tag)t) + 1 : 0;
        k->w[n++] = host ? fsc_device_current_bytes(host, (fsc_tag)t) : 0;
    }
    uint64_t h = mix(0, (uint64_t)e->ngsegs);
    for (int i = 0; i < e->ngsegs; i++) h = mix(h, e->glens[i]);
    h = mix(h, (uint64_t)e->nnsegs);
    for (int i = 0; i < e->nnsegs; i++) h = mix(h, e->nlens[i]);
    k->w[n++] = h;
    h = 0;
    if (e->st->holdings && !e->oc.decay_all && e->oc.weight_decay != 0.0f) { /* fsc_engine_apply_decay's ranges */
        fsc_holding *hd = NULL;
        int nh = 0;
        FSC_TRY(e->st->holdings(e, &hd, &nh));
        for (int i = 0; i < nh; i++)
            if (!fsc_param_decays(&e->m->info[hd[i].tensor]))
                h = mix(mix(mix(h, (uint64_t)hd[i].seg), hd[i].seg_off), hd[i].n);
        free(hd);
    }
    k->w[n++] = h;
    return FSC_OK;
}

static int key_cmp(const role_key *a, const role_key *b) { return memcmp(a, b, sizeof *a); }

typedef struct {
    const role_key *keys;
    int rank;
} key_ref;

static int key_ref_cmp(const void *pa, const void *pb) {
    const key_ref *a = pa, *b = pb;
    int c = key_cmp(&a->keys[a->rank], &b->keys[b->rank]);
    return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

typedef struct {
    uint64_t id;
    int rank;
} member;

static int member_cmp(const void *pa, const void *pb) {
    const member *a = pa, *b = pb;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* Rank 0, between the barriers: each rank's stand-in, the lowest rank of its key; then, while a communicator
 * holding a rank that runs also holds a rank whose stand-in it does not hold, that rank runs its own step (the
 * simulator stands v in for w in the groups holding both only). The ranks' communicators: out[].comms' ids. */
static fsc_status pick_stand_ins(plan_run *run, int world) {
    key_ref *ref = malloc((size_t)world * sizeof *ref);
    size_t nm = 0;
    for (int w = 0; w < world; w++) nm += (size_t)run->out[w].ncomms;
    member *m = malloc((nm + 1) * sizeof *m);
    char *in = calloc((size_t)world, 1);
    if (!ref || !m || !in) {
        free(ref), free(m), free(in);
        return fsc_error(FSC_ERR_NOMEM, "plan: out of host memory for the roles of %d ranks", world);
    }
    for (int w = 0; w < world; w++) ref[w] = (key_ref){run->keys, w};
    qsort(ref, (size_t)world, sizeof *ref, key_ref_cmp);
    for (int i = 0, lo = 0; i < world; i++) {
        if (i > 0 && key_cmp(&run->keys[ref[i].rank], &run->keys[ref[i - 1].rank]) != 0) lo = i;
        run->stand_in[ref[i].rank] = ref[lo].rank;
    }
    nm = 0;
    for (int w = 0; w < world; w++)
        for (int k = 0; k < run->out[w].ncomms; k++) m[nm++] = (member){run->out[w].comms[k].id, w};
    qsort(m, nm, sizeof *m, member_cmp);
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t lo = 0, hi; lo < nm; lo = hi) {
            int runs = 0;
            for (hi = lo; hi < nm && m[hi].id == m[lo].id; hi++) in[m[hi].rank] = 1, runs |= run->stand_in[m[hi].rank] == m[hi].rank;
            for (size_t i = lo; runs && i < hi; i++) {
                const int w = m[i].rank;
                if (run->stand_in[w] != w && !in[run->stand_in[w]]) run->stand_in[w] = w, changed = 1;
            }
            for (size_t i = lo; i < hi; i++) in[m[i].rank] = 0;
        }
    }
    free(ref), free(m), free(in);
    return FSC_OK;
}

fsc_plan_job fsc_plan_job_default(void) {
    fsc_plan_job j = {.model = FSC_PLAN_GPT, .gpt = fsc_gpt_config_default(), .po = fsc_parallel_opts_default(),
                      .oc = fsc_optim_config_default(), .world = 1, .batch = 1, .seed = 1337};
    return j;
}

/* The model and engine of the job on this rank, as fsc-train builds them; *lm: a Llama the engine runs but
 * does not own (freed after the engine). */
static fsc_status build_engine(fsc_rank *r, const fsc_plan_job *j, fsc_engine **e, fsc_model **lm) {
    if (fsc_device_is_count(r->dev)) fsc_device_set_whole_products(r->dev, j->whole_products); /* a GPU's attention */
    if (j->config) return fsc_engine_create_config(r, j->config, &j->po, &j->oc, j->seed, e); /* any family's */
    if (j->model == FSC_PLAN_LLAMA && j->po.tp > 1) {
        fsc_llama_build_arg ba = {.cfg = j->llama, .sp = j->sequence_parallel};
        return fsc_engine_create_built(r, fsc_llama_build, &ba, &j->po, &j->oc, j->seed, e);
    }
    if (j->model == FSC_PLAN_LLAMA) {
        FSC_TRY(fsc_llama_model_create(r->dev, &j->llama, lm));
        return fsc_engine_create_model(r, *lm, &j->po, &j->oc, j->seed, e);
    }
    return fsc_engine_create(r, &j->gpt, &j->po, &j->oc, j->seed, e);
}

static void read_ledger(const fsc_device *dev, size_t *peak, size_t *total) {
    for (int t = 0; t < FSC_TAG_COUNT; t++) peak[t] = fsc_device_peak_bytes(dev, (fsc_tag)t);
    *total = fsc_device_peak_total(dev);
}

/* One step of the job's bl samples at tok (zeros: token 0 throughout): a family's or Llama's by its model's
 * step, the GPT's by the GPT's. */
static fsc_status one_step(fsc_engine *e, const fsc_plan_job *j, void *tok, int bl) {
    fsc_step_info info = {0};
    return j->config || j->model == FSC_PLAN_LLAMA ? fsc_engine_step_model(e, tok, tok, bl, j->batch, &info)
                                                   : fsc_engine_step(e, tok, tok, bl, j->batch, &info);
}

/* One rank: setup, two steps of zero tokens (the second's work counted), the ledger's peaks over both. */
static fsc_status plan_rank(fsc_rank *r, void *arg) {
    plan_run *run = arg; /* rank 0 writes its seconds */
    const fsc_plan_job *j = run->job;
    fsc_engine *e = NULL;
    fsc_model *lm = NULL;
    fsc_status s = build_engine(r, j, &e, &lm);
    if (s != FSC_OK) {
        fsc_model_free(lm);
        return s;
    }
    if (run->roles) { /* one rank per role: the keys, the stand-ins; a rank stood in for returns */
        fsc_plan_rank *o = &run->out[r->rank];
        const fsc_layout *ly = fsc_engine_layout(e);
        o->tensor = ly->tensor, o->data = ly->data, o->stage = ly->pipe;
        add_comm(o, e->comm, FSC_GROUP_DATA); /* the ids: which ranks share a communicator */
        for (int k = 0; k < e->ngroups; k++) add_comm(o, e->groups[k], e->group_kind[k]);
        s = role_of(e, r->dev, &run->keys[r->rank]);
        fsc_status b = fsc_comm_barrier(r->comm); /* every key written */
        if (s == FSC_OK) s = b;
        if (s == FSC_OK && r->rank == 0) s = pick_stand_ins(run, r->world);
        b = fsc_comm_barrier(r->comm); /* every stand-in picked */
        if (s == FSC_OK) s = b;
        if (s == FSC_OK && run->stand_in[r->rank] != r->rank) {
            atomic_fetch_add(&run->stood, 1);
            fsc_engine_free(e);
            fsc_model_free(lm);
            return FSC_OK; /* the cluster stands run->stand_in[rank] in for it (fsc_cluster_opts.stand_in) */
        }
        o->ncomms = 0; /* the step's own, below */
    }
    if (s == FSC_OK && run->model) { /* the replay: the kernels' roofline times, the host's at its own rate */
        const fsc_plan_rates *m = run->model;
        fsc_count_set_rates(r->dev, m->flops_per_s, m->bytes_per_s, m->kernel_s);
        /* the host's calls (offload's optimizer on the cpu) are not the device's: no launch cost, as the formula */
        fsc_count_set_rates(fsc_engine_host_device(e), m->flops_per_s, m->host_bytes_per_s, 0);
        if (m->copy_bytes_per_s > 0) fsc_device_set_copy_cost(r->dev, m->copy_bytes_per_s * 1e-9);
    }
    const fsc_layout *lay = fsc_engine_layout(e);
    const int bl = j->batch / lay->dp;
    /* a sample's bytes: the model's (a configuration's, any family), else the GPT's or Llama's seq tokens */
    const fsc_model *m = j->config ? fsc_engine_model(e) : NULL;
    const int T = j->model == FSC_PLAN_LLAMA ? j->llama.seq : j->gpt.seq;
    size_t sample = m ? (m->sample_input_bytes > m->sample_target_bytes ? m->sample_input_bytes
                                                                         : m->sample_target_bytes)
                      : (size_t)T * sizeof(int32_t);
    /* inputs and targets: zeros (token 0 throughout) */
    void *tok = calloc((size_t)bl * sample + sizeof(int32_t), 1);
    if (!tok) s = fsc_error(FSC_ERR_NOMEM, "plan: out of host memory for a batch of %d x %zu bytes", bl, sample);
    double t_step = 0; /* the replay's: the modelled clock when its step starts */
    if (s == FSC_OK) { /* the second step is counted (and timed by the replay: the trainer's first timed); its peaks
                        * are every later step's: a pipeline's pools and scratch stay from the first, and what a step
                        * takes beside them (a bf16 DDP's rounding of its master weights) adds to them only then */
        s = one_step(e, j, tok, bl);
        if (s != FSC_OK) fsc_error_prefix(s, "plan: the first step");
        t_step = fsc_trace_now_us();
    }
    fsc_engine_reset_comm_stats(e); /* the step's collectives, as fsc-train reports them */
    const double flops0 = (double)fsc_count_gemm_flops(r->dev), calls0 = (double)fsc_count_calls(r->dev);
    double wf0[FSC_PLAN_BINS], wb0[FSC_PLAN_BINS];
    fsc_count_work(r->dev, wf0, wb0);
    double hf0[FSC_PLAN_BINS], hb0[FSC_PLAN_BINS] = {0};
    if (fsc_engine_host_device(e)) fsc_count_work(fsc_engine_host_device(e), hf0, hb0);
    if (s == FSC_OK) {
        s = one_step(e, j, tok, bl);
        if (s != FSC_OK) fsc_error_prefix(s, "plan: the step");
        if (s == FSC_OK && run->model && r->rank == 0) run->seconds = 1e-6 * (fsc_trace_now_us() - t_step);
    }
    if (s == FSC_OK) {
        fsc_plan_rank *o = &run->out[r->rank];
        read_ledger(r->dev, o->peak, &o->peak_total);
        const fsc_device *host = fsc_engine_host_device(e);
        o->has_host = host != NULL;
        if (host) read_ledger(host, o->host_peak, &o->host_peak_total);
        if (host) { /* the host's work of the step: the offloaded optimizer's */
            double hf[FSC_PLAN_BINS], hb[FSC_PLAN_BINS];
            fsc_count_work(host, hf, hb);
            for (int b = 0; b < FSC_PLAN_BINS; b++) o->host_work_bytes += hb[b] - hb0[b];
        }
        o->tensor = lay->tensor, o->data = lay->data, o->stage = lay->pipe;
        if (fsc_count_gemm_flops(r->dev) == UINT64_MAX) /* the counts saturate there: no count, no time */
            s = fsc_error(FSC_ERR_INVALID, "plan: rank %d's matrix products pass 2^64 FLOPs (1.8e19) in the setup and "
                          "two steps: too many to count", r->rank);
        o->gemm_flops = (double)fsc_count_gemm_flops(r->dev) - flops0;
        o->kernel_calls = (double)fsc_count_calls(r->dev) - calls0;
        fsc_count_work(r->dev, o->work_flops, o->work_bytes);
        for (int b = 0; b < FSC_PLAN_BINS; b++) o->work_flops[b] -= wf0[b], o->work_bytes[b] -= wb0[b];
        const int size[FSC_GROUP_COUNT] = {lay->dp, lay->tp, lay->pp, j->po.ep > 1 ? j->po.ep : 1, lay->world};
        for (int g = 0; g < FSC_GROUP_COUNT; g++) {
            o->group_size[g] = size[g];
            if (!fsc_engine_comm_stats_group(e, (fsc_group_kind)g, &o->comm[g])) continue;
            for (int op = 0; op < FSC_OP_COUNT; op++) o->comm_bytes[g] += o->comm[g].bytes[op];
        }
        add_comm(o, e->comm, FSC_GROUP_DATA); /* each communicator with its own size (fsc_plan_time) */
        for (int k = 0; k < e->ngroups; k++) add_comm(o, e->groups[k], e->group_kind[k]);
    }
    if (s == FSC_OK && run->timed > 0 && !run->model) { /* after the first step (the pools): time the next ones */
        double t[PLAN_MAX_TIMED];
        int n = 0;
        for (; n < run->timed && n < PLAN_MAX_TIMED && s == FSC_OK; n++) {
            const double t0 = fsc_trace_now_us();
            s = one_step(e, j, tok, bl);
            t[n] = 1e-6 * (fsc_trace_now_us() - t0);
        }
        for (int a = 1; a < n; a++) /* insertion sort: a few steps */
            for (int b = a; b > 0 && t[b] < t[b - 1]; b--) {
                const double x = t[b];
                t[b] = t[b - 1], t[b - 1] = x;
            }
        if (r->rank == 0 && s == FSC_OK && n > 0) run->seconds = t[n / 2]; /* the median: a loaded machine's spikes */
    }
    free(tok);
    fsc_engine_free(e);
    fsc_model_free(lm);
    return s;
}

/* The job on its world of simulated ranks on device; roles 1 (the counting device on the wall clock only): one
 * rank per role runs the step (plan_rank), the others take its results, every rank if that fails; *stepped (may be
 * NULL): the ranks that ran the step. */
static fsc_status plan_run_on(const char *device, const fsc_plan_job *job, fsc_plan_rank *out, int timed,
                              const fsc_plan_rates *model, double *seconds, int roles, int *stepped) {
    FSC_CHECK_ARG(job);
    FSC_CHECK_ARG(out);
    if (job->world < 1) return fsc_error(FSC_ERR_INVALID, "plan: world is %d, must be >= 1", job->world);
    if (job->batch < 1) return fsc_error(FSC_ERR_INVALID, "plan: batch is %d, must be >= 1", job->batch);
    if (!job->config && job->model != FSC_PLAN_GPT && job->model != FSC_PLAN_LLAMA)
        return fsc_error(FSC_ERR_INVALID, "plan: model %d is neither FSC_PLAN_GPT nor FSC_PLAN_LLAMA", (int)job->model);
    int tp = job->po.tp > 1 ? job->po.tp : 1, pp = job->po.pp > 1 ? job->po.pp : 1;
    if (job->world % (tp * pp) != 0 || job->batch % (job->world / (tp * pp)) != 0)
        return fsc_error(FSC_ERR_INVALID, "plan: the batch %d does not split over %d data-parallel ranks (world %d, "
                         "tp %d, pp %d)", job->batch, job->world / (tp * pp), job->world, tp, pp);
    memset(out, 0, (size_t)job->world * sizeof *out);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = job->world;
    co.device = device;
    co.threads_per_rank = 1;
    co.timeout_s = PLAN_TIMEOUT_S; /* a thousand ranks as threads on a few loaded cores wait long at a collective */
    co.sim_clock = model ? FSC_SIM_CLOCK_MODEL : timed ? FSC_SIM_CLOCK_VIRTUAL : FSC_SIM_CLOCK_WALL;
    if (model) { /* the replay's network: the rates' links, one level or two */
        co.sim_bandwidth_gbps = model->net_bytes_per_s * 1e-9, co.sim_latency_us = model->net_latency_s * 1e6;
        co.sim_node_ranks = model->node_ranks;
        co.sim_node_bandwidth_gbps = model->node_bytes_per_s * 1e-9;
        co.sim_node_latency_us = model->node_latency_s * 1e6;
    }
    plan_run run = {job, out, timed, model, 0, .roles = roles && job->world > 1};
    if (run.roles) {
        run.keys = calloc((size_t)job->world, sizeof *run.keys);
        run.stand_in = malloc((size_t)job->world * sizeof *run.stand_in);
        if (!run.keys || !run.stand_in) {
            free(run.keys), free(run.stand_in);
            return fsc_error(FSC_ERR_NOMEM, "plan: out of host memory for the roles of %d ranks", job->world);
        }
        for (int w = 0; w < job->world; w++) run.stand_in[w] = w;
        co.stand_in = run.stand_in;
    }
    atomic_init(&run.stood, 0);
    fsc_status s = fsc_cluster_run(&co, plan_rank, &run);
    if (seconds) *seconds = run.seconds;
    for (int w = 0; s == FSC_OK && run.roles && w < job->world; w++) { /* a rank stood in for: its stand-in's step */
        const int v = run.stand_in[w];
        if (v == w) continue;
        fsc_plan_rank own = out[w];
        out[w] = out[v];
        out[w].tensor = own.tensor, out[w].data = own.data, out[w].stage = own.stage;
        if (own.ncomms != out[v].ncomms) /* equal keys hold as many communicators */
            s = fsc_error(FSC_ERR_INTERNAL, "plan: rank %d has %d communicators, rank %d standing in for it %d", w,
                          own.ncomms, v, out[v].ncomms);
        for (int k = 0; k < own.ncomms && k < out[w].ncomms; k++) out[w].comms[k].id = own.comms[k].id;
    }
    if (stepped) *stepped = job->world - atomic_load(&run.stood);
    const int stood = atomic_load(&run.stood);
    free(run.keys);
    free(run.stand_in);
    if (s != FSC_OK && stood > 0) /* a collective the stand-ins could not meet: every rank runs its step */
        return plan_run_on(device, job, out, timed, model, seconds, 0, stepped);
    return s;
}

fsc_status plan_memory_roles(const fsc_plan_job *job, fsc_plan_rank *out, int roles, int *stepped) {
    return plan_run_on("count", job, out, 0, NULL, NULL, roles, stepped);
}

fsc_status fsc_plan_memory(const fsc_plan_job *job, fsc_plan_rank *out) {
    return plan_run_on("count", job, out, 0, NULL, NULL, 1, NULL);
}

fsc_status fsc_plan_measure(const fsc_plan_job *job, fsc_plan_rank *out) {
    return plan_run_on("cpu", job, out, 0, NULL, NULL, 0, NULL);
}

fsc_status plan_time_steps(const fsc_plan_job *job, int steps, double *seconds) {
    FSC_CHECK_ARG(job);
    fsc_plan_rank *out = calloc((size_t)(job->world > 0 ? job->world : 1), sizeof *out);
    if (!out) return fsc_error(FSC_ERR_NOMEM, "plan: out of memory for %d ranks", job->world);
    fsc_status s = plan_run_on("cpu", job, out, steps, NULL, seconds, 0, NULL);
    free(out);
    return s;
}

fsc_status plan_replay_step(const fsc_plan_job *job, const fsc_plan_rates *rates, fsc_plan_rank *out,
                            double *seconds) {
    return plan_run_on("count", job, out, 0, rates, seconds, 0, NULL);
}
