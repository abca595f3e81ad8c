import Dispatch
import LoopDispatch

/// The set-up every child-process row of this group shares: which executors Swift
/// concurrency runs on in the child (``ChildProcess``), and what drives its main thread.
///
/// 1. LoopDispatch installed: the child calls `ConcurrencyIntegration.install()` before any
///    task exists, so unstructured tasks and task-group children run on the LoopDispatch
///    pool, `@MainActor` code on `Queue.main` (the main thread) and `Task.sleep` on the
///    service loop's timers; `Queue.runMain()` drives the main thread.
/// 2. Swift's default executors: nothing is installed, so tasks run on the toolchain's global
///    executor (Dispatch's global queues on Linux), `@MainActor` code on Dispatch's main queue
///    and `Task.sleep` on Dispatch's timers; `dispatchMain()` parks the main thread (on Linux
///    Dispatch then runs main-queue work on its pool threads).
/// 3. Either way the measurement runs in one detached task, which ends the child with
///    ``ChildProcess/report(_:extras:)``.
extension ConcurrencyBenchmarks {
  enum ChildExecutors {
    case loopDispatch
    case swiftDefault

    /// Sets the executors up, runs `body` in a detached task and drives the main thread
    /// until `body` ends the process.
    func run(_ body: @escaping @Sendable () async -> Never) -> Never {
      switch self {
      case .loopDispatch:
        ConcurrencyIntegration.install()
        Task.detached { await body() }
        Queue.runMain()
      case .swiftDefault:
        Task.detached { await body() }
        dispatchMain()
      }
    }
  }

  /// One measurement run in two child processes: on LoopDispatch installed (ours) and on
  /// Swift's default executors (the rival), the same `body` on both.
  struct ExecutorComparison {
    /// Names the two child modes.
    let key: String
    /// The measurement; it ends the child with ``ChildProcess/report(_:extras:)``.
    let body: @Sendable () async -> Never

    var oursChild: String { "ld-installed-\(key)" }
    var rivalChild: String { "default-executors-\(key)" }
    var floorChild: String { "runtime-floor-\(key)" }

    /// The two child modes, by the name passed after `--child`.
    var childModes: [String: @Sendable () -> Never] {
      let body = body
      return [
        oursChild: { ChildExecutors.loopDispatch.run(body) },
        rivalChild: { ChildExecutors.swiftDefault.run(body) },
        floorChild: { RuntimeFloor.run(body) },
      ]
    }

    /// Runs our child once and returns its measurement.
    func measureOurs() -> Measurement { ChildProcess.measure(oursChild) }

    /// Runs the rival's child once and returns its measurement.
    func measureRival() -> Measurement { ChildProcess.measure(rivalChild) }

    /// Runs the body on the one-thread inline executor (``RuntimeFloor``) and returns its
    /// measurement.
    func measureFloor() -> Measurement { ChildProcess.measure(floorChild) }
  }
}
