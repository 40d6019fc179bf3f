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

#endif
