import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// The `after` timers of every queue whose chain does not end at the main queue: a deadline
/// heap behind a lock and one timerfd in the I/O driver's epoll set, fired by whichever driver
/// thread holds the poller role, which runs the work itself when the target is an idle
/// serial queue.
///
/// Why here and not on the service loop: the service loop is a libevent loop on one thread,
/// so it can never run user code (nothing could take over its timers if a handler blocked);
/// a fired timer there is a submission, and on an idle serial queue that submission wakes a
/// pool worker — a second thread hop after the timer's own wake-up (10–40 µs on these VMs).
/// The driver has two threads sharing the poller role with a standby and a watchdog, so a
/// timer's work can run where the timer fired, as an fd handler does (`IODriver.swift`).
///
/// Firing walk-through (`ownedDescriptorFired`, the poller-role holder):
/// 1. The timerfd (absolute `CLOCK_MONOTONIC`, one-shot, registered edge-triggered and
///    persistent) expires at or after the deadline it is armed for; the kernel never fires it
///    early, and step 2 re-checks anyway. Edge-triggered, each expiry is reported once,
///    whether or not its count was read: no `read`, no `epoll_ctl`, ever.
///    Woken early on purpose (see "Waking early"), the thread first spins until the earliest
///    deadline, at most `EarlyWake.maxAdvance` and a quarter.
/// 2. Under `lock`: file the pending timers (see "Scheduling"), read the clock once, pop
///    every timer whose deadline is at or before that instant (a cancelled one, already
///    marked removed, is dropped). After step 3, if timers fell due meanwhile, another pass
///    (up to `maxPasses`) pops them without a timerfd round trip; otherwise re-arm the
///    descriptor for the new earliest deadline with one `timerfd_settime`, or leave it
///    expired (a one-shot timerfd does not fire again) if no timer waits: a lone timer costs
///    no system call here at all. The deadline armed is never before the deadline, nor closer
///    to this expiry than the coalescing window (see "Coalescing").
/// 3. Outside the lock, under `firing`: each popped timer's work is claimed (the timer wins
///    it unless `cancel()` came first). All of it is grouped per queue and submitted in one
///    batch per queue (`TimerFireBatch`, as the service loop did), except the last claimed
///    work when its queue is serial and the event may run inline (the last of its
///    `epoll_wait` batch, no other inline run, a standby exists): that one is held back.
/// 4. The held-back work runs inline if its queue's whole chain is idle and ends at the
///    default lane or a higher one (`IODriver.lowestInlinePriority`: work of a lower lane
///    never runs on the poller): claimed as an
///    uncontended `sync` claims it (`trySyncLockChain`), run through `IODriver.runInline`
///    (the poller role is released meanwhile, so if the work blocks the standby takes over
///    within ~4 ms and other timers and descriptors keep firing), then the chain is released.
///    Otherwise (the queue is busy or has work queued, which the batch of step 3 may just
///    have added, or its lane is lower) it is submitted like the rest, behind anything
///    already queued: the work of one queue keeps its deadline order either way.
///
/// Waking early (`EarlyWake`, the rule MainLoop's timers follow too): on these VMs a thread
/// sleeping in `epoll_wait` runs 30–70 µs after its timerfd expires (the halted virtual CPU's
/// wake-up), and that delay was the whole lateness of an `after` on an idle serial queue:
/// Dispatch's extra hop to a worker costs it only 5–10% more. So a deadline at least 500 µs
/// away is armed early by the average measured delay (each capped at 150 µs), and the woken
/// poller spins the rest of the way, outside `lock`. Only expiries that woke the poller are
/// measured: while the descriptor is set for an instant ahead (`timerLearnsAtExpiry`), the
/// poller reads the clock as it enters `epoll_wait` (`IODriver.pollEnteredAt`), and an
/// expiry found by a wait entered after it, or behind other events of its batch, was late
/// because the poller was busy, which says nothing of the wake-up. Timers closer together
/// (a dense burst) are armed at their deadline, or the poller would spin from one to the
/// next. Whichever thread holds the poller role pays the spin: about the delay's variation
/// per early timer (a few µs to tens), never the time the timer waited. Deadlines and
/// `armedDeadline` stay the true ones; only the descriptor's instant moves.
///
/// Coalescing: after an expiry, the descriptor is not armed sooner than the window after it:
/// the event loop's 20 µs (``EventLoop/timerCoalescingNanoseconds``), or, after an expiry
/// that found its earliest due timer more than `maxCoalescing` (100 µs) late, twice as long as
/// firing that expiry took, within 20 and 100 µs (`coalescingWindow`). Why: on these VMs an
/// expiry costs the poller far more than the timers it pops (a `timerfd_settime` is tens of
/// µs with interrupts off, the wake-up of a worker for the batch as much: `perf`, 17% and 11%
/// of all samples of the C `after_dense` row, 100k `after`s over 200 ms). With a fixed 20 µs
/// such a burst kept the poller expiring back to back and behind its deadlines by
/// milliseconds; under a 1-CPU quota the process was throttled for most of the run (p99
/// lateness 61 ms against libdispatch's 70). A poller that is behind gains nothing from a
/// short window: the timers it would fire early are late already, and each expiry it saves
/// is CPU the burst needs. Widened only then, the window costs timers that are on time
/// nothing: the Swift `timers` row (100k over 500 ms) keeps its p50 lateness, where a window
/// widened at every expiry (measured too) cut its CPU per timer by 28% but added 10–15 µs to
/// its p50. The firing is timed from the expiry's first clock reading to the re-arm (the
/// `timerfd_settime` itself is not in it), so a behind poller fires about half the time. The
/// lag is judged against the earliest due timer, which in a dense stream came due while the
/// last window ran: once widened, the window stays wide while the stream stays dense (a timer
/// due during a 100 µs window plus the wake-up is over 100 µs late), and narrows when the
/// timers thin out. Sparse timers are never touched: a deadline further than the window from
/// the last expiry is armed exactly. GCD allows far more: libdispatch gives every `dispatch_after` a
/// leeway of a tenth of its delay, at least 1 ms.
///
/// Scheduling (any thread, `schedule`), as the event loop's `add` does it: the timer is pushed
/// onto `pending`, a lock-free stack linked through the timers (`nextPendingInsertion`), and
/// the scheduling thread takes `lock` only if the timer is due before the instant the timerfd
/// is armed for (or it is not armed): then it moves the pending timers into the heap and
/// re-arms the descriptor itself with `timerfd_settime` (no wake-up of the driver, which the
/// timerfd wakes at the deadline). A timer due at or after the armed instant costs one
/// compare-and-swap and one load: the expiry at that instant moves it into the heap (step 2 starts with the
/// pending timers). So 100k dense timers cost their scheduler what they cost on the service
/// loop, and the heap work stays on the driver.
///
/// No timer is stranded (Dekker's pattern): the push and the scheduler's load of
/// `armedForSchedulers` are sequentially consistent, and so are the poller's store of that
/// value after each re-arm and its following load of `pending`. Either the poller sees the
/// timer (and moves it into the heap, re-arming if it is the earliest), or the scheduler sees
/// the deadline the poller armed (or a later-stored one) and takes the lock itself unless the
/// timer is due no earlier than it.
///
/// Cancelling (`remove`, any thread): under `lock`, mark the entry removed (lazy removal,
/// `TimerHeap` rule 3); a timer still on `pending` is dropped when it is moved (it is marked
/// cancelled before `remove` runs). The work itself was released by `DelayedWork.cancel()`
/// before, so the closure never waits for the heap.
///
/// Who may touch what: the heap, `armedDeadline`, `lastExpiry`, `coalescing` and `expiryLag`
/// under `lock`; `pending`
/// and `armedForSchedulers` are atomics; the fire scratch (`FireScratch`) under `firing`,
/// which only the poller-role holder takes; the counters are atomics; the rest is immutable.
///
/// Entries dropped under `lock` (removed timers) may release the last reference to their
/// queue: a queue's deinit takes none of our locks and runs no user code (a finalizer is
/// submitted), so that is safe.
final class DriverTimers: OwnedDescriptorWatcher, @unchecked Sendable {
  // @unchecked Sendable: the mutable state is behind `lock` or `firing`, or atomic, as stated
  // above.

