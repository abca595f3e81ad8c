// libFuzzer target for the request parser (scripts/fuzz-http.sh builds and runs it; not part
// of the package). Compiled in one module with Sources/ExampleHTTP/*.swift. Each input is fed
// to the parser the way a connection feeds it: whole, and again in two pieces split at a
// point the input chooses, consuming complete requests from the front as the servers do.
// Any broken invariant traps, which libFuzzer reports as a crash with the input saved.

/// One feeding: the requests read in order and how the bytes left over parse.
private struct Feeding: Equatable {
  var requests: [HTTPRequest] = []
  var consumed: [Int] = []
  var final: HTTPParser.Outcome = .incomplete
}

/// Parses `bytes` and checks what must hold for any outcome.
private func checkedParse(_ bytes: [UInt8]) -> HTTPParser.Outcome {
  let outcome = HTTPParser.parse(bytes)
  precondition(HTTPParser.parse(bytes) == outcome, "the same bytes parsed differently")
  switch outcome {
  case .incomplete, .headTooLarge, .unsupported:
    break
  case .malformed(let refusal):
    precondition((400..<500).contains(refusal.status), "refusal \(refusal.status) is not 4xx")
  case .request(let request, let consumed):
    precondition(consumed > 0 && consumed <= bytes.count, "consumed \(consumed) of \(bytes.count)")
    precondition(request.target.hasPrefix("/"), "target \(request.target) is not origin form")
    precondition(!request.method.isEmpty && request.minorVersion <= 1)
    precondition((0...HTTPParser.maximumBodyBytes).contains(request.contentLength))
    let hosts = request.headers.count { $0.name.lowercased() == "host" }
    precondition(hosts <= 1 && (request.minorVersion == 0 || hosts == 1), "\(hosts) hosts")
    precondition(request.minorVersion == 1 || !request.expectsContinue)
  }
  return outcome
}

/// Feeds `pieces` in order, reading every complete request as soon as it is there.
private func feed(_ pieces: [ArraySlice<UInt8>]) -> Feeding {
  var feeding = Feeding()
  var buffer: [UInt8] = []
  for piece in pieces {
    buffer += piece
    while true {
      let outcome = checkedParse(buffer)
      guard case .request(let request, let consumed) = outcome else {
        feeding.final = outcome
        if outcome == .incomplete { break }
        return feeding  // A refusal closes the connection.
      }
      feeding.requests.append(request)
      feeding.consumed.append(consumed)
      buffer.removeFirst(consumed)
    }
  }
  return feeding
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTPParser(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
  let bytes = count == 0 ? [] : Array(UnsafeRawBufferPointer(start: start, count: count))
  // The split points: one a hash of the input picks, so mutating any byte moves it and every
  // point of a short input is reached; and the last three bytes, where an input that ends a
  // head or a body turns from incomplete to complete (a head's end is up to 3 bytes long).
  var hash: UInt64 = 0xcbf2_9ce4_8422_2325
  for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
  let whole = feed([bytes[...]])
  let splits = [Int(hash % UInt64(bytes.count + 1))] + (1...3).map { bytes.count - $0 }
  for split in splits where split > 0 {
    let pieces = feed([bytes[..<split], bytes[split...]])
    precondition(whole == pieces, "split at \(split) read \(pieces) instead of \(whole)")
  }
  return 0
}
