// Small inline wrappers for Linux calls that `import Glibc` does not expose to Swift
// (variadic syscall, gettid, pthread_setname_np, sched_getaffinity/CPU_COUNT, eventfd,
// timerfd). Each wrapper is a single call, or a few lines around one; error handling lives
// in Swift.
#ifndef LOOPDISPATCH_CLOOPSHIMS_H
#define LOOPDISPATCH_CLOOPSHIMS_H

// No _GNU_SOURCE here: headers seen with other feature macros than Glibc's module would be
// imported as conflicting definitions. The GNU-only calls go through syscall/prctl instead.
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static inline int cls_errno(void) { return errno; }

/// `pipe2` (GNU-only in glibc's headers): a pipe whose ends get `flags` (O_CLOEXEC,
/// O_NONBLOCK) atomically, so a fork on another thread never inherits them half-set.
static inline int cls_pipe2(int *fds, int flags) { return (int)syscall(SYS_pipe2, fds, flags); }

/// A spin-wait hint (x86 `pause`, arm64 `yield`).
static inline void cls_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/// Asks the CPU to start fetching the `bytes` bytes at `address` for writing, without waiting
/// and without faulting: a hint only, valid for any address (a wrong one costs a wasted fetch).
/// For memory another core wrote last that this thread will write soon (`NodeCache`).
static inline void cls_prefetch_for_write(const void *address, long bytes) {
  for (long offset = 0; offset < bytes; offset += 64) {
    __builtin_prefetch((const char *)address + offset, 1, 3);
  }
  __builtin_prefetch((const char *)address + bytes - 1, 1, 3);
}

/// A compiler-only barrier: no load or store (atomic or not) is moved across it by the
/// compiler; the CPU is not told anything. For the biased `sync` (Queue+SyncBias.swift), whose
/// store-then-load needs only the compiler's order, the CPU's being given by the revoker's
/// `membarrier`.
static inline void cls_compiler_barrier(void) { __asm__ __volatile__("" ::: "memory"); }

/// `membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)`: 0 once the process may use the
/// expedited barrier below, -1 where the kernel lacks it (or a seccomp filter refuses it).
static inline int cls_membarrier_register(void) {
  // 1 << 4 and 1 << 3: <linux/membarrier.h>'s REGISTER_PRIVATE_EXPEDITED and
  // PRIVATE_EXPEDITED (Linux 4.14), written out so old headers still build.
  return (int)syscall(SYS_membarrier, 1 << 4, 0, 0);
}

/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: when it returns, every other thread of
/// the process that was running has executed a full memory barrier (an interrupt on its
/// CPU), and every one that was not will, before it runs again. 0, or -1 with errno.
static inline int cls_membarrier(void) { return (int)syscall(SYS_membarrier, 1 << 3, 0, 0); }

/// A cheap, monotonic per-machine cycle counter for measuring short intervals (x86 TSC,
/// arm64 virtual counter); its rate is calibrated against CLOCK_MONOTONIC by the caller.
/// Elsewhere it is CLOCK_MONOTONIC in nanoseconds.
static inline uint64_t cls_cycle_counter(void) {
#if defined(__x86_64__)
  return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
  uint64_t value;
  __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(value));
  return value;
#else
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
#endif
}

static inline pid_t cls_gettid(void) { return (pid_t)syscall(SYS_gettid); }

static inline int cls_is_main_thread(void) { return cls_gettid() == getpid(); }

/// Whether the caller is the process main thread, computed once per thread and then read
/// from a thread-local cache (no system call on the fast path). Each object file has its own
/// cache (a `static __thread` in a `static inline` function has internal linkage); every copy
/// computes the same answer, so that is harmless here. LoopDispatch's own thread-local slots,
/// which must be one variable per thread, are in Sources/CLoopThreadSlots.
static inline int cls_is_main_thread_cached(void) {
  static __thread int cache = 0;  // 0 unknown, 1 main, 2 other
  if (__builtin_expect(cache == 0, 0)) cache = cls_is_main_thread() ? 1 : 2;
  return cache == 1;
}

/// Names the calling thread (Linux truncates to 15 bytes plus NUL).
static inline int cls_set_thread_name(const char *name) {
  char buf[16];
  int i = 0;
  for (; i < 15 && name[i] != 0; i++) buf[i] = name[i];
  buf[i] = 0;
  return prctl(PR_SET_NAME, (unsigned long)buf, 0, 0, 0);
}

