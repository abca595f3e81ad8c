import Dispatch
import Glibc
import LoopDispatch

/// The shape a server's main loop uses most: closures that capture state, submitted from the
/// main thread (the harness thread) onto the default global queue, waited for at the end.
///
/// Each closure captures a distinct pointer (one slot of ``CaptureSlots``) and writes through
/// it, so every submission allocates a closure context that a worker releases; the empty
/// closures of the `global` row allocate nothing. Both sides run the same closure body and
/// wait on the same ``Countdown``.
extension QueueBenchmarks {
  static let captureItems = 1_000_000

  /// A pointer to one Int slot, captured by the closures.
  struct Slot: @unchecked Sendable {
    // @unchecked Sendable: each slot is written by exactly one closure (its own) and read
    // by the harness thread only after ``Countdown`` saw every closure finish.
    let pointer: UnsafeMutablePointer<Int>
  }

  /// The slots the capturing closures write, one per item, set to 0 before each run.
  enum CaptureSlots {
    // nonisolated(unsafe): written by the harness thread before a run's first submission
    // and after its last item ran, and by each run's items (one slot each) in between;
    // ``Countdown`` orders the two.
    nonisolated(unsafe) static let base: UnsafeMutablePointer<Int> = {
      let base = UnsafeMutablePointer<Int>.allocate(capacity: captureItems)
      base.initialize(repeating: 0, count: captureItems)
      return base
    }()

    static func reset(_ count: Int) { base.update(repeating: 0, count: count) }

    /// Traps unless each of the first `count` slots was written once.
    static func verify(_ count: Int) {
      for index in 0..<count where base[index] != 1 {
        benchmarkFailure("slot \(index) is \(base[index]), not 1: a capturing closure did not run")
      }
    }
  }

  /// The body of every capturing closure: a write through its own pointer, then the count.
  @inline(__always)
  static func captureItem(_ slot: Slot) {
    slot.pointer.pointee &+= 1
    Countdown.tickActive()
  }

  /// `items` closures, each capturing its own slot's pointer, onto the default global queue
  /// from the harness thread; wall and CPU ns per item from the first submission until the
  /// last closure ran.
  static func oursGlobalCapture(items: Int) -> Measurement {
    CaptureSlots.reset(items)
    let measurement = Countdown.measure(total: items) {
      let queue = Queue.global()
      let base = CaptureSlots.base
      let start = ClockReading.start()
      for index in 0..<items {
        let slot = Slot(pointer: base + index)
        queue.async { captureItem(slot) }
      }
      return start
    }
    CaptureSlots.verify(items)
    return measurement
  }

  static func dispatchGlobalCapture(items: Int) -> Measurement {
    CaptureSlots.reset(items)
    let measurement = Countdown.measure(total: items) {
      let queue = DispatchQueue.global()
      let base = CaptureSlots.base
      let start = ClockReading.start()
      for index in 0..<items {
        let slot = Slot(pointer: base + index)
        queue.async { captureItem(slot) }
      }
      return start
    }
    CaptureSlots.verify(items)
    return measurement
  }
}
