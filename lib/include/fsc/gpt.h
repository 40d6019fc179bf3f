/* A GPT-2 model built from the modules in nn.h.
 *
 * The model is a sequence of L+2 layers: layer 0 the token + position embedding, layers 1..L the
 * pre-LayerNorm transformer blocks, layer L+1 the head (final LayerNorm, output projection tied to the
 * token embedding, softmax cross entropy). Parallel wrappers hook into the layer boundaries; pipelines
 * run a range of layers.
 *
 * Parameters are tensors in Hugging Face GPT-2 order, names and shapes (fsc_gpt_param_info); linear
 * weights are stored [in, out] as HF's Conv1D, so the file layout is the memory layout. The model owns no
 * parameter memory: m->param[i] and m->grad[i] are device pointers that single-rank code points into one
 * flat buffer (fsc_gpt_bind_flat) and FSDP points into each unit's gathered buffer while it is gathered.
 *
 * Tied embedding: the head's gradient with respect to wte goes into m->dwte_head (overwritten by every
 * head backward); the embedding backward adds it to grad[wte] before its own token rows. Accumulation
 * order is therefore the same whether the head and the embedding run on one rank or on two pipeline stages.
 * A record whose range holds layer 0 but not the head adds whatever m->dwte_head holds (the caller puts the
 * head stage's dwte_head there; fsc_gpt_create zeroes it); a record with the head but not layer 0 leaves
 * the head's part in m->dwte_head for the caller. */
#ifndef FSC_GPT_H
#define FSC_GPT_H
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"

typedef struct {
    int layers, dim, heads, seq, vocab;
} fsc_gpt_config;

/* Parameters per block, in HF order. */
#define FSC_GPT_BLOCK_PARAMS 12
enum {
    FSC_P_WTE = 0, FSC_P_WPE = 1, /* then 12 per block, then ln_f.weight, ln_f.bias */
};
enum { /* offsets inside a block */
    FSC_B_LN1_W = 0, FSC_B_LN1_B, FSC_B_ATTN_W, FSC_B_ATTN_B, FSC_B_APROJ_W, FSC_B_APROJ_B,
    FSC_B_LN2_W, FSC_B_LN2_B, FSC_B_FC_W, FSC_B_FC_B, FSC_B_MPROJ_W, FSC_B_MPROJ_B
};

typedef struct {
    char name[64];       /* "h.3.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2];    /* HF shape */
    size_t numel;
    int layer;           /* the layer that owns it: 0 embedding, 1..L blocks, L+1 head (wte: 0) */
} fsc_param_info;

/* Clear error for impossible configurations (dim % heads, sizes <= 0, ...). */
fsc_status fsc_gpt_config_validate(const fsc_gpt_config *c);
int fsc_gpt_num_tensors(const fsc_gpt_config *c);            /* 2 + 12 L + 2 */
fsc_status fsc_gpt_param_info(const fsc_gpt_config *c, int i, fsc_param_info *out);
size_t fsc_gpt_num_params(const fsc_gpt_config *c);           /* total elements */
int fsc_gpt_param_index(const fsc_gpt_config *c, const char *name); /* -1 if unknown */
/* Index of the first tensor of block b (0-based): 2 + 12 b; of ln_f.weight: 2 + 12 L. */
int fsc_gpt_block_first_tensor(const fsc_gpt_config *c, int b);

/* Initial values of elements [first, first+n) of tensor i, from the keyed RNG (seed, name, index):
 * weights N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2L)), biases 0,
 * LayerNorm weights 1. Host memory. */
void fsc_gpt_init_values(const fsc_gpt_config *c, uint64_t seed, int i, size_t first, size_t n, float *out);

typedef struct fsc_gpt {
    fsc_gpt_config cfg;
    fsc_device *dev;
    int n_tensors;
    fsc_param_info *info;   /* n_tensors */
    float **param;          /* n_tensors device pointers, NULL while not materialized */
    float **grad;           /* n_tensors device pointers, NULL while not materialized */
    float *dwte_head;       /* (V, C) head part of the wte gradient, FSC_TAG_GRADS */
} fsc_gpt;

