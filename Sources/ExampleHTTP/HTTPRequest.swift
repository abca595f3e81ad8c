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
public enum HTTPParser {
  /// Largest accepted request head; larger ones get 431.
  public static let maximumHeadBytes = 8 * 1024

  public enum Outcome: Equatable {
    /// More bytes are needed.
    case incomplete
    /// A request head and the number of bytes it used (head plus body).
    case request(HTTPRequest, consumed: Int)
    /// The bytes are not HTTP: answer 400 and close.
    case malformed(String)
    /// The head is larger than `maximumHeadBytes`: answer 431 and close.
    case headTooLarge
    /// A feature this server does not implement (chunked request bodies): 501 and close.
    case unsupported(String)
  }

  /// Looks for one complete request at the start of `bytes`.
  public static func parse(_ bytes: [UInt8]) -> Outcome {
    guard let headEnd = findHeadEnd(bytes) else {
      return bytes.count > maximumHeadBytes ? .headTooLarge : .incomplete
    }
    if headEnd > maximumHeadBytes { return .headTooLarge }
    guard let head = String(validating: bytes[..<headEnd], as: UTF8.self) else {
      return .malformed("request head is not UTF-8")
    }
    var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
    guard !lines.isEmpty else { return .malformed("empty request") }
    let requestLine = lines.removeFirst().split(separator: " ", omittingEmptySubsequences: false)
    guard requestLine.count == 3, !requestLine[0].isEmpty,
      requestLine[0].allSatisfy({ $0.isUppercase }), requestLine[1].hasPrefix("/")
    else { return .malformed("bad request line") }
    let version = requestLine[2]
    guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
      return .malformed("unsupported version \(version)")
    }
    var headers: [(String, String)] = []
    var contentLength = 0
    for line in lines where !line.isEmpty {
      guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
        return .malformed("bad header line")
      }
      let name = String(line[..<colon])
      if name.contains(" ") { return .malformed("space in header name") }
      let value = String(line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" })
      headers.append((name, value))
      switch name.lowercased() {
      case "content-length":
        guard let length = Int(value), length >= 0, length <= 1 << 20 else {
          return .malformed("bad content-length")
        }
        contentLength = length
      case "transfer-encoding":
        return .unsupported("transfer-encoding \(value)")
      default:
        break
      }
    }
    let total = headEnd + 4 + contentLength
    if bytes.count < total { return .incomplete }
    let request = HTTPRequest(
      method: String(requestLine[0]), target: String(requestLine[1]),
      minorVersion: version == "HTTP/1.1" ? 1 : 0, headers: headers,
      contentLength: contentLength)
    return .request(request, consumed: total)
  }

  /// Index of the "\r\n\r\n" ending the head, if present.
  private static func findHeadEnd(_ bytes: [UInt8]) -> Int? {
    guard bytes.count >= 4 else { return nil }
    var index = 0
    let limit = bytes.count - 3
    while index < limit {
      if bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13
        && bytes[index + 3] == 10
      {
        return index
      }
      index += 1
    }
    return nil
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
