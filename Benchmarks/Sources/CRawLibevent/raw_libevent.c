// Raw libevent socketpair ping-pong; see raw_libevent.h for the protocol.
#include "raw_libevent.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct pingpong {
  struct event_base *base;
  int remaining;  // round trips still to complete
  int failed;     // set on an I/O error; the loop is broken out of at once
};

static long long monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// User + system CPU time of the whole process, or -1 if getrusage failed.
static long long process_cpu_ns(void) {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return -1;
  return ((long long)usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000000LL +
         ((long long)usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1000LL;
}

static void fail(struct pingpong *pp) {
  pp->failed = 1;
  event_base_loopbreak(pp->base);
}

// Reads the one byte in flight. Returns 1 if a byte was read, 0 on a spurious wake-up.
static int read_byte(struct pingpong *pp, evutil_socket_t fd, char *byte) {
  ssize_t n = read(fd, byte, 1);
  if (n == 1) return 1;
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  fail(pp);
  return 0;
}

static void write_byte(struct pingpong *pp, evutil_socket_t fd, char byte) {
  if (write(fd, &byte, 1) != 1) fail(pp);
}

// End A: one read completes a round trip; start the next one unless done.
static void on_a_readable(evutil_socket_t fd, short what, void *arg) {
  (void)what;
  struct pingpong *pp = arg;
  char byte;
  if (!read_byte(pp, fd, &byte)) return;
  if (--pp->remaining == 0) {
    event_base_loopbreak(pp->base);
    return;
  }
  write_byte(pp, fd, byte);
}

// End B: echo the byte back.
static void on_b_readable(evutil_socket_t fd, short what, void *arg) {
  (void)what;
  struct pingpong *pp = arg;
  char byte;
  if (!read_byte(pp, fd, &byte)) return;
  write_byte(pp, fd, byte);
}

static struct event_base *new_epoll_base(void) {
  struct event_config *config = event_config_new();
  if (!config) return NULL;
  // Same configuration as MainLoop's bases: no base lock, environment ignored, epoll only.
  event_config_set_flag(config, EVENT_BASE_FLAG_NOLOCK | EVENT_BASE_FLAG_IGNORE_ENV);
  event_config_avoid_method(config, "select");
  event_config_avoid_method(config, "poll");
  struct event_base *base = event_base_new_with_config(config);
  event_config_free(config);
  return base;
}

double raw_libevent_pingpong(int round_trips, double *cpu_ns_per_round_trip) {
  if (round_trips < 1) {
    errno = EINVAL;
    return -1;
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) return -1;

  double result = -1;
  struct pingpong pp = {.base = new_epoll_base(), .remaining = round_trips, .failed = 0};
  struct event *a = NULL, *b = NULL;
  if (!pp.base) goto out;
  a = event_new(pp.base, fds[0], EV_READ | EV_PERSIST, on_a_readable, &pp);
  b = event_new(pp.base, fds[1], EV_READ | EV_PERSIST, on_b_readable, &pp);
  if (!a || !b || event_add(a, NULL) != 0 || event_add(b, NULL) != 0) goto out;

  // The CPU clock outside the wall clock at both ends, so getrusage is not in the wall time.
  long long cpu_start = process_cpu_ns();
  long long start = monotonic_ns();
  write_byte(&pp, fds[0], 'x');
  if (!pp.failed && event_base_dispatch(pp.base) < 0) pp.failed = 1;
  long long elapsed = monotonic_ns() - start;
  long long cpu_end = process_cpu_ns();
  if (cpu_start < 0 || cpu_end < 0) pp.failed = 1;
  if (!pp.failed && pp.remaining == 0) {
    result = (double)elapsed / round_trips;
    if (cpu_ns_per_round_trip) {
      *cpu_ns_per_round_trip = (double)(cpu_end - cpu_start) / round_trips;
    }
  }

out:
  if (a) event_free(a);
  if (b) event_free(b);
  if (pp.base) event_base_free(pp.base);
  close(fds[0]);
  close(fds[1]);
  return result;
}

const char *raw_libevent_version(void) { return event_get_version(); }
