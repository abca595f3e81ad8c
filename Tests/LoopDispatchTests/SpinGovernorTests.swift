import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization
import Testing

@testable import LoopDispatch

/// `SpinGovernor` against made-up pressure, load and throttling files at chosen instants, and
/// the spin it governs on the shared pool.
@Suite(.serialized) struct SpinGovernorTests {
  /// A temporary file whose contents the test rewrites between samples.
  final class Scratch {
    let path: String

    init() {
      var template = Array("/tmp/ld-governor.XXXXXX".utf8CString)
      let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
      precondition(fd >= 0, "mkstemp failed")
      close(fd)
      path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// Replaces the contents in place (the governor keeps its descriptor open).
    func set(_ text: String) {
      let fd = open(path, O_WRONLY | O_TRUNC)
      precondition(fd >= 0, "cannot write \(path)")
      _ = text.withCString { write(fd, $0, strlen($0)) }
      close(fd)
    }

    deinit { unlink(path) }
  }

  static let millisecond: UInt64 = 1_000_000
  static let start: UInt64 = 1_000 * millisecond

  static func pressure(stall: UInt64) -> String {
    "some avg10=0.00 avg60=0.00 avg300=0.00 total=\(stall)\nfull avg10=0.00 avg60=0.00 "
      + "avg300=0.00 total=0\n"
  }

  @Test func stallAboveAFifthOfTheTimeIsPressureAndLastsTheHold() {
    let file = Scratch()
    file.set(Self.pressure(stall: 1_000))
    let governor = SpinGovernor(
      pressurePath: file.path, loadPath: nil, throttlePath: nil, machineCPUs: 2)
    #expect(!governor.isPressured(now: Self.start))  // First sample: nothing to compare.
    // 5 ms of stall in 10 ms: a half.
    file.set(Self.pressure(stall: 6_000))
    #expect(governor.isPressured(now: Self.start + 10 * Self.millisecond))
    // No more stall: still pressured within the hold (50 ms from the sign), not after it.
    #expect(governor.isPressured(now: Self.start + 40 * Self.millisecond))
    #expect(!governor.isPressured(now: Self.start + 61 * Self.millisecond))
    #expect(governor.signs.load(ordering: .relaxed) == 1)
  }

  @Test func littleStallIsNotPressure() {
    let file = Scratch()
    file.set(Self.pressure(stall: 0))
    let governor = SpinGovernor(
      pressurePath: file.path, loadPath: nil, throttlePath: nil, machineCPUs: 2)
    #expect(!governor.isPressured(now: Self.start))
    // 1.5 ms of stall in 10 ms: under a fifth.
    file.set(Self.pressure(stall: 1_500))
    #expect(!governor.isPressured(now: Self.start + 10 * Self.millisecond))
    #expect(governor.samples.load(ordering: .relaxed) == 2)
  }

  @Test func samplesComeAtMostOncePerInterval() {
    let file = Scratch()
    file.set(Self.pressure(stall: 0))
    let governor = SpinGovernor(
      pressurePath: file.path, loadPath: nil, throttlePath: nil, machineCPUs: 2)
    for step in 0..<100 { _ = governor.isPressured(now: Self.start + UInt64(step) * 100_000) }
    // 100 calls over 10 ms: the first samples, the next due at start + 10 ms is not reached.
    #expect(governor.samples.load(ordering: .relaxed) == 1)
    _ = governor.isPressured(now: Self.start + 10 * Self.millisecond)
    #expect(governor.samples.load(ordering: .relaxed) == 2)
  }

  @Test func aThrottledQuotaIsPressure() {
    let stat = Scratch()
    stat.set("nr_periods 10\nnr_throttled 3\nthrottled_time 500\n")
    let governor = SpinGovernor(
      pressurePath: nil, loadPath: nil, throttlePath: stat.path, machineCPUs: 1)
    #expect(!governor.isPressured(now: Self.start))
    stat.set("nr_periods 12\nnr_throttled 3\nthrottled_time 500\n")
    #expect(!governor.isPressured(now: Self.start + 10 * Self.millisecond))
    stat.set("nr_periods 14\nnr_throttled 4\nthrottled_time 900\n")
    #expect(governor.isPressured(now: Self.start + 20 * Self.millisecond))
  }

