import MainLoop
import Synchronization

/// A custom concurrent queue's bookkeeping. Protected by the queue's `concurrentState` lock.
///
/// Walk-through:
/// 1. An item starts at once (forwarded to the target) when nothing is pending ahead of it
///    and it may start: a plain item while no barrier runs and fewer than `width` run; a
///    barrier when nothing runs. Otherwise it waits in `pending`, in submission order.
/// 2. When an item finishes, the lock is taken again and the longest startable prefix of
///    `pending` starts: a run of plain items up to the width, or one barrier alone.
/// 3. Suspension and inactivity stop step 1 and 2 from starting anything.
/// 4. Lifetime: while any item has started and not finished (`inFlight > 0`) the queue keeps
///    itself alive with one retain, taken by the start that leaves zero and dropped by the
///    finish that returns to it (after its last access to the queue) — so the items in
///    flight, in the pool's jobs, hold it unretained (`PoolJob.concurrentItem`).
struct ConcurrentState {
  var pending = RingBuffer<TimedWork>(capacity: 16)
  var running = 0
  var barrierRunning = false
  var suspendCount = 0
  var inactive: Bool
  /// Items that may run at once (``Queue/setWidth(_:)`` changes it).
  var width: Int

  init(inactive: Bool, width: Int) {
    self.inactive = inactive
    self.width = width
  }

  func canStart(barrier: Bool) -> Bool {
    if inactive || suspendCount > 0 || barrierRunning { return false }
    return barrier ? running == 0 : running < width
  }

  /// Items started and not finished (a running barrier counts one).
  var inFlight: Int { running + (barrierRunning ? 1 : 0) }

  mutating func markStarted(barrier: Bool) {
    if barrier { barrierRunning = true } else { running += 1 }
  }

  mutating func markFinished(barrier: Bool) {
    if barrier { barrierRunning = false } else { running -= 1 }
  }

  /// Moves the items that may start now, in order, into `buffer` (at most its capacity;
  /// marked started) and returns how many. No allocation: `buffer` is the caller's stack.
  mutating func takeStartable(into buffer: UnsafeMutableBufferPointer<TimedWork>) -> Int {
    var count = 0
    while count < buffer.count, let first = pending.first, canStart(barrier: first.work.isBarrier) {
      markStarted(barrier: first.work.isBarrier)
      // Safe: slot `count` is uninitialised (the caller moves out what it filled).
      (buffer.baseAddress! + count).initialize(to: pending.popFirst()!)
      count += 1
    }
    return count
  }
}

struct TimedWork {
  var work: QueueWork
  var enqueuedAt: UInt64
}

