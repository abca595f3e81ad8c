import MainLoop

/// Serial queues (and the main queue) are Swift `SerialExecutor`s: an actor can run on one.
///
/// ```swift
/// actor Cache {
///   let queue = Queue(label: "cache")
///   nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }
/// }
/// ```
///
/// Jobs are submitted like `async` items, so they interleave with the queue's other work in
/// submission order. `checkIsolated` and `isIsolatingCurrentContext` look at the queues the
/// calling thread is running, so `assumeIsolated` and `preconditionIsolated` work inside
/// plain closures submitted to the queue. A concurrent or global queue cannot serve as a
/// serial executor: enqueueing an actor job on one is a client bug and traps. (A serial queue
/// made wide by ``Queue/setWidth(_:)`` can: actor jobs run on it as barriers.)
extension Queue: SerialExecutor {
  /// Submits an actor's job to this queue like an `async` item; it runs in submission order
  /// with the queue's other work. Called by the Swift runtime; thread-safety: any thread.
  ///
  /// A concurrent or global queue cannot run actor jobs: that is a client bug and traps.
  public func enqueue(_ job: consuming ExecutorJob) {
    guard isSerialLike else {
      clientBug(
        "queue \"\(label)\" is not serial and cannot run actor jobs; use a serial queue as an actor's executor"
      )
    }
    // A barrier item (`QueueWork.actorJob`): on a serial queue an ordinary item; on one made
    // wide (`Queue+Wide.swift`) it still runs alone, so the actor's jobs never overlap.
    serialEnqueue(.actorJob(UnownedJob(job), onMain: false))
  }

  /// This queue as an actor's executor: return it from the actor's `unownedExecutor`.
  public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  /// Whether `other` is this very queue.
  public func isSameExclusiveExecutionContext(other: Queue) -> Bool {
    self === other
  }

  /// Traps unless the calling thread runs this queue exclusively (draining it, in a `sync`,
  /// or in a barrier, directly or through a queue that targets it); backs
  /// `preconditionIsolated()` and `assumeIsolated`.
  public func checkIsolated() {
    if !isIsolatingCurrentThread {
      clientBug("code isolated to queue \"\(label)\" is running outside that queue")
    }
  }

  /// Whether the calling thread runs this queue exclusively, as ``checkIsolated()`` checks;
  /// never `nil`.
  public func isIsolatingCurrentContext() -> Bool? {
    isIsolatingCurrentThread
  }

  /// Whether the calling thread holds this queue exclusively (draining it, in a `sync`, or
  /// in a barrier), directly or as the target of the queue it runs.
  var isIsolatingCurrentThread: Bool {
    ThreadFrame.holds(self, exclusiveOnly: true)
  }
}
