import Glibc
import TestSupport
import Testing

@testable import MainLoop

@Suite struct TimerTests {
  @Test func oneShotTimersNeverFireEarly() {
    let loop = EventLoop(name: "timers")
    let delays = [0, 1, 2, 3, 5, 8, 13, 21].map { Duration.milliseconds($0) }
    let fired = LoopConfined(0)
    let early = LoopConfined(0)
    for delay in delays {
      let deadline = Deadline.now + delay
      loop.schedule(at: deadline) {
        if Deadline.now < deadline { early.value += 1 }
        fired.value += 1
      }
    }
    #expect(loop.run(until: { fired.value == delays.count }, deadline: .now + .seconds(30)))
    #expect(early.value == 0)
    #expect(expectClean(loop))
  }

  @Test func timersFireInDeadlineOrderAndTiesInSchedulingOrder() {
    let loop = EventLoop(name: "order")
    let order = LoopConfined([Int]())
    let base = Deadline.now + .milliseconds(5)
    loop.schedule(at: base + .milliseconds(3)) { order.value.append(3) }
    loop.schedule(at: base) { order.value.append(0) }
    loop.schedule(at: base + .milliseconds(1)) { order.value.append(1) }
    loop.schedule(at: base + .milliseconds(1)) { order.value.append(2) }
    #expect(loop.run(until: { order.value.count == 4 }, deadline: .now + .seconds(30)))
    #expect(order.value == [0, 1, 2, 3])
  }

  /// The coalescing rule itself, on the loop's own state: after an expiry, a deadline inside
  /// the window is armed for the window's end; one beyond it is armed exactly.
  @Test func aDeadlineInsideTheCoalescingWindowIsArmedForTheWindowsEnd() {
    let loop = boundLoop("coalesce")
    let window: UInt64 = 20_000  // `EventLoop.timerCoalescingNanoseconds`
    let expiry = Deadline.now.uptimeNanoseconds + 1_000_000_000  // Far ahead: nothing fires.
    loop.lastTimerExpiry = expiry
    let near = loop.schedule(at: Deadline(uptimeNanoseconds: expiry + 5_000)) {}
    #expect(loop.armedTimerDeadline == expiry + window)
    near.cancel()
    let fresh = boundLoop("coalesce-far")
    fresh.lastTimerExpiry = expiry
    let far = fresh.schedule(at: Deadline(uptimeNanoseconds: expiry + 3 * window)) {}
    #expect(fresh.armedTimerDeadline == expiry + 3 * window)
    far.cancel()
  }

  /// The timer descriptor is never read: the set that ends each expiry (a disarm when no
  /// timer is left) resets its count, so it is not readable afterwards (a readable one would
  /// wake every poll).
  @Test func anExpiredTimerDescriptorIsResetByItsReArm() {
    let loop = boundLoop("timerfd-reset")
    let fired = LoopConfined(0)
    func isReadable() -> Bool {
      var entry = pollfd(fd: loop.timerFD, events: Int16(POLLIN), revents: 0)
      return poll(&entry, 1, 0) == 1 && entry.revents & Int16(POLLIN) != 0
    }
    loop.schedule(after: .milliseconds(1)) { fired.value += 1 }
    loop.run(until: { fired.value == 1 })
    #expect(loop.armedTimerDeadline == 0)  // Disarmed: nothing is left.
    #expect(!isReadable())
    loop.schedule(after: .milliseconds(1)) { fired.value += 1 }
    let far = loop.schedule(after: .seconds(60)) {}
    loop.run(until: { fired.value == 2 })
    #expect(loop.armedTimerDeadline == far.deadline)  // Re-armed for the one left.
    #expect(!isReadable())
    far.cancel()
  }

