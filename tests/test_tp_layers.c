/* The tensor-parallel building blocks (lib/tp/tp_layers.c, tp_vocab.c) on the simulated cluster.
 * Oracle: the unsharded module of nn.h on the same data and the full weights, run on each rank's device.
 * - Bit for bit: f and g (copies, and sums in rank order against a host sum in the same order), the
 *   sequence-parallel gather and reduce-scatter, the column-parallel gather (its own block equals the local
 *   output), every bias gradient (column slices, and the full sum for the row-parallel bias), the
 *   vocab-parallel embedding forward and backward (one rank contributes each row), and everything on a
 *   group of 1.
 * - Within TOL (relative to the largest reference value): every product. A row-parallel output sums its
 *   inner dimension in T pieces added in rank order; OpenBLAS rounds an element of a product differently
 *   depending on where it falls in the matrix, so column and row slices of a product are not bit-equal to
 *   the same elements of the full product either. The cross entropy combines per-slice log-sum-exps. */
#include "test_tp_util.h"

#define TOL 2e-6 /* measured errors are below 5e-7 */

static const int groups[] = { 1, 2, 4 };

/* ---- f, g and the sequence-parallel collectives ---- */
static fsc_status conj_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_device *dev = r->dev;
    int T = r->world;
    const size_t n = 30;
    float *x = tt_normal(n, "x", 1), *mine = malloc(n * sizeof(float)), *got = malloc(T * n * sizeof(float));
    float *want = calloc(T * n, sizeof(float)), *dx, *dy, *dall;
    char name[16];
    snprintf(name, sizeof name, "r%d", r->rank);
    fsc_rng_fill_normal(mine, n, 99, name, 0, 0.0f, 1.0f);
    FSC_TRY(tt_up(dev, &dx, x, n));
    FSC_TRY(tt_up(dev, &dy, mine, n));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, T * n * sizeof(float), (void **)&dall));
    /* f forward and g backward: copies */
    FSC_TRY(fsc_tp_f_forward(dev, r->comm, dall, dx, n));
    FSC_TRY(tt_down(dev, got, dall, n));
    TT_BITS(got, x, n, "f forward");
    FSC_TRY(fsc_tp_g_backward(dev, r->comm, dall, dx, n));
    FSC_TRY(tt_down(dev, got, dall, n));
    TT_BITS(got, x, n, "g backward");
    /* the sum of every rank's vector in rank order, as the host computes it */
    for (int q = 0; q < T; q++) {
        float *v = malloc(n * sizeof(float));
        snprintf(name, sizeof name, "r%d", q);
        fsc_rng_fill_normal(v, n, 99, name, 0, 0.0f, 1.0f);
        for (size_t i = 0; i < n; i++) want[i] = q == 0 ? v[i] : want[i] + v[i];
        free(v);
    }
    FSC_TRY(fsc_tp_f_backward(dev, r->comm, dall, dy, n));
    FSC_TRY(tt_down(dev, got, dall, n));
    TT_BITS(got, want, n, "f backward (all-reduce)");
    FSC_TRY(fsc_tp_g_forward(dev, r->comm, dy, dy, n)); /* in place */
    FSC_TRY(tt_down(dev, got, dy, n));
    TT_BITS(got, want, n, "g forward (all-reduce, in place)");
    /* sequence parallel: gather = the shards in rank order; reduce-scatter = block `rank` of the sum */
    FSC_TRY(fsc_device_upload(dev, dy, mine, n * sizeof(float)));
    FSC_TRY(fsc_tp_sp_gather(r->comm, dall, dy, n));
    FSC_TRY(tt_down(dev, got, dall, T * n));
    for (int q = 0; q < T; q++) {
        snprintf(name, sizeof name, "r%d", q);
        fsc_rng_fill_normal(want + q * n, n, 99, name, 0, 0.0f, 1.0f);
    }
    TT_BITS(got, want, T * n, "sequence-parallel gather");
    size_t nb = n / (size_t)T;
    FSC_TRY(fsc_tp_sp_reduce_scatter(r->comm, dy, dall, nb)); /* dall holds every rank's shards */
    FSC_TRY(tt_down(dev, got, dy, nb));
    for (size_t i = 0; i < nb; i++) {
        float s = 0;
        for (int q = 0; q < T; q++) s = q == 0 ? want[r->rank * nb + i] : s + want[r->rank * nb + i];
        want[i] = s; /* every rank sent the same gathered vector: the sum is T copies of block `rank` */
    }
    TT_BITS(got, want, nb, "sequence-parallel reduce-scatter");
    fsc_device_release(dev, dx), fsc_device_release(dev, dy), fsc_device_release(dev, dall);
    free(x), free(mine), free(got), free(want);
    return FSC_OK;
}

