import Glibc
import LoopDispatch
import Synchronization

/// A real `pthread_create` failure degrades the pool instead of crashing it.
///
/// 1. Start the pool, the supervisor and the service loop, and let the pool grow once, so
///    every runtime thread has run its paths (and, under AddressSanitizer, mapped its fake
///    stack) before the fault. Extra workers do not retire during the scenario: an exiting
///    thread leaves its stack in glibc's cache, and a cached stack needs no new mapping.
/// 2. The fault: lower the soft `RLIMIT_AS` to the current address-space size (`VmSize`) plus
///    a little less than one default thread stack, so the mmap of any new thread's stack fails
///    and `pthread_create` returns `EAGAIN`. A probe `pthread_create` confirms it.
/// 3. Block every worker in `read` on a pipe and submit items: the supervisor tries to add a
///    worker and is refused. Wait for two refusals: the pool warns once (checked on stderr by
///    `PoolFaultTests`), backs off between attempts, and keeps its thread count.
/// 4. Unblock the workers from the main thread: every item runs exactly once, on the
///    existing workers, with the limit still in place.
/// 5. Restore the limit, block every worker again: the pool grows after its back-off, so the
///    episode ends and the pool recovers.
func threadFailureScenario() {
  setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "3600000", 1)  // Read when the pool starts.
  let baseWorkers = RuntimeStats.current.poolThreads  // Starts the pool and the service loop.
  let pipeEnds = Pipe()
  let warmed = Group()
  block(baseWorkers, on: pipeEnds, group: warmed)
  Queue.global().async(group: warmed) { pipeEnds.release(baseWorkers) }  // On a new worker.
  guard warmed.wait(timeout: .seconds(30)) == .success else { fail("the pool did not grow") }
  // Settled: every worker counted is parked and nothing waits, so no start is in flight.
  let settled = pollUntil(seconds: 30) {
    let stats = RuntimeStats.current
    return stats.pendingJobs == 0 && stats.parkedWorkers == stats.poolThreads
  }
  guard settled else { fail("the pool did not settle after growing") }
  let workers = RuntimeStats.current.poolThreads

  // 2. The fault.
  let fault = AddressSpaceLimit()
  guard fault.lower() else { fail("setrlimit(RLIMIT_AS) failed: errno \(errno)") }
  let start = Deadline.now
  if let probe = probeThreadStart() {
    fault.restore()
    fail("pthread_create still succeeds under RLIMIT_AS (\(probe)); cannot produce the fault")
  }
  print(
    "fault: RLIMIT_AS = VmSize + \(fault.marginBytes >> 10) KiB; pthread_create refused; "
      + "\(workers) workers")

  // 3. Block every worker, then submit items that can only wait.
  let blockers = Group()
  block(workers, on: pipeEnds, group: blockers)
  let items = 64
  let tally = Tally(count: items)
  let all = Group()
  for index in 0..<items { Queue.global().async(group: all) { tally.ran(index) } }
  guard pollUntil(seconds: 30, { PoolDiagnostics.refusedWorkerStarts >= 2 }) else {
    fault.restore()
    let stats = RuntimeStats.current
    fail(
      "the supervisor never tried to add a worker (threads \(stats.poolThreads), started with "
        + "\(workers); growth \(stats.poolGrowthEvents); items run \(tally.total))")
  }
  let refused = PoolDiagnostics.refusedWorkerStarts
  let elapsed = Double((Deadline.now.uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000)
  let stats = RuntimeStats.current
  print("refused worker starts: \(refused) in \(Int(elapsed)) ms; threads \(stats.poolThreads)")
  // Upper bound from the back-off's lower bound: one try, then at most one a second.
  if Double(refused) > 1 + elapsed / 1_000 {
    fault.restore()
    fail("\(refused) refused starts in \(Int(elapsed)) ms: no back-off")
  }
  if stats.poolThreads != workers {
    fault.restore()
    fail("pool counts \(stats.poolThreads) threads after refusals, started with \(workers)")
  }
  if tally.total != 0 {
    fault.restore()
    fail("\(tally.total) items ran while every worker was blocked")
  }

  // 4. Degraded, not stopped: the existing workers run everything once they are free.
  pipeEnds.release(workers)
  guard blockers.wait(timeout: .seconds(30)) == .success,
    all.wait(timeout: .seconds(30)) == .success
  else {
    fault.restore()
    fail("items did not run after the workers were unblocked (\(tally.total) of \(items))")
  }
  if let wrong = tally.firstWrong {
    fault.restore()
    fail("item \(wrong.index) ran \(wrong.count) times")
  }
  print("all \(items) items ran once on \(workers) workers under the fault")

  // 5. Recovery: without the fault, a stalled pool grows again. First let the pool settle
  // (nothing waiting, every thread parked). A supervisor tick that saw step 4's items
  // waiting may still add a worker after the restore, even after the settle (its decision
  // reads /proc and can outlast the poll), and that worker would then run the probe item
  // below without any further growth: so growth is counted from the restore, when a start
  // first can succeed again — either way the pool grew once the fault was gone.
  let growthAtRestore = RuntimeStats.current.poolGrowthEvents
  fault.restore()
  guard
    pollUntil(
      seconds: 30,
      {
        let stats = RuntimeStats.current
        return stats.pendingJobs == 0 && stats.parkedWorkers == stats.poolThreads
      })
  else { fail("the pool did not settle after the fault was removed") }
  let workersNow = RuntimeStats.current.poolThreads
  let secondBlockers = Group()
  block(workersNow, on: pipeEnds, group: secondBlockers)
  let ranAfterRecovery = Semaphore(value: 0)
  Queue.global().async { ranAfterRecovery.signal() }
  guard ranAfterRecovery.wait(timeout: .seconds(30)) == .success else {
    fail("the pool did not grow after the fault was removed")
  }
  pipeEnds.release(workersNow)
  guard secondBlockers.wait(timeout: .seconds(30)) == .success else {
    fail("the second blockers never finished")
  }
  let grown = RuntimeStats.current.poolGrowthEvents - growthAtRestore
  if grown < 1 { fail("an item ran while every worker was blocked, but the pool did not grow") }
  print("recovered: the pool grew by \(grown) once the limit was lifted")
  pipeEnds.close()
}

