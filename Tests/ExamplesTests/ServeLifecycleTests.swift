import Glibc
import TestSupport
import Testing

/// Issue 21, the connection's life: a drain that ends at its deadline, a second signal, the
/// write timeout, half-closed clients, HEAD, `Expect: 100-continue`, and an idle timeout
/// counted from the last activity.
@Suite struct ServeLifecycleTests {
  private func start(_ extra: [String] = []) throws -> (ServeProcess, UInt16) {
    let server = ServeProcess(["serve", "--port", "0"] + extra)
    let port = try #require(server.waitForPort(), "no port; stderr: \(server.errorText)")
    return (server, port)
  }

  /// A client that pipelines requests and never reads keeps answers pending; SIGTERM still
  /// ends the process with status 0, no earlier than the drain deadline (3 s by default)
  /// and well before the client would ever read. (Before: still running 12 s later.)
  @Test func drainEndsAtItsDeadlineWithAClientThatNeverReads() throws {
    // The write timeout (10 s by default) is pushed out of the way: under a sanitizer the
    // client can take that long to stall, and then the timeout, not the drain, would close it.
    let (server, port) = try start(["--write-timeout-ms", "600000"])
    let client = try #require(ServeClient(port: port, receiveBuffer: 4096))
    let (sender, sent) = pipelineWithoutReading(client, count: 6_000)
    waitUntilStalled(sent, count: 6_000)
    #expect(sent.current < 6_000, "the server should be holding this client back")
    let start = monotonicSeconds()
    server.send(SIGTERM)
    let status = server.waitForExit(seconds: 15)
    let elapsed = monotonicSeconds() - start
    #expect(status == 0, "stdout: \(server.outputText) stderr: \(server.errorText)")
    #expect(elapsed >= 2.9)  // Not before the deadline: the drain waited for the client.
    #expect(server.outputText.contains("drain deadline: closing 1 connection(s)"))
    client.reset()
    pthread_join(sender, nil)
  }

