// dispatch_io's answers where the channel cannot do what is asked: the error each read and
// each cleanup handler gets. Each case runs alone, its handlers on one serial queue; the main
// thread waits for the read's last call and for the cleanup, then prints what both got, so
// the lines do not depend on which came first. Both libraries must print the same lines.
#include "diff_io_common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

static char directory[64];
static int cleanup_error;

// A cleanup handler that records its error and signals `step`.
static void (^recording)(int) = ^(int error) {
  cleanup_error = error;
  dispatch_semaphore_signal(step);
};

// Reads 4 bytes from `channel` (NULL: says so), closes and releases it, and prints the read's
// last call and the cleanup's error.
static void read_and_close(const char *name, dispatch_io_t channel) {
  if (!channel) {
    printf("%s: NULL channel\n", name);
    return;
  }
  __block int read_error = -1;
  __block int got_data = -1;
  dispatch_io_read(channel, 0, 4, q, ^(bool done, dispatch_data_t data, int error) {
    if (!done) return;
    read_error = error;
    got_data = data != NULL;
    dispatch_semaphore_signal(step);
  });
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();
  wait_step();
  printf("%s: read ends with %s, error %d; cleanup error %d\n", name,
         got_data ? "data" : "NULL", read_error, cleanup_error);
}

// Waits up to 5 seconds for the cleanup of `channel`, not used yet, prints whether it came
// and its error, then closes and releases the channel (and waits for a late cleanup).
static void cleanup_at_creation(const char *name, dispatch_io_t channel) {
  bool came = !dispatch_semaphore_wait(step, dispatch_time(DISPATCH_TIME_NOW,
                                                           5 * (int64_t)NSEC_PER_SEC));
  printf("%s: cleanup before any use or close: %s, error %d\n", name, came ? "yes" : "no",
         came ? cleanup_error : 0);
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  if (!came) wait_step();
}

