import MainLoop

/// A source for data posted by the program: values posted between two handler runs are
/// merged (added, or-ed, or the latest kept) and the handler sees the merged value in
/// ``Source/data``.
public final class DataSource: Source, @unchecked Sendable {
  /// How posted values combine.
  public enum Merge: Sendable {
    /// Values are added (a counter of events).
    case add
    /// Values are or-ed (a set of flags).
    case or
    /// The latest value replaces any not yet delivered (GCD's `DATA_REPLACE`); posting zero
    /// withdraws a value not yet delivered.
    case replace
  }

  /// Creates an inactive data source whose handler runs on `queue`.
  public init(merge: Merge, queue: Queue = .global(), label: String = "data-source") {
    let engineMerge: DataMerge =
      switch merge {
      case .add: .add
      case .or: .or
      case .replace: .replace
      }
    super.init(core: SourceCore(queue: queue, merge: engineMerge), label: label)
  }

  /// Merges `value` into the pending data and schedules the handler. Zero is ignored by
  /// `.add` and `.or`; with `.replace` it withdraws a value not yet delivered (the handler
  /// then does not run for it).
  public func post(_ value: UInt) {
    if value == 0 {
      // Releasing, like every merge; a delivery that takes 0 skips the handler.
      if core.merge == .replace { core.pendingData.store(0, ordering: .releasing) }
      return
    }
    // Never inline: the handler runs as work of the target queue, even when `post` is
    // called on the main thread with the main queue idle.
    core.signal(value, mayRunInline: false)
  }
}
