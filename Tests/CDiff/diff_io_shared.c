// dispatch_io channels and convenience calls sharing one descriptor: ten dispatch_writes on
// one fd land in order; a stream channel's operations run one after another in the order
// they were submitted; two channels on one fd share its file position and its barriers; a
// channel made from another (dispatch_io_create_with_io) keeps the first one's cleanup
// waiting while it uses the descriptor, and one made from a path channel opens the path
// itself; a random channel made from a stream channel counts offsets from the file position
// when it is made. Handlers run on one serial queue and the main thread waits for each; the
// lines print what the files and handlers hold afterwards, so both libraries must agree.
#include "diff_io_common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define MIB (1024 * 1024)

static char directory[64];
static char log_text[256];  // Events appended on `q`, printed by the main thread.

static void note(const char *event) {
  strncat(log_text, event, sizeof log_text - strlen(log_text) - 1);
}

// Byte i of the pattern: each 4-byte word holds its index times an odd number, so no two
// words alike and a piece of 4 bytes or more matches one place only.
static void fill_pattern(unsigned char *bytes, size_t size) {
  for (size_t i = 0; i < size; i++) {
    uint32_t word = (uint32_t)(i / 4) * 2654435761u;
    bytes[i] = (unsigned char)(word >> (8 * (i % 4)));
  }
}

static int make_file(const char *name, const void *bytes, size_t size, char *path) {
  snprintf(path, 96, "%s/%s", directory, name);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (size) pwrite(fd, bytes, size, 0);
  return fd;
}

static dispatch_io_t channel_on(dispatch_io_type_t type, int fd) {
  return dispatch_io_create(type, fd, q, ^(int error) { dispatch_semaphore_signal(step); });
}

static void close_channel(dispatch_io_t channel) {
  dispatch_io_close(channel, 0);
  dispatch_release(channel);
  wait_step();  // Its cleanup.
}

// Closes and releases two channels on one descriptor (either may be NULL) and waits for
// `cleanups` cleanups: libdispatch runs a channel's cleanup once no channel uses the descriptor.
static void close_pair(dispatch_io_t one, dispatch_io_t other, int cleanups) {
  if (one) dispatch_io_close(one, 0), dispatch_release(one);
  if (other) dispatch_io_close(other, 0), dispatch_release(other);
  for (int cleanup = 0; cleanup < cleanups; cleanup++) wait_step();
}

// The pieces each of two channels read (in order), and whether they interleave into `size`
// bytes at `bytes`, every piece in its channel's order.
static dispatch_data_t pieces[2][1024];
static int piece_count[2];

static dispatch_io_handler_t keeping(int channel, int *last_error) {
  return (dispatch_io_handler_t)_Block_copy(^(bool done, dispatch_data_t data, int error) {
    if (data && dispatch_data_get_size(data) && piece_count[channel] < 1024) {
      dispatch_retain(data);
      pieces[channel][piece_count[channel]++] = data;
    }
    if (done) *last_error = error, dispatch_semaphore_signal(step);
  });
}

static bool pieces_cover(const unsigned char *bytes, size_t size) {
  int next[2] = {0, 0};
  size_t at = 0;
  while (at < size) {
    int channel = 0;
    for (; channel < 2; channel++) {
      if (next[channel] == piece_count[channel]) continue;
      size_t length = dispatch_data_get_size(pieces[channel][next[channel]]);
      if (length <= size - at && data_equals(pieces[channel][next[channel]], bytes + at, length)) {
        at += length;
        next[channel]++;
        break;
      }
    }
    if (channel == 2) return false;
  }
  return next[0] == piece_count[0] && next[1] == piece_count[1] && piece_count[0] < 1024 &&
         piece_count[1] < 1024;
}

// Signals `step` at a write's done call, and prints it if it left data or an error.
static dispatch_io_handler_t until_done(const char *name) {
  return (dispatch_io_handler_t)_Block_copy(^(bool done, dispatch_data_t data, int error) {
    if (!done) return;
    if (data || error) printf("%s: done, %s, error %d\n", name, data ? "data left" : "", error);
    dispatch_semaphore_signal(step);
  });
}

