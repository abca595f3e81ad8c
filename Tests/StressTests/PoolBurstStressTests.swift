import Glibc
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

extension Stress {
  /// Issue 8, "Faults": a burst of a million submissions while the pool is saturated is held
  /// in memory without unbounded thread creation.
  ///
  /// Each test runs in a child process of its own (an exit test), as `PoolTests` do: the
  /// checks are about the process-wide pool (its thread count and growth counter), which
  /// suites running in parallel in the test process could occupy or grow; a fresh pool has
  /// exactly its base workers, so "every worker" is known; and a cap can be set before the
  /// pool starts. The child prints its `StressMeter` line, its figures and a line per failed
  /// check; the parent relays the output and records each failed check as an issue.
  @Suite struct PoolBurst {
    /// Every worker spins (runnable, never blocked): the burst waits in the lanes, complete,
    /// and the supervisor, which only grows the pool when workers are blocked, adds no thread
    /// however many times it looks.
    @Test func aBurstOnSpinningWorkersIsHeldWithoutAddingAThread() async {
      let result = await #expect(processExitsWith: .success, observing: observed) {
        runScenario(burstOnSpinningWorkers)
      }
      relay(result)
    }

    /// Every worker is blocked in read(2): the pool grows so that the burst runs while they
    /// stay blocked, by a few workers (about one per CPU), and stays under its cap.
    @Test func aBurstOnBlockedWorkersRunsOnAFewAddedWorkersUnderTheCap() async {
      let result = await #expect(processExitsWith: .success, observing: observed) {
        runScenario(burstOnBlockedWorkers)
      }
      relay(result)
    }

    /// The pool is at its cap (set low, before the pool starts) and every worker is blocked:
    /// the whole burst waits in the lanes and the supervisor, though it sees blocked workers
    /// and waiting work on every tick, starts no thread beyond the cap.
    @Test func aBurstOnAPoolBlockedAtItsCapIsHeldWithoutAThreadBeyondTheCap() async {
      let result = await #expect(processExitsWith: .success, observing: observed) {
        runScenario(burstOnAPoolBlockedAtItsCap)
      }
      relay(result)
    }
  }
}

/// What the parent reads back from each child: its standard output (its standard error
/// holds a few bytes of the testing library's own).
private let observed: [any PartialKeyPath<ExitTest.Result> & Sendable] = [
  \.standardOutputContent
]

/// The prefix of a failed check's line in the child's output.
private let failurePrefix = "pool burst check failed: "

/// The child's last line when its scenario ran to the end.
private let finishedLine = "pool burst scenario finished"

/// Threads that submit the burst, the test's own thread included.
private let producers = 4

/// Workers the supervisor may add beside one per CPU. A worker is registered with the
/// supervisor before its thread starts (`WorkerPool.spawnWorker`) and counts as not blocked
/// until it has taken a job, so an added worker the kernel has not run yet stops further
/// growth by itself. What can still add one: a tick at which an added worker, inside a job,
/// is asleep on the pool's contended lock (the four producers take it too), which `/proc`
/// shows as blocked. Growth needs a whole tick with no job started, so that is rare: one
/// worker added in each of three runs at a fiftieth of full size on two CPUs (2 → 3
/// threads). Four is kept as margin for loaded machines; a pool that grew on every tick while
/// work waits would pass the bound within 40 ms, and the full-size burst lasts over a second.
private let startupSlack = 4

/// Supervisor ticks (5 ms each) that must pass with the burst waiting and every worker
/// occupied before the thread count is checked: each is a chance for the supervisor to grow
/// the pool, so a pool that grew when it must not would show it.
private let supervisorTicks = 20

// MARK: - Scenarios (run in the child process)

