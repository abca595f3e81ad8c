import Glibc
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// The cancel protocol: no handler after cancel, the cancel handler once and last, release on
/// drop, the target queue's lifetime, churn.
@Suite struct SourceCancelTests {
  @Test(arguments: [false, true])
  func theCancelHandlerRunsOnceAfterTheRunningEventHandler(concurrent: Bool) {
    let queue =
      concurrent ? Queue(label: "cancel-wide", attributes: .concurrent) : Queue(label: "cancel")
    let source = DataSource(merge: .add, queue: queue)
    let log = Locked([String]())
    let entered = Latch()
    let release = Latch()
    let cancelReturned = Counter()
    let lateStarts = Counter()
    let cancelRuns = Counter()
    let cancelOnQueue = Locked(false)
    let cancelled = Semaphore(value: 0)
    source.setEventHandler { [unowned source] in
      if cancelReturned.current != 0 { lateStarts.increment() }
      log.withLock { $0.append("event \(source.data) begins") }
      entered.open()
      _ = release.wait()
      log.withLock { $0.append("event ends") }
    }
    source.setCancelHandler {
      cancelRuns.increment()
      cancelOnQueue.withLock { $0 = queue.isCurrent }
      log.withLock { $0.append("cancel") }
      cancelled.signal()
    }
    source.activate()
    source.post(1)
    #expect(entered.wait())
    // Data merged while the handler runs would start another run after it, but for the cancel.
    source.post(2)
    source.cancel()
    cancelReturned.increment()
    source.post(4)
    source.cancel()
    // Supplementary: the cancel handler waits for the blocked event handler.
    #expect(staysClosed(cancelled, for: .milliseconds(50)))
    release.open()
    #expect(cancelled.wait(timeout: .seconds(30)) == .success)
    queue.sync(flags: .barrier) {}
    #expect(log.value == ["event 1 begins", "event ends", "cancel"])
    #expect(lateStarts.current == 0)
    #expect(cancelRuns.current == 1)
    #expect(cancelOnQueue.value)
  }

  @Test func nothingPostedAfterCancelReturnsReachesTheHandler() {
    let iterations = scaled(300)
    let queue = Queue(label: "cancel-race")
    let violations = Locked([String]())
    let cancelRuns = Counter()
    let finished = Group()
    for iteration in 0..<iterations {
      let source = DataSource(merge: .or, queue: queue)
      let cancelHandlerRan = Counter()
      source.setEventHandler { [unowned source] in
        let data = source.data
        if data & 2 != 0 { violations.withLock { $0.append("\(iteration): data \(data)") } }
        if cancelHandlerRan.current != 0 {
          violations.withLock { $0.append("\(iteration): event after the cancel handler") }
        }
      }
      finished.enter()
      source.setCancelHandler {
        cancelHandlerRan.increment()
        cancelRuns.increment()
        finished.leave()
      }
      source.activate()
      // A poster races the cancel; bit 2 is only ever posted after cancel() returned.
      let posted = Latch()
      Queue.global().async {
        for _ in 0..<20 { source.post(1) }
        posted.open()
      }
      if iteration % 2 == 0 { source.post(1) }
      source.cancel()
      source.post(2)
      Queue.global().async { source.cancel() }
      #expect(posted.wait())
    }
    #expect(finished.wait(timeout: .seconds(60)) == .success)
    queue.sync {}
    #expect(violations.value == [])
    #expect(cancelRuns.current == iterations)
  }

