/* The sequential model's records and passes: one device allocation per record holding the range's input,
 * every layer's output, the layers' records (one shared record with layer checkpointing: each layer's input is
 * kept and its forward runs again right after its pre_backward hook), the targets and the gradient streams (the
 * passes' scratch, the layers' work and the gradients between layers, is the model's: one for all its records);
 * forward and backward over the range with the hooks around every layer; the tied-gradient contract
 * of model.h (a user layer's gradient goes to the zeroed tied buffer, the owner adds it before its own; the buffer
 * is made with the first record whose range holds the owner or a user, so a pipeline rank that runs neither never
 * holds one); the
 * layers' checks of host inputs and targets before upload; the layers' host state per record (MoE routing), their
 * auxiliary statistics and expert groups. With checkpoint and offload_inputs, the outputs that are some layer's
 * input inside the range live in two alternating device buffers with a host copy each, uploaded again for the
 * recomputation. A layer's parameters (and gradients in backward) must be materialized when it runs, except other
 * ranks' experts. The split backward (model.h's backward_input and backward_weight, a record made with split):
 * each layer that splits (ops->split; a layer with a tied tensor of its own or of another's only in a record made
 * with split_tied, and only when every layer of the model with a tied tensor splits) gets a buffer that keeps its
 * output gradient from the input part to the weight part, and its stash (split_bytes); the others run whole in the
 * input part. Those buffers (and the sink) are a second device allocation, the split area, which a record holds
 * only from its input part to its weight part: made when the input part starts, released when the weight part
 * ends, so a record waiting for its backward costs what it costs without split.
 * The records of the layers that run whole in the input part (zb-h1's tied LM head, whose logits are the largest
 * record of a GPT) are dead once it ends: where they all follow every layer that splits (and without layer
 * checkpointing) they are a third allocation, the whole area, held from the record's forward to the end of its
 * input part, which releases it before it takes the split area: a record waiting for its W costs what the layers
 * that split keep, not the head's logits.
 * With split_tied the tied-gradient contract moves to the weight part: a user's weight part writes the zeroed tied
 * buffer, the owner's weight part adds it before its own (the caller carries it between records in the weight
 * parts' order).
 * Not here: the declaration (seq.c). */
#include <stdlib.h>
#include <string.h>
#include "fsc/nn.h"
#include "seq_impl.h"

typedef struct {
    int B, first, last, ckpt;
    void *mem;
    size_t bytes;
    void *in;            /* input of `first`: raw samples (first 0) or the input stream */
    float **out;         /* (last - first + 1) output of each layer (the output stream of `last` < n - 1) */
    void **rec;          /* (last - first + 1) each layer's record (all the same with ckpt, but a splitting layer's
                          * while the split area is held: its own there) */
    void *shared;        /* ckpt: the one record the layers share */
    void *target;        /* the loss layer's targets */
    float *gout, *gin;   /* gradient streams: w.r.t. the output of `last`, the input of `first` */
    size_t g_off[2];     /* the gradients between layers, alternating: their offsets in the model's scratch (the
                          * layers' work at its start) */
    size_t wbytes;       /* the scratch this record's passes need */
    int counted;         /* counted in the model's records alive (seq_model.nacts) */
    float *host_loss;    /* (B x the loss layer's out_floats) */
    void **state;        /* (last - first + 1) the layers' host state (NULL for most) */
    float **host;        /* (last - first + 1) offload: host copy of out[l], NULL where it stays on the device */
    fsc_grad_term_fn term; /* backward's gradients by source (model.h), NULL: none */
    void *term_ctx;
    float **keep;        /* (last - first + 1) split: the output gradient of each layer that splits (NULL for the
                          * others and the loss layer), kept for the weight part */
    float *sink;         /* split: the input part's sink for a vector's gradient (fsc_layer_call.sink) */
    void **stash;        /* (last - first + 1) split: each splitting layer's split_bytes (NULL without) */
    void *smem;          /* split: the split area (keep, stash, sink) from the input part to the weight part, or NULL
                          * (keep, stash and sink NULL then) */
    size_t sbytes;       /* its bytes */
    int held;            /* split: the input part ran and the weight part has not (smem NULL when sbytes is 0) */
    int whole;           /* split: the records of the layers that run whole in the input part are in the whole area
                          * (whole_fits) */
    void *wmem;          /* whole: the whole area from the forward to the input part's first layer that splits (or its
                          * end), or NULL (those layers' records NULL then) */
    size_t whole_bytes;  /* its bytes */
    int split_tied;      /* split: the layers with tied tensors split too (model.h's split_tied) */
} seq_acts;

static size_t up(size_t b) { return (b + 255) / 256 * 256; }

/* Whether layer l can split: it says so. */
static int can_split(const seq_model *s, int l) { return s->layers[l]->ops->split; }

/* Whether layer l has a tied tensor, of its own (with users) or of another's. */
static int has_tied(const seq_model *s, int l) {
    for (int k = 0; k < s->layers[l]->n_params; k++)
        if (s->tied[l][k] || s->info[s->tensor[l][k]].nusers > 0) return 1;
    return 0;
}

