import MainLoop
import Synchronization

/// Tracks a set of work: `enter` before each piece, `leave` after it; `wait` and `notify`
/// act when the count returns to zero.
///
/// Walk-through:
/// 1. `count` is atomic. `enter` increments it; `leave` decrements it (releasing, so the
///    work's effects are visible to whoever sees zero).
/// 2. The `leave` that reaches zero bumps `generation`, wakes sleeping waiters (only if any
///    are registered) and submits the pending notifications, each once.
/// 3. `wait` returns at once on zero; otherwise it sleeps on `generation` until it changes.
/// 4. `notify` on an empty group submits at once; otherwise it is kept, under the lock,
///    until the next return to zero (re-checked under the lock so no zero is missed).
///
/// An unbalanced `leave` is a client bug and traps.
public final class Group: @unchecked Sendable {
  // @unchecked Sendable: counters are atomic; `notifications` is behind its lock.
  private let count = Atomic<Int>(0)
  private let generation = FutexWord(0)
  private let sleepers = Atomic<Int>(0)
  private let notifications = LockedValue<[(Queue, @Sendable () -> Void)]>([])

  /// Creates an empty group.
  public init() {}

  /// Counts one more piece of outstanding work.
  public func enter() {
    count.wrappingAdd(1, ordering: .relaxed)
  }

  /// Marks one piece of work done. More `leave`s than `enter`s is a client bug.
  public func leave() {
    // Sequentially consistent (it also releases this work's writes to `wait` and `notify`):
    // with the load of `sleepers` in `becameEmpty` it is one side of a Dekker pair whose
    // other side is the waiter's increment of `sleepers` then its load of `count`. Both
    // sides must be sequentially consistent for "either the waiter sees zero, or we see the
    // waiter" to hold; a releasing decrement would let the load of `sleepers` be ordered
    // before it.
    let remaining = count.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue
    if remaining > 0 { return }
    if remaining < 0 {
      clientBug("Group.leave() called more times than enter() (count \(remaining))")
    }
    becameEmpty()
  }

  private func becameEmpty() {
    let ready = notifications.withLock { list -> [(Queue, @Sendable () -> Void)] in
      // Re-check under the lock: an enter may already have made the group busy again, in
      // which case the notifications wait for the next zero.
      guard count.load(ordering: .acquiring) == 0 else { return [] }
      let taken = list
      list = []
      return taken
    }
    // Sequentially consistent like the decrement above (the same Dekker pair: the waiter
    // loads `generation` before it re-checks `count` and sleeps only while it is unchanged).
    generation.atomic.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
    if sleepers.load(ordering: .sequentiallyConsistent) > 0 { generation.wake(Int32.max) }
    for (queue, work) in ready { queue.async(execute: work) }
  }

  /// Waits until the group is empty or `deadline` passes.
  @discardableResult
  public func wait(timeout deadline: Deadline = .distantFuture) -> WaitResult {
    if count.load(ordering: .acquiring) == 0 { return .success }
    sleepers.wrappingAdd(1, ordering: .sequentiallyConsistent)
    defer { sleepers.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
    while true {
      let seen = generation.atomic.pointee.load(ordering: .acquiring)
      if count.load(ordering: .sequentiallyConsistent) == 0 { return .success }
      if !generation.wait(whileEqualTo: seen, until: deadline) {
        return count.load(ordering: .acquiring) == 0 ? .success : .timedOut
      }
    }
  }

  /// Waits at most `timeout` for the group to be empty.
  @discardableResult
  public func wait(timeout: Duration) -> WaitResult {
    wait(timeout: .now + timeout)
  }

  /// Submits `work` to `queue` when the group is next empty (at once if it is empty now).
  /// Each notification runs once.
  public func notify(queue: Queue, execute work: @escaping @Sendable () -> Void) {
    let now = notifications.withLock { list -> Bool in
      if count.load(ordering: .acquiring) == 0 { return true }
      list.append((queue, work))
      return false
    }
    if now { queue.async(execute: work) }
  }
}

extension Queue {
  /// Submits `work` as part of `group`: the group is entered now and left when `work` returns.
  public func async(
    group: Group, flags: Flags = [], execute work: @escaping @Sendable () -> Void
  ) {
    group.enter()
    if case .root(let priority) = kind {
      WorkerPool.shared.submit(.grouped(work, group), priority: priority)
      return
    }
    async(flags: flags) {
      work()
      group.leave()
    }
  }
}
