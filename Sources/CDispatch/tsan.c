// What ThreadSanitizer's libdispatch interceptors need from the library they wrap. A C client
// built with -fsanitize=thread links clang's TSan runtime, whose interceptors for
// dispatch_async, dispatch_sync, groups, semaphores, sources and the rest add the
// happens-before edges a race detector must see (LoopDispatch itself is not instrumented).
// They reference two kinds of libdispatch symbols:
//
// 1. `dispatch_queue_offsets`: where, inside the object behind a queue (or source) handle,
//    the interceptors read the target queue (to walk the target chain) and the width (1:
//    serial). LoopDispatch's handles are Swift objects (a 16-byte header, then the stored
//    properties in declaration order): `Queue` keeps its target at byte 16 and its width
//    at byte 24, and a C source (`CObjectBase`) keeps its queue at byte 16. The C suite
//    (`test_sanitizer_layout` in Tests/CAPI/capi_tests.c) checks these against the objects.
// 2. `_dispatch_data_destructor_free` and `_munmap`: the identities of
//    DISPATCH_DATA_DESTRUCTOR_FREE and _MUNMAP, which the dispatch_data_create interceptor
//    compares against; defined with the data objects, in data.c.
#include <dispatch/dispatch.h>

#include <stdint.h>

// The layout libdispatch exports for introspection tools (its queue_private.h); fields this
// library does not have are 0.
struct dispatch_queue_offsets_s {
  const uint16_t dqo_version;
  const uint16_t dqo_label;
  const uint16_t dqo_label_size;
  const uint16_t dqo_flags;
  const uint16_t dqo_flags_size;
  const uint16_t dqo_serialnum;
  const uint16_t dqo_serialnum_size;
  const uint16_t dqo_width;
  const uint16_t dqo_width_size;
  const uint16_t dqo_running;
  const uint16_t dqo_running_size;
  const uint16_t dqo_suspend_cnt;
  const uint16_t dqo_suspend_cnt_size;
  const uint16_t dqo_target_queue;
  const uint16_t dqo_target_queue_size;
  const uint16_t dqo_priority;
  const uint16_t dqo_priority_size;
};

DISPATCH_EXPORT const struct dispatch_queue_offsets_s dispatch_queue_offsets;
const struct dispatch_queue_offsets_s dispatch_queue_offsets = {
    .dqo_version = 6,
    .dqo_width = 24,
    .dqo_width_size = 2,
    .dqo_target_queue = 16,
    .dqo_target_queue_size = 8,
};
