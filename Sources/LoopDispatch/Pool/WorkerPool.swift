import CLoopShims
import Glibc
import MainLoop
import Synchronization

/// The worker threads behind the global queues.
///
/// Walk-through:
/// 1. `submit` appends a job to its priority's lane under `state`'s lock and, when no worker
///    is searching for work, takes one parked worker off the idle stack to wake after the
///    lock is released (at most one futex wake per submission, none while a worker spins).
/// 2. A worker takes the first job of the highest non-empty lane (strict priority), runs it,
///    and repeats. When the lanes are empty it spins briefly (`searching`), then parks on its
///    own futex word after putting itself on the idle stack under the lock, so a submission
///    either sees it idle or is seen by its final check: no lost wake-ups.
/// 3. The supervisor (`PoolSupervisor.swift`) adds a worker when work waits and every worker
///    is blocked, up to `maximumThreads`; extra workers retire after `idleRetirement`.
/// 4. The overcommit global queues have lanes and workers of their own, started at once for
///    each job no idle one can take, within `totalThreadLimit` (`Overcommit.swift`).
/// 5. When the system refuses a thread (`pthread_create` fails), the pool carries on with the
///    workers it has: `spawnWorker` gives the reserved slot back, warns once per episode (an
///    episode ends at the next successful start), and the supervisor waits
///    `PoolSupervisor.retryDelay` before trying again. Only a pool that cannot start a single
///    worker traps (`resourceFailure`).
final class WorkerPool: @unchecked Sendable {
  // @unchecked Sendable: mutable state is in `state` (behind its lock) or atomic.

  /// The process-wide pool, started on first use.
  static let shared = WorkerPool()

  /// Workers kept at all times: one per CPU this process may use.
  let baseThreads: Int
  /// Upper bound on plain worker threads (default 64; `LOOPDISPATCH_MAX_THREADS` overrides).
  let maximumThreads: Int
  /// Upper bound on plain and overcommit worker threads together: 255, libdispatch's figure
  /// on Linux, or `maximumThreads` if that is larger (`Overcommit.swift`, rule 2).
  let totalThreadLimit: Int
  /// How long an extra (grown) worker stays parked before it exits (default 5 s;
  /// `LOOPDISPATCH_IDLE_RETIREMENT_MS` overrides).
  let idleRetirement: Duration
  /// How many empty checks a worker spins through before parking (each ~20 ns here).
  let spinLimit = 1_000
  /// The fewest checks of a spin (see `Worker.spinForWork`): about 5 µs here.
  static let spinFloor = 256
  /// At most this many workers spin at once; the others park straight away, so idle
  /// spinning never takes more than one core from the threads producing work.
  let maximumSearchers = 1

  struct State {
    var lanes = (0..<Priority.allCases.count).map { _ in RingBuffer<TimedJob>(capacity: 256) }
    /// The global queues' figures, one per lane (see `LaneStats`).
    var laneStats = [LaneStats](repeating: LaneStats(), count: Priority.allCases.count)
    /// Parked workers, most recently parked last (its cache is warmest).
    var idle: [Worker] = []
    /// Plain workers counted in the pool: alive, or reserved by `spawnWorker` while it starts
    /// one (a refused start gives its slot back).
    var threads = 0
    /// The overcommit lanes, workers and counts (`Overcommit.swift`).
    var overcommit = OvercommitState()
    var nextWorkerID = 0
    /// True from a refused worker start until the next successful one: the warning for the
    /// episode has been written, so later refusals in it are silent.
    var spawnRefused = false
  }

