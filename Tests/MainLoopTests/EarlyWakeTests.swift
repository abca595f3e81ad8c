import Glibc
import TestSupport
import Testing

@testable import MainLoop

/// Waking early for a timer (`EarlyWake`): its arithmetic on made-up clock readings, and a
/// real loop's timers set early without ever firing early.
@Suite struct EarlyWakeTests {
  /// Before any delay is known, deadlines are set exactly; an expiry teaches the average
  /// (the newest delay weighing 1/8, each capped); then a far deadline is set early by it and
  /// its expiry says so, while a near one (a dense burst) is set exactly.
  @Test func farDeadlinesAreSetEarlyByTheLearntDelay() {
    var wake = EarlyWake()
    let now: UInt64 = 1_000_000_000
    let first = wake.expiry(for: now + 2_000_000, now: now)
    #expect(first == now + 2_000_000)
    // The thread ran 80 µs after that instant.
    let firstWasEarly = wake.expired(now: now + 2_080_000)
    #expect(!firstWasEarly)
    #expect(wake.advance == 10_000)
    // A delay past the cap counts as the cap.
    let second = wake.expiry(for: now + 4_000_000, now: now + 2_100_000)
    #expect(second == now + 4_000_000 - 10_000)
    let secondWasEarly = wake.expired(now: second + 10_000_000)
    #expect(secondWasEarly)
    #expect(wake.advance == (10_000 * 7 + EarlyWake.maxAdvance) / 8)
    let advance = wake.advance
    let far = now + 20_000_000
    let farExpiry = wake.expiry(for: far, now: now + 10_000_000)
    #expect(farExpiry == far - advance)
    let farWasEarly = wake.expired(now: farExpiry + 1_000)
    #expect(farWasEarly)
    // A deadline nearer than `minimumDelay` (a dense burst) is set exactly.
    let near = now + 30_000_000 + EarlyWake.minimumDelay - 1
    let nearExpiry = wake.expiry(for: near, now: now + 30_000_000)
    #expect(nearExpiry == near)
    let nearWasEarly = wake.expired(now: near)
    #expect(!nearWasEarly)
    // 0 disarms, unchanged.
    let disarm = wake.expiry(for: 0, now: now)
    #expect(disarm == 0)
    #expect(wake.spinBound == wake.advance + wake.advance / 4)
  }

  /// A real loop's timers 2 ms apart: after the first expiry teaches the delay, later ones
  /// are set early (counted), and none fires before its deadline.
  @Test func aLoopsFarTimersWakeEarlyButNeverFireEarly() {
    let loop = EventLoop(name: "early-wake")
    let fired = LoopConfined(0)
    let early = LoopConfined(0)
    let count = 30
    @Sendable func scheduleNext() {
      let deadline = Deadline.now + .milliseconds(2)
      loop.schedule(at: deadline) {
        if Deadline.now < deadline { early.value += 1 }
        fired.value += 1
        if fired.value < count { scheduleNext() }
      }
    }
    loop.execute { scheduleNext() }
    #expect(loop.run(until: { fired.value == count }, deadline: .now + .seconds(30)))
    #expect(early.value == 0)
    #expect(loop.earlyTimerWakes.load(ordering: .relaxed) > 0)
    #expect(expectClean(loop))
  }
}
