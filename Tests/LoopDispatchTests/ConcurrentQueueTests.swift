import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

@Suite struct ConcurrentQueueTests {
  /// Items in flight keep their concurrent queue alive (the pool's jobs hold it unretained:
  /// the queue retains itself while items run), and the queue is freed once they finish.
  @Test func itemsInFlightKeepTheirQueueAliveAndItIsFreedAfterThem() {
    let release = Latch()
    let started = Counter()
    let allStarted = Latch()
    let finished = Latch()
    let freed = Latch()
    weak var weakQueue: Queue?
    do {
      let queue = Queue(label: "in-flight", attributes: .concurrent)
      queue.setFinalizer { _ in freed.open() }
      weakQueue = queue
      for _ in 0..<3 {
        queue.async {
          if started.increment() == 3 { allStarted.open() }
          _ = release.wait(seconds: 30)
        }
      }
      queue.async(flags: .barrier) { finished.open() }
      #expect(allStarted.wait(seconds: 30))
    }
    // Our reference is gone; the items (and the barrier behind them) still hold the queue.
    #expect(weakQueue != nil)
    #expect(!freed.wait(seconds: 0))
    release.open()
    #expect(finished.wait(seconds: 30))
    #expect(freed.wait(seconds: 30))
  }

  /// Many items waiting behind a barrier start in several holds of the queue's lock when it
  /// ends, while the first of them may already finish: with the caller's reference gone, the
  /// queue must live until the last one (AddressSanitizer, in `make test-leaks`, sees a use
  /// after free if it does not).
  @Test func aLongRunReleasedByABarrierOutlivesTheLastReference() {
    for _ in 0..<20 {
      let release = Latch()
      let ran = Counter()
      let allRan = Latch()
      let freed = Latch()
      let items = 200
      do {
        let queue = Queue(label: "long-run", attributes: .concurrent)
        queue.setFinalizer { _ in freed.open() }
        queue.async(flags: .barrier) { _ = release.wait(seconds: 30) }
        for _ in 0..<items {
          queue.async { if ran.increment() == items { allRan.open() } }
        }
      }
      release.open()
      #expect(allRan.wait(seconds: 30))
      #expect(freed.wait(seconds: 30))
    }
  }

  @Test func itemsReallyRunInParallel() {
    let queue = Queue(label: "parallel", attributes: .concurrent)
    // Two items that can only finish if both are running at the same time.
    let arrived = Counter()
    let bothInside = Latch()
    let finished = Counter()
    let done = Latch()
    for _ in 0..<2 {
      queue.async {
        if arrived.increment() == 2 { bothInside.open() }
        let met = bothInside.wait(seconds: 30)
        if met && finished.increment() == 2 { done.open() }
      }
    }
    #expect(done.wait(seconds: 60))
  }

  @Test func barriersExcludeReadersAndWritersUnderLoad() {
    let queue = Queue(label: "rw", attributes: .concurrent)
    let readers = Atomic<Int>(0)
    let writers = Atomic<Int>(0)
    let violations = Counter()
    let finished = Counter()
    let done = Latch()
    let operations = scaled(30_000) / 40 * 40
    // Protected by: the barrier (only written while no reader or writer runs).
    let store = Shared([Int: Int]())
    for producer in 0..<4 {
      Queue.global().async {
        for index in 0..<(operations / 4) {
          if index % 10 == 0 {
            queue.async(flags: .barrier) {
              if writers.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue != 1
                || readers.load(ordering: .sequentiallyConsistent) != 0
              {
                violations.increment()
              }
              store.value[producer * 100_000 + index] = index
              writers.wrappingSubtract(1, ordering: .sequentiallyConsistent)
              if finished.increment() == operations { done.open() }
            }
          } else {
            let read: @Sendable () -> Void = {
              readers.wrappingAdd(1, ordering: .sequentiallyConsistent)
              if writers.load(ordering: .sequentiallyConsistent) != 0 { violations.increment() }
              _ = store.value.count
              readers.wrappingSubtract(1, ordering: .sequentiallyConsistent)
            }
            if index % 2 == 0 {
              queue.sync(execute: read)
              if finished.increment() == operations { done.open() }
            } else {
              queue.async {
                read()
                if finished.increment() == operations { done.open() }
              }
            }
          }
        }
      }
    }
    #expect(done.wait(seconds: 120))
    #expect(violations.current == 0)
    #expect(queue.sync(flags: .barrier) { store.value.count } == operations / 10)
  }

