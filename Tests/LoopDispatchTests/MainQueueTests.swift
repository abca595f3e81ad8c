import TestSupport
import Testing

/// Main-queue behaviour runs in `LoopDispatchTestHost`, whose main thread runs the loop.
@Suite struct MainQueueTests {
  private func expectScenario(
    _ name: String, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    let result = runProgram("LoopDispatchTestHost", [name])
    #expect(
      result.status == 0, "\(result.output)\(result.errorOutput)", sourceLocation: sourceLocation)
    #expect(result.output.contains("ok \(name)"), sourceLocation: sourceLocation)
  }

  @Test func itemsRunOnTheMainThreadInOrderPerProducer() { expectScenario("main-order") }
  @Test func syncFromAWorkerRunsOnTheMainThread() { expectScenario("main-sync") }
  @Test func mainQueueTimersAreNeverEarlyAndCancelReleases() { expectScenario("main-after") }
  @Test func aFloodOfMainQueueWorkDoesNotStarveDescriptors() { expectScenario("main-fairness") }
  @Test func runMainNeverReturnsAndStopExitsCleanly() { expectScenario("main-run-forever") }
  @Test func semaphoreGateHoldsThenReleasesInOrder() { expectScenario("main-gate") }

  @Test func syncOntoMainFromTheMainThreadTraps() {
    let result = runProgram("LoopDispatchTestHost", ["main-sync-from-main"])
    #expect(result.status != 0)
    #expect(
      result.errorOutput.contains(
        "BUG IN CLIENT OF LOOPDISPATCH: sync onto the main queue from the main thread"))
  }
}

@Suite struct MainActorIntegrationTests {
  @Test(arguments: ["main-actor", "dispatch-main-queue", "main-actor-no-install"])
  func mainThreadWorkRunsUnderTheMainLoop(scenario: String) {
    // main-actor: with install(); dispatch-main-queue: DispatchQueue.main.async and
    // asyncAfter under Queue.runMain(); main-actor-no-install: @MainActor work on Swift's
    // default main executor (Dispatch's main queue), drained by the main loop.
    let result = runProgram("LoopDispatchTestHost", [scenario])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok \(scenario)"))
  }

  /// An async `@main` and top-level `await`, each calling `ConcurrencyIntegration.install()`
  /// first: main-actor code on the main thread, detached tasks on the pool, `Task.sleep`
  /// long enough. (The async main hung after its first `await` before Dispatch's main queue
  /// was drained by the main loop.)
  /// And an async `@main` that calls nothing, installed at load time by the
  /// `LoopDispatchAutoInstall` product's C constructor.
  @Test(arguments: [
    ("AsyncMainHost", "async-main"), ("TopLevelAwaitHost", "top-level-await"),
    ("AutoInstallHost", "auto-install"),
  ])
  func entryShapesRunOnLoopDispatch(program: String, name: String) {
    let result = runProgram(program, [])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok \(name)"))
  }
}

@Suite struct MainQueueSourcePauseTests {
  @Test func suspendedMainQueueSourceDoesNotSpinTheLoop() {
    let result = runProgram("LoopDispatchTestHost", ["main-source-no-spin"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok main-source-no-spin"))
  }
}

@Suite struct IdleCostTests {
  @Test func anIdleRuntimeWakesAtMostOncePerSecond() {
    let result = runProgram("LoopDispatchTestHost", ["idle"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok idle"))
  }
}

@Suite struct MainStallWatchdogTests {
  @Test func aLongMainQueueItemIsReportedWithItsQueue() {
    let result = runProgram("LoopDispatchTestHost", ["main-stall"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    let reports = result.errorOutput.split(separator: "\n").filter {
      $0.hasPrefix("LoopDispatch: main-thread stall: an item of queue \"ui\" has been running for")
    }
    #expect(reports.count == 1)
    #expect(!result.errorOutput.contains("queue \"loopdispatch.main\""))
  }
}
