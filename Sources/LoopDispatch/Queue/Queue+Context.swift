@_spi(LoopDispatchRuntime) import MainLoop

/// A queue's rarely used state. Protected by the queue's `extras` lock.
struct QueueExtras {
  /// Every target the queue has had (see `Queue.targetPointer`).
  var targetsKeptAlive: [Queue] = []
  var context: (any Sendable)?
  var finalizer: (@Sendable ((any Sendable)?) -> Void)?
  var specifics: [ObjectIdentifier: any Sendable] = [:]
}

/// A typed key for ``Queue/setSpecific(key:value:)``; keys compare by identity.
public final class SpecificKey<Value: Sendable>: Sendable {
  /// Creates a key, distinct from every other key.
  public init() {}
}

extension Queue {
  /// A value attached to the queue, handed to the finalizer when the queue goes away.
  /// Always `nil` on the main and global queues, where setting it has no effect (as in GCD:
  /// they are shared by the whole process and never finalized).
  public var context: (any Sendable)? {
    get {
      guard isCustom else { return nil }
      return extras.withLock { $0.context }
    }
    set {
      guard isCustom else { return }
      extras.withLock { $0.context = newValue }
    }
  }

  /// Custom (serial or concurrent) queues, as opposed to the main and global queues.
  var isCustom: Bool { kind == .serial || kind == .concurrent }

  /// Sets the closure that receives ``context`` once the queue is gone.
  ///
  /// The finalizer runs exactly once, on the queue's target, after every item submitted
  /// before the last reference to the queue was dropped has run.
  /// The main and global queues are never finalized: setting one there has no effect.
  public func setFinalizer(_ finalizer: @escaping @Sendable ((any Sendable)?) -> Void) {
    guard isCustom else { return }
    extras.withLock { $0.finalizer = finalizer }
  }

  /// Called from `deinit`.
  func runFinalizer() {
    guard hasExtras else { return }
    let (value, finalizer) = extras.withLock { ($0.context, $0.finalizer) }
    guard let finalizer else { return }
    let target = self.target ?? Queue.global()
    target.async { finalizer(value) }
  }

  /// Attaches `value` to this queue under `key` (`nil` removes it).
  public func setSpecific<Value>(key: SpecificKey<Value>, value: Value?) {
    extras.withLock { extras in
      extras.specifics[ObjectIdentifier(key)] = value.map { $0 as any Sendable }
    }
  }

  /// The value for `key` on this queue, or else on the nearest queue up its target chain.
  public func getSpecific<Value>(key: SpecificKey<Value>) -> Value? {
    var queue: Queue? = self
    while let current = queue {
      if current.hasExtras,
        let found = current.extras.withLock({ $0.specifics[ObjectIdentifier(key)] })
      {
        return found as? Value
      }
      queue = current.target
    }
    return nil
  }

  /// The value for `key` on this queue itself, without looking up its target chain (the C
  /// API's `dispatch_queue_get_specific`).
  package func ownSpecific<Value>(key: SpecificKey<Value>) -> Value? {
    guard hasExtras else { return nil }
    return extras.withLock { $0.specifics[ObjectIdentifier(key)] } as? Value
  }

  /// The value for `key` on the queue the calling thread is running work for (walking its
  /// target chain), or `nil` off any queue.
  public static func getSpecific<Value>(key: SpecificKey<Value>) -> Value? {
    current?.getSpecific(key: key)
  }
}
