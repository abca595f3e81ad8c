import Glibc
import LoopDispatch

/// `Examples serve [--port N] [--idle-timeout-ms N]`: an HTTP/1.1 keep-alive server on
/// 127.0.0.1, the runtime's main job.
///
/// Where things run:
/// - the listening socket is a `ReadSource` on the main queue (accept on the main loop);
/// - each connection has its own serial queue with a read source and a write source;
/// - CPU work (`/hash?bytes=N`) runs on a global queue and answers on the connection's queue;
/// - idle connections are closed by `after` timers;
/// - SIGINT and SIGTERM arrive through `SignalSource`s on the main queue: the server stops
///   accepting, lets in-flight requests finish, closes idle connections and exits 0.
func runServe(_ arguments: [String]) -> Int32 {
  var port: UInt16 = 8080
  var idleTimeout = Duration.seconds(10)
  var index = 0
  while index < arguments.count {
    let flag = arguments[index]
    let value = index + 1 < arguments.count ? arguments[index + 1] : nil
    switch (flag, value.flatMap { Int($0) }) {
    case ("--port", let number?) where (0...65535).contains(number):
      port = UInt16(number)
    case ("--idle-timeout-ms", let number?) where number > 0:
      idleTimeout = .milliseconds(number)
    default:
      Log.error("serve: bad argument '\(flag)'; usage: serve [--port N] [--idle-timeout-ms N]")
      return 2
    }
    index += 2
  }
  // A peer that resets its connection must not kill the server with SIGPIPE.
  signal(SIGPIPE, SIG_IGN)
  let listener: Int32
  do {
    listener = try makeListeningSocket(port: port)
  } catch {
    Log.error("serve: \(error)")
    return 1
  }
  let server: HTTPServer
  do {
    server = try HTTPServer(listener: listener, idleTimeout: idleTimeout)
  } catch {
    Log.error("serve: \(error)")
    return 1
  }
  server.start()
  Log.info("listening on http://127.0.0.1:\(boundPort(listener))/ (Ctrl-C to stop)")
  // `runMain()` never returns, so nothing after it uses `server`: without this an optimised
  // build may release it (and its sources, closing the listening socket) right away.
  withExtendedLifetime(server) { Queue.runMain() }
}

struct SocketError: Error, CustomStringConvertible {
  let call: String
  let code: Int32
  var description: String { "\(call) failed: \(String(cString: strerror(code)))" }
}

/// A non-blocking TCP socket listening on 127.0.0.1:`port` (0 picks a free port).
func makeListeningSocket(port: UInt16) throws(SocketError) -> Int32 {
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
func boundPort(_ fd: Int32) -> UInt16 {
  var address = sockaddr_in()
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  _ = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
  }
  return UInt16(bigEndian: address.sin_port)
}

/// Unbuffered logging (stdout may be a pipe; lines must appear at once).
enum Log {
  static func info(_ line: String) { write(1, line + "\n") }
  static func error(_ line: String) { write(2, line + "\n") }
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
