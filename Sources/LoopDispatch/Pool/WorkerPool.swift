import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// The worker threads behind the global queues.
///
/// Walk-through (no process-wide lock on any path a job takes):
/// 1. A submission takes a recycled node (`NodeCache`), fills it, and puts it where it is
///    cheapest to run: a worker's run-next slot (`runNext`, a job made runnable by the
///    worker's own job: `WorkerPool+RunNext.swift`), else the calling worker's local queue of
///    the job's lane (`LocalQueue`), else — from a thread that is not a worker, or when the
///    local queue is full — the lane's injection queue (`InjectionQueue`). Then
///    `notifyWork` wakes one parked worker unless one is searching (a thread that is not a
///    worker may defer that wake while every CPU is taken: `WorkerPool+DeferredWake.swift`).
/// 2. A worker takes, for each lane from the highest: its local queue, then the lane's
///    injection queue (moving up to a share of it into its local queue in one go, so the next
///    jobs cost no shared write). When both are empty in every lane it steals half of another
///    worker's local queue, highest lane first (`steal`).
/// 3. Out of work, a worker spins briefly as the one searcher (`searching`), then parks on
///    its own futex word after announcing itself in the idle set (`WorkerPool+Parking.swift`).
/// 4. The supervisor (`PoolSupervisor.swift`) adds a worker when work waits and every worker
///    is blocked, up to `maximumThreads`; extra workers retire after `idleRetirement`.
/// 5. The overcommit global queues keep lanes and workers of their own behind `state`'s lock
///    (`Overcommit.swift`): each of their jobs starts a thread anyway, which costs far more
///    than the lock.
/// 6. When the system refuses a thread (`pthread_create` fails), the pool carries on with the
///    workers it has: `spawnWorker` gives the reserved slot back, warns once per episode (an
///    episode ends at the next successful start), and the supervisor waits
///    `PoolSupervisor.retryDelay` before trying again. Only a pool that cannot start a single
///    worker traps (`resourceFailure`).
///
/// Shared cache lines written per job (<doc:ThreadingModel>, "What each path writes"; counted
/// in debug builds by `SharedWriteCount`, asserted by PoolWriteCountTests): a submission from
/// a worker, and a run-next hand-off, write only the worker's own lines; one from elsewhere
/// writes the lane's injection count, tail and link (3); a take from the local queue writes
/// the owner's own head; a take from an injection queue writes its consumer side once per
/// share. Every other shared write (spin, park, wake, steal) follows a worker running dry.
final class WorkerPool: @unchecked Sendable {
  // @unchecked Sendable: mutable state is in `state` (behind its lock), atomic, or in the
  // fixed tables allocated at init whose entries are atomic.

  /// The process-wide pool, started on first use.
  static let shared = WorkerPool()

  /// Workers kept at all times: one per CPU this process may use (`CPUBudget`: a CPU quota
  /// where one is set, else the affinity mask; `LOOPDISPATCH_CPUS` overrides).
  let baseThreads: Int
  /// Upper bound on plain worker threads (default 64; `LOOPDISPATCH_MAX_THREADS` overrides).
  let maximumThreads: Int
  /// Upper bound on plain and overcommit worker threads together: 255, libdispatch's figure
  /// on Linux, or `maximumThreads` if that is larger (`Overcommit.swift`, rule 2).
  let totalThreadLimit: Int
  /// How long an extra (grown) worker stays parked before it exits (default 5 s;
  /// `LOOPDISPATCH_IDLE_RETIREMENT_MS` overrides).
  let idleRetirement: Duration
  /// How many empty checks a worker spins through before parking.
  let spinLimit = 1_000
  /// The fewest checks of a spin (see `Worker.spinForWork`): a few microseconds here.
  static let spinFloor = 128
  /// The most checks of a spin while the machine is loaded (`SpinGovernor`): under a
  /// microsecond, enough for a job that is being linked right now, then the core goes to
  /// whoever waits for it.
  static let pressuredSpinLimit = 32
  /// How long a parking worker whose re-checks keep finding work it cannot take waits in the
  /// idle set before looking again (`Worker.park`).
  static let untakeableBackOffNanoseconds: UInt64 = 200_000
  /// At most this many workers spin at once; the others park straight away, so idle
  /// spinning never takes more than one core from the threads producing work.
  let maximumSearchers = 1

