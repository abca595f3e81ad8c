import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

extension Stress {
  /// Ten million items from eight producer threads into a thousand serial queues.
  @Suite struct SerialFanIn {
    /// What one serial queue has seen. Only touched by items of that queue, which run one
    /// at a time; read by the test after `done` opened.
    final class QueueLedger: @unchecked Sendable {
      // @unchecked Sendable: confined to the queue's items, then to the test (see above).
      /// The next sequence number expected from each producer.
      var expected: [Int]
      var ran = 0
      var outOfOrder = 0
      var sentinels = 0
      init(expected: [Int]) { self.expected = expected }
    }

    @Test func itemsFromEightProducersRunOnceInOrderOnAThousandSerialQueues() {
      let total = stressSize(10_000_000)
      let producers = 8
      let queueCount = 1_000
      let queues = (0..<queueCount).map { Queue(label: "fan-in.\($0)") }
      // Producer p sends its item j to queue (j + p) % queueCount, so queue q receives from
      // p exactly the j ≡ q - p (mod queueCount), in steps of queueCount.
      let ledgers = (0..<queueCount).map { queue in
        QueueLedger(
          expected: (0..<producers).map { producer in
            ((queue - producer) % queueCount + queueCount) % queueCount
          })
      }
      // Each producer ends with a sentinel on every queue; queues are FIFO per producer,
      // so the last sentinel to run means every item has run.
      let sentinelsLeft = Atomic<Int>(producers * queueCount)
      let done = Latch()
      let perProducer = (0..<producers).map { producer in
        total / producers + (producer < total % producers ? 1 : 0)
      }

      let meter = StressMeter("serial fan-in (\(queueCount) queues, \(producers) producers)")
      onThreads(producers) { producer in
        for sequence in 0..<perProducer[producer] {
          let index = (sequence + producer) % queueCount
          let ledger = ledgers[index]
          queues[index].async {
            if ledger.expected[producer] != sequence { ledger.outOfOrder += 1 }
            ledger.expected[producer] = sequence + queueCount
            ledger.ran += 1
          }
        }
        for index in 0..<queueCount {
          let ledger = ledgers[index]
          queues[index].async {
            ledger.sentinels += 1
            // Sequentially consistent; the last decrement opens the latch, which orders
            // every ledger write before the test reads them.
            if sentinelsLeft.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue == 0 {
              done.open()
            }
          }
        }
      }
      #expect(done.wait(seconds: 600))
      meter.finish(items: total)

      #expect(ledgers.reduce(0) { $0 + $1.ran } == total)
      #expect(ledgers.reduce(0) { $0 + $1.outOfOrder } == 0)
      #expect(ledgers.allSatisfy { $0.sentinels == producers })
      // Every producer's last item reached each queue: nothing lost at the tail either.
      for (queue, ledger) in ledgers.enumerated() {
        for producer in 0..<producers {
          let first = ((queue - producer) % queueCount + queueCount) % queueCount
          let sent =
            first < perProducer[producer]
            ? (perProducer[producer] - 1 - first) / queueCount + 1 : 0
          if ledger.expected[producer] != first + sent * queueCount {
            Issue.record("queue \(queue) producer \(producer): \(ledger.expected[producer])")
          }
        }
      }
    }
  }
}
