// Reads one request out of the bytes a connection has received so far. Works on the bytes:
// a String is built only for what the request keeps (method, target, field names and values).

/// Parses request heads out of a byte buffer.
///
/// One call, on everything received so far (the parser keeps no state between calls):
/// 1. Empty lines (CRLF or LF) before the request line are skipped (RFC 9112 section 2.2);
///    they count towards the head's size.
/// 2. The head ends at the first empty line. Until it has arrived the answer is `.incomplete`,
///    or `.headTooLarge` once more bytes than a head of `maximumHeadBytes` and its end could
///    take have arrived (so a split delivery never turns a request into a 431).
/// 3. The request line: an upper-case method, an origin-form or absolute-form target, the
///    version (HTTP/1.1 or HTTP/1.0): HTTPParser+RequestLine.swift.
/// 4. Each field line: a token name, a colon, a value without control characters:
///    HTTPParser+Fields.swift, which also gathers the fields that frame or steer the request.
/// 5. Checks over the whole head, in this order: UTF-8 (only when a byte is over 0x7F), one
///    `Host` in HTTP/1.1 and at most one in HTTP/1.0 (400, RFC 9112 section 3.2),
///    `Transfer-Encoding` (501), the body size (413), `Expect` (417).
/// 6. The declared body must have arrived; the request is then complete.
///
/// Framing rules that matter for request smuggling (RFC 9112 sections 2.2, 5 and 6.3):
/// - a line ends at LF, with or without a CR before it (a recipient may accept a bare LF); a
///   CR anywhere else in the head is refused;
/// - a field name is a token: whitespace before the colon (`Content-Length\t: 5`), which
///   another hop may read as `Content-Length`, is refused, as are obs-fold continuation lines
///   (a line starting with SP or HTAB: 400 rather than replacing the fold by SP, since a
///   server that takes the fold apart differently than a proxy frames the body differently);
/// - `Content-Length` must be digits only; several values (repeated fields or a list) are
///   accepted only when they are all the same, as one (RFC 9110 section 8.6 allows either
///   that or a refusal; identical copies frame the body the same way for everyone), and
///   differing values are refused with 400, since the server cannot know which framing the
///   client or a proxy before it used;
/// - a declared body larger than `maximumBodyBytes` is refused with 413 as soon as the head
///   has arrived, without waiting for the body.
///
/// Thread safety: stateless; call from any thread.
public enum HTTPParser {
  /// Largest accepted request head; larger ones get 431.
  public static let maximumHeadBytes = 8 * 1024
  /// Largest accepted request body (a declared `Content-Length`); larger ones get 413.
  public static let maximumBodyBytes = 1 << 20

  /// Looks for one complete request at the start of `bytes`.
  public static func parse(_ bytes: [UInt8]) -> Outcome {
    // A buffer pointer: optimised builds skip the bounds checks an Array makes on every byte;
    // each index below is checked against `count` or against a line end found within it.
    bytes.withUnsafeBufferPointer { parse(buffer: $0) }
  }

  private static func parse(buffer bytes: UnsafeBufferPointer<UInt8>) -> Outcome {
    // 1. Empty lines before the request line.
    var start = 0
    while start < bytes.count && (bytes[start] == HTTPByte.lf || bytes[start] == HTTPByte.cr) {
      if bytes[start] == HTTPByte.cr {
        guard start + 1 < bytes.count else { return waitForMore(bytes.count) }
        guard bytes[start + 1] == HTTPByte.lf else {
          return .malformed(.badRequest("bare CR in request head"))
        }
        start += 1
      }
      start += 1
    }
    // 2. The end of the head.
    guard let (headEnd, bodyStart) = findHeadEnd(bytes, from: start) else {
      return waitForMore(bytes.count)
    }
    if headEnd > maximumHeadBytes { return .headTooLarge }
    do throws(Refusal) {
      // 3. and 4. The request line and the field lines.
      var cursor = start
      var head = try RequestHead(bytes, requestLine: nextLine(bytes, &cursor))
      while cursor <= headEnd { try head.addField(bytes, line: nextLine(bytes, &cursor)) }
      // 5. The whole head.
      if head.sawNonASCII,
        String(validating: UnsafeBufferPointer(rebasing: bytes[start..<headEnd]), as: UTF8.self)
          == nil
      {
        throw .badRequest("request head is not UTF-8")
      }
      if head.hostCount > 1 { throw .badRequest("more than one host field") }
      if head.minorVersion == 1 && head.hostCount == 0 { throw .badRequest("no host field") }
      if let encoding = head.transferEncoding {
        return .unsupported("transfer-encoding \(encoding)")
      }
      let contentLength = try head.contentLength(bytes)
      if let expectation = head.unknownExpectation { throw .expectationFailed(expectation) }
      // 6. The body.
      let total = bodyStart + contentLength
      if bytes.count < total { return .incomplete }
      return .request(head.request(bytes, contentLength: contentLength), consumed: total)
    } catch {
      return .malformed(error)
    }
  }

  /// The answer while the head has not ended within `count` bytes: wait, unless even the
  /// longest end of a head of `maximumHeadBytes` (LF CR LF after its last line) would have
  /// arrived by now.
  private static func waitForMore(_ count: Int) -> Outcome {
    count > maximumHeadBytes + 3 ? .headTooLarge : .incomplete
  }

  /// Where the head that starts at `start` ends: the index of the LF ending its last line,
  /// and the index just past the empty line after it (LF LF or LF CR LF), if that has arrived.
  private static func findHeadEnd(
    _ bytes: UnsafeBufferPointer<UInt8>, from start: Int
  ) -> (headEnd: Int, bodyStart: Int)? {
    var index = start
    let count = bytes.count
    while index + 1 < count {
      if bytes[index] == HTTPByte.lf {
        if bytes[index + 1] == HTTPByte.lf { return (index, index + 2) }
        if bytes[index + 1] == HTTPByte.cr {
          guard index + 2 < count else { return nil }  // The final LF has not arrived yet.
          if bytes[index + 2] == HTTPByte.lf { return (index, index + 3) }
        }
      }
      index += 1
    }
    return nil
  }

  /// The line starting at `cursor`, without its LF and the CR before it, if any; moves
  /// `cursor` past the LF. The caller knows an LF follows (the head's last line ends in one).
  private static func nextLine(_ bytes: UnsafeBufferPointer<UInt8>, _ cursor: inout Int)
    -> Range<Int>
  {
    let start = cursor
    var end = start
    while bytes[end] != HTTPByte.lf { end += 1 }
    cursor = end + 1
    if end > start && bytes[end - 1] == HTTPByte.cr { end -= 1 }
    return start..<end
  }
}
