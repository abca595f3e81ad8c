import Glibc
import LoopDispatch

/// A main-queue read source keeps a persistent watch; while its handler cannot run (the
/// source is suspended) readiness must not wake the loop turn after turn.
func mainSourceNoSpin() {
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else { fail("pipe") }
  let (readEnd, writeEnd) = (fds[0], fds[1])
  let source: ReadSource
  do {
    source = try ReadSource(fd: readEnd, queue: .main)
  } catch {
    fail("\(error)")
  }
  let reads = MainConfined(0)
  source.setEventHandler {
    var buffer = [UInt8](repeating: 0, count: 64)
    if read(readEnd, &buffer, 64) > 0 { reads.value += 1 }
  }
  source.setCancelHandler {
    close(readEnd)
    close(writeEnd)
  }
  source.activate()
  var byte: UInt8 = 1
  _ = write(writeEnd, &byte, 1)
  guard Queue.runMain(until: { reads.value == 1 }, deadline: .now + .seconds(10)) else {
    fail("the handler never ran")
  }
  source.suspend()
  _ = write(writeEnd, &byte, 1)  // Readable while suspended.
  let turnsBefore = EventLoop.main.turnCount
  Queue.runMain(until: .now + .milliseconds(100))
  let turns = EventLoop.main.turnCount - turnsBefore
  // A spinning watch would make thousands of turns in 100 ms; a paused one a handful.
  if turns > 50 { fail("\(turns) loop turns while the source was suspended") }
  if reads.value != 1 { fail("the handler ran while suspended") }
  source.resume()
  guard Queue.runMain(until: { reads.value == 2 }, deadline: .now + .seconds(10)) else {
    fail("the handler did not run after resume")
  }
  source.cancel()
}

/// The opt-in stall watchdog names the queue whose item holds the main thread too long,
/// while it is still running; quick items are not reported.
func mainStallScenario() {
  Queue.setMainStallThreshold(.milliseconds(20))
  let ui = Queue(label: "ui", target: .main)
  let done = MainConfined(false)
  for _ in 0..<100 { Queue.main.async {} }  // Quick items: never reported.
  ui.async {
    let until = Deadline.now + .milliseconds(120)  // A deliberate 120 ms stall.
    while Deadline.now < until {}
  }
  Queue.main.async { done.value = true }
  guard Queue.runMain(until: { done.value }, deadline: .now + .seconds(30)) else {
    fail("main queue did not finish")
  }
  Queue.setMainStallThreshold(nil)
  let stats = RuntimeStats.current
  if stats.mainStalls != 1 { fail("\(stats.mainStalls) stalls counted, expected 1") }
  // The last item was submitted before the stall began, so it waited at least 120 ms.
  guard let main = stats.queues.first(where: { $0.kind == .main }) else {
    fail("the main queue is missing from the snapshot")
  }
  if main.maxWait < .milliseconds(120) { fail("main queue max wait \(main.maxWait)") }
  if main.submitted < 102 || main.depth != 0 {
    fail("main queue submitted \(main.submitted), depth \(main.depth)")
  }
}
