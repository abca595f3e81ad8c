import Glibc
import MainLoop
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// `after` timers of non-main queues on the I/O driver (`Time/DriverTimers.swift`): work of an
/// idle serial queue runs on the driver thread that saw the timer fire, a blocked handler
/// does not hold back other timers, cancel releases the closure, and a queue's timers keep
/// their deadline order whether they run inline or are queued.
@Suite struct DriverTimerTests {
  /// Where one timer's work ran.
  private struct Run: Sendable {
    var onDriverThread = false
    var queueWasCurrent = false
    var early = false
  }

  /// Schedules one `after` onto `queue` and waits for it; returns where it ran.
  private func runOne(on queue: Queue, key: SpecificKey<Int>, delay: Duration) -> Run? {
    let seen = Locked(Run())
    let done = Latch()
    let deadline = Deadline.now + delay
    queue.after(deadline: deadline) {
      let run = Run(
        onDriverThread: IODriver.isDriverThread,
        queueWasCurrent: Queue.getSpecific(key: key) == 7,
        early: Deadline.now < deadline)
      seen.withLock { $0 = run }
      done.open()
    }
    guard done.wait() else { return nil }
    return seen.withLock { $0 }
  }

  /// Work of an idle serial queue runs on a driver thread, with the queue current (its frame
  /// pushed), and the inline counter moves. Another test's inline handler running at the same
  /// instant sends a fire to the pool instead (only one inline run at a time), so the test
  /// tries again, for up to 20 s; on a quiet process the first try runs inline.
  @Test func afterOntoAnIdleSerialQueueRunsOnTheDriverThread() throws {
    let key = SpecificKey<Int>()
    let queue = Queue(label: "driver-timers.idle")
    queue.setSpecific(key: key, value: 7)
    let inlineBefore = RuntimeStats.current.ioInlineTimers
    var ranInline = false
    // Tries until one runs inline, for up to 20 s: a test running in parallel may hold the
    // driver's one inline run, or its standby, for a while (under ThreadSanitizer, long).
    let giveUp = Deadline.now + .seconds(20)
    while Deadline.now < giveUp {
      let run = try #require(runOne(on: queue, key: key, delay: .microseconds(300)))
      #expect(!run.early)
      #expect(run.queueWasCurrent)
      if run.onDriverThread {
        ranInline = true
        break
      }
    }
    #expect(ranInline)
    #expect(RuntimeStats.current.ioInlineTimers > inlineBefore)
  }

  /// A serial queue targeting another serial queue: the whole chain is claimed, and both
  /// queues are current for the work.
  /// Timers far enough apart set the timerfd early, by the wake-up delay the driver learns
  /// from their expiries, and spin to the deadline: the expiries are counted as early, the
  /// learnt advance stays within its cap, and no work starts before its deadline.
  @Test func timersFarApartWakeEarlyButNeverRunEarly() throws {
    let key = SpecificKey<Int>()
    let queue = Queue(label: "driver-timers.early")
    queue.setSpecific(key: key, value: 7)
    let timers = try #require(DriverTimers.shared)
    let before = timers.earlyWakes.load(ordering: .relaxed)
    // The first expiry that finds the poller asleep teaches the advance; the later ones, 2 ms
    // apart, are set early. An expiry that finds it busy teaches nothing (`EarlyWake`), and
    // tests running in parallel keep it busy (under ThreadSanitizer, for long stretches): so
    // rounds of 40 run until one wakes early, for up to 20 s, and every run is checked.
    let giveUp = Deadline.now + .seconds(20)
    repeat {
      for _ in 0..<40 {
        let run = try #require(runOne(on: queue, key: key, delay: .milliseconds(2)))
        #expect(!run.early)
      }
    } while timers.earlyWakes.load(ordering: .relaxed) == before && Deadline.now < giveUp
    #expect(timers.earlyWakes.load(ordering: .relaxed) > before)
    #expect(timers.wakeAdvanceNanoseconds <= EarlyWake.maxAdvance)
  }

  @Test func afterOntoAnIdleSerialChainRunsInlineWithTheChainCurrent() throws {
    let outerKey = SpecificKey<Int>()
    let parent = Queue(label: "driver-timers.parent")
    parent.setSpecific(key: outerKey, value: 7)
    let child = Queue(label: "driver-timers.child", target: parent)
    var ranInline = false
    // Tries until one runs inline, for up to 20 s: a test running in parallel may hold the
    // driver's one inline run, or its standby, for a while (under ThreadSanitizer, long).
    let giveUp = Deadline.now + .seconds(20)
    while Deadline.now < giveUp {
      let run = try #require(runOne(on: child, key: outerKey, delay: .microseconds(300)))
      #expect(run.queueWasCurrent)
      if run.onDriverThread {
        ranInline = true
        break
      }
    }
    #expect(ranInline)
  }

