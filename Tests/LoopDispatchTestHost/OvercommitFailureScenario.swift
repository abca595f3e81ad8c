import Glibc
import LoopDispatch

/// A real `pthread_create` failure while overcommit jobs wait for threads (rule 5 of
/// `Pool/Overcommit.swift`): the jobs wait for the overcommit threads there are, nothing is
/// lost, and a thread starts again once the fault is gone.
///
/// 1. Two overcommit threads are started and left idle (they do not retire during the
///    scenario), so they have run their paths before the fault.
/// 2. The fault, as in `ThreadFailureScenario.swift`: `RLIMIT_AS` just above the process's
///    size, so a new thread's stack cannot be mapped.
/// 3. Two overcommit jobs block in `read` on the idle threads; 16 more are submitted: each
///    submission's thread start is refused (one warning line per episode of refusals,
///    checked by the test), the jobs wait in the lane and none runs.
/// 4. The two blocked jobs are released: the two threads run all 16 jobs, each once.
/// 5. The limit is restored: with the two threads blocked again, a new job gets a new thread.
func overcommitThreadFailureScenario() {
  setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "3600000", 1)  // Read when the pool starts.
  let queue = Queue.global(overcommit: true)
  let pipeEnds = Pipe()
  // 1. Two overcommit threads, both blocked at once, then idle.
  let warmed = Group()
  for _ in 0..<2 { queue.async(group: warmed) { pipeEnds.readOne() } }
  guard pollUntil(seconds: 30, { pipeEnds.readersStarted.load(ordering: .relaxed) == 2 }) else {
    fail("two overcommit jobs did not start at once")
  }
  pipeEnds.release(2)
  guard warmed.wait(timeout: .seconds(30)) == .success else { fail("the warm-up did not end") }
  let settled = pollUntil(seconds: 30) {
    let stats = RuntimeStats.current
    return stats.parkedWorkers == stats.poolThreads && stats.overcommitThreads == 2
  }
  guard settled else { fail("the two overcommit threads did not park") }

  // 2. The fault.
  let fault = AddressSpaceLimit()
  guard fault.lower() else { fail("setrlimit(RLIMIT_AS) failed: errno \(errno)") }
  if let probe = probeThreadStart() {
    fault.restore()
    fail("pthread_create still succeeds under RLIMIT_AS (\(probe)); cannot produce the fault")
  }

  // 3. Both threads blocked; the items can only wait.
  let blockers = Group()
  for _ in 0..<2 { queue.async(group: blockers) { pipeEnds.readOne() } }
  guard pollUntil(seconds: 30, { pipeEnds.readersStarted.load(ordering: .relaxed) == 4 }) else {
    fault.restore()
    fail("the blockers did not start on the idle overcommit threads")
  }
  let items = 16
  let tally = Tally(count: items)
  let all = Group()
  for index in 0..<items { queue.async(group: all) { tally.ran(index) } }
  let stats = RuntimeStats.current
  guard PoolDiagnostics.refusedWorkerStarts >= 1, stats.overcommitThreads == 2,
    tally.total == 0, stats.pendingJobs == items
  else {
    fault.restore()
    fail(
      "under the fault: \(PoolDiagnostics.refusedWorkerStarts) refused starts,"
        + " \(stats.overcommitThreads) overcommit threads, \(tally.total) items ran,"
        + " \(stats.pendingJobs) pending")
  }
  print("refused overcommit starts: \(PoolDiagnostics.refusedWorkerStarts); items wait")

  // 4. The two threads run everything once they are free, the limit still in place.
  pipeEnds.release(2)
  guard blockers.wait(timeout: .seconds(30)) == .success,
    all.wait(timeout: .seconds(30)) == .success
  else {
    fault.restore()
    fail("items did not run after the threads were unblocked (\(tally.total) of \(items))")
  }
  if let wrong = tally.firstWrong {
    fault.restore()
    fail("item \(wrong.index) ran \(wrong.count) times")
  }
  print("all \(items) items ran once on 2 overcommit threads under the fault")
  print("refused overcommit starts in all: \(PoolDiagnostics.refusedWorkerStarts)")

  // 5. Recovery.
  fault.restore()
  let again = Group()
  for _ in 0..<3 { queue.async(group: again) { pipeEnds.readOne() } }
  guard pollUntil(seconds: 30, { pipeEnds.readersStarted.load(ordering: .relaxed) == 7 }) else {
    fail("no new overcommit thread after the fault was removed")
  }
  pipeEnds.release(3)
  guard again.wait(timeout: .seconds(30)) == .success else { fail("the last jobs never ended") }
  pipeEnds.close()
}
