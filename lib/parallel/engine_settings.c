/* What every rank must create its engine with, checked before creation's first collective (settings.h): the
 * parallel options (a custom schedule's lists among them), the optimizer's configuration, the seed and the model
 * (its configuration text, sizes and every tensor: name, full shape, owning layer). Ranks given different ones
 * would otherwise train on, each its own way, or fail later in a mismatched collective; here they refuse together,
 * naming the first that differs: "ranks disagree on optimizer.lr: rank 0 has 0.001, rank 1 has 0.0001".
 * Not here: what a program adds of its own (data, schedule: the trainer), the per-step batch check (engine.c). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine_impl.h"
#include "fsc/pipe_schedule.h"
#include "fsc/settings.h"
#include "core/locale_impl.h"
#include "core/model_text.h" /* fsc_config_text */
#include "io/json_lock.h"     /* fsc_json_parse */

/* A float as the shortest decimal that reads back as itself (0.001, not 0.00100000005): equal text is equal
 * bits (NaN aside). */
typedef struct {
    char s[32];
} num;
static num flt(float x) {
    num n;
    const locale_t before = fsc_numbers_c(); /* 0.001 whatever the host's LC_NUMERIC: the text is compared */
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(n.s, sizeof n.s, "%.*g", prec, (double)x);
        if (strtof(n.s, NULL) == x) break;
    }
    fsc_numbers_back(before);
    return n;
}

/* A custom schedule's list of pipeline rank r: every rank must pass the same lists (parallel.h), or the ranks of a
 * tensor group would meet their collectives in other orders (under sequence parallelism a W gathers) and the data
 * ranks of a stage their messages. Written as its first actions' kinds, micro-batches and chunks ("F0.0 B0.0
 * W0.0 ...") and a fingerprint of all of them. A list of another length than 2 v M (fb) or 3 v M actions is written
 * as its length only: the validator refuses it, and its actions are not read. */
static void add_actions(fsc_settings *s, int r, const struct fsc_pipe_action *a, int n, long long fb) {
    char name[40], text[200];
    snprintf(name, sizeof name, "parallel.actions.%d", r);
    if (!a || fb < 0 || fb > INT_MAX || (n != fb && (long long)n * 2 != 3 * fb)) {
        fsc_settings_add(s, name, "%d actions%s", n, a ? "" : " (none)");
        return;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a over (kind, micro, chunk) of every action */
    size_t at = 0;
    text[0] = '\0';
    for (int i = 0; i < n; i++) {
        const int v[3] = { (int)a[i].kind, a[i].micro, a[i].chunk };
        for (int j = 0; j < 3; j++)
            for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)v[j] >> (8 * b)) & 0xffu)) * 1099511628211ull;
        char one[40];
        const int len = snprintf(one, sizeof one, "%s%c%d.%d", i ? " " : "", v[0] >= 0 && v[0] < 3 ? "FBW"[v[0]] : '?',
                                 v[1], v[2]);
        if (at + (size_t)len + 4 < sizeof text) memcpy(text + at, one, (size_t)len + 1), at += (size_t)len;
        else if (at + 4 < sizeof text) memcpy(text + at, " ...", 5), at = sizeof text;
    }
    fsc_settings_add(s, name, "%s (%d actions, fingerprint %016llx)", text, n, (unsigned long long)h);
}

static void add_options(fsc_settings *s, const fsc_parallel_opts *po) {
    fsc_settings_add(s, "parallel.kind", "%s", fsc_parallel_kind_name(po->kind));
    fsc_settings_add(s, "parallel.shard", "%d", (int)po->shard);
    fsc_settings_add(s, "parallel.wrap", "%d min_params %zu", (int)po->wrap, po->wrap_min_params);
    fsc_settings_add(s, "parallel.reshard_after_forward", "%d", po->reshard_after_forward);
    fsc_settings_add(s, "parallel.hybrid_group", "%d", po->hybrid_group);
    fsc_settings_add(s, "parallel.param_dtype", "%s", fsc_dtype_name(po->param_dtype));
    fsc_settings_add(s, "parallel.reduce_dtype", "%s", fsc_dtype_name(po->reduce_dtype));
    fsc_settings_add(s, "parallel.loss_scale", "init %s min %s", flt(po->init_loss_scale).s,
                     flt(po->min_loss_scale).s);
    fsc_settings_add(s, "parallel.nonfinite", "%s max_skipped_steps %d", po->nonfinite ? "skip" : "stop",
                     po->max_skipped_steps);
    fsc_settings_add(s, "parallel.accum", "%d", po->accum);
    fsc_settings_add(s, "parallel.no_sync", "%d", po->no_sync);
    fsc_settings_add(s, "parallel.bucket_bytes", "%zu", po->bucket_bytes);
    fsc_settings_add(s, "parallel.clip", "%s", flt(po->clip).s);
    fsc_settings_add(s, "parallel.sync_from_rank0", "%d", po->sync_from_rank0);
    fsc_settings_add(s, "parallel.checkpoint", "%d", po->checkpoint);
    fsc_settings_add(s, "parallel.prefetch", "%d limit %d", po->prefetch, po->prefetch_limit);
    fsc_settings_add(s, "parallel.offload", "%s", fsc_offload_mode_name(po->offload));
    fsc_settings_add(s, "parallel.pp", "%d", po->pp);
    fsc_settings_add(s, "parallel.schedule", "%d checkpoint %d placement %d", (int)po->schedule,
                     (int)po->pipe_checkpoint, (int)po->placement);
    char bal[256] = "even";
    const int chunks = po->virtual_stages > 1 ? po->virtual_stages : 1;
    if (chunks > 1) fsc_settings_add(s, "parallel.virtual_stages", "%d", chunks);
    for (int i = 0, at = 0; po->balance && i < (long long)po->pp * chunks && at < (int)sizeof bal - 12; i++)
        at += snprintf(bal + at, sizeof bal - (size_t)at, "%s%d", i ? "," : "", po->balance[i]);
    fsc_settings_add(s, "parallel.balance", "%s", bal);
    const int stages = po->pp > 1 ? po->pp : 1;
    const long long fb = 2LL * chunks * po->accum; /* a list's F and B (options not yet checked: any ints) */
    for (int r = 0; po->schedule == FSC_SCHED_CUSTOM && po->actions && po->nactions && r < stages; r++)
        add_actions(s, r, po->actions[r], po->nactions[r], fb);
    fsc_settings_add(s, "parallel.tp", "%d sequence_parallel %d", po->tp, po->sequence_parallel);
    fsc_settings_add(s, "parallel.order", "%s", po->order && po->order[0] ? po->order : "tp,dp,pp");
    fsc_settings_add(s, "parallel.ep", "%d", po->ep);
}

