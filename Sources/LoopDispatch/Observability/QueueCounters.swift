import Synchronization

/// One queue's counters: items submitted and completed, and the wait from submission to
/// start. Created with the queue's first item (`Queue.installCounters`), which also lists the
/// queue in `QueueRegistry`; a queue that never ran anything has none (and is not listed).
///
/// Who writes what:
/// - `submitted`: every submitter, with a relaxed atomic add on its CPU's stripe
///   (`StripedCounter`), so submitters on different CPUs do not share the count's line.
/// - `syncSubmitted` of a serial queue: only the thread holding SYNC_LOCKED (a `sync` that
///   runs inline), with a plain relaxed load-then-store, so the fast `sync` path costs no
///   locked instruction for its counts; the queue's figure adds it to `submitted`.
/// - `completed`, `maxWaitTicks`, `recentWaitTicks` of a serial queue or the main queue: only
///   the thread holding the queue (SCHEDULED or SYNC_LOCKED, see `Queue+Serial.swift`), so a
///   plain relaxed load-then-store suffices; the next holder acquires the state word the
///   previous one released, so no update is lost.
/// - The same of a concurrent queue: any thread finishing or starting one of its items, with
///   atomic read-modify-writes for the count and the maximum; the recent average is a relaxed
///   load-then-store that may drop a concurrent update (documented as approximate).
/// - A global queue's counters (registered by its initialiser) only name it: its figures live
///   in the pool under the pool's lock (`LaneStats` in `WorkerPool.swift`).
///
/// Readers (snapshots) load each figure relaxed, `completed` acquiring: each is exact when
/// read, together they are not a consistent cut. `completed` is read before `submitted` (and
/// a serial queue's holders store it releasing), so `depth` (their difference) can only
/// overstate, by items submitted while the snapshot was taken.
final class QueueCounters: Sendable {
  /// The queue's label and kind, copied so that snapshots never touch the queue itself.
  let label: String
  let kind: QueueStats.Kind
  /// For a global queue, its priority: its figures are the pool's lane figures.
  let rootPriority: Priority?
  /// For a global queue, whether it is an overcommit one (its lane is an overcommit lane).
  let rootOvercommit: Bool
  /// Items submitted by enqueueing (every kind of queue), striped by CPU.
  let submitted = StripedCounter(cpus: CPUBudget.current.affinityCPUs)
  /// Serial queues: `sync` calls that ran inline on an idle queue (SYNC_LOCKED). Only the
  /// holder writes it, so the fast `sync` path adds no locked instruction; the queue's
  /// submission figure is `submitted + syncSubmitted`.
  let syncSubmitted = Atomic<UInt64>(0)
  /// Keeps the figures below, which the threads running the queue's items write, off the
  /// cache line of `submitted` (the stripes' address, which every submitter reads; the
  /// stripes themselves are out of line), and of `syncSubmitted`: without it every item
  /// moved that line between the submitter's core and the worker's (a concurrent queue fed
  /// by one thread, or producers feeding a serial queue). 56 bytes: with `syncSubmitted`,
  /// at least one whole line apart whatever the object's alignment.
  private let padding: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (
    0, 0, 0, 0, 0, 0, 0
  )
  let completed = Atomic<UInt64>(0)
  /// Longest submission-to-start wait, in `Ticks`.
  let maxWaitTicks = Atomic<UInt64>(0)
  /// Moving average of recent waits (weight 1/8), in `Ticks`.
  let recentWaitTicks = Atomic<UInt64>(0)
  #if DEBUG
    /// Starts timed: by a serial queue's holder (`recordStartExclusive`), for tests of the
    /// drainer's sampling (`Queue+Serial.swift`, step 5), written as the figures above are;
    /// and a concurrent queue's (`recordStartShared`, an atomic add), for tests of the
    /// submissions' sampling (`Ticks.sampledStamp`).
    let timedStarts = Atomic<UInt64>(0)
    /// Read-modify-writes of a concurrent queue's word made by its submissions (failed
    /// compare-and-swaps included), for the test of step 1's backlog path
    /// (`Queue+Concurrent.swift`).
    let submitWordWrites = Atomic<UInt64>(0)
  #endif
  /// The queue's slot in `QueueRegistry`, stored by the thread that installed these counters
  /// (before it returns to the submission that needed them); read by the queue's `deinit`.
  let registrySlot = Atomic<Int>(-1)