  /// A handler that blocks on the driver thread (on a semaphore this test holds) does not stop
  /// another queue's timer: the standby takes the poller role and that timer fires while the
  /// first handler is still blocked. (If the takeover failed, the second latch would never
  /// open before the first handler is released, and the wait would time out.)
  @Test func aBlockedInlineHandlerDoesNotHoldBackOtherTimers() throws {
    let blocked = Queue(label: "driver-timers.blocked")
    let other = Queue(label: "driver-timers.other")
    let release = Semaphore(value: 0)
    let stillBlocked = Locked<Bool>(false)
    // Until the first handler runs inline (another test's inline run may send it to the pool,
    // where blocking it proves nothing): each try reports where it ran.
    var blockedInline = false
    // Tries until one runs inline, for up to 20 s: a test running in parallel may hold the
    // driver's one inline run, or its standby, for a while (under ThreadSanitizer, long).
    let giveUp = Deadline.now + .seconds(20)
    while Deadline.now < giveUp {
      let started = Latch()
      let onDriver = Locked<Bool>(false)
      blocked.after(.microseconds(300)) {
        let inline = IODriver.isDriverThread
        onDriver.withLock { $0 = inline }
        if inline { stillBlocked.withLock { $0 = true } }
        started.open()
        if inline { release.wait() }
      }
      #expect(started.wait())
      if onDriver.withLock({ $0 }) {
        blockedInline = true
        break
      }
    }
    try #require(blockedInline)
    let otherFired = Latch()
    let firedWhileBlocked = Locked<Bool>(false)
    let deadline = Deadline.now + .milliseconds(5)
    let lateness = Locked<UInt64>(0)
    other.after(deadline: deadline) {
      let late = Deadline.now.uptimeNanoseconds - deadline.uptimeNanoseconds
      lateness.withLock { $0 = late }
      let blockedNow = stillBlocked.withLock { $0 }
      firedWhileBlocked.withLock { $0 = blockedNow }
      otherFired.open()
    }
    let fired = otherFired.wait(seconds: 20)
    stillBlocked.withLock { $0 = false }
    release.signal()
    #expect(fired)
    #expect(firedWhileBlocked.withLock { $0 })
    // Not a tight bound (a loaded machine): only that it did not wait for the release.
    #expect(lateness.withLock { $0 } < 10_000_000_000)
  }

  /// `cancel()` before the fire releases the closure (and what it captured) before it
  /// returns, and the work never runs.
  @Test func cancelBeforeTheFireReleasesTheClosure() {
    final class Captured: Sendable {}
    weak var weakCaptured: Captured?
    let ran = Locked<Bool>(false)
    let delayed: DelayedWork
    do {
      let captured = Captured()
      weakCaptured = captured
      delayed = Queue(label: "driver-timers.cancel").after(.seconds(30)) {
        withExtendedLifetime(captured) {}
        ran.withLock { $0 = true }
      }
    }
    #expect(weakCaptured != nil)
    delayed.cancel()
    #expect(weakCaptured == nil)
    #expect(delayed.isCancelled)
    delayed.cancel()  // Idempotent.
    #expect(!ran.withLock { $0 })
  }

  /// Cancelling timers of the driver heap, also the earliest one, leaves the others firing;
  /// the cancelled ones never run.
  @Test func cancellingTheEarliestTimerLeavesTheOthersFiring() {
    let queue = Queue(label: "driver-timers.cancel-earliest")
    let ran = Locked([Int]())
    let done = Latch()
    let start = Deadline.now
    var timers: [DelayedWork] = []
    for index in 0..<10 {
      timers.append(
        queue.after(deadline: start + .milliseconds(20 + index)) {
          let count = ran.withLock { runs in
            runs.append(index)
            return runs.count
          }
          if count == 5 { done.open() }
        })
    }
    for index in stride(from: 0, to: 10, by: 2) { timers[index].cancel() }
    #expect(done.wait())
    // The last timer (9) ran last; wait for its work to be visible, then compare.
    let finished = Latch()
    queue.async { finished.open() }
    #expect(finished.wait())
    #expect(ran.withLock { $0 } == [1, 3, 5, 7, 9])
  }

