import Glibc

/// Runs this benchmark binary again as a child (`Benchmarks --child NAME`) and returns what it
/// printed: for rows that must own the process main thread, such as Dispatch's main queue,
/// which only runs under `dispatchMain()` and never returns.
///
/// Walk-through:
/// 1. A pipe replaces the child's standard output; standard error is inherited, so a crash
///    message reaches the terminal.
/// 2. `posix_spawn` starts `/proc/self/exe` with the hidden arguments.
/// 3. The parent reads the pipe until end of file, giving up after `timeoutSeconds` (the child
///    is then killed and the run fails with the command that reproduces the hang).
/// 4. A child that exits with a non-zero status or dies of a signal fails the run likewise.
/// 5. The child ends with ``report(_:extras:)``: its wall figure and, when measured, its own
///    CPU time (`getrusage(RUSAGE_SELF)` in the child, so the parent's threads are not
///    counted) over the same section, and any further labelled figures of the same run;
///    ``measure(_:)`` runs the child and parses the first two back into a ``Measurement``,
///    ``figure(labelled:in:of:)`` reads the others.
enum ChildProcess {
  /// The hidden first argument that selects a child mode in `main.swift`.
  static let flag = "--child"

  /// Runs `Benchmarks --child name` and returns its standard output.
  static func run(_ name: String, timeoutSeconds: Int32 = 120) -> String {
    var pipeEnds: [Int32] = [-1, -1]
    if pipe(&pipeEnds) != 0 { benchmarkFailure("pipe failed: errno \(errno)") }
    let (readEnd, writeEnd) = (pipeEnds[0], pipeEnds[1])
    for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    // dup2 clears close-on-exec on the new descriptor 1; the pipe's own ends stay close-on-exec.
    posix_spawn_file_actions_adddup2(&actions, writeEnd, 1)

    let arguments = [CommandLine.arguments[0], flag, name]
    // strdup'd copies: posix_spawn wants mutable C strings; freed once the child started.
    var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid = pid_t()
    let rc = posix_spawn(&pid, "/proc/self/exe", &actions, nil, &argv, environ)
    close(writeEnd)
    if rc != 0 {
      close(readEnd)
      benchmarkFailure("posix_spawn failed: \(rc)")
    }

    let output = readAll(readEnd, pid: pid, name: name, timeoutSeconds: timeoutSeconds)
    close(readEnd)
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    // WIFEXITED / WEXITSTATUS by hand: the macros are not visible to Swift.
    let signal = status & 0x7f
    let exitCode = (status >> 8) & 0xff
    if signal != 0 || exitCode != 0 {
      benchmarkFailure(
        "child `\(reproduction(name))` ended with "
          + (signal != 0 ? "signal \(signal)" : "exit status \(exitCode)")
          + "; its output: \(output)")
    }
    return output
  }

  /// The shell command that runs the child by hand.
  static func reproduction(_ name: String) -> String {
    "\(CommandLine.arguments[0]) \(flag) \(name)"
  }

  /// Reads `fd` until end of file; kills the child and fails after `timeoutSeconds`.
  private static func readAll(
    _ fd: Int32, pid: pid_t, name: String, timeoutSeconds: Int32
  ) -> String {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    let giveUpAt = Stopwatch.now() + UInt64(timeoutSeconds) * 1_000_000_000
    while true {
      let now = Stopwatch.now()
      if now >= giveUpAt {
        kill(pid, SIGKILL)
        benchmarkFailure(
          "child `\(reproduction(name))` produced no result within \(timeoutSeconds) s "
            + "(killed; it hangs)")
      }
      var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      let ready = poll(&poller, 1, Int32((giveUpAt - now) / 1_000_000) + 1)
      if ready < 0 && errno != EINTR { benchmarkFailure("poll failed: errno \(errno)") }
      if ready <= 0 { continue }
      let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
      if count < 0 && errno == EINTR { continue }
      if count <= 0 { break }
      bytes += buffer[0..<count]
    }
    return String(decoding: bytes, as: UTF8.self)
  }

  /// Prints the measurement a child reports to its parent and exits with 0. The format, one
  /// line each, the second only when the child measured CPU time, then one line per extra
  /// figure (a label of letters and digits, e.g. `p99`, read back with
  /// ``figure(labelled:in:of:)``):
  ///
  ///     figure <the wall figure, in the row's unit>
  ///     cpu <the child's own CPU time over the same interval, ns per operation>
  ///     <label> <value>
  static func report(
    _ measurement: Measurement, extras: KeyValuePairs<String, Double> = [:]
  ) -> Never {
    print("figure \(measurement.wall)")
    if let cpu = measurement.cpuPerOperation { print("cpu \(cpu)") }
    for (label, value) in extras { print("\(label) \(value)") }
    exit(0)  // Flushes standard output.
  }

  /// The measurement in a child's output, as printed by ``report(_:extras:)``.
  static func measurement(in output: String, of name: String) -> Measurement {
    Measurement(
      wall: figure(labelled: "figure", in: output, of: name),
      cpuPerOperation: value(labelled: "cpu", in: output, of: name))
  }

  /// The figure on the line of `output` labelled `label`; fails the run without one.
  static func figure(labelled label: String, in output: String, of name: String) -> Double {
    guard let figure = value(labelled: label, in: output, of: name) else {
      benchmarkFailure("child `\(reproduction(name))` printed no \(label) line: \(output)")
    }
    return figure
  }

  /// Runs `Benchmarks --child name` and returns the measurement it reported.
  static func measure(_ name: String) -> Measurement {
    measurement(in: run(name), of: name)
  }

  /// The number on the first line of `output` that starts with `label` and a space; nil
  /// without such a line; fails the run if the rest of the line is not a number.
  private static func value(labelled label: String, in output: String, of name: String) -> Double? {
    let prefix = label + " "
    guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) else {
      return nil
    }
    guard let value = Double(line.dropFirst(prefix.count)) else {
      benchmarkFailure("child `\(reproduction(name))` printed a malformed line: \(line)")
    }
    return value
  }
}
