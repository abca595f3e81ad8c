import Glibc

/// The first `limit` bytes of a small file (a `/proc` or cgroup file), or nil if it cannot be
/// read.
func readSmallTextFile(_ path: String, limit: Int) -> String? {
  let fd = open(path, O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return nil }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: limit)
  let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
  guard count > 0 else { return nil }
  return String(decoding: buffer[..<count], as: UTF8.self)
}
