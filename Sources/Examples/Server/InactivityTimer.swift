import LoopDispatch
import MainLoop

/// What a connection is doing, as its ``InactivityTimer`` sees it.
package enum ConnectionActivity: Equatable, Sendable {
  /// Waiting for the client's next request: the idle timeout applies.
  case idle
  /// Answers wait for the client to take them: the write timeout applies (no write progress).
  case writing
  /// The server is working on a request, or one has arrived and is not read yet: no timeout.
  case working
}

/// Closes a connection that has shown no activity for too long: idle for `idleTimeout`, or
/// with answers pending and no write progress for `writeTimeout`. Both are measured from the
/// last activity (a byte read or written, an answer queued), so a slow request's connection
/// gets its whole idle timeout after the answer, and a client that never reads is closed.
///
/// Walk-through:
/// 1. `noteActivity()` records the time and schedules a timer (for the shorter of the two
///    timeouts) only when none is pending: one
///    timer per connection, not one per request (a cancel and a new timer per request kept the
///    service loop busy with timer churn, a tenth of the server's CPU under load).
/// 2. When the timer fires it asks the connection what it is doing (`activity`): idle → the
///    deadline is the last activity plus `idleTimeout`; writing → plus `writeTimeout`;
///    working → none yet (the work's answer will be activity), checked again after the
///    shorter of the two timeouts.
/// 3. A deadline that has passed calls `expired` with the activity; otherwise the timer is
///    scheduled again for the deadline. `stop()` cancels it for good.
///
/// Thread-safety: confined to `queue`: every method is called there and the timer's work runs
/// there.
package final class InactivityTimer: @unchecked Sendable {
  // @unchecked Sendable: every mutable property is only touched on `queue` (see above).
  package let idleTimeout: Duration
  package let writeTimeout: Duration
  private let queue: Queue
  /// The loop whose clock the deadlines are read against (tests pass a virtual-time loop);
  /// nil for the runtime's own timers and the monotonic clock.
  private let loop: EventLoop?
  private let activity: () -> ConnectionActivity
  private let expired: (ConnectionActivity) -> Void
  /// Only touched on `queue`.
  private var lastActivity: Deadline
  /// Only touched on `queue`.
  private var pending: DelayedWork?
  /// Only touched on `queue`.
  private var stopped = false

  /// A timer for a connection whose state `activity` reports and which `expired` closes.
  /// Both closures run on `queue`. Call `noteActivity()` (on `queue`) to start it.
  package init(
    queue: Queue, idleTimeout: Duration, writeTimeout: Duration, loop: EventLoop? = nil,
    activity: @escaping () -> ConnectionActivity,
    expired: @escaping (ConnectionActivity) -> Void
  ) {
    self.queue = queue
    self.idleTimeout = idleTimeout
    self.writeTimeout = writeTimeout
    self.loop = loop
    self.activity = activity
    self.expired = expired
    lastActivity = loop?.now ?? .now
  }

  private var now: Deadline { loop?.now ?? .now }

  /// Records activity now; the timeouts count from here. Queue.
  package func noteActivity() {
    if stopped { return }
    lastActivity = now
    if pending == nil { schedule(at: lastActivity + Swift.min(idleTimeout, writeTimeout)) }
  }

  /// Cancels the timer for good; `expired` is never called afterwards. Queue.
  package func stop() {
    stopped = true
    pending?.cancel()
    pending = nil
  }

  private func schedule(at deadline: Deadline) {
    // A strong capture: `stop()` cancels the timer, which releases the closure at once; a
    // fire already submitted finds `stopped` set.
    let work: @Sendable () -> Void = { [self] in fired() }
    if let loop {
      pending = queue.after(deadline: deadline, on: loop, execute: work)
    } else {
      pending = queue.after(deadline: deadline, execute: work)
    }
  }

  private func fired() {
    pending = nil
    if stopped { return }
    let current = activity()
    let due: Deadline
    switch current {
    case .idle: due = lastActivity + idleTimeout
    case .writing: due = lastActivity + writeTimeout
    // Working: checked again after the shorter timeout, so that a connection whose work
    // ends in a stuck write is closed within one write timeout of it, not an idle one.
    case .working: return schedule(at: now + Swift.min(idleTimeout, writeTimeout))
    }
    if now < due { return schedule(at: due) }
    expired(current)
  }
}
