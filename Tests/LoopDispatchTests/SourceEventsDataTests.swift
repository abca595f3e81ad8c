import CLoopShims
import Glibc
import LoopDispatch
import TestSupport
import Testing

/// `Source.events` yields what the handler would read as `data` (issue 19): for an fd
/// source that value is computed on demand, and the stream once yielded the "not computed"
/// marker (`UInt.max`) instead.
@Suite struct SourceEventsDataTests {
  @Test func aPipeWithFiveBytesYieldsFive() async throws {
    var fds: [Int32] = [0, 0]
    #expect(cls_pipe2(&fds, O_CLOEXEC) == 0)
    let (readEnd, writeEnd) = (fds[0], fds[1])
    defer { close(writeEnd) }
    let source = try ReadSource(fd: readEnd, queue: Queue(label: "events-pipe"))
    let closed = Semaphore(value: 0)
    // Chained by `events` before it finishes the stream: the descriptor is closed only
    // once the source's registration is gone.
    source.setCancelHandler {
      close(readEnd)
      closed.signal()
    }
    #expect(write(writeEnd, "hello", 5) == 5)
    var first: UInt?
    for await value in source.events {
      first = value
      break
    }
    #expect(first == 5)
    #expect(source.isCancelled)
    try await closed.acquire()
  }
}
