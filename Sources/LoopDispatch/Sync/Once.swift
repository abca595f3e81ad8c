import MainLoop
import Synchronization

/// Runs a closure exactly once, however many threads race to run it.
///
/// Walk-through:
/// 1. `state` is 0 (never run), 1 (running) or 2 (done). After the first run every call is
///    one acquiring load that sees 2 and returns.
/// 2. The thread that wins the 0→1 CAS records its thread id, runs the closure, stores 2
///    (releasing, so the closure's effects are visible to everyone who sees 2) and wakes
///    sleepers.
/// 3. Losers sleep on the word while it is 1. A loser that is the running thread itself
///    (the closure calls `run` again) would wait forever: that is a client bug and traps.
public final class Once: @unchecked Sendable {
  // @unchecked Sendable: all state is atomic.
  private let state = FutexWord(0)
  private let runner = Atomic<Int32>(0)

  /// Creates a `Once` whose closure has not run yet.
  public init() {}

  /// Whether the closure has finished running.
  public var isDone: Bool { state.atomic.pointee.load(ordering: .acquiring) == 2 }

  /// Runs `body` if no call has run it yet; otherwise waits until the first run finished.
  @inlinable
  public func run(_ body: () -> Void) {
    if _isDoneFast { return }
    _runSlow(body)
  }

  @usableFromInline
  var _isDoneFast: Bool { state.atomic.pointee.load(ordering: .acquiring) == 2 }

  @usableFromInline
  @inline(never)
  func _runSlow(_ body: () -> Void) {
    let me = Syscall.currentThreadID
    if state.atomic.pointee.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
    {
      runner.store(me, ordering: .relaxed)
      body()
      // Releasing; pairs with the acquiring loads of the fast path and of waiters.
      state.atomic.pointee.store(2, ordering: .releasing)
      state.wake(Int32.max)
      return
    }
    while state.atomic.pointee.load(ordering: .acquiring) == 1 {
      if runner.load(ordering: .relaxed) == me {
        clientBug("Once.run called recursively from its own closure (deadlock)")
      }
      state.wait(whileEqualTo: 1)
    }
  }
}
