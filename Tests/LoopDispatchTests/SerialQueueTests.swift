import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

@Suite struct SerialQueueTests {
  @Test func fifoPerProducerWithFourProducersAndAMillionItems() {
    let queue = Queue(label: "fifo")
    let producers = 4
    let perProducer = scaled(250_000)
    // Only touched on `queue`, which runs one item at a time.
    let lastSeen = Shared([Int](repeating: -1, count: producers))
    let outOfOrder = Shared(0)
    let total = Shared(0)
    let done = Latch()
    let group = Latch()
    let started = Counter()
    for producer in 0..<producers {
      Queue.global().async {
        started.increment()
        for index in 0..<perProducer {
          queue.async {
            if lastSeen.value[producer] != index - 1 { outOfOrder.value += 1 }
            lastSeen.value[producer] = index
            total.value += 1
            if total.value == producers * perProducer { done.open() }
          }
        }
        if started.current == producers { group.open() }
      }
    }
    #expect(done.wait(seconds: 120))
    #expect(outOfOrder.value == 0)
    #expect(total.value == producers * perProducer)
  }

  #if DEBUG
    /// The tests that set the pause hook (one process-wide slot), one at a time.
    @Suite(.serialized) struct LinkWindow {
      /// A producer parked between the exchange that publishes its node and the store that
      /// links the older node to it (a debug hook): the drainer that reaches the older node
      /// must wait there for the link, then run every item, in order. (Preemption in that
      /// window is rare; a lost link would drop every newer item.)
      @Test func aDrainerWaitsForAProducerBetweenItsExchangeAndItsLink() {
        let queue = Queue(label: "link-window")
        // Only touched on `queue`, which runs one item at a time.
        let order = Shared([Int]())
        queue.suspend()
        for item in 0..<3 { queue.async { order.value.append(item) } }
        defer { SerialLinkHooks.setPause(nil) }
        let (thread, release) = startParkedPush { queue.async { order.value.append(3) } }
        for item in 4..<7 { queue.async { order.value.append(item) } }
        let waited = Latch()
        SerialLinkHooks.setWaitObserver { drained, kind in
          if drained === queue && kind == .link { waited.open() }
        }
        defer { SerialLinkHooks.setWaitObserver(nil) }
        queue.resume()
        #expect(waited.wait(seconds: 10))
        release.open()
        pthread_join(thread, nil)
        #expect(queue.sync { order.value } == Array(0..<7))
      }

      /// A producer parked between the exchange that publishes its node into an empty list and
      /// the store that makes the node the list's head (a debug hook); a second producer links
      /// its node behind it and schedules the drain, which must wait for the head, then run
      /// both items in order. (A drain that took the missing head for an empty list would
      /// stop, be rescheduled by its own re-check, and spin so until the head appeared.)
      @Test func aDrainerWaitsForTheHeadAProducerIntoAnEmptyListHasNotStored() {
        let queue = Queue(label: "head-window")
        // Only touched on `queue`, which runs one item at a time.
        let order = Shared([Int]())
        defer { SerialLinkHooks.setPause(nil) }
        let (thread, release) = startParkedPush { queue.async { order.value.append(0) } }
        let waited = Latch()
        SerialLinkHooks.setWaitObserver { drained, kind in
          if drained === queue && kind == .head { waited.open() }
        }
        defer { SerialLinkHooks.setWaitObserver(nil) }
        queue.async { order.value.append(1) }
        #expect(waited.wait(seconds: 10))
        release.open()
        pthread_join(thread, nil)
        #expect(queue.sync { order.value } == [0, 1])
      }

      /// Starts a thread whose push (`push`) the pause hook parks between its exchange and its
      /// second store (the link or the head); returns once it is parked, with the thread and
      /// the latch that releases it. The caller removes the hook and joins the thread.
      private func startParkedPush(
        _ push: @escaping @Sendable () -> Void
      ) -> (pthread_t, Latch) {
        let producer = Atomic<UInt>(0)
        let claimed = Atomic<Bool>(false)
        let parked = Latch()
        let release = Latch()
        SerialLinkHooks.setPause {
          guard pthread_self() == producer.load(ordering: .acquiring),
            claimed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
          else { return }
          parked.open()
          _ = release.wait()
        }
        let thread = startThread {
          producer.store(pthread_self(), ordering: .releasing)
          push()
        }
        #expect(parked.wait())
        return (thread, release)
      }

