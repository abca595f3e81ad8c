// Dispatch sources as object.h and source.h document them: every block of an inactive or
// suspended source waits (the cancel handler included), a registration handler set late runs
// at once, the last release of an active source stops it, wall-clock timers count missed
// fires, an `_f` handler gets the context of when it was set, several sources share a
// descriptor, and a source's target may be set before activation.
#include "diff_compat.h"

#include <fcntl.h>
#include <time.h>

static void cancel_handler_waits(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.cancel-handler", NULL);
  __block atomic_int cancelled = 0;
  dispatch_source_t inactive = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_ADD, 0, 0, queue);
  dispatch_source_set_cancel_handler(inactive, ^{ atomic_fetch_add(&cancelled, 1); });
  dispatch_source_cancel(inactive);
  usleep(20000);
  dispatch_sync(queue, ^{});
  SAY("cancel handler of an inactive source before activation", "%d", atomic_load(&cancelled));
  dispatch_activate(inactive);
  WAIT_UNTIL(atomic_load(&cancelled) == 1);
  SAY("cancel handler after activation", "%d", atomic_load(&cancelled));
  dispatch_release(inactive);

  dispatch_source_t suspended = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_ADD, 0, 0, queue);
  dispatch_source_set_cancel_handler(suspended, ^{ atomic_fetch_add(&cancelled, 1); });
  dispatch_activate(suspended);
  dispatch_suspend(suspended);
  dispatch_source_cancel(suspended);
  usleep(20000);
  dispatch_sync(queue, ^{});
  SAY("cancel handler of a suspended source before resume", "%d", atomic_load(&cancelled) - 1);
  dispatch_resume(suspended);
  WAIT_UNTIL(atomic_load(&cancelled) == 2);
  SAY("cancel handler after resume", "%d", atomic_load(&cancelled) - 1);
  dispatch_release(suspended);
  dispatch_release(queue);
}

static void late_registration_handler(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.registration", NULL);
  __block atomic_int registered = 0;
  dispatch_source_t source = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_OR, 0, 0, queue);
  dispatch_source_set_event_handler(source, ^{});
  dispatch_activate(source);
  dispatch_sync(queue, ^{});
  dispatch_source_set_registration_handler(source, ^{ atomic_fetch_add(&registered, 1); });
  WAIT_UNTIL(atomic_load(&registered) == 1);
  dispatch_sync(queue, ^{});
  SAY("registration handler set after registration ran", "%d", atomic_load(&registered));
  dispatch_source_cancel(source);
  dispatch_release(source);
  dispatch_release(queue);
}

static void release_stops_an_active_source(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.release", NULL);
  __block atomic_int fires = 0;
  dispatch_source_t timer = dispatch_source_create(DISPATCH_SOURCE_TYPE_TIMER, 0, 0, queue);
  dispatch_source_set_event_handler(timer, ^{ atomic_fetch_add(&fires, 1); });
  dispatch_source_set_timer(timer, dispatch_time(DISPATCH_TIME_NOW, 0), 5 * NSEC_PER_MSEC, 0);
  dispatch_activate(timer);
  WAIT_UNTIL(atomic_load(&fires) >= 2);
  dispatch_release(timer);
  usleep(20000);
  dispatch_sync(queue, ^{});
  int after_release = atomic_load(&fires);
  usleep(100000);
  dispatch_sync(queue, ^{});
  SAY("fires in the 100 ms after the last release settled", "%d", atomic_load(&fires) - after_release);
  dispatch_release(queue);
}

static void wall_clock_timer_counts_missed_fires(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.wall", NULL);
  __block atomic_ulong first = 0;
  dispatch_source_t timer = dispatch_source_create(DISPATCH_SOURCE_TYPE_TIMER, 0, 0, queue);
  dispatch_source_set_event_handler(timer, ^{
    unsigned long expected = 0;
    atomic_compare_exchange_strong(&first, &expected, dispatch_source_get_data(timer));
  });
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  // Started 1.05 s ago, every 100 ms: 11 fires are due at once.
  dispatch_source_set_timer(timer, dispatch_walltime(&now, -1050 * (int64_t)NSEC_PER_MSEC),
                            100 * NSEC_PER_MSEC, 0);
  dispatch_activate(timer);
  WAIT_UNTIL(atomic_load(&first) != 0);
  SAY("first data of a wall-clock timer started 1.05 s ago every 100 ms", "%lu",
      (unsigned long)atomic_load(&first));
  dispatch_source_cancel(timer);
  dispatch_release(timer);
  dispatch_release(queue);
}

