// What the dispatch_io differential programs share: the serial queue their handlers run on, the
// semaphore the main thread waits on for each step, and a handler that prints each call.
// Include once, after diff_compat.h, in a program's one translation unit.
#ifndef DIFF_IO_COMMON_H
#define DIFF_IO_COMMON_H

#include "diff_compat.h"

extern void *_Block_copy(const void *block);

static dispatch_queue_t q;
static dispatch_semaphore_t step;

// Waits for the next `step` signal; gives up the whole program after 10 s.
static inline void wait_step(void) {
  if (dispatch_semaphore_wait(step, dispatch_time(DISPATCH_TIME_NOW, 10 * (int64_t)NSEC_PER_SEC))) {
    printf("TIMED OUT\n");
    exit(1);
  }
}

// Prints each call as one line and signals `step` on the last call (done), or on every call
// when `signal_each` is set.
static inline dispatch_io_handler_t printing_calls(const char *name, bool signal_each) {
  // Copied to the heap (returned from this function) and kept for the program's life.
  return (dispatch_io_handler_t)_Block_copy(^(bool done, dispatch_data_t data, int error) {
    const void *buffer = NULL;
    size_t size = 0;
    dispatch_data_t map = data ? dispatch_data_create_map(data, &buffer, &size) : NULL;
    printf("%s: done %d, %s %zu \"%.*s\", error %d\n", name, done, data ? "data" : "NULL", size,
           (int)size, (const char *)buffer, error);
    if (map) dispatch_release(map);
    if (done || signal_each) dispatch_semaphore_signal(step);
  });
}

#endif
