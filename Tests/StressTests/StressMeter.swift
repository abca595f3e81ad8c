import Glibc
import LoopDispatch
import Synchronization
import TestSupport

/// Measures one stress run: wall time, peak resident memory (VmHWM, reset at the start where
/// the kernel allows it) and the peak number of threads, sampled on a thread of its own.
/// `finish` prints the one-line summary the closing notes quote.
///
/// Thread-safety: `init` and `finish` are called by the test's own thread; the sampler
/// thread only touches `peakThreads` and `stopped`, which are atomic.
final class StressMeter: Sendable {
  private let name: String
  private let start: Deadline
  /// Atomic. The highest thread count seen, the sampler excluded.
  private let peakThreads = Atomic<Int>(0)
  /// Atomic. Set by `finish` to end the sampler.
  private let stopped = Atomic<Bool>(false)
  private let sampler = Atomic<UInt>(0)

  /// Starts measuring the run called `name`.
  init(_ name: String) {
    self.name = name
    resetPeakResidentMemory()
    peakThreads.store(currentThreadCount(), ordering: .relaxed)
    start = .now
    let thread = startThread { [self] in
      // Sampling every 2 ms is a measurement period, not synchronisation.
      while !stopped.load(ordering: .relaxed) {
        _ = peakThreads.max(currentThreadCount() - 1, ordering: .relaxed)
        var pause = timespec(tv_sec: 0, tv_nsec: 2_000_000)
        nanosleep(&pause, nil)
      }
    }
    sampler.store(thread, ordering: .relaxed)
  }

  /// Stops the sampler, prints `stress <name>: items …, seconds, items/s, peak RSS, peak
  /// threads` and returns the elapsed seconds.
  @discardableResult
  func finish(items: Int) -> Double {
    let elapsed = seconds(Deadline.now - start)
    stopped.store(true, ordering: .relaxed)
    pthread_join(sampler.load(ordering: .relaxed), nil)
    let threads = peakThreads.load(ordering: .relaxed)
    let rss = statusField("VmHWM") ?? 0
    let rate = Double(items) / Swift.max(elapsed, 1e-9)
    print(
      "stress \(name): items \(items), \(format(elapsed, 3)) s, \(format(rate, 0)) items/s,"
        + " peak RSS \(format(Double(rss) / 1024, 1)) MiB, peak threads \(threads)")
    fflush(nil)
    return elapsed
  }
}

/// Seconds in `duration`, as a floating-point number.
func seconds(_ duration: Duration) -> Double {
  let (whole, fraction) = duration.components
  return Double(whole) + Double(fraction) / 1e18
}

/// `value` with `digits` digits after the point.
func format(_ value: Double, _ digits: Int) -> String {
  var buffer = [CChar](repeating: 0, count: 64)
  _ = withVaList([value]) { vsnprintf(&buffer, buffer.count, "%.\(digits)f", $0) }
  return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// The number in the `field:` line of /proc/self/status (kB for memory, a count for
/// `Threads`), or nil if the line is missing.
func statusField(_ field: String) -> Int? {
  guard let file = fopen("/proc/self/status", "r") else { return nil }
  defer { fclose(file) }
  var line = [CChar](repeating: 0, count: 256)
  let prefix = field + ":"
  while fgets(&line, Int32(line.count), file) != nil {
    let text = String(
      decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    guard text.hasPrefix(prefix) else { continue }
    return Int(text.dropFirst(prefix.count).filter { $0.isNumber })
  }
  return nil
}

private func currentThreadCount() -> Int { statusField("Threads") ?? 0 }

/// Resets VmHWM to the current RSS (writing 5 to /proc/self/clear_refs); where the kernel
/// refuses, the figure printed is the process's peak so far.
private func resetPeakResidentMemory() {
  let fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC)
  guard fd >= 0 else { return }
  _ = write(fd, "5", 1)
  close(fd)
}