  init(
    label: String, kind: QueueStats.Kind, rootPriority: Priority? = nil,
    rootOvercommit: Bool = false
  ) {
    self.label = label
    self.kind = kind
    self.rootPriority = rootPriority
    self.rootOvercommit = rootOvercommit
  }

  /// The figures now.
  var figures: QueueFigures {
    if let rootPriority {
      let lane = WorkerPool.shared.laneFigures(rootPriority, overcommit: rootOvercommit)
      return QueueFigures(
        label: label, kind: kind, queues: 1, submitted: lane.submitted,
        completed: lane.completed, maxWaitTicks: lane.maxWaitTicks,
        recentWaitTicks: lane.recentWaitTicks)
    }
    // `completed` first, acquiring (its writers store it releasing, after counting the
    // item's submission, which happens before the item runs): the submissions loaded after
    // it include every item it counts, so depth can only overstate, never go negative.
    let completed = completed.load(ordering: .acquiring)
    let submitted =
      submitted.value &+ syncSubmitted.load(ordering: .relaxed)
    return QueueFigures(
      label: label, kind: kind, queues: 1, submitted: submitted, completed: completed,
      maxWaitTicks: maxWaitTicks.load(ordering: .relaxed),
      recentWaitTicks: recentWaitTicks.load(ordering: .relaxed))
  }
}

extension Queue {
  /// Runs `body` with the queue's counters, creating them with the first item. No retain:
  /// the counters live as long as the queue.
  @inline(__always)
  private func withCounters(_ body: (QueueCounters) -> Void) {
    let raw = countersPointer.load(ordering: .acquiring) ?? installCounters()
    // Safe: retained by this queue until its deinit, and the caller holds the queue.
    Unmanaged<QueueCounters>.fromOpaque(raw)._withUnsafeGuaranteedRef(body)
  }

  /// Creates and publishes the counters (one winner if submitters race), and lists the queue
  /// in the registry. Returns the published counters.
  @inline(never)
  func installCounters() -> UnsafeMutableRawPointer {
    let fresh = Unmanaged.passRetained(QueueCounters(label: label, kind: statsKind))
    let (installed, existing) = countersPointer.compareExchange(
      expected: nil, desired: fresh.toOpaque(), ordering: .acquiringAndReleasing)
    guard installed else {
      fresh.release()
      return existing!
    }
    let slot = QueueRegistry.shared.register(fresh.takeUnretainedValue())
    fresh.takeUnretainedValue().registrySlot.store(slot, ordering: .releasing)
    return fresh.toOpaque()
  }

  #if DEBUG
    /// Starts this queue has timed (`QueueCounters.timedStarts`), for tests.
    package var timedStarts: UInt64 {
      guard let raw = countersPointer.load(ordering: .acquiring) else { return 0 }
      // Safe: retained by this queue until its deinit, and the caller holds the queue.
      return Unmanaged<QueueCounters>.fromOpaque(raw).takeUnretainedValue().timedStarts.load(
        ordering: .relaxed)
    }
  #endif

  #if DEBUG
    /// `QueueCounters.submitWordWrites`, for tests.
    package var submitWordWrites: UInt64 {
      guard let raw = countersPointer.load(ordering: .acquiring) else { return 0 }
      // Safe: retained by this queue until its deinit, and the caller holds the queue.
      return Unmanaged<QueueCounters>.fromOpaque(raw).takeUnretainedValue().submitWordWrites
        .load(ordering: .relaxed)
    }

