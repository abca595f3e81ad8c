import ExampleHTTP
import Testing

/// RFC 9112 and RFC 9110 rules the first parser lacked (issue 21): token field names, no
/// obs-fold, no control characters in values or the target, empty lines before the request
/// line, the absolute form, exactly one Host in HTTP/1.1, Connection as a list, Expect.
@Suite struct HTTPParserRFCTests {
  private let host = "Host: example\r\n"

  @Test func whitespaceBeforeTheColonIsRefused() {
    // `Content-Length\t:` was accepted and ignored: a hop that reads it frames a body the
    // server did not see, and the body's bytes became the next request.
    let smuggle = "POST / HTTP/1.1\r\n\(host)Content-Length\t: 5\r\n\r\nGET /x HTTP/1.1\r\n\r\n"
    #expect(refusalStatus(smuggle) == 400)
    #expect(refusalStatus("GET / HTTP/1.1\r\n\(host)Content-Length : 0\r\n\r\n") == 400)
  }

  @Test func aFieldNameMustBeAToken() {
    for name in ["", "X\u{1}Y", "X(Y", "X\"Y", "X/Y", "X@Y", "X\u{7F}"] {
      #expect(refusalStatus("GET / HTTP/1.1\r\n\(host)\(name): a\r\n\r\n") == 400, "\(name)")
    }
    let tokens = "GET / HTTP/1.1\r\n\(host)X-!#$%&'*+.^_`|~09az: a\r\n\r\n"
    #expect(request(tokens)?.request.headers.last?.name == "X-!#$%&'*+.^_`|~09az")
  }

  @Test func obsFoldLinesAreRefused() {
    // The tab fold with a colon in it was read as a field called "\tb".
    #expect(refusalStatus("GET / HTTP/1.1\r\n\(host)X-A: a\r\n\tb: c\r\n\r\n") == 400)
    #expect(refusalStatus("GET / HTTP/1.1\r\n\(host)X-A: a\r\n folded\r\n\r\n") == 400)
    #expect(refusalStatus("GET / HTTP/1.1\r\n \(host)\r\n") == 400)
  }

  @Test func nulAndControlCharactersInAFieldValueAreRefused() {
    for value in ["a\u{0}b", "\u{0}", "a\u{1}b", "a\u{1B}b", "a\u{7F}"] {
      let text = "GET / HTTP/1.1\r\n\(host)X-A: \(value)\r\n\r\n"
      #expect(refusalStatus(text) == 400, "\(Array(value.utf8))")
    }
    // HTAB is whitespace, allowed inside a value.
    #expect(request("GET / HTTP/1.1\r\n\(host)X-A: a\tb\r\n\r\n")?.request.header("x-a") == "a\tb")
  }

