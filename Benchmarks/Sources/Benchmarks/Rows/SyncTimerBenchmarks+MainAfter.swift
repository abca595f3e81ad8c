import Dispatch
import Glibc
import LoopDispatch

/// One `after` at a time onto the main queue: how late does its work start?
///
/// The samples of ``SerialAfterRun`` (the same 400 delays of 1–3 ms), each scheduled from
/// the previous one's handler, on the main queue of a child process of its own
/// (``ChildProcess``): LoopDispatch's main queue runs under `Queue.runMain` on the process
/// main thread, Dispatch's under `dispatchMain()` (on Linux its main-queue work then runs on
/// pool threads). The handler reads `CLOCK_MONOTONIC` first and records `now - deadline`.
/// The child reports the p50 lateness in µs as its figure, and its own CPU time per sample.
/// Between samples the main thread sleeps, as a server's does between timeouts, so the
/// figure includes the timer's wake-up; LoopDispatch's main loop sets its timerfd early by
/// the wake-up delay it measured (`EarlyWake`) and spins to the deadline.
extension SyncTimerBenchmarks {
  enum MainAfter {
    static let oursChild = "ld-main-after"
    static let dispatchChild = "dispatch-main-after"

    // Only touched by the handler running now (each schedules the next) and, once `done`
    // is set by the last, by the main thread after `runMain` returns.
    nonisolated(unsafe) static var samples: [Int64] = []
    nonisolated(unsafe) static var cpuStart: UInt64 = 0
    nonisolated(unsafe) static var done = false

    /// Records a sample; returns the next delay, or nil after the last.
    @inline(__always)
    static func record(deadline: UInt64) -> Int? {
      samples.append(Int64(bitPattern: Stopwatch.now() &- deadline))
      let delays = SerialAfterRun.delays
      return samples.count < delays.count ? delays[samples.count] : nil
    }

    /// p50 in µs and CPU ns per sample.
    static var measurement: Measurement {
      let cpu = ProcessCPU.now() - cpuStart
      let sorted = samples.sorted()
      let p50 = Double(sorted[TimerRun.percentileIndex(0.50, sorted.count)]) / 1_000
      return Measurement(wall: p50, cpuPerOperation: Double(cpu) / Double(sorted.count))
    }

    // MARK: LoopDispatch

    static func oursSchedule(_ delay: Int) {
      let deadline = Deadline.now + .nanoseconds(delay)
      let nanoseconds = deadline.uptimeNanoseconds
      Queue.main.after(deadline: deadline) {
        if let next = record(deadline: nanoseconds) { oursSchedule(next) } else { done = true }
      }
    }

    static func runOursChild() -> Never {
      samples.reserveCapacity(SerialAfterRun.delays.count)
      cpuStart = ProcessCPU.now()
      oursSchedule(SerialAfterRun.delays[0])
      if !Queue.runMain(until: { done }, deadline: .now + .seconds(60)) {
        writeToStandardError("main-queue after: \(samples.count) samples within 60 s\n")
        exit(1)
      }
      ChildProcess.report(measurement)
    }

    // MARK: Dispatch

    static func dispatchSchedule(_ delay: Int) {
      let deadline = DispatchTime.now() + .nanoseconds(delay)
      let nanoseconds = deadline.uptimeNanoseconds
      DispatchQueue.main.asyncAfter(deadline: deadline) {
        if let next = record(deadline: nanoseconds) {
          dispatchSchedule(next)
        } else {
          ChildProcess.report(measurement)
        }
      }
    }

    static func runDispatchChild() -> Never {
      TimerRun.checkDispatchClock
      samples.reserveCapacity(SerialAfterRun.delays.count)
      cpuStart = ProcessCPU.now()
      dispatchSchedule(SerialAfterRun.delays[0])
      dispatchMain()
    }
  }
}