  @Test func cancellingFromTheHandlerStopsFurtherRuns() throws {
    let (readEnd, writeEnd) = try makePipe()
    let queue = Queue(label: "self-cancel")
    let source = try ReadSource(fd: readEnd, queue: queue)
    let runs = Counter()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      runs.increment()
      // Leave the data unread: level semantics would fire again, but for the cancel.
      source.cancel()
    }
    source.setCancelHandler {
      close(readEnd)
      cancelled.open()
    }
    #expect(writeBytes(writeEnd, 8) == 8)
    source.activate()
    #expect(cancelled.wait())
    queue.sync {}
    close(writeEnd)
    #expect(runs.current == 1)
  }

  @Test func droppingTheLastReferenceStopsEventsAndRunsTheCancelHandlerOnce() throws {
    let (readEnd, writeEnd) = try makePipe()
    let queue = Queue(label: "dropped-source")
    let runs = Counter()
    let first = Latch()
    let cancelRuns = Counter()
    let cancelled = Latch()
    weak var weakSource: ReadSource?
    do {
      let source = try ReadSource(fd: readEnd, queue: queue)
      weakSource = source
      // The handlers do not capture the source, so dropping it releases it.
      source.setEventHandler {
        runs.increment()
        drain(readEnd)
        first.open()
      }
      source.setCancelHandler {
        cancelRuns.increment()
        cancelled.open()
      }
      source.activate()
      #expect(writeBytes(writeEnd, 1) == 1)
      #expect(first.wait())
    }
    // A running delivery holds the source until its handler returns; after that, nothing.
    queue.sync {}
    #expect(weakSource == nil)
    // Data written after the drop: any run for it would have to come before the cancel
    // handler, which runs last.
    #expect(writeBytes(writeEnd, 1) == 1)
    #expect(cancelled.wait())
    queue.sync {}
    #expect(runs.current == 1)
    // Supplementary: more data and a probe through the same queue a little later.
    #expect(writeBytes(writeEnd, 1) == 1)
    let probed = Latch()
    let probe = DataSource(merge: .add, queue: queue)
    probe.setEventHandler { probed.open() }
    probe.activate()
    _ = queue.after(.milliseconds(20)) { probe.post(1) }
    #expect(probed.wait())
    probe.cancel()
    close(readEnd)
    close(writeEnd)
    #expect(runs.current == 1)
    #expect(cancelRuns.current == 1)
  }

  @Test func aDataSourceKeepsItsTargetQueueAliveUntilCancelled() {
    expectSourceKeepsItsQueueAlive { queue in
      let source = DataSource(merge: .add, queue: queue)
      return (source, { source.post(1) }, {})
    }
  }

  @Test func aReadSourceKeepsItsTargetQueueAliveUntilCancelled() throws {
    let (readEnd, writeEnd) = try makePipe()
    try expectSourceKeepsItsQueueAlive { queue in
      let source = try ReadSource(fd: readEnd, queue: queue)
      return (source, { writeBytes(writeEnd, 1) }, { drain(readEnd) })
    }
    close(readEnd)
    close(writeEnd)
  }

  @Test func aTimerSourceKeepsItsTargetQueueAliveUntilCancelled() {
    expectSourceKeepsItsQueueAlive { queue in
      let source = TimerSource(queue: queue)
      source.schedule(deadline: .now, repeating: .milliseconds(2))
      return (source, {}, {})
    }
  }

  @Test func sourcesOpenedFiredAndCancelledFromSeveralThreadsAllFinish() {
    let problems = runSourceChurn(total: scaled(10_000), threads: 4)
    #expect(problems == [])
  }

  /// In a child process, where no other test opens descriptors, the count returns to its
  /// baseline.
  @Test func churnLeaksNoDescriptors() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      // Warm up: the I/O driver's own descriptors belong to the baseline.
      if let problem = runSourceChurn(total: 1, threads: 1).first { failChild(problem) }
      // Pipes only: the churn's own descriptors. Under a loaded CI machine the runtime may
      // start a standby I/O driver thread during the churn, with descriptors of its own
      // (epoll, eventfd), which are not a leak.
      let baseline = openDescriptorCount(pipesOnly: true)
      if let problem = runSourceChurn(total: scaled(10_000), threads: 4).first {
        failChild(problem)
      }
      let after = openDescriptorCount(pipesOnly: true)
      if after != baseline { failChild("\(after) pipe descriptors open, \(baseline) before") }
    }
    if let result, result.exitStatus != .exitCode(0) {
      Issue.record("child: \(String(decoding: result.standardErrorContent, as: UTF8.self))")
    }
  }
}

