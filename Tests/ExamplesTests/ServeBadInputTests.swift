import Glibc
import TestSupport
import Testing

/// Framing edge cases of the `serve` example: conflicting `Content-Length` values (request
/// smuggling), bare LF line endings and bodies over the limit. Each is answered at once: the
/// server runs with a one-minute idle timeout and the client gives up after a few seconds, so
/// a request the server sits on fails as a missing answer instead of being closed by the
/// idle timer.
@Suite struct ServeBadInputTests {
  /// Seconds the client waits for each answer or end of file.
  private static let readDeadline = 3

  /// Starts `Examples serve --port 0` with a one-minute idle timeout.
  private func startServer() -> (BackgroundProgram, UInt16)? {
    let server = BackgroundProgram(
      "Examples", ["serve", "--port", "0", "--idle-timeout-ms", "60000"])
    guard let line = server.readLine(containing: "listening on http://127.0.0.1:"),
      let portText = line.split(separator: ":").last?.split(separator: "/").first,
      let port = UInt16(portText)
    else { return nil }
    return (server, port)
  }

  /// A client whose reads (and writes to a server that stopped reading) give up after
  /// `readDeadline` seconds.
  private func connect(_ port: UInt16) -> ServeClient? {
    guard let client = ServeClient(port: port) else { return nil }
    var timeout = timeval(tv_sec: Self.readDeadline, tv_usec: 0)
    let size = socklen_t(MemoryLayout<timeval>.size)
    setsockopt(client.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, size)
    setsockopt(client.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, size)
    return client
  }

  /// Sends `request` on a new connection; expects `status`, then the server's close.
  private func expectRefusal(
    _ request: String, status: Int, port: UInt16, sourceLocation: SourceLocation = #_sourceLocation
  ) throws {
    let client = try #require(connect(port), sourceLocation: sourceLocation)
    client.send(request)
    let response = try #require(client.readResponse(), sourceLocation: sourceLocation)
    #expect(response.status == status, sourceLocation: sourceLocation)
    #expect(response.headers["connection"] == "close", sourceLocation: sourceLocation)
    #expect(client.readsEndOfFile(), sourceLocation: sourceLocation)
  }

  @Test func conflictingContentLengthsGet400AndAClose() throws {
    let (server, port) = try #require(startServer())
    // Without the check the last value framed the body: the server waited for 100 bytes.
    try expectRefusal(
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 100\r\n\r\nhello",
      status: 400, port: port)
    // The same conflict as one list, and with the larger value first.
    try expectRefusal(
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 6\r\n\r\nhello", status: 400, port: port)
    try expectRefusal(
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 7\r\ncontent-length: 5\r\n\r\nhello",
      status: 400, port: port)
    // Signs are not digits (`Int("+5")` would take it as 5).
    try expectRefusal(
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nhello", status: 400, port: port)
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }

  @Test func identicalContentLengthsFrameTheBodyOnce() throws {
    let (server, port) = try #require(startServer())
    let client = try #require(connect(port))
    // Identical copies (repeated, listed or with leading zeros) are one length of 5: the
    // request after the body is parsed from the right place.
    client.send(
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5, 005\r\n\r\nhello"
        + "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(client.readResponse()?.status == 200)
    #expect(client.readResponse()?.status == 404)
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }

  @Test func bareLineFeedsEndLines() throws {
    let (server, port) = try #require(startServer())
    let client = try #require(connect(port))
    client.send("GET / HTTP/1.1\nHost: x\n\n")
    let response = try #require(client.readResponse())
    #expect(response.status == 200)
    #expect(response.body == "hello from LoopDispatch\n")
    #expect(response.headers["connection"] == "keep-alive")
    // Pipelined on the same connection: bare LF, mixed endings, a body, then a close.
    client.send(
      "GET /hash?bytes=10 HTTP/1.1\nHost: x\n\n"
        + "POST /nope HTTP/1.1\r\nHost: t\r\nContent-Length: 3\n\r\nabc"
        + "GET / HTTP/1.1\nHost: x\nConnection: close \n\n")
    #expect(client.readResponse()?.body == "fnv1a(10 bytes) = b4b4221e5bfb6820\n")
    #expect(client.readResponse()?.status == 404)
    let last = try #require(client.readResponse())
    #expect(last.status == 200)
    #expect(last.headers["connection"] == "close")
    #expect(client.readsEndOfFile())
    // A CR that does not end a line is refused.
    try expectRefusal("GET / HTTP/1.1\nX-A: a\rb\n\n", status: 400, port: port)
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }

  @Test func bodiesOverTheLimitGet413AndAClose() throws {
    let (server, port) = try #require(startServer())
    // Refused from the head alone: the client need not send the body.
    try expectRefusal(
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: \((1 << 20) + 1)\r\n\r\n", status: 413,
      port: port)
    try expectRefusal(
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n", status: 413,
      port: port)
    // A body of exactly the limit is read and answered, and the connection stays open.
    let client = try #require(connect(port))
    client.send(
      "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: \(1 << 20)\r\n\r\n"
        + String(repeating: "x", count: 1 << 20) + "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n")
    let response = try #require(client.readResponse())
    #expect(response.status == 200)
    #expect(response.headers["connection"] == "keep-alive")
    #expect(client.readResponse()?.status == 404)
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }
}
