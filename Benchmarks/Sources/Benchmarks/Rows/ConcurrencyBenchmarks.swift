import Dispatch
import Glibc
import LoopDispatch

/// LoopDispatch as a Swift-concurrency executor against the toolchain's own: an actor on a
/// serial queue against a default actor and against an actor on a serial `DispatchQueue`
/// (``DispatchQueueExecutor``), task spawns on ``PoolExecutor`` against plain
/// `Task {}` on the default global executor, and `MainActor.run` round trips on the main
/// queue (with ``ConcurrencyIntegration`` installed) against Dispatch's main queue. Then
/// whole programs with ``ConcurrencyIntegration`` installed against the same programs on
/// Swift's default executors: spawning and awaiting tasks, a task group, main-actor hops and
/// `Task.sleep` lateness.
///
/// This process never calls `ConcurrencyIntegration.install()`, so the default global
/// executor here is the toolchain's (Dispatch's global queues on Linux): the actor rows
/// measure an actor on a `Queue` called from tasks on it. Installed rows run in child
/// processes of their own (``ChildExecutors``; see ConcurrencyBenchmarks+ChildExecutors.swift).
///
/// The harness is synchronous: async work runs in a detached task while the harness thread
/// waits on a ``Latch`` (``runDetached(_:)``).
enum ConcurrencyBenchmarks {
  static let actorCalls = 100_000
  static let spawnedTasks = 100_000
  static let mainActorRoundTrips = 20_000
  static let spawnedAndAwaitedTasks = 1_000_000
  static let groupChildren = 100_000
  static let mainActorHops = 1_000_000

  static var group: BenchmarkGroup {
    let halfDefault = Target.ratioAtMost(0.5, "default executors")
    let sleepLogs = TaskSleep.Logs()
    return BenchmarkGroup(
      name: "concurrency",
      benchmarks: [
        Benchmark(
          key: "actorroundtrip",
          name:
            "100k await actor.increment() from a default-executor task: actor on a serial Queue",
          unit: "ns/call", direction: .lowerIsBetter, rivalName: "default actor",
          target: .ratioAtMost(1.0, "default actor"),
          ours: { actorRoundTrip(QueueCounter(), calls: actorCalls) },
          rival: { actorRoundTrip(DefaultCounter(), calls: actorCalls) }),
        Benchmark(
          key: "actordispatchqueue",
          name:
            "100k await actor.increment() from a default-executor task: actor on a serial Queue",
          unit: "ns/call", direction: .lowerIsBetter,
          rivalName: "actor on a serial DispatchQueue",
          target: .ratioAtMost(0.3, "DispatchQueue actor"),
          ours: { actorRoundTrip(QueueCounter(), calls: actorCalls) },
          rival: { actorRoundTrip(DispatchQueueCounter(), calls: actorCalls) }),
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
          ours: { ChildProcess.measure(MainActorRoundTrip.oursChild) },
          rival: { ChildProcess.measure(MainActorRoundTrip.dispatchChild) }),
        Benchmark(
          key: "actorinstalled",
          name:
            "100k await actor.increment() from a task, ConcurrencyIntegration.install() (child process)",
          unit: "ns/call", direction: .lowerIsBetter,
          rivalName: "actor on a serial DispatchQueue",
          target: .ratioAtMost(0.1, "DispatchQueue actor"),
          ours: { ChildProcess.measure(InstalledActor.oursChild) },
          rival: { ChildProcess.measure(InstalledActor.dispatchChild) }),
        Benchmark(
          key: "spawnawait",
          name:
            "1M Task {} spawned and awaited from a task, 10k at a time, installed (child process)",
          unit: "ns/task", direction: .lowerIsBetter, rivalName: "Swift default executors",
          target: halfDefault,
          ours: InstalledTasks.spawnAndAwait.measureOurs,
          rival: InstalledTasks.spawnAndAwait.measureRival),
        Benchmark(
          key: "taskgroup",
          name: "a task group of 100k empty children, installed (child process)",
          unit: "ns/child", direction: .lowerIsBetter, rivalName: "Swift default executors",
          target: halfDefault,
          ours: InstalledTasks.taskGroup.measureOurs,
          rival: InstalledTasks.taskGroup.measureRival),
        Benchmark(
          key: "spawnawaitfloor",
          name:
            "spawnawait on a one-thread inline executor: the runtime's own cost (child process)",
          unit: "ns/task", direction: .lowerIsBetter, rivalName: "Swift default executors",
          target: nil,
          ours: InstalledTasks.spawnAndAwait.measureFloor,
          rival: InstalledTasks.spawnAndAwait.measureRival),
        Benchmark(
          key: "taskgroupfloor",
          name: "taskgroup on a one-thread inline executor: the runtime's own cost (child process)",
          unit: "ns/child", direction: .lowerIsBetter, rivalName: "Swift default executors",
          target: nil,
          ours: InstalledTasks.taskGroup.measureFloor,
          rival: InstalledTasks.taskGroup.measureRival),
        Benchmark(
          key: "mainactorhops",
          name: "1M await MainActor.run {} from a task, installed (child process)",
          unit: "ns/round trip", direction: .lowerIsBetter, rivalName: "Swift default executors",
          target: halfDefault,
          ours: MainActorRoundTrip.hops.measureOurs,
          rival: MainActorRoundTrip.hops.measureRival),
        Benchmark(
          key: "tasksleep",
          name:
            "10k Task.sleep(for: .milliseconds(1)), 10 tasks at once, installed (child process)",
          unit: "µs late p50", direction: .lowerIsBetter, rivalName: "Swift default executors",
          target: nil,
          ours: { TaskSleep.measure(isOurs: true, logs: sleepLogs) },
          rival: { TaskSleep.measure(isOurs: false, logs: sleepLogs) },
          derived: [
            .recorded(
              sleepLogs.p99, unit: "µs late p99", direction: .lowerIsBetter, target: halfDefault),
            .recorded(
              sleepLogs.early, unit: "early wakes", direction: .lowerIsBetter,
              target: .oursAtMost(0, "0")),
          ]),
      ])
  }

  /// The child modes of this group, by the name passed after `--child`.
  static let childModes: [String: @Sendable () -> Never] = {
    var modes: [String: @Sendable () -> Never] = [
      MainActorRoundTrip.oursChild: MainActorRoundTrip.runOursChild,
      MainActorRoundTrip.dispatchChild: MainActorRoundTrip.runDispatchChild,
      InstalledActor.oursChild: InstalledActor.runOursChild,
      InstalledActor.dispatchChild: InstalledActor.runDispatchChild,
    ]
    let comparisons = [
      InstalledTasks.spawnAndAwait, InstalledTasks.taskGroup, MainActorRoundTrip.hops,
      TaskSleep.comparison,
    ]
    for comparison in comparisons {
      modes.merge(comparison.childModes) { mode, _ in mode }
    }
    return modes
  }()
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

