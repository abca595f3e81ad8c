import Glibc
import Synchronization
import Testing

@testable import LoopDispatch

// Debug builds: the tests read the pool's event counts (`SharedWriteCount`).
#if DEBUG
  /// Deferred wake-ups (`Pool/WorkerPool+DeferredWake.swift`): a thread outside the pool that
  /// submits while every CPU is taken leaves the parked worker asleep, and wakes it before it
  /// blocks itself; a worker asleep inside a job does not count as taking a CPU. Each test runs
  /// in a process of its own with a budget of two CPUs (`LOOPDISPATCH_CPUS=2`), so the pool has
  /// exactly two workers whatever the machine, and no other suite's jobs move them.
  @Suite struct DeferredWakeTests {
    /// Rules 1 and 2: with one worker running a job and the other parked, a submission from
    /// the main thread wakes nobody and leaves the debt with the thread; the thread's wait on a
    /// semaphore pays it, so the job runs on the parked worker while the first still runs. The
    /// supervisor's tick is kept from waking the parked worker, so only the payment can.
    @Test func aSubmitterWithEveryCPUTakenDefersItsWakeAndPaysItBeforeWaiting() async {
      let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
        _ = twoWorkerPool()
        PoolSupervisor.idleWakeOff.store(true, ordering: .relaxed)
        let release = Flag()
        let running = holdOneWorker(release: release)
        let before = SharedWriteCount.snapshot()
        let ran = Semaphore(value: 0)
        Queue.global().async { ran.signal() }
        let deferred = (SharedWriteCount.snapshot() - before)[PoolEvent.wakeDeferred]
        guard deferred == 1, ThreadSlots.owesWake() else {
          deferredWakeFailure(
            "submission with \(running) worker running: \(deferred) deferrals, owes wake "
              + "\(ThreadSlots.owesWake())")
        }
        // The held worker spins until `release`, set only after this wait.
        guard ran.wait(timeout: .seconds(10)) == .success else {
          deferredWakeFailure("the deferred job did not run: the wait did not pay the wake-up")
        }
        guard !ThreadSlots.owesWake() else { deferredWakeFailure("the debt is still recorded") }
        release.set()
        exit(0)
      }
      let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
      #expect(!errors.contains("DeferredWakeTests:"), "\(errors)")
    }

    /// Rule 4: a worker asleep inside a job (on a semaphore) is not counted as running, so a
    /// submission from outside wakes the parked worker at once instead of deferring.
    @Test func aWorkerAsleepInAJobDoesNotTakeACPU() async {
      let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
        let pool = twoWorkerPool()
        let gate = Semaphore(value: 0)
        let entered = Flag()
        Queue.global().async {
          entered.set()
          _ = gate.wait()
        }
        guard
          waitUntil({
            entered.isSet
              && pool.deferral.blockedInJobs.load(ordering: .sequentiallyConsistent) == 1
              && parkedBaseWorkers(pool) == 1
          })
        else {
          deferredWakeFailure(
            "no worker asleep in its job: blocked \(pool.deferral.blockedInJobs.load(ordering: .relaxed))"
              + " parked \(parkedBaseWorkers(pool))")
        }
        let before = SharedWriteCount.snapshot()
        let ran = Semaphore(value: 0)
        Queue.global().async { ran.signal() }
        let counts = SharedWriteCount.snapshot() - before
        guard counts[PoolEvent.wakeDeferred] == 0, !ThreadSlots.owesWake() else {
          deferredWakeFailure("deferred although the only other worker sleeps in its job")
        }
        _ = ran.wait()
        gate.signal()
        exit(0)
      }
      let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
      #expect(!errors.contains("DeferredWakeTests:"), "\(errors)")
    }

    /// Rule 3: a submitter that defers and then blocks outside LoopDispatch (`poll`, here) does
    /// not strand its job: the supervisor sees it wait a tick with no job started and wakes the
    /// parked worker, while the running worker's job waits for it. Deferrals then stay off for
    /// a while: the next submission in the same state wakes the parked worker at once.
    @Test func aDeferredJobWhoseSubmitterBlocksElsewhereStillRuns() async {
      let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
        let pool = twoWorkerPool()
        let release = Flag()
        _ = holdOneWorker(release: release)
        var before = SharedWriteCount.snapshot()
        let ran = Flag()
        Queue.global().async {
          ran.set()
          release.set()
        }
        guard (SharedWriteCount.snapshot() - before)[PoolEvent.wakeDeferred] == 1 else {
          deferredWakeFailure("the submission was not deferred")
        }
        // Blocks in the kernel, outside LoopDispatch's waits, until the job ran: a few ticks
        // at most (5 ms each); a second is a generous bound for a loaded machine.
        var waited = 0
        while !ran.isSet && waited < 1_000 {
          _ = poll(nil, 0, 1)
          waited += 1
        }
        guard ran.isSet else { deferredWakeFailure("the deferred job did not run within 1 s") }
        guard pool.deferral.isSuspended else {
          deferredWakeFailure("the supervisor's wake did not suspend deferrals")
        }
        ThreadSlots.setOwesWake(false)  // Paid by the supervisor.
        let again = Flag()
        _ = holdOneWorker(release: again)
        before = SharedWriteCount.snapshot()
        let second = Semaphore(value: 0)
        Queue.global().async { second.signal() }
        guard (SharedWriteCount.snapshot() - before)[PoolEvent.wakeDeferred] == 0 else {
          deferredWakeFailure("deferred again while deferrals were suspended")
        }
        _ = second.wait()
        again.set()
        exit(0)
      }
      let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
      #expect(!errors.contains("DeferredWakeTests:"), "\(errors)")
    }
  }

  /// Starts the pool with a budget of two CPUs (in the test's own process) and waits until
  /// both workers are parked.
  private func twoWorkerPool() -> WorkerPool {
    setenv("LOOPDISPATCH_CPUS", "2", 1)
    let pool = WorkerPool.shared
    guard pool.baseThreads == 2, pool.budget.cpus == 2 else {
      deferredWakeFailure("pool of \(pool.baseThreads) workers, budget \(pool.budget.cpus)")
    }
    guard waitUntil({ parkedBaseWorkers(pool) == 2 }) else {
      deferredWakeFailure("the two workers did not park")
    }
    return pool
  }

  /// Runs a job that spins (taking its CPU, never sleeping) until `release`, and waits until the
  /// other worker is parked and nobody searches. Returns the number of running workers.
  private func holdOneWorker(release: Flag) -> Int {
    let started = Flag()
    Queue.global().async {
      started.set()
      while !release.isSet { spinLoopHint() }
    }
    let pool = WorkerPool.shared
    guard
      waitUntil({
        started.isSet && parkedBaseWorkers(pool) == 1
          && pool.searching.load(ordering: .sequentiallyConsistent) == 0
      })
    else {
      deferredWakeFailure("the held job did not start with the other worker parked")
    }
    return 2 - parkedBaseWorkers(pool)
  }

  /// A flag shared with jobs (escaping closures cannot capture an `Atomic` itself).
  private final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    func set(_ newValue: Bool = true) { value.store(newValue, ordering: .releasing) }
  }

  private func parkedBaseWorkers(_ pool: WorkerPool) -> Int {
    (pool.idleWords[0].load(ordering: .sequentiallyConsistent) & 0b11).nonzeroBitCount
  }

  /// Polls `condition` (every millisecond, for up to 10 s).
  private func waitUntil(_ condition: () -> Bool) -> Bool {
    for _ in 0..<10_000 {
      if condition() { return true }
      _ = poll(nil, 0, 1)
    }
    return condition()
  }

  private func deferredWakeFailure(_ message: String) -> Never {
    let line = Array("DeferredWakeTests: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(1)
  }
#endif
