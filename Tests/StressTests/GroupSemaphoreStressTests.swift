import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

extension Stress {
  /// Groups entered, left, waited on and notified from many threads; semaphores as a mutex
  /// and as a counting pool.
  @Suite struct GroupsAndSemaphores {
    @Test func groupWaitsSeeEveryItemOfTheirRoundAndNotificationsRunOnce() {
      let total = stressSize(1_000_000)
      let threads = 8
      let perRound = 16
      let rounds = Swift.max(1, total / (threads * perRound))
      let items = threads * rounds * perRound
      let runs = AtomicCounters(count: items)
      let notified = AtomicCounters(count: threads * rounds)
      let stale = Counter()
      let everything = Group()
      let queues = (0..<threads).map { Queue(label: "group.serial.\($0)") }

      let meter = StressMeter("group storm (\(threads) threads)")
      onThreads(threads) { thread in
        var random = StressRandom(seed: thread)
        // One group per thread, reused every round. `slots` is written by the round's items
        // (one slot each, plain writes) and read by this thread after `round.wait`, which
        // must order those writes before the reads (ThreadSanitizer checks it).
        let round = Group()
        let slots = UnsafeMutableBufferPointer<Int>.allocate(capacity: perRound)
        slots.initialize(repeating: -1)
        defer { slots.deallocate() }
        let shared = SendableBuffer(slots)
        for roundNumber in 0..<rounds {
          for slot in 0..<perRound {
            let index = (thread * rounds + roundNumber) * perRound + slot
            let work: @Sendable () -> Void = {
              shared.buffer[slot] = roundNumber
              runs.increment(index)
            }
            switch random.next(3) {
            case 0:
              Queue.global().async(group: round) {
                everything.enter()
                work()
                everything.leave()
              }
            case 1:
              round.enter()
              everything.enter()
              queues[thread].async {
                work()
                everything.leave()
                round.leave()
              }
            default:
              round.enter()
              Queue.global().async(group: everything) {
                work()
                round.leave()
              }
            }
          }
          everything.enter()
          round.notify(queue: .global()) {
            notified.increment(thread * rounds + roundNumber)
            everything.leave()
          }
          if random.next(8) == 0 { _ = everything.wait(timeout: .microseconds(50)) }
          if round.wait(timeout: .seconds(60)) != .success {
            Issue.record("round \(roundNumber) of thread \(thread) never emptied")
            return
          }
          for slot in 0..<perRound where slots[slot] != roundNumber { stale.increment() }
        }
      }
      #expect(everything.wait(timeout: .seconds(60)) == .success)
      meter.finish(items: items)

      #expect(runs.histogram(0..<items) == [1: items], "runs per item → items")
      #expect(notified.histogram(0..<threads * rounds) == [1: threads * rounds])
      #expect(stale.current == 0, "a wait returned before its items' effects were visible")
    }

    @Test func aSemaphoreOfOneIsAMutexAndOfThreeAdmitsThree() {
      let total = stressSize(2_000_000)
      let threads = 8
      let perThread = total / threads
      // Protected by: `mutex` (plain reads and writes; ThreadSanitizer checks the semaphore
      // orders them).
      let counter = Shared(0)
      let mutex = Semaphore(value: 1)
      let timeouts = Counter()

      let meter = StressMeter("semaphore as mutex (\(threads) threads)")
      onThreads(threads) { thread in
        for _ in 0..<perThread {
          if thread % 2 == 0 {
            _ = mutex.wait()
          } else {
            // Short timeouts exercise the give-back path racing with signal().
            while mutex.wait(timeout: .microseconds(20)) == .timedOut { timeouts.increment() }
          }
          counter.value += 1
          mutex.signal()
        }
      }
      meter.finish(items: threads * perThread)
      #expect(counter.value == threads * perThread)
      print("stress semaphore as mutex: \(timeouts.current) timed-out waits")

      let poolTotal = stressSize(500_000)
      let pool = Semaphore(value: 3)
      let inside = Atomic<Int>(0)
      let overfull = Counter()
      let admitted = Counter()
      let poolMeter = StressMeter("semaphore of three (\(threads) threads)")
      onThreads(threads) { thread in
        for _ in 0..<poolTotal / threads {
          if thread % 2 == 0 {
            _ = pool.wait()
          } else {
            while pool.wait(timeout: .microseconds(20)) == .timedOut {}
          }
          if inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue > 3 {
            overfull.increment()
          }
          admitted.increment()
          inside.wrappingSubtract(1, ordering: .sequentiallyConsistent)
          pool.signal()
        }
      }
      poolMeter.finish(items: admitted.current)
      #expect(overfull.current == 0)
      #expect(admitted.current == threads * (poolTotal / threads))
    }
  }
}
