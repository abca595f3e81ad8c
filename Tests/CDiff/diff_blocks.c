// Dispatch block objects as block.h documents them: run any number of times, cancel is not a
// completion, a block released without running still notifies, and DISPATCH_BLOCK_BARRIER
// acts as a barrier however the block reaches a concurrent queue.
#include "diff_compat.h"

static dispatch_time_t in_ms(long milliseconds) {
  return dispatch_time(DISPATCH_TIME_NOW, milliseconds * (int64_t)NSEC_PER_MSEC);
}

static void runs_again(void) {
  __block atomic_int runs = 0;
  dispatch_queue_t queue = dispatch_queue_create("diff.again", NULL);
  dispatch_block_t block = dispatch_block_create(0, ^{ atomic_fetch_add(&runs, 1); });
  dispatch_async(queue, block);
  dispatch_async(queue, block);
  dispatch_sync(queue, block);
  block();
  SAY("a block object submitted twice, synced once and called once ran", "%d times",
      atomic_load(&runs));
  // (Waiting on it now is a client bug in both libraries: it ran more than once.)
  _Block_release(block);

  __block atomic_int fires = 0;
  dispatch_source_t timer = dispatch_source_create(DISPATCH_SOURCE_TYPE_TIMER, 0, 0, queue);
  dispatch_block_t handler = dispatch_block_create(0, ^{ atomic_fetch_add(&fires, 1); });
  dispatch_source_set_event_handler(timer, handler);
  dispatch_source_set_timer(timer, in_ms(1), 2 * NSEC_PER_MSEC, 0);
  dispatch_activate(timer);
  WAIT_UNTIL(atomic_load(&fires) >= 3);
  SAY("a block object as a timer's handler ran at least 3 times", "%d", atomic_load(&fires) >= 3);
  dispatch_source_cancel(timer);
  dispatch_release(timer);
  _Block_release(handler);
  dispatch_sync(queue, ^{});
  dispatch_release(queue);
}

static void cancel_is_not_completion(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.cancel", NULL);
  __block atomic_int ran = 0, notified = 0;
  dispatch_block_t block = dispatch_block_create(0, ^{ atomic_fetch_add(&ran, 1); });
  dispatch_block_notify(block, queue, ^{ atomic_fetch_add(&notified, 1); });
  dispatch_block_cancel(block);
  SAY("testcancel", "%ld", (long)dispatch_block_testcancel(block));
  SAY("wait on a cancelled, unsubmitted block times out", "%d",
      dispatch_block_wait(block, in_ms(20)) != 0);
  dispatch_sync(queue, ^{});
  SAY("notifications before the cancelled block was submitted", "%d", atomic_load(&notified));
  dispatch_async(queue, block);
  SAY("wait once submitted", "%ld", (long)dispatch_block_wait(block, in_ms(10000)));
  dispatch_sync(queue, ^{});
  SAY("cancelled work ran", "%d", atomic_load(&ran));
  SAY("notifications after it was dequeued", "%d", atomic_load(&notified));
  _Block_release(block);
  dispatch_release(queue);
}

static void released_without_running(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.released", NULL);
  __block atomic_int notified = 0;
  dispatch_block_t block = dispatch_block_create(0, ^{});
  dispatch_block_notify(block, queue, ^{ atomic_fetch_add(&notified, 1); });
  _Block_release(block);
  WAIT_UNTIL(atomic_load(&notified) == 1);
  dispatch_sync(queue, ^{});
  SAY("notifications of a block released without running", "%d", atomic_load(&notified));
  dispatch_release(queue);
}

// Runs `submit(barrier)` while a reader holds the concurrent queue; prints how many readers
// the barrier saw (0: it ran alone).
static void barrier_through(const char *how, dispatch_queue_t queue,
                            void (^submit)(dispatch_block_t)) {
  __block atomic_int readers = 0, saw = -1;
  dispatch_semaphore_t in = dispatch_semaphore_create(0);
  dispatch_async(queue, ^{
    atomic_fetch_add(&readers, 1);
    dispatch_semaphore_signal(in);
    usleep(50000);  // Long enough for a non-barrier to start beside it.
    atomic_fetch_sub(&readers, 1);
  });
  dispatch_semaphore_wait(in, DISPATCH_TIME_FOREVER);
  dispatch_block_t barrier =
      dispatch_block_create(DISPATCH_BLOCK_BARRIER, ^{ atomic_store(&saw, atomic_load(&readers)); });
  submit(barrier);
  dispatch_block_wait(barrier, DISPATCH_TIME_FOREVER);
  printf("barrier block through %s saw %d readers\n", how, atomic_load(&saw));
  _Block_release(barrier);
  dispatch_barrier_sync(queue, ^{});
  dispatch_release(in);
}

static void barriers(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.barriers", DISPATCH_QUEUE_CONCURRENT);
  dispatch_group_t group = dispatch_group_create();
  barrier_through("dispatch_async", queue, ^(dispatch_block_t b) { dispatch_async(queue, b); });
  barrier_through("dispatch_group_async", queue,
                  ^(dispatch_block_t b) { dispatch_group_async(group, queue, b); });
  barrier_through("dispatch_after", queue,
                  ^(dispatch_block_t b) { dispatch_after(in_ms(1), queue, b); });
  SAY("group wait", "%ld", (long)dispatch_group_wait(group, DISPATCH_TIME_FOREVER));
  dispatch_release(group);
  dispatch_release(queue);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  runs_again();
  cancel_is_not_completion();
  released_without_running();
  barriers();
  return 0;
}
