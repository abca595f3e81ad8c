// Queues, specifics, contexts and finalizers, widths, argument checks: what a C program
// written for libdispatch observes. scripts/test-c-diff.sh builds this against libdispatch
// and against LoopDispatch and requires the same output.
#include "diff_compat.h"

#include <pthread.h>

static int parent_key, main_key, target_key;
static atomic_int finalized_with_null, finalized_with_context, group_finalized_on_target;

static void finalizer(void *context) {
  if (context == NULL) {
    atomic_fetch_add(&finalized_with_null, 1);
  } else {
    atomic_fetch_add(&finalized_with_context, 1);
  }
}

static void group_finalizer(void *context) {
  (void)context;
  if (dispatch_get_specific(&target_key) == (void *)7) {
    atomic_fetch_add(&group_finalized_on_target, 1);
  }
}

static void argument_checks(void) {
  SAY("global queue, flags 1", "%s", dispatch_get_global_queue(0, 1) ? "queue" : "NULL");
  SAY("global queue, overcommit flag", "%s",
      dispatch_get_global_queue(0, DISPATCH_QUEUE_OVERCOMMIT) ? "queue" : "NULL");
  long identifiers[] = {2, 0, -2, INT16_MIN, 0x21, 0x19, 0x15, 0x11, 0x09, 0x05, 1, -1, 3, 0x22};
  for (size_t i = 0; i < sizeof identifiers / sizeof identifiers[0]; i++) {
    printf("global queue %ld: %s\n", identifiers[i],
           dispatch_get_global_queue(identifiers[i], 0) ? "queue" : "NULL");
  }
  SAY("QoS 0x15 is the default global queue", "%d",
      dispatch_get_global_queue(0x15, 0) == dispatch_get_global_queue(0, 0));
  for (unsigned long flag = 1; flag <= 0x200; flag <<= 1) {
    dispatch_block_t block = dispatch_block_create(flag, ^{});
    printf("block flag %#lx: %s\n", flag, block ? "block" : "NULL");
    if (block) _Block_release(block);
  }
  int relatives[] = {0, -1, -15, -16, 1};
  for (int i = 0; i < 5; i++) {
    dispatch_block_t block = dispatch_block_create_with_qos_class(0, 0x15, relatives[i], ^{});
    printf("block relative priority %d: %s\n", relatives[i], block ? "block" : "NULL");
    if (block) _Block_release(block);
  }
  dispatch_block_t unknown = dispatch_block_create_with_qos_class(0, 0x22, 0, ^{});
  SAY("block QoS 0x22", "%s", unknown ? "block" : "NULL");
  if (unknown) _Block_release(unknown);
  SAY("attribute with relative priority 1 unchanged", "%d",
      dispatch_queue_attr_make_with_qos_class(DISPATCH_QUEUE_CONCURRENT, 0x15, 1) ==
          DISPATCH_QUEUE_CONCURRENT);
  SAY("attribute with QoS 0x42 unchanged", "%d",
      dispatch_queue_attr_make_with_qos_class(DISPATCH_QUEUE_SERIAL, 0x42, 0) ==
          DISPATCH_QUEUE_SERIAL);
  struct {
    const char *name;
    dispatch_source_type_t type;
    uintptr_t handle, mask;
  } sources[] = {
      {"data add, handle 1", DISPATCH_SOURCE_TYPE_DATA_ADD, 1, 0},
      {"data or, mask 1", DISPATCH_SOURCE_TYPE_DATA_OR, 0, 1},
      {"data replace", DISPATCH_SOURCE_TYPE_DATA_REPLACE, 0, 0},
      {"read, mask 1", DISPATCH_SOURCE_TYPE_READ, 0, 1},
      {"timer, handle 1", DISPATCH_SOURCE_TYPE_TIMER, 1, 0},
      {"timer, strict", DISPATCH_SOURCE_TYPE_TIMER, 0, DISPATCH_TIMER_STRICT},
      {"timer, mask 4", DISPATCH_SOURCE_TYPE_TIMER, 0, 4},
      {"signal 0", DISPATCH_SOURCE_TYPE_SIGNAL, 0, 0},
      {"signal 64", DISPATCH_SOURCE_TYPE_SIGNAL, 64, 0},
      {"signal 65", DISPATCH_SOURCE_TYPE_SIGNAL, 65, 0},
      {"signal 10, mask 1", DISPATCH_SOURCE_TYPE_SIGNAL, 10, 1},
  };
  for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
    dispatch_source_t source =
        dispatch_source_create(sources[i].type, sources[i].handle, sources[i].mask, NULL);
    printf("source %s: %s\n", sources[i].name, source ? "source" : "NULL");
    if (source) {
      dispatch_source_cancel(source);
      dispatch_resume(source);
      dispatch_release(source);
    }
  }
}

