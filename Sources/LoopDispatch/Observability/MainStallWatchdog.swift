@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// Reports main-queue items that hold the main thread too long (opt-in).
///
/// Walk-through:
/// 1. `Queue.setMainStallThreshold(_:)` enables it: the service loop checks every half
///    threshold (a repeating timer that exists only while enabled).
/// 2. While enabled, the main queue's drain stores the start time of each item (and the label
///    of the queue it belongs to, for an item of a queue targeting main) before running it,
///    and clears it after.
/// 3. A check that finds an item running longer than the threshold writes one line to
///    standard error naming the queue, once per item, while the item is still running.
final class MainStallWatchdog: @unchecked Sendable {
  // @unchecked Sendable: `itemStart` and `reportedStart` are atomic; `current` and `timer`
  // are behind their locks.
  static let shared = MainStallWatchdog()
  /// Atomic. Read by the main drain for every item; relaxed (a late-seen change only
  /// delays when monitoring starts or stops).
  private static let enabled = Atomic<Bool>(false)
  static var isEnabled: Bool { enabled.load(ordering: .relaxed) }

  /// Atomic. Monotonic start of the running main-queue item, 0 when none.
  private let itemStart = Atomic<UInt64>(0)
  /// Atomic. The start already reported, so each stall is reported once.
  private let reportedStart = Atomic<UInt64>(0)
  /// Atomic. Stalls reported since launch.
  let stallsReported = Atomic<UInt64>(0)
  /// Protected by: its lock. Label of the queue whose item is running.
  private let current = LockedValue<String>("")
  /// Protected by: its lock. The threshold and the checking timer.
  private let settings = LockedValue<(threshold: UInt64, timer: LoopTimer?)>((0, nil))

  func enable(threshold: Duration?) {
    let nanos = threshold.map { UInt64(max(1_000_000, $0.saturatingNanoseconds)) } ?? 0
    let old = settings.withLock { settings -> LoopTimer? in
      let old = settings.timer
      settings.threshold = nanos
      settings.timer =
        nanos == 0
        ? nil
        : ServiceLoop.shared.scheduleRepeating(every: .nanoseconds(Int64(nanos / 2))) {
          MainStallWatchdog.shared.check()
        }
      return old
    }
    old?.cancel()
    Self.enabled.store(nanos != 0, ordering: .relaxed)
  }

  /// Runs one main-queue item with its start recorded. Main thread.
  func run(_ work: QueueWork, on queue: Queue) {
    let label: String
    if case .drain(let child) = work { label = child.label } else { label = queue.label }
    current.withLock { $0 = label }
    itemStart.store(Deadline.now.uptimeNanoseconds, ordering: .releasing)
    queue.perform(work)
    itemStart.store(0, ordering: .releasing)
  }

  /// Service loop: reports the running item if it has run past the threshold.
  private func check() {
    let threshold = settings.withLock { $0.threshold }
    let start = itemStart.load(ordering: .acquiring)
    guard threshold != 0, start != 0 else { return }
    let now = Deadline.now.uptimeNanoseconds
    guard now > start, now - start > threshold,
      reportedStart.exchange(start, ordering: .relaxed) != start
    else { return }
    let label = current.withLock { $0 }
    stallsReported.wrappingAdd(1, ordering: .relaxed)
    writeStandardError(
      "LoopDispatch: main-thread stall: an item of queue \"\(label)\" has been running for "
        + "\((now - start) / 1_000_000) ms (threshold \(threshold / 1_000_000) ms)\n")
  }
}

extension Queue {
  /// Reports, on standard error, any main-queue item that runs longer than `threshold`
  /// while it is still running (one line naming its queue); `nil` turns it off. Off by
  /// default; when on, it costs a clock read per main-queue item and a check on the service
  /// loop every half threshold (at least 1 ms).
  public static func setMainStallThreshold(_ threshold: Duration?) {
    MainStallWatchdog.shared.enable(threshold: threshold)
  }
}
