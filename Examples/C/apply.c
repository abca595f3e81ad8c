/*
 * GCD concept: dispatch_apply with striding (seed article 000; the C version of
 * Sources/Examples/Seeds/Apply.swift).
 *
 * dispatch_apply runs a loop body on several threads at once (the calling thread takes part)
 * and returns only when every iteration has returned, like a `for` loop. When one iteration
 * is tiny, the cost of handing it out dominates; striding gives each call a *chunk* of
 * iterations, so the cost is paid per chunk instead. Here the _f form, whose context carries
 * the loop's shared state.
 */
#include "seed.h"

enum { max_threads = 16 };

/* The loop's shared state, passed to every chunk. */
struct sum_of_squares {
  uint64_t count, stride;
  _Atomic uint64_t total;  // Relaxed adds; read only after dispatch_apply_f returns.
  atomic_int chunks_done;
  pthread_mutex_t lock;
  char threads[max_threads][32];  // The threads that took part. Protected by: lock.
  int thread_count;               // Protected by: lock.
};

static void sum_chunk(void *context, size_t chunk) {
  struct sum_of_squares *sum = context;
  uint64_t lower = chunk * sum->stride;
  uint64_t upper = lower + sum->stride < sum->count ? lower + sum->stride : sum->count;
  uint64_t partial = 0;
  for (uint64_t i = lower; i < upper; i++) partial += i * i;
  atomic_fetch_add_explicit(&sum->total, partial, memory_order_relaxed);
  atomic_fetch_add(&sum->chunks_done, 1);

  char thread[32] = "main thread";
  if (!seed_on_main_thread()) pthread_getname_np(pthread_self(), thread, sizeof thread);
  pthread_mutex_lock(&sum->lock);
  bool seen = false;
  for (int i = 0; i < sum->thread_count; i++) seen = seen || strcmp(sum->threads[i], thread) == 0;
  if (!seen && sum->thread_count < max_threads) {
    snprintf(sum->threads[sum->thread_count++], sizeof sum->threads[0], "%s", thread);
  }
  pthread_mutex_unlock(&sum->lock);
  say("chunk %zu: %llu..<%llu", chunk, (unsigned long long)lower, (unsigned long long)upper);
}

static int compare_names(const void *a, const void *b) { return strcmp(a, b); }

int main(void) {
  struct sum_of_squares sum = {.count = 1000000, .stride = 125000};
  pthread_mutex_init(&sum.lock, NULL);
  size_t chunks = (size_t)((sum.count + sum.stride - 1) / sum.stride);
  say("sum of i*i for i in 0..<%llu: %zu chunks of %llu, not %llu calls",
      (unsigned long long)sum.count, chunks, (unsigned long long)sum.stride,
      (unsigned long long)sum.count);

  dispatch_apply_f(chunks, DISPATCH_APPLY_AUTO, &sum, sum_chunk);

  // dispatch_apply_f has returned, so every chunk has added its part.
  uint64_t total = atomic_load_explicit(&sum.total, memory_order_relaxed);
  uint64_t n = sum.count;
  uint64_t expected = (n - 1) * n * (2 * n - 1) / 6;
  say("dispatch_apply returned: every chunk is done (%d of %zu)", atomic_load(&sum.chunks_done),
      chunks);
  qsort(sum.threads, (size_t)sum.thread_count, sizeof sum.threads[0], compare_names);
  char threads[512] = "";
  for (int i = 0; i < sum.thread_count; i++) {
    if (i > 0) strncat(threads, ", ", sizeof threads - strlen(threads) - 1);
    strncat(threads, sum.threads[i], sizeof threads - strlen(threads) - 1);
  }
  say("threads that took part: %s", threads);
  say("sum = %llu, expected %llu", (unsigned long long)total, (unsigned long long)expected);
  pthread_mutex_destroy(&sum.lock);
  if (total != expected || atomic_load(&sum.chunks_done) != (int)chunks) {
    fail("apply: FAILED (wrong sum)");
  }
  return 0;
}
