import CLoopShims
import MainLoop
import Synchronization

/// A counting semaphore, GCD-style: `wait()` takes one unit (sleeping while none is left),
/// `signal()` returns one and wakes a waiter.
///
/// Walk-through:
/// 1. `value` counts units; negative values count waiters. `wait` decrements it
///    (acquiring); a non-negative old value means a unit was available: no system call.
/// 2. `signal` increments it (releasing); a negative old value means someone waits, so it
///    adds a wake token to `tokens`, and wakes one sleeper if `sleepers` counts one (the only
///    system call). A waiter still spinning or yielding (step 6) takes the token without a
///    wake-up.
/// 3. A waiter spins for at most `spinNanoseconds` (or to its deadline), taking a token with
///    a CAS when one appears; then it counts itself in `sleepers`, looks at `tokens` once
///    more and sleeps on it while it is 0, until it can take one.
///    Why the count cannot lose a wake-up: the waiter's increment of `sleepers` and the
///    signaller's of `tokens` are both sequentially consistent, each followed by a
///    sequentially consistent load of the other word. In their single order one increment
///    comes first, so either the waiter's load sees the token (it does not sleep) or the
///    signaller's load sees the sleeper (it wakes one). A wake-up that comes before the
///    waiter is inside `futex_wait` is not lost either: the kernel compares the word with 0
///    first. With several waiters, a thread can only be asleep in the kernel if it saw no
///    token there, so every later token add sees it counted and wakes one of the sleepers.
///    A woken thread always looks for a token before it sleeps again; if a spinner took the
///    token first, it sleeps again, announced afresh, and is still counted in `value`, so
///    the signal of the unit owed to it finds it in `sleepers`. A thread leaves `sleepers`
///    (relaxed: a count only the signaller reads, where a stale non-zero costs one needless
///    `futex_wake` and a stale zero cannot be seen for a thread still asleep, which has not
///    reached its decrement) only once it is out of the kernel.
///    `SemaphoreModelTests` explores every interleaving of one waiter and one signaller
///    under x86's memory model; the several-waiter argument above is checked by the stress
///    tests in `SemaphoreTests`, not by the model.
/// 4. A waiter that times out tries to give back its decrement with a CAS on a still
///    negative `value`; if a signal already counted it (value no longer negative enough), it
///    waits for a token instead and reports success. (Another waiter may take that token
///    first; this one then waits for the next signal, past its deadline, as a `sem_wait`
///    loser does in libdispatch.) A deadline that has already passed skips the spin and the
///    announcement.
/// 5. A waiter does not spin when the last signal that found a waiter came from another
///    thread on the waiter's own CPU (`signaller`): in a hand-off between two threads (a
///    ping-pong, a request and its reply) the thread that signals next is the one that
///    signalled last, and if it shares this CPU it needs the CPU to run, which a spin only
///    delays. Measured (`sema` beside two busy loops on two CPUs, 9 runs each, alternating
///    with libdispatch): 2.0–10.2 µs a round trip before this rule, 5 runs at about 10 µs;
///    1.8–2.5 µs with it (libdispatch, which does not spin: 1.8–19.9 µs in the same set).
///    That the slow runs were the two threads on one CPU is our inference (two 4 µs spins
///    per round trip plus two sleeps), not a recorded placement. The CPU is read from the
///    thread's rseq area (no system call where the kernel and glibc provide one), and only on
///    the paths that already cost more: the signal that found a waiter records it, the waiter about
///    to spin reads it. It can misfire: where several threads take turns (a semaphore used as a
///    lock), the last signaller is not the next one, and a waiter that shares its CPU yields and
///    sleeps where a spin might have caught the next signal, at the price of up to 8 yields (16 µs)
///    and one sleep and wake-up. A CPU that cannot be read (-1) never skips the spin.
/// 6. Such a waiter does not sleep at once either: it yields the CPU to that signaller a few
///    times, taking its token after a yield without ever being taken off the run queue
///    (`YieldHandOff`: why, its bounds, and the pause after a yield that a third thread's time
///    slice made slow). Beside a busy neighbour this is what keeps a ping-pong whose two
///    threads the kernel put on one CPU at 2.2 µs a round trip, where sleeping costs 3.4.
///
/// Why the spin is bounded by time, not by a count of iterations: a `pause` takes 16 ns on
/// this VM's Xeon (3 ns on older cores), so the 2,000 checks it used to make lasted 35 µs. A
/// ping-pong whose two threads the kernel put on one CPU (beside two busy neighbours on two
/// CPUs, about one run in ten) paid a whole spin per hop: 70 µs a round trip, 70 µs of CPU.
/// Why it spins beside neighbours at all, where the pool's spins shorten (`SpinGovernor`):
/// there a waiter that sleeps waits for a CPU behind the neighbour once woken: 12–18 µs a
/// round trip in 7 of 9 runs without the spin, 2.0–2.5 µs in 8 of 9 with it (`sema` in
/// `Benchmarks/C`, beside two busy loops on two CPUs).
///
/// A spinner that sees a time jump (it was preempted) sleeps at once. It does not tell the
/// `SpinGovernor`: the jump is as likely the process's own two threads sharing a CPU, which
/// the governor's files do not count as pressure either, and a program that only uses
/// semaphores should not open the governor's files from inside a wait.
///
/// Releasing a semaphore whose value is below its initial value (units still taken) is a
/// client bug, as in GCD: a resource was never returned.
public final class Semaphore: @unchecked Sendable {
  // @unchecked Sendable: all state is atomic.
  private let value: Atomic<Int>
  private let tokens = FutexWord(0)
  /// Atomic. Waiters between announcing a sleep and leaving it (step 3): the signal wakes
  /// only while this is above 0. Incremented and read sequentially consistent (step 3's
  /// argument), decremented relaxed (why: step 3).
  private let sleepers = Atomic<Int>(0)
  private let initialValue: Int
  /// Atomic. Where the last signal that found a waiter ran (step 5), as `whereCalled` packs
  /// it; 0 before the first. Relaxed: a hint; a stale value only changes whether a waiter
  /// spins.
  private let signaller = Atomic<UInt64>(0)
  /// Step 6: the yields of a waiter whose last signaller shares its CPU, and their pause.
  package let handOff = YieldHandOff()
  /// The longest spin before sleeping: about what one hop through a futex sleep and wake-up
  /// costs on this VM (libdispatch's quiet `sema` round trip, two such hops, takes 9 µs).
  /// Quiet, 7 runs: 2 µs made our round trip 1.2–1.4 µs, 4 and 8 µs 0.8–1.1 µs.
  private static let spinNanoseconds: UInt64 = 4_000
  #if DEBUG
    /// Debug builds: `futex_wake` calls made by `signal`, and sleeps announced in
    /// `sleepers` by waiters (tests).
    private let wakeCount = Atomic<Int>(0)
    package var wakeCalls: Int { wakeCount.load(ordering: .relaxed) }
    private let announcements = Atomic<Int>(0)
    package var sleepsAnnounced: Int { announcements.load(ordering: .relaxed) }
    /// Debug builds, tests: when above 0, this semaphore's waiters spin this long instead,
    /// whatever time jumps they see, so that a test can hold a waiter in its spin.
    package let testSpinNanoseconds = Atomic<UInt64>(0)
    /// Debug builds: waits that skipped the spin (yielding, then sleeping: steps 5 and 6)
    /// because the last signaller was another thread on the waiter's CPU, for tests.
    private let skippedSpins = Atomic<Int>(0)
    package var spinsSkippedOnSharedCPU: Int { skippedSpins.load(ordering: .relaxed) }
    /// Debug builds: `value` now (below 0: that many waiters are counted), for tests.
    package var currentValue: Int { value.load(ordering: .acquiring) }
  #endif