/// Creates a source for a queue made only for it (through `make`, which returns the source,
/// a way to trigger an event and what the handler does with it), then checks that the
/// queue lives while the source is active and is freed once the source is cancelled and
/// dropped. The handlers do not capture the queue.
private func expectSourceKeepsItsQueueAlive(
  _ make: (Queue) throws -> (Source, () -> Void, @Sendable () -> Void),
  sourceLocation: SourceLocation = #_sourceLocation
) rethrows {
  let label = "owned-by-a-source"
  weak var weakQueue: Queue?
  let freed = Latch()
  let fired = Semaphore(value: 0)
  let misplaced = Counter()
  let cancelled = Latch()
  var source: Source?
  var trigger: () -> Void = {}
  do {
    let queue = Queue(label: label)
    queue.context = label
    queue.setFinalizer { _ in freed.open() }
    weakQueue = queue
    let made = try make(queue)
    let handle = made.2
    source = made.0
    trigger = made.1
    made.0.setEventHandler {
      if Queue.current?.label != label { misplaced.increment() }
      handle()
      fired.signal()
    }
    made.0.setCancelHandler { cancelled.open() }
    made.0.activate()
  }
  trigger()
  #expect(fired.wait(timeout: .seconds(30)) == .success, sourceLocation: sourceLocation)
  #expect(weakQueue != nil, "an active source let its queue go", sourceLocation: sourceLocation)
  trigger()
  #expect(fired.wait(timeout: .seconds(30)) == .success, sourceLocation: sourceLocation)
  #expect(weakQueue != nil, sourceLocation: sourceLocation)
  source?.cancel()
  #expect(cancelled.wait(), sourceLocation: sourceLocation)
  source = nil
  trigger = {}
  #expect(freed.wait(), "the queue was never freed", sourceLocation: sourceLocation)
  #expect(weakQueue == nil, sourceLocation: sourceLocation)
  #expect(misplaced.current == 0, sourceLocation: sourceLocation)
}

/// Opens `total` pipe read sources from `threads` threads (at most 64 open per thread at a
/// time), fires each once and cancels it: half from their own handler, half from the opening
/// thread racing the event. Returns what went wrong.
func runSourceChurn(total: Int, threads: Int) -> [String] {
  let problems = PosixLocked([String]())
  let cancelRuns = Counter()
  let window = 64
  let workers = (0..<threads).map { index in
    SourceTestThread.start {
      let share = total / threads + (index < total % threads ? 1 : 0)
      // Starts at 0 and is primed, so that it is never below its initial value when freed.
      let slots = Semaphore(value: 0)
      for _ in 0..<window { slots.signal() }
      // Keeps each source alive until its cancel handler ran.
      let live = PosixLocked([Int: ReadSource]())
      for number in 0..<share {
        if slots.wait(timeout: .seconds(60)) == .timedOut {
          problems.withLock { $0.append(stalled(thread: index, live)) }
          return
        }
        let fds: (read: Int32, write: Int32)
        do {
          fds = try makePipe()
        } catch {
          problems.withLock { $0.append("\(error)") }
          slots.signal()
          continue
        }
        let source: ReadSource
        do {
          source = try ReadSource(fd: fds.read, label: "churn-\(index)-\(number)")
        } catch {
          problems.withLock { $0.append("\(error)") }
          close(fds.read)
          close(fds.write)
          slots.signal()
          continue
        }
        let selfCancelling = number % 2 == 0
        source.setEventHandler { [unowned source] in
          drain(fds.read)
          if selfCancelling { source.cancel() }
        }
        let cancelCount = Counter()
        source.setCancelHandler {
          if cancelCount.increment() != 1 {
            problems.withLock { $0.append("a cancel handler ran twice") }
          }
          close(fds.read)
          close(fds.write)
          live.withLock { $0[number] = nil }
          cancelRuns.increment()
          slots.signal()
        }
        live.withLock { $0[number] = source }
        source.activate()
        writeBytes(fds.write, 1)
        if !selfCancelling { source.cancel() }
      }
      for _ in 0..<window where slots.wait(timeout: .seconds(60)) == .timedOut {
        problems.withLock { $0.append(stalled(thread: index, live)) }
        return
      }
    }
  }
  for worker in workers where !worker.join(seconds: 300) {
    problems.withLock { $0.append("a churn thread did not finish") }
  }
  if cancelRuns.current != total {
    problems.withLock { $0.append("\(cancelRuns.current) of \(total) cancel handlers ran") }
  }
  return problems.withLock { $0 }
}

