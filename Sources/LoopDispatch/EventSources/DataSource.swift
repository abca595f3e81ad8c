import MainLoop

/// A source for data posted by the program: values posted between two handler runs are
/// merged (added or or-ed) and the handler sees the merged value in ``Source/data``.
public final class DataSource: Source, @unchecked Sendable {
  /// How posted values combine.
  public enum Merge: Sendable {
    /// Values are added (a counter of events).
    case add
    /// Values are or-ed (a set of flags).
    case or
  }

  /// Creates an inactive data source whose handler runs on `queue`.
  public init(merge: Merge, queue: Queue = .global(), label: String = "data-source") {
    super.init(core: SourceCore(queue: queue, merge: merge == .add ? .add : .or), label: label)
  }

  /// Merges `value` into the pending data and schedules the handler. Zero is ignored.
  public func post(_ value: UInt) {
    if value == 0 { return }
    // Never inline: the handler runs as work of the target queue, even when `post` is
    // called on the main thread with the main queue idle.
    core.signal(value, mayRunInline: false)
  }
}
