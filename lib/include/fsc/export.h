/* What a public header declares is the library's exported API; everything else is private to it.
 * The library is compiled with -fvisibility=hidden, so only declarations between FSC_BEGIN_DECLS and
 * FSC_END_DECLS get default visibility (libfsc.so exports them; every other function of the library, its
 * internal cpu_*, sim_*, ck_* ... and internal fsc_* helpers, is hidden and cannot be replaced by a
 * program's function of the same name). The same pair makes the declarations extern "C" for C++.
 *
 * Every public header has this shape (the #includes stay outside the pair):
 *   #ifndef FSC_X_H
 *   #define FSC_X_H
 *   #include "..."
 *   FSC_BEGIN_DECLS
 *   ...declarations...
 *   FSC_END_DECLS
 *   #endif
 * Private headers (those in the folders of lib/, sim/ and backends/) never use the pair. */
#ifndef FSC_EXPORT_H
#define FSC_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define FSC_VISIBILITY_PUSH_ _Pragma("GCC visibility push(default)")
#define FSC_VISIBILITY_POP_ _Pragma("GCC visibility pop")
#else
#define FSC_VISIBILITY_PUSH_
#define FSC_VISIBILITY_POP_
#endif

#ifdef __cplusplus
#define FSC_BEGIN_DECLS FSC_VISIBILITY_PUSH_ extern "C" {
#define FSC_END_DECLS } FSC_VISIBILITY_POP_
#else
#define FSC_BEGIN_DECLS FSC_VISIBILITY_PUSH_
#define FSC_END_DECLS FSC_VISIBILITY_POP_
#endif

#endif
