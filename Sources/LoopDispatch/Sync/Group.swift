@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// Tracks a set of work: `enter` before each piece, `leave` after it; `wait` and `notify`
/// act when the count returns to zero.
///
/// The state word (`state`, atomic) packs the count and the generation, so that reaching
/// zero and ending a generation are one atomic step:
///
/// | bits    | name       | meaning                                                       |
/// | ------- | ---------- | ------------------------------------------------------------- |
/// | 0...31  | COUNT      | outstanding work, negated: 2^32 − (`enter`s − `leave`s), 0 idle |
/// | 32...63 | GENERATION | how many times the count has returned to zero (wrapping)      |
///
/// Walk-through:
/// 1. `leave` adds one to the whole word: one atomic add, whatever the count. COUNT holds
///    the count negated, so the `leave` that takes it from one (0xFFFF_FFFF) to zero carries
///    out of COUNT into GENERATION: reaching zero ends the generation in the same step (the
///    shape of libdispatch's group). `enter` takes one from COUNT without touching
///    GENERATION: a subtraction, or from zero (where a subtraction would borrow from
///    GENERATION) an addition of 0xFFFF_FFFF, chosen by a compare-and-swap. The submitter
///    enters once per item, and the workers that leave never retry. (A single 32-bit
///    subtract on the low half, libdispatch's form, was tried and measured: a submitting
///    main thread's samples stayed on the line's transfer from the last leaving worker,
///    which one locked instruction pays as the compare-and-swap does; group_main did not
///    move. It would cost an allocation of its own for the word and C11's undefined
///    mixed-size atomics.) What did move it: fewer transfers. A pool worker that runs jobs
///    of one group back to back (`async(group:)` onto a global queue) makes one `leave`
///    for the run, `leave(count:)`, when it turns to anything else (`Worker.swift`,
///    `flushDeferredLeaves`, which says why no `wait` or `notify` can tell): `group_main`
///    beside two busy processes went from 255 ns an item (CPU 270) to 184 (200).
/// 2. The `leave` that ended a generation rings `doorbell` (a futex word) and wakes its
///    sleepers if any are registered, then submits the notifications registered during the
///    generation it ended, each once.
/// 3. `wait` returns at once on zero; otherwise it notes the generation it saw and sleeps on
///    the doorbell until GENERATION moves past it. A waiter therefore returns for every
///    return to zero after it started, however brief (`leave` then `enter` at once), and
///    never for one that happened before it started.
/// 4. `notify` on an empty group submits at once; otherwise it is kept, under the lock,
///    with the generation it belongs to, until that generation ends.
///
/// An unbalanced `leave` is a client bug and traps.
public final class Group: @unchecked Sendable {
  // @unchecked Sendable: the state and the doorbell are atomic; `notifications` is behind
  // its lock.
  private let state = Atomic<UInt64>(0)
  /// Rung (incremented) after each generation ends; waiters sleep on it. Only a hint: the
  /// truth is GENERATION in `state`, which a waiter re-reads after every wake.
  private let doorbell = FutexWord(0)
  /// Atomic. Waiters registered to be woken.
  private let sleepers = Atomic<Int>(0)
  /// Protected by its lock. Each entry names the generation that must end before it runs.
  private let notifications = LockedValue<[PendingNotification]>([])

  private static let countMask: UInt64 = 0xFFFF_FFFF

  /// The outstanding count held in the COUNT bits of `word`.
  @inline(__always)
  private static func count(_ word: UInt64) -> UInt32 { 0 &- UInt32(truncatingIfNeeded: word) }

  private struct PendingNotification {
    let generation: UInt32
    let queue: Queue
    let work: @Sendable () -> Void
  }

  /// The object kept alive while the count is not zero (unretained here): the group
  /// itself, or the C API's wrapper that owns it (`keepAlive(by:)`). Written once, before
  /// the group is shared.
  private nonisolated(unsafe) var lifetimeOwner: Unmanaged<AnyObject>?

  /// Creates an empty group.
  public init() {}

