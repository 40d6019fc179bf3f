/* A program of one's own run as processes: fsc_cluster_run_from_env with nothing set but what the launcher
 * sets. Built by ci/check_install.sh against the installed libfsc.so (rpath only) into a folder of its own,
 * so the MPI plug-in is found beside libfsc.so or not at all, and the device is the cpu on a machine
 * without a GPU. The oracle: every rank all-reduces rank + 1 to 1 + 2 + ... + world; rank 0 prints
 * "from_env: world W on DEVICE, sum S". */
#include <stdio.h>
#include <fsc/fsc.h>

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    float v = (float)(r->rank + 1), *d = NULL;
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_COMM, sizeof v, (void **)&d));
    fsc_status s = fsc_device_upload(r->dev, d, &v, sizeof v);
    if (s == FSC_OK) s = fsc_comm_all_reduce(r->comm, d, d, 1, FSC_F32, FSC_SUM);
    if (s == FSC_OK) s = fsc_device_download(r->dev, &v, d, sizeof v);
    fsc_device_release(r->dev, d);
    float want = (float)r->world * (float)(r->world + 1) / 2.0f;
    if (s == FSC_OK && v != want) {
        fprintf(stderr, "from_env: rank %d summed %g, not %g\n", r->rank, (double)v, (double)want);
        s = FSC_ERR_INVALID;
    }
    if (s == FSC_OK && r->rank == 0)
        printf("from_env: world %d on %s, sum %g\n", r->world, fsc_device_name(r->dev), (double)v);
    (void)arg;
    return s;
}

int main(void) {
    fsc_status s = fsc_cluster_run_from_env(rank_fn, NULL);
    if (s != FSC_OK) {
        fprintf(stderr, "from_env: %s\n", fsc_last_error());
        return 1;
    }
    return 0;
}
