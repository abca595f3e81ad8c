import Glibc

/// A connected AF_UNIX stream socket pair, both ends non-blocking and close-on-exec.
struct SocketPair {
  let a: Int32
  let b: Int32

  /// Creates the pair; traps if the system refuses.
  static func make() -> SocketPair {
    var fds: [Int32] = [-1, -1]
    let type =
      Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
    if socketpair(AF_UNIX, type, 0, &fds) != 0 {
      benchmarkFailure("socketpair failed: errno \(errno)")
    }
    return SocketPair(a: fds[0], b: fds[1])
  }

  func close() {
    _ = Glibc.close(a)
    _ = Glibc.close(b)
  }
}
