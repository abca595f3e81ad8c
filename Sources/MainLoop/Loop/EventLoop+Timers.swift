import CLoopShims

/// Timers: a heap of deadlines on the loop thread and one timerfd armed for the earliest.
///
/// Firing walk-through (`handleTimerExpiry`, loop thread):
/// 1. The timerfd (absolute `CLOCK_MONOTONIC`) becomes readable at or after the earliest
///    deadline; the kernel never fires it early, and step 2 re-checks anyway. It is not
///    read: step 5 always sets it, which resets its count.
/// 2. Read the clock once; pop every timer whose deadline is at or before that instant.
/// 3. A cancelled timer is dropped. A repeating timer is re-inserted at its next deadline
///    after the instant (missed periods are skipped, not bunched) before its handler runs, so
///    the handler may cancel it. A one-shot timer drops its closure before running it.
/// 4. After each pass the loop's timer-pass observer runs, if one is set (LoopDispatch's
///    service loop submits the work of the `after`s that fired, one batch per queue).
/// 5. Re-arm the timerfd for the new earliest deadline (disarm when none is left): one
///    system call per expiry, and otherwise only when that deadline changed. A deadline
///    closer than ``timerCoalescingNanoseconds`` to this expiry is armed for the end of that
///    window instead: dense timers are fired in groups, one wake-up and one
///    `timerfd_settime` per window, rather than one each (see
///    ``timerCoalescingNanoseconds``).
///
/// A virtual-time loop (`EventLoop+VirtualTime.swift`) runs steps 2–5 unchanged, with its
/// virtual clock as "the clock": `armedTimerDeadline` is then the simulated timer descriptor,
/// armed by the same rule (coalescing window included) but without the system call, and
/// the driver "fires" it by moving the clock to that instant and calling `fireTimerPasses`.
extension EventLoop {
  /// The shortest time between two expiries of the timer descriptor: 20 µs, less than one
  /// wake-up of a sleeping thread costs on these VMs (10–40 µs).
  ///
  /// Why: each re-arm is a `timerfd_settime`, which on these VMs reprograms the
  /// hypervisor's timer; a stream of 100k `after` timers over 500 ms, re-armed one deadline
  /// at a time, kept the service thread in that call for a fifth of all CPU samples of the
  /// process (perf) and the other threads waiting for a core (p99 lateness 2 ms). With the
  /// window the same stream has p99 lateness near 0.1 ms; 50 µs gave the same p99 with twice
  /// the median. An isolated timer is not affected: the window counts from the previous
  /// expiry, so a deadline more than 20 µs after it is armed exactly. A timer is never fired
  /// before its deadline.
  public static let timerCoalescingNanoseconds: UInt64 = 20_000

  /// Runs `body` on the loop thread no earlier than `deadline`.
  ///
  /// Thread-safety: callable from any thread. ``Deadline/distantFuture`` never fires.
  @discardableResult
  public func schedule(at deadline: Deadline, _ body: @escaping @Sendable () -> Void) -> LoopTimer {
    add(LoopTimer(loop: self, deadline: deadline.uptimeNanoseconds, interval: 0, handler: body))
  }

  /// Runs `body` on the loop thread no earlier than `delay` from now.
  @discardableResult
  public func schedule(after delay: Duration, _ body: @escaping @Sendable () -> Void) -> LoopTimer {
    schedule(at: now + delay, body)
  }

  /// Runs `body` on the loop thread every `interval`, first no earlier than `start`
  /// (default: one interval from now). Each fire is no earlier than its slot; slots missed
  /// while the loop was busy are skipped.
  ///
  /// An interval that is not positive is a client bug and traps.
  @discardableResult
  public func scheduleRepeating(
    every interval: Duration, startingAt start: Deadline? = nil,
    _ body: @escaping @Sendable () -> Void
  ) -> LoopTimer {
    let nanos = interval.saturatingNanoseconds
    if nanos <= 0 { clientBug("repeating timer interval must be positive, got \(interval)") }
    let first = start ?? (now + interval)
    return add(
      LoopTimer(
        loop: self, deadline: first.uptimeNanoseconds, interval: UInt64(nanos), handler: body))
  }