  struct State {
    /// Plain workers counted in the pool: alive, or reserved by `spawnWorker` while it starts
    /// one (a refused start gives its slot back).
    var threads = 0
    /// Every plain worker object ever made, by table index (kept for the process's life:
    /// a thief or a waker may still hold one, see `workerTable`).
    var workers: [Worker] = []
    /// Table indices of retired workers, reused by the next start.
    var retired: [Int] = []
    /// The overcommit lanes, workers and counts (`Overcommit.swift`).
    var overcommit = OvercommitState()
    var nextWorkerID = 0
    /// True from a refused worker start until the next successful one: the warning for the
    /// episode has been written, so later refusals in it are silent.
    var spawnRefused = false
  }

  /// Protected by: its own lock. Thread starts and retirements, and the overcommit side;
  /// never taken by a plain submission or take.
  let state = LockedValue(State(), adaptive: true)

  /// One injection queue per lane (index: `Priority.rawValue`); allocated once, never freed.
  let injection: UnsafeMutablePointer<InjectionQueue>
  /// The number of lanes.
  let laneCount = Priority.allCases.count
  /// The plain global queue of each lane, unretained (they live for the process): the
  /// frame a worker pushes for a job, reached with no reference counting.
  let rootQueues: UnsafeMutablePointer<Unmanaged<Queue>>
  /// The plain workers by index, as `Unmanaged<Worker>` bits (0: never used). Written under
  /// `state`'s lock before the index is published in `tableCount`; read by anyone. Entries
  /// are never cleared: a worker object lives for the process (it is reused by the next
  /// start at its index after it retires), so a reader never sees a freed worker.
  let workerTable: UnsafeMutablePointer<Atomic<UInt>>
  /// Atomic. Indices in use in `workerTable` (a high-water mark).
  let tableCount = Atomic<Int>(0)
  /// The idle set: bit `i` of word `i / 64` set while worker `i` is parked or about to park
  /// (`WorkerPool+Parking.swift`).
  let idleWords: UnsafeMutablePointer<Atomic<UInt64>>
  let idleWordCount: Int
  /// Atomic. Workers spinning in search of work.
  let searching = Atomic<Int>(0)
  /// Atomic. Overcommit jobs waiting with no thread coming for them (`Overcommit.swift`,
  /// rule 3; written under the lock, read by the supervisor).
  let overcommitShortfall = Atomic<Int>(0)
  /// Atomic. Serial-queue drains sent to the overcommit lanes beside neighbours
  /// (`PoolJob.divertedDrain`) and not yet finished: at most `divertedDrainLimit`, but for a
  /// moment by submitters racing for the last slot (`reserveDivertedDrain`). Relaxed: a
  /// count for a cap, guarding no data.
  let divertedDrains = Atomic<Int>(0)
  /// The most diverted drains at once: 4 per CPU of the budget, and at most half of what
  /// `totalThreadLimit` leaves beside `maximumThreads` plain workers (95 with the defaults,
  /// from 24 CPUs). A drain gets a thread of its own beside neighbours to win the process a
  /// fair share of the CPUs; threads beyond a few per CPU win no more share, and a C server
  /// with a serial queue per connection would otherwise fill `totalThreadLimit` with them.
  /// The drains past it take the plain workers.
  let divertedDrainLimit: Int
  /// Atomic. Jobs taken by overcommit workers since start.
  let overcommitJobsStarted = Atomic<UInt64>(0)
  /// Atomic. Workers created after start because the others were blocked.
  let growthEvents = Atomic<UInt64>(0)
  /// Atomic. Worker starts the system refused (`pthread_create` failed) since launch.
  let refusedSpawns = Atomic<UInt64>(0)
  /// The CPUs the pool is sized for, and why (`CPUBudget`): `baseThreads` is its count.
  let budget: CPUBudget
  /// Whether spins pay on this machine now (`SpinGovernor`).
  let spinGovernor: SpinGovernor
  let supervisor = PoolSupervisor()
  /// Shared words of the deferred wake-ups (`WorkerPool+DeferredWake.swift`).
  let deferral = WakeDeferral()