static void test_tp_conjugate_operators(void **state) {
    (void)state;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) assert_ok(tt_run(groups[g], conj_rank, NULL));
}

/* ---- column- and row-parallel linears ---- */
enum { NB = 2, NT = 7, NN = NB * NT, C1 = 24, C2 = 48 };

typedef struct {
    float *x, *w, *b, *dy; /* host (N, Cin), (Cin, Cout), (Cout), (N, Cout) */
    float *out, *dx, *dw, *db; /* reference results */
} lin_data;

static void lin_data_free(lin_data *d) {
    free(d->x), free(d->w), free(d->b), free(d->dy), free(d->out), free(d->dx), free(d->dw), free(d->db);
}

/* The unsharded linear (Cin -> Cout) forward and backward on dev: the oracle. */
static fsc_status lin_reference(fsc_device *dev, lin_data *d, int Cin, int Cout) {
    d->x = tt_normal(NN * Cin, "x", 1.0f), d->w = tt_normal((size_t)Cin * Cout, "w", 0.3f);
    d->b = tt_normal(Cout, "b", 0.5f), d->dy = tt_normal(NN * Cout, "dy", 1.0f);
    d->out = malloc(NN * Cout * sizeof(float)), d->dx = malloc(NN * Cin * sizeof(float));
    d->dw = malloc((size_t)Cin * Cout * sizeof(float)), d->db = malloc(Cout * sizeof(float));
    float *x, *w, *b, *dy, *out, *dx, *dw, *db;
    FSC_TRY(tt_up(dev, &x, d->x, NN * Cin));
    FSC_TRY(tt_up(dev, &w, d->w, (size_t)Cin * Cout));
    FSC_TRY(tt_up(dev, &b, d->b, Cout));
    FSC_TRY(tt_up(dev, &dy, d->dy, NN * Cout));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, NN * Cout * sizeof(float), (void **)&out));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, NN * Cin * sizeof(float), (void **)&dx));
    FSC_TRY(fsc_device_calloc(dev, FSC_TAG_ACTS, (size_t)Cin * Cout * sizeof(float), (void **)&dw));
    FSC_TRY(fsc_device_calloc(dev, FSC_TAG_ACTS, Cout * sizeof(float), (void **)&db));
    fsc_linear_rec rec;
    FSC_TRY(fsc_linear_forward(dev, out, &rec, x, w, b, NN, Cin, Cout, 0));
    FSC_TRY(fsc_linear_backward(dev, dx, dw, db, &rec, dy, w, 0.0f, 1.0f));
    FSC_TRY(tt_down(dev, d->out, out, NN * Cout));
    FSC_TRY(tt_down(dev, d->dx, dx, NN * Cin));
    FSC_TRY(tt_down(dev, d->dw, dw, (size_t)Cin * Cout));
    FSC_TRY(tt_down(dev, d->db, db, Cout));
    float *all[] = { x, w, b, dy, out, dx, dw, db };
    for (int i = 0; i < 8; i++) fsc_device_release(dev, all[i]);
    return FSC_OK;
}

/* columns [c0, c0 + nc) of a (rows, cols) host matrix */
static float *cols(const float *a, int rows, int ncols, int c0, int nc) {
    float *o = malloc((size_t)rows * nc * sizeof(float));
    for (int i = 0; i < rows; i++) memcpy(o + (size_t)i * nc, a + (size_t)i * ncols + c0, nc * sizeof(float));
    return o;
}

static fsc_status check(fsc_status s, int T, const char *what) {
    if (s == FSC_OK) return s;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", fsc_last_error());
    return fsc_error(s, "group of %d, %s: %s", T, what, msg);
}