  /// Makes `owner` (which holds this group) the object kept alive while work is
  /// outstanding, instead of the group alone. Call before the group is shared.
  package func keepAlive(by owner: AnyObject) {
    lifetimeOwner = Unmanaged.passUnretained(owner)
  }

  /// The object outstanding work keeps alive.
  @inline(__always)
  private var owner: Unmanaged<AnyObject> {
    lifetimeOwner ?? Unmanaged.passUnretained(self)
  }

  #if DEBUG
    /// Atomic adds `leave` and `leave(count:)` made to `state`, for the test of the pool's
    /// deferred leaves (`Worker.flushDeferredLeaves`). Debug builds only.
    private let leaveAdds = Atomic<UInt64>(0)
    package var leaveWrites: UInt64 { leaveAdds.load(ordering: .relaxed) }

    /// GENERATION, for tests of the state word.
    package var generation: UInt32 {
      UInt32(truncatingIfNeeded: state.load(ordering: .acquiring) >> 32)
    }
  #endif

  /// Counts one more piece of outstanding work.
  ///
  /// While the count is not zero the group keeps itself (or its owner) alive with one
  /// retain, taken by the `enter` that leaves zero and dropped by the `leave` that returns
  /// to it — as libdispatch does — so work in flight never needs a reference of its own.
  public func enter() {
    var current = state.load(ordering: .relaxed)
    while true {
      let count = Self.count(current)
      if count == UInt32.max {
        clientBug("Group.enter() called 4294967295 times without a leave() (count overflow)")
      }
      // From zero: COUNT becomes 0xFFFF_FFFF with no borrow out of it (see the table).
      let desired = count == 0 ? current &+ Self.countMask : current &- 1
      // Relaxed, as an increment: the entered work has not been published yet.
      let (exchanged, original) = state.compareExchange(
        expected: current, desired: desired, ordering: .relaxed)
      if exchanged {
        if count == 0 { _ = owner.retain() }
        return
      }
      current = original
    }
  }

  /// Marks one piece of work done. More `leave`s than `enter`s is a client bug.
  public func leave() { leave(count: 1) }

  /// `count` `leave`s in one atomic add: `leave()`, and a pool worker that ran that many of
  /// this group's jobs back to back (`Worker.flushDeferredLeaves`).
  @inline(__always)
  package func leave(count: UInt32) {
    // Sequentially consistent (it also releases this work's writes to `wait` and `notify`):
    // with the load of `sleepers` in `generationEnded` it is one side of a Dekker pair whose
    // other side is the waiter's increment of `sleepers` then its load of `state`. Both
    // sides must be sequentially consistent for "either the waiter sees the new generation,
    // or we see the waiter" to hold.
    #if DEBUG
      // Before the add: after it, another thread's last leave may free the group.
      leaveAdds.wrappingAdd(1, ordering: .relaxed)
    #endif
    let previous = state.wrappingAdd(UInt64(count), ordering: .sequentiallyConsistent).oldValue
    let outstanding = Self.count(previous)
    if outstanding < count {
      clientBug(
        "Group.leave() called more times than enter() (count \(Int(outstanding) - Int(count)))")
    }
    if outstanding == count {
      // The carry ended generation `previous >> 32`.
      let keptAlive = owner
      generationEnded(UInt32(truncatingIfNeeded: previous >> 32))
      // Last: this may free the group (see `enter`).
      keptAlive.release()
    }
  }

  /// After the `leave` that ended `ended`: wakes the waiters and runs its notifications.
  private func generationEnded(_ ended: UInt32) {
    // Sequentially consistent, like the decrement: the waiter loads the doorbell before it
    // re-reads `state` and sleeps only while the doorbell is unchanged.
    doorbell.atomic.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
    if sleepers.load(ordering: .sequentiallyConsistent) > 0 { doorbell.wake(Int32.max) }
    let ready = notifications.withLock { list -> [PendingNotification] in
      // Entries of later generations (registered after a new `enter`) stay.
      guard !list.isEmpty else { return [] }
      var due: [PendingNotification] = []
      list.removeAll { entry in
        // Wrapping distance: `entry.generation` is `ended` or older.
        let isDue = Int32(bitPattern: ended &- entry.generation) >= 0
        if isDue { due.append(entry) }
        return isDue
      }
      return due
    }
    for entry in ready { entry.queue.async(execute: entry.work) }
  }

