/* Tests of lib/core/trace.c and its recorders in comm.c, engine.c and lib/ckpt: the files parse as JSON (cJSON)
 * in Chrome's trace event format, and say what happened.
 * Oracles: spans nest as they were opened (a child's [ts, ts + dur] lies inside its parent's); the bytes of the
 * traced collectives of each operation sum to the communicator's own counters (fsc_engine_comm_stats, counted
 * independently in comm.c's account); an FSDP step shows forward L and backward L for every layer of the model,
 * all-gathers inside forward spans and reduce-scatters inside backward spans, the optimizer inside the step,
 * a checkpoint save and a weights save after it; the layers' spans are named by their tensors' prefixes ("h.0"), the
 * step's span is "step" with the step in its args, and its actions' (F0.0, B0.0) hold their layers' spans, then
 * its tail's (R, O) follow them, the optimizer inside O; an exact step that is recomputed runs its list twice;
 * a full recorder keeps exactly max_events events and says how many it dropped; a streaming recorder's file holds
 * the spans it finished before the process stops (read by tools/trace_merge without the file's end), and each
 * span once after fsc_trace_write finishes it; a rank's trace says where the rank sits (a "process_labels" metadata
 * event, once: the engine's layout, or the place given to the stream, there before the run ends and kept by
 * tools/trace_merge). */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <locale.h>
#include <limits.h>
#include <math.h>
#include <sys/wait.h>
#include "testutil.h"
#include "fsc/trace.h"
#include "core/trace_impl.h"

/* The text of path (the caller frees). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static cJSON *read_json(const char *path) {
    char *buf = slurp(path);
    cJSON *j = cJSON_Parse(buf);
    if (!j) fail_msg("%s is not JSON near: %.60s", path, cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
    free(buf);
    return j;
}

/* The n-th "X" event called name (n from 0), NULL if none. */
static const cJSON *find_event(const cJSON *root, const char *name, int nth) {
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(root, "traceEvents")) {
        const cJSON *nm = cJSON_GetObjectItem(ev, "name"), *ph = cJSON_GetObjectItem(ev, "ph");
        if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0 && cJSON_IsString(ph) &&
            strcmp(ph->valuestring, "X") == 0 && nth-- == 0)
            return ev;
    }
    return NULL;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItem(o, k);
    if (!cJSON_IsNumber(x)) fail_msg("field %s is not a number", k);
    return x->valuedouble;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItem(o, k);
    if (!cJSON_IsString(x)) fail_msg("field %s is not a string", k);
    return x->valuestring;
}

/* The n-th metadata event ("M") called name (n from 0), NULL if none. */
static const cJSON *find_meta(const cJSON *root, const char *name, int nth) {
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(root, "traceEvents")) {
        const cJSON *nm = cJSON_GetObjectItem(ev, "name"), *ph = cJSON_GetObjectItem(ev, "ph");
        if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0 && cJSON_IsString(ph) &&
            strcmp(ph->valuestring, "M") == 0 && nth-- == 0)
            return ev;
    }
    return NULL;
}

/* Whether ev is a "process_labels" event of rank pid saying stage, data rank and tensor rank of pp x dp x tp, in
 * its text and its numbers. */
static void check_place(const cJSON *ev, int pid, int pp, int stage, int dp, int data, int tp, int tensor) {
    if (!ev) fail_msg("rank %d: no process_labels event", pid);
    assert_int_equal((int)num(ev, "pid"), pid);
    const cJSON *a = cJSON_GetObjectItem(ev, "args");
    char want[160];
    snprintf(want, sizeof want, "pipeline stage %d of %d, data rank %d of %d, tensor rank %d of %d", stage, pp, data,
             dp, tensor, tp);
    assert_string_equal(str(a, "labels"), want);
    const char *keys[6] = { "pp", "stage", "dp", "data", "tp", "tensor" };
    const int vals[6] = { pp, stage, dp, data, tp, tensor };
    for (int k = 0; k < 6; k++)
        if ((int)num(a, keys[k]) != vals[k])
            fail_msg("rank %d: %s is %g, not %d", pid, keys[k], num(a, keys[k]), vals[k]);
}

/* Whether a's span lies inside b's (timestamps are written to 1 ns: allow that rounding). */
static int inside(const cJSON *a, const cJSON *b) {
    return num(a, "ts") >= num(b, "ts") - 1e-3 && num(a, "ts") + num(a, "dur") <= num(b, "ts") + num(b, "dur") + 2e-3;
}

static void tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "/tmp/fsc_test_trace_%d_%s", (int)getpid(), name);
}