/* Whether the layers with tied tensors split in a record of a: only with split_tied, and only if every layer of
 * the model with a tied tensor can (fsc_seq_splits_tied: an owner and its users split together, whatever records
 * they are in, so that the tied gradient is made and added in the same part). */
static int all_tied_split(const seq_model *s) {
    for (int l = 0; l < s->n; l++)
        if (has_tied(s, l) && !can_split(s, l)) return 0;
    return 1;
}
static int tied_splits(const seq_model *s, const seq_acts *a) { return a->split_tied && all_tied_split(s); }

/* Whether layer l splits its backward in a record of a (a split record): it can, and it has no tied tensor or
 * the tied layers split (a tied gradient crosses layers and stages in one part's order: model.h). */
static int splits(const seq_model *s, const seq_acts *a, int l) {
    return can_split(s, l) && (!has_tied(s, l) || tied_splits(s, a));
}

/* Floats of the sink: twice the largest one-dimensional parameter of a layer of the range that splits (a
 * LayerNorm's weight and bias). */
static size_t sink_floats(const seq_model *s, const seq_acts *a) {
    size_t n = 0;
    for (int l = a->first; l <= a->last; l++)
        for (int k = 0; splits(s, a, l) && k < s->layers[l]->n_params; k++)
            if (s->layers[l]->params[k].ndim == 1 && s->layers[l]->params[k].numel > n)
                n = s->layers[l]->params[k].numel;
    return 2 * n;
}
static size_t rec_bytes(const fsc_layer *a, int B) { return a->ops->rec_bytes ? a->ops->rec_bytes(a, B) : 0; }
static size_t work_bytes(const fsc_layer *a, int B) { return a->ops->work_bytes ? a->ops->work_bytes(a, B) : 0; }

/* Whether layer l's record is in the whole area of a: it runs whole in the input part and keeps a record. */
static int in_whole(const seq_model *s, const seq_acts *a, int l) {
    return a->whole && !splits(s, a, l) && rec_bytes(s->layers[l], a->B) > 0;
}

/* Whether a split record of a (its split_tied set) can keep the records of the layers that run whole in the input
 * part in a whole area: some layer does and keeps a record, all of them follow every layer that splits (the input
 * part runs them first: the whole area goes back before the split area is taken, never both at once), and no layer
 * checkpointing (its layers share one record). */
static int whole_fits(const seq_model *s, const seq_acts *a) {
    if (a->ckpt) return 0;
    int top_split = -1, low_whole = s->n;
    for (int l = a->first; l <= a->last; l++) {
        if (splits(s, a, l)) top_split = l;
        else if (rec_bytes(s->layers[l], a->B) > 0 && l < low_whole) low_whole = l;
    }
    return low_whole < s->n && low_whole > top_split;
}

/* Lay the record out from base (NULL: only count); returns the bytes. */
static size_t layout(const seq_model *s, seq_acts *a, char *base) {
    const size_t B = (size_t)a->B, S = up(B * s->max_stream * sizeof(float));
    size_t at = 0, maxrec = 0, maxwork = 0, maxout = 0;
#define TAKE(ptr, bytes) (ptr = (void *)(base ? base + at : NULL), at += up(bytes))
    TAKE(a->in, a->first == 0 ? B * s->layers[0]->in_bytes : S);
    for (int l = a->first; l < a->last; l++)
        if (s->layers[l]->out_floats > maxout) maxout = s->layers[l]->out_floats;
    void *pp[2] = { NULL, NULL }; /* offload: the alternating buffers of the outputs inside the range */
    if (a->host) TAKE(pp[0], B * maxout * sizeof(float)), TAKE(pp[1], B * maxout * sizeof(float));
    for (int l = a->first; l <= a->last; l++) {
        const fsc_layer *y = s->layers[l];
        const size_t ob = l == a->last && l < s->n - 1 ? S : B * y->out_floats * sizeof(float);
        if (a->host && l < a->last) a->out[l - a->first] = pp[l & 1];
        else TAKE(a->out[l - a->first], ob);
        size_t rb = rec_bytes(y, a->B), wb = work_bytes(y, a->B);
        if (!a->ckpt && !in_whole(s, a, l)) TAKE(a->rec[l - a->first], rb);
        if (rb > maxrec) maxrec = rb;
        if (wb > maxwork) maxwork = wb;
    }
    if (a->ckpt) {
        void *shared;
        TAKE(shared, maxrec);
        for (int l = a->first; l <= a->last; l++) a->rec[l - a->first] = shared;
        a->shared = shared;
    }
    if (a->last == s->n - 1) TAKE(a->target, B * s->layers[a->last]->target_bytes);
    else TAKE(a->gout, S);
    if (a->first > 0) TAKE(a->gin, S);
#undef TAKE
    a->g_off[0] = up(maxwork), a->g_off[1] = a->g_off[0] + up(B * maxout * sizeof(float)); /* the scratch's */
    a->wbytes = a->g_off[1] + up(B * maxout * sizeof(float));
    return at;
}

/* The model's scratch at least `bytes`: a new one (zeroed) in place of a smaller one. A failure leaves none (the
 * old one is released first, so that the two are never held at once): the next pass of a record still alive makes
 * it again (pass_begin). Only between passes. */