static fsc_status column_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_device *dev = r->dev;
    int T = r->world, OCl = C2 / T, c0 = r->rank * OCl;
    lin_data ref;
    FSC_TRY(lin_reference(dev, &ref, C1, C2));
    float *wl = cols(ref.w, C1, C2, c0, OCl), *bl = cols(ref.b, 1, C2, c0, OCl);
    float *dyl = cols(ref.dy, NN, C2, c0, OCl);
    float *x, *w, *b, *dy, *dyloc, *out, *outg, *dx, *dx2, *dw, *db, *dw2, *db2, *work;
    FSC_TRY(tt_up(dev, &x, ref.x, NN * C1));
    FSC_TRY(tt_up(dev, &w, wl, (size_t)C1 * OCl));
    FSC_TRY(tt_up(dev, &b, bl, OCl));
    FSC_TRY(tt_up(dev, &dy, ref.dy, NN * C2));
    FSC_TRY(tt_up(dev, &dyloc, dyl, NN * OCl));
    size_t big = NN * C2 + C1 * C2;
    float *zeros = calloc(big, sizeof(float)), *h = malloc(big * sizeof(float)), *h2 = malloc(big * sizeof(float));
    FSC_TRY(tt_up(dev, &out, zeros, big)); FSC_TRY(tt_up(dev, &outg, zeros, big));
    FSC_TRY(tt_up(dev, &dx, zeros, big)); FSC_TRY(tt_up(dev, &dx2, zeros, big));
    FSC_TRY(tt_up(dev, &dw, zeros, big)); FSC_TRY(tt_up(dev, &db, zeros, big));
    FSC_TRY(tt_up(dev, &dw2, zeros, big)); FSC_TRY(tt_up(dev, &db2, zeros, big));
    FSC_TRY(fsc_device_calloc(dev, FSC_TAG_ACTS, fsc_tp_column_work_floats(NN, OCl, T, 1) * sizeof(float),
                              (void **)&work));
    fsc_tp_linear_rec rl, rg;
    /* forward without and with the gather of the output */
    FSC_TRY(check(fsc_tp_column_forward(dev, r->comm, out, &rl, x, w, b, NN, C1, OCl, 0, NULL), T, "forward"));
    FSC_TRY(check(fsc_tp_column_forward(dev, r->comm, outg, &rg, x, w, b, NN, C1, OCl, 1, work), T, "gather"));
    FSC_TRY(tt_down(dev, h, out, NN * OCl));
    float *refl = cols(ref.out, NN, C2, c0, OCl);
    if (T == 1) TT_BITS(h, refl, NN * OCl, "column forward, group of 1");
    TT_CLOSE(h, refl, NN * OCl, TOL, "column forward (local columns)");
    FSC_TRY(tt_down(dev, h2, outg, NN * C2));
    float *mineg = cols(h2, NN, C2, c0, OCl);
    TT_BITS(mineg, h, NN * OCl, "column forward: the gathered output's own block");
    TT_CLOSE(h2, ref.out, NN * C2, TOL, "column forward (gathered)");
    /* backward from the local slice and from the gathered gradient: the same bits */
    FSC_TRY(check(fsc_tp_column_backward(dev, r->comm, dx, dw, db, &rl, dyloc, w, NULL), T, "backward"));
    FSC_TRY(check(fsc_tp_column_backward(dev, r->comm, dx2, dw2, db2, &rg, dy, w, work), T, "backward gather"));
    FSC_TRY(tt_down(dev, h, dx, NN * C1));
    FSC_TRY(tt_down(dev, h2, dx2, NN * C1));
    TT_BITS(h2, h, NN * C1, "column backward: input gradient from the gathered output's gradient");
    if (T == 1) TT_BITS(h, ref.dx, NN * C1, "column input gradient, group of 1");
    TT_CLOSE(h, ref.dx, NN * C1, TOL, "column input gradient (all-reduced)");
    FSC_TRY(tt_down(dev, h, dw, (size_t)C1 * OCl));
    float *refw = cols(ref.dw, C1, C2, c0, OCl);
    if (T == 1) TT_BITS(h, refw, (size_t)C1 * OCl, "column weight gradient, group of 1");
    TT_CLOSE(h, refw, (size_t)C1 * OCl, TOL, "column weight gradient");
    FSC_TRY(tt_down(dev, h2, dw2, (size_t)C1 * OCl));
    TT_BITS(h2, h, (size_t)C1 * OCl, "column weight gradient from the gathered output's gradient");
    FSC_TRY(tt_down(dev, h, db, OCl));
    float *refb = cols(ref.db, 1, C2, c0, OCl);
    TT_BITS(h, refb, OCl, "column bias gradient");
    float *dev_all[] = { x, w, b, dy, dyloc, out, outg, dx, dx2, dw, db, dw2, db2, work };
    for (int i = 0; i < 14; i++) fsc_device_release(dev, dev_all[i]);
    free(wl), free(bl), free(dyl), free(zeros), free(h), free(h2), free(refl), free(mineg), free(refw), free(refb);
    lin_data_free(&ref);
    return FSC_OK;
}

