/// Unstructured tasks and task-group children: LoopDispatch installed against Swift's default
/// executors, each in a child process of its own (``ConcurrencyBenchmarks/ExecutorComparison``).
///
/// 1. Spawn and await (``spawnAndAwaitTasks(total:)``): from one task, spawn ``spawnBatch``
///    `Task {}` keeping their handles, then `await` each one's `value`; repeat until
///    ``spawnedAndAwaitedTasks`` ran. Batches keep the live task objects (and so the heap)
///    bounded; each batch leaves the spawning task with all of them queued, as a burst does.
/// 2. Task group (``runTaskGroup(children:)``): `withTaskGroup` with ``groupChildren`` empty
///    `addTask {}` children, then `waitForAll()`.
/// 3. Both: one untimed warm-up round of the same shape first (``warmupTasks``, so the pool's
///    threads exist), then the timed round between two ``ClockReading``s; wall and the child's
///    own CPU ns per task.
extension ConcurrencyBenchmarks {
  enum InstalledTasks {
    static let spawnBatch = 10_000
    static let warmupTasks = 10_000

    static let spawnAndAwait = ExecutorComparison(key: "spawn-await") {
      await spawnAndAwaitTasks(total: warmupTasks)
      let start = ClockReading.start()
      await spawnAndAwaitTasks(total: spawnedAndAwaitedTasks)
      ChildProcess.report(
        Measurement(from: start, to: .end(), operations: spawnedAndAwaitedTasks))
    }

    static let taskGroup = ExecutorComparison(key: "task-group") {
      await runTaskGroup(children: warmupTasks)
      let start = ClockReading.start()
      await runTaskGroup(children: groupChildren)
      ChildProcess.report(Measurement(from: start, to: .end(), operations: groupChildren))
    }

    /// `total` empty `Task {}` (a whole number of ``spawnBatch``es), each awaited.
    static func spawnAndAwaitTasks(total: Int) async {
      var tasks: [Task<Void, Never>] = []
      tasks.reserveCapacity(spawnBatch)
      for _ in 0..<total / spawnBatch {
        for _ in 0..<spawnBatch { tasks.append(Task {}) }
        for task in tasks { await task.value }
        tasks.removeAll(keepingCapacity: true)
      }
    }

    /// One task group of `children` empty children, waited for.
    static func runTaskGroup(children: Int) async {
      await withTaskGroup(of: Void.self) { group in
        for _ in 0..<children { group.addTask {} }
        await group.waitForAll()
      }
    }
  }
}
