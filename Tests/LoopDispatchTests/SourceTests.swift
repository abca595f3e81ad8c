import CLoopShims
import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

// Lifecycle of every source kind (registration, activation, handler placement), and the
// helpers the other `Source*Tests.swift` files share.

@Suite struct SourceTests {
  @Test func registrationHandlerRunsOnceBeforeTheFirstEventHandler() {
    let queue = Queue(label: "registration")
    let source = DataSource(merge: .add, queue: queue)
    let log = Locked([String]())
    let got = Latch()
    source.setRegistrationHandler { log.withLock { $0.append("registration") } }
    source.setEventHandler {
      log.withLock { $0.append("event") }
      got.open()
    }
    // Posted before activation: the event is due at once, yet registration comes first.
    source.post(1)
    source.activate()
    source.activate()
    #expect(got.wait())
    queue.sync {}
    #expect(log.value == ["registration", "event"])
    source.cancel()
  }

  @Test func resumeActivatesASourceThatWasNeverActivated() {
    let source = DataSource(merge: .add, queue: Queue(label: "resume-activates"))
    let total = Counter()
    let got = Latch()
    source.setEventHandler { [unowned source] in
      if total.increment() == 1 && source.data == 7 { got.open() }
    }
    source.post(7)
    source.resume()
    #expect(got.wait())
    source.cancel()
  }

  @Test func everyHandlerRunsOnTheTargetQueue() throws {
    let queue = Queue(label: "placement")
    let (readEnd, writeEnd) = try makePipe()
    let source = try ReadSource(fd: readEnd, queue: queue)
    let placement = Locked([String: Bool]())
    let cancelled = Latch()
    source.setRegistrationHandler {
      placement.withLock { $0["registration"] = queue.isCurrent && Queue.current === queue }
    }
    source.setEventHandler { [unowned source] in
      placement.withLock { $0["event"] = queue.isCurrent && Queue.current === queue }
      drain(readEnd)
      source.cancel()
    }
    source.setCancelHandler {
      placement.withLock { $0["cancel"] = queue.isCurrent && Queue.current === queue }
      close(readEnd)
      cancelled.open()
    }
    source.activate()
    #expect(writeBytes(writeEnd, 1) == 1)
    #expect(cancelled.wait())
    close(writeEnd)
    #expect(placement.value == ["registration": true, "event": true, "cancel": true])
    #expect(source.isCancelled)
  }

  @Test func anInactiveSourceRunsNoEventHandlerAndCancelsCleanly() {
    let queue = Queue(label: "inactive")
    let source = DataSource(merge: .add, queue: queue)
    let events = Counter()
    let cancelled = Latch()
    let cancelRuns = Counter()
    source.setEventHandler { events.increment() }
    source.setRegistrationHandler { events.increment() }
    source.setCancelHandler {
      cancelRuns.increment()
      cancelled.open()
    }
    source.post(3)
    #expect(!source.isCancelled)
    source.cancel()
    #expect(source.isCancelled)
    // Like every handler, the cancel handler waits for activation (GCD): had it been
    // submitted by `cancel`, this `sync` would have waited for it.
    queue.sync {}
    #expect(cancelRuns.current == 0)
    // Activating a cancelled source registers nothing and runs no event or registration
    // handler; the held cancel handler runs now.
    source.activate()
    #expect(cancelled.wait())
    queue.sync {}
    #expect(events.current == 0)
  }
}

// MARK: - Shared helpers

struct SystemCallFailed: Error, CustomStringConvertible {
  let call: String
  let code: Int32
  var description: String { "\(call) failed: errno \(code)" }
}

/// A fresh pipe, both ends non-blocking and close-on-exec from the start (`pipe2`): a child
/// process that another test forks between a `pipe` and a later `fcntl` would otherwise
/// keep the ends open for its whole life.
func makePipe() throws -> (read: Int32, write: Int32) {
  var fds: [Int32] = [-1, -1]
  guard cls_pipe2(&fds, O_NONBLOCK | O_CLOEXEC) == 0 else {
    throw SystemCallFailed(call: "pipe2", code: errno)
  }
  return (fds[0], fds[1])
}

