import CLibevent
import CLoopShims
import Glibc
import Synchronization

/// One libevent `event_base` (epoll backend) driven by exactly one thread.
///
/// A loop turn:
/// 1. `epoll_wait` (inside libevent) sleeps until a descriptor is ready, a signal arrives,
///    the timer descriptor expires or another thread posts work (the wake eventfd).
/// 2. libevent runs the handler of everything that poll found ready, in the order epoll
///    reported it. All events share one libevent priority, so no order between the kinds is
///    enforced: ready fd and signal watches run their handlers; the timer descriptor's
///    handler runs every timer whose deadline has passed, in deadline order, and re-arms it;
///    the wake eventfd's handler runs a bounded batch of posted closures (``batchLimit``).
///    A timer due while fd handlers run may therefore fire before or after them in the same
///    turn, and a post may run before a ready descriptor's handler.
/// 3. After the poll, if no batch of posts ran in step 2 but posts are waiting (they reached
///    the loop while it was awake, so no eventfd write was needed), one batch runs now.
/// 4. ``run()`` checks for ``stop()`` and its bound. The next poll blocks only when no post
///    waits; the loop marks itself asleep just before (after a short spin if it just ran
///    posted work), so posts reach an awake loop without any system call
///    (`EventLoop+Execute.swift`).
///
/// Threading: the loop is bound to the first thread that runs it (``main`` is bound to the
/// process main thread from the start). The `event_base` and all loop-thread-only state are
/// touched only by that thread; other threads talk to the loop through ``execute(_:)``,
/// ``stop()`` and the thread-safe registration and cancel calls, which post to the inbox.
public final class EventLoop: @unchecked Sendable {
  // @unchecked Sendable: cross-thread state is atomic (`wakePending`, `stopRequested`,
  // `ownerThread`, `running`, `virtualNanoseconds`, counters) or the lock-free `inbox`;
  // everything else is immutable or only touched on the loop thread, as each property states.

  /// The loop's name, for diagnostics.
  public let name: String

  /// How many posted closures one turn runs at most before polling descriptors again.
  public let batchLimit: Int

  /// The libevent base. Only touched on the loop thread.
  let base: OpaquePointer
  /// eventfd that wakes the loop when work is posted. Immutable.
  let wakeFD: Int32
  /// timerfd armed for the earliest timer (absolute `CLOCK_MONOTONIC`). Immutable.
  let timerFD: Int32
  /// Internal events for `wakeFD` and `timerFD`. Only touched on the loop thread.
  private var wakeEvent: OpaquePointer?
  private var timerEvent: OpaquePointer?

  /// Posted closures. Lock-free; consumed only on the loop thread.
  let inbox = Inbox()
  /// Atomic. True while the loop is awake or a wake-up is owed: producers write the eventfd
  /// only when they flip it from false to true (see `EventLoop+Execute.swift`).
  let wakePending = Atomic<Bool>(false)
  /// Whether posted work ran since the last `prepareToSleep`. Only touched on the loop thread.
  var ranPostsSinceSleepCheck = false
  /// Whether the current turn ran a batch of posts. Only touched on the loop thread.
  var batchRanThisTurn = false
  /// The longest the loop spins for a post before sleeping, after a turn that ran posted
  /// work (0: never). Immutable: 50 µs for ``main`` (it hands work to the pool and waits for
  /// replies), 0 for other loops.
  let idleSpinLimitNanoseconds: UInt64
  /// The shortest spin once spinning started paying nothing (see `spinForPosts`): 40 µs for
  /// ``main``. Immutable.
  let idleSpinFloorNanoseconds: UInt64
  /// The next spin's budget (adaptive, see `spinForPosts`). Only touched on the loop thread.
  var spinBudgetNanoseconds: UInt64
  /// Atomic. Set by `stop()`, consumed by `run`.
  let stopRequested = Atomic<Bool>(false)
  /// Atomic. Whether a `run` is in progress (guards re-entrance).
  let running = Atomic<Bool>(false)
  /// Atomic. The bound thread's `pthread_t`, or 0 while unbound. Written once.
  private let ownerThread = Atomic<UInt>(0)
  /// Immutable. Whether the loop is bound to the process main thread.
  let isMainLoop: Bool

