/*
 * GCD C API micro-benchmarks, written against the standard libdispatch C API only, so the
 * same file compiles against LoopDispatch's <dispatch/dispatch.h> (Sources/CDispatch/include)
 * and against Apple's libdispatch. Benchmarks/C/run.sh builds it both ways and compares.
 *
 * Usage: bench [row ...]   (no arguments: every row; run.sh runs each row in its own process,
 *        so no row sees the worker threads an earlier row left spinning or parking)
 *        bench --list          (the row keys of this build, one a line)
 * Output: one tab-separated line per row on standard output:
 *   <key> <wall ns per op> <CPU ns per op> <description>
 * CPU time is getrusage(RUSAGE_SELF) user + system over the timed section: the whole process,
 * every thread (workers spinning or parking count too).
 *
 * Each row runs once untimed at a tenth of its size first (warm-up: threads started, caches
 * and allocator warm), then once timed.
 *
 * Rows:
 *   async      1M dispatch_async_f of a (nearly) empty function onto the default global
 *              queue, then wait until all ran; the function only decrements a shared
 *              counter, and the one that reaches zero signals a semaphore.
 *   sync_f     1M dispatch_sync_f onto an idle serial queue from one thread.
 *   group      200k dispatch_group_async_f of an empty function onto the default global
 *              queue, then dispatch_group_wait.
 *   sema       semaphore ping-pong between the main thread and a pthread, 100k round trips.
 *   fd         one byte bounced over a socketpair by two DISPATCH_SOURCE_TYPE_READ sources on
 *              two serial queues, 100k round trips (only where the header declares the
 *              source API: #ifdef DISPATCH_SOURCE_TYPE_READ).
 *   sync_block 1M dispatch_sync with a block onto an idle serial queue (compare with sync_f:
 *              the cost of the block form's entry).
 *   call       1M calls of the same function through a function pointer, no dispatch at all
 *              (the loop's own cost, to subtract from sync_f / sync_block).
 */
#include <dispatch/dispatch.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
  fprintf(stderr, "bench: %s: %s\n", what, strerror(errno));
  exit(1);
}

// ---- Measuring ------------------------------------------------------------------------------

struct stamp {
  struct timespec wall;
  struct rusage usage;
};

static struct stamp stamp_now(void) {
  struct stamp s;
  clock_gettime(CLOCK_MONOTONIC, &s.wall);
  getrusage(RUSAGE_SELF, &s.usage);
  return s;
}

static double timespec_ns(struct timespec t) { return (double)t.tv_sec * 1e9 + (double)t.tv_nsec; }
static double timeval_ns(struct timeval t) { return (double)t.tv_sec * 1e9 + (double)t.tv_usec * 1e3; }

struct result {
  double wall_ns;  // Per operation.
  double cpu_ns;   // Per operation: user + system, the whole process.
};

static struct result result_between(struct stamp a, struct stamp b, long ops) {
  double cpu = timeval_ns(b.usage.ru_utime) - timeval_ns(a.usage.ru_utime) +
               timeval_ns(b.usage.ru_stime) - timeval_ns(a.usage.ru_stime);
  struct result r = {
      (timespec_ns(b.wall) - timespec_ns(a.wall)) / (double)ops, cpu / (double)ops};
  return r;
}


// ---- 1: async_f onto a global queue -----------------------------------------------------------

static atomic_long async_remaining;
static dispatch_semaphore_t async_done;

static void async_item(void *context) {
  (void)context;
  // Releasing/acquiring: the last decrement sees every other item's work.
  if (atomic_fetch_sub_explicit(&async_remaining, 1, memory_order_acq_rel) == 1) {
    dispatch_semaphore_signal(async_done);
  }
}

static struct result bench_async(long items) {
  dispatch_queue_t queue = dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0);
  async_done = dispatch_semaphore_create(0);
  atomic_store(&async_remaining, items);
  struct stamp start = stamp_now();
  for (long i = 0; i < items; i++) dispatch_async_f(queue, NULL, async_item);
  dispatch_semaphore_wait(async_done, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  dispatch_release(async_done);
  return result_between(start, end, items);
}

// ---- 2 and 6: sync_f, sync with a block, and a plain call ------------------------------------

static void count_one(void *context) { (*(long *)context)++; }

