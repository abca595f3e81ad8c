import Glibc

/// A point on the monotonic clock (`CLOCK_MONOTONIC`), in nanoseconds.
///
/// Monotonic deadlines are immune to wall-clock changes; use them for timeouts and timers.
/// Thread-safety: a value type; safe everywhere.
public struct Deadline: Sendable, Hashable, Comparable, CustomStringConvertible {
  /// Nanoseconds since an unspecified point (boot, on Linux).
  public let uptimeNanoseconds: UInt64

  /// Creates a deadline at `uptimeNanoseconds` on the monotonic clock.
  public init(uptimeNanoseconds: UInt64) {
    self.uptimeNanoseconds = uptimeNanoseconds
  }

  /// The current monotonic time (one vDSO `clock_gettime`, about 20 ns).
  public static var now: Deadline {
    Deadline(uptimeNanoseconds: monotonicNanoseconds())
  }

  /// A deadline that never arrives: timers set for it never fire and waits never time out.
  public static let distantFuture = Deadline(uptimeNanoseconds: .max)

  /// Whether `lhs` comes before `rhs` on the monotonic clock.
  public static func < (lhs: Deadline, rhs: Deadline) -> Bool {
    lhs.uptimeNanoseconds < rhs.uptimeNanoseconds
  }

  /// The deadline `duration` after `lhs`; saturates at ``distantFuture`` and at zero.
  public static func + (lhs: Deadline, rhs: Duration) -> Deadline {
    let delta = rhs.saturatingNanoseconds
    if delta >= 0 {
      let (sum, overflow) = lhs.uptimeNanoseconds.addingReportingOverflow(UInt64(delta))
      return overflow ? .distantFuture : Deadline(uptimeNanoseconds: sum)
    }
    let magnitude = delta.magnitude
    return Deadline(
      uptimeNanoseconds: lhs.uptimeNanoseconds > magnitude ? lhs.uptimeNanoseconds - magnitude : 0)
  }

  /// The deadline `duration` before `lhs`.
  public static func - (lhs: Deadline, rhs: Duration) -> Deadline {
    lhs + (.zero - rhs)
  }

  /// The signed time from `rhs` to `lhs`.
  public static func - (lhs: Deadline, rhs: Deadline) -> Duration {
    if lhs >= rhs {
      return .nanoseconds(Int64(clamping: lhs.uptimeNanoseconds - rhs.uptimeNanoseconds))
    }
    return .zero - .nanoseconds(Int64(clamping: rhs.uptimeNanoseconds - lhs.uptimeNanoseconds))
  }

  /// `Deadline(<n> ns)`, or `Deadline.distantFuture`.
  public var description: String {
    self == .distantFuture ? "Deadline.distantFuture" : "Deadline(\(uptimeNanoseconds) ns)"
  }
}

/// A point on the wall clock (`CLOCK_REALTIME`), in nanoseconds since the Unix epoch.
///
/// Wall deadlines follow changes to the system clock; use them for "at 09:00" style timers.
/// Thread-safety: a value type; safe everywhere.
public struct WallDeadline: Sendable, Hashable, Comparable, CustomStringConvertible {
  /// Nanoseconds since 1970-01-01T00:00:00Z.
  public let nanosecondsSinceEpoch: UInt64

  /// Creates a wall deadline `nanosecondsSinceEpoch` after the Unix epoch.
  public init(nanosecondsSinceEpoch: UInt64) {
    self.nanosecondsSinceEpoch = nanosecondsSinceEpoch
  }

  /// The current wall-clock time.
  public static var now: WallDeadline {
    WallDeadline(nanosecondsSinceEpoch: clockNanoseconds(CLOCK_REALTIME))
  }

  /// A wall deadline that never arrives.
  public static let distantFuture = WallDeadline(nanosecondsSinceEpoch: .max)

  /// Whether `lhs` comes before `rhs` on the wall clock.
  public static func < (lhs: WallDeadline, rhs: WallDeadline) -> Bool {
    lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch
  }

  /// The wall deadline `duration` after `lhs`; saturates at ``distantFuture`` and at zero.
  public static func + (lhs: WallDeadline, rhs: Duration) -> WallDeadline {
    let moved = Deadline(uptimeNanoseconds: lhs.nanosecondsSinceEpoch) + rhs
    return WallDeadline(nanosecondsSinceEpoch: moved.uptimeNanoseconds)
  }

  /// The monotonic deadline that corresponds to this wall time, as the clocks stand now. A
  /// wall time in the past maps as far into the monotonic past (no earlier than the
  /// monotonic clock's zero), so a repeating timer started then counts the periods it missed.
  public var monotonicEquivalent: Deadline {
    if self == .distantFuture { return .distantFuture }
    let wallNow = WallDeadline.now.nanosecondsSinceEpoch
    let monoNow = Deadline.now
    if nanosecondsSinceEpoch <= wallNow {
      let ago = wallNow - nanosecondsSinceEpoch
      let back = Swift.min(ago, monoNow.uptimeNanoseconds)
      return Deadline(uptimeNanoseconds: monoNow.uptimeNanoseconds - back)
    }
    return monoNow + .nanoseconds(Int64(clamping: nanosecondsSinceEpoch - wallNow))
  }

  /// `WallDeadline(<n> ns since epoch)`, or `WallDeadline.distantFuture`.
  public var description: String {
    self == .distantFuture
      ? "WallDeadline.distantFuture" : "WallDeadline(\(nanosecondsSinceEpoch) ns since epoch)"
  }
}

extension Duration {
  /// This duration in whole nanoseconds, clamped to the range of `Int64`.
  @inlinable
  public var saturatingNanoseconds: Int64 {
    let (seconds, attoseconds) = components
    let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    if overflow { return seconds < 0 ? .min : .max }
    let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
    if overflow2 { return seconds < 0 ? .min : .max }
    return sum
  }
}

/// Reads `CLOCK_MONOTONIC` in nanoseconds.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
  clockNanoseconds(CLOCK_MONOTONIC)
}

@inline(__always)
func clockNanoseconds(_ clock: clockid_t) -> UInt64 {
  var ts = timespec()
  // clock_gettime cannot fail for these two clocks with a valid pointer.
  _ = clock_gettime(clock, &ts)
  return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}
