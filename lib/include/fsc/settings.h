/* Settings every rank must share, checked once at start-up: a list of (name, value) records that each rank
 * fills the same way from its own options, and one collective that compares them. Ranks started with
 * different options (a learning rate, a seed, an optimizer, a data file given to one process only) would
 * otherwise train on, each its own way, or fail later in a mismatched collective; here they all refuse
 * together, naming the first setting that differs and two ranks' values:
 *   "ranks disagree on optimizer.lr: rank 0 has 0.001, rank 1 has 0.0001"
 * The engine (parallel.h) checks its own (options, optimizer, seed, model) when it is created; a program adds
 * its own (data, schedule, steps) with these functions. Values are compared as text, so a program writes each
 * one exactly (%.9g for a float, every digit of an integer).
 * Not here: per-step agreement (the engine's batch check, fsc_comm_agree for a status). */
#ifndef FSC_SETTINGS_H
#define FSC_SETTINGS_H
#include "export.h"
#include "status.h"
#include "comm.h"
#include "device.h"

FSC_BEGIN_DECLS

typedef struct fsc_settings fsc_settings;

fsc_status fsc_settings_create(fsc_settings **out);
/* Add a setting: name ("optimizer.lr", at most 63 bytes, not empty) and its value (printf-style, any length; the
 * first 300 bytes appear in messages). A failure (a bad name, out of memory) is kept and returned by
 * fsc_settings_agree on every rank as well, so a caller may add without checking each return. */
fsc_status fsc_settings_add(fsc_settings *s, const char *name, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Settings added so far (0 for NULL). */
int fsc_settings_count(const fsc_settings *s);
/* Collective over c: FSC_OK when every rank holds the same settings (names and values, in the same order).
 * Otherwise every rank returns FSC_ERR_INVALID with the same message: the first setting that differs, rank 0's
 * value, the value of the first rank that differs from rank 0 ("(none)" where a rank has fewer settings), and
 * how many ranks differ from rank 0 when more than one does. A rank whose adds failed makes every rank return
 * that failure (fsc_comm_agree). Each rank sends 32 bytes when they agree, and 8 bytes a setting plus two values
 * when they do not. dev stages the exchange. */
fsc_status fsc_settings_agree(const fsc_settings *s, fsc_comm *comm, fsc_device *dev);
void fsc_settings_free(fsc_settings *s);

FSC_END_DECLS

#endif
