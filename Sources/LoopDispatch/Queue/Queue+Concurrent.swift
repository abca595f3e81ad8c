@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// A custom concurrent queue's bookkeeping behind its lock (`Queue.concurrentState`); the
/// counts of items in flight live in the state word (`Queue.concurrentWord`, bit table in
/// `ConcurrentWord.swift`).
///
/// Walk-through:
/// 1. Submitting: an item starts at once, with one compare-and-swap on the word and no lock,
///    when nothing waits, the queue is neither suspended nor inactive, and the items in flight
///    leave room for it (a plain item: no barrier runs and fewer than `width` run; a barrier:
///    nothing runs). Otherwise the submitter takes the lock, checks again, and appends the
///    item to `pending`, setting PENDING (and BARRIER_HEAD if it is a barrier) in the same
///    compare-and-swap that saw no room, so no finish can slip between the check and the flag.
///    Behind a backlog the word is left alone: under the lock PENDING is set exactly when
///    `pending` is not empty, so an item appended behind others waits without a word change,
///    and a submitter that sees `Queue.concurrentBacklogHint` (PENDING's mirror on a line the
///    finishers do not write per item) goes straight to the lock. A submitter feeding a
///    backlog then touches neither the word nor its cache line, which every finish writes
///    (perf, rw_barrier: 43% of the submitting thread's enqueue samples were that line's
///    miss, and the lock path wrote the word once more with an unchanged value).
/// 2. Finishing: one compare-and-swap takes the item out of the counts. Only when that leaves
///    room for the oldest waiting item does the finisher take the lock, and then it starts the
///    longest startable prefix of `pending` (a run of plain items up to the width, or one
///    barrier alone). A reader that finishes ahead of a waiting barrier, with others still
///    running, touches no lock.
/// 3. Suspension and inactivity set STOPPED (under the lock): nothing starts without the lock
///    and the finishers leave `pending` alone; resuming or activating starts what may start.
/// 4. Lifetime: while any item has started and not finished (`inFlight > 0`) the queue keeps
///    itself alive with one retain, taken by the read-modify-write that takes `inFlight` from
///    zero (before its item is forwarded, so before it can finish) and dropped by the one that
///    returns it to zero (after that thread's last access to the queue). The items in flight,
///    in the pool's jobs, hold the queue unretained (`PoolJob.concurrentItem`). A finisher
///    that takes the lock holds a retain of its own across it.
/// 5. `sync` (plain or barrier) runs on the caller's thread. With a global target it takes
///    its slot as in step 1, or waits in `pending` as a `SyncWaiter` whose turn is handed to
///    it; with a custom concurrent target it does the same, then takes a plain slot there by
///    a `sync` of its own (`concurrentSyncThroughTarget`): no pool worker waits for it. With
///    a serial or main target, the thread draining the target holds it for the caller
///    (`SyncWaiter.handOff`).
struct ConcurrentState {
  var pending = RingBuffer<TimedWork>(capacity: 16)
  var suspendCount = 0
  var inactive: Bool
  /// Items that may run at once (``Queue/setWidth(_:)`` changes it); mirrored, for the
  /// lock-free paths, in `Queue.concurrentWidth` (written under the lock).
  var width: Int

  init(inactive: Bool, width: Int) {
    self.inactive = inactive
    self.width = width
  }

  /// Suspended or inactive: STOPPED in the state word.
  var stopped: Bool { inactive || suspendCount > 0 }

  /// The word's flag bits that describe this state (PENDING, STOPPED, BARRIER_HEAD).
  var flags: UInt64 {
    var flags: UInt64 = stopped ? ConcurrentWord.stopped : 0
    if let first = pending.first {
      flags |= ConcurrentWord.pending
      if first.work.isBarrier { flags |= ConcurrentWord.barrierHead }
    }
    return flags
  }
}

struct TimedWork {
  var work: QueueWork
  var enqueuedAt: UInt64
}

extension Queue {
  func concurrentEnqueue(_ work: QueueWork) {
    countSubmission()
    // One item in eight (by chance) is timed (`Ticks.sampledStamp`; 0: not timed).
    concurrentAccept(work, enqueuedAt: Ticks.sampledStamp())
  }

