import CLoopShims
import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

@Suite struct SourceSmokeTests {
  @Test func pipeReadSourceSeesTheBytesWritten() throws {
    var fds: [Int32] = [0, 0]
    #expect(cls_pipe2(&fds, O_CLOEXEC) == 0)
    let (readEnd, writeEnd) = (fds[0], fds[1])
    let queue = Queue(label: "reader")
    let source = try ReadSource(fd: readEnd, queue: queue)
    let seen = Locked([UInt]())
    let got = Latch()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      let available = source.data
      var buffer = [UInt8](repeating: 0, count: 64)
      let n = read(readEnd, &buffer, 64)
      seen.withLock { $0.append(available) }
      if n > 0 { got.open() }
    }
    source.setCancelHandler {
      close(readEnd)
      cancelled.open()
    }
    source.activate()
    #expect(write(writeEnd, "hello", 5) == 5)
    #expect(got.wait())
    source.cancel()
    #expect(cancelled.wait())
    close(writeEnd)
    #expect(seen.value.first == 5)
  }
}
