/* Tests of the MPI communicator (backends/mpi/mpi_comm.c) through the trainer run as processes by mpirun,
 * and of fsc_cluster_run_from_env_opts / train_gpt under launcher variables.
 * Oracles:
 * - the trainer as 2, 3 and 4 MPI processes equals the same job on as many simulated ranks bit for bit: the
 *   --save files are byte-equal and the --json losses are the same text (every strategy, pipelines, tensor
 *   parallelism, --check-ddp);
 * - a checkpoint written by 4 processes, resumed on 2 simulated ranks, gives the weights of the same
 *   checkpoint written by 4 simulated ranks and resumed the same way (and 2 simulated -> 4 processes);
 * - the same for the Llama (--model llama): strategies, a balanced pipeline, a checkpoint of 4 processes
 *   resumed on 2 ranks, which the GPT refuses by family;
 * - a killed or stopped rank ends the whole job (every process gone) within the communicator timeout plus
 *   a margin, the output names the rank, and the newest checkpoint written before resumes;
 * - a job of 2 processes into a --ckpt-dir another run holds is refused on both ranks naming the holder, and goes
 *   ahead once it is gone;
 * - launcher mismatches are refused with messages that say how to start the job;
 * - a timeout in a group split from the world names the rank it waits for with its world rank, as the simulator does;
 * - --reduce exact on 2, 3 and 4 processes (ddp, fsdp, zero2, a pipeline) gives the bits of one simulated rank
 *   accumulating the same batch.
 * Skipped, with the reason, only where mpirun is not installed (ci/deps.sh installs Open MPI). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fsc/fsc.h"
#include "core/comm_impl.h" /* fsc_comm_revoke: the library's own, as a failed pipeline stage calls it */
#include "trainertest.h"

static char trainer[PATH_MAX], mpirun[PATH_MAX], tmpdir[64], plugin[PATH_MAX + 32], self_path[PATH_MAX];
static const char *why_skip; /* non-NULL: no MPI here */

#define MODEL "--layers 2 --dim 32 --heads 2 --seq 16 --batch 12 --steps 3 --lr 0.01"
#define MPIRUN_FLAGS "--oversubscribe --bind-to none --allow-run-as-root"

static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0) fail_msg("out of memory");
    va_end(ap);
    return s;
}

#define SKIP_WITHOUT_MPI()                            \
    do {                                              \
        if (why_skip) {                               \
            print_message("skipped: %s\n", why_skip); \
            skip();                                   \
        }                                             \
    } while (0)

/* The "losses" array of the JSON line that ends out, as text ("" if none). */
static char *losses_of(const char *out) {
    cJSON *j = prog_last_json(out);
    char *t = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "losses"));
    cJSON_Delete(j);
    return t ? t : strdup("");
}

/* The --check-ddp oracle's peak memory by tag, "check_ddp"."ddp_peak_bytes" of the JSON line that ends out, as text
 * ("" if none). */
static char *ddp_peaks_of(const char *out) {
    cJSON *j = prog_last_json(out);
    char *t = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "check_ddp"), "ddp_peak_bytes"));
    cJSON_Delete(j);
    return t ? t : strdup("");
}

static int files_equal(const char *a, const char *b) {
    char *cmd = fmt("cmp -s '%s' '%s'", a, b);
    int rc = system(cmd);
    free(cmd);
    return rc == 0;
}

/* Run mpirun -n procs train_gpt args (exit status, output in *out). */
static int run_mpi(int procs, const char *args, char **out) {
    char *full = fmt("-n %d " MPIRUN_FLAGS " '%s' %s", procs, trainer, args);
    int rc = prog_run(mpirun, full, tmpdir, out, NULL);
    free(full);
    return rc;
}

static int run_sim(const char *args, char **out) { return prog_run(trainer, args, tmpdir, out, NULL); }

/* The job as procs processes and as procs simulated ranks: both succeed, same weights file, same losses. */
static void same_bits(int procs, const char *par) {
    char *a = fmt("%s/mpi.st", tmpdir), *b = fmt("%s/sim.st", tmpdir), *out1 = NULL, *out2 = NULL;
    unlink(a), unlink(b);
    char *args1 = fmt(MODEL " --data '%s/data.txt' --parallel %s --save '%s' --json", tmpdir, par, a);
    char *args2 = fmt(MODEL " --data '%s/data.txt' --parallel %s --world %d --save '%s' --json", tmpdir, par, procs, b);
    int rc1 = run_mpi(procs, args1, &out1);
    if (rc1 != 0) fail_msg("mpirun -n %d train_gpt %s: exit %d\n%s", procs, args1, rc1, out1);
    int rc2 = run_sim(args2, &out2);
    if (rc2 != 0) fail_msg("train_gpt %s: exit %d\n%s", args2, rc2, out2);
    char *l1 = losses_of(out1), *l2 = losses_of(out2);
    if (strcmp(l1, l2) != 0) fail_msg("%d processes, --parallel %s: losses %s, simulated %s", procs, par, l1, l2);
    if (!files_equal(a, b)) fail_msg("%d processes, --parallel %s: --save files differ", procs, par);
    /* --check-ddp: the oracle's peak memory is its own, as on simulated ranks (the run's peaks were kept under MPI,
     * where the oracle reuses the process's device: the run's larger params or pipeline buffers showed as DDP's) */
    char *d1 = ddp_peaks_of(out1), *d2 = ddp_peaks_of(out2);
    if (strcmp(d1, d2) != 0)
        fail_msg("%d processes, --parallel %s: --check-ddp's ddp_peak_bytes %s, simulated %s", procs, par, d1, d2);
    free(d1), free(d2);
    assert_non_null(strstr(out1, "--reduce ordered"));
    print_message("%d processes = %d simulated ranks: --parallel %s\n", procs, procs, par);
    free(l1), free(l2), free(args1), free(args2), free(out1), free(out2), free(a), free(b);
}

static void test_strategies_equal_simulated(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    const char *par[] = {"ddp", "fsdp --shard full", "fsdp --shard grad_op", "fsdp --shard none", "zero1", "zero2"};
    for (int n = 2; n <= 4; n++)
        for (size_t i = 0; i < sizeof par / sizeof par[0]; i++) same_bits(n, par[i]);
    same_bits(4, "fsdp --shard hybrid");
}

static void test_pipeline_and_tensor_parallel(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    same_bits(2, "pipe --pp 2");
    same_bits(4, "pipe --pp 2 --schedule 1f1b");
    /* middle stages: receives posted ahead on both links (docs/overlap.md), 1f1b and gpipe */
    same_bits(4, "pipe --pp 4 --layers 4 --chunks 3 --schedule 1f1b");
    same_bits(3, "pipe --pp 3 --layers 3 --chunks 4 --checkpoint never");
    /* zbv: chunk 1's links in reverse rank order, the last rank's turn, the head's gradient waiting on rank 0 */
    same_bits(4, "pipe --pp 4 --layers 8 --chunks 6 --schedule zbv --check-ddp");
    same_bits(4, "zero2 --pp 2 --layers 4 --chunks 2 --schedule zbv");
    /* interleaved: the wrap-around link from the last rank to the first; zb-h1: Ws apart from their Bs */
    same_bits(3, "pipe --pp 3 --layers 6 --chunks 6 --schedule interleaved --virtual-stages 2 --check-ddp");
    same_bits(4, "fsdp --pp 2 --layers 4 --chunks 3 --schedule zb-h1 --checkpoint never");
    same_bits(2, "ddp --tp 2");
    same_bits(4, "fsdp --tp 2 --sequence-parallel");
    same_bits(3, "fsdp --check-ddp");
    same_bits(2, "fsdp --shard grad_op --check-ddp"); /* its params' peak is above DDP's */
    same_bits(4, "zero2 --pp 2 --check-ddp");
    /* --print-schedule under the launcher: the text once (rank 0's), as simulated ranks print it */
    char *out = NULL, *a = fmt(MODEL " --parallel pipe --pp 2 --print-schedule");
    assert_int_equal(run_mpi(2, a, &out), 0);
    const char *p1 = strstr(out, "placement");
    if (!p1 || strstr(p1 + 1, "placement")) fail_msg("--print-schedule under mpirun -n 2:\n%s", out);
    free(out), free(a);
}

