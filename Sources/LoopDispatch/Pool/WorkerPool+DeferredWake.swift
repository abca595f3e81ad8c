@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// Deferred wake-ups: a thread outside the pool that submits while every CPU is already taken
/// leaves the parked workers asleep.
///
/// Why: one thread outside the pool (the main thread) submitting a stream of small jobs onto a
/// global queue, on two CPUs, with two workers. The submitter is slower than one worker (each
/// job's closure context is a `malloc` on the submitter whose chunk a worker freed), so the
/// consumers run dry again and again. Each time one parked, the next submission found nobody
/// searching and woke it: 30,726 futex wakes by the submitting thread for 2M jobs, and the
/// woken worker, placed on the submitter's CPU, preempted it (58,926 involuntary context
/// switches of the main thread a second, `/proc/<pid>/task/*/status`) to find the job already
/// taken by the other worker. One worker alone (`LOOPDISPATCH_CPUS=1`) ran the same 1M jobs
/// in 73 ns each against 125 with two; with a context switch costing microseconds on a VM,
/// 335 against 606–633 (`Benchmarks globalcapture --side ours`, same hour). The second worker
/// was not parallelism: there was no CPU for it.
///
/// The rules:
/// 1. **When a wake-up is deferred.** A submission onto an injection queue, at the default
///    lane or below, from a thread that is not a worker (`enqueue`), when no worker is
///    searching (those own the job already: rule 1 of `WorkerPool+Parking.swift`), the pool
///    has never grown past its base workers nor been refused one, no worker is asleep inside a
///    job in one of LoopDispatch's waits (rule 4), deferrals are not suspended (rule 3), at
///    least one base worker is running, and the running ones plus the submitting thread fill
///    the CPU budget (`CPUBudget.cpus`). Then a woken worker could only take a CPU from the
///    submitter or from a running worker, which comes back for the job after its current one
///    (at once for a job of a higher lane than its own; within a few jobs otherwise: the
///    run-next and injection fairness rules). The submitter wakes nobody, tells the
///    supervisor (`noteWorkWaiting`: a futex wake only when it sleeps) and remembers, in a
///    thread-local flag, that it owes a wake-up.
/// 2. **The submitter pays what it owes before it blocks.** LoopDispatch's waits sleep
///    through `FutexWord.wait`, which calls `flushBeforeBlocking`: a thread that owes a
///    wake-up makes it there (`notifyWork`, if work is still queued). So do the event loops
///    before a poll that may block (the main loop and the service loop, through MainLoop's
///    `BlockingHook`), the I/O driver's poller before each `epoll_wait` and before an inline
///    handler, its standby before it sleeps, and `apply` once it has asked for helpers. A
///    submitter that fans out and waits (a group, a semaphore, `sync`) thus gets every CPU
///    the moment it stops using its own.
/// 3. **The supervisor covers the rest, and learns.** A submitter that blocks elsewhere (a
///    `read`, a `pthread` lock, `sleep`) or exits, or a running worker that blocks in the
///    kernel outside LoopDispatch, leaves the job queued with a parked worker: the
///    supervisor, told in rule 1, sees jobs wait a whole tick with none started and wakes
///    the parked worker (`PoolSupervisor.run`), about 5–10 ms late. It then suspends
///    deferrals for `deferralPause` (1 s), so a pattern that keeps meeting that tick (a
///    request and its answer between a thread blocked in `poll` and a worker blocked in
///    `read`) pays it once a second, not per job. A deferred job is never stranded: the
///    supervisor stays awake while jobs wait. It may wait longer than a tick while the
///    running worker keeps starting jobs of its own lane from its slot or local queue: up to
///    those fairness rules' few jobs.
/// 4. **Workers asleep in a job do not count as running.** A worker inside a job that sleeps
///    in `FutexWord.wait` (a semaphore, a group's wait, a `sync` on a busy queue) counts itself
///    in `blockedInJobs` for the sleep; while any does, rule 1 never defers. Counted first,
///    then it looks for queued jobs and wakes a worker for them if any (both sequentially
///    consistent, against the submitter's publication and its load of the count: Dekker), so
///    the job such a worker waits for is never left to the supervisor's tick.
///
/// Checked: `DeferredWakeTests` (rules 1–4, each in a process with a two-CPU budget) and the
/// pool's model, whose submitter off the pool may leave its last wake-up to the supervisor
/// (`PoolProtocolModelTests.deferredWakesLeftToTheSupervisorStrandNothing`; a deferral that
/// tells nobody strands a job there).
///
/// What a deferral costs the submitter: loads of `searching`, of the deferral words and of
/// the idle word, and a thread-local store; no shared write but `noteWorkWaiting`'s, once per
/// supervisor sleep.
extension WorkerPool {
  /// Rule 1, after an outside submitter published its job on an injection queue.
  @inline(__always)
  func notifyWorkFromOutside(lane: Int) {
    poolProbe(.notify)
    if searching.load(ordering: .sequentiallyConsistent) > 0 { return }
    if lane <= Priority.default.rawValue && everyCPUIsTaken() {
      ThreadSlots.setOwesWake(true)
      countPoolEvent(.wakeDeferred)
      supervisor.noteWorkWaiting()
      return
    }
    if !wakeIdleWorker() { supervisor.noteWorkWaiting() }
  }

