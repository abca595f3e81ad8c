import Glibc
import LoopDispatch
import TestSupport
import Testing

/// Channels and one-shot calls sharing one descriptor (`DescriptorEntry`): the order their
/// operations reach it in, barriers across channels, and channels made from others. Every
/// wait has a deadline; no sleeps.
@Suite struct IOChannelSharingTests {
  @Test func manyOneShotWritesReachAFileInTheOrderTheyWereCalled() throws {
    let fd = try temporaryFile()
    defer { close(fd) }
    // As libdispatch's dispatch_read2 test: hundreds of small writes, which reached the file
    // out of order when each ran on its own queue.
    let pieces = (0..<320).map { index in
      Bytes((0..<(32 + index % 7)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) })
    }
    let done = Semaphore(value: 0)
    let errors = Locked<[Int32]>([])
    for piece in pieces {
      IOChannel.write(to: fd, data: piece, queue: .global()) { _, error in
        errors.withLock { $0.append(error) }
        done.signal()
      }
    }
    for _ in pieces { #expect(done.wait(timeout: .now + .seconds(30)) == .success) }
    #expect(errors.value == Array(repeating: 0, count: pieces.count))
    let expected = pieces.flatMap(\.array)
    #expect(contents(of: fd, count: expected.count + 1) == expected)
  }

  @Test func aStreamChannelOnAFileReadsThenWritesOneAfterTheOther() throws {
    let fd = try temporaryFile()
    defer { close(fd) }
    let size = 3 << 20
    let original = (0..<size).map { UInt8(truncatingIfNeeded: $0 % 251) }
    #expect(pwrite(fd, original, size, 0) == size)
    let cleaned = Latch()
    let channel = IOChannel(kind: .stream, fd: fd) { _ in cleaned.open() }
    // Submitted back to back from one thread: the write must wait for the read (they move
    // one file position).
    let read = Locked(Bytes())
    let finished = Semaphore(value: 0)
    let handlers = Queue(label: "io.stream-file")
    channel.read(length: size, queue: handlers) { done, data, _ in
      read.withLock { $0 = $0 + data }
      if done { finished.signal() }
    }
    channel.write(data: pieced(0x5A, count: 1 << 20), queue: handlers) {
      done, _, _ in
      if done { finished.signal() }
    }
    #expect(finished.wait(timeout: .now + .seconds(30)) == .success)
    #expect(finished.wait(timeout: .now + .seconds(30)) == .success)
    channel.close()
    #expect(cleaned.wait(seconds: 30))
    #expect(read.value.array == original)
    let after = contents(of: fd, count: size + (1 << 20) + 1)
    #expect(after.count == size + (1 << 20))
    #expect(after.prefix(size).elementsEqual(original))
    #expect(after.dropFirst(size).allSatisfy { $0 == 0x5A })
  }

  @Test func twoChannelsWritingOneSocketNeverInterleaveTheirBytes() throws {
    let (ours, theirs) = try socketPair()
    defer { close(theirs) }
    let size = scaled(1 << 20)
    let drained = Locked<[UInt8]>([])
    let reader = startThread { drained.withLock { $0 = readAll(theirs, count: 2 * size + 1) } }
    #expect(writeAAndBOnTwoChannels(fd: ours, size: size))
    // The reader stops at the end of the stream, whatever arrived: no hang on a miscount.
    shutdown(ours, Int32(SHUT_WR))
    pthread_join(reader, nil)
    close(ours)
    let bytes = drained.value
    #expect(bytes.count == 2 * size)
    #expect(runs(in: bytes) == 2)
  }

  @Test func twoChannelsWritingOneFileNeverInterleaveTheirBytes() throws {
    let fd = try temporaryFile()
    defer { close(fd) }
    let size = scaled(3 << 20)
    #expect(writeAAndBOnTwoChannels(fd: fd, size: size))
    let bytes = contents(of: fd, count: 2 * size + 1)
    #expect(bytes.count == 2 * size)
    #expect(runs(in: bytes) == 2)
  }

