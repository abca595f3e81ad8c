import Dispatch
import Glibc
import LoopDispatch

/// LoopDispatch's queues against Dispatch's: submission throughput (global, serial, many
/// queues), the `sync` fast path, hops between serial queues, `apply`, a reader/writer
/// concurrent queue, and the memory an idle queue costs.
///
/// Both sides do identical work: the same closures (counted down through ``Countdown``, which
/// they reach without capturing anything), the same ``Latch`` to wait on, the same clock.
enum QueueBenchmarks {
  static let asyncItems = 1_000_000
  static let syncCalls = 1_000_000
  static let bounces = 200_000
  static let applyIterations = 4_000_000
  static let readerWriterOperations = 300_000
  /// Every `writerInterval`-th reader/writer operation is a barrier write.
  static let writerInterval = 10
  static let manyQueues = 100_000
  static let itemsPerQueue = 10
  static let idleQueues = 100_000

  static var group: BenchmarkGroup {
    let notSlower = Target.ratioAtMost(1.0, "Dispatch")
    let halfDispatch = Target.ratioAtMost(0.5, "Dispatch")
    // Issue 22's goal for the hop between two serial queues.
    let bounceTarget = Target.ratioAtMost(0.3, "Dispatch")
    return BenchmarkGroup(
      name: "queue",
      benchmarks: [
        Benchmark(
          key: "global",
          name: "1M empty closures onto the default global queue",
          unit: "ns/item", direction: .lowerIsBetter, rivalName: "Dispatch", target: halfDispatch,
          ours: { oursGlobalAsync(items: asyncItems) },
          rival: { dispatchGlobalAsync(items: asyncItems) }),
        Benchmark(
          key: "globalcapture",
          name: "1M closures each capturing a pointer onto the global queue from main",
          unit: "ns/item", direction: .lowerIsBetter, rivalName: "Dispatch", target: halfDispatch,
          ours: { oursGlobalCapture(items: captureItems) },
          rival: { dispatchGlobalCapture(items: captureItems) }),
        Benchmark(
          key: "serial",
          name: "1M empty closures onto one serial queue",
          unit: "ns/item", direction: .lowerIsBetter, rivalName: "Dispatch", target: notSlower,
          ours: { oursSerialAsync(items: asyncItems) },
          rival: { dispatchSerialAsync(items: asyncItems) }),
        Benchmark(
          key: "sync",
          name: "1M uncontended sync on a serial queue (one thread)",
          unit: "ns/sync", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: halfDispatch,
          ours: { oursSync(calls: syncCalls) },
          rival: { dispatchSync(calls: syncCalls) }),
        Benchmark(
          key: "bounce",
          name: "token bounced between two serial queues, 200k hops",
          unit: "ns/hop", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: bounceTarget,
          ours: { OursBounce.run(hops: bounces) },
          rival: { DispatchBounce.run(hops: bounces) }),
        Benchmark(
          key: "apply",
          name: "concurrentPerform over 4M tiny iterations",
          unit: "ms", direction: .lowerIsBetter, rivalName: "Dispatch", target: notSlower,
          ours: { oursApply(iterations: applyIterations) },
          rival: { dispatchApply(iterations: applyIterations) }),
        Benchmark(
          key: "rw",
          name: "reader/writer concurrent queue, 300k ops (1 in 10 a barrier write)",
          unit: "ns/op", direction: .lowerIsBetter, rivalName: "Dispatch", target: notSlower,
          ours: { oursReaderWriter(operations: readerWriterOperations) },
          rival: { dispatchReaderWriter(operations: readerWriterOperations) }),
        Benchmark(
          key: "producers8",
          name: "8 threads at once, 1M items, half onto the global queue, half onto 8 serial",
          unit: "ns/item", direction: .lowerIsBetter, rivalName: "Dispatch", target: notSlower,
          ours: { oursProducers(items: producerItems) },
          rival: { dispatchProducers(items: producerItems) }),
        Benchmark(
          key: "groupmain",
          name: "1M empty closures async(group:) on the global queue from main, then wait()",
          unit: "ns/item", direction: .lowerIsBetter, rivalName: "Dispatch", target: halfDispatch,
          ours: { oursGroupMain(items: groupMainItems) },
          rival: { dispatchGroupMain(items: groupMainItems) }),
        Benchmark(
          key: "manyqueues",
          name: "100k serial queues × 10 items (create, submit, all run)",
          unit: "ns/item", direction: .lowerIsBetter, rivalName: "Dispatch", target: notSlower,
          ours: { oursManyQueues(queues: manyQueues, itemsEach: itemsPerQueue) },
          rival: { dispatchManyQueues(queues: manyQueues, itemsEach: itemsPerQueue) }),
        Benchmark(
          key: "idlememory",
          name: "memory per idle serial queue (RSS growth over 100k queues)",
          unit: "bytes/queue", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: notSlower,
          ours: { bytesPerIdleQueue(count: idleQueues) { Queue(label: "bench.idle") } },
          rival: {
            bytesPerIdleQueue(count: idleQueues) { DispatchQueue(label: "bench.idle") }
          }),
      ])
  }