static fsc_status scratch_grow(seq_model *s, size_t bytes) {
    if (s->scratch_bytes >= bytes) return FSC_OK;
    fsc_device_release(s->dev, s->scratch), s->scratch = NULL, s->scratch_bytes = 0;
    FSC_TRY(fsc_device_calloc(s->dev, FSC_TAG_WORKSPACE, bytes, &s->scratch));
    s->scratch_bytes = bytes;
    return FSC_OK;
}

/* A pass's scratch (the layers' work, the gradients between layers): the model's, shared by its records (one pass
 * at a time; nothing in it outlives a pass: a split record keeps what its weight part reads in its split area).
 * The layers reach it through s->scratch, never a kept pointer; a pass makes it again if a record's failed growth
 * (scratch_reserve) left none. A pass started while another runs (from one of its hooks) is refused: it would
 * overwrite the gradient the running backward hands from layer to layer. pass_end when the pass returns. */
static fsc_status pass_begin(seq_model *s, seq_acts *a) {
    if (s->in_pass)
        return fsc_error(FSC_ERR_STATE, "sequential model: a pass of this model is in progress (a hook started "
                         "another: its records share one scratch, one pass at a time)");
    FSC_TRY(scratch_grow(s, a->wbytes));
    s->in_pass = 1;
    return FSC_OK;
}
static fsc_status pass_end(seq_model *s, fsc_status st) {
    s->in_pass = 0;
    return st;
}

/* The model's scratch at least a->wbytes (grown between passes: a record is made outside every pass); the record
 * is then counted among those alive (the last one freed releases the scratch). */
static fsc_status scratch_reserve(seq_model *s, seq_acts *a) {
    FSC_TRY(scratch_grow(s, a->wbytes));
    a->counted = 1, s->nacts++;
    return FSC_OK;
}

/* Lay a split record's split area out from base (NULL: only count, and no area: keep, stash and sink NULL). A
 * stash of 0 bytes is not NULL in the area (layers.h: it marks the split's parts); a range whose area would be
 * empty but for such a stash (an LM head without a norm, alone) takes 256 bytes so that it has one. With layer
 * checkpointing each layer that splits also has its own record there: the input part recomputes the layer into it,
 * and the weight part reads it as the input part left it (layers.h: the input part may write gradients over its
 * record) instead of the shared one, which the layers before it overwrite; but the range's first layer with a
 * record keeps the shared one (the input part recomputes none after it that writes there; a held checkpointed
 * record then costs what a full one does); without the area the layers share again. */
static size_t layout_split(const seq_model *s, seq_acts *a, char *base) {
    int keeper = a->first; /* the first layer with a record */
    while (keeper < a->last && !rec_bytes(s->layers[keeper], a->B)) keeper++;
    const size_t B = (size_t)a->B;
    size_t at = 0;
    int stashes = 0;
#define TAKE(ptr, bytes) (ptr = (void *)(base ? base + at : NULL), at += up(bytes))
    for (int l = a->first; l <= a->last; l++) {
        const fsc_layer *y = s->layers[l];
        if (l < s->n - 1 && splits(s, a, l)) TAKE(a->keep[l - a->first], B * y->out_floats * sizeof(float));
        if (splits(s, a, l) && y->ops->split_bytes)
            TAKE(a->stash[l - a->first], y->ops->split_bytes(y, a->B)), stashes++;
        if (a->ckpt && splits(s, a, l) && l != keeper) {
            TAKE(a->rec[l - a->first], rec_bytes(y, a->B));
            if (!base) a->rec[l - a->first] = a->shared;
        }
    }
    TAKE(a->sink, sink_floats(s, a) * sizeof(float));
#undef TAKE
    return at || !stashes ? at : up(1);
}

/* The input part of a split record: its split area, new. */
static fsc_status split_attach(seq_model *s, seq_acts *a) {
    if (a->held) return FSC_OK; /* kept by an input part whose weight part did not run (a failed step) */
    void *mem = NULL;
    if (a->sbytes) FSC_TRY(fsc_device_calloc(s->dev, FSC_TAG_ACTS, a->sbytes, &mem));
    a->smem = mem, a->held = 1; /* no layer of the range keeps anything: no area, the parts still run */
    layout_split(s, a, mem);
    return FSC_OK;
}

/* The weight part is over: the split area is released (not pooled: an idle area would sit beside the next
 * forward's whole area, memory the schedule does not hold; the CUDA device's allocator caches the blocks). */
static void split_detach(seq_model *s, seq_acts *a) {
    if (!a->held) return;
    a->held = 0;
    fsc_device_release(s->dev, a->smem);
    a->smem = NULL;
    layout_split(s, a, NULL);
}

/* Lay a record's whole area out from base (NULL: only count, and the records in it NULL). */
static size_t layout_whole(const seq_model *s, seq_acts *a, char *base) {
    size_t at = 0;
    for (int l = a->first; l <= a->last; l++)
        if (in_whole(s, a, l)) {
            a->rec[l - a->first] = base ? base + at : NULL;
            at += up(rec_bytes(s->layers[l], a->B));
        }
    return at;
}