  /// The driver timers, started with the I/O driver on first use; nil if the driver or the
  /// timerfd could not be started (no descriptor left, no thread), in which case `after`
  /// keeps its timers on the service loop for the life of the process.
  static let shared: DriverTimers? = start()

  /// The driver timers if they were started (for `RuntimeStats`, which must not start them).
  /// Acquiring load; pairs with the releasing `storeIfNil` in `start`.
  static var running: DriverTimers? { published.load() }
  private static let published = AtomicLazyReference<DriverTimers>()

  let driver: IODriver
  private let timerFD: Int32

  /// Protects the fields below it (a count, not `()`: see `IODriver.starting`).
  private let lock = LockedValue(0, adaptive: true)
  /// Protected by: `lock`.
  private var heap = TimerHeap()
  /// Protected by: `lock`. The instant the timerfd is armed for; 0 when it is not armed (it
  /// has expired, or was never armed).
  private var armedDeadline: UInt64 = 0
  /// Protected by: `lock`. The clock reading of the last expiry (the coalescing window).
  private var lastExpiry: UInt64 = 0
  /// Protected by: `lock`. How soon after the last expiry the next may come
  /// (`coalescingWindow`; see "Coalescing" above).
  private var coalescing = EventLoop.timerCoalescingNanoseconds
  /// Protected by: `lock`. How far behind its earliest due timer the last expiry's first pass
  /// was (0 if none was due).
  private var expiryLag: UInt64 = 0
  /// Protected by: `lock`. When the timerfd is set early for a far deadline, and what it
  /// learnt of the wake-up delay (`EarlyWake`; see "Waking early" below).
  private var earlyWake = EarlyWake()

