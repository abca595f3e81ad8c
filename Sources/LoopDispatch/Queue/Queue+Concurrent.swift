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

  mutating func markStarted(barrier: Bool) {
    if barrier { barrierRunning = true } else { running += 1 }
  }

  mutating func markFinished(barrier: Bool) {
    if barrier { barrierRunning = false } else { running -= 1 }
  }

  /// Removes and returns the items that may start now, in order.
  mutating func takeStartable() -> [TimedWork] {
    var started: [TimedWork] = []
    while let first = pending.first, canStart(barrier: first.work.isBarrier) {
      _ = pending.popFirst()
      markStarted(barrier: first.work.isBarrier)
      started.append(first)
    }
    return started
  }
}

/// A concurrent queue's item with its submission time (`Ticks`), for the wait figures.
struct TimedWork {
  var work: QueueWork
  var enqueuedAt: UInt64
}

extension Queue {
  func concurrentEnqueue(_ work: QueueWork) {
    let item = TimedWork(work: work, enqueuedAt: Ticks.now())
    countSubmission()
    let startNow = concurrentState!.withLock { state -> Bool in
      if state.pending.isEmpty && state.canStart(barrier: work.isBarrier) {
        state.markStarted(barrier: work.isBarrier)
        return true
      }
      state.pending.append(item)
      return false
    }
    if startNow { forward(item) }
  }

  /// Sends one started item to the target, wrapped so that its start and completion are
  /// recorded.
  private func forward(_ item: TimedWork) {
    let work = item.work
    if case .syncWaiter(let waiter, _) = work, waiter.callerReleasesSlot {
      recordStartShared(enqueuedAt: item.enqueuedAt)
      waiter.turn.signal()  // The caller runs now and calls `concurrentFinished` itself.
      return
    }
    let barrier = work.isBarrier
    let enqueuedAt = item.enqueuedAt
    let wrapped: @Sendable () -> Void = { [self] in
      ThreadName.show(label)
      recordStartShared(enqueuedAt: enqueuedAt)
      ThreadFrame.with(self, exclusive: barrier) { perform(work) }
      ThreadName.showEnclosingQueue()
      concurrentFinished(barrier: barrier)
    }
    target!.submitForChild(wrapped)
  }

  /// Records a finished item and starts whatever may start now.
  func concurrentFinished(barrier: Bool) {
    countCompletionShared()
    let started = concurrentState!.withLock { state -> [TimedWork] in
      state.markFinished(barrier: barrier)
      return state.pending.isEmpty ? [] : state.takeStartable()
    }
    for work in started { forward(work) }
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
    return concurrentState!.withLock { state in
      guard state.pending.isEmpty, state.canStart(barrier: barrier) else {
        return false
      }
      state.markStarted(barrier: barrier)
      return true
    }
  }

  /// Sets the width of this concurrent queue; see ``Queue/setWidth(_:)``.
  func concurrentSetWidth(_ newWidth: Int) {
    let started = concurrentState!.withLock { state -> [TimedWork] in
      state.width = newWidth
      sanitizerWidth = UInt16(clamping: newWidth)
      return state.pending.isEmpty ? [] : state.takeStartable()
    }
    for work in started { forward(work) }
  }

  func concurrentSuspend() {
    concurrentState!.withLock { $0.suspendCount += 1 }
  }

  func concurrentResume() {
    let started = concurrentState!.withLock { state -> [TimedWork]? in
      if state.suspendCount == 0 {
        if !state.inactive { return nil }
        state.inactive = false
      } else {
        state.suspendCount -= 1
      }
      return state.takeStartable()
    }
    guard let started else {
      clientBug("resume() on queue \"\(label)\" that is not suspended (over-resume)")
    }
    for work in started { forward(work) }
  }

  func concurrentActivate() {
    let started = concurrentState!.withLock { state -> [TimedWork] in
      guard state.inactive else { return [] }
      state.inactive = false
      return state.takeStartable()
    }
    for work in started { forward(work) }
  }
}