/* A forward of a record with a whole area: the area, new (kept if a forward took it already: a checkpointed
 * micro-batch's record, given back after its F, is taken again for the next). */
static fsc_status whole_attach(seq_model *s, seq_acts *a) {
    if (!a->whole || a->wmem) return FSC_OK;
    FSC_TRY(fsc_device_calloc(s->dev, FSC_TAG_ACTS, a->whole_bytes, &a->wmem));
    layout_whole(s, a, a->wmem);
    return FSC_OK;
}

/* The input part is past the layers that run whole: the whole area is released (as the split area). */
static void whole_detach(seq_model *s, seq_acts *a) {
    if (!a->wmem) return;
    fsc_device_release(s->dev, a->wmem);
    a->wmem = NULL;
    layout_whole(s, a, NULL);
}

int fsc_seq_splits_tied(void *ctx) { return all_tied_split(ctx); }

/* The tied-gradient buffers of the tensors whose owner or a user lies in layers [first, last], made (zeroed) if they
 * are not yet: model.h's tied_grad exists once a record that reads or writes it does. */
static fsc_status tied_reserve(seq_model *s, int first, int last) {
    for (int t = 0; t < s->m.n_tensors; t++) {
        const fsc_param_info *ti = &s->info[t];
        int in = ti->layer >= first && ti->layer <= last;
        for (int u = 0; u < ti->nusers; u++) in |= ti->users[u] >= first && ti->users[u] <= last;
        if (ti->nusers > 0 && in && !s->tied_grad[t])
            FSC_TRY(fsc_device_calloc(s->dev, FSC_TAG_GRADS, ti->numel * sizeof(float), (void **)&s->tied_grad[t]));
    }
    return FSC_OK;
}

/* A record for o; its device memory *reuse where that is reuse_bytes, the bytes the record needs (taken: *reuse
 * NULL then), else new (*reuse released first, so that the two are never held at once). */
static fsc_status acts_make(seq_model *s, const fsc_model_acts_opts *o, void **reuse, size_t reuse_bytes,
                            fsc_model_acts **out) {
    *out = NULL;
    if (o->B < 1 || o->first < 0 || o->last >= s->n || o->first > o->last)
        return fsc_error(FSC_ERR_INVALID, "sequential model: record for layers %d..%d of %d and %d samples", o->first,
                         o->last, s->n, o->B);
    const size_t most = (size_t)1 << 56, B = (size_t)o->B; /* no record's buffer is that large: the sizes below cannot wrap */
    if (s->max_stream > most / 4 / B)
        return fsc_error(FSC_ERR_INVALID, "sequential model: a record of %d samples: a layer's output of %zu floats a "
                         "sample passes 2^56 bytes", o->B, s->max_stream);
    size_t own = 0; /* the layers' rec_bytes, work_bytes and split_bytes so far */
    for (int l = o->first; l <= o->last; l++) {
        const fsc_layer *y = s->layers[l];
        if (l == 0 && y->in_bytes > most / B)
            return fsc_error(FSC_ERR_INVALID, "sequential model: a record of %d samples: layer 0's input of %zu bytes a "
                             "sample passes 2^56 bytes", o->B, y->in_bytes);
        if (y->out_floats > most / 4 / B)
            return fsc_error(FSC_ERR_INVALID, "sequential model: a record of %d samples: layer %d's output of %zu "
                             "floats a sample passes 2^56 bytes", o->B, l, y->out_floats);
        if (l == s->n - 1 && y->target_bytes > most / B)
            return fsc_error(FSC_ERR_INVALID, "sequential model: a record of %d samples: layer %d's target of %zu "
                             "bytes a sample passes 2^56 bytes", o->B, l, y->target_bytes);
        /* the layers' own sizes, together at most 2^63 (a layer of a program's may compute one wrong: a negative
         * int made a size_t), so that the layout below cannot wrap either */
        const size_t sz[3] = { rec_bytes(y, o->B), work_bytes(y, o->B),
                               o->split && y->ops->split && y->ops->split_bytes ? y->ops->split_bytes(y, o->B) : 0 };
        static const char *const op[3] = { "rec_bytes", "work_bytes", "split_bytes" };
        for (int k = 0; k < 3; own += sz[k], k++)
            if (sz[k] > ((size_t)1 << 63) - own)
                return fsc_error(FSC_ERR_INVALID, "sequential model: layer %d (%s): %s(%d) is %zu, past 2^63 bytes "
                                 "with the record's other layers", l, y->kind, op[k], o->B, sz[k]);
    }
    FSC_TRY(tied_reserve(s, o->first, o->last));
    seq_acts *a = calloc(1, sizeof *a);
    const int nl = o->last - o->first + 1, offload = o->checkpoint && o->offload_inputs;
    if (a) {
        if (o->split) a->keep = calloc((size_t)nl, sizeof *a->keep), a->stash = calloc((size_t)nl, sizeof *a->stash);
        a->out = calloc((size_t)nl, sizeof *a->out), a->rec = calloc((size_t)nl, sizeof *a->rec);
        a->state = calloc((size_t)nl, sizeof *a->state);
        a->first = o->first, a->last = o->last; /* for fsc_seq_acts_free */
        if (offload) a->host = calloc((size_t)nl, sizeof *a->host);
    }
    if (a && o->last == s->n - 1)
        a->host_loss = malloc((size_t)o->B * s->layers[o->last]->out_floats * sizeof(float) + 1);
    fsc_status st = FSC_OK;
    for (int l = o->first; a && a->host && l < o->last && st == FSC_OK; l++)
        if (!(a->host[l - o->first] = malloc((size_t)o->B * s->layers[l]->out_floats * sizeof(float))))
            st = FSC_ERR_NOMEM;
    if (!a || !a->out || !a->rec || !a->state || (offload && !a->host) || (o->split && (!a->keep || !a->stash)) || st != FSC_OK ||
        (o->last == s->n - 1 && !a->host_loss)) {
        fsc_seq_acts_free(s, (fsc_model_acts *)a);
        return fsc_error(FSC_ERR_NOMEM, "sequential model: out of host memory");
    }
    a->B = o->B, a->ckpt = o->checkpoint, a->split_tied = o->split && o->split_tied;
    a->term = o->grad_term, a->term_ctx = o->grad_term_ctx;
    if (o->split) a->whole = whole_fits(s, a);
    a->bytes = layout(s, a, NULL);
    if (o->split) a->sbytes = layout_split(s, a, NULL);
    if (a->whole) a->whole_bytes = layout_whole(s, a, NULL);
    if (*reuse && reuse_bytes == a->bytes) {
        a->mem = *reuse, *reuse = NULL;
    } else {
        fsc_device_release(s->dev, *reuse), *reuse = NULL;
        st = fsc_device_calloc(s->dev, FSC_TAG_ACTS, a->bytes, &a->mem);
    }
    for (int l = o->first; l <= o->last && st == FSC_OK; l++) {
        fsc_layer *y = s->layers[l];
        if (y->ops->state_create) st = y->ops->state_create(y, s->dev, o->B, &a->state[l - o->first]);
    }
    if (st == FSC_OK) st = scratch_reserve(s, a);
    if (st != FSC_OK) {
        fsc_seq_acts_free(s, (fsc_model_acts *)a);
        return st;
    }
    layout(s, a, a->mem);
    *out = (fsc_model_acts *)a;
    return FSC_OK;
}

