import CLoopShims
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// How new event data combines with data not yet handed to the handler.
enum DataMerge {
  case add
  case or
  case replace
}

/// The engine shared by every source: data merging, handler delivery on the target queue,
/// suspension and the cancel protocol. Kinds (fd, timer, signal, data) subclass it to
/// register with a loop and compute their data.
///
/// Delivery walk-through:
/// 1. An event (on a loop thread, or `DataSource.add` on any thread) merges its data into
///    `pendingData`, then `scheduleDelivery()` CASes PENDING into `status` if the source is
///    active, not suspended, not cancelled and not already pending, and submits `deliver`
///    to the target queue (or runs it inline when the target is the main queue and the event
///    arrived on the idle main loop: no thread hop).
/// 2. `deliver` takes the data (exchange with 0) and runs the event handler, unless the
///    source was cancelled meanwhile. While PENDING is set no second delivery starts, so the
///    handler never runs concurrently with itself, on any target queue.
/// 3. It then clears PENDING and lets the kind react (`didDeliver`: an fd source re-arms its
///    one-shot watch only now), and starts another delivery if data arrived meanwhile.
///
/// Cancel walk-through:
/// 1. `cancel()` sets CANCELLED; from then on no delivery starts and a pending one skips the
///    handler.
/// 2. Two things must finish before the cancel handler runs: the kind's teardown (the loop
///    registration removed, so the descriptor may be closed) and any delivery in flight.
///    `cancelSteps` counts them down from 2; whoever takes it to 0 sets CANCEL_READY.
/// 3. As every handler of GCD, the cancel handler waits while the source is inactive or
///    suspended: it is submitted to the target queue once CANCEL_READY and ACTIVATED are
///    set and the suspension count is 0 (or RELEASED: the public source went away, so
///    nobody could ever resume it). `submitCancelHandlerIfDue` checks this after each of
///    the steps that can complete it (CANCEL_READY, activation, the last resume, release)
///    and claims CANCEL_SUBMITTED with a compare-and-swap, so it runs exactly once, last.
///    The status bits are set with read-modify-writes on one word, and the suspension count
///    and the status are read sequentially consistent after them: of two steps racing, the
///    later one sees the other's effect.
/// 4. The handlers are then released (breaking cycles through closures that capture the
///    source), and the target queue with them when the source goes away.
class SourceCore: @unchecked Sendable {
  // @unchecked Sendable: `status`, `suspendCount`, `pendingData`, `currentData` and
  // `cancelSteps` are atomic; `handlers` is behind its lock; the rest is immutable.

  struct Handlers {
    var event: (@Sendable () -> Void)?
    var cancel: (@Sendable () -> Void)?
    var registration: (@Sendable () -> Void)?
  }

  static let activated: UInt32 = 1
  static let pending: UInt32 = 2
  static let cancelled: UInt32 = 4
  /// Teardown and any delivery in flight are done (cancel step 2).
  static let cancelReady: UInt32 = 8
  /// The cancel handler was submitted (cancel step 3).
  static let cancelSubmitted: UInt32 = 16
  /// The public source went away: the cancel handler no longer waits for activation or
  /// resume.
  static let released: UInt32 = 32

  /// The target queue. Written only before activation (`retarget`, under `handlers`' lock,
  /// which `activate` also sets ACTIVATED under); deliveries and the cancel handler read it
  /// only after activation (or once the source is released), so every reader sees the last
  /// write.
  private(set) var queue: Queue {
    didSet { queueReference = Unmanaged.passUnretained(queue) }
  }
  /// `queue` without a reference count of its own, for the per-event path, which would
  /// otherwise retain and release the queue around every inline delivery. Safe while `queue`
  /// holds the same object, which it does from the same writes on (`didSet`).
  private var queueReference: Unmanaged<Queue>
  /// Whether the queue's target chain ends at the main queue (fixed at activation): events
  /// are then seen on the main loop. Every other source's events are seen by the service
  /// loop (timers, signals) or the I/O driver (descriptors), which the kinds start
  /// themselves, so an fd source does not start the service loop. Written with `queue`.
  private(set) var deliversOnMainLoop: Bool
  let merge: DataMerge
  let status = Atomic<UInt32>(0)
  let suspendCount = Atomic<Int>(0)
  let pendingData = Atomic<UInt>(0)
  /// The data of the delivery in progress; read by the handler through `Source.data`.
  let currentData = Atomic<UInt>(0)
  private let cancelSteps = Atomic<Int>(2)
  /// A `Mutex` (one compare-and-swap to lock, one exchange to unlock, specialised inline)
  /// because every delivery reads the event handler under it.
  let handlers = Mutex(Handlers())
  /// The public `Source`, weakly: set once by its initialiser before the source can be
  /// activated; loading it is the runtime's thread-safe "retain if still alive".
  weak var owner: Source?

