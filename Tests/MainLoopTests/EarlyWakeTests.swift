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
    // The thread, asleep since the descriptor was set, ran 80 µs after that instant.
    let firstWasEarly = wake.expired(now: now + 2_080_000, sleptSince: now)
    #expect(!firstWasEarly)
    #expect(wake.advance == 10_000)
    // A delay past the cap counts as the cap.
    let second = wake.expiry(for: now + 4_000_000, now: now + 2_100_000)
    #expect(second == now + 4_000_000 - 10_000)
    let secondWasEarly = wake.expired(now: second + 10_000_000, sleptSince: now + 2_100_000)
    #expect(secondWasEarly)
    #expect(wake.advance == (10_000 * 7 + EarlyWake.maxAdvance) / 8)
    let advance = wake.advance
    let far = now + 20_000_000
    let farExpiry = wake.expiry(for: far, now: now + 10_000_000)
    #expect(farExpiry == far - advance)
    let farWasEarly = wake.expired(now: farExpiry + 1_000, sleptSince: now + 10_000_000)
    #expect(farWasEarly)
    // A deadline nearer than `minimumDelay` (a dense burst) is set exactly.
    let near = now + 30_000_000 + EarlyWake.minimumDelay - 1
    let nearExpiry = wake.expiry(for: near, now: now + 30_000_000)
    #expect(nearExpiry == near)
    let nearWasEarly = wake.expired(now: near, sleptSince: now + 30_000_000)
    #expect(!nearWasEarly)
    // 0 disarms, unchanged.
    let disarm = wake.expiry(for: 0, now: now)
    #expect(disarm == 0)
    #expect(wake.spinBound == wake.advance + wake.advance / 4)
  }

  /// Only an expiry that woke its thread teaches the delay. A thread busy when the descriptor
  /// expired (it entered its wait after the instant, and the wait returned at once), or one
  /// that handled other events of the wait first, was late by its own work: not learnt, and
  /// the next far deadline is still set exactly. A thread that slept across the instant
  /// (entered before it, or waited since before the descriptor was set: 1) still teaches.
  @Test func onlyAnExpiryThatWokeTheThreadTeachesTheDelay() {
    var wake = EarlyWake()
    let now: UInt64 = 1_000_000_000
    // Busy in a handler from 1.9 ms to 2.1 ms, so the wait entered at 2.1 ms found the
    // descriptor expired at 2 ms: 120 µs late, none of it a wake-up.
    let first = wake.expiry(for: now + 2_000_000, now: now)
    #expect(first == now + 2_000_000)
    #expect(wake.learnsAtNextExpiry)
    let busyWasEarly = wake.expired(now: now + 2_120_000, sleptSince: now + 2_100_000)
    #expect(!busyWasEarly)
    #expect(wake.advance == 0)
    #expect(!wake.learnsAtNextExpiry)
    // Asleep across the instant, but other events of the same wait were handled first.
    let second = wake.expiry(for: now + 4_000_000, now: now + 2_200_000)
    #expect(second == now + 4_000_000)
    let behindOthersWasEarly = wake.expired(now: second + 90_000, sleptSince: 0)
    #expect(!behindOthersWasEarly)
    #expect(wake.advance == 0)
    // Nothing learnt: a far deadline is still set exactly.
    let third = wake.expiry(for: now + 10_000_000, now: now + 5_000_000)
    #expect(third == now + 10_000_000)
    // Asleep since 6 ms, woken 64 µs after the instant: learnt.
    let sleptWasEarly = wake.expired(now: third + 64_000, sleptSince: now + 6_000_000)
    #expect(!sleptWasEarly)
    #expect(wake.advance == 8_000)
    // Waiting since before the descriptor was set (a driver thread set by another): learnt.
    let fourth = wake.expiry(for: now + 20_000_000, now: now + 11_000_000)
    #expect(fourth == now + 20_000_000 - 8_000)
    let setWhileAsleepWasEarly = wake.expired(now: fourth + 72_000, sleptSince: 1)
    #expect(setWhileAsleepWasEarly)
    #expect(wake.advance == (8_000 * 7 + 72_000) / 8)
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
