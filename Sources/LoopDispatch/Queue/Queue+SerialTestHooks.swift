@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

// Debug-only hooks of the serial queue's protocol (`Queue+Serial.swift`) and of its biased
// `sync` lock (`Queue+SyncBias.swift`), through which tests force rare interleavings instead
// of hoping the scheduler finds them.

#if DEBUG
  /// One debug hook: a closure a test installs, behind a flag checked first, so that a call
  /// site with no hook installed takes no lock.
  final class ArmedHook<Hook: Sendable>: Sendable {
    /// Whether `hook` is set.
    private let armed = Atomic<Bool>(false)
    /// Protected by: its lock.
    private let hook = LockedValue<Hook?>(nil)

    /// Installs (or, with nil, removes) the hook.
    func set(_ new: Hook?) {
      hook.withLock { $0 = new }
      armed.store(new != nil, ordering: .sequentiallyConsistent)
    }

    /// The hook, if one is installed.
    @inline(__always)
    var current: Hook? { armed.load(ordering: .relaxed) ? hook.load() : nil }
  }

  /// Test hooks of the exchange-based push (debug builds only): a test parks a producer
  /// between its exchange and its second store (the link into the node it displaced, or the
  /// head of an empty list), and sees a drainer of that queue wait there.
  package enum SerialLinkHooks {
    /// Called by every producer between its exchange and its second store.
    private static let pause = ArmedHook<@Sendable () -> Void>()
    /// Called by every drainer that starts to wait, with its queue.
    private static let observer = ArmedHook<@Sendable (Queue, SerialListWait) -> Void>()

    /// Installs (or, with nil, removes) the hook drainers call when they start to wait.
    package static func setWaitObserver(_ hook: (@Sendable (Queue, SerialListWait) -> Void)?) {
      observer.set(hook)
    }

    @inline(__always)
    static func drainerWaits(_ queue: Queue, for kind: SerialListWait) {
      observer.current?(queue, kind)
    }

    /// Installs (or, with nil, removes) the hook producers call in the window.
    package static func setPause(_ hook: (@Sendable () -> Void)?) { pause.set(hook) }

    @inline(__always)
    static func betweenExchangeAndStore() { pause.current?() }
  }

  /// Test hook of the drain budget (debug builds only): a test sees how many items each
  /// drain has run, and may submit to the queue right after a budget check that found it
  /// empty (the window where a drain used to run on past its budget).
  package enum SerialDrainHooks {
    /// Items a drain runs at most (`drainBudget`).
    package static var budget: Int { drainBudget }
    /// Called by every drainer, on its thread, after each item's budget check that did not
    /// yield, with the queue and the items run so far in this drain.
    private static let observer = ArmedHook<@Sendable (Queue, Int) -> Void>()
    /// Called by every drainer, on its thread, after it found the next item (not yet taken)
    /// and before it checks suspension, with the queue.
    private static let taken = ArmedHook<@Sendable (Queue) -> Void>()

    /// Installs (or, with nil, removes) the hook drainers call after each budget check.
    package static func setAfterBudgetCheck(_ hook: (@Sendable (Queue, Int) -> Void)?) {
      observer.set(hook)
    }

    @inline(__always)
    static func afterBudgetCheck(of queue: Queue, ran: Int) { observer.current?(queue, ran) }

    /// Installs (or, with nil, removes) the hook drainers call between finding the next item
    /// and checking suspension (a `suspend()` there must still hold the item back).
    package static func setAfterTake(_ hook: (@Sendable (Queue) -> Void)?) { taken.set(hook) }

    @inline(__always)
    static func afterTake(of queue: Queue) { taken.current?(queue) }
  }

  /// Test hook of the bias's revocation (debug builds only): a test parks a revoker between
  /// its REVOKING and the verdict (`Queue+SyncBias.swift`, step 3), so that the owner meets a
  /// revocation under way and must wait for it.
  package enum SyncBiasHooks {
    /// Called by every revoker right after it set REVOKING, with the queue.
    private static let revoking = ArmedHook<@Sendable (Queue) -> Void>()

    /// Installs (or, with nil, removes) the hook revokers call after setting REVOKING.
    package static func setAfterRevokingSet(_ hook: (@Sendable (Queue) -> Void)?) {
      revoking.set(hook)
    }

    @inline(__always)
    static func afterRevokingSet(of queue: Queue) { revoking.current?(queue) }

    /// Called by an owner that found a revocation under way and is about to sleep on
    /// `SyncBias.revocationsEnded`, once per wait, with the queue.
    private static let ownerSleeps = ArmedHook<@Sendable (Queue) -> Void>()

    /// Installs (or, with nil, removes) the hook an owner calls before it sleeps.
    package static func setOwnerSleeps(_ hook: (@Sendable (Queue) -> Void)?) {
      ownerSleeps.set(hook)
    }

    @inline(__always)
    static func ownerWillSleep(on queue: Queue) { ownerSleeps.current?(queue) }
  }
#endif
