/* Private: cJSON's parser writes a process-wide error pointer on every call, and simulated ranks parse
 * concurrently, so every cJSON_Parse* call in the library holds this lock (defined in json_lock.c). */
#ifndef FSC_JSON_LOCK_H
#define FSC_JSON_LOCK_H
#include <pthread.h>

#include <stddef.h>
#include <cjson/cJSON.h>

extern pthread_mutex_t fsc_json_lock;

/* cJSON_Parse of a NUL-terminated text, under the lock: the library's way to parse a small JSON text. */
cJSON *fsc_json_parse(const char *text);
/* The same, but NULL unless the whole text is one JSON value ({"a":1}garbage or {"a":1},{"b":2}: NULL). */
cJSON *fsc_json_parse_whole(const char *text);

/* Whether two recorded numbers set the same float (a text's 1e-6 and its float's 9.99999997e-07 agree: cJSON prints
 * 15 digits where they read back within its tolerance, not always the same double); a number beyond a float's range
 * (a crafted record) is compared as it is, not converted (undefined). */
int fsc_json_same_float(double a, double b);

#endif
