/*
 * Linux source type: DISPATCH_SOURCE_TYPE_PROC (LoopDispatch's, over a pidfd; libdispatch on
 * Linux has none).
 *
 * A supervisor starts three workers (each a shell that exits with its own status), and
 * watches each with a process source on the main queue. The source fires once, when the
 * worker exits, with data DISPATCH_PROC_EXIT; it does not reap, so the handler collects the
 * status itself with waitpid, restarts a worker that failed (once), and cancels the source.
 * No SIGCHLD handler, no thread blocked in wait: the exits arrive as main-queue work.
 *
 * The program ends inside dispatch_main(): the last exit checks the story and exits.
 */
#include "seed.h"

#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

/* Only touched on the main queue (one block at a time, on the main thread). */
static int running;
static int restarts;

static pid_t start_worker(int status) {
  char script[32];
  snprintf(script, sizeof script, "exit %d", status);
  char *argv[] = {"/bin/sh", "-c", script, NULL};
  pid_t pid;
  int code = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ);
  if (code != 0) fail("posix_spawn: %s", strerror(code));
  return pid;
}

static void watch(int worker, int status) {
  pid_t pid = start_worker(status);
  dispatch_source_t source = dispatch_source_create(
      DISPATCH_SOURCE_TYPE_PROC, (uintptr_t)pid, DISPATCH_PROC_EXIT, dispatch_get_main_queue());
  if (source == NULL) fail("no process source for worker %d", worker);
  running++;
  dispatch_source_set_event_handler(source, ^{
    if (dispatch_source_get_data(source) != DISPATCH_PROC_EXIT) fail("data is not EXIT");
    int wait_status = 0;
    if (waitpid(pid, &wait_status, 0) != pid) fail("waitpid: the source must not reap");
    int exit_status = WEXITSTATUS(wait_status);
    say("worker %d exited with status %d (reaped by the supervisor)", worker, exit_status);
    dispatch_source_cancel(source);
    running--;
    if (exit_status != 0 && restarts == 0) {
      restarts++;
      say("restarting worker %d, which will succeed this time", worker);
      watch(worker, 0);
    }
    if (running == 0) {
      say("all workers done, %d restart", restarts);
      exit(0);
    }
  });
  dispatch_source_set_cancel_handler(source, ^{ dispatch_release(source); });
  dispatch_activate(source);
}

int main(void) {
  say("supervisor starting three workers");
  dispatch_async(dispatch_get_main_queue(), ^{
    watch(1, 0);
    watch(2, 3);
    watch(3, 0);
  });
  fail_after("supervisor", 30);
  dispatch_main();
}
