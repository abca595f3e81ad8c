// dispatch_io and dispatch_read/dispatch_write: water marks on a pipe, reads to a length and to
// the end of the file, random access on a regular file, barriers, close with and without
// STOP, a path channel, a bad descriptor, and the descriptor's flags restored at cleanup.
// Each case runs alone, its handlers on one serial queue, and the main thread waits for it;
// both libraries must print the same lines.
#include "diff_io_common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>

// The error a cleanup handler got, for the cases whose cleanup may run before or after the
// failed operation's handler (libdispatch gives the descriptor up at once, on its own queue
// hop): printed by the main thread once both have run.
static atomic_int quiet_cleanup_error = -1;

static void cleanup_records(int error) {
  atomic_store(&quiet_cleanup_error, error);
  dispatch_semaphore_signal(step);
}

static void cleanup_says(const char *name, int error) {
  printf("%s cleanup: error %d\n", name, error);
  dispatch_semaphore_signal(step);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  q = dispatch_queue_create("io.handlers", NULL);
  step = dispatch_semaphore_create(0);

  // 1. A low water mark of 1: each write arrives on its own; the end of the file is done
  //    with no data. The descriptor is non-blocking only while the channel uses it.
  int p[2];
  pipe(p);
  int reader = p[0];
  dispatch_io_t channel = dispatch_io_create(DISPATCH_IO_STREAM, reader, q, ^(int error) {
    printf("pipe cleanup: error %d, non-blocking after %d\n", error,
           (fcntl(reader, F_GETFL) & O_NONBLOCK) != 0);
    dispatch_semaphore_signal(step);
  });
  dispatch_io_set_low_water(channel, 1);
  dispatch_io_read(channel, 0, SIZE_MAX, q, printing_calls("low water 1", true));
  write(p[1], "hello", 5);
  wait_step();
  SAY("non-blocking during", "%d", (fcntl(reader, F_GETFL) & O_NONBLOCK) != 0);
  write(p[1], "world", 5);
  wait_step();
  close(p[1]);
  wait_step();
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();
  close(reader);

  // 2. No low water mark: the bytes are held until the end of the file.
  pipe(p);
  channel = dispatch_io_create(DISPATCH_IO_STREAM, p[0], q, ^(int error) { cleanup_says("held", error); });
  dispatch_io_read(channel, 0, SIZE_MAX, q, printing_calls("held", false));
  write(p[1], "abc", 3);
  write(p[1], "defg", 4);
  close(p[1]);
  wait_step();
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();
  close(p[0]);

  // 3. A read to a length ends with done and its last bytes; a high water mark cuts them.
  pipe(p);
  channel = dispatch_io_create(DISPATCH_IO_STREAM, p[0], q, ^(int error) { cleanup_says("length", error); });
  dispatch_io_set_low_water(channel, 1);
  dispatch_io_set_high_water(channel, 3);
  write(p[1], "0123456789", 10);
  dispatch_io_read(channel, 0, 7, q, printing_calls("length 7, high water 3", false));
  wait_step();
  // The rest is still in the pipe for the next read.
  dispatch_io_read(channel, 0, 3, q, printing_calls("next 3", false));
  wait_step();
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();
  close(p[0]);
  close(p[1]);

  // 4. A random channel on a regular file: a write at an offset, a barrier, reads at offsets.
  char path[] = "/tmp/diff_io_XXXXXX";
  int file = mkstemp(path);
  write(file, "...", 3);  // The channel's offsets start at the position when it is made.
  channel = dispatch_io_create(DISPATCH_IO_RANDOM, file, q, ^(int error) { cleanup_says("file", error); });
  dispatch_data_t digits = dispatch_data_create("0123456789", 10, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
  dispatch_io_write(channel, 0, digits, q, printing_calls("file write", false));
  // The barrier runs after the write: the bytes are in the file. (Whether the write's
  // handler has run by then varies between runs of libdispatch: not printed.)
  __block int barrier_saw = -1;
  static char written[16];
  dispatch_io_barrier(channel, ^{
    barrier_saw = dispatch_io_get_descriptor(channel) == file;
    pread(file, written, 10, 3);
  });
  dispatch_io_read(channel, 3, 4, q, printing_calls("file read at 3", false));
  wait_step();
  wait_step();
  SAY("barrier: descriptor is the file", "%d, saw \"%s\"", barrier_saw, written);
  dispatch_io_read(channel, 8, 100, q, printing_calls("file read past the end", false));
  wait_step();
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();
  char whole[32] = {0};
  pread(file, whole, sizeof whole - 1, 0);
  SAY("file holds", "\"%s\"", whole);
  close(file);

  // 5. A path channel opens lazily and closes its own descriptor; a relative path is NULL.
  channel = dispatch_io_create_with_path(DISPATCH_IO_STREAM, path, O_RDONLY, 0, q, ^(int error) {
    cleanup_says("path", error);
  });
  dispatch_io_read(channel, 0, SIZE_MAX, q, printing_calls("path read", false));
  wait_step();
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();
  dispatch_io_t relative = dispatch_io_create_with_path(DISPATCH_IO_STREAM, "tmp/x", O_RDONLY, 0, q, ^(int error) { (void)error; });
  SAY("relative path", "%s", relative ? "channel" : "NULL");
  dispatch_io_t missing = dispatch_io_create_with_path(DISPATCH_IO_STREAM, "/nonexistent/diff_io", O_RDONLY, 0, q, ^(int error) {
    cleanup_records(error);
  });
  dispatch_io_read(missing, 0, 10, q, printing_calls("missing read", false));
  wait_step();
  dispatch_io_close(missing, 0);
  dispatch_release(missing);
  wait_step();
  SAY("missing cleanup: error", "%d", atomic_load(&quiet_cleanup_error));
  unlink(path);

  // 6. Closed: later operations fail with ECANCELED. STOP ends the running ones.
  pipe(p);
  channel = dispatch_io_create(DISPATCH_IO_STREAM, p[0], q, ^(int error) { cleanup_says("stopped", error); });
  dispatch_io_read(channel, 0, 10, q, printing_calls("stopped read", false));
  dispatch_io_close(channel, DISPATCH_IO_STOP);
  wait_step();
  wait_step();
  dispatch_io_read(channel, 0, 10, q, printing_calls("read after close", false));
  wait_step();
  dispatch_release(channel);
  close(p[0]);
  close(p[1]);

  // 7. A bad descriptor: every operation fails with EBADF, and so does the cleanup.
  channel = dispatch_io_create(DISPATCH_IO_STREAM, 999, q, ^(int error) { cleanup_records(error); });
  dispatch_io_read(channel, 0, 10, q, printing_calls("bad read", false));
  wait_step();
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();
  SAY("bad cleanup: error", "%d", atomic_load(&quiet_cleanup_error));
  SAY("unknown type", "%s", dispatch_io_create(7, 0, q, ^(int error) { (void)error; }) ? "channel" : "NULL");

  // 8. dispatch_read and dispatch_write; a write to a pipe nobody reads fails with EPIPE.
  pipe(p);
  dispatch_write(p[1], digits, q, ^(dispatch_data_t data, int error) {
    printf("dispatch_write: %s, error %d\n", data ? "data left" : "NULL", error);
    dispatch_semaphore_signal(step);
  });
  wait_step();
  close(p[1]);
  dispatch_read(p[0], SIZE_MAX, q, ^(dispatch_data_t data, int error) {
    printf("dispatch_read: %zu bytes, error %d\n", dispatch_data_get_size(data), error);
    dispatch_semaphore_signal(step);
  });
  wait_step();
  close(p[0]);
  pipe(p);
  close(p[0]);
  channel = dispatch_io_create(DISPATCH_IO_STREAM, p[1], q, ^(int error) { cleanup_says("epipe", error); });
  dispatch_io_write(channel, 0, digits, q, printing_calls("write to a closed pipe", false));
  wait_step();
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();
  close(p[1]);

  dispatch_release(digits);
  dispatch_release(q);
  return 0;
}
