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
}
