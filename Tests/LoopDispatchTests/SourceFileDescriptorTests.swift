import Glibc
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// ReadSource and WriteSource on pipes, sockets and regular files.
@Suite struct SourceFileDescriptorTests {
  @Test func readDataEqualsTheBytesWrittenBeforeActivationAndWhileSuspended() throws {
    let (readEnd, writeEnd) = try makePipe()
    let queue = Queue(label: "reader")
    let source = try ReadSource(fd: readEnd, queue: queue)
    let seen = Locked([UInt]())
    let runs = Semaphore(value: 0)
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      let available = source.data
      let n = drain(readEnd)
      seen.withLock { $0.append(available) }
      if n > 0 { runs.signal() }
    }
    source.setCancelHandler {
      close(readEnd)
      cancelled.open()
    }
    #expect(writeBytes(writeEnd, 100) == 100)
    source.activate()
    #expect(runs.wait(timeout: .seconds(30)) == .success)
    source.suspend()
    #expect(writeBytes(writeEnd, 37) == 37)
    #expect(writeBytes(writeEnd, 13) == 13)
    source.resume()
    #expect(runs.wait(timeout: .seconds(30)) == .success)
    source.cancel()
    #expect(cancelled.wait())
    close(writeEnd)
    #expect(seen.value == [100, 50])
  }

  @Test func unreadDataFiresAgainUntilEveryByteIsRead() throws {
    let (readEnd, writeEnd) = try makePipe()
    let queue = Queue(label: "level")
    let source = try ReadSource(fd: readEnd, queue: queue)
    let seen = Locked([UInt]())
    let runs = Semaphore(value: 0)
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      let available = source.data
      readBytes(readEnd, 1)
      seen.withLock { $0.append(available) }
      runs.signal()
    }
    source.setCancelHandler {
      close(readEnd)
      cancelled.open()
    }
    let count = 20
    #expect(writeBytes(writeEnd, count) == count)
    source.activate()
    for _ in 0..<count { #expect(runs.wait(timeout: .seconds(30)) == .success) }
    // Everything is read: the next run can only come from the next byte written. A spurious
    // run in between would show as an extra entry (data 0) before the sentinel's 1.
    #expect(writeBytes(writeEnd, 1) == 1)
    #expect(runs.wait(timeout: .seconds(30)) == .success)
    queue.sync {}
    source.cancel()
    #expect(cancelled.wait())
    close(writeEnd)
    #expect(seen.value == (1...count).reversed().map { UInt($0) } + [1])
  }

  @Test func theHandlerNeverRunsConcurrentlyWithItselfOnAConcurrentQueue() throws {
    let (readEnd, writeEnd) = try makePipe()
    let queue = Queue(label: "wide", attributes: .concurrent)
    let source = try ReadSource(fd: readEnd, queue: queue)
    let meter = OverlapMeter()
    let total = scaled(2_000)
    let consumed = Counter()
    let done = Latch()
    let cancelled = Latch()
    source.setEventHandler {
      meter.enter()
      meter.linger()
      if readBytes(readEnd, 1) == 1 && consumed.increment() == total { done.open() }
      meter.leave()
    }
    source.setCancelHandler {
      close(readEnd)
      cancelled.open()
    }
    source.activate()
    // Keep data flowing from other threads while the handler runs.
    let writers = 2
    for writer in 0..<writers {
      Queue.global().async {
        let share = total / writers + (writer < total % writers ? 1 : 0)
        for _ in 0..<share { writeBytes(writeEnd, 1) }
      }
    }
    // On failure, where the delivery stands (a handler still running, a delivery that never
    // started, a registration left disarmed) and where the pool's jobs are.
    #expect(
      done.wait(seconds: 60),
      "\(consumed.current) of \(total) read; source: \(source.core.protocolDescription); pool: \(PoolDiagnostics.snapshot)"
    )
    source.cancel()
    #expect(cancelled.wait())
    close(writeEnd)
    #expect(meter.overlaps == 0)
    #expect(consumed.current == total)
  }

  @Test func readAndWriteSourcesOnOneSocketAreIndependentWhenWriteIsCancelled() throws {
    let (mine, peer) = try makeSocketPair()
    let reader = try ReadSource(fd: mine, queue: Queue(label: "socket-reader"))
    let writer = try WriteSource(fd: mine, queue: Queue(label: "socket-writer"))
    let reads = Semaphore(value: 0)
    let writable = Locked([UInt]())
    let wrote = Latch()
    let readerCancelled = Latch()
    let writerCancelled = Latch()
    reader.setEventHandler {
      if drain(mine) > 0 { reads.signal() }
    }
    reader.setCancelHandler { readerCancelled.open() }
    writer.setEventHandler { [unowned writer] in
      // Level-triggered: stop it spinning while the socket stays writable (suspended before
      // the test can see the run, so its resume below is balanced).
      writer.suspend()
      writable.withLock { $0.append(writer.data) }
      wrote.open()
    }
    writer.setCancelHandler { writerCancelled.open() }
    reader.activate()
    writer.activate()
    #expect(wrote.wait())
    #expect(writeBytes(peer, 3) == 3)
    #expect(reads.wait(timeout: .seconds(30)) == .success)
    writer.cancel()
    writer.resume()
    #expect(writerCancelled.wait())
    // The read interest survives the write watch's removal on the same descriptor.
    for _ in 0..<3 {
      #expect(writeBytes(peer, 5) == 5)
      #expect(reads.wait(timeout: .seconds(30)) == .success)
    }
    reader.cancel()
    #expect(readerCancelled.wait())
    close(mine)
    close(peer)
    #expect(writable.value.count == 1)
    #expect(writable.value.allSatisfy { $0 > 0 })
  }

  @Test func readAndWriteSourcesOnOneSocketAreIndependentWhenReadIsCancelled() throws {
    let (mine, peer) = try makeSocketPair()
    let writerQueue = Queue(label: "socket-writer")
    let reader = try ReadSource(fd: mine, queue: Queue(label: "socket-reader"))
    let writer = try WriteSource(fd: mine, queue: writerQueue)
    let reads = Counter()
    let readOnce = Latch()
    let writes = Semaphore(value: 0)
    let writable = Locked([UInt]())
    let readerCancelled = Latch()
    let writerCancelled = Latch()
    reader.setEventHandler {
      if drain(mine) > 0 {
        reads.increment()
        readOnce.open()
      }
    }
    reader.setCancelHandler { readerCancelled.open() }
    writer.setEventHandler { [unowned writer] in
      writable.withLock { $0.append(writer.data) }
      writer.suspend()
      writes.signal()
    }
    writer.setCancelHandler { writerCancelled.open() }
    reader.activate()
    writer.activate()
    #expect(writes.wait(timeout: .seconds(30)) == .success)
    #expect(writeBytes(peer, 2) == 2)
    #expect(readOnce.wait())
    reader.cancel()
    #expect(readerCancelled.wait())
    // The write watch keeps reporting after the read watch is gone.
    for _ in 0..<3 {
      writer.resume()
      #expect(writes.wait(timeout: .seconds(30)) == .success)
    }
    // Data arriving now wakes nobody: the reader is cancelled (its cancel handler ran last).
    #expect(writeBytes(peer, 2) == 2)
    writer.resume()
    #expect(writes.wait(timeout: .seconds(30)) == .success)
    writer.cancel()
    writer.resume()
    #expect(writerCancelled.wait())
    close(mine)
    close(peer)
    #expect(reads.current == 1)
    #expect(writable.value.count == 5)
    #expect(writable.value.allSatisfy { $0 > 0 })
  }

  @Test func aWriteSourceOnAPipeReportsItIsWritable() throws {
    let (readEnd, writeEnd) = try makePipe()
    let source = try WriteSource(fd: writeEnd, queue: Queue(label: "pipe-writer"))
    let seen = Locked([UInt]())
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      seen.withLock { $0.append(source.data) }
      source.cancel()
    }
    source.setCancelHandler { cancelled.open() }
    source.activate()
    #expect(cancelled.wait())
    close(readEnd)
    close(writeEnd)
    #expect(seen.value == [1])
  }

  @Test func aRegularFileIsAlwaysReadyWithTheBytesLeft() throws {
    let fd = try makeTemporaryFile(bytes: 1000)
    let queue = Queue(label: "file-reader")
    let source = try ReadSource(fd: fd, queue: queue)
    let seen = Locked([UInt]())
    let third = Latch()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      let available = source.data
      let n = readBytes(fd, 400)
      let count = seen.withLock { seen in
        seen.append(available)
        return seen.count
      }
      if count == 3 && n == 200 { third.open() }
    }
    source.setCancelHandler {
      close(fd)
      cancelled.open()
    }
    source.activate()
    #expect(third.wait())
    // A fourth delivery, if one were due, was queued before the third run's item ended.
    queue.sync {}
    source.cancel()
    #expect(cancelled.wait())
    #expect(seen.value == [1000, 600, 200])
  }

  @Test func theRegistrationHandlerOfAnAlwaysReadyFileRunsBeforeItsFirstEvent() throws {
    let fd = try makeTemporaryFile(bytes: 10)
    let queue = Queue(label: "file-registration")
    let source = try ReadSource(fd: fd, queue: queue)
    let log = Locked([String]())
    let cancelled = Latch()
    source.setRegistrationHandler { log.withLock { $0.append("registration") } }
    source.setEventHandler { [unowned source] in
      log.withLock { $0.append("event \(source.data)") }
      drain(fd)
    }
    source.setCancelHandler {
      close(fd)
      cancelled.open()
    }
    source.activate()
    // Both are queued by activate(); the queue runs them in order.
    queue.sync {}
    source.cancel()
    #expect(cancelled.wait())
    #expect(log.value == ["registration", "event 10"])
  }

  @Test func hangUpDeliversReadinessAndAReadOfZero() throws {
    let (readEnd, writeEnd) = try makePipe()
    let queue = Queue(label: "hup")
    let source = try ReadSource(fd: readEnd, queue: queue)
    let results = Locked([Int]())
    let cancelled = Latch()
    let cancelCount = Counter()
    source.setEventHandler { [unowned source] in
      let n = readBytes(readEnd, 64)
      results.withLock { $0.append(n) }
      if n == 0 { source.cancel() }
    }
    source.setCancelHandler {
      cancelCount.increment()
      close(readEnd)
      cancelled.open()
    }
    #expect(writeBytes(writeEnd, 4) == 4)
    close(writeEnd)
    source.activate()
    #expect(cancelled.wait())
    queue.sync {}
    #expect(results.value == [4, 0])
    #expect(cancelCount.current == 1)
  }

  @Test func negativeClosedAndDirectoryDescriptorsAreRefused() throws {
    #expect(throws: EventLoopError.negativeDescriptor(-1)) { _ = try ReadSource(fd: -1) }
    #expect(throws: EventLoopError.negativeDescriptor(-5)) { _ = try WriteSource(fd: -5) }
    // Above the descriptor limit, so never open (a number closed here could be reused at
    // once by a test running in parallel).
    var limit = rlimit()
    try #require(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0)
    let closed = Int32(clamping: Swift.min(UInt64(limit.rlim_cur) + 1, UInt64(Int32.max)))
    #expect(throws: EventLoopError.closedDescriptor(closed)) { _ = try ReadSource(fd: closed) }
    #expect(throws: EventLoopError.closedDescriptor(closed)) { _ = try WriteSource(fd: closed) }
    let directory = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    try #require(directory >= 0)
    defer { close(directory) }
    #expect(throws: EventLoopError.notPollable(directory, kind: "directory")) {
      _ = try ReadSource(fd: directory)
    }
    #expect(throws: EventLoopError.notPollable(directory, kind: "directory")) {
      _ = try WriteSource(fd: directory)
    }
  }
}

/// A temporary regular file in /tmp holding `bytes` bytes, positioned at its start. The name
/// is unlinked at once; the descriptor keeps the file.
func makeTemporaryFile(bytes: Int) throws -> Int32 {
  var template = Array("/tmp/loopdispatch-source-XXXXXX".utf8CString)
  let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
  guard fd >= 0 else { throw SystemCallFailed(call: "mkstemp", code: errno) }
  template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
  guard writeBytes(fd, bytes) == bytes, lseek(fd, 0, SEEK_SET) == 0 else {
    close(fd)
    throw SystemCallFailed(call: "write/lseek", code: errno)
  }
  return fd
}
