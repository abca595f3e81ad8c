// A minimal HTTP/1.x request parser and response builder shared by `Examples serve` and the
// Benchmarks package's DispatchServe: both servers parse and answer with the same code, so
// the benchmark compares the runtimes, not two parsers.

/// A parsed HTTP/1.x request head.
public struct HTTPRequest: Equatable {
  public var method: String
  public var target: String
  public var minorVersion: Int
  public var headers: [(name: String, value: String)]
  public var contentLength: Int

  /// Whether the connection stays open after the response (HTTP/1.1 default; HTTP/1.0 only
  /// with `Connection: keep-alive`).
  public var keepAlive: Bool {
    let connection = header("connection")?.lowercased()
    return minorVersion >= 1 ? connection != "close" : connection == "keep-alive"
  }

  public func header(_ name: String) -> String? {
    headers.first { $0.name.lowercased() == name }?.value
  }

  /// The path without the query.
  public var path: Substring { target.split(separator: "?", maxSplits: 1).first ?? "" }

  /// The value of query parameter `name`.
  public func query(_ name: String) -> String? {
    guard let query = target.split(separator: "?", maxSplits: 1).dropFirst().first else {
      return nil
    }
    for pair in query.split(separator: "&") {
      let parts = pair.split(separator: "=", maxSplits: 1)
      if parts.first == Substring(name) { return parts.count > 1 ? String(parts[1]) : "" }
    }
    return nil
  }

  public static func == (lhs: HTTPRequest, rhs: HTTPRequest) -> Bool {
    lhs.method == rhs.method && lhs.target == rhs.target && lhs.minorVersion == rhs.minorVersion
      && lhs.headers.map(\.name) == rhs.headers.map(\.name)
      && lhs.headers.map(\.value) == rhs.headers.map(\.value)
      && lhs.contentLength == rhs.contentLength
  }
}

/// Parses request heads out of a byte buffer.
///
/// Framing rules that matter for request smuggling (RFC 9112 sections 2.2 and 6.3):
/// - a line ends at LF, with or without a CR before it (a recipient may accept a bare LF); a
///   CR anywhere else in the head is refused;
/// - `Content-Length` must be digits only; several values (repeated fields or a list) are
///   accepted only when they are all the same, as one (RFC 9110 section 8.6 allows either
///   that or a refusal; identical copies frame the body the same way for everyone), and
///   differing values are refused with 400, since the server cannot know which framing the
///   client or a proxy before it used;
/// - a declared body larger than `maximumBodyBytes` is refused with 413 as soon as the head
///   has arrived, without waiting for the body.
public enum HTTPParser {
  /// Largest accepted request head; larger ones get 431.
  public static let maximumHeadBytes = 8 * 1024
  /// Largest accepted request body (a declared `Content-Length`); larger ones get 413.
  public static let maximumBodyBytes = 1 << 20

  /// Why a request is refused: the status to answer before closing, and what to say.
  public struct Refusal: Equatable, Sendable, CustomStringConvertible {
    /// 400, or 413 for a body over `maximumBodyBytes`.
    public var status: Int
    public var reason: String
    public var message: String
    public var description: String { message }

    /// The request is not well-formed HTTP: 400.
    public static func badRequest(_ message: String) -> Refusal {
      Refusal(status: 400, reason: "Bad Request", message: message)
    }

    /// The declared body is over `maximumBodyBytes`: 413.
    public static func contentTooLarge(_ declared: String) -> Refusal {
      Refusal(
        status: 413, reason: "Content Too Large",
        message: "content-length \(declared) is over the limit of \(maximumBodyBytes) bytes")
    }
  }

  public enum Outcome: Equatable {
    /// More bytes are needed.
    case incomplete
    /// A request head and the number of bytes it used (head plus body).
    case request(HTTPRequest, consumed: Int)
    /// The request is refused: answer `refusal.status` (400 when the bytes are not HTTP, 413
    /// when the body is too large) and close.
    case malformed(Refusal)
    /// The head is larger than `maximumHeadBytes`: answer 431 and close.
    case headTooLarge
    /// A feature this server does not implement (chunked request bodies): 501 and close.
    case unsupported(String)
  }