  /// Atomic. Timers scheduled from other threads, not yet in the heap: the opaque pointer of
  /// the newest (0: none), each linking to the next and retained by the stack (see
  /// `EventLoop+Timers.swift`). Popped by the loop thread, or by `deinit`.
  let pendingInsertions = Atomic<UInt>(0)
  /// Atomic. `armedTimerDeadline` as other threads see it (0: disarmed): a timer they
  /// schedule at or after it need not wake the loop, which inserts it when it wakes for
  /// that deadline anyway (`EventLoop+Timers.swift`). Written by the loop thread whenever it
  /// sets the timer descriptor.
  let armedDeadlineForSchedulers = Atomic<UInt64>(0)
  /// Timers ordered by deadline. Only touched on the loop thread.
  var timers = TimerHeap()
  /// The deadline the timer descriptor is armed for (0: disarmed). Only touched on the loop thread.
  var armedTimerDeadline: UInt64 = 0
  /// Whether the timer descriptor expired and has not been set since: it stays readable
  /// until the next `timerfd_settime`, which resets its count (so no `read` is needed; see
  /// `handleTimerExpiry`). Only touched on the loop thread.
  var timerFDExpired = false
  /// Whether `fireTimerPasses` is running: timers inserted meanwhile (pending ones, or from
  /// handlers) leave the descriptor to the re-arm that ends it. Only touched on the loop
  /// thread.
  var firingTimers = false
  /// What this loop's timers hold instead of the loop (see `LoopAnchor`). Set once, at the
  /// end of `init`, before the loop is shared; read-only afterwards.
  private(set) var timerAnchor: LoopAnchor!
  /// When the timer descriptor last fired (the clock reading of that expiry; 0: never).
  /// Only touched on the loop thread.
  var lastTimerExpiry: UInt64 = 0
  /// When the timer descriptor is set early for a far deadline, and what it learnt of the
  /// wake-up delay (`EarlyWake`). Only touched on the loop thread.
  var earlyWake = EarlyWake()
  /// The clock reading as the loop entered its current poll, if that poll may block and the
  /// timer descriptor is set for an instant still ahead (`EarlyWake.learnsAtNextExpiry`);
  /// 0 otherwise. Written by `drive` before each poll, read by `handleTimerExpiry`. Only
  /// touched on the loop thread.
  var sleptSince: UInt64 = 0
  /// Atomic. Expiries of a timer descriptor set early (for tests).
  let earlyTimerWakes = Atomic<UInt64>(0)
  /// Runs after each pass of fired timers. Set before the loop runs (by the thread that
  /// starts it, which happens-before the loop thread's reads), then only read on the loop
  /// thread.
  var timerPassObserver: (@Sendable () -> Void)?
  /// Atomic. Number of fd and signal registrations currently added to the base.
  let liveRegistrations = Atomic<Int>(0)
  /// Atomic. Number of timers scheduled and not yet finished or removed.
  let liveTimers = Atomic<Int>(0)
  /// Atomic. Completed loop turns.
  let turns = Atomic<UInt64>(0)
  /// Atomic. fd and signal events whose handler ran. Written only by the loop thread.
  let eventsRun = Atomic<UInt64>(0)
  /// Atomic. Timer firings (each period of a repeating timer counts). Written only by the
  /// loop thread.
  let timersFired = Atomic<UInt64>(0)
  /// Atomic. Writes to the wake eventfd (one per batch of posts, not one per post).
  let wakeWrites = Atomic<UInt64>(0)
  /// Registered fd watches by descriptor number (see `EventLoop+Descriptors.swift`). Only
  /// touched on the loop thread.
  var watchesByDescriptor: [Int32: [EventRegistration]] = [:]
  /// Immutable. Whether the timers read `virtualNanoseconds` instead of `CLOCK_MONOTONIC`
  /// and the loop is driven by `advance(to:)` (see `EventLoop+VirtualTime.swift`).
  let isVirtualTime: Bool
  /// Atomic. The virtual clock (unused on a real loop). Written only on the loop thread (the
  /// driving thread), monotonically; read anywhere (relaxed: a reading, not a handoff).
  let virtualNanoseconds: Atomic<UInt64>

  /// The loop bound to the process main thread: the loop that `Queue.main` drains.
  public static let main = EventLoop(name: "main", boundToMainThread: true)

  /// Creates a loop that binds to the first thread that runs it.
  ///
  /// - Parameters:
  ///   - name: A name for diagnostics.
  ///   - batchLimit: Posted closures run per turn at most (at least 1).
  public convenience init(name: String = "event-loop", batchLimit: Int = 1024) {
    self.init(name: name, boundToMainThread: false, batchLimit: batchLimit)
  }

  /// Creates a loop whose timers read `clock`. A ``LoopClock/virtual(startingAt:)`` loop is
  /// driven by the test that owns it (`advance(by:)`, `advance(to:)`) instead of `run`.
  package convenience init(name: String = "event-loop", batchLimit: Int = 1024, clock: LoopClock) {
    self.init(name: name, boundToMainThread: false, batchLimit: batchLimit, clock: clock)
  }

