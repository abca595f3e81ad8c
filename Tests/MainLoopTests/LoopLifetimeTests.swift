import Synchronization
import TestSupport
import Testing

@testable import MainLoop

/// A loop that nobody references any more is deinitialised even with timers pending: its
/// timers do not keep it alive, their closures are released with it, and cancelling such a
/// timer afterwards does nothing.
@Suite struct LoopLifetimeTests {
  /// Opens `released` when it is deinitialised: captured by a timer's closure, it shows when
  /// the loop let go of that closure.
  final class Canary: Sendable {
    let released: Latch
    init(_ released: Latch) { self.released = released }
    func touch() {}
    deinit { released.open() }
  }

  /// What a test keeps once the loop's last reference is gone.
  struct Leftovers {
    weak var loop: EventLoop?
    var timers: [LoopTimer]
  }

  /// Makes a loop bound to this thread, schedules far-future timers on it with `schedule`,
  /// and returns without keeping a strong reference to the loop.
  private func scheduleAndDrop(
    _ name: String, _ schedule: (EventLoop, Canary) -> [LoopTimer]
  ) -> (Leftovers, Latch) {
    let released = Latch()
    let loop = boundLoop(name)
    let timers = schedule(loop, Canary(released))
    #expect(loop.pendingTimerCount == timers.count)
    return (Leftovers(loop: loop, timers: timers), released)
  }

  private func expectGoneAndCancelIsHarmless(_ leftovers: Leftovers, _ released: Latch) {
    #expect(leftovers.loop == nil)
    // The loop's deinit released the closures (synchronously, on this thread).
    #expect(released.wait(seconds: 0))
    for timer in leftovers.timers {
      #expect(timer.loop == nil)
      timer.cancel()  // A no-op: there is no loop to remove it from.
      timer.cancel()
      #expect(timer.isCancelled)
    }
  }

  @Test func aLoopWithATimerScheduledOnItsThreadIsDeinitialised() {
    let (leftovers, released) = scheduleAndDrop("lifetime-heap") { loop, canary in
      let oneShot = loop.schedule(after: .seconds(3600)) { canary.touch() }
      let repeating = loop.scheduleRepeating(every: .seconds(3600)) { canary.touch() }
      return [oneShot, repeating]
    }
    expectGoneAndCancelIsHarmless(leftovers, released)
  }

  /// Timers scheduled from another thread wait on the loop's pending-insertion stack, which
  /// retains them, until the loop's next turn; the loop here never turns again.
  @Test func aLoopWithATimerScheduledFromAnotherThreadIsDeinitialised() {
    let (leftovers, released) = scheduleAndDrop("lifetime-pending") { loop, canary in
      let made = Locked<[LoopTimer]>([])
      let thread = NativeThread.spawn(name: "lifetime-scheduler") {
        let oneShot = loop.schedule(after: .seconds(3600)) { canary.touch() }
        let repeating = loop.scheduleRepeating(every: .seconds(3600)) { canary.touch() }
        made.withLock { $0 = [oneShot, repeating] }
      }!
      thread.join()
      #expect(loop.pendingInsertions.load(ordering: .acquiring) != 0)
      return made.value
    }
    expectGoneAndCancelIsHarmless(leftovers, released)
  }

  /// A loop never run: every schedule goes through the pending-insertion stack.
  @Test func anUnboundLoopWithATimerIsDeinitialised() {
    let released = Latch()
    weak var weakLoop: EventLoop?
    var timers: [LoopTimer] = []
    do {
      let loop = EventLoop(name: "lifetime-unbound")
      weakLoop = loop
      let canary = Canary(released)
      timers.append(loop.schedule(at: .distantFuture) { canary.touch() })
    }
    expectGoneAndCancelIsHarmless(Leftovers(loop: weakLoop, timers: timers), released)
  }

  /// `run(until:)` adds a do-nothing timer for its deadline; a stopped run must not leave it
  /// holding the loop.
  @Test func aLoopAfterABoundedRunIsDeinitialised() {
    weak var weakLoop: EventLoop?
    do {
      let loop = EventLoop(name: "lifetime-run")
      weakLoop = loop
      loop.stop()  // Sticky: the run returns after one turn, long before its deadline.
      #expect(!loop.run(until: .now + .seconds(3600)))
      #expect(loop.run(until: .now))
      #expect(loop.pendingTimerCount == 0)
    }
    #expect(weakLoop == nil)
  }

  /// A cancel posted from another thread (the loop not running) is released with the loop.
  @Test func aCancelPostedToALoopThatNeverRunsAgainDoesNotKeepIt() {
    let (leftovers, released) = scheduleAndDrop("lifetime-posted-cancel") { loop, canary in
      let timer = loop.schedule(after: .seconds(3600)) { canary.touch() }
      let thread = NativeThread.spawn(name: "lifetime-canceller") { timer.cancel() }!
      thread.join()
      return [timer]
    }
    expectGoneAndCancelIsHarmless(leftovers, released)
  }
}
