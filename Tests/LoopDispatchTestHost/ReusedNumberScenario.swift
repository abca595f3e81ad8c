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
    // Closed and reused in one step (`dup2` closes what the number named): never free in
    // between, the number cannot go to another thread of the process (the runtime's
    // supervisor opens a /proc file for a moment), whose descriptor a forced `dup2` would
    // replace.
    guard pipe(&second) == 0 else { fail("pipe failed") }
    guard dup2(second[0], number) == number else { fail("dup2 failed") }
    close(second[0])
    close(first[1])
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

/// A main-queue read source whose descriptor is closed while watched, with the old file kept
/// open through a `dup` and readable, and the number reused by a new pipe: the source never
/// fires, the warning is written once, and the main loop does not wake every turn for the old
/// file (it used to: the stale registration stayed in epoll, level-triggered, forever).
func reusedNumberDupMainScenario() {
  var first: [Int32] = [0, 0]
  var second: [Int32] = [0, 0]
  guard pipe(&first) == 0 else { fail("pipe failed") }
  let fired = MainConfined(0)
  let cancelled = MainConfined(0)
  let source: ReadSource
  do { source = try ReadSource(fd: first[0], queue: .main) } catch { fail("\(error)") }
  source.setEventHandler { fired.value += 1 }
  source.setCancelHandler { cancelled.value += 1 }
  source.activate()
  Queue.runMain(until: .now + .milliseconds(1))
  let number = first[0]
  let keeper = dup(number)  // The old file stays open.
  // Closed and reused in one step, as above.
  guard pipe(&second) == 0 else { fail("pipe failed") }
  guard dup2(second[0], number) == number else { fail("dup2 failed") }
  close(second[0])
  var byte: UInt8 = 1
  _ = write(first[1], &byte, 1)  // The old file is now readable, and stays so.
  let before = RuntimeStats.current.mainLoop.turns
  Queue.runMain(until: .now + .milliseconds(200))
  let turns = RuntimeStats.current.mainLoop.turns - before
  if fired.value != 0 { fail("the source fired \(fired.value) times for a reused number") }
  if turns > 100 { fail("the main loop turned \(turns) times in 200 ms for a stale watch") }
  source.cancel()
  if !Queue.runMain(until: { cancelled.value == 1 }, deadline: .now + .seconds(10)) {
    fail("the cancel handler did not run")
  }
  for fd in [keeper, first[1], number, second[1]] { close(fd) }
}

/// A main-queue read source receiving a stream of events (its file holds bytes the handler
/// does not drain), whose number is given to another, empty pipe from inside a handler while
/// the old file stays open through a `dup`. The source checks its descriptor's identity
/// on its first event and then once a millisecond, not on every event: the stream of
/// events for the old file must still stop, with one warning, and leave the loop asleep.
/// (Checked on the first event only, the source would run its handler for the old file on
/// every turn for ever.)
func reusedNumberStreamingMainScenario() {
  var old: [Int32] = [0, 0]
  var new: [Int32] = [0, 0]
  guard pipe(&old) == 0, pipe(&new) == 0 else { fail("pipe failed") }
  for fd in old + new { _ = fcntl(fd, F_SETFL, O_NONBLOCK) }
  var bytes = [UInt8](repeating: 7, count: 4096)
  guard write(old[1], &bytes, bytes.count) == bytes.count else { fail("write failed") }
  let number = old[0]
  let newRead = new[0]
  let runs = MainConfined(0)
  let runsAfterReuse = MainConfined(0)
  let keeper = MainConfined<Int32>(-1)
  let cancelled = MainConfined(0)
  let source: ReadSource
  do { source = try ReadSource(fd: number, queue: .main) } catch { fail("\(error)") }
  source.setEventHandler {
    var byte: UInt8 = 0
    _ = read(number, &byte, 1)  // One byte of the old file; once reused, EAGAIN.
    runs.value += 1
    if keeper.value >= 0 {
      runsAfterReuse.value += 1
    } else if runs.value == 50 {
      let kept = dup(number)  // The old file stays open, and readable.
      if kept >= 0 && dup2(newRead, number) == number { keeper.value = kept }
    }
  }
  source.setCancelHandler { cancelled.value += 1 }
  source.activate()
  // The stream stops once the source sees the reuse: no handler run for 100 ms.
  var lastRuns = -1
  let deadline = Deadline.now + .seconds(30)
  while runs.value != lastRuns {
    lastRuns = runs.value
    Queue.runMain(until: .now + .milliseconds(100))
    if Deadline.now > deadline { fail("the stale source still ran after 30 s: \(runs.value)") }
  }
  if keeper.value < 0 { fail("the number was never reused (\(runs.value) runs)") }
  // Bytes left in the old file: its events were not drained, so only the check stopped them.
  var left: Int32 = 0
  guard ioctl(keeper.value, UInt(FIONREAD), &left) == 0, left > 4000 else {
    fail("the old file was drained (\(left) bytes left)")
  }
  let before = RuntimeStats.current.mainLoop.turns
  Queue.runMain(until: .now + .milliseconds(200))
  let turns = RuntimeStats.current.mainLoop.turns - before
  if turns > 100 { fail("the main loop turned \(turns) times in 200 ms for a stale watch") }
  print("runs after the reuse: \(runsAfterReuse.value)")
  source.cancel()
  if !Queue.runMain(until: { cancelled.value == 1 }, deadline: .now + .seconds(10)) {
    fail("the cancel handler did not run")
  }
  for fd in [keeper.value, old[1], number, new[1]] { close(fd) }
}

