import MainLoop
import Synchronization

/// A timer delivered to a queue: one-shot or repeating, re-schedulable at any time (also from
/// its own handler). Fires never come early; fires missed while the handler was slow or the
/// source suspended are coalesced into one handler run, and ``Source/data`` counts them.
public final class TimerSource: Source, @unchecked Sendable {
  /// Creates an inactive timer source whose handler runs on `queue`. Call
  /// ``schedule(deadline:repeating:leeway:)`` and ``Source/activate()``.
  public init(queue: Queue = .global(), label: String = "timer-source") {
    super.init(core: TimerCore(queue: queue, timerLoop: nil), label: label)
  }

  /// A timer source whose timer lives on `timerLoop` and whose deadlines are read against
  /// that loop's clock: tests pass a virtual-time loop (`EventLoop(clock: .virtual())`) and
  /// drive it; the handler still runs on `queue`.
  package init(queue: Queue, label: String = "timer-source", timerLoop: EventLoop) {
    super.init(core: TimerCore(queue: queue, timerLoop: timerLoop), label: label)
  }

  /// Sets when the timer fires: first at `deadline`, then every `repeating` (nil: once).
  /// Replaces any earlier schedule. `leeway` is accepted for GCD compatibility; this timer
  /// is always precise.
  public func schedule(deadline: Deadline, repeating: Duration? = nil, leeway: Duration = .zero) {
    (core as! TimerCore).schedule(deadline: deadline, interval: repeating)
  }
}

/// Keeps one `LoopTimer` on the source's loop and counts fires.
///
/// Each fire computes how many periods have passed since the schedule started and adds the
/// ones not yet counted, so periods the loop skipped are still counted.
final class TimerCore: SourceCore, @unchecked Sendable {
  // @unchecked Sendable: `plan` is behind its lock; `timerLoop` is immutable; the base
  // documents the rest.
  private struct Plan {
    var timer: LoopTimer?
    var generation: UInt64 = 0
    var start: Deadline = .distantFuture
    var interval: UInt64 = 0
    var counted: UInt64 = 0
    var armed = false
    var scheduled = false
  }
  /// Protected by: its lock.
  private let plan = LockedValue(Plan())
  /// Immutable. The loop that keeps the timer and whose clock counts the fires: the one
  /// `ServiceLoop.loop(for:)` picks for the queue, or a virtual-time loop a test passed.
  private let timerLoop: EventLoop

  init(queue: Queue, timerLoop: EventLoop?) {
    self.timerLoop = timerLoop ?? ServiceLoop.loop(for: queue)
    super.init(queue: queue, merge: .add)
  }

  func schedule(deadline: Deadline, interval: Duration?) {
    let nanos = interval.map { UInt64(Swift.max(1, $0.saturatingNanoseconds)) } ?? 0
    let (old, start) = plan.withLock { plan -> (LoopTimer?, Bool) in
      let old = plan.timer
      plan.timer = nil
      plan.generation &+= 1
      plan.start = deadline
      plan.interval = nanos
      plan.counted = 0
      plan.scheduled = true
      return (old, plan.armed)
    }
    old?.cancel()
    // Fires counted under the replaced schedule are discarded, as in GCD.
    pendingData.store(0, ordering: .releasing)
    if start { startTimer() }
  }

  override func arm() {
    let start = plan.withLock { plan -> Bool in
      plan.armed = true
      return plan.scheduled
    }
    if start { startTimer() }
  }

  private func startTimer() {
    let (generation, start, interval) = plan.withLock { ($0.generation, $0.start, $0.interval) }
    if isCancelled { return }
    // Strong: the timer is cancelled in `teardown` (and on reschedule), which releases this
    // closure; a weak capture would leave a tagged side-table pointer that LeakSanitizer
    // cannot follow when a process exits with the timer pending.
    let fire: @Sendable () -> Void = { [self] in fired(generation: generation) }
    let timer =
      interval == 0
      ? timerLoop.schedule(at: start, fire)
      : timerLoop.scheduleRepeating(every: .nanoseconds(Int64(interval)), startingAt: start, fire)
    let stale = plan.withLock { plan -> Bool in
      guard plan.generation == generation else { return true }
      plan.timer = timer
      return false
    }
    if stale { timer.cancel() }
  }

  /// Runs on the loop thread.
  private func fired(generation: UInt64) {
    let now = timerLoop.now
    let newFires = plan.withLock { plan -> UInt64 in
      guard plan.generation == generation, now >= plan.start else { return 0 }
      let total =
        plan.interval == 0
        ? 1 : (now.uptimeNanoseconds - plan.start.uptimeNanoseconds) / plan.interval + 1
      let fresh = total > plan.counted ? total - plan.counted : 0
      plan.counted = total
      return fresh
    }
    if newFires > 0 { signal(UInt(newFires)) }
  }

  override func teardown(_ completion: @escaping @Sendable () -> Void) {
    let timer = plan.withLock { plan -> LoopTimer? in
      plan.generation &+= 1
      defer { plan.timer = nil }
      return plan.timer
    }
    timer?.cancel()
    completion()
  }
}
