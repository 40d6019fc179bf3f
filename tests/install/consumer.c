/* A C program that uses only the installed headers (<fsc/fsc.h>) and the installed library, built by
 * ci/check_install.sh with pkg-config against libfsc.so and against libfsc.a. The oracle: the version the
 * library reports is the headers' version, a linear layer on the cpu device equals the product computed
 * here in double (1e-5 relative), and two simulated ranks all-reduce to the sum of their values. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <fsc/fsc.h>

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            fprintf(stderr, "consumer: " __VA_ARGS__);    \
            fprintf(stderr, " (%s)\n", fsc_last_error()); \
            return 1;                                     \
        }                                                 \
    } while (0)

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    float v = (float)(r->rank + 1), *d = NULL;
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_COMM, sizeof v, (void **)&d));
    fsc_status s = fsc_device_upload(r->dev, d, &v, sizeof v);
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, d, d, 1, FSC_F32, FSC_SUM);
    if (s == FSC_OK) s = fsc_device_download(r->dev, &v, d, sizeof v);
    fsc_device_release(r->dev, d);
    if (s == FSC_OK && r->rank == 0) *(float *)arg = v;
    return s;
}

int main(void) {
    CHECK(fsc_version() == FSC_VERSION_NUMBER, "library version %d, headers %d", fsc_version(), FSC_VERSION_NUMBER);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FSC_VERSION_MAJOR, FSC_VERSION_MINOR, FSC_VERSION_PATCH);
    CHECK(strcmp(fsc_version_string(), want) == 0, "version string %s, want %s", fsc_version_string(), want);

    enum { N = 3, C = 4, OC = 5 };
    float inp[N * C], w[C * OC], b[OC], out[N * OC];
    for (int i = 0; i < N * C; i++) inp[i] = 0.25f * (float)(i % 7) - 0.5f;
    for (int i = 0; i < C * OC; i++) w[i] = 0.125f * (float)(i % 5) - 0.25f;
    for (int i = 0; i < OC; i++) b[i] = 0.1f * (float)i;
    fsc_device *dev = NULL;
    CHECK(fsc_device_create("cpu", NULL, &dev) == FSC_OK, "cpu device");
    float *dbuf = NULL;
    size_t floats = N * C + C * OC + OC + N * OC;
    CHECK(fsc_device_alloc(dev, FSC_TAG_WORKSPACE, floats * sizeof(float), (void **)&dbuf) == FSC_OK, "alloc");
    float *di = dbuf, *dw = di + N * C, *db = dw + C * OC, *dout = db + OC;
    CHECK(fsc_device_upload(dev, di, inp, sizeof inp) == FSC_OK, "upload");
    CHECK(fsc_device_upload(dev, dw, w, sizeof w) == FSC_OK, "upload");
    CHECK(fsc_device_upload(dev, db, b, sizeof b) == FSC_OK, "upload");
    CHECK(fsc_linear_forward(dev, dout, NULL, di, dw, db, N, C, OC, 0) == FSC_OK, "linear forward");
    CHECK(fsc_device_download(dev, out, dout, sizeof out) == FSC_OK, "download");
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double ref = b[o];
            for (int c = 0; c < C; c++) ref += (double)inp[n * C + c] * w[c * OC + o];
            CHECK(fabs(out[n * OC + o] - ref) <= 1e-5 * (1 + fabs(ref)), "out[%d,%d] = %g, want %g", n, o,
                  out[n * OC + o], ref);
        }
    fsc_device_release(dev, dbuf);
    fsc_device_free(dev);

    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    float sum = 0;
    CHECK(fsc_cluster_run(&co, rank_fn, &sum) == FSC_OK, "cluster run");
    CHECK(sum == 3.0f, "all-reduce gave %g, want 3", sum);
    printf("consumer (C): fsc %s, linear layer and all-reduce correct\n", fsc_version_string());
    return 0;
}
