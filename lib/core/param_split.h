/* Private: the check of one tensor's split fields (param_split.c), run by fsc_model_validate (model.c), and the
 * check that no two tensors share a name (model.c; the sequential model's too). */
#ifndef FSC_PARAM_SPLIT_H
#define FSC_PARAM_SPLIT_H
#include "fsc/model.h"

/* full_shape consistent with shape, split, parts and tp_size; tp_rank inside the group. */
fsc_status fsc_param_check_split(const fsc_param_info *p);
/* The index of a tensor of info[0 .. n-1] whose name another one has too, or -1: sorted by name, O(n log n) (a
 * model of thousands of tensors, built by every rank of a planned thousand). */
int fsc_param_duplicate_name(const fsc_param_info *info, int n);

#endif
