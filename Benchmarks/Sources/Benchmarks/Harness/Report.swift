import CRawLibevent
import Glibc

/// Printing the result table and the notes on the machine it was measured on.
enum Report {
  /// Prints `rows` as a Markdown table followed by notes.
  static func print(_ rows: [Row], options: Options) {
    let header = [
      "Benchmark", "Unit", "LoopDispatch", "Rival", "Rival figure", "Ratio", "CPU ns/op (ours)",
      "CPU ns/op (rival)", "CPU ratio", "Target", "Met", "Spread (ours / rival)",
    ]
    var lines = [header]
    for row in rows {
      lines.append([
        row.name,
        row.unit + (row.direction == .higherIsBetter ? " ↑" : " ↓"),
        formatted(row.ours),
        row.rivalName,
        formatted(row.rival),
        formattedRatio(row.ratio),
        row.cpuRatio == nil ? "—" : formatted(row.oursCPU ?? .nan),
        row.cpuRatio == nil ? "—" : formatted(row.rivalCPU ?? .nan),
        row.cpuRatio.map(formattedRatio) ?? "—",
        row.target?.text ?? "—",
        row.targetMet.map { $0 ? "yes" : "**no**" } ?? "—",
        formattedSpread(row.oursSpread) + " / " + formattedSpread(row.rivalSpread),
      ])
    }
    Swift.print(markdownTable(lines))
    Swift.print()
    Swift.print(
      """
      Medians of \(options.repeats) runs per side after \(options.warmups) warm-up run(s), \
      the two sides alternating. ↓ lower is better, ↑ higher is better. Ratio = LoopDispatch's \
      cost over the rival's (ours/rival for ↓, rival/ours for ↑): below 1 LoopDispatch wins. \
      Spread = half the range of the runs over the median. CPU ns/op = user + system CPU time \
      of the whole process (getrusage RUSAGE_SELF, every thread) over the same interval as the \
      wall figure, per operation, median of the same runs; CPU ratio = ours/rival, below 1 \
      LoopDispatch burns less CPU; — = not measured for that row. Rows run in a child process \
      count that child only; the others count this whole process, so also whatever the other \
      runtime's idle threads do meanwhile (spinning down, timers).
      """)
    Swift.print()
    for note in machineNotes() { Swift.print("- " + note) }
  }

  /// A ratio as "0.85x"; "n/a" when a side was skipped.
  static func formattedRatio(_ ratio: Double) -> String {
    ratio.isFinite ? formatted(ratio, decimals: 2) + "x" : "n/a"
  }

  /// Rows of cells as a Markdown table with padded columns (the first row is the header).
  static func markdownTable(_ lines: [[String]]) -> String {
    let widths = lines[0].indices.map { column in lines.map { $0[column].count }.max() ?? 0 }
    func render(_ cells: [String]) -> String {
      let padded = cells.enumerated().map { column, cell in
        cell + String(repeating: " ", count: widths[column] - cell.count)
      }
      return "| " + padded.joined(separator: " | ") + " |"
    }
    let rule =
      "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|"
    return ([render(lines[0]), rule] + lines.dropFirst().map(render)).joined(separator: "\n")
  }

  /// nproc, CPU, kernel, libevent, date and build configuration.
  static func machineNotes() -> [String] {
    var notes = ["nproc: \(sysconf(Int32(_SC_NPROCESSORS_ONLN)))"]
    if let model = cpuModel() { notes.append("CPU: \(model)") }
    notes.append("kernel: \(kernelRelease())")
    if let load = firstLine(of: "/proc/loadavg") {
      notes.append("load average at the end (1/5/15 min, runnable/total): \(load)")
    }
    notes.append("libevent: \(String(cString: raw_libevent_version()))")
    notes.append("date: \(utcDate())")
    #if DEBUG
      notes.append("build: DEBUG — figures are meaningless; use `swift run -c release`")
    #else
      notes.append("build: release")
    #endif
    return notes
  }

  private static func cpuModel() -> String? {
    guard let file = fopen("/proc/cpuinfo", "r") else { return nil }
    defer { fclose(file) }
    var line: UnsafeMutablePointer<CChar>? = nil
    var capacity = 0
    defer { free(line) }
    while getline(&line, &capacity, file) > 0, let line {
      let text = String(cString: line)
      if text.hasPrefix("model name"), let colon = text.firstIndex(of: ":") {
        return String(
          text[text.index(after: colon)...].drop { $0 == " " || $0 == "\t" }.prefix { $0 != "\n" })
      }
    }
    return nil
  }

  /// The first line of a text file, without its newline.
  private static func firstLine(of path: String) -> String? {
    guard let file = fopen(path, "r") else { return nil }
    defer { fclose(file) }
    var line: UnsafeMutablePointer<CChar>? = nil
    var capacity = 0
    defer { free(line) }
    guard getline(&line, &capacity, file) > 0, let line else { return nil }
    return String(String(cString: line).prefix { $0 != "\n" })
  }

  private static func kernelRelease() -> String {
    var name = utsname()
    guard uname(&name) == 0 else { return "unknown" }
    return withUnsafeBytes(of: &name.release) {
      String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
    }
  }

  private static func utcDate() -> String {
    var now = time(nil)
    var parts = tm()
    gmtime_r(&now, &parts)
    var buffer = [CChar](repeating: 0, count: 64)
    let length = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S UTC", &parts)
    return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }
}