static void test_nesting_and_args(void **state) {
    (void)state;
    fsc_trace *t = NULL;
    assert_ok(fsc_trace_create(&(fsc_trace_opts){ .rank = 3 }, &t));
    fsc_trace_begin(t, "step", "outer %d", 1);
    double t0 = fsc_trace_now_us();
    fsc_trace_begin(t, "layer", "inner");
    fsc_trace_span(t, "comm", "all_gather", t0, 1234, "data \"q\"");
    fsc_trace_end(t);
    fsc_trace_end(t);
    fsc_trace_end(t); /* one end too many: ignored */
    assert_int_equal(fsc_trace_count(t), 3);
    assert_int_equal(fsc_trace_dropped(t), 0);
    char p[256];
    tmp_path(p, sizeof p, "nest.json");
    assert_ok(fsc_trace_write(t, p));
    fsc_trace_free(t);
    cJSON *j = read_json(p);
    const cJSON *outer = find_event(j, "outer 1", 0), *inner = find_event(j, "inner", 0),
                *ag = find_event(j, "all_gather", 0);
    assert_non_null(outer);
    assert_non_null(inner);
    assert_non_null(ag);
    assert_string_equal(str(outer, "cat"), "step");
    assert_int_equal((int)num(outer, "pid"), 3);
    assert_true(inside(inner, outer));
    assert_true(inside(ag, outer));
    assert_true(num(ag, "ts") <= num(inner, "ts") + 1e-3); /* started before inner, ended inside it */
    const cJSON *args = cJSON_GetObjectItem(ag, "args");
    assert_non_null(args);
    assert_int_equal((int)num(args, "bytes"), 1234);
    assert_string_equal(str(args, "group"), "data \"q\""); /* escaped in the file, read back whole */
    assert_int_equal((int)num(cJSON_GetObjectItem(j, "otherData"), "dropped"), 0);
    cJSON_Delete(j);
    unlink(p);
}

/* The keys "bytes" and "group" are the communicator's (trace.h): fsc_trace_arg with either was kept, so a span's
 * args read {"bytes":5} like a collective's traffic (and "group" a number where readers take a group's name), and
 * it replaced the span's own argument. Oracle: the span keeps its "step" argument and holds neither key; the
 * collective's span holds its own. */
static void test_reserved_arg_keys(void **state) {
    (void)state;
    fsc_trace *t = NULL;
    assert_ok(fsc_trace_create(&(fsc_trace_opts){ 0 }, &t));
    fsc_trace_begin(t, "step", "s");
    fsc_trace_arg(t, "step", 3);
    fsc_trace_arg(t, "bytes", 5);
    fsc_trace_arg(t, "group", 7);
    fsc_trace_span(t, "comm", "all_reduce", fsc_trace_now_us(), 64, "dp");
    fsc_trace_end(t);
    char p[256];
    tmp_path(p, sizeof p, "reserved.json");
    assert_ok(fsc_trace_write(t, p));
    fsc_trace_free(t);
    cJSON *j = read_json(p);
    const cJSON *args = cJSON_GetObjectItem(find_event(j, "s", 0), "args");
    assert_non_null(args);
    assert_int_equal((int)num(args, "step"), 3);
    assert_null(cJSON_GetObjectItem(args, "bytes"));
    assert_null(cJSON_GetObjectItem(args, "group"));
    const cJSON *cargs = cJSON_GetObjectItem(find_event(j, "all_reduce", 0), "args");
    assert_int_equal((int)num(cargs, "bytes"), 64);
    assert_string_equal(str(cargs, "group"), "dp");
    cJSON_Delete(j);
    unlink(p);
}

/* max_events 4: the first four events are kept, the rest counted; the file says so. */
static void test_bounded(void **state) {
    (void)state;
    fsc_trace *t = NULL;
    assert_ok(fsc_trace_create(&(fsc_trace_opts){ .max_events = 4 }, &t));
    for (int i = 0; i < 10; i++) {
        fsc_trace_begin(t, "x", "e%d", i);
        fsc_trace_end(t);
    }
    assert_int_equal(fsc_trace_count(t), 4);
    assert_int_equal(fsc_trace_dropped(t), 6);
    assert_int_equal(fsc_trace_capacity(t), 4);
    char p[256];
    tmp_path(p, sizeof p, "full.json");
    assert_ok(fsc_trace_write(t, p));
    fsc_trace_free(t);
    cJSON *j = read_json(p);
    assert_non_null(find_event(j, "e3", 0));
    assert_null(find_event(j, "e4", 0));
    const cJSON *od = cJSON_GetObjectItem(j, "otherData");
    assert_int_equal((int)num(od, "dropped"), 6);
    assert_int_equal((int)num(od, "max_events"), 4);
    int full = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(j, "traceEvents"))
        if (strcmp(str(ev, "name"), "trace full") == 0) full++;
    assert_int_equal(full, 1);
    cJSON_Delete(j);
    unlink(p);
    /* NULL recorders do nothing; bad arguments are refused with a message */
    fsc_trace_begin(NULL, "x", "y");
    fsc_trace_end(NULL);
    fsc_trace_span(NULL, "x", "y", 0, 0, NULL);
    assert_int_equal(fsc_trace_count(NULL), 0);
    assert_err(fsc_trace_write(NULL, p), FSC_ERR_INVALID, "no recorder");
    assert_err(fsc_trace_create(&(fsc_trace_opts){ .rank = -1 }, &t), FSC_ERR_INVALID, "rank");
    assert_ok(fsc_trace_create(NULL, &t));
    assert_err(fsc_trace_write(t, "/nonexistent_dir_fsc/x.json"), FSC_ERR_IO, "cannot create");
    fsc_trace_free(t);
}