  /// Schedules a timer made by package code that handles its own fire (LoopDispatch's
  /// `DelayedWork`), allocating nothing. `timer.loop` must be this loop (checked in debug
  /// builds only: the check is a weak load, two atomic operations per `after`); a timer is
  /// scheduled once. The timer then refers to itself (its handler) until it has fired or
  /// been removed, when the loop drops the handler; meanwhile the loop keeps it anyway.
  /// Any thread.
  package func schedule<Timer: LoopTimer & LoopTimerTarget>(_ timer: Timer) {
    assert(timer.loop === self, "a timer is scheduled on its own loop")
    precondition(timer.handler == nil, "a timer is scheduled once")
    timer.handler = .target(timer)
    _ = add(timer)
  }

  /// Sets what runs on the loop thread after each pass of fired timers (see
  /// `handleTimerExpiry`): LoopDispatch's service loop submits the work its timers released
  /// there, grouped by queue. Call before the loop runs, from the thread that starts it.
  package func setTimerPassObserver(_ observer: @escaping @Sendable () -> Void) {
    timerPassObserver = observer
  }

  /// From another thread the timer is pushed onto `pendingInsertions` (a lock-free stack
  /// through the timers themselves, so no closure is allocated) and the loop is woken as
  /// `execute` would wake it, unless the timer is due no earlier than the instant the loop's
  /// timer descriptor is armed for: the loop wakes then anyway, and inserts the pending
  /// timers before it fires any (`fireTimerPasses`). The loop also inserts pending timers
  /// after each poll (`insertPendingTimers`) and checks the stack before it sleeps.
  ///
  /// Why: a thread scheduling many timers (timeouts, dense `after`s) woke a sleeping loop
  /// for each timer that found it asleep, an eventfd write and a context switch each (about
  /// one in 25 timers of a loop that had nothing else to do); most such timers are due
  /// after the loop's next wake-up.
  ///
  /// No timer is stranded (Dekker's pattern, as for posts): the push and the load of
  /// `armedDeadlineForSchedulers` are sequentially consistent, and so are the loop's store of
  /// that value (`rearmTimerFD`) and its later load of the stack before it sleeps
  /// (`prepareToSleep`). Either the loop's load sees the timer, or this load sees the
  /// deadline the loop sleeps with (or a later-stored one), and wakes the loop unless the
  /// timer is due no earlier than it.
  private func add(_ timer: LoopTimer) -> LoopTimer {
    liveTimers.wrappingAdd(1, ordering: .relaxed)
    if isInLoopThread {
      insertTimer(timer)
      return timer
    }
    // Read before the push: afterwards the timer is the loop's.
    let deadline = timer.deadline
    // Retained by the stack until the loop pops it.
    let node = Unmanaged.passRetained(timer)
    var head = pendingInsertions.load(ordering: .relaxed)
    while true {
      timer.nextPendingInsertion =
        head == 0 ? nil : Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: head)!)
      // Sequentially consistent, like the inbox's claim: pairs with the loop's clearing of
      // `wakePending` and its load of this stack (EventLoop+Execute.swift).
      let (pushed, current) = pendingInsertions.compareExchange(
        expected: head, desired: UInt(bitPattern: node.toOpaque()),
        ordering: .sequentiallyConsistent)
      if pushed { break }
      head = current
    }
    // Sequentially consistent: the other half of the pattern above.
    let armed = armedDeadlineForSchedulers.load(ordering: .sequentiallyConsistent)
    if armed == 0 || deadline < armed { wakeUnlessAwake() }
    return timer
  }

  /// Inserts the timers other threads scheduled, in the order they were scheduled (per
  /// thread). Loop thread only.
  func insertPendingTimers() {
    LoopTimer.takePending(from: pendingInsertions) { insertTimer($0) }
  }

  /// Releases the handler of every timer the loop still keeps: those in the heap and those
  /// on `pendingInsertions` (dropping the stack's retains). `deinit` only: no other thread
  /// references the loop, so none can be pushing (a push runs inside `schedule`, on a strong
  /// reference), every loop-thread access happens-before the final release, and the timers'
  /// weak references already read nil, so no `cancel()` reaches the loop any more.
  func releaseTimersAtDeinit() {
    for timer in timers.removeAll() { timer.handler = nil }
    // Acquiring: the pushers' links are visible. Safe: each non-zero word on the stack is a
    // timer that `add` retained for it, and the exchange hands each to this walk alone.
    let head = pendingInsertions.exchange(0, ordering: .acquiring)
    var node =
      head == 0 ? nil : Unmanaged<LoopTimer>.fromOpaque(UnsafeRawPointer(bitPattern: head)!)
    while let current = node {
      let timer = current.takeRetainedValue()  // The stack's retain, dropped here.
      node = timer.nextPendingInsertion
      timer.nextPendingInsertion = nil
      timer.handler = nil
    }
  }

  /// Loop thread only.
  private func insertTimer(_ timer: LoopTimer) {
    if timer.isCancelled {
      timer.handler = nil
      liveTimers.wrappingSubtract(1, ordering: .relaxed)
      return
    }
    // During an expiry the descriptor is set once, when the passes end.
    if timers.insert(timer) && !firingTimers { rearmTimerFD() }
  }

  /// Removes a cancelled timer and releases its closure. Loop thread only.
  ///
  /// The heap entry stays until it comes out or the heap compacts (lazy removal, see
  /// `TimerHeap`); the timer no longer counts as pending from now on.
  func removeTimer(_ timer: LoopTimer) {
    if timer.heapState == .queued {
      timers.markRemoved(timer)
      liveTimers.wrappingSubtract(1, ordering: .relaxed)
      // The earliest entry stays live, so that an insertion compares with a live deadline
      // (`insertTimer` re-arms only for a new earliest).
      timers.dropRemovedFirst()
      timers.compactIfMostlyRemoved()
    }
    timer.handler = nil
    // The timerfd may stay armed for the removed deadline: the wake-up finds nothing due.
  }

  /// Runs when the timerfd is readable. Loop thread only.
  ///
  /// The descriptor is not read: the re-arm that ends every expiry (`rearmTimerFD`, a
  /// disarm when no timer is left) is a `timerfd_settime`, which resets the expiration
  /// count, so the descriptor is not readable at the next poll. One system call fewer per
  /// wake-up.
  func handleTimerExpiry() {
    // Whether this is the first handler since the poll returned: every handler, this one
    // included, sets `wakePending` as it starts, and the loop cleared it before a poll that
    // may block (`prepareToSleep`). Still clear, nothing ran before this expiry in this turn
    // (and no other thread woke the loop: a producer sets it too). Relaxed: the loop thread's
    // own stores are seen in order; a producer's store missed here only lets a sample count
    // that a producer's wake-up may have shared.
    let firstSincePoll = !wakePending.load(ordering: .relaxed)
    noteAwake()
    timerFDExpired = true
    waitForEarliestTimer(sleptSince: firstSincePoll ? sleptSince : 0)
    fireTimerPasses()
  }

  /// Waking early (`EarlyWake`): learns the wake-up delay from this expiry if it woke the
  /// loop (`sleptSince`: see `EarlyWake.expired(now:sleptSince:)`) and, if the descriptor
  /// was set early, spins to the earliest deadline. Loop thread only; real-time loops only.
  private func waitForEarliestTimer(sleptSince: UInt64) {
    guard !isVirtualTime else { return }
    let now = monotonicNanoseconds()
    guard earlyWake.expired(now: now, sleptSince: sleptSince) else { return }
    earlyTimerWakes.wrappingAdd(1, ordering: .relaxed)
    insertPendingTimers()
    if let first = earliestLiveDeadline() {
      EarlyWake.spin(until: first, now: now, within: earlyWake.spinBound)
    }
  }

  /// Steps 2–5 of an expiry of the (real or simulated) timer descriptor. Loop thread only.
  func fireTimerPasses() {
    armedTimerDeadline = 0  // A fired timerfd is disarmed.
    firingTimers = true
    defer { firingTimers = false }
    // Timers other threads scheduled for this instant or later did not wake the loop (see
    // `add`): those due now fire in this pass.
    insertPendingTimers()
    var now = currentTimeNanoseconds()
    lastTimerExpiry = now
    // Timers that fell due while handlers ran fire in a further pass rather than after a
    // timerfd round trip (never before their deadline). Passes are bounded so that a
    // repeating timer slower than its interval cannot keep the loop from polling.
    for _ in 0..<4 {
      fireTimersDue(at: now)
      timerPassObserver?()
      insertPendingTimers()
      now = currentTimeNanoseconds()
      guard let next = timers.firstDeadline, next <= now else { break }
    }
    rearmTimerFD()
  }

  /// Fires every timer due at `now`, in deadline order. Loop thread only.
  private func fireTimersDue(at now: UInt64) {
    // Counted here and published before a closure handler runs and at the end of the pass
    // (fewer writes to a line the scheduling threads write). A closure handler is user code
    // that may look at the counts (`pendingTimerCount`, `timerFireCount`) or tell another
    // thread to, so they are exact when it starts; a target handler (`DelayedWork`) only
    // hands its work to the pass's batch, which the observer submits after the pass.
    var fired: UInt64 = 0
    var finished = 0
    func publishCounts() {
      if finished > 0 { liveTimers.wrappingSubtract(finished, ordering: .relaxed) }
      // Single writer (the loop thread): a plain load-then-store is enough.
      if fired > 0 {
        timersFired.store(timersFired.load(ordering: .relaxed) &+ fired, ordering: .relaxed)
      }
      finished = 0
      fired = 0
    }
    while let deadline = timers.firstDeadline, deadline <= now {
      let (timer, wasRemoved) = timers.popFirst()
      // A removed timer was already uncounted (`removeTimer`).
      if wasRemoved { continue }
      // Acquiring; pairs with the releasing exchange in `LoopTimer.cancel()`.
      guard !timer.isCancelled, let handler = timer.handler else {
        timer.handler = nil
        finished += 1
        continue
      }
      if timer.isRepeating {
        let periods = (now - timer.deadline) / timer.intervalNanoseconds + 1
        let (next, overflow) = timer.deadline.addingReportingOverflow(
          periods.multipliedReportingOverflow(by: timer.intervalNanoseconds).partialValue)
        timer.deadline = overflow ? .max : next
        timers.insert(timer)
      } else {
        timer.handler = nil
        finished += 1
      }
      fired &+= 1
      if case .closure = handler { publishCounts() }
      handler.run()
    }
    publishCounts()
  }

  /// Pops the removed entries off the top of the heap (so that the timerfd is not armed for
  /// a cancelled timer) and returns the earliest live deadline. Loop thread only.
  private func earliestLiveDeadline() -> UInt64? {
    timers.dropRemovedFirst()
    return timers.firstDeadline
  }

  /// Arms the timerfd for the earliest deadline, or disarms it; on a virtual-time loop only
  /// records the instant (the simulated descriptor). Loop thread only.
  private func rearmTimerFD() {
    var wanted: UInt64 = 0
    if let first = earliestLiveDeadline(), first != .max {
      // 0 would mean "disarm" to timerfd_settime. A deadline inside the coalescing window
      // of the last expiry waits for the window's end (never earlier than the deadline).
      wanted = max(first, lastTimerExpiry &+ Self.timerCoalescingNanoseconds, 1)
    }
    // An expired descriptor is set even to the same value (a disarm): that resets its count.
    if wanted == armedTimerDeadline && !timerFDExpired { return }
    if !isVirtualTime {
      // Waking early (`EarlyWake`): a far deadline is set early by the learnt delay.
      let expiry = earlyWake.expiry(for: wanted, now: monotonicNanoseconds())
      if cls_timerfd_set_abs(timerFD, expiry) != 0 {
        internalBug("timerfd_settime failed: errno \(cls_errno())")
      }
    }
    armedTimerDeadline = wanted
    timerFDExpired = false
    // Sequentially consistent: see `add`. (`.max`, never armed, reads as "disarmed".)
    armedDeadlineForSchedulers.store(wanted, ordering: .sequentiallyConsistent)
  }
}