  /// Atomic. Timers scheduled and not yet in the heap: the address of the newest, linked
  /// through `nextPendingInsertion`, each holding one retain (taken by `schedule`, handed to
  /// the heap or dropped by `insertPending`); 0 when empty.
  private let pending = Atomic<UInt>(0)
  /// Atomic. `armedDeadline` as the schedulers see it (sequentially consistent; see the
  /// Dekker note above); 0 when the timerfd is not armed.
  private let armedForSchedulers = Atomic<UInt64>(0)

  /// The scratch of a fire (step 3), reused between fires.
  private struct FireScratch {
    var due: [DelayedWork] = []
    let batch = TimerFireBatch()
  }
  /// Protected by: its lock (taken by the poller-role holder only, so never contended; a lock
  /// rather than the role's own hand-off so that ThreadSanitizer sees the protection).
  private let firing = LockedValue(FireScratch())

  /// Atomic. Timers fired (their work claimed and submitted or run), and how many of them ran
  /// inline on a driver thread (for `RuntimeStats` and tests).
  let firedCount = Atomic<UInt64>(0)
  let inlineCount = Atomic<UInt64>(0)
  /// Atomic. Expiries of a timerfd set early ("Waking early"), for tests.
  let earlyWakes = Atomic<UInt64>(0)
  /// Atomic. Expiries after which the coalescing window was wider than 20 µs ("Coalescing"),
  /// for tests.
  let widenedWindows = Atomic<UInt64>(0)

  /// How early the timerfd is set before a deadline far enough away, in ns (for tests).
  var wakeAdvanceNanoseconds: UInt64 { lock.withLock { _ in earlyWake.advance } }

  private init(driver: IODriver, timerFD: Int32) {
    self.driver = driver
    self.timerFD = timerFD
  }

