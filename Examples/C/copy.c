/*
 * GCD concept: I/O channels and data objects (dispatch_io, dispatch_data).
 *
 * A file is copied into a pipe and read back out of it, all through channels: a path channel
 * reads the file in chunks between the water marks, each chunk (a dispatch_data_t, never
 * copied on the way) is written to a stream channel over the pipe's write end, and a third
 * channel reads the pipe to its end. No thread waits on the pipe: the channels read and write
 * it when the event loop reports it ready. The program checks the bytes that come back
 * against the file, then exits from the main queue.
 */
#include "seed.h"

#include <fcntl.h>

enum { FILE_SIZE = 1 << 20, CHUNK = 64 * 1024 };

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + i / 4096); }

int main(void) {
  say("copy: a 1 MiB file through a pipe and back, with three channels");
  static char path[] = "/tmp/loopdispatch-copy-XXXXXX";
  int file = mkstemp(path);
  if (file < 0) fail("mkstemp failed");
  unsigned char *contents = malloc(FILE_SIZE);
  if (contents == NULL) fail("out of memory");
  for (size_t i = 0; i < FILE_SIZE; i++) contents[i] = pattern(i);
  if (write(file, contents, FILE_SIZE) != FILE_SIZE) fail("writing the file failed");
  close(file);

  int ends[2];
  if (pipe(ends) != 0) fail("pipe failed");
  dispatch_queue_t queue = dispatch_queue_create("copy", DISPATCH_QUEUE_SERIAL);

  // The pipe's write end: closed once its channel gives it back, which ends the reader's
  // stream with end-of-file.
  int write_end = ends[1];
  dispatch_io_t to_pipe = dispatch_io_create(DISPATCH_IO_STREAM, write_end, queue, ^(int error) {
    say("pipe writer cleanup: error %d", error);
    close(write_end);
  });

  // The file, opened by its channel at the first read and closed by it.
  dispatch_io_t from_file = dispatch_io_create_with_path(DISPATCH_IO_RANDOM, path, O_RDONLY, 0,
                                                         queue, ^(int error) {
    say("file reader cleanup: error %d", error);
    unlink(path);
  });
  dispatch_io_set_low_water(from_file, CHUNK);
  dispatch_io_set_high_water(from_file, CHUNK);
  __block size_t chunks = 0;
  dispatch_io_read(from_file, 0, SIZE_MAX, queue, ^(bool done, dispatch_data_t data, int error) {
    if (error != 0) fail("reading the file: error %d", error);
    if (data != NULL && dispatch_data_get_size(data) > 0) {
      chunks++;
      dispatch_io_write(to_pipe, 0, data, queue, ^(bool written, dispatch_data_t left, int werror) {
        (void)left;
        if (werror != 0) fail("writing the pipe: error %d", werror);
        (void)written;
      });
    }
    if (done) {
      say("file read in %zu chunks of at most %d bytes", chunks, CHUNK);
      dispatch_io_close(from_file, 0);
      dispatch_release(from_file);
      dispatch_io_close(to_pipe, 0);  // After the writes already submitted.
      dispatch_release(to_pipe);
    }
  });

  // The pipe's read end, read to its end; the whole is compared with the file.
  int read_end = ends[0];
  __block dispatch_data_t received = dispatch_data_empty;
  dispatch_io_t from_pipe = dispatch_io_create(DISPATCH_IO_STREAM, read_end, queue, ^(int error) {
    if (error != 0) fail("pipe reader cleanup: error %d", error);
    close(read_end);
  });
  dispatch_io_set_low_water(from_pipe, 1);
  dispatch_io_read(from_pipe, 0, SIZE_MAX, queue, ^(bool done, dispatch_data_t data, int error) {
    if (error != 0) fail("reading the pipe: error %d", error);
    if (data != NULL) {
      dispatch_data_t joined = dispatch_data_create_concat(received, data);
      dispatch_release(received);
      received = joined;
    }
    if (!done) return;
    size_t size = dispatch_data_get_size(received);
    __block size_t offset_checked = 0;
    __block bool same = size == FILE_SIZE;
    dispatch_data_apply(received, ^bool(dispatch_data_t region, size_t offset, const void *bytes,
                                        size_t length) {
      (void)region;
      if (offset != offset_checked || memcmp(bytes, contents + offset, length) != 0) same = false;
      offset_checked = offset + length;
      return same;
    });
    say("read back %zu bytes through the pipe: %s", size, same ? "the same as the file" : "DIFFERENT");
    if (!same) fail("copy: FAILED");
    dispatch_release(received);
    dispatch_io_close(from_pipe, 0);
    dispatch_release(from_pipe);
    dispatch_async(dispatch_get_main_queue(), ^{
      say("done");
      free(contents);
      exit(0);
    });
  });

  fail_after("copy", 30);
  dispatch_main();
}
