/* Private to the library: the device as the layers above the core (optim, nn, moe, tp, layers, parallel, plan)
 * and the simulator see it beyond the public <fsc/device.h>. Not installed.
 *
 * Kernels are called through typed functions, one per entry of the backend's table (plugin/device_ops.h, which
 * says what each computes): fsc_k_gemm(dev, ...) calls the table's gemm with the device's context. The table
 * and struct fsc_device stay private to the core and its backends (core/device_impl.h); what includes this
 * header sees an opaque fsc_device and cannot reach the table. An entry a backend left NULL is FSC_ERR_UNSUPPORTED
 * naming the device and the kernel, not a call through NULL. */
#ifndef FSC_CORE_KERNELS_H
#define FSC_CORE_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include "fsc/device.h"
#include "fsc/dtype.h"
#include "fsc/status.h"

/* products: C[b] = alpha op(A[b]) op(B[b]) + beta C[b] (device_ops.h's gemm) */
fsc_status fsc_k_gemm(fsc_device *dev, int transa, int transb, int M, int N, int K, float alpha, const float *A,
                      int lda, int64_t sa, const float *B, int ldb, int64_t sb, float beta, float *C, int ldc,
                      int64_t sc, int batch);

/* elementwise */
fsc_status fsc_k_convert(fsc_device *dev, void *dst, fsc_dtype dt, const void *src, fsc_dtype st, size_t n);
fsc_status fsc_k_scale(fsc_device *dev, float *x, float a, size_t n);
fsc_status fsc_k_axpy(fsc_device *dev, float *y, float a, const float *x, size_t n);
fsc_status fsc_k_add(fsc_device *dev, float *out, const float *a, const float *b, size_t n);
fsc_status fsc_k_gelu_forward(fsc_device *dev, float *out, const float *inp, size_t n);
fsc_status fsc_k_gelu_backward(fsc_device *dev, float *dinp, const float *inp, const float *dout, size_t n);
fsc_status fsc_k_silu_forward(fsc_device *dev, float *out, const float *inp, size_t n);
fsc_status fsc_k_silu_backward(fsc_device *dev, float *dinp, const float *inp, const float *dout, size_t n);
fsc_status fsc_k_swiglu_forward(fsc_device *dev, float *out, const float *gate, const float *up, size_t n);
fsc_status fsc_k_swiglu_backward(fsc_device *dev, float *dgate, float *dup, const float *gate, const float *up,
                                 const float *dout, size_t n);
fsc_status fsc_k_mul_forward(fsc_device *dev, float *out, const float *a, const float *b, size_t n);
fsc_status fsc_k_mul_backward(fsc_device *dev, float *da, float *db, const float *a, const float *b, const float *dout,
                              size_t n);

/* linear pieces, embedding, norms */
fsc_status fsc_k_bias_add(fsc_device *dev, float *out, const float *bias, size_t N, int OC);
fsc_status fsc_k_bias_grad(fsc_device *dev, float *dbias, const float *dout, size_t N, int OC);
fsc_status fsc_k_encoder_forward(fsc_device *dev, float *out, const int32_t *tok, const float *wte, const float *wpe,
                                 int B, int T, int C);
fsc_status fsc_k_encoder_backward(fsc_device *dev, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                  int B, int T, int C);
fsc_status fsc_k_layernorm_forward(fsc_device *dev, float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, size_t N, int C);
fsc_status fsc_k_layernorm_backward(fsc_device *dev, float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean, const float *rstd, size_t N,
                                    int C);
fsc_status fsc_k_rmsnorm_forward(fsc_device *dev, float *out, float *rstd, const float *inp, const float *w, size_t N,
                                 int C, float eps);
fsc_status fsc_k_rmsnorm_backward(fsc_device *dev, float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const float *rstd, size_t N, int C);

/* attention */
fsc_status fsc_k_qkv_split(fsc_device *dev, float *q, float *k, float *v, const float *qkv, int B, int T, int NH,
                           int HS);