/// Stale events that come slowly: a main-queue read source gets one event at a time, each at
/// least 1.1 ms after the one before (a byte written, which the handler drains through a
/// `dup` of the old file, so the file stays open after the reuse). The source checks its
/// descriptor's identity on its first event, then on each 8th event that comes at least 1 ms
/// after the last check that passed: with the number reused right after the check at the
/// 16th event, the old file's events reach the handler up to 7 more times however late they
/// come (the bound Delivery.md and Misuse.md state), and the next 8th event drops the watch,
/// with one warning; later events never reach the loop. (16: a rule looking at the time less
/// often, every 16th or 32nd event, lets 15 through here; checked.)
func reusedNumberSlowMainScenario() {
  var old: [Int32] = [0, 0]
  var new: [Int32] = [0, 0]
  guard pipe(&old) == 0, pipe(&new) == 0 else { fail("pipe failed") }
  for fd in old + new { _ = fcntl(fd, F_SETFL, O_NONBLOCK) }
  let number = old[0]
  let keeper = dup(number)  // Drains the old file, and keeps it open after the reuse.
  guard keeper >= 0 else { fail("dup failed") }
  let runs = MainConfined(0)
  let cancelled = MainConfined(0)
  let source: ReadSource
  do { source = try ReadSource(fd: number, queue: .main) } catch { fail("\(error)") }
  source.setEventHandler {
    var buffer = [UInt8](repeating: 0, count: 64)
    while read(keeper, &buffer, buffer.count) > 0 {}
    runs.value += 1
  }
  source.setCancelHandler { cancelled.value += 1 }
  source.activate()
  /// Writes one byte to the old file and runs the main loop until libevent has called the
  /// source's watch for it (the handler ran, or the check dropped the watch), then for
  /// 1.1 ms more, so that the next event comes more than 1 ms after this one. Returns
  /// whether the handler ran.
  func oneEvent() -> Bool {
    let runsBefore = runs.value
    let eventsBefore = RuntimeStats.current.mainLoop.events
    var byte: UInt8 = 1
    guard write(old[1], &byte, 1) == 1 else { fail("write failed") }
    if !Queue.runMain(
      until: { RuntimeStats.current.mainLoop.events > eventsBefore }, deadline: .now + .seconds(10))
    {
      fail("an event of the old file never reached the watch (\(runs.value) runs)")
    }
    Queue.runMain(until: .now + .microseconds(1_100))
    return runs.value > runsBefore
  }
  for event in 1...16 where !oneEvent() {
    fail("event \(event) did not reach the handler before the reuse")
  }
  // The 16th event's check passed just now: reuse the number.
  guard dup2(new[0], number) == number else { fail("dup2 failed") }
  var staleRuns = 0
  while oneEvent() {
    staleRuns += 1
    if staleRuns > 100 { fail("stale events still reach the handler after 100 runs") }
  }
  print("stale runs after the reuse: \(staleRuns)")
  if staleRuns > 7 { fail("\(staleRuns) stale events reached the handler; the bound is 7") }
  // The watch is gone: a further byte wakes nothing. (A window for an event that must not
  // come, so nothing to wait for instead.)
  let eventsAfter = RuntimeStats.current.mainLoop.events
  var byte: UInt8 = 1
  _ = write(old[1], &byte, 1)
  Queue.runMain(until: .now + .milliseconds(20))
  if RuntimeStats.current.mainLoop.events != eventsAfter {
    fail("the dropped watch still fired")
  }
  source.cancel()
  if !Queue.runMain(until: { cancelled.value == 1 }, deadline: .now + .seconds(10)) {
    fail("the cancel handler did not run")
  }
  for fd in [keeper, old[1], number, new[0], new[1]] { close(fd) }
}
