// dispatch_io on streams when operations wait: a path channel on a FIFO nobody writes to
// (libdispatch opens it without waiting; its read ends at the end of file) and on one whose
// writer is idle (the read waits until dispatch_io_close(STOP) cancels it); the order in
// which STOP cancels the operations queued on two channels; a read with an interval but no
// DISPATCH_IO_STRICT_INTERVAL on a trickling pipe; a random channel made from a pipe
// channel. Handlers run on one serial queue; the main thread waits for each with a bound, so
// a hang prints TIMED OUT (or "came: no") instead of stopping the run.
#include "diff_io_common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

// Events appended on `q`, printed by the main thread: one log per sequence whose order is
// fixed (the handlers of one channel's reads, of its writes; a cleanup).
static char logs[4][256];
enum { READS, WRITES, OTHER, CLEANUP };

// Appends `format` (one %s, then a %d or nothing) filled with `text` and `number` to `log`.
static void note(int log, const char *format, const char *text, int number) {
  size_t used = strlen(logs[log]);
  snprintf(logs[log] + used, sizeof logs[log] - used, format, text, number);
}

static void clear_logs(void) { memset(logs, 0, sizeof logs); }

// Whether `step` is signalled within `milliseconds`.
static bool came_within(int milliseconds) {
  return !dispatch_semaphore_wait(step, dispatch_time(DISPATCH_TIME_NOW,
                                                      milliseconds * (int64_t)NSEC_PER_MSEC));
}

// Notes each call in `log` as " name:[done,]data|empty|NULL,error" and signals `step` at
// done.
static dispatch_io_handler_t noting(int log, const char *name) {
  return (dispatch_io_handler_t)_Block_copy(^(bool done, dispatch_data_t data, int error) {
    const char *kind = !data ? "NULL" : dispatch_data_get_size(data) ? "data" : "empty";
    char what[64];
    snprintf(what, sizeof what, " %s:%s%s,%d", name, done ? "done," : "", kind, error);
    note(log, "%s", what, 0);
    if (done) dispatch_semaphore_signal(step);
  });
}

// A cleanup handler that notes " cleanup:error" and signals `step`.
static void (^noting_cleanup)(int) = ^(int error) {
  note(CLEANUP, " %s:%d", "cleanup", error);
  dispatch_semaphore_signal(step);
};

// Fills the socket or pipe `fd` until a write would block.
static void fill(int fd) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  static char block[4096];
  while (write(fd, block, sizeof block) > 0) {
  }
  fcntl(fd, F_SETFL, flags);
}

