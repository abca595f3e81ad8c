import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// A descriptor closed (and its number reused) while a source still watches it: a client
/// bug, answered with a warning line, never with the new descriptor's events or a crash.
@Suite struct SourceDescriptorReuseTests {
  /// The number is replaced while the handler runs: the one-shot watch is re-armed after it,
  /// on the number that now names another pipe, and that pipe is readable.
  @Test func aNumberReusedWhileTheHandlerRunsIsNotReportedToTheOldSource() throws {
    let run = try startReuseWhileHandlerRuns()
    // Supplementary: the dropped event would have run the handler long before this.
    #expect(staysClosed(run.extraRun, for: .milliseconds(200)))
    run.queue.sync {}
    run.finish()
    #expect(run.runs.value == [3])
  }

  /// The number is replaced while the source waits: the kernel drops the old registration
  /// with the old pipe, so nothing is reported at all.
  @Test func aNumberReusedWhileTheSourceWaitsIsNotReportedToTheOldSource() throws {
    let (oldRead, oldWrite) = try makePipe()
    let queue = Queue(label: "reuse-idle")
    let source = try ReadSource(fd: oldRead, queue: queue)
    let runs = Locked([UInt]())
    let registered = Latch()
    let extraRun = LoopDispatch.Semaphore(value: 0)
    let cancelled = Latch()
    source.setRegistrationHandler { registered.open() }
    source.setEventHandler { [unowned source] in
      runs.withLock { $0.append(source.data) }
      extraRun.signal()
    }
    source.setCancelHandler { cancelled.open() }
    source.activate()
    #expect(registered.wait())
    // Closes the old read end and puts a new pipe's read end on its number, atomically (a
    // plain close could let a test running in parallel take the number).
    let (newRead, newWrite) = try makePipe()
    #expect(dup2(newRead, oldRead) == oldRead)
    close(newRead)
    #expect(writeBytes(newWrite, 4) == 4)
    #expect(staysClosed(extraRun, for: .milliseconds(200)))
    source.cancel()
    #expect(cancelled.wait())
    queue.sync {}
    close(oldRead)
    close(oldWrite)
    close(newWrite)
    #expect(runs.value == [])
  }

  /// The same, in a child process that captures its own standard error: the warning line
  /// proves the event arrived and was dropped, so the check that the handler did not run
  /// needs no timing.
  @Test func theDroppedEventIsExplainedOnStandardError() async {
    let result = await #expect(
      processExitsWith: .success, observing: [\.standardErrorContent]
    ) {
      let original = dup(2)
      var capture: [Int32] = [-1, -1]
      guard original >= 0, pipe(&capture) == 0, dup2(capture[1], 2) == 2 else {
        failChild("could not capture standard error")
      }
      close(capture[1])
      func fail(_ why: String) -> Never {
        _ = dup2(original, 2)
        failChild(why)
      }
      let run: ReuseRun
      do {
        run = try startReuseWhileHandlerRuns()
      } catch {
        fail("\(error)")
      }
      guard let text = readUntil("cancel a source before closing", from: capture[0]) else {
        fail("no warning within 30 s")
      }
      // The event was dropped on the loop thread before the warning was written.
      run.queue.sync {}
      let runs = run.runs.value
      run.finish()
      _ = dup2(original, 2)
      _ = text.withCString { write(2, $0, strlen($0)) }
      if runs != [3] { failChild("the old source ran again: \(runs)") }
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("was closed (and perhaps reused) while the source watched it"), "\(text)")
    #expect(!text.contains("FAIL"), "\(text)")
  }
}

/// A read source whose descriptor number was given to another pipe while its handler ran.
struct ReuseRun: Sendable {
  let queue: Queue
  let source: ReadSource
  /// The `data` of each handler run.
  let runs: Locked<[UInt]>
  /// Signalled by every run after the first.
  let extraRun: LoopDispatch.Semaphore
  let cancelled: Latch
  let descriptors: [Int32]

  /// Cancels the source, waits for its cancel handler and closes the descriptors.
  func finish() {
    source.cancel()
    _ = cancelled.wait()
    for fd in descriptors { close(fd) }
  }
}

/// Starts a read source on a pipe holding 3 bytes; while its first run is held, puts a new
/// pipe holding 4 bytes on the watched number (no cancel), then lets the run end.
func startReuseWhileHandlerRuns() throws -> ReuseRun {
  let (oldRead, oldWrite) = try makePipe()
  let queue = Queue(label: "reuse-running")
  let source = try ReadSource(fd: oldRead, queue: queue)
  let runs = Locked([UInt]())
  let entered = Latch()
  let release = Latch()
  let extraRun = LoopDispatch.Semaphore(value: 0)
  let cancelled = Latch()
  source.setEventHandler { [unowned source] in
    // The data is not read: were the old pipe still there, it would fire again.
    let count = runs.withLock { runs in
      runs.append(source.data)
      return runs.count
    }
    if count == 1 {
      entered.open()
      _ = release.wait()
    } else {
      extraRun.signal()
    }
  }
  source.setCancelHandler { cancelled.open() }
  writeBytes(oldWrite, 3)
  source.activate()
  guard entered.wait() else { throw SystemCallFailed(call: "first run", code: 0) }
  let (newRead, newWrite) = try makePipe()
  guard dup2(newRead, oldRead) == oldRead else {
    throw SystemCallFailed(call: "dup2", code: errno)
  }
  close(newRead)
  writeBytes(newWrite, 4)
  release.open()
  return ReuseRun(
    queue: queue, source: source, runs: runs, extraRun: extraRun, cancelled: cancelled,
    descriptors: [oldRead, oldWrite, newWrite])
}

/// Reads `fd` (blocking) until the text read contains `marker`, for at most 30 seconds.
func readUntil(_ marker: String, from fd: Int32) -> String? {
  let limit = Deadline.now + .seconds(30)
  var bytes = [UInt8]()
  var buffer = [UInt8](repeating: 0, count: 4096)
  while Deadline.now < limit {
    var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    let ready = poll(&entry, 1, 1000)
    if ready < 0 && errno != EINTR { return nil }
    if ready <= 0 { continue }
    let n = read(fd, &buffer, buffer.count)
    if n <= 0 { return nil }
    bytes += buffer[..<n]
    let text = String(decoding: bytes, as: UTF8.self)
    if text.contains(marker) { return text }
  }
  return nil
}