  /// Rule 1's condition: base workers only, none asleep in a job, at least one running, and
  /// the running ones plus the calling thread fill the budget.
  @inline(__always)
  private func everyCPUIsTaken() -> Bool {
    guard baseThreads <= 64, tableCount.load(ordering: .relaxed) == baseThreads,
      deferral.blockedInJobs.load(ordering: .sequentiallyConsistent) == 0,
      !deferral.isSuspended, refusedSpawns.load(ordering: .relaxed) == 0
    else { return false }
    // Base workers hold the lowest indices (started first, never retired): bits 0..<base.
    let baseMask: UInt64 = baseThreads == 64 ? ~0 : (UInt64(1) << UInt64(baseThreads)) &- 1
    let parked = (idleWords[0].load(ordering: .sequentiallyConsistent) & baseMask)
      .nonzeroBitCount
    let running = baseThreads - parked
    return running >= 1 && running + 1 >= budget.cpus
  }

  /// Rule 2: makes the wake-up the calling thread deferred, if it owes one. Any thread that is
  /// not a worker, before it may block.
  @inline(__always)
  static func payOwedWake() {
    guard ThreadSlots.owesWake() else { return }
    payOwedWakeSlow()
  }

  @inline(never)
  private static func payOwedWakeSlow() {
    ThreadSlots.setOwesWake(false)
    let pool = WorkerPool.shared
    if pool.hasQueuedWork() { pool.notifyWork() }
  }

  /// Rule 4, for a worker about to sleep in `FutexWord.wait`: counts it if it is inside a job.
  /// Returns whether it counted (the caller passes it to `wokeInJob`).
  @inline(__always)
  func sleepsInJob(_ worker: Worker) -> Bool {
    guard worker.busy.load(ordering: .relaxed) else { return false }
    countSharedWrite(.wakeDeferral, 2)  // This add and `wokeInJob`'s subtract.
    deferral.blockedInJobs.wrappingAdd(1, ordering: .sequentiallyConsistent)
    return true
  }

  /// Rule 4, after the sleep.
  @inline(__always)
  func wokeInJob() {
    deferral.blockedInJobs.wrappingSubtract(1, ordering: .relaxed)
  }
}

/// The pool's shared words for deferred wake-ups, on a 128-byte block of their own: written
/// only when a worker sleeps in a job and wakes again, read by every outside submission that
/// finds nobody searching.
final class WakeDeferral: Sendable {
  private let padBefore = CacheLinePad()
  /// Atomic. Workers asleep inside a job in `FutexWord.wait` (rule 4).
  let blockedInJobs = Atomic<Int>(0)
  /// Atomic. Deferrals are off (rule 3): set and cleared by the supervisor only. Relaxed: a
  /// stale value defers one wake-up the supervisor covers, or wakes one worker at once.
  private let suspended = Atomic<Bool>(false)
  private let padAfter = CacheLinePad()

  var isSuspended: Bool { suspended.load(ordering: .relaxed) }

  /// Supervisor thread.
  func suspend() {
    guard !suspended.load(ordering: .relaxed) else { return }
    countSharedWrite(.wakeDeferral)
    suspended.store(true, ordering: .relaxed)
  }

  /// Supervisor thread.
  func resume() {
    countSharedWrite(.wakeDeferral)
    suspended.store(false, ordering: .relaxed)
  }
}

/// The hook the event loops call before a poll that may block (rule 2): installed once, when
/// the pool starts.
enum DeferredWakeHook {
  static func install() {
    BlockingHook.install { WorkerPool.payOwedWake() }
  }
}
