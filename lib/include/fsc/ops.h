/* Device operations on tensors, for a layer of one's own (fsc_layer_ops, layers.h): its forward and backward
 * compute on the device with these, so nothing goes through the host (examples/train_mlp.c's scaled_silu).
 * Every tensor is float32, contiguous, on a device (fsc_tensor.dev set; fsc_tensor_make(ptr, FSC_F32, ndim,
 * shape, c->dev) over the pointers a layer call gets), and all of one call are on the same device. Each checks
 * its arguments (NULL, dtype, device, contiguity, shapes) and refuses with FSC_ERR_INVALID and a message naming
 * the problem before touching memory. They run the device's own kernels (the cpu backend, the cuda plug-in),
 * deterministic as those are (plugin/device_ops.h): the same inputs give the same bits. Outputs may be inputs
 * where the elementwise operation allows it (out == a for add, mul, scale ...); fsc_op_matmul's c must not
 * overlap a or b.
 *
 * "Same shape" means the same ndim and dimensions. Zero-element tensors are accepted and do nothing. */
#ifndef FSC_OPS_H
#define FSC_OPS_H
#include "export.h"
#include "status.h"
#include "tensor.h"

FSC_BEGIN_DECLS

/* c = alpha op(a) op(b) + beta c, all 2-D: op(a) is a (M, K), or its transpose when transa (a is then (K, M));
 * op(b) is (K, N), or b^T when transb; c is (M, N). beta 0 overwrites c (its old contents are not read as
 * numbers), 1 accumulates. */
fsc_status fsc_op_matmul(fsc_tensor *c, const fsc_tensor *a, int transa, const fsc_tensor *b, int transb,
                         float alpha, float beta);

/* dst = src (same shape). */
fsc_status fsc_op_copy(fsc_tensor *dst, const fsc_tensor *src);
/* x = 0 */
fsc_status fsc_op_zero(fsc_tensor *x);
/* x = value everywhere: value goes to the device once (4 bytes uploaded), then device copies double it. */
fsc_status fsc_op_fill(fsc_tensor *x, float value);
/* x = alpha x */
fsc_status fsc_op_scale(fsc_tensor *x, float alpha);
/* y += alpha x (same shape) */
fsc_status fsc_op_axpy(fsc_tensor *y, float alpha, const fsc_tensor *x);
/* out = a + b (same shapes) */
fsc_status fsc_op_add(fsc_tensor *out, const fsc_tensor *a, const fsc_tensor *b);
/* out = a * b elementwise (same shapes) */
fsc_status fsc_op_mul(fsc_tensor *out, const fsc_tensor *a, const fsc_tensor *b);
/* The product's backward: da += dout * b, db += dout * a (same shapes; either of da, db may be NULL). */
fsc_status fsc_op_mul_backward(fsc_tensor *da, fsc_tensor *db, const fsc_tensor *a, const fsc_tensor *b,
                               const fsc_tensor *dout);

/* Rows and a vector: x is (N, C), v is (C). */
/* x[n, :] += v for every row (a bias) */
fsc_status fsc_op_add_rows(fsc_tensor *x, const fsc_tensor *v);
/* v += sum over the rows of x, rows in ascending order (a bias's gradient) */
fsc_status fsc_op_sum_rows(fsc_tensor *v, const fsc_tensor *x);
/* x[n, :] = v for every row (device copies, doubling) */
fsc_status fsc_op_repeat_rows(fsc_tensor *x, const fsc_tensor *v);

/* Activations (same shapes): out = f(x); backward dx = (overwrites) f'(x) * dout. SiLU: x / (1 + exp(-x));
 * GELU: the tanh approximation (GPT-2's). */
fsc_status fsc_op_silu(fsc_tensor *out, const fsc_tensor *x);
fsc_status fsc_op_silu_backward(fsc_tensor *dx, const fsc_tensor *x, const fsc_tensor *dout);
fsc_status fsc_op_gelu(fsc_tensor *out, const fsc_tensor *x);
fsc_status fsc_op_gelu_backward(fsc_tensor *dx, const fsc_tensor *x, const fsc_tensor *dout);

/* *sum = the sum of x's elements (in double, ascending index order), to the host. */
fsc_status fsc_op_sum(const fsc_tensor *x, double *sum);

FSC_END_DECLS

#endif