  init(queue: Queue, merge: DataMerge) {
    self.queue = queue
    self.queueReference = Unmanaged.passUnretained(queue)
    self.deliversOnMainLoop = queue.root.kind == .main
    self.merge = merge
    RuntimeCounters.liveSources.wrappingAdd(1, ordering: .relaxed)
  }

  deinit {
    RuntimeCounters.liveSources.wrappingSubtract(1, ordering: .relaxed)
  }

  var isCancelled: Bool { status.load(ordering: .acquiring) & Self.cancelled != 0 }

  /// Set if the kind could not register with the system when armed: the source never fires.
  /// Protected by: its lock.
  private let registrationFailure = LockedValue<EventLoopError?>(nil)

  /// Records why `arm` could not register (called by the kind, once).
  func recordRegistrationError(_ error: EventLoopError) {
    registrationFailure.withLock { $0 = error }
  }

  /// Why registration failed, or nil. Any thread.
  var registrationError: EventLoopError? { registrationFailure.withLock { $0 } }

  // MARK: Kind hooks

  /// Registers with the loop. Called once, by `activate`.
  func arm() {}
  /// Runs on the target queue after each delivery (with or without the handler).
  func didDeliver() {}
  /// Removes the registration, then calls `completion` (any thread).
  func teardown(_ completion: @escaping @Sendable () -> Void) { completion() }
  /// The data to hand to the handler, given what was merged.
  func dataForDelivery(_ merged: UInt) -> UInt { merged }
  /// Whether `dataForDelivery` costs a system call (fd sources: FIONREAD and friends), so it
  /// runs only if the handler reads `data` (`currentDataValue`).
  var computesDataLazily: Bool { false }

  /// `currentData` before a lazily computed value is asked for.
  static let dataNotComputed = UInt.max
  /// What was merged for the delivery in progress, for a lazy `data`.
  let mergedForLazyData = Atomic<UInt>(0)

  /// The current delivery's data (computing it now if it is lazy). The handler's thread.
  func currentDataValue() -> UInt {
    let value = currentData.load(ordering: .relaxed)
    guard value == Self.dataNotComputed, computesDataLazily else { return value }
    let computed = dataForDelivery(mergedForLazyData.load(ordering: .relaxed))
    currentData.store(computed, ordering: .relaxed)
    return computed
  }

  // MARK: Lifecycle

  func activate() {
    // ACTIVATED is set under the handlers' lock, which `setRegistrationHandler` checks it
    // under (so the registration handler runs exactly once however the two race) and
    // `retarget` checks it under (so the target is fixed from here on).
    let (previous, registered) = handlers.withLock {
      handlers -> (UInt32, (@Sendable () -> Void)?) in
      let previous = status.bitwiseOr(Self.activated, ordering: .sequentiallyConsistent).oldValue
      if previous & (Self.activated | Self.cancelled) != 0 { return (previous, nil) }
      return (previous, handlers.registration.take())
    }
    if previous & Self.activated != 0 { return }
    if previous & Self.cancelled != 0 {
      // Cancelled before activation: nothing registers, and the held cancel handler may
      // now run (cancel step 3).
      submitCancelHandlerIfDue()
      return
    }
    // The registration handler is queued first: on a serial target it runs before any event
    // handler. On a concurrent target it only starts first: an event handler may start
    // while it is still running.
    if let registered { queue.async(execute: registered) }
    arm()
    if pendingData.load(ordering: .acquiring) != 0 { scheduleDelivery() }
  }

