import MainLoop
import Synchronization

/// What an `after` timer submits when it fires: a closure, or a C function and its context
/// (`dispatch_after_f`, which then allocates no closure).
enum DelayedWorkItem: Sendable {
  case closure(@Sendable () -> Void)
  case function(CFunctionCall)

  /// The item as a global queue's pool job.
  @inline(__always)
  var poolJob: PoolJob {
    switch self {
    case .closure(let body): .closure(body)
    case .function(let call): .function(call)
    }
  }

  /// The item as a custom queue's item.
  @inline(__always)
  var queueWork: QueueWork {
    switch self {
    case .closure(let body): .closure(body, barrier: false)
    case .function(let call): .function(call, barrier: false)
    }
  }
}

/// A handle to work scheduled with ``Queue/after(_:execute:)``; cancel it before it fires.
///
/// A `DelayedWork` is its own timer (a ``LoopTimer``, kept by the I/O driver's timer heap,
/// `DriverTimers`, or by the loop that keeps its queue's timers: the main loop, or a loop a
/// test passed): one `after` allocates this one object besides the caller's closure, and
/// `dispatch_after_f` this object only. A driver timer is on no loop (``LoopTimer/loop`` is
/// nil).
///
/// Walk-through: `state` leaves "waiting" exactly once: by a CAS to "fired" (the timer's
/// loop submits the work) or by `cancel()` setting the "cancelled" bit first (the work is
/// released by `cancel()` itself). Only the winner touches `item`; a later `cancel()` only
/// sets its bit. `cancel()` also removes the timer from its heap (`DriverTimers.remove`) or
/// its loop (``LoopTimer/cancel()``).
///
/// Size: 120 bytes (checked by a test), the largest request glibc serves from its fastbins.
/// A timer is allocated by the scheduling thread and freed by the firing thread; above
/// that size each free took the allocating arena's lock (against the scheduler's mallocs)
/// and consolidated chunks, which showed as `_int_free`, `unlink_chunk` and lock waits on
/// the service thread (perf, after_dense). Fastbin frees take no lock. Hence the one-byte
/// fields sit beside one another here and in `LoopTimer`.
///
/// Thread-safety: any thread.
public final class DelayedWork: LoopTimer, @unchecked Sendable {
  // @unchecked Sendable: `item` is written in init and afterwards only by the thread that
  // wins the CAS on `state` (acquiring and releasing); `state` is atomic; the timer's own
  // state is the loop's (see `LoopTimer`).
  private static let waiting: UInt8 = 0
  private static let fired: UInt8 = 1
  private static let cancelledState: UInt8 = 2

  private let state = Atomic<UInt8>(0)
  /// Who keeps the timer and how its fire is submitted.
  enum Home: UInt8 {
    /// The I/O driver's timer heap (`DriverTimers`), which may run the work inline.
    case driver
    /// The service loop, whose fires are submitted in one batch per queue per pass (a
    /// virtual-time test's loop, or the fallback when the driver cannot start).
    case serviceLoop
    /// Another loop (the main loop, a test's loop): each fire is submitted at once.
    case loop
  }
  /// Immutable. Decided by the caller, which chose the heap or loop, so that neither this
  /// init nor a fire loads a loop. (Declared beside `state`, in its padding.)
  private let home: Home
  private var item: DelayedWorkItem?
  /// The queue the work will be submitted to.
  public let queue: Queue

  /// A timer on `loop` (`home` `.serviceLoop` or `.loop`).
  init(
    queue: Queue, loop: EventLoop, deadline: Deadline, item: DelayedWorkItem,
    firesInBatches: Bool
  ) {
    self.queue = queue
    self.item = item
    self.home = firesInBatches ? .serviceLoop : .loop
    super.init(loop: loop, deadline: deadline)
  }

  /// A timer for the driver timer heap (`DriverTimers`).
  init(queue: Queue, driverDeadline deadline: Deadline, item: DelayedWorkItem) {
    self.queue = queue
    self.item = item
    self.home = .driver
    super.init(unattachedDeadline: deadline)
  }

  /// Stops the work from being submitted. The closure, and what it captured, is released
  /// before `cancel()` returns. No effect once the work has been submitted.
  public override func cancel() {
    // Whoever moves `state` off "waiting" first owns `item`.
    let previous = state.bitwiseOr(Self.cancelledState, ordering: .acquiringAndReleasing).oldValue
    if previous == Self.waiting {
      item = nil
    }
    super.cancel()  // Marks the timer; a driver timer is on no loop, so nothing more.
    // Still waiting: the timer is in the heap, or being popped (then `remove` finds it out).
    if home == .driver && previous == Self.waiting { DriverTimers.shared?.remove(self) }
  }

  /// Takes the work if the timer wins it (not cancelled first); at most once.
  @inline(__always)
  func claimItem() -> DelayedWorkItem? {
    guard
      state.compareExchange(
        expected: Self.waiting, desired: Self.fired, ordering: .acquiringAndReleasing
      ).exchanged
    else { return nil }
    return item.take()
  }