  @Test func widthLimitHoldsThroughTargetChains() {
    let outer = Queue(label: "outer", attributes: .concurrent, width: 2)
    let inner = Queue(label: "inner", attributes: .concurrent, width: 8, target: outer)
    let running = Atomic<Int>(0)
    let maximum = Atomic<Int>(0)
    let finished = Counter()
    let done = Latch()
    let twoAtOnce = Latch()
    let items = scaled(2_000)
    for _ in 0..<items {
      inner.async {
        let now = running.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
        var seen = maximum.load(ordering: .relaxed)
        while now > seen {
          let (exchanged, original) = maximum.compareExchange(
            expected: seen, desired: now, ordering: .relaxed)
          if exchanged { break }
          seen = original
        }
        // No item returns before two have run at once: with a width of 1 in effect, the first
        // would wait out the latch's deadline and `maximum` would stay 1.
        if now >= 2 { twoAtOnce.open() }
        _ = twoAtOnce.wait(seconds: 30)
        for _ in 0..<200 { spinHint() }
        running.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        if finished.increment() == items { done.open() }
      }
    }
    #expect(done.wait(seconds: 90))
    #expect(maximum.load(ordering: .relaxed) == 2)
  }

  /// `sync` readers of a concurrent queue whose target is another concurrent queue run on
  /// their callers' threads side by side (libdispatch's `dispatch_readsync`): more at once
  /// than the plain pool has threads (64), which a `sync` that parks a worker for its reader
  /// can never reach.
  @Test func syncReadersThroughAConcurrentTargetRunSideBySide() {
    let outer = Queue(label: "readsync-outer", attributes: .concurrent)
    let inner = Queue(label: "readsync-inner", attributes: .concurrent, target: outer)
    let callers = 80
    let arrived = Counter()
    let allInside = Latch()
    let met = Counter()
    let threads = (0..<callers).map { _ in
      startThread {
        inner.sync {
          if arrived.increment() == callers { allInside.open() }
          if allInside.wait(seconds: 20) { met.increment() }
        }
      }
    }
    for thread in threads { pthread_join(thread, nil) }
    #expect(met.current == callers)
  }

  /// The same readers hold a slot of the target: its width caps them, and its barriers and
  /// their own queue's exclude them.
  @Test func syncReadersThroughATargetKeepItsWidthAndBarriers() {
    let outer = Queue(label: "sync-outer", attributes: .concurrent, width: 2)
    let inner = Queue(label: "sync-inner", attributes: .concurrent, target: outer)
    let readers = Atomic<Int>(0)
    let writers = Atomic<Int>(0)
    let maximum = Atomic<Int>(0)
    let violations = Counter()
    let twoAtOnce = Latch()
    let laps = scaled(400)
    let write: @Sendable () -> Void = {
      if writers.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue != 1
        || readers.load(ordering: .sequentiallyConsistent) != 0
      {
        violations.increment()
      }
      for _ in 0..<50 { spinHint() }
      writers.wrappingSubtract(1, ordering: .sequentiallyConsistent)
    }
    let threads = (0..<6).map { _ in
      startThread {
        for lap in 1...laps {
          inner.sync {
            let now = readers.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
            if writers.load(ordering: .sequentiallyConsistent) != 0 { violations.increment() }
            maximum.max(now, ordering: .relaxed)
            // The first readers wait until two run at once (so `maximum` reaches the width).
            if now >= 2 { twoAtOnce.open() }
            _ = twoAtOnce.wait(seconds: 30)
            for _ in 0..<50 { spinHint() }
            readers.wrappingSubtract(1, ordering: .sequentiallyConsistent)
          }
          switch lap % 30 {
          case 0: inner.sync(flags: .barrier, execute: write)
          case 10: inner.async(flags: .barrier, execute: write)
          case 20: outer.async(flags: .barrier, execute: write)
          default: break
          }
        }
      }
    }
    for thread in threads { pthread_join(thread, nil) }
    outer.sync(flags: .barrier) {}  // After the async barriers.
    #expect(maximum.load(ordering: .relaxed) == 2)
    #expect(violations.current == 0)
  }

