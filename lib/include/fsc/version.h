/* The library's version. Compile time: FSC_VERSION_MAJOR, _MINOR, _PATCH (the header a program was built
 * with); run time: fsc_version() (the library it runs with). The shared library is libfsc.so.MAJOR.MINOR.PATCH
 * with the SONAME libfsc.so.MAJOR: a program runs with any library of its major version. So a change that
 * breaks programs built against an older library (a function removed or its signature changed, a field
 * added to or removed from a public struct, which changes its size and layout) raises the major version;
 * added functions raise the minor version; fixes the patch version.
 * The Makefile reads the version from this file (one place to change it). */
#ifndef FSC_VERSION_H
#define FSC_VERSION_H
#include "export.h"

#define FSC_VERSION_MAJOR 0
#define FSC_VERSION_MINOR 1
#define FSC_VERSION_PATCH 0
/* One number that compares like the version: 10000 major + 100 minor + patch. */
#define FSC_VERSION_NUMBER (FSC_VERSION_MAJOR * 10000 + FSC_VERSION_MINOR * 100 + FSC_VERSION_PATCH)

FSC_BEGIN_DECLS

/* The version of the library this program runs with, as FSC_VERSION_NUMBER (compare the two to detect
 * a program built against another version). */
int fsc_version(void);
/* The same as text, "0.1.0". */
const char *fsc_version_string(void);

FSC_END_DECLS

#endif
