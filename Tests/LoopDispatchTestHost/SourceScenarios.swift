import Glibc
import LoopDispatch

// Sources targeting the main queue: their handlers run on the process main thread, which
// runs the main loop (launched by MainQueueSourceTests).

/// Whether the caller is on the main thread, running the main queue.
private func onMainQueue() -> Bool {
  EventLoop.main.isInLoopThread && Queue.current === Queue.main && Queue.main.isCurrent
}

/// A pipe whose ends are non-blocking.
private func nonBlockingPipe() -> (Int32, Int32) {
  var fds: [Int32] = [-1, -1]
  guard pipe(&fds) == 0 else { fail("pipe: errno \(errno)") }
  for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
  return (fds[0], fds[1])
}

private func writeByte(_ fd: Int32, _ value: UInt8 = 1) -> Bool {
  var byte = value
  return write(fd, &byte, 1) == 1
}

/// A read source on the main queue: every handler on the main thread with the right data,
/// events from the main loop and from other threads, cancel from another thread.
func sourceMainRead() {
  let (readEnd, writeEnd) = nonBlockingPipe()
  let source: ReadSource
  do {
    source = try ReadSource(fd: readEnd, queue: .main, label: "main-reader")
  } catch {
    fail("\(error)")
  }
  let seen = MainConfined([UInt]())
  let problems = MainConfined([String]())
  let registered = MainConfined(false)
  let cancelled = MainConfined(0)
  source.setRegistrationHandler {
    if !onMainQueue() { problems.value.append("registration off the main queue") }
    registered.value = true
  }
  source.setEventHandler { [unowned source] in
    if !onMainQueue() { problems.value.append("event off the main queue") }
    seen.value.append(source.data)
    var buffer = [UInt8](repeating: 0, count: 64)
    _ = read(readEnd, &buffer, buffer.count)
  }
  source.setCancelHandler {
    if !onMainQueue() { problems.value.append("cancel off the main queue") }
    cancelled.value += 1
    close(readEnd)
  }
  var bytes = [UInt8](repeating: 7, count: 5)
  guard write(writeEnd, &bytes, 5) == 5 else { fail("write") }
  source.activate()
  guard Queue.runMain(until: { seen.value.count == 1 }, deadline: .now + .seconds(30)) else {
    fail("the first event never ran")
  }
  // Data written by a worker thread.
  Queue.global().async {
    var more = [UInt8](repeating: 8, count: 7)
    _ = write(writeEnd, &more, 7)
  }
  guard Queue.runMain(until: { seen.value.count == 2 }, deadline: .now + .seconds(30)) else {
    fail("the second event never ran")
  }
  Queue.global().async { source.cancel() }
  guard Queue.runMain(until: { cancelled.value == 1 }, deadline: .now + .seconds(30)) else {
    fail("the cancel handler never ran")
  }
  // Let anything wrongly queued after the cancel handler show itself.
  Queue.runMain(until: .now + .milliseconds(10))
  close(writeEnd)
  if !registered.value { fail("no registration handler") }
  if let first = problems.value.first { fail(first) }
  if seen.value != [5, 7] { fail("data \(seen.value)") }
  if cancelled.value != 1 { fail("\(cancelled.value) cancel handlers") }
}

/// Two main-queue read sources play ping-pong over a socket pair for 1000 round trips.
func sourceMainPingPong() {
  var fds: [Int32] = [-1, -1]
  let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
  guard socketpair(AF_UNIX, type, 0, &fds) == 0 else { fail("socketpair: errno \(errno)") }
  let (ping, pong) = (fds[0], fds[1])
  let roundTrips = 1000
  let completed = MainConfined(0)
  let problems = MainConfined([String]())
  let cancelled = MainConfined(0)
  let pinger: ReadSource
  let ponger: ReadSource
  do {
    pinger = try ReadSource(fd: ping, queue: .main, label: "ping")
    ponger = try ReadSource(fd: pong, queue: .main, label: "pong")
  } catch {
    fail("\(error)")
  }
  // `ping` echoes every byte back; `pong` counts a round trip and serves again.
  pinger.setEventHandler {
    if !onMainQueue() { problems.value.append("ping off the main queue") }
    var byte: UInt8 = 0
    while read(ping, &byte, 1) == 1 {
      if !writeByte(ping, byte) { problems.value.append("ping could not echo") }
    }
  }
  ponger.setEventHandler {
    if !onMainQueue() { problems.value.append("pong off the main queue") }
    var byte: UInt8 = 0
    while read(pong, &byte, 1) == 1 {
      completed.value += 1
      if completed.value < roundTrips && !writeByte(pong) {
        problems.value.append("pong could not serve")
      }
    }
  }
  pinger.setCancelHandler { cancelled.value += 1 }
  ponger.setCancelHandler { cancelled.value += 1 }
  pinger.activate()
  ponger.activate()
  guard writeByte(pong) else { fail("first serve") }
  guard
    Queue.runMain(until: { completed.value >= roundTrips }, deadline: .now + .seconds(60))
  else {
    fail("only \(completed.value) of \(roundTrips) round trips")
  }
  pinger.cancel()
  ponger.cancel()
  guard Queue.runMain(until: { cancelled.value == 2 }, deadline: .now + .seconds(30)) else {
    fail("cancel handlers did not run")
  }
  close(ping)
  close(pong)
  if let first = problems.value.first { fail(first) }
  if completed.value != roundTrips { fail("\(completed.value) round trips") }
}

