import Glibc
import LoopDispatch

/// Five read sources on one pipe: two on the main queue, one on a serial queue targeting
/// main (those three on the main loop, each watching its own duplicate of the descriptor),
/// one on a serial queue and one on a global queue (those two sharing one I/O driver
/// registration). All fire; cancelling one main and one driver source leaves the other
/// three firing (launched by SourceMultiplexTests).
func sourceMultiplexMainScenario() {
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else { fail("pipe failed") }
  let (readEnd, writeEnd) = (fds[0], fds[1])
  _ = fcntl(readEnd, F_SETFL, fcntl(readEnd, F_GETFL) | O_NONBLOCK)
  let targets: [(Queue, onMain: Bool)] = [
    (.main, true), (.main, true), (Queue(label: "multiplex.main-chain", target: .main), true),
    (Queue(label: "multiplex.serial"), false), (.global(), false),
  ]
  let fires = MainConfined([Int](repeating: 0, count: targets.count))
  let cancelled = MainConfined([Bool](repeating: false, count: targets.count))
  let wrong = MainConfined([String]())
  var sources: [ReadSource] = []
  for (index, (queue, onMain)) in targets.enumerated() {
    let source: ReadSource
    do { source = try ReadSource(fd: readEnd, queue: queue, label: "multiplex-\(index)") } catch {
      fail("\(error)")
    }
    // Nobody reads: each source fires again and again while the byte stays unread. The
    // count is kept on the main queue (which also wakes the loop for driver sources).
    source.setEventHandler {
      let onMainThread = EventLoop.main.isInLoopThread
      Queue.main.async {
        if onMainThread != onMain { wrong.value.append("source \(index) on the wrong thread") }
        fires.value[index] += 1
      }
    }
    source.setCancelHandler { Queue.main.async { cancelled.value[index] = true } }
    source.activate()
    if let error = source.registrationError { fail("source \(index): \(error)") }
    sources.append(source)
  }
  var byte: UInt8 = 1
  _ = write(writeEnd, &byte, 1)
  if !Queue.runMain(until: { fires.value.allSatisfy { $0 > 0 } }, deadline: .now + .seconds(30)) {
    fail("not every source fired: \(fires.value)")
  }
  for index in [0, 3] { sources[index].cancel() }
  let twoCancelled = { cancelled.value[0] && cancelled.value[3] }
  if !Queue.runMain(until: twoCancelled, deadline: .now + .seconds(30)) {
    fail("the cancel handlers did not run")
  }
  var buffer = [UInt8](repeating: 0, count: 16)
  _ = read(readEnd, &buffer, buffer.count)
  let before = fires.value
  _ = write(writeEnd, &byte, 1)
  let remaining = [1, 2, 4]
  if !Queue.runMain(
    until: { remaining.allSatisfy { fires.value[$0] > before[$0] } }, deadline: .now + .seconds(30))
  {
    fail("the remaining sources stopped: before \(before), after \(fires.value)")
  }
  for index in remaining { sources[index].cancel() }
  if !Queue.runMain(until: { cancelled.value.allSatisfy { $0 } }, deadline: .now + .seconds(30)) {
    fail("the cancel handlers did not run")
  }
  if !wrong.value.isEmpty { fail(wrong.value.joined(separator: "; ")) }
  close(readEnd)
  close(writeEnd)
}
