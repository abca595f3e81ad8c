import CLoopShims
import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// Issue "Hand-offs without wake-ups: chained wake-ups": the pool never strands work.
///
/// A burst of jobs that wait for each other can only finish if every one of them gets a
/// worker of its own at once. So a burst of exactly one job per worker that meet (each waits,
/// bounded, until all have started) shows whether a submission woke enough workers: a pool
/// that lets one spinning worker take the whole burst, and wakes no parked worker for the
/// rest, leaves the others in the lanes until some unrelated submission comes along. Here
/// nothing else is ever submitted, so such a round times out.
///
/// The pool tests run in child processes of their own (exit tests), as `PoolTests` do: other
/// suites running in parallel in the test process could occupy the shared pool, and a fresh
/// pool has exactly one worker per CPU, so "every worker" is known. The child prints a line
/// per failed check and a last line when it finished; the parent records each failed check.
@Suite struct PoolHandOffTests {
  /// Bursts submitted from a plain thread, at many timings: right after the last burst
  /// left, right after one job finished (its worker still spinning), once every worker
  /// parked, each followed by a measured busy-wait of 0 to 200 µs.
  @Test func aBurstOfMeetingJobsFromAPlainThreadAlwaysMeets() async {
    let result = await #expect(processExitsWith: .success, observing: childOutput) {
      runChild(meetingBurstsFromAPlainThread)
    }
    relayChild(result)
  }

  /// The same bursts, each submitted by a pool job (which returns right after submitting).
  @Test func aBurstOfMeetingJobsFromAPoolJobAlwaysMeets() async {
    let result = await #expect(processExitsWith: .success, observing: childOutput) {
      runChild(meetingBurstsFromAPoolJob)
    }
    relayChild(result)
  }

  /// Bursts submitted while every worker is stopped, each by a signal from a timer it armed on
  /// its own thread at the end of its last job, at a moment swept over its first
  /// microseconds out of work: as if the VM had preempted them on their way from their last
  /// job to sleep. The jobs must meet wherever the workers stopped. A pool that counts a
  /// spinning worker as one that will take the whole burst, and so wakes no parked worker,
  /// strands all but one job of a burst that arrives while that worker is stopped mid-spin.
  /// Without the stop the spinner takes the first job within a few hundred nanoseconds,
  /// before the second is submitted, so the plain-thread test above almost never hits it.
  @Test func aBurstOntoWorkersPreemptedOnTheirWayToSleepStillMeets() async {
    let result = await #expect(processExitsWith: .success, observing: childOutput) {
      runChild(meetingBurstsWhileEveryWorkerIsStopped)
    }
    relayChild(result)
  }

  /// `Queue.global().apply(iterations:)` with one iteration per worker, each waiting until
  /// all are running at once: it completes, on one distinct thread per worker.
  @Test func applyOnAGlobalQueueRunsOnEveryWorkerAtOnce() async {
    let result = await #expect(processExitsWith: .success, observing: childOutput) {
      runChild(applyMeetings)
    }
    relayChild(result)
  }

  /// A started, idle runtime uses almost no CPU (`IdleCPUScenario.swift` in
  /// LoopDispatchTestHost: the main loop needs the process main thread).
  @Test func anIdleRuntimeUsesAlmostNoCPU() {
    let result = runProgram("LoopDispatchTestHost", ["idle-cpu"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok idle-cpu"), "\(result.output)")
  }
}

// MARK: - Sizes and timings

/// How long a job waits for the others of its burst (and the test for the burst) before the
/// round counts as stranded. Generous: a correct pool meets in well under a millisecond, a
/// noisy 2-core VM under a sanitizer in a few; a stranded burst never meets on its own.
private let meetingTimeoutSeconds = 10

/// Bursts per meeting test: every (timing, delay) pair five times at scale 1, once at least.
private let meetingRounds = Swift.max(
  Timing.allCases.count * delaysMicroseconds.count,
  scaled(5 * Timing.allCases.count * delaysMicroseconds.count))

/// `apply` calls in the apply test.
private let applyRounds = Swift.max(delaysMicroseconds.count, scaled(5 * delaysMicroseconds.count))

/// Busy-wait between the preparation and the burst, measured on the monotonic clock. A
/// worker that found no work spins for a few to a few tens of microseconds before it parks,
/// so the small delays land inside its spin, the large ones after it parked.
private let delaysMicroseconds = [0, 0, 1, 2, 3, 5, 8, 13, 20, 30, 45, 70, 100, 130, 160, 200]

/// The pool's state just before a burst (before the delay).
private enum Timing: CaseIterable, CustomStringConvertible {
  /// The previous burst's last job just returned: its worker may be looking for work.
  case afterTheLastBurst
  /// One trivial job was submitted and has just run: its worker may still be spinning.
  case afterOneJob
  /// Every worker (but the submitting one, for a pool job) is parked: the pool went idle.
  case afterThePoolParked

  var description: String {
    switch self {
    case .afterTheLastBurst: "right after the last burst"
    case .afterOneJob: "right after one job ran"
    case .afterThePoolParked: "once the pool parked"
    }
  }
}

/// The workers of a fresh pool: one per CPU this process may use (the pool counts them the
/// same way, from the affinity mask).
private var poolWorkers: Int { Int(cls_available_cpus()) }

// MARK: - Meeting bursts (run in the child process)

/// The submitter of each burst: the child's own thread, or a pool job.
private enum Submitter {
  case plainThread
  case poolJob
}

private func meetingBurstsFromAPlainThread(_ checks: inout ChildChecks) {
  // A thread of its own, so the submitter is certainly no runtime thread.
  let failures = Locked([String]())
  let thread = startThread {
    var checks = ChildChecks()
    meetingBursts(from: .plainThread, &checks)
    let found = checks.failures
    failures.withLock { $0 += found }
  }
  pthread_join(thread, nil)
  checks.failures += failures.value
}

private func meetingBurstsFromAPoolJob(_ checks: inout ChildChecks) {
  meetingBursts(from: .poolJob, &checks)
}

/// Runs `meetingRounds` bursts of one meeting job per worker onto `Queue.global()`, each at
/// its own timing; stops at the first burst that does not meet.
private func meetingBursts(from submitter: Submitter, _ checks: inout ChildChecks) {
  let workers = poolWorkers
  let fresh = RuntimeStats.current
  checks.expect(
    fresh.poolThreads == workers,
    "a fresh pool has \(fresh.poolThreads) threads, not one per CPU (\(workers))")
  let start = Deadline.now
  for round in 0..<meetingRounds {
    let timing = Timing.allCases[round % Timing.allCases.count]
    let delay = delaysMicroseconds[(round / Timing.allCases.count) % delaysMicroseconds.count]
    let meeting = Meeting(size: workers)
    // Checks failed in a submitting pool job; read once the burst has left (its jobs were
    // submitted after the write).
    let jobFailures = Locked([String]())
    switch submitter {
    case .plainThread:
      guard prepare(timing, submitterIsAPoolJob: false, &checks) else { return }
      busyWait(microseconds: delay)
      meeting.submit()
    case .poolJob:
      Queue.global().async {
        var inner = ChildChecks()
        _ = prepare(timing, submitterIsAPoolJob: true, &inner)
        let found = inner.failures
        jobFailures.withLock { $0 += found }
        busyWait(microseconds: delay)
        meeting.submit()
      }
    }
    let name =
      "round \(round + 1) of \(meetingRounds) (\(workers) jobs from a"
      + " \(submitter == .plainThread ? "plain thread" : "pool job"), \(timing), then \(delay) µs)"
    guard meeting.allArrived.wait(seconds: meetingTimeoutSeconds) else {
      let arrived = meeting.arrived
      let stats = RuntimeStats.current
      checks.expect(
        false,
        "\(name): only \(arrived) of \(workers) jobs had started after"
          + " \(meetingTimeoutSeconds) s, so the others waited for a worker that never came"
          + " (pool: \(stats.poolThreads) threads, \(stats.parkedWorkers) parked,"
          + " \(stats.pendingJobs) jobs waiting)")
      // Let the waiting jobs go, so the stranded ones drain behind them.
      meeting.allArrived.open()
      _ = meeting.allLeft.wait(seconds: 30)
      return
    }
    guard
      checks.expect(
        meeting.allLeft.wait(seconds: meetingTimeoutSeconds),
        "\(name): the jobs met but \(meeting.left) of \(workers) returned")
    else { return }
    checks.failures += jobFailures.value
    if !jobFailures.value.isEmpty { return }
  }
  print(
    "pool hand-off: \(meetingRounds) meeting bursts of \(workers) jobs from a"
      + " \(submitter == .plainThread ? "plain thread" : "pool job") in"
      + " \(formatSeconds(Deadline.now - start)) s")
}

/// Brings the pool to `timing`. Returns false (with a failed check) if it could not.
private func prepare(
  _ timing: Timing, submitterIsAPoolJob: Bool, _ checks: inout ChildChecks
) -> Bool {
  switch timing {
  case .afterTheLastBurst:
    return true
  case .afterOneJob:
    let ran = Atomic<Bool>(false)
    Queue.global().async { ran.store(true, ordering: .releasing) }
    return checks.expect(
      spin(seconds: meetingTimeoutSeconds) { ran.load(ordering: .acquiring) },
      "a single job on an idle pool did not run within \(meetingTimeoutSeconds) s")
  case .afterThePoolParked:
    let others = submitterIsAPoolJob ? 1 : 0
    var seen = RuntimeStats.current
    let parked = spin(seconds: meetingTimeoutSeconds) {
      seen = RuntimeStats.current
      if seen.parkedWorkers + others >= seen.poolThreads { return true }
      sched_yield()
      return false
    }
    return checks.expect(
      parked,
      "the idle pool did not park within \(meetingTimeoutSeconds) s: \(seen.parkedWorkers) of"
        + " \(seen.poolThreads) workers parked")
  }
}

/// One job per worker that meet: each counts itself in, then waits (bounded) until all have.
///
/// Thread-safety: any thread; the counters are atomic and the latches order the rest.
private final class Meeting: Sendable {
  let size: Int
  private let arrivals = Atomic<Int>(0)
  private let departures = Atomic<Int>(0)
  /// Opened by the last job to arrive.
  let allArrived = Latch()
  /// Opened by the last job to return.
  let allLeft = Latch()

  init(size: Int) { self.size = size }

  var arrived: Int { arrivals.load(ordering: .sequentiallyConsistent) }
  var left: Int { departures.load(ordering: .sequentiallyConsistent) }

  /// Submits the burst: `size` jobs onto the default global queue, back to back. Each job
  /// runs `afterwards` once it has met the others (or given up), as its last action.
  func submit(afterwards: @escaping @Sendable () -> Void = {}) {
    for _ in 0..<size {
      Queue.global().async { [self] in
        attend()
        afterwards()
      }
    }
  }

  private func attend() {
    if arrivals.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue == size {
      allArrived.open()
    } else {
      // Longer than the test waits, so that the test, not a job giving up, ends a round that
      // does not meet (and sees how many had arrived).
      _ = allArrived.wait(seconds: 3 * meetingTimeoutSeconds)
    }
    if departures.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue == size {
      allLeft.open()
    }
  }
}

// MARK: - Meeting bursts while every worker is stopped (run in the child process)

/// Bursts with stopped workers: every delay ten times at scale 1, five times at least. A round
/// catches a pool that strands the burst only when it stops a worker mid-spin (about one in
/// fifty rounds on a 2-core VM), so the floor keeps the sanitizer runs' reduced scale from
/// making the test blind.
private let freezeRounds = Swift.max(
  5 * freezeDelaysNanoseconds.count, scaled(10 * freezeDelaysNanoseconds.count))

/// When each worker's own timer stops it, after it armed the timer at the end of its job: 0
/// to 19.5 µs in steps of 0.5 µs, on top of the timer's own lateness (15 to 20 µs on a VM, a
/// few on bare metal), so a worker is stopped anywhere from the end of its job, through its
/// search for more work (up to some tens of microseconds of spinning), to after it parked.
private let freezeDelaysNanoseconds = (0..<40).map { 1 + $0 * 500 }

/// Jobs fed to the pool before each round, one per microsecond: each arrives while a worker
/// spins for work, as in a busy pool (with an adaptive spin, a spin that finds work makes the
/// next one longer), so the workers leave the round's last jobs the way a busy pool does.
private let freezeFeedJobs = 16

/// How long the burst's submitter may take once every worker is stopped before they are let
/// go anyway: a worker may be stopped holding a lock the submission needs (the pool's, the
/// allocator's), and then the burst goes in after they resume. Not a synchronisation: either
/// way the jobs must meet.
private let freezeHoldMilliseconds = 5

/// Each round: after a short feed, one job per worker meet (so each is on a worker of its
/// own), each arms a one-shot timer that signals its own thread after the round's delay, and
/// they return. The signal handler stops each worker where it is (it waits on a semaphore);
/// once all are stopped, a submitter thread submits the burst; then the workers resume. A
/// worker stopped while it spins for work counts as searching, the others are parked: the
/// burst must not be left to the stopped spinner alone. Skipped under ThreadSanitizer, which
/// defers a signal until the thread calls into the C library, so it would not stop a worker
/// where its timer fired.
private func meetingBurstsWhileEveryWorkerIsStopped(_ checks: inout ChildChecks) {
  if dlsym(nil, "__tsan_init") != nil {
    print("pool hand-off: the bursts onto stopped workers are skipped under ThreadSanitizer")
    return
  }
  let workers = poolWorkers
  installFreezeHandler()
  let start = Deadline.now
  for round in 0..<freezeRounds {
    let delay = freezeDelaysNanoseconds[round % freezeDelaysNanoseconds.count]
    let name =
      "round \(round + 1) of \(freezeRounds) (\(workers) jobs from a plain thread while every"
      + " worker is stopped \(delay) ns after it armed its timer at the end of its last job)"
    let frozenBefore = freeze.count.load(ordering: .acquiring)
    let meeting = Meeting(size: workers)
    let submitted = Atomic<Bool>(false)
    let submitter = startThread {
      for _ in 0..<workers {
        guard waitFreeze(freeze.frozen, seconds: meetingTimeoutSeconds) else { return }
      }
      meeting.submit()
      submitted.store(true, ordering: .releasing)
    }
    for _ in 0..<freezeFeedJobs {
      Queue.global().async {}
      busyWait(microseconds: 1)
    }
    let prelude = FreezingMeeting(size: workers, delay: delay)
    prelude.submit()
    let allStopped = spin(seconds: meetingTimeoutSeconds) {
      freeze.count.load(ordering: .acquiring) - frozenBefore >= workers
    }
    if allStopped {
      let holdUntil = Deadline.now + .milliseconds(freezeHoldMilliseconds)
      _ = spin(seconds: meetingTimeoutSeconds) {
        submitted.load(ordering: .acquiring) || Deadline.now >= holdUntil
      }
    }
    let stopped = freeze.count.load(ordering: .acquiring) - frozenBefore
    for _ in 0..<stopped { sem_post(freeze.thaw) }
    pthread_join(submitter, nil)
    guard
      checks.expect(
        allStopped,
        "\(name): the timers' signals stopped \(stopped) of \(workers) workers (the jobs that"
          + " armed them: \(prelude.meeting.arrived) of \(workers) met)")
    else { return }
    prelude.deleteTimers()
    guard meeting.allArrived.wait(seconds: meetingTimeoutSeconds) else {
      let arrived = meeting.arrived
      let stats = RuntimeStats.current
      checks.expect(
        false,
        "\(name): only \(arrived) of \(workers) jobs had started after"
          + " \(meetingTimeoutSeconds) s, so the others waited for a worker that never came"
          + " (pool: \(stats.poolThreads) threads, \(stats.parkedWorkers) parked,"
          + " \(stats.pendingJobs) jobs waiting)")
      meeting.allArrived.open()
      _ = meeting.allLeft.wait(seconds: 30)
      return
    }
    guard
      checks.expect(
        meeting.allLeft.wait(seconds: meetingTimeoutSeconds),
        "\(name): the jobs met but \(meeting.left) of \(workers) returned")
    else { return }
  }
  print(
    "pool hand-off: \(freezeRounds) meeting bursts of \(workers) jobs while every worker was"
      + " stopped, in \(formatSeconds(Deadline.now - start)) s")
}

/// One job per worker that meet, then each arms the freeze timer on its own thread and
/// returns.
///
/// Thread-safety: any thread; the meeting is, and the timer list is locked.
private final class FreezingMeeting: Sendable {
  let meeting: Meeting
  let delay: Int
  /// The timers' ids as bit patterns, as they are armed.
  private let timers = Locked([Int]())

  init(size: Int, delay: Int) {
    meeting = Meeting(size: size)
    self.delay = delay
  }

  func submit() {
    meeting.submit { [self] in
      let timer = armFreezeTimer(afterNanoseconds: delay)
      timers.withLock { $0.append(timer) }
    }
  }

  /// Deletes the timers once every job stored its own (after they fired: a timer may fire
  /// inside `armFreezeTimer`, before the store).
  func deleteTimers() {
    _ = spin(seconds: meetingTimeoutSeconds) { timers.value.count == meeting.size }
    for timer in timers.value { timer_delete(timer_t(bitPattern: timer)) }
  }
}

/// The freeze handler's semaphores and count.
///
/// Thread-safety: `sem_t` is made for sharing between threads and signal handlers; the
/// pointers never change and are never freed (the child exits).
private final class Freeze: @unchecked Sendable {
  // @unchecked Sendable: see above.
  /// Posted by the handler once its thread is stopped; taken by the submitter.
  let frozen = makeSemaphore()
  /// Posted by the test to let the stopped thread go.
  let thaw = makeSemaphore()
  /// Atomic. Freezes so far (an atomic increment is async-signal-safe).
  let count = Atomic<Int>(0)

  private static func makeSemaphore() -> UnsafeMutablePointer<sem_t> {
    let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
    sem_init(semaphore, 0, 0)
    return semaphore
  }
}

private let freeze = Freeze()

/// Stops the thread that receives SIGUSR2 until `freeze.thaw` is posted. Uses an atomic
/// increment, `sem_post` (async-signal-safe) and `sem_wait` (glibc's is an atomic and a futex
/// wait, taking no lock the stopped code could hold), on a global initialised beforehand.
private func installFreezeHandler() {
  _ = freeze  // Initialised now, not in the handler.
  var action = sigaction()
  action.__sigaction_handler.sa_handler = { _ in
    let saved = errno
    freeze.count.wrappingAdd(1, ordering: .sequentiallyConsistent)
    sem_post(freeze.frozen)
    while sem_wait(freeze.thaw) != 0 {}
    errno = saved
  }
  sigemptyset(&action.sa_mask)
  action.sa_flags = Int32(SA_RESTART)
  sigaction(SIGUSR2, &action, nil)
}

/// Arms a one-shot timer that sends SIGUSR2 to the calling thread (unblocked for it) after
/// `nanoseconds`; returns the timer (as a bit pattern) for `timer_delete`.
private func armFreezeTimer(afterNanoseconds nanoseconds: Int) -> Int {
  // The workers inherit the mask of the thread that started the pool; in an exit test's
  // child that is a Swift concurrency thread, which blocks some signals.
  var signals = sigset_t()
  sigemptyset(&signals)
  sigaddset(&signals, SIGUSR2)
  pthread_sigmask(SIG_UNBLOCK, &signals, nil)
  var event = sigevent()
  event.sigev_notify = Int32(SIGEV_THREAD_ID)
  event.sigev_signo = SIGUSR2
  event._sigev_un._tid = cls_gettid()
  var timer: timer_t?
  precondition(timer_create(CLOCK_MONOTONIC, &event, &timer) == 0, "timer_create: \(errno)")
  var when = itimerspec(
    it_interval: timespec(), it_value: timespec(tv_sec: 0, tv_nsec: nanoseconds))
  precondition(timer_settime(timer, 0, &when, nil) == 0, "timer_settime: \(errno)")
  return Int(bitPattern: timer)
}

/// Waits for `semaphore` for up to `seconds`; returns whether it was posted.
private func waitFreeze(_ semaphore: UnsafeMutablePointer<sem_t>, seconds: Int) -> Bool {
  var deadline = timespec()
  clock_gettime(CLOCK_REALTIME, &deadline)
  deadline.tv_sec += seconds
  while sem_timedwait(semaphore, &deadline) != 0 {
    if errno != EINTR { return false }
  }
  return true
}

// MARK: - apply (run in the child process)

/// `applyRounds` calls of `Queue.global().apply(iterations: workers)`, alternately from the
/// child's thread and from a pool job, each after a measured delay. Every iteration waits,
/// bounded, until all `workers` iterations are running at once, so a call completes in time
/// only if it runs on every worker at once; the distinct threads it ran on are counted.
private func applyMeetings(_ checks: inout ChildChecks) {
  let workers = poolWorkers
  let start = Deadline.now
  for round in 0..<applyRounds {
    let delay = delaysMicroseconds[round % delaysMicroseconds.count]
    let fromAPoolJob = round % 2 == 1
    let name =
      "apply round \(round + 1) of \(applyRounds) (\(workers) iterations from a"
      + " \(fromAPoolJob ? "pool job" : "plain thread") after \(delay) µs)"
    let meeting = ApplyMeeting(size: workers)
    busyWait(microseconds: delay)
    if fromAPoolJob {
      let returned = Latch()
      Queue.global().async {
        meeting.apply()
        returned.open()
      }
      guard
        checks.expect(
          returned.wait(seconds: 3 * meetingTimeoutSeconds),
          "\(name): apply did not return within \(3 * meetingTimeoutSeconds) s")
      else { return }
    } else {
      meeting.apply()
    }
    let threads = meeting.threads
    let ok = checks.expect(
      meeting.met,
      "\(name): only \(meeting.mostRunning) of \(workers) iterations were running at once after"
        + " \(meetingTimeoutSeconds) s; apply used \(threads.count) threads")
    guard ok else { return }
    guard
      checks.expect(
        threads.count == workers,
        "\(name): the iterations ran on \(threads.count) distinct threads, not \(workers)")
    else { return }
  }
  print(
    "pool hand-off: \(applyRounds) apply calls of \(workers) meeting iterations in"
      + " \(formatSeconds(Deadline.now - start)) s")
}

/// One `apply` call whose iterations meet: each counts itself in, records its thread, and
/// waits (bounded) until all `size` iterations have started, none having returned.
///
/// Thread-safety: any thread; the counters are atomic, the thread set is locked, and
/// `apply` returns only after every iteration returned.
private final class ApplyMeeting: Sendable {
  let size: Int
  private let arrivals = Atomic<Int>(0)
  private let allArrived = Latch()
  private let timedOut = Atomic<Bool>(false)
  private let threadIDs = Locked(Set<pid_t>())

  init(size: Int) { self.size = size }

  /// Whether every iteration saw all the others start.
  var met: Bool { !timedOut.load(ordering: .sequentiallyConsistent) }
  /// The most iterations that had started (and so were running) at once.
  var mostRunning: Int { arrivals.load(ordering: .sequentiallyConsistent) }
  var threads: Set<pid_t> { threadIDs.value }

  func apply() {
    Queue.global().apply(iterations: size) { [self] _ in iteration() }
  }

  private func iteration() {
    let tid = cls_gettid()
    threadIDs.withLock { _ = $0.insert(tid) }
    if arrivals.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue == size {
      allArrived.open()
    } else if !allArrived.wait(seconds: meetingTimeoutSeconds) {
      timedOut.store(true, ordering: .sequentiallyConsistent)
      // Release the other waiters, so the call returns once and the test can report.
      allArrived.open()
    }
  }
}

// MARK: - Helpers

/// Spins (on the monotonic clock) for `microseconds`.
private func busyWait(microseconds: Int) {
  guard microseconds > 0 else { return }
  let end = Deadline.now + .microseconds(microseconds)
  while Deadline.now < end {}
}

/// Calls `condition` until it returns true (true) or `seconds` pass (false).
private func spin(seconds: Int, _ condition: () -> Bool) -> Bool {
  let end = Deadline.now + .seconds(seconds)
  while !condition() {
    if Deadline.now >= end { return false }
  }
  return true
}

private func formatSeconds(_ duration: Duration) -> String {
  let milliseconds =
    duration.components.seconds * 1_000
    + duration.components.attoseconds / 1_000_000_000_000_000
  return "\(milliseconds / 1_000).\(String(milliseconds % 1_000 + 1_000).dropFirst())"
}

// MARK: - Child and parent plumbing

/// What the parent reads back from each child.
private let childOutput: [any PartialKeyPath<ExitTest.Result> & Sendable] = [
  \.standardOutputContent
]

private let childFailurePrefix = "pool hand-off check failed: "
private let childFinishedLine = "pool hand-off scenario finished"

/// The failed checks of one child scenario.
private struct ChildChecks {
  var failures: [String] = []

  /// Records `message` unless `condition` holds; returns `condition`.
  @discardableResult
  mutating func expect(_ condition: Bool, _ message: @autoclosure () -> String) -> Bool {
    if !condition { failures.append(message()) }
    return condition
  }
}

/// Runs `scenario` in the exit test's child, prints a line per failed check and a last line
/// saying it finished, and exits with 0 (the parent gets the output only on the expected
/// status; a crash or sanitizer report still fails the parent's expectation).
private func runChild(_ scenario: (inout ChildChecks) -> Void) -> Never {
  var checks = ChildChecks()
  scenario(&checks)
  for failure in checks.failures { print(childFailurePrefix + failure) }
  print(childFinishedLine)
  fflush(nil)
  exit(EXIT_SUCCESS)
}

/// Prints the child's output and records each failed check, or an issue if it did not
/// finish, at the caller's line.
private func relayChild(
  _ result: ExitTest.Result?, sourceLocation: SourceLocation = #_sourceLocation
) {
  guard let result else { return }
  let lines = String(decoding: result.standardOutputContent, as: UTF8.self).split(
    separator: "\n", omittingEmptySubsequences: false)
  for line in lines where !line.isEmpty && line != childFinishedLine { print(line) }
  fflush(nil)
  for line in lines where line.hasPrefix(childFailurePrefix) {
    Issue.record(
      Comment(rawValue: String(line.dropFirst(childFailurePrefix.count))),
      sourceLocation: sourceLocation)
  }
  if !lines.contains(where: { $0 == childFinishedLine }) {
    Issue.record("the scenario exited without finishing", sourceLocation: sourceLocation)
  }
}