// Writes 8 bytes every 2 ms, 40 times, to the pipe in *arg, then closes it.
static void *trickle(void *arg) {
  int fd = *(int *)arg;
  for (int round = 0; round < 40; round++) {
    write(fd, "01234567", 8);
    usleep(2000);
  }
  close(fd);
  return NULL;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  q = dispatch_queue_create("io.stream", NULL);
  step = dispatch_semaphore_create(0);
  char directory[64], fifo[96];
  snprintf(directory, sizeof directory, "/tmp/diff_io_stream.%d", (int)getpid());
  mkdir(directory, 0700);
  snprintf(fifo, sizeof fifo, "%s/fifo", directory);
  mkfifo(fifo, 0600);

  // 7. A stream path channel on a FIFO with no writer. libdispatch opens a path that is not a
  //    regular file with O_NONBLOCK, so the open does not wait and a read ends at once at the
  //    end of file (done, empty data, no error). Then dispatch_io_close(STOP):
  //    dispatch_io_get_descriptor returns at once (-1 once stopped), and the cleanup's error.
  clear_logs();
  dispatch_io_t waiting = dispatch_io_create_with_path(DISPATCH_IO_STREAM, fifo, O_RDONLY, 0, q,
                                                       noting_cleanup);
  dispatch_io_read(waiting, 0, 16, q, noting(READS, "read"));
  usleep(100000);  // Lets the open start (not needed for the lines below to hold).
  dispatch_io_close(waiting, DISPATCH_IO_STOP);
  bool read_came = came_within(3000);
  printf("FIFO without a writer, stopped: read's handler came: %s;%s\n", read_came ? "yes" : "no",
         logs[READS]);
  __block int descriptor = -2;
  dispatch_semaphore_t returned = dispatch_semaphore_create(0);
  dispatch_async(dispatch_get_global_queue(0, 0), ^{
    descriptor = dispatch_io_get_descriptor(waiting);
    dispatch_semaphore_signal(returned);
  });
  bool at_once = !dispatch_semaphore_wait(returned, dispatch_time(DISPATCH_TIME_NOW,
                                                                  2 * (int64_t)NSEC_PER_SEC));
  printf("FIFO without a writer, stopped: get_descriptor returned: %s, >= 0: %s\n",
         at_once ? "yes" : "no", at_once && descriptor >= 0 ? "yes" : "no");
  int writer = open(fifo, O_WRONLY | O_NONBLOCK);  // Frees an open that still waits.
  if (!read_came) wait_step();
  wait_step();  // The cleanup.
  printf("FIFO without a writer, stopped: then%s\n", logs[CLEANUP]);
  if (!at_once) dispatch_semaphore_wait(returned, DISPATCH_TIME_FOREVER);
  dispatch_release(waiting);
  close(writer);

  //    The same with a writer that has the FIFO open and writes nothing: the read waits, and
  //    dispatch_io_close(STOP) ends it with ECANCELED.
  clear_logs();
  int idle_writer = open(fifo, O_RDWR);
  waiting = dispatch_io_create_with_path(DISPATCH_IO_STREAM, fifo, O_RDONLY, 0, q,
                                         noting_cleanup);
  dispatch_io_read(waiting, 0, 16, q, noting(READS, "read"));
  usleep(100000);  // Lets the read start waiting.
  dispatch_io_close(waiting, DISPATCH_IO_STOP);
  dispatch_release(waiting);
  wait_step();
  wait_step();
  printf("FIFO with an idle writer, stopped:%s;%s\n", logs[READS], logs[CLEANUP]);
  close(idle_writer);

  // 8. dispatch_io_close(STOP) on channels with operations queued: a socket channel with three
  //    reads (no data comes) and two writes (its buffer is full), then a pipe channel with a
  //    write (the pipe is full). The order in which each stream's handlers are told (the
  //    reads', the writes' and the pipe's order among each other varies in libdispatch).
  clear_logs();
  int s[2], p[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, s);
  pipe(p);
  fill(s[0]);
  fill(p[1]);
  void (^cleanup)(int) = ^(int error) {
    dispatch_semaphore_signal(step);
  };
  dispatch_io_t both = dispatch_io_create(DISPATCH_IO_STREAM, s[0], q, cleanup);
  dispatch_io_t pipe_writer = dispatch_io_create(DISPATCH_IO_STREAM, p[1], q, cleanup);
  dispatch_data_t bytes = dispatch_data_create("abcd", 4, NULL, NULL);
  dispatch_io_read(both, 0, 4, q, noting(READS, "r1"));
  dispatch_io_read(both, 0, 4, q, noting(READS, "r2"));
  dispatch_io_write(both, 0, bytes, q, noting(WRITES, "w1"));
  dispatch_io_read(both, 0, 4, q, noting(READS, "r3"));
  dispatch_io_write(both, 0, bytes, q, noting(WRITES, "w2"));
  dispatch_io_write(pipe_writer, 0, bytes, q, noting(OTHER, "pw"));
  usleep(100000);  // Lets the first read and write start waiting.
  dispatch_io_close(both, DISPATCH_IO_STOP);
  dispatch_io_close(pipe_writer, DISPATCH_IO_STOP);
  for (int event = 0; event < 8; event++) wait_step();
  printf("stopped with operations queued: reads%s\n", logs[READS]);
  printf("stopped with operations queued: writes%s\n", logs[WRITES]);
  printf("stopped with operations queued: pipe%s\n", logs[OTHER]);
  dispatch_release(both);
  dispatch_release(pipe_writer);
  dispatch_release(bytes);

  // 9. An interval without DISPATCH_IO_STRICT_INTERVAL: low water 64, every 5 ms, on a pipe
  //    fed 8 bytes every 2 ms (320 bytes, then closed). The interval does not deliver less
  //    than the low water mark; only what is left at the end of file may be less.
  int t[2];
  pipe(t);
  dispatch_io_t trickled = dispatch_io_create(DISPATCH_IO_STREAM, t[0], q, cleanup);
  dispatch_io_set_low_water(trickled, 64);
  dispatch_io_set_interval(trickled, 5 * NSEC_PER_MSEC, 0);
  __block size_t total = 0;
  size_t *sizes = calloc(400, sizeof *sizes);  // The sizes of the calls with bytes, in order.
  __block int deliveries = 0, final_error = -1;
  dispatch_io_read(trickled, 0, SIZE_MAX, q, ^(bool done, dispatch_data_t data, int error) {
    size_t size = data ? dispatch_data_get_size(data) : 0;
    total += size;
    if (size && deliveries < 400) sizes[deliveries++] = size;
    if (done) final_error = error, dispatch_semaphore_signal(step);
  });
  pthread_t feeder;
  pthread_create(&feeder, NULL, trickle, &t[1]);
  wait_step();
  pthread_join(feeder, NULL);
  int below = 0;  // Calls below the low water mark before the last call with bytes.
  for (int call = 0; call + 1 < deliveries; call++) below += sizes[call] < 64;
  free(sizes);
  printf("non-strict interval: %zu bytes, error %d, several deliveries: %s, "
         "one before the last below 64: %s\n", total, final_error, deliveries > 2 ? "yes" : "no",
         below ? "yes" : "no");
  dispatch_io_close(trickled, 0);
  dispatch_release(trickled);
  wait_step();

  // 10. A random channel made from a stream channel on a pipe: it cannot seek.
  pipe(t);
  write(t[1], "abcd", 4);
  dispatch_io_t pipe_stream = dispatch_io_create(DISPATCH_IO_STREAM, t[0], q, cleanup);
  clear_logs();
  dispatch_io_t random = dispatch_io_create_with_io(DISPATCH_IO_RANDOM, pipe_stream, q,
                                                    noting_cleanup);
  dispatch_io_read(random, 0, 4, q, noting(READS, "read"));
  dispatch_io_close(random, 0);
  dispatch_release(random);
  dispatch_io_close(pipe_stream, 0);
  dispatch_release(pipe_stream);
  for (int event = 0; event < 3; event++) wait_step();
  printf("random channel from a pipe channel:%s;%s\n", logs[READS], logs[CLEANUP]);
  close(t[0]);
  close(t[1]);
  close(s[0]);
  close(s[1]);
  close(p[0]);
  close(p[1]);
  unlink(fifo);
  rmdir(directory);
  return 0;
}
