/*
 * GCD concept: the reader/writer store (seed articles 001 and 004; the C version of
 * Sources/Examples/Seeds/Barrier.swift).
 *
 * A *concurrent* queue guards a table. Reads use dispatch_sync: they return a value, run on
 * the caller's thread, and may run side by side. Writes use dispatch_barrier_async_f: the
 * barrier waits until the reads already inside have left, runs alone, and only then lets
 * later work in. Unlike a lock, readers never block each other and a writer never blocks its
 * caller.
 *
 * The census counts, with atomics, who is inside the queue at each moment, so the output can
 * show reads overlapping and writes never overlapping anything.
 */
#include "seed.h"

enum { key_count = 3 };
static const char *const keys[key_count] = {"a", "b", "c"};

/* A photo store: every access to `table` goes through `queue`. */
struct photo_store {
  dispatch_queue_t queue;
  // Only touched inside `queue` work: by reads (dispatch_sync, concurrent with each other)
  // and by writes (barrier blocks, alone).
  int table[key_count];
  bool present[key_count];
  // The census. All sequentially consistent: a reader and a writer each add themselves,
  // then look for the other; if they overlap, at least one of them sees the other.
  atomic_int readers, writers, most_readers, overlapping_writes;
};

static int key_index(const char *key) {
  for (int i = 0; i < key_count; i++) {
    if (strcmp(keys[i], key) == 0) return i;
  }
  fail("barrier: unknown key %s", key);
}

/* Reads `key` (-1: absent). `while_inside` runs before the read leaves the queue (the demo
 * uses it to hold two readers inside together). */
static int store_read(struct photo_store *store, const char *key, void (^while_inside)(void)) {
  __block int value = -1;
  dispatch_sync(store->queue, ^{
    int inside = atomic_fetch_add(&store->readers, 1) + 1;
    int most = atomic_load(&store->most_readers);
    while (inside > most && !atomic_compare_exchange_weak(&store->most_readers, &most, inside)) {
    }
    if (atomic_load(&store->writers) > 0) atomic_fetch_add(&store->overlapping_writes, 1);
    int i = key_index(key);
    if (store->present[i]) value = store->table[i];
    char shown[16] = "nil";
    if (value >= 0) snprintf(shown, sizeof shown, "%d", value);
    say("read %s=%s (%d %s inside)", key, shown, inside, inside == 1 ? "reader" : "readers");
    if (while_inside) while_inside();
    atomic_fetch_sub(&store->readers, 1);
  });
  return value;
}

/* One write, handed to the queue (the _f form: a context and a function). */
struct write_request {
  struct photo_store *store;
  int key;
  int value;
};

static void perform_write(void *context) {
  struct write_request *request = context;
  struct photo_store *store = request->store;
  int others = atomic_fetch_add(&store->writers, 1) + atomic_load(&store->readers);
  if (others > 0) atomic_fetch_add(&store->overlapping_writes, 1);
  store->table[request->key] = request->value;
  store->present[request->key] = true;
  if (others == 0) {
    say("write %s=%d (alone)", keys[request->key], request->value);
  } else {
    say("write %s=%d (NOT alone: %d others)", keys[request->key], request->value, others);
  }
  atomic_fetch_sub(&store->writers, 1);
  free(request);
}

/* Writes `key` later, alone: returns at once. */
static void store_write(struct photo_store *store, const char *key, int value) {
  struct write_request *request = malloc(sizeof *request);
  if (request == NULL) fail("out of memory");
  *request = (struct write_request){store, key_index(key), value};
  dispatch_barrier_async_f(store->queue, request, perform_write);
}

int main(void) {
  // Blocks capture variables by value: they get this pointer, not a copy of the store.
  struct photo_store *store = &(struct photo_store){0};
  store->queue = dispatch_queue_create("store", DISPATCH_QUEUE_CONCURRENT);
  store_write(store, "a", 1);
  store_write(store, "b", 2);

  // 1. Two client threads meet inside the queue: neither read leaves until both are in, so
  //    the second always reports 2 readers inside. (If reads were serialised the rendezvous
  //    would time out, and the summary below would fail.)
  say("1. two clients read at once, held inside the store until both have entered");
  struct rendezvous *both_inside = &(struct rendezvous){0};
  rendezvous_init(both_inside, 2);
  run_on_new_threads(2, "reader", ^(int index) {
    store_read(store, keys[index], ^{
      rendezvous_arrive_and_wait(both_inside);
    });
  });
  rendezvous_destroy(both_inside);

  // 2. Mixed traffic: three clients, each reading and writing; writes are barriers.
  say("2. three clients, each doing: read, write, read, read");
  run_on_new_threads(3, "client", ^(int index) {
    store_read(store, keys[index], NULL);
    store_write(store, keys[index], 10 + index);
    store_read(store, keys[index], NULL);
    store_read(store, keys[(index + 1) % key_count], NULL);
  });

  // A barrier sync: returns after every earlier write, and sees the table alone.
  int final[key_count];
  int *copy = final;
  __block bool all_present = true;
  dispatch_barrier_sync(store->queue, ^{
    for (int i = 0; i < key_count; i++) {
      copy[i] = store->table[i];
      all_present = all_present && store->present[i];
    }
  });
  say("store after all writes: a=%d b=%d c=%d", final[0], final[1], final[2]);

  int most = atomic_load(&store->most_readers);
  int overlapping = atomic_load(&store->overlapping_writes);
  say("max readers at once: %d, writes overlapping: %d", most, overlapping);
  dispatch_release(store->queue);
  if (most < 2 || overlapping != 0 || !all_present || final[0] != 10 || final[1] != 11 ||
      final[2] != 12) {
    fail("barrier: FAILED (expected at least 2 readers at once and no overlapping write)");
  }
  return 0;
}
