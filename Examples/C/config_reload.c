/*
 * GCD concept: a VNODE source (DISPATCH_SOURCE_TYPE_VNODE) that reloads a configuration file
 * when it changes, on the main queue.
 *
 * A VNODE source watches the file an open descriptor names, not its name. An edit made in
 * place (truncate and write) reports DISPATCH_VNODE_WRITE: the program reads the file again
 * through the same descriptor. An editor that saves by writing a new file and renaming it
 * over the old name (the safe way) leaves the watched file without a name: the source reports
 * DISPATCH_VNODE_DELETE (or RENAME, if the file itself was moved away). The program then
 * cancels the source (its cancel handler closes the old descriptor), opens the name again and
 * watches the new file. LoopDispatch watches files with inotify; libdispatch on Linux has no
 * VNODE sources.
 *
 * The program edits its own file, each change once the previous one has been loaded, and ends
 * inside dispatch_main() when the third version is loaded.
 */
#include "seed.h"

#include <fcntl.h>

static char directory[] = "/tmp/loopdispatch-config-XXXXXX";
static char path[128];
/* Only touched on the main queue. */
static dispatch_source_t watcher;
static int watched_fd = -1;
static int step;

static void watch_config(void);

/* Writes `text` as the whole file at `to` (O_TRUNC: an edit in place). */
static void write_file(const char *to, const char *text) {
  int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) fail("write %s", to);
  close(fd);
}

/* The next edit, made from a global queue once the current version is loaded. */
static void make_next_change(void) {
  int next = step;  // Copied: the block runs on another thread.
  dispatch_async(dispatch_get_global_queue(DISPATCH_QUEUE_PRIORITY_DEFAULT, 0), ^{
    if (next == 1) {
      write_file(path, "greeting=bonjour\n");  // In place: the same file.
    } else {
      char temporary[160];
      snprintf(temporary, sizeof temporary, "%s.new", path);
      write_file(temporary, "greeting=hola\n");
      if (rename(temporary, path) != 0) fail("rename");  // Saved as a new file.
    }
  });
}

/* Reads the watched file from its start; advances the story when a new version is loaded. */
static void load_config(void) {
  char text[128] = {0};
  ssize_t length = pread(watched_fd, text, sizeof text - 1, 0);
  if (length <= 0) return;  // Caught between the truncation and the write: the write follows.
  text[strcspn(text, "\n")] = 0;
  static const char *versions[] = {"greeting=hello", "greeting=bonjour", "greeting=hola"};
  if (strcmp(text, versions[step]) != 0) return;
  say("loaded %s", text);
  step += 1;
  if (step == 3) {
    dispatch_source_cancel(watcher);
    unlink(path);
    rmdir(directory);
    say("config-reload: three versions loaded, in place and replaced");
    exit(0);
  }
  make_next_change();
}

static void watch_config(void) {
  watched_fd = open(path, O_RDONLY | O_CLOEXEC);  // O_EVTONLY on macOS.
  if (watched_fd < 0) fail("open %s", path);
  watcher = dispatch_source_create(
      DISPATCH_SOURCE_TYPE_VNODE, (uintptr_t)watched_fd,
      DISPATCH_VNODE_WRITE | DISPATCH_VNODE_EXTEND | DISPATCH_VNODE_DELETE | DISPATCH_VNODE_RENAME,
      dispatch_get_main_queue());
  if (watcher == NULL) fail("dispatch_source_create(VNODE) returned NULL");
  dispatch_source_t source = watcher;
  int fd = watched_fd;
  dispatch_source_set_event_handler(source, ^{
    unsigned long changes = dispatch_source_get_data(source);
    if (changes & (DISPATCH_VNODE_DELETE | DISPATCH_VNODE_RENAME)) {
      say("replaced (%s): watching the new file",
          changes & DISPATCH_VNODE_DELETE ? "DELETE" : "RENAME");
      dispatch_source_cancel(source);
      dispatch_release(source);
      watch_config();
      return;
    }
    say("changed (WRITE%s)", changes & DISPATCH_VNODE_EXTEND ? ", EXTEND" : "");
    load_config();
  });
  dispatch_source_set_cancel_handler(source, ^{ close(fd); });
  dispatch_activate(source);
  load_config();  // The version there now.
}

int main(void) {
  if (mkdtemp(directory) == NULL) fail("mkdtemp");
  snprintf(path, sizeof path, "%s/app.conf", directory);
  write_file(path, "greeting=hello\n");
  dispatch_async(dispatch_get_main_queue(), ^{ watch_config(); });
  fail_after("config-reload", 10);
  dispatch_main();
}
