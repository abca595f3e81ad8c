import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// The I/O driver: readiness of the descriptors of sources that do not target the main queue,
/// delivered from one epoll set, with the handler run on the thread that saw the event. The
/// `after` timers of those queues fire here too, from one timerfd in the same set
/// (`Time/DriverTimers.swift`), and run their work inline by the same rules.
///
/// Walk-through of one event (a readable socket whose source targets an idle serial queue):
/// 1. The source registered its descriptor one-shot (`EPOLLONESHOT`) with a token naming its
///    entry (`IOEntry`: one registration per descriptor file, shared by all its read and
///    write sources; `IOEntry.swift` gives the multiplexing rules).
/// 2. The thread holding the *poller role* sleeps in `epoll_wait` and wakes with the event.
///    It looks the token up (a stale token — the entry was removed, its number perhaps
///    reused — is skipped) and hands readiness to every source of the fired interests.
/// 3. If the target queue's chain is serial and idle, and ends at the default lane or a
///    higher one (`lowestInlinePriority`), the poller claims it (as an uncontended `sync`
///    would) and runs the handler itself: no thread hop. Otherwise the delivery is queued on
///    the target like any other work.
/// 4. After the handler returns, the thread that ran it re-arms interest with `epoll_ctl`
///    (`rearm`, in `IODriver+Registration.swift`): a system call, never a post to a loop,
///    never a wake-up. With several sources of one interest, the last to finish re-arms.
///
/// A handler that blocks must not freeze other descriptors. Two driver threads share the role:
/// the poller releases the role for each inline handler; the other thread stands by, asleep
/// in `read` on a periodic 2 ms watchdog timer that runs while inline handlers do (started by
/// the first, stopped after two quiet periods, so an idle driver has no wake-ups). If the
/// standby sees the same handler still running at two expiries, it takes the role and polls,
/// so other descriptors wait at most ~4 ms for a blocked handler. Only one inline handler runs
/// at a time: while one runs, readiness is delivered through the target queues.
///
/// Who may touch what: the tables behind `lock` (entries by descriptor and by token, the owned
/// registrations and their fields); each entry's state behind the entry's own lock (the order
/// of the two: `IODriver+Registration.swift`); `role`, `inlineRunning` and the counters are
/// atomics; `epfd` and `watchdogFD` are immutable.
final class IODriver: @unchecked Sendable {
  // @unchecked Sendable: mutable state is behind `lock` or atomic, as stated above.

  /// How long an inline handler runs before the standby thread takes over polling.
  static let inlineBudgetNanoseconds: UInt64 = 2_000_000

  let epfd: Int32
  /// Blocking timerfd the standby sleeps on; armed while an inline handler runs.
  private let watchdogFD: Int32

  struct Tables {
    var byDescriptor: [Int32: IOEntry] = [:]
    var byToken: [UInt64: IOEntry] = [:]
    /// Descriptors sources own outright (`IODriver+Owned.swift`).
    var owned: [UInt64: OwnedRegistration] = [:]
    var nextToken: UInt64 = 1
  }
  /// Protected by: its lock, taken before an entry's own lock. Held for the tables, and by
  /// `register` and `unregister` (with the entry's lock inside it) and the owned
  /// registrations around their `epoll_ctl`s; the per-event paths hold it for a lookup only.
  /// An entry's fields and its `epoll_ctl`s are behind the entry's lock (`IOEntry.state`).
  let lock = LockedValue(Tables())