/* Offload to host memory (docs/offload.md) and expert parallelism (--moe-experts, --ep) as processes: the
 * simulated ranks' bits, as every other option ("Every option works as with simulated ranks", docs/parallel.md).
 * Under offload the clipping norm's and the vote's small collectives stage through the device and the host
 * optimizer steps between the strategy's collectives; the experts' all-to-all is a collective the other
 * strategies never make. */
static void test_offload_and_experts(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    same_bits(2, "fsdp --offload all");
    same_bits(3, "fsdp --shard grad_op --offload all --check-ddp");
    same_bits(2, "zero2 --offload optim");
    same_bits(4, "zero1 --offload optim --pp 2 --layers 4 --chunks 2 --schedule 1f1b");
    same_bits(4, "fsdp --tp 2 --sequence-parallel --offload all");
    same_bits(2, "ddp --moe-experts 4 --ep 2");
    same_bits(4, "zero2 --moe-experts 4 --moe-top-k 2 --ep 2 --offload optim");
    same_bits(2, "fsdp --moe-experts 4 --ep 2 --offload all --check-ddp");
}

/* --reduce exact (docs/determinism.md): 2, 3 and 4 processes accumulating 12 / N micro-batches give the bits of
 * one simulated rank accumulating 12 (the --save file and the losses), with ddp, fsdp and zero2. */
static void test_exact_any_process_count(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    char *ref = fmt("%s/exact_ref.st", tmpdir), *got = fmt("%s/exact_mpi.st", tmpdir), *out = NULL;
    char *a = fmt(MODEL " --data '%s/data.txt' --reduce exact --accum 12 --save '%s' --json", tmpdir, ref);
    int rc = run_sim(a, &out);
    if (rc != 0) fail_msg("train_gpt %s: exit %d\n%s", a, rc, out);
    char *l0 = losses_of(out);
    free(a), free(out);
    const char *par[] = {"ddp", "fsdp", "zero2"};
    for (int n = 2; n <= 4; n++)
        for (size_t i = 0; i < sizeof par / sizeof par[0]; i++) {
            unlink(got);
            a = fmt(MODEL " --data '%s/data.txt' --reduce exact --accum %d --parallel %s --save '%s' --json", tmpdir,
                    12 / n, par[i], got);
            rc = run_mpi(n, a, &out);
            if (rc != 0) fail_msg("mpirun -n %d train_gpt %s: exit %d\n%s", n, a, rc, out);
            assert_non_null(strstr(out, "--reduce exact"));
            char *l = losses_of(out);
            if (strcmp(l, l0) != 0) fail_msg("%d processes, --parallel %s, exact: losses %s, one rank %s", n, par[i], l, l0);
            if (!files_equal(ref, got)) fail_msg("%d processes, --parallel %s, exact: --save files differ", n, par[i]);
            free(l), free(a), free(out);
        }
    /* a pipeline of 2 stages (1F1B) on 4 processes: 2 data ranks of 6 micro-batches */
    unlink(got);
    a = fmt(MODEL " --data '%s/data.txt' --reduce exact --accum 6 --parallel pipe --pp 2 --schedule 1f1b --save '%s' "
            "--json", tmpdir, got);
    rc = run_mpi(4, a, &out);
    if (rc != 0) fail_msg("mpirun -n 4 train_gpt %s: exit %d\n%s", a, rc, out);
    char *l = losses_of(out);
    if (strcmp(l, l0) != 0 || !files_equal(ref, got))
        fail_msg("4 processes, a pipeline, exact: losses %s, one rank %s (or the --save files differ)", l, l0);
    free(l), free(a), free(out);
    print_message("--reduce exact: 2, 3 and 4 processes = one rank accumulating 12\n");
    free(l0), free(ref), free(got);
}

/* Save at step 2 on `from`, resume to step 4 on `to` (model: options after MODEL, "" for the GPT); returns the
 * resumed weights' path. */
static char *save_resume(const char *tag, const char *model, int from_procs, int from_world, int to_procs,
                         int to_world) {
    char *dir = fmt("%s/ck_%s", tmpdir, tag), *w = fmt("%s/%s.st", tmpdir, tag), *out = NULL;
    char *cmd = fmt("rm -rf '%s' '%s'", dir, w);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    char *a = fmt(MODEL "%s --data '%s/data.txt' --parallel fsdp --steps 2 --save-every 2 --ckpt-dir '%s'%s", model,
                  tmpdir, dir, from_procs ? "" : (from_world == 4 ? " --world 4" : " --world 2"));
    int rc = from_procs ? run_mpi(from_world, a, &out) : run_sim(a, &out);
    if (rc != 0) fail_msg("%s: saving: exit %d\n%s", tag, rc, out);
    free(out), free(a);
    /* the run's record names its world, also when the launcher gave it (it said 1: --config of it trained another
     * run without mpirun) */
    char *rec = fmt("%s/train_config.json", dir), *want = fmt("\"world\":\t%d,", from_world);
    FILE *f = fopen(rec, "rb");
    char text[16384] = "";
    if (f) text[fread(text, 1, sizeof text - 1, f)] = 0, fclose(f);
    if (!strstr(text, want)) fail_msg("%s: %s lacks %s:\n%s", tag, rec, want, text);
    free(rec), free(want);
    a = fmt(MODEL "%s --data '%s/data.txt' --parallel fsdp --steps 4 --resume '%s' --save '%s'%s", model, tmpdir, dir,
            w, to_procs ? "" : (to_world == 4 ? " --world 4" : " --world 2"));
    rc = to_procs ? run_mpi(to_world, a, &out) : run_sim(a, &out);
    if (rc != 0) fail_msg("%s: resuming: exit %d\n%s", tag, rc, out);
    assert_non_null(strstr(out, "resumed from"));
    free(out), free(a), free(dir);
    return w;
}

static void test_checkpoint_resharding(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    /* 4 processes save, 2 simulated ranks resume = 4 simulated ranks save, 2 simulated ranks resume */
    char *p = save_resume("p4_s2", "", 1, 4, 0, 2), *s = save_resume("s4_s2", "", 0, 4, 0, 2);
    if (!files_equal(p, s)) fail_msg("a checkpoint of 4 processes resumed on 2 ranks differs from one of 4 ranks");
    free(p), free(s);
    /* 2 simulated ranks save, 4 processes resume = 2 simulated ranks save, 4 simulated ranks resume */
    p = save_resume("s2_p4", "", 0, 2, 1, 4), s = save_resume("s2_s4", "", 0, 2, 0, 4);
    if (!files_equal(p, s)) fail_msg("a checkpoint of 2 ranks resumed on 4 processes differs from 4 ranks");
    free(p), free(s);
}

/* The Llama (--model llama, grouped-query attention) as processes equals it on simulated ranks: strategies, a
 * balanced pipeline beside DDP, and a checkpoint of 4 processes resumed on 2 ranks; the GPT refuses that
 * checkpoint under mpirun, naming the family. */
#define LLAMA " --model llama --kv-heads 1"
static void test_llama(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    same_bits(2, "ddp" LLAMA);
    same_bits(3, "fsdp --shard full" LLAMA);
    same_bits(2, "zero2" LLAMA);
    same_bits(4, "zero2 --pp 2 --balance 1,1 --check-ddp" LLAMA);
    char *p = save_resume("llama_p4_s2", LLAMA, 1, 4, 0, 2), *s = save_resume("llama_s4_s2", LLAMA, 0, 4, 0, 2);
    if (!files_equal(p, s)) fail_msg("a Llama checkpoint of 4 processes resumed on 2 ranks differs from one of 4 ranks");
    free(p), free(s);
    char *out = NULL, *a = fmt(MODEL " --data '%s/data.txt' --parallel fsdp --steps 4 --resume '%s/ck_llama_p4_s2'",
                               tmpdir, tmpdir);
    int rc = run_mpi(2, a, &out);
    if (rc == 0 || !strstr(out, "written for a model of family 'llama'"))
        fail_msg("the GPT under mpirun resuming a Llama checkpoint: exit %d\n%s", rc, out);
    free(out), free(a);
}

