import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// Grows the pool when every worker is blocked while work waits.
///
/// Walk-through:
/// 1. The supervisor thread sleeps without a timeout while the pool keeps up. A submission
///    that finds no idle worker, or defers its wake-up (`WorkerPool+DeferredWake.swift`),
///    calls `noteWorkWaiting()`, which wakes it (one futex wake per sleep, not per
///    submission). While deferrals are suspended it sleeps until their end, once.
/// 2. Awake, it checks every `tick` (5 ms): if jobs are waiting, no worker is idle or
///    searching, no job has started since the last tick, and fewer workers are runnable
///    (state `R` in `/proc/self/task/<tid>/stat`, or CPU time that grew since the last look)
///    than there are CPUs while every worker is inside a job, then workers are blocked (sleeping, waiting on I/O or locks): it starts
///    one more worker, up to the cap. A pool busy with CPU-bound work, or contending on its
///    own lock, is not grown.
/// 3. When the lanes are empty it goes back to sleeping without a timeout, so an idle
///    process has no periodic wake-ups from the pool. While a worker's wanted thread name
///    differs from the one shown, it also looks at the names once per tick
///    (`ThreadName.catchUp`); once every worker shows its wanted name, that stops too.
/// 4. While overcommit jobs wait with no thread coming (`Overcommit.swift`, rule 5), it calls
///    one more overcommit worker at each tick, if the thread budget allows.
/// 5. If the system refuses the new worker's thread, the pool carries on with the workers it
///    has (`WorkerPool.spawnWorker` warns once) and the supervisor starts no worker for
///    `retryDelay`, so a refusing system is asked once a second, not every tick.
final class PoolSupervisor: @unchecked Sendable {
  // @unchecked Sendable: `workers` is protected by its mutex; `word` is atomic;
  // `lastRunTime` is touched only by the supervisor thread (`run` and what it calls).

  /// How often a stalled pool is checked.
  let tick: Duration = .milliseconds(5)
  #if DEBUG
    /// Tests: set, a tick never wakes a parked worker for waiting jobs (`DeferredWakeTests`
    /// sees a deferred wake-up paid by its submitter alone).
    static let idleWakeOff = Atomic<Bool>(false)
    static var idleWakeAllowed: Bool { !idleWakeOff.load(ordering: .relaxed) }
  #else
    static var idleWakeAllowed: Bool { true }
  #endif

  /// How long deferred wake-ups stay off after a tick had to wake a parked worker.
  let deferralPause: Duration = .seconds(1)
  /// How long after a refused worker start the supervisor waits before trying again.
  let retryDelay: Duration = .seconds(1)
  /// 0 awake, 1 asleep without a timeout (waiting for `noteWorkWaiting`).
  private let word = FutexWord(0)
  /// Protected by: its lock.
  private let workers = LockedValue<[Worker]>([])

  /// Starts the supervisor thread; traps if the system refuses it (a pool that cannot grow
  /// could deadlock on the first blocking job, so there is no degraded mode without it).
  func start(pool: WorkerPool) {
    do {
      try NativeThread.spawnDetached(name: "ld.supervisor") { [self] in run(pool) }
    } catch {
      resourceFailure("could not start the pool supervisor thread ld.supervisor (\(error))")
    }
  }

  /// Whether the supervisor sleeps without a timeout (for tests that need it told nothing).
  var isAsleep: Bool { word.atomic.pointee.load(ordering: .sequentiallyConsistent) == 1 }

  func register(_ worker: Worker) { workers.withLock { $0.append(worker) } }

  /// The workers now (a copy).
  func registeredWorkers() -> [Worker] { workers.withLock { $0 } }

  func unregister(_ worker: Worker) {
    workers.withLock { list in list.removeAll { $0 === worker } }
  }

