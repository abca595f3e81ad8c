import Dispatch
import Glibc
import LoopDispatch

/// LoopDispatch as a Swift-concurrency executor against the toolchain's own: an actor on a
/// serial queue against a default actor, task spawns on ``PoolExecutor`` against plain
/// `Task {}` on the default global executor, and `MainActor.run` round trips on the main
/// queue (with ``ConcurrencyIntegration`` installed) against Dispatch's main queue.
///
/// This process never calls `ConcurrencyIntegration.install()`, so the default global
/// executor here is the toolchain's (Dispatch's global queues on Linux); the `MainActor` row
/// installs it in a child process of its own (see ConcurrencyBenchmarks+MainActor.swift).
///
/// The harness is synchronous: async work runs in a detached task while the harness thread
/// waits on a ``Latch`` (``runDetached(_:)``).
enum ConcurrencyBenchmarks {
  static let actorCalls = 100_000
  static let spawnedTasks = 100_000
  static let mainActorRoundTrips = 20_000

  static var group: BenchmarkGroup {
    BenchmarkGroup(
      name: "concurrency",
      benchmarks: [
        Benchmark(
          key: "actorroundtrip",
          name: "100k await actor.increment() from a task: actor on a serial Queue",
          unit: "ns/call", direction: .lowerIsBetter, rivalName: "default actor",
          target: .ratioAtMost(1.0, "default actor"),
          ours: { actorRoundTrip(QueueCounter(), calls: actorCalls) },
          rival: { actorRoundTrip(DefaultCounter(), calls: actorCalls) }),
        Benchmark(
          key: "taskspawn",
          name: "100k Task(executorPreference: PoolExecutor.shared) {} until all ran",
          unit: "ns/task", direction: .lowerIsBetter, rivalName: "Task {} (global executor)",
          target: .ratioAtMost(1.0, "Task {}"),
          ours: { oursTaskSpawn(tasks: spawnedTasks) },
          rival: { defaultTaskSpawn(tasks: spawnedTasks) }),
        Benchmark(
          key: "mainactorrun",
          name: "20k await MainActor.run {} from a task (child process, main thread)",
          unit: "ns/round trip", direction: .lowerIsBetter, rivalName: "Dispatch main queue",
          target: .ratioAtMost(1.0, "Dispatch"),
          ours: { MainActorRoundTrip.measureInChild(MainActorRoundTrip.oursChild) },
          rival: { MainActorRoundTrip.measureInChild(MainActorRoundTrip.dispatchChild) }),
      ])
  }

  /// The child modes of this group, by the name passed after `--child`.
  static let childModes: [String: @Sendable () -> Never] = [
    MainActorRoundTrip.oursChild: MainActorRoundTrip.runOursChild,
    MainActorRoundTrip.dispatchChild: MainActorRoundTrip.runDispatchChild,
  ]
}

// MARK: - actor round trip

/// An actor whose jobs run on a LoopDispatch serial queue.
actor QueueCounter: BenchCounter {
  let queue = Queue(label: "bench.actor")
  nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }
  private(set) var count = 0

  func increment() { count += 1 }
}

/// The same actor on the runtime's default actor executor.
actor DefaultCounter: BenchCounter {
  private(set) var count = 0

  func increment() { count += 1 }
}

/// What the actor round trip calls; both counters are the same code.
protocol BenchCounter: Actor {
  var count: Int { get }
  func increment()
}

extension ConcurrencyBenchmarks {
  /// Runs `body` in a detached task (on the default global executor) and blocks the calling
  /// thread until it returns its figure.
  static func runDetached(_ body: @escaping @Sendable () async -> Double) -> Double {
    let result = FigureBox()
    Task.detached {
      result.figure = await body()
      result.done.open()
    }
    result.done.wait()
    return result.figure
  }

  /// `calls` × `await counter.increment()` from one task; ns per call. Each call hops from
  /// the task's executor to the actor's and back. The count is checked afterwards.
  static func actorRoundTrip(_ counter: some BenchCounter, calls: Int) -> Double {
    runDetached {
      let start = Stopwatch.now()
      for _ in 0..<calls { await counter.increment() }
      let elapsed = Stopwatch.now() - start
      let count = await counter.count
      if count != calls { benchmarkFailure("actor counted \(count) of \(calls) calls") }
      return Double(elapsed) / Double(calls)
    }
  }

  // MARK: - task spawn

  /// `tasks` empty tasks preferring the LoopDispatch pool, spawned from this thread; ns per
  /// task from the first spawn until the last task ran (each counts down ``Countdown``).
  static func oursTaskSpawn(tasks: Int) -> Double {
    let elapsed = Countdown.measure(total: tasks) {
      let start = Stopwatch.now()
      for _ in 0..<tasks {
        Task(executorPreference: PoolExecutor.shared) { Countdown.tickActive() }
      }
      return start
    }
    return Double(elapsed) / Double(tasks)
  }

  /// The same with plain `Task {}` on the default global executor.
  static func defaultTaskSpawn(tasks: Int) -> Double {
    let elapsed = Countdown.measure(total: tasks) {
      let start = Stopwatch.now()
      for _ in 0..<tasks {
        Task { Countdown.tickActive() }
      }
      return start
    }
    return Double(elapsed) / Double(tasks)
  }
}

/// A figure handed from a task to a waiting thread.
final class FigureBox: @unchecked Sendable {
  // @unchecked Sendable: `figure` is written before `done.open()` and read after
  // `done.wait()`, which orders the two.
  var figure = Double.nan
  let done = Latch()
}