// Makes a channel on `fd`, closes it first if `close_first`, makes a second one from it and
// reads 4 bytes with the second; prints the read's end and both cleanups' errors once all
// three have come (libdispatch runs the first channel's cleanup after the second's is done
// with the descriptor).
static void from_channel(const char *name, int fd, bool close_first) {
  __block int original_error = -1;
  __block int derived_error = -1;
  __block int read_error = -1;
  __block int got_data = -1;
  dispatch_io_t original = dispatch_io_create(DISPATCH_IO_RANDOM, fd, q, ^(int error) {
    original_error = error;
    dispatch_semaphore_signal(step);
  });
  if (close_first) dispatch_io_close(original, 0);
  dispatch_io_t derived = dispatch_io_create_with_io(DISPATCH_IO_RANDOM, original, q, ^(int error) {
    derived_error = error;
    dispatch_semaphore_signal(step);
  });
  dispatch_io_read(derived, 0, 4, q, ^(bool done, dispatch_data_t data, int error) {
    if (!done) return;
    read_error = error;
    got_data = data != NULL;
    dispatch_semaphore_signal(step);
  });
  dispatch_io_close(derived, 0);
  dispatch_release(derived);
  dispatch_io_close(original, 0);
  dispatch_release(original);
  wait_step();
  wait_step();
  wait_step();
  printf("%s: read ends with %s, error %d; cleanup error %d; the first's cleanup error %d\n",
         name, got_data ? "data" : "NULL", read_error, derived_error, original_error);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  q = dispatch_queue_create("io.answers", NULL);
  step = dispatch_semaphore_create(0);
  snprintf(directory, sizeof directory, "/tmp/diff_io_answers.%d", (int)getpid());
  mkdir(directory, 0700);
  char fifo[96];
  snprintf(fifo, sizeof fifo, "%s/fifo", directory);
  mkfifo(fifo, 0600);

  // 1. A random channel cannot seek a pipe, a socket or a FIFO: ESPIPE, for a descriptor and
  //    for a path. A stream channel on the same pipe is fine.
  int pipe_fds[2];
  pipe(pipe_fds);
  read_and_close("random pipe",
                 dispatch_io_create(DISPATCH_IO_RANDOM, pipe_fds[0], q, recording));
  int sockets[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sockets);
  read_and_close("random socket",
                 dispatch_io_create(DISPATCH_IO_RANDOM, sockets[0], q, recording));
  read_and_close("random FIFO path",
                 dispatch_io_create_with_path(DISPATCH_IO_RANDOM, fifo, O_RDONLY | O_NONBLOCK, 0,
                                              q, recording));
  write(pipe_fds[1], "abcd", 4);
  read_and_close("stream pipe",
                 dispatch_io_create(DISPATCH_IO_STREAM, pipe_fds[0], q, recording));

  // 2. No channel reads a directory: EISDIR, for a descriptor (stream or random) and for a
  //    path.
  int directory_fd = open(directory, O_RDONLY | O_DIRECTORY);
  read_and_close("stream directory",
                 dispatch_io_create(DISPATCH_IO_STREAM, directory_fd, q, recording));
  read_and_close("random directory",
                 dispatch_io_create(DISPATCH_IO_RANDOM, directory_fd, q, recording));
  read_and_close("directory path",
                 dispatch_io_create_with_path(DISPATCH_IO_STREAM, directory, O_RDONLY, 0, q,
                                              recording));

  // 3. dispatch_suspend, dispatch_resume and dispatch_activate do nothing to a channel: a
  //    read on a suspended channel still runs, and resuming more often than suspending is
  //    no error.
  char file[96];
  snprintf(file, sizeof file, "%s/file", directory);
  int file_fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
  write(file_fd, "abcdefgh", 8);
  dispatch_io_t channel = dispatch_io_create(DISPATCH_IO_RANDOM, file_fd, q, recording);
  dispatch_suspend(channel);
  dispatch_activate(channel);
  read_and_close("suspended channel", channel);
  channel = dispatch_io_create(DISPATCH_IO_RANDOM, file_fd, q, recording);
  dispatch_resume(channel);
  dispatch_resume(channel);
  read_and_close("resumed channel", channel);

  // 4. The water marks keep low <= high: a high mark set below the low one lowers the low
  //    one to it, a low mark set above the high one raises the high one to it (io.h). A read
  //    of 250 bytes of a file then comes in 30s, or in 100s.
  char bytes[300];
  memset(bytes, 'x', sizeof bytes);
  pwrite(file_fd, bytes, sizeof bytes, 0);
  for (int order = 0; order < 2; order++) {
    dispatch_io_t marked = dispatch_io_create(DISPATCH_IO_RANDOM, file_fd, q, recording);
    if (order == 0) {
      dispatch_io_set_low_water(marked, 100);
      dispatch_io_set_high_water(marked, 30);
    } else {
      dispatch_io_set_high_water(marked, 30);
      dispatch_io_set_low_water(marked, 100);
    }
    printf("%s:", order == 0 ? "high 30 after low 100" : "low 100 after high 30");
    dispatch_io_read(marked, 0, 250, q, ^(bool done, dispatch_data_t data, int error) {
      printf(" %zu%s", data ? dispatch_data_get_size(data) : 0, done ? " done" : "");
      if (!done) return;
      printf(", error %d\n", error);
      dispatch_semaphore_signal(step);
    });
    dispatch_io_close(marked, 0);
    dispatch_release(marked);
    wait_step();
    wait_step();
  }

  // 5. A channel made from a closed channel is cancelled: ECANCELED. One made from an open
  //    channel reads.
  from_channel("from an open channel", file_fd, false);
  from_channel("from a closed channel", file_fd, true);

  // 6. A channel that cannot be used gives up at creation: its cleanup handler runs before
  //    any use or close (waited for here, generously), with the error.
  char missing[96];
  snprintf(missing, sizeof missing, "%s/missing", directory);
  cleanup_at_creation("bad descriptor", dispatch_io_create(DISPATCH_IO_STREAM, 999, q, recording));
  cleanup_at_creation("missing path", dispatch_io_create_with_path(DISPATCH_IO_STREAM, missing,
                                                                   O_RDONLY, 0, q, recording));
  cleanup_at_creation("random pipe", dispatch_io_create(DISPATCH_IO_RANDOM, pipe_fds[0], q,
                                                        recording));
  cleanup_at_creation("directory path", dispatch_io_create_with_path(DISPATCH_IO_STREAM,
                                                                     directory, O_RDONLY, 0, q,
                                                                     recording));
  dispatch_io_t closed = dispatch_io_create(DISPATCH_IO_STREAM, file_fd, q, recording);
  dispatch_io_close(closed, 0);
  wait_step();  // Its cleanup.
  cleanup_at_creation("from a closed channel",
                      dispatch_io_create_with_io(DISPATCH_IO_STREAM, closed, q, recording));
  dispatch_release(closed);
  // A missing path that O_CREAT may create is no error (the file is made at the first use).
  read_and_close("missing path with O_CREAT",
                 dispatch_io_create_with_path(DISPATCH_IO_STREAM, missing, O_RDWR | O_CREAT,
                                              0600, q, recording));
  unlink(missing);

  // Closed only now: libdispatch keeps its record of a descriptor (and its error) for a
  // while after a channel's cleanup, so a number reused at once could inherit it.
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  close(sockets[0]);
  close(sockets[1]);
  close(directory_fd);
  close(file_fd);
  unlink(file);
  unlink(fifo);
  rmdir(directory);
  return 0;
}
