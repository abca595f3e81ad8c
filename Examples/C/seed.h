/*
 * Helpers shared by the C seed programs (the C side of Sources/Examples/Seeds/SeedSupport.swift):
 *
 * - say(): prints one line stamped with the time since the program started, the label of
 *   the queue the caller runs on and the thread's name:
 *   `[+   1.234 ms] [store @ reader.0] read a=1 (2 readers inside)`;
 * - fail(): says what went wrong and exits 1 (every program checks itself);
 * - run_on_new_threads(): N POSIX threads, released at the same moment, joined;
 * - struct rendezvous: holds N threads until all of them have arrived, to force an
 *   interleaving instead of hoping a sleep produces it.
 *
 * Everything is static inline: each program is one .c file that includes this header.
 */
#ifndef SEED_H
#define SEED_H

#define _GNU_SOURCE
#include <dispatch/dispatch.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Monotonic nanoseconds. */
static inline uint64_t seed_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * NSEC_PER_SEC + (uint64_t)now.tv_nsec;
}

/* When the program started: the first call (say() makes it from main before anything else). */
static inline uint64_t seed_start(void) {
  static _Atomic uint64_t start;
  uint64_t seen = atomic_load(&start);
  if (seen != 0) return seen;
  uint64_t expected = 0;
  uint64_t now = seed_now();
  return atomic_compare_exchange_strong(&start, &expected, now) ? now : expected;
}

/* Whole milliseconds since the program started. */
static inline long seed_elapsed_ms(void) {
  uint64_t start = seed_start();  // First: on the first call it is now.
  return (long)((seed_now() - start) / NSEC_PER_MSEC);
}

static inline bool seed_on_main_thread(void) { return syscall(SYS_gettid) == getpid(); }

/* Set on the threads run_on_new_threads() starts. Outside a dispatch_sync they run no
 * queue's work, but DISPATCH_CURRENT_QUEUE_LABEL names the default global queue there (as in
 * libdispatch), so say() shows only their name. */
static _Thread_local bool seed_client_thread;

/* Prints one stamped line; lines from different threads never mix. Thread-safety: any thread. */
__attribute__((format(printf, 1, 2))) static inline void say(const char *format, ...) {
  static pthread_mutex_t output = PTHREAD_MUTEX_INITIALIZER;
  char thread[32] = "main thread";
  if (!seed_on_main_thread()) pthread_getname_np(pthread_self(), thread, sizeof thread);
  const char *label = dispatch_queue_get_label(DISPATCH_CURRENT_QUEUE_LABEL);
  const char *fallback = dispatch_queue_get_label(dispatch_get_global_queue(0, 0));
  char place[96];
  if (seed_client_thread && strcmp(label, fallback) == 0) {
    snprintf(place, sizeof place, "%s", thread);
  } else {
    snprintf(place, sizeof place, "%s @ %s", label, thread);
  }
  char text[512];
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(text, sizeof text, format, arguments);
  va_end(arguments);
  uint64_t start = seed_start();  // First: on the first call it is now.
  pthread_mutex_lock(&output);
  uint64_t micros = (seed_now() - start) / NSEC_PER_USEC;
  printf("[+%4llu.%03llu ms] [%s] %s\n", (unsigned long long)(micros / 1000),
         (unsigned long long)(micros % 1000), place, text);
  fflush(stdout);  // A crash or another process's output comes after what was said.
  pthread_mutex_unlock(&output);
}

/* Reports a wrong result and exits 1. */
__attribute__((format(printf, 1, 2), noreturn)) static inline void fail(const char *format, ...) {
  char text[512];
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(text, sizeof text, format, arguments);
  va_end(arguments);
  say("%s", text);
  exit(1);
}

/* Exits 1 if the program has not finished after `seconds` (for the programs that end inside
 * dispatch_main(): a lost block would otherwise hang them). */
static inline void fail_after(const char *program, int64_t seconds) {
  dispatch_after(dispatch_time(DISPATCH_TIME_NOW, seconds * (int64_t)NSEC_PER_SEC),
                 dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0), ^{
                   fail("%s: FAILED (not finished after %lld s)", program, (long long)seconds);
                 });
}

/* "success" or "timedOut", for the result of a timed wait (0: success). */
static inline const char *wait_result(intptr_t result) {
  return result == 0 ? "success" : "timedOut";
}

/* ---- Rendezvous ------------------------------------------------------------------------ */

struct rendezvous {
  int parties;
  atomic_int arrived;
  dispatch_semaphore_t released;
};

static inline void rendezvous_init(struct rendezvous *r, int parties) {
  r->parties = parties;
  atomic_init(&r->arrived, 0);
  r->released = dispatch_semaphore_create(0);
}

static inline void rendezvous_destroy(struct rendezvous *r) { dispatch_release(r->released); }

/* Waits until all parties have arrived; false if that took more than 10 s (the interleaving
 * could not happen: the program reports it and fails). */
static inline bool rendezvous_arrive_and_wait(struct rendezvous *r) {
  // Sequentially consistent: the last arrival sees every earlier one.
  if (atomic_fetch_add(&r->arrived, 1) + 1 == r->parties) {
    for (int i = 1; i < r->parties; i++) dispatch_semaphore_signal(r->released);
    return true;
  }
  dispatch_time_t deadline = dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_SEC);
  return dispatch_semaphore_wait(r->released, deadline) == 0;
}

/* ---- Client threads -------------------------------------------------------------------- */

/* Plain threads, not pool workers, for the programs' clients (readers, racers): the pool has
 * one worker per CPU, so eight racers on it might run one after another. */

struct seed_thread {
  pthread_t thread;
  char name[16];
  int index;
  void (^body)(int);
  dispatch_semaphore_t ready, go;
};

static inline void *seed_thread_main(void *raw) {
  struct seed_thread *t = raw;
  pthread_setname_np(pthread_self(), t->name);
  seed_client_thread = true;
  dispatch_semaphore_signal(t->ready);
  dispatch_semaphore_wait(t->go, DISPATCH_TIME_FOREVER);
  t->body(t->index);
  return NULL;
}

/* Runs body(0) ... body(count - 1) on `count` new threads named `prefix.N`, all released at
 * the same moment; returns when all have finished. `body` is only borrowed. */
static inline void run_on_new_threads(int count, const char *prefix, void (^body)(int)) {
  struct seed_thread *threads = calloc((size_t)count, sizeof *threads);
  dispatch_semaphore_t ready = dispatch_semaphore_create(0);
  dispatch_semaphore_t go = dispatch_semaphore_create(0);
  if (threads == NULL) fail("out of memory");
  for (int i = 0; i < count; i++) {
    struct seed_thread *t = &threads[i];
    snprintf(t->name, sizeof t->name, "%s.%d", prefix, i);
    t->index = i;
    t->body = body;
    t->ready = ready;
    t->go = go;
    int status = pthread_create(&t->thread, NULL, seed_thread_main, t);
    if (status != 0) fail("pthread_create failed (%s)", strerror(status));
  }
  for (int i = 0; i < count; i++) dispatch_semaphore_wait(ready, DISPATCH_TIME_FOREVER);
  for (int i = 0; i < count; i++) dispatch_semaphore_signal(go);
  for (int i = 0; i < count; i++) pthread_join(threads[i].thread, NULL);
  dispatch_release(ready);
  dispatch_release(go);
  free(threads);
}

#endif /* SEED_H */
