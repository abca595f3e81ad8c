import Glibc

/// The monotonic clock in nanoseconds (the clock the C baselines use too).
enum Stopwatch {
  @inline(__always)
  static func now() -> UInt64 {
    var ts = timespec()
    _ = clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
  }
}
