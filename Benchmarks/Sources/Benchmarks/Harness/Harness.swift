/// The measuring core: a ``Benchmark`` is one comparison (ours against a rival), measured
/// several times and reduced to a ``Row`` of medians.
///
/// Measuring walk-through (`Harness.measure`):
/// 1. Run each side `warmups` times and discard the figures (page faults, lazy statics,
///    thread creation in the rival's pool).
/// 2. Run the two sides alternately, ours first, `repeats` times, so slow drift of the
///    machine (frequency, noisy neighbours) hits both sides alike.
/// 3. Keep the median of each side; the spread (half the range over the median) tells how far
///    to trust it.
///
/// A run returns a ``Measurement``: the wall-clock figure and, for rows that measure it, the
/// CPU time the whole process spent over the same interval, per operation. The CPU figure
/// shows what a side pays for its speed: a runtime that spins instead of sleeping wins on the
/// wall clock and loses here.

/// What one run of one side measured.
struct Measurement {
  /// The figure in the benchmark's unit (wall-clock time, or a rate or count derived from it).
  var wall: Double
  /// User plus system CPU time of the whole process (every thread) over the interval the
  /// wall figure covers (``ClockReading``), in ns per operation; nil when the row does not
  /// measure it.
  var cpuPerOperation: Double?

  init(wall: Double, cpuPerOperation: Double? = nil) {
    self.wall = wall
    self.cpuPerOperation = cpuPerOperation
  }
}

/// Whether a smaller or a larger figure is better.
enum Direction: Sendable {
  case lowerIsBetter
  case higherIsBetter
}

/// The goal a row is held to, as shown in the table and checked against the medians.
struct Target {
  /// What the table shows, e.g. "≤ 1.2x raw libevent".
  let text: String
  /// Whether the medians meet the goal. `ratio` is ``Row/ratio``.
  let isMet: (_ ours: Double, _ ratio: Double) -> Bool
  /// Whether the goal needs the rival's figure (so it cannot be judged with `--side ours`).
  var needsRival = false

  /// Our cost at most `limit` times the rival's (see ``Row/ratio``).
  static func ratioAtMost(_ limit: Double, _ rivalName: String) -> Target {
    Target(
      text: "≤ \(formattedCompact(limit))x \(rivalName)", isMet: { _, ratio in ratio <= limit },
      needsRival: true)
  }

  /// Our figure at least `value`, shown as `text`.
  static func oursAtLeast(_ value: Double, _ text: String) -> Target {
    Target(text: text) { ours, _ in ours >= value }
  }

  /// Our figure at most `value`, shown as `text`.
  static func oursAtMost(_ value: Double, _ text: String) -> Target {
    Target(text: text) { ours, _ in ours <= value }
  }
}

/// A second table row computed from the same runs in another unit (e.g. ns/post beside
/// M posts/s). `convert` must be monotonic, so the median converts to the median.
///
/// A figure with a ``log`` instead takes its values from it: one run then yields several
/// independent figures (a timer run's scheduling cost, lateness percentiles and early fires).
struct DerivedFigure {
  let unit: String
  let direction: Direction
  let target: Target?
  let convert: (Double) -> Double
  /// When set, the figures recorded by the benchmark's own runs; `convert` is not used.
  var log: FigureLog? = nil

  /// A row whose figures the benchmark records into `log`, one per run of each side.
  static func recorded(
    _ log: FigureLog, unit: String, direction: Direction, target: Target?
  ) -> DerivedFigure {
    DerivedFigure(unit: unit, direction: direction, target: target, convert: { $0 }, log: log)
  }
}

/// Extra figures a benchmark's runs record beside the one they return: each `ours` run
/// appends one to ``ours`` and each `rival` run one to ``rival`` (warm-up runs too; the table
/// uses the last runs only). Only touched by the thread running the harness.
final class FigureLog {
  var ours: [Double] = []
  var rival: [Double] = []

  init() {}

  /// The last `count` figures of `figures`, or none if fewer were recorded (a skipped side).
  static func lastRuns(_ figures: [Double], _ count: Int) -> [Double] {
    figures.count >= count ? Array(figures.suffix(count)) : []
  }
}

/// One comparison: how to measure our side and the rival's side once, in the same unit.
///
/// Rows that measure CPU time pass closures returning ``Measurement``; rows that measure the
/// wall clock only pass closures returning the figure (see the second initializer).
struct Benchmark {
  /// Short identifier for the command-line filter, e.g. "pingpong".
  let key: String
  /// The row title, e.g. "fd ping-pong, 100k round trips (one loop)".
  let name: String
  let unit: String
  let direction: Direction
  /// Who we are compared with, e.g. "raw libevent" or "Dispatch".
  let rivalName: String
  let target: Target?
  /// Measures LoopDispatch once: the figure in `unit`, and CPU per operation if measured.
  let ours: () -> Measurement
  /// Measures the rival once, likewise.
  let rival: () -> Measurement
  /// Extra rows from the same runs.
  var derived: [DerivedFigure] = []
}