static void qos_classes(void) {
  int relative = 99;
  dispatch_queue_t utility = dispatch_queue_create(
      "diff.utility", dispatch_queue_attr_make_with_qos_class(DISPATCH_QUEUE_SERIAL, 0x11, -3));
  unsigned qos = (unsigned)dispatch_queue_get_qos_class(utility, &relative);
  printf("QoS of a utility queue: %#x, relative %d\n", qos, relative);
  dispatch_queue_t plain = dispatch_queue_create("diff.plain", NULL);
  qos = (unsigned)dispatch_queue_get_qos_class(plain, &relative);
  printf("QoS of a plain queue: %#x, relative %d\n", qos, relative);
  dispatch_queue_t pooled = dispatch_queue_create(
      "diff.pool", dispatch_queue_attr_make_with_autorelease_frequency(
                       dispatch_queue_attr_make_with_qos_class(DISPATCH_QUEUE_SERIAL, 0x19, -2),
                       DISPATCH_AUTORELEASE_FREQUENCY_WORK_ITEM));
  qos = (unsigned)dispatch_queue_get_qos_class(pooled, &relative);
  printf("QoS through an autorelease attribute: %#x, relative %d\n", qos, relative);
  printf("QoS of the high global queue: %#x\n",
         (unsigned)dispatch_queue_get_qos_class(dispatch_get_global_queue(2, 0), NULL));
  dispatch_release(utility);
  dispatch_release(plain);
  dispatch_release(pooled);
}

static void specifics_labels_contexts(void) {
  dispatch_queue_t parent = dispatch_queue_create("diff.parent", NULL);
  dispatch_queue_t child = dispatch_queue_create_with_target("diff.child", NULL, parent);
  dispatch_queue_set_specific(parent, &parent_key, (void *)1, NULL);
  SAY("queue_get_specific(child) of the parent's key", "%p",
      dispatch_queue_get_specific(child, &parent_key));
  SAY("queue_get_specific(parent)", "%p", dispatch_queue_get_specific(parent, &parent_key));
  dispatch_sync(child, ^{
    SAY("get_specific on the child (walks the chain)", "%p", dispatch_get_specific(&parent_key));
  });
  SAY("child label", "%s", dispatch_queue_get_label(child));
  dispatch_release(child);
  dispatch_release(parent);

  dispatch_queue_set_specific(dispatch_get_main_queue(), &main_key, (void *)2, NULL);
  SAY("main thread, before dispatch_main: get_specific of a main-queue key", "%p",
      dispatch_get_specific(&main_key));
  dispatch_assert_queue(dispatch_get_main_queue());
  dispatch_assert_queue_barrier(dispatch_get_main_queue());
  SAY("main thread, before dispatch_main: assert_queue(main)", "%s", "passed");
  dispatch_set_context(dispatch_get_main_queue(), (void *)5);
  SAY("main queue context after set", "%p", dispatch_get_context(dispatch_get_main_queue()));
  dispatch_set_context(dispatch_get_global_queue(0, 0), (void *)5);
  SAY("global queue context after set", "%p",
      dispatch_get_context(dispatch_get_global_queue(0, 0)));

  dispatch_queue_t without = dispatch_queue_create("diff.no-context", NULL);
  dispatch_set_finalizer_f(without, finalizer);
  dispatch_release(without);
  dispatch_queue_t with = dispatch_queue_create("diff.context", NULL);
  dispatch_set_context(with, (void *)0x1234);
  dispatch_set_finalizer_f(with, finalizer);
  dispatch_release(with);
  dispatch_group_t plain_group = dispatch_group_create();
  dispatch_set_finalizer_f(plain_group, finalizer);
  dispatch_release(plain_group);
  WAIT_UNTIL(atomic_load(&finalized_with_context) == 1);
  dispatch_sync(dispatch_get_global_queue(0, 0), ^{});
  SAY("finalizers with a context", "%d", atomic_load(&finalized_with_context));
  SAY("finalizers with a NULL context", "%d", atomic_load(&finalized_with_null));

  dispatch_queue_t target = dispatch_queue_create("diff.finalizer-target", NULL);
  dispatch_queue_set_specific(target, &target_key, (void *)7, NULL);
  dispatch_group_t group = dispatch_group_create();
  dispatch_set_target_queue(group, target);
  dispatch_semaphore_t semaphore = dispatch_semaphore_create(0);
  dispatch_set_target_queue(semaphore, target);
  dispatch_set_context(group, (void *)1);
  dispatch_set_finalizer_f(group, group_finalizer);
  dispatch_release(group);
  dispatch_release(semaphore);
  WAIT_UNTIL(atomic_load(&group_finalized_on_target) == 1);
  SAY("group finalizer ran on its target queue", "%d", atomic_load(&group_finalized_on_target));
  dispatch_release(target);
}

