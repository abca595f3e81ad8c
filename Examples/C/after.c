/*
 * GCD concept: dispatch_after (seed article 001; the C version of
 * Sources/Examples/Seeds/After.swift).
 *
 * dispatch_after is a delayed dispatch_async: the block is submitted to the queue no earlier
 * than the deadline (it may be a little late, never early). You cannot make it run sooner.
 * The reminder is a dispatch block object (dispatch_block_create): dispatch_block_cancel
 * stops it from running when its time comes, and dispatch_block_testcancel reports it. All
 * the main-queue blocks run one at a time on the main thread, so the flags need no lock.
 *
 * The program ends inside dispatch_main(): the last block checks the story and exits.
 */
#include "seed.h"

/* Only touched by main-queue blocks (one at a time, on the main thread), after main has
 * handed them over. */
static bool reminder_ran;
static dispatch_block_t reminder;
static long prompt_at = -1;
/* Written by the global queue's refresh, read by the last main-queue block. */
static atomic_long refresh_at = -1;

static uint64_t start;

static long elapsed_ms(void) { return (long)((seed_now() - start) / NSEC_PER_MSEC); }

static dispatch_time_t in_ms(int64_t milliseconds) {
  return dispatch_time(DISPATCH_TIME_NOW, milliseconds * (int64_t)NSEC_PER_MSEC);
}

/* The prompt, in the _f form (a function with no context). */
static void show_prompt(void *context) {
  (void)context;
  prompt_at = elapsed_ms();
  say("prompt \"Tap + to add a photo\" at %ld ms (asked for 40 ms: never early)", prompt_at);
}

int main(void) {
  start = seed_now();  // Before any deadline is computed: elapsed times are upper bounds.
  dispatch_queue_t main_queue = dispatch_get_main_queue();

  say("schedule: a tap at 20 ms, a refresh at 30 ms, a prompt at 40 ms, a reminder at 80 ms");
  reminder = dispatch_block_create(0, ^{
    reminder_ran = true;
    say("reminder: still there? (this should have been cancelled)");
  });
  dispatch_after(in_ms(80), main_queue, reminder);
  dispatch_after(in_ms(20), main_queue, ^{
    say("user tapped at %ld ms: cancel the reminder", elapsed_ms());
    dispatch_block_cancel(reminder);
  });
  dispatch_after(in_ms(30), dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0), ^{
    long now = elapsed_ms();
    atomic_store(&refresh_at, now);
    say("background refresh at %ld ms (asked for 30 ms)", now);
  });
  dispatch_after_f(in_ms(40), main_queue, NULL, show_prompt);
  // Keep the loop running past the reminder's deadline, to show it never fires.
  dispatch_after(in_ms(100), main_queue, ^{
    long refresh = atomic_load(&refresh_at);
    bool reminder_cancelled = dispatch_block_testcancel(reminder) != 0;
    say("reminder cancelled: %s, ran: %s", reminder_cancelled ? "true" : "false",
        reminder_ran ? "true" : "false");
    if (prompt_at < 40 || refresh < 30 || !reminder_cancelled || reminder_ran) {
      fail("after: FAILED (prompt at %ld ms, refresh at %ld ms)", prompt_at, refresh);
    }
    exit(0);
  });
  fail_after("after", 10);
  dispatch_main();
}
