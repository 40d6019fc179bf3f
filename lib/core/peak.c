/* A device's measured float32 matrix-multiply rate (fsc_device_measure_tflops, device.h): the reference a
 * trainer divides its achieved FLOP rate by to print MFU when the user gives no datasheet peak. It times the
 * device's own gemm (so the cpu backend measures OpenBLAS with the rank's threads, cuda cuBLAS); it is a
 * measurement, not the datasheet number, and lands below a datasheet peak; it takes some 60 ms or more. */
#include "core/clock_impl.h"
#include "core/device_impl.h"

/* The calling thread's clock: a simulated rank on the virtual clock measures its own thread's CPU time. */
static double seconds(void) { return fsc_clock_now(); }

fsc_status fsc_device_measure_tflops(fsc_device *dev, int n, double *tflops) {
    FSC_CHECK_ARG(dev);
    FSC_CHECK_ARG(tflops);
    *tflops = 0;
    if (!dev) return fsc_error(FSC_ERR_INVALID, "fsc_device_measure_tflops: device is NULL");
    if (n <= 0) n = 512;
    if (n > 8192) return fsc_error(FSC_ERR_INVALID, "fsc_device_measure_tflops: n %d is above 8192", n);
    const size_t nn = (size_t)n * (size_t)n;
    float *a = NULL, *c = NULL;
    fsc_status s = fsc_device_alloc(dev, FSC_TAG_WORKSPACE, 2 * nn * sizeof(float), (void **)&a);
    if (s == FSC_OK) s = fsc_device_alloc(dev, FSC_TAG_WORKSPACE, nn * sizeof(float), (void **)&c);
    if (s == FSC_OK) s = fsc_device_memset(dev, a, 0, 2 * nn * sizeof(float)); /* zeros: no denormal slowdown */
    /* one warm-up, then the best of 2 rounds, each long enough (about 20 ms or 32 gemms) to time */
    double best = 0;
    for (int round = 0; round < 3 && s == FSC_OK; round++) {
        int reps = 0;
        double t0 = seconds(), dt = 0;
        while (s == FSC_OK && reps < 32 && (reps < 2 || dt < 0.02)) {
            s = FSC_K(dev, gemm, 0, 0, n, n, n, 1.0f, a, n, 0, a + nn, n, 0, 0.0f, c, n, 0, 1);
            reps++;
            if (s == FSC_OK && reps >= 2) s = fsc_device_sync(dev), dt = seconds() - t0;
        }
        double r = dt > 0 ? 2.0 * (double)n * (double)nn * reps / dt : 0;
        if (round > 0 && r > best) best = r;
    }
    fsc_device_release(dev, a);
    fsc_device_release(dev, c);
    if (s != FSC_OK) return fsc_error_prefix(s, "measuring the device's gemm rate");
    *tflops = best * 1e-12;
    return FSC_OK;
}