/* tools/trace_merge over dir into dir/all.json, parsed. */
static cJSON *merge(const char *dir) {
    const char *src = __FILE__, *slash = strrchr(src, '/');
    char cmd[1024], out[300];
    snprintf(cmd, sizeof cmd, "'%.*s../tools/trace_merge' '%s' > '%s/all.json'", slash ? (int)(slash - src + 1) : 0,
             src, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(out, sizeof out, "%s/all.json", dir);
    return read_json(out);
}

/* A recorder streaming to dir/rank-0.json: before anything finishes the file (a killed run), it holds the spans
 * finished when no span was open, which tools/trace_merge reads, also after a cut-short last line; finished in
 * place, it is JSON with every span once (the open one up to now). */
static void test_stream(void **state) {
    (void)state;
    char dir[256], p[300];
    tmp_path(dir, sizeof dir, "stream");
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(p, sizeof p, "%s/rank-0.json", dir);
    fsc_trace *t = NULL;
    assert_err(fsc_trace_create(&(fsc_trace_opts){ .path = "/nonexistent_dir_fsc/x.json" }, &t), FSC_ERR_IO,
               "/nonexistent_dir_fsc/x.json");
    assert_ok(fsc_trace_create(&(fsc_trace_opts){ .path = p }, &t));
    fsc_trace_begin(t, "step", "step");
    fsc_trace_arg(t, "step", 7);
    fsc_trace_begin(t, "layer", "inner");
    fsc_trace_end(t);
    fsc_trace_end(t);
    fsc_trace_begin(t, "step", "open");
    fsc_trace_set_place(t, &(fsc_trace_place){ .pp = 1, .dp = 1, .tp = 1, .tensor = 1 }); /* tensor 1 of 1: ignored */
    fsc_trace_set_place(t, &(fsc_trace_place){ .pp = 2, .stage = 1, .dp = 3, .data = 2, .tp = 1 });
    cJSON *m = merge(dir);
    check_place(find_meta(m, "process_labels", 0), 0, 2, 1, 3, 2, 1, 0); /* streamed when set, flushed with it */
    assert_null(find_meta(m, "process_labels", 1)); /* the run "killed" here: no fsc_trace_write, no fsc_trace_free */
    const cJSON *step = find_event(m, "step", 0);
    assert_non_null(step);
    assert_int_equal((int)num(cJSON_GetObjectItem(step, "args"), "step"), 7);
    assert_non_null(find_event(m, "inner", 0));
    assert_null(find_event(m, "open", 0));
    cJSON_Delete(m);
    char cut[300]; /* the same file with a last line cut short by the kill, alone in a directory of its own */
    snprintf(cut, sizeof cut, "%s/cut", dir);
    assert_int_equal(mkdir(cut, 0777), 0);
    char q[320], cmd[1100];
    snprintf(q, sizeof q, "%s/rank-0.json", cut);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && printf ',\\n{\"name\":\"cut' >> '%s'", p, q, q);
    assert_int_equal(system(cmd), 0);
    m = merge(cut);
    assert_non_null(find_event(m, "inner", 0));
    assert_null(find_event(m, "cut", 0));
    cJSON_Delete(m);
    assert_ok(fsc_trace_write(t, p)); /* finished in place */
    fsc_trace_begin(t, "late", "late"); /* after the stream's end: kept in memory only */
    fsc_trace_end(t);
    fsc_trace_free(t);
    cJSON *j = read_json(p);
    const char *once[3] = { "step", "inner", "open" };
    for (int k = 0; k < 3; k++) {
        assert_non_null(find_event(j, once[k], 0));
        assert_null(find_event(j, once[k], 1));
    }
    assert_null(find_event(j, "late", 0));
    assert_int_equal((int)num(cJSON_GetObjectItem(j, "otherData"), "events"), 3);
    check_place(find_meta(j, "process_labels", 0), 0, 2, 1, 3, 2, 1, 0);
    assert_null(find_meta(j, "process_labels", 1));
    cJSON_Delete(j);
    test_rmtree(dir);
}

/* Two FSDP ranks train a GPT one step and save a checkpoint, each recording its own trace. */
typedef struct {
    char dir[256];
    fsc_comm_stats stats[2];
} run_arg;

static fsc_status rank_fn(fsc_rank *r, void *arg) {
    run_arg *ra = arg;
    fsc_trace *t = NULL;
    FSC_TRY(fsc_trace_create(&(fsc_trace_opts){ .rank = r->rank }, &t));
    fsc_comm_set_trace(r->comm, t); /* before the engine: its groups are split from the world */
    fsc_gpt_config g = { .layers = 2, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 };
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.kind = FSC_PAR_FSDP;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &g, &po, &oc, 1, &e);
    if (s == FSC_OK) {
        fsc_engine_set_trace(e, t);
        fsc_engine_reset_comm_stats(e);
        int32_t tok[2 * 8], tgt[2 * 8];
        for (int i = 0; i < 16; i++) tok[i] = (i * 7 + r->rank) % 32, tgt[i] = (i * 5 + 1) % 32;
        s = fsc_engine_step(e, tok, tgt, 2, 4, NULL);
        if (s == FSC_OK) fsc_engine_comm_stats(e, &ra->stats[r->rank]);
    }
    if (s == FSC_OK) s = fsc_ckpt_save(e, ra->dir, 1, NULL);
    char p[300];
    snprintf(p, sizeof p, "%s/weights.safetensors", ra->dir);
    if (s == FSC_OK) s = fsc_engine_save_weights(e, p);
    snprintf(p, sizeof p, "%s/rank%d.json", ra->dir, r->rank);
    if (s == FSC_OK) s = fsc_trace_write(t, p);
    fsc_engine_free(e);
    fsc_comm_set_trace(r->comm, NULL);
    fsc_trace_free(t);
    return s;
}

