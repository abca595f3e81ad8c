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
      writeToStandardError(
        "ours \(formatted(first.ours)) vs \(formatted(first.rival)) \(first.unit) "
          + "(\(formatted(seconds, decimals: 1)) s)\n")
      if options.verbose {
        writeToStandardError("    ours:  \(samples.ours.map(formatted).joined(separator: " "))\n")
        writeToStandardError("    rival: \(samples.rival.map(formatted).joined(separator: " "))\n")
      }
      rows += newRows
    }
    print()
    Report.print(rows, options: options)
  }
}