/// Every worker spins on an atomic flag, so it stays runnable; the burst is submitted from
/// `producers` threads while they spin.
private func burstOnSpinningWorkers(_ checks: inout Checks) {
  let before = RuntimeStats.current
  let base = WorkerPool.shared.baseThreads
  checks.expect(before.poolThreads == base, "a fresh pool has \(before.poolThreads) threads")
  let spinners = Occupiers(.spinning, count: before.poolThreads)
  spinners.submit()
  guard checks.expect(spinners.waitUntilAllStarted(), "the spinners did not all start") else {
    return
  }
  let occupied = RuntimeStats.current
  checks.expect(
    occupied.parkedWorkers == 0 && occupied.pendingJobs == 0,
    "not every worker is occupied: \(occupied.parkedWorkers) parked,"
      + " \(occupied.pendingJobs) pending")

  let burst = Burst(total: stressSize(1_000_000))
  let meter = StressMeter(
    "pool burst on spinning workers (\(spinners.count) spinning, \(producers) producers)")
  let submitted = burst.submit()
  // Every worker is inside a spinner, so no item can have started: all are in the lanes.
  let held = RuntimeStats.current
  checks.expect(
    held.pendingJobs == burst.total && burst.ran == 0,
    "with every worker spinning, \(held.pendingJobs) of \(burst.total) items wait and"
      + " \(burst.ran) ran")
  checks.expect(
    waitForSupervisorTicks(supervisorTicks), "the supervisor did not tick while work waited")
  let saturated = RuntimeStats.current
  checks.expect(
    saturated.poolThreads == before.poolThreads
      && saturated.poolGrowthEvents == before.poolGrowthEvents,
    "the pool grew while its workers were busy, not blocked: \(before.poolThreads) →"
      + " \(saturated.poolThreads) threads, \(saturated.poolGrowthEvents - before.poolGrowthEvents)"
      + " growth events")

  let released = Deadline.now
  guard checks.expect(spinners.release(), "the spinners did not all return") else { return }
  guard checks.expect(burst.waitUntilDrained(), "\(burst.ran) of \(burst.total) items ran")
  else { return }
  let drained = seconds(Deadline.now - released)
  meter.finish(items: burst.total)
  let after = RuntimeStats.current
  print(
    "stress pool burst on spinning workers: submitted in \(format(submitted, 3)) s, drained in"
      + " \(format(drained, 3)) s after release; pool threads \(before.poolThreads) →"
      + " \(saturated.poolThreads) while saturated → \(after.poolThreads) after; growth events"
      + " while draining \(after.poolGrowthEvents - saturated.poolGrowthEvents)")
  burst.checkEveryItemRanOnce(&checks)
  checks.expect(after.pendingJobs == 0, "\(after.pendingJobs) jobs still pending")
}

/// Every worker is blocked in read(2) on a pipe; the burst must drain while they stay
/// blocked, on workers the supervisor adds.
///
/// The bound on growth: the supervisor adds a worker only after a tick in which no job
/// started, when every worker it knows is inside a job and fewer than one per CPU
/// (`baseThreads`) are runnable. The burst's items never block, so an added worker is
/// runnable whenever it is inside a job, and a worker between jobs stops the check: once
/// `baseThreads` added workers are running, none more can be added. Usually one is enough
/// (an added worker that keeps starting items stops the check); a second comes when it is
/// preempted for a whole tick. Beyond that, `startupSlack` (a worker seen asleep on the pool's
/// own lock; see its comment). The cap is the hard limit, whatever the scheduling.
private func burstOnBlockedWorkers(_ checks: inout Checks) {
  let before = RuntimeStats.current
  let base = WorkerPool.shared.baseThreads
  let cap = WorkerPool.shared.maximumThreads
  checks.expect(before.poolThreads == base, "a fresh pool has \(before.poolThreads) threads")
  guard checks.expect(cap > base, "LOOPDISPATCH_MAX_THREADS=\(cap) leaves the pool no room") else {
    return
  }
  let blocked = Occupiers(.blocked, count: before.poolThreads)
  blocked.submit()
  guard checks.expect(blocked.waitUntilAllStarted(), "the blocked jobs did not all start") else {
    return
  }

  let burst = Burst(total: stressSize(1_000_000))
  let meter = StressMeter(
    "pool burst on blocked workers (\(blocked.count) blocked, \(producers) producers)")
  let submitted = burst.submit()
  // The workers stay blocked until `release`: the items can only run on added workers.
  guard
    checks.expect(
      burst.waitUntilDrained(),
      "\(burst.ran) of \(burst.total) items ran while \(blocked.count) workers were blocked")
  else { return }
  meter.finish(items: burst.total)
  let grown = RuntimeStats.current
  let added = Int(grown.poolGrowthEvents - before.poolGrowthEvents)
  print(
    "stress pool burst on blocked workers: submitted in \(format(submitted, 3)) s; pool threads"
      + " \(before.poolThreads) → \(grown.poolThreads) (\(added) added; bound"
      + " \(blocked.count + base + startupSlack), cap \(cap))")
  checks.expect(added >= 1, "the burst drained on blocked workers without the pool growing")
  checks.expect(
    added <= base + startupSlack && grown.poolThreads <= blocked.count + base + startupSlack,
    "the pool grew by \(added) to \(grown.poolThreads) threads; at most \(base) (one per CPU)"
      + " and \(startupSlack) more may be added beside \(blocked.count) blocked"
      + " workers")
  checks.expect(
    before.poolThreads + added <= cap && grown.poolThreads <= cap,
    "the pool reached \(before.poolThreads + added) threads, above its cap of \(cap)")

  guard checks.expect(blocked.release(), "the blocked jobs did not all return") else { return }
  burst.checkEveryItemRanOnce(&checks)
  let after = RuntimeStats.current
  checks.expect(after.pendingJobs == 0, "\(after.pendingJobs) jobs still pending")
}

