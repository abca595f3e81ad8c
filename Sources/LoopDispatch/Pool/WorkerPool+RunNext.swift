import Synchronization

/// The run-next slot: work a job makes runnable runs on the same worker, with no wake-up.
///
/// On these machines waking a sleeping thread costs 10–40 µs, far more than the work a
/// hand-off usually carries. When the running job makes more work runnable — a serial queue
/// it submitted to becomes scheduled, an actor job it enqueued, a task it resumed — that
/// work most often needs the same data and nothing else is waiting for it, so the cheapest
/// thread to run it is the one that made it: this worker, as soon as its current job returns.
///
/// Rules (the slot is `Worker.runNext`, a node pointer; only its owner fills it, and it is
/// emptied by an exchange, so the owner and a rescuer never both take it):
/// 1. `submit(_:priority:runNext: true)` from a worker fills its empty slot and wakes nobody.
///    A second job while the slot is full goes to the worker's local queue like any other
///    (and may wake a worker), so a job that fans out still spreads over the pool.
/// 2. Fairness: the owner takes its slot before its queues, except that a job of higher
///    priority waiting in its local queue or in an injection queue goes first (strict
///    priority holds), and after `runNextStreakLimit` slot jobs in a row any job waiting
///    there goes first (a ping-pong of two queues cannot starve the others).
///    A queue that yields after its drain budget re-enqueues with `runNext: false`, so the
///    128-item bound still lets other queues in.
/// 3. The slot is not stealable and not counted as queued work, so spinning workers leave it
///    alone (stealing it would move the work to another core for nothing).
/// 4. No stranding: the owner moves its slot job to its local queue before it sleeps in any
///    of LoopDispatch's blocking waits (`FutexWord.wait` calls `flushBeforeBlocking`), and
///    wakes a worker to steal it and the rest of its queue; the supervisor, at each tick,
///    moves a slot it already saw filled at the previous tick to its lane's injection queue
///    and wakes a worker: a job stuck behind an owner that blocks in the kernel or runs long
///    waits one to two ticks (5–10 ms), not until the owner returns.
extension WorkerPool {
  /// Slot jobs a worker runs in a row before waiting jobs go first.
  static let runNextStreakLimit = 3

  /// Fills `owner`'s slot with `node` if it is empty (rule 1). The owner's thread.
  @inline(__always)
  func fillRunNext(of owner: Worker, with node: JobNodePointer, lane: Int) -> Bool {
    guard owner.runNext.load(ordering: .relaxed) == 0 else { return false }
    // Counted before the store: once in the slot, a rescuer may move the node on.
    owner.figures.countLocalSubmission(lane: lane)
    // Sequentially consistent: the slot is what the supervisor's sleep check loads
    // (`hasSlottedJob`: this store, then the caller's load of the supervisor's word in
    // `noteWorkWaiting`, against its store of that word, then its loads of the slots);
    // releasing, so a rescuer that exchanges it out sees the job. The only write of the
    // hand-off, on the owner's own line: no process-wide count of slotted jobs.
    owner.runNext.store(node.nodeBits, ordering: .sequentiallyConsistent)
    return true
  }

  /// Empties `owner`'s slot and returns its job if it may run before the queues (rule 2).
  /// The owner's thread.
  @inline(__always)
  func takeRunNext(of owner: Worker) -> JobNodePointer? {
    guard owner.runNext.load(ordering: .relaxed) != 0 else { return nil }
    // Taken first, then judged: a rescuer may move the node meanwhile (and another thread
    // reuse it), so its fields are read only once it is ours. Acquiring: the filler's
    // writes to the node.
    let bits = owner.runNext.exchange(0, ordering: .acquiring)
    guard bits != 0 else { return nil }
    let node = JobNodePointer(nodeBits: bits)
    let lane = node.pointee.lane
    var mustWait = false
    for higher in 0..<lane where !owner.local[higher].isEmpty || injection[higher].count > 0 {
      mustWait = true
      break
    }
    if !mustWait && owner.runNextStreak >= Self.runNextStreakLimit {
      mustWait = hasQueuedWork(for: owner)
    }
    if mustWait {
      // Back in the slot (only the owner fills it, so it is still empty). Sequentially
      // consistent, then the supervisor's word is loaded, as for a fill: the exchange above
      // emptied the slot for a moment, and a supervisor that looked then may have gone to
      // sleep, while the job the owner runs first may block in the kernel (rule 4). A load
      // of a word the supervisor writes only when it sleeps or wakes: no shared write unless
      // it sleeps. (Rare: a higher lane waits, or the streak is used up.)
      owner.runNext.store(bits, ordering: .sequentiallyConsistent)
      supervisor.noteWorkWaiting()
      return nil
    }
    owner.runNextStreak += 1
    return node
  }

