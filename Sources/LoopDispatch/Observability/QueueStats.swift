/// One queue's figures (or one label's, when several queues are folded together).
///
/// Counted for every queue in every build: an item is anything the queue runs (an `async`
/// closure, a `sync` call, a child queue's drain), except a `sync` onto a global queue, which
/// runs inline on the caller's thread and is not counted. Wait times run from submission to
/// the moment the item starts.
public struct QueueStats: Sendable, Equatable {
  /// What kind of queue the figures describe.
  public enum Kind: String, Sendable {
    /// The main queue.
    case main
    /// A global queue.
    case global
    /// A custom serial queue.
    case serial
    /// A custom concurrent queue.
    case concurrent
  }

  /// The queue's label (queues folded by label share it).
  public var label: String
  /// The queue's kind (for a folded entry: the first queue's).
  public var kind: Kind
  /// Live queues these figures cover: 1 for one queue; for a label, its live queues
  /// (released queues contribute their counts but are not counted here).
  public var queues: Int
  /// Items submitted since the queue was created.
  public var submitted: UInt64
  /// Items that have finished running.
  public var completed: UInt64
  /// Items submitted and not yet finished: waiting, or running.
  public var depth: Int
  /// The longest wait of any item from submission to start, among the items timed (a clock
  /// read per item would be a large share of a hand-off's cost). The main queue times the
  /// first item of each run, every eighth and the last: the figure can fall short by the
  /// time over which 8 consecutive items were submitted. Other queues time one item in
  /// eight, chosen at random, and a serial queue also the first item of each run, so that
  /// an item that waited alone is measured. A stall that N items sit behind goes unseen
  /// with a chance of (7/8)^N (1 in 800 for 50); a wait that only a lone item in the middle
  /// of a run suffered may not be seen.
  public var maxWait: Duration
  /// A moving average of recent waits (each new wait weighs 1/8; of the waits timed as
  /// ``maxWait`` says); for a label, the largest among its live queues.
  public var recentWait: Duration

  /// Creates figures; the runtime creates them in ``RuntimeStats/current``.
  public init(
    label: String, kind: Kind, queues: Int, submitted: UInt64, completed: UInt64, depth: Int,
    maxWait: Duration, recentWait: Duration
  ) {
    self.label = label
    self.kind = kind
    self.queues = queues
    self.submitted = submitted
    self.completed = completed
    self.depth = depth
    self.maxWait = maxWait
    self.recentWait = recentWait
  }

  /// Folds `entries` by label, in label order: counts and depths add up, wait figures keep
  /// the largest. Released queues' totals (``RuntimeStats/releasedQueues``) folded with the
  /// live ones give per-label counters that never decrease.
  public static func byLabel(_ entries: [QueueStats]) -> [QueueStats] {
    var folded: [String: QueueStats] = [:]
    for entry in entries {
      guard var existing = folded[entry.label] else {
        folded[entry.label] = entry
        continue
      }
      existing.queues += entry.queues
      existing.submitted &+= entry.submitted
      existing.completed &+= entry.completed
      existing.depth += entry.depth
      existing.maxWait = max(existing.maxWait, entry.maxWait)
      existing.recentWait = max(existing.recentWait, entry.recentWait)
      folded[entry.label] = existing
    }
    return folded.values.sorted { $0.label < $1.label }
  }
}
