import Glibc
import LoopDispatch
import Synchronization
import TestSupport

/// The stranding pattern of issue 30, many rounds, through the public API only.
///
/// Each round: a tiny job goes first, so one worker is just out of work (spinning) when the
/// round's job S runs on another. S submits J1 onto its own lane (it lands in S's worker's
/// local queue) and J2 onto a higher lane (the injection queue), then blocks in the kernel
/// (`poll` on a pipe) until J1 has run; J2 blocks the same way. While a worker spins, both
/// submissions leave the wake-up to the spinner; the spinner takes J2 (higher lane first) and
/// blocks too. J1 then runs only if someone passes the wake-up on (a parked worker, or the
/// supervisor, which rescues a blocked worker's local queue). Before the fix nobody did, and
/// J1 waited for S's timeout.
///
/// A random busy wait in S (0–63 µs) moves its submissions over the spinner's window. Fails
/// when J1 has not run after `timeoutMilliseconds` (the pool stranded it); prints the worst
/// and median start delay of J1 otherwise. LOOPDISPATCH_STRAND_ROUNDS sets the rounds
/// (default 20,000 times LOOPDISPATCH_TEST_SCALE): before the fix a release build stranded J1
/// within 1,300–8,200 rounds, a debug build within 800–1,400.
func poolStrandRoundsScenario() {
  let scale = getenv("LOOPDISPATCH_TEST_SCALE").flatMap { Double(String(cString: $0)) } ?? 1
  let rounds =
    getenv("LOOPDISPATCH_STRAND_ROUNDS").flatMap { Int(String(cString: $0)) }
    ?? Swift.max(200, Int(20_000 * scale))
  let timeoutMilliseconds: Int32 = 2_000
  var delays: [UInt64] = []
  delays.reserveCapacity(rounds)
  var seed = UInt64(truncatingIfNeeded: time(nil)) | 1
  for round in 0..<rounds {
    // xorshift: a different window each round, no shared generator between threads.
    seed ^= seed << 13
    seed ^= seed >> 7
    seed ^= seed << 17
    let jitter = seed % 64
    let toS = pipePair()
    let toJ2 = pipePair()
    let submittedJ1 = StrandClock()
    let startedJ1 = StrandClock()
    let roundDone = Semaphore(value: 0)
    let verdicts = StrandVerdicts()
    Queue.global(.default).async {}
    Queue.global(.default).async {
      busyWait(microseconds: jitter)
      submittedJ1.mark()
      Queue.global(.default).async {
        startedJ1.mark()
        writeByte(toS.write)
        writeByte(toJ2.write)
      }
      Queue.global(.high).async {
        verdicts.j2TimedOut = !waitReadable(toJ2.read, milliseconds: timeoutMilliseconds)
        roundDone.signal()
      }
      verdicts.sTimedOut = !waitReadable(toS.read, milliseconds: timeoutMilliseconds)
      roundDone.signal()
    }
    guard roundDone.wait(timeout: .now + .seconds(30)) == .success,
      roundDone.wait(timeout: .now + .seconds(30)) == .success
    else { fail("round \(round): S or J2 never finished (30 s)") }
    for fd in [toS.read, toS.write, toJ2.read, toJ2.write] { close(fd) }
    if verdicts.sTimedOut || verdicts.j2TimedOut {
      fail(
        "round \(round): J1 did not run within \(timeoutMilliseconds) ms of its submission "
          + "(stranded in a blocked worker's local queue); stats: \(RuntimeStats.current)")
    }
    delays.append(startedJ1.nanoseconds &- submittedJ1.nanoseconds)
  }
  delays.sort()
  let worst = Double(delays.last ?? 0) / 1e6
  let median = Double(delays[delays.count / 2]) / 1e6
  print("\(rounds) rounds, J1 start delay: median \(median) ms, worst \(worst) ms")
}

/// Set by one thread before a semaphore signal, read by the main thread after its wait.
private final class StrandVerdicts: @unchecked Sendable {
  // @unchecked Sendable: each field is written by one job before it signals the round's
  // semaphore and read only after the main thread's wait returned (the semaphore orders it).
  var sTimedOut = false
  var j2TimedOut = false
}

/// A monotonic instant written once by a job, read after the round's semaphores.
private final class StrandClock: Sendable {
  /// Atomic: J1 marks it and then writes the pipes that S and J2 read before they signal;
  /// a pipe is no happens-before edge that ThreadSanitizer sees, so the store and load are
  /// atomic rather than plain.
  private let value = Atomic<UInt64>(0)
  func mark() { value.store(monotonicNanoseconds(), ordering: .sequentiallyConsistent) }
  var nanoseconds: UInt64 { value.load(ordering: .sequentiallyConsistent) }
}