extension Benchmark {
  /// A row that measures the wall clock only: each closure returns the figure in `unit`.
  init(
    key: String, name: String, unit: String, direction: Direction, rivalName: String,
    target: Target?, ours: @escaping () -> Double, rival: @escaping () -> Double,
    derived: [DerivedFigure] = []
  ) {
    self.init(
      key: key, name: name, unit: unit, direction: direction, rivalName: rivalName,
      target: target, ours: { Measurement(wall: ours()) }, rival: { Measurement(wall: rival()) },
      derived: derived)
  }
}

/// A named list of benchmarks (one per area: mainloop, queues, timers, sources).
struct BenchmarkGroup {
  let name: String
  let benchmarks: [Benchmark]
}

/// Raw measurements of one benchmark, one per run.
struct Samples {
  var ours: [Measurement] = []
  var rival: [Measurement] = []
}

/// One line of the result table: medians of both sides.
struct Row {
  let name: String
  /// LoopDispatch's median.
  let ours: Double
  /// The rival's median.
  let rival: Double
  let rivalName: String
  let unit: String
  let direction: Direction
  let target: Target?
  /// Half the range of our runs over the median (0.03 = ±3%).
  let oursSpread: Double
  /// The same for the rival.
  let rivalSpread: Double
  /// LoopDispatch's median CPU ns per operation; nil when the row does not measure CPU.
  var oursCPU: Double? = nil
  /// The rival's; nil when the row does not measure CPU.
  var rivalCPU: Double? = nil

  /// Our cost relative to the rival's: ours/rival when lower is better, rival/ours when
  /// higher is better. Below 1 means LoopDispatch wins.
  var ratio: Double {
    switch direction {
    case .lowerIsBetter: ours / rival
    case .higherIsBetter: rival / ours
    }
  }

  /// Our CPU per operation over the rival's (lower is better for CPU whatever the row's
  /// direction), or nil when the row does not measure CPU. NaN when a side was skipped.
  var cpuRatio: Double? {
    guard oursCPU != nil || rivalCPU != nil else { return nil }
    return (oursCPU ?? .nan) / (rivalCPU ?? .nan)
  }

  /// Whether the target is met, or nil when the row has none or a needed side was skipped.
  var targetMet: Bool? {
    guard let target, ours.isFinite, ratio.isFinite || !target.needsRival else { return nil }
    return target.isMet(ours, ratio)
  }
}

enum Harness {
  /// Runs `benchmark` as described at the top of this file.
  /// With `side` other than `.both`, the skipped side records NaN (shown as n/a).
  static func measure(
    _ benchmark: Benchmark, repeats: Int, warmups: Int, side: Options.Side = .both
  ) -> Samples {
    let skipped = { Measurement(wall: .nan) }
    let ours = side == .rival ? skipped : benchmark.ours
    let rival = side == .ours ? skipped : benchmark.rival
    for _ in 0..<warmups {
      _ = ours()
      _ = rival()
    }
    var samples = Samples()
    for _ in 0..<repeats {
      samples.ours.append(ours())
      samples.rival.append(rival())
    }
    return samples
  }

  /// The table rows for `benchmark`: its own, then one per derived figure.
  /// CPU figures appear on the benchmark's own row only.
  static func rows(for benchmark: Benchmark, from samples: Samples) -> [Row] {
    let oursWall = samples.ours.map(\.wall)
    let rivalWall = samples.rival.map(\.wall)
    var rows = [
      Row(
        name: benchmark.name, ours: median(oursWall), rival: median(rivalWall),
        rivalName: benchmark.rivalName, unit: benchmark.unit, direction: benchmark.direction,
        target: benchmark.target, oursSpread: spread(oursWall), rivalSpread: spread(rivalWall),
        oursCPU: cpuMedian(samples.ours), rivalCPU: cpuMedian(samples.rival))
    ]
    for figure in benchmark.derived {
      let ours =
        figure.log.map { FigureLog.lastRuns($0.ours, oursWall.count) }
        ?? oursWall.map(figure.convert)
      let rival =
        figure.log.map { FigureLog.lastRuns($0.rival, rivalWall.count) }
        ?? rivalWall.map(figure.convert)
      rows.append(
        Row(
          name: benchmark.name, ours: median(ours), rival: median(rival),
          rivalName: benchmark.rivalName, unit: figure.unit, direction: figure.direction,
          target: figure.target, oursSpread: spread(ours), rivalSpread: spread(rival)))
    }
    return rows
  }

  /// The median (mean of the middle two for an even count).
  static func median(_ values: [Double]) -> Double {
    if values.isEmpty || values.contains(where: \.isNaN) { return .nan }
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
  }

  /// The median CPU per operation of `runs`: nil when none measured it, NaN when only some
  /// did (a broken row).
  static func cpuMedian(_ runs: [Measurement]) -> Double? {
    let figures = runs.compactMap(\.cpuPerOperation)
    if figures.isEmpty { return nil }
    return figures.count == runs.count ? median(figures) : .nan
  }

  /// Half the range over the median.
  static func spread(_ values: [Double]) -> Double {
    let middle = median(values)
    guard middle.isFinite, middle != 0, let low = values.min(), let high = values.max() else {
      return .nan
    }
    return (high - low) / 2 / middle
  }
}

/// Stops the benchmark run with a message: a benchmark that cannot produce a figure is broken.
func benchmarkFailure(_ message: String) -> Never {
  fatalError("benchmark failed: \(message)")
}
