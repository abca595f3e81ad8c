// Overcommit global queues (<dispatch/private.h>): an item there starts at once on an idle or
// new thread even while every CPU is busy, so work that waits for its siblings finishes
// (both programs hang on a pool of one thread per CPU).
#include "diff_compat.h"

static void serial_queues_spinning_until_all_started(void) {
  enum { count = 32 };
  static atomic_int started;
  dispatch_queue_t overcommit =
      dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, DISPATCH_QUEUE_OVERCOMMIT);
  dispatch_group_t group = dispatch_group_create();
  dispatch_queue_t queues[count];
  for (int i = 0; i < count; i++) {
    queues[i] = dispatch_queue_create_with_target("diff.overcommit", NULL, overcommit);
    dispatch_group_async(group, queues[i], ^{
      atomic_fetch_add(&started, 1);
      // Busy: no blocking system call while waiting for the others (60 s at most).
      for (long spins = 0; atomic_load(&started) < count && spins < 3000000000L; spins++) {
      }
    });
  }
  long timedOut = dispatch_group_wait(group, dispatch_time(DISPATCH_TIME_NOW, 60 * NSEC_PER_SEC));
  SAY("32 serial queues on the overcommit queue, each spinning until all started: finished",
      "%d", timedOut == 0 && atomic_load(&started) == count);
  for (int i = 0; i < count; i++) dispatch_release(queues[i]);
  dispatch_release(group);
}

static void high_jobs_waiting_for_each_other(void) {
  enum { count = 128 };
  static atomic_int arrived;
  dispatch_queue_t overcommit =
      dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_HIGH, DISPATCH_QUEUE_OVERCOMMIT);
  dispatch_group_t group = dispatch_group_create();
  for (int i = 0; i < count; i++) {
    dispatch_group_async(group, overcommit, ^{
      atomic_fetch_add(&arrived, 1);
      for (int waits = 0; atomic_load(&arrived) < count && waits < 60000; waits++) usleep(1000);
    });
  }
  long timedOut = dispatch_group_wait(group, dispatch_time(DISPATCH_TIME_NOW, 90 * NSEC_PER_SEC));
  SAY("128 high overcommit jobs waiting in usleep until all arrived: finished", "%d",
      timedOut == 0 && atomic_load(&arrived) == count);
  dispatch_release(group);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  SAY("overcommit queue differs from the plain one", "%d",
      dispatch_get_global_queue(0, DISPATCH_QUEUE_OVERCOMMIT) != dispatch_get_global_queue(0, 0));
  serial_queues_spinning_until_all_started();
  high_jobs_waiting_for_each_other();
  return 0;
}
