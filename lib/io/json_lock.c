/* The lock every cJSON_Parse* call in the library holds (json_lock.h): cJSON's parser writes a process-wide
 * error pointer, and simulated ranks parse concurrently. The checkpoint metadata reader uses it; the
 * safetensors header has its own parser (safetensors_header.c) and needs no lock. */
#include "json_lock.h"

pthread_mutex_t fsc_json_lock = PTHREAD_MUTEX_INITIALIZER;