/// The cap is set to two threads beyond the CPUs before the pool starts; as many jobs as the
/// cap block in read(2), so the pool grows to the cap and every worker is blocked; then the
/// whole burst waits in the lanes while the supervisor sees stalled, blocked workers.
private func burstOnAPoolBlockedAtItsCap(_ checks: inout Checks) {
  let requestedCap = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))) + 2
  setenv("LOOPDISPATCH_MAX_THREADS", "\(requestedCap)", 1)  // Before the pool starts.
  let before = RuntimeStats.current
  let base = WorkerPool.shared.baseThreads
  let cap = WorkerPool.shared.maximumThreads
  checks.expect(before.poolThreads == base, "a fresh pool has \(before.poolThreads) threads")
  guard checks.expect(cap == requestedCap && cap > base, "the cap is \(cap), not \(requestedCap)")
  else { return }
  let blocked = Occupiers(.blocked, count: cap)
  blocked.submit()
  // The first `base` start at once; the pool grows to the cap for the rest.
  guard checks.expect(blocked.waitUntilAllStarted(), "the blocked jobs did not all start") else {
    return
  }
  let full = RuntimeStats.current
  checks.expect(
    full.poolThreads == cap && Int(full.poolGrowthEvents - before.poolGrowthEvents) == cap - base,
    "\(full.poolThreads) threads after \(full.poolGrowthEvents) growth events at a cap of \(cap)")

  let burst = Burst(total: stressSize(1_000_000))
  let meter = StressMeter(
    "pool burst on a pool blocked at its cap (\(cap) blocked, \(producers) producers)")
  let submitted = burst.submit()
  let held = RuntimeStats.current
  checks.expect(
    held.pendingJobs == burst.total && burst.ran == 0,
    "with every worker blocked, \(held.pendingJobs) of \(burst.total) items wait and"
      + " \(burst.ran) ran")
  checks.expect(
    waitForSupervisorTicks(supervisorTicks), "the supervisor did not tick while work waited")
  let saturated = RuntimeStats.current
  checks.expect(
    saturated.poolThreads == cap && saturated.poolGrowthEvents == full.poolGrowthEvents,
    "the pool grew beyond its cap of \(cap): \(saturated.poolThreads) threads,"
      + " \(saturated.poolGrowthEvents - full.poolGrowthEvents) more growth events")

  let released = Deadline.now
  guard checks.expect(blocked.release(), "the blocked jobs did not all return") else { return }
  guard checks.expect(burst.waitUntilDrained(), "\(burst.ran) of \(burst.total) items ran")
  else { return }
  let drained = seconds(Deadline.now - released)
  meter.finish(items: burst.total)
  print(
    "stress pool burst on a pool blocked at its cap: submitted in \(format(submitted, 3)) s,"
      + " drained in \(format(drained, 3)) s after release; pool threads \(saturated.poolThreads)"
      + " (cap \(cap)) with \(held.pendingJobs) items held")
  burst.checkEveryItemRanOnce(&checks)
  let after = RuntimeStats.current
  checks.expect(after.pendingJobs == 0, "\(after.pendingJobs) jobs still pending")
}

