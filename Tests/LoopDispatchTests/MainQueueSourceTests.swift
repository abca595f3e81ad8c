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

  /// A process source on the main queue: the exit runs the handler on the main thread, once,
  /// and waitpid still gets the status.
  @Test func aMainQueueProcessSourceRunsOnTheMainThread() {
    expectScenario("source-main-process")
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