fsc_status fsc_seq_acts_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    void *none = NULL;
    return acts_make(ctx, o, &none, 0, out);
}

/* old's device memory, unless its split area is still held (a failed step: freed with it), for the new record */
fsc_status fsc_seq_acts_remake(void *ctx, fsc_model_acts *old, const fsc_model_acts_opts *o, fsc_model_acts **out) {
    seq_model *s = ctx;
    seq_acts *x = (seq_acts *)old;
    void *mem = NULL;
    size_t bytes = 0;
    if (x && !x->held) mem = x->mem, bytes = x->bytes, x->mem = NULL;
    fsc_seq_acts_free(ctx, old);
    const fsc_status st = acts_make(s, o, &mem, bytes, out);
    fsc_device_release(s->dev, mem); /* not taken: acts_make failed before its allocation */
    return st;
}

void fsc_seq_acts_free(void *ctx, fsc_model_acts *am) {
    seq_model *s = ctx;
    seq_acts *a = (seq_acts *)am;
    if (!a) return;
    fsc_device_release(s->dev, a->mem);
    fsc_device_release(s->dev, a->smem);
    fsc_device_release(s->dev, a->wmem);
    for (int l = a->first; a->state && l <= a->last; l++) {
        const fsc_layer *y = s->layers[l];
        if (a->state[l - a->first] && y->ops->state_free) y->ops->state_free(y, a->state[l - a->first]);
    }
    for (int l = a->first; a->host && l <= a->last; l++) free(a->host[l - a->first]);
    if (a->counted && --s->nacts == 0) /* the last record: the scratch goes with it */
        fsc_device_release(s->dev, s->scratch), s->scratch = NULL, s->scratch_bytes = 0;
    free(a->out), free(a->rec), free(a->host_loss), free(a->state), free(a->host), free(a->keep), free(a->stash);
    free(a);
}

size_t fsc_seq_acts_bytes(void *ctx, const fsc_model_acts *am) {
    (void)ctx;
    const seq_acts *a = (const seq_acts *)am;
    /* a split record holds its split area from B to W, its whole area from F to B */
    return a->bytes + (a->smem ? a->sbytes : 0) + (a->wmem ? a->whole_bytes : 0);
}