static void test_engine_trace(void **state) {
    (void)state;
    run_arg ra;
    memset(&ra, 0, sizeof ra);
    tmp_path(ra.dir, sizeof ra.dir, "run");
    assert_int_equal(mkdir(ra.dir, 0777), 0);
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 2;
    assert_ok(fsc_cluster_run(&co, rank_fn, &ra));
    for (int rank = 0; rank < 2; rank++) {
        char p[300];
        snprintf(p, sizeof p, "%s/rank%d.json", ra.dir, rank);
        cJSON *j = read_json(p);
        const cJSON *step = find_event(j, "step", 0), *opt = find_event(j, "optimizer", 0);
        assert_non_null(step);
        assert_int_equal((int)num(cJSON_GetObjectItem(step, "args"), "step"), 1);
        assert_null(find_event(j, "step", 1)); /* one step, one span */
        assert_non_null(opt);
        assert_true(inside(opt, step));
        assert_int_equal((int)num(step, "pid"), rank);
        /* where the rank sits (fsc_engine_set_trace): FSDP over 2 ranks, no pipeline, no tensor parallelism */
        check_place(find_meta(j, "process_labels", 0), rank, 1, 0, 2, rank, 1, 0);
        assert_null(find_meta(j, "process_labels", 1));
        /* every layer of the model (embedding, 2 blocks, head) forward and backward, inside the step */
        const cJSON *fwd[4], *bwd[4];
        const char *label[4] = { "wte+wpe", "h.0", "h.1", "ln_f" };
        for (int l = 0; l < 4; l++) {
            char nm[32];
            snprintf(nm, sizeof nm, "forward %s", label[l]);
            fwd[l] = find_event(j, nm, 0);
            snprintf(nm, sizeof nm, "backward %s", label[l]);
            bwd[l] = find_event(j, nm, 0);
            if (!fwd[l] || !bwd[l]) fail_msg("rank %d: layer %d lacks its forward or backward span", rank, l);
            assert_string_equal(str(fwd[l], "cat"), "layer");
            assert_int_equal((int)num(cJSON_GetObjectItem(fwd[l], "args"), "layer"), l);
            assert_int_equal((int)num(cJSON_GetObjectItem(bwd[l], "args"), "layer"), l);
            assert_true(inside(fwd[l], step));
            assert_true(inside(bwd[l], step));
        }
        /* the step's actions (step.c's runner; without a pipeline the accumulation list, here F0 B0): each layer's
         * forward inside F0.0, its backward inside B0.0, F before B, both inside the step, with their wait */
        const cJSON *f0 = find_event(j, "F0.0", 0), *b0 = find_event(j, "B0.0", 0);
        assert_non_null(f0);
        assert_non_null(b0);
        assert_null(find_event(j, "F1.0", 0)); /* accum 1: one micro-batch */
        assert_string_equal(str(f0, "cat"), "pipe");
        assert_true(inside(f0, step) && inside(b0, step));
        assert_true(num(b0, "ts") >= num(f0, "ts") + num(f0, "dur") - 1e-3);
        assert_true(num(cJSON_GetObjectItem(b0, "args"), "wait_us") >= 0);
        for (int l = 0; l < 4; l++) assert_true(inside(fwd[l], f0) && inside(bwd[l], b0));
        /* the list's tail, R O: after B0.0, one each, inside the step, the optimizer inside O */
        const cJSON *rr = find_event(j, "R", 0), *oo = find_event(j, "O", 0);
        assert_non_null(rr);
        assert_non_null(oo);
        assert_null(find_event(j, "R", 1));
        assert_null(find_event(j, "O", 1));
        assert_null(find_event(j, "E", 0)); /* the exact reduction's only */
        assert_string_equal(str(rr, "cat"), "tail");
        assert_string_equal(str(oo, "cat"), "tail");
        assert_true(inside(rr, step) && inside(oo, step) && inside(opt, oo));
        assert_true(num(rr, "ts") >= num(b0, "ts") + num(b0, "dur") - 1e-3);
        assert_true(num(oo, "ts") >= num(rr, "ts") + num(rr, "dur") - 1e-3);
        /* the traced bytes per operation sum to the communicator's counters; gathers and reduce-scatters of
         * FSDP sit inside the layer spans of their direction */
        double bytes[FSC_OP_COUNT] = { 0 };
        int calls[FSC_OP_COUNT] = { 0 }, gathers_in_fwd = 0, scatters_in_bwd = 0;
        const cJSON *ev;
        cJSON_ArrayForEach(ev, cJSON_GetObjectItem(j, "traceEvents")) {
            const cJSON *cat = cJSON_GetObjectItem(ev, "cat");
            if (!cJSON_IsString(cat) || (strcmp(cat->valuestring, "comm") && strcmp(cat->valuestring, "wait")))
                continue;
            if (!inside(ev, step)) continue; /* creation's and the checkpoint's collectives */
            int op = -1;
            for (int o = 0; o < FSC_OP_COUNT; o++)
                if (strcmp(str(ev, "name"), fsc_comm_op_name((fsc_comm_op)o)) == 0) op = o;
            assert_true(op >= 0);
            const cJSON *args = cJSON_GetObjectItem(ev, "args");
            assert_non_null(args);
            assert_true(strlen(str(args, "group")) > 0);
            bytes[op] += num(args, "bytes");
            calls[op]++;
            for (int l = 0; l < 4; l++) {
                if (op == FSC_OP_ALL_GATHER && inside(ev, fwd[l])) gathers_in_fwd++;
                if (op == FSC_OP_REDUCE_SCATTER && inside(ev, bwd[l])) scatters_in_bwd++;
            }
        }
        for (int o = 0; o < FSC_OP_COUNT; o++) {
            if (calls[o] != (int)ra.stats[rank].calls[o] || fabs(bytes[o] - ra.stats[rank].bytes[o]) > 0.5)
                fail_msg("rank %d %s: traced %d calls, %.0f bytes; counted %d calls, %.0f bytes", rank,
                         fsc_comm_op_name((fsc_comm_op)o), calls[o], bytes[o], (int)ra.stats[rank].calls[o],
                         ra.stats[rank].bytes[o]);
        }
        assert_true(bytes[FSC_OP_ALL_GATHER] > 0);
        assert_true(gathers_in_fwd > 0);
        assert_true(scatters_in_bwd > 0);
        const cJSON *ck = find_event(j, "checkpoint save", 0);
        assert_non_null(ck);
        assert_string_equal(str(ck, "cat"), "ckpt");
        assert_true(num(ck, "ts") >= num(step, "ts") + num(step, "dur") - 1e-3);
        const cJSON *ws = find_event(j, "weights save", 0);
        assert_non_null(ws);
        assert_string_equal(str(ws, "cat"), "ckpt");
        assert_true(num(ws, "ts") >= num(ck, "ts") + num(ck, "dur") - 1e-3);
        cJSON_Delete(j);
    }
    test_rmtree(ra.dir);
}

