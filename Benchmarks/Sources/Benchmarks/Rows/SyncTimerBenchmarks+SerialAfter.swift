import Dispatch
import Glibc
import LoopDispatch
import Synchronization

/// One `after` at a time onto an idle serial queue: how late does its work start?
///
/// Each sample schedules one timer 1–3 ms ahead (the same sequence for both sides), waits for
/// its handler, and records `now - deadline` on `CLOCK_MONOTONIC`, read first thing in the
/// handler. Between samples the queue and the pool go idle, as a server's timeouts find them,
/// so the figure includes whatever it costs to get from the timer's thread to the handler
/// (on both sides today: a thread hop to a pool worker). The wall figure is the p50 lateness
/// in µs; the CPU figure is the process's CPU time per sample (scheduling, the timer's wake,
/// the hop and any spinning).
extension SyncTimerBenchmarks {
  static let serialAfterSamples = 400

  final class SerialAfterRun: @unchecked Sendable {
    // @unchecked Sendable: `lateness` is written by the handler before it opens `fired` and
    // read by the runner after `fired.wait()`.
    var lateness: Int64 = 0
    var fired = Latch()

    /// The delays in ns: 1–3 ms, from a fixed seed.
    static let delays: [Int] = {
      var state: UInt64 = 0x5E_41A1_AF7E
      return (0..<serialAfterSamples).map { _ in
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return 1_000_000 + Int((state >> 33) % 2_000_001)
      }
    }()

    /// Runs every sample through `scheduleOne(delay, run)`, which must arrange for
    /// `run.record(deadline:)` to be called by the handler; logs p99 and returns p50.
    static func measure(
      logs: FigureLog, isOurs: Bool, _ scheduleOne: (Int, SerialAfterRun) -> Void
    ) -> Measurement {
      let run = SerialAfterRun()
      var samples: [Int64] = []
      samples.reserveCapacity(delays.count)
      let cpuStart = ProcessCPU.now()
      for delay in delays {
        run.fired = Latch()
        scheduleOne(delay, run)
        run.fired.wait()
        samples.append(run.lateness)
      }
      let cpu = ProcessCPU.now() - cpuStart
      samples.sort()
      let p50 = Double(samples[TimerRun.percentileIndex(0.50, samples.count)]) / 1_000
      let p99 = Double(samples[TimerRun.percentileIndex(0.99, samples.count)]) / 1_000
      if isOurs { logs.ours.append(p99) } else { logs.rival.append(p99) }
      return Measurement(wall: p50, cpuPerOperation: Double(cpu) / Double(samples.count))
    }

    /// The handler's body: the clock first.
    @inline(__always)
    func record(deadline: UInt64) {
      lateness = Int64(bitPattern: Stopwatch.now() &- deadline)
      fired.open()
    }

    static func oursRun(logs: FigureLog) -> Measurement {
      let queue = Queue(label: "bench.serial-after")
      return measure(logs: logs, isOurs: true) { delay, run in
        let deadline = Deadline.now + .nanoseconds(delay)
        let nanoseconds = deadline.uptimeNanoseconds
        queue.after(deadline: deadline) { run.record(deadline: nanoseconds) }
      }
    }

    static func dispatchRun(logs: FigureLog) -> Measurement {
      TimerRun.checkDispatchClock
      let queue = DispatchQueue(label: "bench.serial-after")
      return measure(logs: logs, isOurs: false) { delay, run in
        let deadline = DispatchTime.now() + .nanoseconds(delay)
        let nanoseconds = deadline.uptimeNanoseconds
        queue.asyncAfter(deadline: deadline) { run.record(deadline: nanoseconds) }
      }
    }
  }
}