fsc_status fsc_seq_set_batch(void *ctx, fsc_model_acts *am, const void *inputs, const void *targets) {
    seq_model *s = ctx;
    seq_acts *a = (seq_acts *)am;
    const size_t B = (size_t)a->B;
    if (a->first == 0) {
        if (!inputs) return fsc_error(FSC_ERR_INVALID, "sequential model: the first layer needs inputs");
        if (s->layers[0]->ops->check_input) FSC_TRY(s->layers[0]->ops->check_input(s->layers[0], inputs, a->B));
        FSC_TRY(fsc_device_upload(s->dev, a->in, inputs, B * s->layers[0]->in_bytes));
    }
    if (a->last == s->n - 1) {
        if (!targets) return fsc_error(FSC_ERR_INVALID, "sequential model: the loss layer needs targets");
        const fsc_layer *y = s->layers[a->last];
        if (y->ops->check_target) FSC_TRY(y->ops->check_target(y, targets, a->B));
        FSC_TRY(fsc_device_upload(s->dev, a->target, targets, B * s->layers[a->last]->target_bytes));
    }
    return FSC_OK;
}

float *fsc_seq_stream(void *ctx, fsc_model_acts *am, fsc_stream which) {
    seq_model *s = ctx;
    seq_acts *a = (seq_acts *)am;
    switch (which) {
    case FSC_STREAM_INPUT: return a->first > 0 ? a->in : NULL;
    case FSC_STREAM_OUTPUT: return a->last < s->n - 1 ? a->out[a->last - a->first] : NULL;
    case FSC_STREAM_GRAD_OUTPUT: return a->gout;
    default: return a->gin;
    }
}

/* The call of layer l: its parameters and gradients as the engine has them now (a user of a tied tensor
 * accumulates into the tied buffer), in the model's call tables (one call at a time). Every parameter but other
 * ranks' experts must be materialized, and with grads its gradient bound. */
static fsc_status make_call(const seq_model *s, const seq_acts *a, int l, int grads, fsc_layer_call *c) {
    const fsc_layer *y = s->layers[l];
    for (int k = 0; k < y->n_params; k++) {
        const int t = s->tensor[l][k];
        s->cparam[k] = s->param[t];
        s->cgrad[k] = s->tied[l][k] ? s->tied_grad[t] : s->grad[t];
        if (s->info[t].expert >= 0) continue; /* the layer knows which experts it holds */
        if (!s->cparam[k])
            return fsc_error(FSC_ERR_STATE, "sequential model: parameter %s is not materialized (NULL) when layer %d "
                             "runs", s->info[t].name, l);
        if (grads && !s->cgrad[k])
            return fsc_error(FSC_ERR_STATE, "sequential model: gradient of %s is not bound (NULL) when layer %d runs "
                             "backward", s->info[t].name, l);
    }
    *c = (fsc_layer_call){ .dev = s->dev, .B = a->B, .param = s->cparam, .grad = s->cgrad,
                           .rec = a->rec[l - a->first], .work = s->scratch, .target = a->target,
                           .state = a->state[l - a->first] };
    return FSC_OK;
}

static const void *input_of(const seq_acts *a, int l) { return l == a->first ? a->in : a->out[l - 1 - a->first]; }

static fsc_status hook(fsc_status (*f)(void *, int), void *ctx, int l) { return f ? f(ctx, l) : FSC_OK; }

/* Hooks NULL: none (a caller of the model's own, as a generator, passes no hooks) */
static const fsc_model_hooks no_hooks = { 0 };

static fsc_status layer_forward(const seq_model *s, seq_acts *a, int l) {
    fsc_layer_call c;
    FSC_TRY(make_call(s, a, l, 0, &c));
    return s->layers[l]->ops->forward(s->layers[l], &c, a->out[l - a->first], input_of(a, l));
}

/* Offload: the output of l to its host copy, or the host copy back (for the recomputation of l + 1). */
static fsc_status offload(const seq_model *s, seq_acts *a, int l, int back) {
    float *h = a->host && l >= a->first && l < a->last ? a->host[l - a->first] : NULL;
    if (!h) return FSC_OK;
    const size_t bytes = (size_t)a->B * s->layers[l]->out_floats * sizeof(float);
    return back ? fsc_device_upload(s->dev, a->out[l - a->first], h, bytes)
                : fsc_device_download(s->dev, h, a->out[l - a->first], bytes);
}

static fsc_status forward_layers(seq_model *s, seq_acts *a, const fsc_model_hooks *h, double *loss_sum) {
    if (!h) h = &no_hooks;
    for (int l = a->first; l <= a->last; l++) {
        FSC_TRY(hook(h->pre_forward, h->ctx, l));
        FSC_TRY(layer_forward(s, a, l));
        FSC_TRY(offload(s, a, l, 0));
        if (l == s->n - 1 && loss_sum) { /* the loss: every loss value of the micro-batch, summed in order */
            const size_t nv = (size_t)a->B * s->layers[l]->out_floats;
            FSC_TRY(fsc_device_download(s->dev, a->host_loss, a->out[l - a->first], nv * sizeof(float)));
            double sum = 0;
            for (size_t i = 0; i < nv; i++) sum += a->host_loss[i];
            *loss_sum = sum;
        }
        FSC_TRY(hook(h->post_forward, h->ctx, l));
    }
    return FSC_OK;
}

fsc_status fsc_seq_forward(void *ctx, fsc_model_acts *am, const fsc_model_hooks *h, double *loss_sum) {
    seq_model *s = ctx;
    seq_acts *a = (seq_acts *)am;
    if (loss_sum) *loss_sum = 0;
    FSC_TRY(pass_begin(s, a));
    const fsc_status st = whole_attach(s, a);
    return pass_end(s, st == FSC_OK ? forward_layers(s, a, h, loss_sum) : st);
}

