/* Private: the built-in model families (family.h), one line each. A built-in family is a file of lib/model that
 * defines its fsc_model_family (a name, from_config and, optionally, build), declared here, and a row of builtin[]
 * in model_config.c (docs/models.md: adding a family).
 * Not here: the registry's functions (model_config.c), a program's own families (fsc_model_family_register). */
#ifndef FSC_MODEL_FAMILY_IMPL_H
#define FSC_MODEL_FAMILY_IMPL_H
#include "fsc/family.h"

extern const fsc_model_family fsc_family_gpt2;  /* model_config.c: gpt.h's GPT-2, built from its fields */
extern const fsc_model_family fsc_family_llama; /* model_config.c: llama.h's Llama */

#endif