extension Queue {
  func concurrentEnqueue(_ work: QueueWork) {
    let enqueuedAt = Ticks.now()
    let (startNow, wasIdle) = withHolderCountersAndState { counters, state -> (Bool, Bool) in
      // Counted under the lock: a plain load and store, no read-modify-write.
      counters.submitted.store(
        counters.submitted.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
      if state.pending.isEmpty && state.canStart(barrier: work.isBarrier) {
        let wasIdle = state.inFlight == 0
        state.markStarted(barrier: work.isBarrier)
        return (true, wasIdle)
      }
      state.pending.append(TimedWork(work: work, enqueuedAt: enqueuedAt))
      return (false, false)
    }
    guard startNow else { return }
    // Rule 4: before the item can run (and finish).
    if wasIdle { _ = Unmanaged.passUnretained(self).retain() }
    forward(work, enqueuedAt: enqueuedAt)
  }

  /// Runs `body` under the concurrent state's lock with the queue's counters (created with
  /// the first item).
  @inline(__always)
  private func withHolderCountersAndState<T>(
    _ body: (QueueCounters, inout ConcurrentState) -> T
  ) -> T {
    var result: T?
    withHolderCounters { counters in
      result = concurrentState!.withLock { body(counters, &$0) }
    }
    return result!
  }

  /// Sends one started item to the target. On a global queue the item travels in the pool
  /// job itself (`PoolJob.concurrentItem`: no closure to allocate); on a custom target it is
  /// wrapped in a closure that records its start and completion.
  private func forward(_ work: QueueWork, enqueuedAt: UInt64) {
    if case .syncWaiter(let waiter, _) = work, waiter.callerReleasesSlot {
      recordStartShared(enqueuedAt: enqueuedAt)
      waiter.turn.signal()  // The caller runs now and calls `concurrentFinished` itself.
      return
    }
    // Borrowed: every target a queue ever had stays alive as long as the queue.
    unmanagedTarget!._withUnsafeGuaranteedRef { target in
      if case .root(let priority, let overcommit) = target.kind {
        // Unretained: the queue keeps itself alive while items are in flight (rule 4).
        let job = PoolJob.concurrentItem(QueueReference(self), work, enqueuedAt: enqueuedAt)
        if overcommit {
          WorkerPool.shared.submitOvercommit(job, priority: priority)
        } else {
          WorkerPool.shared.submit(job, priority: priority)
        }
        return
      }
      target.submitForChild { [self] in runConcurrentItem(work, enqueuedAt: enqueuedAt) }
    }
  }

  /// Runs one of this queue's started items on the calling thread, then records its end.
  func runConcurrentItem(_ work: QueueWork, enqueuedAt: UInt64) {
    let barrier = work.isBarrier
    ThreadName.show(label)
    recordStartShared(enqueuedAt: enqueuedAt)
    ThreadFrame.with(self, exclusive: barrier) { perform(work) }
    ThreadName.showEnclosingQueue()
    concurrentFinished(barrier: barrier)
  }

  /// Items started at most per hold of the lock by `startPending`.
  private static let startBatch = 32

  /// Records a finished item and starts whatever may start now.
  func concurrentFinished(barrier: Bool) {
    startPending { counters, state in
      // Under the lock: a plain load and store. Releasing: see `countCompletionExclusive`.
      counters.completed.store(
        counters.completed.load(ordering: .relaxed) &+ 1, ordering: .releasing)
      state.markFinished(barrier: barrier)
    }
  }

  /// Runs `change` under the lock, then forwards what may start, `startBatch` items per
  /// hold of the lock (from a buffer on the stack: no allocation), until nothing may.
  @inline(__always)
  ///
  /// Keeps rule 4, deciding under the lock, hold by hold: a hold that takes `inFlight` from
  /// above zero to zero (only the first can, with `change`) owes the queue's release, done
  /// last, after every access to the queue; a hold that takes it from zero to above zero
  /// (any, if other threads finished everything meanwhile) retains before it forwards.
  private func startPending(_ change: (QueueCounters, inout ConcurrentState) -> Void) {
    var owesRelease = false
    var holding = false
    withUnsafeTemporaryAllocation(of: TimedWork.self, capacity: Self.startBatch) { buffer in
      var first = true
      while true {
        let (count, before, after) = withHolderCountersAndState {
          counters, state -> (Int, Int, Int) in
          let before = state.inFlight
          if first { change(counters, &state) }
          let count = state.pending.isEmpty ? 0 : state.takeStartable(into: buffer)
          return (count, before, state.inFlight)
        }
        first = false
        if before == 0 && after > 0 {
          _ = Unmanaged.passUnretained(self).retain()
        } else if before > 0 && after == 0 {
          owesRelease = true
        }
        // Another hold follows: the items forwarded below may all finish meanwhile and drop
        // the queue's own retain, and the caller may hold the queue unretained (a pool job),
        // so keep it for the rest of this call. (Taken while items are in flight: alive.)
        if count == Self.startBatch && !holding {
          _ = Unmanaged.passUnretained(self).retain()
          holding = true
        }
        for index in 0..<count {
          // Safe: `takeStartable` initialised slots 0..<count; each is moved out once.
          let item = (buffer.baseAddress! + index).move()
          forward(item.work, enqueuedAt: item.enqueuedAt)
        }
        if count < Self.startBatch { break }
      }
    }
    // Rule 4: the last accesses to the queue (either release may free it).
    if owesRelease { Unmanaged.passUnretained(self).release() }
    if holding { Unmanaged.passUnretained(self).release() }
  }

  /// Runs a child's item on this queue: for root queues, straight on the pool.
  func submitForChild(_ body: @escaping @Sendable () -> Void) {
    switch kind {
    case .root(let priority, let overcommit):
      if overcommit {
        WorkerPool.shared.submitOvercommit(.childItem(body), priority: priority)
      } else {
        WorkerPool.shared.submit(.childItem(body), priority: priority)
      }
    case .serial, .main: serialEnqueue(.closure(body, barrier: false))
    case .concurrent: concurrentEnqueue(.closure(body, barrier: false))
    }
  }

  /// The uncontended `sync` of a concurrent queue targeting a global queue: takes a slot (or
  /// the whole queue, for a barrier) under the lock and returns true, or returns false.
  func concurrentTrySyncStart(barrier: Bool) -> Bool {
    guard targetIsRoot.load(ordering: .relaxed) else { return false }
    let (started, wasIdle) = concurrentState!.withLock { state -> (Bool, Bool) in
      guard state.pending.isEmpty, state.canStart(barrier: barrier) else {
        return (false, false)
      }
      let wasIdle = state.inFlight == 0
      state.markStarted(barrier: barrier)
      return (true, wasIdle)
    }
    // Rule 4 (the caller's `concurrentFinished` drops it).
    if wasIdle { _ = Unmanaged.passUnretained(self).retain() }
    return started
  }

  /// Sets the width of this concurrent queue; see ``Queue/setWidth(_:)``.
  func concurrentSetWidth(_ newWidth: Int) {
    startPending { _, state in
      state.width = newWidth
      sanitizerWidth = UInt16(clamping: newWidth)
    }
  }

  func concurrentSuspend() {
    concurrentState!.withLock { $0.suspendCount += 1 }
  }

  func concurrentResume() {
    var overResumed = false
    startPending { _, state in
      if state.suspendCount == 0 {
        if !state.inactive {
          overResumed = true
          return
        }
        state.inactive = false
      } else {
        state.suspendCount -= 1
      }
    }
    if overResumed {
      clientBug("resume() on queue \"\(label)\" that is not suspended (over-resume)")
    }
  }

  func concurrentActivate() {
    startPending { _, state in state.inactive = false }
  }
}
