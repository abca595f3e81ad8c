/// How late does `Task.sleep(for: .milliseconds(1))` wake? LoopDispatch installed (the
/// service loop's timers) against Swift's default executors (Dispatch's timers), each in a
/// child process of its own (``ConcurrencyBenchmarks/ExecutorComparison``).
///
/// 1. A task group runs ``TaskSleep/sleepers`` tasks at once; each sleeps
///    ``TaskSleep/sleepsEach`` times in a row, so that many sleeps are pending at any moment.
/// 2. Around each sleep the task reads `CLOCK_MONOTONIC` (``Stopwatch``) and records
///    lateness = wake − (before + 1 ms) in its own slot; a negative figure is an early wake.
/// 3. One untimed round of ``TaskSleep/warmupSleeps`` sleeps by one task first (the timer
///    machinery and pool threads exist afterwards).
/// 4. The child reports the p50 lateness in µs as its figure and its own CPU time per sleep
///    over the timed round; the p99 (nearest rank) and the count of early wakes as extras,
///    which the parent logs for the derived rows (``TaskSleep/Logs``).
extension ConcurrencyBenchmarks {
  enum TaskSleep {
    static let sleepers = 10
    static let sleepsEach = 1_000
    static let warmupSleeps = 50
    static let interval: Duration = .milliseconds(1)
    static let intervalNanoseconds: UInt64 = 1_000_000

    /// Where the rows beside the p50 come from (see ``FigureLog``).
    final class Logs {
      let p99 = FigureLog()
      let early = FigureLog()
    }

    /// One slot per sleep: its lateness in ns.
    final class Slots: @unchecked Sendable {
      // @unchecked Sendable: each sleeper writes only its own slots; the reader reads them
      // after the task group that ran the sleepers returned, which orders the two.
      let lateness: UnsafeMutablePointer<Int64>
      let count: Int

      init(count: Int) {
        self.count = count
        lateness = .allocate(capacity: count)
        lateness.initialize(repeating: 0, count: count)
      }

      deinit { lateness.deallocate() }

      /// The task sleeps `sleeps` times, recording into slots `first..<first + sleeps`.
      func sleepAndRecord(_ sleeps: Int, from first: Int) async {
        for index in first..<first + sleeps {
          let before = Stopwatch.now()
          try? await Task.sleep(for: interval)
          let after = Stopwatch.now()
          lateness[index] = Int64(bitPattern: after &- before &- intervalNanoseconds)
        }
      }
    }

    static let comparison = ExecutorComparison(key: "task-sleep") {
      await Slots(count: warmupSleeps).sleepAndRecord(warmupSleeps, from: 0)
      let total = sleepers * sleepsEach
      let slots = Slots(count: total)
      let start = ClockReading.start()
      await withTaskGroup(of: Void.self) { group in
        for sleeper in 0..<sleepers {
          group.addTask { await slots.sleepAndRecord(sleepsEach, from: sleeper * sleepsEach) }
        }
        await group.waitForAll()
      }
      let end = ClockReading.end()
      let sorted = UnsafeBufferPointer(start: slots.lateness, count: total).sorted()
      let percentile = SyncTimerBenchmarks.TimerRun.percentileIndex
      let p50 = Double(sorted[percentile(0.50, total)]) / 1_000
      let p99 = Double(sorted[percentile(0.99, total)]) / 1_000
      let early = Double(sorted.prefix { $0 < 0 }.count)
      // The wall figure is the p50; the CPU figure is ns per sleep over the timed round.
      var measurement = Measurement(from: start, to: end, operations: total)
      measurement.wall = p50
      ChildProcess.report(measurement, extras: ["p99": p99, "early": early])
    }

    /// Runs one side's child once: returns its p50 and CPU per sleep, logs the rest.
    static func measure(isOurs: Bool, logs: Logs) -> Measurement {
      let name = isOurs ? comparison.oursChild : comparison.rivalChild
      let output = ChildProcess.run(name)
      let p99 = ChildProcess.figure(labelled: "p99", in: output, of: name)
      let early = ChildProcess.figure(labelled: "early", in: output, of: name)
      if isOurs {
        logs.p99.ours.append(p99)
        logs.early.ours.append(early)
      } else {
        logs.p99.rival.append(p99)
        logs.early.rival.append(early)
      }
      return ChildProcess.measurement(in: output, of: name)
    }
  }
}
