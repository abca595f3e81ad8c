// The C API's test suite: every function of <dispatch/dispatch.h>, in block and `_f` form,
// reference counting and finalizers, sources and their cancel handlers, timers, and
// dispatch_main with work posted before and after it starts. Built with clang -fblocks
// against the header (pkg-config), run by scripts/test-c-api.sh, also under ASan/LSan.
//
// `capi_tests` runs the suite and ends inside dispatch_main (exit 0 from a main-queue block).
// `capi_tests misuse <case>` performs one client bug; the script checks that it crashes with
// a "BUG IN CLIENT OF LOOPDISPATCH:" line.
#include <dispatch/dispatch.h>
#include <dispatch/private.h>
#include <event2/event.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern void _Block_release(const void *block);  // BlocksRuntime (Block.h's Block_release).
extern char **environ;

// Linux has no <sys/qos.h>: a program that wants the QoS class names defines them itself, as
// here; the header must leave the names free (as libdispatch's Linux header does).
typedef unsigned int qos_class_t;
enum {
  QOS_CLASS_USER_INTERACTIVE = 0x21,
  QOS_CLASS_USER_INITIATED = 0x19,
  QOS_CLASS_DEFAULT = 0x15,
  QOS_CLASS_UTILITY = 0x11,
  QOS_CLASS_BACKGROUND = 0x09,
  QOS_CLASS_UNSPECIFIED = 0x00,
};

// dispatch_get_current_queue is deprecated (as in libdispatch) but part of the API under test.
#pragma clang diagnostic ignored "-Wdeprecated-declarations"

static int checks;
static int failures;

#define CHECK(condition, ...)                                    \
  do {                                                           \
    checks++;                                                    \
    if (!(condition)) {                                          \
      failures++;                                                \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #condition); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
    }                                                            \
  } while (0)

static dispatch_time_t in_seconds(double seconds) {
  return dispatch_time(DISPATCH_TIME_NOW, (int64_t)(seconds * NSEC_PER_SEC));
}

// ---- queues ----------------------------------------------------------------------------------

static void count_up(void *context) { atomic_fetch_add((atomic_int *)context, 1); }

static void test_serial_queue_order_and_sync(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.serial", DISPATCH_QUEUE_SERIAL);
  CHECK(strcmp(dispatch_queue_get_label(queue), "c.serial") == 0, "label");
  int *order = calloc(100, sizeof *order);
  __block int count = 0;
  for (int i = 0; i < 100; i++) dispatch_async(queue, ^{ order[count++] = i; });
  atomic_int f_count = 0;
  for (int i = 0; i < 100; i++) dispatch_async_f(queue, &f_count, count_up);
  __block int inside = -1;
  dispatch_sync(queue, ^{
    inside = count;
    CHECK(strcmp(dispatch_queue_get_label(DISPATCH_CURRENT_QUEUE_LABEL), "c.serial") == 0,
          "current label inside sync");
    CHECK(dispatch_get_current_queue() == queue, "dispatch_get_current_queue inside sync");
  });
  CHECK(inside == 100, "sync ran after the 100 async blocks (saw %d)", inside);
  CHECK(atomic_load(&f_count) == 100, "async_f ran 100 times (%d)", atomic_load(&f_count));
  int ordered = 1;
  for (int i = 0; i < 100; i++) ordered &= order[i] == i;
  CHECK(ordered, "serial order");
  free(order);
  atomic_int sync_f = 0;
  dispatch_sync_f(queue, &sync_f, count_up);
  CHECK(atomic_load(&sync_f) == 1, "sync_f");
  dispatch_release(queue);
}

struct barrier_state {
  atomic_int readers;
  atomic_int max_readers;
  atomic_int overlaps;
  atomic_int writes;
};

static void barrier_write(void *context) {
  struct barrier_state *state = context;
  if (atomic_load(&state->readers) != 0) atomic_fetch_add(&state->overlaps, 1);
  atomic_fetch_add(&state->writes, 1);
}

static void test_concurrent_queue_and_barriers(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.concurrent", DISPATCH_QUEUE_CONCURRENT);
  struct barrier_state *state = calloc(1, sizeof *state);
  dispatch_semaphore_t both_in = dispatch_semaphore_create(0);
  dispatch_semaphore_t release_readers = dispatch_semaphore_create(0);
  for (int i = 0; i < 2; i++) {
    dispatch_async(queue, ^{
      int now = atomic_fetch_add(&state->readers, 1) + 1;
      int seen = atomic_load(&state->max_readers);
      while (now > seen && !atomic_compare_exchange_weak(&state->max_readers, &seen, now)) {}
      dispatch_semaphore_signal(both_in);
      dispatch_semaphore_wait(release_readers, DISPATCH_TIME_FOREVER);
      atomic_fetch_sub(&state->readers, 1);
    });
  }
  CHECK(dispatch_semaphore_wait(both_in, in_seconds(30)) == 0, "reader 1 in");
  CHECK(dispatch_semaphore_wait(both_in, in_seconds(30)) == 0, "reader 2 in (concurrent)");
  dispatch_barrier_async(queue, ^{ barrier_write(state); });
  dispatch_barrier_async_f(queue, state, barrier_write);
  dispatch_semaphore_signal(release_readers);
  dispatch_semaphore_signal(release_readers);
  dispatch_barrier_sync(queue, ^{ barrier_write(state); });
  dispatch_barrier_sync_f(queue, state, barrier_write);
  CHECK(atomic_load(&state->max_readers) == 2, "two readers at once");
  CHECK(atomic_load(&state->writes) == 4, "four barrier writes (%d)", atomic_load(&state->writes));
  CHECK(atomic_load(&state->overlaps) == 0, "no barrier overlapped a reader");
  dispatch_release(both_in);
  dispatch_release(release_readers);
  dispatch_release(queue);
  free(state);
}

// dispatch_sync readers of a concurrent queue run on their callers' threads, side by side up
// to the width (libdispatch's dispatch_readsync test), also when the queue targets another
// concurrent queue. Such a sync once parked a plain pool worker for the whole reader, so the
// readers running at once were capped by the pool (one per CPU, grown while all are blocked,
// at most 64): all SYNC_PARTIES callers, more than that cap, must be inside at once.
#define SYNC_CALLERS 80
#define SYNC_PARTIES SYNC_CALLERS
#define SYNC_LAPS 100

// A barrier for SYNC_PARTIES threads that gives up after a timeout (and from then on lets
// everyone through at once), so a queue that runs fewer readers at once fails in seconds
// instead of hanging the suite. The fields after `changed` are protected by `lock`.
struct sync_rendezvous {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int arrived;
  unsigned generation;
  int timed_out;
};

struct sync_readers {
  dispatch_queue_t queue;    // The queue the callers sync onto.
  dispatch_queue_t barrier2; // Its concurrent target (or NULL), also sent barriers.
  struct sync_rendezvous rendezvous;
  pthread_barrier_t phase2;  // Outside the queue: no barrier item waits for a meeting reader.
  atomic_int readers, writers, max_readers, overlaps, met;
};