  /// Step 1 for an item already counted as submitted: `concurrentEnqueue`'s, and a wide
  /// serial queue's front moving an item to its back (`Queue+Wide.swift`).
  @inline(__always)
  func concurrentAccept(_ work: QueueWork, enqueuedAt: UInt64) {
    let barrier = work.isBarrier
    // Relaxed: a hint (see `concurrentBacklogHint`); the lock below decides.
    if !concurrentBacklogHint.load(ordering: .relaxed) && tryStartWithoutLock(barrier: barrier) {
      forward(work, enqueuedAt: enqueuedAt)
      return
    }
    let startNow = withConcurrentStateLock { state -> Bool in
      if !state.pending.isEmpty {
        // PENDING is set (under the lock it is set exactly while `pending` is not empty), so
        // this item cannot start, and appending leaves the head, hence the flags, unchanged:
        // no word to write.
        state.pending.append(TimedWork(work: work, enqueuedAt: enqueuedAt))
        return false
      }
      // Under the lock the flags are stable; only the counts move (finishers).
      let width = state.width
      var current = ConcurrentWord(concurrentWord.load(ordering: .relaxed))
      while true {
        let next: ConcurrentWord
        let starts = current.admits(barrier: barrier, width: width)
        if starts {
          next = current.starting(barrier: barrier)
        } else {
          // `pending` is empty here (see above): this item becomes the head.
          var flags = ConcurrentWord.pending
          if barrier { flags |= ConcurrentWord.barrierHead }
          next = ConcurrentWord(current.raw | flags)
        }
        countSubmitWordWrite()
        let (exchanged, seen) = concurrentWord.compareExchange(
          expected: current.raw, desired: next.raw, ordering: .acquiringAndReleasing)
        if exchanged {
          if starts {
            // Rule 4: before the item can run (and finish).
            if current.inFlight == 0 { _ = Unmanaged.passUnretained(self).retain() }
            return true
          }
          break
        }
        current = ConcurrentWord(seen)
      }
      state.pending.append(TimedWork(work: work, enqueuedAt: enqueuedAt))
      setBacklogHint(true)
      return false
    }
    if startNow { forward(work, enqueuedAt: enqueuedAt) }
  }

  /// Step 1's lock-free start: one more item in flight if the word admits it. Takes the
  /// queue's own retain when it leaves zero items in flight (rule 4).
  @inline(__always)
  private func tryStartWithoutLock(barrier: Bool) -> Bool {
    let width = concurrentWidth.load(ordering: .relaxed)
    var current = ConcurrentWord(concurrentWord.load(ordering: .relaxed))
    while current.admits(barrier: barrier, width: width) {
      // Acquiring: the item sees what the items finished before it wrote (a barrier sees
      // its readers' writes, a reader the barrier's). Releasing: orders the submission.
      countSubmitWordWrite()
      let (exchanged, seen) = concurrentWord.compareExchange(
        expected: current.raw, desired: current.starting(barrier: barrier).raw,
        ordering: .acquiringAndReleasing)
      if exchanged {
        if current.inFlight == 0 { _ = Unmanaged.passUnretained(self).retain() }
        return true
      }
      current = ConcurrentWord(seen)
    }
    return false
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
    ThreadName.show(self)
    recordStartShared(enqueuedAt: enqueuedAt)
    ThreadFrame.with(self, exclusive: barrier) { perform(work) }
    ThreadName.showEnclosingQueue()
    concurrentFinished(barrier: barrier)
  }

  /// Items started at most per hold of the lock by `startPending`.
  private static let startBatch = 32

  /// Records a finished item (step 2) and starts whatever its finish makes room for.
  func concurrentFinished(barrier: Bool) {
    // Releasing: a snapshot that loads `completed` (acquiring) also sees the item's
    // submission counted. Before the finish below, which may be the last access.
    withHolderCounters { $0.completed.wrappingAdd(1, ordering: .releasing) }
    let width = concurrentWidth.load(ordering: .relaxed)
    var current = ConcurrentWord(concurrentWord.load(ordering: .relaxed))
    while true {
      let next = current.finishing(barrier: barrier)
      if next.headMayStart(width: width) { break }
      // Releasing: the item's writes reach whoever starts after it; acquiring: the thread
      // that returns the count to zero releases the queue after everything before it.
      let (exchanged, seen) = concurrentWord.compareExchange(
        expected: current.raw, desired: next.raw, ordering: .acquiringAndReleasing)
      if exchanged {
        // Rule 4: nothing below touches the queue.
        if next.inFlight == 0 { Unmanaged.passUnretained(self).release() }
        return
      }
      current = ConcurrentWord(seen)
    }
    // The finish makes room for the head of `pending`: take the lock. The item still counts
    // as in flight, so the queue is alive for this retain, which covers the lock.
    let queue = Unmanaged.passUnretained(self).retain()
    startPendingCounting { _ in finishOne(barrier: barrier) }
    queue.release()
  }

