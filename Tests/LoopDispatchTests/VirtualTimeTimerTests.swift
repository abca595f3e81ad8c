import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// Timer sources and `after` in virtual time: their timers live on a virtual-time loop that
/// the test thread drives, so which fires happen, and what they count, is exact. Handlers
/// still run on their (real) queues; the test waits for them, never for the clock.
@Suite struct VirtualTimeTimerTests {
  let start = LoopClock.virtualStart

  /// A virtual-time loop bound to the calling thread.
  private func virtualLoop(_ name: String) -> EventLoop {
    let loop = EventLoop(name: name, clock: .virtual())
    loop.advance(by: .zero)
    return loop
  }

  private func at(_ milliseconds: Int) -> Deadline { start + .milliseconds(milliseconds) }

  /// A timer source on `loop` whose handler records its data and signals `ran`.
  private func recordingSource(
    _ label: String, on loop: EventLoop
  ) -> (TimerSource, Queue, Locked<[UInt]>, Semaphore) {
    let queue = Queue(label: label)
    let source = TimerSource(queue: queue, label: label, timerLoop: loop)
    let runs = Locked([UInt]())
    let ran = Semaphore(value: 0)
    source.setEventHandler { [unowned source] in
      let data = source.data
      runs.withLock { $0.append(data) }
      ran.signal()
    }
    return (source, queue, runs, ran)
  }

  /// A loop held up for ten periods fires the timer once; the source counts the ten periods
  /// that passed, then keeps its slots.
  @Test func aTimerSourceCountsThePeriodsAStalledLoopMissed() {
    let loop = virtualLoop("v-source-missed")
    let (source, queue, runs, ran) = recordingSource("v-source-missed", on: loop)
    source.schedule(deadline: at(10), repeating: .milliseconds(10))
    source.activate()
    loop.advance(to: at(10))
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    queue.sync {}  // The delivery has finished: the next fire starts a new one.
    loop.stall(for: .milliseconds(100))
    loop.advance(by: .zero)
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    queue.sync {}
    loop.advance(by: .milliseconds(10))
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    queue.sync {}
    #expect(runs.value == [1, 10, 1])
    source.cancel()
    loop.advance(by: .seconds(1))
    queue.sync {}
    #expect(runs.value == [1, 10, 1])
    #expect(loop.pendingTimerCount == 0)
  }

  /// An idle loop advanced by ten periods fires ten times; however the deliveries merged,
  /// they add up to ten.
  @Test func aTimerSourceOnAnIdleLoopCountsEveryPeriod() {
    let loop = virtualLoop("v-source-idle")
    let queue = Queue(label: "v-source-idle")
    let source = TimerSource(queue: queue, timerLoop: loop)
    let total = Locked<UInt>(0)
    let reachedTen = Latch()
    source.setEventHandler { [unowned source] in
      let data = source.data
      let sum = total.withLock { total -> UInt in
        total += data
        return total
      }
      if sum == 10 { reachedTen.open() }
    }
    source.schedule(deadline: at(10), repeating: .milliseconds(10))
    source.activate()
    loop.advance(to: at(100))
    #expect(reachedTen.wait())
    queue.sync {}
    #expect(total.value == 10)
    #expect(loop.timerFireCount == 10)
    source.cancel()
  }

  /// Leeway does not move the fire (this timer is always precise) and it is never early:
  /// nothing at one nanosecond before the deadline, the fire at it.
  @Test func aTimerSourceFiresExactlyAtItsDeadlineWhateverTheLeeway() {
    let loop = virtualLoop("v-source-leeway")
    let (source, queue, runs, ran) = recordingSource("v-source-leeway", on: loop)
    source.schedule(deadline: at(10), leeway: .milliseconds(5))
    source.activate()
    loop.advance(to: at(10) - .nanoseconds(1))
    queue.sync {}
    #expect(runs.value == [])
    loop.advance(by: .nanoseconds(1))
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    queue.sync {}
    #expect(runs.value == [1])
    source.cancel()
  }

  /// Rescheduling replaces the schedule: earlier from the loop's thread, then from the
  /// source's own handler (on its queue, another thread: it reaches the loop as a posted
  /// timer); the replaced deadlines never fire.
  @Test func aRescheduledTimerSourceFiresOnlyOnItsNewSchedule() {
    let loop = virtualLoop("v-source-reschedule")
    let queue = Queue(label: "v-source-reschedule")
    let source = TimerSource(queue: queue, timerLoop: loop)
    let runs = Locked([UInt]())
    let ran = Semaphore(value: 0)
    let later = at(70)
    source.setEventHandler { [unowned source] in
      let count = runs.withLock { runs -> Int in
        runs.append(source.data)
        return runs.count
      }
      if count == 1 { source.schedule(deadline: later) }
      ran.signal()
    }
    source.schedule(deadline: at(50))
    source.activate()
    loop.advance(to: at(10))
    source.schedule(deadline: at(20))  // Earlier than 50 ms.
    loop.advance(to: at(20))
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    queue.sync {}  // The handler's reschedule for 70 ms has been posted to the loop.
    loop.advance(to: at(69))
    queue.sync {}
    #expect(runs.value == [1])  // Neither 50 ms (replaced) nor 70 ms (not yet).
    loop.advance(to: at(200))
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    queue.sync {}
    #expect(runs.value == [1, 1])
    source.cancel()
    loop.advance(by: .zero)
    #expect(loop.pendingTimerCount == 0)
  }

  /// `after` on a virtual loop: deadline order, ties in scheduling order, on a serial queue;
  /// a cancel from a timer due at the same instant wins; a deadline already passed runs at
  /// once.
  @Test func afterRunsInDeadlineOrderAndACancelAtTheSameInstantWins() {
    let loop = virtualLoop("v-after")
    let queue = Queue(label: "v-after")
    let log = Locked([String]())
    let victim = Locked<DelayedWork?>(nil)
    queue.after(deadline: at(30), on: loop) { log.withLock { $0.append("d") } }
    queue.after(deadline: at(20), on: loop) { log.withLock { $0.append("b") } }
    loop.schedule(at: at(20)) { victim.value?.cancel() }  // Due with the victim, before it.
    victim.withLock {
      $0 = queue.after(deadline: at(20), on: loop) { log.withLock { $0.append("victim") } }
    }
    queue.after(deadline: at(20), on: loop) { log.withLock { $0.append("c") } }
    queue.after(deadline: at(10), on: loop) { log.withLock { $0.append("a") } }
    loop.advance(to: at(25))
    queue.sync {}  // Fired work is submitted to the queue during the advance.
    #expect(log.value == ["a", "b", "c"])
    queue.after(deadline: at(5), on: loop) { log.withLock { $0.append("past") } }
    queue.sync {}
    #expect(log.value == ["a", "b", "c", "past"])
    loop.advance(by: .milliseconds(100))
    queue.sync {}
    #expect(log.value == ["a", "b", "c", "past", "d"])
    #expect(victim.value?.isCancelled == true)
    #expect(loop.pendingTimerCount == 0)
  }
}
