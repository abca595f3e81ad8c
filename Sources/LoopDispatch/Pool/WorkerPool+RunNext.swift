/// The run-next slot: work a job makes runnable runs on the same worker, with no wake-up.
///
/// On these machines waking a sleeping thread costs 10–40 µs, far more than the work a
/// hand-off usually carries. When the running job makes more work runnable — a serial queue
/// it submitted to becomes scheduled, an actor job it enqueued, a task it resumed — that
/// work most often needs the same data and nothing else is waiting for it, so the cheapest
/// thread to run it is the one that made it: this worker, as soon as its current job returns.
///
/// Rules (all decided under the pool's lock; the slot's fields are the worker's, see
/// `Worker.swift`):
/// 1. `submit(_:priority:runNext: true)` from a worker fills its empty slot and wakes nobody.
///    A second job while the slot is full goes to its lane like any other (and may wake a
///    worker), so a job that fans out still spreads over the pool.
/// 2. Fairness: the owner takes its slot before the lanes, except that a lane of higher
///    priority than the slot's job goes first (strict priority holds), and after
///    `runNextStreakLimit` slot jobs in a row the lanes' oldest job goes first when any waits
///    (FIFO fairness holds: a ping-pong of two queues cannot starve the lanes).
///    A queue that yields after its drain budget re-enqueues with `runNext: false`, so the
///    128-item bound still lets other queues in.
/// 3. The slot is not counted in `pendingJobs`, so spinning workers leave it alone (stealing
///    it would move the work to another core for nothing).
/// 4. No stranding: the owner flushes its slot to the lane before it sleeps in any of
///    LoopDispatch's blocking waits (`FutexWord.wait` calls `flushBeforeBlocking`), and the
///    supervisor, at each tick, moves a slot it already saw filled at the previous tick to
///    its lane and wakes a parked worker for it: a job stuck behind an owner that blocks in
///    the kernel or runs long waits one to two ticks (5–10 ms), not until the owner returns.
extension WorkerPool {
  /// Slot jobs a worker runs in a row before the lanes' oldest job goes first.
  static let runNextStreakLimit = 3

  /// Fills `owner`'s slot with `timed` if it may (rule 1 and 2). Pool lock held.
  @inline(__always)
  func fillRunNext(of owner: Worker, with timed: TimedJob, priority: Priority) -> Bool {
    guard owner.runNext == nil else { return false }
    owner.runNext = SlotJob(timed: timed, priority: priority)
    owner.runNextSeen = false
    owner.hasRunNext.store(true, ordering: .relaxed)
    // Sequentially consistent: pairs with the supervisor's sleep check (`hasWaitingWork`).
    slottedJobs.wrappingAdd(1, ordering: .sequentiallyConsistent)
    return true
  }

  /// Empties `owner`'s slot and returns its job if it may run before the lanes (rule 2).
  /// Pool lock held; called by the owner only.
  @inline(__always)
  func takeRunNext(of owner: Worker, state: inout State) -> SlotJob? {
    guard let slot = owner.runNext else { return nil }
    for lane in 0..<slot.priority.rawValue where !state.lanes[lane].isEmpty { return nil }
    // After the streak limit, the lanes' oldest job goes first — if one waits there (jobs in
    // batches do not count: the owner's own batch must not stall its slot).
    if owner.runNextStreak >= Self.runNextStreakLimit
      && state.lanes.contains(where: { !$0.isEmpty })
    {
      return nil
    }
    clearRunNext(of: owner)
    owner.runNextStreak += 1
    return slot
  }

  /// Empties `owner`'s slot. Pool lock held.
  @inline(__always)
  private func clearRunNext(of owner: Worker) {
    owner.runNext = nil
    owner.hasRunNext.store(false, ordering: .relaxed)
    slottedJobs.wrappingSubtract(1, ordering: .relaxed)
  }

  /// Moves `owner`'s slot job to the back of its lane. Pool lock held.
  private func moveRunNextToLane(of owner: Worker, state: inout State) {
    guard let slot = owner.runNext else { return }
    clearRunNext(of: owner)
    appendToLane(slot.priority.rawValue, slot.timed, &state)
    pendingJobs.wrappingAdd(1, ordering: .sequentiallyConsistent)
  }

  /// The calling worker is about to sleep in a blocking wait: its slot job goes to its lane,
  /// and its batch back to the front of its lane (and a parked worker is woken for them),
  /// since the owner cannot run them now — one may be the very job the wait is for (rule 4).
  /// Cheap (one thread-local read) off the pool or with an empty slot and batch. Any thread.
  static func flushBeforeBlocking() {
    guard let worker = Worker.current,
      worker.hasRunNext.load(ordering: .relaxed) || worker.batchCount.load(ordering: .relaxed) > 0
    else { return }
    let pool = worker.pool
    let wake: Wake = pool.state.withLock { state in
      pool.moveRunNextToLane(of: worker, state: &state)
      pool.returnBatch(of: worker, &state)
      return pool.wakeForLaneWork(&state)
    }
    pool.perform(wake)
  }

  /// The supervisor's tick (rule 4): a slot already seen filled at the previous tick goes to
  /// its lane. Supervisor thread.
  func rescueStrandedRunNext(among workers: [Worker]) {
    state.withLock { state in
      for worker in workers where worker.runNext != nil {
        if worker.runNextSeen {
          moveRunNextToLane(of: worker, state: &state)
        } else {
          worker.runNextSeen = true
        }
      }
    }
  }
}

/// A job in a run-next slot, with the lane it belongs to.
struct SlotJob {
  var timed: TimedJob
  var priority: Priority
}