static void widths(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.width", DISPATCH_QUEUE_CONCURRENT);
  dispatch_queue_set_width(queue, 2);
  __block atomic_int running = 0, most = 0;
  dispatch_group_t group = dispatch_group_create();
  for (int i = 0; i < 6; i++) {
    dispatch_group_async(group, queue, ^{
      int now = atomic_fetch_add(&running, 1) + 1;
      int seen = atomic_load(&most);
      while (now > seen && !atomic_compare_exchange_weak(&most, &seen, now)) {
      }
      // Stay until a partner has arrived (or 2 s passed): the width is then reached.
      for (int spins = 0; spins < 2000 && atomic_load(&most) < 2; spins++) usleep(1000);
      usleep(5000);
      atomic_fetch_sub(&running, 1);
    });
  }
  dispatch_group_wait(group, DISPATCH_TIME_FOREVER);
  SAY("most items at once on a width-2 queue", "%d", atomic_load(&most));
  dispatch_queue_set_width(queue, DISPATCH_QUEUE_WIDTH_MAX_LOGICAL_CPUS);
  dispatch_queue_set_width(queue, -7);  // Any other negative: the logical CPUs.
  dispatch_queue_set_width(queue, 0);
  __block int ran = 0;
  dispatch_barrier_sync(queue, ^{ ran = 1; });
  SAY("width 0 still runs work", "%d", ran);
  dispatch_release(group);
  dispatch_release(queue);
}

// Sync readers of a concurrent queue run side by side: READERS (80) pthreads each dispatch_sync_f
// onto one queue, and each reader waits inside until all READERS are in (10 s at most), with
// the queue's target global, then a custom concurrent queue (libdispatch's dispatch_readsync).
enum { READERS = 80 };  // More than the 64 threads a pool may add for blocked workers.
static atomic_int readers_in, readers_met;

static void meeting_reader(void *context) {
  (void)context;
  atomic_fetch_add(&readers_in, 1);
  WAIT_UNTIL(atomic_load(&readers_in) >= READERS);
  if (atomic_load(&readers_in) >= READERS) atomic_fetch_add(&readers_met, 1);
}

static void *sync_reader_thread(void *queue) {
  dispatch_sync_f(queue, NULL, meeting_reader);
  return NULL;
}

static int readers_meet(dispatch_queue_t queue) {
  atomic_store(&readers_in, 0);
  atomic_store(&readers_met, 0);
  pthread_t threads[READERS];
  for (int i = 0; i < READERS; i++) pthread_create(&threads[i], NULL, sync_reader_thread, queue);
  for (int i = 0; i < READERS; i++) pthread_join(threads[i], NULL);
  return atomic_load(&readers_met);
}

