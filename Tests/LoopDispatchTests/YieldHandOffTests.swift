import LoopDispatch
import Testing

/// `YieldHandOff`'s policy in virtual time: the test's yield advances a made-up clock (by
/// `quick` or `slow` nanoseconds) and may hand over the token, so every bound and every pause
/// is checked exactly, whatever the machine does.
@Suite struct YieldHandOffTests {
  /// A quick yield (the signaller ran and came back), and one a third thread's time slice
  /// made slow (above `SpinGovernor.preemptionGapNanoseconds`, 50 µs).
  static let quick: UInt64 = 1_000
  static let slow: UInt64 = 60_000
  static let millisecond: UInt64 = 1_000_000

  /// One wait in virtual time from `start`: each yield takes the next of `lengths` (the last
  /// one repeats), and the token is there after yield number `tokenAfter` (1-based; nil:
  /// never). Returns whether it took the token, and how many times it yielded.
  static func run(
    _ handOff: borrowing YieldHandOff, at start: UInt64, lengths: [UInt64], tokenAfter: Int?,
    deadline: UInt64 = .max
  ) -> (took: Bool, yields: Int) {
    var now = start
    var yields = 0
    let took = handOff.wait(
      from: start, until: deadline,
      take: { tokenAfter.map { yields >= $0 } ?? false },
      yield: {
        now += lengths[Swift.min(yields, lengths.count - 1)]
        yields += 1
      },
      now: { now })
    return (took, yields)
  }

  @Test func aTokenAfterAQuickYieldIsTakenAndPausesNothing() {
    let handOff = YieldHandOff()
    #expect(Self.run(handOff, at: 1_000, lengths: [Self.quick], tokenAfter: 2) == (true, 2))
    // At once again: no pause.
    #expect(Self.run(handOff, at: 10_000, lengths: [Self.quick], tokenAfter: 1) == (true, 1))
  }

  @Test func itStopsAfterItsYieldsOrItsBudgetOrItsDeadline() {
    let handOff = YieldHandOff()
    // Yields that return at once (nobody else on the CPU): at most `yields` of them.
    #expect(Self.run(handOff, at: 1_000, lengths: [10], tokenAfter: nil) == (false, 8))
    // 3 µs yields, no token: the 16 µs budget ends it at the sixth.
    #expect(Self.run(handOff, at: 2_000_000, lengths: [3_000], tokenAfter: nil) == (false, 6))
    // A deadline 2.5 µs away: the third 1 µs yield passes it.
    #expect(
      Self.run(handOff, at: 3_000_000, lengths: [Self.quick], tokenAfter: nil, deadline: 3_002_500)
        == (false, 3))
    // None of those was slow: the next wait yields at once.
    #expect(Self.run(handOff, at: 3_100_000, lengths: [Self.quick], tokenAfter: 1) == (true, 1))
  }

  @Test func aSlowYieldPausesTheYieldsForOneMillisecond() {
    let handOff = YieldHandOff()
    let start: UInt64 = 5 * Self.millisecond
    #expect(Self.run(handOff, at: start, lengths: [Self.slow], tokenAfter: nil) == (false, 1))
    let slowAt = start + Self.slow
    // Paused: no yield at all, the caller sleeps.
    #expect(
      Self.run(handOff, at: slowAt + Self.millisecond - 1, lengths: [Self.quick], tokenAfter: 1)
        == (false, 0))
    // Over: yields again.
    #expect(
      Self.run(handOff, at: slowAt + Self.millisecond, lengths: [Self.quick], tokenAfter: 1) == (
        true, 1
      ))
  }

  @Test func aSlowYieldThatFoundItsTokenStillPauses() {
    let handOff = YieldHandOff()
    let start: UInt64 = 5 * Self.millisecond
    #expect(Self.run(handOff, at: start, lengths: [Self.slow], tokenAfter: 1) == (true, 1))
    #expect(
      Self.run(handOff, at: start + Self.slow + 1_000, lengths: [Self.quick], tokenAfter: 1) == (
        false, 0
      ))
  }

  @Test func slowYieldsThatFollowEachOtherDoubleThePauseUpToASecondAndQuickOnesDoNotShortenIt() {
    let handOff = YieldHandOff()
    var now: UInt64 = 5 * Self.millisecond
    for shift in 0...12 {
      // Quick hand-offs in between would not shorten the pause; none happens while paused.
      #expect(Self.run(handOff, at: now, lengths: [Self.slow], tokenAfter: nil) == (false, 1))
      let pause = Self.millisecond << UInt64(Swift.min(shift, 10))
      let slowAt = now + Self.slow
      #expect(
        Self.run(handOff, at: slowAt + pause - 1, lengths: [Self.quick], tokenAfter: 1) == (
          false, 0
        ))
      // The first instant after the pause: a quick hand-off.
      #expect(
        Self.run(handOff, at: slowAt + pause, lengths: [Self.quick], tokenAfter: 1) == (true, 1))
      now = slowAt + pause + 1_000
    }
  }

  @Test func aSlowYieldLongAfterTheLastOnePausesForOneMillisecondAgain() {
    let handOff = YieldHandOff()
    var now: UInt64 = 5 * Self.millisecond
    for _ in 0..<4 {
      #expect(Self.run(handOff, at: now, lengths: [Self.slow], tokenAfter: nil) == (false, 1))
      now += Self.slow + (Self.millisecond << 3)
    }
    // The last pause was 8 ms; more than `memoryNanoseconds` (about 4 s) later, a slow yield
    // starts again at 1 ms.
    now += YieldHandOff.memoryNanoseconds
    #expect(Self.run(handOff, at: now, lengths: [Self.slow], tokenAfter: nil) == (false, 1))
    let slowAt = now + Self.slow
    #expect(
      Self.run(handOff, at: slowAt + Self.millisecond, lengths: [Self.quick], tokenAfter: 1) == (
        true, 1
      ))
  }
}