/* ---- faults ---- */

/* Pids of processes whose environment holds marker=value and, if rank >= 0, OMPI_COMM_WORLD_RANK=rank. */
static int find_procs(const char *marker, int rank, pid_t *pids, int cap) {
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    while (d && (e = readdir(d)) && n < cap) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[64], buf[65536];
        snprintf(path, sizeof path, "/proc/%ld/environ", pid);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        int has_marker = 0, has_rank = rank < 0;
        for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
            if (strcmp(buf + i, marker) == 0) has_marker = 1;
            if (rank >= 0 && strcmp(buf + i, want) == 0) has_rank = 1;
        }
        /* the ranks only (mpirun holds the marker too, but no rank) */
        if (has_marker && has_rank && (rank >= 0 || strstr(buf, "OMPI_COMM_WORLD_RANK="))) pids[n++] = (pid_t)pid;
    }
    if (d) closedir(d);
    return n;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The flight records the ranks that timed out left beside the checkpoints (fsc/flight.h): the verdict names rank 1
 * (stopped: it left no record, or, stopped inside the collective, one written when mpirun's SIGCONT woke it to
 * find the others gone) and ranks 0 and 2 waiting in a collective (its number and group) for it. */
/* The length of "OP #N of group NAME(RANKS)" at the start of t (a numbered collective of a named group), 0 if none. */
static size_t call_len(const char *t) {
    char op[32], name[64], ranks[64];
    unsigned long long seq;
    int n = 0;
    if (sscanf(t, "%31[a-z_] #%llu of group %63[^(](%63[0-9,?-])%n", op, &seq, name, ranks, &n) != 4) return 0;
    return (size_t)n;
}

/* Whether the verdict (its line, after "verdict: ") names rank 1 alone as the suspect, first: silent ("left no
 * record") or in a numbered call of a named group (it stopped inside it); then says where ranks 0 and 2 are, each
 * waiting in a numbered call of a named group ("rank 0 waits in ...", "ranks 0,2 wait in ..."), and nothing else.
 * The orders of events a stopped rank allows: it stops before its call, or inside one once its part went out (the
 * others complete it and wait in a later one); it wakes to write its record, or is killed first. */
static int verdict_names_rank1(const char *v) {
    char line[4096];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(v, "\n"), v);
    int seen0 = 0, seen2 = 0, first = 1;
    for (char *c = line, *next; c; c = next, first = 0) {
        next = strstr(c, "; ");
        if (next) *next = 0, next += 2;
        size_t n = 0;
        if (first) {
            if (!strncmp(c, "rank 1 left no record ", 22)) continue;
            if (strncmp(c, "rank 1 waits in ", 16) || !(n = call_len(c + 16))) return 0;
            if (c[16 + n] && strncmp(c + 16 + n, " (", 2)) return 0;
        } else if (!strncmp(c, "ranks 0,2 wait in ", 18) && (n = call_len(c + 18)) && !c[18 + n]) {
            seen0 = seen2 = 1;
        } else if ((!strncmp(c, "rank 0 waits in ", 16) || !strncmp(c, "rank 2 waits in ", 16)) &&
                   (n = call_len(c + 16)) && !c[16 + n]) {
            *(c[5] == '0' ? &seen0 : &seen2) = 1;
        } else {
            return 0; /* another suspect, or a rank not waiting in a collective */
        }
    }
    return seen0 && seen2;
}

static void check_flight(const char *ck, const char *out) {
    char report[8192];
    if (fsc_flight_diagnose_dir(ck, report, sizeof report) != FSC_OK) fail_msg("%s\n%s", fsc_last_error(), out);
    print_message("%s", report);
    const char *v = strstr(report, "verdict: ");
    if (!v || !verdict_names_rank1(v + 9))
        fail_msg("the flight records do not name rank 1 as the one the others wait for:\n%s", report);
    if (!strstr(out, "collective #")) fail_msg("the timeout does not name the collective's number:\n%s", out);
}

/* Start a long 3-process job (FSDP, or the strategy and reduction of extra), hit rank 1 with sig once rank 0 has
 * trained a step, and check that the whole job ends within limit_s with a failure saying expect. */
static void fault(int sig, double timeout_s, double limit_s, const char *expect, const char *extra) {
    char marker[64];
    snprintf(marker, sizeof marker, "FSC_TEST_MPI_JOB=%ld-%d%s", (long)getpid(), sig, extra[0] ? "x" : "");
    char *out = fmt("%s/fault.out", tmpdir);
    unlink(out);
    char *ck = fmt("%s/fault_ck%d%s", tmpdir, sig, extra[0] ? "x" : ""); /* a run of its own */
    char *cmd = fmt("%s FSC_COMM_TIMEOUT=%g exec '%s' -n 3 " MPIRUN_FLAGS " '%s' " MODEL
                    " --steps 1000000 --data '%s/data.txt' %s --save-every 3 --ckpt-dir '%s' > '%s' 2>&1",
                    marker, timeout_s, mpirun, trainer, tmpdir, extra[0] ? extra : "--parallel fsdp", ck, out);
    pid_t job = fork();
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    assert_true(job > 0);
    /* wait until rank 0 has trained past the first checkpoint */
    double t0 = now_s();
    int started = 0;
    while (!started && now_s() - t0 < 60) {
        char *text = prog_slurp(out);
        started = strstr(text, "step    4/") != NULL; /* after the checkpoint of step 3 */
        free(text);
        if (!started) usleep(50000);
    }
    pid_t victim[4];
    int nv = find_procs(marker, 1, victim, 4);
    if (!started || nv != 1) {
        kill(job, SIGKILL);
        fail_msg("the job did not start (%d processes of rank 1 found)", nv);
    }
    kill(victim[0], sig);
    double hit = now_s();
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(job, &status, WNOHANG)) == 0 && now_s() - hit < limit_s) usleep(50000);
    double took = now_s() - hit;
    pid_t left[8];
    int nl = find_procs(marker, -1, left, 8);
    if (got != job) kill(job, SIGKILL), waitpid(job, &status, 0);
    for (int i = 0; i < nl; i++) kill(left[i], SIGKILL);
    char *text = prog_slurp(out);
    if (got != job) fail_msg("the job still ran %.1f s after rank 1 got signal %d\n%s", took, sig, text);
    if (nl) fail_msg("%d process(es) of the job survived it\n%s", nl, text);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!strstr(text, expect)) fail_msg("the output does not say \"%s\":\n%s", expect, text);
    if (sig == SIGSTOP && !extra[0]) check_flight(ck, text); /* MPI's own collectives name no rank */
    print_message("signal %d to rank 1: the job ended %.1f s later\n", sig, took);
    /* the checkpoints written before the fault stay loadable: the newest resumes on 3 simulated ranks */
    char latest[4096];
    int64_t step = -1;
    assert_int_equal(fsc_ckpt_latest(ck, latest, sizeof latest, &step), FSC_OK);
    if (step < 3) fail_msg("no complete checkpoint in %s after the fault\n%s", ck, text);
    char *args = fmt(MODEL " --data '%s/data.txt' --parallel fsdp --world 3 --steps %lld --resume '%s'", tmpdir,
                     (long long)step + 1, ck), *rout = NULL;
    int rc = run_sim(args, &rout);
    if (rc != 0 || !strstr(rout, "resumed from")) fail_msg("resuming %s: exit %d\n%s", ck, rc, rout);
    free(args), free(rout), free(ck);
    free(text), free(cmd), free(out);
}

static void test_killed_rank_ends_the_job(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    /* mpirun notices a rank that dies and ends the others ("process rank 1 ... exited on signal 9") */
    fault(SIGKILL, 5, 40, "rank 1", ""); /* the limits leave room for a loaded machine */
}

static void test_stopped_rank_times_out(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    /* a rank that stops answering: the others time out naming it, exit, and mpirun ends the stopped one */
    fault(SIGSTOP, 5, 60, "waiting for rank 1", "");
    /* the same in MPI's own collectives (--reduce native): they timed out never, and the job hung. The job must
     * end; its message ("timed out after 5 s in MPI's own collective") is not always there: mpirun may end the
     * job as the first rank exits, before the others' lines come through */
    fault(SIGSTOP, 5, 60, "", "--parallel ddp --reduce native");
}

