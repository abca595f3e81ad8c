import Glibc

// The listening socket and unbuffered logging shared by `Examples serve` and the
// Benchmarks package's DispatchServe, so both servers use identical code around the
// runtime they compare.

public struct SocketError: Error, CustomStringConvertible {
  public let call: String
  public let code: Int32
  public var description: String { "\(call) failed: \(String(cString: strerror(code)))" }
}

/// A non-blocking TCP socket listening on 127.0.0.1:`port` (0 picks a free port).
public func makeListeningSocket(port: UInt16) throws(SocketError) -> Int32 {
  let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
  if fd < 0 { throw SocketError(call: "socket", code: errno) }
  var yes: Int32 = 1
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_port = port.bigEndian
  address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
  let bound = withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
      bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
    }
  }
  if bound != 0 {
    let code = errno
    close(fd)
    throw SocketError(call: "bind 127.0.0.1:\(port)", code: code)
  }
  if listen(fd, 512) != 0 {
    let code = errno
    close(fd)
    throw SocketError(call: "listen", code: code)
  }
  return fd
}

/// The port `fd` is bound to.
public func boundPort(_ fd: Int32) -> UInt16 {
  var address = sockaddr_in()
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  _ = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
  }
  return UInt16(bigEndian: address.sin_port)
}

/// Unbuffered logging (stdout may be a pipe; lines must appear at once).
public enum Log {
  public static func info(_ line: String) { write(1, line + "\n") }
  public static func error(_ line: String) { write(2, line + "\n") }
  private static func write(_ fd: Int32, _ text: String) {
    var copy = text
    copy.withUTF8 { bytes in
      var offset = 0
      while offset < bytes.count {
        let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
        if n <= 0 { return }
        offset += n
      }
    }
  }
}