// MARK: - Child and parent plumbing

/// The failed checks of one scenario.
private struct Checks {
  var failures: [String] = []

  /// Records `message` unless `condition` holds; returns `condition`.
  @discardableResult
  mutating func expect(_ condition: Bool, _ message: @autoclosure () -> String) -> Bool {
    if !condition { failures.append(message()) }
    return condition
  }
}

/// Runs `scenario` in the exit test's child, prints a line per failed check and a last line
/// saying it finished, and exits with 0.
///
/// Failed checks do not change the exit status: `#expect(processExitsWith:)` returns the
/// child's output only when the status matches, and the parent needs it to record them. A
/// crash (a precondition, a sanitizer report) still fails the parent's expectation.
private func runScenario(_ scenario: (inout Checks) -> Void) -> Never {
  var checks = Checks()
  scenario(&checks)
  for failure in checks.failures { print(failurePrefix + failure) }
  print(finishedLine)
  fflush(nil)
  exit(EXIT_SUCCESS)
}

/// Prints the child's output and records each check it reported failed, or an issue if it
/// did not finish (the exit status itself is checked by `#expect`), at the caller's line.
private func relay(
  _ result: ExitTest.Result?, sourceLocation: SourceLocation = #_sourceLocation
) {
  guard let result else { return }
  let lines = String(decoding: result.standardOutputContent, as: UTF8.self).split(
    separator: "\n", omittingEmptySubsequences: false)
  for line in lines where !line.isEmpty && line != finishedLine { print(line) }
  fflush(nil)
  for line in lines where line.hasPrefix(failurePrefix) {
    Issue.record(
      Comment(rawValue: String(line.dropFirst(failurePrefix.count))),
      sourceLocation: sourceLocation)
  }
  if !lines.contains(where: { $0 == finishedLine }) {
    Issue.record("the scenario exited without finishing", sourceLocation: sourceLocation)
  }
}

// MARK: - The burst and the occupying jobs

/// The burst: `total` tiny closures on the default global queue, each counting its own run.
///
/// Thread-safety: any thread; the counters are atomic and `drained` orders every item's
/// increment before the reads that follow `waitUntilDrained`.
private final class Burst: Sendable {
  let total: Int
  private let runs: AtomicCounters
  private let runCount = Counter()
  private let drained = Latch()

  init(total: Int) {
    self.total = total
    runs = AtomicCounters(count: total)
  }

  /// Items that have run so far.
  var ran: Int { runCount.current }

  /// Submits every item, from the calling thread and `producers - 1` threads of its own (item
  /// `i` from producer `i % producers`); returns when all are submitted, with the seconds it
  /// took.
  func submit() -> Double {
    let start = Deadline.now
    let threads = (1..<producers).map { producer in
      startThread { [self] in submit(from: producer) }
    }
    submit(from: 0)
    for thread in threads { pthread_join(thread, nil) }
    return seconds(Deadline.now - start)
  }

  private func submit(from producer: Int) {
    for index in stride(from: producer, to: total, by: producers) {
      // The closure holds two words (`self` and `index`): a small allocation per item held.
      Queue.global().async { [self] in run(index) }
    }
  }

  private func run(_ index: Int) {
    runs.increment(index)
    if runCount.increment() == total { drained.open() }
  }

  /// Whether every item ran within a minute.
  func waitUntilDrained() -> Bool { drained.wait(seconds: 60) }

  /// Checks that each item ran exactly once. Call after `waitUntilDrained` succeeded.
  func checkEveryItemRanOnce(_ checks: inout Checks) {
    let histogram = runs.histogram(0..<total)
    let counts = histogram.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
      .joined(separator: ", ")
    checks.expect(
      histogram == [1: total] && ran == total,
      "runs per item → items: [\(counts)], \(ran) runs in all")
  }
}