/* A process that ends before its MPI_Init (rank 1 alone given --print-schedule: it prints nothing, as a rank other
 * than 0, and exits with status 0) left rank 0 in MPI_Init for ever, mpirun waiting with it (mpirun's own --timeout
 * 60 stands in for the hang here). fsc-train's watchdog now ends rank 0 after FSC_RENDEZVOUS_TIMEOUT +
 * FSC_COMM_TIMEOUT with a message, and mpirun ends the job (the library itself never exits). Rank 0 starts 2 s late,
 * so that rank 1 has ended before anyone called MPI_Init (else mpirun may notice that rank 1 "exited improperly" and
 * end the job itself). */
static void test_process_that_never_starts_mpi(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    char *args = fmt("--timeout 60 -x FSC_COMM_TIMEOUT=3 -x FSC_RENDEZVOUS_TIMEOUT=1 " MPIRUN_FLAGS " -n 1 /bin/sh -c "
                     "\"sleep 2; exec '%s' " MODEL " --parallel pipe --pp 2 --data '%s/data.txt'\" : -n 1 '%s' " MODEL
                     " --parallel pipe --pp 2 --data '%s/data.txt' --print-schedule", trainer, tmpdir, trainer, tmpdir),
         *out = NULL;
    double t0 = now_s();
    int rc = prog_run(mpirun, args, tmpdir, &out, NULL);
    double took = now_s() - t0;
    if (rc == 0 || took > 45 || !strstr(out, "the job's communicator did not start within 4 s"))
        fail_msg("mpirun %s: exit %d after %.1f s\n%s", args, rc, took, out);
    free(args), free(out);
}

/* Two runs into one --ckpt-dir: while a simulated run trains there, a job of 2 processes is refused with the message
 * naming the running one's pid (the lock, fsc_ckpt_lock, is collective: every rank returns it, but mpirun ends the
 * job when the first process exits, so the other may not get to print it), and goes ahead once that run is gone
 * (killed: the kernel released its lock). That every rank refuses is test_ckpt_lock's, on simulated ranks. */
static void test_ckpt_dir_lock(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    char *ck = fmt("%s/locked", tmpdir), *out = NULL, pid[64];
    char *first = fmt(MODEL " --data '%s/data.txt' --steps 100000 --save-every 2 --ckpt-dir '%s' --resume '%s'", tmpdir,
                      ck, ck);
    int fd;
    pid_t a = prog_start_held(trainer, first, tmpdir, 4, &fd);
    char *second = fmt(MODEL " --data '%s/data.txt' --parallel ddp --save-every 1 --ckpt-dir '%s' --resume '%s'",
                       tmpdir, ck, ck);
    int rc = run_mpi(2, second, &out);
    snprintf(pid, sizeof pid, "is held by pid %ld on host", (long)a);
    int said = 0;
    for (const char *p = out; (p = strstr(p, pid)) != NULL; p++) said++;
    if (rc == 0 || said < 1) fail_msg("mpirun -n 2 into a directory in use: exit %d, %d rank(s) named the holder\n%s", rc,
                                      said, out);
    free(out);
    prog_held_end(a, fd);
    rc = run_mpi(2, second, &out);
    if (rc != 0) fail_msg("mpirun -n 2 after the holder ended: exit %d\n%s", rc, out);
    free(out), free(second), free(first), free(ck);
}

/* ---- the communicator itself: every operation, against the simulated communicator ---- */

/* Element i of rank r's input: values over many exponents and signs, so the order of a sum shows in its bits;
 * a NaN on rank 1 at one index (MAX keeps it). */
static float input(int r, size_t i, fsc_dtype dt) {
    uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    if (dt == FSC_I32 || dt == FSC_I64) return (float)(int32_t)(h % 2000001u) - 1000000.0f;
    if (r == 1 && i == 5) return NAN;
    float v = ldexpf((float)(h % 8192u) - 4096.0f, (int)(h >> 27) - 12); /* +-4096 x 2^-12..2^19 */
    return dt == FSC_F16 ? fminf(fmaxf(v, -60000.0f), 60000.0f) : v;
}

typedef struct {
    unsigned char *out; /* what this rank's calls produced, appended in order */
    size_t len, cap;
    fsc_comm_stats stats;
} script_out;

static fsc_status room(script_out *o, size_t bytes) {
    if (o->len + bytes > o->cap) {
        o->cap = (o->len + bytes) * 2;
        o->out = realloc(o->out, o->cap);
        if (!o->out) return fsc_error(FSC_ERR_NOMEM, "script: out of memory");
    }
    return FSC_OK;
}

static fsc_status keep(script_out *o, fsc_device *dev, const void *p, size_t bytes) {
    FSC_TRY(room(o, bytes));
    FSC_TRY(fsc_device_download(dev, o->out + o->len, p, bytes));
    o->len += bytes;
    return FSC_OK;
}

static fsc_status keep_host(script_out *o, const void *p, size_t bytes) {
    FSC_TRY(room(o, bytes));
    memcpy(o->out + o->len, p, bytes);
    o->len += bytes;
    return FSC_OK;
}

/* Fill n elements of dt for rank r, offset by `salt` (host, then to the device buffer d). */
static fsc_status fill(fsc_device *dev, void *d, int r, size_t n, fsc_dtype dt, size_t salt) {
    size_t es = fsc_dtype_size(dt);
    unsigned char *h = malloc(n * es + 8);
    float *f = malloc(n * sizeof(float) + 4);
    if (!h || !f) return free(h), free(f), fsc_error(FSC_ERR_NOMEM, "script: out of memory");
    for (size_t i = 0; i < n; i++) f[i] = input(r, i + salt, dt);
    if (dt == FSC_I32)
        for (size_t i = 0; i < n; i++) ((int32_t *)h)[i] = (int32_t)f[i];
    else if (dt == FSC_I64) /* large, so that sums wrap */
        for (size_t i = 0; i < n; i++) ((int64_t *)h)[i] = (int64_t)((uint64_t)(int64_t)f[i] * 0x9E3779B97F4A7C15ull);
    else if (dt == FSC_U8)
        for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i + salt + (size_t)r);
    else
        fsc_convert_host(h, dt, f, FSC_F32, n);
    fsc_status s = fsc_device_upload(dev, d, h, n * es);
    free(h), free(f);
    return s;
}

/* The same calls on every rank, each result kept: reductions of every dtype and operation, in and out of
 * place, of sizes that do and do not divide by the group; all-gather, broadcast, all-to-all, send/recv in a
 * ring, barrier, split and a reduction on the halves, started (asynchronous) calls in flight together,
 * agreement. */