static void check_count(const char *row, long count, long expected) {
  if (count != expected) {
    fprintf(stderr, "bench: %s ran %ld of %ld\n", row, count, expected);
    exit(1);
  }
}

static struct result bench_sync_f(long calls) {
  dispatch_queue_t queue = dispatch_queue_create("bench.sync_f", DISPATCH_QUEUE_SERIAL);
  long count = 0;
  struct stamp start = stamp_now();
  for (long i = 0; i < calls; i++) dispatch_sync_f(queue, &count, count_one);
  struct stamp end = stamp_now();
  check_count("sync_f", count, calls);
  dispatch_release(queue);
  return result_between(start, end, calls);
}

static struct result bench_sync_block(long calls) {
  dispatch_queue_t queue = dispatch_queue_create("bench.sync_block", DISPATCH_QUEUE_SERIAL);
  __block long count = 0;
  struct stamp start = stamp_now();
  for (long i = 0; i < calls; i++) dispatch_sync(queue, ^{ count++; });
  struct stamp end = stamp_now();
  check_count("sync_block", count, calls);
  dispatch_release(queue);
  return result_between(start, end, calls);
}

static void (*volatile plain_function)(void *) = count_one;

static struct result bench_call(long calls) {
  long count = 0;
  struct stamp start = stamp_now();
  for (long i = 0; i < calls; i++) plain_function(&count);
  struct stamp end = stamp_now();
  check_count("call", count, calls);
  return result_between(start, end, calls);
}

// ---- 3: group_async_f + group_wait ------------------------------------------------------------

static void empty_item(void *context) { (void)context; }

static struct result bench_group(long items) {
  dispatch_queue_t queue = dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0);
  dispatch_group_t group = dispatch_group_create();
  struct stamp start = stamp_now();
  for (long i = 0; i < items; i++) dispatch_group_async_f(group, queue, NULL, empty_item);
  if (dispatch_group_wait(group, DISPATCH_TIME_FOREVER) != 0) {
    fprintf(stderr, "bench: dispatch_group_wait(FOREVER) timed out\n");
    exit(1);
  }
  struct stamp end = stamp_now();
  dispatch_release(group);
  return result_between(start, end, items);
}

// ---- 4: semaphore ping-pong between two threads ---------------------------------------------

struct pingpong {
  dispatch_semaphore_t ping, pong;
  long trips;
};

static void *pong_thread(void *context) {
  struct pingpong *p = context;
  for (long i = 0; i < p->trips; i++) {
    dispatch_semaphore_wait(p->ping, DISPATCH_TIME_FOREVER);
    dispatch_semaphore_signal(p->pong);
  }
  return NULL;
}

static struct result bench_sema(long trips) {
  struct pingpong p = {dispatch_semaphore_create(0), dispatch_semaphore_create(0), trips};
  pthread_t thread;
  if (pthread_create(&thread, NULL, pong_thread, &p) != 0) die("pthread_create");
  struct stamp start = stamp_now();
  for (long i = 0; i < trips; i++) {
    dispatch_semaphore_signal(p.ping);
    dispatch_semaphore_wait(p.pong, DISPATCH_TIME_FOREVER);
  }
  struct stamp end = stamp_now();
  pthread_join(thread, NULL);
  dispatch_release(p.ping);
  dispatch_release(p.pong);
  return result_between(start, end, trips);
}

// ---- 5: fd ping-pong with read sources --------------------------------------------------------

#ifdef DISPATCH_SOURCE_TYPE_READ
struct fd_end {
  int fd;
  long trips;     // Only touched on this end's queue.
  long target;    // Round trips to make (read by the initiating end only).
  int initiator;  // The end that counts round trips and stops.
  dispatch_source_t source;
  dispatch_semaphore_t done;
};

static void write_byte(int fd) {
  char byte = 'x';
  while (write(fd, &byte, 1) != 1) {
    if (errno != EINTR && errno != EAGAIN) die("write");
  }
}

// The read handler of either end: takes the byte and sends it back, until the initiator has
// seen `target` round trips. dispatch_source_get_data is the number of bytes readable.
static void fd_ready(void *context) {
  struct fd_end *end = context;
  if (dispatch_source_get_data(end->source) == 0) return;
  char byte;
  ssize_t got = read(end->fd, &byte, 1);
  if (got != 1) {
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    die("read");
  }
  if (end->initiator && ++end->trips == end->target) {
    dispatch_semaphore_signal(end->done);
    return;
  }
  write_byte(end->fd);
}