  /// Waits until the group is empty or `deadline` passes.
  ///
  /// Returns `.success` when the count is zero now or returns to zero while this call
  /// waits, even if new work enters at once afterwards.
  @discardableResult
  public func wait(timeout deadline: Deadline = .distantFuture) -> WaitResult {
    let first = state.load(ordering: .acquiring)
    if first & Self.countMask == 0 { return .success }
    let started = first >> 32
    sleepers.wrappingAdd(1, ordering: .sequentiallyConsistent)
    defer { sleepers.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
    while true {
      let rung = doorbell.atomic.pointee.load(ordering: .sequentiallyConsistent)
      let now = state.load(ordering: .sequentiallyConsistent)
      // Acquiring through the sequentially consistent load: the work of the generation
      // that ended is visible to the caller.
      if now >> 32 != started || now & Self.countMask == 0 { return .success }
      if !doorbell.wait(whileEqualTo: rung, until: deadline) { return .timedOut }
    }
  }

  /// Waits at most `timeout` for the group to be empty.
  @discardableResult
  public func wait(timeout: Duration) -> WaitResult {
    wait(timeout: .now + timeout)
  }

  /// Submits `work` to `queue` when the group is next empty (at once if it is empty now).
  /// Each notification runs once, when the generation current at this call ends.
  public func notify(queue: Queue, execute work: @escaping @Sendable () -> Void) {
    let now = notifications.withLock { list -> Bool in
      // Under the lock: the `leave` that ends this generation takes the lock after its add,
      // so it finds this entry, or this load already sees the new generation (count zero,
      // or a later generation that this entry then belongs to).
      let current = state.load(ordering: .acquiring)
      if current & Self.countMask == 0 { return true }
      list.append(
        PendingNotification(
          generation: UInt32(truncatingIfNeeded: current >> 32), queue: queue, work: work))
      return false
    }
    if now { queue.async(execute: work) }
  }
}

extension Queue {
  /// Submits `work` as part of `group`: the group is entered now and left when `work` returns.
  ///
  /// `work` is taken owned, as by `async(flags:execute:)`: a capturing closure's context
  /// moves into the queued item with no retain or release on the submitting thread.
  public func async(
    group: Group, flags: Flags = [], execute work: consuming @escaping @Sendable () -> Void
  ) {
    group.enter()
    if case .root(let priority, let overcommit) = kind {
      let job = PoolJob.grouped(consume work, GroupReference(group))
      if overcommit {
        WorkerPool.shared.submitOvercommit(job, priority: priority)
      } else {
        WorkerPool.shared.submit(consume job, priority: priority)
      }
      return
    }
    let body = consume work
    async(flags: flags) {
      body()
      group.leave()
    }
  }
}

extension Queue {
  /// `dispatch_async_f`: submits a C function and its context with no closure.
  package func async(_ call: CFunctionCall, barrier: Bool) {
    switch kind {
    case .root(let priority, let overcommit):
      if overcommit {
        WorkerPool.shared.submitOvercommit(.function(call), priority: priority)
      } else {
        WorkerPool.shared.submit(.function(call), priority: priority)
      }
    case .serial, .main: serialEnqueue(.function(call, barrier: barrier))
    case .concurrent: concurrentEnqueue(.function(call, barrier: barrier))
    }
  }

  /// `dispatch_group_async_f`: as `async(group:flags:execute:)` with a C function.
  package func async(group: Group, _ call: CFunctionCall, barrier: Bool) {
    guard case .root(let priority, let overcommit) = kind else {
      group.enter()
      async(flags: barrier ? .barrier : []) {
        call.run()
        group.leave()
      }
      return
    }
    group.enter()
    let job = PoolJob.groupedFunction(call, GroupReference(group))
    if overcommit {
      WorkerPool.shared.submitOvercommit(job, priority: priority)
    } else {
      WorkerPool.shared.submit(job, priority: priority)
    }
  }
}
