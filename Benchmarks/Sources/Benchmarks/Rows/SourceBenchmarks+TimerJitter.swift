import Dispatch
import Glibc
import LoopDispatch

/// A repeating 1 ms timer source for 2 s on a serial queue: LoopDispatch's `TimerSource`
/// against `DispatchSource.makeTimerSource`, both with zero leeway.
///
/// Walk-through (both sides alike):
/// 1. Read the clock once: `start`. Schedule the first fire at `start + interval`, then every
///    `interval`, and activate the source.
/// 2. Each handler run reads the clock first (`Deadline.now` for ours, `DispatchTime.now()`
///    for Dispatch; both are `CLOCK_MONOTONIC`, checked for Dispatch), then adds the source's
///    `data` (fires since the last run) to the cumulative count `k`. Its jitter is
///    |now − (start + k·interval)|: the distance from the latest fire it stands for.
/// 3. The runner sleeps until `start + duration + interval/2`, cancels the source and waits
///    for its cancel handler, which runs after any handler in flight.
/// 4. Figures: the mean jitter in µs (the row's own), the p99 jitter (nearest rank), and the
///    fires counted (the cumulative `data`; 2000 expected when every fire due was delivered).
extension SourceBenchmarks {
  /// Where the timer rows beside the mean jitter come from (see ``FigureLog``).
  final class JitterLogs {
    let p99 = FigureLog()
    let fires = FigureLog()
  }

  final class TimerJitter: @unchecked Sendable {
    // @unchecked Sendable: `runs`, `fires` and the slots are only touched by the event
    // handler, which never runs concurrently with itself (serial target queue); the runner
    // reads them after the cancel handler, which runs after the last event handler, opened
    // `cancelled`.

    static let interval: UInt64 = 1_000_000
    static let duration: UInt64 = 2_000_000_000
    static let expectedFires = Int(duration / interval)
    /// Room for one slot per fire, with margin; handler runs beyond it are counted only.
    static let capacity = expectedFires * 2

    let start: UInt64
    /// Per handler run: the clock at its start and the cumulative fire count `k`.
    let firedAt = UnsafeMutablePointer<UInt64>.allocate(capacity: capacity)
    let fireIndex = UnsafeMutablePointer<UInt64>.allocate(capacity: capacity)
    var runs = 0
    var fires: UInt64 = 0
    let cancelled = Latch()

    init(start: UInt64) { self.start = start }

    deinit {
      firedAt.deallocate()
      fireIndex.deallocate()
    }

    /// The body of every handler run, after reading the clock.
    @inline(__always)
    func record(now: UInt64, data: UInt) {
      fires += UInt64(data)
      guard runs < Self.capacity else { return }
      firedAt[runs] = now
      fireIndex[runs] = fires
      runs += 1
    }

    /// Sleeps until the run's end, then cancels via `cancel` and waits for the cancel
    /// handler; logs the p99 jitter and fires counted and returns the mean jitter in µs.
    func finish(logs: JitterLogs, isOurs: Bool, cancel: () -> Void) -> Double {
      let end = start + Self.duration + Self.interval / 2
      var until = timespec(
        tv_sec: Int(end / 1_000_000_000), tv_nsec: Int(end % 1_000_000_000))
      while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nil) == EINTR {}
      cancel()
      cancelled.wait()

      if runs == 0 { benchmarkFailure("the repeating timer never fired") }
      var jitters = (0..<runs).map { index -> Double in
        let ideal = start + fireIndex[index] * Self.interval
        let actual = firedAt[index]
        return Double(actual > ideal ? actual - ideal : ideal - actual) / 1_000
      }
      jitters.sort()
      let mean = jitters.reduce(0, +) / Double(runs)
      let p99 = jitters[SyncTimerBenchmarks.TimerRun.percentileIndex(0.99, runs)]
      if isOurs {
        logs.p99.ours.append(p99)
        logs.fires.ours.append(Double(fires))
      } else {
        logs.p99.rival.append(p99)
        logs.fires.rival.append(Double(fires))
      }
      return mean
    }

    static func oursRun(logs: JitterLogs) -> Double {
      let source = TimerSource(queue: Queue(label: "bench.timer"), label: "bench-jitter")
      let start = Deadline.now
      let run = TimerJitter(start: start.uptimeNanoseconds)
      source.setEventHandler { [unowned source] in
        let now = Deadline.now.uptimeNanoseconds
        run.record(now: now, data: source.data)
      }
      source.setCancelHandler { run.cancelled.open() }
      source.schedule(
        deadline: start + .nanoseconds(interval), repeating: .nanoseconds(interval),
        leeway: .zero)
      source.activate()
      return run.finish(logs: logs, isOurs: true) { source.cancel() }
    }

    static func dispatchRun(logs: JitterLogs) -> Double {
      SyncTimerBenchmarks.TimerRun.checkDispatchClock
      // The class behind the protocol, so that the handler can hold it `unowned`.
      guard
        let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "bench.timer"))
          as? DispatchSource
      else { benchmarkFailure("DispatchSource.makeTimerSource returned no DispatchSource") }
      let start = DispatchTime.now()
      let run = TimerJitter(start: start.uptimeNanoseconds)
      source.setEventHandler { [unowned source] in
        let now = DispatchTime.now().uptimeNanoseconds
        run.record(now: now, data: source.data)
      }
      source.setCancelHandler { run.cancelled.open() }
      source.schedule(
        deadline: start + .nanoseconds(Int(interval)), repeating: .nanoseconds(Int(interval)),
        leeway: .nanoseconds(0))
      source.activate()
      return run.finish(logs: logs, isOurs: false) { source.cancel() }
    }
  }
}