  /// Atomic. 1 while a driver thread holds the poller role (it alone calls `epoll_wait`).
  private let role = Atomic<Int>(0)
  /// Atomic. Whether an inline handler is running on a driver thread.
  private let inlineRunning = Atomic<Bool>(false)
  /// Atomic. Inline runs started (the standby tells a long run from a series of short ones).
  private let inlineSequence = Atomic<UInt64>(0)
  /// Atomic. Whether the periodic watchdog timer is running.
  private let watchdogArmed = Atomic<Bool>(false)
  /// Atomic. False if the standby thread could not be started: with nobody to take over from
  /// a blocked handler, every handler then runs on its queue (never inline).
  private let hasStandby = Atomic<Bool>(true)
  /// Atomic. Inline handlers run and events seen (for `RuntimeStats`).
  let inlineRuns = Atomic<UInt64>(0)
  let eventsSeen = Atomic<UInt64>(0)
  /// Atomic. Whether the driver timers' timerfd is set for an instant still ahead whose
  /// expiry could teach their wake-up delay (`EarlyWake.learnsAtNextExpiry`, stored under
  /// the timers' lock): the poller then reads the clock as it enters `epoll_wait`.
  /// Relaxed: a stale value costs one clock read, or one sample not taken, never a wrong
  /// sample (`EarlyWake` compares the reading with the instant itself).
  let timerLearnsAtExpiry = Atomic<Bool>(false)
  /// Atomic. The clock reading as the poller entered the `epoll_wait` whose events it is
  /// dispatching, if `timerLearnsAtExpiry` held then; otherwise 1, an instant before any the
  /// timerfd can be set for afterwards (a timer armed while the poller waits expires after
  /// it entered); 0 from the batch's second event on (only the first thing a wait handles
  /// can have waited for the wake-up).
  /// Written and read only by the poller-role holder, on its thread, while it holds the
  /// role (the role's acquiring and releasing exchanges order it between the two threads),
  /// hence relaxed. Read by `DriverTimers` at an expiry (`EarlyWake`, rule 1).
  let pollEnteredAt = Atomic<UInt64>(0)

  private init(epfd: Int32, watchdogFD: Int32) {
    self.epfd = epfd
    self.watchdogFD = watchdogFD
  }

  // MARK: Starting

  /// The running driver, published once by `start()`; never replaced. Lock-free to load
  /// (acquiring; pairs with the releasing `storeIfNil` in `startSlow`).
  private static let published = AtomicLazyReference<IODriver>()
  /// Serialises starts, so two first sources never make two drivers; counts the attempts.
  /// (A count, not `()`: ThreadSanitizer reports the accesses of a zero-size value, which
  /// shares its address with the mutex, as a race.) Protected by: itself.
  private static let starting = LockedValue(0)

  /// The driver if it runs (always on a driver thread, and for a source with an entry).
  static var running: IODriver? { published.load() }

  /// The driver, started on first use. Any thread.
  ///
  /// A start the system refuses (no descriptor left for the epoll set or the watchdog timer,
  /// `EMFILE`/`ENFILE`; no thread) is an error for the source that asked, with nothing kept:
  /// the next source tries again, so a process that ran out of descriptors recovers once it
  /// closes some.
  static func start() -> Result<IODriver, IORegistrationError> {
    if let driver = published.load() { return .success(driver) }
    return startSlow()
  }

  @inline(never)
  private static func startSlow() -> Result<IODriver, IORegistrationError> {
    starting.withLock { attempts -> Result<IODriver, IORegistrationError> in
      if let driver = published.load() { return .success(driver) }
      attempts &+= 1
      let epfd = cls_epoll_create()
      if epfd < 0 { return .failure(.init(code: errno)) }
      let watchdogFD = cls_timerfd_create_blocking()
      if watchdogFD < 0 {
        let code = errno
        close(epfd)
        return .failure(.init(code: code))
      }
      let driver = IODriver(epfd: epfd, watchdogFD: watchdogFD)
      do throws(ThreadSpawnError) {
        try NativeThread.spawnDetached(name: "ld.io.0") { driver.threadMain() }
      } catch {
        // No thread uses the descriptors yet: give them back.
        close(watchdogFD)
        close(epfd)
        return .failure(.init(code: error.code))
      }
      do {
        try NativeThread.spawnDetached(name: "ld.io.1") { driver.threadMain() }
      } catch {
        // ld.io.0 runs (and cannot be stopped): keep it as the only poller.
        driver.hasStandby.store(false, ordering: .relaxed)
        writeStandardError(
          "LoopDispatch: warning: could not start the I/O driver thread ld.io.1 (\(error)); "
            + "fd handlers run on their queues, never on the driver thread\n")
      }
      return .success(published.storeIfNil(driver))
    }
  }

