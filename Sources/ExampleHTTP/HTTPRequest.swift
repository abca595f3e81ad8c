// A minimal HTTP/1.x request parser and response builder shared by `Examples serve` and the
// Benchmarks package's DispatchServe: both servers parse and answer with the same code, so
// the benchmark compares the runtimes, not two parsers. This file is the parsed request;
// HTTPParser.swift reads one out of bytes.

/// A parsed HTTP/1.x request head.
///
/// Thread safety: a value type; copies are independent.
public struct HTTPRequest: Equatable {
  public var method: String
  /// The target in origin form (`/path?query`), also when the request used the absolute form
  /// (`http://host/path?query`), whose authority is then in `absoluteAuthority`.
  public var target: String
  public var minorVersion: Int
  /// The field lines in arrival order, names as sent, values without surrounding whitespace.
  public var headers: [(name: String, value: String)]
  public var contentLength: Int
  /// The authority (`host[:port]`, as sent: compare it ignoring case) of an absolute-form
  /// target, which RFC 9112 section 3.2.2 makes the request's host in place of the `Host`
  /// field; nil for an origin-form target.
  public var absoluteAuthority: String?
  /// Whether the connection stays open after the response: for HTTP/1.1 unless the
  /// `Connection` list holds `close`, for HTTP/1.0 only when it holds `keep-alive` (and not
  /// `close`); tokens compared ignoring case (RFC 9112 section 9.3).
  public var keepAlive: Bool
  /// Whether the client sent `Expect: 100-continue` and waits for a 100 (Continue) before
  /// sending the body (RFC 9110 section 10.1.1); always false for HTTP/1.0, whose
  /// expectation a server must ignore. Any other expectation is refused with 417.
  public var expectsContinue: Bool

  /// The value of the first field called `name` (lower case), ignoring the case of the names.
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
      && lhs.contentLength == rhs.contentLength && lhs.absoluteAuthority == rhs.absoluteAuthority
      && lhs.keepAlive == rhs.keepAlive && lhs.expectsContinue == rhs.expectsContinue
  }
}
