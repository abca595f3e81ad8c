import MainLoop

/// A handle to work scheduled with ``Queue/after(_:execute:)``; cancel it before it fires.
///
/// Thread-safety: any thread.
public final class DelayedWork: Sendable {
  private struct State {
    var work: (@Sendable () -> Void)?
    var timer: LoopTimer?
    var cancelled = false
  }
  /// Protected by: its lock.
  private let state: LockedValue<State>
  /// The queue the work will be submitted to.
  public let queue: Queue

  init(queue: Queue, work: @escaping @Sendable () -> Void) {
    self.queue = queue
    self.state = LockedValue(State(work: work))
  }

  /// Stops the work from being submitted. The closure, and what it captured, is released
  /// before `cancel()` returns. No effect once the work has been submitted.
  public func cancel() {
    let (work, timer) = state.withLock { state -> ((@Sendable () -> Void)?, LoopTimer?) in
      state.cancelled = true
      defer {
        state.work = nil
        state.timer = nil
      }
      return (state.work, state.timer)
    }
    timer?.cancel()
    _ = work  // Released here, outside the lock.
  }

  /// Whether ``cancel()`` was called.
  public var isCancelled: Bool { state.withLock { $0.cancelled } }

  func attach(_ timer: LoopTimer) {
    let cancelledAlready = state.withLock { state -> Bool in
      if state.cancelled { return true }
      if state.work != nil { state.timer = timer }
      return false
    }
    if cancelledAlready { timer.cancel() }
  }

  /// Runs on the timer's loop: submits the work unless cancelled.
  func fire() {
    let work = state.withLock { state -> (@Sendable () -> Void)? in
      defer {
        state.work = nil
        state.timer = nil
      }
      return state.work
    }
    if let work { queue.async(execute: work) }
  }
}

extension Queue {
  /// Submits `work` to this queue no earlier than `delay` from now.
  ///
  /// Timers of the main queue live on the main loop; the others on LoopDispatch's service
  /// thread, which enqueues the work here when it fires. A delay of zero or less behaves
  /// like ``async(flags:execute:)``.
  @discardableResult
  public func after(_ delay: Duration, execute work: @escaping @Sendable () -> Void) -> DelayedWork
  {
    after(deadline: .now + delay, execute: work)
  }

  /// Submits `work` to this queue no earlier than `deadline` (monotonic clock).
  /// ``Deadline/distantFuture`` never fires.
  @discardableResult
  public func after(
    deadline: Deadline, execute work: @escaping @Sendable () -> Void
  ) -> DelayedWork {
    let delayed = DelayedWork(queue: self, work: work)
    if deadline <= .now {
      delayed.fire()
      return delayed
    }
    let timer = ServiceLoop.loop(for: self).schedule(at: deadline) { delayed.fire() }
    delayed.attach(timer)
    return delayed
  }

  /// Submits `work` to this queue no earlier than the wall-clock time `wallDeadline`.
  ///
  /// The wall time is converted to the monotonic clock when scheduling; later changes of the
  /// system clock do not move the timer.
  @discardableResult
  public func after(
    wallDeadline: WallDeadline, execute work: @escaping @Sendable () -> Void
  ) -> DelayedWork {
    after(deadline: wallDeadline.monotonicEquivalent, execute: work)
  }

  /// Submits `item` to this queue no earlier than `deadline`; cancelling the item stops it.
  @discardableResult
  public func after(deadline: Deadline, execute item: WorkItem) -> DelayedWork {
    after(deadline: deadline) { item.perform() }
  }
}
