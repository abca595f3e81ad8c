import Glibc
import LoopDispatch
import TestSupport
import Testing

/// Starting the I/O driver with the descriptor table full (`IODriver.start`): before, its
/// epoll set could not be made and the process exited (`LOOPDISPATCH CANNOT CONTINUE`).
@Suite struct IODriverStartTests {
  /// The first driver source, made with no descriptor left, reports `EMFILE` as its
  /// registration error and the process lives; its cancel completes; once descriptors are
  /// free again, a new source starts the driver and fires. In a child process: the driver
  /// must not have started yet, and the limit is process-wide. The service loop (timers) is
  /// not started first: an fd source does not need it.
  @Test func aFullDescriptorTableFailsTheSourceNotTheProcess() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      fullTableScenario(startingTheServiceLoopFirst: false)
    }
    expectChildAccount(result)
  }

  /// The same with the service loop started before the table fills (a process that has
  /// timer sources): only the driver's start meets the full table.
  @Test func aFullDescriptorTableFailsTheDriverStartNotTheProcess() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      fullTableScenario(startingTheServiceLoopFirst: true)
    }
    expectChildAccount(result)
  }

  /// The child's own account of a failure (shown only then).
  private func expectChildAccount(
    _ result: ExitTest.Result?, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(!errors.contains("IODriverStartTests:"), "\(errors)", sourceLocation: sourceLocation)
    #expect(!errors.contains("LOOPDISPATCH"), "\(errors)", sourceLocation: sourceLocation)
  }
}

/// The scenario of both tests, in the child process; exits 0 if it went as described.
private func fullTableScenario(startingTheServiceLoopFirst: Bool) -> Never {
  // The pool is not the subject: start it while descriptors are free.
  let warmed = LoopDispatch.Semaphore(value: 0)
  Queue.global().async { warmed.signal() }
  if warmed.wait(timeout: .seconds(30)) == .timedOut { startTestFailure("the pool did not run") }
  if startingTheServiceLoopFirst {
    // A timer source, whose timer is the service loop's (an `after` would start the driver:
    // its timers are the driver's).
    let timerRan = LoopDispatch.Semaphore(value: 0)
    let timer = TimerSource(queue: Queue.global())
    timer.setEventHandler { timerRan.signal() }
    timer.schedule(deadline: .now + .milliseconds(1))
    timer.activate()
    if timerRan.wait(timeout: .seconds(30)) == .timedOut { startTestFailure("no timer") }
    timer.cancel()
  }
  var fds: [Int32] = [-1, -1]
  guard pipe(&fds) == 0 else { startTestFailure("pipe: errno \(errno)") }
  let (readEnd, writeEnd) = (fds[0], fds[1])
  let fillers = fillDescriptorTable(duplicating: writeEnd)
  let queue = Queue(label: "io-start")
  let refused: ReadSource
  do { refused = try ReadSource(fd: readEnd, queue: queue, label: "refused") } catch {
    startTestFailure("init with a full table threw \(error)")
  }
  refused.setEventHandler {}
  let refusedCancelled = LoopDispatch.Semaphore(value: 0)
  refused.setCancelHandler { refusedCancelled.signal() }
  refused.activate()
  guard refused.registrationError == .registrationFailed(errno: EMFILE) else {
    startTestFailure("registrationError \(String(describing: refused.registrationError))")
  }
  refused.cancel()
  if refusedCancelled.wait(timeout: .seconds(30)) == .timedOut {
    startTestFailure("the refused source's cancel never completed")
  }
  for fd in fillers { close(fd) }
  // The failed start was not kept: this source starts the driver.
  let source: ReadSource
  do { source = try ReadSource(fd: readEnd, queue: queue, label: "later") } catch {
    startTestFailure("\(error)")
  }
  let fired = LoopDispatch.Semaphore(value: 0)
  source.setEventHandler {
    var byte: UInt8 = 0
    _ = read(readEnd, &byte, 1)
    fired.signal()
  }
  source.activate()
  if let error = source.registrationError { startTestFailure("later source: \(error)") }
  var byte: UInt8 = 1
  _ = write(writeEnd, &byte, 1)
  // Kept alive until it fired: a source released early is cancelled (optimised builds end
  // a local's lifetime at its last use).
  withExtendedLifetime(source) {
    if fired.wait(timeout: .seconds(30)) == .timedOut {
      startTestFailure("the later source never fired")
    }
  }
  exit(0)
}

/// Lowers the soft descriptor limit to a little above the highest descriptor in use, then
/// duplicates `open` until the table is full (`EMFILE`); returns them.
private func fillDescriptorTable(duplicating open: Int32) -> [Int32] {
  let probe = dup(open)
  guard probe >= 0 else { startTestFailure("dup: errno \(errno)") }
  close(probe)
  let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
  var limit = rlimit()
  _ = getrlimit(resource, &limit)
  // Room for descriptors above the probe held by other threads; filled below anyway.
  limit.rlim_cur = rlim_t(probe + 64)
  guard setrlimit(resource, &limit) == 0 else { startTestFailure("setrlimit: errno \(errno)") }
  var fillers: [Int32] = []
  fillers.reserveCapacity(128)
  while true {
    let fd = dup(open)
    if fd < 0 {
      guard errno == EMFILE else { startTestFailure("dup: errno \(errno)") }
      return fillers
    }
    fillers.append(fd)
  }
}

/// Ends the child process with a message on standard error.
private func startTestFailure(_ message: String) -> Never {
  let line = Array("IODriverStartTests: \(message)\n".utf8)
  _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
  exit(1)
}
