import Dispatch
import Glibc
import LoopDispatch
import MainLoop

// Dispatch's own main queue under LoopDispatch's main loop (`DispatchMainQueueBridge`): a
// library's `DispatchQueue.main` work, and `@MainActor` work without
// `ConcurrencyIntegration.install()` (Swift's default main executor on Linux is that queue),
// must run, on the main thread. Without the bridge nothing drains it and these time out.

/// `DispatchQueue.main.async` and `asyncAfter` under `Queue.runMain()`, in order, on the main
/// thread, interleaved with LoopDispatch's own main queue.
func dispatchMainQueueScenario() {
  // Touched only on the main thread (every block below runs there, or the check fails).
  nonisolated(unsafe) let log = UnsafeMutablePointer<[String]>.allocate(capacity: 1)
  log.initialize(to: [])
  DispatchQueue.main.async {
    if !EventLoop.main.isInLoopThread {
      fail("dispatch-main-queue", "async ran off the main thread")
    }
    log.pointee.append("dispatch 1")
  }
  Queue.main.async { log.pointee.append("loopdispatch 1") }
  DispatchQueue.main.async { log.pointee.append("dispatch 2") }
  let start = Deadline.now
  DispatchQueue.main.asyncAfter(deadline: .now() + .milliseconds(20)) {
    if Deadline.now < start + .milliseconds(20) { fail("dispatch-main-queue", "asyncAfter early") }
    log.pointee.append("dispatch after")
  }
  let done = Queue.runMain(
    until: { log.pointee.count == 4 }, deadline: .now + .seconds(20))
  let order = log.pointee
  guard done else { fail("dispatch-main-queue", "timed out; ran \(order)") }
  // FIFO within each queue; the interleaving between them is not pinned.
  let dispatchOnly = order.filter { $0.hasPrefix("dispatch") }
  guard dispatchOnly == ["dispatch 1", "dispatch 2", "dispatch after"] else {
    fail("dispatch-main-queue", "Dispatch's main queue ran out of order: \(order)")
  }
  print("ok dispatch-main-queue")
  exit(0)
}

/// `@MainActor` work without `install()`, and `MainActor.run` from a detached task, under
/// `Queue.runMain()`.
func mainActorWithoutInstallScenario() {
  Task { @MainActor in
    if !EventLoop.main.isInLoopThread { fail("main-actor-no-install", "off the main thread") }
    let fromPool = await Task.detached { await MainActor.run { EventLoop.main.isInLoopThread } }
      .value
    if !fromPool { fail("main-actor-no-install", "MainActor.run ran off the main thread") }
    print("ok main-actor-no-install")
    exit(0)
  }
  Queue.runMain(until: .now + .seconds(20))
  fail("main-actor-no-install", "timed out: the main actor's work never ran")
}

private func fail(_ name: String, _ why: String) -> Never {
  print("FAIL \(name): \(why)")
  exit(1)
}
