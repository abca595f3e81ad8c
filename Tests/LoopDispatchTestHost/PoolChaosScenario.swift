import Glibc
import LoopDispatch
import Synchronization
import TestSupport

/// The pool under chaos mode (`PoolProbe`: random yields and short sleeps at every step of the
/// wake-up protocol) with 32–64 workers on however few cores: every job must run, and none
/// may wait longer than `boundSeconds` to start.
///
/// 1. `gateJobs` jobs block in the kernel (`poll` on a gate pipe) until the end, so the
///    supervisor must grow the pool past them (the cap is set to 64).
/// 2. Two threads off the pool submit units, keeping at most 16 each in flight, each unit one
///    of: a plain job; a fan-out (a job submits three to random lanes, from the pool); the
///    stranding pattern (a job submits Y to its own lane and Z to a random one, then blocks in
///    `poll` until Y has run); a pair that waits on a `Semaphore` (LoopDispatch's own wait).
/// 3. Once every unit is done the gate opens. Checks: every job ran once, no job waited
///    longer than the bound to start, no blocking wait timed out, and the pool reached 32
///    workers.
///
/// Sizes: 600 units by default (`make test`), 20,000 with LOOPDISPATCH_STRESS=full, times
/// LOOPDISPATCH_TEST_SCALE. Debug builds, or any build with `-D LOOPDISPATCH_CHAOS` (the
/// full-size release run); other builds print "skipped".
func poolChaosScenario() {
  #if DEBUG || LOOPDISPATCH_CHAOS
    // Before the pool starts: it reads the cap once.
    setenv("LOOPDISPATCH_MAX_THREADS", "64", 1)
    PoolProbe.enableChaos()
    let full = getenv("LOOPDISPATCH_STRESS").map { String(cString: $0) == "full" } ?? false
    let scale = getenv("LOOPDISPATCH_TEST_SCALE").flatMap { Double(String(cString: $0)) } ?? 1
    let units = Swift.max(100, Int(Double(full ? 20_000 : 600) * scale))
    let gateJobs = 34
    let boundSeconds = 5.0
    let chaos = ChaosTally()
    let gate = pipePair()

    let gateStarted = Group()
    let gateEnded = Group()
    for _ in 0..<gateJobs {
      let submitted = monotonicNanoseconds()
      gateStarted.enter()
      gateEnded.enter()
      Queue.global(.low).async {
        chaos.started(submittedAt: submitted)
        gateStarted.leave()
        if !waitReadable(gate.read, milliseconds: 600_000) { chaos.timedOut() }
        gateEnded.leave()
      }
    }
    // The gate jobs first: every one blocked means the pool grew to them all, and the units
    // need more workers still.
    if gateStarted.wait(timeout: .seconds(120)) != .success {
      fail("the pool grew to \(RuntimeStats.current.poolThreads) workers in 120 s")
    }

    let submitters = (0..<2).map { index in
      ChaosSubmitter(seed: UInt64(index) &* 0x9E37_79B9_7F4A_7C15 | 1, units: units / 2)
    }
    let threads = submitters.map { submitter in
      startThread { submitter.run(chaos) }
    }
    for thread in threads { pthread_join(thread, nil) }
    if chaos.units.wait(timeout: .seconds(120)) != .success {
      fail(
        "\(chaos.finishedCount) of \(chaos.expectedCount) unit jobs finished in 120 s: "
          + "\(RuntimeStats.current)")
    }
    let peakThreads = RuntimeStats.current.poolThreads
    writeByte(gate.write)
    if gateEnded.wait(timeout: .seconds(60)) != .success { fail("gate jobs never ended") }
    let worst = Double(chaos.worstStartNanoseconds) / 1e9
    print(
      "chaos: \(chaos.expectedCount + gateJobs) jobs ran, worst start \(worst) s, \(peakThreads) workers, "
        + "\(PoolProbe.perturbations.load(ordering: .relaxed)) perturbations")
    if chaos.startedCount != chaos.expectedCount + gateJobs {
      fail("\(chaos.startedCount) jobs started, \(chaos.expectedCount + gateJobs) submitted")
    }
    if chaos.timeouts > 0 { fail("\(chaos.timeouts) blocking waits timed out") }
    if worst > boundSeconds { fail("a job waited \(worst) s to start (bound \(boundSeconds) s)") }
    if peakThreads < 32 { fail("the pool reached only \(peakThreads) workers") }
  #else
    print("skipped: no pool probes in this build")
  #endif
}