static int sync_rendezvous_wait(struct sync_rendezvous *r, double seconds) {
  pthread_mutex_lock(&r->lock);
  unsigned generation = r->generation;
  if (r->timed_out || ++r->arrived == SYNC_PARTIES) {
    if (!r->timed_out) {
      r->arrived = 0;
      r->generation++;
      pthread_cond_broadcast(&r->changed);
    }
    int met = !r->timed_out;
    pthread_mutex_unlock(&r->lock);
    return met;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += (time_t)seconds;
  while (generation == r->generation && !r->timed_out) {
    if (pthread_cond_timedwait(&r->changed, &r->lock, &deadline) == ETIMEDOUT &&
        generation == r->generation) {
      r->timed_out = 1;
      pthread_cond_broadcast(&r->changed);
    }
  }
  int met = generation != r->generation;
  pthread_mutex_unlock(&r->lock);
  return met;
}

static void sync_reader_enter(struct sync_readers *state) {
  int now = atomic_fetch_add(&state->readers, 1) + 1;
  int seen = atomic_load(&state->max_readers);
  while (now > seen && !atomic_compare_exchange_weak(&state->max_readers, &seen, now)) {}
  if (atomic_load(&state->writers) != 0) atomic_fetch_add(&state->overlaps, 1);
}

static void sync_reader_leave(struct sync_readers *state) {
  if (atomic_load(&state->writers) != 0) atomic_fetch_add(&state->overlaps, 1);
  atomic_fetch_sub(&state->readers, 1);
}

// Phase 1: every caller's first reader waits inside the queue until SYNC_PARTIES are in
// (10 s at most).
static void sync_meeting_reader(void *context) {
  struct sync_readers *state = context;
  sync_reader_enter(state);
  if (sync_rendezvous_wait(&state->rendezvous, 10)) atomic_fetch_add(&state->met, 1);
  sync_reader_leave(state);
}

// Phase 2: short readers mixed with barriers on the queue and on its target.
static void sync_short_reader(void *context) {
  struct sync_readers *state = context;
  sync_reader_enter(state);
  for (volatile int spin = 0; spin < 200; spin++) {}
  sync_reader_leave(state);
}

static void sync_writer(void *context) {
  struct sync_readers *state = context;
  if (atomic_fetch_add(&state->writers, 1) != 0) atomic_fetch_add(&state->overlaps, 1);
  if (atomic_load(&state->readers) != 0) atomic_fetch_add(&state->overlaps, 1);
  for (volatile int spin = 0; spin < 200; spin++) {}
  if (atomic_load(&state->readers) != 0) atomic_fetch_add(&state->overlaps, 1);
  atomic_fetch_sub(&state->writers, 1);
}

static void *sync_caller(void *context) {
  struct sync_readers *state = context;
  dispatch_sync_f(state->queue, state, sync_meeting_reader);
  pthread_barrier_wait(&state->phase2);
  for (int lap = 1; lap <= SYNC_LAPS; lap++) {
    dispatch_sync_f(state->queue, state, sync_short_reader);
    if (lap % 50 == 0) {
      dispatch_barrier_sync_f(state->queue, state, sync_writer);
    } else if (lap % 25 == 0) {
      dispatch_barrier_async_f(state->barrier2 ? state->barrier2 : state->queue, state,
                               sync_writer);
    }
  }
  return NULL;
}

static void check_sync_readers(const char *name, dispatch_queue_t queue, dispatch_queue_t target) {
  struct sync_readers *state = calloc(1, sizeof *state);
  pthread_mutex_init(&state->rendezvous.lock, NULL);
  pthread_cond_init(&state->rendezvous.changed, NULL);
  pthread_barrier_init(&state->phase2, NULL, SYNC_CALLERS);
  state->queue = queue;
  state->barrier2 = target;
  pthread_t callers[SYNC_CALLERS];
  for (int i = 0; i < SYNC_CALLERS; i++) {
    CHECK(pthread_create(&callers[i], NULL, sync_caller, state) == 0, "%s: caller thread", name);
  }
  for (int i = 0; i < SYNC_CALLERS; i++) pthread_join(callers[i], NULL);
  dispatch_barrier_sync(target ? target : queue, ^{});  // The async barriers have run.
  CHECK(atomic_load(&state->met) == SYNC_CALLERS && !state->rendezvous.timed_out,
        "%s: %d sync readers ran at once (%d of %d met, max %d at once)", name, SYNC_PARTIES,
        atomic_load(&state->met), SYNC_CALLERS, atomic_load(&state->max_readers));
  CHECK(atomic_load(&state->overlaps) == 0, "%s: no reader ran beside a barrier (%d overlaps)",
        name, atomic_load(&state->overlaps));
  CHECK(atomic_load(&state->readers) == 0 && atomic_load(&state->writers) == 0,
        "%s: all left", name);
  pthread_barrier_destroy(&state->phase2);
  pthread_cond_destroy(&state->rendezvous.changed);
  pthread_mutex_destroy(&state->rendezvous.lock);
  free(state);
}

static void test_concurrent_sync_readers(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.readsync", DISPATCH_QUEUE_CONCURRENT);
  check_sync_readers("sync readers, global target", queue, NULL);
  dispatch_queue_t target = dispatch_queue_create("c.readsync.target", DISPATCH_QUEUE_CONCURRENT);
  dispatch_set_target_queue(queue, target);
  dispatch_barrier_sync(target, ^{});
  check_sync_readers("sync readers, concurrent target", queue, target);
  dispatch_queue_t top = dispatch_queue_create("c.readsync.top", DISPATCH_QUEUE_CONCURRENT);
  dispatch_set_target_queue(target, top);
  dispatch_barrier_sync(top, ^{});
  check_sync_readers("sync readers, two concurrent targets", queue, target);
  dispatch_release(queue);
  dispatch_release(target);
  dispatch_release(top);
}

static void test_assertions_and_variants(void) {
  dispatch_queue_t target = dispatch_queue_create("c.variant.target", DISPATCH_QUEUE_SERIAL);
  dispatch_queue_t queue =
      dispatch_queue_create_with_target("c.variant", DISPATCH_QUEUE_CONCURRENT, target);
  __block int ran = 0;
  dispatch_async_and_wait(queue, ^{
    dispatch_assert_queue(queue);
    ran++;
  });
  static atomic_int ran_f;
  dispatch_async_and_wait_f(queue, &ran_f, count_up);
  dispatch_barrier_async_and_wait(queue, ^{
    dispatch_assert_queue_barrier(queue);
    ran++;
  });
  dispatch_barrier_async_and_wait_f(queue, &ran_f, count_up);
  dispatch_assert_queue_not(queue);
  CHECK(ran == 2 && atomic_load(&ran_f) == 2, "async_and_wait forms ran (%d, %d)", ran,
        atomic_load(&ran_f));
  dispatch_release(queue);
  dispatch_release(target);
}

static void test_debug(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.debug", DISPATCH_QUEUE_SERIAL);
  dispatch_debug(queue, "debug line %d", 5);  // The script checks the line on stderr.
  dispatch_semaphore_t semaphore = dispatch_semaphore_create(3);
  dispatch_debug(semaphore, "%s", "semaphore line");
  dispatch_release(semaphore);
  dispatch_release(queue);
}

static void test_global_queues(void) {
  intptr_t priorities[] = {DISPATCH_QUEUE_PRIORITY_HIGH, DISPATCH_QUEUE_PRIORITY_DEFAULT,
                           DISPATCH_QUEUE_PRIORITY_LOW, DISPATCH_QUEUE_PRIORITY_BACKGROUND,
                           QOS_CLASS_USER_INITIATED, QOS_CLASS_UTILITY};
  for (size_t i = 0; i < sizeof priorities / sizeof priorities[0]; i++) {
    dispatch_queue_t global = dispatch_get_global_queue(priorities[i], 0);
    CHECK(global != NULL, "global queue %zu", i);
    CHECK(global == dispatch_get_global_queue(priorities[i], 0), "same global queue twice");
    dispatch_retain(global);  // No effect on a global queue, as in libdispatch.
    dispatch_release(global);
    __block int ran = 0;
    dispatch_sync(global, ^{ ran = 1; });
    CHECK(ran, "sync onto global queue %zu", i);
  }
  CHECK(dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_HIGH, 0) !=
            dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_LOW, 0),
        "distinct priorities");
}

static void test_targets_suspend_inactive(void) {
  dispatch_queue_t parent = dispatch_queue_create("c.parent", DISPATCH_QUEUE_SERIAL);
  dispatch_queue_t child = dispatch_queue_create("c.child", DISPATCH_QUEUE_SERIAL_INACTIVE);
  dispatch_set_target_queue(child, parent);
  __block atomic_int ran = 0;
  dispatch_async(child, ^{ atomic_fetch_add(&ran, 1); });
  dispatch_sync(parent, ^{});
  CHECK(atomic_load(&ran) == 0, "an inactive queue runs nothing");
  dispatch_activate(child);
  dispatch_sync(child, ^{});
  CHECK(atomic_load(&ran) == 1, "activated queue ran its block");
  dispatch_suspend(child);
  dispatch_async(child, ^{ atomic_fetch_add(&ran, 1); });
  dispatch_sync(parent, ^{});
  CHECK(atomic_load(&ran) == 1, "a suspended queue runs nothing");
  dispatch_resume(child);
  dispatch_sync(child, ^{});
  CHECK(atomic_load(&ran) == 2, "resumed queue ran its block");
  dispatch_queue_attr_t qos =
      dispatch_queue_attr_make_with_qos_class(DISPATCH_QUEUE_CONCURRENT, QOS_CLASS_UTILITY, 0);
  dispatch_queue_t utility = dispatch_queue_create("c.utility", qos);
  __block int utility_ran = 0;
  dispatch_sync(utility, ^{ utility_ran = 1; });
  CHECK(utility_ran, "QoS attribute queue runs work");
  dispatch_release(utility);
  dispatch_release(child);
  dispatch_release(parent);
}

// ---- context, finalizer, specifics -------------------------------------------------------

static atomic_int finalized;
static dispatch_semaphore_t finalizer_ran;

static void finalize_context(void *context) {
  atomic_fetch_add(&finalized, *(int *)context);
  free(context);
  dispatch_semaphore_signal(finalizer_ran);
}

static void test_context_and_finalizer(void) {
  finalizer_ran = dispatch_semaphore_create(0);
  dispatch_queue_t queue = dispatch_queue_create("c.context", DISPATCH_QUEUE_SERIAL);
  int *context = malloc(sizeof *context);
  *context = 7;
  dispatch_set_context(queue, context);
  dispatch_set_finalizer_f(queue, finalize_context);
  CHECK(dispatch_get_context(queue) == context, "queue context");
  __block atomic_int after_release = 0;
  dispatch_async(queue, ^{ atomic_fetch_add(&after_release, 1); });
  dispatch_release(queue);  // The block still runs, then the finalizer.
  CHECK(dispatch_semaphore_wait(finalizer_ran, in_seconds(30)) == 0, "queue finalizer ran");
  CHECK(atomic_load(&after_release) == 1, "work submitted before the last release ran first");
  CHECK(atomic_load(&finalized) == 7, "finalizer got the context");

  dispatch_group_t group = dispatch_group_create();
  int *group_context = malloc(sizeof *group_context);
  *group_context = 3;
  dispatch_set_context(group, group_context);
  dispatch_set_finalizer_f(group, finalize_context);
  CHECK(dispatch_get_context(group) == group_context, "group context");
  dispatch_retain(group);
  dispatch_release(group);
  CHECK(atomic_load(&finalized) == 7, "still referenced: no finalizer yet");
  dispatch_release(group);
  CHECK(dispatch_semaphore_wait(finalizer_ran, in_seconds(30)) == 0, "group finalizer ran");
  CHECK(atomic_load(&finalized) == 10, "group finalizer got its context");
  dispatch_release(finalizer_ran);
}

