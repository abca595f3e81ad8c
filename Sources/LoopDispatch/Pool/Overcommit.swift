@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// The overcommit global queues (`Queue.global(_:overcommit: true)`): each job starts at once
/// on a thread of its own when no overcommit thread is idle, even while every CPU is busy, up
/// to `totalThreadLimit` (255) pool threads in the process — libdispatch's
/// `DISPATCH_QUEUE_OVERCOMMIT` root queues on Linux.
///
/// Rules (all state below is protected by the pool's lock unless it says otherwise):
/// 1. Two kinds of worker, two sets of lanes. Plain workers (one per CPU, plus those the
///    supervisor adds while they are blocked) take jobs only from the plain lanes; overcommit
///    workers only from the overcommit lanes (one per priority). So the plain global queues
///    keep one thread per CPU and their growth rule whatever overcommit work does, and an
///    overcommit job never waits for a plain worker to return from a job that may run for
///    ever (the spinners of a program that waits for all of them). The price: the first
///    overcommit job of a burst starts a thread even when plain workers are idle (libdispatch
///    on Linux also gives each root queue threads of its own).
/// 2. Thread budget: plain threads ≤ `maximumThreads` (64), and plain + overcommit threads ≤
///    `totalThreadLimit` (255, or the plain cap if larger); a slot is reserved under the lock
///    before `pthread_create` and given back if the system refuses the thread.
/// 3. Matching: `queued` counts the jobs in the overcommit lanes, `coming` the overcommit
///    workers woken or being started that have not yet taken the lock since. After every
///    release of the lock: `queued ≤ coming`, or no overcommit worker is idle and the budget
///    (rule 2) is spent — the shortfall, `queued − coming`, is published in the atomic
///    `overcommitShortfall`. `callOvercommitWorker` restores this after every change that can
///    raise `queued − coming` (a submission, a refused start): it wakes an idle overcommit
///    worker (most recently parked first) or reserves a new one, and marks it coming.
/// 4. An overcommit worker, each time it takes the lock: stops being coming (if it was),
///    counts its last job's completion, and takes the oldest job of the highest non-empty
///    overcommit lane; if there is none, it joins the idle stack and sets its park word in
///    the same hold of the lock. No wake-up is lost: a submission made before that hold left
///    its job in a lane for the worker to take; one made after finds it on the idle stack,
///    takes it off and wakes it (the word is cleared after the lock, `Worker.unpark`). A job
///    taken by another worker than the one called for it only lowers `queued`: the called
///    worker finds the lanes empty and parks again.
/// 5. The shortfall (rule 3) waits in its lanes, strictly by priority, for: an overcommit
///    worker finishing its job (rule 4); a slot freed by a retiring plain worker (its
///    retirement calls `callOvercommitWorker`, `Worker.park`); or the supervisor, which stays
///    awake while `overcommitShortfall > 0` and calls a worker at each tick, after
///    `PoolSupervisor.retryDelay` when a start was refused. The supervisor's sleep is the
///    Dekker pair of `PoolSupervisor.run`: the shortfall is stored sequentially consistent
///    before `noteWorkWaiting` loads the supervisor's word.
/// 6. Retirement: every overcommit worker is an extra: parked for `idleRetirement` (5 s), it
///    leaves if it is still on the idle stack (under the lock), and gives its slot back. A
///    waker that took it off the stack first wins, and it runs the job instead. A worker on
///    the idle stack implies no shortfall (rule 3 wakes idle workers first), so a retiring
///    overcommit worker leaves nothing behind.
/// 7. No run-next slot, batch or spin: an overcommit worker does not install itself as
///    `Worker.current`, so a plain submission from an overcommit job takes the ordinary lane
///    path, and a serial queue targeting an overcommit queue is scheduled like any other
///    overcommit job: it never waits behind the job that made it runnable.
/// 8. Cost to the plain paths: one branch in `Queue` on the root's kind at submission; plain
///    workers never read overcommit state; the supervisor's progress figure (`jobsStarted`)
///    stays plain-only (overcommit jobs count in `overcommitJobsStarted`), so busy overcommit
///    threads never hide blocked plain workers from it.
extension WorkerPool {
  /// Queues `job` on the overcommit lane of `priority` and makes sure a thread comes for it
  /// at once (rule 3). Thread-safety: any thread.
  func submitOvercommit(_ job: PoolJob, priority: Priority) {
    let timed = TimedJob(job: job, enqueuedAt: Ticks.now())
    let call: OvercommitCall = state.withLock { state in
      state.overcommit.laneStats[priority.rawValue].submitted &+= 1
      state.overcommit.lanes[priority.rawValue].append(timed)
      state.overcommit.queued += 1
      return callOvercommitWorker(&state)
    }
    perform(call)
  }

