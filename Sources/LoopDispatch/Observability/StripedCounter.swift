import CLoopShims
import Synchronization

/// A counter that many threads add to at once without sharing a cache line: one stripe per
/// CPU (up to `maximumStripes`, a power of two), each on its own 128-byte line (x86's
/// adjacent-line prefetcher pairs 64-byte lines), and a thread adds to the stripe of the CPU
/// it runs on (`sched_getcpu`: glibc reads it from the thread's rseq area, no system call).
///
/// Why: a queue's submission count was one word that every submitter added to. Four threads
/// feeding one serial queue then paid two contended read-modify-writes per item (the count
/// and the `incoming` exchange) where one (the exchange) is the queue itself; perf put as
/// many samples after the count's locked add as after the exchange. Threads on one CPU
/// never run at the same instant, so a stripe's line stays in that CPU's cache.
///
/// Memory order: adds are relaxed read-modify-writes (no update is lost: a thread moved to
/// another CPU between `sched_getcpu` and its add only shares a line for that add). `value`
/// loads each stripe relaxed: exact once adds stop, otherwise a sum of per-stripe snapshots
/// that includes every add that happens-before the call (each stripe's load sees its own
/// line's earlier writes).
final class StripedCounter: @unchecked Sendable {
  // @unchecked Sendable: `base` is allocated in init and freed in deinit; every access to it
  // goes through an `Atomic` in one stripe.

  /// Bytes per stripe: two 64-byte lines.
  static let stripeBytes = 128
  static let maximumStripes = 16

  /// Stripe count minus one (the count is a power of two).
  private let mask: Int
  private let base: UnsafeMutableRawPointer

  init(cpus: Int) {
    var stripes = 1
    while stripes < Swift.min(Swift.max(1, cpus), Self.maximumStripes) { stripes *= 2 }
    mask = stripes - 1
    base = .allocate(byteCount: stripes * Self.stripeBytes, alignment: Self.stripeBytes)
    for index in 0..<stripes { stripe(index).initialize(to: Atomic(0)) }
  }

  deinit {
    for index in 0...mask { _ = stripe(index).deinitialize(count: 1) }
    base.deallocate()
  }

  @inline(__always)
  private func stripe(_ index: Int) -> UnsafeMutablePointer<Atomic<UInt64>> {
    // Safe: index <= mask, so the stripe lies inside the allocation, at a 128-byte-aligned
    // address bound to Atomic<UInt64> by init.
    (base + index * Self.stripeBytes).assumingMemoryBound(to: Atomic<UInt64>.self)
  }

  /// Adds one, on the calling CPU's stripe.
  @inline(__always)
  func increment() {
    let cpu = Int(cls_current_cpu())
    // A failed sched_getcpu (-1) lands on the last stripe: still counted.
    stripe(cpu & mask).pointee.wrappingAdd(1, ordering: .relaxed)
  }

  /// The sum of the stripes.
  var value: UInt64 {
    var total: UInt64 = 0
    for index in 0...mask { total &+= stripe(index).pointee.load(ordering: .relaxed) }
    return total
  }
}
