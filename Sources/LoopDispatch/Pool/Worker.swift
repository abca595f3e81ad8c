import Glibc
import MainLoop
import Synchronization

/// One pool thread. Runs jobs, spins briefly when out of work, then parks on its own word.
///
/// A plain worker object lives for the process: when its thread retires, the object waits
/// in `WorkerPool.State.retired` for the next start at its table index, so thieves and
/// wakers that hold it never see it freed.
final class Worker: @unchecked Sendable {
  // @unchecked Sendable: the atomics are atomic; `id` and `isExtra` are written only under
  // the pool's lock before the worker's thread starts; `runNextStreak`, `spinBudget` and
  // `runNextSeen` belong to one thread each (the worker, the worker, the supervisor);
  // `isComing` is protected by the pool's lock.
  //
  // Cache lines. A Swift class lays its stored properties out in declaration order, so the
  // fields come in two groups with 128 bytes of padding between them and after the second:
  // no 128-byte block (two 64-byte lines, which x86's adjacent-line prefetcher moves as a
  // pair) holds fields of both groups, whatever the object's 16-byte-aligned address.
  // 1. Read by other threads, written rarely: what thieves, spinners and the park re-check
  //    read (`local`, `localCount`, `index`), what wakers touch (`parkWord`, whose word has
  //    a line of its own), and the supervisor's own per-tick fields.
  // 2. Written by the owner per job (`busy`, `progress`, `runNext`, `takes`, `runningLane`
  //    and the loop's own state). Other threads read some of them once per supervisor tick.
  // `PoolLayoutTests` checks the separation on a live worker.

  // MARK: Group 1: read by other threads

  /// The pool lives for the whole process (a static singleton), so no reference counting.
  unowned(unsafe) let pool: WorkerPool
  /// For the thread's name (`ld.worker.<id>`): unique per start.
  private(set) var id: Int
  /// Position in the pool's worker table and idle set (plain workers; 0 for overcommit).
  let index: Int
  private(set) var isExtra: Bool
  /// 1 while parked (or about to park), 0 once woken. Written to 1 by the worker before it
  /// joins the idle set; written to 0 by the waker that removed it from the set. The word
  /// is on a 128-byte block of its own (`FutexWord(ownBlock:)`).
  let parkWord = FutexWord(0, ownBlock: true)
  /// Atomic. The worker's kernel thread id (for the supervisor's blocked check). Written
  /// once per thread start.
  let tid = Atomic<Int32>(0)
  /// Overcommit workers only: true while counted in the pool's overcommit `coming`
  /// (`Overcommit.swift`, rule 3). Protected by the pool's lock.
  var isComing = false
  /// The worker's local queues, one per lane (plain workers; none for overcommit ones).
  /// Allocated once and never freed: worker objects live for the process. Each lane is a
  /// 128-byte block of its own (`LocalQueue.allocateLanes`).
  let local: UnsafeMutablePointer<LocalQueue>
  /// How many `local` holds: the lane count, or 0 on an overcommit worker.
  let localCount: Int
  /// Its global-queue figures (owner-written per job into the object's own 128-byte-aligned
  /// words; summed by `WorkerPool.plainLaneFigures`). The reference itself never changes.
  let figures = WorkerFigures()
  /// The slot's contents the supervisor saw at its last tick. Supervisor only (per tick).
  var runNextSeen: UInt = 0
  /// `progress` when the supervisor last looked. Only touched by the supervisor (per tick).
  var progressSeenBySupervisor: UInt64 = 0

  /// Keeps group 2 off every 128-byte block of group 1 (see the class's comment). A `var`
  /// only so that `PoolLayoutTests` can take its address; never written.
  private var ownerPadding = Worker.blockPadding

  // MARK: Group 2: written by the owner per job