  /// 200 timers 5 µs apart (closer than the window): every one fires, none early.
  @Test func denseTimersAllFireAndNeverEarly() {
    let loop = EventLoop(name: "dense")
    let count = 200
    let start = Deadline.now + .milliseconds(5)
    let early = LoopConfined(0)
    let fired = LoopConfined(0)
    for index in 0..<count {
      let deadline = start + .microseconds(5 * index)
      loop.schedule(at: deadline) {
        if Deadline.now < deadline { early.value += 1 }
        fired.value += 1
      }
    }
    #expect(loop.run(until: { fired.value == count }, deadline: .now + .seconds(30)))
    #expect(early.value == 0)
    #expect(expectClean(loop))
  }

  @Test func repeatingTimerKeepsItsSlotsNeverEarly() {
    let loop = EventLoop(name: "repeat")
    let interval = Duration.milliseconds(2)
    let start = Deadline.now + interval
    let fires = LoopConfined([Deadline]())
    let timer = loop.scheduleRepeating(every: interval, startingAt: start) {
      fires.value.append(.now)
    }
    #expect(timer.isRepeating)
    #expect(loop.run(until: { fires.value.count == 10 }, deadline: .now + .seconds(30)))
    timer.cancel()
    for (index, fire) in fires.value.enumerated() {
      // The k-th fire happens no earlier than its slot.
      #expect(fire >= start + interval * index)
    }
    #expect(expectClean(loop))
  }

  @Test func cancelOnTheLoopThreadPreventsTheFireAndReleasesTheClosure() {
    let loop = boundLoop("cancel")
    final class Token: Sendable {}
    weak var weakToken: Token?
    let ran = LoopConfined(false)
    do {
      let token = Token()
      weakToken = token
      let timer = loop.schedule(after: .milliseconds(1)) {
        _ = token
        ran.value = true
      }
      timer.cancel()
      #expect(timer.isCancelled)
    }
    #expect(weakToken == nil)  // Released at once by cancel() on the loop thread.
    loop.run(until: .now + .milliseconds(10))
    #expect(!ran.value)
    #expect(expectClean(loop))
  }

  @Test func cancelFromAnotherThreadPreventsTheFire() {
    withLoopThread { loop in
      let ran = Counter()
      let timer = loop.schedule(after: .milliseconds(30)) { ran.increment() }
      timer.cancel()
      let after = Latch()
      loop.schedule(after: .milliseconds(60)) { after.open() }
      #expect(after.wait())
      #expect(ran.current == 0)
      #expect(loop.pendingTimerCount == 0)
    }
  }

  @Test func repeatingTimerCanCancelItselfFromItsHandler() {
    let loop = EventLoop(name: "self-cancel")
    let count = LoopConfined(0)
    let holder = LoopConfined<LoopTimer?>(nil)
    holder.value = loop.scheduleRepeating(every: .milliseconds(1)) {
      count.value += 1
      if count.value == 3 { holder.value?.cancel() }
    }
    loop.run(until: .now + .milliseconds(30))
    #expect(count.value == 3)
    #expect(expectClean(loop))
  }

  @Test func distantFutureNeverFires() {
    let loop = EventLoop(name: "never")
    let ran = LoopConfined(false)
    let timer = loop.schedule(at: .distantFuture) { ran.value = true }
    loop.run(until: .now + .milliseconds(5))
    #expect(!ran.value)
    #expect(loop.pendingTimerCount == 1)
    timer.cancel()
    #expect(expectClean(loop))
  }

  @Test func timerScheduledFromAnotherThreadFiresOnTheLoop() {
    withLoopThread { loop in
      let done = Latch()
      let onLoop = Counter()
      let deadline = Deadline.now + .milliseconds(3)
      loop.schedule(at: deadline) {
        if loop.isInLoopThread && Deadline.now >= deadline { onLoop.increment() }
        done.open()
      }
      #expect(done.wait())
      #expect(onLoop.current == 1)
    }
  }

  @Test func nonPositiveRepeatIntervalTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = EventLoop(name: "zero")
      loop.scheduleRepeating(every: .zero) {}
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains("BUG IN CLIENT OF LOOPDISPATCH: repeating timer interval must be positive"))
  }
}
