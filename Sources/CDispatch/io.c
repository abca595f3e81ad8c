// dispatch_io's block forms: each block is copied, handed to Swift (Sources/LoopDispatchC/
// CIO.swift) as a function and a context, and released after its last call. Handlers get
// their data as a handle valid for the call; a NULL handle from Swift means the empty object
// unless `data_is_null` says the call carries no data at all.
#include <dispatch/dispatch.h>

#include <stdbool.h>
#include <stddef.h>

extern void *_Block_copy(const void *block);
extern void _Block_release(const void *block);

typedef void (*cleanup_f)(void *context, int error);
typedef void (*io_f)(void *context, bool done, dispatch_data_t data, int error, bool data_is_null);
typedef void (*once_f)(void *context, dispatch_data_t data, int error, bool data_is_null);
typedef void (*release_f)(void *context);

extern dispatch_io_t _loopdispatch_io_create(
    dispatch_io_type_t type, dispatch_fd_t fd, dispatch_queue_t queue, void *context,
    cleanup_f cleanup);
extern dispatch_io_t _loopdispatch_io_create_with_path(
    dispatch_io_type_t type, const char *path, int oflag, mode_t mode, dispatch_queue_t queue,
    void *context, cleanup_f cleanup);
extern dispatch_io_t _loopdispatch_io_create_with_io(
    dispatch_io_type_t type, dispatch_io_t io, dispatch_queue_t queue, void *context,
    cleanup_f cleanup);
extern void _loopdispatch_io_read(
    dispatch_io_t channel, off_t offset, size_t length, dispatch_queue_t queue, void *context,
    io_f call, release_f release);
extern void _loopdispatch_io_write(
    dispatch_io_t channel, off_t offset, dispatch_data_t data, dispatch_queue_t queue,
    void *context, io_f call, release_f release);
extern void _loopdispatch_io_barrier_f(
    dispatch_io_t channel, void *context, dispatch_function_t barrier);
extern void _loopdispatch_read(
    dispatch_fd_t fd, size_t length, dispatch_queue_t queue, void *context, once_f call);
extern void _loopdispatch_write(
    dispatch_fd_t fd, dispatch_data_t data, dispatch_queue_t queue, void *context, once_f call);

static inline dispatch_data_t data_for_c(dispatch_data_t data, bool data_is_null) {
  if (data_is_null) return NULL;
  return data == NULL ? dispatch_data_empty : data;
}

static inline dispatch_data_t data_for_swift(dispatch_data_t data) {
  return data == dispatch_data_empty ? NULL : data;
}

static void call_cleanup(void *context, int error) {
  void (^block)(int) = (void (^)(int))context;
  block(error);
  _Block_release(block);
}

static void call_io_handler(
    void *context, bool done, dispatch_data_t data, int error, bool data_is_null) {
  ((dispatch_io_handler_t)context)(done, data_for_c(data, data_is_null), error);
}

static void call_once_handler(void *context, dispatch_data_t data, int error, bool data_is_null) {
  void (^block)(dispatch_data_t, int) = (void (^)(dispatch_data_t, int))context;
  block(data_for_c(data, data_is_null), error);
  _Block_release(block);
}

static void release_block(void *context) { _Block_release(context); }

static void run_copied_block(void *context) {
  dispatch_block_t block = (dispatch_block_t)context;
  block();
  _Block_release(block);
}

// libdispatch returns NULL for a type other than STREAM and RANDOM, and for a relative path;
// the cleanup handler is then never called (nor copied).
static inline bool known_type(dispatch_io_type_t type) {
  return type == DISPATCH_IO_STREAM || type == DISPATCH_IO_RANDOM;
}

dispatch_io_t dispatch_io_create(dispatch_io_type_t type, dispatch_fd_t fd,
                                 dispatch_queue_t queue, void (^cleanup_handler)(int error)) {
  if (!known_type(type)) return NULL;
  return _loopdispatch_io_create(
      type, fd, queue, cleanup_handler ? _Block_copy(cleanup_handler) : NULL,
      cleanup_handler ? call_cleanup : NULL);
}

dispatch_io_t dispatch_io_create_with_path(dispatch_io_type_t type, const char *path, int oflag,
                                           mode_t mode, dispatch_queue_t queue,
                                           void (^cleanup_handler)(int error)) {
  if (!known_type(type) || path == NULL || path[0] != '/') return NULL;
  return _loopdispatch_io_create_with_path(
      type, path, oflag, mode, queue, cleanup_handler ? _Block_copy(cleanup_handler) : NULL,
      cleanup_handler ? call_cleanup : NULL);
}

dispatch_io_t dispatch_io_create_with_io(dispatch_io_type_t type, dispatch_io_t io,
                                         dispatch_queue_t queue,
                                         void (^cleanup_handler)(int error)) {
  if (!known_type(type)) return NULL;
  return _loopdispatch_io_create_with_io(
      type, io, queue, cleanup_handler ? _Block_copy(cleanup_handler) : NULL,
      cleanup_handler ? call_cleanup : NULL);
}

void dispatch_io_read(dispatch_io_t channel, off_t offset, size_t length,
                      dispatch_queue_t queue, dispatch_io_handler_t io_handler) {
  _loopdispatch_io_read(channel, offset, length, queue, _Block_copy(io_handler),
                        call_io_handler, release_block);
}

void dispatch_io_write(dispatch_io_t channel, off_t offset, dispatch_data_t data,
                       dispatch_queue_t queue, dispatch_io_handler_t io_handler) {
  _loopdispatch_io_write(channel, offset, data_for_swift(data), queue, _Block_copy(io_handler),
                         call_io_handler, release_block);
}

void dispatch_io_barrier(dispatch_io_t channel, dispatch_block_t barrier) {
  _loopdispatch_io_barrier_f(channel, _Block_copy(barrier), run_copied_block);
}

void dispatch_read(dispatch_fd_t fd, size_t length, dispatch_queue_t queue,
                   void (^handler)(dispatch_data_t data, int error)) {
  _loopdispatch_read(fd, length, queue, _Block_copy(handler), call_once_handler);
}

void dispatch_write(dispatch_fd_t fd, dispatch_data_t data, dispatch_queue_t queue,
                    void (^handler)(dispatch_data_t data, int error)) {
  _loopdispatch_write(fd, data_for_swift(data), queue, _Block_copy(handler), call_once_handler);
}