/// A fresh connected Unix stream socket pair, non-blocking and close-on-exec.
func makeSocketPair() throws -> (Int32, Int32) {
  var fds: [Int32] = [-1, -1]
  let type =
    Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
    | Int32(SOCK_CLOEXEC.rawValue)
  guard socketpair(AF_UNIX, type, 0, &fds) == 0 else {
    throw SystemCallFailed(call: "socketpair", code: errno)
  }
  return (fds[0], fds[1])
}

/// Writes `count` bytes of `byte` to `fd`; returns how many were written.
@discardableResult
func writeBytes(_ fd: Int32, _ count: Int, byte: UInt8 = 0x61) -> Int {
  let bytes = [UInt8](repeating: byte, count: count)
  var offset = 0
  while offset < count {
    let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, count - offset) }
    if n > 0 {
      offset += n
    } else if n < 0 && errno == EINTR {
      continue
    } else {
      break
    }
  }
  return offset
}

/// Reads at most `count` bytes from `fd`; returns `read`'s result.
@discardableResult
func readBytes(_ fd: Int32, _ count: Int) -> Int {
  var buffer = [UInt8](repeating: 0, count: Swift.max(1, count))
  while true {
    let n = read(fd, &buffer, count)
    if n < 0 && errno == EINTR { continue }
    return n
  }
}

/// Reads everything currently available on `fd`; returns the byte count. Looks first
/// (`poll`, no wait) before each read, so it returns even if the descriptor was left
/// blocking: a test that waits in `read` stops the whole run (an I/O channel once made a
/// test's non-blocking pipe blocking, and `make test` hung here).
@discardableResult
func drain(_ fd: Int32) -> Int {
  var total = 0
  while true {
    var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    guard poll(&entry, 1, 0) == 1, entry.revents & Int16(POLLIN) != 0 else { return total }
    let n = readBytes(fd, 4096)
    if n <= 0 { return total }
    total += n
  }
}

/// Counts how often a region is entered while another thread is inside it.
final class OverlapMeter: Sendable {
  private let inside = Atomic<Int>(0)
  private let overlapCount = Atomic<Int>(0)

  init() {}

  func enter() {
    if inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue > 1 {
      overlapCount.wrappingAdd(1, ordering: .relaxed)
    }
  }

  func leave() { inside.wrappingSubtract(1, ordering: .sequentiallyConsistent) }

  var overlaps: Int { overlapCount.load(ordering: .relaxed) }

  /// Lingers inside the region a little (20 µs of spinning) so that an overlap, if possible,
  /// shows. A spin, not `sched_yield`: on a loaded machine each yield gives the rest of the
  /// time slice to another runnable thread (a few milliseconds under the kernel's EEVDF
  /// scheduler), so twenty of them per handler made 2,000 handlers outlast their minute
  /// beside two other test processes (400–950 done), although every delivery ran.
  func linger() {
    var start = timespec()
    clock_gettime(CLOCK_MONOTONIC, &start)
    while true {
      var now = timespec()
      clock_gettime(CLOCK_MONOTONIC, &now)
      let elapsed = (now.tv_sec - start.tv_sec) * 1_000_000_000 + (now.tv_nsec - start.tv_nsec)
      if elapsed >= 20_000 { return }
    }
  }
}

/// Waits at most `duration` for something that must NOT happen; true if nothing opened it.
/// Only a supplementary check: each test that uses it also proves the point by ordering.
func staysClosed(_ latch: LoopDispatch.Semaphore, for duration: Duration) -> Bool {
  latch.wait(timeout: duration) == .timedOut
}

/// A value behind a pthread mutex. For state shared by many threads with no other ordering
/// between them: ThreadSanitizer sees pthread locking, while it does not see the futex
/// inside `Synchronization.Mutex` (so `Locked` there reports false races).
final class PosixLocked<Value>: @unchecked Sendable {
  // @unchecked Sendable: `value` is only touched with `mutex` held.
  private var mutex = pthread_mutex_t()
  private var value: Value

  init(_ value: Value) {
    self.value = value
    pthread_mutex_init(&mutex, nil)
  }

  deinit { pthread_mutex_destroy(&mutex) }

  func withLock<T>(_ body: (inout Value) -> T) -> T {
    pthread_mutex_lock(&mutex)
    defer { pthread_mutex_unlock(&mutex) }
    return body(&value)
  }
}
