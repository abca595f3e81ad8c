/*
 * GCD concept: dispatch groups (seed article 000; the C version of
 * Sources/Examples/Seeds/Group.swift).
 *
 * A group counts unfinished work. dispatch_group_wait blocks the caller until the count
 * drops to zero, like joining threads; with a timeout it returns non-zero instead of blocking
 * for ever. dispatch_group_notify asks for a block to be submitted to a queue at that moment,
 * blocking nobody: here the main queue, which dispatch_main() drains on the main thread. The
 * notification block checks the results and exits: dispatch_main() never returns.
 */
#include "seed.h"

static const char *const names[] = {"a.jpg", "b.jpg", "c.jpg"};

/* The results the final check looks at. */
struct results {
  intptr_t joined, early, late;
  atomic_int downloaded;
  atomic_int uploaded;
};

/* One upload finishing (a dispatch_after_f context): counts itself and leaves the group. */
struct upload {
  struct results *results;
  dispatch_group_t group;
  int number;
};

static void upload_done(void *context) {
  struct upload *upload = context;
  say("upload %d done", upload->number);
  atomic_fetch_add(&upload->results->uploaded, 1);
  dispatch_group_leave(upload->group);
  dispatch_release(upload->group);
  free(upload);
}

int main(void) {
  struct results *results = &(struct results){0};
  dispatch_queue_t global = dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0);

  // 1. wait: three downloads on a global queue, joined.
  say("1. three downloads in a group; this thread waits for all of them");
  dispatch_group_t downloads = dispatch_group_create();
  for (int i = 0; i < 3; i++) {
    const char *name = names[i];
    dispatch_group_async(downloads, global, ^{
      say("download %s", name);
      atomic_fetch_add(&results->downloaded, 1);
    });
  }
  results->joined =
      dispatch_group_wait(downloads, dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_SEC));
  say("wait returned %s: %d of 3 downloads finished", wait_result(results->joined),
      atomic_load(&results->downloaded));
  dispatch_release(downloads);

  // 2. A timed wait gives up while a task is held (here: behind a semaphore).
  say("2. a timed wait on a group whose task is still held");
  dispatch_group_t held = dispatch_group_create();
  dispatch_semaphore_t release = dispatch_semaphore_create(0);
  dispatch_group_async(held, global, ^{
    dispatch_semaphore_wait(release, DISPATCH_TIME_FOREVER);
    say("held task released");
  });
  results->early = dispatch_group_wait(held, dispatch_time(DISPATCH_TIME_NOW, 20 * NSEC_PER_MSEC));
  say("wait(timeout: 20 ms) returned %s", wait_result(results->early));
  dispatch_semaphore_signal(release);
  results->late = dispatch_group_wait(held, dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_SEC));
  say("after the release, wait returned %s", wait_result(results->late));
  dispatch_release(held);
  dispatch_release(release);  // The task has left the group: it is done with the semaphore.

  // 3. notify: enter/leave by hand around work that ends later; the notification runs on
  //    the main queue once the last one leaves.
  say("3. three uploads; notify on the main queue when all are done");
  dispatch_group_t uploads = dispatch_group_create();
  for (int number = 1; number <= 3; number++) {
    dispatch_group_enter(uploads);
    struct upload *upload = malloc(sizeof *upload);
    if (upload == NULL) fail("out of memory");
    dispatch_retain(uploads);  // Released by upload_done.
    *upload = (struct upload){results, uploads, number};
    dispatch_after_f(dispatch_time(DISPATCH_TIME_NOW, 5 * number * (int64_t)NSEC_PER_MSEC), global,
                     upload, upload_done);
  }
  dispatch_group_notify(uploads, dispatch_get_main_queue(), ^{
    int uploaded = atomic_load(&results->uploaded);
    say("notify: %d of 3 uploads done (on the main thread: %s)", uploaded,
        seed_on_main_thread() ? "true" : "false");
    if (results->joined != 0 || results->early == 0 || results->late != 0 || uploaded != 3 ||
        !seed_on_main_thread()) {
      fail("group: FAILED");
    }
    exit(0);
  });
  dispatch_release(uploads);  // The pending notification keeps the group alive.
  say("notify registered; the main thread runs dispatch_main() meanwhile");
  fail_after("group", 10);
  dispatch_main();
}