static atomic_long handler_context;

static void function_handler(void *context) { atomic_store(&handler_context, (long)context); }

static void function_handler_context(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.context", NULL);
  dispatch_source_t source = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_ADD, 0, 0, queue);
  dispatch_set_context(source, (void *)1);
  dispatch_source_set_event_handler_f(source, function_handler);
  dispatch_set_context(source, (void *)2);
  dispatch_activate(source);
  dispatch_source_merge_data(source, 1);
  WAIT_UNTIL(atomic_load(&handler_context) != 0);
  SAY("context an _f handler received (1 when set, 2 later)", "%ld", atomic_load(&handler_context));
  dispatch_source_cancel(source);
  dispatch_release(source);
  dispatch_release(queue);
}

static void several_sources_per_descriptor(void) {
  int fds[2];
  if (pipe(fds) != 0) abort();
  dispatch_queue_t serial = dispatch_queue_create("diff.fd-serial", NULL);
  dispatch_queue_t concurrent = dispatch_queue_create("diff.fd-concurrent", DISPATCH_QUEUE_CONCURRENT);
  dispatch_queue_t queues[3] = {serial, concurrent, dispatch_get_global_queue(0, 0)};
  static atomic_int fired[3];
  dispatch_source_t sources[3];
  for (int i = 0; i < 3; i++) {
    sources[i] = dispatch_source_create(DISPATCH_SOURCE_TYPE_READ, (uintptr_t)fds[0], 0, queues[i]);
    dispatch_source_set_event_handler(sources[i], ^{ atomic_fetch_add(&fired[i], 1); });
    dispatch_activate(sources[i]);
  }
  if (write(fds[1], "x", 1) != 1) abort();
  WAIT_UNTIL(atomic_load(&fired[0]) > 0 && atomic_load(&fired[1]) > 0 && atomic_load(&fired[2]) > 0);
  SAY("three read sources on one pipe all fired", "%d",
      atomic_load(&fired[0]) > 0 && atomic_load(&fired[1]) > 0 && atomic_load(&fired[2]) > 0);
  dispatch_source_cancel(sources[0]);
  char byte;
  if (read(fds[0], &byte, 1) != 1) abort();
  usleep(20000);
  int before[3] = {atomic_load(&fired[0]), atomic_load(&fired[1]), atomic_load(&fired[2])};
  if (write(fds[1], "y", 1) != 1) abort();
  WAIT_UNTIL(atomic_load(&fired[1]) > before[1] && atomic_load(&fired[2]) > before[2]);
  SAY("after cancelling one, the others still fire", "%d",
      atomic_load(&fired[1]) > before[1] && atomic_load(&fired[2]) > before[2]);
  for (int i = 0; i < 3; i++) {
    if (i > 0) dispatch_source_cancel(sources[i]);
    dispatch_release(sources[i]);
  }
  dispatch_barrier_sync(concurrent, ^{});
  dispatch_sync(serial, ^{});
  dispatch_release(serial);
  dispatch_release(concurrent);
  close(fds[0]);
  close(fds[1]);
}

static int target_key;

static void target_before_activation(void) {
  dispatch_queue_t first = dispatch_queue_create("diff.first", NULL);
  dispatch_queue_t second = dispatch_queue_create("diff.second", NULL);
  dispatch_queue_set_specific(second, &target_key, (void *)2, NULL);
  __block atomic_long seen = 0;
  dispatch_source_t source = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_ADD, 0, 0, first);
  dispatch_source_set_event_handler(source, ^{ atomic_store(&seen, (long)dispatch_get_specific(&target_key)); });
  dispatch_set_target_queue(source, second);
  dispatch_activate(source);
  dispatch_source_merge_data(source, 1);
  WAIT_UNTIL(atomic_load(&seen) != 0);
  SAY("handler of a source retargeted before activation ran on", "queue %ld", atomic_load(&seen));
  dispatch_source_cancel(source);
  dispatch_release(source);
  dispatch_sync(second, ^{});
  dispatch_release(first);
  dispatch_release(second);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  cancel_handler_waits();
  late_registration_handler();
  release_stops_an_active_source();
  wall_clock_timer_counts_missed_fires();
  function_handler_context();
  several_sources_per_descriptor();
  target_before_activation();
  return 0;
}
