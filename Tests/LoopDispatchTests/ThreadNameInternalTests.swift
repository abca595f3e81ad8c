import CLoopShims
import Glibc
import TestSupport
import Testing

@testable import LoopDispatch

/// The runtime's own queues (an I/O channel's) leave a worker's name alone: a rename costs a
/// `prctl` on every hop through them.
@Suite struct ThreadNameInternalTests {
  @Test func aQueueThatDoesNotNameThreadsLeavesTheWorkersNameAsItWas() {
    let runtimeOwn = Queue(label: "names.internal")
    runtimeOwn.namesThreads = false
    let named = Queue(label: "names.outer", target: Queue.global())
    let seen = Locked<[String]>([])
    let done = Latch()
    // A named queue's item submits to the internal queue, which the same worker then drains
    // (run-next): it must still show the named queue's label, never the internal one's.
    named.async {
      seen.withLock { $0.append(threadName()) }
      runtimeOwn.async {
        seen.withLock { $0.append(threadName()) }
        done.open()
      }
    }
    #expect(done.wait(seconds: 30))
    #expect(seen.value.first == "names.outer")
    #expect(!seen.value.contains("names.internal"))
  }
}

private func threadName() -> String {
  var buffer = [CChar](repeating: 0, count: 17)
  _ = buffer.withUnsafeMutableBufferPointer { cls_get_thread_name($0.baseAddress!) }
  return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
