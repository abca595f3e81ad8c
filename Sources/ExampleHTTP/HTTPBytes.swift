// Byte classes of RFC 9110 section 5.6 and RFC 9112 section 2, tested on single bytes: the
// parser works on the received bytes and builds a String only for what it keeps.

/// The bytes the request parser names.
enum HTTPByte {
  static let lf = UInt8(ascii: "\n")
  static let cr = UInt8(ascii: "\r")
  static let space = UInt8(ascii: " ")
  static let tab = UInt8(ascii: "\t")
  static let colon = UInt8(ascii: ":")
  static let comma = UInt8(ascii: ",")
  static let slash = UInt8(ascii: "/")
  static let question = UInt8(ascii: "?")
  static let hash = UInt8(ascii: "#")
  static let at = UInt8(ascii: "@")
  static let zero = UInt8(ascii: "0")
  static let nine = UInt8(ascii: "9")

  /// Optional whitespace (OWS): SP or HTAB.
  @inline(__always)
  static func isWhitespace(_ byte: UInt8) -> Bool { byte == space || byte == tab }

  /// A control character (CTL: 0x00-0x1F and DEL).
  @inline(__always)
  static func isControl(_ byte: UInt8) -> Bool { byte < 0x20 || byte == 0x7F }

  @inline(__always)
  static func isDigit(_ byte: UInt8) -> Bool { byte >= zero && byte <= nine }

  /// A `tchar` (RFC 9110 section 5.6.2): the bytes a field name or other token may hold.
  @inline(__always)
  static func isToken(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"):
      return true
    case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"),
      UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"),
      UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
      UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
      return true
    default:
      return false
    }
  }

  /// `byte` with an ASCII capital letter lowered; every other byte unchanged.
  @inline(__always)
  static func lowered(_ byte: UInt8) -> UInt8 {
    byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
  }
}

extension UnsafeBufferPointer<UInt8> {
  /// Whether `self[range]` is `lowercase` ignoring ASCII case (`lowercase` must be lower case).
  @inline(__always)
  func matches(_ range: Range<Int>, lowercase: StaticString) -> Bool {
    guard range.count == lowercase.utf8CodeUnitCount else { return false }
    let expected = lowercase.utf8Start
    for offset in 0..<range.count
    where HTTPByte.lowered(self[range.lowerBound + offset]) != expected[offset] {
      return false
    }
    return true
  }

  /// `range` without leading and trailing optional whitespace.
  @inline(__always)
  func trimmingWhitespace(_ range: Range<Int>) -> Range<Int> {
    var lower = range.lowerBound
    var upper = range.upperBound
    while lower < upper && HTTPByte.isWhitespace(self[lower]) { lower += 1 }
    while upper > lower && HTTPByte.isWhitespace(self[upper - 1]) { upper -= 1 }
    return lower..<upper
  }

  /// Calls `body` with each element of the comma-separated list in `range`, trimmed of
  /// optional whitespace, empty ones included (RFC 9110 section 5.6.1 lets a recipient skip
  /// them; `Content-Length` refuses them). Stops early and returns false when `body` does.
  @inline(__always)
  func forEachListElement(in range: Range<Int>, _ body: (Range<Int>) -> Bool) -> Bool {
    var elementStart = range.lowerBound
    var index = range.lowerBound
    while index <= range.upperBound {
      if index == range.upperBound || self[index] == HTTPByte.comma {
        let element = trimmingWhitespace(elementStart..<index)
        if !body(element) { return false }
        elementStart = index + 1
      }
      index += 1
    }
    return true
  }

  /// The text of `self[range]` (already checked to be UTF-8, or repaired: see the callers).
  func string(_ range: Range<Int>) -> String {
    String(decoding: UnsafeBufferPointer(rebasing: self[range]), as: UTF8.self)
  }
}

extension UnsafeBufferPointer<UInt8> {
  /// Whether `self[range]` is exactly `text`.
  @inline(__always)
  func matches(_ range: Range<Int>, exactly text: StaticString) -> Bool {
    guard range.count == text.utf8CodeUnitCount else { return false }
    let expected = text.utf8Start
    for offset in 0..<range.count where self[range.lowerBound + offset] != expected[offset] {
      return false
    }
    return true
  }
}