  /// Called by submitters that found no idle worker. Cheap when the supervisor is awake.
  ///
  /// The first load is sequentially consistent: it pairs with the supervisor's store before
  /// it re-checks for work (see `run`), so a job submitted as it falls asleep is never missed.
  @inline(__always)
  func noteWorkWaiting() {
    if word.atomic.pointee.load(ordering: .sequentiallyConsistent) == 1 {
      countSharedWrite(.supervisorWake)
      if word.atomic.pointee.exchange(0, ordering: .acquiringAndReleasing) == 1 { word.wake(1) }
    }
  }

  private func run(_ pool: WorkerPool) {
    var lastStarted = pool.jobsStarted
    let tickNanoseconds = UInt64(tick.saturatingNanoseconds)
    // No worker start before this instant (monotonic): set after a refused start.
    var retryAt = Deadline(uptimeNanoseconds: 0)
    // Deferred wake-ups stay off until this instant (monotonic nanoseconds) once a tick had
    // to wake a parked worker for waiting jobs (`WorkerPool+DeferredWake.swift`, rule 3).
    var deferralResumesAt: UInt64 = 0
    while true {
      if !pool.hasWaitingWork {
        if !ThreadName.lookIsDue {
          // Sleep until a submission finds every worker busy or fills a run-next slot, or a
          // worker wants a new thread name. Sequentially consistent store then loads: pairs
          // with the submitter's (or worker's) sequentially consistent publication of a job
          // (or of `lookDue`), then its load of `word` (Dekker): either we see its job or
          // request, or it sees us asleep and wakes us.
          // Counted first, as a park is (`announceIdle`): `isAsleep` then implies the count.
          countSharedWrite(.supervisorSleep)
          countPoolEvent(.supervisorSleep)
          word.atomic.pointee.store(1, ordering: .sequentiallyConsistent)
          if !pool.hasWaitingWork && !ThreadName.lookIsDue {
            while word.atomic.pointee.load(ordering: .acquiring) == 1 {
              guard pool.deferral.isSuspended else {
                word.wait(whileEqualTo: 1)
                continue
              }
              // Suspended deferrals end on time even in an idle process: one timed sleep.
              let now = Deadline.now.uptimeNanoseconds
              if now >= deferralResumesAt {
                pool.deferral.resume()
              } else {
                word.wait(whileEqualTo: 1, timeoutNanoseconds: deferralResumesAt - now)
              }
            }
          } else {
            word.atomic.pointee.store(0, ordering: .relaxed)
            countSharedWrite(.supervisorSleep)
          }
          lastStarted = pool.jobsStarted
        }
        if !pool.hasWaitingWork {
          // Only names to look at: one look per tick until every worker shows what it wants
          // (`ThreadName`, step 2).
          word.wait(whileEqualTo: 0, timeoutNanoseconds: tickNanoseconds)
          ThreadName.catchUp()
          lastStarted = pool.jobsStarted
          continue
        }
      }
      word.wait(whileEqualTo: 0, timeoutNanoseconds: tickNanoseconds)
      countPoolEvent(.supervisorTick)
      if pool.deferral.isSuspended && Deadline.now.uptimeNanoseconds >= deferralResumesAt {
        pool.deferral.resume()
      }
      if ThreadName.lookIsDue { ThreadName.catchUp() }
      let started = pool.jobsStarted
      defer { lastStarted = started }
      // A slot whose owner has not come back for a tick goes to its lane; a stuck worker's
      // local queue gets a thief.
      let registered = registeredWorkers()
      pool.rescueStrandedRunNext(among: registered)
      pool.rescueStrandedLocalQueues(among: registered)
      if pool.overcommitShortfall.load(ordering: .relaxed) > 0 && Deadline.now >= retryAt {
        if !pool.serveOvercommitShortfall() { retryAt = .now + retryDelay }
      }
      guard started == lastStarted, pool.queuedJobCount > 0 else { continue }
      // Jobs waited a whole tick and none started. A parked worker means a wake-up was missed,
      // or deferred by a submitter that then blocked where it could not pay, or while a
      // running worker blocked in the kernel (`WorkerPool+DeferredWake.swift`, rule 3); or a
      // rescued slot job needs one: wake it rather than grow. Deferrals then stay off for
      // `deferralPause`, so a pattern that keeps meeting this tick pays it once, not per job.
      if Self.idleWakeAllowed && pool.wakeIdleWorker() {
        pool.deferral.suspend()
        deferralResumesAt =
          Deadline.now.uptimeNanoseconds + UInt64(deferralPause.saturatingNanoseconds)
        continue
      }
      guard pool.searching.load(ordering: .relaxed) == 0 else { continue }
      if Deadline.now >= retryAt && everyWorkerIsBlocked(pool) {
        if case .refused = pool.spawnWorker(isExtra: true) { retryAt = .now + retryDelay }
      }
    }
  }

