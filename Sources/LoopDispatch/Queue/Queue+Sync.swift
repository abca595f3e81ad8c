import MainLoop

extension Queue {
  /// Runs `work` on this queue and returns its value (or rethrows its error), on the calling
  /// thread.
  ///
  /// On an idle serial queue this is one CAS in and one atomic subtract out, with no
  /// allocation; from a thread that keeps `sync`ing a queue nobody else uses, no locked
  /// instruction at all once the lock is biased to it (`Queue+SyncBias.swift`). On a busy
  /// queue the caller waits for its turn in submission order. On a
  /// concurrent queue a plain `sync` runs beside other items, a barrier `sync` runs alone. On
  /// a global queue the work runs at once.
  ///
  /// `sync` onto a queue the calling thread is already running (directly, or through the
  /// target chain) would never return: it traps with
  /// `BUG IN CLIENT OF LOOPDISPATCH: sync onto queue "<label>" already owned by this thread`.
  @inlinable
  public func sync<T, E: Error>(
    flags: Flags = [], execute work: () throws(E) -> T
  ) throws(E) -> T {
    // The generic shell is inlined into the caller; the engine below is not generic, so it
    // is compiled once, fully optimised, inside this module.
    var result: Result<T, E>?
    _sync(barrier: flags.contains(.barrier)) {
      result = Result { () throws(E) -> T in try work() }
    }
    return try result!.get()
  }

  @usableFromInline
  func _sync(barrier: Bool, _ body: () -> Void) {
    switch kind {
    case .root:
      ThreadFrame.with(self, exclusive: false, body)
    case .serial:
      if targetIsRoot.load(ordering: .relaxed) {
        if tryBiasedSync(body) { return }
        if trySyncLock() {
          runSyncLocked(body)
          return
        }
      } else if trySyncLockChain() {
        withHolderCounters { counters in
          countSubmissionHolding(counters)
          withLockedChainFrames(body)
          countCompletionExclusive(counters)
        }
        unlockSyncChain()
        return
      }
      syncSlow(barrier: barrier, body)
    case .main:
      syncOnMainThread(body)
    case .concurrent:
      if concurrentTrySyncStart(barrier: barrier) {
        countSubmission()
        ThreadFrame.with(self, exclusive: barrier, body)
        concurrentFinished(barrier: barrier)
        return
      }
      syncSlow(barrier: barrier, body)
    }
  }

  /// `dispatch_sync_f`: runs `function(context)` on this queue, on the calling thread.
  ///
  /// The C entry's engine, so that `dispatch_sync_f` onto an idle serial queue is one call
  /// from the C module into this one, whose serial fast path calls `function` itself: no
  /// closure context, no `Result` shell (`sync` needs both for its generic value and error).
  /// `barrier`: `dispatch_barrier_sync_f` (on a serial queue every item runs alone anyway).
  package func syncFunction(
    context: UnsafeMutableRawPointer?, barrier: Bool = false,
    _ function: @convention(c) (UnsafeMutableRawPointer?) -> Void
  ) {
    guard kind == .serial && targetIsRoot.load(ordering: .relaxed) else {
      _sync(barrier: barrier) { function(context) }
      return
    }
    // `_sync`'s serial case for a queue whose target is global, written out so that the
    // fast paths call `function` themselves; a busy queue goes straight to the slow path
    // (through `_sync`, it tried both fast paths a second time).
    if tryBiasedSync({ function(context) }) { return }
    if trySyncLock() {
      runSyncLocked { function(context) }
      return
    }
    syncSlow(barrier: barrier) { function(context) }
  }

  /// Runs `body` on this serial queue, whose SYNC_LOCKED the caller took alone
  /// (`trySyncLock`: the target is a global queue), then releases it.
  ///
  /// The counters are the holder's (see `QueueCounters`): no locked instruction besides the
  /// lock's own CAS in and atomic subtract out (the `sync` that grants a bias keeps the lock
  /// and adds BIASED with a CAS instead: `releaseSyncLockKeepingStreak`).
  @inline(__always)
  func runSyncLocked(_ body: () -> Void) {
    withHolderCounters { counters in
      countSubmissionHolding(counters)
      ThreadFrame.with(self, exclusive: true, body)
      countCompletionExclusive(counters)
    }
    releaseSyncLockKeepingStreak()
  }

  /// Runs `body` with frames pushed for this queue and every queue linked after it by
  /// `syncChainNext`: the chain this thread locked (`trySyncLockChain`,
  /// `tryClaimChainEndingAtMain`), whatever `setTarget` does meanwhile.
  /// The ancestors' frames are pushed first, so this queue's frame is innermost.
  func withLockedChainFrames(_ body: () -> Void) {
    if let next = syncChainNext?.takeUnretainedValue() {
      next.withLockedChainFrames { ThreadFrame.with(self, exclusive: true, body) }
    } else {
      ThreadFrame.with(self, exclusive: true, body)
    }
  }

  /// Runs `body` with frames pushed for this queue and every serial queue up its target
  /// chain (held on this thread's behalf by the drainer that handed it a `sync` turn).
  /// The ancestors' frames are pushed first, so this queue's frame is innermost.
  func withChainFrames(_ body: () -> Void) {
    // A wide target (`Queue+Wide.swift`) gave its drain one shared slot, not the queue.
    if let next = target, next.kind == .serial && !next.isWide {
      next.withChainFrames { ThreadFrame.with(self, exclusive: true, body) }
    } else {
      ThreadFrame.with(self, exclusive: true, body)
    }
  }

  /// `sync` onto the main queue: the closure runs on the main thread, in its turn, while the
  /// caller waits. From the main thread itself this could never return: a client bug.
  private func syncOnMainThread(_ body: () -> Void) {
    if EventLoop.main.isInLoopThread {
      clientBug("sync onto the main queue from the main thread (deadlock)")
    }
    checkSyncDeadlock(barrier: false)
    withoutActuallyEscaping(body) { escapable in
      let call = MainThreadCall(escapable)
      serialEnqueue(.closure({ call.run() }, barrier: false))
      call.finished.wait()
    }
  }
}

/// A non-escaping closure lent to the main thread for the duration of a `sync`.
private final class MainThreadCall: @unchecked Sendable {
  // @unchecked Sendable: `body` is handed to exactly one thread (the main thread), which
  // drops it before signalling `finished`; the lender waits for that signal before its
  // borrow ends (`withoutActuallyEscaping` then checks nothing kept it).
  private var body: (() -> Void)?
  let finished = OneShotEvent()

  init(_ body: @escaping () -> Void) { self.body = body }

  func run() {
    do {
      let call = body.take()!
      call()
    }
    finished.signal()
  }
}