fsc_status fsc_k_qkv_merge(fsc_device *dev, float *dqkv, const float *dq, const float *dk, const float *dv, int B,
                           int T, int NH, int HS);
fsc_status fsc_k_heads_merge(fsc_device *dev, float *out, const float *y, int B, int T, int NH, int HS);
fsc_status fsc_k_heads_split(fsc_device *dev, float *dy, const float *dout, int B, int T, int NH, int HS);
fsc_status fsc_k_softmax_causal_forward(fsc_device *dev, float *att, const float *pre, int BH, int T, float scale);
fsc_status fsc_k_softmax_causal_backward(fsc_device *dev, float *dpre, const float *datt, const float *att, int BH,
                                         int T, float scale);
fsc_status fsc_k_rope_forward(fsc_device *dev, float *out, const float *inp, int B, int T, int H, int D, int ld,
                              float theta);
fsc_status fsc_k_rope_backward(fsc_device *dev, float *dinp, const float *dout, int B, int T, int H, int D, int ld,
                               float theta);

/* losses */
fsc_status fsc_k_xent_forward(fsc_device *dev, float *losses, const float *logits, const int32_t *targets, size_t N,
                              int V, int ld);
fsc_status fsc_k_xent_backward(fsc_device *dev, float *dlogits, const float *logits, const int32_t *targets, size_t N,
                               int V, int ld, float scale);
fsc_status fsc_k_mse_forward(fsc_device *dev, float *losses, const float *pred, const float *target, size_t N, int C);
fsc_status fsc_k_mse_backward(fsc_device *dev, float *dpred, const float *pred, const float *target, size_t N, int C,
                              float scale);

/* reductions to the host */
fsc_status fsc_k_sum(fsc_device *dev, double *host_out, const float *x, size_t n);
fsc_status fsc_k_absmax(fsc_device *dev, float *host_max, int *host_nonfinite, const float *x, size_t n);
fsc_status fsc_k_sumsq_fixed(fsc_device *dev, uint64_t acc[2], const float *x, size_t n, int shift);

/* optimizers */
fsc_status fsc_k_adamw(fsc_device *dev, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                       float b2, float eps, float wd, float bc1, float bc2);
fsc_status fsc_k_sgd(fsc_device *dev, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                     float wd, int first);

/* The device whose memory dev's collectives go through (communicators send device memory): the accelerator of a
 * host device made by fsc_device_create_host with one, else dev itself. */
fsc_device *fsc_device_for_comm(fsc_device *dev);

/* Host memory as a device of its own (offload, docs/offload.md): the cpu backend's kernels and a ledger of its
 * own; its memory comes from accel's host_alloc (pinned) when accel has one, else from the cpu backend.
 * accel (may be NULL) must outlive it. */
fsc_status fsc_device_create_host(fsc_device *accel, fsc_device **out);

/* The simulator's host<->device copy bandwidth (fsc_cluster_opts.sim_copy_gbps): every upload and download of
 * dev then also takes bytes / (gbps 1e9) seconds of the calling thread (0: no cost). */
void fsc_device_set_copy_cost(fsc_device *dev, double gbps);
/* Whether dev's copies cost modelled time (a copy cost set above 0). */
int fsc_device_has_copy_cost(const fsc_device *dev);
/* A virtual cluster's rank device (sim/cluster.c), on = 1: its copies are timed on its rank's virtual clock
 * only; made by another thread (the simulator's staging on a progress thread) they cost nothing. 0 (the
 * default): every copy costs (the wall clock). */
void fsc_device_set_copy_rank_clock(fsc_device *dev, int on);

/* Whether causal attention runs each head's products whole (lib/nn/attention.c): 1 on GPUs, where its blocks of
 * 32 query rows were thousands of tiny launches a step; 0 on the cpu device, where the blocks skip the zeros above
 * the diagonal and stay under OpenBLAS's threading threshold, and on the counting device, which counts the cpu's
 * blocks. fsc_device_set_whole_products changes it for one device (the tests run both forms on the CPU). */
int fsc_device_whole_products(const fsc_device *dev);
void fsc_device_set_whole_products(fsc_device *dev, int on);

