/// The four global queues' priorities, strictly ordered: a worker always takes work from the
/// highest non-empty lane first.
public enum Priority: Int, Sendable, CaseIterable, Comparable, CustomStringConvertible {
  /// User-initiated, latency-sensitive work.
  case high = 0
  /// The default for work without a stated priority.
  case `default` = 1
  /// Work the user is not waiting for.
  case low = 2
  /// Maintenance and prefetching; runs only when nothing else waits.
  case background = 3

  /// Whether `lhs` is the higher priority: `.high` sorts first, `.background` last.
  public static func < (lhs: Priority, rhs: Priority) -> Bool {
    // Higher priority sorts first.
    lhs.rawValue < rhs.rawValue
  }

  /// The case name: `"high"`, `"default"`, `"low"` or `"background"`.
  public var description: String {
    switch self {
    case .high: return "high"
    case .default: return "default"
    case .low: return "low"
    case .background: return "background"
    }
  }
}
