import Glibc
import LoopDispatch

/// A source of a queue whose chain ends at the main queue runs inline on the main loop
/// (holding the chain like a `sync`) and retargets its queue from the handler: the main loop
/// must release the chain it claimed, so both the old and the new parent run work afterwards.
func retargetMainScenario() {
  let oldParent = Queue(label: "retarget-main.old", target: .main)
  let newParent = Queue(label: "retarget-main.new", target: .main)
  let child = Queue(label: "retarget-main.child", target: oldParent)
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else { fail("pipe failed") }
  let (readEnd, writeEnd) = (fds[0], fds[1])
  let source: ReadSource
  do { source = try ReadSource(fd: readEnd, queue: child) } catch { fail("\(error)") }
  let ran = MainConfined(0)
  let targets: [Queue] = [newParent, .global(), oldParent]
  source.setEventHandler {
    var buffer = [UInt8](repeating: 0, count: 16)
    _ = read(readEnd, &buffer, buffer.count)
    child.setTarget(targets[ran.value % targets.count])
    ran.value += 1
  }
  source.activate()
  for round in 1...3 {
    var byte: UInt8 = 1
    _ = write(writeEnd, &byte, 1)
    if !Queue.runMain(until: { ran.value == round }, deadline: .now + .seconds(10)) {
      fail("round \(round): the handler did not run")
    }
    let parentsRan = MainConfined(0)
    oldParent.async { parentsRan.value += 1 }
    newParent.async { parentsRan.value += 1 }
    if !Queue.runMain(until: { parentsRan.value == 2 }, deadline: .now + .seconds(10)) {
      fail("round \(round): a parent queue no longer runs work (chain left locked)")
    }
    // Route the source back through a main chain for the next round.
    child.setTarget(round.isMultiple(of: 2) ? oldParent : newParent)
  }
  let cancelled = MainConfined(false)
  source.setCancelHandler { cancelled.value = true }
  source.cancel()
  if !Queue.runMain(until: { cancelled.value }, deadline: .now + .seconds(10)) {
    fail("the cancel handler did not run")
  }
  close(readEnd)
  close(writeEnd)
}