static unsigned char *drained;  // What the socket reader thread read.
static size_t drained_size;
static void *drain(void *fd) {
  ssize_t got;
  while ((got = read((int)(intptr_t)fd, drained + drained_size, 7 * MIB - drained_size)) > 0) {
    drained_size += got;
  }
  return NULL;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  q = dispatch_queue_create("io.shared", NULL);
  step = dispatch_semaphore_create(0);
  snprintf(directory, sizeof directory, "/tmp/diff_io_shared.%d", (int)getpid());
  mkdir(directory, 0700);
  char path[96], other_path[96];
  unsigned char *original = malloc(4 * MIB);
  fill_pattern(original, 4 * MIB);

  // 1. Ten dispatch_writes on one descriptor, of ten pieces of what dispatch_read read: the
  //    new file is the original, byte for byte.
  int source_fd = make_file("ten-source", original, 10240, path);
  __block dispatch_data_t read_back = NULL;
  dispatch_read(source_fd, SIZE_MAX, q, ^(dispatch_data_t data, int error) {
    read_back = data;
    dispatch_retain(data);
    dispatch_semaphore_signal(step);
  });
  wait_step();
  int ten_fd = make_file("ten-copy", NULL, 0, other_path);
  __block int write_errors = 0;
  for (size_t piece = 0; piece < 10; piece++) {
    dispatch_data_t part = dispatch_data_create_subrange(read_back, piece * 1024, 1024);
    dispatch_write(ten_fd, part, q, ^(dispatch_data_t unwritten, int error) {
      write_errors += error != 0 || unwritten != NULL;
      dispatch_semaphore_signal(step);
    });
    dispatch_release(part);
  }
  for (int piece = 0; piece < 10; piece++) wait_step();
  printf("ten dispatch_writes: errors %d, file equals the original: %s\n", write_errors,
         file_equals(ten_fd, original, 10240) ? "yes" : "no");
  dispatch_release(read_back);

  // 2. A stream channel on a 3 MiB file: a 3 MiB read, then a 1 MiB write. The read gets the
  //    3 MiB as they were, the write lands after them (file position 3 MiB).
  int stream_fd = make_file("stream", original, 3 * MIB, path);
  dispatch_io_t stream = channel_on(DISPATCH_IO_STREAM, stream_fd);
  __block dispatch_data_t got = dispatch_data_empty;
  int read_error = -1;
  dispatch_io_read(stream, 0, 3 * MIB, q, collecting(&got, &read_error));
  dispatch_data_t tail = dispatch_data_create(original + 3 * MIB, MIB, NULL, NULL);
  dispatch_io_write(stream, 0, tail, q, printing_calls("stream write 1 MiB", false));
  wait_step();
  wait_step();
  close_channel(stream);
  printf("stream read 3 MiB: error %d, the original's first 3 MiB: %s\n", read_error,
         data_equals(got, original, 3 * MIB) ? "yes" : "no");
  printf("stream write after it: file is the original's 4 MiB: %s\n",
         file_equals(stream_fd, original, 4 * MIB) ? "yes" : "no");
  dispatch_release(got);
  dispatch_release(tail);

  // 3. (a) Two stream channels reading one file descriptor, 1 MiB each in turn: they share
  //    the file position, so the first gets the first MiB and the second the next.
  int readers_fd = make_file("two-readers", original, 2 * MIB, path);
  dispatch_io_t first = channel_on(DISPATCH_IO_STREAM, readers_fd);
  dispatch_io_t second = channel_on(DISPATCH_IO_STREAM, readers_fd);
  dispatch_data_t got_first = dispatch_data_empty, got_second = dispatch_data_empty;
  int first_error = -1, second_error = -1;
  dispatch_io_read(first, 0, MIB, q, collecting(&got_first, &first_error));
  wait_step();
  dispatch_io_read(second, 0, MIB, q, collecting(&got_second, &second_error));
  wait_step();
  printf("two stream readers in turn: errors %d %d, first MiB then second MiB: %s %s\n",
         first_error, second_error, data_equals(got_first, original, MIB) ? "yes" : "no",
         data_equals(got_second, original + MIB, MIB) ? "yes" : "no");
  dispatch_release(got_first);
  dispatch_release(got_second);
  //    Both submitted at once: each channel's pieces come in file order and, together, they
  //    are the file's first 2 MiB exactly once (which channel gets which part varies).
  lseek(readers_fd, 0, SEEK_SET);
  dispatch_io_read(first, 0, MIB, q, keeping(0, &first_error));
  dispatch_io_read(second, 0, MIB, q, keeping(1, &second_error));
  wait_step();
  wait_step();
  printf("two stream readers at once: errors %d %d, the first 2 MiB once, in order: %s\n",
         first_error, second_error, pieces_cover(original, 2 * MIB) ? "yes" : "no");
  //    The first's cleanup waits while the second channel is open on the descriptor.
  dispatch_io_close(first, 0);
  dispatch_release(first);
  bool came = !dispatch_semaphore_wait(step, dispatch_time(DISPATCH_TIME_NOW, NSEC_PER_SEC / 2));
  printf("the first reader's cleanup while the second is open: %s\n", came ? "yes" : "no");
  close_pair(NULL, second, came ? 1 : 2);

  //    (b) Two stream channels writing one descriptor, 3 MiB of 'A' and 3 MiB of 'B' at once:
  //    one after the other, not interleaved (a file, then a socket drained by a thread).
  dispatch_data_t a = filled('A', 3 * MIB), b = filled('B', 3 * MIB);
  drained = malloc(7 * MIB);
  for (int kind = 0; kind < 2; kind++) {
    int s[2] = {-1, -1};
    pthread_t reader;
    int fd = kind == 0 ? make_file("two-writers", NULL, 0, path) : -1;
    if (kind == 1) {
      socketpair(AF_UNIX, SOCK_STREAM, 0, s);
      fd = s[0];
      drained_size = 0;
      pthread_create(&reader, NULL, drain, (void *)(intptr_t)s[1]);
    }
    first = channel_on(DISPATCH_IO_STREAM, fd);
    second = channel_on(DISPATCH_IO_STREAM, fd);
    dispatch_io_write(first, 0, a, q, until_done("A writer"));
    dispatch_io_write(second, 0, b, q, until_done("B writer"));
    wait_step();
    wait_step();
    close_pair(first, second, 2);
    if (kind == 0) {
      drained_size = pread(fd, drained, 7 * MIB, 0);
    } else {
      close(s[0]);
      pthread_join(reader, NULL);
      close(s[1]);
    }
    printf("two stream writers on a %s: 6 MiB: %s, runs <= 2: %s\n", kind ? "socket" : "file",
           drained_size == 6 * MIB ? "yes" : "no",
           count_runs(drained, drained_size) <= 2 ? "yes" : "no");
  }
  dispatch_release(a);
  dispatch_release(b);

  // 4. (a) A channel made from a descriptor channel whose cleanup closes the descriptor: the
  //    first is closed at once, the second still reads; the cleanups come after the read.
  int own_fd = make_file("own", "AAAA", 4, path);
  log_text[0] = 0;
  dispatch_io_t owner = dispatch_io_create(DISPATCH_IO_RANDOM, own_fd, q, ^(int error) {
    note(" first-cleanup");
    close(own_fd);
    dispatch_semaphore_signal(step);
  });
  dispatch_io_t derived = dispatch_io_create_with_io(DISPATCH_IO_RANDOM, owner, q, ^(int error) {
    note(" second-cleanup");
    dispatch_semaphore_signal(step);
  });
  dispatch_io_close(owner, 0);
  dispatch_release(owner);
  dispatch_io_read(derived, 0, 4, q, ^(bool done, dispatch_data_t data, int error) {
    if (!done) return;
    char line[64];
    snprintf(line, sizeof line, " read-done(%s,%d)",
             data_equals(data, "AAAA", 4) ? "AAAA" : "other", error);
    note(line);
    dispatch_semaphore_signal(step);
  });
  dispatch_io_close(derived, 0);
  dispatch_release(derived);
  for (int event = 0; event < 3; event++) wait_step();
  printf("channel from a closed-at-once fd channel:%s\n", log_text);

  //    (b) A channel made from a path channel opens the path itself: with the first channel
  //    closed and its descriptor number likely taken by another file, it reads and writes
  //    the path.
  int path_fd = make_file("path", original, 64, path);
  __block bool first_gone = false;
  dispatch_io_t by_path = dispatch_io_create_with_path(DISPATCH_IO_RANDOM, path, O_RDWR, 0, q,
                                                       ^(int error) {
    first_gone = true;
    dispatch_semaphore_signal(step);
  });
  dispatch_data_t path_first = dispatch_data_empty;
  dispatch_io_read(by_path, 0, 4, q, collecting(&path_first, &read_error));
  wait_step();
  printf("path channel read: error %d, its bytes: %s\n", read_error,
         data_equals(path_first, original, 4) ? "yes" : "no");
  dispatch_release(path_first);
  dispatch_io_t from_path = dispatch_io_create_with_io(DISPATCH_IO_RANDOM, by_path, q,
                                                       ^(int error) {
    dispatch_semaphore_signal(step);
  });
  dispatch_io_close(by_path, 0);
  dispatch_release(by_path);
  wait_step();
  printf("path channel's cleanup before the derived one closes: %s\n", first_gone ? "yes" : "no");
  int other_fd = make_file("other", "untouched", 9, other_path);
  __block dispatch_data_t path_got = dispatch_data_empty;
  dispatch_io_read(from_path, 0, 16, q, collecting(&path_got, &read_error));
  wait_step();
  dispatch_data_t written = dispatch_data_create("zz", 2, NULL, NULL);
  dispatch_io_write(from_path, 4, written, q, printing_calls("derived from path write", false));
  wait_step();
  close_channel(from_path);
  unsigned char expect[64];
  memcpy(expect, original, 64);
  memcpy(expect + 4, "zz", 2);
  printf("derived from path: read the path: %s, wrote the path: %s, other file untouched: %s\n",
         data_equals(path_got, original, 16) ? "yes" : "no",
         file_equals(path_fd, expect, 64) ? "yes" : "no",
         file_equals(other_fd, "untouched", 9) ? "yes" : "no");
  dispatch_release(path_got);
  dispatch_release(written);

  // 5. A random channel made from a stream channel that has read 100 bytes: its offset 0 is
  //    the file position when it is made (io.h).
  int records_fd = make_file("records", NULL, 0, path);
  for (int record = 0; record < 40; record++) dprintf(records_fd, "r%08d\n", record * 10);
  lseek(records_fd, 0, SEEK_SET);
  stream = channel_on(DISPATCH_IO_STREAM, records_fd);
  dispatch_io_read(stream, 0, 100, q, ^(bool done, dispatch_data_t data, int error) {
    if (done) dispatch_semaphore_signal(step);
  });
  wait_step();
  dispatch_io_t random = dispatch_io_create_with_io(DISPATCH_IO_RANDOM, stream, q, ^(int error) {
    dispatch_semaphore_signal(step);
  });
  dispatch_io_read(random, 0, 9, q, printing_calls("random from stream, offset 0", false));
  wait_step();
  close_pair(random, stream, 2);

  // 6. A barrier covers every channel on the descriptor: one on a second channel, submitted
  //    while a long write on the first is under way, runs after it has written everything.
  //    (Submitted right after the write, libdispatch may run it first: each channel hands
  //    its operations and barriers to the descriptor from its own queue.) With a high water
  //    mark of 1 MiB, the 16 MiB write tells its progress (the data left) before done.
  //    And in a barrier, a path channel that has done nothing yet has a descriptor.
  int barrier_fd = make_file("barrier", NULL, 0, path);
  first = channel_on(DISPATCH_IO_STREAM, barrier_fd);
  second = channel_on(DISPATCH_IO_STREAM, barrier_fd);
  dispatch_data_t big = filled('W', 16 * MIB);
  dispatch_io_set_high_water(first, MIB);
  __block int calls = 0;  // `step` is signalled at the first call and at done.
  dispatch_io_write(first, 0, big, q, ^(bool done, dispatch_data_t data, int error) {
    if (calls++ == 0 || done) dispatch_semaphore_signal(step);
    if (calls == 1 && done) dispatch_semaphore_signal(step);
  });
  dispatch_release(big);
  wait_step();  // The write is under way.
  dispatch_io_barrier(second, ^{
    struct stat info;
    fstat(barrier_fd, &info);
    printf("barrier on the second channel after the first's write wrote all: %s\n",
           info.st_size == 16 * MIB ? "yes" : "no");
    dispatch_semaphore_signal(step);
  });
  wait_step();
  wait_step();
  printf("16 MiB write at high water 1 MiB: calls before done >= 2: %s\n",
         calls > 2 ? "yes" : "no");
  close_pair(first, second, 2);
  by_path = dispatch_io_create_with_path(DISPATCH_IO_STREAM, path, O_RDONLY, 0, q, ^(int e) {
    dispatch_semaphore_signal(step);
  });
  dispatch_io_barrier(by_path, ^{
    printf("descriptor in a barrier of an unused path channel >= 0: %s\n",
           dispatch_io_get_descriptor(by_path) >= 0 ? "yes" : "no");
    dispatch_semaphore_signal(step);
  });
  wait_step();
  close_channel(by_path);
  return 0;
}
