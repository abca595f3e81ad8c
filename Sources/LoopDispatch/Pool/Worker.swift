import Glibc
import MainLoop
import Synchronization

/// One pool thread. Runs jobs, spins briefly when out of work, then parks on its own word.
final class Worker: @unchecked Sendable {
  // @unchecked Sendable: `parkWord`, `tid` and `busy` are atomic; `spinBudget` is only
  // touched by the worker's own thread.

  /// The pool lives for the whole process (a static singleton), so no reference counting.
  unowned(unsafe) let pool: WorkerPool
  let id: Int
  let isExtra: Bool
  /// 1 while parked (or about to park), 0 once woken. Written to 1 by the worker under the
  /// pool lock as it joins the idle stack; written to 0 by the waker that removed it from the
  /// idle stack (under the lock), after the lock is released.
  let parkWord = FutexWord(0)
  /// Atomic. The worker's kernel thread id (for the supervisor's blocked check).
  let tid = Atomic<Int32>(0)
  /// Atomic. True while the worker runs a job (not searching, not parked).
  let busy = Atomic<Bool>(false)
  /// Overcommit workers only: true while counted in the pool's overcommit `coming`
  /// (`Overcommit.swift`, rule 3). Protected by the pool's lock.
  var isComing = false
  /// Iterations of the next spin (adaptive; see `spinForWork`). Only touched by the worker.
  private var spinBudget = WorkerPool.spinFloor

  // The run-next slot (`WorkerPool+RunNext.swift`). The three stored properties are
  // protected by the pool's lock; `hasRunNext` mirrors `runNext != nil` for lock-free checks
  // (a hint: written under the lock, read relaxed, the truth is under the lock).
  /// A job made runnable by this worker's current job, to run as soon as that job returns.
  var runNext: SlotJob?
  /// Slot jobs this worker ran in a row (reset when it takes a job from a lane).
  var runNextStreak = 0
  /// Set when the supervisor has seen the slot filled at a tick; a slot still filled and
  /// seen at the next tick is moved to its lane (the owner is stuck in its job).
  var runNextSeen = false
  /// Atomic. Whether `runNext` is filled (see above).
  let hasRunNext = Atomic<Bool>(false)

  // The batch (`WorkerPool+Batch.swift`).
  /// Jobs this worker moved out of a long lane in one go, with their lane. Protected by its
  /// own lock (taken after the pool's lock when both are held); stealable.
  let batch = LockedValue(WorkerBatch())
  /// Atomic. How many jobs `batch` holds (a hint, written under its lock).
  let batchCount = Atomic<Int>(0)
  /// Atomic. Jobs this worker started (written by the worker only; the supervisor reads it
  /// to tell a worker stuck in one job).
  let progress = Atomic<UInt64>(0)
  /// `progress` when the supervisor last looked. Only touched by the supervisor.
  var progressSeenBySupervisor: UInt64 = 0
  /// Jobs finished per lane not yet added to the lanes' figures (done at the worker's next
  /// pool-lock acquisition). Only touched by the worker.
  var uncountedCompletions = [UInt64](repeating: 0, count: Priority.allCases.count)

  /// The worker whose thread is calling, or nil off the pool.
  static var current: Worker? {
    // Safe: the slot is set by `main()` to its own worker for as long as the thread runs
    // it, and the thread's closure keeps that worker alive meanwhile.
    guard let raw = ThreadSlots.worker() else { return nil }
    return Unmanaged<Worker>.fromOpaque(raw).takeUnretainedValue()
  }

  init(pool: WorkerPool, id: Int, isExtra: Bool) {
    self.pool = pool
    self.id = id
    self.isExtra = isExtra
  }

