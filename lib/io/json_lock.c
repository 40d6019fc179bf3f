/* The lock every cJSON_Parse* call in the library holds (json_lock.h): cJSON's parser writes a process-wide
 * error pointer, and simulated ranks parse concurrently. fsc_json_parse takes it for small texts; the checkpoint
 * metadata and flight readers take it around their own calls; the
 * safetensors header has its own parser (safetensors_header.c) and needs no lock. */
#include <float.h>
#include <math.h>
#include "json_lock.h"

pthread_mutex_t fsc_json_lock = PTHREAD_MUTEX_INITIALIZER;

int fsc_json_same_float(double a, double b) {
    if (!(fabs(a) <= FLT_MAX) || !(fabs(b) <= FLT_MAX)) return a == b;
    return (float)a == (float)b;
}

cJSON *fsc_json_parse(const char *text) {
    pthread_mutex_lock(&fsc_json_lock);
    cJSON *o = cJSON_Parse(text);
    pthread_mutex_unlock(&fsc_json_lock);
    return o;
}

cJSON *fsc_json_parse_whole(const char *text) {
    pthread_mutex_lock(&fsc_json_lock);
    cJSON *o = cJSON_ParseWithOpts(text, NULL, 1); /* after the value only white space */
    pthread_mutex_unlock(&fsc_json_lock);
    return o;
}
