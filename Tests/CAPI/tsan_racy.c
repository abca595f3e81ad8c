// A racy C program: two items on two queues write one variable, and nothing the race
// detector counts as synchronisation orders the writes (they meet through relaxed atomics,
// which ThreadSanitizer does not treat as a hand-off). Built with -fsanitize=thread against
// LoopDispatch, ThreadSanitizer must report the race: the clean program's silence is then
// the detector's verdict, not a detector that sees nothing. The queues target the overcommit
// queue, so the two items run at the same time on any number of CPUs.
#include <dispatch/dispatch.h>
#include <dispatch/private.h>

#include <stdatomic.h>
#include <stdio.h>

static long shared;
static atomic_int first_wrote, second_wrote;

int main(void) {
  dispatch_queue_t overcommit = dispatch_get_global_queue(0, DISPATCH_QUEUE_OVERCOMMIT);
  dispatch_queue_t first = dispatch_queue_create_with_target("tsan.first", NULL, overcommit);
  dispatch_queue_t second = dispatch_queue_create_with_target("tsan.second", NULL, overcommit);
  dispatch_group_t group = dispatch_group_create();
  dispatch_group_async(group, first, ^{
    shared = 1;
    atomic_store_explicit(&first_wrote, 1, memory_order_relaxed);
    // Stay inside the item until the other write is done (30 s at most).
    for (long spins = 0; spins < 3000000000L; spins++) {
      if (atomic_load_explicit(&second_wrote, memory_order_relaxed)) break;
    }
  });
  dispatch_group_async(group, second, ^{
    for (long spins = 0; spins < 3000000000L; spins++) {
      if (atomic_load_explicit(&first_wrote, memory_order_relaxed)) break;
    }
    shared = 2;
    atomic_store_explicit(&second_wrote, 1, memory_order_relaxed);
  });
  dispatch_group_wait(group, DISPATCH_TIME_FOREVER);
  printf("tsan-racy: %ld\n", shared);
  return 0;
}
