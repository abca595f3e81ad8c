import Glibc

/// The first 4 KiB of a small file (a /proc entry, a test's output), or "" if it cannot be
/// opened or read. One `read`: enough for the /proc files the tests look at.
public func readSmallFile(_ path: String) -> String {
  let fd = open(path, O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return "" }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: 4_096)
  let count = read(fd, &buffer, buffer.count)
  return count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : ""
}
