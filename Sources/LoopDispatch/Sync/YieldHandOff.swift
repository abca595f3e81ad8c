import Glibc
import MainLoop
import Synchronization

/// Step 6 of `Semaphore`: a waiter whose last signaller is another thread on its own CPU
/// (step 5) gives that CPU to it with `sched_yield` and looks for its token after each yield,
/// before it sleeps.
///
/// Why: in a hand-off between two threads on one CPU (a ping-pong, a request and its reply),
/// the signaller needs this CPU to run. Sleeping gives it the CPU too, but then each hop costs
/// a `futex_wait` that takes the waiter off the run queue and a `futex_wake` that puts it back
/// (the kernel choosing a CPU for it again). A yield keeps both threads on the run queue: the
/// signaller finds no sleeper (no `futex_wake`), and when it waits in turn, its own yield gives
/// the CPU back. A round trip is two `sched_yield` calls and two switches. Measured (`sema` in
/// `Benchmarks/C`, the process pinned to one CPU, two busy loops pinned to the other, 3 runs
/// each, alternating with libdispatch): 2.2 µs a round trip with the yields, 3.4 µs sleeping,
/// libdispatch (which sleeps) 3.2 µs.
///
/// When it stops, and sleeps instead (or times out, if the deadline came first: one yield
/// can overrun the deadline by another thread's time slice, as a preempted spin can):
/// - the token did not come within `yields` yields, `budgetNanoseconds` or the deadline (the
///   signaller is not about to signal, or it is not on this CPU after all and each yield
///   returned at once);
/// - one yield took longer than `SpinGovernor.preemptionGapNanoseconds`: something other
///   than a quick hand-off held the CPU. Mostly a third thread (a busy neighbour on this CPU, which
///   a yield hands a whole time slice: 1.4 ms a round trip in the measurement above with one busy
///   loop pinned beside the pair, against 7.4 µs sleeping); also a signaller that works 50 µs or
///   more before it signals, or a hypervisor that took the CPU away, for which sleeping costs
///   little beside the wait anyway. Then yields are paused for this semaphore: for 1 ms after a
///   slow yield, twice as long as the last pause after each slow yield that follows the last one
///   within `memoryNanoseconds`, up to about 1 s. While paused the waiter sleeps at once, as before
///   this step. A slow yield that still found its token counts as slow too.
///   Why quick hand-offs do not shorten the pause: beside a busy neighbour on the same CPU,
///   the yields in between are mostly quick (the neighbour's turn comes at the next tick,
///   every 4 ms here), yet a pair that never sleeps competes with the neighbour as two busy
///   threads, where a pair that sleeps is woken ahead of it: with a quick hand-off taking
///   one doubling back, the pause stayed at 1–4 ms and the pinned `sema` above took 10–13
///   µs a round trip, against 7.1 for libdispatch.
///
/// The figures are this VM's kernel (6.18, EEVDF): there a yield pushes the yielder's
/// virtual deadline out by a slice, and only a sleep resets it, which is why a pair that
/// never sleeps loses its place to a neighbour. Another scheduler may favour the yields more
/// or less; the pause is what bounds the loss where they do not pay.
///
/// Memory order: `pausedUntil`, `lastSlow` and `pauseShift` are hints, loaded and stored
/// relaxed (racing waiters may lose an update; a lost update changes how long the pause
/// lasts, never whether a token is taken: the token count's protocol, `Semaphore` step 3, is
/// untouched). Only a slow yield writes them, so the steady state writes none.
///
/// A non-copyable struct, stored inline in its `Semaphore` (no allocation of its own).
package struct YieldHandOff: ~Copyable, Sendable {
  /// The most yields of one wait.
  static let yields = 8
  /// The longest a wait yields, from the start of its slow path.
  static let budgetNanoseconds: UInt64 = 16_000
  /// The first pause after a slow yield; each slow yield within `memoryNanoseconds` of the
  /// last doubles the pause, up to `maxPauseShift` doublings (1 ms << 10: about 1 s).
  static let firstPauseNanoseconds: UInt64 = 1_000_000
  static let maxPauseShift = 10
  /// How long a slow yield is remembered: four of the longest pauses, so that a neighbour
  /// that stays keeps the pause at its longest.
  package static let memoryNanoseconds: UInt64 =
    4 * (firstPauseNanoseconds << UInt64(maxPauseShift))

  /// Atomic. Yields are paused until this instant (`Deadline` nanoseconds).
  private let pausedUntil = Atomic<UInt64>(0)
  /// Atomic. The instant of the last slow yield (0: none yet).
  private let lastSlow = Atomic<UInt64>(0)
  /// Atomic. The doublings of the last pause.
  private let pauseShift = Atomic<Int>(0)
  #if DEBUG
    /// Debug builds, tests: waits that took their token after a yield, and pauses begun.
    private let handOffCount = Atomic<Int>(0)
    package var handOffs: Int { handOffCount.load(ordering: .relaxed) }
    private let pauseCount = Atomic<Int>(0)
    package var pauses: Int { pauseCount.load(ordering: .relaxed) }
  #endif

  package init() {}

  /// Yields for a token taken by `take` (true), from `start` (the clock then) until
  /// `deadline` at the latest. False when yields are paused, or when it stopped without a
  /// token (the caller sleeps).
  @inline(__always)
  func wait(from start: UInt64, until deadline: UInt64, take: () -> Bool) -> Bool {
    wait(
      from: start, until: deadline, take: take, yield: { sched_yield() },
      now: { Deadline.now.uptimeNanoseconds })
  }

  /// `wait`, with the yield and the clock given (tests drive it in virtual time).
  @inline(__always)
  package func wait(
    from start: UInt64, until deadline: UInt64, take: () -> Bool, yield: () -> Void,
    now clock: () -> UInt64
  ) -> Bool {
    if start < pausedUntil.load(ordering: .relaxed) { return false }
    let end = Swift.min(start &+ Self.budgetNanoseconds, deadline)
    var last = start
    for _ in 0..<Self.yields {
      yield()
      let now = clock()
      let slow = now &- last > SpinGovernor.preemptionGapNanoseconds
      if take() {
        if slow { pause(at: now) }
        #if DEBUG
          handOffCount.wrappingAdd(1, ordering: .relaxed)
        #endif
        return true
      }
      if slow {
        pause(at: now)
        return false
      }
      if now >= end { return false }
      last = now
    }
    return false
  }

  /// A slow yield: pause the yields, twice as long as the last pause if the last slow yield
  /// is recent, 1 ms otherwise.
  private func pause(at now: UInt64) {
    let last = lastSlow.load(ordering: .relaxed)
    // A racing waiter may have stored a later instant than `now`: that is recent too.
    let recent = last != 0 && (now < last || now - last < Self.memoryNanoseconds)
    let shift = recent ? Swift.min(pauseShift.load(ordering: .relaxed) + 1, Self.maxPauseShift) : 0
    pauseShift.store(shift, ordering: .relaxed)
    lastSlow.store(now, ordering: .relaxed)
    pausedUntil.store(now &+ (Self.firstPauseNanoseconds << UInt64(shift)), ordering: .relaxed)
    #if DEBUG
      pauseCount.wrappingAdd(1, ordering: .relaxed)
    #endif
  }
}