  /// Whether a job waits in `owner`'s local queues or in any injection queue (rule 2's
  /// fairness check; other workers' queues are theirs to run).
  @inline(__always)
  private func hasQueuedWork(for owner: Worker) -> Bool {
    for lane in 0..<laneCount
    where !owner.local[lane].isEmpty || injection[lane].count > 0 {
      return true
    }
    return false
  }

  /// Takes `worker`'s slot job out for someone else to run (rule 4), or nil if the slot is
  /// empty. Any thread.
  private func evictRunNext(of worker: Worker) -> JobNodePointer? {
    let taken = worker.runNext.exchange(0, ordering: .acquiring)
    guard taken != 0 else { return nil }
    return JobNodePointer(nodeBits: taken)
  }

  /// The calling worker is about to sleep in a blocking wait: its slot job goes to its local
  /// queue (or the injection queue, if that is full), and a worker is woken to steal from
  /// it, since the owner cannot run them now — one may be the very job the wait is for
  /// (rule 4). Cheap (one thread-local read) off the pool or with nothing queued. Any thread.
  ///
  /// A thread that is not a worker makes the wake-up it deferred instead, if it owes one
  /// (`WorkerPool+DeferredWake.swift`, rule 2). A worker inside a job counts itself asleep
  /// in it for the sleep (rule 4), then, if jobs are queued anywhere, makes sure a worker is
  /// coming for them: the count and the look, both sequentially consistent, pair with an
  /// outside submitter's publication and its load of the count (Dekker), so a job the
  /// sleeper waits for is never left to the supervisor's tick. Returns whether the caller
  /// must call `wokeInJob` after its sleep.
  static func flushBeforeBlocking() -> Bool {
    guard let worker = Worker.current else {
      payOwedWake()
      return false
    }
    let pool = worker.pool
    let inJob = pool.sleepsInJob(worker)
    if let node = pool.evictRunNext(of: worker) {
      if !worker.local[node.pointee.lane].push(node) {
        pool.injection[node.pointee.lane].push(node)
        countSharedWrite(.rescue, 3)
      }
    } else if !worker.hasLocalWork && !(inJob && pool.hasQueuedWork()) {
      return inJob
    }
    pool.notifyWork()
    return inJob
  }

  /// The supervisor's tick (rule 4): a slot already seen filled at the previous tick goes to
  /// its lane's injection queue, and a worker is woken for it. Supervisor thread.
  func rescueStrandedRunNext(among workers: [Worker]) {
    for worker in workers {
      let bits = worker.runNext.load(ordering: .relaxed)
      defer { worker.runNextSeen = bits }
      // The same node in the slot at two ticks: the owner has not come back for a tick.
      // (A recycled node that is a new slot job at the same address is rescued a tick
      // early: harmless.)
      guard bits != 0, bits == worker.runNextSeen else { continue }
      countSharedWrite(.rescue)  // The exchange on the owner's slot.
      guard let node = evictRunNext(of: worker) else { continue }
      injection[node.pointee.lane].push(node)
      countSharedWrite(.rescue, 3)
      notifyWork()
    }
  }

  /// The supervisor's tick: a worker that started no job during a whole tick while its local
  /// queue holds jobs is stuck in one (blocked in the kernel, or running long); its queued
  /// jobs move to the injection queues, where any worker finds them, and a worker is woken
  /// (if none is parked, the growth check that follows sees the queued work). Supervisor
  /// thread.
  func rescueStrandedLocalQueues(among workers: [Worker]) {
    for worker in workers where worker.localCount > 0 {
      let progress = worker.progress.load(ordering: .relaxed)
      defer { worker.progressSeenBySupervisor = progress }
      guard progress == worker.progressSeenBySupervisor, worker.hasLocalWork else { continue }
      var moved = 0
      for lane in 0..<laneCount {
        moved += worker.local[lane].evacuate { node in
          injection[lane].push(node)
          countSharedWrite(.rescue, 3)
        }
      }
      if moved > 0 { notifyWork() }
    }
  }
}
