import Synchronization

/// A one-shot or repeating timer on an ``EventLoop``.
///
/// Created by ``EventLoop/schedule(at:_:)`` and its siblings. The handler runs on the loop
/// thread no earlier than the deadline (checked against `CLOCK_MONOTONIC`, never libevent's
/// coarse cached clock). Thread-safety: `cancel()`, `isCancelled` and `loop` may be used from
/// any thread; everything else about the timer is owned by its loop.
///
/// Lifetime: the loop keeps its pending timers, but a timer refers to its loop only weakly, so
/// a loop that nobody else references is deinitialised with timers pending; that releases
/// their handlers, and cancelling such a timer afterwards does nothing. (A handler that
/// captures its own loop does keep it alive, until the timer is done or cancelled.)
///
/// The class is open only so that LoopDispatch's `DelayedWork` can be its own timer (one
/// object per `after`); its initialisers are package-only, so no other subclass can exist.
open class LoopTimer: @unchecked Sendable {
  // @unchecked Sendable: `deadline`, `heapState`, `sequence`, `handler` and
  // `nextPendingInsertion` are only touched on the loop thread (an unattached timer's heap
  // fields: under the lock of the heap that keeps it) (they are written before the
  // timer is published to it, through the pending-insertion stack, or by the loop itself, or
  // by its deinit, which every loop-thread access happens-before); `cancelled` is atomic;
  // `anchor` is immutable and its weak reference's loads are thread-safe.

  /// The loop's anchor: a weak reference to the loop, shared by all its timers.
  let anchor: LoopAnchor

  /// The loop that owns this timer, or nil once that loop has been deinitialised. (Also nil
  /// for LoopDispatch's `after` timers of queues that do not target the main queue: they are
  /// kept by the I/O driver, on no loop.)
  ///
  /// Weak, so that pending timers do not keep their loop alive. Thread-safety: any thread; a
  /// non-nil result is a strong reference, so the loop stays alive while it is used.
  public final var loop: EventLoop? { anchor.loop }
  /// The repeat interval in nanoseconds; 0 for a one-shot timer.
  let intervalNanoseconds: UInt64
  /// Next due time. Only touched on the loop thread once scheduled.
  var deadline: UInt64
  /// Tie-breaker so equal deadlines fire in scheduling order. Only touched on the loop thread.
  var sequence: UInt64 = 0
  /// What the timer does; dropped (releasing the closure's captures, or the reference a
  /// self-handling timer holds on itself) once the timer is done or cancelled. Only touched
  /// on the loop thread once scheduled.
  var handler: LoopTimerAction?
  // The one-byte fields follow the 17-byte `handler` so that they fill its padding (the
  // stored properties are laid out in declaration order): see `DelayedWork` for why the
  // size matters.
  /// Whether the timer is in its loop's heap, and if so whether it was removed from it
  /// (cancelled: removal is lazy, see `TimerHeap`). Only touched on the loop thread.
  package internal(set) var heapState: TimerHeap.Membership = .outside
  /// Atomic. Set once by `cancel()`; the loop checks it (acquiring) before each fire.
  private let cancelled = Atomic<Bool>(false)

  init(loop: EventLoop, deadline: UInt64, interval: UInt64, handler: @escaping @Sendable () -> Void)
  {
    self.anchor = loop.timerAnchor
    self.deadline = deadline
    self.intervalNanoseconds = interval
    self.handler = .closure(handler)
  }

  /// A one-shot timer for package code that handles its own fire (a `LoopTimerTarget`);
  /// `EventLoop.schedule(_:)` sets that handler when it schedules the timer.
  package init(loop: EventLoop, deadline: Deadline) {
    self.anchor = loop.timerAnchor
    self.deadline = deadline.uptimeNanoseconds
    self.intervalNanoseconds = 0
  }

  /// A one-shot timer on no loop, for package code that keeps it in a heap of its own
  /// (LoopDispatch's driver timers, `DriverTimers`): ``loop`` is nil, ``cancel()`` only
  /// marks it, and its heap fields are protected by whoever keeps that heap.
  package init(unattachedDeadline deadline: Deadline) {
    self.anchor = LoopAnchor.unattached
    self.deadline = deadline.uptimeNanoseconds
    self.intervalNanoseconds = 0
  }

  /// Loop thread only (an unattached timer: its heap's owner): the next timer waiting to be
  /// inserted (see `EventLoop+Timers.swift`, LoopDispatch's `DriverTimers`).
  package var nextPendingInsertion: Unmanaged<LoopTimer>?

