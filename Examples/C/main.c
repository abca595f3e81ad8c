/*
 * GCD concept: the main queue and dispatch_main() (seed article 000: "if you are not writing
 * a Cocoa application you must call dispatch_main to drain the main queue").
 *
 * The main queue is a serial queue whose work runs on the main thread, and only once the
 * program hands that thread over with dispatch_main(), which never returns. Work can be
 * posted to it before (it waits, in order) and after (from any thread: the classic
 * "compute in the background, deliver the result on the main queue"). Here the program ends
 * inside dispatch_main(), with exit(0) from the last main-queue block.
 */
#include "seed.h"

enum { step_count = 6 };

/* The steps in the order they ran. Only touched by main-queue blocks (one at a time, on the
 * main thread) and by main before dispatch_main(). */
static int steps[step_count];
static int step_total;
static bool off_main_thread;  // A main-queue block ran elsewhere.
static bool ran_early;        // A main-queue block ran before dispatch_main().

/* Set just before dispatch_main(): no main-queue block may run earlier. */
static atomic_bool draining;

static void step(int number, const char *what) {
  if (!seed_on_main_thread()) off_main_thread = true;
  if (!atomic_load(&draining)) ran_early = true;
  if (step_total < step_count) steps[step_total] = number;
  step_total++;
  say("step %d: %s (dispatch_main running: %s)", number, what,
      atomic_load(&draining) ? "true" : "false");
}

/* The _f form: a function, and the step number as its context. */
static void posted_step(void *context) {
  step((int)(intptr_t)context, "posted before dispatch_main() with dispatch_async_f");
}

/* The last block: checks the story and ends the program. */
static void finish(void *context) {
  (void)context;
  step(6, "the last block checks the order and calls exit(0)");
  bool in_order = step_total == step_count;
  for (int i = 0; in_order && i < step_count; i++) in_order = steps[i] == i + 1;
  char order[64] = "";
  for (int i = 0; i < step_total && i < step_count; i++) {
    char number[8];
    snprintf(number, sizeof number, i == 0 ? "%d" : " %d", steps[i]);
    strncat(order, number, sizeof order - strlen(order) - 1);
  }
  say("main-queue steps ran in order %s, all on the main thread: %s", order,
      off_main_thread ? "false" : "true");
  if (!in_order || off_main_thread || ran_early) {
    fail("main: FAILED (expected steps 1 to 6, in order, on the main thread, after dispatch_main)");
  }
  exit(0);
}

int main(void) {
  dispatch_queue_t main_queue = dispatch_get_main_queue();
  dispatch_queue_t global = dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0);

  // 1. Before dispatch_main(): posted work waits on the main queue, in order.
  say("posting steps 1 and 2 to the main queue; nothing runs until dispatch_main()");
  dispatch_async(main_queue, ^{
    step(1, "posted before dispatch_main() with dispatch_async");
  });
  dispatch_async_f(main_queue, (void *)(intptr_t)2, posted_step);

  // 2. After dispatch_main() started: a block on the main queue sends work to a global queue,
  //    which posts its result back to the main queue (steps 3 and 4).
  dispatch_async(main_queue, ^{
    step(3, "sends the averaging to a global queue");
    dispatch_async(global, ^{
      long sum = 0;
      for (long i = 1; i <= 1000; i++) sum += i;
      long average = sum / 1000;
      say("averaging 1000 numbers off the main thread: %ld", average);
      dispatch_async(main_queue, ^{
        step(4, "the result arrives back on the main queue");
        say("completion: average = %ld", average);
        // 3. A delayed block on the main queue, then the end.
        dispatch_after(dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_MSEC), main_queue, ^{
          step(5, "dispatch_after on the main queue, 10 ms later");
          dispatch_async_f(main_queue, NULL, finish);
        });
      });
    });
  });

  say("calling dispatch_main(); it never returns");
  fail_after("main", 10);
  atomic_store(&draining, true);
  dispatch_main();
}