/* One rank, the exact reduction, two micro-batches: the first step starts on an exponent that is not the agreed one
 * (the first step's), so it runs its list twice (exact_attempts 2); its actions, in the order they ran, are the
 * list, its tail R E, the list again, R E O. */
typedef struct {
    char path[300];
    int attempts;
} exact_arg;

static fsc_status exact_fn(fsc_rank *r, void *arg) {
    exact_arg *xa = arg;
    fsc_trace *t = NULL;
    FSC_TRY(fsc_trace_create(&(fsc_trace_opts){ .rank = r->rank }, &t));
    fsc_gpt_config g = { .layers = 2, .dim = 16, .heads = 2, .seq = 8, .vocab = 32 };
    fsc_parallel_opts po = fsc_parallel_opts_default();
    po.reduce_exact = 1;
    po.accum = 2;
    fsc_optim_config oc = fsc_optim_config_default();
    fsc_engine *e = NULL;
    fsc_status s = fsc_engine_create(r, &g, &po, &oc, 1, &e);
    fsc_step_info info = { 0 };
    if (s == FSC_OK) {
        fsc_engine_set_trace(e, t);
        int32_t tok[2 * 8], tgt[2 * 8];
        for (int i = 0; i < 16; i++) tok[i] = (i * 7) % 32, tgt[i] = (i * 5 + 1) % 32;
        s = fsc_engine_step(e, tok, tgt, 2, 2, &info);
    }
    xa->attempts = info.exact_attempts;
    if (s == FSC_OK) s = fsc_trace_write(t, xa->path);
    fsc_engine_free(e);
    fsc_trace_free(t);
    return s;
}

