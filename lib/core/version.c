/* The version of the library that runs (version.h): compiled from the header's macros, so a program can
 * compare it with the FSC_VERSION_NUMBER it was built with. */
#include "fsc/version.h"

#define FSC_STR_(x) #x
#define FSC_STR(x) FSC_STR_(x)

int fsc_version(void) { return FSC_VERSION_NUMBER; }

const char *fsc_version_string(void) {
    return FSC_STR(FSC_VERSION_MAJOR) "." FSC_STR(FSC_VERSION_MINOR) "." FSC_STR(FSC_VERSION_PATCH);
}
