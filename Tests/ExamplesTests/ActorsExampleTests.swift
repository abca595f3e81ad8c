import TestSupport
import Testing

@Suite struct ActorsExampleTests {
  @Test func actorOnAQueueWithMainActorUpdates() {
    let result = runProgram("Examples", ["actors"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    let lines = result.output.split(separator: "\n")
    // Actor methods run on the actor's queue; screen updates on the main queue and thread.
    let stored = lines.filter { $0.contains("library: stored") }
    #expect(stored.count == 4)
    // They run on a pool worker, for the actor's queue. (A worker shows the queue's label as
    // its thread name only once it has drained the queue for a tick: these are shorter.)
    #expect(stored.allSatisfy { $0.contains("[library @ ld.worker.") })
    let screen = lines.filter { $0.contains("screen:") }
    #expect(screen.count == 6)
    #expect(screen.allSatisfy { $0.contains("[loopdispatch.main @ main thread]") })
    #expect(screen.allSatisfy { $0.hasSuffix("(on the main thread: true)") })
    #expect(lines.filter { $0.contains("decoded photo") }.allSatisfy { $0.contains("ld.worker.") })
    #expect(result.output.contains("done: 4 photos after 5 screen updates"))
  }
}