static void test_exact_list(void **state) {
    (void)state;
    exact_arg xa = { .attempts = 0 };
    tmp_path(xa.path, sizeof xa.path, "exact.json");
    fsc_cluster_opts co = fsc_cluster_opts_default();
    co.world = 1;
    assert_ok(fsc_cluster_run(&co, exact_fn, &xa));
    assert_int_equal(xa.attempts, 2);
    cJSON *j = read_json(xa.path);
    char ran[256] = "";
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(j, "traceEvents")) { /* a span is written when it ends */
        const cJSON *cat = cJSON_GetObjectItem(ev, "cat");
        if (!cJSON_IsString(cat) || (strcmp(cat->valuestring, "pipe") && strcmp(cat->valuestring, "tail"))) continue;
        const size_t n = strlen(ran);
        snprintf(ran + n, sizeof ran - n, "%s%s", n ? " " : "", str(ev, "name"));
    }
    assert_string_equal(ran, "F0.0 B0.0 F1.0 B1.0 R E F0.0 B0.0 F1.0 B1.0 R E O");
    cJSON_Delete(j);
    remove(xa.path);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) fail_msg("cannot create %s", path);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* tools/trace_merge reads traces as JSON, not line by line: a file whose traceEvents is not its first key (read
 * whole), an event name holding escaped quotes and "]," and nested args, a streamed file cut short whose events
 * span several lines (pretty-printed) with a "}" inside a string, and a bare array of events (Chrome's other form)
 * merge into every event once with its name and args as written; a file that is no trace and one with garbage
 * between its events are refused, and a refused merge writes nothing (it wrote the good files' events, an unclosed
 * trace, before the bad one). */
static void test_merge_forms(void **state) {
    (void)state;
    char dir[256], p[400];
    tmp_path(dir, sizeof dir, "forms");
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(p, sizeof p, "%s/rank-0.json", dir);
    write_file(p, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[{\"name\":\"a \\\"q\\\" ],\",\"ph\":\"X\","
                  "\"pid\":0,\"ts\":1e3,\"dur\":5,\"args\":{\"step\":{\"n\":1}}}]}\n");
    snprintf(p, sizeof p, "%s/rank-1.json", dir);
    write_file(p, "{ \"traceEvents\" : [\n  {\n    \"name\": \"b\",\n"
                  "    \"ph\": \"X\", \"pid\": 1, \"ts\": 2, \"dur\": 1\n  },\n"
                  "  {\"name\":\"c\",\"ph\":\"X\",\"pid\":1,\"ts\":3,\"dur\":1,\"args\":{\"k\":[1,2,{\"x\":\"}\"}]}},\n"
                  "  {\"name\":\"cut");
    snprintf(p, sizeof p, "%s/rank-2.json", dir);
    write_file(p, "[{\"name\":\"d\",\"ph\":\"X\",\"pid\":2,\"ts\":4,\"dur\":1}]");
    cJSON *m = merge(dir);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "traceEvents")), 4);
    const cJSON *a = find_event(m, "a \"q\" ],", 0), *c = find_event(m, "c", 0);
    assert_non_null(a);
    assert_int_equal((int)num(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "args"), "step"), "n"), 1);
    assert_int_equal((int)num(a, "ts"), 1000);
    assert_non_null(find_event(m, "b", 0));
    assert_non_null(c);
    const cJSON *k = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "args"), "k");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(k, 2), "x")->valuestring, "}");
    assert_int_equal((int)num(find_event(m, "d", 0), "pid"), 2);
    assert_null(find_event(m, "cut", 0));
    cJSON_Delete(m);
    const char *bad[2] = { "{\"foo\":1}\n",
                           "{\"traceEvents\":[{\"name\":\"x\"},\ngarbage\n{\"name\":\"y\"}]}\n" };
    for (int i = 0; i < 2; i++) {
        char sub[300], cmd[1024];
        snprintf(sub, sizeof sub, "%s/bad%d", dir, i);
        assert_int_equal(mkdir(sub, 0777), 0);
        snprintf(p, sizeof p, "%s/rank-0.json", sub);
        write_file(p, "{\"traceEvents\":[{\"name\":\"good\",\"ph\":\"X\",\"pid\":0,\"ts\":1,\"dur\":1}]}");
        snprintf(p, sizeof p, "%s/rank-1.json", sub);
        write_file(p, bad[i]);
        const char *src = __FILE__, *slash = strrchr(src, '/');
        snprintf(cmd, sizeof cmd, "'%.*s../tools/trace_merge' '%s' > '%s/out.json' 2>/dev/null",
                 slash ? (int)(slash - src + 1) : 0, src, sub, sub);
        int st = system(cmd);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
        snprintf(p, sizeof p, "%s/out.json", sub);
        struct stat sb;
        assert_int_equal(stat(p, &sb), 0);
        assert_int_equal(sb.st_size, 0);
    }
}