  /// For a deadline already passed: submits the work at once, on the calling thread.
  func fireNow() {
    if let item = claimItem() { queue.submit(item) }
  }
}

extension Queue {
  /// Submits `work` to this queue no earlier than `delay` from now.
  ///
  /// Timers of the main queue (and of queues targeting it) live on the main loop; the others
  /// on LoopDispatch's I/O driver, whose thread runs the work where the timer fired when
  /// this queue is serial and idle, and otherwise enqueues it here. A delay of zero or less
  /// behaves like ``async(flags:execute:)``.
  @discardableResult
  public func after(_ delay: Duration, execute work: @escaping @Sendable () -> Void) -> DelayedWork
  {
    after(deadline: .now + delay, execute: work)
  }

  /// Submits `work` to this queue no earlier than `deadline` (monotonic clock).
  /// ``Deadline/distantFuture`` never fires.
  @discardableResult
  public func after(
    deadline: Deadline, execute work: @escaping @Sendable () -> Void
  ) -> DelayedWork {
    scheduleDelayed(.closure(work), at: deadline)
  }

  /// `after(deadline:execute:)` with a C function and its context (`dispatch_after_f`): the
  /// timer is the only allocation.
  @discardableResult
  package func after(deadline: Deadline, _ call: CFunctionCall) -> DelayedWork {
    scheduleDelayed(.function(call), at: deadline)
  }

  /// `after(deadline:execute:)` with the timer on `loop`, whose clock `deadline` is read
  /// against: tests pass a virtual-time loop (`EventLoop(clock: .virtual())`) and drive it.
  /// Only the service loop's fires are batched. (The main loop is tested first so that
  /// main-queue timers never start the service loop.)
  @discardableResult
  package func after(
    deadline: Deadline, on loop: EventLoop, execute work: @escaping @Sendable () -> Void
  ) -> DelayedWork {
    scheduleDelayed(
      .closure(work), at: deadline, on: loop,
      firesInBatches: loop !== EventLoop.main && loop === ServiceLoop.shared)
  }

  /// Schedules `item` where this queue's timers are kept: the main loop for a chain ending
  /// at the main queue (fires submitted at once, onto the loop's own thread), else the I/O
  /// driver's timer heap (`DriverTimers`: fires run inline on an idle serial queue, else are
  /// batched), or the service loop if the driver could not start.
  @inline(__always)
  private func scheduleDelayed(_ item: DelayedWorkItem, at deadline: Deadline) -> DelayedWork {
    if root.kind == .main {
      return scheduleDelayed(item, at: deadline, on: EventLoop.main, firesInBatches: false)
    }
    if let timers = DriverTimers.shared {
      let delayed = DelayedWork(queue: self, driverDeadline: deadline, item: item)
      let nanoseconds = deadline.uptimeNanoseconds
      if nanoseconds <= Deadline.now.uptimeNanoseconds {
        delayed.fireNow()
      } else {
        timers.schedule(delayed, deadline: nanoseconds)
      }
      return delayed
    }
    return scheduleDelayed(item, at: deadline, on: ServiceLoop.shared, firesInBatches: true)
  }

  private func scheduleDelayed(
    _ item: DelayedWorkItem, at deadline: Deadline, on loop: EventLoop, firesInBatches: Bool
  ) -> DelayedWork {
    let delayed = DelayedWork(
      queue: self, loop: loop, deadline: deadline, item: item, firesInBatches: firesInBatches)
    if deadline <= loop.now {
      delayed.fireNow()
    } else {
      loop.schedule(delayed)
    }
    return delayed
  }

  /// Submits a fired timer's work, as `async` would.
  @inline(__always)
  func submit(_ item: DelayedWorkItem) {
    switch item {
    case .closure(let body): async(execute: body)
    case .function(let call): async(call, barrier: false)
    }
  }

  /// Submits `work` to this queue no earlier than the wall-clock time `wallDeadline`.
  ///
  /// The wall time is converted to the monotonic clock when scheduling; later changes of the
  /// system clock do not move the timer.
  @discardableResult
  public func after(
    wallDeadline: WallDeadline, execute work: @escaping @Sendable () -> Void
  ) -> DelayedWork {
    after(deadline: wallDeadline.monotonicEquivalent, execute: work)
  }

  /// Submits `item` to this queue no earlier than `deadline`; cancelling the item stops it.
  @discardableResult
  public func after(deadline: Deadline, execute item: WorkItem) -> DelayedWork {
    after(deadline: deadline) { item.perform() }
  }
}

extension DelayedWork: LoopTimerTarget {
  /// The timer fired (loop thread). On the service loop the work joins the pass's batch
  /// (`TimerFireBatch`, submitted once per queue when the pass ends); on the main loop it is
  /// submitted at once (its queue's chain ends at the main queue, whose items run on this
  /// same thread: no wake-up to save).
  package func loopTimerFired() {
    guard let item = claimItem() else { return }
    if home == .serviceLoop {
      TimerFireBatch.service.add(item, to: queue)
    } else {
      queue.submit(item)
    }
  }
}
