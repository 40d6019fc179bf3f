/* Private: the tensor-parallel GPT's state, shared by tp_gpt.c (description, slices, files) and
 * tp_gpt_run.c (forward and backward). */
#ifndef FSC_TP_IMPL_H
#define FSC_TP_IMPL_H
#include "fsc/tp.h"
#include "fsc/safetensors.h"

/* The tensor-parallel GPT on group tp as a model of model.h (tp_engine.c): its tensors this rank's slices with
 * model.h's split fields; it owns the GPT (fsc_model_free). Built by the GPT's engine builder (gpt_engine.c). */
fsc_status tp_gpt_model_create(fsc_device *dev, fsc_comm *tp, const fsc_gpt_config *cfg, int sp, fsc_model **out);

enum { TP_REPLICATED = FSC_SPLIT_NONE, TP_SPLIT_ROWS = FSC_SPLIT_ROWS, TP_SPLIT_COLS = FSC_SPLIT_COLS };

/* A tensor and this rank's slice of it. Column splits cut the last dimension into `parts` equal parts
 * (3 for c_attn: Q, K, V) and take slice `rank` of each, so a rank's Q, K and V columns are its heads. */
typedef struct {
    int split;              /* TP_REPLICATED, TP_SPLIT_ROWS (dim 0), TP_SPLIT_COLS (last dim) */
    int parts;              /* column parts (1, or 3 for c_attn) */
    fsc_param_info full;    /* HF name and shape */
    fsc_param_info local;   /* this rank's slice (same name) */
    size_t off;             /* in the flat local buffers */
} tp_tensor;

/* A run of consecutive elements: local [local, local + n) is full [full, full + n). */
typedef struct {
    size_t local, full, n;
} tp_run;

/* What one block's forward keeps for backward (N = B T rows, Nl rows per sequence shard). */
typedef struct {
    const float *inp;            /* (Nl, C) block input, a stream of the record */
    float *ln1, *ln1_mean, *ln1_rstd; /* (Nl, C), (Nl), (Nl) */
    float *ln1f;                 /* (N, C) gathered ln1 (sp), else = ln1 */
    fsc_attention_rec attn;      /* the rank's NHl heads */
    float *atty;                 /* (N, Cl) */
    float *res2;                 /* (Nl, C) */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *ln2f;                 /* (N, C) */
    float *fch, *fch_gelu;       /* (N, 4Cl) */
} tp_block_rec;

/* The record of one micro-batch for layers [first, last] (0 embedding, 1..L blocks, L+1 head), as
 * fsc_gpt_acts is for the unsharded GPT: several may be in flight (a pipeline stage). */
typedef struct {
    int B, first, last, layers;
    size_t N, Nl;
    float *mem;                  /* the one device allocation, FSC_TAG_ACTS */
    size_t bytes;
    int32_t *tok;                /* (N) local token ids (fsc_tp_vocab_localize); first == 0 */
    int32_t *tgt;                /* (N) local targets (the cross entropy's record); head */
    const int32_t *host_tgt;     /* the caller's targets, read by the head's forward */
    float **x;                   /* L + 1 streams (Nl, C): x[j] the output of layer j; x[first - 1] the
                                  * input when first > 0; NULL outside the range */
    tp_block_rec *blk;           /* L, those of blocks in range laid out */
    float *lnf, *lnf_mean, *lnf_rstd, *lnff; /* (Nl, C), (Nl), (Nl), (N, C); head */
    float *logits;               /* (N, Vl + 1); head */
    float *losses, *q;           /* (N); head */
    float *dres;                 /* (Nl, C) the gradient stream */
    float *work;                 /* scratch */
    fsc_tp_embedding_rec erec;
    fsc_tp_xent_rec xrec;
    int batch_set, fwd_done;
} tp_acts;

struct fsc_tp_gpt {
    fsc_gpt_config cfg;
    fsc_device *dev;
    fsc_comm *tp;
    int size, rank, sp;
    int C, Cl, NHl, Vl, v0;
    uint64_t seed;
    int n_tensors;
    tp_tensor *t;
    size_t P;                    /* local floats */
    float *params, *grads;       /* (P) FSC_TAG_PARAMS, FSC_TAG_GRADS; NULL when bound (the engine's
                                  * strategy owns the memory and points param/grad into it) */
    float **param, **grad;       /* per tensor, into params / grads or the strategy's buffers */
    size_t *roff;                /* sp: per tensor, the layer norm's offset in rgrad (SIZE_MAX: not one) */
    float *rgrad;                /* sp: partial layer-norm gradients ((4 L + 2) C), summed over the group
                                  * at the end of each layer's backward */
    size_t nrgrad;
    float *dwte_head;            /* (Vl, C) the head's part of the wte gradient */
    tp_acts *acts;               /* the whole model, for fsc_tp_gpt_forward / backward */
    fsc_param_info *linfo;       /* per tensor, this rank's slice (local shapes): view.info */
    fsc_gpt view;                /* the slices as a fsc_gpt (local shapes; param, grad, dwte_head shared) */
};

/* Number of runs of tensor t's slice on rank r, and run k. */
size_t tp_num_runs(const tp_tensor *t);
tp_run tp_run_at(const tp_tensor *t, int r, int size, size_t k);

/* Values of elements [first, first + n) of this rank's slice of tensor i from the keyed RNG (host out). */
void tp_init_local(const fsc_tp_gpt *m, int i, size_t first, size_t n, float *out);
/* Read elements [first, first + n) of this rank's slice of tensor i from a full-weights file entry. */
fsc_status tp_read_local(const fsc_tp_gpt *m, fsc_st_file *f, const fsc_st_entry *e, int i, size_t first, size_t n,
                         float *out);
/* Collective over the tensor group: the local flat vector src (device, tensor order of the slices) as the
 * full model's flat vector on tensor rank 0 (host may be NULL elsewhere). */
fsc_status tp_gather_flat(fsc_tp_gpt *m, const float *src, float *host);

/* Created without parameter and gradient memory: a strategy binds param[i] and grad[i] (tp_engine.c). */
fsc_status tp_gpt_create_bound(fsc_device *dev, fsc_comm *tp, const fsc_gpt_config *cfg, const fsc_tp_opts *opts,
                               uint64_t seed, fsc_tp_gpt **out);

/* Records and running (tp_gpt_run.c), with gpt.h's contract: hooks around every layer, boundary streams,
 * dwte_head left for the caller by a range with the head but not the embedding and added by a range with
 * the embedding. */
fsc_status tp_acts_create(fsc_tp_gpt *m, int B, int first, int last, tp_acts **out);
void tp_acts_free(fsc_device *dev, tp_acts *a);
fsc_status tp_acts_set_batch(fsc_tp_gpt *m, tp_acts *a, const int32_t *tokens, const int32_t *targets);
fsc_status tp_forward(fsc_tp_gpt *m, tp_acts *a, const fsc_gpt_hooks *h, double *loss_sum);
fsc_status tp_backward(fsc_tp_gpt *m, tp_acts *a, const fsc_gpt_hooks *h, float dscale);

#endif