static void add_optimizer(fsc_settings *s, const fsc_optim_config *oc, uint64_t seed) {
    fsc_settings_add(s, "optimizer.kind", "%s", oc->kind == FSC_OPT_SGD ? "sgd" : "adamw");
    fsc_settings_add(s, "optimizer.lr", "%s", flt(oc->lr).s);
    fsc_settings_add(s, "optimizer.momentum", "%s", flt(oc->momentum).s);
    fsc_settings_add(s, "optimizer.weight_decay", "%s decay_all %d", flt(oc->weight_decay).s, oc->decay_all);
    fsc_settings_add(s, "optimizer.betas", "%s %s eps %s", flt(oc->beta1).s, flt(oc->beta2).s, flt(oc->eps).s);
    fsc_settings_add(s, "seed", "%llu", (unsigned long long)seed);
}

/* The model as every rank must declare it: with tensor parallelism the full tensors, the same on every slice. */
static fsc_status add_model(fsc_settings *s, const fsc_model *m) {
    if (m->ops && m->ops->config) {
        char *cfg = NULL;
        FSC_TRY(fsc_config_text(m->ops->config, m->ctx, "engine", &cfg)); /* whole, any length */
        /* what checkpoints record: another text was refused only at the first save, after the training */
        cJSON *o = fsc_json_parse_whole(cfg); /* {"a":1}garbage too: weights files record the text as it is */
        const int object = cJSON_IsObject(o);
        cJSON_Delete(o);
        fsc_status st = object ? fsc_settings_add(s, "model.config", "%s", cfg)
                               : fsc_error(FSC_ERR_INVALID, "engine: the model's configuration text is not a JSON "
                                           "object (model.h's config; checkpoints record it): %.200s", cfg);
        free(cfg);
        FSC_TRY(st);
    }
    fsc_settings_add(s, "model.layers", "%d tensors %d experts %d", m->n_layers, m->n_tensors, m->n_experts);
    fsc_settings_add(s, "model.sample", "input %zu bytes, target %zu bytes, %d loss terms", m->sample_input_bytes,
                     m->sample_target_bytes, m->loss_terms);
    for (int i = 0; i < m->n_tensors; i++) {
        const fsc_param_info *p = &m->info[i];
        const int64_t *d = p->full_numel ? p->full_shape : p->shape;
        char name[32];
        snprintf(name, sizeof name, "model.tensor.%d", i);
        fsc_settings_add(s, name, "%s (%lld, %lld, %lld, %lld) dims %d layer %d expert %d decay %d split %d/%d",
                         p->name, (long long)d[0], (long long)(p->ndim > 1 ? d[1] : 0),
                         (long long)(p->ndim > 2 ? d[2] : 0), (long long)(p->ndim > 3 ? d[3] : 0), p->ndim, p->layer,
                         p->expert, p->decay, p->split, p->parts);
    }
    return FSC_OK;
}

fsc_status fsc_engine_agree_settings(fsc_rank *r, const fsc_model *m, const fsc_parallel_opts *po,
                                     const fsc_optim_config *oc, uint64_t seed) {
    fsc_settings *s = NULL;
    fsc_status st = fsc_settings_create(&s);
    if (st == FSC_OK && m) st = add_model(s, m);
    if (st == FSC_OK) {
        if (po) add_options(s, po);
        if (oc) add_optimizer(s, oc, seed);
    }
    /* a rank that could not make its list fails every rank with its message, inside agree */
    st = st == FSC_OK ? fsc_settings_agree(s, r->comm, r->dev) : fsc_comm_agree(r->comm, r->dev, st);
    fsc_settings_free(s);
    return st;
}
