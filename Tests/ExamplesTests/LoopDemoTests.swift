import TestSupport
import Testing

@Suite struct LoopDemoTests {
  @Test func loopDemoRunsOnTheMainThreadAndExitsCleanly() {
    let result = runProgram("Examples", ["loop"])
    let (status, output) = (result.status, result.output)
    #expect(status == 0)
    #expect(output.contains("EventLoop.main runs on the process main thread: true"))
    #expect(output.contains("message 1"))
    for index in 1...3 {
      #expect(output.contains("posted closure \(index) runs on the main thread: true"))
    }
    // Timers report their lateness; a negative figure would mean an early fire.
    let timerLines = output.split(separator: "\n").filter { $0.contains("timer ") }
    #expect(timerLines.count == 3)
    #expect(!output.contains("fired -"))
    #expect(output.contains("fd watch cancelled and its descriptors closed"))
  }

  @Test func unknownSubcommandFails() {
    let result = runProgram("Examples", ["no-such-command"])
    #expect(result.status == 2)
    #expect(result.errorOutput.contains("unknown subcommand 'no-such-command'"))
  }
}
