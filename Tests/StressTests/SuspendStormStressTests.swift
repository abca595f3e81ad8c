import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

extension Stress {
  /// Threads suspending and resuming queues at random while producers submit to them.
  @Suite struct SuspendStorm {
    /// Per-producer order on one serial queue. Only touched by that queue's items, which
    /// run one at a time; read by the test after the group is empty.
    final class OrderLedger: @unchecked Sendable {
      // @unchecked Sendable: confined to the queue's items, then to the test (see above).
      var expected: [Int]
      var outOfOrder = 0
      init(producers: Int) { expected = [Int](repeating: 0, count: producers) }
    }

    /// One suspension held by a stormer. A probe submitted while it is held must not start
    /// before `released` is set, which happens just before the matching `resume()`.
    final class Hold: Sendable {
      let queue: Queue
      /// Atomic. Releasing store before `resume()`; pairs with the probe's acquiring load.
      let released = Atomic<Bool>(false)
      init(_ queue: Queue) { self.queue = queue }
    }

    @Test func everyItemRunsOnceInOrderWhileQueuesAreSuspendedAndResumedAtRandom() {
      let total = stressSize(2_000_000)
      let producers = 4
      let stormers = 4
      let serialCount = 16
      let queues =
        (0..<serialCount).map { Queue(label: "storm.serial.\($0)") }
        + (0..<3).map { Queue(label: "storm.concurrent.\($0)", attributes: .concurrent) }
        + [Queue(label: "storm.narrow", attributes: .concurrent, width: 2)]
      let ledgers = (0..<serialCount).map { _ in OrderLedger(producers: producers) }
      let runs = AtomicCounters(count: total)
      let items = Group()
      let producing = Atomic<Int>(producers)
      let probes = Counter()
      let earlyProbes = Counter()
      let suspensions = Counter()

      let meter = StressMeter("suspend/resume storm (\(queues.count) queues)")
      onThreads(producers + stormers) { thread in
        var random = StressRandom(seed: thread)
        if thread < producers {
          let producer = thread
          var nextSequence = [Int](repeating: 0, count: serialCount)
          for index in stride(from: producer, to: total, by: producers) {
            let target = random.next(queues.count)
            if target < serialCount {
              let ledger = ledgers[target]
              let sequence = nextSequence[target]
              nextSequence[target] += 1
              queues[target].async(group: items) {
                if ledger.expected[producer] != sequence { ledger.outOfOrder += 1 }
                ledger.expected[producer] = sequence + 1
                runs.increment(index)
              }
            } else {
              queues[target].async(group: items) { runs.increment(index) }
            }
          }
          producing.wrappingSubtract(1, ordering: .relaxed)
          return
        }
        // A stormer: up to three suspensions held at once (possibly of the same queue),
        // resumed in random order, until the producers are done; then all are released.
        var held: [Hold] = []
        var cycles = 0
        while producing.load(ordering: .relaxed) > 0 || cycles < 200 {
          cycles += 1
          if held.count < 3 && (held.isEmpty || random.next(2) == 0) {
            let hold = Hold(queues[random.next(queues.count)])
            hold.queue.suspend()
            suspensions.increment()
            held.append(hold)
            if random.next(4) == 0 {
              probes.increment()
              hold.queue.async(group: items) {
                // Acquiring; pairs with the releasing store before resume().
                if !hold.released.load(ordering: .acquiring) { earlyProbes.increment() }
              }
            }
          } else {
            let hold = held.remove(at: random.next(held.count))
            // Releasing; pairs with the probe's acquiring load.
            hold.released.store(true, ordering: .releasing)
            hold.queue.resume()
          }
        }
        for hold in held {
          hold.released.store(true, ordering: .releasing)
          hold.queue.resume()
        }
      }
      #expect(items.wait(timeout: .seconds(300)) == .success)
      meter.finish(items: total)

      #expect(runs.histogram(0..<total) == [1: total], "runs per item → items")
      #expect(ledgers.reduce(0) { $0 + $1.outOfOrder } == 0)
      #expect(earlyProbes.current == 0, "items ran while their queue was suspended")
      // Balanced: every queue still runs new work.
      let final = Group()
      let finalRuns = Counter()
      for queue in queues { queue.async(group: final) { finalRuns.increment() } }
      #expect(final.wait(timeout: .seconds(60)) == .success)
      #expect(finalRuns.current == queues.count)
      print(
        "stress suspend/resume storm: \(suspensions.current) suspensions,"
          + " \(probes.current) probes")
    }
  }
}
