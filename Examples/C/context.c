/*
 * GCD concept: a queue's context data and finalizer (seed article 000,
 * dispatch_set_context and dispatch_set_finalizer_f; the C version of
 * Sources/Examples/Seeds/Context.swift).
 *
 * A queue can carry one pointer, its context, that the work running on it reads with
 * dispatch_get_context. The finalizer receives that pointer when the queue goes away: after
 * the last reference is released *and* every item submitted before has run, since queued
 * work keeps its queue alive. That is the place to free what the context points to.
 */
#include "seed.h"

/* What the queue's work shares: a name and a request count. Freed by the finalizer. */
struct connection_state {
  char name[32];
  atomic_int requests;
};

/* What happened, in order. Protected by: lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char events[8][16];
static int event_count;

static void note(const char *event) {
  pthread_mutex_lock(&lock);
  if (event_count < 8) snprintf(events[event_count++], sizeof events[0], "%s", event);
  pthread_mutex_unlock(&lock);
}

/* Signalled by the finalizer. Lives as long as the process. */
static dispatch_semaphore_t finalized;

/* The queue's finalizer: gets the context, once, after the last item. */
static void finalize_connection(void *context) {
  struct connection_state *state = context;
  say("finalizer: %s served %d requests", state ? state->name : "?",
      state ? atomic_load(&state->requests) : 0);
  note("finalizer");
  free(state);
  dispatch_semaphore_signal(finalized);
}

int main(void) {
  finalized = dispatch_semaphore_create(0);
  dispatch_semaphore_t gate = dispatch_semaphore_create(0);

  dispatch_queue_t queue = dispatch_queue_create("connection", DISPATCH_QUEUE_SERIAL);
  struct connection_state *state = calloc(1, sizeof *state);
  if (state == NULL) fail("out of memory");
  snprintf(state->name, sizeof state->name, "client 42");
  dispatch_set_context(queue, state);
  dispatch_set_finalizer_f(queue, finalize_connection);
  for (int number = 1; number <= 3; number++) {
    // The block uses `queue` after main has released it: queued work keeps its queue alive
    // until it has run, so the handle is valid inside the block.
    dispatch_async(queue, ^{
      if (number == 1) dispatch_semaphore_wait(gate, DISPATCH_TIME_FOREVER);  // Hold the queue.
      struct connection_state *shared = dispatch_get_context(queue);
      int count = shared ? atomic_fetch_add(&shared->requests, 1) + 1 : 0;
      say("item %d: context is %s, request %d", number, shared ? shared->name : "NULL", count);
      char event[16];
      snprintf(event, sizeof event, "item %d", number);
      note(event);
    });
  }
  say("3 items queued; releasing the last reference to the queue");
  dispatch_release(queue);
  say("the queue is released by its owner while its items are still queued");
  dispatch_semaphore_signal(gate);

  intptr_t result =
      dispatch_semaphore_wait(finalized, dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_SEC));
  pthread_mutex_lock(&lock);
  char order[128] = "";
  for (int i = 0; i < event_count; i++) {
    if (i > 0) strncat(order, ", ", sizeof order - strlen(order) - 1);
    strncat(order, events[i], sizeof order - strlen(order) - 1);
  }
  bool expected = event_count == 4 && strcmp(order, "item 1, item 2, item 3, finalizer") == 0;
  pthread_mutex_unlock(&lock);
  say("order: %s", order);
  // `gate` was last used by item 1, which has run. `finalized` stays for the process: the
  // finalizer's thread may still be returning from its signal.
  dispatch_release(gate);
  if (result != 0 || !expected) {
    fail("context: FAILED (the finalizer must run once, after the last item)");
  }
  return 0;
}