fsc_status fsc_gpt_create(fsc_device *dev, const fsc_gpt_config *cfg, fsc_gpt **out);
void fsc_gpt_free(fsc_gpt *m);
/* Point param[i]/grad[i] into flat buffers laid out in tensor order (offsets = prefix sums of numel).
 * grads may be NULL (inference). */
void fsc_gpt_bind_flat(fsc_gpt *m, float *params, float *grads);

/* Hooks called around every layer by fsc_gpt_forward/fsc_gpt_backward (any may be NULL). */
typedef struct {
    void *ctx;
    fsc_status (*pre_forward)(void *ctx, int layer);
    fsc_status (*post_forward)(void *ctx, int layer);
    fsc_status (*pre_backward)(void *ctx, int layer);
    fsc_status (*post_backward)(void *ctx, int layer);
} fsc_gpt_hooks;

/* Activations of one micro-batch (B sequences of T tokens) for layers [first, last]: the per-call saved
 * record, one device allocation under FSC_TAG_ACTS (scratch for backward included). With checkpoint set,
 * blocks keep only their input and recompute their forward in backward, bit-identically, right after the
 * block's pre_backward hook (no forward hooks are called for the recomputation). */
typedef struct fsc_gpt_acts fsc_gpt_acts;
typedef struct {
    int B, T;
    int first, last;     /* layer range; 0 and L+1 for the whole model */
    int checkpoint;      /* recompute blocks in backward */
    int offload_inputs;  /* with checkpoint: keep block inputs in host memory */
} fsc_gpt_acts_opts;
fsc_status fsc_gpt_acts_create(fsc_gpt *m, const fsc_gpt_acts_opts *o, fsc_gpt_acts **out);
void fsc_gpt_acts_free(fsc_gpt_acts *a);

/* Set the micro-batch: host tokens and targets (B*T each; targets may be NULL if the head is not in range). */
fsc_status fsc_gpt_acts_set_batch(fsc_gpt_acts *a, const int32_t *tokens, const int32_t *targets);
/* The stage boundary streams (device pointers, (B,T,C)): the input of layer `first` when first > 0,
 * the output of layer `last` when last < L+1, the gradient w.r.t. the output of `last` (set before
 * backward when last < L+1) and the gradient w.r.t. the input of `first` (after backward, first > 0).
 * NULL where the range has no such boundary. The input must keep its contents until backward is done.
 * grad_output and grad_input are the same buffer (the gradient stream is updated in place): read the
 * gradient input before writing the next gradient output into this record. */
float *fsc_gpt_acts_input(fsc_gpt_acts *a);
float *fsc_gpt_acts_output(fsc_gpt_acts *a);
float *fsc_gpt_acts_grad_output(fsc_gpt_acts *a);
float *fsc_gpt_acts_grad_input(fsc_gpt_acts *a);

/* Run layers [first, last] forward. If the head is in range, *loss_sum receives the sum (in double,
 * ascending token order) of the B*T per-token losses; otherwise 0. */
fsc_status fsc_gpt_forward(fsc_gpt *m, fsc_gpt_acts *a, const fsc_gpt_hooks *h, double *loss_sum);
/* Run layers [last .. first] backward, accumulating (+=) into m->grad. dscale multiplies the per-token
 * loss gradient: pass loss_scale / (global_batch * T) for the mean over the global batch.
 * Backward runs once per forward (FSC_ERR_STATE otherwise). */
fsc_status fsc_gpt_backward(fsc_gpt *m, fsc_gpt_acts *a, const fsc_gpt_hooks *h, float dscale);
/* Peak activation bytes this record holds on the device (for reports); offloaded host copies excluded. */
size_t fsc_gpt_acts_bytes(const fsc_gpt_acts *a);

/* Full weights as safetensors in the HF GPT-2 layout (float32). Single-rank: reads/writes m->param. */
fsc_status fsc_gpt_save(fsc_gpt *m, const char *path);
fsc_status fsc_gpt_load(fsc_gpt *m, const char *path);
/* Check a file's keys, dtypes and shapes against cfg; the message names the first problem. */
fsc_status fsc_gpt_check_file(const fsc_gpt_config *cfg, const char *path);

#endif
