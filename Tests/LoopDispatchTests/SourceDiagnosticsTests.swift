import Glibc
import TestSupport
import Testing

@testable import LoopDispatch

/// The words a stalled test prints (`SourceCore.protocolDescription`,
/// `PoolDiagnostics.snapshot`): each names what it claims to, so a CI failure report can be
/// trusted.
@Suite struct SourceDiagnosticsTests {
  /// A read source through its life: inactive, armed with the I/O driver, its number taken
  /// over by another file behind its back (what a double `close` elsewhere in a process does),
  /// then cancelled.
  @Test func anFdSourceDescribesItsStepsAndANumberThatNoLongerNamesItsFile() throws {
    let (readEnd, writeEnd) = try makePipe()
    let queue = Queue(label: "described")
    let source = try ReadSource(fd: readEnd, queue: queue)
    let cancelled = Latch()
    source.setEventHandler {}
    source.setCancelHandler { cancelled.open() }

    let inactive = source.core.protocolDescription
    #expect(inactive.hasPrefix("status [] "), "\(inactive)")
    #expect(inactive.contains("cancelSteps 2"), "\(inactive)")
    #expect(inactive.contains("no driver entry"), "\(inactive)")

    source.activate()
    let armed = source.core.protocolDescription
    #expect(armed.hasPrefix("status [activated] "), "\(armed)")
    #expect(armed.contains("armed 1 sources 1 owing 0"), "\(armed)")
    #expect(armed.contains("current true"), "\(armed)")
    #expect(armed.contains("fd names its file true"), "\(armed)")
    #expect(armed.contains("readable 0"), "\(armed)")

    // Another file now has the source's number, as if something closed it and the number
    // was handed out again.
    let (otherRead, otherWrite) = try makePipe()
    #expect(dup2(otherRead, readEnd) == readEnd)
    let replaced = source.core.protocolDescription
    #expect(replaced.contains("fd names its file false"), "\(replaced)")

    source.cancel()
    #expect(cancelled.wait())
    let done = source.core.protocolDescription
    #expect(
      done.hasPrefix("status [activated,cancelled,cancelReady,cancelSubmitted] "), "\(done)")
    #expect(done.contains("cancelSteps 0"), "\(done)")
    #expect(done.contains("no driver entry"), "\(done)")
    for fd in [readEnd, writeEnd, otherRead, otherWrite] { close(fd) }
  }

  /// The pool's snapshot names a busy worker that holds the test's job, and its lanes.
  @Test func thePoolSnapshotShowsABusyWorker() {
    let started = Latch()
    let release = Latch()
    Queue.global().async {
      started.open()
      _ = release.wait(seconds: 60)
    }
    #expect(started.wait())
    let snapshot = PoolDiagnostics.snapshot
    release.open()
    #expect(snapshot.hasPrefix("threads "), "\(snapshot)")
    #expect(snapshot.contains("injection ["), "\(snapshot)")
    #expect(snapshot.contains(": busy true, run-next "), "\(snapshot)")
  }
}
