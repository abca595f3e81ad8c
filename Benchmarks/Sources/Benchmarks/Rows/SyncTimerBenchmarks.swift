import Dispatch
import Glibc
import LoopDispatch

/// The main queue, groups, semaphores and `after` timers of LoopDispatch against Dispatch's:
/// main-queue round trips (measured in child processes, see ``ChildProcess``), a group
/// fanning out over the global queue, two threads ping-ponging through semaphores, and the
/// cost and punctuality of 100k timers.
enum SyncTimerBenchmarks {
  static let mainRoundTrips = 100_000
  static let groupItems = 200_000
  static let semaphoreRoundTrips = 200_000
  static let timerCount = 100_000

  static var group: BenchmarkGroup {
    let notSlower = Target.ratioAtMost(1.0, "Dispatch")
    let halfDispatch = Target.ratioAtMost(0.5, "Dispatch")
    let timerLogs = TimerLogs()
    let serialAfterP99 = FigureLog()
    return BenchmarkGroup(
      name: "synctimer",
      benchmarks: [
        Benchmark(
          key: "mainroundtrip",
          name: "global → main → global round trips, 100k (child process, main thread)",
          unit: "ns/round trip", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: notSlower,
          ours: { ChildProcess.measure(MainRoundTrip.oursChild) },
          rival: { ChildProcess.measure(MainRoundTrip.dispatchChild) }),
        Benchmark(
          key: "groupfanout",
          name: "200k empty closures async(group:) on the global queue, then wait()",
          unit: "ns/item", direction: .lowerIsBetter, rivalName: "Dispatch", target: halfDispatch,
          ours: { oursGroupFanOut(items: groupItems) },
          rival: { dispatchGroupFanOut(items: groupItems) }),
        Benchmark(
          key: "semaphorepingpong",
          name: "two threads ping-ponging through two semaphores, 200k round trips",
          unit: "ns/round trip", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: halfDispatch,
          ours: { oursSemaphorePingPong(roundTrips: semaphoreRoundTrips) },
          rival: { dispatchSemaphorePingPong(roundTrips: semaphoreRoundTrips) }),
        Benchmark(
          key: "timers",
          name: "100k after timers, random 0–500 ms delays, onto the global queue",
          unit: "ns/schedule", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: notSlower,
          ours: { TimerRun.oursRun(count: timerCount, logs: timerLogs) },
          rival: { TimerRun.dispatchRun(count: timerCount, logs: timerLogs) },
          derived: [
            .recorded(
              timerLogs.p50, unit: "µs late p50", direction: .lowerIsBetter, target: notSlower),
            .recorded(
              timerLogs.p99, unit: "µs late p99", direction: .lowerIsBetter,
              target: Target(
                text: "≤ 250 µs and ≤ 0.1x Dispatch",
                isMet: { ours, ratio in ours <= 250 && ratio <= 0.1 }, needsRival: true)),
            .recorded(
              timerLogs.early, unit: "early fires", direction: .lowerIsBetter,
              target: .oursAtMost(0, "0")),
          ]),
        Benchmark(
          key: "serialafter",
          name: "400 after timers one at a time, 1–3 ms, onto an idle serial queue",
          unit: "µs late p50", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: .ratioAtMost(0.7, "Dispatch"),
          ours: { SerialAfterRun.oursRun(logs: serialAfterP99) },
          rival: { SerialAfterRun.dispatchRun(logs: serialAfterP99) },
          derived: [
            .recorded(
              serialAfterP99, unit: "µs late p99", direction: .lowerIsBetter, target: nil)
          ]),
        Benchmark(
          key: "mainafter",
          name: "400 after timers one at a time, 1–3 ms, onto the main queue (child process)",
          unit: "µs late p50", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: .ratioAtMost(0.7, "Dispatch"),
          ours: { ChildProcess.measure(MainAfter.oursChild) },
          rival: { ChildProcess.measure(MainAfter.dispatchChild) }),
      ])
  }

  /// The child modes of this group, by the name passed after `--child`.
  static let childModes: [String: @Sendable () -> Never] = [
    MainRoundTrip.oursChild: MainRoundTrip.runOursChild,
    MainRoundTrip.dispatchChild: MainRoundTrip.runDispatchChild,
    MainAfter.oursChild: MainAfter.runOursChild,
    MainAfter.dispatchChild: MainAfter.runDispatchChild,
  ]

  // MARK: - group fan-out

  /// `items` empty closures submitted with `async(group:)` onto the default global queue,
  /// then `wait()`; wall and CPU ns per item from the first submission until `wait` returned.
  static func oursGroupFanOut(items: Int) -> Measurement {
    let queue = Queue.global()
    let group = Group()
    let start = ClockReading.start()
    for _ in 0..<items { queue.async(group: group) {} }
    group.wait()
    return Measurement(from: start, to: .end(), operations: items)
  }

  static func dispatchGroupFanOut(items: Int) -> Measurement {
    let queue = DispatchQueue.global()
    let group = DispatchGroup()
    let start = ClockReading.start()
    for _ in 0..<items { queue.async(group: group) {} }
    group.wait()
    return Measurement(from: start, to: .end(), operations: items)
  }

  // MARK: - semaphore ping-pong

  /// This thread signals `ping` and waits on `pong`; a partner thread waits on `ping` and
  /// signals `pong`. ns per round trip; the partner is started before the clock.
  static func oursSemaphorePingPong(roundTrips: Int) -> Double {
    let ping = Semaphore(value: 0)
    let pong = Semaphore(value: 0)
    let partner = BenchThread.spawn {
      for _ in 0..<roundTrips {
        ping.wait()
        pong.signal()
      }
    }
    let start = Stopwatch.now()
    for _ in 0..<roundTrips {
      ping.signal()
      pong.wait()
    }
    let elapsed = Stopwatch.now() - start
    partner.join()
    return Double(elapsed) / Double(roundTrips)
  }

  static func dispatchSemaphorePingPong(roundTrips: Int) -> Double {
    let ping = DispatchSemaphore(value: 0)
    let pong = DispatchSemaphore(value: 0)
    let partner = BenchThread.spawn {
      for _ in 0..<roundTrips {
        ping.wait()
        pong.signal()
      }
    }
    let start = Stopwatch.now()
    for _ in 0..<roundTrips {
      ping.signal()
      pong.wait()
    }
    let elapsed = Stopwatch.now() - start
    partner.join()
    return Double(elapsed) / Double(roundTrips)
  }
}