  // MARK: - async throughput

  /// `items` counted closures onto the default global queue; wall and CPU ns per item from
  /// the first submission until the last closure ran.
  static func oursGlobalAsync(items: Int) -> Measurement {
    Countdown.measure(total: items) {
      let queue = Queue.global()
      let start = ClockReading.start()
      for _ in 0..<items { queue.async { Countdown.tickActive() } }
      return start
    }
  }

  static func dispatchGlobalAsync(items: Int) -> Measurement {
    Countdown.measure(total: items) {
      let queue = DispatchQueue.global()
      let start = ClockReading.start()
      for _ in 0..<items { queue.async { Countdown.tickActive() } }
      return start
    }
  }

  /// `items` counted closures onto a fresh serial queue; ns per item, as above.
  static func oursSerialAsync(items: Int) -> Double {
    let queue = Queue(label: "bench.serial")
    return Countdown.measure(total: items) {
      let start = ClockReading.start()
      for _ in 0..<items { queue.async { Countdown.tickActive() } }
      return start
    }.wall
  }

  static func dispatchSerialAsync(items: Int) -> Double {
    let queue = DispatchQueue(label: "bench.serial")
    return Countdown.measure(total: items) {
      let start = ClockReading.start()
      for _ in 0..<items { queue.async { Countdown.tickActive() } }
      return start
    }.wall
  }

  // MARK: - sync fast path

  /// `calls` `sync`s onto an idle serial queue from this thread; ns per call. The closure
  /// bumps a local counter, checked afterwards, so the call cannot be dropped.
  static func oursSync(calls: Int) -> Double {
    let queue = Queue(label: "bench.sync")
    var count = 0
    let start = Stopwatch.now()
    for _ in 0..<calls { queue.sync { count &+= 1 } }
    let elapsed = Stopwatch.now() - start
    if count != calls { benchmarkFailure("sync ran \(count) of \(calls) closures") }
    return Double(elapsed) / Double(calls)
  }

  static func dispatchSync(calls: Int) -> Double {
    let queue = DispatchQueue(label: "bench.sync")
    var count = 0
    let start = Stopwatch.now()
    for _ in 0..<calls { queue.sync { count &+= 1 } }
    let elapsed = Stopwatch.now() - start
    if count != calls { benchmarkFailure("sync ran \(count) of \(calls) closures") }
    return Double(elapsed) / Double(calls)
  }

  // MARK: - many queues

  /// Creates `queues` serial queues, submitting `itemsEach` counted closures to each as it is
  /// created; ns per item from the first creation until the last item ran. The queues are
  /// released after the clock stops.
  static func oursManyQueues(queues: Int, itemsEach: Int) -> Double {
    var created: [Queue] = []
    created.reserveCapacity(queues)
    return Countdown.measure(total: queues * itemsEach) {
      let start = ClockReading.start()
      for _ in 0..<queues {
        let queue = Queue(label: "bench.many")
        for _ in 0..<itemsEach { queue.async { Countdown.tickActive() } }
        created.append(queue)
      }
      return start
    }.wall
  }

  static func dispatchManyQueues(queues: Int, itemsEach: Int) -> Double {
    var created: [DispatchQueue] = []
    created.reserveCapacity(queues)
    return Countdown.measure(total: queues * itemsEach) {
      let start = ClockReading.start()
      for _ in 0..<queues {
        let queue = DispatchQueue(label: "bench.many")
        for _ in 0..<itemsEach { queue.async { Countdown.tickActive() } }
        created.append(queue)
      }
      return start
    }.wall
  }

  // MARK: - idle memory

  /// Resident memory added by `count` idle queues made by `make`, in bytes per queue.
  ///
  /// The array holding them is filled (so its pages are resident) and the heap trimmed
  /// before the first reading, so the growth is the queues' own.
  static func bytesPerIdleQueue<Q>(count: Int, _ make: () -> Q) -> Double {
    var queues = [Q?](repeating: nil, count: count)
    Memory.trimHeap()
    let before = Memory.residentBytes()
    for index in 0..<count { queues[index] = make() }
    let after = Memory.residentBytes()
    withExtendedLifetime(queues) {}
    return Double(after - before) / Double(count)
  }
}
