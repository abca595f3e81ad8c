import Dispatch
import Glibc
import LoopDispatch

/// The queue rows where work moves between threads or queues: a token bounced between two
/// serial queues, `apply`, and readers and barrier writers on a concurrent queue.
extension QueueBenchmarks {
  // MARK: - bounce

  /// A token hopping between serial queues A and B: each item `async`s the next onto the
  /// other queue. The items capture nothing; they reach the run through ``active``.
  final class OursBounce: @unchecked Sendable {
    // @unchecked Sendable: `remaining` and `finishedAt` are touched by one item at a time;
    // each `async` orders one item's writes before the next item's reads, and `done` orders
    // the last item's writes before the waiter's reads.

    /// The run in progress; set before the first hop, cleared after `done` opened.
    nonisolated(unsafe) static var active: OursBounce?

    let a = Queue(label: "bench.bounce.a")
    let b = Queue(label: "bench.bounce.b")
    var remaining: Int
    var finishedAt = ClockReading(wall: 0, cpu: 0)
    let done = Latch()

    init(hops: Int) { remaining = hops }

    /// Counts a hop; false (after opening `done`) when it was the last.
    @inline(__always)
    func hop() -> Bool {
      remaining -= 1
      if remaining > 0 { return true }
      finishedAt = ClockReading.end()
      done.open()
      return false
    }

    static func onA() {
      let run = active.unsafelyUnwrapped
      if run.hop() { run.b.async { onB() } }
    }

    static func onB() {
      let run = active.unsafelyUnwrapped
      if run.hop() { run.a.async { onA() } }
    }

    /// Wall and CPU ns per hop over `hops` hops.
    static func run(hops: Int) -> Measurement {
      let run = OursBounce(hops: hops)
      active = run
      defer { active = nil }
      let start = ClockReading.start()
      run.a.async { onA() }
      run.done.wait()
      return Measurement(from: start, to: run.finishedAt, operations: hops)
    }
  }

  /// ``OursBounce`` with Dispatch serial queues.
  final class DispatchBounce: @unchecked Sendable {
    // @unchecked Sendable: as ``OursBounce``.

    nonisolated(unsafe) static var active: DispatchBounce?

    let a = DispatchQueue(label: "bench.bounce.a")
    let b = DispatchQueue(label: "bench.bounce.b")
    var remaining: Int
    var finishedAt = ClockReading(wall: 0, cpu: 0)
    let done = Latch()

    init(hops: Int) { remaining = hops }

    @inline(__always)
    func hop() -> Bool {
      remaining -= 1
      if remaining > 0 { return true }
      finishedAt = ClockReading.end()
      done.open()
      return false
    }

    static func onA() {
      let run = active.unsafelyUnwrapped
      if run.hop() { run.b.async { onB() } }
    }

    static func onB() {
      let run = active.unsafelyUnwrapped
      if run.hop() { run.a.async { onA() } }
    }

    static func run(hops: Int) -> Measurement {
      let run = DispatchBounce(hops: hops)
      active = run
      defer { active = nil }
      let start = ClockReading.start()
      run.a.async { onA() }
      run.done.wait()
      return Measurement(from: start, to: run.finishedAt, operations: hops)
    }
  }

  // MARK: - apply

  /// One output slot per iteration, allocated and touched before the clock starts.
  struct Slots: @unchecked Sendable {
    // @unchecked Sendable: each iteration writes only its own slot; the caller reads them
    // after `concurrentPerform` returned, which orders the writes before the reads.
    let base: UnsafeMutablePointer<UInt64>
    let count: Int

    static func make(count: Int) -> Slots {
      let base = UnsafeMutablePointer<UInt64>.allocate(capacity: count)
      base.initialize(repeating: 0, count: count)
      return Slots(base: base, count: count)
    }

    /// The trivial body: a multiplicative hash of the index into its slot.
    @inline(__always)
    func fill(_ index: Int) {
      base[index] = UInt64(truncatingIfNeeded: index) &* 0x9E37_79B9_7F4A_7C15
    }

    /// Checks every slot was written, then frees them.
    func verifyAndFree() {
      for index in 0..<count
      where base[index] != UInt64(truncatingIfNeeded: index) &* 0x9E37_79B9_7F4A_7C15 {
        benchmarkFailure("apply skipped iteration \(index)")
      }
      base.deallocate()
    }
  }

  /// Total ms for `iterations` iterations of ``Slots/fill(_:)``.
  static func oursApply(iterations: Int) -> Double {
    let slots = Slots.make(count: iterations)
    let start = Stopwatch.now()
    Queue.concurrentPerform(iterations: iterations) { slots.fill($0) }
    let elapsed = Stopwatch.now() - start
    slots.verifyAndFree()
    return Double(elapsed) / 1e6
  }

  static func dispatchApply(iterations: Int) -> Double {
    let slots = Slots.make(count: iterations)
    let start = Stopwatch.now()
    DispatchQueue.concurrentPerform(iterations: iterations) { slots.fill($0) }
    let elapsed = Stopwatch.now() - start
    slots.verifyAndFree()
    return Double(elapsed) / 1e6
  }

  // MARK: - reader/writer

  /// The data behind a reader/writer queue.
  final class Table: @unchecked Sendable {
    // @unchecked Sendable: reads run in `sync` on the concurrent queue, writes in its barrier
    // items, so a write never overlaps another access.
    static let size = 1024
    var values = [Int](repeating: 0, count: size)
  }

  /// From this thread, `operations` operations on a concurrent queue: every
  /// ``writerInterval``-th a barrier `async` write, the rest `sync` reads; a final barrier
  /// `sync` waits for the writes. ns per operation.
  static func oursReaderWriter(operations: Int) -> Double {
    let queue = Queue(label: "bench.rw", attributes: .concurrent)
    let table = Table()
    var sum = 0
    let start = Stopwatch.now()
    for index in 0..<operations {
      let slot = index & (Table.size - 1)
      if index % writerInterval == 0 {
        queue.async(flags: .barrier) { table.values[slot] = index }
      } else {
        sum &+= queue.sync { table.values[slot] }
      }
    }
    queue.sync(flags: .barrier) {}
    let elapsed = Stopwatch.now() - start
    checkReaderWriter(table, sum: sum, operations: operations)
    return Double(elapsed) / Double(operations)
  }

  static func dispatchReaderWriter(operations: Int) -> Double {
    let queue = DispatchQueue(label: "bench.rw", attributes: .concurrent)
    let table = Table()
    var sum = 0
    let start = Stopwatch.now()
    for index in 0..<operations {
      let slot = index & (Table.size - 1)
      if index % writerInterval == 0 {
        queue.async(flags: .barrier) { table.values[slot] = index }
      } else {
        sum &+= queue.sync { table.values[slot] }
      }
    }
    queue.sync(flags: .barrier) {}
    let elapsed = Stopwatch.now() - start
    checkReaderWriter(table, sum: sum, operations: operations)
    return Double(elapsed) / Double(operations)
  }

  /// Every slot holds the last write to it (writes hit slots with index ≡ 0 mod 10); the sum
  /// of reads is used so the reads cannot be dropped.
  @inline(never)
  static func checkReaderWriter(_ table: Table, sum: Int, operations: Int) {
    var lastWrite = [Int](repeating: 0, count: Table.size)
    for index in stride(from: 0, to: operations, by: writerInterval) {
      lastWrite[index & (Table.size - 1)] = index
    }
    if table.values != lastWrite { benchmarkFailure("reader/writer lost a write") }
    if sum < 0 { benchmarkFailure("reader/writer read a negative value") }
  }
}
