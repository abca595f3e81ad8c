import MainLoop

extension Queue {
  /// Stops the queue from starting new items until a matching ``resume()``. Counted: each
  /// `suspend` needs its own `resume`. Takes effect between items: a running item finishes.
  ///
  /// Suspending a global queue or the main queue has no effect, as in GCD.
  public func suspend() {
    switch kind {
    case .root, .main: return
    case .serial: serialSuspend()
    case .concurrent: concurrentSuspend()
    }
  }

  /// Undoes one ``suspend()``. On a queue created inactive and never suspended, activates it.
  ///
  /// Resuming a queue that is not suspended is a client bug and traps (over-resume).
  /// Resuming a global queue or the main queue has no effect, as in GCD.
  public func resume() {
    switch kind {
    case .root, .main: return
    case .serial: serialResume()
    case .concurrent: concurrentResume()
    }
  }

  /// Lets a queue created with `.initiallyInactive` run its work. Idempotent.
  public func activate() {
    switch kind {
    case .root, .main: return
    case .serial: serialActivate()
    case .concurrent: concurrentActivate()
    }
  }

  /// Whether this is a custom concurrent queue (where barriers mean something).
  package var isConcurrent: Bool { kind == .concurrent }

  /// Whether this is the main queue or a global queue (plain or overcommit): shared by the
  /// whole process, never released (the C API's retain and release ignore them).
  package var livesForTheProcess: Bool { !isCustom }

  /// Changes how many items of this concurrent queue may run at once.
  ///
  /// Items already running finish; a wider queue starts waiting items at once, a narrower
  /// one starts no more until fewer than `width` run. Barriers still run alone.
  /// Thread-safety: any thread.
  ///
  /// A width below 1, or a width for a queue that is not a custom concurrent queue, is a
  /// client bug.
  public func setWidth(_ width: Int) {
    guard kind == .concurrent else {
      clientBug(
        "setWidth(\(width)) on queue \"\(label)\", which is not a concurrent queue; width applies to concurrent queues"
      )
    }
    if width < 1 {
      clientBug("concurrent queue width must be at least 1, got \(width) (queue \"\(label)\")")
    }
    concurrentSetWidth(width)
  }

  /// The queue the calling thread is running work for, innermost first; the main queue on
  /// the process main thread outside any queue's work (the main thread always runs "on"
  /// the main queue, as in GCD); `nil` on any other thread that is not running queue work.
  /// For debugging and logging only.
  public static var current: Queue? {
    if let frame = ThreadFrame.current { return frame.pointee.queue }
    return EventLoop.main.isInLoopThread ? Queue.main : nil
  }

  /// Whether the calling thread is running work for this queue (directly or as a target of
  /// the queue it is running). Use it in preconditions. For the main queue: whether the
  /// caller is on the process main thread, in any context (GCD's rule).
  public var isCurrent: Bool {
    if kind == .main && EventLoop.main.isInLoopThread { return true }
    return ThreadFrame.holds(self, exclusiveOnly: false)
  }

  /// Whether the calling thread runs this queue's work alone: an item of a serial queue, or
  /// a barrier (or barrier `sync`) of a concurrent one; the main queue on the main thread.
  /// For the C API's `dispatch_assert_queue_barrier`.
  package var isHeldExclusivelyByCurrentThread: Bool {
    if kind == .main && EventLoop.main.isInLoopThread { return true }
    return ThreadFrame.holds(self, exclusiveOnly: true)
  }
}