  @Test func serialQueueStaysSerialThroughAConcurrentTarget() {
    let concurrent = Queue(label: "wide", attributes: .concurrent)
    let serial = Queue(label: "narrow", target: concurrent)
    let inside = Atomic<Int>(0)
    let overlaps = Counter()
    let log = Shared([Int]())  // Only touched on `serial`.
    for index in 0..<5_000 {
      serial.async {
        if inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue != 1 {
          overlaps.increment()
        }
        log.value.append(index)
        inside.wrappingSubtract(1, ordering: .sequentiallyConsistent)
      }
    }
    #expect(serial.sync { log.value } == Array(0..<5_000))
    #expect(overlaps.current == 0)
  }

  @Test func barrierSyncRunsAloneAndReturnsAValue() {
    let queue = Queue(label: "barrier-sync", attributes: .concurrent)
    let value = queue.sync(flags: .barrier) { Queue.current?.label }
    #expect(value == "barrier-sync")
  }

  @Test func suspendAndInactiveHoldConcurrentWork() {
    let queue = Queue(label: "c-inactive", attributes: [.concurrent, .initiallyInactive])
    let ran = Counter()
    for _ in 0..<10 { queue.async { ran.increment() } }
    let probe = Latch()
    Queue.global().async { probe.open() }
    _ = probe.wait()
    #expect(ran.current == 0)
    queue.activate()
    #expect(queue.sync(flags: .barrier) { ran.current } == 10)
    queue.suspend()
    queue.async { ran.increment() }
    Queue.global().sync {}
    #expect(ran.current == 10)
    queue.resume()
    #expect(queue.sync(flags: .barrier) { ran.current } == 11)
  }

  @Test func barrierOnGlobalQueueIsAPlainSubmission() {
    let done = Latch()
    Queue.global().async(flags: .barrier) { done.open() }
    #expect(done.wait())
    #expect(Queue.global(.high).sync(flags: .barrier) { 7 } == 7)
  }

  #if DEBUG
    /// `Queue+Concurrent.swift`, step 1: behind a backlog, a submission is appended under the
    /// lock without writing the queue's word. Only the first item held by a suspension writes
    /// it (setting PENDING); the other 99 find the backlog hint up. The held items keep their
    /// order (each barrier sees exactly the items submitted before it finished), and once the
    /// backlog is gone the hint is down again. Fails with every submission writing the word
    /// (100), or with a hint that stays up.
    @Test func submissionsBehindABacklogLeaveTheWordAlone() {
      let queue = Queue(label: "concurrent.backlog", attributes: .concurrent)
      let done = Counter()
      let violations = Counter()
      queue.suspend()
      for index in 0..<100 {
        if index % 10 == 9 {
          queue.async(flags: .barrier) {
            // Every earlier item (index of them) has finished; none later has started.
            if done.increment() != index + 1 { violations.increment() }
          }
        } else {
          queue.async { _ = done.increment() }
        }
      }
      #expect(queue.submitWordWrites == 1)
      #expect(queue.backlogHintIsUp)
      queue.resume()
      queue.sync(flags: .barrier) {}
      #expect(done.current == 100)
      #expect(violations.current == 0)
      #expect(!queue.backlogHintIsUp)
      // No backlog: the next item starts with one write (counted from here: whether the
      // `sync` above wrote the word depends on the path it took).
      let before = queue.submitWordWrites
      queue.async {}
      #expect(queue.submitWordWrites == before + 1)
    }
  #endif
}