static fsc_status script(fsc_rank *rk, script_out *o) {
    fsc_comm *c = rk->comm;
    fsc_device *dev = rk->dev;
    const int N = rk->world, me = rk->rank;
    const size_t big = 1000 * (size_t)N + 7;
    void *a = NULL, *b = NULL;
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_COMM, big * 8 * (size_t)N, &a));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_COMM, big * 8 * (size_t)N, &b));
    const fsc_dtype dts[] = {FSC_F32, FSC_BF16, FSC_F16, FSC_I32, FSC_I64};
    const size_t counts[] = {1, 5, 6, (size_t)N * 3 + 1, big};
    fsc_status s = FSC_OK;
    for (int d = 0; d < 5 && s == FSC_OK; d++) {
        size_t es = fsc_dtype_size(dts[d]);
        for (int op = FSC_SUM; op <= FSC_MAX && s == FSC_OK; op++) {
            if ((dts[d] == FSC_I32 || dts[d] == FSC_I64) && op == FSC_AVG) continue;
            for (int k = 0; k < 5 && s == FSC_OK; k++) {
                size_t n = counts[k], salt = (size_t)(d * 7 + op * 3 + k) * 1000;
                s = fill(dev, a, me, n, dts[d], salt);
                if (s == FSC_OK) s = fsc_comm_all_reduce(c, a, b, n, dts[d], (fsc_redop)op);
                if (s == FSC_OK) s = keep(o, dev, b, n * es);
                if (s == FSC_OK) s = fsc_comm_all_reduce(c, a, a, n, dts[d], (fsc_redop)op); /* in place */
                if (s == FSC_OK) s = keep(o, dev, a, n * es);
                if (s == FSC_OK) s = fill(dev, a, me, n * (size_t)N, dts[d], salt);
                if (s == FSC_OK) s = fsc_comm_reduce_scatter(c, a, b, n, dts[d], (fsc_redop)op);
                if (s == FSC_OK) s = keep(o, dev, b, n * es);
                unsigned char *mine = (unsigned char *)a + (size_t)me * n * es;
                if (s == FSC_OK) s = fsc_comm_reduce_scatter(c, a, mine, n, dts[d], (fsc_redop)op); /* in place */
                if (s == FSC_OK) s = keep(o, dev, mine, n * es);
            }
        }
    }
    const size_t n = 333;
    if (s == FSC_OK) s = fill(dev, a, me, n, FSC_BF16, 1);
    if (s == FSC_OK) s = fsc_comm_all_gather(c, a, b, n, FSC_BF16);
    if (s == FSC_OK) s = keep(o, dev, b, n * 2 * (size_t)N);
    if (s == FSC_OK) s = fill(dev, a, me, n, FSC_F32, 2);
    if (s == FSC_OK) s = fsc_comm_broadcast(c, a, n, FSC_F32, N - 1);
    if (s == FSC_OK) s = keep(o, dev, a, n * 4);
    if (s == FSC_OK) s = fill(dev, a, me, n * (size_t)N, FSC_U8, 3);
    if (s == FSC_OK) s = fsc_comm_all_to_all(c, a, b, n, FSC_U8);
    if (s == FSC_OK) s = keep(o, dev, b, n * (size_t)N);
    /* a ring: everyone sends first, then receives (buffered sends do not deadlock) */
    if (s == FSC_OK) s = fill(dev, a, me, n, FSC_F32, 4);
    if (s == FSC_OK) s = fsc_comm_send(c, a, n, FSC_F32, (me + 1) % N);
    if (s == FSC_OK) s = fsc_comm_send(c, a, 0, FSC_F32, (me + 1) % N);
    if (s == FSC_OK) s = fsc_comm_recv(c, b, n, FSC_F32, (me + N - 1) % N);
    if (s == FSC_OK) s = fsc_comm_recv(c, b, 0, FSC_F32, (me + N - 1) % N);
    if (s == FSC_OK) s = keep(o, dev, b, n * 4);
    if (s == FSC_OK) s = fsc_comm_barrier(c);
    fsc_comm *half = NULL;
    if (s == FSC_OK) s = fsc_comm_split(c, me % 2, N - me, &half); /* keys reverse the order */
    if (s == FSC_OK) {
        int32_t who[2] = {fsc_comm_rank(half), fsc_comm_size(half)};
        s = keep_host(o, who, sizeof who);
        if (s == FSC_OK) s = fill(dev, a, me, 100, FSC_F32, 5);
        if (s == FSC_OK) s = fsc_comm_all_reduce(half, a, a, 100, FSC_F32, FSC_SUM);
        if (s == FSC_OK) s = keep(o, dev, a, 400);
    }
    fsc_comm_free(half);
    /* started calls in flight together (docs/overlap.md), waited for in reverse: the same bits */
    fsc_comm_req *q[5] = {0};
    float *bf = b;
    if (s == FSC_OK) s = fill(dev, a, me, n * (size_t)N, FSC_F32, 6);
    if (s == FSC_OK) s = fsc_comm_iall_reduce(c, a, bf, n, FSC_F32, FSC_SUM, &q[0]);
    if (s == FSC_OK) s = fsc_comm_ireduce_scatter(c, a, bf + n, n, FSC_F32, FSC_SUM, &q[1]);
    if (s == FSC_OK) s = fsc_comm_iall_gather(c, a, bf + 2 * n, n, FSC_F32, &q[2]);
    if (s == FSC_OK) s = fsc_comm_isend(c, a, n, FSC_F32, (me + 1) % N, &q[3]);
    if (s == FSC_OK) s = fsc_comm_irecv(c, bf + 2 * n + n * (size_t)N, n, FSC_F32, (me + N - 1) % N, &q[4]);
    for (int k = 4; k >= 0; k--) {
        fsc_status w = q[k] ? fsc_comm_wait(q[k]) : FSC_OK;
        if (s == FSC_OK) s = w;
        fsc_comm_req_free(q[k]);
    }
    if (s == FSC_OK) s = keep(o, dev, bf, (3 * n + n * (size_t)N) * 4);
    if (s == FSC_OK) {
        fsc_clear_error();
        fsc_status v = fsc_comm_agree(c, dev, me == N - 1 ? fsc_error(FSC_ERR_INVALID, "rank-%d-says-no", me) : FSC_OK);
        int32_t code = (int32_t)v;
        s = keep_host(o, &code, sizeof code);
        if (s == FSC_OK && (v == FSC_OK || !strstr(fsc_last_error(), "rank-"))) s = fsc_error(FSC_ERR_INTERNAL, "agree lost the failure");
    }
    if (s == FSC_OK) o->stats = *fsc_comm_get_stats(c);
    fsc_device_release(dev, a);
    fsc_device_release(dev, b);
    return s;
}

static fsc_status sim_script(fsc_rank *rk, void *arg) { return script(rk, &((script_out *)arg)[rk->rank]); }
static fsc_status mpi_script(fsc_rank *rk, void *arg) { return script(rk, arg); }

/* A worker's script on this process's rank of the launcher's world (the MPI plug-in, the cpu device). */
static fsc_status run_script(fsc_rank_fn fn, void *arg) {
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.device = "cpu";
    return fsc_cluster_run_from_env_opts(&co, fn, arg);
}

/* Under mpirun: run the script on the MPI communicator and on a simulated cluster of as many ranks in this
 * process, and compare this rank's results byte for byte (and the call and byte counters). */
static int worker(void) {
    script_out got = {0};
    if (run_script(mpi_script, &got) != FSC_OK) {
        fprintf(stderr, "worker: %s\n", fsc_last_error());
        return 1;
    }
    const char *rv = getenv("OMPI_COMM_WORLD_RANK"), *nv = getenv("OMPI_COMM_WORLD_SIZE");
    int me = rv ? atoi(rv) : 0, N = nv ? atoi(nv) : 1;
    script_out *want = calloc((size_t)N, sizeof *want);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.device = "cpu";
    co.world = N;
    if (fsc_cluster_run(&co, sim_script, want) != FSC_OK) {
        fprintf(stderr, "worker: simulated: %s\n", fsc_last_error());
        return 1;
    }
    int rc = 0;
    if (got.len != want[me].len) {
        fprintf(stderr, "rank %d: %zu result bytes, simulated %zu\n", me, got.len, want[me].len);
        rc = 1;
    } else {
        for (size_t i = 0; i < got.len; i++)
            if (got.out[i] != want[me].out[i]) {
                fprintf(stderr, "rank %d: result byte %zu differs from the simulated communicator's\n", me, i);
                rc = 1;
                break;
            }
    }
    if (memcmp(&got.stats, &want[me].stats, sizeof got.stats) != 0) {
        fprintf(stderr, "rank %d: the call/byte counters differ from the simulated communicator's\n", me);
        rc = 1;
    }
    if (rc == 0) printf("rank %d of %d: %zu result bytes equal the simulated communicator's\n", me, N, got.len);
    for (int r = 0; r < N; r++) free(want[r].out);
    free(want), free(got.out);
    return rc;
}

/* Ranks in different calls (as when their options differ): rank 0 starts a gather of 1 float per rank into the
 * start of a buffer whose rest holds a pattern, rank 1 broadcasts BIG floats to it. Rank 0's call must fail
 * saying that the ranks made different calls, with nothing written beyond its receive (Open MPI's shared-memory
 * single copy writes a longer message past a posted receive instead of failing it), a barrier called before
 * the wait (the gather fails on the communicator's progress thread) must repeat that cause, and so must a call
 * started before on another communicator, still waiting for rank 1. Rank 1 only sends and waits: the job ends
 * when rank 0 exits. */
