/*
 * GCD C API micro-benchmarks, written against the standard libdispatch C API only, so the
 * same file compiles against LoopDispatch's <dispatch/dispatch.h> (Sources/CDispatch/include)
 * and against Apple's libdispatch. Benchmarks/C/run.sh builds it both ways and compares.
 *
 * Usage: bench [row ...]   (no arguments: every row; run.sh runs each row in its own process,
 *        so no row sees the worker threads an earlier row left spinning or parking)
 *        bench --list          (the row keys of this build, one a line)
 * Output: one tab-separated line per row on standard output:
 *   <key> <wall ns per op> <CPU ns per op> <heap allocations per op> <description>
 * (the description is always the last field, so that readers can take it as such when more
 * columns are added before it).
 * CPU time is getrusage(RUSAGE_SELF) user + system over the timed section: the whole process,
 * every thread (workers spinning or parking count too).
 * Heap allocations: this executable defines malloc, calloc, realloc, reallocarray,
 * posix_memalign, aligned_alloc, memalign, valloc and pvalloc itself (forwarding to glibc's
 * __libc_* entry points) and counts every call with a relaxed atomic increment; symbol
 * interposition routes the shared libraries' calls (the dispatch library, the Swift runtime,
 * BlocksRuntime, glibc itself) through them too. A realloc counts as one allocation; free is
 * not interposed. main checks at start that both a direct call and one from the dispatch
 * library (dispatch_group_create) are counted, and exits if not.
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
 *   group_main 1M dispatch_group_async_f of an empty function onto the default global queue
 *              from the main thread, then dispatch_group_wait (group's code, 5 times the size).
 *   rw_barrier 1M items onto one custom concurrent queue from the main thread: 16
 *              dispatch_async_f readers per dispatch_barrier_async_f writer; a final barrier
 *              signals a semaphore. Checked: every reader sees exactly the writes submitted
 *              before it and none running (an atomic "writer running" flag, looked at when a
 *              reader starts and ends), every writer sees every earlier reader done (readers
 *              count themselves: one relaxed atomic add each), and the end sees every reader
 *              and writer; a violation aborts. ns/item.
 *   serial_4p  four pthreads, released together (pthread barrier), each submit 250k
 *              dispatch_async_f onto one serial queue; the item increments a plain counter;
 *              the main thread joins them and waits with a final dispatch_sync_f that checks
 *              the count. ns/item.
 *   producers_8 eight pthreads, released together, each submit 125k dispatch_async_f,
 *              alternately onto the default global queue and onto its own serial queue (8
 *              serial queues, created before the start; the serial items also count on a
 *              plain per-queue counter, checked at the end); the last of the 1M items
 *              signals a semaphore (shared atomic counter). ns/item.
 *   io_pipe    256 MiB through a pipe: a writer channel writes one 1 MiB data object 256 times,
 *              a reader channel (low water 64 KiB, high water 1 MiB) counts the bytes to the end
 *              of the file (checked). ns/MiB.
 *   io_echo    a 32-byte message over a socket pair through one channel per end, 20k round
 *              trips: each a dispatch_io_write on one end and a 32-byte dispatch_io_read on the
 *              other, then back. ns/round trip.
 *   io_file    a 256 MiB file (written and synced before the timed part) copied to another by
 *              two random-access path channels, each 1 MiB read written at its offset (the
 *              count checked). ns/MiB.
 *   io_writes  the dispatch_read2 case: a 10 MiB file (written and synced before the timed part)
 *              read whole with dispatch_read (untimed); timed: that data object cut into 1024
 *              subranges of 10 KiB (dispatch_data_create_subrange), each written with its own
 *              dispatch_write to one descriptor of a fresh file, submitted back to back from the
 *              main thread, until all 1024 handlers ran (a group). Checked afterwards: the new
 *              file equals the source byte for byte (the writes to one descriptor go out in
 *              the order submitted). ns/MiB.
 *   after_dense 100k dispatch_after_f onto the default global queue, delays spread evenly
 *              over 200 ms (i * 200 ms / 100k) and submitted in a shuffled order (fixed-seed
 *              LCG); each handler records its lateness, CLOCK_MONOTONIC now minus the intended
 *              deadline (the clock read just before dispatch_time(DISPATCH_TIME_NOW, delay),
 *              plus delay). Reported: the p99 lateness in ns in the wall column (not ns/op);
 *              CPU and allocations per timer. BENCH_VERBOSE=1 also prints to standard error
 *              how long the submitting took, when the last fired, and the min, p50, p99 and
 *              max lateness.
 *   sync_readers 128 pthreads, released together, each make 7812 synchronous calls onto one
 *              custom concurrent queue (1M in all): dispatch_sync_f readers, every 100th call
 *              a dispatch_barrier_sync_f. Checked: no reader runs beside a barrier (an atomic
 *              "barrier running" flag, looked at when a reader starts and ends, and the barrier
 *              count, written by barriers only, the same at both ends), every barrier sees zero
 *              readers inside (readers count themselves in and out), a reader sees every
 *              barrier its own thread made before it, and the end sees every barrier and every
 *              reader; a violation aborts. ns/call. BENCH_VERBOSE=1 also prints to standard
 *              error the peak number of readers inside at once (whether the sync readers run
 *              side by side). Bimodal: a run where the threads never meet (each one's calls
 *              fit in a time slice) is about 50 ns/call on either library; see the row's code.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // sched_getcpu (the allocation counters)
#endif
#include <dispatch/dispatch.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
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

// ---- Counting heap allocations ------------------------------------------------------------------
// The executable's definitions interpose glibc's for every object in the process. One counter per
// CPU (the CPU the allocating thread runs on, from sched_getcpu: glibc reads it from the thread's
// rseq area, no system call), each alone on a 128-byte block (the adjacent-line prefetcher pairs
// 64-byte lines): the count is a relaxed add on a line that stays with its CPU. One process-wide
// counter made every allocation a write to a shared line: with several threads allocating at once
// the counting cost about as much as the malloc it counted (perf, serial_4p beside two busy loops:
// 8.6% of the samples in the counting wrapper, 8.5% in glibc's malloc), and charged the side that
// allocates per item for it.

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

enum { allocation_stripes = 64 };
static struct {
  _Alignas(128) atomic_ulong count;
} heap_allocations[allocation_stripes];

static inline void count_allocation(void) {
  int cpu = sched_getcpu();
  unsigned stripe = cpu < 0 ? 0 : (unsigned)cpu % allocation_stripes;
  atomic_fetch_add_explicit(&heap_allocations[stripe].count, 1, memory_order_relaxed);
}

void *malloc(size_t size) {
  count_allocation();
  return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
  count_allocation();
  return __libc_calloc(count, size);
}

void *realloc(void *pointer, size_t size) {
  count_allocation();
  return __libc_realloc(pointer, size);
}

void *reallocarray(void *pointer, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  count_allocation();
  return __libc_realloc(pointer, bytes);
}

void *memalign(size_t alignment, size_t size) {
  count_allocation();
  return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
  count_allocation();
  return __libc_memalign(alignment, size);
}

int posix_memalign(void **result, size_t alignment, size_t size) {
  if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0) {
    return EINVAL;
  }
  count_allocation();
  void *pointer = __libc_memalign(alignment, size);
  if (pointer == NULL) return ENOMEM;
  *result = pointer;
  return 0;
}

void *valloc(size_t size) {
  count_allocation();
  return __libc_valloc(size);
}

void *pvalloc(size_t size) {
  count_allocation();
  return __libc_pvalloc(size);
}

static unsigned long allocations_now(void) {
  unsigned long total = 0;
  for (int stripe = 0; stripe < allocation_stripes; stripe++) {
    total += atomic_load_explicit(&heap_allocations[stripe].count, memory_order_relaxed);
  }
  return total;
}

// Exits unless the counting sees both the executable's own allocations and the dispatch
// library's (a group is a heap object on both sides).
static void *(*volatile malloc_through_pointer)(size_t) = malloc;

static void check_allocation_counting(void) {
  unsigned long before = allocations_now();
  void *pointer = malloc_through_pointer(64);
  unsigned long direct = allocations_now() - before;
  free(pointer);
  before = allocations_now();
  dispatch_group_t group = dispatch_group_create();
  unsigned long library = allocations_now() - before;
  dispatch_release(group);
  if (direct != 1 || library == 0) {
    fprintf(stderr, "bench: allocations are not counted (malloc: %lu, dispatch_group_create: %lu)\n",
            direct, library);
    exit(1);
  }
}

// ---- Measuring ------------------------------------------------------------------------------

struct stamp {
  struct timespec wall;
  struct rusage usage;
  unsigned long allocations;
};

static struct stamp stamp_now(void) {
  struct stamp s;
  clock_gettime(CLOCK_MONOTONIC, &s.wall);
  getrusage(RUSAGE_SELF, &s.usage);
  s.allocations = allocations_now();
  return s;
}

static double timespec_ns(struct timespec t) { return (double)t.tv_sec * 1e9 + (double)t.tv_nsec; }
static double timeval_ns(struct timeval t) { return (double)t.tv_sec * 1e9 + (double)t.tv_usec * 1e3; }

struct result {
  double wall_ns;      // Per operation (after_dense: the p99 lateness).
  double cpu_ns;       // Per operation: user + system, the whole process.
  double allocations;  // Heap allocations per operation, the whole process.
};

static struct result result_between(struct stamp a, struct stamp b, long ops) {
  double cpu = timeval_ns(b.usage.ru_utime) - timeval_ns(a.usage.ru_utime) +
               timeval_ns(b.usage.ru_stime) - timeval_ns(a.usage.ru_stime);
  struct result r = {(timespec_ns(b.wall) - timespec_ns(a.wall)) / (double)ops, cpu / (double)ops,
                     (double)(b.allocations - a.allocations) / (double)ops};
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

// ---- 7: readers and barrier writers on a concurrent queue -------------------------------------
// Readers between writer k-1 and writer k (in submission order) must see exactly k writes and
// no writer running; writer k must see exactly k earlier writes and every reader submitted
// before it done. The context of an item is k.

enum { rw_readers_per_writer = 16 };

static atomic_long rw_writes;         // Written by writers only (load + store, no RMW).
static atomic_int rw_writer_running;  // 1 while a writer runs.
static atomic_long rw_readers_done;
static long rw_expected_readers, rw_expected_writes;
static dispatch_semaphore_t rw_done;

static void rw_violation(const char *what, long seen, long expected) {
  fprintf(stderr, "bench: rw_barrier: %s (saw %ld, expected %ld)\n", what, seen, expected);
  abort();
}

static void rw_reader(void *context) {
  long writes = (long)(uintptr_t)context;
  if (atomic_load_explicit(&rw_writer_running, memory_order_acquire)) {
    rw_violation("a reader started while a writer ran", 1, 0);
  }
  long seen = atomic_load_explicit(&rw_writes, memory_order_relaxed);
  if (seen != writes) rw_violation("a reader saw the wrong number of writes", seen, writes);
  if (atomic_load_explicit(&rw_writer_running, memory_order_acquire)) {
    rw_violation("a writer started while a reader ran", 1, 0);
  }
  atomic_fetch_add_explicit(&rw_readers_done, 1, memory_order_relaxed);
}

static void rw_writer(void *context) {
  long index = (long)(uintptr_t)context;
  atomic_store_explicit(&rw_writer_running, 1, memory_order_seq_cst);
  long readers = atomic_load_explicit(&rw_readers_done, memory_order_relaxed);
  if (readers != (index + 1) * rw_readers_per_writer) {
    rw_violation("a writer ran before the readers submitted before it were done", readers,
                 (index + 1) * rw_readers_per_writer);
  }
  long seen = atomic_load_explicit(&rw_writes, memory_order_relaxed);
  if (seen != index) rw_violation("a writer saw the wrong number of writes", seen, index);
  atomic_store_explicit(&rw_writes, seen + 1, memory_order_relaxed);
  atomic_store_explicit(&rw_writer_running, 0, memory_order_release);
}

static void rw_final(void *context) {
  (void)context;
  long readers = atomic_load_explicit(&rw_readers_done, memory_order_relaxed);
  if (readers != rw_expected_readers) {
    rw_violation("readers done at the end", readers, rw_expected_readers);
  }
  long writes = atomic_load_explicit(&rw_writes, memory_order_relaxed);
  if (writes != rw_expected_writes) rw_violation("writes at the end", writes, rw_expected_writes);
  dispatch_semaphore_signal(rw_done);
}

static struct result bench_rw_barrier(long items) {
  dispatch_queue_t queue = dispatch_queue_create("rw", DISPATCH_QUEUE_CONCURRENT);
  rw_done = dispatch_semaphore_create(0);
  atomic_store(&rw_writes, 0);
  atomic_store(&rw_writer_running, 0);
  atomic_store(&rw_readers_done, 0);
  rw_expected_writes = items / (rw_readers_per_writer + 1);
  rw_expected_readers = items - rw_expected_writes;
  long writes = 0;
  struct stamp start = stamp_now();
  for (long i = 0; i < items; i++) {
    if (i % (rw_readers_per_writer + 1) == rw_readers_per_writer) {
      dispatch_barrier_async_f(queue, (void *)(uintptr_t)writes++, rw_writer);
    } else {
      dispatch_async_f(queue, (void *)(uintptr_t)writes, rw_reader);
    }
  }
  dispatch_barrier_async_f(queue, NULL, rw_final);
  dispatch_semaphore_wait(rw_done, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  dispatch_release(rw_done);
  dispatch_release(queue);
  return result_between(start, end, items);
}

// ---- 8 and 9: several submitting threads -------------------------------------------------------
// The submitting pthreads are created first and wait at a barrier with the main thread; the main
// thread takes the start stamp once they are all there and then releases them together.

enum { producers_max = 128 };

struct producers {
  int threads;
  long items_per_thread;
  pthread_barrier_t barrier;  // The threads and main: twice, "all there" and "go".
  pthread_t thread[producers_max];
};

// Creates the threads (body(contexts[t])) and returns once they are all at the barrier.
static void producers_create(struct producers *p, int threads, long items_per_thread,
                             void *(*body)(void *), void **contexts) {
  p->threads = threads;
  p->items_per_thread = items_per_thread;
  if (pthread_barrier_init(&p->barrier, NULL, (unsigned)threads + 1) != 0) {
    die("pthread_barrier_init");
  }
  for (int t = 0; t < threads; t++) {
    if (pthread_create(&p->thread[t], NULL, body, contexts[t]) != 0) die("pthread_create");
  }
  pthread_barrier_wait(&p->barrier);  // All there.
}

// The threads' side of the start: all there, then go.
static void producers_wait_for_start(struct producers *p) {
  pthread_barrier_wait(&p->barrier);
  pthread_barrier_wait(&p->barrier);
}

static void producers_go(struct producers *p) { pthread_barrier_wait(&p->barrier); }

static void producers_join(struct producers *p) {
  for (int t = 0; t < p->threads; t++) pthread_join(p->thread[t], NULL);
  pthread_barrier_destroy(&p->barrier);
}

// serial_4p: four threads onto one serial queue.

enum { serial_4p_threads = 4 };

static struct producers serial_4p;
static dispatch_queue_t serial_4p_queue;
static long serial_4p_count;  // Only touched on serial_4p_queue.

static void serial_4p_item(void *context) {
  (void)context;
  serial_4p_count++;
}

static void read_count(void *context) { *(long *)context = serial_4p_count; }

static void *serial_4p_thread(void *context) {
  (void)context;
  producers_wait_for_start(&serial_4p);
  for (long i = 0; i < serial_4p.items_per_thread; i++) {
    dispatch_async_f(serial_4p_queue, NULL, serial_4p_item);
  }
  return NULL;
}

static struct result bench_serial_4p(long items) {
  long per_thread = items / serial_4p_threads, total = per_thread * serial_4p_threads;
  serial_4p_queue = dispatch_queue_create("bench.serial_4p", DISPATCH_QUEUE_SERIAL);
  serial_4p_count = 0;
  void *contexts[serial_4p_threads] = {0};
  producers_create(&serial_4p, serial_4p_threads, per_thread, serial_4p_thread, contexts);
  struct stamp start = stamp_now();
  producers_go(&serial_4p);
  producers_join(&serial_4p);  // Every item submitted.
  long count = -1;
  dispatch_sync_f(serial_4p_queue, &count, read_count);  // After every item (FIFO).
  struct stamp end = stamp_now();
  check_count("serial_4p", count, total);
  dispatch_release(serial_4p_queue);
  return result_between(start, end, total);
}

// producers_8: eight threads, each alternately onto the default global queue and its own serial
// queue.

enum { producers_8_threads = 8 };
_Static_assert(producers_8_threads <= producers_max && serial_4p_threads <= producers_max,
               "struct producers holds at most producers_max threads");

struct producer_8 {
  dispatch_queue_t serial;
  long serial_count;  // Only touched on `serial`.
};

static struct producers producers_8;
static atomic_long producers_8_remaining;
static dispatch_semaphore_t producers_8_done;

static void producers_8_global_item(void *context) {
  (void)context;
  if (atomic_fetch_sub_explicit(&producers_8_remaining, 1, memory_order_acq_rel) == 1) {
    dispatch_semaphore_signal(producers_8_done);
  }
}

static void producers_8_serial_item(void *context) {
  ((struct producer_8 *)context)->serial_count++;
  if (atomic_fetch_sub_explicit(&producers_8_remaining, 1, memory_order_acq_rel) == 1) {
    dispatch_semaphore_signal(producers_8_done);
  }
}

static void *producers_8_thread(void *context) {
  struct producer_8 *producer = context;
  dispatch_queue_t global = dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0);
  producers_wait_for_start(&producers_8);
  for (long i = 0; i < producers_8.items_per_thread; i++) {
    if (i % 2 == 0) {
      dispatch_async_f(global, NULL, producers_8_global_item);
    } else {
      dispatch_async_f(producer->serial, producer, producers_8_serial_item);
    }
  }
  return NULL;
}

static struct result bench_producers_8(long items) {
  long per_thread = items / producers_8_threads, total = per_thread * producers_8_threads;
  struct producer_8 producer[producers_8_threads];
  void *contexts[producers_8_threads];
  for (int t = 0; t < producers_8_threads; t++) {
    producer[t].serial = dispatch_queue_create("bench.producers_8", DISPATCH_QUEUE_SERIAL);
    producer[t].serial_count = 0;
    contexts[t] = &producer[t];
  }
  producers_8_done = dispatch_semaphore_create(0);
  atomic_store(&producers_8_remaining, total);
  producers_create(&producers_8, producers_8_threads, per_thread, producers_8_thread, contexts);
  struct stamp start = stamp_now();
  producers_go(&producers_8);
  dispatch_semaphore_wait(producers_8_done, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  producers_join(&producers_8);
  for (int t = 0; t < producers_8_threads; t++) {
    // The odd-numbered items of the thread (i = 1, 3, ...).
    check_count("producers_8 (one serial queue)", producer[t].serial_count, per_thread / 2);
    dispatch_release(producer[t].serial);
  }
  dispatch_release(producers_8_done);
  return result_between(start, end, total);
}

// ---- 10: dense dispatch_after_f -------------------------------------------------------------

enum { after_spread_ns = 200000000 };  // The delays spread over 200 ms.

struct after_timer {
  int64_t deadline_ns;  // CLOCK_MONOTONIC.
  int64_t lateness_ns;
};

static atomic_long after_remaining;
static dispatch_semaphore_t after_done;

static int64_t monotonic_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void after_fired(void *context) {
  struct after_timer *timer = context;
  timer->lateness_ns = monotonic_ns() - timer->deadline_ns;
  if (atomic_fetch_sub_explicit(&after_remaining, 1, memory_order_acq_rel) == 1) {
    dispatch_semaphore_signal(after_done);
  }
}

static int compare_int64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

// Nearest rank: the smallest value with at least `percent`% of the values at or below it.
static int64_t percentile(const int64_t *sorted, long n, int percent) {
  long rank = (n * percent + 99) / 100;
  return sorted[rank < 1 ? 0 : rank - 1];
}

static struct result bench_after_dense(long timers) {
  dispatch_queue_t queue = dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0);
  struct after_timer *timer = calloc((size_t)timers, sizeof *timer);
  long *order = malloc((size_t)timers * sizeof *order);
  int64_t *lateness = malloc((size_t)timers * sizeof *lateness);
  if (timer == NULL || order == NULL || lateness == NULL) die("malloc");
  // Submission order: a Fisher-Yates shuffle driven by a fixed-seed 64-bit LCG (Knuth's MMIX
  // constants; the high bits, the good ones, pick the index).
  uint64_t lcg = 22;
  for (long i = 0; i < timers; i++) order[i] = i;
  for (long i = timers - 1; i > 0; i--) {
    lcg = lcg * 6364136223846793005u + 1442695040888963407u;
    long j = (long)((lcg >> 33) % (uint64_t)(i + 1));
    long t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  after_done = dispatch_semaphore_create(0);
  atomic_store(&after_remaining, timers);
  struct stamp start = stamp_now();
  for (long i = 0; i < timers; i++) {
    long k = order[i];
    int64_t delay = (int64_t)k * after_spread_ns / timers;
    timer[k].deadline_ns = monotonic_ns() + delay;
    dispatch_after_f(dispatch_time(DISPATCH_TIME_NOW, delay), queue, &timer[k], after_fired);
  }
  int64_t submitted = monotonic_ns();
  dispatch_semaphore_wait(after_done, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  dispatch_release(after_done);
  struct result result = result_between(start, end, timers);
  for (long i = 0; i < timers; i++) lateness[i] = timer[i].lateness_ns;
  qsort(lateness, (size_t)timers, sizeof *lateness, compare_int64);
  result.wall_ns = (double)percentile(lateness, timers, 99);
  const char *verbose = getenv("BENCH_VERBOSE");
  if (verbose != NULL && strcmp(verbose, "1") == 0) {
    fprintf(stderr,
            "bench: after_dense %ld timers: submitted in %.1f ms, all fired after %.1f ms; "
            "lateness min %lld, p50 %lld, p99 %lld, max %lld ns\n",
            timers, (double)(submitted - (int64_t)timespec_ns(start.wall)) / 1e6,
            (timespec_ns(end.wall) - timespec_ns(start.wall)) / 1e6, (long long)lateness[0],
            (long long)percentile(lateness, timers, 50), (long long)percentile(lateness, timers, 99),
            (long long)lateness[timers - 1]);
  }
  free(timer);
  free(order);
  free(lateness);
  return result;
}

// ---- 11: sync readers and barriers on a concurrent queue from many threads -------------------
// 128 pthreads, released together, each make size / 128 synchronous calls (7812 at full size)
// onto one custom concurrent queue: dispatch_sync_f readers, every 100th call a
// dispatch_barrier_sync_f.
// What the queue promises, and what is checked (a violation aborts):
// - a reader never runs beside a barrier: a reader looks at the "barrier running" flag when it
//   starts and when it ends, and the barrier count (written by barriers only) must be the same
//   at both ends;
// - a barrier runs alone: it sees zero readers inside (readers count themselves in and out of
//   an atomic) both after raising its flag and before lowering it, and no other barrier's flag;
// - a reader sees every barrier its own thread made before it (the count is at least that);
// - at the end the barrier count and each thread's reader count are what was asked for.
// The reader's count-in and the barrier's flag are both seq_cst stores/RMWs followed by a
// seq_cst load of the other's (Dekker): if a reader and a barrier overlap, at least one of the
// two sees the other. The peak number of readers inside at once is kept too (BENCH_VERBOSE=1
// prints it): it shows whether the sync readers really run side by side.
// Two regimes, on both libraries: usually the threads meet, and once a barrier waits, the
// readers behind it wait too (a queue convoy; on 2 CPUs about 1.5-7 us/call, peak 2-3 inside);
// but some runs fall into one where the scheduler runs the threads one after another, each
// thread's 7812 calls fitting in a time slice (about 50 ns/call, peak 1). The harness's
// median over the runs, and the ranges it prints, show which a run was.

enum { sync_readers_threads = 128, sync_readers_barrier_every = 100 };
_Static_assert(sync_readers_threads <= producers_max,
               "struct producers holds at most producers_max threads");

struct sync_reader {
  _Alignas(64) long reads;  // This thread's reader calls that ran (only its own calls touch it).
  long barriers;            // This thread's barrier calls that returned.
};

static struct producers sync_readers;
static dispatch_queue_t sync_readers_queue;
static struct sync_reader sync_reader[sync_readers_threads];
static atomic_long sync_readers_writes;          // Written by barriers only (load + store).
static atomic_int sync_readers_barrier_running;  // 1 while a barrier runs.
static atomic_int sync_readers_inside;           // Readers between their start and end.
static atomic_int sync_readers_peak;             // The most readers inside at once.

static void sync_readers_violation(const char *what, long seen, long expected) {
  fprintf(stderr, "bench: sync_readers: %s (saw %ld, expected %ld)\n", what, seen, expected);
  abort();
}

static void sync_readers_reader(void *context) {
  struct sync_reader *thread = context;
  int inside = atomic_fetch_add_explicit(&sync_readers_inside, 1, memory_order_seq_cst) + 1;
  int peak = atomic_load_explicit(&sync_readers_peak, memory_order_relaxed);
  while (inside > peak && !atomic_compare_exchange_weak_explicit(
                              &sync_readers_peak, &peak, inside, memory_order_relaxed,
                              memory_order_relaxed)) {
  }
  if (atomic_load_explicit(&sync_readers_barrier_running, memory_order_seq_cst)) {
    sync_readers_violation("a reader started while a barrier ran", 1, 0);
  }
  long writes = atomic_load_explicit(&sync_readers_writes, memory_order_relaxed);
  if (writes < thread->barriers) {
    sync_readers_violation("a reader missed a barrier its own thread made before it", writes,
                           thread->barriers);
  }
  if (atomic_load_explicit(&sync_readers_barrier_running, memory_order_seq_cst)) {
    sync_readers_violation("a barrier started while a reader ran", 1, 0);
  }
  long after = atomic_load_explicit(&sync_readers_writes, memory_order_relaxed);
  if (after != writes) sync_readers_violation("a barrier ran while a reader ran", after, writes);
  thread->reads++;
  atomic_fetch_sub_explicit(&sync_readers_inside, 1, memory_order_release);
}

static void sync_readers_barrier(void *context) {
  (void)context;
  if (atomic_exchange_explicit(&sync_readers_barrier_running, 1, memory_order_seq_cst) != 0) {
    sync_readers_violation("two barriers ran at once", 2, 1);
  }
  int inside = atomic_load_explicit(&sync_readers_inside, memory_order_seq_cst);
  if (inside != 0) sync_readers_violation("a barrier started with readers inside", inside, 0);
  long writes = atomic_load_explicit(&sync_readers_writes, memory_order_relaxed);
  atomic_store_explicit(&sync_readers_writes, writes + 1, memory_order_relaxed);
  inside = atomic_load_explicit(&sync_readers_inside, memory_order_seq_cst);
  if (inside != 0) sync_readers_violation("a reader started while a barrier ran", inside, 0);
  atomic_store_explicit(&sync_readers_barrier_running, 0, memory_order_release);
}

static void *sync_readers_thread(void *context) {
  struct sync_reader *thread = context;
  producers_wait_for_start(&sync_readers);
  for (long i = 0; i < sync_readers.items_per_thread; i++) {
    if (i % sync_readers_barrier_every == sync_readers_barrier_every - 1) {
      dispatch_barrier_sync_f(sync_readers_queue, NULL, sync_readers_barrier);
      thread->barriers++;
    } else {
      dispatch_sync_f(sync_readers_queue, thread, sync_readers_reader);
    }
  }
  return NULL;
}

static struct result bench_sync_readers(long calls) {
  long per_thread = calls / sync_readers_threads, total = per_thread * sync_readers_threads;
  long barriers_per_thread = per_thread / sync_readers_barrier_every;
  sync_readers_queue = dispatch_queue_create("bench.sync_readers", DISPATCH_QUEUE_CONCURRENT);
  atomic_store(&sync_readers_writes, 0);
  atomic_store(&sync_readers_barrier_running, 0);
  atomic_store(&sync_readers_inside, 0);
  atomic_store(&sync_readers_peak, 0);
  void *contexts[sync_readers_threads];
  for (int t = 0; t < sync_readers_threads; t++) {
    sync_reader[t].reads = 0;
    sync_reader[t].barriers = 0;
    contexts[t] = &sync_reader[t];
  }
  producers_create(&sync_readers, sync_readers_threads, per_thread, sync_readers_thread, contexts);
  struct stamp start = stamp_now();
  producers_go(&sync_readers);
  producers_join(&sync_readers);  // Every call returned.
  struct stamp end = stamp_now();
  long writes = atomic_load(&sync_readers_writes);
  long barriers = barriers_per_thread * sync_readers_threads;
  if (writes != barriers) sync_readers_violation("barriers at the end", writes, barriers);
  for (int t = 0; t < sync_readers_threads; t++) {
    check_count("sync_readers (one thread's readers)", sync_reader[t].reads,
                per_thread - barriers_per_thread);
  }
  const char *verbose = getenv("BENCH_VERBOSE");
  if (verbose != NULL && strcmp(verbose, "1") == 0) {
    fprintf(stderr,
            "bench: sync_readers %ld calls (%ld barriers): peak readers inside at once %d\n",
            total, writes, atomic_load(&sync_readers_peak));
  }
  dispatch_release(sync_readers_queue);
  return result_between(start, end, total);
}

// ---- I/O channels: a pipe, a socket pair, a regular file -------------------------------------

#ifdef DISPATCH_IO_STREAM
enum { io_mib = 1 << 20 };

static void io_fail(const char *what, int error) {
  fprintf(stderr, "bench: %s failed (error %d)\n", what, error);
  abort();
}

// io_pipe: `mib` MiB through a pipe. A writer channel writes one 1 MiB data object `mib`
// times; a reader channel (low water 64 KiB, high water 1 MiB) counts what arrives to the end
// of the file. ns per MiB.
static struct result bench_io_pipe(long mib) {
  int ends[2];
  if (pipe(ends) != 0) io_fail("pipe", errno);
  dispatch_queue_t queue = dispatch_queue_create("bench.io.pipe", NULL);
  dispatch_semaphore_t done = dispatch_semaphore_create(0);
  char *block = malloc(io_mib);
  memset(block, 'x', io_mib);
  dispatch_data_t chunk = dispatch_data_create(block, io_mib, NULL, DISPATCH_DATA_DESTRUCTOR_FREE);
  int write_end = ends[1], read_end = ends[0];
  dispatch_io_t writer = dispatch_io_create(DISPATCH_IO_STREAM, write_end, queue, ^(int error) {
    (void)error;
    close(write_end);
  });
  dispatch_io_t reader = dispatch_io_create(DISPATCH_IO_STREAM, read_end, queue, ^(int error) {
    (void)error;
    close(read_end);
    dispatch_semaphore_signal(done);
  });
  dispatch_io_set_low_water(reader, 64 * 1024);
  dispatch_io_set_high_water(reader, io_mib);
  __block long received = 0;
  struct stamp start = stamp_now();
  dispatch_io_read(reader, 0, SIZE_MAX, queue, ^(bool finished, dispatch_data_t data, int error) {
    if (error != 0) io_fail("io_pipe read", error);
    if (data != NULL) received += (long)dispatch_data_get_size(data);
    if (finished) dispatch_io_close(reader, 0);
  });
  for (long i = 0; i < mib; i++) {
    dispatch_io_write(writer, 0, chunk, queue, ^(bool finished, dispatch_data_t left, int error) {
      (void)finished, (void)left;
      if (error != 0) io_fail("io_pipe write", error);
    });
  }
  dispatch_io_close(writer, 0);  // After the writes: then the reader sees the end of the file.
  dispatch_semaphore_wait(done, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  if (received != mib * io_mib) io_fail("io_pipe: bytes received", (int)(received / io_mib));
  dispatch_release(chunk);
  dispatch_release(writer);
  dispatch_release(reader);
  dispatch_release(done);
  dispatch_release(queue);
  return result_between(start, end, mib);
}

// io_echo: a 32-byte message bounced over a socket pair through one channel per end; each
// round trip is a write on one channel, a 32-byte read on the other, the same back. ns per
// round trip.
static dispatch_io_t echo_left, echo_right;
static dispatch_queue_t echo_queue;
static dispatch_data_t echo_message;
static long echo_remaining;
static dispatch_semaphore_t echo_done;

static void echo_round(void);

static void echo_send(dispatch_io_t from, dispatch_io_t to, bool back) {
  dispatch_io_write(from, 0, echo_message, echo_queue, ^(bool done, dispatch_data_t left, int error) {
    (void)done, (void)left;
    if (error != 0) io_fail("io_echo write", error);
  });
  dispatch_io_read(to, 0, 32, echo_queue, ^(bool done, dispatch_data_t data, int error) {
    (void)data;
    if (error != 0) io_fail("io_echo read", error);
    if (!done) return;
    if (!back) {
      echo_send(echo_right, echo_left, true);
    } else if (--echo_remaining > 0) {
      echo_round();
    } else {
      dispatch_semaphore_signal(echo_done);
    }
  });
}

static void echo_round(void) { echo_send(echo_left, echo_right, false); }

static struct result bench_io_echo(long rounds) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) io_fail("socketpair", errno);
  echo_queue = dispatch_queue_create("bench.io.echo", NULL);
  echo_done = dispatch_semaphore_create(0);
  echo_message = dispatch_data_create("0123456789abcdef0123456789abcdef", 32, NULL,
                                      DISPATCH_DATA_DESTRUCTOR_DEFAULT);
  echo_left = dispatch_io_create(DISPATCH_IO_STREAM, pair[0], echo_queue, ^(int error) { (void)error; });
  echo_right = dispatch_io_create(DISPATCH_IO_STREAM, pair[1], echo_queue, ^(int error) { (void)error; });
  dispatch_io_set_low_water(echo_left, 1);
  dispatch_io_set_low_water(echo_right, 1);
  echo_remaining = rounds;
  struct stamp start = stamp_now();
  dispatch_async(echo_queue, ^{ echo_round(); });
  dispatch_semaphore_wait(echo_done, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  dispatch_io_close(echo_left, 0);
  dispatch_io_close(echo_right, 0);
  dispatch_release(echo_left);
  dispatch_release(echo_right);
  dispatch_release(echo_message);
  dispatch_sync(echo_queue, ^{});
  dispatch_release(echo_done);
  dispatch_release(echo_queue);
  // The channels give the descriptors back asynchronously; closing them here could race
  // with that, so they stay open (two descriptors per run).
  return result_between(start, end, rounds);
}

// A fresh temporary file /tmp/bench-io-<what>-XXXXXX (its path in `path`) holding `mib` MiB,
// each 4-byte word its own index in the file (so that a piece out of place shows), written and
// synced before the timed part: the dirty pages go to the disk now, not while the other side's
// run is timed, and both sides start with a clean page cache holding the file. Returns the open
// descriptor (read and write), at offset 0.
static int io_temp_file(char path[static 32], const char *what, long mib) {
  snprintf(path, 32, "/tmp/bench-io-%s-XXXXXX", what);
  int fd = mkstemp(path);
  if (fd < 0) io_fail("mkstemp", errno);
  if (mib == 0) return fd;
  uint32_t *block = malloc(io_mib);
  for (long i = 0; i < mib; i++) {
    for (uint32_t w = 0; w < io_mib / 4; w++) block[w] = (uint32_t)i * (io_mib / 4) + w;
    if (write(fd, block, io_mib) != io_mib) io_fail("writing the source", errno);
  }
  free(block);
  sync();
  if (lseek(fd, 0, SEEK_SET) != 0) io_fail("lseek", errno);
  return fd;
}

// io_file: copies a `mib` MiB regular file (written before the timed part, so in the page
// cache) to another with two random-access path channels: each 1 MiB read at an offset is
// written at the same offset. ns per MiB. `bench_io_file` copies twice and times the second.
static struct result io_file_copy(long mib) {
  char source[32], target[32];
  close(io_temp_file(source, "src", mib));
  close(io_temp_file(target, "dst", 0));
  dispatch_queue_t queue = dispatch_queue_create("bench.io.file", NULL);
  dispatch_group_t group = dispatch_group_create();
  dispatch_io_t from = dispatch_io_create_with_path(DISPATCH_IO_RANDOM, source, O_RDONLY, 0, queue,
                                                    ^(int error) { (void)error; });
  dispatch_io_t to = dispatch_io_create_with_path(DISPATCH_IO_RANDOM, target, O_WRONLY, 0, queue,
                                                  ^(int error) { (void)error; });
  dispatch_io_set_high_water(from, io_mib);
  dispatch_io_set_low_water(from, io_mib);
  __block off_t offset = 0;
  struct stamp start = stamp_now();
  dispatch_group_enter(group);
  dispatch_io_read(from, 0, SIZE_MAX, queue, ^(bool done, dispatch_data_t data, int error) {
    if (error != 0) io_fail("io_file read", error);
    if (data != NULL && dispatch_data_get_size(data) > 0) {
      dispatch_group_enter(group);
      dispatch_io_write(to, offset, data, queue, ^(bool written, dispatch_data_t left, int werror) {
        (void)left;
        if (werror != 0) io_fail("io_file write", werror);
        if (written) dispatch_group_leave(group);
      });
      offset += (off_t)dispatch_data_get_size(data);
    }
    if (done) dispatch_group_leave(group);
  });
  dispatch_group_wait(group, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  if (offset != (off_t)mib * io_mib) io_fail("io_file: bytes copied", (int)(offset / io_mib));
  dispatch_io_close(from, 0);
  dispatch_io_close(to, 0);
  dispatch_release(from);
  dispatch_release(to);
  dispatch_release(group);
  dispatch_release(queue);
  unlink(source);
  unlink(target);
  return result_between(start, end, mib);
}

// The first copy in a process is not timed: with only the harness's tenth-size warm-up,
// whichever side ran first in a pair took 1.5-2.2 ms/MiB and the second 0.3-0.7, CPU time
// included, on both libraries (the first process's page-cache pages were memory the VM had
// not touched lately; the second reused what the first had just freed), so the run order,
// not the library, decided the median.
static struct result bench_io_file(long mib) {
  (void)io_file_copy(mib);
  return io_file_copy(mib);
}

// io_writes: the dispatch_read2 case. A `mib` MiB file is read whole with dispatch_read
// (untimed); timed: that data object cut into subranges of 10 KiB, each written with its own
// dispatch_write to one descriptor of a fresh file, all submitted back to back from the main
// thread, until every handler has run. Then the new file must equal the source byte for byte
// (the writes to one descriptor go out in the order submitted). ns per MiB.
enum { io_piece = 10 * 1024 };

static struct result bench_io_writes(long mib) {
  char source[32], target[32];
  int in = io_temp_file(source, "src", mib);
  int out = io_temp_file(target, "dst", 0);
  size_t total = (size_t)mib * io_mib;
  dispatch_queue_t queue = dispatch_queue_create("bench.io.writes", NULL);
  dispatch_group_t group = dispatch_group_create();
  __block dispatch_data_t contents = NULL;
  dispatch_group_enter(group);
  dispatch_read(in, SIZE_MAX, queue, ^(dispatch_data_t data, int error) {
    if (error != 0) io_fail("io_writes read", error);
    dispatch_retain(data);
    contents = data;
    dispatch_group_leave(group);
  });
  dispatch_group_wait(group, DISPATCH_TIME_FOREVER);
  if (dispatch_data_get_size(contents) != total) {
    io_fail("io_writes: bytes read", (int)dispatch_data_get_size(contents));
  }
  struct stamp start = stamp_now();
  for (size_t offset = 0; offset < total; offset += io_piece) {
    size_t length = total - offset < io_piece ? total - offset : io_piece;
    dispatch_data_t piece = dispatch_data_create_subrange(contents, offset, length);
    dispatch_group_enter(group);
    dispatch_write(out, piece, queue, ^(dispatch_data_t left, int error) {
      (void)left;
      if (error != 0) io_fail("io_writes write", error);
      dispatch_group_leave(group);
    });
    dispatch_release(piece);
  }
  dispatch_group_wait(group, DISPATCH_TIME_FOREVER);
  struct stamp end = stamp_now();
  const void *expected;
  size_t expected_size;
  dispatch_data_t map = dispatch_data_create_map(contents, &expected, &expected_size);
  char *written = malloc(total + 1);
  int check = open(target, O_RDONLY);
  if (check < 0) io_fail("opening the target", errno);
  size_t got = 0;
  for (ssize_t n; (n = read(check, written + got, total + 1 - got)) > 0;) got += (size_t)n;
  close(check);
  if (got != total) io_fail("io_writes: target size", (int)got);
  if (memcmp(written, expected, total) != 0) io_fail("io_writes: target differs from source", 0);
  free(written);
  dispatch_release(map);
  dispatch_release(contents);
  dispatch_release(group);
  dispatch_release(queue);
  unlink(source);
  unlink(target);
  // The descriptors stay open (two per run), as in io_echo: the library lets go of them
  // asynchronously, and a number closed here and reused by the next run could meet it.
  (void)in, (void)out;
  return result_between(start, end, mib);
}
#endif

// ---- apply: dispatch_apply_f from the main thread ---------------------------------------------

static _Atomic long apply_sum;

/// One iteration: a little arithmetic on its index, summed once per 1000 so the iterations
/// themselves (not a shared counter) are what is measured.
static void apply_item(void *context, size_t index) {
  (void)context;
  if (index % 1000 == 999) atomic_fetch_add_explicit(&apply_sum, 1, memory_order_relaxed);
}

static struct result bench_apply(long iterations) {
  dispatch_queue_t queue = dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0);
  atomic_store(&apply_sum, 0);
  struct stamp start = stamp_now();
  // 100 calls of 10k iterations: each call fans out over the pool and joins.
  for (long call = 0; call < iterations / 10000; call++)
    dispatch_apply_f(10000, queue, NULL, apply_item);
  struct stamp end = stamp_now();
  check_count("apply", atomic_load(&apply_sum), iterations / 1000);
  return result_between(start, end, iterations);
}

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
    {"group_main", 1000000, bench_group,
     "1M dispatch_group_async_f from the main thread + dispatch_group_wait (ns/item)"},
    {"rw_barrier", 1000000, bench_rw_barrier,
     "1M onto a concurrent queue, 16 dispatch_async_f readers per dispatch_barrier_async_f "
     "writer (ns/item)"},
    {"serial_4p", 1000000, bench_serial_4p,
     "4 pthreads x 250k dispatch_async_f onto one serial queue (ns/item)"},
    {"producers_8", 1000000, bench_producers_8,
     "8 pthreads x 125k dispatch_async_f, half onto the global queue, half onto their own serial "
     "queue (ns/item)"},
    {"after_dense", 100000, bench_after_dense,
     "100k dispatch_after_f over 200 ms, shuffled: p99 lateness in ns (wall column), CPU and "
     "allocs per timer"},
    {"apply", 1000000, bench_apply,
     "100 dispatch_apply_f of 10k iterations from the main thread (ns/iteration)"},
    {"sync_readers", 1000000, bench_sync_readers,
     "128 pthreads x 7812 dispatch_sync_f onto one concurrent queue, every 100th a "
     "dispatch_barrier_sync_f (ns/call)"},
#ifdef DISPATCH_IO_STREAM
    {"io_pipe", 256, bench_io_pipe,
     "256 MiB through a pipe, a writer channel and a reader channel (ns/MiB)"},
    {"io_echo", 20000, bench_io_echo,
     "32-byte echo over a socket pair through one channel per end, 20k (ns/round trip)"},
    {"io_file", 256, bench_io_file,
     "256 MiB file copied with two random-access path channels, 1 MiB per read (ns/MiB)"},
    {"io_writes", 10, bench_io_writes,
     "10 MiB read with dispatch_read, written back as 1024 dispatch_write of 10 KiB subranges "
     "to one fd, in order (ns/MiB)"},
#endif
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
  check_allocation_counting();
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
    printf("%s\t%.1f\t%.1f\t%.4f\t%s\n", rows[r].key, result.wall_ns, result.cpu_ns,
           result.allocations, rows[r].description);
    fflush(stdout);
  }
  return 0;
}