  /// Several timers on one serial queue, scheduled out of order (two with one deadline), run
  /// in deadline order (equal deadlines in scheduling order), never early.
  @Test func timersOfOneSerialQueueRunInDeadlineOrder() {
    let queue = Queue(label: "driver-timers.order")
    let start = Deadline.now + .milliseconds(50)
    // (deadline offset in 100 µs, id); ids are the expected order.
    let plan: [(Int, Int)] = [(30, 5), (5, 0), (20, 3), (10, 1), (40, 6), (20, 4), (15, 2)]
    let order = Locked([Int]())
    let early = Locked<Int>(0)
    let done = Latch()
    for (offset, id) in plan {
      let deadline = start + .microseconds(100 * offset)
      queue.after(deadline: deadline) {
        if Deadline.now < deadline { early.withLock { $0 += 1 } }
        if order.withLock({ runs -> Int in
          runs.append(id)
          return runs.count
        }) == plan.count {
          done.open()
        }
      }
    }
    #expect(done.wait())
    #expect(order.withLock { $0 } == [0, 1, 2, 3, 4, 5, 6])
    #expect(early.withLock { $0 } == 0)
  }

  /// A burst of timers onto a serial queue that is busy (its running item waits until every
  /// timer has fired) still runs all of them, in deadline order, after the busy item.
  @Test func aBurstOntoABusySerialQueueRunsInDeadlineOrder() {
    let queue = Queue(label: "driver-timers.busy")
    let busyRelease = Semaphore(value: 0)
    let busyStarted = Latch()
    queue.async {
      busyStarted.open()
      busyRelease.wait()
    }
    #expect(busyStarted.wait())
    let count = scaled(500)
    // Far enough ahead that every timer is scheduled before its deadline even under
    // ThreadSanitizer (a timer already due when scheduled is submitted at once, in
    // scheduling order, as `async` would).
    let start = Deadline.now + .milliseconds(500)
    // Deadlines 10 µs apart, scheduled in a scrambled order (a multiplicative walk).
    var offsets = Array(0..<count)
    var generator = SplitMix(seed: 42)
    offsets.shuffle(using: &generator)
    let order = Locked([Int]())
    let done = Latch()
    let firedBefore = RuntimeStats.current.ioTimersFired
    for offset in offsets {
      let deadline = start + .microseconds(10 * offset)
      queue.after(deadline: deadline) {
        if order.withLock({ runs -> Int in
          runs.append(offset)
          return runs.count
        }) == count {
          done.open()
        }
      }
    }
    guard Deadline.now < start else {
      busyRelease.signal()
      Issue.record("scheduling took longer than the margin")
      return
    }
    // Every timer has fired (its work is queued behind the busy item) once the counter has
    // moved by `count` (other tests' timers may move it too: then some of ours fire after
    // the release, which the order check covers as well).
    let last = start + .microseconds(10 * count)
    while Deadline.now < last || RuntimeStats.current.ioTimersFired < firedBefore + UInt64(count) {
      sched_yield()
    }
    #expect(order.withLock { $0 }.isEmpty)
    busyRelease.signal()
    #expect(done.wait())
    #expect(order.withLock { $0 } == Array(0..<count))
  }

  /// Several threads schedule short timers at once (each racing the poller's re-arm: the
  /// Dekker pair between the pending stack and the armed instant) onto serial queues and a
  /// global queue, cancelling some: every timer not cancelled runs exactly once, never early.
  /// A stranded timer would never run, and the wait would time out. (A cancelled one may
  /// still run if it fired before its cancel; that is not checked.)
  @Test func concurrentSchedulersStrandNoTimer() {
    let threads = 4
    let perThread = scaled(2_000)
    let isCancelled: @Sendable (Int) -> Bool = { $0 % 7 == 3 }
    let keptPerThread = (0..<perThread).filter { !isCancelled($0) }.count
    let expected = threads * keptPerThread
    let queues = (0..<3).map { Queue(label: "driver-timers.race-\($0)") } + [Queue.global()]
    let ran = Counter()
    let early = Counter()
    let done = Latch()
    var handles: [pthread_t] = []
    for thread in 0..<threads {
      handles.append(
        startThread {
          var generator = SplitMix(seed: UInt64(thread + 1))
          for index in 0..<perThread {
            let delay = Int64(generator.next() % 400)  // 0–400 µs.
            let deadline = Deadline.now + .microseconds(delay)
            let cancel = isCancelled(index)
            let delayed = queues[index % queues.count].after(deadline: deadline) {
              if Deadline.now < deadline { early.increment() }
              if !cancel && ran.increment() == expected { done.open() }
            }
            if cancel { delayed.cancel() }
          }
        })
    }
    for handle in handles { pthread_join(handle, nil) }
    #expect(done.wait())
    #expect(ran.current == expected)
    #expect(early.current == 0)
  }