  private init() {
    budget = CPUBudget.current
    baseThreads = budget.cpus
    spinGovernor = SpinGovernor.process
    let maximum = environmentInteger("LOOPDISPATCH_MAX_THREADS") ?? 64
    maximumThreads = Swift.max(maximum, baseThreads)
    totalThreadLimit = Swift.max(255, maximumThreads)
    divertedDrainLimit = Swift.max(
      1, Swift.min(4 * budget.cpus, (totalThreadLimit - maximumThreads) / 2))
    idleRetirement = .milliseconds(environmentInteger("LOOPDISPATCH_IDLE_RETIREMENT_MS") ?? 5_000)
    rootQueues = .allocate(capacity: laneCount)
    for priority in Priority.allCases {
      (rootQueues + priority.rawValue).initialize(to: .passUnretained(Queue.global(priority)))
    }
    injection = InjectionQueue.allocateLanes(laneCount)
    workerTable = .allocate(capacity: maximumThreads)
    for index in 0..<maximumThreads { (workerTable + index).initialize(to: Atomic(0)) }
    idleWordCount = (maximumThreads + 63) / 64
    idleWords = .allocate(capacity: idleWordCount)
    for index in 0..<idleWordCount { (idleWords + index).initialize(to: Atomic(0)) }
    var refusal: ThreadSpawnError?
    for _ in 0..<baseThreads {
      if case .refused(let error) = spawnWorker(isExtra: false, warn: false) { refusal = error }
    }
    if let refusal {
      if threadCount == 0 { resourceFailure("could not start any pool worker thread (\(refusal))") }
      warnRefused(refusal)
    }
    supervisor.start(pool: self)
    DeferredWakeHook.install()
  }

  /// The plain worker at table index `index` (< `tableCount`).
  @inline(__always)
  func worker(at index: Int) -> Worker {
    unmanagedWorker(at: index).takeUnretainedValue()
  }

  /// The plain worker at table index `index` (< `tableCount`), for borrowing without a
  /// retain (`_withUnsafeGuaranteedRef`) on the hot paths.
  @inline(__always)
  func unmanagedWorker(at index: Int) -> Unmanaged<Worker> {
    // Safe: entries below `tableCount` were stored before the count was published
    // (releasing/acquiring) and point to workers kept alive by `state.workers` for ever.
    let bits = workerTable[index].load(ordering: .acquiring)
    return Unmanaged<Worker>.fromOpaque(UnsafeRawPointer(bitPattern: bits)!)
  }

  // MARK: Submission

  /// Queues `job` at `priority` and makes sure a worker will run it.
  ///
  /// With `runNext`, a job submitted by a pool job goes into the calling worker's run-next
  /// slot (`WorkerPool+RunNext.swift`) when it may, and wakes nobody. Otherwise a worker
  /// puts it in its own local queue, any other thread in the lane's injection queue, and
  /// one parked worker is woken unless a worker is searching.
  ///
  /// Two exceptions send a worker's job to the injection queue, where every worker looks
  /// in priority order: a job of higher priority than the one the worker is running (in its
  /// own queues it would wait for that job, or only its owner would see it: strict priority
  /// holds across workers), and a `yielding` job (a serial queue's drain that used its
  /// budget: it goes to the back of its lane, behind work from other threads).
  /// Thread-safety: any thread.
  @inline(__always)
  func submit(
    _ job: consuming PoolJob, priority: Priority, runNext: Bool = false, yielding: Bool = false
  ) {
    let node = NodeCache.take()
    // Safe: the node is ours until published below. The job moves in (no retain).
    node.pointee.job = consume job
    node.pointee.lane = priority.rawValue
    // One job in eight (by chance) is timed (`Ticks.sampledStamp`; 0: not timed).
    node.pointee.enqueuedAt = Ticks.sampledStamp()
    enqueue(node, runNext: runNext, yielding: yielding)
  }