/* tools/trace_merge over dir into dir/out.json, its notes into dir/err.txt: the exit status. */
static int merge_status(const char *dir) {
    const char *src = __FILE__, *slash = strrchr(src, '/');
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%.*s../tools/trace_merge' '%s' > '%s/out.json' 2> '%s/err.txt'",
             slash ? (int)(slash - src + 1) : 0, src, dir, dir, dir);
    const int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A rank that stopped before its recorder wrote a byte leaves an empty rank-N.json: the merge refused the whole
 * run ("not a trace"). Oracle: the other ranks' events are merged, and stderr names the empty file; an empty file
 * of white space alike; a directory whose files are all empty is refused (exit 1, nothing written). */
static void test_merge_empty_rank(void **state) {
    (void)state;
    char dir[256], p[400];
    tmp_path(dir, sizeof dir, "empty");
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(p, sizeof p, "%s/rank-0.json", dir);
    write_file(p, "{\"traceEvents\":[{\"name\":\"a\",\"ph\":\"X\",\"pid\":0,\"ts\":1,\"dur\":1}]}\n");
    snprintf(p, sizeof p, "%s/rank-1.json", dir);
    write_file(p, "");
    snprintf(p, sizeof p, "%s/rank-2.json", dir);
    write_file(p, "[{\"name\":\"c\",\"ph\":\"X\",\"pid\":2,\"ts\":3,\"dur\":1}]");
    snprintf(p, sizeof p, "%s/rank-3.json", dir);
    write_file(p, " \n");
    assert_int_equal(merge_status(dir), 0);
    snprintf(p, sizeof p, "%s/out.json", dir);
    cJSON *m = read_json(p);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "traceEvents")), 2);
    assert_non_null(find_event(m, "a", 0));
    assert_non_null(find_event(m, "c", 0));
    cJSON_Delete(m);
    snprintf(p, sizeof p, "%s/err.txt", dir);
    char *err = slurp(p);
    if (!strstr(err, "rank-1.json is empty") || !strstr(err, "rank-3.json is empty"))
        fail_msg("the note does not name the empty files: %s", err);
    free(err);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/none", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    snprintf(p, sizeof p, "%s/rank-0.json", sub);
    write_file(p, "");
    assert_int_equal(merge_status(sub), 1);
    snprintf(p, sizeof p, "%s/out.json", sub);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_size, 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A host program in a locale whose decimal point is a comma (de_DE, made here with localedef when its source is
 * installed; skipped otherwise): the trace's numbers stay JSON's ("ts":12.345, not 12,345), and the launcher's
 * FSC_COMM_TIMEOUT "2.5" still reads as 2.5 seconds. */
