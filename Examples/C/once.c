/*
 * GCD concept: a thread-safe singleton with dispatch_once (seed article 001; the C version
 * of Sources/Examples/Seeds/Once.swift).
 *
 * The naive lazy singleton checks "is there an instance yet?" and, if not, creates one. Two
 * threads can both pass the check before either stores its instance: each access is safe,
 * the check-then-create sequence is not. dispatch_once runs the creation exactly once; every
 * other caller waits until it has finished and then sees the same instance.
 *
 * Both versions face the same forced race: `racers` threads released at the same moment.
 */
#include "seed.h"

enum { racers = 8 };

/* The shared object; `number` tells instances apart. */
struct photo_manager {
  int number;
};

static struct photo_manager *make_manager(atomic_int *created) {
  struct photo_manager *manager = malloc(sizeof *manager);
  if (manager == NULL) fail("out of memory");
  manager->number = atomic_fetch_add(created, 1) + 1;
  return manager;
}

/* ---- Check, then create: wrong, even though each step holds a lock ---------------------- */

static pthread_mutex_t naive_lock = PTHREAD_MUTEX_INITIALIZER;
static struct photo_manager *naive_instance;  // Protected by: naive_lock.
static atomic_int naive_created;
/* Every instance made, to free them at the end. Protected by: naive_lock. */
static struct photo_manager *naive_made[racers];

/* `after_check` runs between the check and the creation: the demo holds every racer there
 * until all have checked, the interleaving that bites by bad luck in real programs. */
static struct photo_manager *naive_shared(void (^after_check)(void)) {
  pthread_mutex_lock(&naive_lock);
  struct photo_manager *existing = naive_instance;
  pthread_mutex_unlock(&naive_lock);
  if (existing != NULL) return existing;
  after_check();
  struct photo_manager *fresh = make_manager(&naive_created);
  pthread_mutex_lock(&naive_lock);
  naive_instance = fresh;
  if (fresh->number <= racers) naive_made[fresh->number - 1] = fresh;
  pthread_mutex_unlock(&naive_lock);
  return fresh;
}

/* ---- dispatch_once around the creation: right ------------------------------------------ */

/* Written only inside the once block; read after dispatch_once returns, which publishes the
 * block's writes to every caller. */
static struct photo_manager *once_instance;
static atomic_int once_created;

/* `while_creating` runs inside the creation (the demo holds it there until every racer has
 * reached once_shared). */
static struct photo_manager *once_shared(void (^while_creating)(void)) {
  static dispatch_once_t predicate;
  dispatch_once(&predicate, ^{
    while_creating();
    once_instance = make_manager(&once_created);
  });
  return once_instance;
}

int main(void) {
  // 1. The naive singleton: every racer passes the check before any of them creates.
  say("1. naive check-then-create, %d racers released together", racers);
  struct rendezvous *all_checked = &(struct rendezvous){0};
  rendezvous_init(all_checked, racers);
  run_on_new_threads(racers, "racer", ^(int index) {
    (void)index;
    struct photo_manager *manager = naive_shared(^{
      rendezvous_arrive_and_wait(all_checked);
    });
    say("got PhotoManager #%d", manager->number);
  });
  rendezvous_destroy(all_checked);
  int naive = atomic_load(&naive_created);
  say("naive: %d instances created by %d racers", naive, racers);

  // 2. With dispatch_once: the creation waits until every racer has arrived at
  //    once_shared; they all wait for it and get the same instance.
  say("2. Once, %d racers released together", racers);
  dispatch_semaphore_t arrived = dispatch_semaphore_create(0);
  __block int first = 0;
  __block bool all_same = true;
  pthread_mutex_t *numbers_lock = &(pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  run_on_new_threads(racers, "racer", ^(int index) {
    (void)index;
    dispatch_semaphore_signal(arrived);
    struct photo_manager *manager = once_shared(^{
      for (int i = 0; i < racers; i++) {
        dispatch_semaphore_wait(arrived, dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_SEC));
      }
      say("creating the instance; all %d racers have reached shared()", racers);
    });
    pthread_mutex_lock(numbers_lock);
    if (first == 0) first = manager->number;
    all_same = all_same && manager->number == first;
    pthread_mutex_unlock(numbers_lock);
    say("got PhotoManager #%d", manager->number);
  });
  dispatch_release(arrived);
  int once = atomic_load(&once_created);
  say("with Once: %d instance%s created by %d racers", once, once == 1 ? "" : "s", racers);

  for (int i = 0; i < racers; i++) free(naive_made[i]);
  free(once_instance);
  if (naive != racers || once != 1 || first != 1 || !all_same) fail("once: FAILED");
  return 0;
}
