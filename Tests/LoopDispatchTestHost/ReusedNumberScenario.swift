import Glibc
import LoopDispatch

/// Main-queue read sources (persistent watches on the main loop) on a descriptor number that
/// is closed while watched and then reused by a new pipe: the new source fires, the old one
/// never does, and its cancel handler runs once.
func reusedNumberMainScenario() {
  for round in 0..<100 {
    var first: [Int32] = [0, 0]
    var second: [Int32] = [0, 0]
    guard pipe(&first) == 0 else { fail("pipe failed") }
    let oldFired = MainConfined(0)
    let oldCancelled = MainConfined(0)
    let old: ReadSource
    do { old = try ReadSource(fd: first[0], queue: .main) } catch { fail("\(error)") }
    old.setEventHandler { oldFired.value += 1 }
    old.setCancelHandler { oldCancelled.value += 1 }
    old.activate()
    // Let the main loop register the old watch before its descriptor goes away.
    Queue.runMain(until: .now + .milliseconds(1))
    let number = first[0]
    close(first[0])
    close(first[1])
    guard pipe(&second) == 0 else { fail("pipe failed") }
    // The new pipe usually takes the freed number itself; otherwise force the reuse.
    if second[0] != number {
      guard dup2(second[0], number) == number else { fail("dup2 failed") }
      close(second[0])
    }
    let fired = MainConfined(false)
    let new: ReadSource
    do { new = try ReadSource(fd: number, queue: .main) } catch { fail("\(error)") }
    new.setEventHandler {
      var buffer = [UInt8](repeating: 0, count: 16)
      _ = read(number, &buffer, buffer.count)
      fired.value = true
    }
    let newCancelled = MainConfined(false)
    new.setCancelHandler { newCancelled.value = true }
    new.activate()
    var byte: UInt8 = 1
    _ = write(second[1], &byte, 1)
    if !Queue.runMain(until: { fired.value }, deadline: .now + .seconds(10)) {
      fail("round \(round): the source on the reused number never fired")
    }
    new.cancel()
    old.cancel()
    if !Queue.runMain(
      until: { newCancelled.value && oldCancelled.value == 1 }, deadline: .now + .seconds(10))
    {
      fail("round \(round): a cancel handler never ran")
    }
    if oldFired.value != 0 { fail("round \(round): the old source fired for the new file") }
    if oldCancelled.value != 1 {
      fail("round \(round): the old cancel handler ran \(oldCancelled.value) times")
    }
    close(number)
    close(second[1])
  }
}
