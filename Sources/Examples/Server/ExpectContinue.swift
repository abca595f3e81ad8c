import ExampleHTTP

/// Whether `bytes` begin with a complete HTTP/1.1 request head carrying
/// `Expect: 100-continue` (field name and value compared case-insensitively). The caller asks
/// only while the parser still waits for the request (`.incomplete`), so a complete head
/// means its body has not all arrived.
///
/// The request parser (ExampleHTTP) does not report a head whose body is missing; once it does
/// (`HTTPRequest.expectsContinue`), this scan can go. A server must not send `100 Continue` to
/// an HTTP/1.0 client (RFC 9110 section 10.1.1), hence the version check.
func headExpectsContinue(_ bytes: [UInt8]) -> Bool {
  let limit = Swift.min(bytes.count, HTTPParser.maximumHeadBytes + 3)
  var end: Int?
  var index = 0
  while index + 1 < limit {
    if bytes[index] == 10
      && (bytes[index + 1] == 10
        || (bytes[index + 1] == 13 && index + 2 < limit && bytes[index + 2] == 10))
    {
      end = index
      break
    }
    index += 1
  }
  guard let end else { return false }
  // Split at LF bytes: in a Swift string "\r\n" is one character, never equal to "\n".
  let lines = bytes[..<end].split(separator: 10).map { Substring(decoding: $0, as: UTF8.self) }
  guard let requestLine = lines.first?.trimmingLineEnd, requestLine.hasSuffix(" HTTP/1.1") else {
    return false
  }
  for line in lines.dropFirst() {
    guard let colon = line.firstIndex(of: ":") else { continue }
    let name = line[..<colon].lowercased()
    let value = line[line.index(after: colon)...].trimmingLineEnd
      .drop { $0 == " " || $0 == "\t" }
    if name == "expect" && value.lowercased() == "100-continue" { return true }
  }
  return false
}

extension Substring {
  /// Without a trailing CR and trailing spaces or tabs.
  fileprivate var trimmingLineEnd: Substring {
    var text = self
    while let last = text.unicodeScalars.last, last == "\r" || last == " " || last == "\t" {
      text = text.dropLast()
    }
    return text
  }
}