  /// A second SIGTERM during the drain exits at once, status 0, while a request is still in
  /// flight (a 20 s /delay) and the drain deadline (3 s) is far off.
  @Test func aSecondSignalExitsAtOnce() throws {
    let (server, port) = try start()
    let busy = try #require(ServeClient(port: port))
    busy.send("GET /delay?ms=20000 HTTP/1.1\r\nHost: t\r\n\r\n")
    let probe = try #require(ServeClient(port: port))  // The /delay request has arrived.
    probe.send("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    #expect(probe.readResponse()?.status == 200)
    server.send(SIGTERM)
    #expect(server.waitForOutput(containing: "SIGTERM: stopping"))
    let start = monotonicSeconds()
    server.send(SIGTERM)
    let status = server.waitForExit(seconds: 2.5)
    #expect(status == 0, "exit after \(monotonicSeconds() - start) s; \(server.outputText)")
    #expect(server.outputText.contains("SIGTERM again: exiting now"))
  }

  /// A client that never takes its answers is closed once writing has made no progress for
  /// `--write-timeout-ms` (the idle timeout, 10 s here, does not apply while answers wait).
  @Test func theWriteTimeoutClosesAClientThatNeverReads() throws {
    let (server, port) = try start(["--write-timeout-ms", "300"])
    let client = try #require(ServeClient(port: port, receiveBuffer: 4096))
    let (sender, sent) = pipelineWithoutReading(client, count: 6_000)
    waitUntilStalled(sent, count: 6_000)
    #expect(sent.current < 6_000)
    // The stuck connection goes away: only the probe's own connection is left.
    let probe = try #require(ServeClient(port: port))
    var connections = ""
    let deadline = monotonicSeconds() + 8
    while monotonicSeconds() < deadline {
      probe.send("GET /stats HTTP/1.1\r\nHost: t\r\n\r\n")
      connections =
        probe.readResponse()?.body.split(separator: "\n")
        .first { $0.hasPrefix("connections ") }.map(String.init) ?? "no answer"
      if connections == "connections 1" { break }
      var pause = timespec(tv_sec: 0, tv_nsec: 20_000_000)
      nanosleep(&pause, nil)  // Polling, with a deadline.
    }
    #expect(connections == "connections 1")
    pthread_join(sender, nil)  // Its sends fail once the server has closed the connection.
    server.send(SIGTERM)
    #expect(server.waitForExit(seconds: 15) == 0)
  }

  /// Requests sent before the client's FIN (`shutdown(SHUT_WR)`) are all answered, in order,
  /// then the connection closes; a request cut short by the FIN is not answered.
  @Test func aHalfClosedClientGetsEveryAnswer() throws {
    let (server, port) = try start()
    let single = try #require(ServeClient(port: port))
    single.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    single.shutdownWrite()
    #expect(single.readResponse()?.body == "hello from LoopDispatch\n")
    #expect(single.readsEndOfFile())

    let pipelined = try #require(ServeClient(port: port))
    pipelined.send(
      "GET / HTTP/1.1\r\nHost: t\r\n\r\nGET /hash?bytes=10 HTTP/1.1\r\nHost: t\r\n\r\n"
        + "GET /delay?ms=50 HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\nGET /partial"
    )
    pipelined.shutdownWrite()
    #expect(pipelined.readResponse()?.status == 200)
    #expect(pipelined.readResponse()?.body == "fnv1a(10 bytes) = b4b4221e5bfb6820\n")
    #expect(pipelined.readResponse()?.body == "waited 50 ms\n")
    #expect(pipelined.readResponse()?.status == 404)
    #expect(pipelined.readsEndOfFile())
    server.send(SIGTERM)
    #expect(server.waitForExit(seconds: 15) == 0)
  }

  /// HEAD gets GET's headers (its Content-Length included) and no body, so the next answer on
  /// the connection parses.
  @Test func headAnswersHaveNoBody() throws {
    let (server, port) = try start()
    let client = try #require(ServeClient(port: port))
    client.send(
      "HEAD / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\nHEAD /hash?bytes=10 HTTP/1.1\r\nHost: t\r\n\r\n"
        + "GET /hash?bytes=10 HTTP/1.1\r\nHost: t\r\n\r\n")
    let head = try #require(client.readResponse(bodyless: true))
    #expect(head.status == 200)
    #expect(head.headers["content-length"] == "24")
    let get = try #require(client.readResponse())
    #expect(get.status == 200)
    #expect(get.body == "hello from LoopDispatch\n")
    let hashHead = try #require(client.readResponse(bodyless: true))
    let hashGet = try #require(client.readResponse())
    #expect(hashGet.body == "fnv1a(10 bytes) = b4b4221e5bfb6820\n")
    #expect(hashHead.headers["content-length"] == "\(hashGet.body.utf8.count)")
    #expect(!client.hasUnreadBytes)
    server.send(SIGTERM)
    #expect(server.waitForExit(seconds: 15) == 0)
  }

  /// `Expect: 100-continue` with the body not sent yet gets `100 Continue` before the body is
  /// read; a body sent with the head, or an HTTP/1.0 request, gets no interim answer.
  @Test func expectContinueGetsAnInterimAnswer() throws {
    let (server, port) = try start()
    let client = try #require(ServeClient(port: port))
    client.send("POST / HTTP/1.1\r\nHost: x\r\nexpect: 100-Continue\r\nContent-Length: 5\r\n\r\n")
    let interim = String(decoding: client.readBytes(25, milliseconds: 5_000), as: UTF8.self)
    #expect(interim == "HTTP/1.1 100 Continue\r\n\r\n")
    client.send("hello")
    #expect(client.readResponse()?.status == 200)

    client.send(
      "POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
    #expect(client.readResponse()?.status == 200)
    let old = try #require(ServeClient(port: port))
    old.send("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    #expect(old.readBytes(1, milliseconds: 300).isEmpty)
    old.send("hello")
    #expect(old.readResponse()?.status == 200)
    server.send(SIGTERM)
    #expect(server.waitForExit(seconds: 15) == 0)
  }

  /// The idle timeout counts from the end of the last answer: with a 2 s timeout, a 3 s
  /// request's connection stays open 1.5 s after its answer (it was closed after 1 s), takes
  /// another request, and is closed once idle.
  @Test func theIdleTimeoutCountsFromTheLastAnswer() throws {
    let (server, port) = try start(["--idle-timeout-ms", "2000"])
    let client = try #require(ServeClient(port: port))
    client.send("GET /delay?ms=3000 HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(client.readResponse()?.body == "waited 3000 ms\n")
    #expect(client.staysOpen(milliseconds: 1_500))
    client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(client.readResponse()?.status == 200)
    #expect(client.readsEndOfFile())
    server.send(SIGTERM)
    #expect(server.waitForExit(seconds: 15) == 0)
  }

  /// Absolute-form targets (RFC 9112 section 3.2.2) are served for the server's own
  /// authority and answered 421 for any other.
  @Test func absoluteFormIsServedForTheServersOwnAuthority() throws {
    let (server, port) = try start([])
    let client = try #require(ServeClient(port: port))
    client.send("GET http://127.0.0.1:\(port)/hash?bytes=10 HTTP/1.1\r\nHost: t\r\n\r\n")
    let own = try #require(client.readResponse())
    #expect(own.status == 200)
    #expect(own.body == "fnv1a(10 bytes) = b4b4221e5bfb6820\n")
    client.send("GET HTTP://LOCALHOST:\(port)/ HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(client.readResponse()?.status == 200)
    client.send("GET http://example.com:\(port)/ HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(client.readResponse()?.status == 421)
    client.send("GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(client.readResponse()?.status == 421)
    server.send(SIGTERM)
    #expect(server.waitForExit(seconds: 15) == 0)
  }
}

/// Starts a thread that pipelines `count` 2 KiB requests for /metrics on `client` and never
/// reads an answer; it stops early when a send fails (the server closed the connection).
/// Returns the thread and the number of requests sent so far.
func pipelineWithoutReading(_ client: ServeClient, count: Int) -> (pthread_t, Counter) {
  let request =
    "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Pad: \(String(repeating: "x", count: 2_000))\r\n\r\n"
  let sent = Counter()
  let fd = client.fd
  let sender = startThread {
    let bytes = Array(request.utf8)
    for _ in 0..<count {
      var offset = 0
      while offset < bytes.count {
        let n = bytes.withUnsafeBytes {
          send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
        }
        if n <= 0 { return }
        offset += n
      }
      sent.increment()
    }
  }
  return (sender, sent)
}

/// Polls (every millisecond, at most 60 s) until `sent` reaches `count` or has not moved for
/// 2 s: the server has stopped reading because its answers are stuck. (A shorter quiet spell
/// is not enough under ThreadSanitizer: the slowed server can take a second to work through
/// one socket buffer of requests, and the sender waits meanwhile although nothing is stuck.)
func waitUntilStalled(_ sent: Counter, count: Int) {
  let deadline = monotonicSeconds() + 60
  var last = -1
  var unchangedSince = monotonicSeconds()
  while sent.current < count && monotonicSeconds() - unchangedSince < 2
    && monotonicSeconds() < deadline
  {
    if sent.current != last {
      last = sent.current
      unchangedSince = monotonicSeconds()
    }
    var pause = timespec(tv_sec: 0, tv_nsec: 1_000_000)
    nanosleep(&pause, nil)
  }
}
