/// What a queue holds: a closure, a child queue's drain request, or a thread waiting in
/// `sync` for its turn.
enum QueueWork: @unchecked Sendable {
  // @unchecked Sendable: every payload is Sendable (a `@Sendable` closure, a `Queue`, a
  // `SyncWaiter`); the enum only bundles them.
  case closure(@Sendable () -> Void, barrier: Bool)
  /// A C function and its context (`dispatch_async_f`): no closure to allocate.
  case function(CFunctionCall, barrier: Bool)
  case drain(Queue)
  case syncWaiter(SyncWaiter, barrier: Bool)

  var isBarrier: Bool {
    switch self {
    case .closure(_, let barrier), .function(_, let barrier), .syncWaiter(_, let barrier):
      return barrier
    case .drain: return false
    }
  }
}

/// A thread blocked in `sync` on a busy queue. When the drainer reaches the waiter it gives
/// the caller its turn and waits until the caller's closure has run on the caller's thread;
/// the drainer thread keeps holding the queue (and its target chain) meanwhile.
final class SyncWaiter: Sendable {
  let turn = OneShotEvent()
  let done = OneShotEvent()
  /// True when the caller itself releases the concurrent queue's slot after its closure
  /// (the queue then only signals `turn`, tying up no worker).
  let callerReleasesSlot: Bool

  init(callerReleasesSlot: Bool) {
    self.callerReleasesSlot = callerReleasesSlot
  }

  /// Runs on the drainer's thread, in the waiter's place in the queue.
  func handOff() {
    turn.signal()
    done.wait()
  }
}