static int key_a, key_b;
static atomic_int destroyed;
static void destroy_specific(void *context) { atomic_fetch_add(&destroyed, (int)(intptr_t)context); }

static void test_specifics(void) {
  dispatch_queue_t parent = dispatch_queue_create("c.spec.parent", DISPATCH_QUEUE_SERIAL);
  dispatch_queue_t child = dispatch_queue_create("c.spec.child", DISPATCH_QUEUE_SERIAL);
  dispatch_set_target_queue(child, parent);
  dispatch_queue_set_specific(parent, &key_a, (void *)(intptr_t)5, destroy_specific);
  dispatch_queue_set_specific(child, &key_b, (void *)(intptr_t)6, destroy_specific);
  CHECK(dispatch_queue_get_specific(parent, &key_a) == (void *)(intptr_t)5, "get_specific");
  CHECK(dispatch_queue_get_specific(parent, &key_b) == NULL, "absent key");
  dispatch_sync(child, ^{
    CHECK(dispatch_get_specific(&key_b) == (void *)(intptr_t)6, "own specific");
    CHECK(dispatch_get_specific(&key_a) == (void *)(intptr_t)5, "inherited from the target");
  });
  CHECK(dispatch_get_specific(&key_a) == NULL, "no specific outside a queue");
  dispatch_queue_set_specific(parent, &key_a, (void *)(intptr_t)50, destroy_specific);
  CHECK(atomic_load(&destroyed) == 5, "replaced value's destructor ran (%d)", atomic_load(&destroyed));
  dispatch_release(child);
  dispatch_release(parent);
}

// ---- groups, semaphores, once, apply, after, time --------------------------------------------

static void add_one_to(void *context) { atomic_fetch_add((atomic_int *)context, 1); }

static void test_groups(void) {
  dispatch_group_t group = dispatch_group_create();
  dispatch_queue_t queue = dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0);
  __block atomic_int done = 0;
  static atomic_int done_f;
  for (int i = 0; i < 50; i++) {
    dispatch_group_async(group, queue, ^{ atomic_fetch_add(&done, 1); });
    dispatch_group_async_f(group, queue, &done_f, add_one_to);
  }
  CHECK(dispatch_group_wait(group, DISPATCH_TIME_FOREVER) == 0, "group wait");
  CHECK(atomic_load(&done) == 50 && atomic_load(&done_f) == 50, "all group work ran");

  dispatch_group_enter(group);
  CHECK(dispatch_group_wait(group, in_seconds(0.01)) != 0, "wait times out while entered");
  dispatch_semaphore_t notified = dispatch_semaphore_create(0);
  dispatch_group_notify(group, queue, ^{ dispatch_semaphore_signal(notified); });
  static atomic_int notified_f;
  dispatch_group_notify_f(group, queue, &notified_f, add_one_to);
  CHECK(dispatch_semaphore_wait(notified, in_seconds(0.01)) != 0, "no notify before leave");
  dispatch_group_leave(group);
  CHECK(dispatch_semaphore_wait(notified, in_seconds(30)) == 0, "notify after leave");
  CHECK(dispatch_group_wait(group, DISPATCH_TIME_FOREVER) == 0, "empty again");
  dispatch_release(notified);
  dispatch_release(group);
}

static void test_semaphores(void) {
  CHECK(dispatch_semaphore_create(-1) == NULL, "negative semaphore value is refused");
  dispatch_semaphore_t semaphore = dispatch_semaphore_create(2);
  CHECK(dispatch_semaphore_wait(semaphore, DISPATCH_TIME_NOW) == 0, "first unit");
  CHECK(dispatch_semaphore_wait(semaphore, DISPATCH_TIME_NOW) == 0, "second unit");
  CHECK(dispatch_semaphore_wait(semaphore, DISPATCH_TIME_NOW) != 0, "none left");
  dispatch_time_t start = dispatch_time(DISPATCH_TIME_NOW, 0);
  CHECK(dispatch_semaphore_wait(semaphore, in_seconds(0.02)) != 0, "timed wait times out");
  CHECK(dispatch_time(DISPATCH_TIME_NOW, 0) - start >= 20 * NSEC_PER_MSEC, "not early");
  dispatch_async(dispatch_get_global_queue(0, 0), ^{ dispatch_semaphore_signal(semaphore); });
  CHECK(dispatch_semaphore_wait(semaphore, in_seconds(30)) == 0, "signalled from a queue");
  dispatch_semaphore_signal(semaphore);
  dispatch_semaphore_signal(semaphore);
  dispatch_release(semaphore);  // Balanced again (value 2): released without complaint.
}

static void once_f_body(void *context) { atomic_fetch_add((atomic_int *)context, 1); }

static void test_once(void) {
  static dispatch_once_t predicate;
  static dispatch_once_t predicate_f;
  __block atomic_int runs = 0;
  static atomic_int runs_f;
  dispatch_apply(64, DISPATCH_APPLY_AUTO, ^(size_t index) {
    (void)index;
    dispatch_once(&predicate, ^{ atomic_fetch_add(&runs, 1); });
    dispatch_once_f(&predicate_f, &runs_f, once_f_body);
  });
  CHECK(atomic_load(&runs) == 1 && atomic_load(&runs_f) == 1, "once ran once (%d, %d)",
        atomic_load(&runs), atomic_load(&runs_f));
}

static void apply_f_body(void *context, size_t index) {
  atomic_fetch_add((atomic_long *)context, (long)index);
}

static void test_apply(void) {
  __block atomic_long sum = 0;
  dispatch_apply(1000, dispatch_get_global_queue(0, 0), ^(size_t i) { atomic_fetch_add(&sum, (long)i); });
  CHECK(atomic_load(&sum) == 499500, "apply sum %ld", atomic_load(&sum));
  static atomic_long sum_f;
  dispatch_queue_t serial = dispatch_queue_create("c.apply", DISPATCH_QUEUE_SERIAL);
  dispatch_apply_f(100, serial, &sum_f, apply_f_body);
  CHECK(atomic_load(&sum_f) == 4950, "apply_f on a serial queue");
  dispatch_release(serial);
}

static void signal_semaphore(void *context) { dispatch_semaphore_signal(context); }

static void test_after_and_time(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.after", DISPATCH_QUEUE_SERIAL);
  dispatch_semaphore_t fired = dispatch_semaphore_create(0);
  dispatch_time_t start = dispatch_time(DISPATCH_TIME_NOW, 0);
  __block dispatch_time_t ran_at = 0;
  dispatch_after(dispatch_time(DISPATCH_TIME_NOW, 20 * NSEC_PER_MSEC), queue, ^{
    ran_at = dispatch_time(DISPATCH_TIME_NOW, 0);
    dispatch_semaphore_signal(fired);
  });
  CHECK(dispatch_semaphore_wait(fired, in_seconds(30)) == 0, "after fired");
  CHECK(ran_at - start >= 20 * NSEC_PER_MSEC, "after not early (%llu ns)",
        (unsigned long long)(ran_at - start));
  dispatch_after_f(dispatch_walltime(NULL, 10 * NSEC_PER_MSEC), queue, fired, signal_semaphore);
  CHECK(dispatch_semaphore_wait(fired, in_seconds(30)) == 0, "after_f on a wall time fired");
  dispatch_after_f(DISPATCH_TIME_NOW, queue, fired, signal_semaphore);
  CHECK(dispatch_semaphore_wait(fired, in_seconds(30)) == 0, "after NOW runs at once");
  CHECK(dispatch_time(DISPATCH_TIME_FOREVER, 5) == DISPATCH_TIME_FOREVER, "forever stays");
  CHECK(dispatch_time(DISPATCH_TIME_NOW, NSEC_PER_SEC) > dispatch_time(DISPATCH_TIME_NOW, 0),
        "time moves forward");
  // Past what the encoding holds: "forever", never an overflow or a wrap into the past.
  struct timespec far = {LONG_MAX, 0};
  CHECK(dispatch_walltime(&far, 0) == DISPATCH_TIME_FOREVER, "far wall time saturates");
  CHECK(dispatch_walltime(NULL, INT64_MAX) == DISPATCH_TIME_FOREVER, "far wall delta saturates");
  CHECK(dispatch_time(DISPATCH_TIME_NOW, INT64_MAX) == DISPATCH_TIME_FOREVER,
        "far monotonic delta saturates");
  dispatch_after(DISPATCH_TIME_FOREVER, queue, ^{ CHECK(0, "a FOREVER after ran"); });
  struct timespec epoch = {0, 0};
  CHECK(dispatch_walltime(&epoch, 0) != dispatch_walltime(NULL, 0), "walltime from a timespec");
  dispatch_release(fired);
  dispatch_release(queue);
}

// ---- the layout ThreadSanitizer's interceptors read ----------------------------------------

// libdispatch's introspection struct, as Sources/CDispatch/tsan.c exports it (its fields are
// offsets into the object behind a handle).
extern const struct {
  uint16_t version, label, label_size, flags, flags_size, serialnum, serialnum_size, width,
      width_size, running, running_size, suspend_cnt, suspend_cnt_size, target_queue,
      target_queue_size, priority, priority_size;
} dispatch_queue_offsets;

static void *target_at_offset(void *object) {
  return *(void **)((char *)object + dispatch_queue_offsets.target_queue);
}

static uint16_t width_at_offset(void *object) {
  return *(uint16_t *)((char *)object + dispatch_queue_offsets.width);
}

