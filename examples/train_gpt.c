/* fsc-train (built from this file; build/train_gpt is a link to it): train a GPT-2, a Llama or a model family a
 * program registered on a file of tokens (bytes, llm.c shards, uint16), on one rank or on a simulated cluster, with
 * the public fsc API only. One table of options is the parser, the defaults and the --help text.
 *
 * Data order (a contract, the same for every world size, strategy and --data-format): with N tokens in the
 * stream of --data (its files concatenated in order), global batch B and context T, sequence i of step s
 * starts at ((s*B + i) * T) mod (N - T); its inputs are the T tokens from there and its targets the next T.
 * With --world W, rank r takes sequences [r*B/W, (r+1)*B/W); with a pipeline (--pp P) or tensor
 * parallelism (--tp T), world = dp x tp x pp laid out by --order (Megatron's: rank = (stage * dp + d) * tp
 * + tensor index), every rank of data-parallel index d takes the sequences [d*B/dp, (d+1)*B/dp).
 * The training function runs on every rank (SPMD); rank 0 prints one line per step and, with --json, the
 * last line of output is one JSON object with every loss, throughput, memory and communication.
 *
 * This file is main: parse the options, build what the run reads and writes, run the training loop on every
 * rank, report. The parts are in examples/train/ (train.h lists them). The trainer is fsc_train_main; a program
 * of its own (one that registers its model family, examples/train_family.c) compiles this file and the parts with
 * FSC_TRAIN_NO_MAIN and calls it. */
#define _XOPEN_SOURCE 700 /* sigaction, SA_RESTART (train_flight.h): POSIX, not C11 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "train/train.h"
#include "train_flight.h"

/* What main holds: the options, the data, the run's results and, with --check-ddp, its DDP oracle's. */
typedef struct {
    train_config c;        /* the options, resolved */
    train_config asked;    /* the options as given, before anything derives from them: the run's train_config.json */
    int given[NOPT];       /* whether option i was given (the command line, or --config with another value) */
    int me, procs;         /* this process's rank; whether the ranks are processes (a launcher) */
    char data_path[4200];  /* the default corpus, where find_default_data found it */
    const char *fdir;      /* the flight recorder's directory (NULL: none) */
    fsc_data *data, *val;  /* --data, --val-data */
    run_state st;          /* the run */
    train_config cd;       /* --check-ddp: the oracle's options */
    run_state sd;          /* --check-ddp: the oracle's results */
    ddp_check chk;
    char dev[16];
    fsc_cluster_opts co;   /* the ranks: simulated threads, or the launcher's processes */
} trainer;

enum { GO = -1 }; /* the steps of main go on; any other value is the exit status */

/* The oracle's --ep: for DDP every expert on every rank (bit-identical when G is the whole data group); for zero,
 * fsdp and pipelines (ddp inside the stages too), DDP with the same expert groups (the same sums of expert
 * gradients). */
static int oracle_ep(const train_config *c) { return c->parallel == FSC_PAR_DDP && c->pp == 1 ? 1 : c->ep; }

/* The options: defaults, --config, the command line, then everything that needs several of them together
 * (checks.c), before anything is opened. --help and --version print here. */
static int parse(trainer *t, int argc, char **argv) {
    train_config *c = &t->c;
    char err[512];
    int rc = parse_args(argc, argv, c, t->given, err, sizeof err);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc == 2) {
        printf("fsc-train %s\n", fsc_version_string());
        return 0;
    }
    t->asked = *c;          /* the options as given, before anything derives from them: the run's train_config.json */
    t->asked.config = NULL; /* (its content is in) */
    if (rc == 0) rc = check_launcher(c, t->given, &t->me, &t->procs, err, sizeof err);
    if (rc == 0) t->asked.world = c->world; /* a launcher's processes: its world is the run's, as if given */
    if (rc == 0) rc = resolve_layout(c, t->given, err, sizeof err);
    if (rc == 0) rc = resolve_model(c, t->given, err, sizeof err);
    if (rc == 0) rc = load_schedule_file(c, err, sizeof err); /* its chunks per rank are the balance's */
    if (rc == 0) rc = check_config(c, t->given, err, sizeof err);
    if (rc == 0) rc = check_ckpt_dir(c, err, sizeof err);
    if (rc == 0) rc = find_default_data(c, t->given, t->data_path, sizeof t->data_path, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "fsc-train: %s\n", err);
        return 2;
    }
    if (c->print_schedule) { /* under a launcher every process has the text: rank 0 prints it */
        if (print_schedule_text(c, t->me == 0 ? stdout : NULL, err, sizeof err) == 0) return 0;
        fprintf(stderr, "fsc-train: %s\n", err);
        return 2;
    }
    const model_family *f = model_family_of(c);
    if (c->load && ((f->check_load && f->check_load(c->load, err, sizeof err)) || /* as a failed load */
                    check_load_record(c->load, err, sizeof err))) {
        fprintf(stderr, "fsc-train: --load %s\n", err);
        return 1;
    }
    return GO;
}