  /// Makes `newQueue` the target, before activation only; returns false (changing nothing)
  /// once the source has been activated. Any thread.
  func retarget(to newQueue: Queue) -> Bool {
    let changed = handlers.withLock { _ -> Bool in
      guard status.load(ordering: .sequentiallyConsistent) & Self.activated == 0 else {
        return false
      }
      queue = newQueue
      deliversOnMainLoop = newQueue.root.kind == .main
      targetChanged()
      return true
    }
    return changed
  }

  /// Kind hook: the target changed before activation (under the handlers' lock).
  func targetChanged() {}

  /// Sets the registration handler; on a source already activated it is queued at once
  /// (GCD: a registration handler set after registration is invoked immediately).
  func setRegistrationHandler(_ handler: (@Sendable () -> Void)?) {
    let runNow = handlers.withLock { handlers -> (@Sendable () -> Void)? in
      let current = status.load(ordering: .sequentiallyConsistent)
      if current & Self.activated != 0 && current & Self.cancelled == 0 { return handler }
      handlers.registration = handler
      return nil
    }
    if let runNow { queue.async(execute: runNow) }
  }

  func suspend() {
    suspendCount.wrappingAdd(1, ordering: .sequentiallyConsistent)
  }

  func resume(label: String) {
    var current = suspendCount.load(ordering: .acquiring)
    while true {
      if current == 0 {
        if status.load(ordering: .acquiring) & Self.activated == 0 {
          activate()
          return
        }
        clientBug("resume() on \(label) that is not suspended (over-resume)")
      }
      let (done, actual) = suspendCount.compareExchange(
        expected: current, desired: current - 1, ordering: .sequentiallyConsistent)
      if done { break }
      current = actual
    }
    if current == 1 {
      scheduleDelivery()
      submitCancelHandlerIfDue()
    }
  }

  func cancel() {
    let previous = status.bitwiseOr(Self.cancelled, ordering: .acquiringAndReleasing).oldValue
    if previous & Self.cancelled != 0 { return }
    teardown { [self] in cancelStepDone() }
    if previous & Self.pending == 0 { cancelStepDone() }
  }

  /// The public source went away: cancels, and lets the cancel handler run even if the
  /// source was never activated or is suspended (nobody is left to do either).
  func release() {
    status.bitwiseOr(Self.released, ordering: .sequentiallyConsistent)
    cancel()
    submitCancelHandlerIfDue()
  }

  private func cancelStepDone() {
    guard cancelSteps.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 else {
      return
    }
    status.bitwiseOr(Self.cancelReady, ordering: .sequentiallyConsistent)
    submitCancelHandlerIfDue()
  }

  /// The cancel protocol's state in words (status bits by name, suspensions, pending data,
  /// cancel steps left), for a test's failure message. Any thread; a snapshot.
  var protocolDescription: String {
    let bits = status.load(ordering: .sequentiallyConsistent)
    let names: [(UInt32, String)] = [
      (Self.activated, "activated"), (Self.pending, "pending"), (Self.cancelled, "cancelled"),
      (Self.cancelReady, "cancelReady"), (Self.cancelSubmitted, "cancelSubmitted"),
      (Self.released, "released"),
    ]
    let set = names.filter { bits & $0.0 != 0 }.map(\.1).joined(separator: ",")
    return "status [\(set)] suspended \(suspendCount.load(ordering: .relaxed))"
      + " pendingData \(pendingData.load(ordering: .relaxed))"
      + " cancelSteps \(cancelSteps.load(ordering: .relaxed))"
  }

  /// Cancel step 3: submits the cancel handler once it is due, exactly once.
  private func submitCancelHandlerIfDue() {
    var current = status.load(ordering: .sequentiallyConsistent)
    while true {
      guard current & Self.cancelReady != 0, current & Self.cancelSubmitted == 0 else { return }
      let free =
        current & Self.released != 0
        || (current & Self.activated != 0
          && suspendCount.load(ordering: .sequentiallyConsistent) == 0)
      guard free else { return }
      let (claimed, actual) = status.compareExchange(
        expected: current, desired: current | Self.cancelSubmitted,
        ordering: .sequentiallyConsistent)
      if claimed { break }
      current = actual
    }
    queue.async { [self] in
      let cancelHandler = handlers.withLock { handlers -> (@Sendable () -> Void)? in
        let taken = handlers.cancel
        handlers = Handlers()
        return taken
      }
      cancelHandler?()
    }
  }