  @Test func aBarrierOnOneChannelWaitsForAnotherChannelsWrite() throws {
    let (ours, theirs) = try socketPair()
    defer { close(theirs) }
    let size = scaled(4 << 20)
    let cleaned = Semaphore(value: 0)
    let writer = IOChannel(kind: .stream, fd: ours) { _ in cleaned.signal() }
    let other = IOChannel(kind: .stream, fd: ours) { _ in cleaned.signal() }
    let order = Locked<[String]>([])
    let barrierRan = Latch()
    writer.write(data: Bytes(repeatElement(1 as UInt8, count: size)), queue: .global()) {
      done, _, _ in
      if done { order.withLock { $0.append("write done") } }
    }
    other.barrier {
      order.withLock { $0.append("barrier") }
      barrierRan.open()
    }
    // The write cannot finish before the socket is drained.
    let reader = startThread { _ = readAll(theirs, count: size) }
    #expect(barrierRan.wait(seconds: 30))
    pthread_join(reader, nil)
    #expect(order.value == ["write done", "barrier"])
    writer.close()
    other.close()
    // The descriptor is the caller's again only once the cleanups have run.
    #expect(cleaned.wait(timeout: .now + .seconds(30)) == .success)
    #expect(cleaned.wait(timeout: .now + .seconds(30)) == .success)
    close(ours)
  }

  @Test func aRandomChannelMadeFromAStreamOneCountsFromThePositionThen() async throws {
    let fd = try temporaryFile()
    defer { close(fd) }
    #expect(pwrite(fd, "0123456789", 10, 0) == 10)
    #expect(lseek(fd, 0, SEEK_SET) == 0)
    let cleaned = Latch()
    let stream = IOChannel(kind: .stream, fd: fd)
    #expect(try await stream.read(length: 4).array == Array("0123".utf8))
    let random = IOChannel(kind: .random, sharing: stream) { _ in cleaned.open() }
    #expect(try await random.read(offset: 0, length: 3).array == Array("456".utf8))
    random.close()
    stream.close()
    #expect(cleaned.wait(seconds: 30))
  }

  @Test func aChannelMadeFromAPathChannelHasADescriptorOfItsOwn() async throws {
    let fd = try temporaryFile()
    let path = try descriptorPath(fd)
    #expect(pwrite(fd, "path bytes", 10, 0) == 10)
    close(fd)
    defer { unlink(path) }
    let firstCleaned = Latch()
    let first = try #require(
      IOChannel(kind: .random, path: path, flags: O_RDONLY) { _ in firstCleaned.open() })
    #expect(try await first.read(offset: 0, length: 4).array == Array("path".utf8))
    let second = IOChannel(kind: .random, sharing: first)
    #expect(try await second.read(offset: 5, length: 5).array == Array("bytes".utf8))
    let (firstFD, secondFD) = (first.fileDescriptor, second.fileDescriptor)
    #expect(firstFD >= 0 && secondFD >= 0 && firstFD != secondFD)
    // The first closes its descriptor; a new file likely takes the number. The second still
    // reads its own path.
    first.close()
    #expect(firstCleaned.wait(seconds: 30))
    let reused = try temporaryFile()
    defer { close(reused) }
    #expect(pwrite(reused, "other file", 10, 0) == 10)
    #expect(try await second.read(offset: 0, length: 10).array == Array("path bytes".utf8))
    second.close()
  }

  @Test func aNumberClosedUnderAChannelAndReusedGetsAnEntryOfItsOwn() async throws {
    let (ours, theirs) = try socketPair()
    defer { close(theirs) }
    let stale = IOChannel(kind: .stream, fd: ours)
    #expect(Glibc.write(theirs, "x", 1) == 1)
    #expect(try await stale.read(length: 1).array == Array("x".utf8))
    // Against the contract, the number is made to name a file while `stale` still uses it.
    let file = try temporaryFile()
    defer { close(file) }
    #expect(dup2(file, ours) == ours)
    let cleaned = Semaphore(value: 0)
    let fresh = IOChannel(kind: .random, fd: ours) { _ in cleaned.signal() }
    try await fresh.write(offset: 0, Bytes(Array("abc".utf8)))
    #expect(contents(of: file, count: 4) == Array("abc".utf8))
    fresh.close()
    #expect(cleaned.wait(timeout: .now + .seconds(30)) == .success)
    stale.close()
    close(ours)
  }

  @Test func aPathChannelOnAFIFOWithNoWriterOpensWithoutWaitingForOne() throws {
    var template = Array("/tmp/iofifo-XXXXXX".utf8CString)
    let directory = try #require(
      template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }.map {
        String(cString: $0)
      })
    let path = directory + "/fifo"
    #expect(mkfifo(path, 0o600) == 0)
    defer {
      unlink(path)
      rmdir(directory)
    }
    let channel = try #require(IOChannel(kind: .stream, path: path, flags: O_RDONLY))
    let seen = Locked<Int32>(-2)
    let ran = Latch()
    channel.barrier {
      seen.withLock { $0 = channel.fileDescriptor }
      ran.open()
    }
    #expect(ran.wait(seconds: 30))
    #expect(seen.value >= 0)
    channel.close(stop: true)
  }
}