// The TSan runtime walks a queue's target chain and tests its width through these offsets
// (and a source's queue through the target offset): they must match the Swift objects.
static void test_sanitizer_layout(void) {
  CHECK(dispatch_queue_offsets.width_size == 2 && dispatch_queue_offsets.target_queue_size == 8,
        "field sizes");
  dispatch_queue_t parent = dispatch_queue_create("c.layout-parent", DISPATCH_QUEUE_CONCURRENT);
  dispatch_queue_t child = dispatch_queue_create_with_target("c.layout-child", NULL, parent);
  dispatch_queue_t global = dispatch_get_global_queue(0, 0);
  CHECK(target_at_offset(child) == parent, "a queue's target at the target offset");
  CHECK(target_at_offset(parent) == global, "the default target is the default global queue");
  CHECK(target_at_offset(global) == NULL && target_at_offset(dispatch_get_main_queue()) == NULL,
        "the chain ends at the global and main queues");
  CHECK(width_at_offset(child) == 1 && width_at_offset(dispatch_get_main_queue()) == 1,
        "serial width 1");
  CHECK(width_at_offset(parent) > 1 && width_at_offset(global) > 1, "concurrent width above 1");
  dispatch_queue_t other = dispatch_queue_create("c.layout-other", NULL);
  dispatch_set_target_queue(child, other);
  CHECK(target_at_offset(child) == other, "a new target at the target offset");
  dispatch_queue_set_width(parent, 3);
  CHECK(width_at_offset(parent) == 3, "dispatch_queue_set_width at the width offset");
  // The main and global queues (overcommit ones included) ignore retargeting, retain and
  // release: their target stays NULL, and releasing them more often than retained is safe.
  dispatch_queue_t overcommit = dispatch_get_global_queue(0, DISPATCH_QUEUE_OVERCOMMIT);
  dispatch_set_target_queue(dispatch_get_main_queue(), other);
  dispatch_set_target_queue(overcommit, other);
  CHECK(target_at_offset(dispatch_get_main_queue()) == NULL && target_at_offset(overcommit) == NULL,
        "the main and global queues keep no target");
  for (int i = 0; i < 1000; i++) dispatch_release(overcommit);
  __block int overcommit_ran = 0;
  dispatch_sync(overcommit, ^{ overcommit_ran = 1; });
  CHECK(overcommit_ran, "an overcommit queue outlives unbalanced releases");
  dispatch_source_t source = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_ADD, 0, 0, child);
  CHECK(target_at_offset(source) == child, "a source's queue at the target offset");
  dispatch_set_target_queue(source, parent);
  CHECK(target_at_offset(source) == parent, "a retargeted source's queue at the target offset");
  dispatch_source_cancel(source);
  dispatch_release(source);
  dispatch_release(child);
  dispatch_release(other);
  dispatch_release(parent);
}

// ---- dispatch block objects ----------------------------------------------------------------

// Not in the header: the live block-object records, for the lifetime check below.
extern long _loopdispatch_block_live_records(void);

// Every block object's record (and the program's block it copied) goes with the block's
// last release, whether it ran, was cancelled or never ran; a block queued when released
// lives until it ran.
// dispatch_queue_set_width on a queue created serial (the idiom of libdispatch's
// dispatch_concur; today's libdispatch traps "Cannot set width of a serial queue"): the queue
// becomes wide for the work submitted after the call, sync readers then run side by side
// with barriers alone, width 1 makes it run one item at a time in order again, and the main
// and global queues ignore the call.
// Width 1: one item at a time, so these plain fields need no atomics (the queue orders the
// items, and the barrier_sync after them orders them before the check).
static int wide_next, wide_out_of_order;

static void wide_record(void *context) {
  if ((intptr_t)context != wide_next) wide_out_of_order++;
  wide_next++;
}

static void test_wide_serial_queue(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.wide", NULL);
  CHECK(width_at_offset(queue) == 1, "a serial queue is 1 wide");
  dispatch_queue_set_width(queue, 128);
  dispatch_barrier_sync(queue, ^{});  // The width has applied.
  CHECK(width_at_offset(queue) == 128, "set_width(128) on a serial queue: %u wide",
        width_at_offset(queue));
  check_sync_readers("sync readers, serial queue made wide", queue, NULL);
  dispatch_queue_set_width(queue, 1);
  for (intptr_t i = 0; i < 1000; i++) dispatch_async_f(queue, (void *)i, wide_record);
  dispatch_barrier_sync(queue, ^{});
  CHECK(width_at_offset(queue) == 1, "set_width(1) on the wide queue: 1 wide");
  CHECK(wide_next == 1000 && wide_out_of_order == 0,
        "width 1 again: 1000 items in submission order (%d ran, %d out of order)", wide_next,
        wide_out_of_order);
  dispatch_release(queue);
  dispatch_queue_set_width(dispatch_get_global_queue(0, 0), 4);
  dispatch_queue_set_width(dispatch_get_main_queue(), 4);
  CHECK(width_at_offset(dispatch_get_main_queue()) == 1, "the main queue ignores set_width");
  __block int ran = 0;
  dispatch_sync(dispatch_get_global_queue(0, 0), ^{ ran = 1; });
  CHECK(ran, "a global queue still runs work after set_width");
}

static void test_block_object_lifetime(void) {
  long before = _loopdispatch_block_live_records();
  dispatch_queue_t queue = dispatch_queue_create("c.block-life", DISPATCH_QUEUE_SERIAL);
  dispatch_suspend(queue);
  __block atomic_int ran = 0;
  for (int i = 0; i < 30; i++) {
    dispatch_block_t block = dispatch_block_create(0, ^{ atomic_fetch_add(&ran, 1); });
    if (i % 3 == 0) dispatch_block_cancel(block);  // Cancelled, never run.
    if (i % 3 == 1) dispatch_async(queue, block);  // Queued, released before it runs.
    _Block_release(block);  // (i % 3 == 2: never run at all.)
  }
  CHECK(_loopdispatch_block_live_records() == before + 10, "queued blocks live on (%ld)",
        _loopdispatch_block_live_records() - before);
  dispatch_resume(queue);
  dispatch_sync(queue, ^{});
  CHECK(atomic_load(&ran) == 10, "the queued blocks ran (%d)", atomic_load(&ran));
  CHECK(_loopdispatch_block_live_records() == before, "every record went with its block (%ld left)",
        _loopdispatch_block_live_records() - before);
  dispatch_release(queue);
}

static void test_block_objects(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.blocks", DISPATCH_QUEUE_CONCURRENT);
  __block atomic_int ran = 0;
  dispatch_block_t block = dispatch_block_create(0, ^{ atomic_fetch_add(&ran, 1); });
  CHECK(dispatch_block_testcancel(block) == 0, "new block not cancelled");
  dispatch_semaphore_t notified = dispatch_semaphore_create(0);
  dispatch_block_notify(block, queue, ^{ dispatch_semaphore_signal(notified); });
  dispatch_async(queue, block);
  CHECK(dispatch_block_wait(block, in_seconds(30)) == 0, "wait for the block");
  CHECK(atomic_load(&ran) == 1, "block ran");
  CHECK(dispatch_semaphore_wait(notified, in_seconds(30)) == 0, "notify after the run");
  dispatch_block_notify(block, queue, ^{ dispatch_semaphore_signal(notified); });
  CHECK(dispatch_semaphore_wait(notified, in_seconds(30)) == 0, "notify after completion");
  CHECK(dispatch_block_wait(block, DISPATCH_TIME_NOW) == 0, "wait after completion");
  dispatch_block_cancel(block);
  CHECK(dispatch_block_testcancel(block) != 0, "cancel after the run still reads as cancelled");
  _Block_release(block);

  __block atomic_int cancelled_ran = 0;
  dispatch_block_t cancelled = dispatch_block_create(0, ^{ atomic_fetch_add(&cancelled_ran, 1); });
  dispatch_block_cancel(cancelled);
  CHECK(dispatch_block_testcancel(cancelled) != 0, "cancelled");
  // block.h: submission counts as the execution, so a cancelled block is done only once it
  // has been invoked (its work skipped), as in libdispatch.
  CHECK(dispatch_block_wait(cancelled, in_seconds(0.01)) != 0,
        "a cancelled block is not done before it is invoked");
  dispatch_sync(queue, cancelled);
  CHECK(atomic_load(&cancelled_ran) == 0, "a cancelled block does not run");
  CHECK(dispatch_block_wait(cancelled, DISPATCH_TIME_NOW) == 0, "invoked: done");
  _Block_release(cancelled);

  dispatch_block_t pending = dispatch_block_create(0, ^{});
  CHECK(dispatch_block_wait(pending, in_seconds(0.01)) != 0, "wait times out before the run");
  dispatch_block_perform(0, ^{ atomic_fetch_add(&ran, 1); });
  CHECK(atomic_load(&ran) == 2, "dispatch_block_perform runs at once");
  pending();
  CHECK(dispatch_block_wait(pending, DISPATCH_TIME_NOW) == 0, "called directly, it completes");
  _Block_release(pending);

  // A barrier block on a concurrent queue waits for the readers and runs alone.
  __block atomic_int readers = 0;
  __block atomic_int barrier_saw = -1;
  dispatch_semaphore_t release_reader = dispatch_semaphore_create(0);
  dispatch_semaphore_t reader_in = dispatch_semaphore_create(0);
  dispatch_async(queue, ^{
    atomic_fetch_add(&readers, 1);
    dispatch_semaphore_signal(reader_in);
    dispatch_semaphore_wait(release_reader, DISPATCH_TIME_FOREVER);
    atomic_fetch_sub(&readers, 1);
  });
  CHECK(dispatch_semaphore_wait(reader_in, in_seconds(30)) == 0, "reader in");
  dispatch_block_t barrier =
      dispatch_block_create(DISPATCH_BLOCK_BARRIER, ^{ atomic_store(&barrier_saw, atomic_load(&readers)); });
  dispatch_async(queue, barrier);
  dispatch_semaphore_signal(release_reader);
  CHECK(dispatch_block_wait(barrier, in_seconds(30)) == 0, "barrier block ran");
  CHECK(atomic_load(&barrier_saw) == 0, "the barrier block ran alone (saw %d readers)",
        atomic_load(&barrier_saw));
  _Block_release(barrier);
  // The queued copies are released when their items end: let every item end, so that no
  // record outlives this test (the next one counts them).
  dispatch_barrier_sync(queue, ^{});
  dispatch_release(reader_in);
  dispatch_release(release_reader);
  dispatch_release(notified);
  dispatch_release(queue);
}

