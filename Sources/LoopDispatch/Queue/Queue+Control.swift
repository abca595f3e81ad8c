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

  /// Changes how many items of this queue may run at once.
  ///
  /// On a concurrent queue it applies at once: items already running finish; a wider queue
  /// starts waiting items at once, a narrower one starts no more until fewer than `width`
  /// run. Barriers still run alone.
  ///
  /// On a serial queue it applies, as libdispatch's `dispatch_queue_set_width` does, at a
  /// barrier: the items submitted before the call run one at a time as before, and those
  /// submitted after it run side by side up to `width` (barriers alone), in submission
  /// order. A serial queue made wide stays wide (`setWidth(1)` makes it run one item at a
  /// time again; on a queue never made wide it changes nothing); an actor whose executor it
  /// is still runs one job at a time. Each of its items makes one extra hop (see `Queue+Wide.swift`); create the queue with `.concurrent` instead when
  /// you can.
  ///
  /// Thread-safety: any thread.
  ///
  /// A width below 1, or a width for the main queue or a global queue, is a client bug (the
  /// C API's `dispatch_queue_set_width` ignores those two, as libdispatch does).
  public func setWidth(_ width: Int) {
    if width < 1 {
      clientBug("queue width must be at least 1, got \(width) (queue \"\(label)\")")
    }
    switch kind {
    case .concurrent: concurrentSetWidth(width)
    case .serial: serialSetWidth(width)
    case .main, .root:
      clientBug(
        "setWidth(\(width)) on queue \"\(label)\", the main queue or a global queue, whose width is fixed"
      )
    }
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