  /// Queues `jobs` in order on the overcommit lane of `priority` under one lock hold, and
  /// calls a thread for each (rule 3). For the service loop's fired `after` timers.
  /// Thread-safety: any thread.
  func submitOvercommitBatch<Jobs: Sequence<PoolJob>>(_ jobs: Jobs, priority: Priority) {
    let now = Ticks.now()
    let calls: [OvercommitCall] = state.withLock { state in
      var calls: [OvercommitCall] = []
      for job in jobs {
        state.overcommit.laneStats[priority.rawValue].submitted &+= 1
        state.overcommit.lanes[priority.rawValue].append(TimedJob(job: job, enqueuedAt: now))
        state.overcommit.queued += 1
        calls.append(callOvercommitWorker(&state))
      }
      return calls
    }
    for call in calls { perform(call) }
  }

  /// A slot of the cap on diverted drains (`PoolJob.divertedDrain`) for a drain of `queue`,
  /// which the caller then submits: the slot of the drain of `queue` this thread is running,
  /// passed on (its yield or its re-check scheduled the next drain: without this, a queue
  /// busy enough to yield would count twice and be refused at the cap, then go back and
  /// forth), else a new one if fewer than `divertedDrainLimit` are held. False (nothing
  /// taken, nothing written) at the cap. Thread-safety: any thread.
  func reserveDivertedDrain(of queue: Queue) -> Bool {
    let bits = Unmanaged.passUnretained(queue).toOpaque()
    if ThreadSlots.divertedDrain() == bits {
      ThreadSlots.setDivertedDrain(nil)
      return true
    }
    // Looked at first, so that a refusal writes nothing to the shared line.
    guard divertedDrains.load(ordering: .relaxed) < divertedDrainLimit else { return false }
    countSharedWrite(.divertedDrain)
    guard divertedDrains.wrappingAdd(1, ordering: .relaxed).newValue > divertedDrainLimit else {
      return true
    }
    // Lost a race for the last slot.
    countSharedWrite(.divertedDrain)
    divertedDrains.wrappingSubtract(1, ordering: .relaxed)
    return false
  }

  /// Runs a diverted drain of `queue` holding its slot (`reserveDivertedDrain`), and gives
  /// the slot back unless the drain passed it on to the next drain of `queue`. The slot is
  /// the thread's while the drain runs (`ThreadSlots.divertedDrain`): a producer that
  /// schedules the queue's next drain from its own thread takes a slot of its own.
  func runDivertedDrain(of queue: Queue) {
    ThreadSlots.setDivertedDrain(Unmanaged.passUnretained(queue).toOpaque())
    queue.runFromPool()
    guard ThreadSlots.divertedDrain() != nil else { return }  // Passed on.
    ThreadSlots.setDivertedDrain(nil)
    countSharedWrite(.divertedDrain)
    divertedDrains.wrappingSubtract(1, ordering: .relaxed)
  }

