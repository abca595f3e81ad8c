import MainLoop
import Synchronization
import Testing

@testable import LoopDispatch

/// `EarlyHandOff`: a job handed to the pool ahead of its deadline never runs before it, the
/// lead follows the measured delays within its cap, and no hand-off is early on one core, on a
/// loaded machine or for a near deadline.
@Suite struct EarlyHandOffTests {
  /// How many bodies ran, and how many of them before their deadline.
  final class Starts: Sendable {
    let early = Atomic<Int>(0)
    let ran = Atomic<Int>(0)
  }

  /// Hands `count` bodies to `handOff`, each due `delay` after its scheduling, and waits for
  /// all of them; returns how many ran, and how many before their deadline.
  static func handOff(_ handOff: EarlyHandOff, count: Int, delay: UInt64) -> (ran: Int, early: Int)
  {
    let starts = Starts()
    let group = Group()
    for _ in 0..<count {
      group.enter()
      let deadline = Deadline.now.uptimeNanoseconds + delay
      handOff.run(at: deadline, priority: .default) {
        if Deadline.now.uptimeNanoseconds < deadline { starts.early.add(1, ordering: .relaxed) }
        starts.ran.add(1, ordering: .relaxed)
        group.leave()
      }
    }
    #expect(group.wait(timeout: .seconds(60)) == .success)
    return (starts.ran.load(ordering: .relaxed), starts.early.load(ordering: .relaxed))
  }

  @Test func theLeadIsTheAverageDelayWithTheNewestWeighingAnEighth() {
    #expect(EarlyWake.averaged(0, with: 80_000) == 10_000)
    #expect(EarlyWake.averaged(80_000, with: 0) == 70_000)
    #expect(EarlyWake.averaged(40_000, with: 40_000) == 40_000)
    let handOff = EarlyHandOff(cpus: 2) { false }
    #expect(handOff.lead == 0)
    for _ in 0..<200 { handOff.fold(delay: 30_000) }
    #expect(handOff.lead > 29_000 && handOff.lead <= 30_000)
    // A job that waited behind others, or a worker preempted for a second, says nothing of
    // the next hand-off: delays over the cap are not learnt.
    let learnt = handOff.lead
    for _ in 0..<200 { handOff.fold(delay: EarlyHandOff.maxLead + 1) }
    for _ in 0..<200 { handOff.fold(delay: 1_000_000_000) }
    #expect(handOff.lead == learnt)
    for _ in 0..<200 { handOff.fold(delay: EarlyHandOff.maxLead) }
    #expect(handOff.lead > EarlyHandOff.maxLead - 1_000 && handOff.lead <= EarlyHandOff.maxLead)
  }

  @Test func aFixedLeadIsCapped() {
    #expect(EarlyHandOff(cpus: 2, fixedLead: 10_000_000) { false }.lead == EarlyHandOff.maxLead)
  }

  @Test func aWorkerThatTakesABodyBeforeItsDeadlineHoldsItUntilThen() {
    let handOff = EarlyHandOff(cpus: 2) { false }
    for _ in 0..<20 {
      let now = Deadline.now.uptimeNanoseconds
      let deadline = now + 60_000
      let ranAt = Mutex<UInt64>(0)
      handOff.take(timedFor: now, deadline: deadline, .default) {
        ranAt.withLock { $0 = Deadline.now.uptimeNanoseconds }
      }
      #expect(ranAt.withLock { $0 } >= deadline)
    }
    #expect(handOff.spins.load(ordering: .relaxed) >= 1)
    #expect(handOff.retimed.load(ordering: .relaxed) == 0)
  }

  @Test func aBodyTakenFarAheadOfItsDeadlineIsTimedAgainNotSpunFor() {
    let handOff = EarlyHandOff(cpus: 2) { false }
    let now = Deadline.now.uptimeNanoseconds
    // A second ahead: the check below that `take` returned without running the body cannot
    // race the service loop's timer, however slow this thread.
    let deadline = now + 1_000_000_000
    let ran = Group()
    ran.enter()
    let ranAt = Mutex<UInt64>(0)
    handOff.take(timedFor: now, deadline: deadline, .default) {
      ranAt.withLock { $0 = Deadline.now.uptimeNanoseconds }
      ran.leave()
    }
    // take returned without running the body: it went back to the service loop.
    #expect(ranAt.withLock { $0 } == 0)
    #expect(handOff.retimed.load(ordering: .relaxed) == 1)
    #expect(ran.wait(timeout: .seconds(60)) == .success)
    #expect(ranAt.withLock { $0 } >= deadline)
  }

  @Test func earlyHandOffsRunNoEarlierThanTheirDeadlines() {
    let handOff = EarlyHandOff(cpus: 2, fixedLead: EarlyHandOff.maxLead) { false }
    let (ran, early) = Self.handOff(handOff, count: 100, delay: 1_000_000)
    #expect(ran == 100)
    #expect(early == 0)
    // Every one was timed early (a spin is not asserted: a worker that took one late, after
    // its deadline, had nothing to spin for).
    #expect(handOff.handedEarly.load(ordering: .relaxed) == 100)
  }

  @Test(
    arguments: [
      ("one CPU", 1, false, 1_000_000 as UInt64), ("a loaded machine", 2, true, 1_000_000),
      ("a deadline nearer than minimumDelay", 2, false, 100_000),
    ] as [(String, Int, Bool, UInt64)])
  func noHandOffIsEarlyOn(_ why: String, cpus: Int, pressured: Bool, delay: UInt64) {
    let handOff = EarlyHandOff(cpus: cpus, fixedLead: EarlyHandOff.maxLead) { pressured }
    let (ran, early) = Self.handOff(handOff, count: 30, delay: delay)
    #expect(ran == 30, "\(why)")
    #expect(early == 0, "\(why)")
    // Timed for the deadline itself, every body is taken at or after it: nothing to spin for.
    #expect(handOff.handedEarly.load(ordering: .relaxed) == 0, "\(why)")
    #expect(handOff.spins.load(ordering: .relaxed) == 0, "\(why)")
  }
}