// ---- sources ---------------------------------------------------------------------------------

static void test_read_source_and_cancel_handler(void) {
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0, "socketpair");
  int reader = pair[0], writer = pair[1];
  dispatch_queue_t queue = dispatch_queue_create("c.read", DISPATCH_QUEUE_SERIAL);
  dispatch_source_t source =
      dispatch_source_create(DISPATCH_SOURCE_TYPE_READ, (uintptr_t)reader, 0, queue);
  CHECK(source != NULL, "read source");
  CHECK(dispatch_source_get_handle(source) == (uintptr_t)reader, "handle");
  CHECK(dispatch_source_get_mask(source) == 0, "mask");
  dispatch_semaphore_t got = dispatch_semaphore_create(0);
  dispatch_semaphore_t cancelled = dispatch_semaphore_create(0);
  dispatch_semaphore_t registered = dispatch_semaphore_create(0);
  __block size_t available = 0;
  dispatch_source_set_registration_handler(source, ^{ dispatch_semaphore_signal(registered); });
  dispatch_source_set_event_handler(source, ^{
    available = dispatch_source_get_data(source);
    char buffer[16];
    ssize_t n = read(reader, buffer, sizeof buffer);
    (void)n;
    dispatch_semaphore_signal(got);
  });
  dispatch_source_set_cancel_handler(source, ^{
    close(reader);
    dispatch_semaphore_signal(cancelled);
  });
  dispatch_resume(source);  // A new source is inactive; resume activates it.
  CHECK(dispatch_semaphore_wait(registered, in_seconds(30)) == 0, "registration handler");
  CHECK(write(writer, "abc", 3) == 3, "write");
  CHECK(dispatch_semaphore_wait(got, in_seconds(30)) == 0, "read handler ran");
  CHECK(available == 3, "data is the bytes readable (%zu)", available);
  CHECK(dispatch_source_testcancel(source) == 0, "not cancelled yet");
  dispatch_source_cancel(source);
  CHECK(dispatch_source_testcancel(source) != 0, "cancelled");
  CHECK(dispatch_semaphore_wait(cancelled, in_seconds(30)) == 0, "cancel handler ran");
  close(writer);
  dispatch_release(source);
  dispatch_release(got);
  dispatch_release(cancelled);
  dispatch_release(registered);
  dispatch_release(queue);
  CHECK(dispatch_source_create(DISPATCH_SOURCE_TYPE_READ, (uintptr_t)-5, 0, NULL) == NULL,
        "a bad descriptor gives NULL");
}

static void test_write_source(void) {
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0, "socketpair");
  dispatch_queue_t queue = dispatch_queue_create("c.write", DISPATCH_QUEUE_SERIAL);
  dispatch_source_t source =
      dispatch_source_create(DISPATCH_SOURCE_TYPE_WRITE, (uintptr_t)pair[1], 0, queue);
  CHECK(source != NULL, "write source");
  dispatch_semaphore_t writable = dispatch_semaphore_create(0);
  dispatch_semaphore_t cancelled = dispatch_semaphore_create(0);
  __block uintptr_t space = 0;
  dispatch_source_set_event_handler(source, ^{
    space = dispatch_source_get_data(source);
    dispatch_source_cancel(source);  // One event is enough.
    dispatch_semaphore_signal(writable);
  });
  dispatch_source_set_cancel_handler(source, ^{ dispatch_semaphore_signal(cancelled); });
  dispatch_activate(source);
  CHECK(dispatch_semaphore_wait(writable, in_seconds(30)) == 0, "an empty socket is writable");
  CHECK(space > 0, "data estimates the space to write (%lu)", (unsigned long)space);
  CHECK(dispatch_semaphore_wait(cancelled, in_seconds(30)) == 0, "write source cancelled");
  close(pair[0]);
  close(pair[1]);
  dispatch_release(source);
  dispatch_release(writable);
  dispatch_release(cancelled);
  dispatch_release(queue);
}

static void timer_fired(void *context) {
  dispatch_source_t source = context;
  atomic_int *count = (atomic_int *)((char *)dispatch_get_context(source));
  (void)count;
}

struct timer_state {
  dispatch_source_t source;
  atomic_int fires;
  dispatch_semaphore_t done;
};

static void timer_handler_f(void *context) {
  struct timer_state *state = context;
  if (atomic_fetch_add(&state->fires, 1) + 1 == 3) dispatch_semaphore_signal(state->done);
}

static void timer_cancelled_f(void *context) {
  struct timer_state *state = context;
  dispatch_semaphore_signal(state->done);
}

static void test_timer_source(void) {
  (void)timer_fired;
  struct timer_state *state = calloc(1, sizeof *state);
  state->done = dispatch_semaphore_create(0);
  dispatch_queue_t queue = dispatch_queue_create("c.timer", DISPATCH_QUEUE_SERIAL);
  state->source = dispatch_source_create(DISPATCH_SOURCE_TYPE_TIMER, 0, 0, queue);
  dispatch_set_context(state->source, state);
  dispatch_source_set_event_handler_f(state->source, timer_handler_f);
  dispatch_source_set_cancel_handler_f(state->source, timer_cancelled_f);
  dispatch_source_set_timer(state->source, dispatch_time(DISPATCH_TIME_NOW, 0),
                            5 * NSEC_PER_MSEC, NSEC_PER_MSEC);
  dispatch_activate(state->source);
  CHECK(dispatch_semaphore_wait(state->done, in_seconds(30)) == 0, "three timer fires");
  dispatch_source_cancel(state->source);
  CHECK(dispatch_semaphore_wait(state->done, in_seconds(30)) == 0, "timer cancel handler");
  dispatch_release(state->source);
  dispatch_release(state->done);
  dispatch_release(queue);
  free(state);
}

static void test_data_sources(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.data", DISPATCH_QUEUE_SERIAL);
  dispatch_source_t add = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_ADD, 0, 0, queue);
  dispatch_source_t or = dispatch_source_create(DISPATCH_SOURCE_TYPE_DATA_OR, 0, 0, queue);
  __block uintptr_t added = 0, ored = 0;
  dispatch_semaphore_t seen = dispatch_semaphore_create(0);
  dispatch_source_set_event_handler(add, ^{
    added += dispatch_source_get_data(add);
    if (added == 10) dispatch_semaphore_signal(seen);
  });
  dispatch_source_set_event_handler(or, ^{
    ored |= dispatch_source_get_data(or);
    if (ored == 7) dispatch_semaphore_signal(seen);
  });
  dispatch_suspend(queue);  // Merge everything before a handler can run.
  dispatch_activate(add);
  dispatch_activate(or);
  for (int i = 1; i <= 4; i++) dispatch_source_merge_data(add, (uintptr_t)i);
  dispatch_source_merge_data(or, 1);
  dispatch_source_merge_data(or, 2);
  dispatch_source_merge_data(or, 4);
  dispatch_resume(queue);
  CHECK(dispatch_semaphore_wait(seen, in_seconds(30)) == 0, "data added");
  CHECK(dispatch_semaphore_wait(seen, in_seconds(30)) == 0, "data or-ed");
  CHECK(added == 10 && ored == 7, "merged data (%lu, %lu)", (unsigned long)added,
        (unsigned long)ored);
  dispatch_source_cancel(add);
  dispatch_source_cancel(or);
  dispatch_release(add);
  dispatch_release(or);
  dispatch_release(seen);
  dispatch_release(queue);
}

static void test_signal_source(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  dispatch_queue_t queue = dispatch_queue_create("c.signal", DISPATCH_QUEUE_SERIAL);
  dispatch_source_t source = dispatch_source_create(DISPATCH_SOURCE_TYPE_SIGNAL, SIGUSR1, 0, queue);
  CHECK(source != NULL, "signal source");
  dispatch_semaphore_t got = dispatch_semaphore_create(0);
  dispatch_source_set_event_handler(source, ^{ dispatch_semaphore_signal(got); });
  dispatch_activate(source);
  kill(getpid(), SIGUSR1);
  CHECK(dispatch_semaphore_wait(got, in_seconds(30)) == 0, "signal delivered");
  dispatch_source_cancel(source);
  dispatch_release(source);
  dispatch_release(got);
  dispatch_release(queue);
}

// A child that exits with status 5 once the returned descriptor (its stdin's other end) is
// closed; -1 on failure.
static pid_t spawn_waiting_child(int *stdin_write_end) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
  char *argv[] = {"/bin/sh", "-c", "read line; exit 5", NULL};
  pid_t pid = -1;
  int code = posix_spawn(&pid, "/bin/sh", &actions, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[0]);
  if (code != 0) {
    close(fds[1]);
    return -1;
  }
  *stdin_write_end = fds[1];
  return pid;
}

