/* The planner (docs/planning.md): what a training job takes per rank, before it is launched.
 * Memory: fsc_plan_memory runs the engine's own setup and one step of the job on simulated ranks whose device
 * is the counting device "count" (backends/count: allocations are counted in the tagged ledger but not
 * there, kernels do nothing, collectives larger than a few values move nothing), and returns each rank's peak
 * bytes per tag, with the host memory of offload beside them. Being the real code run dry, the answer is the
 * ledger peak of a real run of the same job, byte for byte, with no formula kept beside the code.
 * fsc_plan_measure runs the same job for real on the cpu device (a check, or a calibration).
 *   fsc_plan_job j = fsc_plan_job_default();
 *   j.model = FSC_PLAN_LLAMA; j.llama = ...; j.world = 8; j.batch = 8; j.po.kind = FSC_PAR_FSDP;
 *   fsc_plan_rank *r = calloc(j.world, sizeof *r);
 *   fsc_plan_memory(&j, r);   r[i].peak[FSC_TAG_PARAMS], r[i].peak_total, r[i].host_peak_total ...
 * The same dry run counts the step's work: its matrix products' FLOPs and its collectives' bytes per group.
 * Not here: the step time and the search over layouts (docs/planning.md says what remains). */
#ifndef FSC_PLAN_H
#define FSC_PLAN_H
#include "export.h"
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "device.h"
#include "gpt.h"
#include "llama.h"
#include "optim.h"
#include "parallel.h"

FSC_BEGIN_DECLS

typedef enum { FSC_PLAN_GPT = 0, FSC_PLAN_LLAMA } fsc_plan_model;

/* A job as fsc-train runs it: the model, the engine's options, the optimizer, the world and the global batch.
 * Each rank builds its model and engine as the trainer does (a Llama with tp > 1 through fsc_llama_build on
 * the tensor group, else fsc_llama_model_create then fsc_engine_create_model; a GPT with fsc_engine_create)
 * and runs one step of batch / dp sequences of the model's seq tokens (token 0 throughout). */
typedef struct {
    fsc_plan_model model;
    fsc_gpt_config gpt;        /* FSC_PLAN_GPT */
    fsc_llama_config llama;    /* FSC_PLAN_LLAMA */
    int sequence_parallel;     /* a Llama with po.tp > 1: norms and residuals on sequence shards */
    fsc_parallel_opts po;      /* the engine's options; world = dp x tp x pp */
    fsc_optim_config oc;
    int world;                 /* ranks (>= 1) */
    int batch;                 /* global batch in sequences: a multiple of dp = world / (tp pp) */
    uint64_t seed;
} fsc_plan_job;

/* A GPT-2 small job on one rank, batch 1, the library's engine and AdamW defaults. */
fsc_plan_job fsc_plan_job_default(void);

/* One rank's answer: peak bytes per tag (fsc_device_peak_bytes) over the setup and one step, and their peak
 * total; host_* the same of the host memory offload keeps (0 without offload); where the rank sits. */
typedef struct {
    size_t peak[FSC_TAG_COUNT];
    size_t peak_total;
    size_t host_peak[FSC_TAG_COUNT];
    size_t host_peak_total;
    int has_host;              /* 1: the job offloads (host_* hold its host memory) */
    int tensor, data, stage;   /* the rank's coordinates (fsc_layout) */
    /* The step's work (the setup's not counted): the FLOPs of its matrix products (fsc_plan_memory only: 0 from
     * fsc_plan_measure) and the bytes its collectives moved per group (fsc_engine_comm_stats_group, every op
     * summed), which fsc_plan_memory counts as the real run does. */
    double gemm_flops;
    double comm_bytes[FSC_GROUP_COUNT];
} fsc_plan_rank;

/* Per-rank peaks of the job on the counting device into out[0 .. job->world - 1]. Every rank of the world runs
 * (as a thread; allocations beyond a few kilobytes are not there, so a large model needs no memory); the job's
 * errors are the engine's (an invalid layout fails as fsc-train would, with its message). */
fsc_status fsc_plan_memory(const fsc_plan_job *job, fsc_plan_rank *out);
/* The same job run for real on the cpu device (simulated ranks, one thread each): the measured peaks. */
fsc_status fsc_plan_measure(const fsc_plan_job *job, fsc_plan_rank *out);

FSC_END_DECLS

#endif