/// A churn thread's report when its cancel handlers stopped running: each source still
/// waiting for its cancel handler, with the cancel protocol's state (which step is missing),
/// and the pool's state (where the job could be).
private func stalled(thread: Int, _ live: PosixLocked<[Int: ReadSource]>) -> String {
  let waiting = live.withLock { sources in
    sources.sorted { $0.key < $1.key }.map { number, source in
      "source \(number) (\(number % 2 == 0 ? "self-cancelling" : "cancelled by the thread")): "
        + source.core.protocolDescription
    }
  }
  return "thread \(thread): cancel handlers stopped running; "
    + waiting.joined(separator: "; ") + "; pool: " + PoolDiagnostics.snapshot
}

/// How many descriptors the process has open, not
/// counting files under /proc (this directory stream is one): the pool supervisor opens a worker's
/// `/proc/self/task/<tid>/stat` for a moment whenever it checks for blocked workers, which
/// can coincide with a count.
func openDescriptorCount(pipesOnly: Bool = false) -> Int {
  guard let directory = opendir("/proc/self/fd") else { return -1 }
  defer { closedir(directory) }
  var count = 0
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    var target = [CChar](repeating: 0, count: 256)
    let length = readlink("/proc/self/fd/\(name)", &target, target.count - 1)
    // A descriptor closed between `readdir` and `readlink` (such as a `/proc` file the
    // supervisor had open for a moment) is not open: counting it made the total one too high
    // now and then.
    guard length > 0 else { continue }
    let path = String(decoding: target[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    if path.hasPrefix("/proc/") { continue }
    if pipesOnly && !path.hasPrefix("pipe:") { continue }
    count += 1
  }
  return count
}

/// Ends an exit test's child process with a failure that names the problem.
func failChild(_ why: String) -> Never {
  writeBytesOf(Array("FAIL: \(why)\n".utf8), to: 2)
  exit(1)
}

private func writeBytesOf(_ bytes: [UInt8], to fd: Int32) {
  bytes.withUnsafeBytes { _ = write(fd, $0.baseAddress!, $0.count) }
}

/// A plain POSIX thread, outside the worker pool, for tests whose threads block.
final class SourceTestThread: @unchecked Sendable {
  // @unchecked Sendable: `handle` is written by `pthread_create` before `start` returns and
  // only read by `join` on the starting thread.
  private let body: @Sendable () -> Void
  private let finished = Latch()
  private var handle = pthread_t()

  private init(_ body: @escaping @Sendable () -> Void) { self.body = body }

  static func start(_ body: @escaping @Sendable () -> Void) -> SourceTestThread {
    let thread = SourceTestThread(body)
    // Unmanaged: the retained reference is taken back by the thread itself.
    let context = Unmanaged.passRetained(thread).toOpaque()
    let created = pthread_create(
      &thread.handle, nil,
      { raw in
        let thread = Unmanaged<SourceTestThread>.fromOpaque(raw!).takeRetainedValue()
        thread.body()
        thread.finished.open()
        return nil
      }, context)
    if created != 0 { fatalError("pthread_create failed: \(created)") }
    return thread
  }

  /// Waits up to `seconds` for the body to return and joins; returns whether it returned.
  func join(seconds: Int) -> Bool {
    guard finished.wait(seconds: seconds) else { return false }
    pthread_join(handle, nil)
    return true
  }
}