/* What the run reads and writes, before the ranks start: --resume's recorded options compared, the data, the outputs
 * (--log, --trace, --save checked, none of them a file the run reads; the flight recorder), the result buffers;
 * then the banner. */
static int build(trainer *t) {
    const train_config *c = &t->c;
    char err[512];
    t->st = (run_state){.cfg = c, .asked = &t->asked, .procs = t->procs, .trace_origin = fsc_trace_now_us()};
    if (load_data(c, &t->data, &t->st.ntok, err, sizeof err) != 0) {
        fprintf(stderr, "fsc-train: %s\n", err);
        return 2;
    }
    if (c->resume && t->me == 0) check_resume_config(&t->asked, t->data, c->resume); /* before train_config.json is rewritten */
    t->st.data = t->data;
    if (c->val_data && load_val_data(c, t->data, &t->val, err, sizeof err) != 0) {
        fprintf(stderr, "fsc-train: %s\n", err);
        return 2;
    }
    t->st.val = t->val;
    t->fdir = flight_dir(c->flight, c->ckpt_dir, c->trace);
    const char *fopt = c->flight ? "--flight-recorder" : c->ckpt_dir ? "--ckpt-dir" : "--trace"; /* where fdir is from */
    if (open_outputs(c, t->me, t->data, t->val, &t->st.log, err, sizeof err) != 0 ||
        flight_start(t->fdir, fopt, err, sizeof err) != 0) {
        fprintf(stderr, "fsc-train: %s\n", err);
        return 2;
    }
    t->st.nparams = model_family_of(c)->num_params(c);
    if (results_alloc(&t->st, c->steps, c->world) != 0) {
        fprintf(stderr, "fsc-train: out of memory\n");
        return 1;
    }
    if (t->me != 0) freopen("/dev/null", "w", stdout); /* only rank 0 prints (errors still go to stderr) */
    print_banner(&t->st, t->data);
    if (t->me == 0) note_unused_options(c, t->given);
    t->co = (fsc_cluster_opts){.world = c->world, .device = option_choice("device", c->device, t->dev, sizeof t->dev),
                               /* --reduce exact: one BLAS thread a rank by default, at every --world (a world
                                * of 1 would take the library's count, other bits: docs/determinism.md) */
                               .threads_per_rank = c->threads ? c->threads : c->reduce == 2 ? 1 : 0,
                               .reduce_native = c->reduce == 1,
                               .sim_bandwidth_gbps = c->sim_bandwidth, .sim_latency_us = c->sim_latency,
                               .sim_copy_gbps = c->sim_copy, .sim_clock = c->sim_clock};
    if (c->check_ddp && !(t->st.params = calloc(t->st.nparams, sizeof(float)))) {
        fprintf(stderr, "fsc-train: out of memory\n");
        return 1;
    }
    if (c->pp > 1) {
        char pbuf[32], sbuf[32];
        t->st.pstats = calloc((size_t)c->world, sizeof *t->st.pstats);
        printf("pipeline: %d stages x %d data-parallel ranks, %d micro-batch%s, %s, checkpoint %s\n", c->pp, c->dp,
               c->accum, c->accum == 1 ? "" : "es", c->sched ? "custom (--schedule-file)" : option_choice("schedule", c->schedule, sbuf, sizeof sbuf),
               option_choice("checkpoint", c->pipe_ckpt, pbuf, sizeof pbuf));
    }
    if (c->plan && t->me == 0 && plan_run(&t->st) != 0) return 1; /* the prediction, before the ranks start */
    t->cd = *c;
    t->cd.plan = 0;
    t->cd.trace = NULL; /* the DDP oracle of --check-ddp is neither traced nor logged */
    t->sd = t->st;
    t->sd.log = NULL;
    t->sd.plan = NULL; /* the oracle is not planned */
    return GO;
}