enum { BIG = 5000 };
static fsc_status mismatch_script(fsc_rank *rk, void *arg) {
    (void)arg;
    float *buf = NULL, *host = malloc(BIG * sizeof(float));
    if (!host) return fsc_error(FSC_ERR_NOMEM, "mismatch: out of memory");
    for (int i = 0; i < BIG; i++) host[i] = (float)i + 0.5f;
    fsc_comm *dup = NULL;
    fsc_status s = fsc_device_alloc(rk->dev, FSC_TAG_COMM, BIG * sizeof(float), (void **)&buf);
    if (s == FSC_OK) s = fsc_device_upload(rk->dev, buf, host, BIG * sizeof(float));
    if (s == FSC_OK) s = fsc_comm_split(rk->comm, 0, rk->rank, &dup);
    if (s != FSC_OK || rk->rank != 0) {
        if (s == FSC_OK && rk->rank == 1) s = fsc_comm_broadcast(rk->comm, buf, BIG, FSC_F32, 1);
        fsc_comm_free(dup);
        fsc_device_release(rk->dev, buf);
        free(host);
        return s;
    }
    /* a call on another communicator, waiting on its progress thread for rank 1, which never makes it: the
     * failure below must stop it too (MPI makes no more progress once a call failed) */
    fsc_comm_req *q = NULL, *qd = NULL;
    fsc_status got = fsc_comm_iall_reduce(dup, buf + BIG - 4, buf + BIG - 4, 4, FSC_F32, FSC_SUM, &qd);
    if (got == FSC_OK) got = fsc_comm_iall_gather(rk->comm, buf, buf, 1, FSC_F32, &q); /* receives into buf[1] */
    char why[1024] = "", other[1024] = "";
    if (got == FSC_OK && fsc_comm_barrier(rk->comm) != FSC_OK) snprintf(why, sizeof why, "%s", fsc_last_error());
    if (q) got = fsc_comm_wait(q);
    if (qd && fsc_comm_wait(qd) != FSC_OK) snprintf(other, sizeof other, "%s", fsc_last_error());
    fsc_comm_req_free(q);
    fsc_comm_req_free(qd);
    fsc_comm_free(dup);
    s = fsc_device_download(rk->dev, host, buf, (BIG - 4) * sizeof(float));
    int kept = 0;
    for (int i = 2; s == FSC_OK && i < BIG - 4; i++) kept += host[i] == (float)i + 0.5f;
    fsc_device_release(rk->dev, buf);
    free(host);
    FSC_TRY(s);
    if (got == FSC_OK) return fsc_error(FSC_ERR_INTERNAL, "mismatch: rank 0's all_gather succeeded");
    if (kept != BIG - 6) return fsc_error(FSC_ERR_INTERNAL, "mismatch: %d floats beyond the receive were overwritten "
                                          "(%s)", BIG - 6 - kept, why);
    printf("rank 0 refused the mismatch, nothing overwritten: %s\nthe other communicator's call: %s\n", why, other);
    fflush(stdout);
    return got;
}

static int mismatch_worker(void) {
    fsc_status s = run_script(mismatch_script, NULL);
    fprintf(stderr, "mismatch worker: %s\n", s == FSC_OK ? "no failure" : fsc_last_error());
    return s == FSC_OK ? 1 : 0;
}

/* A timeout in a group split from the world names the rank it waits for as mpirun and the world's messages do: 3
 * processes, world ranks 1 and 2 form a group (ranks 0 and 1 in it), and world rank 1 never makes the group's
 * all-reduce. World rank 2's call times out "waiting for rank 0 (world rank 1)", as the simulator labels it (before:
 * "waiting for rank 0", the group's rank, which sent the reader to world rank 0, alive and well). */
static fsc_status group_timeout_script(fsc_rank *rk, void *arg) {
    (void)arg;
    fsc_comm *g = NULL;
    float *buf = NULL;
    fsc_status s = fsc_comm_split(rk->comm, rk->rank > 0, rk->rank, &g);
    if (s == FSC_OK) s = fsc_device_alloc(rk->dev, FSC_TAG_COMM, 4 * sizeof(float), (void **)&buf);
    if (s == FSC_OK && rk->rank == 2) s = fsc_comm_all_reduce(g, buf, buf, 4, FSC_F32, FSC_SUM);
    fsc_device_release(rk->dev, buf);
    fsc_comm_free(g);
    return s;
}

static int group_timeout_worker(void) {
    fsc_status s = run_script(group_timeout_script, NULL);
    if (s != FSC_OK) fprintf(stderr, "group timeout worker: %s\n", fsc_last_error());
    return s == FSC_OK ? 0 : 1;
}

static void test_group_timeout_names_world_rank(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    char *args = fmt("--timeout 60 -n 3 " MPIRUN_FLAGS " -x FSC_MPI_PLUGIN=%s -x FSC_COMM_TIMEOUT=2 '%s' "
                     "--worker-group-timeout", plugin, self_path), *out = NULL;
    int rc = prog_run(mpirun, args, tmpdir, &out, NULL);
    if (rc == 0 || !strstr(out, "all_reduce timed out after 2 s waiting for rank 0 (world rank 1) (it died"))
        fail_msg("mpirun %s: exit %d\n%s", args, rc, out);
    free(args), free(out);
}

/* A rank gives up on a communicator (fsc_comm_revoke: a pipeline stage whose action failed, on its boundary links):
 * 2 processes on a link split from the world. Rank 0 starts a receive from rank 1, which never sends, then gives up
 * on the link; rank 1 waits in a receive from rank 0, which never sends. With a 60 s timeout, both calls fail in
 * under 20 s naming world rank 0 and its reason (before, rank 1 waited the whole timeout and rank 0's started
 * receive with it), a later call on the link fails at once, and the world's communicator still works (a barrier). */
static fsc_status revoke_script(fsc_rank *rk, void *arg) {
    (void)arg;
    static const char *reason = "world rank 0 gave up on the group: its stage's layer failed (test)";
    fsc_comm *link = NULL;
    float *buf = NULL;
    fsc_status s = fsc_comm_split(rk->comm, 0, rk->rank, &link);
    if (s == FSC_OK) s = fsc_device_alloc(rk->dev, FSC_TAG_COMM, 1000 * sizeof(float), (void **)&buf);
    char why[1024] = "", later[1024] = "";
    fsc_status got = FSC_OK, again = FSC_OK;
    const double t0 = now_s();
    if (s == FSC_OK && rk->rank == 0) {
        fsc_comm_req *q = NULL;
        s = fsc_comm_irecv(link, buf, 1000, FSC_F32, 1, &q);
        fsc_comm_revoke(link, "its stage's layer failed (test)");
        if (s == FSC_OK) got = fsc_comm_wait(q);
        fsc_comm_req_free(q);
    } else if (s == FSC_OK) {
        got = fsc_comm_recv(link, buf, 1000, FSC_F32, 0);
    }
    const double took = now_s() - t0;
    snprintf(why, sizeof why, "%s", fsc_last_error());
    if (s == FSC_OK) again = fsc_comm_send(link, buf, 10, FSC_F32, 1 - rk->rank);
    snprintf(later, sizeof later, "%s", fsc_last_error());
    if (s == FSC_OK) s = fsc_comm_barrier(rk->comm);
    fsc_comm_free(link);
    fsc_device_release(rk->dev, buf);
    FSC_TRY(s);
    if (got != FSC_ERR_COMM || !strstr(why, reason) || took > 20)
        return fsc_error(FSC_ERR_INTERNAL, "revoke: rank %d's call returned %d after %.1f s: %s", rk->rank, (int)got,
                         took, why);
    if (again != FSC_ERR_COMM || !strstr(later, reason))
        return fsc_error(FSC_ERR_INTERNAL, "revoke: rank %d's later call returned %d: %s", rk->rank, (int)again, later);
    printf("rank %d: stopped after %.2f s: %s\n", rk->rank, took, why);
    fflush(stdout);
    return FSC_OK;
}

static int revoke_worker(void) {
    fsc_status s = run_script(revoke_script, NULL);
    if (s != FSC_OK) fprintf(stderr, "revoke worker: %s\n", fsc_last_error());
    return s == FSC_OK ? 0 : 1;
}

