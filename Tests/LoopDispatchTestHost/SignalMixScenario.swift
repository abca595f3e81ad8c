import Glibc
import LoopDispatch
import Synchronization

/// Signal sources on the main queue and on other queues in one process, on the same signal
/// and on different ones: every source gets its signals on its own queue. (Creating the
/// second source used to throw `signalsOwnedByAnotherLoop`: the main-queue source watched
/// signals on the main loop and the others on the service loop.)
func signalMixScenario() {
  var unblocked = sigset_t()
  sigemptyset(&unblocked)
  sigaddset(&unblocked, SIGUSR1)
  sigaddset(&unblocked, SIGUSR2)
  pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
  let serial = Queue(label: "signals.serial")
  let onMain = MainConfined<UInt>(0)
  let problems = MainConfined([String]())
  let serialUSR1 = Atomic<Int>(0)
  let globalUSR2 = Atomic<Int>(0)
  let sources: [SignalSource]
  do {
    sources = [
      try SignalSource(signal: SIGUSR1, queue: .main, label: "usr1.main"),
      try SignalSource(signal: SIGUSR1, queue: serial, label: "usr1.serial"),
      try SignalSource(signal: SIGUSR2, queue: .global(), label: "usr2.global"),
    ]
  } catch {
    fail("a second signal source with another target failed: \(error)")
  }
  sources[0].setEventHandler { [unowned main = sources[0]] in
    if !(EventLoop.main.isInLoopThread && Queue.current === Queue.main) {
      problems.value.append("main-queue signal handler off the main queue")
    }
    onMain.value += main.data
  }
  sources[1].setEventHandler {
    if Queue.current !== serial { serialUSR1.store(-1000, ordering: .relaxed) }
    serialUSR1.wrappingAdd(1, ordering: .relaxed)
    Queue.main.async {}  // A main-loop turn, so `runMain(until:)` checks its condition.
  }
  sources[2].setEventHandler {
    globalUSR2.wrappingAdd(1, ordering: .relaxed)
    Queue.main.async {}
  }
  for source in sources { source.activate() }
  kill(getpid(), SIGUSR1)
  kill(getpid(), SIGUSR2)
  let all = Queue.runMain(
    until: {
      onMain.value >= 1 && serialUSR1.load(ordering: .relaxed) >= 1
        && globalUSR2.load(ordering: .relaxed) >= 1
    }, deadline: .now + .seconds(30))
  if !all {
    fail(
      "signals not delivered: main \(onMain.value), serial "
        + "\(serialUSR1.load(ordering: .relaxed)), global \(globalUSR2.load(ordering: .relaxed))")
  }
  if serialUSR1.load(ordering: .relaxed) < 0 { fail("serial handler off its queue") }
  if !problems.value.isEmpty { fail(problems.value.joined(separator: "; ")) }
  for source in sources { source.cancel() }
}