/* --check-ddp's oracle: the options of the same training with DDP, and buffers of its own for its results. The
 * oracle of a pipeline is DDP over its data-parallel ranks with the same micro-batches; with tensor parallelism,
 * on the same tensor groups; of expert parallelism, oracle_ep; of offload, everything on the device (ddp does not
 * offload). 0, or 1 when out of memory. */
static int make_oracle(trainer *t) {
    const train_config *c = &t->c;
    t->cd.parallel = FSC_PAR_DDP, t->cd.pp = 1, t->cd.world = c->dp * c->tp, t->cd.balance = NULL;
    t->cd.virtual_stages = 1;
    t->cd.ep = oracle_ep(c), t->cd.offload = 0;
    t->sd.pstats = NULL, t->sd.cfg = &t->cd; /* (results_free frees sd's buffers: all its own from here) */
    const int bad = results_alloc(&t->sd, c->steps, c->world) != 0;
    if (bad || (t->sd.params = calloc(t->st.nparams, sizeof(float))) == NULL) {
        fprintf(stderr, "fsc-train: out of memory\n");
        return 1;
    }
    return 0;
}

/* --check-ddp: the two runs' losses and final weights compared bit for bit, and the table. */
static void compare_with_oracle(trainer *t) {
    t->chk.done = 1;
    t->chk.ddp = &t->sd;
    t->chk.losses_same = same_losses(&t->st, &t->sd);
    t->chk.params_same = memcmp(t->st.params, t->sd.params, t->st.nparams * sizeof(float)) == 0;
    print_comparison(&t->sd, &t->st, &t->chk);
}

/* Under a launcher the communicator starts inside fsc_cluster_run_from_env_opts, and MPI's start has no deadline: a
 * process of the job that ended before joining it (one alone given --print-schedule, --help or --version) leaves
 * this one in MPI_Init for ever, mpirun waiting with it. The library may not end the process; the program may: if
 * the rank function has not started after the launcher's timeouts (FSC_RENDEZVOUS_TIMEOUT + FSC_COMM_TIMEOUT), this
 * watchdog says why and exits. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
    double timeout_s;
    const flight_job *job;
} start_watch;

static void *start_watchdog(void *arg) {
    start_watch *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)w->timeout_s + 1;
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (!w->started && rc == 0) rc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
    const int started = w->started;
    pthread_mutex_unlock(&w->mu);
    if (!started) {
        fprintf(stderr, "fsc-train: the job's communicator did not start within %.0f s (FSC_RENDEZVOUS_TIMEOUT + "
                        "FSC_COMM_TIMEOUT): a process of the job ended or stopped before joining it (one given other "
                        "options, such as --print-schedule, --help or --version, or one that died while starting); "
                        "ending this process\n", w->timeout_s);
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

/* Nothing to watch any more: the rank function started, or the launch returned before it. */
static void watch_done(start_watch *w) {
    pthread_mutex_lock(&w->mu);
    w->started = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static fsc_status started_fn(fsc_rank *r, void *arg) {
    watch_done(arg);
    return flight_fn(r, (void *)((start_watch *)arg)->job);
}

/* fsc_cluster_run_from_env_opts(co, flight_fn, job) under start_watchdog. */
static fsc_status run_launched(const fsc_cluster_opts *co, const flight_job *job) {
    fsc_launch_env env;
    start_watch w = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .job = job };
    w.timeout_s = fsc_launch_env_parse(NULL, NULL, &env) == FSC_OK ? env.timeout_s + env.comm_timeout_s : 660.0;
    pthread_t th;
    const int watching = pthread_create(&th, NULL, start_watchdog, &w) == 0;
    fsc_status s = fsc_cluster_run_from_env_opts(co, started_fn, &w);
    if (watching) {
        watch_done(&w);
        pthread_join(th, NULL);
    }
    return s;
}

/* The training loop on every rank (loop.c): simulated ranks in this process, or the launcher's processes; then
 * --check-ddp's DDP oracle (inside the same launch under a launcher: MPI starts once per process). 0, or the
 * exit status of a failure (said on stderr). */
