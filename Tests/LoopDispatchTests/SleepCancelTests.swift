import MainLoop
import TestSupport
import Testing

@testable import LoopDispatch

/// `Queue.sleep(until:)` cancelled at each point of its life (issue 19): a cancelled sleep
/// leaves no timer on its loop, whichever of the cancel and the timer's start came first.
/// The sleeps keep their timers on a virtual-time loop that nothing else uses, so its
/// pending-timer count is exact (the service loop's is shared with every test running in
/// parallel); the loop is driven once, at the end, to run the timer removals posted to it.
@Suite struct SleepCancelTests {
  /// Sleeps one hour on `loop`, in a task that is already cancelled when it calls `sleep`.
  private func preCancelledSleep(on loop: EventLoop) -> Task<Void, any Error> {
    Task {
      withUnsafeCurrentTask { $0?.cancel() }
      try await Queue.global().sleep(until: loop.now + .seconds(3_600), on: loop)
    }
  }

  /// 100 tasks cancelled before they sleep: each throws at once and no timer stays (before
  /// the fix each left its one-hour timer, holding the continuation's box, on the loop).
  @Test func preCancelledSleepsLeaveNoTimer() async {
    let loop = EventLoop(name: "sleep-precancelled", clock: .virtual())
    let tasks = (0..<100).map { _ in preCancelledSleep(on: loop) }
    for task in tasks {
      await #expect(throws: CancellationError.self) { try await task.value }
    }
    loop.advance(by: .zero)
    #expect(loop.pendingTimerCount == 0)
  }

  /// A task cancelled between the start of its timer and its recording (forced: the task
  /// cancels itself there): it throws, and the timer is cancelled anyway (before the fix the
  /// cancellation handler found no timer to cancel).
  @Test func aCancelWhileTheTimerStartsLeavesNoTimer() async {
    let loop = EventLoop(name: "sleep-starting", clock: .virtual())
    let task = Task {
      try await Queue.global().sleep(
        until: loop.now + .seconds(3_600), on: loop,
        afterTimerStarted: { withUnsafeCurrentTask { $0?.cancel() } })
    }
    await #expect(throws: CancellationError.self) { try await task.value }
    loop.advance(by: .zero)
    #expect(loop.pendingTimerCount == 0)
  }

  /// A task cancelled while it sleeps: it throws before the deadline, and the timer goes.
  @Test func aCancelMidSleepLeavesNoTimer() async throws {
    let loop = EventLoop(name: "sleep-mid", clock: .virtual())
    let started = Semaphore(value: 0)
    let task = Task {
      try await Queue.global().sleep(
        until: loop.now + .seconds(3_600), on: loop, afterTimerStarted: { started.signal() })
    }
    try await started.acquire()
    #expect(loop.pendingTimerCount == 1)
    task.cancel()
    await #expect(throws: CancellationError.self) { try await task.value }
    loop.advance(by: .zero)
    #expect(loop.pendingTimerCount == 0)
  }

  /// An uncancelled sleep on the virtual loop wakes when the loop's clock reaches its
  /// deadline, not before, and leaves no timer.
  @Test func aSleepWakesAtItsDeadline() async throws {
    let loop = EventLoop(name: "sleep-wakes", clock: .virtual())
    let deadline = loop.now + .seconds(3_600)
    let started = Semaphore(value: 0)
    let task = Task {
      try await Queue.global().sleep(
        until: deadline, on: loop, afterTimerStarted: { started.signal() })
    }
    try await started.acquire()
    // One pool thread drives the loop (advancing binds it to its thread).
    let firesBeforeDeadline = try await Queue.global().run { () -> UInt64 in
      loop.advance(to: deadline - .nanoseconds(1))
      let fires = loop.timerFireCount
      loop.advance(to: deadline)
      return fires
    }
    #expect(firesBeforeDeadline == 0)
    try await task.value
    #expect(loop.timerFireCount == 1)
    #expect(loop.pendingTimerCount == 0)
  }
}
