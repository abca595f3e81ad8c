@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// A unit of work that can be submitted, performed, cancelled, waited on and observed.
///
/// Walk-through:
/// 1. `perform()` runs the closure on the calling thread unless the item was cancelled
///    first; `queue.async(execute: item)` and `queue.after(..., execute: item)` call it.
/// 2. When the closure returns, or when `cancel()` stops an item that has not started, the
///    item completes: waiters wake and each notification is submitted once.
/// 3. Cancelling a running or finished item only sets `isCancelled`.
public final class WorkItem: @unchecked Sendable {
  // @unchecked Sendable: `flags` is atomic, the rest is behind `completion`'s lock or
  // immutable.
  private let body: @Sendable () -> Void
  /// Atomic bits: 1 started, 2 cancelled, 4 completed.
  private let flags = Atomic<UInt8>(0)
  private let completedWord = FutexWord(0)
  /// Protected by: its lock. Notifications waiting for completion.
  private let completion = LockedValue<[(Queue, @Sendable () -> Void)]>([])

  private static let started: UInt8 = 1
  private static let cancelledBit: UInt8 = 2
  private static let completedBit: UInt8 = 4

  /// Creates an item that runs `body`.
  public init(_ body: @escaping @Sendable () -> Void) {
    self.body = body
  }

  /// Runs the closure now, on the calling thread, unless the item has been cancelled.
  public func perform() {
    let previous = flags.bitwiseOr(Self.started, ordering: .acquiringAndReleasing).oldValue
    if previous & Self.cancelledBit != 0 { return }
    body()
    complete()
  }

  /// Stops the item from starting. An item already running finishes normally.
  public func cancel() {
    let previous = flags.bitwiseOr(Self.cancelledBit, ordering: .acquiringAndReleasing).oldValue
    if previous & Self.started == 0 { complete() }
  }

  /// Whether ``cancel()`` has been called.
  public var isCancelled: Bool {
    flags.load(ordering: .acquiring) & Self.cancelledBit != 0
  }

  /// Submits `work` to `queue` once the item completes (at once if it has).
  public func notify(queue: Queue, execute work: @escaping @Sendable () -> Void) {
    let now = completion.withLock { list -> Bool in
      if flags.load(ordering: .acquiring) & Self.completedBit != 0 { return true }
      list.append((queue, work))
      return false
    }
    if now { queue.async(execute: work) }
  }

  // MARK: The C API's block objects (libdispatch's rules, which differ from the above)

  /// Invokes the item as libdispatch invokes a block object: the closure runs unless the
  /// item was cancelled, and the invocation completes the item either way (a cancelled
  /// block's submission counts as its execution). May run any number of times; only the
  /// first completion wakes waiters and runs the notifications.
  package func invokeAsBlockObject() {
    let previous = flags.bitwiseOr(Self.started, ordering: .acquiringAndReleasing).oldValue
    if previous & Self.cancelledBit == 0 { body() }
    complete()
  }

  /// `dispatch_block_cancel`: later invocations skip the closure; the item completes only
  /// when it is next invoked (or `completeUnrun` is called).
  package func cancelWithoutCompleting() {
    flags.bitwiseOr(Self.cancelledBit, ordering: .acquiringAndReleasing)
  }

  /// Completes an item that will never be invoked (its last reference went away): waiters
  /// wake and the notifications run, as libdispatch does for a released block object.
  package func completeUnrun() {
    complete()
  }

  /// Waits until the item completes or `deadline` passes.
  @discardableResult
  public func wait(timeout deadline: Deadline = .distantFuture) -> WaitResult {
    while completedWord.atomic.pointee.load(ordering: .acquiring) == 0 {
      if !completedWord.wait(whileEqualTo: 0, until: deadline) {
        return completedWord.atomic.pointee.load(ordering: .acquiring) == 0 ? .timedOut : .success
      }
    }
    return .success
  }

  /// Waits at most `timeout` for the item to complete.
  @discardableResult
  public func wait(timeout: Duration) -> WaitResult {
    wait(timeout: .now + timeout)
  }

  private func complete() {
    let previous = flags.bitwiseOr(Self.completedBit, ordering: .acquiringAndReleasing).oldValue
    if previous & Self.completedBit != 0 { return }  // A repeated perform completes once.
    let ready = completion.withLock { list -> [(Queue, @Sendable () -> Void)] in
      let taken = list
      list = []
      return taken
    }
    // The notifications are queued before the waiters wake: a waiter that then submits to
    // a notification's queue finds the notification ahead of its own work.
    for (queue, work) in ready { queue.async(execute: work) }
    completedWord.atomic.pointee.store(1, ordering: .releasing)
    completedWord.wake(Int32.max)
  }
}

extension Queue {
  /// Submits `item`; it runs unless cancelled before it starts.
  public func async(execute item: WorkItem) {
    async { item.perform() }
  }
}
