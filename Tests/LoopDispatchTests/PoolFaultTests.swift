import Glibc
import LoopDispatch
import TestSupport
import Testing

/// The pool under a real `pthread_create` failure: the soft `RLIMIT_AS` is lowered to just
/// above the process's size, so a new thread's stack cannot be mapped (`EAGAIN`). Each case
/// runs in a process of its own, since the limit is process-wide.
@Suite struct PoolFaultTests {
  static let warningPrefix = "LoopDispatch: warning: could not start a worker thread"

  /// Refused worker starts degrade the pool: one warning line, no crash, every item runs
  /// once on the existing workers, and the pool grows again once the fault is gone
  /// (`ThreadFailureScenario.swift` in LoopDispatchTestHost).
  @Test func refusedWorkerStartsWarnOnceAndWorkStillRuns() {
    let result = runProgram("LoopDispatchTestHost", ["thread-failure"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok thread-failure"), "\(result.output)")
    let warnings = result.errorOutput.split(separator: "\n").filter {
      $0.hasPrefix(Self.warningPrefix)
    }
    #expect(warnings.count == 1, "stderr: \(result.errorOutput)")
    if let warning = warnings.first {
      #expect(warning.contains("(pthread_create: "), "\(warning)")
      #expect(warning.contains("; continuing with "), "\(warning)")
    }
  }

  /// A pool that cannot start a single worker cannot run anything: it traps, naming
  /// `pthread_create` and the error.
  @Test func aPoolWithoutAnyWorkerTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      // Nothing in this child has touched the pool yet: lower the limit, then start it.
      var attributes = pthread_attr_t()
      pthread_attr_init(&attributes)
      var stackBytes = 0
      pthread_attr_getstacksize(&attributes, &stackBytes)
      let resource = __rlimit_resource_t(RLIMIT_AS.rawValue)
      var limit = rlimit()
      _ = getrlimit(resource, &limit)
      // Room for everything but a thread stack (as in ThreadFailureScenario.swift).
      limit.rlim_cur = virtualMemoryBytes() + UInt(max(stackBytes / 2, stackBytes - (1 << 20)))
      guard setrlimit(resource, &limit) == 0 else { exit(3) }
      Queue.global().async {}
      exit(4)  // Not reached: starting the pool traps.
    }
    let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    // Under AddressSanitizer its `pthread_create` interceptor maps the new thread's own
    // state before the stack, and can be the mapping the limit refuses: ASan then reports
    // "out of memory" and exits before `pthread_create` could return the error (seen in CI).
    // The plain and release runs check the message.
    let sanitizerRanOut =
      dlsym(nil, "__asan_init") != nil && errors.contains("AddressSanitizer: out of memory")
    #expect(
      sanitizerRanOut
        || errors.contains(
          "LOOPDISPATCH CANNOT CONTINUE: could not start any pool worker thread (pthread_create: "),
      "\(errors)")
  }
}

/// `VmSize` from `/proc/self/status`, in bytes (0 if unreadable, which makes the limit
/// fail every new mapping: the test still sees the trap or an unexpected message).
private func virtualMemoryBytes() -> UInt {
  let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return 0 }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: 8192)
  let n = read(fd, &buffer, buffer.count)
  guard n > 0 else { return 0 }
  let text = String(decoding: buffer[..<n], as: UTF8.self)
  for line in text.split(separator: "\n") where line.hasPrefix("VmSize:") {
    return (UInt(String(line.filter { $0.isNumber })) ?? 0) * 1_024
  }
  return 0
}
