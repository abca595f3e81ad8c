import LoopDispatch
import Testing

/// Source misuse traps with one line naming the source (the child process's stderr is
/// checked). Descriptor errors are thrown, not trapped: see SourceFileDescriptorTests.
@Suite struct SourceMisuseTests {
  @Test func overResumeAfterABalancedSuspend() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let source = DataSource(merge: .add, label: "balanced")
      source.activate()
      source.suspend()
      source.resume()
      source.resume()
    }
    expectMessage(result, "resume() on source \"balanced\" that is not suspended (over-resume)")
  }

  @Test func resumeOfAnActiveSourceThatWasNeverSuspended() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let source = TimerSource(label: "ticking")
      source.schedule(deadline: .distantFuture)
      source.resume()
      source.resume()
    }
    expectMessage(result, "resume() on source \"ticking\" that is not suspended (over-resume)")
  }

  @Test func overResumeOfAReadSource() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let (readEnd, _) = try makePipe()
      let source = try ReadSource(fd: readEnd, label: "piped")
      source.activate()
      source.resume()
    }
    expectMessage(result, "resume() on source \"piped\" that is not suspended (over-resume)")
  }
}
