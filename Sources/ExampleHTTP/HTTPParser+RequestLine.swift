// The request line (RFC 9112 section 3) and what the parser gathers about a head while it
// reads the field lines (HTTPParser+Fields.swift).

extension HTTPParser {
  /// A request head being read: positions in the received bytes, and the fields that frame
  /// or steer the request. Lives for one `parse` call, on one thread.
  struct RequestHead {
    var method: Range<Int>
    /// The origin-form target, or for the absolute form the path and query after the
    /// authority (possibly empty, or starting with `?`: `request` adds the `/`).
    var target: Range<Int>
    var absoluteAuthority: Range<Int>?
    var minorVersion: Int
    /// Whether the target or a field value holds a byte over 0x7F: only then is the head
    /// checked to be UTF-8, which keeps that pass off the common path.
    var sawNonASCII = false
    var headers: [(name: String, value: String)] = []
    var hostCount = 0
    /// The declared body length's digits without leading zeros (empty for 0).
    var declaredLength: Range<Int>?
    var transferEncoding: String?
    var connectionClose = false
    var connectionKeepAlive = false
    var expectsContinue = false
    /// The first `Expect` element other than `100-continue`.
    var unknownExpectation: String?

    /// Reads the request line `method SP request-target SP HTTP-version` in `line`.
    init(_ bytes: UnsafeBufferPointer<UInt8>, requestLine line: Range<Int>) throws(Refusal) {
      // The method: upper-case ASCII letters (stricter than a token, as before).
      var index = line.lowerBound
      while index < line.upperBound
        && bytes[index] >= UInt8(ascii: "A") && bytes[index] <= UInt8(ascii: "Z")
      {
        index += 1
      }
      guard index > line.lowerBound, index < line.upperBound, bytes[index] == HTTPByte.space
      else { throw .badRequest("bad request line") }
      method = line.lowerBound..<index
      // The target: no control characters (NUL, a bare CR, ...) and no spaces.
      let targetStart = index + 1
      index = targetStart
      while index < line.upperBound && bytes[index] != HTTPByte.space {
        let byte = bytes[index]
        if byte >= 0x80 {
          sawNonASCII = true
        } else if HTTPByte.isControl(byte) {
          throw .badRequest("control character in request target")
        }
        index += 1
      }
      guard index > targetStart, index < line.upperBound else {
        throw .badRequest("bad request line")
      }
      (target, absoluteAuthority) = try Self.splitTarget(bytes, targetStart..<index)
      // The version: the rest of the line.
      let version = index + 1..<line.upperBound
      if bytes.matches(version, exactly: "HTTP/1.1") {
        minorVersion = 1
      } else if bytes.matches(version, exactly: "HTTP/1.0") {
        minorVersion = 0
      } else if bytes[version].contains(HTTPByte.space) {
        throw .badRequest("bad request line")
      } else {
        throw .badRequest("unsupported version \(bytes.string(version))")
      }
    }

    /// The origin-form part of `target` and, for the absolute form
    /// (`http://authority/path?query`, RFC 9112 section 3.2.2), the authority. Other forms
    /// (`*`, the authority form of CONNECT) are refused: this server has no use for them.
    private static func splitTarget(_ bytes: UnsafeBufferPointer<UInt8>, _ target: Range<Int>)
      throws(Refusal) -> (target: Range<Int>, authority: Range<Int>?)
    {
      if bytes[target.lowerBound] == HTTPByte.slash { return (target, nil) }
      let schemeEnd: Int
      if bytes.matches(target.prefix(7), lowercase: "http://") {
        schemeEnd = target.lowerBound + 7
      } else if bytes.matches(target.prefix(8), lowercase: "https://") {
        schemeEnd = target.lowerBound + 8
      } else {
        throw .badRequest("unsupported request target")
      }
      var authorityEnd = schemeEnd
      while authorityEnd < target.upperBound {
        let byte = bytes[authorityEnd]
        if byte == HTTPByte.slash || byte == HTTPByte.question || byte == HTTPByte.hash { break }
        // A userinfo (`user@host`) is deprecated and a phishing tool (RFC 9110 section 4.2.4).
        if byte == HTTPByte.at { throw .badRequest("userinfo in request target") }
        authorityEnd += 1
      }
      guard authorityEnd > schemeEnd else { throw .badRequest("empty authority in request target") }
      return (authorityEnd..<target.upperBound, schemeEnd..<authorityEnd)
    }

    /// The request read, with `contentLength` from `contentLength(_:)`.
    func request(_ bytes: UnsafeBufferPointer<UInt8>, contentLength: Int) -> HTTPRequest {
      var targetText: String
      if absoluteAuthority == nil || (!target.isEmpty && bytes[target.lowerBound] == HTTPByte.slash)
      {
        targetText = bytes.string(target)
      } else {
        targetText = "/"  // `http://host` and `http://host?q` mean the path `/`.
        targetText += bytes.string(target)
      }
      return HTTPRequest(
        method: bytes.string(method), target: targetText, minorVersion: minorVersion,
        headers: headers, contentLength: contentLength,
        absoluteAuthority: absoluteAuthority.map { bytes.string($0) },
        keepAlive: minorVersion >= 1 ? !connectionClose : connectionKeepAlive && !connectionClose,
        expectsContinue: minorVersion >= 1 && expectsContinue)
    }
  }
}