#if DEBUG || LOOPDISPATCH_CHAOS
  /// The scenario's counts, shared by every job.
  private final class ChaosTally: Sendable {
    private let expected = Atomic<Int>(0)
    private let startedJobs = Atomic<Int>(0)
    private let finishedJobs = Atomic<Int>(0)
    private let timeoutCount = Atomic<Int>(0)
    private let worst = Atomic<UInt64>(0)

    /// Every unit job: entered at submission, left when it finishes.
    let units = Group()

    func expect(_ jobs: Int) {
      expected.wrappingAdd(jobs, ordering: .sequentiallyConsistent)
      for _ in 0..<jobs { units.enter() }
    }
    func timedOut() { timeoutCount.wrappingAdd(1, ordering: .sequentiallyConsistent) }
    func finished() {
      finishedJobs.wrappingAdd(1, ordering: .sequentiallyConsistent)
      units.leave()
    }

    /// A job starts: counts it and keeps the longest wait since submission.
    func started(submittedAt: UInt64) {
      startedJobs.wrappingAdd(1, ordering: .sequentiallyConsistent)
      let wait = monotonicNanoseconds() &- submittedAt
      var seen = worst.load(ordering: .relaxed)
      while wait > seen {
        let (exchanged, original) = worst.compareExchange(
          expected: seen, desired: wait, ordering: .relaxed)
        if exchanged { break }
        seen = original
      }
    }

    var expectedCount: Int { expected.load(ordering: .sequentiallyConsistent) }
    var startedCount: Int { startedJobs.load(ordering: .sequentiallyConsistent) }
    var finishedCount: Int { finishedJobs.load(ordering: .sequentiallyConsistent) }
    var timeouts: Int { timeoutCount.load(ordering: .sequentiallyConsistent) }
    var worstStartNanoseconds: UInt64 { worst.load(ordering: .relaxed) }
  }

  /// One submitting thread: its generator and its units in flight.
  private final class ChaosSubmitter: @unchecked Sendable {
    // @unchecked Sendable: `seed` is touched only by the submitting thread; `inFlight` is
    // atomic.
    private var seed: UInt64
    private let units: Int
    private let inFlight = Atomic<Int>(0)

    init(seed: UInt64, units: Int) {
      self.seed = seed
      self.units = units
    }

    private func next(_ bound: UInt64) -> UInt64 {
      seed ^= seed << 13
      seed ^= seed >> 7
      seed ^= seed << 17
      return seed % bound
    }

    func run(_ chaos: ChaosTally) {
      for _ in 0..<units {
        while inFlight.load(ordering: .sequentiallyConsistent) >= 16 { sched_yield() }
        inFlight.wrappingAdd(1, ordering: .sequentiallyConsistent)
        let lane = Priority(rawValue: Int(next(4)))!
        let other = Priority(rawValue: Int(next(4)))!
        let kind = next(4)
        let unitDone: @Sendable () -> Void = { [self] in
          inFlight.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        }
        submitUnit(kind: kind, lane: lane, other: other, chaos: chaos, done: unitDone)
      }
    }
  }

  /// Submits one unit of `kind` (see `poolChaosScenario`); `done` runs when its last job ends.
  private func submitUnit(
    kind: UInt64, lane: Priority, other: Priority, chaos: ChaosTally,
    done: @escaping @Sendable () -> Void
  ) {
    let submitted = monotonicNanoseconds()
    switch kind {
    case 0:
      chaos.expect(1)
      Queue.global(lane).async {
        chaos.started(submittedAt: submitted)
        chaos.finished()
        done()
      }
    case 1:
      chaos.expect(4)
      let left = Atomic<Int>(3)
      Queue.global(lane).async {
        chaos.started(submittedAt: submitted)
        for index in 0..<3 {
          let child = monotonicNanoseconds()
          Queue.global(index == 0 ? other : lane).async {
            chaos.started(submittedAt: child)
            chaos.finished()
            if left.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue == 0 { done() }
          }
        }
        chaos.finished()
      }
    case 2:
      chaos.expect(3)
      Queue.global(lane).async {
        chaos.started(submittedAt: submitted)
        let signal = pipePair()
        let inner = monotonicNanoseconds()
        Queue.global(lane).async {
          chaos.started(submittedAt: inner)
          writeByte(signal.write)
          chaos.finished()
        }
        Queue.global(other).async {
          chaos.started(submittedAt: inner)
          chaos.finished()
        }
        if !waitReadable(signal.read, milliseconds: 10_000) { chaos.timedOut() }
        close(signal.read)
        close(signal.write)
        chaos.finished()
        done()
      }
    default:
      chaos.expect(2)
      Queue.global(lane).async {
        chaos.started(submittedAt: submitted)
        let signal = Semaphore(value: 0)
        let inner = monotonicNanoseconds()
        Queue.global(other).async {
          chaos.started(submittedAt: inner)
          signal.signal()
          chaos.finished()
        }
        if signal.wait(timeout: .now + .seconds(10)) != .success { chaos.timedOut() }
        chaos.finished()
        done()
      }
    }
  }

#endif
