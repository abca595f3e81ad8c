import TestSupport
import Testing

/// Smoke tests of the seed programs (`Examples <name>`): each runs as a child process, must
/// exit as expected and print the lines a reader follows. Every program also checks itself
/// and exits 1 on a wrong result; these tests check the story its output tells.
@Suite struct SeedExamplesTests {
  static let programs = [
    "barrier", "gate", "average", "apply", "group", "after", "once", "suspend", "context",
    "deadlock",
  ]

  @Test func barrierReadsOverlapAndWritesRunAlone() {
    let run = runExample("barrier")
    #expect(run.status == 0)
    #expect(run.has("writes overlapping: 0"))
    #expect(run.has("(2 readers inside)"))
    let summary = run.lines.first { $0.contains("max readers at once: ") }
    let most = summary.flatMap { Int($0.after("max readers at once: ").prefix { $0.isNumber }) }
    #expect((most ?? 0) >= 2)
    let writes = run.lines.filter { $0.contains("] write ") }
    #expect(writes.count == 5)
    #expect(writes.allSatisfy { $0.hasSuffix("(alone)") })
    #expect(run.has("store after all writes: a=10 b=11 c=12"))
  }

  @Test func gateHoldsOperationsUntilInitializationThenRunsThemInOrder() {
    let run = runExample("gate")
    #expect(run.status == 0)
    #expect(run.has("initialization finished (operations run so far: 0); signalling"))
    let opened = run.index { $0.contains("gate: initialization signalled") }
    let ran = (1...5).compactMap { number in run.index { $0.hasSuffix("operation \(number) runs") }
    }
    #expect(ran.count == 5)
    #expect(ran == ran.sorted())
    if let opened, let first = ran.first { #expect(opened < first) }
    #expect(run.has("operations ran in order 1 2 3 4 5"))
    #expect(run.has("all 5 held operations ran in submission order, none lost"))
  }

  @Test func averageDeliversItsCompletionOnTheMainQueue() {
    let run = runExample("average")
    #expect(run.status == 0)
    let computed = run.index { $0.contains("@ ld.worker.") && $0.contains("averaging 1000") }
    let completed = run.index {
      $0.contains("[loopdispatch.main @ main thread] completion: average = 500")
    }
    let returned = run.index { $0.contains("averageAsync returned at once") }
    #expect(computed != nil && completed != nil && returned != nil)
    if let returned, let completed { #expect(returned < completed) }
    #expect(run.has("on the main thread: true"))
  }

  @Test func applyCoversEveryChunkBeforeReturning() {
    let run = runExample("apply")
    #expect(run.status == 0)
    let chunks = run.lines.filter { $0.contains("] chunk ") }
    #expect(chunks.count == 8)
    let returned = run.index { $0.contains("concurrentPerform returned") }
    let lastChunk = run.lines.lastIndex { $0.contains("] chunk ") }
    if let returned, let lastChunk { #expect(lastChunk < returned) }
    #expect(run.has("sum = 333332833333500000, expected 333332833333500000"))
  }

  @Test func groupWaitsTimesOutAndNotifies() {
    let run = runExample("group")
    #expect(run.status == 0)
    #expect(run.has("wait returned success: 3 of 3 downloads finished"))
    #expect(run.has("wait(timeout: 20 ms) returned timedOut"))
    #expect(run.has("after the release, wait returned success"))
    #expect(run.has("[loopdispatch.main @ main thread] notify: 3 of 3 uploads done"))
  }

  @Test func afterFiresThePromptAndNeverTheCancelledReminder() {
    let run = runExample("after")
    #expect(run.status == 0)
    let tap = run.index { $0.contains("user tapped at") }
    let prompt = run.index { $0.contains("prompt \"Tap + to add a photo\"") }
    #expect(tap != nil && prompt != nil)
    if let tap, let prompt { #expect(tap < prompt) }
    if let prompt {
      let millis = Int(run.lines[prompt].after("photo\" at ").prefix { $0.isNumber })
      #expect((millis ?? 0) >= 40)
    }
    #expect(!run.has("reminder: still there?"))
    #expect(run.has("reminder cancelled: true, ran: false"))
  }

  @Test func onceCreatesOneInstanceWhereTheNaiveSingletonCreatesMany() {
    let run = runExample("once")
    #expect(run.status == 0)
    #expect(run.has("naive: 8 instances created by 8 racers"))
    #expect(run.has("with Once: 1 instance created by 8 racers"))
    let second = run.index { $0.contains("2. Once") } ?? run.lines.count
    let gotFirst = run.lines[second...].filter { $0.hasSuffix("got PhotoManager #1") }
    #expect(gotFirst.count == 8)
  }

  @Test func suspendHoldsItemsBetweenItemsUntilTheLastResume() {
    let run = runExample("suspend")
    #expect(run.status == 0)
    #expect(run.has("20 ms later: item 2 started? false; items run: [1]"))
    #expect(run.has("suspended twice, resumed once: item 2 started? false"))
    #expect(run.has("items run: [1, 2, 3]"))
  }

  @Test func contextIsSeenByEachItemAndFinalizedAfterTheLast() {
    let run = runExample("context")
    #expect(run.status == 0)
    for number in 1...3 {
      #expect(run.has("item \(number): context is client 42, request \(number)"))
    }
    #expect(run.has("finalizer: client 42 served 3 requests"))
    #expect(run.has("order: item 1, item 2, item 3, finalizer"))
  }

  @Test func deadlockTrapsWithTheClientBugLine() {
    let run = runExample("deadlock")
    #expect(run.status != 0)
    #expect(run.result.signal == 6)  // abort()
    #expect(run.has("about to call queue.sync { queue.sync {} }"))
    #expect(
      run.result.errorOutput.contains(
        "BUG IN CLIENT OF LOOPDISPATCH: sync onto queue \"deadlock.demo\" already owned by this thread"
      ))
  }

  @Test func tourRunsEveryProgramAndExitsZero() {
    let run = runExample("tour")
    #expect(run.status == 0)
    var previous = -1
    for name in Self.programs {
      let header = run.index { $0.hasPrefix("=== \(name) ===") }
      #expect(header != nil, "missing section \(name)")
      if let header {
        #expect(header > previous, "section \(name) out of order")
        previous = header
      }
    }
    #expect(run.has("the child trapped (signal 6) and wrote: BUG IN CLIENT OF LOOPDISPATCH"))
    #expect(run.has("tour: all 10 programs behaved as expected"))
    #expect(!run.has("FAILED"))
  }

  @Test func helpListsEverySubcommand() {
    let run = runExample("help")
    #expect(run.status == 0)
    for name in Self.programs + ["tour", "loop", "serve"] {
      #expect(run.lines.contains { $0.hasPrefix("  \(name) ") }, "help misses \(name)")
    }
  }
}

/// One finished run of `Examples <name>`, with its output split into lines.
private struct ExampleRun {
  let result: ProgramResult
  let lines: [String]
  var status: Int32 { result.status }

  func has(_ text: String) -> Bool { lines.contains { $0.contains(text) } }
  func index(where predicate: (String) -> Bool) -> Int? { lines.firstIndex(where: predicate) }
}

private func runExample(_ name: String) -> ExampleRun {
  let result = runProgram("Examples", [name])
  if result.status != 0 && name != "deadlock" {
    // Show what the program said when it fails.
    print("Examples \(name) exited with \(result.status):\n\(result.output)\(result.errorOutput)")
  }
  return ExampleRun(result: result, lines: result.output.split(separator: "\n").map(String.init))
}

extension String {
  /// The text after the first occurrence of `marker` (empty if absent).
  fileprivate func after(_ marker: String) -> Substring {
    guard let range = firstRange(of: marker) else { return "" }
    return self[range.upperBound...]
  }
}
