import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// `IOChannel` (GCD's `dispatch_io`): water marks, order, barriers, close and stop, cleanup,
/// errors, and back-pressure on descriptors that fill up. Every wait has a deadline; no
/// sleeps.
@Suite struct IOChannelTests {
  @Test func aLowWaterMarkOfOneHandsOverEachWriteThenDoneAtTheEnd() throws {
    let (reader, writer) = try blockingPipe()
    let calls = Locked<[(Bool, String, Int32)]>([])
    let got = Semaphore(value: 0)
    let cleaned = Latch()
    let channel = IOChannel(kind: .stream, fd: reader, cleanup: { _ in cleaned.open() })
    channel.setLowWater(1)
    channel.read(length: Int.max, queue: Queue(label: "io.test")) { done, data, error in
      calls.withLock { $0.append((done, String(decoding: data.array, as: UTF8.self), error)) }
      got.signal()
    }
    #expect(Glibc.write(writer, "hello", 5) == 5)
    #expect(got.wait(timeout: .now + .seconds(30)) == .success)
    #expect(Glibc.write(writer, "world", 5) == 5)
    #expect(got.wait(timeout: .now + .seconds(30)) == .success)
    close(writer)
    #expect(got.wait(timeout: .now + .seconds(30)) == .success)
    let seen = calls.value
    #expect(seen.map(\.1) == ["hello", "world", ""])
    #expect(seen.map(\.0) == [false, false, true])
    #expect(seen.allSatisfy { $0.2 == 0 })
    // Non-blocking while the channel used it; its flags come back at cleanup.
    #expect(fcntl(reader, F_GETFL) & O_NONBLOCK != 0)
    channel.close()
    #expect(cleaned.wait(seconds: 30))
    #expect(fcntl(reader, F_GETFL) & O_NONBLOCK == 0)
    close(reader)
  }

  @Test func aRandomChannelReadsAndWritesAtOffsetsFromItsStart() async throws {
    let fd = try temporaryFile()
    #expect(Glibc.write(fd, "...", 3) == 3)
    // The descriptor is closed once the channel gives it back (never before: the channel
    // restores its flags at cleanup, and a number closed early may be reused meanwhile).
    let cleaned = Latch()
    let channel = IOChannel(kind: .random, fd: fd) { _ in cleaned.open() }
    try await channel.write(offset: 0, Bytes("0123456789".utf8))
    #expect(try await channel.read(offset: 3, length: 4).array == Array("3456".utf8))
    #expect(try await channel.read(offset: 8, length: Int.max).array == Array("89".utf8))
    var whole = [UInt8](repeating: 0, count: 13)
    #expect(pread(fd, &whole, 13, 0) == 13)
    #expect(whole == Array("...0123456789".utf8))
    channel.close()
    #expect(cleaned.wait(seconds: 30))
    close(fd)
  }

