/* Private: the check of one tensor's split fields (param_split.c), run by fsc_model_validate (model.c). */
#ifndef FSC_PARAM_SPLIT_H
#define FSC_PARAM_SPLIT_H
#include "fsc/model.h"

/* full_shape consistent with shape, split, parts and tp_size; tp_rank inside the group. */
fsc_status fsc_param_check_split(const fsc_param_info *p);

#endif