static void test_tp_column_parallel(void **state) {
    (void)state;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) assert_ok(tt_run(groups[g], column_rank, NULL));
}

static fsc_status row_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_device *dev = r->dev;
    int T = r->world, Cl = C2 / T, c0 = r->rank * Cl;
    lin_data ref; /* C2 -> C1: the input features are split */
    FSC_TRY(lin_reference(dev, &ref, C2, C1));
    float *xl = cols(ref.x, NN, C2, c0, Cl);
    float *x, *w, *b, *dy, *out, *dx, *dw, *db;
    FSC_TRY(tt_up(dev, &x, xl, NN * Cl));
    FSC_TRY(tt_up(dev, &w, ref.w + (size_t)c0 * C1, (size_t)Cl * C1)); /* rows [c0, c0 + Cl) */
    FSC_TRY(tt_up(dev, &b, ref.b, C1));
    FSC_TRY(tt_up(dev, &dy, ref.dy, NN * C1));
    size_t big = NN * C2 + C1 * C2;
    float *zeros = calloc(big, sizeof(float)), *h = malloc(big * sizeof(float));
    FSC_TRY(tt_up(dev, &out, zeros, big)); FSC_TRY(tt_up(dev, &dx, zeros, big));
    FSC_TRY(tt_up(dev, &dw, zeros, big)); FSC_TRY(tt_up(dev, &db, zeros, big));
    fsc_linear_rec rec;
    FSC_TRY(check(fsc_tp_row_forward(dev, r->comm, out, &rec, x, w, b, NN, Cl, C1), T, "row forward"));
    FSC_TRY(tt_down(dev, h, out, NN * C1));
    if (T == 1) TT_BITS(h, ref.out, NN * C1, "row forward, group of 1");
    TT_CLOSE(h, ref.out, NN * C1, TOL, "row forward (partial sums all-reduced, bias once)");
    FSC_TRY(check(fsc_tp_row_backward(dev, r->comm, dx, dw, db, &rec, dy, w), T, "row backward"));
    FSC_TRY(tt_down(dev, h, dx, NN * Cl));
    float *refx = cols(ref.dx, NN, C2, c0, Cl);
    if (T == 1) TT_BITS(h, refx, NN * Cl, "row input gradient, group of 1");
    TT_CLOSE(h, refx, NN * Cl, TOL, "row input gradient (local columns)");
    FSC_TRY(tt_down(dev, h, dw, (size_t)Cl * C1));
    if (T == 1) TT_BITS(h, ref.dw, (size_t)Cl * C1, "row weight gradient, group of 1");
    TT_CLOSE(h, ref.dw + (size_t)c0 * C1, (size_t)Cl * C1, TOL, "row weight gradient (local rows)");
    FSC_TRY(tt_down(dev, h, db, C1));
    TT_BITS(h, ref.db, C1, "row bias gradient (the full sum on every rank)");
    float *dev_all[] = { x, w, b, dy, out, dx, dw, db };
    for (int i = 0; i < 8; i++) fsc_device_release(dev, dev_all[i]);
    free(xl), free(zeros), free(h), free(refx);
    lin_data_free(&ref);
    return FSC_OK;
}

static void test_tp_row_parallel(void **state) {
    (void)state;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) assert_ok(tt_run(groups[g], row_rank, NULL));
}

