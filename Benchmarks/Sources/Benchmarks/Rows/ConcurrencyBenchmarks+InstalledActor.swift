import Glibc

/// Actor round trips with ``ConcurrencyIntegration`` installed, against an actor on a serial
/// `DispatchQueue` with the toolchain's executors.
///
/// Both sides run in a child process of their own (``ChildProcess``), set up by
/// ``ConcurrencyBenchmarks/ChildExecutors``: ours must be installed before any task exists,
/// and this process never installs it.
/// 1. Ours: the child calls `ConcurrencyIntegration.install()` first, so tasks run on the
///    LoopDispatch pool; a detached task does `await counter.increment()` in a loop on a
///    ``QueueCounter`` (an actor on a serial `Queue`) while `Queue.runMain()` drives the main
///    thread.
/// 2. Dispatch: the same loop on a ``DispatchQueueCounter`` (an actor on a serial
///    `DispatchQueue`) from a detached task on the toolchain's global executor, while
///    `dispatchMain()` parks the main thread.
/// 3. The first ``warmupCalls`` are not timed; around the timed ones the task reads the
///    clocks (wall and the child's own CPU time, ``ClockReading``), then checks the actor's
///    count, reports wall and CPU ns per call and exits the child.
extension ConcurrencyBenchmarks {
  enum InstalledActor {
    static let oursChild = "ld-installed-actor"
    static let dispatchChild = "dispatch-queue-actor"
    static let warmupCalls = 2_000

    /// Runs the warm-up and timed calls on `counter`, checks its count, then reports wall and
    /// CPU ns per timed call.
    static func measure(_ counter: some BenchCounter) async -> Never {
      for _ in 0..<warmupCalls { await counter.increment() }
      let start = ClockReading.start()
      for _ in 0..<actorCalls { await counter.increment() }
      let end = ClockReading.end()
      let count = await counter.count
      let expected = warmupCalls + actorCalls
      if count != expected {
        writeToStandardError("actor counted \(count) of \(expected) calls\n")
        exit(1)
      }
      ChildProcess.report(Measurement(from: start, to: end, operations: actorCalls))
    }

    // MARK: LoopDispatch

    static func runOursChild() -> Never {
      ChildExecutors.loopDispatch.run { await measure(QueueCounter()) }
    }

    // MARK: Dispatch

    static func runDispatchChild() -> Never {
      ChildExecutors.swiftDefault.run { await measure(DispatchQueueCounter()) }
    }
  }
}