  /// Publishes a filled node (see `submit`).
  @inline(__always)
  func enqueue(_ node: JobNodePointer, runNext: Bool, yielding: Bool = false) {
    // Read now: once published, the node belongs to whoever takes it (and may be reused).
    let lane = node.pointee.lane
    poolProbe(.submit)
    // Borrowed, not retained: the calling thread's own worker (see `Worker.current`).
    let ownWorker = ThreadSlots.worker()
    if !yielding, let raw = ownWorker,
      Unmanaged<Worker>.fromOpaque(raw)._withUnsafeGuaranteedRef({ worker in
        guard lane >= worker.runningLane else { return false }
        if runNext && fillRunNext(of: worker, with: node, lane: lane) {
          // A slot left by an owner that blocks is rescued by the supervisor: it must watch.
          supervisor.noteWorkWaiting()
          return true
        }
        guard worker.local[lane].push(node) else { return false }
        worker.figures.countLocalSubmission(lane: lane)
        notifyWork()
        return true
      })
    {
      return
    }
    injection[lane].push(node)
    if ownWorker == nil {
      countSharedWrite(.submitOutside, 3)
      notifyWorkFromOutside(lane: lane)
    } else {
      countSharedWrite(.submitRequeue, 3)
      notifyWork()
    }
  }

  /// Queues `jobs` at `priority`, in order, as one chain appended to the lane's injection
  /// queue (`InjectionQueue.pushChain`) with at most one wake-up (the chained wake-up of
  /// `takeFromInjection` spreads a long batch over the others). For the service loop's fired
  /// `after` timers (`Time/TimerFireBatch.swift`). Thread-safety: any thread.
  func submitBatch<Jobs: Sequence<PoolJob>>(_ jobs: Jobs, priority: Priority) {
    let now = Ticks.now()
    var first: JobNodePointer?
    var last: JobNodePointer?
    var count = 0
    for job in jobs {
      let node = NodeCache.take()
      // Safe: the node is ours until the chain is published below; the links are plain
      // (relaxed) stores, published by `pushChain`'s releasing operations.
      node.pointee.job = job
      node.pointee.lane = priority.rawValue
      node.pointee.enqueuedAt = now
      if let last { last.pointee.next.store(node.nodeBits, ordering: .relaxed) }
      if first == nil { first = node }
      last = node
      count += 1
    }
    guard let first, let last else { return }
    poolProbe(.submit)
    injection[priority.rawValue].pushChain(first: first, last: last, count: count)
    countSharedWrite(.submitBatch, 3)
    notifyWork()
  }

  // MARK: Taking

  /// `worker`'s next job: its run-next slot when that may go first, else for each lane from
  /// the highest its local queue, then the lane's injection queue. Nil when none of these
  /// holds a job (stealing is `steal`). Worker threads.
  @inline(__always)
  func takeJob(for worker: Worker) -> JobNodePointer? {
    // Fairness: every `injectionCheckInterval` takes, the injection queues go before the
    // worker's own slot and local queue, so a worker whose jobs keep refilling its own queue
    // (a job that resubmits itself) cannot starve work from other threads.
    poolProbe(.take)
    worker.takes &+= 1
    if worker.takes % Self.injectionCheckInterval == 0 {
      for lane in 0..<laneCount {
        if let node = takeFromInjection(lane, for: worker) {
          worker.runNextStreak = 0
          return node
        }
      }
    }
    if let slot = takeRunNext(of: worker) { return slot }
    for lane in 0..<laneCount {
      if let node = worker.local[lane].pop() {
        worker.runNextStreak = 0
        return node
      }
      if let node = takeFromInjection(lane, for: worker) {
        worker.runNextStreak = 0
        return node
      }
    }
    return nil
  }

  /// Takes between checks of the injection queues first (tokio's and Go's figure).
  static let injectionCheckInterval: UInt32 = 61

  /// Takes the oldest job of an injection queue and, when more wait, a share of them into
  /// `worker`'s (empty) local queue of that lane; then, if jobs still wait there or in the
  /// local queue, wakes another worker (the chained wake-up that spreads a burst).
  @inline(__always)
  private func takeFromInjection(_ lane: Int, for worker: Worker) -> JobNodePointer? {
    let waiting = injection[lane].count
    guard waiting > 0 else { return nil }
    let threads = Swift.max(1, tableCount.load(ordering: .relaxed))
    let local = worker.local + lane
    // One to run plus at most `room` to stage (a stalled thief can hold the ring's room).
    let share = Swift.min(
      InjectionQueue.takeLimit, Swift.max(1, waiting / threads), local.pointee.room + 1)
    var staged = 0
    let first = injection[lane].take(limit: share) { node in
      local.pointee.stage(node, at: staged)
      staged += 1
    }
    if staged > 0 { local.pointee.publishStaged(staged) }
    if first != nil && (staged > 0 || injection[lane].count > 0) {
      worker.notifiedInTake = true
      notifyWork()
    }
    return first
  }

