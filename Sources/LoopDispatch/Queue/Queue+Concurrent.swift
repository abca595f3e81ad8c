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
  var pending = RingBuffer<QueueWork>(capacity: 16)
  var running = 0
  var barrierRunning = false
  var suspendCount = 0
  var inactive: Bool

  init(inactive: Bool) { self.inactive = inactive }

  func canStart(barrier: Bool, width: Int) -> Bool {
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
  mutating func takeStartable(width: Int) -> [QueueWork] {
    var started: [QueueWork] = []
    while let first = pending.first, canStart(barrier: first.isBarrier, width: width) {
      _ = pending.popFirst()
      markStarted(barrier: first.isBarrier)
      started.append(first)
    }
    return started
  }
}

extension Queue {
  func concurrentEnqueue(_ work: QueueWork) {
    let startNow = concurrentState!.withLock { state -> Bool in
      if state.pending.isEmpty && state.canStart(barrier: work.isBarrier, width: width) {
        state.markStarted(barrier: work.isBarrier)
        return true
      }
      state.pending.append(work)
      return false
    }
    if startNow { forward(work) }
  }

  /// Sends one started item to the target, wrapped so that its completion is recorded.
  private func forward(_ work: QueueWork) {
    if case .syncWaiter(let waiter, _) = work, waiter.callerReleasesSlot {
      waiter.turn.signal()  // The caller runs now and calls `concurrentFinished` itself.
      return
    }
    let barrier = work.isBarrier
    let wrapped: @Sendable () -> Void = { [self] in
      ThreadFrame.with(self, exclusive: barrier) { perform(work) }
      concurrentFinished(barrier: barrier)
    }
    target!.submitForChild(wrapped)
  }

  /// Records a finished item and starts whatever may start now.
  func concurrentFinished(barrier: Bool) {
    let started = concurrentState!.withLock { state -> [QueueWork] in
      state.markFinished(barrier: barrier)
      return state.pending.isEmpty ? [] : state.takeStartable(width: width)
    }
    for work in started { forward(work) }
  }

  /// Runs a child's item on this queue: for root queues, straight on the pool.
  func submitForChild(_ body: @escaping @Sendable () -> Void) {
    switch kind {
    case .root(let priority): WorkerPool.shared.submit(.closure(body), priority: priority)
    case .serial, .main: serialEnqueue(.closure(body, barrier: false))
    case .concurrent: concurrentEnqueue(.closure(body, barrier: false))
    }
  }

  /// The uncontended `sync` of a concurrent queue targeting a global queue: takes a slot (or
  /// the whole queue, for a barrier) under the lock and returns true, or returns false.
  func concurrentTrySyncStart(barrier: Bool) -> Bool {
    guard targetIsRoot.load(ordering: .relaxed) else { return false }
    return concurrentState!.withLock { state in
      guard state.pending.isEmpty, state.canStart(barrier: barrier, width: width) else {
        return false
      }
      state.markStarted(barrier: barrier)
      return true
    }
  }

  func concurrentSuspend() {
    concurrentState!.withLock { $0.suspendCount += 1 }
  }

  func concurrentResume() {
    let started = concurrentState!.withLock { state -> [QueueWork]? in
      if state.suspendCount == 0 {
        if !state.inactive { return nil }
        state.inactive = false
      } else {
        state.suspendCount -= 1
      }
      return state.takeStartable(width: width)
    }
    guard let started else {
      clientBug("resume() on queue \"\(label)\" that is not suspended (over-resume)")
    }
    for work in started { forward(work) }
  }

  func concurrentActivate() {
    let started = concurrentState!.withLock { state -> [QueueWork] in
      guard state.inactive else { return [] }
      state.inactive = false
      return state.takeStartable(width: width)
    }
    for work in started { forward(work) }
  }
}
