import Glibc
import Synchronization

/// Whether a worker's spin pays on this machine now, or is CPU taken from someone who needs it.
///
/// A spin wins a hand-off when the spinner has a core nobody else wants: the next job arrives
/// and starts without a futex wake-up. When other processes' threads wait for a CPU (a busy
/// neighbour), or the CPU quota is spent, every spinning microsecond is taken from them, and a
/// spinner the kernel preempts helps nobody. Walk-through:
/// 1. Signs of a loaded machine, any one of:
///    (a) CPU pressure: the stall time of the pressure file (PSI `some` `total`, in µs: time in
///        which at least one runnable task waited for a CPU) grew by more than
///        `stallShareLimit` of the wall time since the last sample, and `/proc/loadavg`
///        counts more runnable tasks (the sampling spinner among them) than the machine's
///        online CPUs + 1. The file is the process's cgroup v2 `cpu.pressure` where there is
///        one, else the system's `/proc/pressure/cpu`. Without PSI (a kernel built without
///        it, or booted with `psi=0`): the runnable count alone. A process whose affinity
///        leaves out some online CPUs (a cpuset, `taskset`) skips the count and goes by the
///        stall alone: the count is the whole machine's, and a few busy CPUs of ours would
///        hide among many idle ones.
///        Why the count: a process whose own threads are one more than the CPUs (a producer,
///        a worker running its jobs and the spinner, on two CPUs) stalls its own tasks a half
///        of the time, and PSI cannot tell those stalls from a neighbour's. Counted as
///        pressure, they made every worker park at once and the producer pay a futex wake-up
///        per hand-off: 1M capturing closures from the main thread cost 432–480 ns each
///        against 305–374 with spins left alone (a 2-CPU VM, where a wake-up is a few µs).
///        A neighbour per CPU keeps the count above the slack, whatever our threads do. The
///        price: one busy neighbour beside our producer and spinner on two CPUs is 3
///        runnable tasks, which counts as calm, so the spinner then competes with it.
///    (b) The CPU quota throttled the process: `nr_throttled` in the `cpu.stat` of the cgroup
///        whose quota sized the pool (`CPUBudget.quotaDirectory`) grew.
///    (c) A spinner saw a time jump inside its spin (`notePreempted`): the kernel ran
///        something else on its CPU, so the spin was not paying whatever the files say.
/// 2. A sign makes the governor pressured for `holdNanoseconds`; spins are then at most
///    `WorkerPool.pressuredSpinLimit` checks, so a worker out of work parks almost at once
///    and leaves its core to whoever is waiting for it.
/// 3. A spinner samples at spin entry, at most once per `sampleIntervalNanoseconds`, and only
///    the one that takes `sampling`: at most 100 samples a second, each one `pread` per file on
///    descriptors opened once. The one-shot waits (`SpinAdmission`) and the scheduling of an
///    early `Task.sleep` hand-off (`EarlyHandOff`) ask too, under the same bound. Nothing
///    samples while nothing spins, waits or sleeps (workers spin only right after a job), so
///    an idle process reads nothing and wakes nothing. The spin path itself
///    reads a clock (vDSO, no system call) and two atomics.
///
/// Memory order: `pressuredUntil` and `nextSample` are hints, loaded and stored relaxed. A stale
/// value makes one spin too long or too short, never loses work: the pool's wake-up protocol
/// (`WorkerPool+Parking.swift`) does not depend on how long a spin lasts. The sample state
/// (`last…` fields, the buffer) belongs to the thread that holds `sampling` (acquiring on
/// taking it, releasing on giving it back, so the next holder sees the last one's writes).
final class SpinGovernor: @unchecked Sendable {
  // @unchecked Sendable: the atomics are atomic; the descriptors are written in init only; the
  // sample state is touched only by the holder of `sampling` (see above).

  /// How often the files are read, at most (while workers spin).
  static let sampleIntervalNanoseconds: UInt64 = 10_000_000
  /// How long one sign keeps spins short.
  static let holdNanoseconds: UInt64 = 50_000_000
  /// A gap this long between two clock readings of one spin (16 checks apart, well under a
  /// microsecond when the spinner runs) means the spinner was not running.
  static let preemptionGapNanoseconds: UInt64 = 50_000
  /// Stall growth above this share of the elapsed time is pressure (1 in 5).
  static let stallShareDivisor: UInt64 = 5

