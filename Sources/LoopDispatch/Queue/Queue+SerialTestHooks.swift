@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

// Debug-only hooks of the serial queue's protocol (`Queue+Serial.swift`), through which tests
// force its rare interleavings instead of hoping the scheduler finds them.

#if DEBUG
  /// Test hooks of the exchange-based push (debug builds only): a test parks a producer
  /// between its exchange and its second store (the link into the node it displaced, or the
  /// head of an empty list), and sees a drainer of that queue wait there.
  package enum SerialLinkHooks {
    /// Whether `pause` is set (checked first, so an unarmed push takes no lock).
    private static let armed = Atomic<Bool>(false)
    /// Protected by: its lock. Called by every producer between its exchange and its second
    /// store while armed.
    private static let pause = LockedValue<(@Sendable () -> Void)?>(nil)
    /// Whether `observer` is set (checked first, so an unarmed wait takes no lock).
    private static let waitArmed = Atomic<Bool>(false)
    /// Protected by: its lock. Called by every drainer that starts to wait, with its queue.
    private static let observer = LockedValue<(@Sendable (Queue, SerialListWait) -> Void)?>(nil)

    /// Installs (or, with nil, removes) the hook drainers call when they start to wait.
    package static func setWaitObserver(_ hook: (@Sendable (Queue, SerialListWait) -> Void)?) {
      observer.withLock { $0 = hook }
      waitArmed.store(hook != nil, ordering: .sequentiallyConsistent)
    }

    @inline(__always)
    static func drainerWaits(_ queue: Queue, for kind: SerialListWait) {
      guard waitArmed.load(ordering: .relaxed), let hook = observer.load() else { return }
      hook(queue, kind)
    }

    /// Installs (or, with nil, removes) the hook producers call in the window.
    package static func setPause(_ hook: (@Sendable () -> Void)?) {
      pause.withLock { $0 = hook }
      armed.store(hook != nil, ordering: .sequentiallyConsistent)
    }

    @inline(__always)
    static func betweenExchangeAndStore() {
      guard armed.load(ordering: .relaxed), let hook = pause.load() else { return }
      hook()
    }
  }

  /// Test hook of the drain budget (debug builds only): a test sees how many items each
  /// drain has run, and may submit to the queue right after a budget check that found it
  /// empty (the window where a drain used to run on past its budget).
  package enum SerialDrainHooks {
    /// Items a drain runs at most (`drainBudget`).
    package static var budget: Int { drainBudget }
    /// Whether `observer` is set (checked first, so an unarmed drain takes no lock).
    private static let armed = Atomic<Bool>(false)
    /// Protected by: its lock. Called by every drainer, on its thread, after each item's
    /// budget check that did not yield, with the queue and the items run so far in this
    /// drain.
    private static let observer = LockedValue<(@Sendable (Queue, Int) -> Void)?>(nil)

    /// Installs (or, with nil, removes) the hook drainers call after each budget check.
    package static func setAfterBudgetCheck(_ hook: (@Sendable (Queue, Int) -> Void)?) {
      observer.withLock { $0 = hook }
      armed.store(hook != nil, ordering: .sequentiallyConsistent)
    }

    @inline(__always)
    static func afterBudgetCheck(of queue: Queue, ran: Int) {
      guard armed.load(ordering: .relaxed), let hook = observer.load() else { return }
      hook(queue, ran)
    }

    /// Whether `taken` is set (checked first, so an unarmed drain takes no lock).
    private static let takeArmed = Atomic<Bool>(false)
    /// Protected by: its lock. Called by every drainer, on its thread, after it found the next
    /// item (not yet taken) and before it checks suspension, with the queue.
    private static let taken = LockedValue<(@Sendable (Queue) -> Void)?>(nil)

    /// Installs (or, with nil, removes) the hook drainers call between finding the next item
    /// and checking suspension (a `suspend()` there must still hold the item back).
    package static func setAfterTake(_ hook: (@Sendable (Queue) -> Void)?) {
      taken.withLock { $0 = hook }
      takeArmed.store(hook != nil, ordering: .sequentiallyConsistent)
    }

    @inline(__always)
    static func afterTake(of queue: Queue) {
      guard takeArmed.load(ordering: .relaxed), let hook = taken.load() else { return }
      hook(queue)
    }
  }
#endif
