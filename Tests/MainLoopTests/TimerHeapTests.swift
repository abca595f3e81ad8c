import TestSupport
import Testing

@testable import MainLoop

/// The timer heap (`TimerHeap`): inline deadlines, a 4-ary layout and lazy removal. Driven in
/// virtual time, so every expectation is exact.
@Suite struct TimerHeapTests {
  let start = LoopClock.virtualStart

  private func virtualLoop(_ name: String) -> EventLoop {
    let loop = EventLoop(name: name, clock: .virtual())
    loop.advance(by: .zero)
    return loop
  }

  /// A fixed-seed generator (SplitMix64), so the shuffles are the same every run.
  private struct SplitMix {
    var state: UInt64
    mutating func next(_ bound: Int) -> Int {
      state &+= 0x9E37_79B9_7F4A_7C15
      var mixed = state
      mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
      mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
      mixed ^= mixed >> 31
      return Int(mixed % UInt64(bound))
    }
  }

  /// Thousands of timers in shuffled order, with many ties and a third cancelled (some from
  /// handlers): the others fire in (deadline, scheduling order), each at its deadline.
  @Test func shuffledTimersWithTiesAndCancelsFireInOrder() {
    let loop = virtualLoop("heap-order")
    var random = SplitMix(state: 22)
    let count = 5_000
    let fired = LoopConfined([Int]())
    let lateFires = LoopConfined(0)
    var expected: [(deadline: Int, index: Int)] = []
    var timers: [LoopTimer] = []
    for index in 0..<count {
      let microseconds = random.next(400) * 50  // 400 distinct instants: many ties.
      let deadline = start + .microseconds(microseconds)
      timers.append(
        loop.schedule(at: deadline) {
          if loop.now != deadline { lateFires.value += 1 }
          fired.value.append(index)
        })
      expected.append((microseconds, index))
    }
    var cancelled = Set<Int>()
    for index in 0..<count where random.next(3) == 0 {
      timers[index].cancel()
      cancelled.insert(index)
    }
    // Cancelled by a handler that runs before them (at instant 0, the earliest).
    let cancelledLater = (0..<count).filter { !cancelled.contains($0) && expected[$0].0 > 0 }
      .prefix(100)
    let scheduled = timers
    loop.schedule(at: start) { for index in cancelledLater { scheduled[index].cancel() } }
    cancelled.formUnion(cancelledLater)
    loop.advance(by: .milliseconds(30))
    let order = expected.filter { !cancelled.contains($0.index) }
      .sorted { $0.deadline != $1.deadline ? $0.deadline < $1.deadline : $0.index < $1.index }
      .map(\.index)
    #expect(fired.value == order)
    #expect(lateFires.value == 0)
    #expect(loop.pendingTimerCount == 0)
    #expect(loop.timers.count == 0)
  }

  /// A cancel releases the closure at once and stops counting the timer; the entries it
  /// leaves behind are compacted away once they outnumber the live ones.
  @Test func cancelledTimersAreReleasedAtOnceAndTheirEntriesCompacted() {
    let loop = virtualLoop("heap-compact")
    final class Token: Sendable {}
    weak var weakToken: Token?
    let ran = LoopConfined(0)
    var timers: [LoopTimer] = []
    do {
      let token = Token()
      weakToken = token
      for index in 0..<1_000 {
        timers.append(
          loop.schedule(at: start + .milliseconds(10 + index)) {
            _ = token
            ran.value += 1
          })
      }
    }
    // Cancel the first 900 (on the loop thread: removed at once).
    for timer in timers.prefix(900) { timer.cancel() }
    #expect(loop.pendingTimerCount == 100)
    // Compacted when the removed entries passed half the heap: what is left is the live
    // timers and fewer removed entries than live ones (plus the floor).
    #expect(loop.timers.removedCount <= 100 + TimerHeap.compactionFloor)
    #expect(loop.timers.count == 100 + loop.timers.removedCount)
    #expect(weakToken != nil)  // The 100 live timers still hold it.
    for timer in timers.suffix(100) { timer.cancel() }
    #expect(weakToken == nil)  // Every closure released by its cancel.
    #expect(loop.pendingTimerCount == 0)
    loop.advance(by: .seconds(2))
    #expect(ran.value == 0)
    #expect(loop.timers.count == 0)
    #expect(expectClean(loop))
  }

  /// The timer descriptor is never armed for a cancelled timer: one cancelled at the top of
  /// the heap is popped at once (so a new earliest timer re-arms), and one that reaches the
  /// top later is popped before the descriptor is armed.
  @Test func theDescriptorSkipsCancelledTimersAtTheTop() {
    let loop = virtualLoop("heap-top")
    let fires = LoopConfined([Deadline]())
    @Sendable func record() { fires.value.append(loop.now) }
    let first = loop.schedule(at: start + .milliseconds(10), record)
    let second = loop.schedule(at: start + .milliseconds(20), record)
    #expect(loop.armedTimerDeadline == (start + .milliseconds(10)).uptimeNanoseconds)
    first.cancel()
    second.cancel()
    #expect(loop.timers.count == 0)  // Both were at the top when cancelled.
    // The stale arming (10 ms) stays until an insertion becomes the earliest timer.
    loop.schedule(at: start + .milliseconds(25), record)
    #expect(loop.armedTimerDeadline == (start + .milliseconds(25)).uptimeNanoseconds)
    // Cancelled below the top: left in the heap until an expiry brings it up.
    let buried = loop.schedule(at: start + .milliseconds(30), record)
    loop.schedule(at: start + .milliseconds(40), record)
    buried.cancel()
    #expect(loop.timers.removedCount == 1)
    loop.advance(to: start + .milliseconds(25))
    #expect(fires.value == [start + .milliseconds(25)])
    #expect(loop.armedTimerDeadline == (start + .milliseconds(40)).uptimeNanoseconds)
    #expect(loop.timers.removedCount == 0)
    loop.advance(by: .milliseconds(30))
    #expect(fires.value == [start + .milliseconds(25), start + .milliseconds(40)])
    #expect(expectClean(loop))
  }

  /// The loop counts fires and finished timers per pass, but a closure handler (user code,
  /// which may tell another thread to look) sees exact counts: its own timer no longer
  /// pending, and counted as fired.
  @Test func aClosureHandlerSeesExactCounts() {
    let loop = virtualLoop("heap-counts")
    let seen = LoopConfined([(pending: Int, fired: UInt64)]())
    @Sendable func record() { seen.value.append((loop.pendingTimerCount, loop.timerFireCount)) }
    let cancelled = loop.schedule(at: start + .milliseconds(5), record)
    for _ in 0..<3 { loop.schedule(at: start + .milliseconds(10), record) }
    loop.schedule(at: start + .milliseconds(20), record)
    cancelled.cancel()
    loop.advance(by: .milliseconds(30))
    #expect(seen.value.map(\.pending) == [3, 2, 1, 0])
    #expect(seen.value.map(\.fired) == [1, 2, 3, 4])
    #expect(expectClean(loop))
  }
}
