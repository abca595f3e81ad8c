import Synchronization
import TestSupport
import Testing

@testable import MainLoop

/// Timers in virtual time: the test thread drives the loop (`advance`, `stall`) and the clock
/// moves only when it says so, so every expectation here is exact: no wall-clock windows.
@Suite struct VirtualTimeTests {
  let start = LoopClock.virtualStart

  /// A virtual-time loop, already bound to the calling thread.
  private func virtualLoop(_ name: String) -> EventLoop {
    let loop = EventLoop(name: name, clock: .virtual())
    loop.advance(by: .zero)
    #expect(loop.isInLoopThread && loop.now == start)
    return loop
  }

  private func at(_ milliseconds: Int) -> Deadline { start + .milliseconds(milliseconds) }

  @Test func timersFireInDeadlineOrderTiesInSchedulingOrderEachAtItsDeadline() {
    let loop = virtualLoop("v-order")
    let fires = LoopConfined([String]())
    @Sendable func record(_ label: String) -> @Sendable () -> Void {
      let base = start
      return {
        fires.value.append("\(label)@\((loop.now - base).saturatingNanoseconds / 1_000_000)")
      }
    }
    loop.schedule(at: at(30), record("d"))
    loop.schedule(at: at(10), record("a"))
    loop.schedule(at: at(20), record("b"))
    loop.schedule(at: at(20), record("c"))  // A tie: after b, scheduled before it.
    // Scheduled from another thread: they reach the heap through the pending-insertion
    // stack, in their thread's order, after the ties already there.
    let thread = NativeThread.spawn(name: "v-order-scheduler") {
      loop.schedule(at: at(20), record("c2"))
      loop.schedule(at: at(20), record("c3"))
    }!
    thread.join()
    loop.advance(to: at(19))
    #expect(fires.value == ["a@10"])
    #expect(loop.now == at(19))
    loop.advance(by: .milliseconds(100))
    #expect(fires.value == ["a@10", "b@20", "c@20", "c2@20", "c3@20", "d@30"])
    #expect(loop.now == at(119))
    #expect(loop.timerFireCount == 6)
    #expect(expectClean(loop))
  }

  /// The coalescing window applies in virtual time too: the simulated descriptor is armed by
  /// the real rule. A timer 5 µs after an expiry fires at the window's end, never earlier.
  @Test func theCoalescingWindowAppliesInVirtualTime() {
    let loop = virtualLoop("v-coalesce")
    let window = Duration.nanoseconds(Int64(EventLoop.timerCoalescingNanoseconds))
    let firedAt = LoopConfined([Deadline]())
    loop.schedule(at: at(1)) {
      firedAt.value.append(loop.now)
      loop.schedule(at: at(1) + .microseconds(5)) { firedAt.value.append(loop.now) }
    }
    loop.advance(by: .milliseconds(2))
    #expect(firedAt.value == [at(1), at(1) + window])
  }

  @Test func anIdleRepeatingTimerAdvancedTenPeriodsFiresAtEachSlot() {
    let loop = virtualLoop("v-repeat-idle")
    let interval = Duration.milliseconds(10)
    let fires = LoopConfined([Deadline]())
    let timer = loop.scheduleRepeating(every: interval) { fires.value.append(loop.now) }
    loop.advance(by: interval * 10)
    #expect(fires.value == (1...10).map { start + interval * $0 })
    #expect(timer.deadline == (start + interval * 11).uptimeNanoseconds)
    timer.cancel()
    #expect(expectClean(loop))
  }

  /// A loop held up for ten periods fires the repeating timer once, then keeps its slots:
  /// the missed ones are skipped, not bunched.
  @Test func aStalledLoopSkipsTheMissedPeriodsOfARepeatingTimer() {
    let loop = virtualLoop("v-repeat-missed")
    let interval = Duration.milliseconds(10)
    let fires = LoopConfined([Deadline]())
    let timer = loop.scheduleRepeating(every: interval) { fires.value.append(loop.now) }
    loop.stall(for: interval * 10 + .milliseconds(5))  // Busy until 105 ms.
    loop.advance(by: .zero)
    #expect(fires.value == [at(105)])
    #expect(timer.deadline == at(110).uptimeNanoseconds)
    loop.advance(to: at(130))
    #expect(fires.value == [at(105), at(110), at(120), at(130)])
    timer.cancel()
    #expect(expectClean(loop))
  }

