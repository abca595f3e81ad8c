import Glibc
import TestSupport
import Testing

@testable import MainLoop

/// Signals are process-wide, so these tests run one at a time.
@Suite(.serialized) struct SignalTests {
  @Test func signalIsDeliveredOnTheLoopThreadToEveryWatch() throws {
    let loop = boundLoop("signals")
    let first = LoopConfined(0)
    let second = LoopConfined(0)
    let onLoop = LoopConfined(true)
    let a = try loop.watchSignal(SIGUSR1) {
      onLoop.value = onLoop.value && loop.isInLoopThread
      first.value += 1
    }
    let b = try loop.watchSignal(SIGUSR1) { second.value += 1 }
    kill(getpid(), SIGUSR1)
    #expect(
      loop.run(until: { first.value == 1 && second.value == 1 }, deadline: .now + .seconds(10)))
    #expect(onLoop.value)
    a.cancel()
    b.cancel()
    #expect(expectClean(loop))
  }

  @Test func invalidSignalsThrow() {
    let loop = EventLoop(name: "bad-signals")
    for signal in [0, -3, SIGKILL, SIGSTOP, 65] {
      #expect(throws: EventLoopError.invalidSignal(signal)) { try loop.watchSignal(signal) {} }
    }
  }

  @Test func onlyOneLoopWatchesSignalsAtATime() throws {
    let owner = boundLoop("owner")
    let other = boundLoop("other")
    let watch = try owner.watchSignal(SIGUSR2) {}
    #expect(throws: EventLoopError.signalsOwnedByAnotherLoop(owner: "owner")) {
      try other.watchSignal(SIGUSR2) {}
    }
    watch.cancel()
    // Released with the owner's last signal watch.
    let second = try other.watchSignal(SIGUSR2) {}
    second.cancel()
  }

  @Test func terminationSignalIsHeldWhileWatched() async {
    // SIGTERM's default action would kill the child; the watch turns it into an event.
    await #expect(processExitsWith: .exitCode(7)) {
      let loop = boundLoop("term")  // The watch is added before watchSignal returns.
      let got = LoopConfined(false)
      let watch = try loop.watchSignal(SIGTERM) { got.value = true }
      kill(getpid(), SIGTERM)
      loop.run(until: { got.value }, deadline: .now + .seconds(10))
      watch.cancel()
      exit(got.value ? 7 : 1)
    }
  }
}
