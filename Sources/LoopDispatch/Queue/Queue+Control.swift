import MainLoop

extension Queue {
  /// Stops the queue from starting new items until a matching ``resume()``. Counted: each
  /// `suspend` needs its own `resume`. Takes effect between items: a running item finishes.
  ///
  /// Suspending a global queue has no effect, as in GCD.
  public func suspend() {
    switch kind {
    case .root: return
    case .serial, .main: serialSuspend()
    case .concurrent: concurrentSuspend()
    }
  }

  /// Undoes one ``suspend()``. On a queue created inactive and never suspended, activates it.
  ///
  /// Resuming a queue that is not suspended is a client bug and traps (over-resume).
  public func resume() {
    switch kind {
    case .root: return
    case .serial, .main: serialResume()
    case .concurrent: concurrentResume()
    }
  }

  /// Lets a queue created with `.initiallyInactive` run its work. Idempotent.
  public func activate() {
    switch kind {
    case .root: return
    case .serial, .main: serialActivate()
    case .concurrent: concurrentActivate()
    }
  }

  /// The queue the calling thread is running work for, innermost first; `nil` on a thread
  /// that is not running queue work. For debugging and logging only.
  public static var current: Queue? {
    ThreadFrame.current?.pointee.queue
  }

  /// Whether the calling thread is running work for this queue (directly or as a target of
  /// the queue it is running). Use it in preconditions.
  public var isCurrent: Bool {
    ThreadFrame.holds(self, exclusiveOnly: false)
  }

  /// Whether the calling thread runs this queue's work alone: an item of a serial queue, or
  /// a barrier (or barrier `sync`) of a concurrent one. For the C API's
  /// `dispatch_assert_queue_barrier`.
  package var isHeldExclusivelyByCurrentThread: Bool {
    ThreadFrame.holds(self, exclusiveOnly: true)
  }
}
