import MainLoop

/// The work of the `after` timers that fired in one pass of the service loop, grouped by
/// queue and submitted once per queue at the end of the pass.
///
/// Why: 100k `after`s onto a global queue fire in dense bursts; submitting each on its own
/// took the pool lock and decided a wake-up per timer (`try_to_wake_up` was a tenth of all
/// CPU samples, perf). Grouped, a pass costs one lock and at most one wake per global queue
/// (`WorkerPool.submitBatch`; the pool's chained wake-ups spread a long batch), and one
/// drain scheduling per serial queue (its first item schedules the drain; the rest are linked
/// behind it).
///
/// Order: work keeps the order its timers fired in (deadline order) within each queue; the
/// queues are submitted in the order their first timer fired.
///
/// Thread-safety: the service loop thread only (`add` from `DelayedWork.loopTimerFired`,
/// `flush` from the loop's timer-pass observer).
final class TimerFireBatch: @unchecked Sendable {
  // @unchecked Sendable: every member is touched by the service loop thread only.

  /// The batch of the service loop (installed as its timer-pass observer by `ServiceLoop`).
  static let service = TimerFireBatch()

  private var queues: [Queue] = []
  private var groupOfQueue: [ObjectIdentifier: Int] = [:]
  /// Fired work with its group (an index into `queues`), in firing order.
  private var entries: [(group: Int, work: @Sendable () -> Void)] = []
  /// Scratch for `flush` (kept to reuse its storage).
  private var grouped: [@Sendable () -> Void] = []
  private var starts: [Int] = []
  /// What a slot of `grouped` holds until the sort fills it (every slot is filled).
  private static let unfilled: @Sendable () -> Void = {}

  /// Records `work` for `queue` (submitted by the next `flush`).
  func add(_ work: @escaping @Sendable () -> Void, to queue: Queue) {
    let group: Int
    if let last = entries.last, queues[last.group] === queue {
      group = last.group  // The common case: a run of timers for one queue.
    } else if let known = groupOfQueue[ObjectIdentifier(queue)] {
      group = known
    } else {
      group = queues.count
      queues.append(queue)
      groupOfQueue[ObjectIdentifier(queue)] = group
    }
    entries.append((group, work))
  }

  /// Submits everything recorded since the last flush: one `asyncBatch` per queue.
  func flush() {
    guard !entries.isEmpty else { return }
    if queues.count == 1 {
      queues[0].asyncBatch(entries.lazy.map(\.work))
    } else {
      // A counting sort by group keeps each group's firing order.
      starts.removeAll(keepingCapacity: true)
      starts.append(contentsOf: repeatElement(0, count: queues.count + 1))
      for entry in entries { starts[entry.group + 1] += 1 }
      for group in 0..<queues.count { starts[group + 1] += starts[group] }
      var next = starts
      grouped.removeAll(keepingCapacity: true)
      grouped.append(contentsOf: repeatElement(Self.unfilled, count: entries.count))
      for entry in entries {
        grouped[next[entry.group]] = entry.work
        next[entry.group] += 1
      }
      for group in 0..<queues.count {
        queues[group].asyncBatch(grouped[starts[group]..<starts[group + 1]])
      }
      grouped.removeAll(keepingCapacity: true)
    }
    entries.removeAll(keepingCapacity: true)
    queues.removeAll(keepingCapacity: true)
    groupOfQueue.removeAll(keepingCapacity: true)
  }
}
