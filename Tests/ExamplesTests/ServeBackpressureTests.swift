import Glibc
import TestSupport
import Testing

/// A client that pipelines requests without reading its answers must not make the server
/// buffer without bound: the connection stops reading once 256 KiB of answers wait, and
/// resumes when the client takes them.
@Suite struct ServeBackpressureTests {
  @Test func aClientThatPipelinesWithoutReadingIsHeldBack() throws {
    // A 150 ms idle timeout, shorter than the 200 ms the client waits before reading: a
    // connection held back with answers waiting is busy, not idle, and must stay open.
    let server = BackgroundProgram(
      "Examples", ["serve", "--port", "0", "--idle-timeout-ms", "150"])
    let line = try #require(server.readLine(containing: "listening on http://127.0.0.1:"))
    let port = try #require(
      line.split(separator: ":").last?.split(separator: "/").first.flatMap { UInt16($0) })
    // A small receive buffer: the client's kernel takes little of the answers.
    let client = try #require(ServeClient(port: port, receiveBuffer: 4096))
    let peakBefore = processStatusKilobytes(of: server.pid, field: "VmHWM")

    // 6,000 requests of 2 KiB each: 12 MiB, more than the kernel's socket buffers hold, so
    // the sender only finishes if the server reads them all. Each answer (/metrics) is a few
    // KiB: without backpressure the server would hold tens of MiB of answers.
    let count = 6_000
    let (sender, sent) = pipelineWithoutReading(client, count: count)  // ServeLifecycleTests
    // Nobody reads the answers until the sender has sent everything or has made no progress
    // for 200 ms (held back by the server). The pause only decides when reading starts: a
    // server that holds back passes whenever it starts; one that does not would have read
    // all 12 MiB and buffered every answer by then. Polled every millisecond.
    var lastSent = -1
    var unchangedSince = monotonicMilliseconds()
    while sent.current < count && monotonicMilliseconds() - unchangedSince < 200 {
      if sent.current != lastSent {
        lastSent = sent.current
        unchangedSince = monotonicMilliseconds()
      }
      var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
      nanosleep(&pause, nil)
    }
    var answered = 0
    while answered < count, let response = client.readResponse() {
      if response.status == 200 && response.body.contains("loopdispatch_pool_threads") {
        answered += 1
      } else {
        break
      }
    }
    pthread_join(sender, nil)
    #expect(answered == count)
    let peakAfter = processStatusKilobytes(of: server.pid, field: "VmHWM")
    print("backpressure: \(answered) answers, server peak RSS \(peakBefore) kB -> \(peakAfter) kB")
    // Held back, the server keeps at most 256 KiB of answers and 32 KiB of requests per
    // connection; 8 MiB leaves room for allocator noise. Not checked under a sanitizer
    // (ASan's quarantine and TSan's shadow memory grow with every allocation); the plain and
    // release runs check it (without backpressure the growth is ~47 MiB).
    if dlsym(nil, "__asan_init") == nil && dlsym(nil, "__tsan_init") == nil {
      #expect(peakAfter - peakBefore < 8 * 1024)
    }
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }
}

private func monotonicMilliseconds() -> Int {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return now.tv_sec * 1000 + now.tv_nsec / 1_000_000
}