  /// Atomic. Spins are short until this instant (`Deadline` nanoseconds).
  private let pressuredUntil = Atomic<UInt64>(0)
  /// Atomic. The earliest instant of the next sample.
  private let nextSample = Atomic<UInt64>(0)
  /// Atomic. Held by the sampling thread.
  private let sampling = Atomic<Bool>(false)
  /// Atomic, figures: samples taken, and samples or spins that found a sign.
  let samples = Atomic<UInt64>(0)
  let signs = Atomic<UInt64>(0)

  /// False when `LOOPDISPATCH_SPIN_GOVERNOR=0`: spins never shorten (for an operator who
  /// measured that spinning pays on a loaded machine, and for A/B runs of the benchmarks).
  let isEnabled: Bool
  /// The files' descriptors, or -1 (not given, unreadable, or the governor disabled).
  private let pressureFD: Int32
  private let loadFD: Int32
  private let throttleFD: Int32
  /// The machine's online CPUs: what `/proc/loadavg`'s runnable count is measured against.
  private let machineCPUs: Int
  /// Whether a PSI stall counts only with the runnable count over `machineCPUs + 1` (sign
  /// (a)); false for a process that may not run on every online CPU. (Read by tests.)
  let stallNeedsRunnableCount: Bool
  // Sample state: the holder of `sampling` only.
  private var lastStall: UInt64?
  private var lastThrottled: UInt64?
  private var lastSampleAt: UInt64 = 0
  private let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: bufferSize)
  private static let bufferSize = 512

  /// A governor reading the given files (nil or unreadable: that sign is not used; without
  /// the load file, a pressure file's stall alone is pressure). `machineCPUs` defaults to
  /// the online CPUs; `stallNeedsRunnableCount` false lets a stall be pressure whatever the
  /// count (a process confined to some of the CPUs).
  init(
    pressurePath: String?, loadPath: String?, throttlePath: String?, machineCPUs: Int? = nil,
    stallNeedsRunnableCount: Bool = true, enabled: Bool = true
  ) {
    isEnabled = enabled
    // Disabled: nothing is opened (nor ever read).
    pressureFD = enabled ? Self.openForReading(pressurePath) : -1
    loadFD = enabled ? Self.openForReading(loadPath) : -1
    throttleFD = enabled ? Self.openForReading(throttlePath) : -1
    self.machineCPUs = Swift.max(1, machineCPUs ?? Self.onlineCPUs)
    self.stallNeedsRunnableCount = stallNeedsRunnableCount
  }

  deinit {
    for fd in [pressureFD, loadFD, throttleFD] where fd >= 0 { close(fd) }
    buffer.deallocate()
  }

  /// The process's governor, shared by the pool's spins, the one-shot waits (`SpinAdmission`)
  /// and `EarlyHandOff`, which consult it without starting the pool.
  static let process = forProcess(budget: CPUBudget.current)

  /// The governor of this process: its cgroup's pressure file (else the system's), and the
  /// throttling count of the cgroup whose quota sized the pool.
  static func forProcess(budget: CPUBudget, cgroupRoot: String = "/sys/fs/cgroup") -> SpinGovernor {
    var pressure = "/proc/pressure/cpu"
    let membership = readSmallTextFile("/proc/self/cgroup", limit: 4096) ?? ""
    for line in membership.split(separator: "\n") where line.hasPrefix("0::") {
      let path = String(line.dropFirst(3))
      for mount in [cgroupRoot, cgroupRoot + "/unified"] where path != "/" {
        let candidate = mount + path + "/cpu.pressure"
        if access(candidate, R_OK) == 0 {
          pressure = candidate
          break
        }
      }
    }
    return SpinGovernor(
      pressurePath: pressure, loadPath: "/proc/loadavg",
      throttlePath: budget.quotaDirectory.map { $0 + "/cpu.stat" },
      stallNeedsRunnableCount: budget.affinityCPUs >= onlineCPUs,
      enabled: getenv("LOOPDISPATCH_SPIN_GOVERNOR").map { String(cString: $0) } != "0")
  }

  /// Whether spins should be short at `now` (`Deadline` nanoseconds); samples the files
  /// first when a sample is due. Called by a spinner at spin entry, and by the users named at
  /// `process`.
  @inline(__always)
  func isPressured(now: UInt64) -> Bool {
    #if DEBUG
      switch Self.testOverride.load(ordering: .relaxed) {
      case 1: return true
      case 2: return false
      default: break
      }
    #endif
    guard isEnabled else { return false }
    if now >= nextSample.load(ordering: .relaxed) { sampleIfFree(now: now) }
    return now < pressuredUntil.load(ordering: .relaxed)
  }

  #if DEBUG
    /// Debug builds, for tests of the spin: 1 every spin is pressured, 2 none is, 0 the files
    /// and the clock decide. Atomic (relaxed: a switch).
    package static let testOverride = Atomic<Int>(0)
  #endif

  /// A spinner saw a time jump at `now`: it was preempted (sign c).
  func notePreempted(now: UInt64) {
    countSharedWrite(.spinGovernor, 2)
    signs.wrappingAdd(1, ordering: .relaxed)
    pressuredUntil.store(now &+ Self.holdNanoseconds, ordering: .relaxed)
  }

  /// Reads the files if no other thread is, and marks the governor pressured on a sign.
  @inline(never)
  func sampleIfFree(now: UInt64) {
    countSharedWrite(.spinGovernor)  // The claim, taken or not.
    guard sampling.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged
    else { return }
    countSharedWrite(.spinGovernor)  // Its release (deferred).
    defer { sampling.store(false, ordering: .releasing) }
    // Re-checked under `sampling`: another thread may have sampled since our load.
    guard now >= nextSample.load(ordering: .relaxed) else { return }
    nextSample.store(now &+ Self.sampleIntervalNanoseconds, ordering: .relaxed)
    samples.wrappingAdd(1, ordering: .relaxed)
    countSharedWrite(.spinGovernor, 2)
    let elapsed = now &- lastSampleAt
    var sign = false
    if pressureFD >= 0, let stall = readNumber(pressureFD, after: "total=") {
      // µs of stall against ns of wall: stall * 1000 * divisor > elapsed.
      if let last = lastStall, stall > last,
        (stall - last) &* 1000 &* Self.stallShareDivisor > elapsed
      {
        // Confined to some CPUs, or the count unknown (no load file): the stall alone.
        sign = !stallNeedsRunnableCount || (moreRunnableThanCPUsPlusOne() ?? true)
      }
      lastStall = stall
    } else if let excess = moreRunnableThanCPUsPlusOne() {
      sign = excess
    }
    if throttleFD >= 0, let throttled = readNumber(throttleFD, after: "nr_throttled ") {
      if let last = lastThrottled, throttled > last { sign = true }
      lastThrottled = throttled
    }
    lastSampleAt = now
    if sign {
      countSharedWrite(.spinGovernor, 2)
      signs.wrappingAdd(1, ordering: .relaxed)
      pressuredUntil.store(now &+ Self.holdNanoseconds, ordering: .relaxed)
    }
  }

  /// The online CPUs (`sysconf`), at least 1.
  static var onlineCPUs: Int { Swift.max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN))) }

  /// Whether `/proc/loadavg` counts more runnable tasks than the machine's CPUs plus one
  /// (sign (a)); nil without the file. "0.20 1.04 2.33 2/94 24242": the fourth field's first
  /// number counts runnable tasks, this sampler among them. Sampler only.
  private func moreRunnableThanCPUsPlusOne() -> Bool? {
    guard loadFD >= 0, let running = readNumber(loadFD, after: " ", occurrence: 2) else {
      return nil
    }
    return running > UInt64(machineCPUs + 1)
  }

  /// The decimal number right after occurrence `occurrence` (0: the first) of `marker` in
  /// the file, read from its start; nil when the file, the marker or the digits are missing.
  private func readNumber(_ fd: Int32, after marker: StaticString, occurrence: Int = 0)
    -> UInt64?
  {
    // Safe: `buffer` holds `bufferSize` bytes and belongs to the holder of `sampling`.
    let count = pread(fd, buffer, Self.bufferSize, 0)
    guard count > 0 else { return nil }
    let bytes = UnsafeBufferPointer(start: buffer, count: count)
    let needle = UnsafeBufferPointer(start: marker.utf8Start, count: marker.utf8CodeUnitCount)
    var position = 0
    var found = 0
    while true {
      guard position + needle.count <= bytes.count else { return nil }
      if bytes[position..<position + needle.count].elementsEqual(needle) {
        position += needle.count
        if found == occurrence { break }
        found += 1
      } else {
        position += 1
      }
    }
    var value: UInt64 = 0
    var digits = 0
    while position < bytes.count, bytes[position] >= 48, bytes[position] <= 57 {
      value = value &* 10 &+ UInt64(bytes[position] - 48)
      position += 1
      digits += 1
    }
    return digits > 0 ? value : nil
  }

  /// How many of the three files the governor holds open (for tests).
  var openFiles: Int { [pressureFD, loadFD, throttleFD].filter { $0 >= 0 }.count }

  private static func openForReading(_ path: String?) -> Int32 {
    guard let path else { return -1 }
    return open(path, O_RDONLY | O_CLOEXEC)
  }
}
