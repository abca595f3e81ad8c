import Dispatch
import Glibc
import LoopDispatch

/// `MainActor.run` round trips from a task, against a continuation resumed from Dispatch's
/// main queue.
///
/// Both sides run in a child process of their own (``ChildProcess``): the main executor has
/// to own the process main thread, and ours must be installed before any task exists.
/// 1. Ours: the child calls `ConcurrencyIntegration.install()` first, so `@MainActor` code
///    runs on `Queue.main` and tasks on the LoopDispatch pool; a detached task does
///    `await MainActor.run { ... }` in a loop while `Queue.runMain()` drives the main thread.
/// 2. Dispatch: a detached task (on the toolchain's global executor) does
///    `await withCheckedContinuation { c in DispatchQueue.main.async { c.resume() } }` in a
///    loop while `dispatchMain()` drives the main queue.
/// 3. The first ``warmupRoundTrips`` are not timed; around the timed ones the task reads the
///    clocks (wall and the child's own CPU time, ``ClockReading``), then checks the main-side
///    count, reports wall and CPU ns per round trip and exits the child.
extension ConcurrencyBenchmarks {
  enum MainActorRoundTrip {
    static let oursChild = "ld-mainactor-run"
    static let dispatchChild = "dispatch-main-continuation"
    static let warmupRoundTrips = 2_000

    /// Round trips that reached the main actor (ours).
    @MainActor static var oursHops = 0
    /// Round trips that reached Dispatch's main queue; only touched there, one at a time
    /// (each hop's `resume` orders it before the next hop's submission).
    nonisolated(unsafe) static var dispatchHops = 0

    /// Checks that every round trip reached the main side, then reports wall and CPU ns per
    /// timed one.
    static func finish(from start: ClockReading, to end: ClockReading, hops: Int) -> Never {
      let expected = warmupRoundTrips + mainActorRoundTrips
      if hops != expected {
        writeToStandardError("main side ran \(hops) of \(expected) round trips\n")
        exit(1)
      }
      ChildProcess.report(Measurement(from: start, to: end, operations: mainActorRoundTrips))
    }

    // MARK: LoopDispatch

    static func runOursChild() -> Never {
      ConcurrencyIntegration.install()
      Task.detached {
        // The body writes main-actor state, so the hop cannot be optimised away.
        for _ in 0..<warmupRoundTrips { await MainActor.run { oursHops += 1 } }
        let start = ClockReading.start()
        for _ in 0..<mainActorRoundTrips { await MainActor.run { oursHops += 1 } }
        let end = ClockReading.end()
        finish(from: start, to: end, hops: await MainActor.run { oursHops })
      }
      Queue.runMain()
    }

    // MARK: Dispatch

    static func dispatchRoundTrip() async {
      await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        DispatchQueue.main.async {
          dispatchHops += 1
          continuation.resume()
        }
      }
    }

    static func runDispatchChild() -> Never {
      Task.detached {
        for _ in 0..<warmupRoundTrips { await dispatchRoundTrip() }
        let start = ClockReading.start()
        for _ in 0..<mainActorRoundTrips { await dispatchRoundTrip() }
        let end = ClockReading.end()
        finish(from: start, to: end, hops: dispatchHops)
      }
      dispatchMain()
    }
  }
}
