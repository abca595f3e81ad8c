import MainLoop
import TestSupport
import Testing

@Suite struct DeadlineTests {
  @Test func nowIsMonotonic() {
    var previous = Deadline.now
    for _ in 0..<10_000 {
      let next = Deadline.now
      #expect(next >= previous)
      previous = next
    }
  }

  @Test func arithmeticSaturates() {
    let base = Deadline(uptimeNanoseconds: 1_000)
    #expect((base + .nanoseconds(500)).uptimeNanoseconds == 1_500)
    #expect((base + .seconds(-1)).uptimeNanoseconds == 0)
    #expect(Deadline.distantFuture + .seconds(1) == .distantFuture)
    #expect(Deadline(uptimeNanoseconds: .max - 5) + .nanoseconds(10) == .distantFuture)
    #expect((base - .nanoseconds(400)).uptimeNanoseconds == 600)
    #expect(Deadline(uptimeNanoseconds: 3_000) - base == .nanoseconds(2_000))
    #expect(base - Deadline(uptimeNanoseconds: 3_000) == .nanoseconds(-2_000))
    #expect(Duration.seconds(2).saturatingNanoseconds == 2_000_000_000)
    #expect(Duration.seconds(Int64.max).saturatingNanoseconds == .max)
  }

  @Test func wallDeadlineMapsToMonotonic() {
    let soon = WallDeadline.now + .milliseconds(200)
    let mono = soon.monotonicEquivalent
    let expected = Deadline.now + .milliseconds(200)
    #expect(mono <= expected)
    #expect(mono >= expected - .milliseconds(50))
    #expect(WallDeadline.distantFuture.monotonicEquivalent == .distantFuture)
    #expect(WallDeadline(nanosecondsSinceEpoch: 0).monotonicEquivalent <= .now)
  }
}