static void test_revoke_stops_the_peer_at_once(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    char *args = fmt("--timeout 120 -n 2 " MPIRUN_FLAGS " -x FSC_MPI_PLUGIN=%s -x FSC_COMM_TIMEOUT=60 '%s' "
                     "--worker-revoke", plugin, self_path), *out = NULL;
    const double t0 = now_s();
    int rc = prog_run(mpirun, args, tmpdir, &out, NULL);
    const double took = now_s() - t0;
    if (rc != 0 || !strstr(out, "rank 0: stopped") || !strstr(out, "rank 1: stopped") || took > 50)
        fail_msg("mpirun %s: exit %d after %.1f s\n%s", args, rc, took, out);
    free(args), free(out);
}

static void test_communicator_equals_simulated(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    for (int n = 2; n <= 4; n++) {
        char *args = fmt("-n %d " MPIRUN_FLAGS " -x FSC_MPI_PLUGIN=%s -x FSC_COMM_TIMEOUT=30 '%s' --worker", n,
                         plugin, self_path), *out = NULL;
        int rc = prog_run(mpirun, args, tmpdir, &out, NULL);
        if (rc != 0 || !strstr(out, "equal the simulated")) fail_msg("mpirun %s: exit %d\n%s", args, rc, out);
        print_message("the MPI communicator on %d processes = the simulated one\n", n);
        free(args), free(out);
    }
}

/* A receive never takes a message of another length: the call fails on the rank that gets it, which goes on
 * to free its buffers cleanly, and later calls repeat the cause (not an empty "after an earlier failure: "). */
static void test_mismatched_calls_fail_cleanly(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    char *args = fmt("-n 2 " MPIRUN_FLAGS " -x FSC_MPI_PLUGIN=%s -x FSC_COMM_TIMEOUT=60 '%s' --worker-mismatch", plugin,
                     self_path), *out = NULL;
    int rc = prog_run(mpirun, args, tmpdir, &out, NULL);
    if (!strstr(out, "rank 0 refused the mismatch, nothing overwritten") ||
        !strstr(out, "the other communicator's call: collective #1: all_reduce on comm 'world/0' (rank 0 of 2): "
                     "all_reduce: the MPI "
                     "communicator is unusable after an earlier failure: all_gather: rank 1 sent") ||
        !strstr(out, "after an earlier failure: all_gather: rank 1 sent 20000 bytes where this rank expects 4 (the "
                     "ranks made different calls)"))
        fail_msg("mpirun %s: exit %d\n%s", args, rc, out);
    free(args), free(out);
}

/* ---- ranks started with different options ---- */

/* mpirun's MPMD form: rank 0 runs the trainer with `a`, rank 1 with `b` (each after MODEL --parallel fsdp), in
 * the folders wa and wb (NULL: tmpdir). The ranks must refuse before training with msg (every rank returns it,
 * tests/test_engine_settings.c checks that on simulated ranks; here mpirun ends the job once the first process
 * exits with status 1, so the other may not have printed it yet). */
static void refused(const char *wa, const char *a, const char *wb, const char *b, const char *msg) {
    char *args = fmt(MPIRUN_FLAGS " -wdir '%s' -n 1 '%s' " MODEL " --parallel fsdp %s : -wdir '%s' -n 1 '%s' " MODEL
                     " --parallel fsdp %s", wa ? wa : tmpdir, trainer, a, wb ? wb : tmpdir, trainer, b), *out = NULL;
    int rc = prog_run(mpirun, args, tmpdir, &out, NULL);
    char *said = fmt("of 2 (openmpi): %s", msg);
    if (rc == 0 || !strstr(out, said) || strstr(out, "step    1/"))
        fail_msg("mpirun %s: exit %d, want a rank to say \"%s\":\n%s", args, rc, msg, out);
    free(args), free(out), free(said);
}

/* Options and data that must agree, given differently to rank 1 (issue: ranks that disagree trained on, or
 * corrupted the heap in a mismatched collective): every rank refuses, naming the option and both values. */
static void test_ranks_that_disagree_refuse(void **state) {
    (void)state;
    SKIP_WITHOUT_MPI();
    char *data = fmt("--data '%s/data.txt'", tmpdir), *b = NULL;
    refused(NULL, data, NULL, (b = fmt("%s --lr 0.001", data)), "ranks disagree on --lr: rank 0 has 0.01, rank 1 has "
                                                                 "0.001");
    free(b);
    refused(NULL, data, NULL, (b = fmt("%s --seed 7", data)), "ranks disagree on --seed: rank 0 has 1, rank 1 has 7");
    free(b);
    refused(NULL, data, NULL, (b = fmt("%s --optimizer sgd", data)),
            "ranks disagree on --optimizer: rank 0 has adamw, rank 1 has sgd");
    free(b);
    refused(NULL, data, NULL, (b = fmt("%s --clip 0", data)), "ranks disagree on --clip: rank 0 has 1, rank 1 has 0");
    free(b);
    refused(NULL, data, NULL, (b = fmt("%s --parallel zero2", data)),
            "ranks disagree on --parallel: rank 0 has fsdp, rank 1 has zero2");
    free(b);
    /* another file: its path; the same path naming other bytes in each rank's folder: the content's sample */
    char *other = fmt("%s/other.txt", tmpdir), *cmd = fmt("cp '%s/data.txt' '%s'", tmpdir, other);
    assert_int_equal(system(cmd), 0);
    b = fmt("--data '%s'", other);
    char *want = fmt("ranks disagree on --data: rank 0 has %s/data.txt, rank 1 has %s", tmpdir, other);
    refused(NULL, data, NULL, b, want);
    free(want), free(b), free(cmd);
    char *wa = fmt("%s/wa", tmpdir), *wb = fmt("%s/wb", tmpdir);
    cmd = fmt("mkdir -p '%s' '%s' && cp '%s/data.txt' '%s/d.txt' && tr a b < '%s/data.txt' > '%s/d.txt'", wa, wb,
              tmpdir, wa, tmpdir, wb);
    assert_int_equal(system(cmd), 0);
    refused(wa, "--data d.txt", wb, "--data d.txt", "ranks disagree on --data sample: rank 0 has ");
    free(cmd), free(wa), free(wb), free(other), free(data);
}

/* ---- launchers ---- */

static void expect(int rc_want, const char *env, const char *args, const char *msg) {
    char *full = fmt("%s '%s' " MODEL " --data '%s/data.txt' %s", env, trainer, tmpdir, args), *out = NULL;
    char *cmd = fmt("-c \"%s\"", full);
    int rc = prog_run("/bin/sh", cmd, tmpdir, &out, NULL);
    if (rc != rc_want || !strstr(out, msg)) fail_msg("%s: exit %d (want %d), output:\n%s\n(want \"%s\")", full, rc,
                                                     rc_want, out, msg);
    free(full), free(cmd), free(out);
}

static fsc_status count_calls(fsc_rank *r, void *arg) {
    int *calls = arg;
    (*calls)++;
    return r->world == 1 && r->comm && r->dev ? FSC_OK : fsc_error(FSC_ERR_INTERNAL, "not a world of 1");
}

