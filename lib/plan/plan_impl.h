/* Private to lib/plan: what the planner's two halves share. */
#ifndef FSC_PLAN_IMPL_H
#define FSC_PLAN_IMPL_H
#include "fsc/plan.h"

/* plan_memory.c: the job on its world of ranks on the cpu device on the virtual clock, timed: one untimed step,
 * then `steps` more (at most 16); *seconds is rank 0's median step on its clock (its thread's CPU time and what it
 * waited for). */
fsc_status plan_time_steps(const fsc_plan_job *job, int steps, double *seconds);
/* plan_memory.c: fsc_plan_memory's run with a second step replayed on the modelled clock at rates (the counting
 * device's kernels, the simulated network of rates' links, one level or two): *seconds is rank 0's modelled time
 * of that step, and out holds that step's counts (its peaks those of both steps). */
fsc_status plan_replay_step(const fsc_plan_job *job, const fsc_plan_rates *rates, fsc_plan_rank *out,
                            double *seconds);

/* plan_memory.c: fsc_plan_memory with every rank running its step (roles 0) or one rank per role (roles 1,
 * fsc_plan_memory's way: ranks whose step a key says is another's take that one's results); *stepped (may be
 * NULL): how many ranks ran the step. */
fsc_status plan_memory_roles(const fsc_plan_job *job, fsc_plan_rank *out, int roles, int *stepped);

#endif
