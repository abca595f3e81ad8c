// close_guard: an LD_PRELOAD library for the test runs (`make test-unit`, `make test-release`)
// that stops the process at a `close` failing with EBADF: a descriptor closed twice.
//
// Why: every suite runs in one process, many tests at once. A second `close` of a number is
// harmless only while nobody reuses it; once another test (or the runtime) has been handed the
// number in between, the second close takes that descriptor away. A test helper did this
// (ServeClient's failed initialiser, then its deinit), and a source churn running beside it lost
// a pipe and waited for a cancel handler that never came. Most double closes land on a free
// number and fail with EBADF, so failing on EBADF catches the kind of bug before it hits.
//
// Scope: only processes whose executable is under a `.build/` directory (the test binary, its
// exit-test children, the host programs and examples built by the package); tools the tests
// start (a shell, gdb) pass through unchecked. A pass-through everywhere else: the real
// `close` runs first and its result and errno are returned unchanged.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int (*real_close)(int);
static int checking;

__attribute__((constructor)) static void close_guard_start(void) {
  real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0) return;
  path[length] = 0;
  checking = strstr(path, "/.build/") != NULL;
}

int close(int fd) {
  if (!real_close) real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
  int result = real_close(fd);
  if (result == -1 && errno == EBADF && checking && fd >= 0) {
    char message[200];
    int size = snprintf(message, sizeof message,
                        "close_guard: close(%d) failed with EBADF: a descriptor closed twice "
                        "(had another thread reused the number in between, this close would "
                        "have taken its descriptor). Closed from:\n",
                        fd);
    if (size > 0) (void)!write(2, message, (size_t)size < sizeof message ? (size_t)size : sizeof message - 1);
    void *frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    abort();
  }
  return result;
}
