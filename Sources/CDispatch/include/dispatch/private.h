/*
 * LoopDispatch's <dispatch/private.h>: the parts of libdispatch's private interface that
 * programs written for GCD still use. Written from libdispatch's documented behaviour.
 */
#ifndef LOOPDISPATCH_DISPATCH_PRIVATE_H
#define LOOPDISPATCH_DISPATCH_PRIVATE_H

#include <dispatch/dispatch.h>

DISPATCH_C_BEGIN

/* The flag for dispatch_get_global_queue: an overcommit global queue, which starts each item
 * at once on an idle or new thread when every worker is busy (up to 255 threads in all). */
enum {
  DISPATCH_QUEUE_OVERCOMMIT = 0x2ull,
};
#define DISPATCH_QUEUE_FLAGS_MASK (DISPATCH_QUEUE_OVERCOMMIT)

/* Widths for dispatch_queue_set_width: the CPUs the process may use, the physical CPUs, the
 * logical CPUs (any other negative width means the logical CPUs). */
#define DISPATCH_QUEUE_WIDTH_ACTIVE_CPUS -1
#define DISPATCH_QUEUE_WIDTH_MAX_PHYSICAL_CPUS -2
#define DISPATCH_QUEUE_WIDTH_MAX_LOGICAL_CPUS -3

/* Deprecated in libdispatch, still used: how many items of a queue may run at once (0 means
 * 1). On a concurrent queue items already running finish and the new width applies to items
 * started after the call. A queue created serial becomes wide for the work submitted after
 * the call (a barrier-like change; today's libdispatch traps there). The main and global
 * queues ignore it. */
DISPATCH_EXPORT void dispatch_queue_set_width(dispatch_queue_t queue, long width);

DISPATCH_C_END

#endif /* LOOPDISPATCH_DISPATCH_PRIVATE_H */
