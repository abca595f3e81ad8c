import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// GCD's documented behaviour that the Swift API shares with the C API (issue: C programs
/// written for GCD run unchanged): held handlers, late registration handlers, retargeting a
/// source before activation, widths, `DataSource.Merge.replace`, the main and global queues
/// ignoring suspension and contexts.
@Suite struct GCDFidelityTests {
  /// object.h: every block of a suspended source waits, the cancel handler included.
  @Test func theCancelHandlerOfASuspendedSourceWaitsForResume() {
    let queue = Queue(label: "held-cancel")
    let source = DataSource(merge: .add, queue: queue)
    let cancelRuns = Counter()
    let cancelled = Latch()
    source.setCancelHandler {
      cancelRuns.increment()
      cancelled.open()
    }
    source.activate()
    source.suspend()
    source.cancel()
    queue.sync {}  // Had `cancel` submitted the handler, it would have run by now.
    #expect(cancelRuns.current == 0)
    source.resume()
    #expect(cancelled.wait())
    #expect(cancelRuns.current == 1)
  }

  /// source.h: a registration handler set after registration is invoked immediately.
  @Test func aRegistrationHandlerSetAfterActivationRuns() {
    let queue = Queue(label: "late-registration")
    let source = DataSource(merge: .or, queue: queue)
    source.activate()
    queue.sync {}
    let registered = Latch()
    source.setRegistrationHandler { registered.open() }
    #expect(registered.wait())
    source.cancel()
  }

  /// A source's queue may change until it is activated.
  @Test func aSourceRetargetedBeforeActivationDeliversOnItsNewQueue() {
    let first = Queue(label: "first")
    let second = Queue(label: "second")
    let source = DataSource(merge: .add, queue: first)
    let seen = Locked<String?>(nil)
    let delivered = Latch()
    source.setEventHandler {
      seen.withLock { $0 = Queue.current?.label }
      delivered.open()
    }
    source.setTarget(second)
    #expect(source.queue === second)
    source.activate()
    source.post(1)
    #expect(delivered.wait())
    #expect(seen.value == "second")
    source.cancel()
  }

  @Test func retargetingAnActiveSourceTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let source = DataSource(merge: .add, queue: Queue(label: "active"), label: "active")
      source.activate()
      source.setTarget(Queue(label: "other"))
    }
    expectMessage(result, "setTarget on source \"active\" after it was activated")
  }

  /// `.replace` keeps the latest value; posting zero withdraws one not yet delivered.
  @Test func aReplacingDataSourceKeepsTheLatestValue() {
    let queue = Queue(label: "replace")
    let source = DataSource(merge: .replace, queue: queue)
    let values = Locked([UInt]())
    source.setEventHandler { values.withLock { $0.append(source.data) } }
    source.post(3)
    source.post(5)
    source.activate()
    queue.sync {}
    let first = Latch()
    queue.async { first.open() }
    #expect(first.wait())
    source.suspend()
    source.post(9)
    source.post(0)  // Withdraws the 9.
    source.resume()
    source.post(4)
    let done = Latch()
    // Deliveries are queue items: once this one runs after the 4's, both are in.
    queue.async { done.open() }
    #expect(done.wait())
    queue.sync {}
    #expect(values.value == [5, 4])
    source.cancel()
  }

  /// `setWidth` changes how many items run at once; a wider queue starts waiting items.
  @Test func setWidthLimitsAndThenReleasesConcurrency() {
    let queue = Queue(label: "width", attributes: .concurrent)
    queue.setWidth(1)
    #expect(queue.width == 1)
    let running = Atomic<Int>(0)
    let most = Atomic<Int>(0)
    let bothIn = Semaphore(value: 0)
    let release = Latch()
    let group = Group()
    for _ in 0..<2 {
      queue.async(group: group) {
        let now = running.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
        _ = most.max(now, ordering: .sequentiallyConsistent)
        bothIn.signal()
        _ = release.wait()
        running.wrappingSubtract(1, ordering: .sequentiallyConsistent)
      }
    }
    #expect(bothIn.wait(timeout: .seconds(30)) == .success)
    // Width 1: the second item waits while the first holds its slot.
    #expect(bothIn.wait(timeout: .now + .milliseconds(50)) == .timedOut)
    queue.setWidth(2)  // Starts the waiting item beside the first.
    #expect(bothIn.wait(timeout: .seconds(30)) == .success)
    #expect(most.load(ordering: .sequentiallyConsistent) == 2)
    release.open()
    #expect(group.wait(timeout: .seconds(30)) == .success)
  }

  /// queue.h: suspend, resume and contexts have no effect on the global queues (and on the
  /// main queue: the `main-thread-queue` scenario).
  @Test func globalQueuesIgnoreSuspensionAndContexts() {
    let global = Queue.global(.low)
    global.suspend()
    global.resume()
    global.resume()  // Unbalanced: no effect, no trap.
    global.context = 5
    #expect(global.context == nil)
    #expect(global.sync { 7 } == 7)
  }

  /// The main thread runs "on" the main queue in any context (queue.h), before `runMain`
  /// too (the `main-thread-queue` scenario of LoopDispatchTestHost needs the main thread).
  @Test func theMainThreadIsOnTheMainQueue() {
    let result = runProgram("LoopDispatchTestHost", ["main-thread-queue"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok main-thread-queue"), "\(result.output)")
  }
}
