// What the dispatch_io differential programs share: the serial queue their handlers run on, the
// semaphore the main thread waits on for each step, a handler that prints each call, and
// helpers that compare bytes (data, files, runs) and collect what a read delivers.
// Include once, after diff_compat.h, in a program's one translation unit.
#ifndef DIFF_IO_COMMON_H
#define DIFF_IO_COMMON_H

#include "diff_compat.h"

#include <sys/stat.h>

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

// Whether `data` equals `size` bytes at `bytes`.
static inline bool data_equals(dispatch_data_t data, const void *bytes, size_t size) {
  if (!data || dispatch_data_get_size(data) != size) return false;
  const void *buffer;
  size_t mapped;
  dispatch_data_t map = dispatch_data_create_map(data, &buffer, &mapped);
  bool same = memcmp(buffer, bytes, size) == 0;
  dispatch_release(map);
  return same;
}

// Whether the file at `fd` holds exactly `size` bytes equal to `bytes`.
static inline bool file_equals(int fd, const void *bytes, size_t size) {
  struct stat info;
  if (fstat(fd, &info) || (size_t)info.st_size != size) return false;
  unsigned char *here = malloc(size + 1);
  bool same = pread(fd, here, size, 0) == (ssize_t)size && memcmp(here, bytes, size) == 0;
  free(here);
  return same;
}

// How many runs of equal bytes `size` bytes at `bytes` make.
static inline int count_runs(const unsigned char *bytes, size_t size) {
  int runs = 0;
  for (size_t i = 0; i < size; i++) runs += i == 0 || bytes[i] != bytes[i - 1];
  return runs;
}

// `size` bytes of `byte`.
static inline dispatch_data_t filled(char byte, size_t size) {
  char *bytes = malloc(size);
  memset(bytes, byte, size);
  return dispatch_data_create(bytes, size, NULL, DISPATCH_DATA_DESTRUCTOR_FREE);
}

// Appends every delivery to *into; signals `step` at done.
static inline dispatch_io_handler_t collecting(dispatch_data_t *into, int *last_error) {
  return (dispatch_io_handler_t)_Block_copy(^(bool done, dispatch_data_t data, int error) {
    if (data) {
      dispatch_data_t joined = dispatch_data_create_concat(*into, data);
      dispatch_release(*into);
      *into = joined;
    }
    if (done) *last_error = error, dispatch_semaphore_signal(step);
  });
}

#endif
