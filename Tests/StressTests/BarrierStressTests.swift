import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

extension Stress {
  /// Readers and barrier writers on one concurrent queue, submitted from eight threads,
  /// asynchronously and with `sync`.
  @Suite struct BarrierReadersWriters {
    @Test func noReadOverlapsAWriteAndWritersRunAlone() {
      let total = stressSize(1_000_000)
      let threads = 8
      let perThread = total / threads
      let queue = Queue(label: "barrier.store", attributes: .concurrent)
      // Protected by: the queue's barriers (written only in barrier items, read by readers;
      // plain accesses, so ThreadSanitizer checks the queue orders them).
      let store = Shared(0)
      let readers = Atomic<Int>(0)
      let writers = Atomic<Int>(0)
      let readDuringWrite = Counter()
      let writeDuringOther = Counter()
      let wentBack = Counter()
      let writes = Counter()
      let runs = AtomicCounters(count: threads * perThread)
      let done = Group()
      // Both closures check the other side with sequentially consistent counters: a read
      // and a write that overlapped would each see the other's increment.
      let write: @Sendable (Int) -> Void = { index in
        if writers.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue != 1
          || readers.load(ordering: .sequentiallyConsistent) != 0
        {
          writeDuringOther.increment()
        }
        store.value += 1
        writes.increment()
        runs.increment(index)
        writers.wrappingSubtract(1, ordering: .sequentiallyConsistent)
      }
      let read: @Sendable (Int) -> Int = { index in
        readers.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if writers.load(ordering: .sequentiallyConsistent) != 0 { readDuringWrite.increment() }
        let value = store.value
        runs.increment(index)
        readers.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        return value
      }

      let meter = StressMeter("barrier readers/writers (\(threads) threads)")
      onThreads(threads) { thread in
        var random = StressRandom(seed: thread)
        // The last value this thread's `sync` reads saw: it never goes back.
        var lastSeen = 0
        for step in 0..<perThread {
          let index = thread * perThread + step
          switch random.next(32) {
          case 0, 1: queue.async(group: done, flags: .barrier) { write(index) }
          case 2: queue.sync(flags: .barrier) { write(index) }
          case 3, 4:
            let seen = queue.sync { read(index) }
            if seen < lastSeen { wentBack.increment() }
            lastSeen = seen
          default: queue.async(group: done) { _ = read(index) }
          }
        }
      }
      #expect(done.wait(timeout: .seconds(300)) == .success)
      meter.finish(items: threads * perThread)

      #expect(runs.histogram(0..<threads * perThread) == [1: threads * perThread])
      #expect(readDuringWrite.current == 0)
      #expect(writeDuringOther.current == 0)
      #expect(wentBack.current == 0)
      #expect(queue.sync { store.value } == writes.current)
      print("stress barrier readers/writers: \(writes.current) writes")
    }
  }
}