  /// Protected by: its own lock.
  let state = LockedValue(State(), adaptive: true)
  /// Atomic. Bit `n` set while lane `n` is not empty (written under the lock; a hint for a
  /// worker running its batch without the lock, see `WorkerPool+Batch.swift`).
  let occupiedLanes = Atomic<UInt8>(0)
  /// Atomic. Jobs in the lanes and in workers' batches (a hint for spinning and for the
  /// supervisor; the lanes under the lock are the truth).
  let pendingJobs = Atomic<Int>(0)
  /// Atomic. Jobs waiting in run-next slots (not in `pendingJobs`: spinning workers leave
  /// them to their owners; the supervisor watches them).
  let slottedJobs = Atomic<Int>(0)
  /// Atomic. Workers spinning in search of work.
  let searching = Atomic<Int>(0)
  /// Atomic. Jobs taken by workers since start (progress, for the supervisor).
  let jobsStarted = Atomic<UInt64>(0)
  /// Atomic. Overcommit jobs waiting with no thread coming for them (`Overcommit.swift`,
  /// rule 3; written under the lock, read by the supervisor).
  let overcommitShortfall = Atomic<Int>(0)
  /// Atomic. Jobs taken by overcommit workers since start (apart from `jobsStarted`, which
  /// is the supervisor's measure of plain progress).
  let overcommitJobsStarted = Atomic<UInt64>(0)
  /// Atomic. Workers created after start because the others were blocked.
  let growthEvents = Atomic<UInt64>(0)
  /// Atomic. Worker starts the system refused (`pthread_create` failed) since launch.
  let refusedSpawns = Atomic<UInt64>(0)
  let supervisor = PoolSupervisor()

  private init() {
    baseThreads = Int(cls_available_cpus())
    let maximum = environmentInteger("LOOPDISPATCH_MAX_THREADS") ?? 64
    maximumThreads = Swift.max(maximum, baseThreads)
    totalThreadLimit = Swift.max(255, maximumThreads)
    idleRetirement = .milliseconds(environmentInteger("LOOPDISPATCH_IDLE_RETIREMENT_MS") ?? 5_000)
    var refusal: ThreadSpawnError?
    for _ in 0..<baseThreads {
      if case .refused(let error) = spawnWorker(isExtra: false, warn: false) { refusal = error }
    }
    if let refusal {
      if threadCount == 0 { resourceFailure("could not start any pool worker thread (\(refusal))") }
      warnRefused(refusal)
    }
    supervisor.start(pool: self)
  }

  /// Queues `job` at `priority` and makes sure a worker will run it.
  ///
  /// With `runNext`, a job submitted by a pool job goes into the calling worker's run-next
  /// slot (`WorkerPool+RunNext.swift`) when it may, and wakes nobody: the worker runs it as
  /// soon as its current job returns. Otherwise the job is appended to its lane, and one
  /// parked worker is woken unless a worker is searching (spinning) already.
  /// Thread-safety: any thread.
  func submit(_ job: PoolJob, priority: Priority, runNext: Bool = false) {
    let timed = TimedJob(job: job, enqueuedAt: Ticks.now())
    let owner = runNext ? Worker.current : nil
    let wake: Wake = state.withLock { state in
      state.laneStats[priority.rawValue].submitted &+= 1
      if let owner, fillRunNext(of: owner, with: timed, priority: priority) {
        return .supervisor
      }
      appendToLane(priority.rawValue, timed, &state)
      return publishLaneJobs(1, &state)
    }
    perform(wake)
  }

  /// Queues `jobs` at `priority`, in order, under one lock acquisition, and wakes at most
  /// one parked worker (the chained wake-up of `takeJob` spreads a long batch over the
  /// others). For the service loop's fired `after` timers (`Time/TimerFireBatch.swift`).
  /// Thread-safety: any thread.
  func submitBatch<Jobs: Sequence<PoolJob>>(_ jobs: Jobs, priority: Priority) {
    let now = Ticks.now()
    let wake: Wake = state.withLock { state in
      var count = 0
      for job in jobs {
        appendToLane(priority.rawValue, TimedJob(job: job, enqueuedAt: now), &state)
        count += 1
      }
      guard count > 0 else { return .none }
      state.laneStats[priority.rawValue].submitted &+= UInt64(count)
      return publishLaneJobs(count, &state)
    }
    perform(wake)
  }

  /// After `count` jobs were appended to a lane: counts them in `pendingJobs` and decides
  /// who must wake (`wakeForLaneWork`). Pool lock held.
  @inline(__always)
  private func publishLaneJobs(_ count: Int, _ state: inout State) -> Wake {
    // Sequentially consistent: pairs with a spinner's increment of `searching` followed by
    // its load of `pendingJobs` (Dekker): either it sees these jobs, or we see it searching.
    pendingJobs.wrappingAdd(count, ordering: .sequentiallyConsistent)
    return wakeForLaneWork(&state)
  }

