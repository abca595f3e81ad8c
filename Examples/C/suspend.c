/*
 * GCD concept: suspending and resuming a queue (seed article 000; the C version of
 * Sources/Examples/Seeds/Suspend.swift).
 *
 * dispatch_suspend stops a queue from *starting* items; it never interrupts one that is
 * running, so it takes effect between items. It is counted: every dispatch_suspend needs its
 * own dispatch_resume, and the queue runs again only when the count is back to zero. Queued
 * items wait, in order.
 */
#include "seed.h"

/* The items that have run, in order. Protected by: lock. */
struct ran {
  pthread_mutex_t lock;
  int items[8];
  int count;
};

static void record(struct ran *ran, int number) {
  pthread_mutex_lock(&ran->lock);
  if (ran->count < 8) ran->items[ran->count++] = number;
  pthread_mutex_unlock(&ran->lock);
}

/* "[1, 2, 3]" */
static void describe(struct ran *ran, char *text, size_t size) {
  pthread_mutex_lock(&ran->lock);
  size_t used = (size_t)snprintf(text, size, "[");
  for (int i = 0; i < ran->count && used < size; i++) {
    used += (size_t)snprintf(text + used, size - used, i == 0 ? "%d" : ", %d", ran->items[i]);
  }
  if (used < size) snprintf(text + used, size - used, "]");
  pthread_mutex_unlock(&ran->lock);
}

static bool ran_exactly(struct ran *ran, const int *expected, int count) {
  pthread_mutex_lock(&ran->lock);
  bool same = ran->count == count;
  for (int i = 0; same && i < count; i++) same = ran->items[i] == expected[i];
  pthread_mutex_unlock(&ran->lock);
  return same;
}

int main(void) {
  dispatch_queue_t queue = dispatch_queue_create("photos", DISPATCH_QUEUE_SERIAL);
  struct ran *ran = &(struct ran){.lock = PTHREAD_MUTEX_INITIALIZER};
  dispatch_semaphore_t first_done = dispatch_semaphore_create(0);
  dispatch_semaphore_t second_started = dispatch_semaphore_create(0);
  char text[64];

  // 1. Item 1 suspends its own queue: it still runs to the end; item 2 must wait.
  dispatch_async(queue, ^{
    say("item 1 runs and calls dispatch_suspend(queue)");
    dispatch_suspend(queue);
    record(ran, 1);
    say("item 1 finishes (a suspend never interrupts a running item)");
    dispatch_semaphore_signal(first_done);
  });
  for (int number = 2; number <= 3; number++) {
    dispatch_async(queue, ^{
      if (number == 2) dispatch_semaphore_signal(second_started);
      record(ran, number);
      say("item %d runs", number);
    });
  }
  dispatch_semaphore_wait(first_done, DISPATCH_TIME_FOREVER);

  // 2. While suspended nothing starts. The timed wait is the demonstration, not the
  //    synchronisation: item 2 cannot start, however long we wait.
  intptr_t while_suspended =
      dispatch_semaphore_wait(second_started, dispatch_time(DISPATCH_TIME_NOW, 20 * NSEC_PER_MSEC));
  describe(ran, text, sizeof text);
  say("20 ms later: item 2 started? %s; items run: %s", while_suspended == 0 ? "true" : "false",
      text);

  // 3. Counted: suspended twice, one resume is not enough.
  dispatch_suspend(queue);
  dispatch_resume(queue);
  intptr_t after_one_resume =
      dispatch_semaphore_wait(second_started, dispatch_time(DISPATCH_TIME_NOW, 20 * NSEC_PER_MSEC));
  say("suspended twice, resumed once: item 2 started? %s",
      after_one_resume == 0 ? "true" : "false");

  // 4. The last resume lets the held items run, in order.
  say("resume");
  dispatch_resume(queue);
  dispatch_sync(queue, ^{});  // Returns after every item queued before it.
  describe(ran, text, sizeof text);
  say("items run: %s", text);

  dispatch_release(queue);
  dispatch_release(first_done);
  dispatch_release(second_started);
  if (while_suspended == 0 || after_one_resume == 0 || !ran_exactly(ran, (int[]){1, 2, 3}, 3)) {
    fail("suspend: FAILED");
  }
  return 0;
}
