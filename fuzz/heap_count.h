/* For the fuzz harnesses that bound the memory an input makes a loader take: the heap held between
 * heap_count_begin() and heap_count_end() (which gives its peak in bytes), through the sanitizer's allocation
 * hooks, installed at the first begin. The fuzzer runs one input at a time on one thread, so the counters are
 * plain statics. */
#ifndef FSC_FUZZ_HEAP_COUNT_H
#define FSC_FUZZ_HEAP_COUNT_H
#include <sanitizer/allocator_interface.h>
#include <stddef.h>

static int heap_counting, heap_hooked;
static long long heap_now, heap_peak;

static inline void heap_on_malloc(const volatile void *p, size_t n) {
    (void)p;
    if (!heap_counting) return;
    heap_now += (long long)n;
    if (heap_now > heap_peak) heap_peak = heap_now;
}
static inline void heap_on_free(const volatile void *p) {
    if (heap_counting && p) heap_now -= (long long)__sanitizer_get_allocated_size((const void *)p);
}

static inline void heap_count_begin(void) {
    if (!heap_hooked) __sanitizer_install_malloc_and_free_hooks(heap_on_malloc, heap_on_free), heap_hooked = 1;
    heap_now = heap_peak = 0;
    heap_counting = 1;
}
/* The most bytes held at once since heap_count_begin */
static inline long long heap_count_end(void) {
    heap_counting = 0;
    return heap_peak;
}

#endif