  /// Atomic. True while the worker runs a job (not searching, not parked).
  let busy = Atomic<Bool>(false)
  /// Atomic. Jobs this worker started (written by the worker only; the supervisor reads it
  /// to tell a worker stuck in one job, and sums it for the pool's progress).
  let progress = Atomic<UInt64>(0)
  // The run-next slot (`WorkerPool+RunNext.swift`).
  /// Atomic. A job made runnable by this worker's current job (a node pointer, 0: none).
  /// Filled by the owner only; emptied by an exchange, by the owner or by a rescue. Read by
  /// the supervisor's sleep check (`WorkerPool.hasWaitingWork`).
  let runNext = Atomic<UInt>(0)
  /// Slot jobs this worker ran in a row (reset when it takes a job from a queue). Owner only.
  var runNextStreak = 0
  /// Jobs taken (wrapping), for the periodic injection check of `takeJob`. Owner only.
  var takes: UInt32 = 0
  /// The lane of the job the worker is running (0, the highest, between jobs: any lane may
  /// go to its own queues then). Read by `WorkerPool.enqueue` on the worker's own thread
  /// only. Owner only.
  var runningLane = 0
  /// The take or steal that gave the worker its job ran `notifyWork` itself (jobs were left
  /// behind), after the worker left its search or park: that discharges the wake it may owe,
  /// and `passOnWake` is skipped (see `main`). Owner only.
  var notifiedInTake = false
  /// Iterations of the next spin (adaptive; see `spinForWork`). Only touched by the worker.
  private var spinBudget = WorkerPool.spinFloor
  /// Loop turns in a row that found queued work but took none (see `main`). Owner only.
  private var fruitlessTurns = 0
  /// The group whose `leave`s this worker owes for the `deferredLeaves` grouped jobs it
  /// ran last, and how many (see `run`). Owner only.
  private var deferredGroup: GroupReference?
  private var deferredLeaves: UInt32 = 0
  /// A spin or a park said work was queued, and the turn after it took none: what is
  /// counted cannot be taken yet (a producer preempted between counting and linking its job,
  /// a share holder or thief mid-move). Cleared by the next job taken. Owner only.
  private var sawUntakeable = false

  /// Keeps whatever the allocator puts after this object off group 2's blocks.
  private var tailPadding = Worker.blockPadding

  /// 128 bytes of nothing (see the class's comment).
  typealias BlockPadding = (
    UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
    UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64
  )
  static let blockPadding: BlockPadding = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

  /// The worker whose thread is calling, or nil off the pool (and on overcommit threads).
  static var current: Worker? {
    // Safe: the slot is set by `main()` to its own worker for as long as the thread runs
    // it, and worker objects live for the process.
    guard let raw = ThreadSlots.worker() else { return nil }
    return Unmanaged<Worker>.fromOpaque(raw).takeUnretainedValue()
  }

  /// A plain worker at table index `index`.
  init(pool: WorkerPool, id: Int, index: Int, isExtra: Bool) {
    self.pool = pool
    self.id = id
    self.index = index
    self.isExtra = isExtra
    localCount = Priority.allCases.count
    local = LocalQueue.allocateLanes(localCount)
  }

  /// Whether any of its local queues holds a job (any thread; a snapshot).
  @inline(__always)
  var hasLocalWork: Bool {
    for lane in 0..<localCount where !local[lane].isEmpty { return true }
    return false
  }

  /// An overcommit worker (`Overcommit.swift`): no local queues, no table index.
  init(pool: WorkerPool, overcommitID id: Int) {
    self.pool = pool
    self.id = id
    self.index = 0
    self.isExtra = true
    localCount = 0
    local = LocalQueue.allocateLanes(0)  // Never initialised or read: `localCount` is 0.
  }

  deinit {
    // Only overcommit workers end (plain ones live in the pool's table for the process), and
    // the objects tests make.
    for lane in 0..<localCount { local[lane].deallocateRing() }
    local.deinitialize(count: localCount)
    local.deallocate()
  }

  /// Readies a retired worker object for a new thread. Pool lock held; its old thread has
  /// left the idle set and runs no more pool code that reads these.
  func prepareForRestart(id: Int, isExtra: Bool) {
    self.id = id
    self.isExtra = isExtra
    tid.store(0, ordering: .relaxed)
    busy.store(false, ordering: .relaxed)
    parkWord.atomic.pointee.store(0, ordering: .relaxed)
  }

