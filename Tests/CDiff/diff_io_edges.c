// dispatch_io's edge cases on streams (pipes and sockets): reads of no bytes and writes of
// no data, which are done at once and hold nothing back; a read error after some bytes,
// which come first, apart from the error; dispatch_read on a pipe, which ends with what is
// there once it has some. Each case runs alone, its handlers on one serial queue, and the
// main thread waits for each handler call; both libraries must print the same lines.
#include "diff_io_common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>

// Prints each call and signals `step` after it.
static dispatch_io_handler_t printing(const char *name) { return printing_calls(name, true); }

static dispatch_io_t stream_channel(const char *name, int fd) {
  return dispatch_io_create(DISPATCH_IO_STREAM, fd, q, ^(int error) {
    printf("%s cleanup: error %d\n", name, error);
    dispatch_semaphore_signal(step);
  });
}

static void close_channel(dispatch_io_t channel) {
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();  // Its cleanup handler.
}

static dispatch_data_t text(const char *string) {
  return dispatch_data_create(string, strlen(string), NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  q = dispatch_queue_create("io.edges", NULL);
  step = dispatch_semaphore_create(0);

  // 1. Zero-length operations on a pipe: done at once (empty data for a read, NULL for a
  //    write, error 0), and the operations after them run.
  int p[2];
  pipe(p);
  dispatch_io_t reader = stream_channel("pipe reader", p[0]);
  dispatch_io_t writer = stream_channel("pipe writer", p[1]);
  dispatch_io_read(reader, 0, 0, q, printing("pipe read 0"));
  wait_step();
  dispatch_io_write(writer, 0, dispatch_data_empty, q, printing("pipe write empty"));
  wait_step();
  dispatch_data_t hello = text("hello");
  dispatch_io_write(writer, 0, hello, q, printing("pipe write after"));
  dispatch_release(hello);
  wait_step();
  dispatch_io_read(reader, 0, 5, q, printing("pipe read after"));
  wait_step();
  close_channel(reader);
  close_channel(writer);
  dispatch_read(p[0], 0, q, ^(dispatch_data_t data, int error) {
    printf("dispatch_read 0: %zu bytes, error %d\n", dispatch_data_get_size(data), error);
    dispatch_semaphore_signal(step);
  });
  wait_step();
  dispatch_write(p[1], dispatch_data_empty, q, ^(dispatch_data_t data, int error) {
    printf("dispatch_write empty: %s, error %d\n", data ? "data" : "NULL", error);
    dispatch_semaphore_signal(step);
  });
  wait_step();
  close(p[0]);
  close(p[1]);

  //    The same on a socket.
  int s[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, s);
  dispatch_io_t socket_channel = stream_channel("socket", s[0]);
  dispatch_io_read(socket_channel, 0, 0, q, printing("socket read 0"));
  wait_step();
  dispatch_io_write(socket_channel, 0, dispatch_data_empty, q, printing("socket write empty"));
  wait_step();
  write(s[1], "xy", 2);
  dispatch_io_read(socket_channel, 0, 2, q, printing("socket read after"));
  wait_step();
  close_channel(socket_channel);
  close(s[0]);
  close(s[1]);

  // 2. An error after some bytes: the socket's peer wrote "abc" and closed with bytes it had
  //    not read, so a read gets "abc" and then ECONNRESET. The bytes come first without
  //    done, then done with the error and no data (io.h); dispatch_read gets both at once.
  for (int round = 0; round < 2; round++) {
    socketpair(AF_UNIX, SOCK_STREAM, 0, s);
    write(s[0], "unread", 6);
    write(s[1], "abc", 3);
    close(s[1]);
    if (round == 0) {
      socket_channel = stream_channel("reset socket", s[0]);
      dispatch_io_read(socket_channel, 0, SIZE_MAX, q, printing("reset read"));
      wait_step();
      wait_step();
      close_channel(socket_channel);
    } else {
      dispatch_read(s[0], 100, q, ^(dispatch_data_t data, int error) {
        printf("dispatch_read reset: %zu bytes, error %d\n", dispatch_data_get_size(data), error);
        dispatch_semaphore_signal(step);
      });
      wait_step();
    }
    close(s[0]);
  }

  // 3. dispatch_read on a pipe ends once a read finds nothing more after some bytes came:
  //    with the bytes there (two writes made before it: 8 bytes), with no more than the
  //    length (2 of 4; the other 2 stay for the next read), and, fed one 32-byte chunk after
  //    each delivery, once per chunk. dispatch_io_read does not: it waits for its length (two
  //    chunks, one written before it and one after: one call of 64 bytes at the default low
  //    water mark).
  pipe(p);
  write(p[1], "aaaa", 4);
  write(p[1], "bbbb", 4);
  dispatch_read(p[0], 96, q, ^(dispatch_data_t data, int error) {
    printf("dispatch_read after two writes: %zu bytes, error %d\n",
           dispatch_data_get_size(data), error);
    dispatch_semaphore_signal(step);
  });
  wait_step();
  write(p[1], "cccc", 4);
  for (int round = 0; round < 2; round++) {
    dispatch_read(p[0], 2, q, ^(dispatch_data_t data, int error) {
      printf("dispatch_read 2: %zu bytes, error %d\n", dispatch_data_get_size(data), error);
      dispatch_semaphore_signal(step);
    });
    wait_step();
  }
  static const char chunk[] = "0123456789abcdef0123456789ABCDEF";
  __block int deliveries = 0;
  __block size_t delivered = 0;
  while (delivered < 96) {
    dispatch_read(p[0], 96 - delivered, q, ^(dispatch_data_t data, int error) {
      deliveries++;
      delivered += dispatch_data_get_size(data);
      if (error) printf("dispatch_read chunk: error %d\n", error);
      dispatch_semaphore_signal(step);
    });
    write(p[1], chunk, 32);
    wait_step();
  }
  printf("dispatch_read fed 3 chunks: %d deliveries, %zu bytes\n", deliveries, delivered);
  dispatch_io_t chunked = stream_channel("chunked pipe", p[0]);
  write(p[1], chunk, 32);
  dispatch_io_read(chunked, 0, 64, q, printing("dispatch_io_read 64"));
  write(p[1], chunk, 32);
  wait_step();
  close_channel(chunked);
  close(p[0]);
  close(p[1]);
  return 0;
}
