import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// The I/O driver (`Delivery/IODriver.swift`): handlers run where the event lands, and a
/// handler that blocks does not hold up other descriptors.
@Suite(.serialized) struct IODriverTests {
  /// A read source on an idle serial queue runs its handler on the driver thread that saw
  /// the readiness (named `ld.io.N`), not on a pool worker: no hand-off.
  @Test func aHandlerOnAnIdleSerialQueueRunsOnTheDriverThread() async {
    // In a child process: a handler of another suite blocked on a driver thread would send
    // these through the queue (only one inline handler runs at a time).
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      do {
        let seen = try handlerThreadNames(events: 20)
        guard seen.count == 20, seen.allSatisfy({ $0.hasPrefix("ld.io.") }) else {
          driverTestFailure("handler threads: \(seen)")
        }
      } catch { driverTestFailure("\(error)") }
      exit(0)
    }
    // Shown only on failure (the child's own account of it).
    let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(!errors.contains("IODriverTests:"), "\(errors)")
  }

  /// Work below the default lane never runs inline on the poller: a read source's handler
  /// and an `after` of a serial queue targeting the `.low` or `.background` global queue run
  /// on that lane's pool workers, never on a driver thread (`ld.io.N`), while the same on
  /// the `.default` and `.high` lanes still run on the driver thread. In a child process, as
  /// above, so that no other suite's inline run sends the higher lanes' events to the pool.
  @Test func workBelowTheDefaultLaneNeverRunsOnTheDriverThread() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      do {
        for priority in Priority.allCases {
          let lane = Queue.global(priority)
          let handlers = try handlerThreadNames(events: 10, target: lane)
          let timers = try afterThreadNames(count: 10, target: lane)
          let onDriver = (handlers + timers).filter { $0.hasPrefix("ld.io.") }.count
          if priority > .default {
            guard onDriver == 0 else {
              driverTestFailure("\(priority): \(onDriver) on the driver: \(handlers) \(timers)")
            }
          } else {
            guard handlers.allSatisfy({ $0.hasPrefix("ld.io.") }) else {
              driverTestFailure("\(priority): handler threads \(handlers)")
            }
            guard timers.contains(where: { $0.hasPrefix("ld.io.") }) else {
              driverTestFailure("\(priority): no after ran on the driver: \(timers)")
            }
          }
        }
      } catch { driverTestFailure("\(error)") }
      exit(0)
    }
    // Shown only on failure (the child's own account of it).
    let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(!errors.contains("IODriverTests:"), "\(errors)")
  }

  /// While one source's handler blocks for a second on the driver thread, another source's
  /// event is still delivered within a few milliseconds (the standby driver thread takes
  /// over polling), and an `after` timer still fires on time.
  @Test func aBlockedHandlerDoesNotHoldUpOtherDescriptors() throws {
    let slow = try makePipe()
    let fast = try makePipe()
    let slowEntered = Latch()
    let release = Latch()
    let slowSource = try ReadSource(fd: slow.read, queue: Queue(label: "io-slow"))
    slowSource.setEventHandler { [unowned slowSource] in
      _ = drain(slowSource.fd)
      slowEntered.open()
      _ = release.wait(seconds: 1)  // Blocks its thread for up to a second.
    }
    let fastFiredAt = Atomic<UInt64>(0)
    let fastFired = Latch()
    let fastSource = try ReadSource(fd: fast.read, queue: Queue(label: "io-fast"))
    fastSource.setEventHandler { [unowned fastSource] in
      _ = drain(fastSource.fd)
      fastFiredAt.store(Deadline.now.uptimeNanoseconds, ordering: .sequentiallyConsistent)
      fastFired.open()
    }
    slowSource.activate()
    fastSource.activate()
    _ = writeBytes(slow.write, 1)
    #expect(slowEntered.wait())
    let timerFired = Latch()
    let timerDue = Deadline.now + .milliseconds(20)
    let timerLate = Atomic<UInt64>(0)
    Queue.global().after(deadline: timerDue) {
      timerLate.store(
        Deadline.now.uptimeNanoseconds - timerDue.uptimeNanoseconds,
        ordering: .sequentiallyConsistent)
      timerFired.open()
    }
    let writtenAt = Deadline.now.uptimeNanoseconds
    _ = writeBytes(fast.write, 1)
    #expect(fastFired.wait(seconds: 5))
    #expect(timerFired.wait(seconds: 5))
    release.open()
    let delay = fastFiredAt.load(ordering: .sequentiallyConsistent) - writtenAt
    // A blocked driver thread is replaced within two 2 ms watchdog periods; 250 ms leaves
    // room for sanitizers and a loaded machine, and is far below the 1 s block.
    #expect(delay < 250_000_000, "the other source's handler waited \(delay / 1_000_000) ms")
    let late = timerLate.load(ordering: .sequentiallyConsistent)
    #expect(late < 250_000_000, "the timer fired \(late / 1_000_000) ms late")
    let cancelled = Counter()
    let bothCancelled = Latch()
    for source in [slowSource, fastSource] as [Source] {
      source.setCancelHandler { if cancelled.increment() == 2 { bothCancelled.open() } }
      source.cancel()
    }
    #expect(bothCancelled.wait())
    for fd in [slow.read, slow.write, fast.read, fast.write] { close(fd) }
  }
}

