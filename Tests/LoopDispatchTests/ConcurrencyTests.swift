import Glibc
import MainLoop
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// An actor whose executor is a LoopDispatch serial queue.
actor QueueBackedCounter {
  let queue: Queue
  private(set) var count = 0
  nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }

  init(queue: Queue) { self.queue = queue }

  /// Returns whether the method ran on the actor's queue.
  func increment() -> Bool {
    count += 1
    return Queue.current === queue
  }
}

@Suite struct ConcurrencyTests {
  @Test func actorMethodsRunOnTheirQueue() async {
    let queue = Queue(label: "actor-queue")
    let counter = QueueBackedCounter(queue: queue)
    var allOnQueue = true
    for _ in 0..<1_000 { allOnQueue = await counter.increment() && allOnQueue }
    #expect(allOnQueue)
    #expect(await counter.count == 1_000)
  }

  @Test func assumeIsolatedWorksInPlainClosuresOnTheQueue() async {
    let queue = Queue(label: "assume")
    let counter = QueueBackedCounter(queue: queue)
    let seen = await queue.runAsync {
      counter.assumeIsolated { counter in counter.count }
    }
    #expect(seen == 0)
    #expect(queue.sync { queue.isIsolatingCurrentContext() } == true)
    #expect(queue.isIsolatingCurrentContext() == false)
  }

  @Test func assumeIsolatedOffTheQueueTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let queue = Queue(label: "elsewhere")
      queue.checkIsolated()
    }
    expectMessage(result, "code isolated to queue \"elsewhere\" is running outside that queue")
  }

  @Test func concurrentQueueCannotRunActorJobs() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let wide = Queue(label: "wide", attributes: .concurrent)
      let counter = QueueBackedCounter(queue: wide)
      _ = await counter.increment()
    }
    expectMessage(result, "queue \"wide\" is not serial and cannot run actor jobs")
  }

  /// On a pool worker: the thread has the pool's worker slot. (Not the kernel's thread name:
  /// the supervisor writes names lazily, a tick late, so a worker that just left a long drain
  /// of a labelled queue may still show that label for a few milliseconds.)
  @Test func tasksPreferringThePoolRunOnWorkers() async {
    let onWorker = await Task(executorPreference: PoolExecutor.shared) {
      ThreadSlots.worker() != nil
    }.value
    #expect(onWorker)
    let insideOnWorker = await withTaskExecutorPreference(PoolExecutor.shared) {
      ThreadSlots.worker() != nil
    }
    #expect(insideOnWorker)
    // The check can fail: this task, with no preference, runs on Swift's own executor (the
    // test process does not install LoopDispatch), whose threads have no worker slot.
    #expect(ThreadSlots.worker() == nil)
    #expect(Priority(TaskPriority.high) == .high)
    #expect(Priority(TaskPriority.medium) == .default)
    #expect(Priority(TaskPriority.utility) == .low)
    #expect(Priority(TaskPriority.background) == .background)
  }

  @Test func runReturnsValuesAndRethrows() async throws {
    let queue = Queue(label: "run")
    let value = try await queue.run { Queue.current?.label }
    #expect(value == "run")
    struct Oops: Error {}
    await #expect(throws: Oops.self) { try await queue.run { throw Oops() } }
  }

  @Test func cancellingBeforeTheWorkStartsMeansItNeverRuns() async {
    let queue = Queue(label: "cancel-run")
    queue.suspend()
    let ran = Counter()
    let task = Task { try await queue.run { ran.increment() } }
    task.cancel()
    let outcome = await task.result
    queue.resume()
    queue.sync {}  // Every item queued before this has run (and skipped the work).
    #expect(ran.current == 0)
    #expect(throws: CancellationError.self) { try outcome.get() }
  }

  @Test func groupSemaphoreAndWorkItemAwait() async throws {
    let group = Group()
    let done = Counter()
    for _ in 0..<100 { Queue.global().async(group: group) { done.increment() } }
    await group.wait()
    #expect(done.current == 100)

    let semaphore = Semaphore(value: 0)
    Queue.global().after(.milliseconds(5)) { semaphore.signal() }
    try await semaphore.acquire()

    let item = WorkItem { done.increment() }
    Queue.global().async(execute: item)
    await item.completion()
    #expect(done.current == 101)
  }

  @Test func sleepIsNeverEarlyAndCancellable() async throws {
    let deadline = Deadline.now + .milliseconds(20)
    try await Queue.global().sleep(until: deadline)
    #expect(Deadline.now >= deadline)
    let task = Task { try await Queue.global().sleep(until: .now + .seconds(3600)) }
    task.cancel()
    await #expect(throws: CancellationError.self) { try await task.value }
  }

  @Test func sourceEventsAsAnAsyncSequence() async {
    let source = DataSource(merge: .add, queue: Queue(label: "events"))
    let total = Task {
      var sum: UInt = 0
      for await value in source.events {
        sum += value
        if sum >= 10 { break }
      }
      return sum
    }
    for _ in 0..<10 { source.post(1) }
    #expect(await total.value == 10)
    #expect(source.isCancelled)
  }
}

extension Queue {
  /// Test helper: runs `work` on the queue and hands its result to the awaiting task.
  func runAsync<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
      async { continuation.resume(returning: work()) }
    }
  }
}
