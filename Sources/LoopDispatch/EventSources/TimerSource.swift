@_spi(LoopDispatchRuntime) import MainLoop
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
  /// Replaces any earlier schedule; fires counted under it and not yet handled are
  /// discarded. `leeway` is accepted for GCD compatibility; this timer is always precise.
  ///
  /// Thread-safety: any thread, at any time, also concurrently with itself, ``Source/activate()``
  /// and ``Source/cancel()``: the source keeps one timer, the last schedule's, and none after
  /// `cancel()`.
  public func schedule(deadline: Deadline, repeating: Duration? = nil, leeway: Duration = .zero) {
    (core as! TimerCore).schedule(deadline: deadline, interval: repeating)
  }
}

/// Keeps at most one `LoopTimer` on the timer loop for the source and counts its fires.
///
/// Each fire computes how many periods have passed since the schedule started and adds the
/// ones not yet counted, so periods the loop skipped are still counted.
///
/// Walk-through (the `plan` lock orders every step; GCD lets any thread call `schedule` at
/// any time, concurrently with itself, `activate` and `cancel`):
/// 1. `schedule` replaces the plan under the lock: a new generation, start and interval,
///    nothing counted, the replaced schedule's pending fires discarded, its timer taken out
///    (cancelled after the lock is released). If the source is armed and not torn down, this
///    caller claims the start of the timer for *its* generation and carries the generation,
///    start and interval out of the lock: they are never read again after a release, where
///    another `schedule` may already have replaced them.
/// 2. `arm` (activation) claims the start for the current generation if a schedule exists.
///    A generation is claimed once: `schedule` claims only if armed, `arm` only before any
///    later `schedule` (which bumps the generation).
/// 3. `startTimer` makes the timer for its claim, then under the lock installs it only if
///    the claim's generation is still current, the plan is not torn down and no timer is
///    installed; otherwise it cancels the timer itself. So every timer made is either the
///    one installed (and later cancelled by step 1 or 5) or cancelled by its maker: the
///    source never has two, and none outlives `cancel()`.
/// 4. A fire (loop thread) counts and merges its fires into `pendingData` under the lock,
///    only if its generation is current; step 1 clears `pendingData` under the same lock, so
///    no fire of a replaced schedule lands after the clear. The delivery is scheduled once
///    the lock is released (its handler may run inline and call `schedule`).
/// 5. `teardown` (cancel) marks the plan torn down, bumps the generation and takes the
///    installed timer to cancel it; a start in flight then fails step 3's check.
final class TimerCore: SourceCore, @unchecked Sendable {
  // @unchecked Sendable: `plan` is behind its lock; `timerLoop` changes only before
  // activation (see its comment); the base
  // documents the rest.
  private struct Plan {
    var timer: LoopTimer?
    var generation: UInt64 = 0
    var start: Deadline = .distantFuture
    var interval: UInt64 = 0
    var counted: UInt64 = 0
    var armed = false
    var scheduled = false
    var tornDown = false
    var hooks = TimerTestHooks()

    /// The start of the current schedule's timer, if it may start now (steps 1 and 2).
    mutating func claimIfStartable() -> Claim? {
      guard armed && scheduled && !tornDown else { return nil }
      return Claim(
        generation: generation, start: start, interval: interval,
        beforeInstall: hooks.beforeTimerInstalled.take())
    }
  }
  /// The right to start the timer of one generation, with what it needs (steps 1–3).
  private struct Claim {
    let generation: UInt64
    let start: Deadline
    let interval: UInt64
    let beforeInstall: TestHook?
  }
  /// Protected by: its lock.
  private let plan = LockedValue(Plan())
  /// The loop that keeps the timer and whose clock counts the fires: the one
  /// `ServiceLoop.loop(for:)` picks for the queue, or a virtual-time loop a test passed.
  /// Written only before activation (with the target, `targetChanged`); read once armed.
  private var timerLoop: EventLoop
  /// Whether a test chose `timerLoop` (a retarget then keeps it).
  private let timerLoopIsFixed: Bool

  init(queue: Queue, timerLoop: EventLoop?) {
    self.timerLoop = timerLoop ?? ServiceLoop.loop(for: queue)
    timerLoopIsFixed = timerLoop != nil
    super.init(queue: queue, merge: .add)
  }

