/// Runs the selected benchmarks of every group, reports progress on standard error and prints
/// the table on standard output.
enum Runner {
  static func run(_ groups: [BenchmarkGroup], options: Options) {
    let selected = groups.flatMap { group in
      group.benchmarks.filter { options.selects($0, in: group) }.map { (group, $0) }
    }
    if options.listOnly {
      for (group, benchmark) in selected {
        print(
          "\(group.name)\t\(benchmark.key)\t\(benchmark.name) [\(benchmark.unit) vs \(benchmark.rivalName)]"
        )
      }
      return
    }
    if selected.isEmpty { Options.usageError("no benchmark matches \(options.filters)") }

    var rows: [Row] = []
    for (index, (group, benchmark)) in selected.enumerated() {
      writeToStandardError(
        "[\(index + 1)/\(selected.count)] \(group.name)/\(benchmark.key): \(benchmark.name) ... ")
      let start = Stopwatch.now()
      let samples = Harness.measure(
        benchmark, repeats: options.repeats, warmups: options.warmups, side: options.side)
      let newRows = Harness.rows(for: benchmark, from: samples)
      let seconds = Double(Stopwatch.now() - start) / 1e9
      let first = newRows[0]
      let cpu =
        first.cpuRatio == nil
        ? ""
        : "; CPU \(formatted(first.oursCPU ?? .nan)) vs \(formatted(first.rivalCPU ?? .nan)) ns/op"
      writeToStandardError(
        "ours \(formatted(first.ours)) vs \(formatted(first.rival)) \(first.unit)\(cpu) "
          + "(\(formatted(seconds, decimals: 1)) s)\n")
      if options.verbose {
        writeToStandardError("    ours:  \(runs(samples.ours))\n")
        writeToStandardError("    rival: \(runs(samples.rival))\n")
      }
      rows += newRows
    }
    print()
    Report.print(rows, options: options)
  }

  /// Every run's figure, with its CPU ns/op in brackets when measured: "812 [1650] 790 [1610]".
  private static func runs(_ measurements: [Measurement]) -> String {
    measurements.map { run in
      formatted(run.wall) + (run.cpuPerOperation.map { " [\(formatted($0))]" } ?? "")
    }.joined(separator: " ")
  }
}