  /// Whom to call for the overcommit lanes, decided under the lock and done after it.
  enum OvercommitCall {
    case none
    /// An idle overcommit worker, taken off the idle stack and marked coming.
    case wake(Worker)
    /// A new overcommit worker with this id, its slot reserved and counted coming.
    case start(Int)
    /// The budget is spent (rule 5): the supervisor must be watching.
    case supervisor
  }

  /// Restores rule 3 after `queued − coming` may have risen: calls one worker if a queued job
  /// has none coming. With `mayStart: false` it only wakes an idle one. Pool lock held.
  func callOvercommitWorker(_ state: inout State, mayStart: Bool = true) -> OvercommitCall {
    defer { publishOvercommitShortfall(state.overcommit) }
    guard state.overcommit.queued > state.overcommit.coming else { return .none }
    if let worker = state.overcommit.idle.popLast() {
      worker.isComing = true
      state.overcommit.coming += 1
      return .wake(worker)
    }
    guard mayStart, state.threads + state.overcommit.threads < totalThreadLimit else {
      return .supervisor
    }
    state.overcommit.threads += 1
    state.overcommit.coming += 1
    state.nextWorkerID += 1
    return .start(state.nextWorkerID)
  }

  /// Stores `queued − coming` (or 0) in `overcommitShortfall` when it changed. Pool lock held.
  @inline(__always)
  func publishOvercommitShortfall(_ overcommit: OvercommitState) {
    let shortfall = Swift.max(0, overcommit.queued - overcommit.coming)
    if overcommitShortfall.load(ordering: .relaxed) != shortfall {
      // Sequentially consistent: pairs with the supervisor's store of its word before it
      // re-checks `hasWaitingWork` (rule 5), as `pendingJobs` does.
      overcommitShortfall.store(shortfall, ordering: .sequentiallyConsistent)
    }
  }

  /// Does what `callOvercommitWorker` decided. Returns false if a start was refused.
  @discardableResult
  func perform(_ call: OvercommitCall) -> Bool {
    switch call {
    case .none: return true
    case .wake(let worker):
      worker.unpark()
      return true
    case .start(let id): return startOvercommitWorker(id: id)
    case .supervisor:
      supervisor.noteWorkWaiting()
      return true
    }
  }

  /// Starts the overcommit worker whose slot `callOvercommitWorker` reserved. If the system
  /// refuses the thread, gives the slot back, wakes an idle worker instead if one parked
  /// meanwhile, and leaves the rest to the supervisor (rule 5). Returns whether it started.
  /// Thread-safety: any thread (the submitter's, the supervisor's, a retiring worker's).
  private func startOvercommitWorker(id: Int) -> Bool {
    let worker = Worker(pool: self, overcommitID: id)
    // Counted in `coming` since the reservation: its first hold of the lock ends that.
    worker.isComing = true
    do {
      try NativeThread.spawnDetached(name: "ld.oc.\(id)") { worker.overcommitMain() }
    } catch {
      // The worker never ran: it is on no list, so giving back its slot restores the pool.
      let call: OvercommitCall = state.withLock { state in
        state.overcommit.threads -= 1
        state.overcommit.coming -= 1
        return callOvercommitWorker(&state, mayStart: false)
      }
      refusedSpawns.wrappingAdd(1, ordering: .relaxed)
      warnRefused(error)
      perform(call)
      supervisor.noteWorkWaiting()
      return false
    }
    state.withLock { $0.spawnRefused = false }
    return true
  }

  /// The supervisor's tick while `overcommitShortfall > 0` (rule 5): calls one more worker if
  /// the budget allows. Returns false if the system refused the thread. Supervisor thread.
  func serveOvercommitShortfall() -> Bool {
    perform(state.withLock { callOvercommitWorker(&$0) })
  }