  /// Whether every worker is running a job and fewer than one per CPU are runnable.
  ///
  /// A worker that is not running a job (taking one, or waiting for the pool's lock) counts as
  /// able to make progress, so contention on the pool itself never triggers growth.
  ///
  /// A worker counts as runnable when `/proc` shows it in state `R`, or when its time on a CPU
  /// (`schedstat`) grew since the supervisor last looked. The state alone is one sample: a
  /// worker that spins but sleeps for a moment (on a lock inside a sanitizer's runtime, or a
  /// page fault served from disk) would read as blocked at that instant. A worker that is
  /// truly blocked does not run, so its CPU time stands still. The cost: the first look at a
  /// worker after a long gap counts it as runnable if it ran at all since the previous look,
  /// so growth can come one tick (5 ms) later. Only the supervisor thread touches
  /// `lastRunTime`.
  private func everyWorkerIsBlocked(_ pool: WorkerPool) -> Bool {
    let snapshot = workers.withLock { $0 }
    var runnable = 0
    var seen: [Int32: UInt64] = [:]
    for worker in snapshot {
      guard worker.busy.load(ordering: .relaxed) else { return false }
      let tid = worker.tid.load(ordering: .relaxed)
      if tid == 0 {
        runnable += 1
        continue
      }
      let runTime = cpuTime(tid)
      if let runTime { seen[tid] = runTime }
      let ran = runTime != nil && runTime != lastRunTime[tid]
      if ran || threadState(tid) == UInt8(ascii: "R") { runnable += 1 }
    }
    lastRunTime = seen
    return runnable < pool.baseThreads
  }

  /// CPU time of each worker (by thread id) at the supervisor's last look. Touched only by the
  /// supervisor thread.
  private var lastRunTime: [Int32: UInt64] = [:]

  /// Nanoseconds thread `tid` of this process has spent on a CPU, the first field of
  /// `/proc/self/task/<tid>/schedstat`; nil where the kernel does not provide it.
  private func cpuTime(_ tid: Int32) -> UInt64? {
    guard let line = readSmallFile("/proc/self/task/\(tid)/schedstat") else { return nil }
    var value: UInt64 = 0
    var digits = 0
    for byte in line {
      guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { break }
      value = value &* 10 &+ UInt64(byte - UInt8(ascii: "0"))
      digits += 1
    }
    return digits > 0 ? value : nil
  }

  /// The one-letter state of thread `tid` of this process, from `/proc`.
  private func threadState(_ tid: Int32) -> UInt8? {
    guard let buffer = readSmallFile("/proc/self/task/\(tid)/stat") else { return nil }
    // Format: "tid (comm) S ...": the state follows the last ')'.
    guard let close = buffer.lastIndex(of: UInt8(ascii: ")")), close + 2 < buffer.count else {
      return nil
    }
    return buffer[close + 2]
  }

  /// The first 512 bytes of a file under `/proc`, or nil if it cannot be read.
  private func readSmallFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    if fd < 0 { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 512)
    let n = read(fd, &buffer, buffer.count)
    guard n > 0 else { return nil }
    buffer.removeSubrange(n...)
    return buffer
  }
}
