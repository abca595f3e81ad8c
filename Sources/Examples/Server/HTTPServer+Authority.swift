import ExampleHTTP

extension HTTPServer {
  /// Whether `authority` (`host[:port]` from an absolute-form target, RFC 9112 section 3.2.2)
  /// names this server: a loopback name (it listens on 127.0.0.1) and its own port (or none,
  /// when it listens on 80). Case-insensitive. Any thread.
  func isOwnAuthority(_ authority: String) -> Bool {
    let lowered = authority.lowercased()
    let host: Substring
    let port: Substring?
    if lowered.hasPrefix("[") {  // An IPv6 literal: "[::1]" or "[::1]:8080".
      guard let close = lowered.firstIndex(of: "]") else { return false }
      host = lowered[...close]
      let rest = lowered[lowered.index(after: close)...]
      guard rest.isEmpty || rest.hasPrefix(":") else { return false }
      port = rest.isEmpty ? nil : rest.dropFirst()
    } else if let colon = lowered.lastIndex(of: ":") {
      host = lowered[..<colon]
      port = lowered[lowered.index(after: colon)...]
    } else {
      host = lowered[...]
      port = nil
    }
    guard ["127.0.0.1", "localhost", "[::1]"].contains(host) else { return false }
    let ownPort = Int(boundPort(listener))
    if let port { return Int(port) == ownPort }
    return ownPort == 80
  }
}
