import Glibc
import LoopDispatch

/// Sources and timers of a serial queue whose target chain ends at the main queue live on the
/// main loop (not the I/O driver or the service loop) and run their handlers on the main
/// thread, inline when the chain is idle, with `Queue.current` naming the queue.
func mainChainScenario() {
  let parent = Queue(label: "main-chain.parent", target: .main)
  let child = Queue(label: "main-chain.child", target: parent)
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else { fail("pipe failed") }
  let (readEnd, writeEnd) = (fds[0], fds[1])
  let before = RuntimeStats.current
  let source: ReadSource
  do { source = try ReadSource(fd: readEnd, queue: child) } catch { fail("\(error)") }
  let ran = MainConfined(0)
  let wrong = MainConfined([String]())
  source.setEventHandler {
    var buffer = [UInt8](repeating: 0, count: 16)
    _ = read(readEnd, &buffer, buffer.count)
    if !EventLoop.main.isInLoopThread { wrong.value.append("handler off the main thread") }
    if Queue.current !== child { wrong.value.append("Queue.current is not the child queue") }
    ran.value += 1
  }
  let cancelled = MainConfined(false)
  source.setCancelHandler { cancelled.value = true }
  source.activate()
  let registered = RuntimeStats.current
  if registered.mainLoop.registeredWatches != before.mainLoop.registeredWatches + 1 {
    fail("the source's watch is not on the main loop")
  }
  if registered.ioWatches != before.ioWatches { fail("the source went to the I/O driver") }
  for round in 1...3 {
    var byte: UInt8 = 1
    _ = write(writeEnd, &byte, 1)
    if !Queue.runMain(until: { ran.value == round }, deadline: .now + .seconds(10)) {
      fail("round \(round): the handler did not run")
    }
  }
  let fired = MainConfined(false)
  child.after(.milliseconds(1)) {
    if !EventLoop.main.isInLoopThread { wrong.value.append("after off the main thread") }
    fired.value = true
  }
  if RuntimeStats.current.mainLoop.pendingTimers == 0 {
    fail("the after timer is not on the main loop")
  }
  source.cancel()
  if !Queue.runMain(until: { cancelled.value && fired.value }, deadline: .now + .seconds(10)) {
    fail("the cancel handler or the timer did not run")
  }
  if !wrong.value.isEmpty { fail(wrong.value.joined(separator: "; ")) }
  close(readEnd)
  close(writeEnd)
}