  /// Creates a semaphore with `value` units. A negative value is a client bug.
  public init(value: Int) {
    if value < 0 { clientBug("Semaphore created with a negative value (\(value))") }
    self.value = Atomic(value)
    self.initialValue = value
  }

  deinit {
    let current = value.load(ordering: .acquiring)
    if current < initialValue {
      clientBug(
        "Semaphore released while in use: value \(current) is below its initial value \(initialValue)"
      )
    }
  }

  /// Returns one unit, waking a waiter if there is one.
  /// - Returns: `true` if the unit went to a waiting thread (woken from its sleep, or taken
  ///   in its spin without a system call).
  @discardableResult
  public func signal() -> Bool {
    // Releasing; pairs with the acquiring decrement in `wait`.
    if value.wrappingAdd(1, ordering: .acquiringAndReleasing).oldValue >= 0 { return false }
    // Step 5: a signal that found a waiter records where it ran (a store only when that
    // changed: a hand-off that stays put adds none).
    if let here = Self.whereCalled(), signaller.load(ordering: .relaxed) != here {
      signaller.store(here, ordering: .relaxed)
    }
    // Sequentially consistent, as is the load after it: step 3's argument.
    tokens.atomic.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
    if sleepers.load(ordering: .sequentiallyConsistent) > 0 {
      #if DEBUG
        wakeCount.wrappingAdd(1, ordering: .relaxed)
      #endif
      tokens.wake(1)
    }
    return true
  }

  /// Takes one unit, sleeping until one is available or `deadline` passes.
  @discardableResult
  public func wait(timeout deadline: Deadline = .distantFuture) -> WaitResult {
    // Acquiring; pairs with the releasing increment in `signal`.
    if value.wrappingSubtract(1, ordering: .acquiringAndReleasing).oldValue > 0 { return .success }
    return waitSlow(deadline)
  }

  /// Takes one unit, waiting at most `timeout`.
  @discardableResult
  public func wait(timeout: Duration) -> WaitResult {
    wait(timeout: .now + timeout)
  }

