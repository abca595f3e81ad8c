import LoopDispatch
import TestSupport
import Testing

@Suite struct SourceLifetimeTests {
  /// A handler that captures its source `unowned` stays valid while it runs, even when the
  /// last outside reference is dropped meanwhile (the delivery holds the source).
  @Test func droppingTheSourceWhileItsHandlerRunsIsSafe() {
    let queue = Queue(label: "lifetime")
    let inside = Latch()
    let release = Latch()
    let finished = Latch()
    let seen = Shared<UInt>(0)  // Written by the handler, read after `finished`.
    do {
      let source = DataSource(merge: .add, queue: queue)
      source.setEventHandler { [unowned source] in
        inside.open()
        _ = release.wait()
        seen.value = source.data  // The source must still be alive here.
        finished.open()
      }
      source.activate()
      source.post(7)
      #expect(inside.wait())
    }  // The test's reference is gone while the handler is blocked.
    release.open()
    #expect(finished.wait())
    #expect(seen.value == 7)
    queue.sync {}
  }
}