/* fsc_cluster_run_from_env_opts: the device picks the communicator; what is missing is said. */
static void test_run_from_env_opts(void **state) {
    (void)state;
    const char *vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL};
    char *saved[16] = {0};
    for (int i = 0; vars[i]; i++) {
        if (getenv(vars[i])) saved[i] = strdup(getenv(vars[i]));
        unsetenv(vars[i]);
    }
    fsc_cluster_opts co = fsc_cluster_opts_default();
    int calls = 0;
    /* no launcher on cpu: one rank in this process, no MPI needed */
    assert_int_equal(fsc_cluster_run_from_env_opts(&co, count_calls, &calls), FSC_OK);
    assert_int_equal(calls, 1);
    co.device = "tpu";
    assert_int_equal(fsc_cluster_run_from_env_opts(&co, count_calls, &calls), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "unknown device \"tpu\""));
    /* simulated ranks refuse native reductions rather than ignore them */
    co = fsc_cluster_opts_default();
    co.world = 2, co.reduce_native = 1;
    assert_int_equal(fsc_cluster_run(&co, count_calls, &calls), FSC_ERR_INVALID);
    assert_non_null(strstr(fsc_last_error(), "simulated ranks always sum in rank order"));
    /* torchrun's processes cannot form an MPI world */
    setenv("RANK", "1", 1), setenv("WORLD_SIZE", "2", 1), setenv("LOCAL_RANK", "1", 1);
    co = fsc_cluster_opts_default();
    assert_int_equal(fsc_cluster_run_from_env_opts(&co, count_calls, &calls), FSC_ERR_UNSUPPORTED);
    assert_non_null(strstr(fsc_last_error(), "rank 1 of 2 (torchrun)"));
    assert_non_null(strstr(fsc_last_error(), "use mpirun -n 2"));
    unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("LOCAL_RANK");
    /* Open MPI's variables without the plug-in: what is missing and how to get it */
    setenv("OMPI_COMM_WORLD_RANK", "0", 1), setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1), setenv("FSC_MPI_PLUGIN", "/nonexistent/libfsc_mpi.so", 1);
    assert_int_equal(fsc_cluster_run_from_env_opts(&co, count_calls, &calls), FSC_ERR_UNSUPPORTED);
    assert_non_null(strstr(fsc_last_error(), "2 processes on the cpu device talk through MPI"));
    assert_non_null(strstr(fsc_last_error(), "libfsc_mpi.so was not found"));
    assert_non_null(strstr(fsc_last_error(), "`make mpi`")); /* the fix, and the variable, are named */
    assert_non_null(strstr(fsc_last_error(), "set FSC_MPI_PLUGIN to its path"));
    assert_int_equal(calls, 1);
    unsetenv("OMPI_COMM_WORLD_RANK"), unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("FSC_MPI_PLUGIN");
    for (int i = 0; vars[i]; i++)
        if (saved[i]) setenv(vars[i], saved[i], 1), free(saved[i]);
}

static void test_launcher_checks(void **state) {
    (void)state;
    const char *ompi1 = "env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0";
    const char *torch2 = "env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0";
    /* a world-1 job started by a launcher with --world 4 is refused, never run as 4 simulated ranks */
    expect(2, ompi1, "--parallel ddp --world 4", "--world 4, but the launcher (openmpi) started 1 process");
    /* with --world left out, a world-1 launch is one rank */
    expect(0, ompi1, "--steps 1", "step    1/1");
    expect(2, "env FSC_LAUNCHER=none", "--parallel ddp --world 2 --reduce native", "--reduce native applies to processes");
    /* torchrun cannot start MPI processes: say what can */
    expect(1, torch2, "--parallel ddp", "use mpirun -n 2");
    if (why_skip) return;
    /* processes without the plug-in: the error names what is missing and how to get it */
    char *args = fmt("-x FSC_MPI_PLUGIN=%s/none.so '%s' " MODEL " --data '%s/data.txt' --parallel ddp", tmpdir, trainer,
                     tmpdir);
    char *full = fmt("-n 2 " MPIRUN_FLAGS " %s", args), *out = NULL;
    int rc = prog_run(mpirun, full, tmpdir, &out, NULL);
    if (rc == 0 || !strstr(out, "libfsc_mpi.so was not found") || !strstr(out, "apt-get install libopenmpi-dev"))
        fail_msg("mpirun %s: exit %d\n%s", full, rc, out);
    free(args), free(full), free(out);
    /* a launcher's rank that is not MPI's (Slurm's variables forced under mpirun, every process SLURM_PROCID=0):
     * refused on rank 1 with the message, and the job ends. Before, rank 1 called MPI_Finalize first, which waited
     * for rank 0, itself waiting in MPI_Comm_dup for rank 1: the job hung without a word (mpirun's --timeout 30
     * here) */
    args = fmt("--timeout 30 -n 2 " MPIRUN_FLAGS " -x FSC_LAUNCHER=slurm -x SLURM_PROCID=0 -x SLURM_NTASKS=2 -x "
               "SLURM_LOCALID=0 '%s' " MODEL " --data '%s/data.txt' --parallel ddp", trainer, tmpdir);
    double t0 = now_s();
    rc = prog_run(mpirun, args, tmpdir, &out, NULL);
    if (rc == 0 || now_s() - t0 > 25 || !strstr(out, "the launcher says rank 0 of 2 but MPI says rank 1 of 2"))
        fail_msg("mpirun %s: exit %d after %.1f s\n%s", args, rc, now_s() - t0, out);
    free(args), free(out);
    /* --world must be the launcher's */
    args = fmt(MODEL " --data '%s/data.txt' --parallel ddp --world 4", tmpdir);
    rc = run_mpi(2, args, &out);
    if (rc == 0 || !strstr(out, "--world 4, but the launcher (openmpi) started 2 processes"))
        fail_msg("mpirun -n 2 --world 4: exit %d\n%s", rc, out);
    free(args), free(out);
    /* native reductions run and say that the bits may differ */
    args = fmt(MODEL " --data '%s/data.txt' --parallel fsdp --reduce native --json", tmpdir);
    rc = run_mpi(2, args, &out);
    if (rc != 0 || !strstr(out, "bits may differ")) fail_msg("mpirun --reduce native: exit %d\n%s", rc, out);
    free(args), free(out);
}

static int setup(void **state) {
    (void)state;
    char *path = fmt("%s/data.txt", tmpdir);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint32_t x = 12345;
    for (int i = 0; i < 20000; i++) {
        x = x * 1103515245u + 12345u;
        fputc('a' + (int)((x >> 16) % 26), f);
    }
    fclose(f);
    free(path);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--worker") == 0) return worker();
    if (argc == 2 && strcmp(argv[1], "--worker-mismatch") == 0) return mismatch_worker();
    if (argc == 2 && strcmp(argv[1], "--worker-group-timeout") == 0) return group_timeout_worker();
    if (argc == 2 && strcmp(argv[1], "--worker-revoke") == 0) return revoke_worker();
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) return 1;
    snprintf(self_path, sizeof self_path, "%s", self);
    char *dir = dirname(self);
    snprintf(trainer, sizeof trainer, "%s/../train_gpt", dir);
    if (access(trainer, X_OK) != 0) {
        fprintf(stderr, "test_mpi: %s not found: build it first\n", trainer);
        return 1;
    }
    FILE *p = popen("command -v mpirun 2>/dev/null", "r");
    if (!p || !fgets(mpirun, sizeof mpirun, p)) mpirun[0] = 0;
    if (p) pclose(p);
    mpirun[strcspn(mpirun, "\n")] = 0;
    snprintf(plugin, sizeof plugin, "%s/../libfsc_mpi.so", dir);
    if (!mpirun[0]) why_skip = "mpirun not found: Open MPI is not installed (apt-get install openmpi-bin libopenmpi-dev)";
    else if (access(plugin, R_OK) != 0) {
        fprintf(stderr, "test_mpi: mpirun is installed but %s was not built (make mpi)\n", plugin);
        return 1;
    }
    /* Open MPI's own allocations are not freed at exit: leak reports from it are not ours */
    setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    strcpy(tmpdir, "/tmp/fsc_test_mpi_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_from_env_opts),
        cmocka_unit_test(test_launcher_checks),
        cmocka_unit_test(test_communicator_equals_simulated),
        cmocka_unit_test(test_mismatched_calls_fail_cleanly),
        cmocka_unit_test(test_group_timeout_names_world_rank),
        cmocka_unit_test(test_ranks_that_disagree_refuse),
        cmocka_unit_test(test_strategies_equal_simulated),
        cmocka_unit_test(test_exact_any_process_count),
        cmocka_unit_test(test_pipeline_and_tensor_parallel),
        cmocka_unit_test(test_offload_and_experts),
        cmocka_unit_test(test_checkpoint_resharding),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_ckpt_dir_lock),
        cmocka_unit_test(test_revoke_stops_the_peer_at_once),
        cmocka_unit_test(test_killed_rank_ends_the_job),
        cmocka_unit_test(test_stopped_rank_times_out),
        cmocka_unit_test(test_process_that_never_starts_mpi),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "test_mpi: could not remove %s\n", tmpdir);
    return rc;
}
