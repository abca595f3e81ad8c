import CLoopShims
import CLoopThreadSlots
import Glibc
import MainLoop

/// Cheap timestamps for per-item queue wait times.
///
/// Every queue item is stamped when submitted and when it starts, so the clock read must
/// cost a few nanoseconds: the CPU's cycle counter (x86 TSC, arm64 virtual counter) where the
/// kernel itself trusts it, CLOCK_MONOTONIC nanoseconds otherwise. Tick values are only ever
/// subtracted from each other and converted to nanoseconds when a snapshot is taken, with a
/// rate calibrated against CLOCK_MONOTONIC since the first use.
///
/// Thread-safety: stateless apart from two values computed once (`static let`).
package enum Ticks {
  /// Whether `cls_cycle_counter` runs at a constant rate, in step on every CPU: true on
  /// arm64 (the architected timer), on x86-64 only when the kernel's clocksource is the TSC
  /// (the kernel checked it is invariant and synchronised).
  static let usesCycleCounter: Bool = {
    #if arch(x86_64)
      return readSmallTextFile(
        "/sys/devices/system/clocksource/clocksource0/current_clocksource", limit: 64
      )?.split(separator: "\n").first.map(String.init)
        == "tsc"
    #elseif arch(arm64)
      return true
    #else
      return false
    #endif
  }()

  /// A counter reading and the monotonic time, taken together at first use (the first queue
  /// creation, through `QueueRegistry`).
  static let reference: (ticks: UInt64, nanoseconds: UInt64) = pairedReading()

  /// The current tick count.
  @inline(__always)
  static func now() -> UInt64 {
    usesCycleCounter ? cls_cycle_counter() : Deadline.now.uptimeNanoseconds
  }

  /// Nanoseconds per tick, measured from `reference` to now. Within a millisecond of the
  /// reference (a snapshot taken just after the first submission) it first waits for a
  /// millisecond to pass so the rate is accurate to a few parts per million.
  static func nanosecondsPerTick() -> Double {
    guard usesCycleCounter else { return 1 }
    let start = reference
    var end = pairedReading()
    while end.nanoseconds < start.nanoseconds + 1_000_000 {
      cls_cpu_relax()
      end = pairedReading()
    }
    guard end.ticks > start.ticks else { return 1 }
    return Double(end.nanoseconds - start.nanoseconds) / Double(end.ticks - start.ticks)
  }

  /// A counter reading and the monotonic time at the same instant: the clock read is
  /// bracketed by two counter reads, and of five tries the narrowest bracket wins (a thread
  /// preempted between reads would otherwise skew the rate), its midpoint paired with the
  /// clock.
  private static func pairedReading() -> (ticks: UInt64, nanoseconds: UInt64) {
    guard usesCycleCounter else {
      let now = Deadline.now.uptimeNanoseconds
      return (now, now)
    }
    var best = (ticks: UInt64(0), nanoseconds: UInt64(0))
    var narrowest = UInt64.max
    for _ in 0..<5 {
      let before = cls_cycle_counter()
      let nanoseconds = Deadline.now.uptimeNanoseconds
      let after = cls_cycle_counter()
      let width = after &- before
      if width < narrowest {
        narrowest = width
        best = (before &+ width / 2, nanoseconds)
      }
    }
    return best
  }

  /// The stamp of a pool job or a queue's item: the tick count with a chance of one in
  /// eight, else 0 ("not timed"), whose start then reads no clock either.
  ///
  /// Why sampled: a clock read costs 19-22 ns on the 2-CPU VM this was measured on
  /// (`rdtsc` in a loop; `clock_gettime` 35 ns), and a job used to pay two (its stamp and its
  /// start), against about 150 ns for the rest of a submission and a start together. The
  /// figures these stamps feed (the longest and the recent wait of a lane or a queue) are
  /// then those of the stamped items: a stall that N items sit behind goes unseen with a
  /// chance of (7/8)^N (1 in 800 for 50 items); a wait that only a lone item suffered can be
  /// missed, except on a serial queue, which also times the first item of each drain from
  /// the instant the drain was scheduled, and on the main queue, which stamps every item
  /// (`Queue+Serial.swift`, step 5).
  ///
  /// Why pseudo-random, not every eighth: the choice is the calling thread's (no shared
  /// write), and a thread's submissions interleave in regular patterns. A concurrent
  /// queue's item that starts at once is two submissions (the queue's stamp, then its pool
  /// job's), so "every eighth" would have stamped one of the two kinds always and the other
  /// never (a reviewer's finding); so would a thread feeding two queues in turn. The
  /// thread's own xorshift sequence (`lds_stamp_due`) has no such period.
  ///
  /// 0 never occurs as a tick count (the counter and the uptime clock start long before any
  /// submission).
  @inline(__always)
  static func sampledStamp() -> UInt64 {
    lds_stamp_due() != 0 ? now() : 0
  }

  /// How many submissions of the calling thread `sampledStamp` has stamped, for tests.
  package static var stampsTakenOnThisThread: UInt64 { lds_stamps_taken_get() }

  /// Ticks elapsed from `earlier` to `later`, 0 if the counter went backwards (it cannot for
  /// a reliable counter; this keeps a figure sane should a CPU's counter drift).
  @inline(__always)
  static func elapsed(from earlier: UInt64, to later: UInt64) -> UInt64 {
    later > earlier ? later - earlier : 0
  }
}
