/// Batches: a worker takes several jobs from a long lane under one acquisition of the pool's
/// lock, and runs them without taking it again.
///
/// A burst of small jobs from one thread (1M closures onto a global queue, a group fan-out)
/// is limited by the pool's lock: the submitter and every worker take it once per job, and
/// on two cores a contended adaptive mutex ends in futex sleeps. `perf` put 25% of such a
/// run in `pthread_mutex_lock`. A worker that finds a lane longer than twice the number of
/// threads moves a share of it (at most `batchLimit`, at most the lane's length divided by
/// the threads) into its own batch, so its next jobs cost an uncontended lock of its own.
///
/// Rules:
/// 1. Batched jobs stay counted in `pendingJobs`, so a spinning or woken worker that finds
///    the lanes empty steals half of another worker's batch (`steal`): a burst's tail never
///    waits behind one busy worker while another is idle.
/// 2. Strict priority: the owner runs its batch only while no lane of higher priority holds
///    a job (`occupiedLanes`, a hint kept under the pool's lock), and its run-next slot goes
///    first (the slot is checked under the pool's lock in `takeJob`).
/// 3. No stranding: before the owner sleeps in a LoopDispatch wait it returns its batch to the
///    front of the lane (`flushBeforeBlocking`); the supervisor returns the batch of a worker
///    that started no job during a whole tick (`rescueStrandedBatches`).
/// 4. Wait figures are recorded when a job leaves the lane for a batch (so they can understate
///    the wait of a batched job by the run time of the jobs ahead of it in the batch).
/// Lock order: the pool's lock, then a batch's lock; a thief never holds two batch locks.
extension WorkerPool {
  /// Jobs moved into a batch at most.
  static let batchLimit = 8

  /// Appends to a lane, keeping `occupiedLanes` in step. Pool lock held.
  @inline(__always)
  func appendToLane(_ lane: Int, _ timed: TimedJob, _ state: inout State) {
    if state.lanes[lane].isEmpty { markLane(lane, occupied: true) }
    state.lanes[lane].append(timed)
  }

  /// Pops a lane's oldest job, keeping `occupiedLanes` in step. Pool lock held.
  @inline(__always)
  func popLane(_ lane: Int, _ state: inout State) -> TimedJob? {
    guard let timed = state.lanes[lane].popFirst() else { return nil }
    if state.lanes[lane].isEmpty { markLane(lane, occupied: false) }
    return timed
  }

  @inline(__always)
  private func markLane(_ lane: Int, occupied: Bool) {
    let bit = UInt8(1) << UInt8(lane)
    // Relaxed: a hint (rule 2); the lanes under the lock are the truth.
    if occupied {
      _ = occupiedLanes.bitwiseOr(bit, ordering: .relaxed)
    } else {
      _ = occupiedLanes.bitwiseAnd(~bit, ordering: .relaxed)
    }
  }

  /// Adds the worker's finished jobs to the lanes' figures. Pool lock held; owner only.
  @inline(__always)
  func countCompletions(of worker: Worker, _ state: inout State) {
    for lane in 0..<worker.uncountedCompletions.count where worker.uncountedCompletions[lane] > 0 {
      state.laneStats[lane].completed &+= worker.uncountedCompletions[lane]
      worker.uncountedCompletions[lane] = 0
    }
  }

  /// After the owner popped a job from `lane`: if the lane is still long, moves a share of it
  /// into the owner's batch. Pool lock held; owner only.
  /// Returns whether it filled the batch (the caller then makes sure the supervisor watches,
  /// after the lock: rule 3).
  @inline(__always)
  func refillBatch(of worker: Worker, from lane: Int, _ state: inout State, now: UInt64) -> Bool {
    let threads = Swift.max(1, state.threads)
    let waiting = state.lanes[lane].count
    guard waiting >= 2 * threads, worker.batchCount.load(ordering: .relaxed) == 0 else {
      return false
    }
    let share = Swift.min(Self.batchLimit, waiting / threads)
    worker.batch.withLock { batch in
      batch.lane = lane
      for _ in 0..<share {
        guard let timed = popLane(lane, &state) else { break }
        state.laneStats[lane].recordStart(enqueuedAt: timed.enqueuedAt, now: now)
        batch.jobs.append(timed)
      }
      worker.batchCount.store(batch.jobs.count, ordering: .relaxed)
    }
    return true
  }