  /// The overcommit worker's next job, parking (rule 4) until there is one; nil when it
  /// retired instead (rule 6). `finished`: the lane of the job it just ran, to count.
  /// Overcommit worker threads.
  func nextOvercommitJob(for worker: Worker, finished: Int?) -> (PoolJob, Priority)? {
    var finished = finished
    while true {
      let now = Ticks.now()
      let taken: (PoolJob, Priority)? = state.withLock { state in
        defer { publishOvercommitShortfall(state.overcommit) }
        if worker.isComing {
          worker.isComing = false
          state.overcommit.coming -= 1
        }
        if let lane = finished { state.overcommit.laneStats[lane].completed &+= 1 }
        for lane in 0..<state.overcommit.lanes.count {
          if let timed = state.overcommit.lanes[lane].popFirst() {
            state.overcommit.queued -= 1
            state.overcommit.laneStats[lane].recordStart(enqueuedAt: timed.enqueuedAt, now: now)
            return (timed.job, Priority(rawValue: lane)!)
          }
        }
        worker.parkWord.atomic.pointee.store(1, ordering: .relaxed)
        state.overcommit.idle.append(worker)
        return nil
      }
      if let taken { return taken }
      finished = nil
      ThreadName.showOwnNameBeforeParking()
      let timeout = UInt64(idleRetirement.saturatingNanoseconds)
      // Acquiring; pairs with the releasing store in `Worker.unpark`.
      while worker.parkWord.atomic.pointee.load(ordering: .acquiring) == 1 {
        worker.parkWord.wait(whileEqualTo: 1, timeoutNanoseconds: timeout)
        guard worker.parkWord.atomic.pointee.load(ordering: .acquiring) == 1 else { break }
        // Timed out (or woke spuriously): retire if still idle (rule 6).
        let retired = state.withLock { state -> Bool in
          guard let index = state.overcommit.idle.firstIndex(where: { $0 === worker }) else {
            return false
          }
          state.overcommit.idle.remove(at: index)
          state.overcommit.threads -= 1
          return true
        }
        if retired { return nil }
      }
    }
  }

  /// The figures of the global queue of `priority`, plain or overcommit (for `Queue.figures`).
  func laneFigures(_ priority: Priority, overcommit: Bool) -> LaneStats {
    if !overcommit { return plainLaneFigures(priority.rawValue) }
    return state.withLock { $0.overcommit.laneStats[priority.rawValue] }
  }

  /// Overcommit threads alive or starting.
  var overcommitThreadCount: Int { state.withLock { $0.overcommit.threads } }
  /// Jobs waiting in the overcommit lanes.
  var overcommitQueuedCount: Int { state.withLock { $0.overcommit.queued } }
}

extension Worker {
  /// An overcommit worker's thread: runs overcommit jobs until it retires (rule 4 and 6).
  func overcommitMain() {
    ThreadName.installForWorker(ownName: "ld.oc.\(id)")
    defer { ThreadName.removeForWorker() }
    var finished: Int? = nil
    while let (job, priority) = pool.nextOvercommitJob(for: self, finished: finished) {
      pool.overcommitJobsStarted.wrappingAdd(1, ordering: .relaxed)
      let shown = job.divertedFrom ?? Queue.global(priority, overcommit: true)
      ThreadFrame.with(shown, exclusive: false) { job.run() }
      finished = priority.rawValue
    }
  }
}

/// The overcommit lanes and threads (`Overcommit.swift`). Protected by the pool's lock.
struct OvercommitState {
  var lanes = (0..<Priority.allCases.count).map { _ in RingBuffer<TimedJob>(capacity: 16) }
  /// The overcommit global queues' figures, one per lane.
  var laneStats = [LaneStats](repeating: LaneStats(), count: Priority.allCases.count)
  /// Jobs in `lanes` (rule 3).
  var queued = 0
  /// Overcommit workers woken or being started that have not taken the lock since (rule 3).
  var coming = 0
  /// Parked overcommit workers, most recently parked last.
  var idle: [Worker] = []
  /// Overcommit threads alive, or reserved while one starts (rule 2).
  var threads = 0
}
