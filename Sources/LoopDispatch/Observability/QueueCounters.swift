import Synchronization

/// Per-queue counters: items submitted and completed, and the wait from submission to start.
///
/// Who writes what:
/// - `submittedItems`: every submitter, with a relaxed atomic add (the submission's own CAS
///   or lock already touches the queue, so this adds one locked instruction).
/// - `completedItems`, `maxWaitTicks`, `recentWaitTicks` of a serial queue or the main
///   queue: only the thread holding the queue (SCHEDULED or SYNC_LOCKED, see
///   `Queue+Serial.swift`), so plain relaxed load-then-store suffices; the next holder
///   acquires the state word the previous one released, so no update is lost.
/// - The same of a concurrent queue: any thread finishing or starting one of its items, with
///   atomic read-modify-writes for the count and the maximum; the recent average is a
///   relaxed load-then-store that may drop a concurrent update (documented as approximate).
/// - Global queues: none of these; their figures live in the pool under its lock
///   (`LaneStats` in `WorkerPool.swift`).
///
/// Readers (snapshots) load each figure relaxed: each is exact when read, together they are
/// not a consistent cut. `completed` is read before `submitted`, so `depth` (their
/// difference) can only overstate, by items submitted while the snapshot was taken.
extension Queue {
  /// Counts one submission.
  @inline(__always)
  func countSubmission() {
    submittedItems.wrappingAdd(1, ordering: .relaxed)
  }

  /// Records an item's start; the calling thread holds this serial queue exclusively.
  @inline(__always)
  func recordStartExclusive(enqueuedAt: UInt64) {
    let wait = Ticks.elapsed(from: enqueuedAt, to: Ticks.now())
    if wait > maxWaitTicks.load(ordering: .relaxed) {
      maxWaitTicks.store(wait, ordering: .relaxed)
    }
    let recent = recentWaitTicks.load(ordering: .relaxed)
    recentWaitTicks.store(recent - recent / 8 + wait / 8, ordering: .relaxed)
  }

  /// Counts a finished item; the calling thread holds this serial queue exclusively.
  @inline(__always)
  func countCompletionExclusive() {
    completedItems.store(completedItems.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
  }

  /// Records an item's start from any thread (concurrent and global queues).
  @inline(__always)
  func recordStartShared(enqueuedAt: UInt64) {
    let wait = Ticks.elapsed(from: enqueuedAt, to: Ticks.now())
    if wait > maxWaitTicks.load(ordering: .relaxed) {
      maxWaitTicks.max(wait, ordering: .relaxed)
    }
    // May lose a racing update: the figure is an approximate recent average by design.
    let recent = recentWaitTicks.load(ordering: .relaxed)
    recentWaitTicks.store(recent - recent / 8 + wait / 8, ordering: .relaxed)
  }

  /// Counts a finished item from any thread.
  @inline(__always)
  func countCompletionShared() {
    completedItems.wrappingAdd(1, ordering: .relaxed)
  }

  /// This queue's raw figures now.
  var figures: QueueFigures {
    if case .root(let priority) = kind {
      let lane = WorkerPool.shared.laneFigures(priority)
      return QueueFigures(
        label: label, kind: .global, queues: 1, submitted: lane.submitted,
        completed: lane.completed, maxWaitTicks: lane.maxWaitTicks,
        recentWaitTicks: lane.recentWaitTicks)
    }
    let completed = completedItems.load(ordering: .relaxed)
    let submitted = submittedItems.load(ordering: .relaxed)
    return QueueFigures(
      label: label, kind: statsKind, queues: 1, submitted: submitted, completed: completed,
      maxWaitTicks: maxWaitTicks.load(ordering: .relaxed),
      recentWaitTicks: recentWaitTicks.load(ordering: .relaxed))
  }

  private var statsKind: QueueStats.Kind {
    switch kind {
    case .root: return .global
    case .main: return .main
    case .serial: return .serial
    case .concurrent: return .concurrent
    }
  }
}

/// Figures as counted, wait times still in ticks (converted once per snapshot).
struct QueueFigures: Sendable {
  var label: String
  var kind: QueueStats.Kind
  var queues: Int
  var submitted: UInt64
  var completed: UInt64
  var maxWaitTicks: UInt64
  var recentWaitTicks: UInt64

  /// Sums counts, keeps the larger wait figures.
  func merged(with other: QueueFigures) -> QueueFigures {
    QueueFigures(
      label: label, kind: kind, queues: queues + other.queues,
      submitted: submitted &+ other.submitted, completed: completed &+ other.completed,
      maxWaitTicks: max(maxWaitTicks, other.maxWaitTicks),
      recentWaitTicks: max(recentWaitTicks, other.recentWaitTicks))
  }

  func stats(nanosecondsPerTick rate: Double) -> QueueStats {
    QueueStats(
      label: label, kind: kind, queues: queues, submitted: submitted, completed: completed,
      depth: submitted > completed ? Int(submitted - completed) : 0,
      maxWait: Self.duration(maxWaitTicks, rate), recentWait: Self.duration(recentWaitTicks, rate))
  }

  private static func duration(_ ticks: UInt64, _ rate: Double) -> Duration {
    .nanoseconds(Int64(min(Double(ticks) * rate, Double(Int64.max))))
  }
}