/// Copies the calling thread's name into `buf` (at least 16 bytes).
static inline int cls_get_thread_name(char *buf) {
  return prctl(PR_GET_NAME, (unsigned long)buf, 0, 0, 0);
}

/// The CPU the calling thread runs on (glibc reads it from the thread's rseq area where the
/// kernel and glibc support rseq, else through the vDSO's getcpu where there is one, as on
/// x86-64: no system call here; elsewhere it may be one), or -1.
int sched_getcpu(void);
static inline int cls_current_cpu(void) { return sched_getcpu(); }

/// Pins the calling thread to CPU `cpu` (sched_setaffinity, which moves the thread there
/// before it returns). 0, or -errno (EINVAL: not a CPU the process may use). For tests.
static inline int cls_pin_calling_thread(int cpu) {
  unsigned long mask[16] = {0};  // Up to 1024 CPUs.
  int bits = (int)(8 * sizeof(unsigned long));
  if (cpu < 0 || cpu >= 16 * bits) return -EINVAL;
  mask[cpu / bits] = 1UL << (cpu % bits);
  long r = syscall(SYS_sched_setaffinity, 0, sizeof(mask), mask);
  return r == 0 ? 0 : -errno;
}

/// CPUs this process may run on (the sched_getaffinity mask), at least 1.
static inline int cls_available_cpus(void) {
  unsigned long mask[16] = {0};  // Up to 1024 CPUs.
  long bytes = syscall(SYS_sched_getaffinity, 0, sizeof(mask), mask);
  if (bytes <= 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
  }
  int n = 0;
  for (long i = 0; i < bytes / (long)sizeof(unsigned long); i++) n += __builtin_popcountl(mask[i]);
  return n > 0 ? n : 1;
}

/// futex(FUTEX_WAIT_PRIVATE): sleeps while *addr == expected. Returns 0 or -errno.
static inline int cls_futex_wait(uint32_t *addr, uint32_t expected, const struct timespec *rel) {
  long r = syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, rel, NULL, 0);
  return r == 0 ? 0 : -errno;
}

/// futex(FUTEX_WAKE_PRIVATE): wakes up to `count` sleepers; returns how many woke.
static inline int cls_futex_wake(uint32_t *addr, int count) {
  long r = syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
  return r < 0 ? -errno : (int)r;
}

/// Bytes readable now on `fd` (FIONREAD), or -1 with errno set.
static inline int cls_bytes_readable(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
}

/// Bytes queued but not yet sent on socket `fd` (SIOCOUTQ), or -1 with errno set.
static inline int cls_socket_unsent(int fd) {
  int n = 0;
  return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
}

static inline int cls_eventfd(unsigned int initval, int flags) { return eventfd(initval, flags); }
static const int cls_efd_nonblock_cloexec = EFD_NONBLOCK | EFD_CLOEXEC;

static inline int cls_timerfd_create_monotonic(void) {
  return timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
}

/// Arms `fd` to fire once at the absolute CLOCK_MONOTONIC time `ns` (0 disarms).
static inline int cls_timerfd_set_abs(int fd, uint64_t ns) {
  struct itimerspec spec = {{0, 0}, {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)}};
  if (ns == 0) spec.it_value.tv_nsec = 0;
  return timerfd_settime(fd, ns == 0 ? 0 : TFD_TIMER_ABSTIME, &spec, NULL);
}

