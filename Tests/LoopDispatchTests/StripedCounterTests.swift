import Glibc
import Testing

@testable import LoopDispatch

/// `StripedCounter`: no add is lost across threads and CPUs, and its stripes are whole lines.
@Suite struct StripedCounterTests {
  @Test func addsFromManyThreadsAreAllCounted() async {
    let counter = StripedCounter(cpus: 4)
    await withTaskGroup(of: Void.self) { group in
      for _ in 0..<8 {
        group.addTask {
          for step in 0..<20_000 {
            counter.increment()
            // Move between CPUs now and then, so adds land on several stripes.
            if step % 1_000 == 0 { sched_yield() }
          }
        }
      }
    }
    #expect(counter.value == 160_000)
  }

  @Test func aSerialQueueCountsEverySubmissionFromManyThreads() {
    let queue = Queue(label: "striped-count")
    let done = Group()
    Queue.concurrentPerform(iterations: 4) { _ in
      for _ in 0..<5_000 { queue.async(group: done) {} }
    }
    done.wait()
    // Every submission was counted before its item ran (completions may still be counting).
    let figures = RuntimeStats.current.queues.filter { $0.label == "striped-count" }
    #expect(figures.count == 1)
    #expect(figures.first?.submitted == 20_000)
    withExtendedLifetime(queue) {}
  }

  @Test func stripesAreWholeAlignedLines() {
    #expect(StripedCounter.stripeBytes == 128)
    #expect(StripedCounter.maximumStripes & (StripedCounter.maximumStripes - 1) == 0)
  }
}
