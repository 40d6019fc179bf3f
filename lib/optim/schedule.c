/* Learning-rate schedules (schedule.h): constant, linear warmup then cosine or linear decay to a minimum, each
 * a pure function of the step. The engine's rate (fsc_engine_set_lr) is in lib/parallel/engine.c. */
#include <math.h>
#include <string.h>
#include "fsc/schedule.h"

static const char *const kind_names[] = { "constant", "cosine", "linear" };

const char *fsc_lr_kind_name(fsc_lr_kind k) {
    return k >= FSC_LR_CONSTANT && k <= FSC_LR_LINEAR ? kind_names[k] : "?";
}

fsc_status fsc_lr_kind_parse(const char *name, fsc_lr_kind *out) {
    FSC_CHECK_ARG(name);
    FSC_CHECK_ARG(out);
    for (int k = 0; name && k < (int)(sizeof kind_names / sizeof *kind_names); k++)
        if (!strcmp(name, kind_names[k])) {
            *out = (fsc_lr_kind)k;
            return FSC_OK;
        }
    return fsc_error(FSC_ERR_INVALID, "unknown learning-rate schedule \"%s\" (constant, cosine or linear)",
                     name ? name : "(null)");
}

fsc_status fsc_lr_schedule_validate(const fsc_lr_schedule *s) {
    FSC_CHECK_ARG(s);
    if (s->kind != FSC_LR_CONSTANT && s->kind != FSC_LR_COSINE && s->kind != FSC_LR_LINEAR)
        return fsc_error(FSC_ERR_INVALID, "learning-rate schedule: unknown kind %d", (int)s->kind);
    if (!(isfinite(s->lr) && s->lr >= 0.0f))
        return fsc_error(FSC_ERR_INVALID, "learning-rate schedule: lr %g must be finite and >= 0", (double)s->lr);
    if (!(isfinite(s->min_lr) && s->min_lr >= 0.0f))
        return fsc_error(FSC_ERR_INVALID, "learning-rate schedule: min_lr %g must be finite and >= 0",
                         (double)s->min_lr);
    if (s->warmup < 0)
        return fsc_error(FSC_ERR_INVALID, "learning-rate schedule: warmup %lld must be >= 0", (long long)s->warmup);
    if (s->kind == FSC_LR_CONSTANT) return FSC_OK;
    if (s->min_lr > s->lr)
        return fsc_error(FSC_ERR_INVALID, "learning-rate schedule: min_lr %g is above lr %g", (double)s->min_lr,
                         (double)s->lr);
    if (s->total <= s->warmup)
        return fsc_error(FSC_ERR_INVALID, "learning-rate schedule: %s decay needs more steps (%lld) than warmup "
                         "steps (%lld)", fsc_lr_kind_name(s->kind), (long long)s->total, (long long)s->warmup);
    return FSC_OK;
}

float fsc_lr_at(const fsc_lr_schedule *s, int64_t step) {
    if (!s) return 0;
    if (step < 0) step = 0;
    if (step < s->warmup) return (float)((double)s->lr * (double)(step + 1) / (double)s->warmup);
    if (s->kind == FSC_LR_CONSTANT) return s->lr;
    if (step >= s->total) return s->min_lr;
    const double r = (double)(step - s->warmup) / (double)(s->total - s->warmup); /* [0, 1) */
    const double coeff = s->kind == FSC_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * r)) : 1.0 - r;
    return (float)((double)s->min_lr + coeff * ((double)s->lr - (double)s->min_lr));
}
