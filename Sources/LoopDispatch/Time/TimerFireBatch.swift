import MainLoop

/// The work of the `after` timers that fired in one pass of the service loop, or in one
/// expiry of the I/O driver's timers (`DriverTimers`), grouped by queue and submitted once
/// per queue at the end of the pass.
///
/// Why: 100k `after`s onto a global queue fire in dense bursts; submitting each on its own
/// decided a wake-up per timer (`try_to_wake_up` was a tenth of all CPU samples, perf).
/// Grouped, a pass costs one append of a chain to the lane and at most one wake per global
/// queue (`WorkerPool.submitBatch`; the pool's chained wake-ups spread a long batch), and one
/// drain scheduling per serial queue (its first item schedules the drain; the rest are linked
/// behind it).
///
/// Allocation-free in the steady state: the items are stored as `DelayedWorkItem`s (a
/// closure or a C call, moved out of their timers), in arrays whose storage is kept between
/// passes; a generic container of bare closures would re-wrap (allocate) each one.
///
/// Order: work keeps the order its timers fired in (deadline order) within each queue; the
/// queues are submitted in the order their first timer fired.
///
/// Thread-safety: one owner at a time: the service loop thread for `service` (`add` from
/// `DelayedWork.loopTimerFired`, `flush` from the loop's timer-pass observer), the holder of
/// `DriverTimers.firing` for the driver's batch.
final class TimerFireBatch: @unchecked Sendable {
  // @unchecked Sendable: every member is touched by the batch's one owner at a time (see
  // above).

  /// The batch of the service loop (installed as its timer-pass observer by `ServiceLoop`).
  static let service = TimerFireBatch()

  private var queues: [Queue] = []
  private var groupOfQueue: [ObjectIdentifier: Int] = [:]
  /// The group (an index into `queues`) of each item of `items`.
  private var groups: [Int] = []
  /// Fired work, in firing order.
  private var items: [DelayedWorkItem] = []
  /// Scratch for `flush` (kept to reuse its storage).
  private var grouped: [DelayedWorkItem] = []
  private var starts: [Int] = []

  /// Records `item` for `queue` (submitted by the next `flush`).
  func add(_ item: DelayedWorkItem, to queue: Queue) {
    let group: Int
    if let last = groups.last, queues[last] === queue {
      group = last  // The common case: a run of timers for one queue.
    } else if let known = groupOfQueue[ObjectIdentifier(queue)] {
      group = known
    } else {
      group = queues.count
      queues.append(queue)
      groupOfQueue[ObjectIdentifier(queue)] = group
    }
    groups.append(group)
    items.append(item)
  }

  /// Submits everything recorded since the last flush: one `asyncBatch` per queue.
  func flush() {
    guard !items.isEmpty else { return }
    if queues.count == 1 {
      queues[0].asyncBatch(items)
    } else {
      // A counting sort by group keeps each group's firing order.
      starts.removeAll(keepingCapacity: true)
      starts.append(contentsOf: repeatElement(0, count: queues.count + 1))
      for group in groups { starts[group + 1] += 1 }
      for group in 0..<queues.count { starts[group + 1] += starts[group] }
      var next = starts
      grouped.removeAll(keepingCapacity: true)
      // Every slot is overwritten by the sort; the placeholder is never submitted.
      grouped.append(contentsOf: repeatElement(items[0], count: items.count))
      for (index, group) in groups.enumerated() {
        grouped[next[group]] = items[index]
        next[group] += 1
      }
      for group in 0..<queues.count {
        queues[group].asyncBatch(grouped[starts[group]..<starts[group + 1]])
      }
      grouped.removeAll(keepingCapacity: true)
    }
    items.removeAll(keepingCapacity: true)
    groups.removeAll(keepingCapacity: true)
    queues.removeAll(keepingCapacity: true)
    groupOfQueue.removeAll(keepingCapacity: true)
  }
}