  /// Creates a loop that lives as long as the process (LoopDispatch's service loop): its
  /// timers hold it strongly, through its anchor, instead of weakly (see `LoopAnchor`).
  package convenience init(processLifetimeName name: String) {
    self.init(name: name, boundToMainThread: false, livesForever: true)
  }

  init(
    name: String, boundToMainThread: Bool, batchLimit: Int = 1024,
    clock: LoopClock = .monotonic, livesForever: Bool = false
  ) {
    if batchLimit < 1 { clientBug("EventLoop batchLimit must be at least 1, got \(batchLimit)") }
    EventLoop.enableLibeventThreading
    self.name = name
    self.batchLimit = batchLimit
    self.isMainLoop = boundToMainThread
    switch clock {
    case .monotonic:
      self.isVirtualTime = false
      self.virtualNanoseconds = Atomic(0)
    case .virtual(let start):
      self.isVirtualTime = true
      self.virtualNanoseconds = Atomic(start.uptimeNanoseconds)
    }
    self.idleSpinLimitNanoseconds = boundToMainThread ? 50_000 : 0
    self.idleSpinFloorNanoseconds = boundToMainThread ? 40_000 : 0
    self.spinBudgetNanoseconds = self.idleSpinLimitNanoseconds
    self.base = EventLoop.makeBase()
    let wake = cls_eventfd(0, cls_efd_nonblock_cloexec)
    let timer = cls_timerfd_create_monotonic()
    if wake < 0 || timer < 0 { internalBug("eventfd/timerfd creation failed: errno \(errno)") }
    self.wakeFD = wake
    self.timerFD = timer
    installInternalEvents()
    // A virtual loop never sleeps, so it always counts as awake: producers never write the
    // eventfd; the driver finds their posts after each step. Relaxed: not yet shared.
    if isVirtualTime { wakePending.store(true, ordering: .relaxed) }
    // The main loop is a global constant: it lives as long as the process, too.
    timerAnchor = LoopAnchor(self, livesForever: livesForever || boundToMainThread)
  }

  deinit {
    if running.load(ordering: .relaxed) {
      internalBug("EventLoop \(name) deallocated while running")
    }
    // Timers refer to the loop weakly, so pending ones (in the heap or still on
    // `pendingInsertions`) do not keep it alive: release their handlers here.
    releaseTimersAtDeinit()
    if let wakeEvent { event_free(wakeEvent) }
    if let timerEvent { event_free(timerEvent) }
    event_base_free(base)
    Syscall.closeOwned(wakeFD)
    Syscall.closeOwned(timerFD)
  }

  /// The raw libevent `event_base`, for your own libevent events.
  ///
  /// The base is created without libevent's internal lock (each base belongs to one thread):
  /// touch it only on the loop thread, for example inside ``execute(_:)``.
  public var rawBase: OpaquePointer { base }

  /// Whether the calling thread is the loop's thread.
  public var isInLoopThread: Bool {
    if isMainLoop { return cls_is_main_thread_cached() != 0 }
    let owner = ownerThread.load(ordering: .acquiring)
    return owner != 0 && owner == pthread_self()
  }

  /// The loop's clock reading: `CLOCK_MONOTONIC` (``Deadline/now``), or the virtual time of
  /// a virtual-time loop. Any thread.
  package var now: Deadline { Deadline(uptimeNanoseconds: currentTimeNanoseconds()) }

  /// The time at which the main loop's current turn collected its events, in microseconds:
  /// libevent's copy, taken once per turn right after `epoll_wait` returns, so reading it
  /// makes no clock call (and retains no loop: for per-event paths). It follows the wall
  /// clock (libevent adds its offset to the monotonic clock), so it may jump when the wall
  /// clock is set: use it for rough intervals that tolerate a jump either way. Outside the
  /// loop's event handlers libevent reads the clock instead. Main thread only.
  package static func mainTurnMicroseconds() -> UInt64 {
    var time = timeval()
    guard event_base_gettimeofday_cached(mainBase, &time) == 0 else { return 0 }
    return UInt64(time.tv_sec) &* 1_000_000 &+ UInt64(time.tv_usec)
  }

  /// The main loop's base; the loop is a `static let`, so it and its base live forever.
  /// `nonisolated(unsafe)`: written once (the lazy global's initialiser), then only read;
  /// the base it points at is touched on the main thread only.
  private nonisolated(unsafe) static let mainBase = main.base

