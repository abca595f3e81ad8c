// A correctly synchronised C program, built with -fsanitize=thread against LoopDispatch
// (scripts/test-c-tsan.sh): every hand-off goes through the dispatch API, so ThreadSanitizer
// must report nothing. Its libdispatch interceptors supply the happens-before edges; they read
// LoopDispatch's queues through `dispatch_queue_offsets` (Sources/CDispatch/tsan.c).
#include <dispatch/dispatch.h>

#include <stdio.h>
#include <stdlib.h>

static long plain;  // Written and read only through dispatch hand-offs: never atomically.

static void add_one(void *context) { (*(long *)context)++; }

static void apply_iteration(void *context, size_t index) {
  ((long *)context)[index] = (long)index;
}

int main(void) {
  // async then sync on a serial queue.
  dispatch_queue_t serial = dispatch_queue_create("tsan.serial", NULL);
  for (int i = 0; i < 200; i++) dispatch_async(serial, ^{ plain++; });
  dispatch_async_f(serial, &plain, add_one);
  __block long seen = 0;
  dispatch_sync(serial, ^{ seen = plain; });
  if (seen != 201) return 2;

  // Readers and a barrier writer on a concurrent queue.
  dispatch_queue_t concurrent = dispatch_queue_create("tsan.concurrent", DISPATCH_QUEUE_CONCURRENT);
  long *table = calloc(4, sizeof *table);
  for (int round = 0; round < 50; round++) {
    for (int reader = 0; reader < 4; reader++) {
      dispatch_async(concurrent, ^{ volatile long value = table[reader]; (void)value; });
    }
    dispatch_barrier_async(concurrent, ^{ for (int i = 0; i < 4; i++) table[i]++; });
  }
  dispatch_barrier_sync(concurrent, ^{ seen = table[3]; });
  if (seen != 50) return 3;

  // A group of workers on a global queue, each with its own slot; read after the wait and
  // in a notification.
  dispatch_group_t group = dispatch_group_create();
  long *slots = calloc(64, sizeof *slots);
  for (int i = 0; i < 64; i++) {
    dispatch_group_async(group, dispatch_get_global_queue(0, 0), ^{ slots[i] = i * 2; });
  }
  dispatch_group_wait(group, DISPATCH_TIME_FOREVER);
  long sum = 0;
  for (int i = 0; i < 64; i++) sum += slots[i];
  if (sum != 64 * 63) return 4;
  dispatch_semaphore_t notified = dispatch_semaphore_create(0);
  dispatch_group_async(group, dispatch_get_global_queue(0, 0), ^{ slots[0] = 7; });
  dispatch_group_notify(group, serial, ^{
    slots[1] = slots[0];
    dispatch_semaphore_signal(notified);
  });
  dispatch_semaphore_wait(notified, DISPATCH_TIME_FOREVER);
  if (slots[1] != 7) return 5;

  // A semaphore hand-off, dispatch_after, dispatch_apply, dispatch_once.
  __block long handed = 0;
  dispatch_semaphore_t ready = dispatch_semaphore_create(0);
  dispatch_after(dispatch_time(DISPATCH_TIME_NOW, 1000000), dispatch_get_global_queue(0, 0), ^{
    handed = 42;
    dispatch_semaphore_signal(ready);
  });
  dispatch_semaphore_wait(ready, DISPATCH_TIME_FOREVER);
  if (handed != 42) return 6;
  long *squares = calloc(100, sizeof *squares);
  dispatch_apply_f(100, dispatch_get_global_queue(0, 0), squares, apply_iteration);
  if (squares[99] != 99) return 7;
  static dispatch_once_t once;
  static long initialised;
  for (int i = 0; i < 8; i++) {
    dispatch_group_async(group, dispatch_get_global_queue(0, 0), ^{
      dispatch_once(&once, ^{ initialised = 1; });
      if (initialised != 1) abort();
    });
  }
  dispatch_group_wait(group, DISPATCH_TIME_FOREVER);

  // A data source's handler writes; the program reads after a sync on its queue.
  dispatch_source_t source = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_ADD, 0, 0, serial);
  __block long merged = 0;
  dispatch_source_set_event_handler(source, ^{ merged += (long)dispatch_source_get_data(source); });
  dispatch_activate(source);
  dispatch_source_merge_data(source, 5);
  seen = 0;
  for (int i = 0; i < 100000 && seen == 0; i++) dispatch_sync(serial, ^{ seen = merged; });
  if (seen != 5) return 8;
  dispatch_source_cancel(source);
  dispatch_release(source);

  free(slots);
  free(squares);
  free(table);
  dispatch_release(notified);
  dispatch_release(ready);
  dispatch_release(group);
  dispatch_release(concurrent);
  dispatch_release(serial);
  printf("tsan-clean: ok\n");
  return 0;
}
