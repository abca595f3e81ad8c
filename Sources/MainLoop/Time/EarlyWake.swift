import CLoopShims

/// Waking early for a timer: the rule shared by the event loop's timer descriptor and
/// LoopDispatch's driver timers.
///
/// On these VMs a thread asleep in `epoll_wait` runs 30–70 µs after its timerfd expires (the
/// halted virtual CPU's wake-up), so every timer was late by that much, whatever the runtime.
/// The rule:
/// 1. Each expiry measures the delay from the instant the descriptor was set for to the
///    thread running (`expired(now:)`), capped at `maxAdvance` (a thread preempted for longer
///    says nothing of the next wake-up); `advance` is their average, the newest weighing 1/8.
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

  /// At an expiry of the descriptor (read the clock just before): learns the delay, and
  /// returns whether the descriptor had been set early (the caller may then spin).
  package mutating func expired(now: UInt64) -> Bool {
    if armedExpiry != 0 && now >= armedExpiry {
      let delay = min(now - armedExpiry, Self.maxAdvance)
      advance = (advance * 7 + delay) / 8
      armedExpiry = 0
    }
    defer { armedEarly = false }
    return armedEarly
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