      /// The pause hook, read by every push while set, is the same function at the 500th push
      /// as at the first: it runs at the same stack depth on the pushing thread. (Read
      /// through `withLock { $0 }`, each read wrapped the stored hook in two more thunks, so
      /// the last push ran it about 2000 frames deeper, and a test's hook read at every drain
      /// grew until releasing it overflowed a worker's stack: `LockedValue.load()`.)
      @Test func theHookIsTheSameFunctionAfterManyPushes() {
        let queue = Queue(label: "hook-depth")
        let pusher = pthread_self()
        let depths = Shared([Int]())
        SerialLinkHooks.setPause {
          // Only the test's thread appends, between pushes it makes.
          if pthread_equal(pthread_self(), pusher) != 0 {
            depths.value.append(currentStackDepth())
          }
        }
        queue.suspend()
        for _ in 0..<500 { queue.async {} }
        SerialLinkHooks.setPause(nil)
        queue.resume()
        queue.sync {}
        #expect(depths.value.count == 500)
        let first = depths.value.first ?? 0
        let last = depths.value.last ?? 0
        #expect(last - first < 16, "the 500th push ran its hook \(last - first) frames deeper")
      }
    }

    /// A queue that is empty when its drain checks the budget at its last item, and refilled
    /// right after (a debug hook submits there, on the drainer's thread): the drain still
    /// stops at the budget, and the new items run in a later drain, in order. (The check
    /// used to be `ran == budget && pending`: a drain that found nothing pending there ran
    /// on, and never met its budget again.) Counted through the same hook: the items each
    /// drain of this queue had run at each check.
    @Test func aDrainRefilledRightAfterItsBudgetCheckStopsAtTheBudget() {
      let queue = Queue(label: "drain-budget")
      let budget = SerialDrainHooks.budget
      let extra = budget / 2
      // Only touched on `queue`, which runs one item at a time.
      let order = Shared([Int]())
      let allRan = Latch()
      @Sendable func submit(_ item: Int) {
        queue.async {
          order.value.append(item)
          if item == budget + extra - 1 { allRan.open() }
        }
      }
      queue.suspend()
      for item in 0..<budget { submit(item) }
      let longestDrain = Atomic<Int>(0)
      let refilled = Atomic<Bool>(false)
      SerialDrainHooks.setAfterBudgetCheck { drained, ran in
        guard drained === queue else { return }
        _ = longestDrain.max(ran, ordering: .relaxed)
        if ran == budget && !refilled.exchange(true, ordering: .relaxed) {
          for item in budget..<(budget + extra) { submit(item) }
        }
      }
      defer { SerialDrainHooks.setAfterBudgetCheck(nil) }
      queue.resume()
      // A latch, not `sync`: a waiter queued behind the items would be found pending at the
      // budget check, and the window would not be tested.
      #expect(allRan.wait())
      let wasRefilled = refilled.load(ordering: .relaxed)
      #expect(wasRefilled)
      let longest = longestDrain.load(ordering: .relaxed)
      #expect(longest <= budget)
      #expect(order.value == Array(0..<(budget + extra)))
    }

    /// A `suspend()` that lands after the drain read the link to the next item and before it
    /// ran it holds that item back until `resume()` (the drain checks after reading the link
    /// and leaves the item in the list). With the check before the read, an item taken just after a suspend ran while
    /// its queue was suspended (SuspendStormStressTests saw it once); here the hook suspends
    /// from inside that window, deterministically.
    @Test func aSuspendRightAfterTheTakeHoldsTheItemBack() {
      let queue = Queue(label: "suspend-after-take")
      let ran = Latch()
      let suspendedInWindow = Atomic<Bool>(false)
      SerialDrainHooks.setAfterTake { drained in
        guard drained === queue, !suspendedInWindow.exchange(true, ordering: .relaxed) else {
          return
        }
        drained.suspend()
      }
      defer { SerialDrainHooks.setAfterTake(nil) }
      queue.async { ran.open() }
      // The item must not run while the queue is suspended; a second is ample to see it.
      #expect(!ran.wait(seconds: 1))
      let suspended = suspendedInWindow.load(ordering: .relaxed)
      #expect(suspended)
      queue.resume()
      #expect(ran.wait(seconds: 30))
    }
  #endif

