import Dispatch
import Glibc
import LoopDispatch
import Synchronization

/// 100k one-shot timers onto the default global queue with random delays of 0–500 ms (the
/// same sequence for both sides, from a fixed seed).
///
/// One run yields four figures:
/// 1. the cost of scheduling one timer: the scheduling loop's time over the count (each
///    iteration reads the clock for `now + delay`, as callers do);
/// 2. and 3. the lateness p50 and p99 in µs: each handler records `now - deadline` on
///    `CLOCK_MONOTONIC` into its own slot, so the figure includes the hop from the timer to
///    a worker of the global queue;
/// 4. how many handlers ran before their deadline (must be 0 for LoopDispatch).
///
/// Dispatch's `DispatchTime.uptimeNanoseconds` is checked against `CLOCK_MONOTONIC` before
/// its first run, so both sides' lateness is measured on the same clock.
extension SyncTimerBenchmarks {
  /// Where the timer rows beside the scheduling cost come from (see ``FigureLog``).
  final class TimerLogs {
    let p50 = FigureLog()
    let p99 = FigureLog()
    let early = FigureLog()
  }

  final class TimerRun: @unchecked Sendable {
    // @unchecked Sendable: each handler writes only its own `lateness` slot, before its
    // acquiring-and-releasing decrement of `remaining`; the last decrement opens `done`, and
    // the runner reads the slots after `done.wait()`.

    /// The run in progress; set before the first timer is scheduled, cleared after `done`.
    nonisolated(unsafe) static var active: TimerRun?

    /// The delays in ns, in scheduling order: SplitMix64 from a fixed seed, 0...500 ms.
    static let delays: [Int] = {
      var state: UInt64 = 0x5EED_0F_71_3E45
      return (0..<timerCount).map { _ in
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = state
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        mixed ^= mixed >> 31
        return Int(mixed % 500_000_001)
      }
    }()

    /// One slot per timer: its lateness in ns (negative if it fired early).
    let lateness: UnsafeMutablePointer<Int64>
    let count: Int
    // Atomic.
    let remaining: Atomic<Int>
    let done = Latch()

    init(count: Int) {
      self.count = count
      lateness = .allocate(capacity: count)
      lateness.initialize(repeating: 0, count: count)
      remaining = Atomic(count)
    }

    deinit { lateness.deallocate() }

    /// The body of every handler: the clock is read first.
    @inline(__always)
    static func fired(_ index: Int, deadline: UInt64) {
      let now = Stopwatch.now()
      let run = active.unsafelyUnwrapped
      run.lateness[index] = Int64(bitPattern: now &- deadline)
      // Acquiring and releasing: the last decrement sees every slot written.
      if run.remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
        run.done.open()
      }
    }

    /// Installs a run, lets `schedule` schedule every timer, waits for all to fire and
    /// records the figures: returns ns per scheduled timer (wall) with the process's CPU time
    /// per timer from the first schedule to the last fire (scheduling, firing and running
    /// the handlers, and any spinning meanwhile), and logs the rest into `logs`.
    static func measure(
      count: Int, logs: TimerLogs, isOurs: Bool, _ schedule: ([Int]) -> Void
    ) -> Measurement {
      let delays = Array(self.delays.prefix(count))
      let run = TimerRun(count: count)
      active = run
      defer { active = nil }
      let cpuStart = ProcessCPU.now()
      let start = Stopwatch.now()
      schedule(delays)
      let scheduling = Stopwatch.now() - start
      run.done.wait()
      let cpu = ProcessCPU.now() - cpuStart

      let sorted = UnsafeBufferPointer(start: run.lateness, count: count).sorted()
      let early = sorted.prefix { $0 < 0 }.count
      let p50 = Double(sorted[percentileIndex(0.50, count)]) / 1_000
      let p99 = Double(sorted[percentileIndex(0.99, count)]) / 1_000
      if isOurs {
        logs.p50.ours.append(p50)
        logs.p99.ours.append(p99)
        logs.early.ours.append(Double(early))
      } else {
        logs.p50.rival.append(p50)
        logs.p99.rival.append(p99)
        logs.early.rival.append(Double(early))
      }
      return Measurement(
        wall: Double(scheduling) / Double(count), cpuPerOperation: Double(cpu) / Double(count))
    }

    /// The nearest-rank index of percentile `fraction` among `count` sorted values.
    static func percentileIndex(_ fraction: Double, _ count: Int) -> Int {
      max(0, min(count - 1, Int((fraction * Double(count)).rounded(.up)) - 1))
    }

    static func oursRun(count: Int, logs: TimerLogs) -> Measurement {
      measure(count: count, logs: logs, isOurs: true) { delays in
        let queue = Queue.global()
        for index in 0..<delays.count {
          let deadline = Deadline.now + .nanoseconds(delays[index])
          let nanoseconds = deadline.uptimeNanoseconds
          queue.after(deadline: deadline) { fired(index, deadline: nanoseconds) }
        }
      }
    }

    static func dispatchRun(count: Int, logs: TimerLogs) -> Measurement {
      checkDispatchClock
      return measure(count: count, logs: logs, isOurs: false) { delays in
        let queue = DispatchQueue.global()
        for index in 0..<delays.count {
          let deadline = DispatchTime.now() + .nanoseconds(delays[index])
          let nanoseconds = deadline.uptimeNanoseconds
          queue.asyncAfter(deadline: deadline) { fired(index, deadline: nanoseconds) }
        }
      }
    }

    /// Fails the run unless `DispatchTime.now()` lies between two `CLOCK_MONOTONIC` readings
    /// taken around it (checked once).
    static let checkDispatchClock: Void = {
      for _ in 0..<100 {
        let before = Stopwatch.now()
        let dispatchNow = DispatchTime.now().uptimeNanoseconds
        let after = Stopwatch.now()
        if dispatchNow < before || dispatchNow > after {
          benchmarkFailure(
            "DispatchTime.now() (\(dispatchNow) ns) is not on CLOCK_MONOTONIC "
              + "(\(before)...\(after) ns): timer lateness would not be comparable")
        }
      }
    }()
  }
}