  /// Under the lock: takes one item of this kind out of the counts (a read-modify-write the
  /// lock-free finishers may race with). Returns the change in items in flight as rule 4
  /// sees it: -1 if it returned the count to zero, else 0.
  private func finishOne(barrier: Bool) -> Int {
    var current = ConcurrentWord(concurrentWord.load(ordering: .relaxed))
    while true {
      let next = current.finishing(barrier: barrier)
      let (exchanged, seen) = concurrentWord.compareExchange(
        expected: current.raw, desired: next.raw, ordering: .acquiringAndReleasing)
      if exchanged { return next.inFlight == 0 ? -1 : 0 }
      current = ConcurrentWord(seen)
    }
  }

  /// Under the lock: moves the items that may start now, in order, into `buffer` (at most its
  /// capacity), counting each in the word, then sets the word's flags to match what is left.
  /// Takes the queue's own retain if a start leaves zero items in flight (rule 4: before
  /// any of them is forwarded). No allocation: `buffer` is the caller's stack.
  private func takeStartable(
    _ state: inout ConcurrentState, into buffer: UnsafeMutableBufferPointer<TimedWork>
  ) -> Int {
    var count = 0
    var current = ConcurrentWord(concurrentWord.load(ordering: .relaxed))
    while count < buffer.count, !state.stopped, let first = state.pending.first {
      let barrier = first.work.isBarrier
      guard current.hasRoom(barrier: barrier, width: state.width) else { break }
      let next = current.starting(barrier: barrier)
      let (exchanged, seen) = concurrentWord.compareExchange(
        expected: current.raw, desired: next.raw, ordering: .acquiringAndReleasing)
      if !exchanged {
        current = ConcurrentWord(seen)
        continue
      }
      if current.inFlight == 0 { _ = Unmanaged.passUnretained(self).retain() }
      current = next
      // Safe: slot `count` is uninitialised (the caller moves out what it filled).
      (buffer.baseAddress! + count).initialize(to: state.pending.popFirst()!)
      count += 1
    }
    publishFlags(state)
    return count
  }

  /// Under the lock: sets `concurrentBacklogHint` to `waiting` (PENDING's new value), writing
  /// its line only if it changes.
  @inline(__always)
  private func setBacklogHint(_ waiting: Bool) {
    if concurrentBacklogHint.load(ordering: .relaxed) != waiting {
      concurrentBacklogHint.store(waiting, ordering: .relaxed)
    }
  }

  /// Under the lock: sets PENDING, STOPPED and BARRIER_HEAD to match `state`, keeping the
  /// counts (which finishers may change meanwhile), and the backlog hint to match PENDING.
  private func publishFlags(_ state: ConcurrentState) {
    let flagMask = ConcurrentWord.pending | ConcurrentWord.stopped | ConcurrentWord.barrierHead
    let flags = state.flags
    setBacklogHint(!state.pending.isEmpty)
    var current = concurrentWord.load(ordering: .relaxed)
    while current & flagMask != flags {
      let (exchanged, seen) = concurrentWord.compareExchange(
        expected: current, desired: current & ~flagMask | flags,
        ordering: .acquiringAndReleasing)
      if exchanged { return }
      current = seen
    }
  }