  func main() {
    ThreadName.installForWorker(ownName: "ld.worker.\(id)")
    defer { ThreadName.removeForWorker() }
    tid.store(Syscall.currentThreadID, ordering: .relaxed)
    countPoolEvent(.workerStart)
    ThreadSlots.setWorker(Unmanaged.passUnretained(self).toOpaque())
    defer { ThreadSlots.setWorker(nil) }
    // Registered with the supervisor by `WorkerPool.spawnWorker`, before this thread ran;
    // unregistered by `retire`.
    // One strong reference for the loop: uses of the unowned(unsafe) property inside it
    // would each retain and release the pool.
    let pool = self.pool
    // True from leaving a spin that found work, or a park, until the next job taken: this
    // worker may hold a wake-up that was meant for more work than it takes (the last
    // searcher's and the consumed wake's rule, `WorkerPool+Parking.swift`), and passes it on
    // once it has its job.
    var mayOweWake = false
    while true {
      notifiedInTake = false
      if let node = pool.takeJob(for: self) ?? pool.steal(for: self) {
        fruitlessTurns = 0
        sawUntakeable = false
        if mayOweWake {
          mayOweWake = false
          // A `notifyWork` made by the take itself, after the search or park ended, is the
          // one this would make (rules 3 and 4 ask for one, whoever it reaches).
          if !notifiedInTake { pool.passOnWake() }
        }
        run(node)
        continue
      }
      // Nothing to run: what the worker does next may wait, so it owes no group a leave.
      // A leave that ended a generation may have submitted a notification into this
      // worker's run-next slot (a serial queue's drain), which a spin does not look at: take
      // it before spinning. (Going round after every flush instead cost `group_main` 15 ns
      // an item: the extra turn's steal attempt.)
      if flushDeferredLeaves() && runNext.load(ordering: .relaxed) != 0 { continue }
      // Work that is counted but cannot be taken yet (a producer preempted between counting
      // and linking its job, a thief preempted mid-steal) makes the searches below return at
      // once: after a few such turns, give the core to the thread that holds it up.
      fruitlessTurns += 1
      if fruitlessTurns >= 16 {
        sched_yield()
        fruitlessTurns = 0
      }
      // The last spin or park said work was queued, this turn took none, and work is still
      // counted. Spinning again would end at once and go round: with every idle worker
      // doing that, idle spinning takes every core, the producer's among them. Park instead,
      // where the re-check waits (`park`). (Work that another worker took first is not
      // counted any more: then the worker spins as usual, ready for the next hand-off. A
      // worker holding a slot job that had to wait for a higher lane does not park at all,
      // and still goes round with only the `sched_yield` above, as before.)
      if mayOweWake && !sawUntakeable && pool.hasQueuedWork() { sawUntakeable = true }
      if !sawUntakeable && spinForWork() {
        mayOweWake = true
        continue
      }
      if !park() { return }  // Retired.
      mayOweWake = true
    }
  }