  /// Who must wake for a job just put in a lane: nobody if a worker is searching (it will
  /// find it), else one parked worker, else the supervisor (every worker is busy). Pool lock
  /// held; `pendingJobs` already counts the job.
  @inline(__always)
  func wakeForLaneWork(_ state: inout State) -> Wake {
    if searching.load(ordering: .sequentiallyConsistent) > 0 { return .supervisor }
    if let worker = state.idle.popLast() { return .worker(worker) }
    return .supervisor
  }

  /// Who a change to the pool's work must wake, decided under the lock and done after it.
  enum Wake {
    case none
    /// A parked worker, already taken off the idle stack.
    case worker(Worker)
    /// Nobody now, but the supervisor must be watching (work waits, or a slot is filled).
    case supervisor
  }

  @inline(__always)
  func perform(_ wake: Wake) {
    switch wake {
    case .none: break
    case .worker(let worker): worker.unpark()
    case .supervisor: supervisor.noteWorkWaiting()
    }
  }

  /// The chained wake-up, decided under the lock by a worker that just took a job: if jobs
  /// still wait in the lanes, nobody is searching and a worker is parked, that worker is
  /// woken (after the lock), so a burst fans out over the pool one wake at a time instead of
  /// running on the one worker that happened to be spinning when it arrived.
  @inline(__always)
  private func chainedWake(_ state: inout State) -> Wake {
    guard pendingJobs.load(ordering: .relaxed) > 0,
      searching.load(ordering: .sequentiallyConsistent) == 0,
      let worker = state.idle.popLast()
    else { return .none }
    return .worker(worker)
  }

  /// Takes `worker`'s next job: its run-next slot when that may go first (see
  /// `WorkerPool+RunNext.swift`), else the first job of the highest non-empty lane (and,
  /// from a long lane, a batch more: `WorkerPool+Batch.swift`); records its wait and the
  /// worker's uncounted completions. Wakes a parked worker when more jobs wait
  /// (`chainedWake`). Worker threads.
  @inline(__always)
  func takeJob(for worker: Worker) -> (PoolJob, Priority)? {
    if pendingJobs.load(ordering: .relaxed) == 0 && !worker.hasRunNext.load(ordering: .relaxed) {
      return nil
    }
    // Read outside the lock (a clock read where the cycle counter is not used); the lock
    // wait is then not counted as queue wait, a bias of one lock hand-off at most.
    let now = Ticks.now()
    var batched = false
    let (taken, wake): ((PoolJob, Priority)?, Wake) = state.withLock { state in
      countCompletions(of: worker, &state)
      if let slot = takeRunNext(of: worker, state: &state) {
        state.laneStats[slot.priority.rawValue].recordStart(
          enqueuedAt: slot.timed.enqueuedAt, now: now)
        return ((slot.timed.job, slot.priority), chainedWake(&state))
      }
      for lane in 0..<state.lanes.count {
        if let timed = popLane(lane, &state) {
          pendingJobs.wrappingSubtract(1, ordering: .relaxed)
          worker.runNextStreak = 0
          state.laneStats[lane].recordStart(enqueuedAt: timed.enqueuedAt, now: now)
          batched = refillBatch(of: worker, from: lane, &state, now: now)
          return ((timed.job, Priority(rawValue: lane)!), chainedWake(&state))
        }
      }
      return (nil, .none)
    }
    perform(wake)
    // A filled batch needs the supervisor watching (rule 3 of `WorkerPool+Batch.swift`).
    if batched { supervisor.noteWorkWaiting() }
    return taken
  }

  /// Wakes one parked worker if there is one (the supervisor's cure for a missed wake-up).
  /// Returns whether it woke one.
  func wakeParkedWorker() -> Bool {
    guard let worker = state.withLock({ $0.idle.popLast() }) else { return false }
    worker.unpark()
    return true
  }

  /// What became of a request for one more worker.
  enum SpawnOutcome {
    case started
    /// The pool is at `maximumThreads` (or `totalThreadLimit`); nothing was tried.
    case atCapacity
    /// The system refused the thread; the pool is as it was before the call.
    case refused(ThreadSpawnError)
  }

