/// Where a loop's timers read the time.
///
/// Thread-safety: a value type; safe everywhere.
package enum LoopClock: Sendable {
  /// `CLOCK_MONOTONIC`, with a timer descriptor armed for the earliest deadline: every loop
  /// outside tests.
  case monotonic
  /// A clock that starts at `startingAt` and moves only when the thread driving the loop moves
  /// it (`EventLoop.advance(by:)`, `advance(to:)`, `stall(for:)`); no timer descriptor is
  /// armed and the loop never sleeps. Start well past zero (the default, ``virtualStart``,
  /// is): the coalescing window counts from the last expiry, which before the first one
  /// reads as 0.
  case virtual(startingAt: Deadline = LoopClock.virtualStart)

  /// Where virtual clocks start unless told otherwise: 1 s, an arbitrary instant far past the
  /// coalescing window of the (never happened) expiry at 0.
  package static let virtualStart = Deadline(uptimeNanoseconds: 1_000_000_000)
}