static void fd_cancelled(void *context) {
  struct fd_end *end = context;
  dispatch_semaphore_signal(end->done);
}

static struct result bench_fd(long trips) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) die("socketpair");
  for (int i = 0; i < 2; i++) fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
  struct fd_end ends[2];
  dispatch_queue_t queues[2];
  for (int i = 0; i < 2; i++) {
    queues[i] = dispatch_queue_create(i == 0 ? "bench.fd.a" : "bench.fd.b", DISPATCH_QUEUE_SERIAL);
    ends[i] = (struct fd_end){fds[i], 0, trips, i == 0, NULL, dispatch_semaphore_create(0)};
    ends[i].source = dispatch_source_create(DISPATCH_SOURCE_TYPE_READ, (uintptr_t)fds[i], 0, queues[i]);
    if (ends[i].source == NULL) {
      fprintf(stderr, "bench: dispatch_source_create(READ) returned NULL\n");
      exit(1);
    }
    dispatch_set_context(ends[i].source, &ends[i]);
    dispatch_source_set_event_handler_f(ends[i].source, fd_ready);
    dispatch_source_set_cancel_handler_f(ends[i].source, fd_cancelled);
    dispatch_resume(ends[i].source);
  }
  struct stamp start = stamp_now();
  write_byte(fds[1]);  // To end 0, the initiator.
  dispatch_semaphore_wait(ends[0].done, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  for (int i = 0; i < 2; i++) {
    dispatch_source_cancel(ends[i].source);
    dispatch_semaphore_wait(ends[i].done, DISPATCH_TIME_FOREVER);  // The cancel handler ran.
    dispatch_release(ends[i].source);
    dispatch_release(ends[i].done);
    dispatch_release(queues[i]);
    close(fds[i]);
  }
  return result_between(start, end, trips);
}
#endif

// ---- Driver ------------------------------------------------------------------------------------

struct row {
  const char *key;
  long size;
  struct result (*run)(long);
  const char *description;
};

static const struct row rows[] = {
    {"async", 1000000, bench_async, "1M dispatch_async_f onto a global queue, then wait (ns/item)"},
    {"sync_f", 1000000, bench_sync_f, "1M dispatch_sync_f onto a serial queue, one thread (ns/call)"},
    {"group", 200000, bench_group, "200k dispatch_group_async_f + dispatch_group_wait (ns/item)"},
    {"sema", 100000, bench_sema, "semaphore ping-pong between two threads, 100k (ns/round trip)"},
#ifdef DISPATCH_SOURCE_TYPE_READ
    {"fd", 100000, bench_fd, "socketpair ping-pong, READ sources on 2 serial queues, 100k (ns/round trip)"},
#endif
    {"sync_block", 1000000, bench_sync_block, "1M dispatch_sync with a block onto a serial queue (ns/call)"},
    {"call", 1000000, bench_call, "1M plain calls through a function pointer, no dispatch (ns/call)"},
};
enum { row_count = sizeof rows / sizeof rows[0] };

static int selected(const char *key, int argc, char **argv) {
  if (argc <= 1) return 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], key) == 0) return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (int r = 0; r < row_count; r++) printf("%s\n", rows[r].key);
    return 0;
  }
  for (int i = 1; i < argc; i++) {
    int known = 0;
    for (int r = 0; r < row_count; r++) known |= strcmp(argv[i], rows[r].key) == 0;
    if (!known) {
      fprintf(stderr, "bench: unknown row %s (rows:", argv[i]);
      for (int r = 0; r < row_count; r++) fprintf(stderr, " %s", rows[r].key);
      fprintf(stderr, ")\n");
      return 2;
    }
  }
  for (int r = 0; r < row_count; r++) {
    if (!selected(rows[r].key, argc, argv)) continue;
    rows[r].run(rows[r].size / 10);  // Warm-up, not reported.
    struct result result = rows[r].run(rows[r].size);
    printf("%s\t%.1f\t%.1f\t%s\n", rows[r].key, result.wall_ns, result.cpu_ns, rows[r].description);
    fflush(stdout);
  }
  return 0;
}
