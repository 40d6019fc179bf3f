/* Private: the tensor-parallel GPT's state, shared by tp_gpt.c (description, slices, files) and
 * tp_gpt_run.c (forward and backward). */
#ifndef FSC_TP_IMPL_H
#define FSC_TP_IMPL_H
#include "fsc/tp.h"

enum { TP_REPLICATED = 0, TP_SPLIT_ROWS, TP_SPLIT_COLS };

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

typedef struct {
    int B;
    size_t N, Nl;
    float *mem;                  /* the one device allocation, FSC_TAG_ACTS */
    int32_t *tok;                /* (N) local token ids (fsc_tp_vocab_localize) */
    int32_t *tgt;                /* (N) local targets (the cross entropy's record) */
    float **x;                   /* L + 1 streams (Nl, C): x[0] embedding output, x[l] block l's */
    tp_block_rec *blk;           /* L */
    float *lnf, *lnf_mean, *lnf_rstd, *lnff; /* (Nl, C), (Nl), (Nl), (N, C) */
    float *logits;               /* (N, Vl + 1) */
    float *losses, *q;           /* (N) */
    float *dres;                 /* (Nl, C) the gradient stream */
    float *work;                 /* scratch */
    fsc_tp_embedding_rec erec;
    fsc_tp_xent_rec xrec;
    int fwd_done;
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
    float *params, *grads;       /* (P) FSC_TAG_PARAMS, FSC_TAG_GRADS */
    float **param, **grad;       /* per tensor, into params / grads */
    float **gacc;                /* per tensor: where backward accumulates (grad, or rgrad under sp) */
    float *rgrad;                /* sp: partial layer-norm gradients ((4 L + 2) C), summed over the group */
    size_t nrgrad;
    float *dwte_head;            /* (Vl, C) the head's part of the wte gradient */
    tp_acts *acts;               /* for the last micro-batch size */
};

/* Number of runs of tensor t's slice on rank r, and run k. */
size_t tp_num_runs(const tp_tensor *t);
tp_run tp_run_at(const tp_tensor *t, int r, int size, size_t k);

void tp_acts_free(fsc_device *dev, tp_acts *a);

#endif