  /// A process whose own threads are one more than the CPUs (a producer, a worker and the
  /// spinner, on two) stalls itself about a half of the time: with the runnable count at the
  /// CPUs plus one, that stall is not pressure; one task more, and it is.
  @Test func stallWithAtMostOneTaskMoreThanTheCPUsIsNotPressure() {
    let file = Scratch()
    file.set(Self.pressure(stall: 0))
    let load = Scratch()
    load.set("2.90 2.10 1.80 3/97 24242\n")
    let governor = SpinGovernor(
      pressurePath: file.path, loadPath: load.path, throttlePath: nil, machineCPUs: 2)
    #expect(governor.openFiles == 2)
    #expect(!governor.isPressured(now: Self.start))
    // 5 ms of stall in 10 ms, 3 runnable tasks on 2 CPUs: our own.
    file.set(Self.pressure(stall: 5_000))
    #expect(!governor.isPressured(now: Self.start + 10 * Self.millisecond))
    // The same stall again, now with 4 runnable: someone waits beside the spinner.
    file.set(Self.pressure(stall: 10_000))
    load.set("3.40 2.20 1.80 4/98 24250\n")
    #expect(governor.isPressured(now: Self.start + 20 * Self.millisecond))
    // Many runnable tasks but almost no stall: not pressure (the count is one instant).
    file.set(Self.pressure(stall: 10_500))
    load.set("3.40 2.20 1.80 9/98 24250\n")
    #expect(!governor.isPressured(now: Self.start + 80 * Self.millisecond))
  }

  /// `/proc/stat`'s first line with `busy` ticks of user time (10 ms each) and no other.
  static func stat(busyTicks: UInt64) -> String {
    "cpu  \(busyTicks) 0 0 5000 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n"
  }

  /// Made-up files for step 4: a pressure file with no stall yet, `/proc/loadavg` counting 6
  /// runnable tasks (over the 2 CPUs + 1), and `/proc/stat` with no busy time yet.
  static func neighbourFiles() -> (pressure: Scratch, load: Scratch, stat: Scratch) {
    let pressure = Scratch()
    pressure.set(Self.pressure(stall: 0))
    let load = Scratch()
    load.set("6.00 2.10 1.80 6/97 24242\n")
    let stat = Scratch()
    stat.set(Self.stat(busyTicks: 0))
    return (pressure, load, stat)
  }

  /// Step 4: others' CPU time (the machine's busy time less the process's own) over a
  /// quarter of a CPU through a 100 ms window in which the stall and the count said so is
  /// neighbours; once believed, over an eighth goes on, and less does not. A process that
  /// oversubscribes the machine by itself (busy time all its own) is never taken for one,
  /// and a window that nothing sampled for long starts again believing nothing.
  @Test func othersCPUTimeBesideAStallIsNeighbours() {
    let (file, load, stat) = Self.neighbourFiles()
    let own = Atomic<UInt64>(0)
    let governor = SpinGovernor(
      pressurePath: file.path, loadPath: load.path, throttlePath: nil, machineCPUs: 2,
      statPath: stat.path, processCPUTime: { own.load(ordering: .relaxed) })
    #expect(governor.openFiles == 3)
    // No belief yet: the serial queues read no clock.
    #expect(!governor.mayHaveNeighbours)
    let length = SpinGovernor.neighboursWindowNanoseconds
    var now = Self.start
    var stall: UInt64 = 0
    var busy: UInt64 = 0
    /// One more window (after `gap` ns with no sample): a half of it stalled, both CPUs
    /// busy, `ours` CPUs of it ours.
    func window(ours: Double, gap: UInt64 = 0) -> Bool {
      now += gap + length
      stall += (gap + length) / 2_000
      busy += 2 * (gap + length) / 10_000_000
      own.add(UInt64(Double(gap + length) * ours), ordering: .relaxed)
      file.set(Self.pressure(stall: stall))
      stat.set(Self.stat(busyTicks: busy))
      return governor.neighboursTakeCPU(now: now)
    }
    #expect(!governor.neighboursTakeCPU(now: now))  // The first window starts.
    // Our own threads hold both CPUs: not neighbours.
    #expect(!window(ours: 2.0))
    #expect(!window(ours: 1.95))
    // Others take a half of a CPU: neighbours.
    #expect(window(ours: 1.5))
    #expect(governor.mayHaveNeighbours)
    // Our drains take more of the CPUs, others keep 0.15 of one: still believed.
    #expect(window(ours: 1.85))
    // Others gone: that window's verdict is no, but the last yes holds for two windows.
    #expect(window(ours: 2.0))
    #expect(!window(ours: 2.0))
    // The yes ran out at that sample: no belief again.
    #expect(!governor.mayHaveNeighbours)
    // 0.15 of a CPU does not start the belief again.
    #expect(!window(ours: 1.85))
    // Believed again, then 0.10 of a CPU: no (the yes before it still holds), so that 0.15
    // then no longer goes on.
    #expect(window(ours: 1.5))
    #expect(window(ours: 1.9))
    #expect(!window(ours: 1.85))
    // Believed, then nothing sampled for five windows: the late window gives no verdict
    // and forgets the belief, so that 0.15 of a CPU right after it is not enough.
    #expect(window(ours: 1.5))
    #expect(!window(ours: 1.5, gap: 5 * length))
    #expect(!window(ours: 1.85))
    // Others' CPU time without the runnable count over the CPUs + 1: not neighbours.
    load.set("1.00 2.10 1.80 2/97 24242\n")
    #expect(!window(ours: 1.0))
  }

