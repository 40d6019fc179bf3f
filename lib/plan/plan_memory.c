/* The planner's memory half (fsc/plan.h, docs/planning.md): a job's per-rank ledger peaks, from the engine's
 * own setup and one step run on simulated ranks. fsc_plan_memory runs them on the counting device (nothing is
 * allocated or computed beyond a few kilobytes per rank), fsc_plan_measure on the cpu device (the real run).
 * Each rank does what fsc-train's rank function does up to its first step: build the model as the trainer
 * builds it (a job's configuration text, any family's, through fsc_engine_create_config), build the engine,
 * run one step, read the ledger, the step's collective bytes per group and (on the counting device) its gemm
 * FLOPs.
 * Not here: the counting device (backends/count), step time, the search over layouts. */
#include <stdlib.h>
#include <string.h>
#include "fsc/cluster.h"
#include "fsc/family.h"
#include "fsc/gpt_engine.h"
#include "fsc/plan.h"
#include "fsc/trace.h" /* fsc_trace_now_us: a rank's clock */
#include "plan_impl.h"
#include "core/device_impl.h" /* fsc_count_gemm_flops, fsc_count_work */
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

typedef struct {
    const fsc_plan_job *job;
    fsc_plan_rank *out;
    int timed;       /* steps timed after the first (plan_time_steps, plan_replay_step), 0: none */
    const fsc_plan_rates *model; /* the replay's rates (the counting device's kernels move the modelled clock) */
    double seconds;  /* rank 0's timed step: the median of the timed ones, or the replayed one */
} plan_run;

fsc_plan_job fsc_plan_job_default(void) {
    fsc_plan_job j = {.model = FSC_PLAN_GPT, .gpt = fsc_gpt_config_default(), .po = fsc_parallel_opts_default(),
                      .oc = fsc_optim_config_default(), .world = 1, .batch = 1, .seed = 1337};
    return j;
}

/* The model and engine of the job on this rank, as fsc-train builds them; *lm: a Llama the engine runs but
 * does not own (freed after the engine). */
static fsc_status build_engine(fsc_rank *r, const fsc_plan_job *j, fsc_engine **e, fsc_model **lm) {
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

/* One rank: setup, one step of zero tokens, the ledger's peaks. */
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
    if (run->model) { /* the replay: the kernels' roofline times, the host's at its own rate */
        const fsc_plan_rates *m = run->model;
        fsc_count_set_rates(r->dev, m->flops_per_s, m->bytes_per_s, m->kernel_s);
        fsc_count_set_rates(fsc_engine_host_device(e), m->flops_per_s, m->host_bytes_per_s, m->kernel_s);
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
    if (s == FSC_OK && run->model) { /* the replay counts and times the second step (the trainer's first timed) */
        s = one_step(e, j, tok, bl);
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

static fsc_status plan_run_on(const char *device, const fsc_plan_job *job, fsc_plan_rank *out, int timed,
                              const fsc_plan_rates *model, double *seconds) {
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
    plan_run run = {job, out, timed, model, 0};
    fsc_status s = fsc_cluster_run(&co, plan_rank, &run);
    if (seconds) *seconds = run.seconds;
    return s;
}

fsc_status fsc_plan_memory(const fsc_plan_job *job, fsc_plan_rank *out) {
    return plan_run_on("count", job, out, 0, NULL, NULL);
}

fsc_status fsc_plan_measure(const fsc_plan_job *job, fsc_plan_rank *out) {
    return plan_run_on("cpu", job, out, 0, NULL, NULL);
}

fsc_status plan_time_steps(const fsc_plan_job *job, int steps, double *seconds) {
    FSC_CHECK_ARG(job);
    fsc_plan_rank *out = calloc((size_t)(job->world > 0 ? job->world : 1), sizeof *out);
    if (!out) return fsc_error(FSC_ERR_NOMEM, "plan: out of memory for %d ranks", job->world);
    fsc_status s = plan_run_on("cpu", job, out, steps, NULL, seconds);
    free(out);
    return s;
}

fsc_status plan_replay_step(const fsc_plan_job *job, const fsc_plan_rates *rates, fsc_plan_rank *out,
                            double *seconds) {
    return plan_run_on("count", job, out, 0, rates, seconds);
}
