import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

@Suite struct OnceTests {
  @Test func eightRacingThreadsRunTheClosureExactlyOnceAndAllSeeItsEffect() {
    let threads = 8
    for _ in 0..<scaled(50) {
      let once = Once()
      let runs = Counter()
      let arrived = Counter()
      let sawEffect = Counter()
      // Not atomic on purpose: only `Once` orders the write before the other threads' reads.
      let effect = Shared(0)
      let go = Latch()
      let racers = (0..<threads).map { _ in
        SyncTestThread.start {
          _ = go.wait()
          arrived.increment()
          once.run {
            runs.increment()
            // Hold the others off until they have all arrived, so they meet a run in
            // progress and have to wait for it.
            let limit = Deadline.now + .seconds(10)
            while arrived.current < threads && Deadline.now < limit { sched_yield() }
            effect.value = 42
          }
          if effect.value == 42 { sawEffect.increment() }
        }
      }
      go.open()
      for racer in racers { #expect(racer.join()) }
      #expect(runs.current == 1)
      #expect(sawEffect.current == threads)
      #expect(once.isDone)
    }
  }

  @Test func laterCallsDoNotRunTheClosure() {
    let once = Once()
    let runs = Counter()
    #expect(!once.isDone)
    once.run { runs.increment() }
    #expect(once.isDone)
    for _ in 0..<3 { once.run { runs.increment() } }
    #expect(runs.current == 1)
    // Also from other threads, through the pool.
    Queue.concurrentPerform(iterations: 100) { _ in once.run { runs.increment() } }
    #expect(runs.current == 1)
  }

  @Test func poolThreadsRacingRunItOnce() {
    for _ in 0..<scaled(200) {
      let once = Once()
      let runs = Counter()
      let effect = Shared(0)  // Ordered by `Once` alone, as above.
      let sawEffect = Counter()
      Queue.concurrentPerform(iterations: 16) { _ in
        once.run {
          runs.increment()
          effect.value = 7
        }
        if effect.value == 7 { sawEffect.increment() }
      }
      #expect(runs.current == 1)
      #expect(sawEffect.current == 16)
    }
  }

  @Test func recursiveRunTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let once = Once()
      once.run { once.run {} }
    }
    expectMessage(result, "Once.run called recursively")
  }
}