  /// A process confined to some of the CPUs never hears of neighbours from step 4: the busy
  /// time of `/proc/stat` is the whole machine's, CPUs it cannot use included.
  @Test func aProcessConfinedToSomeCPUsIsNeverToldOfNeighbours() {
    let (file, load, stat) = Self.neighbourFiles()
    let governor = SpinGovernor(
      pressurePath: file.path, loadPath: load.path, throttlePath: nil, machineCPUs: 2,
      stallNeedsRunnableCount: false, statPath: stat.path, processCPUTime: { 0 })
    #expect(!governor.neighboursTakeCPU(now: Self.start))
    // A window with the stall, the count and both CPUs busy, none of it ours.
    let length = SpinGovernor.neighboursWindowNanoseconds
    file.set(Self.pressure(stall: length / 2_000))
    stat.set(Self.stat(busyTicks: 2 * length / 10_000_000))
    #expect(!governor.neighboursTakeCPU(now: Self.start + length))
    // The stall alone still shortens spins there (sign (a)).
    #expect(governor.isPressured(now: Self.start + length + 1))
  }

  /// A process confined to some of the CPUs (`stallNeedsRunnableCount` false) goes by the
  /// stall alone: the machine-wide count would hide its few busy CPUs among idle ones.
  @Test func aProcessConfinedToSomeCPUsGoesByTheStallAlone() {
    let file = Scratch()
    file.set(Self.pressure(stall: 0))
    let load = Scratch()
    load.set("2.90 2.10 1.80 3/97 24242\n")
    let governor = SpinGovernor(
      pressurePath: file.path, loadPath: load.path, throttlePath: nil, machineCPUs: 64,
      stallNeedsRunnableCount: false)
    #expect(!governor.isPressured(now: Self.start))
    file.set(Self.pressure(stall: 5_000))
    #expect(governor.isPressured(now: Self.start + 10 * Self.millisecond))
  }

  @Test func withoutPressureFilesMoreRunnableTasksThanCPUsPlusOneIsPressure() {
    let load = Scratch()
    load.set("0.20 1.04 2.33 2/94 24242\n")
    let governor = SpinGovernor(
      pressurePath: "/nonexistent/cpu.pressure", loadPath: load.path, throttlePath: nil,
      machineCPUs: 2)
    #expect(!governor.isPressured(now: Self.start))
    // Three runnable on two CPUs: the spinner and one more, not pressure.
    load.set("2.10 1.04 2.33 3/95 24245\n")
    #expect(!governor.isPressured(now: Self.start + 10 * Self.millisecond))
    load.set("3.10 1.50 2.33 5/97 24250\n")
    #expect(governor.isPressured(now: Self.start + 20 * Self.millisecond))
  }