/* Which part of the backward a pass runs: all of it, the input part, or the weight part (split records). */
enum { PART_WHOLE = 0, PART_INPUT, PART_WEIGHT };

/* Layer l's output gradient: NULL for the loss layer, the kept copy in a split record (the weight part and the
 * input part once the later layer wrote it), else the record's stream or alternating buffer. */
static float *dout_of(const seq_model *s, const seq_acts *a, int l) {
    if (l == s->n - 1) return NULL;
    if (a->keep && a->keep[l - a->first]) return a->keep[l - a->first];
    return l == a->last ? a->gout : (float *)((char *)s->scratch + a->g_off[(l + 1) & 1]);
}

/* Layer l's input gradient: the range's stream for `first`, the previous layer's output gradient otherwise. */
static float *dinp_of(const seq_model *s, const seq_acts *a, int l) {
    return l == a->first ? a->gin : dout_of(s, a, l - 1);
}

/* One layer's part: the whole backward, or the input or the weight part of a layer that splits. */
static fsc_status layer_backward(const seq_model *s, seq_acts *a, int l, int part, float dscale) {
    const fsc_layer *y = s->layers[l];
    const int split = a->keep && splits(s, a, l);
    if (part == PART_WEIGHT && !split) return FSC_OK; /* it ran whole in the input part */
    if (split && l == a->last && l < s->n - 1 && part == PART_INPUT) /* a caller may reuse its streams (model.h) */
        FSC_TRY(fsc_device_copy(s->dev, a->keep[l - a->first], a->gout,
                                (size_t)a->B * y->out_floats * sizeof(float)));
    if (part == PART_INPUT && split && !dinp_of(s, a, l) && !y->ops->split_bytes)
        return FSC_OK; /* no input gradient to compute (a layer with a stash still fills it) */
    fsc_layer_call c;
    FSC_TRY(make_call(s, a, l, !(split && part == PART_INPUT), &c));
    if (!(split && part == PART_INPUT))
        for (int k = 0; k < y->n_params; k++) { /* an owner adds its users' gradient before its own */
            const int t = s->tensor[l][k];
            if (!s->tied[l][k] && s->info[t].nusers > 0)
                FSC_TRY(fsc_residual_backward(s->dev, s->grad[t], NULL, s->tied_grad[t], s->info[t].numel));
        }
    if (split && part == PART_INPUT) { /* no gradient in the input part */
        for (int k = 0; k < y->n_params; k++) s->cgrad[k] = NULL;
        c.sink = a->sink;
    }
    if (split) c.stash = a->stash[l - a->first];
    c.dscale = dscale;
    c.term = a->term, c.term_ctx = a->term_ctx; /* an MoE layer's whole backward or weight part hands its terms */
    float *dinp = split && part == PART_WEIGHT ? NULL : dinp_of(s, a, l);
    return y->ops->backward(y, &c, dinp, dout_of(s, a, l), input_of(a, l));
}

/* The input part of a record with a whole area reaches layer l, the first that splits (the layers that run whole
 * are behind it): the whole area goes back and the split area is taken, and l's output gradient, which the layer
 * above wrote where a record without the split area has it, moves into the area's copy (the range's last layer
 * copies its stream in layer_backward). A split area still held (a failed step's) had it written there. */
static fsc_status whole_to_split(seq_model *s, seq_acts *a, int l) {
    const int had = a->held;
    const float *g = dout_of(s, a, l);
    whole_detach(s, a);
    FSC_TRY(split_attach(s, a));
    float *keep = a->keep[l - a->first];
    if (had || l == a->last || !keep || keep == g) return FSC_OK;
    return fsc_device_copy(s->dev, keep, g, (size_t)a->B * s->layers[l]->out_floats * sizeof(float));
}

static fsc_status backward_layers(seq_model *s, seq_acts *a, const fsc_model_hooks *h, float dscale, int part) {
    if (!h) h = &no_hooks;
    /* tied tensors used by a layer of the range: their users' gradients start from zero (model.h: a user
     * overwrites the buffer; several users of one range add up), in the part that makes them: the weight part
     * when the tied layers split, else the input part */
    const int tied_part = a->keep && tied_splits(s, a) ? PART_WEIGHT : part == PART_WHOLE ? PART_WHOLE : PART_INPUT;
    for (int t = 0; t < s->m.n_tensors && part == tied_part; t++)
        for (int u = 0; u < s->info[t].nusers; u++) {
            const int l = s->info[t].users[u];
            if (l < a->first || l > a->last) continue;
            FSC_TRY(fsc_device_memset(s->dev, s->tied_grad[t], 0, s->info[t].numel * sizeof(float)));
            break;
        }
    for (int l = a->last; l >= a->first; l--) {
        FSC_TRY(hook(h->pre_backward, h->ctx, l));
        /* the same kernels on the same input: the same record; the weight part finds a splitting layer's record
         * where its input part left it (layout_split), and needs its input back where offload took it */
        if (a->ckpt && (part != PART_WEIGHT || splits(s, a, l))) FSC_TRY(offload(s, a, l - 1, 1));
        if (a->ckpt && part != PART_WEIGHT) FSC_TRY(layer_forward(s, a, l));
        if (part == PART_INPUT && a->whole && splits(s, a, l)) FSC_TRY(whole_to_split(s, a, l));
        FSC_TRY(layer_backward(s, a, l, part, dscale));
        FSC_TRY(hook(h->post_backward, h->ctx, l));
    }
    return FSC_OK;
}

