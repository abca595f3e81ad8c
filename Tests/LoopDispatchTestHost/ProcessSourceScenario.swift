import Glibc
import LoopDispatch

/// A process source on the main queue: a child's exit runs the handler once on the main
/// thread with DISPATCH_PROC_EXIT, and waitpid still collects the child's status afterwards.
func sourceMainProcessScenario() {
  var fds: [Int32] = [-1, -1]
  guard pipe(&fds) == 0 else { fail("pipe: errno \(errno)") }
  for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
  // strdup'd C strings for argv, freed below; posix_spawn copies them into the child.
  let words: [String] = ["/bin/sh", "-c", "read line; exit 9"]
  let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
  var pid: pid_t = 0
  let code = posix_spawn(&pid, "/bin/sh", &actions, nil, argv, environ)
  for pointer in argv { free(pointer) }
  posix_spawn_file_actions_destroy(&actions)
  close(fds[0])
  guard code == 0 else { fail("posix_spawn: \(code)") }
  let source: ProcessSource
  do {
    source = try ProcessSource(pid: pid, queue: .main, label: "main-child")
  } catch {
    fail("\(error)")
  }
  let seen = MainConfined([UInt]())
  let problems = MainConfined([String]())
  let cancelled = MainConfined(false)
  source.setEventHandler { [unowned source] in
    if !(EventLoop.main.isInLoopThread && Queue.current === Queue.main) {
      problems.value.append("event off the main queue")
    }
    seen.value.append(source.data)
  }
  source.setCancelHandler { cancelled.value = true }
  source.activate()
  close(fds[1])  // The child exits now.
  guard Queue.runMain(until: { !seen.value.isEmpty }, deadline: .now + .seconds(30)) else {
    fail("the exit never reached the handler")
  }
  var status: Int32 = 0
  guard waitpid(pid, &status, 0) == pid else { fail("waitpid: errno \(errno)") }
  guard (status >> 8) & 0xff == 9 else { fail("status \(status), expected exit 9") }
  source.cancel()
  guard Queue.runMain(until: { cancelled.value }, deadline: .now + .seconds(30)) else {
    fail("the cancel handler never ran")
  }
  guard seen.value == [0x8000_0000] else { fail("handler data \(seen.value)") }
  guard problems.value.isEmpty else { fail(problems.value.joined(separator: "; ")) }
}
