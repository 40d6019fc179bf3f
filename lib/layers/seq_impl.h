/* The sequential model's state, shared by its declaration (seq.c) and its records and passes (seq_run.c). */
#ifndef FSC_SEQ_IMPL_H
#define FSC_SEQ_IMPL_H
#include "fsc/layers.h"

typedef struct {
    fsc_model m;             /* first: the model handed out */
    fsc_device *dev;
    int n;                   /* layers */
    fsc_layer **layers;      /* (n) owned */
    char (*prefix)[48];      /* (n) */
    int **tensor;            /* (n) (the layer's n_params) the model tensor of each layer parameter */
    unsigned char **tied;    /* (n) (n_params) 1: the parameter is an earlier layer's tensor */
    const float **cparam;    /* (max n_params) a call's parameter table (one call at a time) */
    float **cgrad;           /* (max n_params) its gradient table */
    fsc_param_info *info;    /* (n_tensors) */
    float **param, **grad;   /* (n_tensors) set by the engine */
    float **tied_grad;       /* (n_tensors) device buffers of tied tensors, made (zeroed) with the first record whose
                              * range holds the owner or a user (seq_run.c); NULL before and for other tensors */
    size_t max_stream;       /* floats per sample of the largest output between two layers */
    /* the passes' scratch (seq_run.c): the layers' work and the alternating gradients between layers, used within
     * one pass only, so the model's records share one (device memory, FSC_TAG_WORKSPACE) while any record lives */
    void *scratch;
    size_t scratch_bytes;
    int nacts; /* records alive */
    int in_pass; /* a pass (forward or a backward) runs: one at a time (a hook must not start another) */
    char *config_text; /* the family's configuration text the model was built from (fsc_seq_record_config), which
                        * its config writes in place of the layers' description; NULL: none */
} seq_model;

extern const fsc_model_ops fsc_seq_ops_, fsc_seq_moe_ops_; /* the second for models with experts */
fsc_status fsc_seq_acts_create(void *ctx, const fsc_model_acts_opts *o, fsc_model_acts **out);
void fsc_seq_acts_free(void *ctx, fsc_model_acts *a);
fsc_status fsc_seq_acts_remake(void *ctx, fsc_model_acts *old, const fsc_model_acts_opts *o, fsc_model_acts **out);
size_t fsc_seq_acts_bytes(void *ctx, const fsc_model_acts *a);
fsc_status fsc_seq_set_batch(void *ctx, fsc_model_acts *a, const void *inputs, const void *targets);
float *fsc_seq_stream(void *ctx, fsc_model_acts *a, fsc_stream which);
fsc_status fsc_seq_forward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, double *loss_sum);
fsc_status fsc_seq_backward(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
fsc_status fsc_seq_backward_input(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
fsc_status fsc_seq_backward_weight(void *ctx, fsc_model_acts *a, const fsc_model_hooks *h, float dscale);
int fsc_seq_splits_tied(void *ctx);
const float *fsc_seq_logits(void *ctx, const fsc_model_acts *a, int *vocab);
const float *fsc_seq_logits_part(void *ctx, const fsc_model_acts *a, fsc_logits_part *p);
void fsc_seq_aux_stats(void *ctx, const fsc_model_acts *a, fsc_model_aux *out);
void fsc_seq_aux_layers(void *ctx, const fsc_model_acts *a, fsc_model_aux *out);
fsc_status fsc_seq_set_expert_group(void *ctx, fsc_comm *ep);
/* A model a family built from configuration text `text` (family.h): its config writes that text from now on, so
 * that weights files and checkpoints record what fsc_model_from_config builds again. Nothing for a model that is
 * not a sequential one (the GPT and the Llama write their own family's text). */
fsc_status fsc_seq_record_config(fsc_model *m, const char *text);
/* The host state of layer l in record a (NULL when l is outside its range or the layer keeps none). */
void *fsc_seq_acts_state(const fsc_model_acts *a, int l);

#endif
