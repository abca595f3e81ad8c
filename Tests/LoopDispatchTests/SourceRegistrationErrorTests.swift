import Glibc
import LoopDispatch
import TestSupport
import Testing

/// A source the system refuses to watch says so (`registrationError`) and still completes
/// its cancel (before, the refusal was one line on standard error and nothing the caller
/// could read).
@Suite struct SourceRegistrationErrorTests {
  @Test func aDescriptorEpollRefusesIsReportedAndCancelStillCompletes() {
    let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
    #expect(fd >= 0)
    let cancelled = Latch()
    let source: ReadSource
    do {
      source = try ReadSource(fd: fd, queue: Queue(label: "refused"), label: "dev-null")
    } catch {
      Issue.record("init threw \(error)")
      return
    }
    #expect(source.registrationError == nil)
    source.setCancelHandler {
      close(fd)
      cancelled.open()
    }
    source.activate()
    // epoll refuses character devices without poll support, such as /dev/null (EPERM).
    #expect(source.registrationError == .registrationFailed(errno: EPERM))
    source.cancel()
    #expect(cancelled.wait(seconds: 30), "the cancel handler never ran")
  }
}
