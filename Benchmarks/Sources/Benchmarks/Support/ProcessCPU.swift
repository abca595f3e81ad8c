import Glibc

/// The CPU time of the whole process: user plus system time of every thread, including threads
/// that have exited, from `getrusage(RUSAGE_SELF)` (microsecond resolution).
enum ProcessCPU {
  /// Nanoseconds of CPU time so far.
  static func now() -> UInt64 {
    var usage = rusage()
    if getrusage(RUSAGE_SELF.rawValue, &usage) != 0 {
      benchmarkFailure("getrusage failed: errno \(errno)")
    }
    return nanoseconds(usage.ru_utime) &+ nanoseconds(usage.ru_stime)
  }

  private static func nanoseconds(_ time: timeval) -> UInt64 {
    UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_usec) &* 1_000
  }
}

/// Both clocks read at one end of a measured section: the wall clock (``Stopwatch``) and the
/// process's CPU time (``ProcessCPU``). The `getrusage` call costs about a microsecond, so
/// each end reads the CPU clock on the outer side and the wall interval stays exactly what it
/// was without it.
struct ClockReading {
  /// ``Stopwatch/now()``.
  let wall: UInt64
  /// ``ProcessCPU/now()``.
  let cpu: UInt64

  /// Where a section starts: the CPU clock, then the wall clock.
  static func start() -> ClockReading {
    let cpu = ProcessCPU.now()
    return ClockReading(wall: Stopwatch.now(), cpu: cpu)
  }

  /// Where a section ends: the wall clock, then the CPU clock.
  static func end() -> ClockReading {
    let wall = Stopwatch.now()
    return ClockReading(wall: wall, cpu: ProcessCPU.now())
  }
}

extension Measurement {
  /// `operations` operations from `start` to `end`: wall-clock and CPU ns per operation.
  init(from start: ClockReading, to end: ClockReading, operations: Int) {
    self.init(
      wall: Double(end.wall - start.wall) / Double(operations),
      cpuPerOperation: Double(end.cpu - start.cpu) / Double(operations))
  }
}
