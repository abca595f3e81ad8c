import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// The overcommit global queues (`Queue.global(_:overcommit: true)`, `Pool/Overcommit.swift`).
///
/// The pool-wide cases run each in a process of its own (exit tests), as `PoolTests` do: they
/// count the process's threads, need a fresh pool, or set an override before the pool starts.
/// Exit code 0 means every check passed; other codes name the failed check. Every wait has a
/// generous limit, so a pool that cannot run the program fails instead of hanging.
@Suite struct OvercommitTests {
  /// Program (a) of issue 20: 32 serial queues targeting the overcommit queue each run one
  /// item that busy-waits (no system call) until all 32 have started. Plain workers, one per
  /// CPU, never grow for runnable work, so only a thread per item lets this finish.
  @Test func serialQueuesOnTheOvercommitQueueAllStartWhileEveryItemSpins() async {
    await #expect(processExitsWith: .success) {
      setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "600000", 1)  // No retirement during the checks.
      let count = 32
      let base = RuntimeStats.current.poolThreads
      let started = Atomic<Int>(0)
      let finished = Counter()
      let done = Latch()
      let give = Deadline.now + .seconds(60)
      let queues = (0..<count).map {
        Queue(label: "spinner.\($0)", target: Queue.global(overcommit: true))
      }
      for queue in queues {
        queue.async {
          started.wrappingAdd(1, ordering: .relaxed)
          // Busy-wait: runnable all along, never blocked in the kernel.
          while started.load(ordering: .relaxed) < count {
            if Deadline.now > give { return }
          }
          if finished.increment() == count { done.open() }
        }
      }
      guard done.wait(seconds: 60) else { exit(2) }
      let stats = RuntimeStats.current
      // Every item ran at once on a thread of its own; the plain pool did not grow.
      guard stats.overcommitThreads >= count else { exit(3) }
      guard stats.poolThreads - stats.overcommitThreads == base else { exit(4) }
      exit(0)
    }
  }

  /// Program (b) of issue 20: 128 jobs on the high-priority overcommit queue each wait in a
  /// `usleep` loop until all 128 have arrived: more than the plain pool's cap of 64.
  @Test func highPriorityOvercommitJobsWaitingInSleepLoopsAllArrive() async {
    await #expect(processExitsWith: .success) {
      setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "600000", 1)  // No retirement during the checks.
      let count = 128
      let arrived = Atomic<Int>(0)
      let finished = Counter()
      let done = Latch()
      let give = Deadline.now + .seconds(60)
      for _ in 0..<count {
        Queue.global(.high, overcommit: true).async {
          guard Queue.current === Queue.global(.high, overcommit: true) else { exit(5) }
          arrived.wrappingAdd(1, ordering: .relaxed)
          while arrived.load(ordering: .relaxed) < count {
            if Deadline.now > give { return }
            usleep(1_000)
          }
          if finished.increment() == count { done.open() }
        }
      }
      guard done.wait(seconds: 60) else { exit(2) }
      exit(RuntimeStats.current.overcommitThreads >= count ? 0 : 3)
    }
  }

  /// 400 blocking overcommit jobs: the pool stops at 255 threads (plain ones included), the
  /// jobs beyond wait in the lane, and all run as threads free up.
  @Test func aBurstOfBlockingJobsStopsAt255ThreadsAndStillFinishes() async {
    await #expect(processExitsWith: .success) {
      setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "600000", 1)  // No retirement during the checks.
      let limit = 255
      let count = 400
      let plain = RuntimeStats.current.poolThreads
      let room = limit - plain
      let started = Counter()
      let finished = Counter()
      let release = Latch()
      let allStarted = Latch()
      let done = Latch()
      for _ in 0..<count {
        Queue.global(overcommit: true).async {
          if started.increment() == room { allStarted.open() }
          _ = release.wait(seconds: 60)  // Blocked in the kernel.
          if finished.increment() == count { done.open() }
        }
      }
      // Every submission has returned: any thread the pool was going to start for the burst
      // while the jobs block has been started (starts are made by the submitter).
      guard allStarted.wait(seconds: 60) else { exit(2) }
      let full = RuntimeStats.current
      guard full.poolThreads <= limit else { exit(3) }
      guard full.poolThreads == limit else { exit(9) }
      guard full.overcommitThreads == room else { exit(4) }
      guard started.current == room, full.pendingJobs == count - room else { exit(5) }
      guard threadNames(prefix: "ld.oc.").count <= room else { exit(6) }
      release.open()
      guard done.wait(seconds: 60) else { exit(7) }
      let after = RuntimeStats.current
      exit(after.poolThreads <= limit && started.current == count ? 0 : 8)
    }
  }

  /// With the plain workers all busy (runnable) and plain jobs waiting, idle overcommit
  /// threads do not take the plain jobs, and the plain pool does not grow: it keeps one
  /// thread per CPU. Plain jobs run on `ld.worker.*` threads only.
  @Test func idleOvercommitThreadsLeavePlainWorkToThePlainWorkers() async {
    await #expect(processExitsWith: .success) {
      setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "600000", 1)  // Before the pool starts.
      let base = RuntimeStats.current.poolThreads
      // Eight overcommit threads, then idle.
      let helpers = 8
      let arrived = Atomic<Int>(0)
      let helped = Latch()
      let helpersDone = Counter()
      for _ in 0..<helpers {
        Queue.global(overcommit: true).async {
          arrived.wrappingAdd(1, ordering: .relaxed)
          while arrived.load(ordering: .relaxed) < helpers { usleep(1_000) }
          if helpersDone.increment() == helpers { helped.open() }
        }
      }
      guard helped.wait(seconds: 60) else { exit(2) }
      guard waitUntil({ $0.parkedWorkers == $0.poolThreads }) else { exit(3) }
      // Every plain worker spins; then plain jobs wait in the lane.
      let release = Atomic<Bool>(false)
      let spinning = Counter()
      for _ in 0..<base {
        Queue.global().async {
          spinning.increment()
          while !release.load(ordering: .acquiring) {}
        }
      }
      while spinning.current < base { sched_yield() }
      let extra = 4 * base
      let names = Locked([String]())
      let extraDone = Latch()
      for _ in 0..<extra {
        Queue.global().async {
          let count = names.withLock { list -> Int in
            list.append(currentThreadName())
            return list.count
          }
          if count == extra { extraDone.open() }
        }
      }
      // Twenty supervisor ticks with plain work waiting: chances to grow or to hand it over.
      guard waitForSupervisorTicks(20) else { exit(4) }
      let held = RuntimeStats.current
      guard names.value.isEmpty else { exit(5) }
      guard held.poolThreads - held.overcommitThreads == base else { exit(6) }
      guard held.overcommitThreads == helpers, held.pendingJobs == extra else { exit(7) }
      release.store(true, ordering: .releasing)
      guard extraDone.wait(seconds: 60) else { exit(8) }
      exit(names.value.allSatisfy { $0.hasPrefix("ld.worker.") } ? 0 : 9)
    }
  }

  /// Idle overcommit threads exit after the idle retirement time; the plain workers stay.
  /// The child always exits 0 and writes its verdict, with the counts it saw, to standard
  /// error, so that a failure on CI says which count was off (a failed exit test shows no
  /// output).
  @Test func idleOvercommitThreadsRetire() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      func verdict(_ text: String) -> Never {
        let line = Array("\(text)\n".utf8)
        line.withUnsafeBytes { _ = write(2, $0.baseAddress!, $0.count) }
        exit(0)
      }
      setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "50", 1)  // Before the pool starts.
      let base = RuntimeStats.current.poolThreads
      let count = 16
      let arrived = Atomic<Int>(0)
      let finished = Counter()
      let done = Latch()
      for _ in 0..<count {
        Queue.global(.low, overcommit: true).async {
          arrived.wrappingAdd(1, ordering: .relaxed)
          while arrived.load(ordering: .relaxed) < count { usleep(1_000) }
          if finished.increment() == count { done.open() }
        }
      }
      guard done.wait(seconds: 60) else { verdict("FAIL: the jobs did not finish") }
      guard waitUntil({ $0.overcommitThreads == 0 }) else {
        verdict("FAIL: \(RuntimeStats.current.overcommitThreads) overcommit threads left")
      }
      guard waitUntil({ _ in threadNames(prefix: "ld.oc.").isEmpty }) else {
        verdict("FAIL: threads still named ld.oc.: \(threadNames(prefix: "ld.oc."))")
      }
      // Retirement is asynchronous: poll until the pool is back to its plain workers.
      let settled = waitUntil {
        $0.poolThreads == base && workerThreadNames().count == base
      }
      if !settled {
        let names = allThreadNames().sorted().joined(separator: ", ")
        verdict(
          "FAIL: base \(base), pool threads \(RuntimeStats.current.poolThreads) "
            + "(overcommit \(RuntimeStats.current.overcommitThreads)), "
            + "ld.worker. names \(workerThreadNames().count); threads: \(names)")
      }
      verdict("VERDICT ok")
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("VERDICT ok"), "\(text)")
  }

  /// Many small overcommit jobs from several threads, some submitting more, while workers
  /// finish, park and retire (1 ms): each job runs exactly once and none is stranded.
  @Test func churnRunsEveryOvercommitJobOnce() async {
    await #expect(processExitsWith: .success) {
      setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "1", 1)  // Before the pool starts.
      let producers = 4
      let perProducer = scaled(2_000)
      let total = producers * perProducer * 2
      let runs = (0..<total).map { _ in Counter() }
      let finished = Counter()
      let done = Latch()
      @Sendable func run(_ index: Int) {
        runs[index].increment()
        if finished.increment() == total { done.open() }
      }
      let threads = (0..<producers).map { producer in
        startThread {
          for step in 0..<perProducer {
            let index = (producer * perProducer + step) * 2
            let priority = Priority.allCases[step % Priority.allCases.count]
            Queue.global(priority, overcommit: true).async {
              // A job that submits another: the second may find this worker's lane empty.
              Queue.global(priority, overcommit: true).async { run(index + 1) }
              run(index)
            }
            if step % 64 == 0 { usleep(200) }  // Pauses let idle workers park and retire.
          }
        }
      }
      for thread in threads { pthread_join(thread, nil) }
      guard done.wait(seconds: 60) else { exit(2) }
      exit(runs.allSatisfy { $0.current == 1 } ? 0 : 3)
    }
  }

  /// The eight global queues are distinct process-lifetime roots, labelled after their
  /// priority; the overcommit ones work as targets and with every submission form.
  @Test func overcommitQueuesAreDistinctRootsThatWorkAsTargets() async throws {
    for priority in Priority.allCases {
      let overcommit = Queue.global(priority, overcommit: true)
      #expect(overcommit === Queue.global(priority, overcommit: true))
      #expect(overcommit !== Queue.global(priority))
      #expect(Queue.global(priority, overcommit: false) === Queue.global(priority))
      #expect(overcommit.label == "loopdispatch.global.\(priority).overcommit")
      #expect(overcommit.priority == priority)
      #expect(overcommit.target == nil)
      #expect(overcommit.isOvercommit)
      #expect(!Queue.global(priority).isOvercommit)
    }
    let root = Queue.global(.high, overcommit: true)
    let serial = Queue(label: "on-overcommit", target: root)
    #expect(!serial.isOvercommit && serial.priority == .high && serial.target === root)
    #expect(Queue(label: "default-target").target === Queue.global())

    // sync on the root and on a serial child runs inline and returns the value.
    #expect(root.sync { Queue.current === root } == true)
    #expect(serial.sync { Queue.current === serial } == true)
    // async: in order on the serial child, on the root itself.
    let order = Locked([Int]())
    let group = Group()
    for index in 0..<50 {
      serial.async(group: group) { order.withLock { $0.append(index) } }
    }
    let onRoot = Counter()
    for _ in 0..<20 { root.async(group: group) { onRoot.increment() } }
    #expect(group.wait(timeout: .seconds(60)) == .success)
    #expect(order.value == Array(0..<50) && onRoot.current == 20)
    // A concurrent child with a barrier.
    let concurrent = Queue(label: "concurrent-on-overcommit", attributes: .concurrent, target: root)
    let ran = Counter()
    for _ in 0..<10 { concurrent.async(group: group) { ran.increment() } }
    concurrent.async(group: group, flags: .barrier) { ran.add(100) }
    #expect(group.wait(timeout: .seconds(60)) == .success)
    #expect(ran.current == 110)
    // after: runs no earlier than its delay, on the root.
    let fired = Latch()
    let start = Deadline.now
    let onQueue = Atomic<Bool>(false)
    _ = root.after(.milliseconds(20)) {
      onQueue.store(Queue.current === root, ordering: .relaxed)
      fired.open()
    }
    #expect(fired.wait(seconds: 60))
    #expect(Deadline.now - start >= .milliseconds(20) && onQueue.load(ordering: .relaxed))
    // apply spreads over the queue and returns when every iteration has.
    let sum = Atomic<Int>(0)
    root.apply(iterations: 1_000) { sum.wrappingAdd($0, ordering: .relaxed) }
    #expect(sum.load(ordering: .relaxed) == 999 * 1_000 / 2)
    // The figures name the overcommit root apart from the plain one.
    let stats = RuntimeStats.current.queues.first { $0.label == root.label }
    #expect((stats?.submitted ?? 0) >= 20)
  }
}

