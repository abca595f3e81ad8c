// What the parser answers besides a request: the outcomes and the refusals' statuses.

extension HTTPParser {
  /// Why a request is refused: the status to answer before closing, and what to say.
  public struct Refusal: Error, Equatable, Sendable, CustomStringConvertible {
    /// A 4xx status: 400, 413 or 417 (see the constructors).
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

    /// An `Expect` value other than `100-continue`, which is the only expectation HTTP
    /// defines: 417 (RFC 9110 section 10.1.1).
    public static func expectationFailed(_ expectation: String) -> Refusal {
      Refusal(
        status: 417, reason: "Expectation Failed",
        message: "unsupported expectation \(expectation)")
    }
  }

  public enum Outcome: Equatable {
    /// More bytes are needed.
    case incomplete
    /// A request head and the number of bytes it used (empty lines before it, head, body).
    case request(HTTPRequest, consumed: Int)
    /// The request is refused: answer `refusal.status` (400 when the bytes are not HTTP, 413
    /// when the body is too large, 417 for an unknown expectation) and close.
    case malformed(Refusal)
    /// The head is larger than `maximumHeadBytes`: answer 431 and close.
    case headTooLarge
    /// A feature this server does not implement (chunked request bodies): 501 and close.
    case unsupported(String)
  }
}