  private static func start() -> DriverTimers? {
    guard case .success(let driver) = IODriver.start() else { return nil }
    let fd = cls_timerfd_create_monotonic()
    if fd < 0 { return nil }
    let timers = DriverTimers(driver: driver, timerFD: fd)
    // The registration keeps `timers` (its watcher) for the life of the process.
    switch driver.registerOwned(
      fd: fd, events: cls_epollin, edgeTriggered: true, watcher: timers)
    {
    case .success: return published.storeIfNil(timers)
    case .failure:
      close(fd)
      return nil
    }
  }

  // MARK: Scheduling and cancelling (any thread)

  /// Schedules `timer`, due at `deadline` (its own, in ns); see "Scheduling" above.
  func schedule(_ timer: DelayedWork, deadline: UInt64) {
    // Never due (`Deadline.distantFuture`): kept nowhere. It cannot fire, and `cancel` needs
    // nothing from the driver; on the stack it (and its queue) would wait for an expiry that
    // may never come.
    guard deadline != .max else { return }
    // Retained by the stack until `insertPending` takes it.
    let node = Unmanaged<LoopTimer>.passRetained(timer)
    let address = UInt(bitPattern: node.toOpaque())
    var head = pending.load(ordering: .relaxed)
    while true {
      timer.nextPendingInsertion =
        head == 0 ? nil : Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: head)!)
      // Sequentially consistent: the scheduler's half of the Dekker pair (see above).
      let (pushed, current) = pending.compareExchange(
        expected: head, desired: address, ordering: .sequentiallyConsistent)
      if pushed { break }
      head = current
    }
    // Sequentially consistent: the other half of the pair.
    let armed = armedForSchedulers.load(ordering: .sequentiallyConsistent)
    if armed != 0 && armed <= deadline { return }  // That expiry files it.
    lock.withLock { _ in
      insertPending()
      armForEarliest()
    }
  }

  /// Under `lock`: moves the pending timers into the heap, in scheduling order (per thread),
  /// dropping those cancelled meanwhile.
  private func insertPending() {
    LoopTimer.takePending(from: pending) { timer in
      if !timer.isCancelled { heap.insert(timer) }
    }
  }

  /// Under `lock`: arms the timerfd for the earliest timer if it is due before the instant
  /// the descriptor is armed for (or it is not armed); publishes the armed instant.
  private func armForEarliest() {
    heap.dropRemovedFirst()
    guard let first = heap.firstDeadline, first != .max else { return }
    // Coalescing as in step 2; never earlier than the deadline.
    let wanted = max(first, lastExpiry &+ coalescing, 1)
    if armedDeadline != 0 && armedDeadline <= wanted { return }
    arm(wanted)
  }

  /// Takes `timer` out of the heap if it is still in it (its work is already released).
  func remove(_ timer: DelayedWork) {
    lock.withLock { _ in
      guard timer.heapState == .queued else { return }  // Fired, or being fired.
      heap.markRemoved(timer)
      // The earliest entry stays live (`schedule` compares with it); the timerfd may stay
      // armed for the removed deadline: that expiry finds nothing due and re-arms.
      heap.dropRemovedFirst()
      heap.compactIfMostlyRemoved()
    }
  }

  /// Timers waiting in the heap (removed ones included until they come out). Any thread.
  var heapCount: Int { lock.withLock { _ in heap.count } }

  /// Under `lock`: sets the timerfd for `deadline` (never 0, which would disarm it) and
  /// publishes it to the schedulers.
  private func arm(_ deadline: UInt64) {
    // Waking early (see above): a far deadline is set early by the learnt delay.
    let expiry = earlyWake.expiry(for: deadline, now: Deadline.now.uptimeNanoseconds)
    driver.timerLearnsAtExpiry.store(earlyWake.learnsAtNextExpiry, ordering: .relaxed)
    if cls_timerfd_set_abs(timerFD, expiry) != 0 {
      internalBug("timerfd_settime of the driver timers failed: errno \(cls_errno())")
    }
    armedDeadline = deadline
    // Sequentially consistent: the poller's half of the Dekker pair (see above).
    armedForSchedulers.store(deadline, ordering: .sequentiallyConsistent)
  }

  // MARK: Firing (the poller-role holder)

  /// Passes per expiry: timers that fall due while a pass submits its work fire in a further
  /// pass, without a timerfd round trip (never before their deadline), as the event loop's
  /// `fireTimerPasses` does; bounded so that the poller returns to `epoll_wait`.
  static let maxPasses = 4

  /// The widest coalescing window: the most a dense burst's timers wait for the next expiry.
  static let maxCoalescing: UInt64 = 100_000

  /// The coalescing window after an expiry whose firing took `firing` ns and whose earliest
  /// due timer was `lag` ns late: 20 µs unless `lag` exceeds `maxCoalescing`; then twice the
  /// firing, so that a poller behind its deadlines spends at most about half of its time
  /// expiring, within 20 µs and `maxCoalescing`.
  static func coalescingWindow(afterFiringFor firing: UInt64, lag: UInt64) -> UInt64 {
    guard lag > maxCoalescing else { return EventLoop.timerCoalescingNanoseconds }
    return min(max(2 &* firing, EventLoop.timerCoalescingNanoseconds), maxCoalescing)
  }

  func ownedDescriptorFired(_ registration: OwnedRegistration, events: UInt32) {
    waitForEarliestDeadline()
    for pass in 0..<Self.maxPasses {
      let held = firePass(first: pass == 0)
      // Step 2's end: re-arm, unless timers fell due meanwhile (another pass pops them). Done
      // before an inline run, so that a standby taking over finds the descriptor armed.
      let another = finishPass(mayContinue: held == nil && pass + 1 < Self.maxPasses)
      if let held {
        runInlineOrSubmit(held.item, on: held.queue)  // Step 4, outside `firing`.
        return
      }
      if !another { return }
    }
  }

  /// Step 1, woken early (`EarlyWake`): learns the wake-up delay from this expiry if it woke
  /// the poller (it entered `epoll_wait` before the instant and this is the first event of
  /// that wait: `IODriver.pollEnteredAt`) and, if the descriptor was set early, spins to the
  /// earliest deadline. The deadline itself is never anticipated: step 2 pops only timers due
  /// by the clock.
  private func waitForEarliestDeadline() {
    // This thread holds the poller role and wrote it before its wait (relaxed: see there).
    let sleptSince = driver.pollEnteredAt.load(ordering: .relaxed)
    let wait = lock.withLock { _ -> (deadline: UInt64, now: UInt64, bound: UInt64)? in
      let now = Deadline.now.uptimeNanoseconds
      let early = earlyWake.expired(now: now, sleptSince: sleptSince)
      driver.timerLearnsAtExpiry.store(earlyWake.learnsAtNextExpiry, ordering: .relaxed)
      guard early else { return nil }
      earlyWakes.wrappingAdd(1, ordering: .relaxed)
      insertPending()
      heap.dropRemovedFirst()
      return heap.firstDeadline.map { ($0, now, earlyWake.spinBound) }
    }
    // Outside the lock: schedulers may take it meanwhile.
    if let wait { EarlyWake.spin(until: wait.deadline, now: wait.now, within: wait.bound) }
  }

  /// Steps 2 (popping) and 3 of one pass; returns the work held back for step 4.
  private func firePass(first: Bool) -> (item: DelayedWorkItem, queue: Queue)? {
    firing.withLock { scratch -> (item: DelayedWorkItem, queue: Queue)? in
      popDue(into: &scratch.due, startsExpiry: first)
      guard !scratch.due.isEmpty else { return nil }
      firedCount.wrappingAdd(UInt64(scratch.due.count), ordering: .relaxed)
      let mayInline = driver.mayRunInline
      var held: (item: DelayedWorkItem, queue: Queue)?
      for timer in scratch.due {
        guard let item = timer.claimItem() else { continue }  // Cancelled first.
        if let previous = held { scratch.batch.add(previous.item, to: previous.queue) }
        if mayInline && timer.queue.kind == .serial {
          held = (item, timer.queue)
        } else {
          held = nil
          scratch.batch.add(item, to: timer.queue)
        }
      }
      scratch.due.removeAll(keepingCapacity: true)
      scratch.batch.flush()
      return held
    }
  }

  /// Step 2: pops the timers due now into `due` (filing the pending ones first).
  private func popDue(into due: inout [DelayedWork], startsExpiry: Bool) {
    lock.withLock { _ in
      // Timers scheduled for this instant or later did not take the lock: file them first.
      insertPending()
      let now = Deadline.now.uptimeNanoseconds
      // The coalescing window counts from the expiry, not from a later pass.
      if startsExpiry {
        lastExpiry = now
        expiryLag = heap.firstDeadline.map { now > $0 ? now - $0 : 0 } ?? 0
      }
      while let first = heap.firstDeadline, first <= now {
        let (timer, wasRemoved) = heap.popFirst()
        if wasRemoved { continue }  // Cancelled: its work is released; drop the timer.
        // Safe: this heap holds `DelayedWork`s only (`schedule`).
        due.append(unsafeDowncast(timer, to: DelayedWork.self))
      }
    }
  }

  /// The end of step 2: returns true (changing nothing) if `mayContinue` and a timer is due
  /// now; otherwise re-arms the descriptor for the earliest timer (if any) and returns false.
  private func finishPass(mayContinue: Bool) -> Bool {
    lock.withLock { _ in
      if mayContinue {
        insertPending()
        heap.dropRemovedFirst()
        if let first = heap.firstDeadline, first <= Deadline.now.uptimeNanoseconds {
          return true
        }
      }
      // The descriptor expired (this report): a one-shot timerfd stays quiet until set again.
      // (A scheduler may have set it since; then this re-arm is one call more, never less.)
      // Schedulers keep seeing the expired instant until the store below (or `arm`'s): a
      // timer due at or after it is pushed and filed by the loop below, and a transient 0
      // would only send schedulers to the lock, to wait for this thread.
      armedDeadline = 0
      // Timed from the expiry's first clock reading (popDue), so an early wake's spin is not
      // counted: that is waiting, not firing.
      coalescing = Self.coalescingWindow(
        afterFiringFor: Deadline.now.uptimeNanoseconds &- lastExpiry, lag: expiryLag)
      if coalescing > EventLoop.timerCoalescingNanoseconds {
        widenedWindows.wrappingAdd(1, ordering: .relaxed)
      }
      armForEarliest()
      if armedDeadline == 0 {
        // Nothing armed. Sequentially consistent: the poller's store of the Dekker pair.
        armedForSchedulers.store(0, ordering: .sequentiallyConsistent)
      }
      // The poller's load of the Dekker pair: a timer pushed before the store above that did
      // not see it is filed here (re-arming if it is due first). Once, not until the stack
      // stays empty: producers pushing faster than a heap insert would keep this thread here
      // (holding the lock and the poller role) for a whole burst. A push this load misses saw
      // the instant stored above (or a later store, which is earlier): due at or after it,
      // the expiry files it; due before it, its scheduler takes the lock itself.
      if pending.load(ordering: .sequentiallyConsistent) != 0 {
        insertPending()
        armForEarliest()
      }
      return false
    }
  }

  /// Step 4.
  private func runInlineOrSubmit(_ item: DelayedWorkItem, on queue: Queue) {
    let ran = driver.runInlineOnIdleChain(of: queue) {
      // Counted before the work runs, so whoever the work signals sees the count.
      inlineCount.wrappingAdd(1, ordering: .relaxed)
      switch item {
      case .closure(let body): body()
      case .function(let call): call.run()
      }
    }
    if !ran { queue.submit(item) }
  }
}