static int train(trainer *t) {
    const train_config *c = &t->c;
    fsc_status s;
    if (t->procs) {
        if (c->check_ddp && make_oracle(t) != 0) return 1;
        proc_job job = {.st = &t->st, .ddp = c->check_ddp ? &t->sd : NULL};
        s = run_launched(&t->co, &(flight_job){proc_fn, &job, t->fdir});
        if (s == FSC_OK && t->st.pstats && !c->check_ddp) print_pipeline(&t->st);
        if (s == FSC_OK && c->check_ddp) compare_with_oracle(t);
    } else {
        s = fsc_cluster_run(&t->co, flight_fn, &(flight_job){train_fn, &t->st, t->fdir});
        if (s == FSC_OK && t->st.pstats) print_pipeline(&t->st);
        if (s == FSC_OK && c->check_ddp) {
            t->co.world = c->dp * c->tp;
            /* the oracle must run with the run's BLAS threads (fsc_cluster_run gives 1 a rank when world > 1, the
             * library default on one rank): a pipeline whose oracle is one rank would otherwise differ by threads */
            if (t->co.threads_per_rank == 0 && c->world > 1) t->co.threads_per_rank = 1;
            if (make_oracle(t) != 0) return 1;
            printf("--check-ddp: the same training with DDP\n");
            fflush(stdout);
            s = fsc_cluster_run(&t->co, flight_fn, &(flight_job){train_fn, &t->sd, t->fdir});
            if (s == FSC_OK) compare_with_oracle(t);
        }
    }
    if (s != FSC_OK) {
        fprintf(stderr, "fsc-train: %s: %s\n", fsc_status_str(s), fsc_last_error());
        return 1;
    }
    return 0;
}

/* After the run: --json, the exit status of --check-ddp (3: not bit-identical), every output closed and checked
 * (a report that could not be written is not a success). */
static int report(trainer *t, int rc) {
    const train_config *c = &t->c;
    if (rc == 0 && c->json) print_json(&t->st, &t->chk);
    if (t->chk.done && !(t->chk.losses_same && t->chk.params_same) && t->me == 0) rc = 3;
    if (t->st.log && fclose(t->st.log) != 0 && rc == 0) {
        fprintf(stderr, "fsc-train: --log %s: cannot write: %s\n", c->log, strerror(errno));
        rc = 1;
    }
    t->st.log = NULL;
    const int out_err = fflush(stdout) != 0 ? errno : ferror(stdout) ? EIO : 0;
    if (out_err && (rc == 0 || rc == 3)) { /* the report (--json, the progress) was lost: not a success */
        fprintf(stderr, "fsc-train: cannot write to standard output: %s\n", strerror(out_err));
        rc = 1;
    }
    return rc;
}

/* Everything main made (each step of main stops where it fails; what it did not make is NULL). */
static void trainer_free(trainer *t) {
    flight_stop();
    if (t->sd.cfg == &t->cd) results_free(&t->sd);
    results_free(&t->st);
    free(t->st.plan);
    fsc_data_free(t->data);
    fsc_data_free(t->val);
    if (t->st.log) fclose(t->st.log);
    free(t->c.strs); /* --config's strings (apply_config_text) */
    free_schedule_file(&t->c);
}

int fsc_train_main(int argc, char **argv) {
    trainer t;
    memset(&t, 0, sizeof t);
    flight_usr1_hold(); /* SIGUSR1 is the flight recorder's: it never ends the run (train_flight.h) */
    int rc = parse(&t, argc, argv); /* the options (options.c, config.c) and their checks (checks.c) */
    if (rc == GO) rc = build(&t);   /* the data, the outputs, the results, the banner (data.c, report.c) */
    if (rc == GO) rc = report(&t, train(&t)); /* every rank's loop (loop.c: steps, checkpoints, --save) */
    trainer_free(&t);
    flight_usr1_restore();
    return rc;
}

#ifndef FSC_TRAIN_NO_MAIN /* (a program that registers its own model family has a main of its own) */
int main(int argc, char **argv) {
    flight_usr1_hold(); /* and kept: fsc_train_main gives back what it found, ignored, up to the exit */
    return fsc_train_main(argc, argv);
}
#endif