    /// Whether the concurrent queue's backlog hint is up (`Queue.concurrentBacklogHint`),
    /// for tests.
    package var backlogHintIsUp: Bool { concurrentBacklogHint.load(ordering: .relaxed) }
  #endif

  /// Counts a submission's read-modify-write of this concurrent queue's word (debug builds;
  /// nothing in a release build).
  @inline(__always)
  func countSubmitWordWrite() {
    #if DEBUG
      withCounters { $0.submitWordWrites.wrappingAdd(1, ordering: .relaxed) }
    #endif
  }

  /// Counts one submission.
  @inline(__always)
  func countSubmission() {
    withCounters { $0.submitted.increment() }
  }

  /// Records an item's start; the calling thread holds this serial queue exclusively.
  @inline(__always)
  func recordStartExclusive(enqueuedAt: UInt64) {
    let wait = Ticks.elapsed(from: enqueuedAt, to: Ticks.now())
    withCounters { counters in
      #if DEBUG
        counters.timedStarts.store(
          counters.timedStarts.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
      #endif
      if wait > counters.maxWaitTicks.load(ordering: .relaxed) {
        counters.maxWaitTicks.store(wait, ordering: .relaxed)
      }
      let recent = counters.recentWaitTicks.load(ordering: .relaxed)
      counters.recentWaitTicks.store(recent - recent / 8 + wait / 8, ordering: .relaxed)
    }
  }

  /// Counts a finished item; the calling thread holds this serial queue exclusively.
  @inline(__always)
  func countCompletionExclusive() {
    withCounters { countCompletionExclusive($0) }
  }

  /// Counts a finished item in `counters` (this queue's); the calling thread holds this
  /// serial queue exclusively.
  @inline(__always)
  func countCompletionExclusive(_ counters: QueueCounters) {
    // A plain load-then-store: only the holder writes `completed`. Releasing: a snapshot
    // that loads `completed` (acquiring) also sees the submissions counted before this item
    // ran, so its depth never goes negative (see `figures`).
    counters.completed.store(
      counters.completed.load(ordering: .relaxed) &+ 1, ordering: .releasing)
  }

  /// Runs `body` with this queue's counters, for a thread that holds the queue across its
  /// item (`body` may run the item: the counters live as long as the queue, and no retain is
  /// taken). Creates them with the queue's first item.
  @inline(__always)
  func withHolderCounters(_ body: (QueueCounters) -> Void) {
    withCounters(body)
  }

  /// Counts a `sync` that runs inline on this serial queue, whose SYNC_LOCKED the calling
  /// thread holds: a plain load-then-store of the holders' own submission count instead of
  /// an atomic add to the shared one.
  @inline(__always)
  func countSubmissionHolding(_ counters: QueueCounters) {
    counters.syncSubmitted.store(
      counters.syncSubmitted.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
  }

  /// Records an item's start from any thread (concurrent queues): nothing, and no clock
  /// read, for an item whose submission was not timed (`enqueuedAt` 0, `Ticks.sampledStamp`).
  @inline(__always)
  func recordStartShared(enqueuedAt: UInt64) {
    guard enqueuedAt != 0 else { return }
    let wait = Ticks.elapsed(from: enqueuedAt, to: Ticks.now())
    withCounters { counters in
      #if DEBUG
        counters.timedStarts.add(1, ordering: .relaxed)
      #endif
      if wait > counters.maxWaitTicks.load(ordering: .relaxed) {
        counters.maxWaitTicks.max(wait, ordering: .relaxed)
      }
      // May lose a racing update: the figure is an approximate recent average by design.
      let recent = counters.recentWaitTicks.load(ordering: .relaxed)
      counters.recentWaitTicks.store(recent - recent / 8 + wait / 8, ordering: .relaxed)
    }
  }

  /// Counts a finished item from any thread.
  @inline(__always)
  func countCompletionShared() {
    withCounters { $0.completed.wrappingAdd(1, ordering: .relaxed) }
  }

  var statsKind: QueueStats.Kind {
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
