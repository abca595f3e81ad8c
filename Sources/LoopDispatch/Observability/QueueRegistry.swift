@_spi(LoopDispatchRuntime) import MainLoop

/// Every live queue, so a snapshot can list them, and the totals of released queues folded
/// by label, so per-label counters never go backwards when a queue goes away.
///
/// The table holds each queue's `QueueCounters` (which carry the label and kind), never the
/// queue itself: a snapshot that retained a queue could drop the last reference and run the
/// queue's `deinit`, which unregisters, on the thread already holding this lock. A custom
/// queue registers with its first item (`Queue.installCounters`; the main and global queues
/// in their initialisers) and unregisters in `deinit`, which folds its figures into the
/// per-label totals. A snapshot copies the counters it finds under the table's lock; the
/// counters are their own objects, retained by the table, so a snapshot never touches a
/// queue, and one taken while a queue is being released sees it either live or folded.
///
/// Thread-safety: everything is behind `table`'s lock.
final class QueueRegistry: Sendable {
  static let shared = QueueRegistry()

  /// Distinct labels of released queues remembered; later ones fold into `otherLabel`.
  static let retiredLabelLimit = 256
  /// The label released queues fold into once `retiredLabelLimit` labels are remembered.
  static let otherLabel = "(other labels)"

  private struct Table {
    /// Live queues' counters; nil marks a free slot.
    var slots: [QueueCounters?] = []
    /// Indices of free slots, reused first.
    var free: [Int] = []
    /// Totals of released queues, by label.
    var retired: [String: QueueFigures] = [:]
  }

  private let table = LockedValue(Table())

  private init() {
    // Take the tick calibration reference with the first queue, long before any snapshot.
    _ = Ticks.reference
  }

  /// Adds a queue's counters; returns its slot for `unregister`.
  func register(_ counters: QueueCounters) -> Int {
    table.withLock { table in
      if let slot = table.free.popLast() {
        table.slots[slot] = counters
        return slot
      }
      table.slots.append(counters)
      return table.slots.count - 1
    }
  }

  /// Removes the queue in `slot`, folding its final figures into its label's totals.
  func unregister(slot: Int, final figures: QueueFigures) {
    table.withLock { table in
      table.slots[slot] = nil
      table.free.append(slot)
      var key = figures.label
      if table.retired[key] == nil && table.retired.count >= Self.retiredLabelLimit {
        key = Self.otherLabel
      }
      var released = figures
      released.label = key
      released.queues = 0
      released.recentWaitTicks = 0
      table.retired[key] = table.retired[key].map { $0.merged(with: released) } ?? released
    }
  }

  /// Live queues' figures, one per queue, and released queues' totals, one per label.
  func snapshot() -> (live: [QueueStats], retired: [QueueStats]) {
    let rate = Ticks.nanosecondsPerTick()
    let (live, retired) = table.withLock { table in
      var live: [QueueFigures] = []
      live.reserveCapacity(table.slots.count - table.free.count)
      for case let counters? in table.slots { live.append(counters.figures) }
      return (live, Array(table.retired.values))
    }
    return (
      live.map { $0.stats(nanosecondsPerTick: rate) },
      retired.map { $0.stats(nanosecondsPerTick: rate) }.sorted { $0.label < $1.label }
    )
  }
}
