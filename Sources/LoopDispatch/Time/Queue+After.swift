import MainLoop
import Synchronization

/// A handle to work scheduled with ``Queue/after(_:execute:)``; cancel it before it fires.
///
/// Walk-through: `state` leaves "waiting" exactly once: by a CAS to "fired" (the timer's
/// loop submits the work) or by `cancel()` setting the "cancelled" bit first (the closure is
/// released by `cancel()` itself). Only the winner touches `work`; a later `cancel()` only
/// sets its bit. The timer is kept in `timerCell` (retained) so that
/// `cancel()` can also remove it from its loop; whoever takes it out releases it.
///
/// Thread-safety: any thread.
public final class DelayedWork: @unchecked Sendable {
  // @unchecked Sendable: `work` is written in init and afterwards only by the thread that
  // wins the CAS on `state` (acquiring and releasing); `state` and `timerCell` are atomic.
  private static let waiting: UInt8 = 0
  private static let fired: UInt8 = 1
  private static let cancelledState: UInt8 = 2

  private let state = Atomic<UInt8>(0)
  private var work: (@Sendable () -> Void)?
  /// Atomic. A retained `LoopTimer`, or nil.
  private let timerCell = Atomic<UnsafeMutableRawPointer?>(nil)
  /// The queue the work will be submitted to.
  public let queue: Queue

  init(queue: Queue, work: @escaping @Sendable () -> Void) {
    self.queue = queue
    self.work = work
  }

  deinit {
    releaseTimer(cancelling: false)
  }

  /// Stops the work from being submitted. The closure, and what it captured, is released
  /// before `cancel()` returns. No effect once the work has been submitted.
  public func cancel() {
    // Whoever moves `state` off "waiting" first owns `work`.
    let previous = state.bitwiseOr(Self.cancelledState, ordering: .acquiringAndReleasing).oldValue
    if previous == Self.waiting {
      work = nil
    }
    releaseTimer(cancelling: true)
  }

  /// Whether ``cancel()`` has been called (also after the work was submitted).
  public var isCancelled: Bool {
    state.load(ordering: .acquiring) & Self.cancelledState != 0
  }

  /// Keeps `timer` so that `cancel()` can remove it.
  func attach(_ timer: LoopTimer) {
    let retained = Unmanaged.passRetained(timer).toOpaque()
    if !timerCell.compareExchange(
      expected: nil, desired: retained, ordering: .acquiringAndReleasing
    )
    .exchanged {
      Unmanaged<LoopTimer>.fromOpaque(retained).release()
    }
    // Cancelled meanwhile: the cancel may have found the cell still empty.
    if isCancelled { releaseTimer(cancelling: true) }
  }

  /// Runs on the timer's loop (or at once for a deadline already passed): submits the work
  /// unless cancelled.
  func fire() {
    if claim(Self.fired), let work = work.take() {
      queue.async(execute: work)
    }
    releaseTimer(cancelling: false)
  }

  private func claim(_ final: UInt8) -> Bool {
    state.compareExchange(
      expected: Self.waiting, desired: final, ordering: .acquiringAndReleasing
    ).exchanged
  }

  private func releaseTimer(cancelling: Bool) {
    guard let raw = timerCell.exchange(nil, ordering: .acquiringAndReleasing) else { return }
    let timer = Unmanaged<LoopTimer>.fromOpaque(raw).takeRetainedValue()
    if cancelling { timer.cancel() }
  }
}

extension Queue {
  /// Submits `work` to this queue no earlier than `delay` from now.
  ///
  /// Timers of the main queue live on the main loop; the others on LoopDispatch's service
  /// thread, which enqueues the work here when it fires. A delay of zero or less behaves
  /// like ``async(flags:execute:)``.
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
    let delayed = DelayedWork(queue: self, work: work)
    if deadline <= .now {
      delayed.fire()
      return delayed
    }
    let timer = ServiceLoop.loop(for: self).schedule(at: deadline, target: delayed)
    delayed.attach(timer)
    return delayed
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
  /// The timer fired (loop thread): the work goes to its queue. The timer itself is the
  /// handler's only allocation besides this object (no closure per `after`).
  package func loopTimerFired() { fire() }
}