  @inline(never)
  private func waitSlow(_ deadline: Deadline) -> WaitResult {
    let start = Deadline.now.uptimeNanoseconds
    // Already past (a try-wait): no spin, and no announcement that would make a racing
    // signal pay a `futex_wake` for nobody.
    if deadline.uptimeNanoseconds <= start { return takeToken() ? .success : giveUp() }
    // A signal often follows within microseconds (a ping-pong, a short critical section):
    // spin briefly on the token count before paying for a sleep and a wake-up, unless the
    // last signaller was another thread on this CPU (step 5).
    if lastSignallerSharesThisCPU {
      #if DEBUG
        skippedSpins.wrappingAdd(1, ordering: .relaxed)
      #endif
      // Step 6: give the CPU to that signaller rather than sleep, unless yields are paused.
      if handOff.wait(from: start, until: deadline.uptimeNanoseconds, take: takeToken) {
        return .success
      }
    } else if spinForToken(from: start, until: deadline) {
      return .success
    }
    while true {
      if takeToken() { return .success }
      if !sleepForToken(until: deadline) { return giveUp() }
    }
  }

  /// Step 5: whether the last signal that found a waiter came from another thread on the
  /// calling thread's CPU (never while a test holds this semaphore's waiters in their spin).
  @inline(__always)
  private var lastSignallerSharesThisCPU: Bool {
    #if DEBUG
      if testSpinNanoseconds.load(ordering: .relaxed) > 0 { return false }
    #endif
    guard let here = Self.whereCalled() else { return false }
    let last = signaller.load(ordering: .relaxed)
    return last != 0 && UInt32(truncatingIfNeeded: last) == UInt32(truncatingIfNeeded: here)
      && last >> 32 != here >> 32
  }

  /// The calling thread's CPU (low 32 bits) and a tag of the thread (high 32: its
  /// `pthread_self` address over 64, whose low 32 bits differ between threads whose
  /// control blocks lie less than 256 GiB apart; two threads that share a tag only lose the
  /// skip), or nil when the CPU cannot be read.
  @inline(__always)
  private static func whereCalled() -> UInt64? {
    let cpu = cls_current_cpu()
    guard cpu >= 0 else { return nil }
    return (UInt64(pthread_self()) >> 6) << 32 | UInt64(UInt32(cpu))
  }

  /// Spins from `start` (the clock then) until a token is taken (true), `spinNanoseconds`
  /// or `deadline` pass, or the spinner sees that it was preempted (a gap of more than
  /// `SpinGovernor.preemptionGapNanoseconds` between two readings). The clock is read once
  /// per 16 checks.
  private func spinForToken(from start: UInt64, until deadline: Deadline) -> Bool {
    var length = Self.spinNanoseconds
    var watchesJumps = true
    #if DEBUG
      let override = testSpinNanoseconds.load(ordering: .relaxed)
      if override > 0 {
        length = override
        watchesJumps = false
      }
    #endif
    let end = Swift.min(start &+ length, deadline.uptimeNanoseconds)
    var last = start
    while true {
      for _ in 0..<16 {
        if takeToken() { return true }
        spinLoopHint()
      }
      let now = Deadline.now.uptimeNanoseconds
      if watchesJumps && now &- last > SpinGovernor.preemptionGapNanoseconds { return false }
      if now >= end { return false }
      last = now
    }
  }

  /// Sleeps on `tokens` while it is 0, announced in `sleepers` (step 3); false if `deadline`
  /// passed first. May return early: the caller looks for a token again.
  private func sleepForToken(until deadline: Deadline) -> Bool {
    // One clock read: the deadline check and the sleep's relative timeout.
    var timeout: UInt64?
    if deadline != .distantFuture {
      let now = Deadline.now
      // Past the deadline: no announcement (see `waitSlow`).
      if now >= deadline { return false }
      timeout = deadline.uptimeNanoseconds - now.uptimeNanoseconds
    }
    #if DEBUG
      announcements.wrappingAdd(1, ordering: .relaxed)
    #endif
    sleepers.wrappingAdd(1, ordering: .sequentiallyConsistent)
    defer { sleepers.wrappingSubtract(1, ordering: .relaxed) }
    if tokens.atomic.pointee.load(ordering: .sequentiallyConsistent) != 0 { return true }
    tokens.wait(whileEqualTo: 0, timeoutNanoseconds: timeout)
    return true
  }

  private func takeToken() -> Bool {
    var current = tokens.atomic.pointee.load(ordering: .acquiring)
    while current > 0 {
      let (taken, actual) = tokens.atomic.pointee.compareExchange(
        expected: current, desired: current - 1, ordering: .acquiringAndReleasing)
      if taken { return true }
      current = actual
    }
    return false
  }

  /// Deadline passed: undo our decrement, unless a signal already counted us.
  private func giveUp() -> WaitResult {
    var current = value.load(ordering: .acquiring)
    while current < 0 {
      let (undone, actual) = value.compareExchange(
        expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
      if undone { return .timedOut }
      current = actual
    }
    // A signal counted us and is handing over a token: wait for one (step 4).
    while !takeToken() { _ = sleepForToken(until: .distantFuture) }
    return .success
  }
}
