import Dispatch
import Glibc
import LoopDispatch

/// The queue rows with submitters other than one worker: eight producer threads at once
/// (half onto the default global queue, half onto one serial queue each), and a group fanned
/// out over the global queue from the thread running the harness (the main thread).
extension QueueBenchmarks {
  static let producerThreads = 8
  static let producerItems = 1_000_000
  static let groupMainItems = 1_000_000

  // MARK: - eight producers

  /// Per-producer counts of the items that ran on that producer's serial queue, one cache
  /// line apart so the eight serial queues' drainers do not share a line.
  enum ProducerCounts {
    // nonisolated(unsafe): slot `t` is only written by items on producer `t`'s serial queue
    // (one at a time), reset by the harness thread before the producers start and read by it
    // after the last item ran (``Countdown`` orders both).
    nonisolated(unsafe) static let slots: UnsafeMutablePointer<Int> = {
      let slots = UnsafeMutablePointer<Int>.allocate(capacity: stride * producerThreads)
      slots.initialize(repeating: 0, count: stride * producerThreads)
      return slots
    }()
    /// Ints per slot: one 64-byte cache line.
    static let stride = 8

    @inline(__always)
    static func bump(_ producer: Int) { slots[producer * stride] &+= 1 }

    static func reset() {
      for producer in 0..<producerThreads { slots[producer * stride] = 0 }
    }

    /// Traps unless every producer's serial queue ran `each` items.
    static func verify(each: Int) {
      for producer in 0..<producerThreads where slots[producer * stride] != each {
        benchmarkFailure(
          "producer \(producer)'s serial queue ran \(slots[producer * stride]) of \(each) items")
      }
    }
  }

  /// The body of producer `producer`'s serial items: its slot, then ``Countdown``.
  @inline(__always)
  static func serialItem(_ producer: Int) {
    ProducerCounts.bump(producer)
    Countdown.tickActive()
  }

  /// The serial items, one per producer: closures that capture nothing (so a submission
  /// retains no context), each running ``serialItem(_:)`` with its producer's number.
  static let serialItems: [@Sendable () -> Void] = [
    { serialItem(0) },
    { serialItem(1) },
    { serialItem(2) },
    { serialItem(3) },
    { serialItem(4) },
    { serialItem(5) },
    { serialItem(6) },
    { serialItem(7) },
  ]

  /// Eight threads released together, each submitting `items / 8` items, alternately onto the
  /// default global queue and onto its own serial queue (created before the start). Every item
  /// counts down ``Countdown``; the serial items also count per queue (``ProducerCounts``),
  /// checked at the end. Wall and CPU ns per item from the release until the last item ran.
  ///
  /// `body(t)` is producer `t`'s submitting loop (side-specific, so the loop calls the
  /// runtime directly); it runs after the start barrier.
  static func producers(
    items: Int, body: (_ producer: Int, _ perThread: Int) -> @Sendable () -> Void
  ) -> Measurement {
    let perThread = items / producerThreads
    let total = perThread * producerThreads
    let bodies = (0..<producerThreads).map { body($0, perThread) }
    let start = StartBarrier(threads: producerThreads)
    ProducerCounts.reset()
    var threads: [BenchThread] = []
    let measurement = Countdown.measure(total: total) {
      for producer in 0..<producerThreads {
        let run = bodies[producer]
        threads.append(
          BenchThread.spawn {
            start.arrive()
            run()
          })
      }
      start.waitForAll()
      let reading = ClockReading.start()
      start.go()
      return reading
    }
    for thread in threads { thread.join() }
    ProducerCounts.verify(each: perThread / 2)
    return measurement
  }

  static func oursProducers(items: Int) -> Measurement {
    let serials = (0..<producerThreads).map { _ in Queue(label: "bench.producers") }
    let measurement = producers(items: items) { producer, perThread in
      let global = Queue.global()
      let serial = serials[producer]
      let serialItem = serialItems[producer]
      return {
        for index in 0..<perThread {
          if index & 1 == 0 {
            global.async { Countdown.tickActive() }
          } else {
            serial.async(execute: serialItem)
          }
        }
      }
    }
    withExtendedLifetime(serials) {}
    return measurement
  }

  static func dispatchProducers(items: Int) -> Measurement {
    let serials = (0..<producerThreads).map { _ in DispatchQueue(label: "bench.producers") }
    let measurement = producers(items: items) { producer, perThread in
      let global = DispatchQueue.global()
      let serial = serials[producer]
      let serialItem = serialItems[producer]
      return {
        for index in 0..<perThread {
          if index & 1 == 0 {
            global.async { Countdown.tickActive() }
          } else {
            serial.async(execute: serialItem)
          }
        }
      }
    }
    withExtendedLifetime(serials) {}
    return measurement
  }

  /// A start line for `threads` threads and the harness thread (a pthread barrier passed
  /// twice): the threads `arrive()`, the harness waits until all are there, reads its clock
  /// and lets them `go()` together.
  final class StartBarrier: @unchecked Sendable {
    // @unchecked Sendable: the barrier is a pthread object, used only through its functions;
    // the pointer never changes.
    private let barrier = UnsafeMutablePointer<pthread_barrier_t>.allocate(capacity: 1)

    init(threads: Int) {
      if pthread_barrier_init(barrier, nil, UInt32(threads + 1)) != 0 {
        benchmarkFailure("pthread_barrier_init failed")
      }
    }

    deinit {
      pthread_barrier_destroy(barrier)
      barrier.deallocate()
    }

    /// A producer's side: all there, then wait for the go.
    func arrive() {
      pthread_barrier_wait(barrier)
      pthread_barrier_wait(barrier)
    }

    /// The harness's side: returns once every producer arrived.
    func waitForAll() { pthread_barrier_wait(barrier) }

    /// The harness's side: releases the producers.
    func go() { pthread_barrier_wait(barrier) }
  }

  // MARK: - group from the main thread

  /// `items` empty closures submitted with `async(group:)` onto the default global queue
  /// from the harness thread (the process's main thread, not a worker), then `wait()`; wall
  /// and CPU ns per item from the first submission until `wait` returned.
  static func oursGroupMain(items: Int) -> Measurement {
    let queue = Queue.global()
    let group = Group()
    let start = ClockReading.start()
    for _ in 0..<items { queue.async(group: group) {} }
    group.wait()
    return Measurement(from: start, to: .end(), operations: items)
  }

  static func dispatchGroupMain(items: Int) -> Measurement {
    let queue = DispatchQueue.global()
    let group = DispatchGroup()
    let start = ClockReading.start()
    for _ in 0..<items { queue.async(group: group) {} }
    group.wait()
    return Measurement(from: start, to: .end(), operations: items)
  }
}
