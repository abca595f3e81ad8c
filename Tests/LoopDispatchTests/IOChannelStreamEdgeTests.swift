import CLoopShims
import Glibc
import LoopDispatch
import TestSupport
import Testing

/// `IOChannel` on streams at the edges libdispatch defines: transfers of no bytes, a read
/// error after some bytes, and a one-shot read of a pipe that holds less than asked. (Tests/CDiff/diff_io_edges.c compares the same cases with
/// libdispatch through the C API.) Every wait has a deadline; no sleeps.
@Suite struct IOChannelStreamEdgeTests {
  @Test func aReadOfNoBytesAndAWriteOfNoneAreDoneAtOnceAndHoldNothingBack() throws {
    var pair: [Int32] = [-1, -1]
    #expect(
      socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0
    )
    defer {
      close(pair[0])
      close(pair[1])
    }
    let calls = Locked<[String]>([])
    let got = Semaphore(value: 0)
    // The descriptor is closed (deferred) only after the cleanup: the channel gives its flags
    // back then, and a number closed earlier may belong to another test by that time.
    let cleaned = Latch()
    let channel = IOChannel(kind: .stream, fd: pair[0]) { _ in cleaned.open() }
    let queue = Queue(label: "io.empty")
    channel.read(length: 0, queue: queue) { done, data, error in
      calls.withLock { $0.append("read 0: \(done) \(data.count) \(error)") }
      got.signal()
    }
    channel.write(data: Bytes(), queue: queue) { done, remaining, error in
      calls.withLock { $0.append("write empty: \(done) \(remaining.count) \(error)") }
      got.signal()
    }
    #expect(got.wait(timeout: .now + .seconds(30)) == .success)
    #expect(got.wait(timeout: .now + .seconds(30)) == .success)
    // The operations after them run.
    #expect(Glibc.write(pair[1], "xy", 2) == 2)
    channel.read(length: 2, queue: queue) { done, data, error in
      let text = String(decoding: data.array, as: UTF8.self)
      calls.withLock { $0.append("read 2: \(done) \(text) \(error)") }
      got.signal()
    }
    #expect(got.wait(timeout: .now + .seconds(30)) == .success)
    #expect(
      calls.value.sorted() == ["read 0: true 0 0", "read 2: true xy 0", "write empty: true 0 0"])
    channel.close()
    #expect(cleaned.wait(seconds: 30))
  }

  @Test func aReadErrorAfterSomeBytesHandsThemOverFirstThenTheErrorAlone() throws {
    // The peer wrote "abc" and closed with bytes it had not read: a read gets "abc", then
    // ECONNRESET.
    var pair: [Int32] = [-1, -1]
    #expect(
      socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0
    )
    defer { close(pair[0]) }
    #expect(Glibc.write(pair[0], "unread", 6) == 6)
    #expect(Glibc.write(pair[1], "abc", 3) == 3)
    close(pair[1])
    let calls = Locked<[(Bool, String, Int32)]>([])
    let ended = Latch()
    let cleaned = Latch()  // Closed (deferred) only after the cleanup, as above.
    let channel = IOChannel(kind: .stream, fd: pair[0]) { _ in cleaned.open() }
    channel.read(length: Int.max, queue: Queue(label: "io.reset")) { done, data, error in
      calls.withLock { $0.append((done, String(decoding: data.array, as: UTF8.self), error)) }
      if done { ended.open() }
    }
    #expect(ended.wait(seconds: 30))
    let seen = calls.value
    #expect(seen.map(\.0) == [false, true])
    #expect(seen.map(\.1) == ["abc", ""])
    #expect(seen.map(\.2) == [0, ECONNRESET])
    channel.close()
    #expect(cleaned.wait(seconds: 30))
  }

  @Test func aOneShotReadOfAPipeEndsWithWhatIsThereOnceItHasSome() throws {
    var ends: [Int32] = [-1, -1]
    #expect(cls_pipe2(&ends, O_CLOEXEC) == 0)
    defer {
      close(ends[0])
      close(ends[1])
    }
    #expect(Glibc.write(ends[1], "aaaa", 4) == 4)
    #expect(Glibc.write(ends[1], "bbbb", 4) == 4)
    let result = Locked<(String, Int32)?>(nil)
    let ended = Latch()
    IOChannel.read(from: ends[0], length: 96, queue: Queue(label: "io.oneshot")) { data, error in
      result.withLock { $0 = (String(decoding: data.array, as: UTF8.self), error) }
      ended.open()
    }
    #expect(ended.wait(seconds: 30))
    #expect(result.value?.0 == "aaaabbbb")
    #expect(result.value?.1 == 0)
  }
}