  @Test func twoChannelsEchoOverASocketPair() async throws {
    var pair: [Int32] = [0, 0]
    #expect(
      socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0
    )
    let (leftEnd, rightEnd) = (pair[0], pair[1])
    let left = IOChannel(kind: .stream, fd: leftEnd) { _ in close(leftEnd) }
    let right = IOChannel(kind: .stream, fd: rightEnd) { _ in close(rightEnd) }
    for round in 0..<scaled(200) {
      let message = Bytes("ping \(round)".utf8)
      try await left.write(message)
      #expect(try await right.read(length: message.count) == message)
      try await right.write(message)
      #expect(try await left.read(length: message.count) == message)
    }
    left.close()
    right.close()
  }

  @Test func aLargeWriteWaitsForRoomAndEveryByteArrivesInOrder() async throws {
    let (reader, writer) = try blockingPipe()
    // Four megabytes: far more than a pipe holds, so the write must wait for readiness.
    let size = 4 << 20
    let payload = Bytes((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    let writing = IOChannel(kind: .stream, fd: writer, cleanup: { _ in close(writer) })
    let reading = IOChannel(kind: .stream, fd: reader, cleanup: { _ in close(reader) })
    async let written: Void = { try? await writing.write(payload) }()
    let received = try await reading.read(length: size)
    await written
    #expect(received.count == size)
    #expect(received == payload)
    writing.close()
    reading.close()
  }

  @Test func aBarrierRunsAfterTheOperationsBeforeItAndBeforeThoseAfter() throws {
    let fd = try temporaryFile()
    let channel = IOChannel(kind: .random, fd: fd) { _ in close(fd) }
    let order = Locked<[String]>([])
    let finished = Latch()
    let queue = Queue(label: "io.barrier")
    channel.write(offset: 0, data: Bytes("abc".utf8), queue: queue) { done, _, _ in
      if done { order.withLock { $0.append("write") } }
    }
    channel.barrier {
      let text = readThree(channel.fileDescriptor)
      order.withLock { $0.append("barrier saw \(text)") }
    }
    channel.read(offset: 0, length: 3, queue: queue) { done, _, _ in
      if done {
        order.withLock { $0.append("read") }
        finished.open()
      }
    }
    #expect(finished.wait(seconds: 30))
    #expect(order.value == ["write", "barrier saw abc", "read"])
    channel.close()
  }

  @Test func stopCancelsTheRunningReadAndLaterOperationsFail() throws {
    let (reader, writer) = try blockingPipe()
    defer {
      close(reader)
      close(writer)
    }
    let cleanups = Counter()
    let cleaned = Latch()
    let channel = IOChannel(
      kind: .stream, fd: reader,
      cleanup: { _ in
        cleanups.increment()
        cleaned.open()
      })
    let errors = Locked<[Int32]>([])
    let ended = Semaphore(value: 0)
    let queue = Queue(label: "io.stop")
    channel.read(length: 10, queue: queue) { done, _, error in
      if done {
        errors.withLock { $0.append(error) }
        ended.signal()
      }
    }
    channel.close(stop: true)
    #expect(ended.wait(timeout: .now + .seconds(30)) == .success)
    channel.read(length: 10, queue: queue) { done, _, error in
      if done {
        errors.withLock { $0.append(error) }
        ended.signal()
      }
    }
    #expect(ended.wait(timeout: .now + .seconds(30)) == .success)
    #expect(errors.value == [ECANCELED, ECANCELED])
    #expect(cleaned.wait(seconds: 30))
    #expect(cleanups.current == 1)
  }

  @Test func aBadDescriptorFailsEveryOperationAndTheCleanupWithEBADF() async {
    let cleanupError = Locked<Int32?>(nil)
    let cleaned = Latch()
    let channel = IOChannel(
      kind: .stream, fd: 987_654,
      cleanup: { error in
        cleanupError.withLock { $0 = error }
        cleaned.open()
      })
    await #expect(throws: IOError(code: EBADF)) { try await channel.read(length: 10) }
    #expect(cleaned.wait(seconds: 30))
    #expect(cleanupError.value == EBADF)
    #expect(IOChannel(kind: .stream, path: "relative/path", flags: O_RDONLY) == nil)
  }

  @Test func aWriteToAPipeNobodyReadsFailsWithEPIPEAndKeepsWhatWasNotWritten() throws {
    let (reader, writer) = try blockingPipe()
    close(reader)
    // SIGPIPE follows the process's disposition for pipes (as libdispatch); the test
    // process must not die of it.
    signal(SIGPIPE, SIG_IGN)
    let result = Locked<(Int32, Int)?>(nil)
    let done = Latch()
    let channel = IOChannel(kind: .stream, fd: writer) { _ in close(writer) }
    channel.write(data: Bytes("0123456789".utf8), queue: Queue.global()) {
      finished, remaining, error in
      guard finished else { return }
      result.withLock { $0 = (error, remaining.count) }
      done.open()
    }
    #expect(done.wait(seconds: 30))
    #expect(result.value?.0 == EPIPE)
    #expect(result.value?.1 == 10)
    channel.close()
  }

  @Test func aPathChannelOpensLazilyAndClosesItsOwnDescriptor() async throws {
    let fd = try temporaryFile()
    #expect(Glibc.write(fd, "contents", 8) == 8)
    let path = try descriptorPath(fd)
    close(fd)
    defer { unlink(path) }
    let cleaned = Latch()
    let made = IOChannel(kind: .stream, path: path, flags: O_RDONLY) { _ in cleaned.open() }
    let channel = try #require(made)
    #expect(channel.fileDescriptor == -1)
    #expect(try await channel.read(length: Int.max).array == Array("contents".utf8))
    let opened = channel.fileDescriptor
    #expect(opened >= 0)
    channel.close()
    #expect(cleaned.wait(seconds: 30))
    // Closed by the channel: the number no longer names this file (it may name another one,
    // opened meanwhile by a test running beside this one).
    #expect((try? descriptorPath(opened)) != path)
  }

  @Test func oneShotReadAndWriteMoveWholeBuffers() throws {
    let (reader, writer) = try blockingPipe()
    let wrote = Latch()
    let writeError = Locked<Int32>(-1)
    IOChannel.write(to: writer, data: Bytes("one shot".utf8), queue: Queue.global()) {
      remaining, error in
      writeError.withLock { $0 = remaining.isEmpty ? error : -2 }
      wrote.open()
    }
    #expect(wrote.wait(seconds: 30))
    #expect(writeError.value == 0)
    close(writer)
    let read = Latch()
    let got = Locked<[UInt8]>([])
    IOChannel.read(from: reader, length: Int.max, queue: Queue.global()) { data, error in
      got.withLock { $0 = error == 0 ? data.array : [] }
      read.open()
    }
    #expect(read.wait(seconds: 30))
    #expect(got.value == Array("one shot".utf8))
    // The handlers run after the channels gave the descriptors back: blocking again.
    #expect(fcntl(reader, F_GETFL) & O_NONBLOCK == 0)
    close(reader)
  }
}

/// The first three bytes of the file `fd` names.
/// The review's cases: shared descriptors, devices epoll refuses, barriers and STOP after
/// close, the default low water mark.
@Suite struct IOChannelEdgeTests {
  /// Against the contract, the number is closed while the channel uses it and another file
  /// takes it: at cleanup the channel gives its saved flags back only to its own file. (It
  /// made a test's non-blocking pipe blocking this way, and the test's drain waited in
  /// `read` for good: `make test` hung.)
  @Test func aNumberReusedBeforeTheCleanupKeepsTheNewFilesFlags() throws {
    let (reader, writer) = try blockingPipe()
    let cleaned = Latch()
    let channel = IOChannel(kind: .stream, fd: reader) { _ in cleaned.open() }
    #expect(fcntl(reader, F_GETFL) & O_NONBLOCK != 0)
    let (otherRead, otherWrite) = try makePipe()  // Non-blocking, as its owner wants.
    #expect(dup2(otherRead, reader) == reader)
    channel.close()
    #expect(cleaned.wait(seconds: 30))
    #expect(fcntl(reader, F_GETFL) & O_NONBLOCK != 0, "the other file was made blocking")
    for fd in [reader, writer, otherRead, otherWrite] { close(fd) }
  }

  @Test func twoChannelsOnOneDescriptorRestoreItsFlagsOnlyWhenBothAreDone() throws {
    let (reader, writer) = try blockingPipe()
    let first = IOChannel(kind: .stream, fd: writer)
    let second = IOChannel(kind: .stream, fd: writer)
    let wrote = Semaphore(value: 0)
    for channel in [first, second] {
      channel.write(data: Bytes("x".utf8), queue: .global()) { done, _, _ in
        if done { wrote.signal() }
      }
    }
    #expect(wrote.wait(timeout: .now + .seconds(30)) == .success)
    #expect(wrote.wait(timeout: .now + .seconds(30)) == .success)
    let firstGone = Latch()
    let secondGone = Latch()
    first.barrier { firstGone.open() }
    #expect(firstGone.wait(seconds: 30))
    first.close()
    // The second still uses it: still non-blocking.
    let closedFirst = Latch()
    first.barrier { closedFirst.open() }
    #expect(closedFirst.wait(seconds: 30))
    #expect(fcntl(writer, F_GETFL) & O_NONBLOCK != 0)
    second.close()
    second.barrier { secondGone.open() }
    #expect(secondGone.wait(seconds: 30))
    // Both gave it back: blocking again, as it was.
    let deadline = Deadline.now + .seconds(30)
    while fcntl(writer, F_GETFL) & O_NONBLOCK != 0 && Deadline.now < deadline { sched_yield() }
    #expect(fcntl(writer, F_GETFL) & O_NONBLOCK == 0)
    close(reader)
    close(writer)
  }

  @Test func devicesEpollRefusesAreReadAndWrittenAnyway() async throws {
    let null = open("/dev/null", O_RDWR | O_CLOEXEC)
    try #require(null >= 0)
    let cleaned = Latch()
    let channel = IOChannel(kind: .stream, fd: null) { _ in cleaned.open() }
    try await channel.write(Bytes("discarded".utf8))
    #expect(try await channel.read(length: 100).isEmpty)
    channel.close()
    #expect(cleaned.wait(seconds: 30))
    close(null)
  }

  @Test func aBarrierSubmittedAfterCloseWaitsForTheRunningRead() throws {
    let (reader, writer) = try blockingPipe()
    let cleaned = Latch()
    let channel = IOChannel(kind: .stream, fd: reader) { _ in cleaned.open() }
    channel.setLowWater(1)
    let order = Locked<[String]>([])
    let queue = Queue(label: "io.close-barrier")
    channel.read(length: 3, queue: queue) { done, _, _ in
      if done { order.withLock { $0.append("read done") } }
    }
    channel.close()
    let barrierRan = Latch()
    channel.barrier {
      order.withLock { $0.append("barrier") }
      barrierRan.open()
    }
    // The read is still waiting for its bytes: the barrier must not have run.
    let probe = Latch()
    queue.async { probe.open() }
    #expect(probe.wait(seconds: 30))
    #expect(!barrierRan.wait(seconds: 0))
    #expect(Glibc.write(writer, "abc", 3) == 3)
    #expect(barrierRan.wait(seconds: 30))
    #expect(order.value == ["read done", "barrier"])
    #expect(cleaned.wait(seconds: 30))
    close(reader)
    close(writer)
  }

  @Test func stopEndsTheRunningReadBeforeTheWaitingOnesAndCleansUpAfterThem() throws {
    let (reader, writer) = try blockingPipe()
    let order = Locked<[String]>([])
    let cleaned = Latch()
    let channel = IOChannel(kind: .stream, fd: reader) { _ in
      order.withLock { $0.append("cleanup") }
      cleaned.open()
    }
    let queue = Queue(label: "io.stop-order")
    for name in ["first", "second", "third"] {
      channel.read(length: 10, queue: queue) { done, _, error in
        if done { order.withLock { $0.append("\(name) \(error)") } }
      }
    }
    channel.close(stop: true)
    #expect(cleaned.wait(seconds: 30))
    #expect(
      order.value == [
        "first \(ECANCELED)", "second \(ECANCELED)", "third \(ECANCELED)", "cleanup",
      ])
    close(reader)
    close(writer)
  }

  @Test func withoutALowWaterMarkALongStreamArrivesAMegabyteAtATime() throws {
    let (reader, writer) = try blockingPipe()
    let channel = IOChannel(kind: .stream, fd: reader) { _ in close(reader) }
    let firstCall = Latch()
    let firstSize = Locked<Int>(0)
    channel.read(length: Int.max, queue: Queue(label: "io.default-low")) { done, data, _ in
      if !done && !firstCall.wait(seconds: 0) {
        firstSize.withLock { $0 = data.count }
        firstCall.open()
      }
    }
    // 1.5 MiB, and the writer stays open: no end of file to flush what is held.
    let payload = Bytes([UInt8](repeating: 7, count: 3 << 19))
    let writerGone = Latch()
    let writing = IOChannel(kind: .stream, fd: writer) { _ in
      close(writer)
      writerGone.open()
    }
    writing.write(data: payload, queue: .global()) { _, _, _ in }
    #expect(firstCall.wait(seconds: 30))
    #expect(firstSize.value >= 1 << 20)
    // The writer stops and gives its end back before the reader's end closes: a write to a
    // pipe with no reader would raise SIGPIPE in the test process.
    writing.close(stop: true)
    #expect(writerGone.wait(seconds: 30))
    channel.close(stop: true)
  }
}

