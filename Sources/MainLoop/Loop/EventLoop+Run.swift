import CLibevent

/// Driving the loop: `run`, its bounded forms, and `stop`.
extension EventLoop {
  /// Runs the loop on the calling thread until ``stop()`` is called.
  ///
  /// The first thread that runs a loop becomes its only thread; ``main`` may only run on the
  /// process main thread. Running from any other thread, or re-entering `run` from a handler,
  /// is a client bug and traps with a `BUG IN CLIENT OF LOOPDISPATCH:` message.
  public func run() {
    _ = drive(until: { false }, deadline: .distantFuture)
  }

  /// Runs the loop until ``stop()`` is called or `deadline` passes (never earlier).
  ///
  /// - Returns: `true` if the deadline passed, `false` if the loop was stopped first.
  @discardableResult
  public func run(until deadline: Deadline) -> Bool {
    drive(until: { false }, deadline: deadline) == .deadline
  }

  /// Runs the loop until `condition` holds, ``stop()`` is called, or `deadline` passes.
  ///
  /// `condition` is checked on the loop thread before the first turn and after every turn;
  /// make it true from work that runs on the loop (or post a closure with ``execute(_:)``
  /// after making it true elsewhere) so that a turn ends and it is seen.
  ///
  /// - Returns: `true` if `condition` held when the loop returned.
  @discardableResult
  public func run(until condition: () -> Bool, deadline: Deadline = .distantFuture) -> Bool {
    drive(until: condition, deadline: deadline) == .condition
  }

  /// Asks the loop to return from ``run()`` after its current turn. Safe from any thread.
  ///
  /// The request is sticky: if the loop is not running, the next `run` returns after at most
  /// one turn.
  public func stop() {
    stopRequested.store(true, ordering: .releasing)
    if !isInLoopThread {
      execute {}  // End the current epoll_wait.
    }
  }

  private enum Exit { case stopped, deadline, condition }

  private func drive(until condition: () -> Bool, deadline: Deadline) -> Exit {
    if isVirtualTime {  // Package-only, hence an internal bug (see EventLoop+VirtualTime.swift).
      internalBug(
        "EventLoop \"\(name)\" has a virtual clock; drive it with advance(by:) or advance(to:)")
    }
    bindToCurrentThread()
    if running.exchange(true, ordering: .acquiringAndReleasing) {
      clientBug(
        "EventLoop \"\(name)\" run() re-entered from its own handler; a loop runs one turn at a time"
      )
    }
    defer { running.store(false, ordering: .releasing) }
    if deadline != .distantFuture && Deadline.now >= deadline {
      if stopRequested.exchange(false, ordering: .acquiringAndReleasing) { return .stopped }
      return condition() ? .condition : .deadline
    }
    // A timer ends the turn in which the deadline passes and says so, so turns read no
    // clock for the deadline (a timer never fires early). Only the loop thread touches it.
    let deadlinePassed = DeadlineFlag()
    let wakeAtDeadline =
      deadline == .distantFuture ? nil : schedule(at: deadline) { deadlinePassed.value = true }
    defer { wakeAtDeadline?.cancel() }
    while true {
      if stopRequested.load(ordering: .relaxed)
        && stopRequested.exchange(false, ordering: .acquiringAndReleasing)
      {
        return .stopped
      }
      if condition() { return .condition }
      if deadlinePassed.value { return .deadline }
      let mayBlock = prepareToSleep()
      // Before a poll that may sleep: LoopDispatch's deferred pool wake-up (`BlockingHook`).
      if mayBlock { BlockingHook.run() }
      // Waking early (`EarlyWake`, rule 1): a timer expiry teaches the wake-up delay only if
      // the loop was asleep when it came, so the entry into the poll is timed, when it can
      // matter. (The clock read is the vDSO's, next to a poll that sleeps.)
      sleptSince = mayBlock && earlyWake.learnsAtNextExpiry ? monotonicNanoseconds() : 0
      let result = event_base_loop(
        base, mayBlock ? cl_evloop_once : cl_evloop_once | cl_evloop_nonblock)
      if result < 0 { internalBug("event_base_loop failed on loop \"\(name)\"") }
      finishTurn()
      // Single writer (the loop thread): a plain load-then-store, no locked add per turn.
      turns.store(turns.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    }
  }
}

/// Set by `drive`'s deadline timer, read by `drive` after each turn.
private final class DeadlineFlag: @unchecked Sendable {
  // @unchecked Sendable: written by a timer of the loop and read by the loop's `drive`,
  // both on the loop thread.
  var value = false
}