static void sync_readers(void) {
  dispatch_queue_t queue = dispatch_queue_create("diff.readers", DISPATCH_QUEUE_CONCURRENT);
  SAY("sync readers inside a concurrent queue at once", "%d of %d", readers_meet(queue), READERS);
  dispatch_queue_t target = dispatch_queue_create("diff.readers.t", DISPATCH_QUEUE_CONCURRENT);
  dispatch_set_target_queue(queue, target);
  dispatch_barrier_sync(queue, ^{});
  SAY("sync readers inside, through a concurrent target", "%d of %d", readers_meet(queue),
      READERS);
  dispatch_release(queue);
  dispatch_release(target);
}

// dispatch_suspend and dispatch_resume on objects that are neither queues nor sources do
// nothing (libdispatch's object.h leaves them to queues and sources).
static void suspend_other_objects(void) {
  dispatch_group_t group = dispatch_group_create();
  dispatch_semaphore_t semaphore = dispatch_semaphore_create(0);
  dispatch_data_t data = dispatch_data_create("ab", 2, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
  dispatch_suspend(group);
  dispatch_suspend(semaphore);
  dispatch_suspend(data);
  dispatch_resume(group);
  dispatch_resume(group);  // Unbalanced: nothing either.
  dispatch_resume(semaphore);
  dispatch_resume(data);
  dispatch_group_async(group, dispatch_get_global_queue(0, 0), ^{
    dispatch_semaphore_signal(semaphore);
  });
  SAY("a group works after suspend and resume", "%ld",
      dispatch_group_wait(group, dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_SEC)));
  SAY("a semaphore works after suspend and resume", "%ld",
      dispatch_semaphore_wait(semaphore, dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_SEC)));
  SAY("a data object keeps its size", "%zu", dispatch_data_get_size(data));
  dispatch_release(group);
  dispatch_release(semaphore);
  dispatch_release(data);
}

static void data_replace(void) {
  dispatch_source_t source =
      dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_REPLACE, 0, 0, NULL);
  __block atomic_ulong seen = 0;
  __block atomic_int calls = 0;
  dispatch_source_set_event_handler(source, ^{
    atomic_store(&seen, dispatch_source_get_data(source));
    atomic_fetch_add(&calls, 1);
  });
  dispatch_source_merge_data(source, 3);
  dispatch_source_merge_data(source, 5);
  dispatch_activate(source);
  WAIT_UNTIL(atomic_load(&calls) == 1);
  SAY("data replace: the latest value", "%lu", (unsigned long)atomic_load(&seen));
  dispatch_suspend(source);
  dispatch_source_merge_data(source, 9);
  dispatch_source_merge_data(source, 0);  // Withdraws the 9: no call for it.
  dispatch_resume(source);
  dispatch_source_merge_data(source, 4);
  WAIT_UNTIL(atomic_load(&calls) == 2);
  usleep(20000);
  SAY("data replace: calls", "%d", atomic_load(&calls));
  SAY("data replace: last value", "%lu", (unsigned long)atomic_load(&seen));
  dispatch_cancel(source);
  SAY("dispatch_testcancel (generic) after dispatch_cancel", "%ld",
      (long)dispatch_testcancel(source));
  dispatch_release(source);
  dispatch_group_t group = dispatch_group_create();
  SAY("dispatch_wait (generic) on an empty group", "%ld",
      (long)dispatch_wait(group, DISPATCH_TIME_NOW));
  dispatch_release(group);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  argument_checks();
  qos_classes();
  specifics_labels_contexts();
  widths();
  sync_readers();
  suspend_other_objects();
  data_replace();
  // queue.h: suspend and resume have no effect on the main queue.
  dispatch_suspend(dispatch_get_main_queue());
  dispatch_async(dispatch_get_main_queue(), ^{
    SAY("main queue ran while 'suspended'", "%d", 1);
    dispatch_resume(dispatch_get_main_queue());
    dispatch_resume(dispatch_get_main_queue());  // Unbalanced: no effect either.
    SAY("unbalanced resume of the main queue", "%s", "ignored");
    dispatch_suspend(dispatch_get_global_queue(0, 0));
    __block int ran = 0;
    dispatch_sync(dispatch_get_global_queue(0, 0), ^{ ran = 1; });
    SAY("global queue runs work while 'suspended'", "%d", ran);
    exit(0);
  });
  dispatch_main();
}
