import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

@Suite struct WorkItemTests {
  @Test func performsWhenSubmittedWithAsync() {
    let queue = Queue(label: "items")
    let ran = Counter()
    let onQueue = Locked<Bool?>(nil)
    let item = WorkItem {
      ran.increment()
      onQueue.withLock { $0 = Queue.current === queue }
    }
    queue.async(execute: item)
    #expect(item.wait(timeout: .seconds(30)) == .success)
    #expect(ran.current == 1)
    #expect(onQueue.value == true)
    #expect(!item.isCancelled)
    #expect(item.wait(timeout: .now) == .success)  // Stays complete.
  }

  @Test func performRunsOnTheCallingThread() {
    let caller = pthread_self()
    let sameThread = Locked<Bool?>(nil)
    let item = WorkItem { sameThread.withLock { $0 = pthread_self() == caller } }
    #expect(item.wait(timeout: .now) == .timedOut)
    item.perform()
    #expect(sameThread.value == true)
    #expect(item.wait(timeout: .now) == .success)
  }

  @Test func cancelledBeforeStartNeverRunsYetCompletes() {
    let queue = Queue(label: "cancelled")
    let ran = Counter()
    let item = WorkItem { ran.increment() }
    let notifiedBeforeCancel = Latch()
    item.notify(queue: .global()) { notifiedBeforeCancel.open() }
    // Queue it behind a blocker, then cancel it while it waits there.
    let gate = Latch()
    queue.async { _ = gate.wait() }
    queue.async(execute: item)
    item.cancel()
    #expect(item.isCancelled)
    // Cancelling a waiting item completes it at once: no need to wait for the queue.
    #expect(item.wait(timeout: .now) == .success)
    #expect(notifiedBeforeCancel.wait())
    let notifiedAfterCancel = Latch()
    item.notify(queue: .global()) { notifiedAfterCancel.open() }
    #expect(notifiedAfterCancel.wait())
    gate.open()
    queue.async(execute: item)  // Submitting it again does nothing either.
    item.perform()
    queue.sync {}
    #expect(ran.current == 0)
  }

  @Test func cancelWhileRunningDoesNotStopIt() {
    let started = Latch()
    let release = Latch()
    let finished = Counter()
    let item = WorkItem {
      started.open()
      _ = release.wait()
      finished.increment()
    }
    Queue.global().async(execute: item)
    #expect(started.wait())
    item.cancel()
    #expect(item.isCancelled)
    // Still running: cancel must not have completed it.
    #expect(item.wait(timeout: .milliseconds(20)) == .timedOut)
    release.open()
    #expect(item.wait(timeout: .seconds(30)) == .success)
    #expect(finished.current == 1)
    #expect(item.isCancelled)
  }

  @Test func timedWaitTimesOutWhileTheBodyIsBlockedThenSucceeds() {
    let release = Latch()
    let item = WorkItem { _ = release.wait() }
    Queue.global().async(execute: item)
    for delay in [1, 5, 20] {
      let start = Deadline.now
      #expect(item.wait(timeout: .milliseconds(delay)) == .timedOut)
      #expect(Deadline.now - start >= .milliseconds(delay))
    }
    // A thread asleep in an untimed wait is woken by completion.
    let result = Locked<WaitResult?>(nil)
    let waiter = SyncTestThread.start {
      let outcome = item.wait()
      result.withLock { $0 = outcome }
    }
    #expect(waiter.waitUntilSleeping())
    #expect(result.value == nil)
    release.open()
    #expect(waiter.join())
    #expect(result.value == .success)
    #expect(item.wait(timeout: .seconds(30)) == .success)
  }

  @Test func notifyRunsOnItsQueueAfterTheBody() {
    let workQueue = Queue(label: "work")
    let notifyQueue = Queue(label: "notify")
    let bodyDone = Atomic<Bool>(false)
    let seen = Locked([String]())
    let done = Semaphore(value: 0)
    let gate = Latch()
    workQueue.async { _ = gate.wait() }
    let item = WorkItem {
      bodyDone.store(true, ordering: .sequentiallyConsistent)
    }
    for name in ["a", "b"] {
      item.notify(queue: notifyQueue) {
        let ok =
          Queue.current === notifyQueue && bodyDone.load(ordering: .sequentiallyConsistent)
        seen.withLock { $0.append(ok ? name : "wrong " + name) }
        done.signal()
      }
    }
    workQueue.async(execute: item)
    notifyQueue.sync {}
    #expect(seen.value.isEmpty)  // Not before the body ran.
    gate.open()
    #expect(done.wait(timeout: .seconds(30)) == .success)
    #expect(done.wait(timeout: .seconds(30)) == .success)
    // Registered after completion: runs at once, still on its queue.
    item.notify(queue: notifyQueue) {
      seen.withLock { $0.append(Queue.current === notifyQueue ? "late" : "wrong late") }
      done.signal()
    }
    #expect(done.wait(timeout: .seconds(30)) == .success)
    notifyQueue.sync {}
    #expect(seen.value == ["a", "b", "late"])
  }

  @Test func runsNoEarlierThanTheDeadlineWhenScheduledWithAfter() {
    let queue = Queue(label: "after-item")
    let firedAt = Locked<Deadline?>(nil)
    let onQueue = Locked<Bool?>(nil)
    let item = WorkItem {
      firedAt.withLock { $0 = .now }
      onQueue.withLock { $0 = Queue.current === queue }
    }
    let deadline = Deadline.now + .milliseconds(20)
    queue.after(deadline: deadline, execute: item)
    #expect(item.wait(timeout: .seconds(30)) == .success)
    #expect(onQueue.value == true)
    if let fired = firedAt.value {
      #expect(fired >= deadline)
      #expect(fired - deadline < .seconds(10))
    } else {
      Issue.record("the item did not run")
    }
  }

  @Test func cancellingTheItemBeforeItsDeadlineStopsIt() {
    let queue = Queue(label: "after-cancel")
    let ran = Counter()
    let item = WorkItem { ran.increment() }
    let deadline = Deadline.now + .milliseconds(30)
    let delayed = queue.after(deadline: deadline, execute: item)
    item.cancel()
    #expect(item.wait(timeout: .now) == .success)
    #expect(!delayed.isCancelled)  // Only the item was cancelled; the timer still fires.
    // A later timer on the same serial queue runs after anything the first one submitted.
    let witness = Latch()
    queue.after(deadline: deadline + .milliseconds(10)) { witness.open() }
    #expect(witness.wait())
    #expect(ran.current == 0)
  }
}
