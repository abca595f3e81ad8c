import Glibc
import Testing

/// `Tests/CloseGuard`, preloaded by `make test-unit` and `make test-release`: a descriptor
/// closed twice stops the process with the guard's line. Runs only where the guard is loaded
/// (not under the sanitizers, not in a bare `swift test`).
@Suite(.enabled(if: closeGuardIsLoaded)) struct CloseGuardTests {
  @Test func aSecondCloseOfADescriptorStopsTheProcess() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      var ends: [Int32] = [-1, -1]
      guard pipe(&ends) == 0 else { return }
      close(ends[1])
      close(ends[0])
      close(ends[0])  // The double close: the guard aborts here.
    }
    if let result {
      let output = String(decoding: result.standardErrorContent, as: UTF8.self)
      #expect(output.contains("close_guard: close("), "\(output)")
    }
  }

  @Test func aFirstCloseAndAnUnusedNumberPassThrough() {
    var ends: [Int32] = [-1, -1]
    #expect(pipe(&ends) == 0)
    #expect(close(ends[0]) == 0)
    #expect(close(ends[1]) == 0)
    // A negative number is not a double close: EBADF is returned, the process goes on.
    #expect(close(-1) == -1 && errno == EBADF)
  }
}

/// Whether `LD_PRELOAD` names the guard's library.
private let closeGuardIsLoaded: Bool = {
  guard let preload = getenv("LD_PRELOAD") else { return false }
  return String(cString: preload).contains("libcloseguard")
}()
