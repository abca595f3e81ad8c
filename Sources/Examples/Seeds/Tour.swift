import Glibc
import LoopDispatch

// `Examples tour`: every seed program in a row, each under a header. `deadlock` traps by
// design, so the tour runs it as a child process (this same executable, re-executed through
// /proc/self/exe) and checks that it died with the expected message.

/// The seed programs in tour order: name, GCD concept, entry point.
var seedPrograms: [(name: String, summary: String, run: ([String]) -> Int32)] {
  [
    ("barrier", "reader/writer store: concurrent reads, barrier writes alone", runBarrier),
    ("gate", "a serial queue held by a semaphore until initialization is done", runGate),
    ("average", "async work with a completion on the caller's (main) queue", runAverage),
    ("apply", "concurrentPerform over strided chunks", runApply),
    ("group", "group wait, timed wait and notify", runGroup),
    ("after", "a delayed prompt, and a reminder cancelled before it fires", runAfter),
    ("once", "a singleton under a forced race: naive vs Once", runOnce),
    ("suspend", "suspend and resume a queue between items", runSuspend),
    ("context", "queue context data and its finalizer", runContext),
    ("deadlock", "sync onto the current queue: a clear trap (crashes on purpose)", runDeadlock),
  ]
}

/// The line that opens each section of the tour.
func tourHeader(_ name: String) -> String { "=== \(name) ===" }

/// `Examples tour`: runs every seed program; exits 0 only if all of them succeeded.
func runTour(_ arguments: [String]) -> Int32 {
  var failed: [String] = []
  for program in seedPrograms {
    print("\n" + tourHeader(program.name) + " " + program.summary)
    let status = program.name == "deadlock" ? runDeadlockChild() : program.run([])
    if status != 0 { failed.append(program.name) }
  }
  print("")
  if failed.isEmpty {
    print("tour: all \(seedPrograms.count) programs behaved as expected")
    return 0
  }
  print("tour: FAILED: \(failed.joined(separator: ", "))")
  return 1
}

/// Runs `Examples deadlock` as a child; returns 0 if it trapped with the expected message.
private func runDeadlockChild() -> Int32 {
  let expected = "BUG IN CLIENT OF LOOPDISPATCH: sync onto queue \"deadlock.demo\""
  say("running /proc/self/exe deadlock as a child process (it should trap)")
  flushOutput()  // the child shares standard output: keep the lines in order
  guard let child = spawnCapturingStandardError(["/proc/self/exe", "deadlock"]) else {
    say("could not start the child")
    return 1
  }
  let errorLines = child.errorOutput.split(separator: "\n")
  let bugLine = errorLines.first { $0.hasPrefix("BUG IN CLIENT OF LOOPDISPATCH") }
  if child.signal != 0 {
    say("the child trapped (signal \(child.signal)) and wrote: \(bugLine ?? "nothing")")
  } else {
    say("the child exited with status \(child.status) and wrote: \(bugLine ?? "nothing")")
  }
  guard child.signal != 0, let bugLine, bugLine.hasPrefix(expected) else {
    say("deadlock: FAILED (expected a trap with: \(expected) ...)")
    return 1
  }
  return 0
}

/// How a child process ended and what it wrote to standard error.
private struct ChildResult {
  let status: Int32
  let signal: Int32
  let errorOutput: String
}

/// Starts `argv` with standard error on a pipe (standard output is shared), reads the pipe
/// to its end and waits for the child.
private func spawnCapturingStandardError(_ argv: [String]) -> ChildResult? {
  var errorPipe: [Int32] = [0, 0]
  guard pipe(&errorPipe) == 0 else { return nil }
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_adddup2(&actions, errorPipe[1], 2)
  posix_spawn_file_actions_addclose(&actions, errorPipe[0])
  // The trap is expected: do not start Swift's backtracer in the child (slow, and noisy).
  var environment = ["SWIFT_BACKTRACE=enable=no"]
  var entry = environ
  while let variable = entry.pointee {
    environment.append(String(cString: variable))
    entry += 1
  }
  let cArguments = argv.map { strdup($0) } + [nil]
  let cEnvironment = environment.map { strdup($0) } + [nil]
  defer { for pointer in cArguments + cEnvironment { free(pointer) } }
  var pid = pid_t()
  let started = posix_spawn(&pid, argv[0], &actions, nil, cArguments, cEnvironment)
  close(errorPipe[1])
  guard started == 0 else {
    close(errorPipe[0])
    return nil
  }
  var output = [UInt8]()
  var buffer = [UInt8](repeating: 0, count: 4096)
  while true {
    let count = read(errorPipe[0], &buffer, buffer.count)
    if count > 0 {
      output += buffer[..<count]
    } else if count == 0 || errno != EINTR {
      break
    }
  }
  close(errorPipe[0])
  var status: Int32 = 0
  while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
  let signal = status & 0x7f
  return ChildResult(
    status: signal == 0 ? (status >> 8) & 0xff : -1, signal: signal,
    errorOutput: String(decoding: output, as: UTF8.self))
}
