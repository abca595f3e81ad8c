import MainLoop

// LoopDispatch benchmarks: every row compares LoopDispatch with a rival (raw libevent in C, or
// Apple's Dispatch) and prints medians as a Markdown table. See Harness/Options.swift for the
// command line (filters, --repeat, --warmup, --list).

/// Every benchmark group, in table order. Add a group per area (queues, timers, sources) by
/// listing it here.
let groups: [BenchmarkGroup] = [
  MainLoopBenchmarks.group,
  QueueBenchmarks.group,
]

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))

// Create (and drop) one loop before any benchmark runs: it installs libevent's pthread
// callbacks, which must happen before any event_base exists — including the raw C baseline's.
_ = EventLoop(name: "bench-init")

Runner.run(groups, options: options)