/// Waits (polling /proc and the runtime's figures, up to 20 s) until `condition` holds.
private func waitUntil(_ condition: (RuntimeStats) -> Bool) -> Bool {
  let start = Deadline.now
  while !condition(RuntimeStats.current) {
    if Deadline.now - start > .seconds(20) { return false }
    // A poll period, not synchronisation: the loop ends on the condition.
    usleep(1_000)
  }
  return true
}

/// The calling thread's kernel name.
private func currentThreadName() -> String {
  readSmallFile("/proc/thread-self/comm").trimmingSuffix("\n")
}

/// Names of this process's threads that begin with `prefix`.
/// The kernel names of every thread of this process.
private func allThreadNames() -> [String] {
  taskIDs().map { readSmallFile("/proc/self/task/\($0)/comm").trimmingSuffix("\n") }
}

private func threadNames(prefix: String) -> [String] {
  taskIDs().map { readSmallFile("/proc/self/task/\($0)/comm") }.filter { $0.hasPrefix(prefix) }
}

/// Waits until the supervisor thread has slept and woken `ticks` times (its voluntary context
/// switches), or 60 s; false on time-out.
private func waitForSupervisorTicks(_ ticks: Int) -> Bool {
  guard
    let tid = taskIDs().first(where: {
      readSmallFile("/proc/self/task/\($0)/comm").hasPrefix("ld.supervisor")
    })
  else { return false }
  func switches() -> Int {
    for line in readSmallFile("/proc/self/task/\(tid)/status").split(separator: "\n")
    where line.hasPrefix("voluntary_ctxt_switches:") {
      return Int(line.split(separator: "\t").last.map(String.init) ?? "") ?? 0
    }
    return 0
  }
  let first = switches()
  let start = Deadline.now
  while switches() < first + ticks {
    if Deadline.now - start > .seconds(60) { return false }
    // A poll period, not synchronisation: the loop ends on the counted ticks.
    usleep(1_000)
  }
  return true
}

