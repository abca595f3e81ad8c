// Field lines (RFC 9112 section 5, RFC 9110 section 5): the syntax every line must have, and
// the fields that frame the body (Content-Length, Transfer-Encoding), name the host (Host) or
// steer the exchange (Connection, Expect).

extension HTTPParser.RequestHead {
  /// Reads the field line in `line`: `field-name ":" OWS field-value OWS`.
  mutating func addField(_ bytes: UnsafeBufferPointer<UInt8>, line: Range<Int>) throws(HTTPParser
    .Refusal)
  {
    // Never empty: an empty line ends the head. A line starting with whitespace continues the
    // one before (obs-fold), which RFC 9112 section 5.2 lets a server refuse.
    if line.isEmpty || HTTPByte.isWhitespace(bytes[line.lowerBound]) {
      throw .badRequest("obs-fold line (a field line starting with whitespace)")
    }
    var colon = line.lowerBound
    while colon < line.upperBound && HTTPByte.isToken(bytes[colon]) { colon += 1 }
    guard colon < line.upperBound, bytes[colon] == HTTPByte.colon else {
      if colon == line.upperBound { throw .badRequest("bad header line (no colon)") }
      let byte = bytes[colon]
      if HTTPByte.isWhitespace(byte) {
        // `Content-Length\t: 5`: one hop ignores the field, another frames the body with it.
        throw .badRequest("whitespace in or after a field name")
      }
      if byte == HTTPByte.cr { throw .badRequest("bare CR in request head") }
      throw .badRequest("field name is not a token")
    }
    guard colon > line.lowerBound else { throw .badRequest("empty field name") }
    let name = line.lowerBound..<colon
    let value = bytes.trimmingWhitespace(colon + 1..<line.upperBound)
    for index in value {
      let byte = bytes[index]
      if byte >= 0x80 {
        sawNonASCII = true
      } else if HTTPByte.isControl(byte) && byte != HTTPByte.tab {
        // CR and NUL are dangerous (RFC 9110 section 5.5); the other controls are invalid too.
        switch byte {
        case HTTPByte.cr: throw .badRequest("bare CR in request head")
        case 0: throw .badRequest("NUL in field value")
        default: throw .badRequest("control character in field value")
        }
      }
    }
    try interpret(bytes, name: name, value: value)
    headers.append((bytes.string(name), bytes.string(value)))
  }

  /// Notes what the fields this parser acts on say; names compared ignoring case.
  private mutating func interpret(
    _ bytes: UnsafeBufferPointer<UInt8>, name: Range<Int>, value: Range<Int>
  ) throws(HTTPParser.Refusal) {
    switch name.count {  // The length first: most fields are none of these.
    case 4 where bytes.matches(name, lowercase: "host"):
      hostCount += 1
    case 6 where bytes.matches(name, lowercase: "expect"):
      _ = bytes.forEachListElement(in: value) { element in
        if element.isEmpty { return true }
        if bytes.matches(element, lowercase: "100-continue") {
          expectsContinue = true
        } else if unknownExpectation == nil {
          unknownExpectation = bytes.string(element)
        }
        return true
      }
    case 10 where bytes.matches(name, lowercase: "connection"):
      _ = bytes.forEachListElement(in: value) { element in
        if bytes.matches(element, lowercase: "close") { connectionClose = true }
        if bytes.matches(element, lowercase: "keep-alive") { connectionKeepAlive = true }
        return true
      }
    case 14 where bytes.matches(name, lowercase: "content-length"):
      // A list ("5, 5") counts as repeated fields.
      var earlier = declaredLength
      var conflict = false
      let valid = bytes.forEachListElement(in: value) { element in
        guard !element.isEmpty, bytes[element].allSatisfy(HTTPByte.isDigit) else { return false }
        // Compared as numbers: "05" and "5" frame the body the same way.
        var digits = element
        while let first = digits.first, bytes[first] == HTTPByte.zero { digits.removeFirst() }
        if let earlier, !bytes[earlier].elementsEqual(bytes[digits]) {
          conflict = true
          return false
        }
        earlier = digits
        return true
      }
      if conflict { throw .badRequest("conflicting content-length values") }
      guard valid else { throw .badRequest("bad content-length") }
      declaredLength = earlier
    case 17 where bytes.matches(name, lowercase: "transfer-encoding"):
      if transferEncoding == nil { transferEncoding = bytes.string(value) }
    default:
      break
    }
  }

  /// The declared body length: 0 without `Content-Length`; refused with 413 over
  /// `maximumBodyBytes`.
  func contentLength(_ bytes: UnsafeBufferPointer<UInt8>) throws(HTTPParser.Refusal) -> Int {
    guard let declared = declaredLength else { return 0 }
    // Digits only (checked as the field arrived); more than 18 of them could overflow `Int`.
    var length = 0
    if declared.count <= 18 {
      for index in declared { length = length * 10 + Int(bytes[index] - HTTPByte.zero) }
    }
    guard declared.count <= 18, length <= HTTPParser.maximumBodyBytes else {
      throw .contentTooLarge(bytes.string(declared))
    }
    return length
  }
}
