import LoopDispatch

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
/// 4. The child also prints the spawning phase's wall ns per task (`spawn-phase`: the loops of
///    `Task {}` or `addTask`, the rest being the awaiting), seen with
///    `Benchmarks --child <mode>` (the modes of ``ConcurrencyBenchmarks/ExecutorComparison``),
///    for the split the concurrency article quotes.
extension ConcurrencyBenchmarks {
  enum InstalledTasks {
    static let spawnBatch = 10_000
    static let warmupTasks = 10_000

    static let spawnAndAwait = ExecutorComparison(key: "spawn-await") {
      _ = await spawnAndAwaitTasks(total: warmupTasks)
      let start = ClockReading.start()
      let spawning = await spawnAndAwaitTasks(total: spawnedAndAwaitedTasks)
      ChildProcess.report(
        Measurement(from: start, to: .end(), operations: spawnedAndAwaitedTasks),
        extras: ["spawn-phase": Double(spawning) / Double(spawnedAndAwaitedTasks)])
    }

    static let taskGroup = ExecutorComparison(key: "task-group") {
      _ = await runTaskGroup(children: warmupTasks)
      let start = ClockReading.start()
      let spawning = await runTaskGroup(children: groupChildren)
      ChildProcess.report(
        Measurement(from: start, to: .end(), operations: groupChildren),
        extras: ["spawn-phase": Double(spawning) / Double(groupChildren)])
    }

    /// `total` empty `Task {}` (a whole number of ``spawnBatch``es), each awaited; returns
    /// the nanoseconds spent spawning.
    static func spawnAndAwaitTasks(total: Int) async -> UInt64 {
      var tasks: [Task<Void, Never>] = []
      tasks.reserveCapacity(spawnBatch)
      var spawning: UInt64 = 0
      for _ in 0..<total / spawnBatch {
        let spawnStart = Deadline.now
        for _ in 0..<spawnBatch { tasks.append(Task {}) }
        spawning += Deadline.now.uptimeNanoseconds - spawnStart.uptimeNanoseconds
        for task in tasks { await task.value }
        tasks.removeAll(keepingCapacity: true)
      }
      return spawning
    }

    /// One task group of `children` empty children, waited for; returns the nanoseconds
    /// spent adding them.
    static func runTaskGroup(children: Int) async -> UInt64 {
      await withTaskGroup(of: Void.self) { group in
        let spawnStart = Deadline.now
        for _ in 0..<children { group.addTask {} }
        let spawning = Deadline.now.uptimeNanoseconds - spawnStart.uptimeNanoseconds
        await group.waitForAll()
        return spawning
      }
    }
  }
}