static void test_proc_source(void) {
  int stdin_write_end = -1;
  pid_t pid = spawn_waiting_child(&stdin_write_end);
  CHECK(pid > 0, "spawned a child");
  dispatch_queue_t queue = dispatch_queue_create("c.proc", DISPATCH_QUEUE_SERIAL);
  dispatch_source_t source =
      dispatch_source_create(DISPATCH_SOURCE_TYPE_PROC, (uintptr_t)pid, DISPATCH_PROC_EXIT, queue);
  CHECK(source != NULL, "proc source");
  CHECK(dispatch_source_get_handle(source) == (uintptr_t)pid, "handle is the pid");
  CHECK(dispatch_source_get_mask(source) == DISPATCH_PROC_EXIT, "mask");
  dispatch_semaphore_t exited = dispatch_semaphore_create(0);
  dispatch_semaphore_t cancelled = dispatch_semaphore_create(0);
  __block uintptr_t data = 0;
  __block int runs = 0;
  dispatch_source_set_event_handler(source, ^{
    data = dispatch_source_get_data(source);
    runs++;
    dispatch_semaphore_signal(exited);
  });
  dispatch_source_set_cancel_handler(source, ^{ dispatch_semaphore_signal(cancelled); });
  dispatch_activate(source);
  close(stdin_write_end);  // The child exits now.
  CHECK(dispatch_semaphore_wait(exited, in_seconds(30)) == 0, "exit delivered");
  int status = -1;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid still collects the child");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 5, "the child's status (%d)", status);
  dispatch_source_cancel(source);
  CHECK(dispatch_semaphore_wait(cancelled, in_seconds(30)) == 0, "proc cancel handler");
  dispatch_sync(queue, ^{});
  CHECK(data == DISPATCH_PROC_EXIT, "data is DISPATCH_PROC_EXIT (%lx)", (unsigned long)data);
  CHECK(runs == 1, "fired once (%d)", runs);
  dispatch_release(source);

  // A reaped child's pid: as libdispatch (where it has PROC sources), a source that delivers
  // DISPATCH_PROC_EXIT once, at activation, so a watcher need not race the exit.
  dispatch_source_t gone =
      dispatch_source_create(DISPATCH_SOURCE_TYPE_PROC, (uintptr_t)pid, DISPATCH_PROC_EXIT, queue);
  CHECK(gone != NULL, "a source for a reaped pid");
  __block unsigned long gone_data = 0;
  __block int gone_runs = 0;
  dispatch_source_set_event_handler(gone, ^{
    gone_data = dispatch_source_get_data(gone);
    gone_runs++;
    dispatch_semaphore_signal(exited);
  });
  dispatch_activate(gone);
  CHECK(dispatch_semaphore_wait(exited, in_seconds(30)) == 0, "reaped pid: exit delivered");
  dispatch_source_cancel(gone);
  dispatch_sync(queue, ^{});
  CHECK(gone_data == DISPATCH_PROC_EXIT && gone_runs == 1, "reaped pid: data %lx, runs %d",
        gone_data, gone_runs);
  dispatch_release(gone);
  CHECK(dispatch_source_create(DISPATCH_SOURCE_TYPE_PROC, 0, DISPATCH_PROC_EXIT, queue) == NULL,
        "NULL for pid 0");
  CHECK(dispatch_source_create(DISPATCH_SOURCE_TYPE_PROC, (uintptr_t)INT_MAX, DISPATCH_PROC_EXIT,
                               queue) == NULL,
        "NULL for a pid above pid_max (no process can have it)");
  dispatch_release(exited);
  dispatch_release(cancelled);
  dispatch_release(queue);
}

static void test_memorypressure_source(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.pressure", DISPATCH_QUEUE_SERIAL);
  CHECK(dispatch_source_create(DISPATCH_SOURCE_TYPE_MEMORYPRESSURE, 1,
                               DISPATCH_MEMORYPRESSURE_WARN, queue) == NULL,
        "NULL for a handle");
  dispatch_source_t source = dispatch_source_create(
      DISPATCH_SOURCE_TYPE_MEMORYPRESSURE, 0,
      DISPATCH_MEMORYPRESSURE_NORMAL | DISPATCH_MEMORYPRESSURE_WARN |
          DISPATCH_MEMORYPRESSURE_CRITICAL,
      queue);
  if (access("/proc/pressure/memory", F_OK) != 0) {
    CHECK(source == NULL, "NULL without pressure stall information");
    dispatch_release(queue);
    return;
  }
  CHECK(source != NULL, "memory pressure source");
  CHECK(dispatch_source_get_mask(source) == 0x7, "mask");
  dispatch_semaphore_t registered = dispatch_semaphore_create(0);
  dispatch_semaphore_t cancelled = dispatch_semaphore_create(0);
  dispatch_source_set_event_handler(source, ^{
    uintptr_t levels = dispatch_source_get_data(source);
    CHECK(levels != 0 && (levels & ~(uintptr_t)0x7) == 0, "levels in the mask (%lx)",
          (unsigned long)levels);
  });
  dispatch_source_set_registration_handler(source, ^{ dispatch_semaphore_signal(registered); });
  dispatch_source_set_cancel_handler(source, ^{ dispatch_semaphore_signal(cancelled); });
  dispatch_activate(source);
  CHECK(dispatch_semaphore_wait(registered, in_seconds(30)) == 0, "pressure registration");
  dispatch_source_cancel(source);
  CHECK(dispatch_semaphore_wait(cancelled, in_seconds(30)) == 0, "pressure cancel handler");
  dispatch_release(source);
  dispatch_release(registered);
  dispatch_release(cancelled);
  dispatch_release(queue);
}

// ---- vnode -----------------------------------------------------------------------------------

// A file watched as libdispatch's documentation shows it: open, a VNODE source with the flags
// wanted, the flags read with dispatch_source_get_data in the handler, the descriptor closed in
// the cancel handler. Each change is waited for before the next (no sleeps).
static atomic_ulong vnode_seen;
static void test_vnode_source(void) {
  char directory[] = "/tmp/loopdispatch-capi-vnode-XXXXXX";
  CHECK(mkdtemp(directory) != NULL, "mkdtemp");
  char path[128], moved[128];
  snprintf(path, sizeof path, "%s/watched", directory);
  snprintf(moved, sizeof moved, "%s/moved", directory);
  int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  CHECK(fd >= 0, "open %s", path);
  dispatch_queue_t queue = dispatch_queue_create("c.vnode", DISPATCH_QUEUE_SERIAL);
  dispatch_source_t source = dispatch_source_create(
      DISPATCH_SOURCE_TYPE_VNODE, (uintptr_t)fd,
      DISPATCH_VNODE_WRITE | DISPATCH_VNODE_EXTEND | DISPATCH_VNODE_RENAME | DISPATCH_VNODE_DELETE,
      queue);
  CHECK(source != NULL, "vnode source");
  CHECK(dispatch_source_get_handle(source) == (uintptr_t)fd, "handle");
  CHECK(dispatch_source_get_mask(source) == 0x27, "mask");
  dispatch_semaphore_t changed = dispatch_semaphore_create(0);
  dispatch_semaphore_t closed = dispatch_semaphore_create(0);
  atomic_store(&vnode_seen, 0);
  dispatch_source_set_event_handler(source, ^{
    atomic_fetch_or(&vnode_seen, dispatch_source_get_data(source));
    dispatch_semaphore_signal(changed);
  });
  dispatch_source_set_cancel_handler(source, ^{
    close(fd);
    dispatch_semaphore_signal(closed);
  });
  dispatch_activate(source);

  CHECK(write(fd, "hello", 5) == 5, "write");
  while ((atomic_load(&vnode_seen) & DISPATCH_VNODE_WRITE) == 0) {
    if (dispatch_semaphore_wait(changed, in_seconds(30)) != 0) break;
  }
  CHECK(atomic_load(&vnode_seen) == (DISPATCH_VNODE_WRITE | DISPATCH_VNODE_EXTEND),
        "write reported WRITE|EXTEND (got %#lx)", atomic_load(&vnode_seen));

  atomic_store(&vnode_seen, 0);
  CHECK(rename(path, moved) == 0, "rename");
  while ((atomic_load(&vnode_seen) & DISPATCH_VNODE_RENAME) == 0) {
    if (dispatch_semaphore_wait(changed, in_seconds(30)) != 0) break;
  }
  CHECK(atomic_load(&vnode_seen) == DISPATCH_VNODE_RENAME, "rename reported RENAME (got %#lx)",
        atomic_load(&vnode_seen));

  atomic_store(&vnode_seen, 0);
  CHECK(unlink(moved) == 0, "unlink");
  while ((atomic_load(&vnode_seen) & DISPATCH_VNODE_DELETE) == 0) {
    if (dispatch_semaphore_wait(changed, in_seconds(30)) != 0) break;
  }
  CHECK(atomic_load(&vnode_seen) & DISPATCH_VNODE_DELETE, "unlink reported DELETE (got %#lx)",
        atomic_load(&vnode_seen));

  dispatch_source_cancel(source);
  CHECK(dispatch_semaphore_wait(closed, in_seconds(30)) == 0, "cancel handler closed the fd");
  dispatch_release(source);
  rmdir(directory);

  // NULL for a descriptor that is not open (libdispatch's documented failure result).
  int closed_fd = dup(0);
  close(closed_fd);
  CHECK(dispatch_source_create(DISPATCH_SOURCE_TYPE_VNODE, (uintptr_t)closed_fd,
                               DISPATCH_VNODE_WRITE, queue) == NULL,
        "NULL for a closed descriptor");
  CHECK(dispatch_source_create(DISPATCH_SOURCE_TYPE_VNODE, (uintptr_t)-1, DISPATCH_VNODE_WRITE,
                               queue) == NULL,
        "NULL for descriptor -1");
  dispatch_release(changed);
  dispatch_release(closed);
  dispatch_release(queue);
}

