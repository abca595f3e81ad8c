import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// SignalSource. Signals are process-wide, so every test that raises one runs in a child
/// process (an exit test); a failure inside prints "FAIL: ..." and exits 1. Signals are sent
/// with `kill(getpid(), _)`, not `raise`: the test body may run on a thread that blocks
/// signals (a Swift concurrency worker), where a thread-directed signal would stay pending.
@Suite struct SourceSignalTests {
  @Test func dataCountsTheDeliveriesMadeWhileSuspended() async {
    let result = await #expect(
      processExitsWith: .success, observing: [\.standardErrorContent]
    ) {
      let queue = Queue(label: "counted")
      let counted: SignalSource
      let witness: SignalSource
      do {
        counted = try SignalSource(signal: SIGUSR1, queue: queue)
        witness = try SignalSource(signal: SIGUSR1, queue: Queue(label: "witness"))
      } catch {
        failChild("\(error)")
      }
      let runs = Locked([UInt]())
      let allSeen = Latch()
      counted.setEventHandler { [unowned counted] in
        let data = counted.data
        let sum = runs.withLock { runs -> UInt in
          runs.append(data)
          return runs.reduce(0, +)
        }
        if sum >= 3 { allSeen.open() }
      }
      // The witness sees each delivery, so the next raise cannot coalesce with it.
      let seen = LoopDispatch.Semaphore(value: 0)
      witness.setEventHandler { seen.signal() }
      counted.activate()
      counted.suspend()
      witness.activate()
      waitUntilTheServiceLoopRegisteredEarlierWatches()
      for raised in 1...3 {
        kill(getpid(), SIGUSR1)
        if seen.wait(timeout: .seconds(30)) == .timedOut { failChild("delivery \(raised) lost") }
      }
      // Every delivery but perhaps the last was counted before the witness saw the next one.
      counted.resume()
      if !allSeen.wait() { failChild("runs \(runs.value)") }
      queue.sync {}
      let seenRuns = runs.value
      if seenRuns.reduce(0, +) != 3 || seenRuns.contains(0) || seenRuns[0] < 2 {
        failChild("runs \(seenRuns)")
      }
      counted.cancel()
      witness.cancel()
    }
    #expect(!text(of: result).contains("FAIL"), "\(text(of: result))")
  }

  @Test func aWatchedTerminationSignalDoesNotEndTheProcess() async {
    let result = await #expect(
      processExitsWith: .success, observing: [\.standardErrorContent]
    ) {
      let source: SignalSource
      do {
        source = try SignalSource(signal: SIGTERM, queue: Queue(label: "term"))
      } catch {
        failChild("\(error)")
      }
      let handled = Latch()
      let data = Locked(UInt(0))
      source.setEventHandler { [unowned source] in
        data.withLock { $0 = source.data }
        handled.open()
      }
      source.activate()
      waitUntilTheServiceLoopRegisteredEarlierWatches()
      kill(getpid(), SIGTERM)
      if !handled.wait() { failChild("the handler never ran") }
      if data.value < 1 { failChild("data \(data.value)") }
      let cancelled = Latch()
      source.setCancelHandler { cancelled.open() }
      source.cancel()
      if !cancelled.wait() { failChild("no cancel handler") }
    }
    #expect(!text(of: result).contains("FAIL"), "\(text(of: result))")
  }

  @Test func afterCancelTheDefaultActionIsBack() async {
    await #expect(processExitsWith: .signal(SIGTERM)) {
      let source: SignalSource
      do {
        source = try SignalSource(signal: SIGTERM, queue: Queue(label: "term"))
      } catch {
        failChild("\(error)")
      }
      let cancelled = Latch()
      source.setCancelHandler { cancelled.open() }
      source.activate()
      waitUntilTheServiceLoopRegisteredEarlierWatches()
      source.cancel()
      if !cancelled.wait() { failChild("no cancel handler") }
      // Directed at this thread, with SIGTERM unblocked here: the default action runs before
      // `pthread_kill` returns. (A process-directed `kill` may be delivered to another
      // thread after `kill` returns, racing the failure below: a flaky CI run.)
      var unblocked = sigset_t()
      sigemptyset(&unblocked)
      sigaddset(&unblocked, SIGTERM)
      pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
      pthread_kill(pthread_self(), SIGTERM)
      failChild("SIGTERM did not end the process after cancel")
    }
  }

  /// The documentation promises the default action is held off from creation ("at once"),
  /// and that the handler sees what arrived before activation.
  @Test func aSignalRaisedRightAfterCreationIsHeldAndDeliveredOnActivation() async {
    let result = await #expect(
      processExitsWith: .success, observing: [\.standardErrorContent]
    ) {
      let source: SignalSource
      do {
        source = try SignalSource(signal: SIGTERM, queue: Queue(label: "early"))
      } catch {
        failChild("\(error)")
      }
      kill(getpid(), SIGTERM)
      let handled = Latch()
      source.setEventHandler { handled.open() }
      source.activate()
      if !handled.wait() { failChild("the signal raised before activation was lost") }
      source.cancel()
    }
    #expect(!text(of: result).contains("FAIL"), "\(text(of: result))")
  }

  @Test func signalsThatCannotBeWatchedAreRefused() {
    for signal in [SIGKILL, SIGSTOP, 0, -1, 65] {
      #expect(throws: EventLoopError.invalidSignal(signal)) {
        _ = try SignalSource(signal: signal)
      }
    }
  }
}

/// Waits until the service loop has handled every request posted before this call, such as
/// the registration of a signal watch (the loop takes requests in order; a timer added after
/// the watch fires on a later turn). Without it a signal raised at once could meet the
/// default action.
func waitUntilTheServiceLoopRegisteredEarlierWatches() {
  let turned = Latch()
  // A positive delay: a deadline already passed would skip the loop.
  _ = Queue.global().after(.milliseconds(1)) { turned.open() }
  if !turned.wait() { failChild("the service loop did not turn") }
}

private func text(of result: ExitTest.Result?) -> String {
  String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
}