/// The same actor on a serial Dispatch queue (``DispatchQueueExecutor``).
actor DispatchQueueCounter: BenchCounter {
  let executor = DispatchQueueExecutor(label: "bench.actor")
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
  private(set) var count = 0

  func increment() { count += 1 }
}

/// A serial `DispatchQueue` as an actor's executor: what `DispatchSerialQueue` is on Darwin
/// (Linux's Dispatch has no such type). A job is submitted as a plain `async` closure, as
/// LoopDispatch's `Queue` submits it (Queue+SerialExecutor.swift), so the two rows differ in
/// the queue only.
final class DispatchQueueExecutor: SerialExecutor {
  let queue: DispatchQueue

  init(label: String) { queue = DispatchQueue(label: label) }

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
  }

  func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  /// Backs `assumeIsolated` and `preconditionIsolated()`; not used by the benchmark.
  func checkIsolated() {
    dispatchPrecondition(condition: .onQueue(queue))
  }
}

/// What the actor round trip calls; both counters are the same code.
protocol BenchCounter: Actor {
  var count: Int { get }
  func increment()
}

extension ConcurrencyBenchmarks {
  /// Runs `body` in a detached task (on the default global executor) and blocks the calling
  /// thread until it returns its measurement.
  static func runDetached(_ body: @escaping @Sendable () async -> Measurement) -> Measurement {
    let result = MeasurementBox()
    Task.detached {
      result.measurement = await body()
      result.done.open()
    }
    result.done.wait()
    return result.measurement
  }

  /// `calls` × `await counter.increment()` from one task; wall and CPU ns per call. Each call
  /// hops from the task's executor to the actor's and back. The count is checked afterwards.
  static func actorRoundTrip(_ counter: some BenchCounter, calls: Int) -> Measurement {
    runDetached {
      let start = ClockReading.start()
      for _ in 0..<calls { await counter.increment() }
      let end = ClockReading.end()
      let count = await counter.count
      if count != calls { benchmarkFailure("actor counted \(count) of \(calls) calls") }
      return Measurement(from: start, to: end, operations: calls)
    }
  }

  // MARK: - task spawn

  /// `tasks` empty tasks preferring the LoopDispatch pool, spawned from this thread; ns per
  /// task from the first spawn until the last task ran (each counts down ``Countdown``).
  static func oursTaskSpawn(tasks: Int) -> Double {
    Countdown.measure(total: tasks) {
      let start = ClockReading.start()
      for _ in 0..<tasks {
        Task(executorPreference: PoolExecutor.shared) { Countdown.tickActive() }
      }
      return start
    }.wall
  }

  /// The same with plain `Task {}` on the default global executor.
  static func defaultTaskSpawn(tasks: Int) -> Double {
    Countdown.measure(total: tasks) {
      let start = ClockReading.start()
      for _ in 0..<tasks {
        Task { Countdown.tickActive() }
      }
      return start
    }.wall
  }
}

/// A measurement handed from a task to a waiting thread.
final class MeasurementBox: @unchecked Sendable {
  // @unchecked Sendable: `measurement` is written before `done.open()` and read after
  // `done.wait()`, which orders the two.
  var measurement = Measurement(wall: .nan)
  let done = Latch()
}
