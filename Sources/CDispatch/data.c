// dispatch_data's C side: the empty object, the destructor constants, the block forms
// (dispatch_data_create's destructor, dispatch_data_apply's applier), and the object calls
// that must leave the empty object alone. The data objects themselves are Swift
// (Sources/LoopDispatchC/CData.swift, on LoopDispatch's `Bytes`).
#include <dispatch/dispatch.h>

#include <stdbool.h>
#include <stddef.h>

extern void *_Block_copy(const void *block);
extern void _Block_release(const void *block);

// The empty object's handle is the address of this variable; nothing reads its contents.
struct dispatch_data_s {
  void *unused;
};
struct dispatch_data_s _dispatch_data_empty;

// The FREE and MUNMAP destructors are compared by address, never called.
const dispatch_block_t _dispatch_data_destructor_free = ^{
};
const dispatch_block_t _dispatch_data_destructor_munmap = ^{
};

// Implemented in Swift (CData.swift, CObjects.swift). A NULL data handle stands for the
// empty object on this boundary, both ways.
enum { DATA_COPY = 0, DATA_FREE = 1, DATA_MUNMAP = 2, DATA_CUSTOM = 3 };
extern dispatch_data_t _loopdispatch_data_create(
    const void *buffer, size_t size, int kind, dispatch_queue_t queue, void *context,
    dispatch_function_t destructor);
extern size_t _loopdispatch_data_get_size(dispatch_data_t data);
extern dispatch_data_t _loopdispatch_data_create_map(
    dispatch_data_t data, const void **buffer_ptr, size_t *size_ptr);
extern dispatch_data_t _loopdispatch_data_create_concat(dispatch_data_t a, dispatch_data_t b);
extern dispatch_data_t _loopdispatch_data_create_subrange(
    dispatch_data_t data, size_t offset, size_t length);
typedef bool (*data_applier_f)(
    void *context, dispatch_data_t region, size_t offset, const void *buffer, size_t size);
extern bool _loopdispatch_data_apply_f(dispatch_data_t data, void *context, data_applier_f f);
extern dispatch_data_t _loopdispatch_data_copy_region(
    dispatch_data_t data, size_t location, size_t *offset_ptr);
extern void _loopdispatch_retain(dispatch_object_t object);
extern void _loopdispatch_release(dispatch_object_t object);
extern void *_loopdispatch_get_context(dispatch_object_t object);
extern void _loopdispatch_set_context(dispatch_object_t object, void *context);
extern void _loopdispatch_set_finalizer_f(dispatch_object_t object, dispatch_function_t f);

static inline dispatch_data_t to_swift(dispatch_data_t data) {
  return data == dispatch_data_empty ? NULL : data;
}

static inline dispatch_data_t from_swift(dispatch_data_t data) {
  return data == NULL ? dispatch_data_empty : data;
}

static inline int is_empty_data(dispatch_object_t object) {
  return object._ddata == dispatch_data_empty;
}

static void run_destructor_block(void *context) {
  dispatch_block_t block = (dispatch_block_t)context;
  block();
  _Block_release(block);
}

dispatch_data_t dispatch_data_create(
    const void *buffer, size_t size, dispatch_queue_t queue, dispatch_block_t destructor) {
  dispatch_data_t data;
  if (destructor == DISPATCH_DATA_DESTRUCTOR_DEFAULT) {
    data = _loopdispatch_data_create(buffer, size, DATA_COPY, NULL, NULL, NULL);
  } else if (destructor == DISPATCH_DATA_DESTRUCTOR_FREE) {
    data = _loopdispatch_data_create(buffer, size, DATA_FREE, NULL, NULL, NULL);
  } else if (destructor == DISPATCH_DATA_DESTRUCTOR_MUNMAP) {
    data = _loopdispatch_data_create(buffer, size, DATA_MUNMAP, NULL, NULL, NULL);
  } else {
    data = _loopdispatch_data_create(
        buffer, size, DATA_CUSTOM, queue, _Block_copy(destructor), run_destructor_block);
  }
  return from_swift(data);
}

size_t dispatch_data_get_size(dispatch_data_t data) {
  return _loopdispatch_data_get_size(to_swift(data));
}

dispatch_data_t dispatch_data_create_map(
    dispatch_data_t data, const void **buffer_ptr, size_t *size_ptr) {
  return from_swift(_loopdispatch_data_create_map(to_swift(data), buffer_ptr, size_ptr));
}

dispatch_data_t dispatch_data_create_concat(dispatch_data_t data1, dispatch_data_t data2) {
  return from_swift(_loopdispatch_data_create_concat(to_swift(data1), to_swift(data2)));
}

dispatch_data_t dispatch_data_create_subrange(
    dispatch_data_t data, size_t offset, size_t length) {
  return from_swift(_loopdispatch_data_create_subrange(to_swift(data), offset, length));
}

static bool apply_block(
    void *context, dispatch_data_t region, size_t offset, const void *buffer, size_t size) {
  return ((dispatch_data_applier_t)context)(region, offset, buffer, size);
}

bool dispatch_data_apply(dispatch_data_t data, dispatch_data_applier_t applier) {
  // The applier is only called during this call (DISPATCH_NOESCAPE): no copy.
  return _loopdispatch_data_apply_f(to_swift(data), (void *)applier, apply_block);
}

dispatch_data_t dispatch_data_copy_region(
    dispatch_data_t data, size_t location, size_t *offset_ptr) {
  return from_swift(_loopdispatch_data_copy_region(to_swift(data), location, offset_ptr));
}

// ---- Object calls: the empty data object lives as long as the process ----------------------

void dispatch_retain(dispatch_object_t object) {
  if (is_empty_data(object)) return;
  _loopdispatch_retain(object);
}

void dispatch_release(dispatch_object_t object) {
  if (is_empty_data(object)) return;
  _loopdispatch_release(object);
}

void *dispatch_get_context(dispatch_object_t object) {
  if (is_empty_data(object)) return NULL;
  return _loopdispatch_get_context(object);
}

void dispatch_set_context(dispatch_object_t object, void *context) {
  if (is_empty_data(object)) return;
  _loopdispatch_set_context(object, context);
}

void dispatch_set_finalizer_f(dispatch_object_t object, dispatch_function_t finalizer) {
  if (is_empty_data(object)) return;
  _loopdispatch_set_finalizer_f(object, finalizer);
}