  /// Looks for one complete request at the start of `bytes`.
  public static func parse(_ bytes: [UInt8]) -> Outcome {
    guard let (headEnd, bodyStart) = findHeadEnd(bytes) else {
      return bytes.count > maximumHeadBytes ? .headTooLarge : .incomplete
    }
    if headEnd > maximumHeadBytes { return .headTooLarge }
    let headBytes = bytes[..<headEnd]
    guard String(validating: headBytes, as: UTF8.self) != nil else {
      return .malformed(.badRequest("request head is not UTF-8"))
    }
    // Lines end at LF; a CR just before it belongs to the terminator, any other CR is a bare
    // CR, which RFC 9112 section 2.2 lets a recipient refuse.
    var lines: [String] = []
    for var line in headBytes.split(separator: 10, omittingEmptySubsequences: false) {
      if line.last == 13 { line = line.dropLast() }
      if line.contains(13) { return .malformed(.badRequest("bare CR in request head")) }
      lines.append(String(decoding: line, as: UTF8.self))  // Valid: split at ASCII bytes.
    }
    let requestLine = lines.removeFirst().split(separator: " ", omittingEmptySubsequences: false)
    guard requestLine.count == 3, !requestLine[0].isEmpty,
      requestLine[0].allSatisfy({ $0.isUppercase }), requestLine[1].hasPrefix("/")
    else { return .malformed(.badRequest("bad request line")) }
    let version = requestLine[2]
    guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
      return .malformed(.badRequest("unsupported version \(version)"))
    }
    var headers: [(String, String)] = []
    // The declared body length without leading zeros ("" is 0).
    var declaredLength: Substring?
    for line in lines where !line.isEmpty {
      guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
        return .malformed(.badRequest("bad header line"))
      }
      let name = String(line[..<colon])
      if name.contains(" ") { return .malformed(.badRequest("space in header name")) }
      let value = String(line[line.index(after: colon)...].trimmingWhitespace)
      headers.append((name, value))
      switch name.lowercased() {
      case "content-length":
        // A list ("5, 5") counts as repeated fields.
        for element in value.split(separator: ",", omittingEmptySubsequences: false) {
          let length = element.trimmingWhitespace
          guard !length.isEmpty, length.utf8.allSatisfy({ (48...57).contains($0) }) else {
            return .malformed(.badRequest("bad content-length"))
          }
          // Compared as numbers: "05" and "5" frame the body the same way.
          let number = length.drop { $0 == "0" }
          if let earlier = declaredLength, earlier != number {
            return .malformed(.badRequest("conflicting content-length values"))
          }
          declaredLength = number
        }
      case "transfer-encoding":
        return .unsupported("transfer-encoding \(value)")
      default:
        break
      }
    }
    var contentLength = 0
    if let declared = declaredLength {
      // Digits only (checked above); more than 18 of them could overflow `Int`.
      guard declared.count <= 18, let length = declared.isEmpty ? 0 : Int(declared),
        length <= maximumBodyBytes
      else { return .malformed(.contentTooLarge(String(declared))) }
      contentLength = length
    }
    let total = bodyStart + contentLength
    if bytes.count < total { return .incomplete }
    let request = HTTPRequest(
      method: String(requestLine[0]), target: String(requestLine[1]),
      minorVersion: version == "HTTP/1.1" ? 1 : 0, headers: headers,
      contentLength: contentLength)
    return .request(request, consumed: total)
  }

  /// Where the head ends: the index of the LF ending its last line, and the index just past
  /// the empty line after it (LF LF or LF CR LF), if that has arrived.
  private static func findHeadEnd(_ bytes: [UInt8]) -> (headEnd: Int, bodyStart: Int)? {
    var index = 0
    let count = bytes.count
    while index + 1 < count {
      if bytes[index] == 10 {
        if bytes[index + 1] == 10 { return (index, index + 2) }
        if bytes[index + 1] == 13 {
          guard index + 2 < count else { return nil }  // The final LF has not arrived yet.
          if bytes[index + 2] == 10 { return (index, index + 3) }
        }
      }
      index += 1
    }
    return nil
  }
}

extension Substring {
  /// Without leading and trailing spaces and tabs (optional whitespace around a field value).
  fileprivate var trimmingWhitespace: Substring {
    let isWhitespace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
    guard let first = firstIndex(where: { !isWhitespace($0) }) else { return "" }
    let last = lastIndex(where: { !isWhitespace($0) })!
    return self[first...last]
  }
}

/// Builds a complete HTTP/1.1 response.
public func httpResponse(
  status: Int, reason: String, body: String, keepAlive: Bool,
  contentType: String = "text/plain; charset=utf-8"
) -> [UInt8] {
  let bodyBytes = Array(body.utf8)
  let head =
    "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(contentType)\r\nContent-Length: \(bodyBytes.count)\r\n"
    + "Connection: \(keepAlive ? "keep-alive" : "close")\r\nServer: LoopDispatch-Examples\r\n\r\n"
  return Array(head.utf8) + bodyBytes
}