// epoll, for LoopDispatch's I/O driver (struct epoll_event is packed on x86-64, so Swift never
// touches it: these wrappers take and return its two fields).
static inline int cls_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
static const uint32_t cls_epollin = EPOLLIN;
static const uint32_t cls_epollout = EPOLLOUT;
static const uint32_t cls_epollerr = EPOLLERR;
static const uint32_t cls_epollhup = EPOLLHUP;
static const uint32_t cls_epollrdhup = EPOLLRDHUP;
static const uint32_t cls_epolloneshot = EPOLLONESHOT;
static const uint32_t cls_epollpri = EPOLLPRI;
static const uint32_t cls_epollet = EPOLLET;
static const int cls_epoll_ctl_add = EPOLL_CTL_ADD;
static const int cls_epoll_ctl_mod = EPOLL_CTL_MOD;
static const int cls_epoll_ctl_del = EPOLL_CTL_DEL;
/// epoll_ctl with `events` and a 64-bit token; returns 0 or an errno.
static inline int cls_epoll_control(int epfd, int op, int fd, uint32_t events, uint64_t token) {
  struct epoll_event event;
  event.events = events;
  event.data.u64 = token;
  return epoll_ctl(epfd, op, fd, &event) == 0 ? 0 : errno;
}
/// Waits for up to `max` (at most 64) events; returns the count (fields copied out), 0 or -1.
static inline int cls_epoll_wait_many(int epfd, uint32_t *events, uint64_t *tokens, int max,
                                      int timeout) {
  struct epoll_event batch[64];
  if (max > 64) max = 64;
  int n = epoll_wait(epfd, batch, max, timeout);
  for (int i = 0; i < n; i++) {
    events[i] = batch[i].events;
    tokens[i] = batch[i].data.u64;
  }
  return n;
}

/// Arms `fd` to fire every `ns` nanoseconds, first `ns` from now (0 disarms).
static inline int cls_timerfd_set_periodic(int fd, uint64_t ns) {
  struct timespec period = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  struct itimerspec spec = {period, period};
  return timerfd_settime(fd, 0, &spec, NULL);
}
/// Creates a blocking CLOCK_MONOTONIC timerfd (for a thread that sleeps in read on it).
static inline int cls_timerfd_create_blocking(void) {
  return timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
}

#ifndef SYS_pidfd_open
#if defined(__x86_64__) || defined(__aarch64__)
#define SYS_pidfd_open 434  // The same number on every architecture since Linux 5.3.
#endif
#endif
/// pidfd_open(2) (Linux 5.3+) through syscall, for C libraries without a wrapper: a descriptor
/// that becomes readable when process `pid` exits (it does not reap). Returns the descriptor,
/// or -1 with errno set (ESRCH: no such process; ENOSYS: the kernel lacks the call).
static inline int cls_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
  return (int)syscall(SYS_pidfd_open, pid, 0);
#else
  errno = ENOSYS;
  return -1;
#endif
}

// ---- inotify (FileSource: EventSources/FileWatchHub.swift) ----
static const uint32_t cls_in_modify = IN_MODIFY;
static const uint32_t cls_in_attrib = IN_ATTRIB;
static const uint32_t cls_in_move_self = IN_MOVE_SELF;
static const uint32_t cls_in_delete_self = IN_DELETE_SELF;
static const uint32_t cls_in_unmount = IN_UNMOUNT;
static const uint32_t cls_in_q_overflow = IN_Q_OVERFLOW;
static const uint32_t cls_in_ignored = IN_IGNORED;
static const uint32_t cls_in_mask_add = IN_MASK_ADD;
/// A non-blocking, close-on-exec inotify instance, or -1 (errno set).
static inline int cls_inotify_create(void) { return inotify_init1(IN_NONBLOCK | IN_CLOEXEC); }
/// Watches the file `fd` names (through /proc/self/fd/N, which names the open file even after
/// a rename or an unlink); returns the watch descriptor, or -1 (errno set).
static inline int cls_inotify_watch_descriptor(int inotify_fd, int fd, uint32_t mask) {
  char path[32];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  return inotify_add_watch(inotify_fd, path, mask);
}
static inline int cls_inotify_unwatch(int inotify_fd, int wd) {
  return inotify_rm_watch(inotify_fd, wd) == 0 ? 0 : errno;
}
/// The size of a buffer that always holds at least one event.
static const int cls_inotify_buffer_size = 16 * (int)(sizeof(struct inotify_event) + NAME_MAX + 1);
/// Reads the event at `offset` of the `length` bytes `read` filled into `buffer`; returns the
/// offset of the next event, or -1 if no whole event starts at `offset`. The kernel writes
/// whole, aligned events; the copy avoids assuming the caller's buffer alignment.
static inline int cls_inotify_event_at(const void *buffer, int length, int offset, int32_t *wd,
                                       uint32_t *mask) {
  struct inotify_event event;
  if (offset < 0 || length - offset < (int)sizeof event) return -1;
  memcpy(&event, (const char *)buffer + offset, sizeof event);
  int next = offset + (int)sizeof event + (int)event.len;
  if (next > length) return -1;
  *wd = event.wd;
  *mask = event.mask;
  return next;
}

#endif