/// The ids of this process's threads.
private func taskIDs() -> [String] {
  guard let directory = opendir("/proc/self/task") else { return [] }
  defer { closedir(directory) }
  var ids: [String] = []
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    if Int(name) != nil { ids.append(name) }
  }
  return ids
}

extension String {
  fileprivate func trimmingSuffix(_ suffix: String) -> String {
    hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
  }
}

/// A refused thread start (`pthread_create` failing under `RLIMIT_AS`) leaves overcommit jobs
/// waiting for the overcommit threads there are: one warning line per episode of refusals,
/// not one per refusal; every job runs once, and threads start again once the fault is gone
/// (`OvercommitFailureScenario.swift`). A start that succeeds ends an episode: under
/// AddressSanitizer the process's mappings shrink now and then, the supervisor's retry
/// found room for a fifth thread, and the next refusal began a second episode (two lines,
/// "continuing with 4 workers" then "with 5"). So the count of lines is checked against the
/// refusals (each of the 16 waiting jobs called for a thread), not against exactly one.
@Suite struct OvercommitFaultTests {
  @Test func refusedThreadStartsLeaveJobsToTheThreadsThereAre() {
    let result = runProgram("LoopDispatchTestHost", ["overcommit-thread-failure"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok overcommit-thread-failure"), "\(result.output)")
    let warnings = result.errorOutput.split(separator: "\n").filter {
      $0.hasPrefix(PoolFaultTests.warningPrefix)
    }
    let refusals = result.output.split(separator: "\n")
      .first { $0.hasPrefix("refused overcommit starts in all: ") }
      .flatMap { Int($0.split(separator: " ").last ?? "") }
    #expect(!warnings.isEmpty, "stderr: \(result.errorOutput)")
    #expect((refusals ?? 0) >= 16, "\(result.output)")
    #expect(warnings.count * 4 <= (refusals ?? 0), "stderr: \(result.errorOutput)")
  }
}
