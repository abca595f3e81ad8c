import Glibc
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// Who may spin in a one-shot wait (`SpinAdmission`): at most `limit` at once, none while
/// the machine is loaded.
struct SpinAdmissionTests {
  @Test func atMostTheLimitSpinAtOnce() {
    let admission = SpinAdmission(limit: 2) { false }
    #expect(admission.enter())
    #expect(admission.enter())
    #expect(!admission.enter())
    #expect(admission.spinning == 2)
    admission.leave()
    #expect(admission.enter())
    admission.leave()
    admission.leave()
    #expect(admission.spinning == 0)
  }

  @Test func aLoadedMachineAdmitsNoSpin() {
    let pressured = Atomic<Bool>(true)
    let admission = SpinAdmission(limit: 4) { pressured.load(ordering: .relaxed) }
    #expect(!admission.enter())
    #expect(admission.spinning == 0)
    pressured.store(false, ordering: .relaxed)
    #expect(admission.enter())
    admission.leave()
  }

  @Test func oneCPUAdmitsNoSpin() {
    let admission = SpinAdmission(limit: 0) { false }
    #expect(!admission.enter())
    #expect(admission.spinning == 0)
  }

  /// Threads racing for one place: whoever is admitted sees at most the limit spinning, and
  /// the count returns to zero (a lost race undoes its increment).
  @Test func racingWaitsNeverExceedTheLimit() {
    let admission = SpinAdmission(limit: 1) { false }
    let inside = Atomic<Int>(0)
    let worst = Atomic<Int>(0)
    let admitted = Atomic<Int>(0)
    let threads = (0..<8).map { _ in
      startThread {
        for _ in 0..<20_000 {
          guard admission.enter() else { continue }
          let now = inside.wrappingAdd(1, ordering: .relaxed).newValue
          worst.max(now, ordering: .relaxed)
          admitted.wrappingAdd(1, ordering: .relaxed)
          inside.wrappingSubtract(1, ordering: .relaxed)
          admission.leave()
        }
      }
    }
    for thread in threads { pthread_join(thread, nil) }
    #expect(worst.load(ordering: .relaxed) == 1)
    #expect(admitted.load(ordering: .relaxed) > 0)
    #expect(admission.spinning == 0)
  }

  /// A one-shot wait asks the admission before it spins, leaves its place when its spin
  /// ends, and still returns when refused (it sleeps on the word instead).
  @Test func aOneShotWaitAsksBeforeItSpinsAndSleepsWhenRefused() {
    let asked = Atomic<Int>(0)
    let pressured = Atomic<Bool>(true)
    let admission = SpinAdmission(limit: 1) {
      asked.wrappingAdd(1, ordering: .relaxed)
      return pressured.load(ordering: .relaxed)
    }
    for (round, refused) in [true, false].enumerated() {
      pressured.store(refused, ordering: .relaxed)
      let waiter = SyncWaiter(callerReleasesSlot: true)
      let thread = startThread { waiter.turn.wait(admission: admission) }
      // Bounded: a wait that never asks fails the count below instead of hanging here.
      var yields = 0
      while asked.load(ordering: .relaxed) <= round && yields < 10_000_000 {
        sched_yield()
        yields += 1
      }
      waiter.turn.signal()
      pthread_join(thread, nil)
      #expect(admission.spinning == 0)
    }
    #expect(asked.load(ordering: .relaxed) == 2)
  }

  /// The process's admission: a core per spinner but one.
  @Test func theWaitsLimitIsTheBudgetLessOne() {
    #expect(SpinAdmission.waits.limit == max(0, CPUBudget.current.cpus - 1))
  }
}
