// The response side shared by both example servers.

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
