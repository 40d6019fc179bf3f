// A C++ program that uses only the installed headers, the API's (<fsc/fsc.h>) and the plug-in ABI's
// (<fsc/plugin/...>), built by ci/check_install.sh with pkg-config against libfsc.so. It links only if
// the headers give the library's functions C linkage. The oracle: the library's version is the headers',
// the defaults functions return valid options (an engine accepts them), a checkpoint-free DDP step on two
// simulated ranks returns a finite loss near ln(vocab) for a fresh model.
#include <cmath>
#include <cstdio>
#include <vector>
#include <fsc/fsc.h>
#include <fsc/plugin/device_ops.h>
#include <fsc/plugin/comm_ops.h>

static_assert(FSC_DEVICE_ABI_VERSION >= 1 && FSC_COMM_ABI_VERSION >= 1, "plug-in ABI versions");

namespace {

struct job {
    fsc_gpt_config cfg;
    double loss = -1;
};

fsc_status train(fsc_rank *r, void *arg) {
    job *j = static_cast<job *>(arg);
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = FSC_PAR_DDP;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = nullptr;
    FSC_TRY(fsc_engine_create(r, &j->cfg, &po, &oc, 1, &e));
    const int T = j->cfg.seq, local = 2, global = local * r->world;
    std::vector<int32_t> tok(static_cast<size_t>(local) * T), tgt(tok.size());
    for (size_t i = 0; i < tok.size(); i++) {
        tok[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(r->rank)) % static_cast<size_t>(j->cfg.vocab));
        tgt[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<size_t>(j->cfg.vocab));
    }
    fsc_step_info info;
    fsc_status s = fsc_engine_step(e, tok.data(), tgt.data(), local, global, &info);
    if (s == FSC_OK && r->rank == 0) j->loss = info.loss;
    fsc_engine_free(e);
    return s;
}

}  // namespace

int main() {
    if (fsc_version() != FSC_VERSION_NUMBER) {
        std::fprintf(stderr, "consumer (C++): library version %d, headers %d\n", fsc_version(), FSC_VERSION_NUMBER);
        return 1;
    }
    job j;
    j.cfg = fsc_gpt_config_default();
    j.cfg.layers = 1, j.cfg.dim = 16, j.cfg.heads = 2, j.cfg.seq = 8, j.cfg.vocab = 32;
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    if (fsc_cluster_run(&co, train, &j) != FSC_OK) {
        std::fprintf(stderr, "consumer (C++): %s\n", fsc_last_error());
        return 1;
    }
    if (!std::isfinite(j.loss) || std::fabs(j.loss - std::log(32.0)) > 0.5) {
        std::fprintf(stderr, "consumer (C++): loss %g, want about ln 32 = %g\n", j.loss, std::log(32.0));
        return 1;
    }
    std::printf("consumer (C++): fsc %s, a DDP step on 2 ranks, loss %.4f\n", fsc_version_string(), j.loss);
    return 0;
}