  /// Steals half of another worker's local queue, highest lane first, starting after the
  /// thief in table order (so thieves spread over victims). Worker threads.
  func steal(for thief: Worker) -> JobNodePointer? {
    countPoolEvent(.dryTurn)  // Called when `takeJob` found nothing.
    let count = tableCount.load(ordering: .acquiring)
    guard count > 1 else { return nil }
    poolProbe(.steal)
    for lane in 0..<laneCount {
      for offset in 1..<count {
        let stolen = unmanagedWorker(at: (thief.index + offset) % count)
          ._withUnsafeGuaranteedRef { victim -> JobNodePointer? in
            guard !victim.local[lane].isEmpty,
              let node = victim.local[lane].steal(into: thief.local[lane])
            else { return nil }
            // More than one taken, or more left behind: let another worker help.
            if !thief.local[lane].isEmpty || !victim.local[lane].isEmpty {
              thief.notifiedInTake = true
              notifyWork()
            }
            return node
          }
        if let stolen { return stolen }
      }
    }
    return nil
  }

  /// Whether any lane's injection queue or any worker's local queue holds a job. Sequentially
  /// consistent loads: the re-check of the parking Dekker pair (`WorkerPool+Parking.swift`).
  func hasQueuedWork() -> Bool {
    for lane in 0..<laneCount where injection[lane].count > 0 { return true }
    let count = tableCount.load(ordering: .acquiring)
    for index in 0..<count
    where unmanagedWorker(at: index)._withUnsafeGuaranteedRef({
      $0.hasLocalWork
    }) {
      return true
    }
    return false
  }

  /// One step of a spinner's look for work: the injection queues, and the local queues of the
  /// worker at `cursor`, which moves on to the next worker in the table. A step costs the same
  /// with 2 workers or 64 (the full look, `hasQueuedWork()`, reads every worker's lanes: at 64
  /// workers, hundreds of lines per spin iteration); a job in a local queue is seen within one
  /// round of the table. The park re-check still makes the full look (the Dekker pairing of
  /// `WorkerPool+Parking.swift` needs every queue), so a spin that misses a job costs time,
  /// never the job.
  @inline(__always)
  func hasQueuedWork(step cursor: inout Int) -> Bool {
    for lane in 0..<laneCount where injection[lane].count > 0 { return true }
    let count = tableCount.load(ordering: .acquiring)
    if cursor >= count { cursor = 0 }
    let found = unmanagedWorker(at: cursor)._withUnsafeGuaranteedRef { $0.hasLocalWork }
    cursor += 1
    return found
  }

  /// Jobs in the injection and local queues now (a snapshot, for figures and the supervisor).
  var queuedJobCount: Int {
    var total = 0
    for lane in 0..<laneCount { total += Swift.max(0, injection[lane].count) }
    let count = tableCount.load(ordering: .acquiring)
    for index in 0..<count {
      let candidate = worker(at: index)
      for lane in 0..<laneCount { total += Swift.max(0, candidate.local[lane].count) }
    }
    return total
  }

  /// Jobs started by plain workers since launch (the supervisor's progress figure).
  var jobsStarted: UInt64 {
    var total: UInt64 = 0
    let count = tableCount.load(ordering: .acquiring)
    for index in 0..<count { total &+= worker(at: index).progress.load(ordering: .relaxed) }
    return total
  }

  /// The figures of a plain global queue: submissions counted by the injection queue and by
  /// each worker, starts and waits by each worker (for `laneFigures`).
  func plainLaneFigures(_ lane: Int) -> LaneStats {
    var stats = LaneStats()
    stats.submitted = injection[lane].pushed.load(ordering: .relaxed)
    let count = tableCount.load(ordering: .acquiring)
    for index in 0..<count {
      worker(at: index).figures.add(lane: lane, to: &stats)
    }
    return stats
  }