  /// Registered descriptor files, 0 before the driver starts (for `RuntimeStats`).
  static var registeredCount: Int { running?.lock.withLock { $0.byToken.count } ?? 0 }
  /// Readiness events received (for `RuntimeStats`).
  static var eventCount: UInt64 { running?.eventsSeen.load(ordering: .relaxed) ?? 0 }
  /// Handlers run inline (for `RuntimeStats`).
  static var inlineCount: UInt64 { running?.inlineRuns.load(ordering: .relaxed) ?? 0 }

  /// Whether the calling thread is a driver thread.
  static var isDriverThread: Bool { DriverThreadMark.isSet }

  // MARK: Driver threads

  private func threadMain() {
    DriverThreadMark.set()
    while true {
      if role.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged {
        pollWhileHoldingRole()
      }
      standBy()
    }
  }

  /// Standing by: sleeps on the watchdog until an inline handler has run for a whole watchdog
  /// period (the same run seen at two expiries), then returns so the caller takes the role.
  /// A period with no inline run at all disarms the watchdog (an idle driver sleeps for good).
  private func standBy() {
    // About to sleep on the watchdog: no deferred pool wake-up may wait for this thread.
    WorkerPool.payOwedWake()
    var lastSequence = inlineSequence.load(ordering: .acquiring)
    var quietPeriods = 0
    while true {
      var expirations: UInt64 = 0
      _ = read(watchdogFD, &expirations, 8)
      let sequence = inlineSequence.load(ordering: .sequentiallyConsistent)
      if role.load(ordering: .acquiring) == 0 && inlineRunning.load(ordering: .acquiring)
        && sequence == lastSequence
      {
        return  // The same handler for a whole period: poll instead of it.
      }
      if sequence != lastSequence || inlineRunning.load(ordering: .acquiring) {
        lastSequence = sequence
        quietPeriods = 0
        continue
      }
      quietPeriods += 1
      if quietPeriods < 2 { continue }
      // No inline run for two periods: disarm, then look again (Dekker with `runInline`'s
      // sequence increment and flag load, both sequentially consistent).
      // Disarm first, then clear the flag: a runner that sees the flag cleared arms the timer
      // after our disarm, never before it.
      _ = cls_timerfd_set_periodic(watchdogFD, 0)
      watchdogArmed.store(false, ordering: .sequentiallyConsistent)
      if inlineSequence.load(ordering: .sequentiallyConsistent) != lastSequence {
        armWatchdog()
      }
      quietPeriods = 0
      if role.load(ordering: .acquiring) == 0 { return }
    }
  }

  /// Starts the periodic watchdog unless it runs already.
  private func armWatchdog() {
    if !watchdogArmed.load(ordering: .sequentiallyConsistent)
      && !watchdogArmed.exchange(true, ordering: .sequentiallyConsistent)
    {
      _ = cls_timerfd_set_periodic(watchdogFD, Self.inlineBudgetNanoseconds)
    }
  }

