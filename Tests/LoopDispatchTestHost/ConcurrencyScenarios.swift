import Glibc
import LoopDispatch
import MainLoop

/// With LoopDispatch installed as Swift's executors: `@MainActor` code runs on the main loop
/// on the main thread, unstructured tasks run on pool workers, and `Task.sleep` works.
func mainActorScenario() {
  ConcurrencyIntegration.install()
  Task { @MainActor in
    var problems: [String] = []
    if !EventLoop.main.isInLoopThread { problems.append("@MainActor task off the main thread") }
    if Queue.current !== Queue.main { problems.append("Queue.current is not the main queue") }
    let worker = await Task.detached { NativeThread.currentName }.value
    if !worker.hasPrefix("ld.worker.") { problems.append("detached task ran on \(worker)") }
    let before = Deadline.now
    try? await Task.sleep(for: .milliseconds(20))
    if Deadline.now < before + .milliseconds(20) { problems.append("Task.sleep returned early") }
    if !EventLoop.main.isInLoopThread { problems.append("resumed off the main thread") }
    let fromPool = await Task.detached { await MainActor.run { EventLoop.main.isInLoopThread } }
      .value
    if !fromPool { problems.append("MainActor.run from the pool ran off the main thread") }
    MainActor.assertIsolated()
    if let first = problems.first {
      print("FAIL main-actor: \(first)")
      exit(1)
    }
    print("ok main-actor")
    exit(0)
  }
  Queue.runMain()
}
