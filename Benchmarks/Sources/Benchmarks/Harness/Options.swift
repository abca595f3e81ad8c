import Glibc

/// Command-line options.
///
/// Usage: `Benchmarks [filter ...] [--repeat N] [--warmup N] [--side S] [--verbose] [--list]`
/// - A filter selects the benchmarks whose key, group or name contains it (case-insensitive;
///   punctuation in names is ignored, so `pingpong` matches "fd ping-pong"). With several
///   filters a benchmark runs when any matches. A filter that matches nothing is an error.
/// - `--repeat N` (or `BENCH_REPEAT=N`): measured runs per side, default 5. The median is
///   reported, so keep it odd and at least 5 for figures worth quoting.
/// - `--warmup N` (or `BENCH_WARMUP=N`): discarded runs per side first, default 1.
/// - `--side ours|rival`: measure one side only (for profilers such as `perf record`); the
///   other side's figures show as n/a.
/// - `--verbose`: also print every run's figure on standard error.
/// - `--list`: print the benchmarks and exit.
struct Options {
  enum Side { case both, ours, rival }

  var filters: [String] = []
  var repeats = 5
  var warmups = 1
  var listOnly = false
  var side = Side.both
  var verbose = false

  static let usage = """
    usage: Benchmarks [filter ...] [--repeat N] [--warmup N] [--side S] [--verbose] [--list]
      filter       run benchmarks whose key, group or name contains it (e.g. pingpong, mainloop)
      --repeat N   measured runs per side, median reported (default 5; env BENCH_REPEAT)
      --warmup N   discarded runs per side first (default 1; env BENCH_WARMUP)
      --side S     measure only `ours` or `rival` (for profiling)
      --verbose    print every run's figure on standard error
      --list       list benchmarks and exit
    """

  /// Parses `arguments` (without the program name); exits with status 2 on bad input.
  static func parse(_ arguments: [String]) -> Options {
    var options = Options()
    if let value = environment("BENCH_REPEAT") {
      options.repeats = count(value, "BENCH_REPEAT", minimum: 1)
    }
    if let value = environment("BENCH_WARMUP") {
      options.warmups = count(value, "BENCH_WARMUP", minimum: 0)
    }
    var rest = arguments[...]
    while let argument = rest.popFirst() {
      switch argument {
      case "--repeat", "-n":
        options.repeats = count(rest.popFirst(), argument, minimum: 1)
      case "--warmup", "-w":
        options.warmups = count(rest.popFirst(), argument, minimum: 0)
      case "--side":
        switch rest.popFirst() {
        case "ours": options.side = .ours
        case "rival": options.side = .rival
        default: usageError("--side needs ours or rival")
        }
      case "--verbose", "-v":
        options.verbose = true
      case "--list", "-l":
        options.listOnly = true
      case "--help", "-h":
        print(usage)
        exit(0)
      default:
        if argument.hasPrefix("-") { usageError("unknown option \(argument)") }
        options.filters.append(argument)
      }
    }
    return options
  }

  /// Whether `benchmark` of `group` is selected by the filters.
  func selects(_ benchmark: Benchmark, in group: BenchmarkGroup) -> Bool {
    filters.isEmpty || filters.contains { Self.matches($0, benchmark, group) }
  }

  static func matches(_ filter: String, _ benchmark: Benchmark, _ group: BenchmarkGroup) -> Bool {
    let needle = squeezed(filter)
    return [benchmark.key, group.name, benchmark.name].contains { squeezed($0).contains(needle) }
  }

  /// Lower-cased letters and digits only.
  private static func squeezed(_ text: String) -> String {
    String(text.lowercased().filter { $0.isLetter || $0.isNumber })
  }

  private static func environment(_ name: String) -> String? {
    getenv(name).map { String(cString: $0) }
  }

  private static func count(_ text: String?, _ option: String, minimum: Int) -> Int {
    guard let text, let value = Int(text), value >= minimum else {
      usageError("\(option) needs a whole number ≥ \(minimum)")
    }
    return value
  }

  static func usageError(_ message: String) -> Never {
    writeToStandardError("Benchmarks: \(message)\n\(usage)\n")
    exit(2)
  }
}

/// Writes `text` to standard error (progress and errors; the table goes to standard output).
func writeToStandardError(_ text: String) {
  var text = text
  text.withUTF8 { bytes in
    var offset = 0
    while offset < bytes.count {
      let written = write(2, bytes.baseAddress! + offset, bytes.count - offset)
      if written <= 0 { return }
      offset += written
    }
  }
}