static fsc_status run_backward(seq_model *s, seq_acts *a, const fsc_model_hooks *h, float dscale, int part) {
    FSC_TRY(pass_begin(s, a));
    return pass_end(s, backward_layers(s, a, h, dscale, part));
}

fsc_status fsc_seq_backward(void *ctx, fsc_model_acts *am, const fsc_model_hooks *h, float dscale) {
    seq_acts *a = (seq_acts *)am;
    if (a->keep)
        return fsc_error(FSC_ERR_STATE, "sequential model: a record made with split runs backward_input and "
                         "backward_weight, not backward");
    return run_backward(ctx, a, h, dscale, PART_WHOLE);
}

fsc_status fsc_seq_backward_input(void *ctx, fsc_model_acts *am, const fsc_model_hooks *h, float dscale) {
    seq_acts *a = (seq_acts *)am;
    if (!a->keep) return fsc_error(FSC_ERR_STATE, "sequential model: backward_input needs a record made with split");
    if (a->whole && !a->wmem && !a->held)
        return fsc_error(FSC_ERR_STATE, "sequential model: backward_input of a record whose forward did not run");
    if (!a->whole) FSC_TRY(split_attach(ctx, a)); /* else at the first layer that splits */
    FSC_TRY(run_backward(ctx, a, h, dscale, PART_INPUT));
    whole_detach(ctx, a);
    return split_attach(ctx, a); /* a range none of whose layers splits */
}

fsc_status fsc_seq_backward_weight(void *ctx, fsc_model_acts *am, const fsc_model_hooks *h, float dscale) {
    seq_acts *a = (seq_acts *)am;
    if (!a->keep) return fsc_error(FSC_ERR_STATE, "sequential model: backward_weight needs a record made with split");
    if (!a->held)
        return fsc_error(FSC_ERR_STATE, "sequential model: backward_weight of a record whose backward_input did not "
                         "run");
    FSC_TRY(run_backward(ctx, a, h, dscale, PART_WEIGHT));
    split_detach(ctx, a);
    return FSC_OK;
}

const float *fsc_seq_logits(void *ctx, const fsc_model_acts *ma, int *vocab) {
    const seq_model *s = ctx;
    const seq_acts *a = (const seq_acts *)ma;
    const fsc_layer *y = s->layers[s->n - 1];
    *vocab = 0;
    if (!a || a->last != s->n - 1 || !y->ops->logits || !a->rec[a->last - a->first]) return NULL; /* whole area gone */
    return y->ops->logits(y, a->rec[a->last - a->first], a->B, vocab);
}

const float *fsc_seq_logits_part(void *ctx, const fsc_model_acts *ma, fsc_logits_part *p) {
    const seq_model *s = ctx;
    const seq_acts *a = (const seq_acts *)ma;
    const fsc_layer *y = s->layers[s->n - 1];
    *p = (fsc_logits_part){ 0 };
    if (!a || a->last != s->n - 1 || !y->ops->logits_part || !a->rec[a->last - a->first]) return NULL;
    return y->ops->logits_part(y, a->rec[a->last - a->first], a->B, p);
}

void fsc_seq_aux_stats(void *ctx, const fsc_model_acts *am, fsc_model_aux *out) {
    const seq_model *s = ctx;
    const seq_acts *a = (const seq_acts *)am;
    memset(out, 0, sizeof *out);
    for (int l = a->first; l <= a->last; l++) /* in layer order */
        if (s->layers[l]->ops->aux) s->layers[l]->ops->aux(s->layers[l], a->state[l - a->first], out);
}

void fsc_seq_aux_layers(void *ctx, const fsc_model_acts *am, fsc_model_aux *out) {
    const seq_model *s = ctx;
    const seq_acts *a = (const seq_acts *)am;
    for (int l = a->first; l <= a->last; l++) {
        memset(&out[l - a->first], 0, sizeof *out);
        if (s->layers[l]->ops->aux) s->layers[l]->ops->aux(s->layers[l], a->state[l - a->first], &out[l - a->first]);
    }
}

fsc_status fsc_seq_set_expert_group(void *ctx, fsc_comm *ep) {
    seq_model *s = ctx;
    for (int l = 0; l < s->n; l++)
        if (s->layers[l]->ops->set_expert_group) FSC_TRY(s->layers[l]->ops->set_expert_group(s->layers[l], ep));
    return FSC_OK;
}

void *fsc_seq_acts_state(const fsc_model_acts *am, int l) {
    const seq_acts *a = (const seq_acts *)am;
    return a && l >= a->first && l <= a->last ? a->state[l - a->first] : NULL;
}