  func main() {
    ThreadName.installForWorker(ownName: "ld.worker.\(id)")
    defer { ThreadName.removeForWorker() }
    tid.store(Syscall.currentThreadID, ordering: .relaxed)
    ThreadSlots.setWorker(Unmanaged.passUnretained(self).toOpaque())
    defer { ThreadSlots.setWorker(nil) }
    // Registered with the supervisor by `WorkerPool.spawnWorker`, before this thread ran.
    defer { pool.supervisor.unregister(self) }
    while true {
      if let (job, priority) = pool.takeBatched(for: self) ?? pool.takeJob(for: self)
        ?? pool.steal(for: self)
      {
        run(job, from: Queue.global(priority))
        uncountedCompletions[priority.rawValue] &+= 1
        continue
      }
      if spinForWork() { continue }
      if !park() { return }  // Retired.
    }
  }

  /// Runs `job` with a frame for its global queue, so `Queue.current` names it.
  @inline(__always)
  private func run(_ job: PoolJob, from root: Queue) {
    busy.store(true, ordering: .relaxed)
    pool.jobsStarted.wrappingAdd(1, ordering: .relaxed)
    // Single writer: a plain load and store.
    progress.store(progress.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    ThreadFrame.with(root, exclusive: false) { job.run() }
    busy.store(false, ordering: .relaxed)
  }

  /// Spins up to the pool's limit; returns true as soon as work appears. Returns false at
  /// once when enough other workers are already spinning.
  ///
  /// The spin adapts: a spin that found work doubles the next one (up to the pool's
  /// limit), a spin that found nothing halves it, down to `WorkerPool.spinFloor` (a few
  /// microseconds): long enough to catch the reply of a thread that is awake (the main loop
  /// turning a `MainActor.run` around takes about a microsecond), so a ping-pong that once
  /// missed does not stay in the slow state where every reply needs a futex wake-up. One
  /// spinner at a time, so idle spinning never takes more than one core, and only right
  /// after a job.
  private func spinForWork() -> Bool {
    let searchers = pool.searching.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
    defer { pool.searching.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
    if searchers > pool.maximumSearchers { return false }
    for _ in 0..<spinBudget {
      if pool.pendingJobs.load(ordering: .relaxed) > 0 {
        spinBudget = Swift.min(pool.spinLimit, spinBudget * 2)
        return true
      }
      spinLoopHint()
    }
    spinBudget = Swift.max(WorkerPool.spinFloor, spinBudget / 2)
    return false
  }

  /// Parks until woken, first recording the completion of its last job. Returns false if
  /// this extra worker retired instead.
  private func park() -> Bool {
    let mustPark = pool.state.withLock { state -> Bool in
      pool.countCompletions(of: self, &state)
      if runNext != nil { return false }
      // Jobs in the lanes or in other workers' batches (which it can steal): do not park.
      if pool.pendingJobs.load(ordering: .relaxed) > 0 { return false }
      parkWord.atomic.pointee.store(1, ordering: .relaxed)
      state.idle.append(self)
      return true
    }
    if !mustPark { return true }
    // Only now, once it will really sleep: an idle worker does not show the last queue it
    // drained. (A waker may already be unparking it; the rename is harmless then.)
    ThreadName.showOwnName()
    let timeout = isExtra ? UInt64(pool.idleRetirement.saturatingNanoseconds) : nil
    while parkWord.atomic.pointee.load(ordering: .acquiring) == 1 {
      parkWord.wait(whileEqualTo: 1, timeoutNanoseconds: timeout)
      if isExtra && parkWord.atomic.pointee.load(ordering: .acquiring) == 1 {
        // Timed out (or spurious): retire if still idle. The freed slot goes to overcommit
        // jobs waiting for one (rule 5 of `Overcommit.swift`).
        let retired = pool.state.withLock { state -> WorkerPool.OvercommitCall? in
          guard let index = state.idle.firstIndex(where: { $0 === self }) else { return nil }
          state.idle.remove(at: index)
          state.threads -= 1
          return pool.callOvercommitWorker(&state)
        }
        if let retired {
          pool.perform(retired)
          return false
        }
      }
    }
    return true
  }

  /// Wakes the worker. Called by a submitter that removed it from the idle stack under the
  /// pool lock.
  func unpark() {
    // Releasing; pairs with the acquiring load in `park()`.
    parkWord.atomic.pointee.store(0, ordering: .releasing)
    parkWord.wake(1)
  }
}