/* ---- vocab-parallel embedding: bit for bit, with and without sequence parallelism ---- */
enum { EB = 3, ET = 4, EN = EB * ET, EC = 8, EV = 48 };

static fsc_status embedding_rank(fsc_rank *r, void *arg) {
    int sp = *(const int *)arg;
    fsc_device *dev = r->dev;
    int T = r->world, Vl = EV / T, v0 = r->rank * Vl;
    size_t Nl = sp ? EN / T : EN;
    int32_t tok[EN], local[EN];
    for (int i = 0; i < EN; i++) tok[i] = (int32_t)((i * 29 + 5) % EV); /* tokens of every slice */
    float *wte = tt_normal(EV * EC, "wte", 1), *wpe = tt_normal(ET * EC, "wpe", 1), *dy = tt_normal(EN * EC, "dy", 1);
    float *gte = tt_normal(EV * EC, "gte", 1), *gpe = tt_normal(ET * EC, "gpe", 1); /* prior gradient contents */
    float *h = malloc(EV * EC * sizeof(float)), *want = malloc(EV * EC * sizeof(float));
    float *d_wte, *d_wpe, *d_dy, *d_gte, *d_gpe, *d_out, *d_gtel, *d_wtel, *work;
    int32_t *d_tok;
    /* the oracle: the unsharded embedding */
    FSC_TRY(tt_up(dev, &d_wte, wte, EV * EC)); FSC_TRY(tt_up(dev, &d_wpe, wpe, ET * EC));
    FSC_TRY(tt_up(dev, &d_dy, dy, EN * EC)); FSC_TRY(tt_up(dev, &d_gte, gte, EV * EC));
    FSC_TRY(tt_up(dev, &d_gpe, gpe, ET * EC)); FSC_TRY(tt_up(dev, &d_out, dy, EN * EC));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, EN * sizeof(int32_t), (void **)&d_tok));
    FSC_TRY(fsc_device_upload(dev, d_tok, tok, sizeof tok));
    fsc_embedding_rec er;
    FSC_TRY(fsc_embedding_forward(dev, d_out, &er, d_tok, d_wte, d_wpe, EB, ET, EC));
    FSC_TRY(tt_down(dev, want, d_out, EN * EC));
    FSC_TRY(fsc_embedding_backward(dev, d_gte, d_gpe, &er, d_dy));
    /* this rank's slice */
    fsc_tp_vocab_localize(local, tok, EN, v0, Vl);
    for (int i = 0; i < EN; i++)
        TT_TRUE(local[i] == (tok[i] >= v0 && tok[i] < v0 + Vl ? tok[i] - v0 : Vl), "localize %d", i);
    FSC_TRY(fsc_device_upload(dev, d_tok, local, sizeof local));
    FSC_TRY(tt_up(dev, &d_wtel, wte + (size_t)v0 * EC, (size_t)Vl * EC));
    FSC_TRY(tt_up(dev, &d_gtel, gte + (size_t)v0 * EC, (size_t)Vl * EC));
    FSC_TRY(fsc_device_upload(dev, d_gpe, gpe, ET * EC * sizeof(float)));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, fsc_tp_embedding_work_floats(EB, ET, EC, Vl, sp) * sizeof(float),
                             (void **)&work));
    fsc_tp_embedding_rec rec;
    FSC_TRY(fsc_tp_embedding_forward(dev, r->comm, d_out, &rec, d_tok, d_wtel, d_wpe, EB, ET, EC, Vl, sp, work));
    FSC_TRY(tt_down(dev, h, d_out, Nl * EC));
    TT_BITS(h, want + (sp ? r->rank * Nl * EC : 0), Nl * EC, sp ? "embedding forward (sequence shard)" : "embedding forward");
    FSC_TRY(fsc_tp_embedding_backward(dev, r->comm, d_gtel, d_gpe, &rec, d_dy, work));
    FSC_TRY(tt_down(dev, want, d_gte, EV * EC));
    FSC_TRY(tt_down(dev, h, d_gtel, (size_t)Vl * EC));
    TT_BITS(h, want + (size_t)v0 * EC, (size_t)Vl * EC, "embedding backward: wte slice");
    FSC_TRY(tt_down(dev, want, d_gpe, ET * EC)); /* d_gpe now holds prior + the tp sum; recompute the oracle's */
    float *gpe_ref = malloc(ET * EC * sizeof(float));
    memcpy(gpe_ref, gpe, ET * EC * sizeof(float));
    for (int b = 0; b < EB; b++)
        for (int t = 0; t < ET; t++)
            for (int c = 0; c < EC; c++) gpe_ref[t * EC + c] += dy[(b * ET + t) * EC + c];
    TT_BITS(want, gpe_ref, ET * EC, "embedding backward: wpe");
    float *dev_all[] = { d_wte, d_wpe, d_dy, d_gte, d_gpe, d_out, d_gtel, d_wtel, work };
    for (int i = 0; i < 9; i++) fsc_device_release(dev, dev_all[i]);
    fsc_device_release(dev, d_tok);
    free(wte), free(wpe), free(dy), free(gte), free(gpe), free(h), free(want), free(gpe_ref);
    return FSC_OK;
}