  /// The coalescing window ("Coalescing" in `DriverTimers.swift`): 20 µs while the poller is
  /// on time, twice the firing within 20–100 µs once an expiry found its earliest timer more
  /// than 100 µs late.
  @Test func theCoalescingWindowWidensOnlyBehindTheDeadlines() {
    let window = DriverTimers.coalescingWindow(afterFiringFor:lag:)
    // On time (or less late than 100 µs): the event loop's 20 µs, however long the firing.
    #expect(window(80_000, 0) == 20_000)
    #expect(window(80_000, 100_000) == 20_000)
    // Behind: twice the firing, within 20 and 100 µs.
    #expect(window(30_000, 100_001) == 60_000)
    #expect(window(5_000, 2_000_000) == 20_000)
    #expect(window(70_000, 2_000_000) == 100_000)
  }

  /// A burst far denser than the poller can fire one expiry at a time (50k timers within
  /// 10 ms on the global queue: an expiry with its `timerfd_settime` and a worker's wake-up
  /// costs tens of µs here) puts it behind, and the window widens; every timer still runs
  /// once and none early.
  ///
  /// The burst must be filed before its first deadline: a timer whose deadline has passed
  /// when it is filed runs at once, never reaching the poller (CI, release build beside other
  /// suites: filing 50k timers outlasted a 2 ms lead, and no window widened). So the burst
  /// starts 50 ms ahead, and a burst that still did not widen the window is tried again
  /// with twice the lead, up to four times.
  @Test func aBurstThePollerFallsBehindOnWidensTheWindowAndLosesNoTimer() throws {
    let timers = try #require(DriverTimers.shared)
    let before = timers.widenedWindows.load(ordering: .relaxed)
    var lead = Duration.milliseconds(50)
    var filedInTime = 0
    for _ in 0..<4 {
      let (ran, early, inTime) = runTimerBurst(count: 50_000, lead: lead)
      #expect(ran == 50_000)
      #expect(early == 0)
      if inTime { filedInTime += 1 }
      if timers.widenedWindows.load(ordering: .relaxed) > before { break }
      lead = lead * 2
    }
    #expect(
      timers.widenedWindows.load(ordering: .relaxed) > before,
      "no window widened (\(filedInTime) of the bursts were filed before their first deadline)")
  }

  /// Files `count` timers on the global queue, 200 ns apart from `lead` ahead, and waits for
  /// them: how many ran, how many ran before their deadline, and whether the last was filed
  /// before the first was due.
  private func runTimerBurst(count: Int, lead: Duration) -> (ran: Int, early: Int, inTime: Bool) {
    let ran = Counter()
    let early = Counter()
    let done = Latch()
    let queue = Queue.global()
    let start = Deadline.now + lead
    for index in 0..<count {
      let deadline = start + .nanoseconds(Int64(index * 200))  // 10 ms in all.
      queue.after(deadline: deadline) {
        if Deadline.now < deadline { early.increment() }
        if ran.increment() == count { done.open() }
      }
    }
    let inTime = Deadline.now < start
    #expect(done.wait())
    return (ran.current, early.current, inTime)
  }

  /// `dispatch_after_f`'s form (a C function and its context) runs inline too.
  @Test func aCFunctionTimerRunsOnAnIdleSerialQueue() {
    final class Box: Sendable {
      let latch = Latch()
      let onDriver = Locked<Bool>(false)
    }
    let queue = Queue(label: "driver-timers.c")
    var sawDriver = false
    // Tries until one runs inline, for up to 20 s: a test running in parallel may hold the
    // driver's one inline run, or its standby, for a while (under ThreadSanitizer, long).
    let giveUp = Deadline.now + .seconds(20)
    while Deadline.now < giveUp {
      let box = Box()
      let call = CFunctionCall(
        function: { context in
          // Safe: the context is the box, kept alive by the test until the latch opened.
          let box = Unmanaged<Box>.fromOpaque(context!).takeUnretainedValue()
          box.onDriver.withLock { $0 = IODriver.isDriverThread }
          box.latch.open()
        },
        context: Unmanaged.passUnretained(box).toOpaque())
      queue.after(deadline: .now + .microseconds(300), call)
      #expect(box.latch.wait())
      if box.onDriver.withLock({ $0 }) {
        sawDriver = true
        break
      }
    }
    #expect(sawDriver)
  }
}

/// A small deterministic generator for shuffles (SplitMix64).
private struct SplitMix: RandomNumberGenerator {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