  /// The owner's next batched job, unless its slot or a higher lane must go first (rule 2).
  /// Takes only the worker's own batch lock. Owner only.
  @inline(__always)
  func takeBatched(for worker: Worker) -> (PoolJob, Priority)? {
    guard worker.batchCount.load(ordering: .relaxed) > 0,
      !worker.hasRunNext.load(ordering: .relaxed)
    else { return nil }
    let taken: (PoolJob, Priority)? = worker.batch.withLock { batch in
      let higher = (UInt8(1) << UInt8(batch.lane)) &- 1
      guard occupiedLanes.load(ordering: .relaxed) & higher == 0,
        let timed = batch.jobs.popFirst()
      else { return nil }
      worker.batchCount.store(batch.jobs.count, ordering: .relaxed)
      return (timed.job, Priority(rawValue: batch.lane)!)
    }
    if taken != nil { pendingJobs.wrappingSubtract(1, ordering: .relaxed) }
    return taken
  }

  /// Rule 1: takes half (at least one) of the first other worker's batch that holds any; runs the first
  /// and keeps the rest in the thief's own batch. Called with no lock held, when the lanes
  /// and the thief's own batch and slot gave nothing.
  func steal(for thief: Worker) -> (PoolJob, Priority)? {
    // Only into an empty batch: a batch holds the jobs of one lane.
    guard pendingJobs.load(ordering: .relaxed) > 0, thief.batchCount.load(ordering: .relaxed) == 0
    else { return nil }
    for victim in supervisor.registeredWorkers()
    where victim !== thief && victim.batchCount.load(ordering: .relaxed) > 0 {
      let (stolen, lane): ([TimedJob], Int) = victim.batch.withLock { batch in
        var taken: [TimedJob] = []
        let half = (batch.jobs.count + 1) / 2
        for _ in 0..<half {
          if let timed = batch.jobs.popFirst() { taken.append(timed) }
        }
        victim.batchCount.store(batch.jobs.count, ordering: .relaxed)
        return (taken, batch.lane)
      }
      guard let first = stolen.first else { continue }
      pendingJobs.wrappingSubtract(1, ordering: .relaxed)
      if stolen.count > 1 {
        thief.batch.withLock { batch in
          batch.lane = lane
          for timed in stolen.dropFirst() { batch.jobs.append(timed) }
          thief.batchCount.store(batch.jobs.count, ordering: .relaxed)
        }
      }
      return (first.job, Priority(rawValue: lane)!)
    }
    return nil
  }

  /// Puts `worker`'s batch back at the front of its lane, in order. Pool lock held.
  func returnBatch(of worker: Worker, _ state: inout State) {
    guard worker.batchCount.load(ordering: .relaxed) > 0 else { return }
    worker.batch.withLock { batch in
      while let timed = batch.jobs.popLast() {
        if state.lanes[batch.lane].isEmpty { markLane(batch.lane, occupied: true) }
        state.lanes[batch.lane].prepend(timed)
      }
      worker.batchCount.store(0, ordering: .relaxed)
    }
  }

  /// Rule 3, the supervisor's tick: returns the batch of each worker that started no job
  /// since the last tick. Supervisor thread.
  func rescueStrandedBatches(among workers: [Worker]) {
    for worker in workers {
      let progress = worker.progress.load(ordering: .relaxed)
      defer { worker.progressSeenBySupervisor = progress }
      guard worker.batchCount.load(ordering: .relaxed) > 0,
        progress == worker.progressSeenBySupervisor
      else { continue }
      state.withLock { returnBatch(of: worker, &$0) }
    }
  }
}

/// A worker's batch: jobs of one lane, oldest first.
struct WorkerBatch {
  var jobs = RingBuffer<TimedJob>(capacity: WorkerPool.batchLimit)
  var lane = 0
}
