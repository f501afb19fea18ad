/* The bytes onnxruntime's CPU allocator holds, and their peak: a preloaded wrapper of
 * posix_memalign, the aligned operator new and free.
 *
 * onnxruntime's CPUAllocator takes every tensor, every kernel's scratch and every region of
 * its BFC arena with posix_memalign (onnxruntime 1.19, onnxruntime/core/framework/allocator.cc,
 * AllocatorDefaultAlloc) or the aligned operator new (later versions), and gives them back
 * with free (the aligned operator delete frees with it). This wrapper counts the bytes asked
 * for those two ways and not yet freed (other allocations pass through uncounted), and their
 * peak since the last reset. onnxmem.runtime.footprint reads it through
 * alloc_trace_stats / alloc_trace_reset_peak when a process runs with it preloaded:
 *
 *     cc -O2 -shared -fPIC -o alloc_trace.so bench/alloc_trace.c -ldl
 *     LD_PRELOAD=$PWD/alloc_trace.so python ...
 *
 * bench/bench_remat_ort.py --requested builds and preloads it in a temporary folder.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define SLOTS (1u << 20) /* open addressing; 0 empty, 1 a removed entry */
static uintptr_t keys[SLOTS];
static size_t sizes[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long long held, peak, count;
static int (*next_memalign)(void **, size_t, size_t);
static void (*next_free)(void *);
static void *(*next_new)(size_t, size_t);

static size_t slot_of(uintptr_t key) { return (size_t)((key >> 4) * 11400714819323198485ull) & (SLOTS - 1); }

static void track(void *ptr, size_t size) {
    pthread_mutex_lock(&lock);
    size_t i = slot_of((uintptr_t)ptr), free_slot = SLOTS;
    for (; keys[i]; i = (i + 1) & (SLOTS - 1)) {
        if (keys[i] == (uintptr_t)ptr) break; /* counted already (operator new over posix_memalign) */
        if (keys[i] == 1 && free_slot == SLOTS) free_slot = i;
    }
    if (keys[i] != (uintptr_t)ptr) {
        if (free_slot != SLOTS) i = free_slot;
        keys[i] = (uintptr_t)ptr;
        sizes[i] = size;
        held += (long long)size;
        count += 1;
        if (held > peak) peak = held;
    }
    pthread_mutex_unlock(&lock);
}

int posix_memalign(void **out, size_t alignment, size_t size) {
    if (!next_memalign) next_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    int rc = next_memalign(out, alignment, size);
    if (rc == 0 && *out) track(*out, size);
    return rc;
}

/* operator new(std::size_t, std::align_val_t) */
void *_ZnwmSt11align_val_t(size_t size, size_t alignment) {
    if (!next_new) next_new = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "_ZnwmSt11align_val_t");
    void *ptr = next_new(size, alignment);
    if (ptr) track(ptr, size);
    return ptr;
}

void free(void *ptr) {
    if (!next_free) next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    if (ptr && held) {
        pthread_mutex_lock(&lock);
        for (size_t i = slot_of((uintptr_t)ptr); keys[i]; i = (i + 1) & (SLOTS - 1)) {
            if (keys[i] == (uintptr_t)ptr) {
                held -= (long long)sizes[i];
                keys[i] = 1;
                break;
            }
        }
        pthread_mutex_unlock(&lock);
    }
    next_free(ptr);
}

/* out[0]: bytes held now; out[1]: their peak since the last reset; out[2]: allocations so far */
void alloc_trace_stats(long long *out) {
    pthread_mutex_lock(&lock);
    out[0] = held;
    out[1] = peak;
    out[2] = count;
    pthread_mutex_unlock(&lock);
}

void alloc_trace_reset_peak(void) {
    pthread_mutex_lock(&lock);
    peak = held;
    pthread_mutex_unlock(&lock);
}
