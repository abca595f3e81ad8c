import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// TimerSource: one-shot and repeating fires, never early, missed fires counted, rescheduling
/// and cancel. Time is only ever checked as a lower bound.
@Suite struct SourceTimerTests {
  @Test func aOneShotTimerFiresOnceAndNeverEarly() {
    let queue = Queue(label: "one-shot")
    let source = TimerSource(queue: queue)
    let deadline = Deadline.now + .milliseconds(20)
    let fires = Locked([String]())
    let fired = Latch()
    source.setEventHandler { [unowned source] in
      let early = Deadline.now < deadline
      fires.withLock { $0.append("data \(source.data)\(early ? " early" : "")") }
      fired.open()
    }
    source.schedule(deadline: deadline)
    source.activate()
    #expect(fired.wait())
    // Supplementary: a probe through the same queue well after the deadline.
    let probed = Latch()
    _ = queue.after(.milliseconds(50)) { probed.open() }
    #expect(probed.wait())
    queue.sync {}
    source.cancel()
    #expect(fires.value == ["data 1"])
  }

  @Test func aRepeatingTimerCountsUpAndNeverFiresEarly() {
    let queue = Queue(label: "repeating")
    let source = TimerSource(queue: queue)
    let interval = Duration.milliseconds(5)
    let start = Deadline.now + interval
    let wanted: UInt = 10
    let totals = Locked([UInt]())
    let early = Locked([String]())
    let done = Latch()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      let now = Deadline.now
      let data = source.data
      let total = totals.withLock { totals -> UInt in
        let total = (totals.last ?? 0) + data
        totals.append(total)
        return total
      }
      // The fire counted as number `total` is due at start + (total - 1) * interval.
      let due = start + interval * Int(total - 1)
      if now < due { early.withLock { $0.append("fire \(total) at \(now), due \(due)") } }
      if data == 0 { early.withLock { $0.append("a run with data 0") } }
      if total >= wanted { done.open() }
    }
    source.setCancelHandler { cancelled.open() }
    source.schedule(deadline: start, repeating: interval)
    source.activate()
    #expect(done.wait())
    source.cancel()
    #expect(cancelled.wait())
    let seen = totals.value
    #expect(early.value == [])
    #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 < $1 })
    #expect((seen.last ?? 0) >= wanted)
  }

  @Test func aSuspendedRepeatingTimerReportsTheMissedFiresWhenResumed() {
    let queue = Queue(label: "suspended-timer")
    let source = TimerSource(queue: queue)
    let runs = Locked([UInt]())
    let ran = LoopDispatch.Semaphore(value: 0)
    source.setEventHandler { [unowned source] in
      let data = source.data
      runs.withLock { $0.append(data) }
      ran.signal()
    }
    source.schedule(deadline: .now, repeating: .milliseconds(10))
    source.activate()
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    source.suspend()
    // A run that started before the suspend ends before this returns.
    queue.sync {}
    let before = runs.value.count
    // The feature under test is time passing while suspended: ten intervals, so that at
    // least three fires are missed even if the service loop is somewhat late.
    let clock = LoopDispatch.Semaphore(value: 0)
    #expect(clock.wait(timeout: .milliseconds(100)) == .timedOut)
    // Supplementary: nothing ran while suspended.
    #expect(runs.value.count == before)
    source.resume()
    // Runs before the suspend may have left signals behind: wait for a run after it.
    while runs.value.count <= before && ran.wait(timeout: .seconds(30)) == .success {}
    queue.sync {}
    source.cancel()
    let seen = runs.value
    guard seen.count > before else {
      Issue.record("no run after resume: \(seen)")
      return
    }
    #expect(seen[before] >= 3, "runs: \(seen)")
  }

  @Test func aTimerCanBeRescheduledFromItsOwnHandler() {
    let queue = Queue(label: "rescheduled")
    let source = TimerSource(queue: queue)
    let wanted = 5
    let log = Locked([String]())
    let nextDeadline = Locked(Deadline.now + .milliseconds(3))
    let done = Latch()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      let now = Deadline.now
      let due = nextDeadline.value
      let count = log.withLock { log in
        log.append(now < due ? "early" : "data \(source.data)")
        return log.count
      }
      if count < wanted {
        let next = Deadline.now + .milliseconds(3)
        nextDeadline.withLock { $0 = next }
        source.schedule(deadline: next)
      } else {
        done.open()
      }
    }
    source.setCancelHandler { cancelled.open() }
    // A schedule that never fires, replaced before it could.
    source.schedule(deadline: .distantFuture)
    source.activate()
    source.schedule(deadline: nextDeadline.value)
    #expect(done.wait())
    // Supplementary: the last one-shot is spent; a probe later through the queue sees no more.
    let probed = Latch()
    _ = queue.after(.milliseconds(30)) { probed.open() }
    #expect(probed.wait())
    source.cancel()
    #expect(cancelled.wait())
    #expect(log.value == Array(repeating: "data 1", count: wanted))
  }

  @Test func aRepeatingTimerRescheduledAsOneShotFiresOnceMore() {
    let queue = Queue(label: "repeat-then-once")
    let source = TimerSource(queue: queue)
    let runs = Counter()
    let second = Latch()
    source.setEventHandler { [unowned source] in
      if runs.increment() == 1 {
        source.schedule(deadline: .now + .milliseconds(5))
      } else {
        second.open()
      }
    }
    source.schedule(deadline: .now, repeating: .milliseconds(20))
    source.activate()
    #expect(second.wait())
    // Supplementary: had the repeating schedule survived, it would have fired again by now.
    let probed = Latch()
    _ = queue.after(.milliseconds(60)) { probed.open() }
    #expect(probed.wait())
    source.cancel()
    queue.sync {}
    #expect(runs.current == 2)
  }

  /// As in GCD (which clears the pending data when a timer is set), fires counted under a
  /// replaced schedule are not delivered after `schedule` returns.
  @Test func reschedulingDiscardsFiresOfTheReplacedSchedule() {
    let queue = Queue(label: "stale-fires")
    let source = TimerSource(queue: queue)
    let runs = Locked([UInt]())
    let first = Latch()
    source.setEventHandler { [unowned source] in
      runs.withLock { $0.append(source.data) }
      first.open()
    }
    source.schedule(deadline: .now, repeating: .milliseconds(2))
    source.activate()
    #expect(first.wait())
    source.suspend()
    queue.sync {}
    let before = runs.value.count
    // The feature under test is time passing while suspended: fires of the old schedule
    // accumulate (if the loop were stalled throughout, the test would pass vacuously).
    let clock = LoopDispatch.Semaphore(value: 0)
    #expect(clock.wait(timeout: .milliseconds(30)) == .timedOut)
    source.schedule(deadline: .distantFuture)
    source.resume()
    // A delivery due at resume is queued by resume() itself, before this barrier.
    queue.sync {}
    source.cancel()
    let after = runs.value
    #expect(after.count == before, "runs after rescheduling: \(after.dropFirst(before))")
  }

  @Test func cancelStopsARepeatingTimer() {
    let queue = Queue(label: "cancelled-timer")
    let source = TimerSource(queue: queue)
    let runs = Counter()
    let third = Latch()
    let cancelled = Latch()
    source.setEventHandler {
      if runs.increment() == 3 { third.open() }
    }
    source.setCancelHandler { cancelled.open() }
    source.schedule(deadline: .now, repeating: .milliseconds(1))
    source.activate()
    #expect(third.wait())
    source.cancel()
    #expect(cancelled.wait())
    // The cancel handler ran last: the count is final.
    let final = runs.current
    // Supplementary: thirty intervals later, through the same queue, still final.
    let probed = Latch()
    _ = queue.after(.milliseconds(30)) { probed.open() }
    #expect(probed.wait())
    #expect(runs.current == final)
  }
}
