/*
 * GCD concept: a serial queue held shut by a semaphore (seed article 003; the C version of
 * Sources/Examples/Seeds/Gate.swift).
 *
 * Operations may be requested before the thing they need has finished initialising. Rather
 * than storing them in a side list, submit them all to one serial queue whose *first* item
 * waits on dispatch_semaphore_create(0). Until initialisation signals, that item blocks the
 * queue, so every operation behind it is held, none lost; after the signal they run in
 * submission order. (The waiting item occupies one pool thread while it waits: fine for a
 * short initialisation.)
 */
#include "seed.h"

enum { operation_count = 5 };

/* What the operations record. `order` is only written by operations, which the serial
 * queue runs one at a time; `ran` is read from other threads too, hence atomic. */
struct record {
  int order[operation_count];
  atomic_int ran;
};

/* One operation (the _f form: the context carries the record and the operation's number). */
struct operation {
  struct record *record;
  int number;
};

static void run_operation(void *context) {
  struct operation *operation = context;
  struct record *record = operation->record;
  int slot = atomic_load(&record->ran);
  if (slot < operation_count) record->order[slot] = operation->number;
  atomic_fetch_add(&record->ran, 1);
  say("operation %d runs", operation->number);
  free(operation);
}

int main(void) {
  dispatch_queue_t operations = dispatch_queue_create("operations", DISPATCH_QUEUE_SERIAL);
  dispatch_semaphore_t initialized = dispatch_semaphore_create(0);
  struct record *record = &(struct record){0};

  // 1. The gate: the first item on the serial queue waits for initialisation.
  dispatch_async(operations, ^{
    say("gate: waiting for initialization (the queue is held behind this item)");
    dispatch_semaphore_wait(initialized, DISPATCH_TIME_FOREVER);
    say("gate: initialization signalled; operations run so far: %d", atomic_load(&record->ran));
  });

  // 2. Operations arrive before initialisation is done: queued, not run, not lost.
  for (int number = 1; number <= operation_count; number++) {
    say("queue operation %d", number);
    struct operation *operation = malloc(sizeof *operation);
    if (operation == NULL) fail("out of memory");
    *operation = (struct operation){record, number};
    dispatch_async_f(operations, operation, run_operation);
  }

  // 3. Initialisation finishes later, elsewhere (the delay only spaces the demo out; the
  //    ordering comes from the semaphore and the serial queue). The block holds its own
  //    reference to the semaphore: main may release its one as soon as the signal lands.
  dispatch_retain(initialized);
  dispatch_after(dispatch_time(DISPATCH_TIME_NOW, 30 * NSEC_PER_MSEC),
                 dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0), ^{
                   say("initialization finished (operations run so far: %d); signalling",
                       atomic_load(&record->ran));
                   dispatch_semaphore_signal(initialized);
                   dispatch_release(initialized);
                 });

  dispatch_sync(operations, ^{});  // Returns after every item queued before it.
  int ran = atomic_load(&record->ran);
  char order[64] = "";
  for (int i = 0; i < ran && i < operation_count; i++) {
    char number[16];
    snprintf(number, sizeof number, i == 0 ? "%d" : " %d", record->order[i]);
    strncat(order, number, sizeof order - strlen(order) - 1);
  }
  say("operations ran in order %s", order);
  bool in_order = ran == operation_count;
  for (int i = 0; in_order && i < operation_count; i++) in_order = record->order[i] == i + 1;
  dispatch_release(operations);
  dispatch_release(initialized);
  if (!in_order) fail("gate: FAILED (expected 1 through %d, each once, in order)", operation_count);
  say("all %d held operations ran in submission order, none lost", operation_count);
  return 0;
}
