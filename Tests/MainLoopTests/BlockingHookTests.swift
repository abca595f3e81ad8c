import Glibc
import Synchronization
import Testing

@_spi(LoopDispatchRuntime) @testable import MainLoop

/// Calls of the hook below (any loop of this process that polls while it is installed).
private let hookCalls = Atomic<Int>(0)

private func countHookCall() { hookCalls.wrappingAdd(1, ordering: .relaxed) }

/// `BlockingHook`: an event loop calls the installed function on its own thread before a
/// poll that may block (LoopDispatch pays its deferred pool wake-ups there).
@Suite struct BlockingHookTests {
  /// An idle loop goes to sleep in its poll, and calls the hook first. (Without the call in
  /// `EventLoop.run`, the count never moves.)
  @Test func anIdleLoopCallsTheHookBeforeItSleeps() {
    BlockingHook.install { countHookCall() }
    let before = hookCalls.load(ordering: .relaxed)
    withLoopThread { _ in
      var waited = 0
      while hookCalls.load(ordering: .relaxed) == before && waited < 10_000 {
        _ = poll(nil, 0, 1)
        waited += 1
      }
    }
    #expect(hookCalls.load(ordering: .relaxed) > before, "the loop slept without the hook")
  }
}