/// An fd source's `data` is computed when the handler reads it, not before the handler
/// starts: bytes that arrive in between are counted (computed up front it would say 1).
@Test func aReadSourcesDataIsComputedWhenTheHandlerReadsIt() throws {
  let pair = try makePipe()
  let seen = Locked([UInt]())
  let done = Latch()
  let source = try ReadSource(fd: pair.read, queue: Queue(label: "io-lazy-data"))
  source.setEventHandler { [unowned source] in
    _ = writeBytes(pair.write, 5)  // More bytes, after the event and before `data` is read.
    seen.withLock { $0.append(source.data) }
    _ = drain(source.fd)
    done.open()
  }
  let cancelled = Latch()
  source.setCancelHandler { cancelled.open() }
  source.activate()
  _ = writeBytes(pair.write, 1)
  #expect(done.wait())
  source.cancel()
  #expect(cancelled.wait())
  close(pair.read)
  close(pair.write)
  #expect(seen.value.first == 6)
}

/// A socket watched only for writing, with a full send buffer, whose peer half-closes: the
/// driver gets no stream of events for the half-close (it is read readiness, armed only
/// while reading is), so it stays asleep.
@Test func aHalfClosedSocketWatchedForWritingDoesNotSpinTheDriver() async {
  await #expect(processExitsWith: .success) {
    var pair: [Int32] = [0, 0]
    guard
      socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0
    else {
      driverTestFailure("socketpair failed")
    }
    _ = fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK)
    let chunk = [UInt8](repeating: 0x61, count: 4096)
    while chunk.withUnsafeBytes({ write(pair[0], $0.baseAddress, $0.count) }) > 0 {}
    let source: WriteSource
    do { source = try WriteSource(fd: pair[0], queue: Queue(label: "io-half-closed")) } catch {
      driverTestFailure("\(error)")
    }
    source.setEventHandler {}
    source.activate()
    let before = RuntimeStats.current.ioEvents
    shutdown(pair[1], Int32(SHUT_WR))
    // A window for activity that must not happen (so nothing to wait for instead).
    _ = poll(nil, 0, 200)
    let events = RuntimeStats.current.ioEvents - before
    if events > 20 { driverTestFailure("\(events) driver events in 200 ms for a half-close") }
    exit(0)
  }
}

/// Fires a read source on an idle serial queue (targeting `target`, by default the default
/// global queue) `events` times, one event at a time, and returns the name of the thread
/// each handler ran on.
private func handlerThreadNames(events: Int, target: Queue? = nil) throws -> [String] {
  let queue = Queue(label: "io-inline", target: target)
  let pair = try makePipe()
  let names = Locked([String]())
  let fired = LoopDispatch.Semaphore(value: 0)
  let source = try ReadSource(fd: pair.read, queue: queue)
  source.setEventHandler { [unowned source] in
    _ = drain(source.fd)
    names.withLock { $0.append(kernelThreadName()) }
    fired.signal()
  }
  let cancelled = Latch()
  source.setCancelHandler { cancelled.open() }
  source.activate()
  for _ in 0..<events {
    _ = writeBytes(pair.write, 1)
    if fired.wait(timeout: .seconds(10)) == .timedOut { driverTestFailure("an event was lost") }
  }
  source.cancel()
  _ = cancelled.wait()
  close(pair.read)
  close(pair.write)
  return names.value
}

/// Runs `count` `after`s, one at a time, each 300 µs ahead, on an idle serial queue targeting
/// `target`, and returns the name of the thread each ran on.
private func afterThreadNames(count: Int, target: Queue) throws -> [String] {
  let queue = Queue(label: "io-inline-after", target: target)
  let names = Locked([String]())
  let ran = LoopDispatch.Semaphore(value: 0)
  for _ in 0..<count {
    queue.after(.microseconds(300)) {
      names.withLock { $0.append(kernelThreadName()) }
      ran.signal()
    }
    if ran.wait(timeout: .seconds(10)) == .timedOut { driverTestFailure("an after never ran") }
  }
  return names.value
}

/// Ends the child process with a message on standard error.
private func driverTestFailure(_ message: String) -> Never {
  let line = Array("IODriverTests: \(message)\n".utf8)
  _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
  exit(1)
}

/// The calling thread's name (as `top -H` shows it), from /proc. Shared with
/// RetargetWhileHeldTests.
func kernelThreadName() -> String {
  let fd = open("/proc/thread-self/comm", O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return "?" }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: 32)
  let count = read(fd, &buffer, buffer.count)
  guard count > 0 else { return "?" }
  return String(decoding: buffer[..<count], as: UTF8.self).split(separator: "\n").first.map(
    String.init)
    ?? ""
}