  /// Runs `change` under the lock, then forwards what may start, `startBatch` items per
  /// hold of the lock (from a buffer on the stack: no allocation), until nothing may.
  /// `change` returns -1 if it returned the items in flight to zero (its thread then owes
  /// the queue's release, rule 4), else 0. The caller keeps the queue alive for the call.
  private func startPendingCounting(_ change: (inout ConcurrentState) -> Int) {
    var owesRelease = false
    withUnsafeTemporaryAllocation(of: TimedWork.self, capacity: Self.startBatch) { buffer in
      var first = true
      while true {
        let count = withConcurrentStateLock { state -> Int in
          if first && change(&state) < 0 { owesRelease = true }
          return takeStartable(&state, into: buffer)
        }
        first = false
        for index in 0..<count {
          // Safe: `takeStartable` initialised slots 0..<count; each is moved out once.
          let item = (buffer.baseAddress! + index).move()
          forward(item.work, enqueuedAt: item.enqueuedAt)
        }
        if count < Self.startBatch { break }
      }
    }
    // Rule 4: the last access to the queue by this call.
    if owesRelease { Unmanaged.passUnretained(self).release() }
  }

  /// `startPendingCounting` for a change that does not touch the counts.
  private func startPending(_ change: (inout ConcurrentState) -> Void) {
    startPendingCounting { state -> Int in
      change(&state)
      return 0
    }
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
  /// the whole queue, for a barrier) without the lock and returns true, or returns false.
  func concurrentTrySyncStart(barrier: Bool) -> Bool {
    guard targetIsRoot.load(ordering: .relaxed) else { return false }
    // Rule 4's retain, if any, is dropped by the caller's `concurrentFinished`.
    return tryStartWithoutLock(barrier: barrier)
  }

  /// `sync` onto this concurrent queue when its target is a custom concurrent queue: runs
  /// `body` on the calling thread, beside this queue's other plain items up to its width, as
  /// `dispatch_sync` does (libdispatch's `_dispatch_sync_recurse`).
  ///
  /// The caller takes one slot here (the whole queue, for a barrier): lock-free if the word
  /// admits it, else by waiting in `pending`, in submission order, for a turn handed to it
  /// directly (`SyncWaiter.callerReleasesSlot`). Then it takes a plain slot on the target by
  /// a `sync` of its own (which recurses up a chain of concurrent queues), runs `body` inside
  /// both, and gives the slots back, the target's first. Slots are taken child first, parent
  /// second, as an async item of this queue takes them (counted here, then forwarded), so the
  /// two paths cannot wait on each other in a cycle; a barrier of either queue still waits
  /// for, and excludes, the readers holding a slot in it.
  ///
  /// Before this path each such `sync` parked a pool worker in `SyncWaiter.handOff` for the
  /// whole of `body`: the readers running at once were capped by the plain workers alive
  /// (one per CPU, plus those the supervisor adds while all are blocked, at most 64), e.g.
  /// 12 of 128 in libdispatch's `dispatch_readsync`.
  func concurrentSyncThroughTarget(_ target: Queue, barrier: Bool, _ body: () -> Void) {
    if tryStartWithoutLock(barrier: barrier) {
      // Rule 4's retain, if any, is dropped by `concurrentFinished` below.
      countSubmission()
    } else {
      let waiter = SyncWaiter.reusable()
      concurrentEnqueue(.syncWaiter(waiter, barrier: barrier))
      // Acquiring; pairs with the releasing exchange in `OneShotEvent.signal` (`forward`),
      // made after the compare-and-swap that counted this caller's slot.
      waiter.turn.wait()
      waiter.putBack()
    }
    // An item of this queue is a plain item of its target, whatever its kind here.
    target._sync(barrier: false) { ThreadFrame.with(self, exclusive: barrier, body) }
    concurrentFinished(barrier: barrier)
  }

  /// Sets the width of this concurrent queue; see ``Queue/setWidth(_:)``.
  func concurrentSetWidth(_ newWidth: Int) {
    // The caller holds the queue: alive across the lock.
    startPending { state in
      state.width = newWidth
      concurrentWidth.store(newWidth, ordering: .relaxed)
      sanitizerWidth = UInt16(clamping: newWidth)
    }
  }

  func concurrentSuspend() {
    withConcurrentStateLock { state in
      state.suspendCount += 1
      publishFlags(state)
    }
  }

  func concurrentResume() {
    var overResumed = false
    startPending { state in
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

  /// A wide serial queue's back: sets the suspension count to `count()`, read under the
  /// lock (`Queue+Wide.swift`, step 6), then starts what may start.
  func concurrentReplaceSuspension(_ count: () -> Int) {
    startPending { state in state.suspendCount = count() }
  }

  func concurrentActivate() {
    startPending { state in state.inactive = false }
  }
}
