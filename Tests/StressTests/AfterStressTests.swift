import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

extension Stress {
  /// A million `after` timers spread over 200 ms, half of them cancelled at once.
  @Suite struct AfterTimers {
    /// Captured by each timer's closure; leaving `released` in deinit shows the closure
    /// was destroyed (after running, or by `cancel()`). Once every token is gone no timer
    /// can run any more, so the counts below are final.
    final class Token: Sendable {
      let released: Group
      init(_ released: Group) {
        self.released = released
        released.enter()
      }
      deinit { released.leave() }
    }

    @Test func cancelledTimersNeverRunAndTheOthersRunOnceNeverEarly() {
      let total = stressSize(1_000_000)
      let producers = 8
      let spreadNanoseconds: UInt64 = 200_000_000
      let runs = AtomicCounters(count: total)
      let early = Counter()
      let released = Group()
      // Per index, written only by the producer that scheduled it, read after `released`
      // is empty: 0 kept, 1 cancelled before its deadline, 2 cancelled at or after it (the
      // timer may have fired first; cancel() then has no effect, as in GCD).
      let outcome = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: total)
      outcome.initialize(repeating: 0)
      defer { outcome.deallocate() }
      let outcomes = SendableBuffer(outcome)

      let meter = StressMeter("after timers (half cancelled)")
      onThreads(producers) { producer in
        for index in stride(from: producer, to: total, by: producers) {
          // Delays spread evenly over 0–200 ms, in a scrambled order.
          let delay = UInt64(index) &* 7_919 % UInt64(total) * spreadNanoseconds / UInt64(total)
          let deadline = Deadline(uptimeNanoseconds: Deadline.now.uptimeNanoseconds + delay)
          let token = Token(released)
          let work = Queue.global().after(deadline: deadline) {
            withExtendedLifetime(token) {
              if Deadline.now < deadline { early.increment() }
              runs.increment(index)
            }
          }
          if index % 2 == 1 {
            work.cancel()
            // The timer cannot fire before its deadline, so a cancel that returned before
            // it surely won.
            outcomes.buffer[index] = Deadline.now < deadline ? 1 : 2
          }
        }
      }
      #expect(released.wait(timeout: .seconds(300)) == .success)
      meter.finish(items: total)

      var kept = [Int: Int]()
      var cancelled = [Int: Int]()
      var raced = [Int: Int]()
      for index in 0..<total {
        switch outcome[index] {
        case 0: kept[runs.value(index), default: 0] += 1
        case 1: cancelled[runs.value(index), default: 0] += 1
        default: raced[runs.value(index), default: 0] += 1
        }
      }
      let keptCount = (total + 1) / 2
      let racedCount = raced.values.reduce(0, +)
      #expect(kept == [1: keptCount], "runs per kept timer → how many timers")
      #expect(cancelled == (total / 2 == racedCount ? [:] : [0: total / 2 - racedCount]))
      #expect(raced.keys.allSatisfy { $0 <= 1 }, "a cancelled timer ran twice: \(raced)")
      #expect(early.current == 0)
      print("stress after timers: \(racedCount) cancels came at or after their deadline")
    }
  }
}

/// A buffer written at distinct indices by several threads, each index by one thread only.
struct SendableBuffer<Element>: @unchecked Sendable {
  // @unchecked Sendable: callers write disjoint indices and read only after joining.
  let buffer: UnsafeMutableBufferPointer<Element>
  init(_ buffer: UnsafeMutableBufferPointer<Element>) { self.buffer = buffer }
}
