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
/// 3. The last main hop notes the time and ends the run: LoopDispatch's sets `done`, which
///    `runMain` sees after that loop turn; Dispatch's prints the figure and exits.
/// 4. The child prints ns per round trip; the parent parses it.
extension SyncTimerBenchmarks {
  enum MainRoundTrip {
    static let oursChild = "ld-main-roundtrip"
    static let dispatchChild = "dispatch-main-roundtrip"
    static let warmupRoundTrips = 2_000

    // Only touched by the hop running now: each `async` orders one hop's writes before the
    // next hop's reads, and `done` is read on the main thread, where the last hop ran.
    nonisolated(unsafe) static var remaining = 0
    nonisolated(unsafe) static var startedAt: UInt64 = 0
    nonisolated(unsafe) static var finishedAt: UInt64 = 0
    nonisolated(unsafe) static var done = false

    /// Runs child mode `name` and returns its figure.
    static func measureInChild(_ name: String) -> Double {
      ChildProcess.figure(in: ChildProcess.run(name), of: name)
    }

    /// Counts the round trip that just reached the main queue; false after the last.
    @inline(__always)
    static func countRoundTrip() -> Bool {
      remaining -= 1
      if remaining == mainRoundTrips { startedAt = Stopwatch.now() }
      if remaining > 0 { return true }
      finishedAt = Stopwatch.now()
      return false
    }

    static var nanosecondsPerRoundTrip: Double {
      Double(finishedAt - startedAt) / Double(mainRoundTrips)
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
      ChildProcess.report(nanosecondsPerRoundTrip)
    }

    // MARK: Dispatch

    static func dispatchOnGlobal() { DispatchQueue.main.async { dispatchOnMain() } }

    static func dispatchOnMain() {
      if countRoundTrip() {
        DispatchQueue.global().async { dispatchOnGlobal() }
      } else {
        ChildProcess.report(nanosecondsPerRoundTrip)
      }
    }

    static func runDispatchChild() -> Never {
      remaining = warmupRoundTrips + mainRoundTrips
      DispatchQueue.global().async { dispatchOnGlobal() }
      dispatchMain()
    }
  }
}