static void test_tp_vocab_embedding(void **state) {
    (void)state;
    for (int sp = 0; sp <= 1; sp++)
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) assert_ok(tt_run(groups[g], embedding_rank, &sp));
}

/* ---- vocab-parallel cross entropy ---- */
enum { XN = 12, XV = 48 };

static fsc_status xent_rank(fsc_rank *r, void *arg) {
    (void)arg;
    fsc_device *dev = r->dev;
    int T = r->world, Vl = XV / T, v0 = r->rank * Vl, ld = Vl + 1;
    float *logits = tt_normal(XN * XV, "logits", 3.0f);
    int32_t tgt[XN];
    for (int n = 0; n < XN; n++) tgt[n] = (int32_t)((n * 17 + 3) % XV);
    /* row 0: nearly all mass in the first slice; row 1: in the target's slice, far above the rest */
    for (int j = 0; j < XV / 4; j++) logits[j] += 40.0f;
    for (int j = 0; j < XV; j++) logits[XV + j] -= (j / (XV / 4) == tgt[1] / (XV / 4)) ? 0.0f : 30.0f;
    float *want_loss = malloc(XN * sizeof(float)), *want_d = malloc(XN * XV * sizeof(float));
    float *h = malloc(XN * ld * sizeof(float)), *mine = cols(logits, XN, XV, v0, Vl);
    float *d_logits, *d_losses, *d_d, *d_q, *work;
    int32_t *d_tgt;
    FSC_TRY(tt_up(dev, &d_logits, logits, XN * XV));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, XN * sizeof(float), (void **)&d_losses));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, XN * XV * sizeof(float), (void **)&d_d));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, XN * sizeof(int32_t), (void **)&d_tgt));
    FSC_TRY(fsc_device_upload(dev, d_tgt, tgt, sizeof tgt));
    fsc_xent_rec xr;
    FSC_TRY(fsc_xent_forward(dev, d_losses, &xr, d_logits, d_tgt, XN, XV, XV));
    FSC_TRY(fsc_xent_backward(dev, d_d, &xr, 0.25f));
    FSC_TRY(tt_down(dev, want_loss, d_losses, XN));
    FSC_TRY(tt_down(dev, want_d, d_d, XN * XV));
    /* the slice, with its scratch column */
    for (int n = 0; n < XN; n++) {
        memcpy(h + n * ld, mine + n * Vl, Vl * sizeof(float));
        h[n * ld + Vl] = NAN; /* the scratch column is written before it is read */
    }
    fsc_device_release(dev, d_logits);
    FSC_TRY(tt_up(dev, &d_logits, h, XN * ld));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, XN * sizeof(float), (void **)&d_q));
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, fsc_tp_xent_work_floats(XN) * sizeof(float), (void **)&work));
    fsc_device_release(dev, d_d);
    FSC_TRY(fsc_device_alloc(dev, FSC_TAG_ACTS, XN * ld * sizeof(float), (void **)&d_d));
    fsc_tp_xent_rec rec;
    FSC_TRY(fsc_tp_xent_forward(dev, r->comm, d_losses, &rec, d_logits, tgt, d_tgt, d_q, XN, Vl, ld, v0, work));
    FSC_TRY(tt_down(dev, h, d_losses, XN));
    if (T == 1) TT_BITS(h, want_loss, XN, "cross entropy loss, group of 1");
    TT_CLOSE(h, want_loss, XN, TOL, "vocab-parallel cross entropy loss");
    FSC_TRY(fsc_tp_xent_backward(dev, d_d, &rec, 0.25f, work));
    FSC_TRY(tt_down(dev, h, d_d, XN * ld));
    float *got = cols(h, XN, ld, 0, Vl), *ref = cols(want_d, XN, XV, v0, Vl);
    if (T == 1) TT_BITS(got, ref, XN * Vl, "cross entropy gradient, group of 1");
    TT_CLOSE(got, ref, XN * Vl, TOL, "vocab-parallel cross entropy gradient");
    float *dev_all[] = { d_logits, d_losses, d_d, d_q, work };
    for (int i = 0; i < 5; i++) fsc_device_release(dev, dev_all[i]);
    fsc_device_release(dev, d_tgt);
    free(logits), free(want_loss), free(want_d), free(h), free(mine), free(got), free(ref);
    return FSC_OK;
}

