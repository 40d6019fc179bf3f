#!/bin/sh
# make test: the layer check (ci/check_layers.sh), the suite three times (plain with coverage counters,
# ASan+UBSan, TSan on the threaded code), the library as installed (ci/check_exports.sh, ci/check_install.sh)
# and a coverage summary. Tests that use the simulated cluster are named test_sim*, test_ddp*, test_fsdp*,
# test_zero*, test_pipe*, test_tp*, test_moe*, test_ckpt*, and test_eval, test_offload, test_trace, test_predict,
# test_plan*, test_reduce_exact, test_trainer_exact, test_save_bounded, test_resume_random; those, test_comm_queue (the progress thread the simulator
# and the MPI plug-in share), test_flight (the flight recorder's watcher thread, woken by a signal handler while ranks
# call) and test_failed_step (steps failing on one rank or all with collectives in flight) run under TSan.
set -e
J=${JOBS:-2}
echo "== the library's include arrows run down its layers (ci/check_layers.sh)"
sh ci/check_layers.sh
echo "== build and run (coverage counters)"
rm -rf build/cov/obj/*.gcda build/cov/obj/*/*/*.gcda 2>/dev/null || true
find build/cov -name '*.gcda' -delete 2>/dev/null || true
make -s -j$J BUILD=build/cov COVERAGE=1 cuda-if-found check
sh ci/check_readme_help.sh build/cov
echo "== the examples built against the installed library (make install, pkg-config)"
sh ci/test_installed.sh build/installed
echo "== AddressSanitizer + UndefinedBehaviorSanitizer"
make -s -j$J BUILD=build/asan SAN=address,undefined OPT=-O1 check
echo "== ThreadSanitizer (threaded simulator)"
# OpenBLAS is not instrumented, so TSan cannot see the synchronization between its worker threads and the
# caller (reports with one side in sgemm_beta_* on machines whose OpenBLAS threads its gemms). Under TSan
# every gemm runs in the calling thread; fsc's own threads (ranks, the CPU device's pool) stay instrumented.
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GOTO_NUM_THREADS=1 make -s -j$J BUILD=build/tsan SAN=thread OPT=-O1 TESTS_FILTER='test_(sim|comm_queue|flight|failed_step|ddp|fsdp|zero|pipe|tp|moe|ckpt|cluster|eval|offload|trace|reduce_exact|trainer_exact|predict|plan|save_bounded|resume_random)' check
echo "== the installed library: exported names, C and C++ programs against the installed headers"
make -s -j$J BUILD=build/install-check lib
sh ci/check_exports.sh build/install-check
sh ci/check_install.sh build/install-check
echo "== the GPU kit: built, then checked where the development packages are hidden (ci/gpu_dry_run.sh)"
sh ci/gpu_dry_run.sh
echo "== line coverage (lib/, backends/, sim/)"
gcovr -r . --object-directory build/cov -f lib -f backends -f sim --print-summary -o build/cov/coverage.txt >/dev/null 2>&1 || true
grep -E '^(lines|TOTAL)' build/cov/coverage.txt 2>/dev/null || gcovr -r . --object-directory build/cov -f lib -f backends -f sim --print-summary | tail -3
