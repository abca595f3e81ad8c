import MainLoop
import Synchronization

/// Running a pool job at a deadline without the worker's wake-up in its lateness: the service
/// loop hands the job to the pool `lead` ahead of its deadline, and the worker that takes it
/// waits out the rest by spinning. Used for `Task.sleep` on the installed default executor.
///
/// Why: the service loop's timer fires on time (it wakes early itself: `EarlyWake`), but the job
/// it hands over then waits for a parked worker, and on these VMs a parked thread runs 30–70 µs
/// after its futex wake (the halted virtual CPU's wake-up). That was most of a sleep's lateness:
/// 39–43 µs at the median in the `tasksleep` row (10 tasks sleeping 1 ms at a time).
///
/// Rules:
/// 1. `run(at:priority:_:)` with a deadline at least `minimumDelay` away, on a pool of more
///    than one CPU and a machine that is not loaded (`SpinGovernor`), sets a service-loop timer
///    for `deadline − lead`; when it fires, the body goes to the pool wrapped with its deadline
///    and the instant the timer was set for. Otherwise the timer is set for the deadline
///    itself (lead 0), as a plain timer would be: no spin on a single core, which the spinner
///    would take from the thread it waits for, nor on a loaded machine.
/// 2. The worker that takes the body (early or not) folds the delay from the instant the
///    timer was set for to its own start into `lead`, so the service loop's own lateness
///    counts too (it does not wake early for deadlines under 500 µs apart, `EarlyWake`): the
///    newest delay weighs 1/8 (`EarlyWake.averaged`). A delay over `maxLead` is
///    not learnt: a wake-up takes 30–70 µs here, so the job waited behind others (a busy
///    pool) or its worker was preempted, and neither says how early the next hand-off should
///    come (learnt, such delays would hold the lead at the cap, and every hand-off to an idle
///    pool would then spin up to 100 µs; `EarlyWake` learnt the same lesson).
/// 3. It then spins until the deadline if that is still ahead and runs the body: never before
///    the deadline. The service loop never fires a timer early, so a hand-off is at most the
///    lead it was timed with (≤ `maxLead`) ahead of its deadline. A deadline further ahead than
///    that cannot happen with the monotonic clock all of this reads; as a defence, such a body
///    goes back to the service loop, timed for the deadline itself.
///
/// The machine's load is judged when the sleep is scheduled (rule 1), not again at the spin:
/// a machine that became loaded meanwhile costs one spin of at most `maxLead`.
///
/// Cost: a worker spins `lead − delay` when its hand-off came quicker than the average, and holds
/// no lock while it does; a pool busy with other work takes the body late and does not spin.
///
/// Who may touch what: `lead` is one atomic word, loaded by whichever thread schedules and
/// stored by the workers that take hand-offs. Relaxed: it is an estimate; two workers that fold
/// at once lose one sample, and every stored value is at most `maxLead`.
final class EarlyHandOff: Sendable {
  /// The most one delay counts for, and so the most a hand-off comes early.
  static let maxLead: UInt64 = 100_000
  /// Only deadlines at least this far away are handed over early.
  static let minimumDelay: UInt64 = 250_000

  /// The hand-offs of `Task.sleep` wake-ups on the installed default executor.
  static let sleeps = EarlyHandOff(cpus: CPUBudget.current.cpus) {
    SpinGovernor.process.isPressured(now: Deadline.now.uptimeNanoseconds)
  }

  /// Atomic. How early a hand-off is timed (ns): the average delay learnt by rule 2.
  private let learnt = Atomic<UInt64>(0)
  /// Whether the machine is loaded now (then no early hand-off).
  private let isPressured: @Sendable () -> Bool
  /// Whether the pool has a second core for the spinner (rule 1).
  private let hasSpareCore: Bool
  /// A fixed lead instead of the learnt one (tests), or nil.
  private let fixedLead: UInt64?
  /// Atomic, figures: bodies timed early (rule 1), bodies a worker started early and held
  /// until their deadline (rule 3), and bodies sent back to the service loop.
  let handedEarly = Atomic<UInt64>(0)
  let spins = Atomic<UInt64>(0)
  let retimed = Atomic<UInt64>(0)

  init(cpus: Int, fixedLead: UInt64? = nil, isPressured: @escaping @Sendable () -> Bool) {
    hasSpareCore = cpus > 1
    self.fixedLead = fixedLead.map { Swift.min($0, Self.maxLead) }
    self.isPressured = isPressured
  }

  /// How early a hand-off is timed now.
  var lead: UInt64 { fixedLead ?? learnt.load(ordering: .relaxed) }

  /// Runs `body` on the pool at `priority`, no earlier than `deadline` (`Deadline`
  /// nanoseconds), timed by the service loop (rule 1).
  func run(
    at deadline: UInt64, priority: Priority, _ body: @escaping @Sendable () -> Void
  ) {
    let now = Deadline.now.uptimeNanoseconds
    var early: UInt64 = 0
    if hasSpareCore && deadline > now && deadline - now >= Self.minimumDelay && !isPressured() {
      early = lead
      if early > 0 { handedEarly.wrappingAdd(1, ordering: .relaxed) }
    }
    // Lead 0 times the hand-off for the deadline itself; its delay is learnt all the same, so
    // a lead is there once the machine allows one.
    let timedFor = deadline - early
    ServiceLoop.shared.schedule(at: Deadline(uptimeNanoseconds: timedFor)) { [self] in
      WorkerPool.shared.submit(
        .closure { [self] in take(timedFor: timedFor, deadline: deadline, priority, body) },
        priority: priority)
    }
  }

  /// Rules 2 and 3, on the worker that took the hand-off (internal for tests).
  func take(
    timedFor: UInt64, deadline: UInt64, _ priority: Priority,
    _ body: @escaping @Sendable () -> Void
  ) {
    let now = Deadline.now.uptimeNanoseconds
    fold(delay: now &- timedFor)
    if now < deadline {
      guard deadline - now <= Self.maxLead else {
        retimed.wrappingAdd(1, ordering: .relaxed)
        ServiceLoop.shared.schedule(at: Deadline(uptimeNanoseconds: deadline)) {
          WorkerPool.shared.submit(.closure(body), priority: priority)
        }
        return
      }
      spins.wrappingAdd(1, ordering: .relaxed)
      EarlyWake.spin(until: deadline, now: now, within: Self.maxLead)
    }
    body()
  }

  /// Rule 2: folds one hand-off delay into the learnt lead (a delay over `maxLead` is not
  /// learnt).
  func fold(delay: UInt64) {
    guard delay <= Self.maxLead else { return }
    let old = learnt.load(ordering: .relaxed)
    learnt.store(EarlyWake.averaged(old, with: delay), ordering: .relaxed)
  }
}
