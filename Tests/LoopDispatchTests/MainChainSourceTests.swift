import TestSupport
import Testing

/// Sources and timers of queues whose target chain ends at the main queue live on the main
/// loop and run on the main thread (the `main-chain` scenario of LoopDispatchTestHost, which
/// needs the process main thread).
@Suite struct MainChainSourceTests {
  @Test func sourcesOfAQueueTargetingMainRunOnTheMainLoop() {
    let result = runProgram("LoopDispatchTestHost", ["main-chain"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok main-chain"), "\(result.output)")
  }

  /// A data source posted to on the main thread outside a main-queue item delivers as
  /// main-queue work, not inside `post` or `resume` (the `main-post` scenario).
  @Test func postOnTheMainThreadDeliversAsMainQueueWork() {
    let result = runProgram("LoopDispatchTestHost", ["main-post"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok main-post"), "\(result.output)")
  }
}