  @Test func controlCharactersInTheTargetAreRefused() {
    for target in ["/a\u{0}b", "/\u{1}", "/a\u{7F}", "/\u{0}"] {
      #expect(
        refusalStatus("GET \(target) HTTP/1.1\r\n\(host)\r\n") == 400, "\(Array(target.utf8))")
    }
  }

  @Test func emptyLinesBeforeTheRequestLineAreSkipped() throws {
    for prefix in ["\r\n", "\n", "\r\n\r\n\n"] {
      let text = prefix + "GET /a HTTP/1.1\r\n\(host)\r\n"
      let (parsed, consumed) = try #require(request(text), "\(Array(prefix.utf8))")
      #expect(parsed.target == "/a" && consumed == text.utf8.count)
    }
    // Only empty lines so far, or a CR whose LF has not arrived: wait for the request line.
    #expect(isIncomplete("\r\n\r\n") && isIncomplete("\r\n\r") && isIncomplete("\n"))
    #expect(refusalStatus("\r\rGET / HTTP/1.1\r\n\(host)\r\n") == 400)
    // A CRLF after a POST's body (old clients add one) precedes the next request.
    let next = "\r\nGET /next HTTP/1.1\r\n\(host)\r\n"
    #expect(request(next)?.request.target == "/next")
  }

  @Test func anAbsoluteFormTargetBecomesOriginFormWithItsAuthority() throws {
    let (parsed, _) = try #require(
      request("GET http://Example:8080/hash?bytes=5 HTTP/1.1\r\n\(host)\r\n"))
    #expect(parsed.target == "/hash?bytes=5" && parsed.path == "/hash")
    #expect(parsed.query("bytes") == "5" && parsed.absoluteAuthority == "Example:8080")
    let cases: [(String, String, String)] = [
      ("HTTPS://h", "/", "h"), ("http://h?q=1", "/?q=1", "h"), ("http://h:1/", "/", "h:1"),
    ]
    for (target, origin, authority) in cases {
      let parsed = request("GET \(target) HTTP/1.1\r\n\(host)\r\n")?.request
      #expect(parsed?.target == origin && parsed?.absoluteAuthority == authority, "\(target)")
    }
    #expect(request("GET /a HTTP/1.1\r\n\(host)\r\n")?.request.absoluteAuthority == nil)
    for target in ["http:///a", "http://u@h/", "ftp://h/", "*", "h:80"] {
      #expect(refusalStatus("GET \(target) HTTP/1.1\r\n\(host)\r\n") == 400, "\(target)")
    }
  }

  @Test func http11NeedsExactlyOneHostAndNoRequestHasTwo() {
    #expect(refusalStatus("GET / HTTP/1.1\r\n\r\n") == 400)
    #expect(refusalStatus("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n") == 400)
    // Also with the absolute form, whose authority the server uses instead.
    #expect(refusalStatus("GET http://a/ HTTP/1.1\r\n\r\n") == 400)
    #expect(request("GET / HTTP/1.1\r\nHOST: a\r\n\r\n") != nil)
    // HTTP/1.0 may leave Host out, but not send two (RFC 9112 section 3.2: any request).
    #expect(request("GET / HTTP/1.0\r\n\r\n") != nil)
    #expect(refusalStatus("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n") == 400)
  }

  @Test func connectionIsACaseInsensitiveTokenList() {
    let keepAlive: [(String, String, Bool)] = [
      ("1.1", "keep-alive, Upgrade", true), ("1.1", "Upgrade, CLOSE", false),
      ("1.1", "keep-alive,close", false), ("1.1", "closed", true),
      ("1.0", "Upgrade, Keep-Alive", true), ("1.0", "keep-alive, close", false),
      ("1.0", "keep-alives", false),
    ]
    for (version, connection, expected) in keepAlive {
      let text = "GET / HTTP/\(version)\r\n\(host)Connection: \(connection)\r\n\r\n"
      #expect(request(text)?.request.keepAlive == expected, "\(version) \(connection)")
    }
    // Repeated fields make one list.
    let repeated = "GET / HTTP/1.1\r\n\(host)Connection: upgrade\r\nConnection: close\r\n\r\n"
    #expect(request(repeated)?.request.keepAlive == false)
  }

  @Test func expect100ContinueIsExposedAndOtherExpectationsGet417() {
    for value in ["100-continue", "100-Continue"] {
      let text = "POST / HTTP/1.1\r\n\(host)Expect: \(value)\r\nContent-Length: 2\r\n\r\n"
      // The head alone: the client waits for the 100 before sending the body.
      #expect(isIncomplete(text))
      #expect(request(text + "ab")?.request.expectsContinue == true)
    }
    #expect(request("GET / HTTP/1.1\r\n\(host)\r\n")?.request.expectsContinue == false)
    // A server must ignore 100-continue from an HTTP/1.0 client.
    #expect(
      request("GET / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n")?.request.expectsContinue == false)
    for value in ["200-ok", "100-continue, foo", "100-continueX"] {
      #expect(refusalStatus("GET / HTTP/1.1\r\n\(host)Expect: \(value)\r\n\r\n") == 417, "\(value)")
    }
    #expect(HTTPParser.Refusal.expectationFailed("x").status == 417)
  }

  @Test func aHeadAtTheLimitIsNotRefusedWhileItsEndArrives() throws {
    // A head whose last LF is the limit's byte: the 431 must wait until its end could have
    // come, or a split delivery refuses what one delivery accepts.
    let start = "GET / HTTP/1.1\r\n\(host)X-Pad: "
    let padding = HTTPParser.maximumHeadBytes - start.utf8.count - 1
    let text = start + String(repeating: "p", count: padding) + "\r\n\r\n"
    #expect(request(text) != nil)
    for cut in 1...3 {
      #expect(isIncomplete(String(text.utf8.dropLast(cut))!), "without \(cut) bytes")
    }
  }
}