/// Writes `size` bytes of "A" on one new channel over `fd` and `size` of "B" on another, each
/// closed when its write is done; true once both cleanups have run (within 30 s each).
private func writeAAndBOnTwoChannels(fd: Int32, size: Int) -> Bool {
  let cleaned = Semaphore(value: 0)
  for byte in [UInt8(ascii: "A"), UInt8(ascii: "B")] {
    let channel = IOChannel(kind: .stream, fd: fd) { _ in cleaned.signal() }
    channel.write(data: pieced(byte, count: size), queue: .global()) { done, _, _ in
      if done { channel.close() }
    }
  }
  return (0..<2).allSatisfy { _ in cleaned.wait(timeout: .now + .seconds(30)) == .success }
}

private func socketPair() throws -> (Int32, Int32) {
  var ends: [Int32] = [-1, -1]
  guard
    socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0
  else {
    throw SetupFailed(call: "socketpair")
  }
  return (ends[0], ends[1])
}

/// Reads `count` bytes from a blocking descriptor (fewer at its end).
private func readAll(_ fd: Int32, count: Int) -> [UInt8] {
  var bytes = [UInt8](repeating: 0, count: count)
  var got = 0
  while got < count {
    let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + got, count - got) }
    if n <= 0 { break }
    got += n
  }
  return Array(bytes.prefix(got))
}

/// Up to `count` bytes of a file from its start.
private func contents(of fd: Int32, count: Int) -> [UInt8] {
  var bytes = [UInt8](repeating: 0, count: count)
  let n = pread(fd, &bytes, count, 0)
  return Array(bytes.prefix(Swift.max(n, 0)))
}

/// `count` bytes of `byte` in many 4 KiB regions (as a data object built by concatenation):
/// a write moves one region per turn, so two writes left to run side by side interleave.
private func pieced(_ byte: UInt8, count: Int) -> Bytes {
  let piece = Bytes(repeatElement(byte, count: 4096))
  var bytes = Bytes()
  for _ in 0..<(count / 4096) { bytes = bytes + piece }
  // The rest, so that a size that is no multiple of 4 KiB (a scaled one) is kept exactly.
  return bytes + Bytes(repeatElement(byte, count: count % 4096))
}

/// How many runs of equal bytes `bytes` has.
private func runs(in bytes: [UInt8]) -> Int {
  guard var last = bytes.first else { return 0 }
  var count = 1
  for byte in bytes.dropFirst() where byte != last {
    count += 1
    last = byte
  }
  return count
}