/// Data and timer sources on the main queue: posts from workers and timer fires run on the
/// main thread; timers are never early.
func sourceMainDataAndTimers() {
  let problems = MainConfined([String]())
  let sum = MainConfined(UInt(0))
  let data = DataSource(merge: .add, queue: .main, label: "main-data")
  data.setEventHandler { [unowned data] in
    if !onMainQueue() { problems.value.append("data off the main queue") }
    sum.value += data.data
  }
  data.activate()
  let posters = 4
  let perPoster = 500
  for _ in 0..<posters {
    Queue.global().async { for _ in 0..<perPoster { data.post(1) } }
  }
  let oneShot = TimerSource(queue: .main, label: "main-once")
  let deadline = Deadline.now + .milliseconds(10)
  let oneShotRuns = MainConfined(0)
  oneShot.setEventHandler {
    if !onMainQueue() { problems.value.append("timer off the main queue") }
    if Deadline.now < deadline { problems.value.append("timer fired early") }
    oneShotRuns.value += 1
  }
  oneShot.schedule(deadline: deadline)
  oneShot.activate()
  let repeating = TimerSource(queue: .main, label: "main-repeating")
  let ticks = MainConfined(UInt(0))
  let repeatingCancelled = MainConfined(false)
  repeating.setEventHandler { [unowned repeating] in
    ticks.value += repeating.data
    if ticks.value >= 5 { repeating.cancel() }
  }
  repeating.setCancelHandler { repeatingCancelled.value = true }
  repeating.schedule(deadline: .now, repeating: .milliseconds(2))
  repeating.activate()
  let total = UInt(posters * perPoster)
  guard
    Queue.runMain(
      until: { sum.value == total && oneShotRuns.value == 1 && repeatingCancelled.value },
      deadline: .now + .seconds(30))
  else {
    fail("sum \(sum.value), one-shot \(oneShotRuns.value), ticks \(ticks.value)")
  }
  let finalTicks = ticks.value
  Queue.runMain(until: .now + .milliseconds(20))
  // Cancel and wait for the cancel handlers: work left queued at exit would keep the
  // sources alive (and look like a leak to LeakSanitizer).
  let cancelled = MainConfined(0)
  data.setCancelHandler { cancelled.value += 1 }
  oneShot.setCancelHandler { cancelled.value += 1 }
  data.cancel()
  oneShot.cancel()
  guard Queue.runMain(until: { cancelled.value == 2 }, deadline: .now + .seconds(30)) else {
    fail("cancel handlers did not run")
  }
  if let first = problems.value.first { fail(first) }
  if oneShotRuns.value != 1 { fail("the one-shot timer ran \(oneShotRuns.value) times") }
  if ticks.value != finalTicks { fail("the repeating timer ran after its cancel") }
}

/// A signal source on the main queue: the main loop watches the signal; the handler runs on
/// the main thread. Watching from the main thread registers at once, so the signal can be
/// sent right away.
func sourceMainSignal() {
  let source: SignalSource
  do {
    source = try SignalSource(signal: SIGUSR1, queue: .main, label: "main-signal")
  } catch {
    fail("\(error)")
  }
  // The launching test thread may block signals (a Swift concurrency worker does), and a
  // spawned process inherits that mask: unblock SIGUSR1 here so that the process-directed
  // signal reaches this thread and libevent's handler.
  var unblocked = sigset_t()
  sigemptyset(&unblocked)
  sigaddset(&unblocked, SIGUSR1)
  pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
  let received = MainConfined(UInt(0))
  let problems = MainConfined([String]())
  let cancelled = MainConfined(false)
  source.setEventHandler { [unowned source] in
    if !onMainQueue() { problems.value.append("signal handler off the main queue") }
    received.value += source.data
  }
  source.setCancelHandler { cancelled.value = true }
  source.activate()
  kill(getpid(), SIGUSR1)
  guard Queue.runMain(until: { received.value >= 1 }, deadline: .now + .seconds(30)) else {
    fail("the signal never reached the handler")
  }
  source.cancel()
  guard Queue.runMain(until: { cancelled.value }, deadline: .now + .seconds(30)) else {
    fail("the cancel handler never ran")
  }
  if let first = problems.value.first { fail(first) }
}
