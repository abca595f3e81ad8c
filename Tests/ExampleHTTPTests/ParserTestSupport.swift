import ExampleHTTP

// Shorthands the parser suites share: parse text, and read an outcome as a request or a status.

/// The outcome of parsing `text` (as UTF-8).
func parse(_ text: String) -> HTTPParser.Outcome { HTTPParser.parse(Array(text.utf8)) }

/// The request `text` parses into, and the bytes it used; nil for any other outcome.
func request(_ text: String) -> (request: HTTPRequest, consumed: Int)? {
  if case .request(let request, let consumed) = parse(text) { return (request, consumed) }
  return nil
}

/// The status a server answers `text` with when the parser refuses it (431 for a head over
/// the limit, 501 for an unsupported feature); nil when it parses or is incomplete.
func refusalStatus(_ text: String) -> Int? { refusalStatus(parse(text)) }

func refusalStatus(_ outcome: HTTPParser.Outcome) -> Int? {
  switch outcome {
  case .malformed(let refusal): refusal.status
  case .headTooLarge: 431
  case .unsupported: 501
  case .incomplete, .request: nil
  }
}

/// Whether `text` is a prefix the parser waits on.
func isIncomplete(_ text: String) -> Bool { parse(text) == .incomplete }
