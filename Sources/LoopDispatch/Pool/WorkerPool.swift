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
final class WorkerPool: @unchecked Sendable {
  // @unchecked Sendable: mutable state is in `state` (behind its lock) or atomic.

  /// The process-wide pool, started on first use.
  static let shared = WorkerPool()

  /// Workers kept at all times: one per CPU this process may use.
  let baseThreads: Int
  /// Upper bound on worker threads (default 64; `LOOPDISPATCH_MAX_THREADS` overrides).
  let maximumThreads: Int
  /// How long an extra (grown) worker stays parked before it exits (default 5 s;
  /// `LOOPDISPATCH_IDLE_RETIREMENT_MS` overrides).
  let idleRetirement: Duration
  /// How many empty checks a worker spins through before parking.
  let spinLimit = 1_000
  /// At most this many workers spin at once; the others park straight away, so idle
  /// spinning never takes more than one core from the threads producing work.
  let maximumSearchers = 1

  struct State {
    var lanes = (0..<Priority.allCases.count).map { _ in RingBuffer<PoolJob>(capacity: 256) }
    /// Parked workers, most recently parked last (its cache is warmest).
    var idle: [Worker] = []
    var threads = 0
    var nextWorkerID = 0
  }

  /// Protected by: its own lock.
  let state = LockedValue(State(), adaptive: true)
  /// Atomic. Jobs in the lanes (a hint for spinning and for the supervisor; the lanes under
  /// the lock are the truth).
  let pendingJobs = Atomic<Int>(0)
  /// Atomic. Workers spinning in search of work.
  let searching = Atomic<Int>(0)
  /// Atomic. Jobs taken by workers since start (progress, for the supervisor).
  let jobsStarted = Atomic<UInt64>(0)
  /// Atomic. Workers created after start because the others were blocked.
  let growthEvents = Atomic<UInt64>(0)
  let supervisor = PoolSupervisor()

  private init() {
    baseThreads = Int(cls_available_cpus())
    let maximum = environmentInteger("LOOPDISPATCH_MAX_THREADS") ?? 64
    maximumThreads = Swift.max(maximum, baseThreads)
    idleRetirement = .milliseconds(environmentInteger("LOOPDISPATCH_IDLE_RETIREMENT_MS") ?? 5_000)
    for _ in 0..<baseThreads { _ = spawnWorker(isExtra: false) }
    supervisor.start(pool: self)
  }

  /// Appends `job` to the lane of `priority` and wakes a worker if none is looking for work.
  /// Thread-safety: any thread.
  func submit(_ job: PoolJob, priority: Priority) {
    let toWake: Worker? = state.withLock { state in
      state.lanes[priority.rawValue].append(job)
      pendingJobs.wrappingAdd(1, ordering: .sequentiallyConsistent)
      if searching.load(ordering: .sequentiallyConsistent) > 0 { return nil }
      return state.idle.popLast()
    }
    if let toWake {
      toWake.unpark()
    } else {
      supervisor.noteWorkWaiting()
    }
  }

  /// Takes the first job of the highest non-empty lane, with that lane's priority.
  /// Any worker thread.
  @inline(__always)
  func takeJob() -> (PoolJob, Priority)? {
    if pendingJobs.load(ordering: .relaxed) == 0 { return nil }
    return state.withLock { state in
      for lane in 0..<state.lanes.count {
        if let job = state.lanes[lane].popFirst() {
          pendingJobs.wrappingSubtract(1, ordering: .relaxed)
          return (job, Priority(rawValue: lane)!)
        }
      }
      return nil
    }
  }

  /// Starts a worker thread; returns false (after a one-line warning) if the system refuses.
  @discardableResult
  func spawnWorker(isExtra: Bool) -> Bool {
    let id: Int? = state.withLock { state in
      guard state.threads < maximumThreads else { return nil }
      state.threads += 1
      state.nextWorkerID += 1
      return state.nextWorkerID
    }
    guard let id else { return false }
    let worker = Worker(pool: self, id: id, isExtra: isExtra)
    if !NativeThread.spawnDetached(name: "ld.worker.\(id)", { worker.main() }) {
      let code = errno
      state.withLock { $0.threads -= 1 }
      writeStandardError(
        "LoopDispatch: could not start worker thread (errno \(code)); work continues on the existing \(threadCount) workers\n"
      )
      return false
    }
    if isExtra { growthEvents.wrappingAdd(1, ordering: .relaxed) }
    return true
  }

  /// Worker threads alive now.
  var threadCount: Int { state.withLock { $0.threads } }
  /// Workers parked now.
  var parkedCount: Int { state.withLock { $0.idle.count } }
}

/// A positive integer from the environment, or nil.
private func environmentInteger(_ name: String) -> Int? {
  guard let raw = getenv(name), let value = Int(String(cString: raw)), value >= 1 else {
    return nil
  }
  return value
}