/* The counting device (backends/count, docs/planning.md): allocations of more than FSC_COUNT_REAL_MAX bytes get
 * fake addresses (fsc_count_is_fake) that nothing may dereference; smaller ones are real, zeroed host memory;
 * kernels do nothing. fsc_device_is_count: dev is such a device. */
#define FSC_COUNT_REAL_MAX ((size_t)64 << 10)
int fsc_count_is_fake(const void *p);
int fsc_device_is_count(const fsc_device *dev);
/* Whether what is written at p on dev is thrown away (a fake address of the counting device): computing
 * values only to upload them there (parameter init) can be skipped. */
int fsc_device_discards(const fsc_device *dev, const void *p);
/* The FLOPs (2 M N K per product) of every gemm a counting device was asked for; 0 for another device. */
uint64_t fsc_count_gemm_flops(const fsc_device *dev);
/* The work of every kernel call and device copy a counting device was asked for (gemm included): its FLOPs and
 * the bytes it reads and writes, from its arguments, summed by arithmetic intensity into FSC_COUNT_BINS bins: bin
 * i holds the calls of flops / bytes in [2^((i - 32) / 2), 2^((i - 31) / 2)) (the first also those of no FLOPs,
 * the last those of no bytes). A roofline then costs each bin max(flops / rate, bytes / bandwidth), exact for
 * every bin but the one the ridge point falls in. Zeros for another device. */
enum { FSC_COUNT_BINS = 64 };
void fsc_count_work(const fsc_device *dev, double *flops, double *bytes);
/* The calls fsc_count_work summed (each kernel call and device copy one); 0 for another device. */
uint64_t fsc_count_calls(const fsc_device *dev);
/* The planner's replay (fsc_plan_replay): from now on each kernel call and copy of a counting device also moves
 * the calling thread's modelled clock (core/clock_impl.h) by max(flops / flops_per_s, bytes / bytes_per_s) +
 * kernel_s, its roofline time. No effect on another device; rates <= 0: stop. */
void fsc_count_set_rates(fsc_device *dev, double flops_per_s, double bytes_per_s, double kernel_s);
/* While on is set (1) on the calling thread, a counting device's copies made by that thread are not counted (no
 * work, no call, no replay time): the simulated communicator's staging of a collective's data through host memory
 * (sim/sim_stage.c), which stands for what a real communicator moves itself, in the time the network model gives
 * the whole call. Off (0) again after. */
void fsc_count_staging(int on);
/* Whether dev counts alike calls in bulk: the counting device, not moving a replay's clock (fsc_count_set_rates
 * off), where alike products may be counted at once (fsc_count_gemm_rows). */
int fsc_count_bulk(const fsc_device *dev);
/* Count `times` sweeps of causal attention's products over row blocks (lib/nn/attention.c): for i0 = 0, rows,
 * 2 rows, ... below T, with i1 = min(i0 + rows, T), one product of (M, N, K) = scores (i1 - i0, i1, hs), lower
 * (i1 - i0, hs, i1) or lower_t (i1 - i0, hs, T - i0), beta (whether C is read) and batch: the same FLOPs, bytes,
 * bins and calls as `times` x the blocks' fsc_k_gemm calls (a sweep's counts are kept, so the layers'
 * and micro-batches' alike sweeps cost a lookup). Only where fsc_count_bulk(dev) (else nothing). */
enum { FSC_COUNT_SCORES = 0, FSC_COUNT_LOWER, FSC_COUNT_LOWER_T };
void fsc_count_gemm_rows(fsc_device *dev, int kind, int T, int rows, int hs, float beta, int batch, uint64_t times);

/* Whether a GPU is found, cheaply and without loading CUDA: an NVIDIA device node (/dev/nvidia0 or
 * /proc/driver/nvidia/version) exists and the cuda plug-in file is there ($FSC_CUDA_PLUGIN when set, else
 * a file in the places of fsc_plugin_places, core/device_impl.h). */
int fsc_gpu_present(void);

#endif
