/* Private to the library: numbers written and read in the C locale's form whatever the host program's
 * setlocale(LC_NUMERIC) is (a decimal comma would make 1,5 of 1.5 in JSON, and refuse "0.5" seconds). */
#ifndef FSC_CORE_LOCALE_IMPL_H
#define FSC_CORE_LOCALE_IMPL_H
#include <locale.h>

/* The C locale's LC_NUMERIC, made once ((locale_t)0 if it could not be: the calling thread's is used then). */
locale_t fsc_c_numeric(void);
/* The calling thread uses the C locale's numbers until fsc_numbers_back(the returned value). */
locale_t fsc_numbers_c(void);
void fsc_numbers_back(locale_t before);

#endif