  /// Takes every timer pushed onto `stack` (a lock-free stack of timer addresses linked
  /// through `nextPendingInsertion`, newest first, each holding one retain) and calls `body`
  /// with each, in the order they were pushed (per pushing thread); the stack's retain is
  /// dropped after each call. Only the stack's one consumer calls this (a loop thread, or the
  /// holder of `DriverTimers`' lock).
  package static func takePending(from stack: borrowing Atomic<UInt>, _ body: (LoopTimer) -> Void) {
    guard stack.load(ordering: .relaxed) != 0 else { return }
    // Acquiring: the pushers' timers and links are visible.
    let head = stack.exchange(0, ordering: .acquiring)
    var reversed: Unmanaged<LoopTimer>?
    var node =
      head == 0 ? nil : Unmanaged<LoopTimer>.fromOpaque(UnsafeRawPointer(bitPattern: head)!)
    while let current = node {
      // Safe: each node on the stack holds the retain its pusher took for it.
      let timer = current.takeUnretainedValue()
      node = timer.nextPendingInsertion
      timer.nextPendingInsertion = reversed
      reversed = current
    }
    while let current = reversed {
      let timer = current.takeRetainedValue()  // The stack's retain, dropped after `body`.
      reversed = timer.nextPendingInsertion
      timer.nextPendingInsertion = nil
      body(timer)
    }
  }

  /// Whether ``cancel()`` has been called.
  public final var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

  /// Whether the timer repeats.
  public final var isRepeating: Bool { intervalNanoseconds != 0 }

  /// Cancels the timer. Safe from any thread and idempotent.
  ///
  /// Once `cancel()` has returned, the handler does not start again. Called on the loop
  /// thread, the closure (and what it captured) is released before `cancel()` returns;
  /// from another thread, it is released on the loop's next turn, or when the loop is
  /// deinitialised. After the loop is gone, `cancel()` only marks the timer cancelled.
  open func cancel() {
    // Releasing; pairs with the acquiring load in `EventLoop.fireTimersDue(at:)`.
    if cancelled.exchange(true, ordering: .acquiringAndReleasing) { return }
    // nil: the loop's deinit has begun (or finished); it releases the handler itself.
    guard let loop else { return }
    if loop.isInLoopThread {
      loop.removeTimer(self)
    } else {
      // Captures the timer, not the loop: an inbox closure holding its loop would keep a
      // loop that never runs again alive. On the loop thread the weak load succeeds.
      loop.execute { [self] in self.loop?.removeTimer(self) }
    }
  }
}

/// What a loop's timers refer to instead of the loop: one object per loop. Each timer
/// retains the anchor (as timers once retained the loop), and the anchor refers to the loop
/// weakly, so pending timers do not keep their loop alive.
///
/// Except for a loop that lives as long as the process (the main loop, LoopDispatch's service
/// loop), which the anchor holds strongly: any weak reference to an object gives it a side
/// table, and from then on every retain and release of it takes Swift's slow path. On the
/// service loop, which `after` retains and releases from the scheduling thread while its own
/// thread does the same, that cost about 55 ns per `after` (171 -> 236 ns in the timers
/// benchmark). Such a loop is never deinitialised anyway.
final class LoopAnchor: Sendable {
  /// The loop, until its deinit begins (loops that may be released).
  private weak let weakLoop: EventLoop?
  /// The loop, for loops that live as long as the process (a deliberate cycle: loop ->
  /// anchor -> loop, for objects that are never released).
  private let immortalLoop: EventLoop?

  /// The anchor of timers on no loop (`LoopTimer.init(unattachedDeadline:)`).
  static let unattached = LoopAnchor()

  private init() {
    immortalLoop = nil
    weakLoop = nil
  }

  init(_ loop: EventLoop, livesForever: Bool) {
    if livesForever {
      immortalLoop = loop
      weakLoop = nil
    } else {
      immortalLoop = nil
      weakLoop = loop
    }
  }

  /// The loop, or nil once it has begun to deinitialise. Any thread.
  var loop: EventLoop? { immortalLoop ?? weakLoop }
}

/// What a timer does when it fires: a closure, or a call on an object that is its own
/// handler (LoopDispatch's `after` uses that to allocate no closure).
enum LoopTimerAction {
  case closure(@Sendable () -> Void)
  case target(any LoopTimerTarget)

  @inline(__always)
  func run() {
    switch self {
    case .closure(let body): body()
    case .target(let target): target.loopTimerFired()
    }
  }
}

/// An object that handles its own timer's fire (for package code that must not allocate a
/// closure per timer). Called on the loop thread.
package protocol LoopTimerTarget: AnyObject, Sendable {
  func loopTimerFired()
}
