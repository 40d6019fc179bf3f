/* The C locale's numbers for the library's own text (locale_impl.h): one locale object for the process, made
 * once and never changed, used per thread (uselocale) so that a host program's setlocale stays its own. It is the
 * C locale in every category (newlocale's base is C): while it is in use the thread's text is C's too, which is
 * what the library writes (ASCII JSON and numbers). */
#include <pthread.h>
#include "core/locale_impl.h"

static locale_t c_numeric;
static pthread_once_t made = PTHREAD_ONCE_INIT;

static void make(void) { c_numeric = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

locale_t fsc_c_numeric(void) {
    pthread_once(&made, make);
    return c_numeric;
}

locale_t fsc_numbers_c(void) {
    const locale_t c = fsc_c_numeric();
    return c ? uselocale(c) : (locale_t)0;
}

void fsc_numbers_back(locale_t before) {
    if (before) uselocale(before);
}
