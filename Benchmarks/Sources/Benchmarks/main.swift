import MainLoop

// LoopDispatch benchmarks: every row compares LoopDispatch with a rival (raw libevent in C, or
// Apple's Dispatch) and prints medians as a Markdown table. See Harness/Options.swift for the
// command line (filters, --repeat, --warmup, --list).

/// Every benchmark group, in table order. Add a group per area (queues, timers, sources) by
/// listing it here.
let groups: [BenchmarkGroup] = [
  MainLoopBenchmarks.group,
  QueueBenchmarks.group,
  SyncTimerBenchmarks.group,
  SourceBenchmarks.group,
  ConcurrencyBenchmarks.group,
]

/// Hidden child modes (`Benchmarks --child NAME`, see Support/ChildProcess.swift): rows that
/// must own the process main thread run there and print their figure.
let childModes = [
  SyncTimerBenchmarks.childModes, SourceBenchmarks.childModes, ConcurrencyBenchmarks.childModes,
].reduce(into: [String: @Sendable () -> Never]()) { all, modes in
  all.merge(modes) { mode, _ in mode }
}

if CommandLine.arguments.count == 3 && CommandLine.arguments[1] == ChildProcess.flag {
  guard let child = childModes[CommandLine.arguments[2]] else {
    Options.usageError("unknown child mode \(CommandLine.arguments[2])")
  }
  child()
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))

// Create (and drop) one loop before any benchmark runs: it installs libevent's pthread
// callbacks, which must happen before any event_base exists — including the raw C baseline's.
_ = EventLoop(name: "bench-init")

Runner.run(groups, options: options)