  /// A handler slower than its interval: its next slot (set before it ran) has passed when it
  /// returns, so it fires again at once, in the next pass of the same expiry; after four
  /// passes the loop polls and runs posted work before it fires again.
  @Test func aRepeatingTimerSlowerThanItsIntervalLetsPostsRunAfterFourPasses() {
    let loop = virtualLoop("v-repeat-slow")
    let log = LoopConfined([String]())
    let base = start
    let milliseconds: @Sendable () -> Int64 = {
      (loop.now - base).saturatingNanoseconds / 1_000_000
    }
    let timer = loop.scheduleRepeating(every: .milliseconds(10)) {
      log.value.append("fire@\(milliseconds())")
      if log.value.count == 1 { loop.execute { log.value.append("post@\(milliseconds())") } }
      loop.stall(for: .milliseconds(25))
    }
    loop.advance(to: at(10))
    #expect(log.value == ["fire@10", "fire@35", "fire@60", "fire@85", "post@110"])
    #expect(timer.deadline == at(90).uptimeNanoseconds)  // The first slot after 85 ms.
    #expect(loop.now == at(110))  // Handlers' time counts: the clock is past the target.
    timer.cancel()
    #expect(expectClean(loop))
  }

  @Test func aTimerCancelledByAnotherDueAtTheSameInstantDoesNotRun() {
    let loop = virtualLoop("v-cancel-tie")
    final class Token: Sendable {}
    weak var weakToken: Token?
    let ran = LoopConfined([String]())
    let victim = LoopConfined<LoopTimer?>(nil)
    // The canceller is scheduled first, so it runs first at the shared instant.
    loop.schedule(at: at(10)) {
      ran.value.append("canceller")
      victim.value?.cancel()
    }
    do {
      let token = Token()
      weakToken = token
      victim.value = loop.schedule(at: at(10)) {
        _ = token
        ran.value.append("victim")
      }
    }
    // A repeating victim too, due at the same instant.
    let repeating = loop.scheduleRepeating(every: .milliseconds(10)) { ran.value.append("rep") }
    loop.schedule(at: at(10)) { repeating.cancel() }
    #expect(weakToken != nil)
    loop.advance(by: .milliseconds(50))
    // "rep" was inserted before its canceller, so it ran once at 10 ms; never again.
    #expect(ran.value == ["canceller", "rep"])
    #expect(weakToken == nil)  // Released by the cancel, on the loop thread.
    #expect(expectClean(loop))
  }

  @Test func aCancelFromAnotherThreadTakesEffectAtTheNextStep() {
    let loop = virtualLoop("v-cancel-thread")
    let ran = LoopConfined(false)
    let timer = loop.schedule(at: at(10)) { ran.value = true }
    let thread = NativeThread.spawn(name: "v-canceller") { timer.cancel() }!
    thread.join()
    #expect(loop.pendingTimerCount == 1)  // The removal is posted, not yet run.
    loop.advance(by: .milliseconds(20))
    #expect(!ran.value)
    #expect(expectClean(loop))
    #expect(loop.wakeupCount == 0)  // A virtual loop is never woken: it never sleeps.
  }

  /// Rescheduling is cancel-and-schedule: earlier from another timer's handler, later from
  /// its own; a timer scheduled from a handler for "now" runs in the same step.
  @Test func reschedulingEarlierLaterAndForNow() {
    let loop = virtualLoop("v-reschedule")
    let fires = LoopConfined([String]())
    let current = LoopConfined<LoopTimer?>(nil)
    @Sendable func arm(_ deadline: Deadline, _ label: String) {
      current.value = loop.schedule(at: deadline) {
        fires.value.append("\(label)@\(loop.now == deadline ? "deadline" : "\(loop.now)")")
        if label == "earlier" {
          arm(self.at(60), "later")  // Rescheduled by its own handler.
          loop.schedule(at: loop.now) { fires.value.append("now") }
        }
      }
    }
    arm(at(50), "original")
    loop.schedule(at: at(10)) {
      current.value?.cancel()
      arm(self.at(20), "earlier")
    }
    loop.advance(by: .milliseconds(55))
    #expect(fires.value == ["earlier@deadline", "now"])
    loop.advance(by: .milliseconds(10))
    #expect(fires.value == ["earlier@deadline", "now", "later@deadline"])
    #expect(expectClean(loop))
  }

  @Test func postedWorkRunsInTheStepAndSchedulingAfterUsesTheVirtualClock() {
    let loop = virtualLoop("v-posts")
    let log = LoopConfined([String]())
    loop.execute {
      log.value.append("post")
      loop.schedule(after: .milliseconds(5)) { log.value.append("timer@\(loop.now == self.at(5))") }
      loop.execute { log.value.append("post from post") }
    }
    loop.advance(by: .zero)
    #expect(log.value == ["post", "post from post"])
    loop.advance(by: .milliseconds(5))
    #expect(log.value == ["post", "post from post", "timer@true"])
  }

  @Test func runOnAVirtualLoopTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      EventLoop(name: "v-run", clock: .virtual()).run()
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("BUG IN LOOPDISPATCH: EventLoop \"v-run\" has a virtual clock"))
  }
}
