import ExampleHTTP
import Testing

/// The parser's rules from before RFC 9112's stricter field syntax: framing, limits, the
/// request line, and feeding a request in pieces. These held for the first parser too.
@Suite struct HTTPParserTests {
  @Test func aSimpleRequestParses() throws {
    let text = "GET /hash?bytes=10&x HTTP/1.1\r\nHost: example\r\nX-Pad:  spaced \t\r\n\r\n"
    let (parsed, consumed) = try #require(request(text))
    #expect(consumed == text.utf8.count)
    #expect(parsed.method == "GET" && parsed.target == "/hash?bytes=10&x")
    #expect(parsed.minorVersion == 1 && parsed.contentLength == 0)
    #expect(parsed.headers.map(\.name) == ["Host", "X-Pad"])
    // Optional whitespace around a value is not part of it.
    #expect(parsed.headers.map(\.value) == ["example", "spaced"])
    #expect(parsed.header("x-pad") == "spaced" && parsed.header("missing") == nil)
    #expect(parsed.path == "/hash" && parsed.query("bytes") == "10" && parsed.query("x") == "")
    #expect(parsed.query("y") == nil && parsed.keepAlive)
  }

  @Test func everyPrefixOfARequestIsIncomplete() {
    let text = "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
    for end in 0..<text.utf8.count {
      #expect(isIncomplete(String(text.utf8.prefix(end))!), "prefix of \(end) bytes")
    }
    #expect(request(text)?.consumed == text.utf8.count)
  }

  @Test func bareLFLineEndsAreAccepted() throws {
    let (parsed, consumed) = try #require(request("GET / HTTP/1.1\nHost: h\nA: b\n\n"))
    #expect(consumed == 29 && parsed.headers.map(\.value) == ["h", "b"])
    // A mix: LF then CR LF ends the head too.
    #expect(request("GET / HTTP/1.1\r\nHost: h\n\r\n")?.consumed == 26)
  }

  @Test func aBareCRIsRefused() {
    #expect(refusalStatus("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n") == 400)
    #expect(refusalStatus("GET / HTTP/1.1\rHost: h\r\n\r\n") == 400)
  }

  @Test func pipelinedRequestsAreReadOneAtATime() throws {
    let first = "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
    let second = "GET /b HTTP/1.1\r\nHost: h\r\n\r\n"
    let (parsed, consumed) = try #require(request(first + second))
    #expect(parsed.target == "/a" && parsed.contentLength == 3)
    #expect(consumed == first.utf8.count)
    #expect(request(second)?.request.target == "/b")
  }

  @Test func aBodyIsWaitedFor() {
    #expect(isIncomplete("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nabc"))
  }

  @Test func aHeadOverTheLimitGets431() {
    let big = "GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + String(repeating: "b", count: 9000)
    #expect(refusalStatus(big + "\r\n\r\n") == 431)
    // Without its end, as soon as no head within the limit can fit.
    #expect(refusalStatus(big) == 431)
  }

  @Test func aBodyOverTheLimitGets413BeforeItArrives() {
    let limit = HTTPParser.maximumBodyBytes
    #expect(
      refusalStatus("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \(limit + 1)\r\n\r\n") == 413)
    #expect(
      refusalStatus("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n")
        == 413)
    #expect(isIncomplete("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \(limit)\r\n\r\n"))
  }

  @Test func conflictingContentLengthsGet400() {
    let head = "POST / HTTP/1.1\r\nHost: h\r\n"
    #expect(refusalStatus(head + "Content-Length: 5\r\nContent-Length: 100\r\n\r\nhello") == 400)
    #expect(refusalStatus(head + "Content-Length: 5, 6\r\n\r\nhello") == 400)
    #expect(refusalStatus(head + "Content-Length: 7\r\ncontent-length: 5\r\n\r\nhello") == 400)
    // Identical values, as numbers, frame the body the same way: accepted as one.
    let same = head + "Content-Length: 5\r\nContent-Length: 5, 005\r\n\r\nhello"
    #expect(request(same)?.request.contentLength == 5)
    #expect(request(head + "Content-Length: 000\r\n\r\n")?.request.contentLength == 0)
  }

  @Test func aContentLengthMustBeDigits() {
    let head = "POST / HTTP/1.1\r\nHost: h\r\n"
    for value in ["+5", "-1", "5,", "", "0x5", "5 5"] {
      #expect(refusalStatus(head + "Content-Length: \(value)\r\n\r\nhello") == 400, "\(value)")
    }
  }

  @Test func transferEncodingIsUnsupported() {
    #expect(
      refusalStatus("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n") == 501)
  }

  @Test func theRequestLineIsChecked() {
    for line in [
      "get / HTTP/1.1", "GET  / HTTP/1.1", "GET / HTTP/1.1 x", "GET /", "GET / HTTP/2.0",
      "GET / http/1.1", "GET noslash HTTP/1.1", " GET / HTTP/1.1",
    ] {
      #expect(refusalStatus(line + "\r\nHost: h\r\n\r\n") == 400, "\(line)")
    }
  }

  @Test func headerLinesWithoutAColonOrWithASpaceInTheNameGet400() {
    #expect(refusalStatus("GET / HTTP/1.1\r\nHost: h\r\nNoColonHere\r\n\r\n") == 400)
    #expect(refusalStatus("GET / HTTP/1.1\r\nHost: h\r\nBad Name: x\r\n\r\n") == 400)
    #expect(refusalStatus("GET / HTTP/1.1\r\nHost: h\r\n: x\r\n\r\n") == 400)
  }

  @Test func aHeadThatIsNotUTF8Gets400() {
    let bytes =
      Array("GET / HTTP/1.1\r\nHost: h\r\nX-A: ".utf8) + [0xC3, 0x28] + Array("\r\n\r\n".utf8)
    #expect(refusalStatus(HTTPParser.parse(bytes)) == 400)
    let valid = Array("GET /caf".utf8) + [0xC3, 0xA9] + Array(" HTTP/1.1\r\nHost: h\r\n\r\n".utf8)
    guard case .request(let parsed, _) = HTTPParser.parse(valid) else {
      Issue.record("UTF-8 target refused")
      return
    }
    #expect(parsed.target == "/café")
  }

  @Test func http10ClosesByDefaultAndHTTP11KeepsAlive() {
    #expect(request("GET / HTTP/1.0\r\n\r\n")?.request.keepAlive == false)
    #expect(request("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")?.request.keepAlive == true)
    #expect(
      request("GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n")?.request.keepAlive == false)
  }
}
