import Glibc

/// A tiny blocking HTTP client for the server tests (receive timeout 10 s).
final class ServeClient {
  let fd: Int32
  private var pending: [UInt8] = []

  /// Connects to 127.0.0.1:`port`; `receiveBuffer` (SO_RCVBUF, set before connecting so the
  /// window is negotiated for it) makes a slow reader whose server must wait for room.
  ///
  /// The socket is stored only once it is connected: a failed initialiser that had set
  /// every stored property runs `deinit`, which would close the number a second time, and
  /// by then another test running beside this one may have opened a descriptor with it
  /// (`strace -f -e trace=close` of the suite showed the second close).
  init?(port: UInt16, receiveBuffer: Int32? = nil) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    if fd < 0 { return nil }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    if var size = receiveBuffer {
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    let connected = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    if connected != 0 {
      close(fd)
      return nil
    }
    self.fd = fd
  }

  deinit { close(fd) }

  func send(_ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
      let n = bytes.withUnsafeBytes {
        Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
      }
      if n <= 0 { return }
      offset += n
    }
  }

  /// Reads one response: (status, headers lowercased, body), or nil on EOF/timeout. With
  /// `bodyless` (the answer to HEAD) the body is not read, whatever Content-Length says.
  func readResponse(
    bodyless: Bool = false
  ) -> (status: Int, headers: [String: String], body: String)? {
    while true {
      if let end = headEnd() {
        let head = String(decoding: pending[..<end], as: UTF8.self)
        var lines = head.split(separator: "\r\n")
        guard !lines.isEmpty else { return nil }
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        var headers: [String: String] = [:]
        for line in lines {
          let parts = line.split(separator: ":", maxSplits: 1)
          if parts.count == 2 {
            headers[parts[0].lowercased()] = parts[1].trimmingSpaces
          }
        }
        let length = bodyless ? 0 : Int(headers["content-length"] ?? "0") ?? 0
        while pending.count < end + 4 + length {
          if !fill() { return nil }
        }
        let body = String(decoding: pending[(end + 4)..<(end + 4 + length)], as: UTF8.self)
        pending.removeFirst(end + 4 + length)
        return (status, headers, body)
      }
      if !fill() { return nil }
    }
  }

  /// Whether the server closed the connection (read returns 0) within the timeout.
  func readsEndOfFile() -> Bool {
    var byte: UInt8 = 0
    return pending.isEmpty && recv(fd, &byte, 1, 0) == 0
  }

  /// Closes with a TCP reset (SO_LINGER 0), as a crashing client would.
  func reset() {
    var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    shutdown(fd, Int32(SHUT_RDWR))
  }

  /// Sends a FIN (shutdown of the write side): the server sees the end of the requests.
  func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

  /// The bytes that arrive within `milliseconds` (polled), up to `count` of them; fewer if the
  /// time runs out or the server closes.
  func readBytes(_ count: Int, milliseconds: Int32) -> [UInt8] {
    let deadline = monotonicSeconds() + Double(milliseconds) / 1000
    while pending.count < count {
      let left = Int32((deadline - monotonicSeconds()) * 1000)
      var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
      if left <= 0 || poll(&poller, 1, left) <= 0 || !fill() { break }
    }
    let taken = Array(pending.prefix(count))
    pending.removeFirst(taken.count)
    return taken
  }

  /// Whether the server leaves the connection open (no end of file, no byte) for
  /// `milliseconds`: a lower bound on when it closes.
  func staysOpen(milliseconds: Int32) -> Bool {
    var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    return pending.isEmpty && poll(&poller, 1, milliseconds) == 0
  }

  /// Whether bytes were received that `readResponse` has not returned yet (a partial answer).
  var hasUnreadBytes: Bool { !pending.isEmpty }

  /// Makes the close when this client is released a bare TCP reset (SO_LINGER 0, no shutdown
  /// first), so the server sees ECONNRESET in the middle of a request rather than an end of file.
  func resetOnRelease() {
    var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
  }

  private func fill() -> Bool {
    var chunk = [UInt8](repeating: 0, count: 65536)
    let n = recv(fd, &chunk, chunk.count, 0)
    if n <= 0 { return false }
    pending += chunk[..<n]
    return true
  }

  private func headEnd() -> Int? {
    guard pending.count >= 4 else { return nil }
    for index in 0...(pending.count - 4)
    where pending[index] == 13 && pending[index + 1] == 10 && pending[index + 2] == 13
      && pending[index + 3] == 10
    {
      return index
    }
    return nil
  }
}

extension Substring {
  var trimmingSpaces: String {
    String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
  }
}
