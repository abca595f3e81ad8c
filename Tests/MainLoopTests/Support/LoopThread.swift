import Glibc
import Synchronization
import TestSupport
import Testing

@testable import MainLoop

/// Runs `loop` on a dedicated thread for the duration of `body`, then stops and joins it.
func withLoopThread<T>(
  _ loop: EventLoop = EventLoop(name: "test-loop"), _ body: (EventLoop) throws -> T
) rethrows -> T {
  let started = Latch()
  let thread = NativeThread.spawn(name: "test-loop") {
    loop.execute { started.open() }
    loop.run()
  }!
  _ = started.wait()
  defer {
    loop.stop()
    thread.join()
  }
  return try body(loop)
}

/// A value confined to one thread (the loop's) by the test's construction.
final class LoopConfined<Value>: @unchecked Sendable {
  // @unchecked Sendable: every test that uses this touches `value` only on the loop thread,
  // or after the loop has stopped (which happens-after every loop-thread access).
  var value: Value
  init(_ value: Value) { self.value = value }
}

/// A non-blocking pipe; closes both ends when dropped.
final class Pipe: @unchecked Sendable {
  // @unchecked Sendable: the descriptors are immutable.
  let readEnd: Int32
  let writeEnd: Int32
  init() {
    var fds: [Int32] = [0, 0]
    precondition(pipe(&fds) == 0)
    readEnd = fds[0]
    writeEnd = fds[1]
    for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
  }
  func write(_ bytes: Int = 1) {
    let buffer = [UInt8](repeating: 7, count: bytes)
    precondition(Glibc.write(writeEnd, buffer, bytes) == bytes)
  }
  @discardableResult
  func drain() -> Int {
    var buffer = [UInt8](repeating: 0, count: 65536)
    let n = read(readEnd, &buffer, buffer.count)
    return max(n, 0)
  }
  deinit {
    close(readEnd)
    close(writeEnd)
  }
}

/// Asserts the loop holds nothing of the test's: no watches, no timers, no libevent events.
func expectClean(_ loop: EventLoop) -> Bool {
  loop.registeredWatchCount == 0 && loop.pendingTimerCount == 0
    && loop.libeventAddedEventCount == 0
}

/// A connected AF_UNIX stream socket pair.
func socketPair() -> [Int32] {
  var fds: [Int32] = [0, 0]
  precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
  return fds
}

/// A loop bound to the calling thread (by a zero-length run), so that registrations and
/// cancellations made here take effect at once instead of being posted.
func boundLoop(_ name: String) -> EventLoop {
  let loop = EventLoop(name: name)
  loop.run(until: .now)
  #expect(loop.isInLoopThread)
  return loop
}