static const char *comma_env(void *ctx, const char *name) {
    (void)ctx;
    return !strcmp(name, "FSC_COMM_TIMEOUT") ? "2.5" : NULL;
}
static void test_decimal_comma_locale(void **state) {
    (void)state;
    char dir[] = "/tmp/fsc_locale_XXXXXX", path[300];
    assert_non_null(mkdtemp(dir));
    const locale_t de = test_comma_locale();
    if (!de) {
        rmdir(dir);
        skip(); /* no de_DE locale source here (the locales package): nothing to test with */
    }
    const locale_t before = uselocale(de);
    char probe[16];
    snprintf(probe, sizeof probe, "%.1f", 1.5);
    assert_string_equal(probe, "1,5"); /* the locale is in force: the library must not write this */
    snprintf(path, sizeof path, "%s.json", dir);
    fsc_trace *t = NULL;
    assert_ok(fsc_trace_create(&(fsc_trace_opts){ .rank = 0 }, &t));
    fsc_trace_begin(t, "test", "span");
    fsc_trace_arg(t, "x", 0.25);
    fsc_trace_end(t);
    assert_ok(fsc_trace_write(t, path));
    fsc_trace_free(t);
    fsc_launch_env env;
    fsc_status ls = fsc_launch_env_parse(comma_env, NULL, &env);
    uselocale(before);
    freelocale(de);
    rmdir(dir);
    assert_ok(ls);
    assert_true(env.comm_timeout_s == 2.5);
    char *text = slurp(path);
    assert_non_null(strstr(text, "\"x\":0.25"));
    for (const char *p = strstr(text, "\"ts\":"); p; p = strstr(p + 1, "\"ts\":")) {
        p += 5;
        while (*p >= '0' && *p <= '9') p++;
        if (*p != '.' && *p != ',') fail_msg("a ts without its decimals: %.20s", p);
        if (*p == ',' && p[1] >= '0' && p[1] <= '9') fail_msg("a decimal comma in the trace: %.30s", p - 8);
    }
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    cJSON_Delete(j);
    free(text);
    unlink(path);
}

/* Values JSON cannot hold: an argument that is NaN or inf (the file had "x":nan, which no reader takes, and
 * tools/trace_merge refused the file), bytes that are inf, a span's start that is NaN ("ts":nan), a name in Latin-1
 * and one whose last character the name's 47-byte limit cuts (invalid UTF-8, which strict readers refuse). Oracle:
 * the streamed file parses with cJSON and is valid UTF-8 (checked here byte by byte), the non-finite numbers read
 * as null, the valid characters of the names are kept. */
static void test_not_json_values(void **state) {
    (void)state;
    char p[256];
    tmp_path(p, sizeof p, "nan.json");
    fsc_trace *t = NULL;
    assert_ok(fsc_trace_create(&(fsc_trace_opts){ .rank = 0, .path = p }, &t));
    fsc_trace_begin(t, "test", "%s", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrst\xc3\xa9"); /* é at bytes 47-48 */
    fsc_trace_arg(t, "x", NAN);
    fsc_trace_end(t);
    fsc_trace_begin(t, "test", "caf\xe9 \xc3\xa9");
    fsc_trace_arg(t, "y", -INFINITY);
    fsc_trace_end(t);
    fsc_trace_span(t, "comm", "all_reduce", fsc_trace_now_us(), INFINITY, "g");
    fsc_trace_span(t, "comm", "broadcast", NAN, 8, "g");
    assert_ok(fsc_trace_write(t, p));
    fsc_trace_free(t);
    char *text = slurp(p);
    if (!test_valid_utf8((const unsigned char *)text)) fail_msg("the trace is not UTF-8:\n%s", text);
    cJSON *j = cJSON_Parse(text);
    if (!j) fail_msg("the trace is not JSON:\n%s", text);
    const cJSON *cut = find_event(j, "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrst\xef\xbf\xbd", 0);
    if (!cut) fail_msg("no span of the cut name:\n%s", text);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(cut, "args"), "x")));
    const cJSON *latin = find_event(j, "caf\xef\xbf\xbd \xc3\xa9", 0);
    if (!latin) fail_msg("no span of the Latin-1 name:\n%s", text);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(latin, "args"), "y")));
    const cJSON *ar = find_event(j, "all_reduce", 0), *bc = find_event(j, "broadcast", 0);
    assert_non_null(ar);
    assert_non_null(bc);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(ar, "args"), "bytes")));
    assert_true(isfinite(num(bc, "ts")) && num(bc, "dur") == 0);
    cJSON_Delete(j);
    free(text);
    unlink(p);
}

int main(int argc, char **argv) {
    (void)argc;
    /* tools/trace_merge reads JSON with this build's fsc-jsonl (tools/jsonl.sh), beside tests/ */
    char self[PATH_MAX], jsonl[PATH_MAX + 32];
    if (realpath(argv[0], self)) {
        snprintf(jsonl, sizeof jsonl, "%s/../fsc-jsonl", dirname(self));
        setenv("FSC_JSONL", jsonl, 0);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nesting_and_args),
        cmocka_unit_test(test_reserved_arg_keys),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_decimal_comma_locale),
        cmocka_unit_test(test_merge_forms),
        cmocka_unit_test(test_merge_empty_rank),
        cmocka_unit_test(test_engine_trace),
        cmocka_unit_test(test_exact_list),
        cmocka_unit_test(test_not_json_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