  // MARK: Events and delivery

  /// Merges `value` into the pending data and schedules a delivery. Any thread.
  ///
  /// `mayRunInline` is for events seen by a loop or an I/O driver thread (readiness, a fired
  /// timer, a signal): their handler may run at once on that thread when the target is idle.
  /// A call made by client code (`DataSource.post`, a regular file's activation) passes
  /// false: the handler then always runs later as work of its queue, never inside the call.
  ///
  /// Ordering: a signal and a `resume` on another thread form a store-then-load pair on each
  /// side (this stores `pendingData` then loads `suspendCount`; `resume` stores
  /// `suspendCount` then loads `pendingData`). Both stores and both loads are sequentially
  /// consistent, so in their single total order at least one side sees the other's store and
  /// schedules the delivery. With a releasing store here (a plain `mov` on x86, which the
  /// store buffer lets the following load overtake) both could read the old values: the
  /// event kept as pending data with nobody to deliver it, and a readiness source left
  /// disarmed for good. Dispatch I/O channels, which suspend and resume their readiness
  /// source around every wait, lost an echo's wake-up about once in 50 runs that way.
  @discardableResult
  func signal(_ value: UInt, mayRunInline: Bool = true) -> Scheduling {
    switch merge {
    case .add: pendingData.wrappingAdd(value, ordering: .sequentiallyConsistent)
    case .or: pendingData.bitwiseOr(value, ordering: .sequentiallyConsistent)
    case .replace: pendingData.store(value, ordering: .sequentiallyConsistent)
    }
    return scheduleDelivery(mayRunInline: mayRunInline)
  }

  /// How `scheduleDelivery` went.
  enum Scheduling {
    /// The handler already ran, inline on the calling (main loop) thread.
    case ranInline
    /// A delivery was queued on the target queue.
    case queued
    /// Nothing was started (inactive, suspended, cancelled, already pending, no data).
    case notScheduled
  }

  /// Queues a delivery if the source may deliver now. Only with `mayRunInline` (an event on
  /// its loop's or the I/O driver's thread) may the handler run inline; `activate`, `resume`
  /// and client posts always queue it.
  @discardableResult
  func scheduleDelivery(mayRunInline: Bool = false) -> Scheduling {
    var current = status.load(ordering: .sequentiallyConsistent)
    while true {
      // Sequentially consistent loads: see `signal`.
      guard current & Self.activated != 0, current & (Self.pending | Self.cancelled) == 0,
        suspendCount.load(ordering: .sequentiallyConsistent) == 0,
        pendingData.load(ordering: .sequentiallyConsistent) != 0
      else { return .notScheduled }
      let (claimed, actual) = status.compareExchange(
        expected: current, desired: current | Self.pending, ordering: .acquiringAndReleasing)
      if claimed { break }
      current = actual
    }
    if mayRunInline && deliversOnMainLoop && cls_is_main_thread_cached() != 0
      && queueReference._withUnsafeGuaranteedRef({ $0.runInlineOnMainLoopIfIdle(delivering: self) })
    {
      return .ranInline
    }
    // On an I/O driver thread, a serial target whose chain is idle runs the handler here:
    // claimed like an uncontended `sync`, with the poller role released meanwhile.
    if mayRunInline && queue.kind == .serial && IODriver.isDriverThread,
      let driver = IODriver.running, driver.mayRunInline
    {
      // The re-arm (`finishDelivery`) comes after the chain is released: the next event,
      // which only the re-arm lets the kernel report, then finds the chain idle and runs
      // inline too, instead of racing this thread's unlock and going to the pool.
      var mustFinish = false
      if driver.runInlineOnIdleChain(of: queue, { mustFinish = deliverWithoutFinishing() }) {
        if mustFinish { finishDelivery() }
        return .ranInline
      }
    }
    queue.async { [self] in deliver() }
    return .queued
  }

