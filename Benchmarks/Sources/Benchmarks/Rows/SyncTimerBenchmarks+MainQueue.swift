import Dispatch
import Glibc
import LoopDispatch

/// Main-queue round trips: a token goes from a global queue to the main queue and back.
///
/// Both sides run in a child process of their own (``ChildProcess``), because Dispatch's
/// main queue only runs under `dispatchMain()`, which never returns; LoopDispatch's runs the
/// same way so that the two are measured alike. In the child:
/// 1. The main thread posts the first hop onto the global queue, then drives the main queue:
///    LoopDispatch with `Queue.runMain(until:deadline:)` on the process main thread,
///    Dispatch with `dispatchMain()` (on Linux its main-queue work then runs on pool threads).
/// 2. Each global hop posts to the main queue; each main hop counts a round trip and posts
///    back to the global queue. The first ``warmupRoundTrips`` are not timed (pool start-up).
/// 3. The first timed main hop and the last one read the clocks (wall and the child's own CPU
///    time, ``ClockReading``); the last one ends the run: LoopDispatch's sets `done`, which
///    `runMain` sees after that loop turn; Dispatch's reports and exits.
/// 4. The child reports wall and CPU ns per round trip (``ChildProcess/report(_:extras:)``);
///    the parent parses them.
extension SyncTimerBenchmarks {
  enum MainRoundTrip {
    static let oursChild = "ld-main-roundtrip"
    static let dispatchChild = "dispatch-main-roundtrip"
    static let warmupRoundTrips = 2_000

    // Only touched by the hop running now: each `async` orders one hop's writes before the
    // next hop's reads, and `done` is read on the main thread, where the last hop ran.
    nonisolated(unsafe) static var remaining = 0
    nonisolated(unsafe) static var startedAt = ClockReading(wall: 0, cpu: 0)
    nonisolated(unsafe) static var finishedAt = ClockReading(wall: 0, cpu: 0)
    nonisolated(unsafe) static var done = false

    /// Counts the round trip that just reached the main queue; false after the last.
    @inline(__always)
    static func countRoundTrip() -> Bool {
      remaining -= 1
      if remaining == mainRoundTrips { startedAt = ClockReading.start() }
      if remaining > 0 { return true }
      finishedAt = ClockReading.end()
      return false
    }

    /// Wall and CPU ns per timed round trip.
    static var measurement: Measurement {
      Measurement(from: startedAt, to: finishedAt, operations: mainRoundTrips)
    }

    // MARK: LoopDispatch

    static func oursOnGlobal() { Queue.main.async { oursOnMain() } }

    static func oursOnMain() {
      if countRoundTrip() {
        Queue.global().async { oursOnGlobal() }
      } else {
        done = true
      }
    }

    static func runOursChild() -> Never {
      remaining = warmupRoundTrips + mainRoundTrips
      Queue.global().async { oursOnGlobal() }
      if !Queue.runMain(until: { done }, deadline: .now + .seconds(60)) {
        writeToStandardError(
          "main-queue round trips did not finish within 60 s; \(remaining) left\n")
        exit(1)
      }
      ChildProcess.report(measurement)
    }

    // MARK: Dispatch

    static func dispatchOnGlobal() { DispatchQueue.main.async { dispatchOnMain() } }

    static func dispatchOnMain() {
      if countRoundTrip() {
        DispatchQueue.global().async { dispatchOnGlobal() }
      } else {
        ChildProcess.report(measurement)
      }
    }

    static func runDispatchChild() -> Never {
      remaining = warmupRoundTrips + mainRoundTrips
      DispatchQueue.global().async { dispatchOnGlobal() }
      dispatchMain()
    }
  }
}
