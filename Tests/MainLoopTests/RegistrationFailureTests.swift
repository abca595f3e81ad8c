import CLibevent
import Testing

@testable import MainLoop

/// A registration libevent refuses is finished at once: its cancel completes (it used to
/// stay "pending" for an add that had already failed, so the completion never ran).
@Suite struct RegistrationFailureTests {
  @Test func aRegistrationLibeventRefusesStillCompletesItsCancel() {
    let loop = boundLoop("refused")
    let registration = EventRegistration(loop: loop, descriptor: "refused", handler: { _ in })
    // A signal event that also asks for readability: `event_new` refuses the combination.
    let code = registration.addOnLoop(fd: -1, events: cl_ev_signal | cl_ev_read)
    #expect(code != 0)
    let completed = LoopConfined(false)
    registration.cancel { completed.value = true }
    #expect(completed.value, "the cancel of a refused registration never completed")
    #expect(expectClean(loop))
  }
}