// ---- data ------------------------------------------------------------------------------------

// dispatch_data_t lifetimes, run under AddressSanitizer and LeakSanitizer by `make test-c`: a
// FREE buffer shared by a concatenation, a subrange, a map and an apply region is freed once
// (a leak or a double free fails the run), a custom destructor runs once after the last
// object, and context and finalizer work on data objects as on other objects.
static void test_data(void) {
  char *heap = malloc(8);
  memcpy(heap, "abcdefgh", 8);
  dispatch_data_t owned = dispatch_data_create(heap, 8, NULL, DISPATCH_DATA_DESTRUCTOR_FREE);
  dispatch_data_t copy = dispatch_data_create("12345", 5, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
  dispatch_data_t both = dispatch_data_create_concat(owned, copy);
  dispatch_data_t middle = dispatch_data_create_subrange(both, 6, 4);
  dispatch_release(owned);
  const void *buffer = NULL;
  size_t size = 0;
  dispatch_data_t map = dispatch_data_create_map(middle, &buffer, &size);
  CHECK(size == 4 && memcmp(buffer, "gh12", 4) == 0, "map of a subrange across two regions");
  __block size_t seen = 0;
  bool all = dispatch_data_apply(both, ^bool(dispatch_data_t region, size_t offset,
                                             const void *bytes, size_t length) {
    dispatch_retain(region);  // A region may be kept beyond the applier's call.
    dispatch_release(region);
    CHECK(offset == seen, "apply offset %zu", offset);
    CHECK(bytes != NULL && length == dispatch_data_get_size(region), "apply region");
    seen += length;
    return true;
  });
  CHECK(all && seen == 13, "apply saw %zu bytes", seen);
  size_t offset = 0;
  dispatch_data_t region = dispatch_data_copy_region(both, 9, &offset);
  CHECK(offset == 8 && dispatch_data_get_size(region) == 5, "copy_region offset %zu", offset);
  dispatch_release(region);
  dispatch_release(both);
  dispatch_release(middle);
  dispatch_release(map);
  dispatch_release(copy);

  finalizer_ran = dispatch_semaphore_create(0);
  dispatch_semaphore_t destroyed_once = dispatch_semaphore_create(0);
  __block atomic_int destructor_runs = 0;
  static const char text[] = "static";
  dispatch_data_t adopted = dispatch_data_create(text, 6, NULL, ^{
    atomic_fetch_add(&destructor_runs, 1);
    dispatch_semaphore_signal(destroyed_once);
  });
  int *context = malloc(sizeof *context);
  *context = 5;
  int before = atomic_load(&finalized);
  dispatch_set_context(adopted, context);
  dispatch_set_finalizer_f(adopted, finalize_context);
  CHECK(dispatch_get_context(adopted) == context, "data context");
  dispatch_data_t tail = dispatch_data_create_subrange(adopted, 3, 3);
  dispatch_release(adopted);
  CHECK(atomic_load(&destructor_runs) == 0, "the subrange still uses the buffer");
  dispatch_release(tail);
  CHECK(dispatch_semaphore_wait(finalizer_ran, in_seconds(30)) == 0, "data finalizer ran");
  CHECK(atomic_load(&finalized) == before + 5, "data finalizer got its context");
  CHECK(dispatch_semaphore_wait(destroyed_once, in_seconds(30)) == 0, "destructor ran");
  CHECK(atomic_load(&destructor_runs) == 1, "destructor ran once");
  dispatch_release(destroyed_once);
  dispatch_release(finalizer_ran);
  // DISPATCH_DATA_DESTRUCTOR_MUNMAP unmaps the page after the last release (libdispatch on
  // Linux traps there instead: see Tests/CDiff/diff_data.c). msync fails with ENOMEM once
  // the page is gone.
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *mapped = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(mapped != MAP_FAILED, "mmap");
  memcpy(mapped, "mapped", 6);
  dispatch_data_t unmapped = dispatch_data_create(mapped, page, NULL, DISPATCH_DATA_DESTRUCTOR_MUNMAP);
  dispatch_data_t part = dispatch_data_create_subrange(unmapped, 0, 6);
  dispatch_release(unmapped);
  CHECK(msync(mapped, page, MS_ASYNC) == 0, "a subrange keeps the mapped page");
  dispatch_release(part);
  int gone = 0;
  for (int tries = 0; tries < 10000 && !gone; tries++) {
    gone = msync(mapped, page, MS_ASYNC) == -1 && errno == ENOMEM;
    if (!gone) usleep(1000);
  }
  CHECK(gone, "the MUNMAP destructor unmapped the page after the last release");
}

// ---- I/O channels -------------------------------------------------------------------------------

// dispatch_io and dispatch_read/dispatch_write under AddressSanitizer and LeakSanitizer: every
// copied block (cleanup, handlers, barrier) is released, on the normal path, after STOP, for
// a bad descriptor, and for a channel that is never used.
static void test_io(void) {
  dispatch_queue_t queue = dispatch_queue_create("c.io", DISPATCH_QUEUE_SERIAL);
  dispatch_semaphore_t step = dispatch_semaphore_create(0);
  int ends[2];
  CHECK(pipe(ends) == 0, "pipe");
  int read_end = ends[0], write_end = ends[1];
  __block int cleanups = 0;
  dispatch_io_t reader = dispatch_io_create(DISPATCH_IO_STREAM, read_end, queue, ^(int error) {
    CHECK(error == 0, "reader cleanup error %d", error);
    cleanups++;
    dispatch_semaphore_signal(step);
  });
  dispatch_io_set_low_water(reader, 1);
  __block size_t got = 0;
  dispatch_io_read(reader, 0, 5, queue, ^(bool done, dispatch_data_t data, int error) {
    CHECK(error == 0, "read error %d", error);
    if (data != NULL) got += dispatch_data_get_size(data);
    if (done) dispatch_semaphore_signal(step);
  });
  dispatch_data_t hello = dispatch_data_create("hello", 5, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
  dispatch_write(write_end, hello, queue, ^(dispatch_data_t left, int error) {
    CHECK(left == NULL && error == 0, "dispatch_write error %d", error);
    dispatch_semaphore_signal(step);
  });
  CHECK(dispatch_semaphore_wait(step, in_seconds(30)) == 0, "dispatch_write finished");
  CHECK(dispatch_semaphore_wait(step, in_seconds(30)) == 0, "read finished");
  CHECK(got == 5, "read %zu bytes", got);
  __block int barrier_ran = 0;
  dispatch_io_barrier(reader, ^{
    barrier_ran = dispatch_io_get_descriptor(reader) == read_end;
    dispatch_semaphore_signal(step);
  });
  // Before the close: a closed channel's descriptor reads as -1, in libdispatch too.
  CHECK(dispatch_semaphore_wait(step, in_seconds(30)) == 0, "barrier ran");
  // A read that waits for bytes, then STOP: it ends with ECANCELED.
  dispatch_io_read(reader, 0, 10, queue, ^(bool done, dispatch_data_t data, int error) {
    (void)data;
    if (done) {
      CHECK(error == ECANCELED, "stopped read error %d", error);
      dispatch_semaphore_signal(step);
    }
  });
  dispatch_io_close(reader, DISPATCH_IO_STOP);
  dispatch_release(reader);
  CHECK(dispatch_semaphore_wait(step, in_seconds(30)) == 0, "stopped read finished");
  CHECK(dispatch_semaphore_wait(step, in_seconds(30)) == 0, "reader cleaned up");
  CHECK(barrier_ran == 1 && cleanups == 1, "barrier %d, cleanups %d", barrier_ran, cleanups);

  // A bad descriptor, and a channel never used: both clean up, with and without an error.
  dispatch_io_t bad = dispatch_io_create(DISPATCH_IO_STREAM, -1, queue, ^(int error) {
    CHECK(error == EBADF, "bad descriptor cleanup error %d", error);
    dispatch_semaphore_signal(step);
  });
  dispatch_io_write(bad, 0, hello, queue, ^(bool done, dispatch_data_t left, int error) {
    (void)left;
    if (done) CHECK(error == EBADF, "bad descriptor write error %d", error);
  });
  dispatch_io_close(bad, 0);
  dispatch_release(bad);
  CHECK(dispatch_semaphore_wait(step, in_seconds(30)) == 0, "bad channel cleaned up");
  dispatch_io_t unused = dispatch_io_create(DISPATCH_IO_STREAM, write_end, queue, ^(int error) {
    CHECK(error == 0, "unused channel cleanup error %d", error);
    dispatch_semaphore_signal(step);
  });
  dispatch_release(unused);  // Released without a close: cleaned up all the same.
  CHECK(dispatch_semaphore_wait(step, in_seconds(30)) == 0, "unused channel cleaned up");
  dispatch_release(hello);
  close(read_end);
  close(write_end);
  dispatch_sync(queue, ^{});
  dispatch_release(step);
  dispatch_release(queue);
}

// ---- misuse ----------------------------------------------------------------------------------

static int misuse(const char *name) {
  if (strcmp(name, "over-resume") == 0) {
    dispatch_queue_t queue = dispatch_queue_create("c.balanced", DISPATCH_QUEUE_SERIAL);
    dispatch_resume(queue);
  } else if (strcmp(name, "sync-on-current") == 0) {
    dispatch_queue_t queue = dispatch_queue_create("c.mine", DISPATCH_QUEUE_SERIAL);
    dispatch_sync(queue, ^{ dispatch_sync(queue, ^{}); });
  } else if (strcmp(name, "group-over-leave") == 0) {
    dispatch_group_leave(dispatch_group_create());
  } else if (strcmp(name, "not-a-queue") == 0) {
    dispatch_group_t group = dispatch_group_create();
    dispatch_async((dispatch_queue_t)(void *)group, ^{});
  } else if (strcmp(name, "assert-queue") == 0) {
    dispatch_assert_queue(dispatch_queue_create("c.elsewhere", DISPATCH_QUEUE_SERIAL));
  } else if (strcmp(name, "wait-plain-block") == 0) {
    dispatch_block_wait(^{}, DISPATCH_TIME_NOW);
  } else if (strcmp(name, "wait-block-run-twice") == 0) {
    dispatch_block_t block = dispatch_block_create(0, ^{});
    block();
    block();
    dispatch_block_wait(block, DISPATCH_TIME_NOW);
  } else if (strcmp(name, "release-suspended") == 0) {
    dispatch_queue_t queue = dispatch_queue_create("c.suspended", DISPATCH_QUEUE_SERIAL);
    dispatch_suspend(queue);
    dispatch_async(queue, ^{});
    dispatch_release(queue);
    sleep(5);  // Not synchronisation: a crash is expected before this returns.
  } else if (strcmp(name, "not-data") == 0) {
    dispatch_queue_t queue = dispatch_queue_create("c.not-data", DISPATCH_QUEUE_SERIAL);
    (void)dispatch_data_get_size((dispatch_data_t)(void *)queue);
  } else if (strcmp(name, "data-null-buffer") == 0) {
    dispatch_data_t data = dispatch_data_create(NULL, 8, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
    dispatch_release(data);
  } else if (strcmp(name, "proc-fork") == 0) {
    (void)dispatch_source_create(DISPATCH_SOURCE_TYPE_PROC, (uintptr_t)getpid(),
                                 DISPATCH_PROC_EXIT | DISPATCH_PROC_FORK, NULL);
  } else if (strcmp(name, "pressure-unknown-bits") == 0) {
    (void)dispatch_source_create(DISPATCH_SOURCE_TYPE_MEMORYPRESSURE, 0, 0x10, NULL);
  } else if (strcmp(name, "vnode-funlock") == 0) {
    dispatch_source_create(DISPATCH_SOURCE_TYPE_VNODE, 0, DISPATCH_VNODE_FUNLOCK, NULL);
  } else {
    fprintf(stderr, "unknown misuse case %s\n", name);
    return 2;
  }
  fprintf(stderr, "misuse %s did not crash\n", name);
  return 1;
}

// ---- dispatch_main ---------------------------------------------------------------------------

static atomic_int main_order;
static int event_pipe[2];
static struct event *c_event;
static pthread_t main_thread_id;

// A libevent event the program added itself to the main loop's event_base.
static void c_event_fired(evutil_socket_t fd, short what, void *argument) {
  (void)argument;
  char byte;
  CHECK(read(fd, &byte, 1) == 1 && (what & EV_READ), "own event read its byte");
  CHECK(pthread_self() == main_thread_id, "own libevent event runs on the main thread");
  event_free(c_event);
  close(event_pipe[0]);
  close(event_pipe[1]);
  atomic_fetch_add(&main_order, 10);  // Seen by the last main-queue block.
}

static void on_main_before(void *context) {
  (void)context;
  CHECK(atomic_fetch_add(&main_order, 1) == 0, "posted before dispatch_main: runs first");
  CHECK(dispatch_get_current_queue() == dispatch_get_main_queue(), "on the main queue");
  CHECK(strcmp(dispatch_queue_get_label(DISPATCH_CURRENT_QUEUE_LABEL),
               dispatch_queue_get_label(dispatch_get_main_queue())) == 0,
        "main queue label");
  struct event_base *base = loopdispatch_main_event_base();
  CHECK(base != NULL, "the main loop's event_base");
  CHECK(pipe(event_pipe) == 0, "pipe");
  c_event = event_new(base, event_pipe[0], EV_READ, c_event_fired, NULL);
  CHECK(c_event != NULL && event_add(c_event, NULL) == 0, "own event added beside the main queue");
  CHECK(write(event_pipe[1], "x", 1) == 1, "pipe write");
  // Posted after dispatch_main started, from another thread.
  dispatch_async(dispatch_get_global_queue(0, 0), ^{
    dispatch_after(dispatch_time(DISPATCH_TIME_NOW, 5 * NSEC_PER_MSEC), dispatch_get_main_queue(), ^{
      CHECK(atomic_fetch_add(&main_order, 1) == 11,
            "posted after dispatch_main: runs second, after the program's own event");
      CHECK(pthread_equal(pthread_self(), main_thread_id),
            "main-queue work runs on the process main thread");
      printf("capi_tests: %d checks, %d failures\n", checks, failures);
      fflush(stdout);
      exit(failures == 0 ? 0 : 1);
    });
  });
}

// ---- Serial queues beside neighbours ---------------------------------------------------------

// The threads of this process named ld.oc.* (the overcommit workers), counted in /proc.
static int overcommit_threads(void) {
  DIR *tasks = opendir("/proc/self/task");
  if (tasks == NULL) return -1;
  int count = 0;
  struct dirent *entry;
  while ((entry = readdir(tasks)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    char path[64], name[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", entry->d_name);
    FILE *file = fopen(path, "r");
    if (file == NULL) continue;
    if (fgets(name, sizeof name, file) != NULL && strncmp(name, "ld.oc.", 6) == 0) count++;
    fclose(file);
  }
  closedir(tasks);
  return count;
}

// Runs on the default global queue's behalf, wherever the drain ran: the queue an item sees
// as current does not depend on the machine's load (a crash otherwise).
static void note_ran(void *context) {
  dispatch_assert_queue(dispatch_get_global_queue(0, 0));
  dispatch_semaphore_signal((dispatch_semaphore_t)context);
}

// `capi_tests neighbours yes|no`, run with LOOPDISPATCH_TEST_NEIGHBOURS=1 or 2 (a debug
// library's stand-in for the governor's verdict that other processes hold our CPUs): a serial
// queue from dispatch_queue_create drains on an overcommit thread of its own beside
// neighbours, as libdispatch's serial queues always do, and on the plain workers otherwise; a
// concurrent queue's items stay on the plain workers either way; both see the default global
// queue as current.
static int neighbours(const char *expected) {
  int want = strcmp(expected, "yes") == 0;
  dispatch_semaphore_t ran = dispatch_semaphore_create(0);
  dispatch_queue_t concurrent = dispatch_queue_create("c.neighbours.concurrent",
                                                      DISPATCH_QUEUE_CONCURRENT);
  dispatch_async_f(concurrent, ran, note_ran);
  dispatch_semaphore_wait(ran, DISPATCH_TIME_FOREVER);
  int before = overcommit_threads();
  dispatch_queue_t serial = dispatch_queue_create("c.neighbours.serial", NULL);
  dispatch_async_f(serial, ran, note_ran);
  dispatch_semaphore_wait(ran, DISPATCH_TIME_FOREVER);
  int after = overcommit_threads();
  dispatch_release(serial);
  dispatch_release(concurrent);
  dispatch_release(ran);
  if (before != 0 || (after > 0) != want) {
    fprintf(stderr, "neighbours %s: %d overcommit threads before the serial item, %d after\n",
            expected, before, after);
    return 1;
  }
  printf("ok neighbours %s (%d overcommit thread(s))\n", expected, after);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "misuse") == 0) return misuse(argv[2]);
  if (argc == 3 && strcmp(argv[1], "neighbours") == 0) return neighbours(argv[2]);
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_serial_queue_order_and_sync();
  test_concurrent_queue_and_barriers();
  test_concurrent_sync_readers();
  test_global_queues();
  test_debug();
  test_assertions_and_variants();
  test_targets_suspend_inactive();
  test_context_and_finalizer();
  test_specifics();
  test_groups();
  test_semaphores();
  test_once();
  test_apply();
  test_after_and_time();
  test_block_objects();
  test_block_object_lifetime();
  test_read_source_and_cancel_handler();
  test_write_source();
  test_timer_source();
  test_data_sources();
  test_signal_source();
  test_proc_source();
  test_memorypressure_source();
  test_vnode_source();
  test_sanitizer_layout();
  test_wide_serial_queue();
  test_data();
  test_io();
  static pthread_t main_thread;
  main_thread = pthread_self();
  main_thread_id = main_thread;
  // queue.h: the main and global queues ignore dispatch_set_context.
  dispatch_set_context(dispatch_get_main_queue(), &main_thread);
  CHECK(dispatch_get_context(dispatch_get_main_queue()) == NULL, "main queue has no context");
  dispatch_set_context(dispatch_get_global_queue(0, 0), &main_thread);
  CHECK(dispatch_get_context(dispatch_get_global_queue(0, 0)) == NULL, "no global context");
  dispatch_async_f(dispatch_get_main_queue(), NULL, on_main_before);
  dispatch_main();
}