static void test_tp_vocab_cross_entropy(void **state) {
    (void)state;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) assert_ok(tt_run(groups[g], xent_rank, NULL));
}

/* ---- errors a caller can cause ---- */
static fsc_status bad_sp_rank(fsc_rank *r, void *arg) {
    (void)arg;
    float *work;
    FSC_TRY(fsc_device_alloc(r->dev, FSC_TAG_ACTS, 4096 * sizeof(float), (void **)&work));
    fsc_status s = fsc_tp_embedding_forward(r->dev, r->comm, work, NULL, (const int32_t *)work, work, work, 3, 3, 4,
                                            4, 1, work); /* 9 rows over 2 shards */
    fsc_device_release(r->dev, work);
    return s;
}

static void test_tp_errors(void **state) {
    (void)state;
    fsc_gpt_config c = { .layers = 1, .dim = 24, .heads = 12, .seq = 8, .vocab = 60 };
    assert_err(fsc_tp_check_config(&c, 5), FSC_ERR_INVALID, "12 heads do not split over a tensor group of 5");
    c.heads = 4;
    assert_err(fsc_tp_check_config(&c, 8), FSC_ERR_INVALID, "4 heads do not split over a tensor group of 8");
    c.vocab = 50;
    assert_err(fsc_tp_check_config(&c, 4), FSC_ERR_INVALID, "vocabulary of 50 does not split over a tensor group of 4");
    c.padded_vocab = 54; /* padded, but not to a multiple of the group: the message names padded_vocab, not "pad it" */
    assert_err(fsc_tp_check_config(&c, 4), FSC_ERR_INVALID, "padded vocabulary of 54 rows (padded_vocab; vocab 50) "
               "does not split over a tensor group of 4 (make padded_vocab a multiple of 4)");
    c.padded_vocab = 52;
    assert_ok(fsc_tp_check_config(&c, 4));
    c.padded_vocab = 0, c.vocab = 48;
    assert_ok(fsc_tp_check_config(&c, 4));
    /* the head's slices each hold a real row (the model itself refused these, after the checks said yes) */
    c.vocab = 8, c.padded_vocab = 16;
    assert_err(fsc_tp_check_config(&c, 2), FSC_ERR_UNSUPPORTED, "leaves the last rank's slice of 8 rows without a real "
               "one: pad by fewer than 8 rows");
    c.vocab = 3, c.padded_vocab = 4;
    assert_err(fsc_tp_check_config(&c, 4), FSC_ERR_UNSUPPORTED, "the group can have at most 3 ranks");
    c.vocab = 8, c.padded_vocab = 12;
    assert_ok(fsc_tp_check_config(&c, 2));
    assert_err(fsc_tp_check_config(&c, 0), FSC_ERR_INVALID, "group size 0");
    assert_err(tt_run(2, bad_sp_rank, NULL), FSC_ERR_INVALID, "9 token rows do not split into 2 sequence shards");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_conjugate_operators),
        cmocka_unit_test(test_tp_column_parallel),
        cmocka_unit_test(test_tp_row_parallel),
        cmocka_unit_test(test_tp_vocab_embedding),
        cmocka_unit_test(test_tp_vocab_cross_entropy),
        cmocka_unit_test(test_tp_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