/// Submits `count` jobs that each block in `read` on `pipe` until `pipe.release` writes a
/// byte for them, and returns once all of them are running (so every worker is occupied).
private func block(_ count: Int, on pipe: Pipe, group: Group) {
  let target = pipe.readersStarted.load(ordering: .relaxed) + count
  for _ in 0..<count {
    Queue.global().async(group: group) { pipe.readOne() }
  }
  while pipe.readersStarted.load(ordering: .relaxed) < target { sched_yield() }
}

/// Tries `pthread_create` once. Returns nil if it was refused, or a description of the
/// thread it started (which has then been joined).
func probeThreadStart() -> String? {
  var thread = pthread_t()
  let rc = pthread_create(&thread, nil, { _ in nil }, nil)
  if rc != 0 { return nil }
  pthread_join(thread, nil)
  return "it started a thread"
}

/// Waits until `condition` holds, checking every millisecond, for at most `seconds`.
/// The pause only paces the polling of a counter that has no wait of its own; it does not
/// stand in for an event.
func pollUntil(seconds: Int, _ condition: () -> Bool) -> Bool {
  let deadline = Deadline.now + .seconds(Int64(seconds))
  while !condition() {
    if Deadline.now >= deadline { return false }
    usleep(1_000)
  }
  return true
}

/// The process's soft address-space limit, lowered to just above its current size.
final class AddressSpaceLimit {
  private var original = rlimit()
  /// Room left above the current size: 1 MiB less than a default thread stack (half of it for
  /// small stacks), so a new thread's stack cannot be mapped while other allocations (malloc,
  /// the sanitizers' own allocators) still can.
  let marginBytes: UInt

  init() {
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    var stackBytes = 0
    pthread_attr_getstacksize(&attributes, &stackBytes)
    pthread_attr_destroy(&attributes)
    marginBytes = UInt(Swift.max(stackBytes / 2, stackBytes - (1 << 20)))
    _ = getrlimit(resource, &original)
  }

  private var resource: __rlimit_resource_t { __rlimit_resource_t(RLIMIT_AS.rawValue) }

  /// Lowers the soft limit to `VmSize` plus `marginBytes`; the hard limit is kept, so
  /// `restore` can raise it again.
  func lower() -> Bool {
    guard let size = virtualMemoryBytes() else { return false }
    var limited = rlimit(rlim_cur: size + marginBytes, rlim_max: original.rlim_max)
    return setrlimit(resource, &limited) == 0
  }

  /// Puts the original soft limit back (before exiting: LeakSanitizer needs to map a stack).
  func restore() {
    _ = setrlimit(resource, &original)
  }
}

/// `VmSize` from `/proc/self/status`, in bytes.
private func virtualMemoryBytes() -> UInt? {
  let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return nil }
  defer { Glibc.close(fd) }
  var buffer = [UInt8](repeating: 0, count: 8192)
  let n = read(fd, &buffer, buffer.count)
  guard n > 0 else { return nil }
  let text = String(decoding: buffer[..<n], as: UTF8.self)
  for line in text.split(separator: "\n") where line.hasPrefix("VmSize:") {
    let digits = line.dropFirst("VmSize:".count).filter { $0.isNumber }
    return UInt(String(digits)).map { $0 * 1_024 }
  }
  return nil
}

/// A pipe whose read end blocked jobs wait on.
final class Pipe: Sendable {
  let readEnd: Int32
  let writeEnd: Int32
  /// Atomic. Calls to `readOne` so far (each is blocked or done).
  let readersStarted = Atomic<Int>(0)

  init() {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { fail("pipe: errno \(errno)") }
    (readEnd, writeEnd) = (fds[0], fds[1])
  }

  /// Blocks the calling thread in the kernel until a byte arrives.
  func readOne() {
    readersStarted.add(1, ordering: .relaxed)
    var byte: UInt8 = 0
    while read(readEnd, &byte, 1) < 0 && errno == EINTR {}
  }

  /// Writes `count` bytes: lets `count` blocked readers go.
  func release(_ count: Int) {
    let bytes = [UInt8](repeating: 1, count: count)
    guard write(writeEnd, bytes, count) == count else { fail("write to the pipe failed") }
  }

  func close() {
    _ = Glibc.close(readEnd)
    _ = Glibc.close(writeEnd)
  }
}

/// How many times each item ran: one atomic counter per item (no lock, so nothing for the
/// sanitizers to model but the atomics).
final class Tally: Sendable {
  private final class Slot: Sendable {
    /// Atomic.
    let count = Atomic<Int>(0)
  }
  private let slots: [Slot]

  init(count: Int) { slots = (0..<count).map { _ in Slot() } }

  func ran(_ index: Int) { slots[index].count.add(1, ordering: .relaxed) }

  var total: Int { slots.reduce(0) { $0 + $1.count.load(ordering: .relaxed) } }

  /// The first item that did not run exactly once.
  var firstWrong: (index: Int, count: Int)? {
    let counts = slots.map { $0.count.load(ordering: .relaxed) }
    return counts.firstIndex { $0 != 1 }.map { ($0, counts[$0]) }
  }
}
