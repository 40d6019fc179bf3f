/* --plan: the planner's prediction of the run about to start (fsc/plan.h, docs/planning.md): each rank's peak
 * memory per tag and its step's work, from the engine's own setup and one step of this run's job on the counting
 * device, and the step time at this machine's calibrated cpu rates over the run's --sim-bandwidth and
 * --sim-latency, printed as fsc-plan's table before training; print_json puts it in "predicted" beside the
 * measured values. Rank 0's process plans (under a launcher the others print nothing).
 * Not here: the planning (lib/plan), the table and the JSON fields (../plan_print.h). */
#include <stdlib.h>
#include "train.h"
#include "../plan_print.h"

int plan_run(run_state *st) {
    const train_config *c = st->cfg;
    int balance[1024]; /* --balance's blocks per stage, read while the plan runs */
    fsc_plan_job j;
    fsc_status s = plan_job(c, balance, &j);
    if (s == FSC_OK && !(st->plan = calloc((size_t)c->world, sizeof *st->plan)))
        s = fsc_error(FSC_ERR_NOMEM, "out of memory for %d ranks' plans", c->world);
    if (s == FSC_OK) s = fsc_plan_memory(&j, st->plan);
    if (s == FSC_OK) s = plan_sim_rates(c->world, c->threads, c->sim_clock, &j, c->sim_bandwidth, c->sim_latency,
                                        c->sim_copy, &st->plan_rates);
    if (s == FSC_OK) s = fsc_plan_replay(&j, &st->plan_rates, &st->plan_step);
    plan_job_free(&j);
    if (s != FSC_OK) {
        fprintf(stderr, "fsc-train: --plan: %s\n", fsc_last_error());
        return -1;
    }
    printf("predicted per rank (--plan):\n");
    plan_print_table(stdout, st->plan, c->world);
    plan_print_time(stdout, &st->plan_step, &st->plan_rates, c->prefetch);
    fflush(stdout);
    return 0;
}