  /// Polls until this thread gives the role away (an inline handler it ran overran and the
  /// standby took over).
  ///
  /// Of the events one `epoll_wait` returns, only the last may run its handler inline: the
  /// others are queued onto their targets first, so that under load the pool's workers run
  /// them in parallel instead of this thread running them one after another. A lone event
  /// (a ping-pong, a quiet server) runs inline, with no hand-off at all.
  private func pollWhileHoldingRole() {
    var events = [UInt32](repeating: 0, count: Self.batchSize)
    var tokens = [UInt64](repeating: 0, count: Self.batchSize)
    while true {
      // A vDSO clock read (25 ns here), only while a timer could learn from its expiry
      // (`EarlyWake`). Otherwise 1: the timerfd may be armed from another thread while this
      // one waits, for an instant after the entry. (Wrong only if the arm and its expiry
      // both fall between this load and the wait, a few instructions apart.)
      pollEnteredAt.store(
        timerLearnsAtExpiry.load(ordering: .relaxed) ? Deadline.now.uptimeNanoseconds : 1,
        ordering: .relaxed)
      // Deliveries this thread queued may have left a parked worker asleep while every CPU
      // was taken (`WorkerPool+DeferredWake.swift`): the wait may block, so wake it now.
      WorkerPool.payOwedWake()
      let count = cls_epoll_wait_many(epfd, &events, &tokens, Int32(Self.batchSize), -1)
      guard count > 0 else { continue }  // EINTR
      eventsSeen.wrappingAdd(UInt64(count), ordering: .relaxed)
      for index in 0..<Int(count) {
        if index == 1 { pollEnteredAt.store(0, ordering: .relaxed) }
        if !dispatch(events: events[index], token: tokens[index], last: index == Int(count) - 1) {
          // Lost the role during the last (inline) handler: stand by.
          DriverThreadMark.inlinePermitted = false
          return
        }
      }
      DriverThreadMark.inlinePermitted = false
    }
  }

  /// Events taken per `epoll_wait`.
  static let batchSize = 32

  /// Hands one event to its sources. Returns false if this thread lost the poller role
  /// while running an inline handler. Of the sources one event reaches, only the last may run
  /// inline, and only if the event is the `last` of its batch: the others are queued first,
  /// for the same reason as the batch rule above.
  private func dispatch(events: UInt32, token: UInt64, last: Bool) -> Bool {
    // One-shot: the kernel disabled the whole registration (`IOEntry.swift`, rule 2). The
    // tables' lock only for the lookup; the entry's own lock for the firing
    // (`IODriver+Registration.swift` gives the order).
    let found = lock.withLock { tables -> Found in
      if let entry = tables.byToken[token] { return .entry(entry) }
      if let owned = takeOwnedReport(&tables, token: token) { return .owned(owned) }
      return .stale
    }
    currentThreadHoldsRole = true
    let entry: IOEntry
    switch found {
    case .stale: return true
    case .owned(let owned):
      DriverThreadMark.inlinePermitted = last
      owned.watcher.ownedDescriptorFired(owned, events: events)
      DriverThreadMark.inlinePermitted = false
      return currentThreadHoldsRole
    case .entry(let found): entry = found
    }
    guard let fired = fire(entry, events: events) else { return true }
    var unhanded = fired.readers.count + fired.writers.count
    func hand(_ cores: [FileDescriptorCore], _ interest: FDInterest) {
      for core in cores {
        unhanded -= 1
        DriverThreadMark.inlinePermitted = last && unhanded == 0
        if core.readinessFired() == .notScheduled {
          decline(entry, core, interest)  // Rule 4.
        }
      }
    }
    hand(fired.readers, .read)
    hand(fired.writers, .write)
    DriverThreadMark.inlinePermitted = false
    return currentThreadHoldsRole
  }

  /// What a report's token names.
  private enum Found {
    case entry(IOEntry)
    case owned(OwnedRegistration)
    case stale
  }

  /// Set by `runInline` when the standby took the role while this thread ran a handler.
  /// Only touched by the driver thread that runs `dispatch`.
  private var currentThreadHoldsRole: Bool {
    get { DriverThreadMark.holdsRole }
    set { DriverThreadMark.holdsRole = newValue }
  }

  // MARK: Inline handlers

