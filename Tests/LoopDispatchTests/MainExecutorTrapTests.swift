import Testing

@testable import LoopDispatch

/// The main executor's isolation check (`Executors+Experimental.swift`): main-actor code
/// found running off the main thread is a client bug with a clear message.
@Suite struct MainExecutorTrapTests {
  @Test func mainActorIsolationCheckedOffTheMainThreadTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      ConcurrencyIntegration.install()
      Queue.global().sync { MainQueueExecutor.shared.checkIsolated() }
    }
    expectMessage(result, "main-actor code is running off the main thread")
  }
}