  /// Starts a worker thread. If the system refuses, gives the reserved slot back and, when
  /// `warn` is true, writes the episode's one warning line (see `warnRefused`).
  /// Called by the pool's initialiser and by the supervisor thread only.
  func spawnWorker(isExtra: Bool, warn: Bool = true) -> SpawnOutcome {
    // Reserve the slot first so that concurrent counts never exceed `maximumThreads`.
    let id: Int? = state.withLock { state in
      guard state.threads < maximumThreads,
        state.threads + state.overcommit.threads < totalThreadLimit
      else { return nil }
      state.threads += 1
      state.nextWorkerID += 1
      return state.nextWorkerID
    }
    guard let id else { return .atCapacity }
    let worker = Worker(pool: self, id: id, isExtra: isExtra)
    // Known to the supervisor before its thread runs: until it has taken a job it is not
    // `busy`, so `everyWorkerIsBlocked` is false and a worker the kernel has not scheduled
    // yet stops further growth.
    supervisor.register(worker)
    do {
      try NativeThread.spawnDetached(name: "ld.worker.\(id)") { worker.main() }
    } catch {
      supervisor.unregister(worker)
      // The worker never ran: it is on no list (idle stack, supervisor) and never searched,
      // so giving back its slot restores the pool exactly.
      state.withLock { $0.threads -= 1 }
      refusedSpawns.wrappingAdd(1, ordering: .relaxed)
      if warn { warnRefused(error) }
      return .refused(error)
    }
    state.withLock { $0.spawnRefused = false }
    if isExtra { growthEvents.wrappingAdd(1, ordering: .relaxed) }
    return .started
  }

  /// Writes one warning line for a refused worker start (plain or overcommit), unless this
  /// episode of refusals already had one.
  func warnRefused(_ error: ThreadSpawnError) {
    let remaining: Int? = state.withLock { state in
      if state.spawnRefused { return nil }
      state.spawnRefused = true
      return state.threads + state.overcommit.threads
    }
    guard let remaining else { return }
    let noun = remaining == 1 ? "worker" : "workers"
    writeStandardError(
      "LoopDispatch: warning: could not start a worker thread (\(error)); "
        + "continuing with \(remaining) \(noun)\n")
  }

  /// Whether jobs wait in a lane or a run-next slot, or overcommit jobs wait for a thread
  /// (hints; for the supervisor's sleep).
  var hasWaitingWork: Bool {
    pendingJobs.load(ordering: .sequentiallyConsistent) > 0
      || slottedJobs.load(ordering: .sequentiallyConsistent) > 0
      || overcommitShortfall.load(ordering: .sequentiallyConsistent) > 0
  }

  /// Worker threads alive now, plain and overcommit.
  var threadCount: Int { state.withLock { $0.threads + $0.overcommit.threads } }
  /// Workers parked now, plain and overcommit.
  var parkedCount: Int { state.withLock { $0.idle.count + $0.overcommit.idle.count } }
}

/// Pool figures for the package's own fault tests (not public API).
package enum PoolDiagnostics {
  /// Worker starts the system refused since launch. Starts the pool on first use.
  package static var refusedWorkerStarts: UInt64 {
    WorkerPool.shared.refusedSpawns.load(ordering: .relaxed)
  }
}

/// A positive integer from the environment, or nil.
private func environmentInteger(_ name: String) -> Int? {
  guard let raw = getenv(name), let value = Int(String(cString: raw)), value >= 1 else {
    return nil
  }
  return value
}

/// A pool job with its submission time (`Ticks`), for the global queues' wait figures.
struct TimedJob {
  var job: PoolJob
  var enqueuedAt: UInt64
}

/// One global queue's figures, kept under the pool lock (no extra atomic on the hot path):
/// `submitted` by `submit`, waits by `takeJob`; a worker's completion is recorded the next
/// time it takes the lock (its next `takeJob` that finds work, or `park`), so it can lag by
/// the length of one spin.
struct LaneStats {
  var submitted: UInt64 = 0
  var completed: UInt64 = 0
  var maxWaitTicks: UInt64 = 0
  var recentWaitTicks: UInt64 = 0

  mutating func recordStart(enqueuedAt: UInt64, now: UInt64) {
    let wait = Ticks.elapsed(from: enqueuedAt, to: now)
    maxWaitTicks = Swift.max(maxWaitTicks, wait)
    recentWaitTicks = recentWaitTicks - recentWaitTicks / 8 + wait / 8
  }
}