  @Test func aPreemptedSpinIsPressureForTheHold() {
    let governor = SpinGovernor(pressurePath: nil, loadPath: nil, throttlePath: nil, machineCPUs: 2)
    #expect(!governor.isPressured(now: Self.start))
    governor.notePreempted(now: Self.start + Self.millisecond)
    #expect(governor.isPressured(now: Self.start + 2 * Self.millisecond))
    #expect(!governor.isPressured(now: Self.start + 52 * Self.millisecond))
  }

  @Test func aDisabledGovernorNeverShortensSpins() {
    let file = Scratch()
    file.set(Self.pressure(stall: 0))
    let governor = SpinGovernor(
      pressurePath: file.path, loadPath: nil, throttlePath: nil, machineCPUs: 2, enabled: false)
    #expect(!governor.isPressured(now: Self.start))
    file.set(Self.pressure(stall: 9_000))  // 9 ms of stall in 10 ms.
    #expect(!governor.isPressured(now: Self.start + 10 * Self.millisecond))
    #expect(governor.samples.load(ordering: .relaxed) == 0)
    #expect(governor.openFiles == 0)
    let enabled = SpinGovernor(
      pressurePath: file.path, loadPath: nil, throttlePath: nil, machineCPUs: 2)
    #expect(enabled.openFiles == 1)
  }

  /// The process's governor asks for the runnable count only when the process may run on
  /// every online CPU: with an affinity mask that leaves some out, the machine-wide count
  /// says nothing about the CPUs it has.
  @Test func theProcessGovernorGoesByTheStallAloneWhenConfinedToSomeCPUs() {
    let online = SpinGovernor.onlineCPUs
    let everyCPU = CPUBudget(cpus: online, source: .affinity, affinityCPUs: online)
    #expect(SpinGovernor.forProcess(budget: everyCPU).stallNeedsRunnableCount)
    if online > 1 {
      let confined = CPUBudget(cpus: 1, source: .affinity, affinityCPUs: 1)
      #expect(!SpinGovernor.forProcess(budget: confined).stallNeedsRunnableCount)
    }
  }

  @Test func theProcessGovernorReadsThisMachinesFiles() {
    // Whatever the load, a sample of the real files completes and is counted.
    let governor = SpinGovernor.forProcess(budget: WorkerPool.shared.budget)
    _ = governor.isPressured(now: Deadline.now.uptimeNanoseconds)
    #expect(governor.samples.load(ordering: .relaxed) == 1)
  }

  #if DEBUG
    // Debug builds only: the spin's checks are seen through `PoolProbe`, and the pressure is
    // forced with `SpinGovernor.testOverride`, both debug-only.
    /// The spins (checks between two parks or takes, per thread) over `rounds` single jobs
    /// on the shared pool, each followed by a park (the worker that ran it spins, finds
    /// nothing and parks, unless other work arrives), in the order they ended. `perturb`
    /// runs at every check, with the check's number in its spin.
    static func spins(rounds: Int, perturb: (@Sendable (Int) -> Void)? = nil) -> [Int] {
      withPoolProbeHookTurn { spinsHoldingTheHook(rounds: rounds, perturb: perturb) }
    }

    /// `spins`, holding the turn to set `PoolProbe`'s hook.
    private static func spinsHoldingTheHook(
      rounds: Int, perturb: (@Sendable (Int) -> Void)?
    ) -> [Int] {
      let counts = LockedCounts()
      let parked = Semaphore(value: 0)
      PoolProbe.setHook(for: [.spin, .park, .take]) { step in
        let tid = Int(Syscall.currentThreadID)
        guard step == .spin else {
          counts.finish(tid)
          if step == .park { parked.signal() }
          return
        }
        // Counted first: `perturb?(…)` would not evaluate its argument when nil.
        let checks = counts.increment(tid)
        perturb?(checks)
      }
      defer { PoolProbe.setHook(for: [], nil) }
      for _ in 0..<rounds {
        let done = Semaphore(value: 0)
        Queue.global().async { done.signal() }
        done.wait()
        // A park, so some spin ran to its end (a park of another worker, or an earlier one,
        // may stand in for it).
        parked.wait()
      }
      return counts.finished
    }