  @Test func neverRunsTwoItemsAtOnce() {
    let queue = Queue(label: "exclusive")
    let inside = Atomic<Int>(0)
    let overlaps = Counter()
    let finished = Counter()
    let done = Latch()
    let items = scaled(20_000)
    for _ in 0..<items {
      Queue.global().async {
        queue.async {
          if inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue != 1 {
            overlaps.increment()
          }
          for _ in 0..<50 { spinHint() }
          inside.wrappingSubtract(1, ordering: .sequentiallyConsistent)
          if finished.increment() == items { done.open() }
        }
      }
    }
    #expect(done.wait(seconds: 60))
    #expect(overlaps.current == 0)
  }

  @Test func syncReturnsTheValueRunsOnTheCallerAndRethrows() throws {
    let queue = Queue(label: "sync")
    let caller = pthread_self()
    let (value, sameThread) = queue.sync { (42, pthread_self() == caller) }
    #expect(value == 42)
    #expect(sameThread)
    struct Oops: Error, Equatable {}
    #expect(throws: Oops()) {
      try queue.sync { () throws(Oops) -> Int in throw Oops() }
    }
    // After an error the queue still works.
    #expect(queue.sync { Queue.current === queue })
  }

  @Test func syncWaitsBehindEarlierItemsInOrder() {
    let queue = Queue(label: "sync-order")
    let log = Shared([Int]())  // Only touched on `queue`.
    let gate = Latch()
    queue.async { _ = gate.wait() }
    for index in 0..<100 { queue.async { log.value.append(index) } }
    Queue.global().async { gate.open() }
    let snapshot = queue.sync { log.value }
    #expect(snapshot == Array(0..<100))
  }

  @Test func suspendHoldsItemsAndResumeReleasesThemInOrder() {
    let queue = Queue(label: "suspend")
    let log = Shared([Int]())  // Only touched on `queue`.
    queue.suspend()
    queue.suspend()
    let ran = Counter()
    for index in 0..<10 {
      queue.async {
        log.value.append(index)
        ran.increment()
      }
    }
    // Nothing runs while suspended: a global item that runs after them proves time passed.
    let probe = Latch()
    Queue.global().async { probe.open() }
    _ = probe.wait()
    #expect(ran.current == 0)
    queue.resume()
    #expect(ran.current == 0)  // Still suspended once.
    queue.resume()
    #expect(queue.sync { log.value } == Array(0..<10))
  }

  @Test func inactiveQueueRunsNothingUntilActivated() {
    let queue = Queue(label: "inactive", attributes: .initiallyInactive)
    let ran = Counter()
    for _ in 0..<5 { queue.async { ran.increment() } }
    let probe = Latch()
    Queue.global().async { probe.open() }
    _ = probe.wait()
    #expect(ran.current == 0)
    queue.activate()
    queue.activate()  // Idempotent.
    #expect(queue.sync { ran.current } == 5)
  }

  @Test func resumeActivatesAnInactiveQueue() {
    let queue = Queue(label: "resume-activates", attributes: .initiallyInactive)
    let ran = Counter()
    queue.async { ran.increment() }
    queue.resume()
    #expect(queue.sync { ran.current } == 1)
  }

  @Test func floodedQueueDoesNotStarveOthersOnTheSameTarget() {
    // Both queues target one serial queue, so a single thread drains them: the flooded
    // queue must hand the target back after a bounded drain instead of running all its items.
    let target = Queue(label: "shared-target")
    let flooded = Queue(label: "flooded", target: target)
    let other = Queue(label: "other", target: target)
    let items = scaled(20_000)
    let gate = Latch()
    let progress = Counter()
    let progressWhenOtherRan = Shared(-1)
    let done = Latch()
    flooded.async { _ = gate.wait() }  // Hold the flood until everything is queued.
    for _ in 0..<items {
      flooded.async {
        if progress.increment() == items { done.open() }
      }
    }
    other.async { progressWhenOtherRan.value = progress.current }
    gate.open()
    #expect(done.wait(seconds: 60))
    #expect(target.sync { progressWhenOtherRan.value } >= 0)
    // The other queue ran after at most one bounded drain (128 items) of the flood.
    #expect(progressWhenOtherRan.value <= 128)
  }
}

@inline(__always) func spinHint() {
  // A tiny amount of work that the optimiser cannot drop.
  _ = Atomic<Int>(0).load(ordering: .sequentiallyConsistent)
}