  /// What the timer code reads instead of `monotonicNanoseconds()`: on a real loop one
  /// predictable branch on an immutable flag, then the vDSO call. Any thread.
  @inline(__always)
  func currentTimeNanoseconds() -> UInt64 {
    isVirtualTime ? virtualNanoseconds.load(ordering: .relaxed) : monotonicNanoseconds()
  }

  /// Whether ``run()`` (or a bounded run) is in progress.
  public var isRunning: Bool { running.load(ordering: .acquiring) }

  /// Number of fd and signal watches currently registered (not counting internal events).
  public var registeredWatchCount: Int { liveRegistrations.load(ordering: .relaxed) }

  /// Number of timers scheduled and not yet finished or cancelled-and-removed.
  public var pendingTimerCount: Int { liveTimers.load(ordering: .relaxed) }

  /// Number of completed loop turns.
  public var turnCount: UInt64 { turns.load(ordering: .relaxed) }

  /// Number of fd and signal events whose handler ran.
  public var eventCount: UInt64 { eventsRun.load(ordering: .relaxed) }

  /// Number of timer firings (each period of a repeating timer counts once).
  public var timerFireCount: UInt64 { timersFired.load(ordering: .relaxed) }

  /// Number of wake-ups written to the loop's eventfd: one per batch of posts that found the
  /// loop without a pending wake-up, not one per post.
  public var wakeupCount: UInt64 { wakeWrites.load(ordering: .relaxed) }

  /// Number of events libevent has added to the base, internal ones excluded. Loop thread
  /// only; used by teardown checks.
  public var libeventAddedEventCount: Int {
    precondition(isInLoopThread || !isRunning, "libeventAddedEventCount read off the loop thread")
    return Int(event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED)) - 2
  }

  func registrationAdded() { liveRegistrations.wrappingAdd(1, ordering: .relaxed) }
  func registrationRemoved() { liveRegistrations.wrappingSubtract(1, ordering: .relaxed) }

  /// Binds the loop to the calling thread, or traps if it is bound to another one.
  func bindToCurrentThread() {
    if isMainLoop {
      if cls_is_main_thread_cached() == 0 {
        clientBug(
          "EventLoop.main must run on the process main thread, not on thread \"\(NativeThread.currentName)\""
        )
      }
      return
    }
    let me = pthread_self()
    let (bound, current) = ownerThread.compareExchange(
      expected: 0, desired: me, ordering: .acquiringAndReleasing)
    if !bound && current != me {
      clientBug(
        "EventLoop \"\(name)\" is bound to another thread; a loop is driven by exactly one thread")
    }
  }

  // MARK: - Setup

  /// Runs `evthread_use_pthreads()` once, before this process creates its first base, so
  /// libevent's process-wide state (signal routing between bases) is lock-protected.
  private static let enableLibeventThreading: Void = {
    if evthread_use_pthreads() != 0 { internalBug("evthread_use_pthreads failed") }
  }()

  private static func makeBase() -> OpaquePointer {
    guard let config = event_config_new() else { internalBug("event_config_new failed") }
    defer { event_config_free(config) }
    // Each base is touched by one thread only, so skip libevent's base lock; ignore EVENT_*
    // environment variables so behaviour does not change under users' feet; epoll only.
    let flags = EVENT_BASE_FLAG_NOLOCK.rawValue | EVENT_BASE_FLAG_IGNORE_ENV.rawValue
    _ = event_config_set_flag(config, Int32(flags))
    _ = event_config_avoid_method(config, "select")
    _ = event_config_avoid_method(config, "poll")
    guard let base = event_base_new_with_config(config) else {
      internalBug("event_base_new_with_config failed (no epoll?)")
    }
    return base
  }

  private func installInternalEvents() {
    // Safe: both events hold an unretained pointer to `self`; they are freed in `deinit`
    // before `self` goes away, and only the loop thread dispatches them.
    let context = Unmanaged.passUnretained(self).toOpaque()
    wakeEvent = event_new(
      base, wakeFD, cl_ev_read | cl_ev_persist,
      { _, _, context in
        Unmanaged<EventLoop>.fromOpaque(context!).takeUnretainedValue().handleWake()
      }, context)
    timerEvent = event_new(
      base, timerFD, cl_ev_read | cl_ev_persist,
      { _, _, context in
        Unmanaged<EventLoop>.fromOpaque(context!).takeUnretainedValue().handleTimerExpiry()
      }, context)
    guard let wakeEvent, let timerEvent, event_add(wakeEvent, nil) == 0,
      event_add(timerEvent, nil) == 0
    else { internalBug("could not add the loop's internal events") }
  }
}
