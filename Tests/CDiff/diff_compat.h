// What the differential programs share: <dispatch/dispatch.h> from whichever library they are
// built against, the private interface (LoopDispatch ships <dispatch/private.h>; the
// toolchain's libdispatch exports the functions but ships no private header), and a CHECK
// that prints one line per check, so the two runs' outputs can be compared line by line.
#ifndef DIFF_COMPAT_H
#define DIFF_COMPAT_H

#include <dispatch/dispatch.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef LOOPDISPATCH_API_VERSION
#include <dispatch/private.h>
#else
enum { DISPATCH_QUEUE_OVERCOMMIT = 0x2 };
#define DISPATCH_QUEUE_WIDTH_ACTIVE_CPUS -1
#define DISPATCH_QUEUE_WIDTH_MAX_PHYSICAL_CPUS -2
#define DISPATCH_QUEUE_WIDTH_MAX_LOGICAL_CPUS -3
extern void dispatch_queue_set_width(dispatch_queue_t queue, long width);
#endif

// BlocksRuntime's release (libdispatch's Linux header does not declare it).
extern void _Block_release(const void *block);

// One line per fact: the name and the observed value. Both libraries must print the same.
#define SAY(name, format, ...) printf("%s: " format "\n", name, __VA_ARGS__)

// Waits (at most ~10 s) until `condition` holds, polling; for facts that arrive on another
// thread. Never a synchronisation by itself: the program prints what it then sees.
#define WAIT_UNTIL(condition)                                    \
  do {                                                           \
    for (int spins_ = 0; spins_ < 10000 && !(condition); spins_++) usleep(1000); \
  } while (0)

#endif
