import Glibc
import LoopDispatch
import MainLoop

/// What every entry shape must give a program (issue 33): main-actor code on the main thread
/// (the main loop's), detached tasks on pool workers, `Task.sleep` at least its duration.
/// Prints "ok <name>" and exits 0, or "FAIL <name>: <why>" and exits 1. A watchdog thread
/// fails the run after 20 s (a hang prints nothing otherwise).
public func checkEntryShape(_ name: String) async {
  let watchdog = Queue(label: "entry-shape.watchdog")
  watchdog.after(.seconds(20)) {
    print("FAIL \(name): timed out")
    exit(1)
  }
  var problems: [String] = []
  let before = Deadline.now
  try? await Task.sleep(for: .milliseconds(20))
  if Deadline.now < before + .milliseconds(20) { problems.append("Task.sleep returned early") }
  let onMain = await MainActor.run { EventLoop.main.isInLoopThread }
  if !onMain { problems.append("MainActor.run ran off the main thread") }
  let worker = await Task.detached { NativeThread.currentName }.value
  if !worker.hasPrefix("ld.worker.") { problems.append("a detached task ran on \(worker)") }
  if let first = problems.first {
    print("FAIL \(name): \(first)")
    exit(1)
  }
  print("ok \(name)")
  exit(0)
}
