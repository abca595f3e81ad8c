import TestSupport
import Testing

/// Sources targeting the main queue run in `LoopDispatchTestHost`, whose main thread runs
/// the main loop (see SourceScenarios.swift there).
@Suite struct MainQueueSourceTests {
  private func expectScenario(
    _ name: String, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    let result = runProgram("LoopDispatchTestHost", [name])
    #expect(
      result.status == 0, "\(result.output)\(result.errorOutput)", sourceLocation: sourceLocation)
    #expect(result.output.contains("ok \(name)"), sourceLocation: sourceLocation)
  }

  @Test func aMainQueueReadSourceRunsEveryHandlerOnTheMainThread() {
    expectScenario("source-main-read")
  }

  @Test func twoMainQueueReadSourcesPlayAThousandRoundTrips() {
    expectScenario("source-main-ping-pong")
  }

  @Test func mainQueueDataAndTimerSourcesRunOnTheMainThread() {
    expectScenario("source-main-data-and-timers")
  }

  @Test func aMainQueueFileSourceRunsOnTheMainThread() {
    expectScenario("file-source-main")
  }

  @Test func aMainQueueSignalSourceRunsOnTheMainThread() {
    expectScenario("source-main-signal")
  }

  /// Signal sources on the main queue, a serial queue and a global queue, on one signal and
  /// on two, in one process.
  @Test func signalSourcesWithDifferentTargetsCoexist() {
    expectScenario("signal-mix")
  }
}
