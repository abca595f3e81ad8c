import Glibc
import MainLoop
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
/// A waiter that releases its own slot is made once per thread and reused (`reusable`).
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

  /// A waiter that releases its slot itself, reused by the calling thread: the thread's
  /// spare one (taken out of its slot), or a new one. Give it back with `putBack` once its
  /// turn has come.
  ///
  /// Why reuse is safe for this kind only: its one word, `turn`, is written by one
  /// signaller, once, before the caller leaves `turn.wait()`; after that the signaller at
  /// most makes its `futex_wake` on the word, which a later wait on the same word takes as a
  /// spurious wake-up (`OneShotWord.wait` checks the value again). A hand-off waiter's `done`
  /// is still read by the drainer after the caller signals it, so that kind is never reused.
  /// A `sync` inside the closure takes the spare again: the outer waiter was put back at
  /// its turn, so it is free. (1.55 allocations per contended call in `sync_readers`, the
  /// object and its words, before.)
  static func reusable() -> SyncWaiter {
    guard let raw = ThreadSlots.syncWaiter() else {
      registerExitHook()
      return SyncWaiter(callerReleasesSlot: true)
    }
    ThreadSlots.setSyncWaiter(nil)
    // The slot's retain moves to the caller.
    let waiter = Unmanaged<SyncWaiter>.fromOpaque(raw).takeRetainedValue()
    // Relaxed: the word's last signal happened before this thread's acquiring load of it.
    waiter.words.pointee.store(0, ordering: .relaxed)
    return waiter
  }

  /// Makes `self` (from `reusable`, its turn come) the calling thread's spare again.
  func putBack() {
    if let old = ThreadSlots.syncWaiter() {
      Unmanaged<SyncWaiter>.fromOpaque(old).release()
    }
    ThreadSlots.setSyncWaiter(Unmanaged.passRetained(self).toOpaque())
  }

  /// The key whose destructor releases an exiting thread's spare waiter.
  private static let exitKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { _ in
      guard let raw = ThreadSlots.syncWaiter() else { return }
      ThreadSlots.setSyncWaiter(nil)
      Unmanaged<SyncWaiter>.fromOpaque(raw).release()
    }
    if status != 0 { resourceFailure("pthread_key_create failed (\(status))") }
    return key
  }()

  /// Makes the destructor run when the calling thread exits (any non-nil value does).
  private static func registerExitHook() {
    pthread_setspecific(exitKey, UnsafeRawPointer(bitPattern: 1))
  }
}