func monotonicNanoseconds() -> UInt64 {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

private func busyWait(microseconds: UInt64) {
  let end = monotonicNanoseconds() + microseconds * 1_000
  while monotonicNanoseconds() < end {}
}

func pipePair() -> (read: Int32, write: Int32) {
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else { fail("pipe: errno \(errno)") }
  return (fds[0], fds[1])
}

func writeByte(_ fd: Int32) {
  var byte: UInt8 = 1
  _ = write(fd, &byte, 1)
}

/// Blocks in the kernel (`poll`) until `fd` is readable; false on timeout.
func waitReadable(_ fd: Int32, milliseconds: Int32) -> Bool {
  var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
  while true {
    let result = poll(&entry, 1, milliseconds)
    if result < 0 && errno == EINTR { continue }
    return result == 1
  }
}

/// The stranding pattern forced (debug builds, which have `PoolProbe`): a worker is held in
/// its spin, counted in `searching`, while the round's job S submits J1 onto its own lane and
/// J2 onto a higher one, so both submissions leave the wake-up to the spinner; then S lets it
/// go and blocks in the kernel until J1 has run. The spinner takes J2 (or the tiny job T that
/// put it there, then J2), which blocks too. J1 must still run: the released spinner passes
/// the wake on (`WorkerPool.passOnWake`) and the supervisor rescues S's local queue. Before
/// the fix J1 stayed in S's local queue until S's 5 s timeout. A release build prints
/// "skipped" (no probes there).
func poolStrandHeldScenario() {
  #if DEBUG
    // 0: no trap; 1: S set the trap; 2: a spinner is held; 3: released.
    let trap = Atomic<Int>(0)
    PoolProbe.setHook(for: [.spin]) { step in
      guard step == .spin,
        trap.compareExchange(expected: 1, desired: 2, ordering: .sequentiallyConsistent).exchanged
      else { return }
      while trap.load(ordering: .sequentiallyConsistent) == 2 { sched_yield() }
    }
    let toS = pipePair()
    let toJ2 = pipePair()
    let outcome = Atomic<Int>(0)  // 1: J1 ran in time; 2: S timed out; 3: no spinner held.
    let finished = Semaphore(value: 0)
    // Start from a quiet pool: a supervisor still ticking from the pool's start would rescue
    // J1 on its own and hide a missing wake-up.
    let settleStart = monotonicNanoseconds()
    while !PoolDiagnostics.isQuiet {
      if monotonicNanoseconds() - settleStart > 20_000_000_000 { fail("the pool never went quiet") }
      sched_yield()
    }
    Queue.global(.default).async {
      trap.store(1, ordering: .sequentiallyConsistent)
      // T: makes sure some worker runs out of work and spins (the trap holds it there).
      Queue.global(.high).async {}
      let start = monotonicNanoseconds()
      while trap.load(ordering: .sequentiallyConsistent) != 2 {
        if monotonicNanoseconds() - start > 10_000_000_000 {
          outcome.store(3, ordering: .sequentiallyConsistent)
          trap.store(3, ordering: .sequentiallyConsistent)
          finished.signal()
          return
        }
        sched_yield()
      }
      // Both notifications see the held spinner and wake nobody.
      Queue.global(.default).async {
        writeByte(toS.write)
        writeByte(toJ2.write)
      }
      Queue.global(.high).async { _ = waitReadable(toJ2.read, milliseconds: 10_000) }
      trap.store(3, ordering: .sequentiallyConsistent)
      let ran = waitReadable(toS.read, milliseconds: 5_000)
      outcome.store(ran ? 1 : 2, ordering: .sequentiallyConsistent)
      finished.signal()
    }
    guard finished.wait(timeout: .now + .seconds(60)) == .success else {
      fail("S never finished (60 s)")
    }
    PoolProbe.setHook(nil)
    switch outcome.load(ordering: .sequentiallyConsistent) {
    case 1: print("J1 ran while S and J2 were blocked")
    case 2: fail("J1 stayed in S's local queue for 5 s with S blocked (nobody was told)")
    default: fail("no worker reached its spin within 10 s")
    }
  #else
    print("skipped: release build (no pool probes)")
  #endif
}

/// Idle workers do not all spin on a job they cannot take (debug builds: `PoolProbe`). A
/// producer off the pool is held for `holdMilliseconds` between counting its job and linking
/// it, as a preemption there would; just before, it wakes every worker with one tiny job
/// each. Every worker then sees a job counted that none can take. The process's CPU time over
/// the hold must stay under 1.25 cores, and the workers' loop turns (each a take that fails
/// on the counted job) under 3,000 each: a worker whose turn found counted work and took none
/// waits in the idle set (`Worker.park`) instead of spinning again. Before, every worker
/// spun on it (a spin ended at once, the job being counted): 30,000-70,000 turns, each worker
/// on a core as much as the scheduler allowed. The held job must still run once linked.
func poolUntakeableScenario() {
  #if DEBUG
    let holdMilliseconds: Int32 = 300
    let settleStart = monotonicNanoseconds()
    while !PoolDiagnostics.isQuiet {
      if monotonicNanoseconds() - settleStart > 20_000_000_000 { fail("the pool never went quiet") }
      sched_yield()
    }
    let workers = RuntimeStats.current.poolThreads
    let claimed = Atomic<Bool>(false)
    let cpuDuringHold = Atomic<Int>(-1)  // Microseconds.
    let holding = Atomic<Bool>(false)
    let workerCPU = Locked<[UInt64]>([])  // Each worker's CPU over the hold, largest first.
    let turnsDuringHold = Atomic<Int>(0)  // Workers' loop turns (`takeJob` calls).
    PoolProbe.setHook(for: [.take, .link]) { step in
      if step == .take && holding.load(ordering: .relaxed) {
        turnsDuringHold.wrappingAdd(1, ordering: .relaxed)
      }
      guard step == .link,
        claimed.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent)
          .exchanged
      else { return }
      // Wake every worker (these pushes pass: the hook is claimed).
      for _ in 0..<workers { Queue.global(.high).async {} }
      let before = processCPUMicroseconds()
      let workersBefore = workerCPUNanoseconds()
      holding.store(true, ordering: .sequentiallyConsistent)
      _ = poll(nil, 0, holdMilliseconds)  // The preemption this stands for.
      holding.store(false, ordering: .sequentiallyConsistent)
      cpuDuringHold.store(processCPUMicroseconds() - before, ordering: .sequentiallyConsistent)
      let workersAfter = workerCPUNanoseconds()
      let used = workersAfter.map { tid, after in after - (workersBefore[tid] ?? after) }
      workerCPU.withLock { $0 = used.sorted(by: >) }
    }
    let ran = Semaphore(value: 0)
    let producer = startThread { Queue.global(.default).async { ran.signal() } }
    pthread_join(producer, nil)
    PoolProbe.setHook(nil)
    guard ran.wait(timeout: .now + .seconds(10)) == .success else {
      fail("the held job never ran after its link")
    }
    let cpu = cpuDuringHold.load(ordering: .sequentiallyConsistent)
    let cores = Double(cpu) / Double(holdMilliseconds) / 1_000
    let turns = turnsDuringHold.load(ordering: .sequentiallyConsistent)
    let perWorker = workerCPU.withLock { $0 }.map { Double($0) / 1e6 }
    print(
      "\(workers) workers, over the hold: CPU \(cpu) µs (\(cores) cores), \(turns) turns, "
        + "worker CPU ms \(perWorker)")
    // Waiting 200 µs per re-check, a worker goes round at most 1,500 times in 300 ms; going
    // round at once, tens of thousands of times (as often as the scheduler lets it run).
    if turns > 3_000 * workers { fail("\(turns) loop turns during the hold: workers spun") }
    if cores > 1.25 { fail("idle workers used \(cores) cores on a job none could take") }
  #else
    print("skipped: release build (no pool probes)")
  #endif
}

/// CPU time of each pool worker thread (`ld.worker.*`) by thread id, from `/proc`.
func workerCPUNanoseconds() -> [Int32: UInt64] {
  var result: [Int32: UInt64] = [:]
  guard let directory = opendir("/proc/self/task") else { return result }
  defer { closedir(directory) }
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) {
      String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
    }
    guard let tid = Int32(name),
      readProcFile("/proc/self/task/\(tid)/comm").hasPrefix("ld.worker"),
      let field = readProcFile("/proc/self/task/\(tid)/schedstat").split(separator: " ").first,
      let time = UInt64(field)
    else { continue }
    result[tid] = time
  }
  return result
}

private func readProcFile(_ path: String) -> String {
  let fd = open(path, O_RDONLY)
  guard fd >= 0 else { return "" }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: 256)
  let count = read(fd, &buffer, buffer.count)
  return count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : ""
}

/// User plus system CPU time of the whole process, in microseconds.
func processCPUMicroseconds() -> Int {
  var usage = rusage()
  getrusage(RUSAGE_SELF.rawValue, &usage)
  return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + usage.ru_utime.tv_usec
    + usage.ru_stime.tv_usec
}