  // MARK: Threads

  /// What became of a request for one more worker.
  enum SpawnOutcome {
    case started
    /// The pool is at `maximumThreads` (or `totalThreadLimit`); nothing was tried.
    case atCapacity
    /// The system refused the thread; the pool is as it was before the call.
    case refused(ThreadSpawnError)
  }

  /// Starts a worker thread, on a retired worker's object when there is one. If the system
  /// refuses, gives the reserved slot back and, when `warn` is true, writes the episode's one
  /// warning line (see `warnRefused`).
  /// Called by the pool's initialiser and by the supervisor thread only.
  func spawnWorker(isExtra: Bool, warn: Bool = true) -> SpawnOutcome {
    // Reserve the slot first so that concurrent counts never exceed `maximumThreads`.
    let reserved: (Worker, Int, Bool)? = state.withLock { state in
      guard state.threads < maximumThreads,
        state.threads + state.overcommit.threads < totalThreadLimit
      else { return nil }
      state.threads += 1
      state.nextWorkerID += 1
      if let index = state.retired.popLast() {
        let worker = state.workers[index]
        worker.prepareForRestart(id: state.nextWorkerID, isExtra: isExtra)
        return (worker, index, true)
      }
      let index = state.workers.count
      let worker = Worker(pool: self, id: state.nextWorkerID, index: index, isExtra: isExtra)
      state.workers.append(worker)
      workerTable[index].store(
        UInt(bitPattern: Unmanaged.passUnretained(worker).toOpaque()), ordering: .releasing)
      // Releasing: publishes the table entry (and the worker's queues) to `worker(at:)`.
      tableCount.store(index + 1, ordering: .releasing)
      return (worker, index, false)
    }
    guard let (worker, index, _) = reserved else { return .atCapacity }
    // Counted before the thread starts: whoever sees the new worker run a job (through
    // whatever the job signals, after the thread's creation) sees the growth counted too.
    // Given back if the start is refused.
    if isExtra { growthEvents.wrappingAdd(1, ordering: .relaxed) }
    // Known to the supervisor before its thread runs: until it has taken a job it is not
    // `busy`, so `everyWorkerIsBlocked` is false and a worker the kernel has not scheduled
    // yet stops further growth.
    supervisor.register(worker)
    do {
      try NativeThread.spawnDetached(name: "ld.worker.\(worker.id)") { worker.main() }
    } catch {
      supervisor.unregister(worker)
      // The worker never ran: its queues are empty and it is not in the idle set, so giving
      // back its slot (and its index, for the next start) restores the pool exactly.
      state.withLock { state in
        state.threads -= 1
        state.retired.append(index)
      }
      refusedSpawns.wrappingAdd(1, ordering: .relaxed)
      if isExtra { growthEvents.wrappingSubtract(1, ordering: .relaxed) }
      if warn { warnRefused(error) }
      return .refused(error)
    }
    state.withLock { $0.spawnRefused = false }
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

  /// Whether jobs wait in a queue or a run-next slot, or overcommit jobs wait for a thread
  /// (for the supervisor's sleep; sequentially consistent loads, see `PoolSupervisor.run`).
  var hasWaitingWork: Bool {
    hasQueuedWork() || hasSlottedJob
      || overcommitShortfall.load(ordering: .sequentiallyConsistent) > 0
  }

  /// Whether a plain worker's run-next slot holds a job: a sequentially consistent load of
  /// every slot (for the supervisor's sleep check, `hasWaitingWork`).
  ///
  /// The slots are read where they are, instead of a process-wide count of slotted jobs that
  /// every hand-off would write twice (once to fill, once to empty): the hand-off writes only
  /// its own worker's line (`WorkerPool+RunNext.swift`). The pairing is the one the count
  /// had, with the slot as the published word: a filler stores its slot (sequentially
  /// consistent), then loads the supervisor's word in `noteWorkWaiting`; the supervisor stores
  /// its word, then loads every slot here. In the total order one of the stores comes first,
  /// so the supervisor sees the slot filled (or already emptied by a take: the job is gone),
  /// or the filler sees it asleep and wakes it. The table count read first covers every
  /// worker that can fill a slot: it is written only by `spawnWorker`, which runs in the
  /// pool's initialiser (before the supervisor's thread starts) or on the supervisor's own
  /// thread, so the supervisor always reads its latest value.
  var hasSlottedJob: Bool {
    let count = tableCount.load(ordering: .acquiring)
    for index in 0..<count
    where unmanagedWorker(at: index)._withUnsafeGuaranteedRef({
      $0.runNext.load(ordering: .sequentiallyConsistent) != 0
    }) {
      return true
    }
    return false
  }

  /// Worker threads alive now, plain and overcommit.
  var threadCount: Int { state.withLock { $0.threads + $0.overcommit.threads } }
  /// Workers parked now, plain and overcommit.
  var parkedCount: Int {
    var parked = 0
    for word in 0..<idleWordCount {
      parked += idleWords[word].load(ordering: .relaxed).nonzeroBitCount
    }
    return parked + state.withLock { $0.overcommit.idle.count }
  }
}

/// Pool figures for the package's own tests (not public API).
package enum PoolDiagnostics {
  /// Worker starts the system refused since launch. Starts the pool on first use.
  package static var refusedWorkerStarts: UInt64 {
    WorkerPool.shared.refusedSpawns.load(ordering: .relaxed)
  }

  /// Plain worker threads now (base and extra). Starts the pool.
  package static var workerThreads: Int { WorkerPool.shared.state.withLock { $0.threads } }

  /// The pool in words, for a test's failure message when work seems stranded: threads,
  /// parked workers, jobs waiting in each lane's injection queue, and every plain worker
  /// that is busy or holds work (its local queues' counts, a filled run-next slot, its
  /// progress count). A snapshot of relaxed loads. Starts the pool.
  package static var snapshot: String {
    let pool = WorkerPool.shared
    let injected = (0..<pool.laneCount).map { String(pool.injection[$0].count) }
    var text =
      "threads \(pool.threadCount), parked \(pool.parkedCount)"
      + ", supervisor asleep \(pool.supervisor.isAsleep)"
      + ", injection [\(injected.joined(separator: " "))]"
    for index in 0..<pool.tableCount.load(ordering: .acquiring) {
      pool.unmanagedWorker(at: index)._withUnsafeGuaranteedRef { worker in
        let local = (0..<worker.localCount).map { worker.local[$0].count }
        let slotted = worker.runNext.load(ordering: .relaxed) != 0
        let busy = worker.busy.load(ordering: .relaxed)
        guard busy || slotted || local.contains(where: { $0 > 0 }) else { return }
        text +=
          "; worker \(worker.id): busy \(busy), run-next \(slotted)"
          + ", local [\(local.map(String.init).joined(separator: " "))]"
          + ", progress \(worker.progress.load(ordering: .relaxed))"
      }
    }
    return text
  }

  /// Whether the pool looks quiet: every plain worker's idle bit set, no job queued, and the
  /// supervisor's word saying it sleeps without a timeout. A snapshot: a worker between its
  /// announcement and its re-check, or in its 200 µs back-off, counts as parked, and the
  /// supervisor's word is set during its own re-check; a test polls it until it holds, and
  /// nothing then wakes either side until work is submitted. Starts the pool.
  package static var isQuiet: Bool {
    let pool = WorkerPool.shared
    var parked = 0
    for word in 0..<pool.idleWordCount {
      parked += pool.idleWords[word].load(ordering: .sequentiallyConsistent).nonzeroBitCount
    }
    return pool.supervisor.isAsleep && !pool.hasQueuedWork()
      && parked == pool.state.withLock { $0.threads }
  }
}

/// A positive integer from the environment, or nil.
private func environmentInteger(_ name: String) -> Int? {
  guard let raw = getenv(name), let value = Int(String(cString: raw)), value >= 1 else {
    return nil
  }
  return value
}

/// A pool job with its submission time (`Ticks`): the overcommit lanes' element.
struct TimedJob {
  var job: PoolJob
  var enqueuedAt: UInt64
}

/// One global queue's figures.
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