  /// The event handler, read under the lock. Assigned to a captured variable rather than
  /// returned: a closure returned through `withLock`'s generic result is re-abstracted,
  /// which allocates a context on every call (one allocation per event, found with
  /// callgrind).
  @inline(__always)
  private func eventHandler() -> (@Sendable () -> Void)? {
    var handler: (@Sendable () -> Void)?
    handlers.withLock { handler = $0.event }
    return handler
  }

  /// Runs on the target queue with PENDING held (also `Queue.runInlineOnMainLoopIfIdle`).
  fileprivate func deliver() {
    if deliverWithoutFinishing() { finishDelivery() }
  }

  /// The delivery up to clearing PENDING; returns whether `finishDelivery` must follow (false
  /// once cancelled). Target queue, PENDING held.
  private func deliverWithoutFinishing() -> Bool {
    let merged = pendingData.exchange(0, ordering: .acquiringAndReleasing)
    if !isCancelled && suspendCount.load(ordering: .acquiring) == 0 {
      if merged != 0 {
        if computesDataLazily {
          mergedForLazyData.store(merged, ordering: .relaxed)
          currentData.store(Self.dataNotComputed, ordering: .relaxed)
        } else {
          currentData.store(dataForDelivery(merged), ordering: .relaxed)
        }
        // Hold the public source for the handler's duration (as GCD retains a source during
        // its callout), so a handler capturing it `unowned` stays valid even if the last
        // outside reference is dropped meanwhile. Nil: the source is being released, which
        // cancels it, so the handler must not run.
        if let owner, let handler = eventHandler() {
          withExtendedLifetime(owner) { handler() }
        }
      }
    } else if merged != 0 {
      // Suspended meanwhile: keep the data for the delivery after resume.
      signalWithoutScheduling(merged)
    }
    // Sequentially consistent: with `scheduleDelivery`'s load of `status`, the other half of
    // the pair `finishDelivery` completes (see `signal`).
    let previous = status.bitwiseAnd(~Self.pending, ordering: .sequentiallyConsistent).oldValue
    if previous & Self.cancelled != 0 {
      cancelStepDone()
      return false
    }
    return true
  }

  /// After a delivery: the kind's re-arm, then a new delivery if data arrived meanwhile.
  /// Any thread (PENDING is already clear, as for any delivery's re-arm).
  private func finishDelivery() {
    didDeliver()
    // Sequentially consistent, as `signal`'s pair: a signal that found PENDING still set
    // (before the clear above) stored its data first, and this load sees it.
    if pendingData.load(ordering: .sequentiallyConsistent) != 0 { scheduleDelivery() }
  }

  private func signalWithoutScheduling(_ value: UInt) {
    switch merge {
    case .add: pendingData.wrappingAdd(value, ordering: .acquiringAndReleasing)
    case .or, .replace: pendingData.bitwiseOr(value, ordering: .acquiringAndReleasing)
    }
  }
}

extension Queue {
  /// Runs `source`'s delivery at once on the main loop's thread if this queue — the main
  /// queue, or a serial queue whose chain ends at it — and every queue up its chain are idle,
  /// holding them as a `sync` would; returns false without running it otherwise. Main loop
  /// thread only.
  ///
  /// Takes the source rather than a closure: a closure capturing it cost a retain and a
  /// release per event.
  func runInlineOnMainLoopIfIdle(delivering source: SourceCore) -> Bool {
    if kind == .main {
      // The main queue alone: claimed as `tryClaimChainEndingAtMain` would, without its walk.
      guard trySyncLock() else { return false }
      ThreadFrame.with(self, exclusive: true) { source.deliver() }
      releaseSyncLock()
      return true
    }
    guard isSerialLike, tryClaimChainEndingAtMain() else { return false }
    ThreadFrame.with(Queue.main, exclusive: true) { withLockedChainFrames { source.deliver() } }
    unlockSyncChain()  // The serial queues claimed; the main queue is released next.
    Queue.main.releaseSyncLock()
    return true
  }
}