/// Intervals and shared channels.
@Suite struct IOChannelIntervalAndSharingTests {
  @Test func aStrictIntervalHandsOverWhatArrivedBelowTheLowWaterMark() throws {
    let (reader, writer) = try blockingPipe()
    let channel = IOChannel(kind: .stream, fd: reader) { _ in close(reader) }
    channel.setLowWater(Int.max)  // Never reached: only a strict interval can deliver.
    channel.setInterval(.milliseconds(10), strict: true)
    let first = Latch()
    let seen = Locked<(Bool, [UInt8])?>(nil)
    channel.read(length: Int.max, queue: Queue(label: "io.interval")) { done, data, _ in
      guard !data.isEmpty, seen.value == nil else { return }
      seen.withLock { $0 = (done, data.array) }
      first.open()
    }
    #expect(Glibc.write(writer, "tick", 4) == 4)
    // The writer stays open: no end of file, so only the interval delivers.
    #expect(first.wait(seconds: 30))
    #expect(seen.value?.0 == false)
    #expect(seen.value?.1 == Array("tick".utf8))
    channel.close(stop: true)
    close(writer)
  }

  @Test func aChannelMadeFromAnotherSharesItsDescriptorAndHoldsBackItsCleanup() async throws {
    let fd = try temporaryFile()
    #expect(Glibc.write(fd, "shared bytes", 12) == 12)
    #expect(lseek(fd, 0, SEEK_SET) == 0)  // Random offsets count from here.
    // Both cleanups run on one serial queue: their order is the order they were submitted.
    let cleanups = Queue(label: "io.cleanups")
    let log = Locked<[String]>([])
    let bothCleaned = Latch()
    let first = IOChannel(kind: .random, fd: fd, queue: cleanups) { _ in
      log.withLock { $0.append("first cleanup") }
    }
    let second = IOChannel(kind: .random, sharing: first, queue: cleanups) { _ in
      log.withLock { $0.append("second cleanup") }
      bothCleaned.open()
    }
    #expect(try await second.read(offset: 7, length: 5).array == Array("bytes".utf8))
    second.close()
    // The first channel, and the descriptor, are untouched by the second's close.
    #expect(try await first.read(offset: 0, length: 6).array == Array("shared".utf8))
    log.withLock { $0.append("first read") }
    // As libdispatch: the cleanups wait until every channel on the descriptor is closed,
    // then run in the order the channels were made.
    first.close()
    #expect(bothCleaned.wait(seconds: 30))
    #expect(log.value == ["first read", "first cleanup", "second cleanup"])
    // A channel made from a closed one is cancelled, as in libdispatch.
    let third = IOChannel(kind: .stream, sharing: first)
    await #expect(throws: IOError(code: ECANCELED)) { try await third.read(length: 1) }
    close(fd)
  }
}

private func readThree(_ fd: Int32) -> String {
  var buffer = [UInt8](repeating: 0, count: 3)
  let count = pread(fd, &buffer, 3, 0)
  return String(decoding: buffer.prefix(Swift.max(count, 0)), as: UTF8.self)
}
