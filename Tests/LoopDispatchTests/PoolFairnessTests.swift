import Glibc
import LoopDispatch
import Synchronization
import Testing

/// Fairness and strict priority across workers, now that each worker has queues of its own
/// (`WorkerPool.swift`): a worker's own work must not starve work that reached the pool from
/// elsewhere, a higher-priority job must not wait behind the worker that submitted it, and
/// jobs queued behind a worker blocked in the kernel must move to a worker that can run them.
///
/// Each test runs in a child process (an exit test) so that the pool holds only its jobs, and
/// occupies every worker the pool starts with (one per CPU) on purpose. Completion is awaited
/// on semaphores with generous timeouts; a timeout is the failure.
@Suite struct PoolFairnessTests {
  /// One self-resubmitting chain per worker keeps every worker's local queue refilled; a job
  /// submitted from the main thread (to the injection queue) must still run.
  @Test func chainsThatRefillTheirWorkersQueuesDoNotStarveOtherWork() async {
    await #expect(processExitsWith: .success) {
      let stop = Flag()
      let chains = workerCount()
      let chainsEnded = LoopDispatch.Semaphore(value: 0)
      for _ in 0..<chains { startChain(stop: stop, ended: chainsEnded, lane: Priority.default) }
      let ran = LoopDispatch.Semaphore(value: 0)
      Queue.global().async { ran.signal() }
      let outcome = ran.wait(timeout: .seconds(10))
      stop.set()
      for _ in 0..<chains { _ = chainsEnded.wait(timeout: .seconds(10)) }
      if outcome == .timedOut { fairnessFailure("a main-thread job waited behind the chains") }
      exit(0)
    }
  }

  /// A low-priority job submits a high-priority job and waits (spinning, so it stays on its
  /// worker) until that job has run, while every other worker runs a low-priority chain: the
  /// high job must reach a worker that looks at the high lane, not wait in the submitter's
  /// own queue.
  @Test func aHighPriorityJobFromABusyWorkerRunsElsewhere() async {
    await #expect(processExitsWith: .success) {
      let stop = Flag()
      let chains = workerCount() - 1
      let chainsEnded = LoopDispatch.Semaphore(value: 0)
      for _ in 0..<chains { startChain(stop: stop, ended: chainsEnded, lane: Priority.low) }
      let highRan = Flag()
      let finished = LoopDispatch.Semaphore(value: 0)
      let timedOut = Flag()
      Queue.global(.low).async {
        Queue.global(.high).async { highRan.set() }
        let deadline = Deadline.now + .seconds(10)
        while !highRan.isSet {
          if Deadline.now > deadline {
            timedOut.set()
            break
          }
          sched_yield()  // Stays runnable: the job keeps its worker.
        }
        finished.signal()
      }
      _ = finished.wait(timeout: .seconds(20))
      stop.set()
      for _ in 0..<chains { _ = chainsEnded.wait(timeout: .seconds(10)) }
      if timedOut.isSet || !highRan.isSet {
        fairnessFailure("the high-priority job waited for the job that submitted it")
      }
      exit(0)
    }
  }

  /// A job fills its worker's local queue and blocks in `read` until the last of those jobs
  /// runs, while every other worker runs a chain (so none is idle to steal): the supervisor
  /// must move the stranded jobs to where the chains' workers find them.
  @Test func jobsQueuedBehindAWorkerBlockedInTheKernelAreMoved() async {
    await #expect(processExitsWith: .success) {
      var fds: [Int32] = [0, 0]
      if pipe(&fds) != 0 { fairnessFailure("pipe failed") }
      let (readEnd, writeEnd) = (fds[0], fds[1])
      let stop = Flag()
      let chains = workerCount() - 1
      let chainsEnded = LoopDispatch.Semaphore(value: 0)
      for _ in 0..<chains { startChain(stop: stop, ended: chainsEnded, lane: Priority.default) }
      let finished = LoopDispatch.Semaphore(value: 0)
      Queue.global().async {
        for _ in 0..<8 { Queue.global().async {} }
        Queue.global().async {
          var byte: UInt8 = 1
          _ = write(writeEnd, &byte, 1)
        }
        var byte: UInt8 = 0
        _ = read(readEnd, &byte, 1)
        finished.signal()
      }
      let outcome = finished.wait(timeout: .seconds(10))
      stop.set()
      for _ in 0..<chains { _ = chainsEnded.wait(timeout: .seconds(10)) }
      if outcome == .timedOut {
        fairnessFailure("the writer stayed queued behind the blocked reader")
      }
      exit(0)
    }
  }
}

/// The pool's workers at start (one per CPU; the pool starts on first use).
private func workerCount() -> Int {
  Queue.global().sync {}
  return Swift.max(1, RuntimeStats.current.poolThreads)
}

/// A job on `lane` that resubmits itself (from its worker, so into that worker's own queue)
/// until `stop`, then signals `ended`.
private func startChain(stop: Flag, ended: LoopDispatch.Semaphore, lane: Priority) {
  @Sendable func step() {
    if stop.isSet {
      ended.signal()
      return
    }
    Queue.global(lane).async(execute: step)
  }
  Queue.global(lane).async(execute: step)
}

private func fairnessFailure(_ message: String) -> Never {
  print("pool fairness check failed: \(message)")
  exit(1)
}

/// A flag set once, read from any thread.
private final class Flag: Sendable {
  private let value = Atomic<Bool>(false)
  var isSet: Bool { value.load(ordering: .acquiring) }
  func set() { value.store(true, ordering: .releasing) }
}