  /// Runs the job in `node` with a frame for its global queue, so `Queue.current` names it,
  /// and recycles the node.
  @inline(__always)
  private func run(_ node: JobNodePointer) {
    let (job, lane, enqueuedAt) = node.takeJob()
    NodeCache.give(node)
    // Leaves owed to another group are paid before a job that is not that group's runs.
    let group = job.group
    if deferredLeaves != 0 && group?.group.toOpaque() != deferredGroup?.group.toOpaque() {
      flushDeferredLeaves()
    }
    busy.store(true, ordering: .relaxed)
    // Single writer: a plain load and store.
    progress.store(progress.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    figures.recordStart(lane: lane, enqueuedAt: enqueuedAt)
    runningLane = lane
    pool.rootQueues[lane]._withUnsafeGuaranteedRef { root in
      ThreadFrame.with(root, exclusive: false) {
        if group != nil { job.runLeavingGroupToCaller() } else { job.run() }
      }
    }
    if let group {
      deferredGroup = group
      deferredLeaves &+= 1
    }
    runningLane = 0
    figures.recordCompletion(lane: lane)
    busy.store(false, ordering: .relaxed)
  }

  /// Pays the `leave`s owed for the grouped jobs run last, in one atomic add.
  ///
  /// Why deferred: the submitter enters the group for every job and each finishing worker
  /// left it, so the group's word changed hands twice per job (perf of `group_main`: half
  /// of the submitting thread's samples in `async(group:)` on the transfer of that line).
  /// A worker that runs jobs of one group back to back now leaves once per run of them.
  /// Why it is not seen: leaves are owed only while the worker runs another job of the
  /// same group (`run` pays them first before any other job, `main` before it looks for
  /// more work, spins or parks), and that job has entered and not left, so the count is
  /// not zero whether the owed leaves are paid or not: no `wait` or `notify` can tell.
  /// (They are also owed while the worker looks for its next job, `takeJob` and `steal`:
  /// a `wait` that looks then sees what it would see while a worker is preempted between
  /// a job's end and its `leave`.) Returns whether any were owed.
  @inline(__always)
  @discardableResult
  private func flushDeferredLeaves() -> Bool {
    guard let group = deferredGroup else { return false }
    let count = deferredLeaves
    deferredGroup = nil
    deferredLeaves = 0
    group.leave(count: count)
    return true
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
  ///
  /// It also yields to a loaded machine (`SpinGovernor`): while other threads wait for a CPU
  /// (pressure, a spent quota) a spin is at most `WorkerPool.pressuredSpinLimit` checks, and
  /// a spin that finds itself preempted (a time jump between two clock readings) ends at once
  /// and makes the next spins short (a gap over 50 µs and over 8 times the pace of the
  /// spin's first 16 checks). Each check looks at the injection queues and one
  /// worker's local queues (`hasQueuedWork(step:)`), so its cost does not grow with the pool.
  private func spinForWork() -> Bool {
    // One strong reference for the spin (as in `main`): reading the unowned(unsafe)
    // property on every pass retained and released the pool each time (13% of a
    // task-spawning row's samples, perf).
    let pool = self.pool
    // Sequentially consistent: a submitter that loads `searching` after its push either sees
    // this spinner (and wakes nobody) or its job is seen by the checks below.
    let searchers = pool.searching.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
    defer { pool.searching.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
    countSharedWrite(.spin, 2)  // The increment above and the decrement it defers.
    countPoolEvent(.spin)
    if searchers > pool.maximumSearchers { return false }
    let governor = pool.spinGovernor
    let entry = Deadline.now.uptimeNanoseconds
    let checks =
      governor.isPressured(now: entry)
      ? Swift.min(spinBudget, WorkerPool.pressuredSpinLimit) : spinBudget
    // Read again: a sample of the files above is not part of the spin's pace.
    var lastReading = Deadline.now.uptimeNanoseconds
    var cursor = index
    // Nanoseconds the spin's first 16 checks took: its own pace (a sanitizer's build or a
    // test's hook makes every check slower, which is not a preemption).
    var pace: UInt64 = 0
    for check in 0..<checks {
      poolProbe(.spin)
      if pool.hasQueuedWork(step: &cursor) {
        spinBudget = Swift.min(pool.spinLimit, spinBudget * 2)
        return true
      }
      spinLoopHint()
      if check & 15 == 15 {
        let now = Deadline.now.uptimeNanoseconds
        let gap = now &- lastReading
        if pace == 0 {
          pace = Swift.max(1, gap)
        } else if gap > SpinGovernor.preemptionGapNanoseconds && gap > 8 &* pace
          && governor.isEnabled
        {
          // The kernel ran something else here: the spin is not paying.
          governor.notePreempted(now: now)
          spinBudget = WorkerPool.spinFloor
          return false
        }
        lastReading = now
      }
    }
    spinBudget = Swift.max(WorkerPool.spinFloor, spinBudget / 2)
    return false
  }

  /// Parks until woken (`WorkerPool+Parking.swift`). Returns false if this extra worker
  /// retired instead.
  private func park() -> Bool {
    // A slot job that could not go first (a higher lane looked busy) runs, not parks.
    if runNext.load(ordering: .relaxed) != 0 { return true }
    parkWord.atomic.pointee.store(1, ordering: .relaxed)
    pool.announceIdle(self)
    poolProbe(.park)
    // The Dekker re-check: work published before our announcement is seen here.
    if pool.hasQueuedWork() {
      if sawUntakeable {
        // What the re-check sees may be the job nobody could take a moment ago: going round
        // at once would make every idle worker spin on it. Wait in the idle set instead, for
        // a wake-up or at most `untakeableBackOffNanoseconds`: the producer's `notifyWork`
        // follows its link and finds a searcher or a parked worker's bit (this one's, or one
        // that is woken instead), so a job that becomes takeable does not wait for the
        // timeout.
        parkWord.wait(whileEqualTo: 1, timeoutNanoseconds: WorkerPool.untakeableBackOffNanoseconds)
      }
      _ = pool.withdrawIdle(self)
      return true
    }
    // Only now, once it will really sleep: an idle worker does not show the last queue it
    // drained. (A waker may already be unparking it; the rename is harmless then.)
    ThreadName.showOwnNameBeforeParking()
    let timeout = isExtra ? UInt64(pool.idleRetirement.saturatingNanoseconds) : nil
    while parkWord.atomic.pointee.load(ordering: .acquiring) == 1 {
      parkWord.wait(whileEqualTo: 1, timeoutNanoseconds: timeout)
      if isExtra && parkWord.atomic.pointee.load(ordering: .acquiring) == 1
        && pool.withdrawIdle(self)
      {
        // Timed out, still idle and now out of the set: nobody can wake it any more. Off the
        // pool first: once retired, the object may be handed to a new thread.
        ThreadSlots.setWorker(nil)
        pool.retire(self)
        return false
      }
    }
    // Woken (or a stale wake from an earlier round): make sure it is out of the set.
    _ = pool.withdrawIdle(self)
    return true
  }

  /// Wakes the worker. Called by a waker that removed it from the idle set.
  func unpark() {
    // Releasing; pairs with the acquiring load in `park()`.
    parkWord.atomic.pointee.store(0, ordering: .releasing)
    parkWord.wake(1)
  }
}

/// A plain worker's global-queue figures, per lane: written by the worker alone (a load and
/// a store, no read-modify-write), read by `WorkerPool.plainLaneFigures` (relaxed: figures).
final class WorkerFigures: @unchecked Sendable {
  // @unchecked Sendable: `words` is allocated in init and freed in deinit; every entry is
  // atomic.
  private static let lanes = Priority.allCases.count
  /// Per lane: submitted to the local queue, started, completed, maximum wait, recent wait.
  private let words: UnsafeMutablePointer<Atomic<UInt64>>

  init() {
    // 128-byte aligned and rounded up to whole 128-byte blocks: the owner's per-job writes
    // share no block with another allocation (see `Worker`'s comment on cache lines).
    // Safe: a fresh allocation, bound to the type it is initialised as.
    let bytes = (5 * Self.lanes * MemoryLayout<Atomic<UInt64>>.stride + 127) / 128 * 128
    words = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 128)
      .bindMemory(to: Atomic<UInt64>.self, capacity: 5 * Self.lanes)
    for index in 0..<5 * Self.lanes { (words + index).initialize(to: Atomic(0)) }
  }

  deinit {
    words.deinitialize(count: 5 * Self.lanes)
    words.deallocate()
  }

  @inline(__always)
  private func bump(_ index: Int) {
    words[index].store(words[index].load(ordering: .relaxed) &+ 1, ordering: .relaxed)
  }

  /// A job the owner put in its local queue or slot (owner only).
  @inline(__always)
  func countLocalSubmission(lane: Int) { bump(lane) }

  /// The owner starts a job submitted at `enqueuedAt`, 0 if its submission was not timed
  /// (`Ticks.sampledStamp`): then no clock is read (owner only).
  @inline(__always)
  func recordStart(lane: Int, enqueuedAt: UInt64) {
    bump(Self.lanes + lane)
    guard enqueuedAt != 0 else { return }
    let wait = Ticks.elapsed(from: enqueuedAt, to: Ticks.now())
    let maximum = words[3 * Self.lanes + lane].load(ordering: .relaxed)
    if wait > maximum { words[3 * Self.lanes + lane].store(wait, ordering: .relaxed) }
    let recent = words[4 * Self.lanes + lane].load(ordering: .relaxed)
    words[4 * Self.lanes + lane].store(recent - recent / 8 + wait / 8, ordering: .relaxed)
  }

  /// The owner finished a job (owner only).
  @inline(__always)
  func recordCompletion(lane: Int) { bump(2 * Self.lanes + lane) }

  /// Adds this worker's figures for `lane` to `stats` (any thread).
  func add(lane: Int, to stats: inout LaneStats) {
    stats.submitted &+= words[lane].load(ordering: .relaxed)
    stats.completed &+= words[2 * Self.lanes + lane].load(ordering: .relaxed)
    stats.maxWaitTicks = Swift.max(
      stats.maxWaitTicks, words[3 * Self.lanes + lane].load(ordering: .relaxed))
    stats.recentWaitTicks = Swift.max(
      stats.recentWaitTicks, words[4 * Self.lanes + lane].load(ordering: .relaxed))
  }
}

extension Worker {
  /// Where a field lies in the object: its offset from the object's start, and its size.
  struct FieldSpan {
    var name: String
    var offset: Int
    var size: Int
  }

  /// The offsets of the fields `PoolLayoutTests` checks, in declaration order: the
  /// addressable fields of group 1 (its `let`s are not addressable; they lie between these
  /// by declaration order, which the test checks on these), the two paddings, and every
  /// field of group 2. Call it on a worker whose thread does not run (the test makes one).
  func fieldSpans() -> (
    group1: [FieldSpan], ownerPadding: FieldSpan, group2: [FieldSpan],
    tailPadding: FieldSpan
  ) {
    let base = Int(bitPattern: Unmanaged.passUnretained(self).toOpaque())
    func span<T>(_ name: String, _ pointer: UnsafePointer<T>) -> FieldSpan {
      FieldSpan(name: name, offset: Int(bitPattern: pointer) - base, size: MemoryLayout<T>.size)
    }
    func atomic<T: ~Copyable>(_ name: String, _ value: borrowing T) -> FieldSpan {
      // Safe: `Atomic` is address-only and cannot be copied, so the borrow is the field
      // itself; the address is only compared, never dereferenced.
      withUnsafePointer(to: value) {
        FieldSpan(
          name: name, offset: Int(bitPattern: $0) - base, size: MemoryLayout<T>.size)
      }
    }
    let group1 = [
      withUnsafeMutablePointer(to: &id) { span("id", $0) },
      withUnsafeMutablePointer(to: &isExtra) { span("isExtra", $0) },
      atomic("tid", tid),
      withUnsafeMutablePointer(to: &isComing) { span("isComing", $0) },
      withUnsafeMutablePointer(to: &runNextSeen) { span("runNextSeen", $0) },
      withUnsafeMutablePointer(to: &progressSeenBySupervisor) {
        span("progressSeenBySupervisor", $0)
      },
    ]
    let owner = withUnsafeMutablePointer(to: &ownerPadding) { span("ownerPadding", $0) }
    let group2 = [
      atomic("busy", busy),
      atomic("progress", progress),
      atomic("runNext", runNext),
      withUnsafeMutablePointer(to: &runNextStreak) { span("runNextStreak", $0) },
      withUnsafeMutablePointer(to: &takes) { span("takes", $0) },
      withUnsafeMutablePointer(to: &runningLane) { span("runningLane", $0) },
      withUnsafeMutablePointer(to: &notifiedInTake) { span("notifiedInTake", $0) },
      withUnsafeMutablePointer(to: &spinBudget) { span("spinBudget", $0) },
      withUnsafeMutablePointer(to: &fruitlessTurns) { span("fruitlessTurns", $0) },
      withUnsafeMutablePointer(to: &sawUntakeable) { span("sawUntakeable", $0) },
    ]
    let tail = withUnsafeMutablePointer(to: &tailPadding) { span("tailPadding", $0) }
    return (group1, owner, group2, tail)
  }
}

extension WorkerFigures {
  /// The address of the figures' words (for `PoolLayoutTests`).
  var wordsAddress: UInt { UInt(bitPattern: words) }
}
