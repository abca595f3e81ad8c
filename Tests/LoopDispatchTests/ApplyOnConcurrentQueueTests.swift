import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// `apply` onto a custom concurrent queue runs as work of that queue: after a barrier that
/// runs ahead of it, not while the queue is suspended, within its width; nested calls still
/// complete. (Before, its helpers went straight to the pool and ignored all three.)
@Suite struct ApplyOnConcurrentQueueTests {
  /// How long a test waits for an iteration that must not start yet.
  static let quietWindowSeconds = 1

  @Test func applyWaitsForARunningBarrier() {
    let queue = Queue(label: "apply-barrier", attributes: .concurrent)
    let barrierRunning = Atomic<Bool>(false)
    let ranDuringBarrier = Counter()
    let iterationStarted = Latch()
    let barrierStarted = Latch()
    let barrierSawAnIteration = Atomic<Bool>(false)
    queue.async(flags: .barrier) {
      barrierRunning.store(true, ordering: .sequentiallyConsistent)
      barrierStarted.open()
      // An iteration that starts now ran beside the barrier.
      let sawIteration = iterationStarted.wait(seconds: Self.quietWindowSeconds)
      barrierSawAnIteration.store(sawIteration, ordering: .sequentiallyConsistent)
      barrierRunning.store(false, ordering: .sequentiallyConsistent)
    }
    #expect(barrierStarted.wait(seconds: 30))
    queue.apply(iterations: 64) { _ in
      if barrierRunning.load(ordering: .sequentiallyConsistent) { ranDuringBarrier.increment() }
      iterationStarted.open()
    }
    #expect(ranDuringBarrier.current == 0)
    let sawIteration = barrierSawAnIteration.load(ordering: .sequentiallyConsistent)
    #expect(!sawIteration, "an iteration started while the barrier ran")
  }

  @Test func applyOnASuspendedQueueWaitsForResume() {
    let queue = Queue(label: "apply-suspended", attributes: .concurrent)
    queue.suspend()
    let resumed = Atomic<Bool>(false)
    let ranWhileSuspended = Counter()
    let iterationStarted = Latch()
    let finished = Latch()
    let caller = startThread {
      queue.apply(iterations: 16) { _ in
        if !resumed.load(ordering: .sequentiallyConsistent) { ranWhileSuspended.increment() }
        iterationStarted.open()
      }
      finished.open()
    }
    // No iteration may start while the queue is suspended.
    #expect(!iterationStarted.wait(seconds: Self.quietWindowSeconds))
    resumed.store(true, ordering: .sequentiallyConsistent)
    queue.resume()
    #expect(finished.wait(seconds: 30))
    pthread_join(caller, nil)
    #expect(ranWhileSuspended.current == 0)
  }

  @Test func applyKeepsWithinTheQueuesWidth() {
    let queue = Queue(label: "apply-width", attributes: .concurrent, width: 2)
    let running = Atomic<Int>(0)
    let maximum = Atomic<Int>(0)
    @Sendable func enter() {
      let now = running.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
      var seen = maximum.load(ordering: .relaxed)
      while now > seen {
        let (exchanged, original) = maximum.compareExchange(
          expected: seen, desired: now, ordering: .relaxed)
        if exchanged { break }
        seen = original
      }
    }
    // One item holds one of the two slots for the whole apply.
    let holderStarted = Latch()
    let release = Latch()
    let holderDone = Latch()
    queue.async {
      enter()
      holderStarted.open()
      _ = release.wait(seconds: 60)
      running.wrappingSubtract(1, ordering: .sequentiallyConsistent)
      holderDone.open()
    }
    #expect(holderStarted.wait(seconds: 30))
    queue.apply(iterations: 200) { _ in
      enter()
      for _ in 0..<2_000 { spinHint() }
      running.wrappingSubtract(1, ordering: .sequentiallyConsistent)
    }
    release.open()
    #expect(holderDone.wait(seconds: 30))
    #expect(maximum.load(ordering: .relaxed) <= 2)
  }

  @Test func nestedApplyOnANarrowConcurrentQueueCompletes() {
    let queue = Queue(label: "apply-nested", attributes: .concurrent, width: 2)
    let total = Counter()
    queue.apply(iterations: 8) { _ in
      queue.apply(iterations: 8) { _ in
        queue.apply(iterations: 4) { _ in total.increment() }
      }
    }
    #expect(total.current == 8 * 8 * 4)
  }
}
