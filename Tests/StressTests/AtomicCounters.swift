import Synchronization

/// A preallocated array of atomic counters, one per item index: a count above 1 is an item
/// run twice, a 0 an item lost.
///
/// Thread-safety: any thread. The increments are relaxed: the tests read the counts only
/// after a latch or group has ordered every increment before the read.
final class AtomicCounters: @unchecked Sendable {
  // @unchecked Sendable: the buffer is written only through atomics, and freed in deinit,
  // when no other reference exists.
  let count: Int
  // Unsafe pointer: `count` initialised atomics, owned by this object.
  private let base: UnsafeMutablePointer<Atomic<Int>>

  init(count: Int) {
    self.count = count
    base = .allocate(capacity: Swift.max(count, 1))
    for index in 0..<count { (base + index).initialize(to: Atomic(0)) }
  }

  deinit {
    base.deinitialize(count: count)
    base.deallocate()
  }

  /// Adds one to counter `index` and returns the new value.
  @inline(__always) @discardableResult
  func increment(_ index: Int) -> Int {
    base[index].wrappingAdd(1, ordering: .relaxed).newValue
  }

  /// The value of counter `index`.
  func value(_ index: Int) -> Int { base[index].load(ordering: .relaxed) }

  /// How many counters hold each value: `[0: lost, 1: once, 2: twice, …]`.
  func histogram(_ indices: some Sequence<Int>) -> [Int: Int] {
    var result: [Int: Int] = [:]
    for index in indices { result[value(index), default: 0] += 1 }
    return result
  }
}
