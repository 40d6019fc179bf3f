/* A program that defines, for its own purposes, functions whose names the library uses internally
 * (cpu_gemm, ck_remove_dir, sim_wait, fsc_engine_reduce), built by ci/check_install.sh
 * against libfsc.so and libfsc.a. Before the library hid its internal names, the shared library's calls
 * went to the program's cpu_gemm (fsc_linear_forward returned FSC_OK having computed nothing) and the
 * static library failed to link (multiple definitions). The oracle: it links, a linear layer equals the
 * product computed here in double, and none of the program's functions was called by the library. */
#include <math.h>
#include <stdio.h>
#include <fsc/fsc.h>

static int calls;
int cpu_gemm(void) { calls++; return 0; }
int ck_remove_dir(const char *path) { (void)path; calls++; return 0; }
int sim_wait(void) { calls++; return 0; }
int fsc_engine_reduce(void) { calls++; return 0; }

int main(void) {
    enum { N = 4, C = 3, OC = 2 };
    float inp[N * C], w[C * OC], out[N * OC];
    for (int i = 0; i < N * C; i++) inp[i] = (float)(i + 1);
    for (int i = 0; i < C * OC; i++) w[i] = 0.5f * (float)(i % 3) - 0.5f;
    fsc_device *dev = NULL;
    float *d = NULL;
    if (fsc_device_create("cpu", NULL, &dev) != FSC_OK ||
        fsc_device_alloc(dev, FSC_TAG_WORKSPACE, sizeof inp + sizeof w + sizeof out, (void **)&d) != FSC_OK ||
        fsc_device_upload(dev, d, inp, sizeof inp) != FSC_OK ||
        fsc_device_upload(dev, d + N * C, w, sizeof w) != FSC_OK ||
        fsc_linear_forward(dev, d + N * C + C * OC, NULL, d, d + N * C, NULL, N, C, OC, 0) != FSC_OK ||
        fsc_device_download(dev, out, d + N * C + C * OC, sizeof out) != FSC_OK) {
        fprintf(stderr, "own_names: %s\n", fsc_last_error());
        return 1;
    }
    fsc_device_release(dev, d);
    fsc_device_free(dev);
    if (calls) {
        fprintf(stderr, "own_names: the library called the program's own functions %d times\n", calls);
        return 1;
    }
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double ref = 0;
            for (int c = 0; c < C; c++) ref += (double)inp[n * C + c] * w[c * OC + o];
            if (fabs(out[n * OC + o] - ref) > 1e-5 * (1 + fabs(ref))) {
                fprintf(stderr, "own_names: out[%d,%d] = %g, want %g: the library's own gemm did not run\n", n, o,
                        out[n * OC + o], ref);
                return 1;
            }
        }
    printf("own_names: the library kept its own cpu_gemm, ck_remove_dir, sim_wait, fsc_engine_reduce\n");
    return 0;
}