    @Test func aPressuredMachineGetsShortSpins() {
      SpinGovernor.testOverride.store(1, ordering: .relaxed)
      defer { SpinGovernor.testOverride.store(0, ordering: .relaxed) }
      let spins = Self.spins(rounds: 40)
      #expect(!spins.isEmpty)
      #expect(spins.allSatisfy { $0 <= WorkerPool.pressuredSpinLimit })
    }

    @Test func aCalmMachineSpinsLonger() {
      SpinGovernor.testOverride.store(2, ordering: .relaxed)
      defer { SpinGovernor.testOverride.store(0, ordering: .relaxed) }
      // A spin ends early only when it finds work or is preempted; over 40 rounds one at least
      // runs past the pressured limit. Beside other suites under ThreadSanitizer, their jobs
      // ended all 40 spins early once: more batches of 40, for up to 30 s, while none did.
      var longest = 0
      let giveUp = Deadline.now + .seconds(30)
      repeat {
        longest = Swift.max(longest, Self.spins(rounds: 40).max() ?? 0)
      } while longest <= WorkerPool.pressuredSpinLimit && Deadline.now < giveUp
      #expect(longest > WorkerPool.pressuredSpinLimit, "the longest spin made \(longest) checks")
    }

    @Test func aSpinThatLosesItsCPUEndsAndCountsASign() {
      // Calm (the override), so that only the time jump can cut a spin: a sign would
      // otherwise make every later spin short by itself.
      SpinGovernor.testOverride.store(2, ordering: .relaxed)
      defer { SpinGovernor.testOverride.store(0, ordering: .relaxed) }
      let governor = WorkerPool.shared.spinGovernor
      let before = governor.signs.load(ordering: .relaxed)
      // The 20th check sleeps 5 ms, as if the kernel ran something else: the clock
      // reading after check 32 sees the jump (against the pace of the first 16) and ends
      // the spin there. (A spin whose own first 16 checks were preempted for longer has a
      // slow pace and may miss it: most spins, not all, are asserted.)
      // Batches of 20 rounds until 8 spins reached the sleep (at most 5 batches): "most" of
      // two spins was one run's whole sample under AddressSanitizer beside other suites,
      // and one slow pace out of two failed it. While no spin at all has reached the sleep,
      // more batches, for up to 60 s: under ThreadSanitizer beside the other suites, whose
      // jobs end spins before their 20th check, all 100 spins of five batches once did not.
      var spins: [Int] = []
      var batches = 0
      let giveUp = Deadline.now + .seconds(60)
      while true {
        let reached = spins.filter { $0 >= 20 }.count
        if reached >= 8 || (batches >= 5 && (reached > 0 || Deadline.now >= giveUp)) { break }
        spins += Self.spins(rounds: 20) { check in if check == 20 { usleep(5_000) } }
        batches += 1
      }
      let reachedTheSleep = spins.filter { $0 >= 20 }
      let cut = reachedTheSleep.filter { $0 <= 32 }
      #expect(
        !reachedTheSleep.isEmpty,
        "no spin of \(spins.count) in \(batches) batches reached the sleep")
      #expect(
        cut.count * 2 > reachedTheSleep.count, "spins that reached the sleep: \(reachedTheSleep)")
      // A spin cut by the jump ends at exactly 32 checks and counts a sign. (Beside other
      // suites a spin may instead find their work during its sleep and end before 32,
      // counting none: the sign is asserted only when a spin ended at the reading.)
      if spins.contains(32) { #expect(governor.signs.load(ordering: .relaxed) > before) }
    }
  #endif
}

#if DEBUG
  /// Per-thread check counts for the spin hook (called on pool threads), and the lengths of
  /// the spins that ended.
  final class LockedCounts: Sendable {
    private let counts = LockedValue<[Int: Int]>([:])
    private let ended = LockedValue<[Int]>([])

    func increment(_ key: Int) -> Int {
      counts.withLock { table in
        table[key, default: 0] += 1
        return table[key]!
      }
    }

    /// Ends the thread's current spin (if it had checks), recording its length.
    func finish(_ key: Int) {
      ended.withLock { list in
        if let checks = counts.withLock({ $0.removeValue(forKey: key) }), checks > 0 {
          list.append(checks)
        }
      }
    }

    /// The lengths of the spins that ended, in order.
    var finished: [Int] { ended.withLock { $0 } }
  }
#endif