/// Jobs that each occupy a pool worker until `release`: spinning on an atomic flag with a CPU
/// relax hint (the worker stays runnable) or blocked in read(2) on a pipe (the worker sleeps
/// in the kernel).
///
/// Thread-safety: any thread; the flag and counters are atomic, the pipe is the kernel's.
private final class Occupiers: Sendable {
  enum Hold: Sendable {
    case spinning
    case blocked
  }

  let hold: Hold
  let count: Int
  private let started = Counter()
  private let allStarted = Latch()
  private let finished = Counter()
  private let allFinished = Latch()
  /// Atomic. Set by `release` to end the spinners.
  private let released = Atomic<Bool>(false)
  /// The blocked jobs read one byte each from `readEnd`; `release` writes `count`.
  private let readEnd: Int32
  private let writeEnd: Int32

  init(_ hold: Hold, count: Int) {
    self.hold = hold
    self.count = count
    var ends: [Int32] = [-1, -1]
    precondition(pipe(&ends) == 0, "pipe failed: errno \(errno)")
    readEnd = ends[0]
    writeEnd = ends[1]
  }

  deinit {
    close(readEnd)
    close(writeEnd)
  }

  /// Submits the `count` jobs to the default global queue.
  func submit() {
    for _ in 0..<count { Queue.global().async { [self] in occupy() } }
  }

  private func occupy() {
    if started.increment() == count { allStarted.open() }
    switch hold {
    case .spinning:
      while !released.load(ordering: .acquiring) { spinLoopHint() }
    case .blocked:
      var byte: UInt8 = 0
      while read(readEnd, &byte, 1) < 0 && errno == EINTR {}
    }
    if finished.increment() == count { allFinished.open() }
  }

  /// Whether every job started (so occupies a worker) within a minute.
  func waitUntilAllStarted() -> Bool { allStarted.wait(seconds: 60) }

  /// Ends every job; returns whether all returned within a minute.
  func release() -> Bool {
    switch hold {
    case .spinning:
      released.store(true, ordering: .releasing)
    case .blocked:
      let bytes = [UInt8](repeating: 0, count: count)
      precondition(write(writeEnd, bytes, count) == count, "write failed: errno \(errno)")
    }
    return allFinished.wait(seconds: 60)
  }
}

// MARK: - Watching the supervisor

/// Waits until the pool supervisor has slept and woken `ticks` times more (its voluntary
/// context switches, from /proc: one per 5 ms tick while work waits). Returns false if it
/// cannot be found, if the lanes empty (it then sleeps until the next submission) or if it
/// does not tick within a minute.
private func waitForSupervisorTicks(_ ticks: Int) -> Bool {
  guard let tid = threadID(named: "ld.supervisor"),
    let first = taskStatusField(tid, "voluntary_ctxt_switches")
  else { return false }
  let start = Deadline.now
  while let now = taskStatusField(tid, "voluntary_ctxt_switches"), now < first + ticks {
    if WorkerPool.shared.queuedJobCount == 0
      || Deadline.now - start > .seconds(60)
    {
      return false
    }
    // A poll period, not synchronisation: the loop ends on the counted ticks.
    var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
    nanosleep(&pause, nil)
  }
  return true
}

/// The id of this process's thread named `name`, from /proc/self/task.
private func threadID(named name: String) -> Int32? {
  guard let directory = opendir("/proc/self/task") else { return nil }
  defer { closedir(directory) }
  while let entry = readdir(directory) {
    let text = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    guard let tid = Int32(text) else { continue }
    let fd = open("/proc/self/task/\(tid)/comm", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { continue }
    var buffer = [UInt8](repeating: 0, count: 64)
    let n = read(fd, &buffer, buffer.count)
    close(fd)
    if n > 0 && String(decoding: buffer[..<n], as: UTF8.self) == name + "\n" { return tid }
  }
  return nil
}

/// The number in the `field:` line of /proc/self/task/<tid>/status, or nil.
private func taskStatusField(_ tid: Int32, _ field: String) -> Int? {
  guard let file = fopen("/proc/self/task/\(tid)/status", "r") else { return nil }
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