  override func targetChanged() {
    if !timerLoopIsFixed { timerLoop = ServiceLoop.loop(for: queue) }
  }

  /// Installs hooks that force rare interleavings (tests only). Any thread.
  func setTestHooks(_ hooks: TimerTestHooks) {
    plan.withLock { $0.hooks = hooks }
  }

  /// Step 1. Any thread.
  func schedule(deadline: Deadline, interval: Duration?) {
    let nanos = interval.map { UInt64(Swift.max(1, $0.saturatingNanoseconds)) } ?? 0
    let (old, claim, hook) = plan.withLock { plan -> (LoopTimer?, Claim?, TestHook?) in
      let old = plan.timer
      plan.timer = nil
      plan.generation &+= 1
      plan.start = deadline
      plan.interval = nanos
      plan.counted = 0
      plan.scheduled = true
      // Fires counted under the replaced schedule are discarded, as in GCD. Under the lock
      // that fires merge under (step 4). Releasing; pairs with the acquiring exchange in
      // the delivery.
      pendingData.store(0, ordering: .releasing)
      return (old, plan.claimIfStartable(), plan.hooks.afterPlanReplaced.take())
    }
    old?.cancel()
    hook?()
    if let claim { startTimer(claim) }
  }

  /// Step 2. Called once, by `activate`.
  override func arm() {
    let claim = plan.withLock { plan -> Claim? in
      plan.armed = true
      return plan.claimIfStartable()
    }
    if let claim { startTimer(claim) }
  }

  /// Step 3.
  private func startTimer(_ claim: Claim) {
    let generation = claim.generation
    // Strong: the timer is cancelled in `teardown` (and on reschedule, and here if stale),
    // which releases this closure; a weak capture would leave a tagged side-table pointer
    // that LeakSanitizer cannot follow when a process exits with the timer pending.
    let fire: @Sendable () -> Void = { [self] in fired(generation: generation) }
    let timer =
      claim.interval == 0
      ? timerLoop.schedule(at: claim.start, fire)
      : timerLoop.scheduleRepeating(
        every: .nanoseconds(Int64(claim.interval)), startingAt: claim.start, fire)
    claim.beforeInstall?()
    let installed = plan.withLock { plan -> Bool in
      guard plan.generation == generation, !plan.tornDown, plan.timer == nil else {
        return false
      }
      plan.timer = timer
      return true
    }
    if !installed { timer.cancel() }
  }

  /// Step 4. Runs on the loop thread.
  private func fired(generation: UInt64) {
    let now = timerLoop.now
    let (merged, hook) = plan.withLock { plan -> (Bool, TestHook?) in
      guard plan.generation == generation, !plan.tornDown, now >= plan.start else {
        return (false, nil)
      }
      let total =
        plan.interval == 0
        ? 1 : (now.uptimeNanoseconds - plan.start.uptimeNanoseconds) / plan.interval + 1
      guard total > plan.counted else { return (false, nil) }
      let fresh = total - plan.counted
      plan.counted = total
      // The `.add` merge of `signal`, done here so that it is ordered with `schedule`'s
      // clear. Releasing; pairs with the acquiring loads in `scheduleDelivery` and the
      // delivery's exchange.
      pendingData.wrappingAdd(UInt(fresh), ordering: .acquiringAndReleasing)
      return (true, plan.hooks.afterFireMerged.take())
    }
    hook?()
    if merged { scheduleDelivery(mayRunInline: true) }
  }

  /// Step 5.
  override func teardown(_ completion: @escaping @Sendable () -> Void) {
    let timer = plan.withLock { plan -> LoopTimer? in
      plan.tornDown = true
      plan.generation &+= 1
      defer { plan.timer = nil }
      return plan.timer
    }
    timer?.cancel()
    completion()
  }
}

typealias TestHook = @Sendable () -> Void

/// Points where a test runs code to force a rare interleaving of `TimerCore`'s steps. Each
/// hook runs at most once, with no lock held, on the thread that reaches its point.
struct TimerTestHooks {
  /// In `schedule`, after the plan is replaced and before its timer is started.
  var afterPlanReplaced: TestHook?
  /// In `startTimer`, after the timer is made and before it is installed.
  var beforeTimerInstalled: TestHook?
  /// In a fire, after its fires are merged and before the delivery is scheduled.
  var afterFireMerged: TestHook?
}
