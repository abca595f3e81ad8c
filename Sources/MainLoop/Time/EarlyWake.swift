import CLoopShims

/// Waking early for a timer: the rule shared by the event loop's timer descriptor and
/// LoopDispatch's driver timers.
///
/// On these VMs a thread asleep in `epoll_wait` runs 30–70 µs after its timerfd expires (the
/// halted virtual CPU's wake-up), so every timer was late by that much, whatever the runtime.
/// The rule:
/// 1. An expiry that woke its thread measures the delay from the instant the descriptor was
///    set for to the thread running (`expired(now:sleptSince:)`), capped at `maxAdvance` (a
///    thread preempted for longer says nothing of the next wake-up); `advance` is their
///    average, the newest weighing 1/8. Only such expiries teach: the thread entered its
///    wait (`sleptSince`, read as it entered) before the instant, and the expiry is the
///    first thing it handles after the wait returns. A thread busy at the instant (a
///    handler, a batch of events) finds the descriptor expired when it next waits, and that
///    lateness is its own work, not a wake-up: learnt, it raised `advance` towards the cap on
///    a loaded host, and every far timer then spun up to 190 µs holding its thread. The owner
///    reads the clock as it enters a wait only while `learnsAtNextExpiry` holds: one vDSO
///    read (25 ns here) before a wait that may block, none while no timer is set.
/// 2. A deadline at least `minimumDelay` away (the thread will sleep until it) is set
///    `advance` early (`expiry(for:now:)`). Closer deadlines are set exactly: a burst of
///    timers close together would otherwise keep the thread spinning from one to the next.
/// 3. Woken early, the thread spins to the earliest deadline (`spin(until:now:within:)`), at most
///    `advance` and a quarter away: a sleep would cost the very delay it saves. The timers
///    themselves still fire by the clock, never early.
///
/// Who may touch what: a value of this type belongs to one descriptor; its owner serialises
/// every call (the loop thread, or the driver timers' lock).
package struct EarlyWake {
  /// The most one delay counts for, and so the longest a spin lasts (with a quarter more).
  package static let maxAdvance: UInt64 = 150_000
  /// Only deadlines at least this far away are set early.
  package static let minimumDelay: UInt64 = 500_000

  /// How early a far deadline is set: the average measured delay.
  package private(set) var advance: UInt64 = 0
  /// The instant the descriptor was last set for, when that was in the future (0 otherwise:
  /// an instant already past expires at once, which says nothing of the delay).
  private var armedExpiry: UInt64 = 0
  /// Whether the descriptor was last set early.
  private var armedEarly = false

  package init() {}

  /// The instant to set the descriptor for, for `deadline` (0: disarm, returned unchanged).
  package mutating func expiry(for deadline: UInt64, now: UInt64) -> UInt64 {
    armedEarly =
      deadline != 0 && advance > 0 && deadline > now && deadline - now >= Self.minimumDelay
    let expiry = armedEarly ? deadline - advance : deadline
    armedExpiry = expiry > now ? expiry : 0
    return expiry
  }

  /// Whether the expiry the descriptor is set for could teach the delay (rule 1): it lies
  /// ahead of the last `expiry(for:now:)`. While it holds, the owner reads the clock as its
  /// thread enters a wait, for `expired(now:sleptSince:)`.
  package var learnsAtNextExpiry: Bool { armedExpiry != 0 }

  /// At an expiry of the descriptor: learns the delay if the expiry woke the thread (rule 1),
  /// and returns whether the descriptor had been set early (the caller may then spin).
  ///
  /// - Parameters:
  ///   - now: The clock, read just before.
  ///   - sleptSince: The clock reading as the thread entered the wait this expiry ended (or
  ///     any instant known to be no later: 1 for a wait entered before the descriptor was
  ///     set), if the expiry is the first thing handled since that wait returned; 0
  ///     otherwise (the wait did not block, or other events were handled first).
  package mutating func expired(now: UInt64, sleptSince: UInt64) -> Bool {
    if armedExpiry != 0 && now >= armedExpiry {
      // Entered at or after the instant: the descriptor had expired before the thread
      // waited, so it was busy, not asleep, when it expired.
      if sleptSince != 0 && sleptSince < armedExpiry {
        let delay = min(now - armedExpiry, Self.maxAdvance)
        advance = Self.averaged(advance, with: delay)
      }
      armedExpiry = 0
    }
    defer { armedEarly = false }
    return armedEarly
  }

  /// A running average of delays after one more sample: the newest weighs 1/8 (here and in
  /// LoopDispatch's `EarlyHandOff`). Delays are at most a few hundred µs, so nothing wraps.
  package static func averaged(_ average: UInt64, with sample: UInt64) -> UInt64 {
    (average &* 7 &+ sample) / 8
  }

  /// How far ahead a deadline may lie for a thread woken early to spin to it: `advance` and
  /// a quarter.
  package var spinBound: UInt64 { advance + advance / 4 }

  /// Spins until `deadline` if it lies at most `bound` (a `spinBound`) after `now`; returns
  /// at once otherwise. Static, so a caller can spin outside the lock that guards its value.
  package static func spin(until deadline: UInt64, now: UInt64, within bound: UInt64) {
    guard deadline > now, deadline - now <= bound else { return }
    while monotonicNanoseconds() < deadline { cls_cpu_relax() }
  }
}