  /// Runs `body` (a handler, with its queue already claimed) on this driver thread, with the
  /// poller role released meanwhile so the standby can take over if it overruns. Returns false
  /// without running it if another inline handler is running (the caller queues it instead).
  func runInline(_ body: () -> Void) -> Bool {
    // A thread that lost the role during an earlier handler of the same event (its read and
    // write sources both fired) must not release a role it does not hold.
    guard currentThreadHoldsRole,
      inlineRunning.compareExchange(
        expected: false, desired: true, ordering: .acquiringAndReleasing
      ).exchanged
    else { return false }
    // The batch's other events went to their queues so that workers run them meanwhile: a
    // wake-up their submission deferred is made before this thread is busy with the handler.
    WorkerPool.payOwedWake()
    inlineRuns.wrappingAdd(1, ordering: .relaxed)
    inlineSequence.wrappingAdd(1, ordering: .sequentiallyConsistent)
    armWatchdog()  // A system call only when the watchdog was idle.
    role.store(0, ordering: .releasing)
    body()
    inlineRunning.store(false, ordering: .releasing)
    if !role.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged {
      currentThreadHoldsRole = false  // The standby polls now; this thread stands by.
    }
    return true
  }

  /// The lowest lane whose work may run inline on a driver thread: the default lane. Work
  /// below it (a serial chain ending at a `.low` or `.background` global queue) never runs
  /// on the poller; it is queued, and runs on a worker of its lane.
  ///
  /// Why: an inline run holds up every other descriptor and timer of the driver until it
  /// returns or the standby takes over (one to two 2 ms watchdog periods), so a background
  /// handler or timer of a few milliseconds delayed high-priority events by 2–4 ms per run.
  /// In the pool a lower lane waits for the higher ones instead.
  static let lowestInlinePriority = Priority.default

  /// Runs `body` on this driver thread with `queue`'s serial chain claimed and current, if the
  /// whole chain is idle (claimed as an uncontended `sync` claims it), it ends at a lane no
  /// lower than `lowestInlinePriority`, and no other inline run is going on (`runInline`);
  /// the chain is released after. Returns false, running nothing, otherwise. Shared by fd
  /// handlers (`SourceCore`) and timers (`DriverTimers`).
  func runInlineOnIdleChain(of queue: Queue, _ body: () -> Void) -> Bool {
    guard queue.trySyncLockChain(lowestPriority: Self.lowestInlinePriority) else {
      return false
    }
    let ran = runInline { queue.withLockedChainFrames(body) }
    queue.unlockSyncChain()
    return ran
  }

  /// Whether an inline run could start now on the calling driver thread (a cheap pre-check
  /// before claiming a queue): the event is the last of its batch and no other inline
  /// handler runs.
  var mayRunInline: Bool {
    DriverThreadMark.inlinePermitted && !inlineRunning.load(ordering: .relaxed)
      && hasStandby.load(ordering: .relaxed)
  }
}

/// Per-thread flags of the driver threads, in a thread-local slot (`ThreadSlots`).
enum DriverThreadMark {
  private static let driverBit: Int32 = 1
  private static let roleBit: Int32 = 2
  private static let inlineBit: Int32 = 4

  /// Marks the calling thread as a driver thread. Called once by each, first.
  static func set() { ThreadSlots.setDriverFlags(driverBit) }

  static var isSet: Bool { ThreadSlots.driverFlags() & driverBit != 0 }

  /// Whether the event being dispatched may run its handler inline (the last of its batch).
  static var inlinePermitted: Bool {
    get { ThreadSlots.driverFlags() & inlineBit != 0 }
    set {
      let flags = ThreadSlots.driverFlags()
      ThreadSlots.setDriverFlags(newValue ? flags | inlineBit : flags & ~inlineBit)
    }
  }

  /// Whether the calling driver thread still holds the poller role after a dispatch.
  static var holdsRole: Bool {
    get { ThreadSlots.driverFlags() & roleBit != 0 }
    set {
      let flags = ThreadSlots.driverFlags()
      ThreadSlots.setDriverFlags(newValue ? flags | roleBit : flags & ~roleBit)
    }
  }
}
