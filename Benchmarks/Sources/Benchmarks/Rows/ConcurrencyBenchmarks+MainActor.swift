import Dispatch
import Glibc

/// `MainActor.run` round trips from a task: installed, against a continuation resumed from
/// Dispatch's main queue (the `mainactorrun` row) and against the same loop on Swift's default
/// executors (the `mainactorhops` row).
///
/// Every side runs in a child process of its own (``ChildProcess``), set up by
/// ``ConcurrencyBenchmarks/ChildExecutors``: the main executor has to own the process main
/// thread, and ours must be installed before any task exists.
/// 1. Installed (``mainActorLoop(roundTrips:)``): `@MainActor` code runs on `Queue.main`; a
///    detached task on the pool does `await MainActor.run { ... }` in a loop while
///    `Queue.runMain()` drives the main thread.
/// 2. Swift's default executors: the same loop, the main actor being Dispatch's main queue
///    under `dispatchMain()`, the task on the toolchain's global executor.
/// 3. Dispatch: a detached task (on the toolchain's global executor) does
///    `await withCheckedContinuation { c in DispatchQueue.main.async { c.resume() } }` in a
///    loop while `dispatchMain()` drives the main queue.
/// 4. The first ``warmupRoundTrips`` are not timed; around the timed ones the task reads the
///    clocks (wall and the child's own CPU time, ``ClockReading``), then checks the main-side
///    count, reports wall and CPU ns per round trip and exits the child.
extension ConcurrencyBenchmarks {
  enum MainActorRoundTrip {
    static let oursChild = "ld-mainactor-run"
    static let dispatchChild = "dispatch-main-continuation"
    static let warmupRoundTrips = 2_000

    /// ``mainActorHops`` round trips, installed against Swift's default executors.
    static let hops = ExecutorComparison(key: "mainactor-hops") {
      await mainActorLoop(roundTrips: mainActorHops)
    }

    /// Round trips that reached the main actor.
    @MainActor static var mainActorHopsRun = 0
    /// Round trips that reached Dispatch's main queue; only touched there, one at a time
    /// (each hop's `resume` orders it before the next hop's submission).
    nonisolated(unsafe) static var dispatchHops = 0

    /// Checks that every round trip reached the main side, then reports wall and CPU ns per
    /// timed one.
    static func finish(
      from start: ClockReading, to end: ClockReading, hops: Int, roundTrips: Int
    ) -> Never {
      let expected = warmupRoundTrips + roundTrips
      if hops != expected {
        writeToStandardError("main side ran \(hops) of \(expected) round trips\n")
        exit(1)
      }
      ChildProcess.report(Measurement(from: start, to: end, operations: roundTrips))
    }

    // MARK: MainActor.run

    /// The warm-up, then `roundTrips` timed `await MainActor.run {}` round trips, on whatever
    /// executors the child set up.
    static func mainActorLoop(roundTrips: Int) async -> Never {
      // The body writes main-actor state, so the hop cannot be optimised away.
      for _ in 0..<warmupRoundTrips { await MainActor.run { mainActorHopsRun += 1 } }
      let start = ClockReading.start()
      for _ in 0..<roundTrips { await MainActor.run { mainActorHopsRun += 1 } }
      let end = ClockReading.end()
      finish(
        from: start, to: end, hops: await MainActor.run { mainActorHopsRun },
        roundTrips: roundTrips)
    }

    static func runOursChild() -> Never {
      ChildExecutors.loopDispatch.run { await mainActorLoop(roundTrips: mainActorRoundTrips) }
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
      ChildExecutors.swiftDefault.run {
        for _ in 0..<warmupRoundTrips { await dispatchRoundTrip() }
        let start = ClockReading.start()
        for _ in 0..<mainActorRoundTrips { await dispatchRoundTrip() }
        let end = ClockReading.end()
        finish(from: start, to: end, hops: dispatchHops, roundTrips: mainActorRoundTrips)
      }
    }
  }
}
