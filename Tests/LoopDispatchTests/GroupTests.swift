import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

@Suite struct GroupTests {
  @Test func waitOnAnEmptyGroupSucceedsAtOnce() {
    let group = Group()
    // A deadline of now cannot sleep: an empty group must answer without waiting.
    #expect(group.wait(timeout: .now) == .success)
    #expect(group.wait(timeout: .zero) == .success)
    // The untimed form too, on a thread of its own so that a hang fails instead.
    let result = Shared<WaitResult?>(nil)
    let waiter = SyncTestThread.start { result.value = group.wait() }
    #expect(waiter.join(seconds: 30))
    #expect(result.value == .success)
    group.enter()
    group.leave()
    #expect(group.wait(timeout: .now) == .success)
  }

  @Test func timedWaitTimesOutWhileWorkIsOutstandingAndSucceedsAfterLeave() {
    let group = Group()
    group.enter()
    group.enter()
    for delay in [1, 5, 20] {
      let start = Deadline.now
      #expect(group.wait(timeout: .milliseconds(delay)) == .timedOut)
      #expect(Deadline.now - start >= .milliseconds(delay))
    }
    #expect(group.wait(timeout: .now + .milliseconds(10)) == .timedOut)
    group.leave()
    #expect(group.wait(timeout: .now) == .timedOut)  // One piece is still outstanding.
    group.leave()
    #expect(group.wait(timeout: .now) == .success)
    #expect(group.wait(timeout: .seconds(30)) == .success)
  }

  @Test func sleepingWaitersAreAllWokenByTheLastLeave() {
    let group = Group()
    group.enter()
    // One slot per waiter, each written by its own thread and read after the join.
    let results = (0..<3).map { _ in Shared<WaitResult?>(nil) }
    let waiters = (0..<3).map { index in
      SyncTestThread.start {
        results[index].value = index == 0 ? group.wait() : group.wait(timeout: .seconds(120))
      }
    }
    for waiter in waiters { #expect(waiter.waitUntilSleeping()) }
    group.leave()
    // Well before the timed waits would give up by themselves.
    for waiter in waiters { #expect(waiter.join(seconds: 30)) }
    #expect(results.map(\.value) == [.success, .success, .success])
  }

  @Test(arguments: ["global", "serial", "concurrent"])
  func asyncGroupOverTenThousandItemsThenWait(kind: String) {
    let queue =
      switch kind {
      case "global": Queue.global()
      case "serial": Queue(label: "group-serial")
      default: Queue(label: "group-concurrent", attributes: .concurrent)
      }
    let group = Group()
    let ran = Counter()
    let items = scaled(10_000)
    for _ in 0..<items {
      queue.async(group: group) { ran.increment() }
    }
    #expect(group.wait(timeout: .seconds(60)) == .success)
    #expect(ran.current == items)
  }

  @Test func asyncGroupSubmittedFromManyThreadsThenWait() {
    let group = Group()
    let ran = Counter()
    let perThread = scaled(5_000)
    let go = Latch()
    let submitters = (0..<4).map { _ in
      SyncTestThread.start {
        _ = go.wait()
        for _ in 0..<perThread { Queue.global().async(group: group) { ran.increment() } }
      }
    }
    go.open()
    for submitter in submitters { #expect(submitter.join()) }
    #expect(group.wait(timeout: .seconds(60)) == .success)
    #expect(ran.current == 4 * perThread)
  }

  @Test func notifyOnAnEmptyGroupFiresAtOnce() {
    let group = Group()
    let fired = Latch()
    group.notify(queue: .global()) { fired.open() }
    #expect(fired.wait())
    // Also after a completed round of work.
    group.enter()
    group.leave()
    let again = Latch()
    group.notify(queue: .global()) { again.open() }
    #expect(again.wait())
  }

  @Test func eachNotificationRunsOnceAtTheNextReturnToZero() {
    let group = Group()
    let queue = Queue(label: "notifications")
    let first = Counter()
    let second = Counter()
    group.enter()
    group.enter()
    group.notify(queue: queue) { first.increment() }
    group.leave()
    queue.sync {}  // Anything submitted so far has run.
    #expect(first.current == 0)
    group.leave()
    queue.sync {}
    #expect(first.current == 1)

    group.enter()
    group.notify(queue: queue) { second.increment() }
    queue.sync {}
    #expect(second.current == 0)
    group.leave()
    queue.sync {}
    #expect(first.current == 1)
    #expect(second.current == 1)

    // Later rounds fire neither again.
    for _ in 0..<3 {
      group.enter()
      group.leave()
    }
    queue.sync {}
    #expect(first.current == 1)
    #expect(second.current == 1)
  }

  @Test func notifyRunsOnTheGivenQueue() {
    let group = Group()
    let queue = Queue(label: "notify-target")
    let onQueue = Locked([Bool]())
    let done = Semaphore(value: 0)
    group.notify(queue: queue) {  // Empty group: fires at once.
      onQueue.withLock { $0.append(Queue.current === queue) }
      done.signal()
    }
    group.enter()
    group.notify(queue: queue) {  // Fires when the other thread leaves.
      onQueue.withLock { $0.append(Queue.current === queue) }
      done.signal()
    }
    Queue.global().async { group.leave() }
    #expect(done.wait(timeout: .seconds(30)) == .success)
    #expect(done.wait(timeout: .seconds(30)) == .success)
    #expect(onQueue.value == [true, true])
  }

  @Test func notifyFiresOncePerRoundUnderChurn() {
    let group = Group()
    let queue = Queue(label: "churn-notify")
    let rounds = scaled(2_000)
    let notified = Counter()
    let done = Semaphore(value: 0)
    for _ in 0..<rounds {
      for _ in 0..<4 { Queue.global().async(group: group) { spinHint() } }
      group.notify(queue: queue) {
        notified.increment()
        done.signal()
      }
      #expect(done.wait(timeout: .seconds(30)) == .success)
    }
    #expect(group.wait(timeout: .seconds(30)) == .success)
    queue.sync {}
    #expect(notified.current == rounds)
  }

  @Test func workIsVisibleToTheWaiterAfterWait() {
    let group = Group()
    let items = scaled(1_000)
    // Not atomic on purpose: only the group orders these writes before the reads below.
    let slots = (0..<items).map { _ in Shared(0) }
    for index in 0..<items {
      Queue.global().async(group: group) { slots[index].value = index + 1 }
    }
    #expect(group.wait(timeout: .seconds(60)) == .success)
    #expect(slots.enumerated().allSatisfy { $0.element.value == $0.offset + 1 })
  }

  @Test func unbalancedLeaveTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Group().leave()
    }
    expectMessage(result, "Group.leave() called more times than enter()")
  }

  @Test func leaveAfterABalancedRoundTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let group = Group()
      group.enter()
      group.leave()
      group.leave()
    }
    expectMessage(result, "Group.leave() called more times than enter()")
  }
}

