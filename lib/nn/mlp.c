/* The SwiGLU MLP of Llama: out = down(silu(gate(x)) * up(x)), three linears without bias, weights stored
 * [out, in] as torch's nn.Linear. Forward saves the two projections and their product in the record;
 * backward recomputes nothing.
 * Not here: GPT-2's GELU MLP (block.c), the kernels (fsc/plugin/device_ops.h). */
#include <limits.h>
#include "fsc/nn.h"
#include "core/kernels.h"

static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

size_t fsc_swiglu_mlp_saved_floats(size_t N, int F) { return 3 * r64(N * (size_t)F); }
size_t fsc_swiglu_mlp_work_floats(size_t N, int F) { return 2 * r64(N * (size_t)F); }

void fsc_swiglu_mlp_rec_bind(fsc_swiglu_mlp_rec *rec, float *saved, size_t N, int C, int F) {
    if (!rec) return;
    size_t piece = r64(N * (size_t)F);
    *rec = (fsc_swiglu_mlp_rec){ .gate = saved, .up = saved + piece, .act = saved + 2 * piece, .N = N, .C = C, .F = F };
}

static fsc_status check(const fsc_swiglu_mlp_rec *r, const char *what) {
    if (r->C <= 0 || r->F <= 0 || r->N > (size_t)INT_MAX)
        return fsc_error(FSC_ERR_INVALID, "SwiGLU MLP %s: bad dimensions N=%zu C=%d F=%d", what, r->N, r->C, r->F);
    if (!r->gate || !r->up || !r->act)
        return fsc_error(FSC_ERR_INVALID, "SwiGLU MLP %s: the record is not bound to memory", what);
    return FSC_OK;
}

fsc_status fsc_swiglu_mlp_forward(fsc_device *dev, float *out, fsc_swiglu_mlp_rec *rec, const float *inp,
                                  const float *w_gate, const float *w_up, const float *w_down) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(inp);
    FSC_CHECK_ARG(w_gate);
    FSC_CHECK_ARG(w_up);
    FSC_CHECK_ARG(w_down);
    FSC_TRY(check(rec, "forward"));
    rec->inp = inp;
    size_t N = rec->N;
    int C = rec->C, F = rec->F;
    if (N == 0) return FSC_OK;
    FSC_TRY(fsc_linear_forward(dev, rec->gate, NULL, inp, w_gate, NULL, N, C, F, 1)); /* (N, F) */
    FSC_TRY(fsc_linear_forward(dev, rec->up, NULL, inp, w_up, NULL, N, C, F, 1));     /* (N, F) */
    FSC_TRY(fsc_k_swiglu_forward(dev, rec->act, rec->gate, rec->up, N * (size_t)F));
    if (!out) return FSC_OK;
    return fsc_linear_forward(dev, out, NULL, rec->act, w_down, NULL, N, F, C, 1);
}

fsc_status fsc_swiglu_mlp_backward(fsc_device *dev, float *dinp, float *dw_gate, float *dw_up, float *dw_down,
                                   const fsc_swiglu_mlp_rec *rec, const float *dout, const float *w_gate,
                                   const float *w_up, const float *w_down, float *work) {
    FSC_CHECK_ARG(dinp);
    FSC_CHECK_ARG(dw_gate);
    FSC_CHECK_ARG(dw_up);
    FSC_CHECK_ARG(dw_down);
    return fsc_swiglu_mlp_backward_parts(dev, dinp, dw_gate, dw_up, dw_down, rec, dout, w_gate, w_up, w_down, work);
}

fsc_status fsc_swiglu_mlp_backward_parts(fsc_device *dev, float *dinp, float *dw_gate, float *dw_up,
                                         float *dw_down, const fsc_swiglu_mlp_rec *rec, const float *dout,
                                         const float *w_gate, const float *w_up, const float *w_down, float *work) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(rec);
    FSC_CHECK_ARG(dout);
    FSC_CHECK_ARG(w_gate);
    FSC_CHECK_ARG(w_up);
    FSC_CHECK_ARG(w_down);
    FSC_CHECK_ARG(work);
    FSC_TRY(check(rec, "backward"));
    size_t N = rec->N;
    int C = rec->C, F = rec->F;
    if (N == 0) return FSC_OK;
    float *dact = work;                    /* (N, F), then dgate in place */
    float *dup = work + r64(N * (size_t)F); /* (N, F) */
    fsc_linear_rec down = { .inp = rec->act, .N = N, .C = F, .OC = C, .w_out_in = 1 };
    FSC_TRY(fsc_linear_backward(dev, dact, dw_down, NULL, &down, dout, w_down, 0.0f, 1.0f));
    FSC_TRY(fsc_k_swiglu_backward(dev, dact, dup, rec->gate, rec->up, dact, N * (size_t)F));
    fsc_linear_rec proj = { .inp = rec->inp, .N = N, .C = C, .OC = F, .w_out_in = 1 };
    FSC_TRY(fsc_linear_backward(dev, dinp, dw_gate, NULL, &proj, dact, w_gate, 0.0f, 1.0f));
    return fsc_linear_backward(dev, dinp, dw_up, NULL, &proj, dup, w_up, 1.0f, 1.0f);
}
