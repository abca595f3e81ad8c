import Glibc
import MainLoop
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// The concurrent queue's lock-free paths (`ConcurrentWord.swift`): an item starts without the
/// queue's lock only when nothing waits ahead of it, and a finish takes the lock only when it
/// makes room for the oldest waiting item. These tests break if a submission bypasses a
/// waiting barrier, if a finish that makes room forgets the waiting items, or if the width or
/// a suspension is not seen by the lock-free paths.
@Suite struct ConcurrentWordTests {
  /// One submitter, sixteen readers per barrier (the C benchmark's `rw_barrier` shape): each
  /// reader sees exactly the writes submitted before it, and each writer sees every reader
  /// submitted before it finished.
  @Test func readersSeeExactlyTheWritesSubmittedBeforeThem() {
    let queue = Queue(label: "rw-order", attributes: .concurrent)
    let writes = Atomic<Int>(0)
    let readersDone = Atomic<Int>(0)
    let writerRunning = Atomic<Bool>(false)
    let violations = Counter()
    let readersPerWriter = 16
    let rounds = scaled(20_000) / readersPerWriter
    for round in 0..<rounds {
      for _ in 0..<readersPerWriter {
        queue.async {
          if writerRunning.load(ordering: .acquiring) { violations.increment() }
          if writes.load(ordering: .acquiring) != round { violations.increment() }
          if writerRunning.load(ordering: .acquiring) { violations.increment() }
          readersDone.wrappingAdd(1, ordering: .releasing)
        }
      }
      queue.async(flags: .barrier) {
        writerRunning.store(true, ordering: .sequentiallyConsistent)
        if readersDone.load(ordering: .acquiring) != (round + 1) * readersPerWriter {
          violations.increment()
        }
        if writes.load(ordering: .relaxed) != round { violations.increment() }
        writes.store(round + 1, ordering: .releasing)
        writerRunning.store(false, ordering: .sequentiallyConsistent)
      }
    }
    let final = finalBarrier(on: queue) {
      (writes.load(ordering: .acquiring), readersDone.load(ordering: .acquiring))
    }
    #expect(violations.current == 0)
    #expect(final?.0 == rounds)
    #expect(final?.1 == rounds * readersPerWriter)
  }

  /// The width holds while items finish without the lock and the width changes under them:
  /// never more than the width in force run at once, and every item runs once.
  @Test func widthHoldsWhileItChangesUnderFinishingItems() {
    let queue = Queue(label: "width-race", attributes: .concurrent, width: 3)
    let running = Atomic<Int>(0)
    let overWidth = Counter()
    let ran = Counter()
    let items = scaled(20_000)
    // Only ever narrowed after the wide phase, so the bound checked is the larger one.
    let bound = Atomic<Int>(3)
    for index in 0..<items {
      if index == items / 2 {
        bound.store(3, ordering: .sequentiallyConsistent)
        queue.setWidth(2)
        queue.setWidth(3)
      }
      queue.async {
        let now = running.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
        if now > bound.load(ordering: .sequentiallyConsistent) { overWidth.increment() }
        for _ in 0..<50 { spinHint() }
        running.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        ran.increment()
      }
    }
    #expect(finalBarrier(on: queue) {} != nil)
    #expect(overWidth.current == 0)
    #expect(ran.current == items)
  }

  /// A width of one makes a concurrent queue run one item at a time in submission order, on
  /// both paths (an idle queue starts at once; a busy one queues).
  @Test func aWidthOfOneRunsItemsOneAtATimeInOrder() {
    let queue = Queue(label: "width-one", attributes: .concurrent, width: 1)
    let log = Shared([Int]())  // Only touched by items of `queue`, one at a time.
    let inside = Atomic<Int>(0)
    let overlaps = Counter()
    let items = scaled(10_000)
    for index in 0..<items {
      queue.async {
        if inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue != 1 {
          overlaps.increment()
        }
        log.value.append(index)
        inside.wrappingSubtract(1, ordering: .sequentiallyConsistent)
      }
    }
    #expect(finalBarrier(on: queue) { log.value } == Array(0..<items))
    #expect(overlaps.current == 0)
  }

  /// Items submitted while the queue is suspended wait, even while items started before the
  /// suspension finish (their finishes must not start waiting items), and all run on resume.
  @Test func aSuspensionHoldsItemsWhileEarlierItemsFinish() {
    let queue = Queue(label: "suspend-race", attributes: .concurrent)
    let release = Latch()
    let started = Counter()
    let bothStarted = Latch()
    let early = Counter()
    for _ in 0..<2 {
      queue.async {
        if started.increment() == 2 { bothStarted.open() }
        _ = release.wait(seconds: 30)
      }
    }
    #expect(bothStarted.wait(seconds: 30))
    queue.suspend()
    let held = Counter()
    let ranAll = Latch()
    let count = 100
    for _ in 0..<count {
      queue.async { if held.increment() == count { ranAll.open() } }
    }
    queue.async(flags: .barrier) { early.increment() }
    release.open()
    // The two early items finish and return the queue to no items in flight (their finishes
    // see STOPPED and must leave the held items alone). Waited for on the word itself, with a
    // deadline, not a sleep.
    let deadline = Deadline.now + .seconds(30)
    while ConcurrentWord(queue.concurrentWord.load(ordering: .acquiring)).inFlight > 0
      && Deadline.now < deadline
    {
      sched_yield()
    }
    #expect(ConcurrentWord(queue.concurrentWord.load(ordering: .acquiring)).inFlight == 0)
    #expect(held.current == 0 && early.current == 0)
    queue.resume()
    #expect(ranAll.wait(seconds: 30))
    #expect(finalBarrier(on: queue) { early.current } == 1)
  }
}

/// Runs `body` in a barrier at the end of `queue` and returns its result, or nil if it has
/// not run within a minute: a test whose queue lost an item fails instead of hanging.
private func finalBarrier<T>(on queue: Queue, _ body: @escaping @Sendable () -> T) -> T? {
  let result = Shared<T?>(nil)  // Written by the barrier before `done` opens.
  let done = Latch()
  queue.async(flags: .barrier) {
    result.value = body()
    done.open()
  }
  return done.wait(seconds: 60) ? result.value : nil
}
