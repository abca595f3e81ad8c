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
///    samples while nothing spins, waits or sleeps (workers spin only right after a job) and
///    no C serial queue schedules a drain while neighbours are believed in (step 4), so an
///    idle process reads nothing and wakes nothing. The spin path itself
///    reads a clock (vDSO, no system call) and two atomics.
///
/// 4. Neighbours (`neighboursTakeCPU`), a narrower sign read by the C API's serial queues
///    (`Queue.drainsOnOvercommitBesideNeighbours`): over a window of at least
///    `neighboursWindowNanoseconds`, the stall grew by more than a fifth of it, the runnable
///    count at its end was over the CPUs + 1, and others' CPU time, the machine's busy time
///    (`/proc/stat`'s first line: user, nice, system, irq, softirq) less the process's own
///    (`getrusage`, user + system), came to more than a quarter of a CPU. Once believed,
///    more than an eighth goes on: the drains given threads of their own take some of the
///    neighbours' share, and the verdict must not undo itself. A process that oversubscribes
///    the machine by itself (four producers and a drainer on two CPUs) holds all the busy
///    time and is not counted. The ticks are 10 ms,
///    a tenth of a CPU over a window, hence the window's length and the quarter to start. A
///    yes holds for two windows; a window that ran past four (nothing sampled meanwhile)
///    starts again, believing nothing. A process confined to some of the CPUs never gets a
///    yes: the busy time is the whole machine's. The files are read only when a window ends.
///    While no yes is held (`mayHaveNeighbours`), the serial queues neither read the clock
///    nor sample: the spinners' samples form the first yes.
///
/// Memory order: `pressuredUntil`, `neighboursUntil` and `nextSample` are hints, loaded and
/// stored relaxed. A stale value makes one spin too long or too short, or one drain take the
/// other kind of thread; it never loses work: the pool's wake-up protocol
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
  /// Step 4 judges windows at least this long (ten of `/proc/stat`'s ticks per CPU), and
  /// holds a yes for two of them.
  static let neighboursWindowNanoseconds: UInt64 = 100_000_000
  /// Stall growth above this share of the elapsed time is pressure (1 in 5).
  static let stallShareDivisor: UInt64 = 5

  /// Atomic. Spins are short until this instant (`Deadline` nanoseconds).
  private let pressuredUntil = Atomic<UInt64>(0)
  /// Atomic. Other processes take CPUs the process could use until this instant (step 4).
  private let neighboursUntil = Atomic<UInt64>(0)
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
  private let statFD: Int32
  /// The machine's online CPUs: what `/proc/loadavg`'s runnable count is measured against.
  private let machineCPUs: Int
  /// Whether a PSI stall counts only with the runnable count over `machineCPUs + 1` (sign
  /// (a)); false for a process that may not run on every online CPU. (Read by tests.)
  let stallNeedsRunnableCount: Bool
  /// The process's CPU time so far, in ns (step 4); `getrusage` but in tests.
  private let processCPUTime: @Sendable () -> UInt64
  // Sample state: the holder of `sampling` only.
  /// Step 4's current window: its start, and the stall and own CPU time then.
  private var neighboursWindow: (at: UInt64, stall: UInt64, ownCPU: UInt64, busyTicks: UInt64)?
  /// The last window's verdict (the threshold of the next one depends on it).
  private var neighboursBelieved = false
  private var lastStall: UInt64?
  private var lastThrottled: UInt64?
  private var lastSampleAt: UInt64 = 0
  private let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: bufferSize)
  private static let bufferSize = 512

  /// A governor reading the given files (nil or unreadable: that sign is not used; without
  /// the load file, a pressure file's stall alone is pressure). `machineCPUs` defaults to
  /// the online CPUs; `stallNeedsRunnableCount` false lets a stall be pressure whatever the
  /// count (a process confined to some of the CPUs). `statPath` (`/proc/stat`) and
  /// `processCPUTime` (default `getrusage`) are step 4's.
  init(
    pressurePath: String?, loadPath: String?, throttlePath: String?, machineCPUs: Int? = nil,
    stallNeedsRunnableCount: Bool = true, statPath: String? = nil,
    processCPUTime: @escaping @Sendable () -> UInt64 = SpinGovernor.processCPUNanoseconds,
    enabled: Bool = true
  ) {
    isEnabled = enabled
    // Disabled: nothing is opened (nor ever read).
    pressureFD = enabled ? Self.openForReading(pressurePath) : -1
    loadFD = enabled ? Self.openForReading(loadPath) : -1
    throttleFD = enabled ? Self.openForReading(throttlePath) : -1
    statFD = enabled ? Self.openForReading(statPath) : -1
    self.machineCPUs = Swift.max(1, machineCPUs ?? Self.onlineCPUs)
    self.stallNeedsRunnableCount = stallNeedsRunnableCount
    self.processCPUTime = processCPUTime
  }

  deinit {
    for fd in [pressureFD, loadFD, throttleFD, statFD] where fd >= 0 { close(fd) }
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
      statPath: "/proc/stat",
      enabled: getenv("LOOPDISPATCH_SPIN_GOVERNOR").map { String(cString: $0) } != "0")
  }

  /// Whether spins should be short at `now` (`Deadline` nanoseconds); samples the files
  /// first when a sample is due. Called by a spinner at spin entry, and by the users named at
  /// `process`.
  @inline(__always)
  func isPressured(now: UInt64) -> Bool {
    #if DEBUG
      verdict(
        until: pressuredUntil, now: now, override: Self.testOverride.load(ordering: .relaxed))
    #else
      verdict(until: pressuredUntil, now: now)
    #endif
  }

  /// Whether `now` is before `until`, after a sample if one is due; an `override` of 1 or 2
  /// (a debug build's test switch) answers instead: yes or no.
  @inline(__always)
  private func verdict(until: borrowing Atomic<UInt64>, now: UInt64, override: Int = 0) -> Bool {
    switch override {
    case 1: return true
    case 2: return false
    default: break
    }
    guard isEnabled else { return false }
    if now >= nextSample.load(ordering: .relaxed) { sampleIfFree(now: now) }
    return now < until.load(ordering: .relaxed)
  }

  #if DEBUG
    /// Debug builds, for tests of the spin: 1 every spin is pressured, 2 none is, 0 the files
    /// and the clock decide. Atomic (relaxed: a switch).
    package static let testOverride = Atomic<Int>(0)
    /// Debug builds, for tests of `neighboursTakeCPU`: 1 true, 2 false, 0 the files decide.
    /// Starts from `LOOPDISPATCH_TEST_NEIGHBOURS` (for the C API's tests, which cannot set
    /// it). Atomic (relaxed: a switch).
    package static let neighboursOverride = Atomic<Int>(
      getenv("LOOPDISPATCH_TEST_NEIGHBOURS").flatMap { Int(String(cString: $0)) } ?? 0)
  #endif

  /// Whether other processes take CPUs this process could use now (step 4); samples the
  /// files first when a sample is due. For the C API's serial queues
  /// (`Queue.drainsOnOvercommitBesideNeighbours`), at each drain they schedule.
  @inline(__always)
  func neighboursTakeCPU(now: UInt64) -> Bool {
    #if DEBUG
      verdict(
        until: neighboursUntil, now: now,
        override: Self.neighboursOverride.load(ordering: .relaxed))
    #else
      verdict(until: neighboursUntil, now: now)
    #endif
  }

  /// Whether `neighboursTakeCPU` may say yes: false while no yes is held (none since the
  /// last one ran out at a sample). The C serial queues look at this first, at every drain
  /// they schedule, so that a process that never had neighbours reads no clock there (a
  /// vDSO `clock_gettime`, about 24 ns here); their belief is formed by the spinners'
  /// samples. Relaxed: a hint; a stale value costs one drain a clock read or sends it to
  /// the plain workers once.
  @inline(__always)
  var mayHaveNeighbours: Bool {
    #if DEBUG
      if Self.neighboursOverride.load(ordering: .relaxed) != 0 { return true }
    #endif
    return neighboursUntil.load(ordering: .relaxed) != 0
  }

  /// The process's CPU time (user + system, every thread) in ns.
  @Sendable static func processCPUNanoseconds() -> UInt64 {
    var usage = rusage()
    guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
    let microseconds =
      (Int64(usage.ru_utime.tv_sec) + Int64(usage.ru_stime.tv_sec)) * 1_000_000
      + Int64(usage.ru_utime.tv_usec) + Int64(usage.ru_stime.tv_usec)
    return UInt64(Swift.max(0, microseconds)) &* 1000
  }

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
    var neighbours = false
    if pressureFD >= 0, let stall = readNumber(pressureFD, after: "total=") {
      // µs of stall against ns of wall: stall * 1000 * divisor > elapsed.
      if let last = lastStall, stall > last,
        (stall - last) &* 1000 &* Self.stallShareDivisor > elapsed
      {
        // Confined to some CPUs, or the count unknown (no load file): the stall alone.
        sign = !stallNeedsRunnableCount || (moreRunnableThanCPUsPlusOne() ?? true)
      }
      lastStall = stall
      neighbours = neighboursWindowEnds(now: now, stall: stall)
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
    if neighbours {
      countSharedWrite(.spinGovernor)
      neighboursUntil.store(now &+ 2 &* Self.neighboursWindowNanoseconds, ordering: .relaxed)
    } else {
      // The yes ran out: back to no belief, so that the C serial queues stop reading the
      // clock at each drain (`mayHaveNeighbours`).
      let until = neighboursUntil.load(ordering: .relaxed)
      if until != 0 && now >= until {
        countSharedWrite(.spinGovernor)
        neighboursUntil.store(0, ordering: .relaxed)
      }
    }
  }

  /// Step 4's verdict when a window of at least `neighboursWindowNanoseconds` ends at this
  /// sample (false otherwise), and the next window starts. A window, not one sample's 10 ms:
  /// `/proc/stat` counts in 10 ms ticks. Sampler only.
  private func neighboursWindowEnds(now: UInt64, stall: UInt64) -> Bool {
    // Confined to some CPUs: the machine's busy time includes CPUs the process cannot use.
    guard stallNeedsRunnableCount else { return false }
    if let start = neighboursWindow, now &- start.at < Self.neighboursWindowNanoseconds {
      return false
    }
    guard let busyTicks = machineBusyTicks() else { return false }
    let ownCPU = processCPUTime()
    let start = neighboursWindow
    neighboursWindow = (now, stall, ownCPU, busyTicks)
    guard let start else { return false }
    let length = now &- start.at
    // Nothing sampled for four windows: a fresh start, believing nothing.
    guard length <= 4 &* Self.neighboursWindowNanoseconds, stall >= start.stall,
      ownCPU >= start.ownCPU, busyTicks >= start.busyTicks,
      (stall - start.stall) &* 1000 &* Self.stallShareDivisor > length,
      moreRunnableThanCPUsPlusOne() ?? false
    else {
      neighboursBelieved = false
      return false
    }
    // Others' CPU time: the machine's busy time less our own. Over a quarter of a CPU to
    // start believing in neighbours, over an eighth to go on: the drains given threads of
    // their own take some of the neighbours' share, and the verdict must not undo itself.
    // (A tick is 10 ms, a tenth of a CPU over a window: an eighth is more than one.)
    let busy = (busyTicks - start.busyTicks) &* Self.nanosecondsPerTick
    let own = ownCPU - start.ownCPU
    let others = busy > own ? busy - own : 0
    let verdict = others &* (neighboursBelieved ? 8 : 4) > length
    neighboursBelieved = verdict
    return verdict
  }

  /// The machine's busy CPU time so far, in clock ticks (`/proc/stat`'s first line: user,
  /// nice, system, irq and softirq), or nil without the file. Sampler only.
  private func machineBusyTicks() -> UInt64? {
    guard statFD >= 0 else { return nil }
    // Safe: `buffer` holds `bufferSize` bytes and belongs to the holder of `sampling`.
    let count = pread(statFD, buffer, Self.bufferSize, 0)
    guard count > 4 else { return nil }
    let bytes = UnsafeBufferPointer(start: buffer, count: count)
    // "cpu  user nice system idle iowait irq softirq steal ...": fields 0-2, 5 and 6.
    var busy: UInt64 = 0
    var field = 0
    var position = 3
    while field < 7 {
      while position < bytes.count && bytes[position] == 32 { position += 1 }
      guard let value = Self.decimal(in: bytes, at: &position) else { return nil }
      if field != 3 && field != 4 { busy &+= value }
      field += 1
    }
    return busy
  }

  /// The decimal number at `position` in `bytes`, which moves past its digits; nil without
  /// a digit there.
  private static func decimal(in bytes: UnsafeBufferPointer<UInt8>, at position: inout Int)
    -> UInt64?
  {
    var value: UInt64 = 0
    var digits = 0
    while position < bytes.count, bytes[position] >= 48, bytes[position] <= 57 {
      value = value &* 10 &+ UInt64(bytes[position] - 48)
      position += 1
      digits += 1
    }
    return digits > 0 ? value : nil
  }

  /// A clock tick of `/proc/stat` in ns (`_SC_CLK_TCK`, 100 a second on Linux).
  private static let nanosecondsPerTick: UInt64 = {
    let ticks = sysconf(Int32(_SC_CLK_TCK))
    return ticks > 0 ? 1_000_000_000 / UInt64(ticks) : 10_000_000
  }()

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
    return Self.decimal(in: bytes, at: &position)
  }

  /// How many of the four files the governor holds open (for tests).
  var openFiles: Int { [pressureFD, loadFD, throttleFD, statFD].filter { $0 >= 0 }.count }

  private static func openForReading(_ path: String?) -> Int32 {
    guard let path else { return -1 }
    return open(path, O_RDONLY | O_CLOEXEC)
  }
}