@Suite struct GroupGenerationTests {
  /// A waiter asleep while the count goes 1 → 0 → 1 wakes: the generation it waited on
  /// ended. (Before the count and the generation shared one word, it woke, saw the count
  /// at 1 again and slept on until its timeout.)
  @Test func aWaiterWakesForABriefReturnToZero() {
    let group = Group()
    group.enter()
    let result = Shared<WaitResult?>(nil)
    let waiter = SyncTestThread.start { result.value = group.wait(timeout: .seconds(120)) }
    #expect(waiter.waitUntilSleeping())
    group.leave()
    group.enter()  // At once: the count is 1 again before the waiter can look.
    #expect(waiter.join(seconds: 30))
    #expect(result.value == .success)
    // The new generation is outstanding: a new waiter must wait for it.
    #expect(group.wait(timeout: .now + .milliseconds(5)) == .timedOut)
    group.leave()
    #expect(group.wait(timeout: .now) == .success)
  }

  #if DEBUG
    /// `enter` from zero takes COUNT to 0xFFFF_FFFF without borrowing from GENERATION (an
    /// addition of 0xFFFF_FFFF there, not a subtraction), and the `leave` back to zero
    /// carries into it: one generation per return to zero, over several rounds and from a
    /// count above one. A plain 64-bit subtract would take GENERATION back by one at each
    /// first `enter` (checked: this fails).
    @Test func enterFromZeroLeavesTheGenerationAlone() {
      let group = Group()
      let start = group.generation
      for round in 1...3 {
        group.enter()
        #expect(group.generation == start &+ UInt32(round - 1))
        group.enter()
        group.leave()
        #expect(group.generation == start &+ UInt32(round - 1))
        group.leave()
        #expect(group.generation == start &+ UInt32(round))
      }
    }
  #endif

  /// A notification belongs to the generation current when it was registered: it runs
  /// when that generation ends, even if new work entered before the `leave` that ended it
  /// looked at the list; one registered after a new `enter` waits for the next zero.
  @Test func notificationsRunWhenTheirGenerationEnds() {
    let group = Group()
    let queue = Queue(label: "notify-generations")
    let first = Semaphore(value: 0)
    let second = Shared<Bool>(false)
    let secondRan = Semaphore(value: 0)
    group.enter()
    group.notify(queue: queue) { first.signal() }
    group.leave()  // Generation 0 ends: the first notification is due.
    group.enter()
    group.notify(queue: queue) {
      second.value = true
      secondRan.signal()
    }
    #expect(first.wait(timeout: .seconds(30)) == .success)
    // Drain the queue once: the second notification must not have run.
    queue.sync {}
    #expect(second.value == false)
    group.leave()
    #expect(secondRan.wait(timeout: .seconds(30)) == .success)
  }

  /// Many threads entering and leaving while others wait: every waiter returns, and a
  /// waiter never returns while the work it waited for is still outstanding.
  @Test func waitersNeverReturnEarlyUnderChurn() {
    let group = Group()
    let rounds = 2_000
    let outstanding = Atomic<Int>(0)
    let early = Atomic<Int>(0)
    for _ in 0..<rounds {
      group.enter()
      outstanding.wrappingAdd(1, ordering: .relaxed)
      Queue.global().async {
        outstanding.wrappingSubtract(1, ordering: .relaxed)
        group.leave()
      }
      if group.wait(timeout: .seconds(30)) == .success,
        outstanding.load(ordering: .relaxed) != 0
      {
        early.wrappingAdd(1, ordering: .relaxed)
      }
    }
    #expect(early.load(ordering: .relaxed) == 0)
  }
}
