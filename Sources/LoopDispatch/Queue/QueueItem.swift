import Synchronization

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
  /// A Swift actor's job, run as this queue's serial executor (`onMain`: as the installed
  /// main executor, for `@MainActor` jobs on the main queue): no closure around it. Always a
  /// barrier, so an actor on a serial queue made wide (`Queue+Wide.swift`) still runs one job
  /// at a time.
  case actorJob(UnownedJob, onMain: Bool)

  var isBarrier: Bool {
    switch self {
    case .closure(_, let barrier), .function(_, let barrier), .syncWaiter(_, let barrier):
      return barrier
    case .drain: return false
    case .actorJob: return true
    }
  }
}

/// A thread blocked in `sync` on a busy queue. When the drainer reaches the waiter it gives
/// the caller its turn and waits until the caller's closure has run on the caller's thread;
/// the drainer thread keeps holding the queue (and its target chain) meanwhile.
///
/// Two allocations: the object, and its two one-shot words (`turn`, then `done`) in one
/// block (before, each was an event object holding a futex object holding its word: seven).
final class SyncWaiter: @unchecked Sendable {
  // @unchecked Sendable: `callerReleasesSlot` is immutable; `words` are atomic.
  /// True when the caller itself releases the concurrent queue's slot after its closure
  /// (the queue then only signals `turn`, tying up no worker).
  let callerReleasesSlot: Bool
  private let words: UnsafeMutablePointer<Atomic<UInt32>>

  init(callerReleasesSlot: Bool) {
    self.callerReleasesSlot = callerReleasesSlot
    words = .allocate(capacity: 2)
    words.initialize(to: Atomic(0))
    (words + 1).initialize(to: Atomic(0))
  }

  deinit {
    words.deinitialize(count: 2)
    words.deallocate()
  }

  /// Signalled when the caller may run. Safe: the words live as long as this object, which
  /// the caller and the queue hold while they use them.
  var turn: OneShotWord { OneShotWord(word: words) }
  /// Signalled by the caller when its closure has run (unused when it releases the slot).
  var done: OneShotWord { OneShotWord(word: words + 1) }

  /// Runs on the drainer's thread, in the waiter's place in the queue.
  func handOff() {
    turn.signal()
    done.wait()
  }
}
